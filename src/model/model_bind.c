/*
 * model_bind.c: binding checked tensors and linear weights for the families (see model_bind.h).
 * Start-up thread only; every message names the file and the tensor.
 */
#include "model_bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "util.h"

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* The error for tensor t of a shape other than want[0..ndim). */
static enum ll_status shape_error_n(const struct st_tensor *t, int ndim, const int64_t *want,
                                    const char *why, struct ll_err *err)
{
    char got[160], exp[64];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(exp, sizeof exp, ndim, want);
    return ll_err_set(err, LL_EMODEL, "%s: tensor '%s' has shape %s, but %s %s", t->file, t->name,
                      got, why, exp);
}

static bool shape_is_n(const struct st_tensor *t, int ndim, const int64_t *want)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != want[i])
            return false;
    return true;
}

/* (d0, d1), 1-D when d1 == 0 */
static enum ll_status shape_error(const struct st_tensor *t, int64_t d0, int64_t d1,
                                  const char *why, struct ll_err *err)
{
    const int64_t want[2] = {d0, d1};
    return shape_error_n(t, d1 ? 2 : 1, want, why, err);
}

static bool shape_is(const struct st_tensor *t, int64_t d0, int64_t d1)
{
    const int64_t want[2] = {d0, d1};
    return shape_is_n(t, d1 ? 2 : 1, want);
}

/* Tensor `name` of m->st, its dtype BF16, F16 or F32 (*dt) and its shape want[0..ndim). */
static enum ll_status find_weight(const struct model *m, const char *name, int ndim,
                                  const int64_t *want, const struct st_tensor **out,
                                  enum ll_dtype *dt, struct ll_err *err)
{
    const struct st_tensor *t = st_find(m->st, name);
    if (!t)
        return ll_err_set(err, LL_EMODEL, "%s: missing tensor '%s'", st_path(m->st), name);
    if (!st_dtype_to_ll(t->dtype, dt))
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: tensor '%s' has dtype %s; weights must be BF16, F16 or F32", t->file,
                          name, st_dtype_name(t->dtype));
    if (!shape_is_n(t, ndim, want))
        return shape_error_n(t, ndim, want, "config.json implies", err);
    *out = t;
    return LL_OK;
}

enum ll_status model_bind_tensor(const struct model *m, struct ll_tensor *out, const char *name,
                                 int64_t d0, int64_t d1, struct ll_err *err)
{
    const int64_t want[2] = {d0, d1};
    const struct st_tensor *t;
    enum ll_dtype dt;
    enum ll_status s = find_weight(m, name, d1 ? 2 : 1, want, &t, &dt, err);
    if (s)
        return s;
    *out = (struct ll_tensor){
        .dtype = dt, .ndim = d1 ? 2 : 1, .shape = {d0, d1 ? d1 : 1}, .data = t->data};
    return LL_OK;
}

enum ll_status model_bind_stacked(const struct model *m, struct ll_tensor *out, const char *name,
                                  int64_t e, int64_t d0, int64_t d1, struct ll_err *err)
{
    const int64_t want[3] = {e, d0, d1};
    const struct st_tensor *t;
    enum ll_dtype dt;
    enum ll_status s = find_weight(m, name, 3, want, &t, &dt, err);
    if (s)
        return s;
    *out = (struct ll_tensor){.dtype = dt, .ndim = 2, .shape = {e * d0, d1}, .data = t->data};
    return LL_OK;
}

void model_qplane(enum ll_qtype t, int n, int k, int plane, enum st_dtype *dtype, int64_t shape[2])
{
    const int rows = (n + LL_QGROUP - 1) / LL_QGROUP * LL_QGROUP;
    size_t bytes = plane == 0 ? ll_qweight_qs_bytes(t, rows, k) : ll_qweight_d_bytes(t, rows, k);
    *dtype = plane == 0 ? (t == LL_Q8_0 ? ST_I8 : ST_U8) : (t == LL_Q4_K ? ST_U8 : ST_F16);
    shape[0] = rows;
    shape[1] = (int64_t)(bytes / (size_t)rows / st_dtype_size(*dtype));
}

/* Bind the two planes of quantized linear l (name, n, k, role, layer set), of the type
 * m->config.qscheme gives it. */
