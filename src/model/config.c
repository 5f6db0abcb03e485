/*
 * config.c: config.json and generation_config.json readers (see model_config.h).
 *
 * Called once by model_open() on the start-up thread. Hugging Face writes JSON null for unset
 * optional fields (rope_scaling, sliding_window, bos_token_id), so null reads as absent for
 * optional fields. Bounds on sizes are generous but keep every product of two of them inside
 * int64, so later shape arithmetic cannot overflow.
 */
#include "model_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"
#include "model_registry.h"
#include "moe_route.h"
#include "util.h"

/* Parse text as a JSON object (ll_json_parse names line and column). */
static enum ll_status json_parse_object(cJSON **out, const char *text, size_t len,
                                        const char *name, struct ll_err *err)
{
    enum ll_status s = ll_json_parse(out, text, len, name, err);
    if (s != LL_OK)
        return s;
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return ll_err_set(err, LL_EJSON, "%s: top level is not a JSON object", name);
    }
    return LL_OK;
}

/* A getter's failure (json.h) as a model-file error: LL_EMODEL, the file named first. */
static enum ll_status in_file(enum ll_status s, const char *name, struct ll_err *err)
{
    if (s == LL_OK)
        return LL_OK;
    ll_err_prefix(err, "%s: ", name);
    if (err)
        err->code = LL_EMODEL;
    return LL_EMODEL;
}

/* An integer field in [min, max]. Absent (or null): *out = dflt, or LL_EMODEL when required. */
static enum ll_status get_int(const cJSON *o, const char *key, bool required, long long min,
                              long long max, int dflt, int *out, const char *name,
                              struct ll_err *err)
{
    long long v = dflt;
    bool present;
    enum ll_status s = ll_json_get_int(o, key, min, max, &v, &present, err);
    if (s != LL_OK)
        return in_file(s, name, err);
    if (!present && required)
        return ll_err_set(err, LL_EMODEL, "%s: missing field '%s'", name, key);
    *out = (int)v;
    return LL_OK;
}

/* A number field in (min, max] (or [min, max] when min_ok). Absent: *out = dflt. */
static enum ll_status get_num(const cJSON *o, const char *key, double min, bool min_ok,
                              double max, double dflt, double *out, bool *present,
                              const char *name, struct ll_err *err)
{
    *out = dflt;
    return in_file(ll_json_get_num(o, key, min, max, !min_ok, out, present, err), name, err);
}

/* A boolean field. Absent: *out = dflt. */
static enum ll_status get_bool(const cJSON *o, const char *key, bool dflt, bool *out,
                               bool *present, const char *name, struct ll_err *err)
{
    *out = dflt;
    return in_file(ll_json_get_bool(o, key, out, present, err), name, err);
}

/* A token id field: absent/null -> -1. */
static enum ll_status get_token_id(const cJSON *o, const char *key, int *out, const char *name,
                                   struct ll_err *err)
{
    return get_int(o, key, false, 0, INT32_MAX, -1, out, name, err);
}

/* longrope's factor list `key` of rope_scaling r: c->rope_dim / 2 positive numbers. */
static enum ll_status get_factors(const struct model_config *c, const cJSON *r, const char *key,
                                  double *out, const char *where, struct ll_err *err)
{
    const cJSON *a = ll_json_member(r, key);
    const int n = c->rope_dim / 2;
    if (!a)
        return ll_err_set(err, LL_EMODEL, "%s: missing field '%s'", where, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return ll_err_set(err, LL_EMODEL,
                          "%s.%s must be a list of %d numbers (half the rotary dimensions of a "
                          "head, %d)",
                          where, key, n, c->rope_dim);
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !(e->valuedouble < 1e9))
            return ll_err_set(err, LL_EMODEL, "%s.%s[%d] must be a positive number", where, key,
                              i);
        out[i] = e->valuedouble;
    }
    return LL_OK;
}

/* longrope (Phi-3): both factor lists, the original context L (config.json's top-level
 * original_max_position_embeddings, as transformers' Phi3Config has it; else
 * max_position_embeddings) and the attention factor, given or from the stretch s (max / L when
 * L is given, else rope_scaling.factor, else 1). */
static enum ll_status get_longrope(struct model_config *c, const cJSON *r, const cJSON *o,
                                   const char *where, const char *name, struct ll_err *err)
{
    struct model_rope_scaling *rs = &c->rope_scaling;
    enum ll_status s;
    bool has_af;
    int orig;
    if (c->rope_dim / 2 > LL_ROPE_MAX_PAIRS)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: longrope over %d rotary dimensions is not supported (at most %d)",
                          where, c->rope_dim, 2 * LL_ROPE_MAX_PAIRS);
    rs->n_factors = c->rope_dim / 2;
    double stretch;
    if ((s = get_factors(c, r, "short_factor", rs->short_factor, where, err)) ||
        (s = get_factors(c, r, "long_factor", rs->long_factor, where, err)) ||
        (s = get_int(o, "original_max_position_embeddings", false, 1, 1 << 30, 0, &orig, name,
                     err)) ||
        (s = get_num(r, "factor", 0, false, 1e6, 1.0, &stretch, NULL, where, err)) ||
        (s = get_num(r, "attention_factor", 0, false, 1e3, 0, &rs->attention_factor, &has_af,
                     where, err)))
        return s;
    rs->original_max_position = orig ? orig : c->max_position;
    if (orig)
        stretch = (double)c->max_position / orig;
    rs->factor = stretch;
    if (!has_af)
        rs->attention_factor =
            stretch <= 1.0 ? 1.0
                           : sqrt(1.0 + log(stretch) / log((double)rs->original_max_position));
    return LL_OK;
}

