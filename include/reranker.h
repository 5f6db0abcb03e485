/*
 * reranker.h: relevance scores of (query, document) pairs from a model's final hidden state
 * (the vector lm_head reads: runtime.h LL_WANT_HIDDEN, pooled at the last position), for
 * /v1/rerank and the library's llaisys_engine_rerank.
 *
 * A model ranks with a head of one or two rows applied to the prompt's last hidden state:
 * - a sequence-classification checkpoint (`*ForSequenceClassification`, e.g. Qwen3-Reranker
 *   converted to one: tensor `score.weight`, (labels, hidden), 1 or 2 labels), or
 * - a causal LM judged by its next-token logits of two words (Qwen3-Reranker as published:
 *   "no" and "yes"; `--rerank-tokens NO,YES` names them for any model, and wins over the
 *   rest; a directory whose README.md has the heading "# Qwen3-Reranker" gets no,yes by
 *   itself): the rows are
 *   lm_head's rows of those tokens, the logits transformed as the model's own (Granite's
 *   logits_scaling, Gemma 2's final softcap).
 * The relevance score is sigmoid(z) for one row and sigmoid(z1 - z0) for two (the softmax's
 * probability of the second: "yes", or label 1), in [0, 1] as vLLM and sentence-transformers'
 * cross-encoders give it; the dot products are summed in double.
 *
 * The prompt is Qwen3-Reranker's: the model's chat template rendered with a system message
 * asking for a yes/no judgement, one user message "<Instruct>: I\n<Query>: Q\n<Document>: D"
 * and the generation prompt, thinking off (enable_thinking false); the text before and after
 * the user content is tokenized once at load, the user content per pair (without special
 * tokens), as Qwen3-Reranker's model card does. Pure functions after reranker_choose; any
 * thread.
 */
#ifndef LLAISYS_RERANKER_H
#define LLAISYS_RERANKER_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

struct model;
struct tokenizer;
struct chat_template;

#define RERANK_DEFAULT_INSTRUCTION                                                           \
    "Given a web search query, retrieve relevant passages that answer the query"

struct reranker {
    int n_rows;          /* 1 or 2; 0: the model does not rank (reranker_choose's error) */
    int hidden;          /* hidden_size */
    float *w;            /* (n_rows, hidden) the head's rows */
    float logits_div;    /* > 0: token logits divided by it (the model's logits_scaling) */
    float softcap;       /* > 0: token logits capped c·tanh(z/c) (final_logit_softcapping) */
    int32_t *head_ids;   /* (n_head) the prompt before the user content */
    int32_t *tail_ids;   /* (n_tail) the prompt after it (the generation prompt) */
    int n_head, n_tail;
    char source[192];    /* where the head and the prompt came from, for the configuration */
};

/* The head and prompt of model m (the directory m->dir) with tokenizer tok and chat template
 * tmpl (bos/eos as the template sees them; NULL: none): lm_head's rows of the tokens `tokens`
 * names when it is not NULL or empty ("NO,YES" or "YES": a vocabulary entry each, or a word
 * the tokenizer encodes as one token), else score.weight when the checkpoint has it, else
 * lm_head's rows of no,yes when README.md has the heading "# Qwen3-Reranker". Returns LL_OK;
 * LL_EUNSUPPORTED (no head: the message says how to get one; more than two labels; a token
 * head on a model without lm_head; no chat template, or one that does not render the user
 * message once as it is); LL_EINVAL (a token that is not one token of the vocabulary, or
 * three tokens: named); LL_EMODEL (score.weight of another shape); LL_ETEMPLATE; LL_ENOMEM.
 * On error *rk is zeroed. */
enum ll_status reranker_choose(struct reranker *rk, const struct model *m,
                               const struct tokenizer *tok, const struct chat_template *tmpl,
                               const char *bos, const char *eos, const char *tokens,
                               struct ll_err *err);

/* Free what reranker_choose allocated and zero *rk (a zeroed struct is fine). */
void reranker_free(struct reranker *rk);

/* The prompt of one pair (instruction NULL: RERANK_DEFAULT_INSTRUCTION) into *ids (malloc'd,
 * caller frees) and *n. Returns LL_OK or LL_ENOMEM. */
enum ll_status reranker_prompt(const struct reranker *rk, const struct tokenizer *tok,
                               const char *instruction, const char *query, size_t query_len,
                               const char *doc, size_t doc_len, int32_t **ids, int *n,
                               struct ll_err *err);

/* The tokens the prompts of a request's documents (ids[i], n[i] tokens, count of them) share
 * with one another and with the request's prompt for an empty document: the instruction and
 * query part, worth keeping in the prefix cache (engine_params.cache_prefix); the rest of a
 * prompt is its document's alone. Returns it, or -1 on no memory. */
int reranker_shared_prefix(const struct reranker *rk, const struct tokenizer *tok,
                           const char *instruction, const char *query, size_t query_len,
                           int32_t *const *ids, const int *n, int count);

/* The relevance score of a prompt whose last final hidden state is h (hidden floats). */
double reranker_score(const struct reranker *rk, const float *h);

/* The rank order of n scores into order[0..n): their indices, the higher score first, the
 * lower index on a tie, NaN last. Returns LL_OK or LL_ENOMEM. */
enum ll_status reranker_order(const double *scores, int n, int *order);

#endif
