/*
 * test_embed.c: embeddings (engine.h "Embeddings", runtime.h LL_WANT_HIDDEN, pooling.h) on the
 * tiny-qwen2 fixture. The forward pass's hidden-state rows match the float64 reference's final
 * hidden states (exact path within 1e-5 of their scale, the bf16 path within 2e-2) and do not
 * disturb the logits rows beside them; each pooling (last, mean, first) gives exactly the
 * runtime's rows pooled, alone, batched with generating requests and other embeddings, in
 * chunks, preempted and (last) from the prefix cache, and the generating requests beside them
 * keep their tokens; the engine's limits for an embedding (the whole context, not more; an
 * unknown pooling); llama.cpp's pooled states of a tiny Granite model (last and mean, a 381-token
 * prompt in chunks); a checkpoint whose tensor names lack "model." (the headless model class's,
 * as Qwen3-Embedding's) loads as the same model, and a whole directory laid out as
 * Qwen3-Embedding's (those names, its sentence-transformers files, a post-processor appending
 * the end token) embeds as the prefixed model does; a model directory's sentence-transformers files (modules.json and the
 * Pooling module's config.json) give the pooling and normalization, what is not implemented
 * is refused naming it, and a forced mode (--pooling) overrides both.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "engine_harness.h"
#include "json.h"
#include "llamacpp_ref.h"
#include "mkmodel.h"
#include "model.h"
#include "model_tmp.h"
#include "pooling.h"
#include "ref_forward.h"
#include "runtime.h"
#include "tokenizer.h"
#include "util.h"

enum { NP = 40 };

/* The runtime's final hidden states of ids[0..n) (n <= 64), every row, in one call. */
static void runtime_states(const struct model *m, const int32_t *ids, int n, enum ll_math math,
                           float *out)
{
    struct ll_err err = {0};
    struct runtime_opts ro = {.n_ctx = 128, .n_threads = 1, .math = math};
    struct model_runtime *rt;
    assert_int_equal(runtime_create(&rt, m, &ro, &err), LL_OK);
    int32_t pos[64];
    uint8_t want[64];
    for (int i = 0; i < n; i++)
        pos[i] = i, want[i] = LL_WANT_HIDDEN;
    struct ll_batch b = {.n_tokens = n, .token = ids, .pos = pos, .want_logits = want,
                         .hidden = out};
    assert_int_equal(runtime_forward(rt, &b, NULL, &err), LL_OK);
    runtime_free(rt);
}

/* ---- the forward pass's hidden states ---- */

static void test_hidden_matches_reference(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct model *m;
    assert_int_equal(model_open(&m, FIXTURE, NULL, &err), LL_OK);
    const int H = m->config.hidden_size, V = m->config.vocab_size, n = 24;
    int32_t ids[24];
    make_prompt(ids, n, 91);
    double *ref = malloc(sizeof(double) * (size_t)n * H);
    float *got = malloc(sizeof(float) * (size_t)n * H);
    struct ref r;
    ref_open(&r, FIXTURE, &m->config, (struct ref_kind){.bias = true});
    ref_forward_states(&r, ids, n, NULL, ref);
    ref_close(&r);
    double scale = 0;
    for (size_t i = 0; i < (size_t)n * H; i++)
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    assert_true(scale > 0.1);
    const enum ll_math maths[2] = {LL_MATH_EXACT, LL_MATH_FAST};
    const double tol[2] = {1e-5, 2e-2};
    for (int k = 0; k < 2; k++) {
        runtime_states(m, ids, n, maths[k], got);
        double worst = 0;
        for (size_t i = 0; i < (size_t)n * H; i++) {
            double d = fabs(got[i] - ref[i]) / scale;
            worst = d > worst ? d : worst;
        }
        printf("hidden states, %s path: worst %.2e of the scale %.3f\n", k ? "bf16" : "exact",
               worst, scale);
        assert_true(worst < tol[k]);
    }

    /* Rows of both kinds in one batch: each as in a batch of its kind alone. */
    struct runtime_opts ro = {.n_ctx = 128, .n_threads = 1, .math = LL_MATH_FAST};
    struct model_runtime *rt;
    assert_int_equal(runtime_create(&rt, m, &ro, &err), LL_OK);
    int32_t pos[24];
    uint8_t want[24], want_l[24];
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        want[i] = i % 3 == 0 ? LL_WANT_HIDDEN : i % 3 == 1 ? LL_WANT_LOGITS : 0;
        want_l[i] = want[i] == LL_WANT_LOGITS;
    }
    float *lg = malloc(sizeof(float) * (size_t)n * V), *lg2 = malloc(sizeof(float) * (size_t)n * V);
    float *hid = malloc(sizeof(float) * (size_t)n * H);
    struct ll_batch mixed = {.n_tokens = n, .token = ids, .pos = pos, .want_logits = want,
                             .hidden = hid};
    assert_int_equal(runtime_forward(rt, &mixed, lg, &err), LL_OK);
    struct ll_batch logits_only = {.n_tokens = n, .token = ids, .pos = pos, .want_logits = want_l};
    assert_int_equal(runtime_forward(rt, &logits_only, lg2, &err), LL_OK);
    assert_memory_equal(lg, lg2, sizeof(float) * (size_t)(n / 3) * V);
    runtime_states(m, ids, n, LL_MATH_FAST, got);
    for (int j = 0; j < n / 3; j++)
        assert_memory_equal(hid + (size_t)j * H, got + (size_t)(3 * j) * H, sizeof(float) * H);
    /* a hidden row without a buffer is refused, naming the row */
    mixed.hidden = NULL;
    assert_int_equal(runtime_forward(rt, &mixed, lg, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "batch row 0 wants its hidden state"));
    runtime_free(rt);
    free(lg), free(lg2), free(hid), free(ref), free(got);
    model_close(m);
}

