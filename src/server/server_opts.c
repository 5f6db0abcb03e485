/*
 * server_opts.c: llaisys-server's options: one table gives each server option's flag,
 * environment variable, type, range and help; the engine's options come from the engine's own
 * table (engine_opts.h) under the server profile. Defaults, then LLAISYS_* variables, then
 * flags are applied. Called once on the main thread at start-up.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "auth.h"
#include "parse.h"
#include "pooling.h"
#include "reasoning.h"
#include "server.h"
#include "tool_calls.h"
#include "util.h"

enum opt_type {
    T_STR,     /* char * */
    T_INT,     /* int, in [min, max] */
    T_SIZE,    /* size_t bytes in [min, max]: 123, 64K, 512M, 2G (parse.h) */
    T_SECS,    /* double seconds >= 0 */
    T_BOOL,    /* bool: a flag without argument; variable 1/true/yes/on or 0/false/no/off */
    T_KEY,     /* one API key, added */
    T_KEYFILE, /* a file of API keys, added */
    T_LIST,    /* comma-separated list (CORS origins) */
    T_LEVEL,   /* log level */
};

struct opt_def {
    const char *flag;
    const char *env;
    enum opt_type type;
    size_t off;
    long long min, max;
    const char *arg;
    const char *help;
};

#define OFF(f) offsetof(struct server_opts, f)

