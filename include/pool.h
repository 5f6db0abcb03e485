/*
 * pool.h: the compute thread pool, the one component that owns the cores.
 *
 * ll_pool_run() runs fn(ctx, ith, nth) on every worker (ith = 0..nth-1, the calling thread is
 * ith 0) and returns when all have finished: one barrier per op. Row-wise ops split rows by
 * (ith, nth); the matmuls run their output columns through ll_pool_run_ranges, which lets a
 * thread that is done take over the rest of a late one. Called from one thread at a time (the
 * scheduler / CLI thread); not reentrant: fn must not call ll_pool_run on the same pool
 * (asserted), but may run nested work with a NULL pool.
 *
 * Cost: on a quiet machine waiters spin for up to ~200 us, then sleep on a futex, so back-to-back
 * ops (a decode step issues a few hundred) cost well under a microsecond each, and an idle pool
 * uses no CPU. When waits keep outlasting the spin (another process holds a core and one of our
 * threads is descheduled), each waiter's spin shrinks to a few microseconds, so it sleeps and
 * frees its core for the late thread (pool.c explains the rule). An adaptive pool
 * (ll_pool_set_adaptive; the model runtimes make theirs adaptive unless told --fixed-threads)
 * also runs its ops on fewer threads while other processes keep the cores busy, and on all of
 * them again once they fit (ll_pool_adapt_rule). Results never depend on the thread count
 * (every op splits its work so that each output is computed the same way by whichever thread).
 */
#ifndef LLAISYS_POOL_H
#define LLAISYS_POOL_H

#include <stdbool.h>

#include "errors.h"

/* Compute threads when nobody says how many (the engine options, the runtime and the loaders use
 * it): the cores this process may use (cpu_avail.h's ll_cpu_cores_usable, read once), at most
 * LL_POOL_MAX_THREADS. */
#define LL_POOL_MAX_THREADS 256
int ll_pool_default_threads(void);

struct ll_pool;

typedef void (*ll_pool_fn)(void *ctx, int ith, int nth);

/* Start a pool of n_threads (>= 1; the caller counts as one, so n_threads - 1 workers start).
 * Returns LL_OK, LL_EINVAL (n_threads < 1) or LL_ENOMEM (memory or thread creation); *out is
 * NULL on error. */
enum ll_status ll_pool_create(struct ll_pool **out, int n_threads, struct ll_err *err);
/* Run fn on all threads and wait for all of them. pool may be NULL: runs fn(ctx, 0, 1). */
void ll_pool_run(struct ll_pool *pool, ll_pool_fn fn, void *ctx);
/* Run fn over units [0, n) on all threads, each unit exactly once, and wait (n >= 0, grain >= 1;
 * with a NULL or one-thread pool: fn(ctx, 0, n, 0)). Thread ith owns its ll_split share of the
 * units, cut from its start into pieces of a multiple of grain units (about 8 pieces a share; the
 * last one shorter; grain >= n leaves each share whole, a static split), and calls
 * fn(ctx, lo, hi, ith) on them front to back (ith: the thread's index in the op, below
 * ll_pool_size, for scratch of its own); a thread done with its own share then takes the
 * others' remaining pieces from the back. So each thread reads long
 * contiguous runs (what the prefetchers follow), a kernel's panels stay whole when grain is a
 * multiple of them, and a thread that falls behind (descheduled by another process, or given
 * less memory bandwidth) hands its tail to the others instead of holding up the op. fn must
 * compute a unit the same way whichever thread runs it. */
typedef void (*ll_pool_range_fn)(void *ctx, int lo, int hi, int ith);
void ll_pool_run_ranges(struct ll_pool *pool, int n, int grain, ll_pool_range_fn fn, void *ctx);

/* The grain with which a matmul runs its n output units (both GEMMs use this one policy): a
 * single row of x (decode) streams unit by unit, so grain 1; up to LL_POOL_PIECES_MAX_ROWS rows,
 * pieces of whole panels (panel: a multiple of every variant's tile width, in units); larger
 * batches keep each share whole (grain n), because a kernel walks its share once per block of x
 * that fits in L2 and pieces would switch between those blocks (q4_0 pp512 ran 0.88-1.00x with
 * pieces on an AMD EPYC). */
#define LL_POOL_PIECES_MAX_ROWS 16
static inline int ll_pool_matmul_grain(int rows, int n, int panel)
{
    return rows == 1 ? 1 : rows <= LL_POOL_PIECES_MAX_ROWS ? panel : n;
}
/* Number of threads (1 for NULL). */
int ll_pool_size(const struct ll_pool *pool);

/* Adaptive thread count (off when a pool is created). On: every quarter second of ops the pool
 * measures the cores of its affinity mask (cpu_avail.h) and moves the number of threads its next
 * ops run on by ll_pool_adapt_rule; the extra workers sleep meanwhile. It never runs more threads
 * than its cgroup's CPU quota gives work (rounded up; read when turned on and every two seconds
 * of ops after, cpu_avail.h). Off: all threads again. */
void ll_pool_set_adaptive(struct ll_pool *pool, bool on);
bool ll_pool_adaptive(const struct ll_pool *pool);
/* The most threads the next ops may run on: the size, or for an adaptive pool fewer under a CPU
 * quota (1 for NULL). */
int ll_pool_limit(const struct ll_pool *pool);
/* The pool's threads and the other processes' use of the n_cpus cores it may run on: past
 * n_cpus + LL_POOL_SHRINK_OVER cores (our cur threads counted as one core each, busy through an
 * op) a thread is dropped, after LL_POOL_SHRINK_WINDOWS such windows in a row; one is added
 * back when cur + 1 of ours and the others fit in n_cpus + LL_POOL_GROW_OVER. So a pool with
 * spare cores stays whole, each step settles (at cur - 1 the sum fits again), and the gap
 * between the two and the windows in a row keep tick noise (about a tenth of a core over a
 * window) from moving it. */
#define LL_POOL_SHRINK_OVER 0.5
#define LL_POOL_GROW_OVER 0.2
#define LL_POOL_SHRINK_WINDOWS 2
/* The thread count after a window in which other processes used `others` cores, from cur
 * (1 <= cur <= n); *strikes counts the windows in a row that asked for fewer (start it at 0). */
int ll_pool_adapt_rule(int cur, int n, int n_cpus, double others, int *strikes);
/* Run the next ops on n threads (clamped to 1 .. size; an adaptive pool moves on from there). */
void ll_pool_set_active(struct ll_pool *pool, int n);
/* The number of threads the next op runs on (1 for NULL). */
int ll_pool_active(const struct ll_pool *pool);
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
