/*
 * step_cost.h: the scheduler's running estimate of what one engine step costs on this machine,
 * and from it how many prompt tokens a step may carry (scheduler.c).
 *
 * Model: a step with d decode rows (one per decoding sequence, plus its draft rows; every one
 * wants logits) and c prompt rows takes D(d) + c·p seconds.
 *   D(d), by batch shape: buckets over d (two per octave), each an exponential moving average
 *   of (d, seconds) over the steps without prompt rows whose d falls in it; D is the
 *   piecewise-linear curve through the populated buckets, flat below the first, proportional
 *   above the last. Both ends over-estimate an affine cost a + b·d, so a shape never seen gets
 *   a smaller chunk, not a larger one, and a step that runs teaches the table its shape.
 *   p, per prompt token: the marginal cost of a prompt row beside the decode rows, a moving
 *   average weighted by tokens of (seconds - D(d)) / c over the steps with prompt rows (a step
 *   of prompt rows only counts as D(1) plus c - 1 tokens).
 * Every step updates the estimate, so it follows the machine: its speed, its memory bandwidth,
 * other processes on its cores, the attention cost of growing contexts.
 *
 * Pure functions on a caller-owned struct (the scheduler thread's); no allocation.
 */
#ifndef LLAISYS_STEP_COST_H
#define LLAISYS_STEP_COST_H

#include <stdbool.h>

#define STEP_COST_BUCKETS 34 /* d up to 2^16 rows, two buckets per octave */

struct step_cost {
    double n[STEP_COST_BUCKETS];   /* moving average of d in each bucket */
    double t[STEP_COST_BUCKETS];   /* moving average of the step's seconds */
    int seen[STEP_COST_BUCKETS];   /* observations in the bucket (0: empty) */
    double p_sum, p_tokens;        /* decayed sums: prompt seconds and prompt tokens */
};

/* Forget everything (a zeroed struct is the same). */
void step_cost_reset(struct step_cost *c);

/* Record a step of d decode rows and c prompt rows that took `seconds` (d + c >= 1). */
void step_cost_observe(struct step_cost *c, int d, int prompt, double seconds);

/* D(d): predicted seconds of a step of d >= 1 decode rows and no prompt rows; 0 for d <= 0;
 * < 0 while nothing is known. */
double step_cost_decode(const struct step_cost *c, int d);

/* The marginal seconds of one more decode row beside d: the slope of D where the table has
 * data above d, else the smaller of the prompt-token cost and D(d)/d (the table learns the
 * slope once such a step ran); < 0 while nothing is known. */
double step_cost_row(const struct step_cost *c, int d);

/* p: predicted seconds per prompt token beside decode rows; < 0 while nothing is known. */
double step_cost_prompt_token(const struct step_cost *c);

/* Prompt tokens that fit beside d >= 1 decode rows in a step of at most target_s seconds, or,
 * when the decode rows alone come near the target, in share · D(d) seconds (so prompts keep a
 * part of every step on any machine): floor(max(target_s - D(d), share · D(d)) / p). Returns
 * -1 while p or D(d) is unknown (the caller probes with a small chunk). */
int step_cost_prompt_budget(const struct step_cost *c, int d, double target_s, double share);

#endif
