/*
 * grammar_num.c: JSON numbers as grammar rules: any number, numbers held between the bounds
 * of a schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum, and multiples of its
 * multipleOf (see "multipleOf" below).
 *
 * Generated numbers are kept to what a double (and JavaScript) holds: at most 15 digits before
 * and after the point, exponents of at most 2 digits, so no number overflows to an infinity or
 * loses an integer's digits.
 *
 * Bounded numbers are written without an exponent, so a number is a grid point: an integer X
 * of at most 15 + F digits read with F digits after the point (F = 15 for "number", 0 for
 * "integer"). Each bound becomes the nearest grid point inside it (minimum 2.5 on an integer:
 * X >= 3; exclusiveMaximum 1 on a number: X <= 0.999999999999999), from the bound's shortest
 * decimal form (the one that reads back as the same double; the schema author's "0.1", not the
 * double's 0.1000000000000000055...). A number the grammar generates is therefore inside the
 * bounds both as a decimal and once read as a double (rounding to a double keeps order). The
 * magnitude between two grid points A <= |x| <= B is a digit automaton: the length of the
 * integer part is chosen first (between the lengths of A's and B's), then each digit ranges
 * over what keeps the prefix >= A's (while it equals A's) and <= B's (while it equals B's),
 * through the integer part and then the fraction, which may stop wherever the digits left of A
 * are all zero. Signs split the range: x >= 0 is the magnitude in [max(lo, 0), hi], x < 0 is
 * '-' and a magnitude in [max(-hi, 1 grid step), -lo] ("-0" is left out).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar_impl.h"

#define NUM_DIGITS 15 /* digits before the point, and after it */

typedef __int128 grid_t;

/* Up to n more digits. */
static int digits_rule(struct gbuild *b, int n)
{
    int d = gb_rule(b);
    struct gseq q = {0};
    gseq_range(b, &q, '0', '9');
    gb_alt(b, d, &q);
    gseq_free(&q);
    return gb_repeat(b, d, 0, n);
}

int grammar_num_any(struct gbuild *b, bool integer)
{
    int which = integer ? GB_INTEGER : GB_NUMBER;
    if (b->shared[which] >= 0)
        return b->shared[which];
    int digits = digits_rule(b, NUM_DIGITS - 1);
    struct gseq q = {0};
    int intpart = gb_rule(b); /* 0 | [1-9] digits */
    gseq_byte(b, &q, '0');
    gb_alt(b, intpart, &q);
    gseq_clear(&q);
    gseq_range(b, &q, '1', '9');
    gseq_rule(&q, digits);
    gb_alt(b, intpart, &q);
    int sign = gb_optional(b, gb_literal(b, "-"));
    int r = gb_rule(b);
    gseq_clear(&q);
    gseq_rule(&q, sign);
    gseq_rule(&q, intpart);
    if (!integer) {
        int frac = gb_rule(b);
        struct gseq f = {0};
        gseq_byte(b, &f, '.');
        gseq_range(b, &f, '0', '9');
        gseq_rule(&f, digits);
        gb_alt(b, frac, &f);
        int exp = gb_rule(b);
        gseq_clear(&f);
        struct gset e = {{0}}, pm = {{0}};
        gset_add(&e, 'e');
        gset_add(&e, 'E');
        gset_add(&pm, '+');
        gset_add(&pm, '-');
        int pmr = gb_rule(b);
        struct gseq p = {0};
        gb_alt(b, pmr, &p);
        gseq_setsym(&p, gb_set(b, &pm));
        gb_alt(b, pmr, &p);
        gseq_free(&p);
        gseq_setsym(&f, gb_set(b, &e));
        gseq_rule(&f, pmr);
        gseq_range(b, &f, '0', '9');
        gseq_rule(&f, digits_rule(b, 1));
        gb_alt(b, exp, &f);
        gseq_free(&f);
        gseq_rule(&q, gb_optional(b, frac));
        gseq_rule(&q, gb_optional(b, exp));
    }
    gb_alt(b, r, &q);
    gseq_free(&q);
    return b->shared[which] = r;
}

