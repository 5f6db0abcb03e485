/*
 * fuzz_template.c: the Jinja engine (src/template): compile template text, render it with a
 * JSON context.
 *
 * Input: template text, a NUL byte, then the context as JSON. Without the NUL (or when the
 * context is not a JSON object) a fixed chat context is used (messages of every role, tools, a
 * tool call, add_generation_prompt), so template text alone reaches the renderer. Renders run
 * under small limits so that runaway templates stop quickly. Checked: every failure has a
 * message; a render reports the length of what it wrote.
 */
#include <cjson/cJSON.h>

#include "chat_template.h"
#include "fuzz.h"
#include "json.h"

static const char default_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi <b>&\\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"22\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>It is 22.\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\":"
    " {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    " \"add_generation_prompt\": true, \"n\": [1, 2.5, -3], \"flag\": false}";
static cJSON *fallback;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct ll_err err = {0};
    if (ll_json_parse(&fallback, default_context, strlen(default_context), "context", &err) !=
        LL_OK) {
        fprintf(stderr, "fuzz_template: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t src_len, ctx_len;
    const uint8_t *ctx_text;
    fuzz_split(data, size, &src_len, &ctx_text, &ctx_len);
    char *src = fuzz_strndup(data, src_len);
    struct ll_err err = {0};
    struct chat_template *t = NULL;
    enum ll_status st = chat_template_compile(&t, src, &err);
    if (st != LL_OK) {
        if (!err.msg[0])
            fuzz_fail("compile failed (%d) without a message", st);
        free(src);
        return 0;
    }
    if (strcmp(chat_template_source(t), src) != 0)
        fuzz_fail("chat_template_source differs from the source");
    cJSON *ctx = NULL;
    if (ctx_text) {
        struct ll_err jerr = {0};
        if (ll_json_parse(&ctx, (const char *)ctx_text, ctx_len, "context", &jerr) != LL_OK ||
            !cJSON_IsObject(ctx)) {
            cJSON_Delete(ctx);
            ctx = NULL;
        }
    }
    struct chat_template_limits lim;
    chat_template_default_limits(&lim);
    lim.max_output = 1 << 20;
    lim.max_memory = 64 << 20;
    lim.max_steps = 100000;
    char *out = NULL;
    size_t out_len = 0;
    st =
        chat_template_render_ex(t, ctx ? ctx : fallback, "<s>", "</s>", &lim, &out, &out_len, &err);
    if (st == LL_OK) {
        if (!out || out[out_len] != 0 || strlen(out) > out_len)
            fuzz_fail("render: length %zu does not match the text", out_len);
        if (out_len > lim.max_output)
            fuzz_fail("render: %zu bytes, over the %zu limit", out_len, lim.max_output);
    } else if (!err.msg[0]) {
        fuzz_fail("render failed (%d) without a message", st);
    }
    free(out);
    cJSON_Delete(ctx);
    chat_template_free(t);
    free(src);
    return 0;
}
