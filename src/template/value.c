/*
 * value.c: the dynamic values of the template engine and the arena of compiled templates.
 *
 * Owns: struct jv and its heap objects (strings, lists, dicts/namespaces, loop objects, bound
 * functions), their reference counts, the memory accounting against the render's limit, and
 * the two text forms of a value: how `{{ value }}` prints it and how `tojson` writes it. Both
 * follow @huggingface/jinja (true/false lowercase, none prints nothing, containers print as
 * JSON with ", " and ": " separators, floats formatted like JavaScript numbers).
 *
 * Called from one render thread at a time per struct jrender; static objects (rc < 0) are
 * shared read-only between threads. Invariant: every object with rc >= 0 is on the render's
 * list exactly once until it is destroyed; containers record their nesting depth so that no
 * recursive walk goes deeper than JV_MAX_DEPTH.
 */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "util.h"

#define JV_MAX_DEPTH 512

/* ------------------------------------------------------------------ arena */

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct jarena {
    struct jarena_chunk *head;
};

struct jarena *jarena_new(void)
{
    return calloc(1, sizeof(struct jarena));
}

void jarena_free(struct jarena *a)
{
    if (!a)
        return;
    for (struct jarena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

void *jarena_alloc(struct jarena *a, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    struct jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > 16384 ? bytes : 16384;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *jarena_strndup(struct jarena *a, const char *s, size_t len)
{
    char *p = jarena_alloc(a, len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = 0;
    }
    return p;
}

/* ------------------------------------------------------------------ UTF-8 */

int32_t jutf8_next(const char *str, size_t len, size_t *i)
{
    enum ll_utf8_status st;
    uint32_t cp;
    size_t k = ll_utf8_scan((const unsigned char *)str + *i, len - *i, &st, &cp);
    if (st != LL_UTF8_OK) { /* one raw byte that does not decode */
        int32_t c = (unsigned char)str[*i];
        *i += 1;
        return -c;
    }
    *i += k;
    return (int32_t)cp;
}

int jutf8_put(char *out, int32_t cp)
{
    if (cp < 0) { /* a raw byte that did not decode */
        out[0] = (char)(unsigned char)(-cp);
        return 1;
    }
    return ll_utf8_encode(out, (uint32_t)cp);
}

size_t jutf8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        jutf8_next(s, len, &i);
        n++;
    }
    return n;
}

bool jutf8_is_space(int32_t cp)
{
    switch (cp) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* ------------------------------------------------------------------ heap objects */

static void *obj_new(struct jrender *r, uint8_t kind, size_t bytes)
{
    jr_account(r, NULL, bytes);
    struct jobj *o = malloc(bytes);
    if (!o) {
        r->live_bytes -= bytes;
        jr_fail(r, NULL, LL_ENOMEM, "out of memory");
    }
    o->rc = 1;
    o->kind = kind;
    o->bytes = bytes;
    o->next = r->head.next;
    o->prev = &r->head;
    r->head.next->prev = o;
    r->head.next = o;
    return o;
}

static uint32_t obj_depth(struct jv v);

struct jv jv_retain(struct jv v)
{
    if (jv_is_heap(v) && v.u.obj->rc >= 0)
        v.u.obj->rc++;
    return v;
}

/* Free one object's own memory and unlink it (children are not touched). */
static void obj_destroy(struct jrender *r, struct jobj *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
    r->live_bytes -= o->bytes;
    switch (o->kind) {
    case JV_LIST:
        free(((struct jlist *)o)->v);
        break;
    case JV_DICT:
    case JV_NS:
        free(((struct jdict *)o)->k);
        free(((struct jdict *)o)->v);
        break;
    default:
        break;
    }
    free(o);
}

void jv_release(struct jrender *r, struct jv v)
{
    if (!jv_is_heap(v) || v.u.obj->rc < 0)
        return;
    if (--v.u.obj->rc > 0)
        return;
    switch (v.kind) {
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++)
            jv_release(r, v.u.l->v[i]);
        break;
    case JV_DICT:
    case JV_NS:
        for (size_t i = 0; i < v.u.d->n; i++) {
            struct jv k = {.kind = JV_STR};
            k.u.s = v.u.d->k[i];
            jv_release(r, k);
            jv_release(r, v.u.d->v[i]);
        }
        break;
    case JV_LOOP:
        if (v.u.lp->items) {
            struct jv l = {.kind = JV_LIST};
            l.u.l = v.u.lp->items;
            jv_release(r, l);
        }
        break;
    case JV_FUNC:
        jv_release(r, v.u.fn->self);
        break;
    default:
        break;
    }
    obj_destroy(r, v.u.obj);
}

struct jv jv_str(struct jrender *r, const char *s, size_t len)
{
    if (len > r->lim->max_output)
        jr_fail(r, NULL, LL_ETOOLONG, "string of %zu bytes exceeds the output limit of %zu bytes",
                len, r->lim->max_output);
    struct jstr *o = obj_new(r, JV_STR, sizeof(struct jstr) + len + 1);
    o->len = len;
    if (len && s)
        memcpy(o->s, s, len);
    o->s[len] = 0;
    struct jv v = {.kind = JV_STR};
    v.u.s = o;
    return v;
}

struct jv jv_cstr(struct jrender *r, const char *s)
{
    return jv_str(r, s, strlen(s));
}

/* Depth of nesting is tracked per container in a small header extension. */
struct jlist_d {
    struct jlist l;
    uint32_t depth;
};
struct jdict_d {
    struct jdict d;
    uint32_t depth;
};

static uint32_t obj_depth(struct jv v)
{
    if (v.kind == JV_LIST)
        return ((struct jlist_d *)v.u.l)->depth;
    if (v.kind == JV_DICT || v.kind == JV_NS)
        return ((struct jdict_d *)v.u.d)->depth;
    return 0;
}

static void grow_depth(struct jrender *r, uint32_t *depth, struct jv item)
{
    uint32_t d = obj_depth(item) + 1;
    if (d > JV_MAX_DEPTH)
        jr_fail(r, NULL, LL_ETEMPLATE, "value nested more than %d levels deep", JV_MAX_DEPTH);
    if (d > *depth)
        *depth = d;
}

struct jv jv_list(struct jrender *r, size_t cap)
{
    struct jlist_d *o = obj_new(r, JV_LIST, sizeof *o);
    o->l.n = 0;
    o->l.cap = 0;
    o->l.v = NULL;
    o->l.tuple = false;
    o->depth = 1;
    struct jv v = {.kind = JV_LIST};
    v.u.l = &o->l;
    if (cap) {
        jr_account(r, NULL, cap * sizeof(struct jv));
        o->l.h.bytes += cap * sizeof(struct jv);
        o->l.v = malloc(cap * sizeof(struct jv));
        if (!o->l.v)
            jr_fail(r, NULL, LL_ENOMEM, "out of memory");
        o->l.cap = cap;
    }
    return v;
}

void jv_list_push(struct jrender *r, struct jv list, struct jv item)
{
    struct jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        /* the item is owned by us now: make sure it is released if growing fails */
        struct jv *p = realloc(l->v, cap * sizeof(struct jv));
        if (!p) {
            jv_release(r, item);
            jr_fail(r, NULL, LL_ENOMEM, "out of memory");
        }
        l->v = p;
        size_t add = (cap - l->cap) * sizeof(struct jv);
        l->h.bytes += add;
        l->cap = cap;
        jr_account(r, NULL, add);
    }
    l->v[l->n++] = item; /* owned by the list from here on, even if the depth check fails */
    grow_depth(r, &((struct jlist_d *)l)->depth, item);
}

