/*
 * grammar_regex.c: regular constraints on a JSON string's value (a schema's `pattern`, its
 * `format`, its minLength / maxLength beside them) as one automaton, emitted as grammar rules.
 *
 * A pattern (ECMA-262 syntax, the subset below) is compiled to an NFA over the UTF-8 bytes of
 * the string's value (Thompson's construction; a character class becomes the byte sequences of
 * its code point ranges, surrogates left out), then to a DFA (subset construction). A format is
 * a built-in pattern; a pattern, a format and a length bound together are the product of their
 * DFAs (the length DFA counts code points: bytes that are not UTF-8 continuation bytes). States
 * from which no accepting state can be reached are dropped; each remaining state becomes a rule
 * whose alternatives are its byte transitions (a byte JSON must escape, '"', '\' and control
 * characters, is generated as its escape) and, when it accepts, the closing quote. So the
 * generated text is a JSON string whose value the pattern matches, in one spelling (no "\u"
 * escapes beyond control characters).
 *
 * Patterns: literals (UTF-8), '.', classes [...] and [^...] with ranges, \d \D \w \W \s \S,
 * escapes \t \n \r \f \v \0 \xHH \uHHHH (a surrogate pair as two), an escaped punctuation
 * character, groups ( ), (?: ), (?<name> ), alternation |, quantifiers * + ? {n} {n,} {n,m}
 * (lazy forms too: the same strings). '^' may open the pattern and '$' close it; a pattern not
 * so anchored matches anywhere in the string (JSON Schema's rule), as if "[\s\S]*" stood on the
 * open side. Refused, by name: lookarounds, backreferences, \b \B, \p{...}, \c, anchors inside.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"

#define RX_MAX_NFA 60000      /* NFA states a pattern may build (counted repetition copies) */
#define RX_MAX_DFA 6000       /* DFA states */
#define RX_MAX_WORK 15000000L /* NFA states and edges visited building the DFA (~0.15 s) */
#define RX_MAX_COUNT 1000     /* largest n or m in {n,m} */
#define CP_MAX 0x10FFFF

/* ---- code point sets ---- */

struct cprange {
    int lo, hi;
};

struct cpset {
    struct cprange *r;
    int n, cap;
    bool failed;
};

static void cps_add(struct cpset *s, int lo, int hi)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        struct cprange *r = realloc(s->r, sizeof *r * (size_t)cap);
        if (!r) {
            s->failed = true;
            return;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (struct cprange){lo, hi};
}

static int cmp_range(const void *a, const void *b)
{
    const struct cprange *x = a, *y = b;
    return x->lo - y->lo;
}

/* Sort, merge, and take out the surrogates (not scalar values: no UTF-8 form). */
static void cps_norm(struct cpset *s)
{
    if (s->n > 1)
        qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi)
                s->r[k - 1].hi = s->r[i].hi;
        } else {
            s->r[k++] = s->r[i];
        }
    }
    s->n = k;
    for (int i = 0; i < s->n; i++) {
        struct cprange x = s->r[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF)
            continue;
        if (x.lo < 0xD800 && x.hi > 0xDFFF) { /* split in two */
            s->r[i].hi = 0xD7FF;
            cps_add(s, 0xE000, x.hi);
            cps_norm(s);
            return;
        }
        if (x.lo < 0xD800)
            s->r[i].hi = 0xD7FF;
        else if (x.hi > 0xDFFF)
            s->r[i].lo = 0xE000;
        else
            s->r[i].lo = 1, s->r[i].hi = 0; /* emptied */
    }
}

static void cps_negate(struct cpset *s)
{
    cps_norm(s);
    struct cpset t = {0};
    int next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > s->r[i].hi)
            continue;
        if (s->r[i].lo > next)
            cps_add(&t, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX)
        cps_add(&t, next, CP_MAX);
    free(s->r);
    t.failed |= s->failed;
    *s = t;
    cps_norm(s);
}

/* \d \w \s and their negations (c: the letter). */
static void cps_escape_class(struct cpset *s, char c)
{
    struct cpset t = {0};
    switch (c | 0x20) {
    case 'd':
        cps_add(&t, '0', '9');
        break;
    case 'w':
        cps_add(&t, '0', '9');
        cps_add(&t, 'A', 'Z');
        cps_add(&t, 'a', 'z');
        cps_add(&t, '_', '_');
        break;
    default: /* 's': ECMA-262 WhiteSpace and LineTerminator */
        cps_add(&t, 0x09, 0x0D);
        cps_add(&t, ' ', ' ');
        cps_add(&t, 0xA0, 0xA0);
        cps_add(&t, 0x1680, 0x1680);
        cps_add(&t, 0x2000, 0x200A);
        cps_add(&t, 0x2028, 0x2029);
        cps_add(&t, 0x202F, 0x202F);
        cps_add(&t, 0x205F, 0x205F);
        cps_add(&t, 0x3000, 0x3000);
        cps_add(&t, 0xFEFF, 0xFEFF);
    }
    if (c >= 'A' && c <= 'Z')
        cps_negate(&t);
    for (int i = 0; i < t.n; i++)
        cps_add(s, t.r[i].lo, t.r[i].hi);
    s->failed |= t.failed;
    free(t.r);
}

/* ---- NFA ---- */

