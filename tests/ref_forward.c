/*
 * ref_forward.c: the tests' float64 reference forward pass (see ref_forward.h).
 */
#include "ref_forward.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model_config.h"
#include "moe_route.h"
#include "ops.h"
#include "runtime.h"
#include "safetensors.h"
#include "util.h"

/* Element i of tensor `name` as a double (bf16 / f16 / f32); fails the test when absent. */
static const struct st_tensor *tensor(const struct ref *r, const char *fmt, int layer)
{
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    const struct st_tensor *t = st_find(r->st, name);
    if (!t)
        print_error("reference: no tensor %s\n", name);
    assert_non_null(t);
    return t;
}

static double at(const struct st_tensor *t, size_t i)
{
    switch (t->dtype) {
    case ST_BF16:
        return ll_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case ST_F16:
        return ll_f16_to_f32(((const uint16_t *)t->data)[i]);
    case ST_F32:
        return ((const float *)t->data)[i];
    default:
        fail_msg("reference: unexpected dtype of %s", t->name);
    }
    return 0;
}

/* y (n_out) = rows [row0, row0 + n_out) of W (rows, n_in) times x (+ b) */
static void ref_rows(double *y, const struct st_tensor *w, int row0, const struct st_tensor *b,
                     const double *x, int n_out, int n_in)
{
    assert_true(w->shape[0] >= row0 + n_out);
    assert_int_equal(w->shape[1], n_in);
    for (int o = 0; o < n_out; o++) {
        double s = b ? at(b, (size_t)o) : 0;
        for (int i = 0; i < n_in; i++)
            s += at(w, (size_t)(row0 + o) * n_in + i) * x[i];
        y[o] = s;
    }
}

/* y (n_out) = W (n_out, n_in) x (+ b) */
static void ref_linear(double *y, const struct st_tensor *w, const struct st_tensor *b,
                       const double *x, int n_out, int n_in)
{
    assert_int_equal(w->shape[0], n_out);
    ref_rows(y, w, 0, b, x, n_out, n_in);
}

/* y = x / rms(x) · w (Gemma: · (1 + w)) */
static void ref_rms_k(double *y, const double *x, const struct st_tensor *w, int n, double eps,
                      bool plus_one)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * inv * ((plus_one ? 1.0 : 0.0) + at(w, (size_t)i));
}

static void ref_rms(double *y, const double *x, const struct st_tensor *w, int n, double eps)
{
    ref_rms_k(y, x, w, n, eps, false);
}

/* The MLP's activation of the gate: SiLU, or the tanh approximation of GELU. */
static double ref_act(const struct ref *r, double g)
{
    if (r->c->act == MODEL_ACT_GELU_TANH)
        return 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
    return g / (1 + exp(-g));
}

/* Rotate the first rd dims of a head at pos: pair (i, i + rd/2) by pos · θ^(-2i/rd), divided
 * by the pair's longrope factor (ext, or none), cos and sin scaled by mscale. */
static void ref_rope(double *v, int pos, int rd, double theta, const double *ext, double mscale)
{
    for (int i = 0; i < rd / 2; i++) {
        double a = pos * pow(theta, -2.0 * i / rd) / (ext ? ext[i] : 1.0);
        double c = cos(a) * mscale, s = sin(a) * mscale;
        double x1 = v[i], x2 = v[i + rd / 2];
        v[i] = x1 * c - x2 * s;
        v[i + rd / 2] = x2 * c + x1 * s;
    }
}

/* Layer l's q (n_heads · head_dim), k and v (n_kv · head_dim each) of the normed xn: from
 * q/k/v_proj (+ biases), or Phi-3's qkv_proj (rows q, then k, then v). */
static void ref_qkv(const struct ref *r, int l, const double *xn, double *q, double *k,
                    double *v)
{
    const struct model_config *c = r->c;
    const int H = c->hidden_size, qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    if (r->kind.fused) {
        const struct st_tensor *w = tensor(r, "model.layers.%d.self_attn.qkv_proj.weight", l);
        assert_int_equal(w->shape[0], qd + 2 * kd);
        ref_rows(q, w, 0, NULL, xn, qd, H);
        ref_rows(k, w, qd, NULL, xn, kd, H);
        ref_rows(v, w, qd + kd, NULL, xn, kd, H);
        return;
    }
    const bool b = r->kind.bias;
    ref_linear(q, tensor(r, "model.layers.%d.self_attn.q_proj.weight", l),
               b ? tensor(r, "model.layers.%d.self_attn.q_proj.bias", l) : NULL, xn, qd, H);
    ref_linear(k, tensor(r, "model.layers.%d.self_attn.k_proj.weight", l),
               b ? tensor(r, "model.layers.%d.self_attn.k_proj.bias", l) : NULL, xn, kd, H);
    ref_linear(v, tensor(r, "model.layers.%d.self_attn.v_proj.weight", l),
               b ? tensor(r, "model.layers.%d.self_attn.v_proj.bias", l) : NULL, xn, kd, H);
}

