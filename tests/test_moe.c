/*
 * test_moe.c: the mixture-of-experts families (model_type "qwen2_moe", "qwen3_moe").
 *
 * The routing (moe_route.h) on hand-made logits: the softmax's k best experts (ties to the
 * lower index), their weights with and without norm_topk_prob, and the grouping by expert in
 * token order with each weight beside its token.
 *
 * Then a random tiny model of each family (mkmodel: 8 experts, 2 a token, three layers of which
 * the middle one is dense through mlp_only_layers; Qwen2-MoE with its shared expert and q/k/v
 * biases, Qwen3-MoE with its q/k norms and norm_topk_prob) against the tests' float64 reference
 * (ref_forward.h): exact path within 1e-4 of the logit scale at every position and token, top-1
 * wherever the reference margin exceeds twice that; the same bits in chunks, one token at a
 * time and on one thread (each expert then runs over other rows: a row's result must not
 * depend on them); the fast path and q8_0 / q4_0 / q4_k at load near the reference; the
 * routing's fields matter (num_experts_per_tok and norm_topk_prob edited in config.json change
 * the logits, and the engine follows the reference there too). On every ops level the CPU runs.
 * Configs that do not fit the weights are refused naming the field or the tensor.
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
#include <unistd.h>

#include "config_edit.h"
#include "mkmodel.h"
#include "model_tmp.h"
#include "model.h"
#include "model_config.h"
#include "moe_route.h"
#include "ops.h"
#include "ref_forward.h"
#include "runtime.h"
#include "util.h"

/* ---- the routing ---- */

static void test_route(void **state)
{
    (void)state;
    /* 3 tokens over 4 experts, k = 2 */
    const float lg[3][4] = {
        {0.0f, 2.0f, 1.0f, -1.0f},       /* experts 1, 2 */
        {3.0f, -INFINITY, 3.0f, 3.0f},   /* a three-way tie: 0, 2 (lower indices first) */
        {-5.0f, -5.0f, 4.0f, 4.5f},      /* 3, 2 */
    };
    int32_t off[5], tok[6], sel[6];
    float w[6];
    moe_route(&lg[0][0], 3, 4, 2, false, off, tok, w, sel);
    const int32_t want_off[5] = {0, 1, 2, 5, 6};
    assert_memory_equal(off, want_off, sizeof want_off);
    const int32_t want_tok[6] = {1, 0, 0, 1, 2, 2};
    assert_memory_equal(tok, want_tok, sizeof want_tok);
    /* the weights are the softmax probabilities of the whole row */
    double s0 = 1 + exp(2) + exp(1) + exp(-1), s2 = 2 * exp(-9) + 1 + exp(0.5);
    const double want_w[6] = {1.0 / 3, exp(2) / s0, exp(1) / s0, 1.0 / 3, 1 / s2, exp(0.5) / s2};
    for (int i = 0; i < 6; i++)
        assert_true(fabs(w[i] - want_w[i]) < 1e-6);

    /* norm_topk_prob: the picked weights of a token sum to 1 */
    moe_route(&lg[0][0], 3, 4, 2, true, off, tok, w, sel);
    assert_true(fabs(w[1] - exp(2) / (exp(2) + exp(1))) < 1e-6);
    assert_true(fabs(w[2] - exp(1) / (exp(2) + exp(1))) < 1e-6);
    assert_true(fabs(w[0] - 0.5) < 1e-6 && fabs(w[3] - 0.5) < 1e-6);
    assert_true(fabs(w[4] + w[5] - 1) < 1e-6);

    /* k = n: every expert gets every token, in token order */
    float one[2][3] = {{1, 2, 3}, {3, 2, 1}};
    int32_t off3[4], tok3[6], sel3[6];
    float w3[6];
    moe_route(&one[0][0], 2, 3, 3, false, off3, tok3, w3, sel3);
    for (int e = 0; e < 3; e++) {
        assert_int_equal(off3[e], 2 * e);
        assert_int_equal(tok3[2 * e], 0);
        assert_int_equal(tok3[2 * e + 1], 1);
        assert_true(fabs(w3[2 * e] - w3[2 * (2 - e) + 1]) < 1e-7); /* the rows are mirrored */
    }
    assert_true(w3[4] > w3[2] && w3[2] > w3[0]);
}

/* A token's experts do not depend on the other tokens: routing a row alone gives the pairs it
 * has in a batch of many. */
