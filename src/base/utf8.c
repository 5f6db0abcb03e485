/*
 * utf8.c: UTF-8 scanning, validation, encoding and repair (see utf8.h).
 *
 * The second byte of a multi-byte sequence has a narrower range after some lead bytes
 * (E0 A0.., ED ..9F, F0 90.., F4 ..8F): that is what excludes overlongs, UTF-16 surrogates and
 * code points past U+10FFFF, and it is also what makes "maximal subpart" fall out naturally: a
 * scan stops at the first byte that cannot continue the sequence. Pure functions; any thread.
 */
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

size_t ll_utf8_scan(const unsigned char *s, size_t n, enum ll_utf8_status *st, uint32_t *cp)
{
    unsigned b = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b < 0x80) {
        *st = LL_UTF8_OK;
        *cp = b;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        c = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        c = b & 0x07;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        *st = LL_UTF8_BAD;
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) {
            *st = LL_UTF8_SHORT;
            return i;
        }
        unsigned x = s[i];
        if (x < lo || x > hi) {
            *st = LL_UTF8_BAD;
            return i;
        }
        lo = 0x80;
        hi = 0xBF;
        c = c << 6 | (x & 0x3F);
    }
    *st = LL_UTF8_OK;
    *cp = c;
    return i;
}

size_t ll_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: skip them 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        enum ll_utf8_status st;
        uint32_t cp;
        size_t k = ll_utf8_scan(u + i, n - i, &st, &cp);
        if (st != LL_UTF8_OK)
            return i;
        i += k;
    }
    return n;
}

bool ll_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    size_t k = ll_utf8_valid_prefix(s, n);
    if (k == n)
        return true;
    if (bad_at)
        *bad_at = k;
    return false;
}

int ll_utf8_encode(char out[4], uint32_t cp)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool ll_buf_put_utf8_lossy(struct ll_buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t good = ll_utf8_valid_prefix(s + i, n - i);
        ll_buf_append(b, s + i, good);
        i += good;
        if (i >= n)
            break;
        enum ll_utf8_status st;
        uint32_t cp;
        /* BAD, or SHORT (cut off by the end of the text): one replacement character */
        i += ll_utf8_scan(u + i, n - i, &st, &cp);
        ll_buf_append(b, LL_UTF8_REPLACEMENT, 3);
    }
    return !b->failed;
}

enum ll_status ll_utf8_repair(const char *s, size_t n, char **out, size_t *out_len)
{
    struct ll_buf b = {0};
    /* each input byte yields at most 3 output bytes: one allocation */
    if (n > SIZE_MAX / 4 || !ll_buf_reserve(&b, n + n / 2) || !ll_buf_put_utf8_lossy(&b, s, n)) {
        ll_buf_free(&b);
        return LL_ENOMEM;
    }
    *out_len = b.len;
    *out = ll_buf_take(&b);
    return *out ? LL_OK : LL_ENOMEM;
}
