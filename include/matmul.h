/*
 * matmul.h: out = x · Wᵀ + bias, the op that dominates the forward pass.
 *
 *   out  (M, N) f32, caller-owned
 *   x    (M, K) f32 activations, row-major
 *   w    (N, K) weights in `wtype` (bf16, f16 or f32), row-major (the Hugging Face Linear layout)
 *   bias (N) f32 or NULL
 *
 * Math modes:
 *   LL_MATH_EXACT: activations stay f32, weights widened to f32, f32 accumulation.
 *   LL_MATH_FAST:  activations rounded to bf16 (round-to-nearest-even); for bf16 weights the
 *                  products are bf16×bf16 accumulated in f32 (AVX-512 BF16 `vdpbf16ps` where the
 *                  CPU has it, an exactly equivalent scalar/AVX2 path elsewhere).
 *
 * Determinism contract: out[m][n] depends only on x[m], w[n], bias[n] and the math mode; it is
 * bit-identical whatever M is, where row m sits in the batch, and how many threads run. (Fixed
 * reduction order over K for every row; no split-K that depends on M.)
 *
 * Work is split over threads by the pool; pool may be NULL (single thread).
 */
#ifndef LLAISYS_MATMUL_H
#define LLAISYS_MATMUL_H

#include "dtype.h"
#include "pool.h"

enum ll_math {
    LL_MATH_EXACT,
    LL_MATH_FAST,
};

void ll_matmul(float *out, const float *x, const void *w, enum ll_dtype wtype, const float *bias,
               int M, int N, int K, enum ll_math math, struct ll_pool *pool);

/* The plain scalar reference for the same contract (used by tests; slow). */
void ll_matmul_ref(float *out, const float *x, const void *w, enum ll_dtype wtype,
                   const float *bias, int M, int N, int K, enum ll_math math);

/* Name of the variant ll_matmul uses on this CPU ("avx512bf16", "avx2", "scalar"). */
const char *ll_matmul_variant(void);

#endif
