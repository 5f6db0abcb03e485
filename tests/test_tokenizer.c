/*
 * test_tokenizer.c: the BPE tokenizer against the reference data in tests/fixtures/
 * (tokenizer-cases.json, chat-encode-cases.json, the DeepSeek-R1-Distill-Qwen tokenizer in
 * tiny-qwen2/; qwen3-tokenizer-cases.json with models/qwen3-tokenizer, llama3-tokenizer-cases.json
 * with models/llama3-tokenizer, mistral-nemo-tokenizer-cases.json with
 * models/mistral-nemo-tokenizer, o200k-tokenizer-cases.json with models/o200k-tokenizer; the
 * SentencePiece-style llama2- and gemma3-tokenizer-cases.json with models/llama2-tokenizer and
 * models/gemma3-tokenizer), plus: invalid UTF-8
 * handled like Python's errors="replace", the byte-level table, incremental decoding, ids
 * without text, special-token lookups, very long inputs, concurrent encoding, a small
 * synthetic tokenizer.json for the added-token options, the post-processor and every kind of
 * malformed file, and a synthetic SentencePiece-style one for each option of that scheme and
 * each variant refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "tokenizer.h"
#include "tokenizer_impl.h" /* tok_pretokenize(), to check the split by itself */
#include "util.h"

#define MODEL_DIR "tests/fixtures/tiny-qwen2"
#define BOS_TEXT "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define EOS_TEXT "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define FFFD "\xEF\xBF\xBD"

static struct tokenizer *tok; /* the real tokenizer, loaded once for the group */

/* ---- helpers ---- */

static cJSON *load_json(const char *path)
{
    char *data;
    size_t len;
    struct ll_err err = {0};
    if (ll_read_file(path, &data, &len, &err) != LL_OK)
        fail_msg("%s", err.msg);
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    assert_non_null(root);
    return root;
}

static bool valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

static char *nfc(const char *s)
{
    char *r = (char *)utf8proc_NFC((const utf8proc_uint8_t *)s);
    assert_non_null(r);
    return r;
}

static void encode(const struct tokenizer *t, const char *s, size_t n, bool special,
                   int32_t **ids, size_t *n_ids)
{
    struct ll_err err = {0};
    if (tokenizer_encode(t, s, n, special, ids, n_ids, &err) != LL_OK)
        fail_msg("encode: %s", err.msg);
    assert_non_null(*ids);
}

static char *decode(const struct tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    struct ll_err err = {0};
    char *text;
    size_t l;
    if (tokenizer_decode(t, ids, n, false, &text, &l, &err) != LL_OK)
        fail_msg("decode: %s", err.msg);
    assert_int_equal(strlen(text) <= l, 1);
    if (len)
        *len = l;
    return text;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "%s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

static void assert_ids(const char *name, const int32_t *got, size_t n, const int32_t *want,
                       size_t n_want)
{
    if (n != n_want || memcmp(got, want, n * sizeof *got)) {
        fprintf(stderr, "case %s:\n", name);
        print_ids("  got ", got, n);
        print_ids("  want", want, n_want);
        fail_msg("ids differ for %s", name);
    }
}

static void expect_ids(const struct tokenizer *t, const char *text, bool special,
                       const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    encode(t, text, strlen(text), special, &ids, &n);
    assert_ids(text, ids, n, want, n_want);
    free(ids);
}
#define EXPECT(t, text, special, ...)                                                          \
    do {                                                                                       \
        const int32_t want_[] = {__VA_ARGS__};                                                 \
        expect_ids(t, text, special, want_, LL_ARRAY_LEN(want_));                              \
    } while (0)

/* The ids of a JSON array, malloc'd. */
static int32_t *json_ids(const cJSON *arr, size_t *n)
{
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    assert_non_null(v);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (int32_t)x->valuedouble;
    return v;
}

/* Encoding s must give the same ids as encoding t; decoding must give back t. */
static void assert_same_encoding(const char *s, size_t n, const char *t)
{
    int32_t *a, *b;
    size_t na, nb;
    encode(tok, s, n, false, &a, &na);
    encode(tok, t, strlen(t), false, &b, &nb);
    assert_ids(t, a, na, b, nb);
    char *back = decode(tok, a, na, NULL);
    assert_string_equal(back, t);
    free(back);
    free(a);
    free(b);
}

/* Id of the token that stands for one byte, through an independent GPT-2 table. */
static int32_t byte_token(const struct tokenizer *t, unsigned b)
{
    unsigned cp = b, k = 0;
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
                k++;
        cp = 256 + k;
    }
    char s[3] = {0};
    if (cp < 0x80) {
        s[0] = (char)cp;
    } else {
        s[0] = (char)(0xC0 | cp >> 6);
        s[1] = (char)(0x80 | (cp & 0x3F));
    }
    return tokenizer_token_to_id(t, s);
}

/* ---- the real tokenizer against the reference data ---- */

static int group_setup(void **state)
{
    (void)state;
    struct ll_err err = {0};
    if (tokenizer_load(&tok, MODEL_DIR, &err) != LL_OK) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tokenizer_free(tok);
    return 0;
}

/* Feed ids one by one: every piece is complete UTF-8 and the pieces add up to the decode.
 * Returns how many ids with bytes gave no text yet (a character still incomplete). */
static int check_stream_of(const struct tokenizer *t, const int32_t *ids, size_t n_ids,
                           bool skip_special)
{
    int held = 0;
    struct tokenizer_stream *s;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_stream_init(&s, t, skip_special, &err), LL_OK);
    char *whole;
    size_t whole_len;
    assert_int_equal(tokenizer_decode(t, ids, n_ids, skip_special, &whole, &whole_len, &err),
                     LL_OK);
    char *joined = malloc(whole_len + 1);
    assert_non_null(joined);
    size_t k = 0;
    for (size_t i = 0; i <= n_ids; i++) {
        size_t len;
        const char *piece = i < n_ids ? tokenizer_stream_feed(s, ids[i], &len)
                                      : tokenizer_stream_flush(s, &len);
        assert_int_equal(strlen(piece) <= len, 1);
        assert_true(valid_utf8(piece, len));
        size_t n_bytes = 0;
        if (i < n_ids && tokenizer_id_bytes(t, ids[i], &n_bytes) && n_bytes && !len)
            held++;
        assert_true(k + len <= whole_len);
        memcpy(joined + k, piece, len);
        k += len;
    }
    assert_int_equal(k, whole_len);
    assert_memory_equal(joined, whole, whole_len);
    free(joined);
    free(whole);
    tokenizer_stream_free(s);
    return held;
}

static int check_stream(const int32_t *ids, size_t n_ids, bool skip_special)
{
    return check_stream_of(tok, ids, n_ids, skip_special);
}

/* Every case of the file at path through tokenizer t: the ids exactly, and decoding them gives
 * back the text (its NFC when the tokenizer normalises, nfc_text), after bos_text when the case adds
 * special tokens. Returns the count. */
static int run_token_cases(const struct tokenizer *t, const char *path, const char *bos_text,
                           bool nfc_text)
{
    cJSON *cases = load_json(path);
    int n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        bool special = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special_tokens"));
        size_t n_want, n;
        int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &n_want), *ids;
        encode(t, text, strlen(text), special, &ids, &n);
        assert_ids(name, ids, n, want, n_want);

        char *norm = nfc_text ? nfc(text) : strdup(text), *back = decode(t, ids, n, NULL);
        char *expect = malloc(strlen(norm) + strlen(bos_text) + 1);
        assert_non_null(expect);
        sprintf(expect, "%s%s", special ? bos_text : "", norm);
        const cJSON *decoded = cJSON_GetObjectItem(c, "decoded"); /* when not the text back */
        if (decoded)
            assert_string_equal(back, decoded->valuestring);
        else
            assert_string_equal(back, expect);
        check_stream_of(t, ids, n, false);
        check_stream_of(t, ids, n, true);
        free(expect);
        free(back);
        free(norm);
        free(ids);
        free(want);
        n_cases++;
    }
    cJSON_Delete(cases);
    return n_cases;
}

static void test_fixture_cases(void **state)
{
    (void)state;
    assert_int_equal(run_token_cases(tok, "tests/fixtures/tokenizer-cases.json", BOS_TEXT, true), 51);
}

/* Qwen3's tokenizer (models/qwen3-tokenizer): the same vocabulary and merges, its own added
 * tokens (<think> 151667, </think> 151668, <tool_call>, <tool_response>, ...) and no BOS, so
 * adding special tokens adds nothing. */
static void test_qwen3_cases(void **state)
{
    (void)state;
    struct tokenizer *q3;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&q3, "models/qwen3-tokenizer", &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    assert_int_equal(tokenizer_token_to_id(q3, "<think>"), 151667);
    assert_int_equal(tokenizer_token_to_id(q3, "</think>"), 151668);
    assert_int_equal(run_token_cases(q3, "tests/fixtures/qwen3-tokenizer-cases.json", "", true), 48);
    tokenizer_free(q3);
}

/* Llama 3.2's tokenizer (models/llama3-tokenizer): the Llama 3 split (digits in runs of up to
 * three), ignore_merges, BOS 128000 from the post-processor. The same text through the Qwen2
 * split differs wherever two digits meet, so the cases depend on the pattern. */
static void test_llama3_cases(void **state)
{
    (void)state;
    struct tokenizer *l3;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&l3, "models/llama3-tokenizer", &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    assert_int_equal(tokenizer_token_to_id(l3, "<|begin_of_text|>"), 128000);
    assert_int_equal(tokenizer_token_to_id(l3, "<|eot_id|>"), 128009);
    assert_int_equal(run_token_cases(l3, "tests/fixtures/llama3-tokenizer-cases.json",
                                     "<|begin_of_text|>", false),
                     116);
    /* "1234567" is "123", "456", "7" */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tokenizer_encode(l3, "1234567", 7, false, &ids, &n, &err), LL_OK);
    assert_int_equal(n, 3);
    char piece[8];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char *t = NULL;
        size_t tl = 0;
        assert_int_equal(tokenizer_decode(l3, &ids[i], 1, false, &t, &tl, &err), LL_OK);
        assert_true(len + tl < sizeof piece);
        assert_int_equal(tl, i < 2 ? 3 : 1);
        memcpy(piece + len, t, tl);
        len += tl;
        free(t);
    }
    assert_memory_equal(piece, "1234567", 7);
    free(ids);
    tokenizer_free(l3);
}

