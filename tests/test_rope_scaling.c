/*
 * test_rope_scaling.c: config.json's rope_scaling (model_config.h, rope_freq.c): which kinds
 * and members are read and which are refused by name, the bands of "llama3" and "yarn", and
 * "yarn" against llama.cpp, an independent implementation, on the same weights.
 *
 * tests/fixtures/tiny-qwen2-yarn.llamacpp.json holds llama.cpp's logits for
 * tests/fixtures/tiny-qwen2 (head dim 16, θ 10000) with rope_scaling {"type": "yarn",
 * "factor": 4, "original_max_position_embeddings": 64}: over 64 original positions the pairs
 * of a head fall in all three bands (pair 0 kept, 1 and 2 on the ramp, 3 to 7 divided by 4) and
 * cos and sin are scaled by 0.1 ln 4 + 1. Every position of 368 tokens of prose: exact path
 * within 2e-5 of the logit scale, top-1 equal where llama.cpp's margin exceeds twice that; fast
 * path within 1 %; without the scaling far off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llamacpp_ref.h"
#include "model_tmp.h"
#include "model.h"
#include "model_config.h"
#include "util.h"

#define QWEN2 "tests/fixtures/tiny-qwen2"
#define FIXTURE "tests/fixtures/tiny-qwen2-yarn.llamacpp.json"
#define YARN                                                                                       \
    "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "                                     \
    "\"original_max_position_embeddings\": 64},\n  "

static char dir[64];
static cJSON *fixture;

/* dir/m: tiny-qwen2's files, its config.json with `extra` put first in the object. */
static void write_model(const char *extra)
{
    static const char *const files[] = {"generation_config.json", "model.safetensors",
                                        "tokenizer.json", "tokenizer_config.json"};
    char from[128], to[128], *text;
    size_t len;
    struct ll_err err = {0};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(from, sizeof from, "%s/%s", QWEN2, files[i]);
        snprintf(to, sizeof to, "%s/m/%s", dir, files[i]);
        assert_int_equal(ll_read_file(from, &text, &len, &err), LL_OK);
        assert_int_equal(ll_write_file(to, text, len, &err), LL_OK);
        free(text);
    }
    assert_int_equal(ll_read_file(QWEN2 "/config.json", &text, &len, &err), LL_OK);
    const char *brace = strchr(text, '{');
    assert_non_null(brace);
    char *out = malloc(len + strlen(extra) + 8);
    sprintf(out, "{\n  %s%s", extra, brace + 1);
    snprintf(to, sizeof to, "%s/m/config.json", dir);
    assert_int_equal(ll_write_file(to, out, strlen(out), &err), LL_OK);
    free(out);
    free(text);
}

static int group_setup(void **state)
{
    (void)state;
    return llamacpp_group_setup(&fixture, FIXTURE, dir, sizeof dir, "rope", NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return llamacpp_group_teardown(fixture, dir);
}

static void test_yarn_llama_cpp_parity(void **state)
{
    (void)state;
    write_model(YARN);
    struct model *m = model_tmp_open(dir, NULL);
    assert_int_equal(m->config.rope_scaling.kind, MODEL_ROPE_YARN);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 0);
    llamacpp_compare(m, LL_MATH_EXACT, p, 2e-5, "yarn exact");
    llamacpp_compare(m, LL_MATH_FAST, p, 0.01, "yarn fast");
    model_close(m);
}

/* Without the scaling, or with the frequencies but not the attention factor, far off. */
static void test_yarn_matters(void **state)
{
    (void)state;
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 0);
    write_model("");
    struct model *m = model_tmp_open(dir, NULL);
    double off = llamacpp_compare(m, LL_MATH_EXACT, p, 0, "no rope_scaling");
    printf("  without rope_scaling: off by %.2e of the scale\n", off);
    assert_true(off > 1e-3);
    model_close(m);
    write_model("\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
                "\"original_max_position_embeddings\": 64, \"attention_factor\": 1.0},\n  ");
    m = model_tmp_open(dir, NULL);
    off = llamacpp_compare(m, LL_MATH_EXACT, p, 0, "yarn, attention factor 1");
    printf("  yarn with attention_factor 1: off by %.2e of the scale\n", off);
    assert_true(off > 1e-3);
    model_close(m);
}

static struct model_config parse(const char *json)
{
    struct model_config c;
    struct ll_err err = {0};
    if (model_config_parse(&c, json, strlen(json), "config.json", &err) != LL_OK)
        fail_msg("%s: %s", json, err.msg);
    return c;
}

