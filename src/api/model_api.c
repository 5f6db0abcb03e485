/*
 * model_api.c: the model level of the public API (llaisys.h): a model with its runtime, a
 * paged KV cache shared by up to n_seq_max sequences, batch decoding over it, the logits, and
 * the KV sequence operations.
 *
 * It is built on what the engine uses: the runtime's flat batch of many sequences over block
 * tables (runtime.h, attention.h) and the block pool with reference counts and the prefix cache
 * (kv_pool.h). Each sequence is a block table plus its tokens; blocks are shared by reference
 * (llaisys_kv_seq_cp, prefix hits) and copied before a write when shared (copy-on-write).
 *
 * Invariants, per sequence: it holds positions 0..n_pos-1 in blocks[0..n_blocks) with
 * n_blocks = ceil(n_pos / block_size); tokens[0..n_pos) are its tokens; hashes[0..n_hashed)
 * the chained hashes of its full blocks, n_hashed = n_pos / block_size. A block is written only
 * when the sequence holds the one reference to it and it carries no prefix-cache hash.
 * llaisys_decode decides (counts blocks) before it commits, and undoes its commits when the
 * forward pass fails or is aborted, so every non-OK return leaves the sequences as they were.
 *
 * Threads: a model belongs to one caller thread at a time (llaisys.h); the runtime's pool
 * computes for it during the forward pass. Allocation happens at creation and when the logits
 * buffer must grow for more outputs than before.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api_impl.h"
#include "engine_opts.h"
#include "kv_pool.h"
#include "model.h"
#include "runtime.h"
#include "tokenizer.h"
#include "util.h"

struct seq {
    int32_t n_pos;    /* positions held: 0..n_pos-1 */
    int32_t n_blocks;
    int32_t n_hashed; /* full blocks with a known hash (n_pos / block_size) */
    int32_t *blocks;  /* (max_blocks) block table */
    int32_t *tokens;  /* (n_ctx) token of each position */
    uint64_t *hashes; /* (max_blocks) chained hash of each full block */
};

/* What one decode plans and commits for one sequence (undone on failure). */
struct seq_plan {
    int32_t n_rows;        /* rows of the batch in this sequence */
    int32_t start;         /* its n_pos before the decode */
    int32_t first_want;    /* offset of its first row that wants logits (INT32_MAX: none) */
    int32_t hits;          /* leading blocks taken from the prefix cache */
    int32_t old_n_blocks;
    bool cow;              /* it writes into a shared or cached partial block: copy it */
    int32_t cow_index;     /* block copied before writing, or -1 */
    int32_t cow_old;       /* the block it replaced (released on success) */
};

struct llaisys_model {
    struct model *model;
    struct tokenizer *tok;     /* NULL when the directory has no tokenizer.json */
    struct model_runtime *rt;
    struct kv_pool pool;
    int n_ctx, bs, n_seq_max, n_batch, max_blocks, vocab;
    bool prefix_cache;
    struct seq *seqs;          /* (n_seq_max) */
    struct ll_kv_seq *views;   /* (n_seq_max) block tables as the runtime reads them */
    struct seq_plan *plan;     /* (n_seq_max) */
    int32_t *touched;          /* (n_seq_max) sequences of the current batch */
    /* the current batch, (n_batch) each */
    int32_t *rpos, *rseq;      /* resolved position and sequence of each input row */
    uint8_t *rwant;
    int32_t *f_token, *f_pos, *f_seq; /* rows given to the forward pass */
    uint8_t *f_want;
    /* outputs of the last decode */
    float *logits;             /* (cap_out, vocab) */
    int32_t cap_out;
    int32_t n_outputs;
    int32_t *output_ids;       /* (n_batch) batch row of each output */
    int32_t *row_output;       /* (n_batch) output of each batch row, or -1 */
    int32_t n_rows_last;       /* rows of the last successful batch */
    llaisys_abort_fn abort_fn;
    void *abort_data;
    int64_t peak_used;         /* blocks */
    int64_t prefix_hit_tokens;
};

static int blocks_for(int n, int bs) { return (n + bs - 1) / bs; }

/* ---- create / destroy ---- */

