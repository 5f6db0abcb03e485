/*
 * test_api.c: the public C API (include/llaisys.h), every function, on the tiny-qwen2 fixture
 * and the mock model:
 *   model level: creation and its errors, properties, tokenizer, batches; decode results equal
 *   the plain runtime's logits; every decode error leaves the cache unchanged; the same prompt
 *   in two sequences gives identical logits and removing one leaves the other's unchanged;
 *   copy then diverge (shared blocks, copy-on-write of the partial block, truncated copies);
 *   seq_rm's boundary, empty, no-hit and hole ranges; keep; add (unsupported); no room then
 *   retry; prefix hits, stats and the prefix-cache reset; the abort callback; the mock model's
 *   logits equal its documented formula, so the registry routes by model_type;
 *   engine level: options, describe, submit/step/poll with every state, request errors,
 *   logprobs, stop strings, cancel, preemption, generate, the threaded mode, threads that
 *   submit, poll and cancel at once, and requests that outlive their engine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hash.h"
#include "llaisys.h"
#include "model.h"
#include "runtime.h"

#define TINY "tests/fixtures/tiny-qwen2"
#define MOCK "tests/fixtures/mock"
#define V 151936

/* Deterministic prompt ids among the first 150000. */
static void make_ids(int32_t *ids, int n, uint64_t salt)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(ll_mix64(salt * 1000003u + (uint64_t)i) % 150000);
}

static llaisys_model *open_model(const char *dir, struct llaisys_model_params p)
{
    if (!p.n_threads)
        p.n_threads = 1;
    llaisys_model *m = NULL;
    int32_t rc = llaisys_model_create(dir, &p, &m);
    if (rc)
        print_error("llaisys_model_create: %s\n", llaisys_last_error());
    assert_int_equal(rc, LLAISYS_OK);
    return m;
}

static struct llaisys_model_params params(int n_ctx, int kv_tokens, int n_seq_max)
{
    struct llaisys_model_params p = llaisys_model_default_params();
    p.n_ctx = n_ctx;
    p.kv_tokens = kv_tokens;
    p.n_seq_max = n_seq_max;
    return p;
}

/* Decode ids[0..n) at the next positions of seq, logits for the last row; copy them to out. */
static int32_t decode_seq(llaisys_model *m, int seq, const int32_t *ids, int n, float *out)
{
    struct llaisys_batch b = llaisys_batch_init(n);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.seq_id[i] = seq;
        b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    int32_t rc = llaisys_decode(m, &b);
    llaisys_batch_free(b);
    if (rc == LLAISYS_OK && out)
        memcpy(out, llaisys_get_logits_ith(m, -1), sizeof(float) * V);
    return rc;
}

/* Logits of the last token of ids[0..n) computed alone in a fresh model. */
static void reference(const int32_t *ids, int n, float *out)
{
    llaisys_model *r = open_model(TINY, params(256, 512, 1));
    assert_int_equal(decode_seq(r, 0, ids, n, out), LLAISYS_OK);
    llaisys_model_destroy(r);
}

static int32_t pos_max(llaisys_model *m, int seq)
{
    int32_t p = -7;
    assert_int_equal(llaisys_kv_seq_pos_max(m, seq, &p), LLAISYS_OK);
    return p;
}

static struct llaisys_kv_stats stats(llaisys_model *m)
{
    struct llaisys_kv_stats s;
    assert_int_equal(llaisys_kv_stats(m, &s), LLAISYS_OK);
    assert_int_equal(s.used + s.free, s.capacity);
    assert_true(s.peak_used >= s.used);
    return s;
}

static void assert_logits_equal(const float *a, const float *b)
{
    assert_memory_equal(a, b, sizeof(float) * V);
}

/* ---- basics ---- */

static void test_version_status(void **state)
{
    (void)state;
    assert_int_equal(llaisys_api_version(), LLAISYS_API_VERSION);
    assert_string_equal(llaisys_status_str(LLAISYS_OK), "ok");
    assert_string_equal(llaisys_status_str(LLAISYS_NO_KV_ROOM), "no KV room");
    assert_string_equal(llaisys_status_str(LLAISYS_EMPTY_RANGE), "empty range");
    assert_string_equal(llaisys_status_str(LLAISYS_ERR_INVALID_SEQ), "invalid sequence");
    assert_string_equal(llaisys_status_str(LLAISYS_ERR_INTERNAL), "internal error");
    assert_string_equal(llaisys_status_str(99), "unknown status");
    llaisys_free(NULL);
    llaisys_model_destroy(NULL);
    llaisys_engine_destroy(NULL);
    llaisys_request_release(NULL);
    llaisys_batch_free((struct llaisys_batch){0});
    assert_string_equal(llaisys_finish_str(LLAISYS_FINISH_LENGTH), "length");
    assert_string_equal(llaisys_finish_str(LLAISYS_FINISH_NONE), "");
}

static void test_model_create_errors(void **state)
{
    (void)state;
    llaisys_model *m = (llaisys_model *)1;
    assert_int_equal(llaisys_model_create(TINY, NULL, NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_model_create(NULL, NULL, &m), LLAISYS_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(llaisys_model_create("/nonexistent/dir", NULL, &m), LLAISYS_ERR_IO);
    assert_non_null(strstr(llaisys_last_error(), "/nonexistent/dir"));
    struct llaisys_model_params p = params(0, 0, -3);
    assert_int_equal(llaisys_model_create(TINY, &p, &m), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "n_seq_max"));
    p = params(0, -1, 0);
    assert_int_equal(llaisys_model_create(TINY, &p, &m), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "kv_tokens"));
    p = params(0, 0, 0);
    p.math = 7;
    assert_int_equal(llaisys_model_create(TINY, &p, &m), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "math"));
    p = params(1, 0, 0); /* a context of one position cannot hold a prompt and a token */
    assert_int_equal(llaisys_model_create(TINY, &p, &m), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "n_ctx"));

    /* an unknown model_type, and a mock config without its vocabulary size */
    char dir[] = "/tmp/llaisys-api-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"llama9\", \"vocab_size\": 10, \"hidden_size\": 8, "
          "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1}", f);
    fclose(f);
    assert_int_equal(llaisys_model_create(dir, NULL, &m), LLAISYS_ERR_UNSUPPORTED);
    assert_non_null(strstr(llaisys_last_error(), "llama9"));
    assert_non_null(strstr(llaisys_last_error(), "mock"));
    f = fopen(path, "w");
    fputs("{\"model_type\": \"mock\"}", f);
    fclose(f);
    assert_int_equal(llaisys_model_create(dir, NULL, &m), LLAISYS_ERR_MODEL);
    assert_non_null(strstr(llaisys_last_error(), "vocab_size"));
    /* a mock without tokenizer files opens; tokenizing then says why not */
    f = fopen(path, "w");
    fputs("{\"model_type\": \"mock\", \"vocab_size\": 1000}", f);
    fclose(f);
    assert_int_equal(llaisys_model_create(dir, NULL, &m), LLAISYS_OK);
    assert_int_equal(llaisys_model_n_vocab(m), 1000);
    int32_t ids[4];
    assert_int_equal(llaisys_model_tokenize(m, "hi", 2, false, ids, 4), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "tokenizer.json"));
    llaisys_model_destroy(m);
    unlink(path);
    rmdir(dir);
}

static void test_model_props_tokenizer(void **state)
{
    (void)state;
    struct llaisys_model_params d = llaisys_model_default_params();
    assert_int_equal(d.n_ctx, 0);
    assert_int_equal(d.math, LLAISYS_MATH_FAST);
    llaisys_model *m = open_model(TINY, params(300, 0, 3));
    assert_string_equal(llaisys_model_type(m), "qwen2");
    assert_int_equal(llaisys_model_n_vocab(m), V);
    assert_int_equal(llaisys_model_n_ctx(m), 300);
    assert_int_equal(llaisys_model_n_seq_max(m), 3);
    assert_int_equal(llaisys_model_n_batch(m), 512); /* max(512, n_seq_max) */
    assert_true(llaisys_model_is_eos(m, 151643));
    assert_false(llaisys_model_is_eos(m, 5));
    struct llaisys_kv_stats s = stats(m);
    assert_int_equal(s.block_size, 16);
    /* the default: max(n_ctx, n_seq_max x n_ctx / 4) = 300 tokens, in 19 blocks of 16 */
    assert_int_equal(s.n_blocks, 19);
    assert_int_equal(s.capacity, 19 * 16);

    int32_t ids[8];
    int32_t n = llaisys_model_tokenize(m, "Hello world", 11, true, ids, 8);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 151646);
    assert_int_equal(ids[1], 9707);
    assert_int_equal(ids[2], 1879);
    assert_int_equal(llaisys_model_tokenize(m, "Hello world", 11, true, ids, 1), 3);
    assert_int_equal(llaisys_model_tokenize(m, "", 0, false, ids, 8), 0);
    assert_int_equal(llaisys_model_tokenize(m, NULL, 0, false, ids, 8), LLAISYS_ERR_INVALID_ARG);
    int32_t hw[3] = {151646, 9707, 1879};
    char *t = llaisys_model_detokenize(m, hw, 3, true);
    assert_string_equal(t, "Hello world");
    llaisys_free(t);
    t = llaisys_model_detokenize(m, hw, 3, false);
    assert_non_null(strstr(t, "begin"));
    llaisys_free(t);
    int32_t bad[1] = {V};
    assert_null(llaisys_model_detokenize(m, bad, 1, true));
    assert_non_null(strstr(llaisys_last_error(), "outside the vocabulary"));
    llaisys_model_destroy(m);
}

