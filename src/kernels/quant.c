/*
 * quant.c: the q8_0 / q4_0 weight formats (see quant.h): shape and plane-size checks, the
 * reference quantizers (round to nearest, one block at a time, in plain C: they run once per
 * model, at quantize or load time, not per token), the choice of the AVX-512 quantizer
 * (quant_avx512.c, the same bytes ~10x faster, so quantizing at load costs about the time of
 * reading the weights) and dequantization.
 *
 * Any thread; every function works only on the caller's buffers. Offsets are computed in size_t
 * (two int dimensions multiply to less than 2⁶², so they cannot overflow).
 */
#include "quant.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "isa.h"
#include "quant_layout.h"
#include "util.h"

/* Bytes of one block of one row in the qs plane. */
static size_t block_bytes(enum ll_qtype t)
{
    return t == LL_Q8_0 ? LL_QBLOCK : LL_QBLOCK / 2;
}

static int groups(int N)
{
    return (N + LL_QGROUP - 1) / LL_QGROUP;
}

const char *ll_qtype_name(enum ll_qtype t)
{
    return t == LL_Q8_0 ? "q8_0" : "q4_0";
}

bool ll_qtype_parse(const char *s, enum ll_qtype *out)
{
    if (!strcmp(s, "q8_0"))
        *out = LL_Q8_0;
    else if (!strcmp(s, "q4_0"))
        *out = LL_Q4_0;
    else
        return false;
    return true;
}

enum ll_status ll_qweight_check_shape(int N, int K, struct ll_err *err)
{
    if (N < 1)
        return ll_err_set(err, LL_EINVAL, "quantized weight: N = %d rows, need at least 1", N);
    if (K < LL_QBLOCK || K % LL_QBLOCK)
        return ll_err_set(err, LL_EINVAL,
                          "quantized weight: K = %d is not a positive multiple of %d", K,
                          LL_QBLOCK);
    return LL_OK;
}

size_t ll_qweight_qs_bytes(enum ll_qtype t, int N, int K)
{
    return (size_t)groups(N) * LL_QGROUP * (size_t)(K / LL_QBLOCK) * block_bytes(t);
}

size_t ll_qweight_d_bytes(int N, int K)
{
    return (size_t)groups(N) * LL_QGROUP * (size_t)(K / LL_QBLOCK) * sizeof(uint16_t);
}

enum ll_status ll_qweight_init(struct ll_qweight *w, enum ll_qtype t, int N, int K,
                               const void *qs, size_t qs_bytes, const void *d, size_t d_bytes,
                               struct ll_err *err)
{
    enum ll_status st = ll_qweight_check_shape(N, K, err);
    if (st != LL_OK)
        return st;
    size_t want_qs = ll_qweight_qs_bytes(t, N, K), want_d = ll_qweight_d_bytes(N, K);
    if (!qs || qs_bytes != want_qs)
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: data plane has %zu bytes, need %zu",
                          ll_qtype_name(t), N, K, qs ? qs_bytes : 0, want_qs);
    if (!d || d_bytes != want_d)
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: scale plane has %zu bytes, need %zu",
                          ll_qtype_name(t), N, K, d ? d_bytes : 0, want_d);
    if ((uintptr_t)d % sizeof(uint16_t))
        return ll_err_set(err, LL_EINVAL, "%s weight %d x %d: scale plane is not 2-byte aligned",
                          ll_qtype_name(t), N, K);
    *w = (struct ll_qweight){.type = t, .n = N, .k = K, .qs = qs, .d = d};
    return LL_OK;
}

/* ---- quantizing ---- */

static float src_at(const void *src, enum ll_dtype t, size_t i)
{
    switch (t) {
    case LL_BF16:
        return ll_bf16_to_f32(((const uint16_t *)src)[i]);
    case LL_F16:
        return ll_f16_to_f32(((const uint16_t *)src)[i]);
    case LL_F32:
        break;
    }
    return ((const float *)src)[i];
}

/* v rounded to nearest, ties away from zero (as roundf), then clamped to [lo, hi]. Clamping
 * first gives the same result and keeps the conversion in range; the rounding is spelled out
 * because roundf is a library call on baseline x86-64. */
static int round_clamp(float v, int lo, int hi)
{
    if (v <= (float)lo)
        return lo;
    if (v >= (float)hi)
        return hi;
    int i = (int)v; /* truncated; v − i is exact */
    float f = v - (float)i;
    return f >= 0.5f ? i + 1 : f <= -0.5f ? i - 1 : i;
}

/* One block x[0..32) into the planes. Returns false if a value is not finite or the scale
 * overflows f16. */
