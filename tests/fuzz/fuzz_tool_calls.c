/*
 * fuzz_tool_calls.c: the streaming tool-call parsers (src/server/tool_calls.c, hermes and
 * deepseek_v3) on model output.
 *
 * Input: one byte (bit 0: the format; bits 1..4: a piece size 1..16), then the model's text.
 * The text is fed once whole and once in pieces of that size. Checked: every call has a name
 * and arguments that are JSON; the two feeds give the same content and the same calls (a
 * marker or a call split across tokens is found as if it came in one piece).
 */
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "fuzz.h"
#include "json.h"
#include "tool_calls.h"

static void run(enum tool_format f, const char *text, size_t len, size_t piece,
                struct tool_parser *p, struct ll_buf *content)
{
    tool_parser_init(p, f);
    size_t at = 0;
    do {
        size_t n = len - at < piece ? len - at : piece;
        tool_parser_feed(p, text + at, n, at + n == len, content);
        at += n;
        int first = 0;
        int k = tool_parser_new_calls(p, &first);
        if (k < 0 || first < 0 || first + k > p->n_calls)
            fuzz_fail("new calls %d from %d of %d", k, first, p->n_calls);
    } while (at < len);
    if (p->failed)
        fuzz_fail("out of memory");
    for (int i = 0; i < p->n_calls; i++) {
        const struct tool_call *c = &p->calls[i];
        cJSON *j = NULL;
        struct ll_err err = {0};
        if (!c->name || !c->arguments)
            fuzz_fail("call %d without a name or arguments", i);
        if (ll_json_parse(&j, c->arguments, strlen(c->arguments), "arguments", &err) != LL_OK)
            fuzz_fail("call %d: arguments are not JSON: %s", i, err.msg);
        cJSON_Delete(j);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum tool_format f = data[0] & 1 ? TOOL_FORMAT_DEEPSEEK : TOOL_FORMAT_HERMES;
    size_t piece = 1 + ((data[0] >> 1) & 15);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct tool_parser whole, pieces;
    struct ll_buf c_whole = {0}, c_pieces = {0};
    run(f, text, len, len ? len : 1, &whole, &c_whole);
    run(f, text, len, piece, &pieces, &c_pieces);
    if (c_whole.len != c_pieces.len ||
        (c_whole.len && memcmp(c_whole.data, c_pieces.data, c_whole.len) != 0))
        fuzz_fail("content differs: %zu bytes whole, %zu in pieces of %zu", c_whole.len,
                  c_pieces.len, piece);
    if (whole.n_calls != pieces.n_calls)
        fuzz_fail("%d calls whole, %d in pieces of %zu", whole.n_calls, pieces.n_calls, piece);
    for (int i = 0; i < whole.n_calls; i++)
        if (strcmp(whole.calls[i].name, pieces.calls[i].name) != 0 ||
            strcmp(whole.calls[i].arguments, pieces.calls[i].arguments) != 0)
            fuzz_fail("call %d differs in pieces of %zu", i, piece);
    tool_parser_free(&whole);
    tool_parser_free(&pieces);
    ll_buf_free(&c_whole);
    ll_buf_free(&c_pieces);
    return 0;
}
