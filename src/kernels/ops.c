/*
 * ops.c: scalar references of the row-wise ops (embedding, RMSNorm, RoPE, SwiGLU, GeGLU, add,
 * softmax, argmax) and the one-time choice of their SIMD variants, which attention.c shares: ops_avx512.c
 * where the CPU has AVX-512 F/BW/VL/DQ, else ops_avx2.c where it has AVX2, FMA and F16C, each
 * unless LLAISYS_KERNEL (isa.h) caps below it.
 *
 * Called from any thread (the forward pass calls them from pool workers on disjoint rows).
 * The variant is chosen once under pthread_once and never changes afterwards, so a value is
 * computed by the same instructions for the whole life of the process.
 * Compiled for plain x86-64 with ISO C semantics (no FMA contraction), so the scalar code gives
 * the same bits for an element wherever it sits.
 */
#include "ops.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "ops_simd.h"
#include "util.h"

static enum ll_simd ops_level;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static bool cpu_runs(enum ll_simd v)
{
    return v == LL_SIMD_AVX512 ? ll_isa_cpu_avx512() : v == LL_SIMD_AVX2 ? ll_isa_cpu_avx2() : true;
}

static void ops_pick_variant(void)
{
    enum ll_isa cap = ll_isa_cap(NULL);
    ops_level = cpu_runs(LL_SIMD_AVX512) && cap >= LL_ISA_AVX512 ? LL_SIMD_AVX512
                : cpu_runs(LL_SIMD_AVX2) && cap >= LL_ISA_AVX2   ? LL_SIMD_AVX2
                                                                  : LL_SIMD_SCALAR;
}

enum ll_simd ll_simd_level(void)
{
    pthread_once(&ops_once, ops_pick_variant);
    return ops_level;
}

static const char *const level_names[] = {"scalar", "avx2", "avx512"};

const char *ll_ops_variant(void) { return level_names[ll_simd_level()]; }

bool ll_ops_set_variant(const char *name)
{
    for (int v = LL_SIMD_SCALAR; v <= LL_SIMD_AVX512; v++)
        if (!strcmp(name, level_names[v])) {
            if (!cpu_runs((enum ll_simd)v))
                return false;
            pthread_once(&ops_once, ops_pick_variant);
            ops_level = (enum ll_simd)v;
            return true;
        }
    return false;
}

void ll_embedding(float *out, const void *table, enum ll_dtype ttype, const int32_t *ids, int n,
                  int dim)
{
    size_t esz = ll_dtype_size(ttype);
    for (int i = 0; i < n; i++) {
        const char *row = (const char *)table + (size_t)ids[i] * (size_t)dim * esz;
        float *o = out + (size_t)i * dim;
        if (ttype == LL_F32) {
            memcpy(o, row, (size_t)dim * sizeof(float));
        } else {
            for (int d = 0; d < dim; d++)
                o[d] = ll_dtype_load(row, ttype, (size_t)d);
        }
    }
}

void ll_rms_norm(float *out, const float *x, const void *w, enum ll_dtype wtype, int n, int dim,
                 float eps)
{
    switch (ll_simd_level()) {
    case LL_SIMD_AVX512:
        ll_rms_norm_avx512(out, x, w, wtype, n, dim, eps);
        break;
    case LL_SIMD_AVX2:
        ll_rms_norm_avx2(out, x, w, wtype, n, dim, eps);
        break;
    case LL_SIMD_SCALAR:
        ll_rms_norm_ref(out, x, w, wtype, n, dim, eps);
        break;
    }
}

void ll_rms_norm_ref(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                     int dim, float eps)
{
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * dim;
        float *o = out + (size_t)i * dim;
        /* Sum of squares in double: a 1536-wide row costs nothing next to the matmuls, and the
         * normaliser is then exact to f32 rounding. */
        double ss = 0.0;
        for (int d = 0; d < dim; d++)
            ss += (double)xr[d] * (double)xr[d];
        float inv = (float)(1.0 / sqrt(ss / dim + (double)eps));
        for (int d = 0; d < dim; d++)
            o[d] = (xr[d] * inv) * ll_dtype_load(w, wtype, (size_t)d);
    }
}

