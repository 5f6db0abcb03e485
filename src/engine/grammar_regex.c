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
 * (lazy forms too: the same strings), and assertions anywhere: '^' (the string's start), '$' (its
 * end), lookaheads (?=X) and (?!X). A pattern matches anywhere in the string (JSON Schema's
 * rule), as if "[\s\S]*" stood before and after it; '^' and '$' anchor it.
 *
 * Assertions in the subset construction: a configuration is an NFA state, whether a '$' has been
 * passed (then no byte may follow), and the lookaheads pending on its path. A lookahead's body is
 * compiled on its own to a DFA of "the body, then any bytes"; meeting (?=X) adds "the rest of the
 * string must be accepted from this state of X's DFA", which each byte advances: the path dies
 * when X's DFA can no longer accept and the lookahead is dropped once it accepts every
 * continuation; (?!X) the other way round; at the string's end what is pending must (not) accept.
 * '^' is passed only in the start state's closure. Refused, by name: lookbehinds,
 * backreferences, \b \B, \p{...}, \c, quantified assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"

#define RX_MAX_NFA 60000      /* NFA states a pattern may build (counted repetition copies) */
#define RX_MAX_DFA 6000       /* DFA states */
#define RX_MAX_WORK 15000000L /* NFA states and edges visited building the DFAs (~0.2 s) */
#define RX_MAX_COUNT 1000     /* largest n or m in {n,m} */
#define RX_MAX_LOOK 16        /* lookaheads in a pattern (or in a lookahead's body) */
#define RX_MAX_LOOK_DEPTH 4   /* lookaheads inside lookaheads */
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

/* An edge reads a byte range (lo >= 0) or nothing: */
enum {
    E_EPS = -1,  /* always */
    E_BOS = -2,  /* '^': only at the string's start */
    E_EOS = -3,  /* '$': no byte may follow */
    E_LOOK = -4, /* a lookahead (hi: which), checked on the rest of the string */
};

struct nedge {
    int lo, hi; /* byte range; or lo an E_* kind */
    int to, next;
};

struct dfa {
    int n, cap;
    int (*next)[256]; /* -1: no transition */
    bool *acc;
};

/* A lookahead's body, compiled on its own to a DFA of "the body, then anything": a path that
 * meets (?=X) goes on only while that DFA can still accept the rest of the string, one that
 * meets (?!X) only while it can still reject it. */
struct look {
    const char *text, *after; /* the body in the pattern; just past its ')' */
    bool negative;
    struct dfa d;
    int start1; /* the start state where the body is met past the string's start ('^' fails) */
    bool *univ; /* states that accept every continuation: the body has matched */
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
    struct look *look; /* the lookaheads met, by their body's text */
    int n_look;
    int depth;  /* lookaheads inside lookaheads */
    long *work; /* building the automata: NFA states and edges visited, for all depths */
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
    nedge(r, from, to, E_EPS, 0);
}

static void dfa_free(struct dfa *d);

static void rx_free(struct rx *r)
{
    for (int k = 0; k < r->n_look; k++) {
        dfa_free(&r->look[k].d);
        free(r->look[k].univ);
    }
    free(r->look);
    free(r->head);
    free(r->e);
}

