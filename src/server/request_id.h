/*
 * request_id.h: request ids: the client's X-Request-Id when it is safe to echo, else a fresh
 * random one; response ids (chatcmpl-…) use the same random hex. Any thread.
 */
#ifndef LLAISYS_REQUEST_ID_H
#define LLAISYS_REQUEST_ID_H

#include <stdbool.h>

/* Write a fresh random id of 32 lowercase hex digits and a NUL to out. */
void request_id_random(char out[33]);
/* Whether s is 1..128 characters of [A-Za-z0-9] and "-_.:/+=@" (safe in a header and a log). */
bool request_id_valid(const char *s);

#endif
