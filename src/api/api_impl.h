/*
 * api_impl.h: what the files of the public API (src/api, include/llaisys.h) share: the
 * thread-local last-error message and the mapping from the project's ll_status to the public
 * status codes. Internal: nothing outside src/api includes it.
 */
#ifndef LLAISYS_API_IMPL_H
#define LLAISYS_API_IMPL_H

#include <stdint.h>

#include "errors.h"
#include "llaisys.h"

/* Record msg as this thread's last error and return code (a negative llaisys_status). */
int32_t api_fail(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The public code of an ll_status (LL_OK → LLAISYS_OK), recording err's message when it is an
 * error. */
int32_t api_status(enum ll_status s, const struct ll_err *err);

/* The public code of an ll_status, without a message. */
int32_t api_code(enum ll_status s);

#endif
