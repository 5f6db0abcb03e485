/*
 * test_sampling_controls.c: the per-request controls of the engine (engine.h) on the tiny-qwen2
 * fixture: the text splitter (stop strings with hold-back, the <think> reasoning split) on
 * synthetic pieces; stop strings across token boundaries, at the very start and held back only
 * while a partial match is possible; min_tokens against eos, stop ids and stop strings;
 * penalties and logit_bias on real logits; logprobs; n > 1 choices sharing the prompt's blocks,
 * each reproducible; the reasoning split with and without "</think>"; and the determinism
 * guarantees (alone, in a batch, preempted, prefix-cached) with every control on; kept special
 * tokens (keep_ids: written as text when special tokens are skipped, allowed by a grammar where
 * their text is).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/engine/engine_impl.h" /* the text splitter, tested directly */
#include "engine.h"
#include "engine_harness.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

#define THINK_OPEN 151648
#define THINK_CLOSE 151649
#define EOS 151643

/* ---- the text splitter on synthetic pieces ---- */

struct split_out {
    char content[256], reason[256];
    int stop_hit;
};

/* Feed pieces (NULL-terminated), then a final empty piece; collect what is released. */
static void split_run(const char *const *stop, int n_stop, bool reasoning,
                      enum split_state start, bool check, const char *const *pieces,
                      struct split_out *o)
{
    size_t len[8];
    for (int i = 0; i < n_stop; i++)
        len[i] = strlen(stop[i]);
    struct text_split t;
    assert_int_equal(text_split_init(&t, stop, len, n_stop, reasoning, start, 64, NULL), LL_OK);
    memset(o, 0, sizeof *o);
    o->stop_hit = -1;
    for (int i = 0;; i++) {
        bool final = pieces[i] == NULL;
        const char *p = final ? "" : pieces[i];
        text_split_feed(&t, p, strlen(p), check, final);
        strncat(o->content, t.content, t.n_content);
        strncat(o->reason, t.reason, t.n_reason);
        if (t.stop_hit >= 0)
            o->stop_hit = t.stop_hit;
        if (final)
            break;
    }
    text_split_free(&t);
}

