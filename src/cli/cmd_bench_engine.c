/*
 * cmd_bench_engine.c: `llaisys-cli bench-engine`: the engine under concurrent load, in the
 * shape of llama-batched-bench (same workload as /work/shared/BENCHMARKS.md):
 *   - S concurrent streams (default 1, 4, 16, 64), each a P-token prompt (default 128) and G
 *     new tokens (default 128, greedy, eos ignored), all submitted at once: prompt tokens/s
 *     (steps that ran prompt rows), aggregate decode tokens/s (tokens generated in steps that
 *     ran decode rows only: every stream decoding; with --spec, accepted drafts count),
 *     inter-token latency per stream (p50 / p99 of the gaps between a stream's consecutive
 *     tokens over the whole run), time to first token, wall time, and with --spec the draft
 *     tokens verified and the share accepted;
 *   - time to first token of an L-token prompt (default 512) submitted while N streams
 *     (default 16) decode, the steps it was spread over, and the streams' gaps meanwhile (p50,
 *     p99, longest) beside their gaps just before it arrived;
 *   - the prefix cache: two requests sharing an L-token prefix (plus 16 own tokens), one after
 *     the other: time to first token cold and warm, and the cached tokens reported.
 * Prompts are pseudo-random ids from fixed salts, so runs are comparable; with --prompt-cycle N
 * each prompt is instead a run of consecutive ids around an aligned group of N, the text a
 * `mkmodel --copy N` model continues, so its answer repeats its prompt (a workload for --spec).
 * With --json-schema FILE (or "object") every stream is constrained to that JSON Schema (or to
 * any JSON object) by the grammar engine (grammar.h): the same table measures constrained
 * decoding; a stream whose JSON completes early ends early.
 * The engine runs on this thread (engine_step); timestamps are taken after each step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "engine.h"
#include "cli_args.h"
#include "engine_args.h"
#include "grammar.h"
#include "json.h"
#include "model.h"
#include "run_common.h"
#include "sampler.h"
#include "util.h"

static void bench_engine_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli bench-engine --model DIR [options]\n"
               "Aggregate decode tokens/s and inter-token latency at several concurrencies, time\n"
               "to first token under load, and the prefix-cache effect.\n\n"
               "  --streams LIST     concurrent streams, comma-separated (default 1,4,16,64)\n"
               "  --prompt P         prompt tokens per stream (default 128)\n"
               "  --gen G            new tokens per stream (default 128)\n"
               "  --long L           long prompt for the TTFT and prefix tests (default 512;\n"
               "                     0 skips both)\n"
               "  --load-streams N   streams decoding during the TTFT test (default 16)\n"
               "  --prompt-cycle N   prompts made of runs of consecutive ids in aligned groups\n"
               "                     of N (what a `mkmodel --copy N` model repeats)\n"
               "  --json-schema FILE constrain every stream to the JSON Schema in FILE, or to any\n"
               "                     JSON object with 'object' (constrained decoding)\n"
               "(engine defaults here: --ctx 1024, --max-seqs = the most streams, --kv-blocks\n"
               " enough for every stream)\n\n");
    engine_args_usage(f, ENGINE_OPTS_ALL);
}

static int prompt_cycle; /* --prompt-cycle */

static void make_prompt(int32_t *ids, int n, int vocab, uint64_t salt)
{
    int range = vocab < 150000 ? vocab : 150000; /* real (non-padding) tokens */
    if (prompt_cycle > 0 && prompt_cycle <= range) {
        int groups = range / prompt_cycle;
        int base = (int)(sampler_uniform(salt, 0) * groups) * prompt_cycle;
        int start = (int)(sampler_uniform(salt, 1) * prompt_cycle);
        for (int i = 0; i < n; i++)
            ids[i] = base + (start + i) % prompt_cycle;
        return;
    }
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(sampler_uniform(salt, (uint64_t)i) * range);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile of v[0..n) (sorts v). */
static double quantile(double *v, int n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)(q * (n - 1) + 0.5);
    return v[k];
}

struct stream {
    struct engine_req *req;
    double t_submit, t_last, ttft;
    int n;
};