static void test_route_batch_independent(void **state)
{
    (void)state;
    enum { T = 40, E = 16, K = 3 };
    float lg[T][E];
    uint64_t x = 12345;
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            lg[t][e] = (float)((int)(x >> 40 & 0xFF) - 128) / 32.0f;
        }
    int32_t off[E + 1], tok[T * K], sel[T * K], off1[E + 1], tok1[K], sel1[K];
    float w[T * K], w1[K];
    moe_route(&lg[0][0], T, E, K, true, off, tok, w, sel);
    for (int t = 0; t < T; t++) {
        moe_route(lg[t], 1, E, K, true, off1, tok1, w1, sel1);
        int found = 0;
        for (int e = 0; e < E; e++)
            for (int i = off[e]; i < off[e + 1]; i++)
                if (tok[i] == t) {
                    assert_int_equal(off1[e + 1] - off1[e], 1); /* alone it picks e too */
                    assert_true(w[i] == w1[off1[e]]);          /* with the same bits */
                    found++;
                }
        assert_int_equal(found, K);
    }
}

/* ---- tiny models of both families ---- */

struct fam {
    enum mkmodel_family family;
    char dir[64];
};

static struct mkmodel_spec moe_spec(enum mkmodel_family f)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = f;
    s.n_layers = 3;
    s.mlp_only = 1u << 1; /* layer 1 is dense */
    s.n_experts = 8, s.n_experts_used = 2, s.moe_intermediate_size = 64;
    s.shared_intermediate_size = f == MKMODEL_QWEN2_MOE ? 96 : 0;
    if (f == MKMODEL_QWEN3_MOE)
        s.head_dim = 32;
    s.vocab_size = 1024;
    s.rope_theta = 1e6;
    s.tied = false;
    s.seed = 11;
    s.bos_token_id = 1, s.eos_token_id = 2;
    return s;
}

static int fam_setup(void **state, enum mkmodel_family f)
{
    struct fam *st = calloc(1, sizeof *st);
    if (!st)
        return -1;
    st->family = f;
    *state = st;
    struct mkmodel_spec s = moe_spec(f);
    return model_tmp_make(st->dir, sizeof st->dir, mkmodel_family_name(f), &s);
}

static int qwen2_moe_setup(void **state)
{
    return fam_setup(state, MKMODEL_QWEN2_MOE);
}

static int qwen3_moe_setup(void **state)
{
    return fam_setup(state, MKMODEL_QWEN3_MOE);
}

static int fam_teardown(void **state)
{
    struct fam *st = *state;
    int r = model_tmp_remove(st->dir);
    free(st);
    return r;
}

static const int32_t prompt[] = {5, 900, 17, 256, 3, 3, 3, 1000, 64, 511, 12, 77, 300, 8, 9, 10,
                                 700, 42, 42, 1023, 0, 600, 33, 128};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

static void model_path(const struct fam *st, char *path, size_t size)
{
    snprintf(path, size, "%s/m", st->dir);
}

/* Logits (n, vocab) of prompt[0..NP) run in steps of `chunk` tokens. */
static void run(struct model *m, enum ll_math math, int threads, int chunk, float *out)
{
    ref_engine_logits(m, prompt, NP, math, threads, chunk, out);
}

/* The reference's logits for the model as its config.json now reads. */
static double *reference(const struct fam *st, const struct model *m)
{
    char path[96];
    model_path(st, path, sizeof path);
    struct ref r;
    struct ref_kind kind = {.qk_norm = st->family == MKMODEL_QWEN3_MOE,
                            .bias = st->family == MKMODEL_QWEN2_MOE,
                            .shared = st->family == MKMODEL_QWEN2_MOE};
    ref_open(&r, path, &m->config, kind);
    double *ref = malloc(sizeof(double) * NP * m->config.vocab_size);
    ref_forward(&r, prompt, NP, ref);
    ref_close(&r);
    return ref;
}

/* A quantized model's logits against the reference: the RMS of the difference over the RMS of
 * the reference's logits at most `bound` (a routing decision may flip where two experts are
 * close, which moves that position's logits by more than the weights' error alone would; a
 * wrong scale or a swapped nibble moves all of them). */
