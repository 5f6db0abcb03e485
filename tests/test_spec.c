/*
 * test_spec.c: speculative decoding and latency-aware scheduling.
 *   - the n-gram drafter (spec.h): longest and latest match, the periodic continuation; the
 *     drafting policy: theta, back-off and probes;
 *   - the step-cost estimate (step_cost.h): the table by batch shape, the marginal row cost,
 *     the prompt budget, and that the budget follows the machine (twice the cost, a smaller
 *     chunk);
 *   - spec on (ngram-always: drafts at every match; ngram: adaptive) gives exactly the tokens,
 *     logprobs, finishes, texts and cached-token counts of spec off, on a tiny "copy" model
 *     (mkmodel_write with copy_period, written to a temporary directory) whose outputs repeat:
 *     greedy and seeded requests, top-k/top-p/min-p, penalties, logit_bias, stop ids, stop
 *     strings, max_tokens, min_tokens, logprobs, n > 1, all in one continuous batch; after
 *     preemption in a tiny KV pool; with prefix-cache hits on blocks that held drafts; with
 *     cancels mid-run; the KV pool stays consistent after every step (kv_pool_check) and
 *     rejected drafts leave no blocks behind; the usage counts add up to the engine's;
 *   - a constrained request (grammar) gets no drafts and the same output; a session turn
 *     (pin_key) drafts, pins the same blocks, and its next turn hits the same cached prefix;
 *   - scheduling under load, on step counts with a synthetic step cost fed to the scheduler
 *     before every step: decode rows never wait for a prompt (every stream gets a token every
 *     step), a long prompt arriving during 8 streams is spread over exactly the steps the
 *     budget gives (the target, at most 1.6 times a decode-only step of the batch being
 *     built), prompts queued behind a lone stream start as fast as that batch allows, and a
 *     prompt whose chunks never fit still gets SCHED_MIN_CHUNK tokens every SCHED_STARVE_STEPS
 *     steps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/engine/engine_impl.h" /* the pool and the cost estimate, checked directly */
#include "engine.h"
#include "engine_harness.h"
#include "grammar.h"
#include "kv_pool.h"
#include "mkmodel.h"
#include "sampler.h"

#define TOKENIZER_DIR "tests/fixtures/tiny-qwen2"
#define PERIOD 16   /* the copy model's group size */

static char tmpdir[64];
static char copy_model[96];

/* ---- the copy model, written once for the file ---- */

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llaisys-spec-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(copy_model, sizeof copy_model, "%s/copy", tmpdir);
    struct mkmodel_spec s;
    struct ll_err err = {0};
    if (mkmodel_preset(&s, "tiny", &err) != LL_OK)
        return -1;
    s.tied = false;
    s.copy_period = PERIOD;
    if (mkmodel_write(&s, TOKENIZER_DIR, copy_model, 1, false, &err) != LL_OK) {
        fprintf(stderr, "mkmodel_write: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json"};
    char p[160];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", copy_model, files[i]);
        unlink(p);
    }
    rmdir(copy_model);
    rmdir(tmpdir);
    return 0;
}

/* ---- the drafter and the policy ---- */