static bool quantize_block(uint8_t *qs, uint16_t *d, enum ll_qtype t, int nb, int n, int b,
                           const float x[LL_QBLOCK])
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < LL_QBLOCK; i++) {
        if (!isfinite(x[i]))
            return false;
        if (fabsf(x[i]) > amax) { /* the first element of largest magnitude, with its sign */
            amax = fabsf(x[i]);
            m = x[i];
        }
    }
    uint16_t dh = ll_f32_to_f16(t == LL_Q8_0 ? amax / 127.0f : m / -8.0f);
    float ds = ll_f16_to_f32(dh);
    if (!isfinite(ds))
        return false;
    d[ll_q_d_index(nb, n, b)] = dh;
    int q[LL_QBLOCK];
    for (int i = 0; i < LL_QBLOCK; i++) {
        float r = ds != 0.0f ? x[i] / ds : 0.0f;
        q[i] = t == LL_Q8_0 ? round_clamp(r, -127, 127) : round_clamp(r, -8, 7) + 8;
    }
    if (t == LL_Q8_0)
        for (int i = 0; i < LL_QBLOCK; i++)
            qs[ll_q_offset(t, nb, n, b, i)] = (uint8_t)(int8_t)q[i];
    else /* byte j: element j in the low nibble, j + 16 in the high one */
        for (int i = 0; i < LL_QBLOCK / 2; i++)
            qs[ll_q_offset(t, nb, n, b, i)] = (uint8_t)(q[i] | q[i + LL_QBLOCK / 2] << 4);
    return true;
}

/* ---- variants ---- */

static pthread_once_t variant_once = PTHREAD_ONCE_INIT;
static bool use_avx512; /* else the reference below */

static bool cpu_runs_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("f16c");
}

static void variant_init(void)
{
    use_avx512 = ll_isa_cap(NULL) >= LL_ISA_AVX512 && cpu_runs_avx512();
}

const char *ll_quantize_variant(void)
{
    pthread_once(&variant_once, variant_init);
    return use_avx512 ? "avx512" : "scalar";
}

bool ll_quantize_set_variant(const char *name)
{
    pthread_once(&variant_once, variant_init);
    if (!strcmp(name, "scalar"))
        use_avx512 = false;
    else if (!strcmp(name, "avx512") && cpu_runs_avx512())
        use_avx512 = true;
    else
        return false;
    return true;
}

static enum ll_status block_error(enum ll_qtype t, int n, int b, struct ll_err *err)
{
    return ll_err_set(err, LL_EINVAL, "quantize %s: row %d, block %d (elements %d..%d): %s",
                      ll_qtype_name(t), n, b, b * LL_QBLOCK, b * LL_QBLOCK + 31,
                      "a value is not finite or too large for an f16 scale");
}

enum ll_status ll_quantize_rows(uint8_t *qs, uint16_t *d, enum ll_qtype t, const void *src,
                                enum ll_dtype stype, int N, int K, int n0, int n1,
                                struct ll_err *err)
{
    enum ll_status st = ll_qweight_check_shape(N, K, err);
    if (st != LL_OK)
        return st;
    if (n0 < 0 || n0 > n1 || n1 > N || n0 % LL_QGROUP || (n1 % LL_QGROUP && n1 != N))
        return ll_err_set(err, LL_EINVAL,
                          "quantize: rows [%d, %d) of %d do not start and end on groups of %d",
                          n0, n1, N, LL_QGROUP);
    const int nb = K / LL_QBLOCK;
    pthread_once(&variant_once, variant_init);
    int bad_n, bad_b;
    if (use_avx512) {
        if (!ll_quantize_rows_avx512(qs, d, t, src, stype, K, n0, n1, &bad_n, &bad_b))
            return block_error(t, bad_n, bad_b, err);
    } else {
        float x[LL_QBLOCK];
        for (int n = n0; n < n1; n++)
            for (int b = 0; b < nb; b++) {
                for (int i = 0; i < LL_QBLOCK; i++)
                    x[i] = src_at(src, stype,
                                  (size_t)n * (size_t)K + (size_t)(b * LL_QBLOCK + i));
                if (!quantize_block(qs, d, t, nb, n, b, x))
                    return block_error(t, n, b, err);
            }
    }
    if (n1 == N) /* zero the padding rows of the last group */
        for (int n = N; n < groups(N) * LL_QGROUP; n++)
            for (int b = 0; b < nb; b++) {
                d[ll_q_d_index(nb, n, b)] = 0;
                for (int i = 0; i < LL_QBLOCK; i++)
                    qs[ll_q_offset(t, nb, n, b, i)] = 0;
            }
    return LL_OK;
}

void ll_dequantize_row(float *out, const struct ll_qweight *w, int n)
{
    LL_ASSERT(n >= 0 && n < w->n);
    const int nb = w->k / LL_QBLOCK;
    for (int b = 0; b < nb; b++) {
        float ds = ll_f16_to_f32(w->d[ll_q_d_index(nb, n, b)]);
        for (int i = 0; i < LL_QBLOCK; i++) {
            uint8_t byte = w->qs[ll_q_offset(w->type, nb, n, b, i)];
            int q = w->type == LL_Q8_0 ? (int8_t)byte : (i < 16 ? byte & 15 : byte >> 4) - 8;
            out[b * LL_QBLOCK + i] = ds * (float)q;
        }
    }
}
