/*
 * sampler.c: next-token choice from f32 logits, the logits processing before it (bias,
 * penalties over a sparse token-count table) and log-probabilities (see sampler.h).
 *
 * Candidates are ordered by (logit descending, id ascending), a total order, so every step is
 * reproducible. Min-p is a threshold on (l - max)/T >= ln(min_p), compared in double, so it
 * cuts exactly at the bound. Top-k is a quickselect over the ids. Top-p buckets the candidates by
 * d = (max - logit)/T (16 buckets per unit, monotone in the rank), finds the bucket where the
 * cumulative mass reaches top_p, keeps every bucket before it and sorts only that bucket to cut
 * it exactly: the kept set is exactly the sorted prefix Hugging Face keeps, at O(vocab) cost.
 * Weights e^((l - max)/T) are summed in double.
 * Called by the thread that owns the sampler; no allocation after sampler_init().
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "ops.h"

enum ll_status sampler_init(struct sampler *s, int vocab, struct ll_err *err)
{
    s->vocab = 0;
    s->idx = s->tmp = NULL;
    s->w = NULL;
    if (vocab < 1)
        return ll_err_set(err, LL_EINVAL, "sampler: vocabulary size %d", vocab);
    s->idx = malloc(sizeof(int32_t) * vocab);
    s->tmp = malloc(sizeof(int32_t) * vocab);
    s->w = malloc(sizeof(float) * vocab);
    if (!s->idx || !s->tmp || !s->w) {
        sampler_free(s);
        return ll_err_set(err, LL_ENOMEM, "sampler: out of memory for %d ids", vocab);
    }
    s->vocab = vocab;
    return LL_OK;
}

void sampler_free(struct sampler *s)
{
    free(s->idx);
    free(s->tmp);
    free(s->w);
    s->idx = s->tmp = NULL;
    s->w = NULL;
}

double sampler_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t h = ll_mix64(seed + LL_GOLDEN64);
    h = ll_mix64(h ^ (counter * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

static inline float key(const float *l, int32_t i) { return isnan(l[i]) ? -INFINITY : l[i]; }

/* a ranks before b. */
static inline int before(const float *l, int32_t a, int32_t b)
{
    float ka = key(l, a), kb = key(l, b);
    return ka > kb || (ka == kb && a < b);
}

static int cmp_rank(const void *pa, const void *pb, void *ctx)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return before(ctx, a, b) ? -1 : before(ctx, b, a) ? 1 : 0;
}

static void swap(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Reorder idx[0..n) so that idx[0..c) are the c best-ranked (in no particular order). */
static void select_top(int32_t *idx, int n, int c, const float *l)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* median of three to idx[hi] as the pivot */
        if (before(l, idx[mid], idx[lo]))
            swap(&idx[mid], &idx[lo]);
        if (before(l, idx[hi], idx[lo]))
            swap(&idx[hi], &idx[lo]);
        if (before(l, idx[mid], idx[hi]))
            swap(&idx[mid], &idx[hi]);
        int32_t pivot = idx[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (before(l, idx[i], pivot))
                swap(&idx[i], &idx[store++]);
        swap(&idx[store], &idx[hi]);
        if (store == c - 1 || store == c)
            return;
        if (store < c)
            lo = store + 1;
        else
            hi = store - 1;
    }
}

enum { NB_PER_UNIT = 16, NB = 64 * NB_PER_UNIT };

/* Bucket of candidate i: floor(16 · (max - logit)/T), the last bucket for everything beyond. */
static inline int bucket_of(const float *l, int32_t i, float mx, float inv_t)
{
    float d = (mx - key(l, i)) * inv_t * (float)NB_PER_UNIT;
    return d < (float)(NB - 1) ? (int)d : NB - 1;
}

/* Top-p over candidates idx[0..n) holding total weight z: reorders idx so that idx[0..kept)
 * is the kept set, the smallest best-ranked prefix whose weight reaches `need`; *z_kept gets
 * its weight. Returns kept (>= 1). */
