/*
 * fuzz_tool_calls.c: the streaming tool-call parsers (src/server/tool_calls.c, hermes,
 * deepseek_v3, llama3_json, mistral, mistral_args and granite) on model output.
 *
 * Input: one byte (bits 0..1: the format, 0 hermes, 1 deepseek_v3, 2 llama3_json, 3 mistral,
 * or mistral_args when bit 6 is set too, or granite when bit 7 is; bits 2..5: a piece size
 * 1..16), then the model's text.
 * The text is fed once whole, once in pieces of that size and once in pieces as a stream (the
 * calls' pieces taken after each feed). Checked: every complete call has a name and arguments
 * that are JSON; whole and in pieces give the same content and the same calls (a marker or a
 * call split across tokens is found as if it came in one piece); the stream's pieces of a call
 * add up to its arguments, and the stream gives the same calls and content, unless a call it had
 * started was cut (the text ended inside its block, or the block went wrong after its start:
 * then it stays a call where the others release its block as text; the calls before it are
 * the same).
 */
#include <stdbool.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "fuzz.h"
#include "json.h"
#include "tool_calls.h"

/* Returns the index of the first cut call (n_calls: none). */
static int run(enum tool_format f, const char *text, size_t len, size_t piece, bool stream,
                struct tool_parser *p, struct ll_buf *content)
{
    tool_parser_init(p, f);
    struct ll_buf *got = NULL; /* per call: its pieces */
    size_t at = 0;
    int started = 0;
    do {
        size_t n = len - at < piece ? len - at : piece;
        tool_parser_feed(p, text + at, n, at + n == len, content);
        at += n;
        struct tool_piece pc;
        while ((stream || at == len) && tool_parser_next(p, &pc)) {
            if (pc.index != started - !pc.start || pc.index >= p->n_calls)
                fuzz_fail("piece of call %d (%d started)", pc.index, started);
            if (pc.start) {
                got = realloc(got, sizeof *got * (size_t)(started + 1));
                if (!got)
                    fuzz_fail("out of memory");
                got[started++] = (struct ll_buf){0};
            }
            ll_buf_append(&got[pc.index], pc.args, pc.len);
        }
    } while (at < len);
    if (p->failed)
        fuzz_fail("out of memory");
    if (started != p->n_calls)
        fuzz_fail("%d calls started of %d", started, p->n_calls);
    int cut = p->n_calls;
    for (int i = 0; i < p->n_calls; i++) {
        const struct tool_call *c = &p->calls[i];
        cJSON *j = NULL;
        struct ll_err err = {0};
        if (!c->name || !c->done)
            fuzz_fail("call %d without a name, or not done", i);
        if (got[i].len != c->args.len || memcmp(tool_call_args(c), got[i].data ? got[i].data : "",
                                                got[i].len))
            fuzz_fail("call %d: its pieces are not its arguments", i);
        if (c->cut && !stream)
            fuzz_fail("call %d cut, not streamed", i);
        if (c->cut && cut == p->n_calls)
            cut = i;
        if (!c->cut &&
            ll_json_parse(&j, tool_call_args(c), c->args.len, "arguments", &err) != LL_OK)
            fuzz_fail("call %d: arguments are not JSON: %s", i, err.msg);
        cJSON_Delete(j);
        ll_buf_free(&got[i]);
    }
    free(got);
    return cut;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum tool_format f = (data[0] & 3) == 1   ? TOOL_FORMAT_DEEPSEEK
                         : (data[0] & 3) == 2 ? TOOL_FORMAT_LLAMA3
                         : (data[0] & 3) == 3 ? (data[0] & 128  ? TOOL_FORMAT_GRANITE
                                                 : data[0] & 64 ? TOOL_FORMAT_MISTRAL_ARGS
                                                                : TOOL_FORMAT_MISTRAL)
                                              : TOOL_FORMAT_HERMES;
    size_t piece = 1 + ((data[0] >> 2) & 15);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct tool_parser p[3];
    struct ll_buf c[3] = {{0}};
    run(f, text, len, len ? len : 1, false, &p[0], &c[0]);
    run(f, text, len, piece, false, &p[1], &c[1]);
    int cut = run(f, text, len, piece, true, &p[2], &c[2]);
    for (int k = 1; k < 3; k++) {
        bool part = k == 2 && cut < p[2].n_calls; /* then only the calls before it */
        if (!part && (c[k].len != c[0].len ||
                      (c[k].len && memcmp(c[0].data, c[k].data, c[k].len) != 0)))
            fuzz_fail("content differs (%d): %zu bytes whole, %zu in pieces of %zu", k, c[0].len,
                      c[k].len, piece);
        if (part ? p[0].n_calls < cut : p[k].n_calls != p[0].n_calls)
            fuzz_fail("%d calls whole, %d in pieces of %zu (%d)", p[0].n_calls, p[k].n_calls,
                      piece, k);
        for (int i = 0; i < (part ? cut : p[0].n_calls); i++)
            if (strcmp(p[0].calls[i].name, p[k].calls[i].name) != 0 ||
                strcmp(tool_call_args(&p[0].calls[i]), tool_call_args(&p[k].calls[i])) != 0)
                fuzz_fail("call %d differs in pieces of %zu (%d)", i, piece, k);
    }
    for (int k = 0; k < 3; k++) {
        tool_parser_free(&p[k]);
        ll_buf_free(&c[k]);
    }
    return 0;
}
