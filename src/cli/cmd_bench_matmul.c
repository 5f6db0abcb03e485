/*
 * cmd_bench_matmul.c: `llaisys-cli bench-matmul`, the kernel micro-benchmark.
 *
 * Times ll_matmul (bf16/f16/f32 weights) or ll_qmatmul (q8_0/q4_0/q4_k weights, integer dot
 * products) on the linear layers of DeepSeek-R1-Distill-Qwen-1.5B for a list of batch sizes M,
 * with random weights, on the project's thread pool, and prints GFLOP/s (2·M·N·K per call; for
 * the integer kernels these are operations on quantized values) and the weight bytes (for
 * q8_0/q4_0/q4_k data plus scales) streamed per second. For comparison it times OpenBLAS sgemm on f32 copies
 * of the same weights, run on the same pool with OpenBLAS single-threaded in each thread (each
 * thread multiplies its share of the columns), so exactly one component owns the cores (not for
 * the quantized types).
 * Weights are streamed from memory as in a real forward pass (3 GB per decode step): the benchmark
 * keeps enough copies of each weight matrix to exceed the caches (weight_set_bytes) and uses the
 * next copy on every call. Timings are medians of repeated calls after one warm-up call.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "cli_args.h"
#include "commands.h"
#include "matmul.h"
#include "pool.h"
#include "qmatmul.h"
#include "quant.h"
#include "util.h"

struct shape {
    const char *name;
    int n, k;
};

static const struct shape shapes[] = {
    {"q/o", 1536, 1536}, {"k/v", 256, 1536}, {"gate/up", 8960, 1536},
    {"down", 1536, 8960}, {"lm_head", 151936, 1536},
};

static const int default_ms[] = {1, 4, 16, 64, 128, 512};

/* Bytes of weight copies cycled through: 256 MiB, or twice the L3 where that is larger (some
 * server parts have L3s of a few hundred MiB). */
static size_t weight_set_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t set = (size_t)256 << 20;
    return l3 > 0 && 2 * (size_t)l3 > set ? 2 * (size_t)l3 : set;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli bench-matmul [options]\n"
            "  -t, --threads N     threads in the pool (default 2)\n"
            "  --math fast|exact   math mode (default fast)\n"
            "  --wtype bf16|bf16p|f16|f32|q8_0|q4_0|q4_k  weight type (default bf16; bf16p:\n"
            "                      bf16 packed losslessly, read by decode-sized calls)\n"
            "  --paired            with bf16p: alternate each call with the same call on the\n"
            "                      bf16 copy; print the median ratio of the pairs\n"
            "  --m LIST            batch sizes, comma-separated (default 1,4,16,64,128,512)\n"
            "  --shape LIST        shapes among q/o,k/v,gate/up,down,lm_head (default all)\n"
            "  --time S            seconds to spend per measurement (default 0.3)\n"
            "  --no-blas           skip the OpenBLAS sgemm comparison (always for q8_0/q4_0/q4_k)\n"
            "  --variant NAME      scalar|avx2|avx512|amx|amx-emul for matmul, scalar|avx2|avxvnni|\n"
            "                      avx512vnni|amx|amx-emul for q8_0/q4_0/q4_k (default: the best\n"
            "                      this CPU runs; amx-emul: the AMX kernel on emulated tiles, slow)\n");
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float rand_unit(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

struct blas_call {
    const float *x, *w;
    float *out;
    int m, n, k;
};

/* Each thread: sgemm on its share of columns (OpenBLAS itself single-threaded). */
static void blas_part(void *ctx, int ith, int nth)
{
    const struct blas_call *c = ctx;
    int lo, hi;
    ll_split((c->n + 15) / 16, ith, nth, &lo, &hi);
    lo *= 16;
    hi = hi * 16 < c->n ? hi * 16 : c->n;
    if (lo < hi)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->m, hi - lo, c->k, 1.0f, c->x, c->k,
                    c->w + (size_t)lo * c->k, c->k, 0.0f, c->out + lo, c->n);
}