struct bench {
    struct engine *e;
    struct grammar *grammar; /* --json-schema, or NULL */
    int vocab;
    struct engine_output out;
    double *gaps;
    int n_gaps, cap_gaps;
    /* per-run accumulators from step counters */
    double prompt_time, decode_time;
    uint64_t prompt_tokens, decode_tokens;
};

/* Gaps of b->gaps[from..to): p50, p99 (ms) and the longest (ms); sorts that range. */
static void gap_stats(struct bench *b, int from, int to, double *p50, double *p99, double *max)
{
    int n = to - from;
    *p50 = quantile(b->gaps + from, n, 0.5) * 1e3;
    *p99 = quantile(b->gaps + from, n, 0.99) * 1e3;
    *max = n ? b->gaps[to - 1] * 1e3 : 0;
}

static enum ll_status submit_stream(struct bench *b, struct stream *s, const int32_t *ids, int n,
                                    int gen, struct ll_err *err)
{
    struct engine_params p = {.prompt = ids, .n_prompt = n, .max_tokens = gen,
                              .ignore_eos = true, .grammar = b->grammar};
    s->t_submit = ll_now();
    s->t_last = 0;
    s->ttft = 0;
    s->n = 0;
    return engine_submit(b->e, &p, &s->req, err);
}

/* One engine step, attributing its time to prompt or decode work. */
static enum ll_status bench_step(struct bench *b, struct ll_err *err)
{
    struct engine_stats a, z;
    engine_get_stats(b->e, &a);
    double t0 = ll_now();
    bool did;
    enum ll_status s = engine_step(b->e, &did, err);
    double dt = ll_now() - t0;
    engine_get_stats(b->e, &z);
    uint64_t dp = z.prompt_tokens - a.prompt_tokens, dd = z.decode_tokens - a.decode_tokens;
    if (dp) {
        b->prompt_time += dt;
        b->prompt_tokens += dp;
    } else if (dd) {
        b->decode_time += dt;
        b->decode_tokens += z.generated_tokens - a.generated_tokens;
    }
    return s;
}

/* Poll a stream after a step; records its gaps when record_gaps. Returns true when finished
 * (and releases it). */
static bool poll_stream(struct bench *b, struct stream *s, bool record_gaps)
{
    if (!s->req || !engine_poll(s->req, &b->out))
        return s->req == NULL;
    double now = ll_now();
    if (b->out.n_ids > 0) {
        if (s->n == 0)
            s->ttft = now - s->t_submit;
        else if (record_gaps && b->n_gaps < b->cap_gaps)
            b->gaps[b->n_gaps++] = now - s->t_last;
        s->n += b->out.n_ids;
        s->t_last = now;
    }
    if (b->out.finish) {
        engine_req_release(s->req);
        s->req = NULL;
        return true;
    }
    return false;
}