/* ---- bounds on the grid ---- */

static grid_t pow10g(int e)
{
    grid_t p = 1;
    while (e-- > 0)
        p *= 10;
    return p;
}

/* floor and ceil of |v| · 10^f for a finite |v| < 10^NUM_DIGITS, from v's shortest decimal
 * form (the fewest significant digits that read back as v). */
static void scaled(double v, int f, grid_t *fl, grid_t *ce)
{
    char s[40];
    double a = fabs(v);
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, a);
        if (strtod(s, NULL) == a)
            break;
    }
    /* s = "d.ddde±XX": the digits as an integer M, and v = M · 10^e */
    grid_t m = 0;
    int nd = 0;
    const char *p = s;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            m = m * 10 + (*p - '0'), nd++;
    int e = atoi(p + 1) - (nd - 1) + f;
    if (e >= 0) {
        *fl = *ce = m * pow10g(e);
    } else if (-e > 18) { /* M < 10^17: the quotient is 0 */
        *fl = 0;
        *ce = m != 0;
    } else {
        grid_t d = pow10g(-e);
        *fl = m / d;
        *ce = *fl + (m % d != 0);
    }
}

static const char *const bound_kws[] = {"minimum", "exclusiveMinimum", "maximum",
                                        "exclusiveMaximum"};

const char *grammar_num_bound_kw(const cJSON *s)
{
    for (int i = 0; i < 4; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, bound_kws[i]))
            return bound_kws[i];
    return NULL;
}

/* The bound keywords of s on the grid of f digits after the point: [*lo, *hi], clamped to the
 * numbers that can be written (|X| < 10^(NUM_DIGITS + f)). */
static enum ll_status grid_bounds(const cJSON *s, int f, const char *path, grid_t *lo, grid_t *hi,
                                  struct ll_err *err)
{
    const grid_t top = pow10g(NUM_DIGITS + f) - 1;
    *lo = -top;
    *hi = top;
    const char *const *kws = bound_kws;
    const cJSON *v[4];
    for (int i = 0; i < 4; i++)
        v[i] = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
    for (int i = 0; i < 4; i++) {
        if (!v[i])
            continue;
        bool excl = i == 1 || i == 3, lower = i < 2;
        double x;
        if (excl && cJSON_IsBool(v[i])) {
            /* draft 4: a boolean that makes minimum / maximum exclusive */
            if (!cJSON_IsNumber(v[i - 1]))
                return ll_err_set(err, LL_EINVAL,
                                  "%s: '%s' is a boolean, so '%s' must be a number beside it", path,
                                  kws[i], kws[i - 1]);
            if (cJSON_IsFalse(v[i]))
                continue;
            x = v[i - 1]->valuedouble;
        } else if (!cJSON_IsNumber(v[i])) {
            return ll_err_set(err, LL_EINVAL, "%s.%s must be a number", path, kws[i]);
        } else {
            x = v[i]->valuedouble;
            if (!excl && cJSON_IsTrue(v[i + 1]))
                continue; /* draft 4: exclusive, handled with exclusiveMinimum/Maximum */
        }
        grid_t fl, ce, b;
        if (!(fabs(x) < 1e15)) {  /* past every number that can be written (or 1e999) */
            if ((x > 0) == lower) /* lower bound above them all, upper below them all */
                b = lower ? top + 1 : -top - 1;
            else
                continue;
        } else {
            scaled(x, f, &fl, &ce);
            if (x < 0) {
                grid_t t = fl;
                fl = -ce;
                ce = -t;
            }
            /* minimum: X >= ceil; exclusiveMinimum: X >= floor + 1; maximum: X <= floor;
             * exclusiveMaximum: X <= ceil - 1 */
            b = lower ? (excl ? fl + 1 : ce) : (excl ? ce - 1 : fl);
        }
        if (lower && b > *lo)
            *lo = b;
        if (!lower && b < *hi)
            *hi = b;
    }
    if (*lo > *hi)
        return ll_err_set(err, LL_EINVAL,
                          "%s: no %s of at most %d digits before and %d after the point lies "
                          "within its minimum and maximum",
                          path, f ? "number" : "integer", NUM_DIGITS, f);
    return LL_OK;
}

