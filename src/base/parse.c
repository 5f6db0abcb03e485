/*
 * parse.c: integers, sizes and booleans from option text (see parse.h). Pure functions; any
 * thread.
 */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

enum ll_status ll_parse_int(const char *what, const char *s, long long lo, long long hi,
                            long long *out, struct ll_err *err)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    /* strtoll skips leading white space; a value is the number and nothing else */
    if (!s || !s[0] || isspace((unsigned char)s[0]) || *end || errno || v < lo || v > hi)
        return ll_err_set(err, LL_EINVAL, "%s: must be an integer from %lld to %lld (got '%s')",
                          what, lo, hi, s ? s : "");
    *out = v;
    return LL_OK;
}

/* The multiplier of a unit letter (0: not a unit). */
static uint64_t unit_of(char c)
{
    switch (c) {
    case 'K': case 'k': return 1ull << 10;
    case 'M': case 'm': return 1ull << 20;
    case 'G': case 'g': return 1ull << 30;
    case 'T': case 't': return 1ull << 40;
    }
    return 0;
}

/* v in the largest unit that divides it ("512K", "1024T", "3") into buf. */
static void format_size(char *buf, size_t n, uint64_t v)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        uint64_t mul = unit_of(units[i]);
        if (v && v % mul == 0) {
            snprintf(buf, n, "%llu%c", (unsigned long long)(v / mul), units[i]);
            return;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
}

enum ll_status ll_parse_size(const char *what, const char *s, uint64_t lo, uint64_t hi,
                             size_t *out, struct ll_err *err)
{
    const char *p = s ? s : "";
    uint64_t whole = 0;
    int digits = 0;
    bool overflow = false;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (whole > (UINT64_MAX - 9) / 10)
            overflow = true;
        else
            whole = whole * 10 + (uint64_t)(*p - '0');
    }
    double frac = 0, scale = 1;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            frac += (*p - '0') * (scale /= 10);
    uint64_t mul = unit_of(*p);
    if (mul) {
        p++;
        if (*p == 'i')
            p++;
    } else {
        mul = 1;
    }
    if (*p == 'B')
        p++;
    uint64_t v = 0;
    if (!digits || *p || overflow || whole > UINT64_MAX / mul) {
        overflow = true;
    } else {
        v = whole * mul;
        uint64_t part = (uint64_t)(frac * (double)mul); /* < mul */
        overflow = v > UINT64_MAX - part;
        v += part;
    }
    if (overflow || v < lo || v > hi || v > SIZE_MAX) {
        char lo_s[24], hi_s[24];
        format_size(lo_s, sizeof lo_s, lo);
        format_size(hi_s, sizeof hi_s, hi);
        return ll_err_set(err, LL_EINVAL, "%s: must be a size in bytes from %s to %s, such as "
                          "65536, 512K, 64M or 2G (got '%s')", what, lo_s, hi_s, s ? s : "");
    }
    *out = (size_t)v;
    return LL_OK;
}

enum ll_status ll_parse_bool(const char *what, const char *s, bool *out, struct ll_err *err)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off", ""};
    if (!s) {
        *out = true;
        return LL_OK;
    }
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return LL_OK;
        }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return LL_OK;
        }
    return ll_err_set(err, LL_EINVAL, "%s: must be 1/true/yes/on or 0/false/no/off (got '%s')",
                      what, s);
}
