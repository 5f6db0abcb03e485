/*
 * matmul.c: ll_matmul's dispatch (variant chosen once by CPU features, capped by LLAISYS_KERNEL),
 * its split over the thread pool, and the scalar variant, which is also the reference
 * ll_matmul_ref; the reference of the tile order, ll_matmul_ref_tiles (see matmul.h for the
 * contract and the two reduction orders). The copy of the activations on the fast path, and each
 * thread's panel of W for the AVX2 variant's prompt path, go into the caller's scratch: nothing
 * here allocates.
 *
 * Called from the thread that owns the pool (scheduler / CLI / tests); the kernels run on the
 * pool's threads on disjoint output ranges. The scalar code below spells out the reduction orders
 * one lane (or one tile step) at a time; the SIMD and AMX files do the same with vectors and
 * tiles.
 */
#include "matmul.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "log.h"
#include "matmul_kernels.h"
#include "util.h"

/* ---- the scalar variant: one output element at a time, lane by lane ---- */

/* The fixed tree over 16 lanes, shared by every variant. */
static float lanes_sum(const float l[16])
{
    float a[8], b[4];
    for (int i = 0; i < 8; i++)
        a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++)
        b[i] = a[i] + a[i + 4];
    float c0 = b[0] + b[2], c1 = b[1] + b[3];
    return c0 + c1;
}

/* vdpbf16ps reads denormal inputs as zero and flushes denormal results to zero (sign kept). */
static float flush_denormal(float f)
{
    return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}

/* Exact path: lane i accumulates x[k]·w[k] for k ≡ i (mod 16), zero past K. */
static float dot_exact(const float *x, const void *w, enum ll_dtype wt, size_t w_off, int K)
{
    float lane[16] = {0};
    for (int k0 = 0; k0 < K; k0 += LL_MM_CHUNK_EXACT)
        for (int i = 0; i < 16; i++) {
            int k = k0 + i;
            float xv = k < K ? x[k] : 0.0f;
            float wv = k < K ? ll_dtype_load(w, wt, w_off + (size_t)k) : 0.0f;
            lane[i] = fmaf(xv, wv, lane[i]);
        }
    return lanes_sum(lane);
}

/* Fast path: lane i takes the pair (2i, 2i+1) of each chunk of 32, odd element first, as
 * vdpbf16ps does; xb is zero-padded to a whole chunk, w is read as zero past K. */
static float dot_fast(const uint16_t *xb, const uint16_t *w, int K)
{
    float lane[16] = {0};
    for (int k0 = 0; k0 < K; k0 += LL_MM_CHUNK_FAST)
        for (int i = 0; i < 16; i++) {
            int k = k0 + 2 * i;
            float x0 = flush_denormal(ll_bf16_to_f32(xb[k]));
            float x1 = flush_denormal(ll_bf16_to_f32(xb[k + 1]));
            float w0 = k < K ? flush_denormal(ll_bf16_to_f32(w[k])) : 0.0f;
            float w1 = k + 1 < K ? flush_denormal(ll_bf16_to_f32(w[k + 1])) : 0.0f;
            float t = flush_denormal(fmaf(x1, w1, lane[i]));
            lane[i] = flush_denormal(fmaf(x0, w0, t));
        }
    return lanes_sum(lane);
}

/* Tile order (TDPBF16PS, amx_ops.h): per chunk of 32 of K (xb zero-padded to whole chunks, w
 * read as zero past K), an even and an odd sum from zero, each one fused multiply-add per pair;
 * then acc = acc + (even + odd). Denormal inputs read as zero, denormal results flushed. */
static float dot_tiles(const uint16_t *xb, const uint16_t *w, int K)
{
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += LL_MM_CHUNK_FAST) {
        float even = 0.0f, odd = 0.0f;
        for (int k = k0; k < k0 + LL_MM_CHUNK_FAST; k += 2) {
            float x0 = flush_denormal(ll_bf16_to_f32(xb[k]));
            float x1 = flush_denormal(ll_bf16_to_f32(xb[k + 1]));
            float w0 = k < K ? flush_denormal(ll_bf16_to_f32(w[k])) : 0.0f;
            float w1 = k + 1 < K ? flush_denormal(ll_bf16_to_f32(w[k + 1])) : 0.0f;
            even = flush_denormal(fmaf(w0, x0, even));
            odd = flush_denormal(fmaf(w1, x1, odd));
        }
        acc = flush_denormal(acc + flush_denormal(even + odd));
    }
    return acc;
}

