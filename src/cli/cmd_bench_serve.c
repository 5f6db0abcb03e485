/*
 * cmd_bench_serve.c: `llaisys-cli bench-serve`: a closed-loop load client for an
 * OpenAI-compatible server (llaisys-server, llama.cpp's server, vLLM): N clients each send a
 * streaming /v1/completions request, read its SSE stream to the end, and send the next, until the
 * requested number of requests is done. Prompts are distinct random token ids of a fixed length
 * (no prefix-cache hits between requests), generation is greedy with ignore_eos, so every request
 * produces exactly --max-tokens tokens.
 *
 * With --spawn it also starts llaisys-server itself (port 0, its "serving" line gives the URL)
 * and stops it with SIGTERM at the end. Reported per client count: generated tokens/s over the
 * measured interval (first send to last byte), time to first token and inter-token latency percentiles (a gap is measured between successive
 * SSE chunks that carry text, as a client sees them). One thread per client; each keeps one
 * HTTP/1.1 connection (plain sockets, chunked decoding, SSE parsing: no HTTP library).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
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
            "Closed-loop streaming load against an OpenAI-compatible server; prints generated\n"
            "tokens/s and p50/p99 time to first token and inter-token latency per client count.\n\n"
            "  --url URL            server base, e.g. http://127.0.0.1:8000\n"
            "  --spawn SERVER       start this llaisys-server on a free port for the run (with\n"
            "                       --model DIR and the options after --), stop it after\n"
            "  --model DIR          the model the spawned server loads\n"
            "  --clients LIST       concurrent clients, e.g. 1,8,32 (default 1)\n"
            "  --requests N         measured requests per client count (default\n"
            "                       max(4, 2 x clients))\n"
            "  --warmup N           requests run first, one at a time, not measured (default 1)\n"
            "  --prompt-tokens N    prompt length in tokens (default 130)\n"
            "  --max-tokens N       tokens generated per request (default 64)\n"
            "  --model-name NAME    model field of the requests (default: none sent)\n"
            "  --api-key KEY        sent as Authorization: Bearer KEY\n"
            "  --seed N             prompt generator seed (default 1)\n"
            "  --timeout SECS       per request (default 600)\n"
            "  --json               print the result as one JSON object\n");
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
    long long next;          /* next request index to take */
    long long end;           /* requests to run in this phase */
    struct samples ttft, itl;
    long long tokens, done, errors;
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
    if (c->fd < 0 && conn_open(c, o)) {
        free(req);
        snprintf(why, whylen, "cannot connect: %s", strerror(errno));
        return -1;
    }
    r->t_send = ll_now();
    int rc = send_all(c->fd, req, rn + n);
    free(req);
    char line[1024];
    if (rc || read_line(c, line, sizeof line)) {
        snprintf(why, whylen, "connection failed");
        conn_close(c);
        return -1;
    }
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
    }
    struct ll_buf ev = {0};
    char chunk[16384];
    rc = 0;
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
        struct result r = {0};
        char why[256] = "";
        int rc = run_request(&c, sh->o, i, &r, why, sizeof why);
        double now = ll_now();
        pthread_mutex_lock(&sh->lock);
        if (rc) {
            sh->errors++;
            if (!sh->first_error[0])
                snprintf(sh->first_error, sizeof sh->first_error, "%s", why);
        } else {
            sh->done++;
            sh->tokens += r.tokens;
            if (r.t_first > 0)
                samples_add(&sh->ttft, r.t_first - r.t_send);
            for (size_t k = 0; k < r.itl.n; k++)
                samples_add(&sh->itl, r.itl.v[k]);
        }
        if (now > sh->t_last)
            sh->t_last = now;
        pthread_mutex_unlock(&sh->lock);
        free(r.itl.v);
    }
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

