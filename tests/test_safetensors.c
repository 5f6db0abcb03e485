/*
 * test_safetensors.c: the safetensors reader on hand-built files: a valid file (values, shapes,
 * sorted lookup, __metadata__ skipped, misaligned data copied), every kind of corruption (each
 * must give the expected status and a message naming the file and the problem), and sharded
 * sets through model.safetensors.index.json.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "util.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/llaisys-test-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* tmpdir/name in a static buffer (one at a time is enough for these tests). */
static const char *tmp_path(const char *name)
{
    static char buf[2][256];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A safetensors file: stated header length hlen (the real length when hlen == UINT64_MAX),
 * header text, then `data_len` data bytes of pattern (i * 7 + 1) unless data is given. */
static void write_st(const char *path, uint64_t hlen, const char *header, const void *data,
                     size_t data_len)
{
    size_t n = strlen(header);
    if (hlen == UINT64_MAX)
        hlen = n;
    uint8_t *buf = malloc(8 + n + data_len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)(i * 7 + 1);
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

static void test_valid_file(void **state)
{
    (void)state;
    /* a: BF16 (2,3) = 1..6; b: F32 (2) = 0.5, -2; c: I64 (1); z: F16 (0) empty. Padded header. */
    uint8_t data[28];
    uint16_t a[6];
    for (int i = 0; i < 6; i++)
        a[i] = ll_f32_to_bf16((float)(i + 1));
    float b[2] = {0.5f, -2.0f};
    int64_t c = -7;
    memcpy(data, a, 12);
    memcpy(data + 12, b, 8);
    memcpy(data + 20, &c, 8);
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
        "\"z\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[28,28]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
        "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
        "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[20,28]}}      ";
    const char *path = tmp_path("valid.safetensors");
    write_st(path, UINT64_MAX, hdr, data, sizeof data);

    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_OK);
    assert_string_equal(st_path(st), path);
    assert_int_equal(st_count(st), 4);
    const char *order[] = {"a", "b", "c", "z"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(st_at(st, i)->name, order[i]);

    const struct st_tensor *t = st_find(st, "a");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_BF16);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->nbytes, 12);
    assert_string_equal(t->file, path);
    for (int i = 0; i < 6; i++)
        assert_true(ll_bf16_to_f32(((const uint16_t *)t->data)[i]) == (float)(i + 1));
    enum ll_dtype ld;
    assert_true(st_dtype_to_ll(t->dtype, &ld));
    assert_int_equal(ld, LL_BF16);

    t = st_find(st, "b");
    assert_non_null(t);
    assert_true(((const float *)t->data)[0] == 0.5f && ((const float *)t->data)[1] == -2.0f);
    assert_int_equal((uintptr_t)t->data % 4, 0);

    t = st_find(st, "c");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_I64);
    assert_false(st_dtype_to_ll(t->dtype, &ld));
    assert_string_equal(st_dtype_name(t->dtype), "I64");
    assert_int_equal(*(const int64_t *)t->data, -7);

    t = st_find(st, "z");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 0);
    assert_null(st_find(st, "__metadata__"));
    assert_null(st_find(st, "nope"));
    st_close(st);
}

/* Only __metadata__ and no data: a valid, empty set. */
static void test_metadata_only(void **state)
{
    (void)state;
    const char *path = tmp_path("meta.safetensors");
    write_st(path, UINT64_MAX, "{\"__metadata__\":{\"format\":\"pt\"}}", NULL, 0);
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_OK);
    assert_int_equal(st_count(st), 0);
    st_close(st);
}

/* Data starting at an odd file offset: the F32 tensor gets an aligned copy with the same bytes. */
static void test_misaligned_copied(void **state)
{
    (void)state;
    float v[3] = {1.25f, -3.5f, 1e-3f};
    char hdr[80] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
    if ((8 + strlen(hdr)) % 2 == 0)
        strcat(hdr, " "); /* data now starts at an odd offset */
    const char *path = tmp_path("odd.safetensors");
    write_st(path, UINT64_MAX, hdr, v, sizeof v);
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_OK);
    const struct st_tensor *t = st_find(st, "w");
    assert_non_null(t);
    assert_int_equal((uintptr_t)t->data % 4, 0);
    assert_memory_equal(t->data, v, sizeof v);
    st_close(st);
}

struct bad_case {
    const char *what;
    uint64_t hlen; /* UINT64_MAX: the header's real length */
    const char *header;
    size_t data_len;
    enum ll_status status;
    const char *needle; /* must appear in the message */
};

