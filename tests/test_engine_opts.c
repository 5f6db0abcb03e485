/*
 * test_engine_opts.c: the engine-option table (engine_opts.h) and the value parsers (parse.h):
 * every option found by its flag with its LLAISYS_* variable; values parsed and refused with
 * messages naming the source; one range per option, pinned where the old copies disagreed, and
 * equal to what engine_create accepts; the defaults of each profile and of the model-dependent
 * fields (the n_ctx rule, the KV pool); the help text written from the same defaults; the
 * cross-option checks; the server reading the table (variables, flags winning, ranges, the
 * server profile); the print names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "model.h"
#include "parse.h"
#include "pool.h"
#include "server.h"

#define FIXTURE "tests/fixtures/tiny-qwen2"

static const struct engine_opt_def *def(enum engine_opt_id id) { return &engine_opt_defs[id]; }

/* engine_opts_set on a zeroed struct; *o gets the result. */
static enum ll_status set(struct engine_opts *o, enum engine_opt_id id, const char *val,
                          struct ll_err *err)
{
    memset(o, 0, sizeof *o);
    return engine_opts_set(o, def(id), val, def(id)->flag, err);
}

static void test_table(void **state)
{
    (void)state;
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        const struct engine_opt_def *d = def(i);
        /* the variable is LLAISYS_ + the flag in upper case, '-' as '_' */
        char env[64] = "LLAISYS_";
        size_t k = strlen(env);
        assert_true(!strncmp(d->flag, "--", 2));
        for (const char *p = d->flag + 2; *p; p++)
            env[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        env[k] = 0;
        assert_string_equal(d->env, env);
        assert_ptr_equal(engine_opts_find(d->flag, strlen(d->flag)), d);
        assert_true((d->arg == NULL) == (d->type == ENGINE_OPT_BOOL));
        assert_true((d->choices != NULL) == (d->type == ENGINE_OPT_CHOICE));
        assert_true(d->min <= d->max);
        assert_non_null(d->help);
    }
    const char *eq = "--ctx=64";
    assert_ptr_equal(engine_opts_find(eq, 5), def(ENGINE_OPT_CTX));
    assert_null(engine_opts_find("--ct", 4));
    assert_null(engine_opts_find("--ctxx", 6));
    assert_null(engine_opts_find("--model", 7));
}

