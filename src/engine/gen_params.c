/*
 * gen_params.c: the default policy of sampling parameters (see gen_params.h for the table).
 * Called on the thread that builds a request (HTTP threads, the CLI's main thread); touches no
 * shared state.
 */
#include "gen_params.h"

#include <sys/random.h>
#include <time.h>

/* A fresh seed of 53 bits (exact as a JSON number). */
static uint64_t random_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        s = ((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec) ^ (uint64_t)(uintptr_t)&s;
    }
    return s & ((1ull << 53) - 1);
}

void gen_params_resolve(struct engine_params *p, const struct gen_settings *s,
                        const struct generation_defaults *g)
{
    struct sampler_params *sp = &p->sampling;
    struct sampler_penalties *pen = &p->penalties;

    if (s->has_temperature)
        sp->temperature = s->temperature;
    else if (g->has_do_sample && !g->do_sample)
        sp->temperature = 0;
    else
        sp->temperature = g->has_temperature ? g->temperature : 1.0f;
    sp->top_p = s->has_top_p ? s->top_p : g->has_top_p ? g->top_p : 1.0f;
    int top_k = s->has_top_k ? s->top_k : g->has_top_k ? g->top_k : 0;
    sp->top_k = top_k > 0 ? top_k : 0;
    sp->min_p = s->has_min_p ? s->min_p : g->has_min_p ? g->min_p : 0.0f;
    sp->seed = s->has_seed ? s->seed : random_seed();

    pen->repetition = s->has_repetition_penalty ? s->repetition_penalty
                      : g->has_repetition_penalty ? g->repetition_penalty
                                                  : 1.0f;
    pen->presence = s->presence_penalty;
    pen->frequency = s->frequency_penalty;
}