struct jv jv_dict(struct jrender *r, bool ns)
{
    struct jdict_d *o = obj_new(r, ns ? JV_NS : JV_DICT, sizeof *o);
    o->d.n = o->d.cap = 0;
    o->d.k = NULL;
    o->d.v = NULL;
    o->depth = 1;
    struct jv v = {.kind = ns ? JV_NS : JV_DICT};
    v.u.d = &o->d;
    return v;
}

struct jv *jv_dict_get(struct jv dict, const char *key, size_t len)
{
    struct jdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i]->len == len && memcmp(d->k[i]->s, key, len) == 0)
            return &d->v[i];
    return NULL;
}

void jv_dict_set(struct jrender *r, struct jv dict, struct jv key, struct jv val)
{
    struct jdict *d = dict.u.d;
    struct jv *old = jv_dict_get(dict, key.u.s->s, key.u.s->len);
    if (old) {
        struct jv prev = *old;
        *old = val;
        jv_release(r, prev);
    } else {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 4;
            struct jstr **k = realloc(d->k, cap * sizeof *k);
            if (k)
                d->k = k;
            struct jv *v = k ? realloc(d->v, cap * sizeof *v) : NULL;
            if (!v) {
                jv_release(r, val);
                jr_fail(r, NULL, LL_ENOMEM, "out of memory");
            }
            d->v = v;
            size_t add = (cap - d->cap) * (sizeof *k + sizeof *v);
            d->h.bytes += add;
            d->cap = cap;
            jr_account(r, NULL, add);
        }
        d->k[d->n] = jv_retain(key).u.s;
        d->v[d->n] = val;
        d->n++;
    }
    grow_depth(r, &((struct jdict_d *)d)->depth, val);
}

