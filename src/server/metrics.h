/*
 * metrics.h: request-level counters and histograms, and their Prometheus text exposition
 * (engine gauges come from engine_get_stats when rendering).
 *
 * Any thread: every function takes metrics->lock (a leaf lock, held for a few additions).
 */
#ifndef LLAISYS_METRICS_H
#define LLAISYS_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "live.h"
#include "sessions.h"

#define METRICS_MAX_BUCKETS 24

struct histogram {
    const double *bounds; /* (n) upper bounds, ascending */
    int n;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, the last is +Inf (not cumulative) */
    double sum;
    uint64_t count;
};

struct metrics {
    pthread_mutex_t lock;
    uint64_t finished[ENGINE_FINISH_COUNT]; /* by enum engine_finish (ENGINE_RUNNING unused) */
    uint64_t cancellations[CANCEL_COUNT];   /* by enum cancel_reason (CANCEL_NONE unused) */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t http[6];              /* responses by status class: 1xx..5xx (index 1..5) */
    uint64_t http_by_code[600];    /* responses by status code */
    struct histogram ttft, itl, queue, e2e;
};

/* Zeroed counters. LL_OK, or LL_ENOMEM when the lock cannot be made. */
enum ll_status metrics_init(struct metrics *m);
void metrics_free(struct metrics *m);
/* Record one finished choice (finish as the client saw it, why it was cancelled or
 * CANCEL_NONE, the tokens it counts, its time in the queue; queue_s <= 0: not recorded). */
void metrics_finish(struct metrics *m, enum engine_finish finish, enum cancel_reason why,
                    int prompt_tokens, int generated_tokens, double queue_s);
/* Record one request's time to first token (< 0: none) and end-to-end latency. */
void metrics_request(struct metrics *m, double ttft_s, double e2e_s);
/* Record n tokens that arrived together dt seconds after the previous ones (n samples of
 * dt / n each); n <= 0 records nothing. */
void metrics_itl(struct metrics *m, double dt, int n);
/* Record one HTTP response's status (outside 100..599: ignored). */
void metrics_http(struct metrics *m, int status);
/* Prometheus text exposition (format 0.0.4) of everything, the engine gauges from st (NULL
 * while loading: left out), every sample labelled with the model name, llaisys_server_ready
 * from ready. Malloc'd (caller frees); NULL on no memory. */
char *metrics_render(struct metrics *m, const struct engine_stats *st, const char *model,
                     bool ready);

/* The sessions' samples (sessions.h; the pinned blocks from st when given), same format. */
char *metrics_render_sessions(const struct sessions_stats *ss, const struct engine_stats *st,
                              const char *model);

#endif
