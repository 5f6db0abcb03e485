/*
 * engine.c: engine creation and teardown, the step (mailbox → schedule → forward → sample →
 * stop checks → outboxes), the optional scheduler thread, and statistics (see engine.h).
 *
 * Thread: engine_create / engine_step / engine_start / engine_stop / engine_destroy run on the
 * controlling thread; in threaded mode the step runs on the engine's own thread, which then
 * owns every [sched] field (engine_impl.h). Everything other threads see goes through the
 * mailbox lock, held only to push or pop.
 *
 * Determinism: the token sampled for a sequence is sampler_sample(logits, params, seed mixed
 * with the choice index, counter = the position the new token takes). The logits of a row
 * depend only on the sequence's tokens (runtime.h), so the choice is the same whatever the
 * batch, chunking, preemption or prefix-cache hits. Drafts (--spec) keep it: the row after a
 * draft token is used only once that token is accepted, i.e. equal to the token sampled
 * there, so every token is sampled from the logits of its true history (verify_drafts).
 * After the step, its duration feeds the scheduler's cost estimate (sched_step_done).
 *
 * Faults: when a step's forward pass fails, each of its sequences is run again alone
 * (forward_each); only those whose own forward fails finish with the error, the others get the
 * logits the batch would have given them and continue, their output unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"
#include "model.h"
#include "reasoning.h"
#include "util.h"

const char *engine_finish_str(enum engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP:
        return "stop";
    case ENGINE_FINISH_LENGTH:
        return "length";
    case ENGINE_FINISH_CANCELLED:
        return "cancelled";
    case ENGINE_FINISH_ERROR:
        return "error";
    case ENGINE_RUNNING:
    case ENGINE_FINISH_COUNT:
        break;
    }
    return "";
}

const struct model *engine_model(const struct engine *e) { return e->model; }
const struct tokenizer *engine_tokenizer(const struct engine *e) { return e->tok; }
const struct engine_opts *engine_get_opts(const struct engine *e) { return &e->opts; }

/* ---- create / destroy ---- */