/* ---- pooling through the engine ---- */

/* Submit an embedding of ids[0..n) with pooling m. */
static struct engine_req *submit_embed(struct engine *e, const int32_t *ids, int n,
                                       enum ll_pooling m)
{
    struct engine_params p = {.prompt = ids, .n_prompt = n, .embed = m};
    return submit(e, &p);
}

/* Poll r (finished) for its vector into v (H floats); returns its usage. */
static struct engine_usage take_vector(struct engine_req *r, float *v, int H)
{
    struct engine_output o = {0};
    assert_true(engine_poll(r, &o));
    assert_int_equal(o.finish, ENGINE_FINISH_STOP);
    assert_int_equal(o.n_ids, 0);
    assert_int_equal(o.n_embedding, H);
    assert_non_null(o.embedding);
    memcpy(v, o.embedding, sizeof(float) * H);
    struct engine_usage u = o.usage;
    engine_output_free(&o);
    assert_int_equal(u.completion_tokens, 0);
    engine_req_release(r);
    return u;
}

/* What pooling m makes of the runtime's rows st (n, H). */
static void expected_pool(const float *st, int n, int H, enum ll_pooling m, float *out)
{
    for (int i = 0; i < H; i++) {
        if (m == LL_POOL_LAST) {
            out[i] = st[(size_t)(n - 1) * H + i];
        } else if (m == LL_POOL_FIRST) {
            out[i] = st[i];
        } else {
            double s = 0;
            for (int t = 0; t < n; t++)
                s += st[(size_t)t * H + i];
            out[i] = (float)(s / n);
        }
    }
}

static int32_t e_ids[3][NP];
static const int e_len[3] = {NP, 23, 17};

/* Every pooling of three prompts in one engine with options o, beside four generating
 * requests; the vectors equal expected (3 poolings x 3 prompts, H each) and the generating
 * requests give gen_alone. Returns the engine's preemption count. */
static uint64_t run_mixed(struct engine_opts o, const float *expected, const struct result *gen_alone,
                          const struct engine_params *gen, int H)
{
    struct engine *e = make_engine(o);
    struct engine_req *er[9], *gr[4];
    for (int g = 0; g < 4; g++)
        gr[g] = submit(e, &gen[g]);
    for (int k = 0; k < 9; k++)
        er[k] = submit_embed(e, e_ids[k % 3], e_len[k % 3], (enum ll_pooling)(1 + k / 3));
    run_idle(e);
    float *v = malloc(sizeof(float) * H);
    for (int k = 0; k < 9; k++) {
        struct engine_usage u = take_vector(er[k], v, H);
        assert_int_equal(u.prompt_tokens, e_len[k % 3]);
        assert_memory_equal(v, expected + (size_t)k * H, sizeof(float) * H);
    }
    for (int g = 0; g < 4; g++) {
        struct result res = {0};
        drain(gr[g], &res);
        engine_req_release(gr[g]);
        assert_same(&gen_alone[g], &res);
    }
    free(v);
    struct engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.embeddings, 9);
    assert_pool_empty(e);
    engine_destroy(e);
    return st.preemptions;
}

