/*
 * pool.c: the compute thread pool (see pool.h).
 *
 * Owns n_threads - 1 persistent workers; the thread calling ll_pool_run() is thread 0 and does
 * its share too. One op at a time: the caller publishes (fn, ctx), bumps the generation counter
 * and runs its own part; each worker notices the new generation, runs its part and decrements
 * `pending`; the caller returns once `pending` is zero. That is the one barrier per op.
 *
 * Waiting: both sides first spin on the shared word (a decode step issues a few hundred short ops
 * back to back, and a futex round trip would cost more than many of them), then sleep in
 * futex_wait on the same word, so an idle pool costs no CPU. A side that is about to sleep
 * announces it (`sleepers`, `caller_sleeping`) before re-checking the word; the other side
 * changes the word before reading the announcement, and both use sequentially consistent
 * atomics, so a wake-up is never lost (and futex_wait itself refuses to sleep on a stale value).
 *
 * The spin is yield-aware: each waiter keeps its own budget (struct spin), between SPIN_MIN and
 * SPIN_MAX seconds. A wait that ends within the budget keeps it (and doubles it back towards
 * SPIN_MAX); a wait that outlasts it halves it. On a quiet machine every barrier completes in
 * microseconds, so the budget stays at SPIN_MAX and ops chain without a system call. When
 * another process takes a core, the thread we wait for is descheduled for a whole time slice:
 * spinning then only burns the core it could have run on, so the budget collapses within a few
 * ops to SPIN_MIN, waiters sleep almost at once, and the scheduler can run the late thread (or
 * the neighbour) on the freed core.
 *
 * Ranges (ll_pool_run_ranges): each thread's share (its ll_split range, as a plain op would give
 * it) is cut into pieces from its start; the pieces still to run are one 64-bit word, front << 32
 * | back, on the share's own cache line. The owner takes the front piece and a thief the back
 * one, each by compare-and-swap, so a piece runs exactly once and the owner's word is contended
 * only once it has fallen behind.
 *
 * Fewer threads under contention (ll_pool_set_adaptive): even with the spin collapsed, a thread
 * descheduled in the middle of its part holds up the op until it runs again, so with another
 * process on one of two cores decode ran at about half its quiet speed, while one thread alone
 * keeps about two thirds of it (q4_0 tg64 on an AMD EPYC: 15.7 t/s on two threads, 22.6-26.2 on
 * one, 30-37 quiet). Every ADAPT_WINDOW seconds of ops the caller samples the CPUs
 * (cpu_avail.h) and ll_pool_adapt_rule moves the thread count by one. An op runs on its own
 * thread count nth (published with fn); a worker with ith >= nth takes part in that op only to
 * park: it counts down `pending` like the others, then sleeps on the `park` word, out of every
 * later op, until an op that wants more threads bumps `park` (and `resume_gen`, the generation
 * it was released at, tells it where to continue).
 *
 * Invariants: ll_pool_run is called by one thread at a time and never from inside fn (asserted);
 * fn/ctx/op_nth are written only while no worker is running them; the awake workers are always
 * 1 .. unparked - 1.
 */
#include "pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu_avail.h"
#include "log.h"
#include "util.h"

#define SPIN_MAX 200e-6 /* the spin budget on a quiet machine */
#define SPIN_MIN 4e-6   /* ... and under contention: about a futex round trip */
#define ADAPT_WINDOW 0.25 /* seconds between two looks at the CPUs (adaptive pools) */
#define QUOTA_WINDOW 2.0  /* seconds between two reads of the cgroup CPU quota (adaptive pools) */

/* One waiter's spin budget (each worker and the caller have their own: no sharing). */
struct spin {
    double budget; /* seconds, in [SPIN_MIN, SPIN_MAX] */
};

struct worker {
    struct ll_pool *pool;
    int ith;
    struct spin spin;
};

