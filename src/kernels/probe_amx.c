/*
 * probe_amx.c: the tile instructions once, on known data, to learn whether they run in this
 * process at all. A hypervisor that reports AMX but does not switch the tile state, a palette
 * that faults on the configuration the kernels load, or a kernel without the permission make the
 * first LDTILECFG or TDPBSSD fault; isa.c runs this probe in a child process, so such a fault
 * kills the child and the server learns from its exit status that it must not use the tiles.
 *
 * Compiled twice from this source (Makefile), as the kernels: "ll_amx_probe" on the real
 * instructions and "ll_amx_probe_emul" on amx_ops.h's emulation (for the tests: the expected
 * sums below hold there on every CPU).
 *
 * Async-signal-safe: the child of fork() in a threaded process may only run such code; this file
 * calls nothing but the tile operations and its own loops.
 */
#include "amx_ops.h"
#include "isa.h"

#ifdef LL_AMX_EMULATE
#define PROBE ll_amx_probe_emul
#else
#define PROBE ll_amx_probe
#endif

enum { R = AMX_MAX_ROWS, CB = AMX_MAX_COLSB };

/* The kernels' own shape: every tile 16 rows × 64 bytes. */
static const struct amx_tilecfg probe_cfg = {
    .palette = 1,
    .rows = {R, R, R, R, R, R, R, R},
    .colsb = {CB, CB, CB, CB, CB, CB, CB, CB},
};

/* bf16 of a small integer (exact: |v| < 256) */
static uint16_t bf16_int(int v)
{
    union {
        float f;
        uint32_t u;
    } c = {.f = (float)v};
    return (uint16_t)(c.u >> 16);
}

int PROBE(int bf16)
{
    int8_t a[R][CB] __attribute__((aligned(64))), b[R][CB] __attribute__((aligned(64)));
    int32_t c[R][R] __attribute__((aligned(64)));
    for (int i = 0; i < R; i++)
        for (int k = 0; k < CB; k++) {
            a[i][k] = (int8_t)((i * 37 + k * 11) % 255 - 127);
            b[i][k] = (int8_t)((i * 13 + k * 29 + 5) % 255 - 127);
        }
    AMX_CONFIG(&probe_cfg);
    AMX_ZERO(T_C00);
    AMX_LOAD(T_A0, a, CB);
    AMX_LOAD(T_B0, b, CB);
    AMX_DPBSSD(T_C00, T_A0, T_B0);
    AMX_STORE(T_C00, c, 4 * R);
    int bad = 0;
    for (int m = 0; m < R; m++)
        for (int n = 0; n < R; n++) {
            int32_t s = 0;
            for (int k = 0; k < R; k++)
                for (int i = 0; i < 4; i++)
                    s += a[m][4 * k + i] * b[k][4 * n + i];
            bad |= c[m][n] != s;
        }
    if (bad) {
        AMX_RELEASE();
        return LL_AMX_PROBE_INT8;
    }
    if (bf16) {
        /* small integers: every product and sum is exact, so any order gives these floats */
        uint16_t ha[R][CB / 2] __attribute__((aligned(64))),
            hb[R][CB / 2] __attribute__((aligned(64)));
        float f[R][R] __attribute__((aligned(64)));
        for (int i = 0; i < R; i++)
            for (int k = 0; k < CB / 2; k++) {
                ha[i][k] = bf16_int((i + 3 * k) % 15 - 7);
                hb[i][k] = bf16_int((5 * i + k) % 13 - 6);
            }
        AMX_ZERO(T_C01);
        AMX_LOAD(T_A1, ha, CB);
        AMX_LOAD(T_B1, hb, CB);
        AMX_DPBF16PS(T_C01, T_A1, T_B1);
        AMX_STORE(T_C01, f, 4 * R);
        for (int m = 0; m < R; m++)
            for (int n = 0; n < R; n++) {
                int s = 0;
                for (int k = 0; k < R; k++)
                    for (int i = 0; i < 2; i++)
                        s += ((m + 3 * (2 * k + i)) % 15 - 7) * ((5 * k + 2 * n + i) % 13 - 6);
                bad |= f[m][n] != (float)s;
            }
    }
    AMX_RELEASE();
    return bad ? LL_AMX_PROBE_BF16 : 0;
}