static void quant_error(const float *got, const double *ref, int V, double bound, const char *what)
{
    double se = 0, sr = 0;
    int agree = 0;
    for (int t = 0; t < NP; t++) {
        const float *g = got + (size_t)t * V;
        const double *r = ref + (size_t)t * V;
        int b = 0;
        for (int v = 0; v < V; v++) {
            se += (g[v] - r[v]) * (g[v] - r[v]);
            sr += r[v] * r[v];
            b = r[v] > r[b] ? v : b;
        }
        agree += ll_argmax(g, V) == b;
    }
    double rel = sqrt(se / sr);
    printf("  %s: RMS error %.3f of the reference's RMS, top-1 agrees at %d of %d\n", what, rel,
           agree, NP);
    assert_true(rel <= bound);
}

static void test_parity(void **state)
{
    const struct fam *st = *state;
    struct model *m = model_tmp_open(st->dir, NULL);
    assert_string_equal(m->config.model_type, mkmodel_family_name(st->family));
    assert_int_equal(m->config.moe.n_experts, 8);
    assert_true(model_layer_sparse(&m->config, 0) && !model_layer_sparse(&m->config, 1) &&
                model_layer_sparse(&m->config, 2));
    const int V = m->config.vocab_size;
    double *ref = reference(st, m);
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    const char *fam = mkmodel_family_name(st->family);
    char what[64];

    /* in chunks each expert's GEMM sees other rows each time: the same bits all the same */
    ref_check_paths(m, prompt, NP, ref, 1e-4, 0.015, NP / 3, fam);
    model_close(m);

    /* quantized at load: every expert's projections too; the router stays as stored */
    static const struct {
        enum model_qscheme q;
        double rms;
    } qs[] = {{MODEL_QS_Q8_0, 0.06}, {MODEL_QS_Q4_0, 0.45}, {MODEL_QS_Q4_K, 0.4}};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        struct model_open_opts qo = {.quantize = true, .qscheme = qs[i].q};
        m = model_tmp_open(st->dir, &qo);
        assert_true(m->quantized);
        run(m, LL_MATH_FAST, 2, NP, a);
        snprintf(what, sizeof what, "%s %s", fam, model_qscheme_name(qs[i].q));
        quant_error(a, ref, V, qs[i].rms, what);
        run(m, LL_MATH_FAST, 1, 1, b);
        assert_memory_equal(a, b, sizeof(float) * NP * V);
        model_close(m);
    }
    free(a), free(b), free(ref);
}

static void edit(const struct fam *st, const char *from, const char *to)
{
    char path[96];
    model_path(st, path, sizeof path);
    config_edit(path, from, to);
}

/* The routing's fields are read: with another expert count a token or the other normalisation,
 * the logits move, and still match the reference of the edited config. */
