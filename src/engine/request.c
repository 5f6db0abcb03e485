/*
 * request.c: request records and the mailbox between the scheduler and every other thread
 * (engine_submit, engine_cancel, engine_poll, engine_wait, engine_req_release; see engine.h).
 *
 * Called from any thread. The record and all of its arrays are allocated here, in
 * engine_submit, on the submitting thread, so the scheduler does not allocate for a request.
 * A record has two references, the caller's handle and the engine's; whichever side drops the
 * last one frees it. The mailbox lock is held only to push or pop: linking into the inbox or
 * cancel list, appending to an outbox, swapping an outbox into a caller's buffers.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_impl.h"
#include "model.h"
#include "util.h"

/* ---- mailbox ---- */

struct mailbox *mailbox_create(void)
{
    struct mailbox *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&mb->lock, NULL)) {
        free(mb);
        return NULL;
    }
    if (pthread_cond_init(&mb->wake, &ca)) {
        pthread_mutex_destroy(&mb->lock);
        free(mb);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    mb->refs = 1;
    return mb;
}

void mailbox_unref(struct mailbox *mb)
{
    pthread_mutex_lock(&mb->lock);
    bool last = --mb->refs == 0;
    pthread_mutex_unlock(&mb->lock);
    if (last) {
        pthread_cond_destroy(&mb->wake);
        pthread_mutex_destroy(&mb->lock);
        free(mb);
    }
}

/* ---- records ---- */

void req_free(struct engine_req *r)
{
    if (!r)
        return;
    tokenizer_stream_free(r->stream);
    pthread_cond_destroy(&r->cond);
    free(r->tokens);
    free(r->blocks);
    free(r->hashes);
    free(r->out_ids);
    free(r->out_text);
    free(r);
}

bool req_unref_locked(struct engine_req *r)
{
    LL_ASSERT(r->refs > 0);
    return --r->refs == 0;
}

/* Drop a reference, taking the lock; frees r (and the mailbox reference it held) when last. */
static void req_unref(struct engine_req *r)
{
    struct mailbox *mb = r->mbox;
    pthread_mutex_lock(&mb->lock);
    bool last = req_unref_locked(r);
    pthread_mutex_unlock(&mb->lock);
    if (last) {
        req_free(r);
        mailbox_unref(mb);
    }
}

static bool grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *nb = realloc(*buf, c * elem);
    if (!nb)
        return false;
    *buf = nb;
    *cap = c;
    return true;
}

bool req_push_output(struct engine_req *r, int32_t id, const char *text, size_t len,
                     const struct engine_usage *usage, const struct engine_timings *timings,
                     enum engine_finish finish, int32_t stop_id, const char *msg)
{
    struct mailbox *mb = r->mbox;
    bool ok = true;
    pthread_mutex_lock(&mb->lock);
    size_t icap = (size_t)r->out_cap;
    if (id >= 0 || len > 0) {
        ok = grow((void **)&r->out_ids, &icap, (size_t)r->out_n + 1, sizeof(int32_t)) &&
             grow((void **)&r->out_text, &r->out_tcap, r->out_len + len + 1, 1);
        r->out_cap = (int)icap;
    }
    if (ok) {
        if (id >= 0)
            r->out_ids[r->out_n++] = id;
        if (len > 0) {
            memcpy(r->out_text + r->out_len, text, len);
            r->out_len += len;
            r->out_text[r->out_len] = '\0';
        }
    }
    if (usage)
        r->usage = *usage;
    if (timings)
        r->timings = *timings;
    if (finish != ENGINE_RUNNING && r->finish == ENGINE_RUNNING) {
        r->finish = finish;
        r->stop_id = stop_id;
        if (msg)
            snprintf(r->error, sizeof r->error, "%s", msg);
        if (r->state == REQ_INBOX || r->stamp == 0)
            mb->queued--; /* never started: it leaves the bounded queue */
    }
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&mb->lock);
    return ok;
}

/* ---- the public face ---- */

