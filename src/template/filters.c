/*
 * filters.c: the builtin filters (`value | name(args)`) and tests (`value is name args`),
 * and Python's printf-style `%` string formatting.
 *
 * Filters take their operand as `self`; string filters first turn it into text the way jinja2
 * does (undefined -> "", none -> "None"). tojson writes JSON like @huggingface/jinja (and
 * transformers' own tojson): ", " / ": " separators, no escaping of non-ASCII unless
 * ensure_ascii, `indent` for pretty output, `sort_keys`, `separators`.
 *
 * Sorting is a stable merge sort over index arrays held in scratch values, so a comparison
 * that fails (mixed types) unwinds without leaking. Called on the render's thread only.
 */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define UNUSED_ARGS (void)a, (void)raw

static struct jv as_str(struct jrender *r, const struct jnode *at, struct jv v)
{
    return jv_to_str(r, at, v);
}

static bool flag(struct jrender *r, const struct jnode *at, struct jv v, const char *what)
{
    if (v.kind == JV_MISSING)
        return false;
    if (v.kind != JV_BOOL && v.kind != JV_INT && v.kind != JV_NONE)
        jr_fail(r, at, LL_ETEMPLATE, "%s must be a boolean, not %s", what, jv_kind_name(v));
    return jv_truthy(v);
}

/* item[path] for attribute= arguments: "a.b.0" walks keys and indices. */
static struct jv get_path(struct jrender *r, const struct jnode *at, struct jv item, struct jv path)
{
    if (path.kind == JV_INT)
        return jr_getitem(r, at, item, path);
    if (path.kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "attribute must be a string or an integer, not %s",
                jv_kind_name(path));
    struct jv cur = jv_retain(item);
    const char *p = path.u.s->s;
    size_t len = path.u.s->len;
    for (size_t b = 0; b <= len;) {
        const char *dot = memchr(p + b, '.', len - b);
        size_t e = dot ? (size_t)(dot - p) : len;
        bool digits = e > b;
        int64_t idx = 0;
        for (size_t i = b; i < e && digits; i++) {
            digits = p[i] >= '0' && p[i] <= '9' && idx < 100000000;
            idx = idx * 10 + (p[i] - '0');
        }
        struct jv key = digits ? jv_int(idx) : jv_str(r, p + b, e - b);
        struct jv next = jr_getitem(r, at, cur, key);
        jv_release(r, key);
        jv_release(r, cur);
        cur = next;
        b = e + 1;
    }
    return cur;
}

/* ------------------------------------------------------------------ sorting */

struct sorter {
    struct jrender *r;
    const struct jnode *at;
    const struct jv *keys;
    bool cs, reverse;
};

static int sort_cmp(const struct sorter *s, size_t i, size_t j)
{
    struct jv a = s->keys[i], b = s->keys[j];
    int c = jr_compare(s->r, s->at, a, b, s->cs);
    return s->reverse ? -c : c;
}

