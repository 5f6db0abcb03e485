/*
 * amx_ops.h: private to the kernels: the AMX tile operations the int8 and bf16 GEMMs use
 * (configure, zero, load, TDPBSSD, TDPBF16PS, store, release), either as the real instructions
 * (-mamx-tile -mamx-int8 -mamx-bf16) or, when LL_AMX_EMULATE is defined, as plain C with the
 * semantics of the Intel SDM (palette 1: eight tiles of up to 16 rows × 64 bytes).
 *
 * qmatmul_amx.c and matmul_amx.c are compiled both ways (Makefile), so their tiling, unpacking
 * and epilogues run on every CPU through the emulation, and only the instruction encoding (and,
 * for TDPBF16PS, whether the hardware rounds as the SDM's pseudocode says) is left to hardware
 * with AMX. Tile numbers must be integer constant expressions written as literals or
 * macros (the real instructions encode them in the opcode; enum constants do not work).
 *
 * Tile state is per thread: a kernel configures at entry and releases before it returns. The
 * emulation keeps the eight tiles and the configuration in thread-local storage and asserts
 * (LL_ASSERT) every condition on which the hardware faults: a palette other than 0 or 1, rows or
 * bytes per row beyond 16 / 64, a tile used unconfigured, TDPBSSD or TDPBF16PS on tiles whose
 * shapes do not chain (C rows = A rows, C bytes = B bytes, A bytes = 4 · B rows) or that are not
 * three different tiles. So a kernel that passes in emulation configures what the hardware accepts.
 */
#ifndef LLAISYS_AMX_OPS_H
#define LLAISYS_AMX_OPS_H

#include <stdint.h>
#include <string.h>

#include "util.h"

#define AMX_TILES 8
#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

/* The tiles of a 2 × 2 step, as both kernels use them: C[i][j] = A[i] · B[j], from block i of the
 * A operand and block j of the B operand. */
#define T_C00 0
#define T_C01 1
#define T_C10 2
#define T_C11 3
#define T_A0 4
#define T_A1 5
#define T_B0 6
#define T_B1 7

/* The 64-byte operand of LDTILECFG (palette 1). Unused tiles have rows and colsb 0. */
struct amx_tilecfg {
    uint8_t palette;      /* 1; 0 releases every tile */
    uint8_t start_row;    /* 0 (restart point after an interrupted load or store) */
    uint8_t reserved[14]; /* 0 */
    uint16_t colsb[16];   /* bytes per row of tile t, t < 8; 0 beyond */
    uint8_t rows[16];     /* rows of tile t, t < 8; 0 beyond */
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct amx_tilecfg) == 64, "LDTILECFG reads 64 bytes");

#ifndef LL_AMX_EMULATE

#include <immintrin.h>

/* tileloadd and tilestored have no memory operand in GCC's intrinsics and ldtilecfg names only
 * 8 bytes of its operand: a compiler barrier before a load or configuration makes the stores of
 * the bytes it reads happen before it, and one after a store makes later reads see its bytes. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")
#define AMX_CONFIG(cfg)                                                                            \
    do {                                                                                           \
        AMX_BARRIER();                                                                             \
        _tile_loadconfig(cfg);                                                                     \
    } while (0)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride)                                                                  \
    do {                                                                                           \
        AMX_BARRIER();                                                                             \
        _tile_loadd(t, base, stride);                                                              \
    } while (0)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define AMX_STORE(t, base, stride)                                                                 \
    do {                                                                                           \
        _tile_stored(t, base, stride);                                                             \
        AMX_BARRIER();                                                                             \
    } while (0)
#define AMX_RELEASE() _tile_release()

#else /* LL_AMX_EMULATE */

#include <float.h>
#include <math.h>

struct amx_emul {
    struct amx_tilecfg cfg;
    int configured;
    uint8_t tile[AMX_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB];
};

static _Thread_local struct amx_emul amx_emul_state;

/* TILERELEASE: back to the initial state (no configuration, tiles zero). */
static inline void amx_emul_release(void)
{
    memset(&amx_emul_state, 0, sizeof amx_emul_state);
}

