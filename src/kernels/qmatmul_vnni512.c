/*
 * qmatmul_vnni512.c: the AVX-512 VNNI variant of ll_qmatmul (F, BW, VL, DQ, VNNI, F16C), run by
 * the pool's threads on disjoint (rows of x, groups of W) ranges (see qmatmul_kernels.h).
 *
 * One zmm holds one 64-byte step of a group (quant.h): 16 output rows × 4 bytes, so one
 * vpdpbusd with four activations broadcast to every lane adds 4 products to each of 16 output
 * rows, and after a block's 8 steps (q8_0; 4 steps of low and high nibbles for q4_0) lane r holds
 * the integer sum of block b for row r: the sum is whole in one lane, never reduced across lanes.
 * Unsigned × signed: q4_0 nibbles (0..15) are the unsigned side as they are; q8_0 bytes get their
 * sign bit flipped (q + 128). Both corrections are the activation block sum times 8 or 128,
 * subtracted from the lane sums once per block. Then per block and lane: convert to f32,
 * multiply the two scales, one FMA into the f32 accumulator: the exact sequence of qmatmul.h.
 *
 * Tiles of up to TILE_M rows of x × TILE_G groups keep TILE_M·TILE_G integer and f32 accumulators
 * in registers, so each weight vector loaded serves TILE_M rows of x; activations are broadcast
 * from memory. Rows of x are taken in blocks that fit in L2 (x_block_bytes); for each block a
 * thread walks its groups panel by panel, and each panel slice by slice along K (a slice of
 * panel_slice_bytes stays in L1), running every tile of the block against the slice, so weights
 * come from memory once per block. Between slices the f32 accumulators wait in out unchanged, so
 * the per-block sequence is the same as without slicing. A lone row of x (decode) streams
 * weights straight through, one group at a time, unsliced: two forward streams a thread (its qs
 * and d) are what the prefetchers follow best (AMD EPYC, M = 1, calls alternated as
 * bench-matmul --paired does, with a temporary switch between one group and four at a time:
 * q4_0 1.09-1.15x, q4_k 1.13-1.21x, q8_0 1.06-1.14x on every shape but down, 0.99-1.09x; two at
 * a time 0.93-1.02x; four against four 0.99-1.00).
 */
#include <immintrin.h>

#include "qmatmul_kernels.h"
#include "quant_layout.h"

#define INLINE static inline __attribute__((always_inline))

#define TILE_M 4 /* rows of x per tile */
#define TILE_G 3 /* groups of 16 rows of W per tile */
#define GEMV_G 1 /* groups per tile when a block has a single row of x (see the top) */
#define MAX_ACC 12

static const size_t x_block_bytes = 512 * 1024;
/* Bytes of a weight panel's slice of K kept in L1 while every tile of a block of x runs on it. */
static const size_t panel_slice_bytes = 16 * 1024;
/* q4_k: blocks of a slice whose scales fit the driver's table (a 16 KiB slice holds 21) */
#define SCT_BLOCKS 32

/* The tile's f32 accumulators (mr rows of x by ng groups of 16 columns, ncols of them real) and
 * each group's column mask: zero when b0 is 0 (the first blocks), else the partial sums already
 * in out (N columns a row). */
INLINE void acc_start(__m512 *acc, __mmask16 *mask, const int mr, const int ng, const float *out,
                      size_t N, int ncols, size_t b0)
{
#pragma GCC unroll 4
    for (int g = 0; g < ng; g++) {
        int c = ncols - LL_QGROUP * g;
        mask[g] = c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << c) - 1);
    }
#pragma GCC unroll 4
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++)
            acc[m * ng + g] = b0 == 0 ? _mm512_setzero_ps()
                                      : _mm512_maskz_loadu_ps(mask[g], out + (size_t)m * N +
                                                                           LL_QGROUP * g);
}

/* Block b of a 4-bit tile: the exact integer sums of the unsigned nibbles (low nibbles are
 * elements 0..15 of the block, high ones 16..31) times the int8 activations, added to s (mr rows
 * of x by ng groups). The same for q4_0 and q4_k. */
