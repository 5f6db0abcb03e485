/*
 * qmatmul_ymm.h: the 256-bit kernels of ll_qmatmul, included once by qmatmul_avx2.c (YMM_VNNI 0:
 * vpmaddubsw + vpmaddwd) and once by qmatmul_avxvnni.c (YMM_VNNI 1: VEX vpdpbusd), which define
 * YMM_VNNI, YMM_KERNEL and YMM_QUANT (the two function names) before including it.
 *
 * A ymm holds half of a 64-byte step of a group (quant.h): 8 output rows × 4 bytes, so the
 * kernels walk "units" of 8 output rows (unit u = half u % 2 of group u / 2). As in the AVX-512
 * VNNI variant, lane r accumulates block b of row r whole, and the per-block f32 steps are those
 * of qmatmul.h, so every variant agrees bit for bit.
 *   - AVX-VNNI: vpdpbusd, q8_0 sign bit flipped (q + 128), q4_0 nibbles as they are; the
 *     correction (128 or 8 × the activation block sum) subtracted once per block.
 *   - AVX2: vpmaddubsw would saturate the 16-bit pair sums of (q + 128) · a, so q8_0 moves the
 *     weight's sign onto the activation (|q| · ±a ≤ 128 · 127 · 2 fits) and widens each step
 *     with vpmaddwd. q4_0 pair sums are at most 15 · 127 · 2 = 3810, so the 8 of a block add up
 *     in 16 bits (≤ 30480) and are widened once per block; correction 8 × block sum.
 * q4_k (tile_k): the q4_0 nibble loop without the correction (AVX2: pair sums ≤ 15 · 127 · 2, as
 * q4_0's), then the two scales of the block from the super-block's f16 d, dmin and 6-bit codes,
 * and its two fused steps.
 * Tiles of TILE_M rows of x × TILE_U units fit the 16 ymm registers; blocks of x and slices of
 * K as in qmatmul_vnni512.c, and as there a lone row of x streams one group (two units) at a
 * time (the avx2 variant on an AMD EPYC, M = 1, against two groups at a time, calls alternated:
 * q4_0 1.14-1.29x, q8_0 1.02-1.13x on every shape but down, 0.98-1.01x).
 */
#include <immintrin.h>
#include <string.h>

#include "qmatmul_kernels.h"
#include "quant_layout.h"

#define INLINE static inline __attribute__((always_inline))

#if YMM_VNNI
#define TILE_M 3
#else
#define TILE_M 2
#endif
#define TILE_U 2 /* units of 8 rows of W per tile */
#define GEMV_U 2 /* units per tile when a block has a single row of x: one group (see the top) */
#define MAX_ACC 6
#define UNIT 8   /* output rows per unit */

static const size_t x_block_bytes = 512 * 1024;
/* Bytes of a weight panel's slice of K kept in L1 while every tile of a block of x runs on it. */
static const size_t panel_slice_bytes = 16 * 1024;

INLINE __m256i bcast4(const int8_t *p)
{
    return _mm256_set1_epi32(ll_qmm_load4(p));
}

/* s += Σ over each lane's 4 bytes of w · a, both signed (q8_0); on VNNI the result is off by
 * 128 × Σa (corrected per block). */
INLINE __m256i dot_s8(__m256i s, __m256i w, __m256i a)
{
#if YMM_VNNI
    return _mm256_dpbusd_avx_epi32(s, _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)), a);
#else
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w),
                                                                       _mm256_sign_epi8(a, w)),
                                                 _mm256_set1_epi16(1)));
#endif
}

/* The tile's f32 accumulators (mr rows of x by nu units of UNIT columns, ncols of them real):
 * zero when b0 is 0 (the first blocks), else the partial sums already in out (N columns a row). */
