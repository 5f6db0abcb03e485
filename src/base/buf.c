/* buf.c: the growable byte buffer (see buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ll_buf_reserve(struct ll_buf *b, size_t more)
{
    if (b->failed)
        return false;
    if (more >= SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + more + 1; /* + the NUL */
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    b->data[b->len] = '\0';
    return true;
}

bool ll_buf_append(struct ll_buf *b, const void *p, size_t n)
{
    if (!ll_buf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool ll_buf_puts(struct ll_buf *b, const char *s)
{
    return ll_buf_append(b, s, strlen(s));
}

bool ll_buf_putc(struct ll_buf *b, char c)
{
    return ll_buf_append(b, &c, 1);
}

bool ll_buf_printf(struct ll_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return false;
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return false;
    }
    if ((size_t)n < sizeof small)
        return ll_buf_append(b, small, (size_t)n);
    if (!ll_buf_reserve(b, (size_t)n))
        return false;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

void ll_buf_clear(struct ll_buf *b)
{
    b->len = 0;
    b->failed = false;
    if (b->data)
        b->data[0] = '\0';
}

char *ll_buf_take(struct ll_buf *b)
{
    char *s = b->failed ? NULL : b->data;
    if (b->failed)
        free(b->data);
    else if (!s)
        s = calloc(1, 1);
    else
        s[b->len] = '\0'; /* the caller may have shortened len */
    memset(b, 0, sizeof *b);
    return s;
}

void ll_buf_free(struct ll_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
