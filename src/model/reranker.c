/*
 * reranker.c: the relevance head and prompt of a model (see reranker.h).
 */
#include "reranker.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "dtype.h"
#include "model.h"
#include "model_qscheme.h"
#include "quant.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "util.h"

#define SYSTEM_TEXT                                                                          \
    "Judge whether the Document meets the requirements based on the Query and the Instruct "  \
    "provided. Note that the answer can only be \"yes\" or \"no\"."
#define SENTINEL "\x01llaisys-rerank-pair\x01" /* the user content while finding its place */

/* score.weight (labels, hidden) into rk->w; LL_OK with n_rows 0 when absent. */
static enum ll_status head_from_score(struct reranker *rk, const struct model *m,
                                      struct ll_err *err)
{
    const struct st_tensor *t = m->st ? st_find(m->st, "score.weight") : NULL;
    if (!t)
        return LL_OK;
    enum ll_dtype dt;
    if (t->ndim != 2 || t->shape[1] != rk->hidden || t->shape[0] < 1)
        return ll_err_set(err, LL_EMODEL, "%s: tensor 'score.weight' must have shape (labels, "
                          "%d)", t->file, rk->hidden);
    if (!st_dtype_to_ll(t->dtype, &dt))
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: tensor 'score.weight' has dtype %s "
                          "(bf16, f16 or f32 expected)", t->file, st_dtype_name(t->dtype));
    if (t->shape[0] > 2)
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: 'score.weight' has %lld labels; a "
                          "relevance score needs 1 or 2", t->file, (long long)t->shape[0]);
    rk->n_rows = (int)t->shape[0];
    if (!(rk->w = malloc(sizeof(float) * (size_t)rk->n_rows * rk->hidden)))
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    for (size_t i = 0; i < (size_t)rk->n_rows * rk->hidden; i++)
        rk->w[i] = ll_dtype_load(t->data, dt, i);
    snprintf(rk->source, sizeof rk->source, "score.weight (%d label%s)", rk->n_rows,
             rk->n_rows > 1 ? "s" : "");
    return LL_OK;
}

/* The vocabulary id of word: an entry of that name, else the one token the text encodes to. */
static enum ll_status token_of(const struct tokenizer *tok, const char *word, size_t len,
                               int32_t *id, struct ll_err *err)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return ll_err_set(err, LL_EINVAL, "--rerank-tokens: a token of %zu bytes (1..%zu)", len,
                          sizeof buf - 1);
    memcpy(buf, word, len);
    buf[len] = '\0';
    if ((*id = tokenizer_token_to_id(tok, buf)) >= 0)
        return LL_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    enum ll_status s = tokenizer_encode(tok, buf, len, false, &ids, &n, err);
    if (s == LL_OK && n == 1)
        *id = ids[0];
    free(ids);
    if (s == LL_OK && n != 1)
        s = ll_err_set(err, LL_EINVAL, "--rerank-tokens: \"%s\" is %zu tokens of this "
                       "vocabulary, not one", buf, n);
    return s;
}

/* lm_head's rows of the tokens in spec ("NO,YES" or "YES") into rk->w. */
static enum ll_status head_from_tokens(struct reranker *rk, const struct model *m,
                                       const struct tokenizer *tok, const char *spec,
                                       const char *why, struct ll_err *err)
{
    const struct model_linear *head = NULL;
    for (int i = 0; i < m->n_linears; i++)
        if (m->linears[i]->role == MODEL_ROLE_LM_HEAD)
            head = m->linears[i];
    if (!head)
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: this model has no lm_head to judge with",
                          why);
    int32_t ids[2];
    int n = 0;
    for (const char *p = spec;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 2)
            return ll_err_set(err, LL_EINVAL, "--rerank-tokens \"%s\": one or two tokens (NO,YES "
                              "or YES)", spec);
        enum ll_status s = token_of(tok, p, len, &ids[n], err);
        if (s != LL_OK)
            return s;
        if (ids[n] >= head->n)
            return ll_err_set(err, LL_EINVAL, "--rerank-tokens: token id %d is outside lm_head's "
                              "%d rows", ids[n], head->n);
        if (!comma) {
            n++;
            break;
        }
        p = comma + 1;
    }
    rk->n_rows = n;
    if (!(rk->w = malloc(sizeof(float) * (size_t)n * rk->hidden)))
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    for (int r = 0; r < n; r++) {
        float *row = rk->w + (size_t)r * rk->hidden;
        if (head->quantized)
            ll_dequantize_row(row, &head->q, ids[r]);
        else
            for (int i = 0; i < rk->hidden; i++)
                row[i] = ll_dtype_load(head->dense.data, head->dense.dtype,
                              (size_t)ids[r] * head->k + (size_t)i);
    }
    rk->logits_div = (float)m->config.logits_div;
    rk->softcap = (float)m->config.final_softcap;
    snprintf(rk->source, sizeof rk->source, "lm_head rows of %s (%s)", spec, why);
    return LL_OK;
}