static void test_set_values(void **state)
{
    (void)state;
    struct engine_opts o;
    struct ll_err err = {0};
    assert_int_equal(set(&o, ENGINE_OPT_CTX, "1024", &err), LL_OK);
    assert_int_equal(o.n_ctx, 1024);
    assert_int_equal(set(&o, ENGINE_OPT_KV_MEMORY, "1.5G", &err), LL_OK);
    assert_true(o.kv_memory == (size_t)3 << 29);
    assert_int_equal(set(&o, ENGINE_OPT_EXACT, NULL, &err), LL_OK); /* bare flag */
    assert_true(o.exact);
    assert_int_equal(set(&o, ENGINE_OPT_NO_PREFIX_CACHE, "off", &err), LL_OK);
    assert_false(o.no_prefix_cache);
    assert_int_equal(set(&o, ENGINE_OPT_NO_PREFIX_CACHE, "Yes", &err), LL_OK);
    assert_true(o.no_prefix_cache);

    o.n_ctx = 7; /* untouched on error */
    assert_int_equal(engine_opts_set(&o, def(ENGINE_OPT_CTX), "12x", "LLAISYS_CTX", &err),
                     LL_EINVAL);
    assert_int_equal(o.n_ctx, 7);
    assert_string_equal(err.msg, "LLAISYS_CTX: must be an integer from 2 to 16777216 (got '12x')");
    assert_int_equal(set(&o, ENGINE_OPT_THREADS, NULL, &err), LL_EINVAL);
    assert_string_equal(err.msg, "--threads needs a value (N)");
    assert_int_equal(set(&o, ENGINE_OPT_EXACT, "maybe", &err), LL_EINVAL);
    assert_string_equal(err.msg, "--exact: must be 1/true/yes/on or 0/false/no/off (got 'maybe')");
    assert_int_equal(set(&o, ENGINE_OPT_KV_MEMORY, "0", &err), LL_EINVAL);
    assert_string_equal(err.msg, "--kv-memory: must be a size in bytes from 1 to 1024T, such as "
                                 "65536, 512K, 64M or 2G (got '0')");
    /* --quant: a choice, stored as its index; the names are model_qscheme.h's */
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "q4_0", &err), LL_OK);
    assert_int_equal(o.quant, 2);
    struct model_open_opts mo = engine_opts_model_open(&o);
    assert_true(mo.quantize && mo.qscheme == MODEL_QS_Q4_0 && mo.n_threads == 2);
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "q8_0", &err), LL_OK);
    mo = engine_opts_model_open(&o);
    assert_true(mo.quantize && mo.qscheme == MODEL_QS_Q8_0);
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "none", &err), LL_OK);
    assert_int_equal(o.quant, 0);
    assert_false(engine_opts_model_open(&o).quantize);
    for (int i = 1; engine_quant_names[i]; i++) {
        enum model_qscheme t;
        if (!strcmp(engine_quant_names[i], "bf16p"))
            continue; /* not a quantization scheme: packing, below */
        assert_true(model_qscheme_parse(engine_quant_names[i], &t));
        assert_string_equal(model_qscheme_name(t), engine_quant_names[i]);
    }
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "bf16p", &err), LL_OK);
    mo = engine_opts_model_open(&o);
    assert_true(mo.pack_bf16 && !mo.quantize);
    assert_int_equal(engine_opts_set(&o, def(ENGINE_OPT_QUANT), "Q4_0", "LLAISYS_QUANT", &err),
                     LL_EINVAL);
    assert_string_equal(err.msg,
                        "LLAISYS_QUANT: must be one of none, q8_0, q4_0, q4_k, q4_k_m, bf16p (got "
                        "'Q4_0')");
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "q4_k", &err), LL_OK);
    assert_int_equal(o.quant, 3);
    mo = engine_opts_model_open(&o);
    assert_true(mo.quantize && mo.qscheme == MODEL_QS_Q4_K);
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, "q4_k_m", &err), LL_OK);
    assert_int_equal(o.quant, 4);
    mo = engine_opts_model_open(&o);
    assert_true(mo.quantize && mo.qscheme == MODEL_QS_Q4_K_M);
    assert_int_equal(set(&o, ENGINE_OPT_QUANT, NULL, &err), LL_EINVAL);
    assert_string_equal(err.msg, "--quant needs a value (TYPE)");
    assert_int_equal(set(&o, ENGINE_OPT_MAX_SEQS, "", &err), LL_EINVAL);
    assert_int_equal(set(&o, ENGINE_OPT_MAX_SEQS, " 4", &err), LL_EINVAL);
    assert_int_equal(set(&o, ENGINE_OPT_MAX_SEQS, "99999999999999999999", &err), LL_EINVAL);

    /* a choice takes one of its names, nothing else */
    assert_int_equal(set(&o, ENGINE_OPT_SPEC, "ngram", &err), LL_OK);
    assert_int_equal(o.spec, ENGINE_SPEC_NGRAM);
    assert_int_equal(set(&o, ENGINE_OPT_SPEC, "ngram-always", &err), LL_OK);
    assert_int_equal(o.spec, ENGINE_SPEC_NGRAM_ALWAYS);
    assert_int_equal(set(&o, ENGINE_OPT_SPEC, "off", &err), LL_OK);
    assert_int_equal(o.spec, ENGINE_SPEC_OFF);
    o.spec = ENGINE_SPEC_NGRAM; /* untouched on error */
    assert_int_equal(engine_opts_set(&o, def(ENGINE_OPT_SPEC), "NGRAM", "LLAISYS_SPEC", &err),
                     LL_EINVAL);
    assert_int_equal(o.spec, ENGINE_SPEC_NGRAM);
    assert_string_equal(err.msg, "LLAISYS_SPEC: must be one of off, ngram, ngram-always (got 'NGRAM')");
    assert_int_equal(set(&o, ENGINE_OPT_SPEC, "", &err), LL_EINVAL);
    assert_int_equal(set(&o, ENGINE_OPT_SPEC, NULL, &err), LL_EINVAL);
    assert_string_equal(err.msg, "--spec needs a value (MODE)");
    o.spec = (enum engine_spec)7; /* engine_create refuses a value outside the table */
    assert_int_equal(engine_opts_check(&o, &err), LL_EINVAL);
    assert_string_equal(err.msg, "engine options: --spec: no mode 7");
}

