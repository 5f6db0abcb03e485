/*
 * test_template.c: the chat-template engine (include/chat_template.h).
 *
 * Every case of tests/fixtures/chat-templates/{r1,qwen25,qwen3,llama32}.cases.json must render
 * byte for byte (the counts are asserted so that a silently skipped case fails). Unit tests pin
 * expressions, filters, tests, whitespace control, loops, namespaces, slicing, macros and tojson
 * to the outputs @huggingface/jinja 0.5.11 and Python jinja2 3.1 give (where they differ, the value
 * pinned is the one the engine documents: @huggingface/jinja where it renders, jinja2 where it
 * raises). Error tests check the code, the message and the line:column, and run under ASan/LSan
 * in `make test`, which makes every error path a leak check too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chat_template.h"
#include "tokenizer.h"
#include "util.h"

#define FIXTURES "tests/fixtures/chat-templates/"
#define R1_CASES 7
#define QWEN25_CASES 7
#define QWEN3_CASES 16
#define LLAMA32_CASES 15

/* Render tpl with a JSON context (NULL: none) and bos/eos "<s>" / "</s>". */
static enum ll_status render_lim(const char *tpl, const char *ctx_json,
                                 const struct chat_template_limits *lim, char **out,
                                 struct ll_err *err)
{
    struct chat_template *t = NULL;
    *out = NULL;
    enum ll_status st = chat_template_compile(&t, tpl, err);
    if (st != LL_OK)
        return st;
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    if (ctx_json)
        assert_non_null(ctx);
    st = chat_template_render_ex(t, ctx, "<s>", "</s>", lim, out, NULL, err);
    cJSON_Delete(ctx);
    chat_template_free(t);
    return st;
}

static void check_ctx(const char *tpl, const char *ctx, const char *want)
{
    char *out;
    struct ll_err err = {0};
    enum ll_status st = render_lim(tpl, ctx, NULL, &out, &err);
    if (st != LL_OK)
        fail_msg("template %s\nfailed: %s", tpl, err.msg);
    if (strcmp(out, want) != 0)
        fail_msg("template %s\n got  [%s]\n want [%s]", tpl, out, want);
    free(out);
}

static void check(const char *tpl, const char *want)
{
    check_ctx(tpl, NULL, want);
}

/* Expect an error with this code whose message contains each of the given pieces. */
static void check_err_lim(const char *tpl, const char *ctx,
                          const struct chat_template_limits *lim, enum ll_status code,
                          const char *piece1, const char *piece2)
{
    char *out;
    struct ll_err err = {0};
    enum ll_status st = render_lim(tpl, ctx, lim, &out, &err);
    if (st == LL_OK) {
        fail_msg("template %s\nrendered [%s] instead of failing", tpl, out);
        free(out);
    }
    if (st != code)
        fail_msg("template %s\n code %d (%s), want %d", tpl, st, err.msg, code);
    if (piece1 && !strstr(err.msg, piece1))
        fail_msg("template %s\n message [%s] lacks [%s]", tpl, err.msg, piece1);
    if (piece2 && !strstr(err.msg, piece2))
        fail_msg("template %s\n message [%s] lacks [%s]", tpl, err.msg, piece2);
    assert_null(out);
}

static void check_err(const char *tpl, enum ll_status code, const char *piece1, const char *piece2)
{
    check_err_lim(tpl, NULL, NULL, code, piece1, piece2);
}

/* ------------------------------------------------------------------ fixtures */

static char *read_text(const char *path)
{
    char *data;
    size_t len;
    struct ll_err err;
    if (ll_read_file(path, &data, &len, &err) != LL_OK)
        fail_msg("%s", err.msg);
    return data;
}

/* The text of a rendered date for the present moment: strftime(fmt) of localtime. */
static void date_now(char *buf, size_t size, const char *fmt)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    assert_true(strftime(buf, size, fmt, &tm) > 0);
}

/* For the case named today_case (NULL: none), whose context has no date_string so the
 * template asked strftime_now("%d %b %Y") for it: the render is compared with the recorded one
 * in which the date that follows "Today Date: " (the day it was rendered) becomes today's.
 * Today is read before and after the render, so a render across midnight passes. */
static bool same_with_today(const char *got, size_t len, const char *want,
                            const char *date_before)
{
    static const char mark[] = "Today Date: ";
    const char *at = strstr(want, mark);
    assert_non_null(at);
    at += strlen(mark);
    const char *end = strchr(at, '\n');
    assert_non_null(end);
    char after[64];
    date_now(after, sizeof after, "%d %b %Y");
    const char *dates[2] = {date_before, after};
    for (int i = 0; i < 2; i++) {
        size_t dl = strlen(dates[i]);
        size_t pre = (size_t)(at - want), post = strlen(end);
        if (len == pre + dl + post && memcmp(got, want, pre) == 0 &&
            memcmp(got + pre, dates[i], dl) == 0 && memcmp(got + pre + dl, end, post) == 0)
            return true;
    }
    return false;
}

/* Render every case of a fixture file with t (or with the template the file names); returns
 * the number of cases, failing on any difference. */
