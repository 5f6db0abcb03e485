/*
 * dtype.h: element types of weights and activations, and scalar conversions between them.
 * bf16 rounding is round-to-nearest-even (NaN kept quiet), as PyTorch and llama.cpp do.
 */
#ifndef LLAISYS_DTYPE_H
#define LLAISYS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum ll_dtype {
    LL_F32,
    LL_BF16,
    LL_F16,
};

/* Bytes per element. */
static inline size_t ll_dtype_size(enum ll_dtype t) { return t == LL_F32 ? 4 : 2; }
/* "F32", "BF16", "F16" (the safetensors spelling). */
static inline const char *ll_dtype_name(enum ll_dtype t)
{
    return t == LL_F32 ? "F32" : t == LL_BF16 ? "BF16" : "F16";
}

static inline float ll_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ll_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE half <-> float, round to nearest even, subnormals kept, NaN kept quiet (src/base/dtype.c;
 * bit-identical to the F16C instructions, so SIMD files may use those instead). */
float ll_f16_to_f32(uint16_t h);
uint16_t ll_f32_to_f16(float f);

/* Element i of an array p of type t, as a float (exact for every type). */
static inline float ll_dtype_load(const void *p, enum ll_dtype t, size_t i)
{
    switch (t) {
    case LL_BF16:
        return ll_bf16_to_f32(((const uint16_t *)p)[i]);
    case LL_F16:
        return ll_f16_to_f32(((const uint16_t *)p)[i]);
    case LL_F32:
        break;
    }
    return ((const float *)p)[i];
}

#endif
