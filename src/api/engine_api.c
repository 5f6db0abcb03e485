/*
 * engine_api.c: the engine level of the public API (llaisys.h): the continuous-batching engine
 * (engine.h) with requests given as OpenAI request bodies, their events, and a one-call
 * generate.
 *
 * One meaning for a request: a body goes through the server's own parser
 * (oai_batch_line_parse, as `llaisys-cli batch` lines do), its sampling through
 * oai_request_params and gen_params' policy, chat messages through the model's chat template,
 * and the reasoning split is decided by reasoning_choose as the server decides it; so the same
 * body gives the same tokens here, in `batch`, in `generate` and over HTTP.
 *
 * Threads: submit, stats, cancel, state and id only reach the engine's mailbox (any thread);
 * step, start, stop, reset and generate take this file's lock (one at a time). A request
 * wrapper holds no pointer to the engine after submit, so handles stay valid to poll and
 * release after llaisys_engine_destroy (the engine's requests outlive it, engine.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_impl.h"
#include "buf.h"
#include "chat_template.h"
#include "engine.h"
#include "json.h"
#include "model.h"
#include "openai_request.h"
#include "openai_response.h"
#include "pooling.h"
#include "reasoning.h"
#include "reranker.h"
#include "tokenizer.h"
#include "util.h"

struct llaisys_engine {
    struct engine *e;
    const struct model *model;
    const struct tokenizer *tok;
    pthread_mutex_t lock;        /* step, start, stop, reset, generate */
    bool started;
    struct chat_template *tmpl;  /* NULL: no usable template (tmpl_err says why) */
    char *bos, *eos;
    struct ll_err tmpl_err;
    bool reasoning;              /* chat requests split <think> reasoning off */
    struct pooling_config pooling; /* llaisys_engine_embed's (mode LL_POOL_NONE: pool_err) */
    struct ll_err pool_err;
    struct reranker reranker;    /* llaisys_engine_rerank's (n_rows 0: rerank_err says why) */
    struct ll_err rerank_err;
    char name[128];              /* the model directory's last component (embeddings' "model") */
};

struct llaisys_request {
    struct engine_req *req;
    struct oai_request oreq;     /* the parsed body (its stop strings name stop_reason) */
    uint64_t seed;
    int n_prompt;
    char *echo;                  /* the prompt's text when "echo" (sent in the first event) */
    size_t echo_len;
    bool echo_sent;
    struct engine_output out;    /* the last poll's buffers (the event points into them) */
    float *lp, *top_lp;          /* (cap) and (cap, n_top): the event's logprobs */
    int32_t *top_ids;
    int cap_lp;
};

/* ---- create / destroy ---- */

static void opt_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < ENGINE_OPT_COUNT && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%s", i ? ", " : "", engine_opt_defs[i].flag + 2);
        if (w < 0)
            break;
        k += (size_t)w;
    }
}

/* "name=value name2 ..." (spaces or commas between items) into o through the option table;
 * "pooling=MODE" (embeddings: last, mean, first) into *pool; "rerank-tokens=NO,YES" (its value
 * runs to the next space) into rerank (RERANK_OPT_MAX bytes). */