static int run_fixture_today(const char *cases_file, const struct chat_template *t_override,
                             const char *today_case)
{
    char *text = read_text(cases_file);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    const cJSON *file = cJSON_GetObjectItem(doc, "template_file");
    const cJSON *bos = cJSON_GetObjectItem(doc, "bos_token");
    const cJSON *eos = cJSON_GetObjectItem(doc, "eos_token");
    const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
    /* bos_token null: a tokenizer without one (Qwen3's) */
    assert_true(cJSON_IsString(file) && (cJSON_IsString(bos) || cJSON_IsNull(bos)) &&
                cJSON_IsString(eos));
    assert_true(cJSON_IsArray(cases));

    struct chat_template *own = NULL;
    const struct chat_template *t = t_override;
    if (!t) {
        char path[512];
        snprintf(path, sizeof path, FIXTURES "%s", file->valuestring);
        char *src = read_text(path);
        struct ll_err err = {0};
        if (chat_template_compile(&own, src, &err) != LL_OK)
            fail_msg("%s: %s", path, err.msg);
        free(src);
        t = own;
    }
    int n = 0, today_seen = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n++) {
        const cJSON *name = cJSON_GetObjectItem(c, "name");
        const cJSON *ctx = cJSON_GetObjectItem(c, "context");
        const cJSON *want = cJSON_GetObjectItem(c, "rendered");
        assert_true(cJSON_IsString(name) && cJSON_IsObject(ctx) && cJSON_IsString(want));
        char *out = NULL;
        size_t len = 0;
        struct ll_err err = {0};
        bool today = today_case && strcmp(name->valuestring, today_case) == 0;
        char before[64];
        date_now(before, sizeof before, "%d %b %Y");
        if (chat_template_render_ex(t, ctx, cJSON_IsString(bos) ? bos->valuestring : NULL,
                                    eos->valuestring, NULL, &out, &len, &err) != LL_OK)
            fail_msg("%s case %s: %s", cases_file, name->valuestring, err.msg);
        bool same = today ? same_with_today(out, len, want->valuestring, before)
                          : len == strlen(want->valuestring) &&
                                memcmp(out, want->valuestring, len) == 0;
        if (!same)
            fail_msg("%s case %s:\n got  [%s]\n want [%s]%s", cases_file, name->valuestring,
                     out, want->valuestring, today ? " (its date made today's)" : "");
        today_seen += today;
        free(out);
    }
    assert_int_equal(today_seen, today_case != NULL);
    chat_template_free(own);
    cJSON_Delete(doc);
    return n;
}

static int run_fixture(const char *cases_file, const struct chat_template *t_override)
{
    return run_fixture_today(cases_file, t_override, NULL);
}

static void test_fixture_r1(void **state)
{
    (void)state;
    assert_int_equal(run_fixture(FIXTURES "r1.cases.json", NULL), R1_CASES);
}

static void test_fixture_qwen25(void **state)
{
    (void)state;
    assert_int_equal(run_fixture(FIXTURES "qwen25.cases.json", NULL), QWEN25_CASES);
}

/* Qwen3's template (thinking kept only after the last real user query, reasoning_content,
 * enable_thinking, tools and tool calls with object or string arguments, namespaces, reversed
 * loops, string methods), as its tokenizer_config.json in models/qwen3-tokenizer holds it. */
static void test_fixture_qwen3(void **state)
{
    (void)state;
    assert_int_equal(run_fixture(FIXTURES "qwen3.cases.json", NULL), QWEN3_CASES);
    struct chat_template *t;
    char *bos, *eos;
    struct ll_err err = {0};
    if (chat_template_load_model(&t, &bos, &eos, "models/qwen3-tokenizer", &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_null(bos);
    assert_string_equal(eos, "<|im_end|>");
    assert_int_equal(run_fixture(FIXTURES "qwen3.cases.json", t), QWEN3_CASES);
    free(bos);
    free(eos);
    chat_template_free(t);
}

/* Llama 3.2's template (system header dated by date_string or else strftime_now, content
 * trimmed, tools in the first user message or in the system message, custom_tools, one tool
 * call with tojson arguments, tool and ipython turns with string or JSON content), as its
 * tokenizer_config.json in models/llama3-tokenizer holds it. The case without date_string
 * was rendered on 2026-11-29 and is compared with that day's date made today's. */
static void test_fixture_llama32(void **state)
{
    (void)state;
    const char *file = FIXTURES "llama32.cases.json";
    assert_int_equal(run_fixture_today(file, NULL, "date_from_strftime_now"), LLAMA32_CASES);
    struct chat_template *t;
    char *bos, *eos;
    struct ll_err err = {0};
    if (chat_template_load_model(&t, &bos, &eos, "models/llama3-tokenizer", &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(bos, "<|begin_of_text|>");
    assert_string_equal(eos, "<|eot_id|>");
    assert_int_equal(run_fixture_today(file, t, "date_from_strftime_now"), LLAMA32_CASES);
    char *src = read_text(FIXTURES "llama32.jinja");
    assert_string_equal(chat_template_source(t), src);
    free(src);

    /* the template's own errors: tools with no user message to put them in, two calls */
    char *out = NULL;
    cJSON *ctx = cJSON_Parse("{\"messages\": [], \"tools\": [], \"date_string\": \"1 Jan 2026\"}");
    assert_int_equal(chat_template_render(t, ctx, bos, eos, &out, &err), LL_ETEMPLATE);
    assert_non_null(strstr(err.msg, "Cannot put tools in the first user message"));
    assert_null(out);
    cJSON_Delete(ctx);
    ctx = cJSON_Parse("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\":"
                      " {\"name\": \"a\", \"arguments\": {}}}, {\"function\": {\"name\": \"b\","
                      " \"arguments\": {}}}]}], \"date_string\": \"1 Jan 2026\"}");
    assert_int_equal(chat_template_render(t, ctx, bos, eos, &out, &err), LL_ETEMPLATE);
    assert_non_null(strstr(err.msg, "only supports single tool-calls"));
    cJSON_Delete(ctx);
    free(bos);
    free(eos);
    chat_template_free(t);
}

/* The tiny model ships the DeepSeek-R1 template: loading it from tokenizer_config.json must
 * give the same template and special tokens as the fixture. */
static void test_load_model_fixture(void **state)
{
    (void)state;
    struct chat_template *t;
    char *bos, *eos;
    struct ll_err err = {0};
    if (chat_template_load_model(&t, &bos, &eos, "tests/fixtures/tiny-qwen2", &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(bos, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    assert_string_equal(eos, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    /* the same strings the tokenizer gives a template (one reader of the file) */
    struct tokenizer *tok = NULL;
    if (tokenizer_load(&tok, "tests/fixtures/tiny-qwen2", &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(bos, tokenizer_bos_token(tok));
    assert_string_equal(eos, tokenizer_eos_token(tok));
    tokenizer_free(tok);
    assert_int_equal(run_fixture(FIXTURES "r1.cases.json", t), R1_CASES);
    char *src = read_text(FIXTURES "r1.jinja");
    size_t n = strlen(src);
    if (n && src[n - 1] == '\n')
        src[n - 1] = 0;
    assert_string_equal(chat_template_source(t), src);
    free(src);
    free(bos);
    free(eos);
    chat_template_free(t);
}

/* ------------------------------------------------------------------ load_model variants */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_load_model_variants(void **state)
{
    (void)state;
    char dir[] = "/tmp/llaisys-tpl-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg[256], jinja[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    struct chat_template *t;
    char *bos, *eos, *out;
    struct ll_err err = {0};

    /* a list of named templates: "default" is taken; plain-string tokens */
    write_file(cfg, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                    " {\"name\": \"default\", \"template\": \"D{{ bos_token }}\"}],"
                    " \"bos_token\": \"<b>\", \"eos_token\": null}");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_OK);
    assert_string_equal(bos, "<b>");
    assert_null(eos);
    assert_int_equal(chat_template_render(t, NULL, bos, eos, &out, &err), LL_OK);
    assert_string_equal(out, "D<b>");
    free(out);
    free(bos);
    chat_template_free(t);

    /* no chat_template in the config: chat_template.jinja beside it */
    write_file(cfg, "{\"bos_token\": {\"content\": \"<x>\"}}");
    write_file(jinja, "J{{ bos_token }}\n");
    assert_int_equal(chat_template_load_model(&t, &bos, NULL, dir, &err), LL_OK);
    assert_int_equal(chat_template_render(t, NULL, bos, NULL, &out, &err), LL_OK);
    assert_string_equal(out, "J<x>");
    free(out);
    free(bos);
    chat_template_free(t);
    unlink(jinja);

    /* errors: nothing to load, list without default, bad template, bad JSON */
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "no chat_template"));
    assert_null(t);
    write_file(cfg, "{\"chat_template\": [{\"name\": \"a\", \"template\": \"A\"},"
                    " {\"name\": \"b\", \"template\": \"B\"}]}");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "default"));
    write_file(cfg, "{\"chat_template\": \"{% if %}\"}");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_ETEMPLATE);
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    assert_non_null(strstr(err.msg, "line 1, column 7"));
    write_file(cfg, "{\"chat_template\": ");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EJSON);

    /* One reader (tokenizer_config_read) for the tokenizer and the template: a top level that
     * is not an object and a special token of the wrong type fail the same way in both (the
     * tokenizer's rules: LL_EFORMAT naming the field). */
    write_file(cfg, "[1]");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: expected a JSON object at the top"));
    write_file(cfg, "{\"chat_template\": \"T\", \"eos_token\": 7}");
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "eos_token: expected a string, an AddedToken object"));
    assert_null(t);
    /* A malformed chat_template is the template's problem only: the reader still gives the
     * special tokens (the tokenizer loads), and says why the template is unusable. */
    write_file(cfg, "{\"chat_template\": 3, \"bos_token\": {\"content\": \"<s>\"}, "
                    "\"add_bos_token\": false}");
    struct tokenizer_config tc;
    assert_int_equal(tokenizer_config_read(&tc, dir, &err), LL_OK);
    assert_true(tc.found && tc.has_add_bos && !tc.add_bos && !tc.has_add_eos);
    assert_string_equal(tc.bos_token, "<s>");
    assert_null(tc.eos_token);
    assert_null(tc.chat_template);
    assert_string_equal(tc.chat_template_error, "chat_template must be a string or a list");
    tokenizer_config_free(&tc);
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: chat_template must be a string"));
    unlink(cfg);
    assert_int_equal(tokenizer_config_read(&tc, dir, &err), LL_OK);
    assert_false(tc.found);
    tokenizer_config_free(&tc);
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, dir, &err), LL_EIO);
    rmdir(dir);
}

