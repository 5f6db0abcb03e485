/*
 * engine_harness.h: what the engine's unit tests (test_engine.c, test_sampling_controls.c)
 * share: an engine on the tiny-qwen2 fixture, deterministic prompts, requests run to the end
 * into a fixed-size result, and the comparisons. Every helper except result_add fails the
 * current cmocka test on an error, so call them from the test's own thread.
 */
#ifndef LLAISYS_TESTS_ENGINE_HARNESS_H
#define LLAISYS_TESTS_ENGINE_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "sampler.h"

#define FIXTURE "tests/fixtures/tiny-qwen2"
#define MAXOUT 160

/* Everything a request produced, accumulated over its outputs. Zero it before the first. */
struct result {
    int32_t ids[MAXOUT];
    struct sampler_logprobs lp[MAXOUT]; /* (n) when the request asked for logprobs */
    int n;
    char text[8192], reasoning[8192]; /* NUL-terminated */
    size_t len, rlen;
    enum engine_finish finish;
    int32_t stop_id;
    int stop_str;
    struct engine_usage usage;
};

/* An engine on FIXTURE with options o (one compute thread when o.n_threads is 0: results do not
 * depend on it, and a second thread only slows a shared machine down; when neither ITL option
 * is set, prompt chunks are bounded by the token budget alone, so the steps a test sees do not
 * depend on how fast the machine runs). Caller destroys it. */
struct engine *make_engine(struct engine_opts o);

/* The same on the model directory `model`. */
struct engine *make_engine_on(const char *model, struct engine_opts o);

/* Fills ids[0..n) with a deterministic pseudo-random prompt (ids below 150000) from salt. */
void make_prompt(int32_t *ids, int n, uint64_t salt);

/* Submits p; returns the request (caller releases it). */
struct engine_req *submit(struct engine *e, const struct engine_params *p);

/* Appends what out carries to res and takes its finish, stop and usage. Returns false, leaving
 * res as it was, when the ids or text would not fit. Safe on any thread (asserts nothing). */
bool result_add(struct result *res, const struct engine_output *out);

/* Polls r once and appends what it produced to res (which must have room); returns the ids
 * that came. */
int drain(struct engine_req *r, struct result *res);

/* engine_run_until_idle, and one engine_step; both must succeed. */
void run_idle(struct engine *e);
void step_once(struct engine *e);

/* Asserts that no request holds KV blocks or waits, and that the block counts add up. */
void assert_pool_empty(struct engine *e);

/* Runs the n requests p submitted together on e into res[0..n) (zeroed first), n <= 32;
 * releases them and asserts the pool empty after. */
void run_together(struct engine *e, const struct engine_params *p, int n, struct result *res);

/* Runs each of the n requests on its own, one after the other, in one engine with options o and
 * no prefix cache, into res[0..n); asserts that none was served from a cache. */
void run_each_alone(struct engine_opts o, const struct engine_params *p, int n, struct result *res);
/* The same on the model directory `model`. */
void run_each_alone_on(const char *model, struct engine_opts o, const struct engine_params *p,
                       int n, struct result *res);

/* Fills p[0..n) (n <= 16) with the requests that keep another company in the determinism
 * checks: prompts of 10..34 ids, 2..4 tokens each, sampled (temperature, top_p) with seeds of
 * their own. The prompts are static storage, overwritten by the next call. */
void other_params(struct engine_params *p, int n);

/* Asserts that x gives the same result however it runs: alone (the result in *alone), in the
 * middle of a batch with the 16 requests others[0..16), preempted in a tiny pool (4 blocks of
 * 16) beside others[0] grown to 16 tokens, with and without the prefix cache, and with its first
 * 32 prompt tokens from the prefix cache (left by another request, then by itself). o allows 17
 * sequences and leaves kv_blocks 0; x has 35..64 prompt ids. */
void assert_deterministic(struct engine_opts o, const struct engine_params *x,
                          const struct engine_params *others, struct result *alone);
/* The same on the model directory `model` (its vocabulary above the prompts' ids, 150000). */
void assert_deterministic_on(const char *model, struct engine_opts o,
                             const struct engine_params *x, const struct engine_params *others,
                             struct result *alone);

/* A family's check through the engine: a request of 36 prompt ids (make_prompt(prompt_seed))
 * sampling 12 tokens (temperature 0.9, top-k 50, top-p 0.95, seed) on `model` keeps
 * assert_deterministic_on's guarantees beside 16 others (other_params; a context of 128, 48
 * batch tokens), dense and with its weights quantized at load to engine_quant_names[quant],
 * which must be `quant_name`. */
void assert_family_deterministic(const char *model, uint64_t prompt_seed, uint64_t seed,
                                 int quant, const char *quant_name);

/* Asserts that a and b are the same: ids, logprobs (bit for bit), finish, stop string, text,
 * reasoning text and reasoning tokens. */
void assert_same(const struct result *a, const struct result *b);

#endif
