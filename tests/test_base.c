/*
 * test_base.c: the shared toolkit of src/base: the byte buffer (growth, NUL, failure, take),
 * UTF-8 (validity edges, maximal-subpart repair like Python's errors="replace", encode), the
 * JSON helpers (parse errors with line/column, trailing data, getters' types and ranges, writers'
 * escaping) and the hash mixer's fixed values.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "hash.h"
#include "json.h"
#include "utf8.h"

static void test_buf(void **state)
{
    (void)state;
    struct ll_buf b = {0};
    for (int i = 0; i < 1000; i++)
        assert_true(ll_buf_printf(&b, "%d,", i));
    assert_int_equal(b.len, strlen(b.data));
    assert_memory_equal(b.data, "0,1,2,", 6);
    assert_string_equal(b.data + b.len - 4, "999,");
    b.len = 2; /* shorten, then take restores the NUL */
    char *s = ll_buf_take(&b);
    assert_string_equal(s, "0,");
    free(s);
    assert_null(b.data);
    assert_int_equal(b.len, 0);

    s = ll_buf_take(&b); /* empty → "" */
    assert_string_equal(s, "");
    free(s);

    assert_true(ll_buf_append(&b, "a\0b", 3));
    assert_int_equal(b.len, 3);
    assert_true(ll_buf_putc(&b, 'c'));
    assert_memory_equal(b.data, "a\0bc", 5);
    ll_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");

    /* a request that cannot be met fails, and the failure sticks */
    assert_false(ll_buf_reserve(&b, SIZE_MAX - 8));
    assert_true(b.failed);
    assert_false(ll_buf_puts(&b, "x"));
    assert_null(ll_buf_take(&b));
    assert_false(b.failed);
    ll_buf_free(&b);
}

static void test_utf8_valid(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t bad; /* offset of the first invalid byte, or SIZE_MAX */
    } cases[] = {
        {"plain ascii", SIZE_MAX},
        {"h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x80", SIZE_MAX},
        {"ab\xC0\xAF", 2},          /* overlong '/' */
        {"a\xE0\x80\xAF", 1},       /* overlong 3-byte */
        {"\xED\xA0\x80", 0},        /* surrogate U+D800 */
        {"x\xF4\x90\x80\x80", 1},   /* past U+10FFFF */
        {"ok\xE4\xB8", 2},          /* truncated at the end */
        {"\x80", 0},                /* lone continuation */
        {"abcdefgh12345678\xFF", 16}, /* after the 8-byte ASCII fast path */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].s), at = 12345;
        bool ok = ll_utf8_valid(cases[i].s, n, &at);
        if (cases[i].bad == SIZE_MAX) {
            assert_true(ok);
            assert_int_equal(ll_utf8_valid_prefix(cases[i].s, n), n);
        } else {
            assert_false(ok);
            assert_int_equal(at, cases[i].bad);
        }
    }
}

