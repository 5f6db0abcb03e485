/*
 * test_quant_model.c: q8_0, q4_0 and q4_k weights in the model (model_quant.h, model_bind.h) on
 * the tiny-qwen2 fixture (whose K = 64 and 160 give q4_k short super-blocks of 2 and 5 blocks),
 * and the q4_k_m scheme, which mixes q4_k and q8_0 (model_qscheme.h).
 *
 * - Error: the logits of 64 prompt positions with the weights quantized at load, against the
 *   bf16 model's: mean KL divergence, relative RMS logit error and top-1 agreement stay inside
 *   bounds per format (q4_k's below q4_0's); the same weights with a wrong scale (every block
 *   scale, q4_k's super-block d, doubled), for q4_0 and q4_k the two nibbles of every byte
 *   swapped, or for q4_k the minimums dropped (dmin 0) fall outside them, so the bounds would
 *   catch each bug. q4_k_m's error lies between q8_0's and q4_k's.
 * - Round trip: quantizing on 1 and 2 threads gives the same bytes; a directory written by
 *   model_quant_write loads with no work (no quantizing, planes 64-byte aligned in the mmap),
 *   holds the same planes, and gives bit-identical logits (also with the AMX kernel on emulated
 *   tiles serving the 64-row prompt); it is refused as a target without
 *   force, and --quant of another scheme on it is refused. q4_k_m gives each weight the type
 *   its role and layer call for.
 * - Refusals, each with the status and a message naming the tensor or field: a plane of the
 *   wrong shape or dtype, a missing plane, a dense weight beside the planes, a truncated file,
 *   an unknown quant_method, format or layout, quantization_config missing or malformed, planes
 *   of the other type, a non-finite weight when quantizing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "model_quant.h"
#include "qmatmul.h"
#include "runtime.h"
#include "safetensors.h"
#include "sampler.h"
#include "util.h"

#define FIXTURE "tests/fixtures/tiny-qwen2"
#define NPOS 64

static char tmpdir[64];
/* tmpdir/q8_0, tmpdir/q4_0, tmpdir/q4_k, tmpdir/q4_k_m: the fixture quantized by each scheme */
static char q_dir[MODEL_QS_COUNT][128];
/* the scheme that gives every weight type t */
static const enum model_qscheme scheme_of[3] = {
    [LL_Q8_0] = MODEL_QS_Q8_0, [LL_Q4_0] = MODEL_QS_Q4_0, [LL_Q4_K] = MODEL_QS_Q4_K};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* dir quantized at load by scheme `quant`, or as stored when quant < 0 */
static struct model *open_model(const char *dir, int quant, int threads)
{
    struct model_open_opts mo = {.quantize = quant >= 0,
                                 .qscheme = (enum model_qscheme)(quant < 0 ? 0 : quant),
                                 .n_threads = threads};
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, dir, &mo, &err) != LL_OK)
        fail_msg("model_open %s: %s", dir, err.msg);
    return m;
}

