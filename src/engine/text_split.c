/*
 * text_split.c: one request's text stream, piece by piece (the detokenizer's output per token),
 * turned into what may be released now: answer text, reasoning text, a stop (see engine.h,
 * "Text path").
 *
 * Called by the scheduler thread for the requests it runs (engine.c), or by whoever finishes a
 * request; one owner at a time. Buffers are sized at init (the held text is shorter than the
 * longest marker, and one piece is at most max_piece bytes), so a feed never allocates.
 * Invariants: pend holds only text that could still be the start of a stop string, of
 * "</think>" inside the reasoning, or of "<think>" before anything was released; stop strings
 * start with a UTF-8 lead byte, so every release ends on a character boundary.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "reasoning.h"
#include "util.h"

static const char open_tag[] = LL_REASONING_OPEN, close_tag[] = LL_REASONING_CLOSE;
#define OPEN_LEN (sizeof open_tag - 1)
#define CLOSE_LEN (sizeof close_tag - 1)

enum ll_status text_split_init(struct text_split *t, const char *const *stop,
                               const size_t *stop_len, int n_stop, bool reasoning,
                               enum split_state start, size_t max_piece, struct ll_err *err)
{
    memset(t, 0, sizeof *t);
    size_t longest = CLOSE_LEN;
    for (int i = 0; i < n_stop; i++)
        if (stop_len[i] > longest)
            longest = stop_len[i];
    t->cap = longest + max_piece + 1;
    t->pend = malloc(t->cap);
    t->content = malloc(t->cap);
    t->reason = malloc(t->cap);
    if (!t->pend || !t->content || !t->reason) {
        text_split_free(t);
        return ll_err_set(err, LL_ENOMEM, "out of memory for the text of a request");
    }
    t->stop = stop;
    t->stop_len = stop_len;
    t->n_stop = n_stop;
    t->reasoning = reasoning;
    t->state = reasoning ? start : SPLIT_CONTENT;
    t->stop_hit = -1;
    return LL_OK;
}

void text_split_free(struct text_split *t)
{
    free(t->pend);
    free(t->content);
    free(t->reason);
    t->pend = t->content = t->reason = NULL;
}

/* The longest proper prefix of pat (plen bytes) that s[0..n) ends with; 0 if none. */
static size_t partial_suffix(const char *s, size_t n, const char *pat, size_t plen)
{
    size_t h = plen - 1 < n ? plen - 1 : n;
    for (; h > 0; h--)
        if (s[n - h] == pat[0] && !memcmp(s + n - h, pat, h))
            return h;
    return 0;
}

/* Release s[0..n) to the channel of the current state. */
static void release(struct text_split *t, const char *s, size_t n)
{
    if (t->state == SPLIT_REASONING) {
        memcpy(t->reason + t->n_reason, s, n);
        t->n_reason += n;
    } else {
        memcpy(t->content + t->n_content, s, n);
        t->n_content += n;
    }
}

void text_split_feed(struct text_split *t, const char *text, size_t len, bool check_stops,
                     bool final)
{
    t->n_content = t->n_reason = 0;
    t->stop_hit = -1;
    t->closed = false;
    if (t->done)
        return;
    LL_ASSERT(t->n_pend + len <= t->cap);
    memcpy(t->pend + t->n_pend, text, len);
    size_t n = t->n_pend + len, pos = 0;
    const char *p = t->pend;
    if (t->n_stop == 0)
        check_stops = false;
    for (;;) {
        if (t->state == SPLIT_START) {
            size_t rn = n - pos;
            if (rn >= OPEN_LEN && !memcmp(p + pos, open_tag, OPEN_LEN)) {
                pos += OPEN_LEN;
                t->state = SPLIT_REASONING;
                continue;
            }
            if (rn < OPEN_LEN && !memcmp(p + pos, open_tag, rn) && !final)
                break; /* could still be "<think>": hold it (below) */
            t->state = SPLIT_CONTENT;
        }
        /* the earliest stop string in p[pos..n) */
        size_t stop_at = n;
        if (check_stops) {
            for (int i = 0; i < t->n_stop; i++) {
                const char *m = memmem(p + pos, n - pos, t->stop[i], t->stop_len[i]);
                if (m && (size_t)(m - p) < stop_at) {
                    stop_at = (size_t)(m - p);
                    t->stop_hit = i;
                }
            }
        }
        if (t->state == SPLIT_REASONING) {
            const char *m = memmem(p + pos, stop_at - pos, close_tag, CLOSE_LEN);
            if (m) {
                release(t, p + pos, (size_t)(m - p) - pos);
                pos = (size_t)(m - p) + CLOSE_LEN;
                t->state = SPLIT_CONTENT;
                t->closed = true;
                t->stop_hit = -1;
                continue; /* look for stops again in the answer that follows */
            }
        }
        if (t->stop_hit >= 0) {
            release(t, p + pos, stop_at - pos);
            t->n_pend = 0;
            t->done = true;
            return;
        }
        break;
    }
    /* hold what could still grow into a marker */
    size_t hold = 0;
    if (!final) {
        if (t->state == SPLIT_START) {
            hold = n - pos;
        } else {
            if (t->state == SPLIT_REASONING)
                hold = partial_suffix(p + pos, n - pos, close_tag, CLOSE_LEN);
            for (int i = 0; check_stops && i < t->n_stop; i++) {
                size_t h = partial_suffix(p + pos, n - pos, t->stop[i], t->stop_len[i]);
                if (h > hold)
                    hold = h;
            }
        }
    }
    if (t->state != SPLIT_START)
        release(t, p + pos, n - pos - hold);
    memmove(t->pend, p + n - hold, hold);
    t->n_pend = hold;
}
