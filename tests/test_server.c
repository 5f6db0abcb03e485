/* test_server.c: the server's parts that need no socket: options (defaults, LLAISYS_*
 * variables, flags winning, errors), API-key checks and key files, SSE framing, and the
 * Prometheus exposition of the metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/server/auth.h"
#include "log.h"
#include "../src/server/metrics.h"
#include "../src/server/ratelimit.h"
#include "../src/server/sse.h"

static int parse(struct server_opts *o, int argc, const char **argv)
{
    return server_opts_parse(o, argc, (char **)argv);
}

static void test_opts_defaults_env_flags(void **state)
{
    (void)state;
    struct server_opts o;
    const char *a1[] = {"llaisys-server", "--model", "/models/My-Model/"};
    unsetenv("LLAISYS_PORT");
    assert_int_equal(parse(&o, 3, a1), 0);
    assert_string_equal(o.model_dir, "/models/My-Model/");
    assert_string_equal(o.served_name, "My-Model");
    assert_string_equal(o.host, "127.0.0.1");
    assert_int_equal(o.port, 8000);
    assert_int_equal(o.n_api_keys, 0);
    assert_true(o.max_body == 8u << 20);
    assert_true(o.write_timeout == 60 && o.keepalive == 10 && o.request_timeout == 600);
    assert_int_equal(o.engine.max_seqs, 32); /* the server's defaults */
    assert_int_equal(o.engine.max_batch_tokens, 512);
    assert_int_equal(o.log_level, LOG_INFO);
    server_opts_free(&o);

    setenv("LLAISYS_PORT", "9001", 1);
    setenv("LLAISYS_MAX_SEQS", "7", 1);
    setenv("LLAISYS_KV_MEMORY", "2G", 1);
    setenv("LLAISYS_API_KEY", "envkey", 1);
    setenv("LLAISYS_EXACT", "yes", 1);
    const char *a2[] = {"x", "--model", "m", "--port=9002", "--api-key", "k2", "--max-body",
                        "64K", "--cors-origins", "a, b ,", "--log-level", "debug",
                        "--write-timeout", "4", "--sse-keepalive", "30", "--metrics-public"};
    assert_int_equal(parse(&o, 17, a2), 0);
    assert_int_equal(o.port, 9002);           /* the flag wins */
    assert_int_equal(o.engine.max_seqs, 7);   /* from the variable */
    assert_int_equal(o.engine.max_batch_tokens, 512);
    assert_true(o.engine.kv_memory == (size_t)2 << 30);
    assert_true(o.engine.exact);
    assert_int_equal(o.n_api_keys, 2);        /* keys from both */
    assert_string_equal(o.api_keys[0], "envkey");
    assert_string_equal(o.api_keys[1], "k2");
    assert_true(o.max_body == 64 * 1024);
    assert_int_equal(o.n_cors_origins, 2);
    assert_string_equal(o.cors_origins[1], "b");
    assert_int_equal(o.log_level, LOG_DEBUG);
    assert_true(o.keepalive == 2); /* clamped to half the write timeout */
    assert_true(o.metrics_public);
    assert_string_equal(o.served_name, "m");
    assert_null(o.reasoning_parser); /* auto */
    server_opts_free(&o);
    const char *a3[] = {"x", "--model", "m", "--reasoning-parser", "deepseek_r1"};
    assert_int_equal(parse(&o, 5, a3), 0);
    assert_string_equal(o.reasoning_parser, "deepseek_r1");
    server_opts_free(&o);
    const char *a4[] = {"x", "--model", "m", "--reasoning-parser=none"};
    assert_int_equal(parse(&o, 4, a4), 0);
    assert_string_equal(o.reasoning_parser, "none");
    server_opts_free(&o);
    unsetenv("LLAISYS_PORT");
    unsetenv("LLAISYS_MAX_SEQS");
    unsetenv("LLAISYS_KV_MEMORY");
    unsetenv("LLAISYS_API_KEY");
    unsetenv("LLAISYS_EXACT");
}