static int group_setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/llaisys-test-quant-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    for (int t = 0; t < MODEL_QS_COUNT; t++) {
        snprintf(q_dir[t], sizeof q_dir[t], "%s/%s", tmpdir,
                 model_qscheme_name((enum model_qscheme)t));
        struct model_open_opts mo = {
            .quantize = true, .qscheme = (enum model_qscheme)t, .n_threads = 1};
        struct model *m = NULL;
        struct ll_err err = {0};
        if (model_open(&m, FIXTURE, &mo, &err) != LL_OK ||
            model_quant_write(m, q_dir[t], false, &err) != LL_OK) {
            fprintf(stderr, "setup: %s\n", err.msg);
            model_close(m);
            return -1;
        }
        model_close(m);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The logits (NPOS, vocab) of a fixed pseudo-random prompt of NPOS ids, every position. */
static float *prompt_logits(const struct model *m)
{
    struct runtime_opts ro = {
        .n_ctx = NPOS, .max_batch = NPOS, .n_threads = 1, .math = LL_MATH_FAST};
    struct model_runtime *rt = NULL;
    struct ll_err err = {0};
    assert_int_equal(runtime_create(&rt, m, &ro, &err), LL_OK);
    int32_t ids[NPOS], pos[NPOS];
    uint8_t want[NPOS];
    for (int i = 0; i < NPOS; i++) {
        ids[i] = (int32_t)(sampler_uniform(2024, (uint64_t)i) * 150000);
        pos[i] = i;
        want[i] = 1;
    }
    float *logits = malloc(sizeof(float) * NPOS * (size_t)m->config.vocab_size);
    assert_non_null(logits);
    struct ll_batch b = {.n_tokens = NPOS, .token = ids, .pos = pos, .want_logits = want};
    assert_int_equal(runtime_forward(rt, &b, logits, &err), LL_OK);
    runtime_free(rt);
    return logits;
}

struct error_stats {
    double kl;      /* mean KL(P_base || P_quant) over the positions */
    double rel_rms; /* RMS of the logit error / RMS of the base logits about their row means */
    double top1;    /* share of positions with the same most likely token */
};

static struct error_stats compare(const float *base, const float *q, int V)
{
    struct error_stats s = {0};
    double err2 = 0, var = 0;
    double *lb = malloc(sizeof(double) * (size_t)V), *lq = malloc(sizeof(double) * (size_t)V);
    assert_true(lb && lq);
    for (int p = 0; p < NPOS; p++) {
        const float *b = base + (size_t)p * V, *x = q + (size_t)p * V;
        double mb = -INFINITY, mq = -INFINITY, sb = 0, sq = 0, mean = 0;
        int ab = 0, aq = 0;
        for (int i = 0; i < V; i++) {
            if (b[i] > mb)
                mb = b[i], ab = i;
            if (x[i] > mq)
                mq = x[i], aq = i;
            mean += b[i];
        }
        mean /= V;
        for (int i = 0; i < V; i++) {
            sb += exp(b[i] - mb);
            sq += exp(x[i] - mq);
            err2 += ((double)x[i] - b[i]) * ((double)x[i] - b[i]);
            var += (b[i] - mean) * (b[i] - mean);
        }
        double kl = 0;
        for (int i = 0; i < V; i++) {
            lb[i] = b[i] - mb - log(sb);
            lq[i] = x[i] - mq - log(sq);
            kl += exp(lb[i]) * (lb[i] - lq[i]);
        }
        s.kl += kl / NPOS;
        s.top1 += (ab == aq) / (double)NPOS;
    }
    s.rel_rms = sqrt(err2 / var);
    free(lb);
    free(lq);
    return s;
}

/* ---- error bounds, and the bugs they catch ---- */

enum mutation { MUT_NONE, MUT_SCALE_X2, MUT_NIBBLE_SWAP, MUT_NO_MIN };

/* Apply a mutation to every quantized weight of m (its planes are m->qmem, m's own memory). */
static void mutate(struct model *m, enum mutation mu)
{
    for (int i = 0; i < m->n_linears; i++) {
        struct model_linear *l = m->linears[i];
        assert_true(l->quantized);
        uint16_t *d = (uint16_t *)l->q.d;
        size_t nd = ll_qweight_d_bytes(l->q.type, l->n, l->k) / 2;
        if (mu == MUT_SCALE_X2 && l->q.type == LL_Q4_K) {
            for (size_t k = 0; k < nd; k += 128) /* each super-block: 16 d, 16 dmin, codes */
                for (size_t r = 0; r < 16; r++)
                    d[k + r] = ll_f32_to_f16(2.0f * ll_f16_to_f32(d[k + r]));
        } else if (mu == MUT_NO_MIN) {
            assert_int_equal(l->q.type, LL_Q4_K);
            for (size_t k = 0; k < nd; k += 128)
                for (size_t r = 16; r < 32; r++)
                    d[k + r] = 0;
        } else if (mu == MUT_SCALE_X2) {
            for (size_t k = 0; k < nd; k++)
                d[k] = ll_f32_to_f16(2.0f * ll_f16_to_f32(d[k]));
        } else if (mu == MUT_NIBBLE_SWAP) {
            uint8_t *qs = (uint8_t *)l->q.qs;
            size_t n = ll_qweight_qs_bytes(l->q.type, l->n, l->k);
            for (size_t k = 0; k < n; k++)
                qs[k] = (uint8_t)(qs[k] << 4 | qs[k] >> 4);
        }
    }
}

static struct error_stats quant_error(enum model_qscheme t, enum mutation mu, const float *base)
{
    struct model *m = open_model(FIXTURE, (int)t, 1);
    assert_true(m->quantized && m->qscheme == t && m->quant_seconds > 0);
    mutate(m, mu);
    float *q = prompt_logits(m);
    struct error_stats s = compare(base, q, m->config.vocab_size);
    print_message("%s%s: mean KL %.4g, relative RMS logit error %.4g, top-1 %.3f\n",
                  model_qscheme_name(t),
                  mu == MUT_NONE          ? ""
                  : mu == MUT_SCALE_X2    ? " with scales x2"
                  : mu == MUT_NIBBLE_SWAP ? " nibbles swapped"
                                          : " without minimums",
                  s.kl, s.rel_rms, s.top1);
    free(q);
    model_close(m);
    return s;
}

static void test_error_bounds(void **state)
{
    (void)state;
    struct model *bm = open_model(FIXTURE, -1, 1);
    float *base = prompt_logits(bm);
    /* The bf16 model against itself: no error at all (the comparison can say zero). */
    struct error_stats self = compare(base, base, bm->config.vocab_size);
    assert_true(self.kl == 0 && self.rel_rms == 0 && self.top1 == 1);
    model_close(bm);

    /* Bounds per format. Measured on this fixture, whose logits are large (~100) and peaked, so
     * that small errors show: q8_0 KL 0.041, relative RMS logit error 0.031, top-1 0.95; q4_0
     * KL 5.3, error 0.31, top-1 0.36; q4_k KL 3.9, error 0.28, top-1 0.48. With every scale
     * doubled the error is 1.8 (q8_0, q4_0; q4_k 17), with the nibbles swapped 1.4, without
     * q4_k's minimums 17, KL above 100. */
    const struct {
        double kl_max, rms_min, rms_max, top1_min;
    } bound[3] = {
        [LL_Q8_0] = {0.2, 0.005, 0.08, 0.85},
        [LL_Q4_0] = {12, 0.05, 0.5, 0.2},
        [LL_Q4_K] = {5, 0.05, 0.3, 0.4},
    };
    double kl[3];
    for (int t = 0; t < 3; t++) {
        struct error_stats s = quant_error(scheme_of[t], MUT_NONE, base);
        kl[t] = s.kl;
        assert_true(s.kl > 0 && s.kl < bound[t].kl_max);
        assert_true(s.rel_rms > bound[t].rms_min && s.rel_rms < bound[t].rms_max);
        assert_true(s.top1 >= bound[t].top1_min);
        /* A wrong scale: far outside every bound. */
        struct error_stats w = quant_error(scheme_of[t], MUT_SCALE_X2, base);
        assert_true(w.rel_rms > 1.0 && w.kl > 50 && w.top1 < 0.1);
    }
    assert_true(kl[LL_Q4_K] < 0.85 * kl[LL_Q4_0]); /* what q4_k is for */
    /* q4_k_m: the value projections and layer 1's down projection at 8 bits take a good part
     * of q4_k's error away (measured KL 2.87 against 3.89). */
    struct error_stats km = quant_error(MODEL_QS_Q4_K_M, MUT_NONE, base);
    assert_true(km.kl > kl[LL_Q8_0] && km.kl < 0.8 * kl[LL_Q4_K]);
    assert_true(km.rel_rms > bound[LL_Q8_0].rms_max && km.rel_rms < bound[LL_Q4_K].rms_max);
    /* Swapped nibbles (q4_0, q4_k), dropped minimums (q4_k): far outside too. */
    for (int t = LL_Q4_0; t <= LL_Q4_K; t++) {
        struct error_stats w = quant_error(scheme_of[t], MUT_NIBBLE_SWAP, base);
        assert_true(w.rel_rms > 1.0 && w.kl > 50 && w.top1 < 0.1);
    }
    struct error_stats w = quant_error(MODEL_QS_Q4_K, MUT_NO_MIN, base);
    assert_true(w.rel_rms > 1.0 && w.kl > 50 && w.top1 < 0.1);
    free(base);
}

/* The dequantized weights against the bf16 ones: relative RMS error of each weight matrix, in
 * tight bounds (measured 0.52-0.55 % at 8 bits, 8.4-8.8 % with q4_0, 6.9-7.2 % with q4_k): a
 * scale off by a few percent, or elements in the wrong place, would leave them. */
static void test_weight_error(void **state)
{
    (void)state;
    struct model *bm = open_model(FIXTURE, -1, 1);
    const double lo[3] = {0.004, 0.07, 0.06}, hi[3] = {0.0065, 0.10, 0.078};
    for (int t = 0; t < 3; t++) {
        struct model *qm = open_model(FIXTURE, scheme_of[t], 2);
        assert_int_equal(qm->n_linears, bm->n_linears);
        double worst = 0, best = 1;
        for (int i = 0; i < qm->n_linears; i++) {
            const struct model_linear *q = qm->linears[i], *d = bm->linears[i];
            assert_true(q->quantized && !d->quantized && d->dense.dtype == LL_BF16);
            float *row = malloc(sizeof(float) * (size_t)q->k);
            double e2 = 0, w2 = 0;
            for (int n = 0; n < q->n; n++) {
                ll_dequantize_row(row, &q->q, n);
                const uint16_t *w = (const uint16_t *)d->dense.data + (size_t)n * q->k;
                for (int k = 0; k < q->k; k++) {
                    double x = ll_bf16_to_f32(w[k]);
                    e2 += (row[k] - x) * (row[k] - x);
                    w2 += x * x;
                }
            }
            free(row);
            double r = sqrt(e2 / w2);
            worst = r > worst ? r : worst;
            best = r < best ? r : best;
        }
        print_message("%s: relative RMS weight error %.4f .. %.4f\n",
                      ll_qtype_name((enum ll_qtype)t), best, worst);
        assert_true(best > lo[t] && worst < hi[t]);
        model_close(qm);
    }
    model_close(bm);
}

/* ---- round trip ---- */

static void assert_same_planes(const struct model *a, const struct model *b)
{
    assert_int_equal(a->n_linears, b->n_linears);
    for (int i = 0; i < a->n_linears; i++) {
        const struct model_linear *x = a->linears[i], *y = b->linears[i];
        assert_string_equal(x->name, y->name);
        assert_true(x->quantized && y->quantized && x->q.type == y->q.type);
        assert_int_equal(x->n, y->n);
        assert_int_equal(x->k, y->k);
        assert_memory_equal(x->q.qs, y->q.qs, ll_qweight_qs_bytes(x->q.type, x->n, x->k));
        assert_memory_equal(x->q.d, y->q.d, ll_qweight_d_bytes(x->q.type, x->n, x->k));
    }
}

/* The type of each linear weight of the 2-layer fixture under scheme t: q4_k_m keeps the value
 * projections and the down projection of layer 1 (the last eighth of 2 layers) at 8 bits. */
static enum ll_qtype expected_type(enum model_qscheme t, const char *name)
{
    if (t != MODEL_QS_Q4_K_M)
        return t == MODEL_QS_Q8_0 ? LL_Q8_0 : t == MODEL_QS_Q4_0 ? LL_Q4_0 : LL_Q4_K;
    return strstr(name, "v_proj") || !strcmp(name, "model.layers.1.mlp.down_proj.weight")
               ? LL_Q8_0
               : LL_Q4_K;
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int t = 0; t < MODEL_QS_COUNT; t++) {
        struct model *one = open_model(FIXTURE, t, 1), *two = open_model(FIXTURE, t, 2);
        assert_same_planes(one, two); /* the thread count does not change a byte */
        /* 7 projections a layer and lm_head (quantized although tied to the embedding) */
        assert_int_equal(one->n_linears, 2 * 7 + 1);
        assert_string_equal(one->linears[0]->name, "lm_head.weight");
        int n8 = 0;
        for (int i = 0; i < one->n_linears; i++) {
            const struct model_linear *l = one->linears[i];
            assert_int_equal(l->q.type, expected_type((enum model_qscheme)t, l->name));
            n8 += l->q.type == LL_Q8_0;
        }
        if (t == MODEL_QS_Q4_K_M)
            assert_int_equal(n8, 3); /* two value projections, one down projection */

        struct model *d = open_model(q_dir[t], -1, 1);
        assert_true(d->quantized && d->qscheme == (enum model_qscheme)t);
        assert_true(d->quant_seconds == 0 && d->qmem == NULL); /* no work at start-up */
        assert_int_equal(d->weight_dtype, LL_BF16);            /* the embedding */
        for (int i = 0; i < d->n_linears; i++)
            assert_int_equal((uintptr_t)d->linears[i]->q.qs % 64, 0);
        assert_same_planes(one, d);
        float *la = prompt_logits(one), *lb = prompt_logits(d);
        assert_memory_equal(la, lb, sizeof(float) * NPOS * (size_t)d->config.vocab_size);
        free(lb);
        /* The AMX kernel (on emulated tiles: any CPU) serves the 64-row prompt: the same bits. */
        char v[32];
        snprintf(v, sizeof v, "%s", ll_qmatmul_variant());
        assert_true(ll_qmatmul_set_variant("amx-emul"));
        lb = prompt_logits(d);
        assert_true(ll_qmatmul_set_variant(v));
        assert_memory_equal(la, lb, sizeof(float) * NPOS * (size_t)d->config.vocab_size);
        free(la);
        free(lb);

        /* --quant of the stored scheme is no work; of another scheme, refused. */
        struct model_open_opts mo = {
            .quantize = true, .qscheme = (enum model_qscheme)t, .n_threads = 1};
        struct model *again = NULL;
        struct ll_err err = {0};
        assert_int_equal(model_open(&again, q_dir[t], &mo, &err), LL_OK);
        assert_true(again->quant_seconds == 0 && again->qmem == NULL);
        assert_non_null(again->wmem); /* its planes copied, as without --quant */
        model_close(again);
        mo.qscheme = (enum model_qscheme)((t + 1) % MODEL_QS_COUNT);
        assert_int_equal(model_open(&again, q_dir[t], &mo, &err), LL_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "stored quantized as"));

        /* The target exists: refused without force, replaced with it. */
        assert_int_equal(model_quant_write(one, q_dir[t], false, &err), LL_EINVAL);
        assert_non_null(strstr(err.msg, "already exists"));
        assert_int_equal(model_quant_write(one, q_dir[t], true, &err), LL_OK);
        /* An unquantized model has nothing to write. */
        struct model *plain = open_model(FIXTURE, -1, 1);
        assert_int_equal(model_quant_write(plain, q_dir[t], true, &err), LL_EINVAL);
        model_close(plain);
        model_close(one);
        model_close(two);
        model_close(d);
    }
    /* The copied files and the config. */
    char *a = NULL, *b = NULL, path[256];
    size_t na, nb;
    struct ll_err err = {0};
    assert_int_equal(ll_read_file(FIXTURE "/tokenizer.json", &a, &na, &err), LL_OK);
    snprintf(path, sizeof path, "%s/tokenizer.json", q_dir[MODEL_QS_Q4_0]);
    assert_int_equal(ll_read_file(path, &b, &nb, &err), LL_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    snprintf(path, sizeof path, "%s/config.json", q_dir[MODEL_QS_Q4_0]);
    assert_int_equal(ll_read_file(path, &a, &na, &err), LL_OK);
    assert_non_null(strstr(a, "\"quantization_config\""));
    assert_non_null(strstr(a, "\"format\":\t\"q4_0\""));
    assert_non_null(strstr(a, "\"layout\":\t\"" LL_QLAYOUT "\""));
    assert_non_null(strstr(a, "\"hidden_size\":\t64"));
    free(a);
    snprintf(path, sizeof path, "%s/config.json", q_dir[MODEL_QS_Q4_K]);
    assert_int_equal(ll_read_file(path, &a, &na, &err), LL_OK);
    assert_non_null(strstr(a, "\"format\":\t\"q4_k\""));
    free(a);
    snprintf(path, sizeof path, "%s/config.json", q_dir[MODEL_QS_Q4_K_M]);
    assert_int_equal(ll_read_file(path, &a, &na, &err), LL_OK);
    assert_non_null(strstr(a, "\"format\":\t\"q4_k_m\""));
    free(a);
}