/* ------------------------------------------------------------------ expressions */

static void test_literals(void **state)
{
    (void)state;
    check("{{ 'a\\tb' }}|{{ \"q\\\"q\" }}|{{ 'it\\'s' }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}",
          "a\tb|q\"q|it's|\xc3\xa9" "A|ab");
    check("{{ '\\U0001F600' }}|{{ '\\ud83d\\ude00' }}|{{ '\\d' }}",
          "\xf0\x9f\x98\x80|\xf0\x9f\x98\x80|\\d");
    check("{{ 42 }}|{{ -7 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e3 }}|{{ 1_000 }}", "42|-7|1.5|2.0|1000.0|1000");
    check("{{ true }}|{{ True }}|{{ false }}|{{ none }}|{{ None }}|[{{ undefined_name }}]",
          "true|true|false|||[]");
    check("{{ [1, 'a', none, true, 2.5] }}|{{ {'a': [1, {'b': none}]} }}|{{ (1, 2) }}|{{ () }}",
          "[1, \"a\", null, true, 2.5]|{\"a\": [1, {\"b\": null}]}|[1, 2]|[]");
}

static void test_arithmetic(void **state)
{
    (void)state;
    check("{{ 1 + 2 }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 7 % 3 }}|{{ 1.5 * 2 }}|{{ 10 / 4 }}",
          "3|3|3.5|1024|1|3.0|2.5");
    /* Python's floor division and modulo (sign of the divisor) */
    check("{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 3.0 // 2 }}|{{ 2 ** -1 }}", "-4|2|-2|1.0|0.5");
    check("{{ 0.1 + 0.2 }}|{{ 1 - 0.5 }}|{{ 9223372036854775807 + 1 > 0 }}",
          "0.30000000000000004|0.5|true");
    check("{{ 'ab' * 3 }}|{{ [0] * 3 }}|{{ 'x' * 0 }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}",
          "ababab|[0, 0, 0]||[1, 2]|ab");
    check("{{ 'a' ~ 1 ~ true ~ none ~ undefined_name }}|{{ 'n' + 1 }}", "a1trueNone|n1");
    check("{{ 1 + 2 * 3 - 4 / 2 }}|{{ (1 + 2) * 3 }}|{{ -2 ** 2 }}|{{ 2 * 3 ~ 4 }}", "5.0|9|4|64");
}

static void test_comparisons_logic(void **state)
{
    (void)state;
    check("{{ 3 > 2 }}{{ 2 >= 2 }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ 1 == 1.0 }}{{ 1 != 2 }}"
          "{{ [1] == [1] }}{{ {'a': 1} == {'a': 1} }}{{ 'a' == 1 }}",
          "truetruetruetruetruetruetruetruefalse");
    check("{{ 1 and 2 }}|{{ 0 and 2 }}|{{ 0 or 'x' }}|{{ '' or [] }}|{{ not 1 }}|{{ not '' }}",
          "2|0|x|[]|false|true");
    check("{{ 1 in [1,2] }}|{{ 3 not in [1,2] }}|{{ 'b' in 'abc' }}|{{ 'k' in {'k': 1} }}|"
          "{{ 'z' in undefined_name }}|{{ not 'a' in 'abc' }}",
          "true|true|true|true|false|false");
    check("{{ 'a' if true else 'b' }}|{{ 'a' if false else 'b' }}|[{{ 'a' if false }}]|"
          "{{ 1 if 0 else 2 if 0 else 3 }}",
          "a|b|[]|3");
}

