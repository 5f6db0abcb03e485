/* util.c: assertions, file reading, paths, time (see util.h). */
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ll_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "llaisys: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}

enum ll_status ll_read_file(const char *path, char **data, size_t *len, struct ll_err *err)
{
    *data = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) {
                int e = errno;
                free(buf);
                fclose(f);
                return ll_err_set(err, LL_EIO, "%s: read failed: %s", path, strerror(e));
            }
            break;
        }
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return LL_OK;
}

char *ll_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

double ll_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
