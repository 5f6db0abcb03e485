/*
 * rope_freq.c: the rotary embedding's inverse frequencies of a model (model_config.h), the one
 * place that knows each rope_scaling kind's formula.
 *
 * Plain RoPE turns the pair i of a head's rotated dims (d of them) by position · theta^(-2i/d).
 * "linear" divides every frequency by the factor. "llama3" (Llama 3.1 and later) splits the pairs
 * by wavelength 2π / frequency against the original context length L: wavelengths longer than L /
 * low_freq_factor are divided by the factor, those shorter than L / high_freq_factor are kept, and
 * the band between moves smoothly from one to the other, with the weight s = (L / wavelength -
 * low_freq_factor) / (high_freq_factor - low_freq_factor) on the kept frequency. "yarn" bands the
 * pairs by index instead: the pair where a wavelength makes r rotations over the original L is d ·
 * ln(L / (2π r)) / (2 ln θ); pairs below the one of beta_fast rotations (rounded down) are kept,
 * those past the one of beta_slow (rounded up) divided by the factor, with a linear ramp between;
 * and the rotation's cos and sin are scaled by attention_factor (0.1 ln(factor) + 1 unless given),
 * so q·k grows by its square. Gemma 3's windowed layers turn by their own base
 * (rope_local_base_freq) without any scaling. "longrope" (Phi-3) divides each frequency by its own
 * factor, from short_factor when the context the runtime serves fits the original one, else from
 * long_factor (chosen once, by the context length, as llama.cpp does; transformers switches per
 * call by the longest position, which changes the rotation of positions already cached), and
 * scales cos and sin by its attention factor. With partial_rotary_factor the exponents run over
 * the rotated dims d only (theta^(-2i/d)). Computed in double once at start-up.
 */
#include <math.h>

#include "model_config.h"

/* yarn: the pair index where a wavelength makes `rot` rotations over n_pos positions. */
static double yarn_pair(double rot, int d, double theta, int n_pos)
{
    return d * log(n_pos / (rot * 2.0 * M_PI)) / (2.0 * log(theta));
}

double model_rope_inv_freq(const struct model_config *cfg, int n_ctx, double *inv_freq)
{
    const struct model_rope_scaling *rs = &cfg->rope_scaling;
    const int d = cfg->rope_dim, half = d / 2;
    double lo = 0, hi = 0;
    if (rs->kind == MODEL_ROPE_YARN) {
        lo = floor(yarn_pair(rs->beta_fast, d, cfg->rope_theta, rs->original_max_position));
        hi = ceil(yarn_pair(rs->beta_slow, d, cfg->rope_theta, rs->original_max_position));
        lo = fmax(lo, 0), hi = fmin(hi, d - 1);
        if (lo == hi)
            hi += 0.001;
    }
    const double *ext = n_ctx > rs->original_max_position ? rs->long_factor : rs->short_factor;
    for (int i = 0; i < half; i++) {
        double f = pow(cfg->rope_theta, -2.0 * i / d);
        if (rs->kind == MODEL_ROPE_LINEAR) {
            f /= rs->factor;
        } else if (rs->kind == MODEL_ROPE_LLAMA3) {
            double wavelen = 2.0 * M_PI / f, L = rs->original_max_position;
            if (wavelen > L / rs->low_freq_factor) {
                f /= rs->factor;
            } else if (wavelen >= L / rs->high_freq_factor) {
                double s = (L / wavelen - rs->low_freq_factor) /
                           (rs->high_freq_factor - rs->low_freq_factor);
                f = (1.0 - s) * f / rs->factor + s * f;
            }
        } else if (rs->kind == MODEL_ROPE_YARN) {
            double ramp = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0); /* 0: kept, 1: divided */
            f = f / rs->factor * ramp + f * (1.0 - ramp);
        } else if (rs->kind == MODEL_ROPE_LONGROPE) {
            f /= ext[i];
        }
        inv_freq[i] = f;
    }
    if (rs->kind == MODEL_ROPE_LONGROPE)
        return rs->attention_factor;
    if (rs->kind != MODEL_ROPE_YARN)
        return 1.0;
    if (rs->attention_factor > 0)
        return rs->attention_factor;
    return rs->factor <= 1 ? 1.0 : 0.1 * log(rs->factor) + 1.0;
}

void model_rope_local_inv_freq(const struct model_config *cfg, double *inv_freq)
{
    for (int i = 0; i < cfg->rope_dim / 2; i++)
        inv_freq[i] = pow(cfg->swa.rope_theta, -2.0 * i / cfg->rope_dim);
}
