/*
 * cmd_bench_tokenizer.c: `llaisys-cli bench-tokenizer`: how long tokenizer.json takes to load
 * and how fast text encodes (MB/s with MB = 10^6 bytes, tokens/s), on given files or on a
 * default corpus assembled deterministically:
 *
 *   1. repository text: *.c *.h *.md *.sh *.jinja files under src/, include/, tests/ (not
 *      tests/fixtures/) and the top directory, in sorted path order, plus the "text" fields of
 *      tests/fixtures/tokenizer-cases.json, at most a third of the corpus (read from the
 *      current directory: run from the repository root);
 *   2. the rest alternates paragraphs of generated English and Chinese: sentences of
 *      vocabulary pieces (" word" pieces of lowercase letters; pieces made only of CJK
 *      ideographs) drawn with a fixed-seed generator that favours low ids (frequent pieces).
 *
 * The corpus is cut into documents (16 KiB by default, at character boundaries) that are
 * encoded one call each, as a server encodes prompts. Pass 1 runs on a fresh tokenizer (cold
 * BPE cache); later passes reuse it. With --threads N, N threads encode the whole corpus at the
 * same time on one tokenizer and the throughput is their total. Throughput is given per second
 * of wall clock and per second of the process's CPU time (which other work on a busy machine
 * inflates less). After timing, every document is checked to decode back to itself.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli_args.h"
#include "commands.h"
#include "json.h"
#include "tokenizer.h"
#include "util.h"

/* ---- repository text ---- */

static bool wanted_file(const char *name)
{
    const char *dot = strrchr(name, '.');
    static const char *const ext[] = {".c", ".h", ".md", ".sh", ".jinja"};
    for (size_t i = 0; dot && i < LL_ARRAY_LEN(ext); i++)
        if (!strcmp(dot, ext[i]))
            return true;
    return false;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append the wanted files under dir (recursively unless !deep) in sorted order. */
static void add_tree(struct ll_buf *b, const char *dir, bool deep, size_t limit, int *n_files)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[n] = ll_path_join(dir, e->d_name)))
            break;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (deep && strcmp(names[i], "tests/fixtures"))
                add_tree(b, names[i], deep, limit, n_files);
        } else if (b->len < limit && wanted_file(names[i]) && st.st_size < (1 << 18)) {
            char *data;
            size_t len;
            if (ll_read_file(names[i], &data, &len, NULL) == LL_OK) {
                if (b->len + len > limit)
                    len = limit - b->len;
                if (ll_buf_append(b, data, len))
                    ++*n_files;
                free(data);
            }
        }
        free(names[i]);
    }
    free(names);
}

static void add_fixture_texts(struct ll_buf *b, size_t limit)
{
    char *data;
    size_t len;
    if (ll_read_file("tests/fixtures/tokenizer-cases.json", &data, &len, NULL) != LL_OK)
        return;
    cJSON *root = NULL;
    ll_json_parse(&root, data, len, "tokenizer-cases.json", NULL);
    const cJSON *c;
    cJSON_ArrayForEach(c, root)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text");
        if (cJSON_IsString(t) && b->len + strlen(t->valuestring) + 1 <= limit) {
            ll_buf_append(b, t->valuestring, strlen(t->valuestring));
            ll_buf_append(b, "\n", 1);
        }
    }
    cJSON_Delete(root);
    free(data);
}

/* ---- generated English and Chinese ---- */

struct rng {
    uint64_t s;
};

static uint32_t rng_next(struct rng *r)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}

/* Index in [0, n), favouring small ones. */
static size_t rng_skewed(struct rng *r, size_t n)
{
    double u = (rng_next(r) + 0.5) / 2147483648.0;
    return (size_t)(u * u * u * (double)n) % n;
}

static bool is_english_word(const char *s, size_t n)
{
    if (n < 3 || s[0] != ' ')
        return false;
    for (size_t i = 1; i < n; i++)
        if (s[i] < 'a' || s[i] > 'z')
            return false;
    return true;
}

