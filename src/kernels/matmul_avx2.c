/*
 * matmul_avx2.c: the AVX2 + FMA + F16C variant of ll_matmul, for CPUs without AVX-512; run by
 * the pool's threads on disjoint (m, n) ranges (see matmul_kernels.h).
 *
 * The 16 lanes of the reduction order (matmul.h) live in two ymm accumulators per output element
 * (lanes 0-7 and 8-15), so the exact path performs the very same FMAs as the AVX-512 and scalar
 * variants and agrees with them bit for bit. The fast path emulates vdpbf16ps: a bf16 pair read
 * as one 32-bit lane gives the odd element by masking the low half and the even one by shifting
 * left 16, and each lane does the odd FMA then the even FMA. Unlike vdpbf16ps it does not flush
 * denormal products or sums (activations are flushed when rounded to bf16).
 *
 * Fast math takes one of three paths by M: a lone row (decode) streams W through tile_fast; 2 to
 * SPLIT_MIN_ROWS - 1 rows take the batch path (x as odd and even float planes) and more the
 * prompt path (x in lane order, W regrouped into panels); the exact path uses tiles of TILE_M
 * rows of x × TILE_N rows of W (16 ymm registers limit them). K tails are copied into
 * zero-padded stack buffers, so no load reaches past K.
 */
#include <float.h>
#include <immintrin.h>
#include <string.h>

#include "matmul_kernels.h"
#include "util.h"

#define INLINE static inline __attribute__((always_inline))

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

#define TILE_M 2
#define TILE_N 2
#define GEMV_N 4
/* A lone row of x (decode) walks rows of W up to this K one at a time, so the weights are read
 * as one forward stream (bench-matmul --variant avx2 --m 1 on an AMD EPYC, alternating runs:
 * K = 1536 shapes 23-26 -> 29-35 GB/s, bf16 tg64 8.5 -> 11.0-15.4 t/s), and longer rows GEMV_N
 * at a time (down, K = 8960: one at a time ran 0.7-0.87x). */
#define GEMV_ONE_ROW_K 4096
#define MAX_ACC 4

/* Rows of x per block: those fitting x_block_bytes (kept in L2 while the block walks the panels
 * of W), but at least min_block_rows, so that long rows (down, K = 8960: 14 rows) do not re-read
 * every weight from memory once per few rows of x (bench-matmul --variant avx2, down, M = 128 and
 * 512, alternating runs on an AMD EPYC: 131-138 -> 153-165 GFLOP/s; the other shapes unchanged). */
static const size_t x_block_bytes = 256 * 1024;
static const int min_block_rows = 64;

/* Tree sum of lanes lo[0..8) ++ hi[0..8): the order of lanes_sum() in matmul.c. */
INLINE float lanes_sum2(__m256 lo, __m256 hi)
{
    __m256 a = _mm256_add_ps(lo, hi);                                             /* i + i+8 */
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* + i+4 */
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                 /* + i+2 */
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));                       /* + i+1 */
}

INLINE void tile_store(const __m256 *lo, const __m256 *hi, const int mr, const int nr, float *out,
                       size_t ldo, const float *bias)
{
    for (int m = 0; m < mr; m++)
        for (int n = 0; n < nr; n++) {
            float s = lanes_sum2(lo[m * nr + n], hi[m * nr + n]);
            out[(size_t)m * ldo + (size_t)n] = bias ? s + bias[n] : s;
        }
}

/* The odd and the even element of each of 8 bf16 pairs (one pair a 32-bit lane), as floats:
 * the odd one by masking the low half, the even one by shifting it up. */
INLINE __m256 pair_odd(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

INLINE __m256 pair_even(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* ---- fast path, one row of x: emulated bf16 dot products ---- */

/* One chunk of 32 bf16 (16 pairs) for every accumulator of the tile. */
INLINE void step_fast(__m256 *lo, __m256 *hi, const int mr, const int nr, const uint16_t *xb,
                      size_t ldx, const uint16_t *w, size_t ldw, size_t k)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 wo[GEMV_N], we[GEMV_N];
        __m256 *acc = h ? hi : lo;
#pragma GCC unroll 4
        for (int n = 0; n < nr; n++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + (size_t)n * ldw + k + 16 * h));
            wo[n] = pair_odd(v);
            we[n] = pair_even(v);
        }
