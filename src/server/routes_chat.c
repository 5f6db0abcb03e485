/*
 * routes_chat.c: POST /v1/chat/completions and POST /v1/responses (the Responses API, whose
 * body oai_responses_parse turns into the same chat request): parse and check the body, put
 * the tools in the template variables and make their call grammar (tool_calls.h), render the
 * chat template, tokenize, and hand the prompt to a generation job, which answers as the route
 * asked (chat chunks or object; the Responses API's event stream or object, responses_out.h).
 * A Responses request is stored unless it says store: false (resp_store.h; the job keeps it
 * when it ends), and previous_response_id continues a stored one's conversation.
 * HTTP thread of the connection.
 */
#include <stdlib.h>

#include <cjson/cJSON.h>
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

/* A parsed Responses request's store: whether it is kept (r->store, echoed in the response),
 * and the stored conversation that previous_response_id continues. */
static enum ll_status responses_store(struct http_ctx *c, struct oai_request *r,
                                      struct oai_error *e)
{
    struct resp_store *st = &c->srv->responses;
    const bool on = resp_store_enabled(st);
    if (r->has_store && r->store && !on)
        return oai_error_set(e, LL_EUNSUPPORTED, "store", "unsupported_parameter",
                             "'store': this server keeps no responses (--responses-store-mb 0); "
                             "leave it out or send false");
    r->store = r->has_store ? r->store : on;
    cJSON_DeleteItemFromObjectCaseSensitive(r->resp_echo, "store");
    if (!cJSON_AddBoolToObject(r->resp_echo, "store", r->store))
        return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    if (!r->prev_response_id)
        return LL_OK;
    /* its conversation: its input items, then its output */
    const uint64_t owner = request_owner(c);
    char *input, *object;
    cJSON *history = NULL, *o = NULL, *out = NULL, *it;
    if (resp_store_get(st, r->prev_response_id, owner, &object, &input)) {
        history = cJSON_Parse(input);
        o = cJSON_Parse(object);
        out = cJSON_DetachItemFromObjectCaseSensitive(o, "output");
        free(input);
        free(object);
    }
    cJSON_Delete(o);
    while (history && out && (it = out->child))
        cJSON_AddItemToArray(history, cJSON_DetachItemViaPointer(out, it));
    cJSON_Delete(out);
    if (!history)
        return oai_error_set(e, LL_EINVAL, "previous_response_id", "previous_response_not_found",
                             "Previous response with id '%.60s' not found (" RESP_STORE_WHY ")",
                             r->prev_response_id);
    return oai_responses_continue(r, history, e);
}

enum MHD_Result route_responses(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    enum ll_status st = oai_responses_parse(&r, c->body, c->body_len, &e);
    if (st == LL_OK)
        st = responses_store(c, &r, &e);
    return run_chat(c, st, &r, &e);
}
