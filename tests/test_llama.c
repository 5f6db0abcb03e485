/*
 * test_llama.c: the Llama family (model_type "llama": Llama 3.x, DeepSeek-R1-Distill-Llama)
 * against llama.cpp, an independent implementation, on the same weights.
 *
 * tests/fixtures/tiny-llama.llamacpp.json holds llama.cpp's logits for a random tiny Llama
 * (mkmodel, as its "mkmodel" field says: hidden 64, 4 heads over 2 KV heads, untied lm_head,
 * the Llama 3 vocabulary's 128256 rows, rope_scaling "llama3" with factor 8 over an original
 * 256 positions, so that its three bands of frequencies all occur in a head of 16): every
 * position of two prompts (a chat turn of 19 tokens and 361 tokens of prose), llama.cpp's top 8
 * tokens and 9 fixed ones each. The test regenerates the same weights (checked against the
 * fixture's samples of the file: a changed generator fails here, not as a parity failure), runs
 * them through the engine's forward pass and compares: exact path within 2e-5 of the logit
 * scale, top-1 equal wherever llama.cpp's margin exceeds twice that; fast path within 1 %.
 * Without the rope scaling (config.json's rope_scaling null) the long prompt is far off, so the
 * parity depends on it. Then config.json's refusals (attention_bias, mlp_bias) name the field
 * (the rope_scaling kinds' own are in test_rope_scaling.c).
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
#include <unistd.h>

#include "dtype.h"
#include "llamacpp_ref.h"
#include "config_edit.h"
#include "mkmodel.h"
#include "model_tmp.h"
#include "model.h"
#include "model_config.h"
#include "ops.h"
#include "runtime.h"
#include "util.h"

#define FIXTURE "tests/fixtures/tiny-llama.llamacpp.json"

static char dir[64];
static cJSON *fixture;

/* The fixture's model, as its "mkmodel" field writes it. */
static struct mkmodel_spec llama_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_LLAMA;
    s.vocab_size = 128256;
    s.tied = false;
    s.rope_theta = 10000.0;
    s.rope_factor = 8.0, s.rope_original_max = 256;
    s.seed = 7;
    s.bos_token_id = 128000, s.eos_token_id = 128009;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = llama_spec();
    return llamacpp_group_setup(&fixture, FIXTURE, dir, sizeof dir, "llama", &s);
}

static int group_teardown(void **state)
{
    (void)state;
    return llamacpp_group_teardown(fixture, dir);
}

/* The generated weights are the ones llama.cpp ran: the fixture's samples of each tensor. */
static void test_weights_are_the_fixtures(void **state)
{
    (void)state;
    llamacpp_check_weights(fixture, dir, 63); /* three of each of the 21 tensors */
}

static void test_llama_cpp_parity(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    assert_string_equal(m->config.model_type, "llama");
    assert_int_equal(m->config.rope_scaling.kind, MODEL_ROPE_LLAMA3);
    llamacpp_compare_prompts(m, fixture, 2e-5, 0.01, NULL);
    model_close(m);
}

/* Rewrite config.json's text of the model under test (config_edit.h). */
static void edit(const char *from, const char *to)
{
    char m[96];
    snprintf(m, sizeof m, "%s/m", dir);
    config_edit(m, from, to);
}

#define SCALING                                                                                    \
    "{\n    \"factor\": 8.0,\n    \"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n"     \
    "    \"original_max_position_embeddings\": 256,\n    \"rope_type\": \"llama3\"\n  }"

/* Plain RoPE over the same weights: the long prompt is far from llama.cpp's. */
static void test_rope_scaling_matters(void **state)
{
    (void)state;
    edit("\"rope_scaling\": " SCALING, "\"rope_scaling\": null");
    struct model *m = model_tmp_open(dir, NULL);
    assert_int_equal(m->config.rope_scaling.kind, MODEL_ROPE_DEFAULT);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 1);
    double off = llamacpp_compare(m, LL_MATH_EXACT, p, 0, "long, no rope scaling");
    printf("  without rope_scaling the long prompt is off by %.2e of the scale\n", off);
    assert_true(off > 1e-3);
    model_close(m);
    edit("\"rope_scaling\": null", "\"rope_scaling\": " SCALING);
}

/* The three bands of "llama3": kept, divided by the factor, and between them. */
static void test_inv_freq_bands(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const struct model_config *c = &m->config;
    double f[8];
    assert_int_equal(c->head_dim, 16);
    model_rope_inv_freq(c, 4096, f);
    int kept = 0, divided = 0, between = 0;
    for (int i = 0; i < 8; i++) {
        double plain = pow(10000.0, -2.0 * i / 16), wavelen = 2 * M_PI / plain;
        if (wavelen < 256 / 4.0) {
            assert_true(f[i] == plain);
            kept++;
        } else if (wavelen > 256 / 1.0) {
            assert_true(fabs(f[i] - plain / 8) <= 1e-15 * plain);
            divided++;
        } else {
            assert_true(f[i] < plain && f[i] > plain / 8);
            between++;
        }
        if (i)
            assert_true(f[i] < f[i - 1]); /* still decreasing */
    }
    assert_true(kept > 0 && divided > 0 && between > 0);
    model_close(m);
}

static void test_config_refusals(void **state)
{
    (void)state;
    /* MLP biases are not in this decoder; attention_bias true would put biases on o_proj too
     * (the llama bind refuses it) */
    static const char *const cases[][3] = {
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
    };
    char path[96];
    snprintf(path, sizeof path, "%s/m", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        edit(cases[i][0], cases[i][1]);
        struct model *m = NULL;
        struct ll_err err = {0};
        assert_int_equal(model_open(&m, path, NULL, &err), LL_EUNSUPPORTED);
        assert_null(m);
        if (!strstr(err.msg, cases[i][2]))
            fail_msg("message '%s' does not name '%s'", err.msg, cases[i][2]);
        edit(cases[i][1], cases[i][0]);
    }
    model_close(model_tmp_open(dir, NULL)); /* and back as it was, it loads */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_are_the_fixtures), cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_rope_scaling_matters),     cmocka_unit_test(test_inv_freq_bands),
        cmocka_unit_test(test_config_refusals),
    };
    return cmocka_run_group_tests_name("llama", tests, group_setup, group_teardown);
}