/* One range per option, the one engine_create applies. Where the server, the CLI and the
 * engine disagreed: threads 1..256 (the server took 1024, the runtime refuses > 256), ctx
 * 2..2^24 (the server wanted >= 16 and <= 2^20, generate took 1, the engine needs 2),
 * max-batch-tokens <= 65536 (the server took 2^20), max-queue <= 2^24 (the server 2^20). */
static void test_ranges(void **state)
{
    (void)state;
    static const struct {
        enum engine_opt_id id;
        long long min, max;
    } want[] = {
        {ENGINE_OPT_THREADS, 1, 256},           {ENGINE_OPT_CTX, 2, 1 << 24},
        {ENGINE_OPT_MAX_SEQS, 1, 4096},         {ENGINE_OPT_MAX_BATCH_TOKENS, 1, 65536},
        {ENGINE_OPT_MAX_QUEUE, 1, 1 << 24},     {ENGINE_OPT_KV_BLOCKS, 1, 1 << 24},
        {ENGINE_OPT_BLOCK_SIZE, 1, 4096},       {ENGINE_OPT_KV_MEMORY, 1, 1LL << 50},
        {ENGINE_OPT_ITL_TARGET_MS, 1, 600000},  {ENGINE_OPT_SPEC_MAX_DRAFT, 1, 16},
        {ENGINE_OPT_ITL_MAX_RATIO, 150, 100000},
    };
    struct engine_opts o;
    struct ll_err err = {0};
    char v[32];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct engine_opt_def *d = def(want[i].id);
        assert_int_equal(d->min, want[i].min);
        assert_int_equal(d->max, want[i].max);
        snprintf(v, sizeof v, "%lld", d->min - 1);
        assert_int_equal(set(&o, want[i].id, v, &err), LL_EINVAL);
        snprintf(v, sizeof v, "%lld", d->max + 1);
        assert_int_equal(set(&o, want[i].id, v, &err), LL_EINVAL);
        /* both ends pass engine_create's check (with a batch that fits the sequences) */
        long long ends[2] = {d->min, d->max};
        for (int e = 0; e < 2; e++) {
            snprintf(v, sizeof v, "%lld", ends[e]);
            assert_int_equal(set(&o, want[i].id, v, &err), LL_OK);
            if (want[i].id == ENGINE_OPT_MAX_SEQS)
                o.max_batch_tokens = 65536;
            if (want[i].id == ENGINE_OPT_MAX_BATCH_TOKENS)
                o.max_seqs = 1;
            if (want[i].id == ENGINE_OPT_KV_BLOCKS && e == 1)
                o.block_size = 64; /* 2^24 x 64 = 2^30 slots */
            engine_opts_resolve(&o, NULL);
            if (engine_opts_check(&o, &err) != LL_OK)
                fail_msg("%s %s: %s", d->flag, v, err.msg);
        }
    }

    /* engine_create itself takes the smallest context and the largest step */
    struct engine *e = NULL;
    struct engine_opts small = {.n_threads = 1, .n_ctx = 2, .max_batch_tokens = 65536};
    if (engine_create(&e, FIXTURE, &small, &err) != LL_OK)
        fail_msg("engine_create: %s", err.msg);
    assert_int_equal(engine_get_opts(e)->n_ctx, 2);
    assert_int_equal(engine_get_opts(e)->max_batch_tokens, 65536);
    engine_destroy(e);
    /* and refuses out of range, naming the flag */
    struct engine_opts many = {.n_threads = 257};
    assert_int_equal(engine_create(&e, FIXTURE, &many, &err), LL_EINVAL);
    assert_null(e);
    assert_non_null(strstr(err.msg, "--threads must be from 1 to 256 (got 257)"));
    struct engine_opts tiny = {.n_threads = 1, .kv_memory = 100}; /* less than one block */
    assert_int_equal(engine_create(&e, FIXTURE, &tiny, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "at least one block"));
}

