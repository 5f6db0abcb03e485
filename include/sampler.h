/*
 * sampler.h: picks the next token from a row of f32 logits: greedy, temperature, top-k, top-p.
 *
 * Order (as Hugging Face generate): logits / temperature → keep the top_k largest → keep the
 * smallest prefix, in descending order, whose probability (renormalised over what top-k kept)
 * reaches top_p → draw from what is left in proportion to e^(logit/T).
 * Randomness is a pure function of (seed, counter) through a counter-based hash (the caller
 * passes the token's position as the counter), not a running generator: the same request gives
 * the same tokens whatever else ran before or beside it.
 * Ties in ordering go to the lower id. Top-p needs no full sort: a histogram of the candidates
 * by (max - logit)/T finds the bucket where the mass crosses top_p, and only that bucket is
 * sorted. A sampler holds vocab-sized scratch and belongs to one
 * thread at a time; sampler_sample() does not allocate.
 */
#ifndef LLAISYS_SAMPLER_H
#define LLAISYS_SAMPLER_H

#include <stdint.h>

#include "errors.h"

struct sampler_params {
    float temperature; /* <= 0: greedy (argmax) */
    int top_k;         /* <= 0: no top-k; 1: greedy */
    float top_p;       /* >= 1 (or <= 0): no top-p */
    uint64_t seed;
};

struct sampler {
    int vocab;
    int32_t *idx; /* (vocab) candidate ids */
    int32_t *tmp; /* (vocab) partition scratch */
    float *w;     /* (vocab) e^((logit - max)/T) */
};

/* Allocate scratch for a vocabulary of `vocab` ids. Returns LL_OK, LL_EINVAL (vocab < 1) or
 * LL_ENOMEM. sampler_free() releases it (safe on a zeroed struct). */
enum ll_status sampler_init(struct sampler *s, int vocab, struct ll_err *err);
void sampler_free(struct sampler *s);

/* The next token for logits (vocab), drawing with (p->seed, counter). Always returns an id in
 * 0..vocab-1 (NaN logits are never chosen unless all are NaN). */
int32_t sampler_sample(struct sampler *s, const float *logits, const struct sampler_params *p,
                       uint64_t counter);

/* The uniform number in [0, 1) that (seed, counter) gives (53 random bits). */
double sampler_uniform(uint64_t seed, uint64_t counter);

#endif