struct jv jv_loop(struct jrender *r, struct jv items)
{
    struct jloop *o = obj_new(r, JV_LOOP, sizeof *o);
    o->index0 = 0;
    o->length = (int64_t)items.u.l->n;
    o->items = jv_retain(items).u.l;
    struct jv v = {.kind = JV_LOOP};
    v.u.lp = o;
    return v;
}

struct jv jv_func(struct jrender *r, const struct jbuiltin *b, const struct jnode *macro,
                  struct jv self)
{
    struct jfunc *o = obj_new(r, JV_FUNC, sizeof *o);
    o->b = b;
    o->macro = macro;
    o->self = jv_retain(self);
    struct jv v = {.kind = JV_FUNC};
    v.u.fn = o;
    return v;
}

/* ------------------------------------------------------------------ predicates */

bool jv_truthy(struct jv v)
{
    switch (v.kind) {
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.u.s->len > 0;
    case JV_LIST:
        return v.u.l->n > 0;
    case JV_DICT:
        return v.u.d->n > 0;
    case JV_NS:
    case JV_LOOP:
    case JV_FUNC:
        return true;
    default:
        return false;
    }
}

static bool is_num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static double num_of(struct jv v)
{
    return v.kind == JV_INT ? (double)v.u.i : v.kind == JV_FLOAT ? v.u.f : (double)v.u.b;
}

static bool equal_at(struct jv a, struct jv b, int depth)
{
    if (depth > JV_MAX_DEPTH)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return (a.kind == JV_INT ? a.u.i : a.u.b) == (b.kind == JV_INT ? b.u.i : b.u.b);
        return num_of(a) == num_of(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
    case JV_MISSING:
        return true;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jv_dict_get(b, a.u.d->k[i]->s, a.u.d->k[i]->len);
            if (!o || !equal_at(a.u.d->v[i], *o, depth + 1))
                return false;
        }
        return true;
    case JV_FUNC:
        return a.u.fn->b == b.u.fn->b && a.u.fn->macro == b.u.fn->macro &&
               equal_at(a.u.fn->self, b.u.fn->self, depth + 1);
    default:
        return a.u.obj == b.u.obj;
    }
}

bool jv_equal(struct jv a, struct jv b)
{
    return equal_at(a, b, 0);
}

const char *jv_kind_name(struct jv v)
{
    switch (v.kind) {
    case JV_UNDEF: return "undefined";
    case JV_NONE: return "none";
    case JV_BOOL: return "boolean";
    case JV_INT: return "integer";
    case JV_FLOAT: return "float";
    case JV_STR: return "string";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "namespace";
    case JV_LOOP: return "loop";
    case JV_FUNC: return "function";
    default: return "missing value";
    }
}

/* ------------------------------------------------------------------ number formatting */

/* JavaScript's Number.prototype.toString for finite x: the shortest digits that round-trip,
 * laid out in fixed notation for exponents in [-7, 21) and exponential notation otherwise. */
