/*
 * utf8_repair.c: UTF-8 validation and repair for the tokenizer.
 *
 * Invalid input is replaced the way Python's bytes.decode(errors="replace") and Rust's
 * String::from_utf8_lossy do it (Unicode's "maximal subpart" practice): a lead byte followed by
 * as many bytes as can still begin a valid sequence forms one subpart and becomes one U+FFFD;
 * a byte that cannot start any sequence (80..C1, F5..FF) is a subpart of its own. Overlongs and
 * UTF-16 surrogates are excluded by the second-byte ranges (E0 A0.., ED ..9F, F0 90.., F4 ..8F).
 * Pure functions; any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

size_t tok_utf8_scan(const unsigned char *s, size_t n, enum tok_utf8_status *st, uint32_t *cp)
{
    unsigned b = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b < 0x80) {
        *st = TOK_UTF8_OK;
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
        *st = TOK_UTF8_BAD;
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) {
            *st = TOK_UTF8_SHORT;
            return i;
        }
        unsigned x = s[i];
        if (x < lo || x > hi) {
            *st = TOK_UTF8_BAD;
            return i;
        }
        lo = 0x80;
        hi = 0xBF;
        c = c << 6 | (x & 0x3F);
    }
    *st = TOK_UTF8_OK;
    *cp = c;
    return i;
}

size_t tok_utf8_valid_prefix(const char *s, size_t n)
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
        enum tok_utf8_status st;
        uint32_t cp;
        size_t k = tok_utf8_scan(u + i, n - i, &st, &cp);
        if (st != TOK_UTF8_OK)
            return i;
        i += k;
    }
    return n;
}

enum ll_status tok_utf8_repair(const char *s, size_t n, char **out, size_t *out_len)
{
    /* each input byte yields at most 3 output bytes */
    if (n > (SIZE_MAX - 1) / 3)
        return LL_ENOMEM;
    char *o = malloc(3 * n + 1);
    if (!o)
        return LL_ENOMEM;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        size_t good = tok_utf8_valid_prefix(s + i, n - i);
        memcpy(o + k, s + i, good);
        k += good;
        i += good;
        if (i >= n)
            break;
        enum tok_utf8_status st;
        uint32_t cp;
        size_t len = tok_utf8_scan(u + i, n - i, &st, &cp);
        /* BAD or SHORT (unfinished at the end of the text): one replacement character */
        memcpy(o + k, "\xEF\xBF\xBD", 3);
        k += 3;
        i += len;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return LL_OK;
}
