/*
 * api.c: the parts of the public API (include/llaisys.h) that belong to no handle: version,
 * status names, the thread-local last-error message, freeing, and the mapping of the
 * project's ll_status codes to the public ones. Any thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "api_impl.h"

/* The message of the last failing call on this thread. */
static _Thread_local char last_error[512];

int32_t llaisys_api_version(void) { return LLAISYS_API_VERSION; }

const char *llaisys_status_str(int32_t status)
{
    switch (status) {
    case LLAISYS_OK:
        return "ok";
    case LLAISYS_NO_KV_ROOM:
        return "no KV room";
    case LLAISYS_ABORTED:
        return "aborted";
    case LLAISYS_EMPTY_RANGE:
        return "empty range";
    case LLAISYS_ERR_INVALID_ARG:
        return "invalid argument";
    case LLAISYS_ERR_INVALID_SEQ:
        return "invalid sequence";
    case LLAISYS_ERR_INVALID_POS:
        return "invalid position";
    case LLAISYS_ERR_INVALID_TOKEN:
        return "invalid token";
    case LLAISYS_ERR_UNSUPPORTED:
        return "unsupported";
    case LLAISYS_ERR_BUSY:
        return "busy";
    case LLAISYS_ERR_TOO_LONG:
        return "too long";
    case LLAISYS_ERR_OVERLOADED:
        return "overloaded";
    case LLAISYS_ERR_IO:
        return "I/O error";
    case LLAISYS_ERR_MODEL:
        return "model error";
    case LLAISYS_ERR_NO_MEMORY:
        return "out of memory";
    case LLAISYS_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

const char *llaisys_last_error(void) { return last_error; }

void llaisys_free(void *p) { free(p); }

int32_t api_fail(int32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int32_t api_code(enum ll_status s)
{
    switch (s) {
    case LL_OK:
        return LLAISYS_OK;
    case LL_ENOMEM:
        return LLAISYS_ERR_NO_MEMORY;
    case LL_EIO:
        return LLAISYS_ERR_IO;
    case LL_EINVAL:
    case LL_ETYPE:
    case LL_EJSON:
    case LL_EUTF8:
    case LL_ETEMPLATE:
    case LL_ENOTFOUND:
        return LLAISYS_ERR_INVALID_ARG;
    case LL_EFORMAT:
    case LL_ETOKENIZER:
    case LL_EMODEL:
        return LLAISYS_ERR_MODEL;
    case LL_EUNSUPPORTED:
        return LLAISYS_ERR_UNSUPPORTED;
    case LL_ETOOLONG:
        return LLAISYS_ERR_TOO_LONG;
    case LL_EOVERLOADED:
        return LLAISYS_ERR_OVERLOADED;
    case LL_EABORTED:
        return LLAISYS_ABORTED;
    case LL_EAUTH:
    case LL_EBODYLIMIT:
    case LL_EMETHOD:
    case LL_EUNAVAILABLE:
    case LL_STATUS_COUNT:
        break;
    }
    return LLAISYS_ERR_INTERNAL;
}

int32_t api_status(enum ll_status s, const struct ll_err *err)
{
    int32_t c = api_code(s);
    if (c < 0)
        api_fail(c, "%s", err && err->msg[0] ? err->msg : ll_status_str(s));
    return c;
}
