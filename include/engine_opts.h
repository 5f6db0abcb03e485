/*
 * engine_opts.h: the engine's options, in one place: struct engine_opts, the one table that
 * names every option (flag, LLAISYS_* variable, type, range, help), the defaults
 * (engine_opts_resolve, per profile) and the checks engine_create applies.
 *
 * Every program that runs the model parses, checks, documents and prints its engine options
 * through this table: llaisys-server (flags and variables), and the CLI's batch, bench-engine,
 * generate, score and bench (flags; src/cli/engine_args.c). So a value the parser accepts is a
 * value engine_create accepts, and the help shows the defaults resolve applies.
 *
 * A zero field means "the default". Defaults depend on the profile: the server keeps every
 * stream's inter-token gap short (more streams, smaller steps); offline use (the CLI) wants
 * throughput. n_ctx and the KV pool size also depend on the model.
 * Pure functions on caller-owned structs; any thread.
 */
#ifndef LLAISYS_ENGINE_OPTS_H
#define LLAISYS_ENGINE_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "errors.h"
#include "model.h"
#include "runtime.h"

struct model_config;

/* Which set of defaults engine_opts_resolve applies to the batch shape. */
enum engine_profile {
    ENGINE_PROFILE_DEFAULT = 0, /* offline (CLI): max_seqs 16, max_batch_tokens max(512, max_seqs) */
    ENGINE_PROFILE_SERVER,      /* llaisys-server: max_seqs 32, max_batch_tokens max(512, max_seqs)
                                   (beside decode rows, the step cost sizes prompt chunks; the
                                   budget bounds a prompt-only step: a burst's first prompts
                                   start together, a cancel waits at most one such step) */
    ENGINE_PROFILE_COUNT
};

/* Speculative decoding: how draft tokens are proposed (engine.h, "Speculative decoding"). */
enum engine_spec {
    ENGINE_SPEC_OFF = 0, /* one token per sequence and step */
    ENGINE_SPEC_NGRAM,   /* prompt lookup: continue the latest earlier match of the last tokens
                            in the request's own prompt and output, as many tokens as the
                            request's acceptance and the measured step cost make worth it */
    ENGINE_SPEC_NGRAM_ALWAYS, /* the same drafts, always spec_max_draft tokens where a match
                            exists, whatever they cost (to measure the mechanism; tests) */
    ENGINE_SPEC_COUNT
};

/* The default inter-token latency target (ms) of --itl-target-ms. */
#define ENGINE_ITL_TARGET_MS 400
#define ENGINE_ITL_MAX_RATIO 160

/* Engine options; a zero field takes the default given (see engine_opts_resolve). */
struct engine_opts {
    enum engine_profile profile; /* whose defaults (default: ENGINE_PROFILE_DEFAULT) */
    int n_threads;        /* compute threads (default 2) */
    int n_ctx;            /* positions per sequence (default min(4096,
                             max_position_embeddings, sliding_window)) */
    int block_size;       /* tokens per KV block (default 16) */
    int kv_blocks;        /* KV blocks in the pool (default: from kv_memory, else
                             max(n_ctx, max_seqs · n_ctx / 4) tokens' worth) */
    size_t kv_memory;     /* bytes of K/V storage, used when kv_blocks is 0; once resolved with
                             a model: the bytes of the kv_blocks chosen */
    int max_seqs;         /* sequences running at once (default: the profile's) */
    int max_batch_tokens; /* tokens per step, decode and prompt chunks together (default: the
                             profile's; must be >= max_seqs) */
    int max_queue;        /* requests held beyond max_seqs: max_seqs + max_queue unfinished
                             requests at most, then LL_EOVERLOADED (default 256) */
    bool exact;           /* f32 activations and KV (LL_MATH_EXACT); default bf16 fast path */
    bool no_prefix_cache; /* never share blocks between requests */
    int quant;            /* --quant, an index into engine_quant_names: 0 takes the weights as
                             stored; else the linear weights are quantized while loading by
                             the scheme of that name, or packed (bf16p; engine_opts_model_open) */
    int itl_target_ms;    /* inter-token latency target: while sequences decode, prompt chunks
                             are sized by the measured step cost so a step stays under it
                             (scheduler.c; default ENGINE_ITL_TARGET_MS) */
    int itl_max_ratio;    /* percent: a step with prompt work takes at most this share of a
                             decode-only step's time of the batch being built (scheduler.c),
                             whatever the target (default ENGINE_ITL_MAX_RATIO; 100000: the
                             target alone bounds it) */
    enum engine_spec spec; /* speculative decoding (default ENGINE_SPEC_OFF) */
    int spec_max_draft;   /* draft tokens per sequence and step at most (default 4) */
    bool mmap;            /* read the weights in place from the file mapping instead of copying
                             them into memory at load (model_copy.h) */
    bool fixed_threads;   /* every compute thread always (runtime_opts.fixed_threads) */
};

/* The values of --quant: "none", the quantization schemes (model_qscheme.h), "bf16p";
 * NULL-ended. */
extern const char *const engine_quant_names[];

