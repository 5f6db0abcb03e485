/*
 * metrics.c: request-level metrics and their Prometheus text exposition (format 0.0.4).
 *
 * HTTP threads record finished choices, latencies and response codes under metrics->lock (a
 * leaf lock, held for a few additions). Engine-wide gauges and counters (running/waiting, KV
 * blocks, prefix cache, preemptions) are read at render time from engine_get_stats.
 *
 * Sliding window (--metrics-window W seconds): requests per second counts the requests that
 * ended in the last W seconds (per-second slots) over W, or over the time since start when
 * that is shorter; the p50/p99 gauges are nearest-rank quantiles of the samples of requests
 * that ended in the last W seconds (the newest METRICS_WINDOW_SAMPLES of them), NaN when there
 * is none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "metrics.h"
#include "resp_store.h"
#include "util.h"

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                     0.25,  0.5,   0.75, 1,    2.5,  5,    7.5,  10,
                                     20,    40,    80,   160,  640,  2560};
static const double itl_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                    0.2,   0.3,   0.4,  0.5,   0.75, 1,     2.5, 5,
                                    7.5,   10,    20,   40,    80};
static const double long_bounds[] = {0.01, 0.1, 0.3, 0.5, 0.8, 1,   1.5, 2,   2.5, 5,   10,  15,
                                     20,   30,  40,  50,  60,  120, 240, 480, 960, 1920, 7680};

static void hist_init(struct histogram *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n = n;
}

static void hist_add(struct histogram *h, double v, uint64_t times)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i] += times;
    h->sum += v * (double)times;
    h->count += times;
}

enum ll_status metrics_init(struct metrics *m, double window_s)
{
    memset(m, 0, sizeof *m);
    if (!(m->win = calloc(1, sizeof *m->win)))
        return LL_ENOMEM;
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m->win);
        return LL_ENOMEM;
    }
    m->window = window_s > 0 ? window_s : 60;
    m->clock = ll_now;
    m->t_start = m->clock();
    _Static_assert(sizeof ttft_bounds / sizeof *ttft_bounds <= METRICS_MAX_BUCKETS, "buckets");
    _Static_assert(sizeof itl_bounds / sizeof *itl_bounds <= METRICS_MAX_BUCKETS, "buckets");
    _Static_assert(sizeof long_bounds / sizeof *long_bounds <= METRICS_MAX_BUCKETS, "buckets");
    hist_init(&m->ttft, ttft_bounds, sizeof ttft_bounds / sizeof *ttft_bounds);
    hist_init(&m->itl, itl_bounds, sizeof itl_bounds / sizeof *itl_bounds);
    hist_init(&m->queue, long_bounds, sizeof long_bounds / sizeof *long_bounds);
    hist_init(&m->e2e, long_bounds, sizeof long_bounds / sizeof *long_bounds);
    hist_init(&m->tpot, itl_bounds, sizeof itl_bounds / sizeof *itl_bounds);
    return LL_OK;
}

void metrics_free(struct metrics *m)
{
    pthread_mutex_destroy(&m->lock);
    free(m->win);
    m->win = NULL;
}

static void ring_add(struct window_ring *w, double t, double v)
{
    w->t[w->head] = t;
    w->v[w->head] = v;
    w->head = (w->head + 1) % METRICS_WINDOW_SAMPLES;
    if (w->n < METRICS_WINDOW_SAMPLES)
        w->n++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank quantiles q[0..nq) of the samples newer than since (NaN when none). tmp holds
 * METRICS_WINDOW_SAMPLES values. */
static void ring_quantiles(const struct window_ring *w, double since, const double *q, int nq,
                           double *out, double *tmp)
{
    int n = 0;
    for (int i = 0; i < w->n; i++)
        if (w->t[i] > since)
            tmp[n++] = w->v[i];
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    for (int k = 0; k < nq; k++) {
        if (n == 0) {
            out[k] = NAN;
            continue;
        }
        int rank = (int)ceil(q[k] * n); /* 1-based */
        out[k] = tmp[rank < 1 ? 0 : rank - 1];
    }
}

/* Requests that ended in the last window seconds, per second. */
static double rate(const struct metrics *m, double now)
{
    long long sec = (long long)floor(now), span = (long long)ceil(m->window);
    if (span > METRICS_RATE_SLOTS)
        span = METRICS_RATE_SLOTS;
    uint64_t n = 0;
    for (long long s = sec - span + 1; s <= sec; s++) {
        int slot = (int)(((s % METRICS_RATE_SLOTS) + METRICS_RATE_SLOTS) % METRICS_RATE_SLOTS);
        if (m->win->done.sec[slot] == s)
            n += m->win->done.n[slot];
    }
    double up = now - m->t_start, over = up < m->window ? up : m->window;
    return over > 0 ? (double)n / (over < 1 ? 1 : over) : 0;
}

