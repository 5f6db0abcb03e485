/*
 * qmatmul_kernels.h: private interface between qmatmul.c (dispatch, threads, scratch, the
 * scalar reference) and the SIMD variants qmatmul_avx2.c, qmatmul_avxvnni.c,
 * qmatmul_vnni512.c and qmatmul_amx.c.
 *
 * Every variant computes an output element out[m][n] the same way (qmatmul.h, "The result"):
 * exact integer sums per block, then one f32 multiply of the two scales and one fused
 * multiply-add per block (q4_k: a second one for the min term), blocks in increasing order.
 * Integer sums may be formed in any order (they are exact), so a variant is free in how it
 * reaches them: unsigned × signed byte dot products with a correction from the activation block
 * sums, sign tricks, any tiling of (m, n).
 */
#ifndef LLAISYS_QMATMUL_KERNELS_H
#define LLAISYS_QMATMUL_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

/* One qmatmul call, as seen by the kernels. */
struct ll_qmm_job {
    float *out;                 /* (M, N) */
    const float *x;             /* (M, K) f32 */
    const float *bias;          /* (N) or NULL */
    const struct ll_qweight *w; /* (N, K), layout of quant.h */
    int M, N, K;
    int nb;                     /* K / 32 blocks per row */
    int8_t *xq;                 /* (M, K) activations quantized, in [-127, 127] */
    float *xd;                  /* (M, nb) their per-block scales */
    int32_t *xs;                /* (M, nb) per-block sums of xq */
    float *xm;                  /* (M, nb) q4_k only: (float)xs · xd, the min term's factor */
};

/* out[m0..m1) × columns of groups [g0, g1) (16 columns each, the last one cut at N) of the job,
 * from the quantized activations. Called concurrently on disjoint ranges. */
typedef void (*ll_qmm_kernel_fn)(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);
/* Quantize rows [m0, m1) of x into xq, xd, xs (qmatmul.h, "Activations"); xm is filled by the
 * caller (qmatmul.c). */
typedef void (*ll_qmm_quant_fn)(const struct ll_qmm_job *job, int m0, int m1);

void ll_qmm_kernel_avx2(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);
void ll_qmm_quant_avx2(const struct ll_qmm_job *job, int m0, int m1);
void ll_qmm_kernel_avxvnni(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);
void ll_qmm_quant_avxvnni(const struct ll_qmm_job *job, int m0, int m1);
void ll_qmm_kernel_vnni512(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);
void ll_qmm_quant_vnni512(const struct ll_qmm_job *job, int m0, int m1);
/* qmatmul_amx.c: job->M >= LL_QMM_AMX_MIN_M (any m0..m1 within it), since a tile reads 16 rows
 * of x; the real tiles, and their emulation. Smaller calls go to another variant (qmatmul.c). */
#define LL_QMM_AMX_MIN_M 16
void ll_qmm_kernel_amx(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);
void ll_qmm_kernel_amx_emul(const struct ll_qmm_job *job, int m0, int m1, int g0, int g1);

/* The activation scale of a block whose largest magnitude is amax, and the factor that maps the
 * block onto [-127, 127] (both 0 when amax is 0, or so small that 127 / amax is not finite).
 * Shared by every variant so that all quantize alike, bit for bit. */
static inline void ll_qmm_act_scale(float amax, float *d, float *inv)
{
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (!(id <= 3.4028234663852886e38f))
        id = 0.0f;
    *inv = id;
    *d = id != 0.0f ? amax / 127.0f : 0.0f;
}

/* Four bytes as one int32 (for broadcasting four activations to every lane). */
static inline int32_t ll_qmm_load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#endif
