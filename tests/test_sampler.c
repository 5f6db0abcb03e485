/*
 * test_sampler.c: greedy, temperature, top-k, top-p, min-p and the seeded draw of sampler.h;
 * logit bias, repetition / presence / frequency penalties over the sparse token counts, and
 * log-probabilities, each checked against its definition (exact values, or frequencies over
 * many seeded draws on synthetic logits).
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

/* Probabilities e^(l/T) / Σ over the ids with keep[i] (all when keep is NULL). */
static void softmax_want(const float *l, int V, float T, const int *keep, double *want)
{
    double z = 0;
    for (int i = 0; i < V; i++)
        z += want[i] = (!keep || keep[i]) ? exp((double)l[i] / T) : 0.0;
    for (int i = 0; i < V; i++)
        want[i] /= z;
}

static void test_min_p(void **state)
{
    (void)state;
    enum { V = 7, N = 40000 };
    struct sampler s;
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    /* p_i / p_max = e^(l_i - 2); min_p = e^-1.25 keeps l >= 0.75 exactly: 2, 1, 0.8 (ids 0, 3,
     * 5), not 0.7 (id 1), 0.74 (id 6) nor the rest */
    const float l[V] = {2.0f, 0.7f, -1.0f, 1.0f, -3.0f, 0.8f, 0.74f};
    double want[V];
    const int keep1[V] = {1, 0, 0, 1, 0, 1, 0};
    softmax_want(l, V, 1.0f, keep1, want);
    struct sampler_params p = {.temperature = 1.0f, .min_p = (float)exp(-1.25), .seed = 5};
    check_distribution(&s, l, &p, want, V, N);
    /* At T = 2 the bound is on (l - max)/2 >= -1.25: l >= -0.5 keeps 0, 1, 3, 5, 6. */
    const int keep2[V] = {1, 1, 0, 1, 0, 1, 1};
    softmax_want(l, V, 2.0f, keep2, want);
    p.temperature = 2.0f;
    check_distribution(&s, l, &p, want, V, N);
    /* With top-k 2 on top: the best two of what min-p kept. */
    const int keep3[V] = {1, 0, 0, 1, 0, 0, 0};
    softmax_want(l, V, 2.0f, keep3, want);
    p.top_k = 2;
    check_distribution(&s, l, &p, want, V, N);
    /* min_p then top_p (vLLM's order): at T = 1 min-p keeps {2, 1, 0.8} with probabilities
     * 0.595, 0.219, 0.179 (renormalised); top_p 0.8 then needs the first two (0.814). */
    const int keep4[V] = {1, 0, 0, 1, 0, 0, 0};
    softmax_want(l, V, 1.0f, keep4, want);
    p = (struct sampler_params){.temperature = 1.0f, .min_p = (float)exp(-1.25), .top_p = 0.8f,
                                .seed = 6};
    check_distribution(&s, l, &p, want, V, N);
    sampler_free(&s);

    /* Full vocabulary: min_p 1 keeps only the best id; a tiny min_p changes nothing. */
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *big = malloc(sizeof(float) * BIG);
    random_logits(big, BIG, 11, 5.0f);
    int32_t best = ll_argmax(big, BIG);
    struct sampler_params one = {.temperature = 1.5f, .min_p = 1.0f, .seed = 3};
    struct sampler_params tiny = {.temperature = 1.5f, .min_p = 1e-30f, .seed = 3};
    struct sampler_params off = {.temperature = 1.5f, .seed = 3};
    for (int c = 0; c < 50; c++) {
        assert_int_equal(sampler_sample(&s, big, &one, (uint64_t)c), best);
        assert_int_equal(sampler_sample(&s, big, &tiny, (uint64_t)c),
                         sampler_sample(&s, big, &off, (uint64_t)c));
    }
    free(big);
    sampler_free(&s);
}

/* top_k 1 is greedy whatever the other settings, and greedy picks the argmax of the processed
 * logits (after bias and penalties). */