static void test_ngram_draft(void **state)
{
    (void)state;
    int32_t out[8];
    /* no repeated 2-gram: no draft */
    const int32_t a[] = {1, 2, 3, 4, 5};
    assert_int_equal(spec_ngram_draft(a, 5, 4, out), 0);
    /* the 3-gram (7, 8, 9) occurs earlier: its continuation */
    const int32_t b[] = {7, 8, 9, 10, 11, 12, 5, 7, 8, 9};
    assert_int_equal(spec_ngram_draft(b, 10, 3, out), 3);
    assert_int_equal(out[0], 10);
    assert_int_equal(out[1], 11);
    assert_int_equal(out[2], 12);
    /* the latest occurrence wins */
    const int32_t c[] = {3, 4, 50, 3, 4, 60, 3, 4};
    assert_int_equal(spec_ngram_draft(c, 8, 1, out), 1);
    assert_int_equal(out[0], 60);
    /* a longer match beats a later shorter one: (1, 3, 4) at 0, only (3, 4) at 4 */
    const int32_t d[] = {1, 3, 4, 70, 3, 4, 80, 1, 3, 4};
    assert_int_equal(spec_ngram_draft(d, 10, 1, out), 1);
    assert_int_equal(out[0], 70);
    /* the continuation runs into the end: it goes on periodically (period 3) */
    const int32_t e[] = {5, 6, 7, 5, 6, 7, 5, 6};
    assert_int_equal(spec_ngram_draft(e, 8, 7, out), 7);
    const int32_t want_e[] = {7, 5, 6, 7, 5, 6, 7};
    assert_memory_equal(out, want_e, sizeof want_e);
    /* period 1 */
    const int32_t f[] = {9, 4, 4, 4};
    assert_int_equal(spec_ngram_draft(f, 4, 5, out), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(out[i], 4);
    /* too short to hold a match */
    assert_int_equal(spec_ngram_draft(f, 2, 2, out), 0);
}

static void test_spec_policy(void **state)
{
    (void)state;
    struct spec_state s = {0};
    assert_true(fabs(spec_acceptance(&s) - 0.5) < 1e-12); /* the prior */
    /* q = 1/2: q^k >= 0.2 for k <= 2 */
    assert_int_equal(spec_plan(&s, 0.2, 4), 2);
    assert_int_equal(spec_plan(&s, 0.0, 4), 4);
    assert_int_equal(spec_plan(&s, 0.2, 1), 1);
    /* full acceptance raises q: longer drafts at the same theta */
    for (int i = 0; i < 10; i++)
        spec_update(&s, 4, 4);
    assert_true(spec_acceptance(&s) > 0.9);
    assert_int_equal(spec_plan(&s, 0.2, 4), 4);
    /* rejections: q falls until not even one token is worth it, then the request backs off
     * (1, 2, 4, ... steps without a draft) and probes with one token in between */
    for (int i = 0; i < 30; i++)
        spec_update(&s, 4, 0);
    assert_true(spec_acceptance(&s) < 0.15);
    struct spec_state t = {.hits = 0, .tests = 40}; /* q = 1/42 */
    assert_int_equal(spec_plan(&t, 0.2, 4), 1); /* no back-off yet: probe */
    spec_update(&t, 1, 0);                       /* rejected: back-off 1 */
    assert_int_equal(spec_plan(&t, 0.2, 4), 0);
    assert_int_equal(spec_plan(&t, 0.2, 4), 1);
    spec_update(&t, 1, 0); /* back-off 2 */
    assert_int_equal(spec_plan(&t, 0.2, 4), 0);
    assert_int_equal(spec_plan(&t, 0.2, 4), 0);
    assert_int_equal(spec_plan(&t, 0.2, 4), 1);
    for (int i = 0; i < 10; i++)
        spec_update(&t, 1, 0);
    assert_int_equal(t.backoff, SPEC_BACKOFF_MAX);
    spec_update(&t, 1, 1); /* accepted: the back-off ends */
    assert_int_equal(t.backoff, 0);
    assert_int_equal(spec_plan(&t, 0.2, 0), 0); /* nothing to draft */
}

/* ---- the step-cost estimate ---- */

static void test_step_cost(void **state)
{
    (void)state;
    struct step_cost c;
    step_cost_reset(&c);
    assert_true(step_cost_step(&c, 4) < 0);
    assert_true(step_cost_row(&c, 4) < 0);
    assert_int_equal(step_cost_prompt_budget(&c, 4, 4, 0.4, 0.5, 0.9, 100), -1);
    /* steps of 8 rows 0.2 s, 16 rows 0.3 s */
    step_cost_observe(&c, 8, 0.2);
    step_cost_observe(&c, 16, 0.3);
    assert_true(fabs(step_cost_step(&c, 8) - 0.2) < 1e-12);
    assert_true(fabs(step_cost_step(&c, 12) - 0.25) < 1e-12); /* between: linear */
    assert_true(fabs(step_cost_step(&c, 32) - 0.6) < 1e-12);  /* above: proportional */
    assert_true(fabs(step_cost_step(&c, 2) - 0.05) < 1e-12);  /* below: towards (0, 0) */
    assert_true(step_cost_step(&c, 0) == 0);
    /* the slope between the shapes seen: 0.1 s / 8 rows */
    assert_true(fabs(step_cost_row(&c, 8) - 0.0125) < 1e-9);
    /* a bucket follows its shape: 0.2 then 0.4 moves it a quarter of the way */
    step_cost_observe(&c, 8, 0.4);
    assert_true(fabs(step_cost_step(&c, 8) - 0.25) < 1e-12);
    step_cost_observe(&c, 9, 0.25); /* same bucket (8..11): its n moves to 8.25 */
    assert_true(fabs(step_cost_step(&c, 8) - 0.25 * 8 / 8.25) < 1e-12);
    step_cost_observe(&c, 0, 1.0); /* no rows: ignored */
    step_cost_observe(&c, 3, -1.0);
    assert_int_equal(c.seen[0] + c.seen[3], 0);

    /* the prompt's time beside a step of F(d): target - F(d) within [min, max] shares */
    assert_true(fabs(step_cost_prompt_time(0.25, 0.25, 0.5, 0.5, 0.9) - 0.225) < 1e-12);  /* max */
    assert_true(fabs(step_cost_prompt_time(0.25, 0.25, 0.4, 0.5, 0.9) - 0.15) < 1e-12);   /* target */
    assert_true(fabs(step_cost_prompt_time(0.25, 0.25, 0.3, 0.5, 0.9) - 0.125) < 1e-12);  /* min */
    assert_true(fabs(step_cost_prompt_time(0.25, 0.25, 0.1, 0.0, 0.9) - 0.0) < 1e-12);
    /* a reference step costlier than the decode rows' own: the max share is of that one */
    assert_true(fabs(step_cost_prompt_time(0.125, 0.25, 0.5, 0.5, 0.9) - 0.35) < 1e-12);
    assert_true(fabs(step_cost_prompt_time(0.125, 0.25, 0.25, 0.5, 0.9) - 0.125) < 1e-12);

    /* the budget: the most c with F(d + c) <= F(d) + that time; binary fractions, so exact:
     * F(8 + c) = 1/4 + c/256 up to c = 300 */
    struct step_cost m;
    step_cost_reset(&m);
    step_cost_observe(&m, 8, 0.25);
    step_cost_observe(&m, 308, 0.25 + 300 / 256.0);
    assert_true(fabs(step_cost_row(&m, 8) - 1 / 256.0) < 1e-12);
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.375, 0.5, 1.0, 1000), 32);  /* target */
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.5, 0.5, 0.5, 1000), 32);    /* max */
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.3125, 0.5, 1.0, 1000), 32); /* min */
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.3125, 0.0, 1.0, 1000), 16);
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.125, 0.0, 1.0, 1000), 0);
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.5, 0.5, 1.0, 10), 10);      /* the cap */
    /* the same load on a machine twice as slow: a smaller chunk for the same target */
    struct step_cost slow;
    step_cost_reset(&slow);
    step_cost_observe(&slow, 8, 0.5);
    step_cost_observe(&slow, 308, 0.5 + 300 / 128.0);
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 0.75, 0.5, 4.0, 1000), 128);
    assert_int_equal(step_cost_prompt_budget(&slow, 8, 8, 0.75, 0.5, 4.0, 1000), 32);
    assert_int_equal(step_cost_prompt_budget(&slow, 8, 8, 0.5, 0.5, 4.0, 1000), 32); /* min */
    /* and a fast one, whose decode steps are short: the max share, not the target, bounds it */
    assert_int_equal(step_cost_prompt_budget(&m, 8, 8, 10.0, 0.5, 0.9, 1000), 57);
    /* ... unless requests queue for a batch of 40 rows: 1.9 · F(40) = 1.9 · (1/4 + 32/256) s
     * bounds the step, F(8 + c) <= 0.7125: 118 tokens */
    assert_int_equal(step_cost_prompt_budget(&m, 8, 40, 10.0, 0.5, 0.9, 1000), 118);
    assert_int_equal(step_cost_prompt_budget(&m, 8, 4, 10.0, 0.5, 0.9, 1000), 57); /* r < d: d */
}

