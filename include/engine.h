/*
 * engine.h: the inference engine: many requests served at once by one model, with continuous
 * batching over a paged KV cache, a prefix cache, preemption, and deterministic outputs.
 *
 * A request is a prompt of token ids plus sampling parameters. Each step, the scheduler builds
 * one flat batch from the decode token of every running sequence (and their draft tokens, with
 * --spec) and then chunks of waiting prompts, under a token budget (max_batch_tokens),
 * max_seqs and, while sequences decode, a prompt budget sized from the measured step cost to
 * keep the step under the inter-token latency target (itl_target_ms; scheduler.c); runs the
 * forward pass; samples; checks stops; and appends new tokens and UTF-8-safe text deltas to
 * each request's outbox.
 * Request states: waiting → running → finished (stop, length, cancelled, error), and
 * running → preempted → waiting when KV blocks run out (the most recently started sequence is
 * preempted; it later recomputes its tokens as a prompt).
 *
 * Determinism: a request's tokens depend only on its prompt and parameters (seed included), not
 * on what else runs, on preemption, or on prefix-cache hits (same math mode and block size).
 * Sampling randomness is drawn from (seed, choice index, token position). Every control below
 * (bias, penalties, min_tokens, stops, logprobs, the reasoning split) is a function of the
 * request's own tokens, so it keeps that guarantee.
 *
 * Per-request controls, applied to the request's logits row inside the shared batch, in this
 * order (sampler.h): logit_bias, then the penalties (repetition over prompt and output,
 * presence / frequency over the output), then eos and stop ids banned while fewer than
 * min_tokens tokens were generated, then the grammar mask (params.grammar, below), then
 * temperature, min_p, top_k, top_p and the draw.
 * Logprobs (when asked): log_softmax(l / T) of the logits l after bias, penalties, the
 * min_tokens ban and the grammar mask, over the whole vocabulary, before min_p / top_k / top_p
 * (T = 1 when greedy): with a grammar they are the log-probabilities of the masked
 * distribution, the one the token was drawn from.
 *
 * Constrained decoding (params.grammar, grammar.h): after the min_tokens ban and before
 * temperature, every token whose bytes cannot continue the grammar gets -inf; eos and stop ids
 * are allowed only where the grammar accepts. The grammar state is advanced by each token's
 * bytes, so the mask is a function of the tokens so far (determinism, preemption and the
 * prefix cache are unaffected). When the grammar is complete (it accepts and nothing may
 * follow) the request ends at once with "stop", min_tokens or not. Near max_tokens only tokens
 * after which the grammar can still be completed in the tokens left are allowed, so an output
 * cut by max_tokens is still a complete sentence when max_tokens leaves room for one. When the
 * output starts inside the reasoning (see the text path), the grammar applies after "</think>":
 * the reasoning is free text, and "</think>" is forced in time to complete the grammar; where
 * the output may open the reasoning itself (a "<think>" first, as Qwen3 writes), the grammar
 * applies either from the start or after such a reasoning. Stop
 * strings still apply (and may cut a constrained output). Masks are cached per grammar state
 * and shared by requests with equal grammars; a request whose grammar needs more states than
 * GRAMMAR_MAX_STATES finishes with an error.
 *
 * Text path: the token's text (incremental, UTF-8 safe) goes through stop strings and the
 * reasoning split before it reaches the outbox. A stop string ends the request with "stop"; it
 * and everything after it are never emitted; text is held back only while its end could still
 * be the start of a stop string (or of "</think>"), so a match split across tokens is found.
 * Stop strings are looked for once min_tokens tokens exist (from the min_tokens-th token's text
 * on). With `reasoning`, the text up to "</think>" is reasoning (engine_output.reasoning), the
 * rest the answer (engine_output.text): the output starts inside the reasoning when the prompt
 * leaves a <think> token open (the DeepSeek-R1 template ends with "<think>\n"), else a "<think>"
 * at the very start of the output opens it; the markers themselves are not emitted.
 * usage.reasoning_tokens counts the tokens up to and including the one that completed
 * "</think>" (all of them while it is still open).
 *
 * Speculative decoding (opts.spec, spec.h): a decoding sequence may carry draft tokens,
 * continued from an earlier occurrence of its last tokens in its own prompt and output, as
 * extra rows of the same batch. Its rows' tokens are sampled in order exactly as without
 * drafts (the same processed logits, history and (seed, choice, position) draw); a draft is
 * accepted when it equals the token sampled at its position, and the first mismatch ends the
 * step for that sequence. So outputs, logprobs, stops and finishes are those of plain
 * decoding; a step merely yields up to 1 + spec_max_draft tokens of a sequence.
 * usage.spec_drafted / spec_accepted count the drafts verified and accepted.
 *
 * Embeddings (params.embed, pooling.h): a request that generates nothing. Its prompt runs
 * through the model like any other (chunked, batched beside generating sequences, preempted,
 * taking cached prefix blocks with last-position pooling) and its rows ask the forward pass for
 * their final hidden states instead of logits (runtime.h LL_WANT_HIDDEN): the last position's
 * (LL_POOL_LAST), or every position's, summed in position order in double and divided
 * (LL_POOL_MEAN), or the first's (LL_POOL_FIRST). Once the prompt is computed the request
 * finishes with "stop" and the pooled vector (hidden_size floats, not normalized) in
 * engine_output.embedding. Pooling that needs every position neither takes from nor publishes
 * to the prefix cache. A row's state does not depend on the batch, so neither does the vector.
 *
 * n > 1: submit one request per choice (choice = 0..n-1, same prompt and seed); each draws with
 * its own seed mixed from (seed, choice). The prompt is computed once: a request whose prompt
 * shares full KV blocks with the prompt of a running request that is still computing them
 * waits in the queue until they are in the prefix cache, then takes them (cached_tokens says
 * how many); only the last, partial block and the prompt's last token are computed again.
 *
 * Threads and ownership:
 *   - The scheduler (engine_step's caller, or the thread engine_start runs) owns all engine
 *     state: model, runtime, KV pool, request lists. engine_step / engine_start / engine_stop /
 *     engine_destroy are called from one controlling thread.
 *   - engine_submit, engine_cancel, engine_poll, engine_wait, engine_req_release and
 *     engine_get_stats may be called from any thread at any time (between create and destroy).
 *     They take the engine's one mailbox lock only to push or pop (lock order: just that one).
 *   - A request handle (struct engine_req) returned by engine_submit belongs to the caller until
 *     engine_req_release; the engine keeps its own reference while the request runs.
 *   - The scheduler does not allocate on the decode path after warm-up (request memory is
 *     allocated in engine_submit on the caller's thread; outboxes grow only when a poller has
 *     not drained them).
 */