/* A fragment that reads nothing and passes an edge of kind lo (hi: its argument). */
static struct frag frag_assert(struct rx *r, int lo, int hi)
{
    struct frag f = {nstate(r), nstate(r)};
    nedge(r, f.s, f.t, lo, hi);
    return f;
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
static int look_compile(struct rx *r, bool negative);

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
            } else if (r->p[1] == '=' || r->p[1] == '!') {
                const bool negative = r->p[1] == '!';
                r->p += 2;
                const int k = look_compile(r, negative);
                return k < 0 ? f : frag_assert(r, E_LOOK, k);
            } else if (r->p[1] == '<' && r->end - r->p >= 3 && r->p[2] != '=' && r->p[2] != '!') {
                const char *gt = memchr(r->p, '>', (size_t)(r->end - r->p));
                if (!gt) {
                    rx_fail(r, LL_EINVAL, "an unclosed group name");
                    return f;
                }
                r->p = gt + 1;
            } else if (r->p[1] == '<') {
                rx_fail(r, LL_EUNSUPPORTED, "lookbehinds ((?<=, (?<!) are not supported");
                return f;
            } else {
                rx_fail(r, LL_EUNSUPPORTED, "this kind of group '(?' is not supported");
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
        r->p++;
        return frag_assert(r, c == '^' ? E_BOS : E_EOS, 0);
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
    const bool assertion =
        *start == '^' || *start == '$' ||
        (r->end - start >= 3 && start[0] == '(' && start[1] == '?' &&
         (start[2] == '=' || start[2] == '!'));
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
        if (assertion) {
            rx_fail(r, LL_EINVAL, "a quantifier after an assertion ('^', '$', a lookahead)");
            break;
        }
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

/* ---- subset construction ---- */

struct ivec {
    int *v;
    int n, cap;
};

static bool ivec_push(struct ivec *a, int x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 256;
        int *v = realloc(a->v, sizeof *v * (size_t)cap);
        if (!v)
            return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

/* a[0..n) sorted, duplicates dropped; the new count. */
static int sort_unique(int *a, int n)
{
    if (n < 2)
        return n;
    qsort(a, (size_t)n, sizeof *a, cmp_int);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || a[m - 1] != a[i])
            a[m++] = a[i];
    return m;
}

/* A configuration of the subset construction: an NFA state, whether a '$' has been passed (then
 * no byte may follow), and the lookaheads pending on the path, each as a state of its body's DFA
 * (a "code": base[k] + that state). A plain configuration (no '$', nothing pending) is numbered by
 * its NFA state; the others are interned as [q, ended, codes...] (codes sorted) and numbered
 * after the NFA's states. */
struct cfgs {
    const struct rx *r;
    int ns, accept;
    bool *reads;    /* per NFA state: it has a byte edge */
    struct intern in;
    int *base;      /* per lookahead: the code of its DFA's state 0 */
    int *code_look; /* per code: its lookahead */
    unsigned *mark; /* per configuration: a visit mark */
    int n_mark;
    int *buf; /* room for a configuration being interned */
};

static int cfg_get(const struct cfgs *c, int id, bool *ended, const int **codes, int *nc)
{
    if (id < c->ns) {
        *ended = false;
        *codes = NULL;
        *nc = 0;
        return id;
    }
    const int *a = c->in.sets[id - c->ns]; /* [len, q, ended, codes...] */
    *ended = a[2];
    *codes = a + 3;
    *nc = a[0] - 2;
    return a[1];
}

/* The id of (q, ended, codes[0..nc) plus extra when >= 0); -1: out of memory. */
static int cfg_id(struct cfgs *c, int q, bool ended, const int *codes, int nc, int extra)
{
    if (!ended && nc == 0 && extra < 0)
        return q;
    int n = 0;
    c->buf[n++] = q;
    c->buf[n++] = ended;
    for (int i = 0; i < nc; i++)
        c->buf[n++] = codes[i];
    if (extra >= 0)
        c->buf[n++] = extra;
    n = 2 + sort_unique(c->buf + 2, n - 2);
    bool added;
    const int i = intern_get(&c->in, c->buf, n, &added);
    if (i < 0)
        return -1;
    if (c->ns + c->in.n > c->n_mark) {
        int cap = 2 * (c->ns + c->in.n);
        unsigned *m = realloc(c->mark, sizeof *m * (size_t)cap);
        if (!m)
            return -1;
        memset(m + c->n_mark, 0, sizeof *m * (size_t)(cap - c->n_mark));
        c->mark = m;
        c->n_mark = cap;
    }
    return c->ns + i;
}

/* Whether configuration id accepts where the string ends: at the NFA's accepting state, with
 * each pending lookahead's body matching (or, negative, not matching) the empty rest. */
static bool cfg_accepts(const struct cfgs *c, int id)
{
    bool ended;
    const int *codes;
    int nc;
    if (cfg_get(c, id, &ended, &codes, &nc) != c->accept)
        return false;
    for (int i = 0; i < nc; i++) {
        const struct look *lk = &c->r->look[c->code_look[codes[i]]];
        if (lk->d.acc[codes[i] - c->base[c->code_look[codes[i]]]] == lk->negative)
            return false;
    }
    return true;
}

/* The pending codes after byte b: into out (sorted); -1 when a lookahead fails. */
static int codes_step(const struct cfgs *c, const int *codes, int nc, int b, int *out)
{
    int m = 0;
    for (int i = 0; i < nc; i++) {
        const int k = c->code_look[codes[i]];
        const struct look *lk = &c->r->look[k];
        const int s = lk->d.next[codes[i] - c->base[k]][b];
        if (s < 0 ? !lk->negative : lk->univ[s] && lk->negative)
            return -1; /* the body can no longer match / has matched */
        if (s >= 0 && !lk->univ[s])
            out[m++] = c->base[k] + s;
    }
    return sort_unique(out, m);
}

/* set (configuration ids) closed over the edges that read no byte, keeping the configurations
 * that matter to the DFA (those that may read a byte, or accept); sorted. origin: at the
 * string's start ('^' holds). false: out of memory. */
static bool cfg_closure(struct cfgs *c, struct ivec *set, struct ivec *stack, unsigned gen,
                        bool origin, long *work)
{
    const struct rx *r = c->r;
    stack->n = 0;
    for (int i = 0; i < set->n; i++)
        if (c->mark[set->v[i]] != gen) {
            c->mark[set->v[i]] = gen;
            if (!ivec_push(stack, set->v[i]))
                return false;
        }
    set->n = 0;
    while (stack->n) {
        const int id = stack->v[--stack->n];
        bool ended;
        const int *codes;
        int nc;
        const int q = cfg_get(c, id, &ended, &codes, &nc);
        if ((ended ? q == c->accept : c->reads[q] || q == c->accept) && !ivec_push(set, id))
            return false;
        for (int e = r->head[q]; e >= 0; e = r->e[e].next, ++*work) {
            const struct nedge *x = &r->e[e];
            int to;
            if (x->lo >= 0 || (x->lo == E_BOS && !origin))
                continue;
            if (x->lo == E_LOOK) {
                const struct look *lk = &r->look[x->hi];
                const int s = origin ? 0 : lk->start1;
                if (lk->univ[s] && lk->negative)
                    continue;
                to = cfg_id(c, x->to, ended, codes, nc, lk->univ[s] ? -1 : c->base[x->hi] + s);
            } else if (id < c->ns && x->lo != E_EOS) {
                to = x->to; /* plain stays plain */
            } else {
                to = cfg_id(c, x->to, ended || x->lo == E_EOS, codes, nc, -1);
            }
            if (to < 0)
                return false;
            if (c->mark[to] != gen) {
                c->mark[to] = gen;
                if (!ivec_push(stack, to))
                    return false;
            }
        }
    }
    qsort(set->v, (size_t)set->n, sizeof *set->v, cmp_int);
    return true;
}

/* Subset construction from start to accept. State 0 starts at the string's start; *start1 (when
 * asked) is the state that starts past it (a lookahead's body met after the first byte). */
static enum ll_status nfa_to_dfa(struct rx *r, int start, int accept, struct dfa *d, int *start1)
{
    const int ns = r->n_states;
    struct cfgs c = {.r = r, .ns = ns, .accept = accept, .n_mark = ns};
    struct intern in = {0};
    struct ivec set = {0}, stack = {0};
    int n_codes = 0, *adv = NULL;
    for (int k = 0; k < r->n_look; k++)
        n_codes += r->look[k].d.n;
    c.reads = calloc((size_t)ns, sizeof *c.reads);
    c.mark = calloc((size_t)ns, sizeof *c.mark);
    c.base = malloc(sizeof *c.base * (size_t)(r->n_look + 1));
    c.code_look = malloc(sizeof *c.code_look * (size_t)(n_codes + 1));
    c.buf = malloc(sizeof *c.buf * (size_t)(n_codes + 3));
    adv = malloc(sizeof *adv * (size_t)(n_codes + 1));
    enum ll_status st = LL_OK;
    unsigned gen = 0;
    bool added;
    if (!c.reads || !c.mark || !c.base || !c.code_look || !c.buf || !adv) {
        st = rx_fail(r, LL_ENOMEM, "out of memory");
        goto out;
    }
    for (int k = 0, at = 0; k < r->n_look; k++) {
        c.base[k] = at;
        for (int i = 0; i < r->look[k].d.n; i++)
            c.code_look[at++] = k;
    }
    for (int q = 0; q < ns; q++)
        for (int e = r->head[q]; e >= 0 && !c.reads[q]; e = r->e[e].next)
            c.reads[q] = r->e[e].lo >= 0;
    for (int o = 0; o < (start1 ? 2 : 1); o++) {
        set.n = 0;
        if (!ivec_push(&set, start) || !cfg_closure(&c, &set, &stack, ++gen, o == 0, r->work)) {
            st = rx_fail(r, LL_ENOMEM, "out of memory");
            goto out;
        }
        const int id = intern_get(&in, set.v, set.n, &added);
        if (id < 0 || (added && dfa_add(d) < 0)) {
            st = rx_fail(r, LL_ENOMEM, "out of memory");
            goto out;
        }
        if (o == 1)
            *start1 = id;
    }
    for (int q = 0; q < in.n && st == LL_OK; q++) {
        const int *cur = in.sets[q] + 1, cn = in.sets[q][0];
        /* the bytes where an edge of the set, or a pending lookahead's transition, changes
         * split 0..255 into classes */
        bool cut[257] = {false};
        cut[0] = cut[256] = true;
        for (int i = 0; i < cn; i++) {
            bool ended;
            const int *codes;
            int nc;
            const int s = cfg_get(&c, cur[i], &ended, &codes, &nc);
            if (cfg_accepts(&c, cur[i]))
                d->acc[q] = true;
            if (ended)
                continue;
            for (int e = r->head[s]; e >= 0; e = r->e[e].next)
                if (r->e[e].lo >= 0)
                    cut[r->e[e].lo] = cut[r->e[e].hi + 1] = true;
            for (int j = 0; j < nc; j++) {
                const int k = c.code_look[codes[j]];
                const int *row = r->look[k].d.next[codes[j] - c.base[k]];
                for (int b = 1; b < 256; b++)
                    cut[b] |= row[b] != row[b - 1];
            }
        }
        for (int lo = 0; lo < 256 && st == LL_OK;) {
            int hi = lo;
            while (!cut[hi + 1])
                hi++;
            set.n = 0;
            ++gen;
            for (int i = 0; i < cn && st == LL_OK; i++) {
                bool ended;
                const int *codes;
                int nc;
                const int s = cfg_get(&c, cur[i], &ended, &codes, &nc);
                int m;
                if (ended || (m = nc ? codes_step(&c, codes, nc, lo, adv) : 0) < 0)
                    continue;
                for (int e = r->head[s]; e >= 0; e = r->e[e].next, ++*r->work) {
                    const struct nedge *x = &r->e[e];
                    if (x->lo < 0 || x->lo > lo || lo > x->hi)
                        continue;
                    const int to = cfg_id(&c, x->to, false, adv, m, -1);
                    if (to < 0 || (c.mark[to] != gen && !ivec_push(&set, to))) {
                        st = rx_fail(r, LL_ENOMEM, "out of memory");
                        break;
                    }
                    c.mark[to] = gen;
                }
            }
            if (st == LL_OK && set.n && !cfg_closure(&c, &set, &stack, ++gen, false, r->work))
                st = rx_fail(r, LL_ENOMEM, "out of memory");
            if (st != LL_OK) {
            } else if (*r->work > RX_MAX_WORK) {
                st = rx_fail(r, LL_EUNSUPPORTED,
                             "too complex (its automaton takes too long to "
                             "build)");
            } else if (set.n) {
                int id = intern_get(&in, set.v, set.n, &added);
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
    free(c.reads);
    free(c.mark);
    free(c.base);
    free(c.code_look);
    free(c.buf);
    free(adv);
    free(set.v);
    free(stack.v);
    intern_free(&c.in);
    intern_free(&in);
    return st;
}

/* The states of d from which a marked state can be reached (mark, in place). false: out of
 * memory. Found backwards over the predecessor lists (each state's distinct successors). */
static bool dfa_reaching(const struct dfa *d, bool *mark)
{
    int *start = calloc((size_t)d->n + 1, sizeof *start), *pred = NULL, *queue = NULL, *fill;
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
        queue = malloc(sizeof *queue * (size_t)(d->n + 1));
    }
    fill = queue; /* the queue is not yet in use: a fill cursor per list first */
    const bool ok = start && pred && queue;
    if (ok) {
        for (int q = 0; q < d->n; q++)
            start[q + 1] += start[q];
        for (int q = 0; q < d->n; q++)
            fill[q] = start[q];
        for (int q = 0; q < d->n; q++)
            for (int c = 0; c < 256; c++) {
                const int to = d->next[q][c];
                if (to >= 0 && (c == 0 || d->next[q][c - 1] != to))
                    pred[fill[to]++] = q;
            }
        int head = 0, tail = 0;
        for (int q = 0; q < d->n; q++)
            if (mark[q])
                queue[tail++] = q;
        while (head < tail) {
            const int q = queue[head++];
            for (int i = start[q]; i < start[q + 1]; i++)
                if (!mark[pred[i]])
                    mark[pred[i]] = true, queue[tail++] = pred[i];
        }
    }
    free(start);
    free(pred);
    free(queue);
    return ok;
}

/* A lookahead's body at r->p (just past "(?=" or "(?!"), compiled to its DFA (the body, then any
 * bytes) once per place in the pattern; r->p moves past its ')'. Its index, or -1 (r->st set). */
static int look_compile(struct rx *r, bool negative)
{
    for (int k = 0; k < r->n_look; k++)
        if (r->look[k].text == r->p) { /* a counted repetition parses its atom again */
            r->p = r->look[k].after;
            return k;
        }
    if (r->n_look == RX_MAX_LOOK || r->depth == RX_MAX_LOOK_DEPTH) {
        rx_fail(r, LL_EUNSUPPORTED,
                r->depth ? "lookaheads nested too deep" : "too many lookaheads");
        return -1;
    }
    struct look *grown = realloc(r->look, sizeof *grown * (size_t)(r->n_look + 1));
    if (!grown) {
        rx_fail(r, LL_ENOMEM, "out of memory");
        return -1;
    }
    r->look = grown;
    struct look lk = {.text = r->p, .negative = negative};
    struct rx b = {.p = r->p, .end = r->end, .pattern = r->pattern, .path = r->path,
                   .err = r->err, .depth = r->depth + 1, .work = r->work};
    const int start = nstate(&b);
    struct frag f = parse_alt(&b);
    if (b.st == LL_OK && (b.p >= b.end || *b.p != ')'))
        rx_fail(&b, LL_EINVAL, "an unclosed '('");
    lk.after = b.p + 1;
    const int rest = nstate(&b), accept = nstate(&b);
    eps(&b, start, f.s);
    eps(&b, f.t, rest);
    nedge(&b, rest, rest, 0, 255);
    eps(&b, rest, accept);
    enum ll_status st = b.st;
    if (st == LL_OK)
        st = nfa_to_dfa(&b, start, accept, &lk.d, &lk.start1);
    if (st == LL_OK) { /* universal: accepting, and every byte leads to a universal state */
        lk.univ = calloc((size_t)lk.d.n, sizeof *lk.univ);
        if (!lk.univ) {
            st = rx_fail(&b, LL_ENOMEM, "out of memory");
        } else {
            for (int q = 0; q < lk.d.n; q++) { /* marked first: the states that are not */
                lk.univ[q] = !lk.d.acc[q];
                for (int c = 0; c < 256; c++)
                    lk.univ[q] |= lk.d.next[q][c] < 0;
            }
            if (!dfa_reaching(&lk.d, lk.univ))
                st = rx_fail(&b, LL_ENOMEM, "out of memory");
            for (int q = 0; q < lk.d.n; q++)
                lk.univ[q] = !lk.univ[q];
        }
    }
    rx_free(&b);
    if (st != LL_OK) {
        r->st = st; /* the body's error is reported */
        dfa_free(&lk.d);
        free(lk.univ);
        return -1;
    }
    r->p = lk.after;
    r->look[r->n_look] = lk;
    return r->n_look++;
}

/* Whether every path from s to a byte, or to t, first passes a '^' (then nothing may precede the
 * pattern's match: an unanchored start adds nothing). */
static bool anchored_start(const struct rx *r, int s, int t)
{
    bool *seen = calloc((size_t)r->n_states, sizeof *seen);
    int *stack = malloc(sizeof *stack * (size_t)r->n_states), top = 0;
    bool anchored = seen && stack;
    if (anchored) {
        seen[s] = true;
        stack[top++] = s;
    }
    while (anchored && top) {
        const int q = stack[--top];
        anchored = q != t;
        for (int e = r->head[q]; anchored && e >= 0; e = r->e[e].next) {
            const struct nedge *x = &r->e[e];
            anchored = x->lo < 0;
            if (anchored && x->lo != E_BOS && !seen[x->to]) {
                seen[x->to] = true;
                stack[top++] = x->to;
            }
        }
    }
    free(seen);
    free(stack);
    return anchored;
}

/* The DFA of a pattern: matched anywhere in the string unless anchored (JSON Schema's rule), or
 * (whole) as the whole string, as formats and vLLM's guided_regex are. */
static enum ll_status pattern_dfa(const char *pattern, bool whole, const char *path, struct dfa *d,
                                  struct ll_err *err)
{
    long work = 0;
    struct rx r = {.p = pattern,
                   .end = pattern + strlen(pattern),
                   .pattern = pattern,
                   .path = path,
                   .err = err,
                   .work = &work};
    const int start = nstate(&r);
    struct frag f = parse_alt(&r);
    if (r.st == LL_OK && r.p < r.end)
        rx_fail(&r, LL_EINVAL, *r.p == ')' ? "an unmatched ')'" : "unexpected text");
    int at = start;
    if (!whole && r.st == LL_OK && !anchored_start(&r, f.s, f.t)) {
        struct frag a = any_star(&r);
        eps(&r, at, a.s);
        at = a.t;
    }
    eps(&r, at, f.s);
    at = f.t;
    if (!whole) { /* after a '$' it reads nothing */
        struct frag a = any_star(&r);
        eps(&r, at, a.s);
        at = a.t;
    }
    enum ll_status st = r.st;
    r.p = NULL; /* parsed: errors from here on are the whole pattern's */
    if (st == LL_OK)
        st = nfa_to_dfa(&r, start, at, d, NULL);
    rx_free(&r);
    return st;
}

/* The length in bytes of the longest string d accepts through states from which it can
 * accept: -1 when unbounded (a loop), -2 out of memory. */
static long dfa_longest(const struct dfa *d)
{
    bool *live = calloc((size_t)d->n, sizeof *live);
    long *len = malloc(sizeof *len * (size_t)d->n); /* -3: not yet, -4: on the path */
    int *stack = malloc(sizeof *stack * (size_t)d->n * 2);
    long res = -2;
    if (!live || !len || !stack)
        goto out;
    for (int q = 0; q < d->n; q++) {
        live[q] = d->acc[q];
        len[q] = -3;
    }
    if (!dfa_reaching(d, live))
        goto out;
    res = 0;
    /* depth first from 0; a state is done when its successors are */
    int top = 0;
    if (live[0])
        stack[top++] = 0, len[0] = -4;
    while (top && res >= 0) {
        const int q = stack[top - 1];
        bool pushed = false;
        for (int c = 0; c < 256 && !pushed && res >= 0; c++) {
            const int to = d->next[q][c];
            if (to < 0 || !live[to] || len[to] >= 0)
                continue;
            if (len[to] == -4)
                res = -1; /* a loop */
            else
                stack[top++] = to, len[to] = -4, pushed = true;
        }
        if (pushed || res < 0)
            continue;
        long best = d->acc[q] ? 0 : -1;
        for (int c = 0; c < 256; c++) {
            const int to = d->next[q][c];
            if (to >= 0 && live[to] && len[to] + 1 > best)
                best = len[to] + 1;
        }
        len[q] = best;
        top--;
    }
    if (res == 0)
        res = live[0] ? len[0] : 0;
out:
    free(live);
    free(len);
    free(stack);
    return res;
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

/* a day of its month; February 29th in leap years (divisible by 4, centuries by 400) */
#define RX_DATE                                                                                    \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]"    \
    "[0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468]" \
    "[048]|[13579][26])00)-02-29)"
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
#define RX_H6 "[0-9a-f]{1,4}"

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
    /* RFC 4291 text forms in lower case: eight groups, or fewer around one "::" (no embedded
     * IPv4 address) */
    {"ipv6", "(?:" RX_H6 ":){7}" RX_H6 "|(?:" RX_H6 ":){1,7}:|(?:" RX_H6 ":){1,6}:" RX_H6
             "|(?:" RX_H6 ":){1,5}(?::" RX_H6 "){1,2}|(?:" RX_H6 ":){1,4}(?::" RX_H6
             "){1,3}|(?:" RX_H6 ":){1,3}(?::" RX_H6 "){1,4}|(?:" RX_H6 ":){1,2}(?::" RX_H6
             "){1,5}|" RX_H6 ":(?::" RX_H6 "){1,6}|:(?:(?::" RX_H6 "){1,7}|:)"},
};

/* Formats that do not limit a string: OpenAPI's "password" (a hint to hide it) and "binary"
 * (any octets). JSON Schema's formats not built in above are refused; a format outside its
 * list (zod's "cuid", "e164", ...) is the producer's name for what its pattern says. */
static const char *const formats_free[] = {"password", "binary", NULL};
static const char *const formats_refused[] = {
    "idn-email", "idn-hostname", "uri-reference", "iri", "iri-reference", "uri-template",
    "json-pointer", "relative-json-pointer", "regex", NULL,
};
/* zod's formats whose validation adds a checksum to the pattern it writes */
static const char *const formats_checksum[] = {"credit_card", "iban", NULL};

/* contentEncoding: RFC 4648's base64 (padded) and base64url (unpadded, as JWTs and zod use) */
static const struct {
    const char *name, *pattern;
} encodings[] = {
    {"base64", "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"},
    {"base64url", "(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?"},
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
    for (int q = 0; q < d->n; q++) /* live: some accepting state is reachable */
        live[q] = d->acc[q];
    if (!dfa_reaching(d, live)) {
        free(live);
        free(rid);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
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

/* Whether name is in list (NULL-terminated). */
static bool listed(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(name, *list))
            return true;
    return false;
}

enum ll_status grammar_string_regular(struct gbuild *b, const char *pattern, const char *format,
                                      const char *encoding, int min, int max, const char *path,
                                      int *rule, struct ll_err *err)
{
    struct dfa d = {0}, e = {0}, t = {0};
    enum ll_status st = LL_OK;
    const char *fpat = NULL, *epat = NULL;
    if (format) {
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (!strcmp(format, formats[i].name))
                fpat = formats[i].pattern;
        if (!fpat && listed(format, formats_refused))
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: format '%.60s' is not supported (supported: date, time, "
                              "date-time, duration, uuid, ipv4, ipv6, email, hostname, uri)",
                              path, format);
        if (!fpat && listed(format, formats_checksum))
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: format '%.60s' is not supported (its validators check a "
                              "checksum that its pattern does not state)", path, format);
        if (!fpat && !pattern && !listed(format, formats_free))
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: format '%.60s' is not one of JSON Schema's; it is accepted "
                              "beside a 'pattern' that says what it means (built in: date, time, "
                              "date-time, duration, uuid, ipv4, ipv6, email, hostname, uri)",
                              path, format);
        if (!fpat)
            format = NULL; /* named by its producer, meant by the pattern, or free */
    }
    if (encoding) {
        for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++)
            if (!strcmp(encoding, encodings[i].name))
                epat = encodings[i].pattern;
        if (!epat)
            return ll_err_set(err, LL_EUNSUPPORTED,
                              "%s: contentEncoding '%.60s' is not supported (supported: base64, "
                              "base64url)", path, encoding);
    }
    char what[200] = "its length bounds";
    if (pattern || fpat || epat)
        snprintf(what, sizeof what, "%s%s%s%s%s%s%s", pattern ? "its 'pattern'" : "",
             pattern && format ? " and " : "", format ? "its 'format'" : "",
             (pattern || format) && encoding ? " and " : "",
             encoding ? "its 'contentEncoding'" : "",
             min > 0 || max >= 0 ? " with " : "", min > 0 || max >= 0 ? "its length bounds" : "");
    bool have = false;
    /* a free format alone: any string (of its length) */
    const char *const pats[3] = {pattern || fpat || epat ? pattern : "", fpat, epat};
    for (int i = 0; i < 3 && st == LL_OK; i++) {
        if (!pats[i])
            continue;
        if ((st = pattern_dfa(pats[i], i > 0, path, have ? &e : &d, err)) != LL_OK)
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
    /* a maximum the automaton's strings never reach (in bytes, so in code points) needs no
     * product; one past GRAMMAR_MAX_REPEAT that they may reach is held to the largest of
     * GRAMMAR_MAX_REPEAT, its half, ... down to 32 whose product fits (shorter strings are
     * valid too) */
    long longest = st == LL_OK && max >= 0 ? dfa_longest(&d) : -1;
    if (st == LL_OK && max >= 0 && longest == -2)
        st = ll_err_set(err, LL_ENOMEM, "out of memory");
    const bool held = max > GRAMMAR_MAX_REPEAT && !(longest >= 0 && longest <= max);
    if (longest >= 0 && longest <= max)
        max = -1;
    else if (held)
        max = GRAMMAR_MAX_REPEAT;
    while (st == LL_OK && (min > 0 || max >= 0)) {
        if ((st = length_dfa(min, max, &e)) == LL_OK && (st = dfa_product(&d, &e, &t)) == LL_OK) {
            dfa_free(&d);
            d = t;
            t = (struct dfa){0};
            break;
        }
        dfa_free(&e);
        dfa_free(&t);
        if (st != LL_EUNSUPPORTED || !held || max / 2 < 32 || max / 2 < min)
            break;
        max /= 2;
        st = LL_OK;
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
