/*
 * tool_calls.c: tool-call formats, the tools in the prompt, the call grammar and the streaming
 * call parser (tool_calls.h).
 *
 * The parser keeps back text that could be the start of a call marker, so a marker split
 * across tokens is found; inside a call block it buffers until the block's end marker, then
 * parses the call (JSON through ll_json_parse) and hands it out whole. Whitespace next to
 * calls is dropped; a block that never closes, or whose JSON does not parse, comes out as text.
 * The two Mistral spellings (mistral, mistral_args) share their call ids and the history's ids
 * (mistral_family); each has its own reader of the text after [TOOL_CALLS]. mistral and granite
 * are one reader of a marker and a JSON array of calls (array_mark: the marker differs).
 * Any thread; pure functions and per-choice state.
 */
#include "tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "grammar.h"
#include "json.h"
#include "request_id.h"

#define H_OPEN "<tool_call>"
#define H_CLOSE "</tool_call>"
#define DS_BLOCK_OPEN "<｜tool▁calls▁begin｜>"
#define DS_BLOCK_CLOSE "<｜tool▁calls▁end｜>"
#define DS_CALL_OPEN "<｜tool▁call▁begin｜>"
#define DS_CALL_CLOSE "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define DS_MAX_TYPE 64  /* bytes of a deepseek call's type ("function"), without '<' */
#define DS_MAX_NAME 128 /* bytes of a deepseek call's function name */
#define L3_TAG "<|python_tag|>"
#define MI_MARK "[TOOL_CALLS]"
#define MI_ID_LEN 9      /* Mistral's templates refuse any other length of call id */
#define MA_ARGS "[ARGS]" /* mistral_args: between a call's name and its arguments */
#define MA_MAX_NAME 128  /* bytes of a mistral_args call's name */
#define GR_MARK "<|tool_call|>" /* granite: before its JSON array of calls */

bool tools_parser_valid(const char *parser)
{
    return !strcmp(parser, "hermes") || !strcmp(parser, "deepseek_v3") ||
           !strcmp(parser, "llama3_json") || !strcmp(parser, "mistral") ||
           !strcmp(parser, "mistral_args") || !strcmp(parser, "granite") ||
           !strcmp(parser, "none");
}

/* Mistral's two spellings: the same call ids and history ids (MI_ID_LEN characters). */
static bool mistral_family(enum tool_format f)
{
    return f == TOOL_FORMAT_MISTRAL || f == TOOL_FORMAT_MISTRAL_ARGS;
}

/* The marker before the JSON array of calls of mistral and granite (NULL for the others). */
static const char *array_mark(enum tool_format f)
{
    return f == TOOL_FORMAT_MISTRAL ? MI_MARK : f == TOOL_FORMAT_GRANITE ? GR_MARK : NULL;
}

static const char *format_name(enum tool_format f)
{
    switch (f) {
    case TOOL_FORMAT_NONE:
        return "none";
    case TOOL_FORMAT_HERMES:
        return "hermes";
    case TOOL_FORMAT_DEEPSEEK:
        return "deepseek_v3";
    case TOOL_FORMAT_LLAMA3:
        return "llama3_json";
    case TOOL_FORMAT_MISTRAL:
        return "mistral";
    case TOOL_FORMAT_MISTRAL_ARGS:
        return "mistral_args";
    case TOOL_FORMAT_GRANITE:
        return "granite";
    }
    return "?";
}

/* The arguments' key of a JSON call: "parameters" (llama3_json), else
 * "arguments". */
static const char *args_key(enum tool_format f)
{
    return f == TOOL_FORMAT_LLAMA3 ? "\"parameters\"" : "\"arguments\"";
}

int tools_markers(enum tool_format f, const char **out)
{
    int n = 0;
    if (f == TOOL_FORMAT_HERMES) {
        out[n++] = H_OPEN;
        out[n++] = H_CLOSE;
    } else if (f == TOOL_FORMAT_DEEPSEEK) {
        out[n++] = DS_BLOCK_OPEN;
        out[n++] = DS_BLOCK_CLOSE;
        out[n++] = DS_CALL_OPEN;
        out[n++] = DS_CALL_CLOSE;
        out[n++] = DS_SEP;
    } else if (array_mark(f)) {
        out[n++] = array_mark(f);
    } else if (f == TOOL_FORMAT_MISTRAL_ARGS) {
        out[n++] = MI_MARK;
        out[n++] = MA_ARGS;
    }
    return n;
}

/* Whether the template renders a probe tool given as `tools`. */
static bool renders_tools(const struct chat_template *tmpl, const char *bos, const char *eos)
{
    const char *probe = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"add_generation_prompt\":true,\"tools\":[{\"type\":\"function\","
                        "\"function\":{\"name\":\"llaisys_probe_tool\",\"description\":\"d\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]}";
    cJSON *ctx = NULL; /* (through ll_json_parse: HTTP threads parse while the model loads) */
    char *text = NULL;
    struct ll_err err = {0};
    if (ll_json_parse(&ctx, probe, strlen(probe), "the tool probe", &err) != LL_OK)
        ctx = NULL;
    bool yes = ctx && chat_template_render(tmpl, ctx, bos, eos, &text, &err) == LL_OK &&
               strstr(text, "llaisys_probe_tool");
    free(text);
    cJSON_Delete(ctx);
    return yes;
}

void tools_choose(struct tool_setup *t, const char *parser, const struct chat_template *tmpl,
                  const char *bos, const char *eos)
{
    const char *src = tmpl ? chat_template_source(tmpl) : "";
    const char *why;
    if (parser) {
        t->format = !strcmp(parser, "none")           ? TOOL_FORMAT_NONE
                    : !strcmp(parser, "hermes")       ? TOOL_FORMAT_HERMES
                    : !strcmp(parser, "llama3_json")  ? TOOL_FORMAT_LLAMA3
                    : !strcmp(parser, "mistral")      ? TOOL_FORMAT_MISTRAL
                    : !strcmp(parser, "mistral_args") ? TOOL_FORMAT_MISTRAL_ARGS
                    : !strcmp(parser, "granite")      ? TOOL_FORMAT_GRANITE
                                                      : TOOL_FORMAT_DEEPSEEK;
        why = "--tool-parser";
    } else if (strstr(src, GR_MARK)) {
        t->format = TOOL_FORMAT_GRANITE;
        why = "the chat template writes " GR_MARK;
    } else if (strstr(src, H_OPEN)) {
        t->format = TOOL_FORMAT_HERMES;
        why = "the chat template writes <tool_call>";
    } else if (strstr(src, "tool▁call▁begin")) {
        t->format = TOOL_FORMAT_DEEPSEEK;
        why = "the chat template writes <｜tool▁call▁begin｜>";
    } else if (strstr(src, MI_MARK) && strstr(src, MA_ARGS)) {
        t->format = TOOL_FORMAT_MISTRAL_ARGS;
        why = "the chat template writes " MI_MARK " and " MA_ARGS;
    } else if (strstr(src, MI_MARK)) {
        t->format = TOOL_FORMAT_MISTRAL;
        why = "the chat template writes " MI_MARK;
    } else if (strstr(src, L3_TAG) || strstr(src, "\"parameters\": ")) {
        t->format = TOOL_FORMAT_LLAMA3;
        why = "the chat template writes Llama 3 calls";
    } else {
        t->format = TOOL_FORMAT_HERMES;
        why = "the default";
    }
    t->in_template = tmpl && renders_tools(tmpl, bos, eos);
    snprintf(t->why, sizeof t->why, "%s%s (%s); tools %s", parser ? "" : "auto: ",
             format_name(t->format), why,
             t->in_template ? "rendered by the chat template" : "in a fallback system prompt");
}