struct nedge {
    int lo, hi; /* byte range; lo < 0: epsilon */
    int to, next;
};

struct rx {
    const char *p, *end; /* the pattern, being parsed */
    const char *pattern;
    const char *path;
    struct ll_err *err;
    enum ll_status st; /* first error */
    int *head;         /* per state: first edge (-1: none) */
    int n_states, cap_states;
    struct nedge *e;
    int n_edges, cap_edges;
};

struct frag {
    int s, t; /* start, end (the end has no edges yet) */
};

/* The first error of a pattern; while parsing (r->p set) it says where. */
static enum ll_status rx_fail(struct rx *r, enum ll_status st, const char *what)
{
    if (r->st == LL_OK && r->p)
        r->st = ll_err_set(r->err, st, "%s: pattern \"%.80s\": %s (at offset %d)", r->path,
                           r->pattern, what, (int)(r->p - r->pattern));
    else if (r->st == LL_OK)
        r->st = ll_err_set(r->err, st, "%s: pattern \"%.80s\": %s", r->path, r->pattern, what);
    return r->st;
}

static int nstate(struct rx *r)
{
    if (r->st != LL_OK)
        return 0;
    if (r->n_states >= RX_MAX_NFA) {
        rx_fail(r, LL_EUNSUPPORTED, "too large (counted repetitions expand to too many states)");
        return 0;
    }
    if (r->n_states == r->cap_states) {
        int cap = r->cap_states ? 2 * r->cap_states : 256;
        int *h = realloc(r->head, sizeof *h * (size_t)cap);
        if (!h) {
            rx_fail(r, LL_ENOMEM, "out of memory");
            return 0;
        }
        r->head = h;
        r->cap_states = cap;
    }
    r->head[r->n_states] = -1;
    return r->n_states++;
}

static void nedge(struct rx *r, int from, int to, int lo, int hi)
{
    if (r->st != LL_OK)
        return;
    if (r->n_edges == r->cap_edges) {
        int cap = r->cap_edges ? 2 * r->cap_edges : 512;
        struct nedge *e = realloc(r->e, sizeof *e * (size_t)cap);
        if (!e) {
            rx_fail(r, LL_ENOMEM, "out of memory");
            return;
        }
        r->e = e;
        r->cap_edges = cap;
    }
    r->e[r->n_edges] = (struct nedge){lo, hi, to, r->head[from]};
    r->head[from] = r->n_edges++;
}

static void eps(struct rx *r, int from, int to)
{
    nedge(r, from, to, -1, -1);
}

static int utf8_len(int cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static void utf8_put(int cp, unsigned char *b)
{
    int n = utf8_len(cp);
    if (n == 1) {
        b[0] = (unsigned char)cp;
        return;
    }
    for (int i = n - 1; i > 0; i--, cp >>= 6)
        b[i] = (unsigned char)(0x80 | (cp & 0x3F));
    b[0] = (unsigned char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
}

/* Code points lo..hi (one UTF-8 length) as chains of byte ranges from s to t. */
static void utf8_ranges(struct rx *r, int lo, int hi, int s, int t)
{
    static const int tops[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= tops[i] && hi > tops[i]) {
            utf8_ranges(r, lo, tops[i], s, t);
            utf8_ranges(r, tops[i] + 1, hi, s, t);
            return;
        }
    const int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        const int m = (1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_ranges(r, lo, lo | m, s, t);
                utf8_ranges(r, (lo | m) + 1, hi, s, t);
                return;
            }
            if ((hi & m) != m) {
                utf8_ranges(r, lo, (hi & ~m) - 1, s, t);
                utf8_ranges(r, hi & ~m, hi, s, t);
                return;
            }
        }
    }
    unsigned char a[4], b[4];
    utf8_put(lo, a);
    utf8_put(hi, b);
    int at = s;
    for (int i = 0; i < n; i++) {
        int to = i == n - 1 ? t : nstate(r);
        nedge(r, at, to, a[i], b[i]);
        at = to;
    }
}

static struct frag frag_set(struct rx *r, struct cpset *set)
{
    struct frag f = {nstate(r), nstate(r)};
    cps_norm(set);
    if (set->failed)
        rx_fail(r, LL_ENOMEM, "out of memory");
    for (int i = 0; i < set->n; i++)
        if (set->r[i].lo <= set->r[i].hi)
            utf8_ranges(r, set->r[i].lo, set->r[i].hi, f.s, f.t);
    free(set->r);
    *set = (struct cpset){0};
    return f;
}

static struct frag frag_cp(struct rx *r, int cp)
{
    struct cpset s = {0};
    cps_add(&s, cp, cp);
    return frag_set(r, &s);
}

/* ---- parsing ---- */

static struct frag parse_alt(struct rx *r);

static int hexval(int c)
{
    return c >= '0' && c <= '9'                     ? c - '0'
           : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                    : -1;
}

static int hex_n(struct rx *r, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        int h = r->p < r->end ? hexval((unsigned char)*r->p) : -1;
        if (h < 0) {
            rx_fail(r, LL_EINVAL, "a hex escape needs more hex digits");
            return 0;
        }
        v = v * 16 + h;
        r->p++;
    }
    return v;
}