enum ll_status engine_create(struct engine **out, const char *model_dir,
                             const struct engine_opts *opts, struct ll_err *err)
{
    *out = NULL;
    struct engine *e = calloc(1, sizeof *e);
    if (!e)
        return ll_err_set(err, LL_ENOMEM, "engine: out of memory");
    enum ll_status s;
    if (opts)
        e->opts = *opts;
    engine_opts_resolve(&e->opts, NULL); /* the thread count, for quantizing at load */
    struct model_open_opts mo = engine_opts_model_open(&e->opts);
    if ((s = engine_opts_check(&e->opts, err)) != LL_OK ||
        (s = model_open(&e->model, model_dir, &mo, err)) != LL_OK)
        goto fail;
    engine_opts_resolve(&e->opts, &e->model->config);
    const struct engine_opts *o = &e->opts;
    if ((s = engine_opts_check(o, err)) != LL_OK)
        goto fail;
    if (o->kv_blocks < 1) {
        s = ll_err_set(err, LL_EINVAL, "engine options: the KV pool needs at least one block "
                       "(--kv-blocks, or a larger --kv-memory)");
        goto fail;
    }
    if ((s = tokenizer_load(&e->tok, model_dir, err)) != LL_OK)
        goto fail;
    struct runtime_opts ro = engine_opts_runtime(o);
    e->vocab = e->model->config.vocab_size;
    if ((s = runtime_create(&e->rt, e->model, &ro, err)) != LL_OK ||
        (s = sampler_init(&e->smp, e->vocab, err)) != LL_OK ||
        (s = kv_pool_init(&e->pool, o->kv_blocks, o->block_size, err)) != LL_OK)
        goto fail;
    size_t B = (size_t)o->max_batch_tokens, S = (size_t)o->max_seqs;
    /* drafts add logits rows: up to spec_max_draft per sequence, ENGINE_SPEC_ROWS in all */
    long long extra = o->spec != ENGINE_SPEC_OFF ? (long long)S * o->spec_max_draft : 0;
    extra = extra < ENGINE_SPEC_ROWS ? extra : ENGINE_SPEC_ROWS;
    e->max_logit_rows = (int)(S + (size_t)extra < B ? S + (size_t)extra : B);
    if (e->max_logit_rows < (int)S)
        e->max_logit_rows = (int)S;
    e->mbox = mailbox_create();
    e->b_token = malloc(sizeof(int32_t) * B);
    e->b_pos = malloc(sizeof(int32_t) * B);
    e->b_seq = malloc(sizeof(int32_t) * B);
    e->b_want = malloc(B);
    e->b_seqs = malloc(sizeof(struct ll_kv_seq) * S);
    e->b_reqs = malloc(sizeof(struct engine_req *) * S);
    e->logits = malloc(sizeof(float) * (size_t)e->max_logit_rows * (size_t)e->vocab);
    e->hidden = malloc(sizeof(float) * B * (size_t)e->model->config.hidden_size);
    if (!e->mbox || !e->b_token || !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs ||
        !e->b_reqs || !e->logits || !e->hidden) {
        s = ll_err_set(err, LL_ENOMEM, "engine: out of memory for batch buffers (%zu tokens, "
                       "%zu sequences)", B, S);
        goto fail;
    }
    const struct model_config *c = &e->model->config;
    for (int i = 0; i < c->n_eos; i++)
        e->eos[e->n_eos++] = c->eos_ids[i];
    e->think_open = tokenizer_token_to_id(e->tok, LL_REASONING_OPEN);
    e->think_close = tokenizer_token_to_id(e->tok, LL_REASONING_CLOSE);
    /* a detokenizer feed returns at most 3 bytes per input byte (U+FFFD for each invalid one)
     * of the held bytes (< 4) and one token's */
    size_t longest = 0;
    for (int32_t id = 0, nv = tokenizer_vocab_size(e->tok); id < nv; id++) {
        size_t n = 0;
        tokenizer_id_bytes(e->tok, id, &n);
        if (n > longest)
            longest = n;
    }
    e->max_piece = 3 * (longest + 4) + 3;
    *out = e;
    return LL_OK;
fail:
    engine_destroy(e);
    return s;
}

static struct engine_usage usage_of(const struct engine_req *r)
{
    return (struct engine_usage){
        .prompt_tokens = r->n_prompt, .cached_tokens = r->cached_tokens,
        .completion_tokens = r->n_tokens - r->n_prompt, .preemptions = r->preemptions,
        .reasoning_tokens = r->reasoning_tokens, .spec_drafted = r->spec.drafted,
        .spec_accepted = r->spec.accepted,
    };
}

/* Whether stop strings apply to the text of the newest token (min_tokens reached). */
static bool stops_active(const struct engine_req *r)
{
    return r->n_tokens - r->n_prompt >= r->params.min_tokens;
}

/* Finish r: take it out of the lists, free its blocks, flush its text, publish the finish,
 * drop the engine's reference. A stop string found in the flushed text turns "length" into
 * "stop". */
