/*
 * model.c: model_open / model_close (see model.h).
 *
 * Order of open: the directory, config.json (-> family via the registry), generation_config.json
 * (optional), the weight files (mmap + full validation), then the family binds its tensors
 * against the config, listing its linear weights in m->linears, which are then quantized when
 * the caller asked for it (model_quant.c). Any failure undoes everything done so far and leaves one message naming
 * the file and the problem. Runs on the start-up thread; the model is read-only afterwards.
 */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "matmul.h"
#include "model_config.h"
#include "model_copy.h"
#include "model_pack.h"
#include "model_quant.h"
#include "model_registry.h"
#include "qmatmul.h"
#include "safetensors.h"
#include "util.h"

/* Pick the family from model_type, else from architectures[0]. */
static enum ll_status family_pick(struct model *m, const char *cfg_path, struct ll_err *err)
{
    struct model_config *c = &m->config;
    char known[256];
    model_registry_names(known, sizeof known);
    if (c->model_type[0]) {
        m->family = model_registry_find(c->model_type);
        if (!m->family)
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: unknown model_type \"%s\" (known: %s)", cfg_path,
                              c->model_type, known);
        return LL_OK;
    }
    m->family = model_registry_find_arch(c->architecture);
    if (!m->family)
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: no model_type, and architecture \"%s\" is unknown (known model "
                          "types: %s)",
                          cfg_path, c->architecture, known);
    strcpy(c->model_type, m->family->model_type); /* fits: registry names are short */
    return LL_OK;
}

static enum ll_status open_steps(struct model *m, const char *dir,
                                 const struct model_open_opts *opts, struct ll_err *err)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ll_err_set(err, LL_EIO, "model directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ll_err_set(err, LL_EIO, "model directory %s: not a directory", dir);

    char *cfg_path = ll_path_join(dir, "config.json");
    char *gen_path = ll_path_join(dir, "generation_config.json");
    enum ll_status s;
    if (!cfg_path || !gen_path) {
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", dir);
        goto out;
    }
    if ((s = model_config_read(&m->config, cfg_path, err)) ||
        (s = family_pick(m, cfg_path, err)) ||
        (s = generation_defaults_read(&m->gen, gen_path, err)) ||
        (s = model_config_merge_eos(&m->config, &m->gen, cfg_path, gen_path, err)) ||
        (!m->family->no_weights && (s = st_open_dir(&m->st, dir, err))))
        goto out;
    if ((s = m->family->bind(m, err)))
        goto out;
    m->quantized = m->config.quantized;
    m->qscheme = m->config.qscheme;
    /* quantizing first: its planes are new memory, so only what a stored model keeps in the
     * mapping is copied (nothing, after quantizing at load); packing reads the copy */
    if (opts && opts->quantize && (s = model_quantize(m, opts->qscheme, opts->n_threads, err)))
        goto out;
    if (!(opts && opts->keep_mapped) &&
        (s = model_copy_weights(m, opts ? opts->n_threads : 0, err)))
        goto out;
    if (opts && opts->pack_bf16)
        s = model_pack_bf16(m, opts->n_threads, err);
out:
    free(cfg_path);
    free(gen_path);
    return s;
}

enum ll_status model_open(struct model **out, const char *dir, const struct model_open_opts *opts,
                          struct ll_err *err)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", dir);
    }
    enum ll_status s = open_steps(m, dir, opts, err);
    if (s != LL_OK) {
        model_close(m);
        return s;
    }
    *out = m;
    return LL_OK;
}

size_t model_linear_dense_bytes(const struct model_linear *l)
{
    return (size_t)l->n * (size_t)l->k * ll_dtype_size(l->dense.dtype);
}

void model_weights_str(const struct model *m, char *buf, size_t size)
{
    if (!m->quantized && m->pkmem)
        snprintf(buf, size, "%s (packed at load in %.2f s)", ll_dtype_name(m->weight_dtype),
                 m->pack_seconds);
    else if (!m->quantized)
        snprintf(buf, size, "%s", ll_dtype_name(m->weight_dtype));
    else if (m->quant_seconds > 0)
        snprintf(buf, size, "%s (quantized at load in %.2f s; %s embedding)",
                 model_qscheme_name(m->qscheme), m->quant_seconds, ll_dtype_name(m->weight_dtype));
    else
        snprintf(buf, size, "%s (stored; %s embedding)", model_qscheme_name(m->qscheme),
                 ll_dtype_name(m->weight_dtype));
}

void model_shape_str(const struct model *m, char *buf, size_t size)
{
    const struct model_config *c = &m->config;
    char moe[80] = "";
    if (c->moe.n_experts)
        snprintf(moe, sizeof moe, ", %d experts (%d a token)", c->moe.n_experts,
                 c->moe.n_experts_used);
    char window[64] = "";
    int windowed = 0;
    for (int l = 0; l < c->n_layers; l++)
        windowed += model_layer_windowed(c, l);
    if (windowed == c->n_layers)
        snprintf(window, sizeof window, ", sliding window %d in every layer", c->swa.window);
    else if (windowed)
        snprintf(window, sizeof window, ", sliding window %d in %d of the layers",
                 c->swa.window, windowed);
    int nope = 0;
    for (int l = 0; l < c->n_layers; l++)
        nope += !model_layer_rope(c, l);
    char rope[48] = "";
    if (nope)
        snprintf(rope, sizeof rope, ", no RoPE in %d of the layers", nope);
    snprintf(buf, size, "%s, %d layers, hidden %d%s, vocab %d%s%s", c->model_type, c->n_layers,
             c->hidden_size, moe, c->vocab_size, window, rope);
}

const char *model_matmul_variant(const struct model *m)
{
    return m->quantized ? ll_qmatmul_variant() : ll_matmul_variant();
}

void model_close(struct model *m)
{
    if (!m)
        return;
    if (m->family && m->family->unbind)
        m->family->unbind(m);
    st_close(m->st);
    free(m->linears);
    ll_huge_free(m->qmem, m->qmem_bytes);
    ll_huge_free(m->pkmem, m->pkmem_bytes);
    free(m->pkesc);
    ll_huge_free(m->wmem, m->wmem_bytes);
    free(m->dir);
    free(m);
}