static void test_batch(void **state)
{
    (void)state;
    struct llaisys_batch b = llaisys_batch_init(5);
    assert_non_null(b.token);
    assert_int_equal(b.n_tokens, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(b.pos[i], -1);
        assert_int_equal(b.seq_id[i], 0);
        assert_int_equal(b.logits[i], 0);
    }
    llaisys_batch_free(b);
    b = llaisys_batch_init(0);
    assert_null(b.token);
    assert_null(b.pos);
    int32_t ids[3] = {1, 2, 3};
    b = llaisys_batch_get_one(ids, 3);
    assert_int_equal(b.n_tokens, 3);
    assert_ptr_equal(b.token, ids);
    assert_null(b.pos);
    assert_null(b.seq_id);
    assert_null(b.logits);
}

/* ---- decode ---- */

static void test_decode_equals_runtime(void **state)
{
    (void)state;
    enum { N = 37 };
    int32_t ids[N];
    make_ids(ids, N, 1);
    llaisys_model *m = open_model(TINY, params(256, 512, 2));
    struct llaisys_batch b = llaisys_batch_get_one(ids, N);
    assert_int_equal(llaisys_decode(m, &b), LLAISYS_OK);
    assert_int_equal(llaisys_n_outputs(m), 1);
    assert_int_equal(llaisys_output_ids(m)[0], N - 1);
    float *l = llaisys_get_logits(m);
    assert_ptr_equal(llaisys_get_logits_ith(m, N - 1), l);
    assert_ptr_equal(llaisys_get_logits_ith(m, -1), l);
    assert_null(llaisys_get_logits_ith(m, 3));
    assert_non_null(strstr(llaisys_last_error(), "did not ask"));
    assert_null(llaisys_get_logits_ith(m, N));
    assert_null(llaisys_get_logits_ith(m, -2));
    assert_int_equal(pos_max(m, 0), N - 1);
    assert_int_equal(pos_max(m, 1), -1);

    /* the plain runtime, one contiguous sequence, gives the same bits */
    struct ll_err err = {0};
    struct model *mo;
    assert_int_equal(model_open(&mo, TINY, NULL, &err), LL_OK);
    struct runtime_opts ro = {.n_ctx = 256, .n_threads = 1, .math = LL_MATH_FAST};
    struct model_runtime *rt;
    assert_int_equal(runtime_create(&rt, mo, &ro, &err), LL_OK);
    float *ref = malloc(sizeof(float) * V);
    int32_t pos[N];
    for (int i = 0; i < N; i++)
        pos[i] = i;
    struct ll_batch rb = {.n_tokens = N, .token = ids, .pos = pos};
    assert_int_equal(runtime_forward(rt, &rb, ref, &err), LL_OK);
    assert_logits_equal(l, ref);

    /* every row asks: one output per row, in batch order; then one more token */
    llaisys_kv_seq_rm(m, 0, -1, -1);
    struct llaisys_batch all = llaisys_batch_init(4);
    for (int i = 0; i < 4; i++) {
        all.token[i] = ids[i];
        all.pos[i] = i;
        all.logits[i] = 1;
    }
    all.n_tokens = 4;
    assert_int_equal(llaisys_decode(m, &all), LLAISYS_OK);
    assert_int_equal(llaisys_n_outputs(m), 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(llaisys_output_ids(m)[i], i);
        assert_ptr_equal(llaisys_get_logits_ith(m, i), llaisys_get_logits(m) + (size_t)i * V);
    }
    assert_ptr_equal(llaisys_get_logits_ith(m, -4), llaisys_get_logits(m));
    llaisys_batch_free(all);

    free(ref);
    runtime_free(rt);
    model_close(mo);
    llaisys_model_destroy(m);
}

