/*
 * test_tool_calls.c: tool calling (tool_calls.h): the five parsers on tricky outputs (markers and
 * JSON split across tokens, fed whole and byte by byte with equal results; JSON whose strings
 * hold the end marker and braces; several calls; text around calls; unclosed and malformed
 * blocks coming out as text), the call grammars (auto, required, named, one call only), the
 * tools in the template variables (template or fallback prompt, history arguments, Mistral's
 * 9-character call ids), call ids per format, and the format detected from real templates (and
 * from a synthetic one in Mistral's newer [TOOL_CALLS]NAME[ARGS] spelling, with its history).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "grammar.h"
#include "openai_request.h"
#include "../src/server/tool_calls.h"

struct parsed {
    char content[4096];
    int n;
    char names[8][160];
    char args[8][512];
    char ids[8][40];
    bool done[8];
    int pieces; /* argument pieces handed out */
};

/* Feed text in pieces of `step` bytes (0: whole), collecting content and calls: their start,
 * then the pieces of their arguments, which must add up to the arguments parsed. stream: take
 * pieces after each feed (a stream), else only after the last (a whole answer). */
static void run_parser_as(enum tool_format f, const char *text, size_t step, bool stream,
                          struct parsed *out)
{
    struct tool_parser p;
    tool_parser_init(&p, f);
    memset(out, 0, sizeof *out);
    size_t len = strlen(text), at = 0, clen = 0;
    do {
        size_t k = step && len - at > step ? step : len - at;
        struct ll_buf c = {0};
        tool_parser_feed(&p, text + at, k, at + k == len, &c);
        at += k;
        assert_true(clen + c.len < sizeof out->content);
        if (c.len)
            memcpy(out->content + clen, c.data, c.len);
        clen += c.len;
        ll_buf_free(&c);
        struct tool_piece pc;
        while ((stream || at == len) && tool_parser_next(&p, &pc)) {
            const struct tool_call *tc = &p.calls[pc.index];
            if (pc.start) {
                assert_int_equal(pc.index, out->n);
                snprintf(out->names[out->n], sizeof out->names[0], "%s", tc->name);
                snprintf(out->ids[out->n], 40, "%s", tc->id);
                out->n++;
            }
            assert_true(pc.index == out->n - 1 && !out->done[pc.index]);
            assert_int_equal(strlen(pc.args), pc.len);
            size_t have = strlen(out->args[pc.index]);
            assert_true(have + pc.len < 512);
            memcpy(out->args[pc.index] + have, pc.args, pc.len + 1);
            out->pieces += pc.len > 0;
            out->done[pc.index] = pc.done;
        }
    } while (at < len);
    for (int i = 0; i < out->n; i++) { /* the pieces are the arguments */
        assert_true(out->done[i]);
        assert_string_equal(out->args[i], tool_call_args(&p.calls[i]));
    }
    assert_int_equal(out->n, p.n_calls);
    assert_false(p.failed);
    tool_parser_free(&p);
}

static void run_parser(enum tool_format f, const char *text, size_t step, struct parsed *out)
{
    run_parser_as(f, text, step, true, out);
}

/* Whether id is a call id of format f: mistral, mistral_args: 9 letters and digits; others:
 * "call_" + 24 hex digits. */
static bool id_ok(enum tool_format f, const char *id)
{
    size_t n = strlen(id);
    if (f == TOOL_FORMAT_MISTRAL || f == TOOL_FORMAT_MISTRAL_ARGS) {
        for (size_t i = 0; i < n; i++)
            if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
                  (id[i] >= '0' && id[i] <= '9')))
                return false;
        return n == 9;
    }
    if (n != 29 || memcmp(id, "call_", 5))
        return false;
    for (size_t i = 5; i < n; i++)
        if (!strchr("0123456789abcdef", id[i]))
            return false;
    return true;
}

/* Whole, byte by byte and in pieces of 4 and 16 bytes give the same. */
static void check(enum tool_format f, const char *text, const char *content, int n,
                  const char *const *names, const char *const *args)
{
    static const size_t steps[] = {0, 1, 4, 16};
    for (size_t si = 0; si < sizeof steps / sizeof *steps; si++) {
        size_t step = steps[si];
        struct parsed r;
        run_parser(f, text, step, &r);
        if (strcmp(r.content, content))
            fail_msg("step %zu: content '%s', want '%s'", step, r.content, content);
        assert_int_equal(r.n, n);
        for (int i = 0; i < n; i++) {
            assert_string_equal(r.names[i], names[i]);
            assert_string_equal(r.args[i], args[i]);
            if (!id_ok(f, r.ids[i]))
                fail_msg("call id '%s'", r.ids[i]);
        }
    }
}

static void test_hermes(void **state)
{
    (void)state;
    /* text, then two calls */
    check(TOOL_FORMAT_HERMES,
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
          "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
          "{}}\n</tool_call>",
          "Let me check.", 2, (const char *const[]){"get_weather", "get_time"},
          (const char *const[]){"{\"city\": \"Paris\"}", "{}"});
    /* the end marker and braces inside a JSON string */
    check(TOOL_FORMAT_HERMES,
          "<tool_call>{\"name\":\"run\",\"arguments\":{\"code\":\"s = '</tool_call>' + "
          "'{\\\"a\\\": [1}'\"}}</tool_call>",
          "", 1, (const char *const[]){"run"},
          (const char *const[]){"{\"code\":\"s = '</tool_call>' + '{\\\"a\\\": [1}'\"}"});
    /* arguments given as a JSON string; text after the calls */
    check(TOOL_FORMAT_HERMES,
          "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call> done",
          "done", 1, (const char *const[]){"f"}, (const char *const[]){"{\"x\":1}"});
    /* no call: text, including a lone '<' and a partial marker at the end */
    check(TOOL_FORMAT_HERMES, "a < b and <tool", "a < b and <tool", 0, NULL, NULL);
    /* an unclosed block and a malformed one come out as text */
    check(TOOL_FORMAT_HERMES, "x <tool_call>{\"name\":\"f\",\"argu",
          "x <tool_call>{\"name\":\"f\",\"argu", 0, NULL, NULL);
    check(TOOL_FORMAT_HERMES, "<tool_call>not json</tool_call> then",
          "<tool_call>not json</tool_call> then", 0, NULL, NULL);
    check(TOOL_FORMAT_HERMES, "<tool_call>{\"arguments\":{}}</tool_call>",
          "<tool_call>{\"arguments\":{}}</tool_call>", 0, NULL, NULL);
}

#define DSB "<｜tool▁calls▁begin｜>"
#define DSE "<｜tool▁calls▁end｜>"
#define DCB "<｜tool▁call▁begin｜>"
#define DCE "<｜tool▁call▁end｜>"
#define DSEP "<｜tool▁sep｜>"

