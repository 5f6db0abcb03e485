/*
 * test_grammar.c: the grammar engine (grammar.h): the builder's rules (literals, repetition,
 * free text up to a trigger), the compile checks (left recursion, no finite string), JSON
 * Schema compilation (accepted and refused texts per keyword, $ref recursion, refused keywords
 * named), and the token-level matcher on the real DeepSeek-R1-Distill-Qwen vocabulary: masks
 * agree with a brute-force check of every token, masks from the cache equal fresh ones, and
 * "random models" (random logits, masked, sampled) always produce text that parses as JSON
 * and satisfies the schema by an independent validator, complete within max_tokens thanks to
 * the budget.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine.h"
#include "grammar.h"
#include "hash.h"
#include "sampler.h"
#include "tokenizer.h"

#define TOKENIZER "models/deepseek-r1-distill-qwen-tokenizer"
#define FIXTURE "tests/fixtures/tiny-qwen2"
#define VOCAB 151936

static struct tokenizer *g_tok;

/* A uniform number in [0, 1) from (seed, step, id). */
static double sampler_like_uniform(int seed, int k, int i)
{
    uint64_t h = ll_mix64(((uint64_t)seed << 40) ^ ((uint64_t)k << 20) ^ (uint64_t)i ^ LL_GOLDEN64);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

static struct token_trie *g_trie;

static int setup(void **state)
{
    (void)state;
    struct ll_err err = {0};
    if (tokenizer_load(&g_tok, TOKENIZER, &err) != LL_OK ||
        token_trie_build(&g_trie, g_tok, VOCAB, &err) != LL_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    token_trie_free(g_trie);
    tokenizer_free(g_tok);
    return 0;
}

/* Compile a schema given as JSON text; returns the grammar or NULL with err set. */
static struct grammar *schema_grammar(const char *json, struct ll_err *err)
{
    cJSON *s = cJSON_Parse(json);
    assert_non_null(s);
    struct gbuild *b = gbuild_new();
    int root;
    struct grammar *g = NULL;
    if (grammar_json_schema(b, s, "schema", &root, err) == LL_OK)
        gbuild_finish(b, root, &g, err);
    gbuild_free(b);
    cJSON_Delete(s);
    return g;
}

static bool acc(const struct grammar *g, const char *s)
{
    return grammar_accepts(g, s, strlen(s), NULL);
}

static bool prefix(const struct grammar *g, const char *s)
{
    bool p;
    grammar_accepts(g, s, strlen(s), &p);
    return p;
}

/* Schema (JSON text) compiles, accepts every text of yes and none of no (NULL-terminated);
 * quote: the texts are string values, to be put in quotes. */
static void check_texts(const char *schema, const char *const *yes, const char *const *no,
                        bool quote)
{
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(schema, &err);
    if (!g)
        fail_msg("%s: %s", schema, err.msg);
    for (int k = 0; k < 2; k++)
        for (const char *const *t = k ? no : yes; *t; t++) {
            char q[640];
            snprintf(q, sizeof q, quote ? "\"%s\"" : "%s", *t);
            if (acc(g, q) != !k)
                fail_msg("%s: %s %s", schema, q, k ? "accepted" : "refused");
        }
    grammar_unref(g);
}

/* ---- builder ---- */

static void test_builder_rules(void **state)
{
    (void)state;
    struct gbuild *b = gbuild_new();
    int ab = gb_literal(b, "ab");
    int rep = gb_repeat(b, ab, 1, 3);
    int star = gb_repeat(b, gb_literal(b, "x"), 0, -1);
    int root = gb_concat(b, (int[]){rep, star}, 2);
    struct grammar *g = NULL;
    struct ll_err err = {0};
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "ab"));
    assert_true(acc(g, "ababab"));
    assert_true(acc(g, "abxxxx"));
    assert_false(acc(g, "abababab"));
    assert_false(acc(g, ""));
    assert_false(acc(g, "a"));
    assert_true(prefix(g, "aba"));
    assert_false(prefix(g, "abx" "a"));
    assert_int_equal(grammar_min_len(g), 2);
    grammar_unref(g);

    /* free text up to a trigger, then a literal */
    b = gbuild_new();
    int then = gb_literal(b, "!}");
    root = gb_until(b, "<tag>", then, false);
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "hello <ta <tag>!}"));
    assert_true(acc(g, "<<tag>!}"));
    assert_true(acc(g, "<ta<tag>!}"));
    assert_false(acc(g, "hello"));
    assert_false(acc(g, "<tag>x"));
    assert_true(prefix(g, "any text <t"));
    assert_int_equal(grammar_min_len(g), 7);
    struct grammar *after = grammar_after(g, "</think>");
    assert_non_null(after);
    assert_true(acc(after, "reasoning</think>x<tag>!}"));
    assert_false(acc(after, "x<tag>!}"));
    grammar_unref(after);
    /* the reasoning the output may open itself: g at once, or after a whole think block */
    b = gbuild_new();
    struct grammar *lit = NULL;
    assert_int_equal(gbuild_finish(b, gb_literal(b, "{}"), &lit, &err), LL_OK);
    gbuild_free(b);
    after = grammar_after_optional(lit, "<think>", "</think>");
    assert_non_null(after);
    assert_true(acc(after, "{}"));
    assert_true(acc(after, "<think>why {}</think>{}"));
    assert_true(acc(after, "<think></think>{}"));
    assert_false(acc(after, "why</think>{}"));
    assert_false(acc(after, "<think>why {}"));
    assert_false(acc(after, "<think>a</think>b</think>{}"));
    assert_false(acc(after, "{}<think></think>"));
    assert_true(prefix(after, "<think>still thinking"));
    assert_false(prefix(after, "x"));
    grammar_unref(lit);
    grammar_unref(after);
    grammar_unref(g);

    /* optional: text alone is a sentence too */
    b = gbuild_new();
    root = gb_until(b, "<tag>", gb_literal(b, "!"), true);
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "hello"));
    assert_true(acc(g, "hello <ta"));
    assert_true(acc(g, "a<tag>!"));
    assert_false(acc(g, "a<tag>?"));
    grammar_unref(g);
}

static void test_builder_checks(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct grammar *g = NULL;
    /* left recursion: a ::= a "x" | "y" */
    struct gbuild *b = gbuild_new();
    int a = gb_rule(b);
    struct gseq q = {0};
    gseq_rule(&q, a);
    gseq_byte(b, &q, 'x');
    gb_alt(b, a, &q);
    gseq_clear(&q);
    gseq_byte(b, &q, 'y');
    gb_alt(b, a, &q);
    assert_int_equal(gbuild_finish(b, a, &g, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "left-recursive"));
    gbuild_free(b);
    /* no finite string: a ::= "x" a */
    b = gbuild_new();
    a = gb_rule(b);
    gseq_clear(&q);
    gseq_byte(b, &q, 'x');
    gseq_rule(&q, a);
    gb_alt(b, a, &q);
    assert_int_equal(gbuild_finish(b, a, &g, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "no finite"));
    gbuild_free(b);
    gseq_free(&q);
    assert_null(g);
}

/* ---- JSON Schema ---- */

static void test_schema_types(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
        "\"ok\":{\"type\":\"boolean\"},\"none\":{\"type\":\"null\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
        "\"required\":[\"name\",\"age\",\"score\",\"ok\",\"none\",\"tags\"],"
        "\"additionalProperties\":false}", &err);
    assert_non_null(g);
    assert_true(acc(g, "{\"name\":\"Ann\",\"age\":42,\"score\":-1.5e3,\"ok\":true,"
                       "\"none\":null,\"tags\":[]}"));
    assert_true(acc(g, "\n\n{ \"name\" : \"\\u00e9\\n\xc3\xa9\xf0\x9f\x98\x80\", \"age\": -0, "
                       "\"score\": 0.25, \"ok\": false, \"none\": null,\n  \"tags\": [\"a\", "
                       "\"b\"]}"));
    /* wrong types, missing or extra properties, out of order, bad numbers and strings */
    assert_false(acc(g, "{\"name\":\"Ann\",\"age\":4.2,\"score\":1,\"ok\":true,\"none\":null,"
                        "\"tags\":[]}"));
    assert_false(acc(g, "{\"name\":\"Ann\",\"age\":42,\"score\":1,\"ok\":true,\"none\":null}"));
    assert_false(acc(g, "{\"age\":42,\"name\":\"Ann\",\"score\":1,\"ok\":true,\"none\":null,"
                        "\"tags\":[]}"));
    assert_false(acc(g, "{\"name\":\"Ann\",\"age\":042,\"score\":1,\"ok\":true,\"none\":null,"
                        "\"tags\":[]}"));
    /* numbers a double holds: 15 digits, 2-digit exponents */
    assert_true(prefix(g, "{\"name\":\"\",\"age\":123456789012345,"));
    assert_false(prefix(g, "{\"name\":\"\",\"age\":1234567890123456"));
    assert_true(prefix(g, "{\"name\":\"\",\"age\":1,\"score\":-1.25E+99,"));
    assert_false(prefix(g, "{\"name\":\"\",\"age\":1,\"score\":1e100"));
    assert_false(prefix(g, "{\"name\":\"A\x01"));   /* control byte in a string */
    assert_false(prefix(g, "{\"name\":\"A\\x"));    /* bad escape */
    assert_false(prefix(g, "{\"name\":\"\xc0\xaf")); /* overlong UTF-8 */
    assert_false(prefix(g, "{\"name\":\"\xed\xa0\x80")); /* a surrogate in UTF-8 */
    assert_false(prefix(g, "{\"name\":\"A\",\"extra\""));
    assert_false(prefix(g, "{  \"name\"")); /* at most one space */
    assert_true(prefix(g, "{\n\t\t\"name\""));
    grammar_unref(g);
}

