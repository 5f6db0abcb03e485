/*
 * quant_avx2.c: the AVX2 variant of the weight quantizers (quant.h; AVX2, FMA and F16C), for
 * CPUs without AVX-512: quant_avx512.c's computation on 8 lanes, writing exactly the
 * bytes of the reference (quant.c) block for block: the same maximum (and, for q4_0, the first
 * element of largest magnitude with its sign), the same f16 scale, x / d with IEEE division in
 * f32, rounding half away from zero from the truncation and the exact remainder, then the clamp.
 * For q4_k the block fit and the encoding of 8 rows' blocks at once (ll_qk_fit_avx2,
 * ll_qk_encode_avx2), the scales staying in quant.c. Any thread; the caller's buffers only.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant_layout.h"

#define INLINE static inline __attribute__((always_inline))

/* 8 elements of src from index i, as f32. */
INLINE __m256 load8(const void *src, enum ll_dtype st, size_t i)
{
    switch (st) {
    case LL_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case LL_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i)));
    case LL_F32:
        break;
    }
    return _mm256_loadu_ps((const float *)src + i);
}

/* v rounded half away from zero, then clamped to [lo, hi], as int32. */
INLINE __m256i round_clamp8(__m256 v, float lo, float hi)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(v, t); /* exact */
    __m256 up = _mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 dn = _mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ);
    t = _mm256_add_ps(t, _mm256_and_ps(up, one));
    t = _mm256_sub_ps(t, _mm256_and_ps(dn, one));
    t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
    return _mm256_cvttps_epi32(t);
}

/* One block of 32 (x[0..4), 8 elements each): false if a value is not finite or the scale
 * overflows f16 (nothing written). */
INLINE bool block(uint8_t *qs, uint16_t *d, enum ll_qtype t, int nb, int n, int b,
                  const __m256 x[4])
{
    const __m256 inf = _mm256_set1_ps(INFINITY), sign = _mm256_set1_ps(-0.0f);
    __m256 a[4];
    int finite = 0xffffffff;
    for (int v = 0; v < 4; v++) {
        a[v] = _mm256_andnot_ps(sign, x[v]);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(a[v], inf, _CMP_LT_OQ)) == 0xff ? ~0 : 0;
    }
    if (!finite)
        return false;
    __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h))), q;
    float xs[32];
    for (int v = 0; v < 4; v++)
        _mm256_storeu_ps(xs + 8 * v, x[v]);
    if (t == LL_Q8_0) {
        q = amax / 127.0f;
    } else {
        __m256 am = _mm256_set1_ps(amax);
        uint32_t hit = 0;
        for (int v = 0; v < 4; v++)
            hit |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(a[v], am, _CMP_EQ_OQ)) << (8 * v);
        q = (amax > 0.0f ? xs[__builtin_ctz(hit)] : 0.0f) / -8.0f;
    }
    uint16_t dh = ll_f32_to_f16(q);
    float ds = ll_f16_to_f32(dh);
    if (!isfinite(ds))
        return false;
    d[ll_q_d_index(nb, n, b)] = dh;
    const size_t base = ll_q_offset(t, nb, n, b, 0); /* step 0 of this row; steps 64 apart */
    int32_t qv[32] = {0};
    if (ds != 0.0f) {
        const __m256 dv = _mm256_set1_ps(ds);
        const float lo = t == LL_Q8_0 ? -127.0f : -8.0f, hi = t == LL_Q8_0 ? 127.0f : 7.0f;
        for (int v = 0; v < 4; v++)
            _mm256_storeu_si256((__m256i *)(qv + 8 * v),
                                round_clamp8(_mm256_div_ps(x[v], dv), lo, hi));
    }
    uint8_t bytes[32];
    if (t == LL_Q8_0) {
        for (int i = 0; i < 32; i++)
            bytes[i] = (uint8_t)(int8_t)qv[i];
        for (int s = 0; s < 8; s++)
            memcpy(qs + base + (size_t)s * 64, bytes + 4 * s, 4);
    } else {
        for (int i = 0; i < 16; i++)
            bytes[i] = (uint8_t)((qv[i] + 8) | (qv[i + 16] + 8) << 4);
        for (int s = 0; s < 4; s++)
            memcpy(qs + base + (size_t)s * 64, bytes + 4 * s, 4);
    }
    return true;
}