static void test_deepseek(void **state)
{
    (void)state;
    check(TOOL_FORMAT_DEEPSEEK,
          "Calling.\n" DSB DCB "function" DSEP "get_weather\n```json\n{\"city\": \"Paris\", "
          "\"note\": \"```" DCE "\"}\n```" DCE "\n" DCB "function" DSEP "get_time\n```json\n{}\n```"
          DCE DSE,
          "Calling.", 2, (const char *const[]){"get_weather", "get_time"},
          (const char *const[]){"{\"city\": \"Paris\", \"note\": \"```" DCE "\"}", "{}"});
    /* a call without the block's marker, no fence, text after */
    check(TOOL_FORMAT_DEEPSEEK, DCB "function" DSEP "f\n{\"a\":[1,{\"b\":null}]}" DCE " ok",
          "ok", 1, (const char *const[]){"f"}, (const char *const[]){"{\"a\":[1,{\"b\":null}]}"});
    /* malformed: text */
    check(TOOL_FORMAT_DEEPSEEK, DSB DCB "function" DSEP "f\n```json\nnope\n```" DCE DSE,
          DSB DCB "function" DSEP "f\n```json\nnope\n```" DCE DSE, 0, NULL, NULL);
    check(TOOL_FORMAT_DEEPSEEK, "plain <｜tool", "plain <｜tool", 0, NULL, NULL);
    /* Found by fuzz_tool_calls: a call without its separator. The whole text found the next
     * call's separator and swallowed both calls into one; fed in pieces the same text came out
     * as text. Now the malformed call is text either way and the next call is parsed. */
    check(TOOL_FORMAT_DEEPSEEK,
          DSB DCB "funcParis\"}\n```" DCE "\n" DCB "function" DSEP "f\n```json\n{}\n```" DCE DSE,
          DSB DCB "funcParis\"}\n```" DCE, 1, (const char *const[]){"f"},
          (const char *const[]){"{}"});
    /* a type longer than 64 bytes: text, whatever the pieces */
    check(TOOL_FORMAT_DEEPSEEK,
          DCB "function_function_function_function_function_function_function_xy" DSEP
              "f\n{}" DCE,
          DCB "function_function_function_function_function_function_function_xy" DSEP "f\n{}" DCE,
          0, NULL, NULL);
}

#define MTC "[TOOL_CALLS]"

/* The text in two pieces split at every byte (a stream), and whole, give the same. */
static void check_splits(enum tool_format f, const char *text, const char *content, int n,
                         const char *const *names, const char *const *args)
{
    check(f, text, content, n, names, args);
    size_t len = strlen(text);
    for (size_t k = 1; k < len; k++) {
        struct tool_parser p;
        tool_parser_init(&p, f);
        struct ll_buf c = {0};
        tool_parser_feed(&p, text, k, false, &c);
        tool_parser_feed(&p, text + k, len - k, true, &c);
        if (strcmp(c.data ? c.data : "", content))
            fail_msg("split at %zu: content '%s', want '%s'", k, c.data ? c.data : "", content);
        assert_int_equal(p.n_calls, n);
        for (int i = 0; i < n; i++) {
            assert_string_equal(p.calls[i].name, names[i]);
            assert_string_equal(tool_call_args(&p.calls[i]), args[i]);
            assert_true(p.calls[i].done && !p.calls[i].cut);
        }
        assert_false(p.failed);
        ll_buf_free(&c);
        tool_parser_free(&p);
    }
}

static void test_mistral(void **state)
{
    (void)state;
    const enum tool_format M = TOOL_FORMAT_MISTRAL;
    /* text, then two calls as Mistral-Nemo writes them */
    check_splits(M,
                 "Let me check." MTC "[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
                 "Let me check.", 2, (const char *const[]){"get_weather", "get_time"},
                 (const char *const[]){"{\"city\": \"Paris\"}", "{}"});
    /* brackets, braces and the marker inside JSON strings; white space around the array;
     * text after it */
    check_splits(M,
                 MTC " [ {\"name\":\"run\",\"arguments\":{\"code\":\"a[1]}] " MTC
                 "{\\\"x\\\"\"}} ]\n done",
                 "done", 1, (const char *const[]){"run"},
                 (const char *const[]){"{\"code\":\"a[1]}] " MTC "{\\\"x\\\"\"}"});
    /* arguments given as a JSON string holding an object (accepted, written compactly);
     * none at all; "parameters" as the key */
    check_splits(M,
                 MTC "[{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}, {\"name\": \"g\"}, "
                 "{\"name\": \"h\", \"parameters\": {\"y\": [2]}}]",
                 "", 3, (const char *const[]){"f", "g", "h"},
                 (const char *const[]){"{\"x\":1}", "{}", "{\"y\":[2]}"});
    /* no call: text, brackets and a partial marker included */
    check_splits(M, "a [b] and [TOOL_CALL", "a [b] and [TOOL_CALL", 0, NULL, NULL);
    /* malformed, never the marker in the content: not an array, an unclosed call, an element
     * that is not a call, arguments that are not an object, an empty array */
    check_splits(M, "Hi " MTC "not an array", "Hi not an array", 0, NULL, NULL);
    check_splits(M, MTC "[{\"name\":\"f\",\"argu", "[{\"name\":\"f\",\"argu", 0, NULL, NULL);
    check_splits(M, MTC "[{\"arguments\":{}}]", "[{\"arguments\":{}}]", 0, NULL, NULL);
    check_splits(M, MTC "[{\"name\":\"f\",\"arguments\":[1]}]",
                 "[{\"name\":\"f\",\"arguments\":[1]}]", 0, NULL, NULL);
    check_splits(M, MTC "[\"f\"]", "[\"f\"]", 0, NULL, NULL);
    check_splits(M, MTC "[]", "", 0, NULL, NULL);
    check_splits(M, MTC, "", 0, NULL, NULL);
    /* a call, then an element that is not one: the call, and the rest as text */
    check_splits(M, MTC "[{\"name\":\"f\",\"arguments\":{}}, 42]", ", 42]", 1,
                 (const char *const[]){"f"}, (const char *const[]){"{}"});
    /* the array ending without its ']': the calls that came */
    check_splits(M, MTC "[{\"name\":\"f\",\"arguments\":{}} then", "then", 1,
                 (const char *const[]){"f"}, (const char *const[]){"{}"});
    /* a second marker after text that was not a call */
    check_splits(M, MTC "oops " MTC "[{\"name\":\"f\",\"arguments\":{\"a\":1}}]", "oops", 1,
                 (const char *const[]){"f"}, (const char *const[]){"{\"a\":1}"});
}

#define MARGS "[ARGS]"

