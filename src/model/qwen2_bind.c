/*
 * qwen2_bind.c: binds the Qwen2 family's weights (Hugging Face names) to a struct qwen2_weights
 * that it allocates into m->weights (qwen2.h).
 *
 * Every tensor is looked up by name and checked against the config before use: dtype BF16, F16
 * or F32 (each tensor may differ; the kernels dispatch per tensor), exact shape. lm_head.weight
 * is optional when tie_word_embeddings is true; then, as in transformers, lm_head is the
 * embedding (a stored lm_head.weight is ignored). A layer tensor numbered past
 * num_hidden_layers means config and weights disagree and is an error. Runs once in
 * model_open(); the tensors point into the safetensors mmaps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen2.h"
#include "safetensors.h"

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* Bind tensor `name` with shape (d0) when d1 == 0, else (d0, d1). */
static enum ll_status bind_one(const struct model *m, struct ll_tensor *out, const char *name,
                               int64_t d0, int64_t d1, struct ll_err *err)
{
    const struct st_tensor *t = st_find(m->st, name);
    if (!t)
        return ll_err_set(err, LL_EMODEL, "%s: missing tensor '%s'", st_path(m->st), name);
    enum ll_dtype dt;
    if (!st_dtype_to_ll(t->dtype, &dt))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: tensor '%s' has dtype %s; weights must be BF16, F16 or F32",
                          t->file, name, st_dtype_name(t->dtype));
    int ndim = d1 ? 2 : 1;
    int64_t want[2] = {d0, d1};
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char got[128], exp[64];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(exp, sizeof exp, ndim, want);
        return ll_err_set(err, LL_EMODEL,
                          "%s: tensor '%s' has shape %s, but config.json implies %s", t->file,
                          name, got, exp);
    }
    out->dtype = dt;
    out->ndim = ndim;
    out->shape[0] = d0;
    out->shape[1] = ndim == 2 ? d1 : 1;
    out->data = t->data;
    return LL_OK;
}

/* Reject "model.layers.N.*" with N >= n_layers: the config and the weights disagree. */
static enum ll_status check_layer_count(const struct model *m, struct ll_err *err)
{
    static const char prefix[] = "model.layers.";
    for (size_t i = 0; i < st_count(m->st); i++) {
        const struct st_tensor *t = st_at(m->st, i);
        if (strncmp(t->name, prefix, sizeof prefix - 1))
            continue;
        char *end;
        long n = strtol(t->name + sizeof prefix - 1, &end, 10);
        if (end != t->name + sizeof prefix - 1 && *end == '.' && n >= m->config.n_layers)
            return ll_err_set(err, LL_EMODEL,
                              "%s: tensor '%s' belongs to layer %ld, but config.json has "
                              "num_hidden_layers %d",
                              t->file, t->name, n, m->config.n_layers);
    }
    return LL_OK;
}

enum ll_status qwen2_bind(struct model *m, struct ll_err *err)
{
    const struct model_config *c = &m->config;
    const int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim,
                  kv = (int64_t)c->n_kv_heads * c->head_dim, ff = c->intermediate_size,
                  v = c->vocab_size;
    enum ll_status s;

    struct qwen2_weights *w = calloc(1, sizeof *w);
    if (!w)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    m->weights = w;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    if ((s = check_layer_count(m, err)) ||
        (s = bind_one(m, &w->embed, "model.embed_tokens.weight", v, h, err)) ||
        (s = bind_one(m, &w->final_norm, "model.norm.weight", h, 0, err)))
        return s;
    if (c->tie_word_embeddings) {
        w->lm_head = w->embed;
    } else if (!st_find(m->st, "lm_head.weight")) {
        return ll_err_set(err, LL_EMODEL,
                          "%s: missing tensor 'lm_head.weight' (config.json has "
                          "tie_word_embeddings false)",
                          st_path(m->st));
    } else if ((s = bind_one(m, &w->lm_head, "lm_head.weight", v, h, err))) {
        return s;
    }

    for (int i = 0; i < c->n_layers; i++) {
        struct qwen2_layer *L = &w->layers[i];
        const struct {
            struct ll_tensor *t;
            const char *suffix;
            int64_t d0, d1;
        } spec[] = {
            {&L->attn_norm, "input_layernorm.weight", h, 0},
            {&L->wq, "self_attn.q_proj.weight", q, h},
            {&L->wk, "self_attn.k_proj.weight", kv, h},
            {&L->wv, "self_attn.v_proj.weight", kv, h},
            {&L->wo, "self_attn.o_proj.weight", h, q},
            {&L->bq, "self_attn.q_proj.bias", q, 0},
            {&L->bk, "self_attn.k_proj.bias", kv, 0},
            {&L->bv, "self_attn.v_proj.bias", kv, 0},
            {&L->mlp_norm, "post_attention_layernorm.weight", h, 0},
            {&L->w_gate, "mlp.gate_proj.weight", ff, h},
            {&L->w_up, "mlp.up_proj.weight", ff, h},
            {&L->w_down, "mlp.down_proj.weight", h, ff},
        };
        for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", i, spec[k].suffix);
            if ((s = bind_one(m, spec[k].t, name, spec[k].d0, spec[k].d1, err)))
                return s;
        }
    }
    m->weight_dtype = w->layers[0].wq.dtype;
    return LL_OK;
}

void qwen2_unbind(struct model *m)
{
    struct qwen2_weights *w = m->weights;
    if (w)
        free(w->layers);
    free(w);
    m->weights = NULL;
}
