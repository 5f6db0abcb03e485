/*
 * openai_request.c: request bodies of the OpenAI-compatible routes → struct oai_request (and
 * vLLM's /tokenize, /detokenize bodies), with every known field type- and range-checked; the
 * lines of `llaisys-cli batch`, which are such bodies; and a request → engine parameters.
 *
 * Called on HTTP threads and by the batch command; pure functions of their input. Every error
 * names the field (as OpenAI's error.param) and what was expected. JSON null is treated as an
 * absent field; a field not in the lists below is refused by name (no silent ignores), OpenAI's
 * hints are accepted without effect. The body must be UTF-8 (checked before parsing, so a
 * string never carries invalid bytes into the tokenizer); cJSON bounds nesting depth, so deep
 * input cannot overflow the stack. Types and ranges are checked by base's JSON getters (json.h):
 * a wrong type is LL_ETYPE with error.code "invalid_type", a value out of range LL_EINVAL with
 * "invalid_value"; the ranges of sampling values are gen_params.h's, the limits of stops and
 * logit_bias the engine's.
 */
#include "openai_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "grammar.h"
#include "json.h"
#include "utf8.h"

/* Drop from s (in place) the bytes that are not part of a valid UTF-8 character. */
static void utf8_clean(char *s)
{
    size_t n = strlen(s), out = 0;
    for (size_t at = 0; at < n;) {
        enum ll_utf8_status st;
        uint32_t cp;
        size_t k = ll_utf8_scan((const unsigned char *)s + at, n - at, &st, &cp);
        if (st == LL_UTF8_OK) {
            memmove(s + out, s + at, k);
            out += k;
        }
        at += k;
    }
    s[out] = 0;
}

enum ll_status oai_error_set(struct oai_error *e, enum ll_status status, const char *param,
                             const char *code, const char *fmt, ...)
{
    if (!e)
        return status;
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    /* A field name cut to fit (here, or by a "%.60s" in fmt) can end inside a UTF-8
     * character (found by fuzz_openai_request): drop such pieces, so the body stays UTF-8. */
    utf8_clean(e->param);
    utf8_clean(e->code);
    utf8_clean(e->message);
    return status;
}

cJSON *oai_error_object(const struct oai_error *e)
{
    cJSON *err = cJSON_CreateObject();
    if (err && cJSON_AddStringToObject(err, "message", e->message) &&
        cJSON_AddStringToObject(err, "type", ll_status_type(e->status)) &&
        (e->param[0] ? cJSON_AddStringToObject(err, "param", e->param)
                     : cJSON_AddNullToObject(err, "param")) &&
        (e->code[0] ? cJSON_AddStringToObject(err, "code", e->code)
                    : cJSON_AddNullToObject(err, "code")))
        return err;
    cJSON_Delete(err);
    return NULL;
}

char *oai_error_json(const struct oai_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = oai_error_object(e);
    char *out = NULL;
    if (root && err && cJSON_AddItemToObject(root, "error", err))
        out = cJSON_PrintUnformatted(root);
    else
        cJSON_Delete(err);
    cJSON_Delete(root);
    return out;
}

/* ---- field helpers: each returns LL_OK (also when the field is absent) or an error ---- */

/* The error of an ll_json_get_* getter as OpenAI's, naming param. */
static enum ll_status get_error(struct oai_error *e, const char *param, const struct ll_err *err)
{
    const char *code = err->code == LL_ETYPE    ? "invalid_type"
                       : err->code == LL_EINVAL ? "invalid_value"
                                                : NULL;
    return oai_error_set(e, err->code, param, code, "%s", err->msg);
}

static enum ll_status wrong_type(struct oai_error *e, const char *param, const char *want,
                                 const cJSON *got)
{
    return oai_error_set(e, LL_ETYPE, param, "invalid_type", "'%s' must be %s, not %s", param,
                         want, ll_json_type_name(got));
}

static enum ll_status opt_bool(const cJSON *obj, const char *name, bool *out,
                               struct oai_error *e)
{
    struct ll_err err = {0};
    if (ll_json_get_bool(obj, name, out, NULL, &err) != LL_OK)
        return get_error(e, name, &err);
    return LL_OK;
}

/* A number in [lo, hi] (lo excluded when lo_open); *has set when given (has may be NULL). */
static enum ll_status opt_number(const cJSON *obj, const char *name, double lo, double hi,
                                 bool lo_open, float *out, bool *has, struct oai_error *e)
{
    struct ll_err err = {0};
    double x;
    bool present;
    if (ll_json_get_num(obj, name, lo, hi, lo_open, &x, &present, &err) != LL_OK)
        return get_error(e, name, &err);
    if (present)
        *out = (float)x;
    if (has)
        *has = present;
    return LL_OK;
}

static enum ll_status opt_int(const cJSON *obj, const char *name, long long lo, long long hi,
                              long long *out, bool *has, struct oai_error *e)
{
    struct ll_err err = {0};
    if (ll_json_get_int(obj, name, lo, hi, out, has, &err) != LL_OK)
        return get_error(e, name, &err);
    return LL_OK;
}

static enum ll_status opt_string(const cJSON *obj, const char *name, char **out,
                                 struct oai_error *e)
{
    struct ll_err err = {0};
    const char *v = NULL;
    if (ll_json_get_str(obj, name, &v, NULL, &err) != LL_OK)
        return get_error(e, name, &err);
    if (v && !(*out = strdup(v)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    return LL_OK;
}

/* Parse body into *root (an object); `what` names the body in messages. */
/* The byte offset of the first "\u0000" escape inside a JSON string of body, or len when none.
 * Strings are copied as C strings downstream, so a NUL would silently cut them: refused. */
static size_t find_nul_escape(const char *body, size_t len)
{
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (body[i] == '"') {
            in_str = !in_str;
        } else if (in_str && body[i] == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4))
                return i;
            i++; /* skip the escaped character (an escaped quote or backslash) */
        }
    }
    return len;
}

static enum ll_status parse_body(cJSON **root, const char *body, size_t len, const char *what,
                                 struct oai_error *e)
{
    *root = NULL;
    size_t bad;
    if (!ll_utf8_valid(body, len, &bad))
        return oai_error_set(e, LL_EUTF8, NULL, "invalid_utf8",
                             "%s is not valid UTF-8 (byte offset %zu)", what, bad);
    if ((bad = find_nul_escape(body, len)) < len)
        return oai_error_set(e, LL_EINVAL, NULL, "invalid_value",
                             "%s has a NUL character (\\u0000) in a string at byte offset %zu: "
                             "NUL is not allowed in text",
                             what, bad);
    struct ll_err err = {0};
    cJSON *r;
    enum ll_status s = ll_json_parse(&r, body, len, what, &err);
    if (s != LL_OK)
        return oai_error_set(e, s, NULL, s == LL_EJSON ? "invalid_json" : NULL, "%s", err.msg);
    if (!cJSON_IsObject(r)) {
        s = oai_error_set(e, LL_ETYPE, NULL, "invalid_type", "%s must be a JSON object, not %s",
                          what, ll_json_type_name(r));
        cJSON_Delete(r);
        return s;
    }
    *root = r;
    return LL_OK;
}

/* ---- chat messages → template variables ---- */

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "function"};

/* content (string, array of text parts, or null) → a new cJSON string or null. */
static enum ll_status content_to_json(const cJSON *c, int i, const char *role, cJSON **out,
                                      struct oai_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c) {
        if (strcmp(role, "assistant"))
            return oai_error_set(e, LL_EINVAL, param, "missing_required_parameter",
                                 "'%s' is required for role '%s'", param, role);
        *out = cJSON_CreateNull();
    } else if (cJSON_IsString(c)) {
        *out = cJSON_CreateString(c->valuestring);
    } else if (cJSON_IsArray(c)) {
        size_t total = 0;
        int n = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, c) {
            char pp[96];
            snprintf(pp, sizeof pp, "%s[%d]", param, n);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
            if (!cJSON_IsObject(p))
                return wrong_type(e, pp, "an object", p);
            if (!cJSON_IsString(type))
                return oai_error_set(e, LL_ETYPE, pp, "invalid_type",
                                     "'%s.type' must be a string", pp);
            if (strcmp(type->valuestring, "text"))
                return oai_error_set(e, LL_EUNSUPPORTED, pp, "unsupported_content",
                                     "'%s': content parts of type '%.40s' are not supported "
                                     "(only 'text')", pp, type->valuestring);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsString(t)) {
                char tp[112];
                snprintf(tp, sizeof tp, "%s.text", pp);
                return wrong_type(e, tp, "a string", t ? t : p);
            }
            total += strlen(t->valuestring) + 1;
            n++;
        }
        char *buf = malloc(total + 1), *w = buf;
        if (!buf)
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        int k = 0;
        cJSON_ArrayForEach(p, c) {
            const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
            size_t l = strlen(t);
            if (k++)
                *w++ = '\n';
            memcpy(w, t, l);
            w += l;
        }
        *w = 0;
        *out = cJSON_CreateString(buf);
        free(buf);
    } else {
        return wrong_type(e, param, "a string or an array of content parts", c);
    }
    return *out ? LL_OK : oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
}

/* An assistant's tool_calls (and legacy function_call): [{id?, type? "function", function:
 * {name: string, arguments: string}}]. */
static enum ll_status check_call(const cJSON *f, const char *param, struct oai_error *e)
{
    char p[128];
    if (!cJSON_IsObject(f))
        return wrong_type(e, param, "an object", f);
    const cJSON *name = ll_json_member(f, "name"), *args = ll_json_member(f, "arguments");
    snprintf(p, sizeof p, "%s.name", param);
    if (!cJSON_IsString(name))
        return name ? wrong_type(e, p, "a string", name)
                    : oai_error_set(e, LL_EINVAL, p, "missing_required_parameter",
                                    "'%s' is required", p);
    snprintf(p, sizeof p, "%s.arguments", param);
    if (!cJSON_IsString(args))
        return args ? wrong_type(e, p, "a string (JSON text)", args)
                    : oai_error_set(e, LL_EINVAL, p, "missing_required_parameter",
                                    "'%s' is required", p);
    return LL_OK;
}

static enum ll_status check_tool_calls(const cJSON *m, int i, struct oai_error *e)
{
    char param[96];
    const cJSON *fc = ll_json_member(m, "function_call");
    if (fc) {
        snprintf(param, sizeof param, "messages[%d].function_call", i);
        return check_call(fc, param, e);
    }
    const cJSON *tc = ll_json_member(m, "tool_calls");
    if (!tc)
        return LL_OK;
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(tc))
        return wrong_type(e, param, "an array", tc);
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k++);
        if (!cJSON_IsObject(c))
            return wrong_type(e, param, "an object", c);
        const cJSON *type = ll_json_member(c, "type"), *id = ll_json_member(c, "id");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
            return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                 "'%s.type' must be \"function\"", param);
        if (id && !cJSON_IsString(id))
            return oai_error_set(e, LL_ETYPE, param, "invalid_type", "'%s.id' must be a string",
                                 param);
        char fp[112];
        snprintf(fp, sizeof fp, "%s.function", param);
        enum ll_status s = check_call(ll_json_member(c, "function"), fp, e);
        if (s != LL_OK)
            return s;
    }
    return LL_OK;
}

