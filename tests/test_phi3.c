/*
 * test_phi3.c: the Phi-3 family (model_type "phi3": Phi-3-mini, Phi-3.5-mini, Phi-4-mini)
 * against llama.cpp, an independent implementation, on the same weights, and against the float64
 * reference written from transformers' definition (ref_forward.h).
 *
 * tests/fixtures/tiny-phi3.llamacpp.json holds llama.cpp's logits for a random tiny Phi-3
 * (mkmodel, as its "mkmodel" field says: hidden 64, 4 heads over 2 KV heads, q/k/v and gate/up
 * fused as Phi-3 stores them, a sliding window of 16 in every layer, longrope over an original
 * context of 256, which a runtime of 512 positions exceeds: the long factors, cos and sin scaled
 * by sqrt(1 + ln 16 / ln 256)). Every position of a chat turn (22 tokens) and of 381 tokens of
 * prose: exact path within 2e-5 of the logit scale, fast path within 1.4 % on the chat turn. The
 * check is sharp: the short factors, or a window one longer, are far off.
 * The reference covers what llama.cpp cannot: the short factors (the context within the original
 * one) and partial rotary (Phi-4-mini's 0.75, which llama.cpp's converter drops); and the
 * quantized directory stores the fused tensors' parts under the separate names and loads to the
 * same bits as quantizing at load. Through the engine, the windowed, longrope model keeps the
 * determinism guarantees (alone = batched = preempted = prefix-cached).
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
#include "model_quant.h"
#include "model_tmp.h"
#include "ref_forward.h"
#include "runtime.h"
#include "safetensors.h"

#define LLAMACPP_FIXTURE "tests/fixtures/tiny-phi3.llamacpp.json"

static char dirs[64], dirp[64], dirl[64], dire[64], eng_model[96];
static cJSON *fixture;

/* A tiny Phi-3: every layer windowed to 5 positions, longrope over an original context of
 * `orig` (0: none), partial rotary `partial` (0: none). */
static struct mkmodel_spec phi3_spec(int orig, double partial)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_PHI3;
    s.n_layers = 3;
    s.head_dim = 32; /* q is 128 wide over a 64-wide residual stream */
    s.vocab_size = 1024;
    s.sliding_window = 5;
    s.rope_original_max = orig;
    s.partial_rotary = partial;
    s.tied = false;
    s.seed = 13;
    s.bos_token_id = 1, s.eos_token_id = 2;
    return s;
}

/* The llama.cpp fixture's model, as its "mkmodel" field writes it. */
static struct mkmodel_spec fixture_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_PHI3;
    s.vocab_size = 151936;
    s.tied = false;
    s.rope_original_max = 256;
    s.sliding_window = 16;
    s.seed = 7;
    s.bos_token_id = 151646, s.eos_token_id = 151643;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec ss = phi3_spec(512, 0), sp = phi3_spec(128, 0.75), sl = fixture_spec();
    /* for the engine: the R1 tokenizer (the harness's prompts use ids up to 150000), a window
     * of 8, longrope over 64 original positions (the engines' 128: the long factors) */
    struct mkmodel_spec se = fixture_spec();
    se.sliding_window = 8;
    se.rope_original_max = 64;
    se.n_layers = 3;
    if (model_tmp_make(dirs, sizeof dirs, "phi3s", &ss) ||
        model_tmp_make(dirp, sizeof dirp, "phi3p", &sp) ||
        model_tmp_make_tok(dire, sizeof dire, "phi3e", &se,
                           "models/deepseek-r1-distill-qwen-tokenizer") ||
        llamacpp_group_setup(&fixture, LLAMACPP_FIXTURE, dirl, sizeof dirl, "phi3cpp", &sl))
        return -1;
    snprintf(eng_model, sizeof eng_model, "%s/m", dire);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dirs) | model_tmp_remove(dirp) | model_tmp_remove(dire) |
           llamacpp_group_teardown(fixture, dirl);
}