/* Stable merge sort of idx[0..n) using tmp[0..n). */
static void merge_sort(const struct sorter *s, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(s, idx, tmp, h);
    merge_sort(s, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(s, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* New list of items sorted by keys (parallel list). */
static struct jv sorted(struct jrender *r, const struct jnode *at, struct jv items, struct jv keys,
                        bool cs, bool reverse)
{
    size_t n = items.u.l->n;
    struct jv scratch = jv_str(r, NULL, 2 * n * sizeof(size_t) + 1);
    size_t *idx = (size_t *)(void *)scratch.u.s->s, *tmp = idx + n;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    struct sorter s = {r, at, keys.u.l->v, cs, reverse};
    merge_sort(&s, idx, tmp, n);
    struct jv out = jv_list(r, n);
    for (size_t i = 0; i < n; i++)
        jv_list_push(r, out, jv_retain(items.u.l->v[idx[i]]));
    jv_release(r, scratch);
    return out;
}

static struct jv key_list(struct jrender *r, const struct jnode *at, struct jv items, struct jv attr)
{
    struct jv keys = jv_list(r, items.u.l->n);
    for (size_t i = 0; i < items.u.l->n; i++)
        jv_list_push(r, keys, attr.kind == JV_MISSING || attr.kind == JV_NONE
                                  ? jv_retain(items.u.l->v[i])
                                  : get_path(r, at, items.u.l->v[i], attr));
    return keys;
}

/* ------------------------------------------------------------------ filters */

static struct jv f_abs(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    if (self.kind == JV_INT)
        return self.u.i == INT64_MIN ? jv_float(-(double)self.u.i) : jv_int(self.u.i < 0 ? -self.u.i : self.u.i);
    if (self.kind == JV_FLOAT)
        return jv_float(fabs(self.u.f));
    if (self.kind == JV_BOOL)
        return jv_int(self.u.b);
    jr_fail(r, at, LL_ETEMPLATE, "abs needs a number, not %s", jv_kind_name(self));
}

static struct jv f_attr(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    if (a[0].kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "attr() needs an attribute name");
    return jr_getattr(r, at, self, a[0].u.s->s, NULL);
}

#define STR_FILTER(fname, mode)                                                          \
    static struct jv fname(struct jrender *r, const struct jnode *at, struct jv self,      \
                           const struct jv *a, const struct jargs *raw)                    \
    {                                                                                    \
        UNUSED_ARGS;                                                                     \
        struct jv s = as_str(r, at, self);                                               \
        struct jv out = jstr_case(r, at, s, mode);                                       \
        jv_release(r, s);                                                                \
        return out;                                                                      \
    }
STR_FILTER(f_upper, JC_UPPER)
STR_FILTER(f_lower, JC_LOWER)
STR_FILTER(f_capitalize, JC_CAPITALIZE)
STR_FILTER(f_title, JC_TITLE_FILTER)

static struct jv f_trim(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv s = as_str(r, at, self);
    struct jv out = jstr_strip(r, at, s, a[0], true, true);
    jv_release(r, s);
    return out;
}

static struct jv f_replace(struct jrender *r, const struct jnode *at, struct jv self,
                           const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    int64_t count = -1;
    if (a[2].kind == JV_INT)
        count = a[2].u.i;
    else if (a[2].kind != JV_MISSING && a[2].kind != JV_NONE)
        jr_fail(r, at, LL_ETEMPLATE, "replace() count must be an integer");
    struct jv s = as_str(r, at, self);
    struct jv out = jstr_replace(r, at, s, a[0], a[1], count);
    jv_release(r, s);
    return out;
}

static struct jv f_length(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    switch (self.kind) {
    case JV_STR:
        return jv_int((int64_t)jutf8_count(self.u.s->s, self.u.s->len));
    case JV_LIST:
        return jv_int((int64_t)self.u.l->n);
    case JV_DICT:
    case JV_NS:
        return jv_int((int64_t)self.u.d->n);
    case JV_UNDEF:
        return jv_int(0);
    default:
        jr_fail(r, at, LL_ETEMPLATE, "a %s has no length", jv_kind_name(self));
    }
}

static struct jv f_default(struct jrender *r, const struct jnode *at, struct jv self,
                           const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    bool boolean = flag(r, at, a[1], "default() boolean");
    if (self.kind == JV_UNDEF || (boolean && !jv_truthy(self)))
        return a[0].kind == JV_MISSING ? jv_str(r, "", 0) : jv_retain(a[0]);
    return jv_retain(self);
}

static struct jv f_first(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    if (self.kind == JV_LIST)
        return self.u.l->n ? jv_retain(self.u.l->v[0]) : jv_undef(NULL);
    struct jv l = jr_iter_list(r, at, self);
    struct jv v = l.u.l->n ? jv_retain(l.u.l->v[0]) : jv_undef(NULL);
    jv_release(r, l);
    return v;
}

static struct jv f_last(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    struct jv l = jr_iter_list(r, at, self);
    struct jv v = l.u.l->n ? jv_retain(l.u.l->v[l.u.l->n - 1]) : jv_undef(NULL);
    jv_release(r, l);
    return v;
}

static struct jv f_join(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv items = jr_iter_list(r, at, self);
    struct jv sep = a[0].kind == JV_MISSING ? jv_str(r, "", 0) : as_str(r, at, a[0]);
    size_t mark = jr_mark(r);
    for (size_t i = 0; i < items.u.l->n; i++) {
        if (i)
            jr_emit(r, at, sep.u.s->s, sep.u.s->len);
        if (a[1].kind != JV_MISSING && a[1].kind != JV_NONE) {
            struct jv v = get_path(r, at, items.u.l->v[i], a[1]);
            jv_write(r, at, v, JW_STR);
            jv_release(r, v);
        } else {
            jv_write(r, at, items.u.l->v[i], JW_STR);
        }
    }
    struct jv out = jr_take(r, mark);
    jv_release(r, sep);
    jv_release(r, items);
    return out;
}

static struct jv f_list(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    struct jv l = jr_iter_list(r, at, self);
    if (!l.u.l->tuple)
        return l;
    struct jv out = jv_list(r, l.u.l->n);
    for (size_t i = 0; i < l.u.l->n; i++)
        jv_list_push(r, out, jv_retain(l.u.l->v[i]));
    jv_release(r, l);
    return out;
}

static struct jv f_items(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    if (self.kind == JV_DICT || self.kind == JV_NS)
        return jdict_items(r, self);
    if (self.kind == JV_UNDEF)
        return jv_list(r, 0);
    jr_fail(r, at, LL_ETEMPLATE, "items needs a mapping, not %s", jv_kind_name(self));
}

static struct jv f_dictsort(struct jrender *r, const struct jnode *at, struct jv self,
                            const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    if (self.kind != JV_DICT && self.kind != JV_NS)
        jr_fail(r, at, LL_ETEMPLATE, "dictsort needs a mapping, not %s", jv_kind_name(self));
    bool cs = flag(r, at, a[0], "case_sensitive");
    bool by_value = false;
    if (a[1].kind == JV_STR) {
        if (!strcmp(a[1].u.s->s, "value"))
            by_value = true;
        else if (strcmp(a[1].u.s->s, "key") != 0)
            jr_fail(r, at, LL_ETEMPLATE, "dictsort: 'by' must be 'key' or 'value'");
    }
    bool reverse = flag(r, at, a[2], "reverse");
    struct jv items = jdict_items(r, self);
    struct jv keys = key_list(r, at, items, jv_int(by_value ? 1 : 0));
    struct jv out = sorted(r, at, items, keys, cs, reverse);
    jv_release(r, keys);
    jv_release(r, items);
    return out;
}

static struct jv f_sort(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    bool reverse = flag(r, at, a[0], "reverse"), cs = flag(r, at, a[1], "case_sensitive");
    struct jv items = jr_iter_list(r, at, self);
    struct jv keys = key_list(r, at, items, a[2]);
    struct jv out = sorted(r, at, items, keys, cs, reverse);
    jv_release(r, keys);
    jv_release(r, items);
    return out;
}

static struct jv f_reverse(struct jrender *r, const struct jnode *at, struct jv self,
                           const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    struct jv l = jr_iter_list(r, at, self);
    if (self.kind == JV_STR) {
        size_t mark = jr_mark(r);
        for (size_t i = l.u.l->n; i-- > 0;)
            jr_emit(r, at, l.u.l->v[i].u.s->s, l.u.l->v[i].u.s->len);
        jv_release(r, l);
        return jr_take(r, mark);
    }
    struct jv out = jv_list(r, l.u.l->n);
    for (size_t i = l.u.l->n; i-- > 0;)
        jv_list_push(r, out, jv_retain(l.u.l->v[i]));
    jv_release(r, l);
    return out;
}

/* Comparison key: strings lowercased unless case-sensitive. */
static struct jv fold_key(struct jrender *r, const struct jnode *at, struct jv v, bool cs)
{
    if (v.kind == JV_STR && !cs)
        return jstr_case(r, at, v, JC_LOWER);
    return jv_retain(v);
}

static struct jv f_unique(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    bool cs = flag(r, at, a[0], "case_sensitive");
    struct jv items = jr_iter_list(r, at, self);
    struct jv keys = key_list(r, at, items, a[1]);
    struct jv seen = jv_list(r, 0), out = jv_list(r, 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
        jr_step(r, at, seen.u.l->n + 1); /* quadratic: count the comparisons */
        struct jv k = fold_key(r, at, keys.u.l->v[i], cs);
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = jv_equal(seen.u.l->v[j], k);
        if (dup) {
            jv_release(r, k);
            continue;
        }
        jv_list_push(r, seen, k);
        jv_list_push(r, out, jv_retain(items.u.l->v[i]));
    }
    jv_release(r, seen);
    jv_release(r, keys);
    jv_release(r, items);
    return out;
}

static struct jv min_max(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, bool max)
{
    bool cs = flag(r, at, a[0], "case_sensitive");
    struct jv items = jr_iter_list(r, at, self);
    struct jv keys = key_list(r, at, items, a[1]);
    size_t best = 0;
    for (size_t i = 1; i < items.u.l->n; i++) {
        int c = jr_compare(r, at, keys.u.l->v[i], keys.u.l->v[best], cs);
        if (max ? c > 0 : c < 0)
            best = i;
    }
    struct jv out = items.u.l->n ? jv_retain(items.u.l->v[best]) : jv_undef(NULL);
    jv_release(r, keys);
    jv_release(r, items);
    return out;
}

static struct jv f_max(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return min_max(r, at, self, a, true);
}

static struct jv f_min(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return min_max(r, at, self, a, false);
}

static struct jv f_sum(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv items = jr_iter_list(r, at, self);
    bool is_int = true;
    int64_t si = 0;
    double sf = 0;
    struct jv start = a[1].kind == JV_MISSING ? jv_int(0) : a[1];
    for (size_t i = 0; i <= items.u.l->n; i++) {
        struct jv v = i == 0 ? jv_retain(start)
                             : (a[0].kind != JV_MISSING ? get_path(r, at, items.u.l->v[i - 1], a[0])
                                                         : jv_retain(items.u.l->v[i - 1]));
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            int64_t x = v.kind == JV_INT ? v.u.i : v.u.b;
            if (is_int && __builtin_add_overflow(si, x, &si)) {
                is_int = false;
                sf = (double)si + (double)x;
            } else if (!is_int) {
                sf += (double)x;
            }
        } else if (v.kind == JV_FLOAT) {
            if (is_int) {
                is_int = false;
                sf = (double)si;
            }
            sf += v.u.f;
        } else {
            jv_release(r, v);
            jr_fail(r, at, LL_ETEMPLATE, "sum needs numbers, not %s", jv_kind_name(v));
        }
        jv_release(r, v);
    }
    jv_release(r, items);
    return is_int ? jv_int(si) : jv_float(sf);
}

/* map('filter', args...) or map(attribute='x', default=y) */
static struct jv f_map(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)a;
    struct jv items = jr_iter_list(r, at, self);
    struct jv out = jv_list(r, items.u.l->n);
    struct jv attr = jv_missing(), dflt = jv_missing();
    for (size_t k = 0; k < raw->nkw; k++) {
        if (!strcmp(raw->kwname[k], "attribute"))
            attr = raw->kw[k];
        else if (!strcmp(raw->kwname[k], "default"))
            dflt = raw->kw[k];
    }
    if (attr.kind != JV_MISSING) {
        if (raw->n)
            jr_fail(r, at, LL_ETEMPLATE, "map(attribute=...) takes no positional arguments");
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv v = get_path(r, at, items.u.l->v[i], attr);
            if (v.kind == JV_UNDEF && dflt.kind != JV_MISSING) {
                jv_release(r, v);
                v = jv_retain(dflt);
            }
            jv_list_push(r, out, v);
        }
    } else {
        if (raw->n == 0 || raw->pos[0].kind != JV_STR)
            jr_fail(r, at, LL_ETEMPLATE, "map() needs a filter name or attribute=");
        const struct jbuiltin *f = jfilter_find(raw->pos[0].u.s->s);
        if (!f)
            jr_fail(r, at, LL_ETEMPLATE, "map(): unknown filter '%s'", raw->pos[0].u.s->s);
        struct jargs sub = *raw;
        sub.n = raw->n - 1;
        memmove(sub.pos, raw->pos + 1, sub.n * sizeof sub.pos[0]);
        for (size_t i = 0; i < items.u.l->n; i++)
            jv_list_push(r, out, jr_apply(r, at, f, items.u.l->v[i], &sub));
    }
    jv_release(r, items);
    return out;
}

