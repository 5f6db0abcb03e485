/*
 * model_qscheme.h: quantization schemes: the block type (quant.h) each linear weight of a model
 * gets. A scheme names the whole model's quantization: `--quant`, `llaisys-cli quantize --type`
 * and a quantized directory's quantization_config.format all take a scheme name. Three give every
 * linear weight one type (q8_0, q4_0, q4_k); q4_k_m mixes two by role and layer (below). The
 * type of a weight is a pure function of (scheme, role, layer, layer count), so a quantized
 * directory records only the scheme and the loader knows every tensor's type from it.
 * Family-neutral: the family's bind gives each linear weight its role and layer.
 */
#ifndef LLAISYS_MODEL_QSCHEME_H
#define LLAISYS_MODEL_QSCHEME_H

#include <stdbool.h>

#include "quant.h"

enum model_qscheme {
    MODEL_QS_Q8_0,
    MODEL_QS_Q4_0,
    MODEL_QS_Q4_K,
    /* q4_k except the attention value projection of every layer and the MLP down projection of
     * the first and last eighth of the layers and every third layer between, which are q8_0
     * (5.03 bits a weight on r1-1.5b, the size of llama.cpp's Q4_K_M) */
    MODEL_QS_Q4_K_M,
    MODEL_QS_COUNT
};

/* What a linear weight does in its family's model. */
enum model_role {
    MODEL_ROLE_OTHER, /* any weight no scheme singles out */
    MODEL_ROLE_ATTN_V,
    MODEL_ROLE_MLP_DOWN,
    MODEL_ROLE_LM_HEAD,
};

/* "q8_0", "q4_0", "q4_k" or "q4_k_m". */
const char *model_qscheme_name(enum model_qscheme s);

/* The scheme named s. Returns false, leaving *out untouched, for any other name. */
bool model_qscheme_parse(const char *s, enum model_qscheme *out);

/* The type scheme s gives a weight of this role in layer `layer` of n_layers (layer is ignored
 * for weights outside the layers, e.g. lm_head). */
enum ll_qtype model_qscheme_type(enum model_qscheme s, enum model_role role, int layer,
                                 int n_layers);

#endif
