/*
 * kv_pool.c: block pool with reference counts and the prefix-cache hash table (see kv_pool.h).
 *
 * Owned by the scheduler thread. All arrays are allocated in kv_pool_init(); every operation is
 * O(1) except hash bucket walks (chains stay short: there are at least twice as many buckets as
 * blocks).
 *
 * Invariants (kv_pool_check verifies them):
 *   - a block is in the allocatable queue exactly when its ref is 0; n_free counts them;
 *   - in the queue every unhashed block comes before every hashed block;
 *   - a block is in exactly one hash bucket chain exactly when hashed[b] is 1; no two hashed
 *     blocks hold the same (hash, parent, tokens).
 */
#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "util.h"

enum ll_status kv_pool_init(struct kv_pool *p, int n_blocks, int block_size, struct ll_err *err)
{
    memset(p, 0, sizeof *p);
    p->head = p->tail = -1;
    if (n_blocks < 1 || block_size < 1 || n_blocks > (1 << 28) || block_size > (1 << 16))
        return ll_err_set(err, LL_EINVAL, "kv pool: %d blocks of %d tokens", n_blocks,
                          block_size);
    int nb = 16;
    while (nb < 2 * n_blocks)
        nb *= 2;
    size_t n = (size_t)n_blocks;
    p->ref = calloc(n, sizeof *p->ref);
    p->hashed = calloc(n, sizeof *p->hashed);
    p->hash = calloc(n, sizeof *p->hash);
    p->parent = calloc(n, sizeof *p->parent);
    p->tokens = calloc(n * (size_t)block_size, sizeof *p->tokens);
    p->prev = malloc(n * sizeof *p->prev);
    p->next = malloc(n * sizeof *p->next);
    p->chain = malloc(n * sizeof *p->chain);
    p->bucket = malloc((size_t)nb * sizeof *p->bucket);
    if (!p->ref || !p->hashed || !p->hash || !p->parent || !p->tokens || !p->prev || !p->next ||
        !p->chain || !p->bucket) {
        kv_pool_free(p);
        return ll_err_set(err, LL_ENOMEM, "kv pool: out of memory for %d blocks of %d tokens",
                          n_blocks, block_size);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_buckets = nb;
    kv_pool_reset(p);
    return LL_OK;
}

void kv_pool_free(struct kv_pool *p)
{
    free(p->ref);
    free(p->hashed);
    free(p->hash);
    free(p->parent);
    free(p->tokens);
    free(p->prev);
    free(p->next);
    free(p->chain);
    free(p->bucket);
    memset(p, 0, sizeof *p);
    p->head = p->tail = -1;
}

void kv_pool_reset(struct kv_pool *p)
{
    for (int b = 0; b < p->n_blocks; b++) {
        LL_ASSERT(p->ref[b] == 0);
        p->hashed[b] = 0;
        p->chain[b] = -1;
        p->prev[b] = b - 1;
        p->next[b] = b + 1 < p->n_blocks ? b + 1 : -1;
    }
    for (int i = 0; i < p->n_buckets; i++)
        p->bucket[i] = -1;
    p->head = p->n_blocks ? 0 : -1;
    p->tail = p->n_blocks - 1;
    p->n_free = p->n_blocks;
    p->n_hashed = 0;
}

/* ---- the allocatable queue ---- */

static void queue_remove(struct kv_pool *p, int b)
{
    int pv = p->prev[b], nx = p->next[b];
    if (pv >= 0)
        p->next[pv] = nx;
    else
        p->head = nx;
    if (nx >= 0)
        p->prev[nx] = pv;
    else
        p->tail = pv;
    p->prev[b] = p->next[b] = -1;
    p->n_free--;
}

static void queue_push_front(struct kv_pool *p, int b)
{
    p->prev[b] = -1;
    p->next[b] = p->head;
    if (p->head >= 0)
        p->prev[p->head] = b;
    else
        p->tail = b;
    p->head = b;
    p->n_free++;
}

static void queue_push_back(struct kv_pool *p, int b)
{
    p->next[b] = -1;
    p->prev[b] = p->tail;
    if (p->tail >= 0)
        p->next[p->tail] = b;
    else
        p->head = b;
    p->tail = b;
    p->n_free++;
}

/* ---- the hash table ---- */

static int bucket_of(const struct kv_pool *p, uint64_t hash)
{
    return (int)(hash & (uint64_t)(p->n_buckets - 1));
}

static void table_remove(struct kv_pool *p, int b)
{
    int *link = &p->bucket[bucket_of(p, p->hash[b])];
    while (*link != b) {
        LL_ASSERT(*link >= 0);
        link = &p->chain[*link];
    }
    *link = p->chain[b];
    p->chain[b] = -1;
    p->hashed[b] = 0;
    p->n_hashed--;
}

/* ---- public operations ---- */

int kv_pool_alloc(struct kv_pool *p)
{
    int b = p->head;
    if (b < 0)
        return -1;
    LL_ASSERT(p->ref[b] == 0);
    queue_remove(p, b);
    if (p->hashed[b])
        table_remove(p, b); /* evicted: its K/V are about to be overwritten */
    p->ref[b] = 1;
    return b;
}

void kv_pool_ref(struct kv_pool *p, int b)
{
    LL_ASSERT(b >= 0 && b < p->n_blocks);
    if (p->ref[b] == 0) {
        LL_ASSERT(p->hashed[b]); /* only a cached block can be revived */
        queue_remove(p, b);
    }
    p->ref[b]++;
}

void kv_pool_release(struct kv_pool *p, int b)
{
    LL_ASSERT(b >= 0 && b < p->n_blocks && p->ref[b] > 0);
    if (--p->ref[b] > 0)
        return;
    if (p->hashed[b])
        queue_push_back(p, b);
    else
        queue_push_front(p, b);
}

void kv_pool_release_table(struct kv_pool *p, const int32_t *blocks, int n)
{
    for (int i = n - 1; i >= 0; i--)
        kv_pool_release(p, blocks[i]);
}

uint64_t kv_pool_hash_block(uint64_t parent, const int32_t *tokens, int block_size)
{
    uint64_t h = ll_mix64(parent ^ 0x6a09e667f3bcc909ull);
    for (int i = 0; i < block_size; i++)
        h = ll_mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + LL_GOLDEN64 * (uint64_t)(i + 1)));
    return h ? h : 1;
}

