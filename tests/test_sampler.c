/*
 * test_sampler.c: greedy, temperature, top-k, top-p and the seeded draw of sampler.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "sampler.h"

enum { BIG = 151936 };

static void random_logits(float *l, int n, uint64_t seed, float scale)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)(sampler_uniform(seed, (uint64_t)i) * 2.0 - 1.0) * scale;
}

static void test_greedy(void **state)
{
    (void)state;
    struct sampler s;
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *l = malloc(sizeof(float) * BIG);
    for (int t = 0; t < 20; t++) {
        random_logits(l, BIG, 100 + t, 20.0f);
        int32_t want = ll_argmax(l, BIG);
        struct sampler_params g = {.temperature = 0.0f, .seed = (uint64_t)t};
        struct sampler_params k1 = {.temperature = 1.3f, .top_k = 1, .top_p = 0.9f,
                                    .seed = (uint64_t)t};
        assert_int_equal(sampler_sample(&s, l, &g, (uint64_t)t), want);
        assert_int_equal(sampler_sample(&s, l, &k1, (uint64_t)t), want);
        /* A low temperature concentrates everything on a clear argmax. */
        l[want] += 0.5f;
        struct sampler_params cold = {.temperature = 0.01f, .top_p = 0.9f, .seed = (uint64_t)t};
        assert_int_equal(sampler_sample(&s, l, &cold, (uint64_t)t), want);
    }
    /* Ties go to the lower id. */
    memset(l, 0, sizeof(float) * BIG);
    l[7] = l[9] = 5.0f;
    struct sampler_params g = {0};
    assert_int_equal(sampler_sample(&s, l, &g, 0), 7);
    free(l);
    sampler_free(&s);
    assert_int_equal(sampler_init(&s, 0, NULL), LL_EINVAL);
}

static void test_seeded(void **state)
{
    (void)state;
    struct sampler s;
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *l = malloc(sizeof(float) * BIG);
    random_logits(l, BIG, 7, 4.0f);
    struct sampler_params p = {.temperature = 1.0f, .top_p = 0.95f, .seed = 42};
    int32_t first[16];
    int distinct = 0;
    for (int c = 0; c < 16; c++)
        first[c] = sampler_sample(&s, l, &p, (uint64_t)c);
    /* Same (seed, counter): same draw, whatever was drawn in between. */
    for (int c = 15; c >= 0; c--)
        assert_int_equal(sampler_sample(&s, l, &p, (uint64_t)c), first[c]);
    for (int c = 1; c < 16; c++)
        distinct += first[c] != first[0];
    assert_true(distinct > 0); /* a flat-ish distribution over 151936 ids varies per counter */
    /* Another seed gives other draws. */
    struct sampler_params q = p;
    q.seed = 43;
    int differ = 0;
    for (int c = 0; c < 16; c++)
        differ += sampler_sample(&s, l, &q, (uint64_t)c) != first[c];
    assert_true(differ > 8);
    /* sampler_uniform: in [0, 1), mean near 1/2. */
    double sum = 0;
    for (int c = 0; c < 100000; c++) {
        double u = sampler_uniform(5, (uint64_t)c);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.005);
    free(l);
    sampler_free(&s);
}

/* Draw `n` times (counters 0..n-1) and compare frequencies with `want` (size V). */
static void check_distribution(struct sampler *s, const float *l, const struct sampler_params *p,
                               const double *want, int V, int n)
{
    int *count = calloc((size_t)V, sizeof(int));
    for (int c = 0; c < n; c++) {
        int32_t t = sampler_sample(s, l, p, (uint64_t)c);
        assert_true(t >= 0 && t < V);
        count[t]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / n;
        double sd = sqrt(want[i] * (1 - want[i]) / n);
        if (want[i] == 0.0)
            assert_int_equal(count[i], 0);
        else if (fabs(f - want[i]) > 5 * sd + 1e-3) {
            print_error("id %d: frequency %.4f, expected %.4f\n", i, f, want[i]);
            fail();
        }
    }
    free(count);
}