static void finish(struct engine *e, struct engine_req *r, enum engine_finish why,
                   int32_t stop_id, int stop_str, const char *msg)
{
    if (why == ENGINE_FINISH_STOP || why == ENGINE_FINISH_LENGTH)
        pins_on_finish(e, r);
    if (r->state == REQ_RUNNING)
        sched_drop_blocks(e, r);
    else if (r->state == REQ_WAITING)
        sched_list_remove(&e->waiting, r);
    double now = ll_now();
    struct engine_timings t = {0};
    t.queue_s = r->t_first_sched > 0 ? r->t_first_sched - r->t_submit : 0;
    t.ttft_s = r->t_first_token > 0 ? r->t_first_token - r->t_submit : 0;
    t.total_s = now - r->t_submit;
    t.decode_s = r->t_first_token > 0 ? now - r->t_first_token : 0;
    size_t len = 0;
    const char *rest = r->stream ? tokenizer_stream_flush(r->stream, &len) : "";
    struct req_push p = {.id = -1, .text = rest, .len = len, .timings = &t, .finish = why,
                         .stop_id = stop_id, .stop_str = stop_str, .msg = msg};
    if (r->use_split) {
        struct text_split *ts = &r->split;
        text_split_feed(ts, rest, len, stops_active(r), true);
        p.text = ts->content;
        p.len = ts->n_content;
        p.reasoning = ts->reason;
        p.reasoning_len = ts->n_reason;
        if (ts->closed || ts->state == SPLIT_REASONING)
            r->reasoning_tokens = r->n_tokens - r->n_prompt;
        if (ts->stop_hit >= 0 && why == ENGINE_FINISH_LENGTH) {
            p.finish = ENGINE_FINISH_STOP;
            p.stop_str = ts->stop_hit;
        }
    }
    struct engine_usage u = usage_of(r);
    p.usage = &u;
    if (!req_push_output(r, &p)) { /* without the last bytes */
        p.len = p.reasoning_len = 0;
        req_push_output(r, &p);
    }
    tokenizer_stream_free(r->stream);
    r->stream = NULL;
    constraint_release(e, r);
    r->state = REQ_FINISHED;
    e->counters.finished++;
    req_engine_unref(r);
}

static void finish_all(struct engine *e, struct req_list *l, enum engine_finish why,
                       const char *msg)
{
    while (l->head)
        finish(e, l->head, why, -1, -1, msg);
}

/* Take what the mailbox holds: new requests join the waiting queue, cancels are applied. */
static bool take_mail(struct engine *e)
{
    struct mailbox *mb = e->mbox;
    pthread_mutex_lock(&mb->lock);
    struct engine_req *in = mb->inbox_head, *cancels = mb->cancels;
    mb->inbox_head = mb->inbox_tail = NULL;
    mb->cancels = NULL;
    pthread_mutex_unlock(&mb->lock);
    bool any = false;
    for (struct engine_req *r = in, *nx; r; r = nx) {
        nx = r->inbox_next;
        r->inbox_next = NULL;
        r->state = REQ_WAITING;
        sched_list_push_back(&e->waiting, r);
        e->counters.submitted++;
    }
    for (struct engine_req *r = cancels, *nx; r; r = nx) {
        nx = r->cancel_next;
        r->cancel_next = NULL;
        if (r->state != REQ_FINISHED) {
            finish(e, r, ENGINE_FINISH_CANCELLED, -1, -1, NULL);
            any = true;
        }
        req_engine_unref(r); /* the cancel list's reference */
    }
    pins_take_unpins(e);
    return any;
}

void engine_destroy(struct engine *e)
{
    if (!e)
        return;
    engine_stop(e);
    if (e->mbox) {
        pthread_mutex_lock(&e->mbox->lock);
        e->mbox->closed = true;
        pthread_mutex_unlock(&e->mbox->lock);
        take_mail(e);
        finish_all(e, &e->running, ENGINE_FINISH_CANCELLED, NULL);
        finish_all(e, &e->waiting, ENGINE_FINISH_CANCELLED, NULL);
        pins_free(e);
        mailbox_unref(e->mbox);
    }
    free(e->b_token);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_seqs);
    free(e->b_reqs);
    free(e->logits);
    free(e->hidden);
    constraint_free_all(e);
    kv_pool_free(&e->pool);
    sampler_free(&e->smp);
    runtime_free(e->rt);
    tokenizer_free(e->tok);
    model_close(e->model);
    free(e);
}

/* ---- the step ---- */