static enum ll_status bind_planes(const struct model *m, struct model_linear *l, struct ll_err *err)
{
    const enum ll_qtype qt =
        model_qscheme_type(m->config.qscheme, l->role, l->layer, m->config.n_layers);
    if (l->k % LL_QBLOCK)
        return ll_err_set(err, LL_EMODEL,
                          "%s: weight '%s' has %d inputs, not a multiple of %d: it cannot be %s",
                          st_path(m->st), l->name, l->k, LL_QBLOCK, ll_qtype_name(qt));
    struct {
        const char *suffix;
        enum st_dtype dtype;
        int64_t shape[2];
        const char *what;
    } plane[2] = {{.suffix = ".qs", .what = "data plane"}, {.suffix = ".d", .what = "scale plane"}};
    for (int i = 0; i < 2; i++)
        model_qplane(qt, l->n, l->k, i, &plane[i].dtype, plane[i].shape);
    const struct st_tensor *t[2];
    for (int i = 0; i < 2; i++) {
        char name[LL_TENSOR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s%s", l->name, plane[i].suffix);
        t[i] = st_find(m->st, name);
        if (!t[i])
            return ll_err_set(err, LL_EMODEL,
                              "%s: missing tensor '%s' (the %s of %s weight '%s'; config.json "
                              "declares quantization_config %s)",
                              st_path(m->st), name, plane[i].what, ll_qtype_name(qt), l->name,
                              model_qscheme_name(m->config.qscheme));
        if (t[i]->dtype != plane[i].dtype)
            return ll_err_set(err, LL_EMODEL,
                              "%s: tensor '%s' has dtype %s, but the %s of a %s weight is %s "
                              "(scheme %s, layout %s)",
                              t[i]->file, name, st_dtype_name(t[i]->dtype), plane[i].what,
                              ll_qtype_name(qt), st_dtype_name(plane[i].dtype),
                              model_qscheme_name(m->config.qscheme), LL_QLAYOUT);
        if (!shape_is(t[i], plane[i].shape[0], plane[i].shape[1])) {
            char why[200];
            snprintf(why, sizeof why, "the %s of %s weight '%s' (%d x %d) is", plane[i].what,
                     ll_qtype_name(qt), l->name, l->n, l->k);
            return shape_error(t[i], plane[i].shape[0], plane[i].shape[1], why, err);
        }
    }
    enum ll_status s = ll_qweight_init(&l->q, qt, l->n, l->k, t[0]->data, t[0]->nbytes, t[1]->data,
                                       t[1]->nbytes, err);
    if (s != LL_OK)
        return ll_err_prefix(err, "%s: tensors '%s.qs', '%s.d': ", t[0]->file, l->name, l->name);
    l->quantized = true;
    return LL_OK;
}

static enum ll_status list_add(struct model *m, struct model_linear *l, struct ll_err *err)
{
    if (m->n_linears == m->cap_linears) {
        int cap = m->cap_linears ? 2 * m->cap_linears : 64;
        struct model_linear **p = realloc(m->linears, sizeof *p * (size_t)cap);
        if (!p)
            return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
        m->linears = p;
        m->cap_linears = cap;
    }
    m->linears[m->n_linears++] = l;
    return LL_OK;
}

enum ll_status model_bind_linear(struct model *m, struct model_linear *l, const char *name,
                                 enum model_role role, int layer, int64_t n, int64_t k,
                                 const struct ll_tensor *tied, struct ll_err *err)
{
    LL_ASSERT(strlen(name) < sizeof l->name && n >= 1 && n <= INT32_MAX && k >= 1 &&
              k <= INT32_MAX);
    memset(l, 0, sizeof *l);
    strcpy(l->name, name);
    l->n = (int)n;
    l->k = (int)k;
    l->role = role;
    l->layer = layer;
    enum ll_status s;
    if (m->config.quantized) {
        const struct st_tensor *dense = tied ? NULL : st_find(m->st, name);
        if (dense)
            return ll_err_set(err, LL_EMODEL,
                              "%s: tensor '%s' is stored dense (%s), but config.json's "
                              "quantization_config says the linear weights are %s ('%s.qs' and "
                              "'%s.d')",
                              dense->file, name, st_dtype_name(dense->dtype),
                              model_qscheme_name(m->config.qscheme), name, name);
        if ((s = bind_planes(m, l, err)))
            return s;
    } else if (tied) {
        LL_ASSERT(tied->ndim == 2 && tied->shape[0] == n && tied->shape[1] == k);
        l->dense = *tied;
        l->tied = true;
    } else {
        char qs[LL_TENSOR_NAME_MAX + 8];
        snprintf(qs, sizeof qs, "%s.qs", name);
        if (!st_find(m->st, name) && st_find(m->st, qs))
            return ll_err_set(err, LL_EMODEL,
                              "%s: missing tensor '%s'; the file holds '%s', a quantized weight, "
                              "but config.json has no quantization_config",
                              st_path(m->st), name, qs);
        if ((s = model_bind_tensor(m, &l->dense, name, n, k, err)))
            return s;
    }
    return list_add(m, l, err);
}

enum ll_status model_bind_linear_part(struct model *m, struct model_linear *l, const char *name,
                                      enum model_role role, int layer,
                                      const struct ll_tensor *whole, const char *source,
                                      int64_t row0, int64_t n, struct ll_err *err)
{
    const int64_t k = whole->shape[1];
    LL_ASSERT(!m->config.quantized && whole->ndim == 2 && row0 >= 0 && n >= 1 &&
              row0 + n <= whole->shape[0] && strlen(name) < sizeof l->name &&
              strlen(source) < sizeof l->source && k <= INT32_MAX);
    memset(l, 0, sizeof *l);
    strcpy(l->name, name);
    strcpy(l->source, source);
    l->n = (int)n;
    l->k = (int)k;
    l->role = role;
    l->layer = layer;
    l->dense = *whole;
    l->dense.shape[0] = n;
    l->dense.data =
        (const char *)whole->data + (size_t)row0 * (size_t)k * ll_dtype_size(whole->dtype);
    return list_add(m, l, err);
}
