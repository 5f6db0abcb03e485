/*
 * test_pool.c: the compute thread pool: every index covered exactly once per run, many runs in a
 * row (spinning and sleeping workers), the NULL pool, a NULL pool used inside a task (no nesting
 * of the same pool), create/free cycles, bad sizes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#define N_ITEMS 1000

struct cover {
    _Atomic int hits[N_ITEMS];
    _Atomic int calls;
    _Atomic int bad_nth;
    int nth_expected;
};

static void cover_fn(void *ctx, int ith, int nth)
{
    struct cover *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (nth != c->nth_expected || ith < 0 || ith >= nth)
        atomic_fetch_add(&c->bad_nth, 1);
    int lo, hi;
    ll_split(N_ITEMS, ith, nth, &lo, &hi);
    for (int i = lo; i < hi; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

static void check_cover(struct ll_pool *pool, int nth)
{
    static struct cover c;
    memset(&c, 0, sizeof c);
    c.nth_expected = nth;
    ll_pool_run(pool, cover_fn, &c);
    assert_int_equal(atomic_load(&c.calls), nth);
    assert_int_equal(atomic_load(&c.bad_nth), 0);
    for (int i = 0; i < N_ITEMS; i++)
        assert_int_equal(atomic_load(&c.hits[i]), 1);
}

static void test_split(void **state)
{
    (void)state;
    for (int n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            int expect_lo = 0;
            for (int ith = 0; ith < nth; ith++) {
                int lo, hi;
                ll_split(n, ith, nth, &lo, &hi);
                assert_int_equal(lo, expect_lo);
                assert_true(hi >= lo && hi - lo <= n / nth + 1);
                expect_lo = hi;
            }
            assert_int_equal(expect_lo, n);
        }
}

static void test_null_pool(void **state)
{
    (void)state;
    assert_int_equal(ll_pool_size(NULL), 1);
    check_cover(NULL, 1);
    ll_pool_free(NULL);
}

static void test_cover_sizes(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++) {
        struct ll_pool *pool;
        struct ll_err err;
        assert_int_equal(ll_pool_create(&pool, n, &err), LL_OK);
        assert_int_equal(ll_pool_size(pool), n);
        for (int run = 0; run < 2000; run++)
            check_cover(pool, n);
        ll_pool_free(pool);
    }
}

/* Runs separated by pauses longer than the spin time, so workers go to sleep and are woken. */
static void test_sleep_wake(void **state)
{
    (void)state;
    struct ll_pool *pool;
    assert_int_equal(ll_pool_create(&pool, 3, NULL), LL_OK);
    for (int run = 0; run < 20; run++) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
        check_cover(pool, 3);
    }
    ll_pool_free(pool);
}

/* A task that is slow on one thread: the caller must wait for it (and may fall asleep). */
static void slow_fn(void *ctx, int ith, int nth)
{
    _Atomic int *done = ctx;
    (void)nth;
    if (ith == 1) {
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(done, 1);
}

static void test_waits_for_slow_worker(void **state)
{
    (void)state;
    struct ll_pool *pool;
    assert_int_equal(ll_pool_create(&pool, 2, NULL), LL_OK);
    for (int run = 0; run < 5; run++) {
        _Atomic int done = 0;
        ll_pool_run(pool, slow_fn, &done);
        assert_int_equal(atomic_load(&done), 2);
    }
    ll_pool_free(pool);
}

/* The spin budget collapses while a thread keeps arriving late and grows back afterwards:
 * alternate slow and fast ops many times; every op must still cover each item exactly once. */
static void test_late_then_prompt(void **state)
{
    (void)state;
    struct ll_pool *pool;
    assert_int_equal(ll_pool_create(&pool, 3, NULL), LL_OK);
    for (int round = 0; round < 4; round++) {
        for (int run = 0; run < 6; run++) {
            _Atomic int done = 0;
            ll_pool_run(pool, slow_fn, &done);
            assert_int_equal(atomic_load(&done), 3);
        }
        for (int run = 0; run < 200; run++)
            check_cover(pool, 3);
    }
    ll_pool_free(pool);
}

/* Inside a task, kernels that get a NULL pool run inline on that thread. */
struct nested {
    _Atomic int inner_calls;
};

static void inner_fn(void *ctx, int ith, int nth)
{
    struct nested *n = ctx;
    if (ith == 0 && nth == 1)
        atomic_fetch_add(&n->inner_calls, 1);
}

static void outer_fn(void *ctx, int ith, int nth)
{
    (void)ith;
    (void)nth;
    ll_pool_run(NULL, inner_fn, ctx);
}

static void test_nested_null(void **state)
{
    (void)state;
    struct ll_pool *pool;
    assert_int_equal(ll_pool_create(&pool, 2, NULL), LL_OK);
    struct nested n = {0};
    for (int run = 0; run < 100; run++)
        ll_pool_run(pool, outer_fn, &n);
    assert_int_equal(atomic_load(&n.inner_calls), 200);
    ll_pool_free(pool);
}

static void test_create_free_cycles(void **state)
{
    (void)state;
    for (int i = 0; i < 200; i++) {
        struct ll_pool *pool;
        assert_int_equal(ll_pool_create(&pool, 1 + i % 4, NULL), LL_OK);
        if (i % 2)
            check_cover(pool, 1 + i % 4);
        ll_pool_free(pool); /* also right after create, workers possibly not yet waiting */
    }
}

static void test_bad_size(void **state)
{
    (void)state;
    struct ll_pool *pool = (struct ll_pool *)1;
    struct ll_err err;
    assert_int_equal(ll_pool_create(&pool, 0, &err), LL_EINVAL);
    assert_null(pool);
    assert_non_null(strstr(err.msg, "threads"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_null_pool),
        cmocka_unit_test(test_cover_sizes),
        cmocka_unit_test(test_sleep_wake),
        cmocka_unit_test(test_waits_for_slow_worker),
        cmocka_unit_test(test_late_then_prompt),
        cmocka_unit_test(test_nested_null),
        cmocka_unit_test(test_create_free_cycles),
        cmocka_unit_test(test_bad_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
