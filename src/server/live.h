/*
 * live.h: the requests in flight, for cancellation, and the hang-up watcher thread that
 * cancels them when their client goes away or their time limit passes.
 *
 * The table knows a request only by its struct live_entry, which the owner (a generation job)
 * embeds, fills, registers with live_add and unregisters with live_remove before freeing it.
 * Cancelling records why in the entry and calls the entry's callback, under the table's lock.
 */
#ifndef LLAISYS_LIVE_H
#define LLAISYS_LIVE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "errors.h"

/* Why a request in flight was cancelled. */
enum cancel_reason {
    CANCEL_NONE,
    CANCEL_DISCONNECT, /* the client went away */
    CANCEL_ROUTE,      /* POST /v1/requests/{id}/cancel */
    CANCEL_TIMEOUT,    /* --request-timeout reached */
    CANCEL_SHUTDOWN,   /* the server stopped */
    CANCEL_COUNT
};

/* One registered request. The owner sets the first block before live_add and leaves it alone
 * while registered; the table sets the flags (the owner reads them: atomics); the links are
 * the table's. Zero-initialised flags mean "nothing happened". */
struct live_entry {
    int fd;                    /* the connection's socket to watch for hang-up, -1: none */
    double deadline;           /* ll_now() time limit, 0: none */
    const char *id, *xrid;     /* the names live_cancel_id matches (response id, X-Request-Id) */
    void (*cancel)(void *owner); /* stop the owner's work; called with the table's lock held,
                                    possibly more than once; must not call back into the table */
    void *owner;
    int key;                   /* the owning API key's index: only that key may cancel it */

    atomic_bool client_gone;   /* the watcher saw the socket hang up */
    atomic_bool timed_out;     /* the deadline passed */
    atomic_int reason;         /* enum cancel_reason: the first cancellation's */

    bool registered;
    struct live_entry *prev, *next;
};

struct live_table;

/* An empty table with its watcher thread running. LL_OK, else LL_ENOMEM (no memory, eventfd
 * or thread) with err set. */
enum ll_status live_create(struct live_table **out, struct ll_err *err);
/* Stop the watcher and free the table (it must be empty). NULL is a no-op. */
void live_destroy(struct live_table *t);
/* Register e (the watcher polls its fd and checks its deadline from now on). */
void live_add(struct live_table *t, struct live_entry *e);
/* Unregister e; a no-op when it is not registered. After it no cancel callback runs for e. */
void live_remove(struct live_table *t, struct live_entry *e);
/* Cancel every entry owned by key whose id or xrid is id (reason CANCEL_ROUTE). Entries of
 * other keys are invisible: their ids never match. Returns how many. */
int live_cancel_id(struct live_table *t, const char *id, int key);
/* Cancel every entry (shutdown). */
void live_cancel_all(struct live_table *t, enum cancel_reason why);
/* How many entries are registered. */
int live_count(struct live_table *t);

#endif