/* o200k's tokenizer (models/o200k-tokenizer, GPT-4o's; Phi-4-mini's extends it): tekken's
 * cased words, each with an optional contraction after it ("it's" one piece, "IT'S" too, an
 * apostrophe elsewhere a symbol), digits in runs of up to three, its Split written as Removed
 * with invert (the same pieces as Isolated, since the pattern matches every character); no
 * post-processor, so no BOS. */
static void test_o200k_cases(void **state)
{
    (void)state;
    struct tokenizer *t;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&t, "models/o200k-tokenizer", &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    assert_int_equal(tokenizer_vocab_size(t), 200019);
    assert_int_equal(tokenizer_token_to_id(t, "<|endoftext|>"), 199999);
    assert_int_equal(tokenizer_token_to_id(t, "<|endofprompt|>"), 200018);
    assert_true(tokenizer_is_special(t, 200018));
    assert_int_equal(run_token_cases(t, "tests/fixtures/o200k-tokenizer-cases.json", "", false),
                     73);
    /* the same text under tekken's rules (no contractions, digits one by one) splits
     * differently: "it's" joins, "12345" is "123" "45" */
    int32_t *ids;
    size_t n;
    encode(t, "it's", 4, false, &ids, &n);
    assert_int_equal(n, 1);
    free(ids);
    encode(t, "12345", 5, false, &ids, &n);
    assert_int_equal(n, 2);
    free(ids);
    tokenizer_free(t);
}

/* Mistral-Nemo's tokenizer (models/mistral-nemo-tokenizer): the tekken split (words split where
 * the case changes, no contractions, [\r\n/]* after symbols), 1,000 added tokens at ids 0..999
 * that the BPE vocabulary holds as well, BOS <s> 1 from the post-processor. */
static void test_mistral_nemo_cases(void **state)
{
    (void)state;
    struct tokenizer *mn;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&mn, "models/mistral-nemo-tokenizer", &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    assert_int_equal(tokenizer_vocab_size(mn), 131072);
    assert_int_equal(tokenizer_token_to_id(mn, "<s>"), 1);
    assert_int_equal(tokenizer_token_to_id(mn, "[INST]"), 3);
    assert_int_equal(tokenizer_token_to_id(mn, "<SPECIAL_999>"), 999);
    assert_int_equal(tokenizer_bos_id(mn), 1);
    assert_int_equal(tokenizer_eos_id(mn), 2);
    assert_true(tokenizer_is_special(mn, 3));
    assert_false(tokenizer_is_special(mn, 1000));
    assert_int_equal(
        run_token_cases(mn, "tests/fixtures/mistral-nemo-tokenizer-cases.json", "<s>", false), 124);

    /* invalid UTF-8 encodes as U+FFFD would (fixture case replacement_chars) */
    int32_t *a, *b;
    size_t na, nb;
    encode(mn, "caf\xE9 \xFF", 6, false, &a, &na);
    encode(mn, "caf" FFFD " " FFFD, 9, false, &b, &nb);
    assert_ids("invalid UTF-8", a, na, b, nb);
    free(a);
    free(b);

    /* skip_special drops <s>, [INST] and [/INST] */
    encode(mn, "[INST]Hi[/INST]", 15, true, &a, &na);
    char *text;
    size_t len;
    assert_int_equal(tokenizer_decode(mn, a, na, true, &text, &len, &err), LL_OK);
    assert_string_equal(text, "Hi");
    free(text);
    free(a);

    /* long runs that make the word alternatives look far ahead round-trip: capitals ending in a
     * small letter (one piece), a mark before capitals (the mark alone, then the capitals),
     * alternating case (a piece every two characters) */
    const size_t n = 1 << 16;
    char *t = malloc(2 * n + 4);
    assert_non_null(t);
    for (int kind = 0; kind < 3; kind++) {
        size_t m = 0;
        if (kind == 1) {
            memcpy(t, "\xCC\x81", 2); /* U+0301 */
            m = 2;
        }
        for (size_t i = 0; i < n; i++)
            t[m++] = kind == 2 ? "aB"[i % 2] : 'A';
        t[m++] = kind == 0 ? 'a' : ' ';
        encode(mn, t, m, false, &a, &na);
        char *back = decode(mn, a, na, &len);
        assert_int_equal(len, m);
        assert_memory_equal(back, t, m);
        free(back);
        free(a);
    }
    free(t);
    tokenizer_free(mn);
}

/* Load a tokenizer directory that must load. */
static struct tokenizer *load_ok(const char *dir)
{
    struct tokenizer *t;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&t, dir, &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    return t;
}

/* The Llama-style tokenizer of models/llama2-tokenizer (Mistral-7B-v0.1's files, as the npm
 * package ships them): normalizer Prepend "▁" + Replace " " → "▁", no pre-tokenizer (the
 * whole part is one BPE piece), byte_fallback, decoder Replace, ByteFallback, Fuse, Strip(1). */
static void test_llama2_cases(void **state)
{
    (void)state;
    struct tokenizer *t = load_ok("models/llama2-tokenizer");
    assert_int_equal(tokenizer_vocab_size(t), 32000);
    assert_int_equal(tokenizer_bos_id(t), 1);
    assert_int_equal(tokenizer_eos_id(t), 2);
    assert_int_equal(tokenizer_token_to_id(t, "<0x0A>"), 13);
    assert_int_equal(run_token_cases(t, "tests/fixtures/llama2-tokenizer-cases.json", "", false),
                     130);
    /* "\n" has no token of its own: the byte token <0x0A> (13), after "▁" (28705) */
    EXPECT(t, "\n", false, 28705, 13);
    EXPECT(t, "", true, 1);
    /* Strip drops one leading space of the whole text, so "▁Hello" alone decodes to "Hello" and
     * after <s> to " Hello"; a stream does the same */
    const int32_t hello[] = {22557, 1, 22557};
    char *text = decode(t, hello, 3, NULL);
    assert_string_equal(text, "Hello<s> Hello");
    free(text);
    assert_int_equal(tokenizer_decode(t, hello, 3, true, &text, NULL, &(struct ll_err){0}), LL_OK);
    assert_string_equal(text, "Hello Hello");
    free(text);
    check_stream_of(t, hello, 3, false);
    check_stream_of(t, hello, 3, true);
    tokenizer_free(t);
}

/* Gemma 3's tokenizer (models/gemma3-tokenizer): 262,144 tokens plus <image_soft_token>,
 * normalizer Replace " " → "▁", Split " " MergedWithPrevious (after the normalizer it never
 * matches), merges as pairs, 6,415 added tokens (whitespace runs, <start_of_turn>, ...),
 * byte_fallback, decoder Replace, ByteFallback, Fuse. */
static void test_gemma3_cases(void **state)
{
    (void)state;
    struct tokenizer *t = load_ok("models/gemma3-tokenizer");
    assert_int_equal(tokenizer_vocab_size(t), 262145);
    assert_int_equal(tokenizer_token_to_id(t, "<start_of_turn>"), 105);
    assert_int_equal(tokenizer_token_to_id(t, "<end_of_turn>"), 106);
    assert_int_equal(tokenizer_bos_id(t), 2);
    assert_int_equal(tokenizer_eos_id(t), 106);
    assert_int_equal(run_token_cases(t, "tests/fixtures/gemma3-tokenizer-cases.json", "", false),
                     130);
    tokenizer_free(t);
}

/* The pieces of one text, as the pre-tokenizer hands them on. */
struct pieces {
    const char *s[8192];
    size_t n[8192], count;
};

static enum ll_status add_piece(void *ctx, const char *s, size_t n, int32_t id)
{
    struct pieces *p = ctx;
    assert_int_equal(id, -1);
    assert_true(p->count < LL_ARRAY_LEN(p->s));
    p->s[p->count] = s;
    p->n[p->count++] = n;
    return LL_OK;
}

/* Mistral-Nemo's split by itself (tests/fixtures/mistral-nemo-split-cases.json): the pieces of
 * the tekken regex, which the ids above do not always show (a different split of rare
 * characters can give the same byte tokens; the vocabulary has no token of two digits). */
static void test_mistral_nemo_split(void **state)
{
    (void)state;
    struct tokenizer *mn;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_load(&mn, "models/mistral-nemo-tokenizer", &err), LL_OK);
    cJSON *cases = load_json("tests/fixtures/mistral-nemo-split-cases.json");
    int n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "pieces");
        static struct pieces got;
        got.count = 0;
        assert_int_equal(tok_pretokenize(mn, text, strlen(text), add_piece, &got), LL_OK);
        bool same = got.count == (size_t)cJSON_GetArraySize(want);
        for (size_t i = 0; same && i < got.count; i++) {
            const char *w = cJSON_GetArrayItem(want, (int)i)->valuestring;
            same = strlen(w) == got.n[i] && !memcmp(w, got.s[i], got.n[i]);
        }
        if (!same) {
            fprintf(stderr, "case %s: %zu pieces, want %d:", name, got.count,
                    cJSON_GetArraySize(want));
            for (size_t i = 0; i < got.count; i++)
                fprintf(stderr, " [%.*s]", (int)got.n[i], got.s[i]);
            fprintf(stderr, "\n");
            fail_msg("pieces differ for %s", name);
        }
        n_cases++;
    }
    assert_int_equal(n_cases, 462);
    cJSON_Delete(cases);
    tokenizer_free(mn);
}

static void test_chat_encode_cases(void **state)
{
    (void)state;
    cJSON *cases = load_json("tests/fixtures/chat-encode-cases.json");
    int n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *text = cJSON_GetObjectItem(c, "rendered")->valuestring;
        size_t n_want, n;
        int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &n_want), *ids;
        encode(tok, text, strlen(text), false, &ids, &n);
        assert_ids(name, ids, n, want, n_want);
        char *back = decode(tok, ids, n, NULL);
        assert_string_equal(back, text);
        free(back);
        free(ids);
        free(want);
        n_cases++;
    }
    assert_true(n_cases >= 2);
    cJSON_Delete(cases);
}

