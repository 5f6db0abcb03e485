/*
 * qmatmul.c: ll_qmatmul's dispatch (variant chosen once by CPU features, capped by
 * LLAISYS_KERNEL), its split over the thread pool, the carving of the caller's scratch into the
 * quantized activations, and the scalar variant, which is also the reference ll_qmatmul_ref (see
 * qmatmul.h for the contract and the exact result).
 *
 * Called from the thread that owns the pool; the kernels run on the pool's threads on disjoint
 * output ranges. The scalar code below spells out the result one block at a time; the SIMD files
 * reach the same integer sums 16 (zmm) or 8 (ymm) output rows at a time, the AMX file 16 × 16
 * per tile. A variant with a minimum M (amx) hands smaller calls to its `small` variant; the
 * results are the same bits, so a row's output does not depend on which one ran.
 */
#include "qmatmul.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "log.h"
#include "qmatmul_kernels.h"
#include "quant_layout.h"
#include "util.h"

/* ---- the scalar variant ---- */

static void quant_scalar(const struct ll_qmm_job *j, int m0, int m1)
{
    for (int m = m0; m < m1; m++)
        for (int b = 0; b < j->nb; b++) {
            const float *x = j->x + (size_t)m * (size_t)j->K + (size_t)b * LL_QBLOCK;
            int8_t *q = j->xq + (size_t)m * (size_t)j->K + (size_t)b * LL_QBLOCK;
            float amax = 0.0f, d, id;
            for (int i = 0; i < LL_QBLOCK; i++)
                amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            ll_qmm_act_scale(amax, &d, &id);
            int32_t sum = 0;
            for (int i = 0; i < LL_QBLOCK; i++) {
                q[i] = (int8_t)lrintf(x[i] * id); /* round half to even: the default mode */
                sum += q[i];
            }
            j->xd[(size_t)m * (size_t)j->nb + (size_t)b] = d;
            j->xs[(size_t)m * (size_t)j->nb + (size_t)b] = sum;
        }
}

/* xm = (float)xs · xd for rows [m0, m1) (the q4_k min term's factor; one f32 rounding). */
static void act_min_factors(const struct ll_qmm_job *j, int m0, int m1)
{
    for (size_t i = (size_t)m0 * (size_t)j->nb; i < (size_t)m1 * (size_t)j->nb; i++)
        j->xm[i] = (float)j->xs[i] * j->xd[i];
}

/* Weight element i of block b of row n, as the integer wq of qmatmul.h. */
static int w_int(const struct ll_qweight *w, int nb, int n, int b, int i)
{
    uint8_t byte = w->qs[ll_q_offset(w->type, nb, n, b, i)];
    if (w->type == LL_Q8_0)
        return (int8_t)byte;
    return (i < LL_QBLOCK / 2 ? byte & 15 : byte >> 4) - (w->type == LL_Q4_0 ? 8 : 0);
}

/* q4_k: ds = d_B · sc_j and dm = dmin_B · m_j of block b of row n (both exact). */
static void k_scales(const struct ll_qweight *w, int nb, int n, int b, float *ds, float *dm)
{
    const int nsb = ll_qk_nsb(nb), B = b / LL_QK_BLOCKS, j = b % LL_QK_BLOCKS;
    const uint8_t *sb = (const uint8_t *)w->d + ll_qk_sb_offset(nsb, n, B);
    uint16_t dh, mh;
    uint32_t c[3];
    memcpy(&dh, sb + 2 * (n % LL_QGROUP), 2);
    memcpy(&mh, sb + 32 + 2 * (n % LL_QGROUP), 2);
    ll_qk_read_codes(c, (const uint8_t *)w->d, nsb, n, B);
    *ds = ll_f16_to_f32(dh) * (float)ll_qk_code(c, j);
    *dm = ll_f16_to_f32(mh) * (float)ll_qk_code(c, LL_QK_BLOCKS + j);
}

static void kernel_scalar(const struct ll_qmm_job *j, int m0, int m1, int g0, int g1)
{
    const int n1 = g1 * LL_QGROUP < j->N ? g1 * LL_QGROUP : j->N;
    for (int m = m0; m < m1; m++)
        for (int n = g0 * LL_QGROUP; n < n1; n++) {
            const int8_t *q = j->xq + (size_t)m * (size_t)j->K;
            float acc = 0.0f;
            for (int b = 0; b < j->nb; b++) {
                int32_t s = 0;
                for (int i = 0; i < LL_QBLOCK; i++)
                    s += w_int(j->w, j->nb, n, b, i) * q[b * LL_QBLOCK + i];
                const size_t mb = (size_t)m * (size_t)j->nb + (size_t)b;
                if (j->w->type == LL_Q4_K) {
                    float ds, dm;
                    k_scales(j->w, j->nb, n, b, &ds, &dm);
                    acc = fmaf((float)s, ds * j->xd[mb], acc);
                    acc = fmaf(-dm, j->xm[mb], acc);
                } else {
                    float scale = ll_f16_to_f32(j->w->d[ll_q_d_index(j->nb, n, b)]) * j->xd[mb];
                    acc = fmaf((float)s, scale, acc);
                }
            }
            j->out[(size_t)m * (size_t)j->N + (size_t)n] = j->bias ? acc + j->bias[n] : acc;
        }
}