static const int32_t prompt[] = {1,   900, 17, 256, 3,   3,  3,  1000, 64, 511, 12, 77,
                                 300, 8,   9,  10,  700, 42, 42, 1023, 0,  600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

static void run(struct model *m, enum ll_math math, float *out)
{
    ref_engine_logits(m, prompt, NP, math, 2, NP, out);
}

/* The model in d against the reference (ref_check_paths: exact, fast, the same bits in any
 * chunking and thread count). */
static void parity(const char *d, const char *what)
{
    struct model *m = model_tmp_open(d, NULL);
    double *ref = ref_logits(m, (struct ref_kind){.fused = true}, prompt, NP);
    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.02, NP / 2, what);
    model_close(m);
    free(ref);
}

/* config.json as Phi-3 writes it: the fused tensors bound as their parts, the window in every
 * layer, longrope's lists and original context, partial rotary. */
static void test_config(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dirp, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "phi3");
    assert_string_equal(c->architecture, "Phi3ForCausalLM");
    assert_int_equal(c->swa.window, 5);
    for (int l = 0; l < c->n_layers; l++)
        assert_true(model_layer_windowed(c, l));
    assert_int_equal(c->rope_dim, 24); /* 0.75 of 32 */
    assert_int_equal(c->rope_scaling.kind, MODEL_ROPE_LONGROPE);
    assert_int_equal(c->rope_scaling.n_factors, 12);
    assert_int_equal(c->rope_scaling.original_max_position, 128);
    assert_true(c->rope_scaling.long_factor[11] == 40.0 && c->rope_scaling.short_factor[0] == 1.0);
    assert_true(fabs(c->rope_scaling.attention_factor - sqrt(1 + log(32.0) / log(128.0))) <
                1e-12); /* 4096 / 128 */
    char shape[160];
    model_shape_str(m, shape, sizeof shape);
    assert_non_null(strstr(shape, "sliding window 5 in every layer"));
    /* q, k, v, o, gate, up, down a layer and lm_head; the parts name their fused tensor */
    assert_int_equal(m->n_linears, 7 * 3 + 1);
    int parts = 0;
    for (int i = 0; i < m->n_linears; i++) {
        const struct model_linear *l = m->linears[i];
        if (strstr(l->name, "q_proj") || strstr(l->name, "k_proj") || strstr(l->name, "v_proj")) {
            assert_non_null(strstr(l->source, ".self_attn.qkv_proj.weight"));
            parts++;
        } else if (strstr(l->name, "gate_proj") || strstr(l->name, "up_proj")) {
            assert_non_null(strstr(l->source, ".mlp.gate_up_proj.weight"));
            parts++;
        } else {
            assert_string_equal(l->source, "");
        }
    }
    assert_int_equal(parts, 5 * 3);
    model_close(m);

    /* what is refused, by name */
    char md[96];
    snprintf(md, sizeof md, "%s/m", dirp);
    static const struct config_refusal bad[] = {
        {"\"partial_rotary_factor\": 0.75", "\"partial_rotary_factor\": 0.5",
         "short_factor must be a list of 8"},
        {"\"type\": \"longrope\"", "\"type\": \"dynamic\"", "\"dynamic\""},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {"\"sliding_window\": 5", "\"sliding_window\": 0", "sliding_window"},
        {"\"intermediate_size\": 160", "\"intermediate_size\": 150", "gate_up_proj"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1", "qkv_proj"},
    };
    config_expect_refusals(md, bad, sizeof bad / sizeof bad[0]);
}

/* The reference: the short factors (the engine's 256 positions fit the original 512) and the
 * window of 5 over 24 tokens; then partial rotary with the long factors. */
static void test_reference(void **state)
{
    (void)state;
    parity(dirs, "phi3 short factors");
    parity(dirp, "phi3 partial rotary, long factors");
}

