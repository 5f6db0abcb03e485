/*
 * vocab.c: the tokenizer's lookup structures (string arena, token string → id map, merge pair
 * → rank map, id vectors) and the read-only queries of tokenizer.h about ids and tokens.
 *
 * The maps are open-addressed with linear probing, sized once by the loader to a load factor of
 * at most 0.6 (the maps of Qwen2's 151k tokens and merges take 4 MiB and 2 MiB: load time is
 * mostly cache misses in them), and never resized. Built by tokenizer_load() on one thread; read-only afterwards.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "util.h"

enum ll_status tok_arena_add(struct tok_arena *a, const void *s, size_t n, uint32_t *off)
{
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 1 << 16;
        while (cap < a->len + n + 1)
            cap *= 2;
        if (cap > UINT32_MAX)
            return LL_ENOMEM;
        char *d = realloc(a->data, cap);
        if (!d)
            return LL_ENOMEM;
        a->data = d;
        a->cap = cap;
    }
    *off = (uint32_t)a->len;
    if (n)
        memcpy(a->data + a->len, s, n);
    a->data[a->len + n] = '\0';
    a->len += n + 1;
    return LL_OK;
}

enum ll_status tok_ids_reserve(struct tok_ids *ids, size_t extra)
{
    if (ids->n + extra <= ids->cap)
        return LL_OK;
    size_t cap = ids->cap ? ids->cap : 64;
    while (cap < ids->n + extra) {
        if (cap > SIZE_MAX / 2 / sizeof(int32_t))
            return LL_ENOMEM;
        cap *= 2;
    }
    int32_t *v = realloc(ids->v, cap * sizeof(int32_t));
    if (!v)
        return LL_ENOMEM;
    ids->v = v;
    ids->cap = cap;
    return LL_OK;
}

/* Slots for `expected` keys at a load factor of at most 0.6 (short probe runs, small table). */
static size_t table_size(size_t expected)
{
    size_t n = 64;
    while (n * 3 < expected * 5 + 3)
        n *= 2;
    return n;
}

enum ll_status tok_strmap_init(struct tok_strmap *m, size_t expected)
{
    size_t n = table_size(expected);
    m->slots = malloc(n * sizeof *m->slots);
    if (!m->slots)
        return LL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        m->slots[i].len = UINT32_MAX;
    m->mask = n - 1;
    m->count = 0;
    return LL_OK;
}

void tok_strmap_free(struct tok_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

void tok_strmap_put(struct tok_strmap *m, const char *arena, uint32_t off, uint32_t len,
                    int32_t id)
{
    uint32_t h = (uint32_t)ll_hash_bytes(arena + off, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct tok_strmap_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX) {
            LL_ASSERT(m->count < m->mask); /* sized by the loader: never full */
            *s = (struct tok_strmap_slot){off, len, id, h};
            m->count++;
            return;
        }
        if (s->hash == h && s->len == len && !memcmp(arena + s->off, arena + off, len)) {
            s->id = id; /* a later definition wins, as in a hash map built in file order */
            return;
        }
    }
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *arena, const char *key,
                       size_t len)
{
    uint32_t h = (uint32_t)ll_hash_bytes(key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_strmap_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX)
            return -1;
        if (s->hash == h && s->len == len && !memcmp(arena + s->off, key, len))
            return s->id;
    }
}

enum ll_status tok_pairmap_init(struct tok_pairmap *m, size_t n_merges)
{
    size_t n = table_size(n_merges);
    m->slots = malloc(n * sizeof *m->slots);
    m->merged = malloc((n_merges + 1) * sizeof *m->merged);
    if (!m->slots || !m->merged) {
        tok_pairmap_free(m);
        return LL_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        m->slots[i] = UINT64_MAX;
    m->mask = n - 1;
    m->count = 0;
    m->n_ranks = 0;
    return LL_OK;
}

void tok_pairmap_free(struct tok_pairmap *m)
{
    free(m->slots);
    free(m->merged);
    m->slots = NULL;
    m->merged = NULL;
}

void tok_pairmap_put(struct tok_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                     int32_t merged)
{
    LL_ASSERT(rank == m->n_ranks && rank <= TOK_MAX_RANK && left >= 0 && right >= 0 &&
              left < TOK_MAX_ID && right < TOK_MAX_ID);
    uint64_t key = tok_pair_key(left, right);
    m->merged[m->n_ranks++] = merged;
    for (size_t i = tok_pair_slot(m, key);; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (s == UINT64_MAX) {
            LL_ASSERT(m->count < m->mask); /* sized by the loader: never full */
            m->count++;
        } else if (s >> TOK_PAIR_RANK_BITS != key) {
            continue;
        } else {
            m->merged[s & TOK_MAX_RANK] = -1; /* the earlier rank of this pair is gone */
        }
        m->slots[i] = key << TOK_PAIR_RANK_BITS | rank;
        return;
    }
}

/* ---- queries of tokenizer.h ---- */

int32_t tokenizer_vocab_size(const struct tokenizer *tok)
{
    return tok->n_ids;
}

static const struct tok_entry *entry(const struct tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_ids || !(tok->ids[id].flags & TOK_ID_PRESENT))
        return NULL;
    return &tok->ids[id];
}

const char *tokenizer_id_to_token(const struct tokenizer *tok, int32_t id)
{
    const struct tok_entry *e = entry(tok, id);
    return e ? tok->arena.data + e->str_off : NULL;
}

int32_t tokenizer_token_to_id(const struct tokenizer *tok, const char *token)
{
    return tok_strmap_get(&tok->vocab, tok->arena.data, token, strlen(token));
}

const char *tokenizer_id_bytes(const struct tokenizer *tok, int32_t id, size_t *len)
{
    const struct tok_entry *e = entry(tok, id);
    *len = e ? e->bytes_len : 0;
    return e ? tok->arena.data + e->bytes_off : NULL;
}

bool tokenizer_is_special(const struct tokenizer *tok, int32_t id)
{
    const struct tok_entry *e = entry(tok, id);
    return e && (e->flags & TOK_ID_SPECIAL);
}

int32_t tokenizer_bos_id(const struct tokenizer *tok)
{
    return tok->bos_id;
}

int32_t tokenizer_eos_id(const struct tokenizer *tok)
{
    return tok->eos_id;
}

const char *tokenizer_bos_token(const struct tokenizer *tok)
{
    return tok->bos_token;
}

const char *tokenizer_eos_token(const struct tokenizer *tok)
{
    return tok->eos_token;
}