INLINE void acc_start(__m256 *acc, const int mr, const int nu, const float *out, size_t N,
                      int ncols, size_t b0)
{
#pragma GCC unroll 3
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < nu; u++) {
            const float *o = out + (size_t)m * N + (size_t)(UNIT * u);
            const int c = ncols - UNIT * u;
            if (b0 == 0 || c <= 0) {
                acc[m * nu + u] = _mm256_setzero_ps();
            } else if (c >= UNIT) {
                acc[m * nu + u] = _mm256_loadu_ps(o);
            } else {
                float r[UNIT] = {0};
                memcpy(r, o, (size_t)c * sizeof *r);
                acc[m * nu + u] = _mm256_loadu_ps(r);
            }
        }
}

/* Block b of a 4-bit tile: the exact 32-bit integer sums of the unsigned nibbles (low nibbles
 * are elements 0..15 of the block, high ones 16..31) times the int8 activations, added to s (mr
 * rows of x by nu units; unit u at (u/2)·wq_g + (u%2)·32 bytes of wq). The same for q4_0 and
 * q4_k. AVX2 sums the block in 16-bit lanes first (a lane holds at most 16 products of
 * 15 · 128 = 30720: no overflow) and widens them at the end, so s must be zero on entry. */
INLINE void dot_q4_block(__m256i *s, const int mr, const int nu, const uint8_t *wq, size_t wq_g,
                         size_t b, const int8_t *xb, size_t K)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int st = 0; st < 4; st++)
#pragma GCC unroll 4
        for (int u = 0; u < nu; u++) {
            const uint8_t *wu = wq + (size_t)(u / 2) * wq_g + (size_t)(u % 2) * 32;
            __m256i v = _mm256_loadu_si256((const __m256i *)(wu + (b * 4 + (size_t)st) * 64));
            __m256i lo = _mm256_and_si256(v, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#pragma GCC unroll 3
            for (int m = 0; m < mr; m++) {
                __m256i alo = bcast4(xb + m * K + 4 * st);
                __m256i ahi = bcast4(xb + m * K + 16 + 4 * st);
                __m256i *si = &s[m * nu + u];
#if YMM_VNNI
                *si = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(*si, lo, alo), hi, ahi);
#else
                *si = _mm256_add_epi16(*si, _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo),
                                                             _mm256_maddubs_epi16(hi, ahi)));
#endif
            }
        }
#if !YMM_VNNI
#pragma GCC unroll 6
    for (int i = 0; i < mr * nu; i++)
        s[i] = _mm256_madd_epi16(s[i], _mm256_set1_epi16(1));
#endif
}

/* Blocks [b0, b1) of the tile (mr rows of x, nu units from wq/wd; wq and wd point at unit 0's
 * bytes in block 0, unit u is at + (u/2)·group stride + (u%2)·half): the f32 accumulators start
 * at zero if b0 is 0, else from the partial sums in out; they are stored to out, plus bias after
 * the last block. */
INLINE void tile(const int q4, const int mr, const int nu, const struct ll_qmm_job *j,
                 const int8_t *xq, const float *xd, const int32_t *xs, const uint8_t *wq,
                 const uint16_t *wd, float *out, const float *bias, int ncols, size_t b0,
                 size_t b1)
{
    const size_t K = (size_t)j->K, nb = (size_t)j->nb;
    const size_t wq_g = nb * (size_t)(q4 ? 4 : 8) * 64, wd_g = nb * LL_QGROUP;
#define UQ(u) ((size_t)((u) / 2) * wq_g + (size_t)((u) % 2) * 32)
#define UD(u) ((size_t)((u) / 2) * wd_g + (size_t)((u) % 2) * UNIT)
    __m256 acc[MAX_ACC];
    acc_start(acc, mr, nu, out, (size_t)j->N, ncols, b0);

    for (size_t b = b0; b < b1; b++) {
        __m256i s[MAX_ACC];
#pragma GCC unroll 6
        for (int i = 0; i < mr * nu; i++)
            s[i] = _mm256_setzero_si256();
        const int8_t *xb = xq + b * LL_QBLOCK;
        if (!q4) {
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++)
#pragma GCC unroll 4
                for (int u = 0; u < nu; u++) {
                    __m256i w = _mm256_loadu_si256(
                        (const __m256i *)(wq + UQ(u) + (b * 8 + (size_t)st) * 64));
#pragma GCC unroll 3
                    for (int m = 0; m < mr; m++)
                        s[m * nu + u] = dot_s8(s[m * nu + u], w, bcast4(xb + m * K + 4 * st));
                }
        } else {
            dot_q4_block(s, mr, nu, wq, wq_g, b, xb, K);
        }
        /* the correction: q4_0 −8 · Σa; q8_0 −128 · Σa where the sign bit was flipped */
        const int corr_mul = q4 ? 8 : YMM_VNNI ? 128 : 0;
#pragma GCC unroll 4
        for (int u = 0; u < nu; u++) {
            __m256 dw = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(wd + UD(u) + b * LL_QGROUP)));
