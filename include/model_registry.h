/*
 * model_registry.h: model families, keyed by config.json `model_type`.
 *
 * A family is a table of entry points: how to bind its weights from the safetensors set (bind /
 * unbind) and, added by the model code, how to run its forward pass. model_open() looks the
 * family up once; everything after calls through m->family.
 *
 * Adding a model family = adding its file(s) under src/model/ (e.g. llama_bind.c with its bind
 * function and weights struct, its forward pass, a header declaring them) plus one entry in the
 * table of model_registry.c; nothing else branches on the model type or sees the family's
 * weights (struct model holds them as an opaque pointer).
 *
 * Thread use: the table is constant; any thread may read it.
 */
#ifndef LLAISYS_MODEL_REGISTRY_H
#define LLAISYS_MODEL_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "errors.h"
#include "model.h"

struct model_runtime; /* runtime.h */
struct runtime_opts;
struct ll_batch;

struct model_family {
    const char *model_type;           /* config.json model_type, e.g. "qwen2" */
    const char *const *architectures; /* config.json architectures it also answers to, NULL-ended */
    bool no_weights;                  /* the directory has no weight files; config.json needs only
                                         the vocabulary and context sizes (the mock family) */
    bool window_unswitched;           /* config.json's sliding_window is in force by itself
                                         (Mistral's); else only with use_sliding_window (Qwen's) */
    int window_period;                /* > 0: sliding_window applies per layer (Gemma's): to the
                                         layers config.json's layer_types names
                                         "sliding_attention", or, without layer_types, to every
                                         layer l with (l + 1) % sliding_window_pattern != 0, the
                                         pattern defaulting to this */
    bool multipliers;                 /* config.json's embedding_multiplier,
                                         attention_multiplier (q·k's scale, replacing
                                         1/√head_dim), residual_multiplier and logits_scaling
                                         are read (Granite's); other families ignore them, as
                                         transformers does */
    bool local_experts;               /* config.json's experts are num_local_experts, each
                                         intermediate_size wide, in every layer, the top k's
                                         weights renormalised (GraniteMoE's; Mixtral names them
                                         so too); else Qwen's num_experts fields */
    const char *config_defaults;      /* JSON object: the values of the family's transformers
                                         config class for the fields a config.json may leave out
                                         (Gemma 3's); NULL: config.c's own defaults */
    bool text_config;                 /* the decoder's fields are config.json's text_config (a
                                         multimodal checkpoint: Gemma 3 4B and up), the weights
                                         named under weights_prefix; the rest is not loaded */
    const char *weights_prefix;       /* prepended to every tensor name ("" when NULL) */
    /* Make the family's weights struct, store it in m->weights (opaque to everyone else) and
     * point it at the tensors of m->st, checking every name, shape and dtype against m->config;
     * set m->weight_dtype. Returns LL_OK, LL_EMODEL (missing tensor, wrong shape),
     * LL_EUNSUPPORTED (dtype other than BF16/F16/F32) or LL_ENOMEM; on failure leaves nothing to
     * free but what unbind frees. */
    enum ll_status (*bind)(struct model *m, struct ll_err *err);
    /* Free m->weights and whatever bind allocated (safe after a failed or partial bind). */
    void (*unbind)(struct model *m);
    /* runtime.h: create/free the forward state, run one step (NULL: the family cannot run). */
    enum ll_status (*runtime_create)(struct model_runtime **out, const struct model *m,
                                     const struct runtime_opts *opts, struct ll_err *err);
    void (*runtime_free)(struct model_runtime *rt);
    enum ll_status (*forward)(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                              struct ll_err *err);
};

/* The family whose model_type is `model_type`, or NULL. */
const struct model_family *model_registry_find(const char *model_type);
/* The family that lists `architecture` (e.g. "Qwen2ForCausalLM"), or NULL. */
const struct model_family *model_registry_find_arch(const char *architecture);
/* Write the known model_type names, comma-separated, into buf (always NUL-terminated). */
void model_registry_names(char *buf, size_t size);

#endif
