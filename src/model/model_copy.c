/*
 * model_copy.c: copying the linear weights into anonymous memory at load (see model_copy.h).
 *
 * Each weight's buffers (the dense matrix, or the two planes) follow one another on page
 * boundaries in one allocation of ll_huge_alloc (huge pages). The copy runs through
 * model_pieces_run: a piece of rows [r0, r1) copies the same share of each buffer (quantized
 * planes hold whole groups of 16 rows contiguously, and pieces are whole groups), so pieces write
 * disjoint bytes, and then gives back the source pages it read, so the resident set holds each
 * weight about once while copying.
 */
#include "model_copy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "model_pieces.h"
#include "pool.h"
#include "util.h"

#define PIECE_ROWS 256 /* a multiple of LL_QGROUP */
#define PAGE ((size_t)4096)

static size_t round_page(size_t n)
{
    return (n + PAGE - 1) / PAGE * PAGE;
}

/* Whether l's data lives in the file mapping and is copied. */
static bool copied(const struct model *m, const struct model_linear *l)
{
    return l->quantized ? m->qmem == NULL : !l->tied && l->dense.data;
}

/* The buffers of l: up to two (data, bytes, rows they span); returns how many. */
static int buffers(const struct model_linear *l, const void *src[2], size_t bytes[2], int *rows)
{
    if (l->quantized) {
        src[0] = l->q.qs, bytes[0] = ll_qweight_qs_bytes(l->q.type, l->n, l->k);
        src[1] = l->q.d, bytes[1] = ll_qweight_d_bytes(l->q.type, l->n, l->k);
        *rows = (l->n + LL_QGROUP - 1) / LL_QGROUP * LL_QGROUP;
        return 2;
    }
    src[0] = l->dense.data, bytes[0] = model_linear_dense_bytes(l);
    *rows = l->n;
    return 1;
}

struct copy_job {
    char **dst; /* (n_linears) where each copied weight's first buffer goes (the second follows,
                   page-aligned); NULL for a weight not copied */
};

static enum ll_status copy_piece(void *ctx, struct model_linear *l, int i, int r0, int r1,
                                 int64_t piece, struct ll_err *err)
{
    (void)piece, (void)err;
    const struct copy_job *j = ctx;
    if (!j->dst[i])
        return LL_OK;
    const void *src[2];
    size_t bytes[2];
    int rows, nb = buffers(l, src, bytes, &rows);
    if (r1 == l->n)
        r1 = rows; /* the last piece takes the padding rows of the last group */
    char *d = j->dst[i];
    for (int b = 0; b < nb; b++) {
        size_t a = bytes[b] * (size_t)r0 / (size_t)rows, e = bytes[b] * (size_t)r1 / (size_t)rows;
        memcpy(d + a, (const char *)src[b] + a, e - a);
        ll_release_pages((const char *)src[b] + a, e - a);
        d += round_page(bytes[b]);
    }
    return LL_OK;
}

enum ll_status model_copy_weights(struct model *m, int n_threads, struct ll_err *err)
{
    const int nl = m->n_linears;
    struct copy_job j = {.dst = calloc((size_t)nl + 1, sizeof *j.dst)};
    if (!j.dst)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", m->dir);
    /* the layout first, as offsets from the start of the copy (+ 1, so 0 means not copied) */
    size_t total = 0;
    for (int i = 0; i < nl; i++) {
        const struct model_linear *l = m->linears[i];
        if (!copied(m, l))
            continue;
        const void *src[2];
        size_t bytes[2];
        int rows, nb = buffers(l, src, bytes, &rows);
        j.dst[i] = (char *)(uintptr_t)(total + 1);
        for (int b = 0; b < nb; b++)
            total += round_page(bytes[b]);
    }
    if (total == 0) { /* nothing in the mapping to copy */
        free(j.dst);
        return LL_OK;
    }
    char *base = ll_huge_alloc(total);
    if (!base) {
        free(j.dst);
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory for %zu bytes of weights", m->dir,
                          total);
    }
    for (int i = 0; i < nl; i++)
        if (j.dst[i])
            j.dst[i] = base + ((uintptr_t)j.dst[i] - 1);
    double t0 = ll_now();
    enum ll_status s = model_pieces_run(m, PIECE_ROWS, n_threads, copy_piece, &j, err);
    if (s != LL_OK) {
        ll_huge_free(base, total);
        free(j.dst);
        return s;
    }
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        if (!j.dst[i])
            continue;
        const void *src[2];
        size_t bytes[2];
        int rows, nb = buffers(l, src, bytes, &rows);
        for (int b = 0; b < nb; b++) /* the pages pieces shared at their edges */
            ll_release_pages(src[b], bytes[b]);
        if (l->quantized) {
            l->q.qs = (const uint8_t *)j.dst[i];
            l->q.d = (const uint16_t *)(j.dst[i] + round_page(bytes[0]));
        } else {
            l->dense.data = j.dst[i];
        }
    }
    m->wmem = base;
    m->wmem_bytes = total;
    free(j.dst);
    log_msg(LOG_INFO,
            "%s: copied the linear weights into memory (%.0f MiB) in %.2f s on %d threads", m->dir,
            (double)total / (1 << 20), ll_now() - t0,
            n_threads < 1 ? ll_pool_default_threads() : n_threads);
    return LL_OK;
}
