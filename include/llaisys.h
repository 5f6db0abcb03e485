/*
 * llaisys.h: the public C API of libllaisys (C99). The one header an application includes;
 * every other header under include/ is internal to the project.
 *
 * Two levels:
 *   - the model: decode batches of tokens of many sequences over a paged KV cache, read their
 *     logits, and edit each sequence's cache (remove, copy, keep) — for callers that write
 *     their own sampling and scheduling loop (llaisys_model_*, llaisys_decode, llaisys_kv_*);
 *   - the engine: the continuous-batching engine behind llaisys-server: submit requests
 *     (prompt text, chat messages or token ids, with every sampling and stop control of the
 *     server's OpenAI API, given as the same JSON), poll their events, cancel them, or generate
 *     many prompts in one call (llaisys_engine_*, llaisys_request_*).
 *
 * Build and link: `make` builds build/libllaisys.so (only the symbols declared here are
 * exported) and build/libllaisys.a; `make install PREFIX=DIR` installs this header, both
 * libraries and DIR/lib/pkgconfig/llaisys.pc, so `cc app.c $(pkg-config --cflags --libs
 * llaisys)` builds an application (tests/api_example.c is one).
 *
 * Conventions:
 *   - Handles are opaque; each *_create has its *_destroy (NULL is accepted by every destroy,
 *     free and release function).
 *   - Functions returning int32_t return a status (enum llaisys_status): 0 is success, a
 *     positive value a documented condition that is not an error (nothing changed), a negative
 *     value an error. After any negative status, llaisys_last_error() on the same thread gives
 *     a message naming what was wrong.
 *   - Strings are UTF-8. A char * the library returns as the caller's is freed with
 *     llaisys_free; const pointers point into the library's memory, valid as documented.
 *   - Thread safety is stated per handle below. Different handles may be used from different
 *     threads at once.
 *
 * Versioning: LLAISYS_API_VERSION is raised whenever a declaration here changes incompatibly
 * (a struct's layout, a function's meaning); llaisys_api_version() returns the version the
 * library was built with, so an application can refuse a library that differs.
 */
#ifndef LLAISYS_H
#define LLAISYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLAISYS_API_VERSION 1

#if defined(__GNUC__) || defined(__clang__)
#define LLAISYS_API __attribute__((visibility("default")))
#else
#define LLAISYS_API
#endif

/* ---------------------------------------------------------------------------------------
 * Status codes, errors, memory
 * ------------------------------------------------------------------------------------- */

enum llaisys_status {
    LLAISYS_OK = 0,
    LLAISYS_NO_KV_ROOM = 1,   /* llaisys_decode: the KV cache has no room for the batch;
                                 nothing changed: free sequences (llaisys_kv_seq_rm) and retry */
    LLAISYS_ABORTED = 2,      /* llaisys_decode: the abort callback said stop; nothing changed */
    LLAISYS_EMPTY_RANGE = 3,  /* a KV operation's range holds no position of the sequence
                                 (p0 >= p1, or no overlap): nothing changed */
    LLAISYS_ERR_INVALID_ARG = -1,   /* a NULL or malformed argument, a bad option or JSON */
    LLAISYS_ERR_INVALID_SEQ = -2,   /* a sequence id outside 0..n_seq_max-1 */
    LLAISYS_ERR_INVALID_POS = -3,   /* a position that is negative, not the next one of its
                                       sequence, or whose removal would leave a hole */
    LLAISYS_ERR_INVALID_TOKEN = -4, /* a token id outside the vocabulary */
    LLAISYS_ERR_UNSUPPORTED = -5,   /* valid, but not implemented (the message names it) */
    LLAISYS_ERR_BUSY = -6,          /* refused while in use (prefix-cache reset with blocks in
                                       use; engine step while the engine's thread runs) */
    LLAISYS_ERR_TOO_LONG = -7,      /* past the context (a prompt, or prompt + max_tokens) */
    LLAISYS_ERR_OVERLOADED = -8,    /* the engine's queue is full (engine option max-queue) */
    LLAISYS_ERR_IO = -9,            /* a file could not be read */
    LLAISYS_ERR_MODEL = -10,        /* malformed or unsupported model or tokenizer files */
    LLAISYS_ERR_NO_MEMORY = -11,
    LLAISYS_ERR_INTERNAL = -12,     /* a failure inside the library (the message says which) */
};

