/*
 * grammar_rt.c: the matcher of a compiled grammar and the token trie (grammar.h).
 *
 * A parse stack is a node (pos, parent): "go on at element pos; when its alternative ends, go on
 * with node parent"; node 0 is the empty stack (the text so far is a sentence). Nodes are
 * interned, so stacks share their tails and an equal stack is an equal id. A node never sits
 * at the end of an alternative (make_node returns the parent instead), which is also what
 * makes repetition written as a tail call (x ::= "" | y x) run in constant stack depth. A
 * state is the sorted set of nodes whose next element is a byte set (plus node 0 when it
 * accepts), interned as well. The closure of a set of nodes expands rule references until
 * every node waits on a byte set; the grammar has no left recursion (grammar.c checks), so
 * the closure is finite.
 *
 * Transitions (state, byte) are memoised in a 256-entry table per state, allocated the first
 * time the state is left. Masks are computed by walking the trie in preorder with one state per
 * depth, skipping a subtree as soon as its prefix is impossible, and cached per state: a list
 * of allowed ids when few are allowed, else a bitset over the vocabulary. When the caches pass
 * RT_MASK_BYTES, every mask is dropped (they are recomputed on demand).
 *
 * One thread: the engine's scheduler (or a test). Memory grows with the states visited, up to
 * GRAMMAR_MAX_STATES states and RT_MAX_NODES nodes; past that the request gets an error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"
#include "hash.h"
#include "tokenizer.h"
#include "util.h"

#define RT_MAX_NODES (1 << 22)
#define RT_MASK_BYTES ((size_t)64 << 20)
#define TRANS_UNKNOWN (-3)

/* ---- the token trie ---- */

struct token_trie {
    int n;               /* nodes, in preorder */
    uint8_t *byte;       /* (n) the byte on the edge into the node */
    uint16_t *depth;     /* (n) 1 for children of the root */
    int32_t *skip;       /* (n) the first node after the node's subtree */
    int32_t *tok_first;  /* (n) the ids ending at the node: toks[tok_first .. + tok_n] */
    uint16_t *tok_n;
    int32_t *toks;
    int max_depth;
    int vocab;           /* the model's row length */
};

struct tok_entry {
    const char *s;
    size_t len;
    int32_t id;
};

static int cmp_entry(const void *a, const void *b)
{
    const struct tok_entry *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, m);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void token_trie_free(struct token_trie *t)
{
    if (!t)
        return;
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok_first);
    free(t->tok_n);
    free(t->toks);
    free(t);
}

enum ll_status token_trie_build(struct token_trie **out, const struct tokenizer *tok, int vocab,
                                struct ll_err *err)
{
    *out = NULL;
    int nv = tokenizer_vocab_size(tok);
    if (nv > vocab)
        nv = vocab;
    struct tok_entry *e = malloc(sizeof *e * (size_t)(nv > 0 ? nv : 1));
    struct token_trie *t = calloc(1, sizeof *t);
    if (!e || !t) {
        free(e);
        free(t);
        return ll_err_set(err, LL_ENOMEM, "token trie: out of memory");
    }
    int n = 0;
    size_t total = 0;
    for (int32_t id = 0; id < nv; id++) {
        size_t len = 0;
        const char *s = tokenizer_id_bytes(tok, id, &len);
        if (!s || !len || len > 65535 || tokenizer_is_special(tok, id))
            continue;
        e[n++] = (struct tok_entry){s, len, id};
        total += len;
    }
    qsort(e, (size_t)n, sizeof *e, cmp_entry);
    size_t cap = total ? total : 1;
    t->byte = malloc(cap);
    t->depth = malloc(sizeof *t->depth * cap);
    t->skip = malloc(sizeof *t->skip * cap);
    t->tok_first = malloc(sizeof *t->tok_first * cap);
    t->tok_n = calloc(cap, sizeof *t->tok_n);
    t->toks = malloc(sizeof *t->toks * (size_t)(n ? n : 1));
    int32_t *path = malloc(sizeof *path * 65537);
    if (!t->byte || !t->depth || !t->skip || !t->tok_first || !t->tok_n || !t->toks || !path) {
        free(e);
        free(path);
        token_trie_free(t);
        return ll_err_set(err, LL_ENOMEM, "token trie: out of memory");
    }
    int nodes = 0, plen = 0, nt = 0;
    const struct tok_entry *prev = NULL;
    for (int k = 0; k < n; k++) {
        const struct tok_entry *x = &e[k];
        size_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < x->len && prev->s[lcp] == x->s[lcp])
                lcp++;
        if ((int)lcp > plen)
            lcp = (size_t)plen;
        for (int d = plen; d > (int)lcp; d--)
            t->skip[path[d]] = nodes;
        for (size_t d = lcp + 1; d <= x->len; d++) {
            t->byte[nodes] = (uint8_t)x->s[d - 1];
            t->depth[nodes] = (uint16_t)d;
            path[d] = nodes++;
        }
        plen = (int)x->len;
        if (plen > t->max_depth)
            t->max_depth = plen;
        int32_t at = path[plen];
        if (t->tok_n[at] == 0)
            t->tok_first[at] = nt;
        t->tok_n[at]++;
        t->toks[nt++] = x->id;
        prev = x;
    }
    for (int d = plen; d >= 1; d--)
        t->skip[path[d]] = nodes;
    t->n = nodes;
    t->vocab = vocab;
    free(path);
    free(e);
    *out = t;
    return LL_OK;
}

