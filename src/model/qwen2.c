/*
 * qwen2.c: the forward pass of Qwen2, Qwen3, Llama, Gemma 2 and 3 and the MoE variants over a
 * flat batch (see qwen2.h, runtime.h).
 *
 * Owns, per runtime: the pool, the KV cache (runtime.h), RoPE tables sized by n_ctx (Gemma 3's
 * windowed layers have a second), the q/k/v biases widened to f32 (when the model has them), the
 * norm weights as the steps read them (Gemma's as f32 1 + w), and one scratch allocation carved
 * into the matmul scratch and the activation buffers of a max_batch step. qwen2_forward() allocates
 * nothing. Each linear layer, lm_head included, runs ll_qmatmul when its weight is quantized,
 * else ll_matmul; both keep a row's result independent of the batch and the thread count.
 *
 * Called by the thread that owns the runtime; the matmuls, attention and the row-wise steps run
 * on the pool (one ll_pool_run per op, rows split by (ith, nth)). Every row-wise step computes a
 * row the same way wherever it sits, the matmul contract gives the same guarantee, and attention
 * reads K/V only from the cache after this step's K/V are written: a token's logits are the same
 * bits in a prefill batch, a chunk or a decode step.
 *
 * A sparse layer (experts()) routes its rows (moe_route.h), runs each expert's MLP over the
 * rows routed to it (gathered into xe), and adds each row's weighted output to tmp, expert by
 * expert in increasing order: the matmul contract and that order keep a row's bits independent
 * of the other rows.
 *
 * The last layer only needs the rows that want an output after its attention (the K/V it writes
 * come from its input), so those rows are gathered there and o/MLP/norm/lm_head run on them alone;
 * a row that wants its hidden state (LL_WANT_HIDDEN) takes it after the final norm and skips
 * lm_head.
 */
#include "qwen2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "model_config.h"
#include "moe_route.h"
#include "ops.h"
#include "qmatmul.h"
#include "util.h"

/* The norm weights of one layer as the steps read them: the weights' own tensors, or (Gemma)
 * f32 copies of 1 + w. A norm the model lacks has data NULL. */
struct layer_norms {
    struct ll_tensor attn, mlp, q, k, post_attn, post_mlp;
};

struct qwen2_runtime {
    struct model_runtime base; /* first: qwen2_* cast between the two */
    struct ll_rope rope;
    struct ll_rope rope_local; /* Gemma 3's windowed layers (config swa.rope_theta); else unused */
    struct layer_norms *norms; /* (n_layers + 1): the last entry's attn is the final norm */
    float *norm_f32; /* the 1 + w copies that norms point into (Gemma); NULL otherwise */
    float embed_scale; /* the weights' (0: none) */
    float res_mult;    /* config residual_mult (0: none) */
    enum model_act act;
    int hidden, n_heads, n_kv, head_dim, inter, vocab, qdim, kvdim;
    int ff_max;     /* the widest MLP: intermediate_size, or an expert's or the shared one's */
    float *bias;    /* (n_layers, qdim + 2·kvdim) bq | bk | bv widened to f32; NULL when the
                       model has no biases (Qwen3 without attention_bias) */
    int32_t *table; /* (n_slots / block_size) identity block table of the default sequence */
    struct ll_kv_seq seq0;
    /* scratch, carved from mem */
    void *mem;
    void *mm;       /* (mm_bytes) the scratch of ll_matmul (fast math) and of ll_qmatmul
                       (quantized weights) for max_batch rows of the widest K: the larger of
                       the two; first in mem, so 64-byte aligned; NULL when neither needs one */
    size_t mm_bytes;
    float *x;       /* (max_batch, hidden) residual stream */
    float *xn;      /* (max_batch, hidden) normed input of the next matmul */
    float *tmp;     /* (max_batch, hidden) o / down projection output */
    float *q, *att; /* (max_batch, qdim) */
    float *k, *v;   /* (max_batch, kvdim) */
    float *gate, *up; /* (max_batch, ff_max) */
    /* mixture of experts (NULL in a dense model) */
    float *xe, *ye; /* (max_batch, hidden) one expert's gathered inputs, its outputs */
    float *rlog;    /* (max_batch, n_experts) router logits */
    float *rw;      /* (max_batch · n_experts_used) routing weights, grouped by expert */
    float *sgate;   /* (max_batch) the shared expert's gate logits */
    int32_t *roff, *rtok, *rsel; /* (n_experts + 1), (max_batch · n_experts_used) x2: the
                                    routing (moe_route.h) */
    float *scores;  /* (n_threads, n_heads / n_kv_heads, n_ctx) attention scratch */
    int32_t *slot;  /* (max_batch) resolved KV slot of each row */
    int32_t *seqi;  /* (max_batch) resolved sequence index of each row */
    int32_t *rows;  /* (max_batch) rows that want logits, ascending */
};

