/*
 * cmd_mkmodel.c: `llaisys-cli mkmodel`: write a random model directory of one of the families
 * mkmodel.h lists.
 * A preset gives the shape; flags override single fields.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "mkmodel.h"
#include "util.h"

static void mkmodel_usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli mkmodel [options] --tokenizer DIR OUT_DIR\n"
            "Writes a random Qwen2, Qwen3, Llama, Qwen2-MoE, Qwen3-MoE, Mistral, Gemma 2,\n"
            "Gemma 3 (text), Phi-3, SmolLM3, Granite or GraniteMoE model in the\n"
            "Hugging Face layout: config.json, generation_config.json, model.safetensors\n"
            "(bf16) and the tokenizer files of DIR.\n"
            "The output is byte-identical for the same options and seed.\n\n"
            "  --preset NAME        tiny (default), small, r1-1.5b\n"
            "                       (DeepSeek-R1-Distill-Qwen-1.5B), qwen3-0.6b, qwen3-1.7b\n"
            "                       (Qwen3's shapes), llama3.2-1b, llama3.2-3b, llama3.1-8b\n"
            "                       (also DeepSeek-R1-Distill-Llama-8B's shapes),\n"
            "                       qwen1.5-moe-a2.7b, qwen3-30b-a3b (mixtures of experts),\n"
            "                       mistral-nemo-12b, mistral-small-24b, mistral-7b\n"
            "                       (v0.1), gemma2-2b, gemma3-1b, phi3-mini (Phi-3-mini-4k),\n"
            "                       phi3.5-mini, phi4-mini, smollm3-3b, granite3-2b,\n"
            "                       granite3-8b (granite-3.1-2b/8b), granite3-1b-a400m\n"
            "  --family F           qwen2 (biases on q/k/v), qwen3 (per-head q/k norms, no\n"
            "                       biases), llama (neither), qwen2_moe or qwen3_moe (their\n"
            "                       attention, experts in the MLPs), mistral (Llama's\n"
            "                       decoder, Mistral's config), gemma2, gemma3_text (Gemma's\n"
            "                       norms, GeGLU and windowed layers; tied), phi3 (Llama's\n"
            "                       decoder from fused q/k/v and gate/up weights), smollm3\n"
            "                       (Llama's, every fourth layer without RoPE), granite\n"
            "                       (Llama's with four multipliers), granitemoe (Granite's,\n"
            "                       experts in every layer, stacked); default: the preset's\n"
            "  --window N           gemma2, gemma3_text: the windowed layers' sliding_window\n"
            "                       (default: the preset's, else 4096 / 512); mistral,\n"
            "                       phi3: config.json's sliding_window, every layer's\n"
            "                       (default: the preset's)\n"
            "  --experts N  --experts-used K  --moe-intermediate N  --shared-intermediate N\n"
            "                       the MoE families: N experts of which K run a token, their\n"
            "                       MLP width, qwen2_moe's shared expert's width (default for\n"
            "                       a dense preset: 8, 2, intermediate / 4, intermediate)\n"
            "  --mlp-only-layers L  comma-separated layers (< 64) with a dense MLP instead of\n"
            "                       experts (config.json's mlp_only_layers)\n"
            "  --seed N             weights seed (default 0)\n"
            "  --tokenizer DIR      copy tokenizer.json + tokenizer_config.json from DIR\n"
            "                       (bos/eos ids come from it); required\n"
            "  --hidden N  --layers N  --heads N  --kv-heads N  --head-dim N\n"
            "  --intermediate N  --vocab N  --max-pos N  --rope-theta X  --rms-eps X\n"
            "  --rope-factor X  --rope-original-max N\n"
            "                       llama: rope_scaling \"llama3\" with this factor and\n"
            "                       original_max_position_embeddings (low/high_freq_factor 1\n"
            "                       and 4); 0 for none (default: the preset's); phi3:\n"
            "                       --rope-original-max N alone gives rope_scaling\n"
            "                       \"longrope\" over N original positions (mkmodel's own\n"
            "                       factors)\n"
            "  --partial-rotary X   phi3: partial_rotary_factor (the share of a head's dims\n"
            "                       that turn; default: the preset's, else all)\n"
            "  --multipliers E,A,R,L\n"
            "                       granite, granitemoe: embedding_multiplier,\n"
            "                       attention_multiplier,\n"
            "                       residual_multiplier, logits_scaling (default: the\n"
            "                       preset's, else 12, 1/head_dim, 0.22, 8)\n"
            "  --tied | --untied    share lm_head with the embedding or not\n"
            "  --copy N             a copy model (needs --untied): same shapes and cost, but\n"
            "                       greedy decoding steps through t+1, t+2, ... within t's\n"
            "                       aligned group of N ids, so it repeats such runs (a workload\n"
            "                       for speculative decoding; see mkmodel.h)\n"
            "  --threads N          generator threads (default 2)\n"
            "  --force              replace OUT_DIR if it is a model directory mkmodel wrote\n");
}

/* The fields a flag may override, after the preset is applied. */
#define N_INTS 14
static const struct {
    const char *flag;
    size_t off;
    long long max;
} ints[N_INTS] = {
    {"--hidden", offsetof(struct mkmodel_spec, hidden_size), 1 << 16},
    {"--layers", offsetof(struct mkmodel_spec, n_layers), 1024},
    {"--heads", offsetof(struct mkmodel_spec, n_heads), 1024},
    {"--kv-heads", offsetof(struct mkmodel_spec, n_kv_heads), 1024},
    {"--head-dim", offsetof(struct mkmodel_spec, head_dim), 4096},
    {"--intermediate", offsetof(struct mkmodel_spec, intermediate_size), 1 << 20},
    {"--vocab", offsetof(struct mkmodel_spec, vocab_size), 1 << 24},
    {"--max-pos", offsetof(struct mkmodel_spec, max_position), 1 << 30},
    {"--copy", offsetof(struct mkmodel_spec, copy_period), 1 << 24},
    {"--experts", offsetof(struct mkmodel_spec, n_experts), 1024},
    {"--experts-used", offsetof(struct mkmodel_spec, n_experts_used), 1024},
    {"--moe-intermediate", offsetof(struct mkmodel_spec, moe_intermediate_size), 1 << 20},
    {"--shared-intermediate", offsetof(struct mkmodel_spec, shared_intermediate_size), 1 << 20},
    {"--window", offsetof(struct mkmodel_spec, sliding_window), 1 << 30},
};

