/*
 * qwen2.h: the Qwen2 family (model_type "qwen2"), Qwen3, its dense successor (model_type
 * "qwen3"), Llama (model_type "llama": Llama 3.x and the models built on it, such as
 * DeepSeek-R1-Distill-Llama), Mistral, Gemma 2 and 3 ("gemma2", "gemma3_text"), Phi-3,
 * SmolLM3, Granite ("granite"), and the mixtures of experts, Qwen2-MoE ("qwen2_moe") and
 * Qwen3-MoE ("qwen3_moe"): one weights struct, bound by qwen2_bind.c, and one forward pass
 * (qwen2.c), the implementation behind runtime.h. Registered in the family table of
 * model_registry.c; nothing outside the qwen2 files (and their tests) looks inside.
 *
 * Per step: embedding (Gemma: times sqrt(hidden); Granite: times its embedding_multiplier) →
 * per layer (RMSNorm → q/k/v (+ bias: Qwen2; Qwen3 when attention_bias) → Qwen3, Gemma 3:
 * RMSNorm of each head of q and k → RoPE on q, k → K/V into the cache → attention (Gemma: its
 * scale, softcap and, in windowed layers, the sliding window; Granite: its attention_multiplier
 * as the scale) → o (Gemma: RMSNorm) → residual (Granite: the output times residual_multiplier)
 * → RMSNorm → gate, up → SwiGLU (Gemma: GeGLU) → down (Gemma: RMSNorm; a sparse layer: the
 * router's k experts, each such MLP, weighted; Qwen2-MoE: plus the gated shared expert) →
 * residual (Granite: as before)) → final RMSNorm and lm_head (Gemma 2: softcapped; Granite:
 * divided by logits_scaling) for the rows that want logits only. The families differ in those
 * steps and nothing else (transformers' Qwen3 is Qwen2 with per-head q/k norms and biases off by
 * default; its Llama is Qwen2 without biases; its Gemma norms by 1 + w and adds the two output
 * norms). RoPE's frequencies follow config.json's rope_scaling (model_rope_inv_freq()), Llama
 * 3.1's "llama3" stretching included; Gemma 3's windowed layers have a base of their own.
 */
#ifndef LLAISYS_QWEN2_H
#define LLAISYS_QWEN2_H

#include "model.h"
#include "runtime.h"

/* One decoder layer (biases only on q/k/v, and optional). Shapes in HF layout (out, in). The
 * linear weights are dense or quantized (struct model_linear, model.h). A tensor the model does
 * not have has data NULL: the biases of a Qwen3 model without attention_bias, the q/k norms of a
 * Qwen2 model. */
/* One SwiGLU MLP: down(silu(gate · x) * (up · x)). */
struct qwen2_mlp {
    struct model_linear gate, up, down; /* (inter, hidden) x2, (hidden, inter) */
};

/* A sparse layer's experts (config.json's struct model_moe): the router and n_experts MLPs of
 * moe_intermediate_size; Qwen2-MoE's shared expert and its gate when shared_gate.data is set. */
struct qwen2_moe {
    struct ll_tensor router;      /* (n_experts, hidden) mlp.gate.weight, as stored (never
                                     quantized: it picks the experts) */
    struct qwen2_mlp *experts;    /* n_experts: mlp.experts.E.{gate,up,down}_proj */
    struct qwen2_mlp shared;      /* mlp.shared_expert.*: (shared_inter, hidden) ... */
    struct ll_tensor shared_gate; /* (1, hidden) mlp.shared_expert_gate.weight; data NULL: no
                                     shared expert (Qwen3-MoE) */
};

struct qwen2_layer {
    struct ll_tensor attn_norm;               /* (hidden) */
    struct model_linear wq, wk, wv, wo;       /* (nh*hd, hidden) (nkv*hd, hidden) x2
                                                 (hidden, nh*hd) */
    struct ll_tensor bq, bk, bv;              /* (nh*hd) (nkv*hd) (nkv*hd) */
    struct ll_tensor q_norm, k_norm;          /* (hd) (hd): Qwen3's per-head RMSNorm weights */
    struct ll_tensor mlp_norm;                /* (hidden) the MLP's input norm:
                                                 post_attention_layernorm, Gemma's
                                                 pre_feedforward_layernorm */
    struct ll_tensor post_attn_norm;          /* (hidden) Gemma: the attention's output normed
                                                 (its post_attention_layernorm) before the
                                                 residual add; data NULL: none */
    struct ll_tensor post_mlp_norm;           /* (hidden) Gemma: the MLP's output normed
                                                 (post_feedforward_layernorm); NULL: none */
    struct qwen2_mlp mlp;                     /* a dense layer's MLP (moe NULL) */
    struct qwen2_moe *moe;                    /* a sparse layer's experts; NULL: dense */
};