/* ---- row-wise steps on the pool ---- */

enum step_op {
    STEP_NORM,     /* [Gemma, Granite: x *= embed_scale]; xn = rms_norm(x, w) */
    STEP_ROPE_KV,  /* [Qwen3: per-head rms_norm(q), rms_norm(k)], rope(q), rope(k) (not in a
                      SmolLM3 layer without RoPE),
                      cache ← k, v */
    STEP_ADD_NORM, /* [Granite: tmp *= res_mult]; x += tmp; xn = rms_norm(x, w) */
    STEP_NORM_ADD_NORM, /* Gemma: tmp = rms_norm(tmp, w[0]); x += tmp; xn = rms_norm(x, w[1]) */
    STEP_GLU,      /* gate = act(gate) · up, rows of dim (SwiGLU, or Gemma's GeGLU) */
    STEP_LOGITS,   /* rows of dim: [Granite: out /= div]; [Gemma 2: out = cap · tanh(out / cap)] */
    STEP_MOE_GATHER, /* xe[j] = xn[rtok[first + j]]: one expert's input rows */
    STEP_MOE_ADD,  /* tmp[rtok[first + j]] += rw[first + j] · ye[j]: its weighted outputs */
    STEP_SHARED_ADD, /* tmp += sigmoid(sgate) · ye: the shared expert's */
};

struct step {
    struct qwen2_runtime *r;
    enum step_op op;
    int n;                     /* rows */
    int layer;
    const struct ll_tensor *w; /* norm weight; for STEP_ROPE_KV the layer's q_norm, k_norm
                                  (w[0], w[1]; data NULL: none) */
    const int32_t *pos;        /* (n) for STEP_ROPE_KV */
    int dim;                   /* STEP_GLU, STEP_LOGITS: the row width */
    int first;                 /* STEP_MOE_*: the expert's first pair in the routing */
    const struct ll_rope *rope; /* STEP_ROPE_KV: the layer's table (NULL: none) */
    float *out;                /* STEP_LOGITS: the rows */
    float div, cap;            /* STEP_LOGITS: 0: none */
};