static void test_decode_errors(void **state)
{
    (void)state;
    llaisys_model *m = open_model(TINY, params(64, 256, 2));
    int32_t ids[8];
    make_ids(ids, 8, 2);
    assert_int_equal(decode_seq(m, 0, ids, 5, NULL), LLAISYS_OK);
    struct llaisys_kv_stats s0 = stats(m);
    struct llaisys_batch b = llaisys_batch_init(600);
    for (int i = 0; i < 600; i++)
        b.token[i] = ids[i % 8];
    struct {
        int n, row, token, pos, seq;
        int32_t want;
        const char *msg;
    } cases[] = {
        {0, 0, 1, -1, 0, LLAISYS_ERR_INVALID_ARG, "batch of 0"},
        {600, 0, 1, -1, 0, LLAISYS_ERR_INVALID_ARG, "n_batch"},
        {2, 1, -1, -1, 0, LLAISYS_ERR_INVALID_TOKEN, "row 1: token id -1"},
        {2, 1, V, -1, 0, LLAISYS_ERR_INVALID_TOKEN, "outside the vocabulary"},
        {2, 1, 1, -1, 2, LLAISYS_ERR_INVALID_SEQ, "row 1: sequence 2"},
        {2, 1, 1, -1, -1, LLAISYS_ERR_INVALID_SEQ, "sequence -1"},
        {2, 1, 1, 9, 0, LLAISYS_ERR_INVALID_POS, "contiguous"},
        {2, 1, 1, 5, 0, LLAISYS_ERR_INVALID_POS, "next position of sequence 0 is 6"},
        {2, 1, 1, -2, 0, LLAISYS_ERR_INVALID_POS, "negative"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        b.n_tokens = cases[c].n;
        for (int i = 0; i < 2; i++) {
            b.token[i] = ids[i];
            b.pos[i] = -1;
            b.seq_id[i] = 0;
            b.logits[i] = 1;
        }
        int r = cases[c].row;
        b.token[r] = cases[c].token == 1 ? ids[r] : cases[c].token;
        b.pos[r] = cases[c].pos;
        b.seq_id[r] = cases[c].seq;
        assert_int_equal(llaisys_decode(m, &b), cases[c].want);
        if (!strstr(llaisys_last_error(), cases[c].msg))
            fail_msg("case %zu: '%s' lacks '%s'", c, llaisys_last_error(), cases[c].msg);
        assert_int_equal(llaisys_n_outputs(m), 0);
        assert_null(llaisys_get_logits(m));
        assert_int_equal(pos_max(m, 0), 4);
        assert_int_equal(pos_max(m, 1), -1);
        struct llaisys_kv_stats s = stats(m);
        assert_int_equal(s.used, s0.used);
    }
    /* a position at the end of the context */
    llaisys_kv_seq_rm(m, 0, -1, -1);
    int32_t many[64];
    make_ids(many, 64, 3);
    assert_int_equal(decode_seq(m, 0, many, 64, NULL), LLAISYS_OK);
    assert_int_equal(decode_seq(m, 0, many, 1, NULL), LLAISYS_ERR_INVALID_POS);
    assert_non_null(strstr(llaisys_last_error(), "n_ctx 64"));
    assert_int_equal(pos_max(m, 0), 63);
    int32_t *tokens = b.token;
    b.token = NULL;
    b.n_tokens = 1;
    assert_int_equal(llaisys_decode(m, &b), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_decode(m, NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_decode(NULL, &b), LLAISYS_ERR_INVALID_ARG);
    b.token = tokens;
    llaisys_batch_free(b);
    llaisys_model_destroy(m);
}

/* The same prompt in sequences 0 and 1 (rows interleaved) gives identical logits; each then
 * continues alone; removing sequence 1 leaves sequence 0's logits unchanged. */
static void test_isolation(void **state)
{
    (void)state;
    enum { N = 21 };
    int32_t ids[N + 2];
    make_ids(ids, N + 2, 4);
    llaisys_model *m = open_model(TINY, params(128, 512, 4));
    struct llaisys_batch b = llaisys_batch_init(2 * N);
    for (int i = 0; i < 2 * N; i++) {
        b.token[i] = ids[i / 2];
        b.seq_id[i] = i % 2;
        b.logits[i] = i >= 2 * N - 2;
    }
    b.n_tokens = 2 * N;
    assert_int_equal(llaisys_decode(m, &b), LLAISYS_OK);
    assert_int_equal(llaisys_n_outputs(m), 2);
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    assert_logits_equal(llaisys_get_logits_ith(m, 2 * N - 2), llaisys_get_logits_ith(m, 2 * N - 1));
    reference(ids, N, ref);
    assert_logits_equal(llaisys_get_logits_ith(m, -1), ref);
    assert_int_equal(stats(m).seq_tokens, 2 * N);

    /* sequence 1 removed: sequence 0 goes on as if it had been alone */
    assert_int_equal(llaisys_kv_seq_rm(m, 1, -1, -1), LLAISYS_OK);
    assert_int_equal(pos_max(m, 1), -1);
    assert_int_equal(decode_seq(m, 0, ids + N, 2, got), LLAISYS_OK);
    reference(ids, N + 2, ref);
    assert_logits_equal(got, ref);
    llaisys_batch_free(b);
    free(ref);
    free(got);
    llaisys_model_destroy(m);
}

/* Copy a sequence, then let both continue with different tokens: shared blocks, and a copy of
 * the partial block on each side's first write. */
static void test_copy_then_diverge(void **state)
{
    (void)state;
    enum { N = 20 }; /* one full block of 16 and a partial one */
    int32_t ids[N], a[N + 1], c[N + 1];
    make_ids(ids, N, 5);
    llaisys_model *m = open_model(TINY, params(128, 512, 4));
    assert_int_equal(decode_seq(m, 0, ids, N, NULL), LLAISYS_OK);
    struct llaisys_kv_stats s0 = stats(m);
    assert_int_equal(s0.used, 32);
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 1, -1, -1), LLAISYS_OK);
    struct llaisys_kv_stats s1 = stats(m);
    assert_int_equal(s1.used, s0.used); /* shared, not copied */
    assert_int_equal(s1.seq_tokens, 2 * N);
    assert_int_equal(pos_max(m, 1), N - 1);

    memcpy(a, ids, sizeof ids);
    memcpy(c, ids, sizeof ids);
    a[N] = 777;
    c[N] = 4242;
    struct llaisys_batch b = llaisys_batch_init(2);
    b.token[0] = a[N], b.seq_id[0] = 0, b.logits[0] = 1;
    b.token[1] = c[N], b.seq_id[1] = 1, b.logits[1] = 1;
    b.n_tokens = 2;
    assert_int_equal(llaisys_decode(m, &b), LLAISYS_OK);
    assert_int_equal(stats(m).used, 48); /* block 0 shared; each has its own copy of block 1 */
    float *ref = malloc(sizeof(float) * V);
    reference(a, N + 1, ref);
    assert_logits_equal(llaisys_get_logits_ith(m, 0), ref);
    reference(c, N + 1, ref);
    assert_logits_equal(llaisys_get_logits_ith(m, 1), ref);

    /* a truncated copy [0, 10) diverges at position 10 */
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 2, 0, 10), LLAISYS_OK);
    assert_int_equal(pos_max(m, 2), 9);
    int32_t t[11];
    memcpy(t, ids, 10 * sizeof(int32_t));
    t[10] = 99;
    float *got = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 2, t + 10, 1, got), LLAISYS_OK);
    reference(t, 11, ref);
    assert_logits_equal(got, ref);
    /* copying onto a non-empty destination replaces it */
    assert_int_equal(llaisys_kv_seq_cp(m, 1, 2, -1, -1), LLAISYS_OK);
    assert_int_equal(pos_max(m, 2), N);
    assert_int_equal(decode_seq(m, 2, t + 10, 1, got), LLAISYS_OK);
    int32_t c2[N + 2];
    memcpy(c2, c, sizeof c);
    c2[N + 1] = 99;
    reference(c2, N + 2, ref);
    assert_logits_equal(got, ref);

    /* errors and no-ops */
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 3, 5, -1), LLAISYS_ERR_INVALID_POS);
    assert_non_null(strstr(llaisys_last_error(), "starts at position 0"));
    assert_int_equal(llaisys_kv_seq_cp(m, 3, 0, -1, -1), LLAISYS_EMPTY_RANGE);
    assert_int_equal(pos_max(m, 0), N);
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 3, 0, 0), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 4, -1, -1), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_cp(m, -1, 3, -1, -1), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 3, -1, -2), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 0, -1, 5), LLAISYS_OK); /* onto itself: keeps 0..4 */
    assert_int_equal(pos_max(m, 0), 4);
    llaisys_batch_free(b);
    free(ref);
    free(got);
    llaisys_model_destroy(m);
}

static void test_seq_rm_ranges(void **state)
{
    (void)state;
    enum { N = 20 };
    int32_t ids[N + 1];
    make_ids(ids, N + 1, 6);
    llaisys_model *m = open_model(TINY, params(256, 256, 3));
    assert_int_equal(decode_seq(m, 0, ids, N, NULL), LLAISYS_OK);
    /* empty and no-hit ranges */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 5, 5), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 9, 3), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, N, -1), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 50, 60), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_rm(m, 1, -1, -1), LLAISYS_EMPTY_RANGE);
    /* holes are refused, nothing changes */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 5, 10), LLAISYS_ERR_INVALID_POS);
    assert_non_null(strstr(llaisys_last_error(), "hole"));
    assert_int_equal(llaisys_kv_seq_rm(m, 0, -1, 10), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 0, N - 1), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(pos_max(m, 0), N - 1);
    /* bad arguments */
    assert_int_equal(llaisys_kv_seq_rm(m, 3, -1, -1), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_rm(m, -2, -1, -1), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, -3, -1), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(llaisys_kv_seq_rm(NULL, 0, -1, -1), LLAISYS_ERR_INVALID_ARG);
    /* boundaries: the last position, a range reaching past the end */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, N - 1, -1), LLAISYS_OK);
    assert_int_equal(pos_max(m, 0), N - 2);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 17, 1000), LLAISYS_OK);
    assert_int_equal(pos_max(m, 0), 16);
    /* cut inside the first (full, prefix-cached) block, then continue: the block is copied
     * before the write, and the logits are those of the shorter history */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 10, -1), LLAISYS_OK);
    assert_int_equal(stats(m).used, 16);
    int32_t t[11];
    memcpy(t, ids, 10 * sizeof(int32_t));
    t[10] = 31337;
    float *got = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 0, t + 10, 1, got), LLAISYS_OK);
    reference(t, 11, ref);
    assert_logits_equal(got, ref);
    /* seq -1: every sequence; freed blocks are reused */
    assert_int_equal(decode_seq(m, 1, ids, N, NULL), LLAISYS_OK);
    assert_int_equal(llaisys_kv_seq_rm(m, -1, 5, 8), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(llaisys_kv_seq_rm(m, -1, -1, -1), LLAISYS_OK);
    struct llaisys_kv_stats s = stats(m);
    assert_int_equal(s.used, 0);
    assert_int_equal(s.seq_tokens, 0);
    assert_int_equal(s.free, s.capacity);
    int32_t big[250];
    make_ids(big, 250, 7);
    assert_int_equal(decode_seq(m, 2, big, 128, NULL), LLAISYS_OK);       /* 8 blocks */
    assert_int_equal(decode_seq(m, 1, big + 128, 112, NULL), LLAISYS_OK); /* 7 blocks */
    assert_int_equal(stats(m).free, 16);
    assert_int_equal(decode_seq(m, 2, big, 1, NULL), LLAISYS_OK); /* takes the last block */
    assert_int_equal(stats(m).free, 0);
    assert_int_equal(decode_seq(m, 1, big, 1, NULL), LLAISYS_NO_KV_ROOM);
    assert_int_equal(pos_max(m, 1), 111);
    free(got);
    free(ref);
    llaisys_model_destroy(m);
}

