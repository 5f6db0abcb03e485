/*
 * attention_simd.h: how the SIMD attention loops are specialised, one place for every width
 * (include only from attention_avx512.c / attention_avx2.c, after their scores_g and accum_all).
 * A group of G query heads sharing a KV head runs as one call with G a compile-time constant
 * (1..8, so the per-head accumulators live in registers); a larger group runs head by head with
 * G = 1. Each specialisation exists for f32 and bf16 K/V. A head's values go through the same
 * instructions in every case, so they do not depend on G (ops_simd.h's contract).
 * LL_ATTN_SIMD_DEFINE(SUFFIX) defines ll_attn_scores_SUFFIX and ll_attn_accum_SUFFIX.
 */
#ifndef LLAISYS_ATTENTION_SIMD_H
#define LLAISYS_ATTENTION_SIMD_H

#define LL_ATTN_BY_TYPE(call_f32, call_bf16)                                                  \
    do {                                                                                      \
        if (t == LL_F32)                                                                      \
            call_f32;                                                                         \
        else                                                                                  \
            call_bf16;                                                                        \
    } while (0)

#define LL_ATTN_SC(g)                                                                         \
    case g:                                                                                   \
        LL_ATTN_BY_TYPE(scores_g(s, s_stride, q, g, k, LL_F32, stride, n, hd, scale),         \
                        scores_g(s, s_stride, q, g, k, LL_BF16, stride, n, hd, scale));       \
        return;

#define LL_ATTN_AC(g)                                                                         \
    case g:                                                                                   \
        LL_ATTN_BY_TYPE(accum_all(acc, p, p_stride, g, v, LL_F32, stride, n, hd),             \
                        accum_all(acc, p, p_stride, g, v, LL_BF16, stride, n, hd));           \
        return;

#define LL_ATTN_SIMD_DEFINE(SUFFIX)                                                           \
    void ll_attn_scores_##SUFFIX(float *s, size_t s_stride, const float *q, int G,            \
                                 const void *k, enum ll_dtype t, size_t stride, int n, int hd,\
                                 float scale)                                                 \
    {                                                                                         \
        switch (G) {                                                                          \
            LL_ATTN_SC(1) LL_ATTN_SC(2) LL_ATTN_SC(3) LL_ATTN_SC(4)                           \
            LL_ATTN_SC(5) LL_ATTN_SC(6) LL_ATTN_SC(7) LL_ATTN_SC(8)                           \
        default:                                                                              \
            for (int h = 0; h < G; h++)                                                       \
                LL_ATTN_BY_TYPE(scores_g(s + h * s_stride, s_stride, q + (size_t)h * hd, 1,   \
                                         k, LL_F32, stride, n, hd, scale),                    \
                                scores_g(s + h * s_stride, s_stride, q + (size_t)h * hd, 1,   \
                                         k, LL_BF16, stride, n, hd, scale));                  \
        }                                                                                     \
    }                                                                                         \
    void ll_attn_accum_##SUFFIX(float *acc, const float *p, size_t p_stride, int G,           \
                                const void *v, enum ll_dtype t, size_t stride, int n, int hd) \
    {                                                                                         \
        switch (G) {                                                                          \
            LL_ATTN_AC(1) LL_ATTN_AC(2) LL_ATTN_AC(3) LL_ATTN_AC(4)                           \
            LL_ATTN_AC(5) LL_ATTN_AC(6) LL_ATTN_AC(7) LL_ATTN_AC(8)                           \
        default:                                                                              \
            for (int h = 0; h < G; h++)                                                       \
                LL_ATTN_BY_TYPE(accum_all(acc + (size_t)h * hd, p + h * p_stride, p_stride,   \
                                          1, v, LL_F32, stride, n, hd),                       \
                                accum_all(acc + (size_t)h * hd, p + h * p_stride, p_stride,   \
                                          1, v, LL_BF16, stride, n, hd));                     \
        }                                                                                     \
    }

#endif
