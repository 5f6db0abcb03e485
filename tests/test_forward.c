/*
 * test_forward.c: the Qwen2 forward pass against the float64 reference of
 * tests/fixtures/tiny-qwen2 (tiny-qwen2.expected.json, tiny-qwen2.logits/), and its determinism.
 *
 * Exact path: at every prompt position our logits for the reference top-8 are within 1e-3 of
 * the logit scale (max |reference logit|), the top-1 agrees wherever the reference margin is
 * larger than twice that tolerance, the last position's full logits row matches the .f32 file,
 * and greedy decoding repeats the reference over greedy_stable_prefix steps.
 * Fast path (bf16 activations and KV): the same with 2% of the scale.
 * Determinism: logits computed in one prefill batch, in chunks, one token at a time, and with a
 * different thread count are the same bits, in both modes.
 * Every kernel level the CPU runs, and the AMX bf16 matmul on emulated tiles (amx-emul, the fast
 * path's tests: its tile order is the one matmul that sums differently).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ops.h"
#include "runtime.h"
#include "util.h"

#define FIXTURE "tests/fixtures/tiny-qwen2"
#define CHUNK 64 /* rows per prefill step in these tests (bounds the logits buffer) */

static struct model *model;
static cJSON *expected;
static int vocab;

static int setup(void **state)
{
    (void)state;
    struct ll_err err = {0};
    if (model_open(&model, FIXTURE, NULL, &err) != LL_OK) {
        fprintf(stderr, "model_open: %s\n", err.msg);
        return -1;
    }
    vocab = model->config.vocab_size;
    char *text;
    size_t len;
    if (ll_read_file(FIXTURE ".expected.json", &text, &len, &err) != LL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    expected = cJSON_ParseWithLength(text, len);
    free(text);
    return expected ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cJSON_Delete(expected);
    model_close(model);
    return 0;
}

static struct model_runtime *make_runtime(enum ll_math math, int threads, int max_batch)
{
    struct runtime_opts o = {.n_ctx = 1024, .max_batch = max_batch, .n_threads = threads,
                             .math = math};
    struct model_runtime *rt;
    struct ll_err err = {0};
    enum ll_status s = runtime_create(&rt, model, &o, &err);
    if (s != LL_OK)
        print_error("runtime_create: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    return rt;
}

/* Run ids[0..n) from position `start` in steps of at most `chunk` tokens; logits of every row
 * into out (n, vocab) when out is non-NULL (else only the last row, into last). */
static void run_tokens(struct model_runtime *rt, const int32_t *ids, int n, int start, int chunk,
                       float *out, float *last)
{
    int32_t pos[CHUNK];
    uint8_t want[CHUNK];
    struct ll_err err = {0};
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int m = n - i0 < chunk ? n - i0 : chunk;
        for (int j = 0; j < m; j++) {
            pos[j] = start + i0 + j;
            want[j] = out != NULL || i0 + j == n - 1;
        }
        struct ll_batch b = {.n_tokens = m, .token = ids + i0, .pos = pos, .want_logits = want};
        float *dst = out ? out + (size_t)i0 * vocab : last;
        enum ll_status s = runtime_forward(rt, &b, dst, &err);
        if (s != LL_OK)
            print_error("runtime_forward: %s\n", err.msg);
        assert_int_equal(s, LL_OK);
    }
}

static int32_t *json_ids(const cJSON *arr, int *n)
{
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc(sizeof(int32_t) * (*n > 0 ? *n : 1));
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return ids;
}

static float *read_f32(const char *rel, size_t want_n)
{
    char *path = ll_path_join("tests/fixtures", rel);
    char *data;
    size_t len;
    struct ll_err err;
    assert_int_equal(ll_read_file(path, &data, &len, &err), LL_OK);
    free(path);
    assert_int_equal(len, want_n * sizeof(float));
    return (float *)data;
}

static void check_case(const cJSON *c, enum ll_math math, double rel_tol)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    int n;
    int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
    const cJSON *tops = cJSON_GetObjectItem(c, "top_per_position");
    assert_int_equal(cJSON_GetArraySize(tops), n);
    float *ref_last = read_f32(cJSON_GetObjectItem(c, "last_logits_file")->valuestring,
                               (size_t)vocab);
    double scale = 0;
    for (int v = 0; v < vocab; v++)
        scale = fmax(scale, fabs(ref_last[v]));
    for (int p = 0; p < n; p++) {
        const cJSON *top = cJSON_GetArrayItem(tops, p);
        for (int k = 0; k < cJSON_GetArraySize(top); k++)
            scale = fmax(scale, fabs(cJSON_GetArrayItem(cJSON_GetArrayItem(top, k), 1)->valuedouble));
    }
    double tol = rel_tol * scale, worst = 0;
    int top1_checked = 0;

    struct model_runtime *rt = make_runtime(math, 2, CHUNK);
    float *logits = malloc(sizeof(float) * (size_t)CHUNK * vocab);
    int32_t pos[CHUNK];
    uint8_t want[CHUNK];
    memset(want, 1, sizeof want);
    struct ll_err err = {0};
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        int m = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int j = 0; j < m; j++)
            pos[j] = i0 + j;
        struct ll_batch b = {.n_tokens = m, .token = ids + i0, .pos = pos, .want_logits = want};
        assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
        for (int j = 0; j < m; j++) {
            const float *row = logits + (size_t)j * vocab;
            const cJSON *top = cJSON_GetArrayItem(tops, i0 + j);
            for (int k = 0; k < cJSON_GetArraySize(top); k++) {
                const cJSON *pair = cJSON_GetArrayItem(top, k);
                int id = (int)cJSON_GetArrayItem(pair, 0)->valuedouble;
                double want_l = cJSON_GetArrayItem(pair, 1)->valuedouble;
                double d = fabs(row[id] - want_l);
                worst = fmax(worst, d);
                if (d > tol) {
                    print_error("%s pos %d: logit of %d is %.5f, reference %.5f (tol %.4f)\n",
                                name, i0 + j, id, row[id], want_l, tol);
                    fail();
                }
            }
            double m1 = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 1)->valuedouble;
            double m2 = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 1), 1)->valuedouble;
            if (m1 - m2 > 2 * tol) {
                int ref1 = (int)cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 0)->valuedouble;
                assert_int_equal(ll_argmax(row, vocab), ref1);
                top1_checked++;
            }
        }
    }
    /* The last row of the last chunk is the last position: compare the whole row. */
    const float *last = logits + (size_t)((n - 1) % CHUNK) * vocab;
    for (int v = 0; v < vocab; v++) {
        double d = fabs(last[v] - ref_last[v]);
        worst = fmax(worst, d);
        if (d > tol) {
            print_error("%s last position: logit of %d is %.5f, reference %.5f\n", name, v,
                        last[v], ref_last[v]);
            fail();
        }
    }

    /* Greedy continuation over the stable prefix. */
    int ng;
    int32_t *greedy = json_ids(cJSON_GetObjectItem(c, "greedy"), &ng);
    int stable = (int)cJSON_GetObjectItem(c, "greedy_stable_prefix")->valuedouble;
    float *row = malloc(sizeof(float) * vocab);
    memcpy(row, last, sizeof(float) * vocab);
    for (int t = 0; t < stable; t++) {
        int32_t next = ll_argmax(row, vocab);
        if (next != greedy[t]) {
            print_error("%s greedy step %d: got %d, reference %d\n", name, t, next, greedy[t]);
            fail();
        }
        if (t + 1 < stable)
            run_tokens(rt, &next, 1, n + t, 1, NULL, row);
    }
    printf("  %s %s: %d positions, top-1 checked at %d, worst |d| %.5f (%.2e of scale %.1f), "
           "greedy %d ok\n", name, math == LL_MATH_EXACT ? "exact" : "fast", n, top1_checked,
           worst, worst / scale, scale, stable);
    free(row);
    free(greedy);
    free(logits);
    free(ref_last);
    free(ids);
    runtime_free(rt);
}