/* ---- the digit automaton of a magnitude ---- */

struct mag {
    struct gbuild *b;
    int f;                                       /* digits after the point */
    char ai[NUM_DIGITS + 2], bi[NUM_DIGITS + 2]; /* integer parts of A and B, no leading zeros */
    char af[NUM_DIGITS + 1], bf[NUM_DIGITS + 1]; /* fractions of A and B, f digits each */
    int la, lb;                                  /* strlen(ai), strlen(bi) */
    int irule[NUM_DIGITS + 1][NUM_DIGITS + 1][2][2]; /* [m][p][tl][th] + 1 (0: not made) */
    int frule[NUM_DIGITS + 1][2][2];
};

static void split(grid_t x, int f, char *ip, char *fp)
{
    grid_t unit = pow10g(f);
    grid_t i = x / unit, r = x % unit;
    char t[NUM_DIGITS + 2];
    int n = 0;
    do {
        t[n++] = (char)('0' + (int)(i % 10));
        i /= 10;
    } while (i > 0);
    for (int k = 0; k < n; k++)
        ip[k] = t[n - 1 - k];
    ip[n] = 0;
    for (int k = f - 1; k >= 0; k--) {
        fp[k] = (char)('0' + (int)(r % 10));
        r /= 10;
    }
    fp[f] = 0;
}

static int int_state(struct mag *g, int m, int p, int tl, int th);
static int frac_state(struct mag *g, int p, int tl, int th);

/* Alternatives "digit d, then the state after it" for d in lo..hi, one per run of digits with
 * the same next state: an integer-part state (m, p + 1), or in the fraction (frac) the state
 * p + 1, the first fraction digit coming after '.'. a / b: A's and B's digit here. */
static void digit_alts(struct mag *g, int rule, int lo, int hi, int a, int b, int tl, int th, int m,
                       int p, bool frac)
{
    struct gseq q = {0};
    for (int d = lo, e; d <= hi; d = e + 1) {
        const int ntl = tl && d == a, nth = th && d == b;
        for (e = d; e + 1 <= hi && (tl && e + 1 == a) == ntl && (th && e + 1 == b) == nth;)
            e++;
        gseq_clear(&q);
        if (frac && p == 0)
            gseq_byte(g->b, &q, '.');
        gseq_range(g->b, &q, (unsigned char)('0' + d), (unsigned char)('0' + e));
        gseq_rule(&q, frac ? frac_state(g, p + 1, ntl, nth) : int_state(g, m, p + 1, ntl, nth));
        gb_alt(g->b, rule, &q);
    }
    gseq_free(&q);
}

/* Digit p of an integer part of m digits; tl / th: the digits so far equal A's / B's (A's and
 * B's integer parts then have m digits too). */
static int int_state(struct mag *g, int m, int p, int tl, int th)
{
    if (p == m)
        return frac_state(g, 0, tl, th);
    if (g->irule[m][p][tl][th])
        return g->irule[m][p][tl][th] - 1;
    int r = gb_rule(g->b);
    g->irule[m][p][tl][th] = r + 1;
    const int a = g->ai[p] - '0', b = g->bi[p] - '0';
    const int lo = tl ? a : (p == 0 && m > 1), hi = th ? b : 9;
    digit_alts(g, r, lo, hi, a, b, tl, th, m, p, false);
    return r;
}

/* Fraction digit p (p digits written; p = 0: no point yet). It may stop here when what is left
 * of A's fraction is zero (or the prefix is above A's already). */
