/*
 * test_granitemoe.c: the GraniteMoE family (model_type "granitemoe": IBM's granite-3.x-1b-a400m
 * and 3b-a800m; Granite's layer with experts in every layer) against llama.cpp, an independent
 * implementation, on the same weights, and against the float64 reference written from
 * transformers' definition (ref_forward.h).
 *
 * Its experts come stacked: block_sparse_moe.input_linear (E, 2·I, H: an expert's gate rows,
 * then its up rows) and output_linear (E, H, I), bound as each expert's parts; the router is
 * block_sparse_moe.router.layer, its top k weighted by the softmax of their logits.
 * tests/fixtures/tiny-granitemoe.llamacpp.json holds llama.cpp's logits for a random tiny
 * GraniteMoE (its "mkmodel" field: hidden 64, 8 experts of width 32, 2 a token, the multipliers
 * mkmodel writes by default) for every position of a chat turn and of 381 tokens of prose. A
 * quantized directory stores the experts under their own names (no stacks) and loads to the
 * same bits as quantizing at load.
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
#include "llamacpp_ref.h"
#include "mkmodel.h"
#include "model.h"
#include "model_config.h"
#include "model_quant.h"
#include "model_tmp.h"
#include "ref_forward.h"
#include "safetensors.h"

#define LLAMACPP_FIXTURE "tests/fixtures/tiny-granitemoe.llamacpp.json"

static char dir[64], dirl[64];
static cJSON *fixture;

/* The llama.cpp fixture's model, as its "mkmodel" field writes it. */
static struct mkmodel_spec fixture_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_GRANITE_MOE;
    s.vocab_size = 151936;
    s.n_experts = 8, s.n_experts_used = 2, s.moe_intermediate_size = 32;
    s.seed = 7;
    s.bos_token_id = 151646, s.eos_token_id = 151643;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = fixture_spec(), sl = fixture_spec();
    s.vocab_size = 1024, s.n_layers = 3, s.tied = false, s.seed = 5;
    s.n_experts = 6, s.n_experts_used = 3;
    s.bos_token_id = 1, s.eos_token_id = 2;
    if (model_tmp_make(dir, sizeof dir, "granitemoe", &s) ||
        llamacpp_group_setup(&fixture, LLAMACPP_FIXTURE, dirl, sizeof dirl, "granitemoecpp",
                             &sl))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dir) | llamacpp_group_teardown(fixture, dirl);
}

static const int32_t prompt[] = {1,   900, 17, 256, 3,   3,  3,  1000, 64, 511, 12, 77,
                                 300, 8,   9,  10,  700, 42, 42, 1023, 0,  600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

/* config.json's experts (num_local_experts of intermediate_size in every layer, the top k
 * renormalised), the stacks bound as each expert's parts; what is refused, by name. */
static void test_config(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "granitemoe");
    assert_true(c->moe.n_experts == 6 && c->moe.n_experts_used == 3 &&
                c->moe.intermediate == 32 && c->moe.norm_topk_prob);
    for (int l = 0; l < 3; l++)
        assert_true(model_layer_sparse(c, l));
    assert_true(c->embed_mult == 12.0 && c->residual_mult == 0.22 && c->logits_div == 8.0);
    /* q, k, v, o and each expert's gate, up and down a layer, and lm_head */
    assert_int_equal(m->n_linears, (4 + 3 * 6) * 3 + 1);
    int parts = 0;
    for (int i = 0; i < m->n_linears; i++) {
        const struct model_linear *l = m->linears[i];
        if (!strstr(l->name, ".experts."))
            continue;
        parts++;
        assert_non_null(strstr(l->source, strstr(l->name, "down_proj")
                                              ? ".block_sparse_moe.output_linear.weight"
                                              : ".block_sparse_moe.input_linear.weight"));
    }
    assert_int_equal(parts, 3 * 6 * 3);
    model_close(m);

    char md[96];
    snprintf(md, sizeof md, "%s/m", dir);
    static const struct config_refusal bad[] = {
        {"\"num_local_experts\": 6", "\"num_local_experts_\": 6", "num_local_experts"},
        {"\"num_experts_per_tok\": 3", "\"num_experts_per_tok\": 7", "num_experts_per_tok"},
        {"\"num_local_experts\": 6", "\"num_local_experts\": 5", "router.layer"},
        {"\"intermediate_size\": 32", "\"intermediate_size\": 16", "input_linear"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
    };
    config_expect_refusals(md, bad, sizeof bad / sizeof bad[0]);
}

/* The reference (exact, fast, the same bits in any chunking and thread count). */
static void test_reference(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    double *ref = ref_logits(m, (struct ref_kind){.stacked = true}, prompt, NP);
    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.03, NP / 6, "granitemoe");
    model_close(m);
    free(ref);
}

