/*
 * matmul_kernels.h: private interface between matmul.c (dispatch, threads, scratch, the scalar
 * references) and the SIMD variants matmul_avx2.c / matmul_avx512.c / matmul_amx.c.
 *
 * Every variant computes one output element out[m][n] in one fixed order (see matmul.h,
 * "Reduction order"): the lanes order (scalar, avx2, avx512: 16 f32 lanes, zero-initialised, each
 * accumulating its own slice of K chunk by chunk in increasing k, chunks zero-padded past K, then
 * the fixed tree over the 16 lanes, then + bias[n]), or on the fast path of amx and amx-emul the
 * tile order. A variant may tile (m, n) any way it likes, since every element's sequence of
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
                         * uses_split and uses_planes in matmul_avx2.c; the AMX variant keeps
                         * the AMX layout below) */
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

/* AMX layout of xb (matmul_amx.c): panels of LL_MM_AMX_ROWS rows of x, panel p (rows 16p ..
 * 16p + 15) at element p · 16 · xb_stride; in it, element k of row 16p + c at (k / 2) · 32 + 2c +
 * k % 2, so each chunk of 32 of K is one B tile (16 rows of 64 bytes) of TDPBF16PS. Rows past M
 * in the last panel and elements past K are zero. */
#define LL_MM_AMX_ROWS 16

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
/* fast path only (matmul.c gives the exact path to another variant) */
void ll_mm_kernel_amx(const struct ll_mm_job *job, int m0, int m1, int n0, int n1, int ith);
void ll_mm_round_amx(const struct ll_mm_job *job, int m0, int m1);
void ll_mm_kernel_amx_emul(const struct ll_mm_job *job, int m0, int m1, int n0, int n1, int ith);
void ll_mm_round_amx_emul(const struct ll_mm_job *job, int m0, int m1);

/* The check of the tile order (matmul.c): ll_mm_check_data fills x (LL_MM_CHECK_M ×
 * LL_MM_CHECK_K floats, each a bf16 value) and w (LL_MM_CHECK_N × LL_MM_CHECK_K bf16);
 * ll_mm_tiles_agree runs round then kernel on them (fast path, one thread) and compares with
 * ll_matmul_ref_tiles bit for bit: true when every element agrees, else false with the first
 * that does not in why[0 .. n). Before dispatch picks the amx variant, its real tiles must pass. */
enum { LL_MM_CHECK_M = 20, LL_MM_CHECK_N = 40, LL_MM_CHECK_K = 100 };
void ll_mm_check_data(float *x, uint16_t *w);
bool ll_mm_tiles_agree(ll_mm_kernel_fn kernel, ll_mm_round_fn round, char *why, size_t n);

#endif
