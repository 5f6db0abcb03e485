/*
 * responses_out.h: the JSON of the Responses API (/v1/responses): output items, the response
 * object, the typed stream events, and stored input items. Functions of cJSON trees (ids drawn
 * at random); any thread.
 *
 * Output items, in the order they are produced: a "reasoning" item (the <think> part, as one
 * reasoning_text content part), a "message" item (one output_text part), "function_call"
 * items. Stream events: response.created, response.in_progress, then per item
 * response.output_item.added, its deltas (response.reasoning_text.delta,
 * response.content_part.added + response.output_text.delta, or
 * response.function_call_arguments.delta), their .done events and response.output_item.done,
 * and last response.completed (or response.incomplete, response.failed) with the whole object.
 * Every event carries "type" and "sequence_number".
 */
#ifndef LLAISYS_RESPONSES_OUT_H
#define LLAISYS_RESPONSES_OUT_H

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

enum resp_item_kind { RI_REASONING, RI_MESSAGE, RI_CALL };

/* One output item as far as it is known. */
struct resp_item {
    enum resp_item_kind kind;
    char id[40];           /* rs_…, msg_…, fc_… */
    const char *text;      /* reasoning / message text (len bytes) */
    size_t len;
    const char *call_id, *name, *arguments; /* a function call */
    bool done;             /* completed (else in_progress, text and arguments left empty) */
};

/* The item as JSON (a new tree; NULL out of memory). */
struct cJSON *resp_item_json(const struct resp_item *it);

/* The part of a message (output_text) or of reasoning (reasoning_text) with text. */
struct cJSON *resp_part_json(enum resp_item_kind kind, const char *text, size_t len);

/* The usage of a response. */
struct resp_usage {
    int input_tokens, cached_tokens, output_tokens, reasoning_tokens;
};

/* The response object: id, created_at, status ("in_progress", "completed", "incomplete",
 * "failed"), incomplete reason (NULL: none), error message (NULL: none), model, the items,
 * usage (NULL: null), and what echo (the request's echo, oai_request.resp_echo) repeats.
 * Returns a new tree or NULL. */
struct cJSON *resp_object_json(const char *id, long long created, const char *status,
                               const char *incomplete, const char *error, const char *model,
                               const struct resp_item *items, int n,
                               const struct resp_usage *u, const struct cJSON *echo);

/* Make input item it (as a request gave it, or as stored before) an item as OpenAI lists it:
 * with its type, a message's text as one input_text (or, from the assistant, output_text) part,
 * and an id if it has none (msg_, fc_, fco_ or rs_ and 32 hex digits). The Responses parse reads
 * it back the same (openai_request.c, input_item). False out of memory. */
bool resp_input_item_normalize(struct cJSON *it);

/* The text of an event: obj (taken over, freed here) with "type" and "sequence_number" added;
 * NULL out of memory. */
char *resp_event(const char *type, int seq, struct cJSON *obj);

#endif
