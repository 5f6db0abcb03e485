/*
 * test_engine.c: the engine (engine.h) on the tiny-qwen2 fixture: batched greedy outputs equal
 * single-request outputs and the plain runtime; seeded sampling is identical alone, in a batch
 * of 16 others, after preemption (a tiny pool, with and without the prefix cache) and with its
 * prefix served from the cache; a prefix hit gives bit-identical logits (runtime + kv_pool);
 * cancel in every state leaves the pool empty; impossible requests and a full queue are
 * rejected; stop ids, eos, default max_tokens; a mixed run (shared prefixes, staggered
 * arrivals, cancels, a tiny pool) gives the same tokens as a roomy one; the threaded mode with
 * pollers on other threads, and callers that cancel or walk away while their requests finish;
 * text deltas add up to the decoded text. The determinism checks (greedy batched == alone ==
 * the plain runtime; seeded alone, batched, preempted, prefix-cached; a prefix hit's logits) run
 * again with the weights quantized at load to q8_0, q4_0 and q4_k (--quant). A request that
 * fails inside the forward pass (the mock family's fail_token) fails alone: the requests of its
 * steps give exactly the output of a run without the fault, the pool ends empty; bad fault fields
 * are refused naming them.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "engine_harness.h"
#include "kv_pool.h"
#include "matmul.h"
#include "model.h"
#include "ops.h"
#include "runtime.h"
#include "sampler.h"
#include "tokenizer.h"

/* ---- greedy: batched == alone == the plain runtime ---- */

enum { NG = 6 };
static int32_t g_prompts[NG][64];
static const int g_len[NG] = {3, 17, 40, 16, 33, 9};

static void greedy_params(struct engine_params *p)
{
    for (int i = 0; i < NG; i++) {
        make_prompt(g_prompts[i], g_len[i], 500 + (uint64_t)i);
        p[i] = (struct engine_params){.prompt = g_prompts[i], .n_prompt = g_len[i],
                                      .max_tokens = 6 + i, .ignore_eos = true};
    }
}

/* quant: engine_opts.quant (0: the weights as stored; 1, 2, 3, 4: q8_0, q4_0, q4_k, q4_k_m
 * quantized at load; 5: bf16p, packed at load). */
static void greedy_batched_equals_alone(int quant)
{
    struct engine_params p[NG];
    greedy_params(p);
    struct engine_opts o = {.n_ctx = 256, .max_seqs = 8, .max_batch_tokens = 24, .quant = quant};
    struct result alone[NG], batch[NG];
    run_each_alone(o, p, NG, alone);
    o.n_threads = 2; /* and another thread count */
    struct engine *e = make_engine(o);
    run_together(e, p, NG, batch);
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_true(st.steps > 1);
    engine_destroy(e);
    for (int i = 0; i < NG; i++) {
        assert_int_equal(alone[i].n, 6 + i);
        assert_int_equal(alone[i].finish, ENGINE_FINISH_LENGTH);
        assert_int_equal(alone[i].usage.completion_tokens, 6 + i);
        assert_int_equal(alone[i].usage.prompt_tokens, g_len[i]);
        assert_same(&alone[i], &batch[i]);
    }

    /* The plain runtime's greedy loop (one contiguous sequence) gives the same tokens. */
    struct ll_err err = {0};
    struct model *m;
    struct model_open_opts mo = engine_opts_model_open(&o);
    assert_int_equal(model_open(&m, FIXTURE, &mo, &err), LL_OK);
    const bool packing = !strcmp(engine_quant_names[quant], "bf16p");
    assert_int_equal(m->quantized, quant != 0 && !packing);
    assert_int_equal(m->pkmem != NULL, packing && ll_matmul_reads_packed(NULL));
    struct runtime_opts ro = {.n_ctx = 256, .n_threads = 1, .math = LL_MATH_FAST};
    struct model_runtime *rt;
    assert_int_equal(runtime_create(&rt, m, &ro, &err), LL_OK);
    int V = m->config.vocab_size;
    float *logits = malloc(sizeof(float) * V);
    for (int i = 0; i < NG; i++) {
        int32_t pos[64];
        uint8_t want[64] = {0};
        for (int j = 0; j < g_len[i]; j++)
            pos[j] = j;
        want[g_len[i] - 1] = 1;
        struct ll_batch b = {.n_tokens = g_len[i], .token = g_prompts[i], .pos = pos,
                             .want_logits = want};
        assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
        for (int k = 0; k < alone[i].n; k++) {
            int32_t t = ll_argmax(logits, V), ps = g_len[i] + k;
            assert_int_equal(t, alone[i].ids[k]);
            struct ll_batch d = {.n_tokens = 1, .token = &t, .pos = &ps};
            assert_int_equal(runtime_forward(rt, &d, logits, &err), LL_OK);
        }
    }
    free(logits);
    runtime_free(rt);
    model_close(m);
}

static void test_greedy_batched_equals_alone(void **state)
{
    (void)state;
    greedy_batched_equals_alone(0);
}

/* The same with q8_0, q4_0, q4_k and q4_k_m (two types in one model) weights (the integer GEMM
 * keeps a row independent of the batch) and with bf16p weights (decode reads the packed planes,
 * prefill the bf16 matrix). */
