/*
 * bf16pack.h: bf16 weights packed losslessly to 12.5 bits a weight, so that single-stream
 * decode, which is bound by the bytes of weights it reads, reads 22 % fewer (`--quant bf16p`;
 * matmul.h's ll_matmul_packed).
 *
 * Why it is lossless: a bf16 value is sign (1 bit), exponent (8) and mantissa (7). Within a
 * block of 32 consecutive weights of a row the exponents of trained (and random) weights span
 * far fewer than 16 values, so each is stored as a 4-bit offset above the block's lowest
 * exponent `lo` = max(exponent) − 15 (clamped at 0). A block holding an exponent below lo (a
 * value 2^15 times smaller than the block's largest; an exact zero beside non-zero values) is an
 * escape block: its 32 bf16 values are copied to a side table (ll_bf16p.esc) and its sm slot
 * holds their index there. Either way a reader gets back the exact bf16 bits, so every result
 * computed from a packed matrix is the one computed from the bf16 matrix (matmul.h's guarantees
 * hold unchanged). Readers of the planes take the k % 32 tail of each row from the bf16 matrix.
 *
 * Layout, for an (n, k) bf16 matrix, nbk = k / 32 whole blocks a row (the last k % 32 elements of
 * a row are never packed: readers take them from raw), row r, block b, element i (0..31):
 *   sm   (n, nbk, 32) bytes: byte i = sign << 7 | mantissa (the bf16's bits 15 and 6..0)
 *   code (n, nbk, 16) bytes: byte j holds element 2j's code in its low nibble, 2j+1's in its high
 *   base (n, nbk) uint16: lo << 7 (the exponent field's place in a bf16), or LL_BF16P_ESCAPE
 * so element i's bf16 = (sm & 0x80) << 8 | (base + (code << 7)) | (sm & 0x7f); an escape block's
 * sm slot starts with the uint32 index e of its values at esc + 32e. Each plane is one
 * contiguous row after another: decode reads three forward streams.
 *
 * Packing takes two passes over row ranges, each of which may run on any thread: the planes and
 * a count of escape blocks (ll_bf16p_pack_rows), then, once the caller has given every range its
 * first index in a table it allocated, the escape blocks' copies (ll_bf16p_pack_escapes).
 */
#ifndef LLAISYS_BF16PACK_H
#define LLAISYS_BF16PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LL_BF16P_BLOCK 32
#define LL_BF16P_ESCAPE 0xffffu

struct ll_bf16p {
    const uint16_t *raw; /* (n, k) the bf16 matrix (the k % 32 tail; every call but M = 1) */
    const uint16_t *esc; /* (escapes, 32) the escape blocks' values (see above) */
    uint8_t *sm;         /* (n, nbk, 32) */
    uint8_t *code;       /* (n, nbk, 16) */
    uint16_t *base;      /* (n, nbk) */
    int n, k, nbk;
};

/* Bytes of the three planes of an (n, k) matrix, each rounded up to 64 (one allocation). */
size_t ll_bf16p_bytes(int n, int k);
/* Point p at the planes carved from mem (ll_bf16p_bytes(n, k) bytes, 64-byte aligned). */
void ll_bf16p_init(struct ll_bf16p *p, const uint16_t *raw, int n, int k, void *mem);
/* Pass 1: pack rows [r0, r1) of p->raw into p's planes. Returns their number of escape blocks. */
size_t ll_bf16p_pack_rows(struct ll_bf16p *p, int r0, int r1);
/* Pass 2: copy the escape blocks of rows [r0, r1), in row order, to table + 32·first onwards and
 * record their indices (first, first + 1, ...); p->esc must then be set to table. */
void ll_bf16p_pack_escapes(struct ll_bf16p *p, int r0, int r1, uint16_t *table, size_t first);
/* Both passes over all rows on this thread: returns the escape table (malloc'd, the caller
 * frees it after p), or NULL when out of memory. */
uint16_t *ll_bf16p_pack(struct ll_bf16p *p);
/* Element k of row r as bf16, read from the packed planes (the tail from raw). */
uint16_t ll_bf16p_get(const struct ll_bf16p *p, int r, int k);

#endif
