/*
 * routes_info.c: the small routes: GET /health, GET /metrics, GET [/v1]/models[/{id}] and
 * POST /v1/requests/{id}/cancel, GET /v1/requests/{id}. HTTP threads; they read the server state and the engine's
 * counters, and the cancel route goes through the in-flight table.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "engine.h"
#include "json.h"
#include "live.h"
#include "log.h"
#include "routes.h"
#include "server_impl.h"

enum MHD_Result route_health(struct http_ctx *c)
{
    int st = atomic_load(&c->srv->state);
    const char *body = st == SERVER_READY     ? "{\"status\":\"ok\"}"
                       : st == SERVER_LOADING ? "{\"status\":\"loading\"}"
                                              : "{\"status\":\"shutting_down\"}";
    return respond_text(c, st == SERVER_READY ? 200 : 503, "application/json", body);
}

enum MHD_Result route_metrics(struct http_ctx *c)
{
    struct server *srv = c->srv;
    int st = atomic_load(&srv->state);
    struct engine_stats stats;
    bool have = st != SERVER_LOADING && srv->engine;
    if (have)
        engine_get_stats(srv->engine, &stats);
    char *text = metrics_render(&srv->metrics, have ? &stats : NULL, srv->served_name,
                                st == SERVER_READY);
    struct sessions_stats ss;
    sessions_get_stats(&srv->sessions, &ss);
    char *more = metrics_render_sessions(&ss, have ? &stats : NULL, srv->served_name);
    struct resp_store_stats rs;
    resp_store_get_stats(&srv->responses, &rs);
    char *stored = metrics_render_responses(&rs, srv->served_name);
    int nk = 0;
    struct rl_key *keys = ratelimit_snapshot(&srv->limits, &nk);
    char *per_key = metrics_render_keys(keys, nk, srv->served_name);
    free(keys);
    struct ll_buf all = {0};
    if (text && more && stored && per_key) {
        ll_buf_puts(&all, text);
        ll_buf_puts(&all, more);
        ll_buf_puts(&all, stored);
        ll_buf_puts(&all, per_key);
    }
    free(text);
    free(more);
    free(stored);
    free(per_key);
    text = ll_buf_take(&all);
    if (!text)
        return respond_json(c, 500, NULL);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    return respond_queue(c, 200, r);
}

static void model_object(struct ll_buf *b, const struct server *srv)
{
    ll_buf_puts(b, "{\"id\":");
    ll_json_put_cstr(b, srv->served_name);
    ll_buf_puts(b, ",\"object\":\"model\",\"created\":");
    ll_json_put_int(b, srv->started);
    ll_buf_puts(b, ",\"owned_by\":\"llaisys\",\"root\":");
    ll_json_put_cstr(b, srv->served_name);
    ll_buf_puts(b, ",\"parent\":null,\"max_model_len\":");
    ll_json_put_int(b, srv->n_ctx);
    ll_buf_puts(b, "}");
}

enum MHD_Result route_models(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct server *srv = c->srv;
    struct ll_buf b = {0};
    const char *u = !strncmp(c->url, "/v1/", 4) ? c->url + 3 : c->url; /* (or /models) */
    if (!strcmp(u, "/models")) {
        ll_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
        model_object(&b, srv);
        ll_buf_puts(&b, "]}");
        return respond_json(c, 200, ll_buf_take(&b));
    }
    const char *id = u + strlen("/models/");
    struct oai_error e;
    if (route_check_model(c, id, &e) != LL_OK)
        return respond_error(c, &e);
    model_object(&b, srv);
    return respond_json(c, 200, ll_buf_take(&b));
}

enum MHD_Result route_request_status(struct http_ctx *c, const char *id)
{
    struct server *srv = c->srv;
    struct ll_buf b = {0};
    if (srv->live && live_describe_id(srv->live, id, c->key, &b))
        return respond_json(c, 200, ll_buf_take(&b));
    ll_buf_free(&b);
    char *kept = req_history_find(&srv->history, id, c->key);
    if (kept)
        return respond_json(c, 200, kept);
    struct oai_error e;
    oai_error_set(&e, LL_ENOTFOUND, NULL, "request_not_found",
                  "No request with the id '%.160s' is running or finished in the last %g s",
                  id, srv->opts->request_retention);
    return respond_error(c, &e);
}

enum MHD_Result route_cancel(struct http_ctx *c, const char *id)
{
    struct server *srv = c->srv;
    int n = srv->live ? live_cancel_id(srv->live, id, c->key) : 0;
    if (n == 0) {
        struct oai_error e;
        oai_error_set(&e, LL_ENOTFOUND, NULL, "request_not_found",
                      "No request in flight has the id '%.160s'", id);
        return respond_error(c, &e);
    }
    log_msg(LOG_INFO, "%s cancel requested for %s (%d request%s)", c->xrid, id, n,
            n > 1 ? "s" : "");
    struct ll_buf b = {0};
    ll_buf_puts(&b, "{\"id\":");
    ll_json_put_cstr(&b, id);
    ll_buf_puts(&b, ",\"object\":\"request.cancel\",\"cancelled\":");
    ll_json_put_int(&b, n);
    ll_buf_puts(&b, "}");
    return respond_json(c, 200, ll_buf_take(&b));
}
