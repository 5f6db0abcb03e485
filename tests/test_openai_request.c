/* test_openai_request.c: parsing and validation of OpenAI-style request bodies
 * (openai_request.h): accepted shapes, normalised chat messages, and a table of malformed
 * inputs, each with the status and the field it must name. */
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

static enum ll_status parse(struct oai_request *r, enum oai_kind k, const char *body,
                            struct oai_error *e)
{
    memset(e, 0, sizeof *e);
    return oai_request_parse(r, k, body, strlen(body), e);
}

static void test_chat_fields(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[]},{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"x\"}],"
        "\"max_tokens\":7,\"max_completion_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":40,\"seed\":-1,\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"stop_token_ids\":[5,6],\"ignore_eos\":true,\"user\":\"u\",\"unknown\":{\"x\":[1]},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},\"tools\":[{\"type\":\"function\"}]}";
    assert_int_equal(parse(&r, OAI_CHAT, body, &e), LL_OK);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.max_tokens, 9); /* max_completion_tokens wins */
    assert_true(r.sampling.has_temperature);
    assert_float_equal(r.sampling.temperature, 0.5, 1e-6);
    assert_float_equal(r.sampling.top_p, 0.9, 1e-6);
    assert_int_equal(r.sampling.top_k, 40);
    assert_true(r.sampling.has_seed);
    assert_true(r.sampling.seed == UINT64_MAX);
    assert_int_equal(r.n, 3);
    assert_true(r.stream && r.include_usage && r.ignore_eos && r.skip_special_tokens);
    assert_int_equal(r.n_stop_token_ids, 2);
    assert_int_equal(r.stop_token_ids[1], 6);
    assert_string_equal(r.user, "u");
    assert_int_equal(oai_request_check_supported(&r, &e), LL_OK);

    const cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_int_equal(cJSON_GetArraySize(msgs), 4);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "role")->valuestring,
                        "system");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")->valuestring,
                        "a\nb");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2), "content")));
    assert_non_null(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2), "tool_calls"));
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "tool_call_id")->valuestring, "x");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r.chat_context, "add_generation_prompt")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r.chat_context, "enable_thinking")));
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(r.chat_context, "tools")));
    oai_request_free(&r);
}

static void test_chat_defaults(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    assert_int_equal(parse(&r, OAI_CHAT,
                           " {\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                           "\"temperature\":null,\"stop\":null,\"logprobs\":false,"
                           "\"logit_bias\":{},\"stop\":[]}\n",
                           &e),
                     LL_OK);
    assert_null(r.model);
    assert_int_equal(r.max_tokens, 0);
    assert_int_equal(r.n, 1);
    assert_false(r.sampling.has_temperature || r.sampling.has_top_p || r.sampling.has_top_k ||
                 r.sampling.has_seed || r.sampling.has_repetition_penalty);
    assert_false(r.stream || r.include_usage || r.logprobs || r.ignore_eos);
    assert_true(r.skip_special_tokens);
    assert_int_equal(r.n_stop, 0);
    assert_int_equal(oai_request_check_supported(&r, &e), LL_OK);
    oai_request_free(&r);
}

static void test_completion_prompts(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":\"hello\"}", &e), LL_OK);
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "hello");
    assert_int_equal(r.prompts[0].text_len, 5);
    oai_request_free(&r);

    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":[\"a\",\"\",\"c\"],\"n\":2}", &e),
                     LL_OK);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[1].text, "");
    assert_string_equal(r.prompts[2].text, "c");
    assert_int_equal(r.n, 2);
    oai_request_free(&r);

    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":[1,2,151643]}", &e), LL_OK);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 151643);
    oai_request_free(&r);

    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":[[1],[2,3]],\"logprobs\":2}", &e),
                     LL_OK);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[1].n_ids, 2);
    assert_int_equal(r.prompts[1].ids[1], 3);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(oai_request_check_supported(&r, &e), LL_OK);
    oai_request_free(&r);
    /* echo with logprobs would need the prompt's logprobs */
    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":0}",
                           &e), LL_OK);
    assert_int_equal(oai_request_check_supported(&r, &e), LL_EUNSUPPORTED);
    assert_string_equal(e.param, "echo");
    oai_request_free(&r);
    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":true}", &e), LL_OK);
    assert_int_equal(oai_request_check_supported(&r, &e), LL_OK);
    oai_request_free(&r);
}