static void test_top_k1_is_greedy(void **state)
{
    (void)state;
    struct sampler s;
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *l = malloc(sizeof(float) * BIG);
    struct token_counts tc;
    assert_int_equal(token_counts_init(&tc, 64, NULL), LL_OK);
    for (int t = 0; t < 60; t++) {
        random_logits(l, BIG, 300 + (uint64_t)t, 8.0f);
        struct sampler_bias b[2] = {{(int32_t)(t * 7919 % BIG), 3.0f},
                                    {ll_argmax(l, BIG), -2.0f}};
        sampler_apply_bias(l, b, 2);
        token_counts_clear(&tc);
        for (int k = 0; k < 20; k++)
            token_counts_add(&tc, (int32_t)(sampler_uniform(t, (uint64_t)k) * BIG), k % 2);
        struct sampler_penalties pen = {.repetition = 1.3f, .presence = 0.4f, .frequency = 0.2f};
        sampler_apply_penalties(l, &tc, &pen);
        int32_t want = ll_argmax(l, BIG);
        struct sampler_params k1 = {.temperature = 0.2f + 0.01f * (float)t, .top_k = 1,
                                    .top_p = t % 3 ? 0.9f : 1.0f, .min_p = t % 2 ? 0.05f : 0.0f,
                                    .seed = (uint64_t)t};
        struct sampler_params g = {.temperature = 0.0f, .seed = (uint64_t)t};
        assert_int_equal(sampler_sample(&s, l, &k1, (uint64_t)t), want);
        assert_int_equal(sampler_sample(&s, l, &g, (uint64_t)t), want);
    }
    token_counts_free(&tc);
    free(l);
    sampler_free(&s);
}

static void test_token_counts(void **state)
{
    (void)state;
    struct token_counts c;
    assert_int_equal(token_counts_init(&c, 5, NULL), LL_OK);
    assert_true(c.cap >= 10);
    assert_true(token_counts_add(&c, 7, false));
    assert_true(token_counts_add(&c, 7, true));
    assert_true(token_counts_add(&c, 7, true));
    assert_true(token_counts_add(&c, 151935, true));
    assert_true(token_counts_add(&c, 0, false));
    assert_true(token_counts_add(&c, 3, true));
    assert_true(token_counts_add(&c, 4, false));
    assert_false(token_counts_add(&c, 5, true)); /* a sixth distinct id does not fit */
    assert_true(token_counts_add(&c, 3, true));  /* but known ids still count */
    bool pr;
    assert_int_equal(token_counts_get(&c, 7, &pr), 2);
    assert_true(pr);
    assert_int_equal(token_counts_get(&c, 151935, &pr), 1);
    assert_false(pr);
    assert_int_equal(token_counts_get(&c, 0, &pr), 0);
    assert_true(pr);
    assert_int_equal(token_counts_get(&c, 3, NULL), 2);
    assert_int_equal(token_counts_get(&c, 5, &pr), 0);
    assert_false(pr);
    token_counts_clear(&c);
    assert_int_equal(token_counts_get(&c, 7, &pr), 0);
    assert_false(pr);
    for (int i = 0; i < 5; i++)
        assert_true(token_counts_add(&c, 1000 + i * 1024, true)); /* colliding slots */
    for (int i = 0; i < 5; i++)
        assert_int_equal(token_counts_get(&c, 1000 + i * 1024, NULL), 1);
    token_counts_free(&c);
    token_counts_free(&c); /* twice is fine */
}

/* The penalties change exactly the ids seen, by exactly the defined amounts. */
static void test_penalty_values(void **state)
{
    (void)state;
    enum { V = 10 };
    float l[V] = {1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f, 3.0f, 0.0f, 1.5f, -3.0f};
    float orig[V];
    memcpy(orig, l, sizeof l);
    struct token_counts c;
    assert_int_equal(token_counts_init(&c, 16, NULL), LL_OK);
    token_counts_add(&c, 2, false); /* prompt only */
    token_counts_add(&c, 3, false);
    token_counts_add(&c, 4, true);  /* output twice */
    token_counts_add(&c, 4, true);
    token_counts_add(&c, 5, true);  /* output three times */
    token_counts_add(&c, 5, true);
    token_counts_add(&c, 5, true);
    token_counts_add(&c, 6, false); /* prompt and output */
    token_counts_add(&c, 6, true);
    struct sampler_penalties p = {.repetition = 2.0f, .presence = 0.5f, .frequency = 0.25f};
    assert_true(sampler_penalties_active(&p));
    sampler_apply_penalties(l, &c, &p);
    const float want[V] = {1.0f, -1.0f, 1.0f, -4.0f,
                           0.25f - 0.5f - 0.5f, -1.0f - 0.5f - 0.75f, 1.5f - 0.5f - 0.25f, 0.0f,
                           1.5f, -3.0f};
    for (int i = 0; i < V; i++)
        assert_float_equal(l[i], want[i], 1e-6);
    /* Presence and frequency leave prompt-only ids alone; repetition 1 (or 0) is off. */
    memcpy(l, orig, sizeof l);
    struct sampler_penalties q = {.repetition = 0.0f, .presence = -1.0f, .frequency = 0.0f};
    sampler_apply_penalties(l, &c, &q);
    for (int i = 0; i < V; i++)
        assert_float_equal(l[i], orig[i] + ((i == 4 || i == 5 || i == 6) ? 1.0f : 0.0f), 1e-6);
    struct sampler_penalties off = {.repetition = 1.0f};
    assert_false(sampler_penalties_active(&off));
    struct sampler_penalties zero = {0};
    assert_false(sampler_penalties_active(&zero));
    token_counts_free(&c);
}

