/*
 * reasoning.h: the markers around a reasoning model's thinking (DeepSeek-R1 style: the answer
 * follows "</think>"). The one place they are spelled: the engine's text split (text_split.c),
 * their token ids (engine.c, used by request.c) and the server's check whether a chat template
 * opens the reasoning (server.c) all take them from here.
 */
#ifndef LLAISYS_REASONING_H
#define LLAISYS_REASONING_H

#define LL_REASONING_OPEN "<think>"   /* opens the reasoning (text, and an added token) */
#define LL_REASONING_CLOSE "</think>" /* closes it; what follows is the answer */

#endif
