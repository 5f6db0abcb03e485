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
#include <stddef.h>
#include <stdint.h>

#include "bf16pack.h"
#include "dtype.h"
#include "errors.h"
#include "model_qscheme.h"
#include "quant.h"

#define LL_MAX_EOS 8
#define LL_TENSOR_NAME_MAX 128 /* bytes of a tensor name, NUL included */

/* config.json, the fields a decoder-only transformer of the Qwen2 family needs. */
/* config.json's rope_scaling: how the rotary frequencies are stretched for long contexts. */
enum model_rope_kind {
    MODEL_ROPE_DEFAULT, /* absent or null: theta^(-2i/d) */
    MODEL_ROPE_LINEAR,  /* "linear": every frequency divided by factor */
    MODEL_ROPE_LLAMA3,  /* "llama3": low frequencies divided by factor, high ones kept, the
                           band between interpolated (Llama 3.1 and later) */
    MODEL_ROPE_YARN,    /* "yarn": the same three bands by rotations over the original context
                           (beta_fast, beta_slow), and q·k scaled (Qwen2.5 / Qwen3 long
                           context) */
    MODEL_ROPE_LONGROPE, /* "longrope" (legacy "su"): each frequency divided by its own factor,
                            from short_factor within the original context and from long_factor
                            for a longer one, and q·k scaled (Phi-3 / Phi-3.5 / Phi-4-mini) */
};

#define LL_ROPE_MAX_PAIRS 256 /* longrope: factors per list (rotary dims / 2) at most */

struct model_rope_scaling {
    enum model_rope_kind kind;
    double factor;          /* > 0 (linear, llama3, yarn) */
    double low_freq_factor, high_freq_factor; /* llama3: 0 < low < high */
    int original_max_position; /* llama3, yarn, longrope: original_max_position_embeddings
                                  (yarn: max_position_embeddings when absent; longrope:
                                  config.json's top-level field, Phi-3's) */
    double beta_fast, beta_slow;  /* yarn: rotations bounding the band (32 and 1 by default) */
    double attention_factor;      /* yarn: cos and sin scaled by it (0: 0.1 ln(factor) + 1);
                                     longrope: by it (0: 1, or sqrt(1 + ln(s) / ln(L)) for
                                     s = max_position / original_max_position > 1) */
    int n_factors;                /* longrope: rotary dims / 2 entries in each list */
    double short_factor[LL_ROPE_MAX_PAIRS], long_factor[LL_ROPE_MAX_PAIRS];
};

/* config.json's mixture-of-experts fields (Qwen2-MoE, Qwen3-MoE): a sparse layer's MLP is
 * n_experts small SwiGLU MLPs of moe_intermediate_size, of which a router (a linear layer over
 * the normed residual, softmax) picks n_experts_used per token and sums them weighted by their
 * probabilities (renormalised over the picked ones when norm_topk_prob); Qwen2-MoE adds a shared
 * expert of shared_intermediate_size scaled by sigmoid(shared_expert_gate · x). A layer is dense
 * (intermediate_size, as in the dense families) when it is in mlp_only_layers or (layer + 1) is
 * not a multiple of decoder_sparse_step. n_experts 0: no experts anywhere. */
struct model_moe {
    int n_experts;        /* num_experts */
    int n_experts_used;   /* num_experts_per_tok, 1..n_experts */
    int intermediate;     /* moe_intermediate_size */
    int shared_intermediate; /* shared_expert_intermediate_size (0: no shared expert) */
    bool norm_topk_prob;
    int sparse_step;      /* decoder_sparse_step (>= 1) */
    uint64_t mlp_only[16]; /* mlp_only_layers as a bit set over layers 0..1023 */
};

/* The MLP's activation of its gate (config.json's hidden_act, or hidden_activation). */
enum model_act {
    MODEL_ACT_SILU,      /* "silu": SwiGLU */
    MODEL_ACT_GELU_TANH, /* "gelu_pytorch_tanh": GeGLU with the tanh approximation (Gemma) */
};