struct llaisys_model_params llaisys_model_default_params(void)
{
    struct llaisys_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

void llaisys_model_destroy(llaisys_model *m)
{
    if (!m)
        return;
    for (int s = 0; m->seqs && s < m->n_seq_max; s++) {
        free(m->seqs[s].blocks);
        free(m->seqs[s].tokens);
        free(m->seqs[s].hashes);
    }
    free(m->seqs);
    free(m->views);
    free(m->plan);
    free(m->touched);
    free(m->rpos);
    free(m->rseq);
    free(m->rwant);
    free(m->f_token);
    free(m->f_pos);
    free(m->f_seq);
    free(m->f_want);
    free(m->logits);
    free(m->output_ids);
    free(m->row_output);
    kv_pool_free(&m->pool);
    runtime_free(m->rt);
    tokenizer_free(m->tok);
    model_close(m->model);
    free(m);
}

/* A parameter checked against the range of its engine option (engine_opts.h's table). */
static int32_t check_param(const char *name, int32_t v, enum engine_opt_id id)
{
    const struct engine_opt_def *d = &engine_opt_defs[id];
    if (v != 0 && (v < d->min || v > d->max))
        return api_fail(LLAISYS_ERR_INVALID_ARG,
                        "llaisys_model_params.%s must be 0 (the default) or from %lld to %lld "
                        "(got %d)", name, d->min, d->max, v);
    return LLAISYS_OK;
}

/* The params as engine options, checked; resolved against the model's configuration later. */
static int32_t params_to_opts(const struct llaisys_model_params *p, struct engine_opts *o)
{
    int32_t rc;
    if ((rc = check_param("n_ctx", p->n_ctx, ENGINE_OPT_CTX)) ||
        (rc = check_param("kv_blocks", p->kv_blocks, ENGINE_OPT_KV_BLOCKS)) ||
        (rc = check_param("block_size", p->block_size, ENGINE_OPT_BLOCK_SIZE)) ||
        (rc = check_param("n_seq_max", p->n_seq_max, ENGINE_OPT_MAX_SEQS)) ||
        (rc = check_param("n_batch", p->n_batch, ENGINE_OPT_MAX_BATCH_TOKENS)) ||
        (rc = check_param("n_threads", p->n_threads, ENGINE_OPT_THREADS)))
        return rc;
    if (p->kv_tokens < 0)
        return api_fail(LLAISYS_ERR_INVALID_ARG,
                        "llaisys_model_params.kv_tokens must be 0 (see kv_blocks) or positive "
                        "(got %d)", p->kv_tokens);
    if (p->math != LLAISYS_MATH_FAST && p->math != LLAISYS_MATH_EXACT)
        return api_fail(LLAISYS_ERR_INVALID_ARG,
                        "llaisys_model_params.math must be LLAISYS_MATH_FAST (0) or "
                        "LLAISYS_MATH_EXACT (1) (got %d)", p->math);
    memset(o, 0, sizeof *o);
    o->n_ctx = p->n_ctx;
    o->block_size = p->block_size;
    o->max_seqs = p->n_seq_max;
    o->max_batch_tokens = p->n_batch;
    o->n_threads = p->n_threads;
    o->exact = p->math == LLAISYS_MATH_EXACT;
    o->kv_blocks = p->kv_blocks;
    if (p->kv_tokens > 0) {
        int bs = p->block_size ? p->block_size : 16; /* engine_opts' default block size */
        long long blocks = ((long long)p->kv_tokens + bs - 1) / bs;
        if (blocks > engine_opt_defs[ENGINE_OPT_KV_BLOCKS].max)
            return api_fail(LLAISYS_ERR_INVALID_ARG,
                            "llaisys_model_params.kv_tokens %d is more than %lld blocks of %d",
                            p->kv_tokens, engine_opt_defs[ENGINE_OPT_KV_BLOCKS].max, bs);
        o->kv_blocks = (int)blocks;
    }
    long long slots = (long long)o->kv_blocks * (o->block_size ? o->block_size : 16);
    if (slots > (1LL << 30))
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_model_params: a KV cache of %lld "
                        "tokens is more than 2^30", slots);
    return LLAISYS_OK;
}

static bool file_exists(const char *dir, const char *name)
{
    char *p = ll_path_join(dir, name);
    struct stat sb;
    bool ok = p && stat(p, &sb) == 0;
    free(p);
    return ok;
}

