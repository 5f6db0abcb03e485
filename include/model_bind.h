/*
 * model_bind.h: what a family's bind function (model_registry.h) uses to point its weights
 * struct at the tensors of m->st, each checked against config.json before use: dense tensors,
 * and linear weights, dense or quantized. Runs once in model_open(), on the start-up thread.
 *
 * A quantized model directory (what `llaisys-cli quantize` writes, model_quant.h) holds:
 *   config.json: the model's fields plus
 *       "quantization_config": {"quant_method": "llaisys", "format": "q8_0" | "q4_0" | "q4_k",
 *                               "layout": "rows16-blocks32"}
 *   model.safetensors: every linear weight NAME (N, K) (e.g. "model.layers.0.mlp.up_proj.weight",
 *   and "lm_head.weight" even when tie_word_embeddings is true) as the two planes of quant.h:
 *       NAME.qs  the integer data: I8 [16·G, K] (q8_0) or U8 [16·G, K/2] (q4_0, q4_k),
 *                G = ceil(N / 16)
 *       NAME.d   the scales: F16 [16·G, K/32] (q8_0, q4_0: one per block), or U8
 *                [16·G, 16·ceil(K/256)] (q4_k: per super-block of a group 256 bytes holding
 *                the 16 rows' f16 d, f16 dmin and 6-bit codes, quant.h)
 *   Row r of these shapes is not row r of W: the bytes are interleaved in groups of 16 rows as
 *   quant.h lays them out (its "Byte offsets"); the shapes only give the planes' sizes, which are
 *   those of an (N rounded up to 16, K) matrix of the type. Every other tensor (the embedding,
 *   norms, biases) is stored as in the original model.
 * A quantized weight is refused, with a message naming the tensor, when a plane is missing, has
 * another dtype or shape, or the dense NAME is stored beside it.
 */
#ifndef LLAISYS_MODEL_BIND_H
#define LLAISYS_MODEL_BIND_H

#include <stdint.h>

#include "errors.h"
#include "model.h"
#include "safetensors.h"

/* The tensor that stores plane `plane` (0: NAME.qs, 1: NAME.d) of an (n, k) weight of type t
 * (k % 32 == 0): its dtype and 2-D shape, as above. The one place that maps the planes of quant.h
 * onto safetensors, for binding and for writing. */
void model_qplane(enum ll_qtype t, int n, int k, int plane, enum st_dtype *dtype, int64_t shape[2]);

/* Bind tensor `name` of m->st, dtype BF16, F16 or F32, shape (d0) when d1 == 0, else (d0, d1).
 * Returns LL_OK, LL_EMODEL (missing, or another shape: names the tensor, both shapes) or
 * LL_EUNSUPPORTED (another dtype). */
enum ll_status model_bind_tensor(const struct model *m, struct ll_tensor *out, const char *name,
                                 int64_t d0, int64_t d1, struct ll_err *err);

/* Bind the 3-D tensor `name` of m->st, shape (e, d0, d1) (a stack of e matrices: GraniteMoE's
 * experts), as the 2-D view (e·d0, d1), whose rows [x·d0, x·d0 + d0) are matrix x. As
 * model_bind_tensor otherwise. */
enum ll_status model_bind_stacked(const struct model *m, struct ll_tensor *out, const char *name,
                                  int64_t e, int64_t d0, int64_t d1, struct ll_err *err);

/* Bind linear weight `name` of shape (n, k), with its role and layer (-1 outside the layers;
 * model_qscheme.h), into l and append l to m->linears. In a quantized model
 * (m->config.quantized) its planes name.qs and name.d (above), of the type the scheme gives it;
 * otherwise the dense tensor
 * `name` or, when tied is not NULL, *tied (a tensor already bound, e.g. the embedding that a tied
 * lm_head shares). Returns LL_OK, LL_EMODEL or LL_EUNSUPPORTED (naming the tensor and what is
 * wrong), LL_ENOMEM. */
enum ll_status model_bind_linear(struct model *m, struct model_linear *l, const char *name,
                                 enum model_role role, int layer, int64_t n, int64_t k,
                                 const struct ll_tensor *tied, struct ll_err *err);

/* Bind rows [row0, row0 + n) of the dense (rows, k) tensor `whole`, bound from tensor `source`
 * (Phi-3's fused qkv_proj and gate_up_proj, GraniteMoE's stacked experts), as linear weight `name` (the part's own name, under
 * which a quantized copy stores its planes), and append l to m->linears. Dense models only.
 * Returns LL_OK or LL_ENOMEM. */
enum ll_status model_bind_linear_part(struct model *m, struct model_linear *l, const char *name,
                                      enum model_role role, int layer,
                                      const struct ll_tensor *whole, const char *source,
                                      int64_t row0, int64_t n, struct ll_err *err);

#endif
