/* test_openai_response.c: response bodies and stream chunks (openai_response.h): they parse
 * as JSON with the OpenAI field names, strings survive escaping byte for byte (NUL, quotes,
 * control characters, UTF-8), and usage adds up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "openai_response.h"
#include "../src/server/responses_out.h"
#include "tokenizer.h"

static const struct oai_meta chat_meta = {OAI_CHAT, "chatcmpl-1", 1700000000, "m\"odel"};
static const struct oai_meta text_meta = {OAI_COMPLETION, "cmpl-1", 1700000001, "m"};

/* Text goes through byte for byte: quotes, backslashes, control bytes, UTF-8 and NUL. */
static void test_text_escaping(void **state)
{
    (void)state;
    static const char text[] = "a\"b\\c\n\r\t\x01\x1f/\xc3\xa9\xe4\xb8\xad\0end";
    struct oai_choice c = {.index = 0, .text = text, .text_len = sizeof text - 1};
    char *s = oai_stream_chunk(&text_meta, &c, false, false);
    assert_non_null(s);
    assert_non_null(strstr(s, "\\u0000end\""));
    assert_non_null(strstr(s, "\\u0001\\u001f"));
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    /* cJSON strings end at the NUL: compare the part before it */
    assert_string_equal(cJSON_GetObjectItem(c0, "text")->valuestring, text);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")));
    cJSON_Delete(j);
    free(s);
}

static void test_chat_body(void **state)
{
    (void)state;
    struct oai_choice c[2] = {
        {.index = 0, .text = "hi", .text_len = 2, .finish_reason = "stop"},
        {.index = 1, .text = "x\0y", .text_len = 3, .reasoning = "think", .reasoning_len = 5,
         .finish_reason = "length"},
    };
    struct oai_usage u = {.prompt_tokens = 7, .completion_tokens = 9, .cached_tokens = 4,
                          .reasoning_tokens = 2, .spec_drafted = 10, .spec_accepted = 6};
    char *s = oai_response_body(&chat_meta, c, 2, &u);
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, "chatcmpl-1");
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "m\"odel");
    assert_int_equal(cJSON_GetObjectItem(j, "created")->valuedouble, 1700000000);
    cJSON *ch = cJSON_GetObjectItem(j, "choices");
    assert_int_equal(cJSON_GetArraySize(ch), 2);
    cJSON *m0 = cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "message");
    assert_string_equal(cJSON_GetObjectItem(m0, "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(m0, "content")->valuestring, "hi");
    assert_null(cJSON_GetObjectItem(m0, "reasoning_content"));
    cJSON *m1 = cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 1), "message");
    assert_string_equal(cJSON_GetObjectItem(m1, "reasoning_content")->valuestring, "think");
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 1), "finish_reason")->valuestring, "length");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "logprobs")));
    cJSON *us = cJSON_GetObjectItem(j, "usage");
    assert_int_equal(cJSON_GetObjectItem(us, "total_tokens")->valueint, 16);
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(us, "prompt_tokens_details"), "cached_tokens")
            ->valueint,
        4);
    cJSON *cd = cJSON_GetObjectItem(us, "completion_tokens_details");
    assert_int_equal(cJSON_GetObjectItem(cd, "reasoning_tokens")->valueint, 2);
    /* speculative decoding: OpenAI's prediction counts (drafted = accepted + rejected) */
    assert_int_equal(cJSON_GetObjectItem(cd, "accepted_prediction_tokens")->valueint, 6);
    assert_int_equal(cJSON_GetObjectItem(cd, "rejected_prediction_tokens")->valueint, 4);
    cJSON_Delete(j);
    free(s);
}

static void test_chunks(void **state)
{
    (void)state;
    struct oai_choice role = {.index = 2};
    char *s = oai_stream_chunk(&chat_meta, &role, true, true);
    cJSON *j = cJSON_Parse(s);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_int_equal(cJSON_GetObjectItem(c0, "index")->valueint, 2);
    cJSON *d = cJSON_GetObjectItem(c0, "delta");
    assert_string_equal(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(d, "content")->valuestring, "");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "usage")));
    cJSON_Delete(j);
    free(s);

    struct oai_choice fin = {.index = 0, .finish_reason = "stop"};
    s = oai_stream_chunk(&chat_meta, &fin, false, false);
    j = cJSON_Parse(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c0, "delta")), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "stop");
    assert_null(cJSON_GetObjectItem(j, "usage"));
    cJSON_Delete(j);
    free(s);

    struct oai_choice t = {.index = 0, .text = "tok\n", .text_len = 4};
    s = oai_stream_chunk(&text_meta, &t, false, false);
    j = cJSON_Parse(s);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "text")->valuestring, "tok\n");
    cJSON_Delete(j);
    free(s);

    struct oai_usage u = {.prompt_tokens = 3, .completion_tokens = 5};
    s = oai_stream_usage(&text_meta, &u);
    j = cJSON_Parse(s);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valueint, 8);
    cJSON_Delete(j);
    free(s);
}