static void test_pooling_through_engine(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct model *m;
    assert_int_equal(model_open(&m, FIXTURE, NULL, &err), LL_OK);
    const int H = m->config.hidden_size;
    float *st = malloc(sizeof(float) * NP * H), *expected = malloc(sizeof(float) * 9 * H);
    for (int j = 0; j < 3; j++)
        make_prompt(e_ids[j], e_len[j], 300 + (uint64_t)j);
    for (int j = 0; j < 3; j++) {
        runtime_states(m, e_ids[j], e_len[j], LL_MATH_FAST, st);
        for (int k = 0; k < 3; k++)
            expected_pool(st, e_len[j], H, (enum ll_pooling)(1 + k),
                          expected + (size_t)(3 * k + j) * H);
    }
    model_close(m);

    struct engine_params gen[4];
    static int32_t gp[4][30];
    for (int g = 0; g < 4; g++) {
        make_prompt(gp[g], 12 + 5 * g, 400 + (uint64_t)g);
        gen[g] = (struct engine_params){.prompt = gp[g], .n_prompt = 12 + 5 * g,
                                        .max_tokens = 6, .ignore_eos = true,
                                        .sampling = {.temperature = 0.8f, .seed = 9 + g}};
    }
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 16, .max_batch_tokens = 64};
    struct result alone[4];
    run_each_alone(o, gen, 4, alone);

    /* alone: each embedding in an engine of its own */
    float *v = malloc(sizeof(float) * H);
    for (int k = 0; k < 9; k++) {
        struct engine_opts oa = o;
        oa.no_prefix_cache = true;
        struct engine *e = make_engine(oa);
        struct engine_req *r = submit_embed(e, e_ids[k % 3], e_len[k % 3],
                                            (enum ll_pooling)(1 + k / 3));
        run_idle(e);
        take_vector(r, v, H);
        assert_memory_equal(v, expected + (size_t)k * H, sizeof(float) * H);
        engine_destroy(e);
    }
    /* together, in chunks of a small token budget, and preempted in a tiny pool */
    assert_int_equal(run_mixed(o, expected, alone, gen, H), 0);
    o.max_batch_tokens = 16;
    run_mixed(o, expected, alone, gen, H);
    o.kv_blocks = 5;
    o.block_size = 16;
    assert_true(run_mixed(o, expected, alone, gen, H) > 0);

    /* last position: the second of two equal prompts takes the first's blocks from the prefix
     * cache and gets the same vector; mean needs every position and takes none */
    o = (struct engine_opts){.n_ctx = 128, .max_seqs = 4, .max_batch_tokens = 64};
    struct engine *e = make_engine(o);
    for (int k = 0; k < 2; k++) {
        enum ll_pooling pm = k ? LL_POOL_MEAN : LL_POOL_LAST;
        for (int rep = 0; rep < 2; rep++) {
            struct engine_req *r = submit_embed(e, e_ids[0], e_len[0], pm);
            run_idle(e);
            struct engine_usage u = take_vector(r, v, H);
            assert_memory_equal(v, expected + (size_t)(k ? 3 : 0) * H, sizeof(float) * H);
            assert_int_equal(u.cached_tokens, k == 0 && rep == 1 ? 32 : 0);
        }
    }
    assert_pool_empty(e);
    engine_destroy(e);
    free(v), free(st), free(expected);
}

static void test_embed_limits(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 64, .max_seqs = 4, .max_batch_tokens = 32};
    struct engine *e = make_engine(o);
    const int H = engine_model(e)->config.hidden_size;
    int32_t ids[65];
    make_prompt(ids, 65, 5);
    struct ll_err err = {0};
    struct engine_req *r = NULL;
    struct engine_params p = {.prompt = ids, .n_prompt = 65, .embed = LL_POOL_LAST};
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_ETOOLONG);
    assert_non_null(strstr(err.msg, "the input has 65 tokens; the context holds 64"));
    p.embed = (enum ll_pooling)7;
    assert_int_equal(engine_submit(e, &p, &r, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "pooling 7"));
    /* the whole context: no room for a new token is needed */
    float *v = malloc(sizeof(float) * H);
    r = submit_embed(e, ids, 64, LL_POOL_MEAN);
    run_idle(e);
    assert_int_equal(take_vector(r, v, H).prompt_tokens, 64);
    /* cancelled before it ran: no vector */
    r = submit_embed(e, ids, 10, LL_POOL_LAST);
    engine_cancel(r);
    run_idle(e);
    struct engine_output out = {0};
    assert_true(engine_poll(r, &out));
    assert_int_equal(out.finish, ENGINE_FINISH_CANCELLED);
    assert_null(out.embedding);
    engine_output_free(&out);
    engine_req_release(r);
    assert_pool_empty(e);
    engine_destroy(e);
    free(v);
}

