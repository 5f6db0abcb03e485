/*
 * routes_chat.c: POST /v1/chat/completions and POST /v1/responses (the Responses API, whose
 * body oai_responses_parse turns into the same chat request): parse and check the body, put
 * the tools in the template variables and make their call grammar (tool_calls.h), render the
 * chat template, tokenize, and hand the prompt to a generation job, which answers as the route
 * asked (chat chunks or object; the Responses API's event stream or object, responses_out.h).
 * HTTP thread of the connection.
 */
#include <stdlib.h>

#include "gen_job.h"
#include "routes.h"
#include "server_impl.h"

/* Everything after parsing: parsed is the parse's status (r is freed here either way). */
static enum MHD_Result run_chat(struct http_ctx *c, enum ll_status parsed, struct oai_request *r,
                                struct oai_error *e)
{
    int32_t *ids = NULL;
    int n = 0;
    struct gen_job *job = NULL;
    enum MHD_Result res;
    if (parsed != LL_OK || route_check_model(c, r->model, e) != LL_OK ||
        tools_context(&c->srv->tools, r->tools, r->tool_choice, r->chat_context, e) != LL_OK ||
        (!r->grammar && tools_grammar(&c->srv->tools, r, &r->grammar, e) != LL_OK) ||
        route_chat_encode(c, r->chat_context, false, &ids, &n, e) != LL_OK ||
        gen_job_start(&job, c, r, &ids, &n, 1, e) != LL_OK) {
        res = respond_error(c, e);
    } else {
        res = gen_job_respond(job, c);
    }
    free(ids);
    oai_request_free(r);
    return res;
}

enum MHD_Result route_chat(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    enum ll_status st = oai_request_parse(&r, OAI_CHAT, c->body, c->body_len, &e);
    if (st == LL_OK)
        st = oai_request_check_supported(&r, &e);
    return run_chat(c, st, &r, &e);
}

enum MHD_Result route_responses(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    return run_chat(c, oai_responses_parse(&r, c->body, c->body_len, &e), &r, &e);
}