/* LLAISYS_API_VERSION as the library was built. Any thread. */
LLAISYS_API int32_t llaisys_api_version(void);

/* A short name of a status ("ok", "no KV room", "invalid sequence", ...; "unknown status" for
 * other values). Static storage; any thread. */
LLAISYS_API const char *llaisys_status_str(int32_t status);

/* The message of the last call on this thread that returned a negative status or NULL for
 * failure ("" when none failed yet). Thread-local storage, valid until the next failing call
 * on this thread. */
LLAISYS_API const char *llaisys_last_error(void);

/* Free memory the library handed to the caller (strings, JSON). NULL is a no-op. */
LLAISYS_API void llaisys_free(void *p);

/* ---------------------------------------------------------------------------------------
 * The model: decode batches, logits, KV sequence operations
 *
 * Threads: a model handle is used by one thread at a time (the caller serialises its calls);
 * during llaisys_decode the library's compute threads (n_threads - 1 of them) work for it.
 * ------------------------------------------------------------------------------------- */

typedef struct llaisys_model llaisys_model;

enum llaisys_math {
    LLAISYS_MATH_FAST = 0,  /* bf16 activations in the matmuls, bf16 KV cache (the default) */
    LLAISYS_MATH_EXACT = 1, /* f32 activations and KV cache */
};

/* Creation parameters; zero fields take the defaults given. Start from
 * llaisys_model_default_params(). The ranges are the engine options' (llaisys-server --help).
 * Weights are used as the directory holds them: bf16, f16, f32, or quantized by `llaisys-cli
 * quantize` (q8_0, q4_0, q4_k, q4_k_m). There is no parameter to quantize while loading here;
 * the engine API's `quant` option has one (llaisys_engine_create). */
struct llaisys_model_params {
    int32_t n_ctx;      /* positions per sequence; 0: min(4096, max_position_embeddings,
                           sliding_window) */
    int32_t kv_tokens;  /* KV capacity in tokens, rounded up to whole blocks; 0: kv_blocks */
    int32_t kv_blocks;  /* KV capacity in blocks when kv_tokens is 0; both 0: the engine's
                           default, max(n_ctx, n_seq_max x n_ctx / 4) tokens */
    int32_t block_size; /* tokens per KV block; 0: 16 */
    int32_t n_seq_max;  /* sequence ids are 0..n_seq_max-1; 0: 16 */
    int32_t n_batch;    /* most tokens in one llaisys_decode; 0: max(512, n_seq_max) */
    int32_t n_threads;  /* compute threads, the calling one included; 0: the physical cores
                           this process may use (affinity mask, SMT siblings once, cgroup CPU
                           quota rounded up); fewer run while other processes keep every core
                           busy: llaisys-server's --fixed-threads explains it */
    int32_t math;       /* enum llaisys_math */
};

/* The defaults: every field 0 (each meaning its default above). Any thread. */
LLAISYS_API struct llaisys_model_params llaisys_model_default_params(void);

/* Open a Hugging Face model directory (config.json, generation_config.json, safetensors;
 * tokenizer.json and tokenizer_config.json when present) of any registered model type ("qwen2",
 * "qwen3", or "mock": config.json only, see README), with params (NULL: defaults). On
 * LLAISYS_OK *out is the caller's (llaisys_model_destroy). Returns LLAISYS_OK,
 * LLAISYS_ERR_INVALID_ARG (NULL argument, a parameter out of range: the message names it),
 * LLAISYS_ERR_IO (missing or unreadable file), LLAISYS_ERR_MODEL (malformed or unsupported
 * files), LLAISYS_ERR_UNSUPPORTED (unknown model_type), LLAISYS_ERR_NO_MEMORY. Any thread. */
LLAISYS_API int32_t llaisys_model_create(const char *model_dir,
                                         const struct llaisys_model_params *params,
                                         llaisys_model **out);
/* Free the model and everything it owns (logits, KV cache, threads). NULL is a no-op. */
LLAISYS_API void llaisys_model_destroy(llaisys_model *m);