/* acc (hidden) += scale · the SwiGLU MLP PREFIX.{gate,up,down}_proj (width f) of xn. */
static void ref_mlp(const struct ref *r, const char *prefix_fmt, int layer, int f,
                    const double *xn, double scale, double *acc)
{
    const int H = r->c->hidden_size;
    char fmt[128];
    double *g = malloc(sizeof(double) * f), *u = malloc(sizeof(double) * f),
           *o = malloc(sizeof(double) * H);
    if (r->kind.fused) { /* Phi-3: gate_up_proj, the gate's rows first */
        snprintf(fmt, sizeof fmt, "%s.gate_up_proj.weight", prefix_fmt);
        const struct st_tensor *gu = tensor(r, fmt, layer);
        assert_int_equal(gu->shape[0], 2 * f);
        ref_rows(g, gu, 0, NULL, xn, f, H);
        ref_rows(u, gu, f, NULL, xn, f, H);
    } else {
        snprintf(fmt, sizeof fmt, "%s.gate_proj.weight", prefix_fmt);
        ref_linear(g, tensor(r, fmt, layer), NULL, xn, f, H);
        snprintf(fmt, sizeof fmt, "%s.up_proj.weight", prefix_fmt);
        ref_linear(u, tensor(r, fmt, layer), NULL, xn, f, H);
    }
    for (int i = 0; i < f; i++)
        g[i] = ref_act(r, g[i]) * u[i];
    snprintf(fmt, sizeof fmt, "%s.down_proj.weight", prefix_fmt);
    ref_linear(o, tensor(r, fmt, layer), NULL, g, H, f);
    for (int i = 0; i < H; i++)
        acc[i] += scale * o[i];
    free(g), free(u), free(o);
}

/* acc (hidden) += sparse layer l's experts over xn. */
/* acc += scale · expert x of layer l's stacks (GraniteMoE: block_sparse_moe.input_linear
 * (E, 2I, H), its gate rows then its up rows; output_linear (E, H, I)) over xn */
static void ref_stacked_mlp(const struct ref *r, int l, int x, const double *xn, double scale,
                            double *acc)
{
    const int H = r->c->hidden_size, I = r->c->moe.intermediate;
    const struct st_tensor *in = tensor(r, "model.layers.%d.block_sparse_moe.input_linear.weight",
                                        l),
                           *out = tensor(r, "model.layers.%d.block_sparse_moe.output_linear."
                                            "weight", l);
    assert_true(in->ndim == 3 && in->shape[1] == 2 * I && in->shape[2] == H);
    assert_true(out->ndim == 3 && out->shape[1] == H && out->shape[2] == I);
    double *z = malloc(sizeof(double) * I);
    for (int j = 0; j < I; j++) {
        double g = 0, u = 0;
        size_t rg = ((size_t)x * 2 * I + j) * H, ru = ((size_t)x * 2 * I + I + j) * H;
        for (int i = 0; i < H; i++) {
            g += at(in, rg + i) * xn[i];
            u += at(in, ru + i) * xn[i];
        }
        z[j] = ref_act(r, g) * u;
    }
    for (int h = 0; h < H; h++) {
        double o = 0;
        for (int j = 0; j < I; j++)
            o += at(out, ((size_t)x * H + h) * I + j) * z[j];
        acc[h] += scale * o;
    }
    free(z);
}