static void test_access_and_slicing(void **state)
{
    (void)state;
    const char *ctx = "{\"d\": {\"a\": 1, \"items\": [5], \"c\": {\"x\": \"y\"}},"
                      " \"m\": [{\"role\": \"user\", \"content\": null}]}";
    check_ctx("{{ d.a }}|{{ d['a'] }}|{{ d.c.x }}|{{ d['c']['x'] }}|{{ d.items }}|{{ m[0].role }}|"
              "{{ m[-1]['content'] is none }}|[{{ d.zz }}]|[{{ d.zz.yy }}]|[{{ m[5] }}]|{{ m.0.role }}",
              ctx, "1|1|y|y|[5]|user|true|[]|[]|[]|user");
    check("{{ [1,2,3][1:] }}|{{ [1,2,3][::-1] }}|{{ 'hello'[1:4] }}|{{ [1,2,3,4,5][1:4:2] }}|"
          "{{ 'abc'[-1] }}|{{ [1,2,3][:-1] }}|{{ [1,2,3][5:] }}|{{ 'abc'[-5:10] }}|[{{ 'abc'[5] }}]",
          "[2, 3]|[3, 2, 1]|ell|[2, 4]|c|[1, 2]|[]|abc|[]");
    /* strings slice by code point, not by byte */
    check("{{ 'h\xc3\xa9llo'[::-1] }}|{{ 'h\xc3\xa9llo'[1:3] }}|{{ 'h\xc3\xa9llo'[1] }}|"
          "{{ 'h\xc3\xa9llo'|length }}",
          "oll\xc3\xa9h|\xc3\xa9l|\xc3\xa9|5");
}

static void test_string_methods(void **state)
{
    (void)state;
    check("{{ 'a,b,c'.split(',') }}|{{ ' a  b '.split() }}|{{ '  a  b  '.split(none, 1) }}|"
          "{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}",
          "[\"a\", \"b\", \"c\"]|[\"a\", \"b\"]|[\"a\", \"b  \"]|[\"a\", \"b,c\"]|[\"a,b\", \"c\"]");
    check("{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith('bc') }}|{{ 'abc'.startswith(('x', 'a')) }}|"
          "{{ '  xy  '.strip() }}|{{ 'xxyxx'.strip('x') }}|[{{ ' x '.lstrip() }}]|[{{ ' x '.rstrip() }}]",
          "true|true|true|xy|y|[x ]|[ x]");
    check("{{ 'aXa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.upper() }}|"
          "{{ 'AB'.lower() }}|{{ 'hello world'.title() }}|{{ '1st place'.title() }}|"
          "{{ 'abc'.find('c') }}|{{ 'abab'.count('ab') }}|{{ '-'.join(['a', 'b']) }}",
          "bXb|bba|AB|ab|Hello World|1St Place|2|2|a-b");
    check("{{ '{} is {}'.format('a', 1) }}|{{ '{0}{name}'.format('x', name='y') }}|"
          "{{ 'think</think>answer'.split('</think>')[-1] }}",
          "a is 1|xy|answer");
}

static void test_dict_methods_and_loops_over_dicts(void **state)
{
    (void)state;
    const char *ctx = "{\"d\": {\"a\": 1, \"b\": [1, 2]}}";
    check_ctx("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|"
              "{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('zz', 'dflt') }}|[{{ d.get('zz') }}]|"
              "{% for k in d %}{{ k }}{% endfor %}|{{ d|items|list }}",
              ctx, "a=1;b=[1, 2];|[\"a\", \"b\"]|[1, [1, 2]]|1|dflt|[]|ab|[[\"a\", 1], [\"b\", [1, 2]]]");
}

/* ------------------------------------------------------------------ filters and tests */

static void test_filters(void **state)
{
    (void)state;
    check("{{ 'Hello World'|upper }}|{{ 'Hello World'|lower }}|{{ 'hello wORLD'|title }}|"
          "{{ 'hello WORLD'|capitalize }}|{{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') }}|"
          "{{ [1,2,3]|length }}|{{ {'a': 1}|count }}|{{ undefined_name|length }}",
          "HELLO WORLD|hello world|Hello World|Hello world|x|y|3|1|0");
    check("{{ [3,1,2]|first }}|{{ [3,1,2]|last }}|{{ ['a','b']|join(', ') }}|{{ [1,2]|join }}|"
          "{{ 'abc'|list }}|{{ [1,2,3]|reverse|list }}|{{ 'abc'|reverse }}|{{ [3,1,2]|sort }}|"
          "{{ [3,1,2]|sort(reverse=true) }}|{{ ['b','A','c']|sort }}",
          "3|2|a, b|12|[\"a\", \"b\", \"c\"]|[3, 2, 1]|cba|[1, 2, 3]|[3, 2, 1]|[\"A\", \"b\", \"c\"]");
    check("{{ x|default('d') }}|[{{ none|default('d') }}]|{{ ''|default('d', true) }}|{{ 0|d(5) }}|"
          "{{ 'abc'|replace('b', 'X') }}|{{ 42|string }}|{{ '42'|int + 1 }}|{{ '4.5'|float }}|"
          "{{ 'x'|int }}|{{ 3.9|int }}|{{ 'x'|int(7) }}|{{ '0x1A'|int(0, 16) }}",
          "d|[]|d|0|aXc|42|43|4.5|0|3|7|26");
    check("{{ [1,2,2,3,1]|unique|list }}|{{ ['a','A']|unique|list }}|{{ -1|abs }}|{{ 2.567|round(2) }}|"
          "{{ 2.5|round }}|{{ 3|round }}|{{ 2.1|round(0, 'ceil') }}|{{ [1,2,3]|sum }}|{{ [1,5,3]|max }}|"
          "{{ [4,2,8]|min }}|{{ 'a b-c'|wordcount }}",
          "[1, 2, 3]|[\"a\"]|1|2.57|2.0|3|3.0|6|5|2|3");
    check("{{ [{'n': 'b', 'v': 2}, {'n': 'a', 'v': 1}]|sort(attribute='n')|map(attribute='v')|list }}|"
          "{{ [{'a': 1}, {'a': 0}, {}]|selectattr('a')|list|length }}|"
          "{{ [{'a': 1}, {'b': 0}]|selectattr('a', 'defined')|list }}|"
          "{{ [{'a': 1}, {'b': 0}]|rejectattr('a', 'defined')|list }}|"
          "{{ [1,2,3,4]|select('even')|list }}|{{ [1,2,3]|reject('odd')|list }}|"
          "{{ ['a','B']|map('upper')|join }}|{{ [1,2]|map('string')|join('-') }}|"
          "{{ [{'a': {'b': 7}}]|map(attribute='a.b')|first }}|{{ {'b': 2, 'a': 1}|dictsort }}",
          "[1, 2]|1|[{\"a\": 1}]|[{\"b\": 0}]|[2, 4]|[2]|AB|1-2|7|[[\"a\", 1], [\"b\", 2]]");
    check("{{ 'line1\nline2\n\nline4'|indent(2) }}|{{ 'a\nb'|indent(4, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}",
          "line1\n  line2\n\n  line4|    a\n    b|a\n> \n> b");
    check("{{ '<a href=\"x\">&\\'</a>'|e }}|{{ '<b>'|safe }}|{{ '%s-%d'|format('a', 3) }}|"
          "{{ '%s and %s' % ('x', 'y') }}|{{ '%05.2f' % 3.14159 }}|{{ '%x%%' % 255 }}",
          "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|<b>|a-3|x and y|03.14|ff%");
    check("{{ '\xc3\x9f'|upper }}|{{ '\xc3\x80\xc3\x89'|lower }}|{{ 'a-b c(d'|title }}",
          "SS|\xc3\xa0\xc3\xa9|A-B C(D");
}

