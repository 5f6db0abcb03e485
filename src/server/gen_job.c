/*
 * gen_job.c: one chat/completions request in flight: its engine requests (one per prompt and
 * choice, with the request's sampling and stopping controls), the text, reasoning_content and
 * logprobs or the SSE chunks made from their outputs (reasoning and answer in separate chunks),
 * echo, usage, finish reasons, metrics and the request's log line.
 *
 * A job belongs to its connection's thread (the route handler, then the SSE response's reader);
 * the watcher and the cancel route only reach it through its live entry, whose callback
 * (gen_job_cancel) they call under the live table's lock, and the job is unregistered before it
 * is freed. The engine merges what a slow reader has not taken yet, so nothing here ever makes
 * the scheduler wait.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "gen_job.h"
#include "hash.h"
#include "json.h"
#include "live.h"
#include "log.h"
#include "metrics.h"
#include "model.h"
#include "openai_response.h"
#include "request_id.h"
#include "responses_out.h"
#include "server_impl.h"
#include "sse.h"
#include "tokenizer.h"
#include "tool_calls.h"
#include "util.h"

struct gen_choice {
    struct engine_req *req;
    struct engine_output out;    /* reused across polls */
    int index;                   /* choices[].index */
    int prompt;                  /* which prompt it continues */
    bool done;
    enum engine_finish finish;
    struct engine_usage usage;
    double queue_s;
    struct ll_buf text;          /* non-stream: the whole text (after the echoed prompt) */
    struct ll_buf reasoning;     /* non-stream: the whole reasoning */
    int32_t *ids;                /* non-stream with logprobs: (n_lp) tokens and their logprobs */
    struct sampler_logprobs *lp;
    int n_lp, cap_lp;
    char *echo;                  /* completions echo: the prompt's text, else NULL */
    size_t echo_len;
    long long chars;             /* characters of the text so far (logprobs text_offset) */
    int n_seen;                  /* tokens seen so far */
    double t_last;               /* when the last ones arrived */
    struct tool_parser tp;       /* tools: the calls in the answer */
    struct ll_buf content;       /* tools: the answer's text around the calls (per poll when
                                    streaming, whole otherwise) */
    struct resp_track *items;    /* responses: the output items so far, in order */
    int n_items, cap_items;
    int open_reasoning, open_message, open_call; /* responses: the open items, -1 none */
    bool unsent;                 /* embeddings: not submitted (yet) */
    float *vec;                  /* embeddings: the vector that came with the finish (dim) */
    int dim;
};

/* One output item of a /v1/responses answer: its text is [start, end) of the choice's
 * reasoning (RI_REASONING) or text (RI_MESSAGE) buffer, or call `call` of its parser. */
struct resp_track {
    enum resp_item_kind kind;
    char id[40];
    size_t start, end;
    int call;
    bool done;
};

struct gen_job {
    struct server *srv;
    struct oai_meta meta;
    char id[48];
    char xrid[129];
    char method[16], url[64];    /* for the log line */
    bool stream, include_usage;
    bool logprobs, reasoning, skip_special;
    bool tools, legacy_call;     /* parse tool calls (tool_calls.h); answer function_call */
    cJSON *resp_echo;            /* responses: what the response object repeats */
    cJSON *resp_input;           /* responses with store: the conversation's input items */
    uint64_t owner;              /* ... and the key it belongs to (request_owner) */
    int seq;                     /* responses: the next event's sequence_number */
    int top_logprobs;
    int n_choices;
    struct gen_choice *ch;
    int prompt_tokens;           /* over all prompts, each counted once */
    double t_arrival, t_first, t_end;
    double keepalive;            /* seconds between SSE comments while nothing comes */
    struct sse_buf sse;          /* stream: the chunks waiting to be written */
    bool role_sent, sent_done;
    bool settled;                /* job_settle has run */
    double ttft, tpot;           /* (job_settle) seconds, -1: none */
    int completion;              /* (job_settle) tokens generated over all choices */
    bool broken;                 /* out of memory while formatting: the response is cut */
    int status;                  /* HTTP status answered */
    struct live_entry live;      /* registration with the watcher (its flags: [live]) */
    int rl_key;                  /* the key whose budgets it took (ratelimit.h), -1: none */
    int rl_prompt;               /* the prompt tokens it took */
    uint64_t session_key;        /* the turn's session (sessions.h), 0: none */
    int32_t *sess_ids;           /* (n_sess, cap_sess) the prompt, then choice 0's tokens */
    int n_sess, cap_sess;
    /* choices whose engine requests the watcher may see (describe, cancel): all of them from
     * the start, but an embedding's, which are submitted as the engine has room (embed_refill:
     * at most max_seqs at once); published after each submit */
    atomic_int n_sent;
    atomic_bool stop_submit;     /* cancelled: submit no more */
    int32_t *const *eprompts;    /* embeddings: the inputs' ids (the route's: alive until
                                    gen_job_respond returns, and an embedding never streams) */
    const int *en_ids;
    struct engine_params ebase;
    int n_submitted;
    bool sub_failed;             /* a submit failed: the answer is sub_err */
    struct oai_error sub_err;
    bool embed_base64;
    int dimensions;
    /* rerank: top_n (0: all) and the documents when return_documents (the route's request's:
     * alive until gen_job_respond returns), else NULL */
    int top_n;
    const struct oai_prompt *rdocs;
};

/* An embeddings or rerank job: its choices are inputs submitted as the engine has room, each
 * finishing with a vector. */
static bool pooled_kind(enum oai_kind k)
{
    return k == OAI_EMBEDDING || k == OAI_RERANK;
}

static void job_free(struct gen_job *j)
{
    for (int i = 0; i < j->n_choices; i++) {
        engine_output_free(&j->ch[i].out);
        ll_buf_free(&j->ch[i].text);
        ll_buf_free(&j->ch[i].reasoning);
        free(j->ch[i].ids);
        free(j->ch[i].lp);
        free(j->ch[i].echo);
        tool_parser_free(&j->ch[i].tp);
        ll_buf_free(&j->ch[i].content);
        free(j->ch[i].items);
        free(j->ch[i].vec);
    }
    cJSON_Delete(j->resp_echo);
    cJSON_Delete(j->resp_input);
    sse_free(&j->sse);
    free(j->sess_ids);
    free(j->ch);
    free(j);
}

/* A job that never ran: give its key's budgets back, free it. */
static void job_refuse(struct gen_job *j)
{
    ratelimit_end(&j->srv->limits, j->rl_key, j->rl_prompt, 0, true);
    job_free(j);
}

/* ---- status (GET /v1/requests/{id}) ---- */