/* rope_scaling (absent or null: none). Only the kinds that keep the attention's math otherwise
 * unchanged are read; every other kind, and any member a kind does not define, is refused by
 * name rather than ignored (it would change the frequencies or scale the attention). o is
 * config.json's object (longrope reads original_max_position_embeddings there). */
static enum ll_status get_rope_scaling(struct model_config *c, const cJSON *r, const cJSON *o,
                                       const char *name, struct ll_err *err)
{
    struct model_rope_scaling *rs = &c->rope_scaling;
    memset(rs, 0, sizeof *rs);
    if (!r)
        return LL_OK;
    if (!cJSON_IsObject(r))
        return ll_err_set(err, LL_EMODEL, "%s: rope_scaling must be an object or null, got %s",
                          name, ll_json_type_name(r));
    const cJSON *t = ll_json_member(r, "rope_type");
    const cJSON *legacy = ll_json_member(r, "type");
    if (!t)
        t = legacy;
    if (!cJSON_IsString(t))
        return ll_err_set(err, LL_EMODEL, "%s: rope_scaling.rope_type must be a string", name);
    if (legacy && (!cJSON_IsString(legacy) || strcmp(legacy->valuestring, t->valuestring)))
        return ll_err_set(err, LL_EMODEL,
                          "%s: rope_scaling.type and rope_scaling.rope_type disagree", name);
    static const char *const linear_keys[] = {"rope_type", "type", "factor", NULL};
    static const char *const yarn_keys[] = {"rope_type", "type", "factor",
                                            "original_max_position_embeddings", "beta_fast",
                                            "beta_slow", "attention_factor", NULL};
    static const char *const llama3_keys[] = {"rope_type", "type", "factor", "low_freq_factor",
                                              "high_freq_factor",
                                              "original_max_position_embeddings", NULL};
    static const char *const longrope_keys[] = {"rope_type", "type", "short_factor",
                                                "long_factor", "factor", "attention_factor",
                                                NULL};
    const char *const *keys;
    if (!strcmp(t->valuestring, "default")) {
        return LL_OK;
    } else if (!strcmp(t->valuestring, "linear")) {
        rs->kind = MODEL_ROPE_LINEAR, keys = linear_keys;
    } else if (!strcmp(t->valuestring, "llama3")) {
        rs->kind = MODEL_ROPE_LLAMA3, keys = llama3_keys;
    } else if (!strcmp(t->valuestring, "yarn")) {
        rs->kind = MODEL_ROPE_YARN, keys = yarn_keys;
    } else if (!strcmp(t->valuestring, "longrope") || !strcmp(t->valuestring, "su")) {
        rs->kind = MODEL_ROPE_LONGROPE, keys = longrope_keys;
    } else {
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: rope_scaling.rope_type \"%.40s\" is not supported (only "
                          "\"linear\", \"llama3\", \"yarn\" and \"longrope\", or null)",
                          name, t->valuestring);
    }
    for (const cJSON *m = r->child; m; m = m->next) {
        const char *const *k = keys;
        while (*k && strcmp(*k, m->string))
            k++;
        if (!*k)
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: rope_scaling.%.40s is not supported with rope_type \"%s\"",
                              name, m->string, t->valuestring);
    }
    enum ll_status s;
    char where[128];
    snprintf(where, sizeof where, "%s: rope_scaling", name);
    if (rs->kind == MODEL_ROPE_LONGROPE)
        return get_longrope(c, r, o, where, name, err);
    bool has_factor;
    if ((s = get_num(r, "factor", 0, false, 1e6, 0, &rs->factor, &has_factor, where, err)))
        return s;
    if (!has_factor)
        return ll_err_set(err, LL_EMODEL, "%s: missing field 'factor'", where);
    if (rs->kind == MODEL_ROPE_YARN) {
        bool has_af;
        if ((s = get_int(r, "original_max_position_embeddings", false, 1, 1 << 30,
                         c->max_position, &rs->original_max_position, where, err)) ||
            (s = get_num(r, "beta_fast", 0, false, 1e6, 32.0, &rs->beta_fast, NULL, where,
                         err)) ||
            (s = get_num(r, "beta_slow", 0, false, 1e6, 1.0, &rs->beta_slow, NULL, where,
                         err)) ||
            (s = get_num(r, "attention_factor", 0, false, 1e3, 0, &rs->attention_factor,
                         &has_af, where, err)))
            return s;
        if (!(rs->beta_slow < rs->beta_fast))
            return ll_err_set(err, LL_EMODEL, "%s: beta_slow (%g) must be below beta_fast (%g)",
                              where, rs->beta_slow, rs->beta_fast);
        return LL_OK;
    }
    if (rs->kind != MODEL_ROPE_LLAMA3)
        return LL_OK;
    bool has_low, has_high;
    if ((s = get_num(r, "low_freq_factor", 0, false, 1e6, 0, &rs->low_freq_factor, &has_low,
                     where, err)) ||
        (s = get_num(r, "high_freq_factor", 0, false, 1e6, 0, &rs->high_freq_factor, &has_high,
                     where, err)) ||
        (s = get_int(r, "original_max_position_embeddings", true, 1, 1 << 30, 0,
                     &rs->original_max_position, where, err)))
        return s;
    if (!has_low || !has_high)
        return ll_err_set(err, LL_EMODEL, "%s: missing field '%s'", where,
                          has_low ? "high_freq_factor" : "low_freq_factor");
    if (!(rs->low_freq_factor < rs->high_freq_factor))
        return ll_err_set(err, LL_EMODEL,
                          "%s: low_freq_factor (%g) must be below high_freq_factor (%g)", where,
                          rs->low_freq_factor, rs->high_freq_factor);
    return LL_OK;
}

