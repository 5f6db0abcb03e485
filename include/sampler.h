/*
 * sampler.h: picks the next token from a row of f32 logits, and everything applied to the row
 * before: logit bias, repetition / presence / frequency penalties, then temperature, min-p,
 * top-k, top-p; and the log-probabilities a client may ask for.
 *
 * Order (as vLLM): logit_bias is added to the raw logits (sampler_apply_bias); the penalties
 * apply to the biased logits (sampler_apply_penalties): repetition to every id seen in the
 * prompt or the output (l > 0: l / r, else l · r), presence and frequency to ids of the output
 * (l -= presence · [count > 0] + frequency · count). Then sampler_sample: logits / temperature
 * → drop ids whose probability is below min_p × the largest probability → keep the top_k
 * largest → keep the smallest prefix, in descending order, whose probability (renormalised over
 * what is left) reaches top_p → draw in proportion to e^(logit/T). (min_p and top_k commute;
 * min_p before top_p is vLLM's order.)
 * Randomness is a pure function of (seed, counter) through a counter-based hash (the caller
 * passes the token's position as the counter), not a running generator: the same request gives
 * the same tokens whatever else ran before or beside it.
 * Ties in ordering go to the lower id. Top-p needs no full sort: a histogram of the candidates
 * by (max - logit)/T finds the bucket where the mass crosses top_p, and only that bucket is
 * sorted. A sampler holds vocab-sized scratch and belongs to one thread at a time;
 * sampler_sample() and sampler_logprobs() do not allocate.
 */
#ifndef LLAISYS_SAMPLER_H
#define LLAISYS_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20

struct sampler_params {
    float temperature; /* <= 0: greedy (argmax) */
    int top_k;         /* <= 0: no top-k; 1: greedy */
    float top_p;       /* >= 1 (or <= 0): no top-p */
    float min_p;       /* <= 0: off; else keep ids with probability >= min_p · the largest */
    uint64_t seed;
};

/* Penalties over the tokens of a sequence (struct token_counts). */
struct sampler_penalties {
    float repetition; /* > 0; 1 (or 0, taken as 1): off */
    float presence;   /* 0: off */
    float frequency;  /* 0: off */
};

/* One logit_bias entry: added to the id's raw logit. */
struct sampler_bias {
    int32_t id;
    float bias;
};

/* Log-probabilities of one sampled token: the chosen id's and the n_top best ids', under
 * log_softmax(l / T) of the processed logits l (after bias and penalties; T = 1 when greedy),
 * over the whole vocabulary, before min-p / top-k / top-p. top_ids are ordered by logit
 * descending, ties by id. */
struct sampler_logprobs {
    float logprob;
    int n_top;
    int32_t top_ids[SAMPLER_MAX_TOP_LOGPROBS];
    float top_logprobs[SAMPLER_MAX_TOP_LOGPROBS];
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

/* Fill *out for the token `chosen` of logits (vocab) sampled at `temperature`, with the n_top
 * (0..SAMPLER_MAX_TOP_LOGPROBS, clamped) best alternatives (see struct sampler_logprobs). */
void sampler_logprobs(struct sampler *s, const float *logits, float temperature, int32_t chosen,
                      int n_top, struct sampler_logprobs *out);

/* The uniform number in [0, 1) that (seed, counter) gives (53 random bits). */
double sampler_uniform(uint64_t seed, uint64_t counter);

/* logits[id] += bias for each entry (ids must be in the vocabulary; repeated ids add up). */
void sampler_apply_bias(float *logits, const struct sampler_bias *b, int n);

/* Occurrences of the distinct ids of one sequence: in the prompt (a flag) and in the output (a
 * count). A sparse open-addressing table sized at init for at most max_distinct ids, so its
 * memory follows the sequence's length, not the vocabulary. One owner at a time. */
struct token_counts {
    int32_t *key;   /* (cap) id in each slot, -1: empty */
    int32_t *n_out; /* (cap) occurrences in the output */
    uint8_t *in_prompt; /* (cap) seen in the prompt */
    int32_t *used;  /* (max) occupied slots in insertion order */
    int n_used, max, cap; /* cap: a power of two >= 2 · max */
};

/* Room for max_distinct (>= 1) ids. Returns LL_OK or LL_ENOMEM; token_counts_free releases
 * it (safe on a zeroed struct). */
enum ll_status token_counts_init(struct token_counts *c, int max_distinct, struct ll_err *err);
void token_counts_free(struct token_counts *c);
/* Forget every id (keeps the memory). */
void token_counts_clear(struct token_counts *c);
/* Count one occurrence of id, in the output (output) or the prompt. Returns false, counting
 * nothing, when max_distinct different ids are already held. */
bool token_counts_add(struct token_counts *c, int32_t id, bool output);
/* Occurrences of id in the output, and whether it is in the prompt (*in_prompt may be NULL);
 * 0 and false for an id never added. */
int token_counts_get(const struct token_counts *c, int32_t id, bool *in_prompt);

/* Apply the penalties of p to logits for the ids counted in c (see the order above). Touches
 * only those ids: O(distinct ids), not O(vocab). */
void sampler_apply_penalties(float *logits, const struct token_counts *c,
                             const struct sampler_penalties *p);

/* Whether p changes anything (any penalty differs from its neutral value). */
bool sampler_penalties_active(const struct sampler_penalties *p);

#endif