static void test_greedy_batched_equals_alone_quant(void **state)
{
    (void)state;
    greedy_batched_equals_alone(1);
    greedy_batched_equals_alone(2);
    greedy_batched_equals_alone(3);
    greedy_batched_equals_alone(4);
    greedy_batched_equals_alone(5);
}

/* ---- seeded sampling: alone, batched, preempted, prefix-cached ---- */

static int32_t x_prompt[40];

static struct engine_params x_params(void)
{
    make_prompt(x_prompt, 36, 4242);
    return (struct engine_params){
        .prompt = x_prompt, .n_prompt = 36, .max_tokens = 12, .ignore_eos = true,
        .sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = 1234},
    };
}

static void test_seeded_determinism(void **state)
{
    (void)state;
    struct engine_params x = x_params(), others[16];
    other_params(others, 16);
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 17, .max_batch_tokens = 48};
    struct result alone;
    assert_deterministic(o, &x, others, &alone);
    assert_int_equal(alone.n, 12);
    assert_int_equal(alone.usage.cached_tokens, 0);
    assert_int_equal(alone.usage.preemptions, 0);

    /* Another seed gives something else. */
    struct engine_params x2 = x;
    x2.sampling.seed = 4321;
    struct result other;
    run_each_alone(o, &x2, 1, &other);
    assert_int_equal(other.n, 12);
    assert_true(memcmp(other.ids, alone.ids, sizeof(int32_t) * 12) != 0);

    /* A second choice index draws differently from the same seed. */
    struct engine_params xc = x;
    xc.choice = 1;
    run_each_alone(o, &xc, 1, &other);
    assert_true(memcmp(other.ids, alone.ids, sizeof(int32_t) * 12) != 0);
}

/* Alone, batched, preempted and prefix-cached give the same tokens with q8_0, q4_0, q4_k and
 * q4_k_m weights quantized at load and with bf16p weights, and the quantized weights change what is
 * sampled (q4_0 on this fixture) while bf16p's do not. */
static void test_seeded_determinism_quant(void **state)
{
    (void)state;
    struct engine_params x = x_params(), others[16];
    other_params(others, 16);
    struct result plain, res[6];
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 17, .max_batch_tokens = 48};
    run_each_alone(o, &x, 1, &plain);
    for (int quant = 1; quant <= 5; quant++) {
        o.quant = quant;
        assert_deterministic(o, &x, others, &res[quant]);
        assert_int_equal(res[quant].n, 12);
    }
    assert_true(memcmp(plain.ids, res[2].ids, sizeof(int32_t) * 12) != 0);
    /* bf16p is lossless: the tokens of the weights as stored */
    assert_string_equal(engine_quant_names[5], "bf16p");
    assert_memory_equal(plain.ids, res[5].ids, sizeof(int32_t) * 12);
}

/* Prefix running concurrently: a request whose prompt extends a still-running request's
 * computed blocks shares them. */
static void test_prefix_of_running_request(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256, .max_seqs = 4, .max_batch_tokens = 64};
    struct engine *e = make_engine(o);
    int32_t a[80], b[80];
    make_prompt(a, 48, 31);
    memcpy(b, a, sizeof b);
    make_prompt(b + 48, 8, 32);
    struct engine_params pa = {.prompt = a, .n_prompt = 48, .max_tokens = 20, .ignore_eos = true};
    struct engine_params pb = {.prompt = b, .n_prompt = 56, .max_tokens = 5, .ignore_eos = true};
    struct engine_req *ra = submit(e, &pa);
    bool did;
    struct ll_err err = {0};
    assert_int_equal(engine_step(e, &did, &err), LL_OK); /* a's prompt computed */
    assert_int_equal(engine_step(e, &did, &err), LL_OK); /* a decodes */
    struct engine_req *rb = submit(e, &pb);
    run_idle(e);
    struct result resa = {0}, resb = {0}, solo;
    drain(ra, &resa);
    drain(rb, &resb);
    assert_int_equal(resb.usage.cached_tokens, 48);
    assert_int_equal(resa.usage.cached_tokens, 0);
    engine_req_release(ra);
    engine_req_release(rb);
    assert_pool_empty(e);
    engine_destroy(e);
    run_each_alone(o, &pb, 1, &solo);
    assert_int_equal(solo.usage.cached_tokens, 0);
    assert_same(&solo, &resb);
}

/* ---- pins (sessions): a pinned prefix survives other traffic; pins never block ---- */