static void test_checks(void **state)
{
    (void)state;
    struct ll_err err = {0};
    struct engine_opts o = {.max_seqs = 300, .max_batch_tokens = 200};
    assert_int_equal(engine_opts_check(&o, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "--max-batch-tokens 200 must be at least --max-seqs 300"));
    o = (struct engine_opts){.max_seqs = 600}; /* the default batch follows max-seqs */
    engine_opts_resolve(&o, NULL);
    assert_int_equal(o.max_batch_tokens, 600);
    assert_int_equal(engine_opts_check(&o, &err), LL_OK);
    o = (struct engine_opts){.kv_blocks = 1 << 24, .block_size = 128};
    assert_int_equal(engine_opts_check(&o, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "2^30"));
    o = (struct engine_opts){0}; /* zero fields are defaults, not errors */
    assert_int_equal(engine_opts_check(&o, &err), LL_OK);
}

static void test_defaults(void **state)
{
    (void)state;
    struct engine_opts o = {0};
    engine_opts_resolve(&o, NULL);
    assert_int_equal(o.n_threads, 2);
    assert_int_equal(o.block_size, 16);
    assert_int_equal(o.max_seqs, 16);
    assert_int_equal(o.max_batch_tokens, 512);
    assert_int_equal(o.max_queue, 256);
    assert_int_equal(o.n_ctx, 0); /* needs the model */
    assert_int_equal(o.kv_blocks, 0);

    struct engine_opts s = {.profile = ENGINE_PROFILE_SERVER};
    engine_opts_resolve(&s, NULL);
    assert_int_equal(s.max_seqs, 32);
    assert_int_equal(s.max_batch_tokens, 512);
    s = (struct engine_opts){.profile = ENGINE_PROFILE_SERVER, .max_seqs = 800};
    engine_opts_resolve(&s, NULL);
    assert_int_equal(s.max_batch_tokens, 800);

    /* the n_ctx rule: min(4096, max_position_embeddings) */
    struct model_config c = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 16};
    static const int maxpos[][2] = {{1000, 1000}, {4096, 4096}, {100000, 4096}, {0, 4096}};
    for (size_t i = 0; i < sizeof maxpos / sizeof maxpos[0]; i++) {
        c.max_position = maxpos[i][0];
        o = (struct engine_opts){0};
        engine_opts_resolve(&o, &c);
        assert_int_equal(o.n_ctx, maxpos[i][1]);
    }
    /* the KV pool: max(ctx, max_seqs x ctx / 4) tokens, in blocks; kv_memory what they take */
    c.max_position = 1000;
    o = (struct engine_opts){0};
    engine_opts_resolve(&o, &c);
    assert_int_equal(o.kv_blocks, 16 * 1000 / 4 / 16);
    size_t per_block = 2 * 2 * 2 * 16 * 2 * 16; /* layers, K+V, kv heads, head dim, bf16, bs */
    assert_true(o.kv_memory == (size_t)o.kv_blocks * per_block);
    o = (struct engine_opts){.max_seqs = 2, .n_ctx = 100};
    engine_opts_resolve(&o, &c);
    assert_int_equal(o.kv_blocks, 7); /* 100 tokens, rounded up */
    o = (struct engine_opts){.kv_memory = 10 * per_block + 5};
    engine_opts_resolve(&o, &c);
    assert_int_equal(o.kv_blocks, 10);
    assert_true(o.kv_memory == 10 * per_block);
    o = (struct engine_opts){.kv_memory = 10 * per_block, .exact = true}; /* f32: twice the bytes */
    engine_opts_resolve(&o, &c);
    assert_int_equal(o.kv_blocks, 5);
    o = (struct engine_opts){.kv_blocks = 3, .kv_memory = 1 << 30}; /* blocks win */
    engine_opts_resolve(&o, &c);
    assert_int_equal(o.kv_blocks, 3);
    struct engine_opts again = o; /* idempotent */
    engine_opts_resolve(&again, &c);
    assert_memory_equal(&again, &o, sizeof o);

    /* what engine_create resolves on a real model */
    struct engine *e = NULL;
    struct ll_err err = {0};
    struct engine_opts one = {.n_threads = 1};
    if (engine_create(&e, FIXTURE, &one, &err) != LL_OK)
        fail_msg("engine_create: %s", err.msg);
    const struct engine_opts *r = engine_get_opts(e);
    assert_int_equal(r->n_ctx, 4096); /* the fixture's max_position_embeddings */
    assert_int_equal(r->max_seqs, 16);
    assert_int_equal(r->kv_blocks, 16 * 4096 / 4 / 16);
    assert_int_equal(r->itl_target_ms, ENGINE_ITL_TARGET_MS);
    assert_int_equal(r->itl_max_ratio, 160);
    assert_int_equal(r->spec, ENGINE_SPEC_OFF);
    assert_int_equal(r->spec_max_draft, 4);
    engine_destroy(e);
}