/* Malformed or out-of-range input: status and the field the error must name. */
static void test_malformed_table(void **state)
{
    (void)state;
    static const struct {
        enum oai_kind kind;
        const char *body;
        enum ll_status status;
        const char *param;
    } cases[] = {
        {OAI_CHAT, "", LL_EJSON, ""},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]", LL_EJSON, ""},
        {OAI_CHAT, "{\"messages\":[]} x", LL_EJSON, ""},
        {OAI_CHAT, "{'messages':[]}", LL_EJSON, ""},
        {OAI_CHAT, "[1,2]", LL_EINVAL, ""},
        {OAI_CHAT, "\"str\"", LL_EINVAL, ""},
        {OAI_CHAT, "{}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":null}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":{}}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":[]}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":[1]}", LL_EINVAL, "messages[0]"},
        {OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", LL_EINVAL, "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", LL_EINVAL,
         "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}", LL_EINVAL,
         "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", LL_EINVAL, "messages[0].content"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", LL_EINVAL,
         "messages[0].content"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":"
         "[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
         LL_EUNSUPPORTED, "messages[1].content[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
         LL_EINVAL, "messages[0].content[0].text"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", LL_EINVAL,
         "messages[0].content[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":1}",
         LL_EINVAL, "model"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"1\"}",
         LL_EINVAL, "temperature"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}",
         LL_EINVAL, "temperature"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}",
         LL_EINVAL, "top_p"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}",
         LL_EINVAL, "top_k"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":-2}",
         LL_EINVAL, "top_k"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}",
         LL_EINVAL, "max_tokens"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
         LL_EINVAL, "max_tokens"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1e300}",
         LL_EINVAL, "max_tokens"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":true}",
         LL_EINVAL, "max_completion_tokens"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", LL_EINVAL,
         "n"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1000}", LL_EINVAL,
         "n"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}",
         LL_EINVAL, "stream"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":1}",
         LL_EINVAL, "stream_options"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":"
         "{\"include_usage\":1}}",
         LL_EINVAL, "stream_options.include_usage"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"1\"}",
         LL_EINVAL, "seed"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":5}",
         LL_EINVAL, "stop"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",1]}",
         LL_EINVAL, "stop[1]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}",
         LL_EINVAL, "stop[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_p\":2}",
         LL_EINVAL, "min_p"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":-3}",
         LL_EINVAL, "presence_penalty"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":[]}",
         LL_EINVAL, "frequency_penalty"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"repetition_penalty\":0}",
         LL_EINVAL, "repetition_penalty"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[]}",
         LL_EINVAL, "logit_bias"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"abc\":1}}",
         LL_EINVAL, "logit_bias"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":101}}",
         LL_EINVAL, "logit_bias"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}",
         LL_EINVAL, "logprobs"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
         LL_EINVAL, "top_logprobs"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
         "\"top_logprobs\":21}",
         LL_EINVAL, "top_logprobs"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_token_ids\":[-1]}",
         LL_EINVAL, "stop_token_ids"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"user\":[]}",
         LL_EINVAL, "user"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}",
         LL_EINVAL, "chat_template_kwargs"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":"
         "{\"messages\":[]}}",
         LL_EINVAL, "chat_template_kwargs"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}",
         LL_EINVAL, "tools"},
        {OAI_COMPLETION, "{}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":5}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,-2]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,2.5]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[\"a\",1]}", LL_EINVAL, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[[1],[]]}", LL_EINVAL, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[[1],\"a\"]}", LL_EINVAL, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[null]}", LL_EINVAL, "prompt[0]"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", LL_EINVAL, "logprobs"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", LL_EINVAL, "echo"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", LL_EUNSUPPORTED, "suffix"},
        {OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"n\":40}", LL_EINVAL, "n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct oai_request r;
        struct oai_error e;
        enum ll_status s = parse(&r, cases[i].kind, cases[i].body, &e);
        if (s != cases[i].status || strcmp(e.param, cases[i].param))
            fail_msg("case %zu %s: got status %d param '%s' (%s), want %d '%s'", i,
                     cases[i].body, s, e.param, e.message, cases[i].status, cases[i].param);
        assert_true(e.message[0] != 0);
        /* a failed parse leaves nothing to free */
        assert_null(r.chat_context);
        assert_null(r.prompts);
        oai_request_free(&r);
    }
}

/* The sampling and stopping controls parse into their fields and are all served. */
static void test_sampling_controls(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_p\":0.1,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"logit_bias\":{\"11\":5,\"12\":-100},\"logprobs\":true,\"top_logprobs\":20,"
        "\"stop\":[\"a\",\"bc\",\"d\",\"e\",\"f\"],\"min_tokens\":3,\"max_tokens\":9}";
    assert_int_equal(parse(&r, OAI_CHAT, body, &e), LL_OK);
    assert_true(r.sampling.has_min_p && r.sampling.has_repetition_penalty);
    assert_float_equal(r.sampling.min_p, 0.1, 1e-6);
    assert_float_equal(r.sampling.presence_penalty, 0.5, 1e-6);
    assert_float_equal(r.sampling.frequency_penalty, -0.5, 1e-6);
    assert_float_equal(r.sampling.repetition_penalty, 1.1, 1e-6);
    assert_int_equal(r.n_logit_bias, 2);
    assert_int_equal(r.logit_bias[1].id, 12);
    assert_float_equal(r.logit_bias[1].bias, -100, 1e-6);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 20);
    assert_int_equal(r.n_stop, 5);
    assert_string_equal(r.stop[1], "bc");
    assert_int_equal(r.min_tokens, 3);
    assert_int_equal(oai_request_check_supported(&r, &e), LL_OK);
    oai_request_free(&r);
    /* defaults: nothing given */
    assert_int_equal(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                           &e), LL_OK);
    assert_false(r.sampling.has_min_p || r.sampling.has_repetition_penalty || r.logprobs);
    assert_int_equal(r.min_tokens, 0);
    oai_request_free(&r);
    /* min_tokens above max_tokens, or negative */
    assert_int_equal(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"min_tokens\":10,\"max_tokens\":9}", &e), LL_EINVAL);
    assert_string_equal(e.param, "min_tokens");
    assert_int_equal(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"min_tokens\":-1}", &e), LL_EINVAL);
    assert_string_equal(e.param, "min_tokens");
}

