/*
 * dtype.c: IEEE half <-> float conversions (see dtype.h), portable C for files built without F16C.
 *
 * Pure functions, callable from any thread. Both agree bit for bit with the F16C instructions
 * (vcvtph2ps / vcvtps2ph with round-to-nearest-even): subnormals are kept, not flushed; a NaN
 * stays a NaN with its payload's top bits and the quiet bit set.
 */
#include "dtype.h"

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ll_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN; F16C quiets a signalling NaN */
        return f32_from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) {
        if (man == 0)
            return f32_from_bits(sign);
        /* subnormal half: value = man * 2^-24; normalise it into a float */
        uint32_t e = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        return f32_from_bits(sign | (e << 23) | ((man & 0x3ffu) << 13));
    }
    return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

uint16_t ll_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep the payload's top bits, set the quiet bit */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds past 65504 (or is inf) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half: rebias, round to nearest even on the 13 dropped bits */
        a -= (uint32_t)(127 - 15) << 23;
        a += 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | (a >> 13));
    }
    if (a <= 0x33000000u) /* at most 2^-25: rounds to zero (2^-25 is a tie, zero is even) */
        return sign;
    /* subnormal half: round (mantissa * 2^(e-126)) to an integer count of 2^-24 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++; /* may carry into the smallest normal, which is the right encoding */
    return (uint16_t)(sign | r);
}
