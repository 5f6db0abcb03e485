/*
 * json.h: reading JSON (through cJSON) and writing it (into an ll_buf), for every layer.
 *
 * ll_json_parse is the one place that calls cJSON's parser: cJSON records the position of its
 * last parse error in a process-wide variable written on every parse, so parses are serialised
 * here (a short lock) and the error position is taken from the parse end instead.
 * The getters read one member of an object and name it in their messages; JSON null reads as
 * absent. Writers escape strings for JSON (RFC 8259) and never produce invalid output. Any
 * thread (each call on its own objects).
 */
#ifndef LLAISYS_JSON_H
#define LLAISYS_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "errors.h"

struct cJSON;

/* Parse text[0..len) as one JSON value (whitespace around it allowed) into *out (free with
 * cJSON_Delete). Returns LL_OK, LL_ENOMEM, or LL_EJSON with
 * "WHAT: invalid JSON at line L, column C (byte offset B)", followed by ": at the end of the text
 * (truncated?)" or ": a control byte (0xXX)" where that is the case (raw bytes below 0x20 other
 * than tab, LF and CR are refused anywhere, as RFC 8259 says; cJSON alone would skip them as
 * whitespace); *out is NULL on error. */
enum ll_status ll_json_parse(struct cJSON **out, const char *text, size_t len, const char *what,
                             struct ll_err *err);

/* "a string", "a number", "a boolean", "an array", "an object" or "null". */
const char *ll_json_type_name(const struct cJSON *v);
/* The member key of obj; NULL when obj is not an object, the key is absent, or its value is
 * null. */
const struct cJSON *ll_json_member(const struct cJSON *obj, const char *key);

/* Getters: absent (or null) member → LL_OK with *present = false (present may be NULL) and *out
 * untouched; else *out is set and *present = true. Errors name the key:
 * LL_ETYPE "'KEY' must be an integer, not a string";
 * LL_EINVAL "'KEY' must be between LO and HI, got V" (integers),
 *           "'KEY' must be at least LO and at most HI, got V" (numbers; "greater than LO" when
 *           lo_open). */
enum ll_status ll_json_get_int(const struct cJSON *obj, const char *key, long long lo,
                               long long hi, long long *out, bool *present, struct ll_err *err);
enum ll_status ll_json_get_num(const struct cJSON *obj, const char *key, double lo, double hi,
                               bool lo_open, double *out, bool *present, struct ll_err *err);
enum ll_status ll_json_get_bool(const struct cJSON *obj, const char *key, bool *out,
                                bool *present, struct ll_err *err);
/* *out points into obj's tree (valid while it lives). */
enum ll_status ll_json_get_str(const struct cJSON *obj, const char *key, const char **out,
                               bool *present, struct ll_err *err);
/* Whether v is a number holding an integer in [lo, hi]; *out gets it (out may be NULL). */
bool ll_json_is_int(const struct cJSON *v, long long lo, long long hi, long long *out);

/* Writers. Each appends to b; check b->failed (or ll_buf_take's NULL) once at the end. */
/* s[0..len) as a quoted JSON string (s is UTF-8; control bytes and NUL become \u00XX). */
void ll_json_put_str(struct ll_buf *b, const char *s, size_t len);
/* The same for bytes that may not be UTF-8: each maximal invalid subpart becomes U+FFFD. */
void ll_json_put_str_lossy(struct ll_buf *b, const char *s, size_t len);
/* A C string, or null for NULL. */
void ll_json_put_cstr(struct ll_buf *b, const char *s);
void ll_json_put_int(struct ll_buf *b, long long v);
/* v with 17 significant digits (reads back exactly); null when v is not finite. */
void ll_json_put_num(struct ll_buf *b, double v);

#endif
