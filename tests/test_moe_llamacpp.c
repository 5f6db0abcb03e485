/*
 * test_moe_llamacpp.c: the Qwen2-MoE forward pass (model_type "qwen2_moe") against llama.cpp,
 * an independent implementation, on the same weights.
 *
 * tests/fixtures/tiny-qwen2moe.llamacpp.json holds llama.cpp's logits for a random tiny
 * Qwen2-MoE (mkmodel, as its "mkmodel" field says: hidden 64, 2 layers, 4 heads over 2 KV heads
 * with q/k/v biases, untied lm_head over the R1-Distill-Qwen vocabulary's 151936 rows; both
 * layers sparse, 8 experts of width 64 of which 2 run a token, a shared expert of width 96):
 * every position of two prompts (an R1 chat turn of 19 tokens and 368 tokens of prose),
 * llama.cpp's top 8 tokens and 9 fixed ones each. It was made outside the repository: the
 * weights as an f32 GGUF of llama.cpp's "qwen2moe" architecture (each projection's experts
 * stacked, the shared expert's gate as a vector), run through llama.cpp's library (build
 * c392e509, February 2025: one llama_decode, f32 K/V cache, one thread). llama.cpp's qwen2moe
 * routes by softmax, does not renormalise the top-k weights and scales the shared expert by the
 * sigmoid of its gate on every layer: this config's semantics (norm_topk_prob false, no
 * mlp_only_layers), which the test checks the engine read.
 *
 * The test regenerates the weights (checked against the fixture's samples of the file), runs
 * them through the engine and compares, on every ops level the CPU runs:
 * - exact path: every position within 4e-6 of the logit scale (measured: 9.8e-7 at worst), top-1
 *   equal wherever llama.cpp's margin exceeds twice that;
 * - fast path: 90 % of the positions within 1 % (measured: 371 to 373 of 387, median 2.9e-3),
 *   top-1 equal there where llama.cpp's margin exceeds 2 %, and the others within 25 %. They are
 *   not rounding noise but another expert: where the router's second and third probabilities
 *   are close (within 1.7e-3 of 1 at those measured), the fast path's bf16 rounding picks the
 *   third; its logits are then those of that routing (at chat position 4, 8.6e-2 off, the
 *   float64 reference with expert 0 for expert 7 in layer 1 gives the fast path's logit to 1e-7)
 *   and a flip in layer 0 moves the next few positions by a few 1e-2 through attention (measured
 *   up to 1.25e-1 in all).
 * The comparisons have teeth: with one expert a token instead of two, or the top-k weights
 * renormalised (config.json edited), the exact path is 4.1e-1 and 6.3e-1 of the scale away and
 * the fast path has no position within 1 %.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_edit.h"
#include "llamacpp_ref.h"
#include "mkmodel.h"
#include "model_tmp.h"
#include "model.h"
#include "model_config.h"
#include "ops.h"
#include "runtime.h"
#include "util.h"

#define FIXTURE "tests/fixtures/tiny-qwen2moe.llamacpp.json"
#define EXACT_TOL 4e-6 /* of the logit scale: the exact path at every position */
#define FAST_TOL 0.01  /* the fast path at FAST_SHARE of the positions, */
#define FAST_SHARE 0.9
#define FLIP_TOL 0.25 /* the others (where a near tie of the router went the other way) */

static char dir[64];
static cJSON *fixture;

/* The fixture's model, as its "mkmodel" field writes it (the tokenizer gives the bos/eos ids). */
static struct mkmodel_spec moe_spec(void)
{
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.family = MKMODEL_QWEN2_MOE;
    s.vocab_size = 151936;
    s.tied = false;
    s.rope_theta = 1e6;
    s.n_experts = 8, s.n_experts_used = 2;
    s.moe_intermediate_size = 64, s.shared_intermediate_size = 96;
    s.seed = 7;
    s.bos_token_id = 151646, s.eos_token_id = 151643;
    return s;
}

static int group_setup(void **state)
{
    (void)state;
    struct mkmodel_spec s = moe_spec();
    return llamacpp_group_setup(&fixture, FIXTURE, dir, sizeof dir, "moe-llamacpp", &s);
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
    /* three of each of the 79 tensors: embedding, final norm, lm_head; per layer two norms,
     * q/k/v with biases, o, the router, 8 experts' three projections, the shared expert's three
     * and its gate */
    llamacpp_check_weights(fixture, dir, 3 * 79);
}