/* ---- the prompt ---- */

static enum ll_status nomem(struct oai_error *e)
{
    return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
}

/* The fallback system prompt listing the tools and the call format. */
static char *fallback_prompt(enum tool_format f, const cJSON *tools)
{
    struct ll_buf b = {0};
    ll_buf_puts(&b, "# Tools\n\nYou can call the functions below (each given as a JSON Schema "
                    "signature):\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *j = cJSON_PrintUnformatted(t);
        if (!j) {
            ll_buf_free(&b);
            return NULL;
        }
        ll_buf_puts(&b, j);
        ll_buf_putc(&b, '\n');
        free(j);
    }
    if (f == TOOL_FORMAT_DEEPSEEK)
        ll_buf_puts(&b, "\nTo call functions, answer with this block, one "
                        DS_CALL_OPEN "..." DS_CALL_CLOSE " part per call (parts separated by "
                        "a newline):\n" DS_BLOCK_OPEN DS_CALL_OPEN "function" DS_SEP
                        "FUNCTION_NAME\n```json\n{ARGUMENTS AS A JSON OBJECT}\n```" DS_CALL_CLOSE
                        DS_BLOCK_CLOSE "\nThe results come back in the next message.");
    else if (array_mark(f))
        ll_buf_printf(&b, "\nTo call functions, answer with %s and then a JSON array of the "
                          "calls:\n%s[{\"name\": \"FUNCTION_NAME\", \"arguments\": {ARGUMENTS AS A "
                          "JSON OBJECT}}]\nThe results come back in the next message.",
                      array_mark(f), array_mark(f));
    else if (f == TOOL_FORMAT_MISTRAL_ARGS)
        ll_buf_puts(&b, "\nTo call a function, answer with " MI_MARK ", its name, " MA_ARGS
                        " and its arguments as a JSON object; for several calls, one after "
                        "the other:\n" MI_MARK "FUNCTION_NAME" MA_ARGS "{ARGUMENTS AS A JSON "
                        "OBJECT}\nThe results come back in the next message.");
    else if (f == TOOL_FORMAT_LLAMA3)
        ll_buf_puts(&b, "\nTo call functions, answer with the calls only, each a JSON object "
                        "{\"name\": \"FUNCTION_NAME\", \"parameters\": {ARGUMENTS AS A JSON "
                        "OBJECT}}, separated by \";\".\nThe results come back in the next "
                        "message.");
    else
        ll_buf_puts(&b, "\nTo call a function, answer with one block per call:\n" H_OPEN
                        "\n{\"name\": \"FUNCTION_NAME\", \"arguments\": {ARGUMENTS AS A JSON "
                        "OBJECT}}\n" H_CLOSE "\nThe results come back in the next message.");
    return b.failed ? (ll_buf_free(&b), NULL) : ll_buf_take(&b);
}

/* A call id as Mistral's templates take it, exactly MI_ID_LEN characters (code points, as the
 * template's |length counts): a longer id keeps its last MI_ID_LEN (what vLLM does for Mistral
 * models; "call_" + 24 hex digits keeps 9 of its digits), a shorter one gets '0's in front.
 * The same id always maps the same way, so a call and the tool message answering it agree. */
static void mistral_id(const char *id, char out[4 * MI_ID_LEN + 1])
{
    size_t n = strlen(id), chars = 0, from = n;
    while (from > 0 && chars < MI_ID_LEN) { /* back over MI_ID_LEN characters */
        from--;
        if (((unsigned char)id[from] & 0xC0) != 0x80)
            chars++;
    }
    size_t pad = MI_ID_LEN - chars;
    memset(out, '0', pad);
    memcpy(out + pad, id + from, n - from);
    out[pad + n - from] = 0;
}

/* Replace the string obj[key] by its Mistral form (mistral_id); false: out of memory. */
static bool mistral_id_in(cJSON *obj, const char *key)
{
    cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(id))
        return true; /* no id: the template says what is missing */
    char out[4 * MI_ID_LEN + 1];
    mistral_id(id->valuestring, out);
    if (!strcmp(out, id->valuestring))
        return true;
    cJSON *str = cJSON_CreateString(out);
    if (!str || !cJSON_ReplaceItemInObjectCaseSensitive(obj, key, str)) {
        cJSON_Delete(str);
        return false;
    }
    return true;
}

/* History: tool call arguments as the format's templates expect them; for the mistral
 * formats, call ids as their templates take them. */
static bool adjust_history(enum tool_format f, cJSON *msgs)
{
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (mistral_family(f) && !mistral_id_in(m, "tool_call_id"))
            return false;
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!cJSON_IsArray(calls))
            continue;
        if (f == TOOL_FORMAT_DEEPSEEK) { /* its template tests `content is none` */
            cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (cJSON_IsString(c) && !c->valuestring[0])
                cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateNull());
            continue;
        }
        cJSON *call;
        cJSON_ArrayForEach(call, calls) {
            if (mistral_family(f) && !mistral_id_in(call, "id"))
                return false;
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args))
                continue;
            cJSON *obj = NULL;
            struct ll_err err = {0};
            if (ll_json_parse(&obj, args->valuestring, strlen(args->valuestring), "arguments",
                              &err) != LL_OK)
                continue; /* not JSON: left as the text */
            if (!cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj)) {
                cJSON_Delete(obj);
                return false;
            }
        }
    }
    return true;
}

