/*
 * grammar_json.c: JSON and JSON Schema as grammar rules (grammar.h lists what is supported).
 *
 * The rules generate JSON text byte by byte: strings are valid UTF-8 (the exact ranges of RFC
 * 3629, no surrogates or overlong forms) with JSON's escapes, numbers JSON's number syntax.
 * Objects with properties are generated in the order the schema lists them; a property not in
 * "required" may be left out. Whitespace between tokens is at most one space or one newline
 * followed by up to 20 spaces or tabs, so a model cannot spend its tokens on layout; the text
 * before the value may hold up to 4 spaces or newlines (e.g. the blank line after "</think>").
 * Any thread (a builder belongs to its caller).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "grammar_impl.h"

/* ---- plain JSON ---- */

static int shared(struct gbuild *b, int which)
{
    return b->shared[which];
}

int grammar_json_ws(struct gbuild *b)
{
    if (b->shared[GB_WS] >= 0)
        return b->shared[GB_WS];
    struct gset ind = {{0}};
    gset_add(&ind, ' ');
    gset_add(&ind, '\t');
    int ind_r = gb_rule(b);
    struct gseq q = {0};
    gseq_setsym(&q, gb_set(b, &ind));
    gb_alt(b, ind_r, &q);
    int indent = gb_repeat(b, ind_r, 0, 20);
    int ws = gb_rule(b);
    gseq_clear(&q);
    gb_alt(b, ws, &q);
    gseq_byte(b, &q, ' ');
    gb_alt(b, ws, &q);
    gseq_clear(&q);
    gseq_byte(b, &q, '\n');
    gseq_rule(&q, indent);
    gb_alt(b, ws, &q);
    gseq_free(&q);
    return b->shared[GB_WS] = ws;
}

/* Up to 4 spaces or newlines before a value. */
int grammar_json_lead_ws(struct gbuild *b)
{
    if (b->shared[GB_LEAD] >= 0)
        return b->shared[GB_LEAD];
    struct gset w = {{0}};
    gset_add(&w, ' ');
    gset_add(&w, '\n');
    int one = gb_rule(b);
    struct gseq q = {0};
    gseq_setsym(&q, gb_set(b, &w));
    gb_alt(b, one, &q);
    gseq_free(&q);
    return b->shared[GB_LEAD] = gb_repeat(b, one, 0, 4);
}

/* One character of a JSON string's content, followed by rule `then` (-1: nothing). */
static void char_alts(struct gbuild *b, int rule, int then)
{
    struct gseq q = {0};
#define ALT_END()                                                                            \
    do {                                                                                     \
        if (then >= 0)                                                                       \
            gseq_rule(&q, then);                                                             \
        gb_alt(b, rule, &q);                                                                 \
        gseq_clear(&q);                                                                      \
    } while (0)
    struct gset ascii = {{0}};
    for (unsigned c = 0x20; c < 0x80; c++)
        if (c != '"' && c != '\\')
            gset_add(&ascii, c);
    gseq_setsym(&q, gb_set(b, &ascii));
    ALT_END();
    struct gset esc = {{0}};
    for (const char *e = "\"\\/bfnrt"; *e; e++)
        gset_add(&esc, (unsigned char)*e);
    gseq_byte(b, &q, '\\');
    gseq_setsym(&q, gb_set(b, &esc));
    ALT_END();
    struct gset hex = {{0}};
    for (const char *h = "0123456789abcdefABCDEF"; *h; h++)
        gset_add(&hex, (unsigned char)*h);
    int hs = gb_set(b, &hex);
    gseq_lit(b, &q, "\\u", 2);
    for (int i = 0; i < 4; i++)
        gseq_setsym(&q, hs);
    ALT_END();
    /* UTF-8 (RFC 3629 table): lead byte range, then continuation ranges */
    static const unsigned char seqs[][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}, {0, 0}, {0, 0}},
        {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}, {0, 0}},
        {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}, {0, 0}},
        {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}, {0, 0}},
        {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}, {0, 0}},
        {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
    };
    for (size_t s = 0; s < sizeof seqs / sizeof seqs[0]; s++) {
        for (int k = 0; k < 4 && seqs[s][k][0]; k++)
            gseq_range(b, &q, seqs[s][k][0], seqs[s][k][1]);
        ALT_END();
    }
#undef ALT_END
    gseq_free(&q);
}

/* A JSON string of min..max characters (max < 0: unbounded). */
static int string_rule(struct gbuild *b, int min, int max)
{
    if (min == 0 && max < 0 && b->shared[GB_STRING] >= 0)
        return b->shared[GB_STRING];
    int body;
    if (min == 0 && max < 0) { /* chars ::= "" | char chars (a tail call) */
        body = gb_rule(b);
        struct gseq e = {0};
        gb_alt(b, body, &e);
        char_alts(b, body, body);
    } else {
        int ch = gb_rule(b);
        char_alts(b, ch, -1);
        body = gb_repeat(b, ch, min, max);
    }
    int r = gb_rule(b);
    struct gseq q = {0};
    gseq_byte(b, &q, '"');
    gseq_rule(&q, body);
    gseq_byte(b, &q, '"');
    gb_alt(b, r, &q);
    gseq_free(&q);
    if (min == 0 && max < 0)
        b->shared[GB_STRING] = r;
    return r;
}

/* '{' ws ( member ( ',' ws member )* )? '}' with member = key ws ':' ws value ws (key < 0: any
 * JSON string). */
static int map_rule(struct gbuild *b, int key, int value)
{
    int ws = grammar_json_ws(b);
    if (key < 0)
        key = string_rule(b, 0, -1);
    struct gseq q = {0};
    int member = gb_rule(b);
    gseq_rule(&q, key);
    gseq_rule(&q, ws);
    gseq_byte(b, &q, ':');
    gseq_rule(&q, ws);
    gseq_rule(&q, value);
    gseq_rule(&q, ws);
    gb_alt(b, member, &q);
    int tail = gb_rule(b); /* tail ::= '}' | ',' ws member tail */
    gseq_clear(&q);
    gseq_byte(b, &q, '}');
    gb_alt(b, tail, &q);
    gseq_clear(&q);
    gseq_byte(b, &q, ',');
    gseq_rule(&q, ws);
    gseq_rule(&q, member);
    gseq_rule(&q, tail);
    gb_alt(b, tail, &q);
    int rest = gb_rule(b); /* rest ::= '}' | member tail */
    gseq_clear(&q);
    gseq_byte(b, &q, '}');
    gb_alt(b, rest, &q);
    gseq_clear(&q);
    gseq_rule(&q, member);
    gseq_rule(&q, tail);
    gb_alt(b, rest, &q);
    int r = gb_rule(b);
    gseq_clear(&q);
    gseq_byte(b, &q, '{');
    gseq_rule(&q, ws);
    gseq_rule(&q, rest);
    gb_alt(b, r, &q);
    gseq_free(&q);
    return r;
}

