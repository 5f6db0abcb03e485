/*
 * tool_calls.h: function calling. How the model writes calls (the tool-call format of its chat
 * template), how the tools reach the prompt, the grammar that makes calls well-formed, and the
 * streaming parser that turns the model's text into OpenAI tool_calls.
 *
 * Formats:
 *   hermes       Qwen2.5 / Hermes: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>,
 *                one block per call.
 *   deepseek_v3  what the DeepSeek-R1 distill template renders for an assistant's tool calls:
 *                <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n
 *                {...}\n```<｜tool▁call▁end｜> (calls separated by "\n") <｜tool▁calls▁end｜>.
 *   llama3_json  Llama 3.1 / 3.2 / 3.3 (their templates ask for it): the answer is the calls
 *                alone, each a JSON object {"name": NAME, "parameters": {...}}, separated by
 *                ";"; an answer that does not start with '{' is text.
 *   mistral      Mistral-Nemo and the other Mistral templates of [TOOL_CALLS]: text, then
 *                [TOOL_CALLS][{"name": NAME, "arguments": {...}}, ...] (a JSON array); the model
 *                ends with its EOS. [TOOL_CALLS] is a special token: the server keeps it in the
 *                text for the parser (tools_markers), which never puts it into the content.
 *   mistral_args Mistral's newer spelling (tokenizer version 11 on: Mistral-Small 3.2,
 *                Devstral, Magistral): text, then [TOOL_CALLS]NAME[ARGS]{...} per call, calls
 *                back to back; EOS. NAME: letters, digits, '_', '-', '.' (at most 128 bytes).
 *                [ARGS] is a special token too, kept like [TOOL_CALLS]; neither is ever
 *                content. [CALL_ID] (which the model does not write here) is not read.
 *                A sibling of mistral rather than a flag on it: the parser, the grammar, the
 *                markers and the fallback prompt differ with the spelling, and what the two
 *                share (call ids, the history's ids) is decided in one place for both.
 *   granite      IBM Granite 3.x: text, then <|tool_call|>[{"name": NAME, "arguments": {...}},
 *                ...] (a JSON array, as mistral's after its marker; the keys in either order);
 *                the model ends with its EOS. <|tool_call|> is a special token, kept in the
 *                text for the parser like [TOOL_CALLS].
 * The server picks one at start-up (tools_choose): --tool-parser, else the template's text
 * (<|tool_call|> → granite, <tool_call> → hermes, tool▁call▁begin → deepseek_v3, [TOOL_CALLS] and [ARGS] →
 * mistral_args, [TOOL_CALLS] alone → mistral, <|python_tag|> or a literal "parameters": key →
 * llama3_json), else hermes.
 *
 * Prompt: tools go to the template as the variable `tools` (Hugging Face's convention:
 * [{"type": "function", "function": {...}}]) when the template renders them (found at start-up
 * by rendering a probe tool); otherwise a fallback system prompt lists them and shows the
 * format (appended to the first system message, or a new one). History: an assistant's
 * tool_calls arguments are given to hermes, llama3_json and both mistral formats' templates as
 * JSON objects (Qwen's, Llama's and Mistral's templates write them with tojson) and to
 * deepseek_v3 ones as the JSON text; Mistral templates refuse call ids that are not 9
 * characters long, so for both mistral formats a longer id (tool_calls[].id and the tool
 * message's tool_call_id alike) keeps its last 9 characters, as vLLM does, and a shorter one
 * gets '0's in front. tool_choice "none" leaves the tools out of the prompt.
 *
 * Call ids: mistral and mistral_args: 9 random letters and digits (what their templates take
 * back); the others: "call_" + 24 random hex digits.
 *
 * Grammar: auto: free text, and from the start marker on, well-formed calls to the given
 * functions with arguments matching their parameter schemas (the text may end without any
 * call); required: calls from the first token; a named tool_choice: one call of that function;
 * parallel_tool_calls false: at most one call. A function without parameters takes any JSON
 * object; one whose schema uses a keyword the grammar cannot enforce is refused when "strict" is
 * true, else its arguments are any JSON object.
 *
 * Any thread: everything here is a pure function of its input, and a parser belongs to one
 * generation choice.
 */
#ifndef LLAISYS_TOOL_CALLS_H
#define LLAISYS_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "openai_request.h"

struct chat_template;
struct grammar;