/* Run requests [from, to) with n clients. */
static void run_phase(struct shared *sh, long long from, long long to, long long clients)
{
    sh->next = from;
    sh->end = to;
    pthread_t *t = calloc((size_t)clients, sizeof *t);
    long long started = 0;
    for (long long i = 0; t && i < clients; i++)
        if (!pthread_create(&t[i], NULL, client_main, sh))
            started++;
    if (!started) /* no thread: run it here */
        client_main(sh);
    for (long long i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    free(t);
}

static void shared_reset(struct shared *sh)
{
    free(sh->ttft.v);
    free(sh->itl.v);
    memset(&sh->ttft, 0, sizeof sh->ttft);
    memset(&sh->itl, 0, sizeof sh->itl);
    sh->tokens = sh->done = sh->errors = 0;
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

int cmd_bench_serve(int argc, char **argv)
{
    const char *cmd = "bench-serve";
    struct bench_opts o = {.requests = -1, .warmup = 1, .prompt_tokens = 130, .max_tokens = 64,
                           .seed = 1, .timeout = 600};
    const char *url = NULL, *spawn = NULL, *dir = NULL, *clients_arg = "1";
    char **extra = NULL;
    int n_extra = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        long long *target = NULL;
        long long lo = 0, hi = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--")) {
            extra = argv + i + 1;
            n_extra = argc - i - 1;
            break;
        } else if (!strcmp(a, "--url") && v) {
            url = argv[++i];
            continue;
        } else if (!strcmp(a, "--spawn") && v) {
            spawn = argv[++i];
            continue;
        } else if (!strcmp(a, "--model") && v) {
            dir = argv[++i];
            continue;
        } else if (!strcmp(a, "--clients") && v) {
            clients_arg = argv[++i];
            continue;
        } else if (!strcmp(a, "--model-name") && v) {
            o.model = argv[++i];
            continue;
        } else if (!strcmp(a, "--api-key") && v) {
            o.api_key = argv[++i];
            continue;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        } else if (!strcmp(a, "--timeout") && v) {
            if (run_parse_float(cmd, a, argv[++i], &o.timeout) || o.timeout <= 0)
                return 2;
            continue;
        } else if (!strcmp(a, "--requests") && v) {
            target = &o.requests, lo = 1, hi = 1 << 24;
        } else if (!strcmp(a, "--warmup") && v) {
            target = &o.warmup, lo = 0, hi = 1 << 20;
        } else if (!strcmp(a, "--prompt-tokens") && v) {
            target = &o.prompt_tokens, lo = 1, hi = 1 << 20;
        } else if (!strcmp(a, "--max-tokens") && v) {
            target = &o.max_tokens, lo = 1, hi = 1 << 20;
        } else if (!strcmp(a, "--seed") && v) {
            target = &o.seed, lo = 0, hi = INT64_MAX;
        } else {
            fprintf(stderr, "llaisys-cli %s: unknown or incomplete option '%s'\n", cmd, a);
            usage(stderr);
            return 2;
        }
        if (run_parse_int(cmd, a, argv[++i], lo, hi, target))
            return 2;
    }
    int32_t *clients = NULL;
    int n_clients = 0;
    if (run_parse_ids(cmd, "--clients", clients_arg, &clients, &n_clients))
        return 2;
    for (int i = 0; i < n_clients; i++) {
        if (clients[i] < 1 || clients[i] > 4096) {
            fprintf(stderr, "llaisys-cli %s: --clients: %d is not in 1..4096\n", cmd, clients[i]);
            free(clients);
            return 2;
        }
    }
    if (!!url == !!spawn || (spawn && !dir)) {
        fprintf(stderr, "llaisys-cli %s: give --url URL, or --spawn SERVER with --model DIR\n",
                cmd);
        free(clients);
        return 2;
    }
    char spawned_url[300];
    pid_t pid = -1;
    if (spawn) {
        pid = spawn_server(spawn, dir, extra, n_extra, spawned_url, sizeof spawned_url);
        if (pid < 0) {
            fprintf(stderr, "llaisys-cli %s: %s did not start serving %s\n", cmd, spawn, dir);
            free(clients);
            return 1;
        }
        url = spawned_url;
    }
    if (parse_url(url, &o)) {
        fprintf(stderr, "llaisys-cli %s: --url must be http://ADDR:PORT (IPv4 address or "
                        "localhost), not '%s'\n", cmd, url);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        free(clients);
        return 2;
    }

    struct shared sh = {.o = &o};
    pthread_mutex_init(&sh.lock, NULL);
    int rc = 0;
    if (o.warmup) {
        run_phase(&sh, 1LL << 40, (1LL << 40) + o.warmup, 1);
        if (sh.errors) {
            fprintf(stderr, "llaisys-cli %s: warm-up failed: %s\n", cmd, sh.first_error);
            rc = 1;
        }
    }
    if (!rc && !o.json)
        printf("%s: %lld-token prompts, %lld new tokens, closed loop\n\n"
               "| clients | requests | errors | tokens/s | TTFT p50 s | TTFT p99 s | ITL p50 ms |"
               " ITL p99 ms |\n"
               "|---------|----------|--------|----------|------------|------------|------------|"
               "------------|\n",
               url, o.prompt_tokens, o.max_tokens);
    for (int k = 0; !rc && k < n_clients; k++) {
        long long nc = clients[k];
        long long nreq = o.requests > 0 ? o.requests : (nc * 2 > 4 ? nc * 2 : 4);
        shared_reset(&sh);
        double t0 = ll_now();
        sh.t_last = t0;
        long long base = (long long)k << 32; /* distinct prompts in every phase */
        run_phase(&sh, base, base + nreq, nc);
        double wall = sh.t_last - t0;
        double tps = wall > 0 ? (double)sh.tokens / wall : 0;
        double t50 = percentile(&sh.ttft, 50), t99 = percentile(&sh.ttft, 99);
        double i50 = percentile(&sh.itl, 50), i99 = percentile(&sh.itl, 99);
        if (o.json)
            printf("{\"clients\":%lld,\"requests\":%lld,\"errors\":%lld,\"prompt_tokens\":%lld,"
                   "\"max_tokens\":%lld,\"wall_s\":%.3f,\"generated_tokens\":%lld,"
                   "\"tokens_per_s\":%.3f,\"ttft_p50_s\":%.4f,\"ttft_p99_s\":%.4f,"
                   "\"itl_p50_s\":%.4f,\"itl_p99_s\":%.4f}\n",
                   nc, sh.done, sh.errors, o.prompt_tokens, o.max_tokens, wall, sh.tokens, tps,
                   t50, t99, i50, i99);
        else
            printf("| %7lld | %8lld | %6lld | %8.2f | %10.3f | %10.3f | %10.1f | %10.1f |\n", nc,
                   sh.done, sh.errors, tps, t50, t99, i50 * 1e3, i99 * 1e3);
        fflush(stdout);
        if (sh.errors) {
            fprintf(stderr, "llaisys-cli %s: %lld request(s) failed; first: %s\n", cmd,
                    sh.errors, sh.first_error);
            rc = 1;
        }
    }
    if (pid > 0) { /* an orderly stop, as an operator would */
        kill(pid, SIGTERM);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "llaisys-cli %s: the server did not exit cleanly\n", cmd);
            rc = 1;
        }
    }
    pthread_mutex_destroy(&sh.lock);
    shared_reset(&sh);
    free(clients);
    return rc;
}
