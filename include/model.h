/*
 * model.h: a loaded model: configuration, generation defaults, weights (mmap'd), and the family
 * implementation picked from config.json `model_type` through the registry (model_registry.c).
 * Nothing here is family-specific: the family binds its tensors into a struct of its own, which
 * only the family's files look into.
 *
 * Ownership: model_open() returns a model that owns its mmaps and every allocation; model_close()
 * frees everything. Tensors point into the mmaps (read-only) or into model-owned buffers.
 * Thread use: read-only after open; any thread may read it.
 */
#ifndef LLAISYS_MODEL_H
#define LLAISYS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "errors.h"

#define LL_MAX_EOS 8

/* config.json, the fields a decoder-only transformer of the Qwen2 family needs. */
struct model_config {
    char model_type[32];   /* e.g. "qwen2" (the family's name when config.json gives only
                              architectures) */
    char architecture[64]; /* architectures[0], e.g. "Qwen2ForCausalLM"; "" if absent */
    int hidden_size;       /* 1536 for R1-Distill-Qwen-1.5B */
    int intermediate_size; /* 8960 */
    int n_layers;          /* num_hidden_layers */
    int n_heads;           /* num_attention_heads */
    int n_kv_heads;        /* num_key_value_heads (defaults to n_heads) */
    int head_dim;          /* hidden_size / n_heads unless config gives head_dim */
    int vocab_size;
    int max_position;      /* max_position_embeddings */
    double rope_theta;     /* default 10000 */
    float rms_eps;         /* rms_norm_eps, default 1e-6 */
    bool tie_word_embeddings;
    int bos_token_id;      /* -1 if absent */
    int eos_ids[LL_MAX_EOS]; /* eos_token_id (int or list) */
    int n_eos;
};

/* generation_config.json (optional file; has_* false when absent). */
struct generation_defaults {
    bool has_temperature, has_top_p, has_top_k, has_do_sample;
    bool has_min_p, has_repetition_penalty;
    float temperature, top_p;
    float min_p;              /* [0, 1] */
    float repetition_penalty; /* > 0 */
    int top_k;
    bool do_sample;
    int bos_token_id;        /* -1 if absent */
    int eos_ids[LL_MAX_EOS]; /* merged into the model's eos set */
    int n_eos;
};

/* A weight tensor: dtype, shape (row-major), data. 1-D tensors have shape[1] == 1, ndim == 1. */
struct ll_tensor {
    enum ll_dtype dtype;
    int ndim;
    int64_t shape[2];
    const void *data;
};

struct model_family; /* model_registry.h */
struct safetensors;  /* safetensors.h */

struct model {
    char *dir;
    struct model_config config;
    struct generation_defaults gen;
    const struct model_family *family;
    struct safetensors *st;      /* the mmap'd weight files */
    void *weights;               /* the family's own weights struct (e.g. struct qwen2_weights
                                    in qwen2.h): made by family->bind, freed by family->unbind;
                                    opaque to everything outside the family */
    enum ll_dtype weight_dtype;  /* dtype of the projection weights (set by bind; for reports) */
};

/* Open a Hugging Face model directory: config.json, generation_config.json (optional),
 * model.safetensors or model.safetensors.index.json + shards. Validates every tensor's dtype,
 * shape and byte range against the file and the config. On failure returns the error with a
 * message naming the file and what is wrong, and *out is NULL.
 * Returns LL_OK, LL_EIO, LL_EJSON, LL_EFORMAT, LL_EMODEL, LL_EUNSUPPORTED, LL_ENOMEM. */
enum ll_status model_open(struct model **out, const char *dir, struct ll_err *err);
/* Free everything model_open allocated (NULL is a no-op). */
void model_close(struct model *m);

#endif