#define RERANK_OPT_MAX 64
static int32_t parse_options(const char *s, struct engine_opts *o, enum ll_pooling *pool,
                             char *rerank)
{
    while (s && *s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
            s++;
        if (!*s)
            break;
        const char *end = s;
        while (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')
            end++;
        const char *eq = memchr(s, '=', (size_t)(end - s));
        size_t nlen = (size_t)((eq ? eq : end) - s);
        char flag[64], val[64];
        if (nlen == 0 || nlen + 2 >= sizeof flag)
            return api_fail(LLAISYS_ERR_INVALID_ARG, "engine options: bad item '%.*s'",
                            (int)(end - s), s);
        flag[0] = flag[1] = '-';
        for (size_t i = 0; i < nlen; i++)
            flag[2 + i] = s[i] == '_' ? '-' : s[i];
        flag[2 + nlen] = '\0';
        if (!strcmp(flag, "--rerank-tokens")) {
            while (*end && *end != ' ' && *end != '\t' && *end != '\n')
                end++;
            size_t vlen = eq ? (size_t)(end - eq - 1) : 0;
            if (vlen == 0 || vlen >= RERANK_OPT_MAX)
                return api_fail(LLAISYS_ERR_INVALID_ARG, "engine option 'rerank-tokens': NO,YES "
                                "or YES (1..%d bytes)", RERANK_OPT_MAX - 1);
            memcpy(rerank, eq + 1, vlen);
            rerank[vlen] = '\0';
            s = end;
            continue;
        }
        if (!strcmp(flag, "--pooling")) {
            size_t vlen = eq ? (size_t)(end - eq - 1) : 0;
            if (vlen >= sizeof val)
                vlen = sizeof val - 1;
            memcpy(val, eq ? eq + 1 : "", vlen);
            val[vlen] = '\0';
            if (!pooling_parse(val, pool) || *pool == LL_POOL_NONE)
                return api_fail(LLAISYS_ERR_INVALID_ARG, "engine option 'pooling': '%s' is not "
                                "last, mean or first", val);
            s = end;
            continue;
        }
        const struct engine_opt_def *d = engine_opts_find(flag, nlen + 2);
        if (!d) {
            char known[256];
            opt_names(known, sizeof known);
            return api_fail(LLAISYS_ERR_INVALID_ARG, "engine options: unknown option '%s' "
                            "(known: %s)", flag + 2, known);
        }
        const char *v = NULL;
        if (eq) {
            size_t vlen = (size_t)(end - eq - 1);
            if (vlen >= sizeof val)
                return api_fail(LLAISYS_ERR_INVALID_ARG, "engine options: the value of '%s' is "
                                "too long", flag + 2);
            memcpy(val, eq + 1, vlen);
            val[vlen] = '\0';
            v = val;
        }
        struct ll_err err = {0};
        char src[80];
        snprintf(src, sizeof src, "engine option '%s'", flag + 2);
        if (engine_opts_set(o, d, v, src, &err) != LL_OK)
            return api_status(LL_EINVAL, &err);
        s = end;
    }
    return LLAISYS_OK;
}

void llaisys_engine_destroy(llaisys_engine *e)
{
    if (!e)
        return;
    engine_destroy(e->e);
    reranker_free(&e->reranker);
    chat_template_free(e->tmpl);
    free(e->bos);
    free(e->eos);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int32_t llaisys_engine_create(const char *model_dir, const char *options, llaisys_engine **out)
{
    if (!out)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_create: out is NULL");
    *out = NULL;
    if (!model_dir)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_create: model_dir is NULL");
    struct engine_opts o = {0};
    enum ll_pooling pool = LL_POOL_NONE;
    char rerank[RERANK_OPT_MAX] = "";
    int32_t rc = parse_options(options, &o, &pool, rerank);
    if (rc)
        return rc;
    llaisys_engine *e = calloc(1, sizeof *e);
    if (!e || pthread_mutex_init(&e->lock, NULL)) {
        free(e);
        return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_create: out of memory");
    }
    struct ll_err err = {0};
    enum ll_status s = engine_create(&e->e, model_dir, &o, &err);
    if (s != LL_OK) {
        llaisys_engine_destroy(e);
        return api_status(s, &err);
    }
    e->model = engine_model(e->e);
    e->tok = engine_tokenizer(e->e);
    /* as the server: no template only turns chat requests away; a broken one is an error */
    s = chat_template_load_model(&e->tmpl, &e->bos, &e->eos, model_dir, &e->tmpl_err);
    if (s != LL_OK && s != LL_EIO && s != LL_EFORMAT) {
        llaisys_engine_destroy(e);
        return api_status(s, &e->tmpl_err);
    }
    e->reasoning = reasoning_choose(NULL, e->tmpl, e->bos, e->eos, e->tok, NULL, 0);
    /* as the server: a pooling that is not implemented only turns embeddings away */
    pooling_choose(&e->pooling, model_dir, pool, &e->pool_err);
    /* reranking as the server's: asked for by name, not served is an error */
    s = reranker_choose(&e->reranker, e->model, e->tok, e->tmpl, e->bos, e->eos, rerank,
                        &e->rerank_err);
    if (s != LL_OK && rerank[0]) {
        int32_t rc = api_status(s, &e->rerank_err);
        llaisys_engine_destroy(e);
        return rc;
    }
    size_t len = strlen(model_dir);
    while (len > 1 && model_dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && model_dir[start - 1] != '/')
        start--;
    snprintf(e->name, sizeof e->name, "%.*s", (int)(len - start), model_dir + start);
    *out = e;
    return LLAISYS_OK;
}

char *llaisys_engine_describe(const llaisys_engine *e)
{
    if (!e) {
        api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_describe: NULL engine");
        return NULL;
    }
    const struct engine_opts *o = engine_get_opts(e->e);
    struct ll_buf b = {0};
    ll_buf_putc(&b, '{');
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = &engine_opt_defs[i];
        const void *p = (const char *)o + d->off;
        ll_json_put_cstr(&b, d->flag + 2);
        ll_buf_putc(&b, ':');
        switch (d->type) {
        case ENGINE_OPT_INT:
            ll_json_put_int(&b, *(const int *)p);
            break;
        case ENGINE_OPT_SIZE:
            ll_json_put_int(&b, (long long)*(const size_t *)p);
            break;
        case ENGINE_OPT_BOOL:
            ll_buf_puts(&b, *(const bool *)p ? "true" : "false");
            break;
        case ENGINE_OPT_CHOICE:
            ll_json_put_cstr(&b, d->choices[*(const int *)p]);
            break;
        }
        ll_buf_putc(&b, ',');
    }
    ll_buf_puts(&b, "\"model_type\":");
    ll_json_put_cstr(&b, e->model->config.model_type);
    ll_buf_printf(&b, ",\"vocab_size\":%d,\"chat_template\":%s,\"reasoning\":%s}",
                  e->model->config.vocab_size, e->tmpl ? "true" : "false",
                  e->reasoning ? "true" : "false");
    char *s = ll_buf_take(&b);
    if (!s)
        api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_describe: out of memory");
    return s;
}

/* ---- submit ---- */

static int32_t oai_fail(const struct oai_error *oe)
{
    if (oe->param[0])
        return api_fail(api_code(oe->status), "%s (param: %s)", oe->message, oe->param);
    return api_fail(api_code(oe->status), "%s", oe->message);
}

void llaisys_request_release(llaisys_request *r)
{
    if (!r)
        return;
    engine_req_release(r->req);
    oai_request_free(&r->oreq);
    engine_output_free(&r->out);
    free(r->echo);
    free(r->lp);
    free(r->top_lp);
    free(r->top_ids);
    free(r);
}

/* The prompt of a parsed request as ids (*ids malloc'd): chat through the template (no BOS
 * added: the template writes it), text with the tokenizer's special tokens, ids as given. */
static int32_t prompt_ids(llaisys_engine *e, const struct oai_request *q, int32_t **ids, int *n)
{
    struct ll_err err = {0};
    size_t cnt = 0;
    enum ll_status s;
    *ids = NULL;
    if (q->kind == OAI_CHAT) {
        if (!e->tmpl)
            return api_fail(LLAISYS_ERR_INVALID_ARG, "chat request, but the model has no usable "
                            "chat template (%s) (param: messages)", e->tmpl_err.msg);
        char *text = NULL;
        size_t len = 0;
        s = chat_template_render_ex(e->tmpl, q->chat_context, e->bos, e->eos, NULL, &text, &len,
                                    &err);
        if (s != LL_OK) {
            free(text);
            return api_fail(api_code(s), "%s (param: messages)", err.msg);
        }
        s = tokenizer_encode(e->tok, text, len, false, ids, &cnt, &err);
        free(text);
    } else if (q->prompts[0].text) {
        s = tokenizer_encode(e->tok, q->prompts[0].text, q->prompts[0].text_len, true, ids, &cnt,
                             &err);
    } else {
        cnt = (size_t)q->prompts[0].n_ids;
        *ids = malloc(sizeof(int32_t) * (cnt ? cnt : 1));
        if (!*ids)
            return api_fail(LLAISYS_ERR_NO_MEMORY, "out of memory for the prompt");
        if (cnt)
            memcpy(*ids, q->prompts[0].ids, sizeof(int32_t) * cnt);
        s = LL_OK;
    }
    if (s != LL_OK)
        return api_status(s, &err);
    *n = (int)cnt;
    return LLAISYS_OK;
}

/* Submit a request body of len bytes. */
static int32_t submit(llaisys_engine *e, const char *body, size_t len, llaisys_request **out)
{
    *out = NULL;
    llaisys_request *r = calloc(1, sizeof *r);
    if (!r)
        return api_fail(LLAISYS_ERR_NO_MEMORY, "out of memory for a request");
    struct oai_error oe = {0};
    cJSON *id = NULL;
    enum ll_status s = oai_batch_line_parse(&r->oreq, &id, body, len, &oe);
    cJSON_Delete(id); /* a batch line's "id" means nothing here */
    if (s == LL_OK)
        s = oai_request_check_supported(&r->oreq, &oe);
    if (s != LL_OK) {
        llaisys_request_release(r);
        return oai_fail(&oe);
    }
    const struct oai_request *q = &r->oreq;
    if (q->kind == OAI_COMPLETION && q->n_prompts < 1) {
        llaisys_request_release(r);
        return api_fail(LLAISYS_ERR_INVALID_ARG, "the prompt is empty (param: prompt)");
    }
    if (q->n > 1 || (q->kind == OAI_COMPLETION && q->n_prompts > 1)) {
        bool n = q->n > 1;
        llaisys_request_release(r);
        return api_fail(LLAISYS_ERR_UNSUPPORTED, "%s: a library request is one prompt and one "
                        "choice; submit one request each (param: %s)",
                        n ? "'n' > 1" : "a list of prompts", n ? "n" : "prompt");
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    int32_t rc = prompt_ids(e, q, &ids, &n_ids);
    if (rc) {
        llaisys_request_release(r);
        return rc;
    }
    struct ll_err err = {0};
    if (q->echo && tokenizer_decode(e->tok, ids, (size_t)n_ids, q->skip_special_tokens, &r->echo,
                                    &r->echo_len, &err) != LL_OK) {
        free(ids);
        llaisys_request_release(r);
        return api_status(LL_ENOMEM, &err);
    }
    struct engine_params ep;
    oai_request_params(q, &e->model->gen, &ep);
    ep.prompt = ids;
    ep.n_prompt = n_ids;
    ep.reasoning = q->kind == OAI_CHAT && e->reasoning;
    r->seed = ep.sampling.seed;
    r->n_prompt = n_ids;
    s = engine_submit(e->e, &ep, &r->req, &err);
    free(ids);
    if (s != LL_OK) {
        llaisys_request_release(r);
        return api_status(s, &err);
    }
    *out = r;
    return LLAISYS_OK;
}

int32_t llaisys_engine_submit(llaisys_engine *e, const char *request_json, llaisys_request **out)
{
    if (!out)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_submit: out is NULL");
    *out = NULL;
    if (!e || !request_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_submit: NULL %s",
                        e ? "request" : "engine");
    return submit(e, request_json, strlen(request_json), out);
}

/* ---- the loop ---- */

int32_t llaisys_engine_step(llaisys_engine *e, int32_t *did_work)
{
    if (did_work)
        *did_work = 0;
    if (!e)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_step: NULL engine");
    pthread_mutex_lock(&e->lock);
    if (e->started) {
        pthread_mutex_unlock(&e->lock);
        return api_fail(LLAISYS_ERR_BUSY, "llaisys_engine_step: the engine's own thread is "
                        "running (llaisys_engine_start)");
    }
    bool did = false;
    struct ll_err err = {0};
    enum ll_status s = engine_step(e->e, &did, &err);
    pthread_mutex_unlock(&e->lock);
    if (did_work)
        *did_work = did;
    if (s != LL_OK)
        return api_fail(LLAISYS_ERR_INTERNAL, "%s", err.msg);
    return LLAISYS_OK;
}

bool llaisys_engine_has_work(llaisys_engine *e)
{
    if (!e)
        return false;
    pthread_mutex_lock(&e->lock);
    bool work;
    if (e->started) {
        struct engine_stats st;
        engine_get_stats(e->e, &st);
        work = st.waiting || st.running || st.queued;
    } else {
        work = engine_has_work(e->e);
    }
    pthread_mutex_unlock(&e->lock);
    return work;
}

int32_t llaisys_engine_start(llaisys_engine *e)
{
    if (!e)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_start: NULL engine");
    pthread_mutex_lock(&e->lock);
    int32_t rc = LLAISYS_OK;
    struct ll_err err = {0};
    if (e->started)
        rc = api_fail(LLAISYS_ERR_BUSY, "llaisys_engine_start: already started");
    else if (engine_start(e->e, &err) != LL_OK)
        rc = api_status(LL_ENOMEM, &err);
    else
        e->started = true;
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int32_t llaisys_engine_stop(llaisys_engine *e)
{
    if (!e)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_stop: NULL engine");
    pthread_mutex_lock(&e->lock);
    engine_stop(e->e);
    e->started = false;
    pthread_mutex_unlock(&e->lock);
    return LLAISYS_OK;
}

int32_t llaisys_engine_reset_prefix_cache(llaisys_engine *e)
{
    if (!e)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_reset_prefix_cache: NULL");
    pthread_mutex_lock(&e->lock);
    if (e->started)
        engine_stop(e->e); /* the pool belongs to the scheduler thread: pause it */
    bool ok = engine_reset_prefix_cache(e->e);
    struct ll_err err = {0};
    enum ll_status s = e->started ? engine_start(e->e, &err) : LL_OK;
    if (s != LL_OK)
        e->started = false;
    pthread_mutex_unlock(&e->lock);
    if (s != LL_OK)
        return api_status(LL_ENOMEM, &err);
    if (!ok)
        return api_fail(LLAISYS_ERR_BUSY, "llaisys_engine_reset_prefix_cache: requests are "
                        "running and hold KV blocks");
    return LLAISYS_OK;
}

int32_t llaisys_engine_stats(llaisys_engine *e, struct llaisys_engine_stats *out)
{
    if (!e || !out)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_stats: NULL argument");
    struct engine_stats st;
    engine_get_stats(e->e, &st);
    *out = (struct llaisys_engine_stats){
        .waiting = st.waiting, .running = st.running, .queued = st.queued,
        .kv_blocks = st.kv_blocks, .kv_in_use = st.kv_in_use, .kv_cached = st.kv_cached,
        .kv_free = st.kv_free, .block_size = st.block_size,
        .steps = st.steps, .submitted = st.submitted, .finished = st.finished,
        .rejected = st.rejected, .preemptions = st.preemptions,
        .prompt_tokens = st.prompt_tokens, .cached_tokens = st.cached_tokens,
        .decode_tokens = st.decode_tokens, .generated_tokens = st.generated_tokens,
        .busy_s = st.busy_s,
    };
    return LLAISYS_OK;
}

/* ---- requests ---- */

const char *llaisys_finish_str(int32_t finish)
{
    switch (finish) {
    case LLAISYS_FINISH_STOP:
        return engine_finish_str(ENGINE_FINISH_STOP);
    case LLAISYS_FINISH_LENGTH:
        return engine_finish_str(ENGINE_FINISH_LENGTH);
    case LLAISYS_FINISH_CANCELLED:
        return engine_finish_str(ENGINE_FINISH_CANCELLED);
    case LLAISYS_FINISH_ERROR:
        return engine_finish_str(ENGINE_FINISH_ERROR);
    }
    return "";
}

static int32_t finish_code(enum engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP:
        return LLAISYS_FINISH_STOP;
    case ENGINE_FINISH_LENGTH:
        return LLAISYS_FINISH_LENGTH;
    case ENGINE_FINISH_CANCELLED:
        return LLAISYS_FINISH_CANCELLED;
    case ENGINE_FINISH_ERROR:
        return LLAISYS_FINISH_ERROR;
    case ENGINE_RUNNING:
    case ENGINE_FINISH_COUNT:
        break;
    }
    return LLAISYS_FINISH_NONE;
}

int32_t llaisys_request_state(const llaisys_request *r, int32_t *finish)
{
    if (finish)
        *finish = LLAISYS_FINISH_NONE;
    if (!r)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_request_state: NULL request");
    enum engine_finish f;
    enum engine_req_state st = engine_req_state(r->req, &f);
    if (finish)
        *finish = finish_code(f);
    switch (st) {
    case ENGINE_REQ_WAITING:
        return LLAISYS_REQ_WAITING;
    case ENGINE_REQ_RUNNING:
        return LLAISYS_REQ_RUNNING;
    case ENGINE_REQ_PREEMPTED:
        return LLAISYS_REQ_PREEMPTED;
    case ENGINE_REQ_FINISHED:
        break;
    }
    return LLAISYS_REQ_FINISHED;
}

uint64_t llaisys_request_id(const llaisys_request *r) { return r ? engine_req_id(r->req) : 0; }

void llaisys_request_cancel(llaisys_request *r)
{
    if (r)
        engine_cancel(r->req);
}

/* The event's logprob arrays from the output's (n_ids entries, n_top alternatives each). */
static bool fill_logprobs(llaisys_request *r, struct llaisys_event *ev)
{
    int n = r->out.n_ids, k = r->oreq.top_logprobs;
    if (!r->oreq.logprobs || !r->out.logprobs || n == 0)
        return true;
    if (n > r->cap_lp) {
        float *lp = realloc(r->lp, sizeof(float) * (size_t)n);
        if (lp)
            r->lp = lp;
        float *tl = lp && k ? realloc(r->top_lp, sizeof(float) * (size_t)n * (size_t)k) : NULL;
        if (tl)
            r->top_lp = tl;
        int32_t *ti = tl ? realloc(r->top_ids, sizeof(int32_t) * (size_t)n * (size_t)k) : NULL;
        if (ti)
            r->top_ids = ti;
        if (!lp || (k && !ti))
            return false;
        r->cap_lp = n;
    }
    for (int i = 0; i < n; i++) {
        const struct sampler_logprobs *s = &r->out.logprobs[i];
        r->lp[i] = s->logprob;
        for (int j = 0; j < k; j++) {
            r->top_ids[(size_t)i * k + j] = j < s->n_top ? s->top_ids[j] : -1;
            r->top_lp[(size_t)i * k + j] = j < s->n_top ? s->top_logprobs[j] : -INFINITY;
        }
    }
    ev->logprobs = r->lp;
    ev->n_top = k;
    ev->top_ids = k ? r->top_ids : NULL;
    ev->top_logprobs = k ? r->top_lp : NULL;
    return true;
}

int32_t llaisys_request_poll(llaisys_request *r, double timeout_s, struct llaisys_event *ev)
{
    if (!r || !ev)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_request_poll: NULL argument");
    memset(ev, 0, sizeof *ev);
    static const int32_t none[1];
    ev->ids = none;
    ev->text = ev->reasoning = "";
    ev->stop_token_id = -1;
    ev->seed = r->seed;
    bool any;
    if (r->echo && !r->echo_sent) {
        /* the echoed prompt comes first, on its own */
        r->echo_sent = true;
        ev->text = r->echo;
        ev->text_len = r->echo_len;
        ev->state = llaisys_request_state(r, NULL);
        ev->usage.prompt_tokens = r->n_prompt;
        return 1;
    }
    if (timeout_s == 0)
        any = engine_poll(r->req, &r->out);
    else
        any = engine_wait(r->req, &r->out, timeout_s);
    const struct engine_output *o = &r->out;
    if (o->ids)
        ev->ids = o->ids;
    ev->n_ids = o->n_ids;
    if (o->text.len) {
        ev->text = o->text.data;
        ev->text_len = o->text.len;
    }
    if (o->reasoning.len) {
        ev->reasoning = o->reasoning.data;
        ev->reasoning_len = o->reasoning.len;
    }
    if (!fill_logprobs(r, ev))
        return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_request_poll: out of memory for "
                        "logprobs");
    ev->finish = finish_code(o->finish);
    ev->state = ev->finish ? LLAISYS_REQ_FINISHED : llaisys_request_state(r, NULL);
    if (o->finish == ENGINE_FINISH_STOP) {
        ev->stop_token_id = o->stop_id;
        if (o->stop_str >= 0 && o->stop_str < r->oreq.n_stop)
            ev->stop_reason = r->oreq.stop[o->stop_str];
    }
    if (o->finish == ENGINE_FINISH_ERROR)
        ev->error = o->error;
    ev->usage = (struct llaisys_usage){
        .prompt_tokens = o->usage.prompt_tokens, .completion_tokens = o->usage.completion_tokens,
        .cached_tokens = o->usage.cached_tokens, .reasoning_tokens = o->usage.reasoning_tokens,
        .preemptions = o->usage.preemptions,
    };
    ev->timings = (struct llaisys_timings){o->timings.queue_s, o->timings.ttft_s,
                                           o->timings.decode_s, o->timings.total_s};
    return any ? 1 : 0;
}

/* ---- generate ---- */

/* One request of a generate call: its handle and what it produced so far. */
struct gen_item {
    llaisys_request *r;
    struct ll_buf text, reasoning, ids, lps; /* ids and lps: JSON array items */
    int n_ids;
    struct llaisys_event last;
    bool done;
    int32_t error;                           /* submit's status when it failed */
    char message[512];
};

/* Append what an event brought to the item. */
static void item_take(struct gen_item *it, const struct llaisys_event *ev)
{
    ll_buf_append(&it->text, ev->text, ev->text_len);
    ll_buf_append(&it->reasoning, ev->reasoning, ev->reasoning_len);
    for (int i = 0; i < ev->n_ids; i++) {
        ll_buf_puts(&it->ids, it->n_ids ? "," : "");
        ll_json_put_int(&it->ids, ev->ids[i]);
        if (ev->logprobs) {
            ll_buf_puts(&it->lps, it->n_ids ? ",{\"id\":" : "{\"id\":");
            ll_json_put_int(&it->lps, ev->ids[i]);
            ll_buf_puts(&it->lps, ",\"logprob\":");
            ll_json_put_num(&it->lps, ev->logprobs[i]);
            ll_buf_puts(&it->lps, ",\"top_logprobs\":[");
            for (int j = 0; j < ev->n_top; j++) {
                ll_buf_printf(&it->lps, "%s[%d,", j ? "," : "",
                              ev->top_ids[(size_t)i * ev->n_top + j]);
                ll_json_put_num(&it->lps, ev->top_logprobs[(size_t)i * ev->n_top + j]);
                ll_buf_putc(&it->lps, ']');
            }
            ll_buf_puts(&it->lps, "]}");
        }
        it->n_ids++;
    }
    it->last = *ev;
    if (ev->finish) {
        it->done = true;
        it->last.ids = NULL;
        it->last.text = it->last.reasoning = "";
        it->last.logprobs = it->last.top_logprobs = NULL;
        it->last.top_ids = NULL;
    }
}

static void item_json(struct ll_buf *b, const struct gen_item *it, bool logprobs)
{
    if (it->error) {
        ll_buf_puts(b, "{\"error\":{\"message\":");
        ll_json_put_cstr(b, it->message);
        ll_buf_puts(b, ",\"status\":");
        ll_json_put_cstr(b, llaisys_status_str(it->error));
        ll_buf_puts(b, "}}");
        return;
    }
    const struct llaisys_event *ev = &it->last;
    ll_buf_puts(b, "{\"text\":");
    ll_json_put_str(b, it->text.data ? it->text.data : "", it->text.len);
    if (it->reasoning.len) {
        ll_buf_puts(b, ",\"reasoning\":");
        ll_json_put_str(b, it->reasoning.data, it->reasoning.len);
    }
    ll_buf_puts(b, ",\"token_ids\":[");
    ll_buf_append(b, it->ids.data ? it->ids.data : "", it->ids.len);
    ll_buf_puts(b, "],\"finish_reason\":");
    ll_json_put_cstr(b, llaisys_finish_str(ev->finish));
    if (ev->finish == LLAISYS_FINISH_STOP && ev->stop_reason) {
        ll_buf_puts(b, ",\"stop_reason\":");
        ll_json_put_cstr(b, ev->stop_reason);
    } else if (ev->finish == LLAISYS_FINISH_STOP) {
        ll_buf_printf(b, ",\"stop_token_id\":%d", ev->stop_token_id);
    }
    if (ev->finish == LLAISYS_FINISH_ERROR) {
        ll_buf_puts(b, ",\"error\":");
        ll_json_put_cstr(b, it->message);
    }
    if (logprobs) {
        ll_buf_puts(b, ",\"logprobs\":[");
        ll_buf_append(b, it->lps.data ? it->lps.data : "", it->lps.len);
        ll_buf_putc(b, ']');
    }
    const struct llaisys_usage *u = &ev->usage;
    ll_buf_printf(b, ",\"seed\":%llu,\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,"
                  "\"total_tokens\":%d,\"cached_tokens\":%d,\"reasoning_tokens\":%d,"
                  "\"preemptions\":%d}}", (unsigned long long)ev->seed, u->prompt_tokens,
                  u->completion_tokens, u->prompt_tokens + u->completion_tokens,
                  u->cached_tokens, u->reasoning_tokens, u->preemptions);
}

static void item_free(struct gen_item *it)
{
    llaisys_request_release(it->r);
    ll_buf_free(&it->text);
    ll_buf_free(&it->reasoning);
    ll_buf_free(&it->ids);
    ll_buf_free(&it->lps);
}

/* Poll every live item once (waiting up to timeout_s on the first live one). Returns how many
 * are still live. */
static int poll_items(struct gen_item *items, int n, double timeout_s)
{
    int live = 0;
    for (int i = 0; i < n; i++) {
        struct gen_item *it = &items[i];
        if (!it->r || it->done)
            continue;
        struct llaisys_event ev;
        while (llaisys_request_poll(it->r, live == 0 ? timeout_s : 0, &ev) == 1) {
            item_take(it, &ev);
            if (it->done) {
                if (ev.error)
                    snprintf(it->message, sizeof it->message, "%s", ev.error);
                break;
            }
        }
        live += !it->done;
    }
    return live;
}

/* The next element of a JSON array that ll_json_parse accepted, from *p (after the '[' or a
 * ','): its bytes [*start, *start + *len) as written (re-printing the element through cJSON
 * would round numbers of more than 15 digits, such as seeds). Returns false at the ']'. */
static bool next_element(const char **p, const char **start, size_t *len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == ',')
        s++;
    if (*s == ']' || !*s)
        return false;
    const char *b = s;
    int depth = 0;
    bool str = false;
    for (; *s; s++) {
        if (str) {
            if (*s == '\\' && s[1])
                s++;
            else if (*s == '"')
                str = false;
        } else if (*s == '"') {
            str = true;
        } else if (*s == '{' || *s == '[') {
            depth++;
        } else if (*s == '}' || *s == ']') {
            if (depth == 0)
                break; /* the array's own ']' */
            depth--;
        } else if (*s == ',' && depth == 0) {
            break;
        }
    }
    *start = b;
    *len = (size_t)(s - b);
    *p = s;
    return true;
}

