/*
 * attention.c: K/V storage and causal GQA attention (see attention.h for the addressing and
 * the determinism rule).
 *
 * One (token, KV head) pair is one work item, covering the group of query heads that share the KV
 * head (GQA), so each K/V row is read and widened once per group: scores for keys start..pos
 * (start = 0, or the first position of a sliding window, which may fall mid-block) into the
 * thread's scratch rows, the optional softcap (a scalar tanhf loop over the scores, the same
 * code for every variant), per head max, e^(s - max) and their sum, then the
 * probability-weighted sum of V rows, scaled by 1/sum at the end. Two passes over K/V instead of an online softmax: the scores row
 * (≤ ctx floats) stays in L1/L2 and every key is visited in position order, so the arithmetic
 * for a token is fixed by (query, position, options, cache contents) alone.
 * Work items are handed out by an atomic counter (latest tokens first: they have the most keys),
 * which balances causal prefill without changing any result.
 * Called from the forward pass thread; the inner loops run on the pool's threads.
 */
#include "attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops_simd.h"
#include "util.h"

enum ll_status ll_kv_cache_init(struct ll_kv_cache *kv, enum ll_dtype dtype, int n_layers,
                                int n_slots, int n_kv_heads, int head_dim, struct ll_err *err)
{
    memset(kv, 0, sizeof *kv);
    if ((dtype != LL_F32 && dtype != LL_BF16) || n_layers < 1 || n_slots < 1 || n_kv_heads < 1 ||
        head_dim < 1)
        return ll_err_set(err, LL_EINVAL, "kv cache: bad shape (%d layers, %d slots, %d heads, "
                          "head_dim %d) or dtype %s", n_layers, n_slots, n_kv_heads, head_dim,
                          ll_dtype_name(dtype));
    size_t bytes = (size_t)n_layers * n_slots * n_kv_heads * head_dim * ll_dtype_size(dtype);
    size_t rounded = (bytes + 63) & ~(size_t)63;
    kv->k = aligned_alloc(64, rounded);
    kv->v = aligned_alloc(64, rounded);
    if (!kv->k || !kv->v) {
        ll_kv_cache_free(kv);
        return ll_err_set(err, LL_ENOMEM, "kv cache: out of memory (2 x %zu bytes for %d slots)",
                          bytes, n_slots);
    }
    kv->dtype = dtype;
    kv->n_layers = n_layers;
    kv->n_slots = n_slots;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    return LL_OK;
}

void ll_kv_cache_free(struct ll_kv_cache *kv)
{
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}

/* Start of the layer's storage, in bytes. */
static size_t layer_offset(const struct ll_kv_cache *kv, int layer)
{
    return (size_t)layer * kv->n_slots * kv->n_kv_heads * kv->head_dim * ll_dtype_size(kv->dtype);
}

void ll_kv_cache_write(struct ll_kv_cache *kv, int layer, const int32_t *slot, const float *k,
                       const float *v, int n)
{
    LL_ASSERT(layer >= 0 && layer < kv->n_layers);
    size_t row = (size_t)kv->n_kv_heads * kv->head_dim;
    char *kb = (char *)kv->k + layer_offset(kv, layer);
    char *vb = (char *)kv->v + layer_offset(kv, layer);
    for (int i = 0; i < n; i++) {
        LL_ASSERT(slot[i] >= 0 && slot[i] < kv->n_slots);
        const float *ks = k + (size_t)i * row, *vs = v + (size_t)i * row;
        if (kv->dtype == LL_F32) {
            memcpy((float *)kb + (size_t)slot[i] * row, ks, row * sizeof(float));
            memcpy((float *)vb + (size_t)slot[i] * row, vs, row * sizeof(float));
        } else {
            uint16_t *kd = (uint16_t *)kb + (size_t)slot[i] * row;
            uint16_t *vd = (uint16_t *)vb + (size_t)slot[i] * row;
            for (size_t d = 0; d < row; d++) {
                kd[d] = ll_f32_to_bf16(ks[d]);
                vd[d] = ll_f32_to_bf16(vs[d]);
            }
        }
    }
}

/* ---- scalar inner loops (the reference); same contract as the SIMD ones (ops_simd.h) ---- */

static inline float kv_elem(const void *p, enum ll_dtype t, size_t i)
{
    return t == LL_F32 ? ((const float *)p)[i] : ll_bf16_to_f32(((const uint16_t *)p)[i]);
}

