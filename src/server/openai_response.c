/*
 * openai_response.c: the JSON text of responses and stream chunks (openai_response.h), and the
 * small JSON writer they use, and the logprobs of generated tokens in the chat and the legacy
 * completions shapes.
 *
 * Called on HTTP threads for every stream chunk, so it writes text directly instead of building a
 * cJSON tree. Strings are escaped with their length: generated text may contain NUL bytes, which
 * become \u0000. Text handed in is UTF-8 (the engine emits complete characters only).
 */
#include "openai_response.h"

#include <math.h>

#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool jbuf_reserve(struct jbuf *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void jbuf_raw(struct jbuf *b, const char *s, size_t len)
{
    if (!len || !jbuf_reserve(b, len))
        return;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = 0;
}

void jbuf_lit(struct jbuf *b, const char *s)
{
    jbuf_raw(b, s, strlen(s));
}

/* s[0..len) escaped for a JSON string, without the quotes. */
static void jbuf_escaped(struct jbuf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t start = 0; /* bytes [start, i) are copied as they are before each escape */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jbuf_raw(b, s + start, i - start);
        start = i + 1;
        switch (c) {
        case '"': jbuf_raw(b, "\\\"", 2); break;
        case '\\': jbuf_raw(b, "\\\\", 2); break;
        case '\n': jbuf_raw(b, "\\n", 2); break;
        case '\r': jbuf_raw(b, "\\r", 2); break;
        case '\t': jbuf_raw(b, "\\t", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            jbuf_raw(b, u, 6);
        }
        }
    }
    jbuf_raw(b, s + start, len - start);
}

void jbuf_str(struct jbuf *b, const char *s, size_t len)
{
    jbuf_raw(b, "\"", 1);
    jbuf_escaped(b, s, len);
    jbuf_raw(b, "\"", 1);
}

/* Length of the valid UTF-8 character at s (n bytes left), 0 if it is not one. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t k;
    unsigned cp, min;
    if (c >= 0xc2 && c <= 0xdf)
        k = 1, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        k = 2, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 3, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n <= k)
        return 0;
    for (size_t i = 1; i <= k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : k + 1;
}

/* A JSON string of bytes that may not be UTF-8: each invalid byte becomes U+FFFD. */
static void jbuf_str_lossy(struct jbuf *b, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    jbuf_raw(b, "\"", 1);
    size_t i = 0, start = 0;
    while (i < len) {
        size_t k = utf8_char(u + i, len - i);
        if (k) {
            i += k;
            continue;
        }
        jbuf_escaped(b, s + start, i - start);
        jbuf_raw(b, "\xEF\xBF\xBD", 3);
        start = ++i;
    }
    jbuf_escaped(b, s + start, len - start);
    jbuf_raw(b, "\"", 1);
}

void jbuf_cstr(struct jbuf *b, const char *s)
{
    if (s)
        jbuf_str(b, s, strlen(s));
    else
        jbuf_lit(b, "null");
}

void jbuf_int(struct jbuf *b, long long v)
{
    char t[32];
    int n = snprintf(t, sizeof t, "%lld", v);
    jbuf_raw(b, t, (size_t)n);
}

void jbuf_num(struct jbuf *b, double v)
{
    if (!isfinite(v)) {
        jbuf_lit(b, "null");
        return;
    }
    char t[40];
    int n = snprintf(t, sizeof t, "%.17g", v);
    jbuf_raw(b, t, (size_t)n);
}

char *jbuf_finish(struct jbuf *b)
{
    if (b->failed || !b->data) {
        free(b->data);
        memset(b, 0, sizeof *b);
        return NULL;
    }
    char *s = b->data;
    memset(b, 0, sizeof *b);
    return s;
}

/* ---- logprobs ---- */

static void logprob_num(struct jbuf *b, float lp)
{
    jbuf_num(b, isfinite(lp) ? (double)lp : -9999.0);
}

/* "token":…,"logprob":…,"bytes":[…] of one id (chat). */
static void chat_token(struct jbuf *b, const struct tokenizer *tok, int32_t id, float lp)
{
    size_t n = 0;
    const char *bytes = tokenizer_id_bytes(tok, id, &n);
    jbuf_lit(b, "{\"token\":");
    jbuf_str_lossy(b, bytes ? bytes : "", n);
    jbuf_lit(b, ",\"logprob\":");
    logprob_num(b, lp);
    jbuf_lit(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jbuf_raw(b, ",", 1);
        jbuf_int(b, (unsigned char)bytes[i]);
    }
    jbuf_lit(b, "]");
}