static void test_distribution(void **state)
{
    (void)state;
    enum { V = 6, N = 40000 };
    struct sampler s;
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    const float l[V] = {2.0f, 1.0f, 0.5f, -1.0f, 1.5f, 0.0f};
    double want[V], z = 0;
    const float T = 0.8f;
    for (int i = 0; i < V; i++)
        z += want[i] = exp(l[i] / T);
    for (int i = 0; i < V; i++)
        want[i] /= z;
    struct sampler_params p = {.temperature = T, .seed = 1234};
    check_distribution(&s, l, &p, want, V, N);

    /* top-k 3: ids 0, 4, 1 renormalised. */
    double wk[V] = {0};
    z = 0;
    int keep[3] = {0, 4, 1};
    for (int j = 0; j < 3; j++)
        z += wk[keep[j]] = exp(l[keep[j]] / T);
    for (int j = 0; j < 3; j++)
        wk[keep[j]] /= z;
    p.top_k = 3;
    check_distribution(&s, l, &p, wk, V, N);
    sampler_free(&s);
}

static void test_top_p(void **state)
{
    (void)state;
    enum { V = 5, N = 30000 };
    struct sampler s;
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    /* Probabilities 0.5, 0.25, 0.15, 0.07, 0.03 at T = 1, ids shuffled. */
    const double pr[V] = {0.15, 0.5, 0.03, 0.25, 0.07};
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)log(pr[i]);
    /* top_p 0.7: 0.5 < 0.7 so the 0.25 id is kept, then 0.75 >= 0.7 stops: ids 1 and 3. */
    double want[V] = {0, 0.5 / 0.75, 0, 0.25 / 0.75, 0};
    struct sampler_params p = {.temperature = 1.0f, .top_p = 0.7f, .seed = 99};
    check_distribution(&s, l, &p, want, V, N);
    /* top_p 0.85: 0.75 < 0.85 keeps the 0.15 id too; 0.9 >= 0.85 stops. */
    double want2[V] = {0.15 / 0.9, 0.5 / 0.9, 0, 0.25 / 0.9, 0};
    p.top_p = 0.85f;
    check_distribution(&s, l, &p, want2, V, N);
    /* top_p tiny: only the best id. */
    double want3[V] = {0, 1, 0, 0, 0};
    p.top_p = 0.01f;
    check_distribution(&s, l, &p, want3, V, 2000);
    sampler_free(&s);

    /* On a real-sized vocabulary: the nucleus of a peaked distribution, and top-k + top-p. */
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *big = malloc(sizeof(float) * BIG);
    random_logits(big, BIG, 3, 1.0f);
    big[1000] = 30.0f; /* e^29 ≈ 4e12 against 151936 · e^±1 ≈ 3.6e5: ~1e-7 of the mass */
    big[2000] = 29.0f;
    struct sampler_params q = {.temperature = 1.0f, .top_p = 0.9f, .seed = 5};
    int c1000 = 0;
    for (int c = 0; c < 400; c++) {
        int32_t t = sampler_sample(&s, big, &q, (uint64_t)c);
        assert_true(t == 1000 || t == 2000);
        c1000 += t == 1000;
    }
    /* P(1000 | {1000, 2000}) = e/(1+e) ≈ 0.731 */
    assert_true(fabs(c1000 / 400.0 - 0.7311) < 0.1); /* sd 0.022 */
    q.top_p = 0.5f; /* 0.731 >= 0.5: only the best */
    for (int c = 0; c < 50; c++)
        assert_int_equal(sampler_sample(&s, big, &q, (uint64_t)c), 1000);
    /* Flat distribution with top-p: the nucleus needs many sorted ids; all draws in range. */
    random_logits(big, BIG, 4, 0.1f);
    q.top_p = 0.99f;
    q.top_k = 50000;
    for (int c = 0; c < 20; c++) {
        int32_t t = sampler_sample(&s, big, &q, (uint64_t)c);
        assert_true(t >= 0 && t < BIG);
    }
    /* top-k 2 on the full vocabulary draws only the best two. */
    random_logits(big, BIG, 6, 3.0f);
    int32_t a = ll_argmax(big, BIG);
    float save = big[a];
    big[a] = -INFINITY;
    int32_t b = ll_argmax(big, BIG);
    big[a] = save;
    struct sampler_params k2 = {.temperature = 5.0f, .top_k = 2, .seed = 8};
    int seen_a = 0, seen_b = 0;
    for (int c = 0; c < 60; c++) {
        int32_t t = sampler_sample(&s, big, &k2, (uint64_t)c);
        assert_true(t == a || t == b);
        seen_a += t == a;
        seen_b += t == b;
    }
    assert_true(seen_a > 0 && seen_b > 0);
    free(big);
    sampler_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),       cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_distribution), cmocka_unit_test(test_top_p),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
