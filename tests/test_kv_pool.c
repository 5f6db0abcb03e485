/*
 * test_kv_pool.c: the KV block pool and prefix cache as plain integers (kv_pool.h), without a
 * model: allocation and exhaustion, reference counts and sharing, hash chains and lookups with
 * token comparison, lazy eviction oldest first, and a randomised run of sequences that checks
 * every invariant after every operation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pool.h"

enum { BS = 4 };

static void fill(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

static void test_init_errors(void **state)
{
    (void)state;
    struct kv_pool p;
    struct ll_err err = {0};
    assert_int_equal(kv_pool_init(&p, 0, BS, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "0 blocks"));
    assert_int_equal(kv_pool_init(&p, 4, 0, &err), LL_EINVAL);
    kv_pool_free(&p);
    kv_pool_free(&p); /* twice is fine */
}

static void test_alloc_exhaust(void **state)
{
    (void)state;
    struct kv_pool p;
    assert_int_equal(kv_pool_init(&p, 8, BS, NULL), LL_OK);
    int got[8];
    uint8_t seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(kv_pool_n_free(&p), 8 - i);
        got[i] = kv_pool_alloc(&p);
        assert_true(got[i] >= 0 && got[i] < 8);
        assert_false(seen[got[i]]);
        seen[got[i]] = 1;
        assert_true(kv_pool_check(&p));
    }
    /* No room: -1, repeatedly, and nothing changes. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kv_pool_alloc(&p), -1);
        assert_int_equal(kv_pool_n_free(&p), 0);
        assert_true(kv_pool_check(&p));
    }
    struct kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 8);
    assert_int_equal(st.free, 0);
    kv_pool_release_table(&p, got, 8);
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.free, 8);
    assert_int_equal(st.cached, 0);
    assert_true(kv_pool_check(&p));
    kv_pool_free(&p);
}

static void test_share_and_cache(void **state)
{
    (void)state;
    struct kv_pool p;
    assert_int_equal(kv_pool_init(&p, 4, BS, NULL), LL_OK);
    int32_t t0[BS], t1[BS];
    fill(t0, BS, 100);
    fill(t1, BS, 200);
    uint64_t h0 = kv_pool_hash_block(0, t0, BS), h1 = kv_pool_hash_block(h0, t1, BS);
    assert_int_not_equal(h0, h1);
    assert_int_not_equal(kv_pool_hash_block(0, t1, BS), h1); /* the chain matters */

    int a = kv_pool_alloc(&p), b = kv_pool_alloc(&p);
    assert_int_equal(kv_pool_lookup(&p, h0, 0, t0), -1);
    assert_true(kv_pool_publish(&p, a, h0, 0, t0));
    assert_true(kv_pool_publish(&p, b, h1, h0, t1));
    assert_false(kv_pool_publish(&p, a, h0, 0, t0)); /* already hashed */
    assert_int_equal(kv_pool_lookup(&p, h0, 0, t0), a);
    assert_int_equal(kv_pool_lookup(&p, h1, h0, t1), b);
    /* The same hash with other tokens or another parent is not a hit. */
    int32_t other[BS];
    fill(other, BS, 300);
    assert_int_equal(kv_pool_lookup(&p, h0, 0, other), -1);
    assert_int_equal(kv_pool_lookup(&p, h1, 12345, t1), -1);
    /* A second block with the same content is not published twice. */
    int c = kv_pool_alloc(&p);
    assert_false(kv_pool_publish(&p, c, h0, 0, t0));
    assert_true(kv_pool_check(&p));

    /* Share a (a prefix hit from a second sequence). */
    kv_pool_ref(&p, a);
    struct kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 3);
    assert_int_equal(st.shared, 1);
    kv_pool_release(&p, a);
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 3);
    assert_int_equal(st.shared, 0);

    /* Released blocks keep their hash (cached); the unhashed one is free. */
    int table[3] = {a, b, c};
    kv_pool_release_table(&p, table, 3);
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 0);
    assert_int_equal(st.cached, 2);
    assert_int_equal(st.free, 2);
    assert_int_equal(kv_pool_lookup(&p, h0, 0, t0), a);
    assert_true(kv_pool_check(&p));

    /* A hit on a cached block revives it without allocating. */
    kv_pool_ref(&p, a);
    assert_int_equal(kv_pool_n_free(&p), 3);
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 1);
    assert_int_equal(st.cached, 1);
    kv_pool_release(&p, a);
    assert_true(kv_pool_check(&p));

    /* The checker notices corruption (a queued block with a reference, a lost hash). */
    p.ref[a] = 1;
    assert_false(kv_pool_check(&p));
    p.ref[a] = 0;
    p.hashed[b] = 0;
    assert_false(kv_pool_check(&p));
    p.hashed[b] = 1;
    assert_true(kv_pool_check(&p));

    /* Reset forgets hashes. */
    kv_pool_reset(&p);
    assert_int_equal(kv_pool_lookup(&p, h0, 0, t0), -1);
    assert_int_equal(kv_pool_n_free(&p), 4);
    assert_true(kv_pool_check(&p));
    kv_pool_free(&p);
}

/* Free blocks are used before cached ones; cached ones are evicted oldest first, and a
 * table's tail blocks before its head. */