static int frac_state(struct mag *g, int p, int tl, int th)
{
    if (g->frule[p][tl][th])
        return g->frule[p][tl][th] - 1;
    int r = gb_rule(g->b);
    g->frule[p][tl][th] = r + 1;
    bool rest_zero = true;
    for (int k = p; k < g->f; k++)
        rest_zero &= g->af[k] == '0';
    if (!tl || rest_zero) {
        struct gseq q = {0};
        gb_alt(g->b, r, &q);
    }
    if (p < g->f) {
        const int a = g->af[p] - '0', b = g->bf[p] - '0';
        digit_alts(g, r, tl ? a : 0, th ? b : 9, a, b, tl, th, 0, p, true);
    }
    return r;
}

/* Magnitudes A <= y <= B (grid points, 0 <= A <= B < 10^(NUM_DIGITS + f)). */
static int magnitude(struct gbuild *b, int f, grid_t lo, grid_t hi)
{
    struct mag *g = calloc(1, sizeof *g);
    if (!g) {
        b->failed = true;
        return -1;
    }
    g->b = b;
    g->f = f;
    split(lo, f, g->ai, g->af);
    split(hi, f, g->bi, g->bf);
    g->la = (int)strlen(g->ai);
    g->lb = (int)strlen(g->bi);
    int r = gb_rule(b);
    struct gseq q = {0};
    for (int m = g->la; m <= g->lb; m++) {
        gseq_clear(&q);
        gseq_rule(&q, int_state(g, m, 0, m == g->la, m == g->lb));
        gb_alt(b, r, &q);
    }
    gseq_free(&q);
    free(g);
    return r;
}

/* ---- multipleOf ---- */

#define MULT_MAX_MOD 100   /* remainders the digit automaton may track */
#define MULT_MAX_LIST 256  /* multiples between bounds written out as a list */

/* Numbers x = j·step, step = a·10^-d (its shortest decimal): written with at most D = d digits
 * after the point, the integer N of their digits with exactly D after it (zeros added) must
 * be a multiple of K = a. For "integer" (no fraction): D = 0 and K = a / gcd(a, 10^d) (an
 * integer x is j·a/10^d when x·10^d is a multiple of a). Without bounds, a digit automaton
 * tracks N mod K (K up to MULT_MAX_MOD), each state kept only when a multiple can still be
 * reached from it (no dead end for the sampler); between bounds, the multiples are listed
 * when few (MULT_MAX_LIST), else refused. */
struct mult {
    int D;
    long K;
    /* the automaton of an unbounded multiple: [p][r], p: digits written (integer part: 0..15;
     * fraction: 16 + digits after the point), r: N so far mod K; 1 + rule, 0: not made;
     * live: 1 + whether it can end (0: not known yet) */
    int *rule;
    signed char *live;
    struct gbuild *b;
};

#define MULT_P (NUM_DIGITS + 1 + NUM_DIGITS + 1)

/* A fraction of p digits written ends here when N (D digits after the point) is a multiple. */
static bool mult_ends(const struct mult *m, int p, long r)
{
    for (int k = p; k < m->D; k++)
        r = r * 10 % m->K;
    return r == 0;
}

/* State (p, r): p < 16 the integer part after p digits (p = 0: none yet), else the fraction
 * after p - 16 digits. Whether some way on ends at a multiple. */
static bool mult_live(struct mult *m, int p, long r)
{
    signed char *l = &m->live[(size_t)p * (size_t)m->K + (size_t)r];
    if (*l)
        return *l > 1;
    bool ok = false;
    if (p == 0) { /* "0", or a first digit 1-9 */
        ok = mult_live(m, NUM_DIGITS + 1, 0);
        for (int d = 1; d <= 9 && !ok; d++)
            ok = mult_live(m, 1, d % m->K);
    } else if (p <= NUM_DIGITS) {
        ok = mult_live(m, NUM_DIGITS + 1, r);
        for (int d = 0; d <= 9 && !ok && p < NUM_DIGITS; d++)
            ok = mult_live(m, p + 1, (r * 10 + d) % m->K);
    } else {
        const int f = p - NUM_DIGITS - 1;
        ok = mult_ends(m, f, r);
        for (int d = 0; d <= 9 && !ok && f < m->D; d++)
            ok = mult_live(m, p + 1, (r * 10 + d) % m->K);
    }
    *l = ok ? 2 : 1;
    return ok;
}

