/*
 * isa.h: private to the kernels: the instruction-set cap every kernel family (matmul, qmatmul,
 * the row-wise ops, attention) applies when it picks its variant once at start-up.
 *
 * The one dispatch knob is the environment variable LLAISYS_KERNEL=scalar|avx2|avxvnni|avx512|amx
 * (avx512bf16 and avx512vnni, the variants' names, are taken as avx512): the highest instruction
 * set any kernel may use (scalar: the plain C references everywhere; avx2: every family's AVX2
 * variant; avxvnni: as avx2, but the qmatmul may use AVX-VNNI; avx512:
 * everything may use AVX-512, the qmatmul AVX-512 VNNI, but no AMX; amx: as avx512, and the
 * qmatmul may use AMX int8 tiles, the matmul AMX bf16 tiles). Unset or empty, each family uses the best variant the CPU runs.
 * Each family still checks the CPU for its own variant's features and falls back to what the CPU
 * runs (matmul and qmatmul report it).
 */
#ifndef LLAISYS_ISA_H
#define LLAISYS_ISA_H

#include <stdbool.h>
#include <stddef.h>

enum ll_isa {
    LL_ISA_SCALAR,
    LL_ISA_AVX2,
    LL_ISA_AVXVNNI,
    LL_ISA_AVX512,
    LL_ISA_AMX,
};

/* The cap LLAISYS_KERNEL sets (LL_ISA_AMX when it is unset or empty), read once per process.
 * An unknown value is reported on the log (log.h) and ignored (no cap). *requested (may be
 * NULL) tells whether a valid value was given. Any thread. */
enum ll_isa ll_isa_cap(bool *requested);

/* Whether the CPU has what every family's variant of a level needs: AVX2 with FMA and F16C;
 * AVX-512 F, BW, VL and DQ with those. A family checks its own extras on top (AVX-512 BF16,
 * VNNI, VBMI, AVX-VNNI). Not capped by LLAISYS_KERNEL. Any thread. */
bool ll_isa_cpu_avx2(void);
bool ll_isa_cpu_avx512(void);

/* The name of a level as LLAISYS_KERNEL spells it ("scalar", "avx2", "avxvnni", "avx512",
 * "amx"). */
const char *ll_isa_name(enum ll_isa isa);

/* Whether this process may run AMX int8 tiles: the CPU has amx_tile and amx_int8
 * (CPUID.(EAX=7,ECX=0):EDX bits 24, 25), the OS enables their state (XCR0 bits 17, 18), and
 * Linux granted the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once
 * per process, on the first call; callers ask before any thread uses tiles), and then the tile
 * probe below passed in a child process (after CPUID leaf 0x1D showed that palette 1 holds the
 * kernels' 8 tiles of 16 rows × 64 bytes). When not, *why (may
 * be NULL) says why, e.g. "CPU lacks amx_int8" or "permission refused: ..."; a refusal on a CPU
 * that has AMX is also logged once. Any thread; not capped by LLAISYS_KERNEL. */
bool ll_isa_amx_ready(const char **why);

/* Whether the CPU has amx_bf16 (CPUID.(EAX=7,ECX=0):EDX bit 22), which the bf16 tiles need on
 * top of ll_isa_amx_ready. Any thread; not capped by LLAISYS_KERNEL. */
bool ll_isa_cpu_amx_bf16(void);

/* The tile probe (probe_amx.c): configures the kernels' tile shape, runs TDPBSSD and, when bf16
 * is nonzero, TDPBF16PS on known data and returns 0 when the sums are right, else one of these
 * codes. ll_amx_probe runs the instructions (only where the CPU has them and the permission is
 * granted), ll_amx_probe_emul their emulation (amx_ops.h). Async-signal-safe. */
enum { LL_AMX_PROBE_INT8 = 10, LL_AMX_PROBE_BF16 = 11 };
int ll_amx_probe(int bf16);
int ll_amx_probe_emul(int bf16);
/* Runs probe(arg) in a child process (fork, no core file) and reads how it ended: true when it
 * returned 0; otherwise false and why[0 .. n) says how it ended (killed by a signal, which probe
 * code, which exit status). ll_isa_amx_ready runs ll_amx_probe through this, so that tiles that
 * fault cost a child, not the process. */
bool ll_isa_probe_child(int (*probe)(int), int arg, char *why, size_t n);

#endif
