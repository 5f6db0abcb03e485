/*
 * qwen2_bind.c: binds the weights (Hugging Face names) of a Qwen2, Qwen3, Llama, Gemma or Phi-3
 * model, or of Qwen2-MoE or Qwen3-MoE, to a struct qwen2_weights that it allocates into m->weights
 * (qwen2.h). They differ only in which per-layer tensors exist: Qwen2 has q/k/v biases; Qwen3 has
 * per-head q/k norms, and the biases only when config.json says attention_bias true; Llama has
 * neither; Gemma 2 and 3 have no biases, four norms a layer (the attention's and the MLP's
 * outputs are normed too, and the MLP's input norm is pre_feedforward_layernorm), Gemma 3 the
 * per-head q/k norms; Phi-3 stores q, k and v as one tensor (self_attn.qkv_proj) and gate and
 * up as another (mlp.gate_up_proj), bound as row ranges of them; the MoE variants (Qwen2's or
 * Qwen3's attention) replace the MLP of their sparse layers (model_layer_sparse) by a router and
 * experts, Qwen2-MoE's with a shared expert and its gate.
 *
 * Every tensor is looked up by name and checked against the config before use (model_bind.h):
 * dtype BF16, F16 or F32 (each tensor may differ; the kernels dispatch per tensor), exact shape;
 * the projections of each layer (the experts' too) and lm_head are linear weights, dense or
 * quantized; a router stays a plain tensor.
 * lm_head.weight is optional when tie_word_embeddings is true; then, as in transformers, lm_head
 * is the embedding (a stored lm_head.weight is ignored), except in a quantized model, which
 * stores lm_head's planes; a headless checkpoint (no "model." in its names) without lm_head and
 * untied, or a *ForSequenceClassification checkpoint without lm_head and untied, is an
 * embedding or ranking model (m->no_lm_head: hidden states only) (the embedding itself stays
 * as stored: it is gathered, not multiplied). A layer tensor numbered past num_hidden_layers
 * means config and weights disagree and is an error. Runs once in model_open(); the tensors
 * point into the safetensors mmaps.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_bind.h"
#include "model_config.h"
#include "qwen2.h"
#include "safetensors.h"

/* The prefix of the decoder's tensor names (layers, embedding, final norm): the family's
 * (a multimodal checkpoint's text model is under "language_model."; usually none), then
 * "model.", which a checkpoint saved from the headless model class (Qwen3-Embedding, gte-Qwen2:
 * "embed_tokens.weight", "layers.0. ...") lacks; set by bind_decoder. lm_head.weight is under
 * the family's prefix alone. */
static const char *P(const struct model *m)
{
    return m->body_prefix;
}

/* Reject "[P]model.layers.N.*" with N >= n_layers: the config and the weights disagree. */
static enum ll_status check_layer_count(const struct model *m, struct ll_err *err)
{
    char prefix[64];
    size_t np = (size_t)snprintf(prefix, sizeof prefix, "%slayers.", P(m));
    for (size_t i = 0; i < st_count(m->st); i++) {
        const struct st_tensor *t = st_at(m->st, i);
        if (strncmp(t->name, prefix, np))
            continue;
        char *end;
        long n = strtol(t->name + np, &end, 10);
        if (end != t->name + np && *end == '.' && n >= m->config.n_layers)
            return ll_err_set(err, LL_EMODEL,
                              "%s: tensor '%s' belongs to layer %ld, but config.json has "
                              "num_hidden_layers %d",
                              t->file, t->name, n, m->config.n_layers);
    }
    return LL_OK;
}