#pragma GCC unroll 2
        for (int m = 0; m < mr; m++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(xb + (size_t)m * ldx + k + 16 * h));
            __m256 xo = pair_odd(v), xe = pair_even(v);
#pragma GCC unroll 4
            for (int n = 0; n < nr; n++) {
                __m256 t = _mm256_fmadd_ps(xo, wo[n], acc[m * nr + n]);
                acc[m * nr + n] = _mm256_fmadd_ps(xe, we[n], t);
            }
        }
    }
}

INLINE void tile_fast(const int mr, const int nr, const uint16_t *xb, size_t ldx,
                      const uint16_t *w, size_t ldw, int nfull, int rem, float *out, size_t ldo,
                      const float *bias)
{
    __m256 lo[MAX_ACC], hi[MAX_ACC];
    for (int i = 0; i < mr * nr; i++)
        lo[i] = hi[i] = _mm256_setzero_ps();
    for (int c = 0; c < nfull; c++)
        step_fast(lo, hi, mr, nr, xb, ldx, w, ldw, (size_t)c * LL_MM_CHUNK_FAST);
    if (rem) {
        uint16_t wt[GEMV_N][LL_MM_CHUNK_FAST] = {{0}};
        size_t k = (size_t)nfull * LL_MM_CHUNK_FAST;
        for (int n = 0; n < nr; n++)
            memcpy(wt[n], w + (size_t)n * ldw + k, (size_t)rem * 2);
        step_fast(lo, hi, mr, nr, xb + k, ldx, wt[0], LL_MM_CHUNK_FAST, 0);
    }
    tile_store(lo, hi, mr, nr, out, ldo, bias);
}

static void tile_fast_any(int mr, int nr, const uint16_t *xb, size_t ldx, const uint16_t *w,
                          size_t ldw, int nfull, int rem, float *out, size_t ldo,
                          const float *bias)
{
#define FAST_CASE(MR, NR)                                                                      \
    case (MR) * 16 + (NR):                                                                     \
        tile_fast(MR, NR, xb, ldx, w, ldw, nfull, rem, out, ldo, bias);                        \
        break;
    LL_ASSERT(mr == 1); /* M >= 2 takes the batch or the prompt path */
    switch (mr * 16 + nr) {
        FAST_CASE(1, 1) FAST_CASE(1, 2) FAST_CASE(1, 3) FAST_CASE(1, 4)
    default:
        __builtin_unreachable();
    }
#undef FAST_CASE
}

/* ---- batch path: x as float planes of its odd and even elements ----
 *
 * For 2 <= M < SPLIT_MIN_ROWS (batched decode, short prompt chunks) the round step writes each
 * row of x as floats, per half chunk its 8 odd elements then its 8 even ones (round_plane_row),
 * so a tile splits only the weights: per half chunk of one row of W a load, an and and a shift,
 * then two FMAs for each of up to PL_M rows of x, which come straight from memory. The lanes,
 * their accumulators and the order of their FMAs are tile_fast's, so the bits are the same.
 * One thread on a Zen 1 EPYC (bench-matmul --threads 1, against the 2 x 2 tiles, two runs
 * each): q/o M = 2 / 4 / 8 / 16 / 23: 15 / 19 / 21.5 / 23 / 22 -> 20 / 25.6 / 26.4 / 27.4 /
 * 27.8 GFLOP/s; down the same from M = 4 (M = 2: 21 -> 20). Tiles of 3 x 2 or 2 x 2 (two rows
 * of W sharing each load of x) ran 0-10 % above the old tiles, 4 x 1 4-8 % below 6 x 1. */

#define PL_M 6 /* rows of x per tile: 12 accumulators, the weight's two halves, the mask */