static void test_mistral_args(void **state)
{
    (void)state;
    const enum tool_format A = TOOL_FORMAT_MISTRAL_ARGS;
    /* text, then two calls back to back, as Mistral-Small 3.2 writes them */
    check_splits(A,
                 "Let me check. " MTC "get_weather" MARGS "{\"city\": \"Paris\"}" MTC "get_time"
                 MARGS "{}",
                 "Let me check.", 2, (const char *const[]){"get_weather", "get_time"},
                 (const char *const[]){"{\"city\": \"Paris\"}", "{}"});
    /* brackets, braces and both markers inside JSON strings; white space before the arguments
     * and between calls; '.', '-' and digits in names; text after the calls */
    check_splits(A,
                 MTC "run" MARGS " {\"code\":\"a[1]}] " MTC "x" MARGS "{\\\"\"}\n " MTC
                 "ns.f-2" MARGS "{\"a\":[{}]} done",
                 "done", 2, (const char *const[]){"run", "ns.f-2"},
                 (const char *const[]){"{\"code\":\"a[1]}] " MTC "x" MARGS "{\\\"\"}",
                                       "{\"a\":[{}]}"});
    /* no call: text, brackets and partial markers included */
    check_splits(A, "a [b] and [ARG", "a [b] and [ARG", 0, NULL, NULL);
    check_splits(A, "a [b] and [TOOL_CALL", "a [b] and [TOOL_CALL", 0, NULL, NULL);
    /* malformed, never a marker in the content: text from the name on. A name that is not an
     * identifier, no [ARGS], no name, arguments that are not an object, a call that ends
     * before its arguments start (arguments that start but do not parse: test_streamed_pieces) */
    check_splits(A, MTC "get weather" MARGS "{}", "get weather{}", 0, NULL, NULL);
    check_splits(A, "Hi " MTC "f{\"a\": 1}", "Hi f{\"a\": 1}", 0, NULL, NULL);
    check_splits(A, MTC MARGS "{}", "{}", 0, NULL, NULL);
    check_splits(A, MTC "f" MARGS "[1]", "f[1]", 0, NULL, NULL);
    check_splits(A, MTC "f" MARGS "\"{}\"", "f\"{}\"", 0, NULL, NULL);
    check_splits(A, MTC "get_we", "get_we", 0, NULL, NULL);
    check_splits(A, MTC "f" MARGS, "f", 0, NULL, NULL);
    check_splits(A, MTC, "", 0, NULL, NULL);
    check_splits(A, "x" MARGS "y", "xy", 0, NULL, NULL); /* a stray [ARGS] */
    /* a call, then one that goes wrong: the call, and the rest as text */
    check_splits(A, MTC "f" MARGS "{}" MTC "g h", "g h", 1, (const char *const[]){"f"},
                 (const char *const[]){"{}"});
    /* a marker again where the name should be; a second marker after text that was not a
     * call */
    check_splits(A, MTC MTC "f" MARGS "{}", "", 1, (const char *const[]){"f"},
                 (const char *const[]){"{}"});
    check_splits(A, MTC "oops " MTC "f" MARGS "{\"a\":1}", "oops", 1,
                 (const char *const[]){"f"}, (const char *const[]){"{\"a\":1}"});
    /* names: 128 bytes are one, 129 are text, however the text comes */
    char name[130], text[256], content[256];
    memset(name, 'n', 129);
    name[128] = 0;
    snprintf(text, sizeof text, MTC "%s" MARGS "{}", name);
    check_splits(A, text, "", 1, (const char *const[]){name}, (const char *const[]){"{}"});
    name[128] = 'n';
    name[129] = 0;
    snprintf(text, sizeof text, MTC "%s" MARGS "{}", name);
    snprintf(content, sizeof content, "%s{}", name);
    check_splits(A, text, content, 0, NULL, NULL);
}

/* Call ids: mistral's are 9 letters and digits (its template takes no other length), fresh
 * for each call; the others "call_" + 24 hex digits. */
static void test_call_ids(void **state)
{
    (void)state;
    char seen[64][40];
    for (int i = 0; i < 64; i++) {
        struct parsed r;
        run_parser(TOOL_FORMAT_MISTRAL, MTC "[{\"name\":\"f\",\"arguments\":{}}]", 0, &r);
        assert_int_equal(r.n, 1);
        if (!id_ok(TOOL_FORMAT_MISTRAL, r.ids[0]))
            fail_msg("mistral id '%s'", r.ids[0]);
        for (int k = 0; k < i; k++)
            assert_string_not_equal(seen[k], r.ids[0]);
        snprintf(seen[i], sizeof seen[i], "%s", r.ids[0]);
    }
    struct parsed r;
    run_parser(TOOL_FORMAT_MISTRAL_ARGS, MTC "f" MARGS "{}" MTC "f" MARGS "{}", 0, &r);
    assert_int_equal(r.n, 2);
    assert_true(id_ok(TOOL_FORMAT_MISTRAL_ARGS, r.ids[0]) &&
                id_ok(TOOL_FORMAT_MISTRAL_ARGS, r.ids[1]));
    assert_string_not_equal(r.ids[0], r.ids[1]);
    run_parser(TOOL_FORMAT_HERMES, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
               0, &r);
    assert_true(id_ok(TOOL_FORMAT_HERMES, r.ids[0]));
    assert_false(id_ok(TOOL_FORMAT_MISTRAL, r.ids[0]));
}

static void test_llama3(void **state)
{
    (void)state;
    const enum tool_format L = TOOL_FORMAT_LLAMA3;
    /* one call, as Llama 3.x writes it; braces and ';' inside its strings */
    check(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par}is; {x\"}}", "", 1,
          (const char *const[]){"get_weather"},
          (const char *const[]){"{\"city\": \"Par}is; {x\"}"});
    /* white space first, two calls separated by ';', "arguments" as the key, text after */
    check(L,
          "\n {\"name\": \"a\", \"parameters\": {\"n\": [1, {\"m\": 2}]}} ; "
          "{\"name\":\"b\",\"arguments\":{}}\nDone.",
          "Done.", 2, (const char *const[]){"a", "b"},
          (const char *const[]){"{\"n\": [1, {\"m\": 2}]}", "{}"});
    /* arguments given as a JSON string; no arguments at all */
    check(L, "{\"name\": \"f\", \"parameters\": \"{\\\"x\\\": 1}\"}", "", 1,
          (const char *const[]){"f"}, (const char *const[]){"{\"x\":1}"});
    check(L, "{\"name\": \"f\"}", "", 1, (const char *const[]){"f"},
          (const char *const[]){"{}"});
    /* text: an answer that does not start with '{', whatever follows */
    check(L, "Sure: {\"name\": \"f\", \"parameters\": {}}",
          "Sure: {\"name\": \"f\", \"parameters\": {}}", 0, NULL, NULL);
    /* an object that is not a call, an unclosed one: text */
    check(L, "{\"answer\": 42}", "{\"answer\": 42}", 0, NULL, NULL);
    check(L, " {\"name\": \"f\", \"param", " {\"name\": \"f\", \"param", 0, NULL, NULL);
    /* a call, then an object that is not one: the call, and the rest as text */
    check(L, "{\"name\": \"f\", \"parameters\": {}}; {\"x\": 1}", "{\"x\": 1}", 1,
          (const char *const[]){"f"}, (const char *const[]){"{}"});
    check(L, "   ", "   ", 0, NULL, NULL);
}

/* A call's arguments stream as they come: its start (id, name) once the name and the arguments'
 * '{' are in, then pieces; cut before its end, a streamed call stays a call with what came,
 * while a whole answer cut the same way is text. */
