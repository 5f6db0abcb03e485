/*
 * mock.c: the mock family (see mock.h). A directory holds config.json ("model_type": "mock",
 * "vocab_size", optional "max_position_embeddings", "bos_token_id", "eos_token_id") and the
 * tokenizer files; no weights. The configuration's other sizes are fixed here (one layer, one
 * KV head of dimension 2) so that everything sized from them (KV bytes per block) stays valid.
 *
 * The logits of the token at position p of a sequence whose tokens are t_0 .. t_p:
 *
 *   h_-1 = LL_GOLDEN64
 *   h_j  = ll_mix64(h_(j-1) ^ ((t_j + 1) * LL_GOLDEN64 + j))        (64-bit wrap-around)
 *   logit[v] = (ll_mix64(h_p ^ ((v + 1) * MOCK_VOCAB_MIX)) >> 40) * 2^-21 - 4,   in [-4, 4)
 *
 * A row that wants its hidden state (LL_WANT_HIDDEN, hidden_size 2) gets (logit[0], logit[1]).
 *
 * (hash.h's splitmix64 mixer; every value is exact in f32, so another implementation of the
 * formula, e.g. tests/python's, finds the same argmax). As a real model's attention does, the
 * forward pass reads the history from the KV cache: the K slot of each position holds its token
 * id, written in the step that computes it, so copying, truncating or sharing a sequence's cache
 * changes the logits exactly as it would a real model's. The cache is f32 in either math mode.
 *
 * Test faults (mock.h): bind reads "fail_token" and "delay_us" from config.json into the
 * model's weights slot (struct mock_faults); the forward sleeps, then refuses a batch that holds
 * the fail token before it writes anything.
 *
 * Called by the thread that owns the runtime; the logits rows are split over the pool.
 */
#include "mock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "hash.h"
#include "json.h"
#include "util.h"

#define MOCK_VOCAB_MIX 0xd6e8feb86659fd93ull /* odd constant spreading the vocabulary ids */

struct mock_runtime {
    struct model_runtime base; /* first: mock_* cast between the two */
    int32_t *table;            /* (n_slots / block_size) identity table of the default sequence */
    struct ll_kv_seq seq0;
    int32_t *slot, *seqi, *rows; /* (max_batch) each */
    uint64_t *hist;            /* (max_batch) h_p of each row that wants logits */
};

/* The test faults of config.json (m->weights). */
struct mock_faults {
    long long fail_token; /* -1: none */
    long long delay_us;
};

static enum ll_status read_faults(struct mock_faults *f, const char *dir, int vocab,
                                  struct ll_err *err)
{
    char *path = ll_path_join(dir, "config.json"), *text = NULL;
    size_t len = 0;
    cJSON *o = NULL;
    enum ll_status s = path ? LL_OK : ll_err_set(err, LL_ENOMEM, "%s: out of memory", dir);
    if (s == LL_OK && (s = ll_read_file(path, &text, &len, err)) == LL_OK &&
        (s = ll_json_parse(&o, text, len, path, err)) == LL_OK &&
        ((s = ll_json_get_int(o, "fail_token", -1, vocab - 1, &f->fail_token, NULL, err)) ||
         (s = ll_json_get_int(o, "delay_us", 0, 10000000, &f->delay_us, NULL, err)))) {
        ll_err_prefix(err, "%s: ", path);
        if (err)
            err->code = LL_EMODEL;
        s = LL_EMODEL;
    }
    cJSON_Delete(o);
    free(text);
    free(path);
    return s;
}

enum ll_status mock_bind(struct model *m, struct ll_err *err)
{
    struct model_config *c = &m->config;
    c->hidden_size = 2, c->intermediate_size = 2, c->n_layers = 1;
    c->n_heads = 1, c->n_kv_heads = 1, c->head_dim = 2;
    m->weight_dtype = LL_F32;
    struct mock_faults *f = malloc(sizeof *f);
    if (!f)
        return ll_err_set(err, LL_ENOMEM, "mock: out of memory");
    *f = (struct mock_faults){.fail_token = -1};
    enum ll_status s = read_faults(f, m->dir, c->vocab_size, err);
    if (s != LL_OK) {
        free(f);
        return s;
    }
    m->weights = f;
    return LL_OK;
}

void mock_unbind(struct model *m)
{
    free(m->weights);
    m->weights = NULL;
}

void mock_runtime_free(struct model_runtime *rt)
{
    struct mock_runtime *r = (struct mock_runtime *)rt;
    if (!r)
        return;
    ll_pool_free(r->base.pool);
    ll_kv_cache_free(&r->base.kv);
    free(r->table);
    free(r->slot);
    free(r->hist);
    free(r);
}