int32_t llaisys_model_create(const char *model_dir, const struct llaisys_model_params *params,
                             llaisys_model **out)
{
    if (!out)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_model_create: out is NULL");
    *out = NULL;
    if (!model_dir)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_model_create: model_dir is NULL");
    struct llaisys_model_params p = params ? *params : llaisys_model_default_params();
    struct engine_opts o;
    int32_t rc = params_to_opts(&p, &o);
    if (rc)
        return rc;

    struct ll_err err = {0};
    enum ll_status s;
    llaisys_model *m = calloc(1, sizeof *m);
    if (!m)
        return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_model_create: out of memory");
    if ((s = model_open(&m->model, model_dir, NULL, &err)) != LL_OK)
        goto fail;
    engine_opts_resolve(&o, &m->model->config);
    if (o.kv_blocks < 1) {
        s = ll_err_set(&err, LL_EINVAL, "the KV cache needs at least one block");
        goto fail;
    }
    if (file_exists(model_dir, "tokenizer.json") &&
        (s = tokenizer_load(&m->tok, model_dir, &err)) != LL_OK)
        goto fail;
    m->n_ctx = o.n_ctx;
    m->bs = o.block_size;
    m->n_seq_max = o.max_seqs;
    m->n_batch = o.max_batch_tokens;
    m->max_blocks = blocks_for(o.n_ctx, o.block_size);
    m->vocab = m->model->config.vocab_size;
    m->prefix_cache = !o.no_prefix_cache;
    struct runtime_opts ro = engine_opts_runtime(&o);
    if ((s = runtime_create(&m->rt, m->model, &ro, &err)) != LL_OK ||
        (s = kv_pool_init(&m->pool, o.kv_blocks, o.block_size, &err)) != LL_OK)
        goto fail;
    size_t S = (size_t)m->n_seq_max, B = (size_t)m->n_batch;
    m->seqs = calloc(S, sizeof *m->seqs);
    m->views = calloc(S, sizeof *m->views);
    m->plan = calloc(S, sizeof *m->plan);
    m->touched = malloc(S * sizeof *m->touched);
    m->rpos = malloc(B * sizeof(int32_t));
    m->rseq = malloc(B * sizeof(int32_t));
    m->rwant = malloc(B);
    m->f_token = malloc(B * sizeof(int32_t));
    m->f_pos = malloc(B * sizeof(int32_t));
    m->f_seq = malloc(B * sizeof(int32_t));
    m->f_want = malloc(B);
    m->output_ids = malloc(B * sizeof(int32_t));
    m->row_output = malloc(B * sizeof(int32_t));
    bool ok = m->seqs && m->views && m->plan && m->touched && m->rpos && m->rseq && m->rwant &&
              m->f_token && m->f_pos && m->f_seq && m->f_want && m->output_ids && m->row_output;
    for (size_t i = 0; ok && i < S; i++) {
        struct seq *q = &m->seqs[i];
        q->blocks = malloc(sizeof(int32_t) * (size_t)m->max_blocks);
        q->tokens = malloc(sizeof(int32_t) * (size_t)m->n_ctx);
        q->hashes = malloc(sizeof(uint64_t) * (size_t)m->max_blocks);
        ok = q->blocks && q->tokens && q->hashes;
        m->views[i] = (struct ll_kv_seq){q->blocks, 0};
    }
    if (!ok) {
        s = ll_err_set(&err, LL_ENOMEM, "out of memory for %d sequences of %d positions",
                       m->n_seq_max, m->n_ctx);
        goto fail;
    }
    *out = m;
    return LLAISYS_OK;
fail:
    llaisys_model_destroy(m);
    return api_status(s, &err);
}

/* ---- properties, tokenizer ---- */

const char *llaisys_model_type(const llaisys_model *m)
{
    return m ? m->model->config.model_type : "";
}

int32_t llaisys_model_n_vocab(const llaisys_model *m) { return m ? m->vocab : 0; }
int32_t llaisys_model_n_ctx(const llaisys_model *m) { return m ? m->n_ctx : 0; }
int32_t llaisys_model_n_seq_max(const llaisys_model *m) { return m ? m->n_seq_max : 0; }
int32_t llaisys_model_n_batch(const llaisys_model *m) { return m ? m->n_batch : 0; }

bool llaisys_model_is_eos(const llaisys_model *m, int32_t token)
{
    if (!m)
        return false;
    const struct model_config *c = &m->model->config;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == token)
            return true;
    return false;
}

int32_t llaisys_model_tokenize(const llaisys_model *m, const char *text, size_t len,
                               bool add_special, int32_t *out, int32_t cap)
{
    if (!m || !text || (cap > 0 && !out) || cap < 0)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_model_tokenize: NULL argument or "
                        "negative capacity");
    if (!m->tok)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "%s has no tokenizer.json", m->model->dir);
    struct ll_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    enum ll_status s = tokenizer_encode(m->tok, text, len, add_special, &ids, &n, &err);
    if (s != LL_OK)
        return api_status(s, &err);
    if (n > INT32_MAX) {
        free(ids);
        return api_fail(LLAISYS_ERR_TOO_LONG, "the text encodes to more than 2^31 tokens");
    }
    if (n && cap)
        memcpy(out, ids, sizeof(int32_t) * (n < (size_t)cap ? n : (size_t)cap));
    free(ids);
    return (int32_t)n;
}