/* ---- against llama.cpp ---- */

#define LLAMACPP_EMBED "tests/fixtures/tiny-granite.llamacpp-embed.json"

/* llama.cpp's pooled states (embeddings=true, pooling last / mean, not normalized) of a tiny
 * Granite model (the fixture's "mkmodel": Granite's multipliers included) for a 22- and a
 * 381-token prompt: the engine's, in chunks of 48 tokens, within 1e-5 of their scale on the
 * exact path and 2e-2 on the bf16 path. */
static void test_embed_against_llamacpp(void **state)
{
    (void)state;
    cJSON *fx = llamacpp_fixture_load(LLAMACPP_EMBED);
    assert_non_null(fx);
    assert_non_null(strstr(cJSON_GetObjectItem(fx, "mkmodel")->valuestring,
                           "--preset tiny --family granite --vocab 151936 --seed 7"));
    struct mkmodel_spec sp;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&sp, "tiny", &err), LL_OK);
    sp.family = MKMODEL_GRANITE;
    sp.vocab_size = 151936;
    sp.seed = 7;
    sp.bos_token_id = 151646, sp.eos_token_id = 151643;
    char dir[64], model[96];
    assert_int_equal(model_tmp_make_tok(dir, sizeof dir, "embedcpp", &sp,
                                        "models/deepseek-r1-distill-qwen-tokenizer"), 0);
    snprintf(model, sizeof model, "%s/m", dir);
    const int H = cJSON_GetObjectItem(fx, "n_embd")->valueint;
    float *v = malloc(sizeof(float) * H);
    static const char *const pools[2] = {"last", "mean"};
    for (int exact = 1; exact >= 0; exact--) {
        struct engine_opts o = {.n_ctx = 512, .max_seqs = 4, .max_batch_tokens = 48,
                                .exact = exact};
        struct engine *e = make_engine_on(model, o);
        assert_int_equal(engine_model(e)->config.hidden_size, H);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(fx, "prompts")) {
            const cJSON *ids = cJSON_GetObjectItem(p, "ids");
            int n = cJSON_GetArraySize(ids);
            int32_t *t = malloc(sizeof(int32_t) * n);
            for (int i = 0; i < n; i++)
                t[i] = cJSON_GetArrayItem(ids, i)->valueint;
            for (int k = 0; k < 2; k++) {
                const cJSON *want = cJSON_GetObjectItem(p, pools[k]);
                assert_int_equal(cJSON_GetArraySize(want), H);
                struct engine_req *r = submit_embed(e, t, n, k ? LL_POOL_MEAN : LL_POOL_LAST);
                run_idle(e);
                take_vector(r, v, H);
                double scale = 0, worst = 0;
                for (int i = 0; i < H; i++) {
                    double w = cJSON_GetArrayItem(want, i)->valuedouble;
                    scale = fabs(w) > scale ? fabs(w) : scale;
                }
                for (int i = 0; i < H; i++) {
                    double d = fabs(v[i] - cJSON_GetArrayItem(want, i)->valuedouble) / scale;
                    worst = d > worst ? d : worst;
                }
                printf("llama.cpp %s pooling, prompt %s (%d tokens), %s path: worst %.2e of the "
                       "scale %.3f\n", pools[k], cJSON_GetObjectItem(p, "name")->valuestring, n,
                       exact ? "exact" : "bf16", worst, scale);
                assert_true(worst < (exact ? 1e-5 : 2e-2));
            }
            free(t);
        }
        assert_pool_empty(e);
        engine_destroy(e);
    }
    free(v);
    cJSON_Delete(fx);
    assert_int_equal(model_tmp_remove(dir), 0);
}

/* ---- a checkpoint saved from the headless model class ---- */