enum ll_status tools_context(const struct tool_setup *t, const cJSON *tools,
                             enum oai_tool_choice choice, cJSON *ctx, struct oai_error *e)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    if (t->format != TOOL_FORMAT_NONE && !adjust_history(t->format, msgs))
        return nomem(e);
    if (!tools || choice == OAI_TOOL_NONE)
        return LL_OK;
    if (t->format == TOOL_FORMAT_NONE)
        return oai_error_set(e, LL_EUNSUPPORTED, "tools", "unsupported_parameter",
                             "this server parses no tool calls (started with --tool-parser "
                             "none)");
    if (t->in_template) {
        cJSON *dup = cJSON_Duplicate(tools, true);
        if (!dup || !cJSON_AddItemToObject(ctx, "tools", dup)) {
            cJSON_Delete(dup);
            return nomem(e);
        }
        return LL_OK;
    }
    char *prompt = fallback_prompt(t->format, tools);
    if (!prompt)
        return nomem(e);
    cJSON *first = cJSON_GetArrayItem(msgs, 0);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(first, "content");
    bool ok;
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) {
        struct ll_buf b = {0};
        if (cJSON_IsString(content) && content->valuestring[0]) {
            ll_buf_puts(&b, content->valuestring);
            ll_buf_puts(&b, "\n\n");
        }
        ll_buf_puts(&b, prompt);
        char *text = b.failed ? NULL : ll_buf_take(&b);
        ll_buf_free(&b);
        cJSON *str = text ? cJSON_CreateString(text) : NULL;
        free(text);
        ok = str && (cJSON_GetObjectItemCaseSensitive(first, "content")
                         ? cJSON_ReplaceItemInObjectCaseSensitive(first, "content", str)
                         : cJSON_AddItemToObject(first, "content", str));
        if (!ok)
            cJSON_Delete(str);
    } else {
        cJSON *sys = cJSON_CreateObject();
        ok = sys && cJSON_AddStringToObject(sys, "role", "system") &&
             cJSON_AddStringToObject(sys, "content", prompt) &&
             cJSON_InsertItemInArray(msgs, 0, sys);
        if (!ok)
            cJSON_Delete(sys);
    }
    free(prompt);
    return ok ? LL_OK : nomem(e);
}

/* ---- the grammar ---- */

/* The rule for one function's arguments. */
static enum ll_status args_rule(struct gbuild *b, const cJSON *fn, int index, int *rule,
                                struct oai_error *e)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (!params) {
        *rule = grammar_json_any_object(b);
        return LL_OK;
    }
    char where[96];
    snprintf(where, sizeof where, "tools[%d].function.parameters", index);
    struct ll_err err = {0};
    enum ll_status s = grammar_json_schema(b, params, where, rule, &err);
    if (s == LL_ENOMEM)
        return nomem(e);
    if (s != LL_OK) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict")))
            return oai_error_set(e, s, where, s == LL_EUNSUPPORTED ? "unsupported_schema"
                                                                   : "invalid_schema",
                                 "%s", err.msg);
        *rule = grammar_json_any_object(b); /* not strict: any object (tool_calls.h) */
    }
    return LL_OK;
}

/* One call of function fn (its name quoted as JSON for hermes, llama3_json, mistral and
 * granite, granite's also with the arguments first; for mistral_args NAME [ARGS] {arguments},
 * the marker before it being the caller's). */
static enum ll_status call_rule(struct gbuild *b, enum tool_format f, const cJSON *fn,
                                int index, int *rule, struct oai_error *e)
{
    int args;
    enum ll_status s = args_rule(b, fn, index, &args, e);
    if (s != LL_OK)
        return s;
    const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
    int ws = grammar_json_ws(b);
    struct gseq q = {0};
    *rule = gb_rule(b);
    char lit[160];
    if (f == TOOL_FORMAT_MISTRAL_ARGS) {
        snprintf(lit, sizeof lit, "%s" MA_ARGS, name);
        gseq_lit(b, &q, lit, strlen(lit));
        gseq_rule(&q, args);
        gb_alt(b, *rule, &q);
    } else if (f != TOOL_FORMAT_DEEPSEEK) {
        /* {"name": NAME, KEY: {...}}; granite's also with the arguments first, as Granite
         * writes them */
        const char *key = args_key(f);
        snprintf(lit, sizeof lit, "\"%s\"", name); /* names are [A-Za-z0-9_-] */
        int colon = gb_literal(b, ":"), comma = gb_literal(b, ",");
        int named = gb_concat(b, (int[]){gb_literal(b, "\"name\""), ws, colon, ws,
                                         gb_literal(b, lit)}, 5);
        int argd = gb_concat(b, (int[]){gb_literal(b, key), ws, colon, ws, args}, 5);
        for (int order = 0; order < (f == TOOL_FORMAT_GRANITE ? 2 : 1); order++) {
            gseq_clear(&q);
            gseq_byte(b, &q, '{');
            gseq_rule(&q, ws);
            gseq_rule(&q, order ? argd : named);
            gseq_rule(&q, ws);
            gseq_rule(&q, comma);
            gseq_rule(&q, ws);
            gseq_rule(&q, order ? named : argd);
            gseq_rule(&q, ws);
            gseq_byte(b, &q, '}');
            gb_alt(b, *rule, &q);
        }
    } else {
        snprintf(lit, sizeof lit, DS_CALL_OPEN "function" DS_SEP "%s\n```json\n", name);
        gseq_lit(b, &q, lit, strlen(lit));
        gseq_rule(&q, args);
        gseq_lit(b, &q, "\n```" DS_CALL_CLOSE, strlen("\n```" DS_CALL_CLOSE));
        gb_alt(b, *rule, &q);
    }
    gseq_free(&q);
    return gbuild_failed(b) ? nomem(e) : LL_OK;
}

