/*
 * pooling.h: embeddings from a model's hidden states: how a prompt's final hidden states (the
 * vectors lm_head would read, runtime.h LL_WANT_HIDDEN) become one vector, and what the model
 * directory says about it.
 *
 * A directory written by sentence-transformers (Qwen3-Embedding, gte-Qwen2, ...) names its
 * modules in modules.json: the Transformer, then a Pooling module whose config.json sets one
 * pooling_mode_* switch (lasttoken, mean_tokens, cls_token are implemented: the last
 * position's state, the mean over every position, the first position's), then optionally a
 * Normalize module (L2 normalization). A directory without modules.json is a plain causal LM:
 * its embedding is the last position's state, normalized (as vLLM and llama.cpp's
 * `--pooling last` give it). Pure functions; any thread.
 */
#ifndef LLAISYS_POOLING_H
#define LLAISYS_POOLING_H

#include <stdbool.h>

#include "errors.h"

enum ll_pooling {
    LL_POOL_NONE = 0, /* no embedding (generation) */
    LL_POOL_LAST,     /* the last position's state */
    LL_POOL_MEAN,     /* the mean of every position's state */
    LL_POOL_FIRST,    /* the first position's state (sentence-transformers' cls_token) */
};

struct pooling_config {
    enum ll_pooling mode;
    bool normalize;    /* L2-normalize the pooled vector */
    char source[96];   /* where it came from, for the configuration print */
};

/* The pooling of the model directory dir (see above). Returns LL_OK; LL_EUNSUPPORTED (a
 * pooling mode or a module that is not implemented, or include_prompt false: the message
 * names it and the file); LL_EJSON / LL_EFORMAT (a file that does not parse or has the wrong
 * shape, named); LL_EIO; LL_ENOMEM. */
enum ll_status pooling_load(struct pooling_config *p, const char *dir, struct ll_err *err);

/* The pooling embeddings use (the server's, the library's and the CLI's one policy): the
 * directory's (pooling_load), its mode replaced by force unless force is LL_POOL_NONE (the
 * --pooling option). A directory whose pooling files are not implemented still embeds with
 * force (L2-normalized); without force its error is returned and p->mode is LL_POOL_NONE.
 * p->source says where the choice came from. */
enum ll_status pooling_choose(struct pooling_config *p, const char *dir, enum ll_pooling force,
                              struct ll_err *err);

/* "last", "mean", "first" (and "none"); pooling_parse reads those words (false: unknown). */
const char *pooling_name(enum ll_pooling m);
bool pooling_parse(const char *word, enum ll_pooling *out);

/* v[0..n) /= its L2 norm (summed in double); a zero vector stays zero. */
void pooling_normalize(float *v, int n);

/* A pooled vector v (n floats) as it is answered: its first `dimensions` values (0, or not
 * fewer than n: all), then L2-normalized when p says so (after the cut, as OpenAI's shortened
 * embeddings are). Returns the length kept. */
int pooling_output(const struct pooling_config *p, float *v, int n, int dimensions);

#endif