/* ---- refusals ---- */

/* dir/name/ with config.json (text cfg, or the config of src when NULL) and model.safetensors
 * holding src's tensors after edit(list, &n, ctx). Returns the new directory (static). */
typedef void (*edit_fn)(struct st_write_tensor *t, size_t *n, void *ctx);

static const char *variant(const char *src, const char *name, const char *cfg, edit_fn edit,
                           void *ctx)
{
    static char dir[256];
    char path[320], *text = NULL;
    size_t len;
    struct ll_err err = {0};
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", src);
    assert_int_equal(ll_read_file(path, &text, &len, &err), LL_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(ll_write_file(path, cfg ? cfg : text, cfg ? strlen(cfg) : len, &err), LL_OK);
    free(text);

    struct safetensors *st = NULL;
    assert_int_equal(st_open_dir(&st, src, &err), LL_OK);
    size_t n = st_count(st);
    struct st_write_tensor *t = calloc(n + 4, sizeof *t);
    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *x = st_at(st, i);
        t[i] = (struct st_write_tensor){
            .name = x->name, .dtype = x->dtype, .ndim = x->ndim, .data = x->data};
        memcpy(t[i].shape, x->shape, sizeof x->shape);
    }
    if (edit)
        edit(t, &n, ctx);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(st_write(path, t, n, &err), LL_OK);
    free(t);
    st_close(st);
    return dir;
}

