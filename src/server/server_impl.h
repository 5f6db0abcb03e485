/*
 * server_impl.h: what the files of src/server/ share: the server state, the per-HTTP-request
 * context, generation jobs (one per chat/completions request, with one engine request per
 * choice), the in-flight table and its hang-up watcher, metrics, auth, SSE framing, logging.
 *
 * Threads and ownership:
 *   - main: server_run (start-up, model load, signals, shutdown). It writes `engine`, `tmpl`
 *     and friends before it stores SERVER_READY in `state`; HTTP threads read them only after
 *     loading `state` as READY (acquire), and they never change afterwards until shutdown,
 *     which first waits for every connection thread to end.
 *   - one libmicrohttpd thread per connection: struct http_ctx and struct gen_job belong to it.
 *     The SSE content reader runs on that thread too, so a job is only ever touched by its
 *     connection's thread, except for the fields marked [live], which the watcher and the
 *     cancel route touch under live->lock.
 *   - watcher (live.c): polls the sockets of every registered job for hang-up, enforces the
 *     request time limit, and cancels; it never frees a job.
 *   - the engine's scheduler thread: talks to jobs only through the engine API.
 * Lock order: live->lock, then the engine's mailbox lock (engine_cancel under live->lock);
 * metrics->lock is a leaf; nothing else is held while waiting on the engine.
 */
#ifndef LLAISYS_SERVER_IMPL_H
#define LLAISYS_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "engine.h"
#include "log.h"
#include "openai_request.h"
#include "openai_response.h"
#include "server.h"

struct cJSON;
struct chat_template;
struct gen_job;
struct tokenizer;

/* ---- sse.c: bytes waiting to be written to one SSE stream ---- */

struct sse_buf {
    char *data;
    size_t len, off, cap; /* data[off..len) is pending */
};

/* Append `data: JSON\n\n`, `: COMMENT\n\n` or `data: [DONE]\n\n`. false: out of memory. */
bool sse_event(struct sse_buf *b, const char *json);
bool sse_comment(struct sse_buf *b, const char *text);
bool sse_done(struct sse_buf *b);
/* Bytes not yet taken. */
size_t sse_pending(const struct sse_buf *b);
/* Copy up to max pending bytes to dst; returns how many. */
size_t sse_take(struct sse_buf *b, char *dst, size_t max);
void sse_free(struct sse_buf *b);

/* ---- auth.c ---- */

/* Whether a and b are equal, in time that depends only on their lengths. */
bool auth_equal(const char *a, size_t alen, const char *b, size_t blen);
/* Whether the Authorization header value (may be NULL) is "Bearer K" for one of the keys; true
 * when there are no keys. Every key is compared, whatever matches. */
bool auth_check(const struct server_opts *o, const char *authorization);
/* Append the keys of FILE (one per line; blank lines and lines starting with # skipped) to
 * *keys. Returns LL_OK, LL_EIO, LL_EINVAL (no key in the file) or LL_ENOMEM. */
enum ll_status auth_load_file(const char *path, char ***keys, int *n, struct ll_err *err);

/* ---- metrics.c: request-level counters and histograms (engine gauges come from
 * engine_get_stats when rendering) ---- */

#define METRICS_MAX_BUCKETS 24

struct histogram {
    const double *bounds; /* (n) upper bounds, ascending */
    int n;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, the last is +Inf (not cumulative) */
    double sum;
    uint64_t count;
};

enum cancel_reason {
    CANCEL_NONE,
    CANCEL_DISCONNECT, /* the client went away */
    CANCEL_ROUTE,      /* POST /v1/requests/{id}/cancel */
    CANCEL_TIMEOUT,    /* --request-timeout reached */
    CANCEL_SHUTDOWN,   /* the server stopped */
    CANCEL_COUNT
};

struct metrics {
    pthread_mutex_t lock;
    uint64_t finished[5];          /* by enum engine_finish (index 0 unused) */
    uint64_t cancellations[CANCEL_COUNT];
    uint64_t prompt_tokens, generation_tokens;
    uint64_t http[6];              /* responses by status class: 1xx..5xx (index 1..5) */
    uint64_t http_by_code[600];    /* responses by status code */
    struct histogram ttft, itl, queue, e2e;
};

enum ll_status metrics_init(struct metrics *m);
void metrics_free(struct metrics *m);
/* Record one finished choice (finish as the client saw it). */
void metrics_finish(struct metrics *m, enum engine_finish finish, enum cancel_reason why,
                    int prompt_tokens, int generated_tokens, double queue_s);
/* Record one request's time to first token (< 0: none) and end-to-end latency. */
void metrics_request(struct metrics *m, double ttft_s, double e2e_s);
/* Record n tokens that arrived together dt seconds after the previous ones (n samples of
 * dt / n each). */
void metrics_itl(struct metrics *m, double dt, int n);
void metrics_http(struct metrics *m, int status);
/* Prometheus text exposition (format 0.0.4) of everything, engine gauges included (st may be
 * NULL while loading). Caller frees; NULL on no memory. */
