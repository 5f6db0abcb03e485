/*
 * model_qscheme.c: the quantization schemes (see model_qscheme.h).
 *
 * q4_k_m spends its extra bits where the error hurts most: on the r1-1.5b-shaped model
 * (`llaisys-cli kl`, tests/fixtures/kl-text.txt), q4_k everywhere gives mean KL 0.0498, lm_head
 * alone at q8_0 0.0485, while the value projections and 14 of 28 down projections at q8_0 (7 %
 * more bytes than lm_head at q8_0) bring it to 0.034.
 */
#include "model_qscheme.h"

#include <string.h>

#include "util.h"

static const char *const names[MODEL_QS_COUNT] = {
    [MODEL_QS_Q8_0] = "q8_0",
    [MODEL_QS_Q4_0] = "q4_0",
    [MODEL_QS_Q4_K] = "q4_k",
    [MODEL_QS_Q4_K_M] = "q4_k_m",
};

const char *model_qscheme_name(enum model_qscheme s)
{
    LL_ASSERT((unsigned)s < MODEL_QS_COUNT);
    return names[s];
}

bool model_qscheme_parse(const char *s, enum model_qscheme *out)
{
    for (int i = 0; i < MODEL_QS_COUNT; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum model_qscheme)i;
            return true;
        }
    return false;
}

/* Layers whose down projection q4_k_m keeps at 8 bits: the first and last eighth (the layers
 * nearest the embedding and the logits), and every third layer between. */
static bool wide_layer(int layer, int n_layers)
{
    int lo = n_layers / 8, hi = 7 * n_layers / 8;
    return layer < lo || layer >= hi || (layer - lo) % 3 == 2;
}

enum ll_qtype model_qscheme_type(enum model_qscheme s, enum model_role role, int layer,
                                 int n_layers)
{
    switch (s) {
    case MODEL_QS_Q8_0:
        return LL_Q8_0;
    case MODEL_QS_Q4_0:
        return LL_Q4_0;
    case MODEL_QS_Q4_K:
        return LL_Q4_K;
    case MODEL_QS_Q4_K_M:
        if (role == MODEL_ROLE_ATTN_V ||
            (role == MODEL_ROLE_MLP_DOWN && wide_layer(layer, n_layers)))
            return LL_Q8_0;
        return LL_Q4_K;
    case MODEL_QS_COUNT:
        break;
    }
    LL_ASSERT(!"unknown quantization scheme");
    return LL_Q8_0;
}