/* config.json's model_type, e.g. "qwen2" or "mock" (owned by the model). */
LLAISYS_API const char *llaisys_model_type(const llaisys_model *m);
/* Vocabulary size (logits per row), positions per sequence, sequence ids, tokens per decode. */
LLAISYS_API int32_t llaisys_model_n_vocab(const llaisys_model *m);
LLAISYS_API int32_t llaisys_model_n_ctx(const llaisys_model *m);
LLAISYS_API int32_t llaisys_model_n_seq_max(const llaisys_model *m);
LLAISYS_API int32_t llaisys_model_n_batch(const llaisys_model *m);
/* Whether token ends generation for this model (an eos id of config.json or
 * generation_config.json). */
LLAISYS_API bool llaisys_model_is_eos(const llaisys_model *m, int32_t token);

/* Encode len bytes of text (add_special: the tokenizer's special tokens, e.g. BOS) into
 * out[0..cap). Returns the number of ids (>= 0; when it is more than cap only cap were written:
 * call again with a larger buffer), or LLAISYS_ERR_INVALID_ARG (no tokenizer files, NULL
 * text), LLAISYS_ERR_NO_MEMORY. */
LLAISYS_API int32_t llaisys_model_tokenize(const llaisys_model *m, const char *text, size_t len,
                                           bool add_special, int32_t *out, int32_t cap);
/* Decode ids to text (special tokens skipped when skip_special; invalid UTF-8 becomes U+FFFD).
 * Returns a NUL-terminated string for llaisys_free, or NULL (no tokenizer, an id outside the
 * vocabulary, no memory: see llaisys_last_error). */
LLAISYS_API char *llaisys_model_detokenize(const llaisys_model *m, const int32_t *ids,
                                           int32_t n_ids, bool skip_special);

/* A batch: structure of arrays, row i = one token of one sequence. Rows of one sequence must
 * come in the order of their positions; rows of different sequences may mix. */
struct llaisys_batch {
    int32_t n_tokens;
    int32_t *token;  /* (n_tokens) token ids */
    int32_t *pos;    /* (n_tokens) position of each token in its sequence, which must be the
                        sequence's next position (llaisys_kv_seq_pos_max + 1, plus the rows of
                        the sequence before it in this batch); -1: that next position.
                        NULL: every row -1 */
    int32_t *seq_id; /* (n_tokens) sequence of each row, 0..n_seq_max-1; NULL: every row 0. A
                        token belongs to one sequence; to share a prefix, decode it once and
                        llaisys_kv_seq_cp it */
    int8_t *logits;  /* (n_tokens) nonzero: return this row's logits; NULL: the last row only */
};

/* A batch with room for n_tokens_max rows, allocated by the library (free with
 * llaisys_batch_free): n_tokens 0, every pos -1, seq_id 0, logits 0. On failure (n_tokens_max
 * < 1, no memory) every array is NULL. Any thread. */
LLAISYS_API struct llaisys_batch llaisys_batch_init(int32_t n_tokens_max);
/* A view of n_tokens ids of sequence 0 at its next positions, logits for the last row; nothing
 * is allocated (do not free it); tokens stay the caller's. */
LLAISYS_API struct llaisys_batch llaisys_batch_get_one(int32_t *tokens, int32_t n_tokens);
/* Free a batch from llaisys_batch_init. */
LLAISYS_API void llaisys_batch_free(struct llaisys_batch batch);

/* Called during llaisys_decode between the layers of the forward pass, on the decoding thread;
 * returning true stops the decode with LLAISYS_ABORTED. */
typedef bool (*llaisys_abort_fn)(void *data);
/* Set (fn non-NULL) or clear (NULL) the model's abort callback. */
LLAISYS_API void llaisys_model_set_abort_callback(llaisys_model *m, llaisys_abort_fn fn,
                                                  void *data);

