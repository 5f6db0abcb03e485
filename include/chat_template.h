/*
 * chat_template.h: Hugging Face chat templates (a Jinja subset) compiled once, rendered per
 * request.
 *
 * A compiled template is immutable: any number of threads may render it at once; each render
 * allocates its own state and frees it before returning. Renders match @huggingface/jinja
 * (the renderer of the project's fixtures) with trim_blocks and lstrip_blocks on, as Hugging
 * Face renders chat templates. Every failure is an error code with a message naming the
 * problem and, for template errors, its line and column; runaway templates stop at limits.
 * Globals a template may call: range, namespace, dict, raise_exception(message), and
 * strftime_now(format), the local time at the render formatted by C strftime (as transformers
 * and llama.cpp give it; Llama 3.x dates its system header with it when the context has no
 * date_string).
 */
#ifndef LLAISYS_CHAT_TEMPLATE_H
#define LLAISYS_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

struct cJSON;
struct chat_template;

/* Bounds on one render; exceeding one is LL_ETOOLONG. */
struct chat_template_limits {
    size_t max_output;  /* bytes of rendered text (default 32 MiB) */
    size_t max_memory;  /* bytes of live template values (default 256 MiB) */
    uint64_t max_steps; /* loop iterations + macro calls + range() items (default 10 million) */
    int max_call_depth; /* nested macro calls (default 64) */
};

/* Fill *l with the defaults above. */
void chat_template_default_limits(struct chat_template_limits *l);

/* Compile template source (UTF-8, NUL-terminated). On LL_OK *out is owned by the caller
 * (chat_template_free). Errors: LL_ETEMPLATE (syntax: unknown tag/filter/test, unterminated or
 * mismatched block, string or expression, with line:column), LL_ENOMEM, LL_EINVAL (NULL). */
enum ll_status chat_template_compile(struct chat_template **out, const char *source,
                                     struct ll_err *err);

/* Render with the variables of `context` (a JSON object: messages, tools,
 * add_generation_prompt and any extra keys; NULL for none) plus bos_token/eos_token when bos/eos
 * are not NULL (they override keys of the same name in context). On LL_OK *out_text is a
 * malloc'd NUL-terminated string the caller frees. Errors: LL_ETEMPLATE (runtime error or
 * raise_exception(msg), the message carries msg and the position), LL_ETOOLONG (a default
 * limit was hit), LL_EINVAL (context not an object), LL_ENOMEM. */
enum ll_status chat_template_render(const struct chat_template *t, const struct cJSON *context,
                                    const char *bos, const char *eos, char **out_text,
                                    struct ll_err *err);

/* chat_template_render with explicit limits (NULL: defaults) and the output length (out_len may
 * be NULL; the text may contain NUL bytes that came from the context). Same errors. */
enum ll_status chat_template_render_ex(const struct chat_template *t,
                                       const struct cJSON *context, const char *bos,
                                       const char *eos, const struct chat_template_limits *limits,
                                       char **out_text, size_t *out_len, struct ll_err *err);

/* Free a compiled template (NULL is fine). */
void chat_template_free(struct chat_template *t);

/* The source text the template was compiled from (owned by t). */
const char *chat_template_source(const struct chat_template *t);

/* Load the chat template of a Hugging Face model directory: tokenizer_config.json's
 * "chat_template" (a string, or a list of {name, template} from which "default" is taken), else
 * a chat_template.jinja file beside it; the file is read by tokenizer_config_read (tokenizer.h).
 * *bos / *eos receive its bos_token / eos_token (the same strings tokenizer_bos_token /
 * tokenizer_eos_token give) as malloc'd strings, or NULL when absent; either pointer may be NULL
 * if not wanted. Errors: LL_EIO (no tokenizer_config.json, or unreadable), LL_EJSON, LL_EFORMAT
 * (not an object, a special token of the wrong type, no or malformed chat_template),
 * LL_ETEMPLATE (compile error, prefixed with the file), LL_ENOMEM. */
enum ll_status chat_template_load_model(struct chat_template **out, char **bos, char **eos,
                                        const char *model_dir, struct ll_err *err);

#endif