static void test_help(void **state)
{
    (void)state;
    char h[ENGINE_OPT_HELP_MAX];
    /* every help text fits whole (a valued option's ends with its range and default) */
    for (int i = 0; i < ENGINE_OPT_COUNT; i++)
        for (int p = 0; p < ENGINE_PROFILE_COUNT; p++) {
            const struct engine_opt_def *d = &engine_opt_defs[i];
            engine_opts_help(d, (enum engine_profile)p, h, sizeof h);
            if (strlen(h) + 1 >= sizeof h || (d->type != ENGINE_OPT_BOOL && h[strlen(h) - 1] != ')'))
                fail_msg("%s: help text cut short: %s", d->flag, h);
        }
    engine_opts_help(def(ENGINE_OPT_MAX_SEQS), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    assert_string_equal(h, "sequences decoded at once (1 to 4096; default 16)");
    engine_opts_help(def(ENGINE_OPT_MAX_SEQS), ENGINE_PROFILE_SERVER, h, sizeof h);
    assert_string_equal(h, "sequences decoded at once (1 to 4096; default 32)");
    engine_opts_help(def(ENGINE_OPT_MAX_BATCH_TOKENS), ENGINE_PROFILE_SERVER, h, sizeof h);
    assert_non_null(strstr(h, "(1 to 65536; default max(512, max-seqs))"));
    engine_opts_help(def(ENGINE_OPT_MAX_BATCH_TOKENS), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    assert_non_null(strstr(h, "default max(512, max-seqs))"));
    engine_opts_help(def(ENGINE_OPT_CTX), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    assert_non_null(strstr(h, "(2 to 16777216; default min(4096, max_position_embeddings))"));
    engine_opts_help(def(ENGINE_OPT_THREADS), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    char want_threads[128];
    snprintf(want_threads, sizeof want_threads,
             "compute threads (1 to 256; default the physical cores this process may use, %d here)",
             ll_pool_default_threads());
    assert_string_equal(h, want_threads);
    engine_opts_help(def(ENGINE_OPT_EXACT), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    assert_string_equal(h, "f32 activations and KV cache (default bf16 fast path)");
    engine_opts_help(def(ENGINE_OPT_SPEC), ENGINE_PROFILE_DEFAULT, h, sizeof h);
    assert_non_null(strstr(h, "off, ngram or ngram-always"));
    assert_non_null(strstr(h, "outputs are unchanged (default off)"));
    engine_opts_help(def(ENGINE_OPT_SPEC_MAX_DRAFT), ENGINE_PROFILE_SERVER, h, sizeof h);
    assert_non_null(strstr(h, "(1 to 16; default 4)"));
    engine_opts_help(def(ENGINE_OPT_ITL_TARGET_MS), ENGINE_PROFILE_SERVER, h, sizeof h);
    char want[64];
    snprintf(want, sizeof want, "(1 to 600000; default %d)", ENGINE_ITL_TARGET_MS);
    assert_non_null(strstr(h, want));
    engine_opts_help(def(ENGINE_OPT_QUANT), ENGINE_PROFILE_SERVER, h, sizeof h);
    assert_non_null(strstr(h, "none, q8_0 (8-bit), q4_0 (4-bit), q4_k (4-bit, sub-block"));
    assert_non_null(strstr(h, "bf16p (bf16 packed losslessly"));
    assert_non_null(strstr(h, "(default none: the weights as stored)"));
}

static void test_print(void **state)
{
    (void)state;
    struct engine_opts o = {.n_threads = 2, .n_ctx = 64, .max_seqs = 4, .max_batch_tokens = 32,
                            .max_queue = 9, .kv_blocks = 8, .kv_memory = 3 << 19,
                            .block_size = 16, .exact = true, .quant = 2,
                            .itl_target_ms = 250, .itl_max_ratio = 300,
                            .spec = ENGINE_SPEC_NGRAM, .spec_max_draft = 3, .mmap = true,
                            .fixed_threads = true};
    char buf[640] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    engine_opts_print(f, &o, ", ");
    fclose(f);
    assert_string_equal(buf, "threads: 2, ctx: 64, max-seqs: 4, max-batch-tokens: 32, "
                             "max-queue: 9, kv-blocks: 8, kv-memory: 1.5 MiB, block-size: 16, "
                             "no-prefix-cache: no, exact: yes, quant: q4_0, itl-target-ms: 250, "
                             "itl-max-ratio: 300, spec: ngram, spec-max-draft: 3, mmap: yes, "
                             "fixed-threads: yes");
    /* --mmap reaches model_open as keep_mapped */
    assert_true(engine_opts_model_open(&o).keep_mapped);
    o.mmap = false;
    assert_false(engine_opts_model_open(&o).keep_mapped);
}

static void test_parse_size(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {
        {"65536", 65536},        {"512K", 512 << 10},     {"512k", 512 << 10},
        {"64M", 64 << 20},       {"64MiB", 64 << 20},     {"2GB", 2ull << 30},
        {"2g", 2ull << 30},      {"1.5G", 3ull << 29},    {"1T", 1ull << 40},
        {".5K", 512},            {"100B", 100},           {"1.", 1},
        {"0.75", 0},             {"3KiB", 3 << 10},
    };
    struct ll_err err = {0};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t v = 1234;
        if (ll_parse_size("x", good[i].s, 0, UINT64_MAX, &v, &err) != LL_OK)
            fail_msg("'%s': %s", good[i].s, err.msg);
        if (v != good[i].v)
            fail_msg("'%s': %zu, want %llu", good[i].s, v, (unsigned long long)good[i].v);
    }
    static const char *const bad[] = {"", "K", "-1", "+1", " 1", "1 ", "1e3", "0x10", "inf",
                                      "1X", "1iB", "2gb", "1KK", "18446744073709551616",
                                      "16777216T", "1.5.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t v = 1234;
        if (ll_parse_size("--x", bad[i], 0, UINT64_MAX, &v, &err) == LL_OK)
            fail_msg("'%s' was accepted as %zu", bad[i], v);
        assert_true(v == 1234);
        assert_true(!strncmp(err.msg, "--x: must be a size", 19));
    }
    size_t v;
    assert_int_equal(ll_parse_size("x", "1K", 1, 1023, &v, &err), LL_EINVAL); /* range */
    assert_string_equal(err.msg, "x: must be a size in bytes from 1 to 1023, such as 65536, "
                                 "512K, 64M or 2G (got '1K')");
    assert_int_equal(ll_parse_size("x", NULL, 0, 10, &v, &err), LL_EINVAL);

    long long n;
    assert_int_equal(ll_parse_int("n", "-5", -10, 10, &n, &err), LL_OK);
    assert_int_equal(n, -5);
    assert_int_equal(ll_parse_int("n", "11", -10, 10, &n, &err), LL_EINVAL);
    assert_string_equal(err.msg, "n: must be an integer from -10 to 10 (got '11')");
    bool b = false;
    assert_int_equal(ll_parse_bool("b", "", &b, &err), LL_OK); /* an empty variable is false */
    assert_false(b);
    assert_int_equal(ll_parse_bool("b", "ON", &b, &err), LL_OK);
    assert_true(b);
}

static int server_parse(struct server_opts *o, int argc, const char **argv)
{
    return server_opts_parse(o, argc, (char **)argv);
}

/* The server reads the same table: variables, flags winning, the same ranges, the profile. */
static void test_server(void **state)
{
    (void)state;
    struct server_opts o;
    const char *plain[] = {"x", "--model", "m"};
    assert_int_equal(server_parse(&o, 3, plain), 0);
    assert_int_equal(o.engine.profile, ENGINE_PROFILE_SERVER);
    assert_int_equal(o.engine.max_seqs, 32);
    assert_int_equal(o.engine.max_batch_tokens, 512);
    assert_int_equal(o.engine.n_threads, 2);
    assert_int_equal(o.engine.n_ctx, 0); /* resolved when the model loads */
    server_opts_free(&o);

    setenv("LLAISYS_CTX", "64", 1);
    setenv("LLAISYS_BLOCK_SIZE", "8", 1);
    setenv("LLAISYS_NO_PREFIX_CACHE", "", 1); /* empty: false */
    const char *flags[] = {"x", "--model", "m", "--ctx", "128", "--max-seqs=800", "--exact",
                           "--kv-memory", "1.5G"};
    assert_int_equal(server_parse(&o, 9, flags), 0);
    assert_int_equal(o.engine.n_ctx, 128);    /* the flag wins */
    assert_int_equal(o.engine.block_size, 8); /* from the variable */
    assert_int_equal(o.engine.max_batch_tokens, 800);
    assert_true(o.engine.exact);
    assert_false(o.engine.no_prefix_cache);
    assert_true(o.engine.kv_memory == (size_t)3 << 29);
    server_opts_free(&o);
    unsetenv("LLAISYS_CTX");
    unsetenv("LLAISYS_BLOCK_SIZE");
    unsetenv("LLAISYS_NO_PREFIX_CACHE");

    static const char *const bad[][3] = {
        {"--threads", "257"}, /* the server took up to 1024; the engine refuses > 256 */
        {"--ctx", "1"},
        {"--ctx", "16777217"},
        {"--max-batch-tokens", "65537"}, /* the server took up to 2^20 */
        {"--max-seqs=300", "--max-batch-tokens=200"}, /* refused at parse, not at load */
        {"--kv-memory", "0"},
        {"--no-prefix-cache=2"},
        {"--ctx"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[6] = {"x", "--model", "m"};
        int n = 3;
        for (int k = 0; k < 3 && bad[i][k]; k++)
            argv[n++] = bad[i][k];
        if (server_parse(&o, n, argv) != -1)
            fail_msg("case %zu (%s) was accepted", i, bad[i][0]);
        server_opts_free(&o);
    }
    setenv("LLAISYS_THREADS", "1024", 1);
    assert_int_equal(server_parse(&o, 3, plain), -1);
    server_opts_free(&o);
    unsetenv("LLAISYS_THREADS");
    /* the server accepts what the engine accepts at both ends */
    const char *ends[] = {"x", "--model", "m", "--ctx", "2", "--threads", "256",
                          "--max-batch-tokens", "65536", "--max-queue", "16777216"};
    assert_int_equal(server_parse(&o, 11, ends), 0);
    server_opts_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),      cmocka_unit_test(test_set_values),
        cmocka_unit_test(test_ranges),     cmocka_unit_test(test_checks),
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_help),
        cmocka_unit_test(test_print),      cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