static const struct opt_def defs[] = {
    {"--model", "LLAISYS_MODEL", T_STR, OFF(model_dir), 0, 0, "DIR",
     "Hugging Face model directory (required)"},
    {"--served-model-name", "LLAISYS_SERVED_MODEL_NAME", T_STR, OFF(served_name), 0, 0, "NAME",
     "model name clients use (default: the model directory's name)"},
    {"--host", "LLAISYS_HOST", T_STR, OFF(host), 0, 0, "ADDR",
     "address to listen on (default 127.0.0.1)"},
    {"--port", "LLAISYS_PORT", T_INT, OFF(port), 0, 65535, "N",
     "TCP port (default 8000; 0 picks a free one)"},
    {"--api-key", "LLAISYS_API_KEY", T_KEY, OFF(api_keys), 0, 0, "KEY",
     "require \"Authorization: Bearer KEY\" (repeatable; default: no auth)"},
    {"--api-key-file", "LLAISYS_API_KEY_FILE", T_KEYFILE, OFF(api_keys), 0, 0, "FILE",
     "API keys, one per line: KEY [name=NAME] [rpm=N] [tpm=N] [concurrency=N] (# comments)"},
    {"--key-rpm", "LLAISYS_KEY_RPM", T_INT, OFF(key_rpm), 0, 1000000000, "N",
     "requests per minute of each API key whose line in the key file sets no rpm= (default "
     "0: unlimited)"},
    {"--key-tpm", "LLAISYS_KEY_TPM", T_INT, OFF(key_tpm), 0, 1000000000, "N",
     "tokens per minute (prompt + generated) of each API key without tpm= (default 0: "
     "unlimited)"},
    {"--key-concurrency", "LLAISYS_KEY_CONCURRENCY", T_INT, OFF(key_concurrency), 0, 1000000,
     "N", "generation requests in flight at once per API key without concurrency= (default 0: "
     "unlimited)"},
    {"--metrics-public", "LLAISYS_METRICS_PUBLIC", T_BOOL, OFF(metrics_public), 0, 0, NULL,
     "serve /metrics without an API key"},
    {"--request-retention", "LLAISYS_REQUEST_RETENTION", T_SECS, OFF(request_retention), 0, 0,
     "SECS", "how long GET /v1/requests/{id} still answers after a request finished, then 404 "
             "(default 60; at most the last 1024 finished; 0: only while it runs)"},
    {"--metrics-window", "LLAISYS_METRICS_WINDOW", T_SECS, OFF(metrics_window), 0, 0, "SECS",
     "the window of /metrics' requests-per-second and p50/p99 gauges (default 60; 1..3600)"},
    {"--chat-template", "LLAISYS_CHAT_TEMPLATE", T_STR, OFF(chat_template), 0, 0, "FILE",
     "Jinja chat template to use instead of the model's"},
    {"--reasoning-parser", "LLAISYS_REASONING_PARSER", T_STR, OFF(reasoning_parser), 0, 0,
     "NAME", "deepseek_r1 or qwen3 (the same split): chat text up to </think> is "
             "reasoning_content; none: no split "
             "(default: deepseek_r1 when the chat template opens <think> or the tokenizer has "
             "<think> and </think>)"},
    {"--tool-parser", "LLAISYS_TOOL_PARSER", T_STR, OFF(tool_parser), 0, 0, "NAME",
     "hermes: <tool_call>{json}</tool_call>; deepseek_v3: <｜tool▁calls▁begin｜>...; "
     "llama3_json: the answer is {\"name\", \"parameters\"} calls (Llama 3.x); mistral: "
     "[TOOL_CALLS][{\"name\", \"arguments\"}, ...] (Mistral-Nemo); mistral_args: "
     "[TOOL_CALLS]NAME[ARGS]{...} per call (Mistral-Small 3.2, Devstral, Magistral); granite: "
     "<|tool_call|>[{\"name\", \"arguments\"}, ...] (Granite 3.x); none: "
     "refuse tools (default: from the chat template, else hermes)"},
    {"--pooling", "LLAISYS_POOLING", T_STR, OFF(pooling), 0, 0, "MODE",
     "how /v1/embeddings pools a text's hidden states: last, mean or first (default: the "
     "model directory's sentence-transformers files, else last, L2-normalized)"},
    {"--rerank-tokens", "LLAISYS_RERANK_TOKENS", T_STR, OFF(rerank_tokens), 0, 0, "NO,YES",
     "/v1/rerank scores a document by these next-token logits (sigmoid of YES minus NO; one "
     "token: sigmoid of its logit) (default: the checkpoint's score.weight, else no,yes for a "
     "Qwen3-Reranker directory, else /v1/rerank answers 400)"},
    {"--max-body", "LLAISYS_MAX_BODY", T_SIZE, OFF(max_body), 1, 1LL << 50, "SIZE",
     "largest request body, else 413 (default 8M)"},
    {"--request-timeout", "LLAISYS_REQUEST_TIMEOUT", T_SECS, OFF(request_timeout), 0, 0, "SECS",
     "time limit per request, then it ends with finish_reason length (default 600; 0: none)"},
    {"--write-timeout", "LLAISYS_WRITE_TIMEOUT", T_SECS, OFF(write_timeout), 0, 0, "SECS",
     "cancel a request whose client reads nothing this long (default 60)"},
    {"--sse-keepalive", "LLAISYS_SSE_KEEPALIVE", T_SECS, OFF(keepalive), 0, 0, "SECS",
     "SSE comment interval while no token comes (default 10; at most write-timeout/2)"},
    {"--shutdown-grace", "LLAISYS_SHUTDOWN_GRACE", T_SECS, OFF(shutdown_grace), 0, 0, "SECS",
     "on SIGINT/SIGTERM, time for in-flight requests before they are cancelled (default 30)"},
    {"--max-connections", "LLAISYS_MAX_CONNECTIONS", T_INT, OFF(max_connections), 1, 65536, "N",
     "open connections at most (default 512)"},
    {"--max-connections-per-ip", "LLAISYS_MAX_CONNECTIONS_PER_IP", T_INT,
     OFF(max_connections_per_ip), 1, 65536, "N",
     "open connections from one address at most (default 128)"},
    {"--header-timeout", "LLAISYS_HEADER_TIMEOUT", T_SECS, OFF(header_timeout), 0, 0, "SECS",
     "a request's head and body must arrive within this, else the connection is cut; also the "
     "idle limit between keep-alive requests (default 10)"},
    {"--cors-origins", "LLAISYS_CORS_ORIGINS", T_LIST, OFF(cors_origins), 0, 0, "LIST",
     "comma-separated origins allowed by CORS, or * (default: none)"},
    {"--log-level", "LLAISYS_LOG_LEVEL", T_LEVEL, OFF(log_level), 0, 0, "LEVEL",
     "error, warn, info (default) or debug"},
    {"--webui-dir", "LLAISYS_WEBUI_DIR", T_STR, OFF(webui_dir), 0, 0, "DIR",
     "serve the WebUI at / from DIR (e.g. webui/dist) instead of the built-in copy"},
    {"--no-webui", "LLAISYS_NO_WEBUI", T_BOOL, OFF(no_webui), 0, 0, NULL,
     "do not serve the WebUI (the chat application at /)"},
    {"--session-ttl", "LLAISYS_SESSION_TTL", T_SECS, OFF(session_ttl), 0, 0, "SECS",
     "idle time after which a session is forgotten (default 1800; 0: never)"},
    {"--max-sessions", "LLAISYS_MAX_SESSIONS", T_INT, OFF(max_sessions), 1, 1 << 20, "N",
     "sessions kept at most; past it the least recently used idle one goes (default 1024)"},
    {"--session-kv-share", "LLAISYS_SESSION_KV_SHARE", T_INT, OFF(session_kv_share), 0, 100,
     "PCT", "percent of the KV pool that sessions may keep pinned (default 50)"},
    {"--responses-store-mb", "LLAISYS_RESPONSES_STORE_MB", T_INT, OFF(responses_store_mb), 0,
     1 << 20, "MB", "memory for stored responses (/v1/responses with store, the default, for "
     "previous_response_id and GET /v1/responses/{id}); past it the least recently used go "
     "first (default 64; 0: none are stored)"},
};