static enum ll_status message_to_json(const cJSON *m, int i, cJSON *list, struct oai_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m))
        return wrong_type(e, param, "an object", m);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!role || cJSON_IsNull(role))
        return oai_error_set(e, LL_EINVAL, param, "missing_required_parameter",
                             "'%s' is required", param);
    if (!cJSON_IsString(role))
        return wrong_type(e, param, "a string", role);
    size_t r = 0;
    while (r < sizeof roles / sizeof roles[0] && strcmp(role->valuestring, roles[r]))
        r++;
    if (r == sizeof roles / sizeof roles[0])
        return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                             "'%s' must be one of system, developer, user, assistant, tool, "
                             "function; got '%.40s'", param, role->valuestring);
    cJSON *content = NULL;
    enum ll_status s =
        content_to_json(ll_json_member(m, "content"), i, role->valuestring, &content, e);
    if (s != LL_OK)
        return s;
    if ((s = check_tool_calls(m, i, e)) != LL_OK) {
        cJSON_Delete(content);
        return s;
    }
    cJSON *copy = cJSON_Duplicate(m, true);
    const char *rname = role->valuestring;
    if (!strcmp(rname, "developer"))
        rname = "system";
    else if (!strcmp(rname, "function")) /* legacy: a function's result is a tool message */
        rname = "tool";
    cJSON *rolestr = cJSON_CreateString(rname);
    if (!copy || !rolestr || !cJSON_ReplaceItemInObjectCaseSensitive(copy, "role", rolestr)) {
        cJSON_Delete(copy);
        cJSON_Delete(rolestr);
        cJSON_Delete(content);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "content");
    cJSON_AddItemToObject(copy, "content", content);
    /* legacy: an assistant's function_call is its one tool call */
    cJSON *fc = cJSON_DetachItemFromObjectCaseSensitive(copy, "function_call");
    if (fc && !cJSON_IsNull(fc) && !ll_json_member(copy, "tool_calls")) {
        cJSON *calls = cJSON_AddArrayToObject(copy, "tool_calls"), *call = cJSON_CreateObject();
        if (!calls || !call || !cJSON_AddItemToArray(calls, call) ||
            !cJSON_AddStringToObject(call, "id", "call_0") ||
            !cJSON_AddStringToObject(call, "type", "function") ||
            !cJSON_AddItemToObject(call, "function", fc)) {
            cJSON_Delete(fc);
            cJSON_Delete(copy);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        fc = NULL;
    }
    cJSON_Delete(fc);
    cJSON_AddItemToArray(list, copy);
    return LL_OK;
}

/* Build the chat template variables from root's messages, tools, add_generation_prompt and
 * chat_template_kwargs. */
static enum ll_status chat_context(const cJSON *root, cJSON **out, struct oai_error *e)
{
    *out = NULL;
    const cJSON *msgs = ll_json_member(root, "messages");
    if (!msgs)
        return oai_error_set(e, LL_EINVAL, "messages", "missing_required_parameter",
                             "'messages' is required");
    if (!cJSON_IsArray(msgs))
        return wrong_type(e, "messages", "an array", msgs);
    if (!cJSON_GetArraySize(msgs))
        return oai_error_set(e, LL_EINVAL, "messages", "invalid_value",
                             "'messages' must hold at least one message");
    bool add_gen = true;
    enum ll_status s = opt_bool(root, "add_generation_prompt", &add_gen, e);
    if (s != LL_OK)
        return s;
    const cJSON *kw = ll_json_member(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return wrong_type(e, "chat_template_kwargs", "an object", kw);

    cJSON *ctx = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(ctx, "messages");
    if (!list || !cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_gen)) {
        cJSON_Delete(ctx);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if ((s = message_to_json(m, i++, list, e)) != LL_OK) {
            cJSON_Delete(ctx);
            return s;
        }
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, kw) {
        if (!strcmp(k->string, "messages")) {
            cJSON_Delete(ctx);
            return oai_error_set(e, LL_EINVAL, "chat_template_kwargs", "invalid_value",
                                 "'chat_template_kwargs' may not set 'messages'");
        }
        cJSON *dup = cJSON_Duplicate(k, true);
        if (!dup) {
            cJSON_Delete(ctx);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, k->string);
        cJSON_AddItemToObject(ctx, k->string, dup);
    }
    *out = ctx;
    return LL_OK;
}

/* ---- completions prompts ---- */

static enum ll_status ids_from_array(const cJSON *a, const char *param, int32_t **ids, int *n,
                                     struct oai_error *e)
{
    int cnt = cJSON_GetArraySize(a);
    if (cnt == 0)
        return oai_error_set(e, LL_EINVAL, param, "invalid_value", "'%s' must not be empty",
                             param);
    int32_t *v = malloc((size_t)cnt * sizeof *v);
    if (!v)
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        long long id;
        if (!ll_json_is_int(x, 0, INT32_MAX, &id)) {
            free(v);
            return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                 "'%s[%d]' must be a token id (an integer >= 0), not %s", param,
                                 i, cJSON_IsNumber(x) ? "that number" : ll_json_type_name(x));
        }
        v[i++] = (int32_t)id;
    }
    *ids = v;
    *n = cnt;
    return LL_OK;
}

/* The prompts of r from root's member `key` ("prompt", or "input" of /v1/embeddings): a
 * string, strings, token ids or arrays of ids, at most `max` of them; no_empty: an empty
 * string is refused (an embedding of nothing). */
static enum ll_status parse_prompts(const cJSON *root, const char *key, int max, bool no_empty,
                                    struct oai_request *r, struct oai_error *e)
{
    const cJSON *p = ll_json_member(root, key);
    if (!p)
        return oai_error_set(e, LL_EINVAL, key, "missing_required_parameter",
                             "'%s' is required", key);
    const char *want = "a string, an array of strings, an array of token ids or an array of "
                       "arrays of token ids";
    if (cJSON_IsString(p)) {
        if (no_empty && !*p->valuestring)
            return oai_error_set(e, LL_EINVAL, key, "invalid_value",
                                 "'%s' must not be an empty string", key);
        if (!(r->prompts = calloc(1, sizeof *r->prompts)) ||
            !(r->prompts[0].text = strdup(p->valuestring)))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        r->prompts[0].text_len = strlen(p->valuestring);
        r->n_prompts = 1;
        return LL_OK;
    }
    if (!cJSON_IsArray(p))
        return wrong_type(e, key, want, p);
    int cnt = cJSON_GetArraySize(p);
    if (cnt == 0)
        return oai_error_set(e, LL_EINVAL, key, "invalid_value", "'%s' must not be empty", key);
    const cJSON *first = p->child;
    if (cJSON_IsNumber(first)) { /* one prompt of ids */
        if (!(r->prompts = calloc(1, sizeof *r->prompts)))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        r->n_prompts = 1;
        return ids_from_array(p, key, &r->prompts[0].ids, &r->prompts[0].n_ids, e);
    }
    if (cnt > max)
        return oai_error_set(e, LL_EINVAL, key, "invalid_value",
                             "'%s' may hold at most %d %s, got %d", key, max,
                             no_empty ? "inputs" : "prompts", cnt);
    if (!(r->prompts = calloc((size_t)cnt, sizeof *r->prompts)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, p) {
        char param[32];
        snprintf(param, sizeof param, "%s[%d]", key, i);
        struct oai_prompt *q = &r->prompts[i];
        r->n_prompts = ++i;
        if (cJSON_IsString(first) && cJSON_IsString(x)) {
            if (no_empty && !*x->valuestring)
                return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                     "'%s' must not be an empty string", param);
            if (!(q->text = strdup(x->valuestring)))
                return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
            q->text_len = strlen(x->valuestring);
        } else if (cJSON_IsArray(first) && cJSON_IsArray(x)) {
            enum ll_status s = ids_from_array(x, param, &q->ids, &q->n_ids, e);
            if (s != LL_OK)
                return s;
        } else {
            return oai_error_set(e, LL_ETYPE, param, "invalid_type",
                                 "'%s' must be %s; '%s' is %s", key, want, param,
                                 ll_json_type_name(x));
        }
    }
    return LL_OK;
}

/* ---- structured output ---- */

/* The end of building a request's grammar: builder b (freed here) after status s, compiled
 * from root into *g; an error names param, with code unsupported_WHAT / invalid_WHAT. */
static enum ll_status finish_grammar(struct gbuild *b, enum ll_status s, int root,
                                     const char *param, const char *what, struct grammar **g,
                                     struct ll_err *err, struct oai_error *e)
{
    if (s == LL_OK)
        s = gbuild_finish(b, root, g, err);
    gbuild_free(b);
    if (s == LL_ENOMEM)
        return oai_error_set(e, s, NULL, NULL, "out of memory");
    if (s != LL_OK) {
        char code[32];
        snprintf(code, sizeof code, "%s_%s", s == LL_EUNSUPPORTED ? "unsupported" : "invalid",
                 what);
        return oai_error_set(e, s, param, code, "%s", err->msg);
    }
    return LL_OK;
}

/* The grammar for a JSON value matching schema (NULL: any JSON object), named `where`. */
static enum ll_status format_grammar(const cJSON *schema, const char *where, struct grammar **g,
                                     struct oai_error *e)
{
    struct gbuild *b = gbuild_new();
    if (!b)
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    struct ll_err err = {0};
    int root = -1;
    enum ll_status s = LL_OK;
    if (schema)
        s = grammar_json_schema(b, schema, where, &root, &err);
    else
        root = gb_concat(b, (int[]){grammar_json_lead_ws(b), grammar_json_any_object(b)}, 2);
    return finish_grammar(b, s, root, where, "schema", g, &err, e);
}

/* Refuse members of obj other than the names in allowed (NULL-terminated); param names obj. */
static enum ll_status only_keys(const cJSON *obj, const char *const *allowed, const char *param,
                                struct oai_error *e)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, obj) {
        bool ok = cJSON_IsNull(k);
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(k->string, allowed[i]);
        if (!ok) {
            char p[160];
            snprintf(p, sizeof p, "%s.%.60s", param, k->string);
            return oai_error_set(e, LL_EUNSUPPORTED, p, "unsupported_parameter",
                                 "'%s' is not supported", p);
        }
    }
    return LL_OK;
}

/* vLLM's guided_regex (the text matches a regular expression whole) and guided_choice (the text
 * is one of a list of strings), or the same in structured_outputs (so: the names say so): the
 * grammar into r->grammar. */
