/*
 * server.c: llaisys-server's lifetime on the main thread: listen first (so /health answers 503
 * while the model loads), load the engine and the chat template, serve until SIGINT/SIGTERM,
 * then shut down in reverse order: stop accepting, let in-flight requests finish for the grace
 * period (a second signal cuts it short), cancel the rest (their streams end with a final
 * chunk), close the connections, stop the engine.
 *
 * SIGINT/SIGTERM are blocked in every thread (the mask is set before any thread starts) and
 * taken synchronously here with sigtimedwait, so no handler runs in an arbitrary thread.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "chat_template.h"
#include "engine.h"
#include "http.h"
#include "live.h"
#include "log.h"
#include "metrics.h"
#include "model.h"
#include "ops.h"
#include "reasoning.h"
#include "server_impl.h"
#include "tokenizer.h"
#include "util.h"

/* Wait up to timeout_s for SIGINT/SIGTERM; returns the signal or 0. */
static int wait_signal(const sigset_t *set, double timeout_s)
{
    struct timespec ts = {.tv_sec = (time_t)timeout_s,
                          .tv_nsec = (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

/* Requests still running or still sending their end (server_impl.h, gen_open). */
static bool in_flight(struct server *srv)
{
    return live_count(srv->live) > 0 || atomic_load(&srv->gen_open) > 0;
}

static enum ll_status load_template(struct server *srv, const char *model_dir,
                                    struct ll_err *err)
{
    const struct server_opts *o = srv->opts;
    if (o->chat_template) {
        char *src;
        size_t len;
        enum ll_status s = ll_read_file(o->chat_template, &src, &len, err);
        if (s != LL_OK)
            return s;
        s = chat_template_compile(&srv->tmpl, src, err);
        free(src);
        if (s != LL_OK)
            return ll_err_prefix(err, "%s: ", o->chat_template);
        const char *bos = tokenizer_bos_token(srv->tok), *eos = tokenizer_eos_token(srv->tok);
        if ((bos && !(srv->bos = strdup(bos))) || (eos && !(srv->eos = strdup(eos))))
            return ll_err_set(err, LL_ENOMEM, "out of memory");
        return LL_OK;
    }
    enum ll_status s = chat_template_load_model(&srv->tmpl, &srv->bos, &srv->eos, model_dir, err);
    if (s == LL_EFORMAT || s == LL_EIO) { /* no template: completions still work */
        log_msg(LOG_WARN, "no chat template (%s): /v1/chat/completions will answer 400", err->msg);
        return LL_OK;
    }
    return s;
}

/* --reasoning-parser: forced on or off, else detected (reasoning.h). */
static void choose_reasoning(struct server *srv)
{
    srv->reasoning = reasoning_choose(srv->opts->reasoning_parser, srv->tmpl, srv->bos, srv->eos,
                                      srv->tok, srv->reasoning_why, sizeof srv->reasoning_why);
}

/* /v1/embeddings' pooling: --pooling, else the model directory's (pooling.h); a directory
 * whose pooling is not implemented leaves embeddings refused, with the reason, and the rest
 * of the server serving. */
static void choose_pooling(struct server *srv, const char *model_dir)
{
    struct ll_err err = {0};
    enum ll_pooling force = LL_POOL_NONE;
    if (srv->opts->pooling)
        pooling_parse(srv->opts->pooling, &force);
    if (pooling_choose(&srv->pooling, model_dir, force, &err) != LL_OK) {
        memcpy(srv->embed_why, err.msg, sizeof srv->embed_why);
        log_msg(LOG_WARN, "/v1/embeddings will answer 400: %s", err.msg);
    }
}

/* /v1/rerank's head and prompt (reranker.h); a model without one leaves reranking refused,
 * with the reason, and the rest of the server serving. Returns LL_OK, or the failure of the
 * head --rerank-tokens asks for by name (in *err). */
static enum ll_status choose_reranker(struct server *srv, struct ll_err *err)
{
    const char *tokens = srv->opts->rerank_tokens;
    enum ll_status s = reranker_choose(&srv->reranker, engine_model(srv->engine), srv->tok,
                                       srv->tmpl, srv->bos, srv->eos, tokens, err);
    if (s == LL_OK || (tokens && tokens[0]))
        return s;
    memcpy(srv->rerank_why, err->msg, sizeof srv->rerank_why);
    return LL_OK;
}

/* The tool format's markers that the tokenizer has as special tokens (Mistral's [TOOL_CALLS]):
 * skipping special tokens would take them out of the text the call parser reads. */
static void find_tool_tokens(struct server *sv)
{
    const char *marks[TOOLS_MAX_MARKERS];
    int n = tools_markers(sv->tools.format, marks);
    sv->n_tool_keep = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = tokenizer_token_to_id(sv->tok, marks[i]);
        if (id >= 0 && tokenizer_is_special(sv->tok, id))
            sv->tool_keep[sv->n_tool_keep++] = id;
    }
}

int server_run(const struct server_opts *o)
{
    log_set_level(o->log_level);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct server srv = {.opts = o, .served_name = o->served_name, .started = time(NULL)};
    atomic_init(&srv.state, SERVER_LOADING);
    struct ll_err err = {0};
    int rc = 1, port = 0, listen_fd = -1;
    sessions_init(&srv.sessions, o->session_ttl, o->max_sessions);
    resp_store_init(&srv.responses, (size_t)o->responses_store_mb << 20);
    if (metrics_init(&srv.metrics, o->metrics_window) != LL_OK) {
        fprintf(stderr, "llaisys-server: out of memory\n");
        return 1;
    }
    if (ratelimit_init(&srv.limits, o) != LL_OK) {
        metrics_free(&srv.metrics);
        fprintf(stderr, "llaisys-server: out of memory\n");
        return 1;
    }
    if (req_history_init(&srv.history, o->request_retention) != LL_OK) {
        ratelimit_free(&srv.limits);
        metrics_free(&srv.metrics);
        fprintf(stderr, "llaisys-server: out of memory\n");
        return 1;
    }
    if (live_create(&srv.live, &err) != LL_OK || live_create(&srv.heads, &err) != LL_OK ||
        http_start(&srv, &port, &err) != LL_OK) {
        fprintf(stderr, "llaisys-server: %s\n", err.msg);
        goto out;
    }
    bool v6 = strchr(o->host, ':') != NULL;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%d", v6 ? "[" : "", o->host, v6 ? "]" : "", port);
    log_msg(LOG_INFO, "listening on %s, loading %s", url, o->model_dir);

    double t0 = ll_now();
    enum ll_status s = engine_create(&srv.engine, o->model_dir, &o->engine, &err);
    if (s == LL_OK) {
        srv.tok = engine_tokenizer(srv.engine);
        s = load_template(&srv, o->model_dir, &err);
    }
    if (s == LL_OK) {
        choose_reasoning(&srv);
        tools_choose(&srv.tools, o->tool_parser, srv.tmpl, srv.bos, srv.eos);
        find_tool_tokens(&srv);
        choose_pooling(&srv, o->model_dir);
        s = choose_reranker(&srv, &err);
    }
    if (s == LL_OK)
        s = engine_start(srv.engine, &err);
    if (s != LL_OK) {
        fprintf(stderr, "llaisys-server: cannot load %s: %s\n", o->model_dir, err.msg);
        goto out;
    }
    srv.n_ctx = engine_get_opts(srv.engine)->n_ctx;
    engine_set_pin_limit(srv.engine,
                         (int)((long long)engine_get_opts(srv.engine)->kv_blocks *
                               o->session_kv_share / 100));
    sessions_set_engine(&srv.sessions, srv.engine);
    server_opts_print(o, engine_get_opts(srv.engine), stderr);
    fprintf(stderr, "  reasoning-parser: %s\n", srv.reasoning_why);
    fprintf(stderr, "  tool-parser: %s\n", srv.tools.why);
    if (srv.pooling.mode)
        fprintf(stderr, "  pooling: %s%s (%s)\n", pooling_name(srv.pooling.mode),
                srv.pooling.normalize ? ", L2-normalized" : "", srv.pooling.source);
    else
        fprintf(stderr, "  pooling: none: %s\n", srv.embed_why);
    if (srv.reranker.n_rows)
        fprintf(stderr, "  rerank: %s; prompt %d + %d tokens around each pair\n",
                srv.reranker.source, srv.reranker.n_head, srv.reranker.n_tail);
    else
        fprintf(stderr, "  rerank: none: %s\n", srv.rerank_why);
    const struct model *m = engine_model(srv.engine);
    fprintf(stderr, "  kernels: matmul %s, ops %s, attention %s\n",
            model_matmul_variant(m), ll_ops_variant(),
            ll_attention_variant(m->config.head_dim));
    atomic_store(&srv.state, SERVER_READY);
    log_msg(LOG_INFO, "ready in %.1fs: model '%s' (context %d) at %s", ll_now() - t0,
            srv.served_name, srv.n_ctx, url);
    /* the line scripts wait for (stdout, flushed) */
    printf("llaisys-server: serving '%s' at %s\n", srv.served_name, url);
    fflush(stdout);

    int sig;
    while (!(sig = wait_signal(&set, 3600)))
        ;
    log_msg(LOG_INFO, "%s: shutting down: no new connections; %d request%s in flight",
            sig == SIGINT ? "SIGINT" : "SIGTERM", live_count(srv.live),
            live_count(srv.live) == 1 ? "" : "s");
    atomic_store(&srv.state, SERVER_DRAINING);
    listen_fd = http_quiesce(&srv);
    if (listen_fd >= 0) { /* closed now, not after the grace: a new client is refused at once
                             instead of waiting in the backlog and being reset */
        close(listen_fd);
        listen_fd = -1;
    }
    double until = ll_now() + o->shutdown_grace;
    while (in_flight(&srv) && ll_now() < until) {
        if (wait_signal(&set, 0.05)) {
            log_msg(LOG_INFO, "second signal: cancelling now");
            break;
        }
    }
    if (live_count(srv.live) > 0) {
        log_msg(LOG_INFO, "cancelling %d request(s) still in flight", live_count(srv.live));
        live_cancel_all(srv.live, CANCEL_SHUTDOWN);
    }
    /* the cancelled (or just finished) streams send their last events and [DONE] */
    for (double end = ll_now() + 10; in_flight(&srv) && ll_now() < end;)
        wait_signal(&set, 0.02);
    rc = 0;
out:
    http_stop(&srv, listen_fd); /* joins every connection thread: no job is left after it */
    sessions_set_engine(&srv.sessions, NULL);
    engine_destroy(srv.engine);
    sessions_free(&srv.sessions);
    resp_store_free(&srv.responses);
    live_destroy(srv.live);
    live_destroy(srv.heads); /* empty: every connection closed in http_stop */
    reranker_free(&srv.reranker);
    chat_template_free(srv.tmpl);
    free(srv.bos);
    free(srv.eos);
    metrics_free(&srv.metrics);
    ratelimit_free(&srv.limits);
    req_history_free(&srv.history);
    if (rc == 0)
        log_msg(LOG_INFO, "stopped");
    return rc;
}