/* One option of the help: "  FLAG ARG   help" and "[VARIABLE]" under the help. */
static void usage_line(FILE *f, const char *flag, const char *arg, const char *help,
                       const char *env)
{
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", flag, arg ? " " : "", arg ? arg : "");
    fprintf(f, "  %-28s %s\n  %-28s [%s]\n", left, help, "", env);
}

void server_opts_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-server --model DIR [options]\n"
               "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models,\n"
               "/health, /metrics, /tokenize, /detokenize, /v1/requests/{id}/cancel) and a chat\n"
               "WebUI at /.\n"
               "Plain HTTP only: put a TLS-terminating reverse proxy in front for HTTPS.\n"
               "Every option can also be set by its environment variable; flags win.\n\n");
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        usage_line(f, defs[i].flag, defs[i].arg, defs[i].help, defs[i].env);
    fprintf(f, "  %-28s %s\n  %-28s %s\n\nengine options:\n", "--help", "this text",
            "--version", "print the version");
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = &engine_opt_defs[i];
        char help[ENGINE_OPT_HELP_MAX];
        engine_opts_help(d, ENGINE_PROFILE_SERVER, help, sizeof help);
        usage_line(f, d->flag, d->arg, help, d->env);
    }
}

static int bad(const char *src, const char *what, const char *val)
{
    fprintf(stderr, "llaisys-server: %s: %s (got '%s'); see --help\n", src, what, val);
    return -1;
}

/* Report a value error from parse.h or engine_opts_set ("SRC: must be ... (got 'VAL')"). */
static int bad_err(const struct ll_err *err)
{
    fprintf(stderr, "llaisys-server: %s; see --help\n", err->msg);
    return -1;
}

static int add_str(char ***list, int *n, const char *s)
{
    char **l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
    if (!l)
        return -1;
    *list = l;
    if (!(l[*n] = strdup(s)))
        return -1;
    (*n)++;
    return 0;
}

static void free_list(char ***list, int *n)
{
    for (int i = 0; i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
}

/* Apply value val (NULL for a flag without argument) of option d from src. */
static int apply(struct server_opts *o, const struct opt_def *d, const char *val, const char *src)
{
    void *p = (char *)o + d->off;
    struct ll_err err = {0};
    switch (d->type) {
    case T_STR: {
        char **s = p;
        if (!val[0])
            return bad(src, "must not be empty", val);
        free(*s);
        if (!(*s = strdup(val)))
            return bad(src, "out of memory", val);
        return 0;
    }
    case T_INT: {
        long long v;
        if (ll_parse_int(src, val, d->min, d->max, &v, &err) != LL_OK)
            return bad_err(&err);
        *(int *)p = (int)v;
        return 0;
    }
    case T_SIZE:
        if (ll_parse_size(src, val, (uint64_t)d->min, (uint64_t)d->max, p, &err) != LL_OK)
            return bad_err(&err);
        return 0;
    case T_SECS: {
        errno = 0;
        char *end;
        double v = strtod(val, &end);
        if (!val[0] || *end || errno || !isfinite(v) || v < 0 || v > 1e7)
            return bad(src, "must be a number of seconds >= 0", val);
        *(double *)p = v;
        return 0;
    }
    case T_BOOL:
        return ll_parse_bool(src, val, p, &err) != LL_OK ? bad_err(&err) : 0;
    case T_KEY:
        if (!val[0] || strpbrk(val, " \t\r\n"))
            return bad(src, "an API key must be non-empty and without spaces", val);
        if (auth_add_key(o, val, NULL) != LL_OK)
            return bad(src, "out of memory", val);
        return 0;
    case T_KEYFILE: {
        if (auth_load_file(val, o, &err) != LL_OK)
            return bad(src, err.msg, val);
        return 0;
    }
    case T_LIST: {
        free_list(&o->cors_origins, &o->n_cors_origins);
        char *copy = strdup(val);
        if (!copy)
            return bad(src, "out of memory", val);
        int rc = 0;
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && !rc;
             tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ')
                tok++;
            size_t l = strlen(tok);
            while (l && tok[l - 1] == ' ')
                tok[--l] = 0;
            if (l && add_str(&o->cors_origins, &o->n_cors_origins, tok))
                rc = bad(src, "out of memory", val);
        }
        free(copy);
        return rc;
    }
    case T_LEVEL: {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        for (int i = 0; i < 4; i++) {
            if (!strcasecmp(val, names[i])) {
                *(enum log_level *)p = (enum log_level)i;
                return 0;
            }
        }
        return bad(src, "must be error, warn, info or debug", val);
    }
    }
    return -1;
}

