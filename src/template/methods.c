/*
 * methods.c: methods of template values and the global functions.
 *
 * Strings have Python's str methods that chat templates use (split, strip, startswith,
 * replace, title, format, ...), dicts have items/keys/values/get, the loop object has cycle().
 * Globals: range, namespace, dict, raise_exception(message), strftime_now(format) (the local
 * time now by C strftime, as transformers and llama.cpp define it; Llama 3.x's template dates
 * its system header with it when no date_string is given). The string helpers shared with the
 * filters (case mapping, strip, replace) live here too.
 *
 * Every function builds its result in the render's scratch output (jr_mark/jr_take) or in new
 * values, so an error part-way leaks nothing. Called on the render's thread only.
 */
#include "jinja.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>


/* ------------------------------------------------------------------ string helpers */

static bool is_cased(int32_t cp)
{
    if (cp < 0)
        return false;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

static int32_t to_upper(int32_t cp) { return cp < 0 ? cp : utf8proc_toupper(cp); }
static int32_t to_lower(int32_t cp) { return cp < 0 ? cp : utf8proc_tolower(cp); }

static void put_cp(struct jrender *r, const struct jnode *at, int32_t cp)
{
    char buf[4];
    jr_emit(r, at, buf, (size_t)jutf8_put(buf, cp));
}

struct jv jstr_case(struct jrender *r, const struct jnode *at, struct jv s, enum jcase mode)
{
    const char *p = s.u.s->s;
    size_t len = s.u.s->len, mark = jr_mark(r);
    bool start = true;
    for (size_t i = 0; i < len;) {
        int32_t cp = jutf8_next(p, len, &i);
        int32_t out = cp;
        switch (mode) {
        case JC_UPPER:
            if (cp == 0xDF) { /* German sharp s has no one-letter capital in str.upper() */
                jr_emit(r, at, "SS", 2);
                continue;
            }
            out = to_upper(cp);
            break;
        case JC_LOWER:
            out = to_lower(cp);
            break;
        case JC_CAPITALIZE:
            out = start ? to_upper(cp) : to_lower(cp);
            start = false;
            break;
        case JC_TITLE_FILTER: { /* jinja2: words begin after - ( { [ < or whitespace */
            bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                       jutf8_is_space(cp);
            out = sep ? cp : start ? to_upper(cp) : to_lower(cp);
            start = sep;
            break;
        }
        case JC_TITLE_METHOD: { /* Python str.title: words are runs of cased letters */
            bool cased = is_cased(cp);
            out = !cased ? cp : start ? to_upper(cp) : to_lower(cp);
            start = !cased;
            break;
        }
        }
        put_cp(r, at, out);
    }
    return jr_take(r, mark);
}

static bool in_chars(int32_t cp, struct jv chars)
{
    if (chars.kind != JV_STR)
        return jutf8_is_space(cp);
    for (size_t i = 0; i < chars.u.s->len;)
        if (jutf8_next(chars.u.s->s, chars.u.s->len, &i) == cp)
            return true;
    return false;
}

struct jv jstr_strip(struct jrender *r, const struct jnode *at, struct jv s, struct jv chars,
                     bool left, bool right)
{
    if (chars.kind != JV_STR && chars.kind != JV_MISSING && chars.kind != JV_NONE)
        jr_fail(r, at, LL_ETEMPLATE, "strip arg must be None or str, not %s", jv_kind_name(chars));
    const char *p = s.u.s->s;
    size_t len = s.u.s->len, b = 0, e = len;
    if (left)
        for (size_t i = 0; i < len;) {
            size_t at_i = i;
            if (!in_chars(jutf8_next(p, len, &i), chars)) {
                b = at_i;
                break;
            }
            b = i;
        }
    if (right) {
        size_t keep = b;
        for (size_t i = b; i < len;)
            if (!in_chars(jutf8_next(p, len, &i), chars))
                keep = i;
        e = keep;
    }
    if (b == 0 && e == len)
        return jv_retain(s);
    return jv_str(r, p + b, e > b ? e - b : 0);
}

struct jv jstr_replace(struct jrender *r, const struct jnode *at, struct jv s, struct jv old,
                       struct jv new, int64_t count)
{
    if (old.kind != JV_STR || new.kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "replace() arguments must be strings");
    const char *p = s.u.s->s, *o = old.u.s->s, *n = new.u.s->s;
    size_t len = s.u.s->len, olen = old.u.s->len, nlen = new.u.s->len, mark = jr_mark(r);
    if (count < 0)
        count = INT64_MAX;
    if (olen == 0) { /* Python inserts `new` before every character and at the end */
        size_t i = 0;
        for (; count > 0; count--) {
            jr_emit(r, at, n, nlen);
            if (i >= len)
                break;
            size_t b = i;
            jutf8_next(p, len, &i);
            jr_emit(r, at, p + b, i - b);
        }
        jr_emit(r, at, p + i, len - i);
        return jr_take(r, mark);
    }
    size_t i = 0;
    while (count > 0) {
        const char *hit = memmem(p + i, len - i, o, olen);
        if (!hit)
            break;
        size_t h = (size_t)(hit - p);
        jr_emit(r, at, p + i, h - i);
        jr_emit(r, at, n, nlen);
        i = h + olen;
        count--;
    }
    jr_emit(r, at, p + i, len - i);
    return jr_take(r, mark);
}

static bool opt_int(struct jrender *r, const struct jnode *at, struct jv v, const char *what,
                    int64_t *out)
{
    if (v.kind == JV_MISSING || v.kind == JV_NONE)
        return false;
    if (v.kind != JV_INT && v.kind != JV_BOOL)
        jr_fail(r, at, LL_ETEMPLATE, "%s must be an integer, not %s", what, jv_kind_name(v));
    *out = v.kind == JV_INT ? v.u.i : v.u.b;
    return true;
}

/* ------------------------------------------------------------------ string methods */

static struct jv m_upper(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)a, (void)raw;
    return jstr_case(r, at, self, JC_UPPER);
}
static struct jv m_lower(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)a, (void)raw;
    return jstr_case(r, at, self, JC_LOWER);
}
static struct jv m_title(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)a, (void)raw;
    return jstr_case(r, at, self, JC_TITLE_METHOD);
}
static struct jv m_capitalize(struct jrender *r, const struct jnode *at, struct jv self,
                              const struct jv *a, const struct jargs *raw)
{
    (void)a, (void)raw;
    return jstr_case(r, at, self, JC_CAPITALIZE);
}
static struct jv m_strip(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return jstr_strip(r, at, self, a[0], true, true);
}
static struct jv m_lstrip(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return jstr_strip(r, at, self, a[0], true, false);
}
static struct jv m_rstrip(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return jstr_strip(r, at, self, a[0], false, true);
}

