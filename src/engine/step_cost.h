/*
 * step_cost.h: the scheduler's running estimate of what one engine step costs on this machine,
 * and from it how many prompt tokens a step may carry (scheduler.c).
 *
 * Model: a step of n rows (decode rows, draft rows and prompt rows together) takes F(n)
 * seconds, F learned by batch shape: buckets over n (two per octave), each an exponential
 * moving average of (n, seconds) over the steps whose n falls in it; F is the piecewise-linear
 * curve through (0, 0) and the populated buckets, proportional past the last one. Every step
 * teaches it, whatever it ran, so the estimate exists in every regime (a queue that never
 * empties included); prompt rows cost a little less than rows that want logits, so a step
 * with a chunk is slightly over-estimated, on the safe side. From F:
 *   - per decode row: F(d) / d, the cost per token of a step of d decode rows;
 *   - per prompt token (and per draft row) beside d rows: the slope of F at d;
 *   - the prompt budget: the most tokens c with F(d + c) <= F(d) + E, the prompt's time E being
 *     target - F(d), at least min_share · F(d), and at most what keeps the step within
 *     (1 + max_share) · F(r), r >= d the decode rows of the reference step (the batch the
 *     scheduler is heading for: scheduler.c).
 * A shape never seen is extrapolated proportionally from the largest one seen, which
 * over-estimates an affine cost: its chunk comes out smaller, and once run the step teaches the
 * table its shape. Every step updates the estimate, so it follows the machine: its speed, its
 * memory bandwidth, other processes on its cores, the attention cost of growing contexts.
 *
 * Pure functions on a caller-owned struct (the scheduler thread's); no allocation.
 */
#ifndef LLAISYS_STEP_COST_H
#define LLAISYS_STEP_COST_H

#define STEP_COST_BUCKETS 34 /* n up to 2^16 rows, two buckets per octave */

struct step_cost {
    double n[STEP_COST_BUCKETS]; /* moving average of n in each bucket */
    double t[STEP_COST_BUCKETS]; /* moving average of the step's seconds */
    int seen[STEP_COST_BUCKETS]; /* observations in the bucket (0: empty) */
};

/* Forget everything (a zeroed struct is the same). */
void step_cost_reset(struct step_cost *c);

/* Record a step of n >= 1 rows that took `seconds`. */
void step_cost_observe(struct step_cost *c, int n, double seconds);

/* F(n): predicted seconds of a step of n rows; 0 for n <= 0; < 0 while nothing is known. */
double step_cost_step(const struct step_cost *c, int n);

/* The marginal seconds of one more row beside n (the slope of F just above n); < 0 while
 * nothing is known. */
double step_cost_row(const struct step_cost *c, int n);

/* The seconds a step beside decode rows costing fd may spend on prompt work (or drafts):
 * target_s - fd, at least min_share · fd, at most (1 + max_share) · fref - fd (fref >= fd: the
 * reference decode step's cost; pass fd for a step that is its own reference). */
double step_cost_prompt_time(double fd, double fref, double target_s, double min_share,
                             double max_share);

/* Prompt tokens that fit beside d >= 1 decode rows in a step of at most target_s seconds, but
 * never longer than (1 + max_share) · F(d_ref), d_ref >= d the decode rows of the reference
 * step (so a step with prompt work stays within that multiple of a decode-only step of the
 * batch being built, whatever the target) and, when the decode rows alone come near the target,
 * of (1 + min_share) · F(d) (so prompts keep a part of every step on any machine): the largest
 * c in 0..cap with F(d + c) within that limit. Returns -1 while nothing is known (the caller
 * probes with a small chunk). */
int step_cost_prompt_budget(const struct step_cost *c, int d, int d_ref, double target_s,
                            double min_share, double max_share, int cap);

#endif