#define T(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const struct bad_case bad_cases[] = {
    {"header length past the file", 1000, "{}", 0, LL_EFORMAT, "exceeds the file"},
    {"absurd header length", (uint64_t)1 << 40, "{}", 0, LL_EFORMAT, "absurd"},
    {"zero header length", 0, "", 0, LL_EFORMAT, "too short"},
    {"not JSON", UINT64_MAX, "{\"a\": {\"dtype\": ", 0, LL_EJSON, "header: invalid JSON"},
    {"junk after the JSON", UINT64_MAX, "{} x", 0, LL_EJSON,
     "header: invalid JSON at line 1, column 4 (byte offset 3)"},
    {"invalid UTF-8", UINT64_MAX, "{\"a\xff\":1}", 0, LL_EFORMAT, "UTF-8"},
    {"overlong UTF-8", UINT64_MAX, "{\"a\xc0\xaf\":1}", 0, LL_EFORMAT, "UTF-8"},
    {"UTF-16 surrogate", UINT64_MAX, "{\"a\xed\xa0\x80\":1}", 0, LL_EFORMAT, "UTF-8"},
    {"header is an array", UINT64_MAX, "[1,2]", 0, LL_EFORMAT, "not a JSON object"},
    {"entry not an object", UINT64_MAX, "{\"a\":5}", 0, LL_EFORMAT, "'a': entry is not"},
    {"missing dtype", UINT64_MAX, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
     LL_EFORMAT, "missing \"dtype\""},
    {"dtype not a string", UINT64_MAX, "{\"a\":{\"dtype\":2,\"shape\":[1],\"data_offsets\":[0,2]}}",
     2, LL_EFORMAT, "\"dtype\" is not a string"},
    {"unknown dtype", UINT64_MAX, "{" T("a", "Q4", "[1]", 0, 2) "}", 2, LL_EFORMAT,
     "unknown dtype \"Q4\""},
    {"missing shape", UINT64_MAX, "{\"a\":{\"dtype\":\"BF16\",\"data_offsets\":[0,2]}}", 2,
     LL_EFORMAT, "missing \"shape\""},
    {"shape not an array", UINT64_MAX, "{" T("a", "BF16", "3", 0, 2) "}", 2, LL_EFORMAT,
     "\"shape\" is not an array"},
    {"negative dim", UINT64_MAX, "{" T("a", "BF16", "[-1]", 0, 2) "}", 2, LL_EFORMAT,
     "shape[0] is not a non-negative integer"},
    {"fractional dim", UINT64_MAX, "{" T("a", "BF16", "[1,1.5]", 0, 2) "}", 2, LL_EFORMAT,
     "shape[1] is not"},
    {"too many dims", UINT64_MAX, "{" T("a", "BF16", "[1,1,1,1,1,1,1,1,1]", 0, 2) "}", 2,
     LL_EFORMAT, "9 dimensions"},
    {"size overflow", UINT64_MAX,
     "{" T("a", "BF16", "[4294967296,4294967296,4294967296]", 0, 2) "}", 2, LL_EFORMAT,
     "too large"},
    {"missing data_offsets", UINT64_MAX, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[1]}}", 2,
     LL_EFORMAT, "missing \"data_offsets\""},
    {"one offset", UINT64_MAX, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0]}}",
     2, LL_EFORMAT, "must be [begin, end]"},
    {"negative offset", UINT64_MAX, "{" T("a", "BF16", "[1]", -2, 0) "}", 2, LL_EFORMAT,
     "must be [begin, end]"},
    {"end before begin", UINT64_MAX, "{" T("a", "BF16", "[1]", 4, 2) "}", 4, LL_EFORMAT,
     "end before they begin"},
    {"offsets past the end", UINT64_MAX, "{" T("a", "BF16", "[4]", 0, 8) "}", 6, LL_EFORMAT,
     "run past the end"},
    {"offsets far past the end", UINT64_MAX,
     "{" T("a", "BF16", "[1]", 9000000000000000, 9000000000000002) "}", 2, LL_EFORMAT,
     "run past the end"},
    {"size does not match dtype x shape", UINT64_MAX, "{" T("a", "F32", "[2,2]", 0, 8) "}", 8,
     LL_EFORMAT, "hold 8 bytes but dtype F32 x shape needs 16"},
    {"overlapping tensors", UINT64_MAX,
     "{" T("a", "BF16", "[4]", 0, 8) "," T("b", "BF16", "[4]", 6, 14) "}", 14, LL_EFORMAT,
     "overlap"},
    {"hole between tensors", UINT64_MAX,
     "{" T("a", "BF16", "[2]", 0, 4) "," T("b", "BF16", "[2]", 8, 12) "}", 12, LL_EFORMAT,
     "hole before 'b'"},
    {"trailing bytes", UINT64_MAX, "{" T("a", "BF16", "[2]", 0, 4) "}", 10, LL_EFORMAT,
     "6 trailing bytes"},
    {"duplicate name", UINT64_MAX,
     "{" T("a", "BF16", "[2]", 0, 4) "," T("a", "BF16", "[2]", 4, 8) "}", 8, LL_EFORMAT,
     "'a' appears twice"},
    {"__metadata__ not an object", UINT64_MAX, "{\"__metadata__\":\"pt\"}", 0, LL_EFORMAT,
     "\"__metadata__\" is not a JSON object"},
};

