/*
 * cmd_batch.c: `llaisys-cli batch`: offline serving of a JSONL file through the engine.
 *
 * Every line is one request, a JSON object: "id" (any JSON value, echoed back; default the line
 * number), the prompt as "prompt" (text, encoded with BOS), "ids" (token ids) or "messages"
 * (rendered with the model's chat template, add_generation_prompt), and OpenAI-style sampling
 * fields: max_tokens (or max_completion_tokens), min_tokens, temperature, top_p, top_k, min_p,
 * seed, presence_penalty, frequency_penalty, repetition_penalty, logit_bias ({"id": bias}),
 * stop (a string or up to 16), stop_token_ids, ignore_eos, skip_special_tokens, logprobs
 * (true) with top_logprobs (0..20), n (choices, 1..64). Missing sampling fields take
 * generation_config.json's values (greedy when it says do_sample false; its min_p and
 * repetition_penalty), else the OpenAI defaults (temperature 1, top_p 1). All requests are
 * submitted at once, then the engine runs until every one has finished; one JSON line per
 * request and choice is printed as it finishes: id, index (the choice), text, token_ids,
 * finish_reason (stop_token_id or stop_reason: the stop string), logprobs when asked ([{id,
 * logprob, top_logprobs: [[id, logprob], ...]}]), usage (with prompt_tokens_details.
 * cached_tokens) and timings; a request that could not be submitted prints {"id", "error":
 * {message, type, code}} at once.
 * Runs on the main thread (engine_step); exit status 0 when every request finished without
 * error, 1 otherwise, 2 for bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "commands.h"
#include "engine.h"
#include "engine_args.h"
#include "model.h"
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

#define BATCH_MAX_N 64

struct job {
    cJSON *id;                /* owned copy of the line's id (choice 0 owns it) */
    int index;                /* the choice */
    struct engine_req *req;   /* NULL once printed (or never submitted) */
    int32_t *ids;             /* generated ids */
    struct sampler_logprobs *lp; /* (n_ids) when logprobs were asked for */
    int n_ids, cap_ids;
    char *text;
    size_t len, cap;
    uint64_t seed;
    bool logprobs;
    char **stop;              /* (n_stop) the line's stop strings, for stop_reason */
    int n_stop;
};

/* Print {"id": ..., "error": {...}} for a request that failed before running. */
static void print_error_line(const cJSON *id, enum ll_status code, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", ll_status_type(code));
    cJSON_AddNumberToObject(e, "code", ll_status_http(code));
    cJSON_AddItemToObject(o, "error", e);
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        puts(s);
    fflush(stdout);
    free(s);
    cJSON_Delete(o);
}

