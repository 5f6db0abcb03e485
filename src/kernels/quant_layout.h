/*
 * quant_layout.h: private to the kernels: where an element and a scale of a q8_0 / q4_0 / q4_k
 * matrix live in its planes (the formulas of quant.h, "Byte offsets"), for the quantizers and
 * the scalar kernel (the SIMD kernels walk the same layout 64 bytes at a time), and the SIMD
 * quantizer.
 */
#ifndef LLAISYS_QUANT_LAYOUT_H
#define LLAISYS_QUANT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

/* 64-byte steps per block of a group: 8 (q8_0, 16 rows × 4 int8) or 4 (q4_0 and q4_k, 16 rows
 * × 8 nibbles). */
static inline int ll_q_steps(enum ll_qtype t)
{
    return t == LL_Q8_0 ? 8 : 4;
}

/* q4_k: super-blocks per row of nb blocks. */
static inline int ll_qk_nsb(int nb)
{
    return (nb + LL_QK_BLOCKS - 1) / LL_QK_BLOCKS;
}

/* q4_k: byte offset in the d plane of super-block B of the group of row n (nsb per row); its d
 * (f16) of row n is at + 2·(n % 16), dmin at + 32 + 2·(n % 16), code word t at
 * + 64 + 64t + 4·(n % 16). */
static inline size_t ll_qk_sb_offset(int nsb, int n, int B)
{
    return ((size_t)(n / LL_QGROUP) * (size_t)nsb + (size_t)B) * LL_QK_SB_BYTES;
}

/* q4_k: code i (0..15: sc_i for i < 8, m_{i-8} for i >= 8) from a row's three code words. */
static inline int ll_qk_code(const uint32_t c[3], int i)
{
    if (i < 15)
        return (int)(c[i / 5] >> (6 * (i % 5))) & 63;
    return (int)(c[0] >> 30 | (c[1] >> 30) << 2 | (c[2] >> 30) << 4);
}

/* q4_k: the three code words of a row holding codes[0..16). */
static inline void ll_qk_pack_codes(uint32_t c[3], const uint8_t codes[16])
{
    c[0] = c[1] = c[2] = 0;
    for (int i = 0; i < 15; i++)
        c[i / 5] |= (uint32_t)(codes[i] & 63) << (6 * (i % 5));
    for (int t = 0; t < 3; t++)
        c[t] |= (uint32_t)((codes[15] >> (2 * t)) & 3) << 30;
}

/* q4_k: row n's code words of super-block B, read from the d plane. */
static inline void ll_qk_read_codes(uint32_t c[3], const uint8_t *dplane, int nsb, int n, int B)
{
    const uint8_t *p = dplane + ll_qk_sb_offset(nsb, n, B) + 64 + 4 * (size_t)(n % LL_QGROUP);
    for (int t = 0; t < 3; t++)
        memcpy(&c[t], p + 64 * t, 4);
}

/* Index in the d plane of the scale of block b of row n (nb blocks per row). */
static inline size_t ll_q_d_index(int nb, int n, int b)
{
    return ((size_t)(n / LL_QGROUP) * (size_t)nb + (size_t)b) * LL_QGROUP + (size_t)(n % LL_QGROUP);
}

/* Offset in the qs plane of the byte holding element i (0..31) of block b of row n (q4_0: in
 * the low nibble if i < 16, else in the high nibble). */
static inline size_t ll_q_offset(enum ll_qtype t, int nb, int n, int b, int i)
{
    size_t gb = (size_t)(n / LL_QGROUP) * (size_t)nb + (size_t)b, r = (size_t)(n % LL_QGROUP);
    size_t step = t == LL_Q8_0 ? (size_t)(i / 4) : (size_t)((i % 16) / 4);
    return (gb * (size_t)ll_q_steps(t) + step) * 64 + 4 * r + (size_t)(i % 4);
}

/* q4_k: candidate roundings per block, and the numerator of candidate t's scale (quant.c,
 * qk_fit): 15 + (t − 10) / 10, rounded as written (f32 multiply, then add). */
#define LL_QK_CANDIDATES 20
static inline float ll_qk_candidate(int t)
{
    return 15.0f + (float)(t - 10) * 0.1f;
}

/* q4_k on G rows at once, lane r holding row n0 + r, with xt the G rows' blocks transposed
 * (element i of lane r at xt[i·G + r]): G = 16 on AVX-512 (quant_avx512.c), 8 on AVX2
 * (quant_avx2.c).
 * fit: quant.c's block fit (qk_fit) of each lane's block, all finite, into a[r], b[r], bit for
 * bit the reference's.
 * encode: the nibbles of block blk of rows n0 .. n0 + G (n0 a multiple of G; nb blocks a row)
 * into the qs plane: element i of lane r is round((xt[i·G + r] + dm[r]) / ds[r]), half away
 * from zero, clamped to [0, 15], and 0 where ds[r] = 0: the bytes of quant.c's qk_encode. */
void ll_qk_fit_avx512(const float *xt, float *a, float *b);
void ll_qk_encode_avx512(uint8_t *qs, int nb, int n0, int blk, const float *xt, const float *ds,
                         const float *dm);
void ll_qk_fit_avx2(const float *xt, float *a, float *b);
void ll_qk_encode_avx2(uint8_t *qs, int nb, int n0, int blk, const float *xt, const float *ds,
                       const float *dm);

/* The AVX-512 quantizer (quant_avx512.c): rows [n0, n1) of src (N, K) into the planes, the same
 * bytes as the reference block for block. On a block that cannot be quantized (a value not
 * finite, or a scale beyond f16) returns false with its row and block, the blocks before it
 * written. */
bool ll_quantize_rows_avx512(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                             enum ll_dtype stype, int K, int n0, int n1, int *bad_row,
                             int *bad_block);
/* The same contract for q8_0 and q4_0 on AVX2 (quant_avx2.c). */
bool ll_quantize_rows_avx2(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                           enum ll_dtype stype, int K, int n0, int n1, int *bad_row,
                           int *bad_block);

#endif