/* ---- engines ---- */

/* Every invariant of the pool, and every running sequence holds no block past the one its
 * next position needs (rejected drafts were released). */
static void check_engine(struct engine *e)
{
    assert_true(kv_pool_check(&e->pool));
    int bs = e->opts.block_size;
    for (struct engine_req *r = e->running.head; r; r = r->next) {
        assert_true(r->n_computed < r->n_tokens);
        assert_true(r->n_blocks <= (r->n_computed + 1 + bs - 1) / bs ||
                    r->n_tokens - r->n_computed > 1);
    }
}

static void step_checked(struct engine *e, bool *did)
{
    struct ll_err err = {0};
    enum ll_status s = engine_step(e, did, &err);
    if (s != LL_OK)
        print_error("engine_step: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    check_engine(e);
}

/* Run the n requests together in one engine (options o, spec mode) until all finish,
 * checking the engine after every step; cancel request cancel_at[i] after step
 * cancel_step (cancel_step 0: none). Returns the engine's stats. */
static struct engine_stats run_all(const char *model, struct engine_opts o, enum engine_spec spec,
                                   const struct engine_params *p, int n, struct result *res,
                                   int cancel_step, const bool *cancel)
{
    o.spec = spec;
    struct engine *e = make_engine_on(model, o);
    struct engine_req **r = calloc((size_t)n, sizeof *r);
    assert_non_null(r);
    memset(res, 0, sizeof *res * (size_t)n);
    for (int i = 0; i < n; i++)
        r[i] = submit(e, &p[i]);
    int live = n, steps = 0;
    while (live > 0) {
        bool did;
        step_checked(e, &did);
        steps++;
        assert_true(steps < 100000);
        live = 0;
        for (int i = 0; i < n; i++) {
            if (!r[i])
                continue;
            drain(r[i], &res[i]);
            if (cancel_step && steps == cancel_step && cancel[i])
                engine_cancel(r[i]);
            if (res[i].finish) {
                engine_req_release(r[i]);
                r[i] = NULL;
            } else {
                live++;
            }
        }
    }
    struct ll_err err = {0};
    assert_int_equal(engine_run_until_idle(e, &err), LL_OK);
    assert_pool_empty(e);
    struct engine_stats st;
    engine_get_stats(e, &st);
    engine_destroy(e);
    free(r);
    return st;
}

static void same_result(const struct result *a, const struct result *b, int i)
{
    if (a->n != b->n || memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n))
        fail_msg("request %d: %d tokens without drafts, %d with", i, a->n, b->n);
    for (int k = 0; k < a->n; k++) {
        const struct sampler_logprobs *x = &a->lp[k], *y = &b->lp[k];
        if (x->logprob != y->logprob || x->n_top != y->n_top ||
            memcmp(x->top_ids, y->top_ids, sizeof(int32_t) * (size_t)x->n_top) ||
            memcmp(x->top_logprobs, y->top_logprobs, sizeof(float) * (size_t)x->n_top))
            fail_msg("request %d: logprobs of token %d differ", i, k);
    }
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->stop_id, b->stop_id);
    assert_int_equal(a->stop_str, b->stop_str);
    assert_string_equal(a->text, b->text);
    assert_int_equal(a->usage.completion_tokens, b->usage.completion_tokens);
    assert_int_equal(a->usage.cached_tokens, b->usage.cached_tokens);
}

