/* test_gen_params.c: the one default policy of sampling parameters (gen_params.h): what the
 * caller gave wins, else generation_config.json's value, else the neutral one; do_sample false
 * makes the default greedy; the random seed. Includes the cases where the server, `batch` and
 * `generate` used to disagree, each pinned to the value the policy gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "gen_params.h"

/* generation_config.json of DeepSeek-R1-Distill-Qwen and Qwen2.5-Instruct together */
static const struct generation_defaults full = {
    .has_temperature = true, .temperature = 0.6f, .has_top_p = true, .top_p = 0.95f,
    .has_top_k = true, .top_k = 20, .has_do_sample = true, .do_sample = true,
    .has_min_p = true, .min_p = 0.05f, .has_repetition_penalty = true,
    .repetition_penalty = 1.05f, .bos_token_id = -1};

static struct engine_params resolve(const struct gen_settings *s,
                                    const struct generation_defaults *g)
{
    struct engine_params p = {0};
    gen_params_resolve(&p, s, g);
    return p;
}

/* Nothing given, no generation_config: every field neutral, temperature 1 (vLLM / OpenAI). */
static void test_neutral_defaults(void **state)
{
    (void)state;
    struct gen_settings s = {0};
    struct generation_defaults none = {.bos_token_id = -1};
    struct engine_params p = resolve(&s, &none);
    assert_float_equal(p.sampling.temperature, 1, 0);
    assert_float_equal(p.sampling.top_p, 1, 0);
    assert_int_equal(p.sampling.top_k, 0);
    assert_float_equal(p.sampling.min_p, 0, 0);
    assert_float_equal(p.penalties.repetition, 1, 0);
    assert_float_equal(p.penalties.presence, 0, 0);
    assert_float_equal(p.penalties.frequency, 0, 0);
    /* `generate` used to be greedy with top_k 50 here (transformers' defaults) */
    assert_false(sampler_penalties_active(&p.penalties));
}

/* Nothing given: generation_config's sampling fields apply, min_p and repetition_penalty
 * included (`generate` used to ignore those two). */
static void test_config_defaults(void **state)
{
    (void)state;
    struct gen_settings s = {0};
    struct engine_params p = resolve(&s, &full);
    assert_float_equal(p.sampling.temperature, 0.6, 1e-6);
    assert_float_equal(p.sampling.top_p, 0.95, 1e-6);
    assert_int_equal(p.sampling.top_k, 20);
    assert_float_equal(p.sampling.min_p, 0.05, 1e-6);
    assert_float_equal(p.penalties.repetition, 1.05, 1e-6);
    assert_float_equal(p.penalties.presence, 0, 0);
}

/* Every field given: the caller wins over generation_config, field by field. */
static void test_caller_wins(void **state)
{
    (void)state;
    struct gen_settings s = {
        .has_temperature = true, .temperature = 1.5f, .has_top_p = true, .top_p = 0.5f,
        .has_top_k = true, .top_k = 7, .has_min_p = true, .min_p = 0.2f,
        .has_repetition_penalty = true, .repetition_penalty = 1.3f, .has_seed = true,
        .seed = UINT64_MAX, .presence_penalty = -0.5f, .frequency_penalty = 1.5f};
    struct engine_params p = resolve(&s, &full);
    assert_float_equal(p.sampling.temperature, 1.5, 1e-6);
    assert_float_equal(p.sampling.top_p, 0.5, 1e-6);
    assert_int_equal(p.sampling.top_k, 7);
    assert_float_equal(p.sampling.min_p, 0.2, 1e-6);
    assert_float_equal(p.penalties.repetition, 1.3, 1e-6);
    assert_float_equal(p.penalties.presence, -0.5, 1e-6);
    assert_float_equal(p.penalties.frequency, 1.5, 1e-6);
    assert_true(p.sampling.seed == UINT64_MAX);
    /* a given 0 or -1 top_k turns top-k off even when generation_config sets one; a given
     * temperature 0 is greedy even when generation_config samples */
    struct gen_settings off = {.has_top_k = true, .top_k = -1, .has_temperature = true};
    p = resolve(&off, &full);
    assert_int_equal(p.sampling.top_k, 0);
    assert_float_equal(p.sampling.temperature, 0, 0);
    off.top_k = 0;
    assert_int_equal(resolve(&off, &full).sampling.top_k, 0);
}

/* do_sample: false makes the default greedy; it touches nothing else. */
static void test_do_sample(void **state)
{
    (void)state;
    struct generation_defaults g = full;
    g.do_sample = false;
    struct gen_settings s = {0};
    struct engine_params p = resolve(&s, &g);
    assert_float_equal(p.sampling.temperature, 0, 0);
    /* a caller's temperature samples, with generation_config's top_p / top_k / min_p (the
     * server's behaviour; `batch` used to drop them whenever do_sample was false) */
    s.has_temperature = true;
    s.temperature = 0.8f;
    p = resolve(&s, &g);
    assert_float_equal(p.sampling.temperature, 0.8, 1e-6);
    assert_float_equal(p.sampling.top_p, 0.95, 1e-6);
    assert_int_equal(p.sampling.top_k, 20);
    assert_float_equal(p.sampling.min_p, 0.05, 1e-6);
    /* do_sample absent: generation_config's temperature, else 1 (`generate` used to be greedy
     * when the file had no do_sample) */
    g = full;
    g.has_do_sample = false;
    s = (struct gen_settings){0};
    assert_float_equal(resolve(&s, &g).sampling.temperature, 0.6, 1e-6);
    g.has_temperature = false;
    assert_float_equal(resolve(&s, &g).sampling.temperature, 1, 0);
    /* do_sample true without a temperature: 1 */
    g.has_do_sample = g.do_sample = true;
    assert_float_equal(resolve(&s, &g).sampling.temperature, 1, 0);
}

/* No seed given: a fresh one each time, of 53 bits (exact as a JSON number). */
static void test_random_seed(void **state)
{
    (void)state;
    struct gen_settings s = {0};
    uint64_t a = resolve(&s, &full).sampling.seed, b = resolve(&s, &full).sampling.seed;
    assert_true(a < (1ull << 53) && b < (1ull << 53));
    assert_true(a != b); /* equal with probability 2^-53 */
    s.has_seed = true;
    s.seed = 0;
    assert_true(resolve(&s, &full).sampling.seed == 0);
}

/* Only the sampling parameters and penalties are written. */
static void test_other_fields_kept(void **state)
{
    (void)state;
    static const int32_t prompt[2] = {1, 2};
    static const char *const stop[1] = {"x"};
    struct engine_params p = {.prompt = prompt, .n_prompt = 2, .max_tokens = 5, .min_tokens = 2,
                              .stop = stop, .n_stop = 1, .ignore_eos = true, .logprobs = true,
                              .top_logprobs = 3, .choice = 4};
    struct gen_settings s = {0};
    gen_params_resolve(&p, &s, &full);
    assert_ptr_equal(p.prompt, prompt);
    assert_ptr_equal(p.stop, stop);
    assert_int_equal(p.n_prompt, 2);
    assert_int_equal(p.max_tokens, 5);
    assert_int_equal(p.min_tokens, 2);
    assert_int_equal(p.n_stop, 1);
    assert_int_equal(p.top_logprobs, 3);
    assert_int_equal(p.choice, 4);
    assert_true(p.ignore_eos && p.logprobs && !p.keep_special && !p.reasoning);
    assert_null(p.logit_bias);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_neutral_defaults), cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_caller_wins),      cmocka_unit_test(test_do_sample),
        cmocka_unit_test(test_random_seed),      cmocka_unit_test(test_other_fields_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