/* The fast path over every prompt of the fixture: the share of positions within FAST_TOL, and
 * fails when a position is beyond FLIP_TOL or its best token differs from llama.cpp's where it is
 * within FAST_TOL and llama.cpp's margin exceeds twice that (measure: only measures). */
static double fast_share(struct model *m, bool measure, const char *what)
{
    int total = 0, within = 0, top1 = 0, top1_checked = 0;
    double worst = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(fixture, "prompts"))
    {
        const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
        int n;
        struct llamacpp_position *at = llamacpp_positions(m, LL_MATH_FAST, p, &n);
        for (int i = 0; i < n; i++) {
            if (!(at[i].err <= worst))
                worst = at[i].err;
            if (!(at[i].err <= FAST_TOL)) {
                if (!measure)
                    printf("    %s pos %d: %.2e\n", name, i, at[i].err);
                if (!measure && !(at[i].err <= FLIP_TOL))
                    fail_msg("%s %s pos %d: %.2e of the scale from llama.cpp (at most %.2e)", what,
                             name, i, at[i].err, FLIP_TOL);
                continue;
            }
            within++;
            if (at[i].margin > 2 * FAST_TOL) {
                top1_checked++;
                top1 += at[i].top1;
                if (!measure && !at[i].top1)
                    fail_msg("%s %s pos %d: the best token is not llama.cpp's", what, name, i);
            }
        }
        total += n;
        free(at);
    }
    printf("  %s: %d of %d positions within %.0e of the scale, worst %.2e; top-1 equal at %d of "
           "%d checked\n",
           what, within, total, FAST_TOL, worst, top1, top1_checked);
    if (!measure)
        assert_true(top1_checked >= total / 2);
    return (double)within / total;
}

static void test_llama_cpp_parity(void **state)
{
    (void)state;
    struct model *m = model_tmp_open(dir, NULL);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "qwen2_moe");
    assert_int_equal(c->moe.n_experts, 8);
    assert_int_equal(c->moe.n_experts_used, 2);
    assert_false(c->moe.norm_topk_prob);
    for (int l = 0; l < c->n_layers; l++)
        assert_true(model_layer_sparse(c, l)); /* llama.cpp's qwen2moe: every layer */
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(fixture, "prompts"))
    {
        char what[64];
        snprintf(what, sizeof what, "%s exact", cJSON_GetObjectItem(p, "name")->valuestring);
        llamacpp_compare(m, LL_MATH_EXACT, p, EXACT_TOL, what);
    }
    assert_true(fast_share(m, false, "fast") >= FAST_SHARE);
    model_close(m);
}

/* The same weights read with another routing than llama.cpp's: every prompt is far off on the
 * exact path, and the fast path's share of close positions collapses, so both comparisons above
 * depend on the experts and their weights. */
static void test_routing_matters(void **state)
{
    (void)state;
    static const struct {
        const char *from, *to;
    } edits[] = {
        {"\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 1"},
        {"\"norm_topk_prob\": false", "\"norm_topk_prob\": true"},
    };
    char path[96];
    snprintf(path, sizeof path, "%s/m", dir);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        config_edit(path, edits[i].from, edits[i].to);
        struct model *m = model_tmp_open(dir, NULL);
        double off = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(fixture, "prompts"))
        {
            double d = llamacpp_compare(m, LL_MATH_EXACT, p, 0, edits[i].to);
            if (!(d <= off))
                off = d;
        }
        printf("  with %s the exact path is off by %.2e of the scale\n", edits[i].to, off);
        assert_true(off > 0.1);
        char what[64];
        snprintf(what, sizeof what, "with %s, fast", edits[i].to);
        assert_true(fast_share(m, true, what) < FAST_SHARE / 2);
        model_close(m);
        config_edit(path, edits[i].to, edits[i].from);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_are_the_fixtures),
        cmocka_unit_test(test_llama_cpp_parity),
        cmocka_unit_test(test_routing_matters),
    };
    /* RMSNorm, the experts' SwiGLU and attention run through the ops: every level this CPU has */
    int failed = 0;
    static const char *const levels[] = {"avx512", "avx2", "scalar"};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (!ll_ops_set_variant(levels[l])) {
            printf("SKIP qwen2_moe vs llama.cpp on %s ops: this CPU cannot run them\n", levels[l]);
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "qwen2_moe vs llama.cpp (ops %s)", ll_ops_variant());
        failed += cmocka_run_group_tests_name(name, tests, group_setup, group_teardown);
    }
    return failed;
}