static void test_opts_errors(void **state)
{
    (void)state;
    static const char *const bad[][4] = {
        {"--port", "65536", NULL},
        {"--port", "12x", NULL},
        {"--max-seqs", "0", NULL},
        {"--kv-memory", "lots", NULL},
        {"--request-timeout", "-1", NULL},
        {"--log-level", "loud", NULL},
        {"--exact=maybe", NULL},
        {"--no-such-flag", NULL},
        {"--threads", NULL},
        {"--api-key", "has space", NULL},
        {"--api-key-file", "/nonexistent/keys", NULL},
        {"--reasoning-parser", "other", NULL},
        {"--write-timeout", "0", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[8] = {"x", "--model", "m"};
        int n = 3;
        for (int k = 0; bad[i][k]; k++)
            argv[n++] = bad[i][k];
        struct server_opts o;
        if (parse(&o, n, argv) != -1)
            fail_msg("case %zu (%s) was accepted", i, bad[i][0]);
        server_opts_free(&o);
    }
    const char *none[] = {"x", "--port", "1"};
    struct server_opts o;
    assert_int_equal(parse(&o, 3, none), -1); /* no --model */
    server_opts_free(&o);
    const char *version[] = {"x", "--version"};
    assert_int_equal(parse(&o, 2, version), 1); /* printed: the caller exits 0 */
    server_opts_free(&o);
}

static void test_auth(void **state)
{
    (void)state;
    assert_true(auth_equal("abc", 3, "abc", 3));
    assert_false(auth_equal("abd", 3, "abc", 3));
    assert_false(auth_equal("abcabc", 6, "abc", 3)); /* a repeat of the key is not the key */
    assert_false(auth_equal("ab", 2, "abc", 3));
    assert_false(auth_equal("", 0, "abc", 3));
    assert_true(auth_equal("", 0, "", 0));

    char path[] = "/tmp/llaisys-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# comment\n\n  key-one  \r\nkey-two\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct server_opts o = {0};
    struct ll_err err;
    assert_int_equal(auth_load_file(path, &o, &err), LL_OK);
    assert_int_equal(o.n_api_keys, 2);
    assert_string_equal(o.api_keys[0], "key-one");
    assert_true(auth_check(&o, "Bearer key-one"));
    assert_true(auth_check(&o, "bearer  key-two "));
    assert_false(auth_check(&o, "Bearer key-three"));
    assert_false(auth_check(&o, "Bearer key-on"));
    assert_false(auth_check(&o, "Basic key-one"));
    assert_false(auth_check(&o, "key-one"));
    assert_false(auth_check(&o, NULL));
    assert_int_equal(auth_key_index(&o, "Bearer key-one"), 0);
    assert_int_equal(auth_key_index(&o, "Bearer key-two"), 1);
    assert_int_equal(auth_key_index(&o, "Bearer nope"), -1);
    struct server_opts none = {0};
    assert_true(auth_check(&none, NULL));
    server_opts_free(&o);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "# only a comment\n", 17), 17);
    close(fd);
    assert_int_equal(auth_load_file(path, &o, &err), LL_EINVAL);
    server_opts_free(&o);

    /* budgets on a key's line; errors name the file's line */
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "# keys\nk-a name=alice rpm=60 tpm=100000 concurrency=4\n\tk-b  tpm=5 \nk-c\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(auth_load_file(path, &o, &err), LL_OK);
    assert_int_equal(o.n_api_keys, 3);
    assert_string_equal(o.api_keys[0], "k-a");
    assert_string_equal(o.key_budgets[0].name, "alice");
    assert_true(o.key_budgets[0].rpm == 60 && o.key_budgets[0].tpm == 100000 &&
                o.key_budgets[0].concurrency == 4 && o.key_budgets[0].rpm_set);
    assert_string_equal(o.api_keys[1], "k-b");
    assert_true(o.key_budgets[1].tpm == 5 && o.key_budgets[1].tpm_set &&
                !o.key_budgets[1].rpm_set);
    assert_int_equal(strncmp(o.key_budgets[1].name, "key-", 4), 0); /* a hash, not the key */
    assert_int_equal(strlen(o.key_budgets[1].name), 12);
    assert_null(strstr(o.key_budgets[1].name, "k-b"));
    assert_true(auth_check(&o, "Bearer k-c"));
    server_opts_free(&o);
    static const struct {
        const char *text, *msg;
    } bad_files[] = {
        {"k1\nk2 rpm=ten\n", ":2: rpm: must be an integer from 0 to 1000000000 (got 'ten')"},
        {"\n# c\nk1 burst=3\n", ":3: unknown budget 'burst' (name, rpm, tpm or concurrency)"},
        {"k1 rpm\n", ":1: 'rpm' is not name=value"},
        {"k1 name=a/b\n", ":1: name 'a/b' must be 1 to 47 letters"},
        {"k1 tpm=-1\n", ":1: tpm: must be an integer from 0"},
    };
    for (size_t i = 0; i < sizeof bad_files / sizeof *bad_files; i++) {
        fd = open(path, O_WRONLY | O_TRUNC);
        assert_int_equal(write(fd, bad_files[i].text, strlen(bad_files[i].text)),
                         (ssize_t)strlen(bad_files[i].text));
        close(fd);
        assert_int_equal(auth_load_file(path, &o, &err), LL_EINVAL);
        if (!strstr(err.msg, bad_files[i].msg) || strncmp(err.msg, path, strlen(path)))
            fail_msg("file %zu: '%s' (want '%s')", i, err.msg, bad_files[i].msg);
        server_opts_free(&o);
    }
    unlink(path);
}

