/*
 * cmd_generate.c: `llaisys-cli generate`: offline generation for one prompt.
 *
 * The prompt comes as text (encoded with BOS), as a chat message (rendered with the model's chat
 * template, add_generation_prompt, encoded without BOS since the template writes it) or as ids.
 * Tokens are streamed to stdout as they are produced (incremental UTF-8-safe detokenizer, or ids
 * with --print-ids) until an eos id of config.json / generation_config.json, -n tokens, or the
 * end of the context. The sampling flags are what a request's fields are to the server: the
 * policy of gen_params.h fills the rest from generation_config.json, and the logits go through
 * the same penalties, min-p, top-k and top-p as in the engine, so a prompt and seed give the
 * same tokens here, in `batch` and in the server. Timings go to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "gen_params.h"
#include "model.h"
#include "run_common.h"
#include "runtime.h"
#include "sampler.h"
#include "tokenizer.h"
#include "util.h"

/* The engine options generate takes (it runs the model without the engine). */
#define GENERATE_ENGINE_OPTS                                                                 \
    (ENGINE_OPT_BIT(ENGINE_OPT_THREADS) | ENGINE_OPT_BIT(ENGINE_OPT_CTX) |                     \
     ENGINE_OPT_BIT(ENGINE_OPT_EXACT) | ENGINE_OPT_BIT(ENGINE_OPT_QUANT) |                     \
     ENGINE_OPT_BIT(ENGINE_OPT_MMAP) |                                                         \
     ENGINE_OPT_BIT(ENGINE_OPT_FIXED_THREADS))

static void generate_usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli generate --model DIR (--prompt TEXT | --chat TEXT | --ids \"ID ...\")"
            " [options]\n"
            "Generates a continuation and streams it to stdout; timings go to stderr.\n\n"
            "  --prompt TEXT  raw text, encoded with BOS\n"
            "  --chat TEXT    one user message through the model's chat template\n"
            "  --ids LIST     prompt token ids (space or comma separated)\n"
            "  -n N           tokens to generate at most (default 256)\n"
            "Sampling (not given: generation_config.json's value, else the neutral one):\n"
            "  --temp T       temperature in [0, 2]; 0 is greedy (default: 0 when\n"
            "                 generation_config says do_sample false, else its\n"
            "                 temperature, else 1)\n"
            "  --top-k K      keep the K most likely tokens (-1, 0: off; default off)\n"
            "  --top-p P      nucleus sampling, in (0, 1] (default 1)\n"
            "  --min-p P      drop tokens below P times the best one's probability (default 0)\n"
            "  --repetition-penalty R  in (0, 100] (default 1: off)\n"
            "  --seed S       sampling seed (default: random, printed to stderr)\n"
            "  --print-ids    print token ids instead of text\n\n");
    engine_args_usage(f, GENERATE_ENGINE_OPTS);
}

struct gen_opts {
    const char *dir, *prompt, *chat, *ids;
    long long n;
    struct gen_settings sampling; /* the sampling flags given */
    bool print_ids;
    struct engine_opts engine;    /* --threads, --ctx, --exact, --quant */
};

static int parse_args(int argc, char **argv, struct gen_opts *g)
{
    memset(g, 0, sizeof *g);
    g->n = 256;
    struct gen_settings *sp = &g->sampling;
    long long top_k = 0, seed = 0;
    double temp = 0, top_p = 1, min_p = 0, rep = 1;
    const struct cli_arg args[] = {
        CLI_STR("--model", &g->dir),
        CLI_STR("--prompt", &g->prompt),
        CLI_STR("--chat", &g->chat),
        CLI_STR("--ids", &g->ids),
        CLI_INT("-n", &g->n, 0, 1 << 30),
        {.flag = "--top-k", .kind = CLI_ARG_INT, .out = &top_k, .imin = -1, .imax = INT32_MAX,
         .given = &sp->has_top_k},
        {.flag = "--temp", .kind = CLI_ARG_NUM, .out = &temp, .max = GEN_TEMPERATURE_MAX,
         .given = &sp->has_temperature},
        {.flag = "--top-p", .kind = CLI_ARG_NUM, .out = &top_p, .max = 1, .min_open = true,
         .given = &sp->has_top_p},
        {.flag = "--min-p", .kind = CLI_ARG_NUM, .out = &min_p, .max = 1,
         .given = &sp->has_min_p},
        {.flag = "--repetition-penalty", .kind = CLI_ARG_NUM, .out = &rep,
         .max = GEN_REPETITION_PENALTY_MAX, .min_open = true,
         .given = &sp->has_repetition_penalty},
        {.flag = "--seed", .kind = CLI_ARG_INT, .out = &seed, .imin = INT64_MIN,
         .imax = INT64_MAX, .given = &sp->has_seed},
        CLI_SET("--print-ids", &g->print_ids),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "generate", .usage = generate_usage, .args = args,
                                .engine_mask = GENERATE_ENGINE_OPTS, .engine = &g->engine};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr;
    sp->top_k = (int)top_k;
    sp->temperature = (float)temp;
    sp->top_p = (float)top_p;
    sp->min_p = (float)min_p;
    sp->repetition_penalty = (float)rep;
    sp->seed = (uint64_t)seed;
    if (!g->dir) {
        cli_args_fail(&cmd, "--model is required");
        return -1;
    }
    if (!!g->prompt + !!g->chat + !!g->ids != 1) {
        cli_args_fail(&cmd, "give exactly one of --prompt, --chat, --ids");
        return -1;
    }
    return 0;
}