static void test_seq_keep_add(void **state)
{
    (void)state;
    int32_t ids[10];
    make_ids(ids, 10, 8);
    llaisys_model *m = open_model(MOCK, params(64, 256, 3));
    for (int s = 0; s < 3; s++)
        assert_int_equal(decode_seq(m, s, ids, 3 + s, NULL), LLAISYS_OK);
    assert_int_equal(llaisys_kv_seq_keep(m, 1), LLAISYS_OK);
    assert_int_equal(pos_max(m, 0), -1);
    assert_int_equal(pos_max(m, 1), 3);
    assert_int_equal(pos_max(m, 2), -1);
    assert_int_equal(stats(m).used, 16);
    assert_int_equal(llaisys_kv_seq_keep(m, 3), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_keep(m, -1), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_keep(NULL, 0), LLAISYS_ERR_INVALID_ARG);
    /* position shift: not implemented, said clearly; empty ranges and delta 0 are no-ops */
    assert_int_equal(llaisys_kv_seq_add(m, 1, 0, 2, 5), LLAISYS_ERR_UNSUPPORTED);
    assert_non_null(strstr(llaisys_last_error(), "not supported"));
    assert_int_equal(llaisys_kv_seq_add(m, 1, 0, 2, 0), LLAISYS_OK);
    assert_int_equal(llaisys_kv_seq_add(m, 1, 4, -1, 2), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_add(m, 0, -1, -1, 2), LLAISYS_EMPTY_RANGE);
    assert_int_equal(llaisys_kv_seq_add(m, 5, -1, -1, 2), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_add(m, 1, -4, -1, 2), LLAISYS_ERR_INVALID_POS);
    assert_int_equal(pos_max(m, 1), 3);
    int32_t p;
    assert_int_equal(llaisys_kv_seq_pos_max(m, 3, &p), LLAISYS_ERR_INVALID_SEQ);
    assert_int_equal(llaisys_kv_seq_pos_max(m, 0, NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_kv_seq_pos_max(NULL, 0, &p), LLAISYS_ERR_INVALID_ARG);
    llaisys_model_destroy(m);
}

/* A batch that does not fit returns 1 with nothing changed; after freeing it fits and gives
 * the logits of a fresh run. */
static void test_no_room_then_retry(void **state)
{
    (void)state;
    int32_t a[40], b[30];
    make_ids(a, 40, 9);
    make_ids(b, 30, 10);
    llaisys_model *m = open_model(TINY, params(128, 64, 2)); /* 4 blocks */
    assert_int_equal(decode_seq(m, 0, a, 40, NULL), LLAISYS_OK); /* 3 blocks */
    struct llaisys_kv_stats s0 = stats(m);
    assert_int_equal(decode_seq(m, 1, b, 30, NULL), LLAISYS_NO_KV_ROOM);
    assert_int_equal(pos_max(m, 1), -1);
    assert_int_equal(llaisys_n_outputs(m), 0);
    struct llaisys_kv_stats s1 = stats(m);
    assert_int_equal(s1.used, s0.used);
    assert_int_equal(s1.free, s0.free);
    /* a batch of two sequences where only both together do not fit: nothing of either */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, 16, -1), LLAISYS_OK); /* 1 block */
    struct llaisys_batch two = llaisys_batch_init(60);
    for (int i = 0; i < 60; i++) {
        two.token[i] = i < 30 ? b[i] : a[i - 30];
        two.seq_id[i] = i < 30;
        two.logits[i] = i == 29;
    }
    two.n_tokens = 60; /* seq 1: 2 blocks; seq 0: 16 + 30 = 46 positions, 2 more blocks */
    assert_int_equal(llaisys_decode(m, &two), LLAISYS_NO_KV_ROOM);
    assert_int_equal(pos_max(m, 0), 15);
    assert_int_equal(pos_max(m, 1), -1);
    assert_int_equal(stats(m).used, 16);
    llaisys_batch_free(two);
    /* free and retry */
    assert_int_equal(llaisys_kv_seq_rm(m, 0, -1, -1), LLAISYS_OK);
    float *got = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 1, b, 30, got), LLAISYS_OK);
    reference(b, 30, ref);
    assert_logits_equal(got, ref);
    free(got);
    free(ref);
    llaisys_model_destroy(m);
}

static void test_prefix_cache(void **state)
{
    (void)state;
    enum { N = 40 }; /* two full blocks and a partial one */
    int32_t ids[N];
    make_ids(ids, N, 11);
    llaisys_model *m = open_model(TINY, params(128, 256, 2));
    float *first = malloc(sizeof(float) * V), *again = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 0, ids, N, first), LLAISYS_OK);
    assert_int_equal(stats(m).prefix_hits, 0);
    assert_int_equal(stats(m).peak_used, 48);
    assert_int_equal(llaisys_kv_seq_rm(m, 0, -1, -1), LLAISYS_OK);
    struct llaisys_kv_stats s = stats(m);
    assert_int_equal(s.used, 0);
    assert_int_equal(s.cached, 32); /* the two full blocks stay reusable */
    assert_int_equal(s.peak_used, 48);
    /* the same prompt in another sequence: its full blocks come from the cache */
    assert_int_equal(decode_seq(m, 1, ids, N, again), LLAISYS_OK);
    assert_int_equal(stats(m).prefix_hits, 32);
    assert_logits_equal(first, again);
    /* a reset is refused while a sequence holds blocks */
    assert_int_equal(llaisys_kv_reset_prefix_cache(m), LLAISYS_ERR_BUSY);
    assert_non_null(strstr(llaisys_last_error(), "held"));
    assert_int_equal(llaisys_kv_seq_rm(m, -1, -1, -1), LLAISYS_OK);
    assert_int_equal(llaisys_kv_reset_prefix_cache(m), LLAISYS_OK);
    assert_int_equal(stats(m).cached, 0);
    assert_int_equal(decode_seq(m, 0, ids, N, again), LLAISYS_OK);
    assert_int_equal(stats(m).prefix_hits, 32); /* nothing more came from the cache */
    assert_logits_equal(first, again);
    assert_int_equal(llaisys_kv_reset_prefix_cache(NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_kv_stats(m, NULL), LLAISYS_ERR_INVALID_ARG);
    free(first);
    free(again);
    llaisys_model_destroy(m);
}

static int abort_calls;
static bool abort_after(void *data)
{
    return ++abort_calls > *(int *)data;
}

static void test_abort(void **state)
{
    (void)state;
    int32_t ids[24];
    make_ids(ids, 24, 12);
    llaisys_model *m = open_model(TINY, params(128, 256, 2));
    assert_int_equal(decode_seq(m, 0, ids, 8, NULL), LLAISYS_OK);
    int after = 0;
    abort_calls = 0;
    llaisys_model_set_abort_callback(m, abort_after, &after);
    assert_int_equal(decode_seq(m, 0, ids + 8, 16, NULL), LLAISYS_ABORTED);
    assert_int_equal(abort_calls, 1);
    assert_int_equal(pos_max(m, 0), 7);
    assert_int_equal(stats(m).used, 16);
    assert_int_equal(llaisys_n_outputs(m), 0);
    /* stopped between the two layers: the first layer's K/V were written; a retry without the
     * callback overwrites them and gives the logits of a clean run */
    after = 1;
    abort_calls = 0;
    assert_int_equal(decode_seq(m, 0, ids + 8, 16, NULL), LLAISYS_ABORTED);
    assert_int_equal(abort_calls, 2);
    llaisys_model_set_abort_callback(m, NULL, NULL);
    float *got = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 0, ids + 8, 16, got), LLAISYS_OK);
    reference(ids, 24, ref);
    assert_logits_equal(got, ref);
    free(got);
    free(ref);
    llaisys_model_destroy(m);
}

/* The mock model's logits, by the formula documented in src/model/mock.c. */
static void mock_reference(const int32_t *hist, int n, float *out)
{
    uint64_t h = LL_GOLDEN64;
    for (int j = 0; j < n; j++)
        h = ll_mix64(h ^ (((uint64_t)hist[j] + 1) * LL_GOLDEN64 + (uint64_t)j));
    for (int v = 0; v < V; v++)
        out[v] = (float)((double)(ll_mix64(h ^ ((uint64_t)(v + 1) * 0xd6e8feb86659fd93ull)) >> 40) *
                         0x1p-21 - 4.0);
}

static void test_mock_routes_by_model_type(void **state)
{
    (void)state;
    llaisys_model *m = open_model(MOCK, params(64, 256, 2));
    assert_string_equal(llaisys_model_type(m), "mock");
    assert_int_equal(llaisys_model_n_ctx(m), 64);
    int32_t ids[3] = {1, 2, 3};
    float *got = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 0, ids, 3, got), LLAISYS_OK);
    mock_reference(ids, 3, ref);
    assert_logits_equal(got, ref);
    int best = 0;
    for (int v = 1; v < V; v++)
        if (got[v] > got[best])
            best = v;
    assert_int_equal(best, 84987); /* as `llaisys-cli generate` prints for this prompt */
    /* the history comes from the KV cache: a copy that diverges sees its own tokens */
    assert_int_equal(llaisys_kv_seq_cp(m, 0, 1, -1, 2), LLAISYS_OK);
    int32_t h[3] = {1, 2, 500};
    assert_int_equal(decode_seq(m, 1, h + 2, 1, got), LLAISYS_OK);
    mock_reference(h, 3, ref);
    assert_logits_equal(got, ref);
    free(got);
    free(ref);
    llaisys_model_destroy(m);
}

