/*
 * test_granite.c: the Granite family (model_type "granite": IBM Granite 3.x, Llama's layer with
 * four multipliers) against llama.cpp, an independent implementation, on the same weights, and
 * against the float64 reference written from transformers' definition (ref_forward.h).
 *
 * The multipliers: the embedding rows times embedding_multiplier, q·k times
 * attention_multiplier (instead of 1/√head_dim), each sub-layer's output times
 * residual_multiplier before it joins the residual stream, the logits divided by
 * logits_scaling. tests/fixtures/tiny-granite.llamacpp.json holds llama.cpp's logits for a
 * random tiny Granite (its "mkmodel" field: hidden 64, 4 heads over 2 KV heads, tied, the
 * multipliers mkmodel writes by default: 12, 1/16, 0.22, 8) for every position of a chat turn and
 * of 381 tokens of prose. Each multiplier matters: set to 1, the logits move far past the
 * tolerance. Through the engine, the model keeps the determinism guarantees (alone = batched =
 * preempted = prefix-cached), dense and quantized.
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

#include "config_edit.h"
#include "engine_harness.h"
#include "llamacpp_ref.h"
#include "mkmodel.h"
#include "model.h"
#include "model_config.h"
#include "model_tmp.h"
#include "ref_forward.h"

#define LLAMACPP_FIXTURE "tests/fixtures/tiny-granite.llamacpp.json"

static char dir[64], dirl[64], dire[64], eng_model[96];
static cJSON *fixture;

/* The llama.cpp fixture's model, as its "mkmodel" field writes it. */
static struct mkmodel_spec fixture_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_GRANITE;
    s.vocab_size = 151936;
    s.seed = 7;
    s.bos_token_id = 151646, s.eos_token_id = 151643;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = fixture_spec(), sl = fixture_spec(), se = fixture_spec();
    s.vocab_size = 1024, s.n_layers = 3, s.tied = false, s.seed = 5;
    s.bos_token_id = 1, s.eos_token_id = 2;
    s.multipliers[0] = 10.0, s.multipliers[1] = 0.05, s.multipliers[2] = 0.3;
    s.multipliers[3] = 4.0;
    se.n_layers = 3;
    /* for the engine: the R1 tokenizer (the harness's prompts use ids up to 150000) */
    if (model_tmp_make(dir, sizeof dir, "granite", &s) ||
        model_tmp_make_tok(dire, sizeof dire, "granitee", &se,
                           "models/deepseek-r1-distill-qwen-tokenizer") ||
        llamacpp_group_setup(&fixture, LLAMACPP_FIXTURE, dirl, sizeof dirl, "granitecpp", &sl))
        return -1;
    snprintf(eng_model, sizeof eng_model, "%s/m", dire);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dir) | model_tmp_remove(dire) |
           llamacpp_group_teardown(fixture, dirl);
}