enum ll_status tools_grammar(const struct tool_setup *t, const struct oai_request *r,
                             struct grammar **out, struct oai_error *e)
{
    *out = NULL;
    if (!r->tools || r->tool_choice == OAI_TOOL_NONE || t->format == TOOL_FORMAT_NONE)
        return LL_OK;
    struct gbuild *b = gbuild_new();
    if (!b)
        return nomem(e);
    enum ll_status s = LL_OK;
    int call = gb_rule(b), i = 0; /* call ::= one of the functions */
    const cJSON *tool;
    cJSON_ArrayForEach(tool, r->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        int c;
        if (r->tool_choice == OAI_TOOL_NAMED && strcmp(name, r->tool_choice_name)) {
            i++;
            continue;
        }
        if ((s = call_rule(b, t->format, fn, i++, &c, e)) != LL_OK)
            break;
        struct gseq q = {0};
        gseq_rule(&q, c);
        gb_alt(b, call, &q);
        gseq_free(&q);
    }
    bool many = r->parallel_tool_calls && r->tool_choice != OAI_TOOL_NAMED;
    int ws = grammar_json_ws(b), rest, start;
    if (t->format == TOOL_FORMAT_HERMES) {
        /* rest ::= ws call ws "</tool_call>" (ws "<tool_call>" ws call ws "</tool_call>")* */
        start = gb_literal(b, H_OPEN);
        int close = gb_literal(b, H_CLOSE);
        int first = gb_concat(b, (int[]){ws, call, ws, close}, 4);
        int more = gb_concat(b, (int[]){ws, start, ws, call, ws, close}, 6);
        rest = many ? gb_concat(b, (int[]){first, gb_repeat(b, more, 0, -1)}, 2) : first;
    } else if (t->format == TOOL_FORMAT_LLAMA3) {
        /* rest ::= call (ws ";" ws call)*, the whole answer */
        int more = gb_concat(b, (int[]){ws, gb_literal(b, ";"), ws, call}, 4);
        rest = many ? gb_concat(b, (int[]){call, gb_repeat(b, more, 0, -1)}, 2) : call;
        start = gb_literal(b, "");
    } else if (array_mark(t->format)) {
        /* rest ::= ws "[" ws call (ws "," ws call)* ws "]" */
        start = gb_literal(b, array_mark(t->format));
        int more = gb_concat(b, (int[]){ws, gb_literal(b, ","), ws, call}, 4);
        int calls = many ? gb_concat(b, (int[]){call, gb_repeat(b, more, 0, -1)}, 2) : call;
        rest = gb_concat(b, (int[]){ws, gb_literal(b, "["), ws, calls, ws, gb_literal(b, "]")}, 6);
    } else if (t->format == TOOL_FORMAT_MISTRAL_ARGS) {
        /* rest ::= call ("[TOOL_CALLS]" call)*, back to back as the model writes them */
        start = gb_literal(b, MI_MARK);
        int more = gb_concat(b, (int[]){gb_literal(b, MI_MARK), call}, 2);
        rest = many ? gb_concat(b, (int[]){call, gb_repeat(b, more, 0, -1)}, 2) : call;
    } else {
        /* rest ::= call ("\n" call)* "<｜tool▁calls▁end｜>" */
        start = gb_literal(b, DS_BLOCK_OPEN);
        int more = gb_concat(b, (int[]){gb_literal(b, "\n"), call}, 2);
        int tail = many ? gb_repeat(b, more, 0, -1) : gb_literal(b, "");
        rest = gb_concat(b, (int[]){call, tail, gb_literal(b, DS_BLOCK_CLOSE)}, 3);
    }
    int root;
    if (r->tool_choice == OAI_TOOL_AUTO && t->format == TOOL_FORMAT_LLAMA3) {
        /* the calls, or text that does not start with '{' (nor with white space: the calls
         * may follow a little of it), or nothing */
        struct gset first = {{0}};
        for (int c = 0; c < 256; c++)
            if (c != '{' && c != ' ' && c != '\t' && c != '\n' && c != '\r')
                first.bits[c / 64] |= 1ull << (c % 64);
        struct gset all;
        memset(&all, 0xff, sizeof all);
        int any = gb_rule(b), lead = gb_rule(b);
        struct gseq q = {0};
        gseq_setsym(&q, gb_set(b, &all));
        gb_alt(b, any, &q);
        gseq_clear(&q);
        gseq_setsym(&q, gb_set(b, &first));
        gb_alt(b, lead, &q);
        gseq_free(&q);
        int text = gb_concat(b, (int[]){lead, gb_repeat(b, any, 0, -1)}, 2);
        root = gb_concat(b, (int[]){grammar_json_lead_ws(b),
                                    gb_optional(b, gb_choice(b, (int[]){rest, text}, 2))},
                         2);
    } else if (r->tool_choice == OAI_TOOL_AUTO)
        root = gb_until(b, t->format == TOOL_FORMAT_HERMES ? H_OPEN
                           : array_mark(t->format)       ? array_mark(t->format)
                           : mistral_family(t->format)   ? MI_MARK
                                                         : DS_BLOCK_OPEN,
                        rest, true);
    else
        root = gb_concat(b, (int[]){grammar_json_lead_ws(b), start, rest}, 3);
    if (s == LL_OK) {
        struct ll_err err = {0};
        s = gbuild_finish(b, root, out, &err);
        if (s != LL_OK)
            oai_error_set(e, s, "tools", NULL, "%s", err.msg);
    }
    gbuild_free(b);
    return s;
}

/* ---- the parser ---- */

/* in: after a call block's opening marker (mistral_args: after a [TOOL_CALLS]); bare: a
 * deepseek call without the block's marker; text: llama3_json, an answer that is text to its
 * end; sep: llama3_json and mistral, after a call; array: mistral, at the '[' or ',' before a
 * call */
enum { P_OUT, P_IN, P_IN_BARE, P_TEXT, P_SEP, P_ARRAY };

void tool_parser_init(struct tool_parser *p, enum tool_format f)
{
    memset(p, 0, sizeof *p);
    p->format = f;
    p->open = -1;
}

void tool_parser_free(struct tool_parser *p)
{
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        ll_buf_free(&p->calls[i].args);
    }
    free(p->calls);
    ll_buf_free(&p->hold);
    ll_buf_free(&p->ws);
    memset(p, 0, sizeof *p);
}

bool tool_parser_next(struct tool_parser *p, struct tool_piece *out)
{
    if (p->n_taken == p->n_calls)
        return false;
    struct tool_call *c = &p->calls[p->n_taken];
    *out = (struct tool_piece){.index = p->n_taken, .start = !c->started, .done = c->done,
                               .args = tool_call_args(c) + c->sent,
                               .len = c->args.len - c->sent};
    if (!out->start && !out->len && !out->done)
        return false;
    c->started = true;
    c->sent = c->args.len;
    if (c->done)
        p->n_taken++;
    return true;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Release text as content: whitespace at its end is held (and dropped next to a call). */
static void release(struct tool_parser *p, const char *s, size_t n, struct ll_buf *content)
{
    if (p->after_call)
        while (n && is_ws(*s))
            s++, n--;
    size_t end = n;
    while (end && is_ws(s[end - 1]))
        end--;
    if (end) {
        p->after_call = false;
        ll_buf_append(content, p->ws.data, p->ws.len);
        ll_buf_clear(&p->ws);
        ll_buf_append(content, s, end);
    }
    ll_buf_append(&p->ws, s + end, n - end);
}

/* Drop the first n bytes of the held text. */
static void consume(struct ll_buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    if (b->data)
        b->data[b->len] = 0;
}

static const char *find(const char *s, size_t n, const char *pat)
{
    return memmem(s, n, pat, strlen(pat));
}

/* The longest suffix of s[0..n) that is a proper prefix of pat. */
static size_t partial_suffix(const char *s, size_t n, const char *pat)
{
    size_t m = strlen(pat);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, pat, k))
            return k;
    return 0;
}

