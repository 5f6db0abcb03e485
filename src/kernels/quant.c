/*
 * quant.c: the q8_0 / q4_0 / q4_k weight formats (see quant.h): shape and plane-size checks, the
 * reference quantizers (q8_0 / q4_0: round to nearest, one block at a time; q4_k: a least-squares
 * fit per block, one super-block at a time; in plain C: they run once per model, at quantize or
 * load time, not per token), the choice of the AVX-512 quantizer (quant_avx512.c, the same bytes
 * ~10x faster, so quantizing q8_0 / q4_0 at load costs about the time of reading the weights)
 * or, without AVX-512, the AVX2 one (quant_avx2.c); for q4_k they fit and round the blocks of 16
 * (AVX-512) or 8 (AVX2) rows at once, driven from here (quantize_rows_k_lanes); and
 * dequantization.
 *
 * Any thread; every function works only on the caller's buffers. Offsets are computed in size_t
 * (two int dimensions multiply to less than 2⁶², so they cannot overflow).
 */
#include "quant.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "isa.h"
#include "quant_layout.h"
#include "util.h"

/* Bytes of one block of one row in the qs plane. */
static size_t block_bytes(enum ll_qtype t)
{
    return t == LL_Q8_0 ? LL_QBLOCK : LL_QBLOCK / 2;
}

static int groups(int N)
{
    return (N + LL_QGROUP - 1) / LL_QGROUP;
}

const char *ll_qtype_name(enum ll_qtype t)
{
    return t == LL_Q8_0 ? "q8_0" : t == LL_Q4_0 ? "q4_0" : "q4_k";
}

bool ll_qtype_parse(const char *s, enum ll_qtype *out)
{
    if (!strcmp(s, "q8_0"))
        *out = LL_Q8_0;
    else if (!strcmp(s, "q4_0"))
        *out = LL_Q4_0;
    else if (!strcmp(s, "q4_k"))
        *out = LL_Q4_K;
    else
        return false;
    return true;
}

enum ll_status ll_qweight_check_shape(int N, int K, struct ll_err *err)
{
    if (N < 1)
        return ll_err_set(err, LL_EINVAL, "quantized weight: N = %d rows, need at least 1", N);
    if (K < LL_QBLOCK || K % LL_QBLOCK)
        return ll_err_set(err, LL_EINVAL,
                          "quantized weight: K = %d is not a positive multiple of %d", K,
                          LL_QBLOCK);
    return LL_OK;
}

size_t ll_qweight_qs_bytes(enum ll_qtype t, int N, int K)
{
    return (size_t)groups(N) * LL_QGROUP * (size_t)(K / LL_QBLOCK) * block_bytes(t);
}

size_t ll_qweight_d_bytes(enum ll_qtype t, int N, int K)
{
    if (t == LL_Q4_K)
        return (size_t)groups(N) * (size_t)ll_qk_nsb(K / LL_QBLOCK) * LL_QK_SB_BYTES;
    return (size_t)groups(N) * LL_QGROUP * (size_t)(K / LL_QBLOCK) * sizeof(uint16_t);
}

enum ll_status ll_qweight_init(struct ll_qweight *w, enum ll_qtype t, int N, int K, const void *qs,
                               size_t qs_bytes, const void *d, size_t d_bytes, struct ll_err *err)
{
    enum ll_status st = ll_qweight_check_shape(N, K, err);
    if (st != LL_OK)
        return st;
    size_t want_qs = ll_qweight_qs_bytes(t, N, K), want_d = ll_qweight_d_bytes(t, N, K);
    if (!qs || qs_bytes != want_qs)
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: data plane has %zu bytes, need %zu",
                          ll_qtype_name(t), N, K, qs ? qs_bytes : 0, want_qs);
    if (!d || d_bytes != want_d)
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: scale plane has %zu bytes, need %zu",
                          ll_qtype_name(t), N, K, d ? d_bytes : 0, want_d);
    if ((uintptr_t)d % sizeof(uint16_t))
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: scale plane is not 2-byte aligned",
                          ll_qtype_name(t), N, K);
    *w = (struct ll_qweight){.type = t, .n = N, .k = K, .qs = qs, .d = d};
    return LL_OK;
}

/* ---- quantizing ---- */

/* n elements of src from index i into out as f32 (a loop per type, so each vectorises); false if
 * one is not finite. */
