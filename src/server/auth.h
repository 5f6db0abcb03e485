/*
 * auth.h: API keys: the "Authorization: Bearer KEY" check and key files.
 * auth_equal / auth_check: any thread (read-only options); auth_load_file: start-up.
 */
#ifndef LLAISYS_AUTH_H
#define LLAISYS_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "errors.h"
#include "server.h"

/* Whether a and b are equal, in time that depends only on their lengths. */
bool auth_equal(const char *a, size_t alen, const char *b, size_t blen);
/* Whether the Authorization header value (may be NULL) is "Bearer K" for one of the keys; true
 * when there are no keys. Every key is compared, whatever matches. */
bool auth_check(const struct server_opts *o, const char *authorization);
/* Which key the Authorization header value holds: its index in o->api_keys, 0 when there are
 * no keys (every caller is the same owner), -1 when none matches. Constant time as above. */
int auth_key_index(const struct server_opts *o, const char *authorization);
/* Append key to o->api_keys with budgets b (NULL: every budget from the defaults) and its
 * metrics name (b's, else "key-" + 8 hex digits of its hash). LL_OK or LL_ENOMEM. */
enum ll_status auth_add_key(struct server_opts *o, const char *key, const struct key_budget *b);
/* Append the keys of FILE to o: one per line, "KEY [name=NAME] [rpm=N] [tpm=N]
 * [concurrency=N]" (blank lines and lines starting with # skipped; NAME of letters, digits,
 * '.', '_', '-'; N >= 0, 0: unlimited). Returns LL_OK, LL_EIO, LL_EINVAL (no key in the file,
 * or "FILE:LINE: ..." naming what is wrong on that line) or LL_ENOMEM, with err set. */
enum ll_status auth_load_file(const char *path, struct server_opts *o, struct ll_err *err);

#endif
