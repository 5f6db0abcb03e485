/*
 * engine_opts.c: the engine-option table, its defaults and its checks (see engine_opts.h).
 *
 * The ranges are what the engine supports: threads up to the runtime's 256 (the thread pool's
 * limit), a context of at least 2 positions (one prompt token and one new token), at most
 * 65536 tokens per step (the batch buffers are sized by it at creation), at most 2^24 KV blocks
 * and 2^30 KV slots. The default values live only in this file, in resolve (and the profile
 * table it reads), except the thread count, which the runtime shares (pool.h);
 * the help text is written from the same constants.
 */
#include "engine_opts.h"

#include <stdint.h>
#include <string.h>

#include "model.h"
#include "parse.h"
#include "pool.h"
#include "util.h"

#define DEFAULT_BLOCK_SIZE 16
#define DEFAULT_MAX_QUEUE 256
#define CTX_CAP 4096               /* the default context: min(this, max_position_embeddings) */
#define MAX_KV_BLOCKS (1 << 24)
#define MAX_KV_SLOTS (1LL << 30)
#define DEFAULT_SPEC_MAX_DRAFT 4

static const char *const spec_names[ENGINE_SPEC_COUNT + 1] = {
    [ENGINE_SPEC_OFF] = "off",
    [ENGINE_SPEC_NGRAM] = "ngram",
    [ENGINE_SPEC_NGRAM_ALWAYS] = "ngram-always",
    [ENGINE_SPEC_COUNT] = NULL,
};

/* The batch shape of each profile: max_seqs, and max_batch_tokens = max(batch_tokens, max_seqs). */
static const struct {
    int max_seqs, batch_tokens;
} profiles[ENGINE_PROFILE_COUNT] = {
    [ENGINE_PROFILE_DEFAULT] = {16, 512},
    [ENGINE_PROFILE_SERVER] = {32, 512},
};

#define OFF(f) offsetof(struct engine_opts, f)
_Static_assert(sizeof(enum engine_spec) == sizeof(int), "enum options are read as int");

const char *const engine_quant_names[] = {"none",   "q8_0",  "q4_0", "q4_k",
                                          "q4_k_m", "bf16p", NULL};