static char *trimmed(const char *s, size_t n)
{
    while (n && is_ws(*s))
        s++, n--;
    while (n && is_ws(s[n - 1]))
        n--;
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, s, n);
        out[n] = 0;
    }
    return out;
}

/* A fresh call id, the one rule for every format: the mistral formats: MI_ID_LEN random
 * letters and digits (their templates refuse any other length); others: "call_" + 24 random hex
 * digits. */
static void call_id_new(enum tool_format f, char id[40])
{
    if (!mistral_family(f)) {
        char hex[33];
        request_id_random(hex);
        snprintf(id, 40, "call_%.24s", hex);
        return;
    }
    static const char an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int n = 0;
    while (n < MI_ID_LEN) {
        char hex[33];
        request_id_random(hex);
        for (int i = 0; i < 32 && n < MI_ID_LEN; i += 2) {
            unsigned v = (unsigned)strtoul((char[]){hex[i], hex[i + 1], 0}, NULL, 16);
            if (v < 248) /* 4 * 62: every character equally likely */
                id[n++] = an[v % 62];
        }
    }
    id[n] = 0;
}

/* The record of the call whose block is being read: the open one, else a new one (NULL: out of
 * memory). */
static struct tool_call *call_record(struct tool_parser *p, const char *name, size_t name_len)
{
    if (p->open >= 0)
        return &p->calls[p->open];
    if (p->n_calls == p->cap_calls) {
        int cap = p->cap_calls ? 2 * p->cap_calls : 4;
        struct tool_call *c = realloc(p->calls, sizeof *c * (size_t)cap);
        if (!c)
            return NULL;
        p->calls = c;
        p->cap_calls = cap;
    }
    struct tool_call *c = &p->calls[p->n_calls];
    *c = (struct tool_call){0};
    call_id_new(p->format, c->id);
    if (!(c->name = strndup(name, name_len)))
        return NULL;
    p->open = p->n_calls++;
    return c;
}

/* The open call's arguments are now args[0..len). false: out of memory. */
static bool set_args(struct tool_call *c, const char *args, size_t len)
{
    ll_buf_clear(&c->args);
    return ll_buf_append(&c->args, args, len);
}

/* The call block read ends here: its call (the open one, or a new one) is complete. */
static bool finish_call(struct tool_parser *p, const char *name, const char *args, size_t len)
{
    struct tool_call *c = call_record(p, name, strlen(name));
    if (!c || !set_args(c, args, len))
        return false;
    if (!c->started && strcmp(c->name, name)) { /* as parsed (escapes read) */
        char *nm = strdup(name);
        if (!nm)
            return false;
        free(c->name);
        c->name = nm;
    }
    c->done = true;
    p->open = -1;
    p->after_call = true;
    ll_buf_clear(&p->ws); /* whitespace before a call is dropped */
    return true;
}

/* The open call's block is not a call after all: its record goes, unless it was handed out
 * (then it ends as it is, and the rest of its block is dropped: the grammar does not let a
 * started call go wrong, so this is an answer cut inside one). Returns whether it was handed
 * out. */
static bool drop_open(struct tool_parser *p)
{
    if (p->open < 0)
        return false;
    struct tool_call *c = &p->calls[p->open];
    p->open = -1;
    if (c->started) {
        c->done = c->cut = true;
        return true;
    }
    free(c->name);
    ll_buf_free(&c->args);
    p->n_calls--;
    return false;
}

/* The length of the JSON object at s (which starts with '{'), braces counted outside strings;
 * 0 when it is not complete yet. */
static size_t json_end(const char *s, size_t n)
{
    int depth = 0;
    bool str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

/* What the held text of a call block holds so far. */
enum block { B_WAIT, B_CALL, B_TEXT };

/* Whether s[at..n) starts with pat: 1 yes, 0 not yet decidable (a prefix of it), -1 no. */
static int starts(const char *s, size_t n, size_t at, const char *pat)
{
    size_t m = strlen(pat), have = n - at;
    if (have >= m)
        return memcmp(s + at, pat, m) ? -1 : 1;
    return memcmp(s + at, pat, have) ? -1 : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t at)
{
    while (at < n && is_ws(s[at]))
        at++;
    return at;
}

/* The head of a hermes or llama3_json call's JSON as the grammar writes it: ws '{' ws "name" ws
 * ':' ws "NAME" ws ',' ws KEY ws ':' ws, then the arguments' '{' (KEY: args_key). 1: found
 * (*name, *name_len: the name's text between its quotes; *args: where the arguments start), 0:
 * not yet, -1: the text is not in this form. */
static int json_head(enum tool_format f, const char *s, size_t n, const char **name,
                     size_t *name_len, size_t *args)
{
    const char *const parts[] = {"{", "\"name\"", ":", NULL, ",", args_key(f), ":"};
    size_t at = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        at = skip_ws(s, n, at);
        if (at == n)
            return 0;
        if (!parts[i]) { /* the name, a JSON string */
            if (s[at] != '"')
                return -1;
            size_t e = at + 1;
            while (e < n && s[e] != '"')
                e += s[e] == '\\' ? 2 : 1;
            if (e >= n)
                return 0;
            *name = s + at + 1;
            *name_len = e - at - 1;
            at = e + 1;
            continue;
        }
        int m = starts(s, n, at, parts[i]);
        if (m <= 0)
            return m;
        at += strlen(parts[i]);
    }
    at = skip_ws(s, n, at);
    if (at == n)
        return 0;
    if (s[at] != '{')
        return -1;
    *args = at;
    return 1;
}

/* {"name": ..., "arguments": {...}} (a hermes block's JSON text; "parameters" for llama3_json).
 * The arguments are the model's text when the block is in the grammar's form; else (another
 * order, the other key, arguments given as a JSON string) the parsed object written
 * compactly. */