static void test_split_unit(void **state)
{
    (void)state;
    struct split_out o;
    const char *s1[] = {"o w"};
    /* across pieces; the stop and what follows are not released */
    split_run(s1, 1, false, SPLIT_CONTENT, true, (const char *[]){"Hel", "lo wo", "rld", NULL},
              &o);
    assert_string_equal(o.content, "Hell");
    assert_int_equal(o.stop_hit, 0);

    /* hold-back, piece by piece */
    const char *s2[] = {"abc"};
    size_t l2 = 3;
    struct text_split t;
    assert_int_equal(text_split_init(&t, s2, &l2, 1, false, SPLIT_CONTENT, 64, NULL), LL_OK);
    text_split_feed(&t, "xxa", 3, true, false);
    assert_int_equal(t.n_content, 2); /* "a" could start "abc" */
    text_split_feed(&t, "b", 1, true, false);
    assert_int_equal(t.n_content, 0);
    text_split_feed(&t, "d", 1, true, false);
    assert_int_equal(t.n_content, 3);
    assert_memory_equal(t.content, "abd", 3);
    text_split_feed(&t, "ab", 2, true, false);
    assert_int_equal(t.n_content, 0);
    text_split_feed(&t, "", 0, true, true); /* the end releases what was held */
    assert_int_equal(t.n_content, 2);
    assert_int_equal(t.stop_hit, -1);
    text_split_free(&t);

    /* at the very start */
    const char *s3[] = {"zz", "a"};
    split_run(s3, 2, false, SPLIT_CONTENT, true, (const char *[]){"ab", "c", NULL}, &o);
    assert_string_equal(o.content, "");
    assert_int_equal(o.stop_hit, 1);
    /* the earliest match wins, whichever string it is */
    const char *s4[] = {"cd", "b", "abcd"};
    split_run(s4, 3, false, SPLIT_CONTENT, true, (const char *[]){"xa", "bcd", NULL}, &o);
    assert_string_equal(o.content, "x");
    assert_int_equal(o.stop_hit, 2);
    /* not checked: nothing held, nothing stops */
    split_run(s1, 1, false, SPLIT_CONTENT, false, (const char *[]){"Hel", "lo wo", "rld", NULL},
              &o);
    assert_string_equal(o.content, "Hello world");
    assert_int_equal(o.stop_hit, -1);

    /* reasoning from the start (the prompt opened <think>), "</think>" split across pieces */
    split_run(NULL, 0, true, SPLIT_REASONING, true,
              (const char *[]){"thinking </th", "ink>answer", NULL}, &o);
    assert_string_equal(o.reason, "thinking ");
    assert_string_equal(o.content, "answer");
    /* "<think>" opening the output, in pieces */
    split_run(NULL, 0, true, SPLIT_START, true,
              (const char *[]){"<th", "ink>\nhmm<", "/think>ok", NULL}, &o);
    assert_string_equal(o.reason, "\nhmm");
    assert_string_equal(o.content, "ok");
    /* something else at the start is the answer, "<" held only while it could be "<think>" */
    split_run(NULL, 0, true, SPLIT_START, true, (const char *[]){"<", "b>x</think>y", NULL},
              &o);
    assert_string_equal(o.content, "<b>x</think>y");
    assert_string_equal(o.reason, "");
    /* never closed: all reasoning, the held "</thi" included at the end */
    split_run(NULL, 0, true, SPLIT_REASONING, true, (const char *[]){"a", "b</thi", NULL}, &o);
    assert_string_equal(o.reason, "ab</thi");
    assert_string_equal(o.content, "");
    /* a stop inside the reasoning ends everything there; one after it cuts the answer */
    const char *s5[] = {"STOP"};
    split_run(s5, 1, true, SPLIT_REASONING, true,
              (const char *[]){"abc ST", "OP x</think>y", NULL}, &o);
    assert_string_equal(o.reason, "abc ");
    assert_string_equal(o.content, "");
    assert_int_equal(o.stop_hit, 0);
    split_run(s5, 1, true, SPLIT_REASONING, true,
              (const char *[]){"r</think>ans", "wer STOP more", NULL}, &o);
    assert_string_equal(o.reason, "r");
    assert_string_equal(o.content, "answer ");
    assert_int_equal(o.stop_hit, 0);
}

/* ---- stop strings in the engine ---- */

/* Step a request alone and record the text each token released (pieces[k], k = token). */
static int token_pieces(struct engine *e, const struct engine_params *p, char pieces[][256])
{
    struct engine_req *r = submit(e, p);
    struct result res = {0};
    int k = 0;
    while (res.finish == ENGINE_RUNNING) {
        step_once(e);
        size_t before = res.len;
        int n_before = res.n;
        drain(r, &res);
        if (res.n > n_before) {
            assert_int_equal(res.n, n_before + 1);
            assert_true(res.len - before < 256);
            memcpy(pieces[k], res.text + before, res.len - before);
            pieces[k][res.len - before] = '\0';
            k++;
        } else if (res.len > before) { /* flushed bytes at the finish */
            strncat(pieces[k - 1], res.text + before, res.len - before);
        }
    }
    engine_req_release(r);
    return k;
}

/* Bytes of the last UTF-8 character of s (non-empty). */
static size_t last_char(const char *s)
{
    size_t n = strlen(s), k = n - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--;
    return n - k;
}

static size_t first_char(const char *s)
{
    size_t k = 1;
    while (s[k] && ((unsigned char)s[k] & 0xc0) == 0x80)
        k++;
    return k;
}

