/*
 * sse.c: Server-Sent Events framing: a byte queue of `data: …\n\n` events and `: …\n\n`
 * comments waiting for the connection to take them. Owned by one connection thread.
 * Taken bytes are dropped by moving the rest to the front when the queue is half consumed.
 */
#include <stdlib.h>
#include <string.h>

#include "server_impl.h"

static bool append(struct sse_buf *b, const char *a, size_t alen, const char *m, size_t mlen,
                   const char *z, size_t zlen)
{
    size_t need = alen + mlen + zlen;
    if (b->off && b->off >= b->len / 2) { /* compact */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + need > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + need)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
            return false;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, a, alen);
    memcpy(b->data + b->len + alen, m, mlen);
    memcpy(b->data + b->len + alen + mlen, z, zlen);
    b->len += need;
    return true;
}

bool sse_event(struct sse_buf *b, const char *json)
{
    return append(b, "data: ", 6, json, strlen(json), "\n\n", 2);
}

bool sse_comment(struct sse_buf *b, const char *text)
{
    return append(b, ": ", 2, text, strlen(text), "\n\n", 2);
}

bool sse_done(struct sse_buf *b)
{
    return append(b, "data: [DONE]", 12, "", 0, "\n\n", 2);
}

size_t sse_pending(const struct sse_buf *b)
{
    return b->len - b->off;
}

size_t sse_take(struct sse_buf *b, char *dst, size_t max)
{
    size_t n = b->len - b->off;
    if (n > max)
        n = max;
    if (n)
        memcpy(dst, b->data + b->off, n);
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
    return n;
}

void sse_free(struct sse_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
