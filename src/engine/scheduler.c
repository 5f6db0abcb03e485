/*
 * scheduler.c: what runs in each step: the flat batch built from the running and waiting
 * sequences, KV block allocation, prefix-cache admission and preemption.
 *
 * Called only by the scheduler thread (engine_step). Order within a step:
 *   1. decode: every running sequence with exactly one token to feed, oldest first; a decode
 *      that needs a block and finds none preempts the most recently started sequence (itself if
 *      it is that one), so running streams keep a steady pace;
 *   2. prompt chunks of running sequences that still have several tokens to feed (chunked
 *      prompts, recomputation after preemption), oldest first, as far as the token budget goes;
 *      they may preempt later-started sequences that have no rows in this step, else shrink;
 *   3. admission from the waiting queue in order (head of line: no overtaking, so the order of
 *      service never depends on prompt sizes), while max_seqs and the budget allow, no
 *      preemption happened in this step, and the pool can hold the whole prompt beside what is
 *      already promised. Leading full blocks found in the prefix cache are shared, not computed;
 *      a request whose next block is being computed by a running request waits for it.
 * "Started" order is a stamp given at first admission and kept across preemption, so the
 * oldest request always progresses and nothing starves.
 *
 * Invariants: a running sequence's table covers positions 0..n_computed-1 (plus this step's
 * rows); a sequence never writes into a block it shares (only full blocks are shared, and a
 * prefix hit always leaves the prompt's last token to compute); n_computed < n_tokens while
 * running.
 */
#include "engine_impl.h"

#include "util.h"

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

/* Put r's next n tokens into the batch as one sequence. */
static void add_rows(struct engine *e, struct engine_req *r, int n)
{
    LL_ASSERT(n >= 1 && n <= e->budget && r->n_computed + n <= r->n_tokens);
    LL_ASSERT(e->n_seqs < e->opts.max_seqs);
    ensure_blocks(e, r, r->n_computed + n);
    int k = e->n_seqs++;
    e->b_reqs[k] = r;
    e->b_seqs[k] = (struct ll_kv_seq){r->blocks, r->n_blocks};
    for (int j = 0; j < n; j++) {
        int row = e->n_rows++, p = r->n_computed + j;
        e->b_token[row] = r->tokens[p];
        e->b_pos[row] = p;
        e->b_seq[row] = k;
        e->b_want[row] = p == r->n_tokens - 1; /* logits only where a token gets sampled */
    }
    r->batch_step = e->step_no;
    r->batch_seq = k;
    r->batch_rows = n;
    e->budget -= n;
    if (n == 1 && r->n_tokens - r->n_computed == 1)
        e->counters.decode_tokens++;
    else
        e->counters.prompt_tokens += (uint64_t)n;
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
        if (o->n_hashes > m && o->n_published <= m && o->hashes[m] == r->hashes[m])
            return true;
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
    e->budget = e->opts.max_batch_tokens;
    e->preempted_now = false;
    schedule_decodes(e);
    schedule_chunks(e);
    admit(e);
}

void sched_publish_blocks(struct engine *e, struct engine_req *r)
{
    if (e->opts.no_prefix_cache || r->params.no_cache)
        return;
    int bs = e->opts.block_size, full = r->n_computed / bs;
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