/* '[' ws ( item ws ( ',' ws item ws ){min-1, max-1} )? ']' (min = 0: the items optional). */
static int array_rule(struct gbuild *b, int item, int min, int max)
{
    int ws = grammar_json_ws(b);
    struct gseq q = {0};
    int r = gb_rule(b);
    gseq_byte(b, &q, '[');
    gseq_rule(&q, ws);
    if (max != 0) {
        int first = gb_concat(b, (int[]){item, ws}, 2);
        int more = gb_rule(b);
        struct gseq m = {0};
        gseq_byte(b, &m, ',');
        gseq_rule(&m, ws);
        gseq_rule(&m, item);
        gseq_rule(&m, ws);
        gb_alt(b, more, &m);
        gseq_free(&m);
        int rep = gb_repeat(b, more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        int body = gb_concat(b, (int[]){first, rep}, 2);
        gseq_rule(&q, min == 0 ? gb_optional(b, body) : body);
    }
    gseq_byte(b, &q, ']');
    gb_alt(b, r, &q);
    gseq_free(&q);
    return r;
}

int grammar_json_any_value(struct gbuild *b)
{
    if (b->shared[GB_VALUE] >= 0)
        return b->shared[GB_VALUE];
    int v = gb_rule(b); /* made first: objects and arrays refer to it */
    b->shared[GB_VALUE] = v;
    int obj = map_rule(b, -1, v);
    b->shared[GB_OBJECT] = obj;
    int arr = array_rule(b, v, 0, -1);
    int alts[] = {obj, arr, string_rule(b, 0, -1), grammar_num_any(b, false), gb_literal(b, "true"),
                  gb_literal(b, "false"), gb_literal(b, "null")};
    struct gseq q = {0};
    for (size_t i = 0; i < sizeof alts / sizeof alts[0]; i++) {
        gseq_clear(&q);
        gseq_rule(&q, alts[i]);
        gb_alt(b, v, &q);
    }
    gseq_free(&q);
    return v;
}

int grammar_json_any_object(struct gbuild *b)
{
    if (b->shared[GB_OBJECT] < 0)
        grammar_json_any_value(b);
    return shared(b, GB_OBJECT);
}

/* ---- JSON Schema ---- */

struct memo {
    const cJSON *node;
    int rule;
};

struct jctx {
    struct gbuild *b;
    const cJSON *doc;      /* the whole schema document ($ref "#...") */
    struct ll_err *err;
    struct memo *memo;     /* $ref targets already given a rule */
    int n_memo, cap_memo;
    int depth;
};

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "strict", "$defs", "definitions", "discriminator",
};
static const char *const handled[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "enum", "const", "anyOf", "allOf", "oneOf", "$ref", "minimum",
    "maximum", "prefixItems", "additionalItems",
    "exclusiveMinimum", "exclusiveMaximum", "format", "pattern", "contentEncoding",
    "propertyNames", "multipleOf", "uniqueItems",
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i]))
            return true;
    return false;
}

static enum ll_status compile(struct jctx *c, const cJSON *s, const char *path, int *rule);

/* Whether type (a name or a list of names) names t or u. */
static bool type_names(const cJSON *type, const char *t, const char *u)
{
    const cJSON *x;
    if (cJSON_IsString(type))
        return !strcmp(type->valuestring, t) || (u && !strcmp(type->valuestring, u));
    if (!cJSON_IsArray(type))
        return false;
    cJSON_ArrayForEach(x, type)
        if (cJSON_IsString(x) && (!strcmp(x->valuestring, t) || (u && !strcmp(x->valuestring, u))))
            return true;
    return false;
}

/* Whether a keyword of s that limits values of the types t / u (minimum: number, integer;
 * format: string) is what limits them: the type names one of them, and no enum or const
 * (which would take the place of the type) stands beside it. */
static bool applies(const cJSON *s, const char *t, const char *u)
{
    return !cJSON_GetObjectItemCaseSensitive(s, "enum") &&
           !cJSON_GetObjectItemCaseSensitive(s, "const") &&
           type_names(cJSON_GetObjectItemCaseSensitive(s, "type"), t, u);
}

/* ---- oneOf: schemas that provably exclude each other ---- */

static const cJSON *resolve(const cJSON *doc, const char *ref);

/* s with its $ref chain followed (NULL when it does not resolve in a few steps). */
static const cJSON *deref(const struct jctx *c, const cJSON *s)
{
    for (int i = 0; i < 8 && cJSON_IsObject(s); i++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!ref)
            return s;
        s = cJSON_IsString(ref) ? resolve(c->doc, ref->valuestring) : NULL;
    }
    return NULL;
}

/* The one JSON type every value of s has ("number" for integer too), or NULL. */
static const char *value_type(const cJSON *s)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (!v) {
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
        v = cJSON_GetArraySize(en) == 1 ? cJSON_GetArrayItem(en, 0) : NULL;
    }
    if (v)
        return cJSON_IsString(v) ? "string" : cJSON_IsNumber(v) ? "number" : cJSON_IsBool(v) ? "boolean"
               : cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "array" : "object";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "anyOf") ||
        cJSON_GetObjectItemCaseSensitive(s, "allOf") || cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
        return NULL;
    if (!t && cJSON_GetObjectItemCaseSensitive(s, "properties"))
        return "object";
    if (!cJSON_IsString(t))
        return NULL;
    return strcmp(t->valuestring, "integer") ? t->valuestring : "number";
}

/* The single value s allows (const, or an enum of one), or NULL. */
static const cJSON *only_value(const cJSON *s)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    return v ? v : cJSON_GetArraySize(en) == 1 ? cJSON_GetArrayItem(en, 0) : NULL;
}

static bool required(const cJSON *s, const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(s, "required"))
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
            return true;
    return false;
}

/* Whether no value matches both a and b (both dereferenced): different types, different single
 * values, or objects with a property both require and give different single values. */
static bool apart(const struct jctx *c, const cJSON *a, const cJSON *b)
{
    const char *ta = value_type(a), *tb = value_type(b);
    if (ta && tb && strcmp(ta, tb))
        return true;
    const cJSON *va = only_value(a), *vb = only_value(b);
    if (va && vb)
        return !cJSON_Compare(va, vb, true);
    if (!ta || !tb || strcmp(ta, "object"))
        return false;
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties"), *x;
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    cJSON_ArrayForEach(x, pa) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(pb, x->string);
        if (!y || !required(a, x->string) || !required(b, x->string))
            continue;
        const cJSON *xv = only_value(deref(c, x)), *yv = only_value(deref(c, y));
        if (xv && yv && !cJSON_Compare(xv, yv, true))
            return true;
    }
    return false;
}

/* Whether the schemas of list exclude each other pairwise (then oneOf is anyOf). */
static bool exclusive(const struct jctx *c, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const cJSON *a = deref(c, cJSON_GetArrayItem(list, i));
            const cJSON *b = deref(c, cJSON_GetArrayItem(list, j));
            if (!cJSON_IsObject(a) || !cJSON_IsObject(b) || !apart(c, a, b))
                return false;
        }
    return true;
}

static enum ll_status bad(struct jctx *c, const char *path, const char *what)
{
    return ll_err_set(c->err, LL_EINVAL, "%s: %s", path, what);
}

/* An integer keyword in 0..GRAMMAR_MAX_REPEAT, or def when absent. */
/* An integer keyword in 0..GRAMMAR_MAX_REPEAT, or def when absent. A maximum above the limit
 * (maxLength, maxItems) is held to the limit, which keeps the values valid (shorter); *over
 * (may be NULL) tells, with the value itself in *given (up to 2^30). */
static enum ll_status count_kw(struct jctx *c, const cJSON *s, const char *kw, const char *path,
                               int def, int *out, bool *over, int *given)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
    *out = def;
    if (over)
        *over = false;
    if (!v)
        return LL_OK;
    /* (no cast to int before the range check: a huge value does not fit one; found by
     * fuzz_grammar_json) */
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return ll_err_set(c->err, LL_EINVAL, "%s.%s must be a non-negative integer", path, kw);
    if (v->valuedouble > GRAMMAR_MAX_REPEAT && !over)
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s.%s: at most %d is supported", path, kw,
                          GRAMMAR_MAX_REPEAT);
    if (v->valuedouble > GRAMMAR_MAX_REPEAT) {
        *over = true;
        *given = v->valuedouble > 1 << 30 ? 1 << 30 : (int)v->valuedouble;
        *out = GRAMMAR_MAX_REPEAT;
        return LL_OK;
    }
    *out = v->valueint;
    return LL_OK;
}

/* A literal rule for the compact JSON text of v (enum, const). */
static enum ll_status value_literal(struct jctx *c, const cJSON *v, int *rule)
{
    char *text = cJSON_PrintUnformatted(v);
    if (!text)
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    *rule = gb_literal(c->b, text);
    free(text);
    return LL_OK;
}