static void test_streamed_pieces(void **state)
{
    (void)state;
    struct tool_parser p;
    struct tool_piece pc;
    struct ll_buf c = {0};
    static const struct {
        enum tool_format f;
        const char *head, *args;
    } forms[] = {
        {TOOL_FORMAT_HERMES, "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
         "{\"city\": \"Par}is\", \"days\": [1, {\"x\": 2}]}"},
        {TOOL_FORMAT_DEEPSEEK, "ok " DSB DCB "function" DSEP "get_weather\n```json\n",
         "{\"city\": \"Par}is\", \"days\": [1, {\"x\": 2}]}"},
        {TOOL_FORMAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": ",
         "{\"city\": \"Par}is\", \"days\": [1, {\"x\": 2}]}"},
        {TOOL_FORMAT_MISTRAL, "ok" MTC "[{\"name\": \"get_weather\", \"arguments\": ",
         "{\"city\": \"Par}is\", \"days\": [1, {\"x\": 2}]}"},
        {TOOL_FORMAT_MISTRAL_ARGS, "ok" MTC "get_weather" MARGS,
         "{\"city\": \"Par}is\", \"days\": [1, {\"x\": 2}]}"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        tool_parser_init(&p, forms[i].f);
        /* the head alone: the name is known, the arguments not started: nothing yet */
        const char *h = forms[i].head;
        tool_parser_feed(&p, h, strlen(h) - 1, false, &c);
        assert_false(tool_parser_next(&p, &pc));
        tool_parser_feed(&p, h + strlen(h) - 1, 1, false, &c);
        assert_false(tool_parser_next(&p, &pc));
        bool l3 = forms[i].f == TOOL_FORMAT_LLAMA3; /* its answer is the calls alone */
        assert_string_equal(c.data ? c.data : "", l3 ? "" : "ok");
        /* the arguments, 5 bytes at a time: the start, then a piece each time */
        const char *a = forms[i].args;
        size_t n = strlen(a), got = 0;
        char args[256] = "";
        for (size_t at = 0; at < n - 5; at += 5) {
            tool_parser_feed(&p, a + at, 5, false, &c);
            assert_true(tool_parser_next(&p, &pc));
            assert_int_equal(pc.index, 0);
            assert_true(pc.start == (at == 0) && !pc.done);
            if (pc.start)
                assert_string_equal(p.calls[0].name, "get_weather");
            memcpy(args + got, pc.args, pc.len);
            got += pc.len;
            assert_int_equal(got, at + 5);
            assert_false(tool_parser_next(&p, &pc));
        }
        /* cut here, at the end of the answer: the call ends with the arguments that came */
        tool_parser_feed(&p, "", 0, true, &c);
        assert_true(tool_parser_next(&p, &pc));
        assert_true(pc.done && !pc.start && pc.len == 0);
        assert_false(tool_parser_next(&p, &pc));
        assert_int_equal(p.n_calls, 1);
        assert_memory_equal(tool_call_args(&p.calls[0]), a, got);
        assert_string_equal(c.data ? c.data : "", l3 ? "" : "ok");
        tool_parser_free(&p);
        ll_buf_clear(&c);
        /* the same answer not streamed (pieces taken only at its end): text */
        char whole[512];
        snprintf(whole, sizeof whole, "%s%.*s", h, (int)got, a);
        struct parsed r;
        run_parser_as(forms[i].f, whole, 0, false, &r);
        assert_int_equal(r.n, 0);
        for (int k = 0; k < 2; k++) { /* mistral's markers are never content */
            const char *mk = k ? MARGS : MTC;
            char *mark = strstr(whole, mk);
            if (mark)
                memmove(mark, mark + strlen(mk), strlen(mark + strlen(mk)) + 1);
        }
        assert_string_equal(r.content, whole);
        /* streamed byte by byte to its end: many pieces, the arguments whole */
        const char *tail = forms[i].f == TOOL_FORMAT_HERMES         ? "}\n</tool_call> done"
                           : forms[i].f == TOOL_FORMAT_LLAMA3       ? "}\n done"
                           : forms[i].f == TOOL_FORMAT_MISTRAL      ? "}] done"
                           : forms[i].f == TOOL_FORMAT_MISTRAL_ARGS ? " done"
                                                                    : "\n```" DCE DSE " done";
        snprintf(whole, sizeof whole, "%s%s%s", h, a, tail);
        run_parser_as(forms[i].f, whole, 1, true, &r);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.args[0], a);
        assert_int_equal(r.pieces, (int)n);
        /* whitespace next to calls is dropped */
        assert_string_equal(r.content, l3 ? "done" : "okdone");
    }
    ll_buf_free(&c);
    /* a streamed call's name is the one its complete block gives: a JSON string's value, or
     * trimmed (both found by fuzz_tool_calls) */
    struct parsed r;
    run_parser_as(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"g\\u0065t\", \"arguments\": "
                  "{\"a\": 1}}</tool_call>", 3, true, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.names[0], "get");
    run_parser_as(TOOL_FORMAT_DEEPSEEK, DCB "function" DSEP " \tf \n{\"a\": 1}" DCE, 3, true, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.names[0], "f");
    /* mistral: the second call of an array streams as the first did */
    run_parser_as(TOOL_FORMAT_MISTRAL, MTC "[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, "
                  "{\"name\": \"b\", \"arguments\": {\"y\": \"zz\"}}]", 1, true, &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.names[1], "b");
    assert_string_equal(r.args[1], "{\"y\": \"zz\"}");
    assert_int_equal(r.pieces, (int)(strlen("{\"x\": 1}") + strlen("{\"y\": \"zz\"}")));
    /* mistral_args: the second call streams as the first did, its start at its arguments' '{' */
    run_parser_as(TOOL_FORMAT_MISTRAL_ARGS, MTC "a" MARGS "{\"x\": 1}" MTC "b" MARGS
                  "{\"y\": \"zz\"}", 1, true, &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.names[1], "b");
    assert_string_equal(r.args[1], "{\"y\": \"zz\"}");
    assert_int_equal(r.pieces, (int)(strlen("{\"x\": 1}") + strlen("{\"y\": \"zz\"}")));
    /* mistral_args arguments that close but do not parse: text in a whole answer; a streamed
     * call, handed out at its '{', ends there, cut */
    run_parser_as(TOOL_FORMAT_MISTRAL_ARGS, MTC "f" MARGS "{\"a\": 1] after", 0, false, &r);
    assert_int_equal(r.n, 0);
    assert_string_equal(r.content, "f{\"a\": 1] after");
    run_parser_as(TOOL_FORMAT_MISTRAL_ARGS, MTC "f" MARGS "{\"a\": 1] after", 2, true, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.names[0], "f");
    assert_string_equal(r.args[0], "{\"a\": 1");
    /* a block that goes wrong after its call started (no grammar would let it): the call ends
     * there, cut */
    run_parser_as(TOOL_FORMAT_DEEPSEEK, DCB "function" DSEP "f\n```json\n{}```\n<x> after", 4,
                  true, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.args[0], "{}");
}

/* ---- grammars and template variables ---- */

static struct oai_request parse_chat(const char *tools_and_choice)
{
    char body[4096];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}",
             tools_and_choice);
    struct oai_request r;
    struct oai_error e;
    if (oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e) != LL_OK)
        fail_msg("parse: %s", e.message);
    return r;
}

