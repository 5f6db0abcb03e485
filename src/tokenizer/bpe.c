/*
 * bpe.c: byte-pair encoding of one pre-token.
 *
 * The pre-token starts as one symbol per byte (the byte's token in the byte-level alphabet),
 * or, for the SentencePiece-style scheme, one per UTF-8 character: the character's token, else
 * (byte_fallback) the tokens "<0xNN>" of its bytes, else unk_token (consecutive unknown
 * characters as one with fuse_unk), as Hugging Face's BPE model builds its word. Repeatedly the adjacent pair with the lowest merge rank is merged, the leftmost first among
 * equal pairs, until no adjacent pair has a merge: the order Hugging Face's BPE model uses.
 * Symbols form a doubly linked list over an array and candidate pairs sit in a binary min-heap
 * keyed (rank, position); a popped candidate whose pair has changed since it was pushed is
 * skipped. Each merge pushes at most two candidates, so a pre-token of n bytes costs
 * O(n log n) time and O(n) memory whatever its content (a 1 MB run of one letter included).
 *
 * Results of short pre-tokens are remembered in the shared cache (bpe_cache.c).
 * Any thread; all working memory is local to the call.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

struct sym {
    int32_t id;         /* -1 once merged into its left neighbour */
    int32_t prev, next; /* indices, -1 at the ends */
};

struct cand {
    uint32_t rank, pos;   /* pos: index of the pair's left symbol */
    int32_t left, right;  /* the pair's ids when pushed: it is stale once they differ */
};

static inline bool cand_less(struct cand a, struct cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(c, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
    struct cand top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && cand_less(h[c + 1], h[c]))
            c++;
        if (!cand_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

static void push_pair(const struct tokenizer *tok, const struct sym *syms, int32_t left,
                      struct cand *heap, size_t *n_heap)
{
    int32_t right = syms[left].next;
    if (right < 0)
        return;
    int32_t a = syms[left].id, b = syms[right].id;
    uint32_t rank = tok_pairmap_rank(&tok->merges, a, b);
    if (rank != UINT32_MAX)
        heap_push(heap, n_heap, (struct cand){rank, (uint32_t)left, a, b});
}

/* Append one symbol. */
static inline void add_sym(struct sym *syms, int32_t *m, int32_t id)
{
    syms[*m] = (struct sym){id, *m - 1, *m + 1};
    (*m)++;
}

/* The byte-level start: one symbol per byte; a byte without a token is dropped (there is no
 * unknown token). Returns the count. */
static int32_t byte_symbols(const struct tokenizer *tok, const unsigned char *s, size_t n,
                            struct sym *syms)
{
    int32_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (tok->byte_id[s[i]] >= 0)
            add_sym(syms, &m, tok->byte_id[s[i]]);
    return m;
}

/* The character start (at most one symbol per byte). A pending unknown is written when a known
 * character or the end comes, not before byte-fallback tokens: Hugging Face's order. Without an
 * unk_token an unknown character is dropped. */
static int32_t char_symbols(const struct tokenizer *tok, const unsigned char *s, size_t n,
                            struct sym *syms)
{
    int32_t m = 0;
    bool unk_pending = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, n - i, &cp);
        int32_t id = tok_strmap_get(&tok->vocab, tok->arena.data, (const char *)s + i, k);
        if (id >= 0) {
            if (unk_pending)
                add_sym(syms, &m, tok->unk_id);
            unk_pending = false;
            add_sym(syms, &m, id);
            i += k;
            continue;
        }
        bool bytes = tok->byte_fallback;
        for (size_t j = 0; bytes && j < k; j++)
            bytes = tok->byte_id[s[i + j]] >= 0;
        if (bytes) {
            for (size_t j = 0; j < k; j++)
                add_sym(syms, &m, tok->byte_id[s[i + j]]);
        } else if (tok->unk_id >= 0) {
            if (unk_pending && !tok->fuse_unk)
                add_sym(syms, &m, tok->unk_id);
            unk_pending = true;
        }
        i += k;
    }
    if (unk_pending)
        add_sym(syms, &m, tok->unk_id);
    return m;
}

/* BPE of n bytes into out (no cache). */
static enum ll_status bpe_merge(const struct tokenizer *tok, const unsigned char *s, size_t n,
                                struct tok_ids *out)
{
    enum { SMALL = 64 };
    struct sym small_syms[SMALL];
    struct cand small_heap[3 * SMALL];
    struct sym *syms = small_syms;
    struct cand *heap = small_heap;
    if (n > SMALL) {
        if (n > INT32_MAX / 4)
            return LL_ENOMEM;
        syms = malloc(n * sizeof *syms);
        heap = malloc(3 * n * sizeof *heap);
        if (!syms || !heap) {
            free(syms);
            free(heap);
            return LL_ENOMEM;
        }
    }

    int32_t m = tok->byte_level ? byte_symbols(tok, s, n, syms) : char_symbols(tok, s, n, syms);
    if (m)
        syms[m - 1].next = -1;

    size_t n_heap = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(tok, syms, i, heap, &n_heap);

    while (n_heap) {
        struct cand c = heap_pop(heap, &n_heap);
        struct sym *l = &syms[c.pos];
        /* stale when the left symbol was merged away or changed, or its right neighbour did */
        if (l->id != c.left || l->next < 0 || syms[l->next].id != c.right)
            continue;
        int32_t r = l->next;
        l->id = tok->merges.merged[c.rank];
        l->next = syms[r].next;
        if (l->next >= 0)
            syms[l->next].prev = (int32_t)c.pos;
        syms[r].id = -1;
        if (l->prev >= 0)
            push_pair(tok, syms, l->prev, heap, &n_heap);
        push_pair(tok, syms, (int32_t)c.pos, heap, &n_heap);
    }

    enum ll_status st = LL_OK;
    for (int32_t i = m ? 0 : -1; i >= 0; i = syms[i].next)
        if ((st = tok_ids_push(out, syms[i].id)) != LL_OK)
            break;
    if (syms != small_syms) {
        free(syms);
        free(heap);
    }
    return st;
}

/* ignore_merges: a pre-token that is itself a vocabulary token is taken whole. */
static int32_t whole_token(const struct tokenizer *tok, const unsigned char *s, size_t n)
{
    if (!tok->byte_level)
        return tok_strmap_get(&tok->vocab, tok->arena.data, (const char *)s, n);
    enum { LONGEST = 256 }; /* longer than any real token */
    char buf[2 * LONGEST];
    if (n > LONGEST)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = tok->byte_to_cp[s[i]]; /* < 0x200: one or two bytes of UTF-8 */
        if (cp < 0x80) {
            buf[k++] = (char)cp;
        } else {
            buf[k++] = (char)(0xC0 | cp >> 6);
            buf[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return tok_strmap_get(&tok->vocab, tok->arena.data, buf, k);
}

enum ll_status tok_bpe_encode(const struct tokenizer *tok, const char *s, size_t n,
                              struct tok_ids *out)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0)
        return LL_OK;
    if (tok->byte_level && n == 1 && tok->byte_id[u[0]] >= 0)
        return tok_ids_push(out, tok->byte_id[u[0]]);
    if (tok->ignore_merges) {
        int32_t id = whole_token(tok, u, n);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    bool cacheable = n <= TOK_CACHE_MAX_KEY;
    if (cacheable && tok_cache_get(tok->cache, s, n, out))
        return LL_OK;
    size_t first = out->n;
    enum ll_status st = bpe_merge(tok, u, n, out);
    if (st == LL_OK && cacheable)
        tok_cache_put(tok->cache, s, n, out->v + first, out->n - first);
    return st;
}