static void print_result(const struct job *j, const struct engine_output *out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(j->id, true));
    cJSON_AddNumberToObject(o, "index", j->index);
    cJSON_AddItemToObject(o, "text", cJSON_CreateString(j->text ? j->text : ""));
    cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < j->n_ids; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->ids[i]));
    cJSON_AddStringToObject(o, "finish_reason", engine_finish_str(out->finish));
    if (out->finish == ENGINE_FINISH_STOP && out->stop_str >= 0 && out->stop_str < j->n_stop)
        cJSON_AddStringToObject(o, "stop_reason", j->stop[out->stop_str]);
    else if (out->finish == ENGINE_FINISH_STOP)
        cJSON_AddNumberToObject(o, "stop_token_id", out->stop_id);
    if (j->logprobs) {
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
    cJSON_AddNumberToObject(o, "seed", (double)j->seed);
    const struct engine_usage *u = &out->usage;
    cJSON *us = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(us, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(us, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(us, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *det = cJSON_AddObjectToObject(us, "prompt_tokens_details");
    cJSON_AddNumberToObject(det, "cached_tokens", u->cached_tokens);
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
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        puts(s);
    fflush(stdout);
    free(s);
    cJSON_Delete(o);
}

/* Append what a poll returned to the job. Returns false on out of memory. */
static bool job_take(struct job *j, const struct engine_output *out)
{
    if (j->n_ids + out->n_ids > j->cap_ids) {
        int c = j->cap_ids ? j->cap_ids : 64;
        while (c < j->n_ids + out->n_ids)
            c *= 2;
        int32_t *n = realloc(j->ids, sizeof(int32_t) * (size_t)c);
        if (!n)
            return false;
        j->ids = n;
        if (j->logprobs) {
            struct sampler_logprobs *l = realloc(j->lp, sizeof *l * (size_t)c);
            if (!l)
                return false;
            j->lp = l;
        }
        j->cap_ids = c;
    }
    if (out->n_ids)
        memcpy(j->ids + j->n_ids, out->ids, sizeof(int32_t) * (size_t)out->n_ids);
    if (out->n_ids && j->logprobs && out->logprobs)
        memcpy(j->lp + j->n_ids, out->logprobs, sizeof *j->lp * (size_t)out->n_ids);
    j->n_ids += out->n_ids;
    if (j->len + out->text_len + 1 > j->cap) {
        size_t c = j->cap ? j->cap : 256;
        while (c < j->len + out->text_len + 1)
            c *= 2;
        char *n = realloc(j->text, c);
        if (!n)
            return false;
        j->text = n;
        j->cap = c;
    }
    if (out->text_len)
        memcpy(j->text + j->len, out->text, out->text_len);
    j->len += out->text_len;
    j->text[j->len] = '\0';
    return true;
}

struct batch_ctx {
    struct engine *e;
    const struct model *m;
    const struct tokenizer *tok;
    struct chat_template *tmpl;
    char *bos, *eos;
    bool tmpl_tried;
    struct ll_err tmpl_err;
    uint64_t clock_seed;
};

/* Read a number field into *out; returns 0 (absent: *has false), -1 with a message. */
static int num_field(const cJSON *o, const char *name, double *out, bool *has, struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *has = false;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v)) {
        ll_err_set(err, LL_EINVAL, "field \"%s\" must be a number", name);
        return -1;
    }
    *out = v->valuedouble;
    *has = true;
    return 0;
}

static int bool_field(const cJSON *o, const char *name, bool *out, struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        ll_err_set(err, LL_EINVAL, "field \"%s\" must be true or false", name);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A JSON array of token ids into *ids (malloc'd). */
static enum ll_status id_array(const cJSON *a, const char *name, int32_t **ids, int *n,
                               struct ll_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!cJSON_IsArray(a))
        return ll_err_set(err, LL_EINVAL, "field \"%s\" must be an array of token ids", name);
    int cnt = cJSON_GetArraySize(a);
    *ids = malloc(sizeof(int32_t) * (size_t)(cnt ? cnt : 1));
    if (!*ids)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, a)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
            v->valuedouble != (double)(int32_t)v->valuedouble) {
            free(*ids);
            *ids = NULL;
            return ll_err_set(err, LL_EINVAL, "field \"%s\"[%d] is not a token id", name, *n);
        }
        (*ids)[(*n)++] = (int32_t)v->valuedouble;
    }
    return LL_OK;
}

/* The prompt of a line as ids. */
static enum ll_status line_prompt(struct batch_ctx *c, const cJSON *o, int32_t **ids, int *n,
                                  struct ll_err *err)
{
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "ids");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!!prompt + !!arr + !!msgs != 1)
        return ll_err_set(err, LL_EINVAL, "give exactly one of \"prompt\", \"ids\", \"messages\"");
    if (arr)
        return id_array(arr, "ids", ids, n, err);
    size_t cnt = 0;
    enum ll_status s;
    if (prompt) {
        if (!cJSON_IsString(prompt))
            return ll_err_set(err, LL_EINVAL, "field \"prompt\" must be a string");
        s = tokenizer_encode(c->tok, prompt->valuestring, strlen(prompt->valuestring), true, ids,
                             &cnt, err);
        *n = (int)cnt;
        return s;
    }
    if (!cJSON_IsArray(msgs))
        return ll_err_set(err, LL_EINVAL, "field \"messages\" must be an array");
    if (!c->tmpl_tried) {
        c->tmpl_tried = true;
        if (chat_template_load_model(&c->tmpl, &c->bos, &c->eos, c->m->dir, &c->tmpl_err) !=
            LL_OK)
            c->tmpl = NULL;
    }
    if (!c->tmpl) {
        ll_err_set(err, c->tmpl_err.code ? c->tmpl_err.code : LL_ETEMPLATE, "%s",
                   c->tmpl_err.msg);
        return err ? err->code : LL_ETEMPLATE;
    }
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx || !cJSON_AddItemReferenceToObject(ctx, "messages", (cJSON *)msgs) ||
        !cJSON_AddTrueToObject(ctx, "add_generation_prompt")) {
        cJSON_Delete(ctx);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    char *text = NULL;
    size_t len = 0;
    s = chat_template_render_ex(c->tmpl, ctx, c->bos, c->eos, NULL, &text, &len, err);
    cJSON_Delete(ctx);
    if (s == LL_OK)
        s = tokenizer_encode(c->tok, text, len, false, ids, &cnt, err);
    free(text);
    *n = (int)cnt;
    return s;
}