#define TOOLS                                                                                 \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"  \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":"        \
    "[\"city\"],\"additionalProperties\":false},\"strict\":true}},{\"type\":\"function\","       \
    "\"function\":{\"name\":\"ping\"}}]"

static bool acc(const struct grammar *g, const char *s)
{
    return grammar_accepts(g, s, strlen(s), NULL);
}

static void test_grammars(void **state)
{
    (void)state;
    struct tool_setup hermes = {.format = TOOL_FORMAT_HERMES};
    struct tool_setup ds = {.format = TOOL_FORMAT_DEEPSEEK};
    struct oai_error e;
    struct grammar *g;
    const char *call1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call>";
    const char *call2 = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"n\": [1]}}\n"
                        "</tool_call>";
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", call1, call2);

    struct oai_request r = parse_chat(TOOLS);
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_OK);
    assert_true(acc(g, "just text, no call"));
    assert_true(acc(g, "text then a call\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}"
                       "\n</tool_call>"));
    assert_true(acc(g, two));
    assert_false(acc(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    assert_false(acc(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": "
                        "\"x\"}}\n</tool_call>"));
    assert_false(acc(g, "<tool_call>\n{\"name\": \"ping\"")); /* unfinished */
    grammar_unref(g);
    oai_request_free(&r);

    r = parse_chat(TOOLS ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false");
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_OK);
    assert_true(acc(g, call1));
    assert_false(acc(g, two));
    assert_false(acc(g, "text first"));
    grammar_unref(g);
    oai_request_free(&r);

    r = parse_chat(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                   "\"ping\"}}");
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_OK);
    assert_true(acc(g, call2));
    assert_false(acc(g, call1));
    grammar_unref(g);
    oai_request_free(&r);

    r = parse_chat(TOOLS ",\"tool_choice\":\"required\"");
    assert_int_equal(tools_grammar(&ds, &r, &g, &e), LL_OK);
    assert_true(acc(g, DSB DCB "function" DSEP "get_weather\n```json\n{\"city\": \"P\"}\n```" DCE
                       "\n" DCB "function" DSEP "ping\n```json\n{}\n```" DCE DSE));
    assert_false(acc(g, DSB DCB "function" DSEP "get_weather\n```json\n{}\n```" DCE DSE));
    grammar_unref(g);
    oai_request_free(&r);

    /* llama3_json: the calls are the whole answer, or the answer is text not starting with '{' */
    struct tool_setup l3 = {.format = TOOL_FORMAT_LLAMA3};
    const char *l3call = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    r = parse_chat(TOOLS);
    assert_int_equal(tools_grammar(&l3, &r, &g, &e), LL_OK);
    assert_true(acc(g, l3call));
    assert_true(acc(g, "\n{\"name\": \"ping\", \"parameters\": {}}; {\"name\": \"ping\", "
                       "\"parameters\": {\"a\": 1}}"));
    assert_true(acc(g, "Paris is sunny today. {braces} are fine after the start"));
    assert_true(acc(g, "\n\nHello"));
    assert_true(acc(g, ""));
    assert_false(acc(g, "{\"name\": \"nope\", \"parameters\": {}}"));
    assert_false(acc(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}"));
    assert_false(acc(g, "{\"answer\": 1}"));
    assert_false(acc(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"P\"}} and text"));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false");
    assert_int_equal(tools_grammar(&l3, &r, &g, &e), LL_OK);
    assert_true(acc(g, l3call));
    assert_false(acc(g, "text"));
    assert_false(acc(g, ""));
    assert_false(acc(g, "{\"name\": \"ping\", \"parameters\": {}}; {\"name\": \"ping\", "
                        "\"parameters\": {}}"));
    grammar_unref(g);
    oai_request_free(&r);

    /* mistral: text, or the marker and an array of calls */
    struct tool_setup mi = {.format = TOOL_FORMAT_MISTRAL};
    const char *mcall = MTC "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]";
    const char *mtwo = MTC "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}, "
                       "{\"name\": \"ping\", \"arguments\": {}}]";
    r = parse_chat(TOOLS);
    assert_int_equal(tools_grammar(&mi, &r, &g, &e), LL_OK);
    assert_true(acc(g, "just text [with brackets]"));
    assert_true(acc(g, ""));
    assert_true(acc(g, mcall));
    assert_true(acc(g, mtwo));
    assert_true(acc(g, "Let me look." MTC "[{\"name\":\"ping\",\"arguments\":{\"n\":1}}]"));
    assert_false(acc(g, MTC "[{\"name\": \"nope\", \"arguments\": {}}]"));
    assert_false(acc(g, MTC "[{\"name\": \"get_weather\", \"arguments\": {\"town\": \"x\"}}]"));
    assert_false(acc(g, MTC "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"x\"}}]"));
    assert_false(acc(g, MTC "[]"));
    assert_false(acc(g, MTC "{\"name\": \"ping\", \"arguments\": {}}"));
    assert_false(acc(g, MTC "[{\"name\": \"ping\", \"arguments\": {}}"));      /* unclosed */
    assert_false(acc(g, MTC "[{\"name\": \"ping\", \"arguments\": {}}] text")); /* after */
    assert_false(acc(g, MTC "text"));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":\"required\"");
    assert_int_equal(tools_grammar(&mi, &r, &g, &e), LL_OK);
    assert_true(acc(g, mcall));
    assert_true(acc(g, mtwo));
    assert_false(acc(g, "text first"));
    assert_false(acc(g, "text" MTC "[{\"name\": \"ping\", \"arguments\": {}}]"));
    assert_false(acc(g, ""));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false");
    assert_int_equal(tools_grammar(&mi, &r, &g, &e), LL_OK);
    assert_true(acc(g, mcall));
    assert_false(acc(g, mtwo));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                   "\"ping\"}}");
    assert_int_equal(tools_grammar(&mi, &r, &g, &e), LL_OK);
    assert_true(acc(g, MTC "[{\"name\": \"ping\", \"arguments\": {\"any\": [true]}}]"));
    assert_false(acc(g, mcall));
    assert_false(acc(g, MTC "[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", "
                        "\"arguments\": {}}]"));
    assert_false(acc(g, "text"));
    grammar_unref(g);
    oai_request_free(&r);

    /* mistral_args: text, then [TOOL_CALLS]NAME[ARGS]{...} per call, back to back */
    struct tool_setup ma = {.format = TOOL_FORMAT_MISTRAL_ARGS};
    const char *acall = MTC "get_weather" MARGS "{\"city\": \"Paris\"}";
    const char *atwo = MTC "get_weather" MARGS "{\"city\": \"P\"}" MTC "ping" MARGS "{}";
    r = parse_chat(TOOLS);
    assert_int_equal(tools_grammar(&ma, &r, &g, &e), LL_OK);
    assert_true(acc(g, "just text [with brackets]"));
    assert_true(acc(g, ""));
    assert_true(acc(g, acall));
    assert_true(acc(g, atwo));
    assert_true(acc(g, "Let me look." MTC "ping" MARGS "{\"n\": 1}"));
    assert_false(acc(g, MTC "nope" MARGS "{}"));
    assert_false(acc(g, MTC "get_weather" MARGS "{\"town\": \"x\"}"));
    assert_false(acc(g, MTC "get_weather" MARGS "[\"Paris\"]"));
    assert_false(acc(g, MTC "ping{}"));                         /* no [ARGS] */
    assert_false(acc(g, MTC "ping" MARGS));                     /* no arguments */
    assert_false(acc(g, MTC "ping" MARGS "{}" MTC));            /* a marker without a call */
    assert_false(acc(g, MTC "ping" MARGS "{} text"));           /* text after the calls */
    assert_false(acc(g, MTC "ping" MARGS "{}\n" MTC "ping" MARGS "{}")); /* not back to back */
    assert_false(acc(g, MTC "[{\"name\": \"ping\", \"arguments\": {}}]")); /* the other form */
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":\"required\"");
    assert_int_equal(tools_grammar(&ma, &r, &g, &e), LL_OK);
    assert_true(acc(g, acall));
    assert_true(acc(g, atwo));
    assert_true(acc(g, MTC "ping" MARGS "{}" MTC "ping" MARGS "{}" MTC "ping" MARGS "{}"));
    assert_false(acc(g, "text first"));
    assert_false(acc(g, "text" MTC "ping" MARGS "{}"));
    assert_false(acc(g, ""));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"parallel_tool_calls\":false");
    assert_int_equal(tools_grammar(&ma, &r, &g, &e), LL_OK);
    assert_true(acc(g, "text" MTC "ping" MARGS "{}"));
    assert_true(acc(g, acall));
    assert_false(acc(g, atwo));
    grammar_unref(g);
    oai_request_free(&r);
    r = parse_chat(TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                   "\"ping\"}}");
    assert_int_equal(tools_grammar(&ma, &r, &g, &e), LL_OK);
    assert_true(acc(g, MTC "ping" MARGS "{\"any\": [true]}"));
    assert_false(acc(g, acall));
    assert_false(acc(g, MTC "ping" MARGS "{}" MTC "ping" MARGS "{}"));
    assert_false(acc(g, "text"));
    grammar_unref(g);
    oai_request_free(&r);

    /* none: no grammar; a strict function whose schema cannot be enforced: 400 naming it */
    r = parse_chat(TOOLS ",\"tool_choice\":\"none\"");
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_OK);
    assert_null(g);
    oai_request_free(&r);
    r = parse_chat("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":"
                   "true,\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                   "\"integer\"},\"s\":{\"type\":\"array\",\"uniqueItems\":true}}}}}]");
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_EUNSUPPORTED);
    assert_string_equal(e.param, "tools[0].function.parameters");
    assert_non_null(strstr(e.message, "'uniqueItems'"));
    oai_request_free(&r);
    /* the same without strict: its arguments are any object */
    r = parse_chat("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                   "\"integer\"},\"s\":{\"type\":\"array\",\"uniqueItems\":true}}}}}]");
    assert_int_equal(tools_grammar(&hermes, &r, &g, &e), LL_OK);
    assert_true(acc(g, "<tool_call>{\"name\": \"f\", \"arguments\": {\"z\": true}}</tool_call>"));
    grammar_unref(g);
    oai_request_free(&r);
}