static void step_worker(void *ctx, int ith, int nth)
{
    const struct step *s = ctx;
    struct qwen2_runtime *r = s->r;
    float eps = r->base.model->config.rms_eps;
    int lo, hi;
    if (s->op == STEP_GLU) {
        /* Split elements in 16-aligned pieces (a row of one token is worth splitting). */
        int total = s->n * s->dim, chunks = (total + 15) / 16;
        ll_split(chunks, ith, nth, &lo, &hi);
        lo *= 16;
        hi = hi * 16 < total ? hi * 16 : total;
        if (hi > lo && r->act == MODEL_ACT_GELU_TANH)
            ll_geglu(r->gate + lo, r->gate + lo, r->up + lo, hi - lo);
        else if (hi > lo)
            ll_swiglu(r->gate + lo, r->gate + lo, r->up + lo, hi - lo);
        return;
    }
    ll_split(s->n, ith, nth, &lo, &hi);
    if (hi <= lo)
        return;
    size_t h = (size_t)r->hidden;
    switch (s->op) {
    case STEP_NORM:
        if (r->embed_scale)
            for (size_t i = lo * h; i < hi * h; i++)
                r->x[i] *= r->embed_scale;
        ll_rms_norm(r->xn + lo * h, r->x + lo * h, s->w->data, s->w->dtype, hi - lo, r->hidden,
                    eps);
        break;
    case STEP_NORM_ADD_NORM:
        ll_rms_norm(r->tmp + lo * h, r->tmp + lo * h, s->w[0].data, s->w[0].dtype, hi - lo,
                    r->hidden, eps);
        ll_add(r->x + lo * h, r->x + lo * h, r->tmp + lo * h, (hi - lo) * r->hidden);
        ll_rms_norm(r->xn + lo * h, r->x + lo * h, s->w[1].data, s->w[1].dtype, hi - lo,
                    r->hidden, eps);
        break;
    case STEP_LOGITS:
        for (size_t i = (size_t)lo * s->dim; s->div && i < (size_t)hi * s->dim; i++)
            s->out[i] /= s->div;
        for (size_t i = (size_t)lo * s->dim; s->cap && i < (size_t)hi * s->dim; i++)
            s->out[i] = s->cap * tanhf(s->out[i] / s->cap);
        break;
    case STEP_ADD_NORM:
        for (size_t i = lo * h; r->res_mult && i < hi * h; i++)
            r->tmp[i] *= r->res_mult;
        ll_add(r->x + lo * h, r->x + lo * h, r->tmp + lo * h, (hi - lo) * r->hidden);
        ll_rms_norm(r->xn + lo * h, r->x + lo * h, s->w->data, s->w->dtype, hi - lo, r->hidden,
                    eps);
        break;
    case STEP_ROPE_KV:
        if (s->w[0].data) { /* each head of a row is a row of head_dim for the norm */
            ll_rms_norm(r->q + (size_t)lo * r->qdim, r->q + (size_t)lo * r->qdim, s->w[0].data,
                        s->w[0].dtype, (hi - lo) * r->n_heads, r->head_dim, eps);
            ll_rms_norm(r->k + (size_t)lo * r->kvdim, r->k + (size_t)lo * r->kvdim, s->w[1].data,
                        s->w[1].dtype, (hi - lo) * r->n_kv, r->head_dim, eps);
        }
        if (s->rope) { /* NULL: a layer without RoPE (SmolLM3's) */
            ll_rope_apply(r->q + (size_t)lo * r->qdim, s->rope, s->pos + lo, hi - lo, r->n_heads);
            ll_rope_apply(r->k + (size_t)lo * r->kvdim, s->rope, s->pos + lo, hi - lo, r->n_kv);
        }
        ll_kv_cache_write(&r->base.kv, s->layer, r->slot + lo, r->k + (size_t)lo * r->kvdim,
                          r->v + (size_t)lo * r->kvdim, hi - lo);
        break;
    case STEP_MOE_GATHER:
        for (int j = lo; j < hi; j++)
            memcpy(r->xe + j * h, r->xn + (size_t)r->rtok[s->first + j] * h, sizeof(float) * h);
        break;
    case STEP_MOE_ADD:
        for (int j = lo; j < hi; j++) {
            float *t = r->tmp + (size_t)r->rtok[s->first + j] * h, wj = r->rw[s->first + j];
            const float *y = r->ye + j * h;
            for (size_t i = 0; i < h; i++)
                t[i] += wj * y[i];
        }
        break;
    case STEP_SHARED_ADD:
        for (int j = lo; j < hi; j++) {
            float *t = r->tmp + j * h, g = 1.0f / (1.0f + expf(-r->sgate[j]));
            const float *y = r->ye + j * h;
            for (size_t i = 0; i < h; i++)
                t[i] += g * y[i];
        }
        break;
    case STEP_GLU:
        break;
    }
}

