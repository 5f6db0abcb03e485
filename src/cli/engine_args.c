/* engine_args.c: see engine_args.h. */
#include "engine_args.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "run_common.h"

void engine_args_usage(FILE *f)
{
    fprintf(f,
            "engine options:\n"
            "  --threads N           compute threads (default 2)\n"
            "  --ctx N               positions per sequence (default min(4096, max_position))\n"
            "  --max-seqs N          sequences running at once (default 16)\n"
            "  --max-batch-tokens N  tokens per step, decode + prompt chunks (default 256)\n"
            "  --max-queue N         requests waiting to start before 'overloaded' (default 256)\n"
            "  --kv-blocks N         KV cache blocks (default: max-seqs x ctx / 4 tokens' worth)\n"
            "  --kv-memory BYTES     KV cache size instead (suffix K, M or G: powers of 1024)\n"
            "  --block-size N        tokens per KV block (default 16)\n"
            "  --no-prefix-cache     never share prompt prefixes between requests\n"
            "  --exact               f32 activations and KV cache (default: bf16 fast path)\n");
}

static int parse_bytes(const char *cmd, const char *flag, const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30, end++;
    if (*end == 'i' && mul > 1)
        end++;
    if (*end == 'B')
        end++;
    if (errno || end == s || *end || s[0] == '-' || v == 0 || v > (1ull << 50) / mul) {
        fprintf(stderr, "llaisys-cli %s: %s needs a size in bytes (e.g. 512M, 2G), got '%s'\n",
                cmd, flag, s);
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int engine_args_parse(const char *cmd, int argc, char **argv, int *i, struct engine_opts *o)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--exact")) {
        o->exact = true;
        return 1;
    }
    if (!strcmp(a, "--no-prefix-cache")) {
        o->no_prefix_cache = true;
        return 1;
    }
    static const struct {
        const char *flag;
        long long min, max;
        size_t off;
    } ints[] = {
        {"--threads", 1, 256, offsetof(struct engine_opts, n_threads)},
        {"--ctx", 2, 1 << 24, offsetof(struct engine_opts, n_ctx)},
        {"--max-seqs", 1, 4096, offsetof(struct engine_opts, max_seqs)},
        {"--max-batch-tokens", 1, 65536, offsetof(struct engine_opts, max_batch_tokens)},
        {"--max-queue", 1, 1 << 24, offsetof(struct engine_opts, max_queue)},
        {"--kv-blocks", 1, 1 << 24, offsetof(struct engine_opts, kv_blocks)},
        {"--block-size", 1, 4096, offsetof(struct engine_opts, block_size)},
    };
    bool has_value = *i + 1 < argc;
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        if (strcmp(a, ints[k].flag))
            continue;
        if (!has_value) {
            fprintf(stderr, "llaisys-cli %s: %s needs a value\n", cmd, a);
            return -1;
        }
        long long v;
        if (run_parse_int(cmd, a, argv[++*i], ints[k].min, ints[k].max, &v))
            return -1;
        *(int *)((char *)o + ints[k].off) = (int)v;
        return 1;
    }
    if (!strcmp(a, "--kv-memory")) {
        if (!has_value) {
            fprintf(stderr, "llaisys-cli %s: %s needs a value\n", cmd, a);
            return -1;
        }
        return parse_bytes(cmd, a, argv[++*i], &o->kv_memory) ? -1 : 1;
    }
    return 0;
}

void engine_args_print(FILE *f, const struct engine *e)
{
    const struct engine_opts *o = engine_get_opts(e);
    const struct model_config *c = &engine_model(e)->config;
    double kv_mib = (double)o->kv_blocks * o->block_size * c->n_layers * 2 * c->n_kv_heads *
                    c->head_dim * (o->exact ? 4 : 2) / (1024.0 * 1024.0);
    fprintf(f, "engine: threads %d, ctx %d, max seqs %d, max batch tokens %d, max queue %d, "
               "KV %d blocks of %d (%.0f MiB), prefix cache %s, math %s\n",
            o->n_threads, o->n_ctx, o->max_seqs, o->max_batch_tokens, o->max_queue,
            o->kv_blocks, o->block_size, kv_mib, o->no_prefix_cache ? "off" : "on",
            o->exact ? "exact" : "fast");
}
