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
#include "hash.h"
#include "model.h"
#include "reasoning.h"
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
    token_counts_free(&r->counts);
    text_split_free(&r->split);
    grammar_unref(r->grammar);
    free(r->bias);
    free(r->stop_blob);
    free(r->out_lp);
    ll_buf_free(&r->out_reason);
    free(r->tokens);
    free(r->blocks);
    free(r->hashes);
    free(r->draft);
    free(r->embd);
    free(r->esum);
    free(r->out_ids);
    ll_buf_free(&r->out_text);
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

/* r stops counting against the admission limit (lock held): once when it finishes or a cancel
 * is asked, whichever comes first. A cancelled request still holds its running slot and blocks
 * until the next step, but that step takes the cancel before it admits anything, so a request
 * submitted in its place never waits for it. */
static void release_held(struct engine_req *r)
{
    if (r->held) {
        r->held = false;
        r->mbox->held--;
    }
}

bool req_push_output(struct engine_req *r, const struct req_push *p)
{
    struct mailbox *mb = r->mbox;
    bool ok = true;
    pthread_mutex_lock(&mb->lock);
    /* room first, so that a failure appends nothing */
    if (p->id >= 0) {
        size_t icap = (size_t)r->out_cap, lcap = (size_t)r->out_lp_cap;
        ok = grow((void **)&r->out_ids, &icap, (size_t)r->out_n + 1, sizeof(int32_t)) &&
             (!p->lp || grow((void **)&r->out_lp, &lcap, (size_t)r->out_n + 1,
                             sizeof(struct sampler_logprobs)));
        r->out_cap = (int)icap;
        r->out_lp_cap = (int)lcap;
    }
    ok = ok && (!p->len || ll_buf_reserve(&r->out_text, p->len)) &&
         (!p->reasoning_len || ll_buf_reserve(&r->out_reason, p->reasoning_len));
    if (ok) {
        if (p->id >= 0) {
            if (p->lp)
                r->out_lp[r->out_n] = *p->lp;
            r->out_ids[r->out_n++] = p->id;
        }
        if (p->len) /* room was made above: these cannot fail */
            ll_buf_append(&r->out_text, p->text, p->len);
        if (p->reasoning_len)
            ll_buf_append(&r->out_reason, p->reasoning, p->reasoning_len);
    }
    if (p->id >= 0 && ok && r->first_token_at == 0)
        r->first_token_at = ll_now();
    if (p->usage)
        r->usage = *p->usage;
    if (p->timings)
        r->timings = *p->timings;
    if (p->finish != ENGINE_RUNNING && r->finish == ENGINE_RUNNING) {
        r->finish = p->finish;
        r->stop_id = p->stop_id;
        r->stop_str = p->stop_str;
        if (p->msg)
            snprintf(r->error, sizeof r->error, "%s", p->msg);
        if (r->state == REQ_INBOX || r->stamp == 0)
            mb->queued--; /* never started */
        release_held(r);
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
    return ll_mix64(seed ^ ((uint64_t)choice * LL_GOLDEN64));
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

/* Where the output of a reasoning request starts: inside the reasoning when the prompt's last
 * think token is an open "<think>", else at the start (where a "<think>" would open it). */
static enum split_state reasoning_start(const struct engine *e, const struct engine_params *p)
{
    for (int i = p->n_prompt - 1; i >= 0; i--) {
        if (p->prompt[i] == e->think_close && e->think_close >= 0)
            return SPLIT_START;
        if (p->prompt[i] == e->think_open && e->think_open >= 0)
            return SPLIT_REASONING;
    }
    return SPLIT_START;
}

/* Copies and state of the sampling and stopping controls (r->tokens holds the prompt). */
static enum ll_status submit_controls(struct engine *e, struct engine_req *r,
                                      const struct engine_params *p, int max_len,
                                      size_t stop_bytes, struct ll_err *err)
{
    if (p->n_logit_bias) {
        if (!(r->bias = malloc(sizeof *r->bias * (size_t)p->n_logit_bias)))
            return ll_err_set(err, LL_ENOMEM, "out of memory for logit_bias");
        memcpy(r->bias, p->logit_bias, sizeof *r->bias * (size_t)p->n_logit_bias);
    }
    if (p->n_stop) {
        if (!(r->stop_blob = malloc(stop_bytes)))
            return ll_err_set(err, LL_ENOMEM, "out of memory for stop strings");
        char *w = r->stop_blob;
        for (int i = 0; i < p->n_stop; i++) {
            size_t l = strlen(p->stop[i]);
            memcpy(w, p->stop[i], l + 1);
            r->stop[i] = w;
            r->stop_len[i] = l;
            w += l + 1;
        }
    }
    enum ll_status s;
    if (sampler_penalties_active(&p->penalties)) {
        /* every id of the prompt and of the output may be distinct */
        if ((s = token_counts_init(&r->counts, max_len, err)) != LL_OK)
            return s;
        for (int i = 0; i < p->n_prompt; i++)
            token_counts_add(&r->counts, r->tokens[i], false);
        r->use_counts = true;
    }
    enum split_state start = p->reasoning ? reasoning_start(e, p) : SPLIT_CONTENT;
    if (p->grammar) {
        /* inside the reasoning: the constraint starts after "</think>"; where the output may
         * open it ("<think>" first), after the reasoning it opens, or at once */
        if (start == SPLIT_REASONING)
            r->grammar = grammar_after(p->grammar, LL_REASONING_CLOSE);
        else if (start == SPLIT_START)
            r->grammar = grammar_after_optional(p->grammar, LL_REASONING_OPEN,
                                                LL_REASONING_CLOSE);
        else
            r->grammar = grammar_ref(p->grammar);
        if (!r->grammar)
            return ll_err_set(err, LL_ENOMEM, "out of memory for the grammar");
    }
    if (p->n_stop || p->reasoning) {
        if ((s = text_split_init(&r->split, r->stop, r->stop_len, p->n_stop, p->reasoning, start,
                                 e->max_piece, err)) != LL_OK)
            return s;
        r->use_split = true;
    }
    return LL_OK;
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
    if (p->n_keep_ids < 0 || p->n_keep_ids > ENGINE_MAX_KEEP_IDS ||
        (p->n_keep_ids > 0 && !p->keep_ids))
        return reject(e, err, LL_EINVAL, "%d kept special token ids (at most %d)",
                      p->n_keep_ids, ENGINE_MAX_KEEP_IDS);
    for (int i = 0; i < p->n_keep_ids; i++)
        if (p->keep_ids[i] < 0 || p->keep_ids[i] >= e->vocab)
            return reject(e, err, LL_EINVAL, "kept token id %d is outside the vocabulary",
                          p->keep_ids[i]);
    const struct sampler_params *sp = &p->sampling;
    if (!isfinite(sp->temperature) || !isfinite(sp->top_p) || sp->top_k < 0 ||
        !isfinite(sp->min_p) || sp->min_p > 1)
        return reject(e, err, LL_EINVAL, "sampling: temperature %g, top_k %d, top_p %g, "
                      "min_p %g", (double)sp->temperature, sp->top_k, (double)sp->top_p,
                      (double)sp->min_p);
    const struct sampler_penalties *pen = &p->penalties;
    if (!isfinite(pen->repetition) || pen->repetition < 0 || !isfinite(pen->presence) ||
        !isfinite(pen->frequency))
        return reject(e, err, LL_EINVAL, "penalties: repetition %g (must be > 0), presence %g, "
                      "frequency %g", (double)pen->repetition, (double)pen->presence,
                      (double)pen->frequency);
    if (p->n_logit_bias < 0 || p->n_logit_bias > ENGINE_MAX_LOGIT_BIAS ||
        (p->n_logit_bias > 0 && !p->logit_bias))
        return reject(e, err, LL_EINVAL, "%d logit_bias entries (at most %d)", p->n_logit_bias,
                      ENGINE_MAX_LOGIT_BIAS);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].id < 0 || p->logit_bias[i].id >= e->vocab ||
            !isfinite(p->logit_bias[i].bias))
            return reject(e, err, LL_EINVAL, "logit_bias: token id %d (bias %g) is outside the "
                          "vocabulary (0..%d) or not finite", p->logit_bias[i].id,
                          (double)p->logit_bias[i].bias, e->vocab - 1);
    if (p->n_stop < 0 || p->n_stop > ENGINE_MAX_STOP_STRINGS || (p->n_stop > 0 && !p->stop))
        return reject(e, err, LL_EINVAL, "%d stop strings (at most %d)", p->n_stop,
                      ENGINE_MAX_STOP_STRINGS);
    size_t stop_bytes = 0;
    for (int i = 0; i < p->n_stop; i++) {
        size_t l = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (l == 0 || l > ENGINE_MAX_STOP_LEN || ((unsigned char)p->stop[i][0] & 0xc0) == 0x80)
            return reject(e, err, LL_EINVAL, "stop string %d: must be 1..%d bytes of UTF-8 text",
                          i, ENGINE_MAX_STOP_LEN);
        stop_bytes += l + 1;
    }
    if (p->top_logprobs < 0 || p->top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
        return reject(e, err, LL_EINVAL, "top_logprobs %d (0..%d)", p->top_logprobs,
                      SAMPLER_MAX_TOP_LOGPROBS);
    if (p->cache_prefix < 0)
        return reject(e, err, LL_EINVAL, "cache_prefix %d", p->cache_prefix);
    if (p->min_tokens < 0)
        return reject(e, err, LL_EINVAL, "min_tokens %d", p->min_tokens);
    if (p->choice < 0)
        return reject(e, err, LL_EINVAL, "choice index %d", p->choice);
    if (p->embed < LL_POOL_NONE || p->embed > LL_POOL_FIRST)
        return reject(e, err, LL_EINVAL, "pooling %d is not one of last, mean, first",
                      (int)p->embed);
    const int H = e->model->config.hidden_size;
    if (!p->embed && e->model->no_lm_head)
        return reject(e, err, LL_EUNSUPPORTED, "this model has no lm_head (an embedding or "
                      "ranking model): it computes embeddings and scores, not text");
    long long max_len;
    if (p->embed) { /* every prompt token is computed, none is generated */
        if (p->n_prompt > n_ctx)
            return reject(e, err, LL_ETOOLONG, "the input has %d tokens; the context holds %d",
                          p->n_prompt, n_ctx);
        if (p->n_prompt > pool_tokens)
            return reject(e, err, LL_ETOOLONG, "the input (%d tokens) needs %d KV blocks; the "
                          "whole pool has %d", p->n_prompt, (p->n_prompt + bs - 1) / bs,
                          o->kv_blocks);
        max_len = p->n_prompt;
        goto sized;
    }
    if (p->n_prompt >= n_ctx)
        return reject(e, err, LL_ETOOLONG,
                      "the prompt has %d tokens; the context holds %d, with room for at least "
                      "one new token", p->n_prompt, n_ctx);
    /* The last token of a request is never fed back, so max_len tokens need max_len - 1 slots. */
    long long cap = n_ctx < pool_tokens + 1 ? n_ctx : pool_tokens + 1;
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

sized:;
    struct engine_req *r = calloc(1, sizeof *r);
    if (!r)
        return reject(e, err, LL_ENOMEM, "out of memory for a request");
    /* slots for max_len - 1 tokens (the last is never fed back), or all of an embedding's */
    int max_blocks = (int)((max_len - (p->embed ? 0 : 1) + bs - 1) / bs);
    r->max_len = (int)max_len;
    r->max_blocks = max_blocks;
    r->tokens = malloc(sizeof(int32_t) * (size_t)max_len);
    r->blocks = malloc(sizeof(int32_t) * (size_t)max_blocks);
    r->hashes = malloc(sizeof(uint64_t) * (size_t)(max_len / bs + 1));
    if (o->spec != ENGINE_SPEC_OFF)
        r->draft = malloc(sizeof(int32_t) * (size_t)o->spec_max_draft);
    if (p->embed) {
        r->embd = malloc(sizeof(float) * (size_t)H);
        if (p->embed == LL_POOL_MEAN)
            r->esum = malloc(sizeof(double) * (size_t)H);
    }
    enum ll_status s = LL_OK;
    if (!r->tokens || !r->blocks || !r->hashes || (o->spec != ENGINE_SPEC_OFF && !r->draft) ||
        (p->embed && !r->embd) || (p->embed == LL_POOL_MEAN && !r->esum) ||
        pthread_cond_init(&r->cond, NULL)) {
        free(r->tokens);
        free(r->blocks);
        free(r->hashes);
        free(r->draft);
        free(r->embd);
        free(r->esum);
        free(r);
        return reject(e, err, LL_ENOMEM, "out of memory for a request of %lld tokens", max_len);
    }
    /* (the cond uses the default clock; engine_wait converts with CLOCK_REALTIME) */
    if ((s = tokenizer_stream_init(&r->stream, e->tok, !p->keep_special, err)) != LL_OK) {
        req_free(r);
        return reject(e, err, s, "%s", err ? err->msg : "tokenizer stream");
    }
    for (int i = 0; i < p->n_keep_ids; i++)
        tokenizer_stream_keep(r->stream, p->keep_ids[i]);
    memcpy(r->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    struct engine_params pc = *p; /* an embedding has no controls */
    if (p->embed) {
        pc = (struct engine_params){.prompt = p->prompt, .n_prompt = p->n_prompt,
                                    .embed = p->embed, .cache_prefix = p->cache_prefix,
                                    .no_cache = p->no_cache || p->embed != LL_POOL_LAST};
        p = &pc;
        stop_bytes = 0;
    }
    if ((s = submit_controls(e, r, p, (int)max_len, stop_bytes, err)) != LL_OK) {
        req_free(r);
        return reject(e, err, s, "%s", err ? err->msg : "out of memory");
    }
    r->params = *p;
    r->params.prompt = r->tokens;
    memcpy(r->stop_ids, p->stop_ids ? p->stop_ids : r->stop_ids,
           sizeof(int32_t) * (size_t)p->n_stop_ids);
    r->params.stop_ids = r->stop_ids;
    memcpy(r->keep_ids, p->keep_ids ? p->keep_ids : r->keep_ids,
           sizeof(int32_t) * (size_t)p->n_keep_ids);
    r->params.keep_ids = r->keep_ids;
    r->params.logit_bias = r->bias;
    r->params.stop = r->stop;
    r->params.grammar = r->grammar;
    r->params.max_tokens = (int)(max_len - p->n_prompt);
    r->seed = mix_seed(sp->seed, p->choice);
    r->n_prompt = p->n_prompt;
    r->n_tokens = p->n_prompt;
    r->n_embd = p->embed ? H : 0;
    r->stop_id = -1;
    r->stop_str = -1;
    r->usage.prompt_tokens = p->n_prompt;
    r->t_submit = ll_now();
    r->state = REQ_INBOX;
    r->refs = 2;

    /* Admission counts exactly: the engine holds at most max_seqs + max_queue requests that
     * are neither finished nor cancelled, counted here under the lock, whether the scheduler
     * has taken them yet or not (a burst arriving between two steps gets every slot). */
    struct mailbox *mb = e->mbox;
    int limit = o->max_seqs + o->max_queue;
    pthread_mutex_lock(&mb->lock);
    if (mb->closed || mb->held >= limit) {
        bool closed = mb->closed;
        int held = mb->held;
        mb->rejected++;
        pthread_mutex_unlock(&mb->lock);
        req_free(r);
        if (closed)
            return ll_err_set(err, LL_EINVAL, "the engine is shutting down");
        return ll_err_set(err, LL_EOVERLOADED,
                          "overloaded: %d requests are already in the engine (--max-seqs %d "
                          "running + --max-queue %d waiting)", held, o->max_seqs, o->max_queue);
    }
    r->mbox = mb;
    mb->refs++;
    r->id = ++mb->next_id;
    mb->queued++;
    mb->held++;
    r->held = true;
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

enum engine_req_state engine_req_state(const struct engine_req *r, enum engine_finish *finish)
{
    pthread_mutex_lock(&r->mbox->lock);
    enum engine_req_state s = r->finish != ENGINE_RUNNING ? ENGINE_REQ_FINISHED : r->pub_state;
    if (finish)
        *finish = r->finish;
    pthread_mutex_unlock(&r->mbox->lock);
    return s;
}

void engine_req_info(const struct engine_req *r, struct engine_req_info *info)
{
    pthread_mutex_lock(&r->mbox->lock);
    info->state = r->finish != ENGINE_RUNNING ? ENGINE_REQ_FINISHED : r->pub_state;
    info->finish = r->finish;
    info->usage = r->usage;
    info->submitted_at = r->t_submit;
    info->started_at = r->started_at;
    info->first_token_at = r->first_token_at;
    pthread_mutex_unlock(&r->mbox->lock);
}

/* Put r on the cancel list unless it is finished or already there (lock held). The list holds
 * a reference of its own, dropped by the scheduler once it has read the entry, so the record
 * stays valid even if the request finishes and both other references go before that. */
static void cancel_locked(struct engine_req *r)
{
    struct mailbox *mb = r->mbox;
    if (r->finish != ENGINE_RUNNING || r->cancel_requested)
        return;
    r->cancel_requested = true;
    release_held(r);
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
    bool any = r->out_n > 0 || r->out_text.len > 0 || r->out_reason.len > 0 ||
               (r->finish && !r->finish_reported);
    /* Each buffer changes hands with its capacity: the caller's emptied buffer becomes the
     * outbox's, so repeated polls reuse memory. Lengths go to the caller; the outbox's restart. */
#define SWAP(a, b)                                                                       \
    do {                                                                                 \
        __typeof__(a) swap_tmp_ = (a);                                                   \
        (a) = (b);                                                                       \
        (b) = swap_tmp_;                                                                 \
    } while (0)
    SWAP(out->ids, r->out_ids);
    SWAP(out->cap_ids, r->out_cap);
    out->n_ids = r->out_n;
    r->out_n = 0;
    SWAP(out->logprobs, r->out_lp);
    SWAP(out->cap_logprobs, r->out_lp_cap);
    SWAP(out->text, r->out_text);
    ll_buf_clear(&r->out_text); /* also forgets a failed append's flag */
    SWAP(out->reasoning, r->out_reason);
    ll_buf_clear(&r->out_reason);
    if (r->finish && !r->finish_reported && r->embd_ready) { /* the vector changes hands */
        SWAP(out->embedding, r->embd);
        out->n_embedding = r->n_embd;
    }
#undef SWAP
    out->finish = r->finish;
    if (r->finish)
        r->finish_reported = true;
    out->stop_id = r->stop_id;
    out->stop_str = r->stop_str;
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
    while (r->out_n == 0 && r->out_text.len == 0 && r->out_reason.len == 0 &&
           !(r->finish && !r->finish_reported)) {
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
    free(out->logprobs);
    ll_buf_free(&out->text);
    ll_buf_free(&out->reasoning);
    free(out->embedding);
    out->embedding = NULL;
    out->n_embedding = 0;
    out->ids = NULL;
    out->logprobs = NULL;
    out->n_ids = out->cap_ids = out->cap_logprobs = 0;
}

void req_engine_unref(struct engine_req *r) { req_unref(r); }
