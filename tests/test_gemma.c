/*
 * test_gemma.c: the Gemma families (model_type "gemma2" and "gemma3_text") against the float64
 * reference written from transformers' definitions (ref_forward.h), and their config.json.
 *
 * The models are random tiny ones (mkmodel): Gemma 3 with 6 layers, so that layers 0-4 attend
 * through a sliding window of 5 positions with RoPE base 1e4 and layer 5 over the whole context
 * with base 1e6, and per-head q/k norms; Gemma 2 with 4 layers, every other one windowed, and its
 * softcaps (made strong enough to matter). A 24-token prompt runs past the window. Each must match
 * the reference (exact path within 1e-3 of the logit scale, fast within 2 %, q8_0 within 5 %),
 * give the same bits in any chunking and thread count, and the window must matter: the rows
 * before it are the same bits with a window longer than the context, the rows after it are not.
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
#include "runtime.h"
#include "safetensors.h"

#define FIXTURE "tests/fixtures/tiny-gemma2.llamacpp.json"

static char dir3[64], dir2[64], dirl[64];
static cJSON *fixture;

static struct mkmodel_spec gemma_spec(enum mkmodel_family f)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = f;
    s.n_layers = f == MKMODEL_GEMMA3 ? 6 : 4;
    s.n_kv_heads = f == MKMODEL_GEMMA3 ? 1 : 2;
    s.head_dim = 32; /* q is 128 wide over a 64-wide residual stream */
    s.vocab_size = 1024;
    s.rope_theta = f == MKMODEL_GEMMA3 ? 1e6 : 1e4;
    s.sliding_window = 5;
    s.tied = true;
    s.seed = 11;
    s.bos_token_id = 2, s.eos_token_id = 1;
    return s;
}

/* The llama.cpp fixture's model, as its "mkmodel" field writes it (26 layers: llama.cpp knows
 * Gemma 2's attention scale only for the published layer counts). */
static struct mkmodel_spec fixture_spec(void)
{
    struct mkmodel_spec s = gemma_spec(MKMODEL_GEMMA2);
    s.n_layers = 26;
    s.vocab_size = 151936;
    s.sliding_window = 16;
    s.seed = 7;
    s.bos_token_id = 151646, s.eos_token_id = 151643;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s3 = gemma_spec(MKMODEL_GEMMA3), s2 = gemma_spec(MKMODEL_GEMMA2),
                        sl = fixture_spec();
    return model_tmp_make(dir3, sizeof dir3, "gemma3", &s3) ||
           model_tmp_make(dir2, sizeof dir2, "gemma2", &s2) ||
           llamacpp_group_setup(&fixture, FIXTURE, dirl, sizeof dirl, "gemma2cpp", &sl);
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dir3) | model_tmp_remove(dir2) |
           llamacpp_group_teardown(fixture, dirl);
}

static const int32_t prompt[] = {2, 900, 17, 256, 3, 3, 3, 1000, 64, 511, 12, 77, 300, 8, 9, 10,
                                 700, 42, 42, 1023, 0, 600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

static void run(struct model *m, enum ll_math math, int threads, int chunk, float *out)
{
    ref_engine_logits(m, prompt, NP, math, threads, chunk, out);
}

/* The reference's logits of the model in d. */
static double *reference(const struct model *m)
{
    bool g3 = !strcmp(m->config.model_type, "gemma3_text"); /* the q/k norms */
    return ref_logits(m, (struct ref_kind){.qk_norm = g3, .gemma = true}, prompt, NP);
}

/* The model in d against the reference: exact, fast (ref_check_paths), q8_0 at load. */
static void parity(const char *d, const char *what, int fast_top1, double q8_tol, int q8_top1)
{
    struct model *m = model_tmp_open(d, NULL);
    const int V = m->config.vocab_size;
    double *ref = reference(m);
    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.02, fast_top1, what);
    model_close(m);

    struct model_open_opts qo = {.quantize = true, .qscheme = MODEL_QS_Q8_0};
    m = model_tmp_open(d, &qo);
    float *a = malloc(sizeof(float) * NP * V);
    run(m, LL_MATH_FAST, 2, NP, a);
    char name[64];
    snprintf(name, sizeof name, "%s q8_0", what);
    ref_compare(a, ref, NP, V, q8_tol, q8_top1, name);
    model_close(m);
    free(a), free(ref);
}