static enum ll_status object_members(struct jctx *c, const cJSON *all, const cJSON *req,
                                     const cJSON *addl, const cJSON *pn, const char *path,
                                     int *rule);

/* Whether propertyNames pn admits name: 1 yes, 0 no, -1 not known here (pn limits names by
 * more than an enum or a const: its pattern, format or lengths). */
static int name_admitted(const cJSON *pn, const char *name)
{
    if (!pn || cJSON_IsTrue(pn))
        return 1;
    const cJSON *k, *en = cJSON_GetObjectItemCaseSensitive(pn, "enum"),
                    *cst = cJSON_GetObjectItemCaseSensitive(pn, "const");
    if (en || cst) {
        bool in_enum = !en;
        bool is_const = !cst || (cJSON_IsString(cst) && !strcmp(cst->valuestring, name));
        cJSON_ArrayForEach(k, en)
            in_enum |= cJSON_IsString(k) && !strcmp(k->valuestring, name);
        return in_enum && is_const;
    }
    cJSON_ArrayForEach(k, pn)
        if (strcmp(k->string, "type") &&
            !in_list(k->string, annotations, sizeof annotations / sizeof *annotations))
            return -1;
    return 1;
}

/* The rule of an object's names from propertyNames pn (a string schema; its type may be left
 * out, as names are strings). */
static enum ll_status names_rule(struct jctx *c, const cJSON *pn, const char *path, int *rule)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pn, "type");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "string")))
        return bad(c, path, "'propertyNames' must describe strings (its 'type', when given, is "
                            "\"string\")");
    cJSON *dup = cJSON_Duplicate(pn, true);
    if (!dup || (!type && !cJSON_AddStringToObject(dup, "type", "string"))) {
        cJSON_Delete(dup);
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    }
    char sub[512];
    snprintf(sub, sizeof sub, "%.400s.propertyNames", path);
    enum ll_status st = compile(c, dup, sub, rule);
    cJSON_Delete(dup);
    return st;
}

/* Adds name to all (unless there) with the schema of additionalProperties (*any: a true schema
 * made once, when there is none). false: out of memory. */
static bool add_implicit(cJSON *all, const char *name, const cJSON *addl, cJSON **any)
{
    if (cJSON_GetObjectItemCaseSensitive(all, name))
        return true;
    if (!addl && !*any && !(*any = cJSON_CreateTrue()))
        return false;
    return cJSON_AddItemReferenceToObject(all, name, (cJSON *)(addl ? addl : *any));
}

static enum ll_status object_rule(struct jctx *c, const cJSON *s, const char *path, int *rule)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(s, "propertyNames");
    if (props && !cJSON_IsObject(props))
        return bad(c, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return bad(c, path, "'required' must be an array of property names");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return bad(c, path, "'additionalProperties' must be a boolean or a schema");
    if (pn && !cJSON_IsBool(pn) && !cJSON_IsObject(pn))
        return bad(c, path, "'propertyNames' must be a boolean or a schema");
    if (cJSON_IsFalse(pn))
        addl = pn; /* no name at all: as additionalProperties false, without properties */
    const cJSON *x;
    cJSON_ArrayForEach(x, req) {
        if (!cJSON_IsString(x))
            return bad(c, path, "'required' must be an array of property names");
        if (!cJSON_GetObjectItemCaseSensitive(props, x->valuestring) && cJSON_IsFalse(addl))
            return ll_err_set(c->err, LL_EINVAL, "%s: required property '%.100s' is not in "
                              "'properties', and 'additionalProperties' is false", path,
                              x->valuestring);
    }
    /* The properties generated: those of 'properties'; the required ones outside it, and (with
     * no 'properties') the names of an enum or const propertyNames, whose values follow
     * additionalProperties. */
    const cJSON *pn_names = NULL;
    if (cJSON_IsObject(pn) && !props) {
        pn_names = cJSON_GetObjectItemCaseSensitive(pn, "enum");
        if (!pn_names)
            pn_names = cJSON_GetObjectItemCaseSensitive(pn, "const");
    }
    cJSON *all = cJSON_CreateObject(), *any = NULL;
    const cJSON *addl_schema = cJSON_IsObject(addl) ? addl : NULL;
    bool oom = !all;
    cJSON_ArrayForEach(x, props)
        oom |= !cJSON_AddItemReferenceToObject(all, x->string, (cJSON *)x);
    cJSON_ArrayForEach(x, req)
        oom |= !oom && !add_implicit(all, x->valuestring, addl_schema, &any);
    if (cJSON_IsString(pn_names))
        oom |= !oom && !add_implicit(all, pn_names->valuestring, addl_schema, &any);
    const cJSON *pn_list = cJSON_IsArray(pn_names) ? pn_names : NULL;
    cJSON_ArrayForEach(x, pn_list)
        if (cJSON_IsString(x))
            oom |= !oom && !add_implicit(all, x->valuestring, addl_schema, &any);
    enum ll_status st = oom ? ll_err_set(c->err, LL_ENOMEM, "out of memory") : LL_OK;
    cJSON_ArrayForEach(x, all) {
        const int ok = st == LL_OK ? name_admitted(pn, x->string) : 1;
        if (ok == 0)
            st = ll_err_set(c->err, LL_EINVAL, "%s: property '%.100s' does not meet "
                            "'propertyNames'", path, x->string);
        else if (ok < 0)
            st = ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'propertyNames' beside 'properties' or "
                            "'required' is supported as an enum or a const of the names", path);
    }
    if (st == LL_OK)
        st = object_members(c, all, req, addl, pn, path, rule);
    cJSON_Delete(all);
    cJSON_Delete(any);
    return st;
}

/* An object of the properties in all (required: those in req), or, when all is empty, of names
 * from propertyNames pn and values from additionalProperties addl. */