bool ll_quantize_rows_avx2(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                           enum ll_dtype stype, int K, int n0, int n1, int *bad_row, int *bad_block)
{
    const int nb = K / LL_QBLOCK;
    for (int n = n0; n < n1; n++)
        for (int b = 0; b < nb; b++) {
            size_t i = (size_t)n * (size_t)K + (size_t)b * LL_QBLOCK;
            __m256 x[4];
            for (int v = 0; v < 4; v++)
                x[v] = load8(src, stype, i + 8 * (size_t)v);
            if (!block(qs, d, t, nb, n, b, x)) {
                *bad_row = n;
                *bad_block = b;
                return false;
            }
        }
    return true;
}

/* ---- q4_k: the block fit and the encoding of 8 rows at once ---- */

/* Lanes 4h .. 4h+3 of v as f64. */
INLINE __m256d half_pd(__m256 v, int h)
{
    return _mm256_cvtps_pd(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v));
}

INLINE __m256d half_epi32_pd(__m256i v, int h)
{
    return _mm256_cvtepi32_pd(h ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v));
}

/* qk_fit of quant.c with lane r doing block r: quant_avx512.c's ll_qk_fit_avx512 on 8 lanes,
 * each lane running the reference's operations in its order and precision. */
void ll_qk_fit_avx2(const float *xt, float *a_out, float *b_out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_loadu_ps(xt);
    __m256d sx[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()}, sxx[2] = {sx[0], sx[0]};
    for (int i = 0; i < LL_QBLOCK; i++) {
        __m256 v = _mm256_loadu_ps(xt + 8 * i);
        lo = _mm256_min_ps(v, lo); /* v < lo ? v : lo */
        hi = _mm256_max_ps(v, hi); /* v > hi ? v : hi */
        for (int h = 0; h < 2; h++) {
            __m256d vd = half_pd(v, h);
            sx[h] = _mm256_add_pd(sx[h], vd);
            sxx[h] = _mm256_add_pd(sxx[h], _mm256_mul_pd(vd, vd));
        }
    }
    const __m256 range = _mm256_sub_ps(hi, lo);
    __m256 a_best = _mm256_div_ps(range, _mm256_set1_ps(15.0f)), b_best = _mm256_xor_ps(lo, sign);
    __m256 active = _mm256_and_ps(_mm256_cmp_ps(hi, lo, _CMP_GT_OQ),
                                  _mm256_cmp_ps(_mm256_andnot_ps(sign, range), inf, _CMP_LT_OQ));
    const __m256d n = _mm256_set1_pd(LL_QBLOCK), two = _mm256_set1_pd(2.0);
    const __m256d zero = _mm256_setzero_pd();
    __m256d best[2] = {_mm256_set1_pd(INFINITY), _mm256_set1_pd(INFINITY)};
    for (int t = 0; t < LL_QK_CANDIDATES; t++) {
        __m256 s = _mm256_div_ps(_mm256_set1_ps(ll_qk_candidate(t)), range);
        active = _mm256_and_ps(active, _mm256_cmp_ps(_mm256_andnot_ps(sign, s), inf, _CMP_LT_OQ));
        if (!_mm256_movemask_ps(active))
            break;
        __m256i sq = _mm256_setzero_si256(), sqq = sq;
        __m256 sqx = _mm256_setzero_ps();
        for (int i = 0; i < LL_QBLOCK; i++) {
            __m256 v = _mm256_loadu_ps(xt + 8 * i);
            __m256 f = _mm256_add_ps(_mm256_mul_ps(s, _mm256_sub_ps(v, lo)), _mm256_set1_ps(0.5f));
            __m256i q = _mm256_min_epi32(_mm256_cvttps_epi32(f), _mm256_set1_epi32(15));
            sq = _mm256_add_epi32(sq, q);
            sqq = _mm256_add_epi32(sqq, _mm256_mullo_epi32(q, q));
            sqx = _mm256_add_ps(sqx, _mm256_mul_ps(_mm256_cvtepi32_ps(q), v));
        }
        __m128 an[2], bn[2], upd[2];
        for (int h = 0; h < 2; h++) {
            const __m256d dq = half_epi32_pd(sq, h), dqq = half_epi32_pd(sqq, h);
            const __m256d dqx = half_pd(sqx, h);
            __m256d det = _mm256_sub_pd(_mm256_mul_pd(n, dqq), _mm256_mul_pd(dq, dq));
            __m256d a =
                _mm256_div_pd(_mm256_sub_pd(_mm256_mul_pd(n, dqx), _mm256_mul_pd(dq, sx[h])), det);
            __m256d c = _mm256_div_pd(
                _mm256_sub_pd(_mm256_mul_pd(dqq, sx[h]), _mm256_mul_pd(dq, dqx)), det);
            __m256d cpos = _mm256_cmp_pd(c, zero, _CMP_GT_OQ);
            c = _mm256_blendv_pd(c, zero, cpos);
            a = _mm256_blendv_pd(a, _mm256_div_pd(dqx, dqq), cpos);
            /* a·a·sqq + 2·a·c·sq + n·c·c − 2·a·sqx − 2·c·sx + sxx, left to right */
            __m256d ta = _mm256_mul_pd(two, a), tc = _mm256_mul_pd(two, c);
            __m256d e = _mm256_mul_pd(_mm256_mul_pd(a, a), dqq);
            e = _mm256_add_pd(e, _mm256_mul_pd(_mm256_mul_pd(ta, c), dq));
            e = _mm256_add_pd(e, _mm256_mul_pd(_mm256_mul_pd(n, c), c));
            e = _mm256_sub_pd(e, _mm256_mul_pd(ta, dqx));
            e = _mm256_sub_pd(e, _mm256_mul_pd(tc, sx[h]));
            e = _mm256_add_pd(e, sxx[h]);
            __m128 act = h ? _mm256_extractf128_ps(active, 1) : _mm256_castps256_ps128(active);
            __m256d ok =
                _mm256_and_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(act))),
                              _mm256_cmp_pd(det, zero, _CMP_GT_OQ));
            ok = _mm256_and_pd(ok, _mm256_cmp_pd(a, zero, _CMP_GT_OQ));
            ok = _mm256_and_pd(ok, _mm256_cmp_pd(e, best[h], _CMP_LT_OQ));
            best[h] = _mm256_blendv_pd(best[h], e, ok);
            an[h] = _mm256_cvtpd_ps(a);
            bn[h] = _mm256_cvtpd_ps(_mm256_xor_pd(c, _mm256_set1_pd(-0.0)));
            upd[h] = _mm256_cvtpd_ps(ok); /* all-ones f64 lanes -> a NaN, sign bit set */
        }
        const __m256 u = _mm256_set_m128(upd[1], upd[0]);
        a_best = _mm256_blendv_ps(a_best, _mm256_set_m128(an[1], an[0]), u);
        b_best = _mm256_blendv_ps(b_best, _mm256_set_m128(bn[1], bn[0]), u);
    }
    _mm256_storeu_ps(a_out, a_best);
    _mm256_storeu_ps(b_out, b_best);
}