static int mult_state(struct mult *m, int p, long r)
{
    int *slot = &m->rule[(size_t)p * (size_t)m->K + (size_t)r];
    if (*slot)
        return *slot - 1;
    int rule = gb_rule(m->b);
    *slot = rule + 1;
    struct gseq q = {0};
    const bool frac = p > NUM_DIGITS;
    const int f = p - NUM_DIGITS - 1;
    if (p > 0 && !frac) { /* the integer part may end here */
        gseq_rule(&q, mult_state(m, NUM_DIGITS + 1, r));
        if (mult_live(m, NUM_DIGITS + 1, r))
            gb_alt(m->b, rule, &q);
    }
    if (frac && mult_ends(m, f, r)) {
        gseq_clear(&q);
        gb_alt(m->b, rule, &q);
    }
    if (p < NUM_DIGITS || (frac && f < m->D)) {
        for (int d = 0; d <= 9; d++) {
            const int to = p == 0 && d == 0 ? NUM_DIGITS + 1 : p + 1;
            const long r2 = (r * 10 + d) % m->K;
            if (!mult_live(m, to, r2))
                continue;
            gseq_clear(&q);
            if (frac && f == 0)
                gseq_byte(m->b, &q, '.');
            gseq_byte(m->b, &q, (unsigned char)('0' + d));
            gseq_rule(&q, mult_state(m, to, r2));
            gb_alt(m->b, rule, &q);
        }
    }
    gseq_free(&q);
    return rule;
}

/* The grid point X (f digits after the point) as JSON text. */
static void grid_text(grid_t x, int f, char *out)
{
    char ip[NUM_DIGITS + 2], fp[NUM_DIGITS + 1];
    split(x < 0 ? -x : x, f, ip, fp);
    int n = f;
    while (n > 0 && fp[n - 1] == '0')
        n--;
    fp[n] = 0;
    sprintf(out, "%s%s%s%s", x < 0 ? "-" : "", ip, n ? "." : "", fp);
}

/* multipleOf on s: the numbers (integer: the integers) that are multiples of it, within the
 * bounds [lo, hi] on the grid of f digits when bounded. */
