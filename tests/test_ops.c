/*
 * test_ops.c: the row-wise ops (ops.h) and attention (attention.h) against straightforward
 * double-precision references, every SIMD variant against its scalar twin, and the
 * determinism properties the forward pass relies on (batch position, paging, threads).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "ops.h"
#include "pool.h"

/* Deterministic pseudo-random floats in [-1, 1). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* |got - want| <= tol · max(1, |want|) for every element. */
static void assert_close(const float *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        double lim = tol * fmax(1.0, fabs(want[i]));
        if (!(fabs(got[i] - want[i]) <= lim)) {
            print_error("element %d: got %.9g want %.9g (tol %.3g)\n", i, got[i], want[i], lim);
            fail();
        }
    }
}

static void test_embedding(void **state)
{
    (void)state;
    enum { V = 7, D = 33 };
    float tf[V * D];
    uint16_t tb[V * D], th[V * D];
    fill(tf, V * D, 3.0f);
    for (int i = 0; i < V * D; i++) {
        tb[i] = ll_f32_to_bf16(tf[i]);
        th[i] = ll_f32_to_f16(tf[i]);
    }
    int32_t ids[4] = {6, 0, 3, 6};
    float out[4 * D];
    double want[4 * D];

    ll_embedding(out, tf, LL_F32, ids, 4, D);
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < D; d++)
            want[i * D + d] = tf[ids[i] * D + d];
    assert_close(out, want, 4 * D, 0.0);

    ll_embedding(out, tb, LL_BF16, ids, 4, D);
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < D; d++)
            want[i * D + d] = ll_bf16_to_f32(tb[ids[i] * D + d]);
    assert_close(out, want, 4 * D, 0.0);

    ll_embedding(out, th, LL_F16, ids, 4, D);
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < D; d++) {
            want[i * D + d] = ll_f16_to_f32(th[ids[i] * D + d]);
            assert_true(fabs(want[i * D + d] - tf[ids[i] * D + d]) < 2e-3);
        }
    assert_close(out, want, 4 * D, 0.0);
}

static void test_rms_norm(void **state)
{
    (void)state;
    enum { N = 3, D = 1536 };
    float *x = malloc(sizeof(float) * N * D), *out = malloc(sizeof(float) * N * D);
    float w[D];
    uint16_t wb[D];
    double *want = malloc(sizeof(double) * N * D);
    fill(x, N * D, 5.0f);
    fill(w, D, 2.0f);
    for (int d = 0; d < D; d++)
        wb[d] = ll_f32_to_bf16(w[d]);
    const float eps = 1e-6f;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N; i++) {
            double ss = 0;
            for (int d = 0; d < D; d++)
                ss += (double)x[i * D + d] * x[i * D + d];
            double inv = 1.0 / sqrt(ss / D + eps);
            for (int d = 0; d < D; d++)
                want[i * D + d] = x[i * D + d] * inv *
                                  (pass ? (double)ll_bf16_to_f32(wb[d]) : (double)w[d]);
        }
        ll_rms_norm(out, x, pass ? (const void *)wb : (const void *)w, pass ? LL_BF16 : LL_F32,
                    N, D, eps);
        assert_close(out, want, N * D, 1e-6);
        ll_rms_norm_ref(out, x, pass ? (const void *)wb : (const void *)w,
                        pass ? LL_BF16 : LL_F32, N, D, eps);
        assert_close(out, want, N * D, 1e-6);
    }
    /* f16 weights, and a row length that is not a multiple of 16. */
    uint16_t wh[D];
    for (int d = 0; d < D; d++)
        wh[d] = ll_f32_to_f16(w[d]);
    for (int i = 0; i < 2; i++) {
        double ss = 0;
        for (int d = 0; d < 37; d++)
            ss += (double)x[i * 37 + d] * x[i * 37 + d];
        for (int d = 0; d < 37; d++)
            want[i * 37 + d] = x[i * 37 + d] / sqrt(ss / 37 + eps) * ll_f16_to_f32(wh[d]);
    }
    ll_rms_norm(out, x, wh, LL_F16, 2, 37, eps);
    assert_close(out, want, 2 * 37, 1e-6);
    ll_rms_norm_ref(out, x, wh, LL_F16, 2, 37, eps);
    assert_close(out, want, 2 * 37, 1e-6);
    /* In place gives the same bits. */
    ll_rms_norm(out, x, w, LL_F32, N, D, eps);
    ll_rms_norm(x, x, w, LL_F32, N, D, eps);
    assert_memory_equal(out, x, sizeof(float) * N * D);
    free(x);
    free(out);
    free(want);
}

