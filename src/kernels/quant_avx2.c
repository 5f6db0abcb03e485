/*
 * quant_avx2.c: the AVX2 variant of the q8_0 and q4_0 weight quantizers (quant.h; AVX2, FMA and
 * F16C), for CPUs without AVX-512: quant_avx512.c's computation on 8 lanes, writing exactly the
 * bytes of the reference (quant.c) block for block: the same maximum (and, for q4_0, the first
 * element of largest magnitude with its sign), the same f16 scale, x / d with IEEE division in
 * f32, rounding half away from zero from the truncation and the exact remainder, then the clamp.
 * q4_k keeps the reference (its fit is the AVX-512 variant's only). Any thread; the caller's
 * buffers only.
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
                           enum ll_dtype stype, int K, int n0, int n1, int *bad_row,
                           int *bad_block)
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