enum tool_format {
    TOOL_FORMAT_NONE,     /* --tool-parser none: requests with tools are refused */
    TOOL_FORMAT_HERMES,
    TOOL_FORMAT_DEEPSEEK,
    TOOL_FORMAT_LLAMA3,
    TOOL_FORMAT_MISTRAL,
    TOOL_FORMAT_MISTRAL_ARGS,
    TOOL_FORMAT_GRANITE,
};

/* The server's choice. */
struct tool_setup {
    enum tool_format format;
    bool in_template;  /* the chat template renders `tools` itself */
    char why[128];     /* the choice and its reason, for the configuration print */
};

/* Choose the format (parser: "hermes", "deepseek_v3", "llama3_json", "mistral",
 * "mistral_args", "granite", "none", or NULL for detection) and find whether the template renders tools
 * (tmpl may be NULL). */
void tools_choose(struct tool_setup *t, const char *parser, const struct chat_template *tmpl,
                  const char *bos, const char *eos);

/* Whether a --tool-parser value is known. */
bool tools_parser_valid(const char *parser);

#define TOOLS_MAX_MARKERS 8
/* The marker texts of format f's calls into out (up to TOOLS_MAX_MARKERS); returns how many.
 * Where the tokenizer has one as a special token, the answer's text must keep that token for
 * the parser even when special tokens are skipped (engine_params.keep_ids). */
int tools_markers(enum tool_format f, const char **out);

/* Put the tools of r into the chat template variables ctx (see above): "tools", or the
 * fallback system prompt; tool call arguments in history as the format wants. tools may be
 * NULL (then only the history is adjusted). Returns LL_OK, LL_EUNSUPPORTED (tools given but
 * the server has no tool format) or LL_ENOMEM. */
enum ll_status tools_context(const struct tool_setup *t, const struct cJSON *tools,
                             enum oai_tool_choice choice, struct cJSON *ctx,
                             struct oai_error *e);

/* The grammar of r's tool calls (NULL in *out when r has no tools or tool_choice is none).
 * Returns LL_OK, LL_EUNSUPPORTED / LL_EINVAL (a strict function's schema the grammar cannot
 * enforce, naming it) or LL_ENOMEM. */
enum ll_status tools_grammar(const struct tool_setup *t, const struct oai_request *r,
                             struct grammar **out, struct oai_error *e);

/* One call, parsed or being parsed. */
struct tool_call {
    char id[40];        /* per format (see Call ids above) */
    char *name;
    struct ll_buf args; /* the arguments: the model's JSON text (of an object), so far */
    bool done;          /* its block has closed (or the answer ended inside it, once started) */
    bool cut;           /* done without its block closing: the answer ended inside it, or (text
                         * no grammar made) its block went wrong after it had started */
    bool started;       /* handed out (tool_parser_next): it stays a call */
    size_t sent;        /* bytes of args handed out */
};

/* The streaming parser of one choice's answer text. */
struct tool_parser {
    enum tool_format format;
    int state;              /* outside, or inside a call block */
    struct ll_buf hold;     /* text not released yet */
    struct ll_buf ws;       /* whitespace held after the text released so far */
    struct tool_call *calls;
    int n_calls, cap_calls;
    int open;               /* the call whose block is being read (-1: none) */
    int n_taken;            /* calls handed out whole (tool_parser_next) */
    bool after_call;        /* nothing but whitespace since the last call */
    bool failed;            /* out of memory */
};

void tool_parser_init(struct tool_parser *p, enum tool_format f);
void tool_parser_free(struct tool_parser *p);
/* Feed the next piece of the answer; the text that is not part of a call goes to *content
 * (appended). Whitespace next to calls is dropped. A call is known once its block shows its
 * name and the start of its arguments; its arguments then grow with each piece. final: nothing
 * more comes: a call block that never closed or does not parse is released as text, unless its
 * call was handed out (then it ends with the arguments that came: a stream cut by max_tokens). */
void tool_parser_feed(struct tool_parser *p, const char *text, size_t len, bool final,
                      struct ll_buf *content);

/* What tool_parser_next hands out: call `index`; start: its first piece (hand out its id and
 * name); args[0..len): the next piece of its arguments' text; done: they are complete. */
struct tool_piece {
    int index;
    bool start, done;
    const char *args;
    size_t len;
};
/* The next piece of the calls since the last one; false when there is none. The pieces of a
 * call concatenated are its arguments. */
bool tool_parser_next(struct tool_parser *p, struct tool_piece *out);

/* A call's arguments as a C string. */
static inline const char *tool_call_args(const struct tool_call *c)
{
    return c->args.data ? c->args.data : "";
}

#endif
