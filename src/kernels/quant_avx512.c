/*
 * quant_avx512.c: the AVX-512 variant of the weight quantizers (quant.h; AVX-512 F, BW, VL, DQ
 * and F16C), which quantize.c calls for ll_quantize_rows when the CPU and LLAISYS_KERNEL allow.
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