static enum ll_status object_members(struct jctx *c, const cJSON *all, const cJSON *req,
                                     const cJSON *addl, const cJSON *pn, const char *path,
                                     int *rule)
{
    struct gbuild *b = c->b;
    const cJSON *x;
    char sub[512];
    int n = cJSON_GetArraySize(all);
    if (n == 0) {
        if (cJSON_IsFalse(addl)) {
            *rule = gb_concat(b, (int[]){gb_literal(b, "{"), grammar_json_ws(b),
                                         gb_literal(b, "}")}, 3);
            return LL_OK;
        }
        int key = -1, v;
        enum ll_status st;
        if (cJSON_IsObject(pn) && (st = names_rule(c, pn, path, &key)) != LL_OK)
            return st;
        if (cJSON_IsObject(addl)) {
            snprintf(sub, sizeof sub, "%s.additionalProperties", path);
            if ((st = compile(c, addl, sub, &v)) != LL_OK)
                return st;
            *rule = map_rule(b, key, v);
            return LL_OK;
        }
        *rule = key < 0 ? grammar_json_any_object(b) : map_rule(b, key, grammar_json_any_value(b));
        return LL_OK;
    }
    /* P_k = "name" ws ':' ws V_k ws; S_k = P_k T_{k+1} | S_{k+1} (optional);
     * T_k = ',' ws P_k T_{k+1} | T_{k+1} (optional); S_n = T_n = "" */
    int ws = grammar_json_ws(b);
    int *P = malloc(sizeof *P * (size_t)n);
    bool *opt = malloc(sizeof *opt * (size_t)n);
    if (!P || !opt) {
        free(P);
        free(opt);
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    }
    int k = 0;
    enum ll_status st = LL_OK;
    cJSON_ArrayForEach(x, all) {
        snprintf(sub, sizeof sub, "%s.properties.%.100s", path, x->string);
        int v;
        if ((st = compile(c, x, sub, &v)) != LL_OK)
            break;
        cJSON *key = cJSON_CreateString(x->string);
        char *kt = key ? cJSON_PrintUnformatted(key) : NULL;
        cJSON_Delete(key);
        if (!kt) {
            st = ll_err_set(c->err, LL_ENOMEM, "out of memory");
            break;
        }
        struct gseq q = {0};
        P[k] = gb_rule(b);
        gseq_lit(b, &q, kt, strlen(kt));
        free(kt);
        gseq_rule(&q, ws);
        gseq_byte(b, &q, ':');
        gseq_rule(&q, ws);
        gseq_rule(&q, v);
        gseq_rule(&q, ws);
        gb_alt(b, P[k], &q);
        gseq_free(&q);
        opt[k] = true;
        const cJSON *r;
        cJSON_ArrayForEach(r, req)
            if (!strcmp(r->valuestring, x->string))
                opt[k] = false;
        k++;
    }
    if (st == LL_OK) {
        struct gseq q = {0};
        int S = gb_rule(b), T = gb_rule(b); /* S_n, T_n */
        gb_alt(b, S, &q);
        gb_alt(b, T, &q);
        for (k = n - 1; k >= 0; k--) {
            int S2 = gb_rule(b), T2 = gb_rule(b);
            gseq_clear(&q);
            gseq_rule(&q, P[k]);
            gseq_rule(&q, T);
            gb_alt(b, S2, &q);
            gseq_clear(&q);
            gseq_byte(b, &q, ',');
            gseq_rule(&q, ws);
            gseq_rule(&q, P[k]);
            gseq_rule(&q, T);
            gb_alt(b, T2, &q);
            if (opt[k]) {
                gseq_clear(&q);
                gseq_rule(&q, S);
                gb_alt(b, S2, &q);
                gseq_clear(&q);
                gseq_rule(&q, T);
                gb_alt(b, T2, &q);
            }
            S = S2;
            T = T2;
        }
        *rule = gb_rule(b);
        gseq_clear(&q);
        gseq_byte(b, &q, '{');
        gseq_rule(&q, ws);
        gseq_rule(&q, S);
        gseq_byte(b, &q, '}');
        gb_alt(b, *rule, &q);
        gseq_free(&q);
    }
    free(P);
    free(opt);
    return st;
}

/* An array whose first items follow the schemas of prefixItems (or of items in its tuple form,
 * draft 7) and the rest those of items (additionalItems): false, none; absent, any value, but
 * only as many as minItems asks; min..max items (max < 0: unbounded). */
static enum ll_status tuple_rule(struct jctx *c, const cJSON *s, const char *path, int min,
                                 int max, int *rule)
{
    struct gbuild *b = c->b;
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const char *pkw = prefix ? "prefixItems" : "items", *rkw = prefix ? "items" : "additionalItems";
    const cJSON *rest = cJSON_GetObjectItemCaseSensitive(s, rkw);
    if (!prefix)
        prefix = cJSON_GetObjectItemCaseSensitive(s, "items");
    else if (cJSON_IsArray(rest))
        return ll_err_set(c->err, LL_EINVAL, "%s.items must be a schema beside 'prefixItems'", path);
    if (!prefix || !cJSON_IsArray(prefix))
        return ll_err_set(c->err, LL_EINVAL, "%s.%s must be an array of schemas", path, pkw);
    const int n = cJSON_GetArraySize(prefix);
    if (n > GRAMMAR_MAX_REPEAT)
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s.%s: at most %d schemas are supported", path,
                          pkw, GRAMMAR_MAX_REPEAT);
    /* how many items there may be (-1: no limit), and the rule of those past the prefix */
    int cap = max, restr = -1;
    char sub[512];
    enum ll_status st;
    if (cJSON_IsFalse(rest)) {
        if (min > n)
            return ll_err_set(c->err, LL_EINVAL, "%s: 'minItems' %d, but '%s' is false after %d "
                              "items", path, min, rkw, n);
        cap = max >= 0 && max < n ? max : n;
    } else if (rest) {
        snprintf(sub, sizeof sub, "%.400s.%s", path, rkw);
        if ((st = compile(c, rest, sub, &restr)) != LL_OK)
            return st;
    } else {
        restr = grammar_json_any_value(b);
        int need = min > n ? min : n;
        cap = max >= 0 && max < need ? max : need;
    }
    int *item = malloc(sizeof *item * (size_t)(n + 1));
    if (!item)
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    const cJSON *x;
    int i = 0;
    cJSON_ArrayForEach(x, prefix) {
        snprintf(sub, sizeof sub, "%.400s.%s[%d]", path, pkw, i);
        if ((st = compile(c, x, sub, &item[i++])) != LL_OK) {
            free(item);
            return st;
        }
    }
    item[n] = restr; /* every item past the prefix */
    /* T_k: what follows k items: the end (k >= min) and, while k < cap, ',' ws item_k ws T_k+1.
     * Past the prefix and minItems with no cap, T_k repeats itself. */
    int ws = grammar_json_ws(b);
    int last = cap >= 0 ? cap : min > n ? min : n > 1 ? n : 1;
    int next = -1; /* T_{k+1} */
    struct gseq q = {0};
    for (int k = last; k >= 1; k--) {
        int t = gb_rule(b);
        if (k >= min)
            gb_alt(b, t, &q); /* "" (q is empty here) */
        if (k < last || cap < 0) {
            gseq_byte(b, &q, ',');
            gseq_rule(&q, ws);
            gseq_rule(&q, item[k < n ? k : n]);
            gseq_rule(&q, ws);
            gseq_rule(&q, k < last ? next : t);
            gb_alt(b, t, &q);
            gseq_clear(&q);
        }
        next = t;
    }
    *rule = gb_rule(b);
    gseq_byte(b, &q, '[');
    gseq_rule(&q, ws);
    if (last >= 1) {
        struct gseq body = {0};
        int br = gb_rule(b);
        gseq_rule(&body, item[0 < n ? 0 : n]);
        gseq_rule(&body, ws);
        gseq_rule(&body, next);
        gb_alt(b, br, &body);
        gseq_free(&body);
        gseq_rule(&q, min == 0 ? gb_optional(b, br) : br);
    }
    gseq_byte(b, &q, ']');
    gb_alt(b, *rule, &q);
    gseq_free(&q);
    free(item);
    return LL_OK;
}

/* Whether value v is of the type (a name or a list) type. */
static bool of_type(const cJSON *v, const cJSON *type)
{
    const char *t = cJSON_IsString(v) ? "string" : cJSON_IsBool(v) ? "boolean" : cJSON_IsNull(v)
                  ? "null" : cJSON_IsArray(v) ? "array" : cJSON_IsObject(v) ? "object" : "number";
    if (!strcmp(t, "number") && v->valuedouble == floor(v->valuedouble) &&
        type_names(type, "integer", NULL))
        return true;
    return type_names(type, t, NULL);
}

/* enum and const: the values listed, each as its compact JSON text; beside them only a type
 * (which drops the values not of it) and annotations. */
/* The literals of the values an enum / const schema s allows (of its type, when it has one;
 * each value once): (*lits)[0..*n), malloc'd. */
