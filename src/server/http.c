/*
 * http.c: the libmicrohttpd glue: the daemon (one thread per connection), request bodies
 * under the size limit, request ids, CORS, API-key checks, routing to the WebUI and the API
 * routes, and the per-request log line and status metrics.
 *
 * Thread per connection: a route handler may block (tokenizing, waiting for a non-stream
 * generation) and an SSE response (sse.c) blocks in the engine while no token is ready,
 * without holding up any other connection.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "buf.h"
#include "http.h"
#include "live.h"
#include "log.h"
#include "request_id.h"
#include "respond.h"
#include "routes.h"
#include "server_impl.h"
#include "util.h"
#include "webui.h"

/* One request: what the routes see, and the body as it arrives. */
struct request {
    struct http_ctx c;
    struct ll_buf body;
    bool body_too_large;
};

/* ---- connections: the head deadline ----
 * Each connection is registered in srv->heads (a live table of its own, so shutdown does not
 * wait for idle connections) with a deadline --header-timeout after it opened, or after its
 * previous request ended; it leaves the table once a request's head and body are all in. The
 * table's watcher shuts the socket down when the deadline passes first: a client trickling
 * bytes (which resets libmicrohttpd's own timeout on every byte) or staying silent is cut,
 * and its thread and connection slot are freed for others. */
struct conn_watch {
    struct live_entry e;
    struct live_table *t;
    double timeout;
};

/* live table callback, with the table's lock held: the socket is still open (the entry leaves
 * the table before libmicrohttpd closes it). */
static void conn_cut(void *owner)
{
    struct conn_watch *w = owner;
    log_msg(LOG_DEBUG, "connection cut: request head/body not complete within %gs", w->timeout);
    shutdown(w->e.fd, SHUT_RDWR);
}

static void conn_arm(struct conn_watch *w)
{
    live_remove(w->t, &w->e);
    atomic_store(&w->e.timed_out, false);
    atomic_store(&w->e.client_gone, false);
    atomic_store(&w->e.reason, CANCEL_NONE);
    w->e.deadline = ll_now() + w->timeout;
    live_add(w->t, &w->e);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct server *srv = cls;
    struct conn_watch *w = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(w = calloc(1, sizeof *w)))
            return; /* no watch: libmicrohttpd's own timeout still applies */
        w->t = srv->heads;
        w->timeout = srv->opts->header_timeout;
        w->e.fd = ci->connect_fd;
        w->e.xrid = "connection";
        w->e.key = -2; /* never matches a cancel route's key */
        w->e.cancel = conn_cut;
        w->e.owner = w;
        *socket_context = w;
        conn_arm(w);
    } else if (w) { /* closed: before libmicrohttpd closes the socket */
        live_remove(w->t, &w->e);
        free(w);
        *socket_context = NULL;
    }
}

/* The connection's watch, NULL when none. */
static struct conn_watch *conn_watch_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* ---- requests ---- */

static void set_cors(struct http_ctx *c)
{
    const struct server_opts *o = c->srv->opts;
    const char *origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Origin");
    if (!origin || !o->n_cors_origins)
        return;
    for (int i = 0; i < o->n_cors_origins; i++) {
        if (!strcmp(o->cors_origins[i], "*")) {
            snprintf(c->cors, sizeof c->cors, "*");
            return;
        }
        if (!strcmp(o->cors_origins[i], origin) && strlen(origin) < sizeof c->cors) {
            snprintf(c->cors, sizeof c->cors, "%s", origin);
            return;
        }
    }
}

static enum MHD_Result body_too_large(struct http_ctx *c)
{
    struct oai_error e;
    oai_error_set(&e, LL_EBODYLIMIT, NULL, "request_too_large",
                  "The request body is larger than the limit of %zu bytes",
                  c->srv->opts->max_body);
    return respond_error(c, &e);
}

/* The limits on a request's head answered here in the OpenAI error shape (libmicrohttpd's own
 * HTML pages remain only past its 64 KiB per-connection memory). */
enum { MAX_URL = 8192, MAX_HEADERS = 32768 };

static enum MHD_Result head_error(struct http_ctx *c, int status, const char *code,
                                  const char *msg)
{
    struct oai_error e;
    oai_error_set(&e, LL_EINVAL, NULL, code, "%s", msg);
    return respond_error_as(c, status, &e);
}

static enum MHD_Result sum_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* An absolute-form request target (RFC 9112 3.2.2, "http://host/path") → its path. */
static const char *origin_form(const char *url)
{
    const char *p = NULL;
    if (!strncasecmp(url, "http://", 7))
        p = url + 7;
    else if (!strncasecmp(url, "https://", 8))
        p = url + 8;
    if (!p)
        return url;
    p = strchr(p, '/');
    return p ? p : "/";
}