enum ll_status ll_rope_init(struct ll_rope *r, int head_dim, int rot_dim, int n_pos,
                            const double *inv_freq, double scale, struct ll_err *err)
{
    memset(r, 0, sizeof *r);
    if (rot_dim < 2 || rot_dim % 2 || rot_dim > head_dim || n_pos < 1)
        return ll_err_set(err, LL_EINVAL,
                          "rope: rot_dim %d must be even, in [2, head_dim %d], and n_pos %d >= 1",
                          rot_dim, head_dim, n_pos);
    int half = rot_dim / 2;
    size_t cnt = (size_t)n_pos * half;
    r->cos = malloc(cnt * sizeof(float));
    r->sin = malloc(cnt * sizeof(float));
    if (!r->cos || !r->sin) {
        ll_rope_free(r);
        return ll_err_set(err, LL_ENOMEM, "rope: out of memory for %d positions", n_pos);
    }
    r->head_dim = head_dim;
    r->rot_dim = rot_dim;
    r->n_pos = n_pos;
    for (int i = 0; i < half; i++) {
        for (int p = 0; p < n_pos; p++) {
            double a = (double)p * inv_freq[i];
            r->cos[(size_t)p * half + i] = (float)(scale * cos(a));
            r->sin[(size_t)p * half + i] = (float)(scale * sin(a));
        }
    }
    return LL_OK;
}

void ll_rope_free(struct ll_rope *r)
{
    free(r->cos);
    free(r->sin);
    r->cos = r->sin = NULL;
    r->n_pos = 0;
}

void ll_rope_apply(float *x, const struct ll_rope *r, const int32_t *pos, int n, int n_heads)
{
    int hd = r->head_dim, half = r->rot_dim / 2;
    for (int i = 0; i < n; i++) {
        LL_ASSERT(pos[i] >= 0 && pos[i] < r->n_pos);
        const float *c = r->cos + (size_t)pos[i] * half;
        const float *s = r->sin + (size_t)pos[i] * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)i * n_heads + h) * hd;
            for (int j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
    }
}

void ll_swiglu_ref(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* The gated activations' variants, indexed by enum ll_simd. */
typedef void glu_fn(float *out, const float *gate, const float *up, int n);
static glu_fn *const swiglu_fns[] = {[LL_SIMD_SCALAR] = ll_swiglu_ref,
                                     [LL_SIMD_AVX2] = ll_swiglu_avx2,
                                     [LL_SIMD_AVX512] = ll_swiglu_avx512};
static glu_fn *const geglu_fns[] = {[LL_SIMD_SCALAR] = ll_geglu_ref,
                                    [LL_SIMD_AVX2] = ll_geglu_avx2,
                                    [LL_SIMD_AVX512] = ll_geglu_avx512};

void ll_swiglu(float *out, const float *gate, const float *up, int n)
{
    swiglu_fns[ll_simd_level()](out, gate, up, n);
}

/* u = √(2/π)·(g + 0.044715·g³); 0.5·(1 + tanh(u)) = 1 / (1 + e^(-2u)). Far below zero e^(-2u)
 * overflows to inf and g / inf gives -0; far above it is 0 and the result g. */
void ll_geglu_ref(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        float u = 0.7978845608f * (g + 0.044715f * g * g * g);
        out[i] = g / (1.0f + expf(-2.0f * u)) * up[i];
    }
}

void ll_geglu(float *out, const float *gate, const float *up, int n)
{
    geglu_fns[ll_simd_level()](out, gate, up, n);
}

void ll_add(float *out, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void ll_softmax_ref(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void ll_softmax(float *x, int n)
{
    switch (ll_simd_level()) {
    case LL_SIMD_AVX512:
        ll_softmax_avx512(x, n);
        break;
    case LL_SIMD_AVX2:
        ll_softmax_avx2(x, n);
        break;
    case LL_SIMD_SCALAR:
        ll_softmax_ref(x, n);
        break;
    }
}

int ll_argmax(const float *x, int n)
{
    int best = 0;
    float bv = -INFINITY;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue;
        if (!found || x[i] > bv) {
            bv = x[i];
            best = i;
            found = 1;
        }
    }
    return best;
}

void ll_exp(float *out, const float *x, int n)
{
    switch (ll_simd_level()) {
    case LL_SIMD_AVX512:
        ll_exp_avx512(out, x, n);
        break;
    case LL_SIMD_AVX2:
        ll_exp_avx2(out, x, n);
        break;
    case LL_SIMD_SCALAR:
        /* Same clamp as the vector exp: finite for large x, 0 far below. */
        for (int i = 0; i < n; i++)
            out[i] = expf(fminf(fmaxf(x[i], -104.0f), 88.7f));
        break;
    }
}
