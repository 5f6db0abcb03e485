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
#include "ratelimit.h"
#include "sessions.h"

#define METRICS_MAX_BUCKETS 24

struct histogram {
    const double *bounds; /* (n) upper bounds, ascending */
    int n;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, the last is +Inf (not cumulative) */
    double sum;
    uint64_t count;
};

/* Recent samples of one latency, for the sliding-window quantiles: a ring of the newest
 * METRICS_WINDOW_SAMPLES (time, value) pairs; those older than the window are skipped. */
#define METRICS_WINDOW_SAMPLES 4096
struct window_ring {
    double t[METRICS_WINDOW_SAMPLES], v[METRICS_WINDOW_SAMPLES];
    int head, n; /* next slot; samples held */
};

/* Finished requests per whole second, for the requests-per-second gauge. */
#define METRICS_RATE_SLOTS 3600
struct rate_slots {
    long long sec[METRICS_RATE_SLOTS]; /* the second a slot counts (slot = sec % SLOTS) */
    uint32_t n[METRICS_RATE_SLOTS];
};

struct metrics_window {
    struct window_ring ttft, tpot, e2e;
    struct rate_slots done;
};

struct metrics {
    pthread_mutex_t lock;
    double window;                 /* seconds the sliding-window gauges cover */
    double t_start;                /* clock() at init */
    double (*clock)(void);         /* ll_now; tests put a clock of their own */
    struct metrics_window *win;    /* (malloc'd) the samples of the sliding window */
    uint64_t finished[ENGINE_FINISH_COUNT]; /* by enum engine_finish (ENGINE_RUNNING unused) */
    uint64_t cancellations[CANCEL_COUNT];   /* by enum cancel_reason (CANCEL_NONE unused) */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t http[6];              /* responses by status class: 1xx..5xx (index 1..5) */
    uint64_t http_by_code[600];    /* responses by status code */
    struct histogram ttft, itl, queue, e2e, tpot;
};

/* Zeroed counters; the sliding-window gauges cover window_s seconds (> 0). LL_OK, or LL_ENOMEM
 * when the lock or the window cannot be made. */
enum ll_status metrics_init(struct metrics *m, double window_s);
void metrics_free(struct metrics *m);
/* Record one finished choice (finish as the client saw it, why it was cancelled or
 * CANCEL_NONE, the tokens it counts, its time in the queue; queue_s <= 0: not recorded). */
void metrics_finish(struct metrics *m, enum engine_finish finish, enum cancel_reason why,
                    int prompt_tokens, int generated_tokens, double queue_s);
/* Record one request's time to first token (< 0: none), time per output token after the first
 * (< 0: none, fewer than two tokens) and end-to-end latency, at its end. */
void metrics_request(struct metrics *m, double ttft_s, double tpot_s, double e2e_s);
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

/* The per-key samples (ratelimit_snapshot's n keys), labelled key="NAME" (the key file's
 * name=, else a hash: never the key), same format. */
char *metrics_render_keys(const struct rl_key *keys, int n, const char *model);

/* The sessions' samples (sessions.h; the pinned blocks from st when given), same format. */
char *metrics_render_sessions(const struct sessions_stats *ss, const struct engine_stats *st,
                              const char *model);

/* The stored responses' samples (resp_store.h), same format. */
struct resp_store_stats;
char *metrics_render_responses(const struct resp_store_stats *rs, const char *model);

#endif