/* select/reject/selectattr/rejectattr */
static struct jv select_impl(struct jrender *r, const struct jnode *at, struct jv self,
                             const struct jargs *raw, bool by_attr, bool keep_when)
{
    if (raw->nkw)
        jr_fail(r, at, LL_ETEMPLATE, "%s takes no keyword arguments",
                by_attr ? "selectattr/rejectattr" : "select/reject");
    size_t p = 0;
    struct jv attr = jv_missing();
    if (by_attr) {
        if (raw->n < 1)
            jr_fail(r, at, LL_ETEMPLATE, "selectattr/rejectattr need an attribute name");
        attr = raw->pos[p++];
    }
    const char *test = NULL;
    if (p < raw->n) {
        if (raw->pos[p].kind != JV_STR)
            jr_fail(r, at, LL_ETEMPLATE, "the test name must be a string");
        test = raw->pos[p++].u.s->s;
        if (!jtest_find(test))
            jr_fail(r, at, LL_ETEMPLATE, "unknown test '%s'", test);
    }
    struct jv items = jr_iter_list(r, at, self);
    struct jv out = jv_list(r, 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
        struct jv v = by_attr ? get_path(r, at, items.u.l->v[i], attr) : jv_retain(items.u.l->v[i]);
        bool ok = test ? jr_run_test(r, at, test, v, raw->pos + p, raw->n - p) : jv_truthy(v);
        jv_release(r, v);
        if (ok == keep_when)
            jv_list_push(r, out, jv_retain(items.u.l->v[i]));
    }
    jv_release(r, items);
    return out;
}