/* Logprobs in the chat shape and the legacy completions shape. */
static void test_logprobs(void **state)
{
    (void)state;
    struct tokenizer *tok;
    assert_int_equal(tokenizer_load(&tok, "tests/fixtures/tiny-qwen2", NULL), LL_OK);
    /* "hello", " world", then a parrot emoji in two tokens (3 bytes, then 1) */
    int32_t *enc;
    size_t n_enc;
    assert_int_equal(tokenizer_encode(tok, "hello world\xf0\x9f\xa6\x9c", 15, false, &enc, &n_enc,
                                      NULL), LL_OK);
    assert_true(n_enc >= 3);
    int32_t ids[3] = {enc[0], enc[1], 151643}; /* "hello", " world", eos (special) */
    struct sampler_logprobs lp[3] = {
        {.logprob = -0.5f, .n_top = 2, .top_ids = {ids[0], ids[1]}, .top_logprobs = {-0.5f, -1.5f}},
        {.logprob = -INFINITY, .n_top = 2, .top_ids = {ids[0], ids[0]},
         .top_logprobs = {-0.25f, -0.25f}},
        {.logprob = -2.0f, .n_top = 0},
    };
    struct oai_logprobs L = {.ids = ids, .lp = lp, .n = 3, .top = 2, .tok = tok,
                             .skip_special = true, .text_offset = 5};
    struct oai_choice c = {.index = 0, .text = "hello world", .text_len = 11, .logprobs = &L,
                           .finish_reason = "stop"};
    struct oai_usage u = {0};
    char *s = oai_response_body(&chat_meta, &c, 1, &u);
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    cJSON *lps = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                     "logprobs");
    cJSON *content = cJSON_GetObjectItem(lps, "content");
    assert_int_equal(cJSON_GetArraySize(content), 3);
    cJSON *t0 = cJSON_GetArrayItem(content, 0), *t1 = cJSON_GetArrayItem(content, 1);
    assert_string_equal(cJSON_GetObjectItem(t0, "token")->valuestring, "hello");
    assert_float_equal(cJSON_GetObjectItem(t0, "logprob")->valuedouble, -0.5, 1e-6);
    cJSON *bytes = cJSON_GetObjectItem(t0, "bytes");
    assert_int_equal(cJSON_GetArraySize(bytes), 5);
    assert_int_equal(cJSON_GetArrayItem(bytes, 0)->valueint, 'h');
    cJSON *top = cJSON_GetObjectItem(t0, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(top), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(top, 1), "token")->valuestring,
                        " world");
    assert_float_equal(cJSON_GetObjectItem(t1, "logprob")->valuedouble, -9999.0, 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(content, 2), "token")->valuestring,
                        "<｜end▁of▁sentence｜>");
    cJSON_Delete(j);
    free(s);

    /* legacy: tokens, token_logprobs, top_logprobs (a repeated token string once, the chosen
     * token added), text_offset in characters (special tokens add none when skipped) */
    s = oai_response_body(&text_meta, &c, 1, &u);
    j = cJSON_Parse(s);
    assert_non_null(j);
    lps = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                              "logprobs");
    cJSON *tokens = cJSON_GetObjectItem(lps, "tokens");
    assert_int_equal(cJSON_GetArraySize(tokens), 3);
    assert_string_equal(cJSON_GetArrayItem(tokens, 1)->valuestring, " world");
    cJSON *tl = cJSON_GetObjectItem(lps, "token_logprobs");
    assert_float_equal(cJSON_GetArrayItem(tl, 2)->valuedouble, -2.0, 1e-6);
    cJSON *tops = cJSON_GetObjectItem(lps, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 0)), 2);
    cJSON *t1d = cJSON_GetArrayItem(tops, 1); /* "hello" twice, then the chosen " world" */
    assert_int_equal(cJSON_GetArraySize(t1d), 2);
    assert_float_equal(cJSON_GetObjectItem(t1d, "hello")->valuedouble, -0.25, 1e-6);
    assert_float_equal(cJSON_GetObjectItem(t1d, " world")->valuedouble, -9999.0, 0);
    cJSON *off = cJSON_GetObjectItem(lps, "text_offset");
    assert_int_equal(cJSON_GetArrayItem(off, 0)->valueint, 5);
    assert_int_equal(cJSON_GetArrayItem(off, 1)->valueint, 10);
    assert_int_equal(cJSON_GetArrayItem(off, 2)->valueint, 16);
    assert_int_equal(oai_logprobs_chars(tok, ids, 3, true), 11);
    assert_int_equal(oai_logprobs_chars(tok, ids, 3, false), 11 + 19);
    cJSON_Delete(j);
    free(s);

    /* A token that is part of a character: U+FFFD in "token", the raw byte in "bytes". */
    int32_t part = -1;
    for (size_t i = 0; i < n_enc; i++) {
        size_t n;
        const char *b = tokenizer_id_bytes(tok, enc[i], &n);
        if (n == 1 && (unsigned char)b[0] >= 0x80)
            part = enc[i];
    }
    assert_true(part >= 0);
    {
        struct sampler_logprobs one = {.logprob = -1.0f};
        struct oai_logprobs P = {.ids = &part, .lp = &one, .n = 1, .tok = tok};
        struct oai_choice pc = {.index = 0, .logprobs = &P};
        s = oai_stream_chunk(&chat_meta, &pc, false, false);
        j = cJSON_Parse(s);
        assert_non_null(j);
        cJSON *e0 = cJSON_GetArrayItem(
            cJSON_GetObjectItem(
                cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                    "logprobs"),
                "content"),
            0);
        assert_string_equal(cJSON_GetObjectItem(e0, "token")->valuestring, "\xef\xbf\xbd");
        assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(e0, "bytes"), 0)->valueint >= 0x80);
        cJSON_Delete(j);
        free(s);
    }
    free(enc);
    tokenizer_free(tok);
}