/* eos_token_id: an integer or a list of integers (absent/null -> none). */
static enum ll_status get_eos(const cJSON *o, int *ids, int *n, const char *name,
                              struct ll_err *err)
{
    *n = 0;
    const cJSON *v = ll_json_member(o, "eos_token_id");
    long long id;
    if (!v)
        return LL_OK;
    if (cJSON_IsArray(v)) {
        int k = 0;
        for (const cJSON *e = v->child; e; e = e->next, k++) {
            if (!ll_json_is_int(e, 0, INT32_MAX, &id))
                return ll_err_set(err, LL_EMODEL,
                                  "%s: 'eos_token_id'[%d] must be a non-negative integer", name,
                                  k);
            if (*n == LL_MAX_EOS)
                return ll_err_set(err, LL_EMODEL, "%s: 'eos_token_id' lists more than %d ids",
                                  name, LL_MAX_EOS);
            ids[(*n)++] = (int)id;
        }
        return LL_OK;
    }
    if (!ll_json_is_int(v, 0, INT32_MAX, &id))
        return ll_err_set(err, LL_EMODEL,
                          "%s: 'eos_token_id' must be a non-negative integer or a list of them, "
                          "got %s",
                          name, ll_json_type_name(v));
    ids[(*n)++] = (int)id;
    return LL_OK;
}

/* quantization_config (optional): {"quant_method": "llaisys",
 * "format": a scheme (model_qscheme.h), "layout": LL_QLAYOUT}; a missing field, or any other
 * method, format or layout, is refused naming the field. */
static enum ll_status quant_fill(struct model_config *c, const cJSON *o, const char *name,
                                 struct ll_err *err)
{
    const cJSON *q = ll_json_member(o, "quantization_config");
    if (!q)
        return LL_OK;
    if (!cJSON_IsObject(q))
        return ll_err_set(err, LL_EMODEL, "%s: 'quantization_config' must be an object, not %s",
                          name, ll_json_type_name(q));
    static const char *const keys[3] = {"quant_method", "format", "layout"};
    const char *v[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        enum ll_status s = ll_json_get_str(q, keys[i], &v[i], NULL, err);
        if (s != LL_OK) {
            ll_err_prefix(err, "quantization_config: ");
            return in_file(s, name, err);
        }
        if (!v[i])
            return ll_err_set(err, LL_EMODEL, "%s: quantization_config has no '%s'", name,
                              keys[i]);
    }
    if (strcmp(v[0], "llaisys"))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: quantization_config.quant_method \"%.40s\" is not supported (only "
                          "\"llaisys\", as `llaisys-cli quantize` writes it)",
                          name, v[0]);
    if (!model_qscheme_parse(v[1], &c->qscheme))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: quantization_config.format \"%.40s\" is not supported (q8_0, "
                          "q4_0, q4_k, q4_k_m)",
                          name, v[1]);
    if (strcmp(v[2], LL_QLAYOUT))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: quantization_config.layout \"%.40s\" is unknown (this build reads "
                          "\"%s\")",
                          name, v[2], LL_QLAYOUT);
    c->quantized = true;
    return LL_OK;
}

/* The mixture-of-experts fields (model.h's struct model_moe), read when num_experts is present
 * and not null (Qwen's); for a family with local_experts (GraniteMoE), num_local_experts
 * experts as wide as intermediate_size in every layer, the top k's weights renormalised (the
 * softmax of their logits). *m stays zeroed (no experts) otherwise. */
