/*
 * test_qwen3.c: the Qwen3 family (model_type "qwen3": per-head q/k RMSNorm before RoPE, no q/k/v
 * biases unless attention_bias) against the tests' float64 reference forward pass
 * (ref_forward.h). Before it judges anything it is checked on
 * Qwen2 against tests/fixtures/tiny-qwen2's independent reference (every prompt position's
 * top-8 logits of its two short prompts to 1e-5 of the scale): the same code with the norms off
 * and the biases on.
 *
 * A random tiny Qwen3 (mkmodel, head_dim 32 with hidden 64 and 4 heads, so q is wider than the
 * residual stream, as in Qwen3-0.6B) then runs through the engine's forward pass: exact path
 * within 1e-3 of the logit scale at every position and token, top-1 wherever the reference
 * margin exceeds twice that; fast path within 2 %; prefill, chunks and single steps give the
 * same bits. On every ops level the CPU runs (the q/k norms use the ops' RMSNorm). A quantized
 * load (q8_0) stays near the reference. A qwen2 config over qwen3 weights and a qwen3 config
 * asking for biases are refused naming the tensor.
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

#include "config_edit.h"
#include "mkmodel.h"
#include "model_tmp.h"
#include "model.h"
#include "model_config.h"
#include "ops.h"
#include "ref_forward.h"
#include "runtime.h"
#include "util.h"

#define QWEN2_FIXTURE "tests/fixtures/tiny-qwen2"
#define N_MAX 48 /* tokens of a sequence in these tests */

/* ---- the reference itself, on Qwen2, against the independent fixture ---- */

static void test_reference_on_qwen2(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct model_config c;
    assert_int_equal(model_config_read(&c, QWEN2_FIXTURE "/config.json", &err), LL_OK);
    char *text;
    size_t len;
    assert_int_equal(ll_read_file(QWEN2_FIXTURE ".expected.json", &text, &len, &err), LL_OK);
    cJSON *exp = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(exp);
    struct ref r;
    ref_open(&r, QWEN2_FIXTURE, &c, (struct ref_kind){.bias = true});
    int checked = 0;
    double worst = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(exp, "cases"))
    {
        const cJSON *ids_j = cJSON_GetObjectItem(cs, "ids"),
                    *tops = cJSON_GetObjectItem(cs, "top_per_position");
        int n = cJSON_GetArraySize(ids_j);
        if (n > N_MAX)
            continue; /* the two short cases (11 and 35 tokens) */
        int32_t ids[N_MAX];
        for (int i = 0; i < n; i++)
            ids[i] = (int32_t)cJSON_GetArrayItem(ids_j, i)->valuedouble;
        double *lg = malloc(sizeof(double) * (size_t)n * c.vocab_size);
        ref_forward(&r, ids, n, lg);
        double scale = 0;
        for (size_t i = 0; i < (size_t)n * c.vocab_size; i++)
            scale = fmax(scale, fabs(lg[i]));
        for (int t = 0; t < n; t++) {
            const cJSON *pair;
            cJSON_ArrayForEach(pair, cJSON_GetArrayItem(tops, t))
            {
                int id = (int)cJSON_GetArrayItem(pair, 0)->valuedouble;
                double want = cJSON_GetArrayItem(pair, 1)->valuedouble;
                double d = fabs(lg[(size_t)t * c.vocab_size + id] - want);
                worst = fmax(worst, d / scale);
                if (d > 1e-5 * scale)
                    fail_msg("reference on tiny-qwen2 pos %d token %d: %.6f, fixture %.6f", t,
                             id, lg[(size_t)t * c.vocab_size + id], want);
            }
        }
        free(lg);
        checked++;
    }
    assert_int_equal(checked, 2);
    printf("  float64 reference on tiny-qwen2: 2 cases, worst %.2e of the scale\n", worst);
    ref_close(&r);
    cJSON_Delete(exp);
}

/* ---- a tiny Qwen3 ---- */

static char dir[64];

static struct mkmodel_spec qwen3_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_QWEN3;
    s.head_dim = 32; /* q is 128 wide over a 64-wide residual stream */
    s.vocab_size = 1024;
    s.rope_theta = 1e6;
    s.seed = 7;
    s.bos_token_id = 1, s.eos_token_id = 2;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = qwen3_spec();
    return model_tmp_make(dir, sizeof dir, "qwen3", &s);
}

static int group_teardown(void **state)
{
    (void)state;
    return model_tmp_remove(dir);
}