/* Sampled frequencies follow the penalised distribution: a repeated token's probability drops
 * by the defined factor. */
static void test_penalty_distribution(void **state)
{
    (void)state;
    enum { V = 5, N = 40000 };
    struct sampler s;
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    struct token_counts c;
    assert_int_equal(token_counts_init(&c, 16, NULL), LL_OK);
    const float base[V] = {0.0f, 0.0f, 0.0f, 1.0f, -1.0f};
    float l[V];
    double want[V];
    struct sampler_params p = {.temperature = 1.0f, .seed = 77};

    /* presence ln 2 on id 0 (in the output once): its weight halves. */
    token_counts_add(&c, 0, true);
    memcpy(l, base, sizeof l);
    struct sampler_penalties pres = {.presence = (float)log(2.0)};
    sampler_apply_penalties(l, &c, &pres);
    double w0[V] = {0.5, 1, 1, exp(1.0), exp(-1.0)}, z = 0;
    for (int i = 0; i < V; i++)
        z += w0[i];
    for (int i = 0; i < V; i++)
        want[i] = w0[i] / z;
    check_distribution(&s, l, &p, want, V, N);

    /* frequency 0.3 on id 1 seen 3 times: e^-0.9; presence on top of it. */
    token_counts_clear(&c);
    for (int k = 0; k < 3; k++)
        token_counts_add(&c, 1, true);
    memcpy(l, base, sizeof l);
    struct sampler_penalties freq = {.frequency = 0.3f, .presence = 0.1f};
    sampler_apply_penalties(l, &c, &freq);
    double w1[V] = {1, exp(-1.0), 1, exp(1.0), exp(-1.0)};
    z = 0;
    for (int i = 0; i < V; i++)
        z += w1[i];
    for (int i = 0; i < V; i++)
        want[i] = w1[i] / z;
    check_distribution(&s, l, &p, want, V, N);

    /* repetition 2 over the prompt: id 3 (logit 1 → 0.5) and id 4 (-1 → -2). */
    token_counts_clear(&c);
    token_counts_add(&c, 3, false);
    token_counts_add(&c, 4, false);
    memcpy(l, base, sizeof l);
    struct sampler_penalties rep = {.repetition = 2.0f};
    sampler_apply_penalties(l, &c, &rep);
    double w2[V] = {1, 1, 1, exp(0.5), exp(-2.0)};
    z = 0;
    for (int i = 0; i < V; i++)
        z += w2[i];
    for (int i = 0; i < V; i++)
        want[i] = w2[i] / z;
    check_distribution(&s, l, &p, want, V, N);
    token_counts_free(&c);
    sampler_free(&s);
}

/* logit_bias forces (+100) or bans (-100) a token, and otherwise shifts by e^bias. */
static void test_logit_bias(void **state)
{
    (void)state;
    struct sampler s;
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *l = malloc(sizeof(float) * BIG);
    random_logits(l, BIG, 21, 4.0f);
    int32_t best = ll_argmax(l, BIG);
    struct sampler_bias force = {12345, 100.0f};
    sampler_apply_bias(l, &force, 1);
    struct sampler_params p = {.temperature = 1.0f, .top_p = 0.95f, .seed = 9};
    for (int c = 0; c < 200; c++)
        assert_int_equal(sampler_sample(&s, l, &p, (uint64_t)c), 12345);
    /* banned: the argmax is no longer greedy's choice, and no draw picks it */
    random_logits(l, BIG, 21, 4.0f);
    struct sampler_bias ban = {best, -100.0f};
    sampler_apply_bias(l, &ban, 1);
    struct sampler_params g = {0};
    int32_t second = sampler_sample(&s, l, &g, 0);
    assert_int_not_equal(second, best);
    for (int c = 0; c < 500; c++)
        assert_int_not_equal(sampler_sample(&s, l, &p, (uint64_t)c), best);
    free(l);
    sampler_free(&s);

    /* The shift: bias ln 3 on id 2 triples its weight. */
    enum { V = 4, N = 40000 };
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    float sl[V] = {0.5f, 0.0f, 0.0f, -0.5f};
    struct sampler_bias b[2] = {{2, (float)log(3.0)}, {3, 0.0f}};
    sampler_apply_bias(sl, b, 2);
    double w[V] = {exp(0.5), 1, 3, exp(-0.5)}, z = 0, want[V];
    for (int i = 0; i < V; i++)
        z += w[i];
    for (int i = 0; i < V; i++)
        want[i] = w[i] / z;
    struct sampler_params q = {.temperature = 1.0f, .seed = 31};
    check_distribution(&s, sl, &q, want, V, N);
    sampler_free(&s);
}

