/*
 * test_mistral.c: the Mistral family (model_type "mistral": Mistral-Nemo, Mistral-Small) against
 * llama.cpp, an independent implementation, on the same weights, and its sliding window.
 *
 * tests/fixtures/tiny-mistral.llamacpp.json holds llama.cpp's logits for a random tiny Mistral
 * (mkmodel, as its "mkmodel" field says: hidden 64, 4 heads over 2 KV heads of head_dim 32, so
 * that the attention is twice as wide as the hidden state, as Mistral-Nemo's 32 heads of 128
 * over 5120 are not equal to it either; untied lm_head over the tekken vocabulary's 131072 rows;
 * rope_theta 1e6). Every position of two prompts (a chat turn of 17 tokens and 381 tokens of
 * prose, tokenized by the reference tokenizer), llama.cpp's top 8 tokens and 9 fixed ones
 * each. The test regenerates the weights (checked against the fixture's samples first), runs
 * them through the engine's forward pass and compares: exact path within 2e-5 of the logit
 * scale, fast path within 1 %. Then the sliding window: Mistral's sliding_window is every layer's
 * window when it is shorter than max_position_embeddings (the positions inside it are llama.cpp's
 * full attention, those past it change), full attention otherwise, and means nothing to a family
 * whose configs switch it with use_sliding_window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_edit.h"
#include "engine_opts.h"
#include "llamacpp_ref.h"
#include "mkmodel.h"
#include "model.h"
#include "model_config.h"
#include "model_tmp.h"
#include "runtime.h"

#define FIXTURE "tests/fixtures/tiny-mistral.llamacpp.json"

static char dir[64];
static cJSON *fixture;

/* The fixture's model, as its "mkmodel" field writes it. */
static struct mkmodel_spec mistral_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_MISTRAL;
    s.head_dim = 32;
    s.vocab_size = 131072;
    s.tied = false;
    s.rope_theta = 1000000.0;
    s.seed = 7;
    s.bos_token_id = 1, s.eos_token_id = 2;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = mistral_spec();
    return llamacpp_group_setup(&fixture, FIXTURE, dir, sizeof dir, "mistral", &s);
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
    assert_string_equal(m->config.model_type, "mistral");
    assert_int_equal(m->config.head_dim, 32);
    assert_int_equal(m->config.swa.window, 0); /* null: full attention */
    llamacpp_compare_prompts(m, fixture, 2e-5, 0.01, NULL);
    model_close(m);
}

/* The presets have the published shapes. */
static void test_presets(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "mistral-nemo-12b", &err), LL_OK);
    assert_int_equal(s.family, MKMODEL_MISTRAL);
    assert_true(s.hidden_size == 5120 && s.n_layers == 40 && s.n_heads == 32 &&
                s.n_kv_heads == 8 && s.head_dim == 128 && s.intermediate_size == 14336 &&
                s.vocab_size == 131072 && !s.tied && s.max_position == 1024000 &&
                s.rope_theta == 1e6 && s.rms_eps == 1e-5);
    assert_int_equal(mkmodel_preset(&s, "mistral-small-24b", &err), LL_OK);
    assert_true(s.family == MKMODEL_MISTRAL && s.hidden_size == 5120 && s.n_layers == 40 &&
                s.head_dim == 128 && s.intermediate_size == 32768 && s.max_position == 32768 &&
                s.rope_theta == 1e8);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    assert_int_equal(mkmodel_preset(&s, "mistral-7b", &err), LL_OK);
    assert_true(s.family == MKMODEL_MISTRAL && s.hidden_size == 4096 && s.n_layers == 32 &&
                s.n_heads == 32 && s.n_kv_heads == 8 && s.head_dim == 0 &&
                s.intermediate_size == 14336 && s.vocab_size == 32000 && !s.tied &&
                s.max_position == 32768 && s.rope_theta == 1e4 && s.rms_eps == 1e-5 &&
                s.sliding_window == 4096);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
}

