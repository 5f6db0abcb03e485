/*
 * model_quant.c: quantizing a model's linear weights at load, and writing a quantized model
 * directory (see model_quant.h; the files are described in model_bind.h).
 *
 * At load, the work is every linear weight cut into pieces of PIECE_ROWS rows (whole 16-row
 * groups, so ll_quantize_rows calls on different pieces write disjoint bytes), run by
 * model_pieces_run on a temporary compute pool. The bytes do not depend on which thread
 * quantized what. Called on the start-up thread (model_open) or the CLI thread (quantize).
 */
#include "model_quant.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "log.h"
#include "model_bind.h"
#include "model_dir.h"
#include "model_pieces.h"
#include "pool.h"
#include "safetensors.h"
#include "util.h"

#define PIECE_ROWS 64 /* rows of one piece of work (a multiple of LL_QGROUP) */

static size_t round64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* ---- quantizing at load ---- */

struct qjob {
    enum ll_qtype *t; /* (n_linears) each weight's type */
    uint8_t **qs;     /* (n_linears) destination planes */
    uint16_t **d;
};

static enum ll_status quantize_piece(void *ctx, struct model_linear *l, int i, int r0, int r1,
                                     int64_t piece, struct ll_err *err)
{
    (void)piece;
    const struct qjob *j = ctx;
    return ll_quantize_rows(j->qs[i], j->d[i], j->t[i], l->dense.data, l->dense.dtype, l->n, l->k,
                            r0, r1, err);
}

enum ll_status model_quantize(struct model *m, enum model_qscheme scheme, int n_threads,
                              struct ll_err *err)
{
    const char *sname = model_qscheme_name(scheme);
    if (m->quantized) {
        if (m->qscheme == scheme)
            return LL_OK;
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: the model is stored quantized as %s; quantizing it again to %s is "
                          "not supported (quantize the original weights instead)",
                          m->dir, model_qscheme_name(m->qscheme), sname);
    }
    const int nl = m->n_linears;
    struct qjob j = {0};
    j.t = calloc((size_t)nl + 1, sizeof *j.t);
    j.qs = calloc((size_t)nl + 1, sizeof *j.qs);
    j.d = calloc((size_t)nl + 1, sizeof *j.d);
    void *mem = NULL;
    size_t total = 0;
    double weights = 0;
    enum ll_status s = LL_OK;
    if (!j.t || !j.qs || !j.d) {
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
        goto out;
    }
    for (int i = 0; i < nl; i++) {
        const struct model_linear *l = m->linears[i];
        LL_ASSERT(!l->quantized && l->dense.data);
        j.t[i] = model_qscheme_type(scheme, l->role, l->layer, m->config.n_layers);
        if (l->k % LL_QBLOCK) {
            s = ll_err_set(err, LL_EINVAL,
                           "%s: weight '%s' has %d inputs, not a multiple of %d: it cannot be "
                           "quantized to %s",
                           m->dir, l->name, l->k, LL_QBLOCK, ll_qtype_name(j.t[i]));
            goto out;
        }
        total += round64(ll_qweight_qs_bytes(j.t[i], l->n, l->k)) +
                 round64(ll_qweight_d_bytes(j.t[i], l->n, l->k));
        weights += (double)l->n * l->k;
    }
    mem = ll_huge_alloc(total);
    if (!mem && total) {
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory for %zu bytes of %s weights", m->dir,
                       total, sname);
        goto out;
    }
    char *p = mem;
    for (int i = 0; i < nl; i++) {
        const struct model_linear *l = m->linears[i];
        j.qs[i] = (uint8_t *)p;
        p += round64(ll_qweight_qs_bytes(j.t[i], l->n, l->k));
        j.d[i] = (uint16_t *)p;
        p += round64(ll_qweight_d_bytes(j.t[i], l->n, l->k));
    }
    if (n_threads < 1)
        n_threads = ll_pool_default_threads();
    double t0 = ll_now();
    if ((s = model_pieces_run(m, PIECE_ROWS, n_threads, quantize_piece, &j, err)))
        goto out;
    double secs = ll_now() - t0;
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        struct ll_err e = {0};
        LL_ASSERT(ll_qweight_init(&l->q, j.t[i], l->n, l->k, j.qs[i],
                                  ll_qweight_qs_bytes(j.t[i], l->n, l->k), j.d[i],
                                  ll_qweight_d_bytes(j.t[i], l->n, l->k), &e) == LL_OK);
        l->quantized = true;
        if (!l->tied) {
            ll_release_pages(l->dense.data, model_linear_dense_bytes(l));
            l->dense.data = NULL;
        }
    }
    m->qmem = mem;
    m->qmem_bytes = total;
    mem = NULL;
    m->quantized = true;
    m->qscheme = scheme;
    m->quant_seconds = secs;
    log_msg(LOG_INFO,
            "%s: quantized %d linear weights (%.3g G weights, %.2f bits a weight) to %s in "
            "%.2f s on %d threads (%.0f MiB)",
            m->dir, nl, weights * 1e-9, weights > 0 ? (double)total * 8 / weights : 0.0, sname,
            secs, n_threads, (double)total / (1 << 20));
out:
    ll_huge_free(mem, total);
    free(j.t);
    free(j.qs);
    free(j.d);
    return s;
}

/* ---- writing a quantized directory ---- */

/* Files of a model directory copied as they are, where the source has them. */
static const char *const copied_files[] = {
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
};