static void run_step(struct qwen2_runtime *r, enum step_op op, int n, int layer,
                     const struct ll_tensor *w, const int32_t *pos)
{
    struct step s = {.r = r, .op = op, .n = n, .layer = layer, .w = w, .pos = pos};
    const struct model_config *c = &r->base.model->config;
    if (op == STEP_ROPE_KV)
        s.rope = !model_layer_rope(c, layer)                              ? NULL
                 : model_layer_windowed(c, layer) && c->swa.rope_theta > 0 ? &r->rope_local
                                                                           : &r->rope;
    ll_pool_run(r->base.pool, step_worker, &s);
}

/* The residual add after a sub-layer whose output is in tmp, then the norm w of the next one:
 * with Gemma's output norm `post` (data set) first on tmp. */
static void run_add_norm(struct qwen2_runtime *r, int n, const struct ll_tensor *post,
                         const struct ll_tensor *w)
{
    if (!post->data) {
        run_step(r, STEP_ADD_NORM, n, 0, w, NULL);
        return;
    }
    const struct ll_tensor pair[2] = {*post, *w};
    run_step(r, STEP_NORM_ADD_NORM, n, 0, pair, NULL);
}

/* A step of the MLPs: SwiGLU over n rows of dim, or an expert's gather / add over its n rows
 * from pair `first` of the routing. */
static void run_mlp_step(struct qwen2_runtime *r, enum step_op op, int n, int dim, int first)
{
    struct step s = {.r = r, .op = op, .n = n, .dim = dim, .first = first};
    ll_pool_run(r->base.pool, step_worker, &s);
}

/* ---- creation ---- */

void qwen2_runtime_free(struct model_runtime *rt)
{
    struct qwen2_runtime *r = (struct qwen2_runtime *)rt;
    if (!r)
        return;
    ll_pool_free(r->base.pool);
    ll_kv_cache_free(&r->base.kv);
    ll_rope_free(&r->rope);
    ll_rope_free(&r->rope_local);
    free(r->norms);
    free(r->norm_f32);
    free(r->bias);
    free(r->table);
    free(r->mem);
    free(r);
}

/* Widen a 1-D tensor of n elements to f32. */
static void widen(float *out, const struct ll_tensor *t, int n)
{
    for (int i = 0; i < n; i++) {
        switch (t->dtype) {
        case LL_F32:
            out[i] = ((const float *)t->data)[i];
            break;
        case LL_BF16:
            out[i] = ll_bf16_to_f32(((const uint16_t *)t->data)[i]);
            break;
        case LL_F16:
            out[i] = ll_f16_to_f32(((const uint16_t *)t->data)[i]);
            break;
        }
    }
}

/* A norm as the steps read it: t itself, or (plus_one) 1 + t widened to f32 at *buf, which
 * advances. */
static struct ll_tensor norm_view(const struct ll_tensor *t, bool plus_one, float **buf)
{
    if (!plus_one || !t->data)
        return *t;
    int n = (int)t->shape[0];
    widen(*buf, t, n);
    for (int i = 0; i < n; i++)
        (*buf)[i] += 1.0f;
    struct ll_tensor v = {LL_F32, 1, {n, 1}, *buf};
    *buf += n;
    return v;
}

/* r->norms from the weights: their tensors, or Gemma's 1 + w copies. */
static enum ll_status norms_init(struct qwen2_runtime *r, const struct model *m,
                                 struct ll_err *err)
{
    const struct qwen2_weights *W = m->weights;
    const int nl = m->config.n_layers;
    r->norms = calloc((size_t)nl + 1, sizeof *r->norms);
    if (W->norm_plus_one)
        r->norm_f32 = malloc(sizeof(float) * ((size_t)nl * (4 * (size_t)r->hidden +
                                                             2 * (size_t)r->head_dim) +
                                              (size_t)r->hidden));
    if (!r->norms || (W->norm_plus_one && !r->norm_f32))
        return ll_err_set(err, LL_ENOMEM, "runtime: out of memory");
    float *buf = r->norm_f32;
    bool p1 = W->norm_plus_one;
    for (int l = 0; l < nl; l++) {
        const struct qwen2_layer *L = &W->layers[l];
        struct layer_norms *n = &r->norms[l];
        n->attn = norm_view(&L->attn_norm, p1, &buf);
        n->mlp = norm_view(&L->mlp_norm, p1, &buf);
        n->q = norm_view(&L->q_norm, p1, &buf);
        n->k = norm_view(&L->k_norm, p1, &buf);
        n->post_attn = norm_view(&L->post_attn_norm, p1, &buf);
        n->post_mlp = norm_view(&L->post_mlp_norm, p1, &buf);
    }
    r->norms[nl].attn = norm_view(&W->final_norm, p1, &buf);
    return LL_OK;
}

