/*
 * openai_response.c: the JSON text of responses and stream chunks (openai_response.h), and the
 * logprobs of generated tokens in the chat and the legacy completions shapes.
 *
 * Called on HTTP threads for every stream chunk, so it writes text directly (json.h's writers
 * into an ll_buf) instead of building a cJSON tree. Strings are escaped with their length:
 * generated text may contain NUL bytes, which become \u0000. Text handed in is UTF-8 (the engine
 * emits complete characters only); a token's own bytes may not be, and are written lossily.
 */
#include "openai_response.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "reranker.h"
#include "tokenizer.h"

/* ---- logprobs ---- */

static void logprob_num(struct ll_buf *b, float lp)
{
    ll_json_put_num(b, isfinite(lp) ? (double)lp : -9999.0);
}

/* "token":…,"logprob":…,"bytes":[…] of one id (chat). */
static void chat_token(struct ll_buf *b, const struct tokenizer *tok, int32_t id, float lp)
{
    size_t n = 0;
    const char *bytes = tokenizer_id_bytes(tok, id, &n);
    ll_buf_puts(b, "{\"token\":");
    ll_json_put_str_lossy(b, bytes ? bytes : "", n);
    ll_buf_puts(b, ",\"logprob\":");
    logprob_num(b, lp);
    ll_buf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            ll_buf_putc(b, ',');
        ll_json_put_int(b, (unsigned char)bytes[i]);
    }
    ll_buf_puts(b, "]");
}

static void chat_logprobs(struct ll_buf *b, const struct oai_logprobs *L)
{
    ll_buf_puts(b, "{\"content\":[");
    for (int i = 0; i < L->n; i++) {
        const struct sampler_logprobs *lp = &L->lp[i];
        if (i)
            ll_buf_putc(b, ',');
        chat_token(b, L->tok, L->ids[i], lp->logprob);
        ll_buf_puts(b, ",\"top_logprobs\":[");
        int top = L->top < lp->n_top ? L->top : lp->n_top;
        for (int j = 0; j < top; j++) {
            if (j)
                ll_buf_putc(b, ',');
            chat_token(b, L->tok, lp->top_ids[j], lp->top_logprobs[j]);
            ll_buf_puts(b, "}");
        }
        ll_buf_puts(b, "]}");
    }
    ll_buf_puts(b, "],\"refusal\":null}");
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

static void token_str(struct ll_buf *b, const struct tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *bytes = tokenizer_id_bytes(tok, id, &n);
    ll_json_put_str_lossy(b, bytes ? bytes : "", n);
}

static void legacy_logprobs(struct ll_buf *b, const struct oai_logprobs *L)
{
    ll_buf_puts(b, "{\"tokens\":[");
    for (int i = 0; i < L->n; i++) {
        if (i)
            ll_buf_putc(b, ',');
        token_str(b, L->tok, L->ids[i]);
    }
    ll_buf_puts(b, "],\"token_logprobs\":[");
    for (int i = 0; i < L->n; i++) {
        if (i)
            ll_buf_putc(b, ',');
        logprob_num(b, L->lp[i].logprob);
    }
    ll_buf_puts(b, "],\"top_logprobs\":[");
    for (int i = 0; i < L->n; i++) {
        const struct sampler_logprobs *lp = &L->lp[i];
        ll_buf_puts(b, i ? ",{" : "{");
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
                ll_buf_putc(b, ',');
            token_str(b, L->tok, id);
            ll_buf_putc(b, ':');
            logprob_num(b, v);
        }
        ll_buf_puts(b, "}");
    }
    ll_buf_puts(b, "],\"text_offset\":[");
    long long off = L->text_offset;
    for (int i = 0; i < L->n; i++) {
        if (i)
            ll_buf_putc(b, ',');
        ll_json_put_int(b, off);
        off += id_chars(L->tok, L->ids[i], L->skip_special);
    }
    ll_buf_puts(b, "]}");
}