static void test_gemma3_config(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir3, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "gemma3_text");
    assert_int_equal(c->act, MODEL_ACT_GELU_TANH);
    assert_true(fabs(c->attn_scale - 1.0 / sqrt(32.0)) < 1e-12); /* query_pre_attn_scalar 32 */
    assert_true(c->attn_softcap == 0 && c->final_softcap == 0);
    assert_int_equal(c->swa.window, 5);
    assert_true(c->swa.rope_theta == 10000.0 && c->rope_theta == 1e6);
    for (int l = 0; l < 6; l++) /* sliding_window_pattern 6: the sixth layer is global */
        assert_int_equal(model_layer_windowed(c, l), l != 5);
    assert_true(c->tie_word_embeddings);
    char shape[160];
    model_shape_str(m, shape, sizeof shape);
    assert_non_null(strstr(shape, "sliding window 5 in 5 of the layers"));
    model_close(m);
}

static void test_gemma3_parity(void **state)
{
    (void)state;
    parity(dir3, "gemma3", NP / 2, 0.05, 1);
}

static void test_gemma2_parity(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir2, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "gemma2");
    assert_true(c->attn_softcap == 50.0 && c->final_softcap == 30.0);
    for (int l = 0; l < 4; l++) /* every other layer, from the first */
        assert_int_equal(model_layer_windowed(c, l), l % 2 == 0);
    assert_true(c->swa.rope_theta == 0);
    model_close(m);
    /* a config that leaves tie_word_embeddings out is tied (Gemma2Config's default) */
    char md0[96];
    snprintf(md0, sizeof md0, "%s/m", dir2);
    config_edit(md0, "\"tie_word_embeddings\": true,", "");
    m = model_tmp_open(dir2, NULL);
    assert_true(m->config.tie_word_embeddings);
    model_close(m);
    config_edit(md0, "\"torch_dtype\"", "\"tie_word_embeddings\": true,\n  \"torch_dtype\"");
    parity(dir2, "gemma2", NP / 3, 0.05, 1);
    /* softcaps tight enough to change every score and logit: still the reference's */
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir2);
    config_edit(md, "\"attn_logit_softcapping\": 50.0", "\"attn_logit_softcapping\": 0.5");
    config_edit(md, "\"final_logit_softcapping\": 30.0", "\"final_logit_softcapping\": 0.5");
    parity(dir2, "gemma2 capped", NP / 3, 0.08, 0); /* logits within ±0.5: q8_0's error is
                                                       a larger part of them */
    config_edit(md, "\"attn_logit_softcapping\": 0.5", "\"attn_logit_softcapping\": 50.0");
    config_edit(md, "\"final_logit_softcapping\": 0.5", "\"final_logit_softcapping\": 30.0");
}

/* Gemma 2 against llama.cpp, an independent implementation, on the same weights (its sliding
 * window of 16 over a 381-token prompt, both softcaps, GeGLU, the four norms of 1 + w): exact
 * path within 1e-3 of the logit scale, fast within 1.4 % (the short prompt). (llama.cpp computes GELU from a table
 * indexed by the input rounded to f16, which alone leaves 4e-4; the reference test above holds
 * the exact path to 1e-6.) A window one longer is 0.7 of the scale away: the check sees it. */
static void test_llama_cpp_parity(void **state)
{
    (void)state;
    llamacpp_check_weights(fixture, dirl, 864); /* three of each of the 288 tensors */
    struct model *m = model_tmp_open(dirl, NULL);
    assert_string_equal(m->config.model_type, "gemma2");
    /* fast on the chat turn: over 381 positions fewer than half have a margin above 2.8 % */
    llamacpp_compare_prompts(m, fixture, 1e-3, 0.014, "chat");
    model_close(m);

    static const struct llamacpp_edit window17[] = {
        {"\"sliding_window\": 16", "\"sliding_window\": 17", "a window of 17 instead of 16"}};
    llamacpp_expect_off(dirl, cJSON_GetArrayItem(cJSON_GetObjectItem(fixture, "prompts"), 1),
                        window17, 1, 0.1);
}

/* The window is in force: with one longer than the prompt, the rows inside the window are the
 * same bits and the rows past it are not. */
