/*
 * matmul_avx512.c: the AVX-512 variant of ll_matmul (F, BW, VL, DQ, BF16), run by the pool's
 * threads on disjoint (m, n) ranges (see matmul_kernels.h).
 *
 * Each output element owns one zmm accumulator: 16 f32 lanes over K, the reduction order of
 * matmul.h. The fast path issues one vdpbf16ps per chunk of 32 bf16, the exact path one FMA per
 * chunk of 16 widened weights. Tiles of up to TILE_M rows of x × TILE_N rows of W keep
 * TILE_M·TILE_N accumulators in registers, so each weight vector loaded is used TILE_M times and
 * each x vector TILE_N times. At the end of a tile the accumulators are reduced sixteen at a time
 * by a transposing tree that performs, per element, exactly the additions of the scalar tree.
 *
 * Cache blocking: rows of x are taken in blocks that fit in L2 (x_block_bytes); for each block the
 * thread walks its columns panel by panel (TILE_N weight rows, from memory into L1/L2 once per
 * block) and runs every tile of the block against that panel, while software-prefetching the
 * next panel a share per tile (so a lone row of x, the decode GEMV, streams weights at memory
 * speed too; a panel larger than L1 is walked in slices of K, see fast_panel). Weights are read
 * in place (row-major, any alignment, no packing: each row is already K-contiguous, which is
 * what a dot-product kernel wants); K tails use masked loads, which
 * never touch memory past K. x on the fast path is the bf16 scratch copy, 64-byte aligned rows
 * zero-padded to a whole chunk.
 */
#include <immintrin.h>
#include <string.h>

#include "matmul_kernels.h"

#define INLINE static inline __attribute__((always_inline))

#define TILE_M 4   /* rows of x per tile */
#define TILE_N 6   /* rows of W per tile */
#define GEMV_N 8   /* rows of W per tile when a block has a single row of x */
#define MAX_ACC 32 /* TILE_M·TILE_N and GEMV_N fit */

/* Bytes of x kept in L2 per block (the weight panel also lives there for large K). */
static const size_t x_block_bytes = 512 * 1024;

/* Software prefetch of the next weight panel, spread over the k steps of the current tiles:
 * `per_step` lines from p each step until end, into L2 (prefetching into L1 ties up its few miss
 * buffers, and the panel's loads then wait on memory instead of overlapping the tiles' compute:
 * bench-matmul gate/up at M = 8 on an AMD EPYC 1.30 -> 0.87 ms, lm_head 24.9 -> 14.9 ms, M = 16
 * 1.70 -> 1.30 ms; M = 64 unchanged). */
struct prefetch {
    const char *p, *end;
    int per_step;
};

INLINE void prefetch_step(struct prefetch *pf)
{
    if (pf->p < pf->end) {
        for (int q = 0; q < pf->per_step; q++)
            _mm_prefetch(pf->p + 64 * q, _MM_HINT_T1);
        pf->p += 64 * pf->per_step;
    }
}

/* Unit u's share of prefetching the next panel (next_lines lines from next), split evenly over
 * `units` (a block's tiles, or its tiles × slices of K) and spread over the unit's `steps` k steps
 * (at least 1). None when `single`: a single row of x (decode) streams the weights once, and the
 * hardware prefetchers keep up better alone (bench-matmul M = 1 on an AMD EPYC: 20-23 -> 24-30
 * GB/s). */
INLINE struct prefetch prefetch_share(const char *next, size_t next_lines, size_t units, size_t u,
                                      int steps, int single)
{
    const size_t share = (next_lines + units - 1) / units;
    size_t first = share * u, last = first + share;
    first = first < next_lines ? first : next_lines;
    last = last < next_lines ? last : next_lines;
    const int per_step = single ? 0 : (int)((share + (size_t)steps - 1) / (size_t)steps);
    return (struct prefetch){next + 64 * first, next + 64 * last, per_step};
}