char *llaisys_model_detokenize(const llaisys_model *m, const int32_t *ids, int32_t n_ids,
                               bool skip_special)
{
    if (!m || (n_ids > 0 && !ids) || n_ids < 0) {
        api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_model_detokenize: NULL argument or negative "
                 "count");
        return NULL;
    }
    if (!m->tok) {
        api_fail(LLAISYS_ERR_INVALID_ARG, "%s has no tokenizer.json", m->model->dir);
        return NULL;
    }
    for (int32_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= m->vocab) {
            api_fail(LLAISYS_ERR_INVALID_TOKEN, "id %d (item %d) is outside the vocabulary "
                     "(0..%d)", ids[i], i, m->vocab - 1);
            return NULL;
        }
    struct ll_err err = {0};
    char *text = NULL;
    enum ll_status s = tokenizer_decode(m->tok, ids, (size_t)n_ids, skip_special, &text, NULL,
                                        &err);
    if (s != LL_OK) {
        api_status(s, &err);
        return NULL;
    }
    return text;
}

/* ---- batches ---- */

struct llaisys_batch llaisys_batch_init(int32_t n_tokens_max)
{
    struct llaisys_batch b;
    memset(&b, 0, sizeof b);
    if (n_tokens_max < 1) {
        api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_batch_init: %d tokens", n_tokens_max);
        return b;
    }
    size_t n = (size_t)n_tokens_max;
    b.token = calloc(n, sizeof *b.token);
    b.pos = malloc(n * sizeof *b.pos);
    b.seq_id = calloc(n, sizeof *b.seq_id);
    b.logits = calloc(n, sizeof *b.logits);
    if (!b.token || !b.pos || !b.seq_id || !b.logits) {
        llaisys_batch_free(b);
        memset(&b, 0, sizeof b);
        api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_batch_init: out of memory for %d tokens",
                 n_tokens_max);
        return b;
    }
    for (size_t i = 0; i < n; i++)
        b.pos[i] = -1;
    return b;
}

struct llaisys_batch llaisys_batch_get_one(int32_t *tokens, int32_t n_tokens)
{
    struct llaisys_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n_tokens;
    b.token = tokens;
    return b;
}

void llaisys_batch_free(struct llaisys_batch b)
{
    free(b.token);
    free(b.pos);
    free(b.seq_id);
    free(b.logits);
}

void llaisys_model_set_abort_callback(llaisys_model *m, llaisys_abort_fn fn, void *data)
{
    if (!m)
        return;
    m->abort_fn = fn;
    m->abort_data = fn ? data : NULL;
}

/* ---- sequences ---- */

/* Drop positions n..n_pos-1 of q (n <= n_pos): blocks past ceil(n / bs) go back to the pool. */
static void seq_truncate(llaisys_model *m, struct seq *q, int n)
{
    int keep = blocks_for(n, m->bs);
    if (q->n_blocks > keep)
        kv_pool_release_table(&m->pool, q->blocks + keep, q->n_blocks - keep);
    q->n_blocks = keep < q->n_blocks ? keep : q->n_blocks;
    q->n_pos = n;
    if (q->n_hashed > n / m->bs)
        q->n_hashed = n / m->bs;
}

/* Copy the K/V of slots [0, n) of block `from` into block `to`, every layer. */
static void copy_block(llaisys_model *m, int to, int from, int n)
{
    const struct ll_kv_cache *kv = &m->rt->kv;
    size_t row = (size_t)kv->n_kv_heads * (size_t)kv->head_dim * ll_dtype_size(kv->dtype);
    for (int l = 0; l < kv->n_layers; l++) {
        size_t base = (size_t)l * (size_t)kv->n_slots;
        size_t dst = (base + (size_t)to * m->bs) * row, src = (base + (size_t)from * m->bs) * row;
        memcpy((char *)kv->k + dst, (char *)kv->k + src, (size_t)n * row);
        memcpy((char *)kv->v + dst, (char *)kv->v + src, (size_t)n * row);
    }
}

static int64_t used_blocks(const llaisys_model *m)
{
    return (int64_t)m->pool.n_blocks - kv_pool_n_free(&m->pool);
}

/* ---- decode ---- */

/* Undo the block commits of the planned sequences (after a failed forward pass). */
static void undo_plans(llaisys_model *m, int n_touched)
{
    for (int k = 0; k < n_touched; k++) {
        struct seq *q = &m->seqs[m->touched[k]];
        struct seq_plan *pl = &m->plan[m->touched[k]];
        if (pl->cow_index >= 0) {
            kv_pool_release(&m->pool, q->blocks[pl->cow_index]);
            q->blocks[pl->cow_index] = pl->cow_old;
            pl->cow_index = -1;
        }
        if (q->n_blocks > pl->old_n_blocks)
            kv_pool_release_table(&m->pool, q->blocks + pl->old_n_blocks,
                                  q->n_blocks - pl->old_n_blocks);
        q->n_blocks = pl->old_n_blocks;
    }
}