/* Run the model on a batch: each row's K/V is stored in its sequence's cache and each row that
 * asks gets its logits. Rows whose whole KV block is found in the prefix cache (a full block
 * of the same tokens after the same prefix, computed before and still cached) and that ask for
 * no logits are taken from it instead of computed (llaisys_kv_stats counts them).
 * Returns:
 *   LLAISYS_OK (0): the sequences advanced; the logits are readable;
 *   LLAISYS_NO_KV_ROOM (1): the cache lacks the blocks the batch needs; nothing changed (free
 *     blocks with llaisys_kv_seq_rm and call again);
 *   LLAISYS_ABORTED (2): the abort callback returned true; nothing changed;
 *   LLAISYS_ERR_INVALID_ARG (n_tokens outside 1..n_batch, NULL arrays),
 *   LLAISYS_ERR_INVALID_TOKEN, LLAISYS_ERR_INVALID_SEQ, LLAISYS_ERR_INVALID_POS (not the next
 *   position of its sequence, or at n_ctx or past it): nothing changed, the message names the
 *   row; LLAISYS_ERR_NO_MEMORY (no room for the logits), LLAISYS_ERR_INTERNAL.
 * After anything but LLAISYS_OK there are no outputs (llaisys_n_outputs is 0). */
LLAISYS_API int32_t llaisys_decode(llaisys_model *m, const struct llaisys_batch *batch);

/* The logits of the last successful decode: (llaisys_n_outputs, n_vocab) floats, one row per
 * row that asked, in batch order. Owned by the model; valid until the next llaisys_decode or
 * llaisys_model_destroy. NULL when there are none. */
LLAISYS_API float *llaisys_get_logits(llaisys_model *m);
/* The logits row of batch row i (i >= 0; NULL when row i did not ask for logits or is out of
 * range), or of output -i from the end (i < 0: -1 is the last output). Same lifetime. */
LLAISYS_API float *llaisys_get_logits_ith(llaisys_model *m, int32_t i);
/* Rows of logits of the last decode (0 after a failed one). */
LLAISYS_API int32_t llaisys_n_outputs(const llaisys_model *m);
/* (llaisys_n_outputs) the batch row of each logits row, ascending. Same lifetime as logits. */
LLAISYS_API const int32_t *llaisys_output_ids(const llaisys_model *m);

/* KV sequence operations. The cache is paged: a sequence's positions 0..pos_max are stored in
 * blocks of block_size tokens through its block table; blocks are reference-counted and shared
 * between sequences (llaisys_kv_seq_cp) and with the prefix cache; a write into a shared block
 * copies it first (copy-on-write). A sequence always holds a contiguous range 0..pos_max of
 * positions. Ranges are half-open [p0, p1) with -1 meaning open (p0 = -1: from 0; p1 = -1: to
 * the end). Each returns LLAISYS_OK, LLAISYS_EMPTY_RANGE (the range holds nothing: nothing
 * changed), LLAISYS_ERR_INVALID_SEQ, LLAISYS_ERR_INVALID_POS (p0 or p1 below -1, or a range the
 * paged cache cannot remove, see below), LLAISYS_ERR_INVALID_ARG (NULL model), or as stated. */

/* Remove positions [p0, p1) of sequence seq (seq -1: of every sequence). The range must reach
 * the sequence's end (p1 = -1 or p1 > pos_max): removing a middle or a head would leave a hole,
 * which the paged attention cannot skip (LLAISYS_ERR_INVALID_POS). Blocks no longer used go
 * back to the pool at once (full ones stay in the prefix cache until reused). */
LLAISYS_API int32_t llaisys_kv_seq_rm(llaisys_model *m, int32_t seq, int32_t p0, int32_t p1);
/* Make dst's cache the positions [p0, p1) of src's (what dst held is removed first). p0 must
 * be 0 or -1 (a sequence starts at position 0: LLAISYS_ERR_INVALID_POS otherwise). The blocks
 * are shared, not copied: full blocks for good, the partial last block until either sequence
 * writes into it (then that sequence gets its own copy). src == dst keeps [0, p1) of it (as
 * llaisys_kv_seq_rm(src, p1, -1)). LLAISYS_EMPTY_RANGE when src holds nothing in the range
 * (dst is unchanged). */
LLAISYS_API int32_t llaisys_kv_seq_cp(llaisys_model *m, int32_t src, int32_t dst, int32_t p0,
                                      int32_t p1);
