/*
 * quant_layout.h: private to the kernels: where an element and a scale of a q8_0 / q4_0 matrix
 * live in its planes (the formulas of quant.h, "Byte offsets"), for the quantizers and the scalar
 * kernel (the SIMD kernels walk the same layout 64 bytes at a time), and the SIMD quantizer.
 */
#ifndef LLAISYS_QUANT_LAYOUT_H
#define LLAISYS_QUANT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* 64-byte steps per block of a group: 8 (q8_0, 16 rows × 4 int8) or 4 (q4_0, 16 rows × 8 nibbles). */
static inline int ll_q_steps(enum ll_qtype t)
{
    return t == LL_Q8_0 ? 8 : 4;
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

/* The AVX-512 quantizer (quant_avx512.c): rows [n0, n1) of src (N, K) into the planes, the same
 * bytes as the reference block for block. On a block that cannot be quantized (a value not
 * finite, or a scale beyond f16) returns false with its row and block, the blocks before it
 * written. */
bool ll_quantize_rows_avx512(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                             enum ll_dtype stype, int K, int n0, int n1, int *bad_row,
                             int *bad_block);

#endif
