/*
 * llamacpp_ref.c: comparing the engine's forward pass with llama.cpp's logits stored in a
 * fixture (llamacpp_ref.h).
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
#include "model_tmp.h"
#include "ops.h"
#include "runtime.h"
#include "safetensors.h"
#include "util.h"

#define CHUNK 32 /* tokens per forward call (logits for all of them) */

cJSON *llamacpp_fixture_load(const char *path)
{
    char *text;
    size_t len;
    struct ll_err err = {0};
    if (ll_read_file(path, &text, &len, &err) != LL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j)
        fprintf(stderr, "%s: not JSON\n", path);
    return j;
}

/* The fixture's largest |logit| of prompt p: the scale of the differences. */
static double fixture_scale(const cJSON *p)
{
    double scale = 0;
    for (const cJSON *q = cJSON_GetObjectItem(p, "positions")->child; q; q = q->next) {
        const cJSON *l;
        cJSON_ArrayForEach(l, cJSON_GetObjectItem(q, "logits"))
            scale = fmax(scale, fabs(l->valuedouble));
    }
    return scale;
}

/* Called for position i of a prompt with the engine's logits there and the fixture's entry q. */
typedef void each_position(void *ctx, int i, const float *row, const cJSON *q);

/* Run prompt p through m with `math` (2 threads, CHUNK tokens a call) and hand every position's
 * logits to each(ctx, ...) in order. */
static void run_prompt(struct model *m, enum ll_math math, const cJSON *p, each_position *each,
                       void *ctx)
{
    const cJSON *ids_j = cJSON_GetObjectItem(p, "ids"),
                *pos_j = cJSON_GetObjectItem(p, "positions");
    int n = cJSON_GetArraySize(ids_j), V = m->config.vocab_size;
    assert_int_equal(cJSON_GetArraySize(pos_j), n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        ids[i] = cJSON_GetArrayItem(ids_j, i)->valueint;
    struct runtime_opts o = {.n_ctx = 512, .max_batch = CHUNK, .n_threads = 2, .math = math};
    struct model_runtime *rt;
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, m, &o, &err), LL_OK);
    float *logits = malloc(sizeof(float) * CHUNK * (size_t)V);
    int32_t pos[CHUNK];
    uint8_t want[CHUNK];
    memset(want, 1, sizeof want);
    const cJSON *q = pos_j->child;
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int j = 0; j < k; j++)
            pos[j] = i0 + j;
        struct ll_batch b = {.n_tokens = k, .token = ids + i0, .pos = pos, .want_logits = want};
        enum ll_status s = runtime_forward(rt, &b, logits, &err);
        if (s)
            print_error("runtime_forward: %s\n", err.msg);
        assert_int_equal(s, LL_OK);
        for (int j = 0; j < k; j++, q = q->next)
            each(ctx, i0 + j, logits + (size_t)j * V, q);
    }
    runtime_free(rt);
    free(logits);
    free(ids);
}

struct compare {
    const char *what;
    double tol, worst; /* absolute */
    int V, top1, top1_checked;
};

static void compare_position(void *ctx, int i, const float *row, const cJSON *q)
{
    struct compare *c = ctx;
    const cJSON *sel = cJSON_GetObjectItem(q, "ids"), *ref = cJSON_GetObjectItem(q, "logits");
    for (int j = 0; j < cJSON_GetArraySize(sel); j++) {
        int v = cJSON_GetArrayItem(sel, j)->valueint;
        double r = cJSON_GetArrayItem(ref, j)->valuedouble, d = fabs(row[v] - r);
        if (!(d <= c->worst)) /* a NaN stays */
            c->worst = d;
        if (c->tol > 0 && !(d <= c->tol)) /* NaN too */
            fail_msg("%s pos %d token %d: %.6f, llama.cpp %.6f (tol %.2e)", c->what, i, v, row[v],
                     r, c->tol);
    }
    /* the first two ids are llama.cpp's best two */
    double margin = cJSON_GetArrayItem(ref, 0)->valuedouble -
                    cJSON_GetArrayItem(ref, 1)->valuedouble;
    if (c->tol > 0 && margin > 2 * c->tol) {
        c->top1_checked++;
        c->top1 += ll_argmax(row, c->V) == cJSON_GetArrayItem(sel, 0)->valueint;
    }
}

/* Run prompt p through m and compare with llama.cpp's logits: returns the worst difference
 * over the scale; fails above rel_tol (when rel_tol > 0). */
double llamacpp_compare(struct model *m, enum ll_math math, const cJSON *p, double rel_tol,
                        const char *what)
{
    double scale = fixture_scale(p);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
    struct compare c = {.what = what, .tol = rel_tol * scale, .V = m->config.vocab_size};
    run_prompt(m, math, p, compare_position, &c);
    if (rel_tol > 0) {
        printf("  %s: %d positions, worst %.2e of scale %.3f, top-1 equal at %d of %d checked\n",
               what, n, c.worst / scale, scale, c.top1, c.top1_checked);
        assert_int_equal(c.top1, c.top1_checked);
        assert_true(c.top1_checked >= n / 2);
    }
    return c.worst / scale;
}