static bool affix_match(struct jrender *r, const struct jnode *at, struct jv s, struct jv x,
                        bool suffix)
{
    if (x.kind == JV_LIST) {
        for (size_t i = 0; i < x.u.l->n; i++)
            if (affix_match(r, at, s, x.u.l->v[i], suffix))
                return true;
        return false;
    }
    if (x.kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "%s() argument must be a string or a tuple of strings, not %s",
                suffix ? "endswith" : "startswith", jv_kind_name(x));
    size_t n = x.u.s->len;
    if (n > s.u.s->len)
        return false;
    return memcmp(s.u.s->s + (suffix ? s.u.s->len - n : 0), x.u.s->s, n) == 0;
}

static struct jv m_startswith(struct jrender *r, const struct jnode *at, struct jv self,
                              const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    if (a[0].kind == JV_MISSING)
        jr_fail(r, at, LL_ETEMPLATE, "startswith() takes a prefix argument");
    return jv_bool(affix_match(r, at, self, a[0], false));
}
static struct jv m_endswith(struct jrender *r, const struct jnode *at, struct jv self,
                            const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    if (a[0].kind == JV_MISSING)
        jr_fail(r, at, LL_ETEMPLATE, "endswith() takes a suffix argument");
    return jv_bool(affix_match(r, at, self, a[0], true));
}

static struct jv m_replace(struct jrender *r, const struct jnode *at, struct jv self,
                           const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    int64_t count = -1;
    opt_int(r, at, a[2], "replace() count", &count);
    return jstr_replace(r, at, self, a[0], a[1], count);
}

