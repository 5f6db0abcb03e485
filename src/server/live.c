/*
 * live.c: the jobs in flight and the watcher thread that cancels them when their client hangs
 * up or their time limit passes.
 *
 * libmicrohttpd only notices a vanished client when it next writes, and a connection thread is
 * blocked in the engine while its request is queued or in prefill; so the watcher polls the
 * sockets of every registered job for POLLRDHUP/POLLHUP and cancels the job's engine requests,
 * which wakes the connection thread within one engine step. It also wakes for the earliest
 * request deadline. An eventfd wakes it when the table changes.
 *
 * The table (a list through gen_job.live_prev/next) is guarded by t->lock; a job is
 * unregistered by its owner before it is freed, so a job found in the list under the lock is
 * alive. The watcher polls a copy of the fds without the lock and, after poll(), looks each
 * job up again by its registration serial before touching it. Lock order: t->lock, then the
 * engine's mailbox lock (engine_cancel).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "server_impl.h"
#include "util.h"

struct live_table {
    pthread_mutex_t lock;
    struct gen_job *head;
    int n;
    int wake_fd;
    bool stop;
    pthread_t thread;
    bool started;
};

void gen_job_cancel(struct gen_job *j, enum cancel_reason why)
{
    int none = CANCEL_NONE;
    atomic_compare_exchange_strong(&j->cancel_reason, &none, (int)why);
    for (int i = 0; i < j->n_choices; i++)
        if (j->ch[i].req)
            engine_cancel(j->ch[i].req);
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
    struct gen_job **jobs = NULL;
    int cap = 0;
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
            struct gen_job **g = realloc(jobs, (size_t)ncap * sizeof *g);
            if (g)
                jobs = g;
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
        for (struct gen_job *j = t->head; j; j = j->live_next) {
            if (j->deadline > 0 && !atomic_load(&j->timed_out)) {
                if (j->deadline <= now) {
                    atomic_store(&j->timed_out, true);
                    gen_job_cancel(j, CANCEL_TIMEOUT);
                } else if (next == 0 || j->deadline < next) {
                    next = j->deadline;
                }
            }
            if (j->fd >= 0 && !atomic_load(&j->client_gone) && n < cap) {
                fds[n] = (struct pollfd){.fd = j->fd, .events = POLLRDHUP};
                jobs[n++] = j;
            }
        }
        bool short_copy = n < t->n + 1;
        pthread_mutex_unlock(&t->lock);

        int timeout = next > 0 ? (int)((next - now) * 1000) + 1 : -1;
        if (short_copy && (timeout < 0 || timeout > 100))
            timeout = 100; /* the copy was short of memory: look again soon */
        int r = poll(fds, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR)
            LL_ASSERT(!"poll failed");
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
            for (struct gen_job *j = t->head; j; j = j->live_next) {
                if (j == jobs[i] && j->fd == fds[i].fd) {
                    if (!atomic_exchange(&j->client_gone, true)) {
                        log_msg(LOG_DEBUG, "request %s: client hung up", j->xrid);
                        gen_job_cancel(j, CANCEL_DISCONNECT);
                    }
                    break;
                }
            }
        }
        pthread_mutex_unlock(&t->lock);
    }
    free(fds);
    free(jobs);
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

void live_add(struct live_table *t, struct gen_job *j)
{
    pthread_mutex_lock(&t->lock);
    j->live_prev = NULL;
    j->live_next = t->head;
    if (t->head)
        t->head->live_prev = j;
    t->head = j;
    t->n++;
    j->registered = true;
    pthread_mutex_unlock(&t->lock);
    wake(t);
}

void live_remove(struct live_table *t, struct gen_job *j)
{
    pthread_mutex_lock(&t->lock);
    if (j->registered) {
        if (j->live_prev)
            j->live_prev->live_next = j->live_next;
        else
            t->head = j->live_next;
        if (j->live_next)
            j->live_next->live_prev = j->live_prev;
        t->n--;
        j->registered = false;
    }
    pthread_mutex_unlock(&t->lock);
}

int live_cancel_id(struct live_table *t, const char *id)
{
    int n = 0;
    pthread_mutex_lock(&t->lock);
    for (struct gen_job *j = t->head; j; j = j->live_next) {
        if (!strcmp(j->id, id) || !strcmp(j->xrid, id)) {
            gen_job_cancel(j, CANCEL_ROUTE);
            n++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

void live_cancel_all(struct live_table *t, enum cancel_reason why)
{
    pthread_mutex_lock(&t->lock);
    for (struct gen_job *j = t->head; j; j = j->live_next)
        gen_job_cancel(j, why);
    pthread_mutex_unlock(&t->lock);
}

int live_count(struct live_table *t)
{
    pthread_mutex_lock(&t->lock);
    int n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}
