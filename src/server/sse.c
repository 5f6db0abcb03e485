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
#include <stdio.h>
#include <string.h>

#include "respond.h"
#include "sse.h"
#include "util.h"

/* Append prefix, text, "\n\n" as one piece (room first, so it is whole or not at all). */
static bool append(struct sse_buf *q, const char *prefix, const char *text)
{
    struct ll_buf *b = &q->b;
    if (q->off && q->off >= b->len / 2) { /* compact */
        memmove(b->data, b->data + q->off, b->len - q->off);
        b->len -= q->off;
        q->off = 0;
    }
    size_t plen = strlen(prefix), tlen = strlen(text);
    if (!ll_buf_reserve(b, plen + tlen + 2))
        return false;
    ll_buf_append(b, prefix, plen);
    ll_buf_append(b, text, tlen);
    ll_buf_append(b, "\n\n", 2);
    return true;
}

bool sse_event(struct sse_buf *q, const char *json)
{
    return append(q, "data: ", json);
}

bool sse_named_event(struct sse_buf *q, const char *name, const char *json)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "event: %.60s\ndata: ", name);
    return append(q, prefix, json);
}

bool sse_comment(struct sse_buf *q, const char *text)
{
    return append(q, ": ", text);
}

bool sse_done(struct sse_buf *q)
{
    return append(q, "data: [DONE]", "");
}

size_t sse_pending(const struct sse_buf *q)
{
    return q->b.len - q->off;
}

size_t sse_take(struct sse_buf *q, char *dst, size_t max)
{
    size_t n = q->b.len - q->off;
    if (n > max)
        n = max;
    if (n)
        memcpy(dst, q->b.data + q->off, n);
    q->off += n;
    if (q->off == q->b.len)
        q->off = q->b.len = 0;
    return n;
}

void sse_free(struct sse_buf *q)
{
    ll_buf_free(&q->b);
    q->off = 0;
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
