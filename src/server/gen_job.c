/*
 * gen_job.c: one chat/completions request in flight: its engine requests (one per prompt and
 * choice, with the request's sampling and stopping controls), the text, reasoning_content and
 * logprobs or the SSE chunks made from their outputs (reasoning and answer in separate chunks),
 * echo, usage, finish reasons, metrics and the request's log line.
 *
 * A job belongs to its connection's thread (the route handler, then the SSE content reader);
 * the watcher and the cancel route only call gen_job_cancel on it under the live table's lock,
 * and the job is unregistered before it is freed. The engine merges what a slow reader has not
 * taken yet, so nothing here ever makes the scheduler wait.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "server_impl.h"
#include "tokenizer.h"
#include "util.h"

static void job_free(struct gen_job *j)
{
    for (int i = 0; i < j->n_choices; i++) {
        engine_output_free(&j->ch[i].out);
        free(j->ch[i].text);
        free(j->ch[i].reasoning);
        free(j->ch[i].ids);
        free(j->ch[i].lp);
        free(j->ch[i].echo);
    }
    sse_free(&j->sse);
    free(j->ch);
    free(j);
}

static enum ll_status submit_error(enum ll_status s, const struct ll_err *err, int n_prompt,
                                   int n_ctx, struct oai_error *e)
{
    switch (s) {
    case LL_EOVERLOADED:
        return oai_error_set(e, s, NULL, "queue_full",
                             "The server is busy (its request queue is full); retry later");
    case LL_ETOOLONG:
        return oai_error_set(e, s, NULL, "context_length_exceeded",
                             "The request cannot fit: the prompt has %d tokens and the context "
                             "%d (%s)", n_prompt, n_ctx, err->msg);
    case LL_EINVAL:
        return oai_error_set(e, s, NULL, "invalid_value", "%s", err->msg);
    default:
        return oai_error_set(e, s, NULL, NULL, "cannot start the request: %s", err->msg);
    }
}

enum ll_status gen_job_start(struct gen_job **out, struct http_ctx *c,
                             const struct oai_request *r, int32_t *const *prompts,
                             const int *n_ids, int n_prompts, struct oai_error *e)
{
    struct server *srv = c->srv;
    *out = NULL;
    /* a prompt that cannot fit is the client's error, named with both numbers */
    for (int p = 0; p < n_prompts; p++) {
        const char *param = r->kind == OAI_CHAT ? "messages" : "prompt";
        if (n_ids[p] >= srv->n_ctx)
            return oai_error_set(e, LL_ETOOLONG, param, "context_length_exceeded",
                                 "This model's maximum context length is %d tokens, but the "
                                 "prompt%s has %d tokens", srv->n_ctx, n_prompts > 1 ? "s" : "",
                                 n_ids[p]);
        if (r->max_tokens > 0 && (long long)n_ids[p] + r->max_tokens > srv->n_ctx)
            return oai_error_set(e, LL_ETOOLONG, "max_tokens", "context_length_exceeded",
                                 "This model's maximum context length is %d tokens, but %lld "
                                 "were requested (%d in the prompt, %d for the completion)",
                                 srv->n_ctx, (long long)n_ids[p] + r->max_tokens, n_ids[p],
                                 r->max_tokens);
    }

    struct gen_job *j = calloc(1, sizeof *j);
    int n = r->n * n_prompts;
    if (!j || !(j->ch = calloc((size_t)n, sizeof *j->ch))) {
        free(j);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    j->srv = srv;
    j->n_choices = n;
    j->fd = -1;
    j->stream = r->stream;
    j->include_usage = r->stream && r->include_usage;
    j->t_arrival = c->t_arrival;
    j->t_last_write = ll_now();
    j->keepalive = srv->opts->keepalive;
    char hex[33];
    http_random_hex(hex);
    snprintf(j->id, sizeof j->id, "%s-%s", r->kind == OAI_CHAT ? "chatcmpl" : "cmpl", hex);
    snprintf(j->xrid, sizeof j->xrid, "%s", c->xrid);
    snprintf(j->method, sizeof j->method, "%s", c->method);
    snprintf(j->url, sizeof j->url, "%s", c->url);
    j->meta = (struct oai_meta){.kind = r->kind, .id = j->id, .created = (long long)time(NULL),
                                .model = srv->served_name};

    j->logprobs = r->logprobs;
    j->top_logprobs = r->top_logprobs;
    j->reasoning = r->kind == OAI_CHAT && srv->reasoning;
    j->skip_special = r->skip_special_tokens;
    struct engine_params base;
    oai_request_params(r, &engine_model(srv->engine)->gen, &base);
    enum ll_status s = LL_OK;
    int i = 0;
    for (int p = 0; p < n_prompts && s == LL_OK; p++) {
        j->prompt_tokens += n_ids[p];
        /* the choices of one prompt are submitted together, choice 0 first: the others wait
         * for its prompt blocks and share them (engine.h) */
        for (int k = 0; k < r->n; k++, i++) {
            struct gen_choice *ch = &j->ch[i];
            ch->index = i;
            ch->prompt = p;
            struct ll_err err = {0};
            if (r->echo && (s = tokenizer_decode(srv->tok, prompts[p], (size_t)n_ids[p],
                                                 r->skip_special_tokens, &ch->echo,
                                                 &ch->echo_len, &err)) != LL_OK) {
                oai_error_set(e, s, NULL, NULL, "out of memory");
                break;
            }
            if (ch->echo)
                ch->chars = oai_logprobs_chars(srv->tok, prompts[p], n_ids[p],
                                               r->skip_special_tokens);
            struct engine_params ep = base;
            ep.prompt = prompts[p];
            ep.n_prompt = n_ids[p];
            ep.choice = k;
            ep.reasoning = j->reasoning;
            if ((s = engine_submit(srv->engine, &ep, &ch->req, &err)) != LL_OK) {
                submit_error(s, &err, n_ids[p], srv->n_ctx, e);
                break;
            }
        }
    }
    if (s != LL_OK) {
        for (int q = 0; q < i; q++)
            engine_req_release(j->ch[q].req);
        job_free(j);
        return s;
    }

    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->deadline = srv->opts->request_timeout > 0 ? j->t_arrival + srv->opts->request_timeout : 0;
    live_add(srv->live, j);
    *out = j;
    return LL_OK;
}