/* A prompt of n ids stepping through the copy model's group at `base` from `start`. */
static void cycle_prompt(int32_t *ids, int n, int base, int start)
{
    for (int i = 0; i < n; i++)
        ids[i] = base + (start + i) % PERIOD;
}

#define NREQ 22

/* The requests of the identity test; ids holds their prompts. */
static int identity_requests(struct engine_params *p, int32_t (*ids)[40], const char **stops)
{
    int n = 0;
    for (int i = 0; i < NREQ; i++)
        memset(&p[i], 0, sizeof p[i]);
    /* 0: greedy, long */
    cycle_prompt(ids[n], 20, 400, 0);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 20, .max_tokens = 90};
    n++;
    /* 1: greedy, logprobs with alternatives */
    cycle_prompt(ids[n], 5, 1600, 3);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 5, .max_tokens = 60,
                                    .logprobs = true, .top_logprobs = 5};
    n++;
    /* 2: a stop id, first met as the 16th token (min_tokens 10 bans it before that) */
    cycle_prompt(ids[n], 8, 800, 0);
    static int32_t stop_ids[1] = {800 + 7};
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 8, .max_tokens = 100,
                                  .stop_ids = stop_ids, .n_stop_ids = 1, .min_tokens = 10};
    n++;
    /* 3: the same with min_tokens 20: the ban falls on the 16th token, which turns the text
     * elsewhere */
    cycle_prompt(ids[n], 8, 800, 0);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 8, .max_tokens = 50,
                                  .stop_ids = stop_ids, .n_stop_ids = 1, .min_tokens = 20};
    n++;
    /* 4: a stop string (chosen from the text of request 0's group) */
    cycle_prompt(ids[n], 10, 400, 0);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 10, .max_tokens = 100,
                                    .stop = stops, .n_stop = 1};
    n++;
    /* 5: max_tokens in the middle of a draft */
    cycle_prompt(ids[n], 16, 2400, 0);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 16, .max_tokens = 7};
    n++;
    /* 6, 7: seeded, low temperature (most drafts accepted, some not), with top-k/p, min-p */
    for (int k = 0; k < 2; k++) {
        cycle_prompt(ids[n], 12, 3200 + 16 * k, 0);
        p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 12, .max_tokens = 70,
                                      .logprobs = k == 1, .top_logprobs = 2};
        p[n].sampling = (struct sampler_params){.temperature = 0.09f + 0.02f * k, .top_k = 40,
                                                .top_p = 0.95f, .min_p = 0.01f, .seed = 11};
        n++;
    }
    /* 8: seeded, higher temperature (mostly rejected) */
    cycle_prompt(ids[n], 12, 4000, 5);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 12, .max_tokens = 40};
    p[n].sampling = (struct sampler_params){.temperature = 0.7f, .seed = 3};
    n++;
    /* 9: penalties break the cycle: drafts from earlier text fail */
    cycle_prompt(ids[n], 16, 4800, 0);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 16, .max_tokens = 60};
    p[n].penalties = (struct sampler_penalties){.repetition = 1.3f, .presence = 0.4f,
                                                .frequency = 0.2f};
    p[n].sampling = (struct sampler_params){.temperature = 0.1f, .seed = 5};
    n++;
    /* 10: logit_bias steers one step of the cycle elsewhere */
    cycle_prompt(ids[n], 16, 5600, 0);
    static struct sampler_bias bias[2] = {{5600 + 3, -40.0f}, {77, 4.0f}};
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 16, .max_tokens = 60,
                                    .logit_bias = bias, .n_logit_bias = 2};
    n++;
    /* 11..13: n = 3 choices of one seeded prompt */
    for (int k = 0; k < 3; k++) {
        cycle_prompt(ids[n], 24, 6400, 2);
        p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 24, .max_tokens = 50,
                                      .choice = k, .logprobs = true};
        p[n].sampling = (struct sampler_params){.temperature = 0.1f, .seed = 99};
        n++;
    }
    /* 15: a prompt that is not a cycle: the drafter finds nothing at first */
    for (int i = 0; i < 30; i++)
        ids[n][i] = (int32_t)(sampler_uniform(77, (uint64_t)i) * 150000);
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 30, .max_tokens = 40};
    n++;
    /* 16: a prompt of traps: runs of the group, each followed by a stray token, so the output
     * (the plain run) meets drafts that fail after 0..5 accepted tokens */
    static const int run_len[6] = {2, 3, 4, 5, 6, 7};
    int k = 0, g = 12000;
    for (int t = 0; t < 6; t++) {
        for (int i = 0; i < run_len[t]; i++)
            ids[n][k++] = g + i;
        ids[n][k++] = 13000 + t;
    }
    for (int i = 0; i < 40 - k; i++)
        ids[n][k + i] = g + 8 + i % 4;
    p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 40, .max_tokens = 80,
                                  .logprobs = true, .top_logprobs = 3};
    n++;
    /* 17..20: the group's ids favoured by logit_bias, sampled at temperatures where the next
     * member is likely, not sure: the text stays in the group, drafts abound and some fail */
    static struct sampler_bias group_bias[4][PERIOD];
    for (int t = 0; t < 4; t++) {
        int base = 14000 + 16 * t;
        for (int i = 0; i < PERIOD; i++)
            group_bias[t][i] = (struct sampler_bias){base + i, 8.0f};
        cycle_prompt(ids[n], 32, base, t);
        p[n] = (struct engine_params){.prompt = ids[n], .n_prompt = 32, .max_tokens = 150,
                                      .logprobs = t == 1, .top_logprobs = 3,
                                      .logit_bias = group_bias[t], .n_logit_bias = PERIOD};
        p[n].sampling = (struct sampler_params){.temperature = 0.25f + 0.05f * t,
                                                .seed = 21 + (uint64_t)t};
        n++;
    }
    return n;
}

