/* test_responses.c: stored responses (resp_store.h: object and input items, owners, uses, the
 * least recently used dropped first, the byte budget, delete) and the Responses parse's conversation
 * (openai_request.h: store and previous_response_id kept, the string input as a user item,
 * oai_responses_continue putting the instructions, then the stored items, then the request's
 * own into the template's messages). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "openai_request.h"
#include "../src/server/resp_store.h"

static void put(struct resp_store *st, const char *id, uint64_t owner, const char *obj,
                const char *items, bool want)
{
    assert_int_equal(resp_store_put(st, id, owner, strdup(obj), strdup(items)), want);
}

static void expect(struct resp_store *st, const char *id, uint64_t owner, const char *obj)
{
    char *got = (char *)1;
    assert_int_equal(resp_store_get(st, id, owner, &got, NULL), obj != NULL);
    if (!obj) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got, obj);
    free(got);
}

static void test_store_owner_delete(void **state)
{
    (void)state;
    struct resp_store st;
    resp_store_init(&st, 1 << 20);
    assert_true(resp_store_enabled(&st));
    put(&st, "resp_a", 7, "{\"id\":\"resp_a\"}", "[1]", true);
    put(&st, "resp_b", 0, "{\"id\":\"resp_b\"}", "[2,3]", true);
    expect(&st, "resp_a", 7, "{\"id\":\"resp_a\"}");
    expect(&st, "resp_a", 0, NULL); /* another key sees nothing */
    expect(&st, "resp_b", 7, NULL);
    char *obj, *input;
    assert_true(resp_store_get(&st, "resp_b", 0, &obj, &input));
    assert_string_equal(obj, "{\"id\":\"resp_b\"}");
    assert_string_equal(input, "[2,3]");
    free(obj);
    free(input);
    struct resp_store_stats s;
    resp_store_get_stats(&st, &s);
    assert_int_equal(s.stored, 2);
    assert_int_equal(s.bytes, 2 * sizeof(struct resp_stored) + 15 + 3 + 15 + 5);
    assert_false(resp_store_delete(&st, "resp_a", 0));
    assert_true(resp_store_delete(&st, "resp_a", 7));
    assert_false(resp_store_delete(&st, "resp_a", 7));
    expect(&st, "resp_a", 7, NULL);
    resp_store_get_stats(&st, &s);
    assert_int_equal(s.stored, 1);
    assert_int_equal(s.bytes, sizeof(struct resp_stored) + 15 + 5);
    /* the same id again replaces it; an id too long is not kept */
    put(&st, "resp_b", 0, "{\"v\":2}", "[]", true);
    expect(&st, "resp_b", 0, "{\"v\":2}");
    char longid[OAI_RESPONSE_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    put(&st, longid, 0, "{}", "[]", false);
    resp_store_free(&st);

    resp_store_init(&st, 0); /* no budget: nothing is kept */
    assert_false(resp_store_enabled(&st));
    put(&st, "resp_a", 0, "{}", "[]", false);
    expect(&st, "resp_a", 0, NULL);
    resp_store_free(&st);
}

static void test_store_lru(void **state)
{
    (void)state;
    struct resp_store st;
    /* room for three entries of 100-byte objects */
    const size_t one = sizeof(struct resp_stored) + 100 + 2;
    resp_store_init(&st, 3 * one + one / 2);
    char obj[5][101];
    for (int i = 0; i < 5; i++) {
        memset(obj[i], 'a' + i, 100);
        obj[i][100] = 0;
    }
    put(&st, "r0", 1, obj[0], "[]", true);
    put(&st, "r1", 1, obj[1], "[]", true);
    put(&st, "r2", 1, obj[2], "[]", true);
    expect(&st, "r0", 1, obj[0]); /* r0 used: r1 is now the least recently used */
    put(&st, "r3", 1, obj[3], "[]", true);
    expect(&st, "r1", 1, NULL);
    expect(&st, "r0", 1, obj[0]);
    expect(&st, "r2", 1, obj[2]);
    expect(&st, "r3", 1, obj[3]);
    put(&st, "r4", 1, obj[4], "[]", true); /* r0 was used before r2 and r3: it goes */
    expect(&st, "r0", 1, NULL);
    struct resp_store_stats s;
    resp_store_get_stats(&st, &s);
    assert_int_equal(s.stored, 3);
    assert_int_equal(s.evicted, 2);
    assert_true(s.bytes <= 3 * one + one / 2);
    /* one larger than the whole budget is refused and evicts nothing */
    char *big = malloc(4 * one);
    memset(big, 'z', 4 * one - 1);
    big[4 * one - 1] = 0;
    assert_false(resp_store_put(&st, "huge", 1, big, strdup("[]")));
    resp_store_get_stats(&st, &s);
    assert_int_equal(s.stored, 3);
    resp_store_free(&st);
}

/* The template's messages of r as compact JSON (malloc'd). */
static char *messages(const struct oai_request *r)
{
    return cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r->chat_context, "messages"));
}

