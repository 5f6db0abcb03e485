/*
 * normalize.c: the normalizer: a sequence of NFC (Unicode canonical composition, via
 * utf8proc), Prepend (a string in front of a non-empty text) and Replace (every occurrence of
 * a literal string, left to right without overlaps, by another), applied in the file's order.
 *
 * Most text is already NFC, and proving that is much cheaper than normalising: a text is left
 * as it is when every character is "NFC-inert": below U+0300 (no byte >= 0xCC in UTF-8), or
 * marked so in the class table, meaning combining class 0, NFC of the character alone is
 * itself, and it is not the second part of any canonical decomposition (so it cannot compose
 * with what precedes it). That covers English, code, CJK, kana, Hangul syllables, Cyrillic...;
 * anything else (combining marks, jamo, characters beyond the BMP) goes through utf8proc.
 * The table is built at load; tok_nfc runs on any thread.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_impl.h"

void tok_nfc_table_init(uint16_t *table)
{
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t c = 0; c < 0x10000; c++) {
        const utf8proc_property_t *p = utf8proc_get_property(c);
        int last = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char(c, buf, 32, UTF8PROC_DECOMPOSE, &last);
        if (n <= 0 || n > 32)
            continue;
        /* everything after the first character of a decomposition can compose backwards */
        for (utf8proc_ssize_t i = 1; i < n; i++)
            if (buf[i] < 0x10000)
                table[buf[i]] |= TOK_CP_NFC_SCRATCH; /* "a second part" */
        if (p->combining_class != 0 || (c >= 0xD800 && c <= 0xDFFF))
            continue;
        utf8proc_ssize_t m = utf8proc_normalize_utf32(buf, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m == 1 && buf[0] == c)
            table[c] |= TOK_CP_NFC_OK;
    }
    for (size_t c = 0; c < 0x10000; c++)
        if (table[c] & TOK_CP_NFC_SCRATCH)
            table[c] &= (uint16_t)~(TOK_CP_NFC_SCRATCH | TOK_CP_NFC_OK);
}

/* Whether s is NFC without looking further. */
static bool inert(const struct tokenizer *tok, const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0xCC) { /* ASCII, a continuation byte, or a lead byte below U+0300 */
            i++;
            continue;
        }
        if (!tok)
            return false;
        uint32_t cp;
        i += tok_utf8_decode(s + i, n - i, &cp);
        if (cp >= 0x10000 || !(tok->cp_class[cp] & TOK_CP_NFC_OK))
            return false;
    }
    return true;
}

enum ll_status tok_nfc(const struct tokenizer *tok, const char *s, size_t n, const char **out,
                       size_t *out_len, bool *owned)
{
    if (inert(tok, (const unsigned char *)s, n)) {
        *out = s;
        *out_len = n;
        *owned = false;
        return LL_OK;
    }
    if (n > (size_t)PTRDIFF_MAX / 8) /* utf8proc takes signed lengths, works in UTF-32 */
        return LL_ENOMEM;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) {
        /* input is valid UTF-8, so the only failure left is memory */
        free(dst);
        return LL_ENOMEM;
    }
    *out = (const char *)dst;
    *out_len = (size_t)r;
    *owned = true;
    return LL_OK;
}

size_t tok_replace(const char *s, size_t n, const char *pat, size_t np, const char *with,
                   size_t nw, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (np && i + np <= n && !memcmp(s + i, pat, np)) {
            memcpy(out + k, with, nw);
            k += nw;
            i += np;
        } else {
            out[k++] = s[i++];
        }
    }
    return k;
}

/* Prepend or Replace of one step into a malloc'd string. */
static enum ll_status apply_step(const struct tokenizer *tok, const struct tok_norm_step *st,
                                 const char *s, size_t n, char **out, size_t *out_len)
{
    const char *a = tok->arena.data + st->a_off, *b = tok->arena.data + st->b_off;
    size_t na = st->a_len, nb = st->b_len, count = 0;
    if (st->kind == TOK_NORM_REPLACE) {
        for (size_t i = 0; na && i + na <= n;) {
            if (!memcmp(s + i, a, na)) {
                count++;
                i += na;
            } else {
                i++;
            }
        }
    }
    size_t cap = st->kind == TOK_NORM_PREPEND ? n + na : n + count * nb;
    if (st->kind == TOK_NORM_REPLACE && count && nb > na && count > (SIZE_MAX - n) / (nb - na))
        return LL_ENOMEM;
    char *d = malloc(cap + 1);
    if (!d)
        return LL_ENOMEM;
    size_t k = 0;
    if (st->kind == TOK_NORM_PREPEND) {
        memcpy(d, a, na);
        memcpy(d + na, s, n);
        k = na + n;
    } else {
        k = tok_replace(s, n, a, na, b, nb, d);
    }
    d[k] = '\0';
    *out = d;
    *out_len = k;
    return LL_OK;
}

/* Whether a step changes s at all (so that untouched text is never copied). */
static bool step_applies(const struct tokenizer *tok, const struct tok_norm_step *st,
                         const char *s, size_t n)
{
    if (st->kind == TOK_NORM_PREPEND)
        return n > 0 && st->a_len > 0;
    const char *a = tok->arena.data + st->a_off;
    size_t na = st->a_len;
    if (!na || n < na)
        return false;
    for (const char *p = s; (p = memchr(p, a[0], (size_t)(s + n - p))) && (size_t)(s + n - p) >= na; p++)
        if (!memcmp(p, a, na))
            return true;
    return false;
}

enum ll_status tok_normalize(const struct tokenizer *tok, const char *s, size_t n,
                             const char **out, size_t *out_len, bool *owned)
{
    const char *cur = s;
    size_t len = n;
    bool cur_owned = false;
    for (int i = 0; i < tok->n_norm; i++) {
        const struct tok_norm_step *st = &tok->norm[i];
        const char *next;
        size_t next_len;
        bool next_owned = false;
        enum ll_status r = LL_OK;
        if (st->kind == TOK_NORM_NFC) {
            r = tok_nfc(tok->cp_class ? tok : NULL, cur, len, &next, &next_len, &next_owned);
        } else if (step_applies(tok, st, cur, len)) {
            char *d;
            r = apply_step(tok, st, cur, len, &d, &next_len);
            next = d;
            next_owned = true;
        } else {
            continue;
        }
        if (r != LL_OK) {
            if (cur_owned)
                free((char *)cur);
            return r;
        }
        if (next_owned && cur_owned)
            free((char *)cur);
        if (next_owned)
            cur_owned = true;
        cur = next;
        len = next_len;
    }
    *out = cur;
    *out_len = len;
    *owned = cur_owned;
    return LL_OK;
}
