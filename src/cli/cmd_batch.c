/*
 * cmd_batch.c: `llaisys-cli batch`: offline serving of a JSONL file through the engine.
 *
 * Every line is one OpenAI request body, parsed and checked by the server's parser
 * (oai_batch_line_parse in openai_request.h, so the fields, ranges and messages are the HTTP
 * API's): a /v1/chat/completions body when it has "messages" (rendered with the model's chat
 * template), else a /v1/completions body ("prompt": text encoded with BOS, token ids, or a list
 * of either), plus "id" (any JSON value, echoed; default the line number). Fields about the
 * transport (stream, stream_options, model, user) have no effect. Sampling defaults are the
 * policy of gen_params.h, as in the server and `generate`.
 * All requests are submitted at once, then the engine runs until every one has finished; one
 * JSON line per prompt and choice is printed as it finishes: id, index (prompt × n + choice, as
 * the server numbers choices), text (after the prompt's text with echo), token_ids,
 * finish_reason (stop_token_id or stop_reason: the stop string), logprobs when asked ([{id,
 * logprob, top_logprobs: [[id, logprob], ...]}]), seed (the one drawn when none was given),
 * usage (with prompt_tokens_details.cached_tokens and completion_tokens_details: reasoning_tokens,
 * and accepted_prediction_tokens / rejected_prediction_tokens, the draft tokens verified for it
 * under --spec) and timings; a request that could not be
 * submitted prints {"id", "error": {message, type, param, code}} (the server's error object,
 * the message prefixed with the line number) at once.
 * Runs on the main thread (engine_step); exit status 0 when every request finished without
 * error, 1 otherwise, 2 for bad arguments.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "chat_template.h"
#include "cli_args.h"
#include "commands.h"
#include "engine.h"
#include "engine_args.h"
#include "model.h"
#include "openai_request.h"
#include "tokenizer.h"
#include "util.h"

static void batch_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli batch --model DIR --input FILE.jsonl [options]\n"
               "Runs every request of FILE (one JSON object per line; '-' reads stdin) at once\n"
               "and prints one JSON line per finished request.\n\n"
               "  --stats        print the engine's counters to stderr at the end\n\n");
    engine_args_usage(f, ENGINE_OPTS_ALL);
}

/* One request line, shared by its choices; freed when the last of them is printed. */
struct line {
    cJSON *id;              /* echoed in every output line */
    struct oai_request req; /* parsed line (its stop strings name stop_reason) */
    uint64_t seed;          /* the seed the request ran with */
    int live;               /* choices submitted and not printed yet */
};

/* One prompt × choice of a line. */
struct job {
    struct line *line;
    int index;                /* prompt × n + choice */
    struct engine_req *req;   /* NULL once printed */
    int32_t *ids;             /* generated ids */
    struct sampler_logprobs *lp; /* (n_ids) when logprobs were asked for */
    int n_ids, cap_ids;
    struct ll_buf text;       /* the echoed prompt, then the generated text */
};

static void print_line(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        puts(s);
    else
        fprintf(stderr, "llaisys-cli batch: out of memory printing a result\n");
    fflush(stdout);
    free(s);
    cJSON_Delete(o);
}

/* Print {"id": ..., "error": {...}} for line line_no that could not run. */
static void print_error_line(const cJSON *id, int line_no, const struct oai_error *e)
{
    struct oai_error pe = *e;
    snprintf(pe.message, sizeof pe.message, "line %d: %.480s", line_no, e->message);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNumber(line_no));
    cJSON_AddItemToObject(o, "error", oai_error_object(&pe));
    print_line(o);
}

/* A JSON number holding v exactly (seeds are 64-bit; a double would round them). */
static cJSON *exact_int(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return cJSON_CreateRaw(buf);
}

