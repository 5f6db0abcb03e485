/*
 * cmd_bench_serve.c: `llaisys-cli bench-serve`: a load client for an OpenAI-compatible server
 * (llaisys-server, llama.cpp's server, vLLM). Every request is a streaming /v1/completions
 * request whose SSE stream is read to the end. Prompts are distinct random token ids of a fixed
 * length (no prefix-cache hits between requests), generation is greedy with ignore_eos, so every
 * admitted request produces exactly --max-tokens tokens.
 *
 * Closed loop (default): N clients each send a request and the next once it ends, until the
 * requested number is done; reported per client count: generated tokens/s and requests/s over
 * the measured interval (first send to last byte), time to first token and inter-token latency
 * percentiles (a gap is measured between successive SSE chunks that carry text).
 * Open loop (--rate): requests arrive at R/s (Poisson or evenly spaced) for --duration seconds
 * whatever the answers, up to --max-inflight at once (an arrival finding them all busy is counted,
 * not sent); reported: offered and answered rates, the share answered 429 (and whether each
 * carried Retry-After), errors, admitted streams finished, TTFT and ITL of admitted streams.
 * With --server-pid, a sampler reads the server's RSS and open descriptors from /proc/PID and the
 * KV tokens in use from /metrics during the run (start, max, end; each sample with --sample-every).
 *
 * With --spawn it also starts llaisys-server itself (port 0, its "serving" line gives the URL)
 * and stops it with SIGTERM at the end. One thread per client (closed loop) or per in-flight
 * slot (open loop); each keeps one HTTP/1.1 connection (plain sockets, chunked decoding, SSE
 * parsing: no HTTP library).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "cli_args.h"
#include "commands.h"
#include "hash.h"
#include "json.h"
#include "run_common.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli bench-serve (--url URL | --spawn SERVER --model DIR) [options]\n"
            "           [-- SERVER-OPTIONS...]\n"
            "Streaming load against an OpenAI-compatible server. Closed loop (default): prints\n"
            "generated tokens/s, requests/s and p50/p99 time to first token and inter-token\n"
            "latency per client count. Open loop (--rate): requests arrive at a fixed rate\n"
            "whatever the answers; prints offered and answered rates, the share answered 429,\n"
            "errors, and the latencies of the admitted streams.\n\n"
            "  --url URL            server base, e.g. http://127.0.0.1:8000\n"
            "  --spawn SERVER       start this llaisys-server on a free port for the run (with\n"
            "                       --model DIR and the options after --), stop it after\n"
            "  --model DIR          the model the spawned server loads\n"
            "  --clients LIST       closed loop: concurrent clients, e.g. 1,8,32 (default 1)\n"
            "  --requests N         closed loop: measured requests per client count (default\n"
            "                       max(4, 2 x clients))\n"
            "  --rate R             open loop: R requests per second arrive\n"
            "  --duration S         open loop: arrivals for S seconds (default 30)\n"
            "  --arrivals KIND      open loop: poisson (default) or fixed (evenly spaced)\n"
            "  --max-inflight N     open loop: requests in flight at most, each on a connection\n"
            "                       of its own; an arrival past it is counted and not sent\n"
            "                       (default 100, under llaisys-server's 128 per address)\n"
            "  --server-pid PID     sample this server's RSS and open descriptors (/proc/PID)\n"
            "                       and its KV tokens in use (/metrics) during the run\n"
            "  --sample-every S     seconds between samples (default 1); with --server-pid each\n"
            "                       sample is also printed to stderr as it is taken (a server\n"
            "                       started by --spawn is sampled too, quietly)\n"
            "  --warmup N           requests run first, one at a time, not measured (default 1)\n"
            "  --prompt-tokens N    prompt length in tokens (default 130)\n"
            "  --max-tokens N       tokens generated per request (default 64)\n"
            "  --model-name NAME    model field of the requests (default: none sent)\n"
            "  --api-key KEY        sent as Authorization: Bearer KEY\n"
            "  --seed N             prompt and arrival generator seed (default 1)\n"
            "  --timeout SECS       per request (default 600)\n"
            "  --json               print each result as one JSON object\n");
}

struct bench_opts {
    char host[64];
    int port;
    long long requests, warmup, prompt_tokens, max_tokens, seed;
    double timeout;
    const char *model, *api_key;
    bool json;
};

/* Samples of one kind, grown as needed (guarded by the caller's lock). */
struct samples {
    double *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(struct samples *s, double p)
{
    if (!s->n)
        return NAN;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    size_t i = (size_t)ceil(p / 100.0 * (double)s->n);
    return s->v[i ? i - 1 : 0];
}

struct shared {
    const struct bench_opts *o;
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* open loop: a ticket was given, or the run is closing */
    long long next;          /* next request index to take */
    long long end;           /* closed loop: requests to run in this phase */
    long long tickets;       /* open loop: arrivals handed out, not yet taken by a worker */
    long long busy;          /* open loop: workers holding a ticket */
    bool closing;            /* open loop: no more arrivals */
    struct samples ttft, itl;
    long long tokens, done, errors;
    long long rejected, rejected_retry_after; /* answered 429; of those, with Retry-After */
    long long admitted;      /* answered 200 (the stream may still fail) */
    double t_last;
    char first_error[256];
};

struct conn {
    int fd;
    char buf[65536];
    size_t len, off;         /* buf[off..len) not yet consumed */
};

static int conn_open(struct conn *c, const struct bench_opts *o)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &a.sin_addr) != 1)
        return -1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = (time_t)o->timeout};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a)) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->len = c->off = 0;
    return 0;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Make at least one unread byte available; -1 on EOF or error. */