static void fmt_js_number(double x, char *out, size_t cap)
{
    if (isnan(x)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(out, cap, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        snprintf(out, cap, "0");
        return;
    }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *p = buf;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int e10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int n = e10 + 1; /* value = 0.digits * 10^n */
    char *o = out;
    size_t left = cap;
#define PUT(...)                                                                         \
    do {                                                                                 \
        int w_ = snprintf(o, left, __VA_ARGS__);                                         \
        if (w_ > 0 && (size_t)w_ < left) {                                               \
            o += w_;                                                                     \
            left -= (size_t)w_;                                                          \
        }                                                                                \
    } while (0)
    if (neg)
        PUT("-");
    int k = (int)nd;
    if (k <= n && n <= 21) {
        PUT("%s", digits);
        for (int i = 0; i < n - k; i++)
            PUT("0");
    } else if (0 < n && n <= 21) {
        PUT("%.*s.%s", n, digits, digits + n);
    } else if (-6 < n && n <= 0) {
        PUT("0.");
        for (int i = 0; i < -n; i++)
            PUT("0");
        PUT("%s", digits);
    } else {
        if (k == 1)
            PUT("%c", digits[0]);
        else
            PUT("%c.%s", digits[0], digits + 1);
        PUT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
#undef PUT
}

/* How {{ 2.5 }} prints: integral values keep one decimal ("2.0"), as Python shows them. */
static void fmt_float_print(double x, char *out, size_t cap)
{
    if (x == 0 && signbit(x))
        snprintf(out, cap, "-0.0");
    else if (isfinite(x) && x == floor(x) && fabs(x) < 1e21)
        snprintf(out, cap, "%.1f", x);
    else
        fmt_js_number(x, out, cap);
}

/* ------------------------------------------------------------------ writers */

static void emit_s(struct jrender *r, const struct jnode *at, const char *s)
{
    jr_emit(r, at, s, strlen(s));
}

static void json_string(struct jrender *r, const struct jnode *at, const char *s, size_t len,
                        bool ascii)
{
    jr_emit(r, at, "\"", 1);
    size_t run = 0; /* start of the pending unescaped run */
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[16];
        size_t at_i = i;
        if (c < 0x80) {
            i++;
            switch (c) {
            case '"': esc = "\\\""; break;
            case '\\': esc = "\\\\"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            default:
                if (c < 0x20 || (ascii && c == 0x7F)) {
                    snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                    esc = ubuf;
                }
            }
        } else {
            int32_t cp = jutf8_next(s, len, &i);
            if (ascii && cp > 0) {
                if (cp >= 0x10000) {
                    int32_t v = cp - 0x10000;
                    snprintf(ubuf, sizeof ubuf, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                             0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(ubuf, sizeof ubuf, "\\u%04x", cp);
                }
                esc = ubuf;
            }
        }
        if (esc) {
            jr_emit(r, at, s + run, at_i - run);
            emit_s(r, at, esc);
            run = i;
        }
    }
    jr_emit(r, at, s + run, len - run);
    jr_emit(r, at, "\"", 1);
}

static void json_newline(struct jrender *r, const struct jnode *at, int indent, int depth)
{
    jr_emit(r, at, "\n", 1);
    for (int i = 0; i < indent * depth; i++)
        jr_emit(r, at, " ", 1);
}

struct sort_ctx {
    struct jstr **k;
};

static int key_cmp(const void *a, const void *b, void *ctx)
{
    struct jstr **k = ((struct sort_ctx *)ctx)->k;
    const struct jstr *x = k[((const struct jv *)a)->u.i], *y = k[((const struct jv *)b)->u.i];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void json_at(struct jrender *r, const struct jnode *at, struct jv v,
                    const struct jjson_opts *o, int depth, bool undef_null)
{
    char buf[64];
    if (depth > JV_MAX_DEPTH)
        jr_fail(r, at, LL_ETEMPLATE, "value nested too deeply to convert to JSON");
    switch (v.kind) {
    case JV_UNDEF:
    case JV_MISSING:
        emit_s(r, at, undef_null ? "null" : "undefined");
        return;
    case JV_NONE:
        emit_s(r, at, "null");
        return;
    case JV_BOOL:
        emit_s(r, at, v.u.b ? "true" : "false");
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        emit_s(r, at, buf);
        return;
    case JV_FLOAT:
        if (!isfinite(v.u.f))
            snprintf(buf, sizeof buf, "null");
        else
            fmt_js_number(v.u.f, buf, sizeof buf);
        emit_s(r, at, buf);
        return;
    case JV_STR:
        json_string(r, at, v.u.s->s, v.u.s->len, o->ensure_ascii);
        return;
    default:
        break;
    }
    const char *item_sep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    if (v.kind == JV_LIST) {
        struct jlist *l = v.u.l;
        jr_emit(r, at, "[", 1);
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                emit_s(r, at, item_sep);
            if (o->indent)
                json_newline(r, at, o->indent, depth + 1);
            json_at(r, at, l->v[i], o, depth + 1, undef_null);
        }
        if (o->indent && l->n)
            json_newline(r, at, o->indent, depth);
        jr_emit(r, at, "]", 1);
        return;
    }
    if (v.kind == JV_DICT || v.kind == JV_NS) {
        struct jdict *d = v.u.d;
        /* key order lives in a temporary list value so that a failure below leaks nothing */
        struct jv order = {.kind = JV_MISSING};
        size_t n = d->n;
        if (o->sort_keys && n > 1) {
            order = jv_list(r, n);
            for (size_t i = 0; i < n; i++)
                jv_list_push(r, order, jv_int((int64_t)i));
            struct sort_ctx ctx = {d->k};
            qsort_r(order.u.l->v, n, sizeof(struct jv), key_cmp, &ctx);
        }
        jr_emit(r, at, "{", 1);
        for (size_t j = 0; j < n; j++) {
            size_t i = order.kind == JV_LIST ? (size_t)order.u.l->v[j].u.i : j;
            if (j)
                emit_s(r, at, item_sep);
            if (o->indent)
                json_newline(r, at, o->indent, depth + 1);
            json_string(r, at, d->k[i]->s, d->k[i]->len, o->ensure_ascii);
            emit_s(r, at, key_sep);
            json_at(r, at, d->v[i], o, depth + 1, undef_null);
        }
        if (o->indent && n)
            json_newline(r, at, o->indent, depth);
        jr_emit(r, at, "}", 1);
        jv_release(r, order);
        return;
    }
    jr_fail(r, at, LL_ETEMPLATE, "cannot convert a %s to JSON", jv_kind_name(v));
}

void jv_write_json(struct jrender *r, const struct jnode *at, struct jv v,
                   const struct jjson_opts *o)
{
    json_at(r, at, v, o, 0, true);
}

void jv_write(struct jrender *r, const struct jnode *at, struct jv v, enum jv_write_mode mode)
{
    char buf[64];
    switch (v.kind) {
    case JV_UNDEF:
    case JV_MISSING:
        return;
    case JV_NONE:
        if (mode == JW_STR)
            emit_s(r, at, "None");
        return;
    case JV_BOOL:
        emit_s(r, at, v.u.b ? "true" : "false");
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        emit_s(r, at, buf);
        return;
    case JV_FLOAT:
        fmt_float_print(v.u.f, buf, sizeof buf);
        emit_s(r, at, buf);
        return;
    case JV_STR:
        jr_emit(r, at, v.u.s->s, v.u.s->len);
        return;
    case JV_LIST:
    case JV_DICT:
    case JV_NS: {
        struct jjson_opts o = {0};
        json_at(r, at, v, &o, 0, false);
        return;
    }
    case JV_FUNC:
        jr_fail(r, at, LL_ETEMPLATE, "cannot print a function (missing call parentheses?)");
    default:
        jr_fail(r, at, LL_ETEMPLATE, "cannot print a %s", jv_kind_name(v));
    }
}

struct jv jv_to_str(struct jrender *r, const struct jnode *at, struct jv v)
{
    if (v.kind == JV_STR)
        return jv_retain(v);
    size_t mark = jr_mark(r);
    jv_write(r, at, v, JW_STR);
    return jr_take(r, mark);
}
