/*
 * model_config.h: readers of a model directory's JSON files into the structs of model.h:
 * config.json -> struct model_config, generation_config.json -> struct generation_defaults.
 *
 * Every message names the file (the path or name given) and the field. Missing required fields,
 * wrong JSON types and values out of range give LL_EMODEL; unparseable JSON gives LL_EJSON with a
 * line and column; features the model code does not implement (rope_scaling other than
 * linear, llama3, yarn and longrope, sliding-window attention where the family's configs switch
 * it with use_sliding_window, an activation other than silu and gelu_pytorch_tanh, MLP
 * biases) give LL_EUNSUPPORTED.
 * The mixture-of-experts fields (model.h's struct model_moe) are read when num_experts is
 * present: num_experts_per_tok and moe_intermediate_size are then required, the others take
 * transformers' defaults (norm_topk_prob false, decoder_sparse_step 1, mlp_only_layers [], no
 * shared expert). A family with config_defaults (model_registry.h: Gemma 2, 3) takes the fields
 * config.json leaves out from them; one with text_config reads the decoder's fields from
 * config.json's text_config (the token ids and quantization_config from the top level) and
 * names its tensors under the family's weights_prefix. The caller owns the structs.
 */
#ifndef LLAISYS_MODEL_CONFIG_H
#define LLAISYS_MODEL_CONFIG_H

#include <stddef.h>

#include "errors.h"
#include "model.h"

/* Parse config.json text (len bytes; `name` is used in messages). Required: hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, vocab_size, and model_type unless
 * architectures is given. Defaults: num_key_value_heads = num_attention_heads, head_dim =
 * hidden_size / num_attention_heads, max_position_embeddings 32768, rope_theta 10000,
 * rms_norm_eps 1e-6, tie_word_embeddings false, no bos, no eos. quantization_config, when
 * present, must be {"quant_method": "llaisys", "format": "q8_0" | "q4_0" | "q4_k",
 * "layout": LL_QLAYOUT}
 * (model_bind.h); another method, format or layout gives LL_EUNSUPPORTED naming it.
 * Returns LL_OK, LL_EJSON, LL_EMODEL, LL_EUNSUPPORTED or LL_ENOMEM. */
enum ll_status model_config_parse(struct model_config *cfg, const char *text, size_t len,
                                  const char *name, struct ll_err *err);

/* Read and parse the file at path. Returns as model_config_parse(), or LL_EIO (message names the
 * path) when it cannot be read. */
enum ll_status model_config_read(struct model_config *cfg, const char *path, struct ll_err *err);

/* Parse generation_config.json text. Fields read: temperature, top_p, top_k, do_sample,
 * bos_token_id, eos_token_id (int or list); others are ignored.
 * Returns LL_OK, LL_EJSON, LL_EMODEL or LL_ENOMEM. */
enum ll_status generation_defaults_parse(struct generation_defaults *g, const char *text,
                                         size_t len, const char *name, struct ll_err *err);

/* Read generation_config.json at path. A missing file is not an error: *g gets no values
 * (has_* false, no bos, no eos) and LL_OK is returned. Otherwise as generation_defaults_parse(),
 * or LL_EIO when the file exists but cannot be read. */
enum ll_status generation_defaults_read(struct generation_defaults *g, const char *path,
                                        struct ll_err *err);

/* Add the generation defaults' eos ids to the model's eos set (no duplicates) and check every
 * eos/bos id is inside the vocabulary. cfg_name / gen_name name the two files in messages.
 * Returns LL_OK or LL_EMODEL (id out of range, or more than LL_MAX_EOS ids in all). */
enum ll_status model_config_merge_eos(struct model_config *cfg, const struct generation_defaults *g,
                                      const char *cfg_name, const char *gen_name,
                                      struct ll_err *err);

/* Whether layer `layer` of a model of config c has experts (c->moe) rather than a dense MLP. */
bool model_layer_sparse(const struct model_config *c, int layer);

/* Whether layer `layer` of a model of config c turns q and k by RoPE (not a c->nope layer). */
bool model_layer_rope(const struct model_config *c, int layer);

/* Whether layer `layer` of a model of config c attends through its sliding window (c->swa). */
bool model_layer_windowed(const struct model_config *c, int layer);

/* The rotary inverse frequencies of cfg (rope_dim / 2 of them, in double) into inv_freq:
 * theta^(-2i/rope_dim), then stretched as cfg->rope_scaling says for a runtime serving n_ctx
 * positions (rope_freq.c; longrope picks its factors by it). Returns the factor the rotation's
 * cos and sin are scaled by (1 but for yarn and longrope). */
double model_rope_inv_freq(const struct model_config *cfg, int n_ctx, double *inv_freq);

/* The inverse frequencies of the windowed layers of a model whose cfg->swa.rope_theta is set:
 * swa.rope_theta^(-2i/rope_dim), unscaled. */
void model_rope_local_inv_freq(const struct model_config *cfg, double *inv_freq);

#endif
