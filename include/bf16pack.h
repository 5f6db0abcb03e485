/*
 * bf16pack.h: bf16 weights packed losslessly to 12.5 bits a weight, so that decode, which is
 * bound by the bytes of weights it reads, reads 22 % fewer (`--quant bf16p`; matmul.h's
 * ll_matmul_packed).
 *
 * Why it is lossless: a bf16 value is sign (1 bit), exponent (8) and mantissa (7). Within a
 * block of 32 consecutive weights of a row the exponents of trained (and random) weights span
 * far fewer than 16 values, so each is stored as a 4-bit offset above the block's lowest
 * exponent `lo` = max(exponent) − 15 (clamped at 0). A block holding an exponent below lo (a
 * value 2^15 times smaller than the block's largest; an exact zero beside non-zero values) is an
 * escape block: the packed planes hold nothing for it and readers take its 32 values from the
 * bf16 matrix, which stays available (ll_bf16p.raw). Either way a reader gets back the exact
 * bf16 bits, so every result computed from a packed matrix is the one computed from the bf16
 * matrix (matmul.h's guarantees hold unchanged).
 *
 * Layout, for an (n, k) bf16 matrix, nbk = k / 32 whole blocks a row (the last k % 32 elements of
 * a row are never packed: readers take them from raw), row r, block b, element i (0..31):
 *   sm   (n, nbk, 32) bytes: byte i = sign << 7 | mantissa (the bf16's bits 15 and 6..0)
 *   code (n, nbk, 16) bytes: byte j holds element 2j's code in its low nibble, 2j+1's in its high
 *   base (n, nbk) uint16: lo << 7 (the exponent field's place in a bf16), or LL_BF16P_ESCAPE
 * so element i's bf16 = (sm & 0x80) << 8 | (base + (code << 7)) | (sm & 0x7f). Each plane is one
 * contiguous row after another: decode reads three forward streams.
 */
#ifndef LLAISYS_BF16PACK_H
#define LLAISYS_BF16PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LL_BF16P_BLOCK 32
#define LL_BF16P_ESCAPE 0xffffu

struct ll_bf16p {
    const uint16_t *raw; /* (n, k) the bf16 matrix (escape blocks, the k % 32 tail) */
    uint8_t *sm;         /* (n, nbk, 32) */
    uint8_t *code;       /* (n, nbk, 16) */
    uint16_t *base;      /* (n, nbk) */
    int n, k, nbk;
};

/* Bytes of the three planes of an (n, k) matrix, each rounded up to 64 (one allocation). */
size_t ll_bf16p_bytes(int n, int k);
/* Point p at the planes carved from mem (ll_bf16p_bytes(n, k) bytes, 64-byte aligned). */
void ll_bf16p_init(struct ll_bf16p *p, const uint16_t *raw, int n, int k, void *mem);
/* Pack rows [r0, r1) of p->raw into p's planes. Returns the number of escape blocks. */
size_t ll_bf16p_pack_rows(struct ll_bf16p *p, int r0, int r1);
/* Element k of row r as bf16, read from the packed planes (raw for escapes and the tail). */
uint16_t ll_bf16p_get(const struct ll_bf16p *p, int r, int k);

#endif