static void test_window_matters(void **state)
{
    (void)state;
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir3);
    struct model *m = model_tmp_open(dir3, NULL);
    const int V = m->config.vocab_size;
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    run(m, LL_MATH_EXACT, 2, NP, a);
    model_close(m);
    config_edit(md, "\"sliding_window\": 5", "\"sliding_window\": 4096");
    m = model_tmp_open(dir3, NULL);
    run(m, LL_MATH_EXACT, 2, NP, b);
    model_close(m);
    config_edit(md, "\"sliding_window\": 4096", "\"sliding_window\": 5");
    assert_memory_equal(a, b, sizeof(float) * 5 * V);
    for (int t = 5; t < NP; t++) {
        double d = 0;
        for (int v = 0; v < V; v++)
            d = fmax(d, fabs(a[(size_t)t * V + v] - b[(size_t)t * V + v]));
        if (d < 1e-4)
            fail_msg("position %d: the window changed nothing (%.2e)", t, d);
    }
    free(a), free(b);
}

/* config.json: layer_types instead of sliding_window_pattern; what is refused, by name. */
static void test_config(void **state)
{
    (void)state;
    char md[96];
    snprintf(md, sizeof md, "%s/m", dir3);
    config_edit(md, "\"sliding_window_pattern\": 6",
                "\"layer_types\": [\"full_attention\", \"sliding_attention\", "
                "\"full_attention\", \"full_attention\", \"sliding_attention\", "
                "\"full_attention\"]");
    struct model *m = model_tmp_open(dir3, NULL);
    for (int l = 0; l < 6; l++)
        assert_int_equal(model_layer_windowed(&m->config, l), l == 1 || l == 4);
    model_close(m);
    config_edit(md,
                "\"layer_types\": [\"full_attention\", \"sliding_attention\", "
                "\"full_attention\", \"full_attention\", \"sliding_attention\", "
                "\"full_attention\"]",
                "\"sliding_window_pattern\": 6");

    static const struct config_refusal bad[] = {
        {"\"sliding_window_pattern\": 6", "\"layer_types\": [\"full_attention\"]", "layer_types"},
        {"\"sliding_window_pattern\": 6",
         "\"layer_types\": [\"chunked_attention\", \"full_attention\", \"full_attention\", "
         "\"full_attention\", \"full_attention\", \"full_attention\"]",
         "layer_types[0]"},
        {"\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"gelu\"",
         "hidden_activation"},
        {"\"sliding_window\": 5", "\"sliding_window\": null", "sliding_window"},
        {"\"sliding_window_pattern\": 6",
         "\"sliding_window_pattern\": 6, \"use_bidirectional_attention\": true",
         "use_bidirectional_attention"},
        {"\"sliding_window_pattern\": 6",
         "\"sliding_window_pattern\": 6, \"rope_parameters\": {}", "rope_parameters"},
        {"\"query_pre_attn_scalar\": 32", "\"query_pre_attn_scalar\": -1",
         "query_pre_attn_scalar"},
        {"\"sliding_window_pattern\": 6",
         "\"sliding_window_pattern\": 6, \"hidden_act\": \"silu\"", "disagree"},
    };
    config_expect_refusals(md, bad, sizeof bad / sizeof bad[0]);
}

/* A Gemma 3 checkpoint with images (4B and up): config.json's text_config, which leaves out what
 * equals transformers' defaults, and the text model's weights under "language_model." beside
 * the vision tower's. Made here from the gemma3_text model: the same weights must give the same
 * bits. */