static void kernel_scalar(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    (void)ith;
    for (int m = m0; m < m1; m++)
        for (int n = n0; n < n1; n++) {
            size_t w_off = (size_t)n * (size_t)j->K;
            float s = j->fast ? dot_fast(j->xb + (size_t)m * j->xb_stride,
                                         (const uint16_t *)j->w + w_off, j->K)
                              : dot_exact(j->x + (size_t)m * (size_t)j->K, j->w, j->wtype, w_off,
                                          j->K);
            j->out[(size_t)m * (size_t)j->N + (size_t)n] = j->bias ? s + j->bias[n] : s;
        }
}

static void round_scalar(const struct ll_mm_job *j, int m0, int m1)
{
    for (int m = m0; m < m1; m++) {
        const float *xr = j->x + (size_t)m * (size_t)j->K;
        uint16_t *d = (uint16_t *)j->xb + (size_t)m * j->xb_stride;
        for (int k = 0; k < j->K; k++)
            d[k] = ll_f32_to_bf16(xr[k]);
        for (size_t k = (size_t)j->K; k < j->xb_stride; k++)
            d[k] = 0;
    }
}

/* ---- variants and dispatch ---- */

/* tiles: the fast path in the tile order, every M; the exact path is the best lanes variant's
 * (exact_variant) */
struct variant {
    const char *name;
    ll_mm_kernel_fn kernel;
    ll_mm_round_fn round;
    bool tiles;
};

/* in dispatch's order (V_AMX_EMUL, for tests and benchmarks, is never picked) */
enum { V_SCALAR, V_AVX2, V_AVX512, V_AMX, V_AMX_EMUL, V_COUNT };

static const struct variant variants[V_COUNT] = {
    [V_SCALAR] = {"scalar", kernel_scalar, round_scalar, false},
    [V_AVX2] = {"avx2", ll_mm_kernel_avx2, ll_mm_round_avx2, false},
    [V_AVX512] = {"avx512bf16", ll_mm_kernel_avx512, ll_mm_round_avx512, false},
    [V_AMX] = {"amx", ll_mm_kernel_amx, ll_mm_round_amx, true},
    [V_AMX_EMUL] = {"amx-emul", ll_mm_kernel_amx_emul, ll_mm_round_amx_emul, true},
};

static pthread_once_t variant_once = PTHREAD_ONCE_INIT;
static const struct variant *variant_cur;

static bool cpu_runs(int v)
{
    switch (v) {
    case V_AMX:
        return ll_matmul_tiles_ready(NULL);
    case V_AVX512:
        return ll_isa_cpu_avx512() && __builtin_cpu_supports("avx512bf16");
    case V_AVX2:
        return ll_isa_cpu_avx2();
    default:
        return true;
    }
}

/* The packed-weight decode (matmul_avx512.c, packed_chunk) also needs vpmultishiftqb. */
static bool cpu_has_vbmi(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi");
}

static int variant_by_name(const char *name)
{
    if (!strcmp(name, "scalar"))
        return V_SCALAR;
    if (!strcmp(name, "avx2"))
        return V_AVX2;
    if (!strcmp(name, "avx512") || !strcmp(name, "avx512bf16"))
        return V_AVX512;
    if (!strcmp(name, "amx"))
        return V_AMX;
    if (!strcmp(name, "amx-emul"))
        return V_AMX_EMUL;
    return -1;
}

/* The best variant at or below v in dispatch's order that this CPU runs. */
static int runnable_from(int v)
{
    while (v > V_SCALAR && !cpu_runs(v))
        v--;
    return v;
}

/* The best variant within the LLAISYS_KERNEL cap (isa.h) that this CPU runs. */
static void variant_init(void)
{
    bool requested;
    enum ll_isa cap = ll_isa_cap(&requested);
    int want = cap >= LL_ISA_AMX      ? V_AMX
               : cap >= LL_ISA_AVX512 ? V_AVX512
               : cap >= LL_ISA_AVX2   ? V_AVX2
                                      : V_SCALAR,
        v = runnable_from(want);
    if (requested && v != want)
        log_msg(LOG_WARN, "LLAISYS_KERNEL=%s: this CPU cannot run the %s matmul; using %s",
                ll_isa_name(cap), variants[want].name, variants[v].name);
    variant_cur = &variants[v];
}

static const struct variant *variant_get(void)
{
    pthread_once(&variant_once, variant_init);
    return variant_cur;
}

const char *ll_matmul_variant(void)
{
    return variant_get()->name;
}

bool ll_matmul_tile_order(void)
{
    return variant_get()->tiles;
}

/* The variant that runs the exact path of v: v itself, or for the tile variants the best lanes
 * variant this CPU runs (the exact path has one order everywhere). */
