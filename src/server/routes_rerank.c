/*
 * routes_rerank.c: POST /v1/rerank (also /rerank and Cohere's /v2/rerank): each document,
 * put with the query into the model's reranking prompt (reranker.h), becomes one embedding
 * request of the engine pooled at the last position, whose hidden state the head scores; one
 * generation job holds them (gen_job.h), so auth, rate limits, cancellation, the request
 * timeout, metrics and the log line work as for completions. HTTP thread of the connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes.h"
#include "server_impl.h"

enum MHD_Result route_rerank(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct server *srv = c->srv;
    struct oai_request r;
    struct oai_error e;
    int32_t **ids = NULL;
    int *n = NULL;
    char route[64];
    snprintf(route, sizeof route, "%.40s", c->url);
    enum ll_status s = oai_rerank_parse(&r, c->body, c->body_len, route, &e);
    if (s == LL_OK)
        s = route_check_model(c, r.model, &e);
    if (s == LL_OK && !srv->reranker.n_rows)
        s = oai_error_set(&e, LL_EUNSUPPORTED, NULL, "unsupported_model",
                          "This model does not rerank: %s", srv->rerank_why);
    if (s == LL_OK && (!(ids = calloc((size_t)r.n_prompts, sizeof *ids)) ||
                       !(n = calloc((size_t)r.n_prompts, sizeof *n))))
        s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
    for (int p = 0; s == LL_OK && p < r.n_prompts; p++) {
        struct ll_err err = {0};
        const struct oai_prompt *q = &r.prompts[p];
        s = reranker_prompt(&srv->reranker, srv->tok, r.instruction, r.query, r.query_len,
                            q->text, q->text_len, &ids[p], &n[p], &err);
        if (s != LL_OK) {
            oai_error_set(&e, s, NULL, NULL, "tokenizer: %s", err.msg);
        } else if (n[p] > srv->n_ctx) {
            char param[32];
            snprintf(param, sizeof param, "documents[%d]", p);
            s = oai_error_set(&e, LL_ETOOLONG, param, "context_length_exceeded",
                              "This model's maximum context length is %d tokens, but the query "
                              "with '%s' makes a prompt of %d tokens", srv->n_ctx, param, n[p]);
        }
    }
    if (s == LL_OK &&
        (r.cache_prefix = reranker_shared_prefix(&srv->reranker, srv->tok, r.instruction, r.query,
                                                 r.query_len, ids, n, r.n_prompts)) < 0)
        s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
    return route_run_job(c, s, &r, ids, n, &e);
}