/* ---- variants and dispatch ---- */

struct variant {
    const char *name;
    ll_qmm_kernel_fn kernel;
    ll_qmm_quant_fn quant;
    int min_m; /* a call with fewer rows of x runs variant `small` (the tile variants) */
    int small;
};

/* In order of preference; amx-emul (the AMX kernel on emulated tiles, qmatmul_amx.c) is for
 * tests and benchmarks only: it is never wanted, so dispatch never picks it. */
enum { V_SCALAR, V_AVX2, V_AVXVNNI, V_AVX512VNNI, V_AMX, V_AMX_EMUL, V_COUNT };

static const struct variant variants[V_COUNT] = {
    [V_SCALAR] = {"scalar", kernel_scalar, quant_scalar, 0, V_SCALAR},
    [V_AVX2] = {"avx2", ll_qmm_kernel_avx2, ll_qmm_quant_avx2, 0, V_AVX2},
    [V_AVXVNNI] = {"avxvnni", ll_qmm_kernel_avxvnni, ll_qmm_quant_avxvnni, 0, V_AVXVNNI},
    [V_AVX512VNNI] = {"avx512vnni", ll_qmm_kernel_vnni512, ll_qmm_quant_vnni512, 0, V_AVX512VNNI},
    [V_AMX] = {"amx", ll_qmm_kernel_amx, ll_qmm_quant_vnni512, LL_QMM_AMX_MIN_M, V_AVX512VNNI},
    [V_AMX_EMUL] = {"amx-emul", ll_qmm_kernel_amx_emul, quant_scalar, LL_QMM_AMX_MIN_M, V_SCALAR},
};

static pthread_once_t variant_once = PTHREAD_ONCE_INIT;
static const struct variant *variant_cur;

static bool cpu_runs(int v)
{
    bool avx2 = ll_isa_cpu_avx2();
    bool vnni512 = ll_isa_cpu_avx512() && __builtin_cpu_supports("avx512vnni");
    switch (v) {
    case V_AMX: /* asks Linux for the tile state, once per process, before any kernel runs */
        return vnni512 && ll_isa_amx_ready(NULL);
    case V_AVX512VNNI:
        return vnni512;
    case V_AVXVNNI:
        return avx2 && __builtin_cpu_supports("avxvnni");
    case V_AVX2:
        return avx2;
    default:
        return true;
    }
}

static int variant_by_name(const char *name)
{
    for (int v = 0; v < V_COUNT; v++)
        if (!strcmp(name, variants[v].name))
            return v;
    return -1;
}

/* The best variant within the LLAISYS_KERNEL cap (isa.h) that this CPU runs. */
static void variant_init(void)
{
    bool requested;
    enum ll_isa cap = ll_isa_cap(&requested);
    int want = cap >= LL_ISA_AMX       ? V_AMX
               : cap >= LL_ISA_AVX512  ? V_AVX512VNNI
               : cap >= LL_ISA_AVXVNNI ? V_AVXVNNI
               : cap >= LL_ISA_AVX2    ? V_AVX2
                                       : V_SCALAR;
    int v = want;
    while (v > V_SCALAR && !cpu_runs(v))
        v--;
    if (requested && v != want)
        log_msg(LOG_WARN, "LLAISYS_KERNEL=%s: this CPU cannot run the %s qmatmul; using %s",
                ll_isa_name(cap), variants[want].name, variants[v].name);
    variant_cur = &variants[v];
}

static const struct variant *variant_get(void)
{
    pthread_once(&variant_once, variant_init);
    return variant_cur;
}

const char *ll_qmatmul_variant(void)
{
    return variant_get()->name;
}

bool ll_qmatmul_set_variant(const char *name)
{
    int v = variant_by_name(name);
    if (v < 0 || !cpu_runs(v))
        return false;
    pthread_once(&variant_once, variant_init);
    variant_cur = &variants[v];
    return true;
}

/* ---- scratch ---- */

static size_t round64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* The scratch of an (M, K) call: xq (M, K) bytes, then xd, xs and xm (M, K/32) 4-byte words
 * each, every part starting on a 64-byte boundary. */
static size_t scratch_layout(int M, int K, size_t *xd_off, size_t *xs_off, size_t *xm_off)
{
    size_t nb = (size_t)K / LL_QBLOCK, words = round64((size_t)M * nb * 4);
    *xd_off = round64((size_t)M * (size_t)K);
    *xs_off = *xd_off + words;
    *xm_off = *xs_off + words;
    return *xm_off + words;
}

size_t ll_qmatmul_scratch_bytes(int max_m, int max_k)
{
    LL_ASSERT(max_m >= 0 && max_k >= 0);
    size_t a, b, c;
    int k = (max_k + LL_QBLOCK - 1) / LL_QBLOCK * LL_QBLOCK;
    return scratch_layout(max_m, k, &a, &b, &c);
}