int cmd_mkmodel(int argc, char **argv)
{
    const char *preset = "tiny", *tokenizer = NULL, *out = NULL, *family = NULL,
               *mlp_only = NULL, *mults = NULL;
    long long iv[N_INTS] = {0}, seed = 0, threads = 2;
    bool ig[N_INTS] = {0}, seed_g = false, theta_g = false, eps_g = false, tied_g = false;
    bool tied = false, force = false;
    double theta = 0, eps = 0, rope_factor = 0, partial = 0;
    long long rope_orig = 0;
    bool ig_rope[2] = {false, false}, partial_g = false;
    struct cli_arg args[N_INTS + 16] = {
        CLI_STR("--preset", &preset),
        CLI_STR("--multipliers", &mults),
        CLI_STR("--mlp-only-layers", &mlp_only),
        CLI_STR("--family", &family),
        CLI_STR("--tokenizer", &tokenizer),
        {.flag = "--seed", .kind = CLI_ARG_INT, .out = &seed, .imin = 0, .imax = LLONG_MAX,
         .given = &seed_g},
        {.flag = "--rope-theta", .kind = CLI_ARG_NUM, .out = &theta, .min = 0, .max = 1e300,
         .min_open = true, .given = &theta_g},
        {.flag = "--rms-eps", .kind = CLI_ARG_NUM, .out = &eps, .min = 0, .max = 1,
         .min_open = true, .given = &eps_g},
        CLI_INT("--threads", &threads, 1, 64),
        {.flag = "--tied", .kind = CLI_ARG_SET, .out = &tied, .given = &tied_g},
        {.flag = "--untied", .kind = CLI_ARG_CLEAR, .out = &tied, .given = &tied_g},
        CLI_SET("--force", &force),
        {.flag = "--rope-factor", .kind = CLI_ARG_NUM, .out = &rope_factor, .min = 0,
         .max = 1e6, .given = &ig_rope[0]},
        {.flag = "--rope-original-max", .kind = CLI_ARG_INT, .out = &rope_orig, .imin = 0,
         .imax = 1 << 30, .given = &ig_rope[1]},
        {.flag = "--partial-rotary", .kind = CLI_ARG_NUM, .out = &partial, .min = 0, .max = 1,
         .min_open = true, .given = &partial_g},
    };
    for (int k = 0; k < N_INTS; k++)
        args[15 + k] = (struct cli_arg){.flag = ints[k].flag, .kind = CLI_ARG_INT, .out = &iv[k],
                                       .imin = 1, .imax = ints[k].max, .given = &ig[k]};
    args[N_INTS + 15] = (struct cli_arg)CLI_END;
    const char *pos[1] = {NULL};
    const struct cli_cmd cmd = {.name = "mkmodel", .usage = mkmodel_usage, .args = args,
                                .pos = pos, .max_pos = 1};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    out = pos[0];
    if (!out)
        return cli_args_fail(&cmd, "missing OUT_DIR");
    if (!tokenizer)
        return cli_args_fail(&cmd, "missing --tokenizer DIR");
    struct ll_err err = {0};
    struct mkmodel_spec s;
    if (mkmodel_preset(&s, preset, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli mkmodel: %s\n", err.msg);
        return 2;
    }
    if (family && !mkmodel_family_parse(family, &s.family))
        return cli_args_fail(&cmd, "--family must be qwen2, qwen3, llama, qwen2_moe, qwen3_moe, "
                                   "mistral, gemma2, gemma3_text, phi3, smollm3, granite or "
                                   "granitemoe");
    bool gemma = mkmodel_family_gemma(s.family), phi3 = s.family == MKMODEL_PHI3;
    if (!gemma && s.family != MKMODEL_MISTRAL && !phi3)
        s.sliding_window = 0; /* a gemma, mistral or phi3 preset's, for another family */
    else if (gemma && !s.sliding_window)
        s.sliding_window = s.family == MKMODEL_GEMMA2 ? 4096 : 512;
    if (gemma && !tied_g)
        s.tied = true; /* Gemma's lm_head is its embedding */
    /* a MoE preset's experts, for a dense family (and its shared expert, for qwen3_moe) */
    if (!mkmodel_family_moe(s.family))
        s.n_experts = s.n_experts_used = s.moe_intermediate_size = 0;
    if (s.family != MKMODEL_QWEN2_MOE)
        s.shared_intermediate_size = 0;
    for (const char *p = mlp_only; p && *p;) {
        char *end;
        long l = strtol(p, &end, 10);
        if (end == p || l < 0 || l >= 64 || (*end && *end != ','))
            return cli_args_fail(&cmd, "--mlp-only-layers takes layer numbers below 64, "
                                       "comma-separated");
        s.mlp_only |= (uint64_t)1 << l;
        p = *end ? end + 1 : end;
    }
    if (s.family != MKMODEL_LLAMA && !ig_rope[0])
        s.rope_factor = 0; /* a llama preset's, for another family */
    if (s.family != MKMODEL_LLAMA && !phi3 && !ig_rope[1])
        s.rope_original_max = 0; /* a llama or phi3 preset's, for another family */
    if (!phi3)
        s.partial_rotary = 0;
    if (!mkmodel_family_granite(s.family))
        memset(s.multipliers, 0, sizeof s.multipliers); /* a granite preset's */
    if (mults) {
        const char *p = mults;
        for (int i = 0; i < 4; i++) {
            char *end;
            double v = strtod(p, &end);
            if (end == p || !(v > 0 && v <= 1e6) || *end != (i < 3 ? ',' : '\0'))
                return cli_args_fail(&cmd, "--multipliers takes four numbers in (0, 1e6], "
                                           "comma-separated: E,A,R,L");
            s.multipliers[i] = v;
            p = end + (i < 3);
        }
    }
    if (partial_g)
        s.partial_rotary = partial;
    if (ig_rope[0])
        s.rope_factor = rope_factor;
    if (ig_rope[1])
        s.rope_original_max = (int)rope_orig;
    for (int k = 0; k < N_INTS; k++)
        if (ig[k])
            *(int *)((char *)&s + ints[k].off) = (int)iv[k];
    if (mkmodel_family_moe(s.family)) { /* what a dense preset lacks, from the final shapes */
        if (!s.n_experts)
            s.n_experts = 8;
        if (!s.n_experts_used)
            s.n_experts_used = s.n_experts < 2 ? s.n_experts : 2;
        if (!s.moe_intermediate_size)
            s.moe_intermediate_size = s.intermediate_size / 4 ? s.intermediate_size / 4 : 1;
        if (s.family == MKMODEL_QWEN2_MOE && !s.shared_intermediate_size)
            s.shared_intermediate_size = s.intermediate_size;
    }
    if (seed_g)
        s.seed = (uint64_t)seed;
    if (theta_g)
        s.rope_theta = theta;
    if (eps_g)
        s.rms_eps = eps;
    if (tied_g)
        s.tied = tied;
    if (s.max_window_layers > s.n_layers)
        s.max_window_layers = s.n_layers; /* a preset's value, after --layers shrank the model */

    double t0 = ll_now();
    if (mkmodel_write(&s, tokenizer, out, (int)threads, force, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli mkmodel: %s\n", err.msg);
        return 1;
    }
    double mb = (double)mkmodel_file_size(&s) / 1e6;
    char mlp[96] = "";
    if (s.family != MKMODEL_GRANITE_MOE) /* whose every layer has experts */
        snprintf(mlp, sizeof mlp, ", MLP %d", s.intermediate_size);
    if (s.n_experts)
        snprintf(mlp + strlen(mlp), sizeof mlp - strlen(mlp), ", %d experts (%d a token) of MLP %d",
                 s.n_experts, s.n_experts_used, s.moe_intermediate_size);
    fprintf(stderr,
            "mkmodel: wrote %s (%s, hidden %d, %d layers, %d/%d heads%s, vocab %d, %s%s; "
            "model.safetensors %.1f MB) in %.2f s\n",
            out, mkmodel_family_name(s.family), s.hidden_size, s.n_layers,
            s.n_heads, s.n_kv_heads, mlp, s.vocab_size,
            s.tied ? "tied" : "untied", s.copy_period ? ", copy model" : "", mb, ll_now() - t0);
    return 0;
}
