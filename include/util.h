/*
 * util.h: small helpers every layer uses: internal assertions, whole-file reads and writes,
 * paths, time.
 */
#ifndef LLAISYS_UTIL_H
#define LLAISYS_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "errors.h"

/* Internal invariant check: prints expression, file and line, then aborts. Never for bad input. */
#define LL_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond))                                                                     \
            ll_assert_fail(#cond, __FILE__, __LINE__);                                   \
    } while (0)

_Noreturn void ll_assert_fail(const char *expr, const char *file, int line);

#define LL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Read a whole file into a NUL-terminated malloc'd buffer (caller frees). *len excludes the NUL.
 * Returns LL_OK, LL_EIO (names the path and errno text) or LL_ENOMEM. */
enum ll_status ll_read_file(const char *path, char **data, size_t *len, struct ll_err *err);
/* The same for the rest of an open stream (stdin, a pipe); name is used in messages. */
enum ll_status ll_read_stream(FILE *f, const char *name, char **data, size_t *len,
                              struct ll_err *err);

/* Write data[0..len) to path, created or truncated. Returns LL_OK or LL_EIO (names the path and
 * errno text). */
enum ll_status ll_write_file(const char *path, const void *data, size_t len, struct ll_err *err);

/* Join a directory and a file name into a malloc'd path (caller frees); NULL on no memory. */
char *ll_path_join(const char *dir, const char *name);

/* Monotonic time in seconds. */
double ll_now(void);

/* Give the interior whole pages of [data, data + bytes) of a file mapping back to the kernel
 * (MADV_DONTNEED): they stay in the page cache, only this process's resident set shrinks. For
 * weights no longer read from the mapping. */
void ll_release_pages(const void *data, size_t bytes);

/* Zero-filled anonymous memory for the weights that decode streams once a token: page-aligned,
 * starting on a 2 MiB boundary and advised MADV_HUGEPAGE, so that the kernel backs it with huge
 * pages where it grants them (with 4 KiB pages every page is a TLB miss and a point where the
 * hardware prefetchers stop; a malloc'd block is not page-aligned, so it cannot even be advised).
 * NULL when out of memory (or bytes is 0). Freed by ll_huge_free with the same bytes. */
void *ll_huge_alloc(size_t bytes);
void ll_huge_free(void *p, size_t bytes);

#endif