/* Each input next to what Python's bytes.decode("utf-8", errors="replace") makes of it. */
static void test_invalid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"a\x80" "b", 3, "a" FFFD "b"},                         /* lone continuation */
        {"\xBF\x80", 2, FFFD FFFD},                            /* two of them */
        {"x\xC3", 2, "x" FFFD},                                 /* truncated at the end */
        {"\xE4\xB8z", 3, FFFD "z"},                             /* truncated 3-byte */
        {"\xF0\x9F\x98", 3, FFFD},                              /* truncated 4-byte: one */
        {"\xF0\x90\x80" "A", 4, FFFD "A"},
        {"\xE0\xA0", 2, FFFD},
        {"\xC0\x80", 2, FFFD FFFD},                             /* overlong NUL */
        {"\xC1\xBF", 2, FFFD FFFD},                             /* overlong */
        {"\xE0\x80\x80", 3, FFFD FFFD FFFD},                    /* overlong 3-byte */
        {"\xF0\x80\x80\x80", 4, FFFD FFFD FFFD FFFD},           /* overlong 4-byte */
        {"\xED\xA0\x80", 3, FFFD FFFD FFFD},                    /* surrogate D800 */
        {"\xED\xBF\xBF", 3, FFFD FFFD FFFD},                    /* surrogate DFFF */
        {"\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD},           /* above U+10FFFF */
        {"\xF5\x80\x80\x80", 4, FFFD FFFD FFFD FFFD},           /* F5 */
        {"\xFF", 1, FFFD},
        {"\xFE\xFF", 2, FFFD FFFD},
        {"\xF8\x88\x80\x80\x80", 5, FFFD FFFD FFFD FFFD FFFD}, /* old 5-byte form */
        {"\xC3\xA9\xE9t\xE9", 5, "\xC3\xA9" FFFD "t" FFFD},   /* Latin-1 inside UTF-8 */
        {"\xE4\xB8\xAD\xE4", 4, "\xE4\xB8\xAD" FFFD},
        {"\xF0\x9F\x98\x80\x9F", 5, "\xF0\x9F\x98\x80" FFFD},
        {"Hello \xFFworld\xC3", 13, "Hello " FFFD "world" FFFD},
        {"<think>\x80</think>", 16, "<think>" FFFD "</think>"},
    };
    for (size_t i = 0; i < LL_ARRAY_LEN(cases); i++)
        assert_same_encoding(cases[i].in, cases[i].n, cases[i].want);
}

static void test_nul_and_control_bytes(void **state)
{
    (void)state;
    const char text[] = "a\0b\x01\x7F\n";
    int32_t *ids;
    size_t n, len;
    encode(tok, text, sizeof text - 1, false, &ids, &n);
    char *back = decode(tok, ids, n, &len);
    assert_int_equal(len, sizeof text - 1);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
}

static void test_byte_table(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        int32_t id = byte_token(tok, b);
        assert_true(id >= 0);
        size_t n;
        const char *bytes = tokenizer_id_bytes(tok, id, &n);
        assert_non_null(bytes);
        assert_int_equal(n, 1);
        assert_int_equal((unsigned char)bytes[0], b);
    }
}

static void test_special_lookup(void **state)
{
    (void)state;
    assert_int_equal(tokenizer_vocab_size(tok), 151665);
    assert_int_equal(tokenizer_token_to_id(tok, "<think>"), 151648);
    assert_int_equal(tokenizer_token_to_id(tok, "</think>"), 151649);
    assert_int_equal(tokenizer_token_to_id(tok, "no such token"), -1);
    assert_int_equal(tokenizer_bos_id(tok), 151646);
    assert_int_equal(tokenizer_eos_id(tok), 151643);
    assert_string_equal(tokenizer_bos_token(tok), BOS_TEXT);
    assert_string_equal(tokenizer_eos_token(tok), EOS_TEXT);
    assert_string_equal(tokenizer_id_to_token(tok, 151643), EOS_TEXT);
    assert_true(tokenizer_is_special(tok, 151643));
    assert_true(tokenizer_is_special(tok, 151646));
    assert_false(tokenizer_is_special(tok, 151648));
    assert_false(tokenizer_is_special(tok, 9707));
    assert_null(tokenizer_id_to_token(tok, 151665));
    assert_null(tokenizer_id_to_token(tok, -1));
    /* the vocabulary form of a token with a leading space */
    int32_t id = tokenizer_token_to_id(tok, "\xC4\xA0Hello"); /* "ĠHello" */
    assert_true(id >= 0);
    size_t n;
    const char *b = tokenizer_id_bytes(tok, id, &n);
    assert_int_equal(n, 6);
    assert_memory_equal(b, " Hello", 6);

    /* skip_special drops BOS/EOS but keeps <think> */
    const int32_t ids[] = {151646, 151648, 9707, 151643};
    char *text;
    size_t len;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_decode(tok, ids, 4, true, &text, &len, &err), LL_OK);
    assert_string_equal(text, "<think>Hello");
    free(text);
}

static void test_ids_without_text(void **state)
{
    (void)state;
    const int32_t none[] = {151665, 151700, 151935, 1 << 20, -1, INT32_MIN};
    size_t len;
    char *text = decode(tok, none, LL_ARRAY_LEN(none), &len);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    free(text);
    const int32_t mixed[] = {151700, 9707, 151935};
    text = decode(tok, mixed, 3, NULL);
    assert_string_equal(text, "Hello");
    free(text);
    size_t n;
    assert_null(tokenizer_id_bytes(tok, 151665, &n));
    assert_int_equal(n, 0);

    struct tokenizer_stream *s;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_stream_init(&s, tok, false, &err), LL_OK);
    assert_string_equal(tokenizer_stream_feed(s, 151935, &n), "");
    assert_int_equal(n, 0);
    assert_string_equal(tokenizer_stream_feed(s, -5, &n), "");
    tokenizer_stream_free(s);
}

static void test_stream_decoding(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "Hello, world! 你好，世界。",
        "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙🦙",
        "កាន់តែពិសេសអាចខលចេញ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁 ᄀᄁ",
        "<think>\n嗯，用户问的是KV缓存。\n</think>\n\n答案：分页注意力。",
    };
    int held = 0;
    for (size_t t = 0; t < LL_ARRAY_LEN(texts); t++) {
        int32_t *ids;
        size_t n;
        encode(tok, texts[t], strlen(texts[t]), true, &ids, &n);
        held += check_stream(ids, n, false);
        check_stream(ids, n, true);
        free(ids);
    }
    assert_true(held >= 5); /* the texts do split characters across tokens */

    /* a character split over single-byte tokens comes out whole, with the last byte */
    struct tokenizer_stream *s;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_stream_init(&s, tok, false, &err), LL_OK);
    size_t len;
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xE4), &len), "");
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xB8), &len), "");
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xAD), &len), "\xE4\xB8\xAD");
    /* a sequence that can no longer complete becomes U+FFFD as soon as that is known */
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xE4), &len), "");
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 'a'), &len), FFFD "a");
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0x80), &len), FFFD);
    /* an unfinished character at the end: flush gives one U+FFFD */
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xF0), &len), "");
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0x9F), &len), "");
    assert_string_equal(tokenizer_stream_flush(s, &len), FFFD);
    assert_int_equal(len, 3);
    assert_string_equal(tokenizer_stream_flush(s, &len), "");
    /* reset drops held bytes */
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 0xE4), &len), "");
    tokenizer_stream_reset(s);
    assert_string_equal(tokenizer_stream_feed(s, byte_token(tok, 'z'), &len), "z");
    tokenizer_stream_free(s);

    /* the same bytes through the whole decode */
    const int32_t ids[] = {byte_token(tok, 0xE4), byte_token(tok, 'a'), byte_token(tok, 0xF0),
                           byte_token(tok, 0x9F)};
    char *text = decode(tok, ids, 4, NULL);
    assert_string_equal(text, FFFD "a" FFFD);
    free(text);
    check_stream(ids, 4, false);
}

/* Round trip of a long text: decode(encode(s)) == NFC(s). */
static void check_round_trip(const char *s, size_t n, size_t *n_ids)
{
    int32_t *ids;
    size_t len;
    encode(tok, s, n, false, &ids, n_ids);
    char *back = decode(tok, ids, *n_ids, &len);
    assert_int_equal(len, n);
    assert_memory_equal(back, s, n);
    free(back);
    free(ids);
}

static void test_long_inputs(void **state)
{
    (void)state;
    const size_t mb = 1 << 20;
    char *s = malloc(mb + 1);
    assert_non_null(s);
    size_t n_ids;
    /* one word of 1 MiB: a single pre-token */
    memset(s, 'a', mb);
    check_round_trip(s, mb, &n_ids);
    assert_int_equal(n_ids, mb / 8); /* "aaaaaaaa" is the longest run of a in the vocabulary */
    /* two letters alternating, a 1 MiB word as well */
    for (size_t i = 0; i < mb; i++)
        s[i] = "xy"[i % 2];
    check_round_trip(s, mb, &n_ids);
    /* one Chinese character repeated (3 bytes each), one pre-token */
    size_t k = 0;
    while (k + 3 <= mb) {
        memcpy(s + k, "\xE5\xA5\xBD", 3);
        k += 3;
    }
    check_round_trip(s, k, &n_ids);
    /* runs of spaces, digits and punctuation */
    memset(s, ' ', mb);
    check_round_trip(s, mb, &n_ids);
    assert_true(n_ids < mb / 8);
    memset(s, '7', mb);
    check_round_trip(s, mb, &n_ids);
    assert_int_equal(n_ids, mb); /* \p{N} takes one digit at a time */
    memset(s, '!', mb);
    check_round_trip(s, mb, &n_ids);
    free(s);
}

