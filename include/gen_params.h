/*
 * gen_params.h: the one default policy for sampling. What a caller asked for (a parsed OpenAI
 * request of the server or of `llaisys-cli batch`, the flags of `llaisys-cli generate`, a
 * library call) and the model's generation_config.json (struct generation_defaults) become the
 * sampling parameters and penalties of struct engine_params.
 *
 * The policy is vLLM's OpenAI server's: a field the caller gave wins; else generation_config's
 * value, which applies as a default; else the neutral value (the field does nothing).
 *
 *   field               caller gave it   else generation_config       else
 *   temperature         it (0: greedy)   0 when "do_sample": false,   1
 *                                        else its "temperature"
 *   do_sample           (not a field)    only sets the default temperature above; a caller's
 *                                        temperature > 0 samples, with the config's top_p/top_k
 *   top_p               it               "top_p"                      1 (off)
 *   top_k               it (-1, 0: off)  "top_k" (0: off)             off
 *   min_p               it               "min_p"                      0 (off)
 *   repetition_penalty  it               "repetition_penalty"         1 (off)
 *   presence_penalty,   it               (no such field)              0 (off)
 *   frequency_penalty
 *   seed                it               (no such field)              a fresh random seed
 *   max_tokens          engine_params.max_tokens, the caller's (<= 0: up to the end of the
 *                       context); generation_config's max_new_tokens is not read
 *
 * do_sample: vLLM ignores it; here "do_sample": false keeps the meaning transformers gives it
 * (greedy by default), which is what a model directory shipping it asks for. The random seed
 * has 53 bits, so that a seed reported as a JSON number can be given back exactly.
 * Everything else of engine_params (stops, logit_bias, min_tokens, logprobs, ignore_eos, ...)
 * has no default but "off" and is set by the caller. Pure but for the random seed: any thread.
 */
#ifndef LLAISYS_GEN_PARAMS_H
#define LLAISYS_GEN_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "model.h"

/* The ranges a caller's values must lie in (the OpenAI API's where it gives one). Every entry
 * point checks against these: the request parser (server and batch) and generate's flags. */
#define GEN_TEMPERATURE_MAX 2.0         /* temperature in [0, 2] */
#define GEN_PENALTY_MAX 2.0             /* presence, frequency in [-2, 2] */
#define GEN_REPETITION_PENALTY_MAX 100.0 /* repetition in (0, 100] */
/* top_p in (0, 1], min_p in [0, 1], top_k >= -1, seed any 64-bit integer */

/* What a caller asked for; has_* false: not given (the policy decides). Zero-init: nothing
 * given. */
struct gen_settings {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty, has_seed;
    float temperature;        /* [0, GEN_TEMPERATURE_MAX]; 0: greedy */
    float top_p;              /* (0, 1] */
    int top_k;                /* -1 or 0: off */
    float min_p;              /* [0, 1] */
    float repetition_penalty; /* (0, GEN_REPETITION_PENALTY_MAX] */
    uint64_t seed;            /* any 64-bit value (a negative JSON seed in two's complement) */
    float presence_penalty;   /* [-GEN_PENALTY_MAX, GEN_PENALTY_MAX]; 0 when not given */
    float frequency_penalty;  /* [-GEN_PENALTY_MAX, GEN_PENALTY_MAX]; 0 when not given */
};

/* Set p->sampling and p->penalties from what was asked (s) and the model's
 * generation_config.json (g) by the policy above; other fields of *p are left as they are.
 * Values of s are expected in the ranges above (the engine refuses others on submit). */
void gen_params_resolve(struct engine_params *p, const struct gen_settings *s,
                        const struct generation_defaults *g);

#endif
