/*
 * responses_out.c: the Responses API's JSON (responses_out.h), built as cJSON trees: items,
 * parts, the response object with the request's echoed settings and their defaults, events, and
 * input items as they are stored and listed.
 */
#include "responses_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "request_id.h"

/* A string of len bytes (the text may hold NUL bytes: they end it here, as JSON text cannot
 * carry them through cJSON). */
static cJSON *str_n(const char *s, size_t len)
{
    char *t = malloc(len + 1);
    if (!t)
        return NULL;
    if (len)
        memcpy(t, s, len);
    t[len] = 0;
    cJSON *v = cJSON_CreateString(t);
    free(t);
    return v;
}

cJSON *resp_part_json(enum resp_item_kind kind, const char *text, size_t len)
{
    cJSON *p = cJSON_CreateObject();
    bool ok = p && cJSON_AddStringToObject(p, "type", kind == RI_REASONING ? "reasoning_text"
                                                                          : "output_text") &&
              cJSON_AddItemToObject(p, "text", str_n(text ? text : "", text ? len : 0));
    if (ok && kind == RI_MESSAGE)
        ok = cJSON_AddArrayToObject(p, "annotations") && cJSON_AddArrayToObject(p, "logprobs");
    if (!ok) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

cJSON *resp_item_json(const struct resp_item *it)
{
    cJSON *o = cJSON_CreateObject();
    const char *status = it->done ? "completed" : "in_progress";
    bool ok = o != NULL;
    switch (it->kind) {
    case RI_REASONING: {
        cJSON *content;
        ok = ok && cJSON_AddStringToObject(o, "type", "reasoning") &&
             cJSON_AddStringToObject(o, "id", it->id) && cJSON_AddArrayToObject(o, "summary") &&
             (content = cJSON_AddArrayToObject(o, "content"));
        if (ok && it->done)
            ok = cJSON_AddItemToArray(content, resp_part_json(RI_REASONING, it->text, it->len));
        break;
    }
    case RI_MESSAGE: {
        cJSON *content;
        ok = ok && cJSON_AddStringToObject(o, "type", "message") &&
             cJSON_AddStringToObject(o, "id", it->id) &&
             cJSON_AddStringToObject(o, "status", status) &&
             cJSON_AddStringToObject(o, "role", "assistant") &&
             (content = cJSON_AddArrayToObject(o, "content"));
        if (ok && it->done)
            ok = cJSON_AddItemToArray(content, resp_part_json(RI_MESSAGE, it->text, it->len));
        break;
    }
    case RI_CALL:
        ok = ok && cJSON_AddStringToObject(o, "type", "function_call") &&
             cJSON_AddStringToObject(o, "id", it->id) &&
             cJSON_AddStringToObject(o, "call_id", it->call_id) &&
             cJSON_AddStringToObject(o, "name", it->name) &&
             cJSON_AddStringToObject(o, "arguments", it->done ? it->arguments : "") &&
             cJSON_AddStringToObject(o, "status", status);
        break;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* echo's value of key, else a default made by def (a new tree). */
static bool add_echo(cJSON *o, const cJSON *echo, const char *key, cJSON *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(echo, key);
    if (v && !cJSON_IsNull(v)) {
        cJSON_Delete(def);
        return cJSON_AddItemToObject(o, key, cJSON_Duplicate(v, true));
    }
    return def && cJSON_AddItemToObject(o, key, def);
}

cJSON *resp_object_json(const char *id, long long created, const char *status,
                        const char *incomplete, const char *error, const char *model,
                        const struct resp_item *items, int n, const struct resp_usage *u,
                        const cJSON *echo)
{
    cJSON *o = cJSON_CreateObject(), *x;
    bool ok = o && cJSON_AddStringToObject(o, "id", id) &&
              cJSON_AddStringToObject(o, "object", "response") &&
              cJSON_AddNumberToObject(o, "created_at", (double)created) &&
              cJSON_AddStringToObject(o, "status", status) && cJSON_AddStringToObject(o, "model",
                                                                                     model);
    if (ok && error) {
        ok = (x = cJSON_AddObjectToObject(o, "error")) &&
             cJSON_AddStringToObject(x, "code", "server_error") &&
             cJSON_AddStringToObject(x, "message", error);
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "error") != NULL;
    }
    if (ok && incomplete)
        ok = (x = cJSON_AddObjectToObject(o, "incomplete_details")) &&
             cJSON_AddStringToObject(x, "reason", incomplete);
    else if (ok)
        ok = cJSON_AddNullToObject(o, "incomplete_details") != NULL;
    cJSON *out = ok ? cJSON_AddArrayToObject(o, "output") : NULL;
    for (int i = 0; out && i < n; i++) {
        cJSON *it = resp_item_json(&items[i]);
        if (!it || !cJSON_AddItemToArray(out, it)) {
            cJSON_Delete(it);
            out = NULL;
        }
    }
    ok = out != NULL;
    /* what the request set, else OpenAI's defaults */
    cJSON *fmt = cJSON_CreateObject(), *text = cJSON_CreateObject();
    if (fmt && text && cJSON_AddStringToObject(fmt, "type", "text"))
        cJSON_AddItemToObject(text, "format", fmt), fmt = NULL;
    cJSON_Delete(fmt);
    cJSON *reasoning = cJSON_CreateObject();
    if (reasoning) {
        cJSON_AddNullToObject(reasoning, "effort");
        cJSON_AddNullToObject(reasoning, "summary");
    }
    ok = ok && add_echo(o, echo, "instructions", cJSON_CreateNull()) &&
         add_echo(o, echo, "max_output_tokens", cJSON_CreateNull()) &&
         add_echo(o, echo, "metadata", cJSON_CreateObject()) &&
         add_echo(o, echo, "parallel_tool_calls", cJSON_CreateTrue()) &&
         add_echo(o, echo, "previous_response_id", cJSON_CreateNull()) &&
         add_echo(o, echo, "reasoning", reasoning) &&
         add_echo(o, echo, "service_tier", cJSON_CreateString("default")) &&
         add_echo(o, echo, "store", cJSON_CreateFalse()) &&
         add_echo(o, echo, "temperature", cJSON_CreateNumber(1)) &&
         add_echo(o, echo, "text", text) &&
         add_echo(o, echo, "tool_choice", cJSON_CreateString("auto")) &&
         add_echo(o, echo, "tools", cJSON_CreateArray()) &&
         add_echo(o, echo, "top_p", cJSON_CreateNumber(1)) &&
         add_echo(o, echo, "truncation", cJSON_CreateString("disabled")) &&
         add_echo(o, echo, "user", cJSON_CreateNull());
    if (!ok) { /* (add_echo consumed the defaults or left them; free the two made above
                  only when they were not attached) */
        cJSON_Delete(o);
        return NULL;
    }
    if (u) {
        cJSON *us = cJSON_AddObjectToObject(o, "usage"), *d1, *d2;
        ok = us && cJSON_AddNumberToObject(us, "input_tokens", u->input_tokens) &&
             (d1 = cJSON_AddObjectToObject(us, "input_tokens_details")) &&
             cJSON_AddNumberToObject(d1, "cached_tokens", u->cached_tokens) &&
             cJSON_AddNumberToObject(us, "output_tokens", u->output_tokens) &&
             (d2 = cJSON_AddObjectToObject(us, "output_tokens_details")) &&
             cJSON_AddNumberToObject(d2, "reasoning_tokens", u->reasoning_tokens) &&
             cJSON_AddNumberToObject(us, "total_tokens",
                                     (double)u->input_tokens + u->output_tokens);
    } else {
        ok = cJSON_AddNullToObject(o, "usage") != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *resp_event(const char *type, int seq, cJSON *obj)
{
    char *out = NULL;
    if (obj && cJSON_AddStringToObject(obj, "type", type) &&
        cJSON_AddNumberToObject(obj, "sequence_number", seq))
        out = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    return out;
}

bool resp_input_item_normalize(cJSON *it)
{
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "type"));
    if (!type && !(type = cJSON_GetStringValue(cJSON_AddStringToObject(it, "type", "message"))))
        return false;
    cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (!strcmp(type, "message") && cJSON_IsString(content)) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "role"));
        cJSON *parts = cJSON_CreateArray(), *part = cJSON_CreateObject();
        if (!parts || !part || !cJSON_AddItemToArray(parts, part)) {
            cJSON_Delete(parts);
            cJSON_Delete(part);
            return false;
        }
        if (!cJSON_AddStringToObject(part, "type", role && !strcmp(role, "assistant")
                                                       ? "output_text"
                                                       : "input_text") ||
            !cJSON_AddStringToObject(part, "text", content->valuestring) ||
            !cJSON_ReplaceItemInObjectCaseSensitive(it, "content", parts)) {
            cJSON_Delete(parts);
            return false;
        }
    }
    if (cJSON_GetObjectItemCaseSensitive(it, "id"))
        return true;
    const char *pre = !strcmp(type, "message")                ? "msg"
                      : !strcmp(type, "function_call")        ? "fc"
                      : !strcmp(type, "function_call_output") ? "fco"
                                                              : "rs";
    char hex[33], id[40];
    request_id_random(hex);
    snprintf(id, sizeof id, "%s_%s", pre, hex);
    return cJSON_AddStringToObject(it, "id", id) != NULL;
}