static bool is_eos(const struct model *m, int32_t id)
{
    for (int i = 0; i < m->config.n_eos; i++)
        if (m->config.eos_ids[i] == id)
            return true;
    return false;
}

/* One user message rendered with the model's chat template (add_generation_prompt true) into
 * *text (malloc'd, *len bytes). */
static enum ll_status chat_prompt(const char *dir, const char *message, char **text, size_t *len,
                                  struct ll_err *err)
{
    struct chat_template *t = NULL;
    char *bos = NULL, *eos = NULL;
    *text = NULL;
    enum ll_status s = chat_template_load_model(&t, &bos, &eos, dir, err);
    if (s != LL_OK)
        return s;
    /* {"messages": [{"role": "user", "content": message}], "add_generation_prompt": true} */
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = ctx ? cJSON_AddArrayToObject(ctx, "messages") : NULL;
    cJSON *msg = msgs ? cJSON_CreateObject() : NULL;
    bool ok = msg && cJSON_AddItemToArray(msgs, msg);
    if (!ok)
        cJSON_Delete(msg); /* not attached (NULL is fine) */
    ok = ok && cJSON_AddStringToObject(msg, "role", "user") &&
         cJSON_AddStringToObject(msg, "content", message) &&
         cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    if (!ok) {
        s = ll_err_set(err, LL_ENOMEM, "--chat: out of memory");
    } else {
        s = chat_template_render_ex(t, ctx, bos, eos, NULL, text, len, err);
        if (s != LL_OK)
            ll_err_prefix(err, "%s: chat template: ", dir);
    }
    cJSON_Delete(ctx);
    free(bos);
    free(eos);
    chat_template_free(t);
    return s;
}

/* The prompt's ids into *ids (malloc'd). */
static enum ll_status prompt_ids(const struct gen_opts *g, const struct model *m,
                                 const struct tokenizer *tok, int32_t **ids, int *n,
                                 struct ll_err *err)
{
    size_t cnt = 0;
    enum ll_status s;
    if (g->prompt) {
        s = tokenizer_encode(tok, g->prompt, strlen(g->prompt), true, ids, &cnt, err);
    } else {
        char *text = NULL;
        size_t len = 0;
        s = chat_prompt(m->dir, g->chat, &text, &len, err);
        if (s == LL_OK)
            s = tokenizer_encode(tok, text, len, false, ids, &cnt, err);
        free(text);
    }
    *n = (int)cnt;
    if (s == LL_OK && cnt == 0)
        s = ll_err_set(err, LL_EINVAL, "the prompt encodes to no tokens");
    return s;
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts g;
    int pr = parse_args(argc, argv, &g);
    if (pr)
        return pr > 0 ? 0 : 2;

    struct ll_err err = {0};
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct tokenizer_stream *stream = NULL;
    struct model_runtime *rt = NULL;
    struct sampler smp = {0};
    struct token_counts counts = {0};
    float *logits = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0, rc = 1;

