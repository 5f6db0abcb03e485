/*
 * reasoning.c: whether chat requests get the reasoning split (see reasoning.h): forced by the
 * caller, else detected from the chat template and the tokenizer. Used by llaisys-server
 * (--reasoning-parser) and the library's engine (src/api), so both decide the same way. Pure
 * apart from rendering the template: any thread.
 */
#include "reasoning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "tokenizer.h"

/* Whether the chat template's generation prompt opens "<think>": the text that
 * add_generation_prompt adds after one user message. */
static bool template_opens_think(const struct chat_template *t, const char *bos,
                                 const char *eos)
{
    /* {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false} */
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    cJSON *msg = cJSON_CreateObject();
    if (msg && !cJSON_AddItemToArray(msgs, msg)) {
        cJSON_Delete(msg);
        msg = NULL;
    }
    if (!msg || !cJSON_AddStringToObject(msg, "role", "user") ||
        !cJSON_AddStringToObject(msg, "content", "x") ||
        !cJSON_AddFalseToObject(ctx, "add_generation_prompt")) {
        cJSON_Delete(ctx);
        ctx = NULL;
    }
    char *without = NULL, *with = NULL;
    size_t n0 = 0, n1 = 0;
    bool opens = false;
    struct ll_err err = {0};
    if (ctx && chat_template_render_ex(t, ctx, bos, eos, NULL, &without, &n0, &err) == LL_OK) {
        cJSON_ReplaceItemInObject(ctx, "add_generation_prompt", cJSON_CreateTrue());
        if (chat_template_render_ex(t, ctx, bos, eos, NULL, &with, &n1, &err) == LL_OK) {
            size_t k = 0; /* the common prefix */
            while (k < n0 && k < n1 && without[k] == with[k])
                k++;
            opens = memmem(with + k, n1 - k, LL_REASONING_OPEN, strlen(LL_REASONING_OPEN)) != NULL;
        }
    }
    free(without);
    free(with);
    cJSON_Delete(ctx);
    return opens;
}

bool reasoning_parser_valid(const char *name)
{
    return !strcmp(name, "deepseek_r1") || !strcmp(name, "qwen3") || !strcmp(name, "none");
}

bool reasoning_choose(const char *forced, const struct chat_template *t, const char *bos,
                      const char *eos, const struct tokenizer *tok, char *why, size_t why_size)
{
    const char *reason;
    bool on;
    if (forced) {
        on = strcmp(forced, "none") != 0;
        reason = "--reasoning-parser";
    } else if (t && template_opens_think(t, bos, eos)) {
        on = true;
        reason = "the chat template opens <think>";
    } else {
        on = tok && tokenizer_token_to_id(tok, LL_REASONING_OPEN) >= 0 &&
             tokenizer_token_to_id(tok, LL_REASONING_CLOSE) >= 0;
        reason = on ? "the tokenizer has <think> and </think>" : "no <think> tokens";
    }
    if (why && why_size)
        snprintf(why, why_size, "%s%s (%s)", forced ? "" : "auto: ",
                 forced ? forced : on ? "deepseek_r1" : "none", reason);
    return on;
}
