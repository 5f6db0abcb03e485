/*
 * mkmodel.c: writes random Qwen2 models in the Hugging Face layout (see mkmodel.h).
 *
 * model.safetensors is laid out as the safetensors library writes it: tensors sorted by name,
 * packed back to back, header = compact JSON with "__metadata__" {"format":"pt"} first and the
 * tensors in offset order, padded with spaces to a multiple of 8 bytes. The data section is
 * filled in fixed 8 MiB chunks of the file; worker threads take chunks from an atomic counter and
 * pwrite() them, so memory stays at one chunk per thread whatever the model size, and the bytes do
 * not depend on which thread wrote what.
 *
 * Element values: splitmix64 of (key(seed, name) + (i + 1) * golden ratio), whose four 16-bit
 * parts are summed (Irwin-Hall, close to normal), scaled, and rounded to bf16.
 * Called from the CLI thread; the only shared state while writing is the chunk counter and the
 * first error.
 */
#include "mkmodel.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "dtype.h"
#include "hash.h"
#include "json.h"
#include "model_dir.h"
#include "tokenizer.h"
#include "util.h"

#define CHUNK_BYTES ((uint64_t)8 << 20)
#define EMBED_STD 0.02 /* embeddings, lm_head, biases, and the spread of norm weights */

/* Files mkmodel writes; a directory holding only these may be replaced with force. */
static const char *const written_files[] = {
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
    "tokenizer_config.json",
};

enum ll_status mkmodel_preset(struct mkmodel_spec *s, const char *name, struct ll_err *err)
{
    memset(s, 0, sizeof *s);
    s->vocab_size = 151936;
    s->rope_theta = 10000.0;
    s->rms_eps = 1e-6;
    s->bos_token_id = s->eos_token_id = -1;
    if (!strcmp(name, "tiny")) {
        s->hidden_size = 64, s->n_layers = 2, s->n_heads = 4, s->n_kv_heads = 2;
        s->intermediate_size = 160, s->tied = true, s->max_position = 4096;
    } else if (!strcmp(name, "small")) {
        s->hidden_size = 256, s->n_layers = 4, s->n_heads = 4, s->n_kv_heads = 2;
        s->intermediate_size = 704, s->tied = true, s->max_position = 32768;
    } else if (!strcmp(name, "r1-1.5b")) { /* DeepSeek-R1-Distill-Qwen-1.5B */
        s->hidden_size = 1536, s->n_layers = 28, s->n_heads = 12, s->n_kv_heads = 2;
        s->intermediate_size = 8960, s->tied = false, s->max_position = 131072;
        s->max_window_layers = 21;
    } else if (!strcmp(name, "qwen3-0.6b") || !strcmp(name, "qwen3-1.7b")) { /* Qwen/Qwen3-* */
        bool small = !strcmp(name, "qwen3-0.6b");
        s->family = MKMODEL_QWEN3;
        s->hidden_size = small ? 1024 : 2048, s->n_layers = 28, s->n_heads = 16;
        s->n_kv_heads = 8, s->head_dim = 128, s->intermediate_size = small ? 3072 : 6144;
        s->tied = true, s->max_position = 40960, s->rope_theta = 1000000.0;
    } else if (!strcmp(name, "llama3.2-1b") || !strcmp(name, "llama3.2-3b")) {
        /* meta-llama/Llama-3.2-{1B,3B}(-Instruct) */
        bool small = !strcmp(name, "llama3.2-1b");
        s->family = MKMODEL_LLAMA;
        s->hidden_size = small ? 2048 : 3072, s->n_layers = small ? 16 : 28;
        s->n_heads = small ? 32 : 24, s->n_kv_heads = 8, s->head_dim = small ? 64 : 128;
        s->intermediate_size = 8192, s->vocab_size = 128256, s->tied = true;
        s->max_position = 131072, s->rope_theta = 500000.0, s->rms_eps = 1e-5;
        s->rope_factor = 32.0, s->rope_original_max = 8192;
    } else if (!strcmp(name, "llama3.1-8b")) {
        /* meta-llama/Llama-3.1-8B(-Instruct), deepseek-ai/DeepSeek-R1-Distill-Llama-8B */
        s->family = MKMODEL_LLAMA;
        s->hidden_size = 4096, s->n_layers = 32, s->n_heads = 32, s->n_kv_heads = 8;
        s->intermediate_size = 14336, s->vocab_size = 128256, s->tied = false;
        s->max_position = 131072, s->rope_theta = 500000.0, s->rms_eps = 1e-5;
        s->rope_factor = 8.0, s->rope_original_max = 8192;
    } else if (!strcmp(name, "qwen1.5-moe-a2.7b")) { /* Qwen/Qwen1.5-MoE-A2.7B(-Chat) */
        s->family = MKMODEL_QWEN2_MOE;
        s->hidden_size = 2048, s->n_layers = 24, s->n_heads = 16, s->n_kv_heads = 16;
        s->intermediate_size = 5632, s->tied = false, s->max_position = 8192;
        s->rope_theta = 1000000.0, s->max_window_layers = 21;
        s->n_experts = 60, s->n_experts_used = 4, s->moe_intermediate_size = 1408;
        s->shared_intermediate_size = 5632;
    } else if (!strcmp(name, "qwen3-30b-a3b")) { /* Qwen/Qwen3-30B-A3B, Qwen3-Coder-30B-A3B */
        s->family = MKMODEL_QWEN3_MOE;
        s->hidden_size = 2048, s->n_layers = 48, s->n_heads = 32, s->n_kv_heads = 4;
        s->head_dim = 128, s->intermediate_size = 6144, s->tied = false;
        s->max_position = 40960, s->rope_theta = 1000000.0;
        s->n_experts = 128, s->n_experts_used = 8, s->moe_intermediate_size = 768;
    } else if (!strcmp(name, "mistral-nemo-12b") || !strcmp(name, "mistral-small-24b")) {
        /* mistralai/Mistral-Nemo-{Base,Instruct}-2407; Mistral-Small-24B-*-2501 and 3.x's
         * text model (its tokenizer is a newer tekken) */
        bool nemo = !strcmp(name, "mistral-nemo-12b");
        s->family = MKMODEL_MISTRAL;
        s->hidden_size = 5120, s->n_layers = 40, s->n_heads = 32, s->n_kv_heads = 8;
        s->head_dim = 128, s->intermediate_size = nemo ? 14336 : 32768, s->vocab_size = 131072;
        s->tied = false, s->max_position = nemo ? 1024000 : 32768;
        s->rope_theta = nemo ? 1000000.0 : 100000000.0, s->rms_eps = 1e-5;
    } else if (!strcmp(name, "mistral-7b")) {
        /* mistralai/Mistral-7B-v0.1: its 4096-position sliding window caps the context */
        s->family = MKMODEL_MISTRAL;
        s->hidden_size = 4096, s->n_layers = 32, s->n_heads = 32, s->n_kv_heads = 8;
        s->intermediate_size = 14336, s->vocab_size = 32000, s->tied = false;
        s->max_position = 32768, s->rms_eps = 1e-5, s->sliding_window = 4096;
    } else if (!strcmp(name, "gemma3-1b")) { /* google/gemma-3-1b-{pt,it} */
        s->family = MKMODEL_GEMMA3;
        s->hidden_size = 1152, s->n_layers = 26, s->n_heads = 4, s->n_kv_heads = 1;
        s->head_dim = 256, s->intermediate_size = 6912, s->vocab_size = 262144, s->tied = true;
        s->max_position = 32768, s->rope_theta = 1000000.0, s->sliding_window = 512;
    } else if (!strcmp(name, "gemma2-2b")) { /* google/gemma-2-2b(-it) */
        s->family = MKMODEL_GEMMA2;
        s->hidden_size = 2304, s->n_layers = 26, s->n_heads = 8, s->n_kv_heads = 4;
        s->head_dim = 256, s->intermediate_size = 9216, s->vocab_size = 256000, s->tied = true;
        s->max_position = 8192, s->sliding_window = 4096;
    } else if (!strcmp(name, "phi3-mini") || !strcmp(name, "phi3.5-mini")) {
        /* microsoft/Phi-3-mini-4k-instruct (a window of 2047 over 4096 positions);
         * Phi-3.5-mini-instruct (longrope to 131072 from 4096; its window is longer than that) */
        bool v35 = !strcmp(name, "phi3.5-mini");
        s->family = MKMODEL_PHI3;
        s->hidden_size = 3072, s->n_layers = 32, s->n_heads = 32, s->n_kv_heads = 32;
        s->intermediate_size = 8192, s->vocab_size = 32064, s->tied = false, s->rms_eps = 1e-5;
        s->max_position = v35 ? 131072 : 4096, s->sliding_window = v35 ? 262144 : 2047;
        s->rope_original_max = v35 ? 4096 : 0;
    } else if (!strcmp(name, "phi4-mini")) { /* microsoft/Phi-4-mini-instruct */
        s->family = MKMODEL_PHI3;
        s->hidden_size = 3072, s->n_layers = 32, s->n_heads = 24, s->n_kv_heads = 8;
        s->intermediate_size = 8192, s->vocab_size = 200064, s->tied = true, s->rms_eps = 1e-5;
        s->max_position = 131072, s->sliding_window = 262144, s->rope_original_max = 4096;
        s->partial_rotary = 0.75;
    } else if (!strcmp(name, "smollm3-3b")) { /* HuggingFaceTB/SmolLM3-3B */
        s->family = MKMODEL_SMOLLM3;
        s->hidden_size = 2048, s->n_layers = 36, s->n_heads = 16, s->n_kv_heads = 4;
        s->intermediate_size = 11008, s->vocab_size = 128256, s->tied = true;
        s->max_position = 65536, s->rope_theta = 5000000.0;
    } else if (!strcmp(name, "granite3-2b") || !strcmp(name, "granite3-8b")) {
        /* ibm-granite/granite-3.1-{2b,8b}-instruct (granite-3.3's have 4 more tokens) */
        bool small = !strcmp(name, "granite3-2b");
        s->family = MKMODEL_GRANITE;
        s->hidden_size = small ? 2048 : 4096, s->n_layers = 40, s->n_heads = 32;
        s->n_kv_heads = 8, s->intermediate_size = small ? 8192 : 12800, s->vocab_size = 49155;
        s->tied = true, s->max_position = 131072, s->rope_theta = 10000000.0, s->rms_eps = 1e-5;
        s->multipliers[0] = 12.0, s->multipliers[1] = small ? 0.015625 : 0.0078125;
        s->multipliers[2] = 0.22, s->multipliers[3] = small ? 8.0 : 16.0;
    } else if (!strcmp(name, "granite3-1b-a400m")) { /* ibm-granite/granite-3.1-1b-a400m */
        s->family = MKMODEL_GRANITE_MOE;
        s->hidden_size = 1024, s->n_layers = 24, s->n_heads = 16, s->n_kv_heads = 8;
        s->intermediate_size = 512, s->vocab_size = 49155, s->tied = true;
        s->max_position = 131072, s->rope_theta = 10000000.0, s->rms_eps = 1e-6;
        s->n_experts = 32, s->n_experts_used = 8, s->moe_intermediate_size = 512;
        s->multipliers[0] = 12.0, s->multipliers[1] = 0.015625, s->multipliers[2] = 0.22;
        s->multipliers[3] = 6.0;
    } else {
        return ll_err_set(err, LL_EINVAL,
                          "unknown preset '%s' (known: tiny, small, r1-1.5b, qwen3-0.6b, "
                          "qwen3-1.7b, llama3.2-1b, llama3.2-3b, llama3.1-8b, "
                          "qwen1.5-moe-a2.7b, qwen3-30b-a3b, mistral-nemo-12b, "
                          "mistral-small-24b, mistral-7b, gemma2-2b, gemma3-1b, phi3-mini, "
                          "phi3.5-mini, phi4-mini, smollm3-3b, granite3-2b, granite3-8b, "
                          "granite3-1b-a400m)",
                          name);
    }
    return LL_OK;
}