/* dst/model.safetensors: src's with "model." taken off every tensor name (as Qwen3-Embedding's
 * and gte-Qwen2's files name them: "embed_tokens.weight", "layers.0. ..."). */
static void write_headless(const char *src, const char *dst)
{
    struct ll_err err = {0};
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(ll_read_file(src, &data, &len, &err), LL_OK);
    uint64_t hl = 0;
    memcpy(&hl, data, 8); /* little-endian, as this machine */
    cJSON *h = NULL, *out = cJSON_CreateObject();
    assert_int_equal(ll_json_parse(&h, data + 8, (size_t)hl, "header", &err), LL_OK);
    for (cJSON *t = h->child; t; t = t->next) {
        const char *name = strncmp(t->string, "model.", 6) ? t->string : t->string + 6;
        cJSON_AddItemToObject(out, name, cJSON_Duplicate(t, true));
    }
    char *text = cJSON_PrintUnformatted(out);
    uint64_t nl = strlen(text);
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_true(fwrite(&nl, 8, 1, f) == 1 && fwrite(text, 1, nl, f) == nl &&
                fwrite(data + 8 + hl, 1, len - 8 - hl, f) == len - 8 - hl);
    assert_int_equal(fclose(f), 0);
    free(text);
    cJSON_Delete(h);
    cJSON_Delete(out);
    free(data);
}

/* Such a checkpoint loads as the same model: the same hidden states and logits, bit for bit;
 * untied and without lm_head it is an embedding model: the same hidden states, generation
 * refused naming why. */
