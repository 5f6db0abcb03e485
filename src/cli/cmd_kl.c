/*
 * cmd_kl.c: `llaisys-cli kl`: how far a quantized model's next-token distributions are from the
 * original's over a text: mean, median, p99 and max KL divergence KL(P_base || P_quant) and the
 * share of positions whose most likely token is the same.
 *
 * The protocol is llama-perplexity's (-c 512 with --kl-divergence), so the figures compare with
 * its: the text is encoded with the tokenizer's special tokens (BOS in front for Qwen2/R1),
 * cut into n_chunk = n_tokens / CTX whole chunks of CTX tokens (the remainder is dropped); each
 * chunk is run on its own from position 0 with its first token replaced by BOS (when the
 * tokenizer adds one), and scored on its second half: the distributions after positions
 * CTX/2 .. CTX-2, each predicting the chunk's next token (CTX/2 - 1 positions a chunk). The
 * percentiles interpolate linearly between ranks (rank f·(n-1) of the n sorted values).
 * Both models run in the default (bf16-activation) math, so the base is what a bf16 server
 * computes. Runs on the CLI thread; each model's runtime has its own compute pool.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "ops.h"
#include "run_common.h"
#include "runtime.h"
#include "tokenizer.h"
#include "util.h"

#define KL_ENGINE_OPTS                                                                         \
    (ENGINE_OPT_BIT(ENGINE_OPT_THREADS) | ENGINE_OPT_BIT(ENGINE_OPT_QUANT) |                      \
     ENGINE_OPT_BIT(ENGINE_OPT_MMAP) |                                                            \
     ENGINE_OPT_BIT(ENGINE_OPT_FIXED_THREADS))

static void kl_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli kl --model DIR (--quant T | --model-q QDIR) --input FILE "
               "[options]\n"
               "Runs the text of FILE through the model of DIR and through its quantized form\n"
               "(DIR quantized at load with --quant, or the directory QDIR) and prints the KL\n"
               "divergence of the next-token distributions (mean, median, p99, max) and how\n"
               "often the most likely token is the same; llama-perplexity's protocol: the text\n"
               "cut into chunks of CTX tokens, each scored on its second half.\n\n"
               "  --model-q QDIR  the quantized model to compare (same vocabulary)\n"
               "  --ctx CTX       tokens per chunk (default 512, as llama-perplexity -c 512)\n"
               "  --chunks N      score the first N chunks only (default all)\n\n");
    engine_args_usage(f, KL_ENGINE_OPTS);
}

/* log-softmax of row (n) into out, in double. */
static void log_softmax(double *out, const float *row, int n)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = row[i] > mx ? row[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp((double)row[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)row[i] - lse;
}

/* Run tokens[0..n) (one chunk, positions 0..) through rt; the logits of positions first..last
 * (inclusive) in order into logits. */
static enum ll_status run_chunk(struct model_runtime *rt, const int32_t *tokens, int n, int first,
                                int last, float *logits, int vocab, struct ll_err *err)
{
    int B = rt->opts.max_batch;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)B);
    uint8_t *want = malloc((size_t)B);
    enum ll_status s = LL_OK;
    if (!pos || !want) {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    for (int i0 = 0; i0 < n; i0 += B) {
        int m = n - i0 < B ? n - i0 : B, n_want = 0;
        for (int j = 0; j < m; j++) {
            pos[j] = i0 + j;
            want[j] = i0 + j >= first && i0 + j <= last;
            n_want += want[j];
        }
        struct ll_batch b = {.n_tokens = m, .token = tokens + i0, .pos = pos, .want_logits = want};
        if ((s = runtime_forward(rt, &b, logits, err)))
            goto out;
        logits += (size_t)n_want * (size_t)vocab;
    }
out:
    free(pos);
    free(want);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Value at fraction f of sorted v (n >= 1), interpolated between ranks. */
static double percentile(const double *v, int n, double f)
{
    double p = f * (n - 1);
    int i = (int)p;
    if (i >= n - 1)
        return v[n - 1];
    return v[i] + (p - i) * (v[i + 1] - v[i]);
}

int cmd_kl(int argc, char **argv)
{
    const char *dir = NULL, *qdir = NULL, *input = NULL;
    long long ctx = 512, max_chunks = 0;
    struct engine_opts eo = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--model-q", &qdir),
        CLI_STR("--input", &input),
        CLI_INT("--ctx", &ctx, 4, 65536),
        CLI_INT("--chunks", &max_chunks, 1, 1 << 30),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "kl", .usage = kl_usage, .args = args,
                                .engine_mask = KL_ENGINE_OPTS, .engine = &eo};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir || !input || (!qdir && !eo.quant) || (qdir && eo.quant))
        return cli_args_fail(&cmd, !dir     ? "--model is required"
                                   : !input ? "--input is required"
                                            : "give one of --quant T (quantize DIR at load) "
                                              "and --model-q QDIR");

    struct ll_err err = {0};
    struct model *base = NULL, *quant = NULL;
    struct model_runtime *rt_b = NULL, *rt_q = NULL;
    struct tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL, *chunk = NULL;
    float *lb = NULL, *lq = NULL;
    double *pb = NULL, *pq = NULL, *kld = NULL;
    size_t len = 0, n_ids = 0;
    int rc = 1;

    engine_opts_resolve(&eo, NULL);
    struct model_open_opts mo = engine_opts_model_open(&eo);
    if (ll_read_file(input, &text, &len, &err) || tokenizer_load(&tok, dir, &err) ||
        tokenizer_encode(tok, text, len, true, &ids, &n_ids, &err) ||
        model_open(&base, dir, NULL, &err) ||
        model_open(&quant, qdir ? qdir : dir, qdir ? NULL : &mo, &err))
        goto fail;
    const int V = base->config.vocab_size;
    if (quant->config.vocab_size != V) {
        ll_err_set(&err, LL_EINVAL, "%s has a vocabulary of %d, %s of %d", dir, V, qdir,
                   quant->config.vocab_size);
        goto fail;
    }
    /* BOS goes in front of every chunk when the tokenizer puts it in front of a text. */
    int32_t *probe = NULL;
    size_t n_probe = 0;
    if (tokenizer_encode(tok, "", 0, true, &probe, &n_probe, &err))
        goto fail;
    int32_t bos = n_probe == 1 && probe[0] == tokenizer_bos_id(tok) ? probe[0] : -1;
    free(probe);

    const int C = (int)ctx, first = C / 2, last = C - 2, per_chunk = last - first + 1;
    int n_chunks = (int)(n_ids / (size_t)C);
    if (max_chunks && n_chunks > max_chunks)
        n_chunks = (int)max_chunks;
    if (n_chunks < 1) {
        ll_err_set(&err, LL_EINVAL, "%s: %zu tokens, fewer than one chunk of %d (--ctx)", input,
                   n_ids, C);
        goto fail;
    }
    struct runtime_opts ro = engine_opts_runtime_seq(&eo, C, C < 512 ? C : 512);
    size_t rows = (size_t)per_chunk * (size_t)V;
    chunk = malloc(sizeof(int32_t) * (size_t)C);
    lb = malloc(sizeof(float) * rows);
    lq = malloc(sizeof(float) * rows);
    pb = malloc(sizeof(double) * (size_t)V);
    pq = malloc(sizeof(double) * (size_t)V);
    kld = malloc(sizeof(double) * (size_t)n_chunks * (size_t)per_chunk);
    if (!chunk || !lb || !lq || !pb || !pq || !kld) {
        ll_err_set(&err, LL_ENOMEM, "out of memory for %d logit rows", 2 * per_chunk);
        goto fail;
    }
    if (runtime_create(&rt_b, base, &ro, &err) || runtime_create(&rt_q, quant, &ro, &err))
        goto fail;

    char wb[160], wq[160];
    model_weights_str(base, wb, sizeof wb);
    model_weights_str(quant, wq, sizeof wq);
    printf("base: %s (%s weights)\nquantized: %s (%s weights)\n", dir, wb, qdir ? qdir : dir, wq);
    printf("text: %s, %zu tokens: %d chunks of %d, scored on positions %d..%d of each (%d "
           "positions)\n",
           input, n_ids, n_chunks, C, first, last, n_chunks * per_chunk);
    fflush(stdout);

    int n = 0, same = 0;
    double sum = 0, sum2 = 0, t0 = ll_now();
    for (int c = 0; c < n_chunks; c++) {
        memcpy(chunk, ids + (size_t)c * (size_t)C, sizeof(int32_t) * (size_t)C);
        if (bos >= 0)
            chunk[0] = bos;
        if (run_chunk(rt_b, chunk, C, first, last, lb, V, &err) ||
            run_chunk(rt_q, chunk, C, first, last, lq, V, &err))
            goto fail;
        for (int j = 0; j < per_chunk; j++) {
            const float *rb = lb + (size_t)j * V, *rq = lq + (size_t)j * V;
            log_softmax(pb, rb, V);
            log_softmax(pq, rq, V);
            double k = 0;
            for (int i = 0; i < V; i++)
                k += exp(pb[i]) * (pb[i] - pq[i]);
            k = k > 0 ? k : 0; /* rounding can leave a tiny negative sum for equal rows */
            kld[n++] = k;
            sum += k;
            sum2 += k * k;
            same += ll_argmax(rb, V) == ll_argmax(rq, V);
        }
        fprintf(stderr, "kl: chunk %d/%d, mean KL so far %.6f (%.1f s)\n", c + 1, n_chunks, sum / n,
                ll_now() - t0);
    }
    double mean = sum / n, var = n > 1 ? (sum2 - sum * mean) / (n - 1) : 0;
    double f = (double)same / n;
    qsort(kld, (size_t)n, sizeof *kld, cmp_double);
    printf("mean KL divergence:   %.6f ± %.6f\n", mean, sqrt(var > 0 ? var / n : 0));
    printf("median KL divergence: %.6f\n", percentile(kld, n, 0.5));
    printf("p99 KL divergence:    %.6f\n", percentile(kld, n, 0.99));
    printf("max KL divergence:    %.6f\n", kld[n - 1]);
    printf("same top-1:           %.2f %% ± %.2f %%\n", 100 * f, 100 * sqrt(f * (1 - f) / n));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli kl: %s\n", err.msg);
done:
    runtime_free(rt_b);
    runtime_free(rt_q);
    model_close(base);
    model_close(quant);
    tokenizer_free(tok);
    free(text);
    free(ids);
    free(chunk);
    free(lb);
    free(lq);
    free(pb);
    free(pq);
    free(kld);
    return rc;
}