static void test_mixed_script_100k(void **state)
{
    (void)state;
    static const char *const parts[] = {
        "The quick brown fox jumps over the lazy dog. ",
        "大语言模型推理系统需要高效地管理KV缓存。",
        "нещо на Български ",
        "int main(void) {\n    return 0;\n}\n",
        "    \t\n\n  \r\n",
        "🚀😁✅ ",
        "I'm, you'RE, we'll, they'VE, it's, he'd, ſ'S",
        "Cửa Việt 1314151天～",
        "e\xCC\x81 A\xCC\x8A ",
        "<think>",
        "<｜User｜>",
        "x\xE2\x80\xA8y\xC2\x85z\xE3\x80\x80w",
        "'",
        "\xF0\x9F\x98",
    };
    const size_t target = 100000; /* characters */
    size_t cap = 8 * target, n = 0, chars = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    uint64_t r = 12345;
    while (chars < target) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = parts[(r >> 33) % LL_ARRAY_LEN(parts)];
        size_t len = strlen(p);
        assert_true(n + len < cap);
        memcpy(s + n, p, len);
        n += len;
        for (size_t i = 0; i < len; i++)
            chars += ((unsigned char)p[i] & 0xC0) != 0x80;
    }
    s[n] = '\0';
    /* what the tokenizer must give back: invalid bytes replaced, then NFC */
    size_t fixed_len = 0;
    char *repl = malloc(3 * n + 1);
    assert_non_null(repl);
    for (size_t i = 0; i < n;) {
        if (!strncmp(s + i, "\xF0\x9F\x98", 3) && ((unsigned char)s[i + 3] & 0xC0) != 0x80) {
            memcpy(repl + fixed_len, FFFD, 3); /* the only invalid part above */
            fixed_len += 3;
            i += 3;
        } else {
            repl[fixed_len++] = s[i++];
        }
    }
    repl[fixed_len] = '\0';
    char *want = nfc(repl);
    int32_t *ids;
    size_t n_ids;
    encode(tok, s, n, false, &ids, &n_ids);
    char *back = decode(tok, ids, n_ids, NULL);
    assert_string_equal(back, want);
    free(back);
    free(ids);
    free(want);
    free(repl);
    free(s);
}

/* Every BMP character alone, and the canonical decomposition of every BMP character, each
 * between added tokens (so each is normalised on its own, as Hugging Face does): the result
 * must be utf8proc's NFC of each part. Checks the normaliser's shortcut for text that is
 * already NFC against the full algorithm. */
static void test_nfc_every_bmp_character(void **state)
{
    (void)state;
    size_t cap = 64u << 20, n = 0, m = 0;
    char *text = malloc(cap), *want = malloc(cap);
    assert_non_null(text);
    assert_non_null(want);
    for (int pass = 0; pass < 2; pass++) {
        for (utf8proc_int32_t c = 0x80; c < 0x10000; c++) {
            if (c >= 0xD800 && c <= 0xDFFF)
                continue;
            utf8proc_int32_t seq[32];
            utf8proc_ssize_t k = 1;
            int last = 0;
            seq[0] = c;
            if (pass == 1) {
                k = utf8proc_decompose_char(c, seq, 32, UTF8PROC_DECOMPOSE, &last);
                if (k <= 1 || k > 32)
                    continue;
            }
            utf8proc_uint8_t part[160];
            utf8proc_ssize_t len = 0;
            for (utf8proc_ssize_t i = 0; i < k; i++)
                len += utf8proc_encode_char(seq[i], part + len);
            part[len] = 0;
            char *norm = nfc((const char *)part);
            assert_true(n + (size_t)len + 8 < cap && m + strlen(norm) + 8 < cap);
            memcpy(text + n, part, (size_t)len);
            n += (size_t)len;
            memcpy(text + n, "<think>", 7);
            n += 7;
            memcpy(want + m, norm, strlen(norm));
            m += strlen(norm);
            memcpy(want + m, "<think>", 7);
            m += 7;
            free(norm);
        }
    }
    int32_t *ids;
    size_t n_ids, len;
    encode(tok, text, n, false, &ids, &n_ids);
    char *back = decode(tok, ids, n_ids, &len);
    assert_int_equal(len, m);
    assert_memory_equal(back, want, m);
    free(back);
    free(ids);
    free(text);
    free(want);
}

/* ---- several threads on one tokenizer ---- */

struct thread_job {
    const cJSON *cases;
    int rounds;
    int failures;
};

static void *thread_encode(void *p)
{
    struct thread_job *j = p;
    for (int r = 0; r < j->rounds; r++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, j->cases)
        {
            const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
            bool special = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_special_tokens"));
            const cJSON *want = cJSON_GetObjectItem(c, "ids");
            int32_t *ids;
            size_t n;
            if (tokenizer_encode(tok, text, strlen(text), special, &ids, &n, NULL) != LL_OK) {
                j->failures++;
                continue;
            }
            size_t i = 0;
            const cJSON *x;
            bool same = n == (size_t)cJSON_GetArraySize(want);
            cJSON_ArrayForEach(x, want) same = same && i < n && ids[i++] == (int32_t)x->valuedouble;
            j->failures += !same;
            free(ids);
        }
    }
    return NULL;
}

static void test_concurrent_encode(void **state)
{
    (void)state;
    cJSON *cases = load_json("tests/fixtures/tokenizer-cases.json");
    enum { THREADS = 4 };
    pthread_t th[THREADS];
    struct thread_job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct thread_job){cases, 20, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thread_encode, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    cJSON_Delete(cases);
}

/* ---- a synthetic tokenizer.json ---- */

/* Byte-level form of one byte, as the GPT-2 table writes it (NUL-terminated in out[3]). */
static void byte_char(unsigned b, char out[3])
{
    unsigned cp = b, k = 0;
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
                k++;
        cp = 256 + k;
    }
    memset(out, 0, 3);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
    }
}

static cJSON *added_token(int id, const char *content, bool special, bool lstrip, bool rstrip,
                          bool single_word, bool normalized)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", single_word);
    cJSON_AddBoolToObject(a, "lstrip", lstrip);
    cJSON_AddBoolToObject(a, "rstrip", rstrip);
    cJSON_AddBoolToObject(a, "normalized", normalized);
    cJSON_AddBoolToObject(a, "special", special);
    return a;
}

/*
 * Ids: byte b → b; "ab" 256, "abc" 257, "Ġa" 258, "ĠĠ" 259. Merges (rank order): "a b",
 * ["ab","c"], ["Ġ","a"], "Ġ Ġ". Added: 300 "<x>" lstrip, 301 "[y]" rstrip, 302 "zz" single_word,
 * 303 "é" written decomposed with normalized true, 304 "<s>" special. Post-processor: <s> $A <s>.
 */
static cJSON *synth_tree(void)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddItemToArray(added, added_token(300, "<x>", false, true, false, false, false));
    cJSON_AddItemToArray(added, added_token(301, "[y]", false, false, true, false, false));
    cJSON_AddItemToArray(added, added_token(302, "zz", false, false, false, true, false));
    cJSON_AddItemToArray(added, added_token(303, "e\xCC\x81", false, false, false, false, true));
    cJSON_AddItemToArray(added, added_token(304, "<s>", true, false, false, false, false));
    cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(norm, "type", "NFC");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex",
                            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", false);
    cJSON_AddItemToArray(list, split);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", false);
    cJSON_AddBoolToObject(bl, "trim_offsets", false);
    cJSON_AddBoolToObject(bl, "use_regex", false);
    cJSON_AddItemToArray(list, bl);
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(post, "single");
    cJSON *sp = cJSON_CreateObject(), *seq = cJSON_CreateObject(), *sp2 = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "SpecialToken"), "id", "<s>");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(seq, "Sequence"), "id", "A");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(sp2, "SpecialToken"), "id", "<s>");
    cJSON_AddItemToArray(single, sp);
    cJSON_AddItemToArray(single, seq);
    cJSON_AddItemToArray(single, sp2);
    cJSON *specials = cJSON_AddObjectToObject(post, "special_tokens");
    cJSON *s_entry = cJSON_AddObjectToObject(specials, "<s>");
    cJSON_AddStringToObject(s_entry, "id", "<s>");
    cJSON *s_ids = cJSON_AddArrayToObject(s_entry, "ids");
    cJSON_AddItemToArray(s_ids, cJSON_CreateNumber(304));
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddBoolToObject(model, "byte_fallback", false);
    cJSON_AddBoolToObject(model, "ignore_merges", false);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (unsigned b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    cJSON_AddNumberToObject(vocab, "ab", 256);
    cJSON_AddNumberToObject(vocab, "abc", 257);
    cJSON_AddNumberToObject(vocab, "\xC4\xA0" "a", 258);
    cJSON_AddNumberToObject(vocab, "\xC4\xA0\xC4\xA0", 259);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(merges, cJSON_CreateString("a b"));
    cJSON *m1 = cJSON_CreateArray();
    cJSON_AddItemToArray(m1, cJSON_CreateString("ab"));
    cJSON_AddItemToArray(m1, cJSON_CreateString("c"));
    cJSON_AddItemToArray(merges, m1);
    cJSON *m2 = cJSON_CreateArray();
    cJSON_AddItemToArray(m2, cJSON_CreateString("\xC4\xA0"));
    cJSON_AddItemToArray(m2, cJSON_CreateString("a"));
    cJSON_AddItemToArray(merges, m2);
    cJSON_AddItemToArray(merges, cJSON_CreateString("\xC4\xA0 \xC4\xA0"));
    return root;
}

struct tmpdir {
    char path[64];
};