    struct model_open_opts mo = engine_opts_model_open(&g.engine);
    if (model_open(&m, g.dir, &mo, &err) != LL_OK)
        goto fail;
    bool need_tok = !g.ids || !g.print_ids;
    if (need_tok && tokenizer_load(&tok, g.dir, &err) != LL_OK)
        goto fail;
    if (g.ids) {
        if (run_parse_ids("generate", "--ids", g.ids, &ids, &n_prompt)) {
            rc = 2;
            goto done;
        }
    } else if (prompt_ids(&g, m, tok, &ids, &n_prompt, &err) != LL_OK) {
        goto fail;
    }
    int V = m->config.vocab_size;
    for (int i = 0; i < n_prompt; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            ll_err_set(&err, LL_EINVAL, "prompt token %d is id %d, outside the vocabulary (%d)",
                       i, ids[i], V);
            goto fail;
        }
    engine_opts_resolve(&g.engine, &m->config);
    struct runtime_opts o = engine_opts_runtime_seq(&g.engine, g.engine.n_ctx, 0);
    if (n_prompt >= o.n_ctx) {
        ll_err_set(&err, LL_ETOOLONG, "the prompt has %d tokens, the context only %d (--ctx)",
                   n_prompt, o.n_ctx);
        goto fail;
    }
    if (runtime_create(&rt, m, &o, &err) != LL_OK ||
        sampler_init(&smp, V, &err) != LL_OK)
        goto fail;
    if (tok && tokenizer_stream_init(&stream, tok, true, &err) != LL_OK)
        goto fail;
    logits = malloc(sizeof(float) * V);
    if (!logits) {
        ll_err_set(&err, LL_ENOMEM, "out of memory");
        goto fail;
    }
    struct engine_params ep = {0};
    gen_params_resolve(&ep, &g.sampling, &m->gen);
    const struct sampler_params *sp = &ep.sampling;
    const struct sampler_penalties *pen = &ep.penalties;
    if (sp->temperature > 0)
        fprintf(stderr, "sampling: temperature %.3g, top-k %d, top-p %.3g, min-p %.3g, "
                "repetition penalty %.3g, seed %lld\n", sp->temperature, sp->top_k, sp->top_p,
                sp->min_p, pen->repetition, (long long)sp->seed);
    /* the penalties count every id of the prompt and of the output, as the engine does */
    bool penalize = sampler_penalties_active(pen);
    if (penalize) {
        long long max_len = (long long)n_prompt + g.n < o.n_ctx ? n_prompt + g.n : o.n_ctx;
        if (token_counts_init(&counts, (int)max_len, &err) != LL_OK)
            goto fail;
        for (int i = 0; i < n_prompt; i++)
            token_counts_add(&counts, ids[i], false);
    }

    double t0 = ll_now();
    if (run_prompt(rt, ids, n_prompt, 0, logits, &err) != LL_OK)
        goto fail;
    double t_prompt = ll_now() - t0;

    t0 = ll_now();
    int produced = 0, steps = 0, pos = n_prompt;
    const char *why = "length";
    while (produced < g.n) {
        if (pos >= o.n_ctx) {
            why = "context full";
            break;
        }
        if (penalize)
            sampler_apply_penalties(logits, &counts, pen);
        int32_t next = sampler_sample(&smp, logits, sp, (uint64_t)pos);
        if (is_eos(m, next)) {
            why = "eos";
            break;
        }
        if (penalize)
            token_counts_add(&counts, next, true);
        produced++;
        if (g.print_ids) {
            printf(produced > 1 ? " %d" : "%d", next);
        } else {
            size_t len;
            const char *piece = tokenizer_stream_feed(stream, next, &len);
            fwrite(piece, 1, len, stdout);
        }
        fflush(stdout);
        if (produced == g.n)
            break;
        struct ll_batch b = {.n_tokens = 1, .token = &next, .pos = &pos};
        if (runtime_forward(rt, &b, logits, &err) != LL_OK)
            goto fail;
        steps++;
        pos++;
    }
    double t_gen = ll_now() - t0;
    if (stream) {
        size_t len;
        const char *rest = tokenizer_stream_flush(stream, &len);
        if (!g.print_ids)
            fwrite(rest, 1, len, stdout);
    }
    putchar('\n');
    fflush(stdout);
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.2f tokens/s)\n", n_prompt, t_prompt,
            n_prompt / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generated: %d tokens (stopped by %s); %d decode steps in %.3f s "
            "(%.2f tokens/s)\n", produced, why, steps, t_gen,
            steps / (t_gen > 0 ? t_gen : 1e-9));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli generate: %s\n", err.msg);
done:
    free(logits);
    sampler_free(&smp);
    token_counts_free(&counts);
    tokenizer_stream_free(stream);
    runtime_free(rt);
    tokenizer_free(tok);
    model_close(m);
    free(ids);
    return rc;
}