static void test_stop_strings(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    int32_t prompt[16];
    make_prompt(prompt, 10, 2024);
    struct engine_params p = {.prompt = prompt, .n_prompt = 10, .max_tokens = 24,
                              .ignore_eos = true};
    static char pieces[24][256];
    int n = token_pieces(e, &p, pieces);
    assert_int_equal(n, 24);
    char full[8192] = "";
    for (int k = 0; k < n; k++)
        strcat(full, pieces[k]);

    /* A stop string made of the end of one token's text and the start of the next's. */
    int b = -1;
    for (int k = 4; k < n - 1 && b < 0; k++)
        if (pieces[k][0] && pieces[k + 1][0])
            b = k;
    assert_true(b >= 0);
    char stop[32];
    size_t a = last_char(pieces[b]), c = first_char(pieces[b + 1]);
    memcpy(stop, pieces[b] + strlen(pieces[b]) - a, a);
    memcpy(stop + a, pieces[b + 1], c);
    stop[a + c] = '\0';
    const char *at = strstr(full, stop);
    assert_non_null(at);
    /* the token whose text completes the first match is the last one */
    char cum[8192] = "";
    int last = -1;
    for (int k = 0; k < n && last < 0; k++) {
        strcat(cum, pieces[k]);
        if (strstr(cum, stop))
            last = k;
    }
    const char *stops[4] = {"\x01never", stop, "\x02nor this", "\x03"};
    struct engine_params ps = p;
    ps.stop = stops;
    ps.n_stop = 4;
    struct result r;
    run_together(e, &ps, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.stop_str, 1);
    assert_int_equal(r.stop_id, -1);
    assert_int_equal(r.len, (size_t)(at - full));
    assert_memory_equal(r.text, full, r.len);
    assert_int_equal(r.n, last + 1);
    assert_int_equal(r.usage.completion_tokens, last + 1);

    /* Held back only while a partial match is possible: in lockstep with the plain request,
     * the released text is the plain text minus its longest suffix that starts the stop. */
    struct engine_req *rp = submit(e, &p), *rs = submit(e, &ps);
    struct result plain = {0}, stopped = {0};
    while (stopped.finish == ENGINE_RUNNING) {
        step_once(e);
        drain(rp, &plain);
        drain(rs, &stopped);
        if (stopped.finish != ENGINE_RUNNING)
            break;
        size_t hold = 0, sl = strlen(stop);
        for (size_t h = sl - 1; h > 0 && !hold; h--)
            if (h <= plain.len && !memcmp(plain.text + plain.len - h, stop, h))
                hold = h;
        assert_int_equal(stopped.len, plain.len - hold);
        assert_memory_equal(stopped.text, plain.text, stopped.len);
    }
    engine_cancel(rp);
    run_idle(e);
    engine_req_release(rp);
    engine_req_release(rs);
    assert_pool_empty(e);

    /* At the very start: the first character of the text. */
    char first[8];
    memcpy(first, full, first_char(full));
    first[first_char(full)] = '\0';
    const char *stop0[1] = {first};
    ps.stop = stop0;
    ps.n_stop = 1;
    run_together(e, &ps, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.len, 0);
    int first_tok = 0;
    while (!pieces[first_tok][0])
        first_tok++;
    assert_int_equal(r.n, first_tok + 1);

    /* Stop strings that never match change nothing. */
    ps.stop = stops;
    ps.n_stop = 1;
    run_together(e, &ps, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_LENGTH);
    assert_string_equal(r.text, full);
    assert_int_equal(r.stop_str, -1);

    /* Bad stop strings are refused. */
    struct engine_req *bad = NULL;
    struct ll_err err = {0};
    const char *empty[1] = {""};
    ps.stop = empty;
    assert_int_equal(engine_submit(e, &ps, &bad, &err), LL_EINVAL);
    const char *cont[1] = {"\x80x"};
    ps.stop = cont;
    assert_int_equal(engine_submit(e, &ps, &bad, &err), LL_EINVAL);
    ps.n_stop = ENGINE_MAX_STOP_STRINGS + 1;
    assert_int_equal(engine_submit(e, &ps, &bad, &err), LL_EINVAL);
    assert_null(bad);
    engine_destroy(e);
}

/* ---- kept special tokens ---- */

#define QUAD_START 151650 /* "<|quad_start|>", a special token of the fixture's tokenizer */

/* A special token in keep_ids is text all the same: written when special tokens are skipped,
 * and allowed by a grammar where its text is (as Mistral's [TOOL_CALLS] must be for the tool
 * call parser). Without keep_ids it vanishes from the text, and under the grammar the model
 * can only spell the text out in ordinary tokens. */