/* One thread's share of an ll_pool_run_ranges op: units [lo, hi), cut into pieces of `chunk`
 * units from lo (the last one shorter); pieces [front, back) are still to run. */
struct share {
    _Alignas(64) _Atomic uint64_t fb; /* front << 32 | back */
    int lo, hi;                       /* written before the op, read-only during it */
};

struct ll_pool {
    int n_threads;
    struct share *shares;   /* (n_threads) */
    pthread_t *threads;     /* (n_threads - 1) */
    struct worker *workers; /* (n_threads - 1) */
    int n_started;          /* workers actually started (for cleanup after a failed create) */

    ll_pool_fn fn; /* the op being run, published before `gen` is bumped */
    void *ctx;
    int op_nth;   /* ... and its thread count */
    bool stop;    /* set (then `gen` and `park` bumped) by ll_pool_free */
    bool running; /* inside ll_pool_run (reentrancy check) */
    int unparked; /* threads awake (the caller included): workers 1 .. unparked - 1 */

    /* the thread count of the next op, and its adaptation (the calling thread only) */
    int active;
    bool adaptive;
    bool have_sample;
    struct ll_cpu_sample sample;
    int strikes; /* windows in a row that asked for fewer threads */
    int limit;   /* adaptive: the most threads it runs (n_threads, or fewer under a CPU quota) */
    double quota_read; /* ll_now() of the last read of the quota */

    _Alignas(64) _Atomic uint32_t gen; /* futex word of the workers: one increment per op */
    _Atomic int sleepers;              /* workers asleep on `gen`, or about to be */
    _Alignas(64) _Atomic uint32_t pending; /* futex word of the caller: workers still running */
    _Atomic int caller_sleeping;
    struct spin caller_spin; /* the calling thread's budget (one caller at a time) */
    _Alignas(64) _Atomic uint32_t park; /* futex word of parked workers: bumped to release */
    _Atomic uint32_t resume_gen;        /* the generation released workers continue from */
};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    /* Returns at once if *word != expected; spurious returns are fine, callers re-check. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Spin while *word == value (worker: no new op yet) or, with until_zero, while *word != 0
 * (caller: workers still busy), for at most the budget of sp, which this wait then adapts.
 * Returns the last value seen (still the waited-on condition: the caller should sleep). */
static uint32_t spin_on(_Atomic uint32_t *word, uint32_t value, bool until_zero, struct spin *sp)
{
    double until = 0;
    for (unsigned i = 1;; i++) {
        uint32_t v = atomic_load_explicit(word, memory_order_acquire);
        if (until_zero ? v == 0 : v != value) {
            if (sp->budget < SPIN_MAX) /* waits are short again: spin longer next time */
                sp->budget = sp->budget * 2 < SPIN_MAX ? sp->budget * 2 : SPIN_MAX;
            return v;
        }
        __builtin_ia32_pause();
        if ((i & 63) == 0) {
            double now = ll_now();
            if (until == 0) {
                until = now + sp->budget;
            } else if (now > until) {
                /* the other side is late (descheduled, or simply idle): spin less */
                sp->budget = sp->budget / 2 > SPIN_MIN ? sp->budget / 2 : SPIN_MIN;
                return v;
            }
        }
    }
}

static void *worker_main(void *arg)
{
    struct worker *self = arg;
    struct ll_pool *pool = self->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = spin_on(&pool->gen, seen, false, &self->spin);
        while (g == seen) {
            atomic_fetch_add(&pool->sleepers, 1);
            g = atomic_load(&pool->gen);
            if (g == seen)
                futex_wait(&pool->gen, seen);
            atomic_fetch_sub(&pool->sleepers, 1);
            g = atomic_load(&pool->gen);
        }
        seen = g;
        if (pool->stop)
            return NULL;
        const int nth = pool->op_nth;
        const bool park = self->ith >= nth;
        /* read before counting down: no release can come before this op ends */
        const uint32_t parked_at = park ? atomic_load(&pool->park) : 0;
        if (!park)
            pool->fn(pool->ctx, self->ith, nth);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleeping))
            futex_wake(&pool->pending, 1);
        if (park) {
            while (atomic_load(&pool->park) == parked_at)
                futex_wait(&pool->park, parked_at);
            if (pool->stop)
                return NULL;
            seen = atomic_load(&pool->resume_gen);
        }
    }
}

