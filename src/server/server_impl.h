/*
 * server_impl.h: the state every part of the server reads: struct server, set up by server.c.
 * Each module of src/server/ has its own header (respond.h, routes.h, gen_job.h, sse.h, live.h,
 * metrics.h, auth.h, webui.h, http.h, request_id.h); this one holds only what they all share.
 *
 * Threads and ownership:
 *   - main: server_run (start-up, model load, signals, shutdown). It writes `engine`, `tmpl`
 *     and friends before it stores SERVER_READY in `state`; HTTP threads read them only after
 *     loading `state` as READY (acquire), and they never change afterwards until shutdown,
 *     which first waits for every connection thread to end.
 *   - one libmicrohttpd thread per connection: its struct http_ctx (respond.h) and its
 *     generation job (gen_job.c) belong to it. The SSE content reader runs on that thread too,
 *     so a job is only ever touched by its connection's thread, except for its struct
 *     live_entry (live.h), which the watcher and the cancel route touch under the live
 *     table's lock.
 *   - watcher (live.c): polls the sockets of every registered request for hang-up, enforces
 *     the request time limit, and cancels through the entry's callback; it never frees one.
 *   - the engine's scheduler thread: talks to jobs only through the engine API.
 * Lock order: the live table's lock, then the engine's mailbox lock (engine_cancel from a
 * cancel callback); metrics->lock, limits.lock, history.lock and responses.lock are leaves; nothing else is held while waiting on the engine.
 */
#ifndef LLAISYS_SERVER_IMPL_H
#define LLAISYS_SERVER_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "metrics.h"
#include "pooling.h"
#include "ratelimit.h"
#include "req_history.h"
#include "reranker.h"
#include "resp_store.h"
#include "sessions.h"
#include "server.h"
#include "tool_calls.h"

struct MHD_Daemon;
struct chat_template;
struct engine;
struct live_table;
struct tokenizer;

enum server_state {
    SERVER_LOADING,
    SERVER_READY,
    SERVER_DRAINING, /* shutting down: new requests get 503 */
};

struct server {
    const struct server_opts *opts;
    atomic_int state;            /* enum server_state */
    struct engine *engine;       /* valid once READY */
    const struct tokenizer *tok;
    struct chat_template *tmpl;  /* NULL: the model has no chat template */
    char *bos, *eos;             /* what the template sees as bos_token / eos_token */
    bool reasoning;              /* chat: split <think> reasoning into reasoning_content */
    char reasoning_why[96];      /* the choice and its reason, for the configuration print */
    struct tool_setup tools;     /* the tool-call format (tool_calls.h) */
    int32_t tool_keep[TOOLS_MAX_MARKERS]; /* the format's markers that are special tokens of
                                             the tokenizer: kept in the text of answers to
                                             requests with tools (tools_markers) */
    int n_tool_keep;
    struct pooling_config pooling; /* /v1/embeddings (pooling.h); mode LL_POOL_NONE: refused,
                                      embed_why says why */
    char embed_why[512];
    struct reranker reranker;      /* /v1/rerank (reranker.h); n_rows 0: refused, rerank_why
                                      says why */
    char rerank_why[512];
    int n_ctx;
    const char *served_name;
    long long started;           /* Unix seconds */
    struct MHD_Daemon *mhd;      /* http.c's */
    struct live_table *live;
    /* requests holding a generation job whose response has not completed (on_completed in
     * http.c): a stream's last events may still be on their way after its job has left `live`
     * (gen_job.c settles a job before its end reaches the client), so shutdown waits on both */
    atomic_int gen_open;
    struct live_table *heads;  /* connections whose request head/body is still arriving
                                  (http.c): cut at --header-timeout */
    struct metrics metrics;
    struct ratelimit limits;     /* per-key budgets (ratelimit.h) */
    struct req_history history;  /* finished requests for GET /v1/requests/{id} */
    struct sessions sessions;    /* sessions.h */
    struct resp_store responses; /* stored responses (resp_store.h) */
};

#endif
