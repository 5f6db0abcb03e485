/*
 * model_pack.c: packing a model's bf16 linear weights at load (see model_pack.h).
 *
 * The work is every linear weight cut into pieces of PIECE_ROWS rows; the threads of a temporary
 * pool take pieces from one atomic counter until none is left. Pieces write disjoint rows of the
 * planes, so the bytes do not depend on which thread packed what.
 */
#include "model_pack.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "bf16pack.h"
#include "log.h"
#include "matmul.h"
#include "pool.h"
#include "util.h"

#define PIECE_ROWS 256

struct pack_job {
    struct model *m;
    int64_t *first;         /* (n_linears + 1) index of each weight's first piece */
    size_t *esc_first;      /* (pieces) pass 1: escape blocks of each piece; pass 2: its first
                               index in the table */
    uint16_t *table;        /* pass 2: the escape table */
    _Atomic int64_t next;   /* the next piece to take */
};

/* Pass 1 (table NULL): pack each piece, counting its escape blocks; pass 2: copy them. */
static void pack_worker(void *ctx, int ith, int nth)
{
    (void)ith, (void)nth;
    struct pack_job *j = ctx;
    const int nl = j->m->n_linears;
    for (;;) {
        int64_t p = atomic_fetch_add(&j->next, 1);
        if (p >= j->first[nl])
            return;
        int i = 0;
        while (j->first[i + 1] <= p)
            i++;
        struct model_linear *l = j->m->linears[i];
        int r0 = (int)(p - j->first[i]) * PIECE_ROWS;
        int r1 = r0 + PIECE_ROWS < l->n ? r0 + PIECE_ROWS : l->n;
        if (!j->table)
            j->esc_first[p] = ll_bf16p_pack_rows(&l->packed, r0, r1);
        else
            ll_bf16p_pack_escapes(&l->packed, r0, r1, j->table, j->esc_first[p]);
    }
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
                              l->quantized ? ll_qtype_name(m->qtype) : ll_dtype_name(l->dense.dtype));
        total += ll_bf16p_bytes(l->n, l->k);
        weights += (double)l->n * l->k;
    }
    const char *why;
    if (!ll_matmul_reads_packed(&why)) {
        log_msg(LOG_WARN, "%s: --quant bf16p: %s; the weights stay as stored (bf16)", m->dir, why);
        return LL_OK;
    }
    struct pack_job j = {.m = m};
    j.first = calloc((size_t)nl + 1, sizeof *j.first);
    void *mem = aligned_alloc(64, total ? (total + 63) / 64 * 64 : 64);
    struct ll_pool *pool = NULL;
    enum ll_status s = LL_OK;
    if (!j.first || !mem)
        goto oom;
    madvise(mem, total, MADV_HUGEPAGE); /* a hint: fewer TLB misses when decode streams it */
    char *p = mem;
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        ll_bf16p_init(&l->packed, l->dense.data, l->n, l->k, p);
        p += ll_bf16p_bytes(l->n, l->k);
        j.first[i + 1] = j.first[i] + (l->n + PIECE_ROWS - 1) / PIECE_ROWS;
    }
    if (!(j.esc_first = calloc((size_t)j.first[nl] + 1, sizeof *j.esc_first)))
        goto oom;
    if ((s = ll_pool_create(&pool, n_threads < 1 ? LL_POOL_DEFAULT_THREADS : n_threads, err)))
        goto out;
    double t0 = ll_now();
    ll_pool_run(pool, pack_worker, &j);
    size_t escapes = 0; /* pieces' counts to first indices */
    for (int64_t q = 0; q < j.first[nl]; q++) {
        size_t c = j.esc_first[q];
        j.esc_first[q] = escapes;
        escapes += c;
    }
    if (!(j.table = malloc((escapes ? escapes : 1) * LL_BF16P_BLOCK * sizeof *j.table)))
        goto oom;
    atomic_store(&j.next, 0);
    ll_pool_run(pool, pack_worker, &j);
    m->pack_seconds = ll_now() - t0;
    for (int i = 0; i < nl; i++) {
        struct model_linear *l = m->linears[i];
        l->packed.esc = j.table;
        l->is_packed = true;
    }
    m->pkmem = mem;
    m->pkesc = j.table;
    mem = NULL;
    j.table = NULL;
    double blocks = weights / LL_BF16P_BLOCK;
    log_msg(LOG_INFO,
            "%s: packed %d bf16 linear weights (%.3g G weights) losslessly to 12.5 bits in "
            "%.2f s on %d threads (%.0f MiB, and %.2f MiB for the %.3f %% of blocks kept whole)",
            m->dir, nl, weights * 1e-9, m->pack_seconds, ll_pool_size(pool),
            (double)total / (1 << 20), (double)escapes * 64 / (1 << 20),
            blocks > 0 ? 100.0 * (double)escapes / blocks : 0.0);
    goto out;
oom:
    s = ll_err_set(err, LL_ENOMEM, "%s: out of memory for %zu bytes of packed bf16 weights",
                   m->dir, total);
out:
    ll_pool_free(pool);
    free(mem);
    free(j.table);
    free(j.esc_first);
    free(j.first);
    return s;
}