/* qk_encode's element loop for 8 rows (half a group): lane r's 32-bit word of each 64-byte step
 * s holds elements 4s .. 4s+3 (low nibbles) and 16 + 4s .. (high). */
void ll_qk_encode_avx2(uint8_t *qs, int nb, int n0, int blk, const float *xt, const float *ds,
                       const float *dm)
{
    const __m256 vds = _mm256_loadu_ps(ds), vdm = _mm256_loadu_ps(dm);
    const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(vds, _mm256_setzero_ps(), _CMP_GT_OQ));
    uint8_t *base = qs + ll_q_offset(LL_Q4_K, nb, n0, blk, 0);
    for (int s = 0; s < 4; s++) {
        __m256i word = _mm256_setzero_si256();
        for (int e = 0; e < 4; e++) {
            const int i = 4 * s + e;
            __m256i lo = round_clamp8(
                _mm256_div_ps(_mm256_add_ps(_mm256_loadu_ps(xt + 8 * i), vdm), vds), 0, 15);
            __m256i hi = round_clamp8(
                _mm256_div_ps(_mm256_add_ps(_mm256_loadu_ps(xt + 8 * (i + 16)), vdm), vds), 0, 15);
            __m256i byte = _mm256_and_si256(pos, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)));
            word = _mm256_or_si256(word, _mm256_slli_epi32(byte, 8 * e));
        }
        _mm256_storeu_si256((__m256i *)(base + 64 * s), word);
    }
}