static enum ll_status value_lits(struct jctx *c, const cJSON *s, const char *path, int **lits,
                                 int *n)
{
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type"), *k, *v;
    *lits = NULL;
    *n = 0;
    cJSON_ArrayForEach(k, s)
        if (strcmp(k->string, "enum") && strcmp(k->string, "const") && strcmp(k->string, "type") &&
            !in_list(k->string, annotations, sizeof annotations / sizeof *annotations))
            return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: '%s' beside '%s' is not supported "
                              "(the listed values are generated as they are)", path, k->string,
                              en ? "enum" : "const");
    if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0))
        return bad(c, path, "'enum' must be a non-empty array");
    if (type && !cJSON_IsString(type) && !cJSON_IsArray(type))
        return bad(c, path, "'type' must be a type name or an array of them");
    if (!(*lits = malloc(sizeof **lits * (size_t)(cJSON_GetArraySize(en) + 1))))
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    enum ll_status st = LL_OK;
    const cJSON *list = cst ? NULL : en;
    cJSON_ArrayForEach(v, list) {
        bool seen = false; /* an earlier equal value */
        for (const cJSON *w = list->child; w != v; w = w->next)
            seen |= cJSON_Compare(w, v, true);
        if (seen || (type && !of_type(v, type)))
            continue;
        if ((st = value_literal(c, v, &(*lits)[*n])) != LL_OK)
            break;
        ++*n;
    }
    if (cst && st == LL_OK) {
        bool listed = !en;
        cJSON_ArrayForEach(v, en)
            listed |= cJSON_Compare(v, cst, true);
        if (listed && (!type || of_type(cst, type)) &&
            (st = value_literal(c, cst, &(*lits)[*n])) == LL_OK)
            ++*n;
    }
    if (st == LL_OK && *n == 0)
        st = ll_err_set(c->err, LL_EINVAL, "%s: no value of '%s' is %s", path,
                        en ? "enum" : "const", cst && en ? "in 'enum' and of its 'type'"
                                                         : "of its 'type'");
    if (st != LL_OK) {
        free(*lits);
        *lits = NULL;
    }
    return st;
}

static enum ll_status values_rule(struct jctx *c, const cJSON *s, const char *path, int *rule)
{
    int *lits, n;
    enum ll_status st = value_lits(c, s, path, &lits, &n);
    if (st == LL_OK)
        *rule = gb_choice(c->b, lits, n);
    free(lits);
    return st;
}

/* uniqueItems: the items' values (an enum, a const, booleans, null) each at most once, in
 * their order: U(i, k) is the rest of the array from value i with k items written. */
#define UNIQ_MAX_VALUES 64
struct uniq {
    struct gbuild *b;
    const int *lits;
    int n, min, max, ws;
    int *rules; /* [i][k] + 1 */
};

static int uniq_rule(struct uniq *u, int i, int k)
{
    int *slot = &u->rules[i * (u->n + 1) + k];
    if (*slot)
        return *slot - 1;
    int r = gb_rule(u->b);
    *slot = r + 1;
    struct gseq q = {0};
    if (k >= u->min) /* the end */
        gb_alt(u->b, r, &q);
    if (i < u->n && k + (u->n - i - 1) >= u->min) { /* value i left out: enough after it */
        gseq_clear(&q);
        gseq_rule(&q, uniq_rule(u, i + 1, k));
        gb_alt(u->b, r, &q);
    }
    if (i < u->n && (u->max < 0 || k < u->max)) { /* value i */
        gseq_clear(&q);
        if (k > 0) {
            gseq_byte(u->b, &q, ',');
            gseq_rule(&q, u->ws);
        }
        gseq_rule(&q, u->lits[i]);
        gseq_rule(&q, u->ws);
        gseq_rule(&q, uniq_rule(u, i + 1, k + 1));
        gb_alt(u->b, r, &q);
    }
    gseq_free(&q);
    return r;
}

static enum ll_status unique_rule(struct jctx *c, const cJSON *items, const char *path, int min,
                                  int max, int *rule)
{
    const cJSON *it = deref(c, items);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    int *lits = NULL, n = 0;
    enum ll_status st;
    char sub[512];
    snprintf(sub, sizeof sub, "%.400s.items", path);
    if (cJSON_GetObjectItemCaseSensitive(it, "enum") || cJSON_GetObjectItemCaseSensitive(it, "const")) {
        if ((st = value_lits(c, it, sub, &lits, &n)) != LL_OK)
            return st;
    } else if (cJSON_IsString(type) && cJSON_GetArraySize(it) == 1 &&
               (!strcmp(type->valuestring, "boolean") || !strcmp(type->valuestring, "null"))) {
        if (!(lits = malloc(sizeof *lits * 2)))
            return ll_err_set(c->err, LL_ENOMEM, "out of memory");
        if (type->valuestring[0] == 'b') {
            lits[n++] = gb_literal(c->b, "true");
            lits[n++] = gb_literal(c->b, "false");
        } else {
            lits[n++] = gb_literal(c->b, "null");
        }
    } else {
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'uniqueItems' is supported when the "
                          "items are an enum, a const, booleans or null (values the grammar can "
                          "list once each)", path);
    }
    if (n > UNIQ_MAX_VALUES) {
        free(lits);
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'uniqueItems' is supported for items of "
                          "at most %d distinct values (here %d)", path, UNIQ_MAX_VALUES, n);
    }
    if (n < min) {
        free(lits);
        return ll_err_set(c->err, LL_EINVAL, "%s: 'minItems' %d is more than the %d distinct "
                          "values its unique items may take", path, min, n);
    }
    struct uniq u = {.b = c->b, .lits = lits, .n = n, .min = min, .max = max,
                     .ws = grammar_json_ws(c->b)};
    u.rules = calloc((size_t)(n + 1) * (size_t)(n + 1), sizeof *u.rules);
    if (!u.rules) {
        free(lits);
        return ll_err_set(c->err, LL_ENOMEM, "out of memory");
    }
    *rule = gb_concat(c->b, (int[]){gb_literal(c->b, "["), u.ws, uniq_rule(&u, 0, 0),
                                    gb_literal(c->b, "]")}, 4);
    free(u.rules);
    free(lits);
    return LL_OK;
}

/* The rule for schema s restricted to the one type name t. */
static enum ll_status typed(struct jctx *c, const cJSON *s, const char *t, const char *path,
                            int *rule)
{
    struct gbuild *b = c->b;
    enum ll_status st;
    if (!strcmp(t, "string")) {
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
        const cJSON *enc = cJSON_GetObjectItemCaseSensitive(s, "contentEncoding");
        if (fmt && !cJSON_IsString(fmt))
            return bad(c, path, "'format' must be a string");
        if (pat && !cJSON_IsString(pat))
            return bad(c, path, "'pattern' must be a string");
        if (enc && !cJSON_IsString(enc))
            return bad(c, path, "'contentEncoding' must be a string");
        int min, max, given = 0;
        bool over;
        if ((st = count_kw(c, s, "minLength", path, 0, &min, NULL, NULL)) != LL_OK ||
            (st = count_kw(c, s, "maxLength", path, -1, &max, &over, &given)) != LL_OK)
            return st;
        if (max >= 0 && max < min)
            return bad(c, path, "'maxLength' is less than 'minLength'");
        if (fmt || pat || enc) /* (it holds a large maxLength to the limit if it must) */
            return grammar_string_regular(b, pat ? pat->valuestring : NULL,
                                          fmt ? fmt->valuestring : NULL,
                                          enc ? enc->valuestring : NULL, min,
                                          over ? given : max, path, rule, c->err);
        *rule = string_rule(b, min, max);
    } else if (!strcmp(t, "number") || !strcmp(t, "integer")) {
        return grammar_num_schema(b, s, t[0] == 'i', path, rule, c->err);
    } else if (!strcmp(t, "boolean")) {
        *rule = gb_choice(b, (int[]){gb_literal(b, "true"), gb_literal(b, "false")}, 2);
    } else if (!strcmp(t, "null")) {
        *rule = gb_literal(b, "null");
    } else if (!strcmp(t, "object")) {
        return object_rule(c, s, path, rule);
    } else if (!strcmp(t, "array")) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int item, min, max;
        bool over;
        int given;
        if ((st = count_kw(c, s, "minItems", path, 0, &min, NULL, NULL)) != LL_OK ||
            (st = count_kw(c, s, "maxItems", path, -1, &max, &over, &given)) != LL_OK)
            return st;
        if (max >= 0 && max < min)
            return bad(c, path, "'maxItems' is less than 'minItems'");
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
        if (uniq && !cJSON_IsBool(uniq))
            return bad(c, path, "'uniqueItems' must be a boolean");
        if (cJSON_IsTrue(uniq) && (prefix || cJSON_IsArray(items)))
            return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'uniqueItems' with a tuple "
                              "('prefixItems', or 'items' as an array) is not supported", path);
        if (prefix || cJSON_IsArray(items))
            return tuple_rule(c, s, path, min, max, rule);
        if (cJSON_GetObjectItemCaseSensitive(s, "additionalItems"))
            return bad(c, path, "'additionalItems' needs 'items' in tuple form (an array)");
        if (cJSON_IsTrue(uniq))
            return unique_rule(c, items, path, min, max, rule);
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        if (items) {
            if ((st = compile(c, items, sub, &item)) != LL_OK)
                return st;
        } else {
            item = grammar_json_any_value(b);
        }
        *rule = array_rule(b, item, min, max);
    } else {
        return ll_err_set(c->err, LL_EINVAL, "%s.type: unknown type '%.40s' (string, number, "
                          "integer, boolean, null, object, array)", path, t);
    }
    return LL_OK;
}

