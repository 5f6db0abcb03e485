/*
 * model_registry.c: the table of model families (see model_registry.h). One entry per family;
 * this table is the only place that knows which families exist.
 */
#include "model_registry.h"
#include "mock.h"
#include "qwen2.h"

#include <stdio.h>
#include <string.h>

static const char *const qwen2_archs[] = {"Qwen2ForCausalLM", NULL};
static const char *const qwen3_archs[] = {"Qwen3ForCausalLM", NULL};
static const char *const llama_archs[] = {"LlamaForCausalLM", NULL};
static const char *const qwen2_moe_archs[] = {"Qwen2MoeForCausalLM", NULL};
static const char *const qwen3_moe_archs[] = {"Qwen3MoeForCausalLM", NULL};
static const char *const mistral_archs[] = {"MistralForCausalLM", NULL};
static const char *const gemma2_archs[] = {"Gemma2ForCausalLM", NULL};
static const char *const gemma3_archs[] = {"Gemma3ForCausalLM", NULL};
static const char *const gemma3_mm_archs[] = {"Gemma3ForConditionalGeneration", NULL};
static const char *const phi3_archs[] = {"Phi3ForCausalLM", NULL};
static const char *const smollm3_archs[] = {"SmolLM3ForCausalLM", NULL};
static const char *const granite_archs[] = {"GraniteForCausalLM", NULL};
static const char *const granitemoe_archs[] = {"GraniteMoeForCausalLM", NULL};

/* transformers' Gemma3TextConfig defaults for the fields a Gemma 3 config.json leaves out (the
 * text_config of the 4B, 12B and 27B checkpoints gives only what differs from them) */
/* transformers' Gemma2Config ties the lm_head to the embedding; its configs leave that out */
static const char gemma2_defaults[] = "{\"tie_word_embeddings\": true}";

static const char gemma3_defaults[] =
    "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216, "
    "\"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
    "\"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\", "
    "\"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, "
    "\"query_pre_attn_scalar\": 256, \"sliding_window\": 4096, "
    "\"rope_local_base_freq\": 10000.0, \"sliding_window_pattern\": 6, "
    "\"tie_word_embeddings\": true, \"bos_token_id\": 2, \"eos_token_id\": 1}";

/* transformers' Phi3Config defaults that change the math where a config.json leaves them out
 * (the original context is longrope's) */
static const char phi3_defaults[] =
    "{\"max_position_embeddings\": 4096, \"original_max_position_embeddings\": 4096, "
    "\"rms_norm_eps\": 1e-5}";

/* transformers' SmolLM3Config: without no_rope_layers, every fourth layer has no RoPE */
static const char smollm3_defaults[] = "{\"no_rope_layer_interval\": 4}";

/* transformers' GraniteConfig and GraniteMoeConfig: a context of 2048, and no multiplier is
 * 1/√head_dim */
static const char granite_defaults[] =
    "{\"max_position_embeddings\": 2048, \"embedding_multiplier\": 1.0, "
    "\"attention_multiplier\": 1.0, \"residual_multiplier\": 1.0, \"logits_scaling\": 1.0}";

/* What every family over the Qwen2 decoder (qwen2.h) shares: its unbind and forward pass. */
#define QWEN2_DECODER                                                                        \
    .unbind = qwen2_unbind, .runtime_create = qwen2_runtime_create,                          \
    .runtime_free = qwen2_runtime_free, .forward = qwen2_forward