static bool is_cjk(const char *s, size_t n)
{
    if (n == 0 || n % 3)
        return false;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned char *u = (const unsigned char *)s + i;
        if ((u[0] & 0xF0) != 0xE0 || (u[1] & 0xC0) != 0x80 || (u[2] & 0xC0) != 0x80)
            return false;
        uint32_t cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
        if (cp < 0x4E00 || cp > 0x9FFF)
            return false;
    }
    return true;
}

static bool generate(struct ll_buf *b, const struct tokenizer *tok, size_t target, size_t *n_en,
                     size_t *n_zh)
{
    int32_t n_ids = tokenizer_vocab_size(tok);
    int32_t *en = malloc((size_t)n_ids * sizeof *en), *zh = malloc((size_t)n_ids * sizeof *zh);
    size_t ne = 0, nz = 0;
    for (int32_t id = 0; en && zh && id < n_ids; id++) {
        size_t n;
        const char *s = tokenizer_id_bytes(tok, id, &n);
        if (s && is_english_word(s, n))
            en[ne++] = id;
        else if (s && is_cjk(s, n))
            zh[nz++] = id;
    }
    struct rng r = {20250101};
    bool ok = en && zh && ne && nz;
    for (bool english = true; ok && b->len < target; english = !english) {
        size_t before = b->len;
        int sentences = 3 + (int)(rng_next(&r) % 4);
        for (int s = 0; ok && s < sentences; s++) {
            int words = 6 + (int)(rng_next(&r) % 15);
            for (int w = 0; ok && w < words; w++) {
                size_t n;
                const char *p = tokenizer_id_bytes(tok, english ? en[rng_skewed(&r, ne)]
                                                               : zh[rng_skewed(&r, nz)], &n);
                if (english && w == 0) { /* "Word" starts a sentence, without its space */
                    char c = (char)(p[1] - 'a' + 'A');
                    ok = ll_buf_append(b, s ? " " : "", s ? 1 : 0) && ll_buf_append(b, &c, 1) &&
                         ll_buf_append(b, p + 2, n - 2);
                } else {
                    ok = ll_buf_append(b, p, n);
                }
                if (ok && w + 1 < words && rng_next(&r) % 9 == 0)
                    ok = english ? ll_buf_append(b, ",", 1) : ll_buf_append(b, "，", 3);
            }
            if (ok)
                ok = english ? ll_buf_append(b, ".", 1) : ll_buf_append(b, "。", 3);
        }
        if (ok)
            ok = ll_buf_append(b, "\n\n", 2);
        *(english ? n_en : n_zh) += b->len - before;
    }
    free(en);
    free(zh);
    return ok;
}

/* ---- timing ---- */

struct doc {
    const char *s;
    size_t n;
};

struct job {
    const struct tokenizer *tok;
    const struct doc *docs;
    size_t n_docs;
    size_t n_tokens;
    bool failed;
};

static void *encode_all(void *p)
{
    struct job *j = p;
    for (size_t i = 0; i < j->n_docs; i++) {
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(j->tok, j->docs[i].s, j->docs[i].n, false, &ids, &n, NULL) != LL_OK) {
            j->failed = true;
            return NULL;
        }
        j->n_tokens += n;
        free(ids);
    }
    return NULL;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Encode all documents on n_threads threads at once; returns wall seconds (*cpu: CPU seconds of
 * the process, which a busy machine inflates less), -1 on failure. */