/* Sliding-window attention (Gemma 2 and 3 in some layers, Mistral-7B v0.1 and Phi-3 in all):
 * the layers in `layers` attend to the last `window` positions only (a token at p sees keys
 * p - window < j <= p), and may have RoPE of their own base (Gemma 3's rope_local_base_freq,
 * without rope_scaling). */
struct model_swa {
    int window;            /* sliding_window; 0: every layer attends to the whole context */
    double rope_theta;     /* rope_local_base_freq; 0: the windowed layers use rope_theta and
                              rope_scaling like the others */
    uint64_t layers[16];   /* bit l: layer l (< 1024) is windowed */
};

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
    struct model_rope_scaling rope_scaling;
    int rope_dim;          /* the rotated dims of a head: head_dim · partial_rotary_factor (even;
                              the rest pass unturned) */
    struct model_swa swa;  /* window 0 where no layer has a window shorter than the context */
    uint64_t nope[16];     /* bit l: layer l (< 1024) takes no RoPE (SmolLM3's no_rope_layers
                              entries of 0, or every no_rope_layer_interval-th layer) */
    enum model_act act;    /* hidden_act / hidden_activation */
    double attn_scale;     /* > 0: q·k is scaled by it (query_pre_attn_scalar^-1/2); 0:
                              1/sqrt(head_dim) */
    double attn_softcap;   /* > 0: attn_logit_softcapping (Gemma 2): scores c·tanh(s/c) */
    double final_softcap;  /* > 0: final_logit_softcapping (Gemma 2): logits c·tanh(l/c) */
    double embed_mult;     /* > 0: the embedding rows times it (Granite's embedding_multiplier);
                              0: none (Gemma's √hidden is the bind's) */
    double residual_mult;  /* > 0: each sub-layer's output times it before the residual add
                              (Granite's residual_multiplier); 0: none */
    double logits_div;     /* > 0: the logits divided by it (Granite's logits_scaling); 0: none */
    struct model_moe moe;  /* n_experts 0 for the dense families */
    float rms_eps;         /* rms_norm_eps, default 1e-6 */
    bool tie_word_embeddings;
    int attention_bias;    /* attention_bias: 1 true, 0 false, -1 absent (the family decides:
                              Qwen2 always has q/k/v biases, Qwen3 only when true) */
    int bos_token_id;      /* -1 if absent */
    int eos_ids[LL_MAX_EOS]; /* eos_token_id (int or list) */
    int n_eos;
    char weights_prefix[24]; /* the family's: prepended to every tensor name (a multimodal
                                checkpoint's text model, "language_model.") */
    bool quantized;        /* quantization_config present: the linear weights are stored as
                              planes (quant.h; the layout is in model_bind.h) */
    enum model_qscheme qscheme; /* quantization_config.format, when quantized: each weight's
                                   type (model_qscheme.h) */
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

/* A linear layer's weight W (n, k), used as out = x · Wᵀ: dense (bf16/f16/f32 as stored,
 * row-major) or quantized (quant.h). The family's weights struct holds these; m->linears lists
 * them all so that the family-neutral code can quantize them at load and write them out. */
struct model_linear {
    char name[LL_TENSOR_NAME_MAX]; /* its tensor name, e.g. "model.layers.0.mlp.up_proj.weight" */
    char source[LL_TENSOR_NAME_MAX]; /* "" or the fused tensor whose rows it is (Phi-3's
                                        qkv_proj, gate_up_proj; model_bind_linear_part) */
    int n, k;                      /* output rows, inputs */
    enum model_role role;          /* what it does (model_qscheme.h) */
    int layer;                     /* its layer, or -1 outside the layers (lm_head) */
    bool quantized;
    bool tied;                     /* dense is another tensor of the model (a tied lm_head's
                                      embedding), which stays in use */
    struct ll_tensor dense;        /* (n, k) as stored; data NULL once quantized at load, unless
                                      tied */
    struct ll_qweight q;           /* when quantized: planes in the file's mmap or in m->qmem */
    bool is_packed;                /* packed at load (model_pack.h): `packed` is set, dense stays */
    struct ll_bf16p packed;        /* planes in m->pkmem; packed.raw is dense.data */
};

/* How model_open treats the weights it finds. A zeroed struct (or NULL) takes them as stored,
 * copied into memory. */