static void test_schema_keywords(void **state)
{
    (void)state;
    struct ll_err err = {0};
    /* optional properties keep their order; enum, const, anyOf, type lists */
    struct grammar *g = schema_grammar(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"x\",1,null,[true]]},"
        "\"b\":{\"const\":\"k\\\"q\"},\"c\":{\"anyOf\":[{\"type\":\"integer\"},"
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}]},"
        "\"d\":{\"type\":[\"string\",\"null\"],\"minLength\":2,\"maxLength\":3}},"
        "\"required\":[\"b\"]}", &err);
    assert_non_null(g);
    assert_true(acc(g, "{\"b\":\"k\\\"q\"}"));
    assert_true(acc(g, "{\"a\":\"x\",\"b\":\"k\\\"q\",\"c\":7,\"d\":null}"));
    assert_true(acc(g, "{\"a\":[true],\"b\":\"k\\\"q\",\"d\":\"\xc3\xa9t\xc3\xa9\"}"));
    assert_true(acc(g, "{\"a\":null,\"b\":\"k\\\"q\",\"c\":[1,2,3]}"));
    assert_false(acc(g, "{}"));
    assert_false(acc(g, "{\"a\":\"y\",\"b\":\"k\\\"q\"}"));
    assert_false(acc(g, "{\"b\":\"k\\\"q\",\"c\":[1]}"));
    assert_false(acc(g, "{\"b\":\"k\\\"q\",\"c\":[1,2,3,4]}"));
    assert_false(acc(g, "{\"b\":\"k\\\"q\",\"d\":\"x\"}"));
    assert_false(acc(g, "{\"b\":\"k\\\"q\",\"d\":\"xxxx\"}"));
    assert_false(acc(g, "{\"b\":\"k\\\"q\",\"a\":\"x\"}"));
    grammar_unref(g);

    /* $ref with recursion ($defs) and a map (additionalProperties schema) */
    g = schema_grammar(
        "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":"
        "{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":"
        "{\"$ref\":\"#/$defs/node\"}},\"m\":{\"type\":\"object\",\"additionalProperties\":"
        "{\"type\":\"boolean\"}}},\"required\":[\"v\",\"kids\"],\"additionalProperties\":false}}}",
        &err);
    assert_non_null(g);
    assert_true(acc(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3,\"kids\":[{\"v\":4,"
                       "\"kids\":[]}],\"m\":{\"x\":true,\"y\":false}}]}"));
    assert_false(acc(g, "{\"v\":1,\"kids\":[{\"v\":2}]}"));
    assert_false(acc(g, "{\"v\":1,\"kids\":[],\"m\":{\"x\":1}}"));
    grammar_unref(g);

    /* propertyNames (zod's records): names by a pattern; an enum of names, required (zod's
     * z.record of an enum) or not (z.partialRecord; pydantic's dict[Literal[...], V]); a
     * required name outside 'properties' takes additionalProperties' schema */
    static const struct {
        const char *schema, *yes[5], *no[5];
    } objs[] = {
        {"{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"},"
         "\"additionalProperties\":{\"type\":\"number\"}}",
         {"{}", "{\"ab\":1,\"c\":2.5}", NULL},
         {"{\"aB\":1}", "{\"\":1}", "{\"ab\":true}", NULL}},
        {"{\"propertyNames\":{\"maxLength\":2}}",
         {"{}", "{\"ab\":[1]}", NULL},
         {"{\"abc\":1}", "[]", "3", NULL}},
        {"{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},"
         "\"additionalProperties\":{\"type\":\"number\"},\"required\":[\"a\",\"b\"]}",
         {"{\"a\":1,\"b\":2}", NULL},
         {"{\"a\":1}", "{\"b\":2,\"a\":1}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"a\":1,\"a\":1}",
          NULL}},
        {"{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"a\",\"b\"]},"
         "\"additionalProperties\":{\"type\":\"number\"}}",
         {"{}", "{\"b\":2}", "{\"a\":1,\"b\":2}", NULL},
         {"{\"c\":1}", "{\"a\":\"x\"}", NULL}},
        {"{\"type\":\"object\",\"propertyNames\":{\"const\":\"k\"}}",
         {"{}", "{\"k\":[null]}", NULL},
         {"{\"j\":1}", NULL}},
        {"{\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"integer\"}}",
         {"{\"id\":7}", NULL},
         {"{}", "{\"id\":\"7\"}", "7", NULL}},
        {"{\"type\":\"object\",\"propertyNames\":false}",
         {"{}", NULL},
         {"{\"a\":1}", NULL}},
    };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        check_texts(objs[i].schema, objs[i].yes, objs[i].no, false);

    /* allOf (and $ref beside other keywords) merged: an OpenAPI-style composition, a property
     * in two schemas, patterns that must both match, additionalProperties false, types */
    static const struct {
        const char *schema, *yes[4], *no[5];
    } merged[] = {
        {"{\"$defs\":{\"Base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
         "\"required\":[\"id\"]}},\"allOf\":[{\"$ref\":\"#/$defs/Base\"},{\"type\":\"object\","
         "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"name\"]}],"
         "\"description\":\"a named thing\"}",
         {"{\"id\":1,\"name\":\"ab\"}", NULL},
         {"{\"id\":1}", "{\"name\":\"a\"}", "{\"id\":1,\"name\":\"abcd\"}", "{\"id\":\"1\",\"name\":\"a\"}",
          NULL}},
        {"{\"allOf\":[{\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":0}}},{\"properties\":"
         "{\"x\":{\"maximum\":5}},\"required\":[\"x\"]}]}",
         {"{\"x\":5}", "{\"x\":0}", NULL},
         {"{\"x\":6}", "{\"x\":-1}", "{\"x\":1.5}", "{}", NULL}},
        {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^a\"},{\"pattern\":\"b$\"},{\"minLength\":2}]}",
         {"\"ab\"", "\"axb\"", NULL},
         {"\"ba\"", "\"a\"", "\"b\"", NULL}},
        {"{\"$defs\":{\"S\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/S\",\"maxLength\":2}",
         {"\"ab\"", "\"\"", NULL},
         {"\"abc\"", "1", NULL}},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{}},\"additionalProperties\":"
         "false},{\"properties\":{\"a\":{\"minimum\":1},\"c\":{}}}]}",
         {"{\"a\":1}", "{\"a\":2,\"b\":null}", "{}", NULL},
         {"{\"a\":0}", "{\"c\":1}", "{\"a\":1,\"c\":1}", NULL}},
        {"{\"allOf\":[{\"type\":\"number\",\"minimum\":1},{\"type\":[\"integer\",\"null\"],"
         "\"exclusiveMaximum\":4}]}",
         {"1", "3", NULL},
         {"0", "4", "2.5", "null", NULL}},
    };
    for (size_t i = 0; i < sizeof merged / sizeof merged[0]; i++)
        check_texts(merged[i].schema, merged[i].yes, merged[i].no, false);

    /* uniqueItems over an enum (pydantic's set[Enum], $ref and all): each value at most once,
     * in the enum's order; every sequence over 4 values of up to 5 items is checked */
    g = schema_grammar("{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/C\"},\"uniqueItems\":"
                       "true,\"minItems\":1,\"maxItems\":3,\"$defs\":{\"C\":{\"enum\":[\"r\",2,"
                       "null,\"r\",{\"k\":[]}]}}}", &err);
    if (!g)
        fail_msg("%s", err.msg);
    static const char *const vals[] = {"\"r\"", "2", "null", "{\"k\":[]}"};
    for (int len = 0, total = 1; len <= 5; len++, total *= 4)
        for (int v = 0; v < total; v++) {
            char t[128] = "[";
            bool rising = true;
            for (int i = 0, x = v, last = -1; i < len; i++, x /= 4) {
                rising &= x % 4 > last;
                last = x % 4;
                strcat(t, i ? ", " : "");
                strcat(t, vals[x % 4]);
            }
            strcat(t, "]");
            if (acc(g, t) != (rising && len >= 1 && len <= 3))
                fail_msg("%s %s", t, acc(g, t) ? "accepted" : "refused");
        }
    grammar_unref(g);
    check_texts("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"array\",\"uniqueItems\":"
                "true,\"items\":{\"type\":\"boolean\"}},\"n\":{\"type\":\"array\",\"uniqueItems\":"
                "true,\"items\":{\"type\":\"null\"}}}}",
                (const char *const[]){"{\"b\": [true, false]}", "{\"b\": [false], \"n\": [null]}",
                                      NULL},
                (const char *const[]){"{\"b\": [true, true]}", "{\"n\": [null, null]}", NULL},
                false);
    char big[512] = "{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[0";
    for (int i = 1; i <= 64; i++) /* 65 values: past what is listed */
        snprintf(big + strlen(big), sizeof big - strlen(big), ",%d", i);
    strcat(big, "]}}");
    assert_null(schema_grammar(big, &err));
    assert_non_null(strstr(err.msg, "at most 64 distinct values (here 65)"));

    /* oneOf of schemas that exclude each other: a discriminated union as pydantic writes it,
     * types, consts */
    g = schema_grammar(
        "{\"$defs\":{\"Cat\":{\"properties\":{\"pet_type\":{\"const\":\"cat\",\"title\":\"Pet "
        "Type\",\"type\":\"string\"},\"meows\":{\"title\":\"Meows\",\"type\":\"integer\"}},"
        "\"required\":[\"pet_type\",\"meows\"],\"title\":\"Cat\",\"type\":\"object\"},\"Dog\":"
        "{\"properties\":{\"pet_type\":{\"$ref\":\"#/$defs/DogTag\"},\"barks\":{\"type\":"
        "\"number\"}},\"required\":[\"pet_type\",\"barks\"],\"type\":\"object\"},\"DogTag\":"
        "{\"enum\":[\"dog\"]}},\"properties\":{\"pet\":{\"discriminator\":{\"mapping\":"
        "{\"cat\":\"#/$defs/Cat\",\"dog\":\"#/$defs/Dog\"},\"propertyName\":\"pet_type\"},"
        "\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":\"#/$defs/Dog\"}]},\"n\":{\"oneOf\":"
        "[{\"type\":\"string\"},{\"type\":\"integer\"},{\"const\":null},{\"const\":true}]}},"
        "\"required\":[\"pet\"],\"type\":\"object\"}",
        &err);
    if (!g)
        fail_msg("%s", err.msg);
    assert_true(acc(g, "{\"pet\":{\"pet_type\":\"cat\",\"meows\":3}}"));
    assert_true(acc(g, "{\"pet\":{\"pet_type\":\"dog\",\"barks\":0.5},\"n\":\"x\"}"));
    assert_true(acc(g, "{\"pet\":{\"pet_type\":\"dog\",\"barks\":1},\"n\":null}"));
    assert_false(acc(g, "{\"pet\":{\"pet_type\":\"dog\",\"meows\":3}}"));
    assert_false(acc(g, "{\"pet\":{\"pet_type\":\"cat\",\"meows\":3},\"n\":1.5}"));
    assert_false(acc(g, "{\"pet\":{\"pet_type\":\"cat\",\"meows\":3},\"n\":false}"));
    grammar_unref(g);

    /* enum and const beside a type: only the values of that type */
    check_texts("{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}",
                (const char *[]){"\"a\"", "\"b\"", NULL}, (const char *[]){"1", NULL}, false);
    check_texts("{\"type\":\"integer\",\"enum\":[1,1.5,\"x\"]}", (const char *[]){"1", NULL},
                (const char *[]){"1.5", "\"x\"", NULL}, false);
    check_texts("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null,3]}",
                (const char *[]){"\"a\"", "null", NULL}, (const char *[]){"3", NULL}, false);
    check_texts("{\"enum\":[\"a\",\"b\"],\"const\":\"b\",\"title\":\"t\"}",
                (const char *[]){"\"b\"", NULL}, (const char *[]){"\"a\"", NULL}, false);

    /* tuples: prefixItems (2020-12) and items as an array (draft 7) */
    static const struct {
        const char *schema;
        const char *yes[4], *no[5];
    } tuples[] = {
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"number\"},{\"type\":\"string\"}],"
         "\"minItems\":2,\"maxItems\":2}",
         {"[1.5, \"a\"]", "[0,\"\"]", NULL},
         {"[1.5]", "[1.5,\"a\",2]", "[\"a\",1]", "[]", NULL}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"items\":{\"type\":"
         "\"boolean\"}}",
         {"[1]", "[1,true,false]", "[]", NULL},
         {"[1,2]", "[true]", NULL}},
        {"{\"type\":\"array\",\"items\":[{\"type\":\"integer\"},{\"type\":\"integer\"}],"
         "\"additionalItems\":false,\"minItems\":1}",
         {"[1]", "[1, 2]", NULL},
         {"[]", "[1,2,3]", "[1,\"a\"]", NULL}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],"
         "\"minItems\":3}",
         {"[1,\"a\",null]", "[1,\"a\",{\"k\":[2]}]", NULL},
         {"[1,\"a\"]", "[1,\"a\",1,2]", NULL}},
        {"{\"type\":\"array\",\"prefixItems\":[],\"items\":{\"type\":\"integer\"}}",
         {"[]", "[1,2,3]", NULL},
         {"[\"a\"]", NULL}},
    };
    for (size_t t = 0; t < sizeof tuples / sizeof tuples[0]; t++)
        check_texts(tuples[t].schema, tuples[t].yes, tuples[t].no, false);

    /* {} and true: any JSON value */
    g = schema_grammar("{}", &err);
    assert_non_null(g);
    assert_true(acc(g, "[1, {\"a\": [null, \"s\"]}, -2.5E+3, false]"));
    assert_true(acc(g, "\"text\""));
    assert_false(acc(g, "[1,]"));
    assert_false(acc(g, "{\"a\"}"));
    grammar_unref(g);
}