bool gen_job_done(const struct gen_job *j)
{
    for (int i = 0; i < j->n_choices; i++)
        if (!j->ch[i].done)
            return false;
    return true;
}

static const char *finish_reason(const struct gen_job *j, const struct gen_choice *c)
{
    if (c->finish == ENGINE_FINISH_CANCELLED && atomic_load(&j->timed_out))
        return "length";
    return engine_finish_str(c->finish);
}

static void usage_of(const struct gen_job *j, struct oai_usage *u)
{
    memset(u, 0, sizeof *u);
    u->prompt_tokens = j->prompt_tokens;
    int last_prompt = -1;
    for (int i = 0; i < j->n_choices; i++) {
        const struct gen_choice *c = &j->ch[i];
        u->completion_tokens += c->usage.completion_tokens > c->n_seen
                                    ? c->usage.completion_tokens : c->n_seen;
        u->reasoning_tokens += c->usage.reasoning_tokens;
        if (c->prompt != last_prompt) /* the prompt's cache hit, once per prompt */
            u->cached_tokens += c->usage.cached_tokens;
        last_prompt = c->prompt;
    }
}

/* Queue one SSE event (false: out of memory, the stream is then ended). */
static void emit(struct gen_job *j, char *json)
{
    if (!json || !sse_event(&j->sse, json))
        j->broken = true;
    free(json);
}

