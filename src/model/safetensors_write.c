/*
 * safetensors_write.c: st_write, the safetensors writer (see safetensors.h), used by
 * `llaisys-cli quantize` (model_quant.c) and by tests that build odd files. The data section is
 * ordered so that every tensor of a size that is a multiple of 64 bytes (the quantized planes of
 * any real model) starts on a 64-byte boundary of the file. Any thread, on its own path.
 */
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "util.h"

struct order {
    const struct st_write_tensor *t;
    uint64_t nbytes, begin;
};

static int name_cmp(const void *a, const void *b)
{
    return strcmp(((const struct order *)a)->t->name, ((const struct order *)b)->t->name);
}

/* The aligned ones (size % 64 == 0) first, then the rest; by name within each part. */
static int data_cmp(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    bool ax = x->nbytes % 64 == 0, ay = y->nbytes % 64 == 0;
    if (ax != ay)
        return ax ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static enum ll_status write_all(FILE *f, const void *p, size_t n, const char *path,
                                struct ll_err *err)
{
    if (n && fwrite(p, 1, n, f) != n)
        return ll_err_set(err, LL_EIO, "%s: write failed: %s", path, strerror(errno));
    return LL_OK;
}

enum ll_status st_write(const char *path, const struct st_write_tensor *t, size_t n,
                        struct ll_err *err)
{
    struct order *o = calloc(n ? n : 1, sizeof *o);
    struct ll_buf h = {0};
    FILE *f = NULL;
    enum ll_status st = LL_OK;
    if (!o)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = st_dtype_size(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS ||
            (unsigned)t[i].dtype >= ST_DTYPE_COUNT) {
            st = ll_err_set(err, LL_EINVAL, "%s: tensor %zu: empty name or bad dtype or shape",
                            path, i);
            goto out;
        }
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0 ||
                __builtin_mul_overflow(bytes, (uint64_t)t[i].shape[d], &bytes)) {
                st = ll_err_set(err, LL_EINVAL, "%s: tensor '%s': bad shape", path, t[i].name);
                goto out;
            }
        if (bytes && !t[i].data) {
            st = ll_err_set(err, LL_EINVAL, "%s: tensor '%s': no data", path, t[i].name);
            goto out;
        }
        o[i] = (struct order){.t = &t[i], .nbytes = bytes};
    }
    /* data offsets */
    qsort(o, n, sizeof *o, data_cmp);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        o[i].begin = off;
        off += o[i].nbytes;
    }
    /* header, in name order */
    qsort(o, n, sizeof *o, name_cmp);
    ll_buf_puts(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(o[i - 1].t->name, o[i].t->name)) {
            st = ll_err_set(err, LL_EINVAL, "%s: tensor '%s' given twice", path, o[i].t->name);
            goto out;
        }
        ll_buf_putc(&h, ',');
        ll_json_put_cstr(&h, o[i].t->name);
        ll_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(o[i].t->dtype));
        for (int d = 0; d < o[i].t->ndim; d++)
            ll_buf_printf(&h, "%s%lld", d ? "," : "", (long long)o[i].t->shape[d]);
        ll_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)o[i].begin,
                      (unsigned long long)(o[i].begin + o[i].nbytes));
    }
    ll_buf_putc(&h, '}');
    while (!h.failed && (8 + h.len) % 64)
        ll_buf_putc(&h, ' ');
    if (h.failed) {
        st = ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    f = fopen(path, "wb");
    if (!f) {
        st = ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
        goto out;
    }
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    if ((st = write_all(f, prefix, 8, path, err)) || (st = write_all(f, h.data, h.len, path, err)))
        goto out;
    qsort(o, n, sizeof *o, data_cmp);
    for (size_t i = 0; i < n; i++)
        if ((st = write_all(f, o[i].t->data, o[i].nbytes, path, err)))
            goto out;
out:
    if (f && fclose(f) != 0 && st == LL_OK)
        st = ll_err_set(err, LL_EIO, "%s: close failed: %s", path, strerror(errno));
    ll_buf_free(&h);
    free(o);
    return st;
}