static struct jv f_select(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)a;
    return select_impl(r, at, self, raw, false, true);
}
static struct jv f_reject(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)a;
    return select_impl(r, at, self, raw, false, false);
}
static struct jv f_selectattr(struct jrender *r, const struct jnode *at, struct jv self,
                              const struct jv *a, const struct jargs *raw)
{
    (void)a;
    return select_impl(r, at, self, raw, true, true);
}
static struct jv f_rejectattr(struct jrender *r, const struct jnode *at, struct jv self,
                              const struct jv *a, const struct jargs *raw)
{
    (void)a;
    return select_impl(r, at, self, raw, true, false);
}

static struct jv f_indent(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv s = as_str(r, at, self);
    struct jv pad;
    if (a[0].kind == JV_MISSING) {
        pad = jv_str(r, "    ", 4);
    } else if (a[0].kind == JV_INT) {
        int64_t w = a[0].u.i < 0 ? 0 : a[0].u.i > 1000 ? 1000 : a[0].u.i;
        size_t mark = jr_mark(r);
        for (int64_t i = 0; i < w; i++)
            jr_emit(r, at, " ", 1);
        pad = jr_take(r, mark);
    } else if (a[0].kind == JV_STR) {
        pad = jv_retain(a[0]);
    } else {
        jr_fail(r, at, LL_ETEMPLATE, "indent width must be an integer or a string");
    }
    bool first = flag(r, at, a[1], "indent first"), blank = flag(r, at, a[2], "indent blank");
    const char *p = s.u.s->s;
    size_t len = s.u.s->len, mark = jr_mark(r), line = 0;
    for (size_t b = 0; b <= len; line++) {
        const char *nl = memchr(p + b, '\n', len - b);
        size_t e = nl ? (size_t)(nl - p) : len;
        if (!((line == 0 && !first) || (!blank && e == b)))
            jr_emit(r, at, pad.u.s->s, pad.u.s->len);
        jr_emit(r, at, p + b, e - b);
        if (!nl)
            break;
        jr_emit(r, at, "\n", 1);
        b = e + 1;
    }
    struct jv out = jr_take(r, mark);
    jv_release(r, pad);
    jv_release(r, s);
    return out;
}

