/*
 * ref_forward.h: the float64 reference forward pass of the tests, written here from transformers'
 * definitions of Qwen2, Qwen3 and their MoE variants (checked on the independent tiny-qwen2
 * fixture by test_qwen3). It reads the stored weights straight from model.safetensors (st_open;
 * not through the model's bind) and computes in double: embedding, per layer RMSNorm, q/k/v
 * (+ bias), the per-head q/k norms, RoPE (rotate-half pairs i, i + d/2 of the d rotated dims,
 * inverse frequencies θ^(-2i/d)), causal grouped-query attention, o, residual, RMSNorm, the MLP
 * (SwiGLU; in a sparse layer the router's softmax, its k best experts weighted by their
 * probabilities, renormalised when norm_topk_prob, plus the shared expert times the sigmoid of
 * its gate), residual, final RMSNorm, lm_head (the embedding when tied). Gemma 2 and 3 as their
 * transformers definitions (ref_kind.gemma), Phi-3 as its (ref_kind.fused). RoPE turns the
 * config's rope_dim of a head (partial_rotary_factor), in the layers that have it
 * (model_layer_rope: SmolLM3's no_rope_layers); rope_scaling is not applied but for longrope.
 */
#ifndef LLAISYS_TEST_REF_FORWARD_H
#define LLAISYS_TEST_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "matmul.h"
#include "model.h"

/* Which optional tensors the model has. */
struct ref_kind {
    bool qk_norm; /* self_attn.{q,k}_norm */
    bool bias;    /* self_attn.{q,k,v}_proj.bias */
    bool shared;  /* the sparse layers' shared expert (Qwen2-MoE) */
    bool gemma;   /* Gemma 2 / 3: the embedding times sqrt(hidden), norms of 1 + w, the
                     attention's and the MLP's outputs normed (post_attention_layernorm,
                     post_feedforward_layernorm; the MLP's input pre_feedforward_layernorm),
                     lm_head the embedding; with the config's activation, attention scale,
                     softcaps, windowed layers and their RoPE base */
    bool fused;   /* Phi-3: self_attn.qkv_proj and mlp.gate_up_proj; longrope (its factors for
                     a context of 256, ref_engine_logits') and partial rotary from the config */
    bool stacked; /* GraniteMoE: the router block_sparse_moe.router.layer, the experts stacked in
                     block_sparse_moe.input_linear and output_linear */
};

struct ref {
    struct safetensors *st;
    const struct model_config *c; /* the experts and dense layers follow c->moe */
    struct ref_kind kind;
};

/* Open dir/model.safetensors for c (fails the test when it cannot). */
void ref_open(struct ref *r, const char *dir, const struct model_config *c, struct ref_kind kind);
void ref_close(struct ref *r);

/* logits (n, vocab) of the sequence ids[0..n) from position 0. */
void ref_forward(const struct ref *r, const int32_t *ids, int n, double *logits);
/* The same, and (hidden not NULL) each position's final hidden state (n, hidden_size): the
 * last layer's output after the final norm, what lm_head reads; logits may be NULL. */
void ref_forward_states(const struct ref *r, const int32_t *ids, int n, double *logits,
                        double *hidden);

/* The reference's logits (n, vocab) of ids[0..n) for m, read from m->dir's model.safetensors
 * with the tensors of kind (malloc'd: the caller frees them). */
double *ref_logits(const struct model *m, struct ref_kind kind, const int32_t *ids, int n);

/* The engine's logits (n, vocab) of ids[0..n) from position 0 (n <= 256), in forward calls of
 * `chunk` tokens (<= 64) with every row's logits, on a runtime of `threads` threads in `math`. */
void ref_engine_logits(const struct model *m, const int32_t *ids, int n, enum ll_math math,
                       int threads, int chunk, float *out);

/* The engine on m against the reference's ref (n, V) for ids[0..n) (n <= 64): the exact path
 * within exact_tol of the logit scale (top-1 checked at n - 2 positions at least) and the same
 * bits one token at a time and in chunks of 5 on one thread; the bf16 fast path within
 * fast_tol (top-1 at fast_top1 at least) and the same bits in chunks of 3. `what` names the
 * model in the printed figures. */
void ref_check_paths(const struct model *m, const int32_t *ids, int n, const double *ref,
                     double exact_tol, double fast_tol, int fast_top1, const char *what);

/* Logits got (n, V) of the engine against the reference's ref (n, V): fails, naming the
 * position and token, when one is more than rel_tol of the reference's largest |logit| away, or
 * when the best token differs where the reference's top-2 margin exceeds twice that (checked
 * at min_top1 positions at least); prints the figures. Returns the worst difference over that
 * scale. */
double ref_compare(const float *got, const double *ref, int n, int V, double rel_tol,
                   int min_top1, const char *what);

#endif
