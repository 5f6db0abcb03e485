/*
 * qmatmul.h: out = x · Wᵀ + bias for q8_0 / q4_0 / q4_k weights (quant.h), with integer dot
 * products.
 *
 *   out  (M, N) f32, caller-owned, not overlapping the inputs
 *   x    (M, K) f32 activations, row-major
 *   w    (N, K) a quantized weight validated by ll_qweight_init (K % 32 == 0)
 *   bias (N) f32 or NULL
 *
 * Activations: each call quantizes x into caller-owned scratch, per row, per block of 32
 * (k = 32b .. 32b+31): amax = max |x| over the block; if amax > 0 and 127 / amax is finite,
 * da = amax / 127 and q = round-half-even(x · (127 / amax)) (int8 in [-127, 127]); otherwise
 * da = 0 and q = 0 (all f32 arithmetic, each operation rounded once).
 *
 * The result (every variant computes exactly this, bit for bit):
 *   acc = +0.0f; for b = 0, 1, .., K/32 − 1:
 *       s_b = Σ_i wq[n][32b + i] · q[m][32b + i]   exact integer; wq = q (q8_0 and q4_k) or
 *                                                  q − 8 (q4_0)
 *     q8_0, q4_0:
 *       acc = fmaf((float)s_b, d_w[n][b] · da[m][b], acc)   the scale product rounded to f32
 *     q4_k (block b is block j = b % 8 of super-block B = b / 8; ds = d_B · sc_j and
 *     dm = dmin_B · m_j, both exact in f32; sa = (float)Σ_i q[m][32b + i] · da[m][b], rounded):
 *       acc = fmaf((float)s_b, ds · da[m][b], acc)          the scale product rounded to f32
 *       acc = fmaf(−dm, sa, acc)                            the min term
 *   out[m][n] = bias ? acc + bias[n] : acc
 * So out[m][n] depends only on x[m], W[n] and bias[n]: it is bit-identical whatever M is, where
 * row m sits in the batch, how many threads run (threads split over N in groups of 16 rows, or
 * over M, never over K) and which variant runs. The error against the f32 product of x and the
 * dequantized W comes from quantizing x (at most da/2 per element) plus f32 rounding.
 *
 * Variants, chosen once by CPU features within the cap of LLAISYS_KERNEL (the kernels' dispatch
 * knob: scalar|avx2|avxvnni|avx512|amx): "amx" (TDPBSSD on AMX int8 tiles, for calls with M >= 16;
 * smaller calls run "avx512vnni"), "avx512vnni" (vpdpbusd on zmm), "avxvnni" (vpdpbusd on ymm,
 * VEX), "avx2" (vpmaddubsw + vpmaddwd), "scalar"; and "amx-emul", the amx kernel on tiles
 * emulated in C (M < 16: "scalar"), which runs on any CPU, for tests and benchmarks only (never
 * chosen by dispatch). AMX multiplies signed × signed bytes: its weights are unpacked to the
 * signed integers wq. Unsigned × signed byte products: q4_0 and q4_k
 * nibbles are unsigned already (q4_0's −8 is a correction from the activation block sum); q8_0
 * weights are read with their sign bit flipped (q + 128, corrected by −128 · block sum) on the
 * VNNI variants, with the sign moved onto the activations on AVX2 (whose 16-bit pair sums would
 * saturate). q4_k nibbles are unsigned, its minimum a second f32 step with the activation block
 * sum.
 *
 * Scratch: sized by ll_qmatmul_scratch_bytes for the largest M and K the caller will use,
 * allocated once; ll_qmatmul never allocates and cannot fail. Work is split over the pool's
 * threads; pool may be NULL (single thread). Not reentrant on one pool, nor on one scratch.
 */
#ifndef LLAISYS_QMATMUL_H
#define LLAISYS_QMATMUL_H

#include <stdbool.h>
#include <stddef.h>

#include "pool.h"
#include "quant.h"

/* Bytes of scratch that ll_qmatmul calls with M <= max_m and K <= max_k need (a multiple of 64;
 * max_m, max_k >= 0). */
size_t ll_qmatmul_scratch_bytes(int max_m, int max_k);

/* out = x · Wᵀ + bias (shapes above), M >= 0 rows of x. scratch: 64-byte aligned, caller-owned,
 * scratch_bytes >= ll_qmatmul_scratch_bytes(M, w->k). Cannot fail (a w not made by
 * ll_qweight_init, or too little scratch, is a broken invariant: asserted). */
void ll_qmatmul(float *out, const float *x, const struct ll_qweight *w, const float *bias, int M,
                void *scratch, size_t scratch_bytes, struct ll_pool *pool);

/* The plain scalar reference for the same contract, single thread, allocating its own scratch
 * (used by tests; slow). Its results equal every variant's bit for bit. */
void ll_qmatmul_ref(float *out, const float *x, const struct ll_qweight *w, const float *bias,
                    int M);

/* Name of the variant ll_qmatmul uses ("amx", "avx512vnni", "avxvnni", "avx2" or "scalar"): the
 * best this CPU runs within the cap of LLAISYS_KERNEL (a level the CPU lacks falls back to the
 * best one it has, with a warning on the log; so does amx where Linux refuses the tile state).
 * Chosen once. */
const char *ll_qmatmul_variant(void);

/* Switch variant by name (one of the five above, or "amx-emul"), for tests and benchmarks; not
 * safe while another thread is inside ll_qmatmul. Returns false, changing nothing, for an
 * unknown name or a variant this CPU cannot run. */
bool ll_qmatmul_set_variant(const char *name);

#endif
