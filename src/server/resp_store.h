/*
 * resp_store.h: stored responses of the Responses API (POST /v1/responses with `store`, the
 * default): each one's response object and its input items (those of its previous_response_id's
 * conversation first, each with an id), both as JSON text, so that a later request can continue
 * it by `previous_response_id` (the conversation: the input items, then the object's output)
 * and GET / DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items find it. A response belongs to the API key that made it (its hash, 0 without auth): another key
 * sees nothing. Memory only, --responses-store-mb at most: past it the least recently used
 * responses go first (a restart forgets them all).
 *
 * Any thread: every function takes the store's lock (a leaf lock).
 */
#ifndef LLAISYS_RESP_STORE_H
#define LLAISYS_RESP_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "openai_request.h" /* OAI_RESPONSE_ID_MAX */

/* Why a response may not be found, for error messages. */
#define RESP_STORE_WHY                                                                          \
    "responses are kept in memory, up to --responses-store-mb, the least recently used "       \
    "dropped first; store: false keeps none"

struct resp_stored {
    char id[OAI_RESPONSE_ID_MAX + 1];
    uint64_t owner;
    char *object; /* the response object (JSON text) */
    char *input;  /* its input items (a JSON array) */
    size_t bytes; /* what it counts against the budget */
    uint64_t used; /* the store's tick at its last use (least recently used goes first) */
};

struct resp_store {
    pthread_mutex_t lock;
    struct resp_stored *s; /* (n, cap) */
    int n, cap;
    size_t bytes, max_bytes; /* max_bytes 0: nothing is stored */
    uint64_t tick, evicted;
};

struct resp_store_stats {
    int stored;
    size_t bytes;
    uint64_t evicted;
};

void resp_store_init(struct resp_store *st, size_t max_bytes);
void resp_store_free(struct resp_store *st);
/* Whether responses are stored at all (a budget above 0). */
bool resp_store_enabled(const struct resp_store *st);
/* Keep response id of owner: object and input are taken (freed here in every case). The least
 * recently used responses go until it fits; one larger than the whole budget is not kept.
 * Returns whether it was kept. */
bool resp_store_put(struct resp_store *st, const char *id, uint64_t owner, char *object,
                    char *input);
/* Owner's response id: malloc'd copies of its object into *object and of its input items into
 * *input (either pointer may be NULL: not wanted). Returns false, with both NULL, when there is
 * none (or out of memory). Counts as a use. */
bool resp_store_get(struct resp_store *st, const char *id, uint64_t owner, char **object,
                    char **input);
/* Forget owner's response id; false when there was none. */
bool resp_store_delete(struct resp_store *st, const char *id, uint64_t owner);
void resp_store_get_stats(struct resp_store *st, struct resp_store_stats *out);

#endif