/* Against llama.cpp on the same weights; the long factors and the window each matter. */
static void test_llama_cpp_parity(void **state)
{
    (void)state;
    llamacpp_check_weights(fixture, dirl, 45); /* three of each of the 15 tensors */
    struct model *m = model_tmp_open(dirl, NULL);
    assert_string_equal(m->config.model_type, "phi3");
    llamacpp_compare_prompts(m, fixture, 2e-5, 0.014, "chat");
    model_close(m);

    const cJSON *longp = cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 1);
    static const struct llamacpp_edit edits[] = {
        {"\"sliding_window\": 16", "\"sliding_window\": 17", "a window of 17"},
        /* an original context of 512: the runtime's 512 positions fit it, the short factors */
        {"\"original_max_position_embeddings\": 256", "\"original_max_position_embeddings\": 512",
         "the short factors"},
    };
    llamacpp_expect_off(dirl, longp, edits, sizeof edits / sizeof edits[0], 1e-3);
}

/* Quantized at load, and quantized, written and reloaded: the same bits; the written directory
 * holds the parts' planes under the separate names and none of the fused tensors. */
static void test_quantized_directory(void **state)
{
    (void)state;
    struct model_open_opts qo = {.quantize = true, .qscheme = MODEL_QS_Q4_K_M};
    struct model *m = model_tmp_open(dirs, &qo);
    const int V = m->config.vocab_size;
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    run(m, LL_MATH_FAST, a);
    char qdir[96];
    struct ll_err err = {0};
    snprintf(qdir, sizeof qdir, "%s/q", dirs);
    assert_int_equal(model_quant_write(m, qdir, false, &err), LL_OK);
    model_close(m);
    struct model *q = NULL;
    assert_int_equal(model_open(&q, qdir, NULL, &err), LL_OK);
    assert_true(q->quantized && !strcmp(q->config.model_type, "phi3"));
    assert_null(st_find(q->st, "model.layers.0.self_attn.qkv_proj.weight"));
    assert_null(st_find(q->st, "model.layers.2.mlp.gate_up_proj.weight"));
    assert_non_null(st_find(q->st, "model.layers.0.self_attn.k_proj.weight.qs"));
    assert_non_null(st_find(q->st, "model.layers.2.mlp.up_proj.weight.d"));
    run(q, LL_MATH_FAST, b);
    assert_memory_equal(a, b, sizeof(float) * NP * V);
    model_close(q);
    free(a), free(b);
}

/* Through the engine: a request's tokens are the same alone, in a batch of 16 others,
 * preempted (with and without the prefix cache) and with its prompt's first blocks from the
 * prefix cache (engine_harness.h), while every layer's window of 8 slides over its 36 prompt
 * and 12 generated positions; dense, and q4_k_m quantized at load. */
static void test_engine_determinism(void **state)
{
    (void)state;
    assert_family_deterministic(eng_model, 31337, 99, 4, "q4_k_m");
}

static void test_presets(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "phi3-mini", &err), LL_OK);
    assert_true(s.family == MKMODEL_PHI3 && s.hidden_size == 3072 && s.n_layers == 32 &&
                s.n_heads == 32 && s.n_kv_heads == 32 && s.intermediate_size == 8192 &&
                s.vocab_size == 32064 && !s.tied && s.max_position == 4096 &&
                s.sliding_window == 2047 && s.rope_original_max == 0);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    assert_int_equal(mkmodel_preset(&s, "phi3.5-mini", &err), LL_OK);
    assert_true(s.max_position == 131072 && s.rope_original_max == 4096 &&
                s.sliding_window == 262144);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    assert_int_equal(mkmodel_preset(&s, "phi4-mini", &err), LL_OK);
    assert_true(s.n_heads == 24 && s.n_kv_heads == 8 && s.vocab_size == 200064 && s.tied &&
                s.partial_rotary == 0.75 && s.rope_original_max == 4096);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    s.partial_rotary = 0.3; /* 0.3 · 128 = 38.4: 38 dims */
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    s.partial_rotary = 0.01;
    assert_int_equal(mkmodel_check(&s, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "partial rotary"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_quantized_directory),
        cmocka_unit_test(test_engine_determinism),
        cmocka_unit_test(test_presets),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