/* Append to the body. false: over the limit, or out of memory. */
static bool append_body(struct request *q, const char *data, size_t n)
{
    if (q->body.len + n > q->c.srv->opts->max_body)
        return false;
    return ll_buf_append(&q->body, data, n);
}

static bool is_get(const struct http_ctx *c)
{
    return !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD");
}

static enum MHD_Result not_found(struct http_ctx *c)
{
    struct oai_error e;
    oai_error_set(&e, LL_ENOTFOUND, NULL, "not_found", "Unknown route: %s %.200s", c->method,
                  c->url);
    return respond_error(c, &e);
}

static enum MHD_Result dispatch(struct http_ctx *c)
{
    struct server *srv = c->srv;
    const char *u = c->url;

    if (!strcmp(c->method, "OPTIONS")) { /* CORS preflight: no auth (browsers send none) */
        struct MHD_Response *r =
            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (r && c->cors[0]) {
            MHD_add_response_header(r, "Access-Control-Allow-Methods",
                                    "GET, POST, DELETE, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type, X-Request-Id");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        }
        return respond_queue(c, 204, r);
    }
    enum MHD_Result res;
    if (webui_route(c, &res)) /* the WebUI's files need no key: they hold no data */
        return res;
    bool public = !strcmp(u, "/health") || (!strcmp(u, "/metrics") && srv->opts->metrics_public);
    c->key = auth_key_index(srv->opts,
                            MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Authorization"));
    if (!public && c->key < 0) {
        struct oai_error e;
        oai_error_set(&e, LL_EAUTH, NULL, "invalid_api_key",
                      "Missing or invalid API key: send the header 'Authorization: Bearer KEY'");
        return respond_error(c, &e);
    }

    if (!strcmp(u, "/v1/sessions") || !strncmp(u, "/v1/sessions/", 13))
        return route_sessions(c, u[12] ? u + 13 : NULL);
    /* the API's routes, also without the /v1 prefix (as llama.cpp serves them) */
    const char *v = !strncmp(u, "/v1/", 4) ? u + 3 : u;
    if (!strncmp(v, "/responses/", 11) && v[11])
        return route_response_stored(c, v + 11);
    static const struct {
        const char *path;
        bool post, v1; /* POST (else GET); listed under /v1 */
        enum MHD_Result (*fn)(struct http_ctx *);
    } routes[] = {
        {"/chat/completions", true, true, route_chat},
        {"/completions", true, true, route_completions},
        {"/responses", true, true, route_responses},
        {"/embeddings", true, true, route_embeddings},
        {"/rerank", true, true, route_rerank},
        {"/v2/rerank", true, false, route_rerank}, /* Cohere's v2 clients */
        {"/tokenize", true, false, route_tokenize},
        {"/detokenize", true, false, route_detokenize},
        {"/models", false, true, route_models},
        {"/health", false, false, route_health},
        {"/metrics", false, false, route_metrics},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        bool models = !strcmp(routes[i].path, "/models");
        const char *p = routes[i].v1 ? v : u;
        bool match = !strcmp(p, routes[i].path) ||
                     (models && !strncmp(p, "/models/", 8) && p[8]);
        if (!match)
            continue;
        if (routes[i].post ? !strcmp(c->method, "POST") : is_get(c))
            return routes[i].fn(c);
        struct oai_error e;
        c->allow = routes[i].post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
        oai_error_set(&e, LL_EMETHOD, NULL, "method_not_allowed",
                      "%s is not allowed on %.200s (use %s)", c->method, c->url,
                      routes[i].post ? "POST" : "GET");
        return respond_error(c, &e);
    }
    static const char req_pre[] = "/v1/requests/";
    if (is_get(c) && !strncmp(u, req_pre, sizeof req_pre - 1) && u[sizeof req_pre - 1] &&
        !strchr(u + sizeof req_pre - 1, '/') && strlen(u) < sizeof req_pre + 160)
        return route_request_status(c, u + sizeof req_pre - 1);
    if (!strcmp(c->method, "POST")) {
        size_t n = strlen(u);
        static const char pre[] = "/v1/requests/", suf[] = "/cancel";
        if (n > sizeof pre - 1 + sizeof suf - 1 && !strncmp(u, pre, sizeof pre - 1) &&
            !strcmp(u + n - (sizeof suf - 1), suf)) {
            char id[160];
            size_t idlen = n - (sizeof pre - 1) - (sizeof suf - 1);
            if (idlen < sizeof id) {
                memcpy(id, u + sizeof pre - 1, idlen);
                id[idlen] = 0;
                return route_cancel(c, id);
            }
        }
    }
    return not_found(c);
}

/* A fixed, modest socket send buffer (instead of the kernel's autotuning up to megabytes):
 * streamed text is small, and a client that stops reading then blocks the connection after
 * about this much, so the write timeout starts counting early instead of after megabytes. */
static void limit_send_buffer(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int size = 256 * 1024;
    if (ci)
        setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct server *srv = cls;
    struct request *q = *con_cls;
    struct http_ctx *c = q ? &q->c : NULL;
    if (!q) { /* headers are in: set up, and refuse an announced oversized body at once */
        if (!(q = calloc(1, sizeof *q)) || !(q->c.url = strdup(origin_form(url)))) {
            free(q);
            return MHD_NO;
        }
        *con_cls = q;
        c = &q->c;
        c->srv = srv;
        c->conn = conn;
        c->t_arrival = ll_now();
        c->key = -1; /* until auth: no key's budgets in the headers */
        snprintf(c->method, sizeof c->method, "%s", method);
        const char *xrid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
        if (xrid && request_id_valid(xrid))
            snprintf(c->xrid, sizeof c->xrid, "%s", xrid);
        else
            request_id_random(c->xrid);
        set_cors(c);
        limit_send_buffer(conn);
        size_t head = 0;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, sum_header, &head);
        if (strlen(url) > MAX_URL)
            return head_error(c, 414, "uri_too_long", "The request URL is longer than 8192 bytes");
        if (head > MAX_HEADERS)
            return head_error(c, 431, "headers_too_large",
                              "The request headers are larger than 32768 bytes in all");
        if (!strcmp(version, "HTTP/1.1") &&
            !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))
            return head_error(c, 400, "missing_host",
                              "An HTTP/1.1 request must have a Host header (RFC 9112 3.2)");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || v > srv->opts->max_body) {
                q->body_too_large = true;
                return body_too_large(c);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->body_too_large && !c->status && !append_body(q, upload_data, *upload_size)) {
            q->body_too_large = true; /* keep reading (and dropping) the rest, then answer */
            ll_buf_free(&q->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->status) /* answered already */
        return MHD_YES;
    if (q->body_too_large)
        return body_too_large(c);
    struct conn_watch *w = conn_watch_of(conn);
    if (w) /* head and body are in: no deadline while the request runs */
        live_remove(w->t, &w->e);
    if (!ll_buf_reserve(&q->body, 0)) /* routes get a NUL-terminated body, "" when none */
        return MHD_NO;
    c->body = q->body.data;
    c->body_len = q->body.len;
    return dispatch(c);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct server *srv = cls;
    struct request *q = *con_cls;
    struct conn_watch *w = conn_watch_of(conn);
    if (w && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        conn_arm(w); /* keep-alive: the next request's head must come within the deadline */
    if (!q)
        return;
    struct http_ctx *c = &q->c;
    if (c->gen_open)
        atomic_fetch_sub(&srv->gen_open, 1);
    if (c->status) {
        metrics_http(&srv->metrics, c->status);
        if (!c->log_done) {
            bool quiet = !strcmp(c->url, "/health") || !strcmp(c->url, "/metrics");
            log_msg(quiet && c->status < 400 ? LOG_DEBUG : LOG_INFO, "%s %s %.200s %d %.3fs",
                    c->xrid, c->method, c->url, c->status, ll_now() - c->t_arrival);
        }
    }
    ll_buf_free(&q->body);
    free(c->url);
    free(q);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    log_msg(LOG_DEBUG, "libmicrohttpd: %s", msg);
}

enum ll_status http_start(struct server *srv, int *port, struct ll_err *err)
{
    /* numeric addresses only (plus "localhost"): a static binary cannot use NSS lookups */
    const struct server_opts *o = srv->opts;
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)o->port)};
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    const char *host = strcmp(o->host, "localhost") ? o->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        addr = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        return ll_err_set(err, LL_EINVAL,
                          "--host %s: not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::)",
                          o->host);
    }
    srv->mhd = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->write_timeout, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_connections_per_ip,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_LISTEN_BACKLOG_SIZE,
        256u, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!srv->mhd)
        return ll_err_set(err, LL_EIO, "cannot listen on %s:%d (%s)", o->host, o->port,
                          strerror(errno));
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *port = di && di->port ? di->port : o->port;
    return LL_OK;
}

int http_quiesce(struct server *srv)
{
    return srv->mhd ? (int)MHD_quiesce_daemon(srv->mhd) : -1;
}

void http_stop(struct server *srv, int listen_fd)
{
    if (srv->mhd)
        MHD_stop_daemon(srv->mhd);
    srv->mhd = NULL;
    if (listen_fd >= 0)
        close(listen_fd);
}