static void test_rope(void **state)
{
    (void)state;
    enum { HD = 128, NH = 3, NPOS = 4096 };
    /* any table of frequencies is used as given (a scaled one here: every third pair slower) */
    double inv_freq[HD / 2];
    for (int j = 0; j < HD / 2; j++)
        inv_freq[j] = pow(10000.0, -2.0 * j / HD) * (j % 3 ? 1.0 : 0.125);
    struct ll_rope r;
    assert_int_equal(ll_rope_init(&r, HD, HD, NPOS, inv_freq, 1.0, NULL), LL_OK);
    struct ll_rope bad;
    assert_int_equal(ll_rope_init(&bad, 8, 7, NPOS, inv_freq, 1.0, NULL), LL_EINVAL);
    assert_int_equal(ll_rope_init(&bad, 8, 10, NPOS, inv_freq, 1.0, NULL), LL_EINVAL);

    float x[4 * NH * HD], orig[4 * NH * HD];
    double want[4 * NH * HD];
    int32_t pos[4] = {0, 1, 4095, 1000};
    fill(x, 4 * NH * HD, 2.0f);
    memcpy(orig, x, sizeof x);
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < NH; h++)
            for (int j = 0; j < HD / 2; j++) {
                double a = pos[i] * pow(10000.0, -2.0 * j / HD) * (j % 3 ? 1.0 : 0.125);
                const float *v = orig + (i * NH + h) * HD;
                want[(i * NH + h) * HD + j] = v[j] * cos(a) - v[j + HD / 2] * sin(a);
                want[(i * NH + h) * HD + j + HD / 2] = v[j + HD / 2] * cos(a) + v[j] * sin(a);
            }
    ll_rope_apply(x, &r, pos, 4, NH);
    assert_close(x, want, 4 * NH * HD, 2e-6);
    /* Position 0 is the identity. */
    assert_memory_equal(x, orig, sizeof(float) * NH * HD);
    /* A row's result does not depend on where it sits in the batch. */
    float one[NH * HD];
    memcpy(one, orig + 3 * NH * HD, sizeof one);
    ll_rope_apply(one, &r, &pos[3], 1, NH);
    assert_memory_equal(one, x + 3 * NH * HD, sizeof one);
    ll_rope_free(&r);
    /* a scaled table (yarn's attention factor): the same rotation, 1.5 times as long */
    assert_int_equal(ll_rope_init(&r, HD, HD, NPOS, inv_freq, 1.5, NULL), LL_OK);
    memcpy(x, orig, sizeof x);
    ll_rope_apply(x, &r, pos, 4, NH);
    for (int i = 0; i < 4 * NH * HD; i++)
        want[i] *= 1.5;
    assert_close(x, want, 4 * NH * HD, 3e-6);
    ll_rope_free(&r);
    /* partial rotary (Phi-4-mini's 0.75): the first R dims turn in pairs (j, j + R/2), the
     * rest pass through bit for bit */
    enum { R = HD * 3 / 4 };
    assert_int_equal(ll_rope_init(&r, HD, R, NPOS, inv_freq, 1.0, NULL), LL_OK);
    memcpy(x, orig, sizeof x);
    ll_rope_apply(x, &r, pos, 4, NH);
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < NH; h++) {
            const float *v = orig + (i * NH + h) * HD;
            double *w = want + (i * NH + h) * HD;
            for (int j = 0; j < R / 2; j++) {
                double a = pos[i] * inv_freq[j];
                w[j] = v[j] * cos(a) - v[j + R / 2] * sin(a);
                w[j + R / 2] = v[j + R / 2] * cos(a) + v[j] * sin(a);
            }
            for (int j = R; j < HD; j++)
                w[j] = v[j];
        }
    assert_close(x, want, 4 * NH * HD, 2e-6);
    for (int i = 0; i < 4 * NH; i++)
        assert_memory_equal(x + i * HD + R, orig + i * HD + R, sizeof(float) * (HD - R));
    ll_rope_free(&r);
}