static bool same_block(const struct kv_pool *p, int b, uint64_t hash, uint64_t parent,
                       const int32_t *tokens)
{
    return p->hash[b] == hash && p->parent[b] == parent &&
           !memcmp(p->tokens + (size_t)b * p->block_size, tokens,
                   sizeof(int32_t) * (size_t)p->block_size);
}

int kv_pool_lookup(const struct kv_pool *p, uint64_t hash, uint64_t parent,
                   const int32_t *tokens)
{
    for (int b = p->bucket[bucket_of(p, hash)]; b >= 0; b = p->chain[b])
        if (same_block(p, b, hash, parent, tokens))
            return b;
    return -1;
}

bool kv_pool_publish(struct kv_pool *p, int b, uint64_t hash, uint64_t parent,
                     const int32_t *tokens)
{
    LL_ASSERT(b >= 0 && b < p->n_blocks && p->ref[b] > 0);
    if (p->hashed[b] || kv_pool_lookup(p, hash, parent, tokens) >= 0)
        return false;
    p->hash[b] = hash;
    p->parent[b] = parent;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, sizeof(int32_t) * (size_t)p->block_size);
    int k = bucket_of(p, hash);
    p->chain[b] = p->bucket[k];
    p->bucket[k] = b;
    p->hashed[b] = 1;
    p->n_hashed++;
    return true;
}

void kv_pool_get_stats(const struct kv_pool *p, struct kv_pool_stats *st)
{
    memset(st, 0, sizeof *st);
    st->total = p->n_blocks;
    int cached = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        if (p->ref[b] > 1)
            st->shared++;
        if (p->ref[b] == 0 && p->hashed[b])
            cached++;
    }
    st->in_use = p->n_blocks - p->n_free;
    st->cached = cached;
    st->free = p->n_free - cached;
}

bool kv_pool_check(const struct kv_pool *p)
{
    int n = p->n_blocks, queued = 0, hashed = 0;
    bool seen_hashed = false;
    uint8_t *mark = calloc((size_t)n + 1, 1);
    if (!mark)
        return false;
    bool ok = true;
    /* Queue: walk forwards, check back links, membership == ref 0, free before cached. */
    for (int b = p->head, pv = -1; b >= 0 && ok; pv = b, b = p->next[b]) {
        if (b >= n || mark[b] || p->prev[b] != pv || p->ref[b] != 0)
            ok = false;
        else {
            mark[b] = 1;
            queued++;
            if (p->hashed[b])
                seen_hashed = true;
            else if (seen_hashed)
                ok = false;
            if (p->next[b] < 0 && p->tail != b)
                ok = false;
        }
    }
    if (queued != p->n_free)
        ok = false;
    for (int b = 0; b < n && ok; b++)
        if (p->ref[b] < 0 || (p->ref[b] == 0) != (mark[b] == 1))
            ok = false;
    /* Hash table: each hashed block exactly once, in its own bucket, no duplicates. */
    memset(mark, 0, (size_t)n + 1);
    for (int k = 0; k < p->n_buckets && ok; k++)
        for (int b = p->bucket[k]; b >= 0 && ok; b = p->chain[b]) {
            if (b >= n || mark[b] || !p->hashed[b] || bucket_of(p, p->hash[b]) != k)
                ok = false;
            else {
                mark[b] = 1;
                hashed++;
                for (int c = p->chain[b]; c >= 0 && c < n && ok; c = p->chain[c])
                    if (same_block(p, c, p->hash[b], p->parent[b],
                                   p->tokens + (size_t)b * p->block_size))
                        ok = false;
            }
        }
    for (int b = 0; b < n && ok; b++)
        if (p->hashed[b] != mark[b])
            ok = false;
    if (hashed != p->n_hashed)
        ok = false;
    free(mark);
    return ok;
}