/* Random weights (N, K) quantized into one copy at w: the qs plane (qs_bytes), then the d plane.
 * Generated 16 rows at a time: rows [16a, 16b) of a matrix are the contiguous slices of its
 * planes that an (16b − 16a, K) matrix of those rows has (quant.h). Returns 0, or -1 without
 * memory. */
static int quantize_random(char *w, size_t qs_bytes, enum ll_qtype t, int N, int K)
{
    float *rows = malloc((size_t)LL_QGROUP * (size_t)K * sizeof *rows);
    if (!rows)
        return -1;
    size_t q_row = ll_qweight_qs_bytes(t, LL_QGROUP, K) / LL_QGROUP;
    size_t d_row = ll_qweight_d_bytes(t, LL_QGROUP, K) / LL_QGROUP;
    for (int n = 0; n < N; n += LL_QGROUP) {
        int rn = N - n < LL_QGROUP ? N - n : LL_QGROUP;
        for (size_t i = 0; i < (size_t)rn * (size_t)K; i++)
            rows[i] = rand_unit() * 0.05f;
        LL_ASSERT(ll_quantize_rows((uint8_t *)w + (size_t)n * q_row,
                                   (uint16_t *)(w + qs_bytes + (size_t)n * d_row), t, rows, LL_F32,
                                   rn, K, 0, rn, NULL) == LL_OK);
    }
    free(rows);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds per call of fn over about `budget` seconds (at least 3 calls after a warm-up). */
#define MAX_REPS 1000
#define HUGE_PAGE ((size_t)2 << 20)
static double time_calls(void (*fn)(void *), void *arg, double budget)
{
    static double t[MAX_REPS];
    fn(arg);
    int n = 0;
    double start = ll_now();
    while (n < MAX_REPS && (n < 3 || ll_now() - start < budget)) {
        double a = ll_now();
        fn(arg);
        t[n++] = ll_now() - a;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

struct ours_call {
    float *out;
    const float *x;
    const char *w; /* n_copies copies of (N, K), copy_bytes apart; quantized: qs then d */
    size_t copy_bytes;
    int n_copies, next;
    bool quant;          /* q8_0/q4_0/q4_k: ll_qmatmul */
    enum ll_qtype qtype;
    size_t qs_bytes;     /* quantized: bytes of the qs plane at the start of each copy */
    enum ll_dtype wtype;
    bool packed; /* bf16p: a bf16 matrix then its packed planes (ll_matmul_packed) */
    const uint16_t *esc; /* bf16p: the escape table */
    int m, n, k;
    enum ll_math math;
    void *scratch; /* (scratch_bytes) ll_matmul's, sized for (m, k) */
    size_t scratch_bytes;
    struct ll_pool *pool;
};

static void run_ours(void *arg)
{
    struct ours_call *c = arg;
    const char *w = c->w + (size_t)c->next * c->copy_bytes;
    c->next = (c->next + 1) % c->n_copies;
    if (c->quant) {
        struct ll_qweight qw;
        LL_ASSERT(ll_qweight_init(&qw, c->qtype, c->n, c->k, w, c->qs_bytes, w + c->qs_bytes,
                                  c->copy_bytes - c->qs_bytes, NULL) == LL_OK);
        ll_qmatmul(c->out, c->x, &qw, NULL, c->m, c->scratch, c->scratch_bytes, c->pool);
        return;
    }
    if (c->packed) {
        struct ll_bf16p pk;
        ll_bf16p_init(&pk, (const uint16_t *)w, c->n, c->k,
                      (char *)w + (size_t)c->n * (size_t)c->k * 2);
        pk.esc = c->esc;
        ll_matmul_packed(c->out, c->x, &pk, NULL, c->m, c->math, c->scratch, c->scratch_bytes,
                         c->pool);
        return;
    }
    ll_matmul(c->out, c->x, w, c->wtype, NULL, c->m, c->n, c->k, c->math, c->scratch,
              c->scratch_bytes, c->pool);
}

struct blas_run {
    struct blas_call call;
    const float *w; /* n_copies copies of (N, K) */
    int n_copies, next;
    struct ll_pool *pool;
};

static void run_blas(void *arg)
{
    struct blas_run *r = arg;
    r->call.w = r->w + (size_t)r->next * r->call.n * r->call.k;
    r->next = (r->next + 1) % r->n_copies;
    ll_pool_run(r->pool, blas_part, &r->call);
}

static void empty_part(void *ctx, int ith, int nth)
{
    (void)ctx, (void)ith, (void)nth;
}

static void run_empty(void *arg)
{
    for (int i = 0; i < 100; i++)
        ll_pool_run(arg, empty_part, NULL);
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 16)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* --paired: calls of a (the bf16 copy) and b (the packed planes) alternately over about
 * `budget` seconds each, so that drifts of the machine's memory bandwidth hit both alike; the
 * medians of each and the p10 / median / p90 of the per-pair ratios a / b. */
static void time_pairs(struct ours_call *a, struct ours_call *b, double budget, double *ta,
                       double *tb, double ratio[3])
{
    static double x[MAX_REPS], y[MAX_REPS], r[MAX_REPS];
    run_ours(a);
    run_ours(b);
    int n = 0;
    double start = ll_now();
    while (n < MAX_REPS && (n < 5 || ll_now() - start < 2 * budget)) {
        double t0 = ll_now();
        run_ours(a);
        double t1 = ll_now();
        run_ours(b);
        double t2 = ll_now();
        x[n] = t1 - t0, y[n] = t2 - t1, r[n] = x[n] / y[n];
        n++;
    }
    qsort(x, (size_t)n, sizeof x[0], cmp_double);
    qsort(y, (size_t)n, sizeof y[0], cmp_double);
    qsort(r, (size_t)n, sizeof r[0], cmp_double);
    *ta = x[n / 2], *tb = y[n / 2];
    ratio[0] = r[n / 10], ratio[1] = r[n / 2], ratio[2] = r[n * 9 / 10];
}

int cmd_bench_matmul(int argc, char **argv)
{
    int ms[16], n_ms = 0;
    long long n_threads = 2;
    bool use_blas = true;
    double budget = 0.3;
    enum ll_math math = LL_MATH_FAST;
    enum ll_dtype wtype = LL_BF16;
    bool quant = false;
    enum ll_qtype qtype = LL_Q8_0;
    const char *shape_list = NULL, *variant = NULL, *math_s = "fast", *wtype_s = "bf16";
    bool packed = false, paired = false;
    const char *m_s = NULL;
    memcpy(ms, default_ms, sizeof default_ms);
    n_ms = (int)(sizeof default_ms / sizeof default_ms[0]);
    const struct cli_arg args[] = {
        CLI_INT("--threads", &n_threads, 1, 256),
        CLI_INT("-t", &n_threads, 1, 256),
        CLI_STR("--math", &math_s),
        CLI_STR("--wtype", &wtype_s),
        CLI_STR("--m", &m_s),
        CLI_STR("--shape", &shape_list),
        CLI_NUM("--time", &budget, 0.001, 3600),
        CLI_CLEAR("--no-blas", &use_blas),
        CLI_SET("--paired", &paired),
        CLI_STR("--variant", &variant),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "bench-matmul", .usage = usage, .args = args};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    int threads = (int)n_threads;
    if (strcmp(math_s, "fast") && strcmp(math_s, "exact"))
        return cli_args_fail(&cmd, "--math must be fast or exact");
    math = !strcmp(math_s, "fast") ? LL_MATH_FAST : LL_MATH_EXACT;
    if (!strcmp(wtype_s, "bf16") || !strcmp(wtype_s, "bf16p")) {
        wtype = LL_BF16;
        packed = !strcmp(wtype_s, "bf16p");
    } else if (!strcmp(wtype_s, "f16"))
        wtype = LL_F16;
    else if (!strcmp(wtype_s, "f32"))
        wtype = LL_F32;
    else if (ll_qtype_parse(wtype_s, &qtype))
        quant = true;
    else
        return cli_args_fail(&cmd, "--wtype must be bf16, bf16p, f16, f32 or a quantized type");
    if (paired && !packed)
        return cli_args_fail(&cmd, "--paired compares bf16p with bf16: it needs --wtype bf16p");
    if (paired)
        use_blas = 0;
    if (m_s && (n_ms = parse_list(m_s, ms, 16)) <= 0)
        return cli_args_fail(&cmd, "--m needs batch sizes in [1, 65536], comma-separated");
    if (quant)
        use_blas = 0;
    if (variant && !(quant ? ll_qmatmul_set_variant(variant) : ll_matmul_set_variant(variant))) {
        fprintf(stderr, "llaisys-cli bench-matmul: variant '%s' unknown or not supported by this CPU\n",
                variant);
        return 2;
    }

    struct ll_pool *pool;
    struct ll_err err;
    if (ll_pool_create(&pool, threads, &err) != LL_OK) {
        fprintf(stderr, "bench-matmul: %s\n", err.msg);
        return 1;
    }
    openblas_set_num_threads(1);
    int max_m = 1;
    for (int i = 0; i < n_ms; i++)
        max_m = ms[i] > max_m ? ms[i] : max_m;

    if (quant)
        printf("bench-matmul: qmatmul variant %s, %d threads, weights %s (data + scales)\n",
               ll_qmatmul_variant(), threads, ll_qtype_name(qtype));
    else
        printf("bench-matmul: variant %s, %d threads, math %s, weights %s%s\n",
               ll_matmul_variant(), threads, math == LL_MATH_FAST ? "fast" : "exact",
               packed ? "BF16, packed (W GB/s: bytes of the packed planes)" : ll_dtype_name(wtype),
               use_blas ? "; sgemm = OpenBLAS f32, single-threaded in each pool thread" : "");
    printf("pool: one ll_pool_run of an empty op, round trip: %.2f us; weights cycled through "
           "%zu MiB of copies\n", time_calls(run_empty, pool, budget) / 100 * 1e6,
           weight_set_bytes() >> 20);
    printf("%-8s %6s %5s %4s %9s %8s %8s %s\n", "shape", "N", "K", "M", "ms", "GFLOP/s",
           "W GB/s", use_blas ? " sgemm GFLOP/s" : "");

    int rc = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const struct shape *sh = &shapes[s];
        if (shape_list) { /* exact names in a comma-separated list */
            const char *p = strstr(shape_list, sh->name);
            size_t len = strlen(sh->name);
            if (!p || (p != shape_list && p[-1] != ',') || (p[len] && p[len] != ','))
                continue;
        }
        size_t nw = (size_t)sh->n * sh->k, copy_bytes = nw * ll_dtype_size(wtype), qs_bytes = 0;
        if (quant) {
            qs_bytes = ll_qweight_qs_bytes(qtype, sh->n, sh->k);
            copy_bytes = qs_bytes + ll_qweight_d_bytes(qtype, sh->n, sh->k);
        }
        if (packed)
            copy_bytes += ll_bf16p_bytes(sh->n, sh->k);
        size_t set = weight_set_bytes();
        int copies = (int)((set + copy_bytes - 1) / copy_bytes);
        int copies32 = (int)((set + nw * 4 - 1) / (nw * 4));
        /* on huge pages where the kernel grants them, as the model's weights are (fewer TLB
         * misses while a GEMV streams them) */
        size_t w_bytes = (copy_bytes * (size_t)copies + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        char *w = aligned_alloc(HUGE_PAGE, w_bytes);
        if (w)
            (void)madvise(w, w_bytes, MADV_HUGEPAGE);
        float *w32 = use_blas ? malloc(nw * sizeof *w32 * (size_t)copies32) : NULL;
        float *x = malloc((size_t)max_m * sh->k * sizeof *x);
        float *out = malloc((size_t)max_m * sh->n * sizeof *out);
        size_t scratch_bytes = quant ? ll_qmatmul_scratch_bytes(max_m, sh->k)
                                     : ll_matmul_scratch_bytes(max_m, sh->k, threads);
        void *scratch = aligned_alloc(64, scratch_bytes);
        if (!w || !x || !out || !scratch || (use_blas && !w32)) {
            fprintf(stderr, "bench-matmul: out of memory for shape %s\n", sh->name);
            free(w), free(w32), free(x), free(out), free(scratch);
            rc = 1;
            break;
        }
        if (quant && quantize_random(w, qs_bytes, qtype, sh->n, sh->k) != 0) {
            fprintf(stderr, "bench-matmul: out of memory for shape %s\n", sh->name);
            free(w), free(x), free(out), free(scratch);
            rc = 1;
            break;
        }
        for (size_t i = 0; !quant && i < nw; i++) {
            float f = rand_unit() * 0.05f;
            if (wtype == LL_BF16)
                ((uint16_t *)w)[i] = ll_f32_to_bf16(f);
            else if (wtype == LL_F16)
                ((uint16_t *)w)[i] = ll_f32_to_f16(f);
            else
                ((float *)w)[i] = f;
            if (w32)
                w32[i] = f;
        }
        uint16_t *esc = NULL; /* the escape table, shared by the copies */
        if (packed) {
            struct ll_bf16p pk;
            ll_bf16p_init(&pk, (const uint16_t *)w, sh->n, sh->k, w + nw * 2);
            if (!(esc = ll_bf16p_pack(&pk))) {
                fprintf(stderr, "bench-matmul: out of memory for shape %s\n", sh->name);
                free(w), free(w32), free(x), free(out), free(scratch);
                rc = 1;
                break;
            }
        }
        for (int c = 1; c < copies; c++)
            memcpy(w + (size_t)c * copy_bytes, w, copy_bytes);
        for (int c = 1; w32 && c < copies32; c++)
            memcpy(w32 + (size_t)c * nw, w32, nw * sizeof *w32);
        for (size_t i = 0; i < (size_t)max_m * sh->k; i++)
            x[i] = rand_unit();
        for (int i = 0; i < n_ms; i++) {
            int m = ms[i];
            double flop = 2.0 * m * sh->n * sh->k;
            double wbytes = packed ? (double)ll_bf16p_bytes(sh->n, sh->k) : (double)copy_bytes;
            struct ours_call oc = {out,   x,        w,        copy_bytes, copies,        0,
                                   quant, qtype,    qs_bytes, wtype,      packed,        esc,
                                   m,     sh->n,    sh->k,    math,       scratch,
                                   scratch_bytes,   pool};
            if (paired) {
                struct ours_call ob = oc;
                ob.packed = false;
                ob.next = copies / 2; /* never the copy the other call just read */
                double ta, tb, r[3];
                time_pairs(&ob, &oc, budget, &ta, &tb, r);
                printf("%-8s %6d %5d %4d %9.3f %8.1f %8.1f   bf16 %.3f ms; bf16 / bf16p per pair "
                       "p10 %.3f median %.3f p90 %.3f\n",
                       sh->name, sh->n, sh->k, m, tb * 1e3, flop / tb * 1e-9, wbytes / tb * 1e-9,
                       ta * 1e3, r[0], r[1], r[2]);
                fflush(stdout);
                continue;
            }
            double t = time_calls(run_ours, &oc, budget);
            printf("%-8s %6d %5d %4d %9.3f %8.1f %8.1f", sh->name, sh->n, sh->k, m, t * 1e3,
                   flop / t * 1e-9, wbytes / t * 1e-9);
            if (use_blas) {
                struct blas_run br = {{x, w32, out, m, sh->n, sh->k}, w32, copies32, 0, pool};
                double tb = time_calls(run_blas, &br, budget);
                printf("  %8.1f", flop / tb * 1e-9);
            }
            printf("\n");
            fflush(stdout);
        }
        free(w);
        free(esc);
        free(w32);
        free(x);
        free(out);
        free(scratch);
    }
    ll_pool_free(pool);
    return rc;
}