static void tmp_make(struct tmpdir *d)
{
    strcpy(d->path, "/tmp/llaisys-tok-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static void tmp_write(struct tmpdir *d, const char *name, const char *data, size_t len)
{
    char *p = ll_path_join(d->path, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    free(p);
}

static void tmp_remove(struct tmpdir *d)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < LL_ARRAY_LEN(names); i++) {
        char *p = ll_path_join(d->path, names[i]);
        unlink(p);
        free(p);
    }
    rmdir(d->path);
}

static void write_tree(struct tmpdir *d, const char *name, const cJSON *tree)
{
    char *text = cJSON_PrintUnformatted(tree);
    assert_non_null(text);
    tmp_write(d, name, text, strlen(text));
    free(text);
}

static void test_synthetic_tokenizer(void **state)
{
    (void)state;
    struct tmpdir d;
    tmp_make(&d);
    cJSON *tree = synth_tree();
    write_tree(&d, "tokenizer.json", tree);
    struct tokenizer *t;
    struct ll_err err = {0};
    if (tokenizer_load(&t, d.path, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(tokenizer_vocab_size(t), 305);
    assert_int_equal(tokenizer_bos_id(t), 304); /* no config: the post-processor's first */
    assert_null(tokenizer_bos_token(t));

    EXPECT(t, "ab", false, 256);
    EXPECT(t, "abc", false, 257); /* string merge, then array merge */
    EXPECT(t, "cab", false, 'c', 256);
    EXPECT(t, " a", false, 258);
    EXPECT(t, "  a", false, 32, 258);      /* "\s+(?!\S)" leaves the last space to the word */
    EXPECT(t, "   ", false, 259, 32);      /* "ĠĠ" merges once, leftmost */
    EXPECT(t, "a <x>b", false, 'a', 300, 'b');          /* lstrip takes the space */
    EXPECT(t, "a<x> b", false, 'a', 300, 32, 'b');       /* "Ġb" has no merge */
    EXPECT(t, "a [y] b", false, 'a', 32, 301, 'b');     /* rstrip takes the space after */
    EXPECT(t, "a [y]  \t b", false, 'a', 32, 301, 'b');
    EXPECT(t, "zz", false, 302);
    EXPECT(t, "zz!", false, 302, '!');
    EXPECT(t, "(zz)", false, '(', 302, ')');
    EXPECT(t, "azz", false, 'a', 'z', 'z');             /* single_word: a letter before */
    EXPECT(t, "zz_", false, 'z', 'z', '_');             /* '_' is a word character */
    EXPECT(t, "zz9", false, 'z', 'z', '9');
    EXPECT(t, "e\xCC\x81", false, 303);                 /* normalised, then matched */
    EXPECT(t, "\xC3\xA9", false, 303);
    EXPECT(t, "x\xC3\xA9y", false, 'x', 303, 'y');
    EXPECT(t, "ab", true, 304, 256, 304);               /* <s> $A <s> */
    EXPECT(t, "", true, 304, 304);
    EXPECT(t, "<s>", false, 304);
    const int32_t ids[] = {304, 256, 300, 303, 304};
    char *text = decode(t, ids, 5, NULL); /* an added token decodes to its content as written */
    assert_string_equal(text, "<s>ab<x>e\xCC\x81<s>");
    free(text);
    assert_int_equal(tokenizer_decode(t, ids, 5, true, &text, NULL, &err), LL_OK);
    assert_string_equal(text, "ab<x>e\xCC\x81");
    free(text);
    tokenizer_free(t);

    /* tokenizer_config.json: add_bos_token false removes the front <s>, add_eos_token true puts
     * the eos token at the end; bos/eos may be strings or AddedToken objects */
    static const char config[] =
        "{\"add_bos_token\": false, \"add_eos_token\": true, \"bos_token\": \"<s>\","
        " \"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"zz\"}}";
    tmp_write(&d, "tokenizer_config.json", config, sizeof config - 1);
    if (tokenizer_load(&t, d.path, &err) != LL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(tokenizer_bos_token(t), "<s>");
    assert_string_equal(tokenizer_eos_token(t), "zz");
    assert_int_equal(tokenizer_bos_id(t), 304);
    assert_int_equal(tokenizer_eos_id(t), 302);
    EXPECT(t, "ab", true, 256, 302);
    EXPECT(t, "ab", false, 256);
    tokenizer_free(t);

    cJSON_Delete(tree);
    tmp_remove(&d);
}

/* Load a directory that must fail with code, the message naming what it should. */
static void expect_load_error(const char *dir, enum ll_status code, const char *in_msg,
                              const char *in_msg2)
{
    struct tokenizer *t = (struct tokenizer *)&t;
    struct ll_err err = {0};
    enum ll_status st = tokenizer_load(&t, dir, &err);
    if (st != code || !strstr(err.msg, in_msg) || (in_msg2 && !strstr(err.msg, in_msg2)))
        fail_msg("want status %d naming '%s'%s%s, got %d: %s", code, in_msg,
                 in_msg2 ? " and " : "", in_msg2 ? in_msg2 : "", st, err.msg);
    assert_null(t);
}

typedef void (*mutate_fn)(cJSON *root);

/* A change to a valid tokenizer.json and the refusal it must bring. */
struct mutation {
    mutate_fn fn;
    enum ll_status code;
    const char *field; /* what the message must name */
};

/* Each mutation of the tree that make() builds must fail to load with its code and field. */
static void expect_refusals(cJSON *(*make)(void), const struct mutation *cases, size_t n)
{
    struct tmpdir d;
    tmp_make(&d);
    for (size_t i = 0; i < n; i++) {
        cJSON *tree = make();
        cases[i].fn(tree);
        write_tree(&d, "tokenizer.json", tree);
        cJSON_Delete(tree);
        expect_load_error(d.path, cases[i].code, "tokenizer.json: ", cases[i].field);
    }
    tmp_remove(&d);
}

static cJSON *model_of(cJSON *root)
{
    return cJSON_GetObjectItem(root, "model");
}
static void no_model(cJSON *r) { cJSON_DeleteItemFromObject(r, "model"); }
static void vocab_array(cJSON *r) { cJSON_ReplaceItemInObject(model_of(r), "vocab", cJSON_CreateArray()); }
static void vocab_string_id(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(model_of(r), "vocab"), "ab",
                              cJSON_CreateString("x"));
}
static void vocab_negative_id(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(model_of(r), "vocab"), "ab",
                              cJSON_CreateNumber(-4));
}
static void vocab_huge_id(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(model_of(r), "vocab"), "ab",
                              cJSON_CreateNumber(1e12));
}
static void no_merges(cJSON *r) { cJSON_DeleteItemFromObject(model_of(r), "merges"); }
static void merge_unknown(cJSON *r)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 1,
                             cJSON_CreateString("ab q"));
}
static void merge_result_unknown(cJSON *r)
{
    cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(r), "merges"), cJSON_CreateString("b a"));
}
static void merge_no_space(cJSON *r)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0,
                             cJSON_CreateString("ab"));
}
static void merge_number(cJSON *r)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 2, cJSON_CreateNumber(3));
}
static void merge_triple(cJSON *r)
{
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(model_of(r), "merges"), 1);
    cJSON_AddItemToArray(m, cJSON_CreateString("c"));
}
static void model_wordpiece(cJSON *r)
{
    cJSON_ReplaceItemInObject(model_of(r), "type", cJSON_CreateString("WordPiece"));
}
static void added_not_array(cJSON *r)
{
    cJSON_ReplaceItemInObject(r, "added_tokens", cJSON_CreateString("<x>"));
}
static void added_no_content(cJSON *r)
{
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 1),
                               "content");
}
static void added_flag_string(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0),
                              "lstrip", cJSON_CreateString("yes"));
}
static void added_id_float(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 2), "id",
                              cJSON_CreateNumber(3.5));
}
static void other_regex(cJSON *r)
{
    cJSON *split = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers"), 0);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(split, "pattern"), "Regex",
                              cJSON_CreateString("\\s+|\\S+"));
}
/* the split's behavior and invert, as given */
static void split_form(cJSON *r, const char *behavior, bool invert)
{
    cJSON *split = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers"), 0);
    cJSON_ReplaceItemInObject(split, "behavior", cJSON_CreateString(behavior));
    cJSON_ReplaceItemInObject(split, "invert", cJSON_CreateBool(invert));
}
static void split_removed(cJSON *r) { split_form(r, "Removed", false); }
static void split_isolated_inverted(cJSON *r) { split_form(r, "Isolated", true); }
static void split_merged(cJSON *r) { split_form(r, "MergedWithNext", false); }
/* ByteLevel alone (GPT-2's regex), with add_prefix_space */
static void gpt2_prefix_space(cJSON *r)
{
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", true);
    cJSON_AddBoolToObject(bl, "use_regex", true);
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", bl);
}
/* [Digits, ByteLevel] whose ByteLevel leaves the regex out: nothing would split the words */
static void digits_no_regex(cJSON *r)
{
    cJSON *list = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", "Digits");
    cJSON_AddBoolToObject(d, "individual_digits", true);
    cJSON_ReplaceItemInArray(list, 0, d);
}
/* [Split, ByteLevel] with the ByteLevel's own regex on too */
static void split_and_regex(cJSON *r)
{
    cJSON *list = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers");
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(list, 1), "use_regex", cJSON_CreateTrue());
}
/* [Punctuation, ByteLevel] (Falcon's kind): another pre-tokenizer before the ByteLevel */
static void punctuation_first(cJSON *r)
{
    cJSON *list = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", "Punctuation");
    cJSON_ReplaceItemInArray(list, 0, d);
}
static void nfkc(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "normalizer"), "type",
                              cJSON_CreateString("NFKC"));
}
static void no_decoder(cJSON *r) { cJSON_DeleteItemFromObject(r, "decoder"); }
static void template_unknown_special(cJSON *r)
{
    cJSON *post = cJSON_GetObjectItem(r, "post_processor");
    cJSON_DeleteItemFromObject(post, "special_tokens");
    cJSON_AddObjectToObject(post, "special_tokens");
}
static void roberta_post(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "post_processor"), "type",
                              cJSON_CreateString("RobertaProcessing"));
}

