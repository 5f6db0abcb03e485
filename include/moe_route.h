/*
 * moe_route.h: a mixture-of-experts layer's routing, as transformers' Qwen2-MoE and Qwen3-MoE
 * compute it: per token, the softmax of the router's logits over the n experts (in f32), the k
 * most probable experts (ties to the lower index), their probabilities as weights, divided by
 * their sum when `norm` (norm_topk_prob). Then the (token, expert) pairs are grouped by expert:
 * expert e's tokens are tok[off[e] .. off[e+1]) in increasing token order, each with its weight
 * w[...]; so the layer runs each expert once over the rows it got.
 *
 * A token's experts and weights depend only on its own logits: the same in any batch.
 */
#ifndef LLAISYS_MOE_ROUTE_H
#define LLAISYS_MOE_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#define MOE_MAX_EXPERTS 1024 /* num_experts at most */

/* logits (n_tokens, n_experts) → off (n_experts + 1), tok and w (n_tokens · k each). sel is
 * scratch of n_tokens · k ints. 1 <= k <= n_experts <= MOE_MAX_EXPERTS; the logits must be finite or -inf (a NaN
 * ranks last). */
void moe_route(const float *logits, int n_tokens, int n_experts, int k, bool norm, int32_t *off,
               int32_t *tok, float *w, int32_t *sel);

#endif
