/*
 * ref_forward.h: the float64 reference forward pass of the tests, written here from transformers'
 * definitions of Qwen2, Qwen3 and their MoE variants (checked on the independent tiny-qwen2
 * fixture by test_qwen3). It reads the stored weights straight from model.safetensors (st_open;
 * not through the model's bind) and computes in double: embedding, per layer RMSNorm, q/k/v
 * (+ bias), the per-head q/k norms, RoPE (rotate-half pairs i, i + head_dim/2, inverse
 * frequencies θ^(-2i/head_dim)), causal grouped-query attention, o, residual, RMSNorm, the MLP
 * (SwiGLU; in a sparse layer the router's softmax, its k best experts weighted by their
 * probabilities, renormalised when norm_topk_prob, plus the shared expert times the sigmoid of
 * its gate), residual, final RMSNorm, lm_head (the embedding when tied).
 */
#ifndef LLAISYS_TEST_REF_FORWARD_H
#define LLAISYS_TEST_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* Which optional tensors the model has. */
struct ref_kind {
    bool qk_norm; /* self_attn.{q,k}_norm */
    bool bias;    /* self_attn.{q,k,v}_proj.bias */
    bool shared;  /* the sparse layers' shared expert (Qwen2-MoE) */
};

struct ref {
    struct safetensors *st;
    const struct model_config *c; /* the experts and dense layers follow c->moe */
    struct ref_kind kind;
};

/* Open dir/model.safetensors for c (fails the test when it cannot). */
void ref_open(struct ref *r, const char *dir, const struct model_config *c, struct ref_kind kind);
void ref_close(struct ref *r);

/* logits (n, vocab) of the sequence ids[0..n) from position 0. */
void ref_forward(const struct ref *r, const int32_t *ids, int n, double *logits);

#endif
