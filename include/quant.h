/*
 * quant.h: the block weight formats q8_0, q4_0 and q4_k: their layout in memory (which is also
 * their layout on disk, so a quantized model maps with no work at start-up), quantizing
 * f32/bf16/f16 weights into them, and reading them back.
 *
 * The values. A weight matrix W (N, K), K a multiple of 32, is cut along K into blocks of 32:
 *   q8_0: 32 int8 q in [-127, 127], value = d · q          (quantizer: d = max|x| / 127)
 *   q4_0: 32 4-bit q in [0, 15],    value = d · (q − 8)    (quantizer: d = m / −8, m the element
 *         of largest magnitude with its sign, so m itself is stored exactly as q = 0)
 *         with one f16 scale d per block. Quantizers round x / d to nearest (ties away from
 *         zero) with d the stored f16 scale, then clamp.
 *   q4_k: blocks are the sub-blocks of super-blocks of 8 blocks (256 elements; the last
 *         super-block of a row holds the K/32 mod 8 remaining blocks when K is not a multiple of
 *         256). Super-block B has an f16 scale d and an f16 min scale dmin; its block j has a
 *         6-bit scale code sc_j and a 6-bit min code m_j (0..63); an element is a 4-bit q in
 *         [0, 15] with value = (d · sc_j) · q − dmin · m_j  (d · sc_j and dmin · m_j are exact in
 *         f32; the value is rounded once). Quantizer (quant.c; on AVX-512 the block fits of 16
 *         rows run at once, the same bytes): per block, the least-squares (scale a ≥ 0,
 *         min b ≥ 0) of x ≈ a · q − b over 20 candidate roundings; d = max_j a_j / 63,
 *         dmin = max_j b_j / 63 (to f16), sc_j = round(a_j / d), m_j = round(b_j / dmin); then
 *         q = round((x + dmin · m_j) / (d · sc_j)) clamped. 4.5 bits per weight when K is a
 *         multiple of 256.
 *
 * The layout: rows are interleaved in groups of LL_QGROUP = 16, because the integer dot-product
 * kernels (qmatmul.h) then compute 16 output rows per vector instruction with one activation
 * value broadcast, and each block's sum lands whole in one lane: no horizontal reductions, and
 * the per-block f32 work (convert, scale, FMA) is shared by 16 rows. Measured against plain
 * row-major planes (qs (N, K), d (N, K/32), the per-block f32 work done per output element as
 * llama.cpp does): q8_0, M = 16 and 128, 1536 x 1536, one Xeon core (AVX-512 VNNI), ~70 GOP/s
 * row-major against ~330 interleaved. Decode (M = 1) streams either at memory speed.
 * With G = ceil(N / 16) groups (rows N .. 16·G−1 are padding, all bytes zero), nb = K / 32 and
 * (q4_k) nsb = ceil(nb / 8) super-blocks:
 *
 *   d  plane, q8_0 / q4_0: (G, nb, 16) f16 — d[g][b][r] is the scale of block b of row 16g + r.
 *   d  plane, q4_k: (G, nsb, 256) bytes — for group g, super-block B, 256 bytes:
 *             bytes 0..31    d of rows 16g + 0 .. 16g + 15 (f16 each)
 *             bytes 32..63   dmin of the 16 rows (f16 each)
 *             bytes 64..255  three 64-byte steps t = 0, 1, 2 of 16 rows × 4 bytes: row r's
 *                            little-endian 32-bit word c_t at bytes 64 + 64t + 4r.
 *           A row's 16 codes, code i = sc_i (i < 8) or m_{i−8} (i ≥ 8), are packed five to a
 *           word: code i < 15 is bits 6·(i mod 5) .. +5 of word c_{i/5}; code 15 (m_7) is split
 *           over the top two bits of the three words (bits 0-1 in c_0, 2-3 in c_1, 4-5 in c_2),
 *           so each code but one is one shift and one mask. Codes of blocks past the end of a
 *           short last super-block are 0.
 *   qs plane: (G, nb, S, 16, 4) bytes — for group g, block b, step s: 16 rows × 4 bytes, row
 *             16g + r at bytes 4r .. 4r+3 of the 64-byte step.
 *     q8_0: S = 8; the 4 bytes of step s are the int8 q of elements 4s .. 4s+3 of the block.
 *     q4_0, q4_k: S = 4; the block's 16 bytes are packed as in llama.cpp's q4_0 (byte j holds
 *           element j in its low nibble and element j+16 in its high nibble), and step s holds
 *           bytes 4s .. 4s+3: elements 4s .. 4s+3 (low nibbles) and 4s+16 .. 4s+19 (high).
 *   Bytes: qs = 16·G · K (q8_0) or 16·G · K/2 (q4_0, q4_k); d = 16·G · nb · 2 (q8_0, q4_0) or
 *   16·G · nsb · 16 (q4_k). Per weight that is 8.5 bits (q8_0) and 4.5 bits (q4_0; q4_k when
 *   K % 256 == 0), plus padding for N not a multiple of 16.
 *
 * Byte offsets, row n = 16g + r, element k = 32b + i of that row:
 *   q8_0 q:  ((g·nb + b)·8 + i/4)·64 + 4r + i%4
 *   q4_0, q4_k q:  ((g·nb + b)·4 + (i%16)/4)·64 + 4r + i%4, low nibble if i < 16, else high
 *   d (q8_0, q4_0):  ((g·nb + b)·16 + r) · 2
 *   q4_k, super-block B:  d at (g·nsb + B)·256 + 2r, dmin 32 bytes later, word c_t at
 *            (g·nsb + B)·256 + 64 + 64t + 4r
 * Rows [16a, 16b) occupy contiguous slices of both planes (qs from byte 16a · K or 16a · K/2, d
 * from byte 16a times the d plane's bytes per row), laid out exactly as the planes of a
 * (16b − 16a, K) matrix of those rows, so a matrix can be quantized, written or split in pieces
 * of whole groups.
 * A model file stores the two planes as two tensors (integer data + scales; model_bind.h).
 *
 * All functions are pure and thread-safe; callers own every buffer.
 */