static void test_pins(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 4, .max_batch_tokens = 64,
                            .block_size = 16, .kv_blocks = 8};
    struct engine *e = make_engine(o);
    engine_set_pin_limit(e, 8);
    int32_t a[80], other[120];
    make_prompt(a, 40, 71);
    struct engine_params pa = {.prompt = a, .n_prompt = 40, .max_tokens = 10, .ignore_eos = true,
                               .pin_key = 7};
    struct engine_req *r = submit(e, &pa);
    run_idle(e);
    struct result ra = {0};
    drain(r, &ra);
    engine_req_release(r);
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.pins, 1);
    assert_int_equal(st.kv_pinned, 3); /* 49 computed tokens: 3 full blocks */
    assert_int_equal(engine_pinned_blocks(e, 7), 3);

    /* other traffic that cycles the 5 unpinned blocks twice: the pinned prefix stays */
    for (int k = 0; k < 2; k++) {
        make_prompt(other, 60, 900 + (uint64_t)k);
        struct engine_params po = {.prompt = other, .n_prompt = 60, .max_tokens = 4,
                                   .ignore_eos = true};
        r = submit(e, &po);
        run_idle(e);
        engine_req_release(r);
    }
    memcpy(a + 40, ra.ids, 9 * sizeof *a); /* the next turn: prompt + answer + more */
    make_prompt(a + 49, 6, 72);
    pa.n_prompt = 55;
    pa.max_tokens = 4;
    r = submit(e, &pa);
    run_idle(e);
    struct result rb = {0};
    drain(r, &rb);
    engine_req_release(r);
    assert_int_equal(rb.usage.cached_tokens, 48);
    engine_get_stats(e, &st);
    assert_int_equal(st.pins, 1);
    assert_int_equal(st.preemptions, 0);

    /* a request that needs the whole pool: the pin goes first, nothing is refused or stuck */
    make_prompt(other, 110, 950);
    struct engine_params pbig = {.prompt = other, .n_prompt = 110, .max_tokens = 8,
                                 .ignore_eos = true};
    r = submit(e, &pbig);
    run_idle(e);
    struct result rc = {0};
    drain(r, &rc);
    engine_req_release(r);
    assert_int_equal(rc.finish, ENGINE_FINISH_LENGTH);
    engine_get_stats(e, &st);
    assert_int_equal(st.pins, 0);
    assert_true(st.pins_dropped >= 1);
    assert_int_equal(st.preemptions, 0);

    /* engine_unpin releases at the next step; the pin limit caps what is pinned */
    pa.n_prompt = 40;
    r = submit(e, &pa);
    run_idle(e);
    engine_req_release(r);
    assert_int_equal(engine_pinned_blocks(e, 7), 2); /* 43 computed tokens (max_tokens 4) */
    engine_unpin(e, 7);
    run_idle(e);
    bool did;
    struct ll_err err = {0};
    assert_int_equal(engine_step(e, &did, &err), LL_OK);
    assert_int_equal(engine_pinned_blocks(e, 7), 0);
    engine_set_pin_limit(e, 1);
    r = submit(e, &pa);
    run_idle(e);
    engine_req_release(r);
    assert_int_equal(engine_pinned_blocks(e, 7), 0); /* 2 blocks > the limit of 1 */
    assert_pool_empty(e);
    engine_destroy(e);
}

/* ---- a prefix hit gives bit-identical logits (runtime + kv_pool, no engine) ---- */

static void prefix_logits_mode(enum ll_math math, int quant)
{
    enum { BSZ = 16, NB = 16 };
    struct ll_err err = {0};
    struct model *m;
    struct engine_opts eo = {.n_threads = 1, .quant = quant};
    struct model_open_opts mo = engine_opts_model_open(&eo);
    assert_int_equal(model_open(&m, FIXTURE, &mo, &err), LL_OK);
    struct runtime_opts ro = {.n_ctx = NB * BSZ, .n_slots = NB * BSZ, .block_size = BSZ,
                              .max_batch = 128, .math = math};
    struct model_runtime *rt;
    assert_int_equal(runtime_create(&rt, m, &ro, &err), LL_OK);
    struct kv_pool pool;
    assert_int_equal(kv_pool_init(&pool, NB, BSZ, &err), LL_OK);
    int V = m->config.vocab_size;
    float *l_shared = malloc(sizeof(float) * V), *l_fresh = malloc(sizeof(float) * V);

    /* A: 48 tokens in 3 blocks, computed and published. */
    int32_t a[48], b[50];
    make_prompt(a, 48, 71);
    memcpy(b, a, 40 * sizeof(int32_t));
    make_prompt(b + 40, 10, 72);
    int32_t ta[3], tb[4], tc[4];
    uint64_t h[3];
    int32_t pos[64];
    for (int i = 0; i < 64; i++)
        pos[i] = i;
    for (int i = 0; i < 3; i++)
        ta[i] = kv_pool_alloc(&pool);
    struct ll_kv_seq sa = {ta, 3};
    int32_t zero[64] = {0};
    struct ll_batch ba = {.n_tokens = 48, .token = a, .pos = pos, .seq = zero, .seqs = &sa,
                          .n_seqs = 1};
    assert_int_equal(runtime_forward(rt, &ba, l_fresh, &err), LL_OK);
    for (int i = 0; i < 3; i++) {
        h[i] = kv_pool_hash_block(i ? h[i - 1] : 0, a + i * BSZ, BSZ);
        assert_true(kv_pool_publish(&pool, ta[i], h[i], i ? h[i - 1] : 0, a + i * BSZ));
    }
    kv_pool_release_table(&pool, ta, 3); /* A finished: its blocks stay cached */

    /* B: the first two blocks match (the third differs from token 40 on). */
    int n_match = 0;
    uint64_t parent = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t hb = kv_pool_hash_block(parent, b + i * BSZ, BSZ);
        int blk = kv_pool_lookup(&pool, hb, parent, b + i * BSZ);
        if (blk < 0)
            break;
        kv_pool_ref(&pool, blk);
        tb[n_match++] = blk;
        parent = hb;
    }
    assert_int_equal(n_match, 2);
    tb[2] = kv_pool_alloc(&pool);
    tb[3] = kv_pool_alloc(&pool);
    struct ll_kv_seq sb = {tb, 4};
    struct ll_batch bb = {.n_tokens = 18, .token = b + 32, .pos = pos + 32, .seq = zero,
                          .seqs = &sb, .n_seqs = 1};
    assert_int_equal(runtime_forward(rt, &bb, l_shared, &err), LL_OK);

    /* C: the same 50 tokens computed from scratch in other blocks, in two chunks. */
    for (int i = 0; i < 4; i++) {
        tc[i] = kv_pool_alloc(&pool);
        assert_true(tc[i] != tb[0] && tc[i] != tb[1]);
    }
    struct ll_kv_seq sc = {tc, 4};
    struct ll_batch c1 = {.n_tokens = 30, .token = b, .pos = pos, .seq = zero, .seqs = &sc,
                          .n_seqs = 1};
    assert_int_equal(runtime_forward(rt, &c1, l_fresh, &err), LL_OK);
    struct ll_batch c2 = {.n_tokens = 20, .token = b + 30, .pos = pos + 30, .seq = zero,
                          .seqs = &sc, .n_seqs = 1};
    assert_int_equal(runtime_forward(rt, &c2, l_fresh, &err), LL_OK);
    assert_memory_equal(l_shared, l_fresh, sizeof(float) * V);

    kv_pool_release_table(&pool, tb, 4);
    kv_pool_release_table(&pool, tc, 4);
    struct kv_pool_stats st;
    kv_pool_get_stats(&pool, &st);
    assert_int_equal(st.in_use, 0);
    assert_true(kv_pool_check(&pool));
    kv_pool_free(&pool);
    free(l_shared);
    free(l_fresh);
    runtime_free(rt);
    model_close(m);
}