static void test_sse(void **state)
{
    (void)state;
    struct sse_buf b = {0};
    assert_int_equal(sse_pending(&b), 0);
    assert_true(sse_event(&b, "{\"a\":1}"));
    assert_true(sse_comment(&b, "keep-alive"));
    assert_true(sse_done(&b));
    const char *want = "data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n";
    assert_int_equal(sse_pending(&b), strlen(want));
    char out[128] = {0};
    size_t n = sse_take(&b, out, 5);
    n += sse_take(&b, out + n, sizeof out - 1 - n);
    assert_string_equal(out, want);
    assert_int_equal(sse_pending(&b), 0);
    for (int i = 0; i < 10000; i++) { /* grows and compacts */
        assert_true(sse_event(&b, "0123456789"));
        char tmp[7];
        assert_int_equal(sse_take(&b, tmp, sizeof tmp), sizeof tmp);
    }
    assert_int_equal(sse_pending(&b), 10000 * 18 - 10000 * 7);
    sse_free(&b);
}

static double fake_now;
static double fake_clock(void) { return fake_now; }

/* Per-key budgets: token buckets per minute (full at start, limit/60 per second), concurrency
 * slots, refunds, the headers' view and the reset durations. */
static void test_ratelimit(void **state)
{
    (void)state;
    struct key_budget b[3] = {{.rpm = 2, .name = "a"}, {.tpm = 100, .concurrency = 1,
                                                        .name = "b"}, {.name = "c"}};
    struct server_opts o = {.n_api_keys = 3, .key_budgets = b};
    struct ratelimit rl;
    fake_now = 500;
    assert_int_equal(ratelimit_init(&rl, &o), LL_OK);
    rl.clock = fake_clock;
    for (int k = 0; k < 3; k++)
        rl.keys[k].req.t = rl.keys[k].tok.t = fake_now;
    int retry;
    struct rl_state st;
    assert_int_equal(ratelimit_admit(&rl, 0, 7, &retry), RL_NONE);
    assert_true(ratelimit_state(&rl, 0, &st) && st.has_rpm && !st.has_tpm);
    assert_true(st.rpm == 2 && st.rpm_left == 1 && st.rpm_reset == 30);
    assert_int_equal(ratelimit_admit(&rl, 0, 7, &retry), RL_NONE);
    assert_int_equal(ratelimit_admit(&rl, 0, 7, &retry), RL_RPM);
    assert_int_equal(retry, 30); /* one request refills in 60 / 2 s */
    fake_now += 29;
    assert_int_equal(ratelimit_admit(&rl, 0, 7, &retry), RL_RPM);
    assert_int_equal(retry, 1);
    fake_now += 1;
    assert_int_equal(ratelimit_admit(&rl, 0, 7, &retry), RL_NONE);
    ratelimit_state(&rl, 0, &st);
    assert_true(st.rpm_left == 0 && st.rpm_reset == 60);
    /* tokens and concurrency */
    assert_int_equal(ratelimit_admit(&rl, 1, 40, &retry), RL_NONE);
    assert_int_equal(ratelimit_admit(&rl, 1, 1, &retry), RL_CONCURRENCY);
    assert_int_equal(retry, 1);
    ratelimit_end(&rl, 1, 40, 50, false); /* 100 - 40 - 50 = 10 left */
    ratelimit_state(&rl, 1, &st);
    assert_true(st.has_tpm && !st.has_rpm && st.tpm_left == 10 && fabs(st.tpm_reset - 54) < 1e-9);
    assert_int_equal(ratelimit_admit(&rl, 1, 40, &retry), RL_TPM);
    assert_int_equal(retry, 18); /* 30 tokens at 100/60 per second */
    fake_now += 18;
    assert_int_equal(ratelimit_admit(&rl, 1, 40, &retry), RL_NONE);
    ratelimit_end(&rl, 1, 40, 0, true); /* refused by the engine: given back */
    ratelimit_state(&rl, 1, &st);
    assert_int_equal(st.tpm_left, 40);
    assert_int_equal(ratelimit_admit(&rl, 1, 500, &retry), RL_TPM); /* more than the budget: */
    fake_now += 36;                                                   /* waits for a full one */
    assert_int_equal(ratelimit_admit(&rl, 1, 500, &retry), RL_NONE);
    ratelimit_end(&rl, 1, 500, 0, false);
    /* no budget: always admitted, no headers */
    for (int i = 0; i < 100; i++)
        assert_int_equal(ratelimit_admit(&rl, 2, 1000, &retry), RL_NONE);
    assert_false(ratelimit_state(&rl, 2, &st));
    assert_int_equal(ratelimit_admit(&rl, -1, 5, &retry), RL_NONE);
    int n;
    struct rl_key *snap = ratelimit_snapshot(&rl, &n);
    assert_int_equal(n, 3);
    assert_true(snap[0].admitted == 3 && snap[0].refused[RL_RPM] == 2);
    assert_true(snap[1].admitted == 2 && snap[1].refused[RL_CONCURRENCY] == 1 &&
                snap[1].refused[RL_TPM] == 2 && snap[1].tokens == 590);
    assert_int_equal(snap[2].active, 100);
    char *t = metrics_render_keys(snap, n, "m");
    assert_non_null(strstr(t, "llaisys_key_requests_total{model_name=\"m\",key=\"a\"} 3\n"));
    assert_non_null(strstr(t, "llaisys_key_rejections_total{model_name=\"m\",key=\"b\","
                              "limit=\"tpm\"} 2\n"));
    assert_non_null(strstr(t, "llaisys_key_tokens_total{model_name=\"m\",key=\"b\"} 590\n"));
    assert_non_null(strstr(t, "llaisys_key_requests_active{model_name=\"m\",key=\"c\"} 100\n"));
    assert_non_null(strstr(t, "llaisys_key_budget{model_name=\"m\",key=\"a\",budget=\"rpm\"} 2\n"));
    free(t);
    free(snap);
    char d[32];
    ratelimit_duration(0.25, d, sizeof d);
    assert_string_equal(d, "250ms");
    ratelimit_duration(6, d, sizeof d);
    assert_string_equal(d, "6s");
    ratelimit_duration(90, d, sizeof d);
    assert_string_equal(d, "1m30s");
    ratelimit_free(&rl);
}

