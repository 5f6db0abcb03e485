/*
 * spec.h: speculative decoding without a second model: the n-gram drafter (prompt lookup) and
 * the per-request policy that decides how many drafted tokens are worth verifying.
 *
 * Drafting: the last g tokens of the sequence (prompt and output; g from SPEC_NGRAM_MAX down
 * to SPEC_NGRAM_MIN) are looked for earlier in the sequence, latest occurrence first; the
 * tokens that followed it are the draft. When the continuation reaches the end of the
 * sequence it goes on with the draft itself (a repeating pattern of period P drafts the next
 * tokens of the pattern), so a draft of any length exists once a match does.
 *
 * Policy: each request keeps a decayed count of drafted tokens tested and accepted; q is the
 * estimated chance that the next drafted token is accepted (prior 1/2). Drafting k tokens
 * costs k more rows in the step; the j-th yields a token with probability q^j. With theta the
 * marginal cost of a row over the cost of a produced token (scheduler.c, from step_cost.h),
 * the draft is the largest k with q^k >= theta. When even one token is not worth it the
 * request backs off: it drafts nothing for 1, 2, 4, ... SPEC_BACKOFF_MAX steps (steps in which
 * a match existed), then probes with one token; an accepted token resets the back-off.
 *
 * Verification (engine.c) keeps outputs exact: a drafted token is accepted only when it equals
 * the token the sampler draws at its position from that position's processed logits.
 * Pure functions on caller-owned state; the scheduler thread's.
 */
#ifndef LLAISYS_SPEC_H
#define LLAISYS_SPEC_H

#include <stdint.h>

#define SPEC_NGRAM_MAX 3
#define SPEC_NGRAM_MIN 2
#define SPEC_BACKOFF_MAX 64

/* A request's drafting record. Zeroed: nothing drafted yet. */
struct spec_state {
    double hits, tests;   /* decayed counts of accepted and tested draft tokens */
    int backoff, skip;    /* back-off length (0: none) and steps of it still to skip */
    int drafted, accepted; /* totals (usage) */
};

/* Up to k (>= 1) draft tokens continuing tok[0..n) into out (k entries). Returns k when the
 * last g tokens occur earlier for some g in SPEC_NGRAM_MIN..SPEC_NGRAM_MAX, else 0. */
int spec_ngram_draft(const int32_t *tok, int n, int k, int32_t *out);

/* q: the estimated chance that the next drafted token is accepted. */
double spec_acceptance(const struct spec_state *s);

/* How many of a draft of up to max_k tokens to verify this step, given theta (>= 0): the
 * largest k with q^k >= theta; when none, 0 during a back-off (counting the step) and 1 (a
 * probe) after it. */
int spec_plan(struct spec_state *s, double theta, int max_k);

/* Record a verification: `drafted` tokens in the batch, the first `accepted` of them equal to
 * the sampled tokens (the next one, if any, was not; drafts cut short by the request's finish
 * count only up to it). Updates q and the back-off. */
void spec_update(struct spec_state *s, int drafted, int accepted);

#endif
