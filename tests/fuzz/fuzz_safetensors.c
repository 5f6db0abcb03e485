/*
 * fuzz_safetensors.c: the safetensors reader (st_open: header length, JSON header, every
 * entry's dtype, shape and offsets against the file).
 *
 * Input: the whole file (8-byte length, header, data), written to a memfd and opened through
 * /proc/self/fd. Checked on success: every tensor's bytes lie inside the file's data (each is
 * read, first to last byte, so an out-of-range pointer faults), nbytes = product(shape) * dtype
 * size, names are found by st_find.
 */
#include <sys/mman.h>

#include "fuzz.h"
#include "safetensors.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) {
        perror("fuzz_safetensors: memfd_create");
        exit(1);
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    if (st_open(&st, path, &err) != LL_OK) {
        if (!err.msg[0] || st)
            fuzz_fail("st_open failed without a message, or left a set");
        return 0;
    }
    volatile unsigned sum = 0;
    for (size_t i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_at(st, i);
        size_t n = st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            n *= (size_t)t->shape[d];
        if (n != t->nbytes)
            fuzz_fail("%s: nbytes %zu, shape says %zu", t->name, t->nbytes, n);
        if (t->nbytes > size)
            fuzz_fail("%s: %zu bytes in a %zu-byte file", t->name, t->nbytes, size);
        const unsigned char *p = t->data;
        for (size_t b = 0; b < t->nbytes; b++)
            sum += p[b];
        if (st_find(st, t->name) != t)
            fuzz_fail("st_find(%s) does not find it", t->name);
    }
    (void)sum;
    st_close(st);
    return 0;
}