static int fill(struct conn *c)
{
    if (c->off < c->len)
        return 0;
    ssize_t n;
    do
        n = read(c->fd, c->buf, sizeof c->buf);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    c->off = 0;
    c->len = (size_t)n;
    return 0;
}

/* Read a CRLF-terminated line (without it) into out. */
static int read_line(struct conn *c, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        if (fill(c))
            return -1;
        char ch = c->buf[c->off++];
        if (ch == '\n') {
            if (n && out[n - 1] == '\r')
                n--;
            out[n] = 0;
            return 0;
        }
        if (n + 1 < cap)
            out[n++] = ch;
    }
}

static int read_exact(struct conn *c, char *out, size_t len)
{
    while (len) {
        if (fill(c))
            return -1;
        size_t k = c->len - c->off < len ? c->len - c->off : len;
        if (out) {
            memcpy(out, c->buf + c->off, k);
            out += k;
        }
        c->off += k;
        len -= k;
    }
    return 0;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* What one streamed request saw. */
struct result {
    double t_send, t_first, t_prev;
    struct samples itl;
    long long tokens;
    int status;              /* HTTP status of the answer, 0 if none came */
    bool retry_after;        /* the answer carried Retry-After */
    bool done;
};

/* Handle one SSE event payload (after "data: "). */
static void on_event(struct result *r, const char *data, double now)
{
    if (!strcmp(data, "[DONE]")) {
        r->done = true;
        return;
    }
    cJSON *j;
    if (ll_json_parse(&j, data, strlen(data), "event", NULL) != LL_OK)
        return;
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *text = cJSON_GetObjectItem(ch, "text");
    if (!text)
        text = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
    if (cJSON_IsString(text) && text->valuestring[0]) {
        if (r->t_first == 0)
            r->t_first = now;
        else
            samples_add(&r->itl, now - r->t_prev);
        r->t_prev = now;
    }
    const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
    if (cJSON_IsNumber(u))
        r->tokens = (long long)u->valuedouble;
    cJSON_Delete(j);
}

/* Feed body bytes to the SSE splitter (events end with a blank line). */
static void sse_feed(struct result *r, struct ll_buf *ev, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!ll_buf_putc(ev, p[i]))
            return;
        if (ev->len >= 2 && ev->data[ev->len - 1] == '\n' && ev->data[ev->len - 2] == '\n') {
            ev->data[ev->len - 2] = 0;
            double now = ll_now();
            for (char *line = ev->data, *next; line; line = next) {
                next = strchr(line, '\n');
                if (next)
                    *next++ = 0;
                if (!strncmp(line, "data: ", 6))
                    on_event(r, line + 6, now);
            }
            ll_buf_clear(ev);
        }
    }
}