static void test_malformed_tokenizer_json(void **state)
{
    (void)state;
    static const struct mutation cases[] = {
        {no_model, LL_EFORMAT, "model"},
        {vocab_array, LL_EFORMAT, "model.vocab"},
        {vocab_string_id, LL_EFORMAT, "model.vocab[\"ab\"]"},
        {vocab_negative_id, LL_EFORMAT, "model.vocab[\"ab\"]"},
        {vocab_huge_id, LL_EFORMAT, "model.vocab[\"ab\"]"},
        {no_merges, LL_EFORMAT, "model.merges"},
        {merge_unknown, LL_EFORMAT, "model.merges[1]"},
        {merge_result_unknown, LL_EFORMAT, "model.merges[4]"},
        {merge_no_space, LL_EFORMAT, "model.merges[0]"},
        {merge_number, LL_EFORMAT, "model.merges[2]"},
        {merge_triple, LL_EFORMAT, "model.merges[1]"},
        {model_wordpiece, LL_EUNSUPPORTED, "model.type"},
        {added_not_array, LL_EFORMAT, "added_tokens"},
        {added_no_content, LL_EFORMAT, "added_tokens[1].content"},
        {added_flag_string, LL_EFORMAT, "added_tokens[0].lstrip"},
        {added_id_float, LL_EFORMAT, "added_tokens[2].id"},
        {other_regex, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
        {split_removed, LL_EUNSUPPORTED, "\"Removed\" with invert false"},
        {split_isolated_inverted, LL_EUNSUPPORTED, "\"Isolated\" with invert true"},
        {split_merged, LL_EUNSUPPORTED, "\"MergedWithNext\""},
        {gpt2_prefix_space, LL_EUNSUPPORTED, "pre_tokenizer.add_prefix_space"},
        {digits_no_regex, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[1].use_regex: false"},
        {split_and_regex, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[1].use_regex: true"},
        {punctuation_first, LL_EUNSUPPORTED, "found [Punctuation, ByteLevel]"},
        {nfkc, LL_EUNSUPPORTED, "normalizer"},
        {no_decoder, LL_EUNSUPPORTED, "decoder"},
        {template_unknown_special, LL_EFORMAT, "post_processor.special_tokens"},
        {roberta_post, LL_EUNSUPPORTED, "post_processor"},
    };
    expect_refusals(synth_tree, cases, LL_ARRAY_LEN(cases));
    struct tmpdir d;
    tmp_make(&d);

    /* not JSON, or not an object */
    static const char *const bad_json[] = {"", "{", "{\"model\": }", "[]", "null", "\"x\"",
                                           "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}",
                                           "{\"model\": {}} trailing"};
    static const enum ll_status bad_code[] = {LL_EJSON,   LL_EJSON,   LL_EJSON, LL_EFORMAT,
                                              LL_EFORMAT, LL_EFORMAT, LL_EJSON, LL_EJSON};
    for (size_t i = 0; i < LL_ARRAY_LEN(bad_json); i++) {
        tmp_write(&d, "tokenizer.json", bad_json[i], strlen(bad_json[i]));
        expect_load_error(d.path, bad_code[i], "tokenizer.json", NULL);
    }

    /* every truncation of a valid file fails cleanly (and the whole file loads) */
    cJSON *tree = synth_tree();
    char *text = cJSON_Print(tree);
    cJSON_Delete(tree);
    size_t len = strlen(text);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 64) {
        tmp_write(&d, "tokenizer.json", text, cut);
        struct tokenizer *t;
        struct ll_err err = {0};
        enum ll_status st = tokenizer_load(&t, d.path, &err);
        if (st == LL_OK) /* a cut in trailing white space can still be complete JSON */
            tokenizer_free(t);
        else
            assert_non_null(strstr(err.msg, "tokenizer.json"));
    }
    /* flipped bytes: an error or a working tokenizer, never a crash */
    uint64_t r = 99;
    for (int k = 0; k < 300; k++) {
        char *copy = malloc(len);
        assert_non_null(copy);
        memcpy(copy, text, len);
        for (int j = 0; j < 3; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            copy[(r >> 33) % len] = (char)(r >> 17);
        }
        tmp_write(&d, "tokenizer.json", copy, len);
        free(copy);
        struct tokenizer *t;
        struct ll_err err = {0};
        if (tokenizer_load(&t, d.path, &err) == LL_OK) {
            int32_t *ids;
            size_t n;
            encode(t, "a <x>bc [y] zz \xC3\xA9!", 19, true, &ids, &n);
            char *back = decode(t, ids, n, NULL);
            free(back);
            free(ids);
            tokenizer_free(t);
        }
    }
    free(text);

    /* the real file, truncated */
    char *real;
    size_t real_len;
    struct ll_err err = {0};
    assert_int_equal(ll_read_file(MODEL_DIR "/tokenizer.json", &real, &real_len, &err), LL_OK);
    tmp_write(&d, "tokenizer.json", real, real_len / 2);
    expect_load_error(d.path, LL_EJSON, "tokenizer.json: invalid JSON", NULL);
    free(real);

    /* tokenizer_config.json problems name that file */
    tree = synth_tree();
    write_tree(&d, "tokenizer.json", tree);
    cJSON_Delete(tree);
    static const char *const configs[] = {"{\"bos_token\": ", "{\"bos_token\": 7}",
                                          "{\"eos_token\": {\"content\": false}}",
                                          "{\"add_bos_token\": \"yes\"}",
                                          "{\"add_bos_token\": true, \"bos_token\": \"<nope>\"}",
                                          "[1]"};
    static const char *const config_field[] = {"end of the text", "bos_token", "eos_token",
                                               "add_bos_token", "bos_token", "top level"};
    for (size_t i = 0; i < LL_ARRAY_LEN(configs); i++) {
        tmp_write(&d, "tokenizer_config.json", configs[i], strlen(configs[i]));
        expect_load_error(d.path, i == 0 ? LL_EJSON : LL_EFORMAT, "tokenizer_config.json",
                          config_field[i]);
    }
    tmp_remove(&d);

    /* no such directory */
    expect_load_error("/nonexistent/llaisys", LL_EIO, "/nonexistent/llaisys/tokenizer.json", NULL);
}

/* ---- a synthetic SentencePiece-style tokenizer.json ---- */

static cJSON *typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* {"type": type, "pattern": {"String": pattern}, "content": content} */
static cJSON *replace_of(const char *pattern, const char *content)
{
    cJSON *o = typed("Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "pattern"), "String", pattern);
    cJSON_AddStringToObject(o, "content", content);
    return o;
}

static cJSON *merge_pair(const char *a, const char *b)
{
    cJSON *m = cJSON_CreateArray();
    cJSON_AddItemToArray(m, cJSON_CreateString(a));
    cJSON_AddItemToArray(m, cJSON_CreateString(b));
    return m;
}

/*
 * Llama 2's layout in small. Ids: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, "▁" 259,
 * "a" 260, "b" 261, "ab" 262, "▁a" 263, "▁ab" 264, "c" 265, " " 266, "x" 267, "b▁" 270,
 * "ba" 271 (no merge makes it). Added: <unk>, <s>, </s> special; "[T]" 268 normalized false;
 * " z" 269 normalized true. Merges by rank: "b ▁", "a b", ["▁", "a"], "▁a b". Normalizer
 * Prepend "▁" + Replace " " → "▁"; no pre-tokenizer; byte_fallback, fuse_unk; BOS <s> from the
 * post-processor; decoder Replace "▁" → " ", ByteFallback, Fuse, Strip(" ", 1, 0).
 */
#define SP "\xE2\x96\x81" /* U+2581 */
static cJSON *sp_tree(void)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddItemToArray(added, added_token(0, "<unk>", true, false, false, false, false));
    cJSON_AddItemToArray(added, added_token(1, "<s>", true, false, false, false, false));
    cJSON_AddItemToArray(added, added_token(2, "</s>", true, false, false, false, false));
    cJSON_AddItemToArray(added, added_token(268, "[T]", false, false, false, false, false));
    cJSON_AddItemToArray(added, added_token(269, " z", false, false, false, false, true));
    cJSON *norm = typed("Sequence");
    cJSON *steps = cJSON_AddArrayToObject(norm, "normalizers");
    cJSON *prepend = typed("Prepend");
    cJSON_AddStringToObject(prepend, "prepend", SP);
    cJSON_AddItemToArray(steps, prepend);
    cJSON_AddItemToArray(steps, replace_of(" ", SP));
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(post, "single");
    cJSON *sp = cJSON_CreateObject(), *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "SpecialToken"), "id", "<s>");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(seq, "Sequence"), "id", "A");
    cJSON_AddItemToArray(single, sp);
    cJSON_AddItemToArray(single, seq);
    cJSON *s_entry = cJSON_AddObjectToObject(cJSON_AddObjectToObject(post, "special_tokens"), "<s>");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(s_entry, "ids"), cJSON_CreateNumber(1));
    cJSON *dec = typed("Sequence");
    cJSON *decs = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddItemToArray(decs, replace_of(SP, " "));
    cJSON_AddItemToArray(decs, typed("ByteFallback"));
    cJSON_AddItemToArray(decs, typed("Fuse"));
    cJSON *strip = typed("Strip");
    cJSON_AddStringToObject(strip, "content", " ");
    cJSON_AddNumberToObject(strip, "start", 1);
    cJSON_AddNumberToObject(strip, "stop", 0);
    cJSON_AddItemToArray(decs, strip);
    cJSON_AddItemToObject(root, "decoder", dec);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddBoolToObject(model, "fuse_unk", true);
    cJSON_AddBoolToObject(model, "byte_fallback", true);
    cJSON_AddBoolToObject(model, "ignore_merges", false);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddNumberToObject(vocab, "<unk>", 0);
    cJSON_AddNumberToObject(vocab, "<s>", 1);
    cJSON_AddNumberToObject(vocab, "</s>", 2);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 3 + b);
    }
    static const char *const words[] = {SP, "a", "b", "ab", SP "a", SP "ab", "c", " ", "x"};
    for (size_t i = 0; i < LL_ARRAY_LEN(words); i++)
        cJSON_AddNumberToObject(vocab, words[i], 259 + (int)i);
    cJSON_AddNumberToObject(vocab, "b" SP, 270);
    cJSON_AddNumberToObject(vocab, "ba", 271);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(merges, cJSON_CreateString("b " SP));
    cJSON_AddItemToArray(merges, cJSON_CreateString("a b"));
    cJSON_AddItemToArray(merges, merge_pair(SP, "a"));
    cJSON_AddItemToArray(merges, cJSON_CreateString(SP "a b"));
    return root;
}

static struct tokenizer *load_tree(struct tmpdir *d, const cJSON *tree)
{
    write_tree(d, "tokenizer.json", tree);
    struct tokenizer *t;
    struct ll_err err = {0};
    if (tokenizer_load(&t, d->path, &err) != LL_OK)
        fail_msg("%s", err.msg);
    return t;
}

/* Decoding ids gives want, whole and streamed, skipping special tokens or not. */
static void expect_text(const struct tokenizer *t, const int32_t *ids, size_t n, bool skip,
                        const char *want)
{
    char *text;
    struct ll_err err = {0};
    assert_int_equal(tokenizer_decode(t, ids, n, skip, &text, NULL, &err), LL_OK);
    assert_string_equal(text, want);
    free(text);
    check_stream_of(t, ids, n, skip);
}
#define EXPECT_TEXT(t, skip, want, ...)                                                        \
    do {                                                                                       \
        const int32_t ids_[] = {__VA_ARGS__};                                                  \
        expect_text(t, ids_, LL_ARRAY_LEN(ids_), skip, want);                                  \
    } while (0)

