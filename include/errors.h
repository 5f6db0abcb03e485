/*
 * errors.h: the one list of every error llaisys can report.
 *
 * Each entry: identifier, default message, HTTP status, OpenAI `error.type`.
 * Functions that can fail on outside input return `enum ll_status` and, when given a
 * `struct ll_err *`, fill it with a message naming what was wrong (file, field, position).
 * Broken internal invariants are not errors: they hit LL_ASSERT (see util.h).
 */
#ifndef LLAISYS_ERRORS_H
#define LLAISYS_ERRORS_H

#include <stddef.h>

#define LL_STATUS_LIST(X)                                                                 \
    X(LL_OK,              "ok",                          200, "")                          \
    X(LL_ENOMEM,          "out of memory",               500, "server_error")             \
    X(LL_EIO,             "I/O error",                   500, "server_error")             \
    X(LL_EINVAL,          "invalid argument",            400, "invalid_request_error")    \
    X(LL_ETYPE,           "wrong type",                  400, "invalid_request_error")    \
    X(LL_EJSON,           "malformed JSON",              400, "invalid_request_error")    \
    X(LL_EFORMAT,         "malformed file",              500, "server_error")             \
    X(LL_EUTF8,           "invalid UTF-8",               400, "invalid_request_error")    \
    X(LL_ETEMPLATE,       "chat template error",         400, "invalid_request_error")    \
    X(LL_ETOKENIZER,      "tokenizer error",             500, "server_error")             \
    X(LL_EMODEL,          "model error",                 500, "server_error")             \
    X(LL_EUNSUPPORTED,    "not supported",               400, "invalid_request_error")    \
    X(LL_ETOOLONG,        "input too long",              400, "invalid_request_error")    \
    X(LL_ENOTFOUND,       "not found",                   404, "not_found_error")          \
    X(LL_EOVERLOADED,     "overloaded",                  429, "rate_limit_error")         \
    X(LL_EAUTH,           "invalid or missing API key",  401, "authentication_error")     \
    X(LL_EBODYLIMIT,      "request body too large",      413, "invalid_request_error")    \
    X(LL_EUNAVAILABLE,    "service unavailable",         503, "server_error")             \
    X(LL_EABORTED,        "aborted by the caller",       500, "server_error")             \
    X(LL_EMETHOD,         "method not allowed",          405, "invalid_request_error")

enum ll_status {
#define LL_X_ENUM(id, msg, http, type) id,
    LL_STATUS_LIST(LL_X_ENUM)
#undef LL_X_ENUM
    LL_STATUS_COUNT
};

/* An error with its detail. Owned by the caller, usually on the stack. */
struct ll_err {
    enum ll_status code;
    char msg[512]; /* human-readable, names the file/field/position */
};

/* Default message of a status ("ok", "out of memory", ...); never NULL. */
const char *ll_status_str(enum ll_status s);
/* HTTP status code for a status (200 for LL_OK). */
int ll_status_http(enum ll_status s);
/* OpenAI error.type for a status ("" for LL_OK). */
const char *ll_status_type(enum ll_status s);

/* Record an error: sets err->code and formats err->msg (err may be NULL). Returns code. */
enum ll_status ll_err_set(struct ll_err *err, enum ll_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with context ("tokenizer.json: " + msg). Returns err->code. */
enum ll_status ll_err_prefix(struct ll_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