/* Rewrite config.json's text of the model under test (config_edit.h). */
static void edit(const char *from, const char *to)
{
    char m[96];
    snprintf(m, sizeof m, "%s/m", dir);
    config_edit(m, from, to);
}

static void test_sliding_window(void **state)
{
    (void)state;
    struct ll_err err = {0};
    const cJSON *longp = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 1);

    /* shorter than max_position_embeddings (4096): every layer's window, the context not
     * capped; a prompt inside the window is full attention's (the long one, 381 tokens) */
    edit("\"sliding_window\": null", "\"sliding_window\": 512");
    struct model *m = model_tmp_open(dir, NULL);
    assert_int_equal(m->config.swa.window, 512);
    for (int l = 0; l < m->config.n_layers; l++)
        assert_true(model_layer_windowed(&m->config, l));
    struct engine_opts o = {0};
    engine_opts_resolve(&o, &m->config);
    assert_int_equal(o.n_ctx, 4096);
    char shape[160];
    model_shape_str(m, shape, sizeof shape);
    assert_non_null(strstr(shape, "sliding window 512 in every layer"));
    llamacpp_compare(m, LL_MATH_EXACT, longp, 2e-5, "long within a window of 512");
    model_close(m);

    /* a window of 64 over the same prompt: llama.cpp's full attention until position 64, and
     * past it the window changes the answer (the float64 reference of test_phi3 holds the
     * windowed rows, llama.cpp's phi3 the semantics of the window's edge) */
    edit("\"sliding_window\": 512", "\"sliding_window\": 64");
    m = model_tmp_open(dir, NULL);
    int n;
    struct llamacpp_position *pos = llamacpp_positions(m, LL_MATH_EXACT, longp, &n);
    int changed = 0;
    for (int t = 0; t < n; t++) {
        if (t < 64 && pos[t].err > 2e-5)
            fail_msg("position %d, inside the window: %.2e of the scale off", t, pos[t].err);
        changed += t >= 64 && pos[t].err > 1e-3;
    }
    printf("  a window of 64: %d of the %d positions past it changed by over 1e-3\n", changed,
           n - 64);
    assert_true(changed > (n - 64) * 3 / 4);
    free(pos);
    model_close(m);

    /* as long as the context: full attention */
    edit("\"sliding_window\": 64", "\"sliding_window\": 4096");
    m = model_tmp_open(dir, NULL);
    assert_int_equal(m->config.swa.window, 0);
    model_close(m);

    /* a family whose configs switch the window with use_sliding_window: no window here */
    edit("\"sliding_window\": 4096", "\"sliding_window\": 512");
    edit("\"model_type\": \"mistral\"", "\"model_type\": \"llama\"");
    edit("\"MistralForCausalLM\"", "\"LlamaForCausalLM\"");
    m = model_tmp_open(dir, NULL);
    assert_string_equal(m->config.model_type, "llama");
    assert_int_equal(m->config.swa.window, 0);
    model_close(m);
    edit("\"LlamaForCausalLM\"", "\"MistralForCausalLM\"");
    edit("\"model_type\": \"llama\"", "\"model_type\": \"mistral\"");
    edit("\"sliding_window\": 512", "\"sliding_window\": null");

    /* not a number */
    edit("\"sliding_window\": null", "\"sliding_window\": \"40\"");
    struct model *bad = NULL;
    char path[96];
    snprintf(path, sizeof path, "%s/m", dir);
    assert_int_not_equal(model_open(&bad, path, NULL, &err), LL_OK);
    assert_null(bad);
    if (!strstr(err.msg, "sliding_window"))
        fail_msg("message '%s' does not name 'sliding_window'", err.msg);
    edit("\"sliding_window\": \"40\"", "\"sliding_window\": null");
    model_close(model_tmp_open(dir, NULL)); /* and back as it was, it loads */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_are_the_fixtures),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_presets),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
