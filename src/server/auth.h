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
/* Append the keys of FILE (one per line; blank lines and lines starting with # skipped) to
 * *keys (malloc'd array of malloc'd strings, *n of them). Returns LL_OK, LL_EIO, LL_EINVAL
 * (no key in the file) or LL_ENOMEM, with err set. */
enum ll_status auth_load_file(const char *path, char ***keys, int *n, struct ll_err *err);

#endif