void metrics_finish(struct metrics *m, enum engine_finish finish, enum cancel_reason why,
                    int prompt_tokens, int generated_tokens, double queue_s)
{
    pthread_mutex_lock(&m->lock);
    if ((unsigned)finish < ENGINE_FINISH_COUNT)
        m->finished[finish]++;
    if (why != CANCEL_NONE && (unsigned)why < CANCEL_COUNT)
        m->cancellations[why]++;
    m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    m->generation_tokens += (uint64_t)(generated_tokens > 0 ? generated_tokens : 0);
    if (queue_s > 0)
        hist_add(&m->queue, queue_s, 1);
    pthread_mutex_unlock(&m->lock);
}

void metrics_request(struct metrics *m, double ttft_s, double tpot_s, double e2e_s)
{
    pthread_mutex_lock(&m->lock);
    double now = m->clock();
    struct metrics_window *w = m->win;
    if (ttft_s >= 0) {
        hist_add(&m->ttft, ttft_s, 1);
        ring_add(&w->ttft, now, ttft_s);
    }
    if (tpot_s >= 0) {
        hist_add(&m->tpot, tpot_s, 1);
        ring_add(&w->tpot, now, tpot_s);
    }
    hist_add(&m->e2e, e2e_s, 1);
    ring_add(&w->e2e, now, e2e_s);
    long long sec = (long long)floor(now);
    int slot = (int)(((sec % METRICS_RATE_SLOTS) + METRICS_RATE_SLOTS) % METRICS_RATE_SLOTS);
    if (w->done.sec[slot] != sec) {
        w->done.sec[slot] = sec;
        w->done.n[slot] = 0;
    }
    w->done.n[slot]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_itl(struct metrics *m, double dt, int n)
{
    if (n <= 0)
        return;
    pthread_mutex_lock(&m->lock);
    hist_add(&m->itl, dt / n, (uint64_t)n);
    pthread_mutex_unlock(&m->lock);
}

void metrics_http(struct metrics *m, int status)
{
    if (status < 100 || status > 599)
        return;
    pthread_mutex_lock(&m->lock);
    m->http[status / 100]++;
    m->http_by_code[status]++;
    pthread_mutex_unlock(&m->lock);
}

/* ---- exposition ---- */

struct text {
    struct ll_buf b;
    char label[160]; /* model="…", escaped */
};

static void family(struct text *t, const char *name, const char *type, const char *help)
{
    ll_buf_printf(&t->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(struct text *t, const char *name, const char *extra, uint64_t v)
{
    ll_buf_printf(&t->b, "%s{%s%s%s} %llu\n", name, t->label, extra ? "," : "",
                  extra ? extra : "", (unsigned long long)v);
}

static void sample_d(struct text *t, const char *name, double v)
{
    if (isnan(v)) /* the exposition format's spelling */
        ll_buf_printf(&t->b, "%s{%s} NaN\n", name, t->label);
    else
        ll_buf_printf(&t->b, "%s{%s} %.9g\n", name, t->label, v);
}

/* A family with one sample, no labels but the model's. */
static void one_u(struct text *t, const char *name, const char *type, const char *help,
                  uint64_t v)
{
    family(t, name, type, help);
    sample_u(t, name, NULL, v);
}

static void one_d(struct text *t, const char *name, const char *type, const char *help, double v)
{
    family(t, name, type, help);
    sample_d(t, name, v);
}

static void hist(struct text *t, const char *name, const char *help, const struct histogram *h)
{
    family(t, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        char le[48];
        if (i < h->n)
            snprintf(le, sizeof le, "%g", h->bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        ll_buf_printf(&t->b, "%s_bucket{%s,le=\"%s\"} %llu\n", name, t->label, le,
                      (unsigned long long)cum);
    }
    ll_buf_printf(&t->b, "%s_sum{%s} %.9g\n", name, t->label, h->sum);
    ll_buf_printf(&t->b, "%s_count{%s} %llu\n", name, t->label, (unsigned long long)h->count);
}

/* The model_name label of every sample, escaped. */
static void text_label(struct text *t, const char *model)
{
    size_t w = (size_t)snprintf(t->label, sizeof t->label, "model_name=\"");
    for (const char *p = model; *p && w + 4 < sizeof t->label; p++) {
        if (*p == '\\' || *p == '"')
            t->label[w++] = '\\', t->label[w++] = *p;
        else if (*p == '\n')
            t->label[w++] = '\\', t->label[w++] = 'n';
        else
            t->label[w++] = *p;
    }
    t->label[w++] = '"';
    t->label[w] = 0;
}

char *metrics_render_keys(const struct rl_key *keys, int n, const char *model)
{
    if (n == 0)
        return strdup("");
    struct text t = {0};
    text_label(&t, model);
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"llaisys_key_requests_total", "counter", "Generation requests admitted, per API key"},
        {"llaisys_key_rejections_total", "counter",
         "Generation requests refused by a key's budget, per key and budget"},
        {"llaisys_key_tokens_total", "counter",
         "Prompt and generated tokens charged to a key's budget"},
        {"llaisys_key_requests_active", "gauge", "Generation requests in flight, per API key"},
        {"llaisys_key_budget", "gauge", "A key's budgets (0: unlimited)"},
    };
    for (size_t f = 0; f < sizeof fam / sizeof *fam; f++) {
        family(&t, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            const struct rl_key *k = &keys[i];
            char l[128];
            snprintf(l, sizeof l, "key=\"%s\"", k->b.name); /* names are [A-Za-z0-9._-] */
            switch (f) {
            case 0:
                sample_u(&t, fam[f].name, l, k->admitted);
                break;
            case 1:
                for (int r = RL_NONE + 1; r < RL_COUNT; r++) {
                    char lr[160];
                    snprintf(lr, sizeof lr, "%s,limit=\"%s\"", l, ratelimit_name(r));
                    sample_u(&t, fam[f].name, lr, k->refused[r]);
                }
                break;
            case 2:
                sample_u(&t, fam[f].name, l, k->tokens);
                break;
            case 3:
                sample_u(&t, fam[f].name, l, (uint64_t)k->active);
                break;
            default: {
                const int v[3] = {k->b.rpm, k->b.tpm, k->b.concurrency};
                static const char *const bn[3] = {"rpm", "tpm", "concurrency"};
                for (int b = 0; b < 3; b++) {
                    char lb[160];
                    snprintf(lb, sizeof lb, "%s,budget=\"%s\"", l, bn[b]);
                    sample_u(&t, fam[f].name, lb, (uint64_t)v[b]);
                }
            }
            }
        }
    }
    return ll_buf_take(&t.b);
}

char *metrics_render_sessions(const struct sessions_stats *ss, const struct engine_stats *st,
                              const char *model)
{
    struct text t = {0};
    text_label(&t, model);
    one_u(&t, "llaisys_sessions_active", "gauge", "Sessions kept by the server",
          (uint64_t)ss->active);
    one_u(&t, "llaisys_sessions_created_total", "counter", "Sessions created", ss->created);
    one_u(&t, "llaisys_sessions_expired_total", "counter",
          "Sessions dropped after --session-ttl idle", ss->expired);
    one_u(&t, "llaisys_sessions_evicted_total", "counter",
          "Sessions dropped to stay under --max-sessions", ss->evicted);
    one_u(&t, "llaisys_session_hits_total", "counter",
          "Session turns that took prompt tokens from the cache", ss->hits);
    one_u(&t, "llaisys_session_tokens_saved_total", "counter",
          "Prompt tokens of session turns served from the cache", ss->tokens_saved);
    if (st) {
        one_u(&t, "llaisys_session_pinned_blocks", "gauge",
              "KV block references pinned by sessions", (uint64_t)st->kv_pinned);
        one_u(&t, "llaisys_session_pins", "gauge", "Sessions holding pinned KV blocks",
              (uint64_t)st->pins);
        one_u(&t, "llaisys_session_unpins_total", "counter",
              "Session pins released to make room or to keep --session-kv-share", st->pins_dropped);
    }
    return ll_buf_take(&t.b);
}

char *metrics_render_responses(const struct resp_store_stats *rs, const char *model)
{
    struct text t = {0};
    text_label(&t, model);
    one_u(&t, "llaisys_responses_stored", "gauge",
          "Responses kept for previous_response_id and GET /v1/responses/{id}",
          (uint64_t)rs->stored);
    one_u(&t, "llaisys_responses_stored_bytes", "gauge",
          "Bytes the stored responses count against --responses-store-mb", (uint64_t)rs->bytes);
    one_u(&t, "llaisys_responses_evicted_total", "counter",
          "Stored responses dropped to stay under --responses-store-mb", rs->evicted);
    return ll_buf_take(&t.b);
}

char *metrics_render(struct metrics *m, const struct engine_stats *st, const char *model,
                     bool ready)
{
    struct text t = {0};
    text_label(&t, model);

    struct metrics c;
    static const double qs[2] = {0.5, 0.99};
    double q_ttft[2], q_tpot[2], q_e2e[2], rps = 0;
    double *tmp = malloc(sizeof(double) * METRICS_WINDOW_SAMPLES);
    if (!tmp)
        return NULL;
    pthread_mutex_lock(&m->lock);
    memcpy(&c, m, sizeof c);
    double now = m->clock(), since = now - m->window;
    ring_quantiles(&m->win->ttft, since, qs, 2, q_ttft, tmp);
    ring_quantiles(&m->win->tpot, since, qs, 2, q_tpot, tmp);
    ring_quantiles(&m->win->e2e, since, qs, 2, q_e2e, tmp);
    rps = rate(m, now);
    pthread_mutex_unlock(&m->lock);
    free(tmp);

    one_u(&t, "llaisys_server_ready", "gauge", "1 when the model is loaded and serving", ready);

    family(&t, "llaisys_request_success_total", "counter",
           "Finished choices (engine requests) by finish reason");
    for (int f = ENGINE_RUNNING + 1; f < ENGINE_FINISH_COUNT; f++) {
        char l[48];
        snprintf(l, sizeof l, "finished_reason=\"%s\"", engine_finish_str(f));
        sample_u(&t, "llaisys_request_success_total", l, c.finished[f]);
    }
    static const char *const cancel_names[CANCEL_COUNT] = {"", "disconnect", "cancel_route",
                                                           "time_limit", "shutdown"};
    family(&t, "llaisys_request_cancellations_total", "counter",
           "Choices cancelled before their end, by cause");
    for (int r = 1; r < CANCEL_COUNT; r++) {
        char l[48];
        snprintf(l, sizeof l, "reason=\"%s\"", cancel_names[r]);
        sample_u(&t, "llaisys_request_cancellations_total", l, c.cancellations[r]);
    }
    family(&t, "llaisys_http_responses_total", "counter", "HTTP responses by status code");
    for (int code = 100; code < 600; code++) {
        if (!c.http_by_code[code])
            continue;
        char l[32];
        snprintf(l, sizeof l, "code=\"%d\"", code);
        sample_u(&t, "llaisys_http_responses_total", l, c.http_by_code[code]);
    }
    one_u(&t, "llaisys_prompt_tokens_total", "counter", "Prompt tokens of finished requests",
          c.prompt_tokens);
    one_u(&t, "llaisys_generation_tokens_total", "counter",
          "Tokens generated for finished requests", c.generation_tokens);
    hist(&t, "llaisys_time_to_first_token_seconds",
         "Time from the request's arrival to its first generated token", &c.ttft);
    hist(&t, "llaisys_inter_token_latency_seconds", "Time between successive tokens of a choice",
         &c.itl);
    hist(&t, "llaisys_request_queue_time_seconds",
         "Time from submission to the first scheduling of a choice", &c.queue);
    hist(&t, "llaisys_e2e_request_latency_seconds",
         "Time from the request's arrival to its last byte", &c.e2e);
    hist(&t, "llaisys_time_per_output_token_seconds",
         "Per request: time from the first to the last token over the tokens after the first",
         &c.tpot);
    char help[160];
    snprintf(help, sizeof help, "Requests ended per second over the last %g s", c.window);
    one_d(&t, "llaisys_requests_per_second", "gauge", help, rps);
    static const struct {
        const char *name, *what;
    } qn[3] = {{"llaisys_time_to_first_token_seconds", "time to first token"},
               {"llaisys_time_per_output_token_seconds", "time per output token"},
               {"llaisys_e2e_request_latency_seconds", "end-to-end latency"}};
    const double *qv[3] = {q_ttft, q_tpot, q_e2e};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++) {
            char name[96];
            snprintf(name, sizeof name, "%s_p%d", qn[k].name, i ? 99 : 50);
            snprintf(help, sizeof help,
                     "%s of the %s of requests ended in the last %g s "
                     "(NaN: none)",
                     i ? "99th percentile" : "Median", qn[k].what, c.window);
            family(&t, name, "gauge", help);
            sample_d(&t, name, qv[k][i]);
        }

    if (st) {
        one_u(&t, "llaisys_num_requests_running", "gauge", "Sequences in the running batch",
              (uint64_t)st->running);
        one_u(&t, "llaisys_num_requests_waiting", "gauge",
              "Requests waiting to run (queued or preempted)", (uint64_t)st->waiting);
        one_u(&t, "llaisys_num_requests_queued", "gauge",
              "Requests submitted and never started yet", (uint64_t)st->queued);
        one_u(&t, "llaisys_num_requests_held", "gauge",
              "Requests the engine holds (neither finished nor cancelled): the admission count",
              (uint64_t)st->held);
        one_u(&t, "llaisys_admission_limit", "gauge",
              "Requests the engine holds at most (--max-seqs + --max-queue), then 429",
              (uint64_t)st->admission_limit);
        one_u(&t, "llaisys_kv_cache_usage_tokens", "gauge",
              "Tokens whose K/V the running sequences hold", (uint64_t)st->kv_tokens);
        one_u(&t, "llaisys_kv_cache_usage_tokens_peak", "gauge",
              "The most llaisys_kv_cache_usage_tokens seen since start",
              (uint64_t)st->kv_tokens_peak);
        one_u(&t, "llaisys_compute_threads", "gauge",
              "Threads the compute pool runs on (fewer than --threads while other processes keep "
              "the cores busy)",
              (uint64_t)st->compute_threads);
        one_u(&t, "llaisys_kv_cache_capacity_tokens", "gauge", "Tokens the KV pool holds",
              (uint64_t)st->kv_blocks * (uint64_t)st->block_size);
        family(&t, "llaisys_kv_cache_blocks", "gauge", "KV cache blocks by state");
        sample_u(&t, "llaisys_kv_cache_blocks", "state=\"in_use\"", (uint64_t)st->kv_in_use);
        sample_u(&t, "llaisys_kv_cache_blocks", "state=\"cached\"", (uint64_t)st->kv_cached);
        sample_u(&t, "llaisys_kv_cache_blocks", "state=\"free\"", (uint64_t)st->kv_free);
        one_u(&t, "llaisys_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool",
              (uint64_t)st->kv_blocks);
        one_d(&t, "llaisys_kv_cache_usage_perc", "gauge",
              "Fraction of KV cache blocks held by running sequences",
              st->kv_blocks ? (double)st->kv_in_use / st->kv_blocks : 0);
        uint64_t queries = st->prompt_tokens + st->cached_tokens;
        one_u(&t, "llaisys_prefix_cache_queries_total", "counter",
              "Prompt tokens looked up in the prefix cache", queries);
        one_u(&t, "llaisys_prefix_cache_hits_total", "counter",
              "Prompt tokens served from the prefix cache", st->cached_tokens);
        one_d(&t, "llaisys_prefix_cache_hit_ratio", "gauge",
              "Prefix cache hits over queries since start",
              queries ? (double)st->cached_tokens / (double)queries : 0);
        one_u(&t, "llaisys_num_preemptions_total", "counter",
              "Sequences preempted for lack of KV blocks", st->preemptions);
        one_u(&t, "llaisys_embeddings_total", "counter",
              "Embedding inputs computed (/v1/embeddings: one per input)", st->embeddings);
        one_u(&t, "llaisys_queue_rejections_total", "counter",
              "Submissions refused (queue full or invalid)", st->rejected);
        one_u(&t, "llaisys_spec_decode_num_draft_tokens_total", "counter",
              "Draft tokens verified by speculative decoding (--spec)", st->spec_drafted);
        one_u(&t, "llaisys_spec_decode_num_accepted_tokens_total", "counter",
              "Draft tokens accepted (each a token that took no step of its own)",
              st->spec_accepted);
        one_d(&t, "llaisys_spec_decode_acceptance_ratio", "gauge",
              "Accepted over verified draft tokens since start",
              st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0);
        one_d(&t, "llaisys_scheduler_step_cost_seconds", "gauge",
              "Measured cost of a step of the running sequences' decode rows (-1: unknown)",
              st->cost_step_s);
        one_d(&t, "llaisys_scheduler_prompt_token_cost_seconds", "gauge",
              "Measured cost of one more row (a prompt token) beside the decode rows (-1: "
              "unknown)",
              st->cost_prompt_token_s);
        family(&t, "llaisys_scheduler_prompt_budget_tokens", "gauge",
               "Prompt tokens the last step could carry beside decode rows (-1: no limit)");
        ll_buf_printf(&t.b, "llaisys_scheduler_prompt_budget_tokens{%s} %d\n", t.label,
                      st->prompt_budget);
        one_u(&t, "llaisys_engine_steps_total", "counter", "Scheduler steps run", st->steps);
        one_d(&t, "llaisys_engine_busy_seconds_total", "counter",
              "Time the scheduler spent in steps that did work", st->busy_s);
    }
    return ll_buf_take(&t.b);
}