INLINE void dot_q4_block(__m512i *s, const int mr, const int ng, const uint8_t *wq, size_t wq_g,
                         size_t b, const int8_t *xb, size_t K)
{
    const __m512i low4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int st = 0; st < 4; st++)
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
            __m512i v = _mm512_loadu_si512(wq + (size_t)g * wq_g + (b * 4 + (size_t)st) * 64);
            __m512i lo = _mm512_and_si512(v, low4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
#pragma GCC unroll 4
            for (int m = 0; m < mr; m++) {
                s[m * ng + g] = _mm512_dpbusd_epi32(
                    s[m * ng + g], lo, _mm512_set1_epi32(ll_qmm_load4(xb + m * K + 4 * st)));
                s[m * ng + g] = _mm512_dpbusd_epi32(
                    s[m * ng + g], hi, _mm512_set1_epi32(ll_qmm_load4(xb + m * K + 16 + 4 * st)));
            }
        }
}

/* Blocks [b0, b1) of the tile (mr rows of x from xq, ng groups from wq/wd): the f32
 * accumulators start at zero if b0 is 0, else from the partial sums in out; they are stored to
 * out, plus bias after the last block. */
INLINE void tile(const int q4, const int mr, const int ng, const struct ll_qmm_job *j,
                 const int8_t *xq, const float *xd, const int32_t *xs, const uint8_t *wq,
                 const uint16_t *wd, float *out, const float *bias, int ncols, size_t b0,
                 size_t b1)
{
    const size_t K = (size_t)j->K, nb = (size_t)j->nb;
    const size_t wq_g = nb * (size_t)(q4 ? 4 : 8) * 64, wd_g = nb * LL_QGROUP; /* per group */
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[MAX_ACC];
    __mmask16 mask[TILE_G > GEMV_G ? TILE_G : GEMV_G];
    acc_start(acc, mask, mr, ng, out, (size_t)j->N, ncols, b0);

    for (size_t b = b0; b < b1; b++) {
        __m512i s[MAX_ACC];
#pragma GCC unroll 12
        for (int i = 0; i < mr * ng; i++)
            s[i] = _mm512_setzero_si512();
        const int8_t *xb = xq + b * LL_QBLOCK;
        if (!q4) {
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++)
#pragma GCC unroll 4
                for (int g = 0; g < ng; g++) {
                    __m512i w = _mm512_xor_si512(
                        _mm512_loadu_si512(wq + (size_t)g * wq_g + (b * 8 + (size_t)st) * 64), flip);
#pragma GCC unroll 4
                    for (int m = 0; m < mr; m++)
                        s[m * ng + g] = _mm512_dpbusd_epi32(
                            s[m * ng + g], w, _mm512_set1_epi32(ll_qmm_load4(xb + m * K + 4 * st)));
                }
        } else {
            dot_q4_block(s, mr, ng, wq, wq_g, b, xb, K);
        }
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
            __m512 dw = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(wd + (size_t)g * wd_g + b * LL_QGROUP)));
#pragma GCC unroll 4
            for (int m = 0; m < mr; m++) {
                __m512i corr = _mm512_set1_epi32(xs[m * nb + b] * (q4 ? 8 : 128));
                __m512 sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[m * ng + g], corr));
                __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[m * nb + b]));
                acc[m * ng + g] = _mm512_fmadd_ps(sf, scale, acc[m * ng + g]);
            }
        }
    }

    const int add_bias = bias && b1 == nb;
#pragma GCC unroll 4
    for (int g = 0; g < ng; g++) {
        __m512 bv = add_bias ? _mm512_maskz_loadu_ps(mask[g], bias + LL_QGROUP * g)
                             : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int m = 0; m < mr; m++) {
            __m512 r = add_bias ? _mm512_add_ps(acc[m * ng + g], bv) : acc[m * ng + g];
            _mm512_mask_storeu_ps(out + (size_t)m * (size_t)j->N + LL_QGROUP * g, mask[g], r);
        }
    }
}