/* The next UTF-8 character of the pattern. */
static int next_cp(struct rx *r)
{
    const unsigned char *p = (const unsigned char *)r->p;
    size_t left = (size_t)(r->end - r->p);
    int n = p[0] < 0x80 ? 1 : p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC0 ? 2 : 0;
    if (n == 0 || (size_t)n > left) {
        rx_fail(r, LL_EINVAL, "not valid UTF-8");
        r->p = r->end;
        return 0;
    }
    int cp = n == 1 ? p[0] : p[0] & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            n = 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (n == 0 || cp > CP_MAX || (cp >= 0xD800 && cp <= 0xDFFF) ||
        cp < (n == 1   ? 0
              : n == 2 ? 0x80
              : n == 3 ? 0x800
                       : 0x10000)) {
        rx_fail(r, LL_EINVAL, "not valid UTF-8");
        r->p = r->end;
        return 0;
    }
    r->p += n;
    return cp;
}

/* After a backslash: a single character (*cp) or a class (added to cls, *cp = -1). in_class:
 * inside [...] (\b is a backspace there). */
static void parse_escape(struct rx *r, struct cpset *cls, int *cp, bool in_class)
{
    *cp = -1;
    if (r->p >= r->end) {
        rx_fail(r, LL_EINVAL, "a trailing backslash");
        return;
    }
    char c = *r->p++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        cps_escape_class(cls, c);
        return;
    case 't':
        *cp = '\t';
        return;
    case 'n':
        *cp = '\n';
        return;
    case 'r':
        *cp = '\r';
        return;
    case 'f':
        *cp = '\f';
        return;
    case 'v':
        *cp = '\v';
        return;
    case 'x':
        *cp = hex_n(r, 2);
        return;
    case 'u': {
        int u = hex_n(r, 4);
        if (u >= 0xD800 && u <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
            r->p += 2;
            int lo = hex_n(r, 4);
            if (lo < 0xDC00 || lo > 0xDFFF) {
                rx_fail(r, LL_EINVAL, "a high surrogate escape without its low half");
                return;
            }
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        } else if (u >= 0xD800 && u <= 0xDFFF) {
            rx_fail(r, LL_EINVAL, "a lone surrogate escape");
            return;
        }
        *cp = u;
        return;
    }
    case '0':
        if (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            break; /* an octal escape */
        *cp = 0;
        return;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return;
        }
        rx_fail(r, LL_EUNSUPPORTED, "word boundaries (\\b) are not supported");
        return;
    case '-':
        *cp = '-';
        return;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            break;
        if ((unsigned char)c >= 0x80) {
            r->p--;
            *cp = next_cp(r);
            return;
        }
        *cp = (unsigned char)c; /* an escaped punctuation character */
        return;
    }
    char what[64];
    snprintf(what, sizeof what, "the escape \\%c is not supported%s", c,
             c >= '1' && c <= '9' ? " (backreference)"
             : c == 'B'           ? " (word boundary)"
                                  : "");
    rx_fail(r, LL_EUNSUPPORTED, what);
}

static struct frag parse_class(struct rx *r)
{
    struct cpset set = {0};
    bool neg = r->p < r->end && *r->p == '^';
    if (neg)
        r->p++;
    while (r->st == LL_OK) {
        if (r->p >= r->end) {
            rx_fail(r, LL_EINVAL, "an unclosed '['");
            break;
        }
        if (*r->p == ']') {
            r->p++;
            break;
        }
        int lo;
        if (*r->p == '\\') {
            r->p++;
            parse_escape(r, &set, &lo, true);
        } else {
            lo = next_cp(r);
        }
        if (lo < 0 || r->end - r->p < 2 || r->p[0] != '-' || r->p[1] == ']') {
            if (lo >= 0)
                cps_add(&set, lo, lo);
            continue;
        }
        r->p++; /* a range lo-hi */
        int hi;
        if (*r->p == '\\') {
            r->p++;
            parse_escape(r, &set, &hi, true);
            if (hi < 0) {
                rx_fail(r, LL_EINVAL, "a class escape cannot end a range");
                break;
            }
        } else {
            hi = next_cp(r);
        }
        if (hi < lo) {
            rx_fail(r, LL_EINVAL, "a range out of order");
            break;
        }
        cps_add(&set, lo, hi);
    }
    if (neg)
        cps_negate(&set);
    return frag_set(r, &set);
}

static struct frag parse_atom(struct rx *r)
{
    struct frag f = {0, 0};
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->end - r->p >= 2 && r->p[0] == '?') {
            if (r->p[1] == ':') {
                r->p += 2;
            } else if (r->p[1] == '<' && r->end - r->p >= 3 && r->p[2] != '=' && r->p[2] != '!') {
                const char *gt = memchr(r->p, '>', (size_t)(r->end - r->p));
                if (!gt) {
                    rx_fail(r, LL_EINVAL, "an unclosed group name");
                    return f;
                }
                r->p = gt + 1;
            } else {
                rx_fail(r, LL_EUNSUPPORTED, "lookarounds ((?=, (?!, (?<=, (?<!) are not supported");
                return f;
            }
        }
        f = parse_alt(r);
        if (r->st == LL_OK && (r->p >= r->end || *r->p != ')'))
            rx_fail(r, LL_EINVAL, "an unclosed '('");
        r->p++;
        return f;
    }
    if (c == '[') {
        r->p++;
        return parse_class(r);
    }
    if (c == '.') {
        r->p++;
        struct cpset s = {0};
        cps_add(&s, '\n', '\n');
        cps_add(&s, '\r', '\r');
        cps_add(&s, 0x2028, 0x2029);
        cps_negate(&s);
        return frag_set(r, &s);
    }
    if (c == '\\') {
        r->p++;
        struct cpset s = {0};
        int cp;
        parse_escape(r, &s, &cp, false);
        if (cp >= 0)
            cps_add(&s, cp, cp);
        return frag_set(r, &s);
    }
    if (c == '^' || c == '$') {
        rx_fail(r, LL_EUNSUPPORTED,
                "'^' and '$' are supported only at the pattern's start and end");
        return f;
    }
    if (c == '*' || c == '+' || c == '?') {
        rx_fail(r, LL_EINVAL, "a quantifier with nothing to repeat");
        return f;
    }
    return frag_cp(r, next_cp(r));
}