/* Python str.split / str.rsplit. */
static struct jv split_impl(struct jrender *r, const struct jnode *at, struct jv self,
                            const struct jv *a, bool from_right)
{
    int64_t maxsplit = -1;
    opt_int(r, at, a[1], "maxsplit", &maxsplit);
    struct jv sep = a[0];
    const char *p = self.u.s->s;
    size_t len = self.u.s->len;
    struct jv out = jv_list(r, 0);
    if (sep.kind == JV_MISSING || sep.kind == JV_NONE) {
        /* runs of whitespace; collect (start, end) of words */
        size_t i = 0;
        struct jv words = jv_list(r, 0);
        while (i < len) {
            size_t b = i, j = i;
            if (jutf8_is_space(jutf8_next(p, len, &j))) {
                i = j;
                continue;
            }
            size_t e = b;
            for (i = b; i < len;) {
                size_t k = i;
                if (jutf8_is_space(jutf8_next(p, len, &k)))
                    break;
                i = k;
            }
            e = i;
            jv_list_push(r, words, jv_int((int64_t)b));
            jv_list_push(r, words, jv_int((int64_t)e));
        }
        size_t nw = words.u.l->n / 2;
        /* with maxsplit, Python keeps the rest of the string (from the next word on) whole */
        bool rest = maxsplit >= 0 && (uint64_t)maxsplit < nw;
        size_t nsplit = rest ? (size_t)maxsplit + 1 : nw;
        for (size_t w = 0; w < nsplit; w++) {
            size_t idx = from_right ? nw - nsplit + w : w;
            size_t b = (size_t)words.u.l->v[2 * idx].u.i, e = (size_t)words.u.l->v[2 * idx + 1].u.i;
            if (rest && !from_right && w == nsplit - 1)
                e = len;
            if (rest && from_right && w == 0)
                b = 0;
            jv_list_push(r, out, jv_str(r, p + b, e - b));
        }
        jv_release(r, words);
        return out;
    }
    if (sep.kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "split() separator must be a string or none, not %s",
                jv_kind_name(sep));
    const char *s = sep.u.s->s;
    size_t sl = sep.u.s->len;
    if (sl == 0)
        jr_fail(r, at, LL_ETEMPLATE, "split(): empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, len - i, s, sl) : NULL;
            if (!hit)
                break;
            size_t h = (size_t)(hit - p);
            jv_list_push(r, out, jv_str(r, p + i, h - i));
            i = h + sl;
            done++;
        }
        jv_list_push(r, out, jv_str(r, p + i, len - i));
        return out;
    }
    /* from the right: collect pieces in reverse, then reverse */
    struct jv rev = jv_list(r, 0);
    size_t end = len;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
        size_t found = (size_t)-1;
        for (size_t k = end >= sl ? end - sl + 1 : 0; k-- > 0;)
            if (memcmp(p + k, s, sl) == 0) {
                found = k;
                break;
            }
        if (found == (size_t)-1)
            break;
        jv_list_push(r, rev, jv_str(r, p + found + sl, end - found - sl));
        end = found;
        done++;
    }
    jv_list_push(r, rev, jv_str(r, p, end));
    for (size_t k = rev.u.l->n; k-- > 0;)
        jv_list_push(r, out, jv_retain(rev.u.l->v[k]));
    jv_release(r, rev);
    return out;
}

static struct jv m_split(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return split_impl(r, at, self, a, false);
}
static struct jv m_rsplit(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return split_impl(r, at, self, a, true);
}

static struct jv need_str(struct jrender *r, const struct jnode *at, struct jv v, const char *fn)
{
    if (v.kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "%s() argument must be a string, not %s", fn, jv_kind_name(v));
    return v;
}

static struct jv m_find(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv sub = need_str(r, at, a[0], "find");
    const char *hit = sub.u.s->len ? memmem(self.u.s->s, self.u.s->len, sub.u.s->s, sub.u.s->len)
                                   : self.u.s->s;
    if (!hit)
        return jv_int(-1);
    return jv_int((int64_t)jutf8_count(self.u.s->s, (size_t)(hit - self.u.s->s)));
}

