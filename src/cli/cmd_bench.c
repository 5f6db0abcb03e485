/*
 * cmd_bench.c: `llaisys-cli bench`: model load time, memory, prompt processing (ppN: an N-token
 * prompt in max-batch chunks, logits for the last token only) and single-stream decode (tgN: N
 * greedy decode steps after a 4-token prompt), in the shape of llama-bench's table.
 * Prompts are pseudo-random ids (a fixed hash), so runs are comparable.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "cli_args.h"
#include "engine_args.h"
#include "model.h"
#include "ops.h"
#include "run_common.h"
#include "runtime.h"
#include "sampler.h"
#include "util.h"

/* The engine options bench takes (it runs the model without the engine; the context is
 * what the test needs). */
#define BENCH_ENGINE_OPTS                                                                    \
    (ENGINE_OPT_BIT(ENGINE_OPT_THREADS) | ENGINE_OPT_BIT(ENGINE_OPT_EXACT) |                     \
     ENGINE_OPT_BIT(ENGINE_OPT_QUANT) | ENGINE_OPT_BIT(ENGINE_OPT_MMAP) |                        \
     ENGINE_OPT_BIT(ENGINE_OPT_FIXED_THREADS))

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli bench --model DIR [options]\n"
               "Measures load time, resident memory, prompt processing (pp) and decode (tg) "
               "tokens/s.\n\n"
               "  --pp LIST      prompt lengths, comma-separated (default 128,512; 0 skips)\n"
               "  --tg N         decode steps (default 128; 0 skips)\n"
               "  --reps N       repetitions of each test (default 3)\n"
               "  --depth N      tokens already in the context when each test starts, prefilled\n"
               "                 untimed (llama-bench's -d); rows read pp512 @ d4096 (default 0)\n"
               "\n");
    engine_args_usage(f, BENCH_ENGINE_OPTS);
}

static void fill_ids(int32_t *ids, int n, int vocab, uint64_t salt)
{
    int range = vocab < 150000 ? vocab : 150000; /* stay among real (non-padding) tokens */
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(sampler_uniform(salt, (uint64_t)i) * range);
}