static void chat_logprobs(struct jbuf *b, const struct oai_logprobs *L)
{
    jbuf_lit(b, "{\"content\":[");
    for (int i = 0; i < L->n; i++) {
        const struct sampler_logprobs *lp = &L->lp[i];
        if (i)
            jbuf_raw(b, ",", 1);
        chat_token(b, L->tok, L->ids[i], lp->logprob);
        jbuf_lit(b, ",\"top_logprobs\":[");
        int top = L->top < lp->n_top ? L->top : lp->n_top;
        for (int j = 0; j < top; j++) {
            if (j)
                jbuf_raw(b, ",", 1);
            chat_token(b, L->tok, lp->top_ids[j], lp->top_logprobs[j]);
            jbuf_lit(b, "}");
        }
        jbuf_lit(b, "]}");
    }
    jbuf_lit(b, "],\"refusal\":null}");
}

/* Characters one id adds to the text (code points: the bytes that do not continue one). */
static long long id_chars(const struct tokenizer *tok, int32_t id, bool skip_special)
{
    if (skip_special && tokenizer_is_special(tok, id))
        return 0;
    size_t n = 0;
    const char *bytes = tokenizer_id_bytes(tok, id, &n);
    long long c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)bytes[i] & 0xc0) != 0x80;
    return c;
}

long long oai_logprobs_chars(const struct tokenizer *tok, const int32_t *ids, int n,
                             bool skip_special)
{
    long long c = 0;
    for (int i = 0; i < n; i++)
        c += id_chars(tok, ids[i], skip_special);
    return c;
}

static void token_str(struct jbuf *b, const struct tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *bytes = tokenizer_id_bytes(tok, id, &n);
    jbuf_str_lossy(b, bytes ? bytes : "", n);
}

static void legacy_logprobs(struct jbuf *b, const struct oai_logprobs *L)
{
    jbuf_lit(b, "{\"tokens\":[");
    for (int i = 0; i < L->n; i++) {
        if (i)
            jbuf_raw(b, ",", 1);
        token_str(b, L->tok, L->ids[i]);
    }
    jbuf_lit(b, "],\"token_logprobs\":[");
    for (int i = 0; i < L->n; i++) {
        if (i)
            jbuf_raw(b, ",", 1);
        logprob_num(b, L->lp[i].logprob);
    }
    jbuf_lit(b, "],\"top_logprobs\":[");
    for (int i = 0; i < L->n; i++) {
        const struct sampler_logprobs *lp = &L->lp[i];
        jbuf_lit(b, i ? ",{" : "{");
        /* the alternatives, then the chosen token if it is not among them; a token string
         * that repeats (two ids, one text) is written once, as a JSON object must */
        int top = L->top < lp->n_top ? L->top : lp->n_top, written = 0;
        for (int j = 0; j <= top; j++) {
            int32_t id = j < top ? lp->top_ids[j] : L->ids[i];
            float v = j < top ? lp->top_logprobs[j] : lp->logprob;
            bool dup = false;
            size_t n = 0;
            const char *s = tokenizer_id_bytes(L->tok, id, &n);
            for (int k = 0; k < j && !dup; k++) {
                size_t m = 0;
                const char *t = tokenizer_id_bytes(L->tok, lp->top_ids[k], &m);
                dup = m == n && (!n || !memcmp(s, t, n));
            }
            if (dup)
                continue;
            if (written++)
                jbuf_raw(b, ",", 1);
            token_str(b, L->tok, id);
            jbuf_raw(b, ":", 1);
            logprob_num(b, v);
        }
        jbuf_lit(b, "}");
    }
    jbuf_lit(b, "],\"text_offset\":[");
    long long off = L->text_offset;
    for (int i = 0; i < L->n; i++) {
        if (i)
            jbuf_raw(b, ",", 1);
        jbuf_int(b, off);
        off += id_chars(L->tok, L->ids[i], L->skip_special);
    }
    jbuf_lit(b, "]}");
}

static void logprobs_field(struct jbuf *b, const struct oai_meta *m, const struct oai_choice *c)
{
    jbuf_lit(b, ",\"logprobs\":");
    if (!c->logprobs)
        jbuf_lit(b, "null");
    else if (m->kind == OAI_CHAT)
        chat_logprobs(b, c->logprobs);
    else
        legacy_logprobs(b, c->logprobs);
}

/* ---- responses ---- */