#ifndef LLAISYS_ENGINE_H
#define LLAISYS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_opts.h"
#include "buf.h"
#include "errors.h"
#include "pooling.h"
#include "sampler.h"

struct engine;
struct engine_req;
struct grammar;
struct model;
struct tokenizer;

#define ENGINE_MAX_STOP_IDS 16
#define ENGINE_MAX_STOP_STRINGS 16
#define ENGINE_MAX_STOP_LEN 256 /* bytes of one stop string */
#define ENGINE_MAX_LOGIT_BIAS 4096
#define ENGINE_MAX_KEEP_IDS 8 /* special tokens one request keeps as text */
#define ENGINE_SPEC_ROWS 64 /* draft tokens one step verifies at most, all sequences together */

/* One request. Arrays and strings are copied by engine_submit. A zeroed struct plus a prompt
 * is greedy decoding up to the end of the context. */
struct engine_params {
    const int32_t *prompt;          /* (n_prompt) token ids, 1 <= n_prompt < n_ctx */
    int n_prompt;
    struct sampler_params sampling; /* temperature (<= 0 greedy), top_k, top_p, min_p, seed */
    struct sampler_penalties penalties; /* repetition (0 or 1: off; > 0), presence, frequency */
    const struct sampler_bias *logit_bias; /* (n_logit_bias) added to the raw logits */
    int n_logit_bias;               /* <= ENGINE_MAX_LOGIT_BIAS; ids in the vocabulary */
    int choice;                     /* choice index (n > 1); mixes into the seed */
    int max_tokens;                 /* new tokens at most; <= 0: the rest of the context */
    int min_tokens;                 /* eos and stop ids banned, stop strings not looked for,
                                       before this many new tokens (0: none) */
    const int32_t *stop_ids;        /* (n_stop_ids) ids that end the request ("stop") */
    int n_stop_ids;                 /* <= ENGINE_MAX_STOP_IDS */
    const char *const *stop;        /* (n_stop) stop strings: non-empty, at most
                                       ENGINE_MAX_STOP_LEN bytes, not starting with a UTF-8
                                       continuation byte */
    int n_stop;                     /* <= ENGINE_MAX_STOP_STRINGS */
    bool ignore_eos;                /* do not stop on the model's eos ids */
    bool keep_special;              /* text includes special tokens (default: skipped) */
    const int32_t *keep_ids;        /* (n_keep_ids) special tokens that are text all the same:
                                       written into the text when special tokens are skipped,
                                       and allowed by the grammar where their text is (the
                                       tool-call marker, e.g. Mistral's [TOOL_CALLS]) */
    int n_keep_ids;                 /* <= ENGINE_MAX_KEEP_IDS */
    bool logprobs;                  /* report each token's logprob (engine_output.logprobs) */
    int top_logprobs;               /* and this many alternatives, 0..SAMPLER_MAX_TOP_LOGPROBS */
    bool reasoning;                 /* split <think> reasoning from the answer (see above) */
    bool no_cache;                  /* neither take from nor publish to the prefix cache */
    uint64_t pin_key;               /* nonzero: at a stop or length finish, keep the request's
                                       full computed blocks pinned under this key, replacing
                                       the key's previous pin (sessions; see engine_unpin) */
    struct grammar *grammar;        /* constrain the output to this grammar (grammar.h), or
                                       NULL; engine_submit takes its own reference */
    int cache_prefix;               /* > 0: publish only the full blocks of the first
                                       cache_prefix tokens to the prefix cache (the part other
                                       requests share: a rerank request's instruction and
                                       query); 0: every full block */
    enum ll_pooling embed;          /* LL_POOL_NONE: generate; else an embedding (see
                                       Embeddings above): the prompt may fill the context
                                       (1 <= n_prompt <= n_ctx), and max_tokens, the sampling,
                                       stopping and output controls, grammar and pin_key are
                                       ignored */
};