static const char *finish_reason(const struct gen_job *j, const struct gen_choice *c);
static void usage_of(const struct gen_job *j, struct oai_usage *u);

static const char *state_word(enum engine_req_state s)
{
    switch (s) {
    case ENGINE_REQ_WAITING:
        return "waiting";
    case ENGINE_REQ_RUNNING:
        return "running";
    case ENGINE_REQ_PREEMPTED:
        return "preempted";
    case ENGINE_REQ_FINISHED:
        break;
    }
    return "finished";
}

/* A number of seconds, or null when t < 0 (not yet). */
static void put_secs(struct ll_buf *b, const char *name, double t)
{
    ll_buf_printf(b, ",\"%s\":", name);
    if (t < 0)
        ll_buf_puts(b, "null");
    else
        ll_json_put_num(b, t);
}

/* ,"state":STATE,"finish_reason":FINISH (NULL: null). */
static void put_state(struct ll_buf *b, const char *state, const char *finish)
{
    ll_buf_puts(b, ",\"state\":");
    ll_json_put_cstr(b, state);
    ll_buf_puts(b, ",\"finish_reason\":");
    if (finish)
        ll_json_put_cstr(b, finish);
    else
        ll_buf_puts(b, "null");
}

/* The status object's start: ids, state, finish reason (NULL: null). */
static void status_head(const struct gen_job *j, struct ll_buf *b, const char *state,
                        const char *finish)
{
    ll_buf_puts(b, "{\"id\":");
    ll_json_put_cstr(b, j->id);
    ll_buf_puts(b, ",\"object\":\"request\",\"request_id\":");
    ll_json_put_cstr(b, j->xrid);
    ll_buf_puts(b, ",\"model\":");
    ll_json_put_cstr(b, j->srv->served_name);
    ll_buf_puts(b, ",\"created\":");
    ll_json_put_int(b, j->meta.created);
    ll_buf_puts(b, ",\"stream\":");
    ll_buf_puts(b, j->stream ? "true" : "false");
    put_state(b, state, finish);
}

/* One choice's entry. */
static void status_choice(struct ll_buf *b, int index, const char *state, const char *finish,
                          const struct engine_usage *u, bool first)
{
    ll_buf_printf(b, "%s{\"index\":%d", first ? "" : ",", index);
    put_state(b, state, finish);
    ll_buf_printf(b, ",\"prompt_tokens\":%d,\"cached_tokens\":%d,\"completion_tokens\":%d,"
                  "\"preemptions\":%d}", u->prompt_tokens, u->cached_tokens,
                  u->completion_tokens, u->preemptions);
}

/* The live entry's describe callback (the live table's lock held: the job is registered, its
 * engine requests are not released). Reads only what does not change after gen_job_start and
 * the engine's view of each choice (engine_req_info). */
static void gen_job_describe(void *owner, struct ll_buf *b)
{
    struct gen_job *j = owner;
    struct engine_req_info *info = calloc((size_t)j->n_choices, sizeof *info);
    if (!info) {
        b->failed = true;
        return;
    }
    bool any[ENGINE_REQ_FINISHED + 1] = {false};
    int prompt = 0, completion = 0, last_prompt = -1, sent = atomic_load(&j->n_sent);
    for (int i = 0; i < j->n_choices; i++) {
        if (i < sent) /* else not submitted yet: waiting */
            engine_req_info(j->ch[i].req, &info[i]);
        any[info[i].state] = true;
        completion += info[i].usage.completion_tokens;
        if (j->ch[i].prompt != last_prompt)
            prompt += info[i].usage.prompt_tokens;
        last_prompt = j->ch[i].prompt;
    }
    /* the request is as far as its least advanced choice that is not finished */
    const char *state = any[ENGINE_REQ_RUNNING]     ? "running"
                        : any[ENGINE_REQ_PREEMPTED] ? "preempted"
                        : any[ENGINE_REQ_WAITING]   ? "waiting"
                                                    : "finished";
    status_head(j, b, state,
                info[0].state == ENGINE_REQ_FINISHED && !strcmp(state, "finished")
                    ? engine_finish_str(info[0].finish)
                    : NULL);
    ll_buf_puts(b, ",\"choices\":[");
    for (int i = 0; i < j->n_choices; i++)
        status_choice(b, j->ch[i].index, state_word(info[i].state),
                      info[i].state == ENGINE_REQ_FINISHED ? engine_finish_str(info[i].finish)
                                                           : NULL,
                      &info[i].usage, i == 0);
    ll_buf_printf(b, "],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}", prompt,
                  completion);
    ll_buf_puts(b, ",\"timings\":{");
    const struct engine_req_info *f = &info[0];
    ll_buf_puts(b, "\"elapsed_s\":");
    ll_json_put_num(b, ll_now() - j->t_arrival);
    put_secs(b, "queue_s", f->started_at > 0 ? f->started_at - f->submitted_at : -1);
    put_secs(b, "ttft_s", f->first_token_at > 0 ? f->first_token_at - j->t_arrival : -1);
    ll_buf_puts(b, "}}");
    free(info);
}

/* The final status, kept after the job ends (every choice done). */
static char *job_final_status(const struct gen_job *j, const char *finish, double tpot,
                              double ttft)
{
    struct ll_buf b = {0};
    status_head(j, &b, "finished", finish);
    ll_buf_puts(&b, ",\"choices\":[");
    for (int i = 0; i < j->n_choices; i++) {
        const struct gen_choice *c = &j->ch[i];
        struct engine_usage u = c->usage;
        if (c->n_seen > u.completion_tokens)
            u.completion_tokens = c->n_seen;
        status_choice(&b, c->index, "finished", finish_reason(j, c), &u, i == 0);
    }
    struct oai_usage u;
    usage_of(j, &u);
    ll_buf_printf(&b, "],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}",
                  u.prompt_tokens, u.completion_tokens);
    ll_buf_puts(&b, ",\"timings\":{\"elapsed_s\":");
    ll_json_put_num(&b, j->t_end - j->t_arrival);
    put_secs(&b, "queue_s", j->ch[0].queue_s > 0 ? j->ch[0].queue_s : -1);
    put_secs(&b, "ttft_s", ttft);
    put_secs(&b, "tpot_s", tpot);
    put_secs(&b, "e2e_s", j->t_end - j->t_arrival);
    ll_buf_puts(&b, "}}");
    return ll_buf_take(&b);
}

/* The live entry's callback: cancel the engine requests (with the live table's lock held, so
 * the job is registered and alive; the engine requests are released only after unregistering). */
