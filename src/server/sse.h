/*
 * sse.h: Server-Sent Events: the framing (`data: JSON\n\n` events, `: text\n\n` comments, the
 * final `data: [DONE]\n\n`) into a queue of bytes waiting to be written, and the streamed HTTP
 * response that writes such a queue as its producer fills it, with a keep-alive comment
 * whenever nothing was written for a while. The producer is known only through struct
 * sse_source. Everything here runs on the connection's thread.
 */
#ifndef LLAISYS_SSE_H
#define LLAISYS_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "buf.h"

struct http_ctx;

/* Bytes waiting to be written to one stream. Zero-initialised is empty. */
struct sse_buf {
    struct ll_buf b;
    size_t off; /* b.data[off..b.len) is pending */
};

/* Append `data: JSON\n\n`, `: COMMENT\n\n` or `data: [DONE]\n\n`, whole or not at all.
 * false: out of memory (what was pending stays; every later append fails too). */
bool sse_event(struct sse_buf *b, const char *json);
/* An event with a name: "event: NAME\ndata: JSON\n\n" (the Responses API's typed events). */
bool sse_named_event(struct sse_buf *b, const char *name, const char *json);
bool sse_comment(struct sse_buf *b, const char *text);
bool sse_done(struct sse_buf *b);
/* Bytes not yet taken. */
size_t sse_pending(const struct sse_buf *b);
/* Move up to max pending bytes to dst; returns how many. */
size_t sse_take(struct sse_buf *b, char *dst, size_t max);
void sse_free(struct sse_buf *b);

/* What the producer says about its stream. */
enum sse_state {
    SSE_OPEN,   /* more events may come */
    SSE_ENDED,  /* the queue holds the last of them: end the stream once it is written */
    SSE_BROKEN, /* end the response now, unfinished (client gone, out of memory) */
};

/* The producer of a stream: its queue and three callbacks, each given ctx. */
struct sse_source {
    struct sse_buf *queue;  /* where the producer appends events */
    double keepalive;       /* seconds without a write before a keep-alive comment */
    enum sse_state (*state)(void *ctx);
    /* Wait up to timeout_s for more events, appending them to queue. */
    void (*pump)(void *ctx, double timeout_s);
    /* The response is done with the producer (written, failed or dropped); called once. */
    void (*finish)(void *ctx);
    void *ctx;
};

/* Queue a 200 text/event-stream response that writes src's queue until the producer says
 * SSE_ENDED or SSE_BROKEN, or the client stops reading for the connection's timeout. From
 * here the response owns the producer: src->finish runs when it is done, or before this
 * returns when the response cannot be made. Returns MHD's result. */
enum MHD_Result sse_respond(struct http_ctx *c, const struct sse_source *src);

#endif