static void test_routing_fields(void **state)
{
    const struct fam *st = *state;
    const bool norm = st->family == MKMODEL_QWEN3_MOE;
    struct model *m = model_tmp_open(st->dir, NULL);
    const int V = m->config.vocab_size;
    float *a = malloc(sizeof(float) * NP * V), *b = malloc(sizeof(float) * NP * V);
    run(m, LL_MATH_EXACT, 2, NP, a);
    model_close(m);
    static const struct {
        const char *from, *to;
    } edits[] = {
        {"\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 3"},
        {"\"norm_topk_prob\": true", "\"norm_topk_prob\": false"},
        {"\"norm_topk_prob\": false", "\"norm_topk_prob\": true"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        if ((i == 1 && !norm) || (i == 2 && norm))
            continue;
        edit(st, edits[i].from, edits[i].to);
        m = model_tmp_open(st->dir, NULL);
        double *ref = reference(st, m);
        run(m, LL_MATH_EXACT, 2, NP, b);
        double moved = 0, scale = 0;
        for (size_t j = 0; j < (size_t)NP * V; j++) {
            moved = fmax(moved, fabs(a[j] - b[j]));
            scale = fmax(scale, fabs(ref[j]));
        }
        printf("  %s: the logits moved by %.2e of the scale\n", edits[i].to, moved / scale);
        assert_true(moved > 0.01 * scale);
        ref_compare(b, ref, NP, V, 1e-4, NP - 2, edits[i].to);
        free(ref);
        model_close(m);
        edit(st, edits[i].to, edits[i].from);
    }
    free(a), free(b);
}

static void expect_refused(const struct fam *st, enum ll_status code, const char *needle)
{
    char path[96];
    model_path(st, path, sizeof path);
    struct model *m = NULL;
    struct ll_err err = {0};
    enum ll_status s = model_open(&m, path, NULL, &err);
    if (s != code)
        fail_msg("model_open gave %d (%s), not %d", s, err.msg, code);
    assert_null(m);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not name '%s'", err.msg, needle);
}

static void test_refused(void **state)
{
    const struct fam *st = *state;
    const char *mt = mkmodel_family_name(st->family);
    const bool q3 = st->family == MKMODEL_QWEN3_MOE;
    char from[64], to[64];
    /* the dense family of the same attention over these weights */
    snprintf(from, sizeof from, "\"model_type\": \"%s\"", mt);
    snprintf(to, sizeof to, "\"model_type\": \"%s\"", q3 ? "qwen3" : "qwen2");
    edit(st, from, to);
    expect_refused(st, LL_EMODEL, "num_experts 8");
    edit(st, to, from);
    /* more experts a token than experts */
    edit(st, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9");
    expect_refused(st, LL_EMODEL, "num_experts_per_tok");
    edit(st, "\"num_experts_per_tok\": 9", "\"num_experts_per_tok\": 2");
    /* a config whose experts are wider than the weights' */
    edit(st, "\"moe_intermediate_size\": 64", "\"moe_intermediate_size\": 96");
    expect_refused(st, LL_EMODEL, "model.layers.0.mlp.experts.0.gate_proj.weight");
    edit(st, "\"moe_intermediate_size\": 96", "\"moe_intermediate_size\": 64");
    /* more experts than the weights have */
    edit(st, "\"num_experts\": 8", "\"num_experts\": 9");
    expect_refused(st, LL_EMODEL, "model.layers.0.mlp.gate.weight");
    edit(st, "\"num_experts\": 9", "\"num_experts\": 8");
    /* the dense layer made sparse, and a sparse one dense */
    edit(st, "\"mlp_only_layers\": [\n    1\n  ]", "\"mlp_only_layers\": []");
    expect_refused(st, LL_EMODEL, "model.layers.1.mlp.gate.weight");
    edit(st, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 1]");
    expect_refused(st, LL_EMODEL, "model.layers.0.mlp.gate.weight");
    edit(st, "\"mlp_only_layers\": [0, 1]", "\"mlp_only_layers\": [1, 3]");
    expect_refused(st, LL_EMODEL, "'mlp_only_layers' holds 3, not a layer number in [0, 2]");
    edit(st, "\"mlp_only_layers\": [1, 3]", "\"mlp_only_layers\": [1, \"2\"]");
    expect_refused(st, LL_EMODEL, "'mlp_only_layers' holds a string");
    edit(st, "\"mlp_only_layers\": [1, \"2\"]", "\"mlp_only_layers\": [1, 3]");
    edit(st, "\"mlp_only_layers\": [1, 3]", "\"mlp_only_layers\": [1]");
    /* a required field missing */
    edit(st, "\"moe_intermediate_size\": 64", "\"moe_intermediate_sizes\": 64");
    expect_refused(st, LL_EMODEL, "moe_intermediate_size");
    edit(st, "\"moe_intermediate_sizes\": 64", "\"moe_intermediate_size\": 64");
    if (!q3) {
        edit(st, "\"shared_expert_intermediate_size\"", "\"shared_expert_intermediate\"");
        expect_refused(st, LL_EMODEL, "shared_expert_intermediate_size");
        edit(st, "\"shared_expert_intermediate\"", "\"shared_expert_intermediate_size\"");
    } else {
        /* Qwen3-MoE has no shared expert: a config that reads as Qwen2-MoE needs one */
        edit(st, from, "\"model_type\": \"qwen2_moe\"");
        expect_refused(st, LL_EMODEL, "shared_expert_intermediate_size");
        edit(st, "\"model_type\": \"qwen2_moe\"", from);
    }
    model_close(model_tmp_open(st->dir, NULL)); /* and back as it was, it loads */
}

int main(void)
{
    const struct CMUnitTest route_tests[] = {
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_route_batch_independent),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_routing_fields),
        cmocka_unit_test(test_refused),
    };
    int failed = cmocka_run_group_tests_name("routing", route_tests, NULL, NULL);
    static const char *const levels[] = {"avx512", "avx2", "scalar"};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (!ll_ops_set_variant(levels[l])) {
            printf("SKIP moe on %s ops: this CPU cannot run them\n", levels[l]);
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "qwen2_moe (ops %s)", ll_ops_variant());
        failed += cmocka_run_group_tests_name(name, tests, qwen2_moe_setup, fam_teardown);
        snprintf(name, sizeof name, "qwen3_moe (ops %s)", ll_ops_variant());
        failed += cmocka_run_group_tests_name(name, tests, qwen3_moe_setup, fam_teardown);
    }
    return failed;
}
