/*
 * eval.c: the AST interpreter of the template engine.
 *
 * Owns one render: the scopes (a stack of variable frames: the root frame holds the inputs and
 * top-level `set`s; each for loop and macro call pushes a frame, a for frame is cleared at every
 * iteration as in jinja2), the output buffer (also used as scratch to build strings), the
 * operators, attribute and item access, calls, and the limits on output, memory, steps and
 * macro depth.
 *
 * Errors unwind with longjmp to jrender_run(), which frees every object still on the render's
 * list, so an error in the middle of an expression leaks nothing. Called on any thread; a
 * render touches nothing shared but the immutable AST.
 *
 * Semantics follow @huggingface/jinja where it renders (that is what the fixtures come from)
 * and Python jinja2 where @huggingface/jinja raises or is plainly off from jinja2 (Python
 * modulo and floor division, deep equality, iterating strings and undefined values).
 */
#include "jinja.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum { EX_NORMAL, EX_BREAK, EX_CONTINUE };

/* Nesting of eval()/exec() calls; each level costs well under 1 KiB of stack. */
#define JR_MAX_DEPTH 1000

static struct jv eval(struct jrender *r, const struct jnode *n);
static int exec_block(struct jrender *r, const struct jnode *n);

/* ------------------------------------------------------------------ failure, memory, output */

void jr_fail(struct jrender *r, const struct jnode *at, enum ll_status code, const char *fmt, ...)
{
    char msg[420];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!at)
        at = r->cur;
    if (at)
        ll_err_set(r->err, code, "line %u, column %u: %s", at->line, at->col, msg);
    else
        ll_err_set(r->err, code, "%s", msg);
    r->status = code;
    longjmp(r->jb, 1);
}

void jr_account(struct jrender *r, const struct jnode *at, size_t bytes)
{
    r->live_bytes += bytes;
    if (r->live_bytes > r->lim->max_memory)
        jr_fail(r, at, LL_ETOOLONG, "template used more than %zu bytes of memory",
                r->lim->max_memory);
}

void *jr_malloc(struct jrender *r, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        jr_fail(r, NULL, LL_ENOMEM, "out of memory");
    return p;
}

void *jr_realloc(struct jrender *r, void *p, size_t bytes)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q)
        jr_fail(r, NULL, LL_ENOMEM, "out of memory");
    return q;
}

void jr_step(struct jrender *r, const struct jnode *at, uint64_t n)
{
    if (n > r->lim->max_steps - r->steps)
        jr_fail(r, at, LL_ETOOLONG, "template exceeded %llu loop iterations",
                (unsigned long long)r->lim->max_steps);
    r->steps += n;
}

void jr_emit(struct jrender *r, const struct jnode *at, const char *s, size_t len)
{
    if (!len)
        return;
    if (len > r->lim->max_output - r->out.len)
        jr_fail(r, at, LL_ETOOLONG, "rendered text exceeds %zu bytes", r->lim->max_output);
    if (!ll_buf_append(&r->out, s, len))
        jr_fail(r, NULL, LL_ENOMEM, "out of memory");
}

struct jv jr_take(struct jrender *r, size_t mark)
{
    struct jv v = jv_str(r, r->out.data ? r->out.data + mark : "", r->out.len - mark);
    r->out.len = mark;
    return v;
}

/* ------------------------------------------------------------------ scopes */

static void push_frame(struct jrender *r, size_t parent)
{
    if (r->nframes == r->frames_cap) {
        size_t cap = r->frames_cap ? r->frames_cap * 2 : 16;
        r->frames = jr_realloc(r, r->frames, cap * sizeof *r->frames);
        r->frames_cap = cap;
    }
    r->frames[r->nframes++] = (struct jframe){.base = r->nvars, .parent = parent};
}

/* Release the variables of the top frame from index `from` on. */
static void drop_vars(struct jrender *r, size_t from)
{
    while (r->nvars > from) {
        r->nvars--;
        jv_release(r, r->vars[r->nvars].v);
    }
}

static void pop_frame(struct jrender *r)
{
    drop_vars(r, r->frames[r->nframes - 1].base);
    r->nframes--;
}

static struct jv *lookup(struct jrender *r, const char *name)
{
    size_t f = r->nframes - 1;
    size_t end = r->nvars;
    for (;;) {
        for (size_t i = end; i > r->frames[f].base; i--)
            if (strcmp(r->vars[i - 1].name, name) == 0)
                return &r->vars[i - 1].v;
        if (f == 0)
            return NULL;
        size_t parent = r->frames[f].parent;
        end = r->frames[parent + 1].base;
        f = parent;
    }
}

/* Set a variable of the top frame (takes ownership of v). */
static void set_var(struct jrender *r, const char *name, struct jv v)
{
    for (size_t i = r->nvars; i > r->frames[r->nframes - 1].base; i--)
        if (strcmp(r->vars[i - 1].name, name) == 0) {
            struct jv old = r->vars[i - 1].v;
            r->vars[i - 1].v = v;
            jv_release(r, old);
            return;
        }
    if (r->nvars == r->vars_cap) {
        size_t cap = r->vars_cap ? r->vars_cap * 2 : 32;
        struct jvar *p = realloc(r->vars, cap * sizeof *p);
        if (!p) {
            jv_release(r, v);
            jr_fail(r, NULL, LL_ENOMEM, "out of memory");
        }
        r->vars = p;
        r->vars_cap = cap;
    }
    r->vars[r->nvars++] = (struct jvar){.name = name, .v = v};
}

/* ------------------------------------------------------------------ helpers */

