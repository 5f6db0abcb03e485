/*
 * test_matmul.c: ll_matmul in every variant this CPU runs, against the scalar references and a
 * double-precision sum, plus the determinism guarantee, bias handling, f16 conversions and an
 * OpenBLAS sgemm baseline.
 *
 * Tolerances: the references (and so every variant) must be within 1e-5 · Σ|x·w| (+|bias|) of
 * the double-precision sum of the same products (activations rounded to bf16 first on the fast
 * path). Variants must equal their reference bit for bit (matmul.h, "Reduction order" and "Tile
 * order": ll_matmul_ref_tiles for the fast path of amx and amx-emul, ll_matmul_ref for the rest);
 * the test data stay far from denormals, where the AVX2 fast path is allowed to differ. amx-emul
 * (the AMX kernel on tiles emulated in C) runs on every CPU; amx, the real tiles, where the CPU
 * has amx_bf16 and Linux grants the tiles (else its skip says why).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cblas.h>
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16pack.h"
#include "dtype.h"
#include "isa.h"
#include "matmul.h"
#include "matmul_kernels.h"
#include "pool.h"

static const char *const variant_names[] = {"scalar", "avx2", "avx512", "amx", "amx-emul"};

/* Whether variant v sums the fast path in the tile order. */
static int tiles_variant(size_t v)
{
    return !strncmp(variant_names[v], "amx", 3);
}
static char default_variant[32];
static struct ll_pool *pool2, *pool3;

/* Matmul scratch for every call below with M <= SCRATCH_M and K <= SCRATCH_K (made in setup). */
enum { SCRATCH_M = 64, SCRATCH_K = 1536 };
static void *scratch_buf;
static size_t scratch_size;
#define SCRATCH scratch_buf, scratch_size

/* ---- helpers ---- */

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
    rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

static double rng_unit(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static float *rand_f32(size_t n, double scale)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(rng_unit() * scale);
    return p;
}

/* Random weights (N, K) in dtype t. */
static void *rand_w(enum ll_dtype t, size_t n, double scale)
{
    void *p = malloc((n ? n : 1) * ll_dtype_size(t));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        float f = (float)(rng_unit() * scale);
        if (t == LL_F32)
            ((float *)p)[i] = f;
        else if (t == LL_BF16)
            ((uint16_t *)p)[i] = ll_f32_to_bf16(f);
        else
            ((uint16_t *)p)[i] = ll_f32_to_f16(f);
    }
    return p;
}

static double w_get(const void *w, enum ll_dtype t, size_t i)
{
    if (t == LL_F32)
        return ((const float *)w)[i];
    if (t == LL_BF16)
        return ll_bf16_to_f32(((const uint16_t *)w)[i]);
    return ll_f16_to_f32(((const uint16_t *)w)[i]);
}

/* Double-precision out and Σ|terms| (for the tolerance). */
static void matmul_double(double *out, double *mag, const float *x, const void *w, enum ll_dtype t,
                          const float *bias, int M, int N, int K, enum ll_math math)
{
    int round_x = math == LL_MATH_FAST && t == LL_BF16;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                float xv = x[(size_t)m * K + k];
                if (round_x)
                    xv = ll_bf16_to_f32(ll_f32_to_bf16(xv));
                double p = (double)xv * w_get(w, t, (size_t)n * K + k);
                s += p;
                a += fabs(p);
            }
            if (bias) {
                s += bias[n];
                a += fabs(bias[n]);
            }
            out[(size_t)m * N + n] = s;
            mag[(size_t)m * N + n] = a;
        }
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void expect_same_bits(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (bits(a[i]) != bits(b[i]))
            fail_msg("%s: element %zu differs: %.9g (0x%08x) vs %.9g (0x%08x)", what, i, a[i],
                     bits(a[i]), b[i], bits(b[i]));
}

static void restore_variant(void)
{
    assert_true(ll_matmul_set_variant(default_variant));
}

static const char *math_name(enum ll_math m)
{
    return m == LL_MATH_FAST ? "fast" : "exact";
}

/* ---- conversions ---- */

__attribute__((target("f16c"))) static float f16c_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t f16c_from_f32(float f)
{
    return _cvtss_sh(f, 0);
}