static bool parse_json_call(struct tool_parser *p, const char *s, size_t n)
{
    char *t = trimmed(s, n);
    cJSON *v = NULL;
    struct ll_err err = {0};
    bool ok = false;
    if (t && ll_json_parse(&v, t, strlen(t), "tool call", &err) == LL_OK && cJSON_IsObject(v)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(v, "name");
        const char *key = p->format == TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
        const char *other = p->format == TOOL_FORMAT_LLAMA3 ? "arguments" : "parameters";
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(v, key);
        if (!args)
            args = cJSON_GetObjectItemCaseSensitive(v, other);
        cJSON *parsed = NULL;
        if (cJSON_IsString(args) && ll_json_parse(&parsed, args->valuestring,
                                                  strlen(args->valuestring), "arguments",
                                                  &err) == LL_OK)
            args = parsed;
        const char *nm;
        size_t nm_len, at;
        if (cJSON_IsString(name) && cJSON_IsObject(args) && !parsed &&
            json_head(p->format, t, strlen(t), &nm, &nm_len, &at) > 0) {
            ok = finish_call(p, name->valuestring, t + at, json_end(t + at, strlen(t) - at)) ||
                 (p->failed = true, false);
        } else if (cJSON_IsString(name) && (!args || cJSON_IsObject(args))) {
            char *text = args ? cJSON_PrintUnformatted(args) : strdup("{}");
            ok = (text && finish_call(p, name->valuestring, text, strlen(text))) ||
                 (p->failed = true, false);
            free(text);
        }
        cJSON_Delete(parsed);
    }
    cJSON_Delete(v);
    free(t);
    return ok;
}

/* A hermes block after "<tool_call>": ws {json} ws "</tool_call>". *used: bytes of a call. */
static enum block hermes_block(struct tool_parser *p, const char *s, size_t n, size_t *used)
{
    size_t a = skip_ws(s, n, 0);
    if (a == n)
        return B_WAIT;
    if (s[a] != '{')
        return B_TEXT;
    size_t len = json_end(s + a, n - a);
    if (!len)
        return B_WAIT;
    size_t at = skip_ws(s, n, a + len);
    int m = starts(s, n, at, H_CLOSE);
    if (m <= 0)
        return m == 0 ? B_WAIT : B_TEXT;
    if (!parse_json_call(p, s + a, len))
        return B_TEXT;
    *used = at + strlen(H_CLOSE);
    return B_CALL;
}

/* The head of a deepseek call at s: "<｜tool▁call▁begin｜>" TYPE "<｜tool▁sep｜>" NAME "\n", the
 * fence "```json\n" (optional), ws, then the arguments' '{'. B_CALL when found (*name,
 * *name_len, *args: where the arguments start, *fenced), else B_WAIT or B_TEXT. */
static enum block deepseek_head(const char *s, size_t n, const char **name, size_t *name_len,
                                size_t *args, bool *fenced)
{
    /* The type ("function") has no '<' and at most DS_MAX_TYPE bytes, the name at most
     * DS_MAX_NAME: the separator and the newline are looked for only that far, so that the
     * answer does not depend on how much text has come (a call without them is text, however
     * the text was split into pieces) and a malformed call does not swallow the next one. */
    size_t at = strlen(DS_CALL_OPEN);
    size_t window = n - at < DS_MAX_TYPE + 1 ? n - at : DS_MAX_TYPE + 1;
    const char *lt = memchr(s + at, '<', window);
    if (!lt)
        return window == DS_MAX_TYPE + 1 ? B_TEXT : B_WAIT;
    int m = starts(s, n, (size_t)(lt - s), DS_SEP);
    if (m <= 0)
        return m == 0 ? B_WAIT : B_TEXT;
    *name = lt + strlen(DS_SEP);
    size_t have = (size_t)(s + n - *name);
    const char *nl = memchr(*name, '\n', have < DS_MAX_NAME + 1 ? have : DS_MAX_NAME + 1);
    if (!nl)
        return have >= DS_MAX_NAME + 1 ? B_TEXT : B_WAIT;
    *name_len = (size_t)(nl - *name);
    at = (size_t)(nl + 1 - s);
    *fenced = false;
    int f = starts(s, n, at, "```");
    if (f == 0)
        return B_WAIT;
    if (f > 0) {
        const char *eol = memchr(s + at, '\n', n - at);
        if (!eol)
            return B_WAIT;
        at = (size_t)(eol + 1 - s);
        *fenced = true;
    }
    at = skip_ws(s, n, at);
    if (at == n)
        return B_WAIT;
    if (s[at] != '{')
        return B_TEXT;
    *args = at;
    return B_CALL;
}

/* The head of a mistral_args call at s (the text after its [TOOL_CALLS]): NAME "[ARGS]", ws,
 * then the arguments' '{'. B_CALL when found (*name, *name_len, *args: where the arguments
 * start), else B_WAIT or B_TEXT. */
static enum block mistral_args_head(const char *s, size_t n, const char **name,
                                    size_t *name_len, size_t *args)
{
    /* The name ends at its first byte that cannot be in a name, and is looked at no further
     * than MA_MAX_NAME bytes: as in deepseek_head, the answer does not depend on how the text
     * was split, and a malformed call does not swallow the next one. */
    size_t at = 0;
    while (at < n && at <= MA_MAX_NAME &&
           ((s[at] >= 'a' && s[at] <= 'z') || (s[at] >= 'A' && s[at] <= 'Z') ||
            (s[at] >= '0' && s[at] <= '9') || s[at] == '_' || s[at] == '-' || s[at] == '.'))
        at++;
    if (at > MA_MAX_NAME)
        return B_TEXT;
    int m = starts(s, n, at, MA_ARGS);
    if (m <= 0)
        return m == 0 ? B_WAIT : B_TEXT;
    if (at == 0)
        return B_TEXT; /* no name */
    *name = s;
    *name_len = at;
    at = skip_ws(s, n, at + strlen(MA_ARGS));
    if (at == n)
        return B_WAIT;
    if (s[at] != '{')
        return B_TEXT;
    *args = at;
    return B_CALL;
}

/* A deepseek call at s: its head, {json}, "\n```" (when fenced) and "<｜tool▁call▁end｜>". */
static enum block deepseek_call(struct tool_parser *p, const char *s, size_t n, size_t *used)
{
    const char *name;
    size_t name_len, args;
    bool fenced;
    enum block b = deepseek_head(s, n, &name, &name_len, &args, &fenced);
    if (b != B_CALL)
        return b;
    size_t len = json_end(s + args, n - args);
    if (!len)
        return B_WAIT;
    size_t at = skip_ws(s, n, args + len);
    int m;
    if (fenced) {
        m = starts(s, n, at, "```");
        if (m <= 0)
            return m == 0 ? B_WAIT : B_TEXT;
        at = skip_ws(s, n, at + 3);
    }
    m = starts(s, n, at, DS_CALL_CLOSE);
    if (m <= 0)
        return m == 0 ? B_WAIT : B_TEXT;
    char *nm = trimmed(name, name_len);
    cJSON *v = NULL;
    struct ll_err err = {0};
    bool ok = false;
    if (nm && nm[0] && ll_json_parse(&v, s + args, len, "arguments", &err) == LL_OK &&
        cJSON_IsObject(v))
        ok = finish_call(p, nm, s + args, len) || (p->failed = true, false);
    cJSON_Delete(v);
    free(nm);
    if (!ok)
        return B_TEXT;
    *used = at + strlen(DS_CALL_CLOSE);
    return B_CALL;
}

