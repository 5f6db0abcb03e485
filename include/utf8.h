/*
 * utf8.h: UTF-8 validation, decoding, encoding and repair, for every layer.
 *
 * Validity is the Unicode standard's: no overlong forms, no UTF-16 surrogates (U+D800..DFFF),
 * nothing past U+10FFFF, no truncated sequence. Invalid input is split the way Python's
 * bytes.decode(errors="replace") does it ("maximal subparts"): a lead byte followed by as many
 * bytes as can still begin a valid sequence is one invalid subpart; a byte that cannot start any
 * sequence (80..C1, F5..FF) is a subpart of its own. Pure functions; any thread.
 */
#ifndef LLAISYS_UTF8_H
#define LLAISYS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "errors.h"

#define LL_UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD, 3 bytes */

enum ll_utf8_status {
    LL_UTF8_OK,    /* a whole valid character */
    LL_UTF8_BAD,   /* an invalid subpart */
    LL_UTF8_SHORT, /* a valid beginning cut off by the end of the input */
};

/* Look at the character starting at s (n >= 1 bytes left): sets *st, and *cp when OK. Returns
 * the bytes it covers: the character, or the maximal invalid subpart (>= 1). */
size_t ll_utf8_scan(const unsigned char *s, size_t n, enum ll_utf8_status *st, uint32_t *cp);
/* Offset of the first byte that is not part of a valid character; n when s is all valid. */
size_t ll_utf8_valid_prefix(const char *s, size_t n);
/* Whether s[0..n) is valid UTF-8; if not and bad_at is not NULL, *bad_at = the offset. */
bool ll_utf8_valid(const char *s, size_t n, size_t *bad_at);
/* Write code point cp (<= U+10FFFF) to out; returns the number of bytes (1..4). */
int ll_utf8_encode(char out[4], uint32_t cp);
/* Append s[0..n) to b with each maximal invalid subpart replaced by U+FFFD. false if b failed. */
bool ll_buf_put_utf8_lossy(struct ll_buf *b, const char *s, size_t n);
/* The same as a malloc'd NUL-terminated copy (*out, *out_len). Returns LL_OK or LL_ENOMEM. */
enum ll_status ll_utf8_repair(const char *s, size_t n, char **out, size_t *out_len);

#endif