enum ll_status qwen2_runtime_create(struct model_runtime **out, const struct model *m,
                                    const struct runtime_opts *opts, struct ll_err *err)
{
    *out = NULL;
    const struct model_config *c = &m->config;
    struct runtime_opts o = *opts;
    runtime_opts_resolve(&o);
    if (o.n_ctx < 1 || o.max_batch < 1 || o.n_threads < 1 || o.n_threads > 256 ||
        o.block_size < 1 || o.n_slots % o.block_size)
        return ll_err_set(err, LL_EINVAL,
                          "runtime: bad options (ctx %d, slots %d, block size %d, batch %d, "
                          "threads %d)", o.n_ctx, o.n_slots, o.block_size, o.max_batch,
                          o.n_threads);
    if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->head_dim % 2 ||
        c->n_heads / c->n_kv_heads > LL_ATTN_MAX_GROUP)
        return ll_err_set(err, LL_EMODEL, "config.json: %d attention heads, %d KV heads, "
                          "head_dim %d: unsupported", c->n_heads, c->n_kv_heads, c->head_dim);

    struct qwen2_runtime *r = calloc(1, sizeof *r);
    if (!r)
        return ll_err_set(err, LL_ENOMEM, "runtime: out of memory");
    r->base.model = m;
    r->base.opts = o;
    r->hidden = c->hidden_size;
    r->n_heads = c->n_heads;
    r->n_kv = c->n_kv_heads;
    r->head_dim = c->head_dim;
    r->inter = c->intermediate_size;
    const struct model_moe *mc = &c->moe;
    r->ff_max = r->inter > mc->intermediate ? r->inter : mc->intermediate;
    r->ff_max = r->ff_max > mc->shared_intermediate ? r->ff_max : mc->shared_intermediate;
    r->vocab = c->vocab_size;
    r->qdim = c->n_heads * c->head_dim;
    r->kvdim = c->n_kv_heads * c->head_dim;

    double *inv_freq = malloc(sizeof(double) * (size_t)(c->head_dim / 2));
    if (!inv_freq) {
        qwen2_runtime_free(&r->base);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    double scale = model_rope_inv_freq(c, o.n_ctx, inv_freq);
    if (c->rope_scaling.kind == MODEL_ROPE_LONGROPE) { /* the choice changes every answer */
        const bool longer = o.n_ctx > c->rope_scaling.original_max_position;
        log_msg(LOG_INFO, "%s: longrope's %s factors: a context of %d positions %s the original %d",
                m->dir, longer ? "long" : "short", o.n_ctx, longer ? "is longer than" : "fits",
                c->rope_scaling.original_max_position);
    }
    enum ll_status s =
        ll_rope_init(&r->rope, c->head_dim, c->rope_dim, o.n_ctx, inv_freq, scale, err);
    if (!s && c->swa.window && c->swa.rope_theta > 0) {
        model_rope_local_inv_freq(c, inv_freq);
        s = ll_rope_init(&r->rope_local, c->head_dim, c->rope_dim, o.n_ctx, inv_freq, 1.0, err);
    }
    free(inv_freq);
    r->embed_scale = ((const struct qwen2_weights *)m->weights)->embed_scale;
    r->res_mult = (float)c->residual_mult;
    r->act = c->act;
    if (s || (s = norms_init(r, m, err)) || (s = ll_pool_create(&r->base.pool, o.n_threads, err)) ||
        (s = ll_kv_cache_init(&r->base.kv, o.math == LL_MATH_EXACT ? LL_F32 : LL_BF16,
                               c->n_layers, o.n_slots, c->n_kv_heads, c->head_dim, err))) {
        qwen2_runtime_free(&r->base);
        return s;
    }

    int nblk = o.n_slots / o.block_size;
    r->table = malloc(sizeof(int32_t) * nblk);
    size_t per_layer = (size_t)r->qdim + 2 * (size_t)r->kvdim;
    const struct qwen2_weights *W = m->weights;
    bool has_bias = W->layers[0].bq.data != NULL; /* the bind gives all layers or none */
    r->bias = has_bias ? malloc(sizeof(float) * per_layer * c->n_layers) : NULL;
    size_t B = (size_t)o.max_batch;
    size_t att_floats = ll_attention_scratch_floats(o.n_threads, c->n_heads, c->n_kv_heads,
                                                    o.n_ctx);
    size_t moe_k = (size_t)mc->n_experts_used; /* routed pairs a token */
    size_t moe_floats = mc->n_experts ? B * (2 * (size_t)r->hidden + (size_t)mc->n_experts +
                                             moe_k + 1)
                                      : 0;
    size_t moe_ints = mc->n_experts ? (size_t)mc->n_experts + 1 + 2 * B * moe_k : 0;
    size_t floats = B * (3 * (size_t)r->hidden + 2 * (size_t)r->qdim + 2 * (size_t)r->kvdim +
                         2 * (size_t)r->ff_max) +
                    att_floats + moe_floats;
    int widest_k = r->hidden > r->qdim ? r->hidden : r->qdim;
    widest_k = r->ff_max > widest_k ? r->ff_max : widest_k;
    /* one scratch serves both GEMMs (never in use at once): the larger of what each needs */
    size_t mm_dense =
        o.math == LL_MATH_FAST ? ll_matmul_scratch_bytes(o.max_batch, widest_k, o.n_threads) : 0;
    size_t mm_quant = m->quantized ? ll_qmatmul_scratch_bytes(o.max_batch, widest_k) : 0;
    r->mm_bytes = mm_dense > mm_quant ? mm_dense : mm_quant;
    size_t bytes = r->mm_bytes + floats * sizeof(float) + (3 * B + moe_ints) * sizeof(int32_t);
    r->mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!r->table || (has_bias && !r->bias) || !r->mem) {
        qwen2_runtime_free(&r->base);
        return ll_err_set(err, LL_ENOMEM, "runtime: out of memory for %zu bytes of scratch "
                          "(max batch %d, ctx %d)", bytes, o.max_batch, o.n_ctx);
    }
    for (int i = 0; i < nblk; i++)
        r->table[i] = i;
    r->seq0 = (struct ll_kv_seq){r->table, nblk};

    for (int l = 0; has_bias && l < c->n_layers; l++) {
        const struct qwen2_layer *L = &W->layers[l];
        float *b = r->bias + per_layer * l;
        LL_ASSERT(L->bq.data && L->bk.data && L->bv.data); /* the bind gives all or none */
        widen(b, &L->bq, r->qdim);
        widen(b + r->qdim, &L->bk, r->kvdim);
        widen(b + r->qdim + r->kvdim, &L->bv, r->kvdim);
    }

    r->mm = r->mm_bytes ? r->mem : NULL;
    float *p = (float *)((char *)r->mem + r->mm_bytes);
    r->x = p, p += B * r->hidden;
    r->xn = p, p += B * r->hidden;
    r->tmp = p, p += B * r->hidden;
    r->q = p, p += B * r->qdim;
    r->att = p, p += B * r->qdim;
    r->k = p, p += B * r->kvdim;
    r->v = p, p += B * r->kvdim;
    r->gate = p, p += B * r->ff_max;
    r->up = p, p += B * r->ff_max;
    r->scores = p, p += att_floats;
    if (mc->n_experts) {
        r->xe = p, p += B * r->hidden;
        r->ye = p, p += B * r->hidden;
        r->rlog = p, p += B * mc->n_experts;
        r->rw = p, p += B * moe_k;
        r->sgate = p, p += B;
    }
    r->slot = (int32_t *)p;
    r->seqi = r->slot + B;
    r->rows = r->seqi + B;
    if (mc->n_experts) {
        r->roff = r->rows + B;
        r->rtok = r->roff + mc->n_experts + 1;
        r->rsel = r->rtok + B * moe_k;
    }
    *out = &r->base;
    return LL_OK;
}