static struct st_write_tensor *find(struct st_write_tensor *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

static uint8_t zeros[1 << 16];

/* ctx: "NAME|DTYPE|D0|D1": tensor NAME gets that dtype and shape (zero bytes). */
static void edit_retype(struct st_write_tensor *t, size_t *n, void *ctx)
{
    char name[128], dtype[8];
    long long d0, d1;
    assert_int_equal(sscanf(ctx, "%127[^|]|%7[^|]|%lld|%lld", name, dtype, &d0, &d1), 4);
    struct st_write_tensor *x = find(t, *n, name);
    x->dtype = !strcmp(dtype, "I8")     ? ST_I8
               : !strcmp(dtype, "U8")   ? ST_U8
               : !strcmp(dtype, "BF16") ? ST_BF16
                                        : ST_F16;
    x->shape[0] = d0;
    x->shape[1] = d1;
    assert_true((size_t)(d0 * d1) * st_dtype_size(x->dtype) <= sizeof zeros);
    x->data = zeros;
}

static void edit_drop(struct st_write_tensor *t, size_t *n, void *ctx)
{
    struct st_write_tensor *x = find(t, *n, ctx);
    *x = t[--*n];
}

/* Add a dense BF16 tensor ctx of shape (64, 64). */
static void edit_add_dense(struct st_write_tensor *t, size_t *n, void *ctx)
{
    t[(*n)++] = (struct st_write_tensor){
        .name = ctx, .dtype = ST_BF16, .ndim = 2, .shape = {64, 64}, .data = zeros};
}

static void expect_refused(const char *dir, enum ll_status want, const char *s1, const char *s2)
{
    struct model *m = NULL;
    struct ll_err err = {0};
    enum ll_status s = model_open(&m, dir, NULL, &err);
    print_message("%s: %s\n", dir, err.msg);
    assert_int_equal(s, want);
    assert_null(m);
    assert_non_null(strstr(err.msg, s1));
    if (s2)
        assert_non_null(strstr(err.msg, s2));
}

static void test_refusals(void **state)
{
    (void)state;
    const char *q4 = q_dir[MODEL_QS_Q4_0], *q8 = q_dir[MODEL_QS_Q8_0], *qk = q_dir[MODEL_QS_Q4_K];
    /* planes of the wrong shape or dtype (up_proj is (160, 64): qs [160, 32], d [160, 2]) */
    expect_refused(variant(q4, "qs-shape", NULL, edit_retype,
                           "model.layers.0.mlp.up_proj.weight.qs|U8|160|64"),
                   LL_EMODEL, "'model.layers.0.mlp.up_proj.weight.qs' has shape [160, 64]",
                   "[160, 32]");
    expect_refused(variant(q4, "qs-dtype", NULL, edit_retype,
                           "model.layers.0.mlp.up_proj.weight.qs|I8|160|32"),
                   LL_EMODEL, "'model.layers.0.mlp.up_proj.weight.qs' has dtype I8", "U8");
    expect_refused(variant(q8, "qs-dtype8", NULL, edit_retype,
                           "model.layers.1.mlp.down_proj.weight.qs|U8|64|160"),
                   LL_EMODEL, "'model.layers.1.mlp.down_proj.weight.qs' has dtype U8", "I8");
    expect_refused(variant(q4, "d-shape", NULL, edit_retype,
                           "model.layers.1.self_attn.o_proj.weight.d|F16|64|3"),
                   LL_EMODEL, "'model.layers.1.self_attn.o_proj.weight.d' has shape [64, 3]",
                   "[64, 2]");
    expect_refused(variant(q4, "d-dtype", NULL, edit_retype,
                           "model.layers.1.self_attn.o_proj.weight.d|BF16|64|2"),
                   LL_EMODEL, "'model.layers.1.self_attn.o_proj.weight.d' has dtype BF16", "F16");
    /* k_proj is (32, 64): 2 groups of 16 rows, no padding; its planes cut to one group */
    expect_refused(variant(q8, "rows", NULL, edit_retype,
                           "model.layers.0.self_attn.k_proj.weight.qs|I8|16|64"),
                   LL_EMODEL, "'model.layers.0.self_attn.k_proj.weight.qs' has shape [16, 64]",
                   "[32, 64]");
    /* q4_k: d plane U8 [160, 16] (one 256-byte super-block per group of 16 rows, K = 64) */
    expect_refused(
        variant(qk, "k-d-shape", NULL, edit_retype, "model.layers.0.mlp.up_proj.weight.d|U8|160|2"),
        LL_EMODEL, "'model.layers.0.mlp.up_proj.weight.d' has shape [160, 2]",
        "the scale plane of q4_k weight 'model.layers.0.mlp.up_proj.weight' (160 x 64) "
        "is [160, 16]");
    expect_refused(variant(qk, "k-d-dtype", NULL, edit_retype,
                           "model.layers.0.mlp.up_proj.weight.d|F16|160|8"),
                   LL_EMODEL, "'model.layers.0.mlp.up_proj.weight.d' has dtype F16",
                   "the scale plane of a q4_k weight is U8");
    expect_refused(variant(q4, "d-missing", NULL, edit_drop, "lm_head.weight.d"), LL_EMODEL,
                   "missing tensor 'lm_head.weight.d'", NULL);
    expect_refused(
        variant(q4, "dense-beside", NULL, edit_add_dense, "model.layers.1.self_attn.q_proj.weight"),
        LL_EMODEL, "'model.layers.1.self_attn.q_proj.weight' is stored dense", "q4_0");

    /* a truncated file: the safetensors reader names the tensor that runs past the end */
    const char *tr = variant(q4, "truncated", NULL, NULL, NULL);
    char path[320];
    snprintf(path, sizeof path, "%s/model.safetensors", tr);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 100), 0);
    expect_refused(tr, LL_EFORMAT, "truncated", "tensor '");

    /* config.json */
    char *cfg = NULL;
    size_t len;
    struct ll_err err = {0};
    snprintf(path, sizeof path, "%s/config.json", q4);
    assert_int_equal(ll_read_file(path, &cfg, &len, &err), LL_OK);
    const struct {
        const char *name, *from, *to, *s1;
        enum ll_status want;
    } cfgs[] = {
        {"layout", "\"" LL_QLAYOUT "\"", "\"rows8-blocks32\"",
         "layout \"rows8-blocks32\" is unknown", LL_EUNSUPPORTED},
        {"format", "\"q4_0\"", "\"q3_k\"", "format \"q3_k\" is not supported", LL_EUNSUPPORTED},
        {"method", "\"llaisys\"", "\"gptq\"", "quant_method \"gptq\" is not supported",
         LL_EUNSUPPORTED},
        {"no-layout", "\"layout\"", "\"Layout\"", "quantization_config has no 'layout'", LL_EMODEL},
        {"layout-type", "\"" LL_QLAYOUT "\"", "16", "'layout'", LL_EMODEL},
        /* the planes are q4_0's; the config says q8_0, or q4_k */
        {"other-type", "\"q4_0\"", "\"q8_0\"", "has dtype U8, but the data plane of a q8_0 weight",
         LL_EMODEL},
        {"other-type-k", "\"q4_0\"", "\"q4_k\"",
         "has dtype F16, but the scale plane of a q4_k weight is U8", LL_EMODEL},
        /* no quantization_config: the planes are not what a bf16 model holds */
        {"no-config", "\"quantization_config\"", "\"quantization_notes\"",
         "a quantized weight, but config.json has no quantization_config", LL_EMODEL},
    };
    for (size_t i = 0; i < LL_ARRAY_LEN(cfgs); i++) {
        char *at = strstr(cfg, cfgs[i].from), text[4096];
        assert_non_null(at);
        assert_true(len + 64 < sizeof text);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - cfg), cfg, cfgs[i].to,
                 at + strlen(cfgs[i].from));
        char name[64];
        snprintf(name, sizeof name, "cfg-%s", cfgs[i].name);
        expect_refused(variant(q4, name, text, NULL, NULL), cfgs[i].want, cfgs[i].s1, NULL);
    }
    /* a quantized config over the fixture's bf16 weights */
    expect_refused(variant(FIXTURE, "dense-planes", cfg, NULL, NULL), LL_EMODEL,
                   "missing tensor 'lm_head.weight.qs'", NULL);
    /* a quantized file without the config: named as such */
    snprintf(path, sizeof path, "%s/config.json", FIXTURE);
    char *plain = NULL;
    assert_int_equal(ll_read_file(path, &plain, &len, &err), LL_OK);
    expect_refused(variant(q8, "planes-no-config", plain, NULL, NULL), LL_EMODEL,
                   "'model.layers.0.self_attn.q_proj.weight.qs', a quantized weight", NULL);
    free(plain);
    free(cfg);
    /* q4_k planes under a q4_k_m config: the first weight the scheme keeps at 8 bits is named */
    snprintf(path, sizeof path, "%s/config.json", qk);
    assert_int_equal(ll_read_file(path, &cfg, &len, &err), LL_OK);
    char *at = strstr(cfg, "\"q4_k\""), text[4096];
    assert_non_null(at);
    assert_true(len + 64 < sizeof text);
    snprintf(text, sizeof text, "%.*s\"q4_k_m\"%s", (int)(at - cfg), cfg, at + strlen("\"q4_k\""));
    expect_refused(variant(qk, "cfg-k-m", text, NULL, NULL), LL_EMODEL,
                   "'model.layers.0.self_attn.v_proj.weight.qs' has dtype U8, but the data plane "
                   "of a q8_0 weight is I8 (scheme q4_k_m",
                   NULL);
    free(cfg);
}

