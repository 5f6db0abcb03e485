/*
 * exp_avx512.h: a vector e^x shared by the AVX-512 kernels (include only from *_avx512.c).
 *
 * e^x = 2^n · e^r with n = round(x·log2 e), r = x - n·ln2 (two-part ln2, fused), e^r by its
 * degree-7 Taylor polynomial (|r| <= ln2/2: truncation error < 1e-8 relative, below f32 ulp).
 * Input clamped to [-104, 88.7]: results 0 below, finite (≈ 3.3e38) above. Every lane computes
 * the same function, so a value's result does not depend on the lane it sits in.
 */
#ifndef LLAISYS_EXP_AVX512_H
#define LLAISYS_EXP_AVX512_H

#include <immintrin.h>

static inline __m512 ll_exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Mask of the first n (< 16) lanes, or all lanes for n >= 16. */
static inline __mmask16 ll_mask16(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

#endif