static struct jv m_count(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv sub = need_str(r, at, a[0], "count");
    if (!sub.u.s->len)
        return jv_int((int64_t)jutf8_count(self.u.s->s, self.u.s->len) + 1);
    int64_t n = 0;
    for (size_t i = 0;;) {
        const char *hit = memmem(self.u.s->s + i, self.u.s->len - i, sub.u.s->s, sub.u.s->len);
        if (!hit)
            break;
        n++;
        i = (size_t)(hit - self.u.s->s) + sub.u.s->len;
    }
    return jv_int(n);
}

static struct jv m_join(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    struct jv items = jr_iter_list(r, at, a[0].kind == JV_MISSING ? jv_undef(NULL) : a[0]);
    size_t mark = jr_mark(r);
    for (size_t i = 0; i < items.u.l->n; i++) {
        if (i)
            jr_emit(r, at, self.u.s->s, self.u.s->len);
        if (items.u.l->v[i].kind != JV_STR)
            jr_fail(r, at, LL_ETEMPLATE, "join(): item %zu is a %s, not a string", i,
                    jv_kind_name(items.u.l->v[i]));
        jv_write(r, at, items.u.l->v[i], JW_STR);
    }
    struct jv out = jr_take(r, mark);
    jv_release(r, items);
    return out;
}

static struct jv m_affix_remove(struct jrender *r, const struct jnode *at, struct jv self,
                                struct jv x, bool suffix)
{
    x = need_str(r, at, x, suffix ? "removesuffix" : "removeprefix");
    if (x.u.s->len == 0 || !affix_match(r, at, self, x, suffix))
        return jv_retain(self);
    size_t n = self.u.s->len - x.u.s->len;
    return jv_str(r, self.u.s->s + (suffix ? 0 : x.u.s->len), n);
}
static struct jv m_removeprefix(struct jrender *r, const struct jnode *at, struct jv self,
                                const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return m_affix_remove(r, at, self, a[0], false);
}
static struct jv m_removesuffix(struct jrender *r, const struct jnode *at, struct jv self,
                                const struct jv *a, const struct jargs *raw)
{
    (void)raw;
    return m_affix_remove(r, at, self, a[0], true);
}

static struct jv str_class(struct jv self, int which)
{
    if (self.u.s->len == 0)
        return jv_bool(false);
    bool any_cased = false;
    for (size_t i = 0; i < self.u.s->len;) {
        int32_t cp = jutf8_next(self.u.s->s, self.u.s->len, &i);
        utf8proc_category_t c = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
        bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool digit = c == UTF8PROC_CATEGORY_ND;
        switch (which) {
        case 0: if (!digit) return jv_bool(false); break;
        case 1: if (!letter) return jv_bool(false); break;
        case 2: if (!letter && !digit) return jv_bool(false); break;
        case 3: if (!jutf8_is_space(cp)) return jv_bool(false); break;
        case 4: /* islower */
            if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return jv_bool(false);
            any_cased |= c == UTF8PROC_CATEGORY_LL;
            break;
        case 5: /* isupper */
            if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return jv_bool(false);
            any_cased |= c == UTF8PROC_CATEGORY_LU;
            break;
        }
    }
    return jv_bool(which >= 4 ? any_cased : true);
}
#define STR_CLASS(fname, which)                                                          \
    static struct jv fname(struct jrender *r, const struct jnode *at, struct jv self,      \
                           const struct jv *a, const struct jargs *raw)                    \
    {                                                                                    \
        (void)r, (void)at, (void)a, (void)raw;                                           \
        return str_class(self, which);                                                   \
    }
STR_CLASS(m_isdigit, 0)
STR_CLASS(m_isalpha, 1)
STR_CLASS(m_isalnum, 2)
STR_CLASS(m_isspace, 3)
STR_CLASS(m_islower, 4)
STR_CLASS(m_isupper, 5)

