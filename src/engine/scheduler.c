/*
 * scheduler.c: what runs in each step: the flat batch built from the running and waiting
 * sequences, KV block allocation, prefix-cache admission, preemption, draft tokens (--spec),
 * and how many prompt tokens a step may carry (latency-aware chunking).
 *
 * Called only by the scheduler thread (engine_step). Order within a step:
 *   1. decode: every running sequence with exactly one token to feed, oldest first; a decode
 *      that needs a block and finds none preempts the most recently started sequence (itself if
 *      it is that one), so running streams keep a steady pace;
 *   2. drafts (--spec ngram): decoding sequences, oldest first, add draft tokens (spec.h) to
 *      verify in this same batch, as many as the request's acceptance makes worth their rows
 *      (theta below), in the time a prompt chunk could take (step 3; ngram-always:
 *      spec_max_draft wherever a match exists), within the token budget, the logits rows and
 *      the free blocks (a draft never preempts); constrained requests (a grammar) get none;
 *      session turns (pin_key) do: their pins take only published blocks, which hold
 *      accepted tokens only;
 *   3. the prompt budget: how many prompt tokens this step may carry beside those rows. With no
 *      sequence decoding it is the whole token budget (nobody's inter-token gap is at stake).
 *      Else it comes from the measured step cost F (step_cost.h): the most tokens c with
 *      F(d + c) <= F(d) + E, d the decode rows and E = itl_target - F(d), at least
 *      SCHED_PROMPT_SHARE times F(d), and at most what keeps the step within --itl-max-ratio
 *      (160 %) of F(r), r the decode rows of the batch being built (this step's plus one per
 *      request whose prompt is still to be fed, up to max_seqs). So a step stays under
 *      --itl-target-ms where the machine allows it, yet never takes more than 1.6 times a
 *      decode-only step of that batch by default (on a fast machine a 400 ms step beside 50 ms
 *      ones would be a stall every stream sees: inter-token p99 stays within 2x p50, with room
 *      for the estimate's error). While requests queue behind a few streams the reference is
 *      the batch they will make, not the few rows decoding now: a lone stream's 90 ms step
 *      would hold 7 queued prompts to a few tokens a step, each waiting seconds to start, while
 *      the streams they join will step at the batch's pace anyway. Where the decode rows alone
 *      come near the target, prompts still get half a decode step's time. Progress is
 *      guaranteed whatever the timings: when prompt work has waited SCHED_STARVE_STEPS - 1
 *      steps without a single token, the next step offers SCHED_MIN_CHUNK (a shape the cost
 *      table then knows);
 *   4. prompt chunks of running sequences that still have several tokens to feed (chunked
 *      prompts, recomputation after preemption), oldest first, as far as the prompt budget
 *      goes; they may preempt later-started sequences that have no rows in this step, else
 *      shrink;
 *   5. admission from the waiting queue in order (head of line: no overtaking, so the order of
 *      service never depends on prompt sizes), while max_seqs and the budget allow, no
 *      preemption happened in this step, and the pool can hold the whole prompt beside what is
 *      already promised. Leading full blocks found in the prefix cache are shared, not computed;
 *      a request whose next block is being computed by a running request waits for it.
 * So streaming requests come first (their decode rows, then their drafts), then prompts first
 * come first served. "Started" order is a stamp given at first admission and kept across
 * preemption, so the oldest request always progresses and nothing starves. Chunk sizes depend
 * on timings; tokens do not (the forward pass computes a row the same way in any batch).
 *
 * Drafts: theta, the acceptance a draft token must promise, is SCHED_DRAFT_MARGIN times the
 * marginal cost of one more row over the cost per produced token of the decode rows:
 * 2 · step_cost_row(d) · d / F(d) (the margin covers the estimate's noise: text that repeats
 * little, where drafts barely pay, gets none). A lone stream on a memory-bound CPU pays little
 * for extra rows (small theta, long drafts); a large batch is compute-bound (theta near or
 * above 1: drafts only as back-off probes, which keep going while they are accepted).
 *
 * Embeddings (engine_params.embed) are prompts like any other here; only their rows ask for
 * hidden states instead of logits (emit_rows: the last position's, every position's for a mean,
 * or the first's), and they get no drafts (nothing is sampled).
 *
 * Invariants: a running sequence's table covers positions 0..n_computed-1 (plus this step's
 * rows); a sequence never writes into a block it shares (only full blocks are shared, and a
 * prefix hit always leaves the prompt's last token to compute); n_computed < n_tokens while
 * running (an embedding reaches n_tokens in the step that finishes it); draft tokens are never
 * in r->tokens, and only blocks of verified tokens are published (sched_publish_blocks runs on
 * n_computed, which counts accepted tokens only).
 */
