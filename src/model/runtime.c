/*
 * runtime.c: the family-independent face of the forward pass (see runtime.h): option defaults
 * (n_ctx is the caller's: engine_opts_resolve picks the default context) and dispatch to
 * m->family. Called by the thread that owns the runtime.
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
        o->n_threads = LL_POOL_DEFAULT_THREADS;
}

enum ll_status runtime_create(struct model_runtime **out, const struct model *m,
                              const struct runtime_opts *opts, struct ll_err *err)
{
    *out = NULL;
    if (!m->family || !m->family->runtime_create)
        return ll_err_set(err, LL_EUNSUPPORTED, "model family '%s' has no forward pass",
                          m->config.model_type);
    return m->family->runtime_create(out, m, opts, err);
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
