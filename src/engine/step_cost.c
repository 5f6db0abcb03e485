/*
 * step_cost.c: the running estimate of a step's cost (see step_cost.h).
 *
 * Bucket of n: 0 for n = 1, else floor(2·log2(n)) (2 → 2, 3 → 3, 4..5 → 4, 6..7 → 5, 8 → 6,
 * ...), so the buckets' n ranges are disjoint and ordered, and so are their averages. A
 * bucket's first observation is taken as is; later ones move it by BUCKET_ALPHA, so a bucket
 * follows its last ten or so steps. Called by the scheduler thread only.
 */
#include "step_cost.h"

#include <math.h>
#include <string.h>

#define BUCKET_ALPHA 0.25

static int bucket_of(int n)
{
    if (n <= 1)
        return 0;
    int b = (int)floor(2.0 * log2((double)n));
    return b < STEP_COST_BUCKETS ? b : STEP_COST_BUCKETS - 1;
}

void step_cost_reset(struct step_cost *c) { memset(c, 0, sizeof *c); }

void step_cost_observe(struct step_cost *c, int n, double seconds)
{
    if (n < 1 || !(seconds >= 0))
        return;
    int b = bucket_of(n);
    if (!c->seen[b]) {
        c->n[b] = n;
        c->t[b] = seconds;
    } else {
        c->n[b] += BUCKET_ALPHA * (n - c->n[b]);
        c->t[b] += BUCKET_ALPHA * (seconds - c->t[b]);
    }
    if (c->seen[b] < 1 << 30)
        c->seen[b]++;
}

double step_cost_step(const struct step_cost *c, int n)
{
    if (n <= 0)
        return 0;
    double n0 = 0, t0 = 0; /* the point below n: (0, 0) or a bucket */
    int last = -1;
    for (int b = 0; b < STEP_COST_BUCKETS; b++) {
        if (!c->seen[b])
            continue;
        if (c->n[b] >= n) {
            double f = (n - n0) / (c->n[b] - n0);
            double t = t0 + f * (c->t[b] - t0);
            return t > 0 ? t : 0;
        }
        n0 = c->n[b];
        t0 = c->t[b];
        last = b;
    }
    if (last < 0)
        return -1;
    return t0 * n / n0; /* more rows than ever seen: proportional */
}

double step_cost_row(const struct step_cost *c, int n)
{
    if (n < 0)
        n = 0;
    double now = step_cost_step(c, n);
    if (now < 0)
        return -1;
    int step = n / 4 > 1 ? n / 4 : 1;
    double m = (step_cost_step(c, n + step) - now) / step;
    return m > 0 ? m : 0;
}

double step_cost_prompt_time(double fd, double fref, double target_s, double min_share,
                             double max_share)
{
    double extra = target_s - fd, most = (1 + max_share) * (fref > fd ? fref : fd) - fd;
    if (extra > most)
        extra = most;
    if (extra < min_share * fd)
        extra = min_share * fd;
    return extra;
}

int step_cost_prompt_budget(const struct step_cost *c, int d, int d_ref, double target_s,
                            double min_share, double max_share, int cap)
{
    double fd = step_cost_step(c, d);
    if (fd < 0)
        return -1;
    double fref = d_ref > d ? step_cost_step(c, d_ref) : fd;
    double limit = fd + step_cost_prompt_time(fd, fref, target_s, min_share, max_share);
    if (cap <= 0 || step_cost_step(c, d + 1) > limit)
        return 0;
    int lo = 1, hi = cap; /* F(d + lo) fits; find the last c that does (F is near monotone) */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (step_cost_step(c, d + mid) <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
