/*
 * fuzz_config.c: the readers of a model directory's JSON files.
 *
 * Input: one selector byte, then the file's text. Selector % 5:
 *   0  config.json              model_config_parse
 *   1  generation_config.json   generation_defaults_parse, then model_config_merge_eos with a
 *                               Qwen2 config (ids checked against its vocabulary)
 *   2  tokenizer_config.json    tokenizer_config_read, then chat_template_load_model (the
 *                               template it names, compiled) from a directory holding the file
 *   3  tokenizer.json           tokenizer_load from a directory holding the file; a tokenizer
 *                               that loads encodes and decodes a fixed text
 *   4  model.safetensors.index.json   st_open_index beside two valid shards, a.safetensors
 *                               (x: F32 [2], y: BF16 [3]) and b.safetensors (z: U8 [1])
 * Checked: every failure has a message; what loads satisfies the readers' documented bounds
 * (for the mock family, which reads only its vocabulary and context, those two).
 */
#include <stdbool.h>

#include "chat_template.h"
#include "fuzz.h"
#include "model_config.h"
#include "model_registry.h"
#include "safetensors.h"
#include "tokenizer.h"

static const char qwen2_config[] =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": "
    "160, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"vocab_size\": 1000, \"eos_token_id\": 7}";

static void need_message(enum ll_status st, const struct ll_err *err, const char *what)
{
    if (st != LL_OK && !err->msg[0])
        fuzz_fail("%s failed (%d) without a message", what, st);
}

static void fuzz_model_config(const char *text, size_t len)
{
    struct model_config cfg;
    struct ll_err err = {0};
    memset(&cfg, 0, sizeof cfg);
    enum ll_status st = model_config_parse(&cfg, text, len, "config.json", &err);
    need_message(st, &err, "model_config_parse");
    const struct model_family *fam = st == LL_OK ? model_registry_find(cfg.model_type) : NULL;
    if (fam && fam->no_weights) { /* the mock family reads its vocabulary and context alone */
        if (cfg.vocab_size <= 0 || cfg.max_position <= 0)
            fuzz_fail("model_config_parse accepted a %s config without a vocabulary or context",
                      cfg.model_type);
        return;
    }
    if (st == LL_OK &&
        (cfg.hidden_size <= 0 || cfg.n_layers <= 0 || cfg.n_heads <= 0 || cfg.n_kv_heads <= 0 ||
         cfg.head_dim <= 0 || cfg.vocab_size <= 0 || cfg.n_heads % cfg.n_kv_heads != 0 ||
         cfg.attention_bias < -1 || cfg.attention_bias > 1 || cfg.swa.window < 0 ||
         !(cfg.attn_scale >= 0) || !(cfg.attn_softcap >= 0) || !(cfg.final_softcap >= 0) ||
         !(cfg.embed_mult >= 0) || !(cfg.residual_mult >= 0) || !(cfg.logits_div >= 0) ||
         (cfg.moe.n_experts && (cfg.moe.n_experts_used < 1 ||
                                cfg.moe.n_experts_used > cfg.moe.n_experts ||
                                cfg.moe.intermediate < 1)) ||
         !(cfg.swa.rope_theta >= 0) || cfg.rope_dim < 2 || cfg.rope_dim % 2 ||
         cfg.rope_dim > cfg.head_dim ||
         memchr(cfg.weights_prefix, 0, sizeof cfg.weights_prefix) == NULL))
        fuzz_fail("model_config_parse accepted a shape it documents as invalid");
    for (int l = cfg.n_layers; st == LL_OK && l < 1024; l++)
        if (!model_layer_rope(&cfg, l))
            fuzz_fail("layer %d past the %d layers is marked without RoPE", l, cfg.n_layers);
    const struct model_rope_scaling *rs = &cfg.rope_scaling;
    if (st == LL_OK && rs->kind == MODEL_ROPE_LONGROPE) {
        if (rs->n_factors != cfg.rope_dim / 2 || rs->n_factors > LL_ROPE_MAX_PAIRS ||
            rs->original_max_position < 1 || !(rs->attention_factor > 0))
            fuzz_fail("longrope accepted with %d factors, original %d, attention factor %g",
                      rs->n_factors, rs->original_max_position, rs->attention_factor);
        for (int i = 0; i < rs->n_factors; i++)
            if (!(rs->short_factor[i] > 0) || !(rs->long_factor[i] > 0))
                fuzz_fail("longrope factor %d not positive", i);
    }
}

