/*
 * matmul.h: out = x · Wᵀ + bias, the op that dominates the forward pass.
 *
 *   out  (M, N) f32, caller-owned, not overlapping the inputs
 *   x    (M, K) f32 activations, row-major
 *   w    (N, K) weights in `wtype` (bf16, f16 or f32), row-major (the Hugging Face Linear layout,
 *        used as is: weights may be a read-only mmap; no packing, no alignment needed)
 *   bias (N) f32 or NULL
 *
 * Math modes:
 *   LL_MATH_EXACT: activations stay f32, weights widened to f32 (exactly), f32 fused multiply-add.
 *   LL_MATH_FAST:  for bf16 weights, activations rounded to bf16 (round-to-nearest-even) once per
 *                  call and the products are bf16×bf16 accumulated in f32 with the semantics of
 *                  AVX-512 BF16 `vdpbf16ps` (per lane: odd pair then even pair, each one fused
 *                  multiply-add; denormal inputs read as zero, denormal results flushed to zero),
 *                  or on the AMX variant those of `TDPBF16PS` ("Tile order" below).
 *                  f16 and f32 weights take the exact path in this mode.
 *
 * Reduction order (the lanes order: the exact path of every variant, and the fast path of every
 * variant but the AMX ones; which is what the guarantees below rest on): out[m][n] is a sum over
 * 16 f32 lanes, each zero-initialised and accumulating its own slice of K in increasing k: the
 * exact path in chunks of 16 (lane i takes k ≡ i mod 16), the fast path in chunks of 32 (lane i
 * takes the pair 2i, 2i+1), the last chunk zero-padded; then the lanes are added as the tree
 * ((l[i] + l[i+8]) → + [i+4] → + [i+2] → + [i+1]), then bias[n] is added.
 *
 * Tile order (the fast path of the AMX variant, which serves every M so that no row ever meets
 * the other order): AMX's TDPBF16PS as the Intel SDM specifies it, one instruction per chunk of
 * 32 of K (the last zero-padded): an even and an odd f32 sum from zero, each taking the products
 * of its elements of the chunk's pairs in increasing k by fused multiply-adds, then acc = acc +
 * (even + odd), chunk after chunk from acc = 0; then bias[n] is added. Denormals as above.
 *
 * Determinism: out[m][n] depends only on x[m], w[n], bias[n], the math mode and the variant; it
 * is bit-identical whatever M is, where row m sits in the batch, and how many threads run
 * (threads split over N, or over M when N is small, never over K). On the exact path the scalar,
 * AVX2, AVX-512 and AMX variants agree bit for bit; on the fast path the scalar and AVX-512 ones
 * too, and the AVX2 one except that it does not flush denormal products and sums (so it can
 * differ where such tiny values arise); the AMX ones agree with each other (with the scalar
 * ll_matmul_ref_tiles) and differ from the others in the last bits.
 *
 * Scratch: the fast path with bf16 weights rounds x once into a bf16 copy in caller-owned scratch
 * (sized by ll_matmul_scratch_bytes for the largest M and K and the thread count the caller will
 * use, allocated once, e.g. at runtime creation; each thread also gets room there for a panel of
 * W), so ll_matmul never allocates and cannot fail. Work is split over the
 * pool's threads; pool may be NULL (single thread). Not reentrant on one pool (see pool.h), nor
 * on one scratch buffer.
 */
#ifndef LLAISYS_MATMUL_H
#define LLAISYS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>

#include "bf16pack.h"
#include "dtype.h"
#include "pool.h"

enum ll_math {
    LL_MATH_EXACT,
    LL_MATH_FAST,
};

/* Bytes of scratch that ll_matmul calls with M <= max_m and K <= max_k on a pool of at most
 * n_threads threads need (a multiple of 64; max_m, max_k >= 0, n_threads >= 1). */
size_t ll_matmul_scratch_bytes(int max_m, int max_k, int n_threads);

/* out = x · Wᵀ + bias (shapes above); M, N, K >= 0. scratch: 64-byte aligned, scratch_bytes >=
 * ll_matmul_scratch_bytes(M, K, ll_pool_size(pool)), caller-owned; only the fast path with bf16 weights uses it (it
 * may be NULL, 0 for any other call). Cannot fail. */
void ll_matmul(float *out, const float *x, const void *w, enum ll_dtype wtype, const float *bias,
               int M, int N, int K, enum ll_math math, void *scratch, size_t scratch_bytes,
               struct ll_pool *pool);
/* ll_matmul of w->raw (bf16, w->n × w->k): the same result, bit for bit. Where the AVX-512
 * variant runs on a CPU with VBMI, calls with one row of x (single-stream decode) in fast math
 * read the packed planes instead of w->raw (bf16pack.h: 22 % fewer bytes); every other call
 * reads w->raw. */
void ll_matmul_packed(float *out, const float *x, const struct ll_bf16p *w, const float *bias,
                      int M, enum ll_math math, void *scratch, size_t scratch_bytes,
                      struct ll_pool *pool);
/* Whether ll_matmul_packed reads the packed planes at all with the variant in use; if not,
 * *why (when non-NULL) says why. */
bool ll_matmul_reads_packed(const char **why);

/* The plain scalar reference for the same contract and the lanes order, single thread (used by
 * tests; slow). Its results equal the exact path of every variant bit for bit, and the fast path
 * of the AVX-512 variant bit for bit. */
void ll_matmul_ref(float *out, const float *x, const void *w, enum ll_dtype wtype,
                   const float *bias, int M, int N, int K, enum ll_math math);

/* The same for the fast path with bf16 weights in the tile order: the AMX variants' bits. */
void ll_matmul_ref_tiles(float *out, const float *x, const uint16_t *w, const float *bias, int M,
                         int N, int K);

/* Whether the amx variant may run here: the CPU has amx_bf16 and AVX-512 BF16 (its exact path
 * and round step), the tiles are ready (isa.h: CPU, OS, permission, probe), and the tiles sum a
 * check in the tile order bit for bit (matmul_kernels.h; Intel's own documents disagree on the
 * order, so the hardware is asked once, before dispatch could pick the variant; a CPU whose
 * tiles sum otherwise keeps bf16 on avx512bf16, with a warning on the log). When not, *why (may
 * be NULL) says why. Settled once; any thread. */
bool ll_matmul_tiles_ready(const char **why);

/* Whether the variant in use sums the fast path in the tile order (amx, amx-emul). */
bool ll_matmul_tile_order(void);

/* Name of the variant ll_matmul uses ("amx", "avx512bf16", "avx2", "scalar"): the best this CPU
 * runs within the cap of the environment variable LLAISYS_KERNEL=scalar|avx2|avxvnni|avx512|amx
 * (avxvnni caps matmul at avx2; amx needs amx_bf16 and the tile permission on top of AVX-512
 * BF16), the kernels' one dispatch knob (it caps ops and attention the same way; a level the CPU
 * lacks falls back to the best one it has, with a warning on the log when it was asked for).
 * Chosen once. */
const char *ll_matmul_variant(void);

/* Switch variant by name ("scalar", "avx2", "avx512" or "avx512bf16", "amx", or "amx-emul": the
 * AMX variant on tiles emulated in C, any CPU, never chosen by dispatch), for tests and
 * benchmarks; not safe while another thread is inside ll_matmul. Returns false, changing nothing,
 * for an unknown name or a variant this CPU cannot run. */
bool ll_matmul_set_variant(const char *name);

#endif