static void test_tojson(void **state)
{
    (void)state;
    const char *ctx =
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\":"
        " \"d\\u00e9j\\u00e0 \\\"q\\\" \\\\ \\n\\t\\u0001 \\ud83d\\ude00 </x>\", \"parameters\":"
        " {\"a\": [1, 2.5, true, false, null], \"e\": {}, \"l\": []}}}]}";
    /* one line: ", " and ": " separators, non-ASCII kept, control characters \u00XX */
    check_ctx("{{ tools|tojson }}", ctx,
              "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": "
              "\"d\xc3\xa9j\xc3\xa0 \\\"q\\\" \\\\ \\n\\t\\u0001 \xf0\x9f\x98\x80 </x>\", "
              "\"parameters\": {\"a\": [1, 2.5, true, false, null], \"e\": {}, \"l\": []}}}]");
    check_ctx("{{ tools[0].function.parameters|tojson(indent=2) }}", ctx,
              "{\n  \"a\": [\n    1,\n    2.5,\n    true,\n    false,\n    null\n  ],\n"
              "  \"e\": {},\n  \"l\": []\n}");
    check_ctx("{{ tools[0].function.description|tojson(ensure_ascii=true) }}", ctx,
              "\"d\\u00e9j\\u00e0 \\\"q\\\" \\\\ \\n\\t\\u0001 \\ud83d\\ude00 </x>\"");
    check("{{ {'b': 1, 'a': {'d': 2, 'c': 3}}|tojson(sort_keys=true) }}|"
          "{{ [1, [2], {'k': 'v'}]|tojson(separators=(',', ':')) }}|{{ x|tojson }}|{{ 'a'|tojson }}|"
          "{{ 1.5|tojson }}|{{ 2.0|tojson }}",
          "{\"a\": {\"c\": 3, \"d\": 2}, \"b\": 1}|[1,[2],{\"k\":\"v\"}]|null|\"a\"|1.5|2");
}

static void test_tests(void **state)
{
    (void)state;
    check("{{ x is defined }}|{{ x is undefined }}|{{ none is none }}|{{ 'a' is string }}|"
          "{{ 1 is number }}|{{ 1.5 is float }}|{{ 1 is integer }}|{{ true is number }}|"
          "{{ {} is mapping }}|{{ [] is iterable }}|{{ 'a' is sequence }}|{{ true is true }}|"
          "{{ 0 is false }}|{{ false is boolean }}|{{ x is not defined }}|{{ 3 is odd }}|"
          "{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(2) }}|{{ 2 is in [1,2] }}|"
          "{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ 1 is eq 1 }}|{{ 2 is gt 1 }}|"
          "{{ range is callable }}|{{ none is sameas none }}",
          "false|true|true|true|true|true|true|false|true|true|true|true|false|true|true|true|true|"
          "true|false|true|true|true|true|true|true|true");
}

/* ------------------------------------------------------------------ statements */

static void test_loops(void **state)
{
    (void)state;
    check("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
          "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}",
          "10truefalse332,21falsefalse321,32falsetrue310,");
    check("{% for x in [1,2,3,4] if x is odd %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|"
          "{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in undefined_name %}a{% endfor %}|"
          "{% for c in 'h\xc3\xa9' %}[{{ c }}]{% endfor %}",
          "1232|empty||[h][\xc3\xa9]");
    check("{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}"
          "{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in [1] %}{% break %}{% else %}E"
          "{% endfor %}",
          "13|");
    check("{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}"
          "{{ loop.index }};{% endfor %}",
          "11221;13242;");
    check("{% for x in 'abc' %}{{ loop.previtem }}{{ x }}{{ loop.nextitem }}|{% endfor %}"
          "{% for i in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
          "ab|abc|bc|abab");
    check("{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}|"
          "{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|{{ range(0)|list }}",
          "012|135|531|[]");
}

static void test_scoping_and_namespace(void **state)
{
    (void)state;
    check("{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}|"
          "{% set ns2 = namespace(items=[]) %}{% for i in range(3) %}"
          "{% set ns2.items = ns2.items + [i] %}{% endfor %}{{ ns2.items }}",
          "2x|[0, 1, 2]");
    /* set inside a loop is local to the iteration (jinja2 scoping) */
    check("{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = 10 %}{{ x }}{% endfor %}{{ x }}",
          "5105105");
    check("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1,) %}{{ t|length }}|"
          "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]|{% set y | upper %}up{% endset %}{{ y }}|"
          "{% filter upper %}hello {{ 'w' }}{% endfilter %}",
          "12|1|[inner 2]|UP|HELLO W");
    const char *ctx = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"},"
                      " {\"role\": \"user\", \"content\": \"U\"}]}";
    check_ctx("{%- if messages[0]['role'] == 'system' %}{%- set sys = messages[0]['content'] %}"
              "{%- set rest = messages[1:] %}{%- else %}{%- set rest = messages %}{%- endif %}"
              "{{ sys }}{% for m in rest %}[{{ m.content }}]{% endfor %}",
              ctx, "S[U]");
}