static const int32_t prompt[] = {1,   900, 17, 256, 3,   3,  3,  1000, 64, 511, 12, 77,
                                 300, 8,   9,  10,  700, 42, 42, 1023, 0,  600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

static const char *const mult_keys[4] = {"\"embedding_multiplier\": 10.0",
                                         "\"attention_multiplier\": 0.05",
                                         "\"residual_multiplier\": 0.3",
                                         "\"logits_scaling\": 4.0"};

/* config.json's multipliers read, transformers' GraniteConfig defaults where absent (1, and a
 * context of 2048), bad values refused by name; another family ignores the fields, as
 * transformers does. */
static void test_config(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "granite");
    assert_string_equal(c->architecture, "GraniteForCausalLM");
    assert_true(c->embed_mult == 10.0 && c->attn_scale == 0.05 && c->residual_mult == 0.3 &&
                c->logits_div == 4.0);
    assert_true(c->max_position == 4096 && !c->tie_word_embeddings);
    model_close(m);

    char md[96];
    snprintf(md, sizeof md, "%s/m", dir);
    config_edit(md, "\"max_position_embeddings\": 4096,", "");
    static const char *const gone[4] = {"\"x0\": 0", "\"x1\": 0", "\"x2\": 0", "\"x3\": 0"};
    for (int i = 0; i < 4; i++)
        config_edit(md, mult_keys[i], gone[i]);
    m = model_tmp_open(dir, NULL);
    c = &m->config;
    assert_true(c->embed_mult == 1.0 && c->attn_scale == 1.0 && c->residual_mult == 1.0 &&
                c->logits_div == 1.0);
    assert_int_equal(c->max_position, 2048);
    model_close(m);
    for (int i = 0; i < 4; i++)
        config_edit(md, gone[i], mult_keys[i]);
    config_edit(md, "\"mlp_bias\"", "\"max_position_embeddings\": 4096,\n  \"mlp_bias\"");

    static const struct config_refusal bad[] = {
        {"\"embedding_multiplier\": 10.0", "\"embedding_multiplier\": 0", "embedding_multiplier"},
        {"\"attention_multiplier\": 0.05", "\"attention_multiplier\": -1", "attention_multiplier"},
        {"\"residual_multiplier\": 0.3", "\"residual_multiplier\": \"0.3\"",
         "residual_multiplier"},
        {"\"logits_scaling\": 4.0", "\"logits_scaling\": 1e9", "logits_scaling"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
    };
    config_expect_refusals(md, bad, sizeof bad / sizeof bad[0]);

    /* the same fields under model_type llama: not Llama's, ignored */
    config_edit(md, "\"model_type\": \"granite\"", "\"model_type\": \"llama\"");
    config_edit(md, "\"GraniteForCausalLM\"", "\"LlamaForCausalLM\"");
    m = model_tmp_open(dir, NULL);
    c = &m->config;
    assert_true(c->embed_mult == 0 && c->attn_scale == 0 && c->residual_mult == 0 &&
                c->logits_div == 0);
    model_close(m);
    config_edit(md, "\"model_type\": \"llama\"", "\"model_type\": \"granite\"");
    config_edit(md, "\"LlamaForCausalLM\"", "\"GraniteForCausalLM\"");
}

/* The reference (exact, fast, the same bits in any chunking and thread count); each multiplier
 * set to 1 moves every position's logits. */
static void test_reference(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const int V = m->config.vocab_size;
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir);
    double *ref = ref_logits(m, (struct ref_kind){0}, prompt, NP);
    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.02, NP / 2, "granite");
    model_close(m);

    static const char *const ones[4] = {"\"embedding_multiplier\": 1.0",
                                        "\"attention_multiplier\": 1.0",
                                        "\"residual_multiplier\": 1.0", "\"logits_scaling\": 1.0"};
    float *got = malloc(sizeof(float) * NP * V);
    for (int i = 0; i < 4; i++) {
        config_edit(md, mult_keys[i], ones[i]);
        m = model_tmp_open(dir, NULL);
        ref_engine_logits(m, prompt, NP, LL_MATH_EXACT, 2, NP, got);
        model_close(m);
        config_edit(md, ones[i], mult_keys[i]);
        double scale = 0, worst = 1e30;
        for (size_t k = 0; k < (size_t)NP * V; k++)
            scale = fmax(scale, fabs(ref[k]));
        for (int t = 1; t < NP; t++) { /* the smallest change over the positions */
            double d = 0;
            for (int v = 0; v < V; v++)
                d = fmax(d, fabs(got[(size_t)t * V + v] - ref[(size_t)t * V + v]));
            worst = fmin(worst, d / scale);
        }
        printf("  with %s: every position moves by %.2e of the scale at least\n", ones[i],
               worst);
        assert_true(worst > 1e-2);
    }
    free(got), free(ref);
}

/* Against llama.cpp on the same weights. */
static void test_llama_cpp_parity(void **state)
{
    (void)state;
    llamacpp_check_weights(fixture, dirl, 60); /* three of each of the 20 tensors */
    struct model *m = model_tmp_open(dirl, NULL);
    assert_string_equal(m->config.model_type, "granite");
    llamacpp_compare_prompts(m, fixture, 2e-5, 0.014, "chat");
    model_close(m);

    /* the check is sharp: Llama's 1/√head_dim instead of the attention multiplier, or a
     * residual multiplier a little off, is far outside it */
    const cJSON *longp = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 1);
    static const struct llamacpp_edit edits[] = {
        {"\"attention_multiplier\": 0.0625", "\"attention_multiplier\": 0.25", "1/sqrt(16)"},
        {"\"residual_multiplier\": 0.22", "\"residual_multiplier\": 0.23", "a residual of 0.23"},
    };
    llamacpp_expect_off(dirl, longp, edits, sizeof edits / sizeof edits[0], 1e-4);
}

/* Through the engine: a request's tokens are the same alone, in a batch of 16 others,
 * preempted (with and without the prefix cache) and with its prompt's first blocks from the
 * prefix cache (engine_harness.h); dense, and q4_0 quantized at load. */
static void test_engine_determinism(void **state)
{
    (void)state;
    assert_family_deterministic(eng_model, 4242, 7, 2, "q4_0");
}

static void test_presets(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "granite3-2b", &err), LL_OK);
    assert_true(s.family == MKMODEL_GRANITE && s.hidden_size == 2048 && s.n_layers == 40 &&
                s.n_heads == 32 && s.n_kv_heads == 8 && s.intermediate_size == 8192 &&
                s.vocab_size == 49155 && s.tied && s.max_position == 131072 &&
                s.multipliers[0] == 12.0 && s.multipliers[1] == 0.015625 &&
                s.multipliers[2] == 0.22 && s.multipliers[3] == 8.0);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    assert_int_equal(mkmodel_preset(&s, "granite3-8b", &err), LL_OK);
    assert_true(s.hidden_size == 4096 && s.intermediate_size == 12800 &&
                s.multipliers[1] == 0.0078125 && s.multipliers[3] == 16.0);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    s.family = MKMODEL_LLAMA; /* the multipliers are Granite's alone */
    assert_int_equal(mkmodel_check(&s, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "granite"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_engine_determinism),
        cmocka_unit_test(test_presets),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
