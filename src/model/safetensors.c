/*
 * safetensors.c: the safetensors reader (see safetensors.h for the format and the contract).
 *
 * Owns: the mmaps of one or more weight files, the tensor table (sorted by name for bsearch), and
 * aligned copies of the rare misaligned tensors. Called by model_open() on the start-up thread;
 * read-only afterwards.
 *
 * Invariants once open succeeded: every tensor's bytes lie inside its file's data section; the
 * ranges of one file tile that section exactly (no overlap, no hole, nothing after the last);
 * nbytes == product(shape) * element size; names are unique across all files; data is aligned to
 * the element size.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "utf8.h"
#include "util.h"

struct st_file {
    char *path;
    const uint8_t *map; /* whole file, NULL when the file is empty */
    size_t size;
};

struct safetensors {
    char *path; /* what st_open / st_open_index was given */
    struct st_file *files;
    size_t n_files;
    struct st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    void **copies; /* aligned copies of misaligned tensors */
    size_t n_copies;
};

static const struct {
    const char *name;
    size_t size;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].name : "?";
}

size_t st_dtype_size(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].size : 0;
}

bool st_dtype_to_ll(enum st_dtype t, enum ll_dtype *out)
{
    switch (t) {
    case ST_BF16: *out = LL_BF16; return true;
    case ST_F16: *out = LL_F16; return true;
    case ST_F32: *out = LL_F32; return true;
    default: return false;
    }
}

/* A JSON number that is an integer in [0, 2^53] (exact in a double). */
static bool json_get_u53(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static enum st_dtype dtype_parse(const char *s)
{
    for (int t = 0; t < ST_DTYPE_COUNT; t++)
        if (!strcmp(s, dtype_info[t].name))
            return (enum st_dtype)t;
    return ST_DTYPE_COUNT;
}

static enum ll_status tensors_reserve(struct safetensors *st, size_t extra, struct ll_err *err)
{
    if (st->n_tensors + extra <= st->cap_tensors)
        return LL_OK;
    size_t cap = st->cap_tensors ? st->cap_tensors : 64;
    while (cap < st->n_tensors + extra)
        cap *= 2;
    struct st_tensor *t = realloc(st->tensors, cap * sizeof *t);
    if (!t)
        return ll_err_set(err, LL_ENOMEM, "safetensors: out of memory");
    st->tensors = t;
    st->cap_tensors = cap;
    return LL_OK;
}

/* Parse one header entry into *t (name, dtype, shape, nbytes) and its byte range [*begin, *end)
 * relative to the data section of `data_size` bytes. */
static enum ll_status entry_parse(const cJSON *e, const char *path, size_t data_size,
                                  struct st_tensor *t, uint64_t *begin, uint64_t *end,
                                  struct ll_err *err)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': entry is not a JSON object", path,
                          name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dt)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': missing \"dtype\"", path, name);
    if (!cJSON_IsString(dt))
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': \"dtype\" is not a string", path,
                          name);
    t->dtype = dtype_parse(dt->valuestring);
    if (t->dtype == ST_DTYPE_COUNT)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': unknown dtype \"%.32s\"", path, name,
                          dt->valuestring);

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!sh)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': missing \"shape\"", path, name);
    if (!cJSON_IsArray(sh))
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': \"shape\" is not an array", path,
                          name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': %d dimensions (at most %d supported)",
                          path, name, nd, ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t nbytes = st_dtype_size(t->dtype);
    bool overflow = false;
    int k = 0;
    for (const cJSON *d = sh->child; d; d = d->next, k++) {
        uint64_t v;
        if (!json_get_u53(d, &v) || v > INT64_MAX)
            return ll_err_set(err, LL_EFORMAT,
                              "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                              name, k);
        t->shape[k] = (int64_t)v;
        if (__builtin_mul_overflow(nbytes, v, &nbytes))
            overflow = true;
    }
    if (overflow || nbytes > SIZE_MAX)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': shape is too large (size overflows)",
                          path, name);
    t->nbytes = (size_t)nbytes;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!off)
        return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s': missing \"data_offsets\"", path,
                          name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_get_u53(off->child, begin) ||
        !json_get_u53(off->child->next, end))
        return ll_err_set(err, LL_EFORMAT,
                          "%s: tensor '%s': \"data_offsets\" must be [begin, end] with "
                          "non-negative integers",
                          path, name);
    if (*begin > *end)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                          name, (unsigned long long)*begin, (unsigned long long)*end);
    if (*end > data_size)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the "
                          "file (its data section holds %zu bytes; truncated file?)",
                          path, name, (unsigned long long)*begin, (unsigned long long)*end,
                          data_size);
    if (*end - *begin != nbytes)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but dtype %s "
                          "x shape needs %llu",
                          path, name, (unsigned long long)*begin, (unsigned long long)*end,
                          (unsigned long long)(*end - *begin), st_dtype_name(t->dtype),
                          (unsigned long long)nbytes);
    return LL_OK;
}