static void test_macros(void **state)
{
    (void)state;
    check("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
          "{{ greet('Bob') }}|{{ greet('Al', greeting='Hi') }}|{{ greet('X', 'Yo') }}|[{{ greet() }}]",
          "Hello, Bob!|Hi, Al!|Yo, X!|[Hello, !]");
    check("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1)|int) }}{% endif %}"
          "{% endmacro %}{{ fact(5) }}",
          "120");
    /* a macro sees the scope it is called from (as @huggingface/jinja renders) */
    check("{% for m in [1, 2] %}{% macro show() %}[{{ m }}]{% endmacro %}{{ show() }}{% endfor %}|"
          "{% macro outer(x) %}{{ inner(x) }}{% endmacro %}{% macro inner(y) %}<{{ y }}>"
          "{% endmacro %}{{ outer(3) }}",
          "[1][2]|<3>");
    check_err("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", LL_ETEMPLATE, "at most 1 argument",
              NULL);
    check_err("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", LL_ETEMPLATE, "no parameter 'b'", NULL);
}

static void test_whitespace_control(void **state)
{
    (void)state;
    /* trim_blocks + lstrip_blocks: tag lines vanish, indentation before tags goes */
    check("a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc");
    check("  {%- if true %}\nx{% endif %}\n\t{% for i in [1,2] %}\n\t{{ i }}\n\t{% endfor %}\nend",
          "x\t1\n\t2\nend");
    /* lstrip only at the start of a line; never for {{ */
    check("{{ 'a' }}  {% if true %}  b  {% endif %}  c", "a    b    c");
    check("  {{ 'e' }}\n  {% set z = 1 %}x", "  e\nx");
    /* explicit - strips all whitespace on its side, including newlines */
    check("{%- if true -%}\n   a\n{%- endif -%}\n   b", "ab");
    check("text {{- ' a ' -}} text", "text a text");
    check("{%- for m in [1,2] -%}\n  [{{ m }}]\n{%- endfor %}\n\nafter", "[1][2]\nafter");
    /* comments follow the block rules */
    check("{# c #}\nx {#- c -#} y\n  {# indented #}\nz", "xy\nz");
    /* + turns lstrip/trim off for one tag */
    check("a\n  {%+ if true %}x{% endif %}", "a\n  x");
    check("{% if true +%}\nx{% endif %}", "\nx");
    /* a single trailing newline of the template is dropped */
    check("x\n", "x");
    check("x\n\n", "x\n");
    /* raw blocks */
    check("{% raw %}{{ not rendered }}{% endraw %}|{{ '{{' }}", "{{ not rendered }}|{{");
    check("{%- raw -%}\n  raw  {{ x }}\n{%- endraw -%}\n after", "raw  {{ x }}after");
    /* generation blocks render their content */
    check("a{% generation %}b{% endgeneration %}c", "abc");
}

static void test_context_and_tokens(void **state)
{
    (void)state;
    check_ctx("{{ bos_token }}{{ messages|length }}{{ add_generation_prompt }}{{ extra.k }}",
              "{\"messages\": [1, 2], \"add_generation_prompt\": true, \"extra\": {\"k\": 1.5}}",
              "<s>2true1.5");
    /* JSON numbers: integral values are integers, others floats */
    check_ctx("{{ a }}|{{ b }}|{{ c }}|{{ a is integer }}", "{\"a\": 3, \"b\": 3.0, \"c\": 0.25}",
              "3|3|0.25|true");
    /* bos/eos given to render win over context keys of the same name */
    check_ctx("{{ bos_token }}", "{\"bos_token\": \"ctx\"}", "<s>");
    /* the context must be an object */
    struct chat_template *t;
    struct ll_err err;
    char *out;
    assert_int_equal(chat_template_compile(&t, "x", &err), LL_OK);
    cJSON *arr = cJSON_Parse("[1]");
    assert_int_equal(chat_template_render(t, arr, NULL, NULL, &out, &err), LL_EINVAL);
    assert_null(out);
    assert_int_equal(chat_template_render(t, NULL, NULL, NULL, &out, &err), LL_OK);
    assert_string_equal(out, "x");
    free(out);
    cJSON_Delete(arr);
    chat_template_free(t);
    /* strftime_now exists and formats something */
    char *o2;
    assert_int_equal(render_lim("{{ strftime_now('%Y') | length }}", NULL, NULL, &o2, &err), LL_OK);
    assert_string_equal(o2, "4");
    free(o2);
}

/* The local time now as a template's strftime_now calls would give it (want_time's layout). */
static void want_time(char *out, size_t size)
{
    char a[64], b[64], c[64];
    date_now(a, sizeof a, "%Y-%m-%d %H:%M");
    date_now(b, sizeof b, "%d %b %Y");
    date_now(c, sizeof c, "%A %j %-d%%");
    snprintf(out, size, "%s|%s|%s|true|no conversions|50%%|1200|[%%Q]", a, b, c);
}

/* strftime_now(format) is C strftime of the local time at the render, as transformers and
 * llama.cpp define it: its output is compared with strftime read just before and just after
 * the render (one of the two matches even across a minute boundary). */