/* Remove every sequence but seq. */
LLAISYS_API int32_t llaisys_kv_seq_keep(llaisys_model *m, int32_t seq);
/* The highest position sequence seq holds into *pos_max (-1 when empty). Returns LLAISYS_OK,
 * LLAISYS_ERR_INVALID_SEQ or LLAISYS_ERR_INVALID_ARG. */
LLAISYS_API int32_t llaisys_kv_seq_pos_max(const llaisys_model *m, int32_t seq,
                                           int32_t *pos_max);
/* Shift positions [p0, p1) of seq by delta. NOT IMPLEMENTED: the K vectors are stored after
 * RoPE, so a shift would have to re-rotate them, and a sequence cannot have holes; returns
 * LLAISYS_ERR_UNSUPPORTED for a non-empty range and a nonzero delta (after checking seq and
 * the range: LLAISYS_ERR_INVALID_SEQ, LLAISYS_ERR_INVALID_POS, LLAISYS_EMPTY_RANGE), and
 * LLAISYS_OK for delta 0 (nothing to do). */
LLAISYS_API int32_t llaisys_kv_seq_add(llaisys_model *m, int32_t seq, int32_t p0, int32_t p1,
                                       int32_t delta);

/* KV cache figures, in tokens (blocks x block_size). */
struct llaisys_kv_stats {
    int64_t capacity;      /* every block */
    int64_t used;          /* blocks held by sequences (a shared block counts once) */
    int64_t free;          /* capacity - used: blocks a decode may take (cached ones included) */
    int64_t peak_used;     /* the highest `used` since creation */
    int64_t cached;        /* free blocks still holding a prefix (reusable by a prefix hit) */
    int64_t seq_tokens;    /* positions held by all sequences together (shared ones counted
                              once per sequence) */
    int64_t prefix_hits;   /* tokens taken from the prefix cache by llaisys_decode so far */
    int32_t block_size;
    int32_t n_blocks;
};
/* Fill *out. Returns LLAISYS_OK or LLAISYS_ERR_INVALID_ARG. */
LLAISYS_API int32_t llaisys_kv_stats(const llaisys_model *m, struct llaisys_kv_stats *out);
/* Forget every cached prefix (their blocks become plain free blocks). Refused with
 * LLAISYS_ERR_BUSY while any sequence holds a block (remove them first). */
LLAISYS_API int32_t llaisys_kv_reset_prefix_cache(llaisys_model *m);

/* ---------------------------------------------------------------------------------------
 * The engine: requests served by continuous batching
 *
 * Threads: llaisys_engine_submit, llaisys_engine_stats, llaisys_request_cancel,
 * llaisys_request_state, llaisys_request_id may be called from any thread at any time between
 * create and destroy. llaisys_engine_step, _has_work, _start, _stop, _reset_prefix_cache and
 * _generate serialise on an internal lock (one runs at a time; _has_work waits for a step in
 * progress). llaisys_request_poll and
 * llaisys_request_release are called by one thread at a time per request (the event points
 * into the request's buffers). llaisys_engine_destroy is called once, when no other call on the
 * engine is running; requests released after it stay valid to release.
 * ------------------------------------------------------------------------------------- */

typedef struct llaisys_engine llaisys_engine;
typedef struct llaisys_request llaisys_request;

/* Open model_dir and create an engine. options: NULL or "" for the defaults, else items
 * "name=value" (or a bare "name" for a yes/no option) separated by spaces or commas, named as
 * llaisys-server's flags without "--" ('_' may replace '-'): threads, ctx, max-seqs,
 * max-batch-tokens, max-queue, kv-blocks, kv-memory (e.g. 512M), block-size, no-prefix-cache,
 * exact, quant (q8_0, q4_0, q4_k, q4_k_m: quantize the weights while loading; bf16p), mmap,
 * itl-target-ms, itl-max-ratio, spec, spec-max-draft, fixed-threads (every compute thread even
 * while other processes keep the cores busy), pooling (llaisys_engine_embed's: last, mean,
 * first), rerank-tokens (llaisys_engine_rerank's: NO,YES or YES, the value running to the next
 * space). Example: "threads=2 ctx=2048 max-seqs=8".
 * The engine is stepped by the caller (llaisys_engine_step) until llaisys_engine_start gives it
 * its own thread. Returns
 * LLAISYS_OK, LLAISYS_ERR_INVALID_ARG (an unknown option or a bad value: the message names it),
 * or as llaisys_model_create. */