static void gen_job_cancel(void *owner)
{
    struct gen_job *j = owner;
    atomic_store(&j->stop_submit, true); /* before reading n_sent: see embed_refill */
    int sent = atomic_load(&j->n_sent);
    for (int i = 0; i < sent; i++)
        if (j->ch[i].req)
            engine_cancel(j->ch[i].req);
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

/* The embedding's choices not submitted are done: cancelled (a cancel, or a failed submit). */
static void embed_give_up(struct gen_job *j)
{
    for (int i = j->n_submitted; i < j->n_choices; i++) {
        j->ch[i].done = true;
        j->ch[i].finish = ENGINE_FINISH_CANCELLED;
    }
    for (int i = 0; j->sub_failed && i < j->n_submitted; i++)
        if (!j->ch[i].done)
            engine_cancel(j->ch[i].req);
}

/* Submit the embedding's next inputs while fewer than max_seqs of its choices run (the job's
 * thread). A full queue while some of them still run waits for the next pump (their finish
 * makes room); any other refusal fails the job (sub_failed, sub_err). */
static void embed_refill(struct gen_job *j)
{
    struct server *srv = j->srv;
    int limit = engine_get_opts(srv->engine)->max_seqs, running = 0;
    for (int i = 0; i < j->n_submitted; i++)
        running += !j->ch[i].done;
    while (j->n_submitted < j->n_choices && running < limit && !j->sub_failed) {
        if (atomic_load(&j->stop_submit)) {
            embed_give_up(j);
            return;
        }
        int i = j->n_submitted;
        struct engine_params ep = j->ebase;
        ep.prompt = j->eprompts[i];
        ep.n_prompt = j->en_ids[i];
        struct ll_err err = {0};
        struct engine_req *req;
        enum ll_status s = engine_submit(srv->engine, &ep, &req, &err);
        if (s == LL_EOVERLOADED && running > 0)
            return;
        if (s != LL_OK) {
            submit_error(s, &err, ep.n_prompt, srv->n_ctx, &j->sub_err);
            j->sub_failed = true;
            embed_give_up(j);
            return;
        }
        j->ch[i].req = req;
        j->ch[i].unsent = false;
        atomic_store(&j->n_sent, ++j->n_submitted);
        /* a cancel that read n_sent before this store set stop_submit first */
        if (atomic_load(&j->stop_submit))
            engine_cancel(req);
        running++;
    }
}

/* The turn's session: session_id in the body, else the X-Session-Id header; found or made
 * (sessions.h) for the key that authorised the request. One prompt and one choice per turn. */
static enum ll_status session_start(struct gen_job *j, struct http_ctx *c,
                                    const struct oai_request *r, int32_t *const *prompts,
                                    const int *n_ids, int n_prompts, struct oai_error *e)
{
    struct server *srv = c->srv;
    const char *sid = r->session_id;
    if (!sid)
        sid = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "X-Session-Id");
    if (!sid)
        return LL_OK;
    if (!session_id_valid(sid, e))
        return e->status;
    if (n_prompts != 1 || r->n != 1)
        return oai_error_set(e, LL_EUNSUPPORTED, "session_id", "unsupported_parameter",
                             "a session turn takes one prompt and n = 1");
    j->sess_ids = malloc((size_t)(n_ids[0] + 64) * sizeof *j->sess_ids);
    if (!j->sess_ids)
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    memcpy(j->sess_ids, prompts[0], (size_t)n_ids[0] * sizeof *j->sess_ids);
    j->n_sess = n_ids[0];
    j->cap_sess = n_ids[0] + 64;
    return sessions_begin(&srv->sessions, sid, request_owner(c), true, prompts[0], n_ids[0],
                          &j->session_key, e);
}

uint64_t request_owner(struct http_ctx *c)
{
    if (c->srv->opts->n_api_keys == 0)
        return 0;
    const char *a = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Authorization");
    return a ? ll_hash_bytes(a, strlen(a)) | 1 : 0;
}

/* Keep choice 0's new tokens for the session's history. */
static void session_keep(struct gen_job *j, const struct engine_output *o)
{
    if (j->n_sess + o->n_ids > j->cap_sess) {
        int cap = 2 * (j->n_sess + o->n_ids);
        int32_t *p = realloc(j->sess_ids, (size_t)cap * sizeof *p);
        if (!p) {
            j->broken = true;
            return;
        }
        j->sess_ids = p;
        j->cap_sess = cap;
    }
    memcpy(j->sess_ids + j->n_sess, o->ids, (size_t)o->n_ids * sizeof *o->ids);
    j->n_sess += o->n_ids;
}

