/*
 * openai_request.h: JSON bodies of the OpenAI-compatible routes turned into checked request
 * parameters: /v1/chat/completions, /v1/completions, and vLLM's /tokenize and /detokenize.
 *
 * Parsing checks JSON syntax, UTF-8, every known field's type and range (naming the field), and
 * normalises chat messages into the variables a chat template sees. A field the server does not
 * implement is refused (LL_EUNSUPPORTED, code "unsupported_parameter", naming it), except
 * OpenAI's hints (user, metadata, store, service_tier, reasoning_effort, prompt_cache_key,
 * safety_identifier), which are type-checked and have no effect; JSON null counts as absent.
 * response_format (json_object, json_schema) and vLLM's guided_json are compiled into a grammar
 * here (grammar.h), so a schema the engine cannot enforce is a 400 naming the keyword. What depends on the loaded model (context length, vocabulary,
 * served name) is checked later by the server. Pure functions of their input: any thread.
 */
#ifndef LLAISYS_OPENAI_REQUEST_H
#define LLAISYS_OPENAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "errors.h"
#include "gen_params.h"

struct cJSON;
struct grammar;

/* Limits of a request. Stop strings, stop ids, logit_bias entries and top_logprobs take the
 * engine's and the sampler's (ENGINE_MAX_*, SAMPLER_MAX_TOP_LOGPROBS); sampling values the
 * ranges of gen_params.h. */
#define OAI_MAX_N 64        /* choices per request (`n` times the prompts) */
#define OAI_MAX_PROMPTS 64  /* prompts in one /v1/completions request */
#define OAI_MAX_INPUTS 2048 /* inputs in one /v1/embeddings request (OpenAI's limit) */
#define OAI_MAX_BIAS 100.0  /* a logit_bias value lies in [-100, 100] */
#define OAI_MAX_COMPLETION_LOGPROBS 5 /* the legacy completions "logprobs" number */

/* An error as the routes report it: the status gives the HTTP code and error.type (errors.h);
 * param and code are OpenAI's error.param / error.code ("" for null). */
struct oai_error {
    enum ll_status status;
    char param[64];    /* the field at fault, e.g. "messages[1].content", or "" */
    char code[48];     /* e.g. "model_not_found", "context_length_exceeded", or "" */
    char message[512];
};