static void test_prefix_hit_same_logits(void **state)
{
    (void)state;
    for (int quant = 0; quant <= 4; quant++) {
        prefix_logits_mode(LL_MATH_FAST, quant);
        prefix_logits_mode(LL_MATH_EXACT, quant);
    }
}

/* ---- cancel in every state ---- */

static void test_cancel_states(void **state)
{
    (void)state;
    int32_t ids[4][48];
    for (int i = 0; i < 4; i++)
        make_prompt(ids[i], 40, 600 + (uint64_t)i);
    struct engine_params p = {.prompt = ids[0], .n_prompt = 40, .max_tokens = 30,
                              .ignore_eos = true};
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 1, .max_batch_tokens = 16};
    struct engine *e = make_engine(o);
    struct result res;

    /* In the inbox (before any step). */
    struct engine_req *r = submit(e, &p);
    engine_cancel(r);
    engine_cancel(r); /* twice is fine */
    step_once(e);
    memset(&res, 0, sizeof res);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    assert_int_equal(res.n, 0);
    engine_req_release(r);
    assert_pool_empty(e);

    /* Running, mid-prompt (16-token chunks of a 40-token prompt), and waiting behind it. */
    r = submit(e, &p);
    p.prompt = ids[1];
    struct engine_req *w = submit(e, &p);
    step_once(e);
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.running, 1);
    assert_int_equal(st.waiting, 1);
    assert_true(st.kv_in_use > 0);
    engine_cancel(w); /* waiting */
    engine_cancel(r); /* prefilling */
    step_once(e);
    memset(&res, 0, sizeof res);
    drain(w, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    memset(&res, 0, sizeof res);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    engine_req_release(r);
    engine_req_release(w);
    assert_pool_empty(e);

    /* Decoding. */
    p.prompt = ids[2];
    r = submit(e, &p);
    for (int i = 0; i < 5; i++)
        step_once(e);
    memset(&res, 0, sizeof res);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_RUNNING);
    assert_true(res.n >= 2);
    engine_cancel(r);
    step_once(e);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    assert_true(res.usage.completion_tokens >= 2);
    engine_req_release(r);
    assert_pool_empty(e);

    /* Released by its caller while running (cancel implied), and after finishing (a no-op). */
    r = submit(e, &p);
    step_once(e);
    step_once(e);
    engine_req_release(r);
    run_idle(e);
    assert_pool_empty(e);
    p.max_tokens = 2;
    r = submit(e, &p);
    run_idle(e);
    engine_cancel(r);
    step_once(e);
    memset(&res, 0, sizeof res);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(res.n, 2);
    engine_req_release(r);
    assert_pool_empty(e);
    engine_destroy(e);

    /* Preempted (back to waiting): two requests outgrow a 4-block pool. */
    struct engine_opts t = {.n_ctx = 128, .max_seqs = 2, .max_batch_tokens = 64, .kv_blocks = 4};
    e = make_engine(t);
    struct engine_params pa = {.prompt = ids[0], .n_prompt = 20, .max_tokens = 40,
                               .ignore_eos = true};
    struct engine_params pb = pa;
    pb.prompt = ids[1];
    struct engine_req *ra = submit(e, &pa), *rb = submit(e, &pb);
    for (int i = 0; i < 40; i++) {
        step_once(e);
        engine_get_stats(e, &st);
        if (st.preemptions > 0)
            break;
    }
    assert_true(st.preemptions > 0);
    assert_int_equal(st.waiting, 1);
    assert_int_equal(st.queued, 0); /* both had started: the waiting one is the preempted one */
    engine_cancel(rb);               /* the most recently started: the victim */
    step_once(e);
    memset(&res, 0, sizeof res);
    drain(rb, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    run_idle(e);
    memset(&res, 0, sizeof res);
    drain(ra, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(res.n, 40);
    engine_req_release(ra);
    engine_req_release(rb);
    assert_pool_empty(e);

    /* Destroy with requests still queued and running; handles outlive the engine. */
    ra = submit(e, &pa);
    rb = submit(e, &pb);
    step_once(e);
    engine_destroy(e);
    memset(&res, 0, sizeof res);
    drain(ra, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_CANCELLED);
    engine_cancel(rb); /* a no-op on a finished request */
    engine_req_release(ra);
    engine_req_release(rb);
}

/* ---- rejections ---- */

static void test_rejections(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 64, .kv_blocks = 3, .block_size = 16, .max_queue = 3,
                            .max_seqs = 4};
    struct engine *e = make_engine(o);
    int32_t ids[80];
    make_prompt(ids, 80, 5);
    struct engine_req *r = NULL;
    struct ll_err err = {0};
    struct engine_params p = {.prompt = ids, .n_prompt = 0};
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_EINVAL);
    assert_null(r);
    assert_non_null(strstr(err.msg, "empty"));
    p.n_prompt = 10;
    ids[3] = 151936;
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "vocabulary"));
    ids[3] = 3;
    p.max_tokens = 60; /* 10 + 60 > 64 */
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_ETOOLONG);
    assert_non_null(strstr(err.msg, "context"));
    p.n_prompt = 64;
    p.max_tokens = 0;
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_ETOOLONG);
    /* The pool holds 48 positions: 10 + 40 tokens needs 49 → 4 blocks. */
    p.n_prompt = 10;
    p.max_tokens = 40;
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_ETOOLONG);
    assert_non_null(strstr(err.msg, "pool"));
    p.max_tokens = 39; /* exactly fits */
    p.ignore_eos = true;
    r = submit(e, &p);
    int32_t stop = -5;
    struct engine_params bad = p;
    bad.stop_ids = &stop;
    bad.n_stop_ids = 1;
    struct engine_req *r2 = NULL;
    assert_int_equal(engine_submit(e, &bad, &r2, &err), LL_EINVAL);
    struct engine_stats st;
    run_idle(e);
    struct result res = {0};
    drain(r, &res);
    assert_int_equal(res.n, 39);
    engine_req_release(r);

    /* Without max_tokens: the rest of what the context and the pool allow (49 tokens). */
    p.max_tokens = 0;
    r = submit(e, &p);
    run_idle(e);
    memset(&res, 0, sizeof res);
    drain(r, &res);
    assert_int_equal(res.finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(res.n, 39);
    engine_req_release(r);

    /* Admission counts exactly: max_seqs + max_queue = 7 requests are held before any step
     * (a burst between two steps gets every slot), the eighth is refused; a cancel frees its
     * slot at once, before the scheduler has seen it. */
    p.max_tokens = 2;
    struct engine_req *q[8];
    for (int i = 0; i < 7; i++)
        q[i] = submit(e, &p);
    engine_get_stats(e, &st);
    assert_int_equal(st.held, 7);
    assert_int_equal(st.queued, 7);
    struct engine_req *extra = NULL;
    assert_int_equal(engine_submit(e, &p, &extra, &err), LL_EOVERLOADED);
    assert_null(extra);
    assert_non_null(strstr(err.msg, "overloaded: 7 requests"));
    assert_non_null(strstr(err.msg, "--max-seqs 4"));
    assert_int_equal(ll_status_http(LL_EOVERLOADED), 429);
    engine_cancel(q[6]);
    engine_get_stats(e, &st);
    assert_int_equal(st.held, 6);
    q[7] = submit(e, &p);
    assert_int_equal(engine_submit(e, &p, &extra, &err), LL_EOVERLOADED);
    step_once(e);
    engine_get_stats(e, &st);
    assert_int_equal(st.held, 7);
    assert_true(st.queued < 7); /* some started: held still counts them */
    run_idle(e);
    engine_get_stats(e, &st);
    assert_int_equal(st.held, 0);
    assert_int_equal(st.queued, 0);
    for (int i = 0; i < 8; i++) {
        memset(&res, 0, sizeof res);
        drain(q[i], &res);
        assert_int_equal(res.finish, i == 6 ? ENGINE_FINISH_CANCELLED : ENGINE_FINISH_LENGTH);
        assert_int_equal(res.n, i == 6 ? 0 : 2);
        engine_req_release(q[i]);
    }
    engine_get_stats(e, &st);
    assert_int_equal(st.rejected, 8);
    assert_pool_empty(e);
    engine_destroy(e);

    /* Options out of range. */
    struct engine_opts bado = {.max_seqs = 8, .max_batch_tokens = 4};
    struct engine *be = NULL;
    assert_int_equal(engine_create(&be, FIXTURE, &bado, &err), LL_EINVAL);
    assert_null(be);
    assert_non_null(strstr(err.msg, "--max-batch-tokens"));
    assert_int_not_equal(engine_create(&be, "tests/fixtures/no-such-model", &o, &err), LL_OK);
    assert_null(be);
}