static const struct model_family families[] = {
    {
        .model_type = "qwen2",
        .architectures = qwen2_archs,
        .bind = qwen2_bind,
        QWEN2_DECODER,
    },
    {
        /* Qwen2's forward pass with per-head q/k norms (qwen2.h) */
        .model_type = "qwen3",
        .architectures = qwen3_archs,
        .bind = qwen3_bind,
        QWEN2_DECODER,
    },
    {
        /* Qwen2's forward pass without biases (qwen2.h) */
        .model_type = "llama",
        .architectures = llama_archs,
        .bind = llama_bind,
        QWEN2_DECODER,
    },
    {
        /* Qwen2's forward pass with experts and a shared expert in the sparse layers */
        .model_type = "qwen2_moe",
        .architectures = qwen2_moe_archs,
        .bind = qwen2_moe_bind,
        QWEN2_DECODER,
    },
    {
        /* Qwen3's forward pass with experts in the sparse layers */
        .model_type = "qwen3_moe",
        .architectures = qwen3_moe_archs,
        .bind = qwen3_moe_bind,
        QWEN2_DECODER,
    },
    {
        /* Llama's forward pass; sliding_window in every layer when shorter than the context */
        .model_type = "mistral",
        .architectures = mistral_archs,
        .window_unswitched = true,
        .bind = llama_bind,
        QWEN2_DECODER,
    },
    {
        /* Qwen2's forward pass with Gemma's norms, GeGLU, softcaps and a sliding window on
         * every other layer (qwen2.h) */
        .model_type = "gemma2",
        .architectures = gemma2_archs,
        .window_period = 2,
        .config_defaults = gemma2_defaults,
        .bind = gemma2_bind,
        QWEN2_DECODER,
    },
    {
        /* Gemma 2's pass with per-head q/k norms, no softcaps, five windowed layers in six
         * with RoPE of their own base */
        .model_type = "gemma3_text",
        .architectures = gemma3_archs,
        .window_period = 6,
        .config_defaults = gemma3_defaults,
        .bind = gemma3_bind,
        QWEN2_DECODER,
    },
    {
        /* Gemma 3 4B and up (image and text): the text model alone, its config.json's
         * text_config and its weights under language_model. */
        .model_type = "gemma3",
        .architectures = gemma3_mm_archs,
        .window_period = 6,
        .config_defaults = gemma3_defaults,
        .text_config = true,
        .weights_prefix = "language_model.",
        .bind = gemma3_bind,
        QWEN2_DECODER,
    },
    {
        /* Llama's forward pass from fused q/k/v and gate/up weights; sliding_window in every
         * layer when shorter than the context; longrope; partial rotary (Phi-4-mini) */
        .model_type = "phi3",
        .architectures = phi3_archs,
        .window_unswitched = true,
        .config_defaults = phi3_defaults,
        .bind = phi3_bind,
        QWEN2_DECODER,
    },
    {
        /* Llama's forward pass without RoPE in the layers no_rope_layers names (every fourth) */
        .model_type = "smollm3",
        .architectures = smollm3_archs,
        .config_defaults = smollm3_defaults,
        .bind = llama_bind,
        QWEN2_DECODER,
    },
    {
        /* Llama's forward pass with Granite's four multipliers (embedding, attention scale,
         * residual, logits) */
        .model_type = "granite",
        .architectures = granite_archs,
        .multipliers = true,
        .config_defaults = granite_defaults,
        .bind = llama_bind,
        QWEN2_DECODER,
    },
    {
        /* Granite's pass with experts in every layer, stacked in block_sparse_moe's 3-D
         * input_linear and output_linear */
        .model_type = "granitemoe",
        .architectures = granitemoe_archs,
        .multipliers = true,
        .local_experts = true,
        .config_defaults = granite_defaults,
        .bind = granitemoe_bind,
        QWEN2_DECODER,
    },
    {
        /* deterministic logits without weights, for tests (mock.c) */
        .model_type = "mock",
        .no_weights = true,
        .bind = mock_bind,
        .unbind = mock_unbind,
        .runtime_create = mock_runtime_create,
        .runtime_free = mock_runtime_free,
        .forward = mock_forward,
    },
};

const struct model_family *model_registry_find(const char *model_type)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (!strcmp(families[i].model_type, model_type))
            return &families[i];
    return NULL;
}

const struct model_family *model_registry_find_arch(const char *architecture)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        for (const char *const *a = families[i].architectures; a && *a; a++)
            if (!strcmp(*a, architecture))
                return &families[i];
    return NULL;
}

void model_registry_names(char *buf, size_t size)
{
    size_t n = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof families / sizeof families[0] && n < size; i++) {
        int k = snprintf(buf + n, size - n, "%s%s", i ? ", " : "", families[i].model_type);
        if (k < 0)
            break;
        n += (size_t)k;
    }
}
