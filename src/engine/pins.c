/*
 * pins.c: pinned KV blocks (engine.h, "Pins"): the block references a session keeps between
 * its turns, released least recently used first when the pool needs room or the pin limit is
 * passed. The pin table is written by the scheduler with the mailbox lock held, so other
 * threads can read a key's count; the pool itself is only touched by the scheduler.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"

static int pin_find(const struct engine *e, uint64_t key)
{
    for (int i = 0; i < e->n_pins; i++)
        if (e->pins[i].key == key)
            return i;
    return -1;
}

static int pinned_total(const struct engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_pins; i++)
        n += e->pins[i].n;
    return n;
}

/* Remove pin i from the table (under the lock) and then release its blocks. */
static void pin_drop(struct engine *e, int i)
{
    struct engine_pin p = e->pins[i];
    pthread_mutex_lock(&e->mbox->lock);
    e->pins[i] = e->pins[--e->n_pins];
    pthread_mutex_unlock(&e->mbox->lock);
    kv_pool_release_table(&e->pool, p.blocks, p.n);
    free(p.blocks);
}

static int pin_lru(const struct engine *e)
{
    int best = -1;
    for (int i = 0; i < e->n_pins; i++)
        if (best < 0 || e->pins[i].used < e->pins[best].used)
            best = i;
    return best;
}

void pins_on_finish(struct engine *e, struct engine_req *r)
{
    uint64_t key = r->params.pin_key;
    int n = r->n_published;
    if (!key || r->state != REQ_RUNNING)
        return;
    int old = pin_find(e, key);
    if (n <= 0) {
        if (old >= 0)
            pin_drop(e, old);
        return;
    }
    int32_t *blocks = malloc((size_t)n * sizeof *blocks);
    if (!blocks)
        return; /* no pin: the blocks stay in the ordinary prefix cache */
    if (old < 0 && e->n_pins == e->cap_pins) {
        int cap = e->cap_pins ? 2 * e->cap_pins : 16;
        struct engine_pin *np = realloc(e->pins, (size_t)cap * sizeof *np);
        if (!np) {
            free(blocks);
            return;
        }
        pthread_mutex_lock(&e->mbox->lock);
        e->pins = np;
        e->cap_pins = cap;
        pthread_mutex_unlock(&e->mbox->lock);
    }
    memcpy(blocks, r->blocks, (size_t)n * sizeof *blocks);
    for (int i = 0; i < n; i++)
        kv_pool_ref(&e->pool, blocks[i]);
    struct engine_pin prev = {0};
    pthread_mutex_lock(&e->mbox->lock);
    if (old >= 0)
        prev = e->pins[old];
    else
        old = e->n_pins++;
    e->pins[old] =
        (struct engine_pin){.key = key, .blocks = blocks, .n = n, .used = ++e->pin_clock};
    int limit = e->pin_limit;
    pthread_mutex_unlock(&e->mbox->lock);
    if (prev.blocks) {
        kv_pool_release_table(&e->pool, prev.blocks, prev.n);
        free(prev.blocks);
    }
    while (e->n_pins > 0 && pinned_total(e) > limit) {
        pin_drop(e, pin_lru(e));
        e->counters.pins_dropped++;
    }
}

void pins_take_unpins(struct engine *e)
{
    pthread_mutex_lock(&e->mbox->lock);
    int n = e->n_unpins;
    if (n == 0) {
        pthread_mutex_unlock(&e->mbox->lock);
        return;
    }
    uint64_t keys[64];
    if (n > 64)
        n = 64; /* the rest next step */
    memcpy(keys, e->unpins, (size_t)n * sizeof *keys);
    memmove(e->unpins, e->unpins + n, (size_t)(e->n_unpins - n) * sizeof *keys);
    e->n_unpins -= n;
    pthread_mutex_unlock(&e->mbox->lock);
    for (int k = 0; k < n; k++) {
        int i = pin_find(e, keys[k]);
        if (i >= 0)
            pin_drop(e, i);
    }
}

bool pins_make_room(struct engine *e, int want)
{
    bool any = false;
    while (kv_pool_n_free(&e->pool) < want && e->n_pins > 0) {
        pin_drop(e, pin_lru(e));
        e->counters.pins_dropped++;
        any = true;
    }
    return any;
}

void pins_free(struct engine *e)
{
    while (e->n_pins > 0)
        pin_drop(e, e->n_pins - 1);
    free(e->pins);
    free(e->unpins);
    e->pins = NULL;
    e->unpins = NULL;
    e->cap_pins = e->cap_unpins = 0;
}

void engine_set_pin_limit(struct engine *e, int blocks)
{
    pthread_mutex_lock(&e->mbox->lock);
    e->pin_limit = blocks < 0 ? 0 : blocks;
    pthread_mutex_unlock(&e->mbox->lock);
}

void engine_unpin(struct engine *e, uint64_t key)
{
    pthread_mutex_lock(&e->mbox->lock);
    if (e->n_unpins == e->cap_unpins) {
        int cap = e->cap_unpins ? 2 * e->cap_unpins : 16;
        uint64_t *nu = realloc(e->unpins, (size_t)cap * sizeof *nu);
        if (!nu) {
            pthread_mutex_unlock(&e->mbox->lock);
            return; /* the pin ages out by LRU instead */
        }
        e->unpins = nu;
        e->cap_unpins = cap;
    }
    e->unpins[e->n_unpins++] = key;
    pthread_cond_signal(&e->mbox->wake);
    pthread_mutex_unlock(&e->mbox->lock);
}

int engine_pinned_blocks(struct engine *e, uint64_t key)
{
    pthread_mutex_lock(&e->mbox->lock);
    int i = pin_find(e, key), n = i >= 0 ? e->pins[i].n : 0;
    pthread_mutex_unlock(&e->mbox->lock);
    return n;
}