#define BASE                                                                                       \
    "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 160, "                \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1000, "                 \
    "\"max_position_embeddings\": 4096"

#define F8 "[1, 1.25, 1.5, 2, 3, 5, 8, 13]"

/* longrope (Phi-3): each frequency divided by its own factor, short_factor's while the context
 * fits the original one, long_factor's past it, and cos and sin scaled by
 * sqrt(1 + ln(max / original) / ln(original)) unless attention_factor is given; with
 * partial_rotary_factor the exponents run over the rotated dims only. */
static void test_longrope(void **state)
{
    (void)state;
    double f[8];
    struct model_config c =
        parse("{\"model_type\": \"phi3\", \"hidden_size\": 64, \"intermediate_size\": 160, "
              "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1000, "
              "\"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096, "
              "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1, 1, 1, 1, "
              "1, 1, 2], \"long_factor\": " F8 "}}");
    assert_int_equal(c.rope_scaling.kind, MODEL_ROPE_LONGROPE);
    assert_int_equal(c.rope_scaling.original_max_position, 4096);
    const double af = sqrt(1 + log(32.0) / log(4096.0)); /* 131072 / 4096 = 32 */
    const double lf[8] = {1, 1.25, 1.5, 2, 3, 5, 8, 13};
    assert_true(fabs(model_rope_inv_freq(&c, 4096, f) - af) < 1e-15);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(f[i] - pow(10000.0, -2.0 * i / 16) / (i == 7 ? 2 : 1)) <= 1e-16);
    assert_true(fabs(model_rope_inv_freq(&c, 4097, f) - af) < 1e-15);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(f[i] - pow(10000.0, -2.0 * i / 16) / lf[i]) <= 1e-16);
    /* a given attention_factor; no original context: the factor of rope_scaling, here 1 */
    c = parse(BASE ", \"rope_scaling\": {\"type\": \"su\", \"short_factor\": " F8
                   ", \"long_factor\": " F8 ", \"attention_factor\": 1.5}}");
    assert_true(model_rope_inv_freq(&c, 4096, f) == 1.5);
    c = parse(BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": " F8
                   ", \"long_factor\": " F8 "}}");
    assert_true(model_rope_inv_freq(&c, 4096, f) == 1.0);
    /* partial rotary: 12 of 16 dims turn, theta^(-2i/12) over 6 pairs */
    c = parse(BASE ", \"partial_rotary_factor\": 0.75, \"rope_scaling\": {\"type\": "
                   "\"longrope\", \"short_factor\": [1, 1, 1, 1, 1, 4], \"long_factor\": [2, 2, 2, "
                   "2, 2, 2]}}");
    assert_int_equal(c.rope_dim, 12);
    model_rope_inv_freq(&c, 100, f);
    for (int i = 0; i < 6; i++)
        assert_true(fabs(f[i] - pow(10000.0, -2.0 * i / 12) / (i == 5 ? 4 : 1)) <= 1e-16);
}

/* The bands: yarn's pairs by rotations over the original context, llama3's by wavelength. */
static void test_bands(void **state)
{
    (void)state;
    double f[8];
    struct model_config c = parse(BASE ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
                                       "\"original_max_position_embeddings\": 64}}");
    assert_int_equal(c.head_dim, 16);
    double scale = model_rope_inv_freq(&c, 4096, f);
    assert_true(fabs(scale - (0.1 * log(4.0) + 1.0)) < 1e-15);
    for (int i = 0; i < 8; i++) {
        double plain = pow(10000.0, -2.0 * i / 16);
        /* the band: pairs floor(0.99...)=-1 -> 0 to ceil(2.016) = 3 */
        double w = i <= 0 ? 0 : i >= 3 ? 1 : i / 3.0; /* weight of the divided frequency */
        double want = plain / 4 * w + plain * (1 - w);
        if (fabs(f[i] - want) > 1e-15 * plain)
            fail_msg("yarn pair %d: %.17g, want %.17g", i, f[i], want);
    }
    /* attention_factor given: used as it is; the original context defaults to
     * max_position_embeddings (4096 here: the band moves up) */
    c = parse(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2.0, "
                   "\"attention_factor\": 0.5}}");
    assert_int_equal(c.rope_scaling.original_max_position, 4096);
    assert_true(model_rope_inv_freq(&c, 4096, f) == 0.5);
    assert_true(f[0] == 1.0 && f[7] < pow(10000.0, -14.0 / 16));
    /* linear: every frequency divided; llama3 at a context too short for its bands: kept */
    c = parse(BASE ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}");
    assert_true(model_rope_inv_freq(&c, 4096, f) == 1.0);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(f[i] - pow(10000.0, -2.0 * i / 16) / 2) <= 1e-16);
    c = parse(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                   "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                   "\"original_max_position_embeddings\": 1000000000}}");
    model_rope_inv_freq(&c, 4096, f);
    for (int i = 0; i < 8; i++)
        assert_true(f[i] == pow(10000.0, -2.0 * i / 16));
    c = parse(BASE "}");
    assert_int_equal(c.rope_scaling.kind, MODEL_ROPE_DEFAULT);
    assert_true(model_rope_inv_freq(&c, 4096, f) == 1.0 && f[1] == pow(10000.0, -2.0 / 16));
}