/* Check every row, resolve positions, and write the tokens past each sequence's end (not yet
 * committed). Returns LLAISYS_OK or a negative status with its message. */
static int32_t decode_check(llaisys_model *m, const struct llaisys_batch *b, int *n_touched)
{
    int n = b->n_tokens, nt = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = b->token[i], s = b->seq_id ? b->seq_id[i] : 0;
        if (t < 0 || t >= m->vocab)
            return api_fail(LLAISYS_ERR_INVALID_TOKEN,
                            "batch row %d: token id %d is outside the vocabulary (0..%d)", i, t,
                            m->vocab - 1);
        if (s < 0 || s >= m->n_seq_max)
            return api_fail(LLAISYS_ERR_INVALID_SEQ,
                            "batch row %d: sequence %d is outside 0..%d (n_seq_max %d)", i, s,
                            m->n_seq_max - 1, m->n_seq_max);
        struct seq_plan *pl = &m->plan[s];
        if (pl->n_rows == 0) {
            m->touched[nt++] = s;
            *pl = (struct seq_plan){.start = m->seqs[s].n_pos, .first_want = INT32_MAX,
                                    .old_n_blocks = m->seqs[s].n_blocks, .cow_index = -1};
        }
        int32_t expect = pl->start + pl->n_rows, p = b->pos ? b->pos[i] : -1;
        *n_touched = nt;
        if (p == -1)
            p = expect;
        else if (p < -1)
            return api_fail(LLAISYS_ERR_INVALID_POS, "batch row %d: position %d is negative", i,
                            p);
        else if (p != expect)
            return api_fail(LLAISYS_ERR_INVALID_POS,
                            "batch row %d: position %d, but the next position of sequence %d is "
                            "%d (positions of a sequence must be contiguous)", i, p, s, expect);
        if (p >= m->n_ctx)
            return api_fail(LLAISYS_ERR_INVALID_POS,
                            "batch row %d: position %d of sequence %d is past the context "
                            "(n_ctx %d)", i, p, s, m->n_ctx);
        m->rpos[i] = p;
        m->rseq[i] = s;
        m->rwant[i] = b->logits ? b->logits[i] != 0 : i == n - 1;
        if (m->rwant[i] && pl->first_want == INT32_MAX)
            pl->first_want = pl->n_rows;
        m->seqs[s].tokens[p] = t;
        pl->n_rows++;
    }
    return LLAISYS_OK;
}

/* Take the leading full blocks of sequence s's new rows from the prefix cache (rows that want
 * no logits only; the sequence must end on a block boundary). References are taken here;
 * undo_plans gives them back. */
static void decode_prefix_hits(llaisys_model *m, int s)
{
    struct seq *q = &m->seqs[s];
    struct seq_plan *pl = &m->plan[s];
    int bs = m->bs;
    if (!m->prefix_cache || pl->start % bs || q->n_hashed != pl->start / bs)
        return;
    int limit = pl->first_want < pl->n_rows ? pl->first_want : pl->n_rows;
    for (int k = pl->start / bs; (k + 1) * bs <= pl->start + limit; k++) {
        uint64_t parent = k ? q->hashes[k - 1] : 0;
        q->hashes[k] = kv_pool_hash_block(parent, q->tokens + (size_t)k * bs, bs);
        int blk = kv_pool_lookup(&m->pool, q->hashes[k], parent, q->tokens + (size_t)k * bs);
        if (blk < 0)
            break;
        kv_pool_ref(&m->pool, blk);
        q->blocks[q->n_blocks++] = blk;
        pl->hits++;
    }
}

/* Blocks the sequence still needs beyond its hits: a copy of a shared or cached partial block
 * it writes into, and new blocks up to its new end. */
static int decode_blocks_needed(llaisys_model *m, int s)
{
    const struct seq *q = &m->seqs[s];
    struct seq_plan *pl = &m->plan[s];
    int from = pl->start + pl->hits * m->bs, end = pl->start + pl->n_rows;
    pl->cow = false;
    if (from < end && from % m->bs) {
        int blk = q->blocks[from / m->bs];
        pl->cow = m->pool.ref[blk] > 1 || m->pool.hashed[blk];
    }
    return blocks_for(end, m->bs) - q->n_blocks + (pl->cow ? 1 : 0);
}

/* After a successful forward pass: advance the sequences, release copied-from blocks, publish
 * the new full blocks in the prefix cache. */