/* ---- the step ---- */

/* Move rows r->rows[0..n) of a (rows, dim) buffer to the front, in order (in place). */
static void gather_rows(float *buf, const int32_t *rows, int n, int dim)
{
    for (int j = 0; j < n; j++)
        if (rows[j] != j)
            memmove(buf + (size_t)j * dim, buf + (size_t)rows[j] * dim, sizeof(float) * dim);
}

/* out (n, w->n) = x (n, w->k) · Wᵀ + bias, on the runtime's pool and scratch: the integer
 * dot-product GEMM for a quantized weight, the bf16/f32 one for a dense weight (reading its
 * packed planes where it has them: the same bits). */
static void linear(struct qwen2_runtime *r, float *out, const float *x,
                   const struct model_linear *w, const float *bias, int n)
{
    if (w->quantized)
        ll_qmatmul(out, x, &w->q, bias, n, r->mm, r->mm_bytes, r->base.pool);
    else if (w->is_packed)
        ll_matmul_packed(out, x, &w->packed, bias, n, r->base.opts.math, r->mm, r->mm_bytes,
                         r->base.pool);
    else
        ll_matmul(out, x, w->dense.data, w->dense.dtype, bias, n, w->n, w->k, r->base.opts.math,
                  r->mm, r->mm_bytes, r->base.pool);
}