const struct engine_opt_def engine_opt_defs[ENGINE_OPT_COUNT] = {
    [ENGINE_OPT_THREADS] = {"--threads", "LLAISYS_THREADS", "N", ENGINE_OPT_INT, OFF(n_threads),
                            1, LL_POOL_MAX_THREADS, "compute threads"},
    [ENGINE_OPT_CTX] = {"--ctx", "LLAISYS_CTX", "N", ENGINE_OPT_INT, OFF(n_ctx), 2, 1 << 24,
                        "context length: positions per sequence, prompt and output together"},
    [ENGINE_OPT_MAX_SEQS] = {"--max-seqs", "LLAISYS_MAX_SEQS", "N", ENGINE_OPT_INT, OFF(max_seqs),
                             1, 4096, "sequences decoded at once"},
    [ENGINE_OPT_MAX_BATCH_TOKENS] = {"--max-batch-tokens", "LLAISYS_MAX_BATCH_TOKENS", "N",
                                     ENGINE_OPT_INT, OFF(max_batch_tokens), 1, 65536,
                                     "tokens per engine step, decode rows and prompt chunks, at "
                                     "least max-seqs; smaller keeps inter-token latency low "
                                     "while prompts arrive, larger prefills faster"},
    [ENGINE_OPT_MAX_QUEUE] = {"--max-queue", "LLAISYS_MAX_QUEUE", "N", ENGINE_OPT_INT,
                              OFF(max_queue), 1, 1 << 24,
                              "requests held waiting beyond the max-seqs running ones: "
                              "past max-seqs + max-queue unfinished requests a new one is "
                              "refused as overloaded, HTTP 429"},
    [ENGINE_OPT_KV_BLOCKS] = {"--kv-blocks", "LLAISYS_KV_BLOCKS", "N", ENGINE_OPT_INT,
                              OFF(kv_blocks), 1, MAX_KV_BLOCKS,
                              "KV cache blocks; overrides --kv-memory"},
    [ENGINE_OPT_KV_MEMORY] = {"--kv-memory", "LLAISYS_KV_MEMORY", "SIZE", ENGINE_OPT_SIZE,
                              OFF(kv_memory), 1, 1LL << 50,
                              "bytes of KV cache, e.g. 512M or 2G; K, M, G, T are powers of 1024"},
    [ENGINE_OPT_BLOCK_SIZE] = {"--block-size", "LLAISYS_BLOCK_SIZE", "N", ENGINE_OPT_INT,
                               OFF(block_size), 1, 4096,
                               "tokens per KV block, the unit the prefix cache shares"},
    [ENGINE_OPT_NO_PREFIX_CACHE] = {"--no-prefix-cache", "LLAISYS_NO_PREFIX_CACHE", NULL,
                                    ENGINE_OPT_BOOL, OFF(no_prefix_cache), 0, 1,
                                    "never share prompt prefixes (KV blocks) between requests"},
    [ENGINE_OPT_EXACT] = {"--exact", "LLAISYS_EXACT", NULL, ENGINE_OPT_BOOL, OFF(exact), 0, 1,
                          "f32 activations and KV cache"},
    [ENGINE_OPT_QUANT] = {"--quant", "LLAISYS_QUANT", "TYPE", ENGINE_OPT_CHOICE, OFF(quant), 0, 5,
                          "quantize the linear weights while loading, in parallel (timed in the "
                          "log): none, q8_0 (8-bit), q4_0 (4-bit), q4_k (4-bit, sub-block "
                          "scales and minimums), q4_k_m (q4_k with the value and some down "
                          "projections at 8 bits, about 5 bits a weight) or bf16p (bf16 packed "
                          "losslessly to 12.5 bits for decode: the same outputs, more memory); a "
                          "directory written by `llaisys-cli quantize` needs none",
                          engine_quant_names},
    [ENGINE_OPT_ITL_TARGET_MS] = {"--itl-target-ms", "LLAISYS_ITL_TARGET_MS", "MS",
                                  ENGINE_OPT_INT, OFF(itl_target_ms), 1, 600000,
                                  "inter-token latency target: while sequences decode, prompt "
                                  "chunks are sized from the measured step cost to keep a step "
                                  "under it (a prompt still gets a share of each step and a "
                                  "minimum chunk every few steps)"},
    [ENGINE_OPT_ITL_MAX_RATIO] = {"--itl-max-ratio", "LLAISYS_ITL_MAX_RATIO", "PCT",
                                  ENGINE_OPT_INT, OFF(itl_max_ratio), 150, 100000,
                                  "a step that carries prompt chunks takes at most PCT percent "
                                  "of a decode-only step of the batch being built (the "
                                  "streams decoding and the prompts queued, up to --max-seqs), "
                                  "whatever --itl-target-ms (so the inter-token p99 stays within "
                                  "2x the p50 on a fast CPU); 100000 leaves it to the target"},
    [ENGINE_OPT_SPEC] = {"--spec", "LLAISYS_SPEC", "MODE", ENGINE_OPT_CHOICE, OFF(spec), 0,
                         ENGINE_SPEC_COUNT - 1,
                         "speculative decoding, off, ngram or ngram-always: ngram drafts "
                         "tokens by prompt lookup in the request's own text, as many as its acceptance and the step cost make "
                         "worth it (ngram-always: --spec-max-draft at every match), verified in "
                         "the batch; outputs are unchanged", spec_names},
    [ENGINE_OPT_SPEC_MAX_DRAFT] = {"--spec-max-draft", "LLAISYS_SPEC_MAX_DRAFT", "K",
                                   ENGINE_OPT_INT, OFF(spec_max_draft), 1, 16,
                                   "draft tokens per sequence and step at most (--spec)"},
    [ENGINE_OPT_MMAP] = {"--mmap", "LLAISYS_MMAP", NULL, ENGINE_OPT_BOOL, OFF(mmap), 0, 1,
                         "read the linear weights in place from the model file's mapping "
                         "instead of copying them into memory at load: a faster start, pages "
                         "shared through the page cache, slower decode (the copy gets huge "
                         "pages)"},
    [ENGINE_OPT_FIXED_THREADS] = {"--fixed-threads", "LLAISYS_FIXED_THREADS", NULL,
                                  ENGINE_OPT_BOOL, OFF(fixed_threads), 0, 1,
                                  "run every compute thread even while other processes keep the "
                                  "cores busy (by default the pool then runs on fewer, which "
                                  "decodes faster than threads that wait for a core)"},
};