char *metrics_render(struct metrics *m, const struct engine_stats *st, const char *model,
                     int state);

/* ---- the server ---- */

enum server_state {
    SERVER_LOADING,
    SERVER_READY,
    SERVER_DRAINING, /* shutting down: new requests get 503 */
};

struct live_table;

struct server {
    const struct server_opts *opts;
    atomic_int state;            /* enum server_state */
    struct engine *engine;       /* valid once READY */
    const struct tokenizer *tok;
    struct chat_template *tmpl;  /* NULL: the model has no chat template */
    char *bos, *eos;             /* what the template sees as bos_token / eos_token */
    bool reasoning;              /* chat: split <think> reasoning into reasoning_content */
    char reasoning_why[96];      /* the choice and its reason, for the configuration print */
    int n_ctx;
    uint64_t gen_defaults_seed;  /* mixed into random seeds */
    const char *served_name;
    long long started;           /* Unix seconds */
    struct MHD_Daemon *mhd;
    struct live_table *live;
    struct metrics metrics;
};

/* ---- http.c: one HTTP request as the routes see it ---- */

struct http_ctx {
    struct server *srv;
    struct MHD_Connection *conn;
    char method[16];
    char *url;                   /* path without the query */
    char *body;                  /* (body_len) NUL-terminated */
    size_t body_len, body_cap;
    bool body_too_large;
    char xrid[129];              /* X-Request-Id: the client's if valid, else generated */
    char cors[256];              /* Access-Control-Allow-Origin to send, or "" */
    double t_arrival;            /* when the request line arrived */
    int status;                  /* status of the response queued (for the log), 0: none */
    bool log_done;               /* a generation job wrote the log line */
};

/* Start libmicrohttpd on the options' host and port (*port: the port bound, for port 0).
 * Returns LL_OK, LL_EINVAL (host not resolvable) or LL_EIO (cannot listen). */
enum ll_status http_start(struct server *srv, int *port, struct ll_err *err);
/* Stop accepting connections; returns the listening socket (close it after http_stop). */
int http_quiesce(struct server *srv);
/* Close every connection, join their threads, then close listen_fd (if >= 0). */
void http_stop(struct server *srv, int listen_fd);
/* Queue a response: JSON body (taken: freed here), status, the common headers (X-Request-Id,
 * CORS). NULL body answers 500. Returns MHD's result. */
enum MHD_Result http_respond_json(struct http_ctx *c, int status, char *body);
/* Queue the OpenAI error body for e (429 and 503 carry Retry-After). */
enum MHD_Result http_respond_error(struct http_ctx *c, const struct oai_error *e);
/* Queue a plain text response (copied). */
enum MHD_Result http_respond_text(struct http_ctx *c, int status, const char *type,
                                  const char *text);
/* Add X-Request-Id and CORS headers to a response. */
void http_add_common_headers(struct http_ctx *c, struct MHD_Response *r);
/* A fresh random id of 32 hex digits (+ NUL). */
void http_random_hex(char out[33]);
/* Give a stream's job to a new SSE response and queue it (the job then belongs to the
 * response, which finishes it when the connection is done with it). */
enum MHD_Result http_respond_stream(struct http_ctx *c, struct gen_job *job);

/* ---- gen_job.c: one chat/completions request in the engine ---- */

struct gen_choice {
    struct engine_req *req;
    struct engine_output out;    /* reused across polls */
    int index;                   /* choices[].index */
    int prompt;                  /* which prompt it continues */
    bool done;
    enum engine_finish finish;
    struct engine_usage usage;
    double queue_s;
    char *text;                  /* non-stream: the whole text (after the echoed prompt) */
    size_t len, cap;
    char *reasoning;             /* non-stream: the whole reasoning */
    size_t rlen, rcap;
    int32_t *ids;                /* non-stream with logprobs: (n_lp) tokens and their logprobs */
    struct sampler_logprobs *lp;
    int n_lp, cap_lp;
    char *echo;                  /* completions echo: the prompt's text, else NULL */
    size_t echo_len;
    long long chars;             /* characters of the text so far (logprobs text_offset) */
    int n_seen;                  /* tokens seen so far */
    double t_last;               /* when the last ones arrived */
};

struct gen_job {
    struct server *srv;
    struct oai_meta meta;
    char id[48];
    char xrid[129];
    char method[16], url[64];    /* for the log line */
    bool stream, include_usage;
    bool logprobs, reasoning, skip_special;
    int top_logprobs;
    int n_choices;
    struct gen_choice *ch;
    int prompt_tokens;           /* over all prompts, each counted once */
    double t_arrival, t_first, t_end;
    double keepalive;            /* seconds between SSE comments while nothing comes */
    double t_last_write;
    struct sse_buf sse;
    bool role_sent, sent_done;
    bool broken;                 /* out of memory while formatting: the response is cut */
    int status;                  /* HTTP status answered */

