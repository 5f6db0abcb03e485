/*
 * ops_simd.h: private prototypes of the SIMD variants behind ops.h and attention.h
 * (defined in *_avx512.c and *_avx2.c, compiled with their flags, called only after a CPU
 * feature check).
 */
#ifndef LLAISYS_OPS_SIMD_H
#define LLAISYS_OPS_SIMD_H

#include <stddef.h>

#include "dtype.h"

/* The variant the ops and attention use: AVX-512 (F, BW, VL, DQ), else AVX2 (with FMA and F16C),
 * each only where LLAISYS_KERNEL (isa.h) does not cap below it, else scalar; decided once per
 * process (ops.c; ll_ops_set_variant switches it for tests and benchmarks). */
enum ll_simd { LL_SIMD_SCALAR, LL_SIMD_AVX2, LL_SIMD_AVX512 };
enum ll_simd ll_simd_level(void);

void ll_swiglu_avx2(float *out, const float *gate, const float *up, int n);
void ll_geglu_avx2(float *out, const float *gate, const float *up, int n);
void ll_rms_norm_avx2(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                      int dim, float eps);
void ll_softmax_avx2(float *x, int n);
void ll_exp_avx2(float *out, const float *x, int n);

void ll_swiglu_avx512(float *out, const float *gate, const float *up, int n);
void ll_geglu_avx512(float *out, const float *gate, const float *up, int n);
void ll_rms_norm_avx512(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                        int dim, float eps);
void ll_softmax_avx512(float *x, int n);
void ll_exp_avx512(float *out, const float *x, int n);

/* Attention inner loops (attention_avx512.c); head_dim must be a multiple of 16. They work on a
 * group of G query heads sharing one KV head (q rows of G·hd consecutive floats), so each K/V row
 * is loaded and widened once for the whole group.
 * scores: s[h·s_stride + j] = scale · q_h·k_j for n keys at k + j·stride (elements of kv_type).
 * max:    the largest s[j], j < n (n >= 1).
 * expsum: s[j] = e^(s[j] - max), returns Σ s[j] (fixed order for a given n).
 * accum:  acc_h (hd) += Σ_j p[h·p_stride + j] · v_j, j = 0..n-1 in order.
 * A head's values do not depend on G or on the other heads of its group. */
void ll_attn_scores_avx512(float *s, size_t s_stride, const float *q, int G, const void *k,
                           enum ll_dtype kv_type, size_t stride, int n, int hd, float scale);
float ll_attn_max_avx512(const float *s, int n);
float ll_attn_expsum_avx512(float *s, int n, float max);
void ll_attn_accum_avx512(float *acc, const float *p, size_t p_stride, int G, const void *v,
                          enum ll_dtype kv_type, size_t stride, int n, int hd);
/* The same contract on 8 lanes (attention_avx2.c); head_dim must be a multiple of 8. */
void ll_attn_scores_avx2(float *s, size_t s_stride, const float *q, int G, const void *k,
                         enum ll_dtype kv_type, size_t stride, int n, int hd, float scale);
float ll_attn_max_avx2(const float *s, int n);
float ll_attn_expsum_avx2(float *s, int n, float max);
void ll_attn_accum_avx2(float *acc, const float *p, size_t p_stride, int G, const void *v,
                        enum ll_dtype kv_type, size_t stride, int n, int hd);

#endif