static bool src_run(float *out, const void *src, enum ll_dtype t, size_t i, int n)
{
    const uint16_t *h = (const uint16_t *)src + i;
    switch (t) {
    case LL_BF16:
        for (int k = 0; k < n; k++)
            out[k] = ll_bf16_to_f32(h[k]);
        break;
    case LL_F16:
        for (int k = 0; k < n; k++)
            out[k] = ll_f16_to_f32(h[k]);
        break;
    case LL_F32:
        memcpy(out, (const float *)src + i, (size_t)n * sizeof *out);
        break;
    }
    uint32_t bad = 0;
    for (int k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &out[k], 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

/* v rounded to nearest, ties away from zero (as roundf), then clamped to [lo, hi]. Clamping
 * first gives the same result and keeps the conversion in range; the rounding is spelled out
 * because roundf is a library call on baseline x86-64. */
static int round_clamp(float v, int lo, int hi)
{
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    int i = (int)v; /* truncated; v − i is exact */
    float f = v - (float)i;
    return f >= 0.5f ? i + 1 : f <= -0.5f ? i - 1 : i;
}

/* One block x[0..32) into the planes. Returns false if a value is not finite or the scale
 * overflows f16. */
static bool quantize_block(uint8_t *qs, uint16_t *d, enum ll_qtype t, int nb, int n, int b,
                           const float x[LL_QBLOCK])
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < LL_QBLOCK; i++) {
        if (!isfinite(x[i]))
            return false;
        if (fabsf(x[i]) > amax) { /* the first element of largest magnitude, with its sign */
            amax = fabsf(x[i]);
            m = x[i];
        }
    }
    uint16_t dh = ll_f32_to_f16(t == LL_Q8_0 ? amax / 127.0f : m / -8.0f);
    float ds = ll_f16_to_f32(dh);
    if (!isfinite(ds))
        return false;
    d[ll_q_d_index(nb, n, b)] = dh;
    int q[LL_QBLOCK];
    for (int i = 0; i < LL_QBLOCK; i++) {
        float r = ds != 0.0f ? x[i] / ds : 0.0f;
        q[i] = t == LL_Q8_0 ? round_clamp(r, -127, 127) : round_clamp(r, -8, 7) + 8;
    }
    if (t == LL_Q8_0)
        for (int i = 0; i < LL_QBLOCK; i++)
            qs[ll_q_offset(t, nb, n, b, i)] = (uint8_t)(int8_t)q[i];
    else /* byte j: element j in the low nibble, j + 16 in the high one */
        for (int i = 0; i < LL_QBLOCK / 2; i++)
            qs[ll_q_offset(t, nb, n, b, i)] = (uint8_t)(q[i] | q[i + LL_QBLOCK / 2] << 4);
    return true;
}

/* ---- q4_k ---- */

/* The fit of one block x[0..32) as a · q − b, a >= 0, b >= 0, q in [0, 15] (quant.h). With
 * lo = min(min x, 0) and hi = max x, candidate t rounds q = round(s · (x − lo)) with
 * s = (15 + (t − 10) / 10) / (hi − lo) and takes the least-squares (a, c) of x ≈ a · q + c with
 * c <= 0 (b = −c); the candidate with the least squared error wins (the first on ties). Without
 * a valid candidate (hi == lo: a constant block that is not positive; a range beyond f32) the
 * block keeps the plain min-max a = (hi − lo) / 15, b = −lo.
 * Every operation is spelled out in its order and precision (Σq and Σq² exact integers, Σq·x one
 * f32 chain in element order, the solve in f64), because ll_qk_fit_avx512 runs the same
 * operations on 16 blocks at once and must give the same a and b. */