struct model_open_opts {
    bool quantize;       /* quantize every dense linear weight by qscheme while loading */
    enum model_qscheme qscheme;
    bool pack_bf16;      /* pack every bf16 linear weight losslessly while loading (model_pack.h) */
    bool keep_mapped;    /* read the linear weights in place from the file mapping instead of
                            copying them into memory (model_copy.h) */
    int n_threads;       /* threads that quantize (default ll_pool_default_threads()) */
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
    enum ll_dtype weight_dtype;  /* dtype of the projection weights as stored (set by bind; for
                                    reports) */
    bool no_lm_head;             /* a headless checkpoint without lm_head, untied (set by
                                    bind): an embedding model; rows may want their hidden
                                    states, never logits */
    char body_prefix[40];        /* the decoder's tensor names start so (set by bind):
                                    config.weights_prefix, then "model." unless the checkpoint
                                    was saved from the headless model class */
    struct model_linear **linears; /* (n_linears) every linear weight of the family's struct, in
                                      bind order; the structs belong to m->weights */
    int n_linears, cap_linears;
    bool quantized;              /* every linear weight is quantized (stored so or at load) */
    enum model_qscheme qscheme;  /* their scheme, when quantized (each weight's q.type) */
    void *qmem;                  /* the planes quantized at load (one ll_huge_alloc), or NULL */
    size_t qmem_bytes;
    double quant_seconds;        /* time spent quantizing at load (0 when stored quantized) */
    void *pkmem;                 /* the packed bf16 planes (model_pack.h; ll_huge_alloc), or
                                    NULL */
    size_t pkmem_bytes;
    uint16_t *pkesc;             /* their escape table (bf16pack.h) */
    double pack_seconds;         /* time spent packing them */
    void *wmem;                  /* the linear weights copied from the mapping (model_copy.h;
                                    ll_huge_alloc), or NULL */
    size_t wmem_bytes;
};

/* Bytes of linear weight l's dense matrix as stored (n · k elements of its dtype). */
size_t model_linear_dense_bytes(const struct model_linear *l);

/* Open a Hugging Face model directory: config.json, generation_config.json (optional),
 * model.safetensors or model.safetensors.index.json + shards. Validates every tensor's dtype,
 * shape and byte range against the file and the config. With opts->quantize, the dense linear
 * weights are then quantized in parallel (logged with the time it took; a model stored in
 * another quantized scheme is refused, one stored in the same scheme is taken as is). What is
 * still read from the file mapping is then copied into memory (model_copy.h) unless
 * opts->keep_mapped, and with opts->pack_bf16 packed (model_pack.h). opts may be
 * NULL. On failure returns the error with a message naming the file and what is wrong (the
 * tensor, for a weight), and *out is NULL.
 * Returns LL_OK, LL_EIO, LL_EJSON, LL_EFORMAT, LL_EMODEL, LL_EUNSUPPORTED, LL_EINVAL (a weight
 * that cannot be quantized, e.g. non-finite; names it), LL_ENOMEM. */
enum ll_status model_open(struct model **out, const char *dir, const struct model_open_opts *opts,
                          struct ll_err *err);
/* The weights in a few words, for reports, into buf (NUL-terminated, truncated to size): "bf16",
 * "bf16 (packed at load in 1.20 s)", "q4_0 (stored; bf16 embedding)" or "q8_0 (quantized at
 * load in 5.12 s; bf16 embedding)". */
void model_weights_str(const struct model *m, char *buf, size_t size);
/* The model's family and shape in a few words, for reports: "qwen2, 28 layers, hidden 1536,
 * vocab 151936" or "qwen3_moe, 48 layers, hidden 2048, 128 experts (8 a token), vocab 151936". */
void model_shape_str(const struct model *m, char *buf, size_t size);
/* The name of the matmul variant m's linear layers run on: the integer GEMM's (qmatmul.h) for a
 * quantized model, else the dense GEMM's (matmul.h). */
const char *model_matmul_variant(const struct model *m);

/* Free everything model_open allocated (NULL is a no-op). */
void model_close(struct model *m);

#endif
