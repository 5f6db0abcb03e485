/*
 * fuzz_openai_request.c: the OpenAI request schema (src/server/openai_request.c) and what the
 * chat routes do with a parsed request before the engine (a Responses request naming a
 * previous response continued after its own items again, oai_responses_continue): the tools into the template
 * variables (tools_context), the tool-call grammar (tools_grammar, compiling every function's
 * parameter schema), the chat template render and the tokenizer.
 *
 * Input: one mode byte, then the body. Mode % 6: chat, completions (with mode bit 4:
 * /v1/embeddings, its inputs encoded and an answer written for them), responses, a
 * `llaisys-cli batch` line, /tokenize (with mode bit 4: /v1/rerank, each document's prompt
 * made and an answer written), /detokenize. Mode bit 3: the DeepSeek-R1 template from
 * models/deepseek-r1-distill-qwen-tokenizer with its deepseek_v3 tool format; else Qwen2.5's
 * (tests/fixtures/chat-templates/qwen25.jinja) with hermes. Checked: an error has a message
 * and its OpenAI error body is valid UTF-8 JSON; a parsed request lies inside the documented
 * bounds (n, stop strings, logit_bias, prompts, inputs, documents); an embeddings or rerank
 * answer is JSON (a rerank answer's results: top_n of them, each index once).
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "chat_template.h"
#include "reranker.h"
#include "fuzz.h"
#include "json.h"
#include "openai_request.h"
#include "openai_response.h"
#include "tokenizer.h"
#include "tool_calls.h"
#include "utf8.h"

struct setup {
    struct chat_template *tmpl;
    char *bos, *eos;
    struct tool_setup tools;
};
static struct setup setups[2]; /* [0] Qwen2.5 + hermes, [1] DeepSeek-R1 + deepseek_v3 */
static struct tokenizer *tok;

static void die(const char *what, const struct ll_err *err)
{
    fprintf(stderr, "fuzz_openai_request: %s: %s (run from the repository root)\n", what, err->msg);
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = "models/deepseek-r1-distill-qwen-tokenizer";
    struct ll_err err = {0};
    if (tokenizer_load(&tok, dir, &err) != LL_OK)
        die(dir, &err);
    if (chat_template_load_model(&setups[1].tmpl, &setups[1].bos, &setups[1].eos, dir, &err) !=
        LL_OK)
        die(dir, &err);
    FILE *f = fopen("tests/fixtures/chat-templates/qwen25.jinja", "rb");
    static char src[1 << 16];
    size_t n = f ? fread(src, 1, sizeof src - 1, f) : 0;
    if (f)
        fclose(f);
    src[n] = 0;
    if (!n || chat_template_compile(&setups[0].tmpl, src, &err) != LL_OK)
        die("tests/fixtures/chat-templates/qwen25.jinja", &err);
    setups[0].bos = NULL;
    setups[0].eos = strdup("<|im_end|>");
    tools_choose(&setups[0].tools, "hermes", setups[0].tmpl, setups[0].bos, setups[0].eos);
    tools_choose(&setups[1].tools, NULL, setups[1].tmpl, setups[1].bos, setups[1].eos);
    if (setups[1].tools.format != TOOL_FORMAT_DEEPSEEK)
        fuzz_fail("the R1 template's tool format was not detected: %s", setups[1].tools.why);
    return 0;
}

static void check_error(enum ll_status st, const struct oai_error *e)
{
    if (!e->message[0])
        fuzz_fail("error %d without a message", st);
    char *body = oai_error_json(e);
    if (!body)
        fuzz_fail("oai_error_json: NULL");
    size_t len = strlen(body), bad = 0;
    if (!ll_utf8_valid(body, len, &bad))
        fuzz_fail("error body not UTF-8 at byte %zu: %s", bad, body);
    cJSON *j = NULL;
    struct ll_err err = {0};
    if (ll_json_parse(&j, body, len, "error body", &err) != LL_OK)
        fuzz_fail("error body is not JSON (%s): %s", err.msg, body);
    cJSON_Delete(j);
    free(body);
}

static void check_request(const struct oai_request *r)
{
    if (r->n < 1 || r->n > OAI_MAX_N)
        fuzz_fail("n = %d", r->n);
    if (r->n_stop < 0 || r->n_stop > ENGINE_MAX_STOP_STRINGS)
        fuzz_fail("%d stop strings", r->n_stop);
    for (int i = 0; i < r->n_stop; i++) {
        size_t len = strlen(r->stop[i]);
        if (len < 1 || len > ENGINE_MAX_STOP_LEN)
            fuzz_fail("stop string %d of %zu bytes", i, len);
    }
    if (r->n_logit_bias < 0 || r->n_logit_bias > ENGINE_MAX_LOGIT_BIAS)
        fuzz_fail("%d logit_bias entries", r->n_logit_bias);
    for (int i = 0; i < r->n_logit_bias; i++)
        if (!(fabsf(r->logit_bias[i].bias) <= OAI_MAX_BIAS))
            fuzz_fail("logit_bias %g", (double)r->logit_bias[i].bias);
    if (r->n_stop_token_ids < 0 || r->n_stop_token_ids > ENGINE_MAX_STOP_IDS)
        fuzz_fail("%d stop_token_ids", r->n_stop_token_ids);
    if (r->kind == OAI_COMPLETION) {
        if (r->n_prompts < 1 || r->n_prompts > OAI_MAX_PROMPTS || !r->prompts)
            fuzz_fail("%d prompts", r->n_prompts);
        for (int i = 0; i < r->n_prompts; i++)
            if (r->prompts[i].text && r->prompts[i].ids)
                fuzz_fail("prompt %d is both text and ids", i);
    } else if (!cJSON_IsObject(r->chat_context)) {
        fuzz_fail("a chat request without its template variables");
    }
}