/* {n}, {n,}, {n,m} at r->p: true and the counts (m = -1: unbounded); false (r->p unmoved) when
 * the brace is not a quantifier (then it is a literal '{', as Annex B reads it). */
static bool parse_count(struct rx *r, int *n, int *m)
{
    const char *p = r->p + 1;
    long a = 0, b;
    if (p >= r->end || *p < '0' || *p > '9')
        return false;
    for (; p < r->end && *p >= '0' && *p <= '9'; p++)
        a = a > RX_MAX_COUNT ? a : a * 10 + (*p - '0'); /* saturates past the limit */
    b = a;
    if (p < r->end && *p == ',') {
        p++;
        if (p < r->end && *p == '}') {
            b = -1;
        } else {
            if (p >= r->end || *p < '0' || *p > '9')
                return false;
            b = 0;
            for (; p < r->end && *p >= '0' && *p <= '9'; p++)
                b = b > RX_MAX_COUNT ? b : b * 10 + (*p - '0');
        }
    }
    if (p >= r->end || *p != '}')
        return false;
    r->p = p + 1;
    if (a > RX_MAX_COUNT || b > RX_MAX_COUNT) {
        rx_fail(r, LL_EUNSUPPORTED, "a count above 1000 in {n,m}");
        return true;
    }
    if (b >= 0 && b < a) {
        rx_fail(r, LL_EINVAL, "{n,m} with m < n");
        return true;
    }
    *n = (int)a;
    *m = (int)b;
    return true;
}

/* An atom and its quantifiers; the atom is parsed again for each copy a count needs. */
static struct frag parse_repeat(struct rx *r)
{
    const char *start = r->p;
    struct frag f = parse_atom(r);
    while (r->st == LL_OK && r->p < r->end) {
        int n, m;
        char c = *r->p;
        if (c == '*' || c == '+' || c == '?') {
            r->p++;
            n = c == '+';
            m = c == '?' ? 1 : -1;
        } else if (c != '{' || !parse_count(r, &n, &m)) {
            break;
        }
        if (r->st != LL_OK)
            break;
        if (r->p < r->end && *r->p == '?')
            r->p++; /* lazy: the same strings */
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{')) {
            int n2, m2;
            const char *save = r->p;
            if (*r->p != '{' || parse_count(r, &n2, &m2)) {
                r->p = save;
                rx_fail(r, LL_EINVAL, "a quantifier after a quantifier");
                break;
            }
        }
        const char *after = r->p;
        /* copies: f itself, then the atom parsed again (the atom's text is start..) */
        struct frag out = {nstate(r), 0};
        int at = out.s, total = m < 0 ? (n > 0 ? n : 1) : m;
        if (total == 0) { /* {0} or {0,0}: the empty string */
            out.t = at;
            f = out;
            continue;
        }
        int end = nstate(r);
        for (int i = 0; i < total && r->st == LL_OK; i++) {
            struct frag c2 = f;
            if (i > 0) {
                r->p = start;
                c2 = parse_atom(r);
            }
            eps(r, at, c2.s);
            if (i >= n)
                eps(r, at, end); /* an optional copy may be skipped (and so may the rest) */
            if (m < 0 && i == total - 1) { /* the last copy repeats */
                eps(r, c2.t, c2.s);
                if (n == 0)
                    eps(r, at, end);
            }
            at = c2.t;
        }
        eps(r, at, end);
        r->p = after;
        f = (struct frag){out.s, end};
    }
    return f;
}

static struct frag parse_concat(struct rx *r)
{
    struct frag f = {nstate(r), 0};
    f.t = f.s;
    while (r->st == LL_OK && r->p < r->end && *r->p != '|' && *r->p != ')') {
        struct frag g = parse_repeat(r);
        eps(r, f.t, g.s);
        f.t = g.t;
    }
    return f;
}

static struct frag parse_alt(struct rx *r)
{
    struct frag f = parse_concat(r);
    if (r->p >= r->end || *r->p != '|')
        return f;
    struct frag out = {nstate(r), nstate(r)};
    eps(r, out.s, f.s);
    eps(r, f.t, out.t);
    while (r->st == LL_OK && r->p < r->end && *r->p == '|') {
        r->p++;
        struct frag g = parse_concat(r);
        eps(r, out.s, g.s);
        eps(r, g.t, out.t);
    }
    return out;
}