/* The options, the index of each in engine_opt_defs. */
enum engine_opt_id {
    ENGINE_OPT_THREADS,
    ENGINE_OPT_CTX,
    ENGINE_OPT_MAX_SEQS,
    ENGINE_OPT_MAX_BATCH_TOKENS,
    ENGINE_OPT_MAX_QUEUE,
    ENGINE_OPT_KV_BLOCKS,
    ENGINE_OPT_KV_MEMORY,
    ENGINE_OPT_BLOCK_SIZE,
    ENGINE_OPT_NO_PREFIX_CACHE,
    ENGINE_OPT_EXACT,
    ENGINE_OPT_QUANT,
    ENGINE_OPT_ITL_TARGET_MS,
    ENGINE_OPT_ITL_MAX_RATIO,
    ENGINE_OPT_SPEC,
    ENGINE_OPT_SPEC_MAX_DRAFT,
    ENGINE_OPT_MMAP,
    ENGINE_OPT_FIXED_THREADS,
    ENGINE_OPT_COUNT
};

/* Sets of options, for the commands that take only some of them. */
#define ENGINE_OPT_BIT(id) (1u << (id))
#define ENGINE_OPTS_ALL ((1u << ENGINE_OPT_COUNT) - 1)

enum engine_opt_type {
    ENGINE_OPT_INT,  /* int, in [min, max] */
    ENGINE_OPT_SIZE, /* size_t bytes in [min, max]: 65536, 512K, 2G (parse.h) */
    ENGINE_OPT_BOOL, /* bool: a flag without a value, or 1/true/yes/on, 0/false/no/off */
    ENGINE_OPT_CHOICE, /* int: the index of the value among choices (0 is the default) */
};

struct engine_opt_def {
    const char *flag;     /* "--ctx"; without "--" it is the option's name in printouts */
    const char *env;      /* "LLAISYS_CTX" (read by llaisys-server) */
    const char *arg;      /* the value in the help ("N", "SIZE"); NULL for a bool */
    enum engine_opt_type type;
    size_t off;           /* offset of the field in struct engine_opts */
    long long min, max;   /* what engine_create accepts (int and size) */
    const char *help;     /* what it does (engine_opts_help adds the range and default) */
    const char *const *choices; /* ENGINE_OPT_CHOICE: the values, NULL-ended */
};

/* The table, indexed by enum engine_opt_id. */
extern const struct engine_opt_def engine_opt_defs[ENGINE_OPT_COUNT];

/* The option whose flag is the len bytes at name ("--ctx" in "--ctx=64"), or NULL. */
const struct engine_opt_def *engine_opts_find(const char *name, size_t len);

/* Parse val for option d into o. val NULL: the flag was given without a value (true for a
 * bool, an error otherwise). src names where the value came from (the flag or the variable)
 * in messages. Returns LL_OK or LL_EINVAL ("SRC: must be ... (got 'VAL')", or "SRC needs a
 * value"); o is untouched on error. */
enum ll_status engine_opts_set(struct engine_opts *o, const struct engine_opt_def *d,
                               const char *val, const char *src, struct ll_err *err);

/* Bytes of a buffer that holds any option's whole help text (test_engine_opts checks each). */
#define ENGINE_OPT_HELP_MAX 1024

/* The help text of d under profile p into buf (NUL-terminated, truncated to n): what it does,
 * its range and its default, e.g. "compute threads (1 to 256; default 2)". */
void engine_opts_help(const struct engine_opt_def *d, enum engine_profile p, char *buf,
                      size_t n);

/* Fill the zero fields of o with their defaults for o->profile. c NULL: only those that do
 * not depend on the model (n_ctx and the KV pool stay 0); else everything, and kv_memory
 * becomes the bytes of the kv_blocks chosen. Idempotent. This is the only place defaults are
 * chosen. */
void engine_opts_resolve(struct engine_opts *o, const struct model_config *c);

/* Check every non-zero field against its range in the table, and the options against each
 * other (max_batch_tokens >= max_seqs; kv_blocks x block_size <= 2^30 slots). Returns LL_OK or
 * LL_EINVAL ("engine options: --max-batch-tokens 8 must be at least --max-seqs 16"). */
enum ll_status engine_opts_check(const struct engine_opts *o, struct ll_err *err);

/* What model_open should do with the weights under o: quantize them at load (--quant) on
 * o->n_threads threads (the default count when 0), or take them as stored. */
struct model_open_opts engine_opts_model_open(const struct engine_opts *o);

/* The runtime that o asks for (resolved with a model): the engine's paged KV pool (n_ctx,
 * kv_blocks x block_size slots, max_batch_tokens), o's threads and math. */
struct runtime_opts engine_opts_runtime(const struct engine_opts *o);
/* The same threads and math for one contiguous sequence of n_ctx positions and max_batch tokens
 * a step (0: the default): the runtime of the CLI's one-sequence commands. */
struct runtime_opts engine_opts_runtime_seq(const struct engine_opts *o, int n_ctx, int max_batch);

/* Print o as "name: value" items (names: the flags without "--", in table order) separated by
 * sep, e.g. "threads: 2" sep "ctx: 4096" ... "exact: no". Nothing before the first or after the
 * last. */
void engine_opts_print(FILE *f, const struct engine_opts *o, const char *sep);

#endif