/* One streaming request on c. Returns 0, or -1 with why (the connection is then closed). */
static int run_request(struct conn *c, const struct bench_opts *o, long long index,
                       struct result *r, char *why, size_t whylen)
{
    /* distinct random prompt ids (ordinary vocabulary, no special tokens) */
    size_t cap = (size_t)o->prompt_tokens * 8 + 512;
    char *body = malloc(cap), *req = malloc(cap + 512);
    if (!body || !req) {
        free(body);
        free(req);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    size_t n = (size_t)snprintf(body, cap, "{%s%s%s\"prompt\":[", o->model ? "\"model\":\"" : "",
                                o->model ? o->model : "", o->model ? "\"," : "");
    uint64_t x = ll_mix64((uint64_t)o->seed) ^ (uint64_t)index; /* the request's own stream */
    for (long long i = 0; i < o->prompt_tokens; i++)
        n += (size_t)snprintf(body + n, cap - n, "%s%d", i ? "," : "",
                              1000 + (int)(ll_splitmix64(&x) % 99000));
    n += (size_t)snprintf(body + n, cap - n,
                          "],\"max_tokens\":%lld,\"temperature\":0,\"ignore_eos\":true,"
                          "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                          o->max_tokens);
    char auth[300] = "";
    if (o->api_key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    size_t rn = (size_t)snprintf(req, cap + 512,
                                 "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                                 "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                                 "%sContent-Length: %zu\r\n\r\n",
                                 o->host, o->port, auth, n);
    memcpy(req + rn, body, n);
    free(body);
    memset(r, 0, sizeof *r);
    /* A kept-alive connection the server has closed meanwhile (its idle limit) fails before
     * any answer: then the request goes once more on a new connection. */
    char line[1024];
    for (int attempt = 0;; attempt++) {
        bool reused = c->fd >= 0;
        if (!reused && conn_open(c, o)) {
            free(req);
            snprintf(why, whylen, "cannot connect: %s", strerror(errno));
            return -1;
        }
        r->t_send = ll_now();
        if (!send_all(c->fd, req, rn + n) && !read_line(c, line, sizeof line))
            break;
        conn_close(c);
        if (!reused || attempt) {
            free(req);
            snprintf(why, whylen, "connection failed");
            return -1;
        }
    }
    free(req);
    int status = 0;
    sscanf(line, "HTTP/%*s %d", &status);
    bool chunked = false, keep = true;
    long long clen = -1;
    while (!read_line(c, line, sizeof line) && line[0]) {
        if (!strncasecmp(line, "Transfer-Encoding:", 18) && strstr(line, "chunked"))
            chunked = true;
        else if (!strncasecmp(line, "Content-Length:", 15))
            clen = atoll(line + 15);
        else if (!strncasecmp(line, "Connection:", 11) && strstr(line, "close"))
            keep = false;
        else if (!strncasecmp(line, "Retry-After:", 12) && atoi(line + 12) > 0)
            r->retry_after = true;
    }
    r->status = status;
    struct ll_buf ev = {0};
    char chunk[16384];
    int rc = 0;
    if (chunked) {
        for (;;) {
            if (read_line(c, line, sizeof line)) {
                rc = -1;
                break;
            }
            long long size = strtoll(line, NULL, 16);
            if (size <= 0) {
                read_line(c, line, sizeof line); /* the trailer's blank line */
                break;
            }
            while (size > 0) {
                size_t k = size > (long long)sizeof chunk ? sizeof chunk : (size_t)size;
                if (read_exact(c, chunk, k)) {
                    rc = -1;
                    break;
                }
                if (status == 200)
                    sse_feed(r, &ev, chunk, k);
                size -= (long long)k;
            }
            if (rc || read_line(c, line, sizeof line)) {
                rc = -1;
                break;
            }
        }
    } else if (clen >= 0) {
        while (clen > 0 && !rc) {
            size_t k = clen > (long long)sizeof chunk - 1 ? sizeof chunk - 1 : (size_t)clen;
            rc = read_exact(c, chunk, k);
            chunk[k] = 0;
            if (status != 200 && !rc)
                snprintf(why, whylen, "HTTP %d: %.200s", status, chunk);
            clen -= (long long)k;
        }
    } else {
        keep = false;
    }
    ll_buf_free(&ev);
    if (rc || !keep)
        conn_close(c);
    if (status != 200) {
        if (!why[0] || status == 0)
            snprintf(why, whylen, "HTTP status %d", status);
        return -1;
    }
    if (rc || !r->done) {
        snprintf(why, whylen, "stream ended early");
        return -1;
    }
    return 0;
}

/* Count one request's outcome (under sh->lock). */
static void record(struct shared *sh, const struct result *r, int rc, const char *why)
{
    if (r->status == 200)
        sh->admitted++;
    if (r->status == 429) {
        sh->rejected++;
        sh->rejected_retry_after += r->retry_after;
    } else if (rc) {
        sh->errors++;
        if (!sh->first_error[0])
            snprintf(sh->first_error, sizeof sh->first_error, "%s", why);
    } else {
        sh->done++;
        sh->tokens += r->tokens;
        if (r->t_first > 0)
            samples_add(&sh->ttft, r->t_first - r->t_send);
        for (size_t k = 0; k < r->itl.n; k++)
            samples_add(&sh->itl, r->itl.v[k]);
    }
    double now = ll_now();
    if (now > sh->t_last)
        sh->t_last = now;
}

/* Run request i on c and count it. */
static void run_one(struct shared *sh, struct conn *c, long long i)
{
    struct result r = {0};
    char why[256] = "";
    int rc = run_request(c, sh->o, i, &r, why, sizeof why);
    pthread_mutex_lock(&sh->lock);
    record(sh, &r, rc, why);
    pthread_mutex_unlock(&sh->lock);
    free(r.itl.v);
}

/* Closed loop: take the next index until the phase's end. */
static void *client_main(void *arg)
{
    struct shared *sh = arg;
    struct conn c = {.fd = -1};
    for (;;) {
        pthread_mutex_lock(&sh->lock);
        long long i = sh->next < sh->end ? sh->next++ : -1;
        pthread_mutex_unlock(&sh->lock);
        if (i < 0)
            break;
        run_one(sh, &c, i);
    }
    conn_close(&c);
    return NULL;
}

/* Open loop: wait for a ticket (an arrival), run it, until closing and none is left. */
static void *open_worker(void *arg)
{
    struct shared *sh = arg;
    struct conn c = {.fd = -1};
    pthread_mutex_lock(&sh->lock);
    for (;;) {
        while (!sh->tickets && !sh->closing)
            pthread_cond_wait(&sh->wake, &sh->lock);
        if (!sh->tickets)
            break;
        sh->tickets--;
        long long i = sh->next++;
        pthread_mutex_unlock(&sh->lock);
        run_one(sh, &c, i);
        pthread_mutex_lock(&sh->lock);
        sh->busy--;
    }
    pthread_mutex_unlock(&sh->lock);
    conn_close(&c);
    return NULL;
}

static int parse_url(const char *url, struct bench_opts *o)
{
    const char *p = url;
    if (!strncmp(p, "http://", 7))
        p += 7;
    const char *colon = strchr(p, ':');
    const char *slash = strchr(p, '/');
    size_t hlen = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hlen == 0 || hlen >= sizeof o->host)
        return -1;
    memcpy(o->host, p, hlen);
    o->host[hlen] = 0;
    if (!strcmp(o->host, "localhost"))
        strcpy(o->host, "127.0.0.1");
    o->port = colon ? atoi(colon + 1) : 80;
    return o->port > 0 && o->port < 65536 ? 0 : -1;
}

/* Up to n threads of fn(sh), their handles packed in *t (malloc'd, NULL on no memory): how many
 * started. */
static long long start_threads(long long n, void *(*fn)(void *), struct shared *sh,
                               pthread_t **t)
{
    long long started = 0;
    *t = calloc((size_t)n, sizeof **t);
    for (long long i = 0; *t && i < n; i++)
        if (!pthread_create(&(*t)[started], NULL, fn, sh))
            started++;
    return started;
}

/* Run requests [from, to) with n clients. */
static void run_phase(struct shared *sh, long long from, long long to, long long clients)
{
    sh->next = from;
    sh->end = to;
    pthread_t *t;
    long long started = start_threads(clients, client_main, sh, &t);
    if (!started) /* no thread: run it here */
        client_main(sh);
    for (long long i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    free(t);
}

/* Open loop: arrivals at rate/s for duration seconds (Poisson or evenly spaced), each handed to
 * an idle worker of max_inflight, or counted in *not_sent when all are busy; then waits for the
 * in-flight requests. Returns the number of arrivals. */
static long long run_open(struct shared *sh, double rate, double duration, bool poisson,
                          long long max_inflight, long long *not_sent)
{
    sh->tickets = sh->busy = 0;
    sh->closing = false;
    pthread_t *t;
    long long started = start_threads(max_inflight, open_worker, sh, &t);
    uint64_t x = ll_mix64((uint64_t)sh->o->seed ^ 0x6f70656e6c6f6f70ull); /* arrivals' stream */
    long long arrivals = 0;
    *not_sent = 0;
    double t0 = ll_now();
    for (double at = 0; started && at < duration;) {
        double wait = t0 + at - ll_now();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
            while (nanosleep(&ts, &ts) && errno == EINTR) {
            }
        }
        pthread_mutex_lock(&sh->lock);
        arrivals++;
        if (sh->busy < started) {
            sh->busy++;
            sh->tickets++;
            pthread_cond_signal(&sh->wake);
        } else {
            (*not_sent)++;
        }
        pthread_mutex_unlock(&sh->lock);
        double u = (double)(ll_splitmix64(&x) >> 11) * 0x1p-53; /* [0, 1) */
        at = poisson ? at - log1p(-u) / rate : (double)arrivals / rate;
    }
    pthread_mutex_lock(&sh->lock);
    sh->closing = true;
    pthread_cond_broadcast(&sh->wake);
    pthread_mutex_unlock(&sh->lock);
    for (long long i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    free(t);
    return started ? arrivals : -1;
}

/* One reading of the server process; -1 where it could not be read. */
struct probe {
    long long rss_kb, fds, kv_tokens;
};

struct watch {
    const struct bench_opts *o;
    int pid;
    bool print;              /* print each sample to stderr */
    double every, t0;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    long long n;
    struct probe first, max, last;
};

static long long read_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atoll(line + 6);
    if (f)
        fclose(f);
    return kb;
}

static long long count_fds(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* llaisys_kv_cache_usage_tokens from GET /metrics, on a connection of its own. */
static long long read_kv_tokens(const struct bench_opts *o)
{
    struct conn *c = malloc(sizeof *c);
    if (!c || conn_open(c, o)) {
        free(c);
        return -1;
    }
    char req[512], auth[300] = "";
    if (o->api_key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    int n = snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: %s:%d\r\n%s"
                     "Connection: close\r\n\r\n", o->host, o->port, auth);
    struct ll_buf body = {0};
    if (!send_all(c->fd, req, (size_t)n))
        while (!fill(c)) {
            ll_buf_append(&body, c->buf + c->off, c->len - c->off);
            c->off = c->len;
        }
    conn_close(c);
    free(c);
    long long v = -1;
    const char *name = "\nllaisys_kv_cache_usage_tokens"; /* then labels or a space */
    for (const char *at = body.data && !body.failed ? body.data : NULL; at;) {
        at = strstr(at, name);
        if (!at)
            break;
        at += strlen(name);
        if (*at == '{')
            at = strchr(at, '}');
        if (at && *at != '_') { /* not ..._peak */
            v = atoll(at + 1);
            break;
        }
    }
    ll_buf_free(&body);
    return v;
}

static void watch_take(struct watch *s)
{
    struct probe p = {read_rss_kb(s->pid), count_fds(s->pid), read_kv_tokens(s->o)};
    if (!s->n++)
        s->first = s->max = p;
    s->last = p;
    if (p.rss_kb > s->max.rss_kb)
        s->max.rss_kb = p.rss_kb;
    if (p.fds > s->max.fds)
        s->max.fds = p.fds;
    if (p.kv_tokens > s->max.kv_tokens)
        s->max.kv_tokens = p.kv_tokens;
    if (s->print)
        fprintf(stderr, "bench-serve: sample t=%.0fs rss_kb=%lld fds=%lld kv_tokens=%lld\n",
                ll_now() - s->t0, p.rss_kb, p.fds, p.kv_tokens);
}

static void *watch_main(void *arg)
{
    struct watch *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + s->every;
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - floor(at)) * 1e9);
        while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &ts) == 0) {
        }
        if (s->stop)
            break;
        watch_take(s);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Take the start sample, then one every s->every seconds on a thread. 0 or -1 (no thread). */