static void stats(const double *v, int n, double *mean, double *sd, double *best)
{
    double s = 0, q = 0;
    *best = 0;
    for (int i = 0; i < n; i++) {
        s += v[i];
        *best = v[i] > *best ? v[i] : *best;
    }
    *mean = s / n;
    for (int i = 0; i < n; i++)
        q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

#define WARMUP_TOKENS 8 /* the untimed first pass */

int cmd_bench(int argc, char **argv)
{
    const char *dir = NULL, *pp_s = "128,512";
    long long tg = 128, reps = 3, depth = 0;
    struct engine_opts eo = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--pp", &pp_s),
        CLI_INT("--tg", &tg, 0, 100000),
        CLI_INT("--reps", &reps, 1, 1000),
        CLI_INT("--depth", &depth, 0, 1000000),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "bench", .usage = bench_usage, .args = args,
                                .engine_mask = BENCH_ENGINE_OPTS, .engine = &eo};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir)
        return cli_args_fail(&cmd, "--model is required");
    int32_t *pp = NULL;
    int n_pp = 0;
    if (run_parse_ids("bench", "--pp", pp_s, &pp, &n_pp))
        return 2;
    int max_pp = 0;
    for (int i = 0; i < n_pp; i++)
        max_pp = pp[i] > max_pp ? pp[i] : max_pp;

    struct ll_err err = {0};
    struct model *m = NULL;
    struct model_runtime *rt = NULL;
    float *logits = NULL;
    int32_t *ids = NULL;
    double *t = calloc((size_t)reps, sizeof(double));
    int rc = 1;
    double t0 = ll_now();
    struct model_open_opts mo = engine_opts_model_open(&eo);
    if (model_open(&m, dir, &mo, &err) != LL_OK)
        goto fail;
    engine_opts_resolve(&eo, NULL); /* threads; the context is what the tests need */
    /* the decode test starts after a prompt of 4 tokens (at depth 0), or of the depth */
    int tg_prompt = depth > 0 ? (int)depth : 4, d = (int)depth;
    int n_ctx = d + max_pp > tg_prompt + tg ? d + max_pp : tg_prompt + (int)tg;
    if (m->config.max_position > 0 && n_ctx > m->config.max_position) {
        ll_err_set(&err, LL_EINVAL,
                   "--depth %d with --pp %d / --tg %lld needs %d positions; the model has %d "
                   "(max_position_embeddings)", d, max_pp, tg, n_ctx, m->config.max_position);
        goto fail;
    }
    if (n_ctx < WARMUP_TOKENS)
        n_ctx = WARMUP_TOKENS;
    struct runtime_opts o = engine_opts_runtime_seq(&eo, n_ctx, 512);
    if (runtime_create(&rt, m, &o, &err) != LL_OK)
        goto fail;
    double load_s = ll_now() - t0;
    int V = m->config.vocab_size;
    logits = malloc(sizeof(float) * V);
    ids = malloc(sizeof(int32_t) * (size_t)n_ctx); /* >= depth + each pp, and the tg prompt */
    if (!logits || !ids || !t) {
        ll_err_set(&err, LL_ENOMEM, "out of memory");
        goto fail;
    }
    /* Warm-up: pages the weights in and starts the pool's threads; not timed. */
    t0 = ll_now();
    fill_ids(ids, WARMUP_TOKENS, V, 99);
    if (run_prompt(rt, ids, WARMUP_TOKENS, 0, logits, &err) != LL_OK)
        goto fail;
    double warm_s = ll_now() - t0;
    double rss, hwm;
    run_memory_mib(&rss, &hwm);

    const struct model_config *c = &m->config;
    char wdesc[160];
    model_weights_str(m, wdesc, sizeof wdesc);
    char shape[160];
    model_shape_str(m, shape, sizeof shape);
    printf("model: %s (%s, %s weights)\n", dir, shape, wdesc);
    printf("kernels: matmul %s, ops %s, attention %s; math %s; threads %d; max batch %d\n",
           model_matmul_variant(m), ll_ops_variant(),
           ll_attention_variant(c->head_dim), eo.exact ? "exact" : "fast", eo.n_threads,
           o.max_batch);
    printf("load: %.3f s (open%s + runtime), first pass %.3f s; memory after load: VmRSS %.0f MiB, "
           "VmHWM %.0f MiB\n\n", load_s, m->quant_seconds > 0 ? " + quantize" : "", warm_s, rss,
           hwm);
    printf("| %-6s | %7s | %18s | %9s | %9s |\n", "test", "tokens", "t/s (mean ± sd)", "best t/s",
           "s/rep");
    printf("|--------|---------|-------------------|-----------|-----------|\n");
    fflush(stdout);

    for (int k = 0; k < n_pp; k++) {
        int n = pp[k];
        if (n <= 0)
            continue;
        fill_ids(ids, d + n, V, 1000 + (uint64_t)n);
        for (int r = 0; r < reps; r++) {
            if (d > 0 && run_prompt(rt, ids, d, 0, logits, &err) != LL_OK)
                goto fail;
            double s = ll_now();
            if (run_prompt(rt, ids + d, n, d, logits, &err) != LL_OK)
                goto fail;
            t[r] = n / (ll_now() - s);
        }
        double mean, sd, best;
        stats(t, (int)reps, &mean, &sd, &best);
        char name[48];
        snprintf(name, sizeof name, d > 0 ? "pp%d @ d%d" : "pp%d", n, d);
        printf("| %-6s | %7d | %9.2f ± %5.2f | %9.2f | %9.3f |\n", name, n, mean, sd, best,
               n / mean);
        fflush(stdout);
    }
    if (tg > 0) {
        fill_ids(ids, tg_prompt, V, 7);
        for (int r = 0; r < reps; r++) {
            if (run_prompt(rt, ids, tg_prompt, 0, logits, &err) != LL_OK)
                goto fail;
            double s = ll_now();
            for (int i = 0; i < tg; i++) {
                int32_t tok = ll_argmax(logits, V), pos = tg_prompt + i;
                struct ll_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos};
                if (runtime_forward(rt, &b, logits, &err) != LL_OK)
                    goto fail;
            }
            t[r] = tg / (ll_now() - s);
        }
        double mean, sd, best;
        stats(t, (int)reps, &mean, &sd, &best);
        char name[48];
        snprintf(name, sizeof name, d > 0 ? "tg%lld @ d%d" : "tg%lld", tg, d);
        printf("| %-6s | %7lld | %9.2f ± %5.2f | %9.2f | %9.3f |\n", name, tg, mean, sd, best,
               tg / mean);
    }
    run_memory_mib(&rss, &hwm);
    printf("\nmemory at end: VmRSS %.0f MiB, VmHWM %.0f MiB\n", rss, hwm);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli bench: %s\n", err.msg);
done:
    free(t);
    free(ids);
    free(logits);
    runtime_free(rt);
    model_close(m);
    free(pp);
    return rc;
}