static enum ll_status guided_text(const cJSON *gr, const cJSON *gc, bool so, struct oai_request *r,
                                  struct oai_error *e)
{
    const char *param = gr ? (so ? "structured_outputs.regex" : "guided_regex")
                           : (so ? "structured_outputs.choice" : "guided_choice");
    if (gr && !cJSON_IsString(gr))
        return wrong_type(e, param, "a string (a regular expression)", gr);
    if (gc && (!cJSON_IsArray(gc) || cJSON_GetArraySize(gc) == 0))
        return wrong_type(e, param, "a non-empty array of strings", gc);
    struct gbuild *b = gbuild_new();
    if (!b)
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    struct ll_err err = {0};
    int root = -1;
    enum ll_status s = LL_OK;
    if (gr) {
        s = grammar_regex_text(b, gr->valuestring, param, &root, &err);
    } else {
        root = gb_rule(b);
        const cJSON *x;
        int i = 0;
        cJSON_ArrayForEach(x, gc) {
            if (!cJSON_IsString(x) || !x->valuestring[0]) {
                gbuild_free(b);
                return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                     "'%s[%d]' must be a non-empty string", param, i);
            }
            struct gseq q = {0};
            gseq_lit(b, &q, x->valuestring, strlen(x->valuestring));
            gb_alt(b, root, &q);
            gseq_free(&q);
            i++;
        }
    }
    return finish_grammar(b, s, root, param, "value", &r->grammar, &err, e);
}

/* vLLM's structured_outputs {json | regex | choice | json_object, and its options}: the one
 * constraint it holds into *gj / *gr / *gc / *object. */
static enum ll_status structured_outputs(const cJSON *so, const cJSON **gj, const cJSON **gr,
                                         const cJSON **gc, bool *object, struct oai_error *e)
{
    if (!cJSON_IsObject(so))
        return wrong_type(e, "structured_outputs", "an object", so);
    enum ll_status s = only_keys(so, (const char *const[]){"json", "regex", "choice",
                                                           "json_object", "disable_fallback",
                                                           "disable_any_whitespace",
                                                           "disable_additional_properties",
                                                           NULL},
                                 "structured_outputs", e);
    if (s != LL_OK)
        return s; /* grammar, structural_tag, whitespace_pattern, ... */
    static const char *const opts[] = {"disable_fallback", "disable_any_whitespace",
                                       "disable_additional_properties"};
    for (int i = 0; i < 3; i++) {
        const cJSON *o = ll_json_member(so, opts[i]);
        char p[64];
        snprintf(p, sizeof p, "structured_outputs.%s", opts[i]);
        if (o && !cJSON_IsBool(o))
            return wrong_type(e, p, "a boolean", o);
        if (i > 0 && cJSON_IsTrue(o)) /* (no fallback exists: that one is moot) */
            return oai_error_set(e, LL_EUNSUPPORTED, p, "unsupported_parameter",
                                 "'%s' true is not supported (generated JSON keeps whitespace "
                                 "to one space or a newline and 20 spaces or tabs, and adds no "
                                 "property beside listed ones)", p);
    }
    const cJSON *jo = ll_json_member(so, "json_object");
    if (jo && !cJSON_IsBool(jo))
        return wrong_type(e, "structured_outputs.json_object", "a boolean", jo);
    *gj = ll_json_member(so, "json");
    *gr = ll_json_member(so, "regex");
    *gc = ll_json_member(so, "choice");
    *object = cJSON_IsTrue(jo);
    if (!!*gj + !!*gr + !!*gc + *object != 1)
        return oai_error_set(e, LL_EINVAL, "structured_outputs", "invalid_value",
                             "'structured_outputs' takes one of json, regex, choice and "
                             "json_object (true)");
    return LL_OK;
}

/* response_format {type: text | json_object | json_schema {name, description, schema,
 * strict}}, or vLLM's guided_json (a schema, as an object or as JSON text), guided_regex,
 * guided_choice, or structured_outputs (the same, newer): at most one of them constrains the
 * output. */
static enum ll_status parse_response_format(const cJSON *root, struct oai_request *r,
                                            struct oai_error *e)
{
    const cJSON *rf = ll_json_member(root, "response_format");
    const cJSON *gj = ll_json_member(root, "guided_json");
    const cJSON *gr = ll_json_member(root, "guided_regex");
    const cJSON *gc = ll_json_member(root, "guided_choice");
    const cJSON *so = ll_json_member(root, "structured_outputs");
    const cJSON *rft = cJSON_IsObject(rf) ? ll_json_member(rf, "type") : NULL;
    const bool rf_constrains = rf && !(cJSON_IsString(rft) && !strcmp(rft->valuestring, "text"));
    if (rf_constrains + !!gj + !!gr + !!gc + !!so > 1)
        return oai_error_set(e, LL_EINVAL, so ? "structured_outputs" : gc ? "guided_choice"
                                           : gr                       ? "guided_regex"
                                                                      : "guided_json",
                             "invalid_value", "give one of response_format, guided_json, "
                             "guided_regex, guided_choice and structured_outputs, not several");
    bool so_object = false;
    enum ll_status s;
    if (so && (s = structured_outputs(so, &gj, &gr, &gc, &so_object, e)) != LL_OK)
        return s;
    if (gr || gc)
        return guided_text(gr, gc, so != NULL, r, e);
    const char *gj_name = so ? "structured_outputs.json" : "guided_json";
    const cJSON *schema = NULL;
    const char *where = NULL;
    bool json = so_object;
    if (rf) {
        if (!cJSON_IsObject(rf))
            return wrong_type(e, "response_format", "an object", rf);
        const cJSON *type = ll_json_member(rf, "type");
        if (!type)
            return oai_error_set(e, LL_EINVAL, "response_format.type",
                                 "missing_required_parameter", "'response_format.type' is "
                                 "required");
        if (!cJSON_IsString(type))
            return wrong_type(e, "response_format.type", "a string", type);
        const char *t = type->valuestring;
        if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
            if ((s = only_keys(rf, (const char *const[]){"type", NULL}, "response_format", e)))
                return s;
            json = t[0] == 'j';
        } else if (!strcmp(t, "json_schema")) {
            if ((s = only_keys(rf, (const char *const[]){"type", "json_schema", NULL},
                               "response_format", e)))
                return s;
            const cJSON *js = ll_json_member(rf, "json_schema");
            if (!js)
                return oai_error_set(e, LL_EINVAL, "response_format.json_schema",
                                     "missing_required_parameter",
                                     "'response_format.json_schema' is required for type "
                                     "json_schema");
            if (!cJSON_IsObject(js))
                return wrong_type(e, "response_format.json_schema", "an object", js);
            if ((s = only_keys(js, (const char *const[]){"name", "description", "schema",
                                                         "strict", NULL},
                               "response_format.json_schema", e)))
                return s;
            const cJSON *name = ll_json_member(js, "name"), *st = ll_json_member(js, "strict");
            const cJSON *desc = ll_json_member(js, "description");
            if (name && !cJSON_IsString(name))
                return wrong_type(e, "response_format.json_schema.name", "a string", name);
            if (desc && !cJSON_IsString(desc))
                return wrong_type(e, "response_format.json_schema.description", "a string",
                                  desc);
            if (st && !cJSON_IsBool(st))
                return wrong_type(e, "response_format.json_schema.strict", "a boolean", st);
            schema = ll_json_member(js, "schema");
            if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
                return wrong_type(e, "response_format.json_schema.schema", "an object",
                                  schema);
            where = "response_format.json_schema.schema";
            json = true;
        } else {
            return oai_error_set(e, LL_EINVAL, "response_format.type", "invalid_value",
                                 "'response_format.type' must be text, json_object or "
                                 "json_schema, not '%.40s'", t);
        }
    }
    cJSON *parsed = NULL;
    if (gj) {
        if (json)
            return oai_error_set(e, LL_EINVAL, gj_name, "invalid_value",
                                 "give response_format or %s, not both", gj_name);
        if (cJSON_IsString(gj)) {
            struct ll_err err = {0};
            if (ll_json_parse(&parsed, gj->valuestring, strlen(gj->valuestring), gj_name,
                              &err) != LL_OK)
                return oai_error_set(e, LL_EINVAL, gj_name, "invalid_value", "%s", err.msg);
            gj = parsed;
        }
        if (!cJSON_IsObject(gj) && !cJSON_IsBool(gj)) {
            cJSON_Delete(parsed);
            return wrong_type(e, gj_name, "a JSON Schema (an object or its JSON text)", gj);
        }
        schema = gj;
        where = gj_name;
        json = true;
    }
    s = json ? format_grammar(schema, where ? where : "response_format", &r->grammar, e) : LL_OK;
    cJSON_Delete(parsed);
    return s;
}

/* ---- tools ---- */

static bool tool_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 64)
        return false;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') ||
              *n == '_' || *n == '-'))
            return false;
    return true;
}

/* One function definition {name, description?, parameters?, strict?} into out's list. */
static enum ll_status add_function(const cJSON *f, const char *param, cJSON *out,
                                   struct oai_error *e)
{
    char p[128];
    if (!cJSON_IsObject(f))
        return f ? wrong_type(e, param, "an object", f)
                 : oai_error_set(e, LL_EINVAL, param, "missing_required_parameter",
                                 "'%s' is required", param);
    enum ll_status s = only_keys(f, (const char *const[]){"name", "description", "parameters",
                                                          "strict", NULL}, param, e);
    if (s != LL_OK)
        return s;
    const cJSON *name = ll_json_member(f, "name"), *desc = ll_json_member(f, "description");
    const cJSON *params = ll_json_member(f, "parameters"), *strict = ll_json_member(f, "strict");
    snprintf(p, sizeof p, "%s.name", param);
    if (!name)
        return oai_error_set(e, LL_EINVAL, p, "missing_required_parameter", "'%s' is required",
                             p);
    if (!cJSON_IsString(name))
        return wrong_type(e, p, "a string", name);
    if (!tool_name_ok(name->valuestring))
        return oai_error_set(e, LL_EINVAL, p, "invalid_value", "'%s' must be 1 to 64 letters, "
                             "digits, '_' or '-', got '%.80s'", p, name->valuestring);
    const cJSON *t;
    cJSON_ArrayForEach(t, out) {
        const cJSON *fn = ll_json_member(t, "function");
        if (!strcmp(ll_json_member(fn, "name")->valuestring, name->valuestring))
            return oai_error_set(e, LL_EINVAL, p, "invalid_value",
                                 "two tools are named '%s'", name->valuestring);
    }
    snprintf(p, sizeof p, "%s.description", param);
    if (desc && !cJSON_IsString(desc))
        return wrong_type(e, p, "a string", desc);
    snprintf(p, sizeof p, "%s.parameters", param);
    if (params && !cJSON_IsObject(params))
        return wrong_type(e, p, "an object (a JSON Schema)", params);
    snprintf(p, sizeof p, "%s.strict", param);
    if (strict && !cJSON_IsBool(strict))
        return wrong_type(e, p, "a boolean", strict);
    cJSON *tool = cJSON_CreateObject(), *fn = cJSON_Duplicate(f, true);
    if (!tool || !fn || !cJSON_AddStringToObject(tool, "type", "function") ||
        !cJSON_AddItemToObject(tool, "function", fn)) {
        cJSON_Delete(tool);
        cJSON_Delete(fn);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    static const char *const optional[] = {"description", "parameters", "strict"};
    for (size_t i = 0; i < sizeof optional / sizeof *optional; i++) /* nulls are absent */
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(fn, optional[i])))
            cJSON_DeleteItemFromObjectCaseSensitive(fn, optional[i]);
    cJSON_AddItemToArray(out, tool);
    return LL_OK;
}