static const struct variant *exact_variant(const struct variant *v)
{
    return v->tiles ? &variants[runnable_from(V_AVX512)] : v;
}

bool ll_matmul_set_variant(const char *name)
{
    int v = variant_by_name(name);
    if (v < 0 || !cpu_runs(v))
        return false;
    pthread_once(&variant_once, variant_init);
    variant_cur = &variants[v];
    return true;
}

/* ---- splitting one call over the pool ---- */

#define SPLIT_COLS 16 /* threads split N in units of 16 columns (whole 64-byte lines of out) */
#define ROUND_PARALLEL_MIN (1 << 15) /* M·K from which rounding x to bf16 is split over threads */

struct mm_call {
    const struct ll_mm_job *job;
    const struct variant *v;
};

static void mm_call_round(void *ctx, int ith, int nth)
{
    const struct mm_call *c = ctx;
    int lo, hi;
    ll_split(c->job->M, ith, nth, &lo, &hi);
    if (lo < hi)
        c->v->round(c->job, lo, hi);
}

/* Threads take units of SPLIT_COLS columns, or rows of x when there are fewer units than
 * threads and enough rows (then one share each), through ll_pool_run_ranges with the grain of
 * ll_pool_matmul_grain: a thread done early takes over a late one's pieces. A panel of UNIT_PANEL
 * units holds whole tiles of every variant (6 rows of W in avx512, 2 in avx2); a single row of x
 * streams 8 or 16 rows of W at a time, within a unit. */
#define UNIT_PANEL 3
static void mm_call_cols(void *ctx, int lo, int hi, int ith)
{
    const struct mm_call *c = ctx;
    const struct ll_mm_job *j = c->job;
    lo *= SPLIT_COLS;
    hi = hi * SPLIT_COLS < j->N ? hi * SPLIT_COLS : j->N;
    c->v->kernel(j, 0, j->M, lo, hi, ith);
}

static void mm_call_rows(void *ctx, int lo, int hi, int ith)
{
    const struct mm_call *c = ctx;
    c->v->kernel(c->job, lo, hi, 0, c->job->N, ith);
}

/* Elements per row of the bf16 copy of x: K rounded up to whole chunks (64-byte multiples). */
static size_t xb_stride_for(int K)
{
    return ((size_t)K + LL_MM_CHUNK_FAST - 1) / LL_MM_CHUNK_FAST * LL_MM_CHUNK_FAST;
}

/* Bytes of the rows of x: room for them as bf16 (xb_stride elements a row), as floats in the
 * orders the AVX2 variant's prompt and batch paths read (matmul_avx2.c), or as bf16 in whole
 * panels of 16 rows (the AMX layout, matmul_kernels.h: at most 8 floats' room a row beyond 8
 * rows); a multiple of 64. */
static size_t x_bytes(int m, int k)
{
    return (size_t)(m > 8 ? m : 8) * xb_stride_for(k) * sizeof(float);
}

/* The rows of x, then one panel of W per thread (LL_MM_PANEL_BYTES). */
size_t ll_matmul_scratch_bytes(int max_m, int max_k, int n_threads)
{
    LL_ASSERT(max_m >= 0 && max_k >= 0 && n_threads >= 1);
    if (max_m == 0 || max_k == 0)
        return 0;
    return x_bytes(max_m, max_k) + (size_t)n_threads * LL_MM_PANEL_BYTES(xb_stride_for(max_k));
}

static void matmul_run(float *out, const float *x, const void *w, enum ll_dtype wtype,
                       const struct ll_bf16p *packed, const float *bias, int M, int N, int K,
                       enum ll_math math, void *scratch, size_t scratch_bytes,
                       struct ll_pool *pool)
{
    LL_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0)
        return;
    struct ll_mm_job job = {
        .out = out, .x = x, .w = w, .wtype = wtype, .bias = bias, .M = M, .N = N, .K = K,
        .fast = math == LL_MATH_FAST && wtype == LL_BF16,
    };
    struct mm_call call = {.job = &job, .v = variant_get()};
    if (!job.fast)
        call.v = exact_variant(call.v);
    /* the packed planes only for a single row of x (measured with bench-matmul --paired on an
     * AMD EPYC: M = 1 streams 1.14-1.23x faster from them; M = 2-16 ran 0.6-1.15x, the decode
     * then costing more than the bytes it saves, and prefill-sized calls slower still) */
    if (packed && M == 1 && job.fast && call.v == &variants[V_AVX512] && cpu_has_vbmi())
        job.packed = packed;
    if (job.fast) {
        job.xb_stride = xb_stride_for(K);
        LL_ASSERT(scratch && ((uintptr_t)scratch & 63) == 0 &&
                  scratch_bytes >= ll_matmul_scratch_bytes(M, K, ll_pool_size(pool)));
        job.xb = scratch;
        job.panels = (char *)scratch + x_bytes(M, K);
        job.panel_bytes = LL_MM_PANEL_BYTES(job.xb_stride);
        if ((size_t)M * (size_t)K >= ROUND_PARALLEL_MIN && ll_pool_size(pool) > 1 && M > 1)
            ll_pool_run(pool, mm_call_round, &call);
        else
            call.v->round(&job, 0, M);
    }
    int units = (N + SPLIT_COLS - 1) / SPLIT_COLS, nth = ll_pool_size(pool);
    if (units >= nth || M < nth)
        ll_pool_run_ranges(pool, units, ll_pool_matmul_grain(M, units, UNIT_PANEL), mm_call_cols,
                           &call);
    else
        ll_pool_run_ranges(pool, M, M, mm_call_rows, &call);
}