static void test_strftime_now(void **state)
{
    (void)state;
    const char *tpl = "{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}|"
                      "{{ strftime_now('%A %j %-d%%') }}|{{ strftime_now is defined }}|"
                      "{{ strftime_now('no conversions') }}|{{ strftime_now('50%') }}|"
                      "{{ strftime_now('%Y' * 300)|length }}|[{{ strftime_now('%Q') }}]";
    char before[256], after[256], *out;
    struct ll_err err = {0};
    want_time(before, sizeof before);
    assert_int_equal(render_lim(tpl, NULL, NULL, &out, &err), LL_OK);
    want_time(after, sizeof after);
    if (strcmp(out, before) != 0 && strcmp(out, after) != 0)
        fail_msg("strftime_now gave [%s]\n want [%s]\n   or [%s]", out, before, after);
    free(out);

    /* Llama 3.x's way of dating its system header: date_string wins, else strftime_now */
    const char *dated = "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
                        "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}"
                        "{%- set date_string = '26 Jul 2024' %}{%- endif %}{%- endif %}"
                        "Today Date: {{ date_string }}";
    check_ctx(dated, "{\"date_string\": \"1 Jan 2000\"}", "Today Date: 1 Jan 2000");
    char today1[64], today2[64], want1[96], want2[96];
    date_now(today1, sizeof today1, "%d %b %Y");
    assert_int_equal(render_lim(dated, NULL, NULL, &out, &err), LL_OK);
    date_now(today2, sizeof today2, "%d %b %Y");
    snprintf(want1, sizeof want1, "Today Date: %s", today1);
    snprintf(want2, sizeof want2, "Today Date: %s", today2);
    if (strcmp(out, want1) != 0 && strcmp(out, want2) != 0)
        fail_msg("dated header [%s], want [%s]", out, want1);
    free(out);

    check_err("{{ strftime_now(3) }}", LL_ETEMPLATE, "takes a format string", NULL);
    check_err("{{ strftime_now('%300Y') }}", LL_ETEMPLATE, "field width over 255", NULL);
    check_err("{{ strftime_now('%____________________Y') }}", LL_ETEMPLATE, "too long", "%____");
    check_err("{{ strftime_now() }}", LL_ETEMPLATE, "format", NULL);
}

/* ------------------------------------------------------------------ errors */

static void test_syntax_errors(void **state)
{
    (void)state;
    check_err("{% foo %}", LL_ETEMPLATE, "line 1, column 4", "unknown tag 'foo'");
    check_err("a\n{{ x|nofilter }}", LL_ETEMPLATE, "line 2, column 6", "unknown filter 'nofilter'");
    check_err("{{ x is nosuchtest }}", LL_ETEMPLATE, "line 1, column 9", "unknown test 'nosuchtest'");
    check_err("{% if true %}abc", LL_ETEMPLATE, "line 1, column 4", "'{% if %}' is never closed");
    check_err("{% for x in y %}\nabc{% endif %}", LL_ETEMPLATE, "line 2, column 7",
              "expected '{% endfor %}' to close the '{% for %}' at line 1, column 4");
    check_err("{% endfor %}", LL_ETEMPLATE, "line 1, column 4", "with no open block");
    check_err("{% if 1 %}{% else %}{% else %}{% endif %}", LL_ETEMPLATE, "column 24", "'{% else %}'");
    check_err("{{ 'abc }}", LL_ETEMPLATE, "line 1, column 4", "unterminated string literal");
    /* eight hex digits past any code point (once an int overflow, found by fuzz_template) */
    check_err("{{ '\\UFFFFFFFF' }}", LL_ETEMPLATE, "column 5", "invalid code point in \\U escape");
    check_err("{{ '\\U00110000' }}", LL_ETEMPLATE, "column 5", "invalid code point in \\U escape");
    check_err("{{ x + }}", LL_ETEMPLATE, "line 1, column 8", "expected an expression, found '}}'");
    check_err("x\n  {{ x", LL_ETEMPLATE, "line 2, column 3", "unterminated '{{' expression");
    check_err("{% if x", LL_ETEMPLATE, "line 1, column 1", "unterminated '{%' tag");
    check_err("{# note", LL_ETEMPLATE, "line 1, column 1", "unterminated comment");
    check_err("{{ }}", LL_ETEMPLATE, "empty expression", NULL);
    check_err("{{ 'x' @ 1 }}", LL_ETEMPLATE, "column 8", "unexpected character '@'");
    check_err("{{ (1 }}", LL_ETEMPLATE, "column 7", "unexpected '}', expected ')' to close the '(' at column 4");
    check_err("{{ [1 ", LL_ETEMPLATE, "column 4", "unclosed '['");
    check_err("{{ 1) }}", LL_ETEMPLATE, "column 5", "unexpected ')'");
    check_err("ok {{ 1 %}", LL_ETEMPLATE, "column 9", "unexpected '%}'");
    check_err("{% break %}", LL_ETEMPLATE, "'break' outside of a for loop", NULL);
    check_err("{% call f() %}{% endcall %}", LL_ETEMPLATE, "unsupported tag 'call'", NULL);
    check_err("{% for x in y recursive %}{% endfor %}", LL_ETEMPLATE, "recursive loops", NULL);
    check_err("{{ 99999999999999999999 }}", LL_ETEMPLATE, "too large", NULL);
    check_err("{{ '\\x4' }}", LL_ETEMPLATE, "column 5", "hex digits");
    check_err("{{ f(a=1, 2) }}", LL_ETEMPLATE, "positional argument follows keyword", NULL);
    check_err("{% set true = 1 %}", LL_ETEMPLATE, "cannot assign to 'true'", NULL);
}

static void test_runtime_errors(void **state)
{
    (void)state;
    check_err("x{{ raise_exception('Conversation roles must alternate!') }}", LL_ETEMPLATE,
              "line 1, column 20", "Conversation roles must alternate!");
    check_err("{{ 1 / 0 }}", LL_ETEMPLATE, "division by zero", NULL);
    check_err("{{ 1 % 0 }}", LL_ETEMPLATE, "modulo by zero", NULL);
    check_err("{{ x.y() }}", LL_ETEMPLATE, "'x', which is undefined", NULL);
    check_err("{{ f() }}", LL_ETEMPLATE, "'f' is undefined", NULL);
    check_err("{{ undefined_var + 1 }}", LL_ETEMPLATE, "'undefined_var' is undefined", NULL);
    check_err("{{ [1] < 'a' }}", LL_ETEMPLATE, "cannot compare list with string", NULL);
    check_err("{{ [3, 'a']|sort }}", LL_ETEMPLATE, "cannot compare", NULL);
    check_err("{% set n = 1 %}{% set n.a = 2 %}", LL_ETEMPLATE, "only namespace() objects", NULL);
    check_err("{{ 'abc'.nomethod() }}", LL_ETEMPLATE, "no method 'nomethod'", NULL);
    check_err("{% set a, b = [1] %}", LL_ETEMPLATE, "cannot unpack 1 values into 2 names", NULL);
    check_err("{% for x in 5 %}{% endfor %}", LL_ETEMPLATE, "cannot iterate over a integer", NULL);
    check_err("{{ range }}", LL_ETEMPLATE, "cannot print a function", NULL);
    check_err("{{ 'a'|indent(none) }}", LL_ETEMPLATE, "indent width", NULL);
    check_err("{{ 'a'|tojson(indent='x') }}", LL_ETEMPLATE, "indent must be an integer", NULL);
    check_err("{{ 'a'|replace('a') }}", LL_ETEMPLATE, "replace() arguments must be strings", NULL);
    check_err("{{ 'a'.split('') }}", LL_ETEMPLATE, "empty separator", NULL);
    check_err("{{ [1]|join(d=1, x=2) }}", LL_ETEMPLATE, "unexpected keyword argument 'x'", NULL);
    check_err("{{ '%d' % 'x' }}", LL_ETEMPLATE, "needs a number", NULL);
    check_err("{{ '%s %s' % 'x' }}", LL_ETEMPLATE, "not enough arguments", NULL);
    check_err("{{ 1 is odd(1, 2) }}", LL_ETEMPLATE, "takes at most 0 arguments", NULL);
}