static enum ll_status parse_tool_choice(const cJSON *tc, const char *param, bool legacy,
                                        struct oai_request *r, struct oai_error *e)
{
    if (cJSON_IsString(tc)) {
        const char *v = tc->valuestring;
        if (!strcmp(v, "none"))
            r->tool_choice = OAI_TOOL_NONE;
        else if (!strcmp(v, "auto"))
            r->tool_choice = OAI_TOOL_AUTO;
        else if (!strcmp(v, "required") && !legacy)
            r->tool_choice = OAI_TOOL_REQUIRED;
        else
            return oai_error_set(e, LL_EINVAL, param, "invalid_value", "'%s' must be %s or an "
                                 "object naming a function, not '%.40s'", param,
                                 legacy ? "none, auto" : "none, auto, required", v);
        return LL_OK;
    }
    if (!cJSON_IsObject(tc))
        return wrong_type(e, param, "a string or an object", tc);
    const cJSON *name;
    char p[96];
    if (legacy) { /* {"name": ...} */
        name = ll_json_member(tc, "name");
        snprintf(p, sizeof p, "%s.name", param);
    } else {      /* {"type": "function", "function": {"name": ...}} */
        const cJSON *type = ll_json_member(tc, "type"), *fn = ll_json_member(tc, "function");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return oai_error_set(e, LL_EINVAL, "tool_choice.type", "invalid_value",
                                 "'tool_choice.type' must be \"function\"");
        if (fn && !cJSON_IsObject(fn))
            return wrong_type(e, "tool_choice.function", "an object", fn);
        name = ll_json_member(fn, "name");
        snprintf(p, sizeof p, "%s.function.name", param);
    }
    if (!cJSON_IsString(name))
        return oai_error_set(e, name ? LL_ETYPE : LL_EINVAL, p,
                             name ? "invalid_type" : "missing_required_parameter",
                             "'%s' must be the name of a function", p);
    const cJSON *t;
    bool found = false;
    cJSON_ArrayForEach(t, r->tools)
        found |= !strcmp(ll_json_member(ll_json_member(t, "function"), "name")->valuestring,
                         name->valuestring);
    if (!found)
        return oai_error_set(e, LL_EINVAL, p, "invalid_value", "'%s': there is no function "
                             "named '%.80s' in %s", p, name->valuestring,
                             legacy ? "functions" : "tools");
    if (!(r->tool_choice_name = strdup(name->valuestring)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    r->tool_choice = OAI_TOOL_NAMED;
    return LL_OK;
}

/* tools, tool_choice, parallel_tool_calls, or the legacy functions, function_call. */
static enum ll_status parse_tools(const cJSON *root, struct oai_request *r, struct oai_error *e)
{
    const cJSON *tools = ll_json_member(root, "tools"), *fns = ll_json_member(root, "functions");
    const cJSON *tc = ll_json_member(root, "tool_choice");
    const cJSON *fc = ll_json_member(root, "function_call");
    if (tools && fns)
        return oai_error_set(e, LL_EINVAL, "functions", "invalid_value",
                             "give tools or the legacy functions, not both");
    if ((tc && fns) || (fc && tools))
        return oai_error_set(e, LL_EINVAL, tc ? "tool_choice" : "function_call", "invalid_value",
                             "tool_choice goes with tools, function_call with functions");
    bool legacy = fns || fc;
    const cJSON *list = legacy ? fns : tools;
    const char *lname = legacy ? "functions" : "tools";
    r->parallel_tool_calls = !legacy;
    r->legacy_functions = legacy;
    enum ll_status s = opt_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e);
    if (s != LL_OK)
        return s;
    if (list && !cJSON_IsArray(list))
        return wrong_type(e, lname, "an array", list);
    if (cJSON_GetArraySize(list) > 0) {
        if (!(r->tools = cJSON_CreateArray()))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, list) {
            char p[64];
            snprintf(p, sizeof p, "%s[%d]", lname, i++);
            if (!legacy) {
                if (!cJSON_IsObject(t))
                    return wrong_type(e, p, "an object", t);
                if ((s = only_keys(t, (const char *const[]){"type", "function", NULL}, p, e)))
                    return s;
                const cJSON *type = ll_json_member(t, "type");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
                    return oai_error_set(e, LL_EUNSUPPORTED, p, "unsupported_parameter",
                                         "'%s.type' must be \"function\" (the only tool type "
                                         "this server runs)", p);
                char fp[80];
                snprintf(fp, sizeof fp, "%s.function", p);
                s = add_function(ll_json_member(t, "function"), fp, r->tools, e);
            } else {
                s = add_function(t, p, r->tools, e);
            }
            if (s != LL_OK)
                return s;
        }
        r->n_tools = i;
    }
    const cJSON *choice = legacy ? fc : tc;
    r->tool_choice = OAI_TOOL_AUTO;
    if (choice && (s = parse_tool_choice(choice, legacy ? "function_call" : "tool_choice", legacy,
                                         r, e)) != LL_OK)
        return s;
    if (!r->tools && (r->tool_choice == OAI_TOOL_REQUIRED || r->tool_choice == OAI_TOOL_NAMED))
        return oai_error_set(e, LL_EINVAL, legacy ? "function_call" : "tool_choice",
                             "invalid_value", "'%s' asks for a call, but no %s are given",
                             legacy ? "function_call" : "tool_choice", lname);
    if (r->tools && r->grammar && r->tool_choice != OAI_TOOL_NONE)
        return oai_error_set(e, LL_EUNSUPPORTED, "response_format", "unsupported_parameter",
                             "response_format (or guided_json, guided_regex, guided_choice, "
                             "structured_outputs) together with tools is not supported (unless "
                             "tool_choice is none)");
    return LL_OK;
}

/* ---- the fields this server knows ---- */

static const char *const common_fields[] = {
    "model", "stream", "stream_options", "max_tokens", "n", "temperature", "top_p", "top_k",
    "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "seed",
    "stop", "stop_token_ids", "logit_bias", "logprobs", "ignore_eos", "skip_special_tokens",
    "response_format", "guided_json", "guided_regex", "guided_choice", "structured_outputs",
    "session_id",
    "cache_prompt", "reuse_prefix", NULL};
static const char *const chat_fields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt",
    "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls", "functions",
    "function_call", NULL};
static const char *const completion_fields[] = {"prompt", "echo", "suffix", "best_of", NULL};
/* OpenAI's hints: accepted with their types checked, no effect */
static const char *const hint_strings[] = {"user", "service_tier", "reasoning_effort",
                                           "prompt_cache_key", "safety_identifier", NULL};

static bool listed(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i]))
            return true;
    return false;
}

/* The bodies of the routes that are not generation requests (/v1/embeddings, /tokenize): any
 * non-null field but `known` is refused, naming it and the route. */
static enum ll_status route_fields(const cJSON *root, const char *const *known,
                                   const char *route, struct oai_error *e)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, root)
        if (!cJSON_IsNull(k) && !listed(k->string, known))
            return oai_error_set(e, LL_EUNSUPPORTED, k->string, "unsupported_parameter",
                                 "'%.60s' is not supported by %s", k->string, route);
    return LL_OK;
}

/* Refuse every non-null field of root this server does not implement; check the hints' types.
 * `extra` (may be NULL) lists more allowed names (batch's "id"). */
static const char *const responses_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
    "max_output_tokens", "temperature", "top_p", "stream", "previous_response_id", "reasoning",
    "include", "truncation", NULL};

static enum ll_status check_fields(const cJSON *root, enum oai_kind kind,
                                   const char *const *extra, struct oai_error *e)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, root) {
        const char *n = k->string;
        if (cJSON_IsNull(k) || (kind != OAI_RESPONSES && listed(n, common_fields)) ||
            listed(n, kind == OAI_CHAT       ? chat_fields
                      : kind == OAI_RESPONSES ? responses_fields
                                              : completion_fields) ||
            (extra && listed(n, extra)))
            continue;
        if (listed(n, hint_strings)) {
            if (!cJSON_IsString(k))
                return wrong_type(e, n, "a string", k);
            continue;
        }
        if (!strcmp(n, "metadata")) {
            if (!cJSON_IsObject(k))
                return wrong_type(e, n, "an object", k);
            continue;
        }
        if (!strcmp(n, "store")) {
            if (!cJSON_IsBool(k))
                return wrong_type(e, n, "a boolean", k);
            continue;
        }
        const char *why = "";
        if (!strncmp(n, "guided_", 7) || !strcmp(n, "grammar") || !strcmp(n, "json_schema") ||
            !strcmp(n, "regex"))
            why = " (constrained decoding takes response_format json_object / json_schema, "
                  "guided_json, guided_regex, guided_choice or structured_outputs)";
        return oai_error_set(e, LL_EUNSUPPORTED, n, "unsupported_parameter",
                             "'%.60s' is not supported by this server%s", n, why);
    }
    return LL_OK;
}

/* ---- the remaining fields ---- */

/* session_id (sessions.h checks its form) and the prefix-cache switch: cache_prompt
 * (llama.cpp's name) or reuse_prefix, default true; false: this request neither takes from nor
 * adds to the prefix cache. Both given and different is refused. */
static enum ll_status parse_session(const cJSON *root, struct oai_request *r, struct oai_error *e)
{
    enum ll_status s;
    bool cp = true, rp = true;
    if ((s = opt_string(root, "session_id", &r->session_id, e)) != LL_OK ||
        (s = opt_bool(root, "cache_prompt", &cp, e)) != LL_OK ||
        (s = opt_bool(root, "reuse_prefix", &rp, e)) != LL_OK)
        return s;
    if (ll_json_member(root, "cache_prompt") && ll_json_member(root, "reuse_prefix") && cp != rp)
        return oai_error_set(e, LL_EINVAL, "reuse_prefix", "invalid_value",
                             "'cache_prompt' and 'reuse_prefix' disagree");
    r->no_cache = !cp || !rp;
    return LL_OK;
}