void ll_matmul(float *out, const float *x, const void *w, enum ll_dtype wtype, const float *bias,
               int M, int N, int K, enum ll_math math, void *scratch, size_t scratch_bytes,
               struct ll_pool *pool)
{
    matmul_run(out, x, w, wtype, NULL, bias, M, N, K, math, scratch, scratch_bytes, pool);
}

void ll_matmul_packed(float *out, const float *x, const struct ll_bf16p *w, const float *bias,
                      int M, enum ll_math math, void *scratch, size_t scratch_bytes,
                      struct ll_pool *pool)
{
    matmul_run(out, x, w->raw, LL_BF16, w, bias, M, w->n, w->k, math, scratch, scratch_bytes,
               pool);
}

bool ll_matmul_reads_packed(const char **why)
{
    const char *r = NULL;
    if (variant_get() != &variants[V_AVX512])
        r = "the matmul variant in use is not avx512bf16";
    else if (!cpu_has_vbmi())
        r = "this CPU lacks AVX-512 VBMI";
    if (why)
        *why = r;
    return r == NULL;
}

/* The scalar references, one thread: x rounded to bf16 on the fast path, then every element in
 * the lanes order (kernel_scalar) or, with tiles (fast path only), the tile order (dot_tiles). */
static void ref_run(float *out, const float *x, const void *w, enum ll_dtype wtype,
                    const float *bias, int M, int N, int K, bool fast, bool tiles)
{
    LL_ASSERT(M >= 0 && N >= 0 && K >= 0 && (!tiles || fast));
    if (M == 0 || N == 0)
        return;
    struct ll_mm_job job = {
        .out = out,
        .x = x,
        .w = w,
        .wtype = wtype,
        .bias = bias,
        .M = M,
        .N = N,
        .K = K,
        .fast = fast,
    };
    uint16_t *xb = NULL;
    if (fast) {
        job.xb_stride = xb_stride_for(K);
        xb = malloc(((size_t)M * job.xb_stride + 1) * sizeof *xb);
        LL_ASSERT(xb != NULL);
        job.xb = xb;
        round_scalar(&job, 0, M);
    }
    if (!tiles)
        kernel_scalar(&job, 0, M, 0, N, 0);
    else
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float s = dot_tiles(xb + (size_t)m * job.xb_stride,
                                    (const uint16_t *)w + (size_t)n * (size_t)K, K);
                out[(size_t)m * (size_t)N + (size_t)n] = bias ? s + bias[n] : s;
            }
    free(xb);
}

void ll_matmul_ref_tiles(float *out, const float *x, const uint16_t *w, const float *bias, int M,
                         int N, int K)
{
    ref_run(out, x, w, LL_BF16, bias, M, N, K, true, true);
}

void ll_matmul_ref(float *out, const float *x, const void *w, enum ll_dtype wtype,
                   const float *bias, int M, int N, int K, enum ll_math math)
{
    ref_run(out, x, w, wtype, bias, M, N, K, math == LL_MATH_FAST && wtype == LL_BF16, false);
}

/* ---- the tile order on this CPU's tiles ---- */

/* The check data: wide-ranging bf16 values of both signs, so that sums in another order (the
 * lanes order, one chain over the pairs as Intel's intrinsics guide prints TDPBF16PS, a wider
 * accumulator) come out differently in some element (tests/test_matmul.c holds that); the last
 * row of x is zero but for a denormal (read as zero) and a tiny value whose product with the
 * last row of W is denormal (flushed), so that the last element is zero. Shapes: steps over two
 * blocks of W and over one, a partial panel of x, an N tail (overlapping blocks) and a K tail (a
 * padded chunk). */