static struct jv f_round(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    if (self.kind != JV_INT && self.kind != JV_FLOAT && self.kind != JV_BOOL)
        jr_fail(r, at, LL_ETEMPLATE, "round needs a number, not %s", jv_kind_name(self));
    int64_t prec = 0;
    if (a[0].kind == JV_INT)
        prec = a[0].u.i;
    const char *method = a[1].kind == JV_STR ? a[1].u.s->s : "common";
    double x = self.kind == JV_INT ? (double)self.u.i : self.kind == JV_FLOAT ? self.u.f : self.u.b;
    double m = pow(10.0, (double)prec);
    if (!strcmp(method, "common")) {
        if (self.kind != JV_FLOAT && prec >= 0)
            return jv_int(self.kind == JV_INT ? self.u.i : self.u.b);
        return jv_float(nearbyint(x * m) / m); /* Python's round(): half to even */
    }
    if (!strcmp(method, "ceil"))
        return jv_float(ceil(x * m) / m);
    if (!strcmp(method, "floor"))
        return jv_float(floor(x * m) / m);
    jr_fail(r, at, LL_ETEMPLATE, "round method must be 'common', 'ceil' or 'floor'");
}

static bool parse_int_text(const char *s, int base, int64_t *out)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (!*s)
        return false;
    char *end;
    long long v = strtoll(s, &end, base);
    if (end == s)
        return false;
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
        end++;
    if (*end)
        return false;
    *out = v;
    return true;
}

static bool parse_float_text(const char *s, double *out)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (!*s)
        return false;
    char *end;
    double v = strtod(s, &end);
    if (end == s)
        return false;
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
        end++;
    if (*end)
        return false;
    *out = v;
    return true;
}

static struct jv f_int(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv dflt = a[0].kind == JV_MISSING ? jv_int(0) : a[0];
    int base = a[1].kind == JV_INT ? (int)a[1].u.i : 10;
    if (base != 0 && (base < 2 || base > 36))
        jr_fail(r, at, LL_ETEMPLATE, "int() base must be between 2 and 36");
    switch (self.kind) {
    case JV_INT:
        return self;
    case JV_BOOL:
        return jv_int(self.u.b);
    case JV_FLOAT:
        if (isfinite(self.u.f) && fabs(self.u.f) < 9.2e18)
            return jv_int((int64_t)self.u.f);
        return jv_retain(dflt);
    case JV_STR: {
        int64_t v;
        double d;
        if (parse_int_text(self.u.s->s, base, &v))
            return jv_int(v);
        if (base == 10 && parse_float_text(self.u.s->s, &d) && isfinite(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
        return jv_retain(dflt);
    }
    default:
        return jv_retain(dflt);
    }
}

static struct jv f_float(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)r, (void)raw, (void)at;
    struct jv dflt = a[0].kind == JV_MISSING ? jv_float(0.0) : a[0];
    double d;
    switch (self.kind) {
    case JV_INT:
        return jv_float((double)self.u.i);
    case JV_BOOL:
        return jv_float(self.u.b);
    case JV_FLOAT:
        return self;
    case JV_STR:
        if (parse_float_text(self.u.s->s, &d))
            return jv_float(d);
        return jv_retain(dflt);
    default:
        return jv_retain(dflt);
    }
}

static struct jv f_string(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    return as_str(r, at, self);
}

static struct jv f_safe(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    (void)r, (void)at;
    return jv_retain(self);
}

static struct jv f_escape(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    struct jv s = as_str(r, at, self);
    size_t mark = jr_mark(r), run = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        const char *rep = NULL;
        switch (s.u.s->s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        }
        if (rep) {
            jr_emit(r, at, s.u.s->s + run, i - run);
            jr_emit(r, at, rep, strlen(rep));
            run = i + 1;
        }
    }
    jr_emit(r, at, s.u.s->s + run, s.u.s->len - run);
    jv_release(r, s);
    return jr_take(r, mark);
}