static bool is_stop(const struct engine *e, const struct engine_req *r, int32_t id)
{
    if (!r->params.ignore_eos)
        for (int i = 0; i < e->n_eos; i++)
            if (e->eos[i] == id)
                return true;
    for (int i = 0; i < r->params.n_stop_ids; i++)
        if (r->stop_ids[i] == id)
            return true;
    return false;
}

/* The request's controls on its logits row (in place): bias, penalties, the min_tokens ban. */
static void process_logits(const struct engine *e, const struct engine_req *r, float *row)
{
    const struct engine_params *p = &r->params;
    if (p->n_logit_bias)
        sampler_apply_bias(row, r->bias, p->n_logit_bias);
    if (r->use_counts)
        sampler_apply_penalties(row, &r->counts, &p->penalties);
    if (r->n_tokens - r->n_prompt < p->min_tokens) {
        if (!p->ignore_eos)
            for (int i = 0; i < e->n_eos; i++)
                row[e->eos[i]] = -INFINITY;
        for (int i = 0; i < p->n_stop_ids; i++)
            row[r->stop_ids[i]] = -INFINITY;
    }
}

/* Sample r's next token from its logits row (modified in place) and act on it. Returns false
 * when r finished (the record may be gone: do not touch it). */
static bool take_token(struct engine *e, struct engine_req *r, float *row)
{
    process_logits(e, r, row);
    char gmsg[224];
    if (r->grammar) {
        double t0 = ll_now();
        bool ok = constraint_mask(e, r, row, gmsg, sizeof gmsg);
        e->counters.grammar_s += ll_now() - t0;
        e->counters.grammar_masks++;
        if (!ok) {
            finish(e, r, ENGINE_FINISH_ERROR, -1, -1, gmsg);
            return false;
        }
    }
    struct sampler_params sp = r->params.sampling;
    sp.seed = r->seed;
    int32_t id = sampler_sample(&e->smp, row, &sp, (uint64_t)r->n_tokens);
    struct sampler_logprobs lp;
    if (r->params.logprobs)
        sampler_logprobs(&e->smp, row, sp.temperature, id, r->params.top_logprobs, &lp);
    double now = ll_now();
    if (r->t_first_token == 0)
        r->t_first_token = now;
    e->counters.generated_tokens++;
    if (is_stop(e, r, id)) {
        finish(e, r, ENGINE_FINISH_STOP, id, -1, NULL);
        return false;
    }
    int grammar_done = r->grammar ? constraint_take(e, r, id, gmsg, sizeof gmsg) : 0;
    if (grammar_done < 0) {
        finish(e, r, ENGINE_FINISH_ERROR, -1, -1, gmsg);
        return false;
    }
    r->tokens[r->n_tokens++] = id;
    if (r->use_counts)
        token_counts_add(&r->counts, id, true);
    size_t len;
    const char *text = tokenizer_stream_feed(r->stream, id, &len);
    struct req_push p = {.id = id, .lp = r->params.logprobs ? &lp : NULL, .text = text,
                         .len = len, .stop_id = -1, .stop_str = -1};
    int stop_hit = -1;
    if (r->use_split) {
        struct text_split *ts = &r->split;
        text_split_feed(ts, text, len, stops_active(r), false);
        p.text = ts->content;
        p.len = ts->n_content;
        p.reasoning = ts->reason;
        p.reasoning_len = ts->n_reason;
        if (ts->closed)
            r->reasoning_tokens = r->n_tokens - r->n_prompt;
        stop_hit = ts->stop_hit;
    }
    struct engine_usage u = usage_of(r);
    p.usage = &u;
    if (!req_push_output(r, &p)) {
        finish(e, r, ENGINE_FINISH_ERROR, -1, -1, "out of memory for the request's output");
        return false;
    }
    if (stop_hit >= 0)
        finish(e, r, ENGINE_FINISH_STOP, -1, stop_hit, NULL);
    else if (grammar_done)
        finish(e, r, ENGINE_FINISH_STOP, -1, -1, NULL);
    else if (r->n_tokens >= r->max_len)
        finish(e, r, ENGINE_FINISH_LENGTH, -1, -1, NULL);
    else
        return true;
    return false;
}

