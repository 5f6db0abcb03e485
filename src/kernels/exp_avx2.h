/*
 * exp_avx2.h: the vector e^x of exp_avx512.h on 8 lanes, for the AVX2 kernels (include only from
 * *_avx2.c). The same steps: x clamped to [-104, 88.7], n = round(x·log2 e), r = x - n·ln2 (two
 * parts, fused), e^r by the degree-7 Taylor polynomial; 2^n is applied as two exact powers of
 * two, 2^(n/2) then 2^(n - n/2), so only the last multiply rounds (where the result is
 * subnormal), as vscalefps does. Every lane computes the same function.
 */
#ifndef LLAISYS_EXP_AVX2_H
#define LLAISYS_EXP_AVX2_H

#include <immintrin.h>

/* 2^e for integer lanes e in [-126, 127], as floats. */
static inline __m256 ll_pow2i256(__m256i e)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

static inline __m256 ll_exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-104.0f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n); /* n in [-150, 128]: halves in [-75, 64] */
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, ll_pow2i256(n1)), ll_pow2i256(n2));
}

/* Mask of the first n (< 8) lanes (all lanes for n >= 8), for vmaskmovps. */
static inline __m256i ll_mask8(int n)
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 8 ? n : 8), iota);
}

/* Horizontal sum and max of 8 lanes, in a fixed order. */
static inline float ll_hsum256(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

static inline float ll_hmax256(__m256 v)
{
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
}

#endif