/* ---- the matcher ---- */

struct gmask {
    int n;           /* allowed ids (end ids not counted) */
    int32_t *ids;    /* (n) when few */
    uint64_t *bits;  /* (vocab bits) otherwise */
    int max_cost;    /* the largest cost of a state after an allowed token */
    int32_t *by_cost, *cost; /* (n) the allowed ids by the cost after them, ascending, and
                                those costs; made the first time a budget needs them */
};

struct gstate {
    int32_t off, len;   /* its nodes: items[off .. off + len), sorted */
    int32_t cost;
    bool accepts, complete;
    int32_t *trans;     /* (256) NULL until first left; TRANS_UNKNOWN, -1 dead, else state */
    struct gmask *mask; /* NULL until computed */
};

struct grammar_rt {
    struct grammar *g;
    const struct token_trie *t;
    /* nodes */
    int32_t *npos, *npar, *ncost;
    uint32_t *nvisit;
    int nn, ncap;
    int32_t *nh;        /* open addressing: node id + 1, 0 empty */
    int nhcap;
    uint32_t visit_gen;
    /* states */
    struct gstate *st;
    int ns, scap;
    int32_t *items;
    size_t nitems, capitems;
    int32_t *sh;        /* state id + 1 */
    int shcap;
    /* scratch */
    int32_t *work, *outv;
    int nwork, capwork, nout, capout;
    int32_t *walk;      /* (max_depth + 1) states along the trie path */
    int32_t *ids;       /* (vocab) allowed ids of a walk */
    int32_t *costs;     /* (vocab) the cost after each of them */
    float *saved;       /* (vocab) */
    size_t bytes, mask_bytes;
    char err[200];
};

static bool rt_fail(struct grammar_rt *rt, const char *msg)
{
    snprintf(rt->err, sizeof rt->err, "%s", msg);
    return false;
}

const char *grammar_rt_error(const struct grammar_rt *rt)
{
    return rt->err;
}

const struct grammar *grammar_rt_grammar(const struct grammar_rt *rt)
{
    return rt->g;
}

size_t grammar_rt_bytes(const struct grammar_rt *rt)
{
    return rt->bytes + rt->mask_bytes;
}