/* Resolve "#", "#/a/b" (JSON pointer) in the document. */
static const cJSON *resolve(const cJSON *doc, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const cJSON *at = doc;
    const char *p = ref + 1;
    while (*p == '/' && at) {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof key) {
            if (p[0] == '~' && p[1] == '0')
                key[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1')
                key[n++] = '/', p += 2;
            else
                key[n++] = *p++;
        }
        key[n] = 0;
        if (*p && *p != '/')
            return NULL;
        at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(key))
                               : cJSON_GetObjectItemCaseSensitive(at, key);
    }
    return *p ? NULL : at;
}

static enum ll_status ref_rule(struct jctx *c, const cJSON *s, const char *ref, const char *path,
                               int *rule)
{
    const cJSON *target = resolve(c->doc, ref);
    if (!target)
        return ll_err_set(c->err, LL_EINVAL, "%s.$ref: '%.200s' does not resolve in this schema "
                          "(only local references, \"#\" or \"#/...\", are supported)", path,
                          ref);
    if (cJSON_GetArraySize(s) > 1) {
        const cJSON *k;
        cJSON_ArrayForEach(k, s)
            if (strcmp(k->string, "$ref") &&
                !in_list(k->string, annotations, sizeof annotations / sizeof *annotations))
                return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: '%s' beside '$ref' is not "
                                  "supported", path, k->string);
    }
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == target) {
            *rule = c->memo[i].rule;
            return LL_OK;
        }
    if (c->n_memo == c->cap_memo) {
        int cap = c->cap_memo ? 2 * c->cap_memo : 16;
        struct memo *m = realloc(c->memo, sizeof *m * (size_t)cap);
        if (!m)
            return ll_err_set(c->err, LL_ENOMEM, "out of memory");
        c->memo = m;
        c->cap_memo = cap;
    }
    int r = gb_rule(c->b);
    c->memo[c->n_memo++] = (struct memo){target, r};
    char sub[512];
    snprintf(sub, sizeof sub, "%.300s", ref);
    int body;
    enum ll_status st = compile(c, target, sub, &body);
    if (st != LL_OK)
        return st;
    struct gseq q = {0};
    gseq_rule(&q, body);
    gb_alt(c->b, r, &q);
    gseq_free(&q);
    *rule = r;
    return LL_OK;
}

/* ---- allOf (and $ref with other keywords beside it): the schemas merged into one ---- */

/* The JSON types a schema may have, as bits (number includes integer). */
enum { T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32,
       T_ARRAY = 64, T_ALL = 127 };
static const char *const type_names_all[] = {"string", "integer", "number", "boolean", "null",
                                             "object", "array"};

static unsigned type_bits(const cJSON *type)
{
    unsigned m = 0;
    for (int i = 0; i < 7; i++)
        if (type_names(type, type_names_all[i], NULL))
            m |= 1u << i | (i == 2 ? T_INTEGER : 0);
    return m;
}

struct merge {
    struct jctx *c;
    const char *path;
    cJSON *m;          /* the merged schema */
    unsigned types;    /* T_* still allowed */
    cJSON *patterns;   /* every pattern, to hold together */
    cJSON *closed;     /* per schema with additionalProperties false: its property names */
    const cJSON *cur;  /* the schema being merged in */
    enum ll_status st;
};

static void merge_refuse(struct merge *g, const char *kw, const char *why)
{
    if (g->st == LL_OK)
        g->st = ll_err_set(g->c->err, LL_EUNSUPPORTED, "%s: 'allOf' (or '$ref' beside other "
                           "keywords) is supported when its schemas merge into one; '%s' %s",
                           g->path, kw, why);
}

/* into[kw] becomes {"allOf": [into[kw], v]} in its place (v copied), or v when into has none
 * (properties keep the order they first came in). */
static void merge_both(struct merge *g, cJSON *into, const char *kw, const cJSON *v)
{
    cJSON *old = cJSON_GetObjectItemCaseSensitive(into, kw);
    cJSON *nv = cJSON_Duplicate(v, true), *both = NULL, *list;
    bool ok = nv != NULL;
    if (ok && old) {
        ok = (both = cJSON_CreateObject()) && (list = cJSON_AddArrayToObject(both, "allOf")) &&
             cJSON_AddItemToArray(list, cJSON_Duplicate(old, true)) &&
             cJSON_AddItemToArray(list, nv);
        if (!ok)
            cJSON_Delete(nv);
        ok = ok && cJSON_ReplaceItemInObjectCaseSensitive(into, kw, both);
        if (!ok)
            cJSON_Delete(both);
    } else if (ok) {
        ok = cJSON_AddItemToObject(into, kw, nv);
    }
    if (!ok && g->st == LL_OK)
        g->st = ll_err_set(g->c->err, LL_ENOMEM, "out of memory");
}

/* A bound: the tighter one (lower: the larger). */
static void merge_bound(struct merge *g, const char *kw, const cJSON *v, bool lower)
{
    if (!cJSON_IsNumber(v)) {
        merge_refuse(g, kw, "is not a number");
        return;
    }
    cJSON *old = cJSON_GetObjectItemCaseSensitive(g->m, kw);
    if (!old)
        cJSON_AddNumberToObject(g->m, kw, v->valuedouble);
    else if (lower ? v->valuedouble > old->valuedouble : v->valuedouble < old->valuedouble)
        cJSON_SetNumberValue(old, v->valuedouble);
}

static void merge_in(struct merge *g, const cJSON *s, int depth);

