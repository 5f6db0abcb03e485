/*
 * cmd_generate.c: `llaisys-cli generate`: offline generation for one prompt.
 *
 * The prompt comes as text (encoded with BOS), as a chat message (rendered with the model's chat
 * template, add_generation_prompt, encoded without BOS since the template writes it) or as ids.
 * Tokens are streamed to stdout as they are produced (incremental UTF-8-safe detokenizer, or ids
 * with --print-ids) until an eos id of config.json / generation_config.json, -n tokens, or the
 * end of the context. Sampling defaults come from generation_config.json; timings go to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "run_common.h"
#include "runtime.h"
#include "sampler.h"
#include "tokenizer.h"
#include "util.h"

/* The engine options generate takes (it runs the model without the engine). */
#define GENERATE_ENGINE_OPTS                                                                 \
    (ENGINE_OPT_BIT(ENGINE_OPT_THREADS) | ENGINE_OPT_BIT(ENGINE_OPT_CTX) |                     \
     ENGINE_OPT_BIT(ENGINE_OPT_EXACT))

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
            "  --temp T       temperature; 0 is greedy (default: generation_config.json, else 0)\n"
            "  --top-k K      keep the K most likely tokens (0: off; default generation_config,\n"
            "                 else 50 when sampling, as Hugging Face)\n"
            "  --top-p P      nucleus sampling (default generation_config.json, else 1)\n"
            "  --seed S       sampling seed (default: from the clock, printed to stderr)\n"
            "  --print-ids    print token ids instead of text\n\n");
    engine_args_usage(f, GENERATE_ENGINE_OPTS);
}

struct gen_opts {
    const char *dir, *prompt, *chat, *ids;
    long long n, top_k;
    double temp, top_p;
    bool has_temp, has_top_k, has_top_p, has_seed, print_ids;
    unsigned long long seed;
    struct engine_opts engine; /* --threads, --ctx, --exact */
};

static int parse_args(int argc, char **argv, struct gen_opts *g)
{
    memset(g, 0, sizeof *g);
    g->n = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = engine_args_parse("generate", GENERATE_ENGINE_OPTS, argc, argv, &i, &g->engine);
        if (r < 0)
            return -1;
        if (r > 0)
            continue;
        bool v = i + 1 < argc;
        long long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            generate_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model") && v) {
            g->dir = argv[++i];
        } else if (!strcmp(a, "--prompt") && v) {
            g->prompt = argv[++i];
        } else if (!strcmp(a, "--chat") && v) {
            g->chat = argv[++i];
        } else if (!strcmp(a, "--ids") && v) {
            g->ids = argv[++i];
        } else if (!strcmp(a, "-n") && v) {
            if (run_parse_int("generate", a, argv[++i], 0, 1 << 30, &g->n))
                return -1;
        } else if (!strcmp(a, "--top-k") && v) {
            if (run_parse_int("generate", a, argv[++i], 0, 1 << 30, &g->top_k))
                return -1;
            g->has_top_k = true;
        } else if (!strcmp(a, "--temp") && v) {
            if (run_parse_float("generate", a, argv[++i], &g->temp))
                return -1;
            if (g->temp < 0) {
                fprintf(stderr, "llaisys-cli generate: --temp must be >= 0\n");
                return -1;
            }
            g->has_temp = true;
        } else if (!strcmp(a, "--top-p") && v) {
            if (run_parse_float("generate", a, argv[++i], &g->top_p))
                return -1;
            if (g->top_p <= 0 || g->top_p > 1) {
                fprintf(stderr, "llaisys-cli generate: --top-p must be in (0, 1]\n");
                return -1;
            }
            g->has_top_p = true;
        } else if (!strcmp(a, "--seed") && v) {
            if (run_parse_int("generate", a, argv[++i], 0, INT64_MAX, &x))
                return -1;
            g->seed = (unsigned long long)x;
            g->has_seed = true;
        } else if (!strcmp(a, "--print-ids")) {
            g->print_ids = true;
        } else {
            fprintf(stderr, "llaisys-cli generate: unknown or incomplete option '%s'\n", a);
            generate_usage(stderr);
            return -1;
        }
    }
    if (!g->dir) {
        fprintf(stderr, "llaisys-cli generate: --model is required\n");
        return -1;
    }
    if (!!g->prompt + !!g->chat + !!g->ids != 1) {
        fprintf(stderr, "llaisys-cli generate: give exactly one of --prompt, --chat, --ids\n");
        return -1;
    }
    return 0;
}

/* Sampling parameters: flags first, then generation_config.json, then Hugging Face defaults. */
static struct sampler_params pick_params(const struct gen_opts *g, const struct model *m)
{
    const struct generation_defaults *d = &m->gen;
    bool sample = d->has_do_sample ? d->do_sample : false;
    struct sampler_params p = {0};
    p.temperature = g->has_temp ? (float)g->temp
                    : !sample ? 0.0f
                    : d->has_temperature ? d->temperature
                                         : 1.0f;
    p.top_k = g->has_top_k ? (int)g->top_k : d->has_top_k ? d->top_k : 50;
    p.top_p = g->has_top_p ? (float)g->top_p : d->has_top_p ? d->top_p : 1.0f;
    p.seed = g->has_seed ? g->seed : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return p;
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
    float *logits = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0, rc = 1;

    if (model_open(&m, g.dir, &err) != LL_OK)
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
    struct runtime_opts o = {.n_ctx = g.engine.n_ctx, .n_threads = g.engine.n_threads,
                             .math = g.engine.exact ? LL_MATH_EXACT : LL_MATH_FAST};
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
    struct sampler_params sp = pick_params(&g, m);
    if (sp.temperature > 0)
        fprintf(stderr, "sampling: temperature %.3g, top-k %d, top-p %.3g, seed %llu\n",
                sp.temperature, sp.top_k, sp.top_p, (unsigned long long)sp.seed);

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
        int32_t next = sampler_sample(&smp, logits, &sp, (uint64_t)pos);
        if (is_eos(m, next)) {
            why = "eos";
            break;
        }
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
    tokenizer_stream_free(stream);
    runtime_free(rt);
    tokenizer_free(tok);
    model_close(m);
    free(ids);
    return rc;
}
