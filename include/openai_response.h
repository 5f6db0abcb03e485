/*
 * openai_response.h: response bodies and stream chunks of the OpenAI-compatible routes, written
 * with json.h's writers, strings with a length (generated text may hold NUL bytes).
 *
 * Pure functions; any thread. Every builder returns a malloc'd NUL-terminated string the caller
 * frees, or NULL when out of memory.
 */
#ifndef LLAISYS_OPENAI_RESPONSE_H
#define LLAISYS_OPENAI_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "openai_request.h"

/* What identifies a response: object kind, id, creation time, model name. */
struct oai_meta {
    enum oai_kind kind;
    const char *id;      /* "chatcmpl-…" / "cmpl-…" */
    long long created;   /* Unix seconds */
    const char *model;
};

struct oai_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;    /* usage.prompt_tokens_details.cached_tokens */
    int reasoning_tokens; /* usage.completion_tokens_details.reasoning_tokens */
    int spec_drafted;     /* draft tokens verified (--spec): completion_tokens_details has
                             accepted_prediction_tokens = spec_accepted and
                             rejected_prediction_tokens = spec_drafted - spec_accepted */
    int spec_accepted;
};

struct tokenizer;

/* The logprobs of a run of generated tokens, as the engine reports them (engine_output), and
 * what rendering them needs. Chat writes OpenAI's {"content": [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]}; completions the legacy {tokens, token_logprobs,
 * top_logprobs: [{token: logprob}], text_offset}. A token's string is its bytes as UTF-8, each
 * maximal invalid subpart (e.g. the part of a character split across tokens) as one U+FFFD, as
 * Python's errors="replace" does; "bytes" has the raw bytes. -inf is written -9999.0. */
struct oai_logprobs {
    const int32_t *ids;                /* (n) */
    const struct sampler_logprobs *lp; /* (n) */
    int n;
    int top;                           /* alternatives to list (at most each lp's n_top) */
    const struct tokenizer *tok;
    bool skip_special;                 /* completions: special tokens add no text (offsets) */
    long long text_offset;             /* completions: character offset of the first token */
};

/* One tool call of a chat answer. */
struct oai_call {
    const char *id, *name, *arguments; /* arguments: JSON text (in a stream chunk, the next
                                        * piece of it; id and name NULL after the first) */
};

/* One choice of a full response, or the delta of one stream chunk. */
struct oai_choice {
    int index;
    const char *text;          /* content (chat) or text (completions); may be NULL */
    size_t text_len;
    const char *reasoning;     /* reasoning_content (chat only), NULL: left out */
    size_t reasoning_len;
    const struct oai_logprobs *logprobs; /* NULL: "logprobs": null */
    const char *finish_reason; /* NULL: null */
    const struct oai_call *calls; /* (n_calls) tool calls (chat): message.tool_calls, or in a
                                     stream delta.tool_calls with indices first_call.. */
    int n_calls, first_call;
    bool legacy_call;          /* write function_call (the legacy shape) instead */
    bool content_null;         /* a whole message: "content": null */
};

/* Characters (code points) in the text the tokens ids[0..n) add (for text_offset). */
long long oai_logprobs_chars(const struct tokenizer *tok, const int32_t *ids, int n,
                             bool skip_special);

/* chat.completion / text_completion with choices and usage. */
char *oai_response_body(const struct oai_meta *m, const struct oai_choice *c, int n,
                        const struct oai_usage *u);

/* One stream chunk (chat.completion.chunk / text_completion) for one choice. role_first adds
 * "role":"assistant" to the chat delta; usage_null adds "usage":null (stream_options
 * include_usage asks for it on every chunk). The chat delta has "content" when c->text is set
 * (or role_first) and "reasoning_content" when c->reasoning is. */
char *oai_stream_chunk(const struct oai_meta *m, const struct oai_choice *c, bool role_first,
                       bool usage_null);

/* The last chunk of an include_usage stream: no choices, the usage. */
char *oai_stream_usage(const struct oai_meta *m, const struct oai_usage *u);

/* A /v1/embeddings answer: {"object": "list", "data": [{"object": "embedding", "index": i,
 * "embedding": vecs[i]}], "model", "usage": {"prompt_tokens", "total_tokens"}}; each vector
 * dim floats, written as numbers of 9 significant digits (which read back as the same f32), or
 * (base64) as the base64 of its little-endian f32 bytes, as OpenAI's encoding_format asks.
 * malloc'd (caller frees); NULL on no memory. */
char *oai_embeddings_body(const char *model, const float *const *vecs, int n, int dim,
                          bool base64, int prompt_tokens);

/* A /v1/rerank answer: {"id", "model", "object": "list", "results": [{"index": i,
 * "relevance_score": scores[i], "document": {"text": docs[i].text}}], "usage":
 * {"prompt_tokens", "total_tokens"}, "meta"} ("id" only when id is not NULL): the n documents
 * best first (reranker_order), the first top_n of them (0: all), "document" only when docs
 * is not NULL; a score of 17 significant digits (the double); Cohere's "meta": {"tokens":
 * {"input_tokens", "output_tokens"}} too (its v2 clients require a meta). malloc'd (caller
 * frees); NULL on no memory. */
char *oai_rerank_body(const char *id, const char *model, const double *scores, int n, int top_n,
                      const struct oai_prompt *docs, int prompt_tokens);

#endif
