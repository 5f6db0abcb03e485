/*
 * matmul_kernels.h: private interface between matmul.c (dispatch, threads, scratch, the scalar
 * reference) and the SIMD variants matmul_avx2.c / matmul_avx512.c.
 *
 * Every variant computes one output element out[m][n] the same way (see matmul.h, "Reduction
 * order"): 16 f32 lanes, zero-initialised, each lane accumulating its own slice of K chunk by
 * chunk in increasing k, chunks zero-padded past K; then the fixed tree over the 16 lanes, then
 * + bias[n]. A variant may tile (m, n) any way it likes, since every element's sequence of
 * floating-point operations stays the same.
 */
#ifndef LLAISYS_MATMUL_KERNELS_H
#define LLAISYS_MATMUL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bf16pack.h"
#include "dtype.h"

/* Elements of K per chunk: 16 f32 lanes on the exact path, 16 lanes x 2 bf16 on the fast path. */
#define LL_MM_CHUNK_EXACT 16
#define LL_MM_CHUNK_FAST 32

/* One matmul call, as seen by the kernels. */
struct ll_mm_job {
    float *out;         /* (M, N) */
    const float *x;     /* (M, K) f32; read on the exact path */
    const uint16_t *xb; /* (M, xb_stride) bf16 copy of x, zero-padded rows; read on the fast path
                         * (the AVX2 variant's prompt and batch paths keep floats there, see
                         * uses_split and uses_planes in matmul_avx2.c) */
    size_t xb_stride;   /* elements between rows of xb: K rounded up to LL_MM_CHUNK_FAST */
    const void *w;      /* (N, K) in wtype */
    enum ll_dtype wtype;
    const float *bias;  /* (N) or NULL */
    int M, N, K;
    bool fast;          /* bf16 x bf16 dot products (LL_MATH_FAST with bf16 weights) */
    /* w packed (bf16pack.h; w is its raw matrix): set only for M = 1 in fast math on the
     * AVX-512 variant with VBMI (matmul.c), read by its stream path; every other path reads w */
    const struct ll_bf16p *packed;
    /* scratch of each thread of the op (panel_bytes apart, thread ith's at panels + ith *
     * panel_bytes): where the AVX2 variant's prompt path regroups a panel of W */
    char *panels;
    size_t panel_bytes;
};

/* Bytes of one thread's panel scratch for rows of xb_stride elements: 16 lanes x chunks x 32
 * floats (matmul_avx2.c, pack_panel). */
#define LL_MM_PANEL_BYTES(xb_stride) ((size_t)(xb_stride) * 64)

/* Compute out[m0..m1)[n0..n1) of the job on thread ith of the op. Called concurrently on
 * disjoint ranges. */
typedef void (*ll_mm_kernel_fn)(const struct ll_mm_job *job, int m0, int m1, int n0, int n1,
                                int ith);
/* Round rows m0..m1) of x to bf16 into job->xb (round to nearest even) and zero the padding. */
typedef void (*ll_mm_round_fn)(const struct ll_mm_job *job, int m0, int m1);

void ll_mm_kernel_avx512(const struct ll_mm_job *job, int m0, int m1, int n0, int n1, int ith);
void ll_mm_round_avx512(const struct ll_mm_job *job, int m0, int m1);
void ll_mm_kernel_avx2(const struct ll_mm_job *job, int m0, int m1, int n0, int n1, int ith);
void ll_mm_round_avx2(const struct ll_mm_job *job, int m0, int m1);

#endif