LLAISYS_API int32_t llaisys_engine_create(const char *model_dir, const char *options,
                                          llaisys_engine **out);
/* Stop the engine's thread if started, cancel every request, free the engine. Requests not yet
 * released stay valid for llaisys_request_poll (they report cancelled) and must still be
 * released. NULL is a no-op. */
LLAISYS_API void llaisys_engine_destroy(llaisys_engine *e);
/* The resolved options as JSON, e.g. {"threads":2,"ctx":4096,...,"model_type":"qwen2",
 * "vocab_size":151936}, for llaisys_free; NULL on no memory. */
LLAISYS_API char *llaisys_engine_describe(const llaisys_engine *e);

/* Queue a request. request_json is one OpenAI request body, as llaisys-server's
 * /v1/chat/completions (with "messages": rendered by the model's chat template) or
 * /v1/completions ("prompt": a string, encoded with BOS, or an array of token ids) take it,
 * checked by the same parser with the same ranges and messages, sampling defaults from
 * generation_config.json by the same policy (temperature, top_p, top_k, min_p, seed,
 * presence/frequency/repetition penalties, logit_bias, stop, stop_token_ids, min_tokens,
 * max_tokens, ignore_eos, skip_special_tokens, logprobs/top_logprobs, echo,
 * chat_template_kwargs). Chat requests split <think> reasoning off as the server does.
 * Transport fields (stream, stream_options, model, user) have no effect. A request is one
 * prompt and one choice: "n" > 1 and a list of prompts are refused (submit several requests).
 * On LLAISYS_OK *out is the caller's handle (llaisys_request_release). Returns LLAISYS_OK,
 * LLAISYS_ERR_INVALID_ARG (malformed JSON, a field of the wrong type or out of range, an id
 * outside the vocabulary, no chat template: the message names the field),
 * LLAISYS_ERR_UNSUPPORTED (a field that is not implemented, named), LLAISYS_ERR_TOO_LONG
 * (prompt + max_tokens past the context or the whole KV pool), LLAISYS_ERR_OVERLOADED (the
 * queue is full), LLAISYS_ERR_NO_MEMORY. */
LLAISYS_API int32_t llaisys_engine_submit(llaisys_engine *e, const char *request_json,
                                          llaisys_request **out);

/* Run one engine step on the calling thread (admit, schedule, forward, sample, publish
 * events). *did_work (may be NULL) says whether anything was computed or finished. Returns
 * LLAISYS_OK, LLAISYS_ERR_BUSY (the engine's own thread is running), LLAISYS_ERR_INTERNAL (a
 * forward-pass failure: the requests in that step finished with an error; the engine stays
 * usable). */
LLAISYS_API int32_t llaisys_engine_step(llaisys_engine *e, int32_t *did_work);
/* Whether any request is queued, waiting or running (something for a step to do). */
LLAISYS_API bool llaisys_engine_has_work(llaisys_engine *e);
/* Give the engine its own scheduler thread (it steps while there is work and sleeps
 * otherwise), or stop and join it after its current step. Returns LLAISYS_OK or
 * LLAISYS_ERR_BUSY (start: already started), LLAISYS_ERR_NO_MEMORY (no thread). */
LLAISYS_API int32_t llaisys_engine_start(llaisys_engine *e);
LLAISYS_API int32_t llaisys_engine_stop(llaisys_engine *e);

/* Forget the prefix cache. LLAISYS_ERR_BUSY while a request holds KV blocks. */
LLAISYS_API int32_t llaisys_engine_reset_prefix_cache(llaisys_engine *e);

