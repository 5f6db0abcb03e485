/*
 * routes_responses.c: the stored responses (resp_store.h) of the caller's key: GET
 * /v1/responses/{id} (the object its POST answered), GET /v1/responses/{id}/input_items (its
 * input items, a page of a list: limit 1..100, default 20; order asc or desc, the default;
 * after, an item id), and DELETE /v1/responses/{id} (forgets it: a later previous_response_id
 * naming it is refused). Any other id is 404. HTTP thread of the connection.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "gen_job.h"
#include "json.h"
#include "routes.h"
#include "server_impl.h"

static enum MHD_Result not_stored(struct http_ctx *c, const char *id)
{
    struct oai_error e;
    oai_error_set(&e, LL_ENOTFOUND, NULL, "not_found",
                  "Response with id '%.60s' not found (" RESP_STORE_WHY ")", id);
    return respond_error(c, &e);
}

/* MHD's iterator over the query: the first name that is not a parameter of input_items. */
static enum MHD_Result first_unknown(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    (void)value;
    const char **bad = cls;
    if (strcmp(key, "limit") && strcmp(key, "order") && strcmp(key, "after")) {
        *bad = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* The list page of input items (a JSON array, taken) by the query's limit, order and after. */
static enum MHD_Result input_items(struct http_ctx *c, cJSON *items)
{
    struct oai_error e;
    const char *bad = NULL;
    MHD_get_connection_values(c->conn, MHD_GET_ARGUMENT_KIND, first_unknown, &bad);
    const char *limit_s = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "limit");
    const char *order = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "order");
    const char *after = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "after");
    long limit = 20;
    char *end = NULL;
    if (limit_s)
        limit = strtol(limit_s, &end, 10);
    enum ll_status s = LL_OK;
    if (bad)
        s = oai_error_set(&e, LL_EUNSUPPORTED, bad, "unsupported_parameter",
                          "'%.60s' is not supported here (limit, order, after)", bad);
    else if (limit_s && (!*limit_s || *end || limit < 1 || limit > 100))
        s = oai_error_set(&e, LL_EINVAL, "limit", "invalid_value",
                          "'limit' must be an integer from 1 to 100");
    else if (order && strcmp(order, "asc") && strcmp(order, "desc"))
        s = oai_error_set(&e, LL_EINVAL, "order", "invalid_value",
                          "'order' must be asc or desc");
    if (s != LL_OK) {
        cJSON_Delete(items);
        return respond_error(c, &e);
    }
    const bool asc = order && !strcmp(order, "asc");
    const int n = cJSON_GetArraySize(items);
    int from = 0; /* position in the chosen order */
    if (after) {
        int k = 0;
        for (; k < n; k++) {
            const cJSON *it = cJSON_GetArrayItem(items, asc ? k : n - 1 - k);
            const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "id"));
            if (id && !strcmp(id, after))
                break;
        }
        if (k == n) {
            cJSON_Delete(items);
            oai_error_set(&e, LL_EINVAL, "after", "invalid_value",
                          "'after': no input item '%.60s' in this response", after);
            return respond_error(c, &e);
        }
        from = k + 1;
    }
    int to = from + (int)limit < n ? from + (int)limit : n;
    cJSON *list = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(list, "data");
    bool ok = list && data && cJSON_AddStringToObject(list, "object", "list");
    for (int k = from; ok && k < to; k++) {
        cJSON *copy = cJSON_Duplicate(cJSON_GetArrayItem(items, asc ? k : n - 1 - k), true);
        ok = copy && cJSON_AddItemToArray(data, copy);
        if (!ok)
            cJSON_Delete(copy);
    }
    const char *first = to > from ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                        cJSON_GetArrayItem(data, 0), "id"))
                                  : NULL;
    const char *last = to > from ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetArrayItem(data, to - from - 1), "id"))
                                 : NULL;
    ok = ok && (first ? cJSON_AddStringToObject(list, "first_id", first)
                      : cJSON_AddNullToObject(list, "first_id")) &&
         (last ? cJSON_AddStringToObject(list, "last_id", last)
               : cJSON_AddNullToObject(list, "last_id")) &&
         cJSON_AddBoolToObject(list, "has_more", to < n);
    char *body = ok ? cJSON_PrintUnformatted(list) : NULL;
    cJSON_Delete(list);
    cJSON_Delete(items);
    return respond_json(c, 200, body);
}

enum MHD_Result route_response_stored(struct http_ctx *c, const char *path)
{
    struct resp_store *st = &c->srv->responses;
    const uint64_t owner = request_owner(c);
    /* {id} or {id}/input_items */
    char id[OAI_RESPONSE_ID_MAX + 1];
    const char *slash = strchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : strlen(path);
    bool items = slash && !strcmp(slash, "/input_items");
    if (len > OAI_RESPONSE_ID_MAX || (slash && !items)) {
        struct oai_error e;
        oai_error_set(&e, LL_ENOTFOUND, NULL, "not_found", "Unknown route: %s %.200s",
                      c->method, c->url);
        return respond_error(c, &e);
    }
    memcpy(id, path, len);
    id[len] = 0;
    bool get = !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD");
    if (get) {
        char *body;
        if (!resp_store_get(st, id, owner, items ? NULL : &body, items ? &body : NULL))
            return not_stored(c, id);
        if (!items)
            return respond_json(c, 200, body);
        cJSON *list = cJSON_Parse(body);
        free(body);
        return list ? input_items(c, list) : respond_json(c, 500, NULL);
    }
    if (!items && !strcmp(c->method, "DELETE")) {
        if (!resp_store_delete(st, id, owner))
            return not_stored(c, id);
        struct ll_buf b = {0};
        ll_buf_puts(&b, "{\"id\":");
        ll_json_put_cstr(&b, id);
        ll_buf_puts(&b, ",\"object\":\"response\",\"deleted\":true}");
        return respond_json(c, 200, ll_buf_take(&b));
    }
    struct oai_error e;
    c->allow = items ? "GET, HEAD, OPTIONS" : "GET, HEAD, DELETE, OPTIONS";
    oai_error_set(&e, LL_EMETHOD, NULL, "method_not_allowed", "%s is not allowed on %.200s (use %s)",
                  c->method, c->url, items ? "GET" : "GET or DELETE");
    return respond_error(c, &e);
}