static void merge_key(struct merge *g, const cJSON *k, int depth)
{
    const char *kw = k->string;
    cJSON *old = cJSON_GetObjectItemCaseSensitive(g->m, kw);
    static const char *const lower[] = {"minimum", "exclusiveMinimum", "minLength", "minItems"};
    static const char *const upper[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems"};
    static const char *const same[] = {"format", "contentEncoding", "multipleOf", "prefixItems",
                                       "additionalItems"};
    if (in_list(kw, annotations, sizeof annotations / sizeof *annotations))
        return;
    /* malformed values are reported, as compile() reports them, not merged away */
    const char *bad_form = !strcmp(kw, "properties") && !cJSON_IsObject(k)
                               ? "'properties' must be an object"
                           : !strcmp(kw, "required") && !cJSON_IsArray(k)
                               ? "'required' must be an array of property names"
                           : !strcmp(kw, "enum") && (!cJSON_IsArray(k) || !cJSON_GetArraySize(k))
                               ? "'enum' must be a non-empty array"
                               : NULL;
    if (bad_form) {
        if (g->st == LL_OK)
            g->st = bad(g->c, g->path, bad_form);
        return;
    }
    if (!strcmp(kw, "$ref")) {
        const cJSON *t = cJSON_IsString(k) ? resolve(g->c->doc, k->valuestring) : NULL;
        if (!t)
            merge_refuse(g, "$ref", "does not resolve to a local schema");
        else
            merge_in(g, t, depth + 1);
    } else if (!strcmp(kw, "allOf")) {
        const cJSON *v;
        if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0)
            merge_refuse(g, kw, "must be a non-empty array");
        cJSON_ArrayForEach(v, (cJSON_IsArray(k) ? k : NULL))
            merge_in(g, v, depth + 1);
    } else if (!strcmp(kw, "type")) {
        g->types &= type_bits(k);
    } else if (in_list(kw, lower, 4) || in_list(kw, upper, 4)) {
        if (cJSON_IsBool(k))
            merge_refuse(g, kw, "as a boolean (draft 4) cannot merge");
        else
            merge_bound(g, kw, k, in_list(kw, lower, 4));
    } else if (in_list(kw, same, 5)) {
        if (!old)
            cJSON_AddItemToObject(g->m, kw, cJSON_Duplicate(k, true));
        else if (!cJSON_Compare(old, k, true))
            merge_refuse(g, kw, "differs between the schemas");
    } else if (!strcmp(kw, "pattern")) {
        cJSON_AddItemToArray(g->patterns, cJSON_Duplicate(k, true));
    } else if (!strcmp(kw, "required")) {
        cJSON *req = old ? old : cJSON_AddArrayToObject(g->m, "required");
        const cJSON *v, *w;
        cJSON_ArrayForEach(v, (cJSON_IsArray(k) ? k : NULL)) {
            bool have = false;
            cJSON_ArrayForEach(w, req)
                have |= cJSON_Compare(v, w, true);
            if (!have)
                cJSON_AddItemToArray(req, cJSON_Duplicate(v, true));
        }
    } else if (!strcmp(kw, "properties")) {
        cJSON *props = old ? old : cJSON_AddObjectToObject(g->m, "properties");
        const cJSON *v;
        cJSON_ArrayForEach(v, (cJSON_IsObject(k) ? k : NULL))
            merge_both(g, props, v->string, v);
    } else if (!strcmp(kw, "additionalProperties") && cJSON_IsBool(k)) {
        if (cJSON_IsFalse(k)) { /* this schema's own properties only */
            cJSON *names = cJSON_CreateArray();
            const cJSON *v;
            cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(g->cur, "properties"))
                cJSON_AddItemToArray(names, cJSON_CreateString(v->string));
            cJSON_AddItemToArray(g->closed, names);
        }
    } else if (!strcmp(kw, "additionalProperties") || !strcmp(kw, "items") ||
               !strcmp(kw, "propertyNames")) {
        merge_both(g, g->m, kw, k);
    } else if (!strcmp(kw, "uniqueItems")) { /* unique when any says so */
        if (!old)
            cJSON_AddItemToObject(g->m, kw, cJSON_Duplicate(k, true));
        else if (cJSON_IsTrue(k))
            cJSON_ReplaceItemInObjectCaseSensitive(g->m, kw, cJSON_CreateTrue());
    } else if (!strcmp(kw, "enum") || !strcmp(kw, "const")) {
        /* the values both allow: an enum of them */
        cJSON *vals = cJSON_CreateArray();
        const cJSON *v, *w, *en = cJSON_GetObjectItemCaseSensitive(g->m, "enum");
        if (!strcmp(kw, "const"))
            cJSON_AddItemToArray(vals, cJSON_Duplicate(k, true));
        else
            cJSON_ArrayForEach(v, (cJSON_IsArray(k) ? k : NULL))
                cJSON_AddItemToArray(vals, cJSON_Duplicate(v, true));
        if (en) {
            cJSON *keep = cJSON_CreateArray();
            cJSON_ArrayForEach(v, vals) {
                bool in = false;
                cJSON_ArrayForEach(w, en)
                    in |= cJSON_Compare(v, w, true);
                if (in)
                    cJSON_AddItemToArray(keep, cJSON_Duplicate(v, true));
            }
            cJSON_Delete(vals);
            vals = keep;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(g->m, "enum");
        if (cJSON_GetArraySize(vals) == 0 && g->st == LL_OK)
            g->st = ll_err_set(g->c->err, LL_EINVAL, "%s: no value is in the 'enum' / 'const' "
                               "of every schema of its 'allOf'", g->path);
        cJSON_AddItemToObject(g->m, "enum", vals);
    } else {
        merge_refuse(g, kw, "cannot merge (anyOf, oneOf and keywords not supported at all are "
                            "refused here)");
    }
}

static void merge_in(struct merge *g, const cJSON *s, int depth)
{
    if (depth > 16) {
        merge_refuse(g, "$ref", "nests too deeply");
        return;
    }
    if (cJSON_IsTrue(s))
        return;
    if (!cJSON_IsObject(s)) {
        if (g->st == LL_OK)
            g->st = bad(g->c, g->path, cJSON_IsFalse(s) ? "the schema false in 'allOf' matches "
                                                          "nothing"
                                                        : "a schema in 'allOf' must be an object "
                                                          "or a boolean");
        return;
    }
    const cJSON *k, *was = g->cur;
    g->cur = s;
    cJSON_ArrayForEach(k, s)
        if (g->st == LL_OK)
            merge_key(g, k, depth);
    g->cur = was;
}
/* The schemas of s's allOf and s's other keywords (or $ref's target and the keywords beside
 * it) merged into *out: types intersected, properties and required joined (a property in
 * several schemas: the allOf of its schemas), bounds and lengths the tighter, enums
 * intersected, patterns all held (as lookaheads), additionalProperties false keeping only that
 * schema's properties. */
static enum ll_status merge_schemas(struct jctx *c, const cJSON *s, const char *path, cJSON **out)
{
    struct merge g = {.c = c, .path = path, .m = cJSON_CreateObject(), .types = T_ALL,
                      .patterns = cJSON_CreateArray(), .closed = cJSON_CreateArray()};
    *out = NULL;
    if (!g.m || !g.patterns || !g.closed)
        g.st = ll_err_set(c->err, LL_ENOMEM, "out of memory");
    merge_in(&g, s, 0);
    if (g.st == LL_OK && g.types == 0)
        g.st = ll_err_set(c->err, LL_EINVAL, "%s: the schemas of its 'allOf' share no type",
                          path);
    if (g.st == LL_OK && g.types != T_ALL) {
        cJSON *ts = cJSON_AddArrayToObject(g.m, "type");
        for (int i = 0; i < 7; i++)
            if (g.types >> i & 1 && !(i == 1 && g.types & T_NUMBER))
                cJSON_AddItemToArray(ts, cJSON_CreateString(type_names_all[i]));
    }
    int np = cJSON_GetArraySize(g.patterns);
    if (g.st == LL_OK && np == 1) {
        cJSON_AddItemToObject(g.m, "pattern", cJSON_DetachItemFromArray(g.patterns, 0));
    } else if (g.st == LL_OK && np > 1) { /* each matches somewhere: lookaheads from the start */
        struct ll_buf p = {0};
        const cJSON *v;
        ll_buf_putc(&p, '^');
        cJSON_ArrayForEach(v, g.patterns)
            if (cJSON_IsString(v))
                ll_buf_printf(&p, "(?=[\\s\\S]*(?:%s))", v->valuestring);
        char *text = ll_buf_take(&p);
        if (!text || !cJSON_AddStringToObject(g.m, "pattern", text))
            g.st = ll_err_set(c->err, LL_ENOMEM, "out of memory");
        free(text);
    }
    if (g.st == LL_OK && cJSON_GetArraySize(g.closed) > 0) {
        /* only the names every closed schema lists; the others may not appear */
        cJSON *props = cJSON_GetObjectItemCaseSensitive(g.m, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(g.m, "required"), *names, *v;
        for (cJSON *p = props ? props->child : NULL, *next; p; p = next) {
            next = p->next;
            bool ok = true;
            cJSON_ArrayForEach(names, g.closed) {
                bool listed = false;
                cJSON_ArrayForEach(v, names)
                    listed |= !strcmp(v->valuestring, p->string);
                ok &= listed;
            }
            if (!ok)
                cJSON_Delete(cJSON_DetachItemViaPointer(props, p));
        }
        cJSON_ArrayForEach(v, req)
            if (cJSON_IsString(v) && !cJSON_GetObjectItemCaseSensitive(props, v->valuestring) &&
                g.st == LL_OK)
                g.st = ll_err_set(c->err, LL_EINVAL, "%s: required property '%.100s' is kept "
                                  "out by a schema of its 'allOf' with 'additionalProperties' "
                                  "false", path, v->valuestring);
        cJSON_DeleteItemFromObjectCaseSensitive(g.m, "additionalProperties");
        cJSON_AddFalseToObject(g.m, "additionalProperties");
    }
    cJSON_Delete(g.patterns);
    cJSON_Delete(g.closed);
    if (g.st != LL_OK)
        cJSON_Delete(g.m);
    else
        *out = g.m;
    return g.st;
}

/* Whether s has a keyword beside its allOf / $ref that is not an annotation. */
static bool has_siblings(const cJSON *s, const char *kw)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, s)
        if (strcmp(k->string, kw) &&
            !in_list(k->string, annotations, sizeof annotations / sizeof *annotations))
            return true;
    return false;
}

