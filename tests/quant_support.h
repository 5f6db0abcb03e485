/*
 * quant_support.h: what the quantized-kernel tests (test_quant.c, test_qmatmul_amx.c) share: a
 * seeded xorshift generator, allocation that fails the current cmocka test, random f32 rows and
 * random f16 block scales. Call from the test's own thread (one generator per process).
 */
#ifndef LLAISYS_TESTS_QUANT_SUPPORT_H
#define LLAISYS_TESTS_QUANT_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

void rng_seed(uint64_t s);
uint64_t rng_next(void);
/* Uniform in [-1, 1). */
double rng_unit(void);
/* malloc that fails the test when out of memory (n = 0 allocates one byte). */
void *xmalloc(size_t n);
/* n values uniform in [-scale, scale), rounded to f32; free() them. */
float *rand_f32(size_t n, double scale);
/* A random f16 scale in ±[2⁻⁸, 2⁻⁴). */
uint16_t rand_scale(void);
/* Fails the test at the first of n elements whose bits differ from the reference's, naming
 * `what`, the element and both values. */
void expect_same_bits(const float *got, const float *ref, size_t n, const char *what);

#endif