static void decode_commit(llaisys_model *m, int n_touched)
{
    int bs = m->bs;
    for (int k = 0; k < n_touched; k++) {
        int s = m->touched[k];
        struct seq *q = &m->seqs[s];
        struct seq_plan *pl = &m->plan[s];
        if (pl->cow_index >= 0)
            kv_pool_release(&m->pool, pl->cow_old);
        q->n_pos = pl->start + pl->n_rows;
        m->prefix_hit_tokens += (int64_t)pl->hits * bs;
        for (int i = q->n_hashed; i < q->n_pos / bs; i++) {
            uint64_t parent = i ? q->hashes[i - 1] : 0;
            q->hashes[i] = kv_pool_hash_block(parent, q->tokens + (size_t)i * bs, bs);
            if (m->prefix_cache)
                kv_pool_publish(&m->pool, q->blocks[i], q->hashes[i], parent,
                                q->tokens + (size_t)i * bs);
        }
        q->n_hashed = q->n_pos / bs;
        pl->n_rows = 0;
    }
    int64_t used = used_blocks(m);
    if (used > m->peak_used)
        m->peak_used = used;
}

static void clear_plans(llaisys_model *m, int n_touched)
{
    for (int k = 0; k < n_touched; k++)
        m->plan[m->touched[k]].n_rows = 0;
}

int32_t llaisys_decode(llaisys_model *m, const struct llaisys_batch *b)
{
    if (!m || !b)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_decode: NULL %s", m ? "batch" : "model");
    m->n_outputs = 0;
    m->n_rows_last = 0;
    if (b->n_tokens < 1 || b->n_tokens > m->n_batch)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_decode: a batch of %d tokens (must be "
                        "1..%d, n_batch)", b->n_tokens, m->n_batch);
    if (!b->token)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_decode: batch.token is NULL");
    int n_touched = 0;
    int32_t rc = decode_check(m, b, &n_touched);
    if (rc) {
        clear_plans(m, n_touched);
        return rc;
    }

    /* decide: prefix hits (references taken), then the blocks still needed */
    int need = 0;
    for (int k = 0; k < n_touched; k++)
        decode_prefix_hits(m, m->touched[k]);
    for (int k = 0; k < n_touched; k++)
        need += decode_blocks_needed(m, m->touched[k]);
    int n_out = 0;
    for (int i = 0; i < b->n_tokens; i++)
        n_out += m->rwant[i];
    if (need > kv_pool_n_free(&m->pool)) {
        undo_plans(m, n_touched);
        clear_plans(m, n_touched);
        return LLAISYS_NO_KV_ROOM;
    }
    if (n_out > m->cap_out) {
        float *l = realloc(m->logits, sizeof(float) * (size_t)n_out * (size_t)m->vocab);
        if (!l) {
            undo_plans(m, n_touched);
            clear_plans(m, n_touched);
            return api_fail(LLAISYS_ERR_NO_MEMORY, "llaisys_decode: out of memory for %d rows "
                            "of logits", n_out);
        }
        m->logits = l;
        m->cap_out = n_out;
    }

    /* commit the blocks: copies of shared partial blocks, then new blocks */
    for (int k = 0; k < n_touched; k++) {
        int s = m->touched[k];
        struct seq *q = &m->seqs[s];
        struct seq_plan *pl = &m->plan[s];
        int end = pl->start + pl->n_rows;
        if (pl->cow) {
            int from = pl->start + pl->hits * m->bs, idx = from / m->bs;
            int nb = kv_pool_alloc(&m->pool);
            LL_ASSERT(nb >= 0);
            copy_block(m, nb, q->blocks[idx], from % m->bs);
            pl->cow_index = idx;
            pl->cow_old = q->blocks[idx];
            q->blocks[idx] = nb;
        }
        while (q->n_blocks < blocks_for(end, m->bs)) {
            int nb = kv_pool_alloc(&m->pool);
            LL_ASSERT(nb >= 0);
            q->blocks[q->n_blocks++] = nb;
        }
        m->views[s] = (struct ll_kv_seq){q->blocks, q->n_blocks};
    }

    /* the rows to compute: all but those served by prefix hits (none of which wants logits) */
    int nf = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        const struct seq_plan *pl = &m->plan[m->rseq[i]];
        m->row_output[i] = -1;
        if (m->rpos[i] - pl->start < pl->hits * m->bs)
            continue;
        m->f_token[nf] = b->token[i];
        m->f_pos[nf] = m->rpos[i];
        m->f_seq[nf] = m->rseq[i];
        m->f_want[nf] = m->rwant[i];
        nf++;
    }
    if (nf > 0) {
        struct ll_batch fb = {
            .n_tokens = nf, .token = m->f_token, .pos = m->f_pos, .seq = m->f_seq,
            .want_logits = m->f_want, .seqs = m->views, .n_seqs = m->n_seq_max,
            .abort_cb = m->abort_fn, .abort_data = m->abort_data,
        };
        struct ll_err err = {0};
        enum ll_status s = runtime_forward(m->rt, &fb, m->logits, &err);
        if (s != LL_OK) {
            undo_plans(m, n_touched);
            clear_plans(m, n_touched);
            if (s == LL_EABORTED)
                return LLAISYS_ABORTED;
            return api_fail(LLAISYS_ERR_INTERNAL, "llaisys_decode: forward pass: %s", err.msg);
        }
    }
    decode_commit(m, n_touched);
    int o = 0;
    for (int i = 0; i < b->n_tokens; i++)
        if (m->rwant[i]) {
            m->row_output[i] = o;
            m->output_ids[o++] = i;
        }
    m->n_outputs = o;
    m->n_rows_last = b->n_tokens;
    return LLAISYS_OK;
}