static void test_limits(void **state)
{
    (void)state;
    /* nesting is bounded at compile time */
    char deep[2000];
    strcpy(deep, "{{ ");
    for (int i = 0; i < 300; i++)
        strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 300; i++)
        strcat(deep, ")");
    strcat(deep, " }}");
    check_err(deep, LL_ETEMPLATE, "nested too deeply", "line 1");
    char ifs[300 * 24 + 1] = "";
    for (int i = 0; i < 300; i++)
        strcat(ifs, "{% if true %}");
    for (int i = 0; i < 300; i++)
        strcat(ifs, "{% endif %}");
    check_err(ifs, LL_ETEMPLATE, "nested too deeply", NULL);
    /* long operator, attribute and filter chains count too: the evaluator recurses on them */
    char chain[3000] = "{{ 1";
    for (int i = 0; i < 300; i++)
        strcat(chain, " + 1");
    strcat(chain, " }}");
    check_err(chain, LL_ETEMPLATE, "nested too deeply", NULL);
    strcpy(chain, "{{ x");
    for (int i = 0; i < 300; i++)
        strcat(chain, "|trim");
    strcat(chain, " }}");
    check_err(chain, LL_ETEMPLATE, "nested too deeply", NULL);
    check("{{ 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 }}", "20");

    struct chat_template_limits lim;
    chat_template_default_limits(&lim);
    lim.max_steps = 10000;
    lim.max_output = 1 << 16;
    lim.max_memory = 1 << 20;
    lim.max_call_depth = 20;
    /* huge loops: range() counts its items, nested loops count iterations */
    check_err_lim("{% for i in range(100000000) %}{% endfor %}", NULL, &lim, LL_ETOOLONG,
                  "column 18", "loop iterations");
    check_err_lim("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                  NULL, &lim, LL_ETOOLONG, "loop iterations", NULL);
    /* output and string growth */
    check_err_lim("{% for i in range(5000) %}xxxxxxxxxxxxxxxxxxxx{% endfor %}", NULL, &lim,
                  LL_ETOOLONG, "exceeds 65536 bytes", NULL);
    check_err_lim("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                  NULL, &lim, LL_ETOOLONG, "exceeds", NULL);
    check_err_lim("{{ 'ab' * 100000000 }}", NULL, &lim, LL_ETOOLONG, "exceeds", NULL);
    /* memory: a list doubling in a namespace */
    check_err_lim("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                  "{% set ns.l = ns.l + ns.l %}{% endfor %}",
                  NULL, &lim, LL_ETOOLONG, "bytes of memory", NULL);
    /* recursion */
    check_err_lim("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, &lim, LL_ETOOLONG,
                  "nested more than 20 deep", NULL);
    /* values nested deeper than the evaluator walks */
    check_err("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
              "{% endfor %}",
              LL_ETEMPLATE, "nested more than", NULL);
    /* a namespace that contains itself: printing fails, the render frees it */
    check_err("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", LL_ETEMPLATE,
              "nested too deeply", NULL);
    check("{% set ns = namespace() %}{% set ns.me = ns %}ok", "ok");
}

/* ------------------------------------------------------------------ threads */

struct thread_arg {
    const struct chat_template *t;
    const cJSON *ctx;
    const char *want;
    int ok;
};

static void *render_many(void *p)
{
    struct thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 200; i++) {
        char *out;
        struct ll_err err;
        if (chat_template_render(a->t, a->ctx, "<s>", "</s>", &out, &err) != LL_OK) {
            a->ok = 0;
            break;
        }
        if (strcmp(out, a->want) != 0)
            a->ok = 0;
        free(out);
    }
    return NULL;
}

/* One compiled template rendered from several threads at once gives the same text. */
static void test_shared_across_threads(void **state)
{
    (void)state;
    char *src = read_text(FIXTURES "qwen25.jinja");
    char *text = read_text(FIXTURES "qwen25.cases.json");
    cJSON *doc = cJSON_Parse(text);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "cases"), 5); /* tools_call */
    struct chat_template *t;
    struct ll_err err;
    assert_int_equal(chat_template_compile(&t, src, &err), LL_OK);
    struct thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){t, cJSON_GetObjectItem(c, "context"),
                                      cJSON_GetObjectItem(c, "rendered")->valuestring, 0};
        assert_int_equal(pthread_create(&th[i], NULL, render_many, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(args[i].ok);
    }
    chat_template_free(t);
    cJSON_Delete(doc);
    free(text);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_r1),
        cmocka_unit_test(test_fixture_qwen25),
        cmocka_unit_test(test_fixture_qwen3),
        cmocka_unit_test(test_fixture_llama32),
        cmocka_unit_test(test_load_model_fixture),
        cmocka_unit_test(test_load_model_variants),
        cmocka_unit_test(test_literals),
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_comparisons_logic),
        cmocka_unit_test(test_access_and_slicing),
        cmocka_unit_test(test_string_methods),
        cmocka_unit_test(test_dict_methods_and_loops_over_dicts),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_tests),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_scoping_and_namespace),
        cmocka_unit_test(test_macros),
        cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_context_and_tokens),
        cmocka_unit_test(test_strftime_now),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_shared_across_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
