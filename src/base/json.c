/*
 * json.c: JSON reading through cJSON and JSON writing into an ll_buf (see json.h).
 *
 * cJSON 1.7 records where its last parse failed in a process-wide variable that every parse
 * writes; parse_lock makes that harmless (ThreadSanitizer-clean) and the error position comes
 * from the parse end pointer, never from cJSON_GetErrorPtr.
 */
#include "json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Offset of the first byte below 0x20 other than tab, LF and CR, or len. JSON allows none
 * anywhere (inside strings they must be escaped), but cJSON skips them as whitespace. */
static size_t control_byte_at(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return i;
    }
    return len;
}

enum ll_status ll_json_parse(cJSON **out, const char *text, size_t len, const char *what,
                             struct ll_err *err)
{
    *out = NULL;
    size_t at = control_byte_at(text, len);
    const char *why = "";
    char why_buf[48];
    if (at < len) {
        snprintf(why_buf, sizeof why_buf, ": a control byte (0x%02x)", (unsigned char)text[at]);
        why = why_buf;
    } else {
        const char *end = NULL;
        pthread_mutex_lock(&parse_lock);
        cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
        pthread_mutex_unlock(&parse_lock);
        at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        if (root) {
            while (at < len && is_space(text[at]))
                at++;
            if (at == len) {
                *out = root;
                return LL_OK;
            }
            cJSON_Delete(root); /* something after the value */
        } else if (at + 1 >= len) {
            why = ": at the end of the text (truncated?)"; /* cJSON names the last byte then */
        }
    }
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    return ll_err_set(err, LL_EJSON, "%s: invalid JSON at line %zu, column %zu (byte offset %zu)%s",
                      what, line, col, at, why);
}

const char *ll_json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "null";
}

const cJSON *ll_json_member(const cJSON *obj, const char *key)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

bool ll_json_is_int(const cJSON *v, long long lo, long long hi, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < (double)lo || x > (double)hi)
        return false;
    if (out) /* (double)LLONG_MAX rounds up to 2^63, which does not convert back */
        *out = x >= 0x1p63 ? hi : (long long)x;
    return true;
}

static enum ll_status wrong_type(struct ll_err *err, const char *key, const char *want,
                                 const cJSON *got)
{
    return ll_err_set(err, LL_ETYPE, "'%s' must be %s, not %s", key, want,
                      ll_json_type_name(got));
}

enum ll_status ll_json_get_int(const cJSON *obj, const char *key, long long lo, long long hi,
                               long long *out, bool *present, struct ll_err *err)
{
    const cJSON *v = ll_json_member(obj, key);
    if (present)
        *present = false;
    if (!v)
        return LL_OK;
    if (!cJSON_IsNumber(v))
        return wrong_type(err, key, "an integer", v);
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x))
        return ll_err_set(err, LL_ETYPE, "'%s' must be an integer, got %g", key, x);
    if (!ll_json_is_int(v, lo, hi, out))
        return ll_err_set(err, LL_EINVAL, "'%s' must be between %lld and %lld, got %.17g", key,
                          lo, hi, x);
    if (present)
        *present = true;
    return LL_OK;
}

enum ll_status ll_json_get_num(const cJSON *obj, const char *key, double lo, double hi,
                               bool lo_open, double *out, bool *present, struct ll_err *err)
{
    const cJSON *v = ll_json_member(obj, key);
    if (present)
        *present = false;
    if (!v)
        return LL_OK;
    if (!cJSON_IsNumber(v))
        return wrong_type(err, key, "a number", v);
    double x = v->valuedouble;
    if (!isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
        return ll_err_set(err, LL_EINVAL, "'%s' must be %s %g and at most %g, got %g", key,
                          lo_open ? "greater than" : "at least", lo, hi, x);
    *out = x;
    if (present)
        *present = true;
    return LL_OK;
}

enum ll_status ll_json_get_bool(const cJSON *obj, const char *key, bool *out, bool *present,
                                struct ll_err *err)
{
    const cJSON *v = ll_json_member(obj, key);
    if (present)
        *present = false;
    if (!v)
        return LL_OK;
    if (!cJSON_IsBool(v))
        return wrong_type(err, key, "a boolean", v);
    *out = cJSON_IsTrue(v);
    if (present)
        *present = true;
    return LL_OK;
}

enum ll_status ll_json_get_str(const cJSON *obj, const char *key, const char **out,
                               bool *present, struct ll_err *err)
{
    const cJSON *v = ll_json_member(obj, key);
    if (present)
        *present = false;
    if (!v)
        return LL_OK;
    if (!cJSON_IsString(v))
        return wrong_type(err, key, "a string", v);
    *out = v->valuestring;
    if (present)
        *present = true;
    return LL_OK;
}

/* s[0..len) escaped for a JSON string, without the quotes. */
static void put_escaped(struct ll_buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t start = 0; /* bytes [start, i) are copied as they are before each escape */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        ll_buf_append(b, s + start, i - start);
        start = i + 1;
        switch (c) {
        case '"': ll_buf_append(b, "\\\"", 2); break;
        case '\\': ll_buf_append(b, "\\\\", 2); break;
        case '\n': ll_buf_append(b, "\\n", 2); break;
        case '\r': ll_buf_append(b, "\\r", 2); break;
        case '\t': ll_buf_append(b, "\\t", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            ll_buf_append(b, u, 6);
        }
        }
    }
    ll_buf_append(b, s + start, len - start);
}

void ll_json_put_str(struct ll_buf *b, const char *s, size_t len)
{
    ll_buf_putc(b, '"');
    put_escaped(b, s, len);
    ll_buf_putc(b, '"');
}

void ll_json_put_str_lossy(struct ll_buf *b, const char *s, size_t len)
{
    if (ll_utf8_valid_prefix(s, len) == len) {
        ll_json_put_str(b, s, len);
        return;
    }
    struct ll_buf fixed = {0};
    if (ll_buf_put_utf8_lossy(&fixed, s, len))
        ll_json_put_str(b, fixed.data, fixed.len);
    else
        b->failed = true;
    ll_buf_free(&fixed);
}

void ll_json_put_cstr(struct ll_buf *b, const char *s)
{
    if (s)
        ll_json_put_str(b, s, strlen(s));
    else
        ll_buf_append(b, "null", 4);
}

void ll_json_put_int(struct ll_buf *b, long long v)
{
    ll_buf_printf(b, "%lld", v);
}

void ll_json_put_num(struct ll_buf *b, double v)
{
    if (isfinite(v))
        ll_buf_printf(b, "%.17g", v);
    else
        ll_buf_append(b, "null", 4);
}