static const int32_t prompt[] = {5, 900, 17, 256, 3, 3, 3, 1000, 64, 511, 12, 77, 300, 8, 9, 10,
                                 700, 42, 42, 1023, 0, 600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

/* Logits (n, vocab) of prompt[0..NP) run in steps of `chunk` tokens. */
static void run(struct model *m, enum ll_math math, int threads, int chunk, float *out)
{
    ref_engine_logits(m, prompt, NP, math, threads, chunk, out);
}


static void test_qwen3_parity(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    assert_string_equal(m->config.model_type, "qwen3");
    const int V = m->config.vocab_size;
    double *ref = ref_logits(m, (struct ref_kind){.qk_norm = true}, prompt, NP);

    ref_check_paths(m, prompt, NP, ref, 1e-3, 0.02, NP / 2, "qwen3");
    model_close(m);
    float *a = malloc(sizeof(float) * NP * V);

    /* q8_0 at load: every linear weight quantized, the norms as stored */
    struct model_open_opts qo = {.quantize = true, .qscheme = MODEL_QS_Q8_0};
    m = model_tmp_open(dir, &qo);
    run(m, LL_MATH_FAST, 2, NP, a);
    ref_compare(a, ref, NP, V, 0.05, 1, "qwen3 q8_0");
    model_close(m);
    free(a), free(ref);
}

/* Without the q/k norms (a Qwen2 forward over the same weights) the logits are far off: the
 * parity above depends on them. */
static void test_norms_matter(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const int V = m->config.vocab_size;
    struct ref r;
    char path[96];
    snprintf(path, sizeof path, "%s/m", dir);
    ref_open(&r, path, &m->config, (struct ref_kind){0});
    double *ref = malloc(sizeof(double) * NP * V), scale = 0, worst = 0;
    ref_forward(&r, prompt, NP, ref);
    ref_close(&r);
    float *a = malloc(sizeof(float) * NP * V);
    run(m, LL_MATH_EXACT, 2, NP, a);
    for (size_t i = 0; i < (size_t)NP * V; i++) {
        scale = fmax(scale, fabs(ref[i]));
        worst = fmax(worst, fabs(a[i] - ref[i]));
    }
    printf("  without the q/k norms the reference differs by %.2e of the scale\n", worst / scale);
    assert_true(worst > 0.01 * scale);
    model_close(m);
    free(a), free(ref);
}

/* Rewrite config.json's text of the model under test (config_edit.h). */
static void edit(const char *from, const char *to)
{
    char m[96];
    snprintf(m, sizeof m, "%s/m", dir);
    config_edit(m, from, to);
}

static void expect_refused(const char *needle)
{
    char path[96];
    snprintf(path, sizeof path, "%s/m", dir);
    struct model *m = NULL;
    struct ll_err err = {0};
    assert_int_equal(model_open(&m, path, NULL, &err), LL_EMODEL);
    assert_null(m);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not name '%s'", err.msg, needle);
}

static void test_wrong_family_refused(void **state)
{
    (void)state;
    /* Qwen2 needs biases these weights do not have */
    edit("\"model_type\": \"qwen3\"", "\"model_type\": \"qwen2\"");
    edit("Qwen3ForCausalLM", "Qwen2ForCausalLM");
    expect_refused("model.layers.0.self_attn.q_proj.bias");
    edit("\"model_type\": \"qwen2\"", "\"model_type\": \"qwen3\"");
    edit("Qwen2ForCausalLM", "Qwen3ForCausalLM");
    /* Qwen3 with attention_bias true needs them too */
    edit("\"attention_bias\": false", "\"attention_bias\": true");
    expect_refused("model.layers.0.self_attn.q_proj.bias");
    edit("\"attention_bias\": true", "\"attention_bias\": false");
    model_close(model_tmp_open(dir, NULL)); /* and back as it was, it loads */
}

int main(void)
{
    const struct CMUnitTest ref_tests[] = {cmocka_unit_test(test_reference_on_qwen2)};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_parity),
        cmocka_unit_test(test_norms_matter),
        cmocka_unit_test(test_wrong_family_refused),
    };
    int failed = cmocka_run_group_tests_name("reference", ref_tests, NULL, NULL);
    /* the q/k norms run through the ops' RMSNorm: every level this CPU has */
    static const char *const levels[] = {"avx512", "avx2", "scalar"};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (!ll_ops_set_variant(levels[l])) {
            printf("SKIP qwen3 on %s ops: this CPU cannot run them\n", levels[l]);
            continue;
        }
        char name[48];
        snprintf(name, sizeof name, "qwen3 (ops %s)", ll_ops_variant());
        failed += cmocka_run_group_tests_name(name, tests, group_setup, group_teardown);
    }
    return failed;
}