/* Against llama.cpp on the same weights, the exact path (the fast path's router runs in bf16,
 * as transformers' does in bf16, and picks another expert where two are within about 1e-3:
 * its figures are printed; test_reference holds it to the float64 reference). */
static void test_llama_cpp_parity(void **state)
{
    (void)state;
    llamacpp_check_weights(fixture, dirl, 60); /* three of each of the 20 tensors */
    struct model *m = model_tmp_open(dirl, NULL);
    assert_string_equal(m->config.model_type, "granitemoe");
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(fixture, "prompts"))
    {
        const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
        llamacpp_compare(m, LL_MATH_EXACT, p, 2e-5, name);
        printf("  %s fast: worst %.2e of the scale (measured only)\n", name,
               llamacpp_compare(m, LL_MATH_FAST, p, 0, name));
    }
    model_close(m);
}

/* Quantized at load, and quantized, written and reloaded: the same bits; the written directory
 * holds the experts' planes under their own names and neither stack. */
static void test_quantized_directory(void **state)
{
    (void)state;
    struct model_open_opts qo = {.quantize = true, .qscheme = MODEL_QS_Q8_0};
    struct model *m = model_tmp_open(dir, &qo);
    const int V = m->config.vocab_size;
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    ref_engine_logits(m, prompt, NP, LL_MATH_FAST, 2, NP, a);
    char qdir[96];
    struct ll_err err = {0};
    snprintf(qdir, sizeof qdir, "%s/q", dir);
    assert_int_equal(model_quant_write(m, qdir, false, &err), LL_OK);
    model_close(m);
    struct model *q = NULL;
    assert_int_equal(model_open(&q, qdir, NULL, &err), LL_OK);
    assert_true(q->quantized && !strcmp(q->config.model_type, "granitemoe"));
    assert_null(st_find(q->st, "model.layers.0.block_sparse_moe.input_linear.weight"));
    assert_null(st_find(q->st, "model.layers.2.block_sparse_moe.output_linear.weight"));
    assert_non_null(st_find(q->st, "model.layers.1.block_sparse_moe.experts.5.up_proj.weight.qs"));
    assert_non_null(st_find(q->st, "model.layers.2.block_sparse_moe.router.layer.weight"));
    ref_engine_logits(q, prompt, NP, LL_MATH_FAST, 2, NP, b);
    assert_memory_equal(a, b, sizeof(float) * NP * V);
    model_close(q);
    free(a), free(b);
}

static void test_preset(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "granite3-1b-a400m", &err), LL_OK);
    assert_true(s.family == MKMODEL_GRANITE_MOE && s.hidden_size == 1024 && s.n_layers == 24 &&
                s.n_heads == 16 && s.n_kv_heads == 8 && s.n_experts == 32 &&
                s.n_experts_used == 8 && s.moe_intermediate_size == 512 && s.tied &&
                s.multipliers[3] == 6.0);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    s.mlp_only = 1; /* every layer has experts */
    assert_int_equal(mkmodel_check(&s, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "every layer"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_quantized_directory),
        cmocka_unit_test(test_preset),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
