/*
 * respond.h: one HTTP request as the routes see it (struct http_ctx, made by http.c for each
 * request) and the ways to answer it: JSON, an OpenAI error, plain text, or a response made by
 * the caller, each queued with the common headers (X-Request-Id, CORS, the caller's key's
 * x-ratelimit-* budgets, and Connection: close while the server drains). The connection's thread.
 */
#ifndef LLAISYS_RESPOND_H
#define LLAISYS_RESPOND_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "openai_request.h"

struct server;

struct http_ctx {
    struct server *srv;
    struct MHD_Connection *conn;
    char method[16];
    char *url;                   /* path without the query (http.c's) */
    const char *body;            /* (body_len) the request body, NUL-terminated (http.c's) */
    size_t body_len;
    char xrid[129];              /* X-Request-Id: the client's if valid, else generated */
    char cors[256];              /* Access-Control-Allow-Origin to send, or "" */
    double t_arrival;            /* when the request line arrived */
    int status;                  /* status of the response queued (for the log), 0: none */
    bool log_done;               /* a generation job wrote the log line */
    bool gen_open;               /* counted in srv->gen_open until the response completes */
    int key;                     /* the caller's API key (auth_key_index), -1 for public routes
                                    called without one: owns the requests it starts */
    const char *allow;           /* a 405 answer's Allow header */
    int retry_after;             /* a 429 answer's Retry-After seconds, 0: the default (1) */
};

/* Queue a JSON response: body (malloc'd, taken: freed here in every case), status. NULL body
 * answers 500 "out of memory". Returns MHD's result (MHD_NO: the connection is dropped). */
enum MHD_Result respond_json(struct http_ctx *c, int status, char *body);
/* Queue the OpenAI error body for e with its HTTP status (429 and 503 carry Retry-After (429:
 * c->retry_after when set), 401
 * WWW-Authenticate, 405 Allow from c->allow); 5xx are logged. Returns MHD's result. */
enum MHD_Result respond_error(struct http_ctx *c, const struct oai_error *e);
/* respond_error with an HTTP status of its own (414, 431: no ll_status maps to them). */
enum MHD_Result respond_error_as(struct http_ctx *c, int status, const struct oai_error *e);
/* Queue a response of Content-Type type with text (copied). Returns MHD's result. */
enum MHD_Result respond_text(struct http_ctx *c, int status, const char *type,
                             const char *text);
/* Queue r (made by the caller, NULL: MHD_NO) with the common headers added, record status in
 * c, and drop the caller's reference to r. Returns MHD's result. */
enum MHD_Result respond_queue(struct http_ctx *c, int status, struct MHD_Response *r);

#endif