static enum ll_status parse_stop(const cJSON *root, struct oai_request *r, struct oai_error *e)
{
    const cJSON *v = ll_json_member(root, "stop");
    if (!v)
        return LL_OK;
    if (!cJSON_IsString(v) && !cJSON_IsArray(v))
        return wrong_type(e, "stop", "a string or an array of strings", v);
    int cnt = cJSON_IsString(v) ? 1 : cJSON_GetArraySize(v);
    if (cnt > ENGINE_MAX_STOP_STRINGS)
        return oai_error_set(e, LL_EINVAL, "stop", "invalid_value",
                             "'stop' may hold at most %d strings, got %d",
                             ENGINE_MAX_STOP_STRINGS, cnt);
    if (cnt == 0)
        return LL_OK;
    if (!(r->stop = calloc((size_t)cnt, sizeof *r->stop)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    const cJSON *x = cJSON_IsString(v) ? v : v->child;
    for (int i = 0; i < cnt; i++, x = x->next) {
        char param[32];
        snprintf(param, sizeof param, "stop[%d]", i);
        if (!cJSON_IsString(x))
            return wrong_type(e, param, "a string", x);
        size_t l = strlen(x->valuestring);
        if (l == 0 || l > ENGINE_MAX_STOP_LEN)
            return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                 "'%s' must be 1 to %d bytes long, got %zu", param,
                                 ENGINE_MAX_STOP_LEN, l);
        if (!(r->stop[i] = strdup(x->valuestring)))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        r->n_stop = i + 1;
    }
    return LL_OK;
}

static enum ll_status parse_stop_ids(const cJSON *root, struct oai_request *r,
                                     struct oai_error *e)
{
    const cJSON *v = ll_json_member(root, "stop_token_ids");
    if (!v)
        return LL_OK;
    if (!cJSON_IsArray(v))
        return wrong_type(e, "stop_token_ids", "an array of token ids", v);
    int cnt = cJSON_GetArraySize(v);
    if (cnt > ENGINE_MAX_STOP_IDS)
        return oai_error_set(e, LL_EINVAL, "stop_token_ids", "invalid_value",
                             "'stop_token_ids' may hold at most %d ids, got %d",
                             ENGINE_MAX_STOP_IDS, cnt);
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        long long id;
        if (!ll_json_is_int(x, 0, INT32_MAX, &id))
            return oai_error_set(e, LL_EINVAL, "stop_token_ids", "invalid_value",
                                 "'stop_token_ids[%d]' must be a token id (an integer >= 0)",
                                 r->n_stop_token_ids);
        r->stop_token_ids[r->n_stop_token_ids++] = (int32_t)id;
    }
    return LL_OK;
}

static enum ll_status parse_logit_bias(const cJSON *root, struct oai_request *r,
                                       struct oai_error *e)
{
    const cJSON *v = ll_json_member(root, "logit_bias");
    if (!v)
        return LL_OK;
    if (!cJSON_IsObject(v))
        return wrong_type(e, "logit_bias", "an object mapping token ids to numbers", v);
    int cnt = cJSON_GetArraySize(v);
    if (cnt > ENGINE_MAX_LOGIT_BIAS)
        return oai_error_set(e, LL_EINVAL, "logit_bias", "invalid_value",
                             "'logit_bias' may hold at most %d entries, got %d",
                             ENGINE_MAX_LOGIT_BIAS, cnt);
    if (cnt && !(r->logit_bias = calloc((size_t)cnt, sizeof *r->logit_bias)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        const char *k = x->string;
        char *end;
        long long id = strtoll(k, &end, 10);
        if (!k[0] || *end || k[0] == '-' || k[0] == '+' || k[0] == ' ' || id > INT32_MAX)
            return oai_error_set(e, LL_EINVAL, "logit_bias", "invalid_value",
                                 "'logit_bias' keys must be token ids, got '%.40s'", k);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < -OAI_MAX_BIAS ||
            x->valuedouble > OAI_MAX_BIAS)
            return oai_error_set(e, LL_EINVAL, "logit_bias", "invalid_value",
                                 "'logit_bias[\"%.20s\"]' must be a number from %g to %g", k,
                                 -OAI_MAX_BIAS, OAI_MAX_BIAS);
        r->logit_bias[r->n_logit_bias].id = (int32_t)id;
        r->logit_bias[r->n_logit_bias++].bias = (float)x->valuedouble;
    }
    return LL_OK;
}

static enum ll_status parse_logprobs(const cJSON *root, struct oai_request *r,
                                     struct oai_error *e)
{
    long long k = 0;
    enum ll_status s;
    if (r->kind == OAI_COMPLETION) { /* legacy: logprobs is the number of alternatives */
        bool has = false;
        if ((s = opt_int(root, "logprobs", 0, OAI_MAX_COMPLETION_LOGPROBS, &k, &has, e)) != LL_OK)
            return s;
        r->logprobs = has;
        r->top_logprobs = (int)k;
        return LL_OK;
    }
    if ((s = opt_bool(root, "logprobs", &r->logprobs, e)) != LL_OK)
        return s;
    bool has = false;
    if ((s = opt_int(root, "top_logprobs", 0, SAMPLER_MAX_TOP_LOGPROBS, &k, &has, e)) != LL_OK)
        return s;
    if (has && !r->logprobs)
        return oai_error_set(e, LL_EINVAL, "top_logprobs", "invalid_value",
                             "'top_logprobs' needs 'logprobs' set to true");
    r->top_logprobs = (int)k;
    return LL_OK;
}

static enum ll_status parse_fields(const cJSON *root, struct oai_request *r, struct oai_error *e)
{
    enum ll_status s;
    long long v;
    bool has;
    if ((s = opt_string(root, "model", &r->model, e)) != LL_OK ||
        (s = opt_bool(root, "stream", &r->stream, e)) != LL_OK)
        return s;
    const cJSON *so = ll_json_member(root, "stream_options");
    if (so && !cJSON_IsObject(so))
        return wrong_type(e, "stream_options", "an object", so);
    if (so) {
        const cJSON *iu = ll_json_member(so, "include_usage");
        if (iu && !cJSON_IsBool(iu))
            return wrong_type(e, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = cJSON_IsTrue(iu);
    }
    /* max_completion_tokens replaces max_tokens in the chat API; either is accepted */
    const char *mt = ll_json_member(root, "max_completion_tokens") ? "max_completion_tokens"
                                                            : "max_tokens";
    v = 0;
    has = false;
    if ((s = opt_int(root, mt, 1, INT32_MAX, &v, &has, e)) != LL_OK)
        return s;
    r->max_tokens = (int)v;
    v = 1;
    if ((s = opt_int(root, "n", 1, OAI_MAX_N, &v, NULL, e)) != LL_OK)
        return s;
    r->n = (int)v;
    struct gen_settings *g = &r->sampling;
    if ((s = opt_number(root, "temperature", 0, GEN_TEMPERATURE_MAX, false, &g->temperature,
                        &g->has_temperature, e)) != LL_OK ||
        (s = opt_number(root, "top_p", 0, 1, true, &g->top_p, &g->has_top_p, e)) != LL_OK ||
        (s = opt_number(root, "min_p", 0, 1, false, &g->min_p, &g->has_min_p, e)) != LL_OK ||
        (s = opt_number(root, "presence_penalty", -GEN_PENALTY_MAX, GEN_PENALTY_MAX, false,
                        &g->presence_penalty, NULL, e)) != LL_OK ||
        (s = opt_number(root, "frequency_penalty", -GEN_PENALTY_MAX, GEN_PENALTY_MAX, false,
                        &g->frequency_penalty, NULL, e)) != LL_OK ||
        (s = opt_number(root, "repetition_penalty", 0, GEN_REPETITION_PENALTY_MAX, true,
                        &g->repetition_penalty, &g->has_repetition_penalty, e)) != LL_OK)
        return s;
    v = 0;
    if ((s = opt_int(root, "min_tokens", 0, INT32_MAX, &v, NULL, e)) != LL_OK)
        return s;
    r->min_tokens = (int)v;
    if (r->max_tokens > 0 && r->min_tokens > r->max_tokens)
        return oai_error_set(e, LL_EINVAL, "min_tokens", "invalid_value",
                             "'min_tokens' (%d) must not exceed '%s' (%d)", r->min_tokens, mt,
                             r->max_tokens);
    v = 0;
    if ((s = opt_int(root, "top_k", -1, INT32_MAX, &v, &g->has_top_k, e)) != LL_OK)
        return s;
    g->top_k = (int)v;
    v = 0;
    /* doubles hold integers exactly up to 2^53; larger seeds are still deterministic */
    if ((s = opt_int(root, "seed", INT64_MIN, INT64_MAX, &v, &g->has_seed, e)) != LL_OK)
        return s;
    g->seed = (uint64_t)v;
    if ((s = parse_stop(root, r, e)) != LL_OK || (s = parse_stop_ids(root, r, e)) != LL_OK ||
        (s = parse_logit_bias(root, r, e)) != LL_OK || (s = parse_logprobs(root, r, e)) != LL_OK ||
        (s = opt_bool(root, "ignore_eos", &r->ignore_eos, e)) != LL_OK ||
        (s = opt_bool(root, "skip_special_tokens", &r->skip_special_tokens, e)) != LL_OK ||
        (s = opt_string(root, "user", &r->user, e)) != LL_OK ||
        (s = parse_session(root, r, e)) != LL_OK)
        return s;
    if (r->kind == OAI_COMPLETION) {
        if ((s = opt_bool(root, "echo", &r->echo, e)) != LL_OK)
            return s;
        const cJSON *suffix = ll_json_member(root, "suffix");
        if (suffix && !cJSON_IsString(suffix))
            return wrong_type(e, "suffix", "a string", suffix);
        if (suffix && suffix->valuestring[0])
            return oai_error_set(e, LL_EUNSUPPORTED, "suffix", "unsupported_parameter",
                                 "'suffix' is not supported");
        long long best_of = 1;
        if ((s = opt_int(root, "best_of", 1, OAI_MAX_N, &best_of, NULL, e)) != LL_OK)
            return s;
        if (best_of != 1)
            return oai_error_set(e, LL_EUNSUPPORTED, "best_of", "unsupported_parameter",
                                 "'best_of' other than 1 is not supported");
    }
    if ((s = parse_response_format(root, r, e)) != LL_OK)
        return s;
    if (r->kind == OAI_CHAT && (s = parse_tools(root, r, e)) != LL_OK)
        return s;
    return LL_OK;
}

static void request_init(struct oai_request *r, enum oai_kind kind)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n = 1;
    r->skip_special_tokens = true;
}