static bool is_num(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static double num_of(struct jv v)
{
    return v.kind == JV_INT ? (double)v.u.i : v.kind == JV_FLOAT ? v.u.f : (double)v.u.b;
}

static int64_t int_of(struct jv v)
{
    return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? (int64_t)v.u.b : 0;
}

_Noreturn static void fail_undefined(struct jrender *r, const struct jnode *at, struct jv v)
{
    if (v.u.name)
        jr_fail(r, at, LL_ETEMPLATE, "'%s' is undefined", v.u.name);
    jr_fail(r, at, LL_ETEMPLATE, "value is undefined");
}

_Noreturn static void fail_operands(struct jrender *r, const struct jnode *at, const char *op,
                                    struct jv a, struct jv b)
{
    if (a.kind == JV_UNDEF)
        fail_undefined(r, at, a);
    if (b.kind == JV_UNDEF)
        fail_undefined(r, at, b);
    jr_fail(r, at, LL_ETEMPLATE, "unsupported operand types for %s: %s and %s", op,
            jv_kind_name(a), jv_kind_name(b));
}

static void eval_args(struct jrender *r, const struct jnode *const *items, uint32_t n,
                      struct jargs *a)
{
    a->n = a->nkw = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct jnode *it = items[i];
        if (it->kind == JN_KWARG) {
            a->kwname[a->nkw] = it->name;
            a->kw[a->nkw++] = eval(r, it->a);
        } else {
            a->pos[a->n++] = eval(r, it);
        }
    }
}

static void release_args(struct jrender *r, struct jargs *a)
{
    for (size_t i = 0; i < a->n; i++)
        jv_release(r, a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++)
        jv_release(r, a->kw[i]);
}

struct jv jr_apply(struct jrender *r, const struct jnode *at, const struct jbuiltin *b,
                   struct jv self, const struct jargs *args)
{
    if (b->params[0] == '*')
        return b->fn(r, at, self, NULL, args);
    const char *names[8];
    size_t lens[8], np = 0;
    for (const char *s = b->params; *s && np < 8;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        names[np] = s;
        lens[np++] = l;
        s += l + (e ? 1 : 0);
    }
    struct jv argv[8];
    for (size_t i = 0; i < 8; i++)
        argv[i] = jv_missing();
    if (args->n > np)
        jr_fail(r, at, LL_ETEMPLATE, "%s() takes at most %zu argument%s (%zu given)", b->name, np,
                np == 1 ? "" : "s", args->n);
    for (size_t i = 0; i < args->n; i++)
        argv[i] = args->pos[i];
    for (size_t k = 0; k < args->nkw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (strlen(args->kwname[k]) == lens[i] && !memcmp(args->kwname[k], names[i], lens[i]))
                break;
        if (i == np)
            jr_fail(r, at, LL_ETEMPLATE, "%s() got an unexpected keyword argument '%s'", b->name,
                    args->kwname[k]);
        if (argv[i].kind != JV_MISSING)
            jr_fail(r, at, LL_ETEMPLATE, "%s() got multiple values for argument '%s'", b->name,
                    args->kwname[k]);
        argv[i] = args->kw[k];
    }
    return b->fn(r, at, self, argv, args);
}

static struct jv call_macro(struct jrender *r, const struct jnode *at, const struct jnode *m,
                            const struct jargs *args)
{
    if (++r->call_depth > r->lim->max_call_depth)
        jr_fail(r, at, LL_ETOOLONG, "macro calls nested more than %d deep",
                r->lim->max_call_depth);
    jr_step(r, at, 1);
    if (args->n > m->n)
        jr_fail(r, at, LL_ETEMPLATE, "macro '%s' takes at most %u argument%s (%zu given)", m->name,
                m->n, m->n == 1 ? "" : "s", args->n);
    for (size_t k = 0; k < args->nkw; k++) {
        uint32_t i;
        for (i = 0; i < m->n && strcmp(m->items[i]->name, args->kwname[k]) != 0; i++)
            ;
        if (i == m->n)
            jr_fail(r, at, LL_ETEMPLATE, "macro '%s' has no parameter '%s'", m->name,
                    args->kwname[k]);
        if (i < args->n)
            jr_fail(r, at, LL_ETEMPLATE, "macro '%s' got multiple values for '%s'", m->name,
                    args->kwname[k]);
    }
    /* the macro body sees its arguments, then the caller's scope (as @huggingface/jinja) */
    push_frame(r, r->nframes - 1);
    for (uint32_t i = 0; i < m->n; i++) {
        const struct jnode *p = m->items[i];
        struct jv v = jv_missing();
        if (i < args->n)
            v = jv_retain(args->pos[i]);
        for (size_t k = 0; v.kind == JV_MISSING && k < args->nkw; k++)
            if (!strcmp(args->kwname[k], p->name))
                v = jv_retain(args->kw[k]);
        if (v.kind == JV_MISSING)
            v = p->kind == JN_KWARG ? eval(r, p->a) : jv_undef(p->name);
        set_var(r, p->name, v);
    }
    size_t mark = jr_mark(r);
    exec_block(r, m->b);
    pop_frame(r);
    r->call_depth--;
    return jr_take(r, mark);
}

struct jv jr_call(struct jrender *r, const struct jnode *at, struct jv fn, const struct jargs *args)
{
    if (fn.kind == JV_UNDEF)
        fail_undefined(r, at, fn);
    if (fn.kind != JV_FUNC)
        jr_fail(r, at, LL_ETEMPLATE, "a %s is not callable", jv_kind_name(fn));
    if (fn.u.fn->b)
        return jr_apply(r, at, fn.u.fn->b, fn.u.fn->self, args);
    return call_macro(r, at, fn.u.fn->macro, args);
}

