/*
 * rope_freq.c: the rotary embedding's inverse frequencies of a model (model_config.h), the one
 * place that knows each rope_scaling kind's formula.
 *
 * Plain RoPE turns the pair i of a head (of width d) by position · theta^(-2i/d). "linear"
 * divides every frequency by the factor. "llama3" (Llama 3.1 and later) splits the pairs by
 * wavelength 2π / frequency against the original context length L: wavelengths longer than
 * L / low_freq_factor are divided by the factor, those shorter than L / high_freq_factor are
 * kept, and the band between moves smoothly from one to the other, with the weight
 * s = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor) on the kept
 * frequency. Computed in double once at start-up.
 */
#include <math.h>

#include "model_config.h"

void model_rope_inv_freq(const struct model_config *cfg, double *inv_freq)
{
    const struct model_rope_scaling *rs = &cfg->rope_scaling;
    int half = cfg->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = pow(cfg->rope_theta, -2.0 * i / cfg->head_dim);
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
        }
        inv_freq[i] = f;
    }
}