static void test_bad_files(void **state)
{
    (void)state;
    for (size_t i = 0; i < LL_ARRAY_LEN(bad_cases); i++) {
        const struct bad_case *c = &bad_cases[i];
        char name[64];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        const char *path = tmp_path(name);
        write_st(path, c->hlen, c->header, NULL, c->data_len);
        struct safetensors *st = (struct safetensors *)1;
        struct ll_err err = {0};
        enum ll_status s = st_open(&st, path, &err);
        if (getenv("LL_TEST_VERBOSE"))
            printf("%-40s %s\n", c->what, err.msg);
        if (s != c->status || !strstr(err.msg, c->needle) || !strstr(err.msg, path))
            fail_msg("case '%s': status %d (want %d), message: %s", c->what, s, c->status,
                     err.msg);
        assert_null(st);
    }
}

/* NUL inside the header: JSON stops at the NUL, which is not padding. */
static void test_nul_in_header(void **state)
{
    (void)state;
    uint8_t buf[14] = {6, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' '};
    const char *path = tmp_path("nul.safetensors");
    write_bytes(path, buf, sizeof buf);
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_EJSON);
    assert_non_null(strstr(err.msg, "header: invalid JSON at line 1, column 3 (byte offset 2)"));
    assert_null(st);
}

static void test_truncated_and_missing(void **state)
{
    (void)state;
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    const char *path = tmp_path("short.safetensors");
    write_bytes(path, "\x02\x00\x00", 3);
    assert_int_equal(st_open(&st, path, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_non_null(strstr(err.msg, path));
    write_bytes(path, "", 0);
    assert_int_equal(st_open(&st, path, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "truncated"));

    /* A valid file cut short inside its data. */
    path = tmp_path("cut.safetensors");
    write_st(path, UINT64_MAX, "{" T("a", "BF16", "[8]", 0, 16) "}", NULL, 11);
    assert_int_equal(st_open(&st, path, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "truncated file?"));
    assert_null(st);

    path = tmp_path("does-not-exist.safetensors");
    assert_int_equal(st_open(&st, path, &err), LL_EIO);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "No such file"));

    assert_int_equal(st_open(&st, tmpdir, &err), LL_EIO); /* a directory */
    assert_non_null(strstr(err.msg, "not a regular file"));
}

/* A header length above the 100 MB limit is refused before anything is read, even when the
 * file is large enough to hold it (a sparse file). */
static void test_header_limit(void **state)
{
    (void)state;
    const char *path = tmp_path("huge.safetensors");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    uint64_t n = ST_MAX_HEADER + 1;
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(write(fd, len, 8), 8);
    assert_int_equal(ftruncate(fd, (off_t)(n + 1000)), 0);
    close(fd);
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open(&st, path, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "absurd"));
    unlink(path);
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text));
}

/* Two shards and an index, in their own directory. */
static const char *make_sharded(const char *sub, const char *index)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, sub);
    mkdir(dir, 0755);
    char p[300];
    float one[2] = {1.0f, 2.0f}, two[3] = {3.0f, 4.0f, 5.0f};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, UINT64_MAX,
             "{\"__metadata__\":{\"format\":\"pt\"}," T("x.weight", "F32", "[2]", 0, 8) "}",
             one, sizeof one);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, UINT64_MAX, "{" T("y.weight", "F32", "[3]", 0, 12) "}", two, sizeof two);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, index);
    return dir;
}

