/*
 * isa.c: LLAISYS_KERNEL, the kernels' one dispatch knob (see isa.h). Parsed once under
 * pthread_once, so every family sees the same cap for the life of the process.
 */
#include "isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const char *const names[] = {
    [LL_ISA_SCALAR] = "scalar",
    [LL_ISA_AVX2] = "avx2",
    [LL_ISA_AVXVNNI] = "avxvnni",
    [LL_ISA_AVX512] = "avx512",
};

static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static enum ll_isa cap = LL_ISA_AVX512;
static bool cap_requested;

static void cap_init(void)
{
    const char *env = getenv("LLAISYS_KERNEL");
    if (!env || !*env)
        return;
    for (int i = LL_ISA_SCALAR; i <= LL_ISA_AVX512; i++)
        if (!strcmp(env, names[i]) ||
            (i == LL_ISA_AVX512 && (!strcmp(env, "avx512bf16") || !strcmp(env, "avx512vnni")))) {
            cap = (enum ll_isa)i;
            cap_requested = true;
            return;
        }
    log_msg(LOG_WARN, "LLAISYS_KERNEL=%s unknown (scalar|avx2|avxvnni|avx512); ignored", env);
}

enum ll_isa ll_isa_cap(bool *requested)
{
    pthread_once(&cap_once, cap_init);
    if (requested)
        *requested = cap_requested;
    return cap;
}

const char *ll_isa_name(enum ll_isa isa)
{
    return names[isa];
}