/* Which of the optional per-layer tensors the model has. */
struct layer_kind {
    bool bias;    /* self_attn.{q,k,v}_proj.bias */
    bool qk_norm; /* self_attn.{q,k}_norm.weight */
    bool moe;     /* the sparse layers' mlp.gate + mlp.experts.E.* (config.json's moe) */
    bool shared;  /* with mlp.shared_expert.* and mlp.shared_expert_gate (Qwen2-MoE) */
    bool gemma;   /* the sandwich norms: post_attention_layernorm on the attention's output,
                     pre_ and post_feedforward_layernorm around the MLP; norms of 1 + w, the
                     embedding scaled, lm_head tied */
    bool fused;   /* Phi-3: self_attn.qkv_proj (q, k, v rows) and mlp.gate_up_proj (gate, up
                     rows) in place of the separate projections, bound as their parts; a
                     quantized copy stores the parts under the separate names */
    bool stacked; /* GraniteMoE: block_sparse_moe.router.layer is the router, the experts are
                     stacked in block_sparse_moe.input_linear (E, 2·I, H: each expert's gate
                     rows, then its up rows) and output_linear (E, H, I), bound as their parts;
                     a quantized copy stores them as block_sparse_moe.experts.X.*_proj */
};

/* One part of a fused tensor: n rows, bound as linear weight l named PREFIX.suffix. */
struct part {
    struct model_linear *l;
    const char *suffix;
    enum model_role role;
    int64_t n;
};

/* Bind the parts of fused tensor `name` (k inputs; rows: the sum of the parts' n), in row
 * order. */
static enum ll_status bind_fused(struct model *m, const char *name, const char *prefix, int layer,
                                 int64_t k, const struct part *parts, int n_parts,
                                 struct ll_err *err)
{
    int64_t rows = 0;
    for (int i = 0; i < n_parts; i++)
        rows += parts[i].n;
    struct ll_tensor whole;
    enum ll_status s = model_bind_tensor(m, &whole, name, rows, k, err);
    for (int i = 0, row0 = 0; !s && i < n_parts; row0 += (int)parts[i].n, i++) {
        char part[LL_TENSOR_NAME_MAX];
        snprintf(part, sizeof part, "%s.%s", prefix, parts[i].suffix);
        s = model_bind_linear_part(m, parts[i].l, part, parts[i].role, layer, &whole, name, row0,
                                   parts[i].n, err);
    }
    return s;
}

/* The SwiGLU MLP whose tensors are PREFIX.{gate,up,down}_proj.weight, of width ff (fused:
 * PREFIX.gate_up_proj.weight, its gate rows first). */
static enum ll_status bind_mlp(struct model *m, struct qwen2_mlp *mlp, const char *prefix,
                               int layer, int64_t ff, bool fused, struct ll_err *err)
{
    const int64_t h = m->config.hidden_size;
    char name[LL_TENSOR_NAME_MAX];
    enum ll_status s;
    if (fused) {
        const struct part parts[] = {{&mlp->gate, "gate_proj.weight", MODEL_ROLE_OTHER, ff},
                                     {&mlp->up, "up_proj.weight", MODEL_ROLE_OTHER, ff}};
        snprintf(name, sizeof name, "%s.gate_up_proj.weight", prefix);
        if ((s = bind_fused(m, name, prefix, layer, h, parts, 2, err)))
            return s;
        snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
        return model_bind_linear(m, &mlp->down, name, MODEL_ROLE_MLP_DOWN, layer, h, ff, NULL,
                                 err);
    }
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    if ((s = model_bind_linear(m, &mlp->gate, name, MODEL_ROLE_OTHER, layer, ff, h, NULL, err)))
        return s;
    snprintf(name, sizeof name, "%s.up_proj.weight", prefix);
    if ((s = model_bind_linear(m, &mlp->up, name, MODEL_ROLE_OTHER, layer, ff, h, NULL, err)))
        return s;
    snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
    return model_bind_linear(m, &mlp->down, name, MODEL_ROLE_MLP_DOWN, layer, h, ff, NULL, err);
}

/* GraniteMoE's router and experts of layer i (kind.stacked): the parts of the two stacks, or in
 * a quantized directory the experts' own names. */
