/*
 * respond.c: queueing responses on a connection (respond.h): the common headers every response
 * carries, JSON and error bodies, plain text. The connection's thread; it reads only the
 * server's state (atomic) and the request's context.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "respond.h"
#include "server_impl.h"

/* One budget's x-ratelimit-{limit,remaining,reset}-WHAT headers. */
static void add_budget_headers(struct MHD_Response *r, const char *what, long long limit,
                               long long left, double reset)
{
    char name[40], v[48];
    snprintf(name, sizeof name, "x-ratelimit-limit-%s", what);
    snprintf(v, sizeof v, "%lld", limit);
    MHD_add_response_header(r, name, v);
    snprintf(name, sizeof name, "x-ratelimit-remaining-%s", what);
    snprintf(v, sizeof v, "%lld", left);
    MHD_add_response_header(r, name, v);
    snprintf(name, sizeof name, "x-ratelimit-reset-%s", what);
    ratelimit_duration(reset, v, sizeof v);
    MHD_add_response_header(r, name, v);
}

/* OpenAI's x-ratelimit-* headers for the caller's key, for each budget per minute it has. */
static void add_ratelimit_headers(struct http_ctx *c, struct MHD_Response *r)
{
    struct rl_state s;
    if (c->srv->opts->n_api_keys == 0 || !ratelimit_state(&c->srv->limits, c->key, &s))
        return;
    if (s.has_rpm)
        add_budget_headers(r, "requests", s.rpm, s.rpm_left, s.rpm_reset);
    if (s.has_tpm)
        add_budget_headers(r, "tokens", s.tpm, s.tpm_left, s.tpm_reset);
}

/* X-Request-Id, CORS, the key's budgets, and Connection: close while draining. */
static void add_common_headers(struct http_ctx *c, struct MHD_Response *r)
{
    MHD_add_response_header(r, "X-Request-Id", c->xrid);
    add_ratelimit_headers(c, r);
    if (c->cors[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
        MHD_add_response_header(r, "Access-Control-Expose-Headers",
                                "X-Request-Id, Retry-After, x-ratelimit-limit-requests, "
                                "x-ratelimit-remaining-requests, x-ratelimit-reset-requests, "
                                "x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, "
                                "x-ratelimit-reset-tokens");
        if (strcmp(c->cors, "*"))
            MHD_add_response_header(r, "Vary", "Origin");
    }
    if (atomic_load(&c->srv->state) == SERVER_DRAINING)
        MHD_add_response_header(r, "Connection", "close");
}

enum MHD_Result respond_queue(struct http_ctx *c, int status, struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    add_common_headers(c, r);
    enum MHD_Result res = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    return res;
}

/* A response that frees body when done, with a Content-Type (body freed here on failure). */
static struct MHD_Response *json_response(char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    return r;
}

enum MHD_Result respond_json(struct http_ctx *c, int status, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (r)
            MHD_add_response_header(r, "Content-Type", "application/json");
        return respond_queue(c, 500, r);
    }
    return respond_queue(c, status, json_response(body));
}

enum MHD_Result respond_error(struct http_ctx *c, const struct oai_error *e)
{
    return respond_error_as(c, ll_status_http(e->status), e);
}

enum MHD_Result respond_error_as(struct http_ctx *c, int status, const struct oai_error *e)
{
    char *body = oai_error_json(e);
    if (!body)
        return respond_json(c, 500, NULL);
    struct MHD_Response *r = json_response(body);
    if (!r)
        return MHD_NO;
    if (status == 429) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", c->retry_after > 0 ? c->retry_after : 1);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    else if (status == 503)
        MHD_add_response_header(r, "Retry-After", "5");
    else if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    else if (status == 405 && c->allow)
        MHD_add_response_header(r, "Allow", c->allow);
    if (status >= 500 || log_enabled(LOG_DEBUG))
        log_msg(status >= 500 ? LOG_WARN : LOG_DEBUG, "%s %s %s %d: %s", c->xrid, c->method,
                c->url, status, e->message);
    return respond_queue(c, status, r);
}

enum MHD_Result respond_text(struct http_ctx *c, int status, const char *type,
                             const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (r)
        MHD_add_response_header(r, "Content-Type", type);
    return respond_queue(c, status, r);
}