int32_t llaisys_engine_generate(llaisys_engine *e, const char *requests_json,
                                char **results_json)
{
    if (!results_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_generate: results_json is NULL");
    *results_json = NULL;
    if (!e || !requests_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_generate: NULL %s",
                        e ? "requests" : "engine");
    struct ll_err err = {0};
    cJSON *arr = NULL;
    enum ll_status s = ll_json_parse(&arr, requests_json, strlen(requests_json), "requests",
                                     &err);
    if (s != LL_OK)
        return api_status(s, &err);
    if (!cJSON_IsArray(arr)) {
        int32_t rc = api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_generate: requests must "
                              "be a JSON array of request objects, not %s",
                              ll_json_type_name(arr));
        cJSON_Delete(arr);
        return rc;
    }
    int n = cJSON_GetArraySize(arr);
    struct gen_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    if (!items) {
        cJSON_Delete(arr);
        return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_generate: out of memory");
    }
    cJSON_Delete(arr);
    const char *p = strchr(requests_json, '[') + 1, *body;
    size_t len;
    for (int i = 0; i < n && next_element(&p, &body, &len); i++) {
        int32_t rc = submit(e, body, len, &items[i].r);
        if (rc) {
            items[i].error = rc;
            snprintf(items[i].message, sizeof items[i].message, "request %d: %s", i,
                     llaisys_last_error());
        }
    }

    pthread_mutex_lock(&e->lock);
    int32_t rc = LLAISYS_OK;
    for (int live = poll_items(items, n, 0); live > 0;) {
        if (e->started) {
            live = poll_items(items, n, 0.05);
            continue;
        }
        bool did = false;
        engine_step(e->e, &did, &err); /* a request whose forward fails ends with an error */
        live = poll_items(items, n, 0);
        if (!did && live > 0) {
            rc = api_fail(LLAISYS_ERR_INTERNAL, "llaisys_engine_generate: the engine stalled "
                          "with %d requests left", live);
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);

    struct ll_buf b = {0};
    ll_buf_putc(&b, '[');
    for (int k = 0; k < n; k++) {
        if (k)
            ll_buf_putc(&b, ',');
        item_json(&b, &items[k], items[k].r && items[k].r->oreq.logprobs);
        item_free(&items[k]);
    }
    ll_buf_putc(&b, ']');
    free(items);
    if (rc) {
        ll_buf_free(&b);
        return rc;
    }
    *results_json = ll_buf_take(&b);
    if (!*results_json)
        return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_generate: out of memory for "
                        "the results");
    return LLAISYS_OK;
}