static enum ll_status bind_stacked_experts(struct model *m, struct qwen2_moe *e, int i,
                                           struct ll_err *err)
{
    const struct model_config *c = &m->config;
    const int64_t h = c->hidden_size, ff = c->moe.intermediate, E = c->moe.n_experts;
    char prefix[96], name[LL_TENSOR_NAME_MAX], in[LL_TENSOR_NAME_MAX], out[LL_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%slayers.%d.block_sparse_moe.router.layer.weight", P(m),
             i);
    enum ll_status s = model_bind_tensor(m, &e->router, name, E, h, err);
    struct ll_tensor up_all, down_all;
    snprintf(in, sizeof in, "%slayers.%d.block_sparse_moe.input_linear.weight", P(m), i);
    snprintf(out, sizeof out, "%slayers.%d.block_sparse_moe.output_linear.weight", P(m), i);
    if (!s && !c->quantized &&
        !(s = model_bind_stacked(m, &up_all, in, E, 2 * ff, h, err)))
        s = model_bind_stacked(m, &down_all, out, E, h, ff, err);
    for (int x = 0; !s && x < E; x++) {
        snprintf(prefix, sizeof prefix, "%slayers.%d.block_sparse_moe.experts.%d", P(m), i,
                 x);
        struct qwen2_mlp *p = &e->experts[x];
        if (c->quantized) {
            s = bind_mlp(m, p, prefix, i, ff, false, err);
            continue;
        }
        const struct part parts[] = {{&p->gate, "gate_proj.weight", MODEL_ROLE_OTHER, ff},
                                     {&p->up, "up_proj.weight", MODEL_ROLE_OTHER, ff},
                                     {&p->down, "down_proj.weight", MODEL_ROLE_MLP_DOWN, h}};
        for (int k = 0; !s && k < 3; k++) {
            snprintf(name, sizeof name, "%s.%s", prefix, parts[k].suffix);
            s = model_bind_linear_part(m, parts[k].l, name, parts[k].role, i,
                                       k < 2 ? &up_all : &down_all, k < 2 ? in : out,
                                       k < 2 ? x * 2 * ff + k * ff : x * h, parts[k].n, err);
        }
    }
    return s;
}

/* Layer i's MLP: dense (mlp.*_proj), or, in a sparse layer, the router and the experts. */
static enum ll_status bind_layer_mlp(struct model *m, struct qwen2_layer *L, int i,
                                     struct layer_kind kind, struct ll_err *err)
{
    const struct model_config *c = &m->config;
    char prefix[96], name[LL_TENSOR_NAME_MAX];
    enum ll_status s;
    if (!model_layer_sparse(c, i)) {
        snprintf(name, sizeof name, "%slayers.%d.mlp.gate.weight", P(m), i);
        if (st_find(m->st, name))
            return ll_err_set(err, LL_EMODEL,
                              "%s: tensor '%s' is a router, but config.json makes layer %d a "
                              "dense one (mlp_only_layers, decoder_sparse_step)",
                              st_path(m->st), name, i);
        snprintf(prefix, sizeof prefix, "%slayers.%d.mlp", P(m), i);
        return bind_mlp(m, &L->mlp, prefix, i, c->intermediate_size,
                        kind.fused && !c->quantized, err);
    }
    const struct model_moe *mc = &c->moe;
    struct qwen2_moe *e = calloc(1, sizeof *e);
    if (e)
        e->experts = calloc((size_t)mc->n_experts, sizeof *e->experts);
    L->moe = e;
    if (!e || !e->experts)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    if (kind.stacked)
        return bind_stacked_experts(m, e, i, err);
    snprintf(name, sizeof name, "%slayers.%d.mlp.gate.weight", P(m), i);
    if ((s = model_bind_tensor(m, &e->router, name, mc->n_experts, c->hidden_size, err)))
        return s;
    for (int x = 0; x < mc->n_experts; x++) {
        snprintf(prefix, sizeof prefix, "%slayers.%d.mlp.experts.%d", P(m), i, x);
        if ((s = bind_mlp(m, &e->experts[x], prefix, i, mc->intermediate, false, err)))
            return s;
    }
    snprintf(name, sizeof name, "%slayers.%d.mlp.shared_expert_gate.weight", P(m), i);
    if (!kind.shared) {
        if (st_find(m->st, name))
            return ll_err_set(err, LL_EMODEL, "%s: tensor '%s' is not part of a %s model",
                              st_path(m->st), name, c->model_type);
        return LL_OK;
    }
    if ((s = model_bind_tensor(m, &e->shared_gate, name, 1, c->hidden_size, err)))
        return s;
    snprintf(prefix, sizeof prefix, "%slayers.%d.mlp.shared_expert", P(m), i);
    return bind_mlp(m, &e->shared, prefix, i, mc->shared_intermediate, false, err);
}