static void test_spec_identical(void **state)
{
    (void)state;
    struct engine_params p[NREQ];
    int32_t ids[NREQ][40];
    /* the stop string: a piece of request 0's text from its middle */
    static char stop_buf[8];
    static const char *stops[1] = {stop_buf};
    int n = identity_requests(p, ids, stops);
    struct result *off = calloc(NREQ, sizeof *off), *on = calloc(NREQ, sizeof *on);
    assert_non_null(off);
    assert_non_null(on);
    struct engine_opts o = {.max_seqs = NREQ};
    run_all(copy_model, o, ENGINE_SPEC_OFF, p, 1, off, 0, NULL);
    assert_true(off[0].len > 60);
    memcpy(stop_buf, off[0].text + off[0].len / 2, 5);
    assert_true(((unsigned char)stop_buf[0] & 0xc0) != 0x80);

    struct engine_stats st0 = run_all(copy_model, o, ENGINE_SPEC_OFF, p, n, off, 0, NULL);
    assert_int_equal(st0.spec_drafted, 0);
    assert_int_equal(off[2].finish, ENGINE_FINISH_STOP);
    assert_int_equal(off[2].stop_id, 807);
    assert_int_equal(off[2].n, 15);
    assert_true(off[3].n > 15 && off[3].ids[15] != 807);
    assert_int_equal(off[4].finish, ENGINE_FINISH_STOP);
    assert_int_equal(off[4].stop_str, 0);
    assert_int_equal(off[5].n, 7);
    assert_int_equal(off[5].finish, ENGINE_FINISH_LENGTH);
    for (enum engine_spec m = ENGINE_SPEC_NGRAM; m <= ENGINE_SPEC_NGRAM_ALWAYS; m++) {
        for (int kmax = 1; kmax <= 5; kmax += 4) {
            o.spec_max_draft = kmax;
            struct engine_stats st = run_all(copy_model, o, m, p, n, on, 0, NULL);
            int drafted = 0, accepted = 0;
            for (int i = 0; i < n; i++) {
                same_result(&off[i], &on[i], i);
                drafted += on[i].usage.spec_drafted;
                accepted += on[i].usage.spec_accepted;
                assert_true(on[i].usage.spec_accepted <= on[i].usage.spec_drafted);
            }
            assert_int_equal(drafted, (int)st.spec_drafted);
            assert_int_equal(accepted, (int)st.spec_accepted);
            assert_true(accepted > 0);
            /* every accepted token saved a decode row; nothing else changed */
            assert_int_equal(st.generated_tokens, st0.generated_tokens);
            assert_int_equal(st.decode_tokens + st.spec_accepted, st0.decode_tokens);
            if (m == ENGINE_SPEC_NGRAM_ALWAYS) {
                /* and some were rejected (not only cut short by a finish) */
                int rejected = 0;
                for (int i = 0; i < n; i++)
                    if (on[i].finish == ENGINE_FINISH_LENGTH)
                        rejected += on[i].usage.spec_drafted - on[i].usage.spec_accepted;
                assert_true(rejected > 10);
                assert_true(on[0].usage.spec_accepted > 35);
            }
        }
    }
    free(off);
    free(on);
}

/* A pool far too small for the sequences: preemption and recomputation, with drafts. */
static void test_spec_preemption(void **state)
{
    (void)state;
    enum { N = 6 };
    struct engine_params p[N];
    int32_t ids[N][24];
    for (int i = 0; i < N; i++) {
        cycle_prompt(ids[i], 24, 800 + 16 * i, i);
        p[i] = (struct engine_params){.prompt = ids[i], .n_prompt = 24, .max_tokens = 90,
                                      .logprobs = i % 2};
        if (i >= 3)
            p[i].sampling = (struct sampler_params){.temperature = 0.1f, .seed = (uint64_t)i};
    }
    struct result off[N], on[N];
    struct engine_opts roomy = {.max_seqs = N};
    run_all(copy_model, roomy, ENGINE_SPEC_OFF, p, N, off, 0, NULL);
    for (int pc = 0; pc < 2; pc++) {
        struct engine_opts tiny = {.max_seqs = N, .kv_blocks = 20, .no_prefix_cache = pc};
        struct engine_stats st = run_all(copy_model, tiny, ENGINE_SPEC_NGRAM_ALWAYS, p, N, on,
                                         0, NULL);
        assert_true(st.preemptions > 0);
        assert_true(st.spec_accepted > 0);
        for (int i = 0; i < N; i++) {
            struct result a = off[i];
            a.usage.cached_tokens = on[i].usage.cached_tokens; /* depends on the pool */
            same_result(&a, &on[i], i);
        }
    }
}

