/* test_live.c: the in-flight table and its watcher (src/server/live.c) on entries of its own,
 * without a server: cancellation by id and for all (the first reason wins), the time limit,
 * a client hang-up seen on a socket, and unregistering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/server/live.h"
#include "util.h"

static void count_cancel(void *owner)
{
    atomic_fetch_add((atomic_int *)owner, 1);
}

/* Wait up to 10 s for *n to reach want (the watcher runs on its own thread). */
static bool wait_count(atomic_int *n, int want)
{
    for (double end = ll_now() + 10; ll_now() < end; poll(NULL, 0, 5))
        if (atomic_load(n) >= want)
            return true;
    return false;
}

static void test_cancel_by_id(void **state)
{
    (void)state;
    struct live_table *t;
    struct ll_err err = {0};
    assert_int_equal(live_create(&t, &err), LL_OK);
    atomic_int n = 0, m = 0;
    struct live_entry a = {.fd = -1, .id = "cmpl-1", .xrid = "req-a", .cancel = count_cancel,
                           .owner = &n};
    struct live_entry b = {.fd = -1, .id = "cmpl-2", .xrid = "req-b", .cancel = count_cancel,
                           .owner = &m};
    live_add(t, &a);
    live_add(t, &b);
    assert_int_equal(live_count(t), 2);
    assert_int_equal(live_cancel_id(t, "nope", 0), 0);
    assert_int_equal(live_cancel_id(t, "req-a", 0), 1); /* by X-Request-Id */
    assert_int_equal(live_cancel_id(t, "cmpl-2", 0), 1); /* by response id */
    assert_int_equal(atomic_load(&n), 1);
    assert_int_equal(atomic_load(&m), 1);
    assert_int_equal(atomic_load(&a.reason), CANCEL_ROUTE);
    live_cancel_all(t, CANCEL_SHUTDOWN);
    assert_int_equal(atomic_load(&n), 2);
    assert_int_equal(atomic_load(&a.reason), CANCEL_ROUTE); /* the first reason stays */
    live_remove(t, &a);
    live_remove(t, &a); /* a no-op */
    assert_int_equal(live_count(t), 1);
    assert_int_equal(live_cancel_id(t, "req-a", 0), 0);
    assert_int_equal(atomic_load(&n), 2);
    live_remove(t, &b);
    assert_int_equal(live_count(t), 0);
    live_destroy(t);
}

/* A key cancels only its own requests, even when another key's request has the same id. */
static void test_cancel_owned_only(void **state)
{
    (void)state;
    struct live_table *t;
    struct ll_err err = {0};
    assert_int_equal(live_create(&t, &err), LL_OK);
    atomic_int n = 0, m = 0;
    struct live_entry a = {.fd = -1, .id = "cmpl-1", .xrid = "same", .cancel = count_cancel,
                           .owner = &n, .key = 0};
    struct live_entry b = {.fd = -1, .id = "cmpl-2", .xrid = "same", .cancel = count_cancel,
                           .owner = &m, .key = 1};
    live_add(t, &a);
    live_add(t, &b);
    assert_int_equal(live_cancel_id(t, "cmpl-1", 1), 0); /* key 1 cannot see key 0's job */
    assert_int_equal(atomic_load(&n), 0);
    assert_int_equal(live_cancel_id(t, "same", 1), 1); /* only key 1's own "same" */
    assert_int_equal(atomic_load(&n), 0);
    assert_int_equal(atomic_load(&m), 1);
    assert_int_equal(live_cancel_id(t, "same", 0), 1);
    assert_int_equal(atomic_load(&n), 1);
    live_remove(t, &a);
    live_remove(t, &b);
    live_destroy(t);
}

static void test_deadline_and_hangup(void **state)
{
    (void)state;
    struct live_table *t;
    struct ll_err err = {0};
    assert_int_equal(live_create(&t, &err), LL_OK);
    atomic_int n_late = 0, n_gone = 0;
    struct live_entry late = {.fd = -1, .deadline = ll_now() + 0.05, .id = "late",
                              .cancel = count_cancel, .owner = &n_late};
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct live_entry gone = {.fd = sv[0], .id = "gone", .cancel = count_cancel,
                              .owner = &n_gone};
    live_add(t, &late);
    live_add(t, &gone);
    assert_true(wait_count(&n_late, 1));
    assert_true(atomic_load(&late.timed_out));
    assert_int_equal(atomic_load(&late.reason), CANCEL_TIMEOUT);
    assert_false(atomic_load(&gone.client_gone));
    assert_int_equal(atomic_load(&n_gone), 0);
    close(sv[1]); /* the client hangs up */
    assert_true(wait_count(&n_gone, 1));
    assert_true(atomic_load(&gone.client_gone));
    assert_int_equal(atomic_load(&gone.reason), CANCEL_DISCONNECT);
    live_remove(t, &late);
    live_remove(t, &gone);
    live_destroy(t);
    close(sv[0]);
    assert_int_equal(atomic_load(&n_late), 1); /* each cancelled once */
    assert_int_equal(atomic_load(&n_gone), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_by_id),
        cmocka_unit_test(test_cancel_owned_only),
        cmocka_unit_test(test_deadline_and_hangup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
