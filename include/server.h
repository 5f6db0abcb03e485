/*
 * server.h: llaisys-server, the OpenAI-compatible HTTP server: its options (flags and
 * LLAISYS_* environment variables) and its lifetime.
 *
 * Threads (see src/server/server_impl.h for the details): main (start-up, model load, signals,
 * orderly shutdown), one libmicrohttpd thread per connection (parse, auth, template, tokenize,
 * submit, then write the response or the SSE stream from the request's outbox), the hang-up
 * watcher (client disconnects and request time limits), and the engine's scheduler thread.
 */
#ifndef LLAISYS_SERVER_H
#define LLAISYS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "engine.h"
#include "errors.h"
#include "log.h"

/* One API key's budgets: from its line in --api-key-file ("KEY name=N rpm=N tpm=N
 * concurrency=N", each optional), else the --key-* defaults. 0: unlimited. */
struct key_budget {
    int rpm;                  /* requests per minute (generation requests) */
    int tpm;                  /* tokens per minute: prompt + generated */
    int concurrency;          /* generation requests in flight at once */
    char name[48];            /* the label in /metrics and logs: name=, else "key-" and 8 hex
                                 digits of a hash of the key (never the key) */
    bool rpm_set, tpm_set, concurrency_set; /* given on the key's line (else the default) */
};

/* Everything the server is configured with. Strings are owned by the struct
 * (server_opts_free). */
struct server_opts {
    char *model_dir;          /* --model (required) */
    char *served_name;        /* --served-model-name (default: the model directory's name) */
    char *host;               /* --host (default 127.0.0.1) */
    int port;                 /* --port (default 8000; 0: any free port, printed) */
    char **api_keys;          /* --api-key (repeatable) and the lines of --api-key-file */
    struct key_budget *key_budgets; /* (n_api_keys) each key's budgets, resolved against the
                                 defaults once every option is read */
    int n_api_keys;
    int key_rpm, key_tpm, key_concurrency; /* --key-rpm, --key-tpm, --key-concurrency: budgets
                                 of keys whose line does not set them (default 0: none) */
    bool metrics_public;      /* --metrics-public: /metrics without a key */
    char *chat_template;      /* --chat-template FILE, else NULL (the model's) */
    char *reasoning_parser;   /* --reasoning-parser NAME, else NULL */
    char *tool_parser;        /* --tool-parser NAME (tools_parser_valid), else NULL */
    char *pooling;            /* --pooling last|mean|first, else NULL (pooling.h) */
    char *rerank_tokens;      /* --rerank-tokens NO,YES, else NULL (reranker.h) */
    struct engine_opts engine; /* the engine's options (engine_opts.h: --threads, --ctx, ...),
                                  server profile, resolved but for what needs the model
                                  (n_ctx and the KV pool stay 0 until engine_create) */
    size_t max_body;          /* --max-body bytes (default 8 MiB) */
    double request_timeout;   /* --request-timeout seconds per request, 0: none (default 600) */
    double write_timeout;     /* --write-timeout seconds without client progress (default 60) */
    double keepalive;         /* --sse-keepalive seconds between SSE comments while no token
                                 comes (default 10; at most write_timeout / 2) */
    double shutdown_grace;    /* --shutdown-grace seconds for in-flight requests (default 30) */
    int max_connections;      /* --max-connections (default 512) */
    int max_connections_per_ip; /* --max-connections-per-ip (default 128) */
    double header_timeout;    /* --header-timeout seconds for a request's whole head and body,
                                 and for an idle keep-alive connection (default 10) */
    char **cors_origins;      /* --cors-origins "a,b" or "*" (default: no CORS headers) */
    int n_cors_origins;
    enum log_level log_level; /* --log-level error|warn|info|debug (default info) */
    char *webui_dir;          /* --webui-dir DIR: serve the WebUI from DIR, else the built-in */
    bool no_webui;            /* --no-webui: nothing at / */
    double session_ttl;       /* --session-ttl seconds idle before a session expires (default
                                 1800; 0: never) */
    int max_sessions;         /* --max-sessions (default 1024) */
    int responses_store_mb;   /* --responses-store-mb: memory for stored responses (default 64;
                                 0: none are stored) */
    int session_kv_share;     /* --session-kv-share: percent of the KV pool pinned sessions
                                 may hold (default 50) */
    double request_retention; /* --request-retention seconds GET /v1/requests/{id} still
                                 answers after a request finished (default 60; 0: until it
                                 finishes) */
    double metrics_window;    /* --metrics-window seconds the sliding-window gauges cover
                                 (default 60, 1..3600) */
};

/* Fill *o from the defaults, then LLAISYS_* environment variables, then argv (flags win); the
 * engine's options go through the engine's table (engine_opts.h) and are checked together.
 * Returns 0 (ready), 1 (--help or --version was printed: exit 0) or -1 (a message naming the
 * option was printed to stderr: exit 2). *o must be freed with server_opts_free in every case. */
int server_opts_parse(struct server_opts *o, int argc, char **argv);

/* Print the usage text (every flag, its variable and default; the engine's from its table). */
void server_opts_usage(FILE *f);

/* Print the effective configuration, one "name: value" per line (keys are not printed; the
 * engine's options by engine_opts_print, named as their flags). */
void server_opts_print(const struct server_opts *o, const struct engine_opts *resolved, FILE *f);

void server_opts_free(struct server_opts *o);

/* Run the server until SIGINT/SIGTERM: listen, load the model (/health answers 503 meanwhile),
 * serve, then drain and stop. Returns the process exit code: 0 after an orderly shutdown, 1 when
 * start-up failed (the reason is printed). */
int server_run(const struct server_opts *o);

#endif
