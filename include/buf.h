/*
 * buf.h: a growable byte buffer, the one every layer appends text and bytes to.
 *
 * A zeroed struct is an empty buffer. Once anything was appended, data is NUL-terminated (the
 * NUL is not counted in len), so text built here can be used as a C string. An append that
 * cannot get memory sets `failed`; every later append is then a no-op returning false, so a
 * caller may append many pieces and check once (ll_buf_take returns NULL). A caller may shorten
 * the contents by lowering len (the next append or ll_buf_take restores the NUL). Not
 * thread-safe: one owner at a time.
 */
#ifndef LLAISYS_BUF_H
#define LLAISYS_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct ll_buf {
    char *data;      /* (cap) bytes, data[len] == 0 once allocated; NULL while empty */
    size_t len, cap;
    bool failed;     /* an append ran out of memory */
};

/* Room for `more` bytes past len plus the NUL. false (and failed set) on no memory. */
bool ll_buf_reserve(struct ll_buf *b, size_t more);
/* Append n bytes (may contain NUL). false if failed. */
bool ll_buf_append(struct ll_buf *b, const void *p, size_t n);
/* Append a C string / one byte. false if failed. */
bool ll_buf_puts(struct ll_buf *b, const char *s);
bool ll_buf_putc(struct ll_buf *b, char c);
/* Append printf-formatted text. false if failed (or the format itself fails). */
bool ll_buf_printf(struct ll_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forget the contents (len 0, memory kept) and clear `failed`. */
void ll_buf_clear(struct ll_buf *b);
/* The contents as a malloc'd NUL-terminated string the caller frees ("" when empty), and b is
 * reset to empty. NULL when an append failed or no memory (b is reset either way). */
char *ll_buf_take(struct ll_buf *b);
/* Free the memory and reset to empty (a zeroed struct is fine). */
void ll_buf_free(struct ll_buf *b);

#endif
