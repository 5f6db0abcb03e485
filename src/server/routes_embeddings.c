/*
 * routes_embeddings.c: POST /v1/embeddings: each input (text, encoded with the tokenizer's
 * special tokens as a sentence-transformers model expects them, or token ids) becomes one
 * embedding request of the engine (engine.h "Embeddings"), pooled as the server chose
 * (--pooling, else the model directory's files: pooling.h); one generation job holds them
 * (gen_job.h), so auth, rate limits, cancellation, the request timeout, metrics and the log
 * line work as for completions. HTTP thread of the connection.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "routes.h"
#include "server_impl.h"
#include "tokenizer.h"

enum MHD_Result route_embeddings(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct server *srv = c->srv;
    struct oai_request r;
    struct oai_error e;
    int32_t **ids = NULL;
    int *n = NULL;
    const int hidden = engine_model(srv->engine)->config.hidden_size;
    const int vocab = tokenizer_vocab_size(srv->tok);
    enum ll_status s = oai_embeddings_parse(&r, c->body, c->body_len, &e);
    if (s == LL_OK)
        s = route_check_model(c, r.model, &e);
    if (s == LL_OK && srv->pooling.mode == LL_POOL_NONE)
        s = oai_error_set(&e, LL_EUNSUPPORTED, NULL, "unsupported_model",
                          "This model's embeddings are not available: %s (--pooling chooses "
                          "one)", srv->embed_why);
    if (s == LL_OK && r.dimensions > hidden)
        s = oai_error_set(&e, LL_EINVAL, "dimensions", "invalid_value",
                          "'dimensions' is %d; this model's embeddings have %d", r.dimensions,
                          hidden);
    if (s == LL_OK && (!(ids = calloc((size_t)r.n_prompts, sizeof *ids)) ||
                       !(n = calloc((size_t)r.n_prompts, sizeof *n))))
        s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
    for (int p = 0; s == LL_OK && p < r.n_prompts; p++) {
        const struct oai_prompt *q = &r.prompts[p];
        char param[32];
        snprintf(param, sizeof param, r.n_prompts > 1 ? "input[%d]" : "input", p);
        if (!q->text) { /* ids: checked here, as an input may be submitted late (gen_job.c) */
            for (int i = 0; i < q->n_ids && s == LL_OK; i++)
                if (q->ids[i] >= vocab)
                    s = oai_error_set(&e, LL_EINVAL, param, "invalid_value",
                                      "'%s' holds token id %d, outside the vocabulary (0..%d)",
                                      param, q->ids[i], vocab - 1);
            if (s == LL_OK && !(ids[p] = malloc((size_t)q->n_ids * sizeof *ids[p])))
                s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
            if (s == LL_OK)
                memcpy(ids[p], q->ids, (size_t)q->n_ids * sizeof *ids[p]);
            n[p] = q->n_ids;
            continue;
        }
        struct ll_err err = {0};
        size_t cnt = 0;
        s = tokenizer_encode(srv->tok, q->text, q->text_len, true, &ids[p], &cnt, &err);
        if (s != LL_OK)
            oai_error_set(&e, s, NULL, NULL, "tokenizer: %s", err.msg);
        else if (cnt == 0)
            s = oai_error_set(&e, LL_EINVAL, param, "invalid_value", "'%s' has no tokens", param);
        else if (cnt > (size_t)srv->n_ctx)
            s = oai_error_set(&e, LL_ETOOLONG, param, "context_length_exceeded",
                              "This model's maximum context length is %d tokens, but '%s' has "
                              "%zu tokens", srv->n_ctx, param, cnt);
        n[p] = (int)cnt;
    }
    return route_run_job(c, s, &r, ids, n, &e);
}
