/*
 * tokenizer_config.c: the one reader of DIR/tokenizer_config.json (transformers' file;
 * optional; see struct tokenizer_config in tokenizer.h), and what the tokenizer takes from it:
 * bos_token and eos_token (a string, or an AddedToken object whose "content" is the string, or
 * null) and the add_bos_token / add_eos_token switches. The chat template loader
 * (chat_template.c) and mkmodel read the same struct.
 *
 * Special-token policy of tokenizer_encode(add_special = true):
 *   - start from the post-processor of tokenizer.json (TemplateProcessing's "single");
 *   - where tokenizer_config.json has add_bos_token, BOS is put in front iff it is true, and
 *     likewise add_eos_token for EOS at the end (transformers' Llama fast tokenizer rewrites
 *     its post-processor from these switches; DeepSeek-R1-Distill-Qwen uses that class).
 * tokenizer_bos_id() is the config's bos_token, else the first token the post-processor puts
 * in front. Llama's `legacy` is not read: it changes transformers' slow (sentencepiece)
 * tokenizer and the conversion to tokenizer.json, while the fast tokenizer encodes as the
 * tokenizer.json says. Runs at load, on the loading thread.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"
#include "util.h"

/* bos_token / eos_token: *out is a malloc'd copy or NULL. */
static enum ll_status read_token(const cJSON *root, const char *name, const char *path,
                                 char **out, struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return LL_OK;
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return ll_err_set(err, LL_EFORMAT, "%s: %s: expected a string, an AddedToken object with "
                          "a string \"content\", or null", path, name);
    if (!(*out = strdup(v->valuestring)))
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    return LL_OK;
}

/* add_bos_token / add_eos_token: *set tells whether the file says it. */
static enum ll_status read_switch(const cJSON *root, const char *name, const char *path,
                                  bool *set, bool *on, struct ll_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *set = *on = false;
    if (!v || cJSON_IsNull(v))
        return LL_OK;
    if (!cJSON_IsBool(v))
        return ll_err_set(err, LL_EFORMAT, "%s: %s: expected true or false", path, name);
    *set = true;
    *on = cJSON_IsTrue(v);
    return LL_OK;
}

/* chat_template: a string, or a list of {name, template} from which "default" (else the only
 * entry) is taken. Sets cfg->chat_template or cfg->chat_template_error; fails only for memory. */
static enum ll_status read_template(struct tokenizer_config *cfg, const cJSON *root,
                                    struct ll_err *err)
{
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    const char *source = NULL;
    if (!tpl || cJSON_IsNull(tpl))
        return LL_OK;
    if (cJSON_IsString(tpl)) {
        source = tpl->valuestring;
    } else if (cJSON_IsArray(tpl)) {
        const cJSON *only = NULL;
        int count = 0;
        for (const cJSON *e = tpl->child; e; e = e->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(body)) {
                cfg->chat_template_error =
                    "chat_template list entries need string \"name\" and \"template\"";
                return LL_OK;
            }
            count++;
            only = body;
            if (!strcmp(name->valuestring, "default")) {
                source = body->valuestring;
                break;
            }
        }
        if (!source && count == 1)
            source = only->valuestring;
        if (!source) {
            cfg->chat_template_error = "chat_template list has no \"default\" entry";
            return LL_OK;
        }
    } else {
        cfg->chat_template_error = "chat_template must be a string or a list";
        return LL_OK;
    }
    if (!(cfg->chat_template = strdup(source)))
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", cfg->path);
    return LL_OK;
}

static enum ll_status read_fields(struct tokenizer_config *cfg, const cJSON *root,
                                  struct ll_err *err)
{
    const char *path = cfg->path;
    if (!cJSON_IsObject(root))
        return ll_err_set(err, LL_EFORMAT, "%s: expected a JSON object at the top level", path);
    enum ll_status st;
    if ((st = read_token(root, "bos_token", path, &cfg->bos_token, err)) != LL_OK ||
        (st = read_token(root, "eos_token", path, &cfg->eos_token, err)) != LL_OK ||
        (st = read_switch(root, "add_bos_token", path, &cfg->has_add_bos, &cfg->add_bos, err)) !=
            LL_OK ||
        (st = read_switch(root, "add_eos_token", path, &cfg->has_add_eos, &cfg->add_eos, err)) !=
            LL_OK)
        return st;
    return read_template(cfg, root, err);
}

enum ll_status tokenizer_config_read(struct tokenizer_config *cfg, const char *model_dir,
                                     struct ll_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!(cfg->path = ll_path_join(model_dir, "tokenizer_config.json")))
        return ll_err_set(err, LL_ENOMEM, "tokenizer_config.json: out of memory");
    if (access(cfg->path, F_OK) != 0 && errno == ENOENT)
        return LL_OK;
    char *data = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    enum ll_status st = ll_read_file(cfg->path, &data, &len, err);
    if (st == LL_OK)
        st = ll_json_parse(&root, data, len, cfg->path, err);
    if (st == LL_OK) {
        cfg->found = true;
        st = read_fields(cfg, root, err);
    }
    cJSON_Delete(root);
    free(data);
    return st;
}

void tokenizer_config_free(struct tokenizer_config *cfg)
{
    free(cfg->path);
    free(cfg->bos_token);
    free(cfg->eos_token);
    free(cfg->chat_template);
    memset(cfg, 0, sizeof *cfg);
}

/* Id of a configured special token; an error only when the tokenizer must add it. */
static enum ll_status special_id(struct tokenizer *tok, const char *token, const char *name,
                                 bool needed, const char *path, int32_t *id, struct ll_err *err)
{
    *id = token ? tokenizer_token_to_id(tok, token) : -1;
    if (*id < 0 && needed)
        return ll_err_set(err, LL_EFORMAT, "%s: %s \"%.80s\" is not a token of tokenizer.json",
                          path, name, token ? token : "(none)");
    return LL_OK;
}

/* Take the config's special tokens and switches into tok (the strings change owner). */
static enum ll_status apply_config(struct tokenizer *tok, struct tokenizer_config *cfg,
                                   struct ll_err *err)
{
    tok->bos_token = cfg->bos_token;
    tok->eos_token = cfg->eos_token;
    cfg->bos_token = cfg->eos_token = NULL;
    enum ll_status st;
    if ((st = special_id(tok, tok->bos_token, "bos_token", cfg->has_add_bos && cfg->add_bos,
                         cfg->path, &tok->bos_id, err)) != LL_OK ||
        (st = special_id(tok, tok->eos_token, "eos_token", cfg->has_add_eos && cfg->add_eos,
                         cfg->path, &tok->eos_id, err)) != LL_OK)
        return st;
    if (cfg->has_add_bos) {
        tok->n_prefix = cfg->add_bos ? 1 : 0;
        tok->prefix[0] = tok->bos_id;
    }
    if (cfg->has_add_eos) {
        tok->n_suffix = cfg->add_eos ? 1 : 0;
        tok->suffix[0] = tok->eos_id;
    }
    return LL_OK;
}

enum ll_status tok_load_config(struct tokenizer *tok, const char *model_dir, struct ll_err *err)
{
    struct tokenizer_config cfg;
    enum ll_status st = tokenizer_config_read(&cfg, model_dir, err);
    if (st == LL_OK && cfg.found)
        st = apply_config(tok, &cfg, err);
    if (st == LL_OK && tok->bos_id < 0 && tok->n_prefix > 0)
        tok->bos_id = tok->prefix[0];
    tokenizer_config_free(&cfg);
    return st;
}
