/*
 * qmatmul_avxvnni.c: the AVX-VNNI variant of ll_qmatmul (VEX-encoded vpdpbusd on ymm, with AVX2,
 * FMA, F16C), for CPUs with AVX-VNNI but without AVX-512; the code is qmatmul_ymm.h's (see there).
 */
#define YMM_VNNI 1
#define YMM_KERNEL ll_qmm_kernel_avxvnni
#define YMM_QUANT ll_qmm_quant_avxvnni
#include "qmatmul_ymm.h"