static void test_swiglu(void **state)
{
    (void)state;
    enum { N = 8960 + 7 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *o1 = malloc(sizeof(float) * N), *o2 = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N);
    fill(g, N, 12.0f);
    fill(u, N, 3.0f);
    g[0] = -120.0f;
    g[1] = 95.0f;
    for (int i = 0; i < N; i++)
        want[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    ll_swiglu_ref(o1, g, u, N);
    assert_close(o1, want, N, 1e-6);
    ll_swiglu(o2, g, u, N);
    assert_close(o2, want, N, 1e-6);
    /* An element's value does not depend on the length of the row it is in. */
    ll_swiglu(o1, g + 5, u + 5, 20);
    assert_memory_equal(o1, o2 + 5, sizeof(float) * 20);
    free(g);
    free(u);
    free(o1);
    free(o2);
    free(want);
}

/* gelu_tanh(g) · u in double, in tanh form (not the sigmoid form the kernels use). */
static double geglu_double(double g, double u)
{
    double c = sqrt(2.0 / M_PI);
    return 0.5 * g * (1.0 + tanh(c * (g + 0.044715 * g * g * g))) * u;
}

static void test_geglu(void **state)
{
    (void)state;
    enum { N = 9216 + 11, NX = 61 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *o1 = malloc(sizeof(float) * N), *o2 = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N);
    fill(g, N, 12.0f);
    fill(u, N, 3.0f);
    /* The far ends: e^(-2u) overflows (scalar) or clamps (SIMD) below zero, vanishes above. */
    const float far[] = {-30.0f, 30.0f, -120.0f, 95.0f, -1e4f, 1e4f, -1e20f, 1e20f, 0.0f, -0.0f};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++)
        g[i] = far[i];
    for (int i = 0; i < N; i++)
        want[i] = geglu_double(g[i], u[i]);
    ll_geglu_ref(o1, g, u, N);
    assert_close(o1, want, N, 1e-6);
    ll_geglu(o2, g, u, N);
    assert_close(o2, want, N, 1e-6);
    for (int i = 0; i < N; i++) {
        assert_true(isfinite(o1[i]) && isfinite(o2[i]));
        want[i] = o1[i]; /* the variant against the scalar reference directly */
    }
    assert_close(o2, want, N, 1e-6);
    /* -30 gives -0 to well below f32 resolution, 30 gives 30 (times u), both variants. */
    assert_true(fabsf(o1[0]) < 1e-30f && fabsf(o2[0]) < 1e-30f);
    assert_true(o1[1] == 30.0f * u[1] &&
                fabsf(o2[1] - 30.0f * u[1]) <= 1e-6f * 30.0f * fabsf(u[1]));

    /* A sweep of x from -30 to 30 with u = 1 against the double formula. */
    float x[NX], one[NX], y[NX];
    double wx[NX];
    for (int i = 0; i < NX; i++) {
        x[i] = -30.0f + i;
        one[i] = 1.0f;
        wx[i] = geglu_double(x[i], 1.0);
    }
    ll_geglu_ref(y, x, one, NX);
    assert_close(y, wx, NX, 1e-6);
    ll_geglu(y, x, one, NX);
    assert_close(y, wx, NX, 1e-6);

    /* Every short length (all tail shapes of both widths): the variant against the reference,
     * and an element's value independent of the length of its row. */
    for (int n = 1; n <= 40; n++) {
        double w[40];
        for (int i = 0; i < n; i++)
            w[i] = geglu_double(g[100 + i], u[100 + i]);
        ll_geglu(o1, g + 100, u + 100, n);
        assert_close(o1, w, n, 1e-6);
        assert_memory_equal(o1, o2 + 100, sizeof(float) * n);
        ll_geglu_ref(o1, g + 100, u + 100, n);
        assert_close(o1, w, n, 1e-6);
    }

    /* In place, as the forward pass calls it (out == gate), then out == up. */
    memcpy(o1, g, sizeof(float) * N);
    ll_geglu(o1, o1, u, N);
    assert_memory_equal(o1, o2, sizeof(float) * N);
    memcpy(o1, u, sizeof(float) * N);
    ll_geglu(o1, g, o1, N);
    assert_memory_equal(o1, o2, sizeof(float) * N);
    free(g);
    free(u);
    free(o1);
    free(o2);
    free(want);
}