static const char *const family_names[] = {
    [MKMODEL_QWEN2] = "qwen2",
    [MKMODEL_QWEN3] = "qwen3",
    [MKMODEL_LLAMA] = "llama",
    [MKMODEL_QWEN2_MOE] = "qwen2_moe",
    [MKMODEL_QWEN3_MOE] = "qwen3_moe",
    [MKMODEL_MISTRAL] = "mistral",
    [MKMODEL_GEMMA2] = "gemma2",
    [MKMODEL_GEMMA3] = "gemma3_text",
    [MKMODEL_PHI3] = "phi3",
    [MKMODEL_SMOLLM3] = "smollm3",
    [MKMODEL_GRANITE] = "granite",
    [MKMODEL_GRANITE_MOE] = "granitemoe",
};

const char *mkmodel_family_name(enum mkmodel_family f)
{
    return family_names[f];
}

bool mkmodel_family_parse(const char *name, enum mkmodel_family *f)
{
    for (size_t i = 0; i < LL_ARRAY_LEN(family_names); i++)
        if (!strcmp(name, family_names[i])) {
            *f = (enum mkmodel_family)i;
            return true;
        }
    return false;
}

bool mkmodel_family_moe(enum mkmodel_family f)
{
    return f == MKMODEL_QWEN2_MOE || f == MKMODEL_QWEN3_MOE || f == MKMODEL_GRANITE_MOE;
}

bool mkmodel_family_gemma(enum mkmodel_family f)
{
    return f == MKMODEL_GEMMA2 || f == MKMODEL_GEMMA3;
}

bool mkmodel_family_granite(enum mkmodel_family f)
{
    return f == MKMODEL_GRANITE || f == MKMODEL_GRANITE_MOE;
}

/* Whether s is of a Gemma family (its norms, windowed layers, tied lm_head). */
static bool gemma(const struct mkmodel_spec *s)
{
    return mkmodel_family_gemma(s->family);
}

/* Whether layer i of s has experts. */
static bool sparse_layer(const struct mkmodel_spec *s, int i)
{
    return mkmodel_family_moe(s->family) && !(i < 64 && (s->mlp_only >> i & 1));
}

static int head_dim_of(const struct mkmodel_spec *s)
{
    return s->head_dim ? s->head_dim : s->hidden_size / s->n_heads;
}

/* The rotated dims of a head (transformers' int(head_dim · partial_rotary_factor)). */
static int rope_dims(const struct mkmodel_spec *s)
{
    return s->partial_rotary ? (int)(head_dim_of(s) * s->partial_rotary) : head_dim_of(s);
}

#define LONGROPE_MAX 96 /* factors a list at most (Phi-3's 48) */

