/*
 * sessions.h: server-side sessions (a conversation's token history kept between turns; its KV
 * blocks pinned in the engine under the session's key, engine.h "Pins").
 *
 * A session is named by the client (`session_id` in the body or the X-Session-Id header:
 * 1..64 bytes of [A-Za-z0-9._:-]) or by POST /v1/sessions. It belongs to the API key that
 * created it (its hash; 0 without auth): another key sees 404. Idle sessions expire after
 * --session-ttl; past --max-sessions the least recently used idle session is dropped (429 when
 * every session is busy). Any thread: one lock (a leaf) over the table.
 */
#ifndef LLAISYS_SESSIONS_H
#define LLAISYS_SESSIONS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "openai_request.h"

struct engine;

#define SESSION_ID_MAX 64

struct session {
    char id[SESSION_ID_MAX + 1];
    uint64_t owner; /* hash of the creating key's Authorization value, 0 without auth */
    uint64_t key;   /* the engine pin key (unique, nonzero) */
    int32_t *hist;  /* (n_hist, cap_hist) prompt + generated tokens of the last turn */
    int n_hist, cap_hist;
    double last_use; /* monotonic */
    long long created_unix, last_unix;
    int busy; /* turns in flight */
    uint64_t turns, cached_tokens;
    int last_common; /* tokens the last turn's prompt shared with the history before it */
    int last_cached; /* prompt tokens the last turn took from the cache */
};

struct sessions {
    pthread_mutex_t lock;
    struct engine *engine; /* for unpinning (set under lock once the engine is up: HTTP threads
                              serve sessions while the model loads) */
    struct session *s;     /* (n, cap) */
    int n, cap;
    uint64_t next_key;
    double ttl; /* seconds idle before expiry, 0: never */
    int max;    /* sessions at most */
    uint64_t hits, tokens_saved, created_total, expired, evicted;
};

/* Counters for /metrics. */
struct sessions_stats {
    int active;
    uint64_t hits, tokens_saved, created, expired, evicted;
};

void sessions_init(struct sessions *ss, double ttl, int max);
/* The engine whose pins the sessions own, or NULL (any thread). */
void sessions_set_engine(struct sessions *ss, struct engine *engine);
void sessions_free(struct sessions *ss);

/* Whether id is a valid session id (names the problem in e when not). */
bool session_id_valid(const char *id, struct oai_error *e);

/* Find (or, with create, make) the session id of owner and mark a turn in flight. *key gets
 * its pin key; the tokens prompt shares with the history are recorded (last_common). Returns LL_OK; LL_ENOTFOUND (no such session for this owner, and !create);
 * LL_EOVERLOADED (max sessions, all busy); LL_ENOMEM. */
enum ll_status sessions_begin(struct sessions *ss, const char *id, uint64_t owner, bool create,
                              const int32_t *prompt, int n_prompt, uint64_t *key,
                              struct oai_error *e);
/* End the turn of session key: with ok, its history becomes prompt + gen (replacing the old
 * one; a turn that does not extend it is an edit) and cached prompt tokens count as a hit. */
void sessions_end(struct sessions *ss, uint64_t key, bool ok, const int32_t *prompt, int n_prompt,
                  const int32_t *gen, int n_gen, int cached);
/* Make an empty session (POST /v1/sessions): id NULL makes one up. *out (SESSION_ID_MAX+1)
 * gets the id. Returns as sessions_begin, or LL_EINVAL when the id already exists. */
enum ll_status sessions_create(struct sessions *ss, const char *id, uint64_t owner, char *out,
                               struct oai_error *e);
/* The JSON of session id (malloc'd) or NULL with e set (404). */
char *sessions_describe(struct sessions *ss, const char *id, uint64_t owner, struct oai_error *e);
/* Delete session id (its pin released). Returns LL_OK or LL_ENOTFOUND. */
enum ll_status sessions_delete(struct sessions *ss, const char *id, uint64_t owner,
                               struct oai_error *e);
void sessions_get_stats(struct sessions *ss, struct sessions_stats *st);

#endif