/* [\s\S]* as a fragment (an unanchored side). */
static struct frag any_star(struct rx *r)
{
    struct cpset s = {0};
    cps_add(&s, 0, CP_MAX);
    struct frag c = frag_set(r, &s);
    struct frag f = {nstate(r), nstate(r)};
    eps(r, f.s, c.s);
    eps(r, c.t, f.s);
    eps(r, f.s, f.t);
    return f;
}

/* ---- DFA ---- */

struct dfa {
    int n, cap;
    int (*next)[256]; /* -1: no transition */
    bool *acc;
};

static void dfa_free(struct dfa *d)
{
    free(d->next);
    free(d->acc);
    *d = (struct dfa){0};
}

static int dfa_add(struct dfa *d)
{
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        int(*nx)[256] = realloc(d->next, sizeof *nx * (size_t)cap);
        if (nx)
            d->next = nx;
        bool *acc = realloc(d->acc, sizeof *acc * (size_t)cap);
        if (acc)
            d->acc = acc;
        if (!nx || !acc)
            return -1;
        d->cap = cap;
    }
    memset(d->next[d->n], -1, sizeof d->next[d->n]);
    d->acc[d->n] = false;
    return d->n++;
}

/* Interned sets of ints (NFA state sets; product pairs), by hash. */
struct intern {
    int **sets; /* sets[i]: [count, elements...] */
    int n, cap;
    int *slot; /* open addressing: index + 1, 0 empty */
    int nslot;
};

static uint64_t hash_ints(const int *a, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)a[i]) * 1099511628211ull;
    return h;
}

/* The id of set a[0..n) (added when new; -1: out of memory). *added tells. */
static int intern_get(struct intern *t, const int *a, int n, bool *added)
{
    *added = false;
    if (2 * (t->n + 1) > t->nslot) {
        int ns = t->nslot ? 2 * t->nslot : 1024;
        int *slot = calloc((size_t)ns, sizeof *slot);
        if (!slot)
            return -1;
        for (int i = 0; i < t->n; i++) {
            uint64_t h = hash_ints(t->sets[i] + 1, t->sets[i][0]);
            int k = (int)(h & (uint64_t)(ns - 1));
            while (slot[k])
                k = (k + 1) & (ns - 1);
            slot[k] = i + 1;
        }
        free(t->slot);
        t->slot = slot;
        t->nslot = ns;
    }
    uint64_t h = hash_ints(a, n);
    int k = (int)(h & (uint64_t)(t->nslot - 1));
    for (; t->slot[k]; k = (k + 1) & (t->nslot - 1)) {
        const int *s = t->sets[t->slot[k] - 1];
        if (s[0] == n && !memcmp(s + 1, a, sizeof *a * (size_t)n))
            return t->slot[k] - 1;
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        int **sets = realloc(t->sets, sizeof *sets * (size_t)cap);
        if (!sets)
            return -1;
        t->sets = sets;
        t->cap = cap;
    }
    int *copy = malloc(sizeof *copy * (size_t)(n + 1));
    if (!copy)
        return -1;
    copy[0] = n;
    memcpy(copy + 1, a, sizeof *a * (size_t)n);
    t->sets[t->n] = copy;
    t->slot[k] = t->n + 1;
    *added = true;
    return t->n++;
}

static void intern_free(struct intern *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->sets[i]);
    free(t->sets);
    free(t->slot);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The epsilon closure of set[0..*n) in place (sorted), keeping only the states that matter to
 * the DFA (keep: those with a byte edge, and the accepting one); mark/gen: a visited mark per
 * state; *work counts the states and edges visited. */
static void closure(const struct rx *r, int *set, int *n, int *stack, unsigned *mark, unsigned gen,
                    const bool *keep, long *work)
{
    int top = 0;
    for (int i = 0; i < *n; i++)
        if (mark[set[i]] != gen) {
            mark[set[i]] = gen;
            stack[top++] = set[i];
        }
    *n = 0;
    while (top) {
        int s = stack[--top];
        if (keep[s])
            set[(*n)++] = s;
        for (int e = r->head[s]; e >= 0; e = r->e[e].next, ++*work)
            if (r->e[e].lo < 0 && mark[r->e[e].to] != gen) {
                mark[r->e[e].to] = gen;
                stack[top++] = r->e[e].to;
            }
    }
    qsort(set, (size_t)*n, sizeof *set, cmp_int);
}