#pragma GCC unroll 3
            for (int m = 0; m < mr; m++) {
                __m256i si = s[m * nu + u];
                if (corr_mul)
                    si = _mm256_sub_epi32(si, _mm256_set1_epi32(xs[m * nb + b] * corr_mul));
                __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[m * nb + b]));
                acc[m * nu + u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), scale, acc[m * nu + u]);
            }
        }
    }

    const int add_bias = bias && b1 == nb;
#pragma GCC unroll 4
    for (int u = 0; u < nu; u++) {
        int c = ncols - UNIT * u;
        if (c <= 0)
            break;
        for (int m = 0; m < mr; m++) {
            float r[UNIT];
            _mm256_storeu_ps(r, acc[m * nu + u]);
            float *o = out + (size_t)m * (size_t)j->N + (size_t)(UNIT * u);
            for (int i = 0; i < UNIT && i < c; i++)
                o[i] = add_bias ? r[i] + bias[UNIT * u + i] : r[i];
        }
    }
#undef UQ
#undef UD
}

/* The q4_k tile: the nibble sums as q4_0's (unsigned, no correction), then per block and unit
 * the super-block's scales ds = d · sc_j and dm = dmin · m_j from its 6-bit codes, and per row of
 * x the two fused steps of qmatmul.h. wd points at the d plane bytes of unit 0's group; a unit
 * is half a group: its 8 f16 d at + 16·(u % 2), dmin 32 bytes on, code word t at
 * + 64 + 64t + 32·(u % 2). */
INLINE void tile_k(const int mr, const int nu, const struct ll_qmm_job *j, const int8_t *xq,
                   const float *xd, const float *xm, const uint8_t *wq, const uint8_t *wd,
                   float *out, const float *bias, int ncols, size_t b0, size_t b1)
{
    const size_t K = (size_t)j->K, nb = (size_t)j->nb;
    const size_t wq_g = nb * 4 * 64, wd_g = (size_t)ll_qk_nsb(j->nb) * LL_QK_SB_BYTES;
#define UD(u) ((size_t)((u) / 2) * wd_g + (size_t)((u) % 2) * 16)
#define UC(u) ((size_t)((u) / 2) * wd_g + (size_t)((u) % 2) * 32)
    const __m256i six = _mm256_set1_epi32(63);
    __m256 acc[MAX_ACC];
    acc_start(acc, mr, nu, out, (size_t)j->N, ncols, b0);

    for (size_t b = b0; b < b1; b++) {
        __m256i s[MAX_ACC];
#pragma GCC unroll 6
        for (int i = 0; i < mr * nu; i++)
            s[i] = _mm256_setzero_si256();
        const int8_t *xb = xq + b * LL_QBLOCK;
        dot_q4_block(s, mr, nu, wq, wq_g, b, xb, K);
        const int jb = (int)(b % LL_QK_BLOCKS), cm = LL_QK_BLOCKS + jb; /* codes sc_j, m_j */
        const size_t sb_off = b / LL_QK_BLOCKS * LL_QK_SB_BYTES;
        const __m128i sh_sc = _mm_cvtsi32_si128(6 * (jb % 5));
        const __m128i sh_m = _mm_cvtsi32_si128(6 * (cm % 5));
#pragma GCC unroll 4
        for (int u = 0; u < nu; u++) {
            const uint8_t *sd = wd + UD(u) + sb_off, *sc = wd + UC(u) + sb_off + 64;
            __m256i csc = _mm256_and_si256(
                _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(sc + 64 * (jb / 5))), sh_sc),
                six);
            __m256i cmin;
            if (cm < 15) {
                cmin = _mm256_and_si256(
                    _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(sc + 64 * (cm / 5))),
                                     sh_m),
                    six);
            } else {
                __m256i w0 = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)sc), 30);
                __m256i w1 = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(sc + 64)), 30);
                __m256i w2 = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(sc + 128)), 30);
                cmin = _mm256_or_si256(w0, _mm256_or_si256(_mm256_slli_epi32(w1, 2),
                                                           _mm256_slli_epi32(w2, 4)));
            }
            __m256 ds = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sd)),
                                      _mm256_cvtepi32_ps(csc));
            __m256 dm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sd + 32))),
                                      _mm256_cvtepi32_ps(cmin));
