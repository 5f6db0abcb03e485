/*
 * routes_sessions.c: the session routes (sessions.h): POST /v1/sessions creates one (body
 * optional: {"id": "..."}, else an id is made up), GET /v1/sessions/{id} describes it, DELETE
 * /v1/sessions/{id} forgets it and releases its pinned KV blocks. A session of another API key
 * is 404. HTTP thread of the connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_job.h"
#include <cjson/cJSON.h>
#include "json.h"
#include "routes.h"
#include "server_impl.h"

static enum MHD_Result method_not_allowed(struct http_ctx *c, const char *allow)
{
    struct oai_error e;
    oai_error_set(&e, LL_EINVAL, NULL, "method_not_allowed", "%s %s: use %s", c->method, c->url,
                  allow);
    return respond_error(c, &e);
}

static enum MHD_Result create(struct http_ctx *c)
{
    struct oai_error e;
    char id[SESSION_ID_MAX + 1], *want = NULL;
    cJSON *root = NULL;
    if (c->body_len > 0) {
        struct ll_err err = {0};
        if (ll_json_parse(&root, c->body, c->body_len, "request body", &err) != LL_OK) {
            oai_error_set(&e, err.code, NULL, NULL, "%s", err.msg);
            return respond_error(c, &e);
        }
        const cJSON *v = cJSON_IsObject(root) ? ll_json_member(root, "id") : NULL;
        if (!cJSON_IsObject(root) || (v && !cJSON_IsString(v))) {
            cJSON_Delete(root);
            oai_error_set(&e, LL_ETYPE, cJSON_IsObject(root) ? "id" : NULL, "invalid_type",
                          "the body must be an object with an optional string \"id\"");
            return respond_error(c, &e);
        }
        want = v ? v->valuestring : NULL;
    }
    enum MHD_Result res;
    if (want && !session_id_valid(want, &e))
        res = respond_error(c, &e);
    else if (sessions_create(&c->srv->sessions, want, request_owner(c), id, &e) != LL_OK)
        res = respond_error(c, &e);
    else
        res = respond_json(c, 200, sessions_describe(&c->srv->sessions, id, request_owner(c), &e));
    cJSON_Delete(root);
    return res;
}

enum MHD_Result route_sessions(struct http_ctx *c, const char *id)
{
    struct oai_error e;
    if (!id)
        return !strcmp(c->method, "POST") ? create(c) : method_not_allowed(c, "POST");
    if (!session_id_valid(id, &e))
        return respond_error(c, &e);
    if (!strcmp(c->method, "GET")) {
        char *body = sessions_describe(&c->srv->sessions, id, request_owner(c), &e);
        return body ? respond_json(c, 200, body) : respond_error(c, &e);
    }
    if (!strcmp(c->method, "DELETE")) {
        if (sessions_delete(&c->srv->sessions, id, request_owner(c), &e) != LL_OK)
            return respond_error(c, &e);
        char buf[160];
        snprintf(buf, sizeof buf, "{\"id\":\"%s\",\"object\":\"session\",\"deleted\":true}", id);
        return respond_json(c, 200, strdup(buf));
    }
    return method_not_allowed(c, "GET or DELETE");
}
