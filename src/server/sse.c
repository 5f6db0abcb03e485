/*
 * sse.c: Server-Sent Events (sse.h): a byte queue of `data: …\n\n` events and `: …\n\n`
 * comments waiting for the connection to take them, and the libmicrohttpd content reader that
 * writes it as the producer fills it. Owned by one connection thread.
 *
 * Taken bytes are dropped by moving the rest to the front when the queue is half consumed.
 * The reader blocks in the producer's pump while nothing is pending, and returns at least every
 * keep-alive interval (an SSE comment), which stays below libmicrohttpd's inactivity timeout
 * (the write timeout), so only a client that reads nothing for that long is dropped; dropping
 * the response finishes the producer.
 */
#include <stdlib.h>
#include <string.h>

#include "respond.h"
#include "sse.h"
#include "util.h"

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

/* ---- the streamed response ---- */

struct sse_stream {
    struct sse_source src;
    double t_last_write; /* ll_now() of the last bytes handed to libmicrohttpd */
};

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sse_stream *s = cls;
    struct sse_buf *q = s->src.queue;
    for (;;) {
        enum sse_state st = s->src.state(s->src.ctx);
        if (st == SSE_BROKEN)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (sse_pending(q)) {
            s->t_last_write = ll_now();
            return (ssize_t)sse_take(q, buf, max);
        }
        if (st == SSE_ENDED)
            return MHD_CONTENT_READER_END_OF_STREAM;
        double wait = s->src.keepalive - (ll_now() - s->t_last_write);
        if (wait <= 0) {
            if (!sse_comment(q, "keep-alive"))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        s->src.pump(s->src.ctx, wait);
    }
}

static void reader_free(void *cls)
{
    struct sse_stream *s = cls;
    s->src.finish(s->src.ctx);
    free(s);
}

enum MHD_Result sse_respond(struct http_ctx *c, const struct sse_source *src)
{
    struct sse_stream *s = malloc(sizeof *s);
    if (!s) {
        src->finish(src->ctx);
        return MHD_NO;
    }
    *s = (struct sse_stream){.src = *src, .t_last_write = ll_now()};
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, s, reader_free);
    if (!r) {
        reader_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return respond_queue(c, 200, r); /* from here the response owns the stream */
}