/* Chunk offset k (elements) of one row of W against mr rows of x in plane order. */
INLINE void step_planes(__m256 *lo, __m256 *hi, const int mr, const float *xp, size_t ldx,
                        const uint16_t *w, size_t k)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 *acc = h ? hi : lo;
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + k + 16 * h));
        __m256 wo = pair_odd(v), we = pair_even(v);
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
            const float *x = xp + (size_t)m * ldx + k + 16 * h;
            __m256 t = _mm256_fmadd_ps(_mm256_loadu_ps(x), wo, acc[m]);
            acc[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), we, t);
        }
    }
}

INLINE void tile_planes(const int mr, const float *xp, size_t ldx, const uint16_t *w,
                        int nfull, int rem, float *out, size_t ldo, const float *bias)
{
    __m256 lo[PL_M], hi[PL_M];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
        lo[i] = hi[i] = _mm256_setzero_ps();
    for (int c = 0; c < nfull; c++)
        step_planes(lo, hi, mr, xp, ldx, w, (size_t)c * LL_MM_CHUNK_FAST);
    if (rem) {
        uint16_t wt[LL_MM_CHUNK_FAST] = {0};
        size_t k = (size_t)nfull * LL_MM_CHUNK_FAST;
        memcpy(wt, w + k, (size_t)rem * 2);
        step_planes(lo, hi, mr, xp + k, ldx, wt, 0);
    }
    tile_store(lo, hi, mr, 1, out, ldo, bias);
}