static void test_exact_parity(void **state)
{
    (void)state;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(expected, "cases")) check_case(c, LL_MATH_EXACT, 1e-3);
}

static void test_fast_parity(void **state)
{
    (void)state;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(expected, "cases")) check_case(c, LL_MATH_FAST, 0.02);
}

/* Prefill in one batch, in chunks of 7, one token at a time, and with 1 thread: same bits. */
static void check_determinism(enum ll_math math)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(expected, "cases"), 0);
    int np, ng;
    int32_t *prompt = json_ids(cJSON_GetObjectItem(c, "ids"), &np);
    int32_t *greedy = json_ids(cJSON_GetObjectItem(c, "greedy"), &ng);
    int n = np + ng; /* prompt and continuation: 35 tokens */
    assert_true(n <= CHUNK);
    int32_t *ids = malloc(sizeof(int32_t) * n);
    memcpy(ids, prompt, sizeof(int32_t) * np);
    memcpy(ids + np, greedy, sizeof(int32_t) * ng);
    size_t sz = sizeof(float) * (size_t)n * vocab;
    float *a = malloc(sz), *b = malloc(sz);

    struct model_runtime *rt = make_runtime(math, 2, CHUNK);
    run_tokens(rt, ids, n, 0, CHUNK, a, NULL);
    run_tokens(rt, ids, n, 0, 1, b, NULL);
    assert_memory_equal(a, b, sz);
    run_tokens(rt, ids, n, 0, 7, b, NULL);
    assert_memory_equal(a, b, sz);
    runtime_free(rt);

    rt = make_runtime(math, 1, CHUNK);
    run_tokens(rt, ids, n, 0, 5, b, NULL);
    assert_memory_equal(a, b, sz);
    runtime_free(rt);

    /* Only-last-row logits (the last layer's gathered path) equal the all-rows ones. */
    rt = make_runtime(math, 2, CHUNK);
    run_tokens(rt, ids, n, 0, 13, NULL, b);
    assert_memory_equal(a + (size_t)(n - 1) * vocab, b, sizeof(float) * vocab);
    runtime_free(rt);
    free(a);
    free(b);
    free(ids);
    free(prompt);
    free(greedy);
}