static void scores_ref(float *s, size_t s_stride, const float *q, int G, const void *k,
                       enum ll_dtype t, size_t stride, int n, int hd, float scale)
{
    for (int h = 0; h < G; h++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++)
                acc += q[(size_t)h * hd + d] * kv_elem(k, t, (size_t)j * stride + d);
            s[h * s_stride + j] = acc * scale;
        }
}

static float max_ref(const float *s, int n)
{
    float max = s[0];
    for (int j = 1; j < n; j++)
        if (s[j] > max)
            max = s[j];
    return max;
}

static float expsum_ref(float *s, int n, float max)
{
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - max);
        sum += s[j];
    }
    return sum;
}

static void accum_ref(float *acc, const float *p, size_t p_stride, int G, const void *v,
                      enum ll_dtype t, size_t stride, int n, int hd)
{
    for (int h = 0; h < G; h++)
        for (int j = 0; j < n; j++)
            for (int d = 0; d < hd; d++)
                acc[(size_t)h * hd + d] += p[h * p_stride + j] * kv_elem(v, t, (size_t)j * stride + d);
}

struct attn_loops {
    void (*scores)(float *s, size_t s_stride, const float *q, int G, const void *k,
                   enum ll_dtype t, size_t stride, int n, int hd, float scale);
    float (*max)(const float *s, int n);
    float (*expsum)(float *s, int n, float max);
    void (*accum)(float *acc, const float *p, size_t p_stride, int G, const void *v,
                  enum ll_dtype t, size_t stride, int n, int hd);
};

static const struct attn_loops loops_ref = {scores_ref, max_ref, expsum_ref, accum_ref};
static const struct attn_loops loops_avx512 = {ll_attn_scores_avx512, ll_attn_max_avx512,
                                                ll_attn_expsum_avx512, ll_attn_accum_avx512};
static const struct attn_loops loops_avx2 = {ll_attn_scores_avx2, ll_attn_max_avx2,
                                              ll_attn_expsum_avx2, ll_attn_accum_avx2};

/* The ops' variant (ll_simd_level), where head_dim is a whole number of its vectors. */
static const struct attn_loops *pick_loops(int head_dim)
{
    switch (ll_simd_level()) {
    case LL_SIMD_AVX512:
        if (head_dim % 16 == 0)
            return &loops_avx512;
        break;
    case LL_SIMD_AVX2:
        if (head_dim % 8 == 0)
            return &loops_avx2;
        break;
    case LL_SIMD_SCALAR:
        break;
    }
    return &loops_ref;
}

const char *ll_attention_variant(int head_dim)
{
    const struct attn_loops *l = pick_loops(head_dim);
    return l == &loops_avx512 ? "avx512" : l == &loops_avx2 ? "avx2" : "scalar";
}

size_t ll_attention_scratch_floats(int n_threads, int n_heads, int n_kv_heads, int max_keys)
{
    return (size_t)n_threads * (size_t)(n_heads / n_kv_heads) * (size_t)max_keys;
}

struct attn_job {
    float *out;
    const float *q;
    const struct ll_kv_cache *kv;
    int layer;
    const struct ll_attn_batch *b;
    int n_heads;
    int group; /* query heads per KV head */
    float *scratch;
    int max_keys;
    const struct attn_loops *loops;
    atomic_int next; /* next work item to hand out */
};

/* The run of keys j..j+cnt-1 (cnt returned) that share key j's block, up to pos; *slot: the
 * physical slot of key j (the run's slots follow it). */
static int key_run(const struct ll_kv_seq *sq, int bs, int n_slots, int j, int pos, size_t *slot)
{
    int off = j % bs, left = pos + 1 - j;
    int32_t blk = sq->block_table[j / bs];
    LL_ASSERT(blk >= 0 && (size_t)(blk + 1) * bs <= (size_t)n_slots);
    *slot = (size_t)blk * bs + off;
    return bs - off < left ? bs - off : left;
}

/* Token i, KV head g with its group of query heads: out_h = Σ_j softmax(s_h)_j v_j over keys
 * start..pos. s: group · max_keys floats; row h holds the scores of keys start..pos at 0..n-1. */
