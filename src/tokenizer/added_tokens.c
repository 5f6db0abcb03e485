/*
 * added_tokens.c: finding added tokens ("<think>", "<｜User｜>", ...) in text before BPE.
 *
 * Matching follows Hugging Face: a byte trie finds, scanning left to right, the leftmost
 * match and the longest token there; the scan resumes after it (also when the match is then
 * discarded). A single_word token is discarded when a word character (\w) touches either end;
 * lstrip widens the match over the white space before it (not into an earlier match), rstrip
 * over the white space after it. The text between matches is handed on as text.
 *
 * Tries are built at load and read-only afterwards; splitting runs on any thread.
 */
#include <stdlib.h>

#include "tokenizer_impl.h"

static enum ll_status trie_node(struct tok_trie *t, uint8_t byte, uint32_t *out)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct tok_trie_node *nodes = realloc(t->nodes, cap * sizeof *nodes);
        if (!nodes)
            return LL_ENOMEM;
        t->nodes = nodes;
        t->cap = cap;
    }
    t->nodes[t->n] = (struct tok_trie_node){0, 0, -1, byte};
    *out = (uint32_t)t->n++;
    return LL_OK;
}

static uint32_t trie_child(const struct tok_trie *t, uint32_t node, uint8_t byte)
{
    for (uint32_t c = t->nodes[node].child; c; c = t->nodes[c].sibling)
        if (t->nodes[c].byte == byte)
            return c;
    return 0;
}

enum ll_status tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t added)
{
    uint32_t node = 0;
    if (t->n == 0 && trie_node(t, 0, &node) != LL_OK) /* the root */
        return LL_ENOMEM;
    if (n == 0)
        return LL_OK; /* an empty token never matches */
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        uint32_t c = trie_child(t, node, b);
        if (!c) {
            if (trie_node(t, b, &c) != LL_OK)
                return LL_ENOMEM;
            t->nodes[c].sibling = t->nodes[node].child;
            t->nodes[node].child = c;
        }
        node = c;
    }
    t->nodes[node].added = added;
    t->first_byte[(uint8_t)s[0]] = true;
    return LL_OK;
}

void tok_trie_free(struct tok_trie *t)
{
    free(t->nodes);
    t->nodes = NULL;
    t->n = t->cap = 0;
}

/* Start of the character that ends at `end` (> 0) in valid UTF-8. */
static size_t char_before(const unsigned char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80 && end - i < 4)
        i--;
    return i;
}

static uint16_t class_at(const struct tokenizer *tok, const unsigned char *s, size_t n, size_t i,
                        size_t *len)
{
    uint32_t cp;
    *len = tok_utf8_decode(s + i, n - i, &cp);
    return tok_cp_class(tok, cp);
}

enum ll_status tok_added_split(const struct tokenizer *tok, const struct tok_trie *trie,
                               const char *s, size_t n, tok_part_fn fn, void *ctx)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t done = 0; /* everything before this has been handed on */
    size_t i = 0;
    enum ll_status st;
    if (trie->n > 1) {
        while (i < n) {
            if (!trie->first_byte[u[i]]) {
                i++;
                continue;
            }
            /* longest token starting at i */
            uint32_t node = 0;
            int32_t best = -1;
            size_t best_len = 0;
            for (size_t j = i; j < n; j++) {
                node = trie_child(trie, node, u[j]);
                if (!node)
                    break;
                if (trie->nodes[node].added >= 0) {
                    best = trie->nodes[node].added;
                    best_len = j + 1 - i;
                }
            }
            if (best < 0) {
                i++;
                continue;
            }
            size_t start = i, stop = i + best_len, len;
            i = stop;
            const struct tok_added *a = &tok->added[best];
            if (a->single_word) {
                bool word_before =
                    start > 0 && (class_at(tok, u, n, char_before(u, start), &len) & TOK_CP_WORD);
                bool word_after = stop < n && (class_at(tok, u, n, stop, &len) & TOK_CP_WORD);
                if (word_before || word_after)
                    continue;
            }
            if (a->lstrip) {
                while (start > done) {
                    size_t p = char_before(u, start);
                    if (!(class_at(tok, u, n, p, &len) & TOK_CP_WS))
                        break;
                    start = p;
                }
            }
            if (a->rstrip) {
                while (stop < n && (class_at(tok, u, n, stop, &len) & TOK_CP_WS))
                    stop += len;
            }
            if (start < done) { /* an rstrip ran into this match: keep the parts disjoint */
                if (stop <= done)
                    continue;
                start = done;
            }
            if (done < start && (st = fn(ctx, s + done, start - done, -1)) != LL_OK)
                return st;
            if ((st = fn(ctx, s + start, stop - start, a->id)) != LL_OK)
                return st;
            done = stop;
        }
    }
    if (done < n && (st = fn(ctx, s + done, n - done, -1)) != LL_OK)
        return st;
    return LL_OK;
}