static void test_determinism_exact(void **state)
{
    (void)state;
    check_determinism(LL_MATH_EXACT);
}

static void test_determinism_fast(void **state)
{
    (void)state;
    check_determinism(LL_MATH_FAST);
}

/* Two sequences in one flat batch over a paged cache (block tables in scrambled order) give the
 * same bits as each sequence alone in a contiguous cache. */
static void test_paged_batch(void **state)
{
    (void)state;
    const cJSON *cases = cJSON_GetObjectItem(expected, "cases");
    int na, nb;
    int32_t *a = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, 1), "ids"), &na);
    int32_t *bt = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, 2), "ids"), &nb);
    na = 20;
    nb = 12;
    size_t row = sizeof(float) * vocab;
    float *ref_a = malloc(row * na), *ref_b = malloc(row * nb), *got = malloc(row * (na + nb));
    struct model_runtime *rt = make_runtime(LL_MATH_EXACT, 2, CHUNK);
    run_tokens(rt, a, na, 0, CHUNK, ref_a, NULL);
    run_tokens(rt, bt, nb, 0, CHUNK, ref_b, NULL);
    runtime_free(rt);

    struct runtime_opts o = {.n_ctx = 64, .n_slots = 128, .block_size = 8, .max_batch = CHUNK,
                             .n_threads = 2, .math = LL_MATH_EXACT};
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, model, &o, &err), LL_OK);
    int32_t table_a[3] = {15, 3, 9}, table_b[2] = {0, 7};
    struct ll_kv_seq seqs[2] = {{table_a, 3}, {table_b, 2}};
    /* Step 1: a[0..12) and b[0..12) interleaved. Step 2: a[12..20). */
    int32_t tok[24], pos[24], seq[24], slot[24];
    uint8_t want[24];
    for (int i = 0; i < 24; i++) {
        int s = i % 2, p = i / 2;
        tok[i] = s ? bt[p] : a[p];
        pos[i] = p;
        seq[i] = s;
        slot[i] = (s ? table_b : table_a)[p / 8] * 8 + p % 8;
        want[i] = 1;
    }
    struct ll_batch b1 = {.n_tokens = 24, .token = tok, .pos = pos, .seq = seq, .slot = slot,
                          .want_logits = want, .seqs = seqs, .n_seqs = 2};
    assert_int_equal(runtime_forward(rt, &b1, got, &err), LL_OK);
    for (int i = 0; i < 24; i++) {
        const float *want_row = (i % 2 ? ref_b : ref_a) + (size_t)(i / 2) * vocab;
        assert_memory_equal(got + (size_t)i * vocab, want_row, row);
    }
    for (int i = 0; i < 8; i++) {
        tok[i] = a[12 + i];
        pos[i] = 12 + i;
        seq[i] = 0;
    }
    struct ll_batch b2 = {.n_tokens = 8, .token = tok, .pos = pos, .seq = seq,
                          .want_logits = want, .seqs = seqs, .n_seqs = 2};
    assert_int_equal(runtime_forward(rt, &b2, got, &err), LL_OK);
    assert_memory_equal(got, ref_a + (size_t)12 * vocab, row * 8);
    /* A position past the sequence's blocks is refused. */
    pos[0] = 24;
    b2.n_tokens = 1;
    assert_int_equal(runtime_forward(rt, &b2, got, &err), LL_ETOOLONG);
    runtime_free(rt);
    free(a);
    free(bt);
    free(ref_a);
    free(ref_b);
    free(got);
}

/* A runtime's pool is adaptive unless fixed_threads, and a step gives the same bits whether the
 * pool runs it on two threads or one (it moves between them while a neighbour comes and goes). */