/* Python str.format with "{}", "{0}" and "{name}" fields (no format specs). */
static struct jv m_format(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)a;
    const char *p = self.u.s->s;
    size_t len = self.u.s->len, mark = jr_mark(r), auto_idx = 0;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < len && p[i + 1] == c) {
            jr_emit(r, at, &c, 1);
            i++;
            continue;
        }
        if (c == '}')
            jr_fail(r, at, LL_ETEMPLATE, "format(): single '}' encountered in format string");
        if (c != '{') {
            jr_emit(r, at, &c, 1);
            continue;
        }
        const char *close = memchr(p + i, '}', len - i);
        if (!close)
            jr_fail(r, at, LL_ETEMPLATE, "format(): single '{' encountered in format string");
        size_t fb = i + 1, fe = (size_t)(close - p);
        if (memchr(p + fb, ':', fe - fb) || memchr(p + fb, '!', fe - fb))
            jr_fail(r, at, LL_ETEMPLATE, "format(): format specs and conversions are not supported");
        struct jv v = jv_missing();
        if (fe == fb) {
            if (auto_idx < raw->n)
                v = raw->pos[auto_idx];
            auto_idx++;
        } else if (p[fb] >= '0' && p[fb] <= '9') {
            size_t k = 0;
            for (size_t j = fb; j < fe; j++)
                k = k * 10 + (size_t)(p[j] - '0');
            if (k < raw->n)
                v = raw->pos[k];
        } else {
            for (size_t k = 0; k < raw->nkw; k++)
                if (strlen(raw->kwname[k]) == fe - fb && !memcmp(raw->kwname[k], p + fb, fe - fb))
                    v = raw->kw[k];
        }
        if (v.kind == JV_MISSING)
            jr_fail(r, at, LL_ETEMPLATE, "format(): no argument for field '{%.*s}'", (int)(fe - fb),
                    p + fb);
        jv_write(r, at, v, JW_STR);
        i = fe;
    }
    return jr_take(r, mark);
}

/* ------------------------------------------------------------------ dict and loop methods */

static struct jv pairs(struct jrender *r, struct jv d, int which)
{
    struct jv out = jv_list(r, d.u.d->n);
    for (size_t i = 0; i < d.u.d->n; i++) {
        struct jv k = {.kind = JV_STR};
        k.u.s = d.u.d->k[i];
        if (which == 0) {
            struct jv t = jv_list(r, 2);
            t.u.l->tuple = true;
            jv_list_push(r, t, jv_retain(k));
            jv_list_push(r, t, jv_retain(d.u.d->v[i]));
            jv_list_push(r, out, t);
        } else {
            jv_list_push(r, out, jv_retain(which == 1 ? k : d.u.d->v[i]));
        }
    }
    return out;
}

struct jv jdict_items(struct jrender *r, struct jv d)
{
    return pairs(r, d, 0);
}

static struct jv m_items(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)at, (void)a, (void)raw;
    return pairs(r, self, 0);
}
static struct jv m_keys(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)at, (void)a, (void)raw;
    return pairs(r, self, 1);
}
static struct jv m_values(struct jrender *r, const struct jnode *at, struct jv self,
                          const struct jv *a, const struct jargs *raw)
{
    (void)at, (void)a, (void)raw;
    return pairs(r, self, 2);
}
static struct jv m_get(struct jrender *r, const struct jnode *at, struct jv self,
                       const struct jv *a, const struct jargs *raw)
{
    (void)r, (void)at, (void)raw;
    if (a[0].kind == JV_STR) {
        struct jv *v = jv_dict_get(self, a[0].u.s->s, a[0].u.s->len);
        if (v)
            return jv_retain(*v);
    }
    return a[1].kind == JV_MISSING ? jv_none() : jv_retain(a[1]);
}

static struct jv m_cycle(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)a;
    if (raw->n == 0)
        jr_fail(r, at, LL_ETEMPLATE, "loop.cycle() needs at least one argument");
    return jv_retain(raw->pos[(size_t)self.u.lp->index0 % raw->n]);
}

static const struct jbuiltin str_methods[] = {
    {"capitalize", "", m_capitalize},
    {"count", "sub", m_count},
    {"endswith", "suffix", m_endswith},
    {"find", "sub", m_find},
    {"format", "*", m_format},
    {"isalnum", "", m_isalnum},
    {"isalpha", "", m_isalpha},
    {"isdigit", "", m_isdigit},
    {"islower", "", m_islower},
    {"isspace", "", m_isspace},
    {"isupper", "", m_isupper},
    {"join", "iterable", m_join},
    {"lower", "", m_lower},
    {"lstrip", "chars", m_lstrip},
    {"removeprefix", "prefix", m_removeprefix},
    {"removesuffix", "suffix", m_removesuffix},
    {"replace", "old,new,count", m_replace},
    {"rsplit", "sep,maxsplit", m_rsplit},
    {"rstrip", "chars", m_rstrip},
    {"split", "sep,maxsplit", m_split},
    {"startswith", "prefix", m_startswith},
    {"strip", "chars", m_strip},
    {"title", "", m_title},
    {"upper", "", m_upper},
};