/* q4_k: the scales of block jb (0..7) of a super-block for the 16 rows of a group, from its d-plane
 * bytes sb: ds = d · sc_j and dm = dmin · m_j from the codes (one shift and mask; m_7 from the
 * words' top bits). */
INLINE void qk_scales16(const uint8_t *sb, int jb, __m512 *ds, __m512 *dm)
{
    const __m512i six = _mm512_set1_epi32(63);
    const int cm = LL_QK_BLOCKS + jb; /* codes sc_j, m_j */
    const __m128i sh_sc = _mm_cvtsi32_si128(6 * (jb % 5));
    const __m128i sh_m = _mm_cvtsi32_si128(6 * (cm % 5));
    __m512i csc =
        _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512(sb + 64 + 64 * (jb / 5)), sh_sc), six);
    __m512i cmin;
    if (cm < 15) {
        cmin = _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512(sb + 64 + 64 * (cm / 5)), sh_m),
                                six);
    } else {
        __m512i w0 = _mm512_srli_epi32(_mm512_loadu_si512(sb + 64), 30);
        __m512i w1 = _mm512_srli_epi32(_mm512_loadu_si512(sb + 128), 30);
        __m512i w2 = _mm512_srli_epi32(_mm512_loadu_si512(sb + 192), 30);
        cmin = _mm512_or_si512(w0, _mm512_or_si512(_mm512_slli_epi32(w1, 2),
                                                   _mm512_slli_epi32(w2, 4)));
    }
    *ds = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sb)),
                        _mm512_cvtepi32_ps(csc));
    *dm = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sb + 32))),
                        _mm512_cvtepi32_ps(cmin));
}

/* The q4_k tile: as tile() for q4_0 (the nibbles unsigned as they are, no correction), then per
 * block and group the scales ds and dm (qk_scales16), then per row of x the two fused steps of
 * qmatmul.h. wd points at the d plane bytes of the tile's first group; the scales come from the
 * table sct when it is given (group g, block b at sct[(g·(b1 − b0) + b − b0)·32]: ds, then dm),
 * else from the codes. */
INLINE void tile_k(const int mr, const int ng, const struct ll_qmm_job *j, const int8_t *xq,
                   const float *xd, const float *xm, const uint8_t *wq, const uint8_t *wd,
                   const float *sct, float *out, const float *bias, int ncols, size_t b0,
                   size_t b1)
{
    const size_t K = (size_t)j->K, nb = (size_t)j->nb;
    const size_t wq_g = nb * 4 * 64, wd_g = (size_t)ll_qk_nsb(j->nb) * LL_QK_SB_BYTES;
    __m512 acc[MAX_ACC];
    __mmask16 mask[TILE_G > GEMV_G ? TILE_G : GEMV_G];
    acc_start(acc, mask, mr, ng, out, (size_t)j->N, ncols, b0);

    for (size_t b = b0; b < b1; b++) {
        __m512i s[MAX_ACC];
#pragma GCC unroll 12
        for (int i = 0; i < mr * ng; i++)
            s[i] = _mm512_setzero_si512();
        const int8_t *xb = xq + b * LL_QBLOCK;
        dot_q4_block(s, mr, ng, wq, wq_g, b, xb, K);
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
            __m512 ds, dm;
            if (sct) {
                const float *t = sct + ((size_t)g * (b1 - b0) + (b - b0)) * 32;
                ds = _mm512_loadu_ps(t);
                dm = _mm512_loadu_ps(t + 16);
            } else {
                qk_scales16(wd + (size_t)g * wd_g + b / LL_QK_BLOCKS * LL_QK_SB_BYTES,
                            (int)(b % LL_QK_BLOCKS), &ds, &dm);
            }
#pragma GCC unroll 4
            for (int m = 0; m < mr; m++) {
                __m512 scale = _mm512_mul_ps(ds, _mm512_set1_ps(xd[m * nb + b]));
                __m512 a =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[m * ng + g]), scale, acc[m * ng + g]);
                acc[m * ng + g] = _mm512_fnmadd_ps(dm, _mm512_set1_ps(xm[m * nb + b]), a);
            }
        }
    }

    const int add_bias = bias && b1 == nb;