/* The chat route after the parse: tools, grammar, template, tokenizer. */
static void chat_route(struct oai_request *r, const struct setup *s)
{
    struct oai_error e = {0};
    enum ll_status st = oai_request_check_supported(r, &e);
    if (st == LL_OK)
        st = tools_context(&s->tools, r->tools, r->tool_choice, r->chat_context, &e);
    if (st == LL_OK && !r->grammar)
        st = tools_grammar(&s->tools, r, &r->grammar, &e);
    if (st != LL_OK) {
        check_error(st, &e);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    struct ll_err err = {0};
    st = chat_template_render_ex(s->tmpl, r->chat_context, s->bos, s->eos, NULL, &text, &len, &err);
    if (st != LL_OK) {
        if (!err.msg[0])
            fuzz_fail("render failed (%d) without a message", st);
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, text, len, false, &ids, &n, &err) != LL_OK)
        fuzz_fail("encode: %s", err.msg);
    free(ids);
    free(text);
}

/* A Responses request naming a previous response, continued after a stored conversation: here
 * its own items again (a stored one holds items that passed this parse, and output items of the
 * same shapes). Only a conversation with no message at all may be refused. */
static enum ll_status continued(struct oai_request *r, struct oai_error *e)
{
    int own = cJSON_GetArraySize(r->resp_input);
    enum ll_status st = oai_responses_continue(r, cJSON_Duplicate(r->resp_input, true), e);
    if (st != LL_OK && st != LL_ENOMEM && !(st == LL_EINVAL && !strcmp(e->param, "input")))
        abort();
    if (st == LL_OK && cJSON_GetArraySize(r->resp_input) != 2 * own)
        abort();
    return st;
}