struct range {
    uint64_t begin, end;
    size_t idx; /* into st->tensors */
};

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Check that the ranges of one file tile [0, data_size) exactly. */
static enum ll_status ranges_check(struct safetensors *st, struct range *r, size_t n,
                                   const char *path, size_t data_size, struct ll_err *err)
{
    qsort(r, n, sizeof *r, range_cmp);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].begin < pos)
            return ll_err_set(err, LL_EFORMAT,
                              "%s: tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and "
                              "[%llu, %llu])",
                              path, st->tensors[r[i - 1].idx].name, st->tensors[r[i].idx].name,
                              (unsigned long long)r[i - 1].begin, (unsigned long long)r[i - 1].end,
                              (unsigned long long)r[i].begin, (unsigned long long)r[i].end);
        if (r[i].begin > pos)
            return ll_err_set(err, LL_EFORMAT,
                              "%s: bytes [%llu, %llu) of the data section belong to no tensor "
                              "(hole before '%s')",
                              path, (unsigned long long)pos, (unsigned long long)r[i].begin,
                              st->tensors[r[i].idx].name);
        pos = r[i].end;
    }
    if (pos != data_size)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: %llu trailing bytes after the last tensor (data section holds %zu "
                          "bytes, tensors end at %llu)",
                          path, (unsigned long long)(data_size - pos), data_size,
                          (unsigned long long)pos);
    return LL_OK;
}

/* Give tensor t a data pointer aligned to its element size, copying it when the file's bytes
 * are misaligned. */
static enum ll_status tensor_align(struct safetensors *st, struct st_tensor *t, const uint8_t *p,
                                   struct ll_err *err)
{
    if (t->nbytes == 0) {
        t->data = NULL;
        return LL_OK;
    }
    size_t a = st_dtype_size(t->dtype);
    if ((uintptr_t)p % a == 0) {
        t->data = p;
        return LL_OK;
    }
    void **c = realloc(st->copies, (st->n_copies + 1) * sizeof *c);
    if (!c)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", t->file);
    st->copies = c;
    size_t sz = (t->nbytes + 63) & ~(size_t)63;
    void *buf = aligned_alloc(64, sz);
    if (!buf)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory copying tensor '%s'", t->file,
                          t->name);
    memcpy(buf, p, t->nbytes);
    st->copies[st->n_copies++] = buf;
    t->data = buf;
    return LL_OK;
}