/* The request of r->kind in the object root; on error *r is left empty. */
static enum ll_status parse_request(struct oai_request *r, const cJSON *root,
                                    const char *const *extra, struct oai_error *e)
{
    enum oai_kind kind = r->kind;
    enum ll_status s = check_fields(root, kind, extra, e);
    if (s == LL_OK)
        s = parse_fields(root, r, e);
    if (s == LL_OK)
        s = kind == OAI_CHAT ? chat_context(root, &r->chat_context, e)
                             : parse_prompts(root, "prompt", OAI_MAX_PROMPTS, false, r, e);
    if (s == LL_OK && (long long)r->n * (r->n_prompts ? r->n_prompts : 1) > OAI_MAX_N)
        s = oai_error_set(e, LL_EINVAL, "n", "invalid_value",
                          "'n' times the number of prompts may be at most %d", OAI_MAX_N);
    if (s != LL_OK) {
        oai_request_free(r);
        request_init(r, kind);
    }
    return s;
}

enum ll_status oai_request_parse(struct oai_request *r, enum oai_kind kind, const char *body,
                                 size_t len, struct oai_error *e)
{
    request_init(r, kind);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    s = parse_request(r, root, NULL, e);
    cJSON_Delete(root);
    return s;
}

enum ll_status oai_embeddings_parse(struct oai_request *r, const char *body, size_t len,
                                    struct oai_error *e)
{
    request_init(r, OAI_EMBEDDING);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    static const char *const known[] = {"model", "input", "encoding_format", "dimensions",
                                        "user", "cache_prompt", "reuse_prefix", NULL};
    char *format = NULL;
    if ((s = route_fields(root, known, "/v1/embeddings", e)) != LL_OK)
        goto out;
    long long dims = 0;
    if ((s = opt_string(root, "model", &r->model, e)) != LL_OK ||
        (s = opt_string(root, "user", &r->user, e)) != LL_OK ||
        (s = opt_string(root, "encoding_format", &format, e)) != LL_OK ||
        (s = opt_int(root, "dimensions", 1, 1 << 20, &dims, NULL, e)) != LL_OK ||
        (s = parse_session(root, r, e)) != LL_OK)
        goto out;
    r->dimensions = (int)dims;
    if (format && !strcmp(format, "base64"))
        r->embed_base64 = true;
    else if (format && strcmp(format, "float"))
        s = oai_error_set(e, LL_EINVAL, "encoding_format", "invalid_value",
                          "'encoding_format' must be \"float\" or \"base64\", got \"%.40s\"",
                          format);
    if (s == LL_OK)
        s = parse_prompts(root, "input", OAI_MAX_INPUTS, true, r, e);
out:
    free(format);
    if (s != LL_OK) {
        oai_request_free(r);
        request_init(r, OAI_EMBEDDING);
    }
    cJSON_Delete(root);
    return s;
}

/* Rerank's documents: strings, or objects {"text": string}, each non-empty. */
static enum ll_status rerank_documents(const cJSON *root, struct oai_request *r,
                                       struct oai_error *e)
{
    const cJSON *d = ll_json_member(root, "documents");
    if (!d)
        return oai_error_set(e, LL_EINVAL, "documents", "missing_required_parameter",
                             "'documents' is required");
    if (!cJSON_IsArray(d))
        return wrong_type(e, "documents", "an array of strings", d);
    int cnt = cJSON_GetArraySize(d);
    if (cnt == 0 || cnt > OAI_MAX_INPUTS)
        return oai_error_set(e, LL_EINVAL, "documents", "invalid_value",
                             "'documents' must hold 1 to %d documents, got %d", OAI_MAX_INPUTS,
                             cnt);
    if (!(r->prompts = calloc((size_t)cnt, sizeof *r->prompts)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, d) {
        char param[40];
        snprintf(param, sizeof param, "documents[%d]", r->n_prompts);
        const cJSON *t = x;
        if (cJSON_IsObject(x)) {
            static const char *const keys[] = {"text", NULL};
            enum ll_status s = only_keys(x, keys, param, e);
            if (s != LL_OK)
                return s;
            t = ll_json_member(x, "text");
        }
        if (!cJSON_IsString(t))
            return oai_error_set(e, LL_ETYPE, param, "invalid_type",
                                 "'%s' must be a string or an object {\"text\": string}, not %s",
                                 param, ll_json_type_name(x));
        if (!*t->valuestring)
            return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                 "'%s' must not be empty", param);
        struct oai_prompt *q = &r->prompts[r->n_prompts++];
        if (!(q->text = strdup(t->valuestring)))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        q->text_len = strlen(q->text);
    }
    return LL_OK;
}

enum ll_status oai_rerank_parse(struct oai_request *r, const char *body, size_t len,
                                const char *route, struct oai_error *e)
{
    request_init(r, OAI_RERANK);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    static const char *const known[] = {"model", "query", "documents", "top_n",
                                        "return_documents", "user", "instruction",
                                        "cache_prompt", "reuse_prefix", NULL};
    long long top_n = 0;
    if ((s = route_fields(root, known, route, e)) != LL_OK ||
        (s = opt_string(root, "model", &r->model, e)) != LL_OK ||
        (s = opt_string(root, "user", &r->user, e)) != LL_OK ||
        (s = opt_string(root, "query", &r->query, e)) != LL_OK ||
        (s = opt_string(root, "instruction", &r->instruction, e)) != LL_OK ||
        (s = opt_int(root, "top_n", 1, INT32_MAX, &top_n, NULL, e)) != LL_OK ||
        (s = opt_bool(root, "return_documents", &r->return_documents, e)) != LL_OK ||
        (s = parse_session(root, r, e)) != LL_OK)
        goto out;
    r->top_n = (int)top_n;
    if (!r->query)
        s = oai_error_set(e, LL_EINVAL, "query", "missing_required_parameter",
                          "'query' is required");
    else if (!*r->query)
        s = oai_error_set(e, LL_EINVAL, "query", "invalid_value", "'query' must not be empty");
    else
        r->query_len = strlen(r->query);
    if (s == LL_OK)
        s = rerank_documents(root, r, e);
out:
    if (s != LL_OK) {
        oai_request_free(r);
        request_init(r, OAI_RERANK);
    }
    cJSON_Delete(root);
    return s;
}

enum ll_status oai_batch_line_parse(struct oai_request *r, cJSON **id, const char *line,
                                    size_t len, struct oai_error *e)
{
    *id = NULL;
    request_init(r, OAI_COMPLETION);
    cJSON *root;
    enum ll_status s = parse_body(&root, line, len, "request", e);
    if (s != LL_OK)
        return s;
    const cJSON *idv = cJSON_GetObjectItemCaseSensitive(root, "id");
    bool chat = ll_json_member(root, "messages") != NULL;
    bool prompt = ll_json_member(root, "prompt") != NULL;
    if (idv && !(*id = cJSON_Duplicate(idv, true)))
        s = oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    else if (ll_json_member(root, "ids"))
        s = oai_error_set(e, LL_EINVAL, "ids", "invalid_value",
                          "'ids' is not a request field: give token ids as \"prompt\": [ids]");
    else if (chat && prompt)
        s = oai_error_set(e, LL_EINVAL, "prompt", "invalid_value",
                          "a line holds 'messages' (a chat request) or 'prompt' (a completions "
                          "request), not both");
    else if (!chat && !prompt)
        s = oai_error_set(e, LL_EINVAL, "messages", "missing_required_parameter",
                          "a line needs 'messages' (a chat request) or 'prompt' (a completions "
                          "request)");
    if (s == LL_OK) {
        r->kind = chat ? OAI_CHAT : OAI_COMPLETION;
        s = parse_request(r, root, (const char *const[]){"id", NULL}, e);
    }
    cJSON_Delete(root);
    return s;
}


/* ---- /v1/responses ---- */

/* Text parts [{type: input_text | output_text | text, text}] or a string → a new cJSON string. */
static enum ll_status parts_text(const cJSON *c, const char *param, cJSON **out,
                                 struct oai_error *e)
{
    if (cJSON_IsString(c)) {
        *out = cJSON_CreateString(c->valuestring);
        return *out ? LL_OK : oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    if (!cJSON_IsArray(c))
        return c ? wrong_type(e, param, "a string or an array of content parts", c)
                 : oai_error_set(e, LL_EINVAL, param, "missing_required_parameter",
                                 "'%s' is required", param);
    struct ll_buf b = {0};
    int k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        char pp[112];
        snprintf(pp, sizeof pp, "%s[%d]", param, k);
        const cJSON *type = ll_json_member(p, "type"), *t = ll_json_member(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type)) {
            ll_buf_free(&b);
            return oai_error_set(e, LL_ETYPE, pp, "invalid_type", "'%s' must be an object with "
                                 "a string 'type'", pp);
        }
        if (strcmp(type->valuestring, "input_text") && strcmp(type->valuestring, "output_text") &&
            strcmp(type->valuestring, "text")) {
            ll_buf_free(&b);
            return oai_error_set(e, LL_EUNSUPPORTED, pp, "unsupported_content",
                                 "'%s': content parts of type '%.40s' are not supported (only "
                                 "input_text, output_text)", pp, type->valuestring);
        }
        if (!cJSON_IsString(t)) {
            ll_buf_free(&b);
            return oai_error_set(e, LL_ETYPE, pp, "invalid_type", "'%s.text' must be a string",
                                 pp);
        }
        if (k++)
            ll_buf_putc(&b, '\n');
        ll_buf_puts(&b, t->valuestring);
    }
    *out = cJSON_CreateString(b.data ? b.data : "");
    bool failed = b.failed;
    ll_buf_free(&b);
    return *out && !failed ? LL_OK : oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
}

