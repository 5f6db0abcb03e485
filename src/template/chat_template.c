/*
 * chat_template.c: the chat-template front: compile a template (lexer + parser), render it with
 * a JSON context plus the special tokens, and load a model directory's template and special
 * tokens from tokenizer_config.json (read by tokenizer_config_read, its one reader).
 *
 * A struct chat_template owns the arena holding its AST and a copy of its source; nothing in it
 * changes after chat_template_compile returns, so renders on many threads can share it.
 */
#include "chat_template.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "tokenizer.h"
#include "util.h"

struct chat_template {
    struct jarena *arena;
    char *src;
    struct jnode *root;
};

void chat_template_default_limits(struct chat_template_limits *l)
{
    l->max_output = (size_t)32 << 20;
    l->max_memory = (size_t)256 << 20;
    l->max_steps = 10 * 1000 * 1000;
    l->max_call_depth = 64;
}

enum ll_status chat_template_compile(struct chat_template **out, const char *source,
                                     struct ll_err *err)
{
    *out = NULL;
    if (!source)
        return ll_err_set(err, LL_EINVAL, "chat template: no source");
    struct chat_template *t = calloc(1, sizeof *t);
    if (t)
        t->arena = jarena_new();
    size_t len = strlen(source);
    if (t && t->arena)
        t->src = malloc(len + 1);
    if (!t || !t->arena || !t->src) {
        chat_template_free(t);
        return ll_err_set(err, LL_ENOMEM, "chat template: out of memory");
    }
    memcpy(t->src, source, len + 1);
    struct jtoken *toks;
    size_t ntoks;
    enum ll_status st = jlex(t->arena, t->src, len, &toks, &ntoks, err);
    if (st == LL_OK)
        st = jparse(t->arena, toks, ntoks, &t->root, err);
    if (st != LL_OK) {
        ll_err_prefix(err, "chat template: ");
        chat_template_free(t);
        return st;
    }
    *out = t;
    return LL_OK;
}

void chat_template_free(struct chat_template *t)
{
    if (!t)
        return;
    jarena_free(t->arena);
    free(t->src);
    free(t);
}

const char *chat_template_source(const struct chat_template *t)
{
    return t->src;
}

enum ll_status chat_template_render_ex(const struct chat_template *t, const struct cJSON *context,
                                       const char *bos, const char *eos,
                                       const struct chat_template_limits *limits, char **out_text,
                                       size_t *out_len, struct ll_err *err)
{
    *out_text = NULL;
    if (out_len)
        *out_len = 0;
    const cJSON *ctx = (const cJSON *)context;
    if (ctx && !cJSON_IsObject(ctx) && !cJSON_IsNull(ctx))
        return ll_err_set(err, LL_EINVAL, "chat template: the context must be a JSON object");
    size_t n = 2;
    for (const cJSON *c = ctx ? ctx->child : NULL; c; c = c->next)
        n++;
    struct jinput *in = calloc(n, sizeof *in);
    if (!in)
        return ll_err_set(err, LL_ENOMEM, "chat template: out of memory");
    size_t k = 0;
    for (const cJSON *c = ctx ? ctx->child : NULL; c; c = c->next)
        if (c->string)
            in[k++] = (struct jinput){.name = c->string, .json = c};
    if (bos)
        in[k++] = (struct jinput){.name = "bos_token", .str = bos};
    if (eos)
        in[k++] = (struct jinput){.name = "eos_token", .str = eos};
    struct chat_template_limits dl;
    if (!limits) {
        chat_template_default_limits(&dl);
        limits = &dl;
    }
    struct jlimits lim = {
        .max_output = limits->max_output,
        .max_memory = limits->max_memory,
        .max_steps = limits->max_steps,
        .max_call_depth = limits->max_call_depth,
    };
    enum ll_status st = jrender_run(t->root, &lim, in, k, out_text, out_len, err);
    free(in);
    if (st != LL_OK)
        ll_err_prefix(err, "chat template: ");
    return st;
}

enum ll_status chat_template_render(const struct chat_template *t, const struct cJSON *context,
                                    const char *bos, const char *eos, char **out_text,
                                    struct ll_err *err)
{
    return chat_template_render_ex(t, context, bos, eos, NULL, out_text, NULL, err);
}

enum ll_status chat_template_load_model(struct chat_template **out, char **bos, char **eos,
                                        const char *model_dir, struct ll_err *err)
{
    *out = NULL;
    if (bos)
        *bos = NULL;
    if (eos)
        *eos = NULL;
    struct tokenizer_config cfg;
    char *jinja = NULL, *jinja_path = NULL;
    const char *source;
    enum ll_status st = tokenizer_config_read(&cfg, model_dir, err);
    if (st != LL_OK)
        goto done;
    if (!cfg.found) {
        st = ll_err_set(err, LL_EIO, "%s: %s", cfg.path, strerror(ENOENT));
        goto done;
    }
    if (cfg.chat_template_error) {
        st = ll_err_set(err, LL_EFORMAT, "%s: %s", cfg.path, cfg.chat_template_error);
        goto done;
    }
    source = cfg.chat_template;
    if (!source) {
        jinja_path = ll_path_join(model_dir, "chat_template.jinja");
        if (!jinja_path) {
            st = ll_err_set(err, LL_ENOMEM, "out of memory");
            goto done;
        }
        size_t jl;
        struct ll_err ignored;
        if (ll_read_file(jinja_path, &jinja, &jl, &ignored) != LL_OK) {
            st = ll_err_set(err, LL_EFORMAT, "%s: no chat_template (and no chat_template.jinja)",
                            cfg.path);
            goto done;
        }
        source = jinja;
    }
    st = chat_template_compile(out, source, err);
    if (st != LL_OK) {
        ll_err_prefix(err, "%s: ", jinja ? jinja_path : cfg.path);
        goto done;
    }
    if (bos) {
        *bos = cfg.bos_token;
        cfg.bos_token = NULL;
    }
    if (eos) {
        *eos = cfg.eos_token;
        cfg.eos_token = NULL;
    }
done:
    tokenizer_config_free(&cfg);
    free(jinja);
    free(jinja_path);
    return st;
}