/* Append n bytes to a growable string. false: out of memory. */
static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *len + n + 1)
            nc *= 2;
        char *t = realloc(*buf, nc);
        if (!t)
            return false;
        *buf = t;
        *cap = nc;
    }
    if (n)
        memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

/* Keep the ids and logprobs of a poll (non-stream). */
static bool keep_logprobs(struct gen_choice *c, const struct engine_output *o)
{
    if (c->n_lp + o->n_ids > c->cap_lp) {
        int cap = c->cap_lp ? c->cap_lp : 64;
        while (cap < c->n_lp + o->n_ids)
            cap *= 2;
        int32_t *ids = realloc(c->ids, sizeof *ids * (size_t)cap);
        if (ids)
            c->ids = ids;
        struct sampler_logprobs *lp = ids ? realloc(c->lp, sizeof *lp * (size_t)cap) : NULL;
        if (!lp)
            return false;
        c->lp = lp;
        c->cap_lp = cap;
    }
    memcpy(c->ids + c->n_lp, o->ids, sizeof *c->ids * (size_t)o->n_ids);
    memcpy(c->lp + c->n_lp, o->logprobs, sizeof *c->lp * (size_t)o->n_ids);
    c->n_lp += o->n_ids;
    return true;
}

/* The logprobs of ids[0..n) for a response. */
static struct oai_logprobs logprobs_of(const struct gen_job *j, const int32_t *ids,
                                       const struct sampler_logprobs *lp, int n,
                                       long long offset)
{
    return (struct oai_logprobs){.ids = ids, .lp = lp, .n = n, .top = j->top_logprobs,
                                 .tok = j->srv->tok, .skip_special = j->skip_special,
                                 .text_offset = offset};
}

/* Stream what one poll brought: the reasoning, then the answer, each in its own chunk; the
 * poll's logprobs ride on the first chunk (or on an empty one when all text is held). */
static void stream_delta(struct gen_job *j, struct gen_choice *c, const struct engine_output *o)
{
    bool lp = j->logprobs && o->n_ids > 0 && o->logprobs;
    struct oai_logprobs L = lp ? logprobs_of(j, o->ids, o->logprobs, o->n_ids, c->chars)
                               : (struct oai_logprobs){0};
    if (lp)
        c->chars += oai_logprobs_chars(j->srv->tok, o->ids, o->n_ids, j->skip_special);
    bool sent = false;
    if (o->reasoning_len && j->meta.kind == OAI_CHAT) {
        struct oai_choice d = {.index = c->index, .reasoning = o->reasoning,
                               .reasoning_len = o->reasoning_len, .logprobs = lp ? &L : NULL};
        emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
        sent = true;
    }
    if (o->text_len || (lp && !sent)) {
        struct oai_choice d = {.index = c->index, .text = o->text ? o->text : "",
                               .text_len = o->text_len, .logprobs = lp && !sent ? &L : NULL};
        emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
    }
}

static void handle(struct gen_job *j, struct gen_choice *c)
{
    const struct engine_output *o = &c->out;
    double now = ll_now();
    if (o->n_ids > 0) {
        if (c->n_seen == 0) {
            if (j->t_first == 0)
                j->t_first = now;
        } else {
            metrics_itl(&j->srv->metrics, now - c->t_last, o->n_ids);
        }
        c->n_seen += o->n_ids;
        c->t_last = now;
    }
    if (j->stream) {
        stream_delta(j, c, o);
    } else if (!append(&c->text, &c->len, &c->cap, o->text, o->text_len) ||
               !append(&c->reasoning, &c->rlen, &c->rcap, o->reasoning, o->reasoning_len) ||
               (j->logprobs && o->n_ids > 0 && o->logprobs && !keep_logprobs(c, o))) {
        j->broken = true;
        return;
    }
    if (o->finish != ENGINE_RUNNING) {
        c->done = true;
        c->finish = o->finish;
        c->usage = o->usage;
        c->queue_s = o->timings.queue_s;
        if (o->finish == ENGINE_FINISH_ERROR)
            log_msg(LOG_ERROR, "request %s choice %d failed: %s", j->xrid, c->index, o->error);
        if (j->stream && o->finish == ENGINE_FINISH_ERROR) {
            struct oai_error e;
            oai_error_set(&e, LL_EMODEL, NULL, NULL, "generation failed: %s", o->error);
            emit(j, oai_error_json(&e));
        } else if (j->stream) {
            struct oai_choice d = {.index = c->index, .finish_reason = finish_reason(j, c)};
            emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
        }
    }
}

