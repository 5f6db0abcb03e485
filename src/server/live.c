/*
 * live.c: the requests in flight and the watcher thread that cancels them when their client
 * hangs up or their time limit passes.
 *
 * libmicrohttpd only notices a vanished client when it next writes, and a connection thread is
 * blocked in the engine while its request is queued or in prefill; so the watcher polls the
 * sockets of every registered entry for POLLRDHUP/POLLHUP and calls its cancel callback (a
 * generation job cancels its engine requests), which wakes the connection thread within one
 * engine step. It also wakes for the earliest
 * request deadline. An eventfd wakes it when the table changes.
 *
 * The table (a list through live_entry.prev/next) is guarded by t->lock; an entry is
 * unregistered by its owner before it is freed, so an entry found in the list under the lock
 * is alive. The watcher polls a copy of the fds without the lock and, after poll(), looks each
 * entry up again (same address, same fd) before touching it. Cancelling calls the owner's
 * callback under t->lock: lock order t->lock, then whatever the callback takes (the engine's
 * mailbox lock for a generation job).
 *
 * A poll() failure (EINVAL past the descriptor limit, ENOMEM) is a run-time condition: it is
 * logged once and the loop retries after a short sleep; deadlines are still enforced.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "live.h"
#include "log.h"
#include "util.h"

struct live_table {
    pthread_mutex_t lock;
    struct live_entry *head;
    int n;
    int wake_fd;
    bool stop;
    pthread_t thread;
    bool started;
};

/* Record why (the first reason wins) and stop the owner's work. With t->lock held. */
static void cancel(struct live_entry *e, enum cancel_reason why)
{
    int none = CANCEL_NONE;
    atomic_compare_exchange_strong(&e->reason, &none, (int)why);
    e->cancel(e->owner);
}

static void wake(struct live_table *t)
{
    uint64_t one = 1;
    ssize_t r = write(t->wake_fd, &one, sizeof one);
    (void)r; /* a full counter already means "wake up" */
}

static void *watch_main(void *arg)
{
    struct live_table *t = arg;
    struct pollfd *fds = NULL;
    struct live_entry **entries = NULL;
    int cap = 0;
    bool poll_failing = false; /* logged the failure already */
    for (;;) {
        pthread_mutex_lock(&t->lock);
        if (t->stop) {
            pthread_mutex_unlock(&t->lock);
            break;
        }
        if (t->n + 1 > cap || cap == 0) {
            int ncap = (t->n + 1) * 2;
            struct pollfd *f = realloc(fds, (size_t)ncap * sizeof *f);
            if (f)
                fds = f;
            struct live_entry **g = realloc(entries, (size_t)ncap * sizeof *g);
            if (g)
                entries = g;
            if (f && g)
                cap = ncap;
        }
        if (cap == 0) { /* no memory for the poll set: try again shortly */
            pthread_mutex_unlock(&t->lock);
            poll(NULL, 0, 100);
            continue;
        }
        int n = 1;
        double now = ll_now(), next = 0;
        fds[0] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
        for (struct live_entry *e = t->head; e; e = e->next) {
            if (e->deadline > 0 && !atomic_load(&e->timed_out)) {
                if (e->deadline <= now) {
                    atomic_store(&e->timed_out, true);
                    cancel(e, CANCEL_TIMEOUT);
                } else if (next == 0 || e->deadline < next) {
                    next = e->deadline;
                }
            }
            if (e->fd >= 0 && !atomic_load(&e->client_gone) && n < cap) {
                fds[n] = (struct pollfd){.fd = e->fd, .events = POLLRDHUP};
                entries[n++] = e;
            }
        }
        bool short_copy = n < t->n + 1;
        pthread_mutex_unlock(&t->lock);

        int timeout = next > 0 ? (int)((next - now) * 1000) + 1 : -1;
        if (short_copy && (timeout < 0 || timeout > 100))
            timeout = 100; /* the copy was short of memory: look again soon */
        int r = poll(fds, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            if (!poll_failing)
                log_msg(LOG_ERROR, "hang-up watcher: poll of %d sockets failed (%s); retrying",
                        n, strerror(errno));
            poll_failing = true;
            poll(NULL, 0, 100); /* not a busy loop while it lasts */
            continue;
        }
        if (r >= 0 && poll_failing) {
            log_msg(LOG_INFO, "hang-up watcher: poll works again");
            poll_failing = false;
        }
        if (r <= 0)
            continue;
        if (fds[0].revents & POLLIN) {
            uint64_t v;
            ssize_t got = read(t->wake_fd, &v, sizeof v);
            (void)got;
        }
        pthread_mutex_lock(&t->lock);
        for (int i = 1; i < n; i++) {
            if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                continue;
            for (struct live_entry *e = t->head; e; e = e->next) {
                if (e == entries[i] && e->fd == fds[i].fd) {
                    if (!atomic_exchange(&e->client_gone, true)) {
                        log_msg(LOG_DEBUG, "request %s: client hung up", e->xrid);
                        cancel(e, CANCEL_DISCONNECT);
                    }
                    break;
                }
            }
        }
        pthread_mutex_unlock(&t->lock);
    }
    free(fds);
    free(entries);
    return NULL;
}

enum ll_status live_create(struct live_table **out, struct ll_err *err)
{
    struct live_table *t = calloc(1, sizeof *t);
    if (!t)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->wake_fd < 0 || pthread_mutex_init(&t->lock, NULL)) {
        if (t->wake_fd >= 0)
            close(t->wake_fd);
        free(t);
        return ll_err_set(err, LL_ENOMEM, "cannot create the watcher's eventfd");
    }
    if (pthread_create(&t->thread, NULL, watch_main, t)) {
        pthread_mutex_destroy(&t->lock);
        close(t->wake_fd);
        free(t);
        return ll_err_set(err, LL_ENOMEM, "cannot start the watcher thread");
    }
    t->started = true;
    *out = t;
    return LL_OK;
}

void live_destroy(struct live_table *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    LL_ASSERT(t->n == 0);
    pthread_mutex_unlock(&t->lock);
    wake(t);
    if (t->started)
        pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    close(t->wake_fd);
    free(t);
}

void live_add(struct live_table *t, struct live_entry *e)
{
    pthread_mutex_lock(&t->lock);
    e->prev = NULL;
    e->next = t->head;
    if (t->head)
        t->head->prev = e;
    t->head = e;
    t->n++;
    e->registered = true;
    pthread_mutex_unlock(&t->lock);
    wake(t);
}

void live_remove(struct live_table *t, struct live_entry *e)
{
    pthread_mutex_lock(&t->lock);
    if (e->registered) {
        if (e->prev)
            e->prev->next = e->next;
        else
            t->head = e->next;
        if (e->next)
            e->next->prev = e->prev;
        t->n--;
        e->registered = false;
    }
    pthread_mutex_unlock(&t->lock);
}

int live_cancel_id(struct live_table *t, const char *id, int key)
{
    int n = 0;
    pthread_mutex_lock(&t->lock);
    for (struct live_entry *e = t->head; e; e = e->next) {
        if (e->key != key)
            continue;
        if ((e->id && !strcmp(e->id, id)) || (e->xrid && !strcmp(e->xrid, id))) {
            cancel(e, CANCEL_ROUTE);
            n++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

void live_cancel_all(struct live_table *t, enum cancel_reason why)
{
    pthread_mutex_lock(&t->lock);
    for (struct live_entry *e = t->head; e; e = e->next)
        cancel(e, why);
    pthread_mutex_unlock(&t->lock);
}

int live_count(struct live_table *t)
{
    pthread_mutex_lock(&t->lock);
    int n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}