/* Whether grammar g accepts exactly the integers lo..hi among -300..300 (and no "-0"). */
static void check_int_range(const char *schema, long lo, long hi)
{
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(schema, &err);
    if (!g)
        fail_msg("%s: %s", schema, err.msg);
    for (long x = -300; x <= 300; x++) {
        char t[32];
        snprintf(t, sizeof t, "%ld", x);
        if (acc(g, t) != (x >= lo && x <= hi))
            fail_msg("%s: %s %s", schema, t, acc(g, t) ? "accepted" : "refused");
    }
    assert_false(acc(g, "-0"));
    assert_false(acc(g, "1.0"));
    assert_false(acc(g, "07"));
    assert_false(acc(g, "-07"));
    grammar_unref(g);
}

static void test_schema_bounds(void **state)
{
    (void)state;
    check_int_range("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", -5, 12);
    check_int_range("{\"type\":\"integer\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":12}", -4,
                    11);
    check_int_range("{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":99.9}", 3, 99);
    check_int_range("{\"type\":\"integer\",\"minimum\":-7.5,\"exclusiveMaximum\":-2.5}", -7, -3);
    check_int_range("{\"type\":\"integer\",\"minimum\":100}", 100, 1000);
    check_int_range("{\"type\":\"integer\",\"maximum\":-100}", -1000, -100);
    check_int_range("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,"
                    "\"maximum\":10,\"exclusiveMaximum\":false}", 1, 10); /* draft 4 */
    check_int_range("{\"type\":\"integer\",\"minimum\":-1e300,\"maximum\":1e300}", -1000, 1000);
    check_int_range("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":10}", 11, 1000);
    check_int_range("{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7);

    /* numbers: every decimal of up to 3 digits after the point in -4..4, each written with 0..4
     * digits after the point (trailing zeros included) */
    static const struct {
        const char *schema;
        double lo, hi;
        bool lo_ex, hi_ex;
    } nb[] = {
        {"{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.25}", -1.5, 2.25, 0, 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, 1, 1, 0},
        {"{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.125}", 0.1, 0.125, 0, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-3.007,\"exclusiveMaximum\":-0.5}", -3.007,
         -0.5, 1, 1},
        {"{\"type\":[\"number\",\"null\"],\"minimum\":-2}", -2, 1e9, 0, 0},
    };
    for (size_t c = 0; c < sizeof nb / sizeof nb[0]; c++) {
        struct ll_err err = {0};
        struct grammar *g = schema_grammar(nb[c].schema, &err);
        if (!g)
            fail_msg("%s: %s", nb[c].schema, err.msg);
        for (int k = -4000; k <= 4000; k++) {
            for (int dig = 0; dig <= 4; dig++) {
                if (dig < 3 && k % (dig == 0 ? 1000 : dig == 1 ? 100 : 10))
                    continue; /* not representable with dig digits */
                char t[32];
                snprintf(t, sizeof t, "%.*f", dig, k / 1000.0);
                double x = strtod(t, NULL);
                bool in = (nb[c].lo_ex ? x > nb[c].lo : x >= nb[c].lo) &&
                          (nb[c].hi_ex ? x < nb[c].hi : x <= nb[c].hi);
                if (acc(g, t) != in)
                    fail_msg("%s: %s %s", nb[c].schema, t, acc(g, t) ? "accepted" : "refused");
            }
        }
        assert_false(acc(g, "1e0")); /* bounded numbers have no exponent */
        assert_false(acc(g, "-0"));
        if (c == 4)
            assert_true(acc(g, "null") && acc(g, "123456789012345.123456789012345") &&
                        !acc(g, "1234567890123456"));
        grammar_unref(g);
    }
    /* a bound past 15 digits after the point: the nearest grid point inside it */
    struct ll_err err = {0};
    struct grammar *g = schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":1e-20,"
                                       "\"maximum\":1}", &err);
    assert_non_null(g);
    assert_true(acc(g, "0.000000000000001") && acc(g, "1.000"));
    assert_false(acc(g, "0") || acc(g, "0.000000000000000") || acc(g, "1.000000000000001"));
    grammar_unref(g);
    g = schema_grammar("{\"type\":\"number\",\"minimum\":1e-20}", &err);
    assert_non_null(g);
    assert_true(acc(g, "0.000000000000001") && acc(g, "3.5"));
    assert_false(acc(g, "0") || acc(g, "0.0") || acc(g, "-1"));
    grammar_unref(g);
    check_int_range("{\"type\":\"integer\",\"minimum\":1e-300}", 1, 1000);
}

/* multipleOf: every value k/1000 in -4..4, written with 0..4 digits after the point: accepted
 * only when a multiple within the bounds; its shortest form accepted whenever it is one. */
static void test_schema_multiple(void **state)
{
    (void)state;
    static const struct {
        const char *schema;
        int step, lo, hi; /* in thousandths; bounds inclusive */
    } cases[] = {
        {"{\"type\":\"number\",\"multipleOf\":0.25}", 250, -1000000, 1000000},
        {"{\"type\":\"number\",\"multipleOf\":0.01}", 10, -1000000, 1000000},
        {"{\"type\":\"number\",\"multipleOf\":0.003}", 3, -1000000, 1000000},
        {"{\"type\":\"number\",\"multipleOf\":1.5}", 1500, -1000000, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":3}", 3000, -1000000, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":2.5}", 5000, -1000000, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":0.1}", 1000, -1000000, 1000000},
        {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMaximum\":3,\"multipleOf\":1}", 1000, 0,
         2000},
        {"{\"type\":\"number\",\"minimum\":-1.1,\"maximum\":2,\"multipleOf\":0.125}", 125, -1100,
         2000},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3.5,"
         "\"multipleOf\":0.5}",
         500, -2999, 3499},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ll_err err = {0};
        struct grammar *g = schema_grammar(cases[c].schema, &err);
        if (!g)
            fail_msg("%s: %s", cases[c].schema, err.msg);
        for (int k = -4000; k <= 4000; k++) {
            const bool want = k % cases[c].step == 0 && k >= cases[c].lo && k <= cases[c].hi;
            for (int dig = 0; dig <= 4; dig++) {
                if (dig < 3 && k % (dig == 0 ? 1000 : dig == 1 ? 100 : 10))
                    continue; /* not representable with dig digits */
                char t[32];
                snprintf(t, sizeof t, "%.*f", dig, k / 1000.0);
                const int shortest = k % 1000 == 0 ? 0 : k % 100 == 0 ? 1 : k % 10 == 0 ? 2 : 3;
                if (acc(g, t) ? !want : want && dig == shortest && (k || t[0] != '-'))
                    fail_msg("%s: %s %s", cases[c].schema, t, want ? "refused" : "accepted");
            }
        }
        assert_false(acc(g, "3e0")); /* no exponent */
        grammar_unref(g);
    }
    /* the longest integers: every 15-digit multiple can be finished, none past 15 digits */
    struct ll_err err = {0};
    struct grammar *g = schema_grammar("{\"type\":\"integer\",\"multipleOf\":97}", &err);
    assert_non_null(g);
    assert_true(acc(g, "999999999999955") && acc(g, "-97") && acc(g, "0"));
    assert_false(acc(g, "999999999999956") || acc(g, "9999999999999958") || acc(g, "097"));
    grammar_unref(g);
}

