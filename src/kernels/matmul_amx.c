/*
 * matmul_amx.c: the AMX bf16 variant of ll_matmul's fast path (bf16 weights, LL_MATH_FAST), for
 * calls of every M, so that a row's bits never depend on the batch (matmul.h, "Tile order"). The
 * exact path of this variant is another variant's (matmul.c).
 *
 * Compiled twice from this source (Makefile): with -mamx-tile -mamx-bf16 into the variant "amx"
 * (ll_mm_kernel_amx), and with LL_AMX_EMULATE into "amx-emul" (ll_mm_kernel_amx_emul), whose
 * tile operations are amx_ops.h's plain C. amx-emul runs on any CPU and exists for tests and
 * bench-matmul --variant; dispatch never picks it.
 *
 * The weights are the A operand, used as they are: an A tile is 16 rows of W × 32 elements of K
 * (64 bytes a row, W's own stride), so nothing is packed at load. x is the B operand: the round
 * step writes it as bf16 in panels of 16 rows of x, each the B tiles of its chunks of K one after
 * another (matmul_kernels.h, "AMX layout"): a B tile is 16 pairs of K × 16 rows of x. A C tile
 * is then 16 rows of W × 16 rows of x in f32, and it stays in its tile register over the whole
 * of K: TDPBF16PS adds each chunk's sum into it, chunk after chunk, the order of the scalar
 * reference (matmul.c, dot_tiles).
 *
 * A step runs 2 × 2 tiles (32 rows of W × 32 rows of x: 4 loads, 4 TDPBF16PS); calls with up to
 * 16 rows of x (decode) run 2 × 1. A tile of W always loads 16 rows that exist: the 16 rows a
 * block must produce are read from row r = min(n, N − 16), so the last block of a matrix whose
 * N is not a multiple of 16 overlaps the one before it (its extra results are dropped). Only a
 * chunk past the end of K (K not a multiple of 32) or a matrix of fewer than 16 rows is copied,
 * with zeros past K and N, into a tile-sized buffer. The columns of a B tile past the last row of
 * x are zero and their results are dropped too.
 */
#include "amx_ops.h"
#include "dtype.h"
#include "matmul_kernels.h"

#ifdef LL_AMX_EMULATE
#define KERNEL ll_mm_kernel_amx_emul
#define ROUND ll_mm_round_amx_emul
#else
#define KERNEL ll_mm_kernel_amx
#define ROUND ll_mm_round_amx
#endif

#define TR LL_MM_AMX_ROWS   /* rows of W in an A tile; rows of x in a B tile */
#define TK LL_MM_CHUNK_FAST /* elements of K in a step */

/* The tiles (named in amx_ops.h): C[w][q] for block w of W and panel q of x, A is W, B is x;
 * every one 16 rows × 64 bytes: C 16 × 16 f32, A 16 rows × 32 bf16, B 16 pairs of K × 16 rows of
 * x × 2 bf16. */
static const struct amx_tilecfg tile_cfg = {
    .palette = 1,
    .rows = {TR, TR, TR, TR, TR, TR, TR, TR},
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
};

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

/* The A tile of rows [r, r + 16) of W, chunk kc: W itself where those rows exist and the chunk is
 * whole, else a copy in buf with zeros past N and K. *stride: bytes between its rows. */
static const void *a_tile(const struct ll_mm_job *j, int r, int kc, uint16_t buf[TR][TK],
                          long *stride)
{
    const uint16_t *w = j->w;
    const int K = j->K, k0 = kc * TK;
    if (r + TR <= j->N && k0 + TK <= K) {
        *stride = 2L * K;
        return w + (size_t)r * (size_t)K + (size_t)k0;
    }
    for (int i = 0; i < TR; i++)
        for (int e = 0; e < TK; e++)
            buf[i][e] =
                r + i < j->N && k0 + e < K ? w[(size_t)(r + i) * (size_t)K + (size_t)(k0 + e)] : 0;
    *stride = 2 * TK;
    return buf;
}

/* The first row of W that the A tiles of the block starting at row n read. */
static int block_base(int n, int N)
{
    return N >= TR ? min_int(n, N - TR) : 0;
}

/* One stored C tile (c[i][q]: row r + i of W, row 16·p + q of x) into out, rows of x [m0, m1)
 * and rows of W [n0, n1) of it, plus bias. */
static void put_tile(const struct ll_mm_job *j, const float c[TR][TR], int r, int n0, int n1, int p,
                     int m0, int m1)
{
    const int ma = max_int(m0, p * TR), mb = min_int(m1, (p + 1) * TR);
    for (int m = ma; m < mb; m++) {
        float *o = j->out + (size_t)m * (size_t)j->N;
        for (int n = n0; n < n1; n++) {
            const float s = c[n - r][m - p * TR];
            o[n] = j->bias ? s + j->bias[n] : s;
        }
    }
}