/* S streams of P prompt tokens and G new tokens, all at once. */
static enum ll_status run_streams(struct bench *b, int S, int P, int G, bool print,
                                  struct ll_err *err)
{
    struct stream *st = calloc((size_t)S, sizeof *st);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    double *ttft = malloc(sizeof(double) * (size_t)S);
    if (!st || !ids || !ttft) {
        free(st);
        free(ids);
        free(ttft);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    enum ll_status s = LL_OK;
    b->n_gaps = 0;
    b->prompt_time = b->decode_time = 0;
    b->prompt_tokens = b->decode_tokens = 0;
    struct engine_stats s0, s1;
    engine_get_stats(b->e, &s0);
    double t0 = ll_now();
    for (int i = 0; i < S && s == LL_OK; i++) {
        make_prompt(ids, P, b->vocab, 1000003ull * (uint64_t)S + (uint64_t)i);
        s = submit_stream(b, &st[i], ids, P, G, err);
    }
    int live = S;
    while (s == LL_OK && live > 0) {
        s = bench_step(b, err);
        live = 0;
        for (int i = 0; i < S; i++)
            live += !poll_stream(b, &st[i], true);
    }
    double wall = ll_now() - t0;
    engine_get_stats(b->e, &s1);
    if (s == LL_OK && print) {
        for (int i = 0; i < S; i++)
            ttft[i] = st[i].ttft;
        double p50 = quantile(b->gaps, b->n_gaps, 0.5) * 1e3;
        double p99 = quantile(b->gaps, b->n_gaps, 0.99) * 1e3;
        double mean_gap = 0;
        for (int i = 0; i < b->n_gaps; i++)
            mean_gap += b->gaps[i];
        mean_gap = b->n_gaps ? mean_gap / b->n_gaps * 1e3 : 0;
        uint64_t drafted = s1.spec_drafted - s0.spec_drafted;
        uint64_t accepted = s1.spec_accepted - s0.spec_accepted;
        printf("| %7d | %10.1f | %10.2f | %8.1f | %8.1f | %8.1f | %8.2f | %8.2f | %7.1f | %7llu "
               "| %6llu %5.1f%% |\n",
               S, b->prompt_time > 0 ? b->prompt_tokens / b->prompt_time : 0,
               b->decode_time > 0 ? b->decode_tokens / b->decode_time : 0, mean_gap, p50, p99,
               quantile(ttft, S, 0.5), quantile(ttft, S, 1.0), wall,
               (unsigned long long)(s1.preemptions - s0.preemptions),
               (unsigned long long)drafted, drafted ? 100.0 * accepted / drafted : 0.0);
        fflush(stdout);
    }
    for (int i = 0; i < S; i++)
        engine_req_release(st[i].req);
    free(st);
    free(ids);
    free(ttft);
    if (s == LL_OK)
        s = engine_run_until_idle(b->e, err);
    return s;
}

/* Time to first token of an L-token prompt submitted while N streams decode. */
static enum ll_status run_ttft(struct bench *b, int N, int P, int G, int L, struct ll_err *err)
{
    struct stream *st = calloc((size_t)N + 1, sizeof *st);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(L > P ? L : P));
    if (!st || !ids) {
        free(st);
        free(ids);
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    }
    enum ll_status s = LL_OK;
    for (int i = 0; i < N && s == LL_OK; i++) {
        make_prompt(ids, P, b->vocab, 777000ull + (uint64_t)i);
        s = submit_stream(b, &st[i], ids, P, G, err);
    }
    /* Until every stream has its first token (all decoding), then a few decode-only steps
     * whose gaps are the reference. */
    int started = 0;
    while (s == LL_OK && started < N) {
        s = bench_step(b, err);
        started = 0;
        for (int i = 0; i < N; i++) {
            poll_stream(b, &st[i], false);
            started += st[i].n > 0;
        }
    }
    b->n_gaps = 0;
    for (int k = 0; k < 4 && s == LL_OK; k++) {
        s = bench_step(b, err);
        for (int i = 0; i < N; i++)
            poll_stream(b, &st[i], true);
    }
    int before = b->n_gaps;
    struct stream *lng = &st[N];
    if (s == LL_OK) {
        make_prompt(ids, L, b->vocab, 888888);
        s = submit_stream(b, lng, ids, L, 4, err);
    }
    int steps = 0;
    while (s == LL_OK && lng->n == 0 && lng->req) {
        s = bench_step(b, err);
        steps++;
        poll_stream(b, lng, false);
        for (int i = 0; i < N; i++)
            poll_stream(b, &st[i], true);
    }
    if (s == LL_OK) {
        double mean = 0, p50, p99, worst, b50, b99, bmax;
        for (int i = before; i < b->n_gaps; i++)
            mean += b->gaps[i];
        mean = b->n_gaps > before ? mean / (b->n_gaps - before) : 0;
        gap_stats(b, 0, before, &b50, &b99, &bmax);
        gap_stats(b, before, b->n_gaps, &p50, &p99, &worst);
        struct engine_stats es;
        engine_get_stats(b->e, &es);
        printf("TTFT of a %d-token prompt while %d streams decode: %.3f s (%d steps); the "
               "streams' gaps meanwhile: mean %.0f ms, p50 %.0f ms, p99 %.0f ms, longest %.0f ms "
               "(just before it: p50 %.0f ms, longest %.0f ms)\n",
               L, N, lng->ttft, steps, mean * 1e3, p50, p99, worst, b50, bmax);
        printf("scheduler estimate: a step of %d decode rows %.0f ms, a prompt token beside "
               "them %.1f ms\n", N, es.cost_step_s * 1e3, es.cost_prompt_token_s * 1e3);
        fflush(stdout);
    }
    for (int i = 0; i <= N; i++)
        if (st[i].req) {
            engine_cancel(st[i].req);
            engine_req_release(st[i].req);
        }
    free(st);
    free(ids);
    if (s == LL_OK)
        s = engine_run_until_idle(b->e, err);
    return s;
}