/* ---- embeddings and reranking ---- */

/* The n prompts ids/len pooled by mode into vecs (each malloc'd, hidden_size floats): at most
 * max_seqs in the engine at once, each submitted as another one ends. `fn` names the caller
 * in errors. Returns LLAISYS_OK or the failure (set as the last error). */
static int32_t pool_prompts(llaisys_engine *e, const char *fn, int32_t *const *ids,
                            const int *len, int n, enum ll_pooling mode, bool no_cache,
                            int cache_prefix, float **vecs)
{
    const int limit = engine_get_opts(e->e)->max_seqs;
    struct engine_req **reqs = calloc((size_t)n, sizeof *reqs);
    if (!reqs)
        return api_fail(LLAISYS_ERR_NO_MEMORY, "%s: out of memory", fn);
    int32_t rc = LLAISYS_OK;
    pthread_mutex_lock(&e->lock);
    int next = 0, running = 0, done = 0;
    while (!rc && done < n) {
        while (next < n && running < limit) {
            struct engine_params p = {.prompt = ids[next], .n_prompt = len[next],
                                      .embed = mode, .no_cache = no_cache,
                                      .cache_prefix = cache_prefix};
            struct ll_err err = {0};
            enum ll_status s = engine_submit(e->e, &p, &reqs[next], &err);
            if (s == LL_EOVERLOADED && running > 0)
                break;
            if (s != LL_OK) {
                rc = api_status(s, &err);
                break;
            }
            next++;
            running++;
        }
        if (rc)
            break;
        struct ll_err err = {0};
        bool did = false;
        if (!e->started)
            engine_step(e->e, &did, &err);
        for (int i = 0; i < next; i++) {
            struct engine_output out = {0};
            bool got = !vecs[i] && reqs[i] &&
                       (e->started ? engine_wait(reqs[i], &out, 0.02) : engine_poll(reqs[i], &out));
            if (got && out.finish == ENGINE_FINISH_STOP && out.embedding) {
                vecs[i] = out.embedding;
                out.embedding = NULL;
            } else if (got && out.finish != ENGINE_RUNNING) {
                rc = api_fail(LLAISYS_ERR_INTERNAL, "%s: input %d %s: %s", fn, i,
                              engine_finish_str(out.finish), out.error);
            }
            if (got && out.finish != ENGINE_RUNNING) {
                engine_req_release(reqs[i]);
                reqs[i] = NULL;
                running--;
                done++;
            }
            engine_output_free(&out);
            if (rc)
                break;
        }
        if (!rc && !e->started && !did && running > 0)
            rc = api_fail(LLAISYS_ERR_INTERNAL, "%s: the engine stalled with %d inputs left", fn,
                          running);
    }
    pthread_mutex_unlock(&e->lock);
    for (int i = 0; i < n; i++)
        engine_req_release(reqs[i]); /* cancels what is left after a failure */
    free(reqs);
    return rc;
}