/* buf = the prefix + name */
static const char *named(char *buf, size_t size, const struct model *m, const char *name)
{
    snprintf(buf, size, "%s%s", P(m), name);
    return buf;
}

static enum ll_status bind_decoder(struct model *m, struct layer_kind kind, struct ll_err *err)
{
    char emb[LL_TENSOR_NAME_MAX], fin[LL_TENSOR_NAME_MAX], head[LL_TENSOR_NAME_MAX];
    const struct model_config *c = &m->config;
    const int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim,
                  kv = (int64_t)c->n_kv_heads * c->head_dim, v = c->vocab_size;
    enum ll_status s;
    if (kind.moe && !c->moe.n_experts)
        return ll_err_set(err, LL_EMODEL, "%s/config.json: missing field 'num_experts' (a %s "
                          "model has experts)", m->dir, c->model_type);
    if (!kind.moe && c->moe.n_experts)
        return ll_err_set(err, LL_EMODEL,
                          "%s/config.json: num_experts %d describes a mixture-of-experts model, "
                          "but model_type %s has no experts",
                          m->dir, c->moe.n_experts, c->model_type);
    if (kind.shared && !c->moe.shared_intermediate)
        return ll_err_set(err, LL_EMODEL, "%s/config.json: missing field "
                          "'shared_expert_intermediate_size' (a %s model has a shared expert)",
                          m->dir, c->model_type);

    struct qwen2_weights *w = calloc(1, sizeof *w);
    if (!w)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    m->weights = w;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    snprintf(m->body_prefix, sizeof m->body_prefix, "%smodel.", c->weights_prefix);
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", c->weights_prefix);
    if (!st_find(m->st, named(fin, sizeof fin, m, "embed_tokens.weight")) && st_find(m->st, emb))
        snprintf(m->body_prefix, sizeof m->body_prefix, "%s", c->weights_prefix); /* headless */
    if ((s = check_layer_count(m, err)) ||
        (s = model_bind_tensor(m, &w->embed, named(emb, sizeof emb, m, "embed_tokens.weight"),
                               v, h, err)) ||
        (s = model_bind_tensor(m, &w->final_norm, named(fin, sizeof fin, m, "norm.weight"), h,
                               0, err)))
        return s;
    snprintf(head, sizeof head, "%slm_head.weight", c->weights_prefix);
    char planes[LL_TENSOR_NAME_MAX + 4];
    snprintf(planes, sizeof planes, "%s.qs", head);
    if (!c->tie_word_embeddings && !st_find(m->st, head) && !st_find(m->st, planes)) {
        /* untied and no lm_head: the headless model class's checkpoint of an embedding model
         * (Qwen3-Embedding-8B), or a sequence-classification checkpoint (its head is
         * score.weight: reranker.h): its hidden states only */
        bool headless = !strcmp(m->body_prefix, c->weights_prefix);
        const char *cls = strstr(c->architecture, "ForSequenceClassification");
        if (!headless && !(cls && !cls[strlen("ForSequenceClassification")]))
            return ll_err_set(err, LL_EMODEL,
                              "%s: missing tensor '%s' (config.json has tie_word_embeddings "
                              "false)",
                              st_path(m->st), head);
        m->no_lm_head = true;
    } else if ((s = model_bind_linear(m, &w->lm_head, head, MODEL_ROLE_LM_HEAD, -1, v, h,
                                      c->tie_word_embeddings ? &w->embed : NULL, err))) {
        return s;
    }