enum ll_status mkmodel_check(const struct mkmodel_spec *s, struct ll_err *err)
{
    const struct {
        const char *name;
        long long v, max;
    } lim[] = {
        {"hidden size", s->hidden_size, 1 << 16},
        {"intermediate size", s->intermediate_size, 1 << 20},
        {"layer count", s->n_layers, 1024},
        {"head count", s->n_heads, 1024},
        {"KV head count", s->n_kv_heads, 1024},
        {"vocab size", s->vocab_size, 1 << 24},
        {"max positions", s->max_position, 1 << 30},
    };
    for (size_t i = 0; i < LL_ARRAY_LEN(lim); i++)
        if (lim[i].v < 1 || lim[i].v > lim[i].max)
            return ll_err_set(err, LL_EINVAL, "%s %lld is out of range [1, %lld]", lim[i].name,
                              lim[i].v, lim[i].max);
    if (mkmodel_family_moe(s->family)) {
        if (s->n_experts < 1 || s->n_experts > 1024)
            return ll_err_set(err, LL_EINVAL, "expert count %d is out of range [1, 1024]",
                              s->n_experts);
        if (s->n_experts_used < 1 || s->n_experts_used > s->n_experts)
            return ll_err_set(err, LL_EINVAL, "experts used %d is out of range [1, %d]",
                              s->n_experts_used, s->n_experts);
        if (s->moe_intermediate_size < 1 || s->moe_intermediate_size > 1 << 20)
            return ll_err_set(err, LL_EINVAL, "expert MLP size %d is out of range [1, %d]",
                              s->moe_intermediate_size, 1 << 20);
        bool shared = s->family == MKMODEL_QWEN2_MOE;
        if (shared ? s->shared_intermediate_size < 1 || s->shared_intermediate_size > 1 << 20
                   : s->shared_intermediate_size != 0)
            return ll_err_set(err, LL_EINVAL, shared ? "shared expert MLP size %d is out of "
                                                       "range [1, 1048576]"
                                                     : "shared expert MLP size %d: only "
                                                       "qwen2_moe has a shared expert",
                              s->shared_intermediate_size);
        if (s->n_layers < 64 && s->mlp_only >> s->n_layers)
            return ll_err_set(err, LL_EINVAL, "a dense-MLP layer is past the %d layers",
                              s->n_layers);
        if (s->family == MKMODEL_GRANITE_MOE && s->mlp_only)
            return ll_err_set(err, LL_EINVAL, "every layer of a granitemoe model has experts");
    } else if (s->n_experts || s->mlp_only) {
        return ll_err_set(err, LL_EINVAL, "experts are for the qwen2_moe, qwen3_moe and "
                          "granitemoe families");
    }
    if (gemma(s) && (s->sliding_window < 1 || s->sliding_window > 1 << 30 || !s->tied))
        return ll_err_set(err, LL_EINVAL, "a %s model needs a sliding window in [1, 2^30] (%d) "
                          "and a tied lm_head", mkmodel_family_name(s->family),
                          s->sliding_window);
    if (!gemma(s) && s->family != MKMODEL_MISTRAL && s->family != MKMODEL_PHI3 &&
        s->sliding_window)
        return ll_err_set(err, LL_EINVAL, "a sliding window is for the mistral, phi3, gemma2 and "
                          "gemma3_text families");
    if (s->sliding_window < 0 || s->sliding_window > 1 << 30)
        return ll_err_set(err, LL_EINVAL, "sliding window %d is out of range [1, 2^30]",
                          s->sliding_window);
    if (s->head_dim < 0 || s->head_dim > 4096)
        return ll_err_set(err, LL_EINVAL, "head dim %d is out of range [1, 4096]", s->head_dim);
    if (s->n_heads % s->n_kv_heads)
        return ll_err_set(err, LL_EINVAL, "head count %d is not a multiple of KV head count %d",
                          s->n_heads, s->n_kv_heads);
    if (!s->head_dim && s->hidden_size % s->n_heads)
        return ll_err_set(err, LL_EINVAL, "hidden size %d is not a multiple of head count %d",
                          s->hidden_size, s->n_heads);
    if (head_dim_of(s) % 2)
        return ll_err_set(err, LL_EINVAL, "head dim %d is odd (RoPE needs pairs)", head_dim_of(s));
    if (s->max_window_layers < 0 || s->max_window_layers > s->n_layers)
        return ll_err_set(err, LL_EINVAL, "max_window_layers %d is out of range [0, %d]",
                          s->max_window_layers, s->n_layers);
    if (!(s->rope_theta > 0 && s->rope_theta < 1e12))
        return ll_err_set(err, LL_EINVAL, "rope theta %g is out of range (0, 1e12)",
                          s->rope_theta);
    if (s->rope_factor < 0 || s->rope_factor > 1e6 ||
        (s->family != MKMODEL_PHI3 && (s->rope_factor > 0) != (s->rope_original_max > 0)))
        return ll_err_set(err, LL_EINVAL,
                          "rope scaling: factor %g and original max positions %d must be both "
                          "given (factor in (0, 1e6]) or both absent",
                          s->rope_factor, s->rope_original_max);
    if (s->rope_factor > 0 && s->family != MKMODEL_LLAMA)
        return ll_err_set(err, LL_EINVAL, "rope scaling (\"llama3\") is for llama models only");
    if (s->family == MKMODEL_PHI3 && s->rope_factor > 0)
        return ll_err_set(err, LL_EINVAL, "a phi3 model's rope scaling is longrope: give only "
                          "the original max positions");
    if (s->family == MKMODEL_SMOLLM3 && s->n_layers > 256)
        return ll_err_set(err, LL_EINVAL, "a smollm3 model's no_rope_layers list is written for "
                          "at most 256 layers (%d)", s->n_layers);
    for (int i = 0; i < 4; i++)
        if (s->multipliers[i] < 0 || s->multipliers[i] > 1e6 ||
            (s->multipliers[i] && !mkmodel_family_granite(s->family)))
            return ll_err_set(err, LL_EINVAL, "multiplier %g: granite models only, in (0, 1e6]",
                              s->multipliers[i]);
    if (s->family != MKMODEL_PHI3 && s->partial_rotary)
        return ll_err_set(err, LL_EINVAL, "a partial rotary factor is for phi3 models only");
    if (s->partial_rotary < 0 || s->partial_rotary > 1 ||
        (s->partial_rotary && (rope_dims(s) < 2 || rope_dims(s) % 2)))
        return ll_err_set(err, LL_EINVAL, "partial rotary factor %g of head dim %d gives %d "
                          "rotary dims (must be even and at least 2)",
                          s->partial_rotary, head_dim_of(s), rope_dims(s));
    if (s->family == MKMODEL_PHI3 && s->rope_original_max && rope_dims(s) / 2 > LONGROPE_MAX)
        return ll_err_set(err, LL_EINVAL, "longrope over %d rotary dims: mkmodel writes at most "
                          "%d factors", rope_dims(s), LONGROPE_MAX);
    if (!(s->rms_eps > 0 && s->rms_eps < 1))
        return ll_err_set(err, LL_EINVAL, "rms eps %g is out of range (0, 1)", s->rms_eps);
    if (s->copy_period < 0 || s->copy_period == 1 || s->copy_period > s->vocab_size)
        return ll_err_set(err, LL_EINVAL, "copy period %d is out of range [2, vocab size %d]",
                          s->copy_period, s->vocab_size);
    if (s->copy_period && s->tied)
        return ll_err_set(err, LL_EINVAL, "a copy model needs an untied lm_head (--untied)");
    if (s->bos_token_id >= s->vocab_size || s->eos_token_id >= s->vocab_size)
        return ll_err_set(err, LL_EINVAL, "bos/eos id outside the vocabulary (%d)",
                          s->vocab_size);
    return LL_OK;
}