static int set_default_str(char **s, const char *v)
{
    if (*s)
        return 0;
    *s = strdup(v);
    return *s ? 0 : -1;
}

int server_opts_parse(struct server_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->port = 8000;
    o->max_body = 8u << 20;
    o->request_timeout = 600;
    o->write_timeout = 60;
    o->keepalive = 10;
    o->session_ttl = 1800;
    o->max_sessions = 1024;
    o->session_kv_share = 50;
    o->responses_store_mb = 64;
    o->metrics_window = 60;
    o->request_retention = 60;
    o->shutdown_grace = 30;
    o->max_connections = 512;
    o->max_connections_per_ip = 128;
    o->header_timeout = 10;
    o->log_level = LOG_INFO;
    o->engine.profile = ENGINE_PROFILE_SERVER;

    struct ll_err err = {0};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        const char *v = getenv(defs[i].env);
        if (v && (v[0] || defs[i].type == T_BOOL) && apply(o, &defs[i], v, defs[i].env))
            return -1;
    }
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = &engine_opt_defs[i];
        const char *v = getenv(d->env);
        if (v && (v[0] || d->type == ENGINE_OPT_BOOL) &&
            engine_opts_set(&o->engine, d, v, d->env, &err) != LL_OK)
            return bad_err(&err);
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            server_opts_usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--version")) {
            printf("llaisys-server 0.1\n");
            return 1;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt_def *d = NULL;
        for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
            if (strlen(defs[i].flag) == name_len && !strncmp(defs[i].flag, arg, name_len))
                d = &defs[i];
        const struct engine_opt_def *ed = d ? NULL : engine_opts_find(arg, name_len);
        if (ed) {
            const char *val = eq ? eq + 1 : NULL;
            if (!eq && ed->type != ENGINE_OPT_BOOL && a + 1 < argc)
                val = argv[++a];
            if (engine_opts_set(&o->engine, ed, val, ed->flag, &err) != LL_OK)
                return bad_err(&err);
            continue;
        }
        if (!d) {
            fprintf(stderr, "llaisys-server: unknown option '%s'; see --help\n", arg);
            return -1;
        }
        const char *val = NULL;
        if (eq)
            val = eq + 1;
        else if (d->type != T_BOOL && a + 1 < argc)
            val = argv[++a];
        if (!val && d->type != T_BOOL) {
            fprintf(stderr, "llaisys-server: %s needs a value (%s); see --help\n", d->flag,
                    d->arg);
            return -1;
        }
        if (apply(o, d, val, d->flag))
            return -1;
    }

    for (int i = 0; i < o->n_api_keys; i++) { /* budgets not on a key's line: the defaults */
        struct key_budget *b = &o->key_budgets[i];
        b->rpm = b->rpm_set ? b->rpm : o->key_rpm;
        b->tpm = b->tpm_set ? b->tpm : o->key_tpm;
        b->concurrency = b->concurrency_set ? b->concurrency : o->key_concurrency;
        for (int k = 0; k < i; k++)
            if (!strcmp(o->key_budgets[k].name, b->name))
                return bad("--api-key-file", "two keys have the same name", b->name);
    }
    if (!o->model_dir) {
        fprintf(stderr, "llaisys-server: --model DIR is required (or LLAISYS_MODEL); see --help\n");
        return -1;
    }
    if (o->reasoning_parser && !reasoning_parser_valid(o->reasoning_parser))
        return bad("--reasoning-parser", "must be deepseek_r1, qwen3 or none",
                   o->reasoning_parser);
    if (o->tool_parser && !tools_parser_valid(o->tool_parser))
        return bad("--tool-parser",
                   "must be hermes, deepseek_v3, llama3_json, mistral, mistral_args, granite "
                   "or none",
                   o->tool_parser);
    enum ll_pooling pm;
    if (o->pooling && (!pooling_parse(o->pooling, &pm) || pm == LL_POOL_NONE))
        return bad("--pooling", "must be last, mean or first", o->pooling);
    /* The server profile's batch shape now, the context and the KV pool when the model loads;
     * options at odds with each other are refused here, not after the model was loaded. */
    engine_opts_resolve(&o->engine, NULL);
    if (engine_opts_check(&o->engine, &err) != LL_OK)
        return bad_err(&err);
    if (o->write_timeout < 1)
        return bad("--write-timeout", "must be at least 1 second", "0");
    if (o->metrics_window < 1 || o->metrics_window > 3600) {
        char v[32];
        snprintf(v, sizeof v, "%g", o->metrics_window);
        return bad("--metrics-window", "must be 1 to 3600 seconds", v);
    }
    if (o->header_timeout <= 0)
        return bad("--header-timeout", "must be more than 0 seconds", "0");
    if (o->keepalive <= 0 || o->keepalive > o->write_timeout / 2)
        o->keepalive = o->write_timeout / 2;
    if (!o->served_name) {
        /* the last path component, trailing slashes ignored */
        size_t len = strlen(o->model_dir);
        while (len > 1 && o->model_dir[len - 1] == '/')
            len--;
        size_t start = len;
        while (start && o->model_dir[start - 1] != '/')
            start--;
        if (!(o->served_name = strndup(o->model_dir + start, len - start)))
            return -1;
    }
    if (set_default_str(&o->host, "127.0.0.1"))
        return -1;
    if (o->webui_dir && !o->no_webui) {
        struct stat st;
        char *index = ll_path_join(o->webui_dir, "index.html");
        bool ok = index && stat(index, &st) == 0 && S_ISREG(st.st_mode);
        free(index);
        if (!ok)
            return bad("--webui-dir", "must be a directory holding index.html", o->webui_dir);
    }
    return 0;
}