static void test_exp(void **state)
{
    (void)state;
    enum { N = 4001 };
    float x[N], y[N];
    double want[N];
    for (int i = 0; i < N; i++) {
        x[i] = -87.0f + 175.0f * i / (N - 1);
        want[i] = exp((double)x[i]);
    }
    ll_exp(y, x, N);
    for (int i = 0; i < N; i++)
        assert_true(fabs(y[i] - want[i]) <= 4e-7 * want[i]);
    float big = 1000.0f, tiny = -1000.0f, r;
    ll_exp(&r, &big, 1);
    assert_true(isfinite(r) && r > 1e38f);
    ll_exp(&r, &tiny, 1);
    assert_true(r >= 0.0f && r < 1e-44f);
}

static void test_softmax(void **state)
{
    (void)state;
    enum { N = 151936 };
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N);
    fill(x, N, 30.0f);
    double mx = -1e30, sum = 0;
    for (int i = 0; i < N; i++)
        mx = fmax(mx, x[i]);
    for (int i = 0; i < N; i++)
        sum += exp(x[i] - mx);
    for (int i = 0; i < N; i++)
        want[i] = exp(x[i] - mx) / sum;
    for (int v = 0; v < 2; v++) {
        memcpy(a, x, sizeof(float) * N);
        if (v)
            ll_softmax(a, N);
        else
            ll_softmax_ref(a, N);
        double tot = 0;
        for (int i = 0; i < N; i++) {
            assert_true(fabs(a[i] - want[i]) <= 1e-5 * want[i] + 1e-12);
            tot += a[i];
        }
        assert_true(fabs(tot - 1.0) < 1e-5);
    }
    free(x);
    free(a);
    free(want);
}

static void test_argmax_add(void **state)
{
    (void)state;
    float x[6] = {1.0f, 3.0f, NAN, 3.0f, -2.0f, 0.0f};
    assert_int_equal(ll_argmax(x, 6), 1);
    float y[3] = {NAN, -5.0f, -4.0f};
    assert_int_equal(ll_argmax(y, 3), 2);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -2, 1e-8f, 4, -5};
    ll_add(a, a, b, 5);
    assert_true(a[0] == 1.5f && a[1] == 0.0f && a[2] == 3.0f && a[3] == 8.0f && a[4] == 0.0f);
}

/* ---- attention ---- */

/* The attention options of struct ll_attn_batch (zero: plain causal, 1/√hd, no softcap). */
struct attn_opts {
    int window;
    float scale, softcap;
};

/* Double-precision causal GQA attention over logical positions, the options written out as
 * attention.h states them. k, v: (npos, nkv, hd) in f32 (already rounded to what the cache
 * stores). */
static void attention_double(double *out, const float *q, const float *k, const float *v,
                             const int32_t *pos, int n, int nh, int nkv, int hd,
                             const struct attn_opts *o)
{
    double *s = malloc(sizeof(double) * 4096);
    double scale = o->scale > 0 ? (double)o->scale : 1.0 / sqrt((double)hd);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv), np = pos[i] + 1;
            int j0 = o->window > 0 && np - o->window > 0 ? np - o->window : 0;
            const float *qh = q + ((size_t)i * nh + h) * hd;
            double mx = -1e300, sum = 0;
            for (int j = j0; j < np; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)qh[e] * k[((size_t)j * nkv + kh) * hd + e];
                s[j] = d * scale;
                if (o->softcap > 0)
                    s[j] = o->softcap * tanh(s[j] / o->softcap);
                mx = fmax(mx, s[j]);
            }
            for (int j = j0; j < np; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < hd; e++) {
                double acc = 0;
                for (int j = j0; j < np; j++)
                    acc += s[j] * v[((size_t)j * nkv + kh) * hd + e];
                out[((size_t)i * nh + h) * hd + e] = acc / sum;
            }
        }
    free(s);
}

