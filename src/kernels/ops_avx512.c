/*
 * ops_avx512.c: AVX-512 variants of the exp-heavy ops (SwiGLU, GeGLU, softmax, exp); see ops.h.
 *
 * Called through ops.c only after the CPU feature check. Tails are handled with masked loads
 * and stores, so every element goes through the same vector instructions wherever it sits
 * (a row's values do not depend on n's remainder).
 */
#include <math.h>
#include <stdint.h>

#include "exp_avx512.h"
#include "ops_simd.h"

void ll_exp_avx512(float *out, const float *x, int n)
{
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        _mm512_mask_storeu_ps(out + i, m, ll_exp512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* 16 weights as f32 (bf16 and f16 widening are exact). */
static inline __m512 load_w16(const void *w, enum ll_dtype t, int i, __mmask16 m)
{
    switch (t) {
    case LL_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case LL_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    case LL_F32:
        break;
    }
    return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

void ll_rms_norm_avx512(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                        int dim, float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        /* Sum of squares in double lanes (as the scalar version sums in double). */
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (int i = 0; i < dim; i += 16) {
            __m512 v = _mm512_maskz_loadu_ps(ll_mask16(dim - i), xr + i);
            __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            lo = _mm512_fmadd_pd(a, a, lo);
            hi = _mm512_fmadd_pd(b, b, hi);
        }
        double ss = _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
        __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt(ss / dim + (double)eps)));
        for (int i = 0; i < dim; i += 16) {
            __mmask16 m = ll_mask16(dim - i);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), inv);
            _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(v, load_w16(w, wtype, i, m)));
        }
    }
}

void ll_swiglu_avx512(float *out, const float *gate, const float *up, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 e = ll_exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, u));
    }
}

/* GeGLU as ll_geglu_avx2: g / (1 + e^z), z = g·(k1 + k3·g²) = -2u. */
void ll_geglu_avx512(float *out, const float *gate, const float *up, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 k1 = _mm512_set1_ps(-1.5957691216f), k3 = _mm512_set1_ps(-0.0713548163f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 z = _mm512_mul_ps(g, _mm512_fmadd_ps(k3, _mm512_mul_ps(g, g), k1));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, ll_exp512(z)));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, u));
    }
}

void ll_softmax_avx512(float *x, int n)
{
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        __m512 e = ll_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
        e = _mm512_maskz_mov_ps(m, e);
        vsum = _mm512_add_ps(vsum, e);
        _mm512_mask_storeu_ps(x + i, m, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = ll_mask16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}
