/*
 * qwen2.h: the Qwen2 family's forward pass (the implementation behind runtime.h for
 * model_type "qwen2"), registered in the family table of model_registry.c.
 *
 * Per step: embedding → per layer (RMSNorm → q/k/v with bias → RoPE on q, k → K/V into the cache
 * → attention → o → residual → RMSNorm → gate, up → SwiGLU → down → residual) → final RMSNorm and
 * lm_head for the rows that want logits only.
 */
#ifndef LLAISYS_QWEN2_H
#define LLAISYS_QWEN2_H

#include "runtime.h"

/* As runtime_create / runtime_free / runtime_forward (runtime.h), for a qwen2 model. */
enum ll_status qwen2_runtime_create(struct model_runtime **out, const struct model *m,
                                    const struct runtime_opts *opts, struct ll_err *err);
void qwen2_runtime_free(struct model_runtime *rt);
enum ll_status qwen2_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                             struct ll_err *err);

#endif
