/*
 * qmatmul_amx.c: the AMX int8 variant of ll_qmatmul for calls with M >= LL_QMM_AMX_MIN_M (16)
 * rows (the dispatch in qmatmul.c sends smaller calls to another variant), run by the pool's
 * threads on disjoint (rows of x, groups of W) ranges (qmatmul_kernels.h).
 *
 * Compiled twice from this source (Makefile): with -mamx-tile -mamx-int8 into the variant "amx"
 * (ll_qmm_kernel_amx), and with LL_AMX_EMULATE into "amx-emul" (ll_qmm_kernel_amx_emul), whose
 * tile operations are amx_ops.h's plain C. amx-emul runs on any CPU and exists for tests and
 * bench-matmul --variant; dispatch never picks it.
 *
 * One TDPBSSD computes the exact integer sums of one block (32 values of K) for 16 rows of x ×
 * 16 rows of W: the A tile is 16 rows × 32 bytes of the quantized activations (stride K), the B
 * tile 8 rows × 64 bytes, row s holding k = 4s..4s+3 of the 16 weight rows, 4 bytes each. That is
 * the q8_0 layout of a block of a group (quant.h), loaded from the weights as it is. q4_0 and
 * q4_k steps hold nibbles (low: k = 4s..4s+3, high: 16+4s..), unpacked once per (group, block)
 * into a per-thread slice buffer as the signed weight integers of qmatmul.h (q4_0: nibble − 8,
 * q4_k: the nibble), so no correction term is needed. The slice buffer also holds each block's
 * per-row scales as f32 (d; q4_k: d·sc and dmin·m), computed once and reused by every tile of x.
 *
 * Per block the four C tiles (2 tiles of 16 rows of x × 2 groups) are stored as int32 and the
 * f32 epilogue is qmatmul.h's sequence, as in qmatmul_vnni512.c: (float)s, the product of the two
 * scales, one fmaf into the accumulator (q4_k: then fmaf(−dm, xm, acc)), blocks in increasing
 * order, + bias after the last. Blocks are taken KC at a time (a slice); between slices the
 * accumulators wait in out unchanged, so the sequence is the same as without slicing.
 *
 * A tile always loads 16 rows of x that exist: the rows [w, e) a tile must produce (at most 16)
 * are read from row r = min(w, M − 16), so a tail or a thread's short range of rows overlaps
 * rows that another tile produces; those extra results are computed and dropped.
 */
#include <math.h>

#include "amx_ops.h"
#include "dtype.h"
#include "qmatmul_kernels.h"
#include "quant_layout.h"

#ifdef LL_AMX_EMULATE
#define KERNEL ll_qmm_kernel_amx_emul
#else
#define KERNEL ll_qmm_kernel_amx
#endif

#define TM LL_QMM_AMX_MIN_M /* rows of x in a tile */
#define KC 16               /* blocks of K per slice */

/* The tiles (named in amx_ops.h): C[t][g] for tile t of x and group g, A is x, B is W. C: 16
 * rows of x × 16 int32; A: 16 rows × one block of int8; B: 8 rows (k / 4) × 16 columns × 4
 * consecutive k. */
static const struct amx_tilecfg tile_cfg = {
    .palette = 1,
    .rows = {[T_C00] = TM,
             [T_C01] = TM,
             [T_C10] = TM,
             [T_C11] = TM,
             [T_A0] = TM,
             [T_A1] = TM,
             [T_B0] = LL_QBLOCK / 4,
             [T_B1] = LL_QBLOCK / 4},
    .colsb = {[T_C00] = 4 * LL_QGROUP,
              [T_C01] = 4 * LL_QGROUP,
              [T_C10] = 4 * LL_QGROUP,
              [T_C11] = 4 * LL_QGROUP,
              [T_A0] = LL_QBLOCK,
              [T_A1] = LL_QBLOCK,
              [T_B0] = 4 * LL_QGROUP,
              [T_B1] = 4 * LL_QGROUP},
};

/* One slice of blocks [b0, b0 + KC) of up to two groups, prepared once for every tile of x. */
struct slice {
    int8_t wq[KC][2][8 * 64];   /* q4_0, q4_k: B tiles unpacked to the signed weight integers */
    float dw[KC][2][LL_QGROUP]; /* per row of W: d (q8_0, q4_0), or d·sc (q4_k) */
    float dm[KC][2][LL_QGROUP]; /* q4_k: dmin·m */
};

