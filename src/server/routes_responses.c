/*
 * routes_responses.c: GET /v1/responses/{id} (the stored response object, as its POST answered
 * it) and DELETE /v1/responses/{id} (forgets it: a later previous_response_id naming it is
 * refused). Only the caller's key's responses (resp_store.h); any other id is 404. HTTP thread
 * of the connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum MHD_Result route_response_stored(struct http_ctx *c, const char *id)
{
    struct resp_store *st = &c->srv->responses;
    const uint64_t owner = request_owner(c);
    bool get = !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD");
    if (get) {
        char *body = resp_store_get(st, id, owner, false);
        return body ? respond_json(c, 200, body) : not_stored(c, id);
    }
    if (!strcmp(c->method, "DELETE")) {
        if (!resp_store_delete(st, id, owner))
            return not_stored(c, id);
        struct ll_buf b = {0};
        ll_buf_puts(&b, "{\"id\":");
        ll_json_put_cstr(&b, id);
        ll_buf_puts(&b, ",\"object\":\"response\",\"deleted\":true}");
        return respond_json(c, 200, ll_buf_take(&b));
    }
    struct oai_error e;
    c->allow = "GET, HEAD, DELETE, OPTIONS";
    oai_error_set(&e, LL_EMETHOD, NULL, "method_not_allowed",
                  "%s is not allowed on %.200s (use GET or DELETE)", c->method, c->url);
    return respond_error(c, &e);
}