/* config.json refusals, each naming what it refuses. */
static void expect_config(const char *json, enum ll_status want, const char *needle)
{
    struct model_config c;
    struct ll_err err = {0};
    enum ll_status s = model_config_parse(&c, json, strlen(json), "config.json", &err);
    if (s != want)
        fail_msg("%s: status %d, want %d (%s)", json, s, want, err.msg);
    if (needle && !strstr(err.msg, needle))
        fail_msg("message '%s' does not name '%s'", err.msg, needle);
}

static void test_config(void **state)
{
    (void)state;
    expect_config(BASE ", \"rope_scaling\": null}", LL_OK, NULL);
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"default\"}}", LL_OK, NULL);
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}",
                  LL_EUNSUPPORTED, "\"dynamic\"");
    /* longrope: both lists of head_dim / 2 (rotary dims / 2) positive numbers */
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2.0}}",
                  LL_EMODEL, "short_factor");
    expect_config(BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": " F8
                       ", \"long_factor\": [1, 2, 3]}}",
                  LL_EMODEL, "long_factor must be a list of 8 numbers");
    expect_config(BASE ", \"rope_scaling\": {\"type\": \"su\", \"short_factor\": " F8
                       ", \"long_factor\": [1, 2, 3, 4, 5, 6, 7, 0]}}",
                  LL_EMODEL, "long_factor[7]");
    expect_config(BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": " F8
                       ", \"long_factor\": " F8 ", \"mscale\": 1}}",
                  LL_EUNSUPPORTED, "mscale");
    expect_config(BASE ", \"partial_rotary_factor\": 0.75, \"rope_scaling\": {\"type\": "
                       "\"longrope\", \"short_factor\": " F8 ", \"long_factor\": " F8 "}}",
                  LL_EMODEL, "list of 6 numbers");
    expect_config(BASE ", \"partial_rotary_factor\": 0.1}", LL_EMODEL, "partial_rotary_factor");
    expect_config(BASE ", \"partial_rotary_factor\": 1.5}", LL_EMODEL, "partial_rotary_factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}", LL_OK,
                  NULL);
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"linear\"}}", LL_EMODEL, "factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}}", LL_EMODEL,
                  "factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}}",
                  LL_EMODEL, "high_freq_factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0, "
                       "\"original_max_position_embeddings\": 8192}}",
                  LL_EMODEL, "low_freq_factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}}",
                  LL_EMODEL, "original_max_position_embeddings");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192, \"attention_factor\": 2}}",
                  LL_EUNSUPPORTED, "attention_factor");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"type\": \"linear\", "
                       "\"factor\": 8.0}}",
                  LL_EMODEL, "disagree");
    expect_config(BASE ", \"rope_scaling\": 3}", LL_EMODEL, "rope_scaling");
    expect_config(BASE ", \"rope_scaling\": {\"factor\": 3}}", LL_EMODEL, "rope_type");
    /* yarn: Qwen's published form; members that would change its math are refused by name */
    expect_config(BASE ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
                       "\"original_max_position_embeddings\": 32768}}",
                  LL_OK, NULL);
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                       "\"mscale\": 0.707, \"mscale_all_dim\": 0.707}}",
                  LL_EUNSUPPORTED, "mscale");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                       "\"truncate\": false}}",
                  LL_EUNSUPPORTED, "truncate");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                       "\"beta_fast\": 1, \"beta_slow\": 32}}",
                  LL_EMODEL, "beta_slow");
    expect_config(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\"}}", LL_EMODEL, "factor");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yarn_llama_cpp_parity),
        cmocka_unit_test(test_yarn_matters),
        cmocka_unit_test(test_bands),
        cmocka_unit_test(test_longrope),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests_name("rope_scaling", tests, group_setup, group_teardown);
}
