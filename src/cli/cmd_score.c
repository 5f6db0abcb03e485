/*
 * cmd_score.c: `llaisys-cli score`: runs token ids through the model and prints, for every
 * position, the top-K next-token candidates with their logits as one JSON line
 * `[[id, logit], ...]`, best first (ties: lower id first). Used to compare with reference
 * implementations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "run_common.h"
#include "runtime.h"

#define SCORE_CHUNK 32 /* positions per forward step (each wants a full logits row) */

/* The engine options score takes (it runs the model without the engine; the context is
 * what the test needs). */
#define SCORE_ENGINE_OPTS                                                                    \
    (ENGINE_OPT_BIT(ENGINE_OPT_THREADS) | ENGINE_OPT_BIT(ENGINE_OPT_EXACT) |                     \
     ENGINE_OPT_BIT(ENGINE_OPT_QUANT) | ENGINE_OPT_BIT(ENGINE_OPT_MMAP) |                        \
     ENGINE_OPT_BIT(ENGINE_OPT_FIXED_THREADS))

static void score_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli score --model DIR --ids \"ID ID ...\" [options]\n"
               "Prints one JSON line per position: the top-K [id, logit] pairs of the next "
               "token.\n\n"
               "  --top K        candidates per position (default 8)\n\n");
    engine_args_usage(f, SCORE_ENGINE_OPTS);
}

/* The k best (logit desc, id asc) of row (n) into best[0..k), sorted. Returns how many. */
static int top_k(const float *row, int n, int k, int32_t *best)
{
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        float v = row[i];
        if (v != v)
            continue;
        if (cnt == k && !(v > row[best[k - 1]]))
            continue;
        int j = cnt < k ? cnt++ : k - 1;
        while (j > 0 && v > row[best[j - 1]]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    return cnt;
}

int cmd_score(int argc, char **argv)
{
    const char *dir = NULL, *ids_s = NULL;
    long long top = 8;
    struct engine_opts eo = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--ids", &ids_s),
        CLI_INT("--top", &top, 1, 1000),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "score", .usage = score_usage, .args = args,
                                .engine_mask = SCORE_ENGINE_OPTS, .engine = &eo};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir || !ids_s)
        return cli_args_fail(&cmd, "--model and --ids are required");
    int32_t *ids;
    int n;
    if (run_parse_ids("score", "--ids", ids_s, &ids, &n))
        return 2;

    struct ll_err err = {0};
    struct model *m = NULL;
    struct model_runtime *rt = NULL;
    float *logits = NULL;
    int32_t *best = NULL;
    int rc = 1;
    struct model_open_opts mo = engine_opts_model_open(&eo);
    if (model_open(&m, dir, &mo, &err) != LL_OK)
        goto fail;
    engine_opts_resolve(&eo, NULL); /* threads; the context is the ids given */
    struct runtime_opts o = engine_opts_runtime_seq(&eo, n, n < SCORE_CHUNK ? n : SCORE_CHUNK);
    if (runtime_create(&rt, m, &o, &err) != LL_OK)
        goto fail;
    int V = m->config.vocab_size;
    logits = malloc(sizeof(float) * (size_t)o.max_batch * V);
    best = malloc(sizeof(int32_t) * (size_t)top);
    if (!logits || !best) {
        ll_err_set(&err, LL_ENOMEM, "out of memory for logits");
        goto fail;
    }
    int32_t pos[SCORE_CHUNK];
    uint8_t want[SCORE_CHUNK];
    memset(want, 1, sizeof want);
    for (int i0 = 0; i0 < n; i0 += o.max_batch) {
        int cnt = n - i0 < o.max_batch ? n - i0 : o.max_batch;
        for (int j = 0; j < cnt; j++)
            pos[j] = i0 + j;
        struct ll_batch b = {.n_tokens = cnt, .token = ids + i0, .pos = pos, .want_logits = want};
        if (runtime_forward(rt, &b, logits, &err) != LL_OK)
            goto fail;
        for (int j = 0; j < cnt; j++) {
            int k = top_k(logits + (size_t)j * V, V, (int)top, best);
            putchar('[');
            for (int t = 0; t < k; t++)
                printf("%s[%d,%.5f]", t ? "," : "", best[t], logits[(size_t)j * V + best[t]]);
            puts("]");
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli score: %s\n", err.msg);
done:
    free(best);
    free(logits);
    runtime_free(rt);
    model_close(m);
    free(ids);
    return rc;
}