/* A weight that cannot be quantized (a NaN) is refused at load, naming the tensor and row. */
static void edit_nan(struct st_write_tensor *t, size_t *n, void *ctx)
{
    (void)ctx;
    static uint16_t w[160 * 64];
    struct st_write_tensor *x = find(t, *n, "model.layers.1.mlp.gate_proj.weight");
    memcpy(w, x->data, sizeof w);
    w[37 * 64 + 40] = 0x7FC0; /* bf16 NaN: row 37, block 1 */
    x->data = w;
}

static void test_nonfinite_refused(void **state)
{
    (void)state;
    const char *dir = variant(FIXTURE, "nan", NULL, edit_nan, NULL);
    struct model_open_opts mo = {.quantize = true, .qscheme = MODEL_QS_Q4_0, .n_threads = 2};
    struct model *m = NULL;
    struct ll_err err = {0};
    assert_int_equal(model_open(&m, dir, &mo, &err), LL_EINVAL);
    print_message("%s\n", err.msg);
    assert_null(m);
    assert_non_null(strstr(err.msg, "'model.layers.1.mlp.gate_proj.weight'"));
    assert_non_null(strstr(err.msg, "row 37, block 1"));
    mo.qscheme = MODEL_QS_Q4_K;
    assert_int_equal(model_open(&m, dir, &mo, &err), LL_EINVAL);
    assert_null(m);
    assert_non_null(strstr(err.msg, "'model.layers.1.mlp.gate_proj.weight'"));
    assert_non_null(strstr(err.msg, "q4_k: row 37, super-block 0 (elements 0..63)"));
    /* as stored (bf16), the same directory loads */
    assert_int_equal(model_open(&m, dir, NULL, &err), LL_OK);
    model_close(m);
}

