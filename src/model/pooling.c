/*
 * pooling.c: the pooling of a model directory (sentence-transformers' modules.json and its
 * Pooling module's config.json) and the vector helpers (see pooling.h).
 */
#include "pooling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json.h"
#include "util.h"

const char *pooling_name(enum ll_pooling m)
{
    switch (m) {
    case LL_POOL_LAST:
        return "last";
    case LL_POOL_MEAN:
        return "mean";
    case LL_POOL_FIRST:
        return "first";
    case LL_POOL_NONE:
        break;
    }
    return "none";
}

bool pooling_parse(const char *word, enum ll_pooling *out)
{
    for (enum ll_pooling m = LL_POOL_NONE; m <= LL_POOL_FIRST; m++)
        if (!strcmp(word, pooling_name(m))) {
            *out = m;
            return true;
        }
    return false;
}

void pooling_normalize(float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    if (s <= 0)
        return;
    double inv = 1.0 / sqrt(s);
    for (int i = 0; i < n; i++)
        v[i] = (float)(v[i] * inv);
}

int pooling_output(const struct pooling_config *p, float *v, int n, int dimensions)
{
    int dim = dimensions > 0 && dimensions < n ? dimensions : n;
    if (p->normalize)
        pooling_normalize(v, dim);
    return dim;
}

/* The JSON file dir/name parsed into *out (NULL, LL_OK, when the file does not exist). */
static enum ll_status read_json(cJSON **out, const char *dir, const char *name,
                                struct ll_err *err)
{
    *out = NULL;
    char *path = ll_path_join(dir, name), *text = NULL;
    size_t len = 0;
    if (!path)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", dir);
    enum ll_status s = LL_OK;
    if (access(path, F_OK) == 0 && (s = ll_read_file(path, &text, &len, err)) == LL_OK)
        s = ll_json_parse(out, text, len, path, err);
    free(text);
    free(path);
    return s;
}

/* The Pooling module's config.json (dir/sub/config.json) into p->mode. */
static enum ll_status read_pooling(struct pooling_config *p, const char *dir, const char *sub,
                                   struct ll_err *err)
{
    static const struct {
        const char *key;
        enum ll_pooling mode; /* LL_POOL_NONE: not implemented */
    } modes[] = {
        {"pooling_mode_lasttoken", LL_POOL_LAST},
        {"pooling_mode_mean_tokens", LL_POOL_MEAN},
        {"pooling_mode_cls_token", LL_POOL_FIRST},
        {"pooling_mode_max_tokens", LL_POOL_NONE},
        {"pooling_mode_mean_sqrt_len_tokens", LL_POOL_NONE},
        {"pooling_mode_weightedmean_tokens", LL_POOL_NONE},
    };
    char name[512];
    snprintf(name, sizeof name, "%s%sconfig.json", sub, *sub ? "/" : "");
    cJSON *o = NULL;
    enum ll_status s = read_json(&o, dir, name, err);
    if (s != LL_OK)
        return s;
    if (!o)
        return ll_err_set(err, LL_EFORMAT, "%s/%s: missing (modules.json names a Pooling module "
                          "there)", dir, name);
    int n_on = 0;
    const char *on = NULL;
    for (size_t i = 0; s == LL_OK && i < sizeof modes / sizeof modes[0]; i++) {
        bool v = false;
        if ((s = ll_json_get_bool(o, modes[i].key, &v, NULL, err)) == LL_OK && v) {
            n_on++;
            on = modes[i].key;
            p->mode = modes[i].mode;
        }
    }
    bool include_prompt = true;
    if (s == LL_OK)
        s = ll_json_get_bool(o, "include_prompt", &include_prompt, NULL, err);
    if (s != LL_OK)
        ll_err_prefix(err, "%s/%s: ", dir, name);
    else if (n_on != 1)
        s = ll_err_set(err, LL_EUNSUPPORTED, "%s/%s: %d pooling modes are on (one of "
                       "pooling_mode_lasttoken, pooling_mode_mean_tokens, pooling_mode_cls_token "
                       "is implemented)", dir, name, n_on);
    else if (p->mode == LL_POOL_NONE)
        s = ll_err_set(err, LL_EUNSUPPORTED, "%s/%s: %s is not implemented (pooling_mode_"
                       "lasttoken, pooling_mode_mean_tokens, pooling_mode_cls_token are)", dir,
                       name, on);
    else if (!include_prompt)
        s = ll_err_set(err, LL_EUNSUPPORTED, "%s/%s: include_prompt false (an instruction left "
                       "out of the pooling) is not implemented", dir, name);
    cJSON_Delete(o);
    return s;
}

enum ll_status pooling_load(struct pooling_config *p, const char *dir, struct ll_err *err)
{
    *p = (struct pooling_config){.mode = LL_POOL_LAST, .normalize = true};
    snprintf(p->source, sizeof p->source, "no modules.json: a causal LM's last position");
    cJSON *mods = NULL;
    enum ll_status s = read_json(&mods, dir, "modules.json", err);
    if (s != LL_OK || !mods)
        return s;
    if (!cJSON_IsArray(mods)) {
        cJSON_Delete(mods);
        return ll_err_set(err, LL_EFORMAT, "%s/modules.json: expected an array of modules",
                          dir);
    }
    p->normalize = false;
    snprintf(p->source, sizeof p->source, "modules.json");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, mods) {
        const char *type = NULL, *path = "";
        if ((s = ll_json_get_str(m, "type", &type, NULL, err)) != LL_OK ||
            (s = ll_json_get_str(m, "path", &path, NULL, err)) != LL_OK) {
            ll_err_prefix(err, "%s/modules.json[%d]: ", dir, i);
            break;
        }
        const char *cls = type ? strrchr(type, '.') : NULL;
        cls = cls ? cls + 1 : type ? type : "";
        if (!strcmp(cls, "Pooling")) {
            if ((s = read_pooling(p, dir, path, err)) != LL_OK)
                break;
            snprintf(p->source, sizeof p->source, "modules.json, %.60s/config.json",
                     *path ? path : ".");
        } else if (!strcmp(cls, "Normalize")) {
            p->normalize = true;
        } else if (strcmp(cls, "Transformer")) {
            s = ll_err_set(err, LL_EUNSUPPORTED, "%s/modules.json[%d]: module type '%.80s' is "
                           "not implemented (Transformer, Pooling and Normalize are)", dir, i,
                           type ? type : "(none)");
            break;
        }
        i++;
    }
    cJSON_Delete(mods);
    return s;
}

enum ll_status pooling_choose(struct pooling_config *p, const char *dir, enum ll_pooling force,
                              struct ll_err *err)
{
    enum ll_status s = pooling_load(p, dir, err);
    if (s != LL_OK)
        *p = (struct pooling_config){.normalize = true};
    if (force == LL_POOL_NONE)
        return s;
    p->mode = force;
    snprintf(p->source, sizeof p->source, "--pooling");
    return LL_OK;
}