struct attn_case {
    int nh, nkv, hd, npos, block_size;
    enum ll_dtype dtype;
};

static const struct attn_opts no_opts = {0, 0.0f, 0.0f};

/* One sequence of npos tokens over a paged table (blocks in reverse physical order), attention
 * with the options o: prefill and the scalar reference against the double formula; then the
 * same bits for a token whatever the batch: decoded one at a time into a fresh cache (with only
 * the scratch the window needs), in a batch in reverse order, and, where the token's window
 * reaches position 0, as without the window. */
static void run_attention_case(const struct attn_case *c, const struct attn_opts *o,
                               struct ll_pool *pool)
{
    int nh = c->nh, nkv = c->nkv, hd = c->hd, np = c->npos, bs = c->block_size;
    int nblk = (np + bs - 1) / bs, nslots = nblk * bs;
    int kmax = o->window > 0 && o->window < np ? o->window : np; /* most keys of a token */
    size_t qrow = (size_t)nh * hd, kvrow = (size_t)nkv * hd;
    float *q = malloc(sizeof(float) * np * qrow), *k = malloc(sizeof(float) * np * kvrow);
    float *v = malloc(sizeof(float) * np * kvrow), *kr = malloc(sizeof(float) * np * kvrow);
    float *vr = malloc(sizeof(float) * np * kvrow), *qrev = malloc(sizeof(float) * np * qrow);
    float *o_pre = malloc(sizeof(float) * np * qrow), *o_dec = malloc(sizeof(float) * np * qrow);
    float *o_ref = malloc(sizeof(float) * np * qrow), *o_alt = malloc(sizeof(float) * np * qrow);
    double *want = calloc(np * qrow, sizeof(double));
    int nth = ll_pool_size(pool);
    float *scratch = malloc(sizeof(float) * ll_attention_scratch_floats(nth, nh, nkv, np));
    float *scratch_w = malloc(sizeof(float) * ll_attention_scratch_floats(nth, nh, nkv, kmax));
    fill(q, np * (int)qrow, 2.0f);
    fill(k, np * (int)kvrow, 2.0f);
    fill(v, np * (int)kvrow, 1.0f);
    for (size_t i = 0; i < np * kvrow; i++) {
        kr[i] = c->dtype == LL_BF16 ? ll_bf16_to_f32(ll_f32_to_bf16(k[i])) : k[i];
        vr[i] = c->dtype == LL_BF16 ? ll_bf16_to_f32(ll_f32_to_bf16(v[i])) : v[i];
    }
    /* Blocks in reverse physical order, so paging is really exercised. */
    int32_t *table = malloc(sizeof(int32_t) * nblk), *pos = malloc(sizeof(int32_t) * np);
    int32_t *slot = malloc(sizeof(int32_t) * np), *seq = calloc((size_t)np, sizeof(int32_t));
    int32_t *prev = malloc(sizeof(int32_t) * np);
    for (int b = 0; b < nblk; b++)
        table[b] = nblk - 1 - b;
    for (int p = 0; p < np; p++) {
        pos[p] = p;
        prev[p] = np - 1 - p;
        slot[p] = table[p / bs] * bs + p % bs;
        memcpy(qrev + (size_t)(np - 1 - p) * qrow, q + (size_t)p * qrow, sizeof(float) * qrow);
    }
    struct ll_kv_seq sq = {table, nblk};
    struct ll_kv_cache kv;
    assert_int_equal(ll_kv_cache_init(&kv, c->dtype, 2, nslots, nkv, hd, NULL), LL_OK);

