/*
 * attention_avx2.c: AVX2 + FMA inner loops of attention (see ops_simd.h) for CPUs without
 * AVX-512; head_dim % 8 == 0. The structure of attention_avx512.c on 8 lanes: a group of G query
 * heads shares each K/V row (loaded and widened once), one accumulator per head over head_dim in
 * order for scores, keys in position order for accum, G a compile-time constant (1..8) in each
 * specialisation (attention_simd.h), so a (head, key) value does not depend on G. Tails of the score rows use
 * masked loads and stores. Called by attention.c on pool threads after the CPU feature check.
 */
#include <stdint.h>

#include "attention_simd.h"
#include "exp_avx2.h"
#include "ops_simd.h"

#define INLINE static inline __attribute__((always_inline))

/* 8 elements of a K/V row as f32 (bf16 widening is exact). */
INLINE __m256 load8(const void *p, enum ll_dtype t, size_t i)
{
    if (t == LL_F32)
        return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE void scores_g(float *s, size_t s_stride, const float *q, const int G, const void *k,
                     const enum ll_dtype t, size_t stride, int n, int hd, float scale)
{
    for (int j = 0; j < n; j++) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int h = 0; h < G; h++)
            acc[h] = _mm256_setzero_ps();
        size_t r = (size_t)j * stride;
        for (int d = 0; d < hd; d += 8) {
            __m256 kv = load8(k, t, r + d);
#pragma GCC unroll 8
            for (int h = 0; h < G; h++)
                acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * hd + d), kv, acc[h]);
        }
#pragma GCC unroll 8
        for (int h = 0; h < G; h++)
            s[h * s_stride + j] = ll_hsum256(acc[h]) * scale;
    }
}

/* Output elements d .. d + 8·CW of the G heads (acc rows of hd floats), keys in order. */
INLINE void accum_g(float *acc, const float *p, size_t p_stride, const int G, const int CW,
                    const void *v, const enum ll_dtype t, size_t stride, int n, int hd, int d)
{
    __m256 o[8][4];
#pragma GCC unroll 8
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int c = 0; c < CW; c++)
            o[h][c] = _mm256_loadu_ps(acc + (size_t)h * hd + d + 8 * c);
    for (int j = 0; j < n; j++) {
        __m256 vv[4];
        size_t r = (size_t)j * stride + d;
#pragma GCC unroll 4
        for (int c = 0; c < CW; c++)
            vv[c] = load8(v, t, r + 8 * c);
#pragma GCC unroll 8
        for (int h = 0; h < G; h++) {
            __m256 ph = _mm256_broadcast_ss(p + h * p_stride + j);
#pragma GCC unroll 4
            for (int c = 0; c < CW; c++)
                o[h][c] = _mm256_fmadd_ps(ph, vv[c], o[h][c]);
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int c = 0; c < CW; c++)
            _mm256_storeu_ps(acc + (size_t)h * hd + d + 8 * c, o[h][c]);
}

/* All of head_dim: as wide as the 16 registers allow, then 8 at a time. */
INLINE void accum_all(float *acc, const float *p, size_t p_stride, const int G, const void *v,
                      const enum ll_dtype t, size_t stride, int n, int hd)
{
    const int CW = G <= 2 ? 4 : G <= 6 ? 2 : 1;
    int d = 0;
    for (; d + 8 * CW <= hd; d += 8 * CW)
        accum_g(acc, p, p_stride, G, CW, v, t, stride, n, hd, d);
    for (; d < hd; d += 8)
        accum_g(acc, p, p_stride, G, 1, v, t, stride, n, hd, d);
}

LL_ATTN_SIMD_DEFINE(avx2)

float ll_attn_max_avx2(const float *s, int n)
{
    __m256 mx = _mm256_set1_ps(s[0]);
    for (int j = 0; j < n; j += 8) {
        __m256i m = ll_mask8(n - j);
        __m256 v = _mm256_maskload_ps(s + j, m);
        mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, v), _mm256_castsi256_ps(m));
    }
    return ll_hmax256(mx);
}

float ll_attn_expsum_avx2(float *s, int n, float max)
{
    __m256 mx = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) {
        __m256i m = ll_mask8(n - j);
        __m256 e = ll_exp256(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), mx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        sum = _mm256_add_ps(sum, e);
        _mm256_maskstore_ps(s + j, m, e);
    }
    return ll_hsum256(sum);
}