/*
 * Reduce sixteen accumulators at once. Slot s = 4j + k must hold accumulator 4k + j; lane L of
 * the result is then the tree sum of accumulator L. Stage by stage, every lane adds the same
 * pairs as lanes_sum() in matmul.c: halves of 8, then of 4, of 2, of 1.
 */
INLINE __m512 reduce16(const __m512 v[16])
{
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) /* lanes i + i+8 of two accumulators per vector */
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xee));
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) /* + i+4: four accumulators per vector, one per 128-bit block */
        u[r] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * r], t[2 * r + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * r], t[2 * r + 1], 0xdd));
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) { /* + i+2 */
        __m512d a = _mm512_castps_pd(u[2 * q]), b = _mm512_castps_pd(u[2 * q + 1]);
        w[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* + i+1 */
    return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xdd));
}

/* Tree sums of accumulators 16g .. 16g+15 of a tile of cnt (zero past cnt), in lane order. */
INLINE __m512 reduce_group(const __m512 *acc, const int cnt, const int g)
{
    __m512 v[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; s++) {
        int i = 16 * g + (((s & 3) << 2) | (s >> 2));
        v[s] = i < cnt ? acc[i] : _mm512_setzero_ps();
    }
    return reduce16(v);
}

/* Reduce the mr×nr accumulators of a tile (acc[m·nr + n]), add bias, store to out: the tree
 * sums land in lane order in r0 (accumulators 0..15) and r1 (16..31); row m's nr results,
 * lanes m·nr .. m·nr + nr - 1 of the pair, are moved to lane 0 by one permute and stored masked.
 * With reduce16 unrolled this keeps the tree in registers: a tile of K = 1536 spent ~20 % of its
 * time here with spills and a scalar store loop (perf annotate), and the bf16 GEMM ran 1.16-1.21x
 * faster without them at K = 1536, M = 64-512 (alternating calls on an AMD EPYC; 1.03-1.05x at
 * K = 8960).
 * (Written without a loop over groups on purpose: GCC 12 at -O1+ shared the stack slot of a
 * result array indexed in such a loop with reduce16's temporaries and overwrote group 0.) */
INLINE void tile_store(const __m512 *acc, const int mr, const int nr, float *out, size_t ldo,
                       const float *bias)
{
    const int cnt = mr * nr;
    const __m512 r0 = reduce_group(acc, cnt, 0);
    const __m512 r1 = cnt > 16 ? reduce_group(acc, cnt, 1) : _mm512_setzero_ps();
    const __mmask16 mask = (__mmask16)((1u << nr) - 1);
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int m = 0; m < mr; m++) {
        const __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32(m * nr));
        __m512 v = m == 0 ? r0 : _mm512_permutex2var_ps(r0, idx, r1);
        if (bias)
            v = _mm512_add_ps(v, b);
        _mm512_mask_storeu_ps(out + (size_t)m * ldo, mask, v);
    }
}

/* ---- fast path: bf16 × bf16 ---- */

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* One chunk of 32 bf16 for every accumulator of the tile; `masked` only for the K tail. */
INLINE void step_fast(__m512 *acc, const int mr, const int nr, const uint16_t *xb, size_t ldx,
                      const uint16_t *w, size_t ldw, size_t k, const int masked, __mmask32 tail)
{
    __m512i wv[GEMV_N > TILE_N ? GEMV_N : TILE_N];
#pragma GCC unroll 8
    for (int n = 0; n < nr; n++)
        wv[n] = masked ? _mm512_maskz_loadu_epi16(tail, w + (size_t)n * ldw + k)
                       : _mm512_loadu_si512(w + (size_t)n * ldw + k);
#pragma GCC unroll 4
    for (int m = 0; m < mr; m++) {
        __m512i xv = _mm512_load_si512(xb + (size_t)m * ldx + k); /* zero-padded past K */
#pragma GCC unroll 8
        for (int n = 0; n < nr; n++)
            acc[m * nr + n] = _mm512_dpbf16_ps(acc[m * nr + n], (__m512bh)xv, (__m512bh)wv[n]);
    }
}