enum ll_status gen_job_start(struct gen_job **out, struct http_ctx *c,
                             const struct oai_request *r, int32_t *const *prompts,
                             const int *n_ids, int n_prompts, struct oai_error *e)
{
    struct server *srv = c->srv;
    *out = NULL;
    /* a prompt that cannot fit is the client's error, named with both numbers */
    for (int p = 0; p < n_prompts; p++) {
        const char *param = r->kind == OAI_CHAT         ? "messages"
                            : r->kind == OAI_RESPONSES  ? "input"
                            : r->kind == OAI_EMBEDDING ? "input"
                            : r->kind == OAI_RERANK    ? "documents"
                                                        : "prompt";
        if (pooled_kind(r->kind) ? n_ids[p] > srv->n_ctx : n_ids[p] >= srv->n_ctx)
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

    /* the caller's key's budgets (ratelimit.h): refused before anything is made */
    int prompt_tokens = 0;
    for (int p = 0; p < n_prompts; p++)
        prompt_tokens += n_ids[p];
    int rl_key = srv->opts->n_api_keys ? c->key : -1, retry = 0;
    enum rl_limit over = ratelimit_admit(&srv->limits, rl_key, prompt_tokens, &retry);
    if (over != RL_NONE) {
        const struct key_budget *b = &srv->opts->key_budgets[rl_key];
        c->retry_after = retry;
        return oai_error_set(e, LL_EOVERLOADED, NULL, "rate_limit_exceeded",
                             "Rate limit reached for key '%s': %s (limit %d%s); retry in %d s",
                             b->name,
                             over == RL_CONCURRENCY ? "requests in flight at once"
                             : over == RL_RPM       ? "requests per minute"
                                                    : "tokens per minute",
                             over == RL_CONCURRENCY ? b->concurrency
                             : over == RL_RPM       ? b->rpm
                                                    : b->tpm,
                             over == RL_TPM ? ", prompt + generated tokens" : "", retry);
    }
    struct gen_job *j = calloc(1, sizeof *j);
    int n = r->n * n_prompts;
    if (!j || !(j->ch = calloc((size_t)n, sizeof *j->ch))) {
        free(j);
        ratelimit_end(&srv->limits, rl_key, prompt_tokens, 0, true);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    j->rl_key = rl_key;
    j->rl_prompt = prompt_tokens;
    j->srv = srv;
    j->n_choices = n;
    j->live.fd = -1;
    j->stream = r->stream;
    j->include_usage = r->stream && r->include_usage;
    j->t_arrival = c->t_arrival;
    j->keepalive = srv->opts->keepalive;
    char hex[33];
    request_id_random(hex);
    if (r->kind == OAI_RESPONSES)
        snprintf(j->id, sizeof j->id, "resp_%s", hex);
    else if (r->kind == OAI_EMBEDDING)
        snprintf(j->id, sizeof j->id, "embd-%s", hex);
    else if (r->kind == OAI_RERANK)
        snprintf(j->id, sizeof j->id, "rerank-%s", hex);
    else
        snprintf(j->id, sizeof j->id, "%s-%s", r->kind == OAI_CHAT ? "chatcmpl" : "cmpl", hex);
    if ((r->resp_echo && !(j->resp_echo = cJSON_Duplicate(r->resp_echo, true))) ||
        (r->store && !(j->resp_input = cJSON_Duplicate(r->resp_input, true)))) {
        job_refuse(j);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    if (r->store)
        j->owner = request_owner(c);
    snprintf(j->xrid, sizeof j->xrid, "%s", c->xrid);
    snprintf(j->method, sizeof j->method, "%s", c->method);
    snprintf(j->url, sizeof j->url, "%s", c->url);
    j->meta = (struct oai_meta){.kind = r->kind, .id = j->id, .created = (long long)time(NULL),
                                .model = srv->served_name};

    j->logprobs = r->logprobs;
    j->top_logprobs = r->top_logprobs;
    j->reasoning = r->kind != OAI_COMPLETION && srv->reasoning;
    j->skip_special = r->skip_special_tokens;
    j->tools = r->kind != OAI_COMPLETION && r->tools && r->tool_choice != OAI_TOOL_NONE &&
               srv->tools.format != TOOL_FORMAT_NONE;
    j->legacy_call = r->legacy_functions;
    for (int i = 0; i < n; i++) {
        tool_parser_init(&j->ch[i].tp, srv->tools.format);
        j->ch[i].open_reasoning = j->ch[i].open_message = j->ch[i].open_call = -1;
    }
    if (pooled_kind(r->kind)) {
        for (int p = 0; p < n_prompts; p++) {
            j->prompt_tokens += n_ids[p];
            j->ch[p].index = j->ch[p].prompt = p;
            j->ch[p].unsent = true;
        }
        j->eprompts = prompts;
        j->en_ids = n_ids;
        j->ebase = (struct engine_params){
            .embed = r->kind == OAI_RERANK ? LL_POOL_LAST : srv->pooling.mode,
            .cache_prefix = r->cache_prefix, .no_cache = r->no_cache};
        j->embed_base64 = r->embed_base64;
        j->dimensions = r->dimensions;
        j->top_n = r->top_n;
        j->rdocs = r->return_documents ? r->prompts : NULL;
        embed_refill(j);
        if (j->sub_failed) {
            for (int q = 0; q < j->n_submitted; q++)
                engine_req_release(j->ch[q].req);
            *e = j->sub_err;
            job_refuse(j);
            return e->status;
        }
        goto registered;
    }
    struct engine_params base;
    oai_request_params(r, &engine_model(srv->engine)->gen, &base);
    if (j->tools) { /* the call markers stay in the text for the parser */
        base.keep_ids = srv->tool_keep;
        base.n_keep_ids = srv->n_tool_keep;
    }
    enum ll_status s = session_start(j, c, r, prompts, n_ids, n_prompts, e);
    if (s != LL_OK) {
        job_refuse(j);
        return s;
    }
    base.pin_key = j->session_key;
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
        if (j->session_key)
            sessions_end(&srv->sessions, j->session_key, false, NULL, 0, NULL, 0, 0);
        job_refuse(j);
        return s;
    }
    atomic_store(&j->n_sent, n);

registered:;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->live.fd = ci ? ci->connect_fd : -1;
    j->live.deadline =
        srv->opts->request_timeout > 0 ? j->t_arrival + srv->opts->request_timeout : 0;
    j->live.id = j->id;
    j->live.xrid = j->xrid;
    j->live.cancel = gen_job_cancel;
    j->live.describe = gen_job_describe;
    j->live.owner = j;
    j->live.key = c->key;
    live_add(srv->live, &j->live);
    atomic_fetch_add(&srv->gen_open, 1);
    c->gen_open = true;
    *out = j;
    return LL_OK;
}

static void gen_job_finish(struct gen_job *j);
static void job_settle(struct gen_job *j);

static bool gen_job_done(const struct gen_job *j)
{
    for (int i = 0; i < j->n_choices; i++)
        if (!j->ch[i].done)
            return false;
    return true;
}

static const char *finish_reason(const struct gen_job *j, const struct gen_choice *c)
{
    if (c->finish == ENGINE_FINISH_CANCELLED && atomic_load(&j->live.timed_out))
        return "length";
    if (c->finish == ENGINE_FINISH_STOP && c->tp.n_calls > 0)
        return j->legacy_call ? "function_call" : "tool_calls";
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
        u->spec_drafted += c->usage.spec_drafted;
        u->spec_accepted += c->usage.spec_accepted;
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
    if (o->reasoning.len && j->meta.kind == OAI_CHAT) {
        struct oai_choice d = {.index = c->index, .reasoning = o->reasoning.data,
                               .reasoning_len = o->reasoning.len, .logprobs = lp ? &L : NULL};
        emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
        sent = true;
    }
    const char *text = o->text.len ? o->text.data : "";
    size_t text_len = o->text.len;
    if (j->tools) { /* the answer through the call parser */
        ll_buf_clear(&c->content);
        tool_parser_feed(&c->tp, text, text_len, o->finish != ENGINE_RUNNING, &c->content);
        if (c->tp.failed)
            j->broken = true;
        text = c->content.data ? c->content.data : "";
        text_len = c->content.len;
    }
    if (text_len || (lp && !sent)) {
        struct oai_choice d = {.index = c->index, .text = text, .text_len = text_len,
                               .logprobs = lp && !sent ? &L : NULL};
        emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
    }
    struct tool_piece pc;
    while (j->tools && tool_parser_next(&c->tp, &pc)) {
        if (j->legacy_call && pc.index > 0)
            continue; /* the legacy shape has one call */
        if (!pc.start && !pc.len)
            continue; /* its end: nothing to say */
        const struct tool_call *tc = &c->tp.calls[pc.index];
        struct oai_call call = {pc.start ? tc->id : NULL, pc.start ? tc->name : NULL, pc.args};
        struct oai_choice d = {.index = c->index, .calls = &call, .n_calls = 1,
                               .first_call = pc.index, .legacy_call = j->legacy_call};
        emit(j, oai_stream_chunk(&j->meta, &d, false, j->include_usage));
    }
}


/* ---- /v1/responses: output items and typed events ---- */

/* Queue one typed event (streams only). */
static void r_emit(struct gen_job *j, const char *type, cJSON *obj)
{
    if (!j->stream) {
        cJSON_Delete(obj);
        return;
    }
    char *text = resp_event(type, j->seq++, obj);
    if (!text || !sse_named_event(&j->sse, type, text))
        j->broken = true;
    free(text);
}

/* The item k of choice c as the JSON builders see it. */
static struct resp_item r_view(const struct gen_choice *c, int k)
{
    const struct resp_track *t = &c->items[k];
    struct resp_item it = {.kind = t->kind, .done = t->done};
    memcpy(it.id, t->id, sizeof it.id);
    if (t->kind == RI_CALL) {
        const struct tool_call *tc = &c->tp.calls[t->call];
        it.call_id = tc->id;
        it.name = tc->name;
        it.arguments = t->done ? tool_call_args(tc) : ""; /* added with "", then deltas */
    } else {
        const struct ll_buf *b = t->kind == RI_REASONING ? &c->reasoning : &c->text;
        it.text = b->data ? b->data + t->start : "";
        it.len = t->end - t->start;
    }
    return it;
}

/* {"item_id", "output_index", "content_index": 0} plus more fields by the caller. */
static cJSON *r_where(const struct gen_choice *c, int k, bool content)
{
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "item_id", c->items[k].id);
        cJSON_AddNumberToObject(o, "output_index", k);
        if (content)
            cJSON_AddNumberToObject(o, "content_index", 0);
    }
    return o;
}