/* ---- the engine ---- */

static llaisys_engine *open_engine(const char *dir, const char *opts)
{
    llaisys_engine *e = NULL;
    int32_t rc = llaisys_engine_create(dir, opts, &e);
    if (rc)
        print_error("llaisys_engine_create: %s\n", llaisys_last_error());
    assert_int_equal(rc, LLAISYS_OK);
    return e;
}

static llaisys_request *submit(llaisys_engine *e, const char *json)
{
    llaisys_request *r = NULL;
    int32_t rc = llaisys_engine_submit(e, json, &r);
    if (rc)
        print_error("llaisys_engine_submit: %s\n", llaisys_last_error());
    assert_int_equal(rc, LLAISYS_OK);
    return r;
}

struct collected {
    int32_t ids[256];
    int n;
    char text[4096];
    size_t len;
    char reasoning[4096];
    size_t rlen;
    struct llaisys_event last;
    char stop_reason[64];
    int states_seen; /* bit per state */
};

/* Step the engine (unless it runs its own thread) until r finishes, collecting its events. */
static void run_to_end(llaisys_engine *e, llaisys_request *r, struct collected *c, bool step)
{
    memset(c, 0, sizeof *c);
    for (;;) {
        struct llaisys_event ev;
        int32_t got = llaisys_request_poll(r, step ? 0 : -1, &ev);
        assert_true(got == 0 || got == 1);
        c->states_seen |= 1 << ev.state;
        assert_true(c->n + ev.n_ids <= 256);
        assert_non_null(ev.ids);
        memcpy(c->ids + c->n, ev.ids, sizeof(int32_t) * (size_t)ev.n_ids);
        c->n += ev.n_ids;
        assert_true(c->len + ev.text_len < sizeof c->text);
        memcpy(c->text + c->len, ev.text, ev.text_len);
        c->len += ev.text_len;
        c->text[c->len] = '\0';
        memcpy(c->reasoning + c->rlen, ev.reasoning, ev.reasoning_len);
        c->rlen += ev.reasoning_len;
        c->reasoning[c->rlen] = '\0';
        if (ev.finish) {
            c->last = ev;
            if (ev.stop_reason)
                snprintf(c->stop_reason, sizeof c->stop_reason, "%s", ev.stop_reason);
            return;
        }
        if (step) {
            int32_t did;
            assert_int_equal(llaisys_engine_step(e, &did), LLAISYS_OK);
        }
    }
}

/* Greedy ids through the model-level API: the reference for the engine's. */
static void greedy_model(const int32_t *prompt, int n, int steps, int32_t *out)
{
    llaisys_model *m = open_model(TINY, params(256, 512, 1));
    int32_t t;
    float *l = malloc(sizeof(float) * V);
    assert_int_equal(decode_seq(m, 0, prompt, n, l), LLAISYS_OK);
    for (int k = 0; k < steps; k++) {
        t = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[t])
                t = v;
        out[k] = t;
        if (k + 1 < steps)
            assert_int_equal(decode_seq(m, 0, &t, 1, l), LLAISYS_OK);
    }
    free(l);
    llaisys_model_destroy(m);
}

static void test_engine_create_describe(void **state)
{
    (void)state;
    llaisys_engine *e = (llaisys_engine *)1;
    assert_int_equal(llaisys_engine_create(TINY, "threads=1 bogus=3", &e), LLAISYS_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(llaisys_last_error(), "unknown option 'bogus'"));
    assert_non_null(strstr(llaisys_last_error(), "max-seqs"));
    assert_int_equal(llaisys_engine_create(TINY, "threads=0", &e), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "threads"));
    assert_int_equal(llaisys_engine_create(TINY, "ctx", &e), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "needs a value"));
    assert_int_equal(llaisys_engine_create(TINY, "max_seqs=8,max_batch_tokens=4", &e),
                     LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "at least --max-seqs"));
    assert_int_equal(llaisys_engine_create("/nonexistent", NULL, &e), LLAISYS_ERR_IO);
    assert_int_equal(llaisys_engine_create(NULL, NULL, &e), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_create(TINY, NULL, NULL), LLAISYS_ERR_INVALID_ARG);

    e = open_engine(TINY, " threads=1, max_seqs=4  ctx=512 kv-memory=1M exact fixed_threads");
    char *d = llaisys_engine_describe(e);
    cJSON *j = cJSON_Parse(d);
    assert_non_null(j);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "fixed-threads")));
    assert_int_equal(cJSON_GetObjectItem(j, "max-seqs")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(j, "ctx")->valueint, 512);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "exact")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "no-prefix-cache")));
    assert_string_equal(cJSON_GetObjectItem(j, "model_type")->valuestring, "qwen2");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "chat_template")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "reasoning")));
    /* 1M of f32 KV at 2 layers x 2 heads x 16 x 2 (K, V) x 4 bytes = 512 bytes a token */
    assert_int_equal(cJSON_GetObjectItem(j, "kv-blocks")->valueint, 128);
    cJSON_Delete(j);
    llaisys_free(d);
    assert_null(llaisys_engine_describe(NULL));
    llaisys_engine_destroy(e);

    /* quant: the weights quantized while loading, by any scheme --quant takes */
    e = open_engine(TINY, "threads=1 quant=q4_k_m");
    d = llaisys_engine_describe(e);
    assert_non_null(strstr(d, "\"quant\":\"q4_k_m\""));
    llaisys_free(d);
    llaisys_engine_destroy(e);
    assert_int_equal(llaisys_engine_create(TINY, "quant=q5", &e), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "q4_k_m"));
}

static void test_engine_submit_poll(void **state)
{
    (void)state;
    enum { N = 20, K = 8 };
    int32_t ids[N], want[K];
    make_ids(ids, N, 13);
    greedy_model(ids, N, K, want);
    llaisys_engine *e = open_engine(TINY, "threads=1 max-seqs=4");
    char body[512];
    int w = snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < N; i++)
        w += snprintf(body + w, sizeof body - (size_t)w, "%s%d", i ? "," : "", ids[i]);
    snprintf(body + w, sizeof body - (size_t)w,
             "], \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true}", K);
    llaisys_request *r = submit(e, body);
    assert_int_equal(llaisys_request_id(r), 1);
    int32_t f0 = -1;
    assert_int_equal(llaisys_request_state(r, &f0), LLAISYS_REQ_WAITING);
    assert_int_equal(f0, LLAISYS_FINISH_NONE);
    assert_int_equal(llaisys_request_state(NULL, &f0), LLAISYS_ERR_INVALID_ARG);
    assert_true(llaisys_engine_has_work(e));
    struct llaisys_event ev;
    assert_int_equal(llaisys_request_poll(r, 0, &ev), 0);
    assert_int_equal(ev.n_ids, 0);
    assert_string_equal(ev.text, "");
    assert_int_equal(ev.state, LLAISYS_REQ_WAITING);
    assert_int_equal(ev.finish, LLAISYS_FINISH_NONE);
    int32_t did = -1;
    assert_int_equal(llaisys_engine_step(e, &did), LLAISYS_OK);
    assert_int_equal(did, 1);
    assert_int_equal(llaisys_request_state(r, NULL), LLAISYS_REQ_RUNNING);
    struct collected c;
    run_to_end(e, r, &c, true);
    assert_int_equal(c.n, K);
    assert_memory_equal(c.ids, want, sizeof want);
    assert_int_equal(c.last.finish, LLAISYS_FINISH_LENGTH);
    assert_int_equal(c.last.state, LLAISYS_REQ_FINISHED);
    assert_int_equal(c.last.usage.prompt_tokens, N);
    assert_int_equal(c.last.usage.completion_tokens, K);
    assert_true(c.last.timings.total_s > 0);
    assert_int_equal(c.last.stop_token_id, -1);
    assert_null(c.last.logprobs);
    assert_true(c.states_seen & (1 << LLAISYS_REQ_RUNNING));
    int32_t fin = -1;
    assert_int_equal(llaisys_request_state(r, &fin), LLAISYS_REQ_FINISHED);
    assert_int_equal(fin, LLAISYS_FINISH_LENGTH);
    /* the text is the decoded ids */
    llaisys_model *m = open_model(TINY, params(64, 64, 1));
    char *t = llaisys_model_detokenize(m, want, K, true);
    assert_string_equal(c.text, t);
    llaisys_free(t);
    llaisys_model_destroy(m);
    /* a finished request polls as nothing new */
    assert_int_equal(llaisys_request_poll(r, 0, &ev), 0);
    assert_int_equal(ev.state, LLAISYS_REQ_FINISHED);
    llaisys_request_release(r);
    assert_false(llaisys_engine_has_work(e));
    int32_t d2 = -1;
    assert_int_equal(llaisys_engine_step(e, &d2), LLAISYS_OK);
    assert_int_equal(d2, 0);
    struct llaisys_engine_stats st;
    assert_int_equal(llaisys_engine_stats(e, &st), LLAISYS_OK);
    assert_int_equal(st.finished, 1);
    assert_int_equal(st.generated_tokens, K);
    assert_int_equal(st.kv_in_use, 0);
    assert_int_equal(llaisys_engine_stats(e, NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_request_poll(NULL, 0, &ev), LLAISYS_ERR_INVALID_ARG);
    llaisys_engine_destroy(e);
}