static void test_metrics_text(void **state)
{
    (void)state;
    struct metrics m;
    assert_int_equal(metrics_init(&m, 60), LL_OK);
    metrics_finish(&m, ENGINE_FINISH_STOP, CANCEL_NONE, 10, 5, 0.2);
    metrics_finish(&m, ENGINE_FINISH_CANCELLED, CANCEL_DISCONNECT, 3, 1, 0);
    metrics_request(&m, 0.05, 0.02, 1.5);
    metrics_itl(&m, 0.3, 3); /* three gaps of 0.1 s */
    metrics_http(&m, 200);
    metrics_http(&m, 429);
    struct engine_stats st = {.running = 2, .waiting = 1, .kv_blocks = 100, .kv_in_use = 25,
                              .prompt_tokens = 30, .cached_tokens = 10, .preemptions = 4,
                              .queued = 1, .held = 3, .admission_limit = 7, .block_size = 16,
                              .kv_tokens = 390, .kv_tokens_peak = 700, .compute_threads = 3};
    char *t = metrics_render(&m, &st, "my\"model", true);
    assert_non_null(t);
    static const char *const lines[] = {
        "llaisys_server_ready{model_name=\"my\\\"model\"} 1\n",
        "llaisys_request_success_total{model_name=\"my\\\"model\",finished_reason=\"stop\"} 1\n",
        "llaisys_request_success_total{model_name=\"my\\\"model\",finished_reason=\"cancelled\"} 1\n",
        "llaisys_request_cancellations_total{model_name=\"my\\\"model\",reason=\"disconnect\"} 1\n",
        "llaisys_prompt_tokens_total{model_name=\"my\\\"model\"} 13\n",
        "llaisys_generation_tokens_total{model_name=\"my\\\"model\"} 6\n",
        "llaisys_http_responses_total{model_name=\"my\\\"model\",code=\"429\"} 1\n",
        "llaisys_inter_token_latency_seconds_bucket{model_name=\"my\\\"model\",le=\"0.075\"} 0\n",
        "llaisys_inter_token_latency_seconds_bucket{model_name=\"my\\\"model\",le=\"0.1\"} 3\n",
        "llaisys_inter_token_latency_seconds_bucket{model_name=\"my\\\"model\",le=\"+Inf\"} 3\n",
        "llaisys_inter_token_latency_seconds_count{model_name=\"my\\\"model\"} 3\n",
        "llaisys_e2e_request_latency_seconds_count{model_name=\"my\\\"model\"} 1\n",
        "llaisys_num_requests_running{model_name=\"my\\\"model\"} 2\n",
        "llaisys_kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.25\n",
        "llaisys_prefix_cache_hit_ratio{model_name=\"my\\\"model\"} 0.25\n",
        "llaisys_num_preemptions_total{model_name=\"my\\\"model\"} 4\n",
        "# TYPE llaisys_time_to_first_token_seconds histogram\n",
        "llaisys_time_per_output_token_seconds_bucket{model_name=\"my\\\"model\",le=\"0.01\"} 0\n",
        "llaisys_time_per_output_token_seconds_bucket{model_name=\"my\\\"model\",le=\"0.025\"} 1\n",
        "llaisys_time_per_output_token_seconds_p50{model_name=\"my\\\"model\"} 0.02\n",
        "llaisys_time_to_first_token_seconds_p99{model_name=\"my\\\"model\"} 0.05\n",
        "llaisys_e2e_request_latency_seconds_p50{model_name=\"my\\\"model\"} 1.5\n",
        "llaisys_num_requests_queued{model_name=\"my\\\"model\"} 1\n",
        "llaisys_num_requests_held{model_name=\"my\\\"model\"} 3\n",
        "llaisys_admission_limit{model_name=\"my\\\"model\"} 7\n",
        "llaisys_kv_cache_usage_tokens{model_name=\"my\\\"model\"} 390\n",
        "llaisys_kv_cache_usage_tokens_peak{model_name=\"my\\\"model\"} 700\n",
        "llaisys_kv_cache_capacity_tokens{model_name=\"my\\\"model\"} 1600\n",
        "llaisys_compute_threads{model_name=\"my\\\"model\"} 3\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (!strstr(t, lines[i]))
            fail_msg("missing line: %s", lines[i]);
    free(t);
    t = metrics_render(&m, NULL, "m", false); /* while loading: no engine gauges */
    assert_non_null(strstr(t, "llaisys_server_ready{model_name=\"m\"} 0\n"));
    assert_null(strstr(t, "llaisys_num_requests_running"));
    free(t);
    metrics_free(&m);
}


/* The value of the sample NAME{model_name="m"} in t, NaN-aware; fails when absent. */
static double sample_of(const char *t, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s{model_name=\"m\"} ", name);
    const char *p = strstr(t, key);
    if (!p)
        fail_msg("no sample %s", name);
    p += strlen(key);
    return !strncmp(p, "NaN", 3) ? NAN : strtod(p, NULL);
}

/* The sliding window: requests per second and nearest-rank p50/p99 over the requests that
 * ended in the last --metrics-window seconds; older ones leave it; none: NaN. */
static void test_metrics_window(void **state)
{
    (void)state;
    struct metrics m;
    assert_int_equal(metrics_init(&m, 60), LL_OK);
    m.clock = fake_clock;
    m.t_start = 1000;
    fake_now = 1000.5;
    char *t = metrics_render(&m, NULL, "m", true);
    assert_true(isnan(sample_of(t, "llaisys_time_to_first_token_seconds_p50")));
    assert_true(sample_of(t, "llaisys_requests_per_second") == 0);
    free(t);
    for (int i = 1; i <= 100; i++) /* ttft i, tpot i/100, e2e 2i; one without a second token */
        metrics_request(&m, i, i == 100 ? -1 : i / 100.0, 2 * i);
    fake_now = 1010;
    t = metrics_render(&m, NULL, "m", true);
    assert_true(sample_of(t, "llaisys_requests_per_second") == 10); /* 100 over 10 s up */
    assert_true(sample_of(t, "llaisys_time_to_first_token_seconds_p50") == 50);
    assert_true(sample_of(t, "llaisys_time_to_first_token_seconds_p99") == 99);
    assert_true(sample_of(t, "llaisys_time_per_output_token_seconds_p50") == 0.5);
    assert_true(sample_of(t, "llaisys_time_per_output_token_seconds_p99") == 0.99);
    assert_true(sample_of(t, "llaisys_e2e_request_latency_seconds_p99") == 198);
    free(t);
    fake_now = 1059; /* still inside the 60 s window, 59 s up: 101 over 59 s */
    metrics_request(&m, 1000, 1, 1000);
    t = metrics_render(&m, NULL, "m", true);
    assert_true(fabs(sample_of(t, "llaisys_requests_per_second") - 101.0 / 59) < 1e-6);
    assert_true(sample_of(t, "llaisys_time_to_first_token_seconds_p99") == 100); /* rank 100 of 101 */
    free(t);
    fake_now = 1062; /* the first hundred left the window */
    t = metrics_render(&m, NULL, "m", true);
    assert_true(fabs(sample_of(t, "llaisys_requests_per_second") - 1.0 / 60) < 1e-6);
    assert_true(sample_of(t, "llaisys_time_to_first_token_seconds_p50") == 1000);
    assert_true(sample_of(t, "llaisys_e2e_request_latency_seconds_p50") == 1000);
    free(t);
    fake_now = 1200; /* all gone */
    t = metrics_render(&m, NULL, "m", true);
    assert_true(isnan(sample_of(t, "llaisys_e2e_request_latency_seconds_p50")));
    assert_true(sample_of(t, "llaisys_requests_per_second") == 0);
    free(t);
    metrics_free(&m);
}

int main(void)
{
    log_set_level(LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opts_defaults_env_flags),
        cmocka_unit_test(test_opts_errors),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_metrics_window),
        cmocka_unit_test(test_ratelimit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
