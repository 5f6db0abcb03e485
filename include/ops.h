/*
 * ops.h: the small row-wise ops of the forward pass (everything except matmul and attention).
 *
 * Every op works on whole rows and computes a row the same way whatever else is in the batch,
 * so a token's result does not depend on its batch position (the determinism guarantee).
 * The ops are single-threaded; the forward pass splits rows over the pool itself.
 * Each op with a SIMD variant has a plain scalar `_ref` twin; the variant used by the plain
 * name is picked once (first call) by CPU features and never changes within a process.
 * All buffers are caller-owned; in-place use is allowed where noted.
 */
#ifndef LLAISYS_OPS_H
#define LLAISYS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "errors.h"

/* out (n, dim) f32 = rows ids[i] of table (vocab, dim) in ttype. ids must be < vocab. */
void ll_embedding(float *out, const void *table, enum ll_dtype ttype, const int32_t *ids, int n,
                  int dim);

/* out (n, dim) = x / sqrt(mean(x²) + eps) · w, w (dim) in wtype. out may equal x. */
void ll_rms_norm(float *out, const float *x, const void *w, enum ll_dtype wtype, int n, int dim,
                 float eps);
void ll_rms_norm_ref(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                     int dim, float eps);

/* Cos/sin tables of rotate-half RoPE (Hugging Face / Qwen2 layout: pairs (i, i + rot_dim/2) of
 * a head's first rot_dim dims; the rest pass unturned), computed in double and rounded to f32
 * once. */
struct ll_rope {
    int head_dim;
    int rot_dim; /* the turned dims (even, <= head_dim) */
    int n_pos;   /* positions 0..n_pos-1 are covered */
    float *cos;  /* (n_pos, rot_dim/2) */
    float *sin;  /* (n_pos, rot_dim/2) */
};

/* Fill r for positions < n_pos: pair i of a head turns by position · inv_freq[i] (rot_dim / 2
 * frequencies; the model decides them, model_rope_inv_freq()), its cos and sin scaled by
 * `scale` (1: a pure rotation). Returns LL_OK, LL_EINVAL (rot_dim odd, < 2 or past head_dim,
 * n_pos < 1) or LL_ENOMEM. ll_rope_free() frees the tables (safe on a zeroed struct). */
enum ll_status ll_rope_init(struct ll_rope *r, int head_dim, int rot_dim, int n_pos,
                            const double *inv_freq, double scale, struct ll_err *err);
void ll_rope_free(struct ll_rope *r);

/* Rotate x (n, n_heads, head_dim) in place; row i uses position pos[i] (< r->n_pos). */
void ll_rope_apply(float *x, const struct ll_rope *r, const int32_t *pos, int n, int n_heads);

/* out (n) = silu(gate) · up, silu(g) = g / (1 + e^-g). out may equal gate or up. */
void ll_swiglu(float *out, const float *gate, const float *up, int n);
void ll_swiglu_ref(float *out, const float *gate, const float *up, int n);

/* out (n) = gelu_tanh(gate) · up (GeGLU, Gemma's gelu_pytorch_tanh), gelu_tanh(g) =
 * 0.5·g·(1 + tanh(u)), u = √(2/π)·(g + 0.044715·g³), computed as g / (1 + e^(-2u)) with the
 * exp of ll_swiglu. Finite for every finite g (≈ -0 far below zero, ≈ g far above).
 * out may equal gate or up. */
void ll_geglu(float *out, const float *gate, const float *up, int n);
void ll_geglu_ref(float *out, const float *gate, const float *up, int n);

/* out (n) = a + b. out may equal a or b. */
void ll_add(float *out, const float *a, const float *b, int n);

/* x (n) ← softmax(x) in place (max-subtracted, f32). */
void ll_softmax(float *x, int n);
void ll_softmax_ref(float *x, int n);

/* Index of the largest x (n >= 1); the lowest index on ties; NaNs are skipped (0 if all NaN). */
int ll_argmax(const float *x, int n);

/* out (n) = e^x with x clamped to [-104, 88.7] (so never inf): the exp of the SIMD ops.
 * out may equal x. */
void ll_exp(float *out, const float *x, int n);

/* Name of the variant the ops and attention use on this CPU ("avx512", "avx2" or "scalar";
 * LLAISYS_KERNEL caps it, see isa.h). */
const char *ll_ops_variant(void);
/* Switch the ops' and attention's variant by name, for tests and benchmarks; not safe while
 * another thread is inside an op. Returns false, changing nothing, for an unknown name or a
 * variant this CPU cannot run. */
bool ll_ops_set_variant(const char *name);

#endif