/* The call block held so far from byte `from` of the held text, while it is not complete: once
 * its name and the start of its arguments show, its call is open with the arguments that came
 * (every byte after the arguments' '{' belongs to them until their '}'). */
static void block_progress(struct tool_parser *p, size_t from)
{
    const char *s = (p->hold.data ? p->hold.data : "") + from, *name;
    size_t n = p->hold.len - from, name_len, args;
    bool found;
    bool json = p->format != TOOL_FORMAT_DEEPSEEK && p->format != TOOL_FORMAT_MISTRAL_ARGS;
    if (json) {
        found = json_head(p->format, s, n, &name, &name_len, &args) > 0;
    } else if (p->format == TOOL_FORMAT_MISTRAL_ARGS) {
        found = mistral_args_head(s, n, &name, &name_len, &args) == B_CALL;
    } else {
        size_t a = skip_ws(s, n, 0);
        bool fenced;
        found = starts(s, n, a, DS_CALL_OPEN) > 0 &&
                deepseek_head(s + a, n - a, &name, &name_len, &args, &fenced) == B_CALL;
        if (found)
            args += a;
    }
    if (!found)
        return;
    /* the name as the complete block will read it: a JSON string's value (hermes,
     * llama3_json, mistral), trimmed (deepseek; a mistral_args name has no white space) */
    char *nm = NULL;
    if (p->open < 0 && json) {
        cJSON *v = NULL;
        struct ll_err err = {0};
        if (ll_json_parse(&v, name - 1, name_len + 2, "name", &err) == LL_OK &&
            cJSON_IsString(v))
            nm = strdup(v->valuestring);
        cJSON_Delete(v);
        if (!nm)
            return; /* not a name after all: the complete block decides */
    } else if (p->open < 0) {
        nm = trimmed(name, name_len);
        if (nm && !nm[0]) { /* no name: not a call (the complete block decides) */
            free(nm);
            return;
        }
    }
    size_t len = json_end(s + args, n - args);
    struct tool_call *c = p->open >= 0 || nm ? call_record(p, nm, nm ? strlen(nm) : 0) : NULL;
    if (!c || !set_args(c, s + args, len ? len : n - args))
        p->failed = true;
    free(nm);
}

/* llama3_json: the held text from its first call on. An answer whose first byte after white
 * space is not '{' is text to its end; else each JSON object is a call, and ';' between calls
 * is dropped; text after the calls, or an object that is not a call, is text from there on. */
static void llama3_feed(struct tool_parser *p, bool final, struct ll_buf *content)
{
    struct ll_buf *h = &p->hold;
    for (;;) {
        const char *s = h->data ? h->data : "";
        size_t n = h->len, a = skip_ws(s, n, 0);
        if (p->state == P_TEXT) {
            release(p, s, n, content);
            consume(h, n);
            return;
        }
        if (p->state == P_OUT || p->state == P_SEP) { /* a call, or text, starts here */
            if (a < n && p->state == P_SEP && s[a] == ';') {
                consume(h, a + 1);
                p->state = P_OUT;
                continue;
            }
            if (a == n) { /* white space so far: undecided */
                if (final) {
                    release(p, s, n, content);
                    consume(h, n);
                }
                return;
            }
            p->state = s[a] == '{' ? P_IN : P_TEXT;
            continue;
        }
        size_t len = json_end(s + a, n - a);
        if (len && parse_json_call(p, s + a, len)) {
            consume(h, a + len);
            p->state = P_SEP;
            continue;
        }
        if ((len || final) && drop_open(p)) { /* a call handed out ends here */
            consume(h, h->len);
            p->state = P_TEXT;
            p->after_call = true;
            return;
        }
        if (len || final) { /* not a call: text from here */
            p->state = P_TEXT;
            continue;
        }
        block_progress(p, 0);
        return;
    }
}

/* mistral, granite: text, then the marker ("[TOOL_CALLS]", "<|tool_call|>") and a JSON array of
 * calls. The marker never goes to the content (it is a special token, in the text only for this
 * parser); an array that does not
 * open, or an element that is not a call, is text from there on (searched for another marker),
 * its '[' or ',' included; the array ending without its ']' ends the calls. */