/* Replace member `name` of component obj with a new value. */
static void set_item(cJSON *obj, const char *name, cJSON *v)
{
    if (cJSON_GetObjectItem(obj, name))
        cJSON_ReplaceItemInObject(obj, name, v);
    else
        cJSON_AddItemToObject(obj, name, v);
}

static cJSON *metaspace_of(const char *scheme, bool split)
{
    cJSON *m = typed("Metaspace");
    cJSON_AddStringToObject(m, "replacement", SP);
    cJSON_AddStringToObject(m, "prepend_scheme", scheme);
    cJSON_AddBoolToObject(m, "split", split);
    return m;
}

static void test_sentencepiece_synthetic(void **state)
{
    (void)state;
    struct tmpdir d;
    tmp_make(&d);
    cJSON *tree = sp_tree();
    struct tokenizer *t = load_tree(&d, tree);

    /* Prepend + Replace, one piece, merges by rank ("a b" before "▁ a") */
    EXPECT(t, "ab", false, 259, 262);
    EXPECT(t, "a", false, 263);
    EXPECT(t, "a b", false, 263, 259, 261);
    EXPECT(t, "ba", false, 259, 261, 260); /* "ba" only whole (ignore_merges is off) */
    EXPECT(t, "", false);
    EXPECT(t, "", true, 1);
    EXPECT(t, "a", true, 1, 263);
    /* byte fallback: "é" is C3 A9; a 4-byte character gives 4 byte tokens */
    EXPECT(t, "\xC3\xA9", false, 259, 3 + 0xC3, 3 + 0xA9);
    EXPECT(t, "\xF0\x9F\xA6\x99", false, 259, 3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99);
    /* added tokens: the text after one gets its own Prepend; a normalized one (" z") is
     * matched in normalized text, its content normalized by the whole normalizer as Hugging
     * Face does, Prepend included: "▁▁z" */
    EXPECT(t, "a[T]a", false, 263, 268, 263);
    EXPECT(t, "<s>a", false, 1, 263);
    EXPECT(t, "a z", false, 263, 259, 3 + 'z');
    EXPECT(t, "a  z", false, 263, 269);
    EXPECT(t, "<0x41>", false, 259, 3 + '<', 3 + '0', 267, 3 + '4', 3 + '1', 3 + '>');

    /* decoding: Strip drops one leading space of the whole text; <0xNN> runs are their bytes
     * when valid UTF-8 as a whole, else U+FFFD per byte (Hugging Face's ByteFallback) */
    EXPECT_TEXT(t, false, "a", 263);
    EXPECT_TEXT(t, false, " a", 259, 263);
    EXPECT_TEXT(t, false, "<s> a", 1, 263);
    EXPECT_TEXT(t, true, "a", 1, 263);
    EXPECT_TEXT(t, false, "\xC3\xA9" "a", 3 + 0xC3, 3 + 0xA9, 260);
    EXPECT_TEXT(t, false, FFFD "a", 3 + 0xC3, 260);
    EXPECT_TEXT(t, false, FFFD FFFD "a", 3 + 'A', 3 + 0xC3, 260);
    EXPECT_TEXT(t, false, FFFD FFFD FFFD, 3 + 0xE4, 3 + 0xB8, 3 + 'x');
    EXPECT_TEXT(t, false, "A\xE4\xB8\xAD", 3 + 'A', 3 + 0xE4, 3 + 0xB8, 3 + 0xAD);
    /* a run longer than the stream's first buffer */
    int32_t run[300];
    char want[301];
    for (int i = 0; i < 300; i++) {
        run[i] = 3 + 'a' + i % 26;
        want[i] = (char)('a' + i % 26);
    }
    want[300] = '\0';
    expect_text(t, run, 300, false, want);
    run[299] = 3 + 0xFF;
    check_stream_of(t, run, 300, false);
    /* the stream holds a run until it ends */
    struct tokenizer_stream *s;
    struct ll_err err = {0};
    size_t len;
    assert_int_equal(tokenizer_stream_init(&s, t, false, &err), LL_OK);
    assert_string_equal(tokenizer_stream_feed(s, 259, &len), ""); /* stripped */
    assert_string_equal(tokenizer_stream_feed(s, 3 + 0xC3, &len), "");
    assert_string_equal(tokenizer_stream_feed(s, 3 + 0xA9, &len), "");
    assert_string_equal(tokenizer_stream_feed(s, 263, &len), "\xC3\xA9 a");
    assert_string_equal(tokenizer_stream_feed(s, 3 + 0xC3, &len), "");
    assert_string_equal(tokenizer_stream_flush(s, &len), FFFD);
    assert_string_equal(tokenizer_stream_feed(s, 263, &len), "a"); /* a new text: stripped */
    tokenizer_stream_free(s);
    tokenizer_free(t);

    /* Strip at both ends: start 2, stop 1 */
    cJSON *strip = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(tree, "decoder"),
                                                          "decoders"), 3);
    set_item(strip, "start", cJSON_CreateNumber(2));
    set_item(strip, "stop", cJSON_CreateNumber(1));
    t = load_tree(&d, tree);
    EXPECT_TEXT(t, false, " a", 259, 259, 259, 260, 259);
    EXPECT_TEXT(t, false, " a ", 259, 259, 259, 260, 259, 259);
    EXPECT_TEXT(t, false, "a", 259, 259, 260, 259);
    EXPECT_TEXT(t, false, "", 259);
    EXPECT_TEXT(t, false, "", 259, 259, 259);
    EXPECT_TEXT(t, false, "a a", 263, 263, 259);
    tokenizer_free(t);
    set_item(strip, "start", cJSON_CreateNumber(1));
    set_item(strip, "stop", cJSON_CreateNumber(0));

    /* byte_fallback off: unknown characters are <unk>, consecutive ones fused (fuse_unk) */
    cJSON *model = cJSON_GetObjectItem(tree, "model");
    set_item(model, "byte_fallback", cJSON_CreateFalse());
    t = load_tree(&d, tree);
    EXPECT(t, "\xC3\xA9\xC3\xA9" "a\xC3\xA9", false, 259, 0, 260, 0);
    tokenizer_free(t);
    set_item(model, "fuse_unk", cJSON_CreateFalse());
    t = load_tree(&d, tree);
    EXPECT(t, "\xC3\xA9\xC3\xA9" "a", false, 259, 0, 0, 260);
    tokenizer_free(t);
    set_item(model, "fuse_unk", cJSON_CreateTrue());
    set_item(model, "byte_fallback", cJSON_CreateTrue());

    /* Gemma's layout: Replace only, Split " " MergedWithPrevious (never matches after the
     * normalizer), no Strip; ignore_merges takes a piece that is a token whole */
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(tree, "normalizer"),
                                                  "normalizers"), 0);
    cJSON *split = typed("Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "String", " ");
    cJSON_AddStringToObject(split, "behavior", "MergedWithPrevious");
    cJSON_AddBoolToObject(split, "invert", false);
    set_item(tree, "pre_tokenizer", split);
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(tree, "decoder"),
                                                  "decoders"), 3);
    t = load_tree(&d, tree);
    EXPECT(t, "a b", false, 260, 259, 261);
    EXPECT(t, "b a", false, 270, 260); /* one piece: "b ▁" merges across the space */
    EXPECT(t, "ba", false, 261, 260);
    EXPECT(t, "a z", false, 260, 269);
    EXPECT_TEXT(t, false, " a", 259, 260);
    /* the Split by itself: each " " ends a piece; one right after another stands alone */
    struct pieces p = {0};
    assert_int_equal(tok_pretokenize_string(t, "a  b c ", 7, true, add_piece, &p), LL_OK);
    assert_int_equal(p.count, 4);
    static const char *const want_split[] = {"a ", " ", "b ", "c "};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(p.n[i], strlen(want_split[i]));
        assert_memory_equal(p.s[i], want_split[i], p.n[i]);
    }
    p.count = 0;
    assert_int_equal(tok_pretokenize_string(t, " x", 2, true, add_piece, &p), LL_OK);
    assert_int_equal(p.count, 2);
    assert_int_equal(p.n[0], 1);
    tokenizer_free(t);
    set_item(model, "ignore_merges", cJSON_CreateTrue());
    t = load_tree(&d, tree);
    EXPECT(t, "ba", false, 271);
    EXPECT(t, "bab", false, 261, 262);
    tokenizer_free(t);
    set_item(model, "ignore_merges", cJSON_CreateFalse());

    /* Metaspace pre-tokenizer (no normalizer) and decoder */
    set_item(tree, "normalizer", cJSON_CreateNull());
    set_item(tree, "pre_tokenizer", metaspace_of("always", true));
    cJSON *mdec = metaspace_of("always", true);
    set_item(tree, "decoder", mdec);
    t = load_tree(&d, tree);
    EXPECT(t, "a<s>a", false, 263, 1, 263);
    EXPECT(t, "b a", false, 259, 261, 263); /* split: "▁b", "▁a" */
    EXPECT(t, " a", false, 263);             /* already starts with "▁": nothing prepended */
    EXPECT(t, "a  a", false, 263, 259, 263);
    EXPECT_TEXT(t, false, "a a", 263, 263); /* the first token's "▁" are dropped */
    EXPECT_TEXT(t, false, " a", 259, 263);
    EXPECT_TEXT(t, false, "ba", 270, 260); /* ... all of them, not only a leading one */
    EXPECT_TEXT(t, false, "<s> a", 1, 263);
    EXPECT_TEXT(t, true, "a", 1, 263);
    tokenizer_free(t);
    cJSON *mpre = cJSON_GetObjectItem(tree, "pre_tokenizer");
    set_item(mpre, "prepend_scheme", cJSON_CreateString("first"));
    set_item(mpre, "split", cJSON_CreateFalse());
    t = load_tree(&d, tree);
    EXPECT(t, "a<s>a", false, 263, 1, 260); /* not after an added token */
    EXPECT(t, "[T]a", false, 268, 260);
    EXPECT(t, "b a", false, 259, 270, 260); /* one piece: "b ▁" merges */
    tokenizer_free(t);
    set_item(mpre, "prepend_scheme", cJSON_CreateString("never"));
    set_item(mdec, "prepend_scheme", cJSON_CreateString("never"));
    t = load_tree(&d, tree);
    EXPECT(t, "a<s>a", false, 260, 1, 260);
    EXPECT_TEXT(t, false, " a a", 263, 263);
    tokenizer_free(t);
    /* the older add_prefix_space in place of prepend_scheme */
    cJSON_DeleteItemFromObject(mpre, "prepend_scheme");
    cJSON_AddBoolToObject(mpre, "add_prefix_space", false);
    t = load_tree(&d, tree);
    EXPECT(t, "a", false, 260);
    tokenizer_free(t);

    cJSON_Delete(tree);
    tmp_remove(&d);
}