/* Whether dir/README.md has a line "# Qwen3-Reranker..." (how Qwen3-Reranker's directories
 * can be told from Qwen3's: their config.json is a plain Qwen3ForCausalLM's). */
static bool qwen3_reranker_readme(const char *dir)
{
    char *path = ll_path_join(dir, "README.md"), *text = NULL;
    size_t len = 0;
    struct ll_err err = {0};
    bool yes = false;
    if (path && access(path, R_OK) == 0 && ll_read_file(path, &text, &len, &err) == LL_OK)
        for (const char *p = text; p && p < text + len; p = strchr(p, '\n'), p = p ? p + 1 : p)
            if (!strncmp(p, "# Qwen3-Reranker", 16)) {
                yes = true;
                break;
            }
    free(text);
    free(path);
    return yes;
}

/* The template's text around the user content, tokenized, into rk->head_ids / tail_ids. */
static enum ll_status prompt_frame(struct reranker *rk, const struct tokenizer *tok,
                                   const struct chat_template *tmpl, const char *bos,
                                   const char *eos, struct ll_err *err)
{
    if (!tmpl)
        return ll_err_set(err, LL_EUNSUPPORTED, "the model has no chat template, which the "
                          "reranking prompt is rendered with");
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    cJSON *sys = cJSON_CreateObject(), *user = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, sys);
    cJSON_AddItemToArray(msgs, user);
    bool ok = ctx && msgs && sys && user && cJSON_AddStringToObject(sys, "role", "system") &&
              cJSON_AddStringToObject(sys, "content", SYSTEM_TEXT) &&
              cJSON_AddStringToObject(user, "role", "user") &&
              cJSON_AddStringToObject(user, "content", SENTINEL) &&
              cJSON_AddTrueToObject(ctx, "add_generation_prompt") &&
              cJSON_AddFalseToObject(ctx, "enable_thinking");
    char *text = NULL;
    size_t len = 0;
    enum ll_status s = ok ? chat_template_render_ex(tmpl, ctx, bos, eos, NULL, &text, &len, err)
                          : ll_err_set(err, LL_ENOMEM, "out of memory");
    cJSON_Delete(ctx);
    if (s != LL_OK)
        return s;
    const char *at = strstr(text, SENTINEL);
    if (!at || strstr(at + 1, SENTINEL)) {
        free(text);
        return ll_err_set(err, LL_EUNSUPPORTED, "the chat template does not render the "
                          "reranking prompt's user message once, as it is");
    }
    size_t a = (size_t)(at - text), b = a + strlen(SENTINEL), nh = 0, nt = 0;
    s = tokenizer_encode(tok, text, a, false, &rk->head_ids, &nh, err);
    if (s == LL_OK)
        s = tokenizer_encode(tok, text + b, len - b, false, &rk->tail_ids, &nt, err);
    rk->n_head = (int)nh;
    rk->n_tail = (int)nt;
    free(text);
    return s;
}

enum ll_status reranker_choose(struct reranker *rk, const struct model *m,
                               const struct tokenizer *tok, const struct chat_template *tmpl,
                               const char *bos, const char *eos, const char *tokens,
                               struct ll_err *err)
{
    memset(rk, 0, sizeof *rk);
    rk->hidden = m->config.hidden_size;
    enum ll_status s = tokens && tokens[0]
                           ? head_from_tokens(rk, m, tok, tokens, "--rerank-tokens", err)
                           : head_from_score(rk, m, err);
    if (s == LL_OK && !rk->n_rows) {
        if (qwen3_reranker_readme(m->dir))
            s = head_from_tokens(rk, m, tok, "no,yes", "README.md: Qwen3-Reranker", err);
        else
            s = ll_err_set(err, LL_EUNSUPPORTED,
                           "this model has no relevance head: a *ForSequenceClassification "
                           "checkpoint has one (score.weight); a causal LM ranks by two "
                           "next-token logits with --rerank-tokens NO,YES (Qwen3-Reranker: "
                           "no,yes)");
    }
    if (s == LL_OK)
        s = prompt_frame(rk, tok, tmpl, bos, eos, err);
    if (s != LL_OK)
        reranker_free(rk);
    return s;
}