static int nucleus(struct sampler *s, const float *l, float mx, float inv_t, int n, double need,
                   double *z_kept)
{
    double mass[NB] = {0};
    for (int j = 0; j < n; j++)
        mass[bucket_of(l, s->idx[j], mx, inv_t)] += s->w[s->idx[j]];
    double cum = 0.0;
    int bc = 0;
    while (bc < NB - 1 && cum + mass[bc] < need)
        cum += mass[bc++];
    /* Buckets before bc are kept whole (in their current order); bucket bc goes to tmp. */
    int kept = 0, nc = 0;
    for (int j = 0; j < n; j++) {
        int32_t id = s->idx[j];
        int b = bucket_of(l, id, mx, inv_t);
        if (b < bc)
            s->idx[kept++] = id;
        else if (b == bc)
            s->tmp[nc++] = id;
    }
    qsort_r(s->tmp, (size_t)nc, sizeof(int32_t), cmp_rank, (void *)l);
    for (int j = 0; j < nc && cum < need; j++) {
        cum += s->w[s->tmp[j]];
        s->idx[kept++] = s->tmp[j];
    }
    if (kept == 0) { /* need <= 0 cannot happen for top_p > 0, but keep the best */
        s->idx[kept++] = nc ? s->tmp[0] : s->idx[0];
        cum = s->w[s->idx[0]];
    }
    *z_kept = cum;
    return kept;
}

int32_t sampler_sample(struct sampler *s, const float *logits, const struct sampler_params *p,
                       uint64_t counter)
{
    int V = s->vocab;
    if (p->temperature <= 0.0f || p->top_k == 1)
        return ll_argmax(logits, V);

    int32_t best = ll_argmax(logits, V);
    float mx = logits[best];
    if (!isfinite(mx))
        return best;
    float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < V; i++)
        s->w[i] = isnan(logits[i]) ? -INFINITY : (logits[i] - mx) * inv_t;
    ll_exp(s->w, s->w, V);
    for (int i = 0; i < V; i++) {
        if (isnan(logits[i]) || logits[i] == -INFINITY)
            s->w[i] = 0.0f;
        s->idx[i] = i;
    }

    int n = V;
    if (p->min_p > 0.0f) { /* p_i / p_max = e^((l_i - max)/T) >= min_p */
        double bound = log((double)p->min_p), dmx = (double)mx, it = (double)inv_t;
        int kept = 0;
        for (int j = 0; j < n; j++) {
            int32_t id = s->idx[j];
            if (s->w[id] > 0.0f && ((double)logits[id] - dmx) * it >= bound)
                s->idx[kept++] = id;
        }
        n = kept; /* >= 1: the best id always passes */
    }
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->idx, n, p->top_k, logits);
        n = p->top_k;
    }
    double z = 0.0;
    for (int j = 0; j < n; j++)
        z += s->w[s->idx[j]];

    if (p->top_p > 0.0f && p->top_p < 1.0f)
        n = nucleus(s, logits, mx, inv_t, n, (double)p->top_p * z, &z);

    double target = sampler_uniform(p->seed, counter) * z, cum = 0.0;
    for (int j = 0; j < n; j++) {
        cum += s->w[s->idx[j]];
        if (cum > target)
            return s->idx[j];
    }
    /* Rounding left target at the very end: the last candidate with weight. */
    for (int j = n - 1; j >= 0; j--)
        if (s->w[s->idx[j]] > 0.0f)
            return s->idx[j];
    return best;
}

/* ---- log-probabilities ---- */

void sampler_logprobs(struct sampler *s, const float *logits, float temperature, int32_t chosen,
                      int n_top, struct sampler_logprobs *out)
{
    int V = s->vocab;
    if (n_top < 0)
        n_top = 0;
    if (n_top > SAMPLER_MAX_TOP_LOGPROBS)
        n_top = SAMPLER_MAX_TOP_LOGPROBS;
    if (n_top > V)
        n_top = V;
    /* the n_top best ids: insertion into a short sorted list, one pass */
    int cnt = 0;
    for (int32_t i = 0; i < V; i++) {
        if (cnt == n_top && (n_top == 0 || !before(logits, i, out->top_ids[cnt - 1])))
            continue;
        int at = cnt < n_top ? cnt++ : cnt - 1;
        while (at > 0 && before(logits, i, out->top_ids[at - 1])) {
            out->top_ids[at] = out->top_ids[at - 1];
            at--;
        }
        out->top_ids[at] = i;
    }
    out->n_top = n_top;

    int32_t best = ll_argmax(logits, V);
    float mx = logits[best];
    double inv_t = temperature > 0.0f ? 1.0 / (double)temperature : 1.0;
    double lse = 0.0; /* log Σ e^((l - max)/T) */
    if (isfinite(mx)) {
        float ft = (float)inv_t;
        for (int i = 0; i < V; i++)
            s->w[i] = isnan(logits[i]) ? -INFINITY : (logits[i] - mx) * ft;
        ll_exp(s->w, s->w, V);
        double z = 0.0;
        for (int i = 0; i < V; i++)
            if (!isnan(logits[i]) && logits[i] != -INFINITY)
                z += s->w[i];
        lse = log(z);
    }
    for (int j = -1; j < n_top; j++) {
        int32_t id = j < 0 ? chosen : out->top_ids[j];
        float k = key(logits, id);
        double lp;
        if (!isfinite(mx)) /* degenerate row: all the mass on the best key */
            lp = k == key(logits, best) ? 0.0 : -INFINITY;
        else if (k == -INFINITY)
            lp = -INFINITY;
        else
            lp = ((double)k - (double)mx) * inv_t - lse;
        if (lp > 0.0)
            lp = 0.0;
        if (j < 0)
            out->logprob = (float)lp;
        else
            out->top_logprobs[j] = (float)lp;
    }
}