/* Run many requests to completion: requests_json is a JSON array of request bodies (as
 * llaisys_engine_submit takes). Steps the engine on the calling thread (or waits on its own
 * thread when started). *results_json (for llaisys_free) is a JSON array in the same order,
 * each {"text", "reasoning" (when the reasoning split gave any), "token_ids", "finish_reason"
 * ("stop", "length", "cancelled", "error"), "stop_reason" (the stop string) or
 * "stop_token_id" (for "stop"), "logprobs" (when asked: [{"id", "logprob", "top_logprobs":
 * [[id, logprob], ...]}]), "seed", "usage": {"prompt_tokens", "completion_tokens",
 * "total_tokens", "cached_tokens", "reasoning_tokens", "preemptions"}}, or {"error":
 * {"message", "status"}} for a request that could not be submitted. Returns LLAISYS_OK (even
 * when single requests failed), LLAISYS_ERR_INVALID_ARG (not a JSON array), or
 * LLAISYS_ERR_NO_MEMORY. */
LLAISYS_API int32_t llaisys_engine_generate(llaisys_engine *e, const char *requests_json,
                                            char **results_json);

/* Embeddings: request_json is a /v1/embeddings body (input: a string, strings, token ids or
 * arrays of ids; encoding_format "float" or "base64"; dimensions), as llaisys-server takes it;
 * model and user have no effect. Each input's final hidden states are pooled (the engine
 * option pooling=last|mean|first, else the model directory's sentence-transformers files,
 * else the last position, L2-normalized: as the server decides) by the engine, batched with
 * whatever else it runs, at most max-seqs inputs at once; the call steps the engine on the
 * calling thread (or waits on its own thread when started). *result_json (for llaisys_free) is
 * the /v1/embeddings answer: {"object": "list", "data": [{"object": "embedding", "index",
 * "embedding"}], "model" (the directory's name), "usage": {"prompt_tokens", "total_tokens"}}.
 * Returns LLAISYS_OK, LLAISYS_ERR_INVALID_ARG (malformed JSON, a field out of range, an id
 * outside the vocabulary: named), LLAISYS_ERR_UNSUPPORTED (a field that is not implemented,
 * or a model whose pooling is not), LLAISYS_ERR_TOO_LONG (an input past the context),
 * LLAISYS_ERR_OVERLOADED, LLAISYS_ERR_NO_MEMORY, LLAISYS_ERR_INTERNAL. */
LLAISYS_API int32_t llaisys_engine_embed(llaisys_engine *e, const char *request_json,
                                         char **result_json);

/* Reranking: request_json is a /v1/rerank body (query; documents: strings or {"text"}
 * objects; top_n; return_documents; instruction), as llaisys-server takes it; model and user
 * have no effect. Each document is put with the query into the model's reranking prompt and
 * scored by its relevance head (a sequence-classification checkpoint's score.weight, else the
 * next-token logits of the engine option rerank-tokens=NO,YES, else no,yes for a directory
 * whose README.md names Qwen3-Reranker: as the server decides), batched as embeddings are.
 * *result_json (for llaisys_free) is the /v1/rerank answer: {"model", "object": "list",
 * "results": [{"index", "relevance_score", "document"?}] best first, "usage", "meta"}.
 * Returns as llaisys_engine_embed; LLAISYS_ERR_UNSUPPORTED also for a model without a head
 * (the message says how to give it one). */
LLAISYS_API int32_t llaisys_engine_rerank(llaisys_engine *e, const char *request_json,
                                          char **result_json);

/* Engine counters, a snapshot taken at the end of the last step. */
struct llaisys_engine_stats {
    int32_t waiting, running, queued; /* requests waiting (preempted included), running,
                                         submitted and never started */
    int32_t kv_blocks, kv_in_use, kv_cached, kv_free, block_size;
    uint64_t steps, submitted, finished, rejected, preemptions;
    uint64_t prompt_tokens;    /* prompt (and recomputed) tokens run through the model */
    uint64_t cached_tokens;    /* prompt tokens taken from the prefix cache */
    uint64_t decode_tokens;    /* decode rows run */
    uint64_t generated_tokens; /* tokens sampled */
    double busy_s;             /* seconds spent in steps that did work */
};
/* Fill *out. Returns LLAISYS_OK or LLAISYS_ERR_INVALID_ARG. */
LLAISYS_API int32_t llaisys_engine_stats(llaisys_engine *e, struct llaisys_engine_stats *out);

