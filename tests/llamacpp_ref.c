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

#include "llamacpp_ref.h"
#include "ops.h"
#include "runtime.h"
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

/* Run prompt p through m and compare with llama.cpp's logits: returns the worst difference
 * over the scale; fails above rel_tol (when rel_tol > 0). */
double llamacpp_compare(struct model *m, enum ll_math math, const cJSON *p, double rel_tol,
                        const char *what)
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

    double scale = 0, worst = 0;
    for (const cJSON *q = pos_j->child; q; q = q->next) {
        const cJSON *l;
        cJSON_ArrayForEach(l, cJSON_GetObjectItem(q, "logits"))
            scale = fmax(scale, fabs(l->valuedouble));
    }
    int top1 = 0, top1_checked = 0;
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int j = 0; j < k; j++)
            pos[j] = i0 + j;
        struct ll_batch b = {.n_tokens = k, .token = ids + i0, .pos = pos, .want_logits = want};
        enum ll_status s = runtime_forward(rt, &b, logits, &err);
        if (s)
            print_error("runtime_forward: %s\n", err.msg);
        assert_int_equal(s, LL_OK);
        for (int j = 0; j < k; j++) {
            const cJSON *q = cJSON_GetArrayItem(pos_j, i0 + j);
            const cJSON *sel = cJSON_GetObjectItem(q, "ids"),
                        *ref = cJSON_GetObjectItem(q, "logits");
            const float *row = logits + (size_t)j * V;
            for (int c = 0; c < cJSON_GetArraySize(sel); c++) {
                int v = cJSON_GetArrayItem(sel, c)->valueint;
                double r = cJSON_GetArrayItem(ref, c)->valuedouble, d = fabs(row[v] - r);
                worst = fmax(worst, d);
                if (rel_tol > 0 && d > rel_tol * scale)
                    fail_msg("%s pos %d token %d: %.6f, llama.cpp %.6f (tol %.2e)", what, i0 + j, v,
                             row[v], r, rel_tol * scale);
            }
            /* the first two ids are llama.cpp's best two */
            double margin = cJSON_GetArrayItem(ref, 0)->valuedouble -
                            cJSON_GetArrayItem(ref, 1)->valuedouble;
            if (rel_tol > 0 && margin > 2 * rel_tol * scale) {
                top1_checked++;
                top1 += ll_argmax(row, V) == cJSON_GetArrayItem(sel, 0)->valueint;
            }
        }
    }
    if (rel_tol > 0) {
        printf("  %s: %d positions, worst %.2e of scale %.3f, top-1 equal at %d of %d checked\n",
               what, n, worst / scale, scale, top1, top1_checked);
        assert_int_equal(top1, top1_checked);
        assert_true(top1_checked >= n / 2);
    }
    runtime_free(rt);
    free(logits);
    free(ids);
    return worst / scale;
}