static void print_result(const struct job *j, const struct engine_output *out)
{
    const struct oai_request *r = &j->line->req;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(j->line->id, true));
    cJSON_AddNumberToObject(o, "index", j->index);
    cJSON_AddItemToObject(o, "text", cJSON_CreateString(j->text.data ? j->text.data : ""));
    cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < j->n_ids; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->ids[i]));
    cJSON_AddStringToObject(o, "finish_reason", engine_finish_str(out->finish));
    if (out->finish == ENGINE_FINISH_STOP && out->stop_str >= 0 && out->stop_str < r->n_stop)
        cJSON_AddStringToObject(o, "stop_reason", r->stop[out->stop_str]);
    else if (out->finish == ENGINE_FINISH_STOP)
        cJSON_AddNumberToObject(o, "stop_token_id", out->stop_id);
    if (r->logprobs) {
        cJSON *lps = cJSON_AddArrayToObject(o, "logprobs");
        for (int i = 0; i < j->n_ids; i++) {
            const struct sampler_logprobs *lp = &j->lp[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "id", j->ids[i]);
            cJSON_AddNumberToObject(e, "logprob", isfinite(lp->logprob) ? lp->logprob : -9999.0);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < lp->n_top; k++) {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(lp->top_ids[k]));
                cJSON_AddItemToArray(pair, cJSON_CreateNumber(isfinite(lp->top_logprobs[k])
                                                                  ? lp->top_logprobs[k]
                                                                  : -9999.0));
                cJSON_AddItemToArray(top, pair);
            }
            cJSON_AddItemToArray(lps, e);
        }
    }
    if (out->finish == ENGINE_FINISH_ERROR)
        cJSON_AddStringToObject(o, "error", out->error);
    cJSON_AddItemToObject(o, "seed", exact_int((int64_t)j->line->seed));
    const struct engine_usage *u = &out->usage;
    cJSON *us = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(us, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(us, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(us, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *det = cJSON_AddObjectToObject(us, "prompt_tokens_details");
    cJSON_AddNumberToObject(det, "cached_tokens", u->cached_tokens);
    cJSON *cdet = cJSON_AddObjectToObject(us, "completion_tokens_details");
    cJSON_AddNumberToObject(cdet, "reasoning_tokens", u->reasoning_tokens);
    cJSON_AddNumberToObject(cdet, "accepted_prediction_tokens", u->spec_accepted);
    cJSON_AddNumberToObject(cdet, "rejected_prediction_tokens", u->spec_drafted - u->spec_accepted);
    cJSON_AddNumberToObject(us, "preemptions", u->preemptions);
    const struct engine_timings *t = &out->timings;
    cJSON *tm = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(tm, "queue_ms", t->queue_s * 1e3);
    cJSON_AddNumberToObject(tm, "ttft_ms", t->ttft_s * 1e3);
    cJSON_AddNumberToObject(tm, "decode_ms", t->decode_s * 1e3);
    cJSON_AddNumberToObject(tm, "total_ms", t->total_s * 1e3);
    double rate = u->completion_tokens > 1 && t->decode_s > 0
                      ? (u->completion_tokens - 1) / t->decode_s
                      : 0;
    cJSON_AddNumberToObject(tm, "decode_tokens_per_s", rate);
    print_line(o);
}

/* Append what a poll returned to the job. Returns false on out of memory. */
static bool job_take(struct job *j, const struct engine_output *out)
{
    bool lps = j->line->req.logprobs;
    if (j->n_ids + out->n_ids > j->cap_ids) {
        int c = j->cap_ids ? j->cap_ids : 64;
        while (c < j->n_ids + out->n_ids)
            c *= 2;
        int32_t *n = realloc(j->ids, sizeof(int32_t) * (size_t)c);
        if (!n)
            return false;
        j->ids = n;
        if (lps) {
            struct sampler_logprobs *l = realloc(j->lp, sizeof *l * (size_t)c);
            if (!l)
                return false;
            j->lp = l;
        }
        j->cap_ids = c;
    }
    if (out->n_ids)
        memcpy(j->ids + j->n_ids, out->ids, sizeof(int32_t) * (size_t)out->n_ids);
    if (out->n_ids && lps && out->logprobs)
        memcpy(j->lp + j->n_ids, out->logprobs, sizeof *j->lp * (size_t)out->n_ids);
    j->n_ids += out->n_ids;
    return ll_buf_append(&j->text, out->text.data, out->text.len);
}

static void job_free(struct job *j)
{
    engine_req_release(j->req);
    free(j->ids);
    free(j->lp);
    ll_buf_free(&j->text);
    memset(j, 0, sizeof *j);
}

static void line_free(struct line *l)
{
    if (!l)
        return;
    cJSON_Delete(l->id);
    oai_request_free(&l->req);
    free(l);
}

/* A job is done with its line: the last one frees it. */
static void line_release(struct line *l)
{
    if (--l->live == 0)
        line_free(l);
}

struct batch_ctx {
    struct engine *e;
    const struct model *m;
    const struct tokenizer *tok;
    struct chat_template *tmpl;
    char *bos, *eos;
    bool tmpl_tried;
    struct ll_err tmpl_err;
    struct job *jobs;
    int n_jobs, cap_jobs;
};

static enum ll_status from_err(struct oai_error *e, const struct ll_err *err, enum ll_status s)
{
    return oai_error_set(e, s, NULL, NULL, "%s", err->msg);
}

/* The chat prompt of r as ids (*ids malloc'd): the model's template, encoded without BOS (the
 * template writes it), as the server's chat route does. */
static enum ll_status chat_ids(struct batch_ctx *c, const struct oai_request *r, int32_t **ids,
                               int *n, struct oai_error *e)
{
    if (!c->tmpl_tried) {
        c->tmpl_tried = true;
        if (chat_template_load_model(&c->tmpl, &c->bos, &c->eos, c->m->dir, &c->tmpl_err) !=
            LL_OK)
            c->tmpl = NULL;
    }
    if (!c->tmpl)
        return oai_error_set(e, c->tmpl_err.code ? c->tmpl_err.code : LL_ETEMPLATE, "messages",
                             "no_chat_template", "%s", c->tmpl_err.msg);
    struct ll_err err = {0};
    char *text = NULL;
    size_t len = 0, cnt = 0;
    enum ll_status s = chat_template_render_ex(c->tmpl, r->chat_context, c->bos, c->eos, NULL,
                                               &text, &len, &err);
    if (s != LL_OK) {
        free(text);
        return oai_error_set(e, s, "messages", "chat_template_error", "%s", err.msg);
    }
    s = tokenizer_encode(c->tok, text, len, false, ids, &cnt, &err);
    free(text);
    *n = (int)cnt;
    return s == LL_OK ? LL_OK : from_err(e, &err, s);
}

/* Room for `more` jobs (zeroed). */
static bool jobs_reserve(struct batch_ctx *c, int more)
{
    if (c->n_jobs + more <= c->cap_jobs)
        return true;
    int cap = c->cap_jobs ? c->cap_jobs : 256;
    while (cap < c->n_jobs + more)
        cap *= 2;
    struct job *g = realloc(c->jobs, sizeof *g * (size_t)cap);
    if (!g)
        return false;
    memset(g + c->cap_jobs, 0, sizeof *g * (size_t)(cap - c->cap_jobs));
    c->jobs = g;
    c->cap_jobs = cap;
    return true;
}

/* Submit every prompt × choice of line l as jobs at the end of c->jobs. On error nothing of
 * the line stays submitted and l is still the caller's. */
static enum ll_status submit_line(struct batch_ctx *c, struct line *l, struct oai_error *e)
{
    const struct oai_request *r = &l->req;
    int n_prompts = r->kind == OAI_CHAT ? 1 : r->n_prompts;
    int32_t **owned = calloc((size_t)n_prompts, sizeof *owned); /* ids encoded here */
    enum ll_status s = LL_OK;
    if (!owned || !jobs_reserve(c, n_prompts * r->n)) {
        free(owned);
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    }
    struct engine_params base;
    oai_request_params(r, &c->m->gen, &base);
    l->seed = base.sampling.seed;
    int first = c->n_jobs;
    for (int p = 0; p < n_prompts && s == LL_OK; p++) {
        const int32_t *ids;
        int n = 0;
        if (r->kind == OAI_CHAT) {
            s = chat_ids(c, r, &owned[p], &n, e);
            ids = owned[p];
        } else if (r->prompts[p].text) {
            struct ll_err err = {0};
            size_t cnt = 0;
            s = tokenizer_encode(c->tok, r->prompts[p].text, r->prompts[p].text_len, true,
                                 &owned[p], &cnt, &err);
            if (s != LL_OK)
                from_err(e, &err, s);
            ids = owned[p];
            n = (int)cnt;
        } else {
            ids = r->prompts[p].ids;
            n = r->prompts[p].n_ids;
        }
        /* the choices of one prompt go in together, choice 0 first: the others wait for its
         * prompt blocks and share them (engine.h) */
        for (int k = 0; k < r->n && s == LL_OK; k++) {
            struct job *j = &c->jobs[c->n_jobs];
            struct ll_err err = {0};
            j->line = l;
            j->index = p * r->n + k;
            if (r->echo) {
                char *text = NULL;
                size_t len = 0;
                s = tokenizer_decode(c->tok, ids, (size_t)n, r->skip_special_tokens, &text,
                                     &len, &err);
                if (s == LL_OK && !ll_buf_append(&j->text, text, len))
                    s = ll_err_set(&err, LL_ENOMEM, "out of memory");
                free(text);
            }
            struct engine_params ep = base;
            ep.prompt = ids;
            ep.n_prompt = n;
            ep.choice = k;
            if (s == LL_OK)
                s = engine_submit(c->e, &ep, &j->req, &err);
            c->n_jobs++;
            if (s != LL_OK)
                from_err(e, &err, s);
        }
    }
    for (int p = 0; p < n_prompts; p++)
        free(owned[p]);
    free(owned);
    if (s != LL_OK) {
        while (c->n_jobs > first)
            job_free(&c->jobs[--c->n_jobs]);
        return s;
    }
    l->live = c->n_jobs - first;
    return LL_OK;
}

int cmd_batch(int argc, char **argv)
{
    const char *dir = NULL, *input = NULL;
    bool stats = false;
    struct engine_opts o = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--input", &input),
        CLI_SET("--stats", &stats),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "batch", .usage = batch_usage, .args = args,
                                .engine_mask = ENGINE_OPTS_ALL, .engine = &o};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir || !input)
        return cli_args_fail(&cmd, "--model and --input are required");

    struct ll_err err = {0};
    char *data = NULL;
    size_t len = 0;
    if (!strcmp(input, "-") ? ll_read_stream(stdin, "standard input", &data, &len, &err) != LL_OK
                            : ll_read_file(input, &data, &len, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        return 1;
    }
    /* Count lines to size the queue (a line takes up to OAI_MAX_N places). */
    int n_lines = 0;
    for (size_t i = 0; i < len; i++)
        n_lines += data[i] == '\n';
    n_lines++;
    if (o.max_queue == 0) /* everything is submitted at once */
        o.max_queue = n_lines > (1 << 24) / OAI_MAX_N ? 1 << 24
                      : n_lines * OAI_MAX_N > 256   ? n_lines * OAI_MAX_N
                                                    : 256;

    struct batch_ctx c = {0};
    int rc = 1, failed = 0, live = 0;
    struct engine_output out = {0};
    if (engine_create(&c.e, dir, &o, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        goto out;
    }
    engine_args_print(stderr, c.e);
    c.m = engine_model(c.e);
    c.tok = engine_tokenizer(c.e);

    double t0 = ll_now();
    int line_no = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        size_t n = strlen(line);
        if (strspn(line, " \t\r") == n)
            continue; /* blank line */
        struct oai_error e = {0};
        struct line *l = calloc(1, sizeof *l);
        enum ll_status s = l ? oai_batch_line_parse(&l->req, &l->id, line, n, &e)
                             : oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
        if (s == LL_OK && !l->id && !(l->id = cJSON_CreateNumber(line_no)))
            s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
        if (s == LL_OK)
            s = oai_request_check_supported(&l->req, &e);
        if (s == LL_OK && l->req.tools && l->req.tool_choice != OAI_TOOL_NONE)
            s = oai_error_set(&e, LL_EUNSUPPORTED, "tools", "unsupported_parameter",
                              "'tools': batch does not parse tool calls (the server does)");
        if (s == LL_OK)
            s = submit_line(&c, l, &e);
        if (s != LL_OK) {
            print_error_line(l ? l->id : NULL, line_no, &e);
            line_free(l);
            failed++;
        }
    }

    /* Run until everything has finished, printing each request as it finishes. */
    for (int i = 0; i < c.n_jobs; i++)
        live += c.jobs[i].req != NULL;
    while (live > 0) {
        bool did;
        if (engine_step(c.e, &did, &err) != LL_OK)
            fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        for (int i = 0; i < c.n_jobs; i++) {
            struct job *j = &c.jobs[i];
            if (!j->req || !engine_poll(j->req, &out))
                continue;
            if (!job_take(j, &out)) {
                fprintf(stderr, "llaisys-cli batch: out of memory\n");
                goto out;
            }
            if (out.finish) {
                print_result(j, &out);
                failed += out.finish == ENGINE_FINISH_ERROR;
                line_release(j->line);
                job_free(j);
                live--;
            }
        }
        if (!did && live > 0) {
            /* Nothing ran but requests remain: cannot happen with a consistent engine. */
            fprintf(stderr, "llaisys-cli batch: the engine stalled with %d requests left\n",
                    live);
            break;
        }
    }
    engine_output_free(&out);
    double wall = ll_now() - t0;
    struct engine_stats st;
    engine_get_stats(c.e, &st);
    fprintf(stderr, "batch: %d requests (%d failed) in %.3f s; %llu tokens generated "
            "(%.2f tokens/s), %llu prompt tokens computed, %llu from the prefix cache\n",
            c.n_jobs + failed, failed, wall, (unsigned long long)st.generated_tokens,
            st.generated_tokens / (wall > 0 ? wall : 1e-9),
            (unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_tokens);
    if (stats)
        fprintf(stderr, "stats: steps %llu, decode rows %llu, preemptions %llu, rejected %llu, "
                "busy %.3f s; KV blocks %d: %d in use, %d cached, %d free\n",
                (unsigned long long)st.steps, (unsigned long long)st.decode_tokens,
                (unsigned long long)st.preemptions, (unsigned long long)st.rejected, st.busy_s,
                st.kv_blocks, st.kv_in_use, st.kv_cached, st.kv_free);
    if (stats && st.spec_drafted)
        fprintf(stderr, "spec: %llu draft tokens verified, %llu accepted (%.1f %%)\n",
                (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted,
                100.0 * (double)st.spec_accepted / (double)st.spec_drafted);
    rc = failed || live ? 1 : 0;
out:
    engine_output_free(&out);
    for (int i = 0; i < c.n_jobs; i++) {
        if (c.jobs[i].req) /* unfinished: the line waits for it */
            line_release(c.jobs[i].line);
        job_free(&c.jobs[i]);
    }
    free(c.jobs);
    engine_destroy(c.e);
    chat_template_free(c.tmpl);
    free(c.bos);
    free(c.eos);
    free(data);
    return rc;
}