/* Chunks [c0, c1) of the tile, plus the K tail when `tail` is set. The accumulators start at
 * zero, or from `spill` when `resume` is set, and end reduced into out (`finish`) or in `spill`
 * for the tile's next slice of K (see fast_panel): either way each accumulator gets its chunks in
 * the order of an unsliced tile. */
INLINE void tile_fast(const int mr, const int nr, const uint16_t *xb, size_t ldx,
                      const uint16_t *w, size_t ldw, int c0, int c1, __mmask32 tail, int resume,
                      int finish, __m512 *spill, float *out, size_t ldo, const float *bias,
                      struct prefetch pf)
{
    __m512 acc[MAX_ACC];
#pragma GCC unroll 32
    for (int i = 0; i < mr * nr; i++)
        acc[i] = resume ? spill[i] : _mm512_setzero_ps();
    for (int c = c0; c < c1; c++) {
        step_fast(acc, mr, nr, xb, ldx, w, ldw, (size_t)c * LL_MM_CHUNK_FAST, 0, 0);
        prefetch_step(&pf);
    }
    if (tail)
        step_fast(acc, mr, nr, xb, ldx, w, ldw, (size_t)c1 * LL_MM_CHUNK_FAST, 1, tail);
    if (finish) {
        tile_store(acc, mr, nr, out, ldo, bias);
        return;
    }
#pragma GCC unroll 32
    for (int i = 0; i < mr * nr; i++)
        spill[i] = acc[i];
}

#define FAST_CASE(MR, NR)                                                                      \
    case (MR) * 16 + (NR):                                                                     \
        tile_fast(MR, NR, xb, ldx, w, ldw, c0, c1, tail, resume, finish, spill, out, ldo, bias,  \
                  pf);                                                                         \
        break;

static void tile_fast_any(int mr, int nr, const uint16_t *xb, size_t ldx, const uint16_t *w,
                          size_t ldw, int c0, int c1, __mmask32 tail, int resume, int finish,
                          __m512 *spill, float *out, size_t ldo, const float *bias,
                          struct prefetch pf)
{
    switch (mr * 16 + nr) {
        FAST_CASE(1, 1) FAST_CASE(1, 2) FAST_CASE(1, 3) FAST_CASE(1, 4)
        FAST_CASE(1, 5) FAST_CASE(1, 6) FAST_CASE(1, 7) FAST_CASE(1, 8)
        FAST_CASE(2, 1) FAST_CASE(2, 2) FAST_CASE(2, 3) FAST_CASE(2, 4) FAST_CASE(2, 5) FAST_CASE(2, 6)
        FAST_CASE(3, 1) FAST_CASE(3, 2) FAST_CASE(3, 3) FAST_CASE(3, 4) FAST_CASE(3, 5) FAST_CASE(3, 6)
        FAST_CASE(4, 1) FAST_CASE(4, 2) FAST_CASE(4, 3) FAST_CASE(4, 4) FAST_CASE(4, 5) FAST_CASE(4, 6)
    default:
        __builtin_unreachable();
    }
}

/* Long rows of W (K of down_proj, 8960) make a panel of TILE_N rows larger than L1, so every tile
 * of a block would read it from L2 again. A panel over slice_panel_bytes is walked in slices of
 * SLICE_CHUNKS chunks (TILE_N rows × 2 KiB = 12 KiB, beside a tile's 8 KiB of x in L1), every
 * tile of the block running against a slice before the next; between slices a tile's
 * accumulators wait in `spill` unreduced, so every output gets exactly the additions of an
 * unsliced tile. bench-matmul down (K = 8960), AMD EPYC Zen 5, calls of the two builds
 * alternated: M = 512 451-466 -> 494-542 GFLOP/s, M = 128 412-456 -> 447-489; with fewer tiles
 * (M <= 16) the panel is reread rarely and slicing cost 10 %. Panels that fit (K = 1536: 18 KiB)
 * are not sliced. */
