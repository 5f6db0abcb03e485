/*
 * req_history.c: the ring of finished generation requests behind GET /v1/requests/{id} (see
 * req_history.h). Any thread, under h->lock (a leaf lock, held to copy a string or two).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "req_history.h"
#include "util.h"

enum ll_status req_history_init(struct req_history *h, double retention_s)
{
    memset(h, 0, sizeof *h);
    if (!(h->e = calloc(REQ_HISTORY_CAP, sizeof *h->e)))
        return LL_ENOMEM;
    if (pthread_mutex_init(&h->lock, NULL)) {
        free(h->e);
        h->e = NULL;
        return LL_ENOMEM;
    }
    h->retention = retention_s;
    h->clock = ll_now;
    return LL_OK;
}

void req_history_free(struct req_history *h)
{
    if (!h->e)
        return;
    for (int i = 0; i < REQ_HISTORY_CAP; i++)
        free(h->e[i].json);
    free(h->e);
    h->e = NULL;
    pthread_mutex_destroy(&h->lock);
}

void req_history_add(struct req_history *h, const char *id, const char *xrid, int key,
                     char *json)
{
    if (!json)
        return;
    if (h->retention <= 0) {
        free(json);
        return;
    }
    pthread_mutex_lock(&h->lock);
    struct req_history_entry *e = &h->e[h->next];
    h->next = (h->next + 1) % REQ_HISTORY_CAP;
    char *old = e->json;
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->xrid, sizeof e->xrid, "%s", xrid ? xrid : "");
    e->key = key;
    e->done_at = h->clock();
    e->json = json;
    pthread_mutex_unlock(&h->lock);
    free(old);
}

char *req_history_find(struct req_history *h, const char *id, int key)
{
    char *out = NULL;
    pthread_mutex_lock(&h->lock);
    double since = h->clock() - h->retention;
    /* newest first: from the slot before next, backwards */
    for (int k = 1; k <= REQ_HISTORY_CAP; k++) {
        const struct req_history_entry *e =
            &h->e[(h->next - k + REQ_HISTORY_CAP) % REQ_HISTORY_CAP];
        if (!e->json || e->done_at < since)
            break; /* older ones are older still */
        if (e->key == key && (!strcmp(e->id, id) || !strcmp(e->xrid, id))) {
            out = strdup(e->json);
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return out;
}