static void test_engine_submit_errors(void **state)
{
    (void)state;
    llaisys_engine *e = open_engine(TINY, "threads=1 ctx=64 max-seqs=1 max-queue=2");
    struct {
        const char *body;
        int32_t want;
        const char *msg;
    } cases[] = {
        {"{\"prompt\": \"hi\"", LLAISYS_ERR_INVALID_ARG, "invalid JSON at line 1"},
        {"[1, 2]", LLAISYS_ERR_INVALID_ARG, "must be a JSON object"},
        {"{\"prompt\": \"hi\", \"temperature\": \"hot\"}", LLAISYS_ERR_INVALID_ARG,
         "param: temperature"},
        {"{\"prompt\": \"hi\", \"top_p\": 0}", LLAISYS_ERR_INVALID_ARG, "top_p"},
        {"{\"prompt\": \"hi\", \"n\": 2}", LLAISYS_ERR_UNSUPPORTED, "param: n"},
        {"{\"prompt\": [\"a\", \"b\"]}", LLAISYS_ERR_UNSUPPORTED, "param: prompt"},
        {"{\"prompt\": \"hi\", \"suffix\": \"x\"}", LLAISYS_ERR_UNSUPPORTED, "suffix"},
        {"{\"prompt\": [1, 999999]}", LLAISYS_ERR_INVALID_ARG, "outside the vocabulary"},
        {"{\"prompt\": \"hi\", \"max_tokens\": 100}", LLAISYS_ERR_TOO_LONG, "exceeds the context"},
        {"{\"prompt\": \"hi\", \"messages\": []}", LLAISYS_ERR_INVALID_ARG, "not both"},
        {"{\"temperature\": 0}", LLAISYS_ERR_INVALID_ARG, "needs 'messages'"},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", LLAISYS_ERR_INVALID_ARG,
         "robot"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llaisys_request *r = (llaisys_request *)1;
        int32_t rc = llaisys_engine_submit(e, cases[i].body, &r);
        if (rc != cases[i].want || !strstr(llaisys_last_error(), cases[i].msg))
            fail_msg("case %zu: %d '%s' (want %d, '%s')", i, rc, llaisys_last_error(),
                     cases[i].want, cases[i].msg);
        assert_null(r);
    }
    llaisys_request *r;
    assert_int_equal(llaisys_engine_submit(e, NULL, &r), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_submit(NULL, "{}", &r), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_submit(e, "{}", NULL), LLAISYS_ERR_INVALID_ARG);
    /* admission: max-seqs + max-queue = 3 are held, the fourth is refused */
    llaisys_request *q1 = submit(e, "{\"prompt\": \"a\", \"max_tokens\": 2}");
    llaisys_request *q2 = submit(e, "{\"prompt\": \"b\", \"max_tokens\": 2}");
    llaisys_request *q3 = submit(e, "{\"prompt\": \"b\", \"max_tokens\": 2}");
    assert_int_equal(llaisys_engine_submit(e, "{\"prompt\": \"c\"}", &r), LLAISYS_ERR_OVERLOADED);
    assert_non_null(strstr(llaisys_last_error(), "max-queue"));
    llaisys_request_release(q1);
    llaisys_request_release(q2);
    llaisys_request_release(q3);
    llaisys_engine_destroy(e);
}

static void test_engine_logprobs_stop_echo(void **state)
{
    (void)state;
    llaisys_engine *e = open_engine(TINY, "threads=1");
    const char *p = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0,"
                    " \"ignore_eos\": true, \"logprobs\": 3}";
    llaisys_request *r = submit(e, p);
    struct collected c;
    memset(&c, 0, sizeof c);
    int n = 0;
    for (bool done = false; !done;) {
        struct llaisys_event ev;
        if (llaisys_request_poll(r, 0, &ev) == 1 && ev.n_ids) {
            assert_non_null(ev.logprobs);
            assert_int_equal(ev.n_top, 3);
            for (int i = 0; i < ev.n_ids; i++) {
                /* greedy: the chosen id is the best one, its logprob the best logprob */
                assert_int_equal(ev.top_ids[i * 3], ev.ids[i]);
                assert_true(ev.logprobs[i] == ev.top_logprobs[i * 3]);
                assert_true(ev.top_logprobs[i * 3] >= ev.top_logprobs[i * 3 + 1]);
                assert_true(ev.logprobs[i] <= 0);
            }
            n += ev.n_ids;
        }
        memcpy(c.text + c.len, ev.text, ev.text_len);
        c.len += ev.text_len;
        done = ev.finish != 0;
        if (!done)
            llaisys_engine_step(e, NULL);
    }
    c.text[c.len] = '\0';
    assert_int_equal(n, 12);
    llaisys_request_release(r);
    assert_true(c.len > 4);

    /* a stop string taken from that text ends the same request early */
    char stop[8], body[256];
    size_t at = c.len / 2;
    while (at < c.len && ((unsigned char)c.text[at] & 0xc0) == 0x80)
        at++;
    snprintf(stop, sizeof stop, "%.2s", c.text + at);
    char esc[16];
    size_t k = 0;
    for (size_t i = 0; stop[i]; i++) {
        if (stop[i] == '"' || stop[i] == '\\')
            esc[k++] = '\\';
        esc[k++] = stop[i];
    }
    esc[k] = '\0';
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, "
             "\"temperature\": 0, \"ignore_eos\": true, \"stop\": [\"%s\"], \"echo\": true}", esc);
    r = submit(e, body);
    struct collected s;
    run_to_end(e, r, &s, true);
    assert_int_equal(s.last.finish, LLAISYS_FINISH_STOP);
    assert_string_equal(s.stop_reason, stop);
    /* echo: the prompt's text first, then the text up to (not including) the stop */
    assert_true(strncmp(s.text, "Once upon a time", 16) == 0);
    const char *first = strstr(c.text, stop);
    assert_non_null(first);
    assert_int_equal(s.len - 16, (size_t)(first - c.text));
    assert_memory_equal(s.text + 16, c.text, s.len - 16);
    llaisys_request_release(r);
    llaisys_engine_destroy(e);
}