/* out (n, hidden) = the SwiGLU MLP p of width dim over x (n, hidden) (gate and up in r->gate,
 * r->up). */
static void mlp(struct qwen2_runtime *r, float *out, const float *x, const struct qwen2_mlp *p,
                int n, int dim)
{
    linear(r, r->gate, x, &p->gate, NULL, n);
    linear(r, r->up, x, &p->up, NULL, n);
    run_mlp_step(r, STEP_GLU, n, dim, 0);
    linear(r, out, r->gate, &p->down, NULL, n);
}

/* r->tmp (n, hidden) = a sparse layer's experts over r->xn: each expert runs once over the rows
 * routed to it, and a token's weighted outputs are summed in increasing expert order (then the
 * shared expert's), so a row's sum is the same in any batch. */
static void experts(struct qwen2_runtime *r, const struct qwen2_moe *e, int n)
{
    const struct model_moe *mc = &r->base.model->config.moe;
    const int H = r->hidden, E = mc->n_experts;
    ll_matmul(r->rlog, r->xn, e->router.data, e->router.dtype, NULL, n, E, H, r->base.opts.math,
              r->mm, r->mm_bytes, r->base.pool);
    moe_route(r->rlog, n, E, mc->n_experts_used, mc->norm_topk_prob, r->roff, r->rtok, r->rw,
              r->rsel);
    memset(r->tmp, 0, sizeof(float) * (size_t)n * H);
    for (int x = 0; x < E; x++) {
        int first = r->roff[x], m = r->roff[x + 1] - first;
        if (!m)
            continue;
        run_mlp_step(r, STEP_MOE_GATHER, m, 0, first);
        mlp(r, r->ye, r->xe, &e->experts[x], m, mc->intermediate);
        run_mlp_step(r, STEP_MOE_ADD, m, 0, first);
    }
    if (e->shared_gate.data) {
        ll_matmul(r->sgate, r->xn, e->shared_gate.data, e->shared_gate.dtype, NULL, n, 1, H,
                  r->base.opts.math, r->mm, r->mm_bytes, r->base.pool);
        mlp(r, r->ye, r->xn, &e->shared, n, mc->shared_intermediate);
        run_mlp_step(r, STEP_SHARED_ADD, n, 0, 0);
    }
}