enum engine_finish {
    ENGINE_RUNNING = 0,      /* not finished */
    ENGINE_FINISH_STOP,      /* an eos or stop id was sampled (not included in the output) */
    ENGINE_FINISH_LENGTH,    /* max_tokens reached, or the context is full */
    ENGINE_FINISH_CANCELLED, /* engine_cancel / engine_req_release before the end */
    ENGINE_FINISH_ERROR,     /* an internal failure; message in engine_output.error */
    ENGINE_FINISH_COUNT      /* how many values there are (arrays indexed by the enum) */
};

struct engine_usage {
    int prompt_tokens;     /* n_prompt */
    int cached_tokens;     /* prompt tokens served from the prefix cache at first start */
    int completion_tokens; /* tokens produced so far */
    int preemptions;       /* times this request was preempted */
    int reasoning_tokens;  /* tokens of the reasoning, "</think>" included (params.reasoning) */
    int spec_drafted;      /* draft tokens verified for this request (--spec) */
    int spec_accepted;     /* of those, accepted (each is one completion token that took no
                              step of its own); the acceptance rate is accepted / drafted */
};

/* Seconds, measured from engine_submit; 0 where not reached yet. */
struct engine_timings {
    double queue_s; /* submit → first scheduled */
    double ttft_s;  /* submit → first token */
    double total_s; /* submit → finish */
    double decode_s; /* first token → finish (the decode phase) */
};

/* What a poll returns: everything new since the previous poll (merged), plus the status.
 * The caller owns the struct; its buffers are swapped with the engine's on each poll, so
 * repeated polls reuse memory. Initialise with {0}; free with engine_output_free. */
struct engine_output {
    int32_t *ids;       /* (n_ids) new token ids */
    int n_ids, cap_ids;
    struct sampler_logprobs *logprobs; /* (n_ids) one per new id when params.logprobs, else
                           NULL or not filled */
    int cap_logprobs;
    struct ll_buf text; /* new UTF-8 text (the answer): text.len bytes at text.data; complete
                           characters only (held bytes of an unfinished one come with the
                           finish, as U+FFFD) */
    struct ll_buf reasoning; /* new reasoning text (params.reasoning), as text */
    enum engine_finish finish; /* ENGINE_RUNNING until the final poll */
    int32_t stop_id;    /* the eos/stop id that ended it (ENGINE_FINISH_STOP), else -1 */
    int stop_str;       /* index of the stop string that ended it, else -1 */
    struct engine_usage usage;
    struct engine_timings timings;
    char error[256];    /* message when finish is ENGINE_FINISH_ERROR */
    float *embedding;   /* (n_embedding) params.embed: the pooled vector, set by the poll
                           that brings the finish ("stop"; an embedding that was cancelled or
                           failed brings none). The caller's: engine_output_free frees it */
    int n_embedding;
};

