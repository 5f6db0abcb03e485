/*
 * attention.h: the K/V storage and causal grouped-query attention over it.
 *
 * KV addressing: a sequence's key/value for position j lives in physical slot
 *   block_table[j / block_size] · block_size + j % block_size
 * of the layer's storage. A single sequence with a contiguous cache is the special case
 * block_size = n_slots, block_table = {0}; a paged cache only changes the tables.
 *
 * Determinism: the result for a token depends only on its query, its position, the batch's
 * options (window, scale, softcap) and the K/V in its sequence's slots for positions
 * start..pos (start = 0, or max(0, pos - window + 1) under a window): keys are always visited
 * in position order with the same arithmetic, whatever the batch. Callers write the batch's
 * K/V first (ll_kv_cache_write), then attend, so a token sees the same cache contents in a prefill batch as in a decode step.
 * Threads: ll_attention splits (token, KV head) pairs over the pool; each pair, with its group of
 * query heads, is computed by one thread from start to end.
 */
#ifndef LLAISYS_ATTENTION_H
#define LLAISYS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "errors.h"
#include "pool.h"

/* Per-layer K and V storage. Owned by its creator (ll_kv_cache_init/free). */
struct ll_kv_cache {
    enum ll_dtype dtype; /* LL_F32 (exact path) or LL_BF16 (fast path) */
    int n_layers;
    int n_slots;
    int n_kv_heads;
    int head_dim;
    void *k; /* (n_layers, n_slots, n_kv_heads, head_dim) */
    void *v; /* (n_layers, n_slots, n_kv_heads, head_dim) */
};

/* Allocate the storage (contents undefined until written). Returns LL_OK, LL_EINVAL (bad
 * dtype or size) or LL_ENOMEM (the message gives the bytes asked for). */
enum ll_status ll_kv_cache_init(struct ll_kv_cache *kv, enum ll_dtype dtype, int n_layers,
                                int n_slots, int n_kv_heads, int head_dim, struct ll_err *err);
/* Free the storage (safe on a zeroed struct). */
void ll_kv_cache_free(struct ll_kv_cache *kv);

/* Store n tokens' k and v rows (n, n_kv_heads·head_dim) f32 into slots slot[i] of a layer,
 * rounding to bf16 when the cache is bf16. */
void ll_kv_cache_write(struct ll_kv_cache *kv, int layer, const int32_t *slot, const float *k,
                       const float *v, int n);

/* Where one sequence's slots are. */
struct ll_kv_seq {
    const int32_t *block_table; /* (n_blocks) physical block of each logical block */
    int n_blocks;
};

/* The attention view of a batch. */
struct ll_attn_batch {
    int n_tokens;
    const int32_t *pos;           /* (n_tokens) position of each token in its sequence */
    const int32_t *seq;           /* (n_tokens) index into seqs */
    const struct ll_kv_seq *seqs; /* the sequences of the batch */
    int block_size;               /* slots per block */
    /* Options (Gemma 2 / 3); zero in each keeps the plain causal attention, so initializers
     * that stop at block_size mean what they did. */
    int window;    /* > 0: sliding window, a token at pos sees positions j with pos - j < window,
                    * i.e. max(0, pos - window + 1)..pos (Hugging Face's sliding-window mask);
                    * 0: all of 0..pos */
    float scale;   /* > 0: scores are q·k · scale (query_pre_attn_scalar^-0.5); 0: 1/√hd */
    float softcap; /* > 0: each scaled score s becomes softcap · tanh(s / softcap) before the
                    * softmax (attn_logit_softcapping); 0: none */
};

/* Most query heads per KV head (n_heads / n_kv_heads) that ll_attention accepts. */
#define LL_ATTN_MAX_GROUP 64

/* Floats of scratch ll_attention needs: n_threads · (n_heads / n_kv_heads) · max_keys. */
size_t ll_attention_scratch_floats(int n_threads, int n_heads, int n_kv_heads, int max_keys);

/* out (n_tokens, n_heads·hd) = softmax(cap(q·Kᵀ · scale)) · V over the token's sequence,
 * positions start..pos[i] (start = 0, or max(0, pos[i] - window + 1) under b->window), query
 * head h reading KV head h / (n_heads / n_kv_heads); scale = b->scale or 1/√hd, cap(s) =
 * softcap · tanh(s / softcap) under b->softcap, else s.
 * q (n_tokens, n_heads·hd) after RoPE. scratch: ll_attention_scratch_floats(ll_pool_size(pool),
 * n_heads, kv->n_kv_heads, max_keys) floats, where max_keys >= the keys of every token
 * (pos[i] + 1, or the window where that is smaller; max_keys > every pos[i] always does). */
void ll_attention(float *out, const float *q, const struct ll_kv_cache *kv, int layer,
                  const struct ll_attn_batch *b, int n_heads, float *scratch, int max_keys,
                  struct ll_pool *pool);

/* The same (options included) with the scalar inner loops, single-threaded (reference for
 * tests). */
void ll_attention_ref(float *out, const float *q, const struct ll_kv_cache *kv, int layer,
                      const struct ll_attn_batch *b, int n_heads, float *scratch, int max_keys);

/* Name of the inner-loop variant in use for this head_dim ("avx512", "avx2" or "scalar": the ops'
 * variant, ops.h, where head_dim is a multiple of its 16 or 8 lanes). */
const char *ll_attention_variant(int head_dim);

#endif