/* LDTILECFG: checks the operand as the hardware does (#GP otherwise) and zeroes every tile. */
static inline void amx_emul_config(const struct amx_tilecfg *c)
{
    if (c->palette == 0) {
        amx_emul_release();
        return;
    }
    LL_ASSERT(c->palette == 1 && c->start_row == 0);
    for (int i = 0; i < 14; i++)
        LL_ASSERT(c->reserved[i] == 0);
    for (int t = 0; t < 16; t++) {
        int used = t < AMX_TILES;
        LL_ASSERT(used || (c->rows[t] == 0 && c->colsb[t] == 0));
        LL_ASSERT(c->rows[t] <= AMX_MAX_ROWS && c->colsb[t] <= AMX_MAX_COLSB);
        LL_ASSERT((c->rows[t] == 0) == (c->colsb[t] == 0));
    }
    memset(&amx_emul_state, 0, sizeof amx_emul_state);
    amx_emul_state.cfg = *c;
    amx_emul_state.configured = 1;
}

static inline void amx_emul_check(int t)
{
    LL_ASSERT(amx_emul_state.configured && t >= 0 && t < AMX_TILES &&
              amx_emul_state.cfg.rows[t] > 0);
}

/* TILEZERO */
static inline void amx_emul_zero(int t)
{
    amx_emul_check(t);
    memset(amx_emul_state.tile[t], 0, sizeof amx_emul_state.tile[t]);
}

/* TILELOADD: rows[t] rows of colsb[t] bytes from base, stride bytes apart; the rest of the tile
 * zero. */
static inline void amx_emul_load(int t, const void *base, long stride)
{
    amx_emul_check(t);
    const int rows = amx_emul_state.cfg.rows[t], colsb = amx_emul_state.cfg.colsb[t];
    memset(amx_emul_state.tile[t], 0, sizeof amx_emul_state.tile[t]);
    for (int r = 0; r < rows; r++)
        memcpy(amx_emul_state.tile[t][r], (const uint8_t *)base + (long)r * stride, (size_t)colsb);
}

/* TILESTORED: rows[t] rows of colsb[t] bytes to base, stride bytes apart. */
static inline void amx_emul_store(int t, void *base, long stride)
{
    amx_emul_check(t);
    const int rows = amx_emul_state.cfg.rows[t], colsb = amx_emul_state.cfg.colsb[t];
    for (int r = 0; r < rows; r++)
        memcpy((uint8_t *)base + (long)r * stride, amx_emul_state.tile[t][r], (size_t)colsb);
}

/* What TDPBSSD and TDPBF16PS fault on: three configured, different tiles whose shapes chain. */
static inline const struct amx_tilecfg *amx_emul_check_dp(int c, int a, int b)
{
    amx_emul_check(c);
    amx_emul_check(a);
    amx_emul_check(b);
    const struct amx_tilecfg *cf = &amx_emul_state.cfg;
    LL_ASSERT(c != a && c != b && a != b);
    LL_ASSERT(cf->rows[c] == cf->rows[a] && cf->colsb[c] == cf->colsb[b] &&
              cf->colsb[a] == 4 * cf->rows[b] && cf->colsb[c] % 4 == 0);
    return cf;
}

/* TDPBSSD c, a, b: for each row m of c and dword n of a row of c,
 *   c[m].dword[n] += Σ_k Σ_i (int8)a[m].byte[4k + i] · (int8)b[k].byte[4n + i]
 * over k < colsb(a) / 4 and i < 4, with 32-bit wrap-around additions; bytes of c past its
 * configured shape stay zero. */
static inline void amx_emul_dpbssd(int c, int a, int b)
{
    const struct amx_tilecfg *cf = amx_emul_check_dp(c, a, b);
    const int rows = cf->rows[c], nd = cf->colsb[c] / 4, kd = cf->colsb[a] / 4;
    uint8_t(*tc)[AMX_MAX_COLSB] = amx_emul_state.tile[c];
    const uint8_t(*ta)[AMX_MAX_COLSB] = (const uint8_t(*)[AMX_MAX_COLSB])amx_emul_state.tile[a];
    const uint8_t(*tb)[AMX_MAX_COLSB] = (const uint8_t(*)[AMX_MAX_COLSB])amx_emul_state.tile[b];
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < nd; n++) {
            uint32_t acc;
            memcpy(&acc, &tc[m][4 * n], 4);
            for (int k = 0; k < kd; k++)
                for (int i = 0; i < 4; i++)
                    acc += (uint32_t)((int32_t)(int8_t)ta[m][4 * k + i] *
                                      (int32_t)(int8_t)tb[k][4 * n + i]);
            memcpy(&tc[m][4 * n], &acc, 4);
        }
}

/* TDPBF16PS reads its bf16 inputs with denormals as zero and flushes every f32 result that is
 * denormal to zero (sign kept); f32 inputs (the accumulator) are read the same way. */