/* Subset construction from start to accept. */
static enum ll_status nfa_to_dfa(struct rx *r, int start, int accept, struct dfa *d)
{
    const int ns = r->n_states;
    int *set = malloc(sizeof *set * (size_t)ns), *stack = malloc(sizeof *stack * (size_t)ns);
    unsigned *mark = calloc((size_t)ns, sizeof *mark);
    bool *keep = calloc((size_t)ns, sizeof *keep);
    struct intern in = {0};
    enum ll_status st = LL_OK;
    unsigned gen = 0;
    long work = 0;
    if (!set || !stack || !mark || !keep) {
        st = rx_fail(r, LL_ENOMEM, "out of memory");
        goto out;
    }
    for (int q = 0; q < ns; q++)
        for (int e = r->head[q]; e >= 0 && !keep[q]; e = r->e[e].next)
            keep[q] = r->e[e].lo >= 0;
    keep[accept] = true;
    int n = 1;
    set[0] = start;
    closure(r, set, &n, stack, mark, ++gen, keep, &work);
    bool added;
    if (intern_get(&in, set, n, &added) < 0 || dfa_add(d) < 0) {
        st = rx_fail(r, LL_ENOMEM, "out of memory");
        goto out;
    }
    for (int q = 0; q < in.n && st == LL_OK; q++) {
        const int *cur = in.sets[q] + 1, cn = in.sets[q][0];
        /* the bytes where some edge of the set starts or ends split 0..255 into classes */
        bool cut[257] = {false};
        cut[0] = cut[256] = true;
        for (int i = 0; i < cn; i++) {
            if (cur[i] == accept)
                d->acc[q] = true;
            for (int e = r->head[cur[i]]; e >= 0; e = r->e[e].next)
                if (r->e[e].lo >= 0)
                    cut[r->e[e].lo] = cut[r->e[e].hi + 1] = true;
        }
        for (int lo = 0; lo < 256 && st == LL_OK;) {
            int hi = lo;
            while (!cut[hi + 1])
                hi++;
            n = 0;
            ++gen;
            for (int i = 0; i < cn; i++)
                for (int e = r->head[cur[i]]; e >= 0; e = r->e[e].next, work++)
                    if (r->e[e].lo >= 0 && r->e[e].lo <= lo && lo <= r->e[e].hi &&
                        mark[r->e[e].to] != gen) {
                        mark[r->e[e].to] = gen;
                        set[n++] = r->e[e].to;
                    }
            if (n)
                closure(r, set, &n, stack, mark, ++gen, keep, &work);
            if (work > RX_MAX_WORK) {
                st = rx_fail(r, LL_EUNSUPPORTED,
                             "too complex (its automaton takes too long to "
                             "build)");
            } else if (n) {
                int id = intern_get(&in, set, n, &added);
                if (id < 0 || (added && dfa_add(d) < 0))
                    st = rx_fail(r, LL_ENOMEM, "out of memory");
                else if (d->n > RX_MAX_DFA)
                    st = rx_fail(r, LL_EUNSUPPORTED,
                                 "too complex (its automaton exceeds 6000 "
                                 "states)");
                else
                    for (int b = lo; b <= hi; b++)
                        d->next[q][b] = id;
            }
            lo = hi + 1;
        }
    }
out:
    free(set);
    free(stack);
    free(mark);
    free(keep);
    intern_free(&in);
    return st;
}

/* The DFA of a pattern (anchored: matched whole, as formats are). */
static enum ll_status pattern_dfa(const char *pattern, bool whole, const char *path, struct dfa *d,
                                  struct ll_err *err)
{
    size_t len = strlen(pattern);
    struct rx r = {
        .p = pattern, .end = pattern + len, .pattern = pattern, .path = path, .err = err};
    bool open_start = !whole, open_end = !whole;
    if (r.p < r.end && *r.p == '^') {
        r.p++;
        open_start = false;
    }
    if (r.end > r.p && r.end[-1] == '$') {
        /* '$' closes the pattern unless escaped (an odd run of backslashes before it) */
        int bs = 0;
        for (const char *q = r.end - 2; q >= r.p && *q == '\\'; q--)
            bs++;
        if (bs % 2 == 0) {
            r.end--;
            open_end = false;
        }
    }
    int start = nstate(&r);
    int at = start;
    if (open_start) {
        struct frag a = any_star(&r);
        eps(&r, at, a.s);
        at = a.t;
    }
    struct frag f = parse_alt(&r);
    if (r.st == LL_OK && r.p < r.end)
        rx_fail(&r, LL_EINVAL, *r.p == ')' ? "an unmatched ')'" : "unexpected text");
    eps(&r, at, f.s);
    at = f.t;
    if (open_end) {
        struct frag a = any_star(&r);
        eps(&r, at, a.s);
        at = a.t;
    }
    enum ll_status st = r.st;
    r.p = NULL; /* parsed: errors from here on are the whole pattern's */
    if (st == LL_OK)
        st = nfa_to_dfa(&r, start, at, d);
    free(r.head);
    free(r.e);
    return st;
}

/* Code points counted: min..max (max < 0: unbounded) of them, over UTF-8 bytes. */
static enum ll_status length_dfa(int min, int max, struct dfa *d)
{
    const int top = max >= 0 ? max : min; /* count states 0..top (top saturates if unbounded) */
    for (int c = 0; c <= top; c++)
        if (dfa_add(d) < 0)
            return LL_ENOMEM;
    for (int c = 0; c <= top; c++) {
        d->acc[c] = c >= min;
        for (int b = 0; b < 256; b++) {
            int to = b >= 0x80 && b <= 0xBF ? c : c + 1;
            d->next[c][b] = to <= top ? to : max >= 0 ? -1 : top;
        }
    }
    return LL_OK;
}