#ifndef LLAISYS_QUANT_H
#define LLAISYS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "errors.h"

#define LL_QBLOCK 32 /* elements of K per block (one scale each; q4_k: one scale code each) */
#define LL_QK_BLOCKS 8 /* q4_k: blocks per super-block */
#define LL_QK_SB_BYTES 256 /* q4_k: bytes of one super-block of one group in the d plane */
#define LL_QGROUP 16 /* rows interleaved per group */
/* The name of this layout in a quantized model's config.json (quantization_config.layout; see
 * model_bind.h for the files). A new layout gets a new name, so old readers refuse new files. */
#define LL_QLAYOUT "rows16-blocks32"

enum ll_qtype {
    LL_Q8_0,
    LL_Q4_0,
    LL_Q4_K,
};

/* A quantized weight matrix (N, K): a read-only view of its two planes (see above), which the
 * caller owns (e.g. an mmap of the model file). Made by ll_qweight_init, which validates it. */
struct ll_qweight {
    enum ll_qtype type;
    int n, k;          /* N output rows, K inputs (K % 32 == 0) */
    const uint8_t *qs; /* ll_qweight_qs_bytes(type, n, k) bytes */
    const uint16_t *d; /* the d plane, ll_qweight_d_bytes(type, n, k) bytes, 2-byte aligned */
};

/* "q8_0", "q4_0" or "q4_k". */
const char *ll_qtype_name(enum ll_qtype t);

/* The type named s ("q8_0", "q4_0" or "q4_k"). Returns false, leaving *out untouched, for any
 * other. */
bool ll_qtype_parse(const char *s, enum ll_qtype *out);

/* Checks a shape: LL_OK if N >= 1, K >= 32 and K % 32 == 0; otherwise LL_EINVAL with a message
 * naming the bad dimension. */
enum ll_status ll_qweight_check_shape(int N, int K, struct ll_err *err);

/* Bytes of the qs plane of an (N, K) matrix of type t (shape valid per ll_qweight_check_shape). */
size_t ll_qweight_qs_bytes(enum ll_qtype t, int N, int K);

/* Bytes of the d plane of an (N, K) matrix of type t (shape valid per ll_qweight_check_shape). */
size_t ll_qweight_d_bytes(enum ll_qtype t, int N, int K);

/* Fills *w to view planes qs (qs_bytes long) and d (d_bytes long), both borrowed, after checking
 * the shape and that the sizes are exactly what the shape needs. d must be 2-byte aligned.
 * Returns LL_OK, or LL_EINVAL (bad shape, wrong plane size or alignment; the message names it),
 * leaving *w untouched. */
enum ll_status ll_qweight_init(struct ll_qweight *w, enum ll_qtype t, int N, int K,
                               const void *qs, size_t qs_bytes, const void *d, size_t d_bytes,
                               struct ll_err *err);

/* Quantizes rows [n0, n1) of src (N, K) in dtype stype (row-major) into the planes qs and d of an
 * (N, K) matrix of type t (ll_qweight_qs_bytes / ll_qweight_d_bytes bytes, caller-owned; d
 * 2-byte aligned). n0
 * must be a multiple of 16 and n1 a multiple of 16 or N, so that calls on disjoint ranges write
 * disjoint bytes (run them on several threads to quantize in parallel); the call that ends at N
 * also zeroes the padding rows of the last group. Returns LL_OK, or LL_EINVAL (bad shape or
 * range, or a non-finite value or a block whose scale overflows f16; the message names the row
 * and block); rows before the failing block are written. */
enum ll_status ll_quantize_rows(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                                enum ll_dtype stype, int N, int K, int n0, int n1,
                                struct ll_err *err);

/* The quantizer ll_quantize_rows uses: "avx512" (when the CPU has AVX-512 and LLAISYS_KERNEL
 * allows it), else "avx2" (q8_0 and q4_0; q4_k then takes the reference), else "scalar", the
 * reference; all write the same bytes. Chosen once. */
const char *ll_quantize_variant(void);

/* Switch the quantizer ("scalar", "avx2" or "avx512"), for tests and benchmarks; not while another
 * thread quantizes. Returns false, changing nothing, for an unknown name or one the CPU cannot
 * run. */
bool ll_quantize_set_variant(const char *name);

/* Row n (0 <= n < w->n) of w dequantized into out (K floats, caller-owned): d · q (q8_0) or
 * d · (q − 8) (q4_0), each value exact in f32; (d · sc_j) · q − dmin · m_j (q4_k), computed in
 * f32 with that one final rounding. */
void ll_dequantize_row(float *out, const struct ll_qweight *w, int n);

#endif