/* What m->weights points at for a qwen2 model. Tensors point into the safetensors mmaps (or,
 * for weights quantized at load, into m->qmem). */
struct qwen2_weights {
    struct ll_tensor embed;      /* (vocab, hidden) model.embed_tokens.weight, as stored (bf16,
                                    f16 or f32 also in a quantized model: it is gathered) */
    struct ll_tensor final_norm; /* (hidden) model.norm.weight */
    struct model_linear lm_head; /* (vocab, hidden); dense, it is the embedding when tied */
    struct qwen2_layer *layers;  /* n_layers entries */
    float embed_scale;           /* the embedding rows times it: Gemma's sqrt(hidden_size),
                                    Granite's embedding_multiplier; 0: none */
    bool norm_plus_one;          /* Gemma: every RMSNorm multiplies by (1 + weight) */
};

/* As model_family.bind / unbind (model_registry.h): allocate a struct qwen2_weights into
 * m->weights and point it at the tensors of m->st, checking every name, shape and dtype against
 * m->config; the linear weights go through model_bind_linear (dense, or the quantized planes of
 * model_bind.h). Returns LL_OK, LL_EMODEL, LL_EUNSUPPORTED or LL_ENOMEM. qwen2_unbind frees it
 * (safe after a failed or partial bind). */
enum ll_status qwen2_bind(struct model *m, struct ll_err *err);
/* As qwen2_bind, for a qwen3 model: q_norm and k_norm in every layer, the q/k/v biases only when
 * config.json has attention_bias true. */
enum ll_status qwen3_bind(struct model *m, struct ll_err *err);
/* As qwen2_bind, for a llama model: no biases, no q/k norms (attention_bias true, which would
 * put biases on o_proj too, is refused). */
enum ll_status llama_bind(struct model *m, struct ll_err *err);
/* As qwen2_bind, for Gemma 2 (model_type "gemma2") and Gemma 3's text model ("gemma3_text"):
 * no biases; the four norms of a layer (input, post-attention, pre- and post-feedforward), each
 * of weight 1 + w; Gemma 3's per-head q/k norms; the embedding scaled by sqrt(hidden_size); the
 * lm_head tied. */
/* As qwen2_bind, for GraniteMoE (model_type "granitemoe"): Llama's layer, experts in every
 * layer stacked in block_sparse_moe's input_linear and output_linear, routed by
 * block_sparse_moe.router.layer (qwen2_bind.c). */
enum ll_status granitemoe_bind(struct model *m, struct ll_err *err);

enum ll_status gemma2_bind(struct model *m, struct ll_err *err);
enum ll_status gemma3_bind(struct model *m, struct ll_err *err);
enum ll_status phi3_bind(struct model *m, struct ll_err *err);
void qwen2_unbind(struct model *m);

/* As qwen2_bind, for Qwen2-MoE (model_type "qwen2_moe"): Qwen2's attention; the sparse
 * layers' experts, each with the shared expert and its gate. */
enum ll_status qwen2_moe_bind(struct model *m, struct ll_err *err);
/* As qwen3_bind, for Qwen3-MoE (model_type "qwen3_moe"): Qwen3's attention; the sparse layers'
 * experts, without a shared expert. */
enum ll_status qwen3_moe_bind(struct model *m, struct ll_err *err);
/* As runtime_create / runtime_free / runtime_forward (runtime.h), for a qwen2 model. */
enum ll_status qwen2_runtime_create(struct model_runtime **out, const struct model *m,
                                    const struct runtime_opts *opts, struct ll_err *err);
void qwen2_runtime_free(struct model_runtime *rt);
enum ll_status qwen2_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                             struct ll_err *err);

#endif