/* Open a new item of kind (a call: call index); returns its index, -1 out of memory. */
static int r_open(struct gen_job *j, struct gen_choice *c, enum resp_item_kind kind, int call)
{
    if (c->n_items == c->cap_items) {
        int cap = c->cap_items ? 2 * c->cap_items : 4;
        struct resp_track *t = realloc(c->items, sizeof *t * (size_t)cap);
        if (!t) {
            j->broken = true;
            return -1;
        }
        c->items = t;
        c->cap_items = cap;
    }
    int k = c->n_items++;
    struct resp_track *t = &c->items[k];
    char hex[33];
    request_id_random(hex);
    *t = (struct resp_track){.kind = kind, .call = call};
    snprintf(t->id, sizeof t->id, "%s_%.24s", kind == RI_REASONING ? "rs"
                                              : kind == RI_MESSAGE ? "msg" : "fc", hex);
    t->start = t->end = kind == RI_REASONING ? c->reasoning.len : c->text.len;
    struct resp_item it = r_view(c, k);
    cJSON *ev = cJSON_CreateObject();
    if (ev) {
        cJSON_AddNumberToObject(ev, "output_index", k);
        cJSON_AddItemToObject(ev, "item", resp_item_json(&it));
    }
    r_emit(j, "response.output_item.added", ev);
    if (kind != RI_CALL) {
        cJSON *p = r_where(c, k, true);
        if (p)
            cJSON_AddItemToObject(p, "part", resp_part_json(kind, "", 0));
        r_emit(j, "response.content_part.added", p);
    }
    return k;
}

/* Close item k: its .done events and response.output_item.done. */
static void r_close(struct gen_job *j, struct gen_choice *c, int k)
{
    if (k < 0 || c->items[k].done)
        return;
    c->items[k].done = true;
    struct resp_item it = r_view(c, k);
    if (it.kind != RI_CALL) {
        cJSON *d = r_where(c, k, true);
        cJSON *text = cJSON_CreateString("");
        if (d && text) { /* (the text as a JSON string of its length) */
            cJSON *p = resp_part_json(it.kind, it.text, it.len);
            cJSON_Delete(text);
            text = p ? cJSON_DetachItemFromObject(p, "text") : NULL;
            cJSON_Delete(p);
        }
        if (d && text)
            cJSON_AddItemToObject(d, "text", text);
        else
            cJSON_Delete(text);
        if (d && it.kind == RI_MESSAGE)
            cJSON_AddArrayToObject(d, "logprobs");
        r_emit(j, it.kind == RI_REASONING ? "response.reasoning_text.done"
                                           : "response.output_text.done", d);
        cJSON *p = r_where(c, k, true);
        if (p)
            cJSON_AddItemToObject(p, "part", resp_part_json(it.kind, it.text, it.len));
        r_emit(j, "response.content_part.done", p);
    } else {
        cJSON *d = r_where(c, k, false);
        if (d)
            cJSON_AddStringToObject(d, "arguments", it.arguments);
        r_emit(j, "response.function_call_arguments.done", d);
    }
    cJSON *ev = cJSON_CreateObject();
    if (ev) {
        cJSON_AddNumberToObject(ev, "output_index", k);
        cJSON_AddItemToObject(ev, "item", resp_item_json(&it));
    }
    r_emit(j, "response.output_item.done", ev);
}

/* A delta event for item k with the text s[0..n). */
static void r_delta(struct gen_job *j, struct gen_choice *c, int k, const char *type,
                    const char *s, size_t n)
{
    cJSON *d = r_where(c, k, c->items[k].kind != RI_CALL);
    cJSON *p = resp_part_json(RI_REASONING, s, n); /* (only for its text string) */
    cJSON *text = p ? cJSON_DetachItemFromObject(p, "text") : NULL;
    cJSON_Delete(p);
    if (d && text)
        cJSON_AddItemToObject(d, "delta", text);
    else
        cJSON_Delete(text);
    if (d && c->items[k].kind == RI_MESSAGE)
        cJSON_AddArrayToObject(d, "logprobs");
    r_emit(j, type, d);
}

static void r_usage(const struct gen_job *j, struct resp_usage *ru)
{
    struct oai_usage u;
    usage_of(j, &u);
    *ru = (struct resp_usage){.input_tokens = u.prompt_tokens, .cached_tokens = u.cached_tokens,
                              .output_tokens = u.completion_tokens,
                              .reasoning_tokens = u.reasoning_tokens};
}

