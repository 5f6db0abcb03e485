/*
 * qmatmul_avx2.c: the AVX2 + FMA + F16C variant of ll_qmatmul (vpmaddubsw + vpmaddwd), for CPUs
 * without VNNI; the code is qmatmul_ymm.h's (see there).
 */
#define YMM_VNNI 0
#define YMM_KERNEL ll_qmm_kernel_avx2
#define YMM_QUANT ll_qmm_quant_avx2
#include "qmatmul_ymm.h"