#define SLICE_CHUNKS 32
#define SLICE_MIN_TILES 5
#define SPILL_TILES 24 /* a sliced panel has K > 2730: blocks of x of at most 92 rows */
static const size_t slice_panel_bytes = 32 * 1024;

/* Every tile of rows [0, rows) of x against a panel of nr rows of W, prefetching the next panel
 * (next_lines lines from next) a share per tile and slice (prefetch_share). */
static void fast_panel(int rows, int nr, const uint16_t *xb, size_t ldx, const uint16_t *wp,
                       size_t K, int nfull, __mmask32 tail, float *out, size_t ldo,
                       const float *bias, const char *next, size_t next_lines, int single)
{
    _Alignas(64) __m512 spill[SPILL_TILES * TILE_M * TILE_N];
    const int tiles = (rows + TILE_M - 1) / TILE_M;
    const int slices = (size_t)nr * K * 2 > slice_panel_bytes && tiles >= SLICE_MIN_TILES &&
                               tiles <= SPILL_TILES
                           ? (nfull + SLICE_CHUNKS - 1) / SLICE_CHUNKS
                           : 1;
    const size_t units = (size_t)tiles * (size_t)slices;
    for (int s = 0; s < slices; s++) {
        const int c0 = slices == 1 ? 0 : s * SLICE_CHUNKS;
        const int c1 = slices == 1 ? nfull : min_int(nfull, c0 + SLICE_CHUNKS);
        const int finish = s == slices - 1;
        for (int t = 0; t < tiles; t++) {
            const int m = t * TILE_M, mr = min_int(TILE_M, rows - m);
            struct prefetch pf =
                prefetch_share(next, next_lines, units, (size_t)s * (size_t)tiles + (size_t)t,
                               c1 > c0 ? c1 - c0 : 1, single);
            tile_fast_any(mr, nr, xb + (size_t)m * ldx, ldx, wp, K, c0, c1, finish ? tail : 0,
                          s > 0, finish, spill + (size_t)t * TILE_M * TILE_N,
                          out + (size_t)m * ldo, ldo, bias, pf);
        }
    }
}

/* ---- fast path, few rows of x: the weights as one stream ---- */

/* With few rows of x (decode, small batches) a step is bound by reading W, and the hardware
 * prefetchers stream it best in address order: rows of W one after another, each over its whole
 * K before the next (bench-matmul on an AMD EPYC, gate/up: M = 1 25-28 GB/s with 8 rows
 * interleaved as a tile does, 31-35 row after row; M = 8 1.33 ms as tiles). Each weight chunk
 * loaded serves up to STREAM_MR rows of x at once (x stays in L1); every accumulator gets the
 * chunks in the same order as in a tile. */
#define STREAM_MR 8  /* rows of x per pass over a weight row */
#define STREAM_N 16  /* rows of W whose results are reduced together */
#define STREAM_M_MAX 8 /* up to this many rows of x take this path ... */
static const size_t stream_x_bytes = 16 * 1024; /* ... if their bf16 copy stays in L1 */

/* Row wr of W against rows 0..mr) of x: the accumulators into acc[m][r]. */
INLINE void stream_row(const int mr, const uint16_t *xb, size_t ldx, const uint16_t *wr,
                       int nfull, __mmask32 tail, __m512 acc[][STREAM_N], int r)
{
    __m512 a[STREAM_MR];
#pragma GCC unroll 8
    for (int m = 0; m < mr; m++)
        a[m] = _mm512_setzero_ps();
    for (int c = 0; c < nfull; c++) {
        __m512i wv = _mm512_loadu_si512(wr + (size_t)c * LL_MM_CHUNK_FAST);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++)
            a[m] = _mm512_dpbf16_ps(
                a[m], (__m512bh)_mm512_load_si512(xb + (size_t)m * ldx + (size_t)c * LL_MM_CHUNK_FAST),
                (__m512bh)wv);
    }
    if (tail) {
        size_t k = (size_t)nfull * LL_MM_CHUNK_FAST;
        __m512i wv = _mm512_maskz_loadu_epi16(tail, wr + k);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++) /* x is zero-padded past K */
            a[m] = _mm512_dpbf16_ps(a[m], (__m512bh)_mm512_load_si512(xb + (size_t)m * ldx + k),
                                    (__m512bh)wv);
    }
