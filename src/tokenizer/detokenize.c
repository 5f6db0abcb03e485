/*
 * detokenize.c: ids → text, whole (tokenizer_decode) or one id at a time (tokenizer_stream_*).
 *
 * Each id stands for a fixed byte string, precomputed at load by the decoder's per-token steps
 * (ByteLevel's table, or Replace / Metaspace's replacement → space). Two schemes:
 *
 *   byte-level: the text is the concatenation with invalid UTF-8 replaced by U+FFFD per maximal
 *   subpart, as Hugging Face's decode does. The stream keeps the at most 3 bytes of an
 *   unfinished character and re-reads them with the next id's bytes; since the replacement
 *   rule looks only forward, the stream's pieces add up to exactly the whole decode.
 *
 *   SentencePiece-style: every token's text is valid UTF-8 (checked at load) except the
 *   byte-fallback tokens "<0xNN>" (TOK_ID_BYTE). As Hugging Face's ByteFallback decoder does, a
 *   run of consecutive byte tokens becomes its bytes when they are valid UTF-8 as a whole, and
 *   one U+FFFD per byte when they are not, so a run's text is known only when the run ends: the
 *   stream holds the run (its buffer grows with it) and writes it with the next other token or
 *   at flush. Then the sequence-level steps: Metaspace's decoder drops every replacement of the
 *   first token (instead of making it a space) unless its prepend_scheme is "never"; Strip
 *   removes up to strip_start of its character at the start of the whole text and up to
 *   strip_stop at the end (the stream holds such characters at the end until something else
 *   follows). The first token is the first one written: ids without text and skipped special
 *   tokens do not count, as Hugging Face drops them before its decoder.
 *
 * tokenizer_decode: any thread. A stream: one thread at a time; it allocates in init, and later
 * only to hold a run of byte-fallback tokens longer than any before.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

static const char replacement[] = "\xEF\xBF\xBD";

/* The text of a run of byte-fallback tokens, written to out (room for 3 * n; out may be run
 * itself): the bytes when valid UTF-8, else one U+FFFD per byte. Returns the count. */
static size_t byte_run_text(const unsigned char *run, size_t n, char *out)
{
    if (ll_utf8_valid_prefix((const char *)run, n) == n) {
        memmove(out, run, n);
        return n;
    }
    for (size_t i = 0; i < n; i++)
        memcpy(out + 3 * i, replacement, 3);
    return 3 * n;
}

/* The first token's text under Metaspace's decoder: the token string without its
 * replacements. out has room for the string. Returns the count. */
static size_t first_token_text(const struct tokenizer *tok, int32_t id, char *out)
{
    return tok_replace(tok->arena.data + tok->ids[id].str_off, tok->ids[id].str_len,
                       tok->arena.data + tok->dec_meta_off, tok->dec_meta_len, "", 0, out);
}

/* Whether id is written (it has text and is not a skipped special token). */
static bool written(const struct tokenizer *tok, int32_t id, bool skip_special)
{
    size_t n;
    return tokenizer_id_bytes(tok, id, &n) && !(skip_special && tokenizer_is_special(tok, id));
}