/* ---- stops, eos, text ---- */

static void test_stops_and_text(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 128};
    struct engine *e = make_engine(o);
    int32_t ids[32];
    make_prompt(ids, 12, 808);
    struct engine_params p = {.prompt = ids, .n_prompt = 12, .max_tokens = 20,
                              .ignore_eos = true};
    struct result full;
    run_together(e, &p, 1, &full);
    assert_int_equal(full.n, 20);
    /* The text deltas add up to the decoded text. */
    char *text;
    size_t len;
    assert_int_equal(tokenizer_decode(engine_tokenizer(e), full.ids, (size_t)full.n, true, &text,
                                      &len, NULL), LL_OK);
    assert_int_equal(len, full.len);
    assert_string_equal(text, full.text);
    free(text);

    /* Stop at the first token that did not occur before it. */
    int k = 1;
    for (; k < full.n; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= full.ids[j] == full.ids[k];
        if (!seen)
            break;
    }
    assert_true(k < full.n);
    int32_t stops[2] = {151000, full.ids[k]};
    p.stop_ids = stops;
    p.n_stop_ids = 2;
    struct result cut;
    run_together(e, &p, 1, &cut);
    assert_int_equal(cut.finish, ENGINE_FINISH_STOP);
    assert_int_equal(cut.stop_id, full.ids[k]);
    assert_int_equal(cut.n, k);
    assert_memory_equal(cut.ids, full.ids, sizeof(int32_t) * (size_t)k);

    /* The model's eos counts as a stop unless ignore_eos: make the eos id the stop point by
     * checking that a request whose greedy path contains no eos runs to length. */
    p.n_stop_ids = 0;
    p.ignore_eos = false;
    struct result noeos;
    run_together(e, &p, 1, &noeos);
    bool has_eos = false;
    for (int i = 0; i < full.n; i++)
        has_eos |= full.ids[i] == engine_model(e)->config.eos_ids[0];
    if (!has_eos)
        assert_same(&full, &noeos);
    else
        assert_int_equal(noeos.finish, ENGINE_FINISH_STOP);
    engine_destroy(e);
}