static void test_utf8_repair(void **state)
{
    (void)state;
    /* Python: b"a\xF0\x9F\x98b\xE0\x80\xC3".decode(errors="replace") == "a\ufffdb\ufffd\ufffd\ufffd"
     * (F0 9F 98 is one maximal subpart; E0 80: E0 alone, then 80; C3 cut off by the end) */
    const char in[] = "a\xF0\x9F\x98" "b\xE0\x80\xC3";
    char *out;
    size_t len;
    assert_int_equal(ll_utf8_repair(in, sizeof in - 1, &out, &len), LL_OK);
    assert_string_equal(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    assert_int_equal(len, strlen(out));
    free(out);

    char e[4];
    assert_int_equal(ll_utf8_encode(e, 0x41), 1);
    assert_int_equal(ll_utf8_encode(e, 0xE9), 2);
    assert_memory_equal(e, "\xC3\xA9", 2);
    assert_int_equal(ll_utf8_encode(e, 0x4E2D), 3);
    assert_memory_equal(e, "\xE4\xB8\xAD", 3);
    assert_int_equal(ll_utf8_encode(e, 0x1F600), 4);
    assert_memory_equal(e, "\xF0\x9F\x98\x80", 4);

    enum ll_utf8_status st;
    uint32_t cp = 0;
    assert_int_equal(ll_utf8_scan((const unsigned char *)"\xF0\x9F\x98\x80", 4, &st, &cp), 4);
    assert_int_equal(st, LL_UTF8_OK);
    assert_int_equal(cp, 0x1F600);
    assert_int_equal(ll_utf8_scan((const unsigned char *)"\xF0\x9F", 2, &st, &cp), 2);
    assert_int_equal(st, LL_UTF8_SHORT);
}

static void test_json_parse(void **state)
{
    (void)state;
    cJSON *j;
    struct ll_err err = {0};
    const char *ok = " {\"a\": 1} \n";
    assert_int_equal(ll_json_parse(&j, ok, strlen(ok), "x", &err), LL_OK);
    assert_true(cJSON_IsObject(j));
    cJSON_Delete(j);

    const char *bad = "{\n  \"a\": tru\n}";
    assert_int_equal(ll_json_parse(&j, bad, strlen(bad), "config.json", &err), LL_EJSON);
    assert_null(j);
    assert_string_equal(err.msg, "config.json: invalid JSON at line 2, column 8 (byte offset 9)");

    const char *trailing = "[1] x ";
    assert_int_equal(ll_json_parse(&j, trailing, strlen(trailing), "body", &err), LL_EJSON);
    assert_string_equal(err.msg, "body: invalid JSON at line 1, column 5 (byte offset 4)");
    const char *cut = "{\"a\": ";
    assert_int_equal(ll_json_parse(&j, cut, strlen(cut), "f", &err), LL_EJSON);
    assert_non_null(strstr(err.msg, "at the end of the text (truncated?)"));
    assert_int_equal(ll_json_parse(&j, "[1,\0 2]", 7, "f", &err), LL_EJSON);
    assert_non_null(strstr(err.msg, "(byte offset 3): a control byte (0x00)"));
    assert_int_equal(ll_json_parse(&j, "{\"a\":\"x\x01y\"}", 11, "f", &err), LL_EJSON);
    assert_non_null(strstr(err.msg, "(byte offset 7): a control byte (0x01)"));

    /* length is honoured: nothing past len is read */
    assert_int_equal(ll_json_parse(&j, "[1]]]", 3, "body", &err), LL_OK);
    cJSON_Delete(j);
}

static void test_json_get(void **state)
{
    (void)state;
    const char *text = "{\"i\": 7, \"f\": 2.5, \"big\": 1e300, \"s\": \"hi\", \"b\": true, "
                       "\"n\": null, \"frac\": 1.5}";
    cJSON *j;
    struct ll_err err = {0};
    assert_int_equal(ll_json_parse(&j, text, strlen(text), "t", &err), LL_OK);
    long long i = -1;
    bool present = true;
    assert_int_equal(ll_json_get_int(j, "absent", 0, 10, &i, &present, &err), LL_OK);
    assert_false(present);
    assert_int_equal(i, -1);
    assert_int_equal(ll_json_get_int(j, "n", 0, 10, &i, &present, &err), LL_OK); /* null */
    assert_false(present);
    assert_int_equal(ll_json_get_int(j, "i", 0, 10, &i, &present, &err), LL_OK);
    assert_true(present);
    assert_int_equal(i, 7);
    assert_int_equal(ll_json_get_int(j, "i", 0, 5, &i, NULL, &err), LL_EINVAL);
    assert_string_equal(err.msg, "'i' must be between 0 and 5, got 7");
    assert_int_equal(ll_json_get_int(j, "s", 0, 5, &i, NULL, &err), LL_ETYPE);
    assert_string_equal(err.msg, "'s' must be an integer, not a string");
    assert_int_equal(ll_json_get_int(j, "frac", 0, 5, &i, NULL, &err), LL_ETYPE);
    assert_int_equal(ll_json_get_int(j, "big", 0, 5, &i, NULL, &err), LL_EINVAL);

    double d = 0;
    assert_int_equal(ll_json_get_num(j, "f", 0, 3, false, &d, &present, &err), LL_OK);
    assert_true(present);
    assert_true(d == 2.5);
    assert_int_equal(ll_json_get_num(j, "f", 2.5, 3, true, &d, NULL, &err), LL_EINVAL);
    assert_string_equal(err.msg, "'f' must be greater than 2.5 and at most 3, got 2.5");
    assert_int_equal(ll_json_get_num(j, "b", 0, 3, false, &d, NULL, &err), LL_ETYPE);
    assert_string_equal(err.msg, "'b' must be a number, not a boolean");

    bool b = false;
    assert_int_equal(ll_json_get_bool(j, "b", &b, &present, &err), LL_OK);
    assert_true(b && present);
    const char *s = NULL;
    assert_int_equal(ll_json_get_str(j, "s", &s, &present, &err), LL_OK);
    assert_string_equal(s, "hi");
    assert_int_equal(ll_json_get_str(j, "i", &s, NULL, &err), LL_ETYPE);
    assert_string_equal(err.msg, "'i' must be a string, not a number");
    assert_null(ll_json_member(j, "n"));
    assert_null(ll_json_member(cJSON_GetObjectItem(j, "i"), "x")); /* not an object */
    cJSON_Delete(j);
}

static void test_json_write(void **state)
{
    (void)state;
    struct ll_buf b = {0};
    ll_json_put_str(&b, "a\"b\\c\n\x01\0z", 9);
    ll_buf_putc(&b, ' ');
    ll_json_put_str_lossy(&b, "x\xFFy\xE4\xB8", 5);
    ll_buf_putc(&b, ' ');
    ll_json_put_cstr(&b, NULL);
    ll_buf_putc(&b, ' ');
    ll_json_put_int(&b, -42);
    ll_buf_putc(&b, ' ');
    ll_json_put_num(&b, 0.5);
    ll_buf_putc(&b, ' ');
    ll_json_put_num(&b, 1.0 / 0.0);
    char *s = ll_buf_take(&b);
    assert_string_equal(s, "\"a\\\"b\\\\c\\n\\u0001\\u0000z\" \"x\xEF\xBF\xBDy\xEF\xBF\xBD\" "
                           "null -42 0.5 null");
    free(s);
    /* what was written parses back */
    ll_json_put_str(&b, "q\"\\\t\x1f\xC3\xA9", 7);
    cJSON *j;
    struct ll_err err;
    assert_int_equal(ll_json_parse(&j, b.data, b.len, "w", &err), LL_OK);
    assert_string_equal(cJSON_GetStringValue(j), "q\"\\\t\x1f\xC3\xA9");
    cJSON_Delete(j);
    ll_buf_free(&b);
}

static void test_hash(void **state)
{
    (void)state;
    /* splitmix64 reference: state 0 → first outputs (the published test vector) */
    uint64_t st = 0;
    assert_true(ll_splitmix64(&st) == 0xe220a8397b1dcdafull);
    assert_true(ll_splitmix64(&st) == 0x6e789e6aa1b965f4ull);
    assert_true(ll_mix64(0) == 0);
    assert_true(ll_hash_bytes("abc", 3) != ll_hash_bytes("abd", 3));
    assert_true(ll_hash_bytes("abcdefghi", 9) != ll_hash_bytes("abcdefghj", 9));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_repair), cmocka_unit_test(test_json_parse),
        cmocka_unit_test(test_json_get),   cmocka_unit_test(test_json_write),
        cmocka_unit_test(test_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
