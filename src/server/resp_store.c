/*
 * resp_store.c: stored responses (resp_store.h): an array under one lock, looked up by id and
 * owner, the least recently used dropped to stay under the byte budget.
 */
#include "resp_store.h"

#include <stdlib.h>
#include <string.h>

void resp_store_init(struct resp_store *st, size_t max_bytes)
{
    *st = (struct resp_store){.max_bytes = max_bytes};
    pthread_mutex_init(&st->lock, NULL);
}

void resp_store_free(struct resp_store *st)
{
    for (int i = 0; i < st->n; i++) {
        free(st->s[i].object);
        free(st->s[i].input);
    }
    free(st->s);
    pthread_mutex_destroy(&st->lock);
    st->s = NULL;
    st->n = st->cap = 0;
}

bool resp_store_enabled(const struct resp_store *st)
{
    return st->max_bytes > 0;
}

/* Under the lock: the index of owner's response id, or -1. */
static int find(const struct resp_store *st, const char *id, uint64_t owner)
{
    for (int i = 0; i < st->n; i++)
        if (st->s[i].owner == owner && !strcmp(st->s[i].id, id))
            return i;
    return -1;
}

/* Under the lock: drop entry i (the last one takes its place). */
static void drop(struct resp_store *st, int i)
{
    st->bytes -= st->s[i].bytes;
    free(st->s[i].object);
    free(st->s[i].input);
    st->s[i] = st->s[--st->n];
}

bool resp_store_put(struct resp_store *st, const char *id, uint64_t owner, char *object,
                    char *input)
{
    size_t bytes = object && input ? sizeof(struct resp_stored) + strlen(object) + strlen(input)
                                   : 0;
    bool kept = false;
    pthread_mutex_lock(&st->lock);
    if (bytes == 0 || bytes > st->max_bytes || strlen(id) > OAI_RESPONSE_ID_MAX)
        goto out;
    int old = find(st, id, owner);
    if (old >= 0)
        drop(st, old);
    while (st->bytes + bytes > st->max_bytes && st->n > 0) {
        int lru = 0;
        for (int i = 1; i < st->n; i++)
            if (st->s[i].used < st->s[lru].used)
                lru = i;
        drop(st, lru);
        st->evicted++;
    }
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 16;
        struct resp_stored *s = realloc(st->s, sizeof *s * (size_t)cap);
        if (!s)
            goto out;
        st->s = s;
        st->cap = cap;
    }
    struct resp_stored *e = &st->s[st->n++];
    *e = (struct resp_stored){.owner = owner, .object = object, .input = input, .bytes = bytes,
                              .used = ++st->tick};
    strcpy(e->id, id);
    st->bytes += bytes;
    object = input = NULL;
    kept = true;
out:
    pthread_mutex_unlock(&st->lock);
    free(object);
    free(input);
    return kept;
}

bool resp_store_get(struct resp_store *st, const char *id, uint64_t owner, char **object,
                    char **input)
{
    char *o = NULL, *in = NULL;
    bool ok = false;
    pthread_mutex_lock(&st->lock);
    int i = find(st, id, owner);
    if (i >= 0) {
        st->s[i].used = ++st->tick;
        o = object ? strdup(st->s[i].object) : NULL;
        in = input ? strdup(st->s[i].input) : NULL;
        ok = (!object || o) && (!input || in);
    }
    pthread_mutex_unlock(&st->lock);
    if (!ok) {
        free(o);
        free(in);
        o = in = NULL;
    }
    if (object)
        *object = o;
    if (input)
        *input = in;
    return ok;
}

bool resp_store_delete(struct resp_store *st, const char *id, uint64_t owner)
{
    pthread_mutex_lock(&st->lock);
    int i = find(st, id, owner);
    if (i >= 0)
        drop(st, i);
    pthread_mutex_unlock(&st->lock);
    return i >= 0;
}

void resp_store_get_stats(struct resp_store *st, struct resp_store_stats *out)
{
    pthread_mutex_lock(&st->lock);
    *out = (struct resp_store_stats){.stored = st->n, .bytes = st->bytes,
                                     .evicted = st->evicted};
    pthread_mutex_unlock(&st->lock);
}
