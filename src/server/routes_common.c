/*
 * routes_common.c: checks the routes share: readiness, the model name, and chat prompts
 * (template render + tokenize). HTTP threads; read-only server state.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "gen_job.h"
#include "routes.h"
#include "server_impl.h"
#include "tokenizer.h"

bool route_require_ready(struct http_ctx *c, enum MHD_Result *res)
{
    int st = atomic_load(&c->srv->state);
    if (st == SERVER_READY)
        return true;
    struct oai_error e;
    oai_error_set(&e, LL_EUNAVAILABLE, NULL, st == SERVER_LOADING ? "model_loading" : "shutting_down",
                  st == SERVER_LOADING ? "The model is still loading; retry shortly"
                                       : "The server is shutting down");
    *res = respond_error(c, &e);
    return false;
}

enum ll_status route_check_model(struct http_ctx *c, const char *model, struct oai_error *e)
{
    if (!model || !strcmp(model, c->srv->served_name))
        return LL_OK;
    return oai_error_set(e, LL_ENOTFOUND, "model", "model_not_found",
                         "The model '%.200s' does not exist; this server serves '%s'", model,
                         c->srv->served_name);
}

enum ll_status route_chat_encode(struct http_ctx *c, const struct cJSON *context,
                                 bool add_special, int32_t **ids, int *n, struct oai_error *e)
{
    struct server *srv = c->srv;
    *ids = NULL;
    *n = 0;
    if (!srv->tmpl)
        return oai_error_set(e, LL_EUNSUPPORTED, "messages", "no_chat_template",
                             "This model has no chat template; use /v1/completions or start the "
                             "server with --chat-template");
    char *text = NULL;
    size_t len = 0;
    struct ll_err err = {0};
    enum ll_status s =
        chat_template_render_ex(srv->tmpl, context, srv->bos, srv->eos, NULL, &text, &len, &err);
    if (s != LL_OK)
        return oai_error_set(e, s == LL_ENOMEM ? LL_ENOMEM : (s == LL_ETOOLONG ? LL_ETOOLONG
                                                                               : LL_ETEMPLATE),
                             "messages", "chat_template_error", "%s", err.msg);
    size_t cnt = 0;
    s = tokenizer_encode(srv->tok, text, len, add_special, ids, &cnt, &err);
    free(text);
    if (s != LL_OK)
        return oai_error_set(e, s, NULL, NULL, "tokenizer: %s", err.msg);
    if (cnt > INT_MAX / 2) {
        free(*ids);
        *ids = NULL;
        return oai_error_set(e, LL_ETOOLONG, "messages", "context_length_exceeded",
                             "The prompt is too long");
    }
    *n = (int)cnt;
    return LL_OK;
}

enum MHD_Result route_run_job(struct http_ctx *c, enum ll_status s, struct oai_request *r,
                              int32_t **ids, int *n, struct oai_error *e)
{
    struct gen_job *job = NULL;
    if (s == LL_OK)
        s = gen_job_start(&job, c, r, ids, n, r->n_prompts, e);
    enum MHD_Result res = s != LL_OK ? respond_error(c, e) : gen_job_respond(job, c);
    for (int p = 0; ids && p < r->n_prompts; p++)
        free(ids[p]);
    free(ids);
    free(n);
    oai_request_free(r);
    return res;
}
