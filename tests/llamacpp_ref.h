/*
 * llamacpp_ref.h: the engine's forward pass against llama.cpp's logits on the same weights, as
 * the tests/fixtures/...llamacpp.json files store them: per prompt its "ids" and, per position,
 * llama.cpp's 8 best "ids" (best first) and some fixed ones with their "logits".
 */
#ifndef LLAISYS_TEST_LLAMACPP_REF_H
#define LLAISYS_TEST_LLAMACPP_REF_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "mkmodel.h"
#include "model.h"
#include "runtime.h"

/* The fixture at path, parsed (NULL, with a message on stderr, when it cannot be read or
 * parsed). The caller frees it with cJSON_Delete. */
cJSON *llamacpp_fixture_load(const char *path);

/* A parity test's group setup: the fixture at path into *fixture, then the model of spec s (or
 * an empty directory when s is NULL) written as dir/m under a fresh temporary directory named
 * after tag (model_tmp_make; dir holds size bytes). Returns 0, or -1 with a message on stderr.
 * llamacpp_group_teardown frees the fixture and removes dir. */
int llamacpp_group_setup(cJSON **fixture, const char *path, char *dir, size_t size,
                         const char *tag, const struct mkmodel_spec *s);
int llamacpp_group_teardown(cJSON *fixture, const char *dir);

/* The fixture's "weight_samples" ([tensor, element, bf16 bits]: the weights llama.cpp ran)
 * against model_dir/m/model.safetensors, which the test regenerated with mkmodel: fails naming
 * the first tensor and element that differ (mkmodel's output changed: regenerate the fixture),
 * or when the fixture holds other than n_samples of them. */
void llamacpp_check_weights(const cJSON *fixture, const char *model_dir, int n_samples);

/* Run prompt p (a member of a fixture's "prompts") through m with `math` (2 threads, in chunks
 * of 32 tokens) and compare every stored logit: fails (naming the position and token) when one
 * is more than rel_tol of the fixture's largest |logit| away, or when the top-1 token differs
 * where llama.cpp's margin exceeds twice that (checked at half the positions at least), and
 * prints the figures; rel_tol 0 only measures. Returns the worst difference over that scale. */
double llamacpp_compare(struct model *m, enum ll_math math, const cJSON *p, double rel_tol,
                        const char *what);

/* Every prompt of the fixture through llamacpp_compare on m: the exact path within exact_tol,
 * and the fast path within fast_tol for the prompt named fast_only (NULL: every prompt; a
 * long prompt of a model whose fast path moves many margins may have too few clear positions
 * for the top-1 check). */
void llamacpp_compare_prompts(struct model *m, const cJSON *fixture, double exact_tol,
                              double fast_tol, const char *fast_only);

/* An edit of a fixture model's config.json that moves llama.cpp's logits far away. */
struct llamacpp_edit {
    const char *from, *to, *what;
};

/* The parity check is sharp: each edit of model_dir/m/config.json in turn made (config_edit),
 * the model reopened and prompt p run on the exact path, its worst difference (printed as "with
 * WHAT") more than min_off of the scale, the edit undone. */
void llamacpp_expect_off(const char *model_dir, const cJSON *p, const struct llamacpp_edit *edits,
                         size_t n, double min_off);

/* One position of a prompt: the largest difference over its stored logits and llama.cpp's margin
 * between its best two, both over the fixture's largest |logit|; whether the engine's best token
 * is llama.cpp's. */
struct llamacpp_position {
    double err, margin;
    bool top1;
};

/* Run prompt p through m with `math` as llamacpp_compare does and return the figures of each of
 * its *n positions (the caller frees them): for comparisons that some positions may fail for a
 * known reason. */
struct llamacpp_position *llamacpp_positions(struct model *m, enum ll_math math, const cJSON *p,
                                             int *n);

#endif