static const struct jbuiltin dict_methods[] = {
    {"get", "key,default", m_get},
    {"items", "", m_items},
    {"keys", "", m_keys},
    {"values", "", m_values},
};

static const struct jbuiltin loop_methods[] = {
    {"cycle", "*", m_cycle},
};

static const struct jbuiltin *find_in(const struct jbuiltin *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

const struct jbuiltin *jmethod_find(uint8_t kind, const char *name)
{
    switch (kind) {
    case JV_STR:
        return find_in(str_methods, sizeof str_methods / sizeof str_methods[0], name);
    case JV_DICT:
        return find_in(dict_methods, sizeof dict_methods / sizeof dict_methods[0], name);
    case JV_LOOP:
        return find_in(loop_methods, sizeof loop_methods / sizeof loop_methods[0], name);
    default:
        return NULL;
    }
}

/* ------------------------------------------------------------------ globals */

static struct jv g_range(struct jrender *r, const struct jnode *at, struct jv self,
                         const struct jv *a, const struct jargs *raw)
{
    (void)self, (void)a;
    if (raw->nkw)
        jr_fail(r, at, LL_ETEMPLATE, "range() takes no keyword arguments");
    if (raw->n < 1 || raw->n > 3)
        jr_fail(r, at, LL_ETEMPLATE, "range() takes 1 to 3 arguments (%zu given)", raw->n);
    int64_t v[3] = {0, 0, 0};
    for (size_t i = 0; i < raw->n; i++)
        if (!opt_int(r, at, raw->pos[i], "range() argument", &v[i]))
            jr_fail(r, at, LL_ETEMPLATE, "range() arguments must be integers");
    int64_t start = 0, stop, step = 1;
    if (raw->n == 1) {
        stop = v[0];
    } else {
        start = v[0];
        stop = v[1];
        if (raw->n == 3)
            step = v[2];
    }
    if (step == 0)
        jr_fail(r, at, LL_ETEMPLATE, "range() step must not be zero");
    uint64_t count = 0;
    if (step > 0 && start < stop)
        count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    else if (step < 0 && start > stop)
        count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)(-(step + 1)) + 1) + 1;
    jr_step(r, at, count);
    struct jv out = jv_list(r, (size_t)count);
    for (uint64_t i = 0; i < count; i++)
        jv_list_push(r, out, jv_int(start + (int64_t)i * step));
    return out;
}

static void copy_mapping(struct jrender *r, const struct jnode *at, struct jv dst, struct jv src,
                         const char *fn)
{
    if (src.kind == JV_DICT || src.kind == JV_NS) {
        for (size_t i = 0; i < src.u.d->n; i++) {
            struct jv k = {.kind = JV_STR};
            k.u.s = src.u.d->k[i];
            jv_dict_set(r, dst, k, jv_retain(src.u.d->v[i]));
        }
        return;
    }
    if (src.kind == JV_LIST) {
        for (size_t i = 0; i < src.u.l->n; i++) {
            struct jv p = src.u.l->v[i];
            if (p.kind != JV_LIST || p.u.l->n != 2 || p.u.l->v[0].kind != JV_STR)
                jr_fail(r, at, LL_ETEMPLATE, "%s() expects a mapping or (key, value) pairs", fn);
            jv_dict_set(r, dst, p.u.l->v[0], jv_retain(p.u.l->v[1]));
        }
        return;
    }
    jr_fail(r, at, LL_ETEMPLATE, "%s() expects a mapping, not %s", fn, jv_kind_name(src));
}