/* Rows [n, n + 16·nw) ∩ [.., n1) of W (nw blocks, 1 or 2) × rows of panels p .. p + np − 1 of x
 * (np 1 or 2) ∩ [m0, m1), over the whole of K. */
static void run_tiles(const struct ll_mm_job *j, int n, int nw, int n1, int p, int np, int m0,
                      int m1)
{
    uint16_t buf[2][TR][TK] __attribute__((aligned(64)));
    float c[TR][TR] __attribute__((aligned(64)));
    const int nk = (int)(j->xb_stride / TK);
    const int r0 = block_base(n, j->N), r1 = block_base(n + TR, j->N);
    const uint16_t *b0 = j->xb + (size_t)p * TR * j->xb_stride, *b1 = b0 + TR * j->xb_stride;

    AMX_ZERO(T_C00);
    if (np > 1)
        AMX_ZERO(T_C01);
    if (nw > 1) {
        AMX_ZERO(T_C10);
        if (np > 1)
            AMX_ZERO(T_C11);
    }
    for (int kc = 0; kc < nk; kc++) {
        long sa;
        const void *a = a_tile(j, r0, kc, buf[0], &sa);
        AMX_LOAD(T_A0, a, sa);
        AMX_LOAD(T_B0, b0 + (size_t)kc * TR * TK, 64);
        AMX_DPBF16PS(T_C00, T_A0, T_B0);
        if (np > 1) {
            AMX_LOAD(T_B1, b1 + (size_t)kc * TR * TK, 64);
            AMX_DPBF16PS(T_C01, T_A0, T_B1);
        }
        if (nw > 1) {
            a = a_tile(j, r1, kc, buf[1], &sa);
            AMX_LOAD(T_A1, a, sa);
            AMX_DPBF16PS(T_C10, T_A1, T_B0);
            if (np > 1)
                AMX_DPBF16PS(T_C11, T_A1, T_B1);
        }
    }

    const int e0 = min_int(n + TR, n1), e1 = min_int(n + 2 * TR, n1);
    AMX_STORE(T_C00, c, 64);
    put_tile(j, c, r0, n, e0, p, m0, m1);
    if (np > 1) {
        AMX_STORE(T_C01, c, 64);
        put_tile(j, c, r0, n, e0, p + 1, m0, m1);
    }
    if (nw > 1) {
        AMX_STORE(T_C10, c, 64);
        put_tile(j, c, r1, n + TR, e1, p, m0, m1);
        if (np > 1) {
            AMX_STORE(T_C11, c, 64);
            put_tile(j, c, r1, n + TR, e1, p + 1, m0, m1);
        }
    }
}

void KERNEL(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    (void)ith;
    LL_ASSERT(j->fast && m0 < m1 && n0 < n1);
    AMX_CONFIG(&tile_cfg);
    for (int n = n0; n < n1; n += 2 * TR) {
        const int nw = n + TR < n1 ? 2 : 1;
        for (int p = m0 / TR; p * TR < m1; p += 2)
            run_tiles(j, n, nw, n1, p, (p + 1) * TR < m1 ? 2 : 1, m0, m1);
    }
    AMX_RELEASE();
}

/* Rows [m0, m1) of x as bf16 pairs into their panels (ll_f32_to_bf16, zeros past K); the call
 * that writes the last row also zeroes the columns of its panel past it. */
void ROUND(const struct ll_mm_job *j, int m0, int m1)
{
    const int K = j->K;
    const size_t pairs = j->xb_stride / 2;
    uint32_t *xb = (uint32_t *)(void *)j->xb;
    for (int m = m0; m < m1; m++) {
        const float *xr = j->x + (size_t)m * (size_t)K;
        uint32_t *d = xb + (size_t)(m / TR) * TR * pairs + (size_t)(m % TR);
        size_t kp = 0;
        for (; 2 * kp + 1 < (size_t)K; kp++)
            d[kp * TR] = (uint32_t)ll_f32_to_bf16(xr[2 * kp]) |
                         (uint32_t)ll_f32_to_bf16(xr[2 * kp + 1]) << 16;
        for (; kp < pairs; kp++)
            d[kp * TR] = 2 * kp < (size_t)K ? ll_f32_to_bf16(xr[2 * kp]) : 0;
    }
    if (m1 == j->M && j->M % TR) {
        uint32_t *d = xb + (size_t)(j->M / TR) * TR * pairs;
        for (size_t kp = 0; kp < pairs; kp++)
            for (int c = j->M % TR; c < TR; c++)
                d[kp * TR + (size_t)c] = 0;
    }
}
