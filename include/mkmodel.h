/*
 * mkmodel.h: the random-model generator. Writes a complete Hugging Face directory for a Qwen2,
 * Qwen3, Llama, Qwen2-MoE, Qwen3-MoE, Mistral, Gemma 2, Gemma 3, Phi-3, SmolLM3, Granite or
 * GraniteMoE model of any shape:
 * config.json, generation_config.json, model.safetensors (bf16), and the tokenizer files copied
 * from a tokenizer directory.
 *
 * Weights are a pure function of (seed, tensor name, element index) through a counter-based
 * generator, so output is byte-identical for a seed whatever the thread count, and any element
 * can be recomputed on its own (mkmodel_weight) to check a loader.
 * Distributions keep activations sane at any width: projection matrices ~ N(0, 1/fan_in) (each
 * sub-layer adds O(1) to the residual stream; for R1-1.5B that is std 0.0255 / 0.0106, close to
 * Hugging Face's 0.02; routers and the shared expert's gate too, so routing is far from uniform), embeddings, lm_head and biases ~ N(0, 0.02^2), norm weights (Qwen3's
 * per-head q/k norms too) ~ 1 + N(0, 0.02^2). The normal is approximated by a sum of four
 * uniforms (bounded by 3.5 std).
 *
 * A "copy" model (copy_period N > 0) has the same shapes and cost, with weights that make it
 * predict a known sequence: every o_proj and down_proj is zero, so each layer leaves the
 * residual stream as the token's embedding (attention and MLP still run in full), and lm_head
 * row v is the embedding row of the id before v in v's aligned group of N ids (the group
 * g·N .. g·N+N-1, cyclically; the vocabulary's last group may be shorter). The final hidden
 * state of token t is most similar to lm_head row succ(t), so greedy decoding steps through
 * t+1, t+2, ... around t's group: the output repeats any text made of such runs, and repeats
 * itself every N tokens (a workload for speculative decoding). The similarity margin grows
 * with the hidden size: exact at R1-1.5B's width, with rare slips at tiny widths.
 */
#ifndef LLAISYS_MKMODEL_H
#define LLAISYS_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

enum mkmodel_family {
    MKMODEL_QWEN2, /* q/k/v biases */
    MKMODEL_QWEN3, /* per-head q/k norms, no biases (attention_bias false) */
    MKMODEL_LLAMA, /* neither (Llama 3.x) */
    MKMODEL_QWEN2_MOE, /* Qwen2's attention; experts and a shared expert (Qwen1.5-MoE, Qwen2-57B-A14B) */
    MKMODEL_QWEN3_MOE, /* Qwen3's attention; experts, norm_topk_prob (Qwen3-30B-A3B, 235B-A22B) */
    MKMODEL_MISTRAL,   /* Llama's decoder, Mistral's config (Mistral-Nemo, Mistral-Small) */
    MKMODEL_GEMMA2,    /* Gemma 2: four norms a layer, GeGLU, softcaps, every other layer
                          windowed (tied) */
    MKMODEL_GEMMA3,    /* Gemma 3's text model: Gemma 2 with q/k norms, no softcaps, five
                          windowed layers in six (tied) */
    MKMODEL_PHI3,      /* Phi-3: Llama's decoder from fused qkv_proj and gate_up_proj; a
                          sliding window in every layer, longrope, partial rotary (Phi-4-mini) */
    MKMODEL_SMOLLM3,   /* SmolLM3: Llama's decoder, every fourth layer without RoPE (tied) */
    MKMODEL_GRANITE,   /* Granite 3.x: Llama's decoder with four multipliers */
    MKMODEL_GRANITE_MOE, /* GraniteMoE: Granite's with experts in every layer, each layer's
                            stacked in two 3-D tensors (their width: moe_intermediate_size,
                            config.json's intermediate_size) */
};

/* Whether f has experts (the n_experts fields of the spec apply). */
bool mkmodel_family_moe(enum mkmodel_family f);
/* Whether f is a Gemma family (windowed layers: the sliding_window field applies; tied). */
bool mkmodel_family_gemma(enum mkmodel_family f);
/* Whether f is a Granite family (granite, granitemoe: the multipliers apply). */
bool mkmodel_family_granite(enum mkmodel_family f);

/* The family's model_type ("qwen2", "qwen3", "llama", "qwen2_moe", "qwen3_moe", "mistral",
 * "gemma2", "gemma3_text", "phi3", "smollm3", "granite", "granitemoe"). */