static void test_headless_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/llaisys-headless-XXXXXX", path[128], src[128];
    assert_non_null(mkdtemp(dir));
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        char *abs = realpath(FIXTURE, NULL);
        snprintf(src, sizeof src, "%s/%s", abs, files[i]);
        free(abs);
        assert_int_equal(symlink(src, path), 0);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_headless(FIXTURE "/model.safetensors", path);
    struct ll_err err = {0};
    struct model *a, *b;
    assert_int_equal(model_open(&a, FIXTURE, NULL, &err), LL_OK);
    assert_int_equal(model_open(&b, dir, NULL, &err), LL_OK);
    assert_string_equal(a->body_prefix, "model.");
    assert_string_equal(b->body_prefix, "");
    const int H = a->config.hidden_size, n = 17;
    int32_t ids[17];
    make_prompt(ids, n, 12);
    float *sa = malloc(sizeof(float) * n * H), *sb = malloc(sizeof(float) * n * H);
    runtime_states(a, ids, n, LL_MATH_FAST, sa);
    runtime_states(b, ids, n, LL_MATH_FAST, sb);
    assert_memory_equal(sa, sb, sizeof(float) * n * H);
    model_close(a);
    model_close(b);
    free(sa), free(sb);
    /* and through the engine: a generation and an embedding, as from the fixture */
    struct engine_params gp = {.prompt = ids, .n_prompt = n, .max_tokens = 5, .ignore_eos = true};
    struct result ra, rb;
    struct engine_opts o = {.n_ctx = 64, .max_seqs = 2};
    run_each_alone(o, &gp, 1, &ra);
    run_each_alone_on(dir, o, &gp, 1, &rb);
    assert_same(&ra, &rb);

    /* untied and without lm_head (Qwen3-Embedding-8B's kind): embeddings only */
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = NULL;
    size_t cl = 0;
    assert_int_equal(ll_read_file(FIXTURE "/config.json", &cfg, &cl, &err), LL_OK);
    char *tie = strstr(cfg, "\"tie_word_embeddings\": true");
    assert_non_null(tie);
    unlink(path);
    struct ll_buf nb = {0};
    ll_buf_append(&nb, cfg, (size_t)(tie + 23 - cfg));
    ll_buf_puts(&nb, "false");
    ll_buf_puts(&nb, tie + 27);
    assert_int_equal(ll_write_file(path, nb.data, nb.len, &err), LL_OK);
    ll_buf_free(&nb);
    free(cfg);
    assert_int_equal(model_open(&b, dir, NULL, &err), LL_OK);
    assert_true(b->no_lm_head && !b->config.tie_word_embeddings);
    runtime_states(b, ids, n, LL_MATH_FAST, sb = malloc(sizeof(float) * n * H));
    sa = malloc(sizeof(float) * n * H);
    assert_int_equal(model_open(&a, FIXTURE, NULL, &err), LL_OK);
    runtime_states(a, ids, n, LL_MATH_FAST, sa);
    assert_memory_equal(sa, sb, sizeof(float) * n * H);
    model_close(a);
    model_close(b);
    free(sa), free(sb);
    struct engine *e = make_engine_on(dir, o);
    struct engine_req *r = NULL;
    assert_int_equal(engine_submit(e, &gp, &r, &err), LL_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no lm_head (an embedding or ranking model)"));
    float *v = malloc(sizeof(float) * H);
    r = submit_embed(e, ids, n, LL_POOL_LAST);
    run_idle(e);
    take_vector(r, v, H);
    free(v);
    engine_destroy(e);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

static void put(const char *dir, const char *name, const char *text);

/* dir/name (a copy of src/name with its first `from` replaced by `to`; from NULL: as is). */
static void copy_edit(const char *src, const char *dir, const char *name, const char *from,
                      const char *to)
{
    char path[256];
    struct ll_err err = {0};
    char *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", src, name);
    assert_int_equal(ll_read_file(path, &text, &len, &err), LL_OK);
    struct ll_buf b = {0};
    const char *at = from ? strstr(text, from) : NULL;
    assert_true(!from || at);
    ll_buf_append(&b, text, at ? (size_t)(at - text) : len);
    if (at) {
        ll_buf_puts(&b, to);
        ll_buf_puts(&b, at + strlen(from));
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(ll_write_file(path, b.data, b.len, &err), LL_OK);
    ll_buf_free(&b);
    free(text);
}

/* A directory laid out as Qwen3-Embedding's is (a Qwen3 model saved from the headless class:
 * no "model." in its tensor names; sentence-transformers files asking for the last token,
 * normalized; a tokenizer whose post-processor appends <|endoftext|>), made here from a random
 * tiny Qwen3 with the real Qwen3 tokenizer, loads unchanged: the text's ids end with the end
 * token, the pooling comes from its files, and its embedding is the prefixed model's on those
 * ids, bit for bit. */
static void test_qwen3_embedding_layout(void **state)
{
    (void)state;
    struct mkmodel_spec sp;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&sp, "tiny", &err), LL_OK);
    sp.family = MKMODEL_QWEN3;
    sp.seed = 11;
    sp.bos_token_id = -1, sp.eos_token_id = 151643;
    char base[64], src[96];
    assert_int_equal(model_tmp_make_tok(base, sizeof base, "q3emb", &sp, "models/qwen3-tokenizer"),
                     0);
    snprintf(src, sizeof src, "%s/m", base);
    char dir[] = "/tmp/llaisys-q3emb-XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    copy_edit(src, dir, "config.json", NULL, NULL);
    copy_edit(src, dir, "tokenizer_config.json", NULL, NULL);
    copy_edit(src, dir, "tokenizer.json",
              "\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
              "\"trim_offsets\":false,\"use_regex\":false}",
              "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
              "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":"
              "\"<|endoftext|>\",\"type_id\":0}}],\"pair\":[{\"Sequence\":{\"id\":\"A\","
              "\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|endoftext|>\",\"type_id\":0}},"
              "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}},{\"SpecialToken\":{\"id\":"
              "\"<|endoftext|>\",\"type_id\":1}}],\"special_tokens\":{\"<|endoftext|>\":"
              "{\"id\":\"<|endoftext|>\",\"ids\":[151643],\"tokens\":[\"<|endoftext|>\"]}}}");
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    char out[256];
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    write_headless(path, out);
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    put(dir, "modules.json",
        "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":"
        "\"sentence_transformers.models.Transformer\"},{\"idx\":1,\"name\":\"1\",\"path\":"
        "\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},{\"idx\":2,"
        "\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":"
        "\"sentence_transformers.models.Normalize\"}]");
    put(dir, "1_Pooling/config.json", "{\"word_embedding_dimension\": 64, "
        "\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": false, "
        "\"pooling_mode_lasttoken\": true, \"include_prompt\": true}");

    struct pooling_config pc;
    assert_int_equal(pooling_choose(&pc, dir, LL_POOL_NONE, &err), LL_OK);
    assert_true(pc.mode == LL_POOL_LAST && pc.normalize);
    struct engine_opts o = {.n_ctx = 64, .max_seqs = 2};
    struct engine *e = make_engine_on(dir, o), *ref = make_engine_on(src, o);
    assert_string_equal(engine_model(e)->body_prefix, "");
    assert_string_equal(engine_model(e)->config.model_type, "qwen3");
    int32_t *ids = NULL, *plain = NULL;
    size_t n = 0, np = 0;
    const char *text = "Instruct: find the answer\nQuery: what is embedding?";
    assert_int_equal(tokenizer_encode(engine_tokenizer(e), text, strlen(text), true, &ids, &n,
                                      &err), LL_OK);
    assert_int_equal(tokenizer_encode(engine_tokenizer(ref), text, strlen(text), true, &plain,
                                      &np, &err), LL_OK);
    assert_int_equal(n, np + 1);
    assert_int_equal(ids[n - 1], 151643);
    assert_memory_equal(ids, plain, sizeof(int32_t) * np);
    const int H = engine_model(e)->config.hidden_size;
    float *a = malloc(sizeof(float) * H), *b = malloc(sizeof(float) * H);
    struct engine_req *r = submit_embed(e, ids, (int)n, pc.mode);
    run_idle(e);
    take_vector(r, a, H);
    r = submit_embed(ref, ids, (int)n, LL_POOL_LAST);
    run_idle(ref);
    take_vector(r, b, H);
    assert_memory_equal(a, b, sizeof(float) * H);
    free(a), free(b), free(ids), free(plain);
    engine_destroy(e);
    engine_destroy(ref);
    static const char *const files[] = {"config.json", "tokenizer_config.json", "tokenizer.json",
                                        "model.safetensors", "modules.json",
                                        "1_Pooling/config.json", "1_Pooling", ""};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (unlink(path))
            rmdir(path);
    }
    assert_int_equal(model_tmp_remove(base), 0);
}