/* The line's "n" (1..BATCH_MAX_N; 1 when absent), or 0 with a message. */
static int line_n(const cJSON *o, struct ll_err *err)
{
    const cJSON *nf = cJSON_GetObjectItemCaseSensitive(o, "n");
    if (!nf || cJSON_IsNull(nf))
        return 1;
    if (!cJSON_IsNumber(nf) || nf->valuedouble < 1 || nf->valuedouble > BATCH_MAX_N ||
        nf->valuedouble != (double)(int)nf->valuedouble) {
        ll_err_set(err, LL_EINVAL, "field \"n\" must be an integer from 1 to %d", BATCH_MAX_N);
        return 0;
    }
    return (int)nf->valuedouble;
}

/* "stop": a string or an array of strings, copied into j (choice 0's copy, shared). */
static enum ll_status stop_field(const cJSON *o, struct job *j, struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v))
        return LL_OK;
    int cnt = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (cnt < 0 || cnt > ENGINE_MAX_STOP_STRINGS)
        return ll_err_set(err, LL_EINVAL, "field \"stop\" must be a string or an array of at "
                          "most %d strings", ENGINE_MAX_STOP_STRINGS);
    if (cnt && !(j->stop = calloc((size_t)cnt, sizeof *j->stop)))
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    const cJSON *x = cJSON_IsString(v) ? v : v->child;
    for (int i = 0; i < cnt; i++, x = x->next) {
        if (!cJSON_IsString(x))
            return ll_err_set(err, LL_EINVAL, "field \"stop\"[%d] must be a string", i);
        if (!(j->stop[i] = strdup(x->valuestring)))
            return ll_err_set(err, LL_ENOMEM, "out of memory");
        j->n_stop = i + 1;
    }
    return LL_OK;
}

/* "logit_bias": {"id": bias, ...} into *b (malloc'd). */
static enum ll_status bias_field(const cJSON *o, struct sampler_bias **b, int *n,
                                 struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
    *b = NULL;
    *n = 0;
    if (!v || cJSON_IsNull(v))
        return LL_OK;
    if (!cJSON_IsObject(v))
        return ll_err_set(err, LL_EINVAL, "field \"logit_bias\" must map token ids to numbers");
    int cnt = cJSON_GetArraySize(v);
    if (cnt && !(*b = malloc(sizeof **b * (size_t)cnt)))
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        char *end;
        long id = strtol(x->string, &end, 10);
        if (!x->string[0] || *end || id < 0 || id > 2147483647L || !cJSON_IsNumber(x))
            return ll_err_set(err, LL_EINVAL, "field \"logit_bias\": \"%.40s\" must be a "
                              "token id with a number", x->string);
        (*b)[(*n)++] = (struct sampler_bias){(int32_t)id, (float)x->valuedouble};
    }
    return LL_OK;
}

/* A number field that must lie in [lo, hi]: 0 (absent leaves *out), -1 with a message. */
static int ranged(const cJSON *o, const char *name, double lo, double hi, float *out,
                  struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        ll_err_set(err, LL_EINVAL, "field \"%s\" must be a number in [%g, %g]", name, lo, hi);
        return -1;
    }
    *out = (float)v->valuedouble;
    return 0;
}

/* Build the request of one line and submit it as choices j[0..n) (j[0] holds the line's id and
 * stop strings). */