/* Two requests sharing an L-token prefix, one after the other. */
static enum ll_status run_prefix(struct bench *b, int L, struct ll_err *err)
{
    int n = L + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    make_prompt(ids, L, b->vocab, 4242424);
    double ttft[2] = {0};
    int cached[2] = {0};
    enum ll_status s = LL_OK;
    for (int k = 0; k < 2 && s == LL_OK; k++) {
        make_prompt(ids + L, 16, b->vocab, 5151 + (uint64_t)k);
        struct stream st = {0};
        s = submit_stream(b, &st, ids, n, 1, err);
        while (s == LL_OK && st.req) {
            s = bench_step(b, err);
            if (st.req && engine_poll(st.req, &b->out) && b->out.finish) {
                ttft[k] = b->out.timings.ttft_s;
                cached[k] = b->out.usage.cached_tokens;
                engine_req_release(st.req);
                st.req = NULL;
            }
        }
        engine_req_release(st.req);
    }
    free(ids);
    if (s == LL_OK) {
        printf("prefix cache, %d-token prompts sharing %d tokens: TTFT cold %.3f s (%d cached), "
               "warm %.3f s (%d cached): %.1fx faster\n",
               n, L, ttft[0], cached[0], ttft[1], cached[1], ttft[1] > 0 ? ttft[0] / ttft[1] : 0);
        fflush(stdout);
    }
    return s;
}

static void print_loadavg(const char *when)
{
    FILE *f = fopen("/proc/loadavg", "r");
    char line[128] = "?";
    if (f) {
        if (!fgets(line, sizeof line, f))
            strcpy(line, "?\n");
        fclose(f);
    }
    printf("load average %s: %s", when, line);
    if (!strchr(line, '\n'))
        putchar('\n');
}

/* --json-schema: a schema file, or "object" for any JSON object. */
static enum ll_status load_grammar(const char *what, struct grammar **out, struct ll_err *err)
{
    struct gbuild *gb = gbuild_new();
    if (!gb)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    cJSON *schema = NULL;
    int root = -1;
    enum ll_status s = LL_OK;
    if (!strcmp(what, "object")) {
        root = gb_concat(gb, (int[]){grammar_json_lead_ws(gb), grammar_json_any_object(gb)}, 2);
    } else if ((s = ll_read_file(what, &text, &len, err)) == LL_OK &&
               (s = ll_json_parse(&schema, text, len, what, err)) == LL_OK) {
        s = grammar_json_schema(gb, schema, what, &root, err);
    }
    if (s == LL_OK)
        s = gbuild_finish(gb, root, out, err);
    cJSON_Delete(schema);
    free(text);
    gbuild_free(gb);
    return s;
}