enum ll_status qwen2_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                             struct ll_err *err)
{
    struct qwen2_runtime *r = (struct qwen2_runtime *)rt;
    const struct model *m = rt->model;
    const struct qwen2_weights *W = m->weights;
    const struct runtime_opts *o = &rt->opts;
    struct runtime_rows rr;
    enum ll_status st = runtime_batch_resolve(rt, b, &r->seq0, r->slot, r->seqi, r->rows, &rr,
                                              err);
    if (st)
        return st;

    int n = b->n_tokens, H = r->hidden, nl = m->config.n_layers, n_want = rr.n_want;
    size_t per_layer = (size_t)r->qdim + 2 * (size_t)r->kvdim;
    struct ll_attn_batch ab = {.n_tokens = n, .pos = b->pos, .seq = r->seqi, .seqs = rr.seqs,
                               .block_size = o->block_size};

    ll_embedding(r->x, W->embed.data, W->embed.dtype, b->token, n, H);
    run_step(r, STEP_NORM, n, 0, &r->norms[0].attn, NULL);
    const struct model_config *c = &m->config;
    ab.scale = (float)c->attn_scale;
    ab.softcap = (float)c->attn_softcap;

    for (int l = 0; l < nl; l++) {
        if (b->abort_cb && b->abort_cb(b->abort_data))
            return ll_err_set(err, LL_EABORTED, "the step was aborted before layer %d of %d", l,
                              nl);
        const struct qwen2_layer *L = &W->layers[l];
        const struct layer_norms *N = &r->norms[l];
        const float *bias = r->bias ? r->bias + per_layer * l : NULL;
        linear(r, r->q, r->xn, &L->wq, bias, n);
        linear(r, r->k, r->xn, &L->wk, bias ? bias + r->qdim : NULL, n);
        linear(r, r->v, r->xn, &L->wv, bias ? bias + r->qdim + r->kvdim : NULL, n);
        const struct ll_tensor qk_norm[2] = {N->q, N->k};
        run_step(r, STEP_ROPE_KV, n, l, qk_norm, b->pos);
        ab.n_tokens = n;
        ab.window = model_layer_windowed(c, l) ? c->swa.window : 0;
        ll_attention(r->att, r->q, &rt->kv, l, &ab, r->n_heads, r->scores, o->n_ctx, rt->pool);

        if (l == nl - 1 && n_want < n) {
            /* From here on only the rows that want logits matter. */
            gather_rows(r->att, r->rows, n_want, r->qdim);
            gather_rows(r->x, r->rows, n_want, H);
            n = n_want;
            if (n == 0)
                return LL_OK;
        }

        linear(r, r->tmp, r->att, &L->wo, NULL, n);
        run_add_norm(r, n, &N->post_attn, &N->mlp);
        if (L->moe)
            experts(r, L->moe, n);
        else
            mlp(r, r->tmp, r->xn, &L->mlp, n, r->inter);
        run_add_norm(r, n, &N->post_mlp, &r->norms[l + 1].attn); /* the last: the final norm */
    }
    /* n == n_want here (the last layer gathered them, or every row wants an output). */
    if (rr.n_hidden) {
        /* rows that want their hidden state take it from xn; the others close up for lm_head */
        int nlog = 0, nh = 0;
        for (int j = 0; j < n; j++) {
            const float *src = r->xn + (size_t)j * H;
            if (b->want_logits[r->rows[j]] == LL_WANT_HIDDEN)
                memcpy(b->hidden + (size_t)nh++ * H, src, sizeof(float) * H);
            else if (nlog++ != j)
                memmove(r->xn + (size_t)(nlog - 1) * H, src, sizeof(float) * H);
        }
        n = nlog;
        if (n == 0)
            return LL_OK;
    }
    linear(r, logits, r->xn, &W->lm_head, NULL, n);
    if (c->logits_div > 0 || c->final_softcap > 0) {
        struct step sc = {.r = r, .op = STEP_LOGITS, .n = n, .dim = r->vocab, .out = logits,
                          .div = (float)c->logits_div, .cap = (float)c->final_softcap};
        ll_pool_run(r->base.pool, step_worker, &sc);
    }
    return LL_OK;
}
