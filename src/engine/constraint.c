/*
 * constraint.c: a request's grammar in the sampling path (engine_params.grammar): the token
 * mask applied after the logit processors and before the sampler, and the grammar state
 * advanced by each sampled token (see engine.h, "Constrained decoding").
 *
 * Scheduler thread only. The engine keeps one matcher (grammar_rt.c) per distinct grammar in
 * use, shared by every request whose grammar is equal, so that states, transitions and masks
 * computed for one stream serve all of them; the token trie is built on the first constrained
 * request. Matchers no request uses are kept (their caches warm) up to CONSTRAINT_KEEP, then
 * freed oldest first.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"

#define CONSTRAINT_KEEP 8

struct constraint_rt {
    struct grammar_rt *rt;
    int users;       /* running or waiting requests attached */
    uint64_t last;   /* step of the last attach */
};

/* Attach r to a matcher for its grammar (found or made). false: out of memory (msg set). */
static bool attach(struct engine *e, struct engine_req *r, char *msg, size_t cap)
{
    struct ll_err err = {0};
    if (!e->trie && token_trie_build(&e->trie, e->tok, e->vocab, &err) != LL_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return false;
    }
    for (int i = 0; i < e->n_crt; i++) {
        if (grammar_equal(grammar_rt_grammar(e->crt[i].rt), r->grammar)) {
            e->crt[i].users++;
            e->crt[i].last = e->step_no;
            r->grt = e->crt[i].rt;
            break;
        }
    }
    if (!r->grt) {
        /* room: drop the least recently used idle matchers beyond the limit */
        while (e->n_crt >= CONSTRAINT_KEEP) {
            int old = -1;
            for (int i = 0; i < e->n_crt; i++)
                if (!e->crt[i].users && (old < 0 || e->crt[i].last < e->crt[old].last))
                    old = i;
            if (old < 0)
                break;
            grammar_rt_free(e->crt[old].rt);
            e->crt[old] = e->crt[--e->n_crt];
        }
        if (e->n_crt == e->cap_crt) {
            int n = e->cap_crt ? 2 * e->cap_crt : 8;
            struct constraint_rt *c = realloc(e->crt, sizeof *c * (size_t)n);
            if (!c) {
                snprintf(msg, cap, "out of memory for a grammar");
                return false;
            }
            e->crt = c;
            e->cap_crt = n;
        }
        struct grammar_rt *rt;
        if (grammar_rt_new(&rt, r->grammar, e->trie, &err) != LL_OK) {
            snprintf(msg, cap, "%s", err.msg);
            return false;
        }
        e->crt[e->n_crt++] = (struct constraint_rt){rt, 1, e->step_no};
        r->grt = rt;
    }
    r->gstate = grammar_rt_start(r->grt);
    if (r->gstate < 0) {
        snprintf(msg, cap, "%s", grammar_rt_error(r->grt));
        return false;
    }
    return true;
}

void constraint_release(struct engine *e, struct engine_req *r)
{
    if (!r->grt)
        return;
    for (int i = 0; i < e->n_crt; i++)
        if (e->crt[i].rt == r->grt)
            e->crt[i].users--;
    r->grt = NULL;
}

void constraint_free_all(struct engine *e)
{
    for (int i = 0; i < e->n_crt; i++)
        grammar_rt_free(e->crt[i].rt);
    free(e->crt);
    e->crt = NULL;
    e->n_crt = e->cap_crt = 0;
    token_trie_free(e->trie);
    e->trie = NULL;
}

bool constraint_mask(struct engine *e, struct engine_req *r, float *row, char *msg, size_t cap)
{
    if (!r->grt && !attach(e, r, msg, cap))
        return false;
    int32_t ends[2 * LL_MAX_EOS + ENGINE_MAX_STOP_IDS];
    int n = 0;
    if (!r->params.ignore_eos)
        for (int i = 0; i < e->n_eos; i++)
            ends[n++] = e->eos[i];
    for (int i = 0; i < r->params.n_stop_ids; i++)
        ends[n++] = r->stop_ids[i];
    float kept[ENGINE_MAX_KEEP_IDS];
    for (int i = 0; i < r->params.n_keep_ids; i++)
        kept[i] = row[r->keep_ids[i]];
    int budget = r->max_len - r->n_tokens;
    int allowed = grammar_rt_mask(r->grt, r->gstate, row, ends, n, budget);
    if (allowed == -2) {
        snprintf(msg, cap, "%s", grammar_rt_error(r->grt));
        return false;
    }
    /* Kept special tokens are not in the trie (special tokens are not text): each is allowed
     * where its text is, so the model can write a marker such as [TOOL_CALLS] as it was
     * trained to, in one token, rather than spelled out in pieces. */
    for (int i = 0; i < r->params.n_keep_ids; i++) {
        int32_t id = r->keep_ids[i];
        size_t len = 0;
        const char *s = tokenizer_id_bytes(e->tok, id, &len);
        if (!s || !len || row[id] != -INFINITY || kept[i] == -INFINITY)
            continue;
        int st = grammar_rt_advance(r->grt, r->gstate, s, len);
        if (st == -2) {
            snprintf(msg, cap, "%s", grammar_rt_error(r->grt));
            return false;
        }
        if (st >= 0 && (budget <= 0 || grammar_rt_cost(r->grt, st) <= budget - 1)) {
            row[id] = kept[i];
            allowed++;
        }
    }
    if (allowed == 0) {
        snprintf(msg, cap, "grammar: no token can continue the output here");
        return false;
    }
    return true;
}

int constraint_take(struct engine *e, struct engine_req *r, int32_t id, char *msg, size_t cap)
{
    size_t len = 0;
    const char *s = tokenizer_id_bytes(e->tok, id, &len);
    int st = s && len ? grammar_rt_advance(r->grt, r->gstate, s, len) : -1;
    if (st < 0) {
        snprintf(msg, cap, "%s", st == -2 ? grammar_rt_error(r->grt)
                                          : "grammar: a token outside the grammar was sampled");
        return -1;
    }
    r->gstate = st;
    return grammar_rt_complete(r->grt, st) ? 1 : 0;
}
