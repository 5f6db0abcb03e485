/*
 * cmd_mkmodel.c: `llaisys-cli mkmodel`: write a random Qwen2 model directory (see mkmodel.h).
 * A preset gives the shape; flags override single fields.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "mkmodel.h"
#include "util.h"

static void mkmodel_usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli mkmodel [options] --tokenizer DIR OUT_DIR\n"
            "Writes a random Qwen2 model in the Hugging Face layout: config.json,\n"
            "generation_config.json, model.safetensors (bf16) and the tokenizer files of DIR.\n"
            "The output is byte-identical for the same options and seed.\n\n"
            "  --preset NAME        tiny (default), small, r1-1.5b (DeepSeek-R1-Distill-Qwen-1.5B)\n"
            "  --seed N             weights seed (default 0)\n"
            "  --tokenizer DIR      copy tokenizer.json + tokenizer_config.json from DIR\n"
            "                       (bos/eos ids come from it); required\n"
            "  --hidden N  --layers N  --heads N  --kv-heads N  --head-dim N\n"
            "  --intermediate N  --vocab N  --max-pos N  --rope-theta X  --rms-eps X\n"
            "  --tied | --untied    share lm_head with the embedding or not\n"
            "  --copy N             a copy model (needs --untied): same shapes and cost, but\n"
            "                       greedy decoding steps through t+1, t+2, ... within t's\n"
            "                       aligned group of N ids, so it repeats such runs (a workload\n"
            "                       for speculative decoding; see mkmodel.h)\n"
            "  --threads N          generator threads (default 2)\n"
            "  --force              replace OUT_DIR if it is a model directory mkmodel wrote\n");
}

static int parse_int(const char *flag, const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "llaisys-cli mkmodel: %s needs an integer in [%lld, %lld], got '%s'\n",
                flag, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "llaisys-cli mkmodel: %s needs a number, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_mkmodel(int argc, char **argv)
{
    const char *preset = "tiny", *tokenizer = NULL, *out = NULL;
    struct ll_err err = {0};
    /* First pass: the preset, since the other flags override its fields. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            mkmodel_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            preset = argv[++i];
    }
    struct mkmodel_spec s;
    if (mkmodel_preset(&s, preset, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli mkmodel: %s\n", err.msg);
        return 2;
    }
    long long threads = 2;
    bool force = false;
    static const struct {
        const char *flag;
        size_t off;
        long long max;
    } ints[] = {
        {"--hidden", offsetof(struct mkmodel_spec, hidden_size), 1 << 16},
        {"--layers", offsetof(struct mkmodel_spec, n_layers), 1024},
        {"--heads", offsetof(struct mkmodel_spec, n_heads), 1024},
        {"--kv-heads", offsetof(struct mkmodel_spec, n_kv_heads), 1024},
        {"--head-dim", offsetof(struct mkmodel_spec, head_dim), 4096},
        {"--intermediate", offsetof(struct mkmodel_spec, intermediate_size), 1 << 20},
        {"--vocab", offsetof(struct mkmodel_spec, vocab_size), 1 << 24},
        {"--max-pos", offsetof(struct mkmodel_spec, max_position), 1 << 30},
        {"--copy", offsetof(struct mkmodel_spec, copy_period), 1 << 24},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        long long v;
        bool matched = false;
        for (size_t k = 0; k < LL_ARRAY_LEN(ints) && !matched; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            matched = true;
            if (!has_val || parse_int(a, argv[++i], 1, ints[k].max, &v))
                goto missing;
            *(int *)((char *)&s + ints[k].off) = (int)v;
        }
        if (matched)
            continue;
        if (!strcmp(a, "--preset")) {
            i++; /* handled above */
        } else if (!strcmp(a, "--seed")) {
            char *end;
            if (!has_val)
                goto missing;
            errno = 0;
            const char *sv = argv[++i];
            s.seed = strtoull(sv, &end, 10);
            if (errno || end == sv || *end || *sv == '-') {
                fprintf(stderr, "llaisys-cli mkmodel: --seed needs a non-negative integer, got "
                                "'%s'\n", sv);
                return 2;
            }
        } else if (!strcmp(a, "--tokenizer")) {
            if (!has_val)
                goto missing;
            tokenizer = argv[++i];
        } else if (!strcmp(a, "--rope-theta") || !strcmp(a, "--rms-eps")) {
            double *dst = !strcmp(a, "--rope-theta") ? &s.rope_theta : &s.rms_eps;
            if (!has_val || parse_double(a, argv[++i], dst))
                goto missing;
        } else if (!strcmp(a, "--threads")) {
            if (!has_val || parse_int(a, argv[++i], 1, 64, &threads))
                goto missing;
        } else if (!strcmp(a, "--tied")) {
            s.tied = true;
        } else if (!strcmp(a, "--untied")) {
            s.tied = false;
        } else if (!strcmp(a, "--force")) {
            force = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "llaisys-cli mkmodel: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "llaisys-cli mkmodel: more than one output directory ('%s', '%s')\n",
                    out, a);
            return 2;
        }
        continue;
    missing:
        if (!has_val)
            fprintf(stderr, "llaisys-cli mkmodel: %s needs a value\n", a);
        return 2;
    }
    if (!out || !tokenizer) {
        fprintf(stderr, "llaisys-cli mkmodel: %s (see --help)\n",
                !out ? "missing OUT_DIR" : "missing --tokenizer DIR");
        return 2;
    }
    if (s.max_window_layers > s.n_layers)
        s.max_window_layers = s.n_layers; /* a preset's value, after --layers shrank the model */

    double t0 = ll_now();
    if (mkmodel_write(&s, tokenizer, out, (int)threads, force, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli mkmodel: %s\n", err.msg);
        return 1;
    }
    double mb = (double)mkmodel_file_size(&s) / 1e6;
    fprintf(stderr, "mkmodel: wrote %s (hidden %d, %d layers, %d/%d heads, MLP %d, vocab %d, %s%s; "
                    "model.safetensors %.1f MB) in %.2f s\n",
            out, s.hidden_size, s.n_layers, s.n_heads, s.n_kv_heads, s.intermediate_size,
            s.vocab_size, s.tied ? "tied" : "untied", s.copy_period ? ", copy model" : "", mb,
            ll_now() - t0);
    return 0;
}