/* ---- a mixed run: shared prefixes, staggered arrivals, cancels, a tiny pool ---- */

static void test_mixed_stress(void **state)
{
    (void)state;
    enum { NR = 14 };
    static int32_t prompts[NR][32];
    struct engine_params p[NR];
    for (int i = 0; i < NR; i++) {
        int len = 5 + (int)(sampler_uniform(31, (uint64_t)i) * 20); /* 5..24 */
        make_prompt(prompts[i], 16, 40 + (uint64_t)(i % 3)); /* three shared 16-token heads */
        make_prompt(prompts[i] + 16, 16, 1000 + (uint64_t)i);
        p[i] = (struct engine_params){
            .prompt = prompts[i], .n_prompt = len, .ignore_eos = true,
            .max_tokens = 1 + (int)(sampler_uniform(32, (uint64_t)i) * 7), /* 1..7 */
            .sampling = {.temperature = i % 2 ? 0.8f : 0.0f, .top_k = 20, .seed = (uint64_t)i},
        };
    }
    struct engine_opts roomy = {.n_ctx = 64, .max_seqs = NR, .max_batch_tokens = 256,
                                .block_size = 8};
    struct result ref[NR], got[NR];
    struct engine *e = make_engine(roomy);
    run_together(e, p, NR, ref);
    engine_destroy(e);

    /* 4 blocks of 8 (32 positions: one long request at a time), 16-token steps. */
    struct engine_opts tiny = {.n_ctx = 64, .max_seqs = 5, .max_batch_tokens = 16,
                               .block_size = 8, .kv_blocks = 4};
    e = make_engine(tiny);
    struct engine_req *r[NR] = {0};
    bool cancelled[NR] = {0};
    for (int i = 0; i < NR / 2; i++)
        r[i] = submit(e, &p[i]);
    for (int stepn = 0; stepn < 400; stepn++) {
        if (stepn == 3)
            for (int i = NR / 2; i < NR; i++)
                r[i] = submit(e, &p[i]);
        if (stepn == 2 || stepn == 5 || stepn == 9) { /* cancel whatever state it is in */
            int victim = stepn == 2 ? 1 : stepn == 5 ? 8 : 11;
            engine_cancel(r[victim]);
            cancelled[victim] = true;
        }
        step_once(e);
        struct engine_stats st;
        engine_get_stats(e, &st);
        assert_true(st.kv_in_use <= 4);
        if (stepn > 9 && st.running == 0 && st.waiting == 0)
            break;
    }
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_true(st.preemptions > 0);
    assert_true(st.cached_tokens > 0);
    for (int i = 0; i < NR; i++) {
        memset(&got[i], 0, sizeof got[i]);
        drain(r[i], &got[i]);
        if (cancelled[i] && got[i].finish == ENGINE_FINISH_CANCELLED) {
            assert_true(got[i].n <= ref[i].n); /* what it produced is a prefix of the ref */
            assert_memory_equal(got[i].ids, ref[i].ids, sizeof(int32_t) * (size_t)got[i].n);
        } else {
            assert_same(&ref[i], &got[i]);
        }
        engine_req_release(r[i]);
    }
    assert_pool_empty(e);
    engine_destroy(e);
}

