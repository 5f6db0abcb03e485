/*
 * step_cost.c: the running estimate of a step's cost (see step_cost.h).
 *
 * Bucket of d: 0 for d = 1, else floor(2·log2(d)) (2 → 2, 3 → 3, 4..5 → 4, 6..7 → 5, 8 → 6,
 * ...), so the buckets' d ranges are disjoint and ordered, and so are their averages. A
 * bucket's first observation is taken as is; later ones move it by BUCKET_ALPHA. The prompt
 * sums decay by PROMPT_DECAY per observation, so p follows the last ten or so chunk steps.
 * Called by the scheduler thread only.
 */
#include "step_cost.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#define BUCKET_ALPHA 0.25
#define PROMPT_DECAY 0.8

static int bucket_of(int d)
{
    if (d <= 1)
        return 0;
    int b = (int)floor(2.0 * log2((double)d));
    return b < STEP_COST_BUCKETS ? b : STEP_COST_BUCKETS - 1;
}

void step_cost_reset(struct step_cost *c) { memset(c, 0, sizeof *c); }

double step_cost_decode(const struct step_cost *c, int d)
{
    if (d <= 0)
        return 0;
    int lo = -1, hi = -1;
    for (int b = 0; b < STEP_COST_BUCKETS; b++) {
        if (!c->seen[b])
            continue;
        if (c->n[b] <= d)
            lo = b;
        else if (hi < 0)
            hi = b;
    }
    if (lo < 0 && hi < 0)
        return -1;
    if (lo < 0)
        return c->t[hi]; /* fewer rows than ever seen: no dearer than the smallest shape */
    if (hi < 0)
        return c->t[lo] * d / c->n[lo]; /* more rows than ever seen: proportional */
    double f = (d - c->n[lo]) / (c->n[hi] - c->n[lo]);
    double t = c->t[lo] + f * (c->t[hi] - c->t[lo]);
    return t > 0 ? t : 0;
}

double step_cost_prompt_token(const struct step_cost *c)
{
    if (c->p_tokens <= 0)
        return -1;
    double p = c->p_sum / c->p_tokens;
    return p > 1e-9 ? p : 1e-9;
}

double step_cost_row(const struct step_cost *c, int d)
{
    if (d < 1)
        d = 1;
    double now = step_cost_decode(c, d);
    if (now < 0)
        return -1;
    bool above = false;
    for (int b = 0; b < STEP_COST_BUCKETS; b++)
        above |= c->seen[b] && c->n[b] > d;
    if (above) {
        int step = d / 4 > 1 ? d / 4 : 1;
        double m = (step_cost_decode(c, d + step) - now) / step;
        return m > 0 ? m : 0;
    }
    double avg = now / d, p = step_cost_prompt_token(c);
    return p >= 0 && p < avg ? p : avg;
}

void step_cost_observe(struct step_cost *c, int d, int prompt, double seconds)
{
    if (d + prompt < 1 || !(seconds >= 0))
        return;
    if (d == 0 && prompt == 1) /* one row that wants logits: a decode step in all but name */
        d = 1, prompt = 0;
    if (prompt == 0) {
        int b = bucket_of(d);
        if (!c->seen[b]) {
            c->n[b] = d;
            c->t[b] = seconds;
        } else {
            c->n[b] += BUCKET_ALPHA * (d - c->n[b]);
            c->t[b] += BUCKET_ALPHA * (seconds - c->t[b]);
        }
        if (c->seen[b] < INT_MAX)
            c->seen[b]++;
        return;
    }
    /* The prompt rows' share: what the step took beyond its decode rows (a prompt-only step:
     * beyond a one-row step, its first row standing in for that row). */
    double base = step_cost_decode(c, d > 0 ? d : 1);
    int tokens = prompt;
    if (base < 0)
        base = 0;
    else if (d == 0)
        tokens = prompt - 1;
    c->p_sum = PROMPT_DECAY * c->p_sum + (seconds - base);
    c->p_tokens = PROMPT_DECAY * c->p_tokens + tokens;
}

int step_cost_prompt_budget(const struct step_cost *c, int d, double target_s, double share)
{
    double dd = step_cost_decode(c, d), p = step_cost_prompt_token(c);
    if (dd < 0 || p < 0)
        return -1;
    double room = target_s - dd, floor_s = share * dd;
    if (room < floor_s)
        room = floor_s;
    double n = floor(room / p);
    return n >= INT_MAX ? INT_MAX : n > 0 ? (int)n : 0;
}