#pragma GCC unroll 8
    for (int m = 0; m < mr; m++)
        acc[m][r] = a[m];
}

#define STREAM_CASE(MR)                                                                        \
    case MR:                                                                                   \
        stream_row(MR, x0, ldx, wr, nfull, tail, acc0, r);                                     \
        break;

/* The accumulators of a stream panel reduced, plus bias, into out[0..M)[0..nr). */
static void store_panel(int M, __m512 acc[][STREAM_N], int nr, float *out, size_t ldo,
                        const float *bias)
{
    for (int m = 0; m < M; m++) {
        union {
            __m512 v;
            float f[16];
        } res = {.v = reduce_group(acc[m], nr, 0)};
        for (int n = 0; n < nr; n++)
            out[(size_t)m * ldo + (size_t)n] = bias ? res.f[n] + bias[n] : res.f[n];
    }
}

/* out[0..M)[0..nr) for nr <= STREAM_N rows of W, M <= STREAM_M_MAX rows of x. */
static void stream_panel(int M, const uint16_t *xb, size_t ldx, const uint16_t *w, size_t ldw,
                         int nfull, __mmask32 tail, int nr, float *out, size_t ldo,
                         const float *bias)
{
    __m512 acc[STREAM_M_MAX][STREAM_N];
    for (int r = 0; r < nr; r++) {
        const uint16_t *wr = w + (size_t)r * ldw;
        for (int m0 = 0; m0 < M; m0 += STREAM_MR) {
            const uint16_t *x0 = xb + (size_t)m0 * ldx;
            int mr = M - m0 < STREAM_MR ? M - m0 : STREAM_MR;
            __m512(*acc0)[STREAM_N] = acc + m0;
            switch (mr) {
                STREAM_CASE(1) STREAM_CASE(2) STREAM_CASE(3) STREAM_CASE(4)
                STREAM_CASE(5) STREAM_CASE(6) STREAM_CASE(7) STREAM_CASE(8)
            default:
                __builtin_unreachable();
            }
        }
    }
    store_panel(M, acc, nr, out, ldo, bias);
}

/* ---- fast path, one row of x, weights packed losslessly (bf16pack.h) ---- */

/* The 32 bf16 of chunk c of packed row `row`: decoded from the planes, or an escape block's
 * copy. The same bits either way. Needs AVX-512 VBMI (vpmultishiftqb). */
__attribute__((target("avx512vbmi"), always_inline)) static inline __m512i
packed_chunk(const struct ll_bf16p *pk, size_t row, int c, __m512i ctl)
{
    const size_t blk = row * (size_t)pk->nbk + (size_t)c;
    const uint16_t base = pk->base[blk];
    if (__builtin_expect(base == LL_BF16P_ESCAPE, 0)) {
        uint32_t e;
        memcpy(&e, pk->sm + blk * 32, sizeof e);
        return _mm512_loadu_si512(pk->esc + (size_t)e * LL_BF16P_BLOCK);
    }
    /* sign and mantissa: sign-extended, so bit 7 (the sign) also lands in bit 15 */
    __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(pk->sm + blk * 32)));
    /* codes: word q of the 16 bytes (elements 4q .. 4q+3, 4 bits each) into qword q, then each
     * element's nibble moved to bits 7..10 of its word */
    __m512i e = _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)(pk->code + blk * 16)));
    e = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl, e), _mm512_set1_epi16(0x0780));
    e = _mm512_add_epi16(e, _mm512_set1_epi16((short)base));
    /* (a & 0x807f) | e: sign, exponent, mantissa */
    return _mm512_ternarylogic_epi32(a, e, _mm512_set1_epi16((short)0x807f), 0xec);
}