    /* [live] registration with the watcher */
    int fd;                      /* the connection's socket, -1: none */
    double deadline;             /* ll_now() limit, 0: none */
    bool registered;
    atomic_bool client_gone;
    atomic_bool timed_out;
    atomic_int cancel_reason;    /* enum cancel_reason, the first one wins */
    struct gen_job *live_prev, *live_next;
};

/* Submit one engine request per (prompt, choice) and register with the watcher. prompts[p] has
 * n_ids[p] ids. On LL_OK *out belongs to the caller (gen_job_finish); on error nothing is
 * left and *e says why (429 queue full, 400 too long, ...). */
enum ll_status gen_job_start(struct gen_job **out, struct http_ctx *c,
                             const struct oai_request *r, int32_t *const *prompts,
                             const int *n_ids, int n_prompts, struct oai_error *e);
/* Move what the engine produced into the job (chunks into job->sse when streaming, text
 * otherwise), waiting up to timeout_s when nothing is there yet. When every choice is done,
 * a stream gets its usage chunk and [DONE]. Returns true when anything happened. */
bool gen_job_pump(struct gen_job *j, double timeout_s);
bool gen_job_done(const struct gen_job *j);
/* Serve a non-stream request: wait for every choice, then queue the response (or drop the
 * connection if the client went away). Finishes the job. */
enum MHD_Result gen_job_respond(struct gen_job *j, struct http_ctx *c);
/* Release the engine requests (cancelling unfinished ones), unregister, record metrics, write
 * the log line, free. NULL is a no-op. */
void gen_job_finish(struct gen_job *j);

/* ---- live.c: jobs in flight, for cancellation; the hang-up watcher thread ---- */

enum ll_status live_create(struct live_table **out, struct ll_err *err);
/* Stop the watcher and free the table (it must be empty). NULL is a no-op. */
void live_destroy(struct live_table *t);
/* Register / unregister a job (the watcher polls its fd and checks its deadline). */
void live_add(struct live_table *t, struct gen_job *j);
void live_remove(struct live_table *t, struct gen_job *j);
/* Cancel every job whose response id or X-Request-Id is id. Returns how many. */
int live_cancel_id(struct live_table *t, const char *id);
/* Cancel every job (shutdown). */
void live_cancel_all(struct live_table *t, enum cancel_reason why);
int live_count(struct live_table *t);
/* Cancel a job's engine requests, recording why (with t->lock held or not: see live.c). */
void gen_job_cancel(struct gen_job *j, enum cancel_reason why);

/* ---- webui.c: the bundled chat application, served at / without an API key ---- */

/* One file of the WebUI, embedded at build time: webui/embed.mjs generates the table, which
 * only llaisys-server links (webui.c copes with its absence). */
struct webui_asset {
    const char *path;          /* URL path: "/index.html", "/assets/app-HASH.js", ... */
    const unsigned char *data; /* (len) the bytes */
    size_t len;
    const unsigned char *gz;   /* (gz_len) the same gzip-compressed, NULL: not worth it */
    size_t gz_len;
    const char *etag;          /* quoted strong ETag of data (a content hash) */
};
extern const struct webui_asset webui_assets[];
extern const int webui_n_assets;

/* Answer a GET/HEAD of the WebUI (/, /index.html, /assets/...) from the embedded files, or from
 * --webui-dir; returns false (nothing queued) for any other path, or when --no-webui. */
bool webui_route(struct http_ctx *c, enum MHD_Result *res);

/* ---- routes: each answers one request of http_ctx (after auth) ---- */

enum MHD_Result route_chat(struct http_ctx *c);        /* routes_chat.c */
enum MHD_Result route_completions(struct http_ctx *c); /* routes_completions.c */
enum MHD_Result route_models(struct http_ctx *c);      /* routes_info.c: GET /v1/models[/id] */
enum MHD_Result route_health(struct http_ctx *c);      /* routes_info.c */
enum MHD_Result route_metrics(struct http_ctx *c);     /* routes_info.c */
enum MHD_Result route_tokenize(struct http_ctx *c);    /* routes_tokenize.c */
enum MHD_Result route_detokenize(struct http_ctx *c);  /* routes_tokenize.c */
enum MHD_Result route_cancel(struct http_ctx *c, const char *id); /* routes_info.c */

/* Shared checks of the routes (routes_common.c). */
/* Answer 503 unless READY; returns true when ready. */
bool route_require_ready(struct http_ctx *c, enum MHD_Result *res);
/* LL_OK when model is NULL or the served name; else 404 model_not_found in *e. */
enum ll_status route_check_model(struct http_ctx *c, const char *model, struct oai_error *e);
/* Render the chat template for context and encode it (no BOS added: the template writes it
 * unless add_special). *ids is malloc'd. Errors: 400 template / 500. */
enum ll_status route_chat_encode(struct http_ctx *c, const struct cJSON *context,
                                 bool add_special, int32_t **ids, int *n, struct oai_error *e);

#endif
