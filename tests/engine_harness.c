/*
 * engine_harness.c: the engine tests' shared helpers (see engine_harness.h). Runs on the test's
 * thread; only result_add may run on another (it asserts nothing, cmocka's asserts jump back to
 * the test's own stack).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "engine_harness.h"

struct engine *make_engine(struct engine_opts o) { return make_engine_on(FIXTURE, o); }

struct engine *make_engine_on(const char *model, struct engine_opts o)
{
    struct engine *e = NULL;
    if (o.n_threads == 0)
        o.n_threads = 1;
    if (o.itl_target_ms == 0 && o.itl_max_ratio == 0) { /* chunks bounded by tokens, not time */
        o.itl_target_ms = 600000;
        o.itl_max_ratio = 100000;
    }
    struct ll_err err = {0};
    enum ll_status s = engine_create(&e, model, &o, &err);
    if (s != LL_OK)
        print_error("engine_create: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    return e;
}

void make_prompt(int32_t *ids, int n, uint64_t salt)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(sampler_uniform(salt, (uint64_t)i) * 150000);
}

struct engine_req *submit(struct engine *e, const struct engine_params *p)
{
    struct engine_req *r = NULL;
    struct ll_err err = {0};
    enum ll_status s = engine_submit(e, p, &r, &err);
    if (s != LL_OK)
        print_error("engine_submit: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    return r;
}

bool result_add(struct result *res, const struct engine_output *out)
{
    if (res->n + out->n_ids > MAXOUT || res->len + out->text.len >= sizeof res->text ||
        res->rlen + out->reasoning.len >= sizeof res->reasoning)
        return false;
    if (out->n_ids) {
        memcpy(res->ids + res->n, out->ids, sizeof(int32_t) * (size_t)out->n_ids);
        if (out->logprobs)
            memcpy(res->lp + res->n, out->logprobs,
                   sizeof(struct sampler_logprobs) * (size_t)out->n_ids);
    }
    res->n += out->n_ids;
    if (out->text.len)
        memcpy(res->text + res->len, out->text.data, out->text.len);
    res->len += out->text.len;
    res->text[res->len] = '\0';
    if (out->reasoning.len)
        memcpy(res->reasoning + res->rlen, out->reasoning.data, out->reasoning.len);
    res->rlen += out->reasoning.len;
    res->reasoning[res->rlen] = '\0';
    res->finish = out->finish;
    res->stop_id = out->stop_id;
    res->stop_str = out->stop_str;
    res->usage = out->usage;
    return true;
}

int drain(struct engine_req *r, struct result *res)
{
    struct engine_output out = {0};
    engine_poll(r, &out);
    assert_true(result_add(res, &out));
    int n = out.n_ids;
    engine_output_free(&out);
    return n;
}

void run_idle(struct engine *e)
{
    struct ll_err err = {0};
    enum ll_status s = engine_run_until_idle(e, &err);
    if (s != LL_OK)
        print_error("engine_run_until_idle: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
}

void step_once(struct engine *e)
{
    bool did;
    struct ll_err err = {0};
    enum ll_status s = engine_step(e, &did, &err);
    if (s != LL_OK)
        print_error("engine_step: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
}

void assert_pool_empty(struct engine *e)
{
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.kv_in_use, 0);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.kv_in_use + st.kv_cached + st.kv_free, st.kv_blocks);
}

void run_together(struct engine *e, const struct engine_params *p, int n, struct result *res)
{
    struct engine_req *r[32];
    assert_true(n <= 32);
    for (int i = 0; i < n; i++)
        r[i] = submit(e, &p[i]);
    run_idle(e);
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        drain(r[i], &res[i]);
        engine_req_release(r[i]);
    }
    assert_pool_empty(e);
}

void run_each_alone(struct engine_opts o, const struct engine_params *p, int n, struct result *res)
{
    run_each_alone_on(FIXTURE, o, p, n, res);
}

void run_each_alone_on(const char *model, struct engine_opts o, const struct engine_params *p,
                       int n, struct result *res)
{
    o.no_prefix_cache = true;
    struct engine *e = make_engine_on(model, o);
    for (int i = 0; i < n; i++) {
        run_together(e, &p[i], 1, &res[i]);
        assert_int_equal(res[i].usage.cached_tokens, 0);
    }
    engine_destroy(e);
}

void assert_same(const struct result *a, const struct result *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n);
    for (int i = 0; i < a->n; i++) { /* bit for bit */
        const struct sampler_logprobs *x = &a->lp[i], *y = &b->lp[i];
        assert_memory_equal(&x->logprob, &y->logprob, sizeof x->logprob);
        assert_int_equal(x->n_top, y->n_top);
        assert_memory_equal(x->top_ids, y->top_ids, sizeof(int32_t) * (size_t)x->n_top);
        assert_memory_equal(x->top_logprobs, y->top_logprobs, sizeof(float) * (size_t)x->n_top);
    }
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->stop_str, b->stop_str);
    assert_string_equal(a->text, b->text);
    assert_string_equal(a->reasoning, b->reasoning);
    assert_int_equal(a->usage.reasoning_tokens, b->usage.reasoning_tokens);
}