/* The product of a and b (strings both accept) into *out. */
static enum ll_status dfa_product(const struct dfa *a, const struct dfa *b, struct dfa *out)
{
    struct intern in = {0};
    bool added;
    enum ll_status st = LL_OK;
    int pair[2] = {0, 0};
    if (intern_get(&in, pair, 2, &added) < 0 || dfa_add(out) < 0)
        st = LL_ENOMEM;
    for (int q = 0; q < in.n && st == LL_OK; q++) {
        const int x = in.sets[q][1], y = in.sets[q][2];
        out->acc[q] = a->acc[x] && b->acc[y];
        for (int c = 0; c < 256 && st == LL_OK; c++) {
            pair[0] = a->next[x][c];
            pair[1] = b->next[y][c];
            if (pair[0] < 0 || pair[1] < 0)
                continue;
            int id = intern_get(&in, pair, 2, &added);
            if (id < 0 || (added && dfa_add(out) < 0))
                st = LL_ENOMEM;
            else if (out->n > RX_MAX_DFA)
                st = LL_EUNSUPPORTED;
            else
                out->next[q][c] = id;
        }
    }
    intern_free(&in);
    return st;
}

/* ---- formats ---- */

#define RX_DATE                                                                                    \
    "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|" \
    "30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define RX_TIME                                                                                    \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):"   \
    "[0-5][0-9])"
#define RX_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define RX_LABEL "[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?"
#define RX_HOST RX_LABEL "(?:\\." RX_LABEL "){0,3}"
#define RX_SECS "[0-9]{1,4}(?:\\.[0-9]{1,6})?S"
#define RX_DUR_T                                                                                   \
    "T(?:[0-9]{1,4}H(?:[0-9]{1,4}M)?(?:" RX_SECS ")?|[0-9]{1,4}M(?:" RX_SECS ")?|" RX_SECS ")"
#define RX_URI_CHARS "[A-Za-z0-9._~!$&'()*+,;=:@-]"