static inline float amx_emul_ftz(float f)
{
    return f != 0.0f && f > -FLT_MIN && f < FLT_MIN ? copysignf(0.0f, f) : f;
}

static inline float amx_emul_bf16(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &u, 4);
    return amx_emul_ftz(f);
}

/* TDPBF16PS c, a, b (the SDM's pseudocode): for each row m of c and float n of a row of c, two
 * f32 sums start at zero, the even one taking the products of the elements 2k and the odd one
 * those of 2k + 1, for k < colsb(a) / 4 in increasing order, each product added by one fused
 * multiply-add rounded to nearest even:
 *   even = fma(a[m].bf16[2k], b[k].bf16[2n], even),  odd = fma(a[m].bf16[2k+1], b[k].bf16[2n+1], odd)
 * then c[m].f32[n] = c[m].f32[n] + (even + odd), two more roundings. Denormals as above.
 *
 * When every input is zero or of magnitude in [2⁻⁶³, 2⁶³), every product of two (8-bit
 * significands, at most 16 significant bits, a normal float) is exact, so one rounded addition
 * equals the fused operation: that loop runs over the columns at once (the compiler vectorizes
 * it); otherwise each step calls fmaf. */
static inline void amx_emul_dpbf16ps(int c, int a, int b)
{
    const struct amx_tilecfg *cf = amx_emul_check_dp(c, a, b);
    enum { H = AMX_MAX_COLSB / 4 };
    const int rows = cf->rows[c], nd = cf->colsb[c] / 4, kd = cf->colsb[a] / 4;
    float fa[AMX_MAX_ROWS][2 * H], fe[AMX_MAX_ROWS][H] = {{0}}, fo[AMX_MAX_ROWS][H] = {{0}};
    int exact = 1;
    for (int m = 0; m < rows; m++)
        for (int e = 0; e < 2 * kd; e++) {
            const float v = fa[m][e] = amx_emul_bf16(&amx_emul_state.tile[a][m][2 * e]);
            exact &= v == 0.0f || (fabsf(v) >= 0x1p-63f && fabsf(v) < 0x1p63f);
        }
    for (int k = 0; k < kd; k++)
        for (int n = 0; n < nd; n++) {
            const float v0 = fe[k][n] = amx_emul_bf16(&amx_emul_state.tile[b][k][4 * n]);
            const float v1 = fo[k][n] = amx_emul_bf16(&amx_emul_state.tile[b][k][4 * n + 2]);
            exact &= v0 == 0.0f || (fabsf(v0) >= 0x1p-63f && fabsf(v0) < 0x1p63f);
            exact &= v1 == 0.0f || (fabsf(v1) >= 0x1p-63f && fabsf(v1) < 0x1p63f);
        }
    uint8_t(*tc)[AMX_MAX_COLSB] = amx_emul_state.tile[c];
    for (int m = 0; m < rows; m++) {
        float even[H] = {0}, odd[H] = {0};
        for (int k = 0; k < kd; k++) {
            const float ae = fa[m][2 * k], ao = fa[m][2 * k + 1];
            if (exact) {
                for (int n = 0; n < H; n++) {
                    even[n] = amx_emul_ftz(ae * fe[k][n] + even[n]);
                    odd[n] = amx_emul_ftz(ao * fo[k][n] + odd[n]);
                }
            } else {
                for (int n = 0; n < nd; n++) {
                    even[n] = amx_emul_ftz(fmaf(ae, fe[k][n], even[n]));
                    odd[n] = amx_emul_ftz(fmaf(ao, fo[k][n], odd[n]));
                }
            }
        }
        for (int n = 0; n < nd; n++) {
            float acc;
            memcpy(&acc, &tc[m][4 * n], 4);
            acc = amx_emul_ftz(amx_emul_ftz(acc) + amx_emul_ftz(even[n] + odd[n]));
            memcpy(&tc[m][4 * n], &acc, 4);
        }
    }
}

#define AMX_CONFIG(cfg) amx_emul_config(cfg)
#define AMX_ZERO(t) amx_emul_zero(t)
#define AMX_LOAD(t, base, stride) amx_emul_load(t, base, stride)
#define AMX_DPBSSD(c, a, b) amx_emul_dpbssd(c, a, b)
#define AMX_DPBF16PS(c, a, b) amx_emul_dpbf16ps(c, a, b)
#define AMX_STORE(t, base, stride) amx_emul_store(t, base, stride)
#define AMX_RELEASE() amx_emul_release()

#endif /* LL_AMX_EMULATE */

#endif