static void qk_fit(const float x[LL_QBLOCK], float *a_out, float *b_out)
{
    float lo = 0.0f, hi = x[0];
    double sx = 0, sxx = 0;
    for (int i = 0; i < LL_QBLOCK; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sx += x[i];
        sxx += (double)x[i] * x[i];
    }
    *a_out = (hi - lo) / 15.0f;
    *b_out = -lo;
    if (!(hi > lo) || !isfinite(hi - lo))
        return;
    const double n = LL_QBLOCK;
    double best = INFINITY;
    for (int t = 0; t < LL_QK_CANDIDATES; t++) {
        float s = ll_qk_candidate(t) / (hi - lo);
        if (!isfinite(s)) /* hi − lo subnormal */
            break;
        int sq = 0, sqq = 0;
        float sqx = 0.0f;
        for (int i = 0; i < LL_QBLOCK; i++) {
            int q = (int)(s * (x[i] - lo) + 0.5f); /* the argument is >= 0.5: round half up */
            q = q > 15 ? 15 : q;
            sq += q;
            sqq += q * q;
            sqx += (float)q * x[i];
        }
        double det = n * sqq - (double)sq * sq;
        if (det <= 0) /* every q equal: no slope to fit */
            continue;
        double a = (n * sqx - (double)sq * sx) / det, c = (sqq * sx - (double)sq * sqx) / det;
        if (c > 0) {
            c = 0;
            a = sqx / (double)sqq;
        }
        if (!(a > 0))
            continue;
        double e = a * a * sqq + 2 * a * c * sq + n * c * c - 2 * a * sqx - 2 * c * sx + sxx;
        if (e < best) {
            best = e;
            *a_out = (float)a;
            *b_out = (float)-c;
        }
    }
}

/* The scales of super-block B of row n (nb blocks per row) from the fits a[j], b[j] of its nsub
 * blocks, into the d plane: d and dmin in f16, the 6-bit codes; block j's step and offset into
 * ds[j * stride], dm[j * stride]. Returns false if a scale overflows f16. */
static bool qk_scales(uint8_t *dp, int nb, int n, int B, int nsub, const float a[LL_QK_BLOCKS],
                      const float b[LL_QK_BLOCKS], float *ds, float *dm, int stride)
{
    float amax = 0.0f, bmax = 0.0f;
    for (int j = 0; j < nsub; j++) {
        amax = a[j] > amax ? a[j] : amax;
        bmax = b[j] > bmax ? b[j] : bmax;
    }
    uint16_t dh = ll_f32_to_f16(amax / 63.0f), mh = ll_f32_to_f16(bmax / 63.0f);
    float d = ll_f16_to_f32(dh), dmin = ll_f16_to_f32(mh);
    if (!isfinite(d) || !isfinite(dmin))
        return false;
    uint8_t codes[16] = {0};
    for (int j = 0; j < nsub; j++) {
        codes[j] = (uint8_t)(d > 0.0f ? round_clamp(a[j] / d, 0, 63) : 0);
        codes[LL_QK_BLOCKS + j] = (uint8_t)(dmin > 0.0f ? round_clamp(b[j] / dmin, 0, 63) : 0);
        ds[j * stride] = d * (float)codes[j];
        dm[j * stride] = dmin * (float)codes[LL_QK_BLOCKS + j];
    }
    const int r = n % LL_QGROUP, nsb = ll_qk_nsb(nb);
    uint8_t *sb = dp + ll_qk_sb_offset(nsb, n, B);
    uint32_t c[3];
    ll_qk_pack_codes(c, codes);
    memcpy(sb + 2 * r, &dh, 2);
    memcpy(sb + 32 + 2 * r, &mh, 2);
    for (int t = 0; t < 3; t++)
        memcpy(sb + 64 + 64 * t + 4 * r, &c[t], 4);
    return true;
}

/* Super-block B of row n, x[0 .. 32·nsub) (nsub blocks, finite) with the fits a[j], b[j] of its
 * blocks, into the planes (nb blocks per row): element i of block j is
 * q = round((x + dm_j) / ds_j) clamped to [0, 15] (0 where ds_j = 0). Returns false if a scale
 * overflows f16. */
static bool qk_encode(uint8_t *qs, uint8_t *dp, int nb, int n, int B, const float *x, int nsub,
                      const float a[LL_QK_BLOCKS], const float b[LL_QK_BLOCKS])
{
    float ds[LL_QK_BLOCKS], dm[LL_QK_BLOCKS];
    if (!qk_scales(dp, nb, n, B, nsub, a, b, ds, dm, 1))
        return false;
    for (int j = 0; j < nsub; j++) {
        const float *xb = x + j * LL_QBLOCK;
        int q[LL_QBLOCK];
        for (int i = 0; i < LL_QBLOCK; i++)
            q[i] = ds[j] > 0.0f ? round_clamp((xb[i] + dm[j]) / ds[j], 0, 15) : 0;
        const int blk = B * LL_QK_BLOCKS + j;
        for (int i = 0; i < LL_QBLOCK / 2; i++)
            qs[ll_q_offset(LL_Q4_K, nb, n, blk, i)] = (uint8_t)(q[i] | q[i + LL_QBLOCK / 2] << 4);
    }
    return true;
}

