/*
 * encode.c: text → ids, the pipeline of tokenizer_encode (see tokenizer.h):
 *
 *   repair invalid UTF-8 → split out added tokens with normalized=false (raw text)
 *   → normalize each remaining part (NFC, Prepend, Replace) → split out added tokens with
 *   normalized=true → pre-tokenizer (a split regex, a literal-string Split, Metaspace, or none)
 *   → BPE per pre-token → post-processor's special tokens.
 *
 * Any thread, concurrently on one tokenizer: all state is on the stack or in the caller's
 * output, except the BPE cache, which locks itself.
 */
#include <stdlib.h>

#include "tokenizer_impl.h"

struct encode_ctx {
    const struct tokenizer *tok;
    struct tok_ids *out;
    const char *text;      /* the raw text, whose start is "the start" for Metaspace */
    const char *norm;      /* the normalized part being split */
    bool norm_at_start;    /* that part came from the start of the raw text */
};

static enum ll_status on_piece(void *p, const char *s, size_t n, int32_t id)
{
    (void)id;
    struct encode_ctx *c = p;
    return tok_bpe_encode(c->tok, s, n, c->out);
}

/* A part of normalised text: an added token with normalized=true, or text to pre-tokenize. */
static enum ll_status on_normalized_part(void *p, const char *s, size_t n, int32_t id)
{
    struct encode_ctx *c = p;
    if (id >= 0)
        return tok_ids_push(c->out, id);
    switch (c->tok->pre) {
    case TOK_PRE_REGEX:
        return tok_pretokenize(c->tok, s, n, on_piece, c);
    case TOK_PRE_NONE:
        return tok_bpe_encode(c->tok, s, n, c->out);
    default:
        return tok_pretokenize_string(c->tok, s, n, c->norm_at_start && s == c->norm, on_piece,
                                      c);
    }
}

/* A part of the raw text: an added token with normalized=false, or text to normalise. */
static enum ll_status on_raw_part(void *p, const char *s, size_t n, int32_t id)
{
    struct encode_ctx *c = p;
    if (id >= 0)
        return tok_ids_push(c->out, id);
    const char *norm = s;
    size_t norm_len = n;
    bool owned = false;
    enum ll_status st = LL_OK;
    if ((st = tok_normalize(c->tok, s, n, &norm, &norm_len, &owned)) != LL_OK)
        return st;
    c->norm = norm;
    c->norm_at_start = s == c->text;
    st = tok_added_split(c->tok, &c->tok->trie_norm, norm, norm_len, on_normalized_part, c);
    if (owned)
        free((char *)norm);
    return st;
}

enum ll_status tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                                bool add_special, int32_t **ids, size_t *n_ids,
                                struct ll_err *err)
{
    *ids = NULL;
    *n_ids = 0;
    struct tok_ids out = {0};
    char *fixed = NULL;
    enum ll_status st = LL_OK;

    if (ll_utf8_valid_prefix(text, len) != len) {
        size_t fixed_len;
        if ((st = ll_utf8_repair(text, len, &fixed, &fixed_len)) != LL_OK)
            goto fail;
        text = fixed;
        len = fixed_len;
    }
    /* typical text gives under one id per 3 bytes; beyond 1 MiB the vector grows as needed */
    size_t guess = len / 3 < (1u << 18) ? len / 3 : (1u << 18);
    if ((st = tok_ids_reserve(&out, guess + 2 * TOK_MAX_SPECIAL + 16)) != LL_OK)
        goto fail;
    if (add_special)
        for (int i = 0; i < tok->n_prefix; i++)
            tok_ids_push(&out, tok->prefix[i]); /* room reserved above */

    struct encode_ctx c = {tok, &out, text, NULL, false};
    if ((st = tok_added_split(tok, &tok->trie_raw, text, len, on_raw_part, &c)) != LL_OK)
        goto fail;

    if (add_special)
        for (int i = 0; i < tok->n_suffix; i++)
            if ((st = tok_ids_push(&out, tok->suffix[i])) != LL_OK)
                goto fail;
    free(fixed);
    *ids = out.v;
    *n_ids = out.n;
    return LL_OK;

fail:
    free(fixed);
    free(out.v);
    return ll_err_set(err, st, "tokenizer: out of memory encoding %zu bytes", len);
}
