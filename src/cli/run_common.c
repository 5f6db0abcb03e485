/* run_common.c: see run_common.h. */
#include "run_common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int run_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max,
                  long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "llaisys-cli %s: %s needs an integer in [%lld, %lld], got '%s'\n", cmd,
                flag, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

int run_parse_float(const char *cmd, const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "llaisys-cli %s: %s needs a number, got '%s'\n", cmd, flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int run_parse_ids(const char *cmd, const char *flag, const char *s, int32_t **ids, int *n)
{
    size_t cap = 16;
    int cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) {
        fprintf(stderr, "llaisys-cli %s: out of memory\n", cmd);
        return -1;
    }
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX ||
            (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            int len = 0;
            while (p[len] && p[len] != ' ' && p[len] != ',' && len < 32)
                len++;
            fprintf(stderr, "llaisys-cli %s: %s: '%.*s' (item %d) is not a non-negative "
                    "integer\n", cmd, flag, len, p, cnt + 1);
            free(v);
            return -1;
        }
        if ((size_t)cnt == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                fprintf(stderr, "llaisys-cli %s: out of memory\n", cmd);
                return -1;
            }
            v = nv;
            cap *= 2;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (!cnt) {
        free(v);
        fprintf(stderr, "llaisys-cli %s: %s: no values given\n", cmd, flag);
        return -1;
    }
    *ids = v;
    *n = cnt;
    return 0;
}

enum ll_status run_prompt(struct model_runtime *rt, const int32_t *ids, int n, int start,
                          float *last, struct ll_err *err)
{
    int B = rt->opts.max_batch;
    int32_t pos[B];
    uint8_t want[B];
    for (int i0 = 0; i0 < n; i0 += B) {
        int m = n - i0 < B ? n - i0 : B;
        for (int j = 0; j < m; j++) {
            pos[j] = start + i0 + j;
            want[j] = i0 + j == n - 1; /* only the prompt's last token needs logits */
        }
        struct ll_batch b = {.n_tokens = m, .token = ids + i0, .pos = pos, .want_logits = want};
        enum ll_status s = runtime_forward(rt, &b, last, err);
        if (s)
            return s;
    }
    return LL_OK;
}

void run_memory_mib(double *rss, double *hwm)
{
    *rss = *hwm = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            *rss = kb / 1024.0;
        else if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            *hwm = kb / 1024.0;
    }
    fclose(f);
}

enum ll_status run_lines_read(const char *input, char **data, int *n_lines, struct ll_err *err)
{
    size_t len = 0;
    enum ll_status s = !strcmp(input, "-")
                           ? ll_read_stream(stdin, "standard input", data, &len, err)
                           : ll_read_file(input, data, &len, err);
    *n_lines = 1;
    for (size_t i = 0; s == LL_OK && i < len; i++)
        *n_lines += (*data)[i] == '\n';
    return s;
}

char *run_lines_next(char **cursor, int *line_no, size_t *len)
{
    for (char *line = *cursor, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        ++*line_no;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r')
            line[--l] = '\0';
        if (!l)
            continue;
        *cursor = next;
        *len = l;
        return line;
    }
    *cursor = NULL;
    return NULL;
}