static void test_context(void **state)
{
    (void)state;
    struct oai_error e;
    struct tool_setup fallback = {.format = TOOL_FORMAT_HERMES, .in_template = false};
    struct tool_setup templ = {.format = TOOL_FORMAT_HERMES, .in_template = true};
    struct oai_request r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&fallback, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    const cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_int_equal(cJSON_GetArraySize(msgs), 2);
    const cJSON *sys = cJSON_GetArrayItem(msgs, 0);
    assert_string_equal(cJSON_GetObjectItem(sys, "role")->valuestring, "system");
    const char *text = cJSON_GetObjectItem(sys, "content")->valuestring;
    assert_non_null(strstr(text, "\"name\":\"get_weather\""));
    assert_non_null(strstr(text, "<tool_call>"));
    assert_null(cJSON_GetObjectItem(r.chat_context, "tools"));
    oai_request_free(&r);

    r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&templ, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r.chat_context, "tools")), 2);
    oai_request_free(&r);

    /* none: no tools; history arguments become objects for hermes templates */
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"assistant\","
        "\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"content\":"
        "\"2\",\"tool_call_id\":\"c\"}]," TOOLS ",\"tool_choice\":\"none\"}";
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&fallback, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring,
                        "S");
    const cJSON *args = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1),
                                                                   "tool_calls"), 0),
                            "function"), "arguments");
    assert_true(cJSON_IsObject(args));
    oai_request_free(&r);
    /* deepseek: arguments stay text; empty content becomes null (its template tests none) */
    struct tool_setup ds = {.format = TOOL_FORMAT_DEEPSEEK};
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&ds, r.tools, OAI_TOOL_AUTO, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")));
    text = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring;
    assert_memory_equal(text, "S\n\n# Tools", 10);
    assert_non_null(strstr(text, DSB));
    oai_request_free(&r);
    /* llama3_json's fallback prompt shows its form; history arguments become objects */
    struct tool_setup l3 = {.format = TOOL_FORMAT_LLAMA3};
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&l3, r.tools, OAI_TOOL_AUTO, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    text = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring;
    assert_non_null(strstr(text, "\"parameters\": {ARGUMENTS"));
    args = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1),
                                                                   "tool_calls"), 0),
                            "function"), "arguments");
    assert_true(cJSON_IsObject(args));
    oai_request_free(&r);
    /* no tool format: tools are refused */
    struct tool_setup none = {.format = TOOL_FORMAT_NONE};
    r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&none, r.tools, r.tool_choice, r.chat_context, &e),
                     LL_EUNSUPPORTED);
    oai_request_free(&r);
}

