/*
 * routes.h: the API routes, each answering one request of struct http_ctx (after auth: http.c
 * dispatches), and the checks they share (routes_common.c). The connection's thread.
 * Every route queues a response (or drops the connection) and returns MHD's result.
 */
#ifndef LLAISYS_ROUTES_H
#define LLAISYS_ROUTES_H

#include <stdbool.h>
#include <stdint.h>

#include "openai_request.h"
#include "respond.h"

struct cJSON;

enum MHD_Result route_chat(struct http_ctx *c);        /* routes_chat.c */
enum MHD_Result route_completions(struct http_ctx *c); /* routes_completions.c */
enum MHD_Result route_embeddings(struct http_ctx *c);  /* routes_embeddings.c */
enum MHD_Result route_rerank(struct http_ctx *c);      /* routes_rerank.c */
enum MHD_Result route_responses(struct http_ctx *c);   /* routes_chat.c */
enum MHD_Result route_models(struct http_ctx *c);      /* routes_info.c: GET /v1/models[/id] */
enum MHD_Result route_health(struct http_ctx *c);      /* routes_info.c */
enum MHD_Result route_metrics(struct http_ctx *c);     /* routes_info.c */
enum MHD_Result route_tokenize(struct http_ctx *c);    /* routes_tokenize.c */
enum MHD_Result route_detokenize(struct http_ctx *c);  /* routes_tokenize.c */
enum MHD_Result route_cancel(struct http_ctx *c, const char *id); /* routes_info.c */
/* routes_info.c: GET /v1/requests/{id}: a generation request's status while it runs (the live
 * table) and for --request-retention seconds after (req_history.h); only the caller's key's
 * requests, by response id or X-Request-Id; else 404. */
enum MHD_Result route_request_status(struct http_ctx *c, const char *id);
/* routes_sessions.c: POST /v1/sessions (body optional: {"id": "..."}), GET and DELETE
 * /v1/sessions/{id}. */
enum MHD_Result route_sessions(struct http_ctx *c, const char *id);
/* routes_responses.c: GET and DELETE /v1/responses/{id}: a stored response (resp_store.h) of
 * the caller's key, else 404. */
enum MHD_Result route_response_stored(struct http_ctx *c, const char *id);

/* Answer 503 unless READY (*res: MHD's result); returns true when ready. */
bool route_require_ready(struct http_ctx *c, enum MHD_Result *res);
/* LL_OK when model is NULL or the served name; else LL_ENOTFOUND (404 model_not_found) in *e. */
enum ll_status route_check_model(struct http_ctx *c, const char *model, struct oai_error *e);
/* The end of a route whose request r has one prompt per r->n_prompts (ids[p], n[p] tokens):
 * when s, the route's status so far, is LL_OK, the generation job over them runs and answers
 * (gen_job.h); otherwise, or when the job cannot start, the error in *e is answered. Frees
 * ids, n and r in any case (ids and n may be NULL). */
enum MHD_Result route_run_job(struct http_ctx *c, enum ll_status s, struct oai_request *r,
                              int32_t **ids, int *n, struct oai_error *e);
/* Render the chat template for context and encode it (no BOS added: the template writes it
 * unless add_special). *ids is malloc'd (caller frees), *n its length. Errors in *e: 400
 * template or no template, 400 too long, 500 out of memory. */
enum ll_status route_chat_encode(struct http_ctx *c, const struct cJSON *context,
                                 bool add_special, int32_t **ids, int *n, struct oai_error *e);

#endif