static void test_multimodal_layout(void **state)
{
    (void)state;
    char mm[64], path[128], src[96];
    assert_int_equal(model_tmp_make(mm, sizeof mm, "gemma3mm", NULL), 0);
    snprintf(src, sizeof src, "%s/m/model.safetensors", dir3);
    struct safetensors *st;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, src, &err), LL_OK);
    size_t n = st_count(st);
    struct st_write_tensor *t = calloc(n + 1, sizeof *t);
    char(*names)[LL_TENSOR_NAME_MAX] = calloc(n, sizeof *names);
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *x = st_at(st, i);
        snprintf(names[i], sizeof names[i], "language_model.%s", x->name);
        t[i] = (struct st_write_tensor){.name = names[i], .dtype = x->dtype, .ndim = x->ndim,
                                        .data = x->data};
        memcpy(t[i].shape, x->shape, sizeof t[i].shape);
    }
    static const float patch[6] = {1, 2, 3, 4, 5, 6}; /* a vision tensor, not loaded */
    t[n] = (struct st_write_tensor){.name = "vision_tower.vision_model.post_layernorm.weight",
                                    .dtype = ST_F32, .ndim = 1, .shape = {6}, .data = patch};
    snprintf(path, sizeof path, "%s/m/model.safetensors", mm);
    assert_int_equal(st_write(path, t, n + 1, &err), LL_OK);
    st_close(st);
    free(t), free(names);
    snprintf(path, sizeof path, "%s/m/config.json", mm);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"eos_token_id\": [1, 7], "
          "\"model_type\": \"gemma3\", \"text_config\": {\"head_dim\": 32, "
          "\"hidden_size\": 64, \"intermediate_size\": 160, \"max_position_embeddings\": 4096, "
          "\"model_type\": \"gemma3_text\", \"num_attention_heads\": 4, "
          "\"num_hidden_layers\": 6, \"num_key_value_heads\": 1, "
          "\"query_pre_attn_scalar\": 32, \"sliding_window\": 5, \"vocab_size\": 1024}, "
          "\"vision_config\": {\"hidden_size\": 6, \"model_type\": \"siglip_vision_model\"}}",
          f);
    fclose(f);

    struct model *a = model_tmp_open(dir3, NULL), *b = model_tmp_open(mm, NULL);
    assert_string_equal(b->config.model_type, "gemma3");
    assert_string_equal(b->config.weights_prefix, "language_model.");
    assert_true(b->config.swa.window == 5 && b->config.swa.rope_theta == 10000.0 &&
                b->config.rope_theta == 1e6 && b->config.n_eos == 2 &&
                b->config.eos_ids[1] == 7 && b->config.bos_token_id == 2);
    const int V = a->config.vocab_size;
    float *la = malloc(sizeof(float) * NP * V), *lb = malloc(sizeof(float) * NP * V);
    run(a, LL_MATH_EXACT, 2, NP, la);
    run(b, LL_MATH_EXACT, 2, NP, lb);
    assert_memory_equal(la, lb, sizeof(float) * NP * V);
    model_close(a), model_close(b);

    /* quantized and written out (llaisys-cli quantize), it loads as it was quantized at load:
     * the planes under the prefix, quantization_config at the top of config.json */
    struct model_open_opts qo = {.quantize = true, .qscheme = MODEL_QS_Q8_0};
    b = model_tmp_open(mm, &qo);
    run(b, LL_MATH_FAST, 2, NP, la);
    char qdir[96];
    snprintf(qdir, sizeof qdir, "%s/q", mm);
    assert_int_equal(model_quant_write(b, qdir, false, &err), LL_OK);
    model_close(b);
    struct model *q = NULL;
    assert_int_equal(model_open(&q, qdir, NULL, &err), LL_OK);
    assert_true(q->quantized && !strcmp(q->config.model_type, "gemma3"));
    run(q, LL_MATH_FAST, 2, NP, lb);
    assert_memory_equal(la, lb, sizeof(float) * NP * V);
    model_close(q);
    free(la), free(lb);

    /* without its text_config: refused by name */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\"}",
          f);
    fclose(f);
    snprintf(path, sizeof path, "%s/m", mm);
    struct model *bad = NULL;
    assert_int_not_equal(model_open(&bad, path, NULL, &err), LL_OK);
    assert_null(bad);
    if (!strstr(err.msg, "text_config"))
        fail_msg("message '%s' does not name text_config", err.msg);
    assert_int_equal(model_tmp_remove(mm), 0);
}

static void test_preset(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "gemma3-1b", &err), LL_OK);
    assert_true(s.family == MKMODEL_GEMMA3 && s.hidden_size == 1152 && s.n_layers == 26 &&
                s.n_heads == 4 && s.n_kv_heads == 1 && s.head_dim == 256 &&
                s.intermediate_size == 6912 && s.vocab_size == 262144 && s.tied &&
                s.max_position == 32768 && s.rope_theta == 1e6 && s.sliding_window == 512);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    assert_int_equal(mkmodel_preset(&s, "gemma2-2b", &err), LL_OK);
    assert_true(s.family == MKMODEL_GEMMA2 && s.hidden_size == 2304 && s.n_layers == 26 &&
                s.n_heads == 8 && s.n_kv_heads == 4 && s.head_dim == 256 &&
                s.intermediate_size == 9216 && s.vocab_size == 256000 && s.tied &&
                s.max_position == 8192 && s.rope_theta == 1e4 && s.sliding_window == 4096);
    assert_int_equal(mkmodel_check(&s, &err), LL_OK);
    s.tied = false;
    assert_int_equal(mkmodel_check(&s, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "tied"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_config),
        cmocka_unit_test(test_gemma3_parity),
        cmocka_unit_test(test_gemma2_parity),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_window_matters),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_multimodal_layout),
        cmocka_unit_test(test_preset),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