/* The rows a tile produces: [w, e) of x, read from row r (r <= w, e <= r + 16 <= M). */
struct rows {
    int r, w, e;
};

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* The B tile of block b, group gi of the slice starting at group g. */
static const int8_t *b_tile(const struct ll_qmm_job *j, const struct slice *sl, int g, int gi,
                            int b0, int b)
{
    if (j->w->type != LL_Q8_0)
        return sl->wq[b - b0][gi];
    const size_t wq_g = (size_t)j->nb * 8 * 64;
    return (const int8_t *)j->w->qs + (size_t)(g + gi) * wq_g + (size_t)b * 8 * 64;
}

/* Fill the slice for blocks [b0, b1) of groups g .. g + ng − 1. */
static void slice_fill(struct slice *sl, const struct ll_qmm_job *j, int g, int ng, int b0, int b1)
{
    const struct ll_qweight *w = j->w;
    const int nb = j->nb, nsb = ll_qk_nsb(nb);
    for (int gi = 0; gi < ng; gi++)
        for (int b = b0; b < b1; b++) {
            const int bb = b - b0, n0 = (g + gi) * LL_QGROUP;
            if (w->type != LL_Q8_0) {
                const uint8_t *src = w->qs + ((size_t)(g + gi) * (size_t)nb + (size_t)b) * 4 * 64;
                const int off = w->type == LL_Q4_0 ? 8 : 0;
                int8_t *dst = sl->wq[bb][gi];
                for (int i = 0; i < 4 * 64; i++) {
                    dst[i] = (int8_t)((src[i] & 15) - off);
                    dst[4 * 64 + i] = (int8_t)((src[i] >> 4) - off);
                }
            }
            for (int r = 0; r < LL_QGROUP; r++) {
                if (w->type != LL_Q4_K) {
                    sl->dw[bb][gi][r] = ll_f16_to_f32(w->d[ll_q_d_index(nb, n0 + r, b)]);
                    continue;
                }
                const int B = b / LL_QK_BLOCKS, jb = b % LL_QK_BLOCKS;
                const uint8_t *sb = (const uint8_t *)w->d + ll_qk_sb_offset(nsb, n0 + r, B);
                uint16_t dh, mh;
                uint32_t c[3];
                memcpy(&dh, sb + 2 * r, 2);
                memcpy(&mh, sb + 32 + 2 * r, 2);
                ll_qk_read_codes(c, (const uint8_t *)w->d, nsb, n0 + r, B);
                sl->dw[bb][gi][r] = ll_f16_to_f32(dh) * (float)ll_qk_code(c, jb);
                sl->dm[bb][gi][r] = ll_f16_to_f32(mh) * (float)ll_qk_code(c, LL_QK_BLOCKS + jb);
            }
        }
}

/* Block b of one C tile (s: 16 × 16 int32) into the accumulators of rows [rw.w, rw.e) (acc: 16
 * rows of 32 columns, row i for x row rw.r + i), columns 16·gi .. 16·gi + 15. */
static void epilogue(float acc[TM][2 * LL_QGROUP], const int32_t s[TM][LL_QGROUP],
                     const struct ll_qmm_job *j, const struct slice *sl, struct rows rw, int gi,
                     int b, int b0)
{
    const size_t nb = (size_t)j->nb;
    const float *dw = sl->dw[b - b0][gi], *dm = sl->dm[b - b0][gi];
    for (int i = rw.w - rw.r; i < rw.e - rw.r; i++) {
        const size_t mb = (size_t)(rw.r + i) * nb + (size_t)b;
        const float xd = j->xd[mb];
        float *a = acc[i] + LL_QGROUP * gi;
        if (j->w->type == LL_Q4_K) {
            const float xm = j->xm[mb];
            for (int c = 0; c < LL_QGROUP; c++)
                a[c] = fmaf(-dm[c], xm, fmaf((float)s[i][c], dw[c] * xd, a[c]));
        } else {
            for (int c = 0; c < LL_QGROUP; c++)
                a[c] = fmaf((float)s[i][c], dw[c] * xd, a[c]);
        }
    }
}

/* Blocks [b0, b1) for nt (1 or 2) tiles of x (rw) × ng (1 or 2) groups from g: the
 * accumulators start at zero when b0 is 0, else from out; stored back to out's ncols columns,
 * plus bias after the last block. */
