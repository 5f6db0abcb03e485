/*
 * respond.c: queueing responses on a connection (respond.h): the common headers every response
 * carries, JSON and error bodies, plain text. The connection's thread; it reads only the
 * server's state (atomic) and the request's context.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "respond.h"
#include "server_impl.h"

/* X-Request-Id and CORS, and Connection: close while draining. */
static void add_common_headers(struct http_ctx *c, struct MHD_Response *r)
{
    MHD_add_response_header(r, "X-Request-Id", c->xrid);
    if (c->cors[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id");
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
    if (status == 429)
        MHD_add_response_header(r, "Retry-After", "1");
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
