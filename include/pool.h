/*
 * pool.h: the compute thread pool, the one component that owns the cores.
 *
 * ll_pool_run() runs fn(ctx, ith, nth) on every worker (ith = 0..nth-1, the calling thread is
 * ith 0) and returns when all have finished: one barrier per op. Kernels split output rows by
 * (ith, nth). Called from one thread at a time (the scheduler / CLI thread); not reentrant: fn
 * must not call ll_pool_run on the same pool (asserted), but may run nested work with a NULL pool.
 *
 * Cost: on a quiet machine waiters spin for up to ~200 us, then sleep on a futex, so back-to-back
 * ops (a decode step issues a few hundred) cost well under a microsecond each, and an idle pool
 * uses no CPU. When waits keep outlasting the spin (another process holds a core and one of our
 * threads is descheduled), each waiter's spin shrinks to a few microseconds, so it sleeps and
 * frees its core for the late thread (pool.c explains the rule).
 */
#ifndef LLAISYS_POOL_H
#define LLAISYS_POOL_H

/* Compute threads when nobody says how many (the engine options and the runtime use it). */
#define LL_POOL_DEFAULT_THREADS 2

#include "errors.h"

struct ll_pool;

typedef void (*ll_pool_fn)(void *ctx, int ith, int nth);

/* Start a pool of n_threads (>= 1; the caller counts as one, so n_threads - 1 workers start).
 * Returns LL_OK, LL_EINVAL (n_threads < 1) or LL_ENOMEM (memory or thread creation); *out is
 * NULL on error. */
enum ll_status ll_pool_create(struct ll_pool **out, int n_threads, struct ll_err *err);
/* Run fn on all threads and wait for all of them. pool may be NULL: runs fn(ctx, 0, 1). */
void ll_pool_run(struct ll_pool *pool, ll_pool_fn fn, void *ctx);
/* Number of threads (1 for NULL). */
int ll_pool_size(const struct ll_pool *pool);
/* Stop and join the workers and free the pool; NULL is a no-op. Not during ll_pool_run. */
void ll_pool_free(struct ll_pool *pool);

/* Split n items into nth nearly equal contiguous ranges; range of thread ith is [*lo, *hi). */
static inline void ll_split(int n, int ith, int nth, int *lo, int *hi)
{
    long long a = (long long)n * ith / nth, b = (long long)n * (ith + 1) / nth;
    *lo = (int)a;
    *hi = (int)b;
}

#endif