static void run_tiles(const struct ll_qmm_job *j, const struct slice *sl, int g, int ng, int ncols,
                      const struct rows rw[2], int nt, int b0, int b1)
{
    const size_t K = (size_t)j->K, N = (size_t)j->N;
    float acc[2][TM][2 * LL_QGROUP];
    int32_t s[4][TM][LL_QGROUP] __attribute__((aligned(64)));
    for (int t = 0; t < nt; t++)
        for (int i = rw[t].w - rw[t].r; i < rw[t].e - rw[t].r; i++) {
            const float *o = j->out + (size_t)(rw[t].r + i) * N + (size_t)g * LL_QGROUP;
            for (int c = 0; c < 2 * LL_QGROUP; c++)
                acc[t][i][c] = b0 == 0 || c >= ncols ? 0.0f : o[c];
        }

    for (int b = b0; b < b1; b++) {
        const int8_t *xb = j->xq + (size_t)b * LL_QBLOCK;
        AMX_LOAD(T_A0, xb + (size_t)rw[0].r * K, (long)K);
        AMX_LOAD(T_B0, b_tile(j, sl, g, 0, b0, b), 64);
        AMX_ZERO(T_C00);
        AMX_DPBSSD(T_C00, T_A0, T_B0);
        if (ng > 1) {
            AMX_LOAD(T_B1, b_tile(j, sl, g, 1, b0, b), 64);
            AMX_ZERO(T_C01);
            AMX_DPBSSD(T_C01, T_A0, T_B1);
        }
        if (nt > 1) {
            AMX_LOAD(T_A1, xb + (size_t)rw[1].r * K, (long)K);
            AMX_ZERO(T_C10);
            AMX_DPBSSD(T_C10, T_A1, T_B0);
            if (ng > 1) {
                AMX_ZERO(T_C11);
                AMX_DPBSSD(T_C11, T_A1, T_B1);
            }
        }
        AMX_STORE(T_C00, s[0], 64);
        if (ng > 1)
            AMX_STORE(T_C01, s[1], 64);
        if (nt > 1) {
            AMX_STORE(T_C10, s[2], 64);
            if (ng > 1)
                AMX_STORE(T_C11, s[3], 64);
        }
        for (int t = 0; t < nt; t++)
            for (int gi = 0; gi < ng; gi++)
                epilogue(acc[t], s[2 * t + gi], j, sl, rw[t], gi, b, b0);
    }

    const float *bias = j->bias && b1 == j->nb ? j->bias + (size_t)g * LL_QGROUP : NULL;
    for (int t = 0; t < nt; t++)
        for (int i = rw[t].w - rw[t].r; i < rw[t].e - rw[t].r; i++) {
            float *o = j->out + (size_t)(rw[t].r + i) * N + (size_t)g * LL_QGROUP;
            for (int c = 0; c < ncols; c++)
                o[c] = bias ? acc[t][i][c] + bias[c] : acc[t][i][c];
        }
}

/* Rows [w, min(w + 16, m1)) of x, read from a row where 16 rows exist. */
static struct rows tile_rows(int w, int m1, int M)
{
    return (struct rows){.r = min_int(w, M - TM), .w = w, .e = min_int(w + TM, m1)};
}

void KERNEL(const struct ll_qmm_job *j, int m0, int m1, int g0, int g1)
{
    LL_ASSERT(j->M >= TM);
    AMX_CONFIG(&tile_cfg);

    struct slice sl __attribute__((aligned(64)));
    for (int g = g0; g < g1; g += 2) {
        const int ng = min_int(2, g1 - g);
        const int ncols = min_int(ng * LL_QGROUP, j->N - g * LL_QGROUP);
        for (int b0 = 0; b0 < j->nb; b0 += KC) {
            const int b1 = min_int(j->nb, b0 + KC);
            slice_fill(&sl, j, g, ng, b0, b1);
            for (int m = m0; m < m1; m += 2 * TM) {
                const struct rows rw[2] = {tile_rows(m, m1, j->M), tile_rows(m + TM, m1, j->M)};
                run_tiles(j, &sl, g, ng, ncols, rw, m + TM < m1 ? 2 : 1, b0, b1);
            }
        }
    }
    AMX_RELEASE();
}