static void test_engine_cancel_preempt(void **state)
{
    (void)state;
    llaisys_engine *e = open_engine(TINY, "threads=1 kv-blocks=4 block-size=16 max-seqs=2");
    /* two requests that cannot both keep their blocks: one is preempted along the way */
    int32_t a[20], b[20];
    make_ids(a, 20, 14);
    make_ids(b, 20, 15);
    char body[2][512];
    for (int k = 0; k < 2; k++) {
        int w = snprintf(body[k], sizeof body[k], "{\"prompt\": [");
        for (int i = 0; i < 20; i++)
            w += snprintf(body[k] + w, sizeof body[k] - (size_t)w, "%s%d", i ? "," : "",
                          k ? b[i] : a[i]);
        snprintf(body[k] + w, sizeof body[k] - (size_t)w,
                 "], \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}");
    }
    llaisys_request *r0 = submit(e, body[0]), *r1 = submit(e, body[1]);
    int seen = 0;
    while (llaisys_engine_has_work(e)) {
        assert_int_equal(llaisys_engine_step(e, NULL), LLAISYS_OK);
        seen |= 1 << llaisys_request_state(r0, NULL);
        seen |= 1 << llaisys_request_state(r1, NULL);
    }
    assert_true(seen & (1 << LLAISYS_REQ_PREEMPTED));
    struct collected c0, c1;
    run_to_end(e, r0, &c0, true);
    run_to_end(e, r1, &c1, true);
    assert_int_equal(c0.n, 40);
    assert_int_equal(c1.n, 40);
    assert_true(c0.last.usage.preemptions + c1.last.usage.preemptions > 0);
    int32_t want[40];
    greedy_model(b, 20, 40, want);
    assert_memory_equal(c1.ids, want, sizeof want);
    llaisys_request_release(r0);
    llaisys_request_release(r1);

    /* cancel a running request: it finishes as cancelled and frees its blocks */
    llaisys_request *r = submit(e, body[0]);
    llaisys_engine_step(e, NULL);
    llaisys_engine_step(e, NULL);
    assert_int_equal(llaisys_request_state(r, NULL), LLAISYS_REQ_RUNNING);
    llaisys_request_cancel(r);
    llaisys_request_cancel(r); /* twice is fine */
    struct collected c;
    run_to_end(e, r, &c, true);
    assert_int_equal(c.last.finish, LLAISYS_FINISH_CANCELLED);
    assert_true(c.n < 40);
    llaisys_request_cancel(r); /* after the finish: nothing */
    int32_t why = -1;
    assert_int_equal(llaisys_request_state(r, &why), LLAISYS_REQ_FINISHED);
    assert_int_equal(why, LLAISYS_FINISH_CANCELLED);
    llaisys_request_release(r);
    struct llaisys_engine_stats st;
    llaisys_engine_stats(e, &st);
    assert_int_equal(st.kv_in_use, 0);
    assert_true(st.preemptions > 0);
    /* the prefix cache holds the prompts' full blocks; a reset empties it */
    assert_true(st.kv_cached > 0);
    assert_int_equal(llaisys_engine_reset_prefix_cache(e), LLAISYS_OK);
    llaisys_engine_stats(e, &st);
    assert_int_equal(st.kv_cached, 0);
    llaisys_engine_destroy(e);
}

static void test_engine_generate(void **state)
{
    (void)state;
    int32_t ids[12], want[6];
    make_ids(ids, 12, 16);
    greedy_model(ids, 12, 6, want);
    llaisys_engine *e = open_engine(TINY, "threads=1");
    char req[1024];
    int w = snprintf(req, sizeof req, "[{\"prompt\": [");
    for (int i = 0; i < 12; i++)
        w += snprintf(req + w, sizeof req - (size_t)w, "%s%d", i ? "," : "", ids[i]);
    snprintf(req + w, sizeof req - (size_t)w,
             "], \"max_tokens\": 6, \"temperature\": 0, \"ignore_eos\": true},"
             " {\"prompt\": \"x\", \"top_k\": \"many\"},"
             " {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 5,"
             "  \"seed\": 3, \"temperature\": 1}]");
    char *out = NULL;
    assert_int_equal(llaisys_engine_generate(e, req, &out), LLAISYS_OK);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(j), 3);
    cJSON *r0 = cJSON_GetArrayItem(j, 0);
    cJSON *t = cJSON_GetObjectItem(r0, "token_ids");
    assert_int_equal(cJSON_GetArraySize(t), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(cJSON_GetArrayItem(t, i)->valueint, want[i]);
    assert_string_equal(cJSON_GetObjectItem(r0, "finish_reason")->valuestring, "length");
    cJSON *u = cJSON_GetObjectItem(r0, "usage");
    assert_int_equal(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, 12);
    assert_int_equal(cJSON_GetObjectItem(u, "completion_tokens")->valueint, 6);
    assert_int_equal(cJSON_GetObjectItem(u, "total_tokens")->valueint, 18);
    cJSON *err = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "error");
    assert_non_null(err);
    assert_non_null(strstr(cJSON_GetObjectItem(err, "message")->valuestring, "request 1"));
    assert_non_null(strstr(cJSON_GetObjectItem(err, "message")->valuestring, "top_k"));
    cJSON *r2 = cJSON_GetArrayItem(j, 2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r2, "token_ids")), 5);
    assert_int_equal(cJSON_GetObjectItem(r2, "seed")->valueint, 3);
    /* the chat template leaves <think> open: the output is reasoning */
    assert_non_null(cJSON_GetObjectItem(r2, "reasoning"));
    cJSON_Delete(j);
    llaisys_free(out);

    /* the same chat request again gives the same tokens (seeded) */
    char *again = NULL;
    assert_int_equal(llaisys_engine_generate(e, "[{\"messages\": [{\"role\": \"user\", "
                                                "\"content\": \"Hi\"}], \"max_tokens\": 5, "
                                                "\"seed\": 3, \"temperature\": 1}]", &again),
                     LLAISYS_OK);
    assert_non_null(again);
    llaisys_free(again);

    /* a 16-digit seed reaches the engine exactly (the body is not re-printed): generate and
     * submit sample the same tokens and report the same seed */
    const char *big = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 1,"
                      " \"ignore_eos\": true, \"seed\": 4758248721684919}";
    char arr[256];
    snprintf(arr, sizeof arr, " [ %s ] ", big);
    assert_int_equal(llaisys_engine_generate(e, arr, &out), LLAISYS_OK);
    assert_non_null(strstr(out, "\"seed\":4758248721684919,"));
    llaisys_request *sr = submit(e, big);
    struct collected sc;
    run_to_end(e, sr, &sc, true);
    assert_true(sc.last.seed == 4758248721684919ull);
    char ids_json[512] = "\"token_ids\":[";
    for (int i = 0; i < sc.n; i++)
        snprintf(ids_json + strlen(ids_json), sizeof ids_json - strlen(ids_json), "%s%d",
                 i ? "," : "", sc.ids[i]);
    strcat(ids_json, "]");
    assert_non_null(strstr(out, ids_json));
    llaisys_request_release(sr);
    llaisys_free(out);

    assert_int_equal(llaisys_engine_generate(e, "{\"prompt\": \"x\"}", &out),
                     LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "JSON array"));
    assert_null(out);
    assert_int_equal(llaisys_engine_generate(e, "[1,", &out), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_generate(e, "[]", &out), LLAISYS_OK);
    assert_string_equal(out, "[]");
    llaisys_free(out);
    assert_int_equal(llaisys_engine_generate(e, "[]", NULL), LLAISYS_ERR_INVALID_ARG);
    llaisys_engine_destroy(e);
}

/* The mock model's embedding of hist (n ids): its hidden state at each position is the first
 * two logits there (mock.c); pooled (mean: over every position; else the last) and
 * L2-normalized, as a directory without sentence-transformers files asks. */
static void mock_embedding(const int32_t *hist, int n, bool mean, double out[2])
{
    float *l = malloc(sizeof(float) * V);
    out[0] = out[1] = 0;
    for (int p = mean ? 1 : n; p <= n; p++) {
        mock_reference(hist, p, l);
        out[0] += l[0], out[1] += l[1];
    }
    double norm = sqrt(out[0] * out[0] + out[1] * out[1]);
    out[0] /= norm, out[1] /= norm;
    free(l);
}

/* The embedding array of answer item i ("float" form) against want. */
static void check_embedding(const cJSON *j, int i, const double want[2])
{
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), i);
    assert_int_equal(cJSON_GetObjectItem(d, "index")->valueint, i);
    const cJSON *v = cJSON_GetObjectItem(d, "embedding");
    assert_int_equal(cJSON_GetArraySize(v), 2);
    for (int k = 0; k < 2; k++)
        assert_true(fabs(cJSON_GetArrayItem(v, k)->valuedouble - want[k]) < 1e-6);
}