/* The format found in real templates (models/ and the fixtures), and --tool-parser. */
static void test_detect(void **state)
{
    (void)state;
    static const struct {
        const char *dir;
        enum tool_format f;
        bool in_template;
    } cases[] = {
        {"models/mistral-nemo-tokenizer", TOOL_FORMAT_MISTRAL, true},
        {"models/qwen3-tokenizer", TOOL_FORMAT_HERMES, true},
        {"models/llama3-tokenizer", TOOL_FORMAT_LLAMA3, true},
        {"models/deepseek-r1-distill-qwen-tokenizer", TOOL_FORMAT_DEEPSEEK, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct chat_template *t;
        char *bos, *eos;
        struct ll_err err = {0};
        if (chat_template_load_model(&t, &bos, &eos, cases[i].dir, &err) != LL_OK)
            fail_msg("%s: %s", cases[i].dir, err.msg);
        struct tool_setup s;
        tools_choose(&s, NULL, t, bos, eos);
        if (s.format != cases[i].f || s.in_template != cases[i].in_template)
            fail_msg("%s: %s", cases[i].dir, s.why);
        if (cases[i].f == TOOL_FORMAT_MISTRAL)
            assert_string_equal(s.why, "auto: mistral (the chat template writes [TOOL_CALLS]); "
                                       "tools rendered by the chat template");
        /* --tool-parser mistral wins over the template */
        tools_choose(&s, "mistral", t, bos, eos);
        assert_int_equal(s.format, TOOL_FORMAT_MISTRAL);
        chat_template_free(t);
        free(bos);
        free(eos);
    }
    assert_true(tools_parser_valid("mistral"));
    assert_true(tools_parser_valid("mistral_args"));
    assert_false(tools_parser_valid("mistral_v2"));
    const char *marks[TOOLS_MAX_MARKERS];
    assert_int_equal(tools_markers(TOOL_FORMAT_MISTRAL, marks), 1);
    assert_string_equal(marks[0], MTC);
    assert_int_equal(tools_markers(TOOL_FORMAT_MISTRAL_ARGS, marks), 2);
    assert_string_equal(marks[0], MTC);
    assert_string_equal(marks[1], MARGS);
    assert_int_equal(tools_markers(TOOL_FORMAT_LLAMA3, marks), 0);

    /* synthetic templates: [TOOL_CALLS] with [ARGS] is the newer spelling, without it the
     * array; --tool-parser mistral_args */
    static const struct {
        const char *src;
        enum tool_format f;
        const char *why;
    } snippets[] = {
        {"{%- for tc in m.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]"
         "{{ tc.function.arguments|tojson }}{%- endfor %}",
         TOOL_FORMAT_MISTRAL_ARGS,
         "auto: mistral_args (the chat template writes [TOOL_CALLS] and [ARGS]); tools in a "
         "fallback system prompt"},
        {"{%- if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls|tojson }}{%- endif %}",
         TOOL_FORMAT_MISTRAL,
         "auto: mistral (the chat template writes [TOOL_CALLS]); tools in a fallback system "
         "prompt"},
        {"{{ '[ARGS]' }}", TOOL_FORMAT_HERMES,
         "auto: hermes (the default); tools in a fallback system prompt"},
    };
    for (size_t i = 0; i < sizeof snippets / sizeof *snippets; i++) {
        struct chat_template *t;
        struct ll_err err = {0};
        if (chat_template_compile(&t, snippets[i].src, &err) != LL_OK)
            fail_msg("%s", err.msg);
        struct tool_setup s;
        tools_choose(&s, NULL, t, "<s>", "</s>");
        assert_int_equal(s.format, snippets[i].f);
        assert_string_equal(s.why, snippets[i].why);
        tools_choose(&s, "mistral_args", t, "<s>", "</s>");
        assert_int_equal(s.format, TOOL_FORMAT_MISTRAL_ARGS);
        assert_string_equal(s.why, "mistral_args (--tool-parser); tools in a fallback system "
                                   "prompt");
        chat_template_free(t);
    }
}

/* Mistral history: ids made 9 characters the same way for a call and its tool message,
 * arguments as objects, so that Mistral-Nemo's template renders the calls as the model writes
 * them (and does not raise). */
static void test_mistral_history(void **state)
{
    (void)state;
    struct chat_template *t;
    char *bos, *eos;
    struct ll_err err = {0};
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, "models/mistral-nemo-tokenizer",
                                              &err), LL_OK);
    struct tool_setup mi;
    tools_choose(&mi, NULL, t, bos, eos);
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
        "\"content\":\"\",\"tool_calls\":["
        "{\"id\":\"call_0123456789abcdef01234567\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},"
        "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"ping\",\"arguments\":"
        "\"{}\"}},"
        "{\"id\":\"abcDEF123\",\"type\":\"function\",\"function\":{\"name\":\"ping\","
        "\"arguments\":\"{}\"}},"
        "{\"id\":\"ééééééééééé\",\"type\":\"function\",\"function\":{\"name\":\"ping\","
        "\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_0123456789abcdef01234567\",\"content\":\"1\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"2\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"abcDEF123\",\"content\":\"3\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"ééééééééééé\",\"content\":\"4\"}],"
        TOOLS "}";
    struct oai_request r;
    struct oai_error e;
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&mi, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    const cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    const cJSON *calls = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "tool_calls");
    static const char *const want[] = {"f01234567", "0000000c1", "abcDEF123", "ééééééééé"};
    for (int i = 0; i < 4; i++) {
        const cJSON *call = cJSON_GetArrayItem(calls, i);
        assert_string_equal(cJSON_GetObjectItem(call, "id")->valuestring, want[i]);
        assert_true(cJSON_IsObject(
            cJSON_GetObjectItem(cJSON_GetObjectItem(call, "function"), "arguments")));
        assert_string_equal(
            cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2 + i), "tool_call_id")->valuestring,
            want[i]);
    }
    char *text = NULL;
    if (chat_template_render(t, r.chat_context, bos, eos, &text, &err) != LL_OK)
        fail_msg("render: %s", err.msg);
    assert_non_null(strstr(text, "[/AVAILABLE_TOOLS][INST]Weather?[/INST]" MTC
                                 "[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                 "\"Paris\"}, \"id\": \"f01234567\"}, {\"name\": \"ping\", "
                                 "\"arguments\": {}, \"id\": \"0000000c1\"}, "));
    assert_non_null(strstr(text, "\"id\": \"ééééééééé\"}]</s>[TOOL_RESULTS]{\"content\": 1, "
                                 "\"call_id\": \"f01234567\"}[/TOOL_RESULTS]"));
    assert_non_null(strstr(text, "\"call_id\": \"0000000c1\"}[/TOOL_RESULTS]"));
    free(text);
    oai_request_free(&r);
    /* the same history with another format keeps its ids */
    struct tool_setup hermes = {.format = TOOL_FORMAT_HERMES, .in_template = true};
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&hermes, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(
                            cJSON_GetArrayItem(msgs, 1), "tool_calls"), 1), "id")->valuestring,
                        "c1");
    oai_request_free(&r);
    /* the fallback prompt shows the array after the marker */
    struct tool_setup fb = {.format = TOOL_FORMAT_MISTRAL, .in_template = false};
    r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&fb, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring,
                           MTC "[{\"name\": \"FUNCTION_NAME\", \"arguments\": {ARGUMENTS"));
    oai_request_free(&r);
    chat_template_free(t);
    free(bos);
    free(eos);
}

/* A template in the newer Mistral spelling (what the templates of Mistral-Small 3.2 and
 * Devstral render for an assistant's calls, written here from the format, with their check on
 * the ids' length): the history's ids made 9 characters, arguments as objects written with
 * tojson, the rendered calls read back by the parser; the fallback prompt shows the form. */