static void test_schema_formats(void **state)
{
    (void)state;
    static const struct {
        const char *format;
        const char *yes[8], *no[8];
    } cases[] = {
        {"date",
         {"2024-02-28", "0000-01-31", "1999-12-31", "2023-04-30", "2024-02-29", "2000-02-29",
          "0400-02-29", NULL},
         {"2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "2024-1-01",
          "24-01-01", NULL}},
        {"time",
         {"23:59:59Z", "00:00:00.123456789+05:30", "12:30:00-08:00", "07:05:09.5Z", NULL},
         {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00.Z", "12:00:00.1234567890Z",
          "12:00:00+24:00", NULL}},
        {"date-time",
         {"2024-06-01T12:00:00Z", "1970-01-01T00:00:00.000+00:00", NULL},
         {"2024-06-01 12:00:00Z", "2024-06-01T12:00Z", "2024-06-01", NULL}},
        {"uuid",
         {"123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000", NULL},
         {"123e4567e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400g",
          "123e4567-e89b-12d3-a456-4266141740001", NULL}},
        {"ipv4",
         {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.99.249", NULL},
         {"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1", "1.2.3.260", NULL}},
        {"email",
         {"a@b.io", "first.last+tag@mail.example.org", "x_y-z@host-1.net", NULL},
         {"a@b", "@b.io", "a..b@c.io", ".a@b.io", "a@-b.io", "a@b.i", "a b@c.io", NULL}},
        {"hostname",
         {"localhost", "api.example.com", "a-1.b2", NULL},
         {"-a.com", "a-.com", "a..b", "a_b.com", "", NULL}},
        {"uri",
         {"https://example.com", "http://10.0.0.1:8080/a/b.html?q=1&r=2#top", "https://a.io/", NULL},
         {"example.com", "ftp://a.io", "https://a.io/%20", "https://a.io:0", "https://", NULL}},
        {"duration",
         {"P3D", "PT4H5M", "P1DT0.5S", "P2W", "PT10M30S", NULL},
         {"P", "PT", "P1DT", "3D", "PT1S2M", NULL}},
        {"ipv6",
         {"2001:db8::1", "::", "::1", "fe80::", "1:2:3:4:5:6:7:8", "1::7:8", NULL},
         {"1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1", "g::", "1:::2", NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char schema[128];
        snprintf(schema, sizeof schema, "{\"type\":[\"string\",\"null\"],\"format\":\"%s\"}",
                 cases[c].format);
        check_texts(schema, cases[c].yes, cases[c].no, true);
        check_texts(schema, (const char *[]){"null", NULL}, (const char *[]){"\"\"", NULL}, false);
    }
    /* February 29th exactly in the leap years of 0000..9999 */
    struct ll_err err = {0};
    struct grammar *g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", &err);
    assert_non_null(g);
    for (int y = 0; y <= 9999; y++) {
        char t[16];
        snprintf(t, sizeof t, "\"%04d-02-29\"", y);
        if (acc(g, t) != (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
            fail_msg("%s", t);
    }
    grammar_unref(g);
    /* a maxLength past 256: not needed when the format's strings are shorter (a date); held
     * to 256 for a plain string, and to what fits beside a format whose strings are not bounded
     * (pydantic's HttpUrl: uri, maxLength 2083) */
    char u[400], t[300];
    memset(t, 'x', 256);
    t[256] = 0;
    snprintf(u, sizeof u, "%s", t);
    check_texts("{\"type\":\"string\",\"maxLength\":5000}", (const char *[]){u, NULL},
                (const char *[]){NULL}, true);
    strcat(u, "x");
    check_texts("{\"type\":\"string\",\"maxLength\":5000}", (const char *[]){"", NULL},
                (const char *[]){u, NULL}, true);
    check_texts("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":100}",
                (const char *[]){"2024-02-29", NULL}, (const char *[]){"x", NULL}, true);
    snprintf(u, sizeof u, "https://a.io/%.50s", t);
    snprintf(u + 200, 200, "https://a.io/%.150s", t);
    check_texts("{\"type\":\"string\",\"format\":\"uri\",\"minLength\":1,\"maxLength\":2083}",
                (const char *[]){u, "https://a.io", NULL}, (const char *[]){u + 200, NULL}, true);
    /* a maxItems past 256 is held to 256 too */
    char arr[640] = "[0";
    for (int i = 1; i < 256; i++)
        strcat(arr, ",0");
    strcat(arr, "]");
    char arr2[700];
    snprintf(arr2, sizeof arr2, "[0,%s", arr + 1);
    check_texts("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":1000}",
                (const char *[]){arr, "[]", NULL}, (const char *[]){arr2, NULL}, false);
    /* a format outside JSON Schema's list means what its pattern says (zod's cuid, e164, ...);
     * OpenAPI's password and binary limit nothing; contentEncoding base64 / base64url */
    check_texts("{\"type\":\"string\",\"format\":\"e164\",\"pattern\":\"^\\\\+[1-9]\\\\d{6,14}$\"}",
                (const char *[]){"+4930123456", NULL},
                (const char *[]){"4930123456", "+0930123456", "+12", NULL}, true);
    check_texts("{\"type\":\"string\",\"format\":\"password\",\"maxLength\":3}",
                (const char *[]){"", "a\\\"b", "\xc3\xa9\xc3\xa9\xc3\xa9", NULL},
                (const char *[]){"abcd", NULL}, true);
    check_texts("{\"type\":\"string\",\"contentEncoding\":\"base64\"}",
                (const char *[]){"", "QUJD", "QUI=", "QQ==", "a+/b", NULL},
                (const char *[]){"QUJ", "QQ=", "a-_b", "QUJD=", NULL}, true);
    check_texts("{\"type\":\"string\",\"contentEncoding\":\"base64url\",\"minLength\":1}",
                (const char *[]){"a-_b", "QUI", "QQ", NULL},
                (const char *[]){"", "a+/b", "QUI=", "Q", NULL}, true);
}

/* A random regular expression over a, b, c (POSIX ERE syntax, which ECMA reads the same). */
static void random_regex(unsigned *seed, char *out, size_t cap, int depth)
{
    size_t n = strlen(out);
    int kind = (int)(rand_r(seed) % (depth > 2 ? 4u : 8u));
    const char *atoms[] = {"a", "b", "c", "[ab]", "[^a]", ".", "[a-b]", "(ab)"};
    if (kind < 4 || n + 40 > cap) {
        snprintf(out + n, cap - n, "%s", atoms[rand_r(seed) % 8]);
    } else if (kind < 6) { /* a group with alternatives */
        snprintf(out + n, cap - n, "(");
        random_regex(seed, out, cap, depth + 1);
        n = strlen(out);
        snprintf(out + n, cap - n, "|");
        random_regex(seed, out, cap, depth + 1);
        n = strlen(out);
        snprintf(out + n, cap - n, ")");
    } else { /* a concatenation of two (no quantifier of its own) */
        random_regex(seed, out, cap, depth + 1);
        random_regex(seed, out, cap, depth + 1);
        return;
    }
    n = strlen(out);
    static const char *quant[] = {"", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
    snprintf(out + n, cap - n, "%s", quant[rand_r(seed) % 10]);
}

/* A random expression with assertions ('^', '$' anywhere, lookaheads), as a tree, its text, and
 * an independent meaning: the spans [i, j) of a string each node matches, computed bottom-up. */
enum { RX_SET, RX_SEQ, RX_ALT, RX_REP, RX_BOS, RX_EOS, RX_LOOK, RX_NLOOK };

struct rxnode {
    int kind, set, min, max; /* set: a bit per letter; max < 0: unbounded */
    struct rxnode *a, *b;
};

static struct rxnode *rx_random(unsigned *seed, int depth, struct rxnode *pool, int *used)
{
    struct rxnode *n = &pool[(*used)++];
    *n = (struct rxnode){0};
    int k = (int)(rand_r(seed) % (depth > 3 ? 3u : 10u));
    if (k < 2 || *used > 40) {
        static const int sets[] = {1, 2, 4, 3, 6, 7};
        n->kind = RX_SET;
        n->set = sets[rand_r(seed) % 6];
    } else if (k == 2) {
        n->kind = rand_r(seed) % 2 ? RX_BOS : RX_EOS;
    } else if (k < 5) {
        n->kind = RX_SEQ;
    } else if (k < 7) {
        n->kind = RX_ALT;
    } else if (k < 9) {
        n->kind = rand_r(seed) % 2 ? RX_LOOK : RX_NLOOK;
    } else {
        static const int mm[][2] = {{0, -1}, {1, -1}, {0, 1}, {2, 2}, {1, 3}, {0, 2}};
        const int *q = mm[rand_r(seed) % 6];
        n->kind = RX_REP;
        n->min = q[0];
        n->max = q[1];
    }
    if (n->kind >= RX_SEQ && n->kind <= RX_ALT)
        n->b = rx_random(seed, depth + 1, pool, used);
    if (n->kind != RX_SET && n->kind != RX_BOS && n->kind != RX_EOS)
        n->a = rx_random(seed, depth + 1, pool, used);
    return n;
}

static void rx_text(const struct rxnode *n, char *out, size_t cap)
{
    size_t len = strlen(out);
    static const char *sets[] = {"", "a", "b", "[ab]", "c", "[ac]", "[^a]", "."};
    switch (n->kind) {
    case RX_SET:
        snprintf(out + len, cap - len, "%s", sets[n->set]);
        break;
    case RX_BOS:
    case RX_EOS:
        snprintf(out + len, cap - len, "%s", n->kind == RX_BOS ? "^" : "$");
        break;
    case RX_SEQ:
        rx_text(n->a, out, cap);
        rx_text(n->b, out, cap);
        break;
    case RX_ALT:
    case RX_LOOK:
    case RX_NLOOK:
        snprintf(out + len, cap - len, "%s",
                 n->kind == RX_ALT ? "(" : n->kind == RX_LOOK ? "(?=" : "(?!");
        rx_text(n->a, out, cap);
        if (n->kind == RX_ALT) {
            len = strlen(out);
            snprintf(out + len, cap - len, "|");
            rx_text(n->b, out, cap);
        }
        len = strlen(out);
        snprintf(out + len, cap - len, ")");
        break;
    case RX_REP:
        snprintf(out + len, cap - len, "(?:");
        rx_text(n->a, out, cap);
        len = strlen(out);
        if (n->max < 0)
            snprintf(out + len, cap - len, ")%s", n->min ? "+" : "*");
        else
            snprintf(out + len, cap - len, "){%d,%d}", n->min, n->max);
        break;
    }
}

/* m[i][j]: the node matches s[i..j) (positions 0..len) */
static void rx_spans(const struct rxnode *n, const char *s, int len, bool m[6][6])
{
    bool a[6][6], b[6][6];
    memset(m, 0, sizeof(bool[6][6]));
    if (n->a)
        rx_spans(n->a, s, len, a);
    if (n->b)
        rx_spans(n->b, s, len, b);
    for (int i = 0; i <= len; i++)
        for (int j = i; j <= len; j++)
            switch (n->kind) {
            case RX_SET:
                m[i][j] = j == i + 1 && (n->set >> (s[i] - 'a') & 1);
                break;
            case RX_BOS:
            case RX_EOS:
                m[i][j] = i == j && i == (n->kind == RX_BOS ? 0 : len);
                break;
            case RX_SEQ:
                for (int k = i; k <= j; k++)
                    m[i][j] |= a[i][k] && b[k][j];
                break;
            case RX_ALT:
                m[i][j] = a[i][j] || b[i][j];
                break;
            case RX_LOOK:
            case RX_NLOOK: {
                bool any = false;
                for (int k = i; k <= len; k++)
                    any |= a[i][k];
                m[i][j] = i == j && any == (n->kind == RX_LOOK);
                break;
            }
            default:
                break;
            }
    if (n->kind != RX_REP)
        return;
    bool p[6][6] = {{false}}, t[6][6];
    for (int i = 0; i <= len; i++)
        p[i][i] = true; /* a^0 */
    for (int c = 0; c <= (n->max < 0 ? n->min + len + 1 : n->max); c++) {
        if (c >= n->min)
            for (int i = 0; i <= len; i++)
                for (int j = 0; j <= len; j++)
                    m[i][j] |= p[i][j];
        memset(t, 0, sizeof t);
        for (int i = 0; i <= len; i++)
            for (int k = 0; k <= len; k++)
                for (int j = 0; p[i][k] && j <= len; j++)
                    t[i][j] |= a[k][j];
        memcpy(p, t, sizeof p);
    }
}

static void test_schema_lookaround(void **state)
{
    (void)state;
    /* random patterns with '^', '$' anywhere and lookaheads (unanchored: matched anywhere)
     * against their span semantics on every string over a, b, c of up to 5 characters */
    unsigned seed = 11;
    int checked = 0, compiled = 0;
    for (int k = 0; k < 150; k++) {
        struct rxnode pool[64];
        int used = 0;
        char re[400] = "", schema[480];
        const struct rxnode *root = rx_random(&seed, 0, pool, &used);
        rx_text(root, re, sizeof re);
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"}", re);
        struct ll_err err = {0};
        struct grammar *g = schema_grammar(schema, &err);
        bool any = false;
        for (int len = 0, total = 1; len <= 5; len++, total *= 3)
            for (int v = 0; v < total; v++) {
                char str[8], quoted[12];
                bool m[6][6], want = false;
                for (int i = 0, x = v; i < len; i++, x /= 3)
                    str[i] = (char)('a' + x % 3);
                str[len] = 0;
                rx_spans(root, str, len, m);
                for (int i = 0; i <= len; i++)
                    for (int j = i; j <= len; j++)
                        want |= m[i][j];
                any |= want;
                snprintf(quoted, sizeof quoted, "\"%s\"", str);
                if (g && acc(g, quoted) != want)
                    fail_msg("pattern %s: \"%s\" %s", re, str, want ? "refused" : "accepted");
                checked += g != NULL;
            }
        /* refused only when it matches none of these strings (nor, then, any: the alphabet
         * the pattern names is a, b, c, and '.' or [^a] on another letter acts as on c) */
        if (!g && (any || err.code != LL_EINVAL || !strstr(err.msg, "no string meets")))
            fail_msg("pattern %s: %s", re, err.msg);
        compiled += g != NULL;
        grammar_unref(g);
    }
    assert_true(compiled > 100 && checked > 30000);
}

static void test_schema_pattern(void **state)
{
    (void)state;
    /* random patterns against POSIX regexec, anchored and not, on every string over a, b, c of
     * up to 5 characters */
    unsigned seed = 7;
    int checked = 0;
    for (int k = 0; k < 60; k++) {
        char re[200] = "", full[220], schema[320];
        random_regex(&seed, re, sizeof re, 0);
        bool anchored = k % 2;
        snprintf(full, sizeof full, anchored ? "^%s$" : "%s", re);
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"}", full);
        regex_t px;
        char pfull[230];
        snprintf(pfull, sizeof pfull, anchored ? "^(%s)$" : "(%s)", re);
        assert_int_equal(regcomp(&px, pfull, REG_EXTENDED | REG_NOSUB), 0);
        struct ll_err err = {0};
        struct grammar *g = schema_grammar(schema, &err);
        if (!g)
            fail_msg("%s: %s", schema, err.msg);
        for (int len = 0; len <= 5; len++) {
            int total = 1;
            for (int i = 0; i < len; i++)
                total *= 3;
            for (int v = 0; v < total; v++) {
                char str[8], quoted[12];
                for (int i = 0, x = v; i < len; i++, x /= 3)
                    str[i] = (char)('a' + x % 3);
                str[len] = 0;
                snprintf(quoted, sizeof quoted, "\"%s\"", str);
                bool want = regexec(&px, str, 0, NULL, 0) == 0;
                if (acc(g, quoted) != want)
                    fail_msg("pattern %s: \"%s\" %s (POSIX: %s)", full, str,
                             want ? "refused" : "accepted", want ? "match" : "no match");
                checked++;
            }
        }
        regfree(&px);
        grammar_unref(g);
    }
    assert_true(checked > 10000);

    static const struct {
        const char *schema;
        const char *yes[8], *no[8];
    } cases[] = {
        /* unanchored: anywhere in the string */
        {"{\"type\":\"string\",\"pattern\":\"\\\\d{3}-\\\\d{4}\"}",
         {"\"123-4567\"", "\"tel 555-0199 (home)\"", NULL},
         {"\"12-4567\"", "\"\"", NULL}},
        /* UTF-8 classes and escapes */
        {"{\"type\":\"string\",\"pattern\":\"^[\\u00e9-\\u00eb]+\\\\u00e9?$\"}",
         {"\"\xc3\xa9\xc3\xaa\"", "\"\xc3\xab\"", NULL},
         {"\"e\"", "\"\"", "\"\xc3\xa8\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\uD83D\\\\uDE00.$\"}",
         {"\"\xf0\x9f\x98\x80x\"", "\"\xf0\x9f\x98\x80\xe4\xb8\xad\"", NULL},
         {"\"\xf0\x9f\x98\x80\"", "\"\xf0\x9f\x98\x80\\n\"", NULL}},
        /* ranges whose UTF-8 forms split at continuation bytes; '.' leaves out line ends */
        {"{\"type\":\"string\",\"pattern\":\"^[\u00e9-\u013f][\u07ff-\u0801].$\"}",
         {"\"\xc3\xa9\xdf\xbfx\"", "\"\xc3\xbf\xe0\xa0\x80x\"", "\"\xc4\x80\xe0\xa0\x81x\"",
          "\"\xc4\x81\xe0\xa0\x81\xef\xbf\xbf\"", NULL},
         {"\"\xc5\x80\xdf\xbfx\"", "\"\xc3\xa8\xdf\xbfx\"", "\"\xc3\xa9\xdf\xbe\x78\"",
          "\"\xc3\xa9\xdf\xbf\xe2\x80\xa8\"", "\"\xc3\xa9\xdf\xbf\\n\"", NULL}},
        /* bytes JSON escapes are generated as escapes */
        {"{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c\\\\t\\\\n?[\\\\x00-\\\\x01]$\"}",
         {"\"a\\\"b\\\\c\\t\\u0001\"", "\"a\\\"b\\\\c\\t\\n\\u0000\"", NULL},
         {"\"a\\\"b\\\\c\\t\\u0002\"", "\"a\\\"b\\\\c\tx\"", NULL}},
        /* \w \s \D, lazy quantifiers, named and non-capturing groups, a literal brace */
        {"{\"type\":\"string\",\"pattern\":\"^(?<k>\\\\w+?)\\\\s(?:\\\\D{2,}?)\\\\{$\"}",
         {"\"key_1 ab{\"", "\"Z \\t-{\"", NULL},
         {"\"key 1a{\"", "\"key ab\"", "\"k-y ab{\"", NULL}},
        /* pattern and length: code points, not bytes */
        {"{\"type\":\"string\",\"pattern\":\"^.+$\",\"minLength\":2,\"maxLength\":2}",
         {"\"\xc3\xa9\xc3\xa9\"", "\"ab\"", NULL},
         {"\"\xc3\xa9\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", "\"abc\"", NULL}},
        /* zod's uuid pattern beside format uuid: both hold */
        {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-"
         "[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-"
         "000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$\"}",
         {"\"123e4567-e89b-42d3-a456-426614174000\"", "\"00000000-0000-0000-0000-000000000000\"",
          NULL},
         {"\"123e4567-e89b-02d3-a456-426614174000\"", "\"123e4567-e89b-42d3-c456-426614174000\"",
          NULL}},
        /* anchors inside: each alternative anchored on its own side (zod's mac, base64) */
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}",
         {"\"ax\"", "\"xb\"", "\"ab\"", NULL},
         {"\"xa\"", "\"bx\"", "\"\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^(?:[0-9A-F]{2}:){2}[0-9A-F]{2}$|^(?:[0-9a-f]{2}:)"
         "{2}[0-9a-f]{2}$\"}",
         {"\"0A:1B:2C\"", "\"0a:1b:2c\"", NULL},
         {"\"0A:1b:2c\"", "\"0A:1B\"", "\"0A:1B:2C:\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^$|^(?:[0-9a-zA-Z+/]{4})*(?:(?:[0-9a-zA-Z+/]{2}==)|"
         "(?:[0-9a-zA-Z+/]{3}=))?$\"}",
         {"\"\"", "\"QUJD\"", "\"QUI=\"", "\"QUJDQQ==\"", NULL},
         {"\"QUJ\"", "\"Q===\"", "\"QUJD=\"", "\" \"", NULL}},
        /* lookaheads: zod's duration, iban; pydantic's Decimal; a password rule */
        {"{\"type\":\"string\",\"pattern\":\"^P(?:(\\\\d+W)|(?!.*W)(?=\\\\d|T\\\\d)(\\\\d+Y)?"
         "(\\\\d+M)?(\\\\d+D)?(T(?=\\\\d)(\\\\d+H)?(\\\\d+M)?(\\\\d+([.,]\\\\d+)?S)?)?)$\"}",
         {"\"P1W\"", "\"P1Y2M3DT4H5M6.5S\"", "\"PT1H\"", "\"P3D\"", "\"P1M\"", NULL},
         {"\"P\"", "\"PT\"", "\"P1DT\"", "\"P1W2D\"", "\"PT1S2M\"", "\"P1YW\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}(?!00|01|99)\\\\d{2}[A-Z0-9]{3,5}$\"}",
         {"\"DE44AB1\"", "\"GB02X9Y\"", "\"FR98ABCDE\"", NULL},
         {"\"DE00AB1\"", "\"DE01AB1\"", "\"DE99AB1\"", "\"DE4AB12\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^(?!^[-+.]*$)[+-]?0*\\\\d*\\\\.?\\\\d*$\"}",
         {"\"1.5\"", "\"-0.25\"", "\"10\"", "\".5\"", "\"+7.\"", NULL},
         {"\"\"", "\"-\"", "\".\"", "\"+.\"", "\"1.2.3\"", "\"1e5\"", NULL}},
        /* pydantic's condecimal(max_digits=5, decimal_places=2): its end is open, so any text
         * but [-+.]* has a match (the first alternative may match nothing) */
        {"{\"type\":\"string\",\"pattern\":\"^(?!^[-+.]*$)[+-]?0*(?:\\\\d{0,3}|(?=[\\\\d.]{1,6}0*$)"
         "\\\\d{0,3}\\\\.\\\\d{0,2}0*$)\"}",
         {"\"12.34\"", "\"-001.50\"", "\"abc\"", "\"1.234\"", NULL},
         {"\"\"", "\"+\"", "\"-.\"", "\"..\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^(?=.*[A-Z])(?=.*\\\\d)(?!.*\\\\s).{8,}$\"}",
         {"\"Passw0rd!\"", "\"12345678A\"", NULL},
         {"\"password1\"", "\"Pass1\"", "\"PASSWORD!\"", "\"Pass w0rd\"", NULL}},
        /* a format and a pattern that narrows it */
        {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}",
         {"\"2024-06-30\"", NULL},
         {"\"2023-06-30\"", "\"2024-06-31\"", NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        check_texts(cases[c].schema, cases[c].yes, cases[c].no, false);

    /* the raw text of a pattern (guided_regex): matched whole, nothing escaped or quoted */
    struct gbuild *b = gbuild_new();
    struct ll_err err = {0};
    int root;
    struct grammar *g = NULL;
    assert_int_equal(grammar_regex_text(b, "(yes|no)( maybe)?\\.[\"\\n]", "guided_regex", &root,
                                        &err), LL_OK);
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "yes.\"") && acc(g, "no maybe.\n"));
    assert_false(acc(g, "\"yes.\\\"\"") || acc(g, "yes.\\n") || acc(g, "maybe yes.\"") ||
                 acc(g, "yes.\" "));
    grammar_unref(g);
    /* a pattern whose only match is the empty text: a grammar without a byte set (found by
     * fuzz_openai_request: compiling it passed NULL to memcpy) */
    b = gbuild_new();
    assert_int_equal(grammar_regex_text(b, "a[]b|", "guided_regex", &root, &err), LL_OK);
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "") && !acc(g, "a"));
    grammar_unref(g);
    /* matched whole: a lookahead at the end sees the empty rest */
    b = gbuild_new();
    assert_int_equal(grammar_regex_text(b, "a+(?!b)(?=$)", "guided_regex", &root, &err), LL_OK);
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    assert_true(acc(g, "a") && acc(g, "aa") && !acc(g, "ab") && !acc(g, ""));
    grammar_unref(g);
    b = gbuild_new();
    assert_int_equal(grammar_regex_text(b, "a(?<!b)", "guided_regex", &root, &err),
                     LL_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "guided_regex: pattern"));
    gbuild_free(b);
}

static void test_schema_refused(void **state)
{
    (void)state;
    struct {
        const char *schema;
        enum ll_status want;
        const char *names;
    } cases[] = {
        {"{\"type\":\"integer\",\"multipleOf\":101}", LL_EUNSUPPORTED,
         "'multipleOf' 101 without bounds is supported when"},
        {"{\"type\":\"integer\",\"maximum\":1e6,\"multipleOf\":3}", LL_EUNSUPPORTED,
         "at most 256 multiples"},
        {"{\"type\":\"integer\",\"minimum\":1,\"maximum\":2,\"multipleOf\":3}", LL_EINVAL,
         "no multiple of 3 lies within"},
        {"{\"type\":\"number\",\"multipleOf\":-2}", LL_EINVAL,
         "multipleOf must be a number above 0"},
        {"{\"type\":\"number\",\"multipleOf\":1e-16}", LL_EUNSUPPORTED, "more than 15 digits"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}",
         LL_EUNSUPPORTED, "'uniqueItems' is supported when the items are an enum"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", LL_EUNSUPPORTED, "'uniqueItems'"},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":1}],\"uniqueItems\":true}",
         LL_EUNSUPPORTED, "'uniqueItems' with a tuple"},
        {"{\"type\":\"array\",\"items\":{\"enum\":[1]},\"uniqueItems\":1}", LL_EINVAL,
         "'uniqueItems' must be a boolean"},
        {"{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"uniqueItems\":true,\"minItems\":3}",
         LL_EINVAL, "'minItems' 3 is more than the 2 distinct values"},
        {"{\"type\":\"string\",\"multipleOf\":2}", LL_EUNSUPPORTED,
         "'multipleOf' is supported with 'type' number or integer"},
        {"{\"enum\":[1,5],\"minimum\":3}", LL_EUNSUPPORTED, "'minimum' is supported with"},
        {"{\"maximum\":3}", LL_EUNSUPPORTED, "schema: 'maximum'"},
        {"{\"type\":\"integer\",\"minimum\":\"3\"}", LL_EINVAL, "schema.minimum must be"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":true}", LL_EINVAL, "'minimum' must"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", LL_EINVAL, "no integer"},
        {"{\"type\":\"integer\",\"minimum\":2.2,\"maximum\":2.8}", LL_EINVAL, "no integer"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", LL_EINVAL,
         "no number"},
        {"{\"type\":\"integer\",\"minimum\":1e300}", LL_EINVAL, "no integer"},
        {"{\"type\":\"integer\",\"maximum\":-1e999}", LL_EINVAL, "no integer"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"iri\"}}}",
         LL_EUNSUPPORTED, "schema.properties.x: format 'iri' is not supported"},
        {"{\"type\":\"string\",\"format\":\"credit_card\",\"pattern\":\"^\\\\d{12,19}$\"}",
         LL_EUNSUPPORTED, "format 'credit_card' is not supported (its validators check a checksum"},
        {"{\"type\":\"string\",\"format\":\"jwt\"}", LL_EUNSUPPORTED,
         "format 'jwt' is not one of JSON Schema's; it is accepted beside a 'pattern'"},
        {"{\"type\":\"string\",\"contentEncoding\":\"quoted-printable\"}", LL_EUNSUPPORTED,
         "contentEncoding 'quoted-printable' is not supported"},
        {"{\"type\":\"string\",\"contentEncoding\":1}", LL_EINVAL, "must be a string"},
        {"{\"type\":\"integer\",\"contentEncoding\":\"base64\"}", LL_EUNSUPPORTED,
         "'contentEncoding' is supported with 'type' string"},
        {"{\"type\":\"string\",\"format\":\"date\",\"contentEncoding\":\"base64\"}", LL_EINVAL,
         "no string meets its 'format' and its 'contentEncoding'"},
        {"{\"type\":\"object\",\"propertyNames\":{\"type\":\"integer\"}}", LL_EINVAL,
         "'propertyNames' must describe strings"},
        {"{\"type\":\"object\",\"propertyNames\":3}", LL_EINVAL, "must be a boolean or a schema"},
        {"{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^a\"},\"properties\":{\"ab\":{}}}",
         LL_EUNSUPPORTED, "as an enum or a const of the names"},
        {"{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"a\"]},\"required\":[\"b\"]}",
         LL_EINVAL, "property 'b' does not meet 'propertyNames'"},
        {"{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\",\"foo\":1}}",
         LL_EUNSUPPORTED, "schema.propertyNames: the JSON Schema keyword 'foo'"},
        {"{\"type\":\"object\",\"propertyNames\":false,\"required\":[\"a\"]}", LL_EINVAL,
         "'additionalProperties' is false"},
        {"{\"type\":\"integer\",\"format\":\"int32\"}", LL_EUNSUPPORTED,
         "'format' is supported with 'type' string"},
        {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":5}", LL_EINVAL,
         "no string meets its 'format' with its length bounds"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", LL_EINVAL,
         "no string meets its 'pattern' with its length bounds"},
        {"{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", LL_EUNSUPPORTED, "lookbehinds"},
        {"{\"type\":\"string\",\"pattern\":\"(?i)b\"}", LL_EUNSUPPORTED, "kind of group"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", LL_EINVAL, "no string meets"},
        {"{\"type\":\"string\",\"pattern\":\"^$a\"}", LL_EINVAL, "no string meets"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)*\"}", LL_EINVAL, "after an assertion"},
        {"{\"type\":\"string\",\"pattern\":\"a^*\"}", LL_EINVAL, "after an assertion"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b\"}", LL_EINVAL, "unclosed '('"},
        {"{\"type\":\"string\",\"pattern\":\"(?=(?=(?=(?=(?=a)))))\"}", LL_EUNSUPPORTED,
         "nested too deep"},
        {"{\"type\":\"string\",\"pattern\":\"(?!a(?<!b))\"}", LL_EUNSUPPORTED,
         "lookbehinds ((?<=, (?<!) are not supported (at offset 5)"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", LL_EUNSUPPORTED, "backreference"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", LL_EUNSUPPORTED, "word boundar"},
        {"{\"type\":\"string\",\"pattern\":\"(ab\"}", LL_EINVAL, "unclosed '('"},
        {"{\"type\":\"string\",\"pattern\":\"ab)\"}", LL_EINVAL, "unmatched ')'"},
        {"{\"type\":\"string\",\"pattern\":\"[ab\"}", LL_EINVAL, "unclosed '['"},
        {"{\"type\":\"string\",\"pattern\":\"[z-a]\"}", LL_EINVAL, "out of order"},
        {"{\"type\":\"string\",\"pattern\":\"a{2000}\"}", LL_EUNSUPPORTED, "above 1000"},
        {"{\"type\":\"string\",\"pattern\":\"a{3,2}\"}", LL_EINVAL, "m < n"},
        {"{\"type\":\"string\",\"pattern\":\"a{1,99999}\"}", LL_EUNSUPPORTED, "above 1000"},
        {"{\"type\":\"string\",\"pattern\":\"a\xc3(\"}", LL_EINVAL, "not valid UTF-8"},
        {"{\"type\":\"string\",\"pattern\":\"\xed\xa0\x80\"}", LL_EINVAL, "not valid UTF-8"},
        {"{\"type\":\"string\",\"pattern\":\"*a\"}", LL_EINVAL, "nothing to repeat"},
        {"{\"type\":\"string\",\"pattern\":\"a**\"}", LL_EINVAL, "after a quantifier"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", LL_EUNSUPPORTED, "\\p"},
        {"{\"type\":\"string\",\"pattern\":\"[\\\\s\\\\S]{1000}[\\\\s\\\\S]{1000}\"}",
         LL_EUNSUPPORTED, "too"},
        {"{\"type\":\"string\",\"pattern\":\"^(?:(?:a|b)?){1000}(?:(?:c|d)?){1000}$\"}",
         LL_EUNSUPPORTED, "takes too long to build"},
        {"{\"type\":\"string\",\"pattern\":3}", LL_EINVAL, "'pattern' must be a string"},
        {"{\"type\":\"integer\",\"pattern\":\"a\"}", LL_EUNSUPPORTED,
         "'pattern' is supported with 'type' string"},
        {"{\"type\":\"string\",\"format\":7}", LL_EINVAL, "'format' must be a string"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", LL_EUNSUPPORTED,
         "schema: 'oneOf' is supported when its schemas exclude each other"},
        {"{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}",
         LL_EUNSUPPORTED, "exclude each other"},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},{\"type\":"
         "\"object\",\"properties\":{\"k\":{\"const\":2}}}]}",
         LL_EUNSUPPORTED, "exclude each other"}, /* k not required: {} matches both */
        {"{\"anyOf\":[{\"type\":\"string\"}],\"allOf\":[{\"type\":\"string\"}]}",
         LL_EUNSUPPORTED, "merge into one; 'anyOf' cannot merge"},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"oneOf\":[{\"type\":\"string\"}]}",
         LL_EUNSUPPORTED, "more than one of 'anyOf', 'allOf' and 'oneOf'"},
        {"{\"oneOf\":[{\"$ref\":\"#/nowhere\"},{\"type\":\"string\"}]}", LL_EUNSUPPORTED,
         "exclude each other"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", LL_EINVAL,
         "the schemas of its 'allOf' share no type"},
        {"{\"allOf\":[{\"format\":\"date\"},{\"format\":\"uuid\"}]}", LL_EUNSUPPORTED,
         "'format' differs between the schemas"},
        {"{\"allOf\":[{\"enum\":[1,2]},{\"enum\":[3]}]}", LL_EINVAL,
         "no value is in the 'enum' / 'const' of every schema"},
        {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
         "{\"required\":[\"b\"]}]}", LL_EINVAL, "required property 'b' is kept out"},
        {"{\"allOf\":[{\"not\":{}},{}]}", LL_EUNSUPPORTED, "'not' cannot merge"},
        {"{\"allOf\":[{\"properties\":3},{}]}", LL_EINVAL, "'properties' must be an object"},
        {"{\"allOf\":[{\"required\":\"a\"},{}]}", LL_EINVAL, "'required' must be an array"},
        {"{\"allOf\":[{\"enum\":[]},{}]}", LL_EINVAL, "'enum' must be a non-empty array"},
        {"{\"$ref\":\"#\",\"minLength\":1}", LL_EUNSUPPORTED, "nests too deeply"},
        {"{\"allOf\":[{\"$ref\":\"#/x\"},{}]}", LL_EUNSUPPORTED, "does not resolve"},
        {"{\"type\":\"array\",\"additionalItems\":false}", LL_EINVAL, "tuple form"},
        {"{\"type\":\"array\",\"prefixItems\":{}}", LL_EINVAL, "prefixItems must be an array"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", LL_EINVAL,
         "'items' is false after 1 items"},
        {"{\"type\":\"strng\"}", LL_EINVAL, "unknown type 'strng'"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"],"
         "\"additionalProperties\":false}", LL_EINVAL, "required property 'a' is not in"},
        {"{\"$ref\":\"#/$defs/missing\"}", LL_EINVAL, "does not resolve"},
        {"{\"$ref\":\"http://x/y\"}", LL_EINVAL, "local references"},
        {"{\"enum\":[]}", LL_EINVAL, "non-empty"},
        {"{\"type\":\"string\",\"const\":5}", LL_EINVAL, "no value of 'const' is of its 'type'"},
        {"{\"enum\":[\"a\",\"b\"],\"const\":\"c\"}", LL_EINVAL, "in 'enum' and of its"},
        {"{\"enum\":[\"a\"],\"minLength\":3}", LL_EUNSUPPORTED, "'minLength' beside 'enum'"},
        {"{\"const\":{},\"properties\":{}}", LL_EUNSUPPORTED, "'properties' beside 'const'"},
        {"{\"type\":\"string\",\"minLength\":100000}", LL_EUNSUPPORTED, "minLength: at most 256"},
        {"{\"type\":\"array\",\"minItems\":300}", LL_EUNSUPPORTED, "minItems: at most 256"},
        /* found by fuzz_grammar_json: a count past int's range was cast to int (UB) */
        {"{\"type\":\"array\",\"minItems\":3.6e54}", LL_EUNSUPPORTED, "minItems"},
        {"{\"type\":\"array\",\"minItems\":1e999}", LL_EUNSUPPORTED, "minItems"},
        {"{\"type\":\"string\",\"minLength\":-3e40}", LL_EINVAL, "minLength"},
        {"{\"type\":\"string\",\"minLength\":2.5}", LL_EINVAL, "minLength"},
        {"false", LL_EINVAL, "matches nothing"},
        {"3", LL_EINVAL, "must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ll_err err = {0};
        struct grammar *g = schema_grammar(cases[i].schema, &err);
        if (g || err.code != cases[i].want || !strstr(err.msg, cases[i].names))
            fail_msg("case %zu: %s: got %d '%s'", i, cases[i].schema, err.code, err.msg);
    }
}

/* ---- the matcher on the real vocabulary ---- */

/* Brute force: the ids a state allows are exactly those whose bytes advance it. */
static void test_mask_matches_brute_force(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
        "\"n\":{\"type\":\"integer\"}},\"required\":[\"city\",\"n\"]}", &err);
    assert_non_null(g);
    struct grammar_rt *rt;
    assert_int_equal(grammar_rt_new(&rt, g, g_trie, &err), LL_OK);
    const char *prefixes[] = {"", "{\"city\":\"Par", "{\"city\":\"Paris\",\"n\":1",
                              "{\"city\":\"Paris\",\"n\":12}"};
    float *row = malloc(sizeof *row * VOCAB), *row2 = malloc(sizeof *row2 * VOCAB);
    int32_t eos = 151643;
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        int st = grammar_rt_advance(rt, grammar_rt_start(rt), prefixes[p], strlen(prefixes[p]));
        assert_true(st >= 0);
        for (int pass = 0; pass < 2; pass++) { /* the second from the cache */
            for (int i = 0; i < VOCAB; i++)
                row[i] = 1.0f;
            int n = grammar_rt_mask(rt, st, row, &eos, 1, 0);
            if (pass == 1) {
                for (int i = 0; i < VOCAB; i++)
                    assert_true((row[i] == 1.0f) == (row2[i] == 1.0f));
                continue;
            }
            memcpy(row2, row, sizeof *row * VOCAB);
            int count = 0;
            for (int32_t id = 0; id < VOCAB; id++) {
                size_t len = 0;
                const char *s = id < tokenizer_vocab_size(g_tok)
                                    ? tokenizer_id_bytes(g_tok, id, &len) : NULL;
                bool want;
                if (id == eos)
                    want = grammar_rt_accepts(rt, st);
                else
                    want = s && len && !tokenizer_is_special(g_tok, id) &&
                           grammar_rt_advance(rt, st, s, len) >= 0;
                if (want != (row[id] == 1.0f))
                    fail_msg("prefix '%s' id %d: want %d", prefixes[p], id, want);
                count += want;
            }
            assert_int_equal(n, count);
        }
    }
    /* complete after the closing brace */
    int st = grammar_rt_advance(rt, grammar_rt_start(rt), prefixes[3], strlen(prefixes[3]));
    assert_true(grammar_rt_complete(rt, st));
    free(row);
    free(row2);
    grammar_rt_free(rt);
    grammar_unref(g);
}