/* Every file the writer may write: config.json, model.safetensors and the copies. */
static const char *const written_files[] = {
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
};

/* m's config.json with quantization_config set, as text (malloc'd). */
static enum ll_status config_text(const struct model *m, char **out, struct ll_err *err)
{
    *out = NULL;
    char *path = ll_path_join(m->dir, "config.json"), *text = NULL;
    cJSON *root = NULL;
    size_t len = 0;
    enum ll_status s;
    if (!path)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    if ((s = ll_read_file(path, &text, &len, err)) ||
        (s = ll_json_parse(&root, text, len, path, err)))
        goto out;
    cJSON *q = cJSON_CreateObject();
    if (!cJSON_IsObject(root) || !q || !cJSON_AddStringToObject(q, "quant_method", "llaisys") ||
        !cJSON_AddStringToObject(q, "format", model_qscheme_name(m->qscheme)) ||
        !cJSON_AddStringToObject(q, "layout", LL_QLAYOUT)) {
        cJSON_Delete(q);
        s = ll_err_set(err, cJSON_IsObject(root) ? LL_ENOMEM : LL_EJSON, "%s: %s", path,
                       cJSON_IsObject(root) ? "out of memory" : "not a JSON object");
        goto out;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization_config");
    cJSON_AddItemToObject(root, "quantization_config", q);
    char *printed = cJSON_Print(root);
    if (!printed) {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    size_t n = strlen(printed);
    *out = malloc(n + 2);
    if (*out) {
        memcpy(*out, printed, n);
        memcpy(*out + n, "\n", 2);
    } else {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    cJSON_free(printed);
out:
    cJSON_Delete(root);
    free(text);
    free(path);
    return s;
}

/* Whether tensor `name` of the source is one of m's linear weights (dense or its planes), or a
 * fused tensor that some of them are parts of. */
static bool is_linear_tensor(const struct model *m, const char *name)
{
    for (int i = 0; i < m->n_linears; i++) {
        const char *ln = m->linears[i]->name;
        size_t k = strlen(ln);
        if (!strcmp(name, m->linears[i]->source))
            return true;
        if (!strncmp(name, ln, k) &&
            (!name[k] || !strcmp(name + k, ".qs") || !strcmp(name + k, ".d")))
            return true;
    }
    return false;
}

enum ll_status model_quant_write(const struct model *m, const char *out_dir, bool force,
                                 struct ll_err *err)
{
    if (!m->quantized)
        return ll_err_set(err, LL_EINVAL, "%s: the model is not quantized", m->dir);
    const int nl = m->n_linears;
    size_t n_st = st_count(m->st), n = 0;
    struct st_write_tensor *t = calloc(n_st + 2 * (size_t)nl, sizeof *t);
    char(*names)[LL_TENSOR_NAME_MAX + 8] = calloc(2 * (size_t)nl + 1, sizeof *names);
    char *cfg = NULL, *path = NULL;
    struct model_dir_writer w = {0};
    enum ll_status s;
    if (!t || !names) {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_st; i++) {
        const struct st_tensor *x = st_at(m->st, i);
        if (is_linear_tensor(m, x->name))
            continue;
        t[n] = (struct st_write_tensor){
            .name = x->name, .dtype = x->dtype, .ndim = x->ndim, .data = x->data};
        memcpy(t[n].shape, x->shape, sizeof x->shape);
        n++;
    }
    for (int i = 0; i < nl; i++) {
        const struct model_linear *l = m->linears[i];
        snprintf(names[2 * i], sizeof names[0], "%s.qs", l->name);
        snprintf(names[2 * i + 1], sizeof names[0], "%s.d", l->name);
        for (int p = 0; p < 2; p++) {
            t[n] = (struct st_write_tensor){
                .name = names[2 * i + p], .ndim = 2, .data = p ? (const void *)l->q.d : l->q.qs};
            model_qplane(l->q.type, l->n, l->k, p, &t[n].dtype, t[n].shape);
            n++;
        }
    }
    if ((s = config_text(m, &cfg, err)) ||
        (s = model_dir_begin(&w, out_dir, written_files, LL_ARRAY_LEN(written_files), force, err)))
        goto out;
    if (!(path = model_dir_file(&w, "config.json"))) {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    if ((s = ll_write_file(path, cfg, strlen(cfg), err)))
        goto out;
    free(path);
    if (!(path = model_dir_file(&w, "model.safetensors"))) {
        s = ll_err_set(err, LL_ENOMEM, "out of memory");
        goto out;
    }
    if ((s = st_write(path, t, n, err)))
        goto out;
    for (size_t i = 0; i < LL_ARRAY_LEN(copied_files); i++) {
        free(path);
        char *src = ll_path_join(m->dir, copied_files[i]), *text = NULL;
        size_t len = 0;
        path = model_dir_file(&w, copied_files[i]);
        if (!src || !path) {
            free(src);
            s = ll_err_set(err, LL_ENOMEM, "out of memory");
            goto out;
        }
        if (access(src, F_OK) == 0 && ((s = ll_read_file(src, &text, &len, err)) == LL_OK))
            s = ll_write_file(path, text, len, err);
        free(text);
        free(src);
        if (s)
            goto out;
    }
    s = model_dir_commit(&w, err);
out:
    model_dir_end(&w);
    free(path);
    free(cfg);
    free(names);
    free(t);
    return s;
}