static enum ll_status get_moe(struct model_moe *m, const struct model_config *c,
                              const struct model_family *fam, const cJSON *o, const char *name,
                              struct ll_err *err)
{
    enum ll_status s;
    const int n_layers = c->n_layers;
    memset(m, 0, sizeof *m);
    if (fam && fam->local_experts) {
        if ((s = get_int(o, "num_local_experts", true, 1, MOE_MAX_EXPERTS, 0, &m->n_experts,
                         name, err)) ||
            (s = get_int(o, "num_experts_per_tok", true, 1, m->n_experts, 0,
                         &m->n_experts_used, name, err)))
            return s;
        m->intermediate = c->intermediate_size;
        m->sparse_step = 1;
        m->norm_topk_prob = true;
        return LL_OK;
    }
    const cJSON *ne = ll_json_member(o, "num_experts");
    if (!ne || cJSON_IsNull(ne))
        return LL_OK;
    if ((s = get_int(o, "num_experts", true, 1, MOE_MAX_EXPERTS, 0, &m->n_experts, name,
                     err)) ||
        (s = get_int(o, "num_experts_per_tok", true, 1, m->n_experts, 0, &m->n_experts_used,
                     name, err)) ||
        (s = get_int(o, "moe_intermediate_size", true, 1, 1 << 20, 0, &m->intermediate, name,
                     err)) ||
        (s = get_int(o, "shared_expert_intermediate_size", false, 1, 1 << 20, 0,
                     &m->shared_intermediate, name, err)) ||
        (s = get_int(o, "decoder_sparse_step", false, 1, 1024, 1, &m->sparse_step, name, err)) ||
        (s = get_bool(o, "norm_topk_prob", false, &m->norm_topk_prob, NULL, name, err)))
        return s;
    const cJSON *only = ll_json_member(o, "mlp_only_layers");
    if (only && !cJSON_IsNull(only)) {
        if (!cJSON_IsArray(only))
            return ll_err_set(err, LL_EMODEL, "%s: 'mlp_only_layers' must be a list of layer "
                              "numbers, got %s", name, ll_json_type_name(only));
        const cJSON *e;
        cJSON_ArrayForEach(e, only)
        {
            long long l;
            if (!ll_json_is_int(e, 0, n_layers - 1, &l)) {
                char what[40];
                if (cJSON_IsNumber(e))
                    snprintf(what, sizeof what, "%g", e->valuedouble);
                else
                    snprintf(what, sizeof what, "%s", ll_json_type_name(e));
                return ll_err_set(err, LL_EMODEL,
                                  "%s: 'mlp_only_layers' holds %s, not a layer number in [0, %d]",
                                  name, what, n_layers - 1);
            }
            m->mlp_only[l / 64] |= (uint64_t)1 << (l % 64);
        }
    }
    return LL_OK;
}

bool model_layer_sparse(const struct model_config *c, int layer)
{
    const struct model_moe *m = &c->moe;
    return m->n_experts > 0 && !(m->mlp_only[layer / 64] >> (layer % 64) & 1) &&
           (layer + 1) % m->sparse_step == 0;
}

/* Sliding-window attention. Qwen's configs switch it on with use_sliding_window (always false
 * in the published ones; true is refused). Mistral's and Phi-3's have no such switch (the
 * family's window_unswitched): a number in sliding_window is the window of every layer (null:
 * none). A window at least max_position_embeddings long is full attention. */
