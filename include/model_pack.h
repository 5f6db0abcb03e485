/*
 * model_pack.h: packing a bf16 model's linear weights losslessly at load (`--quant bf16p`,
 * bf16pack.h), so that single-stream decode reads 12.5 bits a weight instead of 16 with the same
 * results.
 */
#ifndef LLAISYS_MODEL_PACK_H
#define LLAISYS_MODEL_PACK_H

#include "errors.h"
#include "model.h"

/* Pack every linear weight of m (all bf16, not quantized) in parallel on n_threads, into one
 * allocation (m->pkmem, with the escape table m->pkesc); logged with the time it took and the
 * share of escape blocks. The bf16 weights stay mapped and in use: only single-row matmuls read
 * the planes (matmul.h), so a packed model holds both (+78 % memory). Where this CPU's
 * matmul cannot read packed weights (matmul.h, ll_matmul_reads_packed) nothing is packed and a
 * warning says why. Returns LL_OK, LL_EUNSUPPORTED (quantized or non-bf16 weights; names the
 * weight) or LL_ENOMEM. */
enum ll_status model_pack_bf16(struct model *m, int n_threads, struct ll_err *err);

#endif