/* ---- logits processing ---- */

void sampler_apply_bias(float *logits, const struct sampler_bias *b, int n)
{
    for (int i = 0; i < n; i++)
        logits[b[i].id] += b[i].bias;
}

enum ll_status token_counts_init(struct token_counts *c, int max_distinct, struct ll_err *err)
{
    memset(c, 0, sizeof *c);
    if (max_distinct < 1)
        max_distinct = 1;
    int cap = 16;
    while (cap < 2 * max_distinct)
        cap *= 2;
    c->key = malloc(sizeof(int32_t) * (size_t)cap);
    c->n_out = malloc(sizeof(int32_t) * (size_t)cap);
    c->in_prompt = malloc((size_t)cap);
    c->used = malloc(sizeof(int32_t) * (size_t)max_distinct);
    if (!c->key || !c->n_out || !c->in_prompt || !c->used) {
        token_counts_free(c);
        return ll_err_set(err, LL_ENOMEM, "sampler: out of memory for %d token counts",
                          max_distinct);
    }
    c->cap = cap;
    c->max = max_distinct;
    memset(c->key, 0xff, sizeof(int32_t) * (size_t)cap); /* -1: empty */
    return LL_OK;
}

void token_counts_free(struct token_counts *c)
{
    free(c->key);
    free(c->n_out);
    free(c->in_prompt);
    free(c->used);
    memset(c, 0, sizeof *c);
}

void token_counts_clear(struct token_counts *c)
{
    for (int k = 0; k < c->n_used; k++)
        c->key[c->used[k]] = -1;
    c->n_used = 0;
}

/* The slot holding id, or the empty slot where it would go. */
static int counts_slot(const struct token_counts *c, int32_t id)
{
    uint32_t h = (uint32_t)id * 2654435761u;
    int mask = c->cap - 1, at = (int)((h ^ (h >> 15)) & (uint32_t)mask);
    while (c->key[at] != -1 && c->key[at] != id)
        at = (at + 1) & mask;
    return at;
}

bool token_counts_add(struct token_counts *c, int32_t id, bool output)
{
    if (!c->cap)
        return false;
    int at = counts_slot(c, id);
    if (c->key[at] == -1) {
        if (c->n_used == c->max)
            return false;
        c->key[at] = id;
        c->n_out[at] = 0;
        c->in_prompt[at] = 0;
        c->used[c->n_used++] = at;
    }
    if (output)
        c->n_out[at]++;
    else
        c->in_prompt[at] = 1;
    return true;
}

int token_counts_get(const struct token_counts *c, int32_t id, bool *in_prompt)
{
    int at = c->cap ? counts_slot(c, id) : -1;
    bool found = at >= 0 && c->key[at] == id;
    if (in_prompt)
        *in_prompt = found && c->in_prompt[at];
    return found ? c->n_out[at] : 0;
}

bool sampler_penalties_active(const struct sampler_penalties *p)
{
    return (p->repetition > 0.0f && p->repetition != 1.0f) || p->presence != 0.0f ||
           p->frequency != 0.0f;
}

void sampler_apply_penalties(float *logits, const struct token_counts *c,
                             const struct sampler_penalties *p)
{
    float rep = p->repetition > 0.0f ? p->repetition : 1.0f;
    for (int k = 0; k < c->n_used; k++) {
        int at = c->used[k];
        int32_t id = c->key[at], n = c->n_out[at];
        float l = logits[id];
        if (rep != 1.0f)
            l = l > 0.0f ? l / rep : l * rep;
        if (n > 0)
            l -= p->presence + p->frequency * (float)n;
        logits[id] = l;
    }
}