/* Blocks in super-block B of a row of nb blocks. */
static int qk_nsub(int nb, int B)
{
    return nb - B * LL_QK_BLOCKS < LL_QK_BLOCKS ? nb - B * LL_QK_BLOCKS : LL_QK_BLOCKS;
}

/* Rows [n0, n1) of src into q4_k planes with the reference fit, row by row; on failure the row
 * and super-block in *bad_n, *bad_b (the super-blocks before it written). */
static bool quantize_rows_k(uint8_t *qs, uint8_t *dp, const void *src, enum ll_dtype stype, int K,
                            int n0, int n1, int *bad_n, int *bad_b)
{
    const int nb = K / LL_QBLOCK, nsb = ll_qk_nsb(nb);
    float x[LL_QK_BLOCKS * LL_QBLOCK], a[LL_QK_BLOCKS], b[LL_QK_BLOCKS];
    for (int n = n0; n < n1; n++)
        for (int B = 0; B < nsb; B++) {
            const int nsub = qk_nsub(nb, B);
            size_t base = (size_t)n * (size_t)K + (size_t)B * LL_QK_BLOCKS * LL_QBLOCK;
            bool ok = src_run(x, src, stype, base, nsub * LL_QBLOCK);
            for (int j = 0; ok && j < nsub; j++)
                qk_fit(x + j * LL_QBLOCK, &a[j], &b[j]);
            if (!ok || !qk_encode(qs, dp, nb, n, B, x, nsub, a, b)) {
                *bad_n = n;
                *bad_b = B;
                return false;
            }
        }
    return true;
}

/* A SIMD form of the q4_k quantizer: the fit and the encoding of G rows' blocks at once, lane r
 * holding row n0 + r (quant_layout.h). */
struct qk_lanes {
    int G;
    void (*fit)(const float *xt, float *a, float *b);
    void (*encode)(uint8_t *qs, int nb, int n0, int blk, const float *xt, const float *ds,
                   const float *dm);
};

static const struct qk_lanes qk_avx512 = {16, ll_qk_fit_avx512, ll_qk_encode_avx512};
static const struct qk_lanes qk_avx2 = {8, ll_qk_fit_avx2, ll_qk_encode_avx2};

/* The same bytes as quantize_rows_k, G rows at a time with v's fit and encoding; only the scales
 * (qk_scales) are computed row by row. A short last group of rows, or a group holding a value
 * that is not finite or a scale that overflows, is done again by quantize_rows_k, which then
 * fails as the reference does, with its message. */
static bool quantize_rows_k_lanes(const struct qk_lanes *v, uint8_t *qs, uint8_t *dp,
                                  const void *src, enum ll_dtype stype, int K, int n0, int n1,
                                  int *bad_n, int *bad_b)
{
    const int nb = K / LL_QBLOCK, nsb = ll_qk_nsb(nb), G = v->G;
    float xt[LL_QK_BLOCKS][LL_QBLOCK * LL_QGROUP]; /* block j: element i of lane r at i·G + r */
    float a[LL_QGROUP][LL_QK_BLOCKS], b[LL_QGROUP][LL_QK_BLOCKS], fa[LL_QGROUP], fb[LL_QGROUP];
    float ds[LL_QK_BLOCKS][LL_QGROUP], dm[LL_QK_BLOCKS][LL_QGROUP], x[LL_QK_BLOCKS * LL_QBLOCK];
    for (int g0 = n0; g0 < n1; g0 += G) {
        if (n1 - g0 < G)
            return quantize_rows_k(qs, dp, src, stype, K, g0, n1, bad_n, bad_b);
        for (int B = 0; B < nsb; B++) {
            const int nsub = qk_nsub(nb, B);
            bool ok = true;
            for (int r = 0; r < G; r++) {
                const size_t base = (size_t)(g0 + r) * (size_t)K +
                                    (size_t)B * LL_QK_BLOCKS * LL_QBLOCK;
                ok &= src_run(x, src, stype, base, nsub * LL_QBLOCK);
                for (int j = 0; j < nsub; j++)
                    for (int i = 0; i < LL_QBLOCK; i++)
                        xt[j][i * G + r] = x[j * LL_QBLOCK + i];
            }
            for (int j = 0; ok && j < nsub; j++) {
                v->fit(xt[j], fa, fb);
                for (int r = 0; r < G; r++)
                    a[r][j] = fa[r], b[r][j] = fb[r];
            }
            for (int r = 0; ok && r < G; r++)
                ok =
                    qk_scales(dp, nb, g0 + r, B, nsub, a[r], b[r], &ds[0][r], &dm[0][r], LL_QGROUP);
            if (!ok)
                return quantize_rows_k(qs, dp, src, stype, K, g0, n1, bad_n, bad_b);
            for (int j = 0; j < nsub; j++)
                v->encode(qs, nb, g0, B * LL_QK_BLOCKS + j, xt[j], ds[j], dm[j]);
        }
    }
    return true;
}