bool jr_run_test(struct jrender *r, const struct jnode *at, const char *name, struct jv v,
                 const struct jv *extra, size_t nextra)
{
    const struct jbuiltin *t = jtest_find(name);
    if (!t)
        jr_fail(r, at, LL_ETEMPLATE, "unknown test '%s'", name);
    struct jargs a = {.n = nextra};
    for (size_t i = 0; i < nextra && i < JMAX_ARGS; i++)
        a.pos[i] = extra[i];
    struct jv res = jr_apply(r, at, t, v, &a);
    bool b = jv_truthy(res);
    jv_release(r, res);
    return b;
}

/* ------------------------------------------------------------------ access */

struct jv jr_getattr(struct jrender *r, const struct jnode *at, struct jv obj, const char *name,
                     const char *uname)
{
    switch (obj.kind) {
    case JV_DICT:
    case JV_NS: {
        struct jv *v = jv_dict_get(obj, name, strlen(name));
        if (v)
            return jv_retain(*v);
        break;
    }
    case JV_LOOP: {
        const struct jloop *lp = obj.u.lp;
        int64_t i = lp->index0, n = lp->length;
        if (!strcmp(name, "index"))
            return jv_int(i + 1);
        if (!strcmp(name, "index0"))
            return jv_int(i);
        if (!strcmp(name, "revindex"))
            return jv_int(n - i);
        if (!strcmp(name, "revindex0"))
            return jv_int(n - i - 1);
        if (!strcmp(name, "first"))
            return jv_bool(i == 0);
        if (!strcmp(name, "last"))
            return jv_bool(i == n - 1);
        if (!strcmp(name, "length"))
            return jv_int(n);
        if (!strcmp(name, "depth"))
            return jv_int(1);
        if (!strcmp(name, "depth0"))
            return jv_int(0);
        if (!strcmp(name, "previtem"))
            return i > 0 ? jv_retain(lp->items->v[i - 1]) : jv_undef("previtem");
        if (!strcmp(name, "nextitem"))
            return i + 1 < n ? jv_retain(lp->items->v[i + 1]) : jv_undef("nextitem");
        break;
    }
    default:
        break;
    }
    if (obj.kind != JV_NS && obj.kind != JV_UNDEF && obj.kind != JV_NONE) {
        const struct jbuiltin *m = jmethod_find(obj.kind, name);
        if (m)
            return jv_func(r, m, NULL, obj);
    }
    (void)at;
    return jv_undef(uname);
}

/* Byte offset of code point index `idx` in s (idx <= count). */
static size_t cp_offset(const char *s, size_t len, size_t idx)
{
    size_t i = 0;
    while (idx-- > 0 && i < len)
        jutf8_next(s, len, &i);
    return i;
}

struct jv jr_getitem(struct jrender *r, const struct jnode *at, struct jv obj, struct jv key)
{
    /* an undefined result may name the key only if the key outlives it (a template literal) */
    const char *uname = key.kind == JV_STR && key.u.s->h.rc < 0 ? key.u.s->s : NULL;
    switch (obj.kind) {
    case JV_DICT:
    case JV_NS:
        if (key.kind == JV_STR) {
            struct jv *v = jv_dict_get(obj, key.u.s->s, key.u.s->len);
            if (v)
                return jv_retain(*v);
            if (obj.kind == JV_DICT)
                return jr_getattr(r, at, obj, key.u.s->s, uname);
            return jv_undef(uname);
        }
        return jv_undef(NULL);
    case JV_LIST:
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            int64_t i = int_of(key), n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return jv_retain(obj.u.l->v[i]);
            return jv_undef(NULL);
        }
        break;
    case JV_STR:
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            int64_t i = int_of(key), n = (int64_t)jutf8_count(obj.u.s->s, obj.u.s->len);
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return jv_undef(NULL);
            size_t b = cp_offset(obj.u.s->s, obj.u.s->len, (size_t)i), e = b;
            jutf8_next(obj.u.s->s, obj.u.s->len, &e);
            return jv_str(r, obj.u.s->s + b, e - b);
        }
        break;
    case JV_LOOP:
        break;
    default:
        return jv_undef(uname);
    }
    if (key.kind == JV_STR)
        return jr_getattr(r, at, obj, key.u.s->s, uname);
    return jv_undef(NULL);
}

static bool slice_bound(struct jrender *r, const struct jnode *at, struct jv v, int64_t *out)
{
    if (v.kind == JV_NONE || v.kind == JV_UNDEF || v.kind == JV_MISSING)
        return false;
    if (v.kind != JV_INT && v.kind != JV_BOOL)
        jr_fail(r, at, LL_ETEMPLATE, "slice indices must be integers, not %s", jv_kind_name(v));
    *out = int_of(v);
    return true;
}

