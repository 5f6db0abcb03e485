/*
 * quant_avx512.c: the AVX-512 variant of the weight quantizers (quant.h; AVX-512 F, BW, VL, DQ
 * and F16C), which quantize.c calls for ll_quantize_rows when the CPU and LLAISYS_KERNEL allow;
 * for q4_k the block fit and the encoding of 16 rows' blocks at once (ll_qk_fit_avx512,
 * ll_qk_encode_avx512: the reference's operations lane by lane), the scales staying in quant.c.
 * It writes exactly the bytes of the reference (quant.c), block for block: the same maximum
 * (and, for q4_0, the first element of largest magnitude with its sign), the same f16 scale
 * (ll_f32_to_f16 on the same quotient), x / d with IEEE division in f32, rounding half away
 * from zero from the truncation and the exact remainder, then the clamp (clamping after rounding
 * gives the reference's clamp-first result: a value past a bound rounds to it or beyond).
 * Any thread; the caller's buffers only.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant_layout.h"

#define INLINE static inline __attribute__((always_inline))

/* 16 elements of src from index i, as f32. */
INLINE __m512 load16(const void *src, enum ll_dtype st, size_t i)
{
    switch (st) {
    case LL_BF16: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case LL_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i)));
    case LL_F32:
        break;
    }
    return _mm512_loadu_ps((const float *)src + i);
}

/* v rounded half away from zero, then clamped to [lo, hi], as int32. */
INLINE __m512i round_clamp16(__m512 v, float lo, float hi)
{
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(v, t); /* exact */
    __mmask16 up = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __mmask16 dn = _mm512_cmp_ps_mask(f, _mm512_set1_ps(-0.5f), _CMP_LE_OQ);
    t = _mm512_mask_add_ps(t, up, t, _mm512_set1_ps(1.0f));
    t = _mm512_mask_sub_ps(t, dn, t, _mm512_set1_ps(1.0f));
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    return _mm512_cvttps_epi32(t);
}

/* One block: false if a value is not finite or the scale overflows f16 (nothing written). */
INLINE bool block(uint8_t *qs, uint16_t *d, enum ll_qtype t, int nb, int n, int b, __m512 x0,
                  __m512 x1)
{
    const __m512 inf = _mm512_set1_ps(INFINITY);
    __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    if ((__mmask16)(_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) &
                    _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ)) != 0xffff)
        return false;
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)), q;
    if (t == LL_Q8_0) {
        q = amax / 127.0f;
    } else {
        __m512 am = _mm512_set1_ps(amax);
        uint32_t hit = (uint32_t)_mm512_cmp_ps_mask(a0, am, _CMP_EQ_OQ) |
                       (uint32_t)_mm512_cmp_ps_mask(a1, am, _CMP_EQ_OQ) << 16;
        float x[32];
        _mm512_storeu_ps(x, x0);
        _mm512_storeu_ps(x + 16, x1);
        q = (amax > 0.0f ? x[__builtin_ctz(hit)] : 0.0f) / -8.0f;
    }
    uint16_t dh = ll_f32_to_f16(q);
    float ds = ll_f16_to_f32(dh);
    if (!isfinite(ds))
        return false;
    d[ll_q_d_index(nb, n, b)] = dh;
    const size_t base = ll_q_offset(t, nb, n, b, 0); /* step 0 of this row; steps 64 apart */
    uint8_t bytes[32];
    if (t == LL_Q8_0) {
        __m512i q0 = _mm512_setzero_si512(), q1 = q0;
        if (ds != 0.0f) {
            __m512 dv = _mm512_set1_ps(ds);
            q0 = round_clamp16(_mm512_div_ps(x0, dv), -127.0f, 127.0f);
            q1 = round_clamp16(_mm512_div_ps(x1, dv), -127.0f, 127.0f);
        }
        _mm_storeu_si128((__m128i *)bytes, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(bytes + 16), _mm512_cvtepi32_epi8(q1));
        for (int s = 0; s < 8; s++)
            memcpy(qs + base + (size_t)s * 64, bytes + 4 * s, 4);
    } else {
        __m512i q0 = _mm512_setzero_si512(), q1 = q0;
        if (ds != 0.0f) {
            __m512 dv = _mm512_set1_ps(ds);
            q0 = round_clamp16(_mm512_div_ps(x0, dv), -8.0f, 7.0f);
            q1 = round_clamp16(_mm512_div_ps(x1, dv), -8.0f, 7.0f);
        }
        const __m512i eight = _mm512_set1_epi32(8);
        __m512i v = _mm512_or_si512(_mm512_add_epi32(q0, eight),
                                    _mm512_slli_epi32(_mm512_add_epi32(q1, eight), 4));
        _mm_storeu_si128((__m128i *)bytes, _mm512_cvtepi32_epi8(v));
        for (int s = 0; s < 4; s++)
            memcpy(qs + base + (size_t)s * 64, bytes + 4 * s, 4);
    }
    return true;
}

