/* test_chat_encode.c: the whole prompt path of a chat request: messages → the model's chat
 * template (from tokenizer_config.json) → token ids without an added BOS (the template writes
 * it), checked against tests/fixtures/chat-encode-cases.json (DeepSeek-R1-Distill-Qwen, in
 * tiny-qwen2/), qwen3-chat-encode-cases.json (models/qwen3-tokenizer),
 * llama3-chat-encode-cases.json (models/llama3-tokenizer) and mistral-nemo-chat-encode-cases.json
 * (models/mistral-nemo-tokenizer). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "tokenizer.h"
#include "util.h"

/* Every case of the file at path through the template and tokenizer of model_dir: the render
 * byte for byte, then its ids exactly. A case's members other than name, rendered and ids
 * (messages, add_generation_prompt, tools, enable_thinking) are the template's variables.
 * Returns the number of cases. */
static int run_chat_encode(const char *model_dir, const char *path)
{
    struct ll_err err = {0};
    struct tokenizer *tok = NULL;
    struct chat_template *tpl = NULL;
    char *bos = NULL, *eos = NULL, *json = NULL;
    assert_int_equal(tokenizer_load(&tok, model_dir, &err), LL_OK);
    assert_int_equal(chat_template_load_model(&tpl, &bos, &eos, model_dir, &err), LL_OK);
    assert_int_equal(ll_read_file(path, &json, NULL, &err), LL_OK);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    int n_cases = 0;

    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        cJSON *ctx = cJSON_CreateObject();
        const cJSON *m;
        cJSON_ArrayForEach(m, c)
        {
            if (strcmp(m->string, "name") && strcmp(m->string, "rendered") &&
                strcmp(m->string, "ids"))
                cJSON_AddItemToObject(ctx, m->string, cJSON_Duplicate(m, 1));
        }
        char *text = NULL;
        enum ll_status st = chat_template_render(tpl, ctx, bos, eos, &text, &err);
        if (st != LL_OK)
            fail_msg("%s: render failed: %s", name, err.msg);
        assert_string_equal(text, cJSON_GetObjectItem(c, "rendered")->valuestring);

        int32_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), LL_OK);
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        assert_int_equal(n, (size_t)cJSON_GetArraySize(want));
        for (size_t i = 0; i < n; i++)
            if (ids[i] != cJSON_GetArrayItem(want, (int)i)->valueint)
                fail_msg("%s: id %zu is %d, expected %d", name, i, ids[i],
                         cJSON_GetArrayItem(want, (int)i)->valueint);
        free(ids);
        free(text);
        cJSON_Delete(ctx);
        n_cases++;
    }
    cJSON_Delete(cases);
    free(json);
    free(bos);
    free(eos);
    chat_template_free(tpl);
    tokenizer_free(tok);
    return n_cases;
}

static void test_chat_encode_cases(void **state)
{
    (void)state;
    assert_int_equal(
        run_chat_encode("tests/fixtures/tiny-qwen2", "tests/fixtures/chat-encode-cases.json"), 2);
}

/* Qwen3: no BOS, enable_thinking false writes an empty think block (<think> 151667, </think>
 * 151668), reasoning kept only after the last user query, tool calls and responses. */
static void test_qwen3_chat_encode_cases(void **state)
{
    (void)state;
    assert_int_equal(
        run_chat_encode("models/qwen3-tokenizer", "tests/fixtures/qwen3-chat-encode-cases.json"),
        4);
}

/* Llama 3.2: the dated system header, digits split in threes by its pre-tokenizer, a tool
 * round (tools in the first user message, a call, an ipython turn). */
static void test_llama3_chat_encode_cases(void **state)
{
    (void)state;
    assert_int_equal(
        run_chat_encode("models/llama3-tokenizer", "tests/fixtures/llama3-chat-encode-cases.json"),
        4);
}

/* Mistral-Nemo: the system message folded into the last user turn, [INST] turns, a tool round
 * ([TOOL_CALLS], [TOOL_RESULTS], tools listed before the last user turn), code and paths through
 * the tekken split. */
static void test_mistral_nemo_chat_encode_cases(void **state)
{
    (void)state;
    assert_int_equal(run_chat_encode("models/mistral-nemo-tokenizer",
                                     "tests/fixtures/mistral-nemo-chat-encode-cases.json"),
                     4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_encode_cases),
        cmocka_unit_test(test_qwen3_chat_encode_cases),
        cmocka_unit_test(test_llama3_chat_encode_cases),
        cmocka_unit_test(test_mistral_nemo_chat_encode_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