void server_opts_print(const struct server_opts *o, const struct engine_opts *e, FILE *f)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    fprintf(f, "llaisys-server configuration:\n");
    fprintf(f, "  model: %s\n  served-model-name: %s\n  host: %s\n  port: %d\n", o->model_dir,
            o->served_name, o->host, o->port);
    fprintf(f, "  api-keys: %d%s\n", o->n_api_keys,
            o->n_api_keys ? (o->metrics_public ? " (metrics public)" : "") : " (no auth)");
    for (int i = 0; i < o->n_api_keys; i++) { /* names and budgets, never the keys */
        const struct key_budget *b = &o->key_budgets[i];
        fprintf(f, "    %s: rpm %d, tpm %d, concurrency %d (0: unlimited)\n", b->name, b->rpm,
                b->tpm, b->concurrency);
    }
    fprintf(f, "  chat-template: %s\n", o->chat_template ? o->chat_template : "(the model's)");
    if (e) {
        fprintf(f, "  ");
        engine_opts_print(f, e, "\n  ");
        fputc('\n', f);
    }
    fprintf(f,
            "  max-body: %zu bytes\n  request-timeout: %gs\n  write-timeout: %gs\n"
            "  sse-keepalive: %gs\n  shutdown-grace: %gs\n  max-connections: %d (per address "
            "%d)\n  header-timeout: %gs\n",
            o->max_body, o->request_timeout, o->write_timeout, o->keepalive, o->shutdown_grace,
            o->max_connections, o->max_connections_per_ip, o->header_timeout);
    fprintf(f, "  cors-origins: ");
    for (int i = 0; i < o->n_cors_origins; i++)
        fprintf(f, "%s%s", i ? "," : "", o->cors_origins[i]);
    fprintf(f, "%s\n  log-level: %s\n", o->n_cors_origins ? "" : "(none)", levels[o->log_level]);
    fprintf(f, "  webui: %s\n", o->no_webui ? "off" : o->webui_dir ? o->webui_dir : "built in");
}

void server_opts_free(struct server_opts *o)
{
    free(o->model_dir);
    free(o->served_name);
    free(o->host);
    free(o->chat_template);
    free(o->reasoning_parser);
    free(o->tool_parser);
    free(o->pooling);
    free(o->rerank_tokens);
    free(o->webui_dir);
    free_list(&o->api_keys, &o->n_api_keys);
    free(o->key_budgets);
    free_list(&o->cors_origins, &o->n_cors_origins);
    memset(o, 0, sizeof *o);
}
