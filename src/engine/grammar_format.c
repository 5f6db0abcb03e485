/*
 * grammar_format.c: JSON strings of a JSON Schema `format` as grammar rules: date, time,
 * date-time (RFC 3339's full-date, full-time, date-time), uuid (RFC 9562's text form) and ipv4
 * (dotted decimal, no leading zeros).
 *
 * Each rule generates a subset of what the format allows, never more: months have their days
 * (February 28, since whether the 29th exists depends on the year), no leap second (":60"), the
 * separator is "T" and the zone "Z" or an offset (never "t" or "z"). Time needs its offset
 * (RFC 3339's full-time), fractions of a second have 1 to 9 digits; uuid's hex digits may be of
 * either case.
 */
#include <string.h>

#include "grammar_impl.h"

/* Add to rule an alternative spelled by pat: bytes, and [a-z0-9...] sets of ranges and bytes;
 * then the rule `then` (-1: none). */
static void alt_pat(struct gbuild *b, int rule, const char *pat, int then)
{
    struct gseq q = {0};
    for (const char *p = pat; *p; p++) {
        if (*p != '[') {
            gseq_byte(b, &q, (unsigned char)*p);
            continue;
        }
        struct gset set = {{0}};
        for (p++; *p != ']'; p++) {
            unsigned lo = (unsigned char)*p, hi = lo;
            if (p[1] == '-' && p[2] != ']') {
                hi = (unsigned char)p[2];
                p += 2;
            }
            for (unsigned c = lo; c <= hi; c++)
                gset_add(&set, c);
        }
        gseq_setsym(&q, gb_set(b, &set));
    }
    if (then >= 0)
        gseq_rule(&q, then);
    gb_alt(b, rule, &q);
    gseq_free(&q);
}

/* A rule of the alternatives pats (NULL-terminated). */
static int rule_of(struct gbuild *b, const char *const *pats)
{
    int r = gb_rule(b);
    for (; *pats; pats++)
        alt_pat(b, r, *pats, -1);
    return r;
}

static int date_rule(struct gbuild *b)
{
    int d31 = rule_of(b, (const char *[]){"0[1-9]", "[12][0-9]", "3[01]", NULL});
    int d30 = rule_of(b, (const char *[]){"0[1-9]", "[12][0-9]", "30", NULL});
    int d28 = rule_of(b, (const char *[]){"0[1-9]", "1[0-9]", "2[0-8]", NULL});
    int md = gb_rule(b);
    alt_pat(b, md, "0[13578]-", d31);
    alt_pat(b, md, "1[02]-", d31);
    alt_pat(b, md, "0[469]-", d30);
    alt_pat(b, md, "11-", d30);
    alt_pat(b, md, "02-", d28);
    int r = gb_rule(b);
    alt_pat(b, r, "[0-9][0-9][0-9][0-9]-", md);
    return r;
}

static int time_rule(struct gbuild *b)
{
    int hh = rule_of(b, (const char *[]){"[01][0-9]", "2[0-3]", NULL});
    int mm = rule_of(b, (const char *[]){"[0-5][0-9]", NULL});
    int digit = rule_of(b, (const char *[]){"[0-9]", NULL});
    int frac = gb_rule(b); /* "" | "." [0-9]{1,9} */
    struct gseq e = {0};
    gb_alt(b, frac, &e);
    gseq_free(&e);
    alt_pat(b, frac, ".", gb_repeat(b, digit, 1, 9));
    int zone = gb_rule(b);
    alt_pat(b, zone, "Z", -1);
    alt_pat(b, zone, "[+-]", gb_concat(b, (int[]){hh, gb_literal(b, ":"), mm}, 3));
    int colon = gb_literal(b, ":");
    return gb_concat(b, (int[]){hh, colon, mm, colon, mm, frac, zone}, 7);
}

static int uuid_rule(struct gbuild *b)
{
    int hex = rule_of(b, (const char *[]){"[0-9a-fA-F]", NULL});
    int dash = gb_literal(b, "-");
    int g4 = gb_repeat(b, hex, 4, 4);
    return gb_concat(b,
                     (int[]){gb_repeat(b, hex, 8, 8), dash, g4, dash, g4, dash, g4, dash,
                             gb_repeat(b, hex, 12, 12)},
                     9);
}

static int ipv4_rule(struct gbuild *b)
{
    int octet = rule_of(
        b, (const char *[]){"[0-9]", "[1-9][0-9]", "1[0-9][0-9]", "2[0-4][0-9]", "25[0-5]", NULL});
    int dot = gb_literal(b, ".");
    return gb_concat(b, (int[]){octet, dot, octet, dot, octet, dot, octet}, 7);
}

enum ll_status grammar_format(struct gbuild *b, const char *format, const char *path, int *rule,
                              struct ll_err *err)
{
    int body;
    if (!strcmp(format, "date"))
        body = date_rule(b);
    else if (!strcmp(format, "time"))
        body = time_rule(b);
    else if (!strcmp(format, "date-time"))
        body = gb_concat(b, (int[]){date_rule(b), gb_literal(b, "T"), time_rule(b)}, 3);
    else if (!strcmp(format, "uuid"))
        body = uuid_rule(b);
    else if (!strcmp(format, "ipv4"))
        body = ipv4_rule(b);
    else
        return ll_err_set(err, LL_EUNSUPPORTED,
                          "%s: format '%.60s' is not supported (supported: "
                          "date, time, date-time, uuid, ipv4)",
                          path, format);
    int quote = gb_literal(b, "\"");
    *rule = gb_concat(b, (int[]){quote, body, quote}, 3);
    return b->failed ? ll_err_set(err, LL_ENOMEM, "out of memory") : LL_OK;
}
