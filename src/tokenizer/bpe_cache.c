/*
 * bpe_cache.c: the BPE results of recent pre-tokens, shared by every thread that encodes with
 * one tokenizer.
 *
 * 16 shards, picked by the key's hash, each with its own mutex, a fixed open-addressed table
 * and a fixed byte arena for the keys and ids. A full shard is simply emptied and refilled, so
 * memory stays fixed (about 3 MiB) and the cache adapts to what is being encoded now.
 * A lock is held only to look up and copy ids or to insert; BPE itself runs unlocked, so two
 * threads may compute the same entry, and the second insert is dropped.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

#define SHARDS 16
#define SLOTS 4096          /* per shard; power of two */
#define MAX_ENTRIES 2048    /* per shard: load factor at most 1/2 */
#define ARENA_BYTES (1 << 17)

struct slot {
    uint64_t hash;
    uint32_t off; /* into the arena: ids, then the key; UINT32_MAX = empty */
    uint16_t key_len, n_ids;
};

struct shard {
    pthread_mutex_t lock;
    size_t used, count;
    struct slot slots[SLOTS];
    unsigned char arena[ARENA_BYTES];
};

struct tok_cache {
    struct shard shards[SHARDS];
};

static void shard_clear(struct shard *sh)
{
    for (size_t i = 0; i < SLOTS; i++)
        sh->slots[i].off = UINT32_MAX;
    sh->used = sh->count = 0;
}

enum ll_status tok_cache_init(struct tok_cache **out)
{
    struct tok_cache *c = malloc(sizeof *c);
    if (!c)
        return LL_ENOMEM;
    for (int i = 0; i < SHARDS; i++) {
        if (pthread_mutex_init(&c->shards[i].lock, NULL) != 0) {
            while (i--)
                pthread_mutex_destroy(&c->shards[i].lock);
            free(c);
            return LL_ENOMEM;
        }
        shard_clear(&c->shards[i]);
    }
    *out = c;
    return LL_OK;
}

void tok_cache_free(struct tok_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < SHARDS; i++)
        pthread_mutex_destroy(&c->shards[i].lock);
    free(c);
}

/* Slot holding key, or the empty slot where it would go. */
static struct slot *find(struct shard *sh, uint64_t h, const char *key, size_t n)
{
    for (size_t i = h & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        struct slot *s = &sh->slots[i];
        if (s->off == UINT32_MAX)
            return s;
        if (s->hash == h && s->key_len == n &&
            !memcmp(sh->arena + s->off + s->n_ids * sizeof(int32_t), key, n))
            return s;
    }
}

bool tok_cache_get(struct tok_cache *c, const char *key, size_t n, struct tok_ids *out)
{
    /* a pre-token of n bytes has at most n ids: make room before taking the lock */
    if (n > TOK_CACHE_MAX_KEY || tok_ids_reserve(out, n) != LL_OK)
        return false;
    uint64_t h = ll_hash_bytes(key, n);
    struct shard *sh = &c->shards[h >> 60];
    bool hit = false;
    pthread_mutex_lock(&sh->lock);
    struct slot *s = find(sh, h, key, n);
    if (s->off != UINT32_MAX) {
        memcpy(out->v + out->n, sh->arena + s->off, s->n_ids * sizeof(int32_t));
        out->n += s->n_ids;
        hit = true;
    }
    pthread_mutex_unlock(&sh->lock);
    return hit;
}

void tok_cache_put(struct tok_cache *c, const char *key, size_t n, const int32_t *ids,
                   size_t n_ids)
{
    if (n > TOK_CACHE_MAX_KEY || n_ids > n)
        return;
    size_t need = (n_ids * sizeof(int32_t) + n + 3) & ~(size_t)3; /* keep ids 4-aligned */
    uint64_t h = ll_hash_bytes(key, n);
    struct shard *sh = &c->shards[h >> 60];
    pthread_mutex_lock(&sh->lock);
    if (sh->count >= MAX_ENTRIES || sh->used + need > ARENA_BYTES)
        shard_clear(sh);
    struct slot *s = find(sh, h, key, n);
    if (s->off == UINT32_MAX) {
        unsigned char *p = sh->arena + sh->used;
        memcpy(p, ids, n_ids * sizeof(int32_t));
        memcpy(p + n_ids * sizeof(int32_t), key, n);
        *s = (struct slot){h, (uint32_t)sh->used, (uint16_t)n, (uint16_t)n_ids};
        sh->used += need;
        sh->count++;
    }
    pthread_mutex_unlock(&sh->lock);
}