/* Verify r's nd draft tokens: rows[j] (j = 0..nd) are the logits after r's last known token
 * and after draft token j - 1. Each row's token is sampled exactly as without drafts, in
 * order, with the history it would have had (bias, penalties, min_tokens, stops, logprobs all
 * see the tokens accepted so far); a draft is accepted when it equals the token sampled at its
 * position, which is then computed in the cache already; the first mismatch ends it, and the
 * token sampled there is the step's last. Blocks past the accepted tokens are released. */
static void verify_drafts(struct engine *e, struct engine_req *r, float *rows, int nd)
{
    r->spec.drafted += nd; /* before any take_token: a finish reports the usage */
    e->counters.spec_drafted += (uint64_t)nd;
    int accepted = 0;
    for (int j = 0; j <= nd; j++) {
        if (!take_token(e, r, rows + (size_t)j * e->vocab))
            return;
        if (j == nd || r->tokens[r->n_tokens - 1] != r->draft[j])
            break;
        accepted++;
        r->spec.accepted++;
        e->counters.spec_accepted++;
        r->n_computed++; /* the draft's K/V are the accepted token's */
        sched_publish_blocks(e, r);
    }
    spec_update(&r->spec, nd, accepted);
    sched_trim_blocks(e, r);
}

/* An embedding's rows of this step: its nh hidden states (hid, in position order) go into
 * the pooling; when the prompt is computed the request finishes with its vector. */
static void take_states(struct engine *e, struct engine_req *r, const float *hid, int nh)
{
    int H = r->n_embd;
    if (r->params.embed == LL_POOL_MEAN) {
        if (r->n_computed == 0) /* from the start (again, after a preemption) */
            memset(r->esum, 0, sizeof(double) * (size_t)H);
        for (int j = 0; j < nh; j++)
            for (int i = 0; i < H; i++)
                r->esum[i] += hid[(size_t)j * H + i];
    } else if (nh) { /* the last position's, or the first's: this step's one state */
        memcpy(r->embd, hid, sizeof(float) * (size_t)H);
    }
    r->n_computed += r->batch_rows;
    sched_publish_blocks(e, r);
    if (r->n_computed < r->n_tokens)
        return;
    if (r->params.embed == LL_POOL_MEAN)
        for (int i = 0; i < H; i++)
            r->embd[i] = (float)(r->esum[i] / r->n_tokens);
    r->embd_ready = true;
    e->counters.embeddings++;
    finish(e, r, ENGINE_FINISH_STOP, -1, -1, NULL);
}

static void snapshot_stats(struct engine *e)
{
    struct kv_pool_stats ps;
    kv_pool_get_stats(&e->pool, &ps);
    struct engine_stats st = e->counters;
    st.waiting = e->waiting.n;
    st.running = e->running.n;
    st.kv_blocks = ps.total;
    st.kv_in_use = ps.in_use;
    st.kv_cached = ps.cached;
    st.kv_free = ps.free;
    st.block_size = e->opts.block_size;
    st.compute_threads = ll_pool_active(e->rt->pool);
    st.pins = e->n_pins;
    for (int i = 0; i < e->n_pins; i++)
        st.kv_pinned += e->pins[i].n;
    st.kv_tokens = 0;
    for (const struct engine_req *r = e->running.head; r; r = r->next)
        st.kv_tokens += r->n_computed;
    if (st.kv_tokens > e->counters.kv_tokens_peak)
        e->counters.kv_tokens_peak = st.kv_tokens;
    st.kv_tokens_peak = e->counters.kv_tokens_peak;
    pthread_mutex_lock(&e->mbox->lock);
    st.queued = e->mbox->queued;
    st.held = e->mbox->held;
    st.rejected = e->mbox->rejected;
    st.submitted = e->mbox->next_id;
    e->mbox->stats = st;
    pthread_mutex_unlock(&e->mbox->lock);
}