/* ---- threaded mode ---- */

struct client {
    struct engine *e;
    struct engine_params p;
    struct result res;
    int polls;
    int quit_after; /* > 0: release the request after this many tokens */
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct engine_req *r = NULL;
    memset(&c->res, 0, sizeof c->res);
    if (engine_submit(c->e, &c->p, &r, NULL) != LL_OK)
        return NULL;
    struct engine_output out = {0};
    for (;;) {
        if (!engine_wait(r, &out, 5.0))
            continue;
        c->polls++;
        if (!result_add(&c->res, &out) || out.finish) /* a result too long fails assert_same */
            break;
        if (c->quit_after > 0 && c->res.n >= c->quit_after)
            break;
    }
    engine_output_free(&out);
    engine_req_release(r);
    return NULL;
}

/* Submit and release at once, many times (the request may finish before or after). */
static void *release_loop(void *arg)
{
    struct client *c = arg;
    for (int k = 0; k < 40; k++) {
        struct engine_req *r = NULL;
        if (engine_submit(c->e, &c->p, &r, NULL) != LL_OK)
            continue;
        if (k % 3 == 1)
            engine_cancel(r);
        if (k % 2) {
            struct engine_output out = {0};
            engine_wait(r, &out, 0.001 * (k % 5));
            engine_output_free(&out);
        }
        engine_req_release(r);
    }
    return NULL;
}

static void test_threaded(void **state)
{
    (void)state;
    struct engine_params p[NG];
    greedy_params(p);
    struct engine_opts o = {.n_ctx = 256, .max_seqs = 4, .max_batch_tokens = 24};
    struct result alone[NG];
    run_each_alone(o, p, NG, alone);
    struct engine *e = make_engine(o);
    struct ll_err err = {0};
    assert_int_equal(engine_start(e, &err), LL_OK);
    assert_int_equal(engine_start(e, &err), LL_EINVAL);
    bool did;
    assert_int_equal(engine_step(e, &did, &err), LL_EINVAL);
    struct client c[NG];
    pthread_t th[NG];
    for (int i = 0; i < NG; i++) {
        c[i] = (struct client){.e = e, .p = p[i]};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
    }
    for (int i = 0; i < NG; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NG; i++) {
        assert_true(c[i].polls >= 1);
        assert_same(&alone[i], &c[i].res);
    }
    /* Idle: the thread sleeps; stop and restart work. */
    engine_stop(e);
    assert_int_equal(engine_start(e, &err), LL_OK);
    c[0] = (struct client){.e = e, .p = p[0]};
    client_main(&c[0]);
    assert_same(&alone[0], &c[0].res);

    /* Callers that walk away mid-stream (release without reading to the end), racing with the
     * scheduler finishing their requests: everything is freed, the pool ends empty. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NG; i++) {
            c[i] = (struct client){.e = e, .p = p[i], .quit_after = 1 + (i + round) % 4};
            assert_int_equal(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
        }
        for (int i = 0; i < NG; i++)
            pthread_join(th[i], NULL);
    }
    /* Short requests released at once, so that cancels and finishes cross often. */
    for (int i = 0; i < NG; i++) {
        c[i] = (struct client){.e = e, .p = p[i], .quit_after = -1};
        c[i].p.max_tokens = 1 + i % 2;
        assert_int_equal(pthread_create(&th[i], NULL, release_loop, &c[i]), 0);
    }
    for (int i = 0; i < NG; i++)
        pthread_join(th[i], NULL);
    engine_stop(e);
    assert_int_equal(engine_run_until_idle(e, &err), LL_OK);
    assert_pool_empty(e);
    engine_destroy(e);
}

/* ---- a request that fails inside the forward pass fails alone ---- */

enum { NF = 5, FAIL_TOKEN = 7 };

/* A mock model directory in dir (a fresh temporary one) whose config.json has `extra` fields
 * (e.g. "\"fail_token\": 7") and the mock fixture's tokenizer files. */