bool ll_quantize_rows_avx512(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                             enum ll_dtype stype, int K, int n0, int n1, int *bad_row,
                             int *bad_block)
{
    const int nb = K / LL_QBLOCK;
    for (int n = n0; n < n1; n++)
        for (int b = 0; b < nb; b++) {
            size_t i = (size_t)n * (size_t)K + (size_t)b * LL_QBLOCK;
            if (!block(qs, d, t, nb, n, b, load16(src, stype, i), load16(src, stype, i + 16))) {
                *bad_row = n;
                *bad_block = b;
                return false;
            }
        }
    return true;
}

/* ---- q4_k: the block fit of 16 rows at once ---- */

/* Lanes 8h .. 8h+7 of v as f64. */
INLINE __m512d half_pd(__m512 v, int h)
{
    return _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
}

INLINE __m512d half_epi32_pd(__m512i v, int h)
{
    return _mm512_cvtepi32_pd(h ? _mm512_extracti32x8_epi32(v, 1) : _mm512_castsi512_si256(v));
}

/* qk_fit of quant.c with lane r doing block r: each lane runs the reference's operations in
 * its order and precision (min/max operand order included), so a and b are its bits. */
void ll_qk_fit_avx512(const float *xt, float *a_out, float *b_out)
{
    const __m512 sign = _mm512_set1_ps(-0.0f), inf = _mm512_set1_ps(INFINITY);
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_loadu_ps(xt);
    __m512d sx[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()}, sxx[2] = {sx[0], sx[0]};
    for (int i = 0; i < LL_QBLOCK; i++) {
        __m512 v = _mm512_loadu_ps(xt + 16 * i);
        lo = _mm512_min_ps(v, lo); /* v < lo ? v : lo */
        hi = _mm512_max_ps(v, hi); /* v > hi ? v : hi */
        for (int h = 0; h < 2; h++) {
            __m512d vd = half_pd(v, h);
            sx[h] = _mm512_add_pd(sx[h], vd);
            sxx[h] = _mm512_add_pd(sxx[h], _mm512_mul_pd(vd, vd));
        }
    }
    const __m512 range = _mm512_sub_ps(hi, lo);
    __m512 a_best = _mm512_div_ps(range, _mm512_set1_ps(15.0f)), b_best = _mm512_xor_ps(lo, sign);
    __mmask16 active = _mm512_cmp_ps_mask(hi, lo, _CMP_GT_OQ) &
                       _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, range), inf, _CMP_LT_OQ);
    const __m512d n = _mm512_set1_pd(LL_QBLOCK), two = _mm512_set1_pd(2.0);
    __m512d best[2] = {_mm512_set1_pd(INFINITY), _mm512_set1_pd(INFINITY)};
    for (int t = 0; t < LL_QK_CANDIDATES; t++) {
        __m512 s = _mm512_div_ps(_mm512_set1_ps(ll_qk_candidate(t)), range);
        active &= _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, s), inf, _CMP_LT_OQ);
        if (!active)
            break;
        __m512i sq = _mm512_setzero_si512(), sqq = sq;
        __m512 sqx = _mm512_setzero_ps();
        for (int i = 0; i < LL_QBLOCK; i++) {
            __m512 v = _mm512_loadu_ps(xt + 16 * i);
            __m512 f = _mm512_add_ps(_mm512_mul_ps(s, _mm512_sub_ps(v, lo)), _mm512_set1_ps(0.5f));
            __m512i q = _mm512_min_epi32(_mm512_cvttps_epi32(f), _mm512_set1_epi32(15));
            sq = _mm512_add_epi32(sq, q);
            sqq = _mm512_add_epi32(sqq, _mm512_mullo_epi32(q, q));
            sqx = _mm512_add_ps(sqx, _mm512_mul_ps(_mm512_cvtepi32_ps(q), v));
        }
        __m256 an[2], bn[2];
        __mmask16 upd = 0;
        for (int h = 0; h < 2; h++) {
            const __m512d dq = half_epi32_pd(sq, h), dqq = half_epi32_pd(sqq, h);
            const __m512d dqx = half_pd(sqx, h);
            __m512d det = _mm512_sub_pd(_mm512_mul_pd(n, dqq), _mm512_mul_pd(dq, dq));
            __m512d a =
                _mm512_div_pd(_mm512_sub_pd(_mm512_mul_pd(n, dqx), _mm512_mul_pd(dq, sx[h])), det);
            __m512d c = _mm512_div_pd(
                _mm512_sub_pd(_mm512_mul_pd(dqq, sx[h]), _mm512_mul_pd(dq, dqx)), det);
            __mmask8 cpos = _mm512_cmp_pd_mask(c, _mm512_setzero_pd(), _CMP_GT_OQ);
            c = _mm512_mask_mov_pd(c, cpos, _mm512_setzero_pd());
            a = _mm512_mask_mov_pd(a, cpos, _mm512_div_pd(dqx, dqq));
            /* a·a·sqq + 2·a·c·sq + n·c·c − 2·a·sqx − 2·c·sx + sxx, left to right */
            __m512d ta = _mm512_mul_pd(two, a), tc = _mm512_mul_pd(two, c);
            __m512d e = _mm512_mul_pd(_mm512_mul_pd(a, a), dqq);
            e = _mm512_add_pd(e, _mm512_mul_pd(_mm512_mul_pd(ta, c), dq));
            e = _mm512_add_pd(e, _mm512_mul_pd(_mm512_mul_pd(n, c), c));
            e = _mm512_sub_pd(e, _mm512_mul_pd(ta, dqx));
            e = _mm512_sub_pd(e, _mm512_mul_pd(tc, sx[h]));
            e = _mm512_add_pd(e, sxx[h]);
            __mmask8 ok = (__mmask8)(active >> (8 * h)) &
                          _mm512_cmp_pd_mask(det, _mm512_setzero_pd(), _CMP_GT_OQ) &
                          _mm512_cmp_pd_mask(a, _mm512_setzero_pd(), _CMP_GT_OQ) &
                          _mm512_cmp_pd_mask(e, best[h], _CMP_LT_OQ);
            best[h] = _mm512_mask_mov_pd(best[h], ok, e);
            an[h] = _mm512_cvtpd_ps(a);
            bn[h] = _mm512_cvtpd_ps(_mm512_xor_pd(c, _mm512_set1_pd(-0.0)));
            upd |= (__mmask16)((unsigned)ok << (8 * h));
        }
        a_best = _mm512_mask_mov_ps(a_best, upd,
                                    _mm512_insertf32x8(_mm512_castps256_ps512(an[0]), an[1], 1));
        b_best = _mm512_mask_mov_ps(b_best, upd,
                                    _mm512_insertf32x8(_mm512_castps256_ps512(bn[0]), bn[1], 1));
    }
    _mm512_storeu_ps(a_out, a_best);
    _mm512_storeu_ps(b_out, b_best);
}