static void tile_planes_any(int mr, const float *xp, size_t ldx, const uint16_t *w, int nfull,
                            int rem, float *out, size_t ldo, const float *bias)
{
    switch (mr) {
    case 1: tile_planes(1, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    case 2: tile_planes(2, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    case 3: tile_planes(3, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    case 4: tile_planes(4, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    case 5: tile_planes(5, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    case 6: tile_planes(6, xp, ldx, w, nfull, rem, out, ldo, bias); break;
    default: __builtin_unreachable();
    }
}

/* ---- exact path: f32 × widened weights ---- */

/* Eight weights widened to f32 (exactly). */
INLINE __m256 load_w8(const void *w, size_t i, const enum ll_dtype wt)
{
    if (wt == LL_F32)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (wt == LL_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One chunk of 16 for every accumulator of the tile. */
INLINE void step_exact(__m256 *lo, __m256 *hi, const int mr, const int nr, const enum ll_dtype wt,
                       const float *x, size_t ldx, const void *w, size_t ldw, size_t k)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 wv[GEMV_N];
        __m256 *acc = h ? hi : lo;
#pragma GCC unroll 4
        for (int n = 0; n < nr; n++)
            wv[n] = load_w8(w, (size_t)n * ldw + k + 8 * h, wt);
#pragma GCC unroll 2
        for (int m = 0; m < mr; m++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)m * ldx + k + 8 * h);
#pragma GCC unroll 4
            for (int n = 0; n < nr; n++)
                acc[m * nr + n] = _mm256_fmadd_ps(xv, wv[n], acc[m * nr + n]);
        }
    }
}

INLINE void tile_exact(const int mr, const int nr, const enum ll_dtype wt, const float *x,
                       size_t ldx, const void *w, size_t ldw, int nfull, int rem, float *out,
                       size_t ldo, const float *bias)
{
    __m256 lo[MAX_ACC], hi[MAX_ACC];
    for (int i = 0; i < mr * nr; i++)
        lo[i] = hi[i] = _mm256_setzero_ps();
    for (int c = 0; c < nfull; c++)
        step_exact(lo, hi, mr, nr, wt, x, ldx, w, ldw, (size_t)c * LL_MM_CHUNK_EXACT);
    if (rem) {
        const size_t es = ll_dtype_size(wt), k = (size_t)nfull * LL_MM_CHUNK_EXACT;
        float xt[TILE_M][LL_MM_CHUNK_EXACT] = {{0}};
        _Alignas(32) unsigned char wt_buf[GEMV_N][LL_MM_CHUNK_EXACT * 4] = {{0}};
        for (int m = 0; m < mr; m++)
            memcpy(xt[m], x + (size_t)m * ldx + k, (size_t)rem * 4);
        for (int n = 0; n < nr; n++)
            memcpy(wt_buf[n], (const char *)w + ((size_t)n * ldw + k) * es, (size_t)rem * es);
        step_exact(lo, hi, mr, nr, wt, xt[0], LL_MM_CHUNK_EXACT, wt_buf[0],
                   LL_MM_CHUNK_EXACT * 4 / es, 0);
    }
    tile_store(lo, hi, mr, nr, out, ldo, bias);
}

#define EXACT_ANY(NAME, WT_)                                                                   \
    static void NAME(int mr, int nr, const float *x, size_t ldx, const void *w, size_t ldw,    \
                     int nfull, int rem, float *out, size_t ldo, const float *bias)            \
    {                                                                                          \
        switch (mr * 16 + nr) {                                                                \
        case 0x11: tile_exact(1, 1, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        case 0x12: tile_exact(1, 2, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        case 0x13: tile_exact(1, 3, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        case 0x14: tile_exact(1, 4, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        case 0x21: tile_exact(2, 1, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        case 0x22: tile_exact(2, 2, WT_, x, ldx, w, ldw, nfull, rem, out, ldo, bias); break;   \
        default: __builtin_unreachable();                                                      \
        }                                                                                      \
    }

EXACT_ANY(tile_exact_bf16, LL_BF16)
EXACT_ANY(tile_exact_f16, LL_F16)
EXACT_ANY(tile_exact_f32, LL_F32)

/* ---- prompt path: lanes split into floats, products broadcast across 16 columns ----
 *
 * Tiles that split both operands per use (2 x 2, as tile_fast) run at about 60 % of the FMA
 * peak on an AVX2-only AMD EPYC (Zen 1): each bf16 pair is split (an and, a shift) for every two
 * FMAs. For calls of at least SPLIT_MIN_ROWS
 * rows of x the round step writes x as floats in lane-major order instead (split_index), and the
 * weights are regrouped 16 rows at a time into a panel of the thread's scratch holding, for each
 * lane and chunk, the odd and the even element of the lane's pair of all 16 rows as floats
 * (pack_panel, once per panel and block of x). A tile then keeps 6 rows x 16 columns of one lane
 * in 12 accumulators and walks that lane over the whole of K: per chunk four loads give the 16
 * columns' odd and even weights, twelve broadcasts the rows' floats, and 24 FMAs use them (one
 * thread, M = 120, K = 1536, on a Zen 1 EPYC: 23.6 -> 31.0 GFLOP/s). Every lane still takes its
 * pairs in increasing k, odd element first, from zero, and the 16 lanes are then summed by
 * lanes_sum2's tree, across 8 columns at a time: the same operations as the tiles above, so the
 * same bits. Below SPLIT_MIN_ROWS the batch path is faster: one thread on the Zen 1, the batch
 * path against this one at M = 24 / 32 / 48 / 64: q/o 27.7 / 27.4 / 26.9 / 27.2 against
 * 24.3 / 26.0 / 28.6 / 29.7 GFLOP/s, down 27.0 / 27.0 / 26.7 / 24 against 26.2 / 28.0 / 30.8 /
 * 32.1. */

#define SPLIT_MIN_ROWS 40
#define BT_M 6                         /* rows of x per broadcast tile */
#define BT_N 16                        /* columns per panel (two ymm of floats) */
#define BT_BLOCK_ROWS (BT_M * 32)      /* rows of x per block (their floats stay in L3): a panel
                                        * is regrouped once per block (96 rows: 29.1 against
                                        * 31.0 GFLOP/s, one thread, M = 120) */

static bool uses_split(const struct ll_mm_job *j)
{
    return j->fast && j->M >= SPLIT_MIN_ROWS;
}

static bool uses_planes(const struct ll_mm_job *j)
{
    return j->fast && j->M >= 2 && j->M < SPLIT_MIN_ROWS;
}

/* Offset of lane i's (odd, even) floats of chunk c in a split row of nc chunks. */
static inline size_t split_index(int i, int c, int nc)
{
    return ((size_t)i * (size_t)nc + (size_t)c) * 2;
}

/* Rows 8*nh .. 8*nh+8 of the panel's chunk c, half h, transposed: lane 8h+p of the panel gets
 * the pairs of the 8 rows. src[r] points at row r's 16 pairs (NULL: a zero row). */
INLINE void pack_8x8(float *wp, int nc, int c, int h, int nh, const uint32_t *const *src)
{
    __m256i r[8], t[8], u[8];
    for (int k = 0; k < 8; k++)
        r[k] = src[k] ? _mm256_loadu_si256((const __m256i *)src[k]) : _mm256_setzero_si256();
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_epi32(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_epi32(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
        u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
        u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (int p = 0; p < 8; p++) {
        __m256i v = p < 4 ? _mm256_permute2x128_si256(u[p], u[p + 4], 0x20)
                          : _mm256_permute2x128_si256(u[p - 4], u[p], 0x31);
        float *d = wp + ((size_t)(8 * h + p) * nc + c) * 2 * BT_N + 8 * nh;
        _mm256_storeu_ps(d, pair_odd(v));
        _mm256_storeu_ps(d + BT_N, pair_even(v));
    }
}

/* wp[(i * nc + c) * 32 + n] and [... + 16 + n]: the odd and the even element of lane i's pair in
 * chunk c of row n of W, as floats (nr valid rows from w, zero rows after them; zero past K). */
static void pack_panel(float *wp, const uint16_t *w, size_t K, int nr, int nc)
{
    const int nfull = (int)(K / LL_MM_CHUNK_FAST), rem = (int)(K % LL_MM_CHUNK_FAST);
    uint32_t tail[BT_N][LL_MM_CHUNK_FAST / 2];
    if (rem) {
        memset(tail, 0, sizeof tail);
        for (int n = 0; n < nr; n++)
            memcpy(tail[n], w + (size_t)n * K + (size_t)nfull * LL_MM_CHUNK_FAST, (size_t)rem * 2);
    }
    for (int c = 0; c < nc; c++) {
        if (c + 8 < nfull) /* the rows' lines a few chunks ahead: 16 streams at once */
            for (int n = 0; n < nr; n++)
                _mm_prefetch((const char *)(w + (size_t)n * K + (size_t)(c + 8) * LL_MM_CHUNK_FAST),
                             _MM_HINT_T0);
        for (int h = 0; h < 2; h++)
            for (int nh = 0; nh < 2; nh++) {
                const uint32_t *src[8];
                for (int r = 0; r < 8; r++) {
                    int n = 8 * nh + r;
                    src[r] = n >= nr ? NULL
                             : c < nfull
                                 ? (const uint32_t *)(w + (size_t)n * K +
                                                      (size_t)c * LL_MM_CHUNK_FAST) + 8 * h
                                 : tail[n] + 8 * h;
                }
                pack_8x8(wp, nc, c, h, nh, src);
            }
    }
}

/* Lane i of rows m < mr (split rows xs, xs_stride floats apart) against the panel's 16 columns,
 * over all nc chunks; the lanes' sums go to lr[(m * 16 + i) * 16 + n]. */
INLINE void bt_tile(const int mr, const float *xs, size_t xs_stride, const float *wp, int nc,
                    float *lr)
{
    for (int i = 0; i < 16; i++) {
        __m256 acc[BT_M][2];
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++)
            acc[m][0] = acc[m][1] = _mm256_setzero_ps();
        const float *xl = xs + split_index(i, 0, nc);
        const float *wl = wp + (size_t)i * nc * 2 * BT_N;
        for (int c = 0; c < nc; c++) {
            const float *wc = wl + (size_t)c * 2 * BT_N;
            __m256 w0 = _mm256_loadu_ps(wc), w1 = _mm256_loadu_ps(wc + 8);
#pragma GCC unroll 6
            for (int m = 0; m < mr; m++) {
                __m256 xo = _mm256_broadcast_ss(xl + (size_t)m * xs_stride + 2 * (size_t)c);
                acc[m][0] = _mm256_fmadd_ps(xo, w0, acc[m][0]);
                acc[m][1] = _mm256_fmadd_ps(xo, w1, acc[m][1]);
            }
            w0 = _mm256_loadu_ps(wc + BT_N);
            w1 = _mm256_loadu_ps(wc + BT_N + 8);
#pragma GCC unroll 6
            for (int m = 0; m < mr; m++) {
                __m256 xe = _mm256_broadcast_ss(xl + (size_t)m * xs_stride + 2 * (size_t)c + 1);
                acc[m][0] = _mm256_fmadd_ps(xe, w0, acc[m][0]);
                acc[m][1] = _mm256_fmadd_ps(xe, w1, acc[m][1]);
            }
        }
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
            _mm256_storeu_ps(lr + ((size_t)m * 16 + (size_t)i) * BT_N, acc[m][0]);
            _mm256_storeu_ps(lr + ((size_t)m * 16 + (size_t)i) * BT_N + 8, acc[m][1]);
        }
    }
}

static void bt_tile_any(int mr, const float *xs, size_t xs_stride, const float *wp, int nc,
                        float *lr)
{
    switch (mr) {
    case 1: bt_tile(1, xs, xs_stride, wp, nc, lr); break;
    case 2: bt_tile(2, xs, xs_stride, wp, nc, lr); break;
    case 3: bt_tile(3, xs, xs_stride, wp, nc, lr); break;
    case 4: bt_tile(4, xs, xs_stride, wp, nc, lr); break;
    case 5: bt_tile(5, xs, xs_stride, wp, nc, lr); break;
    case 6: bt_tile(6, xs, xs_stride, wp, nc, lr); break;
    default: __builtin_unreachable();
    }
}

/* The 16 lanes of each of the tile's outputs summed in lanes_sum2's order, 8 columns at a time,
 * then + bias; nr columns stored. */
static void bt_store(const float *lr, int mr, int nr, float *out, size_t ldo, const float *bias)
{
    for (int m = 0; m < mr; m++)
        for (int v = 0; v < 2 && 8 * v < nr; v++) {
            __m256 l[16];
            for (int i = 0; i < 16; i++)
                l[i] = _mm256_loadu_ps(lr + ((size_t)m * 16 + (size_t)i) * BT_N + 8 * v);
            for (int i = 0; i < 8; i++)
                l[i] = _mm256_add_ps(l[i], l[i + 8]);
            for (int i = 0; i < 4; i++)
                l[i] = _mm256_add_ps(l[i], l[i + 4]);
            for (int i = 0; i < 2; i++)
                l[i] = _mm256_add_ps(l[i], l[i + 2]);
            __m256 s = _mm256_add_ps(l[0], l[1]);
            float tmp[8];
            _mm256_storeu_ps(tmp, s);
            for (int n = 8 * v; n < nr && n < 8 * v + 8; n++)
                out[(size_t)m * ldo + (size_t)n] = bias ? tmp[n - 8 * v] + bias[n] : tmp[n - 8 * v];
        }
}

static void kernel_split(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    const size_t K = (size_t)j->K, ldo = (size_t)j->N, stride = j->xb_stride;
    const int nc = (int)(stride / LL_MM_CHUNK_FAST);
    const float *xs = (const float *)j->xb;
    float *wp = (float *)(j->panels + (size_t)ith * j->panel_bytes);
    LL_ASSERT(LL_MM_PANEL_BYTES(stride) <= j->panel_bytes); /* what pack_panel fills */
    _Alignas(32) float lr[BT_M * 16 * BT_N];
    for (int mb = m0; mb < m1; mb += BT_BLOCK_ROWS) {
        const int mb_end = min_int(m1, mb + BT_BLOCK_ROWS);
        for (int n = n0; n < n1; n += BT_N) {
            const int nr = min_int(BT_N, n1 - n);
            pack_panel(wp, (const uint16_t *)j->w + (size_t)n * K, K, nr, nc);
            for (int m = mb; m < mb_end; m += BT_M) {
                const int mr = min_int(BT_M, mb_end - m);
                bt_tile_any(mr, xs + (size_t)m * stride, stride, wp, nc, lr);
                bt_store(lr, mr, nr, j->out + (size_t)m * ldo + (size_t)n, ldo,
                         j->bias ? j->bias + n : NULL);
            }
        }
    }
}

/* The batch path's walk: one row of W at a time against every row of x (all M rows are one
 * block: at M < SPLIT_MIN_ROWS their planes stay in L2 for K up to 1536, L3 beyond). */
static void kernel_planes(const struct ll_mm_job *j, int m0, int m1, int n0, int n1)
{
    const size_t K = (size_t)j->K, ldo = (size_t)j->N, stride = j->xb_stride;
    const int nfull = j->K / LL_MM_CHUNK_FAST, rem = j->K % LL_MM_CHUNK_FAST;
    const float *xp = (const float *)j->xb;
    for (int n = n0; n < n1; n++)
        for (int m = m0; m < m1; m += PL_M)
            tile_planes_any(min_int(PL_M, m1 - m), xp + (size_t)m * stride, stride,
                            (const uint16_t *)j->w + (size_t)n * K, nfull, rem,
                            j->out + (size_t)m * ldo + (size_t)n, ldo,
                            j->bias ? j->bias + n : NULL);
}

/* ---- the blocked loops (same walk as the AVX-512 variant) ---- */

void ll_mm_kernel_avx2(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    if (uses_split(j)) {
        kernel_split(j, m0, m1, n0, n1, ith);
        return;
    }
    if (uses_planes(j)) {
        kernel_planes(j, m0, m1, n0, n1);
        return;
    }
    const size_t K = (size_t)j->K, ldo = (size_t)j->N;
    const size_t esize = ll_dtype_size(j->wtype);
    const int chunk = j->fast ? LL_MM_CHUNK_FAST : LL_MM_CHUNK_EXACT;
    const int nfull = j->K / chunk, rem = j->K % chunk;
    const size_t x_row_bytes = j->fast ? j->xb_stride * 2 : K * 4;
    int block = (int)(x_block_bytes / (x_row_bytes ? x_row_bytes : 1));
    block = block < min_block_rows ? min_block_rows : block / TILE_M * TILE_M;

    for (int mb = m0; mb < m1; mb += block) {
        const int mb_end = min_int(m1, mb + block);
        const int panel = mb_end - mb == 1 ? (K <= GEMV_ONE_ROW_K ? 1 : GEMV_N) : TILE_N;
        for (int n = n0; n < n1; n += panel) {
            const int nr = min_int(panel, n1 - n);
            const char *wp = (const char *)j->w + (size_t)n * K * esize;
            for (int m = mb; m < mb_end; m += TILE_M) {
                const int mr = min_int(TILE_M, mb_end - m);
                float *out = j->out + (size_t)m * ldo + (size_t)n;
                const float *bias = j->bias ? j->bias + n : NULL;
                if (j->fast) {
                    tile_fast_any(mr, nr, j->xb + (size_t)m * j->xb_stride, j->xb_stride,
                                  (const uint16_t *)wp, K, nfull, rem, out, ldo, bias);
                    continue;
                }
                const float *x = j->x + (size_t)m * K;
                switch (j->wtype) {
                case LL_BF16:
                    tile_exact_bf16(mr, nr, x, K, wp, K, nfull, rem, out, ldo, bias);
                    break;
                case LL_F16:
                    tile_exact_f16(mr, nr, x, K, wp, K, nfull, rem, out, ldo, bias);
                    break;
                case LL_F32:
                    tile_exact_f32(mr, nr, x, K, wp, K, nfull, rem, out, ldo, bias);
                    break;
                }
            }
        }
    }
}

/* bf16 of eight floats, round to nearest even, denormals read as zero, NaN kept quiet. */
INLINE __m256i round8(__m256 x)
{
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i u = _mm256_castps_si256(x);
    __m256 ax = _mm256_andnot_ps(_mm256_castsi256_ps(sign), x);
    __m256 tiny = _mm256_cmp_ps(ax, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    u = _mm256_blendv_epi8(u, _mm256_and_si256(u, sign), _mm256_castps_si256(tiny));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, _mm256_castps_si256(nan));
}

/* Row m of x rounded to bf16 as in ll_mm_round_avx2, written as floats in split order: lane i's
 * (odd, even) pair of each chunk at split_index (zero past K). */
static void round_split_row(const struct ll_mm_job *j, int m)
{
    const int K = j->K, nc = (int)(j->xb_stride / LL_MM_CHUNK_FAST);
    const float *xr = j->x + (size_t)m * (size_t)K;
    float *d = (float *)j->xb + (size_t)m * j->xb_stride;
    for (int c = 0; c < nc; c++) {
        const int k0 = c * LL_MM_CHUNK_FAST;
        float buf[LL_MM_CHUNK_FAST];
        const float *src = xr + k0;
        if (k0 + LL_MM_CHUNK_FAST > K) {
            memset(buf, 0, sizeof buf);
            memcpy(buf, src, (size_t)(K - k0) * sizeof *buf);
            src = buf;
        }
        for (int q = 0; q < 4; q++) {
            /* elements 8q..8q+8 are lanes 4q..4q+4: as floats, each pair swapped to (odd, even) */
            __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(round8(_mm256_loadu_ps(src + 8 * q)), 16));
            v = _mm256_permute_ps(v, 0xb1);
            __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
            _mm_storel_pi((__m64 *)(d + split_index(4 * q, c, nc)), lo);
            _mm_storeh_pi((__m64 *)(d + split_index(4 * q + 1, c, nc)), lo);
            _mm_storel_pi((__m64 *)(d + split_index(4 * q + 2, c, nc)), hi);
            _mm_storeh_pi((__m64 *)(d + split_index(4 * q + 3, c, nc)), hi);
        }
    }
}

/* Row m of x rounded to bf16 as in ll_mm_round_avx2, written as floats in plane order: per
 * chunk and half chunk, the 8 odd elements then the 8 even ones (zero past K). */
static void round_plane_row(const struct ll_mm_job *j, int m)
{
    const int K = j->K, nh = (int)(j->xb_stride / 16);
    const float *xr = j->x + (size_t)m * (size_t)K;
    float *d = (float *)j->xb + (size_t)m * j->xb_stride;
    for (int q = 0; q < nh; q++) {
        const int k0 = q * 16;
        float buf[16];
        const float *src = xr + k0;
        if (k0 + 16 > K) {
            memset(buf, 0, sizeof buf);
            if (k0 < K)
                memcpy(buf, src, (size_t)(K - k0) * sizeof *buf);
            src = buf;
        }
        __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(round8(_mm256_loadu_ps(src)), 16));
        __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(round8(_mm256_loadu_ps(src + 8)), 16));
        /* per 128-bit lane: a1 a3 b1 b3 | a5 a7 b5 b7, then the 64-bit pairs put in order */
        __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
        odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xd8));
        even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xd8));
        _mm256_storeu_ps(d + k0, odd);
        _mm256_storeu_ps(d + k0 + 8, even);
    }
}

void ll_mm_round_avx2(const struct ll_mm_job *j, int m0, int m1)
{
    const int K = j->K;
    if (uses_split(j)) {
        for (int m = m0; m < m1; m++)
            round_split_row(j, m);
        return;
    }
    if (uses_planes(j)) {
        for (int m = m0; m < m1; m++)
            round_plane_row(j, m);
        return;
    }
    for (int m = m0; m < m1; m++) {
        const float *xr = j->x + (size_t)m * (size_t)K;
        uint16_t *d = (uint16_t *)j->xb + (size_t)m * j->xb_stride;
        int k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i p = _mm256_packus_epi32(round8(_mm256_loadu_ps(xr + k)),
                                            round8(_mm256_loadu_ps(xr + k + 8)));
            _mm256_storeu_si256((__m256i *)(d + k), _mm256_permute4x64_epi64(p, 0xd8));
        }
        for (; k < K; k++) {
            float f = xr[k];
            d[k] = ll_f32_to_bf16(__builtin_fabsf(f) < FLT_MIN ? __builtin_copysignf(0.0f, f) : f);
        }
        for (; (size_t)k < j->xb_stride; k++)
            d[k] = 0;
    }
}