/* A tiny validator for the schemas below (independent of the grammar). */
static bool valid(const cJSON *v, const cJSON *s)
{
    const cJSON *t = cJSON_GetObjectItem(s, "type");
    const cJSON *en = cJSON_GetObjectItem(s, "enum");
    if (en) {
        const cJSON *e;
        cJSON_ArrayForEach(e, en)
            if (cJSON_Compare(e, v, true))
                return true;
        return false;
    }
    const char *ty = t ? t->valuestring : "";
    if (!strcmp(ty, "string")) {
        const cJSON *f = cJSON_GetObjectItem(s, "format"), *pat = cJSON_GetObjectItem(s, "pattern");
        if (!cJSON_IsString(v) || (f && strcmp(f->valuestring, "date")))
            return false;
        if (pat) { /* POSIX ERE reads the patterns used here as ECMA does */
            regex_t px;
            if (regcomp(&px, pat->valuestring, REG_EXTENDED | REG_NOSUB))
                return false;
            bool ok = regexec(&px, v->valuestring, 0, NULL, 0) == 0;
            regfree(&px);
            return ok;
        }
        if (!f)
            return true;
        /* an RFC 3339 full-date: YYYY-MM-DD, a day of that month (leap years counted) */
        int y, m, d, n = 0;
        if (strlen(v->valuestring) != 10 || v->valuestring[4] != '-' ||
            sscanf(v->valuestring, "%4d-%2d-%2d%n", &y, &m, &d, &n) != 3 || n != 10 || m < 1 ||
            m > 12 || d < 1)
            return false;
        static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        return d <= mdays[m - 1] + (m == 2 && leap);
    }
    if (!strcmp(ty, "integer") || !strcmp(ty, "number")) {
        if (!cJSON_IsNumber(v) || (ty[0] == 'i' && v->valuedouble != floor(v->valuedouble)))
            return false;
        const cJSON *b;
        double x = v->valuedouble;
        double q = (b = cJSON_GetObjectItem(s, "multipleOf")) ? x / b->valuedouble : 0;
        return (!(b = cJSON_GetObjectItem(s, "minimum")) || x >= b->valuedouble) &&
               (!(b = cJSON_GetObjectItem(s, "exclusiveMinimum")) || x > b->valuedouble) &&
               (!(b = cJSON_GetObjectItem(s, "maximum")) || x <= b->valuedouble) &&
               (!(b = cJSON_GetObjectItem(s, "exclusiveMaximum")) || x < b->valuedouble) &&
               fabs(q - round(q)) <= 1e-9 * (1 + fabs(q));
    }
    if (!strcmp(ty, "boolean"))
        return cJSON_IsBool(v);
    if (!strcmp(ty, "array")) {
        if (!cJSON_IsArray(v))
            return false;
        const cJSON *x;
        cJSON_ArrayForEach(x, v)
            if (!valid(x, cJSON_GetObjectItem(s, "items")))
                return false;
        return true;
    }
    if (!strcmp(ty, "object")) {
        if (!cJSON_IsObject(v))
            return false;
        const cJSON *props = cJSON_GetObjectItem(s, "properties"), *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(s, "required"))
            if (!cJSON_GetObjectItemCaseSensitive(v, x->valuestring))
                return false;
        cJSON_ArrayForEach(x, v) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, x->string);
            if (!ps || !valid(x, ps))
                return false;
        }
        return true;
    }
    return false;
}