float *llaisys_get_logits(llaisys_model *m)
{
    return m && m->n_outputs ? m->logits : NULL;
}

float *llaisys_get_logits_ith(llaisys_model *m, int32_t i)
{
    if (!m || !m->n_outputs) {
        api_fail(LLAISYS_ERR_INVALID_ARG, "no logits: the last decode produced none");
        return NULL;
    }
    int o;
    if (i < 0) {
        o = m->n_outputs + i;
        if (o < 0) {
            api_fail(LLAISYS_ERR_INVALID_ARG, "logits %d: the last decode has %d outputs", i,
                     m->n_outputs);
            return NULL;
        }
    } else {
        if (i >= m->n_rows_last || m->row_output[i] < 0) {
            api_fail(LLAISYS_ERR_INVALID_ARG, "batch row %d did not ask for logits (the last "
                     "batch had %d rows)", i, m->n_rows_last);
            return NULL;
        }
        o = m->row_output[i];
    }
    return m->logits + (size_t)o * (size_t)m->vocab;
}

int32_t llaisys_n_outputs(const llaisys_model *m) { return m ? m->n_outputs : 0; }

const int32_t *llaisys_output_ids(const llaisys_model *m)
{
    return m && m->n_outputs ? m->output_ids : NULL;
}

/* ---- KV sequence operations ---- */

/* Check seq (allow_all: -1 is every sequence) and p0, p1; [*a, *b) is the closed-form range. */
static int32_t kv_args(const llaisys_model *m, const char *fn, int32_t seq, bool allow_all,
                       int32_t p0, int32_t p1, int32_t *a, int32_t *b)
{
    if (!m)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "%s: the model is NULL", fn);
    if (seq < (allow_all ? -1 : 0) || seq >= m->n_seq_max)
        return api_fail(LLAISYS_ERR_INVALID_SEQ, "%s: sequence %d is outside %s0..%d", fn, seq,
                        allow_all ? "-1 (all) and " : "", m->n_seq_max - 1);
    if (p0 < -1 || p1 < -1)
        return api_fail(LLAISYS_ERR_INVALID_POS, "%s: range [%d, %d): positions are >= 0 or -1 "
                        "(open)", fn, p0, p1);
    *a = p0 < 0 ? 0 : p0;
    *b = p1 < 0 ? INT32_MAX : p1;
    return LLAISYS_OK;
}

int32_t llaisys_kv_seq_rm(llaisys_model *m, int32_t seq, int32_t p0, int32_t p1)
{
    int32_t a = 0, b = 0, rc = kv_args(m, "llaisys_kv_seq_rm", seq, true, p0, p1, &a, &b);
    if (rc)
        return rc;
    int lo = seq < 0 ? 0 : seq, hi = seq < 0 ? m->n_seq_max : seq + 1;
    /* check every sequence first: all or nothing */
    bool any = false;
    for (int s = lo; s < hi; s++) {
        const struct seq *q = &m->seqs[s];
        if (a >= b || a >= q->n_pos)
            continue;
        if (b < q->n_pos)
            return api_fail(LLAISYS_ERR_INVALID_POS,
                            "llaisys_kv_seq_rm: removing [%d, %d) of sequence %d (positions 0..%d)"
                            " would leave a hole; the paged cache removes a sequence's tail "
                            "[p0, end) or all of it", a, b, s, q->n_pos - 1);
        any = true;
    }
    if (!any)
        return LLAISYS_EMPTY_RANGE;
    for (int s = lo; s < hi; s++)
        if (a < b && a < m->seqs[s].n_pos)
            seq_truncate(m, &m->seqs[s], a);
    return LLAISYS_OK;
}