#pragma GCC unroll 4
    for (int g = 0; g < ng; g++) {
        __m512 bv = add_bias ? _mm512_maskz_loadu_ps(mask[g], bias + LL_QGROUP * g)
                             : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int m = 0; m < mr; m++) {
            __m512 r = add_bias ? _mm512_add_ps(acc[m * ng + g], bv) : acc[m * ng + g];
            _mm512_mask_storeu_ps(out + (size_t)m * (size_t)j->N + LL_QGROUP * g, mask[g], r);
        }
    }
}

#define TILE_CASE(Q4, MR, NG)                                                                  \
    case (Q4) * 256 + (MR) * 16 + (NG):                                                        \
        tile(Q4, MR, NG, j, xq, xd, xs, wq, wd, out, bias, ncols, b0, b1);                     \
        break;
#define TILE_CASES(Q4)                                                                         \
    TILE_CASE(Q4, 1, 1) TILE_CASE(Q4, 1, 2) TILE_CASE(Q4, 1, 3)                                \
    TILE_CASE(Q4, 2, 1) TILE_CASE(Q4, 2, 2) TILE_CASE(Q4, 2, 3)                                \
    TILE_CASE(Q4, 3, 1) TILE_CASE(Q4, 3, 2) TILE_CASE(Q4, 3, 3)                                \
    TILE_CASE(Q4, 4, 1) TILE_CASE(Q4, 4, 2) TILE_CASE(Q4, 4, 3)

static void tile_any(int q4, int mr, int ng, const struct ll_qmm_job *j, const int8_t *xq,
                     const float *xd, const int32_t *xs, const uint8_t *wq, const uint16_t *wd,
                     float *out, const float *bias, int ncols, size_t b0, size_t b1)
{
    switch (q4 * 256 + mr * 16 + ng) {
        TILE_CASES(0)
        TILE_CASES(1)
    default:
        __builtin_unreachable();
    }
}

#define TILE_K_CASE(MR, NG)                                                                    \
    case (MR) * 16 + (NG):                                                                     \
        tile_k(MR, NG, j, xq, xd, xm, wq, wd, sct, out, bias, ncols, b0, b1);                  \
        break;