static cJSON *new_message(cJSON *list, const char *role)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddItemToArray(list, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* One input item into the message list. */
static enum ll_status input_item(const cJSON *it, const char *what, int i, cJSON *list,
                                 struct oai_error *e)
{
    char param[48];
    snprintf(param, sizeof param, "%s[%d]", what, i);
    if (!cJSON_IsObject(it))
        return wrong_type(e, param, "an object", it);
    const cJSON *type = ll_json_member(it, "type");
    if (type && !cJSON_IsString(type))
        return oai_error_set(e, LL_ETYPE, param, "invalid_type", "'%s.type' must be a string",
                             param);
    const char *t = type ? type->valuestring : "message";
    char sub[80];
    enum ll_status s;
    if (!strcmp(t, "message")) {
        const cJSON *role = ll_json_member(it, "role");
        snprintf(sub, sizeof sub, "%s.role", param);
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") &&
                                      strcmp(role->valuestring, "system") &&
                                      strcmp(role->valuestring, "developer") &&
                                      strcmp(role->valuestring, "assistant")))
            return oai_error_set(e, LL_EINVAL, sub, "invalid_value", "'%s' must be user, system, "
                                 "developer or assistant", sub);
        cJSON *content;
        snprintf(sub, sizeof sub, "%s.content", param);
        if ((s = parts_text(ll_json_member(it, "content"), sub, &content, e)) != LL_OK)
            return s;
        const char *r = role->valuestring;
        cJSON *m = new_message(list, !strcmp(r, "developer") ? "system" : r);
        if (!m || !cJSON_AddItemToObject(m, "content", content)) {
            cJSON_Delete(content);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        return LL_OK;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *id = ll_json_member(it, "call_id"), *name = ll_json_member(it, "name");
        const cJSON *args = ll_json_member(it, "arguments");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
            return oai_error_set(e, LL_EINVAL, param, "invalid_value", "'%s': a function_call "
                                 "needs the strings call_id, name and arguments", param);
        /* calls join the assistant message before them, or make one */
        cJSON *last = cJSON_GetArrayItem(list, cJSON_GetArraySize(list) - 1);
        const cJSON *lr = ll_json_member(last, "role");
        cJSON *m = last && cJSON_IsString(lr) && !strcmp(lr->valuestring, "assistant") ? last
                                                                                       : NULL;
        if (!m && (!(m = new_message(list, "assistant")) || !cJSON_AddNullToObject(m, "content")))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls")))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        if (!call || !fn || !cJSON_AddItemToArray(calls, call) ||
            !cJSON_AddStringToObject(call, "id", id->valuestring) ||
            !cJSON_AddStringToObject(call, "type", "function") ||
            !cJSON_AddItemToObject(call, "function", fn) ||
            !cJSON_AddStringToObject(fn, "name", name->valuestring) ||
            !cJSON_AddStringToObject(fn, "arguments", args->valuestring)) {
            if (!call || !cJSON_GetObjectItem(call, "function"))
                cJSON_Delete(fn);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        return LL_OK;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *id = ll_json_member(it, "call_id");
        if (!cJSON_IsString(id))
            return oai_error_set(e, LL_EINVAL, param, "invalid_value",
                                 "'%s.call_id' must be a string", param);
        cJSON *content;
        snprintf(sub, sizeof sub, "%s.output", param);
        if ((s = parts_text(ll_json_member(it, "output"), sub, &content, e)) != LL_OK)
            return s;
        cJSON *m = new_message(list, "tool");
        if (!m || !cJSON_AddItemToObject(m, "content", content) ||
            !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring)) {
            if (!m || !cJSON_GetObjectItem(m, "content"))
                cJSON_Delete(content);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        return LL_OK;
    }
    if (!strcmp(t, "reasoning")) /* the templates leave past reasoning out of the prompt */
        return LL_OK;
    snprintf(sub, sizeof sub, "%s.type", param);
    return oai_error_set(e, LL_EUNSUPPORTED, sub, "unsupported_parameter",
                         "'%s': input items of type '%.40s' are not supported (message, "
                         "function_call, function_call_output, reasoning)", sub, t);
}

/* text.format: the grammar of a Responses request. */
static enum ll_status responses_format(const cJSON *text, struct oai_request *r,
                                       struct oai_error *e)
{
    if (!text)
        return LL_OK;
    if (!cJSON_IsObject(text))
        return wrong_type(e, "text", "an object", text);
    enum ll_status s = only_keys(text, (const char *const[]){"format", NULL}, "text", e);
    if (s != LL_OK)
        return s;
    const cJSON *f = ll_json_member(text, "format");
    if (!f)
        return LL_OK;
    if (!cJSON_IsObject(f))
        return wrong_type(e, "text.format", "an object", f);
    const cJSON *type = ll_json_member(f, "type");
    if (!cJSON_IsString(type))
        return oai_error_set(e, type ? LL_ETYPE : LL_EINVAL, "text.format.type",
                             type ? "invalid_type" : "missing_required_parameter",
                             "'text.format.type' must be text, json_object or json_schema");
    const char *t = type->valuestring;
    if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
        if ((s = only_keys(f, (const char *const[]){"type", NULL}, "text.format", e)))
            return s;
        return t[0] == 'j' ? format_grammar(NULL, "text.format", &r->grammar, e) : LL_OK;
    }
    if (strcmp(t, "json_schema"))
        return oai_error_set(e, LL_EINVAL, "text.format.type", "invalid_value",
                             "'text.format.type' must be text, json_object or json_schema, not "
                             "'%.40s'", t);
    if ((s = only_keys(f, (const char *const[]){"type", "name", "description", "schema",
                                                "strict", NULL}, "text.format", e)))
        return s;
    const cJSON *schema = ll_json_member(f, "schema"), *st = ll_json_member(f, "strict");
    const cJSON *name = ll_json_member(f, "name");
    if (name && !cJSON_IsString(name))
        return wrong_type(e, "text.format.name", "a string", name);
    if (st && !cJSON_IsBool(st))
        return wrong_type(e, "text.format.strict", "a boolean", st);
    if (!schema)
        return oai_error_set(e, LL_EINVAL, "text.format.schema", "missing_required_parameter",
                             "'text.format.schema' is required for json_schema");
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return wrong_type(e, "text.format.schema", "an object", schema);
    return format_grammar(schema, "text.format.schema", &r->grammar, e);
}

/* tools [{type: "function", name, ...}] → the chat shape; tool_choice. */
static enum ll_status responses_tools(const cJSON *root, struct oai_request *r,
                                      struct oai_error *e)
{
    const cJSON *tools = ll_json_member(root, "tools"), *tc = ll_json_member(root, "tool_choice");
    enum ll_status s;
    r->parallel_tool_calls = true;
    if ((s = opt_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e)) != LL_OK)
        return s;
    if (tools && !cJSON_IsArray(tools))
        return wrong_type(e, "tools", "an array", tools);
    if (cJSON_GetArraySize(tools) > 0) {
        if (!(r->tools = cJSON_CreateArray()))
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            char p[48];
            snprintf(p, sizeof p, "tools[%d]", i++);
            const cJSON *type = ll_json_member(t, "type");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type))
                return oai_error_set(e, LL_ETYPE, p, "invalid_type", "'%s' must be an object "
                                     "with a string 'type'", p);
            if (strcmp(type->valuestring, "function"))
                return oai_error_set(e, LL_EUNSUPPORTED, p, "unsupported_parameter",
                                     "'%s': tools of type '%.40s' are not supported (only "
                                     "function)", p, type->valuestring);
            cJSON *fn = cJSON_Duplicate(t, true);
            if (!fn)
                return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
            cJSON_DeleteItemFromObjectCaseSensitive(fn, "type");
            s = add_function(fn, p, r->tools, e);
            cJSON_Delete(fn);
            if (s != LL_OK)
                return s;
        }
        r->n_tools = i;
    }
    r->tool_choice = OAI_TOOL_AUTO;
    if (cJSON_IsObject(tc)) { /* {type: "function", name} */
        const cJSON *type = ll_json_member(tc, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return oai_error_set(e, LL_EUNSUPPORTED, "tool_choice.type", "unsupported_parameter",
                                 "'tool_choice.type' must be \"function\"");
        cJSON *named = cJSON_CreateObject();
        const cJSON *name = ll_json_member(tc, "name");
        if (!named || (name && !cJSON_AddItemToObject(named, "name",
                                                      cJSON_Duplicate(name, true)))) {
            cJSON_Delete(named);
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        }
        s = parse_tool_choice(named, "tool_choice", true, r, e);
        cJSON_Delete(named);
    } else if (tc) {
        s = cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")
                ? (r->tool_choice = OAI_TOOL_REQUIRED, LL_OK)
                : parse_tool_choice(tc, "tool_choice", true, r, e);
    }
    if (s != LL_OK)
        return s;
    if (!r->tools && (r->tool_choice == OAI_TOOL_REQUIRED || r->tool_choice == OAI_TOOL_NAMED))
        return oai_error_set(e, LL_EINVAL, "tool_choice", "invalid_value",
                             "'tool_choice' asks for a call, but no tools are given");
    if (r->tools && r->grammar && r->tool_choice != OAI_TOOL_NONE)
        return oai_error_set(e, LL_EUNSUPPORTED, "text.format", "unsupported_parameter",
                             "text.format json output together with tools is not supported "
                             "(unless tool_choice is none)");
    return LL_OK;
}

/* What the response object repeats of the request. */
static enum ll_status responses_echo(const cJSON *root, struct oai_request *r,
                                     struct oai_error *e)
{
    cJSON *echo = cJSON_CreateObject();
    static const char *const keep[] = {"instructions", "max_output_tokens", "metadata",
                                       "temperature", "top_p", "text", "tool_choice",
                                       "reasoning", "user", "store", "truncation",
                                       "service_tier", "parallel_tool_calls",
                                       "previous_response_id"};
    for (size_t i = 0; echo && i < sizeof keep / sizeof *keep; i++) {
        const cJSON *v = ll_json_member(root, keep[i]);
        if (v && !cJSON_AddItemToObject(echo, keep[i], cJSON_Duplicate(v, true)))
            goto nomem;
    }
    /* tools in the Responses shape */
    cJSON *tools = echo ? cJSON_AddArrayToObject(echo, "tools") : NULL;
    const cJSON *t;
    cJSON_ArrayForEach(t, r->tools) { /* {"type": "function", name, description, ...} */
        cJSON *one = cJSON_CreateObject();
        if (!one || !cJSON_AddItemToArray(tools, one)) {
            cJSON_Delete(one);
            goto nomem;
        }
        if (!cJSON_AddStringToObject(one, "type", "function"))
            goto nomem;
        const cJSON *k;
        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(t, "function"))
            if (!cJSON_AddItemToObject(one, k->string, cJSON_Duplicate(k, true)))
                goto nomem;
    }
    if (!echo || !tools)
        goto nomem;
    r->resp_echo = echo;
    return LL_OK;
nomem:
    cJSON_Delete(echo);
    return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
}

/* The template's messages of a Responses request: its instructions (a system message), the
 * items of history (a previous response's conversation, or NULL), then its own input items.
 * A request that names a previous response may bring no item of its own (checked once the
 * history is there). */