static void test_keep_ids(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    int32_t prompt[16], keep = QUAD_START;
    make_prompt(prompt, 12, 91);
    struct sampler_bias force = {QUAD_START, 1000.0f};
    struct engine_params p = {.prompt = prompt, .n_prompt = 12, .max_tokens = 3,
                              .ignore_eos = true, .logit_bias = &force, .n_logit_bias = 1};
    struct result r;
    run_together(e, &p, 1, &r); /* skipped: no text */
    assert_int_equal(r.n, 3);
    assert_int_equal(r.ids[0], QUAD_START);
    assert_int_equal(r.len, 0);
    p.keep_ids = &keep;
    p.n_keep_ids = 1;
    run_together(e, &p, 1, &r);
    assert_string_equal(r.text, "<|quad_start|><|quad_start|><|quad_start|>");

    struct gbuild *b = gbuild_new();
    assert_non_null(b);
    int root = gb_concat(b, (int[]){gb_literal(b, "<|quad_start|>"), gb_literal(b, "[ok]")}, 2);
    struct grammar *g = NULL;
    struct ll_err err = {0};
    assert_int_equal(gbuild_finish(b, root, &g, &err), LL_OK);
    gbuild_free(b);
    p.grammar = g;
    p.max_tokens = 40;
    run_together(e, &p, 1, &r); /* the marker in one token, then the rest spelled out */
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.ids[0], QUAD_START);
    for (int i = 1; i < r.n; i++)
        assert_int_not_equal(r.ids[i], QUAD_START);
    assert_string_equal(r.text, "<|quad_start|>[ok]");
    p.n_keep_ids = 0;
    run_together(e, &p, 1, &r); /* not kept: the grammar lets it be spelled out only */
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_true(r.n > 2);
    for (int i = 0; i < r.n; i++)
        assert_int_not_equal(r.ids[i], QUAD_START);
    assert_string_equal(r.text, "<|quad_start|>[ok]");
    grammar_unref(g);

    int32_t bad = 1 << 30; /* outside the vocabulary */
    struct engine_params q = {.prompt = prompt, .n_prompt = 12, .keep_ids = &bad,
                              .n_keep_ids = 1};
    struct engine_req *req;
    assert_int_equal(engine_submit(e, &q, &req, &err), LL_EINVAL);
    q.n_keep_ids = ENGINE_MAX_KEEP_IDS + 1;
    assert_int_equal(engine_submit(e, &q, &req, &err), LL_EINVAL);
    engine_destroy(e);
}

/* ---- min_tokens ---- */

