/*
 * ratelimit.c: per-API-key budgets (see ratelimit.h for the rule): token buckets per minute,
 * concurrency slots, and the counters /metrics shows per key name. Any thread, under rl->lock
 * (a leaf lock).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"
#include "util.h"

enum ll_status ratelimit_init(struct ratelimit *rl, const struct server_opts *o)
{
    memset(rl, 0, sizeof *rl);
    rl->clock = ll_now;
    if (o->n_api_keys && !(rl->keys = calloc((size_t)o->n_api_keys, sizeof *rl->keys)))
        return LL_ENOMEM;
    if (pthread_mutex_init(&rl->lock, NULL)) {
        free(rl->keys);
        rl->keys = NULL;
        return LL_ENOMEM;
    }
    rl->n = o->n_api_keys;
    double now = rl->clock();
    for (int i = 0; i < rl->n; i++) {
        struct rl_key *k = &rl->keys[i];
        k->b = o->key_budgets[i];
        k->req = (struct rl_bucket){.level = k->b.rpm, .t = now};
        k->tok = (struct rl_bucket){.level = k->b.tpm, .t = now};
    }
    return LL_OK;
}

void ratelimit_free(struct ratelimit *rl)
{
    pthread_mutex_destroy(&rl->lock);
    free(rl->keys);
    rl->keys = NULL;
    rl->n = 0;
}

/* Bring b up to now: limit/60 per second, at most limit. */
static void refill(struct rl_bucket *b, int limit, double now)
{
    if (now > b->t) {
        b->level += (now - b->t) * limit / 60.0;
        if (b->level > limit)
            b->level = limit;
    }
    b->t = now;
}

/* Seconds until b holds want (limit > 0). */
static double wait_for(const struct rl_bucket *b, int limit, double want)
{
    return want > b->level ? (want - b->level) * 60.0 / limit : 0;
}

static int whole_seconds(double s)
{
    double c = ceil(s);
    return c < 1 ? 1 : c > 86400 ? 86400 : (int)c;
}

enum rl_limit ratelimit_admit(struct ratelimit *rl, int key, int prompt_tokens, int *retry_s)
{
    *retry_s = 0;
    if (key < 0 || key >= rl->n)
        return RL_NONE;
    pthread_mutex_lock(&rl->lock);
    struct rl_key *k = &rl->keys[key];
    double now = rl->clock();
    enum rl_limit over = RL_NONE;
    double wait = 0;
    if (k->b.concurrency > 0 && k->active >= k->b.concurrency) {
        over = RL_CONCURRENCY;
        wait = 1; /* a slot frees when one of its requests ends: unknown, try again soon */
    }
    if (over == RL_NONE && k->b.rpm > 0) {
        refill(&k->req, k->b.rpm, now);
        if (k->req.level < 1) {
            over = RL_RPM;
            wait = wait_for(&k->req, k->b.rpm, 1);
        }
    }
    double need = prompt_tokens > 0 ? prompt_tokens : 0;
    if (over == RL_NONE && k->b.tpm > 0) {
        refill(&k->tok, k->b.tpm, now);
        if (need > k->b.tpm) /* a prompt larger than the whole budget waits for a full one */
            need = k->b.tpm;
        if (k->tok.level < need || k->tok.level <= 0) {
            over = RL_TPM;
            wait = wait_for(&k->tok, k->b.tpm, need > 0 ? need : 1);
        }
    }
    if (over != RL_NONE) {
        k->refused[over]++;
        *retry_s = whole_seconds(wait);
    } else {
        k->active++;
        k->admitted++;
        if (k->b.rpm > 0)
            k->req.level -= 1;
        if (k->b.tpm > 0)
            k->tok.level -= prompt_tokens > 0 ? prompt_tokens : 0;
        k->tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    }
    pthread_mutex_unlock(&rl->lock);
    return over;
}

void ratelimit_end(struct ratelimit *rl, int key, int prompt_tokens, int generated_tokens,
                   bool refund)
{
    if (key < 0 || key >= rl->n)
        return;
    pthread_mutex_lock(&rl->lock);
    struct rl_key *k = &rl->keys[key];
    LL_ASSERT(k->active > 0);
    k->active--;
    double now = rl->clock();
    int p = prompt_tokens > 0 ? prompt_tokens : 0, g = generated_tokens > 0 ? generated_tokens : 0;
    if (refund) {
        k->admitted--;
        k->tokens -= (uint64_t)p;
        if (k->b.rpm > 0) {
            refill(&k->req, k->b.rpm, now);
            k->req.level = fmin(k->req.level + 1, k->b.rpm);
        }
        if (k->b.tpm > 0) {
            refill(&k->tok, k->b.tpm, now);
            k->tok.level = fmin(k->tok.level + p, k->b.tpm);
        }
    } else {
        k->tokens += (uint64_t)g;
        if (k->b.tpm > 0) {
            refill(&k->tok, k->b.tpm, now);
            k->tok.level -= g;
        }
    }
    pthread_mutex_unlock(&rl->lock);
}

bool ratelimit_state(struct ratelimit *rl, int key, struct rl_state *s)
{
    memset(s, 0, sizeof *s);
    if (key < 0 || key >= rl->n)
        return false;
    pthread_mutex_lock(&rl->lock);
    struct rl_key *k = &rl->keys[key];
    double now = rl->clock();
    if (k->b.rpm > 0) {
        refill(&k->req, k->b.rpm, now);
        s->has_rpm = true;
        s->rpm = k->b.rpm;
        s->rpm_left = k->req.level > 0 ? (long long)floor(k->req.level) : 0;
        s->rpm_reset = wait_for(&k->req, k->b.rpm, k->b.rpm);
    }
    if (k->b.tpm > 0) {
        refill(&k->tok, k->b.tpm, now);
        s->has_tpm = true;
        s->tpm = k->b.tpm;
        s->tpm_left = k->tok.level > 0 ? (long long)floor(k->tok.level) : 0;
        s->tpm_reset = wait_for(&k->tok, k->b.tpm, k->b.tpm);
    }
    pthread_mutex_unlock(&rl->lock);
    return s->has_rpm || s->has_tpm;
}

const char *ratelimit_name(enum rl_limit l)
{
    switch (l) {
    case RL_CONCURRENCY:
        return "concurrency";
    case RL_RPM:
        return "rpm";
    case RL_TPM:
        return "tpm";
    case RL_NONE:
    case RL_COUNT:
        break;
    }
    return "";
}

void ratelimit_duration(double s, char *out, int cap)
{
    if (s < 1) {
        snprintf(out, (size_t)cap, "%dms", (int)ceil(s * 1000));
        return;
    }
    long long whole = (long long)ceil(s);
    if (whole < 60)
        snprintf(out, (size_t)cap, "%llds", whole);
    else
        snprintf(out, (size_t)cap, "%lldm%llds", whole / 60, whole % 60);
}

struct rl_key *ratelimit_snapshot(struct ratelimit *rl, int *n)
{
    *n = 0;
    if (rl->n == 0)
        return NULL;
    struct rl_key *c = malloc(sizeof *c * (size_t)rl->n);
    if (!c)
        return NULL;
    pthread_mutex_lock(&rl->lock);
    memcpy(c, rl->keys, sizeof *c * (size_t)rl->n);
    *n = rl->n;
    pthread_mutex_unlock(&rl->lock);
    return c;
}
