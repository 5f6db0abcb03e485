/*
 * reasoning.h: the markers around a reasoning model's thinking (DeepSeek-R1 style: the answer
 * follows "</think>"), and the one decision whether chat requests get the reasoning split. The
 * one place the markers are spelled: the engine's text split (text_split.c), their token ids
 * (engine.c, used by request.c) and the check whether a chat template opens the reasoning
 * (reasoning.c, for the server and the library) all take them from here.
 */
#ifndef LLAISYS_REASONING_H
#define LLAISYS_REASONING_H

#define LL_REASONING_OPEN "<think>"   /* opens the reasoning (text, and an added token) */
#define LL_REASONING_CLOSE "</think>" /* closes it; what follows is the answer */

#include <stdbool.h>
#include <stddef.h>

struct chat_template;
struct tokenizer;

/* Whether name is a --reasoning-parser value: "deepseek_r1" or "qwen3" (vLLM's names: the same
 * <think> ... </think> split, whoever opens it) or "none". */
bool reasoning_parser_valid(const char *name);

/* Whether chat requests split the reasoning off: forced ("deepseek_r1", "qwen3": on; "none":
 * off), else (forced NULL) on when the template t (may be NULL) puts "<think>" in its generation
 * prompt or the tokenizer (may be NULL) has both markers. why (may be NULL) gets the choice and its
 * reason, e.g. "auto: deepseek_r1 (the chat template opens <think>)". */
bool reasoning_choose(const char *forced, const struct chat_template *t, const char *bos,
                      const char *eos, const struct tokenizer *tok, char *why, size_t why_size);

#endif
