/*
 * test_smollm3.c: the SmolLM3 family (model_type "smollm3": Llama's layer, with no RoPE in the
 * layers config.json's no_rope_layers marks 0, every fourth one in SmolLM3-3B) against the
 * float64 reference written from transformers' definition (ref_forward.h), and its config.json.
 *
 * A random tiny SmolLM3 of 8 layers (layers 3 and 7 without RoPE), a 24-token prompt: exact path
 * within 1e-3 of the logit scale (it is about 5e-7), fast path within 2 %, the same bits in any
 * chunking and thread count. The layers without RoPE matter: with every layer turned, every
 * position after the first differs. (No other implementation of SmolLM3 exists here: the
 * llama.cpp build predates it.)
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

#include "config_edit.h"
#include "mkmodel.h"
#include "model.h"
#include "model_config.h"
#include "model_tmp.h"
#include "ref_forward.h"

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    if (mkmodel_preset(&s, "smollm3-3b", &err) != LL_OK)
        return -1;
    s.hidden_size = 64, s.n_layers = 8, s.n_heads = 4, s.n_kv_heads = 2;
    s.intermediate_size = 160, s.vocab_size = 1024, s.seed = 5;
    s.bos_token_id = 1, s.eos_token_id = 2;
    return model_tmp_make(dir, sizeof dir, "smollm3", &s);
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dir);
}

static const int32_t prompt[] = {1, 900, 17, 256, 3, 3, 3, 1000, 64, 511, 12, 77, 300, 8, 9, 10,
                                 700, 42, 42, 1023, 0, 600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

static void test_config(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "smollm3");
    assert_true(c->tie_word_embeddings && c->rope_theta == 5e6);
    for (int l = 0; l < 8; l++)
        assert_int_equal(model_layer_rope(c, l), (l + 1) % 4 != 0);
    char shape[160];
    model_shape_str(m, shape, sizeof shape);
    assert_non_null(strstr(shape, "no RoPE in 2 of the layers"));
    model_close(m);

    /* without the list, no_rope_layer_interval (the family's default 4, or as given) */
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir);
    config_edit(md, "\"no_rope_layers\": [", "\"no_rope_layers_\": [");
    config_edit(md, "\"no_rope_layer_interval\": 4", "\"no_rope_layer_interval\": 2");
    m = model_tmp_open(dir, NULL);
    for (int l = 0; l < 8; l++)
        assert_int_equal(model_layer_rope(&m->config, l), l % 2 == 0);
    model_close(m);
    config_edit(md, "\"no_rope_layer_interval\": 2,", "");
    m = model_tmp_open(dir, NULL);
    for (int l = 0; l < 8; l++)
        assert_int_equal(model_layer_rope(&m->config, l), (l + 1) % 4 != 0);
    model_close(m);
    config_edit(md, "\"no_rope_layers_\": [",
                "\"no_rope_layer_interval\": 4,\n  \"no_rope_layers\": [");

    static const struct config_refusal bad[] = {
        {"\"no_rope_layers\": [\n    1,", "\"no_rope_layers\": [\n", "no_rope_layers must be"},
        {"\"no_rope_layers\": [\n    1,", "\"no_rope_layers\": [\n    2,", "no_rope_layers[0]"},
        /* the interval counts only without the list */
        {"\"no_rope_layer_interval\": 4,\n  \"no_rope_layers\": [",
         "\"no_rope_layer_interval\": 0,\n  \"no_rope_layers_\": [", "no_rope_layer_interval"},
    };
    config_expect_refusals(md, bad, sizeof bad / sizeof bad[0]);
}

/* The reference, and the layers without RoPE matter. */
static void test_reference(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const int V = m->config.vocab_size;
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir);
    double *ref = ref_logits(m, (struct ref_kind){0}, prompt, NP);
    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.02, NP / 2, "smollm3");
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    ref_engine_logits(m, prompt, NP, LL_MATH_EXACT, 2, NP, a);
    model_close(m);

    config_edit(md, "\"no_rope_layer_interval\": 4", "\"no_rope_layer_interval\": 1000");
    config_edit(md, "\"no_rope_layers\": [", "\"no_rope_layers_\": [");
    m = model_tmp_open(dir, NULL);
    ref_engine_logits(m, prompt, NP, LL_MATH_EXACT, 2, NP, b);
    model_close(m);
    config_edit(md, "\"no_rope_layers_\": [", "\"no_rope_layers\": [");
    config_edit(md, "\"no_rope_layer_interval\": 1000", "\"no_rope_layer_interval\": 4");
    /* position 0 turns by nothing: the same bits; every later one differs */
    assert_memory_equal(a, b, sizeof(float) * V);
    for (int t = 1; t < NP; t++) {
        double d = 0;
        for (int v = 0; v < V; v++)
            d = fmax(d, fabs(a[(size_t)t * V + v] - b[(size_t)t * V + v]));
        if (d < 1e-4)
            fail_msg("position %d: turning every layer changed nothing (%.2e)", t, d);
    }
    free(a), free(b), free(ref);
}

static void test_preset(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "smollm3-3b", &err), LL_OK);
    assert_true(s.family == MKMODEL_SMOLLM3 && s.hidden_size == 2048 && s.n_layers == 36 &&
                s.n_heads == 16 && s.n_kv_heads == 4 && s.intermediate_size == 11008 &&
                s.vocab_size == 128256 && s.tied && s.max_position == 65536 &&
                s.rope_theta == 5e6);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_preset),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