const char *mkmodel_family_name(enum mkmodel_family f);
/* The family called `name`; false when there is none. */
bool mkmodel_family_parse(const char *name, enum mkmodel_family *f);

struct mkmodel_spec {
    enum mkmodel_family family;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;          /* 0: hidden_size / n_heads (then not written to config.json) */
    int vocab_size;
    int max_position;
    int max_window_layers; /* 0: n_layers */
    double rope_theta;
    double rope_factor;          /* > 0: config.json gets rope_scaling "llama3" with this factor,
                                    low/high_freq_factor 1 and 4 (Llama 3.1's), and */
    int rope_original_max;       /* original_max_position_embeddings; 0 with rope_factor 0;
                                    phi3: > 0 writes rope_scaling "longrope" (mkmodel's own
                                    factor lists, not published ones) over this original
                                    context */
    double partial_rotary;       /* phi3: partial_rotary_factor (0: not written, all dims turn) */
    double rms_eps;
    bool tied;
    uint64_t seed;
    int bos_token_id, eos_token_id; /* -1: taken from the tokenizer (or left out without one, or
                                       when the tokenizer has no bos_token) */
    int copy_period;       /* > 0: a copy model of this group size (see above; needs !tied) */
    /* the MoE families: every layer sparse but those in mlp_only (bit l: layer l < 64 has
     * the dense MLP of intermediate_size) */
    int n_experts, n_experts_used, moe_intermediate_size;
    int shared_intermediate_size; /* qwen2_moe: the shared expert's width */
    uint64_t mlp_only;
    double multipliers[4]; /* granite, granitemoe: embedding_multiplier, attention_multiplier,
                              residual_multiplier, logits_scaling; 0: mkmodel's default (12,
                              1/head_dim, 0.22, 8: granite-3.x-2b's, whose 1/64 is 1/head_dim) */
    int sliding_window; /* the Gemma families: the windowed layers' window (required there);
                           mistral, phi3: config.json's sliding_window (0: null) */
};

/* Fill *s with preset `name`: "tiny", "small", "r1-1.5b" (Qwen2), "qwen3-0.6b", "qwen3-1.7b",
 * "llama3.2-1b", "llama3.2-3b" or "llama3.1-8b" (the shapes of DeepSeek-R1-Distill-Llama-8B
 * too), "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "mistral-nemo-12b", "mistral-small-24b",
 * "mistral-7b", "gemma2-2b", "gemma3-1b", "phi3-mini" (Phi-3-mini-4k), "phi3.5-mini" or
 * "phi4-mini", "smollm3-3b", "granite3-2b", "granite3-8b", "granite3-1b-a400m" (seed 0, bos/eos
 * from tokenizer). Returns LL_OK or
 * LL_EINVAL (message lists the presets). */
enum ll_status mkmodel_preset(struct mkmodel_spec *s, const char *name, struct ll_err *err);

/* Check a spec: sizes positive and within limits, heads a multiple of KV heads, hidden a
 * multiple of heads (unless head_dim is set), even head dim, a copy period of 2..vocab with an
 * untied lm_head. Returns LL_OK or LL_EINVAL naming the field. */
enum ll_status mkmodel_check(const struct mkmodel_spec *s, struct ll_err *err);

/* Bytes of model.safetensors for this spec (header included). */
uint64_t mkmodel_file_size(const struct mkmodel_spec *s);

/* Write the model directory out_dir. Everything is written into a temporary sibling directory
 * which is renamed to out_dir at the end, so a half-written out_dir never exists. out_dir must
 * not exist unless `force` (then an existing model directory holding only the files mkmodel
 * writes is replaced). tokenizer_dir: where tokenizer.json and tokenizer_config.json are copied
 * from (their bos/eos tokens give the ids when the spec leaves them -1, and the spec's vocab must
 * cover the tokenizer's); NULL writes no tokenizer files. n_threads >= 1 generate in parallel.
 * Returns LL_OK, LL_EINVAL (bad spec, out_dir exists), LL_EIO (names the path), LL_EJSON /
 * LL_ETOKENIZER (bad tokenizer files) or LL_ENOMEM; on failure the temporary directory is
 * removed. */
enum ll_status mkmodel_write(const struct mkmodel_spec *s, const char *tokenizer_dir,
                             const char *out_dir, int n_threads, bool force, struct ll_err *err);

/* The value mkmodel stores (after bf16 rounding) for element i (row-major) of tensor `name` of
 * the model of spec s (its seed and shapes); NaN when the model has no such tensor. */
float mkmodel_weight(const struct mkmodel_spec *s, const char *name, uint64_t i);

#endif