/* Publish a new generation and wake sleeping workers. */
static void pool_kick(struct ll_pool *pool)
{
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleepers) > 0)
        futex_wake(&pool->gen, INT_MAX);
}

static void pool_stop(struct ll_pool *pool)
{
    pool->stop = true;
    atomic_fetch_add(&pool->park, 1);
    futex_wake(&pool->park, INT_MAX);
    pool_kick(pool);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->threads[i], NULL);
}

static int default_threads;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void find_default_threads(void)
{
    int n = ll_cpu_cores_usable();
    default_threads = n < LL_POOL_MAX_THREADS ? n : LL_POOL_MAX_THREADS;
}

int ll_pool_default_threads(void)
{
    pthread_once(&default_once, find_default_threads);
    return default_threads;
}

enum ll_status ll_pool_create(struct ll_pool **out, int n_threads, struct ll_err *err)
{
    *out = NULL;
    if (n_threads < 1)
        return ll_err_set(err, LL_EINVAL, "thread pool: %d threads requested (need at least 1)",
                          n_threads);
    struct ll_pool *pool = aligned_alloc(64, sizeof *pool);
    if (!pool)
        return ll_err_set(err, LL_ENOMEM, "thread pool: out of memory");
    *pool = (struct ll_pool){.n_threads = n_threads, .unparked = n_threads, .active = n_threads,
                             .caller_spin = {SPIN_MAX}};
    int nw = n_threads - 1;
    if (nw > 0) {
        pool->threads = calloc((size_t)nw, sizeof *pool->threads);
        pool->workers = calloc((size_t)nw, sizeof *pool->workers);
        pool->shares = aligned_alloc(64, sizeof *pool->shares * (size_t)n_threads);
        if (!pool->threads || !pool->workers || !pool->shares) {
            ll_pool_free(pool);
            return ll_err_set(err, LL_ENOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < nw; i++) {
        pool->workers[i] = (struct worker){.pool = pool, .ith = i + 1, .spin = {SPIN_MAX}};
        int rc = pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]);
        if (rc) {
            ll_pool_free(pool);
            return ll_err_set(err, LL_ENOMEM, "thread pool: cannot start thread %d of %d (error %d)",
                              i + 1, n_threads, rc);
        }
        pool->n_started++;
    }
    *out = pool;
    return LL_OK;
}

int ll_pool_adapt_rule(int cur, int n, int n_cpus, double others, int *strikes)
{
    if (cur > 1 && cur + others > n_cpus + LL_POOL_SHRINK_OVER) {
        if (++*strikes < LL_POOL_SHRINK_WINDOWS)
            return cur;
        *strikes = 0;
        return cur - 1;
    }
    *strikes = 0;
    if (cur < n && cur + 1 + others <= n_cpus + LL_POOL_GROW_OVER)
        return cur + 1;
    return cur;
}

/* An adaptive pool's cap: threads beyond the cgroup's CPU quota (rounded up) only make every op
 * wait for the throttled one (q4_0 tg32 under a 1-core quota on an AMD EPYC: 16.3-17.1 t/s on 2
 * threads, 25.2-25.5 on 1). Read when the pool turns adaptive and every QUOTA_WINDOW after, so a
 * quota changed while running (`docker update --cpus`) is followed both ways. */