/* The response object of choice c (status from its finish; in_progress before). */
static cJSON *r_object(const struct gen_job *j, const struct gen_choice *c, bool final)
{
    const char *status = "in_progress", *incomplete = NULL, *error = NULL;
    if (final) {
        status = "completed";
        if (c->finish == ENGINE_FINISH_ERROR) {
            status = "failed";
            error = c->out.error[0] ? c->out.error : "generation failed";
        } else if (!strcmp(finish_reason(j, c), "length")) {
            status = "incomplete";
            incomplete = "max_output_tokens";
        } else if (c->finish == ENGINE_FINISH_CANCELLED) {
            status = "cancelled";
        }
    }
    struct resp_item *items = calloc((size_t)(c->n_items ? c->n_items : 1), sizeof *items);
    if (!items)
        return NULL;
    for (int k = 0; k < c->n_items; k++)
        items[k] = r_view(c, k);
    struct resp_usage u;
    r_usage(j, &u);
    cJSON *o = resp_object_json(j->id, j->meta.created, status, incomplete, error, j->meta.model,
                                items, final ? c->n_items : 0, final ? &u : NULL, j->resp_echo);
    free(items);
    return o;
}

/* What one poll brought to a /v1/responses choice: texts kept, items opened and closed, events
 * queued when streaming; at the finish every item is closed and the final event queued. */
static void responses_delta(struct gen_job *j, struct gen_choice *c, const struct engine_output *o)
{
    if (o->reasoning.len) {
        if (c->open_reasoning < 0)
            c->open_reasoning = r_open(j, c, RI_REASONING, -1);
        if (c->open_reasoning < 0 ||
            !ll_buf_append(&c->reasoning, o->reasoning.data, o->reasoning.len)) {
            j->broken = true;
            return;
        }
        c->items[c->open_reasoning].end = c->reasoning.len;
        r_delta(j, c, c->open_reasoning, "response.reasoning_text.delta", o->reasoning.data,
                o->reasoning.len);
    }
    const char *text = o->text.len ? o->text.data : "";
    size_t len = o->text.len;
    bool final = o->finish != ENGINE_RUNNING;
    if (j->tools) {
        ll_buf_clear(&c->content);
        tool_parser_feed(&c->tp, text, len, final, &c->content);
        if (c->tp.failed)
            j->broken = true;
        text = c->content.data ? c->content.data : "";
        len = c->content.len;
    }
    if (len) {
        r_close(j, c, c->open_reasoning);
        c->open_reasoning = -1;
        if (c->open_message < 0)
            c->open_message = r_open(j, c, RI_MESSAGE, -1);
        if (c->open_message < 0 || !ll_buf_append(&c->text, text, len)) {
            j->broken = true;
            return;
        }
        c->items[c->open_message].end = c->text.len;
        r_delta(j, c, c->open_message, "response.output_text.delta", text, len);
    }
    struct tool_piece pc;
    while (j->tools && tool_parser_next(&c->tp, &pc)) {
        if (pc.start) {
            r_close(j, c, c->open_reasoning);
            r_close(j, c, c->open_message);
            c->open_reasoning = c->open_message = -1;
            if ((c->open_call = r_open(j, c, RI_CALL, pc.index)) < 0)
                return;
        }
        if (pc.len)
            r_delta(j, c, c->open_call, "response.function_call_arguments.delta", pc.args,
                    pc.len);
        if (pc.done) {
            r_close(j, c, c->open_call);
            c->open_call = -1;
        }
    }
    if (final) {
        r_close(j, c, c->open_reasoning);
        r_close(j, c, c->open_message);
        r_close(j, c, c->open_call);
        c->open_reasoning = c->open_message = c->open_call = -1;
    }
}

/* The last event of a /v1/responses stream. */
static void responses_final(struct gen_job *j, struct gen_choice *c)
{
    cJSON *o = r_object(j, c, true);
    const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(o, "status"));
    const char *type = !status                        ? "response.failed"
                       : !strcmp(status, "completed") ? "response.completed"
                       : !strcmp(status, "failed")    ? "response.failed"
                                                      : "response.incomplete";
    cJSON *ev = cJSON_CreateObject();
    if (ev && o)
        cJSON_AddItemToObject(ev, "response", o);
    else
        cJSON_Delete(o);
    r_emit(j, type, ev);
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
        if (j->session_key && c->index == 0)
            session_keep(j, o);
    }
    if (j->meta.kind == OAI_RESPONSES) {
        responses_delta(j, c, o);
    } else if (j->stream) {
        stream_delta(j, c, o);
    } else if (!ll_buf_append(&c->text, o->text.data, o->text.len) ||
               !ll_buf_append(&c->reasoning, o->reasoning.data, o->reasoning.len) ||
               (j->logprobs && o->n_ids > 0 && o->logprobs && !keep_logprobs(c, o))) {
        j->broken = true;
        return;
    }
    if (o->finish != ENGINE_RUNNING) {
        c->done = true;
        c->finish = o->finish;
        if (c->out.embedding) { /* the vector is the choice's now */
            free(c->vec);
            c->vec = c->out.embedding;
            c->dim = c->out.n_embedding;
            c->out.embedding = NULL;
            c->out.n_embedding = 0;
        }
        c->usage = o->usage;
        c->queue_s = o->timings.queue_s;
        if (o->finish == ENGINE_FINISH_ERROR)
            log_msg(LOG_ERROR, "request %s choice %d failed: %s", j->xrid, c->index, o->error);
        if (j->stream && gen_job_done(j))
            job_settle(j); /* before the stream's last events (see job_settle) */
        if (j->meta.kind == OAI_RESPONSES) {
            if (j->stream)
                responses_final(j, c);
        } else if (j->stream && o->finish == ENGINE_FINISH_ERROR) {
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
        if (!c->done && c->req && engine_poll(c->req, &c->out)) {
            handle(j, c);
            any = true;
        }
    }
    return any;
}

/* Move what the engine produced into the job (chunks into job->sse when streaming, text
 * otherwise), waiting up to timeout_s when nothing is there yet. When every choice is done,
 * a stream gets its usage chunk and [DONE]. Returns true when anything happened. */
static bool gen_job_pump(struct gen_job *j, double timeout_s)
{
    if (j->stream && !j->role_sent && j->meta.kind == OAI_RESPONSES) {
        j->role_sent = true;
        for (int k = 0; k < 2; k++) {
            cJSON *ev = cJSON_CreateObject(), *o = r_object(j, &j->ch[0], false);
            if (ev && o)
                cJSON_AddItemToObject(ev, "response", o);
            else
                cJSON_Delete(o);
            r_emit(j, k ? "response.in_progress" : "response.created", ev);
        }
        return true;
    }
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
            if (c->done || !c->req)
                continue;
            if (engine_wait(c->req, &c->out, timeout_s)) {
                handle(j, c);
                any = true;
                poll_all(j);
            }
            break;
        }
    }
    if (pooled_kind(j->meta.kind) && !gen_job_done(j))
        embed_refill(j);
    if (j->stream && !j->sent_done && gen_job_done(j)) {
        if (j->include_usage && j->meta.kind != OAI_RESPONSES) {
            struct oai_usage u;
            usage_of(j, &u);
            emit(j, oai_stream_usage(&j->meta, &u));
        }
        if (j->meta.kind != OAI_RESPONSES && !sse_done(&j->sse)) /* (typed events end */
            j->broken = true;                                       /* without [DONE]) */
        j->sent_done = true;
        any = true;
    }
    return any;
}