    const bool fused = kind.fused && !c->quantized;
    for (int i = 0; i < c->n_layers; i++) {
        struct qwen2_layer *L = &w->layers[i];
        if (fused) {
            char prefix[96], name[LL_TENSOR_NAME_MAX];
            snprintf(prefix, sizeof prefix, "%slayers.%d.self_attn", P(m), i);
            snprintf(name, sizeof name, "%s.qkv_proj.weight", prefix);
            const struct part parts[] = {{&L->wq, "q_proj.weight", MODEL_ROLE_OTHER, q},
                                         {&L->wk, "k_proj.weight", MODEL_ROLE_OTHER, kv},
                                         {&L->wv, "v_proj.weight", MODEL_ROLE_ATTN_V, kv}};
            if ((s = bind_fused(m, name, prefix, i, h, parts, 3, err)))
                return s;
        }
        const struct {
            struct ll_tensor *t;       /* a plain tensor, or */
            struct model_linear *lin;  /* a linear weight */
            enum model_role role;      /* the linear weight's */
            const char *suffix;
            int64_t d0, d1;
            bool present;              /* the model has it (kind) */
        } spec[] = {
            {&L->attn_norm, NULL, 0, "input_layernorm.weight", h, 0, true},
            {NULL, &L->wq, MODEL_ROLE_OTHER, "self_attn.q_proj.weight", q, h, !fused},
            {NULL, &L->wk, MODEL_ROLE_OTHER, "self_attn.k_proj.weight", kv, h, !fused},
            {NULL, &L->wv, MODEL_ROLE_ATTN_V, "self_attn.v_proj.weight", kv, h, !fused},
            {NULL, &L->wo, MODEL_ROLE_OTHER, "self_attn.o_proj.weight", h, q, true},
            {&L->bq, NULL, 0, "self_attn.q_proj.bias", q, 0, kind.bias},
            {&L->bk, NULL, 0, "self_attn.k_proj.bias", kv, 0, kind.bias},
            {&L->bv, NULL, 0, "self_attn.v_proj.bias", kv, 0, kind.bias},
            {&L->q_norm, NULL, 0, "self_attn.q_norm.weight", c->head_dim, 0, kind.qk_norm},
            {&L->k_norm, NULL, 0, "self_attn.k_norm.weight", c->head_dim, 0, kind.qk_norm},
            {kind.gemma ? &L->post_attn_norm : &L->mlp_norm, NULL, 0,
             "post_attention_layernorm.weight", h, 0, true},
            {&L->mlp_norm, NULL, 0, "pre_feedforward_layernorm.weight", h, 0, kind.gemma},
            {&L->post_mlp_norm, NULL, 0, "post_feedforward_layernorm.weight", h, 0, kind.gemma},
        };
        for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
            char name[LL_TENSOR_NAME_MAX];
            if (!spec[k].present) {
                /* a tensor this kind of model does not have must not be in the file either:
                 * it would mean the config describes another model than the weights */
                snprintf(name, sizeof name, "%slayers.%d.%s", P(m), i, spec[k].suffix);
                if (st_find(m->st, name))
                    return ll_err_set(err, LL_EMODEL,
                                      "%s: tensor '%s' is not part of a %s model%s",
                                      st_path(m->st), name, c->model_type,
                                      strstr(spec[k].suffix, ".bias")
                                          ? " (config.json does not set attention_bias true)"
                                          : "");
                continue;
            }
            snprintf(name, sizeof name, "%slayers.%d.%s", P(m), i, spec[k].suffix);
            s = spec[k].t ? model_bind_tensor(m, spec[k].t, name, spec[k].d0, spec[k].d1, err)
                          : model_bind_linear(m, spec[k].lin, name, spec[k].role, i, spec[k].d0,
                                              spec[k].d1, NULL, err);
            if (s)
                return s;
        }
        if ((s = bind_layer_mlp(m, L, i, kind, err)))
            return s;
    }
    m->weight_dtype = c->quantized ? w->embed.dtype : w->layers[0].wq.dense.dtype;
    if (kind.gemma) {
        w->embed_scale = sqrtf((float)c->hidden_size);
        w->norm_plus_one = true;
    } else {
        w->embed_scale = (float)c->embed_mult; /* Granite's embedding_multiplier, or 0 */
    }
    return LL_OK;
}