static bool grow_i32(int32_t **p, int *cap, int need)
{
    if (need <= *cap)
        return true;
    int c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int32_t *q = realloc(*p, sizeof *q * (size_t)c);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static uint64_t node_key_hash(int32_t pos, int32_t par)
{
    return ll_mix64(((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) + LL_GOLDEN64);
}

static bool node_table_grow(struct grammar_rt *rt)
{
    int cap = rt->nhcap ? 2 * rt->nhcap : 1024;
    int32_t *h = calloc((size_t)cap, sizeof *h);
    if (!h)
        return false;
    for (int i = 0; i < rt->nhcap; i++) {
        int32_t id = rt->nh[i] - 1;
        if (id < 0)
            continue;
        size_t at = node_key_hash(rt->npos[id], rt->npar[id]) & (size_t)(cap - 1);
        while (h[at])
            at = (at + 1) & (size_t)(cap - 1);
        h[at] = id + 1;
    }
    free(rt->nh);
    rt->bytes += sizeof *h * (size_t)(cap - rt->nhcap);
    rt->nh = h;
    rt->nhcap = cap;
    return true;
}

/* The node (pos, par), or par itself when pos ends its alternative; -2 out of room. */
static int32_t make_node(struct grammar_rt *rt, int32_t pos, int32_t par)
{
    const struct grammar *g = rt->g;
    if (g->elem[pos] == GEL_END)
        return par;
    if (2 * (rt->nn + 1) > rt->nhcap && !node_table_grow(rt))
        return rt_fail(rt, "grammar: out of memory"), -2;
    size_t mask = (size_t)rt->nhcap - 1, at = node_key_hash(pos, par) & mask;
    for (; rt->nh[at]; at = (at + 1) & mask) {
        int32_t id = rt->nh[at] - 1;
        if (rt->npos[id] == pos && rt->npar[id] == par)
            return id;
    }
    if (rt->nn >= RT_MAX_NODES)
        return rt_fail(rt, "grammar: the output nests too deeply (too many parse stacks)"), -2;
    if (rt->nn == rt->ncap) {
        int cap = rt->ncap * 2;
        int32_t *a = realloc(rt->npos, sizeof *a * (size_t)cap);
        if (a)
            rt->npos = a;
        int32_t *b = a ? realloc(rt->npar, sizeof *b * (size_t)cap) : NULL;
        if (b)
            rt->npar = b;
        int32_t *c = b ? realloc(rt->ncost, sizeof *c * (size_t)cap) : NULL;
        if (c)
            rt->ncost = c;
        uint32_t *v = c ? realloc(rt->nvisit, sizeof *v * (size_t)cap) : NULL;
        if (!v)
            return rt_fail(rt, "grammar: out of memory"), -2;
        rt->nvisit = v;
        rt->bytes += (sizeof(int32_t) * 3 + sizeof(uint32_t)) * (size_t)(cap - rt->ncap);
        rt->ncap = cap;
    }
    int32_t id = rt->nn++;
    rt->npos[id] = pos;
    rt->npar[id] = par;
    long long cost = (long long)g->sufmin[pos] + rt->ncost[par];
    rt->ncost[id] = cost < (1 << 30) ? (int32_t)cost : (1 << 30);
    rt->nvisit[id] = 0;
    rt->nh[at] = id + 1;
    return id;
}

static bool push_work(struct grammar_rt *rt, int32_t n)
{
    if (n == -2)
        return false;
    if (!grow_i32(&rt->work, &rt->capwork, rt->nwork + 1))
        return rt_fail(rt, "grammar: out of memory");
    rt->work[rt->nwork++] = n;
    return true;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t set_hash(const int32_t *v, int n)
{
    return ll_hash_bytes(v, sizeof *v * (size_t)n);
}

static bool state_table_grow(struct grammar_rt *rt)
{
    int cap = rt->shcap ? 2 * rt->shcap : 1024;
    int32_t *h = calloc((size_t)cap, sizeof *h);
    if (!h)
        return false;
    for (int i = 0; i < rt->shcap; i++) {
        int32_t id = rt->sh[i] - 1;
        if (id < 0)
            continue;
        const struct gstate *s = &rt->st[id];
        size_t at = set_hash(rt->items + s->off, s->len) & (size_t)(cap - 1);
        while (h[at])
            at = (at + 1) & (size_t)(cap - 1);
        h[at] = id + 1;
    }
    free(rt->sh);
    rt->bytes += sizeof *h * (size_t)(cap - rt->shcap);
    rt->sh = h;
    rt->shcap = cap;
    return true;
}

/* The state of the node set outv[0..nout) (sorted here); -2 out of room. */
static int intern_state(struct grammar_rt *rt)
{
    int32_t *v = rt->outv;
    int n = rt->nout;
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    if (2 * (rt->ns + 1) > rt->shcap && !state_table_grow(rt))
        return rt_fail(rt, "grammar: out of memory"), -2;
    size_t mask = (size_t)rt->shcap - 1, at = set_hash(v, n) & mask;
    for (; rt->sh[at]; at = (at + 1) & mask) {
        const struct gstate *s = &rt->st[rt->sh[at] - 1];
        if (s->len == n && !memcmp(rt->items + s->off, v, sizeof *v * (size_t)n))
            return rt->sh[at] - 1;
    }
    if (rt->ns >= GRAMMAR_MAX_STATES)
        return rt_fail(rt, "grammar: too many states (the grammar is too large)"), -2;
    if (rt->ns == rt->scap) {
        int cap = rt->scap ? 2 * rt->scap : 256;
        struct gstate *s = realloc(rt->st, sizeof *s * (size_t)cap);
        if (!s)
            return rt_fail(rt, "grammar: out of memory"), -2;
        rt->bytes += sizeof *s * (size_t)(cap - rt->scap);
        rt->st = s;
        rt->scap = cap;
    }
    if (rt->nitems + (size_t)n > rt->capitems) {
        size_t cap = rt->capitems ? 2 * rt->capitems : 4096;
        while (cap < rt->nitems + (size_t)n)
            cap *= 2;
        int32_t *it = realloc(rt->items, sizeof *it * cap);
        if (!it)
            return rt_fail(rt, "grammar: out of memory"), -2;
        rt->bytes += sizeof *it * (cap - rt->capitems);
        rt->items = it;
        rt->capitems = cap;
    }
    struct gstate *s = &rt->st[rt->ns];
    memset(s, 0, sizeof *s);
    s->off = (int32_t)rt->nitems;
    s->len = n;
    memcpy(rt->items + rt->nitems, v, sizeof *v * (size_t)n);
    rt->nitems += (size_t)n;
    s->cost = 1 << 30;
    for (int i = 0; i < n; i++) {
        if (v[i] == 0)
            s->accepts = true;
        if (rt->ncost[v[i]] < s->cost)
            s->cost = rt->ncost[v[i]];
    }
    s->complete = s->accepts && n == 1;
    rt->sh[at] = rt->ns + 1;
    return rt->ns++;
}

/* Expand the nodes of rt->work until each waits on a byte set (or is node 0), then intern. */
static int close_and_intern(struct grammar_rt *rt)
{
    const struct grammar *g = rt->g;
    if (++rt->visit_gen == 0) { /* wrapped: forget every mark */
        memset(rt->nvisit, 0, sizeof *rt->nvisit * (size_t)rt->nn);
        rt->visit_gen = 1;
    }
    rt->nout = 0;
    while (rt->nwork) {
        int32_t n = rt->work[--rt->nwork];
        if (rt->nvisit[n] == rt->visit_gen)
            continue;
        rt->nvisit[n] = rt->visit_gen;
        int32_t e = n ? g->elem[rt->npos[n]] : 0;
        if (n == 0 || e >= 0) {
            if (!grow_i32(&rt->outv, &rt->capout, rt->nout + 1))
                return rt_fail(rt, "grammar: out of memory"), -2;
            rt->outv[rt->nout++] = n;
            continue;
        }
        int r = GEL_RULE_ID(e);
        int32_t ret = make_node(rt, rt->npos[n] + 1, rt->npar[n]);
        if (ret == -2)
            return -2;
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            if (!push_work(rt, make_node(rt, g->alt_start[a], ret)))
                return -2;
    }
    if (rt->nout == 0)
        return -1;
    return intern_state(rt);
}

/* The state after byte c from state s (computed, not memoised). */
static int step(struct grammar_rt *rt, int s, unsigned c)
{
    const struct grammar *g = rt->g;
    rt->nwork = 0;
    const struct gstate *st = &rt->st[s];
    for (int i = 0; i < st->len; i++) {
        int32_t n = rt->items[st->off + i];
        if (n == 0 || !gset_has(&g->sets[g->elem[rt->npos[n]]], c))
            continue;
        if (!push_work(rt, make_node(rt, rt->npos[n] + 1, rt->npar[n])))
            return -2;
    }
    if (rt->nwork == 0)
        return -1;
    return close_and_intern(rt);
}

static inline int trans(struct grammar_rt *rt, int s, unsigned c)
{
    int32_t *t = rt->st[s].trans;
    if (!t) {
        if (!(t = malloc(sizeof *t * 256)))
            return rt_fail(rt, "grammar: out of memory"), -2;
        for (int i = 0; i < 256; i++)
            t[i] = TRANS_UNKNOWN;
        rt->st[s].trans = t;
        rt->bytes += sizeof *t * 256;
    }
    if (t[c] != TRANS_UNKNOWN)
        return t[c];
    int v = step(rt, s, c);
    if (v >= -1)
        rt->st[s].trans[c] = v; /* (rt->st may have moved) */
    return v;
}

enum ll_status grammar_rt_new(struct grammar_rt **out, struct grammar *g,
                              const struct token_trie *t, struct ll_err *err)
{
    *out = NULL;
    struct grammar_rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ll_err_set(err, LL_ENOMEM, "grammar: out of memory");
    rt->g = grammar_ref(g);
    rt->t = t;
    rt->ncap = 1024;
    rt->npos = malloc(sizeof *rt->npos * (size_t)rt->ncap);
    rt->npar = malloc(sizeof *rt->npar * (size_t)rt->ncap);
    rt->ncost = malloc(sizeof *rt->ncost * (size_t)rt->ncap);
    rt->nvisit = calloc((size_t)rt->ncap, sizeof *rt->nvisit);
    if (t) {
        rt->walk = malloc(sizeof *rt->walk * (size_t)(t->max_depth + 1));
        rt->ids = malloc(sizeof *rt->ids * (size_t)(t->vocab > 0 ? t->vocab : 1));
        rt->costs = malloc(sizeof *rt->costs * (size_t)(t->vocab > 0 ? t->vocab : 1));
        rt->saved = malloc(sizeof *rt->saved * (size_t)(t->vocab > 0 ? t->vocab : 1));
    }
    if (!rt->npos || !rt->npar || !rt->ncost || !rt->nvisit ||
        (t && (!rt->walk || !rt->ids || !rt->costs || !rt->saved))) {
        grammar_rt_free(rt);
        return ll_err_set(err, LL_ENOMEM, "grammar: out of memory");
    }
    rt->npos[0] = -1; /* node 0: the empty stack */
    rt->npar[0] = 0;
    rt->ncost[0] = 0;
    rt->nn = 1;
    if (t)
        rt->bytes = (2 * sizeof(int32_t) + sizeof(float)) * (size_t)t->vocab;
    *out = rt;
    return LL_OK;
}

static void mask_free(struct gmask *m)
{
    if (m) {
        free(m->ids);
        free(m->bits);
        free(m->by_cost);
        free(m->cost);
        free(m);
    }
}

void grammar_rt_free(struct grammar_rt *rt)
{
    if (!rt)
        return;
    for (int i = 0; i < rt->ns; i++) {
        free(rt->st[i].trans);
        mask_free(rt->st[i].mask);
    }
    free(rt->st);
    free(rt->items);
    free(rt->sh);
    free(rt->npos);
    free(rt->npar);
    free(rt->ncost);
    free(rt->nvisit);
    free(rt->nh);
    free(rt->work);
    free(rt->outv);
    free(rt->walk);
    free(rt->ids);
    free(rt->costs);
    free(rt->saved);
    grammar_unref(rt->g);
    free(rt);
}

int grammar_rt_start(struct grammar_rt *rt)
{
    const struct grammar *g = rt->g;
    rt->nwork = 0;
    for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (!push_work(rt, make_node(rt, g->alt_start[a], 0)))
            return -2;
    int s = close_and_intern(rt);
    return s == -1 ? rt_fail(rt, "grammar: the start rule matches nothing"), -2 : s;
}

int grammar_rt_advance(struct grammar_rt *rt, int st, const char *s, size_t len)
{
    for (size_t i = 0; i < len && st >= 0; i++)
        st = trans(rt, st, (unsigned char)s[i]);
    return st;
}

bool grammar_rt_accepts(const struct grammar_rt *rt, int st)
{
    return rt->st[st].accepts;
}

bool grammar_rt_complete(const struct grammar_rt *rt, int st)
{
    return rt->st[st].complete;
}

int grammar_rt_cost(const struct grammar_rt *rt, int st)
{
    return rt->st[st].cost;
}

/* Walk the trie from state st: collect into rt->ids the ids allowed and into rt->costs the cost
 * of the state after each. *max_cost gets the largest. Returns how many, or -2. */
static int walk(struct grammar_rt *rt, int st, int *max_cost)
{
    const struct token_trie *t = rt->t;
    int n = 0, mc = 0;
    rt->walk[0] = st;
    for (int i = 0; i < t->n;) {
        int d = t->depth[i];
        int s = trans(rt, rt->walk[d - 1], t->byte[i]);
        if (s == -2)
            return -2;
        if (s < 0) {
            i = t->skip[i];
            continue;
        }
        rt->walk[d] = s;
        if (t->tok_n[i]) {
            int c = rt->st[s].cost;
            for (int k = 0; k < t->tok_n[i]; k++) {
                rt->costs[n] = c;
                rt->ids[n++] = t->toks[t->tok_first[i] + k];
            }
            if (c > mc)
                mc = c;
        }
        i++;
    }
    *max_cost = mc;
    return n;
}

static int cmp_pair(const void *a, const void *b)
{
    const int32_t *x = a, *y = b; /* (cost, id) */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* m's ids ordered by the cost after them (walking the trie again from st). */
static bool sort_by_cost(struct grammar_rt *rt, int st, struct gmask *m)
{
    int mc, n = walk(rt, st, &mc);
    if (n < 0)
        return false;
    int32_t *pairs = malloc(sizeof *pairs * 2 * (size_t)(n ? n : 1));
    m->by_cost = malloc(sizeof *m->by_cost * (size_t)(n ? n : 1));
    m->cost = malloc(sizeof *m->cost * (size_t)(n ? n : 1));
    if (!pairs || !m->by_cost || !m->cost) {
        free(pairs);
        free(m->by_cost);
        free(m->cost);
        m->by_cost = m->cost = NULL;
        return rt_fail(rt, "grammar: out of memory");
    }
    for (int k = 0; k < n; k++) {
        pairs[2 * k] = rt->costs[k];
        pairs[2 * k + 1] = rt->ids[k];
    }
    qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pair);
    for (int k = 0; k < n; k++) {
        m->cost[k] = pairs[2 * k];
        m->by_cost[k] = pairs[2 * k + 1];
    }
    free(pairs);
    rt->mask_bytes += 2 * sizeof(int32_t) * (size_t)n;
    return true;
}

static void drop_masks(struct grammar_rt *rt)
{
    for (int i = 0; i < rt->ns; i++) {
        mask_free(rt->st[i].mask);
        rt->st[i].mask = NULL;
    }
    rt->mask_bytes = 0;
}

/* The cached mask of st, computed when missing; NULL out of room. */
static struct gmask *state_mask(struct grammar_rt *rt, int st)
{
    if (rt->st[st].mask)
        return rt->st[st].mask;
    int mc = 0;
    int n = walk(rt, st, &mc);
    if (n < 0)
        return NULL;
    int V = rt->t->vocab;
    size_t words = ((size_t)V + 63) / 64;
    struct gmask *m = calloc(1, sizeof *m);
    if (!m)
        return rt_fail(rt, "grammar: out of memory"), NULL;
    m->n = n;
    m->max_cost = mc;
    size_t sz;
    if ((size_t)n * sizeof(int32_t) < words * sizeof(uint64_t)) {
        sz = sizeof *m->ids * (size_t)(n ? n : 1);
        if ((m->ids = malloc(sz)))
            memcpy(m->ids, rt->ids, sizeof *m->ids * (size_t)n);
    } else {
        sz = sizeof *m->bits * words;
        if ((m->bits = calloc(words, sizeof *m->bits)))
            for (int k = 0; k < n; k++)
                m->bits[rt->ids[k] >> 6] |= (uint64_t)1 << (rt->ids[k] & 63);
    }
    if (!m->ids && !m->bits) {
        free(m);
        return rt_fail(rt, "grammar: out of memory"), NULL;
    }
    if (rt->mask_bytes + sz > RT_MASK_BYTES)
        drop_masks(rt);
    rt->mask_bytes += sz + sizeof *m;
    rt->st[st].mask = m;
    return m;
}

/* Keep row[ids[0..n)], every other entry -inf. */
static void keep_only(struct grammar_rt *rt, float *row, int V, const int32_t *ids, int n)
{
    for (int k = 0; k < n; k++)
        rt->saved[k] = row[ids[k]];
    for (int i = 0; i < V; i++)
        row[i] = -INFINITY;
    for (int k = 0; k < n; k++)
        row[ids[k]] = rt->saved[k];
}

int grammar_rt_mask(struct grammar_rt *rt, int st, float *row, const int32_t *end_ids,
                    int n_end, int budget)
{
    int V = rt->t->vocab;
    bool acc = rt->st[st].accepts;
    float ends[GRAMMAR_MAX_END_IDS];
    LL_ASSERT(n_end <= GRAMMAR_MAX_END_IDS);
    for (int k = 0; k < n_end; k++)
        ends[k] = row[end_ids[k]];
    struct gmask *m = state_mask(rt, st);
    if (!m)
        return -2;
    int allowed = 0;
    bool filtered = false;
    if (budget > 0 && budget - 1 < m->max_cost) {
        /* only ids after which the rest fits in budget - 1 bytes (each byte is a token); when
         * nothing can complete in time any more, the plain mask: the output will be cut at
         * max_tokens, as without a grammar */
        if (!m->by_cost && !sort_by_cost(rt, st, m))
            return -2;
        int lo = 0, hi = m->n; /* the first id whose cost is above the limit */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (m->cost[mid] <= budget - 1)
                lo = mid + 1;
            else
                hi = mid;
        }
        allowed = lo;
        if (allowed > 0 || acc) {
            keep_only(rt, row, V, m->by_cost, allowed);
            filtered = true;
        }
    }
    if (filtered) {
    } else if (m->ids) {
        allowed = m->n;
        keep_only(rt, row, V, m->ids, m->n);
    } else {
        allowed = m->n;
        size_t words = ((size_t)V + 63) / 64;
        for (size_t w = 0; w < words; w++) {
            uint64_t keep = m->bits[w];
            if (keep == ~(uint64_t)0)
                continue;
            int base = (int)(w * 64), lim = V - base < 64 ? V - base : 64;
            for (int b = 0; b < lim; b++)
                if (!((keep >> b) & 1))
                    row[base + b] = -INFINITY;
        }
    }
    for (int k = 0; k < n_end; k++)
        row[end_ids[k]] = acc ? ends[k] : -INFINITY;
    return allowed + (acc ? n_end : 0);
}

/* ---- a throwaway matcher for tests ---- */

bool grammar_accepts(const struct grammar *g, const char *s, size_t len, bool *prefix)
{
    struct grammar_rt *rt;
    if (prefix)
        *prefix = false;
    if (grammar_rt_new(&rt, (struct grammar *)g, NULL, NULL) != LL_OK)
        return false;
    int st = grammar_rt_start(rt);
    if (st >= 0)
        st = grammar_rt_advance(rt, st, s, len);
    bool ok = st >= 0 && rt->st[st].accepts;
    if (prefix)
        *prefix = st >= 0;
    grammar_rt_free(rt);
    return ok;
}