/* ---- the stream's producer (sse.h) ---- */

static enum sse_state stream_state(void *ctx)
{
    struct gen_job *j = ctx;
    if (j->broken || atomic_load(&j->live.client_gone))
        return SSE_BROKEN;
    return j->sent_done ? SSE_ENDED : SSE_OPEN;
}

static void stream_pump(void *ctx, double timeout_s)
{
    gen_job_pump(ctx, timeout_s);
}

static void stream_finish(void *ctx)
{
    gen_job_finish(ctx);
}

/* Serve a stream: an SSE response that owns the job from here. */
static enum MHD_Result serve_stream(struct gen_job *j, struct http_ctx *c)
{
    j->status = 200;
    c->log_done = true;
    struct sse_source src = {.queue = &j->sse, .keepalive = j->keepalive, .state = stream_state,
                             .pump = stream_pump, .finish = stream_finish, .ctx = j};
    return sse_respond(c, &src);
}

/* The embeddings' answer (every choice has its vector; pooling_output cuts and normalizes).
 * NULL on no memory. */
static char *embeddings_body(struct gen_job *j)
{
    const float **vecs = calloc(j->n_choices > 0 ? (size_t)j->n_choices : 1, sizeof *vecs);
    if (!vecs)
        return NULL;
    int dim = 0;
    for (int i = 0; i < j->n_choices; i++) {
        struct gen_choice *c = &j->ch[i];
        dim = pooling_output(&j->srv->pooling, c->vec, c->dim, j->dimensions);
        vecs[i] = c->vec;
    }
    char *body = oai_embeddings_body(j->srv->served_name, vecs, j->n_choices, dim,
                                     j->embed_base64, j->prompt_tokens);
    free(vecs);
    return body;
}

/* The rerank answer (every choice has its document's hidden state: reranker_score scores it).
 * NULL on no memory. */
static char *rerank_body(struct gen_job *j)
{
    double *scores = malloc(sizeof(double) * (size_t)(j->n_choices > 0 ? j->n_choices : 1));
    if (!scores)
        return NULL;
    for (int i = 0; i < j->n_choices; i++)
        scores[i] = reranker_score(&j->srv->reranker, j->ch[i].vec);
    char *body = oai_rerank_body(j->id, j->srv->served_name, scores, j->n_choices, j->top_n,
                                 j->rdocs, j->prompt_tokens);
    free(scores);
    return body;
}

enum MHD_Result gen_job_respond(struct gen_job *j, struct http_ctx *c)
{
    if (j->stream)
        return serve_stream(j, c);
    /* libmicrohttpd would count the whole generation as client inactivity */
    MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    while (!gen_job_done(j) && !j->broken)
        gen_job_pump(j, 1.0);
    MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned)c->srv->opts->write_timeout);
    c->log_done = true;
    if (atomic_load(&j->live.client_gone)) {
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
    if (j->sub_failed) {
        res = respond_error(c, &j->sub_err);
    } else if (j->broken) {
        oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
        res = respond_error(c, &e);
    } else if (failed) {
        oai_error_set(&e, LL_EMODEL, NULL, NULL, "generation failed: %s", failed->out.error);
        res = respond_error(c, &e);
    } else if (pooled_kind(j->meta.kind)) {
        int missing = 0;
        for (int i = 0; i < j->n_choices; i++)
            missing += !j->ch[i].vec;
        if (missing) { /* cancelled: the request's time limit, or shutdown */
            oai_error_set(&e, LL_EUNAVAILABLE, NULL, atomic_load(&j->live.timed_out)
                                                         ? "timeout" : NULL,
                          "%d of the %d %s were not %s: the request %s", missing, j->n_choices,
                          j->meta.kind == OAI_RERANK ? "documents" : "inputs",
                          j->meta.kind == OAI_RERANK ? "scored" : "embedded",
                          atomic_load(&j->live.timed_out)
                                            ? "ran past --request-timeout"
                                            : "was cancelled (server shutting down)");
            res = respond_error(c, &e);
        } else {
            res = respond_json(c, 200, j->meta.kind == OAI_RERANK ? rerank_body(j)
                                                                  : embeddings_body(j));
        }
    } else if (j->meta.kind == OAI_RESPONSES) {
        cJSON *o = r_object(j, &j->ch[0], true);
        char *body = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        res = respond_json(c, 200, body);
    } else {
        struct oai_choice *cs = calloc(j->n_choices > 0 ? (size_t)j->n_choices : 1, sizeof *cs);
        char *body = NULL;
        struct oai_call **calls = calloc((size_t)j->n_choices, sizeof *calls);
        if (cs && calls) {
            struct oai_logprobs *lps = calloc((size_t)j->n_choices, sizeof *lps);
            for (int i = 0; lps && i < j->n_choices; i++) {
                struct gen_choice *ch = &j->ch[i];
                if (ch->echo) { /* the prompt's text, then the completion */
                    struct ll_buf t = {0};
                    ll_buf_append(&t, ch->echo, ch->echo_len);
                    ll_buf_append(&t, ch->text.data, ch->text.len);
                    ll_buf_free(&ch->text);
                    ch->text = t;
                }
                if (ch->text.failed) {
                    j->broken = true;
                    break;
                }
                lps[i] = logprobs_of(j, ch->ids, ch->lp, ch->n_lp, ch->chars);
                const char *text = ch->text.data;
                size_t text_len = ch->text.len;
                if (j->tools) {
                    tool_parser_feed(&ch->tp, text ? text : "", text_len, true, &ch->content);
                    text = ch->content.data;
                    text_len = ch->content.len;
                    if (ch->tp.failed || ch->content.failed) {
                        j->broken = true;
                        break;
                    }
                }
                calls[i] = NULL;
                int nc = j->tools ? ch->tp.n_calls : 0;
                if (nc && !(calls[i] = calloc((size_t)nc, sizeof *calls[i]))) {
                    j->broken = true;
                    break;
                }
                for (int k = 0; k < nc; k++)
                    calls[i][k] = (struct oai_call){ch->tp.calls[k].id, ch->tp.calls[k].name,
                                                    tool_call_args(&ch->tp.calls[k])};
                if (j->legacy_call && nc > 1)
                    nc = 1;
                cs[i] = (struct oai_choice){
                    .calls = calls[i], .n_calls = nc, .legacy_call = j->legacy_call,
                    .content_null = nc > 0 && text_len == 0,
                    .index = ch->index, .text = text, .text_len = text_len,
                    .reasoning = j->reasoning ? (ch->reasoning.data ? ch->reasoning.data : "")
                                              : NULL,
                    .reasoning_len = ch->reasoning.len,
                    .logprobs = j->logprobs ? &lps[i] : NULL,
                    .finish_reason = finish_reason(j, ch)};
            }
            struct oai_usage u;
            usage_of(j, &u);
            if (lps && !j->broken)
                body = oai_response_body(&j->meta, cs, j->n_choices, &u);
            free(lps);
        }
        for (int i = 0; calls && i < j->n_choices; i++)
            free(calls[i]);
        free(calls);
        free(cs);
        res = respond_json(c, 200, body);
    }
    j->status = c->status;
    gen_job_finish(j);
    return res;
}