int32_t llaisys_engine_embed(llaisys_engine *e, const char *request_json, char **result_json)
{
    if (!result_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_embed: result_json is NULL");
    *result_json = NULL;
    if (!e || !request_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_embed: NULL %s",
                        e ? "request" : "engine");
    if (e->pooling.mode == LL_POOL_NONE)
        return api_fail(LLAISYS_ERR_UNSUPPORTED, "llaisys_engine_embed: this model's embeddings "
                        "are not available: %s (the engine option pooling chooses one)",
                        e->pool_err.msg);
    struct oai_request q;
    struct oai_error oe;
    if (oai_embeddings_parse(&q, request_json, strlen(request_json), &oe) != LL_OK)
        return oai_fail(&oe);
    const int H = e->model->config.hidden_size, n = q.n_prompts;
    const int n_ctx = engine_get_opts(e->e)->n_ctx;
    int32_t rc = LLAISYS_OK;
    if (q.dimensions > H)
        rc = api_fail(LLAISYS_ERR_INVALID_ARG, "'dimensions' is %d; this model's embeddings have "
                      "%d (param: dimensions)", q.dimensions, H);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int *len = calloc((size_t)n, sizeof *len), tokens = 0;
    float **vecs = calloc((size_t)n, sizeof *vecs);
    if (!rc && (!ids || !len || !vecs))
        rc = api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_embed: out of memory");
    for (int i = 0; !rc && i < n; i++) {
        struct oai_request one = q;
        one.prompts = &q.prompts[i];
        if ((rc = prompt_ids(e, &one, &ids[i], &len[i])) != LLAISYS_OK)
            break;
        tokens += len[i];
        if (len[i] == 0 || len[i] > n_ctx)
            rc = api_fail(len[i] ? LLAISYS_ERR_TOO_LONG : LLAISYS_ERR_INVALID_ARG,
                          "input %d has %d tokens (1..%d) (param: input)", i, len[i], n_ctx);
    }
    if (!rc)
        rc = pool_prompts(e, "llaisys_engine_embed", ids, len, n, e->pooling.mode, q.no_cache, 0,
                          vecs);
    if (!rc) {
        int dim = H;
        for (int i = 0; i < n; i++)
            dim = pooling_output(&e->pooling, vecs[i], H, q.dimensions);
        *result_json = oai_embeddings_body(e->name, (const float *const *)vecs, n, dim,
                                           q.embed_base64, tokens);
        if (!*result_json)
            rc = api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_embed: out of memory for the "
                          "result");
    }
    for (int i = 0; i < n; i++) {
        if (ids)
            free(ids[i]);
        if (vecs)
            free(vecs[i]);
    }
    free(ids), free(len), free(vecs);
    oai_request_free(&q);
    return rc;
}