static int watch_start(struct watch *s)
{
    s->t0 = ll_now();
    watch_take(s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (pthread_create(&s->thread, NULL, watch_main, s)) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        return -1;
    }
    return 0;
}

/* Stop sampling and take the end sample, once the server holds no KV token (its last step
 * publishes the answers a moment before its statistics) or 5 s have passed. */
static void watch_stop(struct watch *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    for (int i = 0; i < 50 && read_kv_tokens(s->o) > 0; i++)
        usleep(100000);
    watch_take(s);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
}

static void watch_print(const struct watch *s, bool json)
{
    if (json) {
        printf("{\"server_pid\":%d,\"samples\":%lld,"
               "\"rss_kb\":{\"start\":%lld,\"max\":%lld,\"end\":%lld},"
               "\"fds\":{\"start\":%lld,\"max\":%lld,\"end\":%lld},"
               "\"kv_tokens\":{\"start\":%lld,\"max\":%lld,\"end\":%lld}}\n",
               s->pid, s->n, s->first.rss_kb, s->max.rss_kb, s->last.rss_kb, s->first.fds,
               s->max.fds, s->last.fds, s->first.kv_tokens, s->max.kv_tokens,
               s->last.kv_tokens);
        return;
    }
    printf("\nserver %d, %lld samples (start / max / end): RSS %.1f / %.1f / %.1f MiB, open fds "
           "%lld / %lld / %lld, KV tokens %lld / %lld / %lld\n",
           s->pid, s->n, s->first.rss_kb / 1024.0, s->max.rss_kb / 1024.0,
           s->last.rss_kb / 1024.0, s->first.fds, s->max.fds, s->last.fds, s->first.kv_tokens,
           s->max.kv_tokens, s->last.kv_tokens);
}