static struct jv f_wordcount(struct jrender *r, const struct jnode *at, struct jv self,
                             const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    struct jv s = as_str(r, at, self);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.u.s->len;) {
        int32_t cp = jutf8_next(s.u.s->s, s.u.s->len, &i);
        utf8proc_category_t c = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
        bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                 (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
        if (w && !in_word)
            n++;
        in_word = w;
    }
    jv_release(r, s);
    return jv_int(n);
}

static struct jv f_format(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)a;
    if (raw->nkw)
        jr_fail(r, at, LL_ETEMPLATE, "format filter: keyword arguments are not supported");
    struct jv s = as_str(r, at, self);
    struct jv out = jr_percent_format(r, at, s, raw->pos, raw->n);
    jv_release(r, s);
    return out;
}

static struct jv f_tojson(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jjson_opts o = {0};
    o.ensure_ascii = flag(r, at, a[0], "tojson ensure_ascii");
    if (a[1].kind == JV_INT)
        o.indent = a[1].u.i < 0 ? 0 : a[1].u.i > 64 ? 64 : (int)a[1].u.i;
    else if (a[1].kind != JV_MISSING && a[1].kind != JV_NONE)
        jr_fail(r, at, LL_ETEMPLATE, "tojson indent must be an integer");
    if (a[2].kind == JV_LIST) {
        if (a[2].u.l->n != 2 || a[2].u.l->v[0].kind != JV_STR || a[2].u.l->v[1].kind != JV_STR)
            jr_fail(r, at, LL_ETEMPLATE, "tojson separators must be a pair of strings");
        o.item_sep = a[2].u.l->v[0].u.s->s;
        o.key_sep = a[2].u.l->v[1].u.s->s;
    } else if (a[2].kind != JV_MISSING && a[2].kind != JV_NONE) {
        jr_fail(r, at, LL_ETEMPLATE, "tojson separators must be a pair of strings");
    }
    o.sort_keys = flag(r, at, a[3], "tojson sort_keys");
    size_t mark = jr_mark(r);
    jv_write_json(r, at, self, &o);
    return jr_take(r, mark);
}

static const struct jbuiltin filters[] = {
    {"abs", "", f_abs},
    {"attr", "name", f_attr},
    {"capitalize", "", f_capitalize},
    {"count", "", f_length},
    {"d", "default_value,boolean", f_default},
    {"default", "default_value,boolean", f_default},
    {"dictsort", "case_sensitive,by,reverse", f_dictsort},
    {"e", "", f_escape},
    {"escape", "", f_escape},
    {"first", "", f_first},
    {"float", "default", f_float},
    {"format", "*", f_format},
    {"indent", "width,first,blank", f_indent},
    {"int", "default,base", f_int},
    {"items", "", f_items},
    {"join", "d,attribute", f_join},
    {"last", "", f_last},
    {"length", "", f_length},
    {"list", "", f_list},
    {"lower", "", f_lower},
    {"map", "*", f_map},
    {"max", "case_sensitive,attribute", f_max},
    {"min", "case_sensitive,attribute", f_min},
    {"reject", "*", f_reject},
    {"rejectattr", "*", f_rejectattr},
    {"replace", "old,new,count", f_replace},
    {"reverse", "", f_reverse},
    {"round", "precision,method", f_round},
    {"safe", "", f_safe},
    {"select", "*", f_select},
    {"selectattr", "*", f_selectattr},
    {"sort", "reverse,case_sensitive,attribute", f_sort},
    {"string", "", f_string},
    {"sum", "attribute,start", f_sum},
    {"title", "", f_title},
    {"tojson", "ensure_ascii,indent,separators,sort_keys", f_tojson},
    {"trim", "chars", f_trim},
    {"unique", "case_sensitive,attribute", f_unique},
    {"upper", "", f_upper},
    {"wordcount", "", f_wordcount},
};

const struct jbuiltin *jfilter_find(const char *name)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name))
            return &filters[i];
    return NULL;
}

/* ------------------------------------------------------------------ tests */

#define TEST(fname, expr)                                                                \
    static struct jv fname(struct jrender *r, const struct jnode *at, struct jv self,      \
                           const struct jv *a, const struct jargs *raw)                    \
    {                                                                                    \
        (void)r, (void)at, (void)a, (void)raw, (void)self;                               \
        return jv_bool(expr);                                                            \
    }
