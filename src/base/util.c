/* util.c: assertions, file reading and writing, paths, time (see util.h). */
#include "util.h"

#include "buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

void ll_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "llaisys: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}

enum ll_status ll_read_stream(FILE *f, const char *name, char **data, size_t *len,
                              struct ll_err *err)
{
    *data = NULL;
    if (len)
        *len = 0;
    struct ll_buf b = {0};
    for (;;) {
        if (!ll_buf_reserve(&b, 1 << 16)) {
            ll_buf_free(&b);
            return ll_err_set(err, LL_ENOMEM, "%s: out of memory", name);
        }
        size_t got = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        b.len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        ll_buf_free(&b);
        return ll_err_set(err, LL_EIO, "%s: read failed: %s", name, strerror(e));
    }
    if (len)
        *len = b.len;
    *data = ll_buf_take(&b);
    return LL_OK;
}

enum ll_status ll_read_file(const char *path, char **data, size_t *len, struct ll_err *err)
{
    *data = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
    enum ll_status st = ll_read_stream(f, path, data, len, err);
    fclose(f);
    return st;
}

enum ll_status ll_write_file(const char *path, const void *data, size_t len, struct ll_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
    size_t k = len ? fwrite(data, 1, len, f) : 0;
    int e = errno;
    if (fclose(f) != 0 || k != len)
        return ll_err_set(err, LL_EIO, "%s: write failed: %s", path, strerror(e ? e : EIO));
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

void ll_release_pages(const void *data, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)data + page - 1) / page * page;
    uintptr_t b = ((uintptr_t)data + bytes) / page * page;
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

#define HUGE_PAGE ((uintptr_t)2 << 20)

static size_t round_page(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

void *ll_huge_alloc(size_t bytes)
{
    if (bytes == 0)
        return NULL;
    size_t len = round_page(bytes);
    char *map = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    /* keep [base, base + len) of the mapping, base on a 2 MiB boundary */
    char *base = (char *)(((uintptr_t)map + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
    if (base > map)
        munmap(map, (size_t)(base - map));
    if (map + len + HUGE_PAGE > base + len)
        munmap(base + len, (size_t)(map + len + HUGE_PAGE - (base + len)));
    (void)madvise(base, len, MADV_HUGEPAGE); /* a hint: refused where THP is off */
    return base;
}

void ll_huge_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, round_page(bytes));
}
