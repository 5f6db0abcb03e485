/*
 * openai_response.c: the JSON text of responses and stream chunks (openai_response.h), and the
 * small JSON writer they use.
 *
 * Called on HTTP threads for every stream chunk, so it writes text directly instead of building a
 * cJSON tree. Strings are escaped with their length: generated text may contain NUL bytes, which
 * become \u0000. Text handed in is UTF-8 (the engine emits complete characters only).
 */
#include "openai_response.h"

#include <math.h>
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

void jbuf_str(struct jbuf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    jbuf_raw(b, "\"", 1);
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
        jbuf_lit(&b, ",\"logprobs\":null,\"finish_reason\":");
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
    jbuf_lit(&b, ",\"logprobs\":null,\"finish_reason\":");
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