static double timed_pass(const struct tokenizer *tok, const struct doc *docs, size_t n_docs,
                         int n_threads, size_t *n_tokens, double *cpu)
{
    struct job jobs[64];
    pthread_t th[64];
    double c0 = cpu_now();
    double t0 = ll_now();
    int started = 0;
    for (int i = 0; i < n_threads; i++) {
        jobs[i] = (struct job){tok, docs, n_docs, 0, false};
        if (n_threads == 1) {
            encode_all(&jobs[i]);
        } else if (pthread_create(&th[i], NULL, encode_all, &jobs[i]) != 0) {
            jobs[i].failed = true;
            break;
        }
        started++;
    }
    for (int i = 0; n_threads > 1 && i < started; i++)
        pthread_join(th[i], NULL);
    double dt = ll_now() - t0;
    *cpu = cpu_now() - c0;
    *n_tokens = 0;
    for (int i = 0; i < n_threads; i++) {
        if (i >= started || jobs[i].failed)
            return -1;
        *n_tokens += jobs[i].n_tokens;
    }
    return dt;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli bench-tokenizer --model DIR [options] [FILE...]\n\n"
            "Times loading DIR/tokenizer.json and encoding text: the FILEs, or by default a\n"
            "corpus of about --size MB (a third at most from the repository's sources and\n"
            "docs, the rest generated English and Chinese from vocabulary pieces with a fixed\n"
            "seed; run from the repository root). Text is encoded in documents of --doc KiB,\n"
            "one call each. Pass 1 uses a fresh tokenizer (cold BPE cache). MB = 10^6 bytes.\n\n"
            "  --model DIR   directory with tokenizer.json (and tokenizer_config.json)\n"
            "  --size MB     size of the default corpus (default 4)\n"
            "  --doc KIB     document size (default 16)\n"
            "  --passes N    encoding passes (default 3)\n"
            "  --threads N   encode on N threads at once on one tokenizer (default 1, max 64)\n");
}

