/* errors.c: tables behind errors.h and the helpers that fill a struct ll_err. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_msg[] = {
#define LL_X(id, msg, http, type) [id] = msg,
    LL_STATUS_LIST(LL_X)
#undef LL_X
};
static const int status_http[] = {
#define LL_X(id, msg, http, type) [id] = http,
    LL_STATUS_LIST(LL_X)
#undef LL_X
};
static const char *const status_type[] = {
#define LL_X(id, msg, http, type) [id] = type,
    LL_STATUS_LIST(LL_X)
#undef LL_X
};

const char *ll_status_str(enum ll_status s)
{
    return (unsigned)s < LL_STATUS_COUNT ? status_msg[s] : "unknown error";
}

int ll_status_http(enum ll_status s)
{
    return (unsigned)s < LL_STATUS_COUNT ? status_http[s] : 500;
}

const char *ll_status_type(enum ll_status s)
{
    return (unsigned)s < LL_STATUS_COUNT ? status_type[s] : "server_error";
}

enum ll_status ll_err_set(struct ll_err *err, enum ll_status code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

enum ll_status ll_err_prefix(struct ll_err *err, const char *fmt, ...)
{
    if (!err)
        return LL_OK;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    /* shift the old message right by the prefix length, truncating at the end */
    size_t hl = strnlen(head, sizeof err->msg - 1);
    memmove(err->msg + hl, err->msg, sizeof err->msg - 1 - hl);
    memcpy(err->msg, head, hl);
    err->msg[sizeof err->msg - 1] = '\0';
    return err->code;
}