static void make_mock_dir(char *dir, const char *extra)
{
    strcpy(dir, "/tmp/llaisys-mock-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[256], target[PATH_MAX];
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "tests/fixtures/mock/%s", files[i]);
        assert_non_null(realpath(path, target));
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        assert_int_equal(symlink(target, path), 0);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"model_type\": \"mock\", \"vocab_size\": 151936, \"bos_token_id\": 151646, "
               "\"eos_token_id\": 151643%s%s}\n", extra[0] ? ", " : "", extra);
    fclose(f);
}

static void remove_mock_dir(const char *dir)
{
    const char *files[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    char path[256];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void poll_all(struct engine_req *r, struct result *res, char *error, size_t cap)
{
    struct engine_output out = {0};
    engine_poll(r, &out);
    assert_true(result_add(res, &out));
    snprintf(error, cap, "%s", out.error);
    engine_output_free(&out);
}

static void test_forward_failure_isolated(void **state)
{
    (void)state;
    int32_t good[NF][48], bad[2][30];
    struct engine_params p[NF], pb[2];
    for (int i = 0; i < NF; i++) {
        int n = 20 + 5 * i;
        make_prompt(good[i], n, 900 + (uint64_t)i);
        for (int j = 0; j < n; j++)
            if (good[i][j] == FAIL_TOKEN)
                good[i][j]++;
        p[i] = (struct engine_params){.prompt = good[i], .n_prompt = n, .max_tokens = 10 + i,
                                      .ignore_eos = true};
    }
    for (int i = 0; i < 2; i++) {
        make_prompt(bad[i], 30, 950 + (uint64_t)i);
        bad[i][11 + i] = FAIL_TOKEN;
        pb[i] = (struct engine_params){.prompt = bad[i], .n_prompt = 30, .max_tokens = 8,
                                       .ignore_eos = true};
    }
    /* the reference: the good requests on the mock model without the fault */
    struct engine_opts o = {.n_ctx = 256, .max_seqs = 8, .max_batch_tokens = 256};
    struct result ref[NF];
    struct engine *e = make_engine_on("tests/fixtures/mock", o);
    run_together(e, p, NF, ref);
    engine_destroy(e);
    for (int i = 0; i < NF; i++) {
        assert_int_equal(ref[i].finish, ENGINE_FINISH_LENGTH);
        for (int j = 0; j < ref[i].n; j++) /* the fault would hit a good request's decode */
            assert_int_not_equal(ref[i].ids[j], FAIL_TOKEN);
    }

    /* with the fault: bad[0] in the first step with every good prompt, bad[1] arriving while
     * they decode (its prompt chunk beside their decode rows) */
    char dir[64];
    make_mock_dir(dir, "\"fail_token\": 7");
    e = make_engine_on(dir, o);
    struct engine_req *r[NF], *rb[2];
    for (int i = 0; i < NF; i++) {
        r[i] = submit(e, &p[i]);
        if (i == 2)
            rb[0] = submit(e, &pb[0]);
    }
    step_once(e);
    step_once(e);
    rb[1] = submit(e, &pb[1]);
    run_idle(e);
    for (int i = 0; i < NF; i++) {
        struct result got = {0};
        char error[256];
        poll_all(r[i], &got, error, sizeof error);
        assert_int_equal(got.finish, ENGINE_FINISH_LENGTH);
        assert_int_equal(got.n, ref[i].n);
        assert_memory_equal(got.ids, ref[i].ids, sizeof(int32_t) * (size_t)got.n);
        assert_int_equal(got.usage.completion_tokens, ref[i].usage.completion_tokens);
        engine_req_release(r[i]);
    }
    for (int i = 0; i < 2; i++) {
        struct result got = {0};
        char error[256];
        poll_all(rb[i], &got, error, sizeof error);
        assert_int_equal(got.finish, ENGINE_FINISH_ERROR);
        assert_int_equal(got.n, 0);
        assert_non_null(strstr(error, "failed on token 7"));
        engine_req_release(rb[i]);
    }
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.forward_failures, 2);
    assert_pool_empty(e);
    engine_destroy(e);
    remove_mock_dir(dir);

    /* the fault fields are checked */
    const char *bad_fields[] = {"\"fail_token\": 151936", "\"delay_us\": -1",
                                "\"delay_us\": \"slow\""};
    const char *named[] = {"fail_token", "delay_us", "delay_us"};
    for (int i = 0; i < 3; i++) {
        make_mock_dir(dir, bad_fields[i]);
        struct ll_err err = {0};
        struct engine *bad_e = NULL;
        assert_int_equal(engine_create(&bad_e, dir, &o, &err), LL_EMODEL);
        assert_null(bad_e);
        assert_non_null(strstr(err.msg, named[i]));
        assert_non_null(strstr(err.msg, "config.json"));
        remove_mock_dir(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_batched_equals_alone),
        cmocka_unit_test(test_greedy_batched_equals_alone_quant),
        cmocka_unit_test(test_seeded_determinism),
        cmocka_unit_test(test_seeded_determinism_quant),
        cmocka_unit_test(test_prefix_of_running_request),
        cmocka_unit_test(test_prefix_hit_same_logits),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_cancel_states),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_stops_and_text),
        cmocka_unit_test(test_mixed_stress),
        cmocka_unit_test(test_threaded),
        cmocka_unit_test(test_forward_failure_isolated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