/* Engine-wide counters, a snapshot taken at the end of the last step. */
struct engine_stats {
    int waiting, running;       /* requests in each state (waiting includes preempted ones) */
    int queued;                 /* submitted, never started */
    int held;                   /* submitted, neither finished nor cancelled: the admission
                                   count, at most admission_limit */
    int admission_limit;        /* max_seqs + max_queue */
    long long kv_tokens;        /* tokens whose K/V running sequences hold (a shared prefix
                                   block counts once per sequence) */
    long long kv_tokens_peak;   /* the most kv_tokens seen at the end of a step */
    int kv_blocks, kv_in_use, kv_cached, kv_free, block_size;
    uint64_t steps, submitted, finished, rejected, preemptions;
    uint64_t prompt_tokens;     /* prompt (and recomputed) tokens run through the model */
    uint64_t cached_tokens;     /* prompt tokens taken from the prefix cache */
    uint64_t decode_tokens;     /* decode rows run through the model */
    uint64_t generated_tokens;  /* tokens sampled */
    uint64_t embeddings;        /* embedding requests finished with their vector */
    uint64_t forward_failures;  /* requests finished with an error because their own forward
                                   pass failed (the rest of their step went on) */
    uint64_t spec_drafted;      /* draft tokens verified (--spec) */
    uint64_t spec_accepted;     /* draft tokens accepted */
    double busy_s;              /* time spent in steps that did work */
    int compute_threads;        /* threads the compute pool runs its next op on (fewer than
                                   --threads while other processes keep the cores busy) */
    /* the scheduler's step-cost estimate (scheduler.c), as of the last step; < 0: unknown */
    double cost_step_s;         /* a step of the running sequences' decode rows alone */
    double cost_prompt_token_s; /* one more row (a prompt token, a draft) beside them */
    int prompt_budget;          /* prompt tokens the last step could take (-1: no limit, nothing
                                   was decoding) */
    int pins;                   /* pinned keys (engine_params.pin_key) */
    int kv_pinned;              /* block references held by pins (a block pinned by two keys
                                   counts twice) */
    uint64_t pins_dropped;      /* pins released to make room or to keep the pin limit */
    uint64_t grammar_masks;     /* logits rows masked by a grammar */
    double grammar_s;           /* time spent computing and applying those masks */
};

/* Open the model directory (model.h) and its tokenizer, resolve the options for the model
 * (engine_opts_resolve; opts NULL: every default), create the runtime, KV pool and buffers.
 * Returns LL_OK (*out owns everything; free with engine_destroy), LL_EINVAL (an option out of
 * range or at odds with another: engine_opts_check names it; or a KV pool of no block), or what
 * model_open, tokenizer_load, runtime_create return (LL_EIO, LL_EJSON, LL_EFORMAT, LL_EMODEL,
 * LL_EUNSUPPORTED, LL_ENOMEM). */
enum ll_status engine_create(struct engine **out, const char *model_dir,
                             const struct engine_opts *opts, struct ll_err *err);

/* Stop the scheduler thread if started, cancel and drop every request, free everything.
 * Handles the caller still holds stay valid until engine_req_release (their poll reports
 * cancelled); release them before or after, but do not call other functions on a destroyed
 * engine. NULL is a no-op. */
void engine_destroy(struct engine *e);

/* The loaded model, tokenizer and resolved options (owned by the engine; read-only). */
const struct model *engine_model(const struct engine *e);
const struct tokenizer *engine_tokenizer(const struct engine *e);
const struct engine_opts *engine_get_opts(const struct engine *e);

/* Queue a request (any thread). On LL_OK *out is the caller's handle (engine_req_release).
 * Returns LL_OK; LL_EINVAL (empty prompt, token id outside the vocabulary, an unknown pooling,
 * negative or too many stop ids or stop strings, a bad stop string, a logit_bias id outside the
 * vocabulary, bad sampling values or penalties, top_logprobs out of range: the message names
 * it); LL_EUNSUPPORTED (a generation request to a model without lm_head); LL_ETOOLONG (the
 * prompt plus max_tokens, or an embedding's input, exceeds the context, or needs more KV
 * blocks than the whole pool: it could never run); LL_EOVERLOADED (max_seqs + max_queue requests are already held: submitted and neither
 * finished nor cancelled; a cancel frees its slot at once); LL_ENOMEM. On error *out is NULL. */
enum ll_status engine_submit(struct engine *e, const struct engine_params *p,
                             struct engine_req **out, struct ll_err *err);

/* The request's id (unique within the engine, from 1, in submit order). */
uint64_t engine_req_id(const struct engine_req *r);

