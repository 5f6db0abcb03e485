/*
 * safetensors.h: read-only access to weights stored in the safetensors format, either one file
 * (`model.safetensors`) or a sharded set described by `model.safetensors.index.json`.
 *
 * File layout: 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header
 *   {"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"k": "v"}}
 * then the data; offsets are relative to the first byte after the header.
 *
 * Everything is validated at open, before any data is touched: header length (<= 100 MB and
 * inside the file), UTF-8 and JSON of the header, every entry's dtype / shape / offsets, that
 * end - begin == product(shape) * dtype size (no overflow), that the ranges neither overlap nor
 * leave holes nor run past the end of the file, and that no name repeats (also across shards).
 * `__metadata__` is checked to be an object and otherwise ignored.
 *
 * Ownership: st_open*() returns a set that owns its mmaps (read-only, MAP_PRIVATE), the tensor
 * table and any aligned copies; st_close() frees all of it. Tensor data pointers stay valid until
 * st_close(). Each data pointer is aligned to its element size: a tensor whose bytes in the file
 * are misaligned (possible only in files not written by Hugging Face tools) is copied once, at
 * open, into an aligned buffer. Thread use: read-only after open; any thread may read it.
 */
#ifndef LLAISYS_SAFETENSORS_H
#define LLAISYS_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "errors.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* larger header lengths are rejected */

/* Every dtype the format defines; only BF16, F16 and F32 map to an ll_dtype. */
enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64,
    ST_DTYPE_COUNT
};

struct st_tensor {
    const char *name;               /* owned by the set */
    enum st_dtype dtype;
    int ndim;                       /* 0..ST_MAX_DIMS (0 = scalar) */
    int64_t shape[ST_MAX_DIMS];     /* row-major */
    size_t nbytes;                  /* == product(shape) * st_dtype_size(dtype) */
    const void *data;               /* aligned to the element size; NULL only when nbytes == 0 */
    const char *file;               /* path of the file holding it (owned by the set) */
};

struct safetensors;

/* Open one safetensors file. Returns LL_OK; LL_EIO (cannot open/stat/mmap, message names the
 * path); LL_EFORMAT (truncated, absurd header length, non-UTF-8 header, bad entry, bad offsets:
 * the message names the file and, when one is to blame, the tensor); LL_EJSON (header is not
 * JSON); LL_ENOMEM. On failure *out is NULL. */
enum ll_status st_open(struct safetensors **out, const char *path, struct ll_err *err);

/* Open the shards listed by a `model.safetensors.index.json` (its "weight_map": name -> shard
 * file in the same directory). Every listed tensor must be in the shard the index names.
 * Returns like st_open(), plus LL_EJSON / LL_EFORMAT for a bad index (message names it). */
enum ll_status st_open_index(struct safetensors **out, const char *index_path, struct ll_err *err);

/* Open the weights of a model directory: model.safetensors.index.json if present, otherwise
 * model.safetensors. Returns like st_open_index(); LL_EIO names both files when neither exists. */
enum ll_status st_open_dir(struct safetensors **out, const char *dir, struct ll_err *err);

/* Free everything (NULL is a no-op). */
void st_close(struct safetensors *st);

/* The path the set was opened from (the single file or the index); for messages. */
const char *st_path(const struct safetensors *st);
/* Number of tensors (excluding __metadata__). */
size_t st_count(const struct safetensors *st);
/* Tensor i in name order (0 <= i < st_count()). */
const struct st_tensor *st_at(const struct safetensors *st, size_t i);
/* Tensor by name, or NULL when absent. */
const struct st_tensor *st_find(const struct safetensors *st, const char *name);

/* One tensor to write: name, dtype, shape and its bytes (product(shape) * element size). */
struct st_write_tensor {
    const char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
};

/* Write tensors t[0..n) as a safetensors file at path (created or truncated), in the layout
 * st_open reads: the header lists the tensors in name order after "__metadata__"
 * {"format": "pt"} and is padded with spaces so that the data section starts at a multiple of
 * 64 bytes; then the data, tensors whose size is a multiple of 64 bytes first (so each of those
 * starts 64-byte aligned in the file and in an mmap of it), then the others, each part in name
 * order, back to back. Returns LL_OK, LL_EINVAL (an empty or repeated name, a bad shape),
 * LL_EIO (names the path) or LL_ENOMEM. */
enum ll_status st_write(const char *path, const struct st_write_tensor *t, size_t n,
                        struct ll_err *err);

/* "BF16", "I64", ... (the format's spelling). */
const char *st_dtype_name(enum st_dtype t);
/* Bytes per element (1 for BOOL and the F8 types). */
size_t st_dtype_size(enum st_dtype t);
/* Maps BF16/F16/F32 to *out and returns true; false for every other dtype. */
bool st_dtype_to_ll(enum st_dtype t, enum ll_dtype *out);

#endif