static enum ll_status submit_line(struct batch_ctx *c, const cJSON *o, struct job *j, int n_ch,
                                  uint64_t line_no, struct ll_err *err)
{
    int32_t *ids = NULL, *stops = NULL;
    struct sampler_bias *bias = NULL;
    int n = 0, n_stops = 0, n_bias = 0;
    struct engine_params p = {0};
    const struct generation_defaults *d = &c->m->gen;
    double v;
    bool has;
    enum ll_status s = LL_EINVAL;

    bool sample = d->has_do_sample ? d->do_sample : true;
    p.sampling.temperature = !sample ? 0.0f : d->has_temperature ? d->temperature : 1.0f;
    p.sampling.top_p = sample && d->has_top_p ? d->top_p : 1.0f;
    p.sampling.top_k = sample && d->has_top_k ? d->top_k : 0;
    p.sampling.min_p = sample && d->has_min_p ? d->min_p : 0.0f;
    p.penalties.repetition = d->has_repetition_penalty ? d->repetition_penalty : 1.0f;
    if (ranged(o, "min_p", 0, 1, &p.sampling.min_p, err) ||
        ranged(o, "presence_penalty", -2, 2, &p.penalties.presence, err) ||
        ranged(o, "frequency_penalty", -2, 2, &p.penalties.frequency, err) ||
        ranged(o, "repetition_penalty", 1e-6, 100, &p.penalties.repetition, err))
        goto done;
    if ((s = stop_field(o, j, err)) != LL_OK || (s = bias_field(o, &bias, &n_bias, err)) != LL_OK)
        goto done;
    s = LL_EINVAL;
    if (bool_field(o, "logprobs", &p.logprobs, err))
        goto done;
    if (num_field(o, "top_logprobs", &v, &has, err))
        goto done;
    if (has) {
        if (v < 0 || v > SAMPLER_MAX_TOP_LOGPROBS || v != (double)(int)v || !p.logprobs) {
            ll_err_set(err, LL_EINVAL, "field \"top_logprobs\" must be an integer 0..%d, with "
                       "\"logprobs\": true", SAMPLER_MAX_TOP_LOGPROBS);
            goto done;
        }
        p.top_logprobs = (int)v;
    }
    if (num_field(o, "min_tokens", &v, &has, err))
        goto done;
    if (has) {
        if (v < 0 || v > 1e9 || v != (double)(int)v) {
            ll_err_set(err, LL_EINVAL, "field \"min_tokens\" must be an integer >= 0");
            goto done;
        }
        p.min_tokens = (int)v;
    }
    j->seed = (c->clock_seed + line_no * 0x9e3779b97f4a7c15ull) & ((1ull << 53) - 1);
    if (num_field(o, "temperature", &v, &has, err))
        goto done;
    if (has) {
        if (v < 0 || v > 100) {
            ll_err_set(err, LL_EINVAL, "field \"temperature\" must be in [0, 100]");
            goto done;
        }
        p.sampling.temperature = (float)v;
    }
    if (num_field(o, "top_p", &v, &has, err))
        goto done;
    if (has) {
        if (v <= 0 || v > 1) {
            ll_err_set(err, LL_EINVAL, "field \"top_p\" must be in (0, 1]");
            goto done;
        }
        p.sampling.top_p = (float)v;
    }
    if (num_field(o, "top_k", &v, &has, err))
        goto done;
    if (has) {
        if (v < -1 || v > 1e9 || v != (double)(int)v) {
            ll_err_set(err, LL_EINVAL, "field \"top_k\" must be an integer >= -1 (-1, 0: off)");
            goto done;
        }
        p.sampling.top_k = v < 0 ? 0 : (int)v;
    }
    if (num_field(o, "seed", &v, &has, err))
        goto done;
    if (has) {
        if (v < 0 || v > 9007199254740991.0 || v != (double)(uint64_t)v) {
            ll_err_set(err, LL_EINVAL, "field \"seed\" must be a non-negative integer");
            goto done;
        }
        j->seed = (uint64_t)v;
    }
    p.sampling.seed = j->seed;
    const char *mt = cJSON_GetObjectItemCaseSensitive(o, "max_completion_tokens")
                         ? "max_completion_tokens"
                         : "max_tokens";
    if (num_field(o, mt, &v, &has, err))
        goto done;
    if (has) {
        if (v < 1 || v > 1e9 || v != (double)(int)v) {
            ll_err_set(err, LL_EINVAL, "field \"%s\" must be a positive integer", mt);
            goto done;
        }
        p.max_tokens = (int)v;
    }
    if (bool_field(o, "ignore_eos", &p.ignore_eos, err))
        goto done;
    bool skip = true;
    if (bool_field(o, "skip_special_tokens", &skip, err))
        goto done;
    p.keep_special = !skip;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stop_token_ids");
    if (st && (s = id_array(st, "stop_token_ids", &stops, &n_stops, err)) != LL_OK)
        goto done;
    if ((s = line_prompt(c, o, &ids, &n, err)) != LL_OK)
        goto done;
    p.prompt = ids;
    p.n_prompt = n;
    p.stop_ids = stops;
    p.n_stop_ids = n_stops;
    p.stop = (const char *const *)j->stop;
    p.n_stop = j->n_stop;
    p.logit_bias = bias;
    p.n_logit_bias = n_bias;
    /* choice 0 first: the others wait for its prompt blocks and share them */
    for (int k = 0; k < n_ch; k++) {
        p.choice = k;
        j[k].index = k;
        j[k].seed = j->seed;
        j[k].logprobs = p.logprobs;
        j[k].stop = j->stop;
        j[k].n_stop = j->n_stop;
        if ((s = engine_submit(c->e, &p, &j[k].req, err)) != LL_OK) {
            for (int q = 0; q < k; q++) {
                engine_req_release(j[q].req);
                j[q].req = NULL;
            }
            break;
        }
    }
done:
    if (s != LL_OK && err && err->code != LL_OK)
        s = err->code;
    free(ids);
    free(stops);
    free(bias);
    return s;
}

