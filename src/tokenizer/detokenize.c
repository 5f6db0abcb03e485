/*
 * detokenize.c: ids → text, whole (tokenizer_decode) or one id at a time (tokenizer_stream_*).
 *
 * Each id stands for a fixed byte string (precomputed at load by the byte-level decoder); the
 * text is their concatenation with invalid UTF-8 replaced by U+FFFD per maximal subpart, as
 * Hugging Face's decode does. The stream keeps the at most 3 bytes of an unfinished character
 * and re-reads them with the next id's bytes; since the replacement rule looks only forward,
 * the stream's pieces add up to exactly the whole decode.
 *
 * tokenizer_decode: any thread. A stream: one thread at a time; it allocates only in init.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

static const char replacement[] = "\xEF\xBF\xBD";

enum ll_status tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids,
                                bool skip_special, char **text, size_t *len, struct ll_err *err)
{
    *text = NULL;
    if (len)
        *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t n;
        if (tokenizer_id_bytes(tok, ids[i], &n) && !(skip_special && tokenizer_is_special(tok, ids[i])))
            total += n;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory decoding %zu ids", n_ids);
    size_t k = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t n;
        const char *b = tokenizer_id_bytes(tok, ids[i], &n);
        if (b && !(skip_special && tokenizer_is_special(tok, ids[i]))) {
            memcpy(buf + k, b, n);
            k += n;
        }
    }
    buf[k] = '\0';
    if (ll_utf8_valid_prefix(buf, k) != k) {
        char *fixed;
        size_t fixed_len;
        enum ll_status st = ll_utf8_repair(buf, k, &fixed, &fixed_len);
        free(buf);
        if (st != LL_OK)
            return ll_err_set(err, st, "tokenizer: out of memory decoding %zu ids", n_ids);
        buf = fixed;
        k = fixed_len;
    }
    *text = buf;
    if (len)
        *len = k;
    return LL_OK;
}

struct tokenizer_stream {
    const struct tokenizer *tok;
    bool skip_special;
    int32_t keep[TOKENIZER_STREAM_MAX_KEEP]; /* special ids written all the same */
    int n_keep;
    unsigned char held[4]; /* start of an unfinished character */
    size_t n_held;
    unsigned char *in; /* held bytes + one token's bytes */
    char *out;         /* 3 output bytes per input byte at worst, plus the NUL */
};

enum ll_status tokenizer_stream_init(struct tokenizer_stream **out, const struct tokenizer *tok,
                                     bool skip_special, struct ll_err *err)
{
    *out = NULL;
    struct tokenizer_stream *s = calloc(1, sizeof *s);
    size_t in_cap = tok->max_token_bytes + sizeof s->held;
    if (s) {
        s->in = malloc(in_cap);
        s->out = malloc(3 * in_cap + 1);
    }
    if (!s || !s->in || !s->out) {
        tokenizer_stream_free(s);
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory for a decode stream");
    }
    s->tok = tok;
    s->skip_special = skip_special;
    *out = s;
    return LL_OK;
}

bool tokenizer_stream_keep(struct tokenizer_stream *s, int32_t id)
{
    if (s->n_keep == TOKENIZER_STREAM_MAX_KEEP)
        return false;
    s->keep[s->n_keep++] = id;
    return true;
}

static bool kept(const struct tokenizer_stream *s, int32_t id)
{
    for (int i = 0; i < s->n_keep; i++)
        if (s->keep[i] == id)
            return true;
    return false;
}

const char *tokenizer_stream_feed(struct tokenizer_stream *s, int32_t id, size_t *len)
{
    size_t n_bytes = 0;
    const char *bytes = tokenizer_id_bytes(s->tok, id, &n_bytes);
    if (!bytes || (s->skip_special && tokenizer_is_special(s->tok, id) && !kept(s, id)))
        n_bytes = 0;
    memcpy(s->in, s->held, s->n_held);
    if (n_bytes)
        memcpy(s->in + s->n_held, bytes, n_bytes);
    size_t n = s->n_held + n_bytes, i = 0, k = 0;
    s->n_held = 0;
    while (i < n) {
        if (s->in[i] < 0x80) {
            s->out[k++] = (char)s->in[i++];
            continue;
        }
        enum ll_utf8_status st;
        uint32_t cp;
        size_t step = ll_utf8_scan(s->in + i, n - i, &st, &cp);
        if (st == LL_UTF8_SHORT) { /* wait for the rest of the character */
            memcpy(s->held, s->in + i, step);
            s->n_held = step;
            break;
        }
        if (st == LL_UTF8_OK) {
            memcpy(s->out + k, s->in + i, step);
            k += step;
        } else {
            memcpy(s->out + k, replacement, 3);
            k += 3;
        }
        i += step;
    }
    s->out[k] = '\0';
    *len = k;
    return s->out;
}

const char *tokenizer_stream_flush(struct tokenizer_stream *s, size_t *len)
{
    size_t k = 0;
    if (s->n_held) { /* an unfinished character at the end is one maximal invalid subpart */
        memcpy(s->out, replacement, 3);
        k = 3;
    }
    s->n_held = 0;
    s->out[k] = '\0';
    *len = k;
    return s->out;
}

void tokenizer_stream_reset(struct tokenizer_stream *s)
{
    s->n_held = 0;
}

void tokenizer_stream_free(struct tokenizer_stream *s)
{
    if (!s)
        return;
    free(s->in);
    free(s->out);
    free(s);
}