int cmd_bench_engine(int argc, char **argv)
{
    const char *dir = NULL, *streams_s = "1,4,16,64", *schema = NULL;
    long long P = 128, G = 128, L = 512, N = 16, cycle = 0;
    struct engine_opts o = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--streams", &streams_s),
        CLI_INT("--prompt", &P, 1, 1 << 20),
        CLI_INT("--gen", &G, 1, 1 << 20),
        CLI_INT("--long", &L, 0, 1 << 20),
        CLI_STR("--json-schema", &schema),
        CLI_INT("--load-streams", &N, 1, 4096),
        CLI_INT("--prompt-cycle", &cycle, 2, 150000),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "bench-engine", .usage = bench_engine_usage,
                                .args = args, .engine_mask = ENGINE_OPTS_ALL, .engine = &o};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!dir)
        return cli_args_fail(&cmd, "--model is required");
    prompt_cycle = (int)cycle;
    int32_t *streams = NULL;
    int n_streams = 0;
    if (run_parse_ids("bench-engine", "--streams", streams_s, &streams, &n_streams))
        return 2;
    int max_s = L > 0 ? (int)N + 1 : 1;
    for (int i = 0; i < n_streams; i++) {
        if (streams[i] < 1) {
            fprintf(stderr, "llaisys-cli bench-engine: --streams: %d streams\n", streams[i]);
            free(streams);
            return 2;
        }
        max_s = streams[i] > max_s ? streams[i] : max_s;
    }
    if (o.n_ctx == 0)
        o.n_ctx = 1024;
    if (o.max_seqs == 0)
        o.max_seqs = max_s;
    engine_opts_resolve(&o, NULL); /* the block size, for the pool below */
    int bs = o.block_size;
    if (o.kv_blocks == 0 && o.kv_memory == 0) {
        long long per = (P + G + bs - 1) / bs, need = (long long)max_s * per;
        long long lng = L > 0 ? (long long)N * per + (L + 16 + bs) / bs + 1 : 0;
        o.kv_blocks = (int)((need > lng ? need : lng) + 16);
    }

    struct ll_err err = {0};
    struct bench b = {0};
    int rc = 1;
    double t0 = ll_now();
    if (engine_create(&b.e, dir, &o, &err) != LL_OK)
        goto fail;
    b.vocab = engine_model(b.e)->config.vocab_size;
    if (schema && load_grammar(schema, &b.grammar, &err) != LL_OK)
        goto fail;
    b.cap_gaps = (int)((long long)max_s * G + 4 * N + 16);
    b.gaps = malloc(sizeof(double) * (size_t)b.cap_gaps);
    if (!b.gaps) {
        ll_err_set(&err, LL_ENOMEM, "out of memory");
        goto fail;
    }
    const struct model *bm = engine_model(b.e);
    char wdesc[160];
    model_weights_str(bm, wdesc, sizeof wdesc);
    char shape[160];
    model_shape_str(bm, shape, sizeof shape);
    printf("model: %s (%s, %s weights); load %.3f s\n", dir, shape, wdesc, ll_now() - t0);
    printf("kernels: matmul %s\n", model_matmul_variant(bm));
    engine_args_print(stdout, b.e);
    if (schema)
        printf("constrained: every stream follows %s\n", !strcmp(schema, "object")
                                                            ? "any JSON object" : schema);
    print_loadavg("at start");
    /* Warm-up (pages the weights in, starts the pool); not reported. */
    if (run_streams(&b, 1, 8, 2, false, &err) != LL_OK)
        goto fail;
    printf("\n%lld-token prompts, %lld new tokens per stream, all submitted at once:\n\n", P, G);
    printf("| streams | prompt t/s | decode t/s | ITL mean | ITL p50  | ITL p99  | TTFT p50 "
           "| TTFT max |  wall s | preempt | drafts accepted |\n");
    printf("|---------|------------|------------|----------|----------|----------|----------"
           "|----------|---------|---------|-----------------|\n");
    fflush(stdout);
    for (int i = 0; i < n_streams; i++)
        if (run_streams(&b, streams[i], (int)P, (int)G, true, &err) != LL_OK)
            goto fail;
    printf("(decode t/s: tokens generated in the steps that ran only decode rows, over their "
           "time; ITL in ms, over every gap of every stream; TTFT in s; drafts: draft tokens "
           "verified, --spec)\n\n");
    if (L > 0) {
        if (run_ttft(&b, (int)N, (int)P, (int)G, (int)L, &err) != LL_OK ||
            run_prefix(&b, (int)L, &err) != LL_OK)
            goto fail;
    }
    struct engine_stats st;
    engine_get_stats(b.e, &st);
    double rss, hwm;
    run_memory_mib(&rss, &hwm);
    printf("totals: %llu steps, %llu preemptions, %llu prompt tokens computed, %llu cached; "
           "VmHWM %.0f MiB\n", (unsigned long long)st.steps, (unsigned long long)st.preemptions,
           (unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_tokens, hwm);
    if (b.grammar)
        printf("grammar: %llu masked rows, %.3f ms each on average (mask computed or taken from "
               "the cache, and applied)\n", (unsigned long long)st.grammar_masks,
               st.grammar_masks ? st.grammar_s * 1e3 / (double)st.grammar_masks : 0.0);
    print_loadavg("at end");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli bench-engine: %s\n", err.msg);
done:
    engine_output_free(&b.out);
    free(b.gaps);
    engine_destroy(b.e);
    grammar_unref(b.grammar);
    free(streams);
    return rc;
}