static enum ll_status get_sliding_window(struct model_config *c, const struct model_family *fam,
                                         const cJSON *o, const char *name, struct ll_err *err)
{
    bool sliding;
    enum ll_status s = get_bool(o, "use_sliding_window", false, &sliding, NULL, name, err);
    if (s)
        return s;
    if (sliding)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: use_sliding_window true is not supported (sliding-window "
                          "attention)",
                          name);
    int window;
    if (!fam || !fam->window_unswitched ||
        (s = get_int(o, "sliding_window", false, 1, 1 << 30, 0, &window, name, err)))
        return s;
    if (window && window < c->max_position) {
        c->swa.window = window;
        for (int l = 0; l < c->n_layers; l++)
            c->swa.layers[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return LL_OK;
}

/* partial_rotary_factor (absent or null: 1): the first head_dim · factor dims of a head turn,
 * the rest pass unturned (Phi-4-mini's 0.75). The product must be a positive even number. */
static enum ll_status get_rotary_dims(struct model_config *c, const cJSON *o, const char *name,
                                      struct ll_err *err)
{
    double f;
    enum ll_status s = get_num(o, "partial_rotary_factor", 0, false, 1.0, 1.0, &f, NULL, name, err);
    if (s)
        return s;
    c->rope_dim = (int)(c->head_dim * f); /* transformers' int(), toward zero */
    if (c->rope_dim < 2 || c->rope_dim % 2)
        return ll_err_set(err, LL_EMODEL,
                          "%s: partial_rotary_factor %g of head dimension %d gives %d rotary "
                          "dimensions; RoPE needs a positive even number",
                          name, f, c->head_dim, c->rope_dim);
    return LL_OK;
}

/* The MLP's activation: hidden_act, or Gemma's hidden_activation (when both are given they
 * must agree); absent: silu. */
static enum ll_status get_act(struct model_config *c, const cJSON *o, const char *name,
                              struct ll_err *err)
{
    static const char *const keys[2] = {"hidden_act", "hidden_activation"};
    bool seen = false;
    for (int i = 0; i < 2; i++) {
        const cJSON *a = ll_json_member(o, keys[i]);
        if (!a || cJSON_IsNull(a))
            continue;
        enum model_act act;
        if (cJSON_IsString(a) && !strcmp(a->valuestring, "silu"))
            act = MODEL_ACT_SILU;
        else if (cJSON_IsString(a) && !strcmp(a->valuestring, "gelu_pytorch_tanh"))
            act = MODEL_ACT_GELU_TANH;
        else
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: %s %s%.40s%s is not supported (only \"silu\" and "
                              "\"gelu_pytorch_tanh\")",
                              name, keys[i], cJSON_IsString(a) ? "\"" : "",
                              cJSON_IsString(a) ? a->valuestring : ll_json_type_name(a),
                              cJSON_IsString(a) ? "\"" : "");
        if (seen && act != c->act)
            return ll_err_set(err, LL_EMODEL, "%s: hidden_act and hidden_activation disagree",
                              name);
        c->act = act;
        seen = true;
    }
    return LL_OK;
}

/* The attention and logit fields Gemma's configs add (absent or null elsewhere):
 * query_pre_attn_scalar (q·k scaled by its inverse square root instead of head_dim's),
 * attn_logit_softcapping and final_logit_softcapping (c·tanh(x/c)). Gemma 3's
 * use_bidirectional_attention (EmbeddingGemma) is refused when true, as is the transformers 5
 * layout rope_parameters, which would replace the rope fields read here. */
static enum ll_status get_gemma_fields(struct model_config *c, const cJSON *o, const char *name,
                                       struct ll_err *err)
{
    enum ll_status s;
    double qpas;
    bool has_qpas, bidir;
    if ((s = get_num(o, "query_pre_attn_scalar", 0, false, 1e9, 0, &qpas, &has_qpas, name,
                     err)) ||
        (s = get_num(o, "attn_logit_softcapping", 0, false, 1e9, 0, &c->attn_softcap, NULL,
                     name, err)) ||
        (s = get_num(o, "final_logit_softcapping", 0, false, 1e9, 0, &c->final_softcap, NULL,
                     name, err)) ||
        (s = get_bool(o, "use_bidirectional_attention", false, &bidir, NULL, name, err)))
        return s;
    c->attn_scale = has_qpas ? 1.0 / sqrt(qpas) : 0.0;
    if (bidir)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: use_bidirectional_attention true is not supported (an encoder, "
                          "not a causal language model)",
                          name);
    const cJSON *rp = ll_json_member(o, "rope_parameters");
    if (rp && !cJSON_IsNull(rp))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: rope_parameters is not supported (this build reads rope_theta, "
                          "rope_scaling and rope_local_base_freq)",
                          name);
    return LL_OK;
}

/* Granite's multipliers (the family's `multipliers`): the embedding rows times
 * embedding_multiplier, q·k times attention_multiplier (instead of 1/√head_dim), each sub-layer's
 * output times residual_multiplier before the residual add, the logits divided by
 * logits_scaling. Absent: 1, as in transformers' GraniteConfig (the family's defaults). */
static enum ll_status get_multipliers(struct model_config *c, const struct model_family *fam,
                                      const cJSON *o, const char *name, struct ll_err *err)
{
    if (!fam || !fam->multipliers)
        return LL_OK;
    enum ll_status s;
    if ((s = get_num(o, "embedding_multiplier", 0, false, 1e6, 1.0, &c->embed_mult, NULL, name,
                     err)) ||
        (s = get_num(o, "attention_multiplier", 0, false, 1e6, 1.0, &c->attn_scale, NULL, name,
                     err)) ||
        (s = get_num(o, "residual_multiplier", 0, false, 1e6, 1.0, &c->residual_mult, NULL,
                     name, err)) ||
        (s = get_num(o, "logits_scaling", 0, false, 1e6, 1.0, &c->logits_div, NULL, name, err)))
        return s;
    return LL_OK;
}

/* Gemma's per-layer sliding window (the family's window_period): sliding_window (required),
 * the layers it applies to (layer_types, else sliding_window_pattern), and
 * rope_local_base_freq, the RoPE base of those layers. */
static enum ll_status get_layer_windows(struct model_config *c, const struct model_family *fam,
                                        const cJSON *o, const char *name, struct ll_err *err)
{
    struct model_swa *w = &c->swa;
    enum ll_status s;
    int period;
    if ((s = get_int(o, "sliding_window", true, 1, 1 << 30, 0, &w->window, name, err)) ||
        (s = get_num(o, "rope_local_base_freq", 0, false, 1e12, 0, &w->rope_theta, NULL, name,
                     err)) ||
        (s = get_int(o, "sliding_window_pattern", false, 1, 1024, fam->window_period, &period,
                     name, err)))
        return s;
    const cJSON *types = ll_json_member(o, "layer_types");
    if (!types || cJSON_IsNull(types)) {
        for (int l = 0; l < c->n_layers; l++)
            if ((l + 1) % period)
                w->layers[l / 64] |= (uint64_t)1 << (l % 64);
        return LL_OK;
    }
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layers)
        return ll_err_set(err, LL_EMODEL,
                          "%s: layer_types must be a list of num_hidden_layers (%d) strings",
                          name, c->n_layers);
    int l = 0;
    for (const cJSON *t = types->child; t; t = t->next, l++) {
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "sliding_attention"))
            w->layers[l / 64] |= (uint64_t)1 << (l % 64);
        else if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: layer_types[%d] %s%.40s%s is not supported (only "
                              "\"sliding_attention\" and \"full_attention\")",
                              name, l, cJSON_IsString(t) ? "\"" : "",
                              cJSON_IsString(t) ? t->valuestring : ll_json_type_name(t),
                              cJSON_IsString(t) ? "\"" : "");
    }
    return LL_OK;
}