static struct jv do_slice(struct jrender *r, const struct jnode *at, struct jv obj, struct jv vs,
                          struct jv ve, struct jv vst)
{
    int64_t step = 1, start, stop;
    slice_bound(r, at, vst, &step);
    if (step == 0)
        jr_fail(r, at, LL_ETEMPLATE, "slice step cannot be zero");
    if (obj.kind != JV_LIST && obj.kind != JV_STR)
        return jv_undef(NULL); /* like any subscript of a value without items */
    bool ascii = true;
    int64_t n;
    if (obj.kind == JV_LIST) {
        n = (int64_t)obj.u.l->n;
    } else {
        for (size_t i = 0; i < obj.u.s->len && ascii; i++)
            ascii = (unsigned char)obj.u.s->s[i] < 0x80;
        n = ascii ? (int64_t)obj.u.s->len : (int64_t)jutf8_count(obj.u.s->s, obj.u.s->len);
    }
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
    if (slice_bound(r, at, vs, &start)) {
        if (start < 0)
            start += n;
        start = start < lower ? lower : start > upper ? upper : start;
    } else {
        start = step > 0 ? lower : upper;
    }
    if (slice_bound(r, at, ve, &stop)) {
        if (stop < 0)
            stop += n;
        stop = stop < lower ? lower : stop > upper ? upper : stop;
    } else {
        stop = step > 0 ? upper : lower;
    }
    if (obj.kind == JV_LIST) {
        struct jv out = jv_list(r, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            jv_list_push(r, out, jv_retain(obj.u.l->v[i]));
        return out;
    }
    const char *s = obj.u.s->s;
    size_t len = obj.u.s->len;
    if (step == 1) {
        if (stop <= start)
            return jv_str(r, "", 0);
        size_t b = ascii ? (size_t)start : cp_offset(s, len, (size_t)start);
        size_t e = ascii ? (size_t)stop : b + cp_offset(s + b, len - b, (size_t)(stop - start));
        return jv_str(r, s + b, e - b);
    }
    /* general step: byte offsets of every code point, kept in a scratch string value */
    struct jv offs = jv_str(r, NULL, (size_t)(n + 1) * sizeof(size_t));
    size_t *off = (size_t *)(void *)offs.u.s->s;
    size_t i = 0;
    for (int64_t k = 0; k < n; k++) {
        off[k] = i;
        jutf8_next(s, len, &i);
    }
    off[n] = len;
    size_t mark = jr_mark(r);
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
        jr_emit(r, at, s + off[k], off[k + 1] - off[k]);
    jv_release(r, offs);
    return jr_take(r, mark);
}

struct jv jr_iter_list(struct jrender *r, const struct jnode *at, struct jv v)
{
    switch (v.kind) {
    case JV_LIST:
        return jv_retain(v);
    case JV_DICT: {
        struct jv l = jv_list(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) {
            struct jv k = {.kind = JV_STR};
            k.u.s = v.u.d->k[i];
            jv_list_push(r, l, jv_retain(k));
        }
        return l;
    }
    case JV_STR: {
        struct jv l = jv_list(r, 0);
        for (size_t i = 0; i < v.u.s->len;) {
            size_t b = i;
            jutf8_next(v.u.s->s, v.u.s->len, &i);
            jv_list_push(r, l, jv_str(r, v.u.s->s + b, i - b));
        }
        return l;
    }
    case JV_UNDEF:
        return jv_list(r, 0);
    default:
        jr_fail(r, at, LL_ETEMPLATE, "cannot iterate over a %s", jv_kind_name(v));
    }
}

/* ------------------------------------------------------------------ operators */

static int cmp_str(const struct jstr *a, const struct jstr *b, bool cs)
{
    if (cs) {
        size_t n = a->len < b->len ? a->len : b->len;
        int c = memcmp(a->s, b->s, n);
        return c ? (c < 0 ? -1 : 1) : (a->len > b->len) - (a->len < b->len);
    }
    size_t i = 0, j = 0;
    while (i < a->len && j < b->len) {
        int32_t x = jutf8_next(a->s, a->len, &i), y = jutf8_next(b->s, b->len, &j);
        if (x >= 'A' && x <= 'Z')
            x += 32;
        if (y >= 'A' && y <= 'Z')
            y += 32;
        if (x != y)
            return x < y ? -1 : 1;
    }
    return (i < a->len) - (j < b->len);
}

static int compare_at(struct jrender *r, const struct jnode *at, struct jv a, struct jv b, bool cs,
                      int depth)
{
    if (is_num(a) && is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return (int_of(a) > int_of(b)) - (int_of(a) < int_of(b));
        double x = num_of(a), y = num_of(b);
        return (x > y) - (x < y);
    }
    if (a.kind == JV_STR && b.kind == JV_STR)
        return cmp_str(a.u.s, b.u.s, cs);
    if (a.kind == JV_LIST && b.kind == JV_LIST && depth < 512) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return compare_at(r, at, a.u.l->v[i], b.u.l->v[i], cs, depth + 1);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    if (a.kind == JV_UNDEF)
        fail_undefined(r, at, a);
    if (b.kind == JV_UNDEF)
        fail_undefined(r, at, b);
    jr_fail(r, at, LL_ETEMPLATE, "cannot compare %s with %s", jv_kind_name(a), jv_kind_name(b));
}

int jr_compare(struct jrender *r, const struct jnode *at, struct jv a, struct jv b,
               bool case_sensitive)
{
    return compare_at(r, at, a, b, case_sensitive, 0);
}

bool jr_contains(struct jrender *r, const struct jnode *at, struct jv hay, struct jv needle)
{
    switch (hay.kind) {
    case JV_STR:
        if (needle.kind != JV_STR)
            jr_fail(r, at, LL_ETEMPLATE, "'in <string>' requires a string on the left, not %s",
                    jv_kind_name(needle));
        if (needle.u.s->len == 0)
            return true;
        return memmem(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(hay.u.l->v[i], needle))
                return true;
        return false;
    case JV_DICT:
    case JV_NS:
        return needle.kind == JV_STR && jv_dict_get(hay, needle.u.s->s, needle.u.s->len) != NULL;
    case JV_UNDEF:
        return false;
    default:
        jr_fail(r, at, LL_ETEMPLATE, "'in' needs a string, list or dict on the right, not %s",
                jv_kind_name(hay));
    }
}

static struct jv num_result(double f, bool as_int)
{
    if (as_int && f >= -9.2e18 && f <= 9.2e18)
        return jv_int((int64_t)f);
    return jv_float(f);
}

static struct jv repeat(struct jrender *r, const struct jnode *at, struct jv seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq.kind == JV_STR) {
        size_t mark = jr_mark(r);
        if (seq.u.s->len && (uint64_t)times > r->lim->max_output / seq.u.s->len)
            jr_fail(r, at, LL_ETOOLONG, "string repetition exceeds %zu bytes", r->lim->max_output);
        for (int64_t i = 0; i < times; i++)
            jr_emit(r, at, seq.u.s->s, seq.u.s->len);
        return jr_take(r, mark);
    }
    if (seq.u.l->n && (uint64_t)times > r->lim->max_steps / seq.u.l->n)
        jr_fail(r, at, LL_ETOOLONG, "list repetition exceeds %llu items",
                (unsigned long long)r->lim->max_steps);
    jr_step(r, at, (uint64_t)times * seq.u.l->n);
    struct jv out = jv_list(r, 0);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++)
            jv_list_push(r, out, jv_retain(seq.u.l->v[k]));
    return out;
}

