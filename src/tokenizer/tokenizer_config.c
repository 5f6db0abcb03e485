/*
 * tokenizer_config.c: what the tokenizer takes from DIR/tokenizer_config.json (transformers'
 * file; optional): bos_token and eos_token (a string, or an AddedToken object whose "content"
 * is the string, or null) and the add_bos_token / add_eos_token switches.
 *
 * Special-token policy of tokenizer_encode(add_special = true):
 *   - start from the post-processor of tokenizer.json (TemplateProcessing's "single");
 *   - where tokenizer_config.json has add_bos_token, BOS is put in front iff it is true, and
 *     likewise add_eos_token for EOS at the end (transformers' Llama fast tokenizer rewrites
 *     its post-processor from these switches; DeepSeek-R1-Distill-Qwen uses that class).
 * tokenizer_bos_id() is the config's bos_token, else the first token the post-processor puts
 * in front. Runs once at load.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static enum ll_status apply_config(struct tokenizer *tok, const cJSON *root, const char *path,
                                   struct ll_err *err)
{
    if (!cJSON_IsObject(root))
        return ll_err_set(err, LL_EFORMAT, "%s: expected a JSON object at the top level", path);
    bool bos_set, bos_on, eos_set, eos_on;
    enum ll_status st;
    if ((st = read_token(root, "bos_token", path, &tok->bos_token, err)) != LL_OK ||
        (st = read_token(root, "eos_token", path, &tok->eos_token, err)) != LL_OK ||
        (st = read_switch(root, "add_bos_token", path, &bos_set, &bos_on, err)) != LL_OK ||
        (st = read_switch(root, "add_eos_token", path, &eos_set, &eos_on, err)) != LL_OK)
        return st;
    if ((st = special_id(tok, tok->bos_token, "bos_token", bos_set && bos_on, path, &tok->bos_id,
                         err)) != LL_OK ||
        (st = special_id(tok, tok->eos_token, "eos_token", eos_set && eos_on, path, &tok->eos_id,
                         err)) != LL_OK)
        return st;
    if (bos_set) {
        tok->n_prefix = bos_on ? 1 : 0;
        tok->prefix[0] = tok->bos_id;
    }
    if (eos_set) {
        tok->n_suffix = eos_on ? 1 : 0;
        tok->suffix[0] = tok->eos_id;
    }
    return LL_OK;
}

enum ll_status tok_load_config(struct tokenizer *tok, const char *model_dir, struct ll_err *err)
{
    char *path = ll_path_join(model_dir, "tokenizer_config.json");
    if (!path)
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory");
    enum ll_status st = LL_OK;
    if (access(path, F_OK) == 0 || errno != ENOENT) {
        char *data = NULL;
        size_t len = 0;
        cJSON *root = NULL;
        st = ll_read_file(path, &data, &len, err);
        if (st == LL_OK)
            st = ll_json_parse(&root, data, len, path, err);
        if (st == LL_OK)
            st = apply_config(tok, root, path, err);
        cJSON_Delete(root);
        free(data);
    }
    if (st == LL_OK && tok->bos_id < 0 && tok->n_prefix > 0)
        tok->bos_id = tok->prefix[0];
    free(path);
    return st;
}