static struct jv make_mapping(struct jrender *r, const struct jnode *at, const struct jargs *raw,
                              bool ns, const char *fn)
{
    if (raw->n > 1)
        jr_fail(r, at, LL_ETEMPLATE, "%s() takes at most 1 positional argument (%zu given)", fn,
                raw->n);
    struct jv d = jv_dict(r, ns);
    if (raw->n == 1)
        copy_mapping(r, at, d, raw->pos[0], fn);
    for (size_t k = 0; k < raw->nkw; k++) {
        struct jv key = jv_cstr(r, raw->kwname[k]);
        jv_dict_set(r, d, key, jv_retain(raw->kw[k]));
        jv_release(r, key);
    }
    return d;
}

static struct jv g_namespace(struct jrender *r, const struct jnode *at, struct jv self,
                             const struct jv *a, const struct jargs *raw)
{
    (void)self, (void)a;
    return make_mapping(r, at, raw, true, "namespace");
}

static struct jv g_dict(struct jrender *r, const struct jnode *at, struct jv self,
                        const struct jv *a, const struct jargs *raw)
{
    (void)self, (void)a;
    return make_mapping(r, at, raw, false, "dict");
}

static struct jv g_raise_exception(struct jrender *r, const struct jnode *at, struct jv self,
                                   const struct jv *a, const struct jargs *raw)
{
    (void)self, (void)raw;
    struct jv msg = jv_to_str(r, at, a[0]);
    jr_fail(r, at, LL_ETEMPLATE, "template raised an error: %.*s",
            (int)(msg.u.s->len > 380 ? 380 : msg.u.s->len), msg.u.s->s);
}

/* strftime_now(format): the current local time formatted by C strftime, as transformers and
 * llama.cpp give templates (Llama 3.x dates its system header with it). Each conversion is
 * formatted on its own, so the result has no length limit but the render's output limit; a
 * field width over 255 or a conversion spelled in more than 15 bytes fails the render. Text
 * between conversions is copied as it is, a lone '%' at the end too. */
static struct jv g_strftime_now(struct jrender *r, const struct jnode *at, struct jv self,
                                const struct jv *a, const struct jargs *raw)
{
    (void)self, (void)raw;
    if (a[0].kind != JV_STR)
        jr_fail(r, at, LL_ETEMPLATE, "strftime_now() takes a format string");
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    const char *f = a[0].u.s->s;
    size_t len = a[0].u.s->len, mark = jr_mark(r);
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        if (f[i] != '%' || j == len) {
            while (j < len && f[j] != '%')
                j++;
            jr_emit(r, at, f + i, j - i);
            i = j;
            continue;
        }
        /* one conversion: flags (glibc's _-0^#), a width, an E or O modifier, the letter */
        while (j < len && (f[j] == '_' || f[j] == '-' || f[j] == '0' || f[j] == '^' ||
                           f[j] == '#'))
            j++;
        int width = 0;
        while (j < len && f[j] >= '0' && f[j] <= '9' && width <= 255)
            width = width * 10 + (f[j++] - '0');
        if (width > 255)
            jr_fail(r, at, LL_ETEMPLATE, "strftime_now(): field width over 255");
        if (j < len && (f[j] == 'E' || f[j] == 'O'))
            j++;
        if (j == len) { /* a conversion cut off by the end: kept as text */
            jr_emit(r, at, f + i, j - i);
            break;
        }
        char spec[16], buf[512];
        if (j + 1 - i >= sizeof spec)
            jr_fail(r, at, LL_ETEMPLATE, "strftime_now(): conversion '%.*s' too long",
                    (int)(j + 1 - i > 40 ? 40 : j + 1 - i), f + i);
        memcpy(spec, f + i, j + 1 - i);
        spec[j + 1 - i] = 0;
        jr_emit(r, at, buf, strftime(buf, sizeof buf, spec, &tm));
        i = j + 1;
    }
    return jr_take(r, mark);
}

static const struct jbuiltin globals[] = {
    {"dict", "*", g_dict},
    {"namespace", "*", g_namespace},
    {"raise_exception", "message", g_raise_exception},
    {"range", "*", g_range},
    {"strftime_now", "format", g_strftime_now},
};

const struct jbuiltin *jglobal_find(const char *name)
{
    return find_in(globals, sizeof globals / sizeof globals[0], name);
}