static void array_feed(struct tool_parser *p, bool final, struct ll_buf *content)
{
    struct ll_buf *h = &p->hold;
    const char *mark = array_mark(p->format);
    for (;;) {
        const char *s = h->data ? h->data : "";
        size_t n = h->len, a = skip_ws(s, n, 0);
        if (p->state == P_OUT) {
            const char *m = find(s, n, mark);
            if (m) {
                release(p, s, (size_t)(m - s), content);
                consume(h, (size_t)(m - s) + strlen(mark));
                p->state = P_IN;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(s, n, mark);
            release(p, s, n - keep, content);
            consume(h, n - keep);
            return;
        }
        if (a == n) { /* white space so far */
            if (!final)
                return;
            p->state = P_OUT;
            continue;
        }
        if (p->state == P_IN) { /* after the marker: the array's '[' */
            p->state = s[a] == '[' ? P_ARRAY : P_OUT;
            continue;
        }
        if (p->state == P_SEP) { /* after a call: ',' and the next, or ']' */
            if (s[a] == ']') {
                consume(h, a + 1);
                p->state = P_OUT;
            } else {
                p->state = s[a] == ',' ? P_ARRAY : P_OUT;
            }
            continue;
        }
        /* P_ARRAY: s[a] is the '[' or ',' before a call */
        size_t b = skip_ws(s, n, a + 1);
        if (b == n) {
            if (!final)
                return;
            p->state = P_OUT;
            continue;
        }
        if (s[b] == ']') { /* an empty array, or a ',' before the ']' */
            consume(h, b + 1);
            p->state = P_OUT;
            p->after_call = p->n_calls > 0;
            continue;
        }
        size_t len = s[b] == '{' ? json_end(s + b, n - b) : 0;
        if (len && parse_json_call(p, s + b, len)) {
            consume(h, b + len);
            p->state = P_SEP;
            continue;
        }
        if ((s[b] != '{' || len || final) && drop_open(p)) { /* a call handed out ends here */
            consume(h, h->len);
            p->state = P_OUT;
            p->after_call = true;
            return;
        }
        if (s[b] != '{' || len || final) { /* not a call: text from the '[' or ',' */
            p->state = P_OUT;
            continue;
        }
        block_progress(p, b);
        return;
    }
}

/* mistral_args: text, then calls, each "[TOOL_CALLS]" NAME "[ARGS]" {arguments}. Neither
 * marker ever goes to the content (both are special tokens, in the text only for this parser);
 * a call that goes wrong (no [ARGS] after an identifier-like name, arguments that are not a
 * JSON object) is text from its name on, searched for another marker. */
static void mistral_args_feed(struct tool_parser *p, bool final, struct ll_buf *content)
{
    struct ll_buf *h = &p->hold;
    for (;;) {
        const char *s = h->data ? h->data : "";
        size_t n = h->len;
        if (p->state == P_OUT) {
            const char *m = find(s, n, MI_MARK), *a = find(s, n, MA_ARGS);
            if (a && (!m || a < m)) { /* a stray [ARGS]: dropped like the marker */
                release(p, s, (size_t)(a - s), content);
                consume(h, (size_t)(a - s) + strlen(MA_ARGS));
                continue;
            }
            if (m) {
                release(p, s, (size_t)(m - s), content);
                consume(h, (size_t)(m - s) + strlen(MI_MARK));
                p->state = P_IN;
                continue;
            }
            size_t keep = 0;
            if (!final) {
                size_t k1 = partial_suffix(s, n, MI_MARK), k2 = partial_suffix(s, n, MA_ARGS);
                keep = k1 > k2 ? k1 : k2;
            }
            release(p, s, n - keep, content);
            consume(h, n - keep);
            return;
        }
        /* P_IN: after a [TOOL_CALLS] */
        const char *name;
        size_t name_len, args;
        enum block b = mistral_args_head(s, n, &name, &name_len, &args);
        size_t len = b == B_CALL ? json_end(s + args, n - args) : 0;
        if (b == B_CALL && len) {
            char *nm = strndup(name, name_len);
            cJSON *v = NULL;
            struct ll_err err = {0};
            bool ok = false;
            if (!nm)
                p->failed = true;
            else if (ll_json_parse(&v, s + args, len, "arguments", &err) == LL_OK &&
                     cJSON_IsObject(v))
                ok = finish_call(p, nm, s + args, len) || (p->failed = true, false);
            cJSON_Delete(v);
            free(nm);
            if (ok) {
                consume(h, args + len);
                p->state = P_OUT;
                continue;
            }
            b = B_TEXT;
        } else if (b == B_CALL) {
            b = B_WAIT;
        }
        if ((b == B_TEXT || final) && drop_open(p)) { /* a call handed out ends here */
            consume(h, h->len);
            p->state = P_OUT;
            p->after_call = true;
            return;
        }
        if (b == B_TEXT || final) { /* not a call: text from its name */
            p->state = P_OUT;
            continue;
        }
        block_progress(p, 0);
        return;
    }
}

void tool_parser_feed(struct tool_parser *p, const char *text, size_t len, bool final,
                      struct ll_buf *content)
{
    struct ll_buf *h = &p->hold;
    ll_buf_append(h, text, len);
    bool hermes = p->format == TOOL_FORMAT_HERMES;
    bool blocks = hermes || p->format == TOOL_FORMAT_DEEPSEEK;
    if (p->format == TOOL_FORMAT_LLAMA3)
        llama3_feed(p, final, content);
    else if (array_mark(p->format))
        array_feed(p, final, content);
    else if (p->format == TOOL_FORMAT_MISTRAL_ARGS)
        mistral_args_feed(p, final, content);
    for (; blocks;) {
        const char *s = h->data ? h->data : "";
        size_t n = h->len;
        if (p->state == P_OUT) {
            const char *m = find(s, n, hermes ? H_OPEN : DS_BLOCK_OPEN);
            size_t skip = m ? strlen(hermes ? H_OPEN : DS_BLOCK_OPEN) : 0;
            const char *m2 = hermes ? NULL : find(s, n, DS_CALL_OPEN); /* a block without its
                                                                          opening marker */
            if (m2 && (!m || m2 < m)) {
                m = m2;
                skip = 0;
            }
            if (m) {
                release(p, s, (size_t)(m - s), content);
                consume(h, (size_t)(m - s) + skip);
                p->state = skip || hermes ? P_IN : P_IN_BARE;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(s, n, hermes ? H_OPEN : DS_BLOCK_OPEN);
            if (!hermes && !final) {
                size_t k2 = partial_suffix(s, n, DS_CALL_OPEN);
                keep = k2 > keep ? k2 : keep;
            }
            release(p, s, n - keep, content);
            consume(h, n - keep);
            break;
        }
        size_t used = 0;
        enum block b;
        if (hermes) {
            b = hermes_block(p, s, n, &used);
            if (b == B_CALL) {
                consume(h, used);
                p->state = P_OUT;
                continue;
            }
        } else {
            size_t a = skip_ws(s, n, 0);
            int close = a < n ? starts(s, n, a, DS_BLOCK_CLOSE) : 0;
            int call = a < n ? starts(s, n, a, DS_CALL_OPEN) : 0;
            if (close > 0) {
                consume(h, a + strlen(DS_BLOCK_CLOSE));
                p->state = P_OUT;
                continue;
            }
            if (call > 0) {
                b = deepseek_call(p, s + a, n - a, &used);
                if (b == B_CALL) {
                    consume(h, a + used);
                    continue;
                }
            } else {
                b = close < 0 && call < 0 ? B_TEXT : B_WAIT;
                if (b == B_TEXT && p->n_calls > 0) { /* the block ended without its marker */
                    p->state = P_OUT;
                    continue;
                }
            }
        }
        if ((b == B_TEXT || final) && drop_open(p)) { /* a call handed out ends here */
            consume(h, h->len);
            p->state = P_OUT;
            p->after_call = true;
            break;
        }
        if (b == B_TEXT || final) { /* not a call after all: the marker and the text */
            if (hermes)
                release(p, H_OPEN, strlen(H_OPEN), content);
            else if (p->state == P_IN && !p->after_call)
                release(p, DS_BLOCK_OPEN, strlen(DS_BLOCK_OPEN), content);
            p->state = P_OUT;
            if (!final || b == B_TEXT) {
                /* re-scan the rest as text, past its first byte (no loop on the same marker) */
                size_t one = n ? 1 : 0;
                if (!hermes && n && starts(s, n, skip_ws(s, n, 0), DS_CALL_OPEN) > 0)
                    one = skip_ws(s, n, 0) + strlen(DS_CALL_OPEN);
                release(p, s, one, content);
                consume(h, one);
                if (n)
                    continue;
            }
            release(p, s, n, content);
            consume(h, n);
            break;
        }
        block_progress(p, 0);
        break;
    }
    if (final && p->n_calls == 0) {
        ll_buf_append(content, p->ws.data, p->ws.len);
        ll_buf_clear(&p->ws);
    }
    if (h->failed || content->failed || p->ws.failed)
        p->failed = true;
}