static void test_min_tokens(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    int32_t prompt[16];
    make_prompt(prompt, 12, 77);
    struct engine_params p = {.prompt = prompt, .n_prompt = 12, .max_tokens = 8,
                              .ignore_eos = true};
    struct result plain, r;
    run_together(e, &p, 1, &plain);
    assert_int_equal(plain.n, 8);

    /* A stop id forced by logit_bias ends the request at once, unless min_tokens bans it. */
    int32_t x = plain.ids[0];
    struct sampler_bias force = {x, 1000.0f}; /* (logits span about ±120) */
    struct engine_params q = p;
    q.stop_ids = &x;
    q.n_stop_ids = 1;
    q.logit_bias = &force;
    q.n_logit_bias = 1;
    run_together(e, &q, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.stop_id, x);
    q.min_tokens = 5;
    run_together(e, &q, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.n, 5);
    assert_int_equal(r.stop_id, x);
    for (int i = 0; i < 5; i++)
        assert_int_not_equal(r.ids[i], x);
    /* Greedy's first token is the stop id: with min_tokens 3 it cannot come first. */
    q = p;
    q.stop_ids = &x;
    q.n_stop_ids = 1;
    q.min_tokens = 3;
    run_together(e, &q, 1, &r);
    assert_true(r.n >= 3);
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(r.ids[i], x);

    /* The model's eos likewise (when it counts). */
    struct sampler_bias eos = {EOS, 1000.0f};
    q = p;
    q.ignore_eos = false;
    q.logit_bias = &eos;
    q.n_logit_bias = 1;
    q.min_tokens = 4;
    run_together(e, &q, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_int_equal(r.stop_id, EOS);
    assert_int_equal(r.n, 4);

    /* Stop strings are looked for from the min_tokens-th token's text on. */
    static char pieces[8][256];
    int n = token_pieces(e, &p, pieces);
    assert_int_equal(n, 8);
    int k0 = 0;
    while (k0 < n && !pieces[k0][0])
        k0++;
    assert_true(k0 < n - 1);
    char first[8];
    memcpy(first, pieces[k0], first_char(pieces[k0]));
    first[first_char(pieces[k0])] = '\0';
    const char *stop[1] = {first};
    q = p;
    q.stop = stop;
    q.n_stop = 1;
    q.min_tokens = k0 + 2; /* the first piece is before the check starts */
    run_together(e, &q, 1, &r);
    assert_true(r.n >= k0 + 2);
    assert_memory_equal(r.text, pieces[k0], strlen(pieces[k0]));
    engine_destroy(e);
}

/* ---- penalties, bias, logprobs on the real model ---- */

static void test_penalties_and_bias(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    int32_t prompt[16];
    make_prompt(prompt, 12, 91);
    struct engine_params p = {.prompt = prompt, .n_prompt = 12, .max_tokens = 40,
                              .ignore_eos = true};
    struct result plain, r;
    run_together(e, &p, 1, &plain);
    int repeats = 0;
    for (int i = 0; i < plain.n; i++)
        for (int j = 0; j < i; j++)
            repeats += plain.ids[i] == plain.ids[j];
    /* presence 1000 (the tiny model's logits span about ±120): no output token twice */
    struct engine_params q = p;
    q.penalties.presence = 1000.0f;
    run_together(e, &q, 1, &r);
    assert_int_equal(r.n, 40);
    for (int i = 0; i < r.n; i++)
        for (int j = 0; j < i; j++)
            assert_int_not_equal(r.ids[i], r.ids[j]);
    if (repeats) /* (the tiny model's greedy path loops) */
        assert_memory_not_equal(r.ids, plain.ids, sizeof(int32_t) * 40);
    /* frequency alike */
    q.penalties.presence = 0;
    q.penalties.frequency = 1000.0f;
    run_together(e, &q, 1, &r);
    for (int i = 0; i < r.n; i++)
        for (int j = 0; j < i; j++)
            assert_int_not_equal(r.ids[i], r.ids[j]);
    /* a huge repetition penalty keeps every prompt id out of the output */
    q.penalties.frequency = 0;
    q.penalties.repetition = 1e4f;
    run_together(e, &q, 1, &r);
    for (int i = 0; i < r.n; i++)
        for (int j = 0; j < 12; j++)
            assert_int_not_equal(r.ids[i], prompt[j]);
    /* a bias beyond the logits' span: every token is that id, greedy or sampled */
    struct sampler_bias force = {14990, 1000.0f};
    q = p;
    q.max_tokens = 6;
    q.logit_bias = &force;
    q.n_logit_bias = 1;
    q.sampling = (struct sampler_params){.temperature = 1.0f, .top_p = 0.9f, .seed = 3};
    q.logprobs = true;
    run_together(e, &q, 1, &r);
    for (int i = 0; i < r.n; i++) {
        assert_int_equal(r.ids[i], 14990);
        assert_true(r.lp[i].logprob > -1e-3f && r.lp[i].logprob <= 0.0f);
    }
    assert_string_equal(r.text, "hellohellohellohellohellohello");
    /* and one below it bans greedy's first token */
    struct sampler_bias ban = {plain.ids[0], -1000.0f};
    q = p;
    q.max_tokens = 4;
    q.logit_bias = &ban;
    q.n_logit_bias = 1;
    run_together(e, &q, 1, &r);
    assert_int_not_equal(r.ids[0], plain.ids[0]);
    for (int i = 0; i < r.n; i++)
        assert_int_not_equal(r.ids[i], plain.ids[0]);
    /* refused: a bias id outside the vocabulary, a negative repetition penalty */
    struct engine_req *bad = NULL;
    struct ll_err err = {0};
    struct sampler_bias out = {151936, 1.0f};
    q.logit_bias = &out;
    assert_int_equal(engine_submit(e, &q, &bad, &err), LL_EINVAL);
    assert_non_null(strstr(err.msg, "logit_bias"));
    q.n_logit_bias = 0;
    q.penalties.repetition = -1.0f;
    assert_int_equal(engine_submit(e, &q, &bad, &err), LL_EINVAL);
    q.penalties.repetition = 1.0f;
    q.top_logprobs = 21;
    assert_int_equal(engine_submit(e, &q, &bad, &err), LL_EINVAL);
    assert_null(bad);
    engine_destroy(e);
}

static void test_logprobs(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    int32_t prompt[16];
    make_prompt(prompt, 9, 5150);
    struct engine_params p = {.prompt = prompt, .n_prompt = 9, .max_tokens = 12,
                              .ignore_eos = true, .logprobs = true, .top_logprobs = 5};
    struct result g, s1, s2, s3;
    run_together(e, &p, 1, &g);
    assert_int_equal(g.n, 12);
    for (int i = 0; i < g.n; i++) { /* greedy: the chosen token is the best one */
        const struct sampler_logprobs *lp = &g.lp[i];
        assert_int_equal(lp->n_top, 5);
        assert_int_equal(lp->top_ids[0], g.ids[i]);
        assert_true(lp->logprob == lp->top_logprobs[0]);
        double sum = 0;
        for (int j = 0; j < 5; j++) {
            assert_true(lp->top_logprobs[j] <= 0.0f);
            if (j)
                assert_true(lp->top_logprobs[j] <= lp->top_logprobs[j - 1]);
            sum += exp(lp->top_logprobs[j]);
        }
        assert_true(sum <= 1.0 + 1e-5);
    }
    /* sampled: reproducible; the chosen logprob is the list's when the id is in it; a lower
     * temperature sharpens the same row (the best logprob rises) */
    p.sampling = (struct sampler_params){.temperature = 1.3f, .seed = 99};
    p.top_logprobs = 20;
    run_together(e, &p, 1, &s1);
    run_together(e, &p, 1, &s2);
    assert_same(&s1, &s2);
    for (int i = 0; i < s1.n; i++)
        for (int j = 0; j < s1.lp[i].n_top; j++)
            if (s1.lp[i].top_ids[j] == s1.ids[i])
                assert_true(s1.lp[i].top_logprobs[j] == s1.lp[i].logprob);
    p.sampling.temperature = 0.5f;
    p.max_tokens = 1;
    run_together(e, &p, 1, &s3);
    assert_int_equal(s3.lp[0].top_ids[0], s1.lp[0].top_ids[0]);
    assert_true(s3.lp[0].top_logprobs[0] > s1.lp[0].top_logprobs[0]);
    /* without logprobs: none reported */
    p.logprobs = false;
    p.top_logprobs = 0;
    struct engine_req *r = submit(e, &p);
    run_idle(e);
    struct engine_output out = {0};
    engine_poll(r, &out);
    assert_int_equal(out.n_ids, 1);
    assert_null(out.logprobs);
    engine_output_free(&out);
    engine_req_release(r);
    engine_destroy(e);
}

/* ---- n > 1 ---- */

static void test_n_choices(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256, .max_seqs = 8, .max_batch_tokens = 64};
    int32_t prompt[48];
    make_prompt(prompt, 40, 404);
    struct engine_params p[4];
    for (int i = 0; i < 4; i++)
        p[i] = (struct engine_params){
            .prompt = prompt, .n_prompt = 40, .max_tokens = 10, .ignore_eos = true,
            .choice = i, .sampling = {.temperature = 1.0f, .top_p = 0.95f, .seed = 7},
        };
    struct engine *e = make_engine(o);
    struct result res[4], alone;
    run_together(e, p, 4, res);
    struct engine_stats st;
    engine_get_stats(e, &st);
    engine_destroy(e);
    /* the prompt computed once: choice 0 computes 40 tokens, the others take its two full
     * blocks and compute the last 8 */
    assert_int_equal(res[0].usage.cached_tokens, 0);
    for (int i = 1; i < 4; i++)
        assert_int_equal(res[i].usage.cached_tokens, 32);
    assert_int_equal(st.prompt_tokens, 40 + 3 * 8);
    assert_int_equal(st.cached_tokens, 3 * 32);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(res[i].n, 10);
        for (int j = 0; j < i; j++)
            assert_memory_not_equal(res[i].ids, res[j].ids, sizeof(int32_t) * 10);
        run_each_alone(o, &p[i], 1, &alone); /* each choice is reproducible on its own */
        assert_same(&alone, &res[i]);
    }
    /* without the prefix cache nothing is shared, and the choices are the same */
    o.no_prefix_cache = true;
    e = make_engine(o);
    struct result nc[4];
    run_together(e, p, 4, nc);
    engine_get_stats(e, &st);
    engine_destroy(e);
    assert_int_equal(st.prompt_tokens, 4 * 40);
    for (int i = 0; i < 4; i++)
        assert_same(&nc[i], &res[i]);
}