static void test_mistral_args_history(void **state)
{
    (void)state;
    const char *src =
        "{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
        "{%- for m in messages %}"
        "{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
        "{%- elif m.role == 'assistant' and m.tool_calls %}"
        "{%- for tc in m.tool_calls %}"
        "{%- if tc.id is not string or tc.id|length != 9 %}"
        "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
        "{%- endif %}"
        "[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ tc.function.arguments|tojson }}"
        "{%- endfor %}{{ eos_token }}"
        "{%- elif m.role == 'tool' %}"
        "{%- if m.tool_call_id|length != 9 %}{{- raise_exception('bad tool_call_id') }}"
        "{%- endif %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
        "{%- endif %}{%- endfor %}";
    struct chat_template *t;
    struct ll_err err = {0};
    if (chat_template_compile(&t, src, &err) != LL_OK)
        fail_msg("%s", err.msg);
    struct tool_setup ma;
    tools_choose(&ma, NULL, t, "<s>", "</s>");
    assert_int_equal(ma.format, TOOL_FORMAT_MISTRAL_ARGS);
    assert_true(ma.in_template);
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
        "\"content\":\"\",\"tool_calls\":["
        "{\"id\":\"call_0123456789abcdef01234567\",\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},"
        "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"ping\",\"arguments\":"
        "\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_0123456789abcdef01234567\",\"content\":\"1\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"2\"}],"
        TOOLS "}";
    struct oai_request r;
    struct oai_error e;
    assert_int_equal(oai_request_parse(&r, OAI_CHAT, body, strlen(body), &e), LL_OK);
    assert_int_equal(tools_context(&ma, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    const cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    const cJSON *calls = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "tool_calls");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "id")->valuestring,
                        "f01234567");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "tool_call_id")
                            ->valuestring,
                        "0000000c1");
    char *text = NULL;
    if (chat_template_render(t, r.chat_context, "<s>", "</s>", &text, &err) != LL_OK)
        fail_msg("render: %s", err.msg);
    const char *want = "[INST]Weather?[/INST]" MTC "get_weather" MARGS "{\"city\": \"Paris\"}"
                       MTC "ping" MARGS "{}</s>[TOOL_RESULTS]1[/TOOL_RESULTS]";
    const char *at = strstr(text, want);
    if (!at)
        fail_msg("rendered: %s", text);
    assert_non_null(strstr(text, "[AVAILABLE_TOOLS]"));
    /* what the template renders for the calls is what the parser reads as those calls */
    const char *calls_text = at + strlen("[INST]Weather?[/INST]");
    char answer[256];
    snprintf(answer, sizeof answer, "%.*s", (int)(strstr(calls_text, "</s>") - calls_text),
             calls_text);
    check_splits(TOOL_FORMAT_MISTRAL_ARGS, answer, "", 2,
                 (const char *const[]){"get_weather", "ping"},
                 (const char *const[]){"{\"city\": \"Paris\"}", "{}"});
    free(text);
    oai_request_free(&r);
    /* the fallback prompt shows the form */
    struct tool_setup fb = {.format = TOOL_FORMAT_MISTRAL_ARGS, .in_template = false};
    r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&fb, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring,
                           MTC "FUNCTION_NAME" MARGS "{ARGUMENTS AS A JSON OBJECT}"));
    oai_request_free(&r);
    chat_template_free(t);
}

#define GTC "<|tool_call|>"

/* granite: text, then <|tool_call|> and a JSON array of calls (the keys in either order, as
 * Granite writes "arguments" first), read as mistral's array; its own marker in the grammar
 * (which takes either order),
 * the detection, the markers, the fallback prompt; call ids "call_" + hex. */
static void test_granite(void **state)
{
    (void)state;
    const enum tool_format G = TOOL_FORMAT_GRANITE;
    check_splits(G,
                 "Checking." GTC "[{\"arguments\": {\"city\": \"Paris\"}, \"name\": "
                 "\"get_weather\"}, {\"name\": \"get_time\", \"arguments\": {}}]",
                 "Checking.", 2, (const char *const[]){"get_weather", "get_time"},
                 (const char *const[]){"{\"city\":\"Paris\"}", "{}"});
    check_splits(G, GTC " [{\"name\":\"f\",\"arguments\":{\"a\":\"x]\"}}]\n done", "done", 1,
                 (const char *const[]){"f"}, (const char *const[]){"{\"a\":\"x]\"}"});
    /* no call: Mistral's marker is text here; a partial marker; malformed, never the marker */
    check_splits(G, "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{}}] and <|tool_ca",
                 "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{}}] and <|tool_ca", 0, NULL,
                 NULL);
    check_splits(G, "Hi " GTC "not an array", "Hi not an array", 0, NULL, NULL);
    check_splits(G, GTC "[{\"name\":\"f\",\"argu", "[{\"name\":\"f\",\"argu", 0, NULL, NULL);

    struct oai_request r = parse_chat(TOOLS);
    struct tool_setup gs = {.format = G};
    struct grammar *g = NULL;
    struct oai_error e;
    assert_int_equal(tools_grammar(&gs, &r, &g, &e), LL_OK);
    assert_true(acc(g, "text, or nothing"));
    assert_true(acc(g, "Let me look." GTC "[{\"name\":\"ping\",\"arguments\":{\"n\":1}}]"));
    assert_true(acc(g, GTC "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}, "
                       "{\"name\": \"ping\", \"arguments\": {}}]"));
    assert_true(acc(g, GTC "[{\"arguments\": {\"city\": \"P\"}, \"name\": \"get_weather\"}]"));
    assert_false(acc(g, GTC "[{\"arguments\": {\"city\": \"P\"}, \"name\": \"nope\"}]"));
    assert_false(acc(g, GTC "[{\"name\": \"get_weather\", \"arguments\": {\"town\": \"x\"}}]"));
    assert_false(acc(g, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]x" GTC "[]"));
    assert_false(acc(g, GTC "[]"));
    grammar_unref(g);
    oai_request_free(&r);

    assert_true(tools_parser_valid("granite"));
    const char *marks[TOOLS_MAX_MARKERS];
    assert_int_equal(tools_markers(G, marks), 1);
    assert_string_equal(marks[0], GTC);
    struct chat_template *t;
    struct ll_err err = {0};
    assert_int_equal(chat_template_compile(&t, "{%- if m.tool_calls %}<|tool_call|>"
                                               "{{ m.tool_calls|tojson }}{%- endif %}", &err),
                     LL_OK);
    struct tool_setup s;
    tools_choose(&s, NULL, t, "<s>", "</s>");
    assert_int_equal(s.format, G);
    assert_string_equal(s.why, "auto: granite (the chat template writes <|tool_call|>); tools "
                               "in a fallback system prompt");
    chat_template_free(t);

    struct tool_setup fb = {.format = G, .in_template = false};
    r = parse_chat(TOOLS);
    assert_int_equal(tools_context(&fb, r.tools, r.tool_choice, r.chat_context, &e), LL_OK);
    cJSON *msgs = cJSON_GetObjectItem(r.chat_context, "messages");
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring,
                           GTC "[{\"name\": \"FUNCTION_NAME\", \"arguments\": {ARGUMENTS"));
    oai_request_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_deepseek),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_mistral_args),
        cmocka_unit_test(test_granite),
        cmocka_unit_test(test_call_ids),
        cmocka_unit_test(test_streamed_pieces),
        cmocka_unit_test(test_grammars),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_mistral_history),
        cmocka_unit_test(test_mistral_args_history),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