int cmd_batch(int argc, char **argv)
{
    const char *dir = NULL, *input = NULL;
    bool stats = false;
    struct engine_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = engine_args_parse("batch", ENGINE_OPTS_ALL, argc, argv, &i, &o);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            batch_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(a, "--input") && i + 1 < argc) {
            input = argv[++i];
        } else if (!strcmp(a, "--stats")) {
            stats = true;
        } else {
            fprintf(stderr, "llaisys-cli batch: unknown or incomplete option '%s'\n", a);
            batch_usage(stderr);
            return 2;
        }
    }
    if (!dir || !input) {
        fprintf(stderr, "llaisys-cli batch: --model and --input are required\n");
        batch_usage(stderr);
        return 2;
    }

    struct ll_err err = {0};
    char *data = NULL;
    size_t len = 0;
    if (!strcmp(input, "-")) {
        size_t cap = 1 << 16, k;
        data = malloc(cap);
        while (data && (k = fread(data + len, 1, cap - len - 1, stdin)) > 0) {
            len += k;
            if (len + 1 == cap) {
                char *nd = realloc(data, cap *= 2);
                if (!nd)
                    free(data);
                data = nd;
            }
        }
        if (!data) {
            fprintf(stderr, "llaisys-cli batch: out of memory reading stdin\n");
            return 1;
        }
        data[len] = '\0';
    } else if (ll_read_file(input, &data, &len, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        return 1;
    }
    /* Count lines to size the job table and the queue (a line with n choices takes n). */
    int n_lines = 0;
    for (size_t i = 0; i < len; i++)
        n_lines += data[i] == '\n';
    n_lines++;
    if (o.max_queue == 0) /* everything is submitted at once */
        o.max_queue = n_lines > (1 << 24) / BATCH_MAX_N ? 1 << 24
                      : n_lines * BATCH_MAX_N > 256   ? n_lines * BATCH_MAX_N
                                                      : 256;

    struct batch_ctx c = {0};
    int cap_jobs = n_lines;
    struct job *jobs = calloc((size_t)cap_jobs, sizeof *jobs);
    int rc = 1, n_jobs = 0, failed = 0;
    if (!jobs) {
        fprintf(stderr, "llaisys-cli batch: out of memory\n");
        free(data);
        return 1;
    }
    if (engine_create(&c.e, dir, &o, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        goto out;
    }
    engine_args_print(stderr, c.e);
    c.m = engine_model(c.e);
    c.tok = engine_tokenizer(c.e);
    /* 53 bits, so that the seed each result reports is exact in JSON */
    c.clock_seed = ((uint64_t)time(NULL) ^ ((uint64_t)clock() << 20)) & ((1ull << 53) - 1);

    double t0 = ll_now();
    int line_no = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (!*p)
            continue; /* blank line */
        cJSON *obj = cJSON_Parse(p);
        struct ll_err lerr = {0};
        enum ll_status s;
        int n_ch = cJSON_IsObject(obj) ? line_n(obj, &lerr) : 1;
        if (n_jobs + (n_ch ? n_ch : 1) > cap_jobs) { /* the first line with n > 1 grows it */
            int nc = cap_jobs + (n_ch ? n_ch : 1) + n_lines;
            struct job *g = realloc(jobs, sizeof *jobs * (size_t)nc);
            if (!g) {
                fprintf(stderr, "llaisys-cli batch: out of memory\n");
                cJSON_Delete(obj);
                goto out;
            }
            memset(g + cap_jobs, 0, sizeof *jobs * (size_t)(nc - cap_jobs));
            jobs = g;
            cap_jobs = nc;
        }
        struct job *j = &jobs[n_jobs];
        if (!cJSON_IsObject(obj)) {
            s = ll_err_set(&lerr, LL_EJSON, "line %d: not a JSON object", line_no);
        } else {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
            j->id = id ? cJSON_Duplicate(id, true) : cJSON_CreateNumber(line_no);
            for (int k = 1; k < n_ch; k++) {
                jobs[n_jobs + k].id = j->id; /* borrowed */
                jobs[n_jobs + k].index = k;
            }
            s = n_ch ? submit_line(&c, obj, j, n_ch, (uint64_t)line_no, &lerr) : LL_EINVAL;
            if (s != LL_OK)
                ll_err_prefix(&lerr, "line %d: ", line_no);
        }
        if (s != LL_OK) {
            cJSON *lid = j->id ? j->id : cJSON_CreateNumber(line_no);
            print_error_line(lid, s, lerr.msg);
            if (!j->id)
                cJSON_Delete(lid);
            failed++;
        }
        n_jobs += n_ch > 0 ? n_ch : 1;
        cJSON_Delete(obj);
    }

    /* Run until everything has finished, printing each request as it finishes. */
    struct engine_output out = {0};
    int live = 0;
    for (int i = 0; i < n_jobs; i++)
        live += jobs[i].req != NULL;
    while (live > 0) {
        bool did;
        if (engine_step(c.e, &did, &err) != LL_OK)
            fprintf(stderr, "llaisys-cli batch: %s\n", err.msg);
        for (int i = 0; i < n_jobs; i++) {
            struct job *j = &jobs[i];
            if (!j->req || !engine_poll(j->req, &out))
                continue;
            if (!job_take(j, &out)) {
                fprintf(stderr, "llaisys-cli batch: out of memory\n");
                engine_output_free(&out);
                goto out;
            }
            if (out.finish) {
                print_result(j, &out);
                failed += out.finish == ENGINE_FINISH_ERROR;
                engine_req_release(j->req);
                j->req = NULL;
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
            n_jobs, failed, wall, (unsigned long long)st.generated_tokens,
            st.generated_tokens / (wall > 0 ? wall : 1e-9),
            (unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_tokens);
    if (stats)
        fprintf(stderr, "stats: steps %llu, decode rows %llu, preemptions %llu, rejected %llu, "
                "busy %.3f s; KV blocks %d: %d in use, %d cached, %d free\n",
                (unsigned long long)st.steps, (unsigned long long)st.decode_tokens,
                (unsigned long long)st.preemptions, (unsigned long long)st.rejected, st.busy_s,
                st.kv_blocks, st.kv_in_use, st.kv_cached, st.kv_free);
    rc = failed || live ? 1 : 0;
out:
    for (int i = 0; i < cap_jobs; i++) {
        engine_req_release(jobs[i].req);
        free(jobs[i].ids);
        free(jobs[i].lp);
        free(jobs[i].text);
        if (jobs[i].index == 0) { /* choice 0 owns the line's id and stop strings */
            cJSON_Delete(jobs[i].id);
            for (int k = 0; k < jobs[i].n_stop; k++)
                free(jobs[i].stop[k]);
            free(jobs[i].stop);
        }
    }
    free(jobs);
    engine_destroy(c.e);
    chat_template_free(c.tmpl);
    free(c.bos);
    free(c.eos);
    free(data);
    return rc;
}
