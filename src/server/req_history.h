/*
 * req_history.h: finished generation requests kept a while for GET /v1/requests/{id}: each
 * one's final status (a JSON object), found by its response id or X-Request-Id, only by the
 * API key that made it. A request is "gone" (404) once it finished more than --request-retention
 * seconds ago, or once REQ_HISTORY_CAP newer requests finished after it.
 *
 * Any thread: every function takes the table's lock (a leaf lock).
 */
#ifndef LLAISYS_REQ_HISTORY_H
#define LLAISYS_REQ_HISTORY_H

#include <pthread.h>
#include <stdbool.h>

#include "errors.h"

#define REQ_HISTORY_CAP 1024

struct req_history_entry {
    char id[48], xrid[129];
    int key;          /* the owning API key (auth_key_index) */
    double done_at;   /* clock() when it finished */
    char *json;       /* the final status object (malloc'd), NULL: empty slot */
};

struct req_history {
    pthread_mutex_t lock;
    struct req_history_entry *e; /* (REQ_HISTORY_CAP) a ring: next is the oldest */
    int next;
    double retention;            /* seconds a finished request stays */
    double (*clock)(void);       /* ll_now; tests put their own */
};

/* An empty table keeping requests retention_s seconds (0: none). LL_OK or LL_ENOMEM. */
enum ll_status req_history_init(struct req_history *h, double retention_s);
void req_history_free(struct req_history *h);
/* Keep a finished request's status json (taken: freed here in every case, NULL is ignored). */
void req_history_add(struct req_history *h, const char *id, const char *xrid, int key,
                     char *json);
/* The status of key's request whose id or X-Request-Id is id, if kept and not expired (the
 * newest such): a malloc'd copy, else NULL. */
char *req_history_find(struct req_history *h, const char *id, int key);

#endif