static enum ll_status compile(struct jctx *c, const cJSON *s, const char *path, int *rule)
{
    struct gbuild *b = c->b;
    if (c->depth > 64)
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: schema nested too deeply", path);
    if (cJSON_IsTrue(s)) {
        *rule = grammar_json_any_value(b);
        return LL_OK;
    }
    if (cJSON_IsFalse(s))
        return bad(c, path, "the schema false matches nothing");
    if (!cJSON_IsObject(s))
        return bad(c, path, "a schema must be an object or a boolean");
    const cJSON *all0 = cJSON_GetObjectItemCaseSensitive(s, "allOf"),
                *ref0 = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if ((all0 && (cJSON_GetArraySize(all0) > 1 || has_siblings(s, "allOf"))) ||
        (ref0 && has_siblings(s, "$ref"))) {
        cJSON *m;
        enum ll_status st = merge_schemas(c, s, path, &m);
        if (st == LL_OK) {
            c->depth++;
            st = compile(c, m, path, rule);
            c->depth--;
            cJSON_Delete(m);
        }
        return st;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (in_list(k->string, annotations, sizeof annotations / sizeof *annotations) ||
            in_list(k->string, handled, sizeof handled / sizeof *handled))
            continue;
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: the JSON Schema keyword '%.60s' is not "
                          "supported (supported: type, properties, required, "
                          "additionalProperties, items, minItems, maxItems, minLength, "
                          "maxLength, pattern, format, contentEncoding, minimum, maximum, "
                          "exclusiveMinimum, exclusiveMaximum, multipleOf, uniqueItems, enum, "
                          "const, anyOf, oneOf, $ref, $defs)", path,
                          k->string);
    }
    const char *bound = grammar_num_bound_kw(s);
    if (!bound && cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
        bound = "multipleOf";
    if (bound && !applies(s, "number", "integer"))
        return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: '%s' is supported with 'type' number or "
                          "integer (not beside 'enum' or 'const', nor without a type)", path,
                          bound);
    for (int i = 0; i < 3; i++) {
        const char *kw = i == 2 ? "contentEncoding" : i ? "pattern" : "format";
        if (cJSON_GetObjectItemCaseSensitive(s, kw) && !applies(s, "string", NULL))
            return ll_err_set(c->err, LL_EUNSUPPORTED, "%s: '%s' is supported with 'type' string "
                              "(not beside 'enum' or 'const', nor without a type)", path, kw);
    }
    c->depth++;
    enum ll_status st = LL_OK;
    char sub[512];
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!!any + !!all + !!one > 1) {
        st = ll_err_set(c->err, LL_EUNSUPPORTED, "%s: more than one of 'anyOf', 'allOf' and "
                        "'oneOf' in one schema is not supported", path);
    } else if (ref) {
        if (!cJSON_IsString(ref))
            st = bad(c, path, "'$ref' must be a string");
        else
            st = ref_rule(c, s, ref->valuestring, path, rule);
    } else if (cst || en) {
        st = values_rule(c, s, path, rule);
    } else if (any || all || one) {
        const char *kw = any ? "anyOf" : all ? "allOf" : "oneOf";
        const cJSON *list = any ? any : all ? all : one;
        int n = cJSON_GetArraySize(list);
        if (!cJSON_IsArray(list) || n == 0) {
            st = ll_err_set(c->err, LL_EINVAL, "%s: '%s' must be a non-empty array", path, kw);
        } else if (one && !exclusive(c, list)) {
            st = ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'oneOf' is supported when its schemas "
                            "exclude each other (different types, different consts, or objects "
                            "told apart by a required property with a different const in each); "
                            "these may overlap (anyOf allows a value to match several)", path);
        } else if (all && n > 1) {
            st = ll_err_set(c->err, LL_EUNSUPPORTED, "%s: 'allOf' with more than one schema is "
                            "not supported", path);
        } else if (type || cJSON_GetObjectItemCaseSensitive(s, "properties")) {
            st = ll_err_set(c->err, LL_EUNSUPPORTED, "%s: '%s' beside 'type' or 'properties' "
                            "is not supported", path, kw);
        } else {
            int r = gb_rule(b), i = 0;
            const cJSON *v;
            struct gseq q = {0};
            cJSON_ArrayForEach(v, list) {
                int alt = -1;
                snprintf(sub, sizeof sub, "%.400s.%s[%d]", path, kw, i++);
                if ((st = compile(c, v, sub, &alt)) != LL_OK)
                    break;
                gseq_clear(&q);
                gseq_rule(&q, alt);
                gb_alt(b, r, &q);
            }
            gseq_free(&q);
            *rule = r;
        }
    } else if (cJSON_IsString(type)) {
        st = typed(c, s, type->valuestring, path, rule);
    } else if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0) {
        int r = gb_rule(b);
        const cJSON *t;
        struct gseq q = {0};
        cJSON_ArrayForEach(t, type) {
            int alt = -1;
            if (!cJSON_IsString(t)) {
                st = bad(c, path, "'type' must be a type name or an array of them");
                break;
            }
            if ((st = typed(c, s, t->valuestring, path, &alt)) != LL_OK)
                break;
            gseq_clear(&q);
            gseq_rule(&q, alt);
            gb_alt(b, r, &q);
        }
        gseq_free(&q);
        *rule = r;
    } else if (type) {
        st = bad(c, path, "'type' must be a type name or an array of them");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") ||
               cJSON_GetObjectItemCaseSensitive(s, "additionalProperties") ||
               cJSON_GetObjectItemCaseSensitive(s, "propertyNames") ||
               cJSON_GetObjectItemCaseSensitive(s, "required")) {
        st = typed(c, s, "object", path, rule);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items")) {
        st = typed(c, s, "array", path, rule);
    } else {
        *rule = grammar_json_any_value(b);
    }
    c->depth--;
    if (st == LL_OK && (b->failed || *rule < 0))
        st = ll_err_set(c->err, LL_ENOMEM, "out of memory");
    return st;
}

enum ll_status grammar_json_schema(struct gbuild *b, const cJSON *schema, const char *where,
                                   int *rule, struct ll_err *err)
{
    struct jctx c = {.b = b, .doc = schema, .err = err};
    int value;
    enum ll_status st = compile(&c, schema, where, &value);
    free(c.memo);
    if (st != LL_OK)
        return st;
    *rule = gb_concat(b, (int[]){grammar_json_lead_ws(b), value}, 2);
    return b->failed ? ll_err_set(err, LL_ENOMEM, "out of memory") : LL_OK;
}