/* Rows of batch sequence k, which start at row off (a sequence's rows are contiguous and in
 * the order of b_reqs); *n_want: how many of them want logits, *n_hid their hidden state (each
 * kind contiguous in its buffer). */
static int seq_rows(const struct engine *e, int k, int off, int *n_want, int *n_hid)
{
    int n = 0;
    *n_want = *n_hid = 0;
    for (; off + n < e->n_rows && e->b_seq[off + n] == k; n++) {
        uint8_t w = e->b_want[off + n];
        *n_want += w && w != LL_WANT_HIDDEN;
        *n_hid += w == LL_WANT_HIDDEN;
    }
    return n;
}

/* The whole step's forward failed: run each sequence's rows alone, into the logits rows the
 * batch would have given them (a row's logits do not depend on the rest of the batch, see
 * Determinism), so that only a request whose own forward fails finishes with the error
 * (b_reqs[k] = NULL) and the others continue as if nothing happened. Returns how many failed. */
static int forward_each(struct engine *e)
{
    int off = 0, row = 0, hrow = 0, failed = 0, H = e->model->config.hidden_size;
    for (int k = 0; k < e->n_seqs; k++) {
        int nw, nh, n = seq_rows(e, k, off, &nw, &nh);
        struct ll_batch b = {
            .n_tokens = n, .token = e->b_token + off, .pos = e->b_pos + off,
            .want_logits = e->b_want + off, .seqs = &e->b_seqs[k], .n_seqs = 1,
            .hidden = e->hidden + (size_t)hrow * H,
        };
        struct ll_err ferr = {0};
        if (runtime_forward(e->rt, &b, e->logits + (size_t)row * e->vocab, &ferr) != LL_OK) {
            struct engine_req *r = e->b_reqs[k];
            log_msg(LOG_WARN, "engine: request %llu failed in the forward pass: %s",
                    (unsigned long long)r->id, ferr.msg);
            e->b_reqs[k] = NULL;
            finish(e, r, ENGINE_FINISH_ERROR, -1, -1, ferr.msg);
            failed++;
        }
        off += n;
        row += nw;
        hrow += nh;
    }
    return failed;
}

/* One step; returns whether any token was computed or any request finished. */
static bool step(struct engine *e)
{
    double t0 = ll_now();
    e->step_no++;
    bool did = take_mail(e);
    sched_build_batch(e);
    bool timed = true; /* the step's time says what its batch costs */
    if (e->n_rows > 0) {
        did = true;
        struct ll_batch b = {
            .n_tokens = e->n_rows, .token = e->b_token, .pos = e->b_pos, .seq = e->b_seq,
            .want_logits = e->b_want, .seqs = e->b_seqs, .n_seqs = e->n_seqs,
            .hidden = e->hidden,
        };
        struct ll_err ferr = {0};
        if (runtime_forward(e->rt, &b, e->logits, &ferr) != LL_OK) {
            log_msg(LOG_WARN, "engine: a step of %d request(s) failed (%s); running each alone",
                    e->n_seqs, ferr.msg);
            e->counters.forward_failures += (uint64_t)forward_each(e);
            timed = false;
        }
        int off = 0, row = 0, hrow = 0, H = e->model->config.hidden_size;
        for (int k = 0; k < e->n_seqs; k++) {
            int nw, nh;
            off += seq_rows(e, k, off, &nw, &nh);
            float *rows = e->logits + (size_t)row * e->vocab;
            const float *hid = e->hidden + (size_t)hrow * H;
            row += nw;
            hrow += nh;
            struct engine_req *r = e->b_reqs[k];
            if (!r) /* failed alone in forward_each */
                continue;
            if (r->params.embed) {
                take_states(e, r, hid, nh);
                continue;
            }
            int nd = r->batch_draft;
            r->n_computed += r->batch_rows - nd;
            sched_publish_blocks(e, r);
            if (r->n_computed < r->n_tokens)
                continue;
            LL_ASSERT(nw == 1 + nd);
            if (nd)
                verify_drafts(e, r, rows, nd);
            else
                take_token(e, r, rows);
        }
    }
    e->counters.steps++;
    double dt = ll_now() - t0;
    if (did)
        e->counters.busy_s += dt;
    if (timed)
        sched_step_done(e, dt);
    snapshot_stats(e);
    return did;
}