static void test_threads_adapt(void **state)
{
    (void)state;
    struct model_runtime *rt = make_runtime(LL_MATH_FAST, 2, CHUNK);
    assert_true(ll_pool_adaptive(rt->pool));
    runtime_free(rt);
    struct runtime_opts o = {.n_ctx = 1024, .max_batch = CHUNK, .n_threads = 2,
                             .math = LL_MATH_FAST, .fixed_threads = true};
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, model, &o, &err), LL_OK);
    assert_false(ll_pool_adaptive(rt->pool));
    const cJSON *cases = cJSON_GetObjectItem(expected, "cases");
    int n;
    int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, 1), "ids"), &n);
    n = n < 20 ? n : 20;
    size_t row = sizeof(float) * vocab;
    float *two = malloc(row * n), *one = malloc(row * n);
    assert_non_null(two);
    assert_non_null(one);
    run_tokens(rt, ids, n, 0, 7, two, NULL);
    ll_pool_set_active(rt->pool, 1);
    run_tokens(rt, ids, n, 0, 7, one, NULL);
    assert_int_equal(ll_pool_active(rt->pool), 1);
    assert_memory_equal(two, one, row * n);
    runtime_free(rt);
    free(ids);
    free(two);
    free(one);
}

static void test_bad_batch(void **state)
{
    (void)state;
    struct model_runtime *rt;
    struct runtime_opts o = {.n_ctx = 16, .max_batch = 4, .n_threads = 1, .math = LL_MATH_FAST};
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, model, &o, &err), LL_OK);
    float *logits = malloc(sizeof(float) * 4 * vocab);
    int32_t tok[5] = {1, 2, 3, 4, 5}, pos[5] = {0, 1, 2, 3, 4};
    struct ll_batch b = {.n_tokens = 5, .token = tok, .pos = pos};
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_EINVAL); /* > max_batch */
    assert_non_null(strstr(err.msg, "batch of 5"));
    b.n_tokens = 2;
    tok[1] = vocab;
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "token id"));
    tok[1] = 2;
    pos[1] = 16;
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_ETOOLONG);
    assert_non_null(strstr(err.msg, "position 16"));
    pos[1] = 1;
    int32_t slot[2] = {0, 5};
    b.slot = slot;
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_EINVAL);
    slot[1] = 1;
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
    runtime_free(rt);

    o.n_threads = 0;
    o.block_size = 5; /* does not divide the 16 slots */
    assert_int_equal(runtime_create(&rt, model, &o, &err), LL_EINVAL);
    assert_null(rt);
    free(logits);
}

/* The whole suite on every kernel level this CPU can run (matmul, ops and attention together);
 * the others are named with the reason. The AMX level keeps avx512's ops and attention; the
 * emulated tiles (amx-emul: every CPU, slow) run the fast path's tests only. */
int main(void)
{
    static const struct {
        const char *ops, *matmul;
        int fast_only;
    } levels[] = {
        {"avx512", "amx", 0},    {"avx512", "avx512", 0}, {"avx2", "avx2", 0},
        {"scalar", "scalar", 0}, {NULL, "amx-emul", 1},
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_parity),      cmocka_unit_test(test_fast_parity),
        cmocka_unit_test(test_determinism_exact), cmocka_unit_test(test_determinism_fast),
        cmocka_unit_test(test_paged_batch),       cmocka_unit_test(test_bad_batch),
        cmocka_unit_test(test_threads_adapt),
    };
    const struct CMUnitTest fast_tests[] = {
        cmocka_unit_test(test_fast_parity),
        cmocka_unit_test(test_determinism_fast),
    };
    const char *best_ops = ll_ops_variant();
    int failed = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        const char *ops = levels[l].ops ? levels[l].ops : best_ops;
        char name[64];
        snprintf(name, sizeof name, "%s+%s", ops, levels[l].matmul);
        if (!ll_ops_set_variant(ops) || !ll_matmul_set_variant(levels[l].matmul)) {
            const char *why = NULL;
            if (!strcmp(levels[l].matmul, "amx"))
                ll_matmul_tiles_ready(&why);
            printf("SKIP forward pass on %s kernels: %s\n", name,
                   why ? why : "this CPU cannot run them");
            continue;
        }
        printf("ops %s, attention %s, matmul %s\n", ll_ops_variant(), ll_attention_variant(16),
               ll_matmul_variant());
        if (levels[l].fast_only)
            failed += cmocka_run_group_tests_name(name, fast_tests, setup, teardown);
        else
            failed += cmocka_run_group_tests_name(name, tests, setup, teardown);
    }
    return failed;
}
