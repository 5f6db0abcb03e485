/*
 * mock.h: the mock model family (config.json "model_type": "mock"): no weights, deterministic
 * logits, for tests of the engine, the scheduler, the server and the library without a real
 * model. Registered in model_registry.c; mock.c documents the function it computes.
 *
 * Test-only faults, from optional config.json fields (no other family has them):
 *   "fail_token": ID   a forward pass whose batch holds token ID (among the rows it computes,
 *                      not the history) fails with LL_EMODEL and a message naming the token
 *                      and the field, before it writes anything; so a request with ID in its
 *                      prompt fails inside the forward (default -1: never)
 *   "delay_us": N      every forward pass first sleeps N microseconds (0 to 10,000,000;
 *                      default 0), so that streams are slow enough to hang up on at a chosen
 *                      stage
 */
#ifndef LLAISYS_MOCK_H
#define LLAISYS_MOCK_H

#include "model.h"
#include "runtime.h"

/* As model_family's entry points (model_registry.h). bind fixes the shapes and reads the
 * faults above (LL_EMODEL naming the field when one is out of range or of the wrong type). */
enum ll_status mock_bind(struct model *m, struct ll_err *err);
void mock_unbind(struct model *m);
enum ll_status mock_runtime_create(struct model_runtime **out, const struct model *m,
                                   const struct runtime_opts *opts, struct ll_err *err);
void mock_runtime_free(struct model_runtime *rt);
enum ll_status mock_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                            struct ll_err *err);

#endif