static void ref_experts(const struct ref *r, int l, const double *xn, double scale, double *acc)
{
    const struct model_moe *mc = &r->c->moe;
    const int H = r->c->hidden_size, E = mc->n_experts, K = mc->n_experts_used;
    double *lg = malloc(sizeof(double) * E), mx = -INFINITY, sum = 0, picked = 0;
    bool *used = calloc((size_t)E, sizeof *used);
    ref_linear(lg, tensor(r, r->kind.stacked ? "model.layers.%d.block_sparse_moe.router.layer.weight"
                                             : "model.layers.%d.mlp.gate.weight", l),
               NULL, xn, E, H);
    for (int e = 0; e < E; e++)
        mx = fmax(mx, lg[e]);
    for (int e = 0; e < E; e++)
        sum += lg[e] = exp(lg[e] - mx);
    int sel[MOE_MAX_EXPERTS];
    for (int j = 0; j < K; j++) { /* the K most probable, ties to the lower index */
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || lg[e] > lg[best]))
                best = e;
        used[best] = true;
        sel[j] = best;
        picked += lg[best] / sum;
    }
    for (int j = 0; j < K; j++) {
        char fmt[96];
        snprintf(fmt, sizeof fmt, "model.layers.%%d.mlp.experts.%d", sel[j]);
        double w = lg[sel[j]] / sum;
        w = scale * (mc->norm_topk_prob ? w / picked : w);
        if (r->kind.stacked)
            ref_stacked_mlp(r, l, sel[j], xn, w, acc);
        else
            ref_mlp(r, fmt, l, mc->intermediate, xn, w, acc);
    }
    if (r->kind.shared) {
        double gl;
        ref_linear(&gl, tensor(r, "model.layers.%d.mlp.shared_expert_gate.weight", l), NULL, xn,
                   1, H);
        ref_mlp(r, "model.layers.%d.mlp.shared_expert", l, mc->shared_intermediate, xn,
                scale / (1 + exp(-gl)), acc);
    }
    free(lg), free(used);
}

/* logits (n, vocab) of the sequence ids[0..n) from position 0 */
void ref_forward(const struct ref *r, const int32_t *ids, int n, double *logits)
{
    ref_forward_states(r, ids, n, logits, NULL);
}