static void head(struct jbuf *b, const struct oai_meta *m, const char *object)
{
    jbuf_lit(b, "{\"id\":");
    jbuf_cstr(b, m->id);
    jbuf_lit(b, ",\"object\":\"");
    jbuf_lit(b, object);
    jbuf_lit(b, "\",\"created\":");
    jbuf_int(b, m->created);
    jbuf_lit(b, ",\"model\":");
    jbuf_cstr(b, m->model);
    jbuf_lit(b, ",\"system_fingerprint\":\"llaisys\"");
}

static void usage(struct jbuf *b, const struct oai_usage *u)
{
    jbuf_lit(b, "{\"prompt_tokens\":");
    jbuf_int(b, u->prompt_tokens);
    jbuf_lit(b, ",\"completion_tokens\":");
    jbuf_int(b, u->completion_tokens);
    jbuf_lit(b, ",\"total_tokens\":");
    jbuf_int(b, (long long)u->prompt_tokens + u->completion_tokens);
    jbuf_lit(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    jbuf_int(b, u->cached_tokens);
    jbuf_lit(b, "},\"completion_tokens_details\":{\"reasoning_tokens\":");
    jbuf_int(b, u->reasoning_tokens);
    jbuf_lit(b, "}}");
}

static void text_or_empty(struct jbuf *b, const char *s, size_t len)
{
    jbuf_str(b, s ? s : "", s ? len : 0);
}

char *oai_response_body(const struct oai_meta *m, const struct oai_choice *c, int n,
                        const struct oai_usage *u)
{
    struct jbuf b = {0};
    bool chat = m->kind == OAI_CHAT;
    head(&b, m, chat ? "chat.completion" : "text_completion");
    jbuf_lit(&b, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        jbuf_lit(&b, i ? ",{\"index\":" : "{\"index\":");
        jbuf_int(&b, c[i].index);
        if (chat) {
            jbuf_lit(&b, ",\"message\":{\"role\":\"assistant\",\"content\":");
            text_or_empty(&b, c[i].text, c[i].text_len);
            if (c[i].reasoning) {
                jbuf_lit(&b, ",\"reasoning_content\":");
                jbuf_str(&b, c[i].reasoning, c[i].reasoning_len);
            }
            jbuf_lit(&b, "}");
        } else {
            jbuf_lit(&b, ",\"text\":");
            text_or_empty(&b, c[i].text, c[i].text_len);
        }
        logprobs_field(&b, m, &c[i]);
        jbuf_lit(&b, ",\"finish_reason\":");
        jbuf_cstr(&b, c[i].finish_reason);
        jbuf_lit(&b, "}");
    }
    jbuf_lit(&b, "],\"usage\":");
    usage(&b, u);
    jbuf_lit(&b, "}");
    return jbuf_finish(&b);
}

char *oai_stream_chunk(const struct oai_meta *m, const struct oai_choice *c, bool role_first,
                       bool usage_null)
{
    struct jbuf b = {0};
    bool chat = m->kind == OAI_CHAT;
    head(&b, m, chat ? "chat.completion.chunk" : "text_completion");
    jbuf_lit(&b, ",\"choices\":[{\"index\":");
    jbuf_int(&b, c->index);
    if (chat) {
        jbuf_lit(&b, ",\"delta\":{");
        const char *sep = "";
        if (role_first) {
            jbuf_lit(&b, "\"role\":\"assistant\"");
            sep = ",";
        }
        if (c->text || role_first) {
            jbuf_lit(&b, sep);
            jbuf_lit(&b, "\"content\":");
            text_or_empty(&b, c->text, c->text_len);
            sep = ",";
        }
        if (c->reasoning) {
            jbuf_lit(&b, sep);
            jbuf_lit(&b, "\"reasoning_content\":");
            jbuf_str(&b, c->reasoning, c->reasoning_len);
        }
        jbuf_lit(&b, "}");
    } else {
        jbuf_lit(&b, ",\"text\":");
        text_or_empty(&b, c->text, c->text_len);
    }
    logprobs_field(&b, m, c);
    jbuf_lit(&b, ",\"finish_reason\":");
    jbuf_cstr(&b, c->finish_reason);
    jbuf_lit(&b, "}]");
    if (usage_null)
        jbuf_lit(&b, ",\"usage\":null");
    jbuf_lit(&b, "}");
    return jbuf_finish(&b);
}

char *oai_stream_usage(const struct oai_meta *m, const struct oai_usage *u)
{
    struct jbuf b = {0};
    head(&b, m, m->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    jbuf_lit(&b, ",\"choices\":[],\"usage\":");
    usage(&b, u);
    jbuf_lit(&b, "}");
    return jbuf_finish(&b);
}
