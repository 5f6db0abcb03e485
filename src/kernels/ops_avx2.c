/*
 * ops_avx2.c: AVX2 + FMA + F16C variants of the exp-heavy ops (SwiGLU, GeGLU, softmax,
 * exp) and
 * RMSNorm, for CPUs without AVX-512; see ops.h. The same computations as ops_avx512.c on 8 lanes
 * (exp_avx2.h's e^x). Tails are handled with masked loads and stores (vmaskmovps), so every
 * element goes through the same vector instructions wherever it sits.
 * Called through ops.c only after the CPU feature check.
 */
#include <math.h>
#include <stdint.h>

#include "exp_avx2.h"
#include "ops_simd.h"

void ll_exp_avx2(float *out, const float *x, int n)
{
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        _mm256_maskstore_ps(out + i, m, ll_exp256(_mm256_maskload_ps(x + i, m)));
    }
}

/* 8 weights as f32 (bf16 and f16 widening are exact); lanes outside m read as 0. */
static inline __m256 load_w8(const void *w, enum ll_dtype t, int i, int left)
{
    if (t == LL_F32)
        return _mm256_maskload_ps((const float *)w + i, ll_mask8(left));
    uint16_t h[8] = {0};
    const uint16_t *p = (const uint16_t *)w + i;
    __m128i v;
    if (left >= 8) {
        v = _mm_loadu_si128((const __m128i *)p);
    } else {
        for (int k = 0; k < left; k++)
            h[k] = p[k];
        v = _mm_loadu_si128((const __m128i *)h);
    }
    if (t == LL_F16)
        return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

void ll_rms_norm_avx2(float *out, const float *x, const void *w, enum ll_dtype wtype, int n,
                      int dim, float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        /* sum of squares in double lanes (as the scalar version sums in double) */
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        for (int i = 0; i < dim; i += 8) {
            __m256 v = _mm256_maskload_ps(xr + i, ll_mask8(dim - i));
            __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            lo = _mm256_fmadd_pd(a, a, lo);
            hi = _mm256_fmadd_pd(b, b, hi);
        }
        __m256d s = _mm256_add_pd(lo, hi);
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
        double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
        __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt(ss / dim + (double)eps)));
        for (int i = 0; i < dim; i += 8) {
            __m256i m = ll_mask8(dim - i);
            __m256 v = _mm256_mul_ps(_mm256_maskload_ps(xr + i, m), inv);
            _mm256_maskstore_ps(o + i, m, _mm256_mul_ps(v, load_w8(w, wtype, i, dim - i)));
        }
    }
}

void ll_swiglu_avx2(float *out, const float *gate, const float *up, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        __m256 g = _mm256_maskload_ps(gate + i, m);
        __m256 u = _mm256_maskload_ps(up + i, m);
        __m256 e = ll_exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(s, u));
    }
}

/* GeGLU: g / (1 + e^z), z = -2u = g·(-2√(2/π) - 2√(2/π)·0.044715·g²) (ops.c's formula with the
 * -2 folded into the constants). e^z is clamped, so z = ±inf (huge |g|) still gives g or -0. */
void ll_geglu_avx2(float *out, const float *gate, const float *up, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 k1 = _mm256_set1_ps(-1.5957691216f), k3 = _mm256_set1_ps(-0.0713548163f);
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        __m256 g = _mm256_maskload_ps(gate + i, m);
        __m256 u = _mm256_maskload_ps(up + i, m);
        __m256 z = _mm256_mul_ps(g, _mm256_fmadd_ps(k3, _mm256_mul_ps(g, g), k1));
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, ll_exp256(z)));
        _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(s, u));
    }
}

void ll_softmax_avx2(float *x, int n)
{
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        __m256 v = _mm256_maskload_ps(x + i, m);
        vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, v), _mm256_castsi256_ps(m));
    }
    __m256 mx = _mm256_set1_ps(ll_hmax256(vmax));
    __m256 vsum = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        __m256 e = ll_exp256(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        vsum = _mm256_add_ps(vsum, e);
        _mm256_maskstore_ps(x + i, m, e);
    }
    __m256 inv = _mm256_set1_ps(1.0f / ll_hsum256(vsum));
    for (int i = 0; i < n; i += 8) {
        __m256i m = ll_mask8(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}