const struct engine_opt_def *engine_opts_find(const char *name, size_t len)
{
    for (int i = 0; i < ENGINE_OPT_COUNT; i++)
        if (strlen(engine_opt_defs[i].flag) == len && !memcmp(engine_opt_defs[i].flag, name, len))
            return &engine_opt_defs[i];
    return NULL;
}

enum ll_status engine_opts_set(struct engine_opts *o, const struct engine_opt_def *d,
                               const char *val, const char *src, struct ll_err *err)
{
    void *p = (char *)o + d->off;
    if (!val && d->type != ENGINE_OPT_BOOL)
        return ll_err_set(err, LL_EINVAL, "%s needs a value (%s)", src, d->arg);
    enum ll_status s = LL_OK;
    switch (d->type) {
    case ENGINE_OPT_INT: {
        long long v;
        if ((s = ll_parse_int(src, val, d->min, d->max, &v, err)) == LL_OK)
            *(int *)p = (int)v;
        break;
    }
    case ENGINE_OPT_SIZE:
        s = ll_parse_size(src, val, (uint64_t)d->min, (uint64_t)d->max, (size_t *)p, err);
        break;
    case ENGINE_OPT_BOOL:
        s = ll_parse_bool(src, val, (bool *)p, err);
        break;
    case ENGINE_OPT_CHOICE:
        for (int i = 0; d->choices[i]; i++)
            if (!strcmp(val, d->choices[i])) {
                *(int *)p = i;
                return LL_OK;
            }
        {
            char list[128] = "";
            for (int i = 0; d->choices[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         i ? ", " : "", d->choices[i]);
            s = ll_err_set(err, LL_EINVAL, "%s: must be one of %s (got '%.40s')", src, list, val);
        }
        break;
    }
    return s;
}

struct model_open_opts engine_opts_model_open(const struct engine_opts *o)
{
    struct model_open_opts mo = {
        .n_threads = o->n_threads > 0 ? o->n_threads : ll_pool_default_threads()};
    if (o->quant > 0) {
        LL_ASSERT(o->quant < (int)LL_ARRAY_LEN(engine_quant_names) - 1);
        mo.quantize = model_qscheme_parse(engine_quant_names[o->quant], &mo.qscheme);
        mo.pack_bf16 = !strcmp(engine_quant_names[o->quant], "bf16p");
        LL_ASSERT(mo.quantize || mo.pack_bf16);
    }
    mo.keep_mapped = o->mmap;
    return mo;
}

struct runtime_opts engine_opts_runtime_seq(const struct engine_opts *o, int n_ctx, int max_batch)
{
    return (struct runtime_opts){.n_ctx = n_ctx, .max_batch = max_batch, .n_threads = o->n_threads,
                                 .math = o->exact ? LL_MATH_EXACT : LL_MATH_FAST,
                                 .fixed_threads = o->fixed_threads};
}

struct runtime_opts engine_opts_runtime(const struct engine_opts *o)
{
    struct runtime_opts r = engine_opts_runtime_seq(o, o->n_ctx, o->max_batch_tokens);
    r.n_slots = o->kv_blocks * o->block_size;
    r.block_size = o->block_size;
    return r;
}

void engine_opts_help(const struct engine_opt_def *d, enum engine_profile p, char *buf, size_t n)
{
    LL_ASSERT((unsigned)p < ENGINE_PROFILE_COUNT);
    char dflt[96] = "";
    switch ((enum engine_opt_id)(d - engine_opt_defs)) {
    case ENGINE_OPT_THREADS:
        snprintf(dflt, sizeof dflt, "the physical cores this process may use, %d here",
                 ll_pool_default_threads());
        break;
    case ENGINE_OPT_CTX:
        snprintf(dflt, sizeof dflt, "min(%d, max_position_embeddings)", CTX_CAP);
        break;
    case ENGINE_OPT_MAX_SEQS:
        snprintf(dflt, sizeof dflt, "%d", profiles[p].max_seqs);
        break;
    case ENGINE_OPT_MAX_BATCH_TOKENS:
        snprintf(dflt, sizeof dflt, "max(%d, max-seqs)", profiles[p].batch_tokens);
        break;
    case ENGINE_OPT_MAX_QUEUE:
        snprintf(dflt, sizeof dflt, "%d", DEFAULT_MAX_QUEUE);
        break;
    case ENGINE_OPT_KV_BLOCKS:
    case ENGINE_OPT_KV_MEMORY:
        snprintf(dflt, sizeof dflt, "max(ctx, max-seqs x ctx / 4) tokens' worth");
        break;
    case ENGINE_OPT_BLOCK_SIZE:
        snprintf(dflt, sizeof dflt, "%d", DEFAULT_BLOCK_SIZE);
        break;
    case ENGINE_OPT_EXACT:
        snprintf(dflt, sizeof dflt, "bf16 fast path");
        break;
    case ENGINE_OPT_QUANT:
        snprintf(dflt, sizeof dflt, "none: the weights as stored");
        break;
    case ENGINE_OPT_ITL_TARGET_MS:
        snprintf(dflt, sizeof dflt, "%d", ENGINE_ITL_TARGET_MS);
        break;
    case ENGINE_OPT_ITL_MAX_RATIO:
        snprintf(dflt, sizeof dflt, "%d", ENGINE_ITL_MAX_RATIO);
        break;
    case ENGINE_OPT_SPEC:
        snprintf(dflt, sizeof dflt, "%s", spec_names[ENGINE_SPEC_OFF]);
        break;
    case ENGINE_OPT_SPEC_MAX_DRAFT:
        snprintf(dflt, sizeof dflt, "%d", DEFAULT_SPEC_MAX_DRAFT);
        break;
    case ENGINE_OPT_MMAP:
        snprintf(dflt, sizeof dflt, "off: copied");
        break;
    case ENGINE_OPT_FIXED_THREADS:
        snprintf(dflt, sizeof dflt, "off: fewer threads while the cores are busy");
        break;
    case ENGINE_OPT_NO_PREFIX_CACHE:
    case ENGINE_OPT_COUNT:
        break;
    }
    if (d->type == ENGINE_OPT_INT) {
        snprintf(buf, n, "%s (%lld to %lld; default %s)", d->help, d->min, d->max, dflt);
    } else if (dflt[0]) {
        snprintf(buf, n, "%s (default %s)", d->help, dflt);
    } else {
        snprintf(buf, n, "%s", d->help);
    }
}

/* Bytes of K and V of one block, every layer. */
static size_t kv_bytes_per_block(const struct model_config *c, const struct engine_opts *o)
{
    return (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads * (size_t)c->head_dim *
           (o->exact ? 4 : 2) * (size_t)o->block_size;
}

void engine_opts_resolve(struct engine_opts *o, const struct model_config *c)
{
    LL_ASSERT((unsigned)o->profile < ENGINE_PROFILE_COUNT);
    if (o->n_threads <= 0)
        o->n_threads = ll_pool_default_threads();
    if (o->block_size <= 0)
        o->block_size = DEFAULT_BLOCK_SIZE;
    if (o->max_seqs <= 0)
        o->max_seqs = profiles[o->profile].max_seqs;
    if (o->max_batch_tokens <= 0) {
        int b = profiles[o->profile].batch_tokens;
        o->max_batch_tokens = o->max_seqs > b ? o->max_seqs : b;
    }
    if (o->max_queue <= 0)
        o->max_queue = DEFAULT_MAX_QUEUE;
    if (o->itl_target_ms <= 0)
        o->itl_target_ms = ENGINE_ITL_TARGET_MS;
    if (o->itl_max_ratio <= 0)
        o->itl_max_ratio = ENGINE_ITL_MAX_RATIO;
    if (o->spec_max_draft <= 0)
        o->spec_max_draft = DEFAULT_SPEC_MAX_DRAFT;
    if (!c)
        return;
    if (o->n_ctx <= 0) {
        o->n_ctx = c->max_position > 0 && c->max_position < CTX_CAP ? c->max_position : CTX_CAP;
    }
    size_t per_block = kv_bytes_per_block(c, o);
    if (o->kv_blocks <= 0) {
        long long blocks;
        if (o->kv_memory > 0) {
            blocks = per_block ? (long long)(o->kv_memory / per_block) : 0;
        } else {
            /* Every sequence may use a quarter of the context on average, and one sequence
             * the whole of it; preemption covers the rare overflow. */
            long long tokens = (long long)o->max_seqs * o->n_ctx / 4;
            if (tokens < o->n_ctx)
                tokens = o->n_ctx;
            blocks = (tokens + o->block_size - 1) / o->block_size;
        }
        o->kv_blocks = blocks > MAX_KV_BLOCKS ? MAX_KV_BLOCKS : (int)blocks;
    }
    if (o->kv_blocks > 0) /* else kv_memory was less than one block: engine_create says so */
        o->kv_memory = (size_t)o->kv_blocks * per_block;
}

enum ll_status engine_opts_check(const struct engine_opts *o, struct ll_err *err)
{
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = &engine_opt_defs[i];
        const void *p = (const char *)o + d->off;
        long long v = d->type == ENGINE_OPT_INT || d->type == ENGINE_OPT_CHOICE
                          ? *(const int *)p
                      : d->type == ENGINE_OPT_SIZE ? (long long)*(const size_t *)p
                                                   : *(const bool *)p;
        if (d->type == ENGINE_OPT_CHOICE && (v < d->min || v > d->max))
            return ll_err_set(err, LL_EINVAL, "engine options: %s: no mode %lld", d->flag, v);
        if (d->type == ENGINE_OPT_BOOL || v == 0)
            continue;
        /* kv_memory once resolved is what the blocks take, not a value someone typed */
        if (v < d->min || (v > d->max && i != ENGINE_OPT_KV_MEMORY))
            return ll_err_set(err, LL_EINVAL, "engine options: %s must be from %lld to %lld "
                              "(got %lld)", d->flag, d->min, d->max, v);
    }
    if (o->max_seqs > 0 && o->max_batch_tokens > 0 && o->max_batch_tokens < o->max_seqs)
        return ll_err_set(err, LL_EINVAL, "engine options: --max-batch-tokens %d must be at "
                          "least --max-seqs %d (every running sequence decodes one token a "
                          "step)", o->max_batch_tokens, o->max_seqs);
    if ((long long)o->kv_blocks * (o->block_size ? o->block_size : DEFAULT_BLOCK_SIZE) >
        MAX_KV_SLOTS)
        return ll_err_set(err, LL_EINVAL, "engine options: --kv-blocks %d x --block-size %d is "
                          "more than 2^30 KV slots", o->kv_blocks, o->block_size);
    return LL_OK;
}

/* v bytes as "512 MiB", "1.5 GiB" (or "0"). */
static void format_bytes(char *buf, size_t n, size_t v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024 && u < 4)
        x /= 1024, u++;
    snprintf(buf, n, "%.4g %s", x, units[u]);
}

void engine_opts_print(FILE *f, const struct engine_opts *o, const char *sep)
{
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = &engine_opt_defs[i];
        const void *p = (const char *)o + d->off;
        char val[32];
        switch (d->type) {
        case ENGINE_OPT_INT:
            snprintf(val, sizeof val, "%d", *(const int *)p);
            break;
        case ENGINE_OPT_SIZE:
            format_bytes(val, sizeof val, *(const size_t *)p);
            break;
        case ENGINE_OPT_BOOL:
            snprintf(val, sizeof val, "%s", *(const bool *)p ? "yes" : "no");
            break;
        case ENGINE_OPT_CHOICE:
            snprintf(val, sizeof val, "%s", d->choices[*(const int *)p]);
            break;
        }
        fprintf(f, "%s%s: %s", i ? sep : "", d->flag + 2, val);
    }
}