static void test_engine_embed(void **state)
{
    (void)state;
    static const int32_t a[3] = {1, 2, 3}, b[5] = {5, 6, 7, 8, 9};
    double wa[2], wb[2];
    for (int mean = 0; mean < 2; mean++) {
        /* max-seqs 1: the second input is submitted when the first ends */
        llaisys_engine *e = open_engine(MOCK, mean ? "threads=1 pooling=mean max-seqs=1"
                                                   : "threads=1 max-seqs=1");
        mock_embedding(a, 3, mean, wa);
        mock_embedding(b, 5, mean, wb);
        char *out = NULL;
        assert_int_equal(llaisys_engine_embed(e, "{\"input\": [[1, 2, 3], [5, 6, 7, 8, 9]], "
                                                 "\"encoding_format\": \"float\"}", &out),
                         LLAISYS_OK);
        cJSON *j = cJSON_Parse(out);
        assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "list");
        assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "mock");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"),
                                             "prompt_tokens")->valueint, 8);
        check_embedding(j, 0, wa);
        check_embedding(j, 1, wb);
        cJSON_Delete(j);
        llaisys_free(out);
        if (!mean) { /* the base64 form: the same f32 bytes */
            assert_int_equal(llaisys_engine_embed(e, "{\"input\": [1, 2, 3], "
                                                     "\"encoding_format\": \"base64\"}", &out),
                             LLAISYS_OK);
            float f[2] = {(float)wa[0], (float)wa[1]};
            static const char abc[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            const unsigned char *by = (const unsigned char *)f;
            char b64[16] = {0};
            for (int i = 0, k = 0; i < 8; i += 3) {
                unsigned x = (unsigned)by[i] << 16 | (i + 1 < 8 ? (unsigned)by[i + 1] << 8 : 0) |
                             (i + 2 < 8 ? by[i + 2] : 0);
                b64[k++] = abc[x >> 18 & 63];
                b64[k++] = abc[x >> 12 & 63];
                b64[k++] = i + 1 < 8 ? abc[x >> 6 & 63] : '=';
                b64[k++] = i + 2 < 8 ? abc[x & 63] : '=';
            }
            char want_s[48];
            snprintf(want_s, sizeof want_s, "\"embedding\":\"%s\"", b64);
            assert_non_null(strstr(out, want_s));
            llaisys_free(out);
        }
        llaisys_engine_destroy(e);
    }
    /* on the engine's own thread too; errors name the field */
    llaisys_engine *e = open_engine(MOCK, "threads=1");
    assert_int_equal(llaisys_engine_start(e), LLAISYS_OK);
    char *out = NULL;
    assert_int_equal(llaisys_engine_embed(e, "{\"input\": [1, 2, 3]}", &out), LLAISYS_OK);
    mock_embedding(a, 3, false, wa);
    cJSON *j = cJSON_Parse(out);
    check_embedding(j, 0, wa);
    cJSON_Delete(j);
    llaisys_free(out);
    assert_int_equal(llaisys_engine_embed(e, "{\"input\": \"\"}", &out), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "'input' must not be an empty string"));
    assert_null(out);
    assert_int_equal(llaisys_engine_embed(e, "{\"input\": \"a\", \"n\": 2}", &out),
                     LLAISYS_ERR_UNSUPPORTED);
    assert_non_null(strstr(llaisys_last_error(), "'n'"));
    assert_int_equal(llaisys_engine_embed(e, "{\"input\": [1], \"dimensions\": 3}", &out),
                     LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "'dimensions' is 3"));
    assert_int_equal(llaisys_engine_embed(e, "{\"input\": [[1], [999999]]}", &out),
                     LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_embed(e, NULL, &out), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_embed(e, "{}", NULL), LLAISYS_ERR_INVALID_ARG);
    assert_int_equal(llaisys_engine_stop(e), LLAISYS_OK);
    llaisys_engine_destroy(e);
    assert_int_equal(llaisys_engine_create(MOCK, "pooling=max", &e), LLAISYS_ERR_INVALID_ARG);
    assert_non_null(strstr(llaisys_last_error(), "'max' is not last, mean or first"));
}

static void test_engine_threaded(void **state)
{
    (void)state;
    llaisys_engine *e = open_engine(MOCK, "threads=1 ctx=256");
    assert_int_equal(llaisys_engine_start(e), LLAISYS_OK);
    assert_int_equal(llaisys_engine_start(e), LLAISYS_ERR_BUSY);
    assert_int_equal(llaisys_engine_step(e, NULL), LLAISYS_ERR_BUSY);
    assert_non_null(strstr(llaisys_last_error(), "own thread"));
    llaisys_request *r = submit(e, "{\"prompt\": [1, 2, 3], \"max_tokens\": 5, \"temperature\": 0,"
                                   " \"ignore_eos\": true}");
    struct collected c;
    run_to_end(e, r, &c, false);
    int32_t want[5] = {84987, 51834, 51983, 96286, 36324}; /* the mock's greedy continuation */
    assert_int_equal(c.n, 5);
    assert_memory_equal(c.ids, want, sizeof want);
    llaisys_request_release(r);
    /* generate waits on the engine's thread */
    char *out = NULL;
    assert_int_equal(llaisys_engine_generate(e, "[{\"prompt\": [1, 2, 3], \"max_tokens\": 2, "
                                                "\"temperature\": 0}]", &out), LLAISYS_OK);
    assert_non_null(strstr(out, "\"token_ids\":[84987,51834]"));
    llaisys_free(out);
    assert_int_equal(llaisys_engine_reset_prefix_cache(e), LLAISYS_OK);
    assert_int_equal(llaisys_engine_stop(e), LLAISYS_OK);
    int32_t did;
    assert_int_equal(llaisys_engine_step(e, &did), LLAISYS_OK);
    assert_int_equal(llaisys_engine_start(e), LLAISYS_OK);
    /* a request still running when the engine is destroyed reports cancelled */
    r = submit(e, "{\"prompt\": [1, 2, 3], \"max_tokens\": 200, \"ignore_eos\": true}");
    llaisys_engine_destroy(e);
    run_to_end(NULL, r, &c, false);
    assert_int_equal(c.last.finish, LLAISYS_FINISH_CANCELLED);
    llaisys_request_release(r);
}

/* Several threads submit, poll and cancel on one started engine at once; each gets the tokens
 * it gets alone. */
struct worker {
    llaisys_engine *e;
    int k;
    int32_t ids[16];
    int n;
    bool cancelled_ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char body[160];
    snprintf(body, sizeof body, "{\"prompt\": [7, %d, 9], \"max_tokens\": 16, "
             "\"temperature\": 0, \"ignore_eos\": true}", w->k);
    llaisys_request *r = NULL, *c = NULL;
    if (llaisys_engine_submit(w->e, body, &r) ||
        llaisys_engine_submit(w->e, "{\"prompt\": [1], \"max_tokens\": 3000, "
                                    "\"ignore_eos\": true}", &c))
        return NULL;
    llaisys_request_cancel(c);
    struct llaisys_event ev;
    do {
        if (llaisys_request_poll(r, -1, &ev) == 1) {
            for (int i = 0; i < ev.n_ids && w->n < 16; i++)
                w->ids[w->n++] = ev.ids[i];
        }
    } while (!ev.finish);
    do
        llaisys_request_poll(c, -1, &ev);
    while (!ev.finish);
    w->cancelled_ok = ev.finish == LLAISYS_FINISH_CANCELLED && ev.usage.completion_tokens < 3000;
    llaisys_request_release(r);
    llaisys_request_release(c);
    return NULL;
}

static void test_engine_many_threads(void **state)
{
    (void)state;
    enum { T = 4 };
    llaisys_engine *e = open_engine(MOCK, "threads=1 ctx=4096 max-seqs=8");
    assert_int_equal(llaisys_engine_start(e), LLAISYS_OK);
    struct worker w[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        w[i] = (struct worker){.e = e, .k = 100 + i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    struct llaisys_engine_stats st;
    llaisys_engine_stats(e, &st);
    assert_int_equal(st.submitted, 2 * T);
    llaisys_engine_destroy(e);
    for (int i = 0; i < T; i++) {
        assert_int_equal(w[i].n, 16);
        assert_true(w[i].cancelled_ok);
        /* alone, through the model level: the mock's greedy continuation */
        llaisys_model *m = open_model(MOCK, params(64, 64, 1));
        int32_t hist[3] = {7, 100 + i, 9}, t;
        float *l = malloc(sizeof(float) * V);
        assert_int_equal(decode_seq(m, 0, hist, 3, l), LLAISYS_OK);
        for (int k = 0; k < 16; k++) {
            t = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[t])
                    t = v;
            assert_int_equal(t, w[i].ids[k]);
            assert_int_equal(decode_seq(m, 0, &t, 1, l), LLAISYS_OK);
        }
        free(l);
        llaisys_model_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_status),
        cmocka_unit_test(test_model_create_errors),
        cmocka_unit_test(test_model_props_tokenizer),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_decode_equals_runtime),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_copy_then_diverge),
        cmocka_unit_test(test_seq_rm_ranges),
        cmocka_unit_test(test_seq_keep_add),
        cmocka_unit_test(test_no_room_then_retry),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_mock_routes_by_model_type),
        cmocka_unit_test(test_engine_create_describe),
        cmocka_unit_test(test_engine_submit_poll),
        cmocka_unit_test(test_engine_submit_errors),
        cmocka_unit_test(test_engine_logprobs_stop_echo),
        cmocka_unit_test(test_engine_cancel_preempt),
        cmocka_unit_test(test_engine_generate),
        cmocka_unit_test(test_engine_embed),
        cmocka_unit_test(test_engine_threaded),
        cmocka_unit_test(test_engine_many_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
