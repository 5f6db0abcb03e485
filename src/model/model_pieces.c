/*
 * model_pieces.c: running a function over every linear weight in pieces of rows (see
 * model_pieces.h).
 */
#include "model_pieces.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "pool.h"

struct run {
    struct model *m;
    int piece_rows;
    model_piece_fn fn;
    void *ctx;
    int64_t *first;       /* (n_linears + 1) each weight's first piece; first[n] = total */
    _Atomic int64_t next; /* the next piece to take */
    _Atomic int failed;   /* a piece failed: stop taking more */
    pthread_mutex_t lock;
    enum ll_status status; /* the first error, under lock */
    struct ll_err err;
};

static void run_worker(void *ctx, int ith, int nth)
{
    (void)ith, (void)nth;
    struct run *j = ctx;
    const int nl = j->m->n_linears;
    for (;;) {
        int64_t p = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (p >= j->first[nl] || atomic_load_explicit(&j->failed, memory_order_relaxed))
            return;
        int lo = 0, hi = nl - 1; /* the weight holding piece p: last i with first[i] <= p */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (j->first[mid] <= p)
                lo = mid;
            else
                hi = mid - 1;
        }
        struct model_linear *l = j->m->linears[lo];
        int r0 = (int)(p - j->first[lo]) * j->piece_rows;
        int r1 = r0 + j->piece_rows < l->n ? r0 + j->piece_rows : l->n;
        struct ll_err e = {0};
        if (j->fn(j->ctx, l, lo, r0, r1, p, &e) != LL_OK) {
            atomic_store_explicit(&j->failed, 1, memory_order_relaxed);
            pthread_mutex_lock(&j->lock);
            if (j->status == LL_OK) {
                j->status = e.code;
                ll_err_set(&j->err, e.code, "%s: weight '%s': %s", j->m->dir, l->name, e.msg);
            }
            pthread_mutex_unlock(&j->lock);
            return;
        }
    }
}

int64_t model_pieces_count(const struct model *m, int piece_rows)
{
    int64_t n = 0;
    for (int i = 0; i < m->n_linears; i++)
        n += (m->linears[i]->n + piece_rows - 1) / piece_rows;
    return n;
}

enum ll_status model_pieces_run(struct model *m, int piece_rows, int n_threads, model_piece_fn fn,
                                void *ctx, struct ll_err *err)
{
    const int nl = m->n_linears;
    struct run j = {.m = m, .piece_rows = piece_rows, .fn = fn, .ctx = ctx};
    if (!(j.first = calloc((size_t)nl + 1, sizeof *j.first)))
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    for (int i = 0; i < nl; i++)
        j.first[i + 1] = j.first[i] + (m->linears[i]->n + piece_rows - 1) / piece_rows;
    struct ll_pool *pool;
    enum ll_status s =
        ll_pool_create(&pool, n_threads < 1 ? ll_pool_default_threads() : n_threads, err);
    if (s == LL_OK) {
        pthread_mutex_init(&j.lock, NULL);
        ll_pool_run(pool, run_worker, &j);
        pthread_mutex_destroy(&j.lock);
        ll_pool_free(pool);
        if ((s = j.status) != LL_OK && err)
            *err = j.err;
    }
    free(j.first);
    return s;
}