static void tile_k_any(int mr, int ng, const struct ll_qmm_job *j, const int8_t *xq,
                       const float *xd, const float *xm, const uint8_t *wq, const uint8_t *wd,
                       const float *sct, float *out, const float *bias, int ncols, size_t b0,
                       size_t b1)
{
    switch (mr * 16 + ng) {
        TILE_K_CASE(1, 1) TILE_K_CASE(1, 2) TILE_K_CASE(1, 3)
        TILE_K_CASE(2, 1) TILE_K_CASE(2, 2) TILE_K_CASE(2, 3)
        TILE_K_CASE(3, 1) TILE_K_CASE(3, 2) TILE_K_CASE(3, 3)
        TILE_K_CASE(4, 1) TILE_K_CASE(4, 2) TILE_K_CASE(4, 3)
    default:
        __builtin_unreachable();
    }
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

void ll_qmm_kernel_vnni512(const struct ll_qmm_job *j, int m0, int m1, int g0, int g1)
{
    const int q4 = j->w->type == LL_Q4_0, qk = j->w->type == LL_Q4_K;
    const size_t nb = (size_t)j->nb;
    /* per group: bytes of qs, and 2-byte units of d */
    const size_t wq_g = nb * (size_t)ll_q_steps(j->w->type) * 64,
                 wd_g = qk ? (size_t)ll_qk_nsb(j->nb) * LL_QK_SB_BYTES / 2 : nb * LL_QGROUP;
    int block = (int)(x_block_bytes / (size_t)j->K);
    block = block < TILE_M ? TILE_M : block / TILE_M * TILE_M;
    /* blocks of K per slice: the panel's slice stays in L1 across the tiles of a block of x */
    size_t slice = panel_slice_bytes / (wq_g / nb * TILE_G);
    slice = slice < 1 ? 1 : slice;

    _Alignas(64) float sc_table[TILE_G * SCT_BLOCKS * 32];
    for (int mb = m0; mb < m1; mb += block) {
        const int mb_end = min_int(m1, mb + block);
        const int panel = mb_end - mb == 1 ? GEMV_G : TILE_G;
        /* a block of one tile reads each weight once: no need to slice K */
        const size_t kc = mb_end - mb > TILE_M ? slice : nb;
        for (int g = g0; g < g1; g += panel) {
            const int ng = min_int(panel, g1 - g);
            const int ncols = min_int(ng * LL_QGROUP, j->N - g * LL_QGROUP);
            const uint8_t *wq = j->w->qs + (size_t)g * wq_g;
            const uint16_t *wd = j->w->d + (size_t)g * wd_g;
            const float *bias = j->bias ? j->bias + (size_t)g * LL_QGROUP : NULL;
            for (size_t b0 = 0; b0 < nb; b0 += kc) {
                const size_t b1 = b0 + kc < nb ? b0 + kc : nb;
                /* q4_k with several tiles on the slice: its scales once, not once per tile
                 * (AMD EPYC, alternating runs: bench-matmul --wtype q4_k M = 128 and 512
                 * 525-558 -> 562-623 GOP/s on most shapes, M = 16 +3-5 %; pp512 q4_k_m
                 * 183-192 -> 198-215 t/s) */
                const float *sct = NULL;
                if (qk && mb_end - mb > TILE_M && b1 - b0 <= SCT_BLOCKS) {
                    for (int gg = 0; gg < ng; gg++)
                        for (size_t b = b0; b < b1; b++) {
                            __m512 ds, dm;
                            qk_scales16((const uint8_t *)(wd + (size_t)gg * wd_g) +
                                            b / LL_QK_BLOCKS * LL_QK_SB_BYTES,
                                        (int)(b % LL_QK_BLOCKS), &ds, &dm);
                            float *t = sc_table + ((size_t)gg * (b1 - b0) + (b - b0)) * 32;
                            _mm512_store_ps(t, ds);
                            _mm512_store_ps(t + 16, dm);
                        }
                    sct = sc_table;
                }
                for (int m = mb; m < mb_end; m += TILE_M) {
                    const int mr = min_int(TILE_M, mb_end - m);
                    float *o = j->out + (size_t)m * (size_t)j->N + (size_t)g * LL_QGROUP;
                    if (qk)
                        tile_k_any(mr, ng, j, j->xq + (size_t)m * (size_t)j->K,
                                   j->xd + (size_t)m * nb, j->xm + (size_t)m * nb, wq,
                                   (const uint8_t *)wd, sct, o, bias, ncols, b0, b1);
                    else
                        tile_any(q4, mr, ng, j, j->xq + (size_t)m * (size_t)j->K,
                                 j->xd + (size_t)m * nb, j->xs + (size_t)m * nb, wq, wd, o, bias,
                                 ncols, b0, b1);
                }
            }
        }
    }
}

void ll_qmm_quant_vnni512(const struct ll_qmm_job *j, int m0, int m1)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int m = m0; m < m1; m++)
        for (int b = 0; b < j->nb; b++) {
            const float *x = j->x + (size_t)m * (size_t)j->K + (size_t)b * LL_QBLOCK;
            __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
            __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
            float d, id;
            ll_qmm_act_scale(_mm512_reduce_max_ps(a), &d, &id);
            __m512 vid = _mm512_set1_ps(id);
            __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)); /* round half to even */
            __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
            int8_t *q = j->xq + (size_t)m * (size_t)j->K + (size_t)b * LL_QBLOCK;
            _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(q1));
            j->xd[(size_t)m * (size_t)j->nb + (size_t)b] = d;
            j->xs[(size_t)m * (size_t)j->nb + (size_t)b] =
                _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        }
}