/* log_softmax(l / T) in double, for checking. */
static double ref_logprob(const float *l, int V, double T, int id)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++)
        z += exp(((double)l[i] - mx) / T);
    return ((double)l[id] - mx) / T - log(z);
}

static void test_logprobs(void **state)
{
    (void)state;
    struct sampler s;
    assert_int_equal(sampler_init(&s, BIG, NULL), LL_OK);
    float *l = malloc(sizeof(float) * BIG);
    random_logits(l, BIG, 41, 6.0f);
    l[500] = l[501] = 9.0f; /* a tie at the top: the lower id first */
    for (int t = 0; t < 3; t++) {
        float T = t == 0 ? 0.0f : t == 1 ? 1.0f : 0.5f;
        struct sampler_logprobs lp;
        struct sampler_params p = {.temperature = T, .seed = 4};
        int32_t id = sampler_sample(&s, l, &p, 0);
        sampler_logprobs(&s, l, T, id, 20, &lp);
        assert_int_equal(lp.n_top, 20);
        assert_int_equal(lp.top_ids[0], 500);
        assert_int_equal(lp.top_ids[1], 501);
        double Tr = T > 0 ? T : 1.0, sum = 0;
        assert_float_equal(lp.logprob, ref_logprob(l, BIG, Tr, id), 1e-4);
        for (int j = 0; j < 20; j++) {
            assert_float_equal(lp.top_logprobs[j], ref_logprob(l, BIG, Tr, lp.top_ids[j]), 1e-4);
            assert_true(lp.top_logprobs[j] <= 0.0f);
            if (j) { /* ordered: logit descending, then id */
                assert_true(lp.top_logprobs[j] <= lp.top_logprobs[j - 1]);
                assert_true(l[lp.top_ids[j]] < l[lp.top_ids[j - 1]] ||
                            (l[lp.top_ids[j]] == l[lp.top_ids[j - 1]] &&
                             lp.top_ids[j] > lp.top_ids[j - 1]));
            }
            sum += exp(lp.top_logprobs[j]);
        }
        assert_true(sum <= 1.0 + 1e-5);
        /* nothing outside the list ranks above its last entry */
        for (int i = 0; i < BIG; i++) {
            bool in = false;
            for (int j = 0; j < 20; j++)
                in |= lp.top_ids[j] == i;
            if (!in)
                assert_true(l[i] <= l[lp.top_ids[19]]);
        }
        if (T == 0.0f)
            assert_int_equal(id, 500);
    }
    /* A small vocabulary: all ids listed, probabilities sum to 1. */
    sampler_free(&s);
    enum { V = 6, N = 30000 };
    assert_int_equal(sampler_init(&s, V, NULL), LL_OK);
    const float sl[V] = {1.0f, -0.5f, 2.0f, 0.0f, -INFINITY, 0.3f};
    struct sampler_logprobs lp;
    sampler_logprobs(&s, sl, 0.7f, 4, 20, &lp);
    assert_int_equal(lp.n_top, V);
    assert_true(lp.logprob == -INFINITY);
    double sum = 0;
    for (int j = 0; j < V; j++)
        sum += exp(lp.top_logprobs[j]);
    assert_float_equal(sum, 1.0, 1e-5);
    assert_int_equal(lp.top_ids[0], 2);
    assert_int_equal(lp.top_ids[V - 1], 4);
    sampler_logprobs(&s, sl, 0.7f, 2, 0, &lp);
    assert_int_equal(lp.n_top, 0);
    assert_float_equal(lp.logprob, ref_logprob(sl, V, 0.7, 2), 1e-5);
    /* The reported probabilities are what the draws follow (no top-k/top-p here). */
    int count[V] = {0};
    struct sampler_params p = {.temperature = 0.7f, .seed = 8};
    for (int c = 0; c < N; c++)
        count[sampler_sample(&s, sl, &p, (uint64_t)c)]++;
    for (int i = 0; i < V; i++) {
        sampler_logprobs(&s, sl, 0.7f, i, 0, &lp);
        double pr = exp(lp.logprob), f = (double)count[i] / N;
        assert_true(fabs(f - pr) <= 5 * sqrt(pr * (1 - pr) / N) + 1e-3);
    }
    sampler_free(&s);
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),         cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_distribution),   cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),          cmocka_unit_test(test_top_k1_is_greedy),
        cmocka_unit_test(test_token_counts),   cmocka_unit_test(test_penalty_values),
        cmocka_unit_test(test_penalty_distribution), cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