static void test_utf8_and_nesting(void **state)
{
    (void)state;
    assert_true(oai_utf8_valid("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 10, NULL));
    static const char *bad[] = {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", "\xc3", "a\xe4\xb8", "\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t at = 99;
        assert_false(oai_utf8_valid(bad[i], strlen(bad[i]), &at));
        assert_true(at < strlen(bad[i]));
    }
    struct oai_request r;
    struct oai_error e;
    assert_int_equal(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
                           &e),
                     LL_EUTF8);
    assert_non_null(strstr(e.message, "UTF-8"));
    /* escaped lone surrogates are not text either */
    assert_int_equal(
        parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\udc00\"}]}", &e),
        LL_EJSON);
    /* deep nesting is refused by the parser, not by the stack */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    assert_non_null(deep);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = 0;
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, deep, 2 * depth, &e), LL_EJSON);
    free(deep);
    /* embedded NUL in the body is not JSON */
    assert_int_equal(oai_request_parse(&r, OAI_COMPLETION, "{\"prompt\":\"a\"}\0", 15, &e),
                     LL_EJSON);
}

static void test_error_json(void **state)
{
    (void)state;
    struct oai_error e;
    oai_error_set(&e, LL_ENOTFOUND, NULL, "model_not_found", "The model '%s' does not exist",
                  "x\"y");
    char *s = oai_error_json(&e);
    assert_non_null(s);
    cJSON *j = cJSON_Parse(s);
    cJSON *err = cJSON_GetObjectItem(j, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring,
                        "The model 'x\"y' does not exist");
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "not_found_error");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "param")));
    assert_string_equal(cJSON_GetObjectItem(err, "code")->valuestring, "model_not_found");
    cJSON_Delete(j);
    free(s);
    oai_error_set(&e, LL_EINVAL, "temperature", NULL, "bad");
    s = oai_error_json(&e);
    j = cJSON_Parse(s);
    err = cJSON_GetObjectItem(j, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "param")->valuestring, "temperature");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "code")));
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error");
    cJSON_Delete(j);
    free(s);
}

static void test_tokenize_bodies(void **state)
{
    (void)state;
    struct oai_tokenize_request t;
    struct oai_detokenize_request d;
    struct oai_error e;
    const char *b1 = "{\"prompt\":\"hi\",\"model\":\"m\"}";
    assert_int_equal(oai_tokenize_parse(&t, b1, strlen(b1), &e), LL_OK);
    assert_string_equal(t.prompt, "hi");
    assert_true(t.add_special_tokens);
    assert_null(t.chat_context);
    oai_tokenize_free(&t);
    const char *b2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"return_token_strs\":true,\"add_generation_prompt\":false}";
    assert_int_equal(oai_tokenize_parse(&t, b2, strlen(b2), &e), LL_OK);
    assert_null(t.prompt);
    assert_false(t.add_special_tokens);
    assert_true(t.return_token_strs);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(t.chat_context, "add_generation_prompt")));
    oai_tokenize_free(&t);
    const char *b3 = "{\"prompt\":[1]}";
    assert_int_equal(oai_tokenize_parse(&t, b3, strlen(b3), &e), LL_EINVAL);
    assert_string_equal(e.param, "prompt");
    const char *b4 = "{\"tokens\":[1,2,3]}";
    assert_int_equal(oai_detokenize_parse(&d, b4, strlen(b4), &e), LL_OK);
    assert_int_equal(d.n_ids, 3);
    assert_int_equal(d.ids[2], 3);
    oai_detokenize_free(&d);
    const char *b5 = "{\"tokens\":[]}";
    assert_int_equal(oai_detokenize_parse(&d, b5, strlen(b5), &e), LL_OK);
    assert_int_equal(d.n_ids, 0);
    oai_detokenize_free(&d);
    const char *b6 = "{\"tokens\":\"1 2\"}";
    assert_int_equal(oai_detokenize_parse(&d, b6, strlen(b6), &e), LL_EINVAL);
    assert_string_equal(e.param, "tokens");
    const char *b7 = "{\"tokens\":[1,1e10]}";
    assert_int_equal(oai_detokenize_parse(&d, b7, strlen(b7), &e), LL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),      cmocka_unit_test(test_chat_defaults),
        cmocka_unit_test(test_completion_prompts), cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_sampling_controls), cmocka_unit_test(test_utf8_and_nesting),
        cmocka_unit_test(test_error_json),       cmocka_unit_test(test_tokenize_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