static void shared_reset(struct shared *sh)
{
    free(sh->ttft.v);
    free(sh->itl.v);
    memset(&sh->ttft, 0, sizeof sh->ttft);
    memset(&sh->itl, 0, sizeof sh->itl);
    sh->tokens = sh->done = sh->errors = 0;
    sh->rejected = sh->rejected_retry_after = sh->admitted = 0;
    sh->first_error[0] = 0;
}

/* Start `server --model dir --port 0 extra...` with stdout on a pipe; wait for its
 * "serving ... at URL" line. Returns the pid (url filled) or -1. */
static pid_t spawn_server(const char *server, const char *dir, char **extra, int n_extra,
                          char *url, size_t urlcap)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    char **argv = calloc((size_t)n_extra + 8, sizeof *argv);
    if (!argv)
        return -1;
    int n = 0;
    argv[n++] = (char *)server;
    argv[n++] = "--model";
    argv[n++] = (char *)dir;
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    for (int i = 0; i < n_extra; i++)
        argv[n++] = extra[i];
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(server, argv);
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    url[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, " at http://");
        if (!strncmp(line, "llaisys-server: serving", 23) && at) {
            snprintf(url, urlcap, "%s", at + 4);
            url[strcspn(url, "\r\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f); /* the server's later stdout lines go nowhere; it writes none */
    if (!url[0]) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* Open loop's report; returns the exit code (1: errors, an admitted stream that did not finish,
 * or a 429 without Retry-After). */
static int report_open(struct shared *sh, const char *url, double rate, double duration,
                       const char *arrivals_kind, long long max_inflight, long long arrivals,
                       long long not_sent, double t0)
{
    const struct bench_opts *o = sh->o;
    double wall = sh->t_last - t0;
    long long answered = sh->admitted + sh->rejected + (sh->errors - (sh->admitted - sh->done));
    long long sent = arrivals - not_sent;
    double share = sent ? (double)sh->rejected / (double)sent : 0;
    double t50 = percentile(&sh->ttft, 50), t99 = percentile(&sh->ttft, 99);
    double i50 = percentile(&sh->itl, 50), i99 = percentile(&sh->itl, 99);
    double tps = wall > 0 ? (double)sh->tokens / wall : 0;
    if (o->json) {
        printf("{\"mode\":\"open\",\"rate\":%.3f,\"arrivals\":\"%s\",\"duration_s\":%.3f,"
               "\"max_inflight\":%lld,\"prompt_tokens\":%lld,\"max_tokens\":%lld,"
               "\"offered\":%lld,\"offered_per_s\":%.3f,\"not_sent\":%lld,\"sent\":%lld,"
               "\"answered\":%lld,\"answered_per_s\":%.3f,\"admitted\":%lld,\"finished\":%lld,"
               "\"finished_per_s\":%.3f,\"rejected_429\":%lld,\"rejected_429_share\":%.4f,"
               "\"rejected_429_with_retry_after\":%lld,\"errors\":%lld,\"wall_s\":%.3f,"
               "\"generated_tokens\":%lld,\"tokens_per_s\":%.3f,\"ttft_p50_s\":%.4f,"
               "\"ttft_p99_s\":%.4f,\"itl_p50_s\":%.4f,\"itl_p99_s\":%.4f}\n",
               rate, arrivals_kind, duration, max_inflight, o->prompt_tokens, o->max_tokens,
               arrivals, (double)arrivals / duration, not_sent, sent, answered,
               wall > 0 ? (double)answered / wall : 0, sh->admitted, sh->done,
               wall > 0 ? (double)sh->done / wall : 0, sh->rejected, share,
               sh->rejected_retry_after, sh->errors, wall, sh->tokens, tps, t50, t99, i50, i99);
    } else {
        printf("%s: %lld-token prompts, %lld new tokens, open loop: %s arrivals at %.2f/s for "
               "%.0f s, at most %lld in flight\n\n"
               "offered     %lld requests (%.2f/s); not sent (all %lld in flight): %lld\n"
               "answered    %lld (%.2f/s over %.1f s): 200 %lld, 429 %lld (%.1f%% of sent; "
               "%lld with Retry-After), errors %lld\n"
               "admitted    %lld streams, %lld finished (%.2f/s), %.2f tokens/s\n"
               "TTFT        p50 %.3f s, p99 %.3f s\n"
               "ITL         p50 %.1f ms, p99 %.1f ms\n",
               url, o->prompt_tokens, o->max_tokens, arrivals_kind, rate, duration,
               max_inflight, arrivals, (double)arrivals / duration, max_inflight, not_sent,
               answered, wall > 0 ? (double)answered / wall : 0, wall, sh->admitted,
               sh->rejected, share * 100, sh->rejected_retry_after, sh->errors, sh->admitted,
               sh->done, wall > 0 ? (double)sh->done / wall : 0, tps, t50, t99, i50 * 1e3,
               i99 * 1e3);
    }
    fflush(stdout);
    int rc = 0;
    if (sh->errors) {
        fprintf(stderr, "llaisys-cli bench-serve: %lld request(s) failed; first: %s\n",
                sh->errors, sh->first_error);
        rc = 1;
    }
    if (sh->rejected_retry_after < sh->rejected) {
        fprintf(stderr, "llaisys-cli bench-serve: %lld 429 answer(s) without Retry-After\n",
                sh->rejected - sh->rejected_retry_after);
        rc = 1;
    }
    return rc;
}

int cmd_bench_serve(int argc, char **argv)
{
    struct bench_opts o = {.warmup = 1, .prompt_tokens = 130, .max_tokens = 64, .seed = 1,
                           .timeout = 600};
    const char *url = NULL, *spawn = NULL, *dir = NULL, *clients_arg = "1";
    const char *arrivals_kind = "poisson";
    double rate = 0, duration = 30, every = 1;
    long long max_inflight = 100, server_pid = 0;
    bool open_loop = false, pid_given = false;
    const struct cli_arg args[] = {
        CLI_STR("--url", &url),
        CLI_STR("--spawn", &spawn),
        CLI_STR("--model", &dir),
        CLI_STR("--clients", &clients_arg),
        CLI_INT("--requests", &o.requests, 1, 1 << 24),
        {.flag = "--rate", .kind = CLI_ARG_NUM, .out = &rate, .min = 0, .max = 1e6,
         .min_open = true, .given = &open_loop},
        {.flag = "--duration", .kind = CLI_ARG_NUM, .out = &duration, .min = 0, .max = 1e6,
         .min_open = true},
        CLI_STR("--arrivals", &arrivals_kind),
        CLI_INT("--max-inflight", &max_inflight, 1, 4096),
        {.flag = "--server-pid", .kind = CLI_ARG_INT, .out = &server_pid, .imin = 1,
         .imax = INT32_MAX, .given = &pid_given},
        {.flag = "--sample-every", .kind = CLI_ARG_NUM, .out = &every, .min = 0, .max = 3600,
         .min_open = true},
        CLI_INT("--warmup", &o.warmup, 0, 1 << 20),
        CLI_INT("--prompt-tokens", &o.prompt_tokens, 1, 1 << 20),
        CLI_INT("--max-tokens", &o.max_tokens, 1, 1 << 20),
        CLI_STR("--model-name", &o.model),
        CLI_STR("--api-key", &o.api_key),
        CLI_INT("--seed", &o.seed, 0, INT64_MAX),
        {.flag = "--timeout", .kind = CLI_ARG_NUM, .out = &o.timeout, .min = 0, .max = 1e6,
         .min_open = true},
        CLI_SET("--json", &o.json),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "bench-serve", .usage = usage, .args = args};
    /* the server's own options follow "--" */
    int own = 1;
    while (own < argc && strcmp(argv[own], "--"))
        own++;
    char **extra = argv + (own < argc ? own + 1 : argc);
    int n_extra = own < argc ? argc - own - 1 : 0;
    int pr = cli_args_parse(&cmd, own, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    bool poisson = !strcmp(arrivals_kind, "poisson");
    if (!poisson && strcmp(arrivals_kind, "fixed"))
        return cli_args_fail(&cmd, "--arrivals must be poisson or fixed");
    if (!!url == !!spawn || (spawn && !dir))
        return cli_args_fail(&cmd, "give --url URL, or --spawn SERVER with --model DIR");
    int32_t *clients = NULL;
    int n_clients = 0;
    if (run_parse_ids(cmd.name, "--clients", clients_arg, &clients, &n_clients))
        return 2;
    for (int i = 0; i < n_clients; i++) {
        if (clients[i] < 1 || clients[i] > 4096) {
            free(clients);
            return cli_args_fail(&cmd, "--clients: each count must be in 1..4096");
        }
    }
    char spawned_url[300];
    pid_t pid = -1;
    if (spawn) {
        pid = spawn_server(spawn, dir, extra, n_extra, spawned_url, sizeof spawned_url);
        if (pid < 0) {
            fprintf(stderr, "llaisys-cli %s: %s did not start serving %s\n", cmd.name, spawn,
                    dir);
            free(clients);
            return 1;
        }
        url = spawned_url;
        if (!server_pid)
            server_pid = pid;
    }
    if (parse_url(url, &o)) {
        fprintf(stderr, "llaisys-cli %s: --url must be http://ADDR:PORT (IPv4 address or "
                        "localhost), not '%s'\n", cmd.name, url);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        free(clients);
        return 2;
    }

    struct shared sh = {.o = &o};
    pthread_mutex_init(&sh.lock, NULL);
    pthread_cond_init(&sh.wake, NULL);
    int rc = 0;
    if (o.warmup) {
        run_phase(&sh, 1LL << 40, (1LL << 40) + o.warmup, 1);
        if (sh.errors || sh.rejected) {
            fprintf(stderr, "llaisys-cli %s: warm-up failed: %s\n", cmd.name,
                    sh.first_error[0] ? sh.first_error : "HTTP 429");
            rc = 1;
        }
    }
    struct watch smp = {.o = &o, .pid = (int)server_pid, .every = every,
                        .print = pid_given};
    bool sampling = !rc && server_pid && !watch_start(&smp);
    if (!rc && open_loop) {
        shared_reset(&sh);
        sh.next = 1LL << 36; /* distinct prompts from the warm-up's */
        double t0 = ll_now();
        sh.t_last = t0;
        long long not_sent = 0;
        long long arrivals = run_open(&sh, rate, duration, poisson, max_inflight, &not_sent);
        if (arrivals < 0) {
            fprintf(stderr, "llaisys-cli %s: cannot start the client threads\n", cmd.name);
            rc = 1;
        } else {
            rc = report_open(&sh, url, rate, duration, arrivals_kind, max_inflight, arrivals,
                             not_sent, t0);
        }
    }
    if (!rc && !open_loop && !o.json)
        printf("%s: %lld-token prompts, %lld new tokens, closed loop\n\n"
               "| clients | requests | errors | tokens/s | requests/s | TTFT p50 s | TTFT p99 s |"
               " ITL p50 ms | ITL p99 ms |\n"
               "|---------|----------|--------|----------|------------|------------|------------|"
               "------------|------------|\n",
               url, o.prompt_tokens, o.max_tokens);
    for (int k = 0; !rc && !open_loop && k < n_clients; k++) {
        long long nc = clients[k];
        long long nreq = o.requests > 0 ? o.requests : (nc * 2 > 4 ? nc * 2 : 4);
        shared_reset(&sh);
        double t0 = ll_now();
        sh.t_last = t0;
        long long base = (long long)k << 32; /* distinct prompts in every phase */
        run_phase(&sh, base, base + nreq, nc);
        double wall = sh.t_last - t0;
        double tps = wall > 0 ? (double)sh.tokens / wall : 0;
        double rps = wall > 0 ? (double)sh.done / wall : 0;
        double t50 = percentile(&sh.ttft, 50), t99 = percentile(&sh.ttft, 99);
        double i50 = percentile(&sh.itl, 50), i99 = percentile(&sh.itl, 99);
        if (o.json)
            printf("{\"mode\":\"closed\",\"clients\":%lld,\"requests\":%lld,\"errors\":%lld,"
                   "\"rejected_429\":%lld,\"prompt_tokens\":%lld,\"max_tokens\":%lld,"
                   "\"wall_s\":%.3f,\"generated_tokens\":%lld,\"tokens_per_s\":%.3f,"
                   "\"requests_per_s\":%.4f,\"ttft_p50_s\":%.4f,\"ttft_p99_s\":%.4f,"
                   "\"itl_p50_s\":%.4f,\"itl_p99_s\":%.4f}\n",
                   nc, sh.done, sh.errors, sh.rejected, o.prompt_tokens, o.max_tokens, wall,
                   sh.tokens, tps, rps, t50, t99, i50, i99);
        else
            printf("| %7lld | %8lld | %6lld | %8.2f | %10.3f | %10.3f | %10.3f | %10.1f |"
                   " %10.1f |\n", nc, sh.done, sh.errors + sh.rejected, tps, rps, t50, t99,
                   i50 * 1e3, i99 * 1e3);
        fflush(stdout);
        if (sh.errors || sh.rejected) {
            fprintf(stderr, "llaisys-cli %s: %lld request(s) failed; first: %s\n", cmd.name,
                    sh.errors + sh.rejected,
                    sh.first_error[0] ? sh.first_error : "HTTP 429");
            rc = 1;
        }
    }
    if (sampling) {
        watch_stop(&smp);
        watch_print(&smp, o.json);
    }
    if (pid > 0) { /* an orderly stop, as an operator would */
        kill(pid, SIGTERM);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "llaisys-cli %s: the server did not exit cleanly\n", cmd.name);
            rc = 1;
        }
    }
    pthread_mutex_destroy(&sh.lock);
    pthread_cond_destroy(&sh.wake);
    shared_reset(&sh);
    free(clients);
    return rc;
}