    /* Prefill: all tokens in one batch, on layer 1. */
    ll_kv_cache_write(&kv, 1, slot, k, v, np);
    struct ll_attn_batch b = {np, pos, seq, &sq, bs, o->window, o->scale, o->softcap};
    ll_attention(o_pre, q, &kv, 1, &b, nh, scratch, np, pool);
    ll_attention_ref(o_ref, q, &kv, 1, &b, nh, scratch, np);
    attention_double(want, q, kr, vr, pos, np, nh, nkv, hd, o);
    assert_close(o_ref, want, np * (int)qrow, 2e-5);
    assert_close(o_pre, want, np * (int)qrow, 2e-5);

    /* The batch in reverse order. */
    struct ll_attn_batch rb = b;
    rb.pos = prev;
    ll_attention(o_alt, qrev, &kv, 1, &rb, nh, scratch, np, pool);
    for (int p = 0; p < np; p++)
        assert_memory_equal(o_alt + (size_t)(np - 1 - p) * qrow, o_pre + (size_t)p * qrow,
                            sizeof(float) * qrow);

    /* Without the window (the other options kept): the same bits where pos < window. */
    if (o->window > 0) {
        struct ll_attn_batch ub = b;
        ub.window = 0;
        ll_attention(o_alt, q, &kv, 1, &ub, nh, scratch, np, pool);
        for (int p = 0; p < np; p++)
            if (p < o->window)
                assert_memory_equal(o_alt + (size_t)p * qrow, o_pre + (size_t)p * qrow,
                                    sizeof(float) * qrow);
            else
                assert_memory_not_equal(o_alt + (size_t)p * qrow, o_pre + (size_t)p * qrow,
                                        sizeof(float) * qrow);
    }

    /* Decode: one token at a time into a fresh cache gives the same bits as prefill. */
    ll_kv_cache_free(&kv);
    assert_int_equal(ll_kv_cache_init(&kv, c->dtype, 2, nslots, nkv, hd, NULL), LL_OK);
    for (int p = 0; p < np; p++) {
        ll_kv_cache_write(&kv, 1, &slot[p], k + p * kvrow, v + p * kvrow, 1);
        struct ll_attn_batch one = {1, &pos[p], seq, &sq, bs, o->window, o->scale, o->softcap};
        ll_attention(o_dec + p * qrow, q + p * qrow, &kv, 1, &one, nh, scratch_w, kmax, pool);
    }
    assert_memory_equal(o_pre, o_dec, sizeof(float) * np * qrow);

    ll_kv_cache_free(&kv);
    free(q), free(k), free(v), free(kr), free(vr), free(qrev), free(o_pre), free(o_dec);
    free(o_ref), free(o_alt), free(want), free(scratch), free(scratch_w), free(table);
    free(pos), free(slot), free(seq), free(prev);
}