/* qk_encode's element loop for 16 rows: the 4 steps of 64 bytes of block blk of the group, lane
 * r's 32-bit word of step s holding elements 4s .. 4s+3 (low nibbles) and 16 + 4s .. (high). */
void ll_qk_encode_avx512(uint8_t *qs, int nb, int n0, int blk, const float *xt, const float *ds,
                         const float *dm)
{
    const __m512 vds = _mm512_loadu_ps(ds), vdm = _mm512_loadu_ps(dm);
    const __mmask16 pos = _mm512_cmp_ps_mask(vds, _mm512_setzero_ps(), _CMP_GT_OQ);
    uint8_t *base = qs + ll_q_offset(LL_Q4_K, nb, n0, blk, 0);
    for (int s = 0; s < 4; s++) {
        __m512i word = _mm512_setzero_si512();
        for (int e = 0; e < 4; e++) {
            const int i = 4 * s + e;
            __m512i lo = round_clamp16(
                _mm512_div_ps(_mm512_add_ps(_mm512_loadu_ps(xt + 16 * i), vdm), vds), 0, 15);
            __m512i hi = round_clamp16(
                _mm512_div_ps(_mm512_add_ps(_mm512_loadu_ps(xt + 16 * (i + 16)), vdm), vds), 0, 15);
            __m512i byte = _mm512_maskz_or_epi32(pos, lo, _mm512_slli_epi32(hi, 4));
            word = _mm512_or_si512(word, _mm512_slli_epi32(byte, 8 * e));
        }
        _mm512_storeu_si512(base + 64 * s, word);
    }
}