static bool poll_all(struct gen_job *j)
{
    bool any = false;
    for (int i = 0; i < j->n_choices; i++) {
        struct gen_choice *c = &j->ch[i];
        if (!c->done && engine_poll(c->req, &c->out)) {
            handle(j, c);
            any = true;
        }
    }
    return any;
}

bool gen_job_pump(struct gen_job *j, double timeout_s)
{
    if (j->stream && !j->role_sent) { /* chat streams open with the role of every choice, */
        j->role_sent = true;          /* completions with the echoed prompts */
        for (int i = 0; i < j->n_choices; i++) {
            struct oai_choice d = {.index = j->ch[i].index, .text = j->ch[i].echo,
                                   .text_len = j->ch[i].echo_len};
            if (j->meta.kind == OAI_CHAT || d.text)
                emit(j, oai_stream_chunk(&j->meta, &d, j->meta.kind == OAI_CHAT,
                                         j->include_usage));
        }
        return true;
    }
    bool any = poll_all(j);
    if (!any && timeout_s > 0) {
        /* the choices of one request usually advance in the same engine steps, so waiting on
         * the first unfinished one and then polling the rest misses little; but one may wait
         * in the queue while others run, so with several the wait is kept short */
        if (j->n_choices > 1 && timeout_s > 0.02)
            timeout_s = 0.02;
        for (int i = 0; i < j->n_choices; i++) {
            struct gen_choice *c = &j->ch[i];
            if (c->done)
                continue;
            if (engine_wait(c->req, &c->out, timeout_s)) {
                handle(j, c);
                any = true;
                poll_all(j);
            }
            break;
        }
    }
    if (j->stream && !j->sent_done && gen_job_done(j)) {
        if (j->include_usage) {
            struct oai_usage u;
            usage_of(j, &u);
            emit(j, oai_stream_usage(&j->meta, &u));
        }
        if (!sse_done(&j->sse))
            j->broken = true;
        j->sent_done = true;
        any = true;
    }
    return any;
}