static uint64_t mix_seed(uint64_t seed, int choice)
{
    if (choice == 0)
        return seed; /* choice 0 draws exactly what a single-sequence run with this seed does */
    uint64_t z = seed ^ ((uint64_t)choice * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Reject with a message (counted in stats). */
static enum ll_status reject(struct engine *e, struct ll_err *err, enum ll_status code,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum ll_status reject(struct engine *e, struct ll_err *err, enum ll_status code,
                             const char *fmt, ...)
{
    pthread_mutex_lock(&e->mbox->lock);
    e->mbox->rejected++;
    pthread_mutex_unlock(&e->mbox->lock);
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ll_err_set(err, code, "%s", msg);
}

enum ll_status engine_submit(struct engine *e, const struct engine_params *p,
                             struct engine_req **out, struct ll_err *err)
{
    *out = NULL;
    const struct engine_opts *o = &e->opts;
    int n_ctx = o->n_ctx, bs = o->block_size;
    long long pool_tokens = (long long)o->kv_blocks * bs;

    if (!p->prompt || p->n_prompt < 1)
        return reject(e, err, LL_EINVAL, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->vocab)
            return reject(e, err, LL_EINVAL,
                          "prompt token %d is id %d, outside the vocabulary (0..%d)", i,
                          p->prompt[i], e->vocab - 1);
    if (p->n_stop_ids < 0 || p->n_stop_ids > ENGINE_MAX_STOP_IDS ||
        (p->n_stop_ids > 0 && !p->stop_ids))
        return reject(e, err, LL_EINVAL, "%d stop token ids (at most %d)", p->n_stop_ids,
                      ENGINE_MAX_STOP_IDS);
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= e->vocab)
            return reject(e, err, LL_EINVAL, "stop token id %d is outside the vocabulary",
                          p->stop_ids[i]);
    const struct sampler_params *sp = &p->sampling;
    if (!isfinite(sp->temperature) || !isfinite(sp->top_p) || sp->top_k < 0)
        return reject(e, err, LL_EINVAL, "sampling: temperature %g, top_k %d, top_p %g",
                      (double)sp->temperature, sp->top_k, (double)sp->top_p);
    if (p->choice < 0)
        return reject(e, err, LL_EINVAL, "choice index %d", p->choice);
    if (p->n_prompt >= n_ctx)
        return reject(e, err, LL_ETOOLONG,
                      "the prompt has %d tokens; the context holds %d, with room for at least "
                      "one new token", p->n_prompt, n_ctx);
    /* The last token of a request is never fed back, so max_len tokens need max_len - 1 slots. */
    long long cap = n_ctx < pool_tokens + 1 ? n_ctx : pool_tokens + 1;
    long long max_len;
    if (p->max_tokens > 0) {
        max_len = (long long)p->n_prompt + p->max_tokens;
        if (max_len > n_ctx)
            return reject(e, err, LL_ETOOLONG,
                          "the prompt (%d tokens) plus max_tokens (%d) exceeds the context of "
                          "%d tokens", p->n_prompt, p->max_tokens, n_ctx);
        if (max_len - 1 > pool_tokens)
            return reject(e, err, LL_ETOOLONG,
                          "the prompt (%d tokens) plus max_tokens (%d) needs %lld KV blocks; "
                          "the whole pool has %d", p->n_prompt, p->max_tokens,
                          (max_len - 1 + bs - 1) / bs, o->kv_blocks);
    } else {
        max_len = cap;
        if (max_len <= p->n_prompt)
            return reject(e, err, LL_ETOOLONG,
                          "the prompt (%d tokens) needs %d KV blocks; the whole pool has %d",
                          p->n_prompt, (p->n_prompt + bs - 1) / bs, o->kv_blocks);
    }

    struct engine_req *r = calloc(1, sizeof *r);
    if (!r)
        return reject(e, err, LL_ENOMEM, "out of memory for a request");
    int max_blocks = (int)((max_len - 1 + bs - 1) / bs);
    r->max_len = (int)max_len;
    r->max_blocks = max_blocks;
    r->tokens = malloc(sizeof(int32_t) * (size_t)max_len);
    r->blocks = malloc(sizeof(int32_t) * (size_t)max_blocks);
    r->hashes = malloc(sizeof(uint64_t) * (size_t)(max_len / bs + 1));
    enum ll_status s = LL_OK;
    if (!r->tokens || !r->blocks || !r->hashes || pthread_cond_init(&r->cond, NULL)) {
        free(r->tokens);
        free(r->blocks);
        free(r->hashes);
        free(r);
        return reject(e, err, LL_ENOMEM, "out of memory for a request of %lld tokens", max_len);
    }
    /* (the cond uses the default clock; engine_wait converts with CLOCK_REALTIME) */
    if ((s = tokenizer_stream_init(&r->stream, e->tok, !p->keep_special, err)) != LL_OK) {
        req_free(r);
        return reject(e, err, s, "%s", err ? err->msg : "tokenizer stream");
    }
    memcpy(r->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    r->params = *p;
    r->params.prompt = r->tokens;
    memcpy(r->stop_ids, p->stop_ids ? p->stop_ids : r->stop_ids,
           sizeof(int32_t) * (size_t)p->n_stop_ids);
    r->params.stop_ids = r->stop_ids;
    r->params.max_tokens = (int)(max_len - p->n_prompt);
    r->seed = mix_seed(sp->seed, p->choice);
    r->n_prompt = p->n_prompt;
    r->n_tokens = p->n_prompt;
    r->stop_id = -1;
    r->usage.prompt_tokens = p->n_prompt;
    r->t_submit = ll_now();
    r->state = REQ_INBOX;
    r->refs = 2;

    struct mailbox *mb = e->mbox;
    pthread_mutex_lock(&mb->lock);
    if (mb->closed || mb->queued >= o->max_queue) {
        bool closed = mb->closed;
        int q = mb->queued;
        mb->rejected++;
        pthread_mutex_unlock(&mb->lock);
        req_free(r);
        if (closed)
            return ll_err_set(err, LL_EINVAL, "the engine is shutting down");
        return ll_err_set(err, LL_EOVERLOADED,
                          "overloaded: %d requests are already waiting (--max-queue %d)", q,
                          o->max_queue);
    }
    r->mbox = mb;
    mb->refs++;
    r->id = ++mb->next_id;
    mb->queued++;
    if (mb->inbox_tail)
        mb->inbox_tail->inbox_next = r;
    else
        mb->inbox_head = r;
    mb->inbox_tail = r;
    pthread_cond_signal(&mb->wake);
    pthread_mutex_unlock(&mb->lock);
    *out = r;
    return LL_OK;
}

uint64_t engine_req_id(const struct engine_req *r) { return r->id; }

/* Put r on the cancel list unless it is finished or already there (lock held). The list holds
 * a reference of its own, dropped by the scheduler once it has read the entry, so the record
 * stays valid even if the request finishes and both other references go before that. */
static void cancel_locked(struct engine_req *r)
{
    struct mailbox *mb = r->mbox;
    if (r->finish != ENGINE_RUNNING || r->cancel_requested)
        return;
    r->cancel_requested = true;
    r->refs++;
    r->cancel_next = mb->cancels;
    mb->cancels = r;
    pthread_cond_signal(&mb->wake);
}

void engine_cancel(struct engine_req *r)
{
    pthread_mutex_lock(&r->mbox->lock);
    cancel_locked(r);
    pthread_mutex_unlock(&r->mbox->lock);
}

/* Swap the outbox into out (lock held). */
static bool take_locked(struct engine_req *r, struct engine_output *out)
{
    bool any = r->out_n > 0 || r->out_len > 0 || (r->finish && !r->finish_reported);
    int32_t *ids = out->ids;
    int icap = out->cap_ids;
    out->ids = r->out_ids;
    out->cap_ids = r->out_cap;
    out->n_ids = r->out_n;
    r->out_ids = ids;
    r->out_cap = icap;
    r->out_n = 0;
    char *text = out->text;
    size_t tcap = out->cap_text;
    out->text = r->out_text;
    out->cap_text = r->out_tcap;
    out->text_len = r->out_len;
    r->out_text = text;
    r->out_tcap = tcap;
    r->out_len = 0;
    out->finish = r->finish;
    if (r->finish)
        r->finish_reported = true;
    out->stop_id = r->stop_id;
    out->usage = r->usage;
    out->timings = r->timings;
    memcpy(out->error, r->error, sizeof out->error);
    return any;
}

bool engine_poll(struct engine_req *r, struct engine_output *out)
{
    pthread_mutex_lock(&r->mbox->lock);
    bool any = take_locked(r, out);
    pthread_mutex_unlock(&r->mbox->lock);
    return any;
}

bool engine_wait(struct engine_req *r, struct engine_output *out, double timeout_s)
{
    struct mailbox *mb = r->mbox;
    struct timespec until;
    if (timeout_s >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_nsec * 1e-9 + timeout_s;
        long long whole = (long long)t;
        until.tv_sec += (time_t)whole;
        until.tv_nsec = (long)((t - (double)whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&mb->lock);
    while (r->out_n == 0 && r->out_len == 0 && !(r->finish && !r->finish_reported)) {
        if (timeout_s < 0) {
            pthread_cond_wait(&r->cond, &mb->lock);
        } else if (pthread_cond_timedwait(&r->cond, &mb->lock, &until) == ETIMEDOUT) {
            break;
        }
    }
    bool any = take_locked(r, out);
    pthread_mutex_unlock(&mb->lock);
    return any;
}

void engine_req_release(struct engine_req *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mbox->lock);
    LL_ASSERT(!r->caller_released);
    r->caller_released = true;
    cancel_locked(r);
    pthread_mutex_unlock(&r->mbox->lock);
    req_unref(r);
}

void engine_output_free(struct engine_output *out)
{
    free(out->ids);
    free(out->text);
    out->ids = NULL;
    out->text = NULL;
    out->n_ids = out->cap_ids = 0;
    out->text_len = out->cap_text = 0;
}

void req_engine_unref(struct engine_req *r) { req_unref(r); }
