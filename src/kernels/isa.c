/*
 * isa.c: LLAISYS_KERNEL, the kernels' one dispatch knob (see isa.h), and the AMX tile
 * permission. Both are settled once under pthread_once, so every family sees the same cap and
 * the same AMX answer for the life of the process.
 */
#include "isa.h"

#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

static const char *const names[] = {
    [LL_ISA_SCALAR] = "scalar", [LL_ISA_AVX2] = "avx2", [LL_ISA_AVXVNNI] = "avxvnni",
    [LL_ISA_AVX512] = "avx512", [LL_ISA_AMX] = "amx",
};

static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static enum ll_isa cap = LL_ISA_AMX;
static bool cap_requested;

static void cap_init(void)
{
    const char *env = getenv("LLAISYS_KERNEL");
    if (!env || !*env)
        return;
    for (int i = LL_ISA_SCALAR; i <= LL_ISA_AMX; i++)
        if (!strcmp(env, names[i]) ||
            (i == LL_ISA_AVX512 && (!strcmp(env, "avx512bf16") || !strcmp(env, "avx512vnni")))) {
            cap = (enum ll_isa)i;
            cap_requested = true;
            return;
        }
    log_msg(LOG_WARN, "LLAISYS_KERNEL=%s unknown (scalar|avx2|avxvnni|avx512|amx); ignored", env);
}

enum ll_isa ll_isa_cap(bool *requested)
{
    pthread_once(&cap_once, cap_init);
    if (requested)
        *requested = cap_requested;
    return cap;
}

bool ll_isa_cpu_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

bool ll_isa_cpu_avx512(void)
{
    return ll_isa_cpu_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
}

const char *ll_isa_name(enum ll_isa isa)
{
    return names[isa];
}

/* ---- AMX: CPU, OS and the process's permission ---- */

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_ready;
static char amx_why[160];

static unsigned long long xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

static void amx_init(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & 1u << 24)) {
        snprintf(amx_why, sizeof amx_why, "CPU lacks amx_tile");
        return;
    }
    if (!(d & 1u << 25)) {
        snprintf(amx_why, sizeof amx_why, "CPU lacks amx_int8");
        return;
    }
    /* xgetbv needs OSXSAVE (CPUID.1:ECX bit 27) */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & 1u << 27) || (xcr0() & 3ull << 17) != 3ull << 17) {
        snprintf(amx_why, sizeof amx_why,
                 "the OS does not enable the tile state (XCR0 bits 17, 18)");
        return;
    }
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        snprintf(amx_why, sizeof amx_why,
                 "permission refused: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %s",
                 strerror(errno));
    else if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
             !(perm & 1ul << XFEATURE_XTILEDATA))
        snprintf(amx_why, sizeof amx_why,
                 "permission refused: ARCH_GET_XCOMP_PERM does not list XTILEDATA");
    else
        amx_ready = true;
    if (!amx_ready)
        log_msg(LOG_WARN, "AMX: %s; the kernels run without tiles", amx_why);
}

bool ll_isa_amx_ready(const char **why)
{
    pthread_once(&amx_once, amx_init);
    if (why)
        *why = amx_ready ? NULL : amx_why;
    return amx_ready;
}

bool ll_isa_cpu_amx_bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & 1u << 22);
}