void reranker_free(struct reranker *rk)
{
    free(rk->w);
    free(rk->head_ids);
    free(rk->tail_ids);
    memset(rk, 0, sizeof *rk);
}

enum ll_status reranker_prompt(const struct reranker *rk, const struct tokenizer *tok,
                               const char *instruction, const char *query, size_t query_len,
                               const char *doc, size_t doc_len, int32_t **ids, int *n,
                               struct ll_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!instruction)
        instruction = RERANK_DEFAULT_INSTRUCTION;
    size_t il = strlen(instruction), tl = il + query_len + doc_len + 48;
    char *text = malloc(tl);
    if (!text)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    size_t k = (size_t)snprintf(text, tl, "<Instruct>: %s\n<Query>: ", instruction);
    memcpy(text + k, query, query_len);
    k += query_len;
    k += (size_t)snprintf(text + k, tl - k, "\n<Document>: ");
    memcpy(text + k, doc, doc_len);
    k += doc_len;
    int32_t *body = NULL;
    size_t nb = 0;
    enum ll_status s = tokenizer_encode(tok, text, k, false, &body, &nb, err);
    free(text);
    if (s != LL_OK)
        return s;
    size_t total = (size_t)rk->n_head + nb + (size_t)rk->n_tail;
    int32_t *out = malloc(sizeof(int32_t) * total);
    if (!out) {
        free(body);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    memcpy(out, rk->head_ids, sizeof(int32_t) * (size_t)rk->n_head);
    memcpy(out + rk->n_head, body, sizeof(int32_t) * nb);
    memcpy(out + rk->n_head + nb, rk->tail_ids, sizeof(int32_t) * (size_t)rk->n_tail);
    free(body);
    *ids = out;
    *n = (int)total;
    return LL_OK;
}

int reranker_shared_prefix(const struct reranker *rk, const struct tokenizer *tok,
                           const char *instruction, const char *query, size_t query_len,
                           int32_t *const *ids, const int *n, int count)
{
    int32_t *base = NULL;
    int nb = 0;
    struct ll_err err = {0};
    if (reranker_prompt(rk, tok, instruction, query, query_len, "", 0, &base, &nb, &err))
        return -1;
    int k = nb - rk->n_tail; /* the frame's tail follows the (empty) document */
    for (int i = 0; i < count; i++) {
        int j = 0;
        while (j < k && j < n[i] && ids[i][j] == base[j])
            j++;
        k = j;
    }
    free(base);
    return k;
}

/* Row r of the head applied to h, as the model's logits would be. */
static double row_logit(const struct reranker *rk, int r, const float *h)
{
    const float *w = rk->w + (size_t)r * rk->hidden;
    double z = 0;
    for (int i = 0; i < rk->hidden; i++)
        z += (double)w[i] * h[i];
    if (rk->logits_div > 0)
        z /= rk->logits_div;
    if (rk->softcap > 0)
        z = rk->softcap * tanh(z / rk->softcap);
    return z;
}

double reranker_score(const struct reranker *rk, const float *h)
{
    double z = row_logit(rk, rk->n_rows - 1, h);
    if (rk->n_rows == 2)
        z -= row_logit(rk, 0, h);
    return 1.0 / (1.0 + exp(-z));
}

struct ranked {
    double score;
    int index;
};

static int rank_cmp(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    bool nx = isnan(x->score), ny = isnan(y->score);
    if (nx != ny)
        return nx ? 1 : -1;
    if (!nx && x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->index - y->index;
}

enum ll_status reranker_order(const double *scores, int n, int *order)
{
    struct ranked *rk = malloc(sizeof *rk * (size_t)(n > 0 ? n : 1));
    if (!rk)
        return LL_ENOMEM;
    for (int i = 0; i < n; i++)
        rk[i] = (struct ranked){scores[i], i};
    qsort(rk, (size_t)n, sizeof *rk, rank_cmp);
    for (int i = 0; i < n; i++)
        order[i] = rk[i].index;
    free(rk);
    return LL_OK;
}