/* "Random models": logits from a hash of (seed, step, id), masked, argmax. Every output must
 * be complete, parse, and validate, within max_tokens. */
static void test_random_models_valid(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"age\":{\"type\":\"integer\",\"minimum\":18,\"maximum\":120},"
        "\"mood\":{\"enum\":[\"happy\",\"sad\"]},\"born\":{\"type\":\"string\","
        "\"format\":\"date\"},\"code\":{\"type\":\"string\",\"pattern\":"
        "\"^[A-Z]{2,3}-[0-9]{2,4}(x|yz)?$\"},"
        "\"scores\":{\"type\":\"array\",\"items\":{\"type\":\"number\",\"minimum\":-1,"
        "\"exclusiveMaximum\":0.5}},"
        "\"pet\":{\"type\":\"object\",\"properties\":{\"kind\":{\"type\":\"string\"},"
        "\"legs\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"legs\"]},"
        "\"qty\":{\"type\":\"integer\",\"multipleOf\":7},\"price\":{\"type\":\"number\","
        "\"multipleOf\":0.05},\"size\":{\"type\":\"number\",\"minimum\":1,\"maximum\":4,"
        "\"multipleOf\":0.5}},"
        "\"required\":[\"name\",\"age\",\"mood\",\"born\",\"code\",\"scores\",\"pet\",\"qty\","
        "\"price\",\"size\"]}";
    cJSON *sj = cJSON_Parse(schema);
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(schema, &err);
    assert_non_null(g);
    struct grammar_rt *rt;
    assert_int_equal(grammar_rt_new(&rt, g, g_trie, &err), LL_OK);
    float *row = malloc(sizeof *row * VOCAB);
    int32_t eos = 151643;
    int max_tokens[] = {150, 170, 240};
    int n_complete_by_grammar = 0;
    float *base = malloc(sizeof *base * VOCAB);
    for (int i = 0; i < VOCAB; i++)
        base[i] = (float)(8.0 * sampler_like_uniform(99, 0, i));
    for (int seed = 0; seed < 6; seed++) {
        int budget = max_tokens[seed % 3];
        char text[16384];
        size_t len = 0;
        int st = grammar_rt_start(rt);
        bool ended = false;
        for (int k = 0; k < budget && !ended; k++) {
            int shift = (int)(sampler_like_uniform(seed, k, 0) * VOCAB); /* a "model": */
            for (int i = 0; i < VOCAB; i++) /* fixed random logits, rotated each step */
                row[i] = base[(i + shift) % VOCAB];
            int n = grammar_rt_mask(rt, st, row, &eos, 1, budget - k);
            assert_true(n > 0);
            int best = 0;
            for (int i = 1; i < VOCAB; i++)
                if (row[i] > row[best])
                    best = i;
            assert_true(isfinite(row[best]));
            if (best == eos) {
                ended = true;
                break;
            }
            size_t bl = 0;
            const char *bytes = tokenizer_id_bytes(g_tok, best, &bl);
            st = grammar_rt_advance(rt, st, bytes, bl);
            assert_true(st >= 0);
            assert_true(len + bl < sizeof text);
            memcpy(text + len, bytes, bl);
            len += bl;
            if (grammar_rt_complete(rt, st)) {
                ended = true;
                n_complete_by_grammar++;
            }
        }
        text[len] = 0;
        assert_true(grammar_rt_accepts(rt, st));
        if (getenv("GRAMMAR_SHOW")) fprintf(stderr, "[%d] %s\n", budget, text);
        cJSON *v = cJSON_ParseWithLength(text, len);
        if (!v || !valid(v, sj))
            fail_msg("seed %d: invalid output: %s", seed, text);
        cJSON_Delete(v);
    }
    assert_true(n_complete_by_grammar > 0);
    free(row);
    free(base);
    grammar_rt_free(rt);
    grammar_unref(g);
    cJSON_Delete(sj);
}