#pragma GCC unroll 3
            for (int m = 0; m < mr; m++) {
                __m256 scale = _mm256_mul_ps(ds, _mm256_set1_ps(xd[m * nb + b]));
                __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[m * nu + u]), scale,
                                           acc[m * nu + u]);
                acc[m * nu + u] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(xm[m * nb + b]), a);
            }
        }
    }

    const int add_bias = bias && b1 == nb;
#pragma GCC unroll 4
    for (int u = 0; u < nu; u++) {
        int c = ncols - UNIT * u;
        if (c <= 0)
            break;
        for (int m = 0; m < mr; m++) {
            float r[UNIT];
            _mm256_storeu_ps(r, acc[m * nu + u]);
            float *o = out + (size_t)m * (size_t)j->N + (size_t)(UNIT * u);
            for (int i = 0; i < UNIT && i < c; i++)
                o[i] = add_bias ? r[i] + bias[UNIT * u + i] : r[i];
        }
    }
#undef UQ
#undef UD
#undef UC
}

#define TILE_CASE(Q4, MR, NU)                                                                  \
    case (Q4) * 256 + (MR) * 16 + (NU):                                                        \
        tile(Q4, MR, NU, j, xq, xd, xs, wq, wd, out, bias, ncols, b0, b1);                     \
        break;
#define TILE_CASES(Q4)                                                                         \
    TILE_CASE(Q4, 1, 1) TILE_CASE(Q4, 1, 2)                                                    \
    TILE_CASE(Q4, 2, 1) TILE_CASE(Q4, 2, 2)                                                    \
    TILE_CASE(Q4, 3, 1) TILE_CASE(Q4, 3, 2)

static void tile_any(int q4, int mr, int nu, const struct ll_qmm_job *j, const int8_t *xq,
                     const float *xd, const int32_t *xs, const uint8_t *wq, const uint16_t *wd,
                     float *out, const float *bias, int ncols, size_t b0, size_t b1)
{
    switch (q4 * 256 + mr * 16 + nu) {
        TILE_CASES(0)
        TILE_CASES(1)
    default:
        __builtin_unreachable();
    }
}

#define TILE_K_CASE(MR, NU)                                                                    \
    case (MR) * 16 + (NU):                                                                     \
        tile_k(MR, NU, j, xq, xd, xm, wq, wd, out, bias, ncols, b0, b1);                       \
        break;