static void pool_read_quota(struct ll_pool *pool, double now)
{
    double q = ll_cpu_quota();
    int cap = ll_cpu_quota_threads(q);
    int limit = cap > 0 && cap < pool->n_threads ? cap : pool->n_threads;
    pool->quota_read = now;
    if (limit != pool->limit) {
        if (cap > 0)
            log_msg(LOG_INFO, "compute pool: at most %d of %d threads (the cgroup's CPU quota is "
                              "%.2f cores)", limit, pool->n_threads, q);
        else
            log_msg(LOG_INFO, "compute pool: at most %d of %d threads (no cgroup CPU quota)",
                    limit, pool->n_threads);
        pool->limit = limit;
    }
    if (pool->active > pool->limit)
        pool->active = pool->limit;
}

/* An adaptive pool's look at the CPUs, at most once a window: the thread count for the next op. */
static void pool_adapt(struct ll_pool *pool)
{
    double now = ll_now();
    if (pool->have_sample && now - pool->sample.wall < ADAPT_WINDOW)
        return;
    if (now - pool->quota_read >= QUOTA_WINDOW)
        pool_read_quota(pool, now);
    struct ll_cpu_sample s;
    if (!ll_cpu_sample(&s)) {
        log_msg(LOG_WARN, "compute pool: cannot read /proc/stat; running all %d threads whatever "
                          "else runs on the cores", pool->n_threads);
        pool->adaptive = false;
        pool->active = pool->n_threads;
        return;
    }
    double idle, others;
    if (pool->have_sample && ll_cpu_between(&pool->sample, &s, &idle, &others)) {
        int next = ll_pool_adapt_rule(pool->active, pool->limit, s.n_cpus, others,
                                      &pool->strikes);
        if (next != pool->active)
            log_msg(LOG_INFO, "compute pool: %d of %d threads (other processes used %.2f cores, "
                              "%.2f idle, over %.2f s)",
                    next, pool->n_threads, others, idle, s.wall - pool->sample.wall);
        pool->active = next;
    }
    pool->sample = s;
    pool->have_sample = true;
}