/* ---- the tensor list ---- */

struct gen_tensor {
    char name[80];
    int ndim;
    int64_t shape[3];
    uint64_t begin, end; /* data_offsets */
    uint64_t key;
    float scale;  /* std / std of the raw sum */
    float offset; /* 1 for norm weights, else 0 */
    /* copy model: lm_head row v is the row before v in its group of `period` rows of `src`
     * (the embedding: its key, scale and row length) */
    int period;
    int64_t rows, cols;
};

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001B3ull;
    return ll_mix64(ll_mix64(seed + LL_GOLDEN64) ^ h);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Distribution of tensor t: norm weights 1 + N(0, 0.02^2); embeddings, lm_head and biases
 * N(0, 0.02^2); projection matrices N(0, 1/fan_in), so that each sub-layer adds O(1) to the
 * residual stream whatever the width (for R1-1.5B's widths this is std 0.0255 and 0.0106, near
 * the 0.02 of Hugging Face's init). With a flat 0.02 a narrow tied model only ever predicts its
 * input token again, since the token's own embedding dominates the final hidden state. */
static void init_of(struct gen_tensor *t, const struct mkmodel_spec *s)
{
    double std = EMBED_STD;
    t->offset = 0.0f;
    if (ends_with(t->name, "layernorm.weight") || ends_with(t->name, "_norm.weight") ||
        !strcmp(t->name, "model.norm.weight"))
        t->offset = gemma(s) ? 0.0f : 1.0f; /* Gemma's norms multiply by 1 + w */
    else if (t->ndim >= 2 && strcmp(t->name, "model.embed_tokens.weight") &&
             strcmp(t->name, "lm_head.weight"))
        std = 1.0 / sqrt((double)t->shape[t->ndim - 1]); /* fan-in (a stack's too) */
    t->scale = (float)(std / 37837.23);
    if (s->copy_period && (ends_with(t->name, "o_proj.weight") ||
                           ends_with(t->name, "down_proj.weight")))
        t->scale = 0.0f; /* the layers leave the residual stream as it is */
    if (s->copy_period && !strcmp(t->name, "lm_head.weight")) {
        t->period = s->copy_period;
        t->rows = t->shape[0];
        t->cols = t->shape[1];
        t->key = name_key(s->seed, "model.embed_tokens.weight");
        t->scale = (float)(EMBED_STD / 37837.23);
    }
}

/* The bf16 bits of element i. Sum of four 16-bit uniforms: mean 131070, std 37837.23. */
static inline uint16_t gen_bf16(const struct gen_tensor *t, uint64_t i)
{
    if (t->scale == 0.0f)
        return 0;
    if (t->period) { /* element (v, c) is the embedding's (pred(v), c) */
        int64_t v = (int64_t)(i / (uint64_t)t->cols), c = (int64_t)(i % (uint64_t)t->cols);
        int64_t base = v / t->period * t->period;
        int64_t n = t->rows - base < t->period ? t->rows - base : t->period;
        int64_t pred = base + (v - base + n - 1) % n;
        i = (uint64_t)(pred * t->cols + c);
    }
    uint64_t r = ll_mix64(t->key + (i + 1) * LL_GOLDEN64);
    int32_t sum = (int32_t)(r & 0xFFFF) + (int32_t)((r >> 16) & 0xFFFF) +
                  (int32_t)((r >> 32) & 0xFFFF) + (int32_t)(r >> 48);
    return ll_f32_to_bf16((float)(sum - 131070) * t->scale + t->offset);
}

static int gen_cmp(const void *a, const void *b)
{
    return strcmp(((const struct gen_tensor *)a)->name, ((const struct gen_tensor *)b)->name);
}

/* Build the sorted tensor list with offsets. Returns the count; *out is malloc'd (NULL on no
 * memory). */
static size_t tensors_build(const struct mkmodel_spec *s, struct gen_tensor **out)
{
    const int64_t h = s->hidden_size, hd = head_dim_of(s), q = s->n_heads * hd,
                  kv = s->n_kv_heads * hd, ff = s->intermediate_size, v = s->vocab_size;
    const int64_t fe = s->moe_intermediate_size, fs = s->shared_intermediate_size;
    /* Qwen2's 12 a layer (Qwen3 has 11, Llama 9, Gemma 3 13); a sparse layer's MLP: a router, 3
     * an expert, 4 for the shared expert and its gate */
    size_t n = (size_t)s->n_layers * (12 + 1 + 3 * (size_t)s->n_experts + 4) + 3;
    struct gen_tensor *t = calloc(n, sizeof *t);
    *out = t;
    if (!t)
        return 0;
    size_t k = 0;
#define ADD(d0, d1, ...)                                                                     \
    do {                                                                                     \
        snprintf(t[k].name, sizeof t[k].name, __VA_ARGS__);                                  \
        t[k].ndim = (d1) ? 2 : 1;                                                            \
        t[k].shape[0] = (d0);                                                                \
        t[k].shape[1] = (d1);                                                                \
        k++;                                                                                 \
    } while (0)
#define ADD3(d0, d1, d2, ...) /* a stack of d0 (d1, d2) matrices */                          \
    do {                                                                                     \
        snprintf(t[k].name, sizeof t[k].name, __VA_ARGS__);                                  \
        t[k].ndim = 3;                                                                       \
        t[k].shape[0] = (d0);                                                                \
        t[k].shape[1] = (d1);                                                                \
        t[k].shape[2] = (d2);                                                                \
        k++;                                                                                 \
    } while (0)
    ADD(v, h, "model.embed_tokens.weight");
    ADD(h, 0, "model.norm.weight");
    if (!s->tied)
        ADD(v, h, "lm_head.weight");
    for (int i = 0; i < s->n_layers; i++) {
        ADD(h, 0, "model.layers.%d.input_layernorm.weight", i);
        if (s->family == MKMODEL_PHI3) { /* q, k and v fused; gate and up fused */
            ADD(q + 2 * kv, h, "model.layers.%d.self_attn.qkv_proj.weight", i);
            ADD(h, q, "model.layers.%d.self_attn.o_proj.weight", i);
            ADD(h, 0, "model.layers.%d.post_attention_layernorm.weight", i);
            ADD(2 * ff, h, "model.layers.%d.mlp.gate_up_proj.weight", i);
            ADD(h, ff, "model.layers.%d.mlp.down_proj.weight", i);
            continue;
        }
        if (s->family == MKMODEL_GRANITE_MOE) { /* Llama's attention; experts stacked */
            ADD(q, h, "model.layers.%d.self_attn.q_proj.weight", i);
            ADD(kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
            ADD(kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
            ADD(h, q, "model.layers.%d.self_attn.o_proj.weight", i);
            ADD(h, 0, "model.layers.%d.post_attention_layernorm.weight", i);
            ADD(s->n_experts, h, "model.layers.%d.block_sparse_moe.router.layer.weight", i);
            ADD3(s->n_experts, 2 * fe, h, "model.layers.%d.block_sparse_moe.input_linear.weight",
                 i);
            ADD3(s->n_experts, h, fe, "model.layers.%d.block_sparse_moe.output_linear.weight", i);
            continue;
        }
        ADD(q, h, "model.layers.%d.self_attn.q_proj.weight", i);
        ADD(kv, h, "model.layers.%d.self_attn.k_proj.weight", i);
        ADD(kv, h, "model.layers.%d.self_attn.v_proj.weight", i);
        bool qwen3 = s->family == MKMODEL_QWEN3 || s->family == MKMODEL_QWEN3_MOE;
        if (gemma(s)) {
            ADD(h, 0, "model.layers.%d.pre_feedforward_layernorm.weight", i);
            ADD(h, 0, "model.layers.%d.post_feedforward_layernorm.weight", i);
        }
        if (qwen3 || s->family == MKMODEL_GEMMA3) {
            ADD(hd, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            ADD(hd, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        } else if (s->family == MKMODEL_QWEN2 || s->family == MKMODEL_QWEN2_MOE) {
            ADD(q, 0, "model.layers.%d.self_attn.q_proj.bias", i);
            ADD(kv, 0, "model.layers.%d.self_attn.k_proj.bias", i);
            ADD(kv, 0, "model.layers.%d.self_attn.v_proj.bias", i);
        }
        ADD(h, q, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(h, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        if (!sparse_layer(s, i)) {
            ADD(ff, h, "model.layers.%d.mlp.gate_proj.weight", i);
            ADD(ff, h, "model.layers.%d.mlp.up_proj.weight", i);
            ADD(h, ff, "model.layers.%d.mlp.down_proj.weight", i);
            continue;
        }
        ADD(s->n_experts, h, "model.layers.%d.mlp.gate.weight", i);
        for (int e = 0; e < s->n_experts; e++) {
            ADD(fe, h, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, e);
            ADD(fe, h, "model.layers.%d.mlp.experts.%d.up_proj.weight", i, e);
            ADD(h, fe, "model.layers.%d.mlp.experts.%d.down_proj.weight", i, e);
        }
        if (fs) {
            ADD(1, h, "model.layers.%d.mlp.shared_expert_gate.weight", i);
            ADD(fs, h, "model.layers.%d.mlp.shared_expert.gate_proj.weight", i);
            ADD(fs, h, "model.layers.%d.mlp.shared_expert.up_proj.weight", i);
            ADD(h, fs, "model.layers.%d.mlp.shared_expert.down_proj.weight", i);
        }
    }
#undef ADD3
#undef ADD
    qsort(t, k, sizeof *t, gen_cmp);
    uint64_t off = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t elems = 1;
        for (int d = 0; d < t[i].ndim; d++)
            elems *= (uint64_t)t[i].shape[d];
        t[i].begin = off;
        t[i].end = off += elems * 2;
        t[i].key = name_key(s->seed, t[i].name);
        init_of(&t[i], s);
    }
    return k;
}

float mkmodel_weight(const struct mkmodel_spec *s, const char *name, uint64_t i)
{
    struct gen_tensor *t;
    size_t n = tensors_build(s, &t);
    float v = NAN;
    for (size_t k = 0; k < n; k++)
        if (!strcmp(t[k].name, name))
            v = ll_bf16_to_f32(gen_bf16(&t[k], i));
    free(t);
    return v;
}

/* The safetensors header (length prefix excluded), padded to a multiple of 8. malloc'd. */
static char *header_build(const struct gen_tensor *t, size_t n, size_t *len)
{
    size_t cap = 64 + n * 200, k = 0;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld", t[i].name,
                              (long long)t[i].shape[0]);
        for (int d = 1; d < t[i].ndim; d++)
            k += (size_t)snprintf(h + k, cap - k, ",%lld", (long long)t[i].shape[d]);
        k += (size_t)snprintf(h + k, cap - k, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)t[i].begin, (unsigned long long)t[i].end);
    }
    k += (size_t)snprintf(h + k, cap - k, "}");
    LL_ASSERT(k + 8 < cap);
    while (k % 8)
        h[k++] = ' ';
    *len = k;
    return h;
}

uint64_t mkmodel_file_size(const struct mkmodel_spec *s)
{
    struct gen_tensor *t;
    size_t n = tensors_build(s, &t), hl = 0;
    char *h = t ? header_build(t, n, &hl) : NULL;
    uint64_t size = h ? 8 + hl + t[n - 1].end : 0;
    free(h);
    free(t);
    return size;
}

/* ---- parallel data writer ---- */

struct writer {
    const struct gen_tensor *t;
    size_t n;
    uint64_t data_start, data_size, n_chunks;
    int fd;
    const char *path;
    uint64_t next_chunk; /* atomic */
    pthread_mutex_t lock;
    enum ll_status status; /* first error, under lock */
    struct ll_err err;
};

static void chunk_fill(const struct writer *w, uint64_t c0, uint64_t c1, uint16_t *buf)
{
    /* First tensor ending after c0 (binary search: offsets are increasing). */
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (w->t[mid].end <= c0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < w->n && w->t[i].begin < c1; i++) {
        const struct gen_tensor *t = &w->t[i];
        uint64_t a = t->begin > c0 ? t->begin : c0, b = t->end < c1 ? t->end : c1;
        uint16_t *dst = buf + (a - c0) / 2;
        uint64_t e0 = (a - t->begin) / 2, e1 = (b - t->begin) / 2;
        for (uint64_t e = e0; e < e1; e++)
            *dst++ = gen_bf16(t, e);
    }
}

static void writer_fail(struct writer *w, enum ll_status s, const char *what, int e)
{
    pthread_mutex_lock(&w->lock);
    if (w->status == LL_OK) {
        w->status = s;
        ll_err_set(&w->err, s, "%s: %s: %s", w->path, what, strerror(e));
    }
    pthread_mutex_unlock(&w->lock);
}

static void *writer_run(void *arg)
{
    struct writer *w = arg;
    uint16_t *buf = malloc(CHUNK_BYTES);
    if (!buf) {
        writer_fail(w, LL_ENOMEM, "chunk buffer", ENOMEM);
        return NULL;
    }
    for (;;) {
        uint64_t c = __atomic_fetch_add(&w->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= w->n_chunks)
            break;
        pthread_mutex_lock(&w->lock);
        bool failed = w->status != LL_OK;
        pthread_mutex_unlock(&w->lock);
        if (failed)
            break;
        uint64_t c0 = c * CHUNK_BYTES;
        uint64_t c1 = c0 + CHUNK_BYTES < w->data_size ? c0 + CHUNK_BYTES : w->data_size;
        chunk_fill(w, c0, c1, buf);
        const char *p = (const char *)buf;
        uint64_t left = c1 - c0, at = w->data_start + c0;
        while (left) {
            ssize_t k = pwrite(w->fd, p, left, (off_t)at);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                writer_fail(w, LL_EIO, "write failed", k < 0 ? errno : ENOSPC);
                break;
            }
            p += k, at += (uint64_t)k, left -= (uint64_t)k;
        }
    }
    free(buf);
    return NULL;
}

static enum ll_status safetensors_write(const struct mkmodel_spec *s, const char *path,
                                        int n_threads, struct ll_err *err)
{
    struct gen_tensor *t;
    size_t n = tensors_build(s, &t), hl = 0;
    char *hdr = t ? header_build(t, n, &hl) : NULL;
    if (!hdr) {
        free(t);
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    }
    enum ll_status st = LL_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
        goto out;
    }
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    struct writer w = {
        .t = t, .n = n, .data_start = 8 + hl, .data_size = t[n - 1].end, .fd = fd, .path = path,
    };
    w.n_chunks = (w.data_size + CHUNK_BYTES - 1) / CHUNK_BYTES;
    if (ftruncate(fd, (off_t)(w.data_start + w.data_size)) != 0 ||
        pwrite(fd, prefix, 8, 0) != 8 || pwrite(fd, hdr, hl, 8) != (ssize_t)hl) {
        st = ll_err_set(err, LL_EIO, "%s: write failed: %s", path, strerror(errno));
        close(fd);
        goto out;
    }
    pthread_mutex_init(&w.lock, NULL);
    pthread_t th[64];
    int started = 0;
    if (n_threads > (int)LL_ARRAY_LEN(th))
        n_threads = (int)LL_ARRAY_LEN(th);
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&th[started], NULL, writer_run, &w) == 0)
            started++;
    writer_run(&w);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&w.lock);
    if (w.status != LL_OK) {
        st = w.status;
        if (err)
            *err = w.err;
    }
    if (close(fd) != 0 && st == LL_OK)
        st = ll_err_set(err, LL_EIO, "%s: close failed: %s", path, strerror(errno));