static enum ll_status responses_messages(struct oai_request *r, const cJSON *history,
                                         struct oai_error *e)
{
    cJSON_Delete(r->chat_context);
    cJSON *ctx = cJSON_CreateObject();
    cJSON *list = ctx ? cJSON_AddArrayToObject(ctx, "messages") : NULL;
    r->chat_context = ctx;
    if (!list || !cJSON_AddTrueToObject(ctx, "add_generation_prompt"))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    cJSON *m;
    if (r->resp_instructions &&
        (!(m = new_message(list, "system")) ||
         !cJSON_AddStringToObject(m, "content", r->resp_instructions)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    enum ll_status s;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, history)
        if ((s = input_item(it, "previous_response_id", i++, list, e)) != LL_OK)
            return s;
    i = 0;
    cJSON_ArrayForEach(it, r->resp_input)
        if ((s = input_item(it, "input", i++, list, e)) != LL_OK)
            return s;
    if (cJSON_GetArraySize(list) == 0 && (history || !r->prev_response_id))
        return oai_error_set(e, LL_EINVAL, "input", "invalid_value",
                             "'input' holds no message");
    return LL_OK;
}

enum ll_status oai_responses_continue(struct oai_request *r, cJSON *history, struct oai_error *e)
{
    if (!cJSON_IsArray(history)) {
        cJSON_Delete(history);
        return oai_error_set(e, LL_EINVAL, "previous_response_id", "invalid_value",
                             "the stored conversation of '%.60s' is not a list of items",
                             r->prev_response_id ? r->prev_response_id : "?");
    }
    enum ll_status s = responses_messages(r, history, e);
    if (s != LL_OK) {
        cJSON_Delete(history);
        return s;
    }
    /* the conversation now: history, then the request's own items */
    cJSON *own = r->resp_input, *it;
    r->resp_input = history;
    while (own && (it = own->child)) {
        cJSON_DetachItemViaPointer(own, it);
        cJSON_AddItemToArray(history, it);
    }
    cJSON_Delete(own);
    return LL_OK;
}

static enum ll_status parse_responses(const cJSON *root, struct oai_request *r,
                                      struct oai_error *e)
{
    enum ll_status s = check_fields(root, OAI_RESPONSES, NULL, e);
    if (s != LL_OK)
        return s;
    long long v = 0;
    bool has = false;
    struct gen_settings *g = &r->sampling;
    if ((s = opt_string(root, "model", &r->model, e)) != LL_OK ||
        (s = opt_bool(root, "stream", &r->stream, e)) != LL_OK ||
        (s = opt_int(root, "max_output_tokens", 1, INT32_MAX, &v, &has, e)) != LL_OK ||
        (s = opt_number(root, "temperature", 0, GEN_TEMPERATURE_MAX, false, &g->temperature,
                        &g->has_temperature, e)) != LL_OK ||
        (s = opt_number(root, "top_p", 0, 1, true, &g->top_p, &g->has_top_p, e)) != LL_OK)
        return s;
    r->max_tokens = (int)v;
    if ((s = opt_string(root, "previous_response_id", &r->prev_response_id, e)) != LL_OK ||
        (s = opt_bool(root, "store", &r->store, e)) != LL_OK)
        return s;
    r->has_store = ll_json_member(root, "store") != NULL;
    if (r->prev_response_id &&
        (!r->prev_response_id[0] || strlen(r->prev_response_id) > OAI_RESPONSE_ID_MAX))
        return oai_error_set(e, LL_EINVAL, "previous_response_id", "invalid_value",
                             "'previous_response_id' must be a response id (1 to %d bytes)",
                             OAI_RESPONSE_ID_MAX);
    const cJSON *reasoning = ll_json_member(root, "reasoning");
    if (reasoning && !cJSON_IsObject(reasoning))
        return wrong_type(e, "reasoning", "an object", reasoning);
    const cJSON *inc = ll_json_member(root, "include");
    if (inc && !cJSON_IsArray(inc))
        return wrong_type(e, "include", "an array", inc);
    if (cJSON_GetArraySize(inc) > 0) {
        const cJSON *x = inc->child;
        return oai_error_set(e, LL_EUNSUPPORTED, "include", "unsupported_parameter",
                             "'include': '%.60s' is not supported (only [])",
                             cJSON_IsString(x) ? x->valuestring : "?");
    }
    const cJSON *tr = ll_json_member(root, "truncation");
    if (tr && (!cJSON_IsString(tr) || strcmp(tr->valuestring, "disabled")))
        return oai_error_set(e, LL_EUNSUPPORTED, "truncation", "unsupported_parameter",
                             "'truncation': only \"disabled\" is supported (a conversation "
                             "longer than the context is refused, not cut)");
    if ((s = responses_format(ll_json_member(root, "text"), r, e)) != LL_OK ||
        (s = responses_tools(root, r, e)) != LL_OK)
        return s;
    /* the conversation */
    const cJSON *input = ll_json_member(root, "input");
    const cJSON *ins = ll_json_member(root, "instructions");
    if (!input)
        return oai_error_set(e, LL_EINVAL, "input", "missing_required_parameter",
                             "'input' is required");
    if (!cJSON_IsString(input) && !cJSON_IsArray(input))
        return wrong_type(e, "input", "a string or an array of items", input);
    if (ins && !cJSON_IsString(ins))
        return wrong_type(e, "instructions", "a string", ins);
    if (ins && !(r->resp_instructions = strdup(ins->valuestring)))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    /* the request's own items, kept for a stored response's conversation (resp_store.h) */
    cJSON *own = cJSON_IsString(input) ? cJSON_CreateArray() : cJSON_Duplicate(input, true);
    r->resp_input = own;
    cJSON *m;
    if (!own || (cJSON_IsString(input) &&
                 (!(m = cJSON_CreateObject()) || !cJSON_AddItemToArray(own, m) ||
                  !cJSON_AddStringToObject(m, "type", "message") ||
                  !cJSON_AddStringToObject(m, "role", "user") ||
                  !cJSON_AddStringToObject(m, "content", input->valuestring))))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    if ((s = responses_messages(r, NULL, e)) != LL_OK)
        return s;
    return responses_echo(root, r, e);
}

enum ll_status oai_responses_parse(struct oai_request *r, const char *body, size_t len,
                                   struct oai_error *e)
{
    request_init(r, OAI_RESPONSES);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    s = parse_responses(root, r, e);
    cJSON_Delete(root);
    if (s != LL_OK) {
        oai_request_free(r);
        request_init(r, OAI_RESPONSES);
    }
    return s;
}

void oai_request_params(const struct oai_request *r, const struct generation_defaults *g,
                        struct engine_params *out)
{
    *out = (struct engine_params){
        .logit_bias = r->logit_bias,
        .n_logit_bias = r->n_logit_bias,
        .max_tokens = r->max_tokens,
        .min_tokens = r->min_tokens,
        .stop_ids = r->stop_token_ids,
        .n_stop_ids = r->n_stop_token_ids,
        .stop = (const char *const *)r->stop,
        .n_stop = r->n_stop,
        .ignore_eos = r->ignore_eos,
        .no_cache = r->no_cache,
        .keep_special = !r->skip_special_tokens,
        .logprobs = r->logprobs,
        .top_logprobs = r->top_logprobs,
        .grammar = r->grammar,
    };
    gen_params_resolve(out, &r->sampling, g);
}

enum ll_status oai_request_check_supported(const struct oai_request *r, struct oai_error *e)
{
    if (r->echo && r->logprobs)
        return oai_error_set(e, LL_EUNSUPPORTED, "echo", "unsupported_parameter",
                             "'echo' together with 'logprobs' is not supported (the prompt's "
                             "logprobs are not computed)");
    return LL_OK;
}

void oai_request_free(struct oai_request *r)
{
    free(r->model);
    free(r->user);
    free(r->session_id);
    free(r->logit_bias);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    cJSON_Delete(r->chat_context);
    grammar_unref(r->grammar);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->resp_echo);
    cJSON_Delete(r->resp_input);
    free(r->resp_instructions);
    free(r->prev_response_id);
    free(r->tool_choice_name);
    free(r->query);
    free(r->instruction);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    memset(r, 0, sizeof *r);
}

/* ---- vLLM's /tokenize and /detokenize ---- */

enum ll_status oai_tokenize_parse(struct oai_tokenize_request *r, const char *body, size_t len,
                                  struct oai_error *e)
{
    memset(r, 0, sizeof *r);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    bool chat = ll_json_member(root, "messages") != NULL;
    r->add_special_tokens = !chat;
    static const char *const known[] = {"model", "prompt", "messages", "add_special_tokens",
                                        "add_generation_prompt", "return_token_strs",
                                        "chat_template_kwargs", "tools", NULL};
    if ((s = route_fields(root, known, "/tokenize", e)) != LL_OK)
        goto out;
    if (chat) {
        struct oai_request tmp;
        request_init(&tmp, OAI_CHAT);
        s = parse_tools(root, &tmp, e);
        r->tools = tmp.tools;
        tmp.tools = NULL;
        oai_request_free(&tmp);
        if (s != LL_OK)
            goto out;
    }
    if ((s = opt_string(root, "model", &r->model, e)) != LL_OK ||
        (s = opt_bool(root, "add_special_tokens", &r->add_special_tokens, e)) != LL_OK ||
        (s = opt_bool(root, "return_token_strs", &r->return_token_strs, e)) != LL_OK)
        goto out;
    if (chat) {
        s = chat_context(root, &r->chat_context, e);
    } else {
        const cJSON *p = ll_json_member(root, "prompt");
        if (!p)
            s = oai_error_set(e, LL_EINVAL, "prompt", "missing_required_parameter",
                              "'prompt' or 'messages' is required");
        else if (!cJSON_IsString(p))
            s = wrong_type(e, "prompt", "a string", p);
        else if (!(r->prompt = strdup(p->valuestring)))
            s = oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        else
            r->prompt_len = strlen(r->prompt);
    }
out:
    cJSON_Delete(root);
    if (s != LL_OK)
        oai_tokenize_free(r);
    return s;
}

enum ll_status oai_detokenize_parse(struct oai_detokenize_request *r, const char *body,
                                    size_t len, struct oai_error *e)
{
    memset(r, 0, sizeof *r);
    cJSON *root;
    enum ll_status s = parse_body(&root, body, len, "request body", e);
    if (s != LL_OK)
        return s;
    const cJSON *t = ll_json_member(root, "tokens");
    if ((s = opt_string(root, "model", &r->model, e)) != LL_OK)
        goto out;
    if (!t)
        s = oai_error_set(e, LL_EINVAL, "tokens", "missing_required_parameter",
                          "'tokens' is required");
    else if (!cJSON_IsArray(t))
        s = wrong_type(e, "tokens", "an array of token ids", t);
    else if (cJSON_GetArraySize(t) == 0)
        r->ids = calloc(1, sizeof *r->ids), s = r->ids ? LL_OK : LL_ENOMEM;
    else
        s = ids_from_array(t, "tokens", &r->ids, &r->n_ids, e);
    if (s == LL_ENOMEM)
        oai_error_set(e, s, NULL, NULL, "out of memory");
out:
    cJSON_Delete(root);
    if (s != LL_OK)
        oai_detokenize_free(r);
    return s;
}

void oai_tokenize_free(struct oai_tokenize_request *r)
{
    free(r->model);
    free(r->prompt);
    cJSON_Delete(r->chat_context);
    cJSON_Delete(r->tools);
    memset(r, 0, sizeof *r);
}

void oai_detokenize_free(struct oai_detokenize_request *r)
{
    free(r->model);
    free(r->ids);
    memset(r, 0, sizeof *r);
}