static void test_eviction_order(void **state)
{
    (void)state;
    struct kv_pool p;
    assert_int_equal(kv_pool_init(&p, 6, BS, NULL), LL_OK);
    int blk[6];
    int32_t toks[6][BS];
    uint64_t h[6];
    for (int i = 0; i < 6; i++) {
        blk[i] = kv_pool_alloc(&p);
        fill(toks[i], BS, 10 * i);
        h[i] = kv_pool_hash_block(i ? h[i - 1] : 0, toks[i], BS);
    }
    /* Sequence X holds blocks 0..2 (hashed), Y holds 3..4 (hashed), 5 stays unhashed. */
    for (int i = 0; i < 5; i++)
        assert_true(kv_pool_publish(&p, blk[i], h[i], i ? h[i - 1] : 0, toks[i]));
    kv_pool_release_table(&p, blk, 3);     /* X finishes first: 2, 1, 0 queued */
    kv_pool_release_table(&p, blk + 3, 2); /* then Y: 4, 3 */
    kv_pool_release(&p, blk[5]);           /* unhashed: goes first */
    assert_true(kv_pool_check(&p));
    int want[6] = {blk[5], blk[2], blk[1], blk[0], blk[4], blk[3]};
    for (int i = 0; i < 6; i++) {
        int b = kv_pool_alloc(&p);
        assert_int_equal(b, want[i]);
        if (i >= 1) /* the evicted block's hash is gone */
            for (int k = 0; k < 5; k++)
                if (blk[k] == b)
                    assert_int_equal(kv_pool_lookup(&p, h[k], k ? h[k - 1] : 0, toks[k]), -1);
        assert_true(kv_pool_check(&p));
    }
    assert_int_equal(kv_pool_alloc(&p), -1);
    kv_pool_free(&p);
}

/* Random sequences that share prefixes, grow, finish and get preempted, against a shadow count
 * of references; every invariant is checked after every operation, and at the end the pool is
 * empty (no block referenced). */
enum { NSEQ = 12, MAXB = 10, NBLK = 40 };

struct sim_seq {
    int live;
    int n;            /* blocks */
    int blocks[MAXB];
    int32_t toks[MAXB][BS];
    uint64_t hash[MAXB];
};

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static void test_random_invariants(void **state)
{
    (void)state;
    struct kv_pool p;
    assert_int_equal(kv_pool_init(&p, NBLK, BS, NULL), LL_OK);
    static struct sim_seq s[NSEQ];
    memset(s, 0, sizeof s);
    int shadow[NBLK] = {0};
    int hits = 0, no_room = 0;
    for (int step = 0; step < 20000; step++) {
        struct sim_seq *q = &s[rnd(NSEQ)];
        int op = (int)rnd(10);
        if (!q->live) {
            /* Start: tokens from a small alphabet so prefixes repeat; share what is cached. */
            q->live = 1;
            q->n = 0;
            int want = 1 + (int)rnd(MAXB);
            for (int i = 0; i < want; i++) {
                for (int k = 0; k < BS; k++)
                    q->toks[i][k] = (int32_t)(i < 3 ? rnd(2) : rnd(1000));
                q->hash[i] = kv_pool_hash_block(i ? q->hash[i - 1] : 0, q->toks[i], BS);
                int b = kv_pool_lookup(&p, q->hash[i], i ? q->hash[i - 1] : 0, q->toks[i]);
                if (b >= 0) {
                    kv_pool_ref(&p, b);
                    shadow[b]++;
                    q->blocks[q->n++] = b;
                    hits++;
                    continue;
                }
                int nb = kv_pool_alloc(&p);
                if (nb < 0) {
                    no_room++;
                    break;
                }
                assert_int_equal(shadow[nb], 0);
                shadow[nb] = 1;
                q->blocks[q->n++] = nb;
                kv_pool_publish(&p, nb, q->hash[i], i ? q->hash[i - 1] : 0, q->toks[i]);
            }
        } else if (op < 7 && q->n < MAXB) {
            /* Grow by one new block, published with probability 1/2. */
            int nb = kv_pool_alloc(&p);
            if (nb < 0) {
                no_room++;
                assert_int_equal(kv_pool_n_free(&p), 0);
            } else {
                assert_int_equal(shadow[nb], 0);
                shadow[nb] = 1;
                int i = q->n;
                for (int k = 0; k < BS; k++)
                    q->toks[i][k] = (int32_t)rnd(1000);
                q->hash[i] = kv_pool_hash_block(i ? q->hash[i - 1] : 0, q->toks[i], BS);
                q->blocks[q->n++] = nb;
                if (rnd(2))
                    kv_pool_publish(&p, nb, q->hash[i], i ? q->hash[i - 1] : 0, q->toks[i]);
            }
        } else {
            /* Finish or preempt: release the whole table. */
            for (int i = 0; i < q->n; i++)
                shadow[q->blocks[i]]--;
            kv_pool_release_table(&p, q->blocks, q->n);
            q->live = 0;
            q->n = 0;
        }
        assert_true(kv_pool_check(&p));
        int in_use = 0;
        for (int b = 0; b < NBLK; b++) {
            assert_int_equal(p.ref[b], shadow[b]);
            in_use += shadow[b] > 0;
        }
        struct kv_pool_stats st;
        kv_pool_get_stats(&p, &st);
        assert_int_equal(st.in_use, in_use);
        assert_int_equal(st.in_use + st.cached + st.free, NBLK);
    }
    for (int i = 0; i < NSEQ; i++)
        if (s[i].live)
            kv_pool_release_table(&p, s[i].blocks, s[i].n);
    struct kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    assert_int_equal(st.in_use, 0);
    assert_true(kv_pool_check(&p));
    assert_true(hits > 100);    /* sharing really happened */
    assert_true(no_room > 100); /* and exhaustion */
    kv_pool_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_alloc_exhaust),
        cmocka_unit_test(test_share_and_cache),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