static void fuzz_generation_config(const char *text, size_t len)
{
    struct model_config cfg;
    struct generation_defaults g;
    struct ll_err err = {0};
    memset(&cfg, 0, sizeof cfg);
    memset(&g, 0, sizeof g);
    if (model_config_parse(&cfg, qwen2_config, strlen(qwen2_config), "config.json", &err) != LL_OK)
        fuzz_fail("the fixed config: %s", err.msg);
    enum ll_status st = generation_defaults_parse(&g, text, len, "generation_config.json", &err);
    need_message(st, &err, "generation_defaults_parse");
    if (st != LL_OK)
        return;
    if (g.n_eos < 0 || g.n_eos > LL_MAX_EOS)
        fuzz_fail("generation_defaults_parse: %d eos ids", g.n_eos);
    st = model_config_merge_eos(&cfg, &g, "config.json", "generation_config.json", &err);
    need_message(st, &err, "model_config_merge_eos");
    if (st == LL_OK) {
        if (cfg.n_eos < 0 || cfg.n_eos > LL_MAX_EOS)
            fuzz_fail("merge: %d eos ids", cfg.n_eos);
        for (int i = 0; i < cfg.n_eos; i++)
            if (cfg.eos_ids[i] < 0 || cfg.eos_ids[i] >= cfg.vocab_size)
                fuzz_fail("merge: eos id %d outside the vocabulary", cfg.eos_ids[i]);
    }
}

static void fuzz_tokenizer_config(const uint8_t *data, size_t len)
{
    const char *dir = fuzz_write_file("tokenizer_config.json", data, len);
    struct tokenizer_config cfg;
    struct ll_err err = {0};
    enum ll_status st = tokenizer_config_read(&cfg, dir, &err);
    need_message(st, &err, "tokenizer_config_read");
    if (st == LL_OK && !cfg.found)
        fuzz_fail("tokenizer_config_read: the file is there but not found");
    tokenizer_config_free(&cfg);
    struct chat_template *t = NULL;
    char *bos = NULL, *eos = NULL;
    memset(&err, 0, sizeof err);
    st = chat_template_load_model(&t, &bos, &eos, dir, &err);
    need_message(st, &err, "chat_template_load_model");
    if (st == LL_OK && !t)
        fuzz_fail("chat_template_load_model: LL_OK without a template");
    chat_template_free(t);
    free(bos);
    free(eos);
}

static void fuzz_tokenizer_json(const uint8_t *data, size_t len)
{
    /* a tokenizer_config.json left by selector 2 would be read too: remove it */
    const char *dir = fuzz_write_file("tokenizer.json", data, len);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    struct tokenizer *tok = NULL;
    struct ll_err err = {0};
    enum ll_status st = tokenizer_load(&tok, dir, &err);
    need_message(st, &err, "tokenizer_load");
    if (st != LL_OK)
        return;
    static const char text[] = "Hello, world! 12345 \xe4\xbd\xa0\xe5\xa5\xbd <think>\n  x";
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, text, sizeof text - 1, true, &ids, &n, &err) != LL_OK)
        fuzz_fail("encode: %s", err.msg);
    int32_t vocab = tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            fuzz_fail("encode: id %d outside the vocabulary (%d)", ids[i], vocab);
    char *out = NULL;
    if (tokenizer_decode(tok, ids, n, false, &out, NULL, &err) != LL_OK)
        fuzz_fail("decode: %s", err.msg);
    free(out);
    free(ids);
    tokenizer_free(tok);
}

static void fuzz_index(const uint8_t *data, size_t len)
{
    static bool shards;
    if (!shards) {
        static const char a[] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"y\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}";
        static const char b[] = "{\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
        uint8_t file[256];
        uint64_t n = sizeof a - 1;
        memcpy(file, &n, 8);
        memcpy(file + 8, a, n);
        memset(file + 8 + n, 7, 14);
        fuzz_write_file("a.safetensors", file, 8 + n + 14);
        n = sizeof b - 1;
        memcpy(file, &n, 8);
        memcpy(file + 8, b, n);
        file[8 + n] = 1;
        fuzz_write_file("b.safetensors", file, 8 + n + 1);
        shards = true;
    }
    const char *dir = fuzz_write_file("model.safetensors.index.json", data, len);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    enum ll_status s = st_open_index(&st, path, &err);
    need_message(s, &err, "st_open_index");
    if (s != LL_OK)
        return;
    for (size_t i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_at(st, i);
        if (st_find(st, t->name) != t)
            fuzz_fail("st_find(%s) does not find it", t->name);
        if (t->nbytes > 8 || (t->nbytes && ((const unsigned char *)t->data)[t->nbytes - 1] > 7))
            fuzz_fail("%s: %zu bytes, not what the shards hold", t->name, t->nbytes);
    }
    st_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    switch (data[0] % 5) {
    case 0:
        fuzz_model_config(text, size - 1);
        break;
    case 1:
        fuzz_generation_config(text, size - 1);
        break;
    case 2:
        fuzz_tokenizer_config(data + 1, size - 1);
        break;
    case 3:
        fuzz_tokenizer_json(data + 1, size - 1);
        break;
    default:
        fuzz_index(data + 1, size - 1);
        break;
    }
    return 0;
}