struct positions {
    struct llamacpp_position *at;
    double scale;
    int V;
};

static void position_figures(void *ctx, int i, const float *row, const cJSON *q)
{
    struct positions *ps = ctx;
    const cJSON *sel = cJSON_GetObjectItem(q, "ids"), *ref = cJSON_GetObjectItem(q, "logits");
    double worst = 0;
    for (int j = 0; j < cJSON_GetArraySize(sel); j++) {
        double d = fabs(row[cJSON_GetArrayItem(sel, j)->valueint] -
                        cJSON_GetArrayItem(ref, j)->valuedouble);
        if (!(d <= worst)) /* a NaN stays */
            worst = d;
    }
    ps->at[i] = (struct llamacpp_position){
        .err = worst / ps->scale,
        .margin =
            (cJSON_GetArrayItem(ref, 0)->valuedouble - cJSON_GetArrayItem(ref, 1)->valuedouble) /
            ps->scale,
        .top1 = ll_argmax(row, ps->V) == cJSON_GetArrayItem(sel, 0)->valueint,
    };
}

struct llamacpp_position *llamacpp_positions(struct model *m, enum ll_math math, const cJSON *p,
                                             int *n)
{
    *n = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
    struct positions ps = {.at = malloc(sizeof(struct llamacpp_position) * (size_t)*n),
                           .scale = fixture_scale(p),
                           .V = m->config.vocab_size};
    run_prompt(m, math, p, position_figures, &ps);
    return ps.at;
}

int llamacpp_group_setup(cJSON **fixture, const char *path, char *dir, size_t size,
                         const char *tag, const struct mkmodel_spec *s)
{
    *fixture = llamacpp_fixture_load(path);
    if (!*fixture)
        return -1;
    return model_tmp_make(dir, size, tag, s);
}

int llamacpp_group_teardown(cJSON *fixture, const char *dir)
{
    cJSON_Delete(fixture);
    return model_tmp_remove(dir);
}

void llamacpp_check_weights(const cJSON *fixture, const char *model_dir, int n_samples)
{
    char path[160];
    snprintf(path, sizeof path, "%s/m/model.safetensors", model_dir);
    struct safetensors *st;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_OK);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(fixture, "weight_samples"))
    {
        const char *name = cJSON_GetArrayItem(e, 0)->valuestring;
        size_t idx = (size_t)cJSON_GetArrayItem(e, 1)->valuedouble;
        uint16_t want = (uint16_t)cJSON_GetArrayItem(e, 2)->valueint;
        const struct st_tensor *t = st_find(st, name);
        if (!t)
            fail_msg("mkmodel wrote no tensor %s (the fixture's generator differs)", name);
        uint16_t got;
        memcpy(&got, (const char *)t->data + 2 * idx, 2);
        if (got != want)
            fail_msg("%s[%zu] is 0x%04x, the fixture's 0x%04x: mkmodel's output changed; "
                     "regenerate the fixture (tests/fixtures/README.md)",
                     name, idx, got, want);
        n++;
    }
    assert_int_equal(n, n_samples);
    st_close(st);
}

void llamacpp_compare_prompts(struct model *m, const cJSON *fixture, double exact_tol,
                              double fast_tol, const char *fast_only)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(fixture, "prompts"))
    {
        const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
        char what[64];
        snprintf(what, sizeof what, "%s exact", name);
        llamacpp_compare(m, LL_MATH_EXACT, p, exact_tol, what);
        if (fast_only && strcmp(name, fast_only))
            continue;
        snprintf(what, sizeof what, "%s fast", name);
        llamacpp_compare(m, LL_MATH_FAST, p, fast_tol, what);
    }
}

void llamacpp_expect_off(const char *model_dir, const cJSON *p, const struct llamacpp_edit *edits,
                         size_t n, double min_off)
{
    char md[160];
    snprintf(md, sizeof md, "%s/m", model_dir);
    for (size_t i = 0; i < n; i++) {
        config_edit(md, edits[i].from, edits[i].to);
        struct model *m = model_tmp_open(model_dir, NULL);
        double off = llamacpp_compare(m, LL_MATH_EXACT, p, 0, edits[i].what);
        printf("  with %s: %.2e of the scale\n", edits[i].what, off);
        if (!(off > min_off))
            fail_msg("with %s the logits are only %.2e of the scale off (want > %.1e)",
                     edits[i].what, off, min_off);
        model_close(m);
        config_edit(md, edits[i].to, edits[i].from);
    }
}