/* Layers without RoPE (SmolLM3): no_rope_layers, one 0 or 1 a layer (0: no RoPE), else
 * no_rope_layer_interval k (every k-th layer, counting from 1, has none); neither: all turn. */
static enum ll_status get_nope_layers(struct model_config *c, const cJSON *o, const char *name,
                                      struct ll_err *err)
{
    const cJSON *list = ll_json_member(o, "no_rope_layers");
    if (!list || cJSON_IsNull(list)) {
        int k;
        enum ll_status s = get_int(o, "no_rope_layer_interval", false, 1, 1024, 0, &k, name, err);
        for (int l = 0; !s && k && l < c->n_layers; l++)
            if ((l + 1) % k == 0)
                c->nope[l / 64] |= (uint64_t)1 << (l % 64);
        return s;
    }
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != c->n_layers)
        return ll_err_set(err, LL_EMODEL,
                          "%s: no_rope_layers must be a list of num_hidden_layers (%d) entries, "
                          "each 0 or 1",
                          name, c->n_layers);
    int l = 0;
    for (const cJSON *e = list->child; e; e = e->next, l++) {
        long long v;
        if (!ll_json_is_int(e, 0, 1, &v))
            return ll_err_set(err, LL_EMODEL, "%s: no_rope_layers[%d] must be 0 or 1", name, l);
        if (!v)
            c->nope[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return LL_OK;
}

bool model_layer_rope(const struct model_config *c, int layer)
{
    return !(c->nope[layer / 64] >> (layer % 64) & 1);
}

bool model_layer_windowed(const struct model_config *c, int layer)
{
    return c->swa.window > 0 && (c->swa.layers[layer / 64] >> (layer % 64) & 1);
}

static enum ll_status config_fields(struct model_config *c, const struct model_family *fam,
                                    const cJSON *o, const char *name, struct ll_err *err);

/* The fields a family's config.json stands for, into *out (the caller deletes it): the
 * family's defaults, overlaid with config.json's own fields, or with those of its text_config
 * plus the ones a multimodal config keeps at the top (the token ids, quantization_config). */
static enum ll_status family_fields(cJSON **out, const struct model_family *fam, const cJSON *o,
                                    const char *name, struct ll_err *err)
{
    const cJSON *src = o;
    if (fam->text_config) {
        src = ll_json_member(o, "text_config");
        if (!cJSON_IsObject(src))
            return ll_err_set(err, LL_EMODEL, "%s: a %s model needs a 'text_config' object%s%s",
                              name, fam->model_type, src ? ", not " : "",
                              src ? ll_json_type_name(src) : "");
    }
    cJSON *m = NULL;
    if (fam->config_defaults) {
        enum ll_status s = ll_json_parse(&m, fam->config_defaults, strlen(fam->config_defaults),
                                         "the family's defaults", err);
        if (s)
            return s;
    } else if (!(m = cJSON_CreateObject())) {
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", name);
    }
    static const char *const top[] = {"bos_token_id", "eos_token_id", "quantization_config"};
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass == 0 ? src : o;
        if (pass == 1 && from == src)
            break;
        for (const cJSON *f = from->child; f; f = f->next) {
            bool wanted = pass == 0;
            for (size_t k = 0; !wanted && k < sizeof top / sizeof top[0]; k++)
                wanted = !strcmp(f->string, top[k]);
            if (!wanted)
                continue;
            cJSON *dup = cJSON_Duplicate(f, true);
            if (!dup || (cJSON_GetObjectItemCaseSensitive(m, f->string)
                             ? !cJSON_ReplaceItemInObjectCaseSensitive(m, f->string, dup)
                             : !cJSON_AddItemToObject(m, f->string, dup))) {
                cJSON_Delete(dup);
                cJSON_Delete(m);
                return ll_err_set(err, LL_ENOMEM, "%s: out of memory", name);
            }
        }
    }
    *out = m;
    return LL_OK;
}

static enum ll_status config_fill(struct model_config *c, const cJSON *o, const char *name,
                                  struct ll_err *err)
{
    enum ll_status s;
    memset(c, 0, sizeof *c);

    const cJSON *arch = ll_json_member(o, "architectures");
    if (arch) {
        if (!cJSON_IsArray(arch) || (arch->child && !cJSON_IsString(arch->child)))
            return ll_err_set(err, LL_EMODEL, "%s: 'architectures' must be a list of strings",
                              name);
        if (arch->child) {
            if (strlen(arch->child->valuestring) >= sizeof c->architecture)
                return ll_err_set(err, LL_EMODEL, "%s: 'architectures'[0] is too long", name);
            strcpy(c->architecture, arch->child->valuestring);
        }
    }
    const char *mt = NULL;
    if ((s = in_file(ll_json_get_str(o, "model_type", &mt, NULL, err), name, err)))
        return s;
    if (!mt && !c->architecture[0])
        return ll_err_set(err, LL_EMODEL, "%s: missing field 'model_type'", name);
    if (mt) {
        if (strlen(mt) >= sizeof c->model_type)
            return ll_err_set(err, LL_EMODEL, "%s: 'model_type' is too long", name);
        strcpy(c->model_type, mt);
    }