/* ---- in the engine (tiny-qwen2: random weights) ---- */

#define MAXOUT 256
struct result {
    int32_t ids[MAXOUT];
    struct sampler_logprobs lp[MAXOUT];
    int n;
    char text[16384], reasoning[16384];
    size_t len, rlen;
    enum engine_finish finish;
    char error[256];
};

static struct engine *make_engine(struct engine_opts o)
{
    struct engine *e = NULL;
    struct ll_err err = {0};
    o.n_threads = 1;
    if (engine_create(&e, FIXTURE, &o, &err) != LL_OK)
        fail_msg("engine_create: %s", err.msg);
    return e;
}

static void run_requests(struct engine *e, const struct engine_params *p, int n,
                         struct result *res)
{
    struct engine_req *r[32];
    struct ll_err err = {0};
    for (int i = 0; i < n; i++)
        if (engine_submit(e, &p[i], &r[i], &err) != LL_OK)
            fail_msg("engine_submit: %s", err.msg);
    assert_int_equal(engine_run_until_idle(e, &err), LL_OK);
    for (int i = 0; i < n; i++) {
        struct engine_output out = {0};
        memset(&res[i], 0, sizeof res[i]);
        engine_poll(r[i], &out);
        assert_true(out.n_ids <= MAXOUT);
        res[i].n = out.n_ids;
        memcpy(res[i].ids, out.ids, sizeof(int32_t) * (size_t)out.n_ids);
        if (out.logprobs && p[i].logprobs)
            memcpy(res[i].lp, out.logprobs, sizeof *out.logprobs * (size_t)out.n_ids);
        assert_true(out.text.len < sizeof res[i].text && out.reasoning.len < sizeof res[i].text);
        if (out.text.len)
            memcpy(res[i].text, out.text.data, out.text.len);
        res[i].len = out.text.len;
        if (out.reasoning.len)
            memcpy(res[i].reasoning, out.reasoning.data, out.reasoning.len);
        res[i].rlen = out.reasoning.len;
        res[i].finish = out.finish;
        snprintf(res[i].error, sizeof res[i].error, "%s", out.error);
        engine_output_free(&out);
        engine_req_release(r[i]);
    }
}