static void logprobs_field(struct ll_buf *b, const struct oai_meta *m, const struct oai_choice *c)
{
    ll_buf_puts(b, ",\"logprobs\":");
    if (!c->logprobs)
        ll_buf_puts(b, "null");
    else if (m->kind == OAI_CHAT)
        chat_logprobs(b, c->logprobs);
    else
        legacy_logprobs(b, c->logprobs);
}

/* ---- responses ---- */

static void head(struct ll_buf *b, const struct oai_meta *m, const char *object)
{
    ll_buf_puts(b, "{\"id\":");
    ll_json_put_cstr(b, m->id);
    ll_buf_puts(b, ",\"object\":\"");
    ll_buf_puts(b, object);
    ll_buf_puts(b, "\",\"created\":");
    ll_json_put_int(b, m->created);
    ll_buf_puts(b, ",\"model\":");
    ll_json_put_cstr(b, m->model);
    ll_buf_puts(b, ",\"system_fingerprint\":\"llaisys\"");
}

static void usage(struct ll_buf *b, const struct oai_usage *u)
{
    ll_buf_puts(b, "{\"prompt_tokens\":");
    ll_json_put_int(b, u->prompt_tokens);
    ll_buf_puts(b, ",\"completion_tokens\":");
    ll_json_put_int(b, u->completion_tokens);
    ll_buf_puts(b, ",\"total_tokens\":");
    ll_json_put_int(b, (long long)u->prompt_tokens + u->completion_tokens);
    ll_buf_puts(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    ll_json_put_int(b, u->cached_tokens);
    ll_buf_puts(b, "},\"completion_tokens_details\":{\"reasoning_tokens\":");
    ll_json_put_int(b, u->reasoning_tokens);
    ll_buf_puts(b, ",\"accepted_prediction_tokens\":");
    ll_json_put_int(b, u->spec_accepted);
    ll_buf_puts(b, ",\"rejected_prediction_tokens\":");
    ll_json_put_int(b, (long long)u->spec_drafted - u->spec_accepted);
    ll_buf_puts(b, "}}");
}

static void text_or_empty(struct ll_buf *b, const char *s, size_t len)
{
    ll_json_put_str(b, s ? s : "", s ? len : 0);
}

/* "tool_calls":[...] (or "function_call":{...}) of c. */
static void calls_field(struct ll_buf *b, const struct oai_choice *c, bool stream)
{
    if (c->legacy_call) {
        ll_buf_puts(b, "\"function_call\":{");
        if (c->calls[0].name) {
            ll_buf_puts(b, "\"name\":");
            ll_json_put_cstr(b, c->calls[0].name);
            ll_buf_puts(b, ",");
        }
        ll_buf_puts(b, "\"arguments\":");
        ll_json_put_cstr(b, c->calls[0].arguments);
        ll_buf_puts(b, "}");
        return;
    }
    ll_buf_puts(b, "\"tool_calls\":[");
    for (int i = 0; i < c->n_calls; i++) {
        ll_buf_puts(b, i ? ",{" : "{");
        if (stream) {
            ll_buf_puts(b, "\"index\":");
            ll_json_put_int(b, c->first_call + i);
            ll_buf_puts(b, ",");
        }
        if (c->calls[i].id) {
            ll_buf_puts(b, "\"id\":");
            ll_json_put_cstr(b, c->calls[i].id);
            ll_buf_puts(b, ",\"type\":\"function\",");
        }
        ll_buf_puts(b, "\"function\":{");
        if (c->calls[i].name) {
            ll_buf_puts(b, "\"name\":");
            ll_json_put_cstr(b, c->calls[i].name);
            ll_buf_puts(b, ",");
        }
        ll_buf_puts(b, "\"arguments\":");
        ll_json_put_cstr(b, c->calls[i].arguments);
        ll_buf_puts(b, "}}");
    }
    ll_buf_puts(b, "]");
}

char *oai_response_body(const struct oai_meta *m, const struct oai_choice *c, int n,
                        const struct oai_usage *u)
{
    struct ll_buf b = {0};
    bool chat = m->kind == OAI_CHAT;
    head(&b, m, chat ? "chat.completion" : "text_completion");
    ll_buf_puts(&b, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        ll_buf_puts(&b, i ? ",{\"index\":" : "{\"index\":");
        ll_json_put_int(&b, c[i].index);
        if (chat) {
            ll_buf_puts(&b, ",\"message\":{\"role\":\"assistant\",\"content\":");
            if (c[i].content_null)
                ll_buf_puts(&b, "null");
            else
                text_or_empty(&b, c[i].text, c[i].text_len);
            if (c[i].n_calls) {
                ll_buf_putc(&b, ',');
                calls_field(&b, &c[i], false);
            }
            if (c[i].reasoning) {
                ll_buf_puts(&b, ",\"reasoning_content\":");
                ll_json_put_str(&b, c[i].reasoning, c[i].reasoning_len);
            }
            ll_buf_puts(&b, "}");
        } else {
            ll_buf_puts(&b, ",\"text\":");
            text_or_empty(&b, c[i].text, c[i].text_len);
        }
        logprobs_field(&b, m, &c[i]);
        ll_buf_puts(&b, ",\"finish_reason\":");
        ll_json_put_cstr(&b, c[i].finish_reason);
        ll_buf_puts(&b, "}");
    }
    ll_buf_puts(&b, "],\"usage\":");
    usage(&b, u);
    ll_buf_puts(&b, "}");
    return ll_buf_take(&b);
}

char *oai_stream_chunk(const struct oai_meta *m, const struct oai_choice *c, bool role_first,
                       bool usage_null)
{
    struct ll_buf b = {0};
    bool chat = m->kind == OAI_CHAT;
    head(&b, m, chat ? "chat.completion.chunk" : "text_completion");
    ll_buf_puts(&b, ",\"choices\":[{\"index\":");
    ll_json_put_int(&b, c->index);
    if (chat) {
        ll_buf_puts(&b, ",\"delta\":{");
        const char *sep = "";
        if (role_first) {
            ll_buf_puts(&b, "\"role\":\"assistant\"");
            sep = ",";
        }
        if (c->text || role_first) {
            ll_buf_puts(&b, sep);
            ll_buf_puts(&b, "\"content\":");
            text_or_empty(&b, c->text, c->text_len);
            sep = ",";
        }
        if (c->reasoning) {
            ll_buf_puts(&b, sep);
            ll_buf_puts(&b, "\"reasoning_content\":");
            ll_json_put_str(&b, c->reasoning, c->reasoning_len);
            sep = ",";
        }
        if (c->n_calls) {
            ll_buf_puts(&b, sep);
            calls_field(&b, c, true);
        }
        ll_buf_puts(&b, "}");
    } else {
        ll_buf_puts(&b, ",\"text\":");
        text_or_empty(&b, c->text, c->text_len);
    }
    logprobs_field(&b, m, c);
    ll_buf_puts(&b, ",\"finish_reason\":");
    ll_json_put_cstr(&b, c->finish_reason);
    ll_buf_puts(&b, "}]");
    if (usage_null)
        ll_buf_puts(&b, ",\"usage\":null");
    ll_buf_puts(&b, "}");
    return ll_buf_take(&b);
}

char *oai_stream_usage(const struct oai_meta *m, const struct oai_usage *u)
{
    struct ll_buf b = {0};
    head(&b, m, m->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    ll_buf_puts(&b, ",\"choices\":[],\"usage\":");
    usage(&b, u);
    ll_buf_puts(&b, "}");
    return ll_buf_take(&b);
}

/* ---- embeddings ---- */

static void put_base64(struct ll_buf *b, const unsigned char *p, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        q[0] = abc[v >> 18 & 63];
        q[1] = abc[v >> 12 & 63];
        q[2] = i + 1 < n ? abc[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? abc[v & 63] : '=';
        ll_buf_append(b, q, 4);
    }
}

char *oai_embeddings_body(const char *model, const float *const *vecs, int n, int dim,
                          bool base64, int prompt_tokens)
{
    struct ll_buf b = {0};
    ll_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < n; i++) {
        ll_buf_puts(&b, i ? ",{\"object\":\"embedding\",\"index\":"
                          : "{\"object\":\"embedding\",\"index\":");
        ll_json_put_int(&b, i);
        ll_buf_puts(&b, ",\"embedding\":");
        if (base64) {
            unsigned char le[4];
            ll_buf_puts(&b, "\"");
            /* little-endian bytes whatever the host's order */
            struct ll_buf raw = {0};
            for (int k = 0; k < dim; k++) {
                uint32_t u;
                memcpy(&u, &vecs[i][k], 4);
                le[0] = (unsigned char)u, le[1] = (unsigned char)(u >> 8);
                le[2] = (unsigned char)(u >> 16), le[3] = (unsigned char)(u >> 24);
                ll_buf_append(&raw, (const char *)le, 4);
            }
            if (raw.failed)
                b.failed = true;
            else
                put_base64(&b, (const unsigned char *)raw.data, raw.len);
            ll_buf_free(&raw);
            ll_buf_puts(&b, "\"}");
            continue;
        }
        ll_buf_puts(&b, "[");
        for (int k = 0; k < dim; k++) {
            char num[32];
            float v = vecs[i][k];
            int len = isfinite(v) ? snprintf(num, sizeof num, "%s%.9g", k ? "," : "", (double)v)
                                  : snprintf(num, sizeof num, "%snull", k ? "," : "");
            ll_buf_append(&b, num, (size_t)len);
        }
        ll_buf_puts(&b, "]}");
    }
    ll_buf_puts(&b, "],\"model\":");
    ll_json_put_cstr(&b, model);
    ll_buf_puts(&b, ",\"usage\":{\"prompt_tokens\":");
    ll_json_put_int(&b, prompt_tokens);
    ll_buf_puts(&b, ",\"total_tokens\":");
    ll_json_put_int(&b, prompt_tokens);
    ll_buf_puts(&b, "}}");
    return ll_buf_take(&b);
}

char *oai_rerank_body(const char *id, const char *model, const double *scores, int n, int top_n,
                      const struct oai_prompt *docs, int prompt_tokens)
{
    int *order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!order || reranker_order(scores, n, order) != LL_OK) {
        free(order);
        return NULL;
    }
    int m = top_n > 0 && top_n < n ? top_n : n;
    struct ll_buf b = {0};
    ll_buf_puts(&b, "{");
    if (id) {
        ll_buf_puts(&b, "\"id\":");
        ll_json_put_cstr(&b, id);
        ll_buf_puts(&b, ",");
    }
    ll_buf_puts(&b, "\"model\":");
    ll_json_put_cstr(&b, model);
    ll_buf_puts(&b, ",\"object\":\"list\",\"results\":[");
    for (int r = 0; r < m; r++) {
        int i = order[r];
        ll_buf_puts(&b, r ? ",{\"index\":" : "{\"index\":");
        ll_json_put_int(&b, i);
        char num[40];
        int len = isfinite(scores[i]) ? snprintf(num, sizeof num, "%.17g", scores[i])
                                      : snprintf(num, sizeof num, "null");
        ll_buf_puts(&b, ",\"relevance_score\":");
        ll_buf_append(&b, num, (size_t)len);
        if (docs) {
            ll_buf_puts(&b, ",\"document\":{\"text\":");
            ll_json_put_str(&b, docs[i].text, docs[i].text_len);
            ll_buf_puts(&b, "}");
        }
        ll_buf_puts(&b, "}");
    }
    ll_buf_puts(&b, "],\"usage\":{\"prompt_tokens\":");
    ll_json_put_int(&b, prompt_tokens);
    ll_buf_puts(&b, ",\"total_tokens\":");
    ll_json_put_int(&b, prompt_tokens);
    ll_buf_puts(&b, "},\"meta\":{\"tokens\":{\"input_tokens\":");
    ll_json_put_int(&b, prompt_tokens);
    ll_buf_puts(&b, ",\"output_tokens\":0}}}");
    free(order);
    return ll_buf_take(&b);
}