static void attend_group(const struct attn_job *job, int i, int g, float *s)
{
    const struct ll_kv_cache *kv = job->kv;
    const struct ll_attn_batch *b = job->b;
    const struct attn_loops *L = job->loops;
    int hd = kv->head_dim, nkv = kv->n_kv_heads, G = job->group;
    int pos = b->pos[i], bs = b->block_size;
    int start = b->window > 0 && pos - b->window + 1 > 0 ? pos - b->window + 1 : 0;
    int n = pos + 1 - start; /* keys */
    size_t ss = (size_t)job->max_keys;
    LL_ASSERT(pos >= 0 && n <= job->max_keys);
    const struct ll_kv_seq *sq = &b->seqs[b->seq[i]];
    LL_ASSERT(pos / bs < sq->n_blocks);
    size_t esz = ll_dtype_size(kv->dtype), stride = (size_t)nkv * hd;
    const char *kbase = (const char *)kv->k + layer_offset(kv, job->layer);
    const char *vbase = (const char *)kv->v + layer_offset(kv, job->layer);
    size_t head0 = (size_t)i * job->n_heads + (size_t)g * G;
    const float *q = job->q + head0 * hd;
    float *o = job->out + head0 * hd;
    float scale = b->scale > 0.0f ? b->scale : 1.0f / sqrtf((float)hd);

    /* Runs of keys within one block, in position order: the first may start mid-block. */
    for (int j = start, cnt; j <= pos; j += cnt) {
        size_t slot;
        cnt = key_run(sq, bs, kv->n_slots, j, pos, &slot);
        size_t first = (slot * nkv + g) * hd; /* element index of key j */
        L->scores(s + (j - start), ss, q, G, kbase + first * esz, kv->dtype, stride, cnt, hd,
                  scale);
    }
    if (b->softcap > 0.0f) {
        float cap = b->softcap;
        for (int h = 0; h < G; h++)
            for (int j = 0; j < n; j++)
                s[h * ss + j] = cap * tanhf(s[h * ss + j] / cap);
    }
    float inv[LL_ATTN_MAX_GROUP];
    for (int h = 0; h < G; h++) {
        float *sh = s + h * ss;
        inv[h] = 1.0f / L->expsum(sh, n, L->max(sh, n));
    }
    memset(o, 0, (size_t)G * hd * sizeof(float));
    for (int j = start, cnt; j <= pos; j += cnt) {
        size_t slot;
        cnt = key_run(sq, bs, kv->n_slots, j, pos, &slot);
        size_t first = (slot * nkv + g) * hd;
        L->accum(o, s + (j - start), ss, G, vbase + first * esz, kv->dtype, stride, cnt, hd);
    }
    for (int h = 0; h < G; h++)
        for (int d = 0; d < hd; d++)
            o[(size_t)h * hd + d] *= inv[h];
}

static void attn_worker(void *ctx, int ith, int nth)
{
    (void)nth;
    struct attn_job *job = ctx;
    int nkv = job->kv->n_kv_heads;
    int total = job->b->n_tokens * nkv;
    float *s = job->scratch + (size_t)ith * job->group * job->max_keys;
    for (;;) {
        int item = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (item >= total)
            break;
        int rev = total - 1 - item; /* latest tokens first */
        attend_group(job, rev / nkv, rev % nkv, s);
    }
}

static void attention_run(float *out, const float *q, const struct ll_kv_cache *kv, int layer,
                          const struct ll_attn_batch *b, int n_heads, float *scratch,
                          int max_keys, struct ll_pool *pool, const struct attn_loops *loops)
{
    LL_ASSERT(layer >= 0 && layer < kv->n_layers);
    LL_ASSERT(n_heads >= kv->n_kv_heads && n_heads % kv->n_kv_heads == 0);
    LL_ASSERT(n_heads / kv->n_kv_heads <= LL_ATTN_MAX_GROUP);
    LL_ASSERT(b->block_size >= 1);
    struct attn_job job = {
        .out = out, .q = q, .kv = kv, .layer = layer, .b = b, .n_heads = n_heads,
        .group = n_heads / kv->n_kv_heads, .scratch = scratch, .max_keys = max_keys,
        .loops = loops,
    };
    atomic_init(&job.next, 0);
    ll_pool_run(pool, attn_worker, &job);
}

void ll_attention(float *out, const float *q, const struct ll_kv_cache *kv, int layer,
                  const struct ll_attn_batch *b, int n_heads, float *scratch, int max_keys,
                  struct ll_pool *pool)
{
    attention_run(out, q, kv, layer, b, n_heads, scratch, max_keys, pool,
                  pick_loops(kv->head_dim));
}

void ll_attention_ref(float *out, const float *q, const struct ll_kv_cache *kv, int layer,
                      const struct ll_attn_batch *b, int n_heads, float *scratch, int max_keys)
{
    attention_run(out, q, kv, layer, b, n_heads, scratch, max_keys, NULL, &loops_ref);
}
