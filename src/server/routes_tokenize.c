/*
 * routes_tokenize.c: vLLM's POST /tokenize (a prompt, or chat messages through the template)
 * and POST /detokenize. HTTP threads; the tokenizer is safe to share between threads.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "routes.h"
#include "server_impl.h"
#include "tokenizer.h"

enum MHD_Result route_tokenize(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct server *srv = c->srv;
    struct oai_tokenize_request r;
    struct oai_error e;
    int32_t *ids = NULL;
    int n = 0;
    enum ll_status s = oai_tokenize_parse(&r, c->body, c->body_len, &e);
    if (s == LL_OK)
        s = route_check_model(c, r.model, &e);
    if (s == LL_OK && r.chat_context)
        s = tools_context(&srv->tools, r.tools, OAI_TOOL_AUTO, r.chat_context, &e);
    if (s == LL_OK && r.chat_context) {
        s = route_chat_encode(c, r.chat_context, r.add_special_tokens, &ids, &n, &e);
    } else if (s == LL_OK) {
        struct ll_err err = {0};
        size_t cnt = 0;
        s = tokenizer_encode(srv->tok, r.prompt, r.prompt_len, r.add_special_tokens, &ids, &cnt,
                             &err);
        if (s != LL_OK)
            oai_error_set(&e, s, NULL, NULL, "tokenizer: %s", err.msg);
        n = (int)cnt;
    }
    if (s != LL_OK) {
        res = respond_error(c, &e);
    } else {
        struct ll_buf b = {0};
        ll_buf_puts(&b, "{\"count\":");
        ll_json_put_int(&b, n);
        ll_buf_puts(&b, ",\"max_model_len\":");
        ll_json_put_int(&b, srv->n_ctx);
        ll_buf_puts(&b, ",\"tokens\":[");
        for (int i = 0; i < n; i++) {
            if (i)
                ll_buf_puts(&b, ",");
            ll_json_put_int(&b, ids[i]);
        }
        ll_buf_puts(&b, "],\"token_strs\":");
        if (r.return_token_strs) {
            ll_buf_puts(&b, "[");
            for (int i = 0; i < n; i++) {
                if (i)
                    ll_buf_puts(&b, ",");
                ll_json_put_cstr(&b, tokenizer_id_to_token(srv->tok, ids[i]));
            }
            ll_buf_puts(&b, "]");
        } else {
            ll_buf_puts(&b, "null");
        }
        ll_buf_puts(&b, "}");
        res = respond_json(c, 200, ll_buf_take(&b));
    }
    free(ids);
    oai_tokenize_free(&r);
    return res;
}

enum MHD_Result route_detokenize(struct http_ctx *c)
{
    enum MHD_Result res;
    if (!route_require_ready(c, &res))
        return res;
    struct server *srv = c->srv;
    struct oai_detokenize_request r;
    struct oai_error e;
    enum ll_status s = oai_detokenize_parse(&r, c->body, c->body_len, &e);
    if (s == LL_OK)
        s = route_check_model(c, r.model, &e);
    int32_t vocab = tokenizer_vocab_size(srv->tok);
    for (int i = 0; s == LL_OK && i < r.n_ids; i++)
        if (r.ids[i] >= vocab)
            s = oai_error_set(&e, LL_EINVAL, "tokens", "invalid_value",
                              "'tokens[%d]' is %d, outside the vocabulary (0..%d)", i, r.ids[i],
                              vocab - 1);
    char *text = NULL;
    size_t len = 0;
    if (s == LL_OK) {
        struct ll_err err = {0};
        s = tokenizer_decode(srv->tok, r.ids, (size_t)r.n_ids, false, &text, &len, &err);
        if (s != LL_OK)
            oai_error_set(&e, s, NULL, NULL, "tokenizer: %s", err.msg);
    }
    if (s != LL_OK) {
        res = respond_error(c, &e);
    } else {
        struct ll_buf b = {0};
        ll_buf_puts(&b, "{\"prompt\":");
        ll_json_put_str(&b, text, len);
        ll_buf_puts(&b, "}");
        res = respond_json(c, 200, ll_buf_take(&b));
    }
    free(text);
    oai_detokenize_free(&r);
    return res;
}