enum llaisys_request_state {
    LLAISYS_REQ_WAITING = 0,   /* queued, not started */
    LLAISYS_REQ_RUNNING = 1,   /* holds KV blocks, computing */
    LLAISYS_REQ_PREEMPTED = 2, /* was running, gave its blocks up; waits to recompute */
    LLAISYS_REQ_FINISHED = 3,
};

enum llaisys_finish {
    LLAISYS_FINISH_NONE = 0,      /* not finished */
    LLAISYS_FINISH_STOP = 1,      /* eos, a stop id or a stop string */
    LLAISYS_FINISH_LENGTH = 2,    /* max_tokens, or the end of the context */
    LLAISYS_FINISH_CANCELLED = 3, /* llaisys_request_cancel / release, or engine destroyed */
    LLAISYS_FINISH_ERROR = 4,     /* an internal failure (event.error says which) */
};

/* "stop", "length", "cancelled", "error" ("" for NONE or other values). */
LLAISYS_API const char *llaisys_finish_str(int32_t finish);

struct llaisys_usage {
    int32_t prompt_tokens, completion_tokens;
    int32_t cached_tokens;    /* prompt tokens served by the prefix cache */
    int32_t reasoning_tokens; /* tokens of the reasoning ("</think>" included) */
    int32_t preemptions;
};

struct llaisys_timings {
    double queue_s, ttft_s, decode_s, total_s; /* from submit; 0 where not reached yet */
};

/* What one poll brings: everything new since the previous poll. Pointers point into the
 * request's buffers, valid until the next poll or release of that request. */
struct llaisys_event {
    const int32_t *ids;         /* (n_ids) new token ids (never NULL) */
    int32_t n_ids;
    const char *text;           /* (text_len) new answer text, NUL-terminated, whole UTF-8
                                   characters (never NULL) */
    size_t text_len;
    const char *reasoning;      /* (reasoning_len) new reasoning text, the same way */
    size_t reasoning_len;
    const float *logprobs;      /* (n_ids) log-probability of each id when logprobs were
                                   asked, else NULL */
    int32_t n_top;              /* alternatives per id (top_logprobs) */
    const int32_t *top_ids;     /* (n_ids, n_top) best ids per position, by logprob */
    const float *top_logprobs;  /* (n_ids, n_top) */
    int32_t state;              /* enum llaisys_request_state */
    int32_t finish;             /* enum llaisys_finish; not NONE exactly once, in the last
                                   event */
    int32_t stop_token_id;      /* the eos or stop id that ended it, else -1 */
    const char *stop_reason;    /* the stop string that ended it, else NULL */
    const char *error;          /* LLAISYS_FINISH_ERROR: the message, else NULL */
    uint64_t seed;              /* the seed the request samples with (drawn when not given) */
    struct llaisys_usage usage;
    struct llaisys_timings timings;
};

/* Take what is new for the request into *ev, first waiting up to timeout_s seconds for
 * something (0: do not wait; < 0: forever — only with a started engine or another thread
 * stepping it). Returns 1 when *ev carries new tokens or text or the finish, 0 when nothing
 * came (*ev then carries no ids or text, but the current state and usage), or
 * LLAISYS_ERR_INVALID_ARG. */
LLAISYS_API int32_t llaisys_request_poll(llaisys_request *r, double timeout_s,
                                         struct llaisys_event *ev);
/* Ask the request to end (any thread; a no-op once finished): it finishes as cancelled at the
 * next step and its KV blocks are freed. */
LLAISYS_API void llaisys_request_cancel(llaisys_request *r);
/* enum llaisys_request_state, now (any thread); *finish (may be NULL) gets enum llaisys_finish
 * (LLAISYS_FINISH_NONE until finished, then why, also after the last event was polled).
 * LLAISYS_ERR_INVALID_ARG for a NULL request. */
LLAISYS_API int32_t llaisys_request_state(const llaisys_request *r, int32_t *finish);
/* The request's id: from 1, in submit order, unique within its engine. */
LLAISYS_API uint64_t llaisys_request_id(const llaisys_request *r);
/* Give the handle up (cancels the request if it is still running). NULL is a no-op. */
LLAISYS_API void llaisys_request_release(llaisys_request *r);

#ifdef __cplusplus
}
#endif

#endif