static void job_init(struct ll_qmm_job *j, float *out, const float *x,
                     const struct ll_qweight *w, const float *bias, int M, void *scratch,
                     size_t scratch_bytes)
{
    LL_ASSERT(M >= 0 && w->n >= 1 && w->k >= LL_QBLOCK && w->k % LL_QBLOCK == 0 && w->qs &&
              w->d);
    size_t xd_off, xs_off, xm_off, need = scratch_layout(M, w->k, &xd_off, &xs_off, &xm_off);
    LL_ASSERT(scratch && ((uintptr_t)scratch & 63) == 0 && scratch_bytes >= need);
    *j = (struct ll_qmm_job){
        .out = out, .x = x, .bias = bias, .w = w, .M = M, .N = w->n, .K = w->k,
        .nb = w->k / LL_QBLOCK, .xq = scratch, .xd = (float *)((char *)scratch + xd_off),
        .xs = (int32_t *)((char *)scratch + xs_off), .xm = (float *)((char *)scratch + xm_off),
    };
}

/* ---- splitting one call over the pool ---- */

#define QUANT_PARALLEL_MIN (1 << 15) /* M·K from which quantizing x is split over threads */

struct qmm_call {
    const struct ll_qmm_job *job;
    ll_qmm_quant_fn quant;
    ll_qmm_kernel_fn kernel;
};

/* Rows [m0, m1) of the activations quantized, with the min factors when the weight is q4_k. */
static void call_quant_rows(const struct qmm_call *c, int m0, int m1)
{
    c->quant(c->job, m0, m1);
    if (c->job->w->type == LL_Q4_K)
        act_min_factors(c->job, m0, m1);
}

static void qmm_call_quant(void *ctx, int ith, int nth)
{
    const struct qmm_call *c = ctx;
    int lo, hi;
    ll_split(c->job->M, ith, nth, &lo, &hi);
    if (lo < hi)
        call_quant_rows(c, lo, hi);
}

/* Threads take whole groups of 16 output rows, or rows of x when there are fewer groups than
 * threads and enough rows (then one share each), through ll_pool_run_ranges with the grain of
 * ll_pool_matmul_grain: a thread done early takes over a late one's pieces. A panel of
 * GROUP_PANEL groups holds whole tiles of every variant (3 groups in avx512vnni, 2 in amx, 1 in
 * avx2 / avxvnni); a single row of x streams one group at a time everywhere. */
#define GROUP_PANEL 6
static void qmm_call_groups(void *ctx, int lo, int hi, int ith)
{
    (void)ith;
    const struct qmm_call *c = ctx;
    c->kernel(c->job, 0, c->job->M, lo, hi);
}

static void qmm_call_rows(void *ctx, int lo, int hi, int ith)
{
    (void)ith;
    const struct qmm_call *c = ctx;
    c->kernel(c->job, lo, hi, 0, (c->job->N + LL_QGROUP - 1) / LL_QGROUP);
}

void ll_qmatmul(float *out, const float *x, const struct ll_qweight *w, const float *bias, int M,
                void *scratch, size_t scratch_bytes, struct ll_pool *pool)
{
    struct ll_qmm_job job;
    job_init(&job, out, x, w, bias, M, scratch, scratch_bytes);
    if (M == 0)
        return;
    const struct variant *v = variant_get();
    if (M < v->min_m)
        v = &variants[v->small];
    struct qmm_call call = {.job = &job, .quant = v->quant, .kernel = v->kernel};
    if ((size_t)M * (size_t)w->k >= QUANT_PARALLEL_MIN && ll_pool_size(pool) > 1 && M > 1)
        ll_pool_run(pool, qmm_call_quant, &call);
    else
        call_quant_rows(&call, 0, M);
    int groups = (w->n + LL_QGROUP - 1) / LL_QGROUP, nth = ll_pool_size(pool);
    if (groups >= nth || M < nth)
        ll_pool_run_ranges(pool, groups, ll_pool_matmul_grain(M, groups, GROUP_PANEL),
                           qmm_call_groups, &call);
    else
        ll_pool_run_ranges(pool, M, M, qmm_call_rows, &call);
}

void ll_qmatmul_ref(float *out, const float *x, const struct ll_qweight *w, const float *bias,
                    int M)
{
    LL_ASSERT(M >= 0);
    if (M == 0)
        return;
    size_t bytes = ll_qmatmul_scratch_bytes(M, w->k);
    void *scratch = aligned_alloc(64, bytes);
    LL_ASSERT(scratch != NULL);
    struct ll_qmm_job job;
    job_init(&job, out, x, w, bias, M, scratch, bytes);
    struct qmm_call call = {.job = &job, .quant = quant_scalar, .kernel = kernel_scalar};
    call_quant_rows(&call, 0, M);
    kernel_scalar(&job, 0, M, 0, (w->n + LL_QGROUP - 1) / LL_QGROUP);
    free(scratch);
}