static enum ll_status mult_rule(struct gbuild *b, const cJSON *mo, bool integer, bool bounded,
                                grid_t lo, grid_t hi, const char *path, int *rule,
                                struct ll_err *err)
{
    if (!cJSON_IsNumber(mo) || !(mo->valuedouble > 0) || !(mo->valuedouble < 1e15))
        return ll_err_set(err, LL_EINVAL, "%s.multipleOf must be a number above 0 (and below "
                          "1e15)", path);
    grid_t a, a2; /* step = a · 10^-NUM_DIGITS exactly when it has at most 15 decimals */
    scaled(mo->valuedouble, NUM_DIGITS, &a, &a2);
    if (a != a2 || a == 0)
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: 'multipleOf' %g has more than %d digits "
                          "after the point", path, mo->valuedouble, NUM_DIGITS);
    int d = NUM_DIGITS;
    while (d > 0 && a % 10 == 0)
        a /= 10, d--;
    /* now step = a · 10^-d (d = 0 for an integral step); the modulus of N, exactly */
    struct mult m = {.b = b, .D = integer ? 0 : d};
    grid_t kx = a;
    if (integer) { /* a / gcd(a, 10^d) */
        grid_t g = a;
        for (grid_t x = pow10g(d); x;) {
            grid_t t = g % x;
            g = x;
            x = t;
        }
        kx = a / g;
    }
    m.K = kx <= MULT_MAX_MOD ? (long)kx : 0;
    const grid_t stepg = integer ? kx : kx * pow10g(NUM_DIGITS - m.D);
    const int f = integer ? 0 : NUM_DIGITS;
    if (bounded) {
        /* the multiples between the bounds, when there are few: a list */
        grid_t first = lo >= 0 ? (lo + stepg - 1) / stepg : -((-lo) / stepg),
               last = hi >= 0 ? hi / stepg : -((-hi + stepg - 1) / stepg);
        if (first > last)
            return ll_err_set(err, LL_EINVAL, "%s: no multiple of %g lies within its minimum "
                              "and maximum", path, mo->valuedouble);
        if (last - first < MULT_MAX_LIST) {
            int r = gb_rule(b);
            struct gseq q = {0};
            for (grid_t j = first; j <= last; j++) {
                char t[64];
                grid_text(j * stepg, f, t);
                gseq_clear(&q);
                gseq_lit(b, &q, t, strlen(t));
                gb_alt(b, r, &q);
            }
            gseq_free(&q);
            *rule = r;
            return b->failed ? ll_err_set(err, LL_ENOMEM, "out of memory") : LL_OK;
        }
    }
    if (bounded)
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: 'multipleOf' beside bounds is supported "
                          "when at most %d multiples lie within them", path, MULT_MAX_LIST);
    if (m.K == 0)
        return ll_err_set(err, LL_EUNSUPPORTED, "%s: 'multipleOf' %g without bounds is "
                          "supported when its significant digits make a number up to %d", path,
                          mo->valuedouble, MULT_MAX_MOD);
    m.rule = calloc((size_t)MULT_P * (size_t)m.K, sizeof *m.rule);
    m.live = calloc((size_t)MULT_P * (size_t)m.K, sizeof *m.live);
    if (!m.rule || !m.live) {
        free(m.rule);
        free(m.live);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    int mag = mult_state(&m, 0, 0);
    free(m.rule);
    free(m.live);
    *rule = gb_concat(b, (int[]){gb_optional(b, gb_literal(b, "-")), mag}, 2);
    return b->failed ? ll_err_set(err, LL_ENOMEM, "out of memory") : LL_OK;
}

enum ll_status grammar_num_schema(struct gbuild *b, const cJSON *s, bool integer, const char *path,
                                  int *rule, struct ll_err *err)
{
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (mo) {
        grid_t lo = 0, hi = 0;
        const bool bounded = grammar_num_bound_kw(s) != NULL;
        enum ll_status st =
            bounded ? grid_bounds(s, integer ? 0 : NUM_DIGITS, path, &lo, &hi, err) : LL_OK;
        return st != LL_OK ? st : mult_rule(b, mo, integer, bounded, lo, hi, path, rule, err);
    }
    if (!grammar_num_bound_kw(s)) {
        *rule = grammar_num_any(b, integer);
        return LL_OK;
    }
    const int f = integer ? 0 : NUM_DIGITS;
    grid_t lo, hi;
    enum ll_status st = grid_bounds(s, f, path, &lo, &hi, err);
    if (st != LL_OK)
        return st;
    int r = gb_rule(b);
    struct gseq q = {0};
    if (hi >= 0) { /* x >= 0 */
        gseq_rule(&q, magnitude(b, f, lo > 0 ? lo : 0, hi));
        gb_alt(b, r, &q);
    }
    grid_t nlo = -hi > 1 ? -hi : 1, nhi = -lo; /* x < 0: '-' y, -hi <= y <= -lo, y >= 1 step */
    if (lo < 0 && nlo <= nhi) {
        gseq_clear(&q);
        gseq_byte(b, &q, '-');
        gseq_rule(&q, magnitude(b, f, nlo, nhi));
        gb_alt(b, r, &q);
    }
    gseq_free(&q);
    *rule = r;
    return b->failed ? ll_err_set(err, LL_ENOMEM, "out of memory") : LL_OK;
}