int32_t llaisys_engine_rerank(llaisys_engine *e, const char *request_json, char **result_json)
{
    if (!result_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_rerank: result_json is NULL");
    *result_json = NULL;
    if (!e || !request_json)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_engine_rerank: NULL %s",
                        e ? "request" : "engine");
    if (!e->reranker.n_rows)
        return api_fail(LLAISYS_ERR_UNSUPPORTED, "llaisys_engine_rerank: this model does not "
                        "rerank: %s", e->rerank_err.msg);
    struct oai_request q;
    struct oai_error oe;
    if (oai_rerank_parse(&q, request_json, strlen(request_json), "llaisys_engine_rerank",
                         &oe) != LL_OK)
        return oai_fail(&oe);
    const int n = q.n_prompts, n_ctx = engine_get_opts(e->e)->n_ctx;
    int32_t rc = LLAISYS_OK;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int *len = calloc((size_t)n, sizeof *len), tokens = 0;
    float **vecs = calloc((size_t)n, sizeof *vecs);
    double *scores = calloc((size_t)n, sizeof *scores);
    if (!ids || !len || !vecs || !scores)
        rc = api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_rerank: out of memory");
    for (int i = 0; !rc && i < n; i++) {
        struct ll_err err = {0};
        enum ll_status s = reranker_prompt(&e->reranker, e->tok, q.instruction, q.query,
                                           q.query_len, q.prompts[i].text, q.prompts[i].text_len,
                                           &ids[i], &len[i], &err);
        if (s != LL_OK)
            rc = api_status(s, &err);
        else if (len[i] > n_ctx)
            rc = api_fail(LLAISYS_ERR_TOO_LONG, "the query with document %d makes a prompt of %d "
                          "tokens; the context holds %d (param: documents[%d])", i, len[i], n_ctx,
                          i);
        tokens += len[i];
    }
    int shared = rc ? 0
                    : reranker_shared_prefix(&e->reranker, e->tok, q.instruction, q.query,
                                             q.query_len, ids, len, n);
    if (!rc && shared < 0)
        rc = api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_rerank: out of memory");
    if (!rc)
        rc = pool_prompts(e, "llaisys_engine_rerank", ids, len, n, LL_POOL_LAST, q.no_cache,
                          shared, vecs);
    if (!rc) {
        for (int i = 0; i < n; i++)
            scores[i] = reranker_score(&e->reranker, vecs[i]);
        *result_json = oai_rerank_body(NULL, e->name, scores, n, q.top_n,
                                       q.return_documents ? q.prompts : NULL, tokens);
        if (!*result_json)
            rc = api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_engine_rerank: out of memory for the "
                          "result");
    }
    for (int i = 0; i < n; i++) {
        if (ids)
            free(ids[i]);
        if (vecs)
            free(vecs[i]);
    }
    free(ids), free(len), free(vecs), free(scores);
    oai_request_free(&q);
    return rc;
}
