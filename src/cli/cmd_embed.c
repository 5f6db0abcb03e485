/*
 * cmd_embed.c: `llaisys-cli embed`: the embeddings of a file's lines (one text per line; blank
 * lines are skipped) through the engine, all submitted at once and batched as the server
 * batches them, pooled as the server pools them (pooling.h: --pooling, else the model
 * directory's sentence-transformers files, else the last position, L2-normalized). Prints one
 * JSON array per text, in order (9 significant digits: the same f32 values), and to stderr the
 * texts, tokens, seconds and tokens per second. As `llama-embedding` does for llama.cpp.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "pooling.h"
#include "run_common.h"
#include "tokenizer.h"
#include "util.h"

static void embed_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli embed --model DIR --input FILE [options]\n"
               "Prints the embedding of each line of FILE ('-': standard input) as a JSON "
               "array, one line per text.\n\n"
               "  --pooling MODE  last, mean or first (default: the model directory's "
               "sentence-transformers\n"
               "                  files, else last, L2-normalized)\n"
               "  --quiet         print nothing but the figures (for timing)\n\n");
    engine_args_usage(f, ENGINE_OPTS_ALL);
}

int cmd_embed(int argc, char **argv)
{
    const char *dir = NULL, *input = NULL, *pool_s = NULL;
    bool quiet = false;
    struct engine_opts o = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--input", &input),
        CLI_STR("--pooling", &pool_s),
        CLI_SET("--quiet", &quiet),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "embed", .usage = embed_usage, .args = args,
                                .engine_mask = ENGINE_OPTS_ALL, .engine = &o};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir || !input)
        return cli_args_fail(&cmd, "--model and --input are required");
    enum ll_pooling force = LL_POOL_NONE;
    if (pool_s && (!pooling_parse(pool_s, &force) || force == LL_POOL_NONE))
        return cli_args_fail(&cmd, "--pooling must be last, mean or first");

    struct ll_err err = {0};
    struct pooling_config pc;
    char *data = NULL;
    int n_lines = 0;
    if (pooling_choose(&pc, dir, force, &err) != LL_OK ||
        run_lines_read(input, &data, &n_lines, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli embed: %s\n", err.msg);
        free(data);
        return 1;
    }
    if (o.max_queue == 0) /* everything is submitted at once */
        o.max_queue = n_lines > 256 ? n_lines : 256;
    struct engine *e = NULL;
    struct engine_req **reqs = calloc((size_t)n_lines, sizeof *reqs);
    int n = 0, rc = 1;
    long long tokens = 0;
    if (!reqs) {
        fprintf(stderr, "llaisys-cli embed: out of memory\n");
        goto out;
    }
    if (engine_create(&e, dir, &o, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli embed: %s\n", err.msg);
        goto out;
    }
    engine_args_print(stderr, e);
    fprintf(stderr, "pooling: %s%s (%s)\n", pooling_name(pc.mode),
            pc.normalize ? ", L2-normalized" : "", pc.source);
    const int H = engine_model(e)->config.hidden_size;
    double t0 = ll_now();
    int line_no = 0;
    size_t l;
    for (char *cur = data, *line; (line = run_lines_next(&cur, &line_no, &l));) {
        int32_t *ids = NULL;
        size_t cnt = 0;
        if (tokenizer_encode(engine_tokenizer(e), line, l, true, &ids, &cnt, &err) != LL_OK) {
            fprintf(stderr, "llaisys-cli embed: line %d: %s\n", line_no, err.msg);
            goto out;
        }
        struct engine_params p = {.prompt = ids, .n_prompt = (int)cnt, .embed = pc.mode};
        enum ll_status s = engine_submit(e, &p, &reqs[n], &err);
        free(ids);
        if (s != LL_OK) {
            fprintf(stderr, "llaisys-cli embed: line %d: %s\n", line_no, err.msg);
            goto out;
        }
        n++;
        tokens += (long long)cnt;
    }
    if (engine_run_until_idle(e, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli embed: %s\n", err.msg);
        goto out;
    }
    double dt = ll_now() - t0;
    rc = 0;
    for (int i = 0; i < n; i++) {
        struct engine_output out = {0};
        engine_poll(reqs[i], &out);
        if (out.finish != ENGINE_FINISH_STOP || out.n_embedding != H) {
            fprintf(stderr, "llaisys-cli embed: text %d: %s %s\n", i + 1,
                    engine_finish_str(out.finish), out.error);
            rc = 1;
        } else if (!quiet) {
            pooling_output(&pc, out.embedding, H, 0);
            for (int k = 0; k < H; k++)
                printf("%c%.9g", k ? ',' : '[', (double)out.embedding[k]);
            puts("]");
        }
        engine_output_free(&out);
    }
    struct engine_stats st;
    engine_get_stats(e, &st);
    fprintf(stderr, "embedded %d texts, %lld tokens (%llu from the prefix cache), in %.3f s: "
            "%.1f tokens/s\n", n, tokens, (unsigned long long)st.cached_tokens, dt,
            dt > 0 ? (double)tokens / dt : 0);
out:
    for (int i = 0; reqs && i < n; i++)
        engine_req_release(reqs[i]);
    free(reqs);
    engine_destroy(e);
    free(data);
    return rc;
}