static struct jv arith(struct jrender *r, const struct jnode *at, uint8_t op, struct jv a,
                       struct jv b)
{
    static const char *const names[] = {[JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_MUL] = "*",
                                        [JOP_DIV] = "/", [JOP_FLOORDIV] = "//", [JOP_MOD] = "%",
                                        [JOP_POW] = "**"};
    if (is_num(a) && is_num(b)) {
        bool ints = a.kind != JV_FLOAT && b.kind != JV_FLOAT;
        int64_t x = int_of(a), y = int_of(b), z;
        double fx = num_of(a), fy = num_of(b);
        switch (op) {
        case JOP_ADD:
            if (ints && !__builtin_add_overflow(x, y, &z))
                return jv_int(z);
            return jv_float(fx + fy);
        case JOP_SUB:
            if (ints && !__builtin_sub_overflow(x, y, &z))
                return jv_int(z);
            return jv_float(fx - fy);
        case JOP_MUL:
            if (ints && !__builtin_mul_overflow(x, y, &z))
                return jv_int(z);
            return jv_float(fx * fy);
        case JOP_DIV:
            if (fy == 0)
                jr_fail(r, at, LL_ETEMPLATE, "division by zero");
            return jv_float(fx / fy);
        case JOP_FLOORDIV:
            if (fy == 0)
                jr_fail(r, at, LL_ETEMPLATE, "integer division or modulo by zero");
            if (ints && !(x == INT64_MIN && y == -1)) {
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    q--;
                return jv_int(q);
            }
            return num_result(floor(fx / fy), false);
        case JOP_MOD:
            if (fy == 0)
                jr_fail(r, at, LL_ETEMPLATE, "integer division or modulo by zero");
            if (ints && !(x == INT64_MIN && y == -1)) {
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                return jv_int(m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return jv_float(m);
            }
        case JOP_POW:
            if (ints && y >= 0) {
                int64_t res = 1, base = x;
                bool overflow = false;
                for (int64_t e = y; e > 0 && !overflow; e >>= 1) {
                    if (e & 1)
                        overflow |= __builtin_mul_overflow(res, base, &res);
                    if (e > 1)
                        overflow |= __builtin_mul_overflow(base, base, &base);
                }
                if (!overflow)
                    return jv_int(res);
            }
            if (fx == 0 && fy < 0)
                jr_fail(r, at, LL_ETEMPLATE, "0.0 cannot be raised to a negative power");
            return jv_float(pow(fx, fy));
        }
    }
    if (op == JOP_ADD) {
        if (a.kind == JV_STR && b.kind == JV_STR) {
            size_t mark = jr_mark(r);
            jr_emit(r, at, a.u.s->s, a.u.s->len);
            jr_emit(r, at, b.u.s->s, b.u.s->len);
            return jr_take(r, mark);
        }
        if (a.kind == JV_LIST && b.kind == JV_LIST) {
            struct jv out = jv_list(r, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++)
                jv_list_push(r, out, jv_retain(a.u.l->v[i]));
            for (size_t i = 0; i < b.u.l->n; i++)
                jv_list_push(r, out, jv_retain(b.u.l->v[i]));
            return out;
        }
        /* like @huggingface/jinja: a string plus a number or boolean concatenates */
        if ((a.kind == JV_STR && is_num(b)) || (b.kind == JV_STR && is_num(a))) {
            size_t mark = jr_mark(r);
            jv_write(r, at, a, JW_STR);
            jv_write(r, at, b, JW_STR);
            return jr_take(r, mark);
        }
    }
    if (op == JOP_MUL) {
        if ((a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat(r, at, a, int_of(b));
        if ((b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat(r, at, b, int_of(a));
    }
    if (op == JOP_MOD && a.kind == JV_STR) {
        if (b.kind == JV_LIST && b.u.l->tuple)
            return jr_percent_format(r, at, a, b.u.l->v, b.u.l->n);
        return jr_percent_format(r, at, a, &b, 1);
    }
    fail_operands(r, at, names[op], a, b);
}

static struct jv binop(struct jrender *r, const struct jnode *n, struct jv a, struct jv b)
{
    switch (n->op) {
    case JOP_EQ:
        return jv_bool(jv_equal(a, b));
    case JOP_NE:
        return jv_bool(!jv_equal(a, b));
    case JOP_LT:
        return jv_bool(jr_compare(r, n, a, b, true) < 0);
    case JOP_LE:
        return jv_bool(jr_compare(r, n, a, b, true) <= 0);
    case JOP_GT:
        return jv_bool(jr_compare(r, n, a, b, true) > 0);
    case JOP_GE:
        return jv_bool(jr_compare(r, n, a, b, true) >= 0);
    case JOP_IN:
        return jv_bool(jr_contains(r, n, b, a));
    case JOP_NOTIN:
        return jv_bool(!jr_contains(r, n, b, a));
    case JOP_TILDE: {
        size_t mark = jr_mark(r);
        jv_write(r, n, a, JW_STR);
        jv_write(r, n, b, JW_STR);
        return jr_take(r, mark);
    }
    default:
        return arith(r, n, n->op, a, b);
    }
}

/* ------------------------------------------------------------------ expressions */

__attribute__((noinline)) static struct jv eval_call(struct jrender *r, const struct jnode *n)
{
    const struct jnode *callee = n->a;
    struct jargs args;
    struct jv res;
    if (callee->kind == JN_ATTR) {
        struct jv obj = eval(r, callee->a);
        struct jv *slot = NULL;
        if (obj.kind == JV_DICT || obj.kind == JV_NS)
            slot = jv_dict_get(obj, callee->name, strlen(callee->name));
        const struct jbuiltin *m = NULL;
        if (!slot) {
            if (obj.kind != JV_NS && obj.kind != JV_UNDEF && obj.kind != JV_NONE)
                m = jmethod_find(obj.kind, callee->name);
            if (!m) {
                if (obj.kind == JV_UNDEF && obj.u.name)
                    jr_fail(r, n, LL_ETEMPLATE, "cannot call '%s' on '%s', which is undefined",
                            callee->name, obj.u.name);
                jr_fail(r, n, LL_ETEMPLATE, "%s has no method '%s'", jv_kind_name(obj),
                        callee->name);
            }
        }
        eval_args(r, (const struct jnode *const *)n->items, n->n, &args);
        r->cur = n;
        res = m ? jr_apply(r, n, m, obj, &args) : jr_call(r, n, *slot, &args);
        release_args(r, &args);
        jv_release(r, obj);
        return res;
    }
    if (callee->kind == JN_NAME) {
        struct jv *slot = lookup(r, callee->name);
        if (!slot) {
            const struct jbuiltin *g = jglobal_find(callee->name);
            if (!g)
                jr_fail(r, n, LL_ETEMPLATE, "'%s' is undefined (unknown function)", callee->name);
            eval_args(r, (const struct jnode *const *)n->items, n->n, &args);
            r->cur = n;
            res = jr_apply(r, n, g, jv_missing(), &args);
            release_args(r, &args);
            return res;
        }
    }
    struct jv fn = eval(r, callee);
    eval_args(r, (const struct jnode *const *)n->items, n->n, &args);
    r->cur = n;
    res = jr_call(r, n, fn, &args);
    release_args(r, &args);
    jv_release(r, fn);
    return res;
}

/* Filters and tests (kept out of eval() so that its frame stays small: eval recurses). */
__attribute__((noinline)) static struct jv eval_filter(struct jrender *r, const struct jnode *n)
{
    struct jv o = eval(r, n->a);
    struct jargs args;
    eval_args(r, (const struct jnode *const *)n->items, n->n, &args);
    r->cur = n;
    struct jv v = jr_apply(r, n, n->fn, o, &args);
    release_args(r, &args);
    jv_release(r, o);
    if (n->kind == JN_TEST) {
        bool b = jv_truthy(v) != (n->op != 0);
        jv_release(r, v);
        return jv_bool(b);
    }
    return v;
}

static struct jv eval_node(struct jrender *r, const struct jnode *n);

/* Every expression goes through here: the recursion depth is bounded so that no template
 * (left-deep operator chains, recursive macros) can exhaust the C stack. */
static struct jv eval(struct jrender *r, const struct jnode *n)
{
    if (++r->depth > JR_MAX_DEPTH)
        jr_fail(r, n, LL_ETOOLONG, "template evaluation nested more than %d levels deep",
                JR_MAX_DEPTH);
    struct jv v = eval_node(r, n);
    r->depth--;
    return v;
}

static struct jv eval_node(struct jrender *r, const struct jnode *n)
{
    r->cur = n;
    switch (n->kind) {
    case JN_LIT:
        return n->lit;
    case JN_NAME: {
        struct jv *slot = lookup(r, n->name);
        if (slot)
            return jv_retain(*slot);
        const struct jbuiltin *g = jglobal_find(n->name);
        if (g)
            return jv_func(r, g, NULL, jv_missing());
        return jv_undef(n->name);
    }
    case JN_LIST:
    case JN_TUPLE: {
        struct jv l = jv_list(r, n->n);
        l.u.l->tuple = n->kind == JN_TUPLE;
        for (uint32_t i = 0; i < n->n; i++)
            jv_list_push(r, l, eval(r, n->items[i]));
        return l;
    }
    case JN_DICT: {
        struct jv d = jv_dict(r, false);
        for (uint32_t i = 0; i + 1 < n->n; i += 2) {
            struct jv k = eval(r, n->items[i]);
            if (k.kind != JV_STR)
                jr_fail(r, n->items[i], LL_ETEMPLATE, "dict keys must be strings, not %s",
                        jv_kind_name(k));
            jv_dict_set(r, d, k, eval(r, n->items[i + 1]));
            jv_release(r, k);
        }
        return d;
    }
    case JN_ATTR: {
        struct jv o = eval(r, n->a);
        struct jv v = jr_getattr(r, n, o, n->name, n->name);
        jv_release(r, o);
        return v;
    }
    case JN_ITEM: {
        struct jv o = eval(r, n->a);
        struct jv k = eval(r, n->b);
        struct jv v = jr_getitem(r, n, o, k);
        jv_release(r, k);
        jv_release(r, o);
        return v;
    }
    case JN_SLICE: {
        struct jv o = eval(r, n->a);
        struct jv s = n->b ? eval(r, n->b) : jv_missing();
        struct jv e = n->c ? eval(r, n->c) : jv_missing();
        struct jv st = n->d ? eval(r, n->d) : jv_missing();
        struct jv v = do_slice(r, n, o, s, e, st);
        jv_release(r, s);
        jv_release(r, e);
        jv_release(r, st);
        jv_release(r, o);
        return v;
    }
    case JN_CALL:
        return eval_call(r, n);
    case JN_FILTER:
    case JN_TEST:
        return eval_filter(r, n);
    case JN_NOT: {
        struct jv v = eval(r, n->a);
        bool b = !jv_truthy(v);
        jv_release(r, v);
        return jv_bool(b);
    }
    case JN_NEG:
    case JN_POS: {
        struct jv v = eval(r, n->a);
        if (v.kind == JV_FLOAT)
            return jv_float(n->kind == JN_NEG ? -v.u.f : v.u.f);
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            int64_t i = int_of(v);
            if (n->kind == JN_POS)
                return jv_int(i);
            return i == INT64_MIN ? jv_float(-(double)i) : jv_int(-i);
        }
        if (v.kind == JV_UNDEF)
            fail_undefined(r, n, v);
        jr_fail(r, n, LL_ETEMPLATE, "bad operand type for unary %s: %s",
                n->kind == JN_NEG ? "-" : "+", jv_kind_name(v));
    }
    case JN_BINOP: {
        struct jv a = eval(r, n->a);
        struct jv b = eval(r, n->b);
        r->cur = n;
        struct jv v = binop(r, n, a, b);
        jv_release(r, a);
        jv_release(r, b);
        return v;
    }
    case JN_AND:
    case JN_OR: {
        struct jv a = eval(r, n->a);
        if (jv_truthy(a) == (n->kind == JN_OR))
            return a;
        jv_release(r, a);
        return eval(r, n->b);
    }
    case JN_COND: {
        struct jv c = eval(r, n->a);
        bool t = jv_truthy(c);
        jv_release(r, c);
        if (t)
            return eval(r, n->b);
        return n->c ? eval(r, n->c) : jv_undef(NULL);
    }
    case JN_CAPTURED:
        return jv_retain(r->captured);
    default:
        jr_fail(r, n, LL_ETEMPLATE, "internal error: node %d is not an expression", n->kind);
    }
}

/* ------------------------------------------------------------------ statements */

static void assign(struct jrender *r, const struct jnode *at, const struct jnode *t, struct jv v)
{
    if (t->kind == JN_NAME) {
        set_var(r, t->name, v);
        return;
    }
    if (t->kind == JN_TUPLE) {
        if (v.kind != JV_LIST || v.u.l->n != t->n) {
            size_t have = v.kind == JV_LIST ? v.u.l->n : 0;
            const char *kind = jv_kind_name(v);
            jv_release(r, v);
            if (have || !strcmp(kind, "list") || !strcmp(kind, "tuple"))
                jr_fail(r, at, LL_ETEMPLATE, "cannot unpack %zu values into %u names", have, t->n);
            jr_fail(r, at, LL_ETEMPLATE, "cannot unpack a %s into %u names", kind, t->n);
        }
        for (uint32_t i = 0; i < t->n; i++)
            set_var(r, t->items[i]->name, jv_retain(v.u.l->v[i]));
        jv_release(r, v);
        return;
    }
    /* ns.attr = v */
    struct jv *ns = lookup(r, t->a->name);
    if (!ns || ns->kind != JV_NS) {
        const char *kind = ns ? jv_kind_name(*ns) : "undefined value";
        jv_release(r, v);
        jr_fail(r, at, LL_ETEMPLATE,
                "cannot set attribute '%s' of '%s' (a %s): only namespace() objects can be "
                "assigned to",
                t->name, t->a->name, kind);
    }
    struct jv nsv = jv_retain(*ns);
    struct jv key = jv_cstr(r, t->name);
    jv_dict_set(r, nsv, key, v);
    jv_release(r, key);
    jv_release(r, nsv);
}

static int exec_for(struct jrender *r, const struct jnode *n)
{
    struct jv it = eval(r, n->b);
    struct jv items = jr_iter_list(r, n->b, it);
    jv_release(r, it);
    size_t parent = r->nframes - 1;
    push_frame(r, parent);
    size_t base = r->nvars;
    if (n->c) { /* for x in xs if cond: filter first so that loop.length counts what is visited */
        struct jv kept = jv_list(r, 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jr_step(r, n, 1);
            drop_vars(r, base);
            assign(r, n, n->a, jv_retain(items.u.l->v[i]));
            struct jv c = eval(r, n->c);
            bool keep = jv_truthy(c);
            jv_release(r, c);
            if (keep)
                jv_list_push(r, kept, jv_retain(items.u.l->v[i]));
        }
        jv_release(r, items);
        items = kept;
    }
    struct jv loop = jv_loop(r, items);
    int rc = EX_NORMAL;
    size_t count = items.u.l->n;
    for (size_t i = 0; i < count; i++) {
        jr_step(r, n, 1);
        drop_vars(r, base);
        loop.u.lp->index0 = (int64_t)i;
        set_var(r, "loop", jv_retain(loop));
        assign(r, n, n->a, jv_retain(items.u.l->v[i]));
        rc = exec_block(r, n->d);
        if (rc == EX_BREAK)
            break;
    }
    rc = EX_NORMAL;
    pop_frame(r);
    jv_release(r, loop);
    jv_release(r, items);
    if (count == 0 && n->e)
        rc = exec_block(r, n->e);
    return rc;
}

static int exec_node(struct jrender *r, const struct jnode *n);

static int exec(struct jrender *r, const struct jnode *n)
{
    if (++r->depth > JR_MAX_DEPTH)
        jr_fail(r, n, LL_ETOOLONG, "template evaluation nested more than %d levels deep",
                JR_MAX_DEPTH);
    int rc = exec_node(r, n);
    r->depth--;
    return rc;
}

static int exec_node(struct jrender *r, const struct jnode *n)
{
    r->cur = n;
    switch (n->kind) {
    case JN_TEXT:
        jr_emit(r, n, n->lit.u.s->s, n->lit.u.s->len);
        return EX_NORMAL;
    case JN_OUTPUT: {
        struct jv v = eval(r, n->a);
        jv_write(r, n->a, v, JW_PRINT);
        jv_release(r, v);
        return EX_NORMAL;
    }
    case JN_IF:
        while (n) {
            struct jv c = eval(r, n->a);
            bool t = jv_truthy(c);
            jv_release(r, c);
            if (t)
                return exec_block(r, n->b);
            if (!n->c)
                return EX_NORMAL;
            if (n->c->kind != JN_IF)
                return exec_block(r, n->c);
            n = n->c;
        }
        return EX_NORMAL;
    case JN_FOR:
        return exec_for(r, n);
    case JN_SET:
        assign(r, n, n->a, eval(r, n->b));
        return EX_NORMAL;
    case JN_SETBLOCK: {
        size_t mark = jr_mark(r);
        int rc = exec_block(r, n->b);
        struct jv v = jr_take(r, mark);
        if (n->c) {
            struct jv saved = r->captured;
            r->captured = v;
            struct jv f = eval(r, n->c);
            r->captured = saved;
            jv_release(r, v);
            v = f;
        }
        assign(r, n, n->a, v);
        return rc;
    }
    case JN_MACRO:
        set_var(r, n->name, jv_func(r, NULL, n, jv_missing()));
        return EX_NORMAL;
    case JN_FILTERBLOCK: {
        size_t mark = jr_mark(r);
        int rc = exec_block(r, n->a);
        struct jv body = jr_take(r, mark);
        struct jv saved = r->captured;
        r->captured = body;
        struct jv v = eval(r, n->b);
        r->captured = saved;
        jv_release(r, body);
        jv_write(r, n, v, JW_PRINT);
        jv_release(r, v);
        return rc;
    }
    case JN_BREAK:
        return EX_BREAK;
    case JN_CONTINUE:
        return EX_CONTINUE;
    case JN_BLOCK:
        return exec_block(r, n);
    default:
        jr_fail(r, n, LL_ETEMPLATE, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec_block(struct jrender *r, const struct jnode *n)
{
    for (uint32_t i = 0; i < n->n; i++) {
        int rc = exec(r, n->items[i]);
        if (rc != EX_NORMAL)
            return rc;
    }
    return EX_NORMAL;
}

/* ------------------------------------------------------------------ entry */

static struct jv from_json(struct jrender *r, const cJSON *j)
{
    if (cJSON_IsNull(j))
        return jv_none();
    if (cJSON_IsBool(j))
        return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* JSON has one number type: integral values become integers, as in JavaScript */
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j))
        return jv_cstr(r, j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        struct jv l = jv_list(r, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next)
            jv_list_push(r, l, from_json(r, c));
        return l;
    }
    if (cJSON_IsObject(j)) {
        struct jv d = jv_dict(r, false);
        for (const cJSON *c = j->child; c; c = c->next) {
            struct jv k = jv_cstr(r, c->string ? c->string : "");
            jv_dict_set(r, d, k, from_json(r, c));
            jv_release(r, k);
        }
        return d;
    }
    jr_fail(r, NULL, LL_EINVAL, "unsupported JSON value in the template context");
}

enum ll_status jrender_run(const struct jnode *root, const struct jlimits *lim,
                           const struct jinput *in, size_t nin, char **out, size_t *out_len,
                           struct ll_err *err)
{
    struct jrender *r = calloc(1, sizeof *r);
    if (!r)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    r->err = err;
    r->lim = lim;
    r->head.next = r->head.prev = &r->head;
    r->head.rc = -1;
    r->captured = jv_missing();
    enum ll_status st = LL_OK;
    if (setjmp(r->jb)) {
        st = r->status;
        goto done;
    }
    push_frame(r, 0);
    for (size_t i = 0; i < nin; i++) {
        struct jv v = in[i].json ? from_json(r, in[i].json) : jv_cstr(r, in[i].str);
        set_var(r, in[i].name, v);
    }
    exec_block(r, root);
    if (out_len)
        *out_len = r->out.len;
    if (!(*out = ll_buf_take(&r->out)))
        jr_fail(r, NULL, LL_ENOMEM, "out of memory");
done:
    /* free every object still alive (variables, cycles through namespaces, or everything
     * that was in flight when an error unwound the evaluator) */
    while (r->head.next != &r->head) {
        struct jobj *o = r->head.next;
        o->prev->next = o->next;
        o->next->prev = o->prev;
        if (o->kind == JV_LIST)
            free(((struct jlist *)o)->v);
        else if (o->kind == JV_DICT || o->kind == JV_NS) {
            free(((struct jdict *)o)->k);
            free(((struct jdict *)o)->v);
        }
        free(o);
    }
    free(r->vars);
    free(r->frames);
    ll_buf_free(&r->out);
    free(r);
    return st;
}