static const struct {
    const char *name, *pattern;
} formats[] = {
    {"date", RX_DATE},
    {"time", RX_TIME},
    {"date-time", RX_DATE "T" RX_TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", RX_OCTET "(?:\\." RX_OCTET "){3}"},
    /* a conservative address: dot-atoms of letters, digits and _ + -, at most 3 parts of 20
     * characters before the @; a host of up to 4 labels and a top-level name of letters */
    {"email", "[a-z0-9_+-]{1,20}(?:\\.[a-z0-9_+-]{1,20}){0,2}@" RX_LABEL "(?:\\." RX_LABEL
              "){0,2}\\.[a-z]{2,12}"},
    /* RFC 1123 host names: up to 4 labels of up to 22 characters */
    {"hostname", RX_HOST},
    /* http(s) URLs: a host name or an IPv4 address, a port below 10000, a path, a query and a
     * fragment of unreserved and sub-delimiter characters (no percent-escapes) */
    {"uri", "https?://(?:" RX_HOST "|" RX_OCTET "(?:\\." RX_OCTET
            "){3})(?::[1-9][0-9]{0,3})?(?:/" RX_URI_CHARS "*)*(?:\\?(?:" RX_URI_CHARS
            "|[/?])*)?(?:#(?:" RX_URI_CHARS "|[/?])*)?"},
    /* ISO 8601 durations (RFC 3339 appendix A): days, hours, minutes, seconds; or weeks */
    {"duration", "P(?:[0-9]{1,4}D(?:" RX_DUR_T ")?|" RX_DUR_T "|[0-9]{1,4}W)"},
};

/* ---- rules ---- */

/* The JSON escape of byte c when a string must escape it, else NULL. */
static const char *json_escape(int c, char buf[8])
{
    switch (c) {
    case '"':
        return "\\\"";
    case '\\':
        return "\\\\";
    case '\b':
        return "\\b";
    case '\f':
        return "\\f";
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    }
    if (c >= 0x20)
        return NULL;
    snprintf(buf, 8, "\\u%04x", c);
    return buf;
}

/* Rules for the live states of d: a JSON string whose value d accepts, or (raw) the text d
 * accepts as it is. LL_EINVAL when it accepts nothing. */
static enum ll_status dfa_rules(struct gbuild *b, const struct dfa *d, bool raw, const char *path,
                                const char *what, int *rule, struct ll_err *err)
{
    bool *live = calloc((size_t)d->n, sizeof *live);
    int *rid = malloc(sizeof *rid * (size_t)d->n);
    if (!live || !rid) {
        free(live);
        free(rid);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    enum ll_status st = LL_OK;
    /* live: some accepting state is reachable; found backwards from the accepting states over
     * the predecessor lists (each state's distinct successors, counted first) */
    int *start = calloc((size_t)d->n + 1, sizeof *start), *pred = NULL, *queue = NULL;
    int n_pred = 0;
    for (int q = 0; start && q < d->n; q++)
        for (int c = 0; c < 256; c++) {
            const int to = d->next[q][c];
            if (to >= 0 && (c == 0 || d->next[q][c - 1] != to)) {
                start[to + 1]++;
                n_pred++;
            }
        }
    if (start) {
        pred = malloc(sizeof *pred * (size_t)(n_pred + 1));
        queue = malloc(sizeof *queue * (size_t)d->n);
    }
    if (!start || !pred || !queue) {
        free(start);
        free(pred);
        free(queue);
        free(live);
        free(rid);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    for (int q = 0; q < d->n; q++)
        start[q + 1] += start[q];
    for (int q = 0; q < d->n; q++) /* fill, using rid as the fill cursor of each list */
        rid[q] = start[q];
    for (int q = 0; q < d->n; q++)
        for (int c = 0; c < 256; c++) {
            const int to = d->next[q][c];
            if (to >= 0 && (c == 0 || d->next[q][c - 1] != to))
                pred[rid[to]++] = q;
        }
    int head = 0, tail = 0;
    for (int q = 0; q < d->n; q++)
        if (d->acc[q])
            live[q] = true, queue[tail++] = q;
    while (head < tail) {
        const int q = queue[head++];
        for (int i = start[q]; i < start[q + 1]; i++)
            if (!live[pred[i]])
                live[pred[i]] = true, queue[tail++] = pred[i];
    }
    free(start);
    free(pred);
    free(queue);
    if (!live[0]) {
        st = ll_err_set(err, LL_EINVAL, "%s: no string meets %s", path, what);
        goto out;
    }
    for (int q = 0; q < d->n; q++)
        rid[q] = live[q] ? gb_rule(b) : -1;
    struct gseq g = {0};
    for (int q = 0; q < d->n; q++) {
        if (!live[q])
            continue;
        if (d->acc[q]) {
            gseq_clear(&g);
            if (!raw)
                gseq_byte(b, &g, '"');
            gb_alt(b, rid[q], &g);
        }
        bool done[256] = {false};
        for (int c = 0; c < 256; c++) {
            const int to = d->next[q][c];
            if (done[c] || to < 0 || !live[to])
                continue;
            struct gset set = {{0}};
            bool any = false;
            for (int c2 = c; c2 < 256; c2++) {
                char buf[8];
                const char *esc;
                if (done[c2] || d->next[q][c2] != to)
                    continue;
                done[c2] = true;
                if (!raw && (esc = json_escape(c2, buf))) {
                    gseq_clear(&g);
                    gseq_lit(b, &g, esc, strlen(esc));
                    gseq_rule(&g, rid[to]);
                    gb_alt(b, rid[q], &g);
                } else {
                    gset_add(&set, (unsigned)c2);
                    any = true;
                }
            }
            if (any) {
                gseq_clear(&g);
                gseq_setsym(&g, gb_set(b, &set));
                gseq_rule(&g, rid[to]);
                gb_alt(b, rid[q], &g);
            }
        }
    }
    gseq_clear(&g);
    if (!raw)
        gseq_byte(b, &g, '"');
    gseq_rule(&g, rid[0]);
    *rule = gb_rule(b);
    gb_alt(b, *rule, &g);
    gseq_free(&g);
    if (b->failed)
        st = ll_err_set(err, LL_ENOMEM, "out of memory");
out:
    free(live);
    free(rid);
    return st;
}

enum ll_status grammar_string_regular(struct gbuild *b, const char *pattern, const char *format,
                                      int min, int max, const char *path, int *rule,
                                      struct ll_err *err)
{
    struct dfa d = {0}, e = {0}, t = {0};
    enum ll_status st = LL_OK;
    char what[160];
    snprintf(what, sizeof what, "%s%s%s%s%s", pattern ? "its 'pattern'" : "",
             pattern && format ? " and " : "", format ? "its 'format'" : "",
             min > 0 || max >= 0 ? " with " : "", min > 0 || max >= 0 ? "its length bounds" : "");
    const char *fpat = NULL;
    if (format) {
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (!strcmp(format, formats[i].name))
                fpat = formats[i].pattern;
        if (!fpat)
            return ll_err_set(
                err, LL_EUNSUPPORTED,
                "%s: format '%.60s' is not supported "
                "(supported: date, time, date-time, duration, uuid, ipv4, email, hostname, uri)",
                path, format);
    }
    bool have = false;
    const char *const pats[2] = {pattern, fpat};
    for (int i = 0; i < 2 && st == LL_OK; i++) {
        if (!pats[i])
            continue;
        if ((st = pattern_dfa(pats[i], i == 1, path, have ? &e : &d, err)) != LL_OK)
            break;
        if (have) {
            if ((st = dfa_product(&d, &e, &t)) != LL_OK)
                break;
            dfa_free(&d);
            dfa_free(&e);
            d = t;
            t = (struct dfa){0};
        }
        have = true;
    }
    if (st == LL_OK && (min > 0 || max >= 0)) {
        if ((st = length_dfa(min, max, &e)) == LL_OK && (st = dfa_product(&d, &e, &t)) == LL_OK) {
            dfa_free(&d);
            d = t;
            t = (struct dfa){0};
        }
    }
    if (st == LL_ENOMEM && !err->msg[0])
        ll_err_set(err, LL_ENOMEM, "out of memory");
    else if (st == LL_EUNSUPPORTED && !err->msg[0])
        ll_err_set(err, LL_EUNSUPPORTED, "%s: %s make too large an automaton", path, what);
    if (st == LL_OK)
        st = dfa_rules(b, &d, false, path, what, rule, err);
    dfa_free(&d);
    dfa_free(&e);
    dfa_free(&t);
    return st;
}

enum ll_status grammar_regex_text(struct gbuild *b, const char *pattern, const char *path,
                                  int *rule, struct ll_err *err)
{
    struct dfa d = {0};
    enum ll_status st = pattern_dfa(pattern, true, path, &d, err);
    if (st == LL_OK)
        st = dfa_rules(b, &d, true, path, "the pattern", rule, err);
    dfa_free(&d);
    return st;
}
