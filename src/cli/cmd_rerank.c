/*
 * cmd_rerank.c: `llaisys-cli rerank`: a file's lines (one document per line; blank lines are
 * skipped) ranked by their relevance to a query through the engine, all submitted at once and
 * batched as the server batches them, scored as the server scores them (reranker.h: the
 * checkpoint's score.weight, else --rerank-tokens, else no,yes for a Qwen3-Reranker
 * directory). Prints one JSON line per document, best first: {"index": line's document
 * number from 0, "relevance_score": s}; to stderr the documents, tokens (and how many came
 * from the prefix cache), seconds, documents and tokens per second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "reranker.h"
#include "run_common.h"
#include "tokenizer.h"
#include "util.h"

static void rerank_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli rerank --model DIR --query TEXT --input FILE [options]\n"
               "Ranks the lines of FILE ('-': standard input) by their relevance to TEXT; "
               "prints one JSON\n"
               "line per document, best first: {\"index\", \"relevance_score\"}.\n\n"
               "  --instruction TEXT     Qwen3-Reranker's <Instruct> (default: \"%s\")\n"
               "  --rerank-tokens NO,YES judge by these next-token logits (default: the "
               "checkpoint's\n"
               "                         score.weight, else no,yes for a Qwen3-Reranker "
               "directory)\n"
               "  --quiet                print nothing but the figures (for timing)\n\n",
            RERANK_DEFAULT_INSTRUCTION);
    engine_args_usage(f, ENGINE_OPTS_ALL);
}

int cmd_rerank(int argc, char **argv)
{
    const char *dir = NULL, *input = NULL, *query = NULL, *instruction = NULL, *tokens = NULL;
    bool quiet = false;
    struct engine_opts o = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--query", &query),
        CLI_STR("--input", &input),
        CLI_STR("--instruction", &instruction),
        CLI_STR("--rerank-tokens", &tokens),
        CLI_SET("--quiet", &quiet),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "rerank", .usage = rerank_usage, .args = args,
                                .engine_mask = ENGINE_OPTS_ALL, .engine = &o};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir || !input || !query)
        return cli_args_fail(&cmd, "--model, --query and --input are required");
    if (!*query)
        return cli_args_fail(&cmd, "--query is empty");

    struct ll_err err = {0};
    char *data = NULL, *bos = NULL, *eos = NULL;
    int n_lines = 0;
    if (run_lines_read(input, &data, &n_lines, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli rerank: %s\n", err.msg);
        free(data);
        return 1;
    }
    if (o.max_queue == 0) /* everything is submitted at once */
        o.max_queue = n_lines > 256 ? n_lines : 256;
    struct engine *e = NULL;
    struct chat_template *tmpl = NULL;
    struct reranker rk = {0};
    struct engine_req **reqs = calloc((size_t)n_lines, sizeof *reqs);
    double *scores = calloc((size_t)n_lines, sizeof *scores);
    int32_t **ids = calloc((size_t)n_lines, sizeof *ids);
    int *cnt = calloc((size_t)n_lines, sizeof *cnt);
    int *lines = calloc((size_t)n_lines, sizeof *lines);
    int n = 0, n_docs = 0, rc = 1; /* submitted, prompts made */
    long long n_tokens = 0;
    if (!reqs || !scores || !ids || !cnt || !lines) {
        fprintf(stderr, "llaisys-cli rerank: out of memory\n");
        goto out;
    }
    if (engine_create(&e, dir, &o, &err) != LL_OK ||
        chat_template_load_model(&tmpl, &bos, &eos, dir, &err) != LL_OK ||
        reranker_choose(&rk, engine_model(e), engine_tokenizer(e), tmpl, bos, eos, tokens,
                        &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli rerank: %s\n", err.msg);
        goto out;
    }
    engine_args_print(stderr, e);
    fprintf(stderr, "rerank: %s; prompt %d + %d tokens around each pair\n", rk.source,
            rk.n_head, rk.n_tail);
    const int H = engine_model(e)->config.hidden_size;
    /* every document's prompt first: the part they share is published to the prefix cache */
    int line_no = 0;
    size_t l;
    for (char *cur = data, *line; (line = run_lines_next(&cur, &line_no, &l)); n_docs++) {
        lines[n_docs] = line_no;
        if (reranker_prompt(&rk, engine_tokenizer(e), instruction, query, strlen(query), line, l,
                            &ids[n_docs], &cnt[n_docs], &err) != LL_OK) {
            fprintf(stderr, "llaisys-cli rerank: line %d: %s\n", line_no, err.msg);
            goto out;
        }
    }
    int shared = reranker_shared_prefix(&rk, engine_tokenizer(e), instruction, query,
                                        strlen(query), ids, cnt, n_docs);
    if (shared < 0) {
        fprintf(stderr, "llaisys-cli rerank: out of memory\n");
        goto out;
    }
    double t0 = ll_now();
    for (; n < n_docs; n++) {
        struct engine_params p = {.prompt = ids[n], .n_prompt = cnt[n], .embed = LL_POOL_LAST,
                                  .cache_prefix = shared};
        if (engine_submit(e, &p, &reqs[n], &err) != LL_OK) {
            fprintf(stderr, "llaisys-cli rerank: line %d: %s\n", lines[n], err.msg);
            goto out;
        }
        n_tokens += cnt[n];
    }
    if (engine_run_until_idle(e, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli rerank: %s\n", err.msg);
        goto out;
    }
    double dt = ll_now() - t0;
    rc = 0;
    for (int i = 0; i < n; i++) {
        struct engine_output r = {0};
        engine_poll(reqs[i], &r);
        if (r.finish != ENGINE_FINISH_STOP || r.n_embedding != H) {
            fprintf(stderr, "llaisys-cli rerank: document %d: %s %s\n", i,
                    engine_finish_str(r.finish), r.error);
            rc = 1;
        } else {
            scores[i] = reranker_score(&rk, r.embedding);
        }
        engine_output_free(&r);
    }
    int *order = rc == 0 && !quiet ? malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)) : NULL;
    if (rc == 0 && !quiet && (!order || reranker_order(scores, n, order) != LL_OK)) {
        fprintf(stderr, "llaisys-cli rerank: out of memory\n");
        rc = 1;
    }
    for (int r = 0; rc == 0 && !quiet && r < n; r++)
        printf("{\"index\":%d,\"relevance_score\":%.17g}\n", order[r], scores[order[r]]);
    free(order);
    struct engine_stats st;
    engine_get_stats(e, &st);
    fprintf(stderr, "scored %d documents, %lld tokens (%llu from the prefix cache), in %.3f s: "
            "%.2f documents/s, %.1f tokens/s\n", n, n_tokens,
            (unsigned long long)st.cached_tokens, dt, dt > 0 ? n / dt : 0,
            dt > 0 ? (double)n_tokens / dt : 0);
out:
    for (int i = 0; reqs && i < n; i++)
        engine_req_release(reqs[i]);
    for (int i = 0; ids && i < n_docs; i++)
        free(ids[i]);
    free(reqs), free(ids), free(cnt), free(lines);
    free(scores);
    reranker_free(&rk);
    chat_template_free(tmpl);
    free(bos), free(eos);
    engine_destroy(e);
    free(data);
    return rc;
}