/* /v1/embeddings: the parse, the inputs' bounds, their encoding, and an answer for them. */
static void embeddings_route(const char *body, size_t len)
{
    struct oai_request r;
    struct oai_error e = {0};
    enum ll_status st = oai_embeddings_parse(&r, body, len, &e);
    if (st != LL_OK) {
        check_error(st, &e);
        oai_request_free(&r);
        return;
    }
    if (r.kind != OAI_EMBEDDING || r.n_prompts < 1 || r.n_prompts > OAI_MAX_INPUTS ||
        r.dimensions < 0)
        fuzz_fail("%d inputs, dimensions %d", r.n_prompts, r.dimensions);
    static const float vec[4] = {0.5f, -1e-30f, 3e38f, 0.0f};
    const float **vs = malloc(sizeof *vs * (size_t)r.n_prompts);
    int tokens = 0;
    for (int i = 0; i < r.n_prompts; i++) {
        const struct oai_prompt *q = &r.prompts[i];
        if (q->text && !q->text_len)
            fuzz_fail("input %d is an empty string", i);
        int32_t *ids = NULL;
        size_t n = 0;
        struct ll_err err = {0};
        if (q->text && tokenizer_encode(tok, q->text, q->text_len, true, &ids, &n, &err) != LL_OK)
            fuzz_fail("encode: %s", err.msg);
        free(ids);
        tokens += q->text ? (int)n : q->n_ids;
        vs[i] = vec;
    }
    int dim = r.dimensions > 0 && r.dimensions < 4 ? r.dimensions : 4;
    char *ans = oai_embeddings_body("m", vs, r.n_prompts, dim, r.embed_base64, tokens);
    cJSON *j = NULL;
    struct ll_err err = {0};
    if (!ans || ll_json_parse(&j, ans, strlen(ans), "answer", &err) != LL_OK ||
        cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")) != r.n_prompts)
        fuzz_fail("embeddings answer: %s", ans ? err.msg : "NULL");
    cJSON_Delete(j);
    free(ans);
    free(vs);
    oai_request_free(&r);
}

/* /v1/rerank: the parse, the documents' bounds, their prompts (a head of one row over 4
 * values, the template's frame as a few ids), and an answer for them. */
static void rerank_route(const char *body, size_t len)
{
    struct oai_request r;
    struct oai_error e = {0};
    enum ll_status st = oai_rerank_parse(&r, body, len, "/v1/rerank", &e);
    if (st != LL_OK) {
        check_error(st, &e);
        oai_request_free(&r);
        return;
    }
    if (r.kind != OAI_RERANK || r.n_prompts < 1 || r.n_prompts > OAI_MAX_INPUTS ||
        r.top_n < 0 || !r.query || !r.query_len)
        fuzz_fail("%d documents, top_n %d", r.n_prompts, r.top_n);
    static float w[4] = {1, -2, 0.5f, 3};
    static int32_t head[2] = {151644, 872}, tail[1] = {151645};
    const struct reranker rk = {.n_rows = 1, .hidden = 4, .w = w, .head_ids = head,
                                .tail_ids = tail, .n_head = 2, .n_tail = 1};
    double *scores = malloc(sizeof(double) * (size_t)r.n_prompts);
    int tokens = 0;
    for (int i = 0; i < r.n_prompts; i++) {
        const struct oai_prompt *q = &r.prompts[i];
        if (!q->text || !q->text_len)
            fuzz_fail("document %d is not a non-empty text", i);
        int32_t *ids = NULL;
        int n = 0;
        struct ll_err err = {0};
        if (reranker_prompt(&rk, tok, r.instruction, r.query, r.query_len, q->text, q->text_len,
                            &ids, &n, &err) != LL_OK)
            fuzz_fail("prompt: %s", err.msg);
        if (n < 4 || ids[0] != head[0] || ids[n - 1] != tail[0])
            fuzz_fail("prompt of %d tokens without its frame", n);
        float h[4] = {(float)n, (float)(i % 5) - 2, (float)q->text_len / 7, -1};
        scores[i] = reranker_score(&rk, h);
        tokens += n;
        free(ids);
    }
    char *ans = oai_rerank_body("rerank-0", "m", scores, r.n_prompts, r.top_n,
                                r.return_documents ? r.prompts : NULL, tokens);
    cJSON *j = NULL;
    struct ll_err err = {0};
    if (!ans || ll_json_parse(&j, ans, strlen(ans), "answer", &err) != LL_OK)
        fuzz_fail("rerank answer: %s", ans ? err.msg : "NULL");
    const cJSON *res = cJSON_GetObjectItem(j, "results"), *x;
    int want = r.top_n > 0 && r.top_n < r.n_prompts ? r.top_n : r.n_prompts, k = 0;
    char *seen = calloc((size_t)r.n_prompts, 1);
    cJSON_ArrayForEach(x, res) {
        const cJSON *ix = cJSON_GetObjectItem(x, "index");
        int i = cJSON_IsNumber(ix) ? ix->valueint : -1;
        if (i < 0 || i >= r.n_prompts || seen[i]++)
            fuzz_fail("result %d: index %d", k, i);
        k++;
    }
    if (k != want)
        fuzz_fail("%d results, want %d", k, want);
    free(seen);
    cJSON_Delete(j);
    free(ans);
    free(scores);
    oai_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    const struct setup *s = &setups[(mode >> 3) & 1];
    struct oai_error e = {0};
    enum ll_status st;
    int kind = mode % 6;
    if (kind == 1 && (mode & 16)) {
        embeddings_route(body, len);
    } else if (kind == 4 && (mode & 16)) {
        rerank_route(body, len);
    } else if (kind <= 3) {
        struct oai_request r;
        memset(&r, 0, sizeof r);
        cJSON *id = NULL;
        if (kind == 2)
            st = oai_responses_parse(&r, body, len, &e);
        else if (kind == 3)
            st = oai_batch_line_parse(&r, &id, body, len, &e);
        else
            st = oai_request_parse(&r, kind == 0 ? OAI_CHAT : OAI_COMPLETION, body, len, &e);
        cJSON_Delete(id);
        if (st != LL_OK) {
            check_error(st, &e);
        } else if (kind == 2 && r.prev_response_id &&
                   (st = continued(&r, &e)) != LL_OK) {
            check_error(st, &e);
        } else {
            check_request(&r);
            struct generation_defaults g;
            memset(&g, 0, sizeof g);
            g.bos_token_id = -1;
            struct engine_params p;
            oai_request_params(&r, &g, &p);
            if (r.kind != OAI_COMPLETION)
                chat_route(&r, s);
        }
        oai_request_free(&r);
    } else if (kind == 4) {
        struct oai_tokenize_request r;
        memset(&r, 0, sizeof r);
        st = oai_tokenize_parse(&r, body, len, &e);
        if (st != LL_OK)
            check_error(st, &e);
        else if (!r.prompt == !r.chat_context)
            fuzz_fail("tokenize: neither or both of prompt and messages");
        oai_tokenize_free(&r);
    } else {
        struct oai_detokenize_request r;
        memset(&r, 0, sizeof r);
        st = oai_detokenize_parse(&r, body, len, &e);
        if (st != LL_OK)
            check_error(st, &e);
        else if (r.n_ids < 0 || (r.n_ids && !r.ids))
            fuzz_fail("detokenize: %d ids", r.n_ids);
        oai_detokenize_free(&r);
    }
    return 0;
}