int cmd_bench_tokenizer(int argc, char **argv)
{
    const char *model = NULL;
    long long size_mb = 4, doc_kib = 16, passes = 3, threads = 1;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int n_inputs = 0;
    if (!files) {
        fprintf(stderr, "llaisys-cli bench-tokenizer: out of memory\n");
        return 1;
    }
    const struct cli_arg args[] = {
        CLI_STR("--model", &model),
        CLI_INT("--size", &size_mb, 1, 1024),
        CLI_INT("--doc", &doc_kib, 1, 1 << 20),
        CLI_INT("--passes", &passes, 1, 1000),
        CLI_INT("--threads", &threads, 1, 64),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "bench-tokenizer", .usage = usage, .args = args,
                                .pos = files, .max_pos = argc, .n_pos = &n_inputs};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (!pr && !model) {
        cli_args_fail(&cmd, "--model DIR is required");
        pr = -1;
    }
    if (pr) {
        free(files);
        return pr > 0 ? 0 : 2;
    }

    /* load: three times, the first on a possibly cold page cache */
    struct ll_err err = {0};
    struct tokenizer *tok = NULL;
    double load_best = 1e30, load_first = 0;
    for (int i = 0; i < 3; i++) {
        tokenizer_free(tok);
        double t0 = ll_now();
        if (tokenizer_load(&tok, model, &err) != LL_OK) {
            fprintf(stderr, "llaisys-cli bench-tokenizer: %s\n", err.msg);
            free(files);
            return 1;
        }
        double dt = ll_now() - t0;
        if (i == 0)
            load_first = dt;
        if (dt < load_best)
            load_best = dt;
    }
    printf("tokenizer: %s (%d ids)\n", model, tokenizer_vocab_size(tok));
    printf("load: %.1f ms (best of 3; first %.1f ms)\n", load_best * 1e3, load_first * 1e3);

    struct ll_buf text = {0};
    int rc = 1;
    if (n_inputs > 0) {
        for (int i = 0; i < n_inputs; i++) {
            char *data;
            size_t len;
            if (ll_read_file(files[i], &data, &len, &err) != LL_OK) {
                fprintf(stderr, "llaisys-cli bench-tokenizer: %s\n", err.msg);
                goto out;
            }
            bool ok = ll_buf_append(&text, data, len);
            free(data);
            if (!ok)
                goto oom;
        }
        printf("corpus: %zu bytes from %d file(s)\n", text.len, n_inputs);
    } else {
        size_t target = (size_t)size_mb * 1000000, repo_limit = target / 3, n_en = 0, n_zh = 0;
        int n_files = 0;
        add_tree(&text, "src", true, repo_limit, &n_files);
        add_tree(&text, "include", true, repo_limit, &n_files);
        add_tree(&text, "tests", true, repo_limit, &n_files);
        add_tree(&text, ".", false, repo_limit, &n_files);
        add_fixture_texts(&text, repo_limit);
        size_t repo = text.len;
        if (!generate(&text, tok, target, &n_en, &n_zh))
            goto oom;
        printf("corpus: %zu bytes: repository text %zu bytes (%d files + fixture texts), "
               "generated English %zu, generated Chinese %zu\n",
               text.len, repo, n_files, n_en, n_zh);
    }

    /* documents, cut at character starts */
    size_t doc_bytes = (size_t)doc_kib * 1024, n_docs = 0;
    struct doc *docs = malloc((text.len / doc_bytes + 2) * sizeof *docs);
    if (!docs)
        goto oom;
    for (size_t at = 0; at < text.len;) {
        size_t end = at + doc_bytes < text.len ? at + doc_bytes : text.len;
        while (end < text.len && end > at + 1 && (text.data[end] & 0xC0) == 0x80)
            end--;
        docs[n_docs++] = (struct doc){text.data + at, end - at};
        at = end;
    }
    printf("documents: %zu of up to %lld KiB; threads: %lld\n", n_docs, doc_kib, threads);

    /* pass 1 on a fresh tokenizer: the previous loads filled nothing, but be explicit */
    tokenizer_free(tok);
    if (tokenizer_load(&tok, model, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli bench-tokenizer: %s\n", err.msg);
        free(docs);
        goto out;
    }
    double best = 1e30, best_cpu = 1e30;
    size_t n_tokens = 0;
    for (long long p = 0; p < passes; p++) {
        double cpu;
        double dt = timed_pass(tok, docs, n_docs, (int)threads, &n_tokens, &cpu);
        if (dt < 0) {
            free(docs);
            goto oom;
        }
        double bytes = (double)text.len * (double)threads;
        printf("encode pass %lld%s: %.3f s, %.2f MB/s, %.3f M tokens/s, %zu tokens "
               "(%.2f bytes/token); CPU %.3f s\n",
               p + 1, p == 0 ? " (cold cache)" : "", dt, bytes / dt / 1e6,
               (double)n_tokens / dt / 1e6, n_tokens, bytes / (double)(n_tokens ? n_tokens : 1),
               cpu);
        if (dt < best)
            best = dt;
        if (cpu < best_cpu)
            best_cpu = cpu;
    }
    printf("best: %.2f MB/s, %.3f M tokens/s (wall clock, all threads together)\n",
           (double)text.len * (double)threads / best / 1e6, (double)n_tokens / best / 1e6);
    printf("per CPU second: %.2f MB/s, %.3f M tokens/s\n",
           (double)text.len * (double)threads / best_cpu / 1e6, (double)n_tokens / best_cpu / 1e6);

    /* every document must decode back to itself (the corpus is NFC and valid UTF-8) */
    size_t bad = 0;
    for (size_t i = 0; i < n_docs; i++) {
        int32_t *ids;
        size_t n, len;
        char *back;
        if (tokenizer_encode(tok, docs[i].s, docs[i].n, false, &ids, &n, &err) != LL_OK)
            break;
        if (tokenizer_decode(tok, ids, n, false, &back, &len, &err) == LL_OK) {
            bad += len != docs[i].n || memcmp(back, docs[i].s, len);
            free(back);
        }
        free(ids);
    }
    printf("round trip: %s (%zu of %zu documents differ)\n", bad ? "FAILED" : "ok", bad, n_docs);
    free(docs);
    rc = bad ? 1 : 0;
    goto out;
oom:
    fprintf(stderr, "llaisys-cli bench-tokenizer: out of memory\n");
out:
    ll_buf_free(&text);
    tokenizer_free(tok);
    free(files);
    return rc;
}
