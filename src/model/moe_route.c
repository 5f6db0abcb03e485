/*
 * moe_route.c: a mixture-of-experts layer's routing (see moe_route.h). Runs on the thread that
 * runs the forward pass; a few multiply-adds per (token, expert), nothing to split.
 */
#include "moe_route.h"

#include <math.h>

#include "util.h"

/* Whether probability a of expert ia ranks above b of expert ib (NaN last, ties to the lower
 * index). */
static bool ranks_above(float a, int ia, float b, int ib)
{
    if (isnan(b))
        return !isnan(a) || ia < ib;
    if (isnan(a))
        return false;
    return a > b || (a == b && ia < ib);
}

void moe_route(const float *logits, int n_tokens, int n_experts, int k, bool norm, int32_t *off,
               int32_t *tok, float *w, int32_t *sel)
{
    float p[MOE_MAX_EXPERTS]; /* the picked experts' probabilities, best first */
    float ex[MOE_MAX_EXPERTS]; /* a token's exp(logit - max) */
    LL_ASSERT(n_experts >= 1 && n_experts <= MOE_MAX_EXPERTS && k >= 1 && k <= n_experts);
    for (int e = 0; e <= n_experts; e++)
        off[e] = 0;
    for (int t = 0; t < n_tokens; t++) {
        const float *l = logits + (size_t)t * n_experts;
        float mx = -INFINITY, sum = 0;
        for (int e = 0; e < n_experts; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < n_experts; e++)
            sum += ex[e] = expf(l[e] - mx);
        int32_t *s = sel + (size_t)t * k;
        int got = 0;
        for (int e = 0; e < n_experts; e++) {
            float pe = ex[e] / sum;
            if (got == k && !ranks_above(pe, e, p[k - 1], s[k - 1]))
                continue;
            int j = got < k ? got++ : k - 1; /* insert, dropping the last when full */
            while (j > 0 && ranks_above(pe, e, p[j - 1], s[j - 1])) {
                p[j] = p[j - 1], s[j] = s[j - 1];
                j--;
            }
            p[j] = pe, s[j] = e;
        }
        float ps = 0;
        for (int j = 0; j < k; j++)
            ps += p[j];
        for (int j = 0; j < k; j++) {
            w[(size_t)t * k + j] = norm ? p[j] / ps : p[j];
            off[s[j] + 1]++;
        }
    }
    for (int e = 0; e < n_experts; e++)
        off[e + 1] += off[e];
    /* Place the pairs in token order within each expert: a counting sort. The weights move with
     * them, so they go through a second array: w holds them by (token, rank) until placed. */
    int32_t fill[MOE_MAX_EXPERTS];
    for (int e = 0; e < n_experts; e++)
        fill[e] = off[e];
    for (int t = 0; t < n_tokens; t++)
        for (int j = 0; j < k; j++) {
            int e = sel[(size_t)t * k + j];
            tok[fill[e]] = t;
            sel[(size_t)t * k + j] = fill[e]++; /* where the pair went */
        }
    /* move the weights to their places: w[dst] ← w[src], a permutation, done through its cycles
     * (sel[i] is pair i's destination; marked done by -1 - dst) */
    for (int i = 0; i < n_tokens * k; i++) {
        if (sel[i] < 0)
            continue;
        float carry = w[i];
        int at = i;
        while (sel[at] >= 0) {
            int dst = sel[at];
            sel[at] = -1 - dst;
            float keep = w[dst];
            w[dst] = carry;
            carry = keep;
            at = dst;
        }
    }
}