/* mmap the file at `path` and append its tensors to st. */
static enum ll_status file_add(struct safetensors *st, const char *path, struct ll_err *err)
{
    struct st_file *files = realloc(st->files, (st->n_files + 1) * sizeof *files);
    if (!files)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    st->files = files;
    struct st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    st->n_files++;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ll_err_set(err, LL_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ll_err_set(err, LL_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ll_err_set(err, LL_EIO, "%s: not a regular file", path);
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return ll_err_set(err, LL_EFORMAT,
                          "%s: truncated: %zu bytes, too short for the 8-byte header length",
                          path, f->size);
    }
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return ll_err_set(err, LL_EIO, "%s: mmap failed: %s", path, strerror(e));
    f->map = map;
    /* Huge pages where the kernel grants them for file mappings (fewer TLB misses while decode
     * streams the weights: tg64 9.0 -> 9.4-10.4 t/s on an AMD EPYC VM), then start reading the
     * weights in the background: the first forward pass touches all of them. Both are hints. */
    (void)madvise(map, f->size, MADV_HUGEPAGE);
    (void)madvise(map, f->size, MADV_WILLNEED);

    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | f->map[i];
    if (n > ST_MAX_HEADER)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: header length %llu is absurd (limit %llu bytes); not a "
                          "safetensors file?",
                          path, (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
    if (n > f->size - 8)
        return ll_err_set(err, LL_EFORMAT,
                          "%s: header length %llu exceeds the file (%zu bytes); truncated file?",
                          path, (unsigned long long)n, f->size);
    if (n < 2)
        return ll_err_set(err, LL_EFORMAT, "%s: header length %llu is too short for a JSON object",
                          path, (unsigned long long)n);
    const char *hdr = (const char *)f->map + 8;
    size_t bad = ll_utf8_valid_prefix(hdr, (size_t)n);
    if (bad != n)
        return ll_err_set(err, LL_EFORMAT, "%s: header is not valid UTF-8 (byte %zu of the header)",
                          path, bad);
    /* One JSON value; after it only padding (spaces, as Hugging Face pads to 8 bytes). */
    cJSON *root = NULL;
    if (ll_json_parse(&root, hdr, (size_t)n, "header", err) != LL_OK)
        return ll_err_prefix(err, "%s: ", path);

    enum ll_status s = LL_OK;
    struct range *ranges = NULL;
    size_t n_ranges = 0;
    size_t data_size = f->size - 8 - (size_t)n;
    const uint8_t *data = f->map + 8 + n;
    if (!cJSON_IsObject(root)) {
        s = ll_err_set(err, LL_EFORMAT, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t n_entries = (size_t)cJSON_GetArraySize(root);
    ranges = malloc((n_entries ? n_entries : 1) * sizeof *ranges);
    if (!ranges || (s = tensors_reserve(st, n_entries, err)) != LL_OK) {
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                s = ll_err_set(err, LL_EFORMAT, "%s: \"__metadata__\" is not a JSON object", path);
                goto out;
            }
            continue; /* free-form string map: nothing the model needs */
        }
        struct st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        uint64_t b = 0, en = 0;
        if ((s = entry_parse(e, path, data_size, t, &b, &en, err)) != LL_OK)
            goto out;
        t->name = strdup(e->string);
        if (!t->name) {
            s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        t->file = f->path;
        st->n_tensors++;
        ranges[n_ranges++] = (struct range){b, en, st->n_tensors - 1};
    }
    if ((s = ranges_check(st, ranges, n_ranges, path, data_size, err)) != LL_OK)
        goto out;
    for (size_t i = 0; i < n_ranges; i++)
        if ((s = tensor_align(st, &st->tensors[ranges[i].idx], data + ranges[i].begin, err)))
            goto out;
out:
    free(ranges);
    cJSON_Delete(root);
    return s;
}

static int tensor_cmp(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

/* Sort the table by name and reject names that occur twice. */
static enum ll_status table_finish(struct safetensors *st, struct ll_err *err)
{
    if (st->n_tensors)
        qsort(st->tensors, st->n_tensors, sizeof *st->tensors, tensor_cmp);
    for (size_t i = 1; i < st->n_tensors; i++) {
        const struct st_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
        if (!strcmp(a->name, b->name)) {
            if (a->file == b->file)
                return ll_err_set(err, LL_EFORMAT, "%s: tensor '%s' appears twice in the header",
                                  a->file, a->name);
            return ll_err_set(err, LL_EFORMAT, "tensor '%s' appears in two shards: %s and %s",
                              a->name, a->file, b->file);
        }
    }
    return LL_OK;
}

static struct safetensors *set_new(const char *path, struct ll_err *err)
{
    struct safetensors *st = calloc(1, sizeof *st);
    if (st && !(st->path = strdup(path))) {
        free(st);
        st = NULL;
    }
    if (!st)
        ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
    return st;
}

enum ll_status st_open(struct safetensors **out, const char *path, struct ll_err *err)
{
    *out = NULL;
    struct safetensors *st = set_new(path, err);
    if (!st)
        return LL_ENOMEM;
    enum ll_status s = file_add(st, path, err);
    if (s == LL_OK)
        s = table_finish(st, err);
    if (s != LL_OK) {
        st_close(st);
        return s;
    }
    *out = st;
    return LL_OK;
}

/* A shard name from the index must be a plain file name in the index's directory. */
static bool shard_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

enum ll_status st_open_index(struct safetensors **out, const char *index_path, struct ll_err *err)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    enum ll_status s = ll_read_file(index_path, &text, &len, err);
    if (s != LL_OK)
        return s;
    cJSON *root = NULL;
    s = ll_json_parse(&root, text, len, index_path, err);
    free(text);
    if (s != LL_OK)
        return s;

    struct safetensors *st = NULL;
    char *dir = NULL;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root)) {
        s = ll_err_set(err, LL_EFORMAT, "%s: not a JSON object", index_path);
        goto out;
    }
    if (!map) {
        s = ll_err_set(err, LL_EFORMAT, "%s: missing \"weight_map\"", index_path);
        goto out;
    }
    if (!cJSON_IsObject(map)) {
        s = ll_err_set(err, LL_EFORMAT, "%s: \"weight_map\" is not a JSON object", index_path);
        goto out;
    }
    if (!map->child) {
        s = ll_err_set(err, LL_EFORMAT, "%s: \"weight_map\" is empty", index_path);
        goto out;
    }
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
            s = ll_err_set(err, LL_EFORMAT,
                           "%s: weight_map[\"%s\"] must be a file name in the same directory",
                           index_path, e->string);
            goto out;
        }
    }
    const char *slash = strrchr(index_path, '/');
    dir = slash ? strndup(index_path, (size_t)(slash - index_path + 1)) : strdup("");
    if (!dir || !(st = set_new(index_path, err))) {
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", index_path);
        goto out;
    }
    /* Open each distinct shard once, in the order the index first names them. */
    for (const cJSON *e = map->child; e; e = e->next) {
        bool seen = false;
        for (const cJSON *p = map->child; p != e && !seen; p = p->next)
            seen = !strcmp(p->valuestring, e->valuestring);
        if (seen)
            continue;
        char *p = ll_path_join(dir, e->valuestring);
        if (!p) {
            s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", index_path);
            goto out;
        }
        s = file_add(st, p, err);
        free(p);
        if (s != LL_OK) {
            if (s == LL_EIO)
                ll_err_prefix(err, "%s names shard '%s': ", index_path, e->valuestring);
            goto out;
        }
    }
    if ((s = table_finish(st, err)) != LL_OK)
        goto out;
    for (const cJSON *e = map->child; e; e = e->next) {
        const struct st_tensor *t = st_find(st, e->string);
        const char *tf = t ? strrchr(t->file, '/') : NULL;
        tf = tf ? tf + 1 : t ? t->file : NULL;
        if (!t || strcmp(tf, e->valuestring)) {
            s = ll_err_set(err, LL_EFORMAT, "%s: weight_map puts tensor '%s' in %s, but %s",
                           index_path, e->string, e->valuestring,
                           t ? "it is in another shard" : "no shard has it");
            goto out;
        }
    }