out:
    free(hdr);
    free(t);
    return st;
}

/* ---- JSON files ---- */

/* A finite double the way Python's repr writes it: the shortest digits that read back the
 * same, positional for exponents in [-4, 16) (with ".0" on integers), scientific otherwise. */
static void py_float(char *buf, size_t size, double v)
{
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, size, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    snprintf(buf, size, "%.*e", prec - 1, v);
    int exp = atoi(strchr(buf, 'e') + 1);
    if (exp < -4 || exp >= 16)
        return;
    snprintf(buf, size, "%.*f", prec - 1 - exp > 0 ? prec - 1 - exp : 0, v);
    if (!strchr(buf, '.'))
        strncat(buf, ".0", size - strlen(buf) - 1);
}

/* config.json: the fields of each family's published configs, written as transformers'
 * to_json_string writes them (json.dumps with indent 2 and sorted keys). One list per model:
 * the fields every family has, then each family's own. */
#define CONFIG_FIELDS 48

struct config_field {
    const char *key;
    char value[3072]; /* JSON text; a nested line is indented for depth 1 */
};

struct config_doc {
    struct config_field f[CONFIG_FIELDS];
    int n;
};

static void put(struct config_doc *d, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void put(struct config_doc *d, const char *key, const char *fmt, ...)
{
    LL_ASSERT(d->n < CONFIG_FIELDS);
    d->f[d->n].key = key;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(d->f[d->n].value, sizeof d->f[d->n].value, fmt, ap);
    va_end(ap);
    LL_ASSERT(k > 0 && (size_t)k < sizeof d->f[d->n].value);
    d->n++;
}

static void put_float(struct config_doc *d, const char *key, double v)
{
    char buf[32];
    py_float(buf, sizeof buf, v);
    put(d, key, "%s", buf);
}

/* eos_token_id: one id as a number, several as a list (none: left out). */
static void put_eos(struct config_doc *d, const int *eos, int n)
{
    if (n == 1)
        put(d, "eos_token_id", "%d", eos[0]);
    else if (n == 2)
        put(d, "eos_token_id", "[\n    %d,\n    %d\n  ]", eos[0], eos[1]);
}

static int field_cmp(const void *a, const void *b)
{
    return strcmp(((const struct config_field *)a)->key, ((const struct config_field *)b)->key);
}

static enum ll_status config_doc_write(struct config_doc *d, const char *path, struct ll_err *err)
{
    qsort(d->f, (size_t)d->n, sizeof d->f[0], field_cmp);
    struct ll_buf b = {0};
    ll_buf_puts(&b, "{\n");
    for (int i = 0; i < d->n; i++)
        ll_buf_printf(&b, "  \"%s\": %s%s\n", d->f[i].key, d->f[i].value,
                      i + 1 < d->n ? "," : "");
    ll_buf_puts(&b, "}\n");
    enum ll_status st = b.failed ? ll_err_set(err, LL_ENOMEM, "out of memory")
                                 : ll_write_file(path, b.data, b.len, err);
    ll_buf_free(&b);
    return st;
}

static const char *const family_archs[] = {
    [MKMODEL_QWEN2] = "Qwen2ForCausalLM",     [MKMODEL_QWEN3] = "Qwen3ForCausalLM",
    [MKMODEL_LLAMA] = "LlamaForCausalLM",     [MKMODEL_QWEN2_MOE] = "Qwen2MoeForCausalLM",
    [MKMODEL_QWEN3_MOE] = "Qwen3MoeForCausalLM", [MKMODEL_MISTRAL] = "MistralForCausalLM",
    [MKMODEL_GEMMA2] = "Gemma2ForCausalLM",     [MKMODEL_GEMMA3] = "Gemma3ForCausalLM",
    [MKMODEL_PHI3] = "Phi3ForCausalLM",     [MKMODEL_SMOLLM3] = "SmolLM3ForCausalLM",
    [MKMODEL_GRANITE] = "GraniteForCausalLM", [MKMODEL_GRANITE_MOE] = "GraniteMoeForCausalLM",
};

/* the transformers version of the published config each family's fields follow */
static const char *const family_versions[] = {
    [MKMODEL_QWEN2] = "4.44.0",     [MKMODEL_QWEN3] = "4.51.0",     [MKMODEL_LLAMA] = "4.45.0",
    [MKMODEL_QWEN2_MOE] = "4.40.0", [MKMODEL_QWEN3_MOE] = "4.51.0", [MKMODEL_MISTRAL] = "4.43.0",
    [MKMODEL_GEMMA2] = "4.42.4",    [MKMODEL_GEMMA3] = "4.50.0.dev0", [MKMODEL_PHI3] = "4.43.3",
    [MKMODEL_SMOLLM3] = "4.54.0.dev0", [MKMODEL_GRANITE] = "4.47.0",
    [MKMODEL_GRANITE_MOE] = "4.47.0",
};

/* longrope's factor lists for n pairs, one number a line as transformers writes them: short
 * factors rising from 1 to 1.1, long ones from 1 to 40 (the shape of Phi-3.5's, not its
 * values). */
static void longrope_lists(char *buf, size_t size, int n)
{
    size_t k = 0;
    for (int list = 0; list < 2; list++) {
        k += (size_t)snprintf(buf + k, size - k, "%s\n    \"%s_factor\": [", list ? "," : "",
                              list ? "short" : "long");
        for (int i = 0; i < n; i++) {
            double x = n > 1 ? (double)i / (n - 1) : 0.0;
            double v = list ? 1.0 + 0.1 * x * x : 1.0 + 39.0 * x * x * x;
            k += (size_t)snprintf(buf + k, size - k, "%s\n      %.4f", i ? "," : "", v);
        }
        k += (size_t)snprintf(buf + k, size - k, "\n    ]");
    }
    LL_ASSERT(k < size);
}

static enum ll_status config_write(const struct mkmodel_spec *s, int bos, const int *eos,
                                   int n_eos, const char *path, struct ll_err *err)
{
    const enum mkmodel_family f = s->family;
    const bool qwen3 = f == MKMODEL_QWEN3 || f == MKMODEL_QWEN3_MOE;
    const bool qwen = qwen3 || f == MKMODEL_QWEN2 || f == MKMODEL_QWEN2_MOE;
    const bool moe = mkmodel_family_moe(f) && f != MKMODEL_GRANITE_MOE; /* Qwen's fields */
    const bool granite = mkmodel_family_granite(f);
    struct config_doc d = {.n = 0};

    put(&d, "architectures", "[\n    \"%s\"\n  ]", family_archs[f]);
    put(&d, "attention_dropout", "0.0");
    if (bos >= 0)
        put(&d, "bos_token_id", "%d", bos);
    put_eos(&d, eos, n_eos);
    if (s->head_dim)
        put(&d, "head_dim", "%d", s->head_dim);
    if (f != MKMODEL_GEMMA3)
        put(&d, "hidden_act", "\"%s\"", gemma(s) ? "gelu_pytorch_tanh" : "silu");
    put(&d, "hidden_size", "%d", s->hidden_size);
    put(&d, "initializer_range", "0.02");
    /* granitemoe's intermediate_size is its experts' width */
    put(&d, "intermediate_size", "%d",
        f == MKMODEL_GRANITE_MOE ? s->moe_intermediate_size : s->intermediate_size);
    put(&d, "max_position_embeddings", "%d", s->max_position);
    put(&d, "model_type", "\"%s\"", mkmodel_family_name(f));
    put(&d, "num_attention_heads", "%d", s->n_heads);
    put(&d, "num_hidden_layers", "%d", s->n_layers);
    put(&d, "num_key_value_heads", "%d", s->n_kv_heads);
    put_float(&d, "rms_norm_eps", s->rms_eps);
    put_float(&d, "rope_theta", s->rope_theta);
    put(&d, "tie_word_embeddings", "%s", s->tied ? "true" : "false");
    put(&d, "torch_dtype", "\"bfloat16\"");
    put(&d, "transformers_version", "\"%s\"", family_versions[f]);
    put(&d, "use_cache", "true");
    put(&d, "vocab_size", "%d", s->vocab_size);

    if (qwen3 || f == MKMODEL_LLAMA)
        put(&d, "attention_bias", "false");
    if (qwen) {
        put(&d, "max_window_layers", "%d", s->max_window_layers ? s->max_window_layers
                                                                : s->n_layers);
        put(&d, "sliding_window", "%s", qwen3 ? "null" : moe ? "32768" : "4096");
        put(&d, "use_sliding_window", "false");
    }
    if (qwen3)
        put(&d, "rope_scaling", "null");
    if (f == MKMODEL_QWEN2)
        put(&d, "use_mrope", "false");
    if (f == MKMODEL_LLAMA) {
        put(&d, "mlp_bias", "false");
        put(&d, "pretraining_tp", "1");
        if (s->rope_factor > 0) {
            char factor[32];
            py_float(factor, sizeof factor, s->rope_factor);
            put(&d, "rope_scaling",
                "{\n"
                "    \"factor\": %s,\n"
                "    \"high_freq_factor\": 4.0,\n"
                "    \"low_freq_factor\": 1.0,\n"
                "    \"original_max_position_embeddings\": %d,\n"
                "    \"rope_type\": \"llama3\"\n"
                "  }",
                factor, s->rope_original_max);
        } else {
            put(&d, "rope_scaling", "null");
        }
    }
    if (f == MKMODEL_SMOLLM3) { /* every fourth layer without RoPE, as the list says */
        char list[4 * 1024 + 16];
        size_t k = 0;
        for (int i = 0; i < s->n_layers; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s\n    %d", i ? "," : "[",
                                  (i + 1) % 4 != 0);
        snprintf(list + k, sizeof list - k, "\n  ]");
        put(&d, "attention_bias", "false");
        put(&d, "mlp_bias", "false");
        put(&d, "no_rope_layer_interval", "4");
        put(&d, "no_rope_layers", "%s", list);
        put(&d, "rope_scaling", "null");
        put(&d, "sliding_window", "null");
        put(&d, "use_sliding_window", "false");
    }
    if (f == MKMODEL_PHI3) {
        put(&d, "attention_bias", "false");
        put(&d, "embd_pdrop", "0.0");
        put(&d, "original_max_position_embeddings", "%d",
            s->rope_original_max ? s->rope_original_max : s->max_position);
        if (s->partial_rotary)
            put_float(&d, "partial_rotary_factor", s->partial_rotary);
        put(&d, "resid_pdrop", "0.0");
        if (s->rope_original_max) {
            char lists[2800];
            longrope_lists(lists, sizeof lists, rope_dims(s) / 2);
            put(&d, "rope_scaling", "{%s,\n    \"type\": \"longrope\"\n  }", lists);
        } else {
            put(&d, "rope_scaling", "null");
        }
        if (s->sliding_window)
            put(&d, "sliding_window", "%d", s->sliding_window);
        else
            put(&d, "sliding_window", "null");
    }
    if (granite) {
        const double dflt[4] = {12.0, 1.0 / head_dim_of(s), 0.22, 8.0};
        static const char *const key[4] = {"embedding_multiplier", "attention_multiplier",
                                           "residual_multiplier", "logits_scaling"};
        put(&d, "attention_bias", "false");
        for (int i = 0; i < 4; i++)
            put_float(&d, key[i], s->multipliers[i] > 0 ? s->multipliers[i] : dflt[i]);
        if (f == MKMODEL_GRANITE)
            put(&d, "mlp_bias", "false");
        put(&d, "rope_scaling", "null");
    }
    if (f == MKMODEL_GRANITE_MOE) {
        put(&d, "num_experts_per_tok", "%d", s->n_experts_used);
        put(&d, "num_local_experts", "%d", s->n_experts);
        put(&d, "output_router_logits", "false");
        put(&d, "router_aux_loss_coef", "0.0");
    }
    if (f == MKMODEL_MISTRAL && s->sliding_window) /* Mistral-7B v0.1's */
        put(&d, "sliding_window", "%d", s->sliding_window);
    else if (f == MKMODEL_MISTRAL)
        put(&d, "sliding_window", "null"); /* Mistral-Nemo's: full attention */
    if (gemma(s)) {
        bool g2 = f == MKMODEL_GEMMA2;
        put(&d, "attention_bias", "false");
        put(&d, "attn_logit_softcapping", "%s", g2 ? "50.0" : "null");
        put(&d, "cache_implementation", "\"hybrid\"");
        put(&d, "final_logit_softcapping", "%s", g2 ? "30.0" : "null");
        put(&d, "hidden_activation", "\"gelu_pytorch_tanh\"");
        put(&d, "pad_token_id", "0");
        put(&d, "query_pre_attn_scalar", "%d", head_dim_of(s));
        put(&d, "sliding_window", "%d", s->sliding_window);
        if (!g2) {
            put(&d, "rope_local_base_freq", "10000.0");
            put(&d, "rope_scaling", "null");
            put(&d, "sliding_window_pattern", "6");
        }
    }
    if (moe) {
        char only[64 * 8 + 8] = "[]";
        size_t k = 0;
        for (int i = 0; i < 64 && i < s->n_layers; i++)
            if (s->mlp_only >> i & 1)
                k += (size_t)snprintf(only + k, sizeof only - k, "%s\n    %d", k ? "," : "[", i);
        if (k)
            snprintf(only + k, sizeof only - k, "\n  ]");
        put(&d, "decoder_sparse_step", "1");
        put(&d, "mlp_only_layers", "%s", only);
        put(&d, "moe_intermediate_size", "%d", s->moe_intermediate_size);
        put(&d, "norm_topk_prob", "%s", qwen3 ? "true" : "false");
        put(&d, "num_experts", "%d", s->n_experts);
        put(&d, "num_experts_per_tok", "%d", s->n_experts_used);
        put(&d, "output_router_logits", "false");
        put(&d, "router_aux_loss_coef", "0.001");
        if (!qwen3)
            put(&d, "shared_expert_intermediate_size", "%d", s->shared_intermediate_size);
    }
    return config_doc_write(&d, path, err);
}

/* generation_config.json: the published sampling defaults of R1-Distill-Qwen, of Qwen3 (which
 * adds top_k) and of Llama 3.x Instruct (top_p 0.9); Mistral-Nemo's, Phi-3's and Granite's have
 * none. */
static enum ll_status generation_write(const struct mkmodel_spec *s, int bos, const int *eos,
                                       int n_eos, const char *path, struct ll_err *err)
{
    struct config_doc d = {.n = 0};
    put(&d, "_from_model_config", "true");
    if (bos >= 0)
        put(&d, "bos_token_id", "%d", bos);
    put_eos(&d, eos, n_eos);
    if (s->family != MKMODEL_MISTRAL && s->family != MKMODEL_PHI3 &&
        !mkmodel_family_granite(s->family)) {
        put(&d, "do_sample", "true");
        if (!gemma(s))
            put(&d, "temperature", "0.6");
        put(&d, "top_p", "%s", s->family == MKMODEL_LLAMA ? "0.9" : "0.95");
    }
    if (s->family == MKMODEL_QWEN3 || s->family == MKMODEL_QWEN3_MOE)
        put(&d, "top_k", "20");
    if (gemma(s))
        put(&d, "top_k", "64");
    return config_doc_write(&d, path, err);
}

/* ---- tokenizer files ---- */

/* The id of token text `content` in tokenizer.json (added tokens, then the model's vocab). */
static int token_id(const cJSON *tok, const char *content)
{
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    const cJSON *e;
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsString(c) && cJSON_IsNumber(id) && !strcmp(c->valuestring, content))
            return id->valueint;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(model, "vocab"), content);
    return cJSON_IsNumber(id) ? id->valueint : -1;
}