#include "engine_impl.h"

#include "util.h"

#define SCHED_PROMPT_SHARE 0.5     /* prompt time in a step, at least, relative to its decode rows */
#define SCHED_MIN_CHUNK 16         /* tokens a starved prompt gets ... */
#define SCHED_STARVE_STEPS 4       /* ... after this many steps without any */
#define SCHED_THETA_UNKNOWN 0.5 /* theta before the step cost is measured */
#define SCHED_DRAFT_MARGIN 2.0  /* a draft token must promise this many times its cost */

void sched_list_remove(struct req_list *l, struct engine_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

/* Link r after `after` (NULL: at the head). */
static void list_insert_after(struct req_list *l, struct engine_req *after, struct engine_req *r)
{
    r->prev = after;
    r->next = after ? after->next : l->head;
    if (r->next)
        r->next->prev = r;
    else
        l->tail = r;
    if (after)
        after->next = r;
    else
        l->head = r;
    l->n++;
}

void sched_list_push_back(struct req_list *l, struct engine_req *r)
{
    list_insert_after(l, l->tail, r);
}

void sched_waiting_insert(struct engine *e, struct engine_req *r)
{
    struct req_list *l = &e->waiting;
    if (r->stamp == 0) {
        sched_list_push_back(l, r);
        return;
    }
    /* Preempted: after the preempted ones started before it, before everything else. */
    struct engine_req *after = NULL;
    for (struct engine_req *w = l->head; w && w->stamp != 0 && w->stamp < r->stamp; w = w->next)
        after = w;
    list_insert_after(l, after, r);
}

/* Running list, ascending stamp. */
static void running_insert(struct engine *e, struct engine_req *r)
{
    struct engine_req *after = e->running.tail;
    while (after && after->stamp > r->stamp)
        after = after->prev;
    list_insert_after(&e->running, after, r);
}

static int blocks_for(int n_positions, int bs) { return (n_positions + bs - 1) / bs; }

void sched_drop_blocks(struct engine *e, struct engine_req *r)
{
    kv_pool_release_table(&e->pool, r->blocks, r->n_blocks);
    r->n_blocks = 0;
    r->n_published = 0;
    r->n_computed = 0;
    if (r->state == REQ_RUNNING)
        sched_list_remove(&e->running, r);
}

/* Free r's blocks and send it back to wait; it recomputes its tokens as a prompt later. */
static void preempt(struct engine *e, struct engine_req *r)
{
    LL_ASSERT(r->state == REQ_RUNNING && r->batch_step != e->step_no);
    sched_drop_blocks(e, r);
    r->state = REQ_WAITING;
    pthread_mutex_lock(&e->mbox->lock);
    r->pub_state = ENGINE_REQ_PREEMPTED;
    pthread_mutex_unlock(&e->mbox->lock);
    r->preemptions++;
    e->counters.preemptions++;
    e->preempted_now = true;
    sched_waiting_insert(e, r);
}

/* Grow r's table to cover positions 0..upto-1 (the caller checked that the blocks exist). */
static void ensure_blocks(struct engine *e, struct engine_req *r, int upto)
{
    int want = blocks_for(upto, e->opts.block_size);
    LL_ASSERT(want <= r->max_blocks);
    while (r->n_blocks < want) {
        int b = kv_pool_alloc(&e->pool);
        LL_ASSERT(b >= 0);
        r->blocks[r->n_blocks++] = b;
    }
}

/* Put r's next n tokens into the batch as one sequence (rows are written by emit_rows once
 * the batch is planned, so drafts can join their sequence's rows). */
static void add_rows(struct engine *e, struct engine_req *r, int n)
{
    LL_ASSERT(n >= 1 && n <= e->budget && r->n_computed + n <= r->n_tokens);
    LL_ASSERT(e->n_seqs < e->opts.max_seqs);
    ensure_blocks(e, r, r->n_computed + n);
    int k = e->n_seqs++;
    e->b_reqs[k] = r;
    r->batch_step = e->step_no;
    r->batch_seq = k;
    r->batch_rows = n;
    r->batch_draft = 0;
    e->budget -= n;
    e->n_rows += n;
    if (n == 1 && r->n_tokens - r->n_computed == 1) {
        e->counters.decode_tokens++;
        e->n_decode_rows++;
    } else {
        e->counters.prompt_tokens += (uint64_t)n;
        e->n_prompt_rows += n;
    }
}

/* Write the planned sequences' rows into e->b_*. */
static void emit_rows(struct engine *e)
{
    int row = 0;
    for (int k = 0; k < e->n_seqs; k++) {
        struct engine_req *r = e->b_reqs[k];
        e->b_seqs[k] = (struct ll_kv_seq){r->blocks, r->n_blocks};
        int fed = r->batch_rows - r->batch_draft;
        for (int j = 0; j < r->batch_rows; j++, row++) {
            int p = r->n_computed + j;
            e->b_token[row] = j < fed ? r->tokens[p] : r->draft[j - fed];
            e->b_pos[row] = p;
            e->b_seq[row] = k;
            /* logits only where a token gets sampled: the last known token and each draft;
             * an embedding's states where its pooling reads them */
            switch (r->params.embed) {
            case LL_POOL_NONE:
                e->b_want[row] = p >= r->n_tokens - 1;
                break;
            case LL_POOL_LAST:
                e->b_want[row] = p == r->n_tokens - 1 ? LL_WANT_HIDDEN : 0;
                break;
            case LL_POOL_MEAN:
                e->b_want[row] = LL_WANT_HIDDEN;
                break;
            case LL_POOL_FIRST:
                e->b_want[row] = p == 0 ? LL_WANT_HIDDEN : 0;
                break;
            }
        }
    }
    LL_ASSERT(row == e->n_rows);
}

static void schedule_decodes(struct engine *e)
{
    struct engine_req *next;
    for (struct engine_req *r = e->running.head; r && e->budget > 0; r = next) {
        next = r->next;
        if (r->n_tokens - r->n_computed != 1)
            continue;
        int need = blocks_for(r->n_computed + 1, e->opts.block_size) - r->n_blocks;
        bool self = false;
        pins_make_room(e, need); /* pins go before any preemption */
        while (need > kv_pool_n_free(&e->pool)) {
            struct engine_req *v = e->running.tail; /* most recently started */
            if (v == r) {
                self = true;
                break;
            }
            if (v == next)
                next = NULL; /* v is the tail: nothing follows it */
            preempt(e, v);
        }
        if (self) {
            preempt(e, r); /* r was the tail: nothing follows it */
            break;
        }
        add_rows(e, r, 1);
    }
}

/* The most of a step's time, relative to its decode rows, that prompt work may take. */
static double max_share(const struct engine *e)
{
    double s = e->opts.itl_max_ratio / 100.0 - 1;
    return s > SCHED_PROMPT_SHARE ? s : SCHED_PROMPT_SHARE;
}

/* The acceptance a draft token must promise to be worth its row beside d decode rows. */
static double draft_theta(const struct engine *e, int d)
{
    double dd = step_cost_step(&e->cost, d), m = step_cost_row(&e->cost, d);
    if (dd <= 0 || m < 0)
        return SCHED_THETA_UNKNOWN;
    return SCHED_DRAFT_MARGIN * m * d / dd;
}

/* Step 2: draft tokens for the decoding sequences of this batch (see the top). */
static void schedule_drafts(struct engine *e)
{
    int d = e->n_decode_rows, bs = e->opts.block_size;
    if (d == 0)
        return;
    double theta = draft_theta(e, d);
    double dd = step_cost_step(&e->cost, d), m = step_cost_row(&e->cost, d);
    double target = e->opts.itl_target_ms / 1000.0;
    /* drafts take the time a prompt chunk could (step 3), at the marginal row cost (F is
     * proportional past the shapes it has seen, which would never let a lone stream try a
     * draft) */
    double rows_left = 1e9;
    if (dd >= 0 && m > 0)
        rows_left = step_cost_prompt_time(dd, dd, target, SCHED_PROMPT_SHARE, max_share(e)) / m;
    int spare = e->max_logit_rows - e->opts.max_seqs; /* logits rows for drafts */
    for (int k = 0; k < e->n_seqs && e->budget > 0; k++) {
        struct engine_req *r = e->b_reqs[k];
        if (r->batch_rows != 1 || r->n_tokens - r->n_computed != 1)
            continue;
        /* a grammar's mask at a draft's position depends on the state after the tokens before
         * it, which verification does not track: constrained requests get no drafts */
        if (r->grammar)
            continue;
        /* the last draft sits at position n_tokens - 1 + k and max_len - 1 tokens at most are
         * ever fed; rows, logits rows and blocks bound it too */
        int max_k = e->opts.spec_max_draft;
        int room = r->max_len - 1 - r->n_tokens;
        max_k = room < max_k ? room : max_k;
        max_k = e->budget < max_k ? e->budget : max_k;
        max_k = spare - e->n_draft_rows < max_k ? spare - e->n_draft_rows : max_k;
        if (max_k < 1 || !spec_ngram_draft(r->tokens, r->n_tokens, max_k, r->draft))
            continue;
        int n = max_k;
        if (e->opts.spec == ENGINE_SPEC_NGRAM) {
            n = spec_plan(&r->spec, theta, max_k);
            double left = rows_left - e->n_draft_rows;
            if (n > left)
                n = left > 0 ? (int)left : 0;
        }
        int have = r->n_blocks + kv_pool_n_free(&e->pool);
        while (n > 0 && (r->n_computed + 1 + n + bs - 1) / bs > have)
            n--;
        if (n == 0)
            continue;
        ensure_blocks(e, r, r->n_computed + 1 + n);
        r->batch_rows += n;
        r->batch_draft = n;
        e->budget -= n;
        e->n_rows += n;
        e->n_decode_rows += n;
        e->n_draft_rows += n;
    }
}

/* Requests whose prompt work waits: running sequences with several tokens to feed and no rows
 * yet, and waiting requests. */
static int prompts_pending(const struct engine *e)
{
    int n = e->waiting.n;
    for (const struct engine_req *r = e->running.head; r; r = r->next)
        if (r->batch_step != e->step_no && r->n_tokens - r->n_computed > 1)
            n++;
    return n;
}

/* Step 3: the prompt tokens this step may carry (see the top). */
static int prompt_budget(struct engine *e, int pending)
{
    int d = e->n_decode_rows, left = e->budget;
    if (d == 0)
        return left;
    /* the reference step: the decode rows of the batch being built, this step's and one for
     * every request whose prompt is still to be fed, up to max_seqs */
    int most = e->opts.max_seqs > d ? e->opts.max_seqs : d;
    int ref = d + pending < most ? d + pending : most;
    int n = step_cost_prompt_budget(&e->cost, d, ref, e->opts.itl_target_ms / 1000.0,
                                    SCHED_PROMPT_SHARE, max_share(e), left);
    if (n < 0)
        n = SCHED_MIN_CHUNK; /* costs not measured yet: a small chunk measures them */
    if (n == 0 && e->prompt_starved >= SCHED_STARVE_STEPS - 1)
        n = SCHED_MIN_CHUNK;
    return n < left ? n : left;
}

static void schedule_chunks(struct engine *e)
{
    int bs = e->opts.block_size;
    for (struct engine_req *r = e->running.head; r && e->budget > 0; r = r->next) {
        int rem = r->n_tokens - r->n_computed;
        if (rem <= 1 || r->batch_step == e->step_no)
            continue;
        int chunk = rem < e->budget ? rem : e->budget;
        int need = blocks_for(r->n_computed + chunk, bs) - r->n_blocks;
        pins_make_room(e, need);
        while (need > kv_pool_n_free(&e->pool)) {
            struct engine_req *v = e->running.tail;
            if (v == r || v->batch_step == e->step_no)
                break;
            preempt(e, v);
        }
        if (need > kv_pool_n_free(&e->pool)) {
            chunk = (r->n_blocks + kv_pool_n_free(&e->pool)) * bs - r->n_computed;
            if (chunk <= 0)
                continue;
        }
        add_rows(e, r, chunk);
    }
}

/* Leading full blocks of r's tokens found in the prefix cache, written to r->blocks (no
 * references taken). *from_free counts those that are cached but unreferenced (taking them
 * uses up allocatable blocks). At least the last token is always left to compute. */
static int match_prefix(struct engine *e, struct engine_req *r, int *from_free)
{
    *from_free = 0;
    if (e->opts.no_prefix_cache || r->params.no_cache)
        return 0;
    int bs = e->opts.block_size, limit = (r->n_tokens - 1) / bs, m = 0;
    while (r->n_hashes < limit) {
        int i = r->n_hashes;
        r->hashes[i] = kv_pool_hash_block(i ? r->hashes[i - 1] : 0, r->tokens + (size_t)i * bs,
                                          bs);
        r->n_hashes++;
    }
    for (; m < limit; m++) {
        int b = kv_pool_lookup(&e->pool, r->hashes[m], m ? r->hashes[m - 1] : 0,
                               r->tokens + (size_t)m * bs);
        if (b < 0)
            break;
        r->blocks[m] = b;
        if (e->pool.ref[b] == 0)
            (*from_free)++;
    }
    return m;
}

/* Whether a running request is still computing the prompt block that r misses first (block m,
 * when r could take it from the cache): then r waits for it to be published rather than
 * compute it again. This is how the choices of one prompt (n > 1) share the prompt's blocks;
 * it helps any identical prefixes that arrive together. Hashes are chained, so equal hashes of
 * block m mean equal prefixes (a collision only delays r until that block is computed). */
static bool wait_for_prefix(const struct engine *e, const struct engine_req *r, int m)
{
    if (e->opts.no_prefix_cache || r->params.no_cache || m >= r->n_hashes)
        return false;
    for (const struct engine_req *o = e->running.head; o; o = o->next)
        if (o->n_hashes > m && o->n_published <= m && o->hashes[m] == r->hashes[m] &&
            (o->params.cache_prefix <= 0 || m < o->params.cache_prefix / e->opts.block_size))
            return true; /* (a block past o's cache_prefix is never published) */
    return false;
}

static void admit(struct engine *e)
{
    int bs = e->opts.block_size;
    while (!e->preempted_now && e->waiting.head && e->running.n < e->opts.max_seqs &&
           e->budget > 0 && e->n_seqs < e->opts.max_seqs) {
        struct engine_req *r = e->waiting.head;
        LL_ASSERT(r->n_blocks == 0 && r->n_computed == 0);
        int from_free, m = match_prefix(e, r, &from_free);
        if (wait_for_prefix(e, r, m))
            break; /* its prefix is being computed: take it next step (no overtaking) */
        int need = blocks_for(r->n_tokens, bs) - m;
        if (need + from_free > kv_pool_n_free(&e->pool) &&
            pins_make_room(e, need + from_free)) { /* unpinned: the match may have changed */
            m = match_prefix(e, r, &from_free);
            need = blocks_for(r->n_tokens, bs) - m;
        }
        if (need + from_free > kv_pool_n_free(&e->pool))
            break; /* wait for room; later requests do not overtake */
        for (int i = 0; i < m; i++)
            kv_pool_ref(&e->pool, r->blocks[i]);
        r->n_blocks = m;
        r->n_published = m;
        r->n_computed = m * bs;
        e->counters.cached_tokens += (uint64_t)(m * bs);
        pthread_mutex_lock(&e->mbox->lock);
        r->pub_state = ENGINE_REQ_RUNNING;
        if (r->stamp == 0) { /* first start */
            e->mbox->queued--;
            r->started_at = ll_now();
        }
        pthread_mutex_unlock(&e->mbox->lock);
        if (r->stamp == 0) {
            r->stamp = ++e->next_stamp;
            r->cached_tokens = m * bs;
            r->t_first_sched = ll_now();
        }
        sched_list_remove(&e->waiting, r);
        r->state = REQ_RUNNING;
        running_insert(e, r);
        int rem = r->n_tokens - r->n_computed;
        add_rows(e, r, rem < e->budget ? rem : e->budget);
    }
}

void sched_build_batch(struct engine *e)
{
    e->n_rows = 0;
    e->n_seqs = 0;
    e->n_decode_rows = e->n_draft_rows = e->n_prompt_rows = 0;
    e->budget = e->opts.max_batch_tokens;
    e->preempted_now = false;
    schedule_decodes(e);
    if (e->opts.spec != ENGINE_SPEC_OFF)
        schedule_drafts(e);
    int pending = prompts_pending(e);
    int budget = prompt_budget(e, pending);
    e->budget = budget;
    schedule_chunks(e);
    admit(e);
    if (pending && e->n_prompt_rows == 0)
        e->prompt_starved++;
    else
        e->prompt_starved = 0;
    e->counters.prompt_budget = e->n_decode_rows ? budget : -1;
    emit_rows(e);
}

void sched_step_done(struct engine *e, double seconds)
{
    if (e->n_rows > 0)
        step_cost_observe(&e->cost, e->n_rows, seconds);
    int d = e->running.n;
    e->counters.cost_step_s = d ? step_cost_step(&e->cost, d) : 0;
    e->counters.cost_prompt_token_s = step_cost_row(&e->cost, d);
}

void sched_trim_blocks(struct engine *e, struct engine_req *r)
{
    int keep = blocks_for(r->n_computed + 1, e->opts.block_size);
    while (r->n_blocks > keep)
        kv_pool_release(&e->pool, r->blocks[--r->n_blocks]);
}

void sched_publish_blocks(struct engine *e, struct engine_req *r)
{
    if (e->opts.no_prefix_cache || r->params.no_cache)
        return;
    int bs = e->opts.block_size, full = r->n_computed / bs;
    if (r->params.cache_prefix > 0 && full > r->params.cache_prefix / bs)
        full = r->params.cache_prefix / bs;
    while (r->n_hashes < full) {
        int i = r->n_hashes;
        r->hashes[i] = kv_pool_hash_block(i ? r->hashes[i - 1] : 0, r->tokens + (size_t)i * bs,
                                          bs);
        r->n_hashes++;
    }
    while (r->n_published < full) {
        int i = r->n_published++;
        kv_pool_publish(&e->pool, r->blocks[i], r->hashes[i], i ? r->hashes[i - 1] : 0,
                        r->tokens + (size_t)i * bs);
    }
}
