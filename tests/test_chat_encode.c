/* test_chat_encode.c: the whole prompt path of a chat request: messages → the model's chat
 * template (from tokenizer_config.json) → token ids without an added BOS (the template writes
 * it), checked against tests/fixtures/chat-encode-cases.json. */
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

#define MODEL_DIR "tests/fixtures/tiny-qwen2"
#define CASES "tests/fixtures/chat-encode-cases.json"

static void test_chat_encode_cases(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct tokenizer *tok = NULL;
    struct chat_template *tpl = NULL;
    char *bos = NULL, *eos = NULL, *json = NULL;
    assert_int_equal(tokenizer_load(&tok, MODEL_DIR, &err), LL_OK);
    assert_int_equal(chat_template_load_model(&tpl, &bos, &eos, MODEL_DIR, &err), LL_OK);
    assert_int_equal(ll_read_file(CASES, &json, NULL, &err), LL_OK);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    int n_cases = cJSON_GetArraySize(cases);
    assert_true(n_cases >= 2);

    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        cJSON *ctx = cJSON_CreateObject();
        cJSON_AddItemToObject(ctx, "messages",
                              cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
        cJSON_AddItemToObject(ctx, "add_generation_prompt",
                              cJSON_Duplicate(cJSON_GetObjectItem(c, "add_generation_prompt"), 1));
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
    }
    cJSON_Delete(cases);
    free(json);
    free(bos);
    free(eos);
    chat_template_free(tpl);
    tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_encode_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