/* ---- weights copied into memory at load (model_copy.h) ---- */

static bool inside(const void *p, const void *base, size_t bytes)
{
    return (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

/* The default load copies every linear weight the file mapping holds (a tied lm_head stays the
 * embedding); --mmap (keep_mapped) copies nothing; both give the same logits, as stored and for
 * a quantized directory; quantizing at load leaves nothing of the mapping to copy. */
static void test_copied_weights(void **state)
{
    (void)state;
    const char *dirs[2] = {FIXTURE, q_dir[MODEL_QS_Q4_K_M]};
    for (int d = 0; d < 2; d++) {
        struct model_open_opts copy = {.n_threads = 2}, mapped = {.keep_mapped = true};
        struct model *a = NULL, *b = NULL;
        struct ll_err err = {0};
        assert_int_equal(model_open(&a, dirs[d], &copy, &err), LL_OK);
        assert_int_equal(model_open(&b, dirs[d], &mapped, &err), LL_OK);
        assert_non_null(a->wmem);
        assert_null(b->wmem);
        for (int i = 0; i < a->n_linears; i++) {
            const struct model_linear *l = a->linears[i], *k = b->linears[i];
            if (l->quantized) {
                assert_true(inside(l->q.qs, a->wmem, a->wmem_bytes) &&
                            inside(l->q.d, a->wmem, a->wmem_bytes));
                assert_false(inside(k->q.qs, a->wmem, a->wmem_bytes));
                assert_memory_equal(l->q.qs, k->q.qs, ll_qweight_qs_bytes(l->q.type, l->n, l->k));
                assert_memory_equal(l->q.d, k->q.d, ll_qweight_d_bytes(l->q.type, l->n, l->k));
            } else if (l->tied) { /* the fixture's lm_head: the embedding, left mapped */
                assert_false(inside(l->dense.data, a->wmem, a->wmem_bytes));
            } else {
                assert_true(inside(l->dense.data, a->wmem, a->wmem_bytes));
                assert_memory_equal(l->dense.data, k->dense.data, model_linear_dense_bytes(l));
            }
        }
        float *la = prompt_logits(a), *lb = prompt_logits(b);
        assert_memory_equal(la, lb, sizeof(float) * NPOS * (size_t)a->config.vocab_size);
        free(la);
        free(lb);
        model_close(a);
        model_close(b);
    }
    struct model *q = open_model(FIXTURE, MODEL_QS_Q4_0, 2);
    assert_null(q->wmem);
    assert_non_null(q->qmem);
    model_close(q);
}

/* ---- the weights' memory: huge pages (util.h, ll_huge_alloc) ---- */

/* p starts on a 2 MiB boundary and [p, p + bytes) lies in one mapping advised MADV_HUGEPAGE
 * ("hg" in its VmFlags), where Linux has transparent huge pages. */
static void assert_huge_advised(const char *what, const void *p, size_t bytes)
{
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
        print_message("SKIP %s: no transparent huge pages on this kernel (only the alignment "
                      "checked)\n", what);
        return;
    }
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    int in = 0, advised = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= a && (uintptr_t)p < b;
            if (in)
                assert_true((uintptr_t)p + bytes <= b); /* one mapping holds it all */
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            advised = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    if (advised != 1)
        fail_msg("%s at %p: its mapping is not advised MADV_HUGEPAGE", what, p);
}

/* Every allocation decode streams the weights from is 2 MiB-aligned and advised for huge pages:
 * the copy at load, the planes quantized at load, the packed bf16 planes. (Without this the
 * planes quantized at load sat in malloc'd memory, on 4 KiB pages: q4_0 decode ran 1.04-1.33x
 * faster once they were not, on an AMD EPYC.) */
static void test_huge_pages(void **state)
{
    (void)state;
    struct model *m = open_model(FIXTURE, -1, 2);
    assert_huge_advised("the copied weights", m->wmem, m->wmem_bytes);
    model_close(m);
    for (int qs = 0; qs < MODEL_QS_COUNT; qs++) {
        m = open_model(FIXTURE, qs, 2);
        assert_huge_advised(model_qscheme_name((enum model_qscheme)qs), m->qmem, m->qmem_bytes);
        model_close(m);
    }
    struct model_open_opts po = {.pack_bf16 = true, .n_threads = 2};
    struct ll_err err = {0};
    assert_int_equal(model_open(&m, FIXTURE, &po, &err), LL_OK);
    if (m->pkmem)
        assert_huge_advised("the packed bf16 planes", m->pkmem, m->pkmem_bytes);
    else
        print_message("SKIP the packed bf16 planes: this CPU does not read them\n");
    model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_bounds),      cmocka_unit_test(test_weight_error),
        cmocka_unit_test(test_round_trip),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nonfinite_refused), cmocka_unit_test(test_copied_weights),
        cmocka_unit_test(test_huge_pages),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