/* ---- the directory's pooling ---- */

static void put(const char *dir, const char *name, const char *text)
{
    char *path = ll_path_join(dir, name);
    struct ll_err err = {0};
    assert_int_equal(ll_write_file(path, text, strlen(text), &err), LL_OK);
    free(path);
}

static enum ll_status load(const char *dir, struct pooling_config *pc, char *msg)
{
    struct ll_err err = {0};
    enum ll_status s = pooling_load(pc, dir, &err);
    memcpy(msg, err.msg, sizeof err.msg);
    return s;
}

static void test_pooling_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/llaisys-pooling-XXXXXX", sub[64], msg[512];
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/1_Pooling", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    struct pooling_config pc;

    /* no modules.json: a causal LM's last position, normalized */
    assert_int_equal(load(dir, &pc, msg), LL_OK);
    assert_int_equal(pc.mode, LL_POOL_LAST);
    assert_true(pc.normalize);

    const char *mods = "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":"
                       "\"sentence_transformers.models.Transformer\"},"
                       "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":"
                       "\"sentence_transformers.models.Pooling\"}%s]";
    const char *norm = ",{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":"
                       "\"sentence_transformers.models.Normalize\"}";
    char text[1024];
    snprintf(text, sizeof text, mods, norm);
    put(dir, "modules.json", text);
    put(dir, "1_Pooling/config.json", "{\"word_embedding_dimension\": 64, "
        "\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": false, "
        "\"pooling_mode_max_tokens\": false, \"pooling_mode_mean_sqrt_len_tokens\": false, "
        "\"pooling_mode_weightedmean_tokens\": false, \"pooling_mode_lasttoken\": true, "
        "\"include_prompt\": true}");
    assert_int_equal(load(dir, &pc, msg), LL_OK);
    assert_int_equal(pc.mode, LL_POOL_LAST);
    assert_true(pc.normalize);
    assert_non_null(strstr(pc.source, "1_Pooling/config.json"));

    snprintf(text, sizeof text, mods, "");
    put(dir, "modules.json", text);
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_mean_tokens\": true}");
    assert_int_equal(load(dir, &pc, msg), LL_OK);
    assert_int_equal(pc.mode, LL_POOL_MEAN);
    assert_false(pc.normalize);
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_cls_token\": true}");
    assert_int_equal(load(dir, &pc, msg), LL_OK);
    assert_int_equal(pc.mode, LL_POOL_FIRST);

    /* what is not implemented is refused, naming it */
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_max_tokens\": true}");
    assert_int_equal(load(dir, &pc, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "pooling_mode_max_tokens is not implemented"));
    /* the one policy: without a forced mode the error stands; with one it embeds, normalized */
    struct ll_err err = {0};
    assert_int_equal(pooling_choose(&pc, dir, LL_POOL_NONE, &err), LL_EUNSUPPORTED);
    assert_int_equal(pc.mode, LL_POOL_NONE);
    assert_int_equal(pooling_choose(&pc, dir, LL_POOL_MEAN, &err), LL_OK);
    assert_int_equal(pc.mode, LL_POOL_MEAN);
    assert_true(pc.normalize);
    assert_string_equal(pc.source, "--pooling");
    put(dir, "1_Pooling/config.json",
        "{\"pooling_mode_mean_tokens\": true, \"pooling_mode_lasttoken\": true}");
    assert_int_equal(load(dir, &pc, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "2 pooling modes are on"));
    put(dir, "1_Pooling/config.json", "{}");
    assert_int_equal(load(dir, &pc, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "0 pooling modes are on"));
    put(dir, "1_Pooling/config.json",
        "{\"pooling_mode_lasttoken\": true, \"include_prompt\": false}");
    assert_int_equal(load(dir, &pc, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "include_prompt false"));
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_lasttoken\": 1}");
    assert_int_equal(load(dir, &pc, msg), LL_ETYPE);
    assert_non_null(strstr(msg, "1_Pooling/config.json: 'pooling_mode_lasttoken'"));
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_lasttoken\": true,");
    assert_int_equal(load(dir, &pc, msg), LL_EJSON);
    put(dir, "1_Pooling/config.json", "{\"pooling_mode_lasttoken\": true}");
    snprintf(text, sizeof text, mods, ",{\"path\":\"2_Dense\",\"type\":"
             "\"sentence_transformers.models.Dense\"}");
    put(dir, "modules.json", text);
    assert_int_equal(load(dir, &pc, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "modules.json[2]: module type "
                                "'sentence_transformers.models.Dense' is not implemented"));
    put(dir, "modules.json", "{\"type\": \"Pooling\"}");
    assert_int_equal(load(dir, &pc, msg), LL_EFORMAT);
    assert_non_null(strstr(msg, "modules.json: expected an array"));
    snprintf(text, sizeof text, mods, "");
    put(dir, "modules.json", text);
    char *cfg = ll_path_join(dir, "1_Pooling/config.json");
    unlink(cfg);
    free(cfg);
    assert_int_equal(load(dir, &pc, msg), LL_EFORMAT);
    assert_non_null(strstr(msg, "1_Pooling/config.json: missing"));

    char *p = ll_path_join(dir, "modules.json");
    unlink(p);
    free(p);
    rmdir(sub);
    rmdir(dir);

    /* the words and the normalization */
    enum ll_pooling pm;
    assert_true(pooling_parse("mean", &pm));
    assert_int_equal(pm, LL_POOL_MEAN);
    assert_false(pooling_parse("max", &pm));
    assert_string_equal(pooling_name(LL_POOL_FIRST), "first");
    float v[3] = {3, 0, -4}, z[2] = {0, 0};
    pooling_normalize(v, 3);
    assert_true(fabsf(v[0] - 0.6f) < 1e-7f && v[1] == 0 && fabsf(v[2] + 0.8f) < 1e-7f);
    pooling_normalize(z, 2);
    assert_true(z[0] == 0 && z[1] == 0);
    /* as answered: cut first, then normalized (or not, as the pooling says) */
    float w[4] = {3, 4, 12, 5}, u[3] = {3, 4, 12};
    struct pooling_config on = {.mode = LL_POOL_LAST, .normalize = true}, off = on;
    off.normalize = false;
    assert_int_equal(pooling_output(&on, w, 4, 2), 2);
    assert_true(fabsf(w[0] - 0.6f) < 1e-7f && fabsf(w[1] - 0.8f) < 1e-7f && w[2] == 12);
    assert_int_equal(pooling_output(&off, u, 3, 0), 3);
    assert_true(u[0] == 3 && u[1] == 4 && u[2] == 12);
    assert_int_equal(pooling_output(&off, u, 3, 7), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_matches_reference),
        cmocka_unit_test(test_pooling_through_engine),
        cmocka_unit_test(test_embed_limits),
        cmocka_unit_test(test_embed_against_llamacpp),
        cmocka_unit_test(test_headless_checkpoint),
        cmocka_unit_test(test_qwen3_embedding_layout),
        cmocka_unit_test(test_pooling_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
