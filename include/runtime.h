/*
 * runtime.h: running a loaded model: the forward-pass state of one model (KV cache, scratch,
 * thread pool, math mode) and one forward step over a flat batch of tokens.
 *
 * The implementation is the model family's (m->family, see model_registry.h); these functions
 * only dispatch, so callers never branch on the model type.
 *
 * Batch layout (ARCHITECTURE.md): token-major arrays of n_tokens entries, any mix of prefill
 * chunks and decode tokens of several sequences. Token i sits at position pos[i] of sequence
 * seq[i], its K/V go to slot[i], and its attention reads the slots of that sequence for positions
 * 0..pos[i] (written by this or earlier steps). Rows with want_logits get a logits row, or
 * (LL_WANT_HIDDEN) their final hidden state: the last layer's output after the final norm, the
 * vector lm_head would read (embeddings).
 *
 * Determinism: a token's logits depend only on the token, its position and its sequence's KV
 * contents, in the runtime's math mode: bit-identical whether it is computed in a prefill batch,
 * in a chunk, or as a decode step, and whatever the thread count.
 *
 * Ownership and threads: a runtime is owned by one thread (the scheduler or the CLI); it owns
 * its pool, whose workers run the kernels during runtime_forward(). Scratch is allocated in
 * runtime_create(); runtime_forward() does not allocate.
 */
#ifndef LLAISYS_RUNTIME_H
#define LLAISYS_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "attention.h"
#include "errors.h"
#include "matmul.h"
#include "model.h"
#include "pool.h"

/* Sizes and modes of a runtime; zero size fields take the defaults given (math is taken as is). */
struct runtime_opts {
    int n_ctx;          /* positions per sequence, >= 1 (no default here: engine_opts_resolve
                           chooses it) */
    int n_slots;        /* KV slots in the cache (default n_ctx: one contiguous sequence) */
    int block_size;     /* slots per KV block (default n_slots) */
    int max_batch;      /* tokens per forward step (default 512) */
    int n_threads;      /* compute threads, the caller's included (default
                           ll_pool_default_threads()) */
    enum ll_math math;  /* LL_MATH_FAST (bf16 activations in matmul, bf16 KV; the usual choice)
                           or LL_MATH_EXACT (f32 activations, f32 KV) */
    bool fixed_threads; /* run every thread whatever else runs on the cores (default: the pool
                           runs fewer while other processes keep them busy, pool.h) */
};

/* The family-independent part of a runtime; a family's runtime struct starts with it. */
struct model_runtime {
    const struct model *model;   /* not owned; must outlive the runtime */
    struct runtime_opts opts;    /* with every default resolved */
    struct ll_pool *pool;        /* owned */
    struct ll_kv_cache kv;       /* owned: (n_layers, n_slots, n_kv_heads, head_dim), bf16 or f32 */
};

/* want_logits values: a row's output. */
#define LL_WANT_LOGITS 1 /* (any nonzero value but LL_WANT_HIDDEN) its logits */
#define LL_WANT_HIDDEN 2 /* its final hidden state, into ll_batch.hidden instead */

/* One forward step. */
struct ll_batch {
    int n_tokens;
    const int32_t *token;         /* (n_tokens) ids < vocab_size */
    const int32_t *pos;           /* (n_tokens) positions < n_ctx */
    const int32_t *seq;           /* (n_tokens) index into seqs; NULL: all 0 */
    const int32_t *slot;          /* (n_tokens) KV slot; NULL: found through the block table */
    const uint8_t *want_logits;   /* (n_tokens) nonzero: produce this row's output (logits, or
                                     LL_WANT_HIDDEN); NULL: the last row's logits */
    float *hidden;                /* (rows with LL_WANT_HIDDEN, hidden_size) their final hidden
                                     states, in row order; caller-owned (NULL when none) */
    const struct ll_kv_seq *seqs; /* block tables; NULL: one sequence in slots 0..n_slots-1 */
    int n_seqs;
    /* Optional: asked between layers (the caller's thread); true stops the step with
     * LL_EABORTED. NULL: never asked. */
    bool (*abort_cb)(void *data);
    void *abort_data;
};

/* A batch checked against a runtime, each row resolved (runtime_batch_resolve). */
struct runtime_rows {
    const struct ll_kv_seq *seqs; /* the batch's block tables (or the default sequence's) */
    int n_seqs;
    int n_want;                   /* rows that want an output (logits or hidden) */
    int n_hidden;                 /* of those, rows that want their hidden state */
};

/* Create the runtime of m (m->family's implementation). Returns LL_OK, LL_EINVAL (an option out
 * of range: the message names it), LL_EUNSUPPORTED (the family has no forward pass) or
 * LL_ENOMEM (names what could not be allocated). */
enum ll_status runtime_create(struct model_runtime **out, const struct model *m,
                              const struct runtime_opts *opts, struct ll_err *err);
/* Free the runtime (NULL is a no-op). */
void runtime_free(struct model_runtime *rt);

/* Run one step: writes the batch's K/V into the cache and, for each row that wants logits, in
 * row order, one row of vocab_size f32 logits into logits (rows wanting logits, vocab),
 * caller-owned; each row with LL_WANT_HIDDEN gets hidden_size f32 in b->hidden instead.
 * Returns LL_OK, LL_EINVAL (n_tokens outside 1..max_batch, token id out of range, bad seq or
 * slot, hidden rows without b->hidden: names the row), LL_EUNSUPPORTED (a row wants logits of
 * a model without lm_head) or LL_ETOOLONG (position >= n_ctx or past the sequence's blocks): then
 * nothing was computed; or LL_EABORTED (b->abort_cb said stop between two layers: the batch's
 * slots may hold partly written K/V, which the next write of those positions replaces; no
 * logits). */
enum ll_status runtime_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                               struct ll_err *err);

/* Fill the zero sizes of opts but n_ctx (used by runtime_create). */
void runtime_opts_resolve(struct runtime_opts *opts);

/* For the families' forward passes: check b against rt (sizes, token ids, positions, sequences,
 * block tables, slots) and resolve every row: slot[i] its KV slot, seqi[i] its sequence, rows[]
 * the rows that want an output (logits or hidden) in ascending order (each array has b->n_tokens entries, the
 * caller's). seq0 is the family's default sequence (used when b->seqs is NULL). Returns LL_OK
 * or runtime_forward's LL_EINVAL / LL_ETOOLONG, naming the row. */
enum ll_status runtime_batch_resolve(const struct model_runtime *rt, const struct ll_batch *b,
                                     const struct ll_kv_seq *seq0, int32_t *slot, int32_t *seqi,
                                     int32_t *rows, struct runtime_rows *out,
                                     struct ll_err *err);

#endif
