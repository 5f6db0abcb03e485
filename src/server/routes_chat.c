/*
 * routes_chat.c: POST /v1/chat/completions: parse and check the body, put the tools in the
 * template variables and make their call grammar (tool_calls.h), render the chat template,
 * tokenize, and hand the prompt to a generation job (stream or whole response).
 * HTTP thread of the connection.
 */
#include <stdlib.h>

#include "gen_job.h"
#include "routes.h"
#include "server_impl.h"

enum MHD_Result route_chat(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    int32_t *ids = NULL;
    int n = 0;
    struct gen_job *job = NULL;
    if (oai_request_parse(&r, OAI_CHAT, c->body, c->body_len, &e) != LL_OK ||
        route_check_model(c, r.model, &e) != LL_OK ||
        oai_request_check_supported(&r, &e) != LL_OK ||
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
