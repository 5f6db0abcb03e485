/*
 * test_model_load.c: model_open on real and generated model directories.
 *
 * - tests/fixtures/tiny-qwen2: config values, generation defaults, and weight values checked
 *   against numbers read from the file independently (fixed offsets, computed outside llaisys).
 * - mkmodel round trips (tiny preset with the real tokenizer; an untied custom shape with an
 *   explicit head_dim; the same model split into two shards): every sampled element equals
 *   mkmodel_weight().
 * - broken directories, each failing with the expected status and a message that names the file
 *   and the problem: missing/bad config.json, missing or mistyped fields, unknown model_type,
 *   missing tensor, wrong shape, unsupported dtype, offsets past EOF, truncated file, absurd
 *   header length, bad generation_config.json, no weights.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mkmodel.h"
#include "model.h"
#include "model_config.h"
#include "model_registry.h"
#include "qwen2.h" /* the weight checks look inside the qwen2 family's own struct */
#include "runtime.h"
#include "safetensors.h"
#include "util.h"

#define FIXTURE "tests/fixtures/tiny-qwen2"
#define TOKENIZER "models/deepseek-r1-distill-qwen-tokenizer"

static char tmpdir[64];
static char base_dir[128]; /* the untied custom model every bad-dir case starts from */

static const struct mkmodel_spec base_spec = {
    .hidden_size = 32, .intermediate_size = 48, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
    .head_dim = 16, .vocab_size = 1000, .max_position = 512, .rope_theta = 50000.0,
    .rms_eps = 1e-5, .tied = false, .seed = 7, .bos_token_id = 1, .eos_token_id = 2,
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/llaisys-test-model-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(base_dir, sizeof base_dir, "%s/base", tmpdir);
    struct ll_err err = {0};
    if (mkmodel_write(&base_spec, NULL, base_dir, 2, false, &err) != LL_OK) {
        fprintf(stderr, "mkmodel: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *slurp(const char *path, size_t *len)
{
    char *text = NULL;
    struct ll_err err = {0};
    if (ll_read_file(path, &text, len, &err) != LL_OK)
        fail_msg("%s", err.msg);
    return text;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char a[512], b[512];
    assert_true((size_t)snprintf(a, sizeof a, "%s/%s", from_dir, name) < sizeof a);
    assert_true((size_t)snprintf(b, sizeof b, "%s/%s", to_dir, name) < sizeof b);
    size_t n;
    char *t = slurp(a, &n);
    spit(b, t, n);
    free(t);
}

/* A fresh copy of the base model in tmpdir/name; returns its path (static). */
static const char *base_copy(const char *name)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    copy_file(base_dir, dir, "config.json");
    copy_file(base_dir, dir, "generation_config.json");
    copy_file(base_dir, dir, "model.safetensors");
    return dir;
}

static const char *join(const char *dir, const char *name)
{
    static char buf[2][300];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* ---- the fixture ---- */

static void test_fixture_config(void **state)
{
    (void)state;
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, FIXTURE, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    const struct model_config *c = &m->config;
    assert_string_equal(c->model_type, "qwen2");
    assert_string_equal(c->architecture, "Qwen2ForCausalLM");
    assert_ptr_equal(m->family, model_registry_find("qwen2"));
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->intermediate_size, 160);
    assert_int_equal(c->n_layers, 2);
    assert_int_equal(c->n_heads, 4);
    assert_int_equal(c->n_kv_heads, 2);
    assert_int_equal(c->head_dim, 16);
    assert_int_equal(c->vocab_size, 151936);
    assert_int_equal(c->max_position, 4096);
    assert_true(c->rope_theta == 10000.0);
    assert_true(c->rms_eps == 1e-6f);
    assert_true(c->tie_word_embeddings);
    assert_int_equal(c->bos_token_id, 151646);
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(c->eos_ids[0], 151643);

    const struct generation_defaults *g = &m->gen;
    assert_true(g->has_temperature && g->temperature == 0.6f);
    assert_true(g->has_top_p && g->top_p == 0.95f);
    assert_true(g->has_do_sample && g->do_sample);
    assert_false(g->has_top_k);
    assert_int_equal(g->bos_token_id, 151646);
    assert_int_equal(g->n_eos, 1);
    assert_int_equal(g->eos_ids[0], 151643);
    model_close(m);
}

static float bf16_at(const struct ll_tensor *t, size_t i)
{
    assert_int_equal(t->dtype, LL_BF16);
    return ll_bf16_to_f32(((const uint16_t *)t->data)[i]);
}

static void test_fixture_weights(void **state)
{
    (void)state;
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, FIXTURE, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    const struct qwen2_weights *w = m->weights;
    assert_int_equal(w->embed.ndim, 2);
    assert_int_equal(w->embed.shape[0], 151936);
    assert_int_equal(w->embed.shape[1], 64);
    assert_ptr_equal(w->lm_head.dense.data, w->embed.data); /* tied */
    assert_int_equal(w->final_norm.ndim, 1);
    assert_int_equal(w->final_norm.shape[0], 64);
    assert_int_equal(w->final_norm.shape[1], 1);
    assert_int_equal(w->layers[0].wk.dense.shape[0], 32);
    assert_int_equal(w->layers[1].mlp.down.dense.shape[0], 64);
    assert_int_equal(w->layers[1].mlp.down.dense.shape[1], 160);

    /* Values read from the file with a separate script (bf16 bits in the comments). */
    assert_true(bf16_at(&w->embed, 0) == -0.400390625f);                 /* 0xbecd */
    assert_true(bf16_at(&w->embed, 1) == 0.0159912109375f);              /* 0x3c83 */
    assert_true(bf16_at(&w->embed, 151935 * 64 + 63) == 0.04931640625f); /* 0x3d4a */
    assert_true(bf16_at(&w->final_norm, 0) == 13.0f);                    /* 0x4150 */
    assert_true(bf16_at(&w->final_norm, 63) == 12.0625f);                /* 0x4141 */
    assert_true(bf16_at(&w->layers[0].bq, 0) == -0.42578125f);           /* 0xbeda */
    assert_true(bf16_at(&w->layers[1].mlp.down.dense, 64 * 160 - 1) == -0.189453125f); /* 0xbe42 */
    assert_true(bf16_at(&w->layers[1].wk.dense, 5 * 64 + 7) == -0.1669921875f);      /* 0xbe2b */

    /* And byte for byte at the offsets the header gives (data section starts at byte 2792). */
    FILE *f = fopen(FIXTURE "/model.safetensors", "rb");
    assert_non_null(f);
    const struct {
        const struct ll_tensor *t;
        long begin, end;
    } spans[] = {
        {&w->final_norm, 19620864, 19620992},
        {&w->layers[1].mlp.down.dense, 19600384, 19620864},
        {&w->layers[0].bq, 19456128, 19456256},
    };
    for (size_t i = 0; i < LL_ARRAY_LEN(spans); i++) {
        size_t n = (size_t)(spans[i].end - spans[i].begin);
        char *buf = malloc(n);
        assert_non_null(buf);
        assert_int_equal(fseek(f, 2792 + spans[i].begin, SEEK_SET), 0);
        assert_int_equal(fread(buf, 1, n, f), n);
        assert_memory_equal(buf, spans[i].t->data, n);
        free(buf);
    }
    fclose(f);
    model_close(m);
}

/* ---- mkmodel round trips ---- */

/* Sample elements of tensor t (HF name) against the generator. */
static void check_generated(const struct ll_tensor *t, const struct mkmodel_spec *s,
                            const char *name)
{
    uint64_t n = (uint64_t)t->shape[0] * (uint64_t)t->shape[1];
    uint64_t idx[] = {0, 1, 2, n / 3, n / 2 + 1, n - 2, n - 1};
    for (size_t i = 0; i < LL_ARRAY_LEN(idx); i++) {
        float want = mkmodel_weight(s, name, idx[i]);
        float got = bf16_at(t, idx[i]);
        if (got != want)
            fail_msg("%s[%llu]: %g, generator says %g", name, (unsigned long long)idx[i], got,
                     want);
    }
}

static void test_mkmodel_tiny(void **state)
{
    (void)state;
    struct mkmodel_spec s;
    struct ll_err err = {0};
    assert_int_equal(mkmodel_preset(&s, "tiny", &err), LL_OK);
    s.seed = 42;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/tiny", tmpdir);
    if (mkmodel_write(&s, TOKENIZER, dir, 2, false, &err) != LL_OK)
        fail_msg("%s", err.msg);
    /* Same size as the fixture, which has the same shapes and layout. */
    struct stat a, b;
    assert_int_equal(stat(join(dir, "model.safetensors"), &a), 0);
    assert_int_equal(stat(FIXTURE "/model.safetensors", &b), 0);
    assert_int_equal(a.st_size, b.st_size);
    assert_int_equal((uint64_t)a.st_size, mkmodel_file_size(&s));
    assert_int_equal(access(join(dir, "tokenizer.json"), R_OK), 0);
    assert_int_equal(access(join(dir, "tokenizer_config.json"), R_OK), 0);

    struct model *m = NULL;
    if (model_open(&m, dir, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    const struct model_config *c = &m->config;
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->n_layers, 2);
    assert_int_equal(c->n_heads, 4);
    assert_int_equal(c->n_kv_heads, 2);
    assert_int_equal(c->intermediate_size, 160);
    assert_int_equal(c->vocab_size, 151936);
    assert_true(c->tie_word_embeddings);
    assert_int_equal(c->bos_token_id, 151646); /* from the tokenizer's bos_token */
    assert_int_equal(c->eos_ids[0], 151643);
    assert_true(m->gen.temperature == 0.6f && m->gen.top_p == 0.95f && m->gen.do_sample);

    const struct qwen2_weights *w = m->weights;
    assert_ptr_equal(w->lm_head.dense.data, w->embed.data);
    check_generated(&w->embed, &s, "model.embed_tokens.weight");
    check_generated(&w->final_norm, &s, "model.norm.weight");
    check_generated(&w->layers[1].wv.dense, &s, "model.layers.1.self_attn.v_proj.weight");
    check_generated(&w->layers[0].bk, &s, "model.layers.0.self_attn.k_proj.bias");
    check_generated(&w->layers[1].mlp_norm, &s, "model.layers.1.post_attention_layernorm.weight");

    /* Sane distributions: projections ~N(0, 1/fan_in), embeddings ~N(0, 0.02^2), norm weights
     * near 1, biases small. */
    const struct {
        const struct ll_tensor *t;
        double sd;
    } dist[] = {{&w->layers[0].mlp.up.dense, 0.125}, {&w->layers[1].mlp.down.dense, 0.0791}, {&w->embed, 0.02}};
    for (size_t k = 0; k < LL_ARRAY_LEN(dist); k++) {
        double sum = 0, sq = 0;
        size_t n = (size_t)dist[k].t->shape[0] * (size_t)dist[k].t->shape[1];
        for (size_t i = 0; i < n; i++) {
            double x = bf16_at(dist[k].t, i);
            sum += x, sq += x * x;
        }
        double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
        if (fabs(mean) > dist[k].sd * 0.1 || fabs(sd / dist[k].sd - 1) > 0.05)
            fail_msg("tensor %zu: mean %g, sd %g (want about %g)", k, mean, sd, dist[k].sd);
    }
    for (int i = 0; i < 64; i++) {
        float g = bf16_at(&w->layers[0].attn_norm, (size_t)i), b = bf16_at(&w->layers[0].bq, (size_t)i);
        assert_true(g > 0.9f && g < 1.1f);
        assert_true(fabsf(b) < 0.1f);
    }
    model_close(m);
}

/* Untied, explicit head_dim (q width 64 != hidden 32), no tokenizer. */
static void test_mkmodel_untied(void **state)
{
    (void)state;
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, base_dir, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    const struct model_config *c = &m->config;
    assert_int_equal(c->head_dim, 16);
    assert_false(c->tie_word_embeddings);
    assert_int_equal(c->vocab_size, 1000);
    assert_int_equal(c->max_position, 512);
    assert_true(c->rope_theta == 50000.0);
    assert_true(c->rms_eps == 1e-5f);
    assert_int_equal(c->bos_token_id, 1);
    assert_int_equal(c->eos_ids[0], 2);
    const struct qwen2_weights *w = m->weights;
    assert_ptr_not_equal(w->lm_head.dense.data, w->embed.data);
    assert_int_equal(w->lm_head.dense.shape[0], 1000);
    assert_int_equal(w->layers[0].wq.dense.shape[0], 64);
    assert_int_equal(w->layers[0].wq.dense.shape[1], 32);
    assert_int_equal(w->layers[0].wo.dense.shape[0], 32);
    assert_int_equal(w->layers[0].wo.dense.shape[1], 64);
    assert_int_equal(w->layers[1].bv.shape[0], 32);
    check_generated(&w->lm_head.dense, &base_spec, "lm_head.weight");
    check_generated(&w->embed, &base_spec, "model.embed_tokens.weight");
    check_generated(&w->layers[1].wo.dense, &base_spec, "model.layers.1.self_attn.o_proj.weight");
    check_generated(&w->layers[1].mlp.down.dense, &base_spec, "model.layers.1.mlp.down_proj.weight");
    check_generated(&w->layers[0].mlp.gate.dense, &base_spec, "model.layers.0.mlp.gate_proj.weight");
    model_close(m);
}

/* ---- rewriting model.safetensors for the broken-directory cases ---- */

/* A change to one tensor: drop it, or give it a new dtype / shape and byte length (new bytes
 * are the old ones cut or zero-padded). */
struct edit {
    const char *name;
    bool drop;
    const char *dtype;
    const char *shape; /* JSON */
    size_t nbytes;
};

/* Rewrite dir/model.safetensors with `e` applied; tensors stay in header order, packed.
 * past_eof: the last tensor's end offset is moved 2 bytes past the data. keep: a predicate on
 * names selecting what to write (NULL: all) and `out` the file name. */
static void st_rewrite(const char *dir, const char *out, const struct edit *e, bool past_eof,
                       bool (*keep)(const char *name))
{
    size_t len;
    char *file = slurp(join(dir, "model.safetensors"), &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | (uint8_t)file[i];
    cJSON *h = cJSON_ParseWithLength(file + 8, hl);
    assert_non_null(h);
    const char *data = file + 8 + hl;
    char *nd = calloc(1, len + 4096);
    assert_non_null(nd);
    size_t pos = 0;
    cJSON *t = h->child, *last = NULL;
    while (t) {
        cJSON *next = t->next;
        if (!strcmp(t->string, "__metadata__")) {
            t = next;
            continue;
        }
        if ((keep && !keep(t->string)) || (e && e->drop && !strcmp(t->string, e->name))) {
            cJSON_DetachItemViaPointer(h, t);
            cJSON_Delete(t);
            t = next;
            continue;
        }
        cJSON *off = cJSON_GetObjectItem(t, "data_offsets");
        size_t b = (size_t)off->child->valuedouble, en = (size_t)off->child->next->valuedouble;
        size_t n = en - b;
        if (e && !e->drop && !strcmp(t->string, e->name)) {
            if (e->dtype)
                cJSON_ReplaceItemInObject(t, "dtype", cJSON_CreateString(e->dtype));
            if (e->shape)
                cJSON_ReplaceItemInObject(t, "shape", cJSON_Parse(e->shape));
            memcpy(nd + pos, data + b, e->nbytes < n ? e->nbytes : n);
            n = e->nbytes;
        } else {
            memcpy(nd + pos, data + b, n);
        }
        double range[2] = {(double)pos, (double)(pos + n)};
        cJSON_ReplaceItemInObject(t, "data_offsets", cJSON_CreateDoubleArray(range, 2));
        pos += n;
        last = t;
        t = next;
    }
    if (past_eof) {
        cJSON *off = cJSON_GetObjectItem(last, "data_offsets");
        cJSON_SetNumberValue(off->child->next, off->child->next->valuedouble + 2);
    }
    char *hs = cJSON_PrintUnformatted(h);
    size_t n = strlen(hs);
    char *outbuf = malloc(8 + n + pos);
    assert_non_null(outbuf);
    for (int i = 0; i < 8; i++)
        outbuf[i] = (char)(uint8_t)((uint64_t)n >> (8 * i));
    memcpy(outbuf + 8, hs, n);
    memcpy(outbuf + 8 + n, nd, pos);
    spit(join(dir, out), outbuf, 8 + n + pos);
    free(outbuf);
    free(hs);
    free(nd);
    cJSON_Delete(h);
    free(file);
}

/* Rewrite dir/config.json (or another JSON file) with key set to the JSON value `json`
 * (NULL: key removed). */
static void json_edit(const char *dir, const char *file, const char *key, const char *json)
{
    size_t len;
    char *text = slurp(join(dir, file), &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (json) {
        cJSON *v = cJSON_Parse(json);
        assert_non_null(v);
        cJSON_AddItemToObject(root, key, v);
    }
    char *out = cJSON_Print(root);
    spit(join(dir, file), out, strlen(out));
    free(out);
    cJSON_Delete(root);
}

static bool in_shard_one(const char *name)
{
    return !strncmp(name, "model.layers.0.", 15) || !strcmp(name, "lm_head.weight");
}

static bool in_shard_two(const char *name)
{
    return !in_shard_one(name);
}

static void test_sharded_model(void **state)
{
    (void)state;
    const char *dir = base_copy("sharded");
    st_rewrite(dir, "model-00001-of-00002.safetensors", NULL, false, in_shard_one);
    st_rewrite(dir, "model-00002-of-00002.safetensors", NULL, false, in_shard_two);
    assert_int_equal(unlink(join(dir, "model.safetensors")), 0);
    /* The index, built from the two shards' own headers. */
    cJSON *idx = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(idx, "weight_map");
    cJSON_AddObjectToObject(idx, "metadata");
    const char *shards[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int k = 0; k < 2; k++) {
        struct safetensors *st = NULL;
        struct ll_err err = {0};
        assert_int_equal(st_open(&st, join(dir, shards[k]), &err), LL_OK);
        for (size_t i = 0; i < st_count(st); i++)
            cJSON_AddStringToObject(map, st_at(st, i)->name, shards[k]);
        st_close(st);
    }
    char *text = cJSON_Print(idx);
    spit(join(dir, "model.safetensors.index.json"), text, strlen(text));
    free(text);
    cJSON_Delete(idx);

    struct model *a = NULL, *b = NULL;
    struct ll_err err = {0};
    if (model_open(&a, dir, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(model_open(&b, base_dir, NULL, &err), LL_OK);
    const struct qwen2_weights *wa = a->weights, *wb = b->weights;
    assert_memory_equal(wa->embed.data, wb->embed.data, 1000 * 32 * 2);
    assert_memory_equal(wa->lm_head.dense.data, wb->lm_head.dense.data, 1000 * 32 * 2);
    for (int l = 0; l < 2; l++) {
        assert_memory_equal(wa->layers[l].wq.dense.data, wb->layers[l].wq.dense.data, 64 * 32 * 2);
        assert_memory_equal(wa->layers[l].mlp.down.dense.data, wb->layers[l].mlp.down.dense.data, 32 * 48 * 2);
        assert_memory_equal(wa->layers[l].bk.data, wb->layers[l].bk.data, 32 * 2);
    }
    model_close(a);
    model_close(b);
}

/* A norm weight stored as F32 while the rest is BF16: accepted, dtype kept per tensor. */
static void test_mixed_dtype(void **state)
{
    (void)state;
    const char *dir = base_copy("mixed");
    struct edit e = {.name = "model.norm.weight", .dtype = "F32", .shape = "[32]", .nbytes = 128};
    st_rewrite(dir, "model.safetensors", &e, false, NULL);
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, dir, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    const struct qwen2_weights *w = m->weights;
    assert_int_equal(w->final_norm.dtype, LL_F32);
    assert_int_equal(w->embed.dtype, LL_BF16);
    assert_int_equal(m->weight_dtype, LL_BF16);
    model_close(m);
}

/* Config variants that must load: no generation_config.json; eos list merged with the
 * generation config's; architectures without model_type. */
static void test_config_variants(void **state)
{
    (void)state;
    const char *dir = base_copy("variants");
    assert_int_equal(unlink(join(dir, "generation_config.json")), 0);
    json_edit(dir, "config.json", "eos_token_id", "[2, 5]");
    json_edit(dir, "config.json", "model_type", NULL);
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, dir, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(m->config.model_type, "qwen2");
    assert_false(m->gen.has_temperature || m->gen.has_top_p || m->gen.has_do_sample);
    assert_int_equal(m->gen.n_eos, 0);
    assert_int_equal(m->config.n_eos, 2);
    model_close(m);

    const char *gen = "{\"eos_token_id\": [5, 9], \"top_k\": 20, \"temperature\": 0}";
    spit(join(dir, "generation_config.json"), gen, strlen(gen));
    assert_int_equal(model_open(&m, dir, NULL, &err), LL_OK);
    assert_int_equal(m->config.n_eos, 3); /* 2, 5, 9 */
    assert_int_equal(m->config.eos_ids[2], 9);
    assert_true(m->gen.has_top_k && m->gen.top_k == 20);
    assert_true(m->gen.has_temperature && m->gen.temperature == 0.0f);
    model_close(m);
}

/* ---- broken directories ---- */

enum mutation { M_NONE, M_CONFIG, M_GEN, M_TENSOR, M_PAST_EOF, M_TRUNCATE, M_HEADER_LEN, M_RM,
                M_WRITE };

struct bad_dir {
    const char *what;
    enum mutation m;
    const char *file;  /* M_CONFIG/M_GEN/M_RM/M_WRITE: the file */
    const char *key;   /* M_CONFIG/M_GEN: field; M_WRITE: the text */
    const char *json;  /* M_CONFIG/M_GEN: new value (NULL removes) */
    struct edit edit;  /* M_TENSOR */
    enum ll_status status;
    const char *needle1, *needle2; /* the file, the problem */
};

static const struct bad_dir bad_dirs[] = {
    {"missing config.json", M_RM, "config.json", NULL, NULL, {0}, LL_EIO, "config.json",
     "No such file"},
    {"bad JSON", M_WRITE, "config.json", "{\"hidden_size\": 32,\n \"vocab_size\": }", NULL, {0},
     LL_EJSON, "config.json", "invalid JSON at line 2"},
    {"config not an object", M_WRITE, "config.json", "[1, 2]", NULL, {0}, LL_EJSON,
     "config.json", "not a JSON object"},
    {"missing hidden_size", M_CONFIG, "config.json", "hidden_size", NULL, {0}, LL_EMODEL,
     "config.json", "missing field 'hidden_size'"},
    {"hidden_size a string", M_CONFIG, "config.json", "hidden_size", "\"32\"", {0}, LL_EMODEL,
     "config.json", "'hidden_size' must be an integer, not a string"},
    {"hidden_size fractional", M_CONFIG, "config.json", "hidden_size", "32.5", {0}, LL_EMODEL,
     "config.json", "'hidden_size' must be an integer, got 32.5"},
    {"negative layers", M_CONFIG, "config.json", "num_hidden_layers", "-2", {0}, LL_EMODEL,
     "config.json", "'num_hidden_layers' must be between 1 and 1024, got -2"},
    {"heads not a multiple of kv heads", M_CONFIG, "config.json", "num_key_value_heads", "3",
     {0}, LL_EMODEL, "config.json", "not a multiple of num_key_value_heads"},
    {"tie_word_embeddings a string", M_CONFIG, "config.json", "tie_word_embeddings", "\"no\"",
     {0}, LL_EMODEL, "config.json", "'tie_word_embeddings' must be a boolean, not a string"},
    {"eos not an int", M_CONFIG, "config.json", "eos_token_id", "\"</s>\"", {0}, LL_EMODEL,
     "config.json", "'eos_token_id' must be a non-negative integer or a list"},
    {"eos past vocab", M_CONFIG, "config.json", "eos_token_id", "[2, 1000]", {0}, LL_EMODEL,
     "config.json", "eos_token_id 1000 is outside the vocabulary"},
    {"unknown model_type", M_CONFIG, "config.json", "model_type", "\"phimoe\"", {0},
     LL_EUNSUPPORTED, "config.json",
     "unknown model_type \"phimoe\" (known: qwen2, qwen3, llama, qwen2_moe, qwen3_moe, mistral, "
     "gemma2, gemma3_text, gemma3, phi3, smollm3, granite, granitemoe, mock)"},
    {"model_type not a string", M_CONFIG, "config.json", "model_type", "2", {0}, LL_EMODEL,
     "config.json", "'model_type' must be a string, not a number"},
    {"rope_scaling", M_CONFIG, "config.json", "rope_scaling", "{\"type\": \"dynamic\"}", {0},
     LL_EUNSUPPORTED, "config.json", "rope_scaling.rope_type \"dynamic\" is not supported"},
    {"sliding window", M_CONFIG, "config.json", "use_sliding_window", "true", {0},
     LL_EUNSUPPORTED, "config.json", "use_sliding_window"},
    {"activation", M_CONFIG, "config.json", "hidden_act", "\"gelu\"", {0}, LL_EUNSUPPORTED,
     "config.json", "hidden_act \"gelu\" is not supported"},
    {"config disagrees with weights (MLP)", M_CONFIG, "config.json", "intermediate_size", "50",
     {0}, LL_EMODEL, "model.safetensors",
     "'model.layers.0.mlp.gate_proj.weight' has shape [48, 32], but config.json implies [50, 32]"},
    {"config disagrees with weights (layers)", M_CONFIG, "config.json", "num_hidden_layers", "1",
     {0}, LL_EMODEL, "model.safetensors", "num_hidden_layers 1"},
    {"config disagrees with weights (vocab)", M_CONFIG, "config.json", "vocab_size", "999",
     {0}, LL_EMODEL, "model.safetensors",
     "'model.embed_tokens.weight' has shape [1000, 32], but config.json implies [999, 32]"},
    {"lm_head shape", M_TENSOR, NULL, NULL, NULL,
     {.name = "lm_head.weight", .shape = "[999, 32]", .nbytes = 999 * 64}, LL_EMODEL,
     "model.safetensors", "'lm_head.weight' has shape [999, 32], but config.json implies "
                          "[1000, 32]"},
    {"bad generation_config.json", M_WRITE, "generation_config.json", "{\"top_p\": 0.9,", NULL,
     {0}, LL_EJSON, "generation_config.json", "invalid JSON"},
    {"generation temperature a string", M_GEN, "generation_config.json", "temperature",
     "\"hot\"", {0}, LL_EMODEL, "generation_config.json",
     "'temperature' must be a number, not a string"},
    {"generation top_p out of range", M_GEN, "generation_config.json", "top_p", "1.5", {0},
     LL_EMODEL, "generation_config.json", "'top_p' must be greater than 0 and at most 1, got 1.5"},
    {"no weights", M_RM, "model.safetensors", NULL, NULL, {0}, LL_EIO, "model.safetensors",
     "neither model.safetensors nor model.safetensors.index.json"},
    {"missing tensor", M_TENSOR, NULL, NULL, NULL, {.name = "model.norm.weight", .drop = true},
     LL_EMODEL, "model.safetensors", "missing tensor 'model.norm.weight'"},
    {"missing bias", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.layers.1.self_attn.v_proj.bias", .drop = true}, LL_EMODEL,
     "model.safetensors", "missing tensor 'model.layers.1.self_attn.v_proj.bias'"},
    {"missing lm_head (untied)", M_TENSOR, NULL, NULL, NULL,
     {.name = "lm_head.weight", .drop = true}, LL_EMODEL, "model.safetensors",
     "missing tensor 'lm_head.weight' (config.json has tie_word_embeddings false)"},
    {"wrong shape", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.norm.weight", .shape = "[16]", .nbytes = 32}, LL_EMODEL,
     "model.safetensors", "'model.norm.weight' has shape [16], but config.json implies [32]"},
    {"wrong rank", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.layers.0.self_attn.q_proj.weight", .shape = "[64, 32, 1]", .nbytes = 4096},
     LL_EMODEL, "model.safetensors", "has shape [64, 32, 1], but config.json implies [64, 32]"},
    {"dtype I64", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.norm.weight", .dtype = "I64", .shape = "[8]", .nbytes = 64},
     LL_EUNSUPPORTED, "model.safetensors",
     "'model.norm.weight' has dtype I64; weights must be BF16, F16 or F32"},
    {"dtype I16", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.layers.1.mlp.up_proj.weight", .dtype = "I16", .shape = "[48, 32]",
      .nbytes = 3072},
     LL_EUNSUPPORTED, "model.safetensors", "has dtype I16"},
    {"size not dtype x shape", M_TENSOR, NULL, NULL, NULL,
     {.name = "model.norm.weight", .dtype = "F32", .shape = "[32]", .nbytes = 64}, LL_EFORMAT,
     "model.safetensors", "hold 64 bytes but dtype F32 x shape needs 128"},
    {"offsets past EOF", M_PAST_EOF, NULL, NULL, NULL, {0}, LL_EFORMAT, "model.safetensors",
     "run past the end of the file"},
    {"truncated file", M_TRUNCATE, NULL, NULL, NULL, {0}, LL_EFORMAT, "model.safetensors",
     "truncated file?"},
    {"absurd header length", M_HEADER_LEN, NULL, NULL, NULL, {0}, LL_EFORMAT,
     "model.safetensors", "header length 1099511627776 is absurd"},
};

static void test_bad_dirs(void **state)
{
    (void)state;
    for (size_t i = 0; i < LL_ARRAY_LEN(bad_dirs); i++) {
        const struct bad_dir *c = &bad_dirs[i];
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        const char *dir = base_copy(name);
        switch (c->m) {
        case M_NONE: break;
        case M_CONFIG:
        case M_GEN: json_edit(dir, c->file, c->key, c->json); break;
        case M_TENSOR: st_rewrite(dir, "model.safetensors", &c->edit, false, NULL); break;
        case M_PAST_EOF: st_rewrite(dir, "model.safetensors", NULL, true, NULL); break;
        case M_RM: assert_int_equal(unlink(join(dir, c->file)), 0); break;
        case M_WRITE: spit(join(dir, c->file), c->key, strlen(c->key)); break;
        case M_TRUNCATE: {
            struct stat sb;
            assert_int_equal(stat(join(dir, "model.safetensors"), &sb), 0);
            assert_int_equal(truncate(join(dir, "model.safetensors"), sb.st_size - 100), 0);
            break;
        }
        case M_HEADER_LEN: {
            FILE *f = fopen(join(dir, "model.safetensors"), "r+b");
            assert_non_null(f);
            const uint8_t len[8] = {0, 0, 0, 0, 0, 1, 0, 0}; /* 2^40 */
            assert_int_equal(fwrite(len, 1, 8, f), 8);
            fclose(f);
            break;
        }
        }
        struct model *m = (struct model *)1;
        struct ll_err err = {0};
        enum ll_status s = model_open(&m, dir, NULL, &err);
        if (getenv("LL_TEST_VERBOSE"))
            printf("%-40s %s\n", c->what, err.msg);
        if (s != c->status || !strstr(err.msg, c->needle1) || !strstr(err.msg, c->needle2))
            fail_msg("case '%s': status %s (want %s), message: %s", c->what, ll_status_str(s),
                     ll_status_str(c->status), err.msg);
        assert_null(m);
    }
}

static void test_not_a_dir(void **state)
{
    (void)state;
    struct model *m = NULL;
    struct ll_err err = {0};
    assert_int_equal(model_open(&m, "/nonexistent/model", NULL, &err), LL_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/model"));
    assert_int_equal(model_open(&m, FIXTURE "/config.json", NULL, &err), LL_EIO);
    assert_non_null(strstr(err.msg, "not a directory"));
    assert_null(m);
    model_close(NULL);
}

/* The registry routes by config.json model_type and everything after open goes through
 * m->family: this test names no family's weights struct (m->weights is opaque). */
static void test_registry_routes(void **state)
{
    (void)state;
    const struct model_family *f = model_registry_find("qwen2");
    assert_non_null(f);
    assert_string_equal(f->model_type, "qwen2");
    assert_ptr_equal(model_registry_find_arch("Qwen2ForCausalLM"), f);
    const struct model_family *q3 = model_registry_find("qwen3");
    assert_non_null(q3);
    assert_ptr_equal(model_registry_find_arch("Qwen3ForCausalLM"), q3);
    assert_true(q3 != f && q3->forward == f->forward && q3->bind != f->bind);
    const struct model_family *ll = model_registry_find("llama");
    assert_non_null(ll);
    assert_ptr_equal(model_registry_find_arch("LlamaForCausalLM"), ll);
    assert_true(ll != f && ll->forward == f->forward && ll->bind != f->bind && ll->bind != q3->bind);
    const struct model_family *q2m = model_registry_find("qwen2_moe"),
                              *q3m = model_registry_find("qwen3_moe");
    assert_non_null(q2m);
    assert_non_null(q3m);
    assert_ptr_equal(model_registry_find_arch("Qwen2MoeForCausalLM"), q2m);
    assert_ptr_equal(model_registry_find_arch("Qwen3MoeForCausalLM"), q3m);
    assert_true(q2m->forward == f->forward && q3m->forward == f->forward && q2m->bind != q3m->bind);
    const struct model_family *mis = model_registry_find("mistral");
    assert_non_null(mis);
    assert_ptr_equal(model_registry_find_arch("MistralForCausalLM"), mis);
    assert_true(mis->bind == model_registry_find("llama")->bind && mis->window_unswitched &&
                !f->window_unswitched);
    const struct model_family *g2 = model_registry_find("gemma2"),
                              *g3 = model_registry_find("gemma3_text");
    assert_true(g2 && g3 && g2 != g3);
    assert_ptr_equal(model_registry_find_arch("Gemma2ForCausalLM"), g2);
    assert_ptr_equal(model_registry_find_arch("Gemma3ForCausalLM"), g3);
    assert_true(g2->forward == f->forward && g2->window_period == 2 &&
                g3->window_period == 6 && !f->window_period && g2->bind != g3->bind);
    const struct model_family *g3m = model_registry_find("gemma3");
    assert_true(g3m && g3m->text_config && !g3->text_config && g3m->bind == g3->bind &&
                !strcmp(g3m->weights_prefix, "language_model.") && !g3->weights_prefix);
    assert_ptr_equal(model_registry_find_arch("Gemma3ForConditionalGeneration"), g3m);
    const struct model_family *p3 = model_registry_find("phi3");
    assert_true(p3 && p3->window_unswitched && p3->bind != f->bind && p3->forward == f->forward &&
                p3->config_defaults);
    assert_ptr_equal(model_registry_find_arch("Phi3ForCausalLM"), p3);
    assert_null(model_registry_find("phimoe"));
    assert_null(model_registry_find_arch("PhiMoEForCausalLM"));
    assert_true(f->bind && f->unbind && f->runtime_create && f->runtime_free && f->forward);
    const struct model_family *mock = model_registry_find("mock");
    assert_non_null(mock);
    assert_true(mock->no_weights && !f->no_weights);
    char names[192], cut[3];
    model_registry_names(names, sizeof names);
    assert_string_equal(names, "qwen2, qwen3, llama, qwen2_moe, qwen3_moe, mistral, gemma2, "
                               "gemma3_text, gemma3, phi3, smollm3, granite, granitemoe, mock");
    model_registry_names(cut, sizeof cut);
    assert_string_equal(cut, "qw");

    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, FIXTURE, NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_ptr_equal(m->family, model_registry_find(m->config.model_type));
    assert_non_null(m->weights);
    assert_int_equal(m->weight_dtype, LL_BF16);
    struct runtime_opts o = {.n_ctx = 8, .max_batch = 1, .n_threads = 1};
    struct model_runtime *rt = NULL;
    if (runtime_create(&rt, m, &o, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_ptr_equal(rt->model, m);
    float *logits = malloc(sizeof(float) * (size_t)m->config.vocab_size);
    assert_non_null(logits);
    int32_t tok = 1, pos = 0;
    struct ll_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos};
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
    for (int i = 0; i < m->config.vocab_size; i++)
        assert_true(isfinite(logits[i]));
    runtime_free(rt);
    model_close(m);

    /* config.json's model_type picks the family: the mock directory has no weight files */
    if (model_open(&m, "tests/fixtures/mock", NULL, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_ptr_equal(m->family, mock);
    assert_null(m->st);
    assert_int_equal(m->config.vocab_size, 151936);
    assert_int_equal(m->config.n_eos, 1);
    if (runtime_create(&rt, m, &o, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
    for (int i = 0; i < m->config.vocab_size; i++)
        assert_true(logits[i] >= -4.0f && logits[i] < 4.0f);
    free(logits);
    runtime_free(rt);
    model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_config),
        cmocka_unit_test(test_registry_routes),
        cmocka_unit_test(test_fixture_weights),
        cmocka_unit_test(test_mkmodel_tiny),
        cmocka_unit_test(test_mkmodel_untied),
        cmocka_unit_test(test_sharded_model),
        cmocka_unit_test(test_mixed_dtype),
        cmocka_unit_test(test_config_variants),
        cmocka_unit_test(test_bad_dirs),
        cmocka_unit_test(test_not_a_dir),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