void other_params(struct engine_params *p, int n)
{
    static int32_t prompts[16][40];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        int len = 10 + (i * 7) % 25;
        make_prompt(prompts[i], len, 9000 + (uint64_t)i);
        p[i] = (struct engine_params){
            .prompt = prompts[i],
            .n_prompt = len,
            .max_tokens = 2 + i % 3,
            .ignore_eos = true,
            .sampling = {.temperature = 0.7f + 0.05f * (float)i,
                         .top_p = 0.9f,
                         .seed = 77 + (uint64_t)i},
        };
    }
}

void assert_deterministic(struct engine_opts o, const struct engine_params *x,
                          const struct engine_params *others, struct result *alone)
{
    assert_deterministic_on(FIXTURE, o, x, others, alone);
}

void assert_family_deterministic(const char *model, uint64_t prompt_seed, uint64_t seed,
                                 int quant, const char *quant_name)
{
    static int32_t x_prompt[36];
    make_prompt(x_prompt, 36, prompt_seed);
    struct engine_params x = {
        .prompt = x_prompt, .n_prompt = 36, .max_tokens = 12, .ignore_eos = true,
        .sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = seed},
    };
    struct engine_params others[16];
    other_params(others, 16);
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 17, .max_batch_tokens = 48};
    struct result dense, quantized;
    assert_deterministic_on(model, o, &x, others, &dense);
    assert_int_equal(dense.n, 12);
    o.quant = quant;
    assert_string_equal(engine_quant_names[quant], quant_name);
    assert_deterministic_on(model, o, &x, others, &quantized);
    assert_int_equal(quantized.n, 12);
}

void assert_deterministic_on(const char *model, struct engine_opts o,
                             const struct engine_params *x, const struct engine_params *others,
                             struct result *alone)
{
    assert_true(x->n_prompt >= 35 && x->n_prompt <= 64);
    run_each_alone_on(model, o, x, 1, alone);

    /* In a batch of 16 others (x in the middle). */
    struct engine_params p[17];
    memcpy(p, others, sizeof(struct engine_params) * 16);
    p[16] = p[8];
    p[8] = *x;
    struct result res[17];
    struct engine *e = make_engine_on(model, o);
    run_together(e, p, 17, res);
    engine_destroy(e);
    assert_same(alone, &res[8]);

    /* Preempted, in a tiny pool (4 blocks of 16; x takes 3 for its prompt), with the prefix
     * cache (recompute may hit its own freed blocks) and without (true recompute). */
    struct engine_params q[2] = {others[0], *x};
    q[0].max_tokens = 16; /* 10 + 16 tokens: grows into its second block at position 16 */
    struct result solo;   /* q[0] on its own; q[1], started last, is the victim */
    run_each_alone_on(model, o, &q[0], 1, &solo);
    for (int nocache = 0; nocache <= 1; nocache++) {
        struct engine_opts t = o;
        t.max_seqs = 4;
        t.kv_blocks = 4;
        t.no_prefix_cache = nocache;
        e = make_engine_on(model, t);
        run_together(e, q, 2, res);
        struct engine_stats st;
        engine_get_stats(e, &st);
        engine_destroy(e);
        assert_true(st.preemptions > 0);
        assert_true(res[1].usage.preemptions > 0);
        assert_same(alone, &res[1]);
        assert_same(&solo, &res[0]);
    }

    /* Prefix served from the cache: a request sharing x's first 32 prompt tokens runs first. */
    e = make_engine_on(model, o);
    struct engine_params pre = *x;
    int32_t pre_prompt[64];
    memcpy(pre_prompt, x->prompt, sizeof(int32_t) * (size_t)x->n_prompt);
    pre_prompt[34] = 17; /* differs after the two shared blocks */
    pre.prompt = pre_prompt;
    pre.sampling.seed = 99;
    run_together(e, &pre, 1, &res[0]);
    run_together(e, x, 1, &res[1]);
    assert_int_equal(res[1].usage.cached_tokens, 32);
    assert_same(alone, &res[1]);
    /* x again: its own blocks are cached now; still 32 (the last prompt token is computed) */
    run_together(e, x, 1, &res[1]);
    assert_int_equal(res[1].usage.cached_tokens, 32);
    assert_same(alone, &res[1]);
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_true(st.cached_tokens >= 64);
    assert_true(st.kv_cached > 0);
    engine_destroy(e);
}
