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

#include "grammar.h"
#include "openai_request.h"
#include "utf8.h"

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
        "\"top_k\":40,\"seed\":-1,\"n\":3,\"stream\":true,\"stream_options\":"
        "{\"include_usage\":true},\"stop_token_ids\":[5,6],\"ignore_eos\":true,\"user\":\"u\","
        "\"metadata\":{\"x\":\"1\"},\"store\":false,\"chat_template_kwargs\":"
        "{\"enable_thinking\":false},\"tools\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\"}}]}";
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
    /* tools are the server's to put in the template variables (tool_calls.h) */
    assert_null(cJSON_GetObjectItem(r.chat_context, "tools"));
    assert_int_equal(r.n_tools, 1);
    assert_int_equal(r.tool_choice, OAI_TOOL_AUTO);
    assert_true(r.parallel_tool_calls && !r.legacy_functions);
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
        {OAI_CHAT, "[1,2]", LL_ETYPE, ""},
        {OAI_CHAT, "\"str\"", LL_ETYPE, ""},
        {OAI_CHAT, "{}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":null}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":{}}", LL_ETYPE, "messages"},
        {OAI_CHAT, "{\"messages\":[]}", LL_EINVAL, "messages"},
        {OAI_CHAT, "{\"messages\":[1]}", LL_ETYPE, "messages[0]"},
        {OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", LL_EINVAL, "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", LL_EINVAL,
         "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}", LL_ETYPE,
         "messages[0].role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", LL_EINVAL, "messages[0].content"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", LL_ETYPE,
         "messages[0].content"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":"
         "[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
         LL_EUNSUPPORTED, "messages[1].content[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
         LL_ETYPE, "messages[0].content[0].text"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", LL_ETYPE,
         "messages[0].content[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":1}",
         LL_ETYPE, "model"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"1\"}",
         LL_ETYPE, "temperature"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}",
         LL_EINVAL, "temperature"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}",
         LL_EINVAL, "top_p"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}",
         LL_ETYPE, "top_k"},
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
         LL_ETYPE, "max_completion_tokens"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", LL_EINVAL,
         "n"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1000}", LL_EINVAL,
         "n"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}",
         LL_ETYPE, "stream"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":1}",
         LL_ETYPE, "stream_options"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":"
         "{\"include_usage\":1}}",
         LL_ETYPE, "stream_options.include_usage"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"1\"}",
         LL_ETYPE, "seed"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":5}",
         LL_ETYPE, "stop"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",1]}",
         LL_ETYPE, "stop[1]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}",
         LL_EINVAL, "stop[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_p\":2}",
         LL_EINVAL, "min_p"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":-3}",
         LL_EINVAL, "presence_penalty"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":[]}",
         LL_ETYPE, "frequency_penalty"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"repetition_penalty\":0}",
         LL_EINVAL, "repetition_penalty"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[]}",
         LL_ETYPE, "logit_bias"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"abc\":1}}",
         LL_EINVAL, "logit_bias"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":101}}",
         LL_EINVAL, "logit_bias"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}",
         LL_ETYPE, "logprobs"},
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
         LL_ETYPE, "user"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}",
         LL_ETYPE, "chat_template_kwargs"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":"
         "{\"messages\":[]}}",
         LL_EINVAL, "chat_template_kwargs"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}",
         LL_ETYPE, "tools"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"foo\":1}",
         LL_EUNSUPPORTED, "foo"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_grammar\":\"a\"}",
         LL_EUNSUPPORTED, "guided_grammar"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_regex\":\"(?<=a)\"}",
         LL_EUNSUPPORTED, "guided_regex"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_regex\":\"(a\"}",
         LL_EINVAL, "guided_regex"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_regex\":3}",
         LL_ETYPE, "guided_regex"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_choice\":[]}", LL_ETYPE, "guided_choice"},
        /* vLLM's structured_outputs: one constraint, its names in the errors */
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":3}", LL_ETYPE,
         "structured_outputs"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{}}", LL_EINVAL,
         "structured_outputs"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"a\",\"choice\":"
         "[\"b\"]}}", LL_EINVAL, "structured_outputs"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"grammar\":\"root ::= x\"}}",
         LL_EUNSUPPORTED, "structured_outputs.grammar"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"json_object\":true,"
         "\"disable_any_whitespace\":true}}", LL_EUNSUPPORTED,
         "structured_outputs.disable_any_whitespace"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"choice\":[\"a\",\"\"]}}",
         LL_EINVAL, "structured_outputs.choice"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"(?<=a)\"}}",
         LL_EUNSUPPORTED, "structured_outputs.regex"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"json\":\"{nope\"}}", LL_EINVAL,
         "structured_outputs.json"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"json\":{}},\"guided_json\":{}}",
         LL_EINVAL, "structured_outputs"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_choice\":[\"a\",\"\"]}", LL_EINVAL,
         "guided_choice"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"guided_choice\":[\"a\"],\"guided_regex\":\"a\"}",
         LL_EINVAL, "guided_choice"},
        {OAI_COMPLETION,
         "{\"prompt\":\"x\",\"guided_json\":{},\"response_format\":{\"type\":\"json_object\"}}",
         LL_EINVAL, "guided_json"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"metadata\":1}",
         LL_ETYPE, "metadata"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}"
         "]}",
         LL_EINVAL, "tools[0].function"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"retrieval\""
         "}]}",
         LL_EUNSUPPORTED, "tools[0]"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"a b\"}}]}",
         LL_EINVAL, "tools[0].function.name"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         LL_EINVAL, "tools[1].function.name"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\",\"x\":1}}]}",
         LL_EUNSUPPORTED, "tools[0].function.x"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
         LL_EINVAL, "tool_choice"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"maybe\"}",
         LL_EINVAL, "tool_choice"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"n"
         "ame\":\"g\"}}}",
         LL_EINVAL, "tool_choice.function.name"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}}],\"functions\":[{\"name\":\"g\"}]}",
         LL_EINVAL, "functions"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[{\"name\":\"g\"}],"
         "\"function_call\":\"required\"}",
         LL_EINVAL, "function_call"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":5}",
         LL_ETYPE, "response_format"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xm"
         "l\"}}",
         LL_EINVAL, "response_format.type"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"js"
         "on_schema\"}}",
         LL_EINVAL, "response_format.json_schema"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"js"
         "on_object\",\"schema\":{}}}",
         LL_EUNSUPPORTED, "response_format.schema"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"js"
         "on_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"string\",\"pattern\":"
         "\"(?<!a)\"}}}}",
         LL_EUNSUPPORTED, "response_format.json_schema.schema"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"js"
         "on_object\"},\"guided_json\":{}}",
         LL_EINVAL, "guided_json"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"js"
         "on_object\"},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         LL_EUNSUPPORTED, "response_format"},
        {OAI_CHAT,
         "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{"
         "\"name\":\"f\",\"arguments\":{}}}]}]}",
         LL_ETYPE, "messages[0].tool_calls[0].function.arguments"},
        {OAI_COMPLETION,
         "{\"prompt\":\"a\",\"best_of\":2}",
         LL_EUNSUPPORTED, "best_of"},
        {OAI_COMPLETION,
         "{\"prompt\":\"a\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         LL_EUNSUPPORTED, "tools"},
        {OAI_COMPLETION, "{}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":5}", LL_ETYPE, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,-2]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,2.5]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", LL_EINVAL, "prompt"},
        {OAI_COMPLETION, "{\"prompt\":[\"a\",1]}", LL_ETYPE, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[[1],[]]}", LL_EINVAL, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[[1],\"a\"]}", LL_ETYPE, "prompt[1]"},
        {OAI_COMPLETION, "{\"prompt\":[null]}", LL_ETYPE, "prompt[0]"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", LL_EINVAL, "logprobs"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", LL_ETYPE, "echo"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", LL_EUNSUPPORTED, "suffix"},
        {OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"n\":40}", LL_EINVAL, "n"},
        /* the ranges batch lines used to have of their own (gen_params.h's now) */
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":2.5}", LL_EINVAL, "temperature"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"repetition_penalty\":101}", LL_EINVAL,
         "repetition_penalty"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"seed\":1e19}", LL_EINVAL, "seed"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"top_k\":1e10}", LL_EINVAL, "top_k"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":3e9}", LL_EINVAL, "max_tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct oai_request r;
        struct oai_error e;
        enum ll_status s = parse(&r, cases[i].kind, cases[i].body, &e);
        if (s != cases[i].status || strcmp(e.param, cases[i].param))
            fail_msg("case %zu %s: got status %d param '%s' (%s), want %d '%s'", i,
                     cases[i].body, s, e.param, e.message, cases[i].status, cases[i].param);
        assert_true(e.message[0] != 0);
        /* a wrong type is OpenAI's "invalid_type", a bad value "invalid_value" */
        if (s == LL_ETYPE)
            assert_string_equal(e.code, "invalid_type");
        if (s == LL_EINVAL)
            assert_true(!strcmp(e.code, "invalid_value") ||
                        !strcmp(e.code, "missing_required_parameter"));
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
    /* (the validator is base's ll_utf8_valid, tested in test_base) */
    static const char *bad[] = {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", "\xc3", "a\xe4\xb8", "\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[64];
        struct oai_request q;
        struct oai_error qe;
        snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", bad[i]);
        assert_int_equal(parse(&q, OAI_COMPLETION, body, &qe), LL_EUTF8);
        assert_string_equal(qe.code, "invalid_utf8");
        char at[32]; /* the bad byte's offset in the body */
        snprintf(at, sizeof at, "(byte offset %d)", bad[i][0] == 'a' ? 12 : 11);
        assert_non_null(strstr(qe.message, at));
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
    /* a JSON syntax error names its place */
    assert_int_equal(parse(&r, OAI_CHAT, "{\"messages\":\n [1,]}", &e), LL_EJSON);
    assert_string_equal(e.code, "invalid_json");
    assert_non_null(strstr(e.message, "request body: invalid JSON at line 2"));
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

    /* Found by fuzz_openai_request: an unknown field named with 3-byte characters, cut to fit
     * param (64 bytes) and the message, ended inside a character, so the error body was not
     * UTF-8. Both now end at the last whole character. */
    char body[1200] = "{\"";
    for (int i = 0; i < 300; i++)
        strcat(body, "\xe9\x95\xa9"); /* U+9569 */
    strcat(body, "\": 1, \"prompt\": \"x\"}");
    struct oai_request r;
    assert_int_equal(oai_request_parse(&r, OAI_COMPLETION, body, strlen(body), &e),
                     LL_EUNSUPPORTED);
    oai_request_free(&r);
    assert_int_equal(strlen(e.param), 63); /* 21 whole characters of the 64-byte field */
    assert_true(ll_utf8_valid(e.message, strlen(e.message), NULL));
    /* the message quotes 60 bytes of the name (20 characters) and goes on */
    assert_non_null(strstr(e.message, "\xe9\x95\xa9' is not supported by this server"));
    s = oai_error_json(&e);
    assert_true(ll_utf8_valid(s, strlen(s), NULL));
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
    assert_int_equal(oai_tokenize_parse(&t, b3, strlen(b3), &e), LL_ETYPE);
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
    assert_int_equal(oai_detokenize_parse(&d, b6, strlen(b6), &e), LL_ETYPE);
    assert_string_equal(e.param, "tokens");
    const char *b7 = "{\"tokens\":[1,1e10]}";
    assert_int_equal(oai_detokenize_parse(&d, b7, strlen(b7), &e), LL_EINVAL);
}

/* One set of ranges, the engine's and gen_params.h's: the edges are accepted, one past them
 * refused naming the field. (batch lines had their own: temperature up to 100, seed only
 * 0..2^53, no logit_bias value range; the server refused more than 1024 logit_bias entries and
 * left long stop strings to the engine.) */
static void test_unified_ranges(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const char *edges = "{\"prompt\":\"a\",\"temperature\":2,\"top_p\":1,\"min_p\":1,"
                        "\"repetition_penalty\":100,\"presence_penalty\":-2,"
                        "\"frequency_penalty\":2,\"top_k\":-1,\"seed\":-9223372036854775808,"
                        "\"logprobs\":5}";
    assert_int_equal(parse(&r, OAI_COMPLETION, edges, &e), LL_OK);
    assert_float_equal(r.sampling.temperature, GEN_TEMPERATURE_MAX, 0);
    assert_float_equal(r.sampling.repetition_penalty, GEN_REPETITION_PENALTY_MAX, 0);
    assert_float_equal(r.sampling.presence_penalty, -GEN_PENALTY_MAX, 0);
    assert_int_equal(r.sampling.top_k, -1);
    assert_true(r.sampling.seed == (uint64_t)INT64_MIN);
    assert_int_equal(r.top_logprobs, OAI_MAX_COMPLETION_LOGPROBS);
    oai_request_free(&r);

    /* logit_bias: ENGINE_MAX_LOGIT_BIAS entries, then one more; stop: ENGINE_MAX_STOP_STRINGS
     * strings of ENGINE_MAX_STOP_LEN bytes, then a longer one */
    for (int extra = 0; extra <= 1; extra++) {
        size_t cap = 64 + (size_t)(ENGINE_MAX_LOGIT_BIAS + 1) * 16 +
                     (size_t)ENGINE_MAX_STOP_STRINGS * (ENGINE_MAX_STOP_LEN + 4);
        char *body = malloc(cap), *w = body;
        assert_non_null(body);
        w += sprintf(w, "{\"prompt\":\"a\",\"logit_bias\":{");
        for (int i = 0; i < ENGINE_MAX_LOGIT_BIAS + extra; i++)
            w += sprintf(w, "%s\"%d\":-100", i ? "," : "", i);
        w += sprintf(w, "},\"stop\":[");
        for (int i = 0; i < ENGINE_MAX_STOP_STRINGS; i++) {
            int len = ENGINE_MAX_STOP_LEN;
            w += sprintf(w, "%s\"", i ? "," : "");
            memset(w, 'a' + i, (size_t)len);
            w += len;
            *w++ = '"';
        }
        strcpy(w, "]}");
        enum ll_status st = parse(&r, OAI_COMPLETION, body, &e);
        if (!extra) {
            assert_int_equal(st, LL_OK);
            assert_int_equal(r.n_logit_bias, ENGINE_MAX_LOGIT_BIAS);
            assert_int_equal(r.logit_bias[ENGINE_MAX_LOGIT_BIAS - 1].id, ENGINE_MAX_LOGIT_BIAS - 1);
            assert_float_equal(r.logit_bias[0].bias, -OAI_MAX_BIAS, 0);
            assert_int_equal(r.n_stop, ENGINE_MAX_STOP_STRINGS);
            assert_int_equal(strlen(r.stop[3]), ENGINE_MAX_STOP_LEN);
        } else {
            assert_int_equal(st, LL_EINVAL);
            assert_string_equal(e.param, "logit_bias");
        }
        oai_request_free(&r);
        if (extra) { /* the long stop string alone */
            w = body + sprintf(body, "{\"prompt\":\"a\",\"stop\":[\"x\",\"");
            memset(w, 'b', ENGINE_MAX_STOP_LEN + 1);
            strcpy(w + ENGINE_MAX_STOP_LEN + 1, "\"]}");
            assert_int_equal(parse(&r, OAI_COMPLETION, body, &e), LL_EINVAL);
            assert_string_equal(e.param, "stop[1]");
            assert_non_null(strstr(e.message, "1 to 256 bytes"));
        }
        free(body);
    }
    static const char *const over[][2] = {
        {"{\"prompt\":\"a\",\"temperature\":2.001}", "temperature"},
        {"{\"prompt\":\"a\",\"repetition_penalty\":100.5}", "repetition_penalty"},
        {"{\"prompt\":\"a\",\"presence_penalty\":2.5}", "presence_penalty"},
        {"{\"prompt\":\"a\",\"top_k\":-2}", "top_k"},
        {"{\"prompt\":\"a\",\"seed\":9223372036854777856}", "seed"},
        {"{\"prompt\":\"a\",\"logit_bias\":{\"1\":-100.5}}", "logit_bias"},
        {"{\"prompt\":\"a\",\"logprobs\":6}", "logprobs"},
        {"{\"prompt\":\"a\",\"stop_token_ids\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
         "stop_token_ids"},
    };
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        if (parse(&r, OAI_COMPLETION, over[i][0], &e) != LL_EINVAL || strcmp(e.param, over[i][1]))
            fail_msg("%s: got param '%s' (%s)", over[i][0], e.param, e.message);
        assert_string_equal(e.code, "invalid_value");
    }
}

/* batch lines: the same parser, kind by "messages", the line's id, the refusals of its own. */
static void test_batch_lines(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    cJSON *id;
    const char *chat = "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"temperature\":0.5,\"n\":2}";
    assert_int_equal(oai_batch_line_parse(&r, &id, chat, strlen(chat), &e), LL_OK);
    assert_int_equal(r.kind, OAI_CHAT);
    assert_non_null(r.chat_context);
    assert_string_equal(cJSON_GetStringValue(id), "a");
    assert_true(r.sampling.has_temperature && r.n == 2);
    cJSON_Delete(id);
    oai_request_free(&r);
    const char *comp = "{\"id\":{\"k\":[1]},\"prompt\":[[1,2],[3]],\"echo\":true}";
    assert_int_equal(oai_batch_line_parse(&r, &id, comp, strlen(comp), &e), LL_OK);
    assert_int_equal(r.kind, OAI_COMPLETION);
    assert_int_equal(r.n_prompts, 2);
    assert_true(r.echo);
    assert_true(cJSON_IsObject(id));
    cJSON_Delete(id);
    oai_request_free(&r);
    const char *noid = "{\"prompt\":\"x\"}";
    assert_int_equal(oai_batch_line_parse(&r, &id, noid, strlen(noid), &e), LL_OK);
    assert_null(id);
    oai_request_free(&r);

    static const char *const refused[][2] = {
        {"{\"id\":1,\"ids\":[1,2]}", "ids"},
        {"{\"id\":1,\"prompt\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "prompt"},
        {"{\"id\":1,\"max_tokens\":3}", "messages"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *l = refused[i][0];
        assert_int_equal(oai_batch_line_parse(&r, &id, l, strlen(l), &e), LL_EINVAL);
        assert_string_equal(e.param, refused[i][1]);
        assert_true(cJSON_IsNumber(id)); /* the id comes back for the error line */
        cJSON_Delete(id);
        assert_null(r.prompts);
    }
    assert_int_equal(oai_batch_line_parse(&r, &id, "{\"id\":1,", 8, &e), LL_EJSON);
    assert_null(id);
    assert_non_null(strstr(e.message, "request: invalid JSON"));

    /* one set of messages: a line is refused exactly as the same HTTP body is */
    static const struct {
        enum oai_kind kind;
        const char *body;
    } same[] = {
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":3}"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":\"hot\"}"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":0}"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"\"]}"},
        {OAI_COMPLETION, "{\"prompt\":[1,-2]}"},
        {OAI_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}"},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        struct oai_error eh, el;
        struct oai_request rh;
        enum ll_status sh = parse(&rh, same[i].kind, same[i].body, &eh);
        enum ll_status sl = oai_batch_line_parse(&r, &id, same[i].body, strlen(same[i].body), &el);
        cJSON_Delete(id);
        assert_int_not_equal(sh, LL_OK);
        if (sh != sl || strcmp(eh.param, el.param) || strcmp(eh.code, el.code) ||
            strcmp(eh.message, el.message))
            fail_msg("%s: HTTP %d '%s' '%s', batch %d '%s' '%s'", same[i].body, sh, eh.param,
                     eh.message, sl, el.param, el.message);
    }
}

/* A parsed request → engine parameters: the controls copied, the defaults by gen_params. */
static void test_request_params(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const struct generation_defaults g = {.has_temperature = true, .temperature = 0.6f,
                                          .has_top_p = true, .top_p = 0.95f,
                                          .has_repetition_penalty = true,
                                          .repetition_penalty = 1.1f, .bos_token_id = -1};
    const char *body = "{\"prompt\":\"a\",\"top_p\":0.5,\"seed\":7,\"max_tokens\":9,"
                       "\"min_tokens\":2,\"stop\":[\"x\"],\"stop_token_ids\":[3],"
                       "\"logit_bias\":{\"5\":1.5},\"ignore_eos\":true,"
                       "\"skip_special_tokens\":false,\"logprobs\":2,\"frequency_penalty\":0.5}";
    assert_int_equal(parse(&r, OAI_COMPLETION, body, &e), LL_OK);
    struct engine_params p;
    oai_request_params(&r, &g, &p);
    assert_float_equal(p.sampling.temperature, 0.6, 1e-6); /* generation_config's */
    assert_float_equal(p.sampling.top_p, 0.5, 1e-6);       /* the request's */
    assert_float_equal(p.penalties.repetition, 1.1, 1e-6);
    assert_float_equal(p.penalties.frequency, 0.5, 1e-6);
    assert_true(p.sampling.seed == 7);
    assert_int_equal(p.max_tokens, 9);
    assert_int_equal(p.min_tokens, 2);
    assert_int_equal(p.n_stop, 1);
    assert_string_equal(p.stop[0], "x");
    assert_int_equal(p.n_stop_ids, 1);
    assert_int_equal(p.stop_ids[0], 3);
    assert_int_equal(p.n_logit_bias, 1);
    assert_int_equal(p.logit_bias[0].id, 5);
    assert_float_equal(p.logit_bias[0].bias, 1.5, 0);
    assert_true(p.ignore_eos && p.keep_special && p.logprobs);
    assert_int_equal(p.top_logprobs, 2);
    assert_null(p.prompt);
    assert_int_equal(p.choice, 0);
    assert_false(p.reasoning);
    oai_request_free(&r);
}


/* response_format and guided_json become a grammar; the legacy functions map onto tools. */
static void test_structured_and_tools(void **state)
{
    (void)state;
    struct oai_request r;
    struct oai_error e;
    const char *M = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char body[1024];
    snprintf(body, sizeof body, "%s\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
             "{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}"
             "}}}", M);
    assert_int_equal(parse(&r, OAI_CHAT, body, &e), LL_OK);
    assert_non_null(r.grammar);
    assert_true(grammar_accepts(r.grammar, "{\"a\": 12}", 9, NULL));
    assert_false(grammar_accepts(r.grammar, "{\"a\": \"x\"}", 10, NULL));
    struct engine_params p;
    struct generation_defaults g = {0};
    oai_request_params(&r, &g, &p);
    assert_ptr_equal(p.grammar, r.grammar);
    oai_request_free(&r);
    /* json_object: any object; text: none */
    snprintf(body, sizeof body, "%s\"response_format\":{\"type\":\"json_object\"}}", M);
    assert_int_equal(parse(&r, OAI_CHAT, body, &e), LL_OK);
    assert_true(grammar_accepts(r.grammar, "{\"k\": [1, {}]}", 14, NULL));
    assert_false(grammar_accepts(r.grammar, "[1]", 3, NULL));
    oai_request_free(&r);
    snprintf(body, sizeof body, "%s\"response_format\":{\"type\":\"text\"}}", M);
    assert_int_equal(parse(&r, OAI_CHAT, body, &e), LL_OK);
    assert_null(r.grammar);
    oai_request_free(&r);
    /* vLLM's guided_json, as JSON text, on completions */
    assert_int_equal(parse(&r, OAI_COMPLETION, "{\"prompt\":\"a\",\"guided_json\":"
                           "\"{\\\"enum\\\":[\\\"yes\\\",\\\"no\\\"]}\"}", &e), LL_OK);
    assert_true(grammar_accepts(r.grammar, "\"no\"", 4, NULL));
    assert_false(grammar_accepts(r.grammar, "\"maybe\"", 7, NULL));
    oai_request_free(&r);

    /* legacy functions / function_call and history */
    assert_int_equal(parse(&r, OAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                           "\"assistant\",\"content\":null,\"function_call\":{\"name\":\"f\","
                           "\"arguments\":\"{}\"}},{\"role\":\"function\",\"name\":\"f\","
                           "\"content\":\"1\"}],\"functions\":[{\"name\":\"f\",\"parameters\":"
                           "{\"type\":\"object\"}},{\"name\":\"g\"}],\"function_call\":"
                           "{\"name\":\"g\"}}", &e), LL_OK);
    assert_int_equal(r.n_tools, 2);
    assert_true(r.legacy_functions && !r.parallel_tool_calls);
    assert_int_equal(r.tool_choice, OAI_TOOL_NAMED);
    assert_string_equal(r.tool_choice_name, "g");
    const cJSON *t1 = cJSON_GetArrayItem(r.tools, 1);
    assert_string_equal(cJSON_GetObjectItem(t1, "type")->valuestring, "function");
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(t1, "function"), "name")->valuestring, "g");
    const cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    const cJSON *calls = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "tool_calls");
    assert_int_equal(cJSON_GetArraySize(calls), 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0),
                                                                "function"), "name")->valuestring,
                        "f");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2), "role")->valuestring,
                        "tool");
    oai_request_free(&r);
    /* tool_choice none keeps the tools parsed (the server leaves them out of the prompt) */
    assert_int_equal(parse(&r, OAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
                           "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                           "\"tool_choice\":\"none\",\"parallel_tool_calls\":false}", &e), LL_OK);
    assert_int_equal(r.tool_choice, OAI_TOOL_NONE);
    assert_false(r.parallel_tool_calls);
    oai_request_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),      cmocka_unit_test(test_chat_defaults),
        cmocka_unit_test(test_completion_prompts), cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_sampling_controls), cmocka_unit_test(test_utf8_and_nesting),
        cmocka_unit_test(test_error_json),       cmocka_unit_test(test_tokenize_bodies),
        cmocka_unit_test(test_unified_ranges),   cmocka_unit_test(test_batch_lines),
        cmocka_unit_test(test_request_params),   cmocka_unit_test(test_structured_and_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