/* Blocks computed with drafts are published only once verified: a second request whose
 * prompt is the first one's prompt and output finds the same cached blocks with and without
 * drafts, and both answers agree. */
static void test_spec_prefix_cache(void **state)
{
    (void)state;
    int32_t ids[200];
    cycle_prompt(ids, 40, 2000, 0);
    struct engine_params a = {.prompt = ids, .n_prompt = 40, .max_tokens = 77};
    int cached[2] = {0}, n_out[2] = {0};
    int32_t out2[2][MAXOUT];
    for (int mode = 0; mode < 2; mode++) {
        struct engine_opts o = {.max_seqs = 4,
                                .spec = mode ? ENGINE_SPEC_NGRAM_ALWAYS : ENGINE_SPEC_OFF};
        struct engine *e = make_engine_on(copy_model, o);
        struct result r1 = {0}, r2 = {0};
        struct engine_req *q = submit(e, &a);
        bool did;
        while (!r1.finish) {
            step_checked(e, &did);
            drain(q, &r1);
        }
        engine_req_release(q);
        assert_int_equal(r1.n, 77);
        if (mode)
            assert_true(r1.usage.spec_accepted > 0);
        /* the conversation goes on: prompt + answer + a new turn */
        int32_t next[200];
        memcpy(next, ids, sizeof(int32_t) * 40);
        memcpy(next + 40, r1.ids, sizeof(int32_t) * 77);
        cycle_prompt(next + 117, 5, 9000, 0);
        struct engine_params b = {.prompt = next, .n_prompt = 122, .max_tokens = 30};
        q = submit(e, &b);
        while (!r2.finish) {
            step_checked(e, &did);
            drain(q, &r2);
        }
        engine_req_release(q);
        cached[mode] = r2.usage.cached_tokens;
        n_out[mode] = r2.n;
        memcpy(out2[mode], r2.ids, sizeof(int32_t) * (size_t)r2.n);
        assert_pool_empty(e);
        engine_destroy(e);
    }
    /* 40 + 77 tokens, the last one never fed: 116 computed, 7 full blocks of 16 */
    assert_int_equal(cached[0], 112);
    assert_int_equal(cached[1], cached[0]);
    assert_int_equal(n_out[0], n_out[1]);
    assert_memory_equal(out2[0], out2[1], sizeof(int32_t) * (size_t)n_out[0]);
}

/* Cancels while drafts are being verified: the others are unaffected, the pool empties. */
static void test_spec_cancel(void **state)
{
    (void)state;
    enum { N = 8 };
    struct engine_params p[N];
    int32_t ids[N][20];
    bool cancel[N];
    for (int i = 0; i < N; i++) {
        cycle_prompt(ids[i], 20, 10000 + 16 * i, 0);
        p[i] = (struct engine_params){.prompt = ids[i], .n_prompt = 20, .max_tokens = 100};
        cancel[i] = i % 3 == 1;
    }
    struct result off[N], on[N];
    struct engine_opts o = {.max_seqs = N};
    run_all(copy_model, o, ENGINE_SPEC_OFF, p, N, off, 0, NULL);
    struct engine_stats st = run_all(copy_model, o, ENGINE_SPEC_NGRAM_ALWAYS, p, N, on, 12,
                                     cancel);
    assert_true(st.spec_accepted > 0);
    for (int i = 0; i < N; i++) {
        if (cancel[i]) {
            assert_int_equal(on[i].finish, ENGINE_FINISH_CANCELLED);
            assert_true(on[i].n < off[i].n);
            assert_memory_equal(on[i].ids, off[i].ids, sizeof(int32_t) * (size_t)on[i].n);
        } else {
            same_result(&off[i], &on[i], i);
        }
    }
}

/* ---- scheduling under load, on step counts ---- */

/* Replace the engine's measured step cost by a synthetic machine: d decode rows take
 * d8 · d / 8 seconds, a prompt token p seconds. */
static void synthetic_cost(struct engine *e, double d8, double p)
{
    step_cost_reset(&e->cost);
    step_cost_observe(&e->cost, 4, d8 / 2);
    step_cost_observe(&e->cost, 8, d8);
    step_cost_observe(&e->cost, 308, d8 + 300 * p);
}

/* 8 streams decode; a prompt of L tokens arrives. Returns the steps until its first token;
 * checks that every stream got exactly one token in every one of those steps, and that the
 * long request's tokens are those it gets alone. */
