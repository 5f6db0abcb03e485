/*
 * mock.h: the mock model family (config.json "model_type": "mock"): no weights, deterministic
 * logits, for tests of the engine, the scheduler, the server and the library without a real
 * model. Registered in model_registry.c; mock.c documents the function it computes.
 */
#ifndef LLAISYS_MOCK_H
#define LLAISYS_MOCK_H

#include "model.h"
#include "runtime.h"

/* As model_family's entry points (model_registry.h). bind only checks the configuration. */
enum ll_status mock_bind(struct model *m, struct ll_err *err);
void mock_unbind(struct model *m);
enum ll_status mock_runtime_create(struct model_runtime **out, const struct model *m,
                                   const struct runtime_opts *opts, struct ll_err *err);
void mock_runtime_free(struct model_runtime *rt);
enum ll_status mock_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                            struct ll_err *err);

#endif