/* Run fn on threads 0 .. nth - 1 (1 <= nth <= n_threads) and wait; workers beyond nth park. */
static void pool_run(struct ll_pool *pool, ll_pool_fn fn, void *ctx, int nth)
{
    LL_ASSERT(!pool->running);
    if (nth == 1 && pool->unparked == 1) { /* every worker parked: nothing to wake or wait for */
        pool->running = true;
        fn(ctx, 0, 1);
        pool->running = false;
        return;
    }
    pool->running = true;
    if (nth > pool->unparked) {
        /* release every parked worker (this op parks again any beyond nth) */
        atomic_store(&pool->resume_gen, atomic_load(&pool->gen));
        atomic_fetch_add(&pool->park, 1);
        futex_wake(&pool->park, INT_MAX);
        pool->unparked = pool->n_threads;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->op_nth = nth;
    atomic_store(&pool->pending, (uint32_t)(pool->unparked - 1));
    pool_kick(pool);

    fn(ctx, 0, nth);

    uint32_t p = spin_on(&pool->pending, 0, true, &pool->caller_spin);
    while (p != 0) {
        atomic_store(&pool->caller_sleeping, 1);
        p = atomic_load(&pool->pending);
        if (p != 0)
            futex_wait(&pool->pending, p);
        atomic_store(&pool->caller_sleeping, 0);
        p = atomic_load(&pool->pending);
    }
    pool->unparked = nth;
    pool->running = false;
}

/* The thread count of the next op (after an adaptive pool's look at the CPUs). */
static int pool_next_nth(struct ll_pool *pool)
{
    if (pool->adaptive)
        pool_adapt(pool);
    return pool->active;
}

void ll_pool_run(struct ll_pool *pool, ll_pool_fn fn, void *ctx)
{
    if (!pool || pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool_run(pool, fn, ctx, pool_next_nth(pool));
}

void ll_pool_set_adaptive(struct ll_pool *pool, bool on)
{
    if (!pool || pool->n_threads == 1)
        return;
    pool->adaptive = on;
    pool->have_sample = false;
    pool->strikes = 0;
    pool->limit = pool->n_threads;
    if (!on) {
        pool->active = pool->n_threads;
        return;
    }
    pool_read_quota(pool, ll_now());
}

int ll_pool_limit(const struct ll_pool *pool)
{
    return !pool ? 1 : pool->adaptive ? pool->limit : pool->n_threads;
}

bool ll_pool_adaptive(const struct ll_pool *pool)
{
    return pool && pool->adaptive;
}

void ll_pool_set_active(struct ll_pool *pool, int n)
{
    if (!pool)
        return;
    pool->active = n < 1 ? 1 : n > pool->n_threads ? pool->n_threads : n;
}

int ll_pool_active(const struct ll_pool *pool)
{
    return pool ? pool->active : 1;
}

/* ---- ranges ---- */

#define CHUNKS_PER_THREAD 8

struct ranges {
    struct share *shares;
    int chunk; /* units a piece */
    ll_pool_range_fn fn;
    void *ctx;
};

/* Take the front (owner) or the back (thief) piece of a share; false when it is empty. */
static bool share_take(struct share *sh, bool front, int chunk, int *lo, int *hi)
{
    uint64_t fb = atomic_load_explicit(&sh->fb, memory_order_relaxed);
    for (;;) {
        uint32_t f = (uint32_t)(fb >> 32), b = (uint32_t)fb;
        if (f >= b)
            return false;
        uint64_t next = front ? (uint64_t)(f + 1) << 32 | b : (uint64_t)f << 32 | (b - 1);
        if (atomic_compare_exchange_weak_explicit(&sh->fb, &fb, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            int piece = (int)(front ? f : b - 1);
            *lo = sh->lo + piece * chunk;
            *hi = *lo + chunk < sh->hi ? *lo + chunk : sh->hi;
            return true;
        }
    }
}

static void ranges_worker(void *ctx, int ith, int nth)
{
    const struct ranges *r = ctx;
    int lo, hi;
    while (share_take(&r->shares[ith], true, r->chunk, &lo, &hi))
        r->fn(r->ctx, lo, hi, ith);
    for (int k = 1; k < nth; k++) {
        struct share *victim = &r->shares[(ith + k) % nth];
        while (share_take(victim, false, r->chunk, &lo, &hi))
            r->fn(r->ctx, lo, hi, ith);
    }
}

void ll_pool_run_ranges(struct ll_pool *pool, int n, int grain, ll_pool_range_fn fn, void *ctx)
{
    LL_ASSERT(n >= 0 && grain >= 1);
    if (n == 0)
        return;
    if (!pool || pool->n_threads == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    int nth = pool_next_nth(pool), widest = (n + nth - 1) / nth;
    int chunk = (widest + CHUNKS_PER_THREAD - 1) / CHUNKS_PER_THREAD;
    chunk = (chunk + grain - 1) / grain * grain;
    struct ranges r = {pool->shares, chunk, fn, ctx};
    for (int t = 0; t < nth; t++) {
        struct share *sh = &pool->shares[t];
        ll_split(n, t, nth, &sh->lo, &sh->hi);
        uint32_t pieces = (uint32_t)((sh->hi - sh->lo + chunk - 1) / chunk);
        atomic_store_explicit(&sh->fb, pieces, memory_order_relaxed);
    }
    /* published to the workers by pool_run's generation bump (sequentially consistent) */
    pool_run(pool, ranges_worker, &r, nth);
}

int ll_pool_size(const struct ll_pool *pool)
{
    return pool ? pool->n_threads : 1;
}

void ll_pool_free(struct ll_pool *pool)
{
    if (!pool)
        return;
    if (pool->n_started > 0)
        pool_stop(pool);
    free(pool->threads);
    free(pool->workers);
    free(pool->shares);
    free(pool);
}