void ll_mm_check_data(float *x, uint16_t *w)
{
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < LL_MM_CHECK_M * LL_MM_CHECK_K + LL_MM_CHECK_N * LL_MM_CHECK_K; i++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        /* sign, 7 bits of significand, exponent in [-12, 12] */
        const uint32_t sign = (uint32_t)(st >> 63) << 31, frac = (uint32_t)(st >> 20) & 0x7f,
                       e = (uint32_t)(127 - 12 + (int)((st >> 32) % 25));
        const uint16_t h = (uint16_t)((sign | e << 23 | frac << 16) >> 16);
        if (i < LL_MM_CHECK_M * LL_MM_CHECK_K)
            x[i] = ll_bf16_to_f32(h);
        else
            w[i - LL_MM_CHECK_M * LL_MM_CHECK_K] = h;
    }
    float *xl = x + (size_t)(LL_MM_CHECK_M - 1) * LL_MM_CHECK_K;
    uint16_t *wl = w + (size_t)(LL_MM_CHECK_N - 1) * LL_MM_CHECK_K;
    for (int k = 0; k < LL_MM_CHECK_K; k++)
        xl[k] = 0.0f;
    xl[0] = 0x1p-130f; /* a bf16 denormal: read as zero (else its product, 2^-118, shows) */
    wl[0] = ll_f32_to_bf16(0x1p12f);
    xl[1] = 0x1p-70f; /* its product, 2^-140, a denormal: flushed */
    wl[1] = ll_f32_to_bf16(0x1p-70f);
}

bool ll_mm_tiles_agree(ll_mm_kernel_fn kernel, ll_mm_round_fn round, char *why, size_t n)
{
    enum { M = LL_MM_CHECK_M, N = LL_MM_CHECK_N, K = LL_MM_CHECK_K };
    const size_t scratch_bytes = ll_matmul_scratch_bytes(M, K, 1);
    float *x = malloc(sizeof(float) * M * K), *got = malloc(sizeof(float) * M * N),
          *want = malloc(sizeof(float) * M * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    void *scratch = aligned_alloc(64, scratch_bytes);
    LL_ASSERT(x && got && want && w && scratch);
    ll_mm_check_data(x, w);
    struct ll_mm_job job = {
        .out = got,
        .x = x,
        .w = w,
        .wtype = LL_BF16,
        .M = M,
        .N = N,
        .K = K,
        .fast = true,
        .xb_stride = xb_stride_for(K),
        .xb = scratch,
        .panels = (char *)scratch + x_bytes(M, K),
        .panel_bytes = LL_MM_PANEL_BYTES(xb_stride_for(K)),
    };
    round(&job, 0, M);
    kernel(&job, 0, M, 0, N, 0);
    ll_matmul_ref_tiles(want, x, w, NULL, M, N, K);
    bool same = true;
    for (int i = 0; i < M * N && same; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) {
            uint32_t g, e;
            memcpy(&g, &got[i], 4);
            memcpy(&e, &want[i], 4);
            snprintf(why, n,
                     "the tiles do not sum in the tile order: element (%d, %d) of a check came "
                     "out %a (0x%08x), the order gives %a (0x%08x)",
                     i / N, i % N, (double)got[i], g, (double)want[i], e);
            same = false;
        }
    free(x);
    free(got);
    free(want);
    free(w);
    free(scratch);
    return same;
}

static pthread_once_t tiles_once = PTHREAD_ONCE_INIT;
static const char *tiles_why; /* NULL when the amx variant may run */
static char tiles_why_buf[240];

static void tiles_init(void)
{
    if (!ll_isa_cpu_amx_bf16())
        tiles_why = "CPU lacks amx_bf16";
    else if (!cpu_runs(V_AVX512))
        tiles_why = "CPU lacks AVX-512 BF16"; /* the exact path's and the round step's variant */
    else if (!ll_isa_amx_ready(&tiles_why))
        ; /* why set; isa.c logged it */
    else if (!ll_mm_tiles_agree(ll_mm_kernel_amx, ll_mm_round_amx, tiles_why_buf,
                                sizeof tiles_why_buf)) {
        tiles_why = tiles_why_buf;
        log_msg(LOG_WARN, "AMX bf16: %s; bf16 matmuls stay on avx512bf16", tiles_why);
    }
}

bool ll_matmul_tiles_ready(const char **why)
{
    pthread_once(&tiles_once, tiles_init);
    if (why)
        *why = tiles_why;
    return tiles_why == NULL;
}