enum ll_status engine_step(struct engine *e, bool *did_work, struct ll_err *err)
{
    *did_work = false;
    if (e->threaded)
        return ll_err_set(err, LL_EINVAL, "engine_step: the engine's own thread is running");
    *did_work = step(e);
    return LL_OK;
}

enum ll_status engine_run_until_idle(struct engine *e, struct ll_err *err)
{
    for (;;) {
        bool did;
        enum ll_status s = engine_step(e, &did, err);
        if (s != LL_OK)
            return s;
        if (!did && !e->waiting.n && !e->running.n)
            return LL_OK;
    }
}

bool engine_has_work(struct engine *e)
{
    pthread_mutex_lock(&e->mbox->lock);
    bool mail = e->mbox->inbox_head || e->mbox->cancels;
    pthread_mutex_unlock(&e->mbox->lock);
    return mail || e->waiting.n || e->running.n;
}

bool engine_reset_prefix_cache(struct engine *e)
{
    LL_ASSERT(!e->threaded);
    if (e->running.n)
        return false;
    kv_pool_reset(&e->pool);
    snapshot_stats(e);
    return true;
}

/* ---- threaded mode ---- */

static void *scheduler_main(void *arg)
{
    struct engine *e = arg;
    struct mailbox *mb = e->mbox;
    for (;;) {
        pthread_mutex_lock(&mb->lock);
        while (!mb->stop && !mb->inbox_head && !mb->cancels && !e->n_unpins && !e->waiting.n &&
               !e->running.n)
            pthread_cond_wait(&mb->wake, &mb->lock);
        bool stop = mb->stop;
        pthread_mutex_unlock(&mb->lock);
        if (stop)
            break;
        step(e);
    }
    return NULL;
}

enum ll_status engine_start(struct engine *e, struct ll_err *err)
{
    if (e->threaded)
        return ll_err_set(err, LL_EINVAL, "engine_start: already started");
    e->mbox->stop = false;
    if (pthread_create(&e->thread, NULL, scheduler_main, e))
        return ll_err_set(err, LL_ENOMEM, "engine_start: cannot start the scheduler thread");
    e->threaded = true;
    return LL_OK;
}

void engine_stop(struct engine *e)
{
    if (!e->threaded)
        return;
    pthread_mutex_lock(&e->mbox->lock);
    e->mbox->stop = true;
    pthread_cond_signal(&e->mbox->wake);
    pthread_mutex_unlock(&e->mbox->lock);
    pthread_join(e->thread, NULL);
    e->threaded = false;
    e->mbox->stop = false;
}

void engine_get_stats(struct engine *e, struct engine_stats *st)
{
    pthread_mutex_lock(&e->mbox->lock);
    *st = e->mbox->stats;
    st->rejected = e->mbox->rejected;
    st->queued = e->mbox->queued;
    st->held = e->mbox->held;
    st->admission_limit = e->opts.max_seqs + e->opts.max_queue;
    st->kv_blocks = e->opts.kv_blocks; /* fixed: right before the first step too */
    if (st->compute_threads == 0) /* no step yet: the pool starts with every thread */
        st->compute_threads = e->opts.n_threads;
    st->block_size = e->opts.block_size;
    pthread_mutex_unlock(&e->mbox->lock);
}