/* SentencePiece-style whole decode into buf (room for 3 bytes per token byte). */
static size_t decode_pieces(const struct tokenizer *tok, const int32_t *ids, size_t n_ids,
                            bool skip_special, char *buf)
{
    size_t k = 0, run = 0; /* the open run of byte tokens is buf[k - run, k) */
    bool first = true;
    for (size_t i = 0; i < n_ids; i++) {
        if (!written(tok, ids[i], skip_special))
            continue;
        const struct tok_entry *e = &tok->ids[ids[i]];
        const char *b = tok->arena.data + e->bytes_off;
        if (e->flags & TOK_ID_BYTE) {
            buf[k++] = b[0];
            run++;
            first = false;
            continue;
        }
        if (run) { /* in place: the run is read only to check it */
            k -= run;
            k += byte_run_text((unsigned char *)buf + k, run, buf + k);
            run = 0;
        }
        if (first && tok->dec_first_drop) {
            k += first_token_text(tok, ids[i], buf + k);
        } else {
            memcpy(buf + k, b, e->bytes_len);
            k += e->bytes_len;
        }
        first = false;
    }
    if (run) {
        k -= run;
        k += byte_run_text((unsigned char *)buf + k, run, buf + k);
    }
    /* Strip, over the whole text */
    const char *c = tok->arena.data + tok->strip_off;
    size_t nc = tok->strip_len, lead = 0;
    for (int j = 0; j < tok->strip_start && lead + nc <= k && !memcmp(buf + lead, c, nc); j++)
        lead += nc;
    size_t end = k;
    for (int j = 0; j < tok->strip_stop && end >= lead + nc && !memcmp(buf + end - nc, c, nc); j++)
        end -= nc;
    memmove(buf, buf + lead, end - lead);
    return end - lead;
}

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
    /* a run of byte tokens may triple (U+FFFD per byte); one byte each */
    char *buf = malloc((tok->byte_level ? total : 3 * total) + 1);
    if (!buf)
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory decoding %zu ids", n_ids);
    size_t k = 0;
    if (!tok->byte_level) {
        k = decode_pieces(tok, ids, n_ids, skip_special, buf);
    } else {
        for (size_t i = 0; i < n_ids; i++) {
            size_t n;
            const char *b = tokenizer_id_bytes(tok, ids[i], &n);
            if (b && !(skip_special && tokenizer_is_special(tok, ids[i]))) {
                memcpy(buf + k, b, n);
                k += n;
            }
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
    unsigned char held[4]; /* byte-level: start of an unfinished character */
    size_t n_held;
    unsigned char *in; /* held bytes + one token's bytes */
    char *out;         /* 3 output bytes per input byte at worst, plus the NUL */
    size_t out_cap;
    /* SentencePiece-style */
    unsigned char *run; /* the open run of byte-fallback tokens */
    size_t n_run, run_cap;
    bool started;       /* a token has been written since the start */
    bool text_seen;     /* a character other than Strip's has been written */
    int strip_left;     /* Strip's characters still to drop at the start */
    int trail;          /* Strip's characters held at the end */
};

enum ll_status tokenizer_stream_init(struct tokenizer_stream **out, const struct tokenizer *tok,
                                     bool skip_special, struct ll_err *err)
{
    *out = NULL;
    struct tokenizer_stream *s = calloc(1, sizeof *s);
    size_t in_cap = tok->max_token_bytes + sizeof s->held;
    if (s) {
        s->run_cap = 64;
        s->out_cap = 3 * (in_cap + s->run_cap) + (size_t)tok->strip_stop * tok->strip_len + 1;
        s->in = malloc(in_cap);
        s->out = malloc(s->out_cap);
        s->run = malloc(s->run_cap);
    }
    if (!s || !s->in || !s->out || !s->run) {
        tokenizer_stream_free(s);
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory for a decode stream");
    }
    s->tok = tok;
    s->skip_special = skip_special;
    s->strip_left = tok->strip_start;
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

/* Byte-level: the newly complete text of the held bytes and one token's. */
static const char *feed_bytes(struct tokenizer_stream *s, const char *bytes, size_t n_bytes,
                              size_t *len)
{
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

/* Strip over text just produced at s->out[from, k): drops the leading characters still due,
 * holds trailing ones (up to strip_stop), writes back held ones when other text follows.
 * Works in place (the result never outgrows what was held plus the input). Returns the new
 * end. */
static size_t strip_filter(struct tokenizer_stream *s, size_t from, size_t k)
{
    const struct tokenizer *tok = s->tok;
    const char *c = tok->arena.data + tok->strip_off;
    size_t nc = tok->strip_len;
    if (!nc)
        return k;
    /* the held characters go first in the output, so move the new text behind them */
    size_t held_bytes = (size_t)s->trail * nc;
    memmove(s->out + from + held_bytes, s->out + from, k - from);
    size_t i = from + held_bytes, end = k + held_bytes, w = from;
    int trail = s->trail;
    s->trail = 0;
    while (i < end) {
        if (i + nc <= end && !memcmp(s->out + i, c, nc)) {
            i += nc;
            if (!s->text_seen && s->strip_left > 0) {
                s->strip_left--;
            } else if (trail < tok->strip_stop) {
                trail++;
            } else if (tok->strip_stop > 0) { /* the oldest held one is certain now */
                memcpy(s->out + w, c, nc);
                w += nc;
            } else {
                memcpy(s->out + w, c, nc);
                w += nc;
                s->text_seen = true;
            }
            continue;
        }
        s->text_seen = true;
        for (; trail > 0; trail--) {
            memcpy(s->out + w, c, nc);
            w += nc;
        }
        uint32_t cp;
        size_t step = tok_utf8_decode((const unsigned char *)s->out + i, end - i, &cp);
        memmove(s->out + w, s->out + i, step);
        w += step;
        i += step;
    }
    s->trail = trail;
    return w;
}

/* Room in out for need bytes (the held run's text is the only thing that can outgrow it).
 * false when memory is short. */
static bool out_room(struct tokenizer_stream *s, size_t need)
{
    if (need <= s->out_cap)
        return true;
    char *o = realloc(s->out, need);
    if (!o)
        return false;
    s->out = o;
    s->out_cap = need;
    return true;
}

/* Write the open run of byte tokens at s->out + k; returns the new end. */
static size_t close_run(struct tokenizer_stream *s, size_t k)
{
    k += byte_run_text(s->run, s->n_run, s->out + k);
    s->n_run = 0;
    return k;
}

/* The fixed part of out: a token's text, Strip's held characters, the NUL. */
static size_t out_base(const struct tokenizer_stream *s)
{
    return s->tok->max_token_bytes + (size_t)s->tok->strip_stop * s->tok->strip_len + 1;
}

/* SentencePiece-style: one written token. */
static const char *feed_piece(struct tokenizer_stream *s, int32_t id, size_t *len)
{
    const struct tokenizer *tok = s->tok;
    const struct tok_entry *e = &tok->ids[id];
    size_t k = 0;
    if (e->flags & TOK_ID_BYTE) {
        s->started = true;
        if (s->n_run == s->run_cap) {
            size_t cap = 2 * s->run_cap;
            unsigned char *r = realloc(s->run, cap);
            if (r && out_room(s, 3 * cap + out_base(s))) {
                s->run = r;
                s->run_cap = cap;
            } else { /* out of memory: write the run so far on its own */
                if (r)
                    s->run = r;
                k = strip_filter(s, 0, close_run(s, 0));
            }
        }
        s->run[s->n_run++] = (unsigned char)tok->arena.data[e->bytes_off];
        s->out[k] = '\0';
        *len = k;
        return s->out;
    }
    if (s->n_run)
        k = close_run(s, 0);
    if (!s->started && tok->dec_first_drop) {
        k += first_token_text(tok, id, s->out + k);
    } else {
        memcpy(s->out + k, tok->arena.data + e->bytes_off, e->bytes_len);
        k += e->bytes_len;
    }
    s->started = true;
    k = strip_filter(s, 0, k);
    s->out[k] = '\0';
    *len = k;
    return s->out;
}

const char *tokenizer_stream_feed(struct tokenizer_stream *s, int32_t id, size_t *len)
{
    size_t n_bytes = 0;
    const char *bytes = tokenizer_id_bytes(s->tok, id, &n_bytes);
    bool skipped = s->skip_special && tokenizer_is_special(s->tok, id) && !kept(s, id);
    if (s->tok->byte_level)
        return feed_bytes(s, bytes, bytes && !skipped ? n_bytes : 0, len);
    if (!bytes || skipped) {
        s->out[0] = '\0';
        *len = 0;
        return s->out;
    }
    return feed_piece(s, id, len);
}

const char *tokenizer_stream_flush(struct tokenizer_stream *s, size_t *len)
{
    size_t k = 0;
    if (s->n_held) { /* an unfinished character at the end is one maximal invalid subpart */
        memcpy(s->out, replacement, 3);
        k = 3;
    }
    if (s->n_run)
        k = strip_filter(s, 0, close_run(s, 0));
    tokenizer_stream_reset(s); /* Strip's held characters at the end are dropped */
    s->out[k] = '\0';
    *len = k;
    return s->out;
}

void tokenizer_stream_reset(struct tokenizer_stream *s)
{
    s->n_held = 0;
    s->n_run = 0;
    s->started = s->text_seen = false;
    s->strip_left = s->tok->strip_start;
    s->trail = 0;
}

void tokenizer_stream_free(struct tokenizer_stream *s)
{
    if (!s)
        return;
    free(s->in);
    free(s->out);
    free(s->run);
    free(s);
}