static int long_prompt_steps(int itl_ms, int ratio, double d8, double p, int L)
{
    enum { S = 8 };
    struct engine_opts o = {.max_seqs = S + 1, .max_batch_tokens = 256, .itl_target_ms = itl_ms,
                            .itl_max_ratio = ratio, .kv_blocks = 256};
    struct engine *e = make_engine_on(FIXTURE, o);
    int32_t ids[S][8];
    struct engine_req *r[S];
    struct result res[S];
    memset(res, 0, sizeof res);
    for (int i = 0; i < S; i++) {
        for (int k = 0; k < 8; k++)
            ids[i][k] = (int32_t)(sampler_uniform(500 + (uint64_t)i, (uint64_t)k) * 150000);
        struct engine_params q = {.prompt = ids[i], .n_prompt = 8, .max_tokens = 2000,
                                  .ignore_eos = true};
        r[i] = submit(e, &q);
    }
    bool did;
    for (int started = 0; started < S;) {
        synthetic_cost(e, d8, p);
        step_checked(e, &did);
        started = 0;
        for (int i = 0; i < S; i++) {
            drain(r[i], &res[i]);
            started += res[i].n > 0;
        }
    }
    int32_t *lids = malloc(sizeof(int32_t) * (size_t)L);
    assert_non_null(lids);
    for (int k = 0; k < L; k++)
        lids[k] = (int32_t)(sampler_uniform(4242, (uint64_t)k) * 150000);
    struct engine_params lp = {.prompt = lids, .n_prompt = L, .max_tokens = 3};
    struct engine_req *lr = submit(e, &lp);
    struct result lres = {0};
    int steps = 0;
    while (lres.n == 0) {
        synthetic_cost(e, d8, p);
        step_checked(e, &did);
        steps++;
        assert_true(steps < 10000);
        drain(lr, &lres);
        for (int i = 0; i < S; i++)
            if (drain(r[i], &res[i]) != 1)
                fail_msg("stream %d got no token in step %d of the long prompt", i, steps);
    }
    while (!lres.finish) {
        step_checked(e, &did);
        drain(lr, &lres);
    }
    engine_req_release(lr);
    for (int i = 0; i < S; i++)
        engine_req_release(r[i]);
    struct ll_err err = {0};
    assert_int_equal(engine_run_until_idle(e, &err), LL_OK);
    engine_destroy(e);

    /* alone, all at once: the same tokens */
    struct engine *a = make_engine_on(FIXTURE, (struct engine_opts){.max_batch_tokens = 4096});
    struct engine_req *ar = submit(a, &lp);
    struct result alone = {0};
    while (!alone.finish) {
        step_checked(a, &did);
        drain(ar, &alone);
    }
    engine_req_release(ar);
    engine_destroy(a);
    assert_int_equal(alone.n, lres.n);
    assert_memory_equal(alone.ids, lres.ids, sizeof(int32_t) * (size_t)lres.n);
    free(lids);
    return steps;
}

/* Drafts and the features that bound them: a constrained request (a grammar) gets no drafts,
 * so its output is the one without --spec while an unconstrained twin beside it drafts; a
 * session turn (pin_key) drafts, pins only blocks of accepted tokens (the same count as without
 * drafts), and its next turn finds the same cached prefix and gives the same answer. */
static void run_pinned(enum engine_spec spec, struct result *res, int *pinned)
{
    struct engine_opts o = {.max_seqs = 4, .block_size = 16, .spec = spec,
                            .spec_max_draft = 5};
    struct engine *e = make_engine_on(copy_model, o);
    engine_set_pin_limit(e, 64);
    int32_t ids[160];
    cycle_prompt(ids, 40, 2000, 0);
    struct engine_params p = {.prompt = ids, .n_prompt = 40, .max_tokens = 50, .ignore_eos = true,
                              .pin_key = 9, .logprobs = true};
    for (int turn = 0; turn < 2; turn++) {
        if (turn == 1) { /* prompt + answer + a few more: the pinned prefix is reused */
            memcpy(ids + 40, res[0].ids, sizeof(int32_t) * (size_t)res[0].n);
            cycle_prompt(ids + 40 + res[0].n, 7, 2000, 3);
            p.n_prompt = 40 + res[0].n + 7;
            p.max_tokens = 30;
        }
        struct engine_req *r = submit(e, &p);
        bool did;
        while (!res[turn].finish) {
            step_checked(e, &did);
            drain(r, &res[turn]);
        }
        engine_req_release(r);
        pinned[turn] = engine_pinned_blocks(e, 9);
    }
    engine_destroy(e);
}

static void test_spec_grammar_and_pins(void **state)
{
    (void)state;
    struct gbuild *b = gbuild_new();
    assert_non_null(b);
    int root = grammar_json_any_object(b);
    struct grammar *g = NULL;
    struct ll_err err = {0};
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    enum { N = 2 };
    struct engine_params p[N];
    int32_t ids[N][32];
    for (int i = 0; i < N; i++) {
        cycle_prompt(ids[i], 32, 400, 0); /* a repeating prompt: a match at once */
        p[i] = (struct engine_params){.prompt = ids[i], .n_prompt = 32, .max_tokens = 40,
                                      .logprobs = true, .grammar = i == 0 ? g : NULL};
    }
    struct result off[N], on[N];
    struct engine_opts o = {.max_seqs = 4, .spec_max_draft = 5};
    run_all(copy_model, o, ENGINE_SPEC_OFF, p, N, off, 0, NULL);
    for (enum engine_spec m = ENGINE_SPEC_NGRAM; m <= ENGINE_SPEC_NGRAM_ALWAYS; m++) {
        run_all(copy_model, o, m, p, N, on, 0, NULL);
        for (int i = 0; i < N; i++)
            same_result(&off[i], &on[i], i);
        assert_int_equal(on[0].usage.spec_drafted, 0);
        assert_true(on[1].usage.spec_accepted > 10);
    }
    assert_true(off[0].n > 0 && off[0].text[0] == '{'); /* the grammar did constrain it */
    grammar_unref(g);

    struct result poff[2] = {0}, pon[2] = {0};
    int pin_off[2], pin_on[2];
    run_pinned(ENGINE_SPEC_OFF, poff, pin_off);
    run_pinned(ENGINE_SPEC_NGRAM_ALWAYS, pon, pin_on);
    for (int t = 0; t < 2; t++) {
        same_result(&poff[t], &pon[t], t);
        assert_int_equal(pin_off[t], pin_on[t]);
    }
    assert_true(pon[0].usage.spec_accepted > 20);
    assert_true(pon[1].usage.cached_tokens >= 80); /* the pinned turn */
    assert_int_equal(pin_on[0], (40 + 50 - 1) / 16);
}

