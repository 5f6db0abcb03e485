/*
 * gen_job.h: one chat/completions request in the engine: its engine requests (one per prompt
 * and choice), and the response made from their outputs, whole or streamed as SSE chunks.
 * A job belongs to its connection's thread (see gen_job.c for the one exception).
 */
#ifndef LLAISYS_GEN_JOB_H
#define LLAISYS_GEN_JOB_H

#include <stdint.h>

#include "openai_request.h"
#include "respond.h"

struct gen_job;

/* The owner of what a request keeps (sessions, stored responses): a hash of its Authorization
 * header when the server has API keys, else 0. */
uint64_t request_owner(struct http_ctx *c);

/* Submit one engine request per (prompt, choice) and register with the watcher. prompts[p] has
 * n_ids[p] ids (copied by the engine). On LL_OK *out belongs to the caller, who must hand it
 * to gen_job_respond; on error nothing is left and *e says why (429 queue full, 400 too long,
 * 400 invalid value, 500). */
enum ll_status gen_job_start(struct gen_job **out, struct http_ctx *c,
                             const struct oai_request *r, int32_t *const *prompts,
                             const int *n_ids, int n_prompts, struct oai_error *e);
/* Answer c with the job: a stream (an SSE response that owns the job from here), or, for a
 * non-stream request, wait for every choice and queue the whole response (or drop the
 * connection if the client went away). Either way the job is finished (its engine requests
 * released, metrics recorded, the log line written, freed) by the time it is no longer needed;
 * the caller must not touch it again. Returns MHD's result. */
enum MHD_Result gen_job_respond(struct gen_job *j, struct http_ctx *c);

#endif