static void test_attention(void **state)
{
    (void)state;
    const struct attn_case cases[] = {
        {4, 2, 16, 37, 37, LL_F32},    /* tiny-qwen2 shape, contiguous */
        {4, 2, 16, 37, 8, LL_BF16},    /* paged, bf16 */
        {12, 2, 128, 70, 16, LL_F32},  /* r1 shape */
        {12, 2, 128, 70, 70, LL_BF16},
        {6, 3, 24, 19, 5, LL_F32},     /* head_dim not a multiple of 16: scalar loops */
        {2, 2, 144, 21, 4, LL_BF16},   /* 128 + 16 */
        {12, 1, 32, 23, 23, LL_BF16},  /* group of 12: the per-head fallback of the SIMD loops */
        {7, 1, 48, 17, 6, LL_F32},     /* group of 7, head_dim 32 + 16 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_attention_case(&cases[i], &no_opts, NULL);
}

/* Sliding windows of 1, 3, a block, a block and one, and longer than the context, over
 * multi-block paged tables (the window starting mid-block), f32 and bf16, every loop width
 * (head_dim 16 and 128: AVX-512; 24 and 40: AVX2 or scalar), groups of 1, 2, 7 and 12. */
static void test_attention_window(void **state)
{
    (void)state;
    const struct attn_case cases[] = {
        {4, 2, 16, 37, 8, LL_F32},  {12, 2, 128, 45, 16, LL_BF16}, {6, 3, 24, 19, 5, LL_F32},
        {2, 2, 40, 23, 4, LL_BF16}, {7, 1, 48, 17, 6, LL_F32},     {12, 1, 32, 23, 7, LL_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int bs = cases[i].block_size;
        const int windows[] = {1, 3, bs, bs + 1, cases[i].npos + 4};
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
            struct attn_opts o = {windows[w], 0.0f, 0.0f};
            run_attention_case(&cases[i], &o, NULL);
        }
    }
}

/* Gemma's scale (query_pre_attn_scalar^-0.5) and logit softcap, alone, together and with a
 * window: against the double formula, and batch-independent. */
static void test_attention_scale_softcap(void **state)
{
    (void)state;
    const struct attn_case cases[] = {
        {4, 2, 16, 37, 8, LL_F32},
        {8, 4, 128, 40, 16, LL_BF16},
        {6, 3, 24, 19, 5, LL_F32},
    };
    const struct attn_opts opts[] = {
        {0, 0.0625f, 0.0f}, /* 256^-0.5 */
        {0, 0.0f, 2.0f},    /* a cap that bites on these scores */
        {0, 0.4f, 50.0f},   /* Gemma 2's cap, scores up to ~ 20 */
        {0, 0.3f, 1.5f},    /* both, the cap below most scores */
        {5, 0.25f, 3.0f},   /* with a window */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
            run_attention_case(&cases[i], &opts[k], NULL);
}

static void test_attention_threads(void **state)
{
    (void)state;
    struct ll_pool *pool;
    assert_int_equal(ll_pool_create(&pool, 3, NULL), LL_OK);
    const struct attn_case c = {12, 2, 128, 50, 16, LL_BF16};
    run_attention_case(&c, &no_opts, pool);
    const struct attn_opts gemma = {7, 0.0625f, 50.0f};
    run_attention_case(&c, &gemma, pool);
    /* Threads do not change a bit: compare a 3-thread run with a 1-thread run. */
    enum { NH = 4, NKV = 2, HD = 32, NP = 29 };
    float q[NP * NH * HD], k[NP * NKV * HD], v[NP * NKV * HD], o1[NP * NH * HD], o3[NP * NH * HD];
    float scratch[3 * (NH / NKV) * NP];
    fill(q, NP * NH * HD, 1.0f);
    fill(k, NP * NKV * HD, 1.0f);
    fill(v, NP * NKV * HD, 1.0f);
    int32_t pos[NP], slot[NP], seq[NP] = {0}, table[1] = {0};
    for (int p = 0; p < NP; p++)
        pos[p] = slot[p] = p;
    struct ll_kv_cache kv;
    assert_int_equal(ll_kv_cache_init(&kv, LL_F32, 1, NP, NKV, HD, NULL), LL_OK);
    ll_kv_cache_write(&kv, 0, slot, k, v, NP);
    struct ll_kv_seq sq = {table, 1};
    struct ll_attn_batch b = {NP, pos, seq, &sq, NP, 0, 0.0f, 0.0f};
    ll_attention(o1, q, &kv, 0, &b, NH, scratch, NP, NULL);
    ll_attention(o3, q, &kv, 0, &b, NH, scratch, NP, pool);
    assert_memory_equal(o1, o3, sizeof o1);
    ll_kv_cache_free(&kv);
    ll_pool_free(pool);
}

/* Every variant this CPU can run (ll_ops_set_variant), each through the whole suite; the ones it
 * cannot run are named with the reason. */
int main(void)
{
    static const char *const variants[] = {"avx512", "avx2", "scalar"};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding), cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_rope),      cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_exp),       cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_argmax_add), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_scale_softcap),
        cmocka_unit_test(test_attention_threads),
    };
    int failed = 0;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (!ll_ops_set_variant(variants[v])) {
            printf("SKIP ops and attention variant %s: this CPU cannot run it\n", variants[v]);
            continue;
        }
        printf("ops variant: %s, attention variant (hd 128): %s, (hd 24): %s\n",
               ll_ops_variant(), ll_attention_variant(128), ll_attention_variant(24));
        failed += cmocka_run_group_tests_name(variants[v], tests, NULL, NULL);
    }
    return failed;
}