static const char *person_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},\"mood\":{\"enum\":[\"happy\",\"sad\"]}},"
    "\"required\":[\"name\",\"age\",\"mood\"],\"additionalProperties\":false}";

static void assert_person(const struct result *r, const cJSON *schema)
{
    if (r->finish == ENGINE_FINISH_ERROR)
        fail_msg("finished with error: %s", r->error);
    cJSON *v = cJSON_ParseWithLength(r->text, r->len);
    if (!v || !valid(v, schema))
        fail_msg("not valid against the schema: '%.*s'", (int)r->len, r->text);
    cJSON_Delete(v);
}

static void test_engine_constrained(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(person_schema, &err);
    cJSON *sj = cJSON_Parse(person_schema);
    assert_non_null(g);
    enum { NR = 8 };
    int32_t prompts[NR][8];
    struct engine_params p[NR];
    for (int i = 0; i < NR; i++) {
        for (int k = 0; k < 8; k++)
            prompts[i][k] = (int32_t)(sampler_uniform(900 + (uint64_t)i, (uint64_t)k) * 150000);
        /* even: constrained, seeded sampling, 48 tokens at most; odd: free, greedy */
        p[i] = (struct engine_params){
            .prompt = prompts[i], .n_prompt = 8, .max_tokens = i % 2 ? 12 : 48,
            .sampling = {.temperature = i % 2 ? 0.0f : 1.0f, .seed = 7 + (uint64_t)i},
            .grammar = i % 2 ? NULL : g, .logprobs = i == 0, .top_logprobs = i == 0 ? 5 : 0};
    }
    struct engine_opts roomy = {.n_ctx = 256, .max_seqs = NR, .max_batch_tokens = 256};
    struct engine *e = make_engine(roomy);
    struct result *alone = calloc(NR, sizeof *alone), *together = calloc(NR, sizeof *together);
    for (int i = 0; i < NR; i++)
        run_requests(e, &p[i], 1, &alone[i]);
    run_requests(e, p, NR, together);
    engine_destroy(e);
    for (int i = 0; i < NR; i++) {
        assert_int_equal(alone[i].n, together[i].n);
        assert_memory_equal(alone[i].ids, together[i].ids, sizeof(int32_t) * (size_t)alone[i].n);
        if (i % 2 == 0) {
            assert_person(&alone[i], sj);
            assert_true(alone[i].finish == ENGINE_FINISH_STOP);
        }
    }
    /* logprobs are of the masked distribution: every listed alternative continues the text */
    struct grammar_rt *rt;
    assert_int_equal(grammar_rt_new(&rt, g, g_trie, &err), LL_OK);
    int st = grammar_rt_start(rt);
    for (int k = 0; k < alone[0].n; k++) {
        const struct sampler_logprobs *lp = &alone[0].lp[k];
        double mass = 0;
        for (int j = 0; j < lp->n_top; j++) {
            if (!isfinite(lp->top_logprobs[j]))
                continue;
            size_t bl = 0;
            const char *b = tokenizer_id_bytes(g_tok, lp->top_ids[j], &bl);
            assert_true(grammar_rt_advance(rt, st, b, bl) >= 0);
            mass += exp(lp->top_logprobs[j]);
        }
        assert_true(mass <= 1.0001);
        size_t bl = 0;
        const char *b = tokenizer_id_bytes(g_tok, alone[0].ids[k], &bl);
        st = grammar_rt_advance(rt, st, b, bl);
        assert_true(st >= 0);
    }
    assert_true(grammar_rt_complete(rt, st));
    grammar_rt_free(rt);

    /* preemption: a pool of 6 blocks of 16 for 4 requests of up to 56 tokens each */
    struct engine_opts tiny = {.n_ctx = 128, .max_seqs = 4, .max_batch_tokens = 64,
                               .block_size = 16, .kv_blocks = 6};
    e = make_engine(tiny);
    struct engine_params q[4];
    for (int i = 0; i < 4; i++)
        q[i] = p[2 * i];
    run_requests(e, q, 4, together);
    struct engine_stats stats;
    engine_get_stats(e, &stats);
    engine_destroy(e);
    assert_true(stats.preemptions > 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(alone[2 * i].n, together[i].n);
        assert_memory_equal(alone[2 * i].ids, together[i].ids,
                            sizeof(int32_t) * (size_t)together[i].n);
    }
    free(alone);
    free(together);
    grammar_unref(g);
    cJSON_Delete(sj);
}

/* A prompt that leaves "<think>" open: the reasoning is free, the answer is the JSON; a small
 * max_tokens forces "</think>" in time. */
static void test_engine_after_reasoning(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct grammar *g = schema_grammar(person_schema, &err);
    cJSON *sj = cJSON_Parse(person_schema);
    int32_t prompt[6] = {151646, 151644, 9707, 151645, 151648, 198}; /* ...<think>\n */
    struct engine_params p[2];
    for (int i = 0; i < 2; i++)
        p[i] = (struct engine_params){.prompt = prompt, .n_prompt = 6, .max_tokens = 50 + 20 * i,
                                      .sampling = {.temperature = 1.0f, .seed = (uint64_t)i},
                                      .reasoning = true, .grammar = g};
    struct engine *e = make_engine((struct engine_opts){.n_ctx = 256});
    struct result res[2];
    run_requests(e, p, 2, res);
    engine_destroy(e);
    for (int i = 0; i < 2; i++) {
        assert_person(&res[i], sj);
        assert_true(res[i].n <= p[i].max_tokens);
    }
    /* the reasoning came out as reasoning, not in the answer */
    assert_true(res[0].rlen + res[1].rlen > 0);
    grammar_unref(g);
    cJSON_Delete(sj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builder_rules),
        cmocka_unit_test(test_builder_checks),
        cmocka_unit_test(test_schema_types),
        cmocka_unit_test(test_schema_keywords),
        cmocka_unit_test(test_schema_bounds),
        cmocka_unit_test(test_schema_multiple),
        cmocka_unit_test(test_schema_formats),
        cmocka_unit_test(test_schema_pattern),
        cmocka_unit_test(test_schema_lookaround),
        cmocka_unit_test(test_schema_refused),
        cmocka_unit_test(test_mask_matches_brute_force),
        cmocka_unit_test(test_random_models_valid),
        cmocka_unit_test(test_engine_constrained),
        cmocka_unit_test(test_engine_after_reasoning),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