enum ll_status qwen2_bind(struct model *m, struct ll_err *err)
{
    /* transformers' Qwen2 always has the biases, whatever attention_bias says */
    return bind_decoder(m, (struct layer_kind){.bias = true, .qk_norm = false}, err);
}

enum ll_status qwen3_bind(struct model *m, struct ll_err *err)
{
    return bind_decoder(m, (struct layer_kind){.bias = m->config.attention_bias == 1,
                                               .qk_norm = true},
                        err);
}

enum ll_status llama_bind(struct model *m, struct ll_err *err)
{
    /* transformers' Llama puts attention_bias on o_proj as well, which this decoder lacks */
    if (m->config.attention_bias == 1)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s/config.json: attention_bias true is not supported for a llama "
                          "model (biases on q/k/v/o projections)",
                          m->dir);
    return bind_decoder(m, (struct layer_kind){.bias = false, .qk_norm = false}, err);
}

/* Phi-3 (Phi-3-mini, Phi-3.5-mini, Phi-4-mini): Llama's layer from fused projections */
enum ll_status phi3_bind(struct model *m, struct ll_err *err)
{
    if (m->config.attention_bias == 1)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s/config.json: attention_bias true is not supported for a phi3 model",
                          m->dir);
    return bind_decoder(m, (struct layer_kind){.fused = true}, err);
}

/* GraniteMoE: Granite's layer (Llama's; the multipliers are config's) with stacked experts */
enum ll_status granitemoe_bind(struct model *m, struct ll_err *err)
{
    if (m->config.attention_bias == 1)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s/config.json: attention_bias true is not supported for a granitemoe "
                          "model", m->dir);
    return bind_decoder(m, (struct layer_kind){.moe = true, .stacked = true}, err);
}

enum ll_status qwen2_moe_bind(struct model *m, struct ll_err *err)
{
    return bind_decoder(m, (struct layer_kind){.bias = true, .moe = true, .shared = true}, err);
}

enum ll_status qwen3_moe_bind(struct model *m, struct ll_err *err)
{
    return bind_decoder(m, (struct layer_kind){.bias = m->config.attention_bias == 1,
                                               .qk_norm = true, .moe = true},
                        err);
}

/* Gemma's lm_head is the embedding unless config.json says otherwise (its families' defaults,
 * model_registry.c, make tie_word_embeddings true where the published configs leave it out). */
static enum ll_status gemma_bind(struct model *m, bool qk_norm, struct ll_err *err)
{
    if (m->config.attention_bias == 1)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s/config.json: attention_bias true is not supported for a %s model",
                          m->dir, m->config.model_type);
    return bind_decoder(m, (struct layer_kind){.qk_norm = qk_norm, .gemma = true}, err);
}

enum ll_status gemma2_bind(struct model *m, struct ll_err *err)
{
    return gemma_bind(m, false, err);
}

enum ll_status gemma3_bind(struct model *m, struct ll_err *err)
{
    return gemma_bind(m, true, err);
}

void qwen2_unbind(struct model *m)
{
    struct qwen2_weights *w = m->weights;
    for (int i = 0; w && w->layers && i < m->config.n_layers; i++)
        if (w->layers[i].moe) {
            free(w->layers[i].moe->experts);
            free(w->layers[i].moe);
        }
    if (w)
        free(w->layers);
    free(w);
    m->weights = NULL;
}