/* One stream decodes; 7 prompts of 64 tokens arrive at once (max_seqs 8). Returns the steps
 * until each has its first token, checking that the stream got a token in every step. */
static int rampup_steps(int ratio)
{
    enum { Q = 7, L = 64 };
    struct engine_opts o = {.max_seqs = Q + 1, .max_batch_tokens = 256, .itl_target_ms = 500,
                            .itl_max_ratio = ratio, .kv_blocks = 256};
    struct engine *e = make_engine_on(FIXTURE, o);
    int32_t ids[Q + 1][L];
    for (int i = 0; i <= Q; i++)
        for (int k = 0; k < L; k++)
            ids[i][k] = (int32_t)(sampler_uniform(700 + (uint64_t)i, (uint64_t)k) * 150000);
    struct engine_params sp = {.prompt = ids[Q], .n_prompt = 8, .max_tokens = 2000,
                               .ignore_eos = true};
    struct engine_req *s = submit(e, &sp), *r[Q];
    struct result sres = {0}, res[Q];
    memset(res, 0, sizeof res);
    bool did;
    while (sres.n == 0) {
        step_checked(e, &did);
        drain(s, &sres);
    }
    for (int i = 0; i < Q; i++) {
        struct engine_params q = {.prompt = ids[i], .n_prompt = L, .max_tokens = 2000,
                                  .ignore_eos = true};
        r[i] = submit(e, &q);
    }
    int steps = 0;
    for (int started = 0; started < Q;) {
        synthetic_cost(e, 0.25, 1 / 128.0);
        step_checked(e, &did);
        steps++;
        assert_true(steps < 10000);
        if (drain(s, &sres) != 1)
            fail_msg("the stream got no token in step %d", steps);
        started = 0;
        for (int i = 0; i < Q; i++) {
            drain(r[i], &res[i]);
            started += res[i].n > 0;
        }
    }
    for (int i = 0; i < Q; i++) {
        engine_cancel(r[i]);
        engine_req_release(r[i]);
    }
    engine_cancel(s);
    engine_req_release(s);
    struct ll_err err = {0};
    assert_int_equal(engine_run_until_idle(e, &err), LL_OK);
    engine_destroy(e);
    return steps;
}

static void test_chunk_budget(void **state)
{
    (void)state;
    /* 8 decode rows take 0.25 s, a prompt token 1/128 s, target 500 ms: the step may take
     * 1.6 times a decode step of the 9 rows the batch is heading for, 1.6 · (0.25 + 1/128) s
     * (not the target's 0.5 s), so 20 tokens a step (the token budget would allow 248), and 600
     * tokens take 30 steps */
    assert_int_equal(long_prompt_steps(500, 0, 0.25, 1 / 128.0, 600), 30);
    /* with --itl-max-ratio 100000 the target alone: 32 tokens a step, 19 steps */
    assert_int_equal(long_prompt_steps(500, 100000, 0.25, 1 / 128.0, 600), 19);
    /* a target below 1.6x: 0.4 s, 19 tokens a step, 32 steps */
    assert_int_equal(long_prompt_steps(400, 0, 0.25, 1 / 128.0, 600), 32);
    /* a machine twice as slow under the same target: the decode rows alone take it all, and
     * the prompt keeps share · 0.5 s = 0.25 s of each step, 16 tokens: 38 steps */
    assert_int_equal(long_prompt_steps(500, 0, 0.5, 1 / 64.0, 600), 38);
    /* chunks that never fit (a prompt token costs a second): after 3 steps without a prompt
     * token the minimum chunk, 16 tokens: 600 tokens = 38 chunks, the first token at step 152 */
    assert_int_equal(long_prompt_steps(1, 0, 0.25, 1.0, 600), 152);
    /* prompts queued behind a lone stream: the reference is the batch of 8 they make (0.25 s),
     * not the stream's own 1/32 s step, so the first step takes 26 tokens (F(27) <= 1.6 · 0.25),
     * and all 7 have started after 20 steps (with the stream's own step as the reference,
     * 16-token chunks after starved steps: 147 steps at --itl-max-ratio 190) */
    assert_int_equal(rampup_steps(0), 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_draft),
        cmocka_unit_test(test_spec_policy),
        cmocka_unit_test(test_step_cost),
        cmocka_unit_test(test_spec_identical),
        cmocka_unit_test(test_spec_preemption),
        cmocka_unit_test(test_spec_prefix_cache),
        cmocka_unit_test(test_spec_cancel),
        cmocka_unit_test(test_spec_grammar_and_pins),
        cmocka_unit_test(test_chunk_budget),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