enum MHD_Result gen_job_respond(struct gen_job *j, struct http_ctx *c)
{
    /* libmicrohttpd would count the whole generation as client inactivity */
    MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    while (!gen_job_done(j) && !j->broken)
        gen_job_pump(j, 1.0);
    MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned)c->srv->opts->write_timeout);
    c->log_done = true;
    if (atomic_load(&j->client_gone)) {
        j->status = 499; /* (nginx's word for it; nothing is sent) */
        c->status = 499;
        gen_job_finish(j);
        return MHD_NO;
    }
    enum MHD_Result res;
    struct oai_error e;
    const struct gen_choice *failed = NULL;
    for (int i = 0; i < j->n_choices; i++)
        if (j->ch[i].finish == ENGINE_FINISH_ERROR)
            failed = &j->ch[i];
    if (j->broken) {
        oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
        res = http_respond_error(c, &e);
    } else if (failed) {
        oai_error_set(&e, LL_EMODEL, NULL, NULL, "generation failed: %s", failed->out.error);
        res = http_respond_error(c, &e);
    } else {
        struct oai_choice *cs = calloc(j->n_choices > 0 ? (size_t)j->n_choices : 1, sizeof *cs);
        char *body = NULL;
        if (cs) {
            struct oai_logprobs *lps = calloc((size_t)j->n_choices, sizeof *lps);
            for (int i = 0; lps && i < j->n_choices; i++) {
                struct gen_choice *ch = &j->ch[i];
                size_t cap = ch->echo_len + 1; /* (tokenizer_decode's allocation) */
                if (ch->echo && !append(&ch->echo, &ch->echo_len, &cap, ch->text, ch->len)) {
                    j->broken = true; /* the prompt's text, then the completion */
                    break;
                }
                lps[i] = logprobs_of(j, ch->ids, ch->lp, ch->n_lp, ch->chars);
                cs[i] = (struct oai_choice){
                    .index = ch->index, .text = ch->echo ? ch->echo : ch->text,
                    .text_len = ch->echo ? ch->echo_len : ch->len,
                    .reasoning = j->reasoning ? (ch->reasoning ? ch->reasoning : "") : NULL,
                    .reasoning_len = ch->rlen, .logprobs = j->logprobs ? &lps[i] : NULL,
                    .finish_reason = finish_reason(j, ch)};
            }
            struct oai_usage u;
            usage_of(j, &u);
            if (lps && !j->broken)
                body = oai_response_body(&j->meta, cs, j->n_choices, &u);
            free(lps);
            free(cs);
        }
        res = http_respond_json(c, 200, body);
    }
    j->status = c->status;
    gen_job_finish(j);
    return res;
}

void gen_job_finish(struct gen_job *j)
{
    if (!j)
        return;
    struct server *srv = j->srv;
    live_remove(srv->live, j);
    j->t_end = ll_now();
    enum cancel_reason why = (enum cancel_reason)atomic_load(&j->cancel_reason);
    if (why == CANCEL_NONE)
        why = CANCEL_DISCONNECT; /* ended before the engine did: the connection went away */
    int completion = 0;
    for (int i = 0; i < j->n_choices; i++) {
        struct gen_choice *c = &j->ch[i];
        if (!c->done) { /* released unfinished: the engine cancels it */
            c->finish = ENGINE_FINISH_CANCELLED;
            c->done = true;
        }
        engine_req_release(c->req);
        c->req = NULL;
        enum engine_finish seen = c->finish;
        enum cancel_reason r = CANCEL_NONE;
        if (seen == ENGINE_FINISH_CANCELLED) {
            r = atomic_load(&j->timed_out) ? CANCEL_TIMEOUT : why;
            if (r == CANCEL_TIMEOUT)
                seen = ENGINE_FINISH_LENGTH;
        }
        int gen = c->usage.completion_tokens > c->n_seen ? c->usage.completion_tokens : c->n_seen;
        completion += gen;
        bool first_of_prompt = i == 0 || j->ch[i - 1].prompt != c->prompt;
        metrics_finish(&srv->metrics, seen, r, first_of_prompt ? c->usage.prompt_tokens : 0, gen,
                       c->queue_s);
    }
    double ttft = j->t_first > 0 ? j->t_first - j->t_arrival : -1;
    metrics_request(&srv->metrics, ttft, j->t_end - j->t_arrival);
    if (log_enabled(LOG_INFO)) {
        const struct gen_choice *c0 = &j->ch[0];
        struct oai_usage u;
        usage_of(j, &u);
        double itl = c0->n_seen > 1 ? (c0->t_last - j->t_first) / (c0->n_seen - 1) : 0;
        log_msg(LOG_INFO,
                "%s %s %s %d model=%s finish=%s choices=%d prompt=%d cached=%d completion=%d "
                "ttft=%.3fs itl=%.1fms e2e=%.3fs%s",
                j->xrid, j->method, j->url, j->status, srv->served_name, finish_reason(j, c0),
                j->n_choices, u.prompt_tokens, u.cached_tokens, completion,
                ttft > 0 ? ttft : 0, itl * 1e3, j->t_end - j->t_arrival,
                j->stream ? " stream" : "");
    }
    job_free(j);
}