static void tile_k_any(int mr, int nu, const struct ll_qmm_job *j, const int8_t *xq,
                       const float *xd, const float *xm, const uint8_t *wq, const uint8_t *wd,
                       float *out, const float *bias, int ncols, size_t b0, size_t b1)
{
    switch (mr * 16 + nu) {
        TILE_K_CASE(1, 1) TILE_K_CASE(1, 2)
        TILE_K_CASE(2, 1) TILE_K_CASE(2, 2)
        TILE_K_CASE(3, 1) TILE_K_CASE(3, 2)
    default:
        __builtin_unreachable();
    }
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* Units are walked within the groups [g0, g1): unit u of the range starts at column 8u. */
void YMM_KERNEL(const struct ll_qmm_job *j, int m0, int m1, int g0, int g1)
{
    const int q4 = j->w->type == LL_Q4_0, qk = j->w->type == LL_Q4_K;
    const size_t nb = (size_t)j->nb;
    /* per group: bytes of qs, and 2-byte units of d */
    const size_t wq_g = nb * (size_t)ll_q_steps(j->w->type) * 64,
                 wd_g = qk ? (size_t)ll_qk_nsb(j->nb) * LL_QK_SB_BYTES / 2 : nb * LL_QGROUP;
    /* units that hold at least one real row (the last group may be half padding) */
    const int u_end = min_int(2 * g1, (j->N + UNIT - 1) / UNIT);
    int block = (int)(x_block_bytes / (size_t)j->K);
    block = block < TILE_M ? TILE_M : block / TILE_M * TILE_M;
    /* blocks of K per slice: the panel's slice stays in L1 across the tiles of a block of x */
    size_t slice = panel_slice_bytes / (wq_g / nb / 2 * TILE_U);
    slice = slice < 1 ? 1 : slice;

    for (int mb = m0; mb < m1; mb += block) {
        const int mb_end = min_int(m1, mb + block);
        const int panel = mb_end - mb == 1 ? GEMV_U : TILE_U;
        /* a block of one tile reads each weight once: no need to slice K */
        const size_t kc = mb_end - mb > TILE_M ? slice : nb;
        for (int u = 2 * g0; u < u_end; u += panel) {
            /* u is even here (tiles start on a group), as tile()'s unit addressing assumes */
            const int nu = min_int(panel, u_end - u);
            const int ncols = min_int(nu * UNIT, j->N - u * UNIT);
            const uint8_t *wq = j->w->qs + (size_t)(u / 2) * wq_g;
            const uint16_t *wd = j->w->d + (size_t)(u / 2) * wd_g; /* the group's d bytes */
            const float *bias = j->bias ? j->bias + (size_t)u * UNIT : NULL;
            for (size_t b0 = 0; b0 < nb; b0 += kc) {
                const size_t b1 = b0 + kc < nb ? b0 + kc : nb;
                for (int m = mb; m < mb_end; m += TILE_M) {
                    const int mr = min_int(TILE_M, mb_end - m);
                    float *o = j->out + (size_t)m * (size_t)j->N + (size_t)u * UNIT;
                    if (qk)
                        tile_k_any(mr, nu, j, j->xq + (size_t)m * (size_t)j->K,
                                   j->xd + (size_t)m * nb, j->xm + (size_t)m * nb, wq,
                                   (const uint8_t *)wd, o, bias, ncols, b0, b1);
                    else
                        tile_any(q4, mr, nu, j, j->xq + (size_t)m * (size_t)j->K,
                                 j->xd + (size_t)m * nb, j->xs + (size_t)m * nb, wq, wd, o, bias,
                                 ncols, b0, b1);
                }
            }
        }
    }
}

void YMM_QUANT(const struct ll_qmm_job *j, int m0, int m1)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int m = m0; m < m1; m++)
        for (int b = 0; b < j->nb; b++) {
            const float *x = j->x + (size_t)m * (size_t)j->K + (size_t)b * LL_QBLOCK;
            __m256 v[4], a = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(x + 8 * i);
                a = _mm256_max_ps(a, _mm256_andnot_ps(sign, v[i]));
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            float d, id;
            ll_qmm_act_scale(_mm_cvtss_f32(h), &d, &id);
            __m256 vid = _mm256_set1_ps(id);
            __m256i q[4];
            for (int i = 0; i < 4; i++) /* round half to even */
                q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
            /* pack to bytes: packs works per 128-bit lane, so fix the order with a permute */
            __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
            __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23),
                                                        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(j->xq + (size_t)m * (size_t)j->K +
                                            (size_t)b * LL_QBLOCK),
                                bytes);
            __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                           _mm256_add_epi32(q[2], q[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            j->xd[(size_t)m * (size_t)j->nb + (size_t)b] = d;
            j->xs[(size_t)m * (size_t)j->nb + (size_t)b] = _mm_cvtsi128_si32(s4);
        }
}
