/*
 * fuzz.h: what the libFuzzer targets of tests/fuzz/ share. Each target is one fuzz_NAME.c with
 * LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize when it loads something once); a broken
 * invariant the target checks calls fuzz_fail, which aborts so libFuzzer records the input.
 * Header-only (static functions): every target is one translation unit plus the library.
 */
#ifndef LLAISYS_FUZZ_H
#define LLAISYS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_fail(...)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "fuzz: invariant broken at %s:%d: ", __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* Split data at its first NUL byte: [0, *a_len) before it, the rest after it in *b / *b_len
 * (*b is NULL and *b_len 0 when there is no NUL). */
static inline void fuzz_split(const uint8_t *data, size_t size, size_t *a_len, const uint8_t **b,
                              size_t *b_len)
{
    const uint8_t *nul = memchr(data, 0, size);
    *a_len = nul ? (size_t)(nul - data) : size;
    *b = nul ? nul + 1 : NULL;
    *b_len = nul ? size - *a_len - 1 : 0;
}

/* A malloc'd NUL-terminated copy of data[0..len) (never NULL: aborts when out of memory). */
static inline char *fuzz_strndup(const uint8_t *data, size_t len)
{
    char *s = malloc(len + 1);
    if (!s)
        abort();
    memcpy(s, data, len);
    s[len] = 0;
    return s;
}

/* Write data to DIR/name (name one of fuzz_dir_names), DIR being a directory of this process under $TMPDIR (made on first
 * use, removed at exit); returns DIR (static storage). Aborts on an I/O error: that is the
 * harness failing, not the code under test. */
static char fuzz_dir_path[4096];
static const char *const fuzz_dir_names[] = {"tokenizer.json", "tokenizer_config.json",
                                             "model.safetensors.index.json", "a.safetensors",
                                             "b.safetensors"};
static void fuzz_dir_remove(void)
{
    char path[4200];
    for (size_t i = 0; i < sizeof fuzz_dir_names / sizeof *fuzz_dir_names; i++) {
        snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, fuzz_dir_names[i]);
        unlink(path);
    }
    rmdir(fuzz_dir_path);
}
static inline const char *fuzz_write_file(const char *name, const uint8_t *data, size_t len)
{
    if (!fuzz_dir_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/llaisys-fuzz-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror("fuzz: writing the input file");
        abort();
    }
    return fuzz_dir_path;
}

#endif