/* Fill *e and return status (e may be NULL). param/code may be NULL. */
enum ll_status oai_error_set(struct oai_error *e, enum ll_status status, const char *param,
                             const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The error body {"error": {"message", "type", "param", "code"}} as a malloc'd JSON string
 * (caller frees); NULL on no memory. */
char *oai_error_json(const struct oai_error *e);

/* The inner error object {"message", "type", "param", "code"} as a new cJSON tree (caller
 * deletes); NULL on no memory. */
struct cJSON *oai_error_object(const struct oai_error *e);

enum oai_kind {
    OAI_CHAT,       /* /v1/chat/completions */
    OAI_COMPLETION, /* /v1/completions */
    OAI_RESPONSES,  /* /v1/responses: a chat request in the Responses API's shape */
    OAI_EMBEDDING,  /* /v1/embeddings: its inputs in prompts, nothing generated */
    OAI_RERANK,     /* /v1/rerank: its documents in prompts (text), nothing generated */
};

/* One prompt of /v1/completions: text (to be encoded with BOS) or token ids. */
struct oai_prompt {
    char *text;     /* NULL when given as ids */
    size_t text_len;
    int32_t *ids;   /* (n_ids) when given as ids, else NULL */
    int n_ids;
};

/* tool_choice (chat; the legacy function_call maps onto it). */
enum oai_tool_choice {
    OAI_TOOL_AUTO,     /* the model decides (default with tools) */
    OAI_TOOL_NONE,     /* tools are not offered to the model */
    OAI_TOOL_REQUIRED, /* at least one call */
    OAI_TOOL_NAMED,    /* exactly the function tool_choice names */
};

/* A parsed generation request. Owned by the caller; free with oai_request_free. Fields not
 * given keep the defaults documented here; has_* tells whether one was given. */
struct oai_request {
    enum oai_kind kind;
    char *model;                 /* NULL when absent */
    bool stream;
    bool include_usage;          /* stream_options.include_usage */
    int max_tokens;              /* max_completion_tokens, else max_tokens; 0: not given */
    int min_tokens;              /* vLLM extension: 0..max_tokens (default 0) */
    int n;                       /* choices per prompt, 1..OAI_MAX_N (default 1) */
    struct gen_settings sampling; /* temperature, top_p, top_k, min_p, seed and the penalties,
                                     each with has_* (gen_params.h decides the rest) */
    struct sampler_bias *logit_bias; /* (n_logit_bias) values in [-OAI_MAX_BIAS, OAI_MAX_BIAS] */
    int n_logit_bias;            /* <= ENGINE_MAX_LOGIT_BIAS */
    bool logprobs;               /* chat: logprobs; completions: logprobs not null */
    int top_logprobs;            /* chat: top_logprobs; completions: the logprobs number */
    char **stop;                 /* (n_stop) strings of 1..ENGINE_MAX_STOP_LEN bytes */
    int n_stop;                  /* <= ENGINE_MAX_STOP_STRINGS */
    int32_t stop_token_ids[ENGINE_MAX_STOP_IDS]; /* vLLM extension */
    int n_stop_token_ids;
    bool ignore_eos;             /* vLLM extension (default false) */
    bool skip_special_tokens;    /* vLLM extension (default true) */
    bool echo;                   /* completions (default false) */
    char *user;                  /* NULL when absent */
    char *session_id;            /* llaisys: the session of this turn (sessions.h), or NULL */
    bool no_cache;               /* cache_prompt / reuse_prefix false (default: both true) */

    /* structured output: response_format json_object / json_schema or vLLM's guided_json */
    struct grammar *grammar;     /* the constraint (a reference), or NULL */

    /* chat tools: [{"type": "function", "function": {name, description?, parameters?,
     * strict?}}], checked (names unique, [A-Za-z0-9_-]{1,64}); NULL when none */
    struct cJSON *tools;
    int n_tools;
    enum oai_tool_choice tool_choice;
    char *tool_choice_name;      /* OAI_TOOL_NAMED */
    bool parallel_tool_calls;    /* default true (false with the legacy fields) */
    bool legacy_functions;       /* sent as functions / function_call: answered in that shape */

    /* chat: the template variables: {"messages": [...], "add_generation_prompt": bool, and
     * chat_template_kwargs' keys} ("tools" is added by the server: tool_calls.h). Message
     * content is a string (text parts joined with "\n") or null; role "developer" becomes
     * "system"; the legacy role "function" becomes "tool" and an assistant's function_call a
     * tool call. */
    struct cJSON *chat_context;

    /* completions */
    struct oai_prompt *prompts;  /* (n_prompts) */
    int n_prompts;

    /* responses: what the response object repeats of the request (instructions, tools,
     * tool_choice, text, temperature, top_p, max_output_tokens, ...), a JSON object */
    struct cJSON *resp_echo;
    /* responses: the conversation (resp_store.h): the request's own input items (a string
     * input as one user message item; after oai_responses_continue, the previous response's
     * conversation first), its instructions (NULL: none), previous_response_id (NULL: none),
     * and store (has_store: given; the server decides the default) */
    struct cJSON *resp_input;
    char *resp_instructions;
    char *prev_response_id;
    bool store, has_store;

    /* embeddings: encoding_format "base64" (little-endian f32, base64) rather than "float";
     * dimensions (0: the model's): the first this many, normalized again */
    bool embed_base64;
    int dimensions;

    /* rerank: the query (its length: it may hold NUL bytes), the instruction (llaisys; NULL:
     * reranker.h's default), top_n (0: every document), return_documents */
    char *query;
    size_t query_len;
    char *instruction;
    int top_n;
    bool return_documents;
    int cache_prefix;            /* rerank: set by the route (not parsed): the tokens its
                                    documents' prompts share (reranker_shared_prefix) */
};

#define OAI_RESPONSE_ID_MAX 47 /* bytes of a response id ("resp_" and 32 hex digits here) */

/* Parse a request body of `kind` (len bytes, need not be NUL-terminated). On LL_OK *r owns its
 * fields; on error *r is left empty (safe to free) and *e says what and where. Returns LL_OK;
 * LL_EUTF8 (body not UTF-8), LL_EJSON (syntax: names the line, column and byte offset),
 * LL_ETYPE (the body or a field of the wrong type, code "invalid_type"), LL_EINVAL (a field out
 * of range, code "invalid_value", or missing, "missing_required_parameter"; param names it),
 * LL_EUNSUPPORTED (a field the server does not implement: suffix, non-text content parts),
 * LL_ENOMEM. */
enum ll_status oai_request_parse(struct oai_request *r, enum oai_kind kind, const char *body,
                                 size_t len, struct oai_error *e);

/* POST /v1/responses: {model, input (a string, or items: messages with input_text /
 * output_text parts, function_call, function_call_output, reasoning (left out of the prompt)),
 * instructions (a system message first), tools ([{type: "function", name, description,
 * parameters, strict}]), tool_choice, parallel_tool_calls, text.format (text, json_object,
 * json_schema {name, schema, strict}), max_output_tokens, temperature, top_p, stream,
 * truncation ("disabled"), include ([]), reasoning (a hint), and the hints of the chat route}
 * into a chat request (kind OAI_RESPONSES, n = 1); previous_response_id and store are kept
 * for the server (the template's messages are then only the request's own: see
 * oai_responses_continue). Same returns as oai_request_parse. */
enum ll_status oai_responses_parse(struct oai_request *r, const char *body, size_t len,
                                   struct oai_error *e);

/* Continue r (a Responses request with prev_response_id) after that response's stored
 * conversation `history` (a JSON array of items, taken): the template's messages become the
 * instructions, history's items, then r's own input; resp_input becomes history + own input.
 * LL_OK, or LL_EINVAL / LL_ENOMEM in *e. */
enum ll_status oai_responses_continue(struct oai_request *r, struct cJSON *history,
                                      struct oai_error *e);

/* Whether the engine can serve what r asks: LL_OK, or LL_EUNSUPPORTED naming the field when
 * it cannot (echo together with logprobs: the prompt's logprobs are not computed). */
/* (a request field the server does not implement is refused by the parse already) */
enum ll_status oai_request_check_supported(const struct oai_request *r, struct oai_error *e);

/* Free what a parse allocated and zero *r (safe on a zeroed struct). */
void oai_request_free(struct oai_request *r);

/* The engine parameters of r for the model whose generation_config.json gave g: sampling and
 * penalties by gen_params_resolve (gen_params.h), every other control copied from r (the
 * grammar of response_format included; a tool-call grammar is the server's to set). The
 * prompt, choice and reasoning fields are left zero for the caller; arrays and strings point
 * into r (valid while r is; engine_submit copies them or takes references). */
void oai_request_params(const struct oai_request *r, const struct generation_defaults *g,
                        struct engine_params *out);

/* POST /v1/embeddings: {model, input (a non-empty string, strings, token ids or arrays of
 * ids: at most OAI_MAX_INPUTS), encoding_format ("float" or "base64"), dimensions (>= 1),
 * user, and llama.cpp's cache_prompt / vLLM's reuse_prefix} into r (kind OAI_EMBEDDING, the
 * inputs in prompts). Any other field is refused naming it. Same returns as
 * oai_request_parse. */
enum ll_status oai_embeddings_parse(struct oai_request *r, const char *body, size_t len,
                                    struct oai_error *e);

/* POST /v1/rerank (Jina's and Cohere's shape, as vLLM and llama.cpp serve it): {model, query
 * (a non-empty string), documents (1..OAI_MAX_INPUTS strings, or objects {"text": string}),
 * top_n (>= 1), return_documents, user, instruction (llaisys: Qwen3-Reranker's <Instruct>),
 * cache_prompt / reuse_prefix} into r (kind OAI_RERANK, the documents as text prompts). `route`
 * names the route in messages. Any other field is refused naming it. Same returns as
 * oai_request_parse. */
enum ll_status oai_rerank_parse(struct oai_request *r, const char *body, size_t len,
                                const char *route, struct oai_error *e);

/* One line of `llaisys-cli batch` (len bytes): a /v1/chat/completions body when it has
 * "messages", else a /v1/completions body, parsed and checked as oai_request_parse does, plus
 * the batch's own "id" (any JSON value, echoed in the output). A line with both "messages" and
 * "prompt", or with neither, is refused (param names the field); so is "ids" (token ids are
 * given as "prompt"). *id gets a copy of "id" (NULL when absent, or when the line is not a
 * JSON object), the caller's to cJSON_Delete whatever the status. Returns as
 * oai_request_parse. */
enum ll_status oai_batch_line_parse(struct oai_request *r, struct cJSON **id, const char *line,
                                    size_t len, struct oai_error *e);

/* POST /tokenize (vLLM): either {"prompt": string, "add_special_tokens" (default true)} or
 * {"messages": [...], "add_generation_prompt" (default true), "add_special_tokens" (default
 * false), "chat_template_kwargs", "tools"}; optional "model", "return_token_strs". */
struct oai_tokenize_request {
    char *model;                 /* NULL when absent */
    char *prompt;                /* the prompt form, else NULL */
    size_t prompt_len;
    struct cJSON *chat_context;  /* the messages form (as in struct oai_request), else NULL */
    struct cJSON *tools;         /* the messages form's "tools" (checked as for chat), or NULL */
    bool add_special_tokens;
    bool return_token_strs;
};

/* POST /detokenize (vLLM): {"tokens": [ids], "model"?}. */
struct oai_detokenize_request {
    char *model;
    int32_t *ids;                /* (n_ids) */
    int n_ids;
};

/* Parse the bodies above; same returns and ownership as oai_request_parse. */
/* (tokenize checks its fields too; detokenize knows tokens and model) */
enum ll_status oai_tokenize_parse(struct oai_tokenize_request *r, const char *body, size_t len,
                                  struct oai_error *e);
enum ll_status oai_detokenize_parse(struct oai_detokenize_request *r, const char *body,
                                    size_t len, struct oai_error *e);
void oai_tokenize_free(struct oai_tokenize_request *r);
void oai_detokenize_free(struct oai_detokenize_request *r);

#endif
