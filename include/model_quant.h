/*
 * model_quant.h: quantizing a model's linear weights (m->linears, listed by the family's bind):
 * in memory while loading (model_open with opts->quantize), and to disk as a quantized model
 * directory (`llaisys-cli quantize`) whose files model_bind.h describes and which then loads by
 * mmap with no work at start-up. The embedding stays as stored (it is gathered, not multiplied).
 * Start-up / CLI thread.
 */
#ifndef LLAISYS_MODEL_QUANT_H
#define LLAISYS_MODEL_QUANT_H

#include <stdbool.h>

#include "errors.h"
#include "model.h"

/* Quantize every dense linear weight of m to the type scheme gives it (model_qscheme.h) on
 * n_threads threads (16-row groups of every weight shared out in pieces), into one allocation
 * m->qmem; each weight then reads its planes and its dense pages in the file mapping are released
 * (a tied lm_head's embedding stays). Sets m->quantized, m->qscheme and m->quant_seconds, and
 * logs the time and the bits a weight. A model stored quantized by scheme is left as it is.
 * Returns LL_OK, LL_EUNSUPPORTED (stored quantized by another scheme), LL_EINVAL (a weight whose
 * K is not a multiple of 32, a non-finite value or a scale beyond f16: names the tensor, row and
 * block) or LL_ENOMEM; on error m's weights are unchanged. */
enum ll_status model_quantize(struct model *m, enum model_qscheme scheme, int n_threads,
                              struct ll_err *err);

/* Write the quantized model m (m->quantized) as the model directory out_dir: config.json (m's,
 * with quantization_config set), model.safetensors (every linear weight as its two planes, every
 * other tensor as stored), and generation_config.json and the tokenizer files copied from m->dir
 * where they exist. Atomic as model_dir.h; out_dir must not exist unless force (then only a
 * directory holding just these files is replaced). Returns LL_OK, LL_EINVAL (m not quantized,
 * out_dir exists), LL_EIO (names the path), LL_EJSON (m's config.json) or LL_ENOMEM. */
enum ll_status model_quant_write(const struct model *m, const char *out_dir, bool force,
                                 struct ll_err *err);

#endif