    const struct model_family *fam = mt ? model_registry_find(mt)
                                 : model_registry_find_arch(c->architecture);
    if (fam && (fam->config_defaults || fam->text_config)) {
        cJSON *merged = NULL;
        char where[300];
        snprintf(where, sizeof where, "%s%s", name, fam->text_config ? " (text_config)" : "");
        if ((s = family_fields(&merged, fam, o, name, err)))
            return s;
        s = config_fields(c, fam, merged, where, err);
        cJSON_Delete(merged);
        return s;
    }
    return config_fields(c, fam, o, name, err);
}

/* The decoder's fields of config.json (o), for family fam (NULL: none known). */
static enum ll_status config_fields(struct model_config *c, const struct model_family *fam,
                                    const cJSON *o, const char *name, struct ll_err *err)
{
    enum ll_status s;
    if (fam && fam->weights_prefix)
        snprintf(c->weights_prefix, sizeof c->weights_prefix, "%s", fam->weights_prefix);
    if (fam && fam->no_weights) {
        /* a family without weights sets its own shapes (its bind); only these are read */
        if ((s = get_int(o, "vocab_size", true, 1, 1 << 24, 0, &c->vocab_size, name, err)) ||
            (s = get_int(o, "max_position_embeddings", false, 1, 1 << 30, 32768,
                         &c->max_position, name, err)) ||
            (s = get_token_id(o, "bos_token_id", &c->bos_token_id, name, err)) ||
            (s = get_eos(o, c->eos_ids, &c->n_eos, name, err)))
            return s;
        return LL_OK;
    }

    if ((s = get_int(o, "hidden_size", true, 1, 1 << 16, 0, &c->hidden_size, name, err)) ||
        (s = get_int(o, "intermediate_size", true, 1, 1 << 20, 0, &c->intermediate_size, name,
                     err)) ||
        (s = get_int(o, "num_hidden_layers", true, 1, 1024, 0, &c->n_layers, name, err)) ||
        (s = get_int(o, "num_attention_heads", true, 1, 1024, 0, &c->n_heads, name, err)) ||
        (s = get_int(o, "num_key_value_heads", false, 1, 1024, c->n_heads, &c->n_kv_heads, name,
                     err)) ||
        (s = get_int(o, "head_dim", false, 1, 4096, 0, &c->head_dim, name, err)) ||
        (s = get_int(o, "vocab_size", true, 1, 1 << 24, 0, &c->vocab_size, name, err)) ||
        (s = get_int(o, "max_position_embeddings", false, 1, 1 << 30, 32768, &c->max_position,
                     name, err)))
        return s;
    if (c->n_heads % c->n_kv_heads)
        return ll_err_set(err, LL_EMODEL,
                          "%s: num_attention_heads (%d) is not a multiple of "
                          "num_key_value_heads (%d)",
                          name, c->n_heads, c->n_kv_heads);
    if (!c->head_dim) {
        if (c->hidden_size % c->n_heads)
            return ll_err_set(err, LL_EMODEL,
                              "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d) "
                              "and no head_dim is given",
                              name, c->hidden_size, c->n_heads);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    if (c->head_dim % 2)
        return ll_err_set(err, LL_EMODEL, "%s: head dimension %d is odd (RoPE needs pairs)", name,
                          c->head_dim);

    double theta, eps;
    if ((s = get_num(o, "rope_theta", 0, false, 1e12, 10000.0, &theta, NULL, name, err)) ||
        (s = get_num(o, "rms_norm_eps", 0, false, 1.0, 1e-6, &eps, NULL, name, err)) ||
        (s = get_bool(o, "tie_word_embeddings", false, &c->tie_word_embeddings, NULL, name, err)) ||
        (s = get_token_id(o, "bos_token_id", &c->bos_token_id, name, err)) ||
        (s = get_eos(o, c->eos_ids, &c->n_eos, name, err)))
        return s;
    c->rope_theta = theta;
    c->rms_eps = (float)eps;
    bool bias, has_bias;
    if ((s = get_bool(o, "attention_bias", false, &bias, &has_bias, name, err)))
        return s;
    c->attention_bias = has_bias ? bias : -1;

    /* Features that would change the math: refuse rather than compute something else. */
    if ((s = get_act(c, o, name, err)) || (s = get_gemma_fields(c, o, name, err)) ||
        (s = get_multipliers(c, fam, o, name, err)) ||
        (s = get_rotary_dims(c, o, name, err)) || (s = get_nope_layers(c, o, name, err)) ||
        (s = get_rope_scaling(c, ll_json_member(o, "rope_scaling"), o, name, err)) ||
        (s = get_moe(&c->moe, c, fam, o, name, err)))
        return s;
    bool mlp_bias;
    if ((s = get_bool(o, "mlp_bias", false, &mlp_bias, NULL, name, err)))
        return s;
    if (mlp_bias)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: mlp_bias true is not supported (MLP projections with biases)", name);
    if ((s = fam && fam->window_period ? get_layer_windows(c, fam, o, name, err)
                                        : get_sliding_window(c, fam, o, name, err)))
        return s;
    return quant_fill(c, o, name, err);
}

enum ll_status model_config_parse(struct model_config *cfg, const char *text, size_t len,
                                  const char *name, struct ll_err *err)
{
    cJSON *root = NULL;
    memset(cfg, 0, sizeof *cfg);
    enum ll_status s = json_parse_object(&root, text, len, name, err);
    if (s != LL_OK)
        return s;
    s = config_fill(cfg, root, name, err);
    cJSON_Delete(root);
    return s;
}

enum ll_status model_config_read(struct model_config *cfg, const char *path, struct ll_err *err)
{
    char *text;
    size_t len;
    memset(cfg, 0, sizeof *cfg);
    enum ll_status s = ll_read_file(path, &text, &len, err);
    if (s != LL_OK)
        return s;
    s = model_config_parse(cfg, text, len, path, err);
    free(text);
    return s;
}

static void gen_clear(struct generation_defaults *g)
{
    memset(g, 0, sizeof *g);
    g->bos_token_id = -1;
}

enum ll_status generation_defaults_parse(struct generation_defaults *g, const char *text,
                                         size_t len, const char *name, struct ll_err *err)
{
    gen_clear(g);
    cJSON *o = NULL;
    enum ll_status s = json_parse_object(&o, text, len, name, err);
    if (s != LL_OK)
        return s;
    double temp, top_p, min_p, rep;
    if ((s = get_num(o, "temperature", 0, true, 1e6, 1.0, &temp, &g->has_temperature, name,
                     err)) ||
        (s = get_num(o, "top_p", 0, false, 1.0, 1.0, &top_p, &g->has_top_p, name, err)) ||
        (s = get_num(o, "min_p", 0, true, 1.0, 0.0, &min_p, &g->has_min_p, name, err)) ||
        (s = get_num(o, "repetition_penalty", 0, false, 1e6, 1.0, &rep,
                     &g->has_repetition_penalty, name, err)) ||
        (s = get_bool(o, "do_sample", false, &g->do_sample, &g->has_do_sample, name, err)) ||
        (s = get_token_id(o, "bos_token_id", &g->bos_token_id, name, err)) ||
        (s = get_eos(o, g->eos_ids, &g->n_eos, name, err)))
        goto out;
    g->temperature = (float)temp;
    g->top_p = (float)top_p;
    g->min_p = (float)min_p;
    g->repetition_penalty = (float)rep;
    long long top_k = 0;
    s = in_file(ll_json_get_int(o, "top_k", 0, INT32_MAX, &top_k, &g->has_top_k, err), name, err);
    g->top_k = (int)top_k;
out:
    cJSON_Delete(o);
    if (s != LL_OK)
        gen_clear(g);
    return s;
}

enum ll_status generation_defaults_read(struct generation_defaults *g, const char *path,
                                        struct ll_err *err)
{
    gen_clear(g);
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return LL_OK; /* optional file */
    char *text;
    size_t len;
    enum ll_status s = ll_read_file(path, &text, &len, err);
    if (s != LL_OK)
        return s;
    s = generation_defaults_parse(g, text, len, path, err);
    free(text);
    return s;
}

enum ll_status model_config_merge_eos(struct model_config *cfg, const struct generation_defaults *g,
                                      const char *cfg_name, const char *gen_name,
                                      struct ll_err *err)
{
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] >= cfg->vocab_size)
            return ll_err_set(err, LL_EMODEL,
                              "%s: eos_token_id %d is outside the vocabulary (%d)",
                              cfg_name, cfg->eos_ids[i], cfg->vocab_size);
    if (cfg->bos_token_id >= cfg->vocab_size)
        return ll_err_set(err, LL_EMODEL,
                          "%s: bos_token_id %d is outside the vocabulary (%d)",
                          cfg_name, cfg->bos_token_id, cfg->vocab_size);
    if (g->bos_token_id >= cfg->vocab_size)
        return ll_err_set(err, LL_EMODEL, "%s: bos_token_id %d is outside the vocabulary (%d)",
                          gen_name, g->bos_token_id, cfg->vocab_size);
    for (int i = 0; i < g->n_eos; i++) {
        int id = g->eos_ids[i];
        if (id >= cfg->vocab_size)
            return ll_err_set(err, LL_EMODEL,
                              "%s: eos_token_id %d is outside the vocabulary (%d)", gen_name, id,
                              cfg->vocab_size);
        bool have = false;
        for (int k = 0; k < cfg->n_eos && !have; k++)
            have = cfg->eos_ids[k] == id;
        if (have)
            continue;
        if (cfg->n_eos == LL_MAX_EOS)
            return ll_err_set(err, LL_EMODEL, "%s: more than %d eos ids in all", gen_name,
                              LL_MAX_EOS);
        cfg->eos_ids[cfg->n_eos++] = id;
    }
    return LL_OK;
}