TEST(t_defined, self.kind != JV_UNDEF)
TEST(t_undefined, self.kind == JV_UNDEF)
TEST(t_none, self.kind == JV_NONE)
TEST(t_boolean, self.kind == JV_BOOL)
TEST(t_true, self.kind == JV_BOOL && self.u.b)
TEST(t_false, self.kind == JV_BOOL && !self.u.b)
TEST(t_integer, self.kind == JV_INT)
TEST(t_float, self.kind == JV_FLOAT)
TEST(t_number, self.kind == JV_INT || self.kind == JV_FLOAT)
TEST(t_string, self.kind == JV_STR)
TEST(t_mapping, self.kind == JV_DICT)
TEST(t_iterable, self.kind == JV_STR || self.kind == JV_LIST || self.kind == JV_DICT)
TEST(t_sequence, self.kind == JV_STR || self.kind == JV_LIST || self.kind == JV_DICT)
TEST(t_callable, self.kind == JV_FUNC)
TEST(t_escaped, false)
TEST(t_eq, jv_equal(self, a[0]))
TEST(t_ne, !jv_equal(self, a[0]))

static struct jv need_other(struct jrender *r, const struct jnode *at, const struct jv *a)
{
    if (a[0].kind == JV_MISSING)
        jr_fail(r, at, LL_ETEMPLATE, "this test needs an argument");
    return a[0];
}

#define CMP_TEST(fname, cond)                                                            \
    static struct jv fname(struct jrender *r, const struct jnode *at, struct jv self,      \
                           const struct jv *a, const struct jargs *raw)                    \
    {                                                                                    \
        (void)raw;                                                                       \
        int c = jr_compare(r, at, self, need_other(r, at, a), true);                     \
        return jv_bool(cond);                                                            \
    }
CMP_TEST(t_lt, c < 0)
CMP_TEST(t_le, c <= 0)
CMP_TEST(t_gt, c > 0)
CMP_TEST(t_ge, c >= 0)

static int64_t need_int(struct jrender *r, const struct jnode *at, struct jv v, const char *test)
{
    if (v.kind != JV_INT && v.kind != JV_BOOL)
        jr_fail(r, at, LL_ETEMPLATE, "'%s' test needs an integer, not %s", test, jv_kind_name(v));
    return v.kind == JV_INT ? v.u.i : v.u.b;
}

static struct jv t_odd(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    return jv_bool(need_int(r, at, self, "odd") % 2 != 0);
}

static struct jv t_even(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    return jv_bool(need_int(r, at, self, "even") % 2 == 0);
}

static struct jv t_divisibleby(struct jrender *r, const struct jnode *at, struct jv self,
                               const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    int64_t d = need_int(r, at, need_other(r, at, a), "divisibleby");
    int64_t v = need_int(r, at, self, "divisibleby");
    if (d == 0)
        jr_fail(r, at, LL_ETEMPLATE, "divisibleby 0");
    return jv_bool(d == -1 || v % d == 0);
}

static struct jv t_in(struct jrender *r, const struct jnode *at, struct jv self,
                      const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return jv_bool(jr_contains(r, at, need_other(r, at, a), self));
}

static struct jv t_sameas(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv o = need_other(r, at, a);
    if (self.kind != o.kind)
        return jv_bool(false);
    if (jv_is_heap(self))
        return jv_bool(self.u.obj == o.u.obj);
    return jv_bool(jv_equal(self, o));
}

/* jinja2's lower/upper tests: str(value).islower() / .isupper(): some cased letter, and none
 * of the other case. */
static struct jv case_test(struct jrender *r, const struct jnode *at, struct jv self, bool lower)
{
    struct jv s = jv_to_str(r, at, self);
    bool cased = false, other = false;
    for (size_t i = 0; i < s.u.s->len && !other;) {
        int32_t cp = jutf8_next(s.u.s->s, s.u.s->len, &i);
        if (cp < 0)
            continue;
        utf8proc_category_t c = utf8proc_category(cp);
        other = c == UTF8PROC_CATEGORY_LT || c == (lower ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL);
        cased |= c == (lower ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU);
    }
    jv_release(r, s);
    return jv_bool(cased && !other);
}

static struct jv t_lower(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    return case_test(r, at, self, true);
}

static struct jv t_upper(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    UNUSED_ARGS;
    return case_test(r, at, self, false);
}

static const struct jbuiltin tests[] = {
    {"boolean", "", t_boolean},
    {"callable", "", t_callable},
    {"defined", "", t_defined},
    {"divisibleby", "num", t_divisibleby},
    {"eq", "other", t_eq},
    {"equalto", "other", t_eq},
    {"escaped", "", t_escaped},
    {"even", "", t_even},
    {"false", "", t_false},
    {"float", "", t_float},
    {"ge", "other", t_ge},
    {"greaterthan", "other", t_gt},
    {"gt", "other", t_gt},
    {"in", "seq", t_in},
    {"integer", "", t_integer},
    {"iterable", "", t_iterable},
    {"le", "other", t_le},
    {"lessthan", "other", t_lt},
    {"lower", "", t_lower},
    {"lt", "other", t_lt},
    {"mapping", "", t_mapping},
    {"ne", "other", t_ne},
    {"none", "", t_none},
    {"number", "", t_number},
    {"odd", "", t_odd},
    {"sameas", "other", t_sameas},
    {"sequence", "", t_sequence},
    {"string", "", t_string},
    {"true", "", t_true},
    {"undefined", "", t_undefined},
    {"upper", "", t_upper},
};