enum ll_status mock_runtime_create(struct model_runtime **out, const struct model *m,
                                   const struct runtime_opts *opts, struct ll_err *err)
{
    *out = NULL;
    struct runtime_opts o = *opts;
    runtime_opts_resolve(&o);
    if (o.n_ctx < 1 || o.max_batch < 1 || o.n_threads < 1 || o.n_threads > 256 ||
        o.block_size < 1 || o.n_slots % o.block_size)
        return ll_err_set(err, LL_EINVAL,
                          "runtime: bad options (ctx %d, slots %d, block size %d, batch %d, "
                          "threads %d)", o.n_ctx, o.n_slots, o.block_size, o.max_batch,
                          o.n_threads);
    struct mock_runtime *r = calloc(1, sizeof *r);
    if (!r)
        return ll_err_set(err, LL_ENOMEM, "runtime: out of memory");
    r->base.model = m;
    r->base.opts = o;
    enum ll_status s;
    if ((s = ll_pool_create(&r->base.pool, o.n_threads, err)) ||
        (s = ll_kv_cache_init(&r->base.kv, LL_F32, 1, o.n_slots, 1, 2, err))) {
        mock_runtime_free(&r->base);
        return s;
    }
    int nblk = o.n_slots / o.block_size;
    r->table = malloc(sizeof(int32_t) * (size_t)nblk);
    r->slot = malloc(sizeof(int32_t) * 3 * (size_t)o.max_batch);
    r->hist = malloc(sizeof(uint64_t) * (size_t)o.max_batch);
    if (!r->table || !r->slot || !r->hist) {
        mock_runtime_free(&r->base);
        return ll_err_set(err, LL_ENOMEM, "runtime: out of memory (max batch %d)", o.max_batch);
    }
    r->seqi = r->slot + o.max_batch;
    r->rows = r->seqi + o.max_batch;
    for (int i = 0; i < nblk; i++)
        r->table[i] = i;
    r->seq0 = (struct ll_kv_seq){r->table, nblk};
    *out = &r->base;
    return LL_OK;
}

struct mock_logits {
    const uint64_t *hist; /* (n) */
    float *out;           /* (n, vocab) */
    int n, vocab;
};

/* logit[v] of the row whose history hash is h (the formula at the top). */
static float mock_logit(uint64_t h, int v)
{
    return (float)(ll_mix64(h ^ ((uint64_t)(v + 1) * MOCK_VOCAB_MIX)) >> 40) * 0x1p-21f - 4.0f;
}

static void logits_worker(void *ctx, int ith, int nth)
{
    const struct mock_logits *w = ctx;
    int lo, hi;
    ll_split(w->vocab, ith, nth, &lo, &hi);
    for (int row = 0; row < w->n; row++) {
        float *out = w->out + (size_t)row * w->vocab;
        for (int v = lo; v < hi; v++)
            out[v] = mock_logit(w->hist[row], v);
    }
}

enum ll_status mock_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                            struct ll_err *err)
{
    struct mock_runtime *r = (struct mock_runtime *)rt;
    struct runtime_rows rr;
    enum ll_status s = runtime_batch_resolve(rt, b, &r->seq0, r->slot, r->seqi, r->rows, &rr,
                                             err);
    if (s)
        return s;
    const struct mock_faults *f = rt->model->weights;
    if (f->delay_us > 0) {
        struct timespec ts = {f->delay_us / 1000000, f->delay_us % 1000000 * 1000};
        while (nanosleep(&ts, &ts) && errno == EINTR) {
        }
    }
    for (int i = 0; f->fail_token >= 0 && i < b->n_tokens; i++)
        if (b->token[i] == f->fail_token)
            return ll_err_set(err, LL_EMODEL, "mock: the forward pass failed on token %lld "
                              "(config.json fail_token, a test fault)", f->fail_token);
    if (b->abort_cb && b->abort_cb(b->abort_data))
        return ll_err_set(err, LL_EABORTED, "the step was aborted before its first layer");
    /* K slot of each position: (token id, position) as int32 */
    int32_t *k = rt->kv.k;
    for (int i = 0; i < b->n_tokens; i++) {
        k[2 * (size_t)r->slot[i]] = b->token[i];
        k[2 * (size_t)r->slot[i] + 1] = b->pos[i];
    }
    int bs = rt->opts.block_size, nlog = 0, nh = 0, vocab = rt->model->config.vocab_size;
    for (int j = 0; j < rr.n_want; j++) {
        int i = r->rows[j], p = b->pos[i];
        const struct ll_kv_seq *sq = &rr.seqs[r->seqi[i]];
        uint64_t h = LL_GOLDEN64;
        for (int q = 0; q <= p; q++) {
            size_t sl = (size_t)sq->block_table[q / bs] * bs + q % bs;
            uint64_t t = (uint64_t)(uint32_t)k[2 * sl];
            h = ll_mix64(h ^ ((t + 1) * LL_GOLDEN64 + (uint64_t)q));
        }
        if (b->want_logits && b->want_logits[i] == LL_WANT_HIDDEN) {
            b->hidden[2 * (size_t)nh] = mock_logit(h, 0);
            b->hidden[2 * (size_t)nh + 1] = mock_logit(h, 1);
            nh++;
        } else {
            r->hist[nlog++] = h;
        }
    }
    struct mock_logits w = {r->hist, logits, nlog, vocab};
    if (nlog)
        ll_pool_run(rt->pool, logits_worker, &w);
    return LL_OK;
}