void ref_forward_states(const struct ref *r, const int32_t *ids, int n, double *logits,
                        double *hidden)
{
    const struct model_config *c = r->c;
    const int H = c->hidden_size, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim,
              F = c->intermediate_size, V = c->vocab_size, q_dim = nh * hd, kv_dim = nkv * hd;
    double *x = calloc((size_t)n * H, sizeof *x), *xn = malloc(sizeof(double) * H),
           *q = malloc(sizeof(double) * (size_t)n * q_dim),
           *k = malloc(sizeof(double) * (size_t)n * kv_dim),
           *v = malloc(sizeof(double) * (size_t)n * kv_dim), *att = malloc(sizeof(double) * q_dim),
           *o = malloc(sizeof(double) * H), *p = malloc(sizeof(double) * n);
    const struct st_tensor *emb = tensor(r, "model.embed_tokens.weight", 0);
    const bool g1 = r->kind.gemma; /* norms of 1 + w, output norms, embedding scaled */
    const double escale = g1 ? sqrt((double)H) : c->embed_mult > 0 ? c->embed_mult : 1.0;
    const double rmul = c->residual_mult > 0 ? c->residual_mult : 1.0; /* Granite's */
    const double qscale = c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt((double)hd);
    double *mo = malloc(sizeof(double) * H);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++)
            x[(size_t)t * H + i] = at(emb, (size_t)ids[t] * H + i) * escale;
    /* longrope, as transformers' Phi3 defines it: factors by the context the engine serves
     * (ref_engine_logits': 256), cos and sin scaled by sqrt(1 + ln(max / L) / ln L) */
    const double L = c->rope_scaling.original_max_position;
    const double *ext = NULL;
    double mscale = 1.0;
    if (c->rope_scaling.kind == MODEL_ROPE_LONGROPE) {
        ext = 256 > L ? c->rope_scaling.long_factor : c->rope_scaling.short_factor;
        mscale = c->max_position > L ? sqrt(1 + log(c->max_position / L) / log(L)) : 1.0;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const bool win = model_layer_windowed(c, l);
        const double theta = win && c->swa.rope_theta > 0 ? c->swa.rope_theta : c->rope_theta;
        const int first_of = win ? c->swa.window : 0; /* keys j with t - j < window */
        const struct st_tensor *qn = NULL, *kn = NULL;
        if (r->kind.qk_norm) {
            qn = tensor(r, "model.layers.%d.self_attn.q_norm.weight", l);
            kn = tensor(r, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        for (int t = 0; t < n; t++) {
            ref_rms_k(xn, x + (size_t)t * H,
                      tensor(r, "model.layers.%d.input_layernorm.weight", l), H, c->rms_eps, g1);
            double *qt = q + (size_t)t * q_dim, *kt = k + (size_t)t * kv_dim;
            ref_qkv(r, l, xn, qt, kt, v + (size_t)t * kv_dim);
            for (int h = 0; h < nh; h++) {
                if (qn)
                    ref_rms_k(qt + h * hd, qt + h * hd, qn, hd, c->rms_eps, g1);
                if (model_layer_rope(c, l))
                    ref_rope(qt + h * hd, t, c->rope_dim, theta, ext, mscale);
            }
            for (int h = 0; h < nkv; h++) {
                if (kn)
                    ref_rms_k(kt + h * hd, kt + h * hd, kn, hd, c->rms_eps, g1);
                if (model_layer_rope(c, l))
                    ref_rope(kt + h * hd, t, c->rope_dim, theta, ext, mscale);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < nh; h++) {
                int kvh = h / (nh / nkv);
                const double *qh = q + (size_t)t * q_dim + h * hd;
                double mx = -INFINITY, sum = 0;
                int j0 = first_of && t - first_of + 1 > 0 ? t - first_of + 1 : 0;
                for (int j = j0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < hd; d++)
                        s += qh[d] * k[(size_t)j * kv_dim + kvh * hd + d];
                    p[j] = s * qscale;
                    if (c->attn_softcap > 0)
                        p[j] = c->attn_softcap * tanh(p[j] / c->attn_softcap);
                    mx = fmax(mx, p[j]);
                }
                for (int j = j0; j <= t; j++)
                    sum += p[j] = exp(p[j] - mx);
                for (int d = 0; d < hd; d++) {
                    double s = 0;
                    for (int j = j0; j <= t; j++)
                        s += p[j] * v[(size_t)j * kv_dim + kvh * hd + d];
                    att[h * hd + d] = s / sum;
                }
            }
            double *xt = x + (size_t)t * H;
            ref_linear(o, tensor(r, "model.layers.%d.self_attn.o_proj.weight", l), NULL, att, H,
                       q_dim);
            if (g1) { /* Gemma: the attention's output normed, the MLP between two norms */
                ref_rms_k(o, o, tensor(r, "model.layers.%d.post_attention_layernorm.weight", l),
                          H, c->rms_eps, true);
                for (int i = 0; i < H; i++)
                    xt[i] += o[i];
                ref_rms_k(xn, xt, tensor(r, "model.layers.%d.pre_feedforward_layernorm.weight", l),
                          H, c->rms_eps, true);
                memset(mo, 0, sizeof(double) * H);
                ref_mlp(r, "model.layers.%d.mlp", l, F, xn, 1.0, mo);
                ref_rms_k(mo, mo,
                          tensor(r, "model.layers.%d.post_feedforward_layernorm.weight", l), H,
                          c->rms_eps, true);
                for (int i = 0; i < H; i++)
                    xt[i] += mo[i];
                continue;
            }
            for (int i = 0; i < H; i++)
                xt[i] += o[i] * rmul;
            ref_rms(xn, xt, tensor(r, "model.layers.%d.post_attention_layernorm.weight", l), H,
                    c->rms_eps);
            if (model_layer_sparse(c, l))
                ref_experts(r, l, xn, rmul, xt);
            else
                ref_mlp(r, "model.layers.%d.mlp", l, F, xn, rmul, xt);
        }
    }
    const struct st_tensor *head = c->tie_word_embeddings || g1 ? emb
                                   : logits                     ? tensor(r, "lm_head.weight", 0)
                                                                : NULL; /* states only */
    for (int t = 0; t < n; t++) {
        ref_rms_k(xn, x + (size_t)t * H, tensor(r, "model.norm.weight", 0), H, c->rms_eps, g1);
        if (hidden)
            memcpy(hidden + (size_t)t * H, xn, sizeof(double) * H);
        if (!logits)
            continue;
        double *lt = logits + (size_t)t * V;
        ref_linear(lt, head, NULL, xn, V, H);
        for (int i = 0; c->logits_div > 0 && i < V; i++)
            lt[i] /= c->logits_div;
        for (int i = 0; c->final_softcap > 0 && i < V; i++)
            lt[i] = c->final_softcap * tanh(lt[i] / c->final_softcap);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(o), free(p), free(mo);
}

double *ref_logits(const struct model *m, struct ref_kind kind, const int32_t *ids, int n)
{
    struct ref r;
    ref_open(&r, m->dir, &m->config, kind);
    double *ref = malloc(sizeof(double) * (size_t)n * (size_t)m->config.vocab_size);
    assert_non_null(ref);
    ref_forward(&r, ids, n, ref);
    ref_close(&r);
    return ref;
}

void ref_open(struct ref *r, const char *dir, const struct model_config *c, struct ref_kind kind)
{
    char *path = ll_path_join(dir, "model.safetensors");
    struct ll_err err = {0};
    enum ll_status s = st_open(&r->st, path, &err);
    if (s)
        print_error("st_open: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    free(path);
    r->c = c, r->kind = kind;
}

void ref_close(struct ref *r)
{
    st_close(r->st);
    r->st = NULL;
}

double ref_compare(const float *got, const double *ref, int n, int V, double rel_tol,
                   int min_top1, const char *what)
{
    double scale = 0, worst = 0;
    for (size_t i = 0; i < (size_t)n * V; i++)
        scale = fmax(scale, fabs(ref[i]));
    double tol = rel_tol * scale;
    int top1 = 0;
    for (int t = 0; t < n; t++) {
        const float *g = got + (size_t)t * V;
        const double *r = ref + (size_t)t * V;
        int b1 = 0, b2 = -1;
        for (int v = 0; v < V; v++) {
            double d = fabs(g[v] - r[v]);
            worst = fmax(worst, d);
            if (d > tol)
                fail_msg("%s pos %d token %d: %.5f, reference %.5f (tol %.5f)", what, t, v, g[v],
                         r[v], tol);
            if (v && r[v] > r[b1])
                b2 = b1, b1 = v;
            else if (v && (b2 < 0 || r[v] > r[b2]))
                b2 = v;
        }
        if (r[b1] - r[b2] > 2 * tol) {
            assert_int_equal(ll_argmax(g, V), b1);
            top1++;
        }
    }
    printf("  %s: %d positions, top-1 checked at %d, worst %.2e of scale %.2f\n", what, n, top1,
           worst / scale, scale);
    assert_true(top1 >= min_top1);
    return worst / scale;
}

void ref_engine_logits(const struct model *m, const int32_t *ids, int n, enum ll_math math,
                       int threads, int chunk, float *out)
{
    enum { MAX_CHUNK = 64 };
    assert_true(n <= 256 && chunk >= 1 && chunk <= MAX_CHUNK);
    struct runtime_opts o = {.n_ctx = 256, .max_batch = chunk, .n_threads = threads,
                             .math = math};
    struct model_runtime *rt;
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, m, &o, &err), LL_OK);
    int32_t pos[MAX_CHUNK];
    uint8_t want[MAX_CHUNK];
    memset(want, 1, sizeof want);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int k = n - i0 < chunk ? n - i0 : chunk;
        for (int j = 0; j < k; j++)
            pos[j] = i0 + j;
        struct ll_batch b = {.n_tokens = k, .token = ids + i0, .pos = pos, .want_logits = want};
        enum ll_status s = runtime_forward(rt, &b, out + (size_t)i0 * m->config.vocab_size, &err);
        if (s)
            print_error("runtime_forward: %s\n", err.msg);
        assert_int_equal(s, LL_OK);
    }
    runtime_free(rt);
}

void ref_check_paths(const struct model *m, const int32_t *ids, int n, const double *ref,
                     double exact_tol, double fast_tol, int fast_top1, const char *what)
{
    const int V = m->config.vocab_size;
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
    char name[80];
    ref_engine_logits(m, ids, n, LL_MATH_EXACT, 2, n, a);
    snprintf(name, sizeof name, "%s exact", what);
    ref_compare(a, ref, n, V, exact_tol, n - 2, name);
    ref_engine_logits(m, ids, n, LL_MATH_EXACT, 2, 1, b);
    assert_memory_equal(a, b, sizeof(float) * n * V);
    ref_engine_logits(m, ids, n, LL_MATH_EXACT, 1, 5, b);
    assert_memory_equal(a, b, sizeof(float) * n * V);

    ref_engine_logits(m, ids, n, LL_MATH_FAST, 2, n, a);
    snprintf(name, sizeof name, "%s fast", what);
    ref_compare(a, ref, n, V, fast_tol, fast_top1, name);
    ref_engine_logits(m, ids, n, LL_MATH_FAST, 2, 3, b);
    assert_memory_equal(a, b, sizeof(float) * n * V);
    free(a), free(b);
}
