/*
 * attention_avx512.c: AVX-512 inner loops of attention (see ops_simd.h); head_dim % 16 == 0.
 *
 * A group of G query heads shares each K/V row: the row is loaded and widened once and used by
 * every head of the group. The value for a (head, key), and the running sum for a (head, output
 * element), go through the same instruction sequence whatever G is: one accumulator per head
 * over head_dim in order for scores, keys in position order for accum. G is a compile-time
 * constant in each specialisation (1..8, attention_simd.h), so the per-head accumulators live in
 * registers.
 * Called by attention.c on pool threads after the CPU feature check.
 */
#include <stdint.h>

#include "attention_simd.h"
#include "exp_avx512.h"
#include "ops_simd.h"

#define INLINE static inline __attribute__((always_inline))

/* 16 elements of a K/V row as f32 (bf16 widening is exact). */
INLINE __m512 load16(const void *p, enum ll_dtype t, size_t i)
{
    if (t == LL_F32)
        return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE void scores_g(float *s, size_t s_stride, const float *q, const int G, const void *k,
                     const enum ll_dtype t, size_t stride, int n, int hd, float scale)
{
    for (int j = 0; j < n; j++) {
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++)
            acc[h] = _mm512_setzero_ps();
        size_t r = (size_t)j * stride;
        for (int d = 0; d < hd; d += 16) {
            __m512 kv = load16(k, t, r + d);
            #pragma GCC unroll 8
            for (int h = 0; h < G; h++)
                acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * hd + d), kv, acc[h]);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++)
            s[h * s_stride + j] = _mm512_reduce_add_ps(acc[h]) * scale;
    }
}

/* Output elements d .. d + 16·CW of the G heads (acc rows of hd floats), keys in order. */
INLINE void accum_g(float *acc, const float *p, size_t p_stride, const int G, const int CW,
                    const void *v, const enum ll_dtype t, size_t stride, int n, int hd, int d)
{
    __m512 o[8][8];
    #pragma GCC unroll 8
    for (int h = 0; h < G; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < CW; c++)
            o[h][c] = _mm512_loadu_ps(acc + (size_t)h * hd + d + 16 * c);
    for (int j = 0; j < n; j++) {
        __m512 vv[8];
        size_t r = (size_t)j * stride + d;
        #pragma GCC unroll 8
        for (int c = 0; c < CW; c++)
            vv[c] = load16(v, t, r + 16 * c);
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) {
            __m512 ph = _mm512_set1_ps(p[h * p_stride + j]);
            #pragma GCC unroll 8
            for (int c = 0; c < CW; c++)
                o[h][c] = _mm512_fmadd_ps(ph, vv[c], o[h][c]);
        }
    }
    #pragma GCC unroll 8
    for (int h = 0; h < G; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < CW; c++)
            _mm512_storeu_ps(acc + (size_t)h * hd + d + 16 * c, o[h][c]);
}

/* All of head_dim: as wide as the registers allow (≈ 24 accumulators), then 16 at a time. */
INLINE void accum_all(float *acc, const float *p, size_t p_stride, const int G, const void *v,
                      const enum ll_dtype t, size_t stride, int n, int hd)
{
    const int CW = G <= 3 ? 8 : G <= 6 ? 4 : 2;
    int d = 0;
    for (; d + 16 * CW <= hd; d += 16 * CW)
        accum_g(acc, p, p_stride, G, CW, v, t, stride, n, hd, d);
    for (; d < hd; d += 16)
        accum_g(acc, p, p_stride, G, 1, v, t, stride, n, hd, d);
}

LL_ATTN_SIMD_DEFINE(avx512)

float ll_attn_max_avx512(const float *s, int n)
{
    __m512 mx = _mm512_set1_ps(s[0]);
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = ll_mask16(n - j);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, s + j));
    }
    return _mm512_reduce_max_ps(mx);
}

float ll_attn_expsum_avx512(float *s, int n, float max)
{
    __m512 mx = _mm512_set1_ps(max), sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = ll_mask16(n - j);
        __m512 e = ll_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mx));
        e = _mm512_maskz_mov_ps(m, e);
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(s + j, m, e);
    }
    return _mm512_reduce_add_ps(sum);
}