/* Where a request is (any thread): waiting (never started), running (holds KV blocks),
 * preempted (gave its blocks up, waits to recompute), finished; *finish (may be NULL) gets why
 * it finished (ENGINE_RUNNING until then). */
enum engine_req_state {
    ENGINE_REQ_WAITING,
    ENGINE_REQ_RUNNING,
    ENGINE_REQ_PREEMPTED,
    ENGINE_REQ_FINISHED,
};
enum engine_req_state engine_req_state(const struct engine_req *r, enum engine_finish *finish);

/* Everything engine_req_state says, with the tokens so far and the times (ll_now() clock, 0:
 * not yet): submitted, first started, first token. Any thread. */
struct engine_req_info {
    enum engine_req_state state;
    enum engine_finish finish;
    struct engine_usage usage;  /* prompt, cached and completion tokens so far, preemptions */
    double submitted_at, started_at, first_token_at;
};
void engine_req_info(const struct engine_req *r, struct engine_req_info *info);

/* Ask for a request to end (any thread, any state; a no-op once finished). It finishes as
 * ENGINE_FINISH_CANCELLED at the next step boundary and its KV blocks are freed. */
void engine_cancel(struct engine_req *r);

/* Move what is new into *out (any thread; see struct engine_output). Returns true when *out
 * carries anything: new tokens or text, or the finish (reported once, with the final text). */
bool engine_poll(struct engine_req *r, struct engine_output *out);

/* As engine_poll, first waiting up to timeout_s seconds (< 0: forever) for something new.
 * Returns false on timeout. */
bool engine_wait(struct engine_req *r, struct engine_output *out, double timeout_s);

/* Give up the caller's handle (cancels the request if it is still running). NULL is a no-op. */
void engine_req_release(struct engine_req *r);

/* Free the buffers of an output (safe on a zeroed struct). */
void engine_output_free(struct engine_output *out);

/* Run one scheduler step on the calling thread: admit submitted requests, process cancels,
 * build and run one batch, sample, stop, publish outputs. Returns LL_OK with *did_work set to
 * whether any token was computed or any request finished (false: nothing to do), or LL_EINVAL
 * when the engine's own thread is running (engine_start). A failed forward pass is not an error
 * of the step: its requests are run again one at a time, those whose own forward fails finish
 * with ENGINE_FINISH_ERROR and the model's message, the others go on unchanged. */
enum ll_status engine_step(struct engine *e, bool *did_work, struct ll_err *err);

/* Run engine_step until every submitted request has finished (for the CLI and tests). Returns
 * LL_OK or engine_step's error. */
enum ll_status engine_run_until_idle(struct engine *e, struct ll_err *err);

/* Whether a step has anything to do: a request submitted, waiting or running, or a cancel to
 * apply. From the controlling thread, while the engine's own thread is not running. */
bool engine_has_work(struct engine *e);

/* Forget the prefix cache (every cached block becomes free). From the controlling thread, while
 * the engine's own thread is not running. Returns false, changing nothing, while a request
 * holds KV blocks. */
bool engine_reset_prefix_cache(struct engine *e);

/* Start the engine's scheduler thread: steps in a loop, sleeps while idle, wakes on submit and
 * cancel. Returns LL_OK, LL_EINVAL (already started) or LL_ENOMEM (no thread). */
enum ll_status engine_start(struct engine *e, struct ll_err *err);

/* Stop and join the scheduler thread after its current step (requests stay queued; a no-op if
 * not started). */
void engine_stop(struct engine *e);

/* Snapshot of the counters (any thread). */
void engine_get_stats(struct engine *e, struct engine_stats *st);

/* Pins (pins.c): a pin holds references on a finished request's full computed blocks, so they
 * are never evicted and the next request with that prefix finds them in the prefix cache.
 * Pinned blocks never make a request wait or get preempted: when blocks are missing the
 * scheduler releases the least recently used pins first (their blocks stay in the ordinary
 * prefix cache until evicted). engine_set_pin_limit caps the block references all pins hold
 * (past it the least recently used pins are released; default 0: no pins kept); engine_unpin
 * releases a key's pin at the next step; engine_pinned_blocks says how many blocks a key pins
 * now (0: none). Any thread. */
void engine_set_pin_limit(struct engine *e, int blocks);
void engine_unpin(struct engine *e, uint64_t key);
int engine_pinned_blocks(struct engine *e, uint64_t key);

/* "stop", "length", "cancelled", "error" ("" while running): the OpenAI finish_reason words. */
const char *engine_finish_str(enum engine_finish f);

#endif
