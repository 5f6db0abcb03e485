/* quant_support.c: see quant_support.h. */
#include "quant_support.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

static uint64_t rng_state;

void rng_seed(uint64_t s)
{
    rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

double rng_unit(void)
{
    return (double)(rng_next() >> 11) / (double)(1ull << 52) - 1.0;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

float *rand_f32(size_t n, double scale)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(rng_unit() * scale);
    return p;
}

uint16_t rand_scale(void)
{
    double a = ldexp(1.0 + (rng_unit() + 1.0) / 2.0, -8 - (int)(rng_next() % 4));
    return ll_f32_to_f16((float)(rng_next() & 1 ? a : -a));
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

void expect_same_bits(const float *got, const float *ref, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (bits(got[i]) != bits(ref[i]))
            fail_msg("%s: element %zu differs: %.9g (0x%08x) vs reference %.9g (0x%08x)", what, i,
                     got[i], bits(got[i]), ref[i], bits(ref[i]));
}
