/*
 * fuzz_grammar_json.c: the JSON-schema grammar compiler (src/engine/grammar_json.c) and the
 * grammar checks and compiler behind it (gbuild_finish), then the byte-level matcher.
 *
 * Input: a JSON schema, a NUL byte, then a text. The schema is compiled; when it compiles, the
 * text is matched (grammar_accepts), and so is every prefix of the text the grammar accepts
 * as a prefix. Checked: a refused schema has a message; a text accepted whole is accepted as a
 * prefix too, and so is each of its prefixes; when the schema is a number or integer with
 * bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum as numbers), an accepted text
 * reads as a number inside them; when it is a string with a pattern written in the syntax that
 * ECMA-262 and POSIX EREs read alike (letters, digits, . | ( ) * + ? {n,m} [...] ^ $), an
 * accepted printable-ASCII value matches it by regexec too.
 */
#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz.h"
#include "grammar.h"
#include "json.h"

/* Decimal text t (digits, at most one point, no exponent, at most 15 digits after the point)
 * as N·10^-*f; false when it is not of that form. */
static bool decimal(const char *t, __int128 *n, int *f)
{
    *n = 0;
    *f = -1;
    if (*t == '-')
        t++;
    for (; *t; t++) {
        if (*t == '.' && *f < 0) {
            *f = 0;
        } else if (*t >= '0' && *t <= '9' && *f < 15) {
            *n = *n * 10 + (*t - '0');
            *f += *f >= 0;
        } else {
            return false;
        }
    }
    *f = *f < 0 ? 0 : *f;
    return true;
}

/* Whether the accepted text t is an exact multiple of step (its shortest decimal form). */
static bool is_multiple(const char *t, double step)
{
    char s[40];
    for (int prec = 1; prec <= 17; prec++) { /* the shortest %f form that reads back */
        snprintf(s, sizeof s, "%.*f", prec > 15 ? 15 : prec, step);
        if (strtod(s, NULL) == step || prec >= 15)
            break;
    }
    __int128 x, a;
    int fx, fa;
    while (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r')
        t++;
    if (!decimal(t, &x, &fx) || !decimal(s, &a, &fa) || a == 0)
        return false;
    for (; fx < fa; fx++)
        x *= 10;
    for (; fa < fx; fa++)
        a *= 10;
    return x % a == 0;
}

/* The bounds of a top-level number schema hold for the accepted text (leading whitespace
 * allowed). */
static void check_bounds(const cJSON *schema, const uint8_t *text, size_t len)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (!cJSON_IsString(type) ||
        (strcmp(type->valuestring, "number") && strcmp(type->valuestring, "integer")) ||
        cJSON_GetObjectItemCaseSensitive(schema, "enum") ||
        cJSON_GetObjectItemCaseSensitive(schema, "const"))
        return;
    char buf[128];
    if (len >= sizeof buf)
        fuzz_fail("a bounded number of %zu bytes", len);
    memcpy(buf, text, len);
    buf[len] = 0;
    char *end;
    double x = strtod(buf, &end);
    if (*end || !isfinite(x))
        fuzz_fail("accepted '%s', not a number", buf);
    static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(schema, kw[i]);
        if (!cJSON_IsNumber(v))
            continue;
        double b = v->valuedouble;
        bool ok = i == 0 ? x >= b : i == 1 ? x > b : i == 2 ? x <= b : x < b;
        if (!ok)
            fuzz_fail("accepted %s outside %s %.17g", buf, kw[i], b);
    }
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(schema, "multipleOf");
    if (cJSON_IsNumber(mo) && !is_multiple(buf, mo->valuedouble))
        fuzz_fail("accepted %s, not a multiple of %.17g", buf, mo->valuedouble);
}

/* Whether pattern p reads the same as an ECMA-262 pattern and a POSIX ERE. */
static bool common_syntax(const char *p)
{
    if (strstr(p, "{,") || strstr(p, "[]") || strstr(p, "[^]") || strstr(p, "()") ||
        strstr(p, "(|") || strstr(p, "|)") || strstr(p, "||") || p[0] == '|')
        return false;
    for (; *p; p++)
        if (!strchr("abcdefxyz0123456789.|()*+?{},[]^$-", *p))
            return false;
    return true;
}

static void check_pattern(const cJSON *schema, const uint8_t *text, size_t len)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "string") || !cJSON_IsString(pat) ||
        cJSON_GetObjectItemCaseSensitive(schema, "format") || !common_syntax(pat->valuestring))
        return;
    cJSON *v = cJSON_ParseWithLength((const char *)text, len);
    if (!cJSON_IsString(v))
        fuzz_fail("accepted a text that is not a JSON string");
    bool ascii = true;
    for (const char *c = v->valuestring; *c; c++)
        ascii &= *c >= 0x20 && *c < 0x7f;
    regex_t px;
    if (ascii && regcomp(&px, pat->valuestring, REG_EXTENDED | REG_NOSUB) == 0) {
        if (regexec(&px, v->valuestring, 0, NULL, 0) != 0)
            fuzz_fail("accepted \"%s\", which pattern %s does not match", v->valuestring,
                      pat->valuestring);
        regfree(&px);
    }
    cJSON_Delete(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t schema_len, text_len;
    const uint8_t *text;
    fuzz_split(data, size, &schema_len, &text, &text_len);
    cJSON *schema = NULL;
    struct ll_err err = {0};
    if (ll_json_parse(&schema, (const char *)data, schema_len, "schema", &err) != LL_OK)
        return 0;
    struct gbuild *b = gbuild_new();
    if (!b)
        abort();
    int rule = -1;
    struct grammar *g = NULL;
    enum ll_status st = grammar_json_schema(b, schema, "schema", &rule, &err);
    if (st == LL_OK)
        st = gbuild_finish(b, rule, &g, &err);
    gbuild_free(b);
    if (st != LL_OK) {
        cJSON_Delete(schema);
        if (!err.msg[0])
            fuzz_fail("refused (%d) without a message", st);
        return 0;
    }
    if (text) {
        bool prefix = false;
        bool whole = grammar_accepts(g, (const char *)text, text_len, &prefix);
        if (whole && !prefix)
            fuzz_fail("accepted whole but not as a prefix");
        if (whole) {
            check_bounds(schema, text, text_len);
            check_pattern(schema, text, text_len);
        }
        if (whole && text_len < (size_t)grammar_min_len(g))
            fuzz_fail("accepted %zu bytes, fewer than the minimum %d", text_len,
                      grammar_min_len(g));
        if (prefix) {
            size_t cut[] = {0, 1, text_len / 3, text_len / 2, text_len - 1};
            for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
                size_t n = cut[i] < text_len ? cut[i] : 0;
                bool p = false;
                grammar_accepts(g, (const char *)text, n, &p);
                if (!p)
                    fuzz_fail("a prefix of %zu bytes of an accepted prefix is refused", n);
            }
        }
    }
    if (grammar_min_len(g) < 0)
        fuzz_fail("negative minimum length");
    grammar_unref(g);
    cJSON_Delete(schema);
    return 0;
}