/* ---- variants ---- */

static pthread_once_t variant_once = PTHREAD_ONCE_INIT;
enum qvariant { QV_SCALAR, QV_AVX2, QV_AVX512 };
static enum qvariant variant; /* QV_SCALAR: the reference below */
static const char *const variant_names[] = {"scalar", "avx2", "avx512"};

static bool cpu_runs(enum qvariant v)
{
    return v == QV_AVX512 ? ll_isa_cpu_avx512() : v == QV_AVX2 ? ll_isa_cpu_avx2() : true;
}

static void variant_init(void)
{
    enum ll_isa cap = ll_isa_cap(NULL);
    variant = cap >= LL_ISA_AVX512 && cpu_runs(QV_AVX512) ? QV_AVX512
              : cap >= LL_ISA_AVX2 && cpu_runs(QV_AVX2)   ? QV_AVX2
                                                          : QV_SCALAR;
}

const char *ll_quantize_variant(void)
{
    pthread_once(&variant_once, variant_init);
    return variant_names[variant];
}

bool ll_quantize_set_variant(const char *name)
{
    pthread_once(&variant_once, variant_init);
    for (int v = QV_SCALAR; v <= QV_AVX512; v++)
        if (!strcmp(name, variant_names[v])) {
            if (!cpu_runs((enum qvariant)v))
                return false;
            variant = (enum qvariant)v;
            return true;
        }
    return false;
}

/* The error for block b (q4_k: super-block b) of row n of a K-column matrix. */
static enum ll_status block_error(enum ll_qtype t, int K, int n, int b, struct ll_err *err)
{
    int len = t == LL_Q4_K ? LL_QK_BLOCKS * LL_QBLOCK : LL_QBLOCK, end = (b + 1) * len;
    return ll_err_set(err, LL_EINVAL, "quantize %s: row %d, %s %d (elements %d..%d): %s",
                      ll_qtype_name(t), n, t == LL_Q4_K ? "super-block" : "block", b, b * len,
                      (end < K ? end : K) - 1,
                      "a value is not finite or too large for an f16 scale");
}