/* The vpmultishiftqb control of packed_chunk: in each qword, the low byte of word t takes the
 * 8 bits ending at bit 4t (its bit 7 = the code's bit 0), the high byte those from bit 4t + 1. */
__attribute__((target("avx512vbmi"), always_inline)) static inline __m512i packed_ctl(void)
{
    uint8_t c[64];
    for (int q = 0; q < 8; q++)
        for (int t = 0; t < 4; t++) {
            c[8 * q + 2 * t] = (uint8_t)((4 * t - 7) & 63);
            c[8 * q + 2 * t + 1] = (uint8_t)(4 * t + 1);
        }
    return _mm512_loadu_si512(c);
}

/* stream_panel for one row of x (job->packed is set only then) and rows [n, n + nr) of a packed
 * matrix: each row's chunks in the order of stream_row. */
__attribute__((target("avx512vbmi"))) static void
stream_panel_packed(const uint16_t *xb, const struct ll_bf16p *pk, int n, int nfull,
                    __mmask32 tail, int nr, float *out, const float *bias)
{
    const __m512i ctl = packed_ctl();
    __m512 acc[1][STREAM_N];
    for (int r = 0; r < nr; r++) {
        const size_t row = (size_t)(n + r);
        __m512 a = _mm512_setzero_ps();
        for (int c = 0; c < nfull; c++)
            a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_load_si512(xb + (size_t)c * LL_MM_CHUNK_FAST),
                                 (__m512bh)packed_chunk(pk, row, c, ctl));
        if (tail) {
            size_t k = (size_t)nfull * LL_MM_CHUNK_FAST;
            a = _mm512_dpbf16_ps(
                a, (__m512bh)_mm512_load_si512(xb + k),
                (__m512bh)_mm512_maskz_loadu_epi16(tail, pk->raw + row * (size_t)pk->k + k));
        }
        acc[0][r] = a;
    }
    store_panel(1, acc, nr, out, 0, bias);
}

/* ---- exact path: f32 × widened weights ---- */