const struct jbuiltin *jtest_find(const char *name)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!strcmp(tests[i].name, name))
            return &tests[i];
    return NULL;
}

/* ------------------------------------------------------------------ printf-style formatting */

struct jv jr_percent_format(struct jrender *r, const struct jnode *at, struct jv fmt,
                            const struct jv *args, size_t nargs)
{
    const char *p = fmt.u.s->s;
    size_t len = fmt.u.s->len, mark = jr_mark(r), next = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '%')
            continue;
        jr_emit(r, at, p + run, i - run);
        size_t j = i + 1;
        char spec[32] = "%";
        size_t sn = 1;
        while (j < len && strchr("-+ 0#", p[j]) && sn < 8)
            spec[sn++] = p[j++];
        int width = 0, prec = -1;
        while (j < len && p[j] >= '0' && p[j] <= '9')
            width = width < 1000 ? width * 10 + (p[j++] - '0') : (j++, width);
        if (j < len && p[j] == '.') {
            j++;
            prec = 0;
            while (j < len && p[j] >= '0' && p[j] <= '9')
                prec = prec < 1000 ? prec * 10 + (p[j++] - '0') : (j++, prec);
        }
        if (j >= len)
            jr_fail(r, at, LL_ETEMPLATE, "incomplete format in '%%' formatting");
        char conv = p[j];
        run = j + 1;
        i = j;
        if (conv == '%') {
            jr_emit(r, at, "%", 1);
            continue;
        }
        if (conv == '(')
            jr_fail(r, at, LL_ETEMPLATE, "'%%(name)' formatting is not supported");
        if (next >= nargs)
            jr_fail(r, at, LL_ETEMPLATE, "not enough arguments for format string");
        struct jv v = args[next++];
        char buf[2200];
        int n = 0;
        if (width > 1000)
            width = 1000;
        if (prec > 1000)
            prec = 1000;
        snprintf(spec + sn, sizeof spec - sn, "%d", width);
        sn = strlen(spec);
        if (prec >= 0) {
            snprintf(spec + sn, sizeof spec - sn, ".%d", prec);
            sn = strlen(spec);
        }
        switch (conv) {
        case 's':
        case 'r': {
            struct jv s = jv_to_str(r, at, v);
            bool quote = conv == 'r' && v.kind == JV_STR;
            size_t slen = s.u.s->len;
            if (prec >= 0 && (size_t)prec < slen)
                slen = (size_t)prec;
            size_t shown = slen + (quote ? 2 : 0);
            bool left = strchr(spec, '-') != NULL;
            for (size_t k = shown; !left && k < (size_t)width; k++)
                jr_emit(r, at, " ", 1);
            if (quote)
                jr_emit(r, at, "'", 1);
            jr_emit(r, at, s.u.s->s, slen);
            if (quote)
                jr_emit(r, at, "'", 1);
            for (size_t k = shown; left && k < (size_t)width; k++)
                jr_emit(r, at, " ", 1);
            jv_release(r, s);
            continue;
        }
        case 'd':
        case 'i':
        case 'x':
        case 'X':
        case 'o':
        case 'c': {
            if (v.kind != JV_INT && v.kind != JV_FLOAT && v.kind != JV_BOOL)
                jr_fail(r, at, LL_ETEMPLATE, "%%%c format needs a number, not %s", conv,
                        jv_kind_name(v));
            long long x = v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? v.u.b : (long long)v.u.f;
            if (conv == 'c') {
                char cb[4];
                jr_emit(r, at, cb, (size_t)jutf8_put(cb, (int32_t)(x & 0x1FFFFF)));
                continue;
            }
            snprintf(spec + sn, sizeof spec - sn, "ll%c", conv == 'i' ? 'd' : conv);
            n = snprintf(buf, sizeof buf, spec, x);
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            if (v.kind != JV_INT && v.kind != JV_FLOAT && v.kind != JV_BOOL)
                jr_fail(r, at, LL_ETEMPLATE, "%%%c format needs a number, not %s", conv,
                        jv_kind_name(v));
            double x = v.kind == JV_INT ? (double)v.u.i : v.kind == JV_BOOL ? v.u.b : v.u.f;
            snprintf(spec + sn, sizeof spec - sn, "%c", conv);
            n = snprintf(buf, sizeof buf, spec, x);
            break;
        }
        default:
            jr_fail(r, at, LL_ETEMPLATE, "unsupported format character '%c'", conv);
        }
        if (n > 0)
            jr_emit(r, at, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    }
    jr_emit(r, at, p + run, len - run);
    if (next < nargs)
        jr_fail(r, at, LL_ETEMPLATE, "not all arguments converted during string formatting");
    return jr_take(r, mark);
}