/* 1 + the largest token id tokenizer.json's model defines (its added tokens may lie past the
 * embedding: Gemma 3 1B's <image_soft_token> is id 262144 of a 262144-row model, and a request
 * naming such an id is refused by the engine). */
static int token_count(const cJSON *tok)
{
    int n = 0;
    const cJSON *e;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(model, "vocab"))
        if (cJSON_IsNumber(e) && e->valueint >= n)
            n = e->valueint + 1;
    return n;
}

struct file_text {
    char *text;
    size_t len;
};

/* Read the two tokenizer files, derive bos/eos ids when the spec leaves them -1, and check the
 * vocabulary covers the tokenizer. */
static enum ll_status tokenizer_files_read(const struct mkmodel_spec *s, const char *dir,
                                           struct file_text *tok_json, struct file_text *tok_cfg,
                                           int *bos, int *eos, int *eot, struct ll_err *err)
{
    char *p1 = ll_path_join(dir, "tokenizer.json"), *p2 = ll_path_join(dir, "tokenizer_config.json");
    cJSON *tok = NULL;
    struct tokenizer_config cfg = {0};
    enum ll_status st;
    if (!p1 || !p2) {
        st = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    /* The raw texts are copied as they are; tokenizer_config.json's fields come from its reader. */
    if ((st = ll_read_file(p1, &tok_json->text, &tok_json->len, err)) ||
        (st = ll_read_file(p2, &tok_cfg->text, &tok_cfg->len, err)) ||
        (st = ll_json_parse(&tok, tok_json->text, tok_json->len, p1, err)) ||
        (st = tokenizer_config_read(&cfg, dir, err)))
        goto out;
    /* Gemma's configs list both ends, <eos> and <end_of_turn> (an instruction model's turns) */
    *eot = -1;
    if (gemma(s)) {
        int e1 = token_id(tok, "<eos>"), e2 = token_id(tok, "<end_of_turn>");
        *eot = cfg.eos_token && e1 >= 0 && !strcmp(cfg.eos_token, "<end_of_turn>") ? e1 : e2;
    }
    int n_tok = token_count(tok);
    if (n_tok == 0) {
        st = ll_err_set(err, LL_ETOKENIZER, "%s: no tokens found", p1);
        goto out;
    }
    if (s->vocab_size < n_tok) {
        st = ll_err_set(err, LL_EINVAL, "vocab size %d is smaller than the tokenizer's %d "
                        "vocabulary tokens (%s)", s->vocab_size, n_tok, p1);
        goto out;
    }
    const char *names[2] = {"bos_token", "eos_token"}, *content[2] = {cfg.bos_token, cfg.eos_token};
    int *ids[2] = {bos, eos}, given[2] = {s->bos_token_id, s->eos_token_id};
    for (int i = 0; i < 2; i++) {
        *ids[i] = given[i];
        if (given[i] >= 0)
            continue;
        const char *c = content[i];
        if (!c && i == 0)
            continue; /* a tokenizer without a BOS (Qwen3's): the config names none either */
        if (!c) {
            st = ll_err_set(err, LL_ETOKENIZER, "%s: no %s", p2, names[i]);
            goto out;
        }
        if ((*ids[i] = token_id(tok, c)) < 0) {
            st = ll_err_set(err, LL_ETOKENIZER, "%s: %s '%s' is not in %s", p2, names[i], c, p1);
            goto out;
        }
    }
out:
    cJSON_Delete(tok);
    tokenizer_config_free(&cfg);
    free(p1);
    free(p2);
    return st;
}

/* ---- the directory ---- */

enum ll_status mkmodel_write(const struct mkmodel_spec *s, const char *tokenizer_dir,
                             const char *out_dir, int n_threads, bool force, struct ll_err *err)
{
    enum ll_status st = mkmodel_check(s, err);
    if (st != LL_OK)
        return st;
    struct model_dir_writer w;
    struct file_text tj = {0}, tc = {0};
    char *paths[LL_ARRAY_LEN(written_files)] = {0};
    if ((st = model_dir_begin(&w, out_dir, written_files, LL_ARRAY_LEN(written_files), force,
                              err)))
        goto out;
    int bos = s->bos_token_id, eos[2] = {s->eos_token_id, -1}, n_eos;
    if (tokenizer_dir &&
        (st = tokenizer_files_read(s, tokenizer_dir, &tj, &tc, &bos, &eos[0], &eos[1], err)))
        goto out;
    if (eos[0] < 0 || (eos[1] >= 0 && eos[1] < eos[0])) { /* ascending, as Gemma's [1, 106] */
        int t = eos[0];
        eos[0] = eos[1], eos[1] = t;
    }
    n_eos = (eos[0] >= 0) + (eos[1] >= 0 && eos[1] != eos[0]);
    for (size_t i = 0; i < LL_ARRAY_LEN(written_files); i++)
        if (!(paths[i] = model_dir_file(&w, written_files[i]))) {
            st = ll_err_set(err, LL_ENOMEM, "out of memory");
            goto out;
        }
    if ((st = config_write(s, bos, eos, n_eos, paths[0], err)) ||
        (st = generation_write(s, bos, eos, n_eos, paths[1], err)) ||
        (st = safetensors_write(s, paths[2], n_threads < 1 ? 1 : n_threads, err)))
        goto out;
    if (tokenizer_dir && ((st = ll_write_file(paths[3], tj.text, tj.len, err)) ||
                          (st = ll_write_file(paths[4], tc.text, tc.len, err))))
        goto out;
    st = model_dir_commit(&w, err);
out:
    model_dir_end(&w);
    for (size_t i = 0; i < LL_ARRAY_LEN(paths); i++)
        free(paths[i]);
    free(tj.text);
    free(tc.text);
    return st;
}