int32_t llaisys_kv_seq_cp(llaisys_model *m, int32_t src, int32_t dst, int32_t p0, int32_t p1)
{
    int32_t a = 0, b = 0, rc = kv_args(m, "llaisys_kv_seq_cp", src, false, p0, p1, &a, &b);
    if (rc)
        return rc;
    if (dst < 0 || dst >= m->n_seq_max)
        return api_fail(LLAISYS_ERR_INVALID_SEQ, "llaisys_kv_seq_cp: destination sequence %d is "
                        "outside 0..%d", dst, m->n_seq_max - 1);
    if (a != 0)
        return api_fail(LLAISYS_ERR_INVALID_POS, "llaisys_kv_seq_cp: a copy starts at position 0 "
                        "(p0 0 or -1), got %d", p0);
    struct seq *s = &m->seqs[src], *d = &m->seqs[dst];
    int n = b < s->n_pos ? b : s->n_pos;
    if (n == 0)
        return LLAISYS_EMPTY_RANGE;
    if (src == dst) {
        if (n < s->n_pos)
            seq_truncate(m, s, n);
        return LLAISYS_OK;
    }
    seq_truncate(m, d, 0);
    int nb = blocks_for(n, m->bs);
    for (int k = 0; k < nb; k++) {
        kv_pool_ref(&m->pool, s->blocks[k]);
        d->blocks[k] = s->blocks[k];
    }
    d->n_blocks = nb;
    d->n_pos = n;
    memcpy(d->tokens, s->tokens, sizeof(int32_t) * (size_t)n);
    d->n_hashed = n / m->bs < s->n_hashed ? n / m->bs : s->n_hashed;
    memcpy(d->hashes, s->hashes, sizeof(uint64_t) * (size_t)d->n_hashed);
    return LLAISYS_OK;
}

int32_t llaisys_kv_seq_keep(llaisys_model *m, int32_t seq)
{
    int32_t a = 0, b = 0, rc = kv_args(m, "llaisys_kv_seq_keep", seq, false, -1, -1, &a, &b);
    if (rc)
        return rc;
    for (int s = 0; s < m->n_seq_max; s++)
        if (s != seq && m->seqs[s].n_pos)
            seq_truncate(m, &m->seqs[s], 0);
    return LLAISYS_OK;
}

int32_t llaisys_kv_seq_pos_max(const llaisys_model *m, int32_t seq, int32_t *pos_max)
{
    if (!pos_max)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_kv_seq_pos_max: pos_max is NULL");
    int32_t a = 0, b = 0, rc = kv_args(m, "llaisys_kv_seq_pos_max", seq, false, -1, -1, &a, &b);
    if (rc)
        return rc;
    *pos_max = m->seqs[seq].n_pos - 1;
    return LLAISYS_OK;
}

int32_t llaisys_kv_seq_add(llaisys_model *m, int32_t seq, int32_t p0, int32_t p1, int32_t delta)
{
    int32_t a = 0, b = 0, rc = kv_args(m, "llaisys_kv_seq_add", seq, false, p0, p1, &a, &b);
    if (rc)
        return rc;
    if (delta == 0)
        return LLAISYS_OK;
    if (a >= b || a >= m->seqs[seq].n_pos)
        return LLAISYS_EMPTY_RANGE;
    return api_fail(LLAISYS_ERR_UNSUPPORTED,
                    "llaisys_kv_seq_add: shifting positions is not supported (K is cached after "
                    "RoPE and a sequence cannot have holes); remove the tail with "
                    "llaisys_kv_seq_rm and decode it again at its new positions");
}

int32_t llaisys_kv_stats(const llaisys_model *m, struct llaisys_kv_stats *out)
{
    if (!m || !out)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_kv_stats: NULL argument");
    struct kv_pool_stats ps;
    kv_pool_get_stats(&m->pool, &ps);
    int64_t bs = m->bs, seq_tokens = 0;
    for (int s = 0; s < m->n_seq_max; s++)
        seq_tokens += m->seqs[s].n_pos;
    *out = (struct llaisys_kv_stats){
        .capacity = (int64_t)ps.total * bs,
        .used = (int64_t)ps.in_use * bs,
        .free = (int64_t)(ps.total - ps.in_use) * bs,
        .peak_used = m->peak_used * bs,
        .cached = (int64_t)ps.cached * bs,
        .seq_tokens = seq_tokens,
        .prefix_hits = m->prefix_hit_tokens,
        .block_size = m->bs,
        .n_blocks = ps.total,
    };
    return LLAISYS_OK;
}

int32_t llaisys_kv_reset_prefix_cache(llaisys_model *m)
{
    if (!m)
        return api_fail(LLAISYS_ERR_INVALID_ARG, "llaisys_kv_reset_prefix_cache: NULL model");
    int64_t used = used_blocks(m);
    if (used > 0)
        return api_fail(LLAISYS_ERR_BUSY, "llaisys_kv_reset_prefix_cache: %lld blocks are held "
                        "by sequences; remove them first (llaisys_kv_seq_rm(m, -1, -1, -1))",
                        (long long)used);
    kv_pool_reset(&m->pool);
    return LLAISYS_OK;
}
