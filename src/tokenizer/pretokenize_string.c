/*
 * pretokenize_string.c: the pre-tokenizers of SentencePiece-style tokenizers, which cut at a
 * literal string rather than by a regex:
 *
 *   Split with a String pattern and behavior MergedWithPrevious (Gemma): each occurrence of
 *     the pattern (leftmost, without overlaps) ends a piece, so it joins the text before it; an
 *     occurrence right after another (or at the start) is a piece of its own.
 *   Metaspace (Llama-style conversions): every space becomes the replacement (U+2581 "▁"),
 *     which is put in front when prepend_scheme says so (always, or first: only for the text at
 *     the very start of the input, not for text after an added token) and the text does not
 *     already start with it; with split, each replacement then starts a piece (MergedWithNext),
 *     so "▁Hey▁▁friend" is "▁Hey", "▁", "▁friend".
 *
 * Both are Hugging Face `tokenizers`' SplitDelimiterBehavior semantics. Any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* Next occurrence of pat (np > 0) in s[from, n), or n. */
static size_t find_at(const char *s, size_t n, size_t from, const char *pat, size_t np)
{
    for (size_t i = from; i + np <= n; i++) {
        const char *p = memchr(s + i, pat[0], n - i);
        if (!p || (size_t)(p - s) + np > n)
            return n;
        i = (size_t)(p - s);
        if (!memcmp(p, pat, np))
            return i;
    }
    return n;
}

/* Pieces that each end right after an occurrence (MergedWithPrevious), or that each start at
 * one (MergedWithNext); empty pieces are skipped. */
static enum ll_status cut(const char *s, size_t n, const char *pat, size_t np, bool with_next,
                          tok_part_fn fn, void *ctx)
{
    size_t start = 0;
    enum ll_status st;
    for (size_t at = find_at(s, n, 0, pat, np); at < n; at = find_at(s, n, at + np, pat, np)) {
        size_t end = with_next ? at : at + np;
        if (end > start && (st = fn(ctx, s + start, end - start, -1)) != LL_OK)
            return st;
        start = end > start ? end : start;
    }
    if (start < n)
        return fn(ctx, s + start, n - start, -1);
    return LL_OK;
}

static enum ll_status metaspace(const struct tokenizer *tok, const char *s, size_t n,
                                bool at_start, tok_part_fn fn, void *ctx)
{
    const char *rep = tok->arena.data + tok->pre_off;
    size_t nr = tok->pre_len;
    if (n == 0) /* empty parts never reach a pre-tokenizer (nothing to prepend to) */
        return LL_OK;
    if (n > (SIZE_MAX - 1) / (nr + 1) - 1)
        return LL_ENOMEM;
    char *d = malloc((n + 1) * (nr + 1)); /* each byte, and the prefix, at most nr bytes */
    if (!d)
        return LL_ENOMEM;
    size_t k = 0;
    bool starts = s[0] == ' ' || (n >= nr && !memcmp(s, rep, nr));
    if (!starts && (tok->pre_prepend == TOK_PREPEND_ALWAYS ||
                    (tok->pre_prepend == TOK_PREPEND_FIRST && at_start))) {
        memcpy(d, rep, nr);
        k = nr;
    }
    k += tok_replace(s, n, " ", 1, rep, nr, d + k);
    enum ll_status st = tok->pre_split ? cut(d, k, rep, nr, true, fn, ctx)
                                       : (k ? fn(ctx, d, k, -1) : LL_OK);
    free(d);
    return st;
}

enum ll_status tok_pretokenize_string(const struct tokenizer *tok, const char *s, size_t n,
                                      bool at_start, tok_part_fn fn, void *ctx)
{
    if (tok->pre == TOK_PRE_METASPACE)
        return metaspace(tok, s, n, at_start, fn, ctx);
    return cut(s, n, tok->arena.data + tok->pre_off, tok->pre_len, false, fn, ctx);
}