/* ---- the reasoning split ---- */

static void test_reasoning(void **state)
{
    (void)state;
    struct engine_opts o = {.n_ctx = 256};
    struct engine *e = make_engine(o);
    const struct tokenizer *tok = engine_tokenizer(e);
    int32_t prompt[16];
    make_prompt(prompt, 10, 31337);
    prompt[10] = THINK_OPEN; /* the template opened the reasoning */
    /* Forced: "hello" first, "</think>" next (presence 2000 bans each after its first use). */
    struct sampler_bias b[3] = {{14990, 800.0f}, {THINK_CLOSE, 600.0f}, {THINK_OPEN, 1000.0f}};
    struct engine_params p = {.prompt = prompt, .n_prompt = 11, .max_tokens = 8,
                              .ignore_eos = true, .reasoning = true, .logit_bias = b,
                              .n_logit_bias = 2, .penalties = {.presence = 2000.0f}};
    struct result r;
    run_together(e, &p, 1, &r);
    assert_int_equal(r.n, 8);
    assert_int_equal(r.ids[0], 14990);
    assert_int_equal(r.ids[1], THINK_CLOSE);
    assert_string_equal(r.reasoning, "hello");
    assert_int_equal(r.usage.reasoning_tokens, 2);
    char *rest;
    size_t len;
    assert_int_equal(tokenizer_decode(tok, r.ids + 2, 6, true, &rest, &len, NULL), LL_OK);
    assert_string_equal(r.text, rest);
    free(rest);

    /* Not opened by the prompt: a "<think>" token at the start opens it. */
    p.n_prompt = 10;
    p.n_logit_bias = 3;
    run_together(e, &p, 1, &r);
    assert_int_equal(r.ids[0], THINK_OPEN);
    assert_int_equal(r.ids[1], 14990);
    assert_int_equal(r.ids[2], THINK_CLOSE);
    assert_string_equal(r.reasoning, "hello");
    assert_int_equal(r.usage.reasoning_tokens, 3);
    assert_int_equal(tokenizer_decode(tok, r.ids + 3, 5, true, &rest, &len, NULL), LL_OK);
    assert_string_equal(r.text, rest);
    free(rest);

    /* Not opened at all: all answer. */
    p.n_logit_bias = 2;
    run_together(e, &p, 1, &r);
    assert_int_equal(r.ids[1], THINK_CLOSE);
    assert_string_equal(r.reasoning, "");
    assert_int_equal(r.usage.reasoning_tokens, 0);
    assert_int_equal(strncmp(r.text, "hello</think>", 13), 0);

    /* Opened and never closed: everything is reasoning. */
    p.n_prompt = 11;
    p.n_logit_bias = 0;
    p.penalties.presence = 0;
    run_together(e, &p, 1, &r);
    assert_int_equal(r.len, 0);
    assert_int_equal(r.usage.reasoning_tokens, r.n);
    assert_int_equal(r.usage.completion_tokens, r.n);
    assert_int_equal(tokenizer_decode(tok, r.ids, (size_t)r.n, true, &rest, &len, NULL), LL_OK);
    assert_string_equal(r.reasoning, rest);
    free(rest);

    /* Without the split the markers are plain text. */
    p.reasoning = false;
    p.n_logit_bias = 2;
    p.penalties.presence = 2000.0f;
    run_together(e, &p, 1, &r);
    assert_int_equal(strncmp(r.text, "hello</think>", 13), 0);
    assert_int_equal(r.rlen, 0);
    assert_int_equal(r.usage.reasoning_tokens, 0);

    /* A stop string in the answer: the reasoning stays whole. */
    p.reasoning = true;
    struct result full;
    run_together(e, &p, 1, &full);
    assert_true(full.len >= 2);
    char stop[8];
    memcpy(stop, full.text + full.len - last_char(full.text), last_char(full.text));
    stop[last_char(full.text)] = '\0';
    const char *stops[1] = {stop};
    p.stop = stops;
    p.n_stop = 1;
    run_together(e, &p, 1, &r);
    assert_int_equal(r.finish, ENGINE_FINISH_STOP);
    assert_string_equal(r.reasoning, "hello");
    assert_int_equal(r.usage.reasoning_tokens, 2);
    assert_int_equal(r.len, (size_t)(strstr(full.text, stop) - full.text));
    engine_destroy(e);
}

