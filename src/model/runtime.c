/*
 * runtime.c: the family-independent face of the forward pass (see runtime.h): option defaults
 * (n_ctx is the caller's: engine_opts_resolve picks the default context), the batch checks every
 * family shares, and dispatch to m->family. Called by the thread that owns the runtime.
 */
#include "runtime.h"

#include "model_registry.h"

void runtime_opts_resolve(struct runtime_opts *o)
{
    if (o->n_slots <= 0)
        o->n_slots = o->n_ctx;
    if (o->block_size <= 0)
        o->block_size = o->n_slots;
    if (o->max_batch <= 0)
        o->max_batch = 512;
    if (o->n_threads <= 0)
        o->n_threads = ll_pool_default_threads();
}

enum ll_status runtime_create(struct model_runtime **out, const struct model *m,
                              const struct runtime_opts *opts, struct ll_err *err)
{
    *out = NULL;
    if (!m->family || !m->family->runtime_create)
        return ll_err_set(err, LL_EUNSUPPORTED, "model family '%s' has no forward pass",
                          m->config.model_type);
    enum ll_status s = m->family->runtime_create(out, m, opts, err);
    if (s == LL_OK)
        ll_pool_set_adaptive((*out)->pool, !opts->fixed_threads);
    return s;
}

void runtime_free(struct model_runtime *rt)
{
    if (rt)
        rt->model->family->runtime_free(rt);
}

enum ll_status runtime_forward(struct model_runtime *rt, const struct ll_batch *b, float *logits,
                               struct ll_err *err)
{
    return rt->model->family->forward(rt, b, logits, err);
}

enum ll_status runtime_batch_resolve(const struct model_runtime *rt, const struct ll_batch *b,
                                     const struct ll_kv_seq *seq0, int32_t *slot, int32_t *seqi,
                                     int32_t *rows, struct runtime_rows *out,
                                     struct ll_err *err)
{
    const struct runtime_opts *o = &rt->opts;
    int vocab = rt->model->config.vocab_size;
    if (b->n_tokens < 1 || b->n_tokens > o->max_batch)
        return ll_err_set(err, LL_EINVAL, "batch of %d tokens (must be 1..%d)", b->n_tokens,
                          o->max_batch);
    const struct ll_kv_seq *seqs = b->seqs ? b->seqs : seq0;
    int n_seqs = b->seqs ? b->n_seqs : 1;
    int bs = o->block_size, nblk_phys = o->n_slots / bs, n_want = 0, n_hidden = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int t = b->token[i], p = b->pos[i], sq = b->seq ? b->seq[i] : 0;
        if (t < 0 || t >= vocab)
            return ll_err_set(err, LL_EINVAL,
                              "batch row %d: token id %d outside the vocabulary (%d)", i, t,
                              vocab);
        if (p < 0 || p >= o->n_ctx)
            return ll_err_set(err, p < 0 ? LL_EINVAL : LL_ETOOLONG,
                              "batch row %d: position %d outside the context (0..%d)", i, p,
                              o->n_ctx - 1);
        if (sq < 0 || sq >= n_seqs)
            return ll_err_set(err, LL_EINVAL, "batch row %d: sequence %d of %d", i, sq, n_seqs);
        const struct ll_kv_seq *s = &seqs[sq];
        if (p / bs >= s->n_blocks)
            return ll_err_set(err, LL_ETOOLONG,
                              "batch row %d: position %d past the sequence's %d KV blocks of %d",
                              i, p, s->n_blocks, bs);
        for (int k = 0; k <= p / bs; k++)
            if (s->block_table[k] < 0 || s->block_table[k] >= nblk_phys)
                return ll_err_set(err, LL_EINVAL,
                                  "batch row %d: block %d of sequence %d is %d (cache has %d)", i,
                                  k, sq, s->block_table[k], nblk_phys);
        int sl = s->block_table[p / bs] * bs + p % bs;
        if (b->slot && b->slot[i] != sl)
            return ll_err_set(err, LL_EINVAL,
                              "batch row %d: slot %d but the block table gives %d", i,
                              b->slot[i], sl);
        slot[i] = sl;
        seqi[i] = sq;
        bool want = b->want_logits ? b->want_logits[i] != 0 : i == b->n_tokens - 1;
        if (want)
            rows[n_want++] = i;
        if (want && b->want_logits && b->want_logits[i] == LL_WANT_HIDDEN) {
            if (!b->hidden)
                return ll_err_set(err, LL_EINVAL, "batch row %d wants its hidden state, but the "
                                  "batch has no hidden buffer", i);
            n_hidden++;
        } else if (want && rt->model->no_lm_head) {
            return ll_err_set(err, LL_EUNSUPPORTED, "batch row %d wants logits, but the model "
                              "has no lm_head (an embedding model: hidden states only)", i);
        }
    }
    *out = (struct runtime_rows){seqs, n_seqs, n_want, n_hidden};
    return LL_OK;
}
