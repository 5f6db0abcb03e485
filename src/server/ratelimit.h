/*
 * ratelimit.h: per-API-key budgets (server.h, struct key_budget): generation requests in flight
 * at once, requests per minute and tokens per minute, and each key's counters for /metrics.
 *
 * Per minute is a token bucket per key and budget: it holds at most the limit, refills at
 * limit/60 per second, and starts full. A generation request is admitted when the key has a
 * free concurrency slot, at least one request in its bucket, and at least its prompt tokens in
 * its token bucket (at most the whole limit); admission takes the slot, one request and the
 * prompt tokens; the generated tokens are taken when the request ends (the token bucket may go
 * below zero then: the key waits until it refills). Other routes take nothing.
 *
 * Any thread: every function takes the table's lock (a leaf lock, held for a few additions).
 */
#ifndef LLAISYS_RATELIMIT_H
#define LLAISYS_RATELIMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"
#include "server.h"

enum rl_limit {
    RL_NONE,
    RL_CONCURRENCY,
    RL_RPM,
    RL_TPM,
    RL_COUNT
};

struct rl_bucket {
    double level; /* what is left (may be < 0 for tokens) */
    double t;     /* when level was last brought up to date */
};

struct rl_key {
    struct key_budget b;
    struct rl_bucket req, tok;
    int active;                  /* generation requests in flight */
    uint64_t admitted;           /* generation requests admitted */
    uint64_t refused[RL_COUNT];  /* refused, by the budget that was short */
    uint64_t tokens;             /* prompt + generated tokens charged */
};

struct ratelimit {
    pthread_mutex_t lock;
    struct rl_key *keys; /* (n) one per API key, in o->api_keys order */
    int n;
    double (*clock)(void); /* ll_now; tests put their own */
};

/* What the x-ratelimit-* headers say for a key now (a budget of 0 is left out: has_* false). */
struct rl_state {
    bool has_rpm, has_tpm;
    int rpm, tpm;                 /* the limits */
    long long rpm_left, tpm_left; /* whole requests / tokens in the buckets (>= 0) */
    double rpm_reset, tpm_reset;  /* seconds until the bucket is full again */
};

/* One slot per key of o, buckets full. LL_OK or LL_ENOMEM. */
enum ll_status ratelimit_init(struct ratelimit *rl, const struct server_opts *o);
void ratelimit_free(struct ratelimit *rl);
/* Admit one generation request of key (an index into the keys; out of range: always admitted)
 * with prompt_tokens, taking its slot, one request and the prompt tokens. Returns RL_NONE, or
 * the budget that is short (nothing taken), with *retry_s the seconds until it would pass
 * (rounded up to whole seconds, at least 1). */
enum rl_limit ratelimit_admit(struct ratelimit *rl, int key, int prompt_tokens, int *retry_s);
/* An admitted request ended: free its slot and take its generated tokens. refund: it never ran
 * (the engine refused it): give the request and its prompt tokens back instead. */
void ratelimit_end(struct ratelimit *rl, int key, int prompt_tokens, int generated_tokens,
                   bool refund);
/* The headers' view of key now; false when the key has neither budget per minute. */
bool ratelimit_state(struct ratelimit *rl, int key, struct rl_state *s);
/* "rpm", "tpm", "concurrency". */
const char *ratelimit_name(enum rl_limit l);
/* A reset time as OpenAI writes it: "250ms", "6s", "1m30s". */
void ratelimit_duration(double s, char *out, int cap);
/* Copy of every key's counters (malloc'd, *n of them; NULL on no memory or no keys). */
struct rl_key *ratelimit_snapshot(struct ratelimit *rl, int *n);

#endif
