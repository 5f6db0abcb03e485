/*
 * routes_completions.c: POST /v1/completions: prompts given as text (encoded with the
 * tokenizer's special tokens, i.e. BOS) or as token ids, one generation job for all of them
 * (choices ordered prompt by prompt, n per prompt). HTTP thread of the connection.
 */
#include <stdlib.h>
#include <string.h>

#include "routes.h"
#include "server_impl.h"
#include "tokenizer.h"

enum MHD_Result route_completions(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct oai_request r;
    struct oai_error e;
    int32_t **ids = NULL;
    int *n = NULL;
    enum ll_status s = oai_request_parse(&r, OAI_COMPLETION, c->body, c->body_len, &e);
    if (s == LL_OK)
        s = route_check_model(c, r.model, &e);
    if (s == LL_OK)
        s = oai_request_check_supported(&r, &e);
    if (s == LL_OK && (!(ids = calloc((size_t)r.n_prompts, sizeof *ids)) ||
                       !(n = calloc((size_t)r.n_prompts, sizeof *n))))
        s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
    for (int p = 0; s == LL_OK && p < r.n_prompts; p++) {
        const struct oai_prompt *q = &r.prompts[p];
        if (!q->text) { /* ids: the job copies them; the vocabulary is checked on submit */
            if (!(ids[p] = malloc((size_t)q->n_ids * sizeof *ids[p]))) {
                s = oai_error_set(&e, LL_ENOMEM, NULL, NULL, "out of memory");
                break;
            }
            memcpy(ids[p], q->ids, (size_t)q->n_ids * sizeof *ids[p]);
            n[p] = q->n_ids;
            continue;
        }
        struct ll_err err = {0};
        size_t cnt = 0;
        s = tokenizer_encode(c->srv->tok, q->text, q->text_len, true, &ids[p], &cnt, &err);
        if (s != LL_OK) {
            oai_error_set(&e, s, NULL, NULL, "tokenizer: %s", err.msg);
        } else if (cnt == 0) {
            s = oai_error_set(&e, LL_EINVAL, "prompt", "invalid_value",
                              "prompt %d is empty (no tokens)", p);
        } else if (cnt > (size_t)1 << 30) {
            s = oai_error_set(&e, LL_ETOOLONG, "prompt", "context_length_exceeded",
                              "prompt %d is too long", p);
        }
        n[p] = (int)cnt;
    }
    return route_run_job(c, s, &r, ids, n, &e);
}
