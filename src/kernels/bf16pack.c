/*
 * bf16pack.c: packing bf16 weights losslessly (see bf16pack.h for the format), and reading an
 * element back (the reference the tests compare the SIMD decode with).
 */
#include "bf16pack.h"

#include <stdlib.h>
#include <string.h>

static size_t round64(size_t n)
{
    return (n + 63) / 64 * 64;
}

size_t ll_bf16p_bytes(int n, int k)
{
    size_t blocks = (size_t)n * (size_t)(k / LL_BF16P_BLOCK);
    return round64(blocks * LL_BF16P_BLOCK) + round64(blocks * LL_BF16P_BLOCK / 2) +
           round64(blocks * sizeof(uint16_t));
}

void ll_bf16p_init(struct ll_bf16p *p, const uint16_t *raw, int n, int k, void *mem)
{
    size_t blocks = (size_t)n * (size_t)(k / LL_BF16P_BLOCK);
    char *c = mem;
    *p = (struct ll_bf16p){.raw = raw, .n = n, .k = k, .nbk = k / LL_BF16P_BLOCK};
    p->sm = (uint8_t *)c;
    c += round64(blocks * LL_BF16P_BLOCK);
    p->code = (uint8_t *)c;
    c += round64(blocks * LL_BF16P_BLOCK / 2);
    p->base = (uint16_t *)c;
}

static int exponent(uint16_t v)
{
    return (v >> 7) & 0xff;
}

/* One block: its planes' bytes and base, or false (nothing written but the base) if it must
 * escape. Branch-free over the elements, so the compiler vectorizes both loops. */
static bool pack_block(const uint16_t *w, uint8_t *sm, uint8_t *code, uint16_t *base)
{
    int emax = 0, emin = 255;
    for (int i = 0; i < LL_BF16P_BLOCK; i++) {
        int e = exponent(w[i]);
        emax = e > emax ? e : emax;
        emin = e < emin ? e : emin;
    }
    int lo = emax > 15 ? emax - 15 : 0;
    if (emin < lo) { /* the values go to the side table (pass 2), the index into sm */
        *base = LL_BF16P_ESCAPE;
        memset(sm, 0, LL_BF16P_BLOCK);
        memset(code, 0, LL_BF16P_BLOCK / 2);
        return false;
    }
    *base = (uint16_t)(lo << 7);
    for (int i = 0; i < LL_BF16P_BLOCK; i++)
        sm[i] = (uint8_t)((w[i] >> 8 & 0x80) | (w[i] & 0x7f));
    for (int j = 0; j < LL_BF16P_BLOCK / 2; j++)
        code[j] = (uint8_t)((exponent(w[2 * j]) - lo) | (exponent(w[2 * j + 1]) - lo) << 4);
    return true;
}

size_t ll_bf16p_pack_rows(struct ll_bf16p *p, int r0, int r1)
{
    size_t escapes = 0;
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < p->nbk; b++) {
            size_t blk = (size_t)r * (size_t)p->nbk + (size_t)b;
            escapes += !pack_block(p->raw + (size_t)r * (size_t)p->k + (size_t)b * LL_BF16P_BLOCK,
                                   p->sm + blk * LL_BF16P_BLOCK,
                                   p->code + blk * LL_BF16P_BLOCK / 2, p->base + blk);
        }
    return escapes;
}

void ll_bf16p_pack_escapes(struct ll_bf16p *p, int r0, int r1, uint16_t *table, size_t first)
{
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < p->nbk; b++) {
            size_t blk = (size_t)r * (size_t)p->nbk + (size_t)b;
            if (p->base[blk] != LL_BF16P_ESCAPE)
                continue;
            uint32_t e = (uint32_t)first++;
            memcpy(table + (size_t)e * LL_BF16P_BLOCK,
                   p->raw + (size_t)r * (size_t)p->k + (size_t)b * LL_BF16P_BLOCK,
                   LL_BF16P_BLOCK * sizeof(uint16_t));
            memcpy(p->sm + blk * LL_BF16P_BLOCK, &e, sizeof e);
        }
}

uint16_t *ll_bf16p_pack(struct ll_bf16p *p)
{
    size_t escapes = ll_bf16p_pack_rows(p, 0, p->n);
    uint16_t *table = malloc((escapes ? escapes : 1) * LL_BF16P_BLOCK * sizeof *table);
    if (!table)
        return NULL;
    ll_bf16p_pack_escapes(p, 0, p->n, table, 0);
    p->esc = table;
    return table;
}

uint16_t ll_bf16p_get(const struct ll_bf16p *p, int r, int k)
{
    int b = k / LL_BF16P_BLOCK, i = k % LL_BF16P_BLOCK;
    size_t blk = (size_t)r * (size_t)p->nbk + (size_t)b;
    if (b >= p->nbk)
        return p->raw[(size_t)r * (size_t)p->k + (size_t)k];
    if (p->base[blk] == LL_BF16P_ESCAPE) {
        uint32_t e;
        memcpy(&e, p->sm + blk * LL_BF16P_BLOCK, sizeof e);
        return p->esc[(size_t)e * LL_BF16P_BLOCK + (size_t)i];
    }
    uint8_t sm = p->sm[blk * LL_BF16P_BLOCK + (size_t)i];
    int c = p->code[blk * LL_BF16P_BLOCK / 2 + (size_t)i / 2] >> (4 * (i & 1)) & 15;
    return (uint16_t)((sm & 0x80) << 8 | (p->base[blk] + (c << 7)) | (sm & 0x7f));
}