out:
    cJSON_Delete(root);
    free(dir);
    if (s != LL_OK) {
        st_close(st);
        return s;
    }
    *out = st;
    return LL_OK;
}

enum ll_status st_open_dir(struct safetensors **out, const char *dir, struct ll_err *err)
{
    *out = NULL;
    char *index = ll_path_join(dir, "model.safetensors.index.json");
    char *single = ll_path_join(dir, "model.safetensors");
    enum ll_status s;
    if (!index || !single)
        s = ll_err_set(err, LL_ENOMEM, "%s: out of memory", dir);
    else if (access(index, F_OK) == 0)
        s = st_open_index(out, index, err);
    else if (access(single, F_OK) == 0)
        s = st_open(out, single, err);
    else
        s = ll_err_set(err, LL_EIO, "%s: no weights: neither model.safetensors nor "
                                    "model.safetensors.index.json exists",
                       dir);
    free(index);
    free(single);
    return s;
}

void st_close(struct safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_tensors; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < st->n_copies; i++)
        free(st->copies[i]);
    free(st->copies);
    for (size_t i = 0; i < st->n_files; i++) {
        if (st->files[i].map)
            munmap((void *)st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    free(st->path);
    free(st);
}

const char *st_path(const struct safetensors *st)
{
    return st->path;
}

size_t st_count(const struct safetensors *st)
{
    return st->n_tensors;
}

const struct st_tensor *st_at(const struct safetensors *st, size_t i)
{
    LL_ASSERT(i < st->n_tensors);
    return &st->tensors[i];
}

const struct st_tensor *st_find(const struct safetensors *st, const char *name)
{
    struct st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, st->n_tensors, sizeof key, tensor_cmp);
}