static void test_f16_conversions(void **state)
{
    (void)state;
    /* every half survives a round trip (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ll_f16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true((ll_f32_to_f16(f) & 0x7c00) == 0x7c00 && (ll_f32_to_f16(f) & 0x3ff));
        else
            assert_int_equal(ll_f32_to_f16(f), h);
    }
    /* fixed points: largest half, rounding to inf, subnormals, ties to even */
    assert_int_equal(ll_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(ll_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(ll_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(ll_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(ll_f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(ll_f32_to_f16(ldexpf(1, -25)), 0x0000);           /* tie, to even: 0 */
    assert_int_equal(ll_f32_to_f16(ldexpf(1.5f, -24)), 0x0002);        /* tie, to even: 2 */
    assert_int_equal(ll_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);    /* tie, to even */
    assert_int_equal(ll_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);    /* tie, to even */
    assert_true(ll_f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(ll_f16_to_f32(0x3555) == 0x1.554p-2f);
    /* agreement with the F16C instructions on random floats of every magnitude */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("f16c")) {
        rng_seed(7);
        for (int i = 0; i < 200000; i++) {
            uint32_t u = (uint32_t)(rng_unit() * 2147483648.0) * 2u + (i & 1);
            float f;
            memcpy(&f, &u, 4);
            assert_int_equal(ll_f32_to_f16(f), f16c_from_f32(f));
        }
        for (uint32_t h = 0; h < 65536; h++)
            assert_int_equal(bits(ll_f16_to_f32((uint16_t)h)), bits(f16c_to_f32((uint16_t)h)));
    }
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(ll_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(ll_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);          /* tie, to even */
    assert_int_equal(ll_f32_to_bf16(1.0f + ldexpf(3, -8)), 0x3f82);          /* tie, to even */
    assert_int_equal(ll_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3f81);
    assert_int_equal(ll_f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    assert_true(ll_bf16_to_f32(0xc040) == -3.0f);
}

/* ---- variants against the reference ---- */

static void check_shape(int M, int N, int K, enum ll_dtype t, enum ll_math math, int with_bias)
{
    float *x = rand_f32((size_t)M * K, 1.0);
    void *w = rand_w(t, (size_t)N * K, 0.5);
    float *bias = with_bias ? rand_f32((size_t)N, 0.25) : NULL;
    size_t n_out = (size_t)M * N;
    float *ref = malloc(n_out * sizeof *ref), *got = malloc(n_out * sizeof *got);
    double *d = malloc(n_out * sizeof *d), *mag = malloc(n_out * sizeof *mag);
    assert_true(ref && got && d && mag);

    const int tiles_apply = t == LL_BF16 && math == LL_MATH_FAST;
    float *ref_tiles = tiles_apply ? malloc(n_out * sizeof *ref_tiles) : NULL;
    ll_matmul_ref(ref, x, w, t, bias, M, N, K, math);
    if (tiles_apply)
        ll_matmul_ref_tiles(ref_tiles, x, w, bias, M, N, K);
    matmul_double(d, mag, x, w, t, bias, M, N, K, math);
    for (size_t i = 0; i < n_out; i++) {
        if (!(fabs(ref[i] - d[i]) <= 1e-5 * mag[i] + 1e-30))
            fail_msg("ref %s %s M=%d N=%d K=%d [%zu]: %.9g vs double %.12g (tolerance %.3g)",
                     ll_dtype_name(t), math_name(math), M, N, K, i, ref[i], d[i], 1e-5 * mag[i]);
        if (tiles_apply && !(fabs(ref_tiles[i] - d[i]) <= 1e-5 * mag[i] + 1e-30))
            fail_msg("ref_tiles M=%d N=%d K=%d [%zu]: %.9g vs double %.12g (tolerance %.3g)", M, N,
                     K, i, ref_tiles[i], d[i], 1e-5 * mag[i]);
    }

    char what[160];
    for (size_t v = 0; v < sizeof variant_names / sizeof variant_names[0]; v++) {
        if (!ll_matmul_set_variant(variant_names[v]))
            continue; /* this CPU cannot run it */
        const float *want = tiles_apply && tiles_variant(v) ? ref_tiles : ref;
        struct ll_pool *pools[] = {NULL, pool2, pool3};
        /* the slow scalar variant runs with one pool only */
        for (int p = v == 0 ? 1 : 0; p < (v == 0 ? 2 : 3); p++) {
            memset(got, 0xff, n_out * sizeof *got);
            /* scratch of exactly the size asked for (AddressSanitizer catches a read or write
             * past it, a thread's panel included) */
            size_t sb = ll_matmul_scratch_bytes(M, K, ll_pool_size(pools[p]));
            void *scratch = sb ? aligned_alloc(64, sb) : NULL;
            assert_true(scratch || !sb);
            ll_matmul(got, x, w, t, bias, M, N, K, math, scratch, sb, pools[p]);
            free(scratch);
            snprintf(what, sizeof what, "%s %s %s M=%d N=%d K=%d threads=%d", variant_names[v],
                     ll_dtype_name(t), math_name(math), M, N, K, ll_pool_size(pools[p]));
            expect_same_bits(got, want, n_out, what);
        }
    }
    restore_variant();
    free(x);
    free(w);
    free(bias);
    free(ref);
    free(ref_tiles);
    free(got);
    free(d);
    free(mag);
}

static const int shape_m[] = {1, 2, 3, 7, 16, 33, 48, 130};
static const int shape_n[] = {1, 15, 17, 63, 257};
static const int shape_k[] = {1, 31, 32, 33, 100, 1536};

/* Every (K, N) pair of the lists, M cycling through its list; the largest shape once. */
static void check_all_shapes(enum ll_dtype t, enum ll_math math)
{
    int nm = (int)(sizeof shape_m / sizeof shape_m[0]);
    int nn = (int)(sizeof shape_n / sizeof shape_n[0]);
    int nk = (int)(sizeof shape_k / sizeof shape_k[0]);
    rng_seed(100 + (uint64_t)t * 2 + (uint64_t)math);
    for (int ik = 0; ik < nk; ik++)
        for (int in = 0; in < nn; in++) {
            int M = shape_m[(ik * nn + in) % nm], N = shape_n[in], K = shape_k[ik];
            if (K == 1536 && N == 257)
                M = 130;
            else if (K == 1536 && M > 33)
                M = 33; /* keeps the scalar reference quick */
            check_shape(M, N, K, t, math, (ik + in) % 2);
        }
}

/* Long rows of W. A lone row of x: the AVX2 variant streams rows of W one at a time up to
 * K = 4096 and four at a time beyond (matmul_avx2.c); both sides of the switch. */
static void check_long_rows(enum ll_math math)
{
    check_shape(1, 37, 4096, LL_BF16, math, 1);
    check_shape(1, 37, 4097, LL_BF16, math, 0);
    check_shape(1, 19, 8960 + 7, LL_BF16, math, 1);
    /* blocks of x against panels larger than L1, walked slice by slice along K with the
     * accumulators kept unreduced in between (matmul_avx512.c): 5 and 9 tiles, K tails; and 4
     * tiles, the most left unsliced */
    check_shape(20, 13, 4096 + 33, LL_BF16, math, 0);
    check_shape(33, 19, 8960 + 7, LL_BF16, math, 1);
    check_shape(16, 7, 8960, LL_BF16, math, 0);
}

static void test_bf16_exact(void **state)
{
    (void)state;
    check_all_shapes(LL_BF16, LL_MATH_EXACT);
    check_long_rows(LL_MATH_EXACT);
}

static void test_bf16_fast(void **state)
{
    (void)state;
    check_all_shapes(LL_BF16, LL_MATH_FAST);
    check_long_rows(LL_MATH_FAST);
}

static void test_f16_exact(void **state)
{
    (void)state;
    check_all_shapes(LL_F16, LL_MATH_EXACT);
}

static void test_f32_exact(void **state)
{
    (void)state;
    check_all_shapes(LL_F32, LL_MATH_EXACT);
}

/* Fast mode with f16/f32 weights is the exact path, bit for bit. */
static void test_fast_non_bf16_is_exact(void **state)
{
    (void)state;
    rng_seed(5);
    int M = 5, N = 40, K = 77;
    enum ll_dtype types[] = {LL_F16, LL_F32};
    for (int i = 0; i < 2; i++) {
        float *x = rand_f32((size_t)M * K, 1.0);
        void *w = rand_w(types[i], (size_t)N * K, 1.0);
        float a[5 * 40], b[5 * 40];
        ll_matmul(a, x, w, types[i], NULL, M, N, K, LL_MATH_FAST, SCRATCH, pool2);
        ll_matmul(b, x, w, types[i], NULL, M, N, K, LL_MATH_EXACT, SCRATCH, pool2);
        expect_same_bits(a, b, (size_t)M * N, "fast == exact for non-bf16 weights");
        free(x);
        free(w);
    }
}

/* ---- determinism: a row's result does not depend on its batch, position or thread count ---- */

static void check_determinism(enum ll_dtype t, enum ll_math math, int N, int K)
{
    enum { ROWS = 41 };
    float *x = rand_f32((size_t)ROWS * K, 2.0);
    void *w = rand_w(t, (size_t)N * K, 1.0);
    float *bias = rand_f32((size_t)N, 1.0);
    float *full = malloc((size_t)ROWS * N * sizeof *full);
    float *other = malloc((size_t)ROWS * N * sizeof *other);
    float *batch = malloc((size_t)ROWS * K * sizeof *batch);
    assert_true(full && other && batch);
    char what[160];

    ll_matmul(full, x, w, t, bias, ROWS, N, K, math, SCRATCH, pool2);
    /* each row alone, single thread and two threads */
    for (int r = 0; r < ROWS; r++) {
        float one[300];
        assert_true(N <= 300);
        for (int p = 0; p < 2; p++) {
            ll_matmul(one, x + (size_t)r * K, w, t, bias, 1, N, K, math, SCRATCH,
                      p ? pool2 : NULL);
            snprintf(what, sizeof what, "%s %s %s N=%d K=%d row %d alone, threads=%d",
                     ll_matmul_variant(), ll_dtype_name(t), math_name(math), N, K, r, p ? 2 : 1);
            expect_same_bits(one, full + (size_t)r * N, (size_t)N, what);
        }
    }
    /* the rows in reverse order, in batches of every size from 2 to ROWS, on 1, 2 and 3 threads */
    for (int M = 2; M <= ROWS; M += 3) {
        for (int i = 0; i < M; i++) /* batch row i = x row (M - 1 - i + M) % ROWS */
            memcpy(batch + (size_t)i * K, x + (size_t)((2 * M - 1 - i) % ROWS) * K,
                   (size_t)K * sizeof *x);
        struct ll_pool *pool = M % 3 == 0 ? NULL : M % 3 == 1 ? pool2 : pool3;
        ll_matmul(other, batch, w, t, bias, M, N, K, math, SCRATCH, pool);
        for (int i = 0; i < M; i++) {
            snprintf(what, sizeof what, "%s %s %s N=%d K=%d row %d at %d of %d, threads=%d",
                     ll_matmul_variant(), ll_dtype_name(t), math_name(math), N, K,
                     (2 * M - 1 - i) % ROWS, i, M, ll_pool_size(pool));
            expect_same_bits(other + (size_t)i * N, full + (size_t)((2 * M - 1 - i) % ROWS) * N,
                             (size_t)N, what);
        }
    }
    free(x);
    free(w);
    free(bias);
    free(full);
    free(other);
    free(batch);
}

static void test_determinism(void **state)
{
    (void)state;
    rng_seed(11);
    for (size_t v = 0; v < sizeof variant_names / sizeof variant_names[0]; v++) {
        if (!ll_matmul_set_variant(variant_names[v]))
            continue;
        /* N=8: fewer column units than threads, so threads split rows instead */
        int ns[] = {8, 67, 257}, ks[] = {100, 1536};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++) {
                if (v == 0 && ks[b] > 100)
                    continue; /* scalar: keep it quick */
                if (!strcmp(variant_names[v], "amx-emul") && ks[b] > 100 && ns[a] != 67)
                    continue; /* the emulated tiles too, but for one long K */
                check_determinism(LL_BF16, LL_MATH_FAST, ns[a], ks[b]);
                check_determinism(LL_BF16, LL_MATH_EXACT, ns[a], ks[b]);
            }
        check_determinism(LL_F16, LL_MATH_EXACT, 67, 100);
        check_determinism(LL_F32, LL_MATH_FAST, 67, 100);
    }
    restore_variant();
}

/* ---- bias, empty K, tiny values ---- */

static void test_bias(void **state)
{
    (void)state;
    rng_seed(3);
    int M = 9, N = 33, K = 70;
    float *x = rand_f32((size_t)M * K, 1.0), *bias = rand_f32((size_t)N, 3.0);
    void *w = rand_w(LL_BF16, (size_t)N * K, 1.0);
    float with[9 * 33], without[9 * 33];
    for (int mode = 0; mode < 2; mode++) {
        enum ll_math math = mode ? LL_MATH_FAST : LL_MATH_EXACT;
        ll_matmul(with, x, w, LL_BF16, bias, M, N, K, math, SCRATCH, pool2);
        ll_matmul(without, x, w, LL_BF16, NULL, M, N, K, math, SCRATCH, pool2);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) /* bias is added once, after the sum over K */
                assert_int_equal(bits(with[m * N + n]), bits(without[m * N + n] + bias[n]));
        /* K = 0: out is the bias, or zero */
        ll_matmul(with, x, w, LL_BF16, bias, M, N, 0, math, SCRATCH, pool2);
        ll_matmul(without, x, w, LL_BF16, NULL, M, N, 0, math, SCRATCH, pool2);
        for (int i = 0; i < M * N; i++) {
            assert_int_equal(bits(with[i]), bits(bias[i % N]));
            assert_true(without[i] == 0.0f);
        }
    }
    /* M = 0 or N = 0 writes nothing */
    with[0] = 42.0f;
    ll_matmul(with, x, w, LL_BF16, bias, 0, N, K, LL_MATH_FAST, SCRATCH, pool2);
    ll_matmul(with, x, w, LL_BF16, bias, M, 0, K, LL_MATH_FAST, SCRATCH, pool2);
    assert_true(with[0] == 42.0f);
    free(x);
    free(w);
    free(bias);
}

/* Values at the edge of the f32 range: the fast path flushes denormals as vdpbf16ps and
 * TDPBF16PS do, and the AVX-512 and AMX variants agree with their references on that too (the
 * AVX2 fast path does not flush denormal products and sums, so it is left out). */
static void test_denormals(void **state)
{
    (void)state;
    rng_seed(17);
    int M = 3, N = 20, K = 64;
    float *x = rand_f32((size_t)M * K, 1.0);
    void *w = rand_w(LL_BF16, (size_t)N * K, 1.0);
    for (int i = 0; i < M * K; i++)
        x[i] = ldexpf(x[i], -60 - (i % 80)); /* products from normal down to zero */
    static const char *const names[] = {"avx512", "amx", "amx-emul"};
    float ref[3 * 20], got[3 * 20];
    char what[80];
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        if (!ll_matmul_set_variant(names[v])) {
            printf("SKIP denormals on %s: this CPU cannot run it\n", names[v]);
            continue;
        }
        for (int mode = 0; mode < 2; mode++) {
            enum ll_math math = mode ? LL_MATH_FAST : LL_MATH_EXACT;
            if (mode && ll_matmul_tile_order())
                ll_matmul_ref_tiles(ref, x, w, NULL, M, N, K);
            else
                ll_matmul_ref(ref, x, w, LL_BF16, NULL, M, N, K, math);
            ll_matmul(got, x, w, LL_BF16, NULL, M, N, K, math, SCRATCH, NULL);
            snprintf(what, sizeof what, "%s tiny values, %s", names[v], math_name(math));
            expect_same_bits(got, ref, (size_t)M * N, what);
        }
    }
    restore_variant();
    free(x);
    free(w);
}

/* ---- bf16 packed losslessly (bf16pack.h) ---- */

/* An (N, K) bf16 matrix of random values whose blocks of 32 include every packing case: wide
 * exponent spans (15: packed, 16: escape), exact zeros beside non-zero values (escape), all-zero
 * blocks (packed), infinities and NaN (escape beside finite values). *escapes: blocks that must
 * escape. */
static uint16_t *packing_cases(int N, int K, size_t *escapes)
{
    uint16_t *w = rand_w(LL_BF16, (size_t)N * K, 1.0);
    *escapes = 0;
    for (int n = 0; n < N; n++)
        for (int b = 0; b < K / 32; b++) {
            uint16_t *blk = w + (size_t)n * K + 32 * b;
            switch ((n * 7 + b) % 8) {
            case 0: /* exponents 100 and 115: a span of 15 still packs */
                blk[3] = (uint16_t)(100 << 7 | 0x15);
                blk[9] = (uint16_t)(0x8000 | 115 << 7 | 0x7f);
                for (int i = 0; i < 32; i++)
                    if (i != 3 && i != 9)
                        blk[i] = (uint16_t)((blk[i] & 0x807f) | (100 + i % 16) << 7);
                break;
            case 1: /* exponents 100 and 116: one too many */
                for (int i = 0; i < 32; i++)
                    blk[i] = (uint16_t)((blk[i] & 0x807f) | (101 + i % 16) << 7);
                blk[5] = (uint16_t)(100 << 7 | 0x40);
                (*escapes)++;
                break;
            case 2: /* an exact zero (and a negative one) beside normal values */
                blk[31] = 0;
                blk[0] = 0x8000;
                (*escapes)++;
                break;
            case 3: /* all zero, with signs */
                for (int i = 0; i < 32; i++)
                    blk[i] = (uint16_t)(i % 3 ? 0 : 0x8000);
                break;
            case 4: /* infinity and NaN beside finite values */
                blk[7] = 0x7f80;
                blk[8] = 0xffc1;
                (*escapes)++;
                break;
            default:
                break;
            }
        }
    return w;
}

/* p's planes in *mem, its escape table in *esc (the caller frees both). */
static void pack(struct ll_bf16p *p, const uint16_t *w, int N, int K, void **mem, uint16_t **esc)
{
    *mem = aligned_alloc(64, ll_bf16p_bytes(N, K));
    assert_non_null(*mem);
    ll_bf16p_init(p, w, N, K, *mem);
    *esc = ll_bf16p_pack(p);
    assert_non_null(*esc);
}

/* Every element reads back as its bf16 bits; exactly the blocks that must escape do. */
static void test_bf16p_roundtrip(void **state)
{
    (void)state;
    rng_seed(41);
    int N = 37, K = 32 * 9 + 13;
    size_t want;
    uint16_t *w = packing_cases(N, K, &want);
    struct ll_bf16p p;
    void *mem;
    uint16_t *table;
    pack(&p, w, N, K, &mem, &table);
    /* the two passes in two ranges each, as threads run them */
    memset(mem, 0xa5, ll_bf16p_bytes(N, K));
    size_t e1 = ll_bf16p_pack_rows(&p, 0, 20), e2 = ll_bf16p_pack_rows(&p, 20, N);
    assert_true(want > 0);
    assert_int_equal(e1 + e2, want);
    uint16_t *table2 = malloc(sizeof(uint16_t) * 32 * want);
    assert_non_null(table2);
    ll_bf16p_pack_escapes(&p, 20, N, table2, e1);
    ll_bf16p_pack_escapes(&p, 0, 20, table2, 0);
    p.esc = table2;
    assert_memory_equal(table, table2, sizeof(uint16_t) * 32 * want);
    /* the bf16 copy is not read for whole blocks: corrupt it, keeping the tails */
    uint16_t *copy = malloc(sizeof(uint16_t) * (size_t)N * K);
    assert_non_null(copy);
    memcpy(copy, w, sizeof(uint16_t) * (size_t)N * K);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K / 32 * 32; k++)
            w[(size_t)n * K + k] ^= 0x5555;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            if (ll_bf16p_get(&p, n, k) != copy[(size_t)n * K + k])
                fail_msg("row %d element %d: 0x%04x read back as 0x%04x", n, k,
                         copy[(size_t)n * K + k], ll_bf16p_get(&p, n, k));
    /* 12.5 bits a weight (plus rounding of the three planes to 64 bytes) */
    assert_true(ll_bf16p_bytes(1024, 1024) == 1024 * 1024 / 8 * 25 / 2);
    free(mem), free(w), free(copy), free(table), free(table2);
}

/* ll_matmul_packed gives ll_matmul's bits for every M, N, K tail, bias, math mode and thread
 * count; where the CPU can read the planes (M <= 8 takes them), that checks the SIMD decode. */
static void test_bf16p_matmul(void **state)
{
    (void)state;
    const char *why;
    if (!ll_matmul_reads_packed(&why))
        print_message("SKIP bf16p decode (ll_matmul_packed reads the bf16 matrix only): %s\n", why);
    rng_seed(43);
    int shapes[][2] = {{37, 32 * 9 + 13}, {70, 1536}, {16, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], K = shapes[s][1], M = 20;
        size_t esc;
        uint16_t *w = packing_cases(N, K, &esc);
        for (size_t i = 0; i < (size_t)N * K; i++) /* finite values only: compare sums */
            if ((w[i] & 0x7f80) == 0x7f80)
                w[i] = 0x3f80;
        struct ll_bf16p p;
        void *mem;
        uint16_t *table;
        pack(&p, w, N, K, &mem, &table);
        float *x = rand_f32((size_t)M * K, 1.0), *bias = rand_f32((size_t)N, 1.0);
        float *want = malloc(sizeof(float) * (size_t)M * N), *got = malloc(sizeof(float) * (size_t)M * N);
        assert_non_null(want);
        assert_non_null(got);
        struct ll_pool *pools[] = {NULL, pool2, pool3};
        for (int mode = 0; mode < 2; mode++)
            for (int m = 1; m <= M; m += m < 9 ? 1 : M - 9) {
                enum ll_math math = mode ? LL_MATH_FAST : LL_MATH_EXACT;
                const float *b = m % 2 ? bias : NULL;
                ll_matmul(want, x, w, LL_BF16, b, m, N, K, math, SCRATCH, pool2);
                ll_matmul_packed(got, x, &p, b, m, math, SCRATCH, pools[m % 3]);
                char what[96];
                snprintf(what, sizeof what, "packed N=%d K=%d M=%d %s", N, K, m, math_name(math));
                expect_same_bits(got, want, (size_t)m * N, what);
            }
        free(x), free(bias), free(want), free(got), free(mem), free(w), free(table);
    }
}

/* ---- scratch, variants, OpenBLAS ---- */

/* What ll_matmul_scratch_bytes asks for. */
static void test_scratch_size(void **state)
{
    (void)state;
    assert_int_equal(ll_matmul_scratch_bytes(0, 100, 1), 0);
    assert_int_equal(ll_matmul_scratch_bytes(5, 0, 2), 0);
    /* M rows (at least 8: the AMX layout's panel of 16 bf16 rows) of K rounded up to a chunk of
     * 32, as floats (the AVX2 prompt path's split rows), then a panel of 16 rows of W as floats
     * per thread: 64 bytes per element of a row */
    assert_int_equal(ll_matmul_scratch_bytes(1, 1, 1), 8 * 128 + 64 * 32);
    assert_int_equal(ll_matmul_scratch_bytes(1, 32, 1), 8 * 128 + 64 * 32);
    assert_int_equal(ll_matmul_scratch_bytes(3, 33, 2), 8 * 256 + 2 * 64 * 64);
    assert_int_equal(ll_matmul_scratch_bytes(17, 32, 1), 17 * 128 + 64 * 32);
    assert_int_equal(ll_matmul_scratch_bytes(512, 8960, 2),
                     (size_t)512 * 8960 * 4 + (size_t)2 * 64 * 8960);
}

/* Enough rows for the AVX2 variant's prompt path (its per-thread panels) as well as one row. */
enum { PC_ROWS = 30, PC_N = 3, PC_K = 40 };

struct thread_job {
    float out[PC_ROWS * PC_N];
    void *scratch;
    struct ll_pool *pool;
};

static void *thread_matmul(void *arg)
{
    struct thread_job *j = arg;
    float x[PC_ROWS * PC_K], w32[PC_N * PC_K];
    uint16_t w[PC_N * PC_K];
    for (int i = 0; i < PC_ROWS * PC_K; i++)
        x[i] = (float)(i % 97) / 7.0f - 5.0f;
    for (int i = 0; i < PC_N * PC_K; i++) {
        w32[i] = (float)(i % 11) / 5.0f - 1.0f;
        w[i] = ll_f32_to_bf16(w32[i]);
    }
    for (int rep = 0; rep < 200; rep++)
        ll_matmul(j->out, x, w, LL_BF16, NULL, rep % 2 ? PC_ROWS : 1, PC_N, PC_K, LL_MATH_FAST,
                  j->scratch, ll_matmul_scratch_bytes(PC_ROWS, PC_K, ll_pool_size(j->pool)),
                  j->pool);
    return NULL;
}

/* No hidden shared state: two threads at once, each with its own scratch (and pool), get the
 * bits one thread alone gets. */
static void test_scratch_per_caller(void **state)
{
    (void)state;
    struct ll_pool *pa, *pb;
    assert_int_equal(ll_pool_create(&pa, 2, NULL), LL_OK);
    assert_int_equal(ll_pool_create(&pb, 2, NULL), LL_OK);
    size_t sb1 = ll_matmul_scratch_bytes(PC_ROWS, PC_K, 1),
           sb2 = ll_matmul_scratch_bytes(PC_ROWS, PC_K, 2);
    struct thread_job a = {.scratch = aligned_alloc(64, sb2), .pool = pa},
                      b = {.scratch = aligned_alloc(64, sb2), .pool = pb},
                      c = {.scratch = aligned_alloc(64, sb1)};
    assert_true(a.scratch && b.scratch && c.scratch);
    thread_matmul(&c);
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, thread_matmul, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, thread_matmul, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    expect_same_bits(a.out, c.out, PC_ROWS * PC_N, "thread a");
    expect_same_bits(b.out, c.out, PC_ROWS * PC_N, "thread b");
    free(a.scratch);
    free(b.scratch);
    free(c.scratch);
    ll_pool_free(pa);
    ll_pool_free(pb);
}

static void test_variant_names(void **state)
{
    (void)state;
    const char *v = ll_matmul_variant();
    assert_true(!strcmp(v, "scalar") || !strcmp(v, "avx2") || !strcmp(v, "avx512bf16") ||
                !strcmp(v, "amx"));
    /* dispatch takes the real tiles exactly where they run and sum in the tile order, never the
     * emulation */
    const char *why = NULL;
    const int amx = ll_matmul_tiles_ready(&why),
              cpu = ll_isa_amx_ready(NULL) && ll_isa_cpu_amx_bf16() && ll_isa_cpu_avx512() &&
                    __builtin_cpu_supports("avx512bf16");
    assert_int_equal(amx, why == NULL);
    /* on a CPU with everything, only the check of the order may refuse the tiles */
    assert_true(amx || !cpu || strstr(why, "tile order"));
    assert_true(!amx || cpu);
    if (!getenv("LLAISYS_KERNEL"))
        assert_int_equal(!strcmp(v, "amx"), amx);
    assert_int_equal(ll_matmul_set_variant("amx"), amx);
    assert_int_equal(ll_matmul_tile_order(), amx ? 1 : !strcmp(v, "amx"));
    if (!amx)
        printf("SKIP matmul amx: %s\n", why);
    assert_true(ll_matmul_set_variant("amx-emul"));
    assert_string_equal(ll_matmul_variant(), "amx-emul");
    assert_true(ll_matmul_tile_order());
    restore_variant();
    assert_false(ll_matmul_set_variant("sse9"));
    assert_string_equal(ll_matmul_variant(), v);
    assert_true(ll_matmul_set_variant("scalar"));
    assert_string_equal(ll_matmul_variant(), "scalar");
    restore_variant();
}

/* ---- the check of the tile order (matmul_kernels.h) ---- */

/* Orders a matrix unit could sum in instead of the tile order (ALT_TILES: the tile order itself,
 * to show that this kernel is a faithful one): one chain over the pairs in k (as Intel's
 * intrinsics guide prints TDPBF16PS), a chunk's 32 products summed wider and rounded once into
 * the accumulator, and the tile order without reading denormal inputs as zero or without
 * flushing denormal results. */
enum alt_order { ALT_TILES, ALT_CHAIN, ALT_WIDE, ALT_NO_DAZ, ALT_NO_FTZ };
static enum alt_order alt_order;

static float alt_flush(float f, int on)
{
    return on && fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}

/* rows of x as bf16, one after another, zeros past K */
static void alt_round(const struct ll_mm_job *j, int m0, int m1)
{
    for (int m = m0; m < m1; m++) {
        uint16_t *d = (uint16_t *)j->xb + (size_t)m * j->xb_stride;
        for (size_t k = 0; k < j->xb_stride; k++)
            d[k] = (int)k < j->K ? ll_f32_to_bf16(j->x[(size_t)m * (size_t)j->K + k]) : 0;
    }
}

static void alt_kernel(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    (void)ith;
    const int daz = alt_order != ALT_NO_DAZ, ftz = alt_order != ALT_NO_FTZ;
    for (int m = m0; m < m1; m++)
        for (int n = n0; n < n1; n++) {
            const uint16_t *xr = j->xb + (size_t)m * j->xb_stride,
                           *wr = (const uint16_t *)j->w + (size_t)n * (size_t)j->K;
            float acc = 0.0f;
            for (int k0 = 0; k0 < j->K; k0 += 32) {
                float even = 0.0f, odd = 0.0f;
                double wide = 0.0;
                for (int k = k0; k < k0 + 32; k += 2) {
                    const float x0 = alt_flush(ll_bf16_to_f32(xr[k]), daz),
                                x1 = alt_flush(ll_bf16_to_f32(xr[k + 1]), daz),
                                w0 = k < j->K ? alt_flush(ll_bf16_to_f32(wr[k]), daz) : 0.0f,
                                w1 = k + 1 < j->K ? alt_flush(ll_bf16_to_f32(wr[k + 1]), daz)
                                                  : 0.0f;
                    if (alt_order == ALT_CHAIN) {
                        acc = alt_flush(fmaf(w0, x0, acc), 1);
                        acc = alt_flush(fmaf(w1, x1, acc), 1);
                    } else if (alt_order == ALT_WIDE) {
                        wide += (double)w0 * x0 + (double)w1 * x1;
                    } else {
                        even = alt_flush(fmaf(w0, x0, even), ftz);
                        odd = alt_flush(fmaf(w1, x1, odd), ftz);
                    }
                }
                if (alt_order == ALT_WIDE)
                    acc = alt_flush((float)((double)acc + wide), 1);
                else if (alt_order != ALT_CHAIN)
                    acc = alt_flush(acc + alt_flush(even + odd, ftz), ftz);
            }
            j->out[(size_t)m * (size_t)j->N + (size_t)n] = acc;
        }
}

static void test_tiles_check(void **state)
{
    (void)state;
    char why[300] = "";
    /* the emulated tiles and a faithful scalar kernel pass */
    assert_true(ll_mm_tiles_agree(ll_mm_kernel_amx_emul, ll_mm_round_amx_emul, why, sizeof why));
    alt_order = ALT_TILES;
    assert_true(ll_mm_tiles_agree(alt_kernel, alt_round, why, sizeof why));
    /* every other order is caught, and the element named */
    static const char *const names[] = {"", "one chain", "wide", "no daz", "no ftz"};
    for (int a = ALT_CHAIN; a <= ALT_NO_FTZ; a++) {
        alt_order = (enum alt_order)a;
        why[0] = '\0';
        assert_false(ll_mm_tiles_agree(alt_kernel, alt_round, why, sizeof why));
        assert_non_null(strstr(why, "tile order: element ("));
        printf("check refuses %s: %s\n", names[a], why);
    }
    /* so is the lanes order of the AVX2 kernel */
    if (ll_isa_cpu_avx2()) {
        assert_false(ll_mm_tiles_agree(ll_mm_kernel_avx2, ll_mm_round_avx2, why, sizeof why));
        assert_non_null(strstr(why, "element ("));
    } else {
        printf("SKIP check against avx2: CPU lacks AVX2\n");
    }
    /* the check data's last element: a denormal input and a denormal product, so zero */
    float *x = malloc(sizeof(float) * LL_MM_CHECK_M * LL_MM_CHECK_K),
          *out = malloc(sizeof(float) * LL_MM_CHECK_M * LL_MM_CHECK_N);
    uint16_t *w = malloc(sizeof(uint16_t) * LL_MM_CHECK_N * LL_MM_CHECK_K);
    assert_true(x && out && w);
    ll_mm_check_data(x, w);
    ll_matmul_ref_tiles(out, x, w, NULL, LL_MM_CHECK_M, LL_MM_CHECK_N, LL_MM_CHECK_K);
    assert_true(out[LL_MM_CHECK_M * LL_MM_CHECK_N - 1] == 0.0f);
    assert_true(out[LL_MM_CHECK_M * LL_MM_CHECK_N - 2] != 0.0f);
    free(x);
    free(out);
    free(w);
}

static void test_openblas_baseline(void **state)
{
    (void)state;
    openblas_set_num_threads(1); /* the project's pool owns the cores */
    rng_seed(23);
    int M = 33, N = 257, K = 1536;
    float *x = rand_f32((size_t)M * K, 1.0), *w = rand_w(LL_F32, (size_t)N * K, 1.0);
    float *ours = malloc((size_t)M * N * sizeof *ours), *blas = malloc((size_t)M * N * sizeof *blas);
    double *d = malloc((size_t)M * N * sizeof *d), *mag = malloc((size_t)M * N * sizeof *mag);
    assert_true(ours && blas && d && mag);
    ll_matmul(ours, x, w, LL_F32, NULL, M, N, K, LL_MATH_EXACT, SCRATCH, pool2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, blas, N);
    matmul_double(d, mag, x, w, LL_F32, NULL, M, N, K, LL_MATH_EXACT);
    for (int i = 0; i < M * N; i++) {
        assert_true(fabs(ours[i] - blas[i]) <= 2e-5 * mag[i]);
        assert_true(fabs(blas[i] - d[i]) <= 1e-5 * mag[i]);
    }
    free(x);
    free(w);
    free(ours);
    free(blas);
    free(d);
    free(mag);
}

static int setup(void **state)
{
    (void)state;
    snprintf(default_variant, sizeof default_variant, "%s", ll_matmul_variant());
    if (ll_pool_create(&pool2, 2, NULL) != LL_OK || ll_pool_create(&pool3, 3, NULL) != LL_OK)
        return -1;
    scratch_size = ll_matmul_scratch_bytes(SCRATCH_M, SCRATCH_K, 3);
    if (!(scratch_buf = aligned_alloc(64, scratch_size)))
        return -1;
    printf("matmul variant: %s\n", default_variant);
    /* the shape and determinism tests loop over the variants this CPU runs; say which they pass
     * over */
    for (size_t v = 0; v < sizeof variant_names / sizeof variant_names[0]; v++)
        if (!ll_matmul_set_variant(variant_names[v]))
            printf("SKIP matmul variant %s: this CPU cannot run it\n", variant_names[v]);
    if (!ll_matmul_set_variant(default_variant))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ll_pool_free(pool2);
    ll_pool_free(pool3);
    free(scratch_buf);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_conversions),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_variant_names),
        cmocka_unit_test(test_tiles_check),
        cmocka_unit_test(test_bf16_exact),
        cmocka_unit_test(test_bf16_fast),
        cmocka_unit_test(test_f16_exact),
        cmocka_unit_test(test_f32_exact),
        cmocka_unit_test(test_fast_non_bf16_is_exact),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_denormals),
        cmocka_unit_test(test_bf16p_roundtrip),
        cmocka_unit_test(test_bf16p_matmul),
        cmocka_unit_test(test_scratch_size),
        cmocka_unit_test(test_scratch_per_caller),
        cmocka_unit_test(test_openblas_baseline),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