enum ll_status ll_quantize_rows(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                                enum ll_dtype stype, int N, int K, int n0, int n1,
                                struct ll_err *err)
{
    enum ll_status st = ll_qweight_check_shape(N, K, err);
    if (st != LL_OK)
        return st;
    if (n0 < 0 || n0 > n1 || n1 > N || n0 % LL_QGROUP || (n1 % LL_QGROUP && n1 != N))
        return ll_err_set(err, LL_EINVAL,
                          "quantize: rows [%d, %d) of %d do not start and end on groups of %d", n0,
                          n1, N, LL_QGROUP);
    const int nb = K / LL_QBLOCK;
    pthread_once(&variant_once, variant_init);
    int bad_n, bad_b;
    if (t == LL_Q4_K) {
        uint8_t *dp = (uint8_t *)d;
        if (!(variant == QV_SCALAR
                  ? quantize_rows_k(qs, dp, src, stype, K, n0, n1, &bad_n, &bad_b)
                  : quantize_rows_k_lanes(variant == QV_AVX512 ? &qk_avx512 : &qk_avx2, qs, dp, src,
                                          stype, K, n0, n1, &bad_n, &bad_b)))
            return block_error(t, K, bad_n, bad_b, err);
    } else if (variant == QV_AVX512) {
        if (!ll_quantize_rows_avx512(qs, d, t, src, stype, K, n0, n1, &bad_n, &bad_b))
            return block_error(t, K, bad_n, bad_b, err);
    } else if (variant == QV_AVX2) {
        if (!ll_quantize_rows_avx2(qs, d, t, src, stype, K, n0, n1, &bad_n, &bad_b))
            return block_error(t, K, bad_n, bad_b, err);
    } else {
        float x[LL_QBLOCK];
        for (int n = n0; n < n1; n++)
            for (int b = 0; b < nb; b++) {
                src_run(x, src, stype, (size_t)n * (size_t)K + (size_t)b * LL_QBLOCK, LL_QBLOCK);
                if (!quantize_block(qs, d, t, nb, n, b, x))
                    return block_error(t, K, n, b, err);
            }
    }
    if (n1 == N) /* zero the padding rows of the last group */
        for (int n = N; n < groups(N) * LL_QGROUP; n++) {
            for (int b = 0; b < nb; b++) {
                if (t != LL_Q4_K)
                    d[ll_q_d_index(nb, n, b)] = 0;
                for (int i = 0; i < LL_QBLOCK; i++)
                    qs[ll_q_offset(t, nb, n, b, i)] = 0;
            }
            if (t == LL_Q4_K)
                for (int B = 0; B < ll_qk_nsb(nb); B++) {
                    uint8_t *sb = (uint8_t *)d + ll_qk_sb_offset(ll_qk_nsb(nb), n, B);
                    const int r = n % LL_QGROUP;
                    memset(sb + 2 * r, 0, 2);
                    memset(sb + 32 + 2 * r, 0, 2);
                    for (int w = 0; w < 3; w++)
                        memset(sb + 64 + 64 * w + 4 * r, 0, 4);
                }
        }
    return LL_OK;
}

/* Row n of a q4_k matrix: (d · sc_j) · q − dmin · m_j; d · sc_j · q is exact (at most
 * 11 + 6 + 4 significant bits), the difference rounds once. */
static void dequantize_row_k(float *out, const struct ll_qweight *w, int n)
{
    const int nb = w->k / LL_QBLOCK, nsb = ll_qk_nsb(nb);
    const uint8_t *dp = (const uint8_t *)w->d;
    for (int b = 0; b < nb; b++) {
        const int B = b / LL_QK_BLOCKS, j = b % LL_QK_BLOCKS;
        const uint8_t *sb = dp + ll_qk_sb_offset(nsb, n, B);
        uint16_t dh, mh;
        uint32_t c[3];
        memcpy(&dh, sb + 2 * (n % LL_QGROUP), 2);
        memcpy(&mh, sb + 32 + 2 * (n % LL_QGROUP), 2);
        ll_qk_read_codes(c, dp, nsb, n, B);
        float ds = ll_f16_to_f32(dh) * (float)ll_qk_code(c, j);
        float dm = ll_f16_to_f32(mh) * (float)ll_qk_code(c, LL_QK_BLOCKS + j);
        for (int i = 0; i < LL_QBLOCK; i++) {
            uint8_t byte = w->qs[ll_q_offset(LL_Q4_K, nb, n, b, i)];
            float q = (float)(i < 16 ? byte & 15 : byte >> 4);
            out[b * LL_QBLOCK + i] = ds * q - dm;
        }
    }
}

void ll_dequantize_row(float *out, const struct ll_qweight *w, int n)
{
    LL_ASSERT(n >= 0 && n < w->n);
    if (w->type == LL_Q4_K) {
        dequantize_row_k(out, w, n);
        return;
    }
    const int nb = w->k / LL_QBLOCK;
    for (int b = 0; b < nb; b++) {
        float ds = ll_f16_to_f32(w->d[ll_q_d_index(nb, n, b)]);
        for (int i = 0; i < LL_QBLOCK; i++) {
            uint8_t byte = w->qs[ll_q_offset(w->type, nb, n, b, i)];
            int q = w->type == LL_Q8_0 ? (int8_t)byte : (i < 16 ? byte & 15 : byte >> 4) - 8;
            out[b * LL_QBLOCK + i] = ds * (float)q;
        }
    }
}