/* A token's bytes that are not UTF-8 become U+FFFD once per maximal invalid subpart, as Python's
 * errors="replace" does (the base's rule, json.h): id 378 of the fixture is E2 80, the first two
 * bytes of a three-byte character, so its string is one U+FFFD, not one per byte. */
static void test_logprobs_lossy_subpart(void **state)
{
    (void)state;
    struct tokenizer *tok;
    assert_int_equal(tokenizer_load(&tok, "tests/fixtures/tiny-qwen2", NULL), LL_OK);
    int32_t id = 378;
    size_t n = 0;
    const char *b = tokenizer_id_bytes(tok, id, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(b, "\xe2\x80", 2);
    struct sampler_logprobs one = {.logprob = -1.0f};
    struct oai_logprobs L = {.ids = &id, .lp = &one, .n = 1, .tok = tok};
    struct oai_choice c = {.index = 0, .logprobs = &L};

    char *s = oai_stream_chunk(&chat_meta, &c, false, false);
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    cJSON *e0 = cJSON_GetArrayItem(
        cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                "logprobs"),
            "content"),
        0);
    assert_string_equal(cJSON_GetObjectItem(e0, "token")->valuestring, "\xef\xbf\xbd");
    cJSON *bytes = cJSON_GetObjectItem(e0, "bytes");
    assert_int_equal(cJSON_GetArraySize(bytes), 2);
    assert_int_equal(cJSON_GetArrayItem(bytes, 0)->valueint, 0xe2);
    assert_int_equal(cJSON_GetArrayItem(bytes, 1)->valueint, 0x80);
    cJSON_Delete(j);
    free(s);

    s = oai_stream_chunk(&text_meta, &c, false, false);
    j = cJSON_Parse(s);
    assert_non_null(j);
    cJSON *lps =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(lps, "tokens"), 0)->valuestring,
                        "\xef\xbf\xbd");
    assert_non_null(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(lps,
                                                                               "top_logprobs"),
                                                           0),
                                        "\xef\xbf\xbd"));
    cJSON_Delete(j);
    free(s);
    tokenizer_free(tok);
}


/* Tool calls: message.tool_calls with content null, stream deltas with indices, the legacy
 * function_call shape; the Responses API's object and events. */