/* ---- determinism with every control on ---- */

static int32_t x_prompt[40];
static const char *x_stops[2] = {"\x01not in the text", "Zq\x02"}; /* held back, never found */
static const struct sampler_bias x_bias[3] = {{14990, 2.0f}, {100, -5.0f}, {1879, 1.5f}};

static struct engine_params x_params(void)
{
    make_prompt(x_prompt, 35, 4242);
    x_prompt[35] = THINK_OPEN;
    return (struct engine_params){
        .prompt = x_prompt, .n_prompt = 36, .max_tokens = 14, .ignore_eos = true,
        .sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .min_p = 0.02f,
                     .seed = 1234},
        .penalties = {.repetition = 1.2f, .presence = 0.3f, .frequency = 0.2f},
        .logit_bias = x_bias, .n_logit_bias = 3, .min_tokens = 3,
        .stop = x_stops, .n_stop = 2, .logprobs = true, .top_logprobs = 5, .reasoning = true,
    };
}

/* The harness's others, with every control too. */
static void others_all_controls(struct engine_params *p)
{
    other_params(p, 16);
    for (int i = 0; i < 16; i++) {
        p[i].sampling.min_p = 0.01f * (float)(i % 3);
        p[i].penalties = (struct sampler_penalties){.repetition = 1.0f + 0.1f * (float)(i % 2),
                                                    .frequency = 0.1f * (float)(i % 4)};
        p[i].logprobs = i % 2;
        p[i].top_logprobs = i % 5;
        p[i].reasoning = i % 3 == 0;
        p[i].stop = x_stops + 1;
        p[i].n_stop = i % 2;
    }
}

static void test_determinism_all_controls(void **state)
{
    (void)state;
    struct engine_params x = x_params(), others[16];
    others_all_controls(others);
    struct engine_opts o = {.n_ctx = 128, .max_seqs = 17, .max_batch_tokens = 48};
    struct result alone;
    assert_deterministic(o, &x, others, &alone);
    assert_true(alone.n >= 3);

    /* Threaded, with another thread count. */
    o.n_threads = 2;
    struct engine *e = make_engine(o);
    struct ll_err err = {0};
    assert_int_equal(engine_start(e, &err), LL_OK);
    struct engine_req *r = submit(e, &x);
    struct engine_output out = {0};
    struct result th = {0};
    while (th.finish == ENGINE_RUNNING)
        if (engine_wait(r, &out, 5.0))
            assert_true(result_add(&th, &out));
    engine_output_free(&out);
    engine_req_release(r);
    engine_stop(e);
    engine_destroy(e);
    assert_same(&alone, &th);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_unit),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_penalties_and_bias),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_keep_ids),
        cmocka_unit_test(test_determinism_all_controls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