static void test_parse_store_fields(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const char *b = "{\"input\":\"hi\",\"instructions\":\"be brief\",\"store\":false,"
                    "\"previous_response_id\":\"resp_1\"}";
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    assert_true(r.has_store);
    assert_false(r.store);
    assert_string_equal(r.prev_response_id, "resp_1");
    assert_string_equal(r.resp_instructions, "be brief");
    char *own = cJSON_PrintUnformatted(r.resp_input);
    assert_string_equal(own, "[{\"type\":\"message\",\"role\":\"user\",\"content\":\"hi\"}]");
    free(own);
    /* the echo names the previous response */
    assert_string_equal(
        cJSON_GetStringValue(cJSON_GetObjectItem(r.resp_echo, "previous_response_id")), "resp_1");
    oai_request_free(&r);

    b = "{\"input\":\"hi\"}";
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    assert_false(r.has_store);
    assert_null(r.prev_response_id);
    oai_request_free(&r);

    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"input\":\"hi\",\"store\":\"yes\"}", "store"},
        {"{\"input\":\"hi\",\"previous_response_id\":5}", "previous_response_id"},
        {"{\"input\":\"hi\",\"previous_response_id\":\"\"}", "previous_response_id"},
        {"{\"input\":\"hi\",\"previous_response_id\":\"resp_0123456789012345678901234567890123456"
         "789012345\"}",
         "previous_response_id"},
        {"{\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":\"a\"},{\"type\":\"fil"
         "e_search_call\"}],\"previous_response_id\":\"resp_1\"}",
         "input[1].type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_not_equal(oai_responses_parse(&r, bad[i].body, strlen(bad[i].body), &e),
                             LL_OK);
        assert_string_equal(e.param, bad[i].param);
        assert_null(r.resp_input); /* left empty */
        oai_request_free(&r);
    }
}

static void test_continue(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    /* the request: instructions and the output of the call the stored response made */
    const char *b = "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c1\","
                    "\"output\":\"21 C\"}],\"instructions\":\"use tools\","
                    "\"previous_response_id\":\"resp_1\"}";
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    char *m = messages(&r);
    assert_string_equal(m, "[{\"role\":\"system\",\"content\":\"use tools\"},{\"role\":\"tool\","
                           "\"content\":\"21 C\",\"tool_call_id\":\"c1\"}]");
    free(m);
    /* the stored conversation: its input, then its output items as a response wrote them */
    const char *hist =
        "[{\"type\":\"message\",\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":"
        "\"reasoning_text\",\"text\":\"think\"}]},"
        "{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"Let me look.\",\"annotations\":[],"
        "\"logprobs\":[]}]},"
        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c1\",\"name\":\"weather\","
        "\"arguments\":\"{}\",\"status\":\"completed\"}]";
    assert_int_equal(oai_responses_continue(&r, cJSON_Parse(hist), &e), LL_OK);
    m = messages(&r);
    /* instructions first, then the history (the reasoning left out, the call joining the
     * assistant's message), then the request's own item */
    assert_string_equal(
        m, "[{\"role\":\"system\",\"content\":\"use tools\"},{\"role\":\"user\",\"content\":"
           "\"Weather?\"},{\"role\":\"assistant\",\"content\":\"Let me look.\",\"tool_calls\":"
           "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"weather\","
           "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"21 C\",\"tool_call_id\":"
           "\"c1\"}]");
    free(m);
    /* the conversation to store next: the history's five items, then the own one */
    assert_int_equal(cJSON_GetArraySize(r.resp_input), 5);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(
                            cJSON_GetArrayItem(r.resp_input, 4), "type")),
                        "function_call_output");
    oai_request_free(&r);

    /* no item of its own: the history alone (and nothing at all is refused) */
    b = "{\"input\":[],\"previous_response_id\":\"resp_1\"}";
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    assert_int_equal(oai_responses_continue(&r, cJSON_Parse("[{\"role\":\"user\",\"content\":"
                                                            "\"again\"}]"),
                                            &e),
                     LL_OK);
    m = messages(&r);
    assert_string_equal(m, "[{\"role\":\"user\",\"content\":\"again\"}]");
    free(m);
    oai_request_free(&r);
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    assert_int_equal(oai_responses_continue(&r, cJSON_Parse("[]"), &e), LL_EINVAL);
    assert_string_equal(e.param, "input");
    oai_request_free(&r);
    b = "{\"input\":[]}";
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_EINVAL);
    oai_request_free(&r);
    b = "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c1\","
        "\"output\":\"21 C\"}],\"instructions\":\"use tools\","
        "\"previous_response_id\":\"resp_1\"}";

    /* a history that is not a list is refused, and freed */
    assert_int_equal(oai_responses_parse(&r, b, strlen(b), &e), LL_OK);
    assert_int_equal(oai_responses_continue(&r, cJSON_Parse("{}"), &e), LL_EINVAL);
    assert_string_equal(e.param, "previous_response_id");
    oai_request_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_owner_delete),
        cmocka_unit_test(test_store_lru),
        cmocka_unit_test(test_parse_store_fields),
        cmocka_unit_test(test_continue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