static void test_tool_calls_and_responses(void **state)
{
    (void)state;
    struct oai_call calls[2] = {{"call_a", "get_weather", "{\"city\":\"P\\\"aris\"}"},
                                {"call_b", "ping", "{}"}};
    struct oai_choice c = {.index = 0, .calls = calls, .n_calls = 2, .content_null = true,
                           .finish_reason = "tool_calls"};
    struct oai_usage u = {0};
    char *body = oai_response_body(&chat_meta, &c, 1, &u);
    cJSON *v = cJSON_Parse(body);
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "choices"), 0),
                                         "message");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    const cJSON *tc = cJSON_GetObjectItem(m, "tool_calls");
    assert_int_equal(cJSON_GetArraySize(tc), 2);
    const cJSON *t1 = cJSON_GetArrayItem(tc, 1);
    assert_string_equal(cJSON_GetObjectItem(t1, "id")->valuestring, "call_b");
    assert_string_equal(cJSON_GetObjectItem(t1, "type")->valuestring, "function");
    assert_null(cJSON_GetObjectItem(t1, "index"));
    const cJSON *f0 = cJSON_GetObjectItem(cJSON_GetArrayItem(tc, 0), "function");
    assert_string_equal(cJSON_GetObjectItem(f0, "arguments")->valuestring,
                        "{\"city\":\"P\\\"aris\"}");
    cJSON_Delete(v);
    free(body);

    struct oai_choice d = {.index = 0, .calls = &calls[1], .n_calls = 1, .first_call = 1};
    char *chunk = oai_stream_chunk(&chat_meta, &d, false, false);
    v = cJSON_Parse(chunk);
    const cJSON *delta = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "choices"),
                                                                0), "delta");
    const cJSON *dc = cJSON_GetArrayItem(cJSON_GetObjectItem(delta, "tool_calls"), 0);
    assert_int_equal(cJSON_GetObjectItem(dc, "index")->valueint, 1);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(dc, "function"), "name")->valuestring, "ping");
    assert_null(cJSON_GetObjectItem(delta, "content"));
    cJSON_Delete(v);
    free(chunk);

    struct oai_choice legacy = {.index = 0, .calls = calls, .n_calls = 1, .legacy_call = true,
                                .content_null = true, .finish_reason = "function_call"};
    body = oai_response_body(&chat_meta, &legacy, 1, &u);
    v = cJSON_Parse(body);
    m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "choices"), 0), "message");
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(m, "function_call"), "name")->valuestring,
        "get_weather");
    assert_null(cJSON_GetObjectItem(m, "tool_calls"));
    cJSON_Delete(v);
    free(body);

    /* the Responses object: items in order, usage, the request's echo over the defaults */
    struct resp_item items[3] = {
        {.kind = RI_REASONING, .id = "rs_1", .text = "hmm", .len = 3, .done = true},
        {.kind = RI_MESSAGE, .id = "msg_1", .text = "hi\0x", .len = 2, .done = true},
        {.kind = RI_CALL, .id = "fc_1", .call_id = "call_a", .name = "f", .arguments = "{}",
         .done = true}};
    struct resp_usage ru = {.input_tokens = 5, .cached_tokens = 2, .output_tokens = 7,
                            .reasoning_tokens = 3};
    cJSON *echo = cJSON_Parse("{\"instructions\":\"be brief\",\"max_output_tokens\":9}");
    cJSON *o = resp_object_json("resp_1", 17, "incomplete", "max_output_tokens", NULL, "m",
                                items, 3, &ru, echo);
    assert_non_null(o);
    assert_string_equal(cJSON_GetObjectItem(o, "status")->valuestring, "incomplete");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "incomplete_details"),
                                            "reason")->valuestring, "max_output_tokens");
    const cJSON *out = cJSON_GetObjectItem(o, "output");
    assert_int_equal(cJSON_GetArraySize(out), 3);
    const cJSON *reason = cJSON_GetArrayItem(out, 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(
                            cJSON_GetObjectItem(reason, "content"), 0), "type")->valuestring,
                        "reasoning_text");
    const cJSON *msg = cJSON_GetArrayItem(out, 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(
                            cJSON_GetObjectItem(msg, "content"), 0), "text")->valuestring, "hi");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 2), "call_id")->valuestring,
                        "call_a");
    assert_string_equal(cJSON_GetObjectItem(o, "instructions")->valuestring, "be brief");
    assert_int_equal(cJSON_GetObjectItem(o, "max_output_tokens")->valueint, 9);
    assert_string_equal(cJSON_GetObjectItem(o, "tool_choice")->valuestring, "auto");
    const cJSON *us = cJSON_GetObjectItem(o, "usage");
    assert_int_equal(cJSON_GetObjectItem(us, "total_tokens")->valueint, 12);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(us, "output_tokens_details"),
                                         "reasoning_tokens")->valueint, 3);
    cJSON_Delete(o);
    cJSON_Delete(echo);
    char *ev = resp_event("response.output_text.delta", 4, cJSON_Parse("{\"delta\":\"x\"}"));
    v = cJSON_Parse(ev);
    assert_string_equal(cJSON_GetObjectItem(v, "type")->valuestring,
                        "response.output_text.delta");
    assert_int_equal(cJSON_GetObjectItem(v, "sequence_number")->valueint, 4);
    cJSON_Delete(v);
    free(ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_escaping),
        cmocka_unit_test(test_chat_body),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logprobs_lossy_subpart),
        cmocka_unit_test(test_tool_calls_and_responses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