/* A stored response (resp_store.h): its object and its input items (resp_input_item_normalize).
 * Only a response that completed or stopped at its length is kept. */
static void responses_keep(struct gen_job *j)
{
    cJSON *o = r_object(j, &j->ch[0], true), *it;
    const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "status"));
    if (status && (!strcmp(status, "completed") || !strcmp(status, "incomplete"))) {
        bool ok = true;
        cJSON_ArrayForEach(it, j->resp_input)
            ok = ok && resp_input_item_normalize(it);
        if (ok && !resp_store_put(&j->srv->responses, j->id, j->owner, cJSON_PrintUnformatted(o),
                                  cJSON_PrintUnformatted(j->resp_input)))
            ok = false;
        if (!ok)
            log_msg(LOG_WARN, "request %s: response %s not stored (out of memory, or larger than "
                              "--responses-store-mb)", j->xrid, j->id);
    }
    cJSON_Delete(o);
}

/* Settle the job once: release the engine requests (cancelling unfinished ones), keep its final
 * status, store a response, unregister, record the session's turn and the metrics, give the
 * key's budgets back.
 * Everything a client can observe of a finished request happens here, so a stream runs it before
 * its end reaches the client (handle(), when the last choice finishes): a client that sends its
 * next request the moment it reads [DONE] finds its key's concurrency slot free and its session's
 * turn recorded. Any other job is settled by gen_job_finish. */
static void job_settle(struct gen_job *j)
{
    if (j->settled)
        return;
    j->settled = true;
    struct server *srv = j->srv;
    j->t_end = ll_now();
    for (int i = 0; i < j->n_choices; i++) {
        struct gen_choice *c = &j->ch[i];
        if (!c->done) { /* released unfinished: the engine cancels it */
            c->finish = ENGINE_FINISH_CANCELLED;
            c->done = true;
        }
    }
    j->ttft = j->t_first > 0 ? j->t_first - j->t_arrival : -1;
    const struct gen_choice *c0 = &j->ch[0]; /* TPOT: choice 0's, as in the log line */
    j->tpot = c0->n_seen > 1 ? (c0->t_last - j->t_first) / (c0->n_seen - 1) : -1;
    /* kept for GET /v1/requests/{id} before it leaves the live table: always one or the other */
    req_history_add(&srv->history, j->id, j->xrid, j->live.key,
                    job_final_status(j, finish_reason(j, c0), j->tpot, j->ttft));
    if (j->resp_input && !j->broken)
        responses_keep(j); /* before the client can read the end and name it */
    live_remove(srv->live, &j->live);
    enum cancel_reason why = (enum cancel_reason)atomic_load(&j->live.reason);
    if (why == CANCEL_NONE)
        why = CANCEL_DISCONNECT; /* ended before the engine did: the connection went away */
    j->completion = 0;
    for (int i = 0; i < j->n_choices; i++) {
        struct gen_choice *c = &j->ch[i];
        engine_req_release(c->req);
        c->req = NULL;
        if (c->unsent) /* never reached the engine */
            continue;
        enum engine_finish seen = c->finish;
        enum cancel_reason r = CANCEL_NONE;
        if (seen == ENGINE_FINISH_CANCELLED) {
            r = atomic_load(&j->live.timed_out) ? CANCEL_TIMEOUT : why;
            if (r == CANCEL_TIMEOUT)
                seen = ENGINE_FINISH_LENGTH;
        }
        int gen = c->usage.completion_tokens > c->n_seen ? c->usage.completion_tokens : c->n_seen;
        j->completion += gen;
        bool first_of_prompt = i == 0 || j->ch[i - 1].prompt != c->prompt;
        metrics_finish(&srv->metrics, seen, r, first_of_prompt ? c->usage.prompt_tokens : 0, gen,
                       c->queue_s);
    }
    if (j->session_key) {
        bool ok = !j->broken && (c0->finish == ENGINE_FINISH_STOP ||
                                 c0->finish == ENGINE_FINISH_LENGTH);
        int np = c0->usage.prompt_tokens;
        sessions_end(&srv->sessions, j->session_key, ok, j->sess_ids, np, j->sess_ids + np,
                     j->n_sess - np, c0->usage.cached_tokens);
    }
    metrics_request(&srv->metrics, j->ttft, j->tpot, j->t_end - j->t_arrival);
    ratelimit_end(&srv->limits, j->rl_key, j->rl_prompt, j->completion, false);
}

/* Settle the job if it is not yet, write the log line, free. */
static void gen_job_finish(struct gen_job *j)
{
    struct server *srv = j->srv;
    job_settle(j);
    const struct gen_choice *c0 = &j->ch[0];
    if (log_enabled(LOG_INFO)) {
        struct oai_usage u;
        usage_of(j, &u);
        double itl = j->tpot > 0 ? j->tpot : 0;
        char spec[48] = "";
        if (u.spec_drafted > 0)
            snprintf(spec, sizeof spec, " spec=%d/%d", u.spec_accepted, u.spec_drafted);
        log_msg(LOG_INFO,
                "%s %s %s %d model=%s finish=%s choices=%d prompt=%d cached=%d completion=%d "
                "ttft=%.3fs itl=%.1fms e2e=%.3fs%s%s",
                j->xrid, j->method, j->url, j->status, srv->served_name, finish_reason(j, c0),
                j->n_choices, u.prompt_tokens, u.cached_tokens, j->completion,
                j->ttft > 0 ? j->ttft : 0, itl * 1e3, j->t_end - j->t_arrival,
                j->stream ? " stream" : "", spec);
    }
    job_free(j);
}