/* Each unsupported variant of the SentencePiece-style components is refused at load, the
 * message naming the field. */
static cJSON *decoders_of(cJSON *r)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(r, "decoder"), "decoders");
}
static cJSON *normalizers_of(cJSON *r)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(r, "normalizer"), "normalizers");
}
static void norm_regex(cJSON *r)
{
    cJSON *rep = cJSON_GetArrayItem(normalizers_of(r), 1);
    cJSON *pat = cJSON_CreateObject();
    cJSON_AddStringToObject(pat, "Regex", " +");
    set_item(rep, "pattern", pat);
}
static void norm_lowercase(cJSON *r) { cJSON_InsertItemInArray(normalizers_of(r), 0, typed("Lowercase")); }
static void norm_no_prepend(cJSON *r)
{
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(normalizers_of(r), 0), "prepend");
}
static void meta_scheme(cJSON *r) { set_item(r, "pre_tokenizer", metaspace_of("sometimes", true)); }
static void meta_empty(cJSON *r)
{
    cJSON *m = metaspace_of("always", true);
    set_item(m, "replacement", cJSON_CreateString(""));
    set_item(r, "pre_tokenizer", m);
}
static void split_isolated(cJSON *r)
{
    cJSON *split = typed("Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "String", " ");
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    set_item(r, "pre_tokenizer", split);
}
static void split_invert(cJSON *r)
{
    cJSON *split = typed("Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "String", " ");
    cJSON_AddStringToObject(split, "behavior", "MergedWithPrevious");
    cJSON_AddBoolToObject(split, "invert", true);
    set_item(r, "pre_tokenizer", split);
}
static void dec_strip_first(cJSON *r)
{
    cJSON *strip = cJSON_Duplicate(cJSON_GetArrayItem(decoders_of(r), 3), true);
    cJSON_ReplaceItemInArray(decoders_of(r), 0, strip);
}
static void dec_fuse_early(cJSON *r)
{
    cJSON_ReplaceItemInArray(decoders_of(r), 1, typed("Fuse"));
    cJSON_ReplaceItemInArray(decoders_of(r), 2, typed("ByteFallback"));
}
static void dec_regex(cJSON *r)
{
    cJSON *pat = cJSON_CreateObject();
    cJSON_AddStringToObject(pat, "Regex", "x");
    set_item(cJSON_GetArrayItem(decoders_of(r), 0), "pattern", pat);
}
static void dec_byte_level(cJSON *r) { set_item(r, "decoder", typed("ByteLevel")); }
static void dec_ctc(cJSON *r) { cJSON_AddItemToArray(decoders_of(r), typed("CTC")); }
static void strip_two_chars(cJSON *r)
{
    set_item(cJSON_GetArrayItem(decoders_of(r), 3), "content", cJSON_CreateString("ab"));
}
static void strip_negative(cJSON *r)
{
    set_item(cJSON_GetArrayItem(decoders_of(r), 3), "start", cJSON_CreateNumber(-1));
}
static void unk_number(cJSON *r) { set_item(model_of(r), "unk_token", cJSON_CreateNumber(0)); }
static void token_bad_utf8(cJSON *r)
{
    cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "\xC3", 272);
}

static void test_sentencepiece_refusals(void **state)
{
    (void)state;
    static const struct mutation cases[] = {
        {norm_regex, LL_EUNSUPPORTED, "normalizer.normalizers[1].pattern.Regex"},
        {norm_lowercase, LL_EUNSUPPORTED, "normalizer.normalizers[0]: \"Lowercase\""},
        {norm_no_prepend, LL_EFORMAT, "normalizer.normalizers[0].prepend"},
        {meta_scheme, LL_EUNSUPPORTED, "pre_tokenizer.prepend_scheme: \"sometimes\""},
        {meta_empty, LL_EFORMAT, "pre_tokenizer.replacement"},
        {split_isolated, LL_EUNSUPPORTED, "pre_tokenizer.behavior"},
        {split_invert, LL_EUNSUPPORTED, "pre_tokenizer.invert"},
        {dec_strip_first, LL_EUNSUPPORTED, "decoder.decoders[0]: Strip without a Fuse"},
        {dec_fuse_early, LL_EUNSUPPORTED, "decoder.decoders[2]: \"ByteFallback\""},
        {dec_regex, LL_EUNSUPPORTED, "decoder.decoders[0].pattern.Regex"},
        {dec_byte_level, LL_EUNSUPPORTED, "decoder: ByteLevel"},
        {dec_ctc, LL_EUNSUPPORTED, "decoder.decoders[4]: \"CTC\""},
        {strip_two_chars, LL_EFORMAT, "decoder.decoders[3].content"},
        {strip_negative, LL_EFORMAT, "decoder.decoders[3].start"},
        {unk_number, LL_EFORMAT, "model.unk_token"},
        {token_bad_utf8, LL_EFORMAT, "id 272 is not valid UTF-8"},
    };
    expect_refusals(sp_tree, cases, LL_ARRAY_LEN(cases));
}

/* The pieces of text under t's pre-tokenizer, joined with '|' into buf. */
static const char *pieces_of(const struct tokenizer *t, const char *text, char *buf, size_t size)
{
    static struct pieces got;
    got.count = 0;
    assert_int_equal(tok_pretokenize(t, text, strlen(text), add_piece, &got), LL_OK);
    size_t k = 0;
    for (size_t i = 0; i < got.count && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%.*s", i ? "|" : "", (int)got.n[i],
                              got.s[i]);
    return buf;
}

/* GPT-2's tokenizer (models/gpt2-tokenizer): ByteLevel with its own regex (case-sensitive
 * contractions, a space joining the letters, digits or symbols after it, no line-break rule);
 * and the same vocabulary after a Digits pre-tokenizer (SmolLM's, StarCoder's), numeric
 * characters cut out first, one by one or in runs, the regex then running inside each part. */
static void test_gpt2_cases(void **state)
{
    (void)state;
    struct tokenizer *t;
    struct ll_err err = {0};
    enum ll_status s = tokenizer_load(&t, "models/gpt2-tokenizer", &err);
    if (s != LL_OK)
        print_error("load: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    assert_int_equal(tokenizer_vocab_size(t), 50257);
    assert_int_equal(run_token_cases(t, "tests/fixtures/gpt2-tokenizer-cases.json", "", false),
                     71);
    char buf[256];
    /* a white-space run gives its last character to the word after it */
    assert_string_equal(pieces_of(t, "it's IT'S a\xC2\xB2\xC2\xB3 12  \n\n x!?", buf,
                                  sizeof buf),
                        "it|'s| IT|'|S| a|\xC2\xB2\xC2\xB3| 12|  \n\n| x|!?");

    /* the Digits variants, made from the same file */
    cJSON *tree = load_json("models/gpt2-tokenizer/tokenizer.json");
    cJSON *byte_level = cJSON_DetachItemFromObject(tree, "pre_tokenizer");
    struct tmpdir d;
    tmp_make(&d);
    for (int individual = 1; individual >= 0; individual--) {
        cJSON *pre = cJSON_CreateObject();
        cJSON_AddStringToObject(pre, "type", "Sequence");
        cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers"), *dg = cJSON_CreateObject();
        cJSON_AddStringToObject(dg, "type", "Digits");
        cJSON_AddBoolToObject(dg, "individual_digits", individual);
        cJSON_AddItemToArray(list, dg);
        cJSON_AddItemToArray(list, cJSON_Duplicate(byte_level, 1));
        cJSON_DeleteItemFromObject(tree, "pre_tokenizer");
        cJSON_AddItemToObject(tree, "pre_tokenizer", pre);
        struct tokenizer *dt = load_tree(&d, tree);
        /* numeric characters of any script (Rust's char::is_numeric: Nd, Nl, No: here ², ³),
         * and white space before a number ends its part, so the regex keeps it whole there */
        assert_string_equal(pieces_of(dt, "a\xC2\xB2\xC2\xB3 12  x", buf, sizeof buf),
                            individual ? "a|\xC2\xB2|\xC2\xB3| |1|2| | x"
                                       : "a|\xC2\xB2\xC2\xB3| |12| | x");
        if (individual) /* ASCII digits only: the reference cuts at nothing else */
            assert_int_equal(
                run_token_cases(dt, "tests/fixtures/gpt2-digits-tokenizer-cases.json", "", false),
                12);
        tokenizer_free(dt);
    }
    tmp_remove(&d);
    cJSON_Delete(byte_level);
    cJSON_Delete(tree);
    tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_cases),
        cmocka_unit_test(test_qwen3_cases),
        cmocka_unit_test(test_llama3_cases),
        cmocka_unit_test(test_mistral_nemo_cases),
        cmocka_unit_test(test_mistral_nemo_split),
        cmocka_unit_test(test_o200k_cases),
        cmocka_unit_test(test_gpt2_cases),
        cmocka_unit_test(test_llama2_cases),
        cmocka_unit_test(test_gemma3_cases),
        cmocka_unit_test(test_chat_encode_cases),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_nul_and_control_bytes),
        cmocka_unit_test(test_byte_table),
        cmocka_unit_test(test_special_lookup),
        cmocka_unit_test(test_ids_without_text),
        cmocka_unit_test(test_stream_decoding),
        cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_mixed_script_100k),
        cmocka_unit_test(test_nfc_every_bmp_character),
        cmocka_unit_test(test_concurrent_encode),
        cmocka_unit_test(test_synthetic_tokenizer),
        cmocka_unit_test(test_malformed_tokenizer_json),
        cmocka_unit_test(test_sentencepiece_synthetic),
        cmocka_unit_test(test_sentencepiece_refusals),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
