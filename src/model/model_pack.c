/*
 * model_pack.c: packing a model's bf16 linear weights at load (see model_pack.h).
 *
 * The work is every linear weight cut into pieces of PIECE_ROWS rows, run by model_pieces_run
 * twice: the planes and each piece's count of escape blocks, then (the counts prefix-summed into
 * first indices) the escape blocks' copies. Pieces write disjoint rows of the planes and disjoint
 * ranges of the table, so the bytes do not depend on which thread packed what.
 */
#include "model_pack.h"

#include <stdlib.h>

#include "bf16pack.h"
#include "log.h"
#include "matmul.h"
#include "model_pieces.h"
#include "pool.h"
#include "util.h"

#define PIECE_ROWS 256

struct pack_job {
    size_t *esc_first; /* (pieces) pass 1: escape blocks of each piece; pass 2: its first index */
    uint16_t *table;   /* pass 2: the escape table */
};

static enum ll_status pack_piece(void *ctx, struct model_linear *l, int i, int r0, int r1,
                                 int64_t piece, struct ll_err *err)
{
    (void)i, (void)err;
    struct pack_job *j = ctx;
    if (!j->table)
        j->esc_first[piece] = ll_bf16p_pack_rows(&l->packed, r0, r1);
    else
        ll_bf16p_pack_escapes(&l->packed, r0, r1, j->table, j->esc_first[piece]);
    return LL_OK;
}

enum ll_status model_pack_bf16(struct model *m, int n_threads, struct ll_err *err)
{
    const int nl = m->n_linears;
    size_t total = 0;
    double weights = 0;
    for (int i = 0; i < nl; i++) {
        const struct model_linear *l = m->linears[i];
        if (l->quantized || l->dense.dtype != LL_BF16)
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: weight '%s' is %s: --quant bf16p packs bf16 weights only",
                              m->dir, l->name,
                              l->quantized ? ll_qtype_name(l->q.type)
                                           : ll_dtype_name(l->dense.dtype));
        total += ll_bf16p_bytes(l->n, l->k);
        weights += (double)l->n * l->k;
    }
    const char *why;
    if (!ll_matmul_reads_packed(&why)) {
        log_msg(LOG_WARN, "%s: --quant bf16p: %s; the weights stay as stored (bf16)", m->dir, why);
        return LL_OK;
    }
    struct pack_job j = {0};
    const int64_t pieces = model_pieces_count(m, PIECE_ROWS);
    void *mem = ll_huge_alloc(total);
    enum ll_status s = LL_OK;
    if ((!mem && total) || !(j.esc_first = calloc((size_t)pieces + 1, sizeof *j.esc_first)))
        goto oom;
    char *p = mem;
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        ll_bf16p_init(&l->packed, l->dense.data, l->n, l->k, p);
        p += ll_bf16p_bytes(l->n, l->k);
    }
    double t0 = ll_now();
    if ((s = model_pieces_run(m, PIECE_ROWS, n_threads, pack_piece, &j, err)))
        goto out;
    size_t escapes = 0; /* pieces' counts to first indices */
    for (int64_t q = 0; q < pieces; q++) {
        size_t c = j.esc_first[q];
        j.esc_first[q] = escapes;
        escapes += c;
    }
    if (!(j.table = malloc((escapes ? escapes : 1) * LL_BF16P_BLOCK * sizeof *j.table)))
        goto oom;
    if ((s = model_pieces_run(m, PIECE_ROWS, n_threads, pack_piece, &j, err)))
        goto out;
    m->pack_seconds = ll_now() - t0;
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        l->packed.esc = j.table;
        l->is_packed = true;
    }
    m->pkmem = mem;
    m->pkmem_bytes = total;
    m->pkesc = j.table;
    mem = NULL;
    j.table = NULL;
    double blocks = weights / LL_BF16P_BLOCK;
    log_msg(LOG_INFO,
            "%s: packed %d bf16 linear weights (%.3g G weights) losslessly to 12.5 bits in "
            "%.2f s on %d threads (%.0f MiB, and %.2f MiB for the %.3f %% of blocks kept whole)",
            m->dir, nl, weights * 1e-9, m->pack_seconds,
            n_threads < 1 ? ll_pool_default_threads() : n_threads,
            (double)total / (1 << 20), (double)escapes * 64 / (1 << 20),
            blocks > 0 ? 100.0 * (double)escapes / blocks : 0.0);
    goto out;
oom:
    s = ll_err_set(err, LL_ENOMEM, "%s: out of memory for %zu bytes of packed bf16 weights",
                   m->dir, total);
out:
    ll_huge_free(mem, total);
    free(j.table);
    free(j.esc_first);
    return s;
}
