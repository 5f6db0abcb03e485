/*
 * routes_responses.c: POST /v1/responses (the Responses API): the body becomes a chat request
 * (oai_responses_parse), then the tools, the template and the generation job as for
 * /v1/chat/completions; the job answers with the response object or the typed event stream
 * (responses_out.h). HTTP thread of the connection.
 */
#include <stdlib.h>

#include "gen_job.h"
#include "routes.h"
#include "server_impl.h"

enum MHD_Result route_responses(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    int32_t *ids = NULL;
    int n = 0;
    struct gen_job *job = NULL;
    if (oai_responses_parse(&r, c->body, c->body_len, &e) != LL_OK ||
        route_check_model(c, r.model, &e) != LL_OK ||
        tools_context(&c->srv->tools, r.tools, r.tool_choice, r.chat_context, &e) != LL_OK ||
        (!r.grammar && tools_grammar(&c->srv->tools, &r, &r.grammar, &e) != LL_OK) ||
        route_chat_encode(c, r.chat_context, false, &ids, &n, &e) != LL_OK ||
        gen_job_start(&job, c, &r, &ids, &n, 1, &e) != LL_OK) {
        res = respond_error(c, &e);
    } else {
        res = gen_job_respond(job, c);
    }
    free(ids);
    oai_request_free(&r);
    return res;
}