static void test_sharded(void **state)
{
    (void)state;
    const char *dir = make_sharded(
        "sharded", "{\"metadata\":{\"total_size\":20},\"weight_map\":{"
                   "\"x.weight\":\"model-00001-of-00002.safetensors\","
                   "\"y.weight\":\"model-00002-of-00002.safetensors\"}}");
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open_dir(&st, dir, &err), LL_OK);
    assert_int_equal(st_count(st), 2);
    const struct st_tensor *x = st_find(st, "x.weight"), *y = st_find(st, "y.weight");
    assert_non_null(x);
    assert_non_null(y);
    assert_true(((const float *)x->data)[1] == 2.0f);
    assert_true(((const float *)y->data)[2] == 5.0f);
    assert_non_null(strstr(x->file, "model-00001-of-00002.safetensors"));
    assert_non_null(strstr(y->file, "model-00002-of-00002.safetensors"));
    assert_non_null(strstr(st_path(st), "model.safetensors.index.json"));
    st_close(st);
}

static void test_sharded_bad(void **state)
{
    (void)state;
    const struct {
        const char *index;
        enum ll_status status;
        const char *needle;
    } cases[] = {
        {"{\"weight_map\":{\"x.weight\":\"model-00001-of-00002.safetensors\","
         "\"y.weight\":\"model-00003-of-00002.safetensors\"}}",
         LL_EIO, "names shard 'model-00003-of-00002.safetensors'"},
        {"{\"weight_map\":{\"x.weight\":\"model-00002-of-00002.safetensors\","
         "\"y.weight\":\"model-00002-of-00002.safetensors\"}}",
         LL_EFORMAT, "puts tensor 'x.weight' in model-00002-of-00002.safetensors, but no shard"},
        {"{\"weight_map\":{\"x.weight\":\"model-00001-of-00002.safetensors\","
         "\"y.weight\":\"model-00001-of-00002.safetensors\","
         "\"z\":\"model-00002-of-00002.safetensors\"}}",
         LL_EFORMAT, "puts tensor 'y.weight' in model-00001-of-00002.safetensors, but it is in "
                     "another shard"},
        {"{\"weight_map\":{\"x.weight\":\"../model-00001-of-00002.safetensors\"}}", LL_EFORMAT,
         "must be a file name"},
        {"{\"weight_map\":{\"x.weight\":7}}", LL_EFORMAT, "must be a file name"},
        {"{\"weight_map\":{}}", LL_EFORMAT, "\"weight_map\" is empty"},
        {"{\"metadata\":{}}", LL_EFORMAT, "missing \"weight_map\""},
        {"{\"weight_map\":[]}", LL_EFORMAT, "\"weight_map\" is not a JSON object"},
        {"{\"weight_map\":", LL_EJSON, "invalid JSON"},
    };
    for (size_t i = 0; i < LL_ARRAY_LEN(cases); i++) {
        char sub[32];
        snprintf(sub, sizeof sub, "sharded-bad%zu", i);
        const char *dir = make_sharded(sub, cases[i].index);
        struct safetensors *st = (struct safetensors *)1;
        struct ll_err err = {0};
        enum ll_status s = st_open_dir(&st, dir, &err);
        if (s != cases[i].status || !strstr(err.msg, cases[i].needle) ||
            !strstr(err.msg, "model.safetensors.index.json"))
            fail_msg("index case %zu: status %d (want %d), message: %s", i, s, cases[i].status,
                     err.msg);
        assert_null(st);
    }

    /* The same tensor name in two shards. */
    char dir[256], p[300];
    snprintf(dir, sizeof dir, "%s/sharded-dup", tmpdir);
    mkdir(dir, 0755);
    float v[2] = {1, 2};
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    write_st(p, UINT64_MAX, "{" T("x", "F32", "[2]", 0, 8) "}", v, sizeof v);
    snprintf(p, sizeof p, "%s/b.safetensors", dir);
    write_st(p, UINT64_MAX, "{" T("x", "F32", "[2]", 0, 8) "}", v, sizeof v);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    struct safetensors *st = NULL;
    struct ll_err err = {0};
    assert_int_equal(st_open_dir(&st, dir, &err), LL_EFORMAT);
    assert_non_null(strstr(err.msg, "'x' appears in two shards"));

    /* A directory with no weights at all. */
    snprintf(dir, sizeof dir, "%s/empty", tmpdir);
    mkdir(dir, 0755);
    assert_int_equal(st_open_dir(&st, dir, &err), LL_EIO);
    assert_non_null(strstr(err.msg, "neither model.safetensors nor"));
    assert_null(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file),
        cmocka_unit_test(test_metadata_only),
        cmocka_unit_test(test_misaligned_copied),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_nul_in_header),
        cmocka_unit_test(test_truncated_and_missing),
        cmocka_unit_test(test_header_limit),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_sharded_bad),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