/* Sixteen weights widened to f32 (exactly); `mask` selects the ones inside K. */
INLINE __m512 load_w16(const void *w, size_t i, const enum ll_dtype wt, const int masked,
                       __mmask16 mask)
{
    if (wt == LL_F32)
        return masked ? _mm512_maskz_loadu_ps(mask, (const float *)w + i)
                      : _mm512_loadu_ps((const float *)w + i);
    __m256i h = masked ? _mm256_maskz_loadu_epi16(mask, (const uint16_t *)w + i)
                       : _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (wt == LL_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One chunk of 16 for every accumulator of the tile; `masked` only for the K tail. */
INLINE void step_exact(__m512 *acc, const int mr, const int nr, const enum ll_dtype wt,
                       const float *x, size_t ldx, const void *w, size_t ldw, size_t k,
                       const int masked, __mmask16 tail)
{
    __m512 wv[GEMV_N > TILE_N ? GEMV_N : TILE_N];
#pragma GCC unroll 8
    for (int n = 0; n < nr; n++)
        wv[n] = load_w16(w, (size_t)n * ldw + k, wt, masked, tail);
#pragma GCC unroll 4
    for (int m = 0; m < mr; m++) {
        __m512 xv = masked ? _mm512_maskz_loadu_ps(tail, x + (size_t)m * ldx + k)
                           : _mm512_loadu_ps(x + (size_t)m * ldx + k);
#pragma GCC unroll 8
        for (int n = 0; n < nr; n++)
            acc[m * nr + n] = _mm512_fmadd_ps(xv, wv[n], acc[m * nr + n]);
    }
}

INLINE void tile_exact(const int mr, const int nr, const enum ll_dtype wt, const float *x,
                       size_t ldx, const void *w, size_t ldw, int nfull, __mmask16 tail,
                       float *out, size_t ldo, const float *bias, struct prefetch pf)
{
    __m512 acc[MAX_ACC];
#pragma GCC unroll 32
    for (int i = 0; i < mr * nr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int c = 0; c < nfull; c++) {
        step_exact(acc, mr, nr, wt, x, ldx, w, ldw, (size_t)c * LL_MM_CHUNK_EXACT, 0, 0);
        prefetch_step(&pf);
    }
    if (tail)
        step_exact(acc, mr, nr, wt, x, ldx, w, ldw, (size_t)nfull * LL_MM_CHUNK_EXACT, 1, tail);
    tile_store(acc, mr, nr, out, ldo, bias);
}

#define EXACT_CASE(MR, NR)                                                                     \
    case (MR) * 16 + (NR):                                                                     \
        tile_exact(MR, NR, WT, x, ldx, w, ldw, nfull, tail, out, ldo, bias, pf);               \
        break;

#define EXACT_ANY(NAME, WT_)                                                                   \
    static void NAME(int mr, int nr, const float *x, size_t ldx, const void *w, size_t ldw,    \
                     int nfull, __mmask16 tail, float *out, size_t ldo, const float *bias,     \
                     struct prefetch pf)                                                       \
    {                                                                                          \
        const enum ll_dtype WT = WT_;                                                          \
        switch (mr * 16 + nr) {                                                                \
            EXACT_CASE(1, 1) EXACT_CASE(1, 2) EXACT_CASE(1, 3) EXACT_CASE(1, 4)                \
            EXACT_CASE(1, 5) EXACT_CASE(1, 6) EXACT_CASE(1, 7) EXACT_CASE(1, 8)                \
            EXACT_CASE(2, 1) EXACT_CASE(2, 2) EXACT_CASE(2, 3) EXACT_CASE(2, 4)                \
            EXACT_CASE(2, 5) EXACT_CASE(2, 6)                                                  \
            EXACT_CASE(3, 1) EXACT_CASE(3, 2) EXACT_CASE(3, 3) EXACT_CASE(3, 4)                \
            EXACT_CASE(3, 5) EXACT_CASE(3, 6)                                                  \
            EXACT_CASE(4, 1) EXACT_CASE(4, 2) EXACT_CASE(4, 3) EXACT_CASE(4, 4)                \
            EXACT_CASE(4, 5) EXACT_CASE(4, 6)                                                  \
        default:                                                                               \
            __builtin_unreachable();                                                           \
        }                                                                                      \
    }

EXACT_ANY(tile_exact_bf16, LL_BF16)
EXACT_ANY(tile_exact_f16, LL_F16)
EXACT_ANY(tile_exact_f32, LL_F32)

/* ---- the blocked loops ---- */

void ll_mm_kernel_avx512(const struct ll_mm_job *j, int m0, int m1, int n0, int n1, int ith)
{
    (void)ith;
    const size_t K = (size_t)j->K, ldo = (size_t)j->N;
    const size_t esize = ll_dtype_size(j->wtype);
    const int chunk = j->fast ? LL_MM_CHUNK_FAST : LL_MM_CHUNK_EXACT;
    const int nfull = j->K / chunk, rem = j->K % chunk;
    const size_t x_row_bytes = j->fast ? j->xb_stride * 2 : K * 4;
    const size_t w_row_bytes = K * esize;
    int block = (int)(x_block_bytes / (x_row_bytes ? x_row_bytes : 1));
    block = block < TILE_M ? TILE_M : block / TILE_M * TILE_M;

    if (j->fast && (m1 - m0 == 1 || (m1 - m0 <= STREAM_M_MAX &&
                                      (size_t)(m1 - m0) * j->xb_stride * 2 <= stream_x_bytes))) {
        const __mmask32 tail = rem ? (__mmask32)((1u << rem) - 1) : 0;
        for (int n = n0; n < n1; n += STREAM_N) {
            const int nr = min_int(STREAM_N, n1 - n);
            const uint16_t *x0 = j->xb + (size_t)m0 * j->xb_stride;
            float *out = j->out + (size_t)m0 * ldo + (size_t)n;
            const float *bias = j->bias ? j->bias + n : NULL;
            if (j->packed)
                stream_panel_packed(x0, j->packed, n, nfull, tail, nr, out, bias);
            else
                stream_panel(m1 - m0, x0, j->xb_stride, (const uint16_t *)j->w + (size_t)n * K, K,
                             nfull, tail, nr, out, ldo, bias);
        }
        return;
    }
    for (int mb = m0; mb < m1; mb += block) {
        const int mb_end = min_int(m1, mb + block);
        const int panel = mb_end - mb == 1 ? GEMV_N : TILE_N;
        const int tiles = (mb_end - mb + TILE_M - 1) / TILE_M;
        for (int n = n0; n < n1; n += panel) {
            const int nr = min_int(panel, n1 - n);
            const char *wp = (const char *)j->w + (size_t)n * w_row_bytes;
            /* the next panel of this thread, prefetched a share per tile */
            const int next_nr = min_int(panel, n1 - n - nr);
            const size_t next_lines = ((size_t)next_nr * w_row_bytes + 63) / 64;
            const char *next = wp + (size_t)nr * w_row_bytes;
            if (j->fast) {
                fast_panel(mb_end - mb, nr, j->xb + (size_t)mb * j->xb_stride, j->xb_stride,
                           (const uint16_t *)wp, K, nfull, rem ? (__mmask32)((1u << rem) - 1) : 0,
                           j->out + (size_t)mb * ldo + (size_t)n, ldo, j->bias ? j->bias + n : NULL,
                           next, next_lines, mb_end - mb == 1);
                continue;
            }
            for (int m = mb, t = 0; m < mb_end; m += TILE_M, t++) {
                const int mr = min_int(TILE_M, mb_end - m);
                float *out = j->out + (size_t)m * ldo + (size_t)n;
                const float *bias = j->bias ? j->bias + n : NULL;
                struct prefetch pf = prefetch_share(next, next_lines, (size_t)tiles, (size_t)t,
                                                    nfull > 0 ? nfull : 1, mb_end - mb == 1);
                const float *x = j->x + (size_t)m * K;
                __mmask16 tail = rem ? (__mmask16)((1u << rem) - 1) : 0;
                switch (j->wtype) {
                case LL_BF16:
                    tile_exact_bf16(mr, nr, x, K, wp, K, nfull, tail, out, ldo, bias, pf);
                    break;
                case LL_F16:
                    tile_exact_f16(mr, nr, x, K, wp, K, nfull, tail, out, ldo, bias, pf);
                    break;
                case LL_F32:
                    tile_exact_f32(mr, nr, x, K, wp, K, nfull, tail, out, ldo, bias, pf);
                    break;
                }
            }
        }
    }
}

void ll_mm_round_avx512(const struct ll_mm_job *j, int m0, int m1)
{
    const int K = j->K;
    for (int m = m0; m < m1; m++) {
        const float *xr = j->x + (size_t)m * (size_t)K;
        uint16_t *d = (uint16_t *)j->xb + (size_t)m * j->xb_stride;
        int k = 0;
        for (; k + 32 <= K; k += 32) {
            __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + k + 16), _mm512_loadu_ps(xr + k));
            _mm512_store_si512(d + k, (__m512i)h);
        }
        for (; (size_t)k < j->xb_stride; k += 32) { /* tail and zero padding */
            int r = K - k;
            __mmask16 lo = r >= 16 ? 0xffff : r > 0 ? (__mmask16)((1u << r) - 1) : 0;
            __mmask16 hi = r >= 32 ? 0xffff : r > 16 ? (__mmask16)((1u << (r - 16)) - 1) : 0;
            __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, xr + k + 16),
                                              _mm512_maskz_loadu_ps(lo, xr + k));
            _mm512_store_si512(d + k, (__m512i)h);
        }
    }
}
