/*
 * kv_pool.h: the KV block pool and the prefix cache, as plain integers (no K/V data: the storage
 * is the runtime's ll_kv_cache, addressed through block tables; see attention.h).
 *
 * A block is in one of three conditions:
 *   in use:  ref > 0 (held by one or more sequences' block tables; shared prefix blocks have
 *            ref > 1);
 *   cached:  ref == 0 but it still holds a published hash (its K/V are valid and may be reused
 *            by a later request with the same prefix);
 *   free:    ref == 0 and no hash.
 * Cached and free blocks together are the allocatable blocks, kept in one queue: free blocks at
 * the front, cached blocks at the back in the order they were released, so allocation takes
 * empty blocks first and then evicts the cached block released longest ago (lazy eviction,
 * oldest first). A block's hash is dropped only when the block is allocated again.
 *
 * Prefix cache: a full block of block_size tokens is identified by a hash chained with the hash
 * of the block before it (kv_pool_hash_block), so equal hashes mean equal prefixes up to that
 * block. A lookup also compares the parent hash and the block's token ids, so a hash collision
 * between different token blocks cannot give a false hit.
 *
 * Check/commit: kv_pool_n_free() says how many blocks kv_pool_alloc() can still hand out;
 * kv_pool_alloc() returns -1 ("no room") when there is none and never corrupts the pool.
 *
 * Threads: a pool belongs to one thread (the engine's scheduler). No function allocates after
 * kv_pool_init().
 */
#ifndef LLAISYS_KV_POOL_H
#define LLAISYS_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

struct kv_pool {
    int n_blocks;
    int block_size;     /* tokens per block */
    int32_t *ref;       /* (n_blocks) reference count */
    uint8_t *hashed;    /* (n_blocks) 1: hash/parent/tokens are valid and it is in the table */
    uint64_t *hash;     /* (n_blocks) chained hash of the block's prefix */
    uint64_t *parent;   /* (n_blocks) hash of the block before it (0 for the first block) */
    int32_t *tokens;    /* (n_blocks, block_size) the token ids of a hashed block */
    int32_t *prev, *next; /* (n_blocks) links of the allocatable queue (-1 ends) */
    int32_t *chain;     /* (n_blocks) next block in the same hash bucket (-1 ends) */
    int32_t *bucket;    /* (n_buckets) first block of each bucket (-1: empty) */
    int n_buckets;      /* power of two */
    int head, tail;     /* allocatable queue: free blocks first, then cached, oldest first */
    int n_free;         /* blocks with ref == 0 (free + cached) */
    int n_hashed;       /* blocks with a hash (in use or cached) */
};

struct kv_pool_stats {
    int total;   /* n_blocks */
    int in_use;  /* ref > 0 */
    int shared;  /* ref > 1 (in use by several sequences) */
    int cached;  /* ref == 0 with a hash (evictable, reusable by a prefix hit) */
    int free;    /* ref == 0 without a hash */
};

/* Set up a pool of n_blocks blocks of block_size tokens, all free. Returns LL_OK, LL_EINVAL
 * (n_blocks < 1 or block_size < 1) or LL_ENOMEM. kv_pool_free() releases it (safe on a zeroed
 * struct and after a failed init). */
enum ll_status kv_pool_init(struct kv_pool *p, int n_blocks, int block_size, struct ll_err *err);
void kv_pool_free(struct kv_pool *p);

/* Forget every hash and mark every block free (only valid when no block is in use). */
void kv_pool_reset(struct kv_pool *p);

/* Blocks kv_pool_alloc() can still hand out (free + cached). */
static inline int kv_pool_n_free(const struct kv_pool *p) { return p->n_free; }

/* Take a block for a sequence: the first free block, else the cached block released longest
 * ago (its hash is dropped). Returns the block (ref 1) or -1 when every block is in use. */
int kv_pool_alloc(struct kv_pool *p);

/* Add a reference to a block that is in use or cached (a prefix hit); a cached block leaves the
 * allocatable queue. */
void kv_pool_ref(struct kv_pool *p, int block);

/* Drop a reference; at zero the block becomes cached (if hashed: queued last, evicted after
 * every block released before it) or free (queued first). */
void kv_pool_release(struct kv_pool *p, int block);

/* Release the blocks of a block table from the last to the first, so that a sequence's tail
 * blocks are evicted before its head (which other requests are likelier to share). */
void kv_pool_release_table(struct kv_pool *p, const int32_t *blocks, int n);

/* Hash of a full block of block_size tokens whose preceding block hashes to `parent` (0 for
 * the first block). Never returns 0. */
uint64_t kv_pool_hash_block(uint64_t parent, const int32_t *tokens, int block_size);

/* The block holding exactly (parent, hash, tokens), in use or cached, or -1. Takes no
 * reference. */
int kv_pool_lookup(const struct kv_pool *p, uint64_t hash, uint64_t parent,
                   const int32_t *tokens);

/* Publish a full, computed, in-use block under its hash so later requests can share it.
 * Returns true when published; false (nothing changes) when the block is already hashed or
 * another block already holds the same (hash, parent, tokens). */
bool kv_pool_publish(struct kv_pool *p, int block, uint64_t hash, uint64_t parent,
                     const int32_t *tokens);

/* Counts of blocks in use, shared, cached and free. */
void kv_pool_get_stats(const struct kv_pool *p, struct kv_pool_stats *st);

/* Verify every invariant (queue membership == ref 0, counts, hash table == hashed blocks,
 * no duplicate entries). Returns true when consistent; for tests and debug builds (O(n)). */
bool kv_pool_check(const struct kv_pool *p);

#endif
