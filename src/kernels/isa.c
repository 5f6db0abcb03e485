/*
 * isa.c: LLAISYS_KERNEL, the kernels' one dispatch knob (see isa.h), and whether this process
 * may use the AMX tiles (CPU, OS, palette, permission, then a probe of the instructions in a
 * child process). Both are settled once under pthread_once, so every family sees the same cap
 * and the same AMX answer for the life of the process.
 */
#include "isa.h"

#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "amx_ops.h"
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

/* ---- AMX: CPU, OS, the process's permission and a probe of the tiles ---- */

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

/* CPUID leaf 0x1D: palette 1 holds the tiles every kernel configures (amx_ops.h: 8 tiles of 16
 * rows × 64 bytes), else LDTILECFG would fault on them. */
static bool palette_fits(char *why, size_t n)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(0x1d, 0, &a, &b, &c, &d) || a < 1) {
        snprintf(why, n, "CPUID leaf 0x1D lists no tile palette 1");
        return false;
    }
    __get_cpuid_count(0x1d, 1, &a, &b, &c, &d);
    const unsigned row_bytes = b & 0xffff, names = b >> 16, rows = c & 0xffff;
    if (row_bytes < AMX_MAX_COLSB || names < AMX_TILES || rows < AMX_MAX_ROWS) {
        snprintf(why, n,
                 "tile palette 1 holds %u tiles of %u rows × %u bytes (CPUID leaf 0x1D); the "
                 "kernels need %d of %d × %d",
                 names, rows, row_bytes, AMX_TILES, AMX_MAX_ROWS, AMX_MAX_COLSB);
        return false;
    }
    return true;
}

bool ll_isa_probe_child(int (*probe)(int), int arg, char *why, size_t n)
{
    const pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "the tile probe could not start a process: %s", strerror(errno));
        return false;
    }
    if (pid == 0) { /* a fault kills the child: no handler of the parent's, no core file */
        static const int faults[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
        for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
            signal(faults[i], SIG_DFL);
        const struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        _exit(probe(arg));
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, n, "the tile probe's process could not be waited for: %s",
                     strerror(errno));
            return false;
        }
    if (WIFSIGNALED(st))
        snprintf(why, n, "the tile probe's process died of signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else if (!WIFEXITED(st))
        snprintf(why, n, "the tile probe's process ended with status %#x", (unsigned)st);
    else if (WEXITSTATUS(st) == LL_AMX_PROBE_INT8 || WEXITSTATUS(st) == LL_AMX_PROBE_BF16)
        snprintf(why, n, "the tile probe: %s gave wrong sums",
                 WEXITSTATUS(st) == LL_AMX_PROBE_INT8 ? "TDPBSSD" : "TDPBF16PS");
    else if (WEXITSTATUS(st) != 0)
        snprintf(why, n, "the tile probe's process exited with status %d", WEXITSTATUS(st));
    else
        return true;
    return false;
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
    if (!palette_fits(amx_why, sizeof amx_why))
        return;
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
        amx_ready =
            ll_isa_probe_child(ll_amx_probe, ll_isa_cpu_amx_bf16(), amx_why, sizeof amx_why);
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
