/*
 * grammar.c: building grammars (rules of byte sets and rule references) and compiling them into
 * the flat, immutable struct grammar the matcher reads (grammar.h).
 *
 * Compiling checks what the matcher relies on: every rule derives a finite string (its fewest
 * bytes, by a fixed point), and no rule can reach itself at the start of an alternative through
 * rules that may be empty (left recursion would make a state infinite). It also records, for
 * every position, the fewest bytes to the end of its alternative (the matcher's cost of a
 * stack is the sum over its frames).
 * Any thread; a builder belongs to one thread at a time.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"
#include "hash.h"

#define INF_LEN (INT_MAX / 4)

/* ---- sequences ---- */

static void seq_push(struct gseq *q, int kind, int arg)
{
    if (q->failed)
        return;
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        struct gsym *s = realloc(q->s, sizeof *s * (size_t)cap);
        if (!s) {
            q->failed = true;
            return;
        }
        q->s = s;
        q->cap = cap;
    }
    q->s[q->n++] = (struct gsym){kind, arg};
}

void gseq_setsym(struct gseq *q, int set)
{
    if (set < 0)
        q->failed = true;
    else
        seq_push(q, GSYM_SET, set);
}

void gseq_rule(struct gseq *q, int rule)
{
    if (rule < 0)
        q->failed = true;
    else
        seq_push(q, GSYM_RULE, rule);
}

void gseq_range(struct gbuild *b, struct gseq *q, unsigned char lo, unsigned char hi)
{
    struct gset s = {{0}};
    for (unsigned c = lo; c <= hi; c++)
        gset_add(&s, c);
    gseq_setsym(q, gb_set(b, &s));
}

void gseq_byte(struct gbuild *b, struct gseq *q, unsigned char c)
{
    gseq_range(b, q, c, c);
}

void gseq_lit(struct gbuild *b, struct gseq *q, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        gseq_byte(b, q, (unsigned char)s[i]);
}

void gseq_clear(struct gseq *q)
{
    q->n = 0;
}

void gseq_free(struct gseq *q)
{
    free(q->s);
    memset(q, 0, sizeof *q);
}

/* ---- the builder ---- */

struct gbuild *gbuild_new(void)
{
    struct gbuild *b = calloc(1, sizeof *b);
    if (b)
        for (int i = 0; i < GB_N_SHARED; i++)
            b->shared[i] = -1;
    return b;
}

void gbuild_free(struct gbuild *b)
{
    if (!b)
        return;
    for (int r = 0; r < b->n_rules; r++) {
        for (int a = 0; a < b->rules[r].n; a++)
            gseq_free(&b->rules[r].alts[a]);
        free(b->rules[r].alts);
    }
    free(b->rules);
    free(b->sets);
    free(b);
}

bool gbuild_failed(const struct gbuild *b)
{
    return b->failed;
}

int gb_rule(struct gbuild *b)
{
    if (b->failed)
        return -1;
    if (b->n_rules == b->cap_rules) {
        int cap = b->cap_rules ? 2 * b->cap_rules : 64;
        struct brule *r = realloc(b->rules, sizeof *r * (size_t)cap);
        if (!r) {
            b->failed = true;
            return -1;
        }
        b->rules = r;
        b->cap_rules = cap;
    }
    b->rules[b->n_rules] = (struct brule){0};
    return b->n_rules++;
}

int gb_set(struct gbuild *b, const struct gset *set)
{
    if (b->failed)
        return -1;
    for (int i = 0; i < b->n_sets; i++)
        if (!memcmp(&b->sets[i], set, sizeof *set))
            return i;
    if (b->n_sets == b->cap_sets) {
        int cap = b->cap_sets ? 2 * b->cap_sets : 32;
        struct gset *s = realloc(b->sets, sizeof *s * (size_t)cap);
        if (!s) {
            b->failed = true;
            return -1;
        }
        b->sets = s;
        b->cap_sets = cap;
    }
    b->sets[b->n_sets] = *set;
    return b->n_sets++;
}

void gb_alt(struct gbuild *b, int rule, const struct gseq *seq)
{
    if (b->failed || rule < 0 || seq->failed) {
        b->failed = true;
        return;
    }
    struct brule *r = &b->rules[rule];
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 2;
        struct gseq *a = realloc(r->alts, sizeof *a * (size_t)cap);
        if (!a) {
            b->failed = true;
            return;
        }
        r->alts = a;
        r->cap = cap;
    }
    struct gseq copy = {0};
    if (seq->n) {
        if (!(copy.s = malloc(sizeof *copy.s * (size_t)seq->n))) {
            b->failed = true;
            return;
        }
        memcpy(copy.s, seq->s, sizeof *copy.s * (size_t)seq->n);
        copy.n = copy.cap = seq->n;
    }
    r->alts[r->n++] = copy;
}

/* ---- rules made of rules ---- */

int gb_literal(struct gbuild *b, const char *s)
{
    int r = gb_rule(b);
    struct gseq q = {0};
    gseq_lit(b, &q, s, strlen(s));
    gb_alt(b, r, &q);
    gseq_free(&q);
    return b->failed ? -1 : r;
}

int gb_concat(struct gbuild *b, const int *rules, int n)
{
    int r = gb_rule(b);
    struct gseq q = {0};
    for (int i = 0; i < n; i++)
        gseq_rule(&q, rules[i]);
    gb_alt(b, r, &q);
    gseq_free(&q);
    return b->failed ? -1 : r;
}

int gb_choice(struct gbuild *b, const int *rules, int n)
{
    int r = gb_rule(b);
    struct gseq q = {0};
    for (int i = 0; i < n; i++) {
        gseq_clear(&q);
        gseq_rule(&q, rules[i]);
        gb_alt(b, r, &q);
    }
    gseq_free(&q);
    return b->failed ? -1 : r;
}

int gb_optional(struct gbuild *b, int x)
{
    int r = gb_rule(b);
    struct gseq q = {0};
    gb_alt(b, r, &q);
    gseq_rule(&q, x);
    gb_alt(b, r, &q);
    gseq_free(&q);
    return b->failed ? -1 : r;
}

int gb_repeat(struct gbuild *b, int x, int min, int max)
{
    struct gseq q = {0};
    int tail;
    if (max < 0) { /* star: tail ::= "" | x tail (a tail call: stacks do not grow) */
        tail = gb_rule(b);
        gb_alt(b, tail, &q);
        gseq_rule(&q, x);
        gseq_rule(&q, tail);
        gb_alt(b, tail, &q);
    } else { /* up to (max - min) more: t_k ::= "" | x t_{k-1} */
        int prev = gb_rule(b);
        gb_alt(b, prev, &q);
        for (int k = 1; k <= max - min; k++) {
            int t = gb_rule(b);
            gseq_clear(&q);
            gb_alt(b, t, &q);
            gseq_rule(&q, x);
            gseq_rule(&q, prev);
            gb_alt(b, t, &q);
            prev = t;
        }
        tail = prev;
    }
    int r = gb_rule(b);
    gseq_clear(&q);
    for (int i = 0; i < min; i++)
        gseq_rule(&q, x);
    gseq_rule(&q, tail);
    gb_alt(b, r, &q);
    gseq_free(&q);
    return b->failed ? -1 : r;
}

int gb_until(struct gbuild *b, const char *trigger, int then, bool optional)
{
    int L = (int)strlen(trigger);
    if (L == 0 || b->failed)
        return then;
    /* KMP failure function, then one rule per matched-prefix length */
    int *fail = calloc((size_t)L + 1, sizeof *fail);
    int *q = calloc((size_t)L, sizeof *q);
    struct gset *by_target = malloc(sizeof *by_target * ((size_t)L + 1));
    if (!fail || !q || !by_target) {
        free(fail);
        free(q);
        free(by_target);
        b->failed = true;
        return -1;
    }
    fail[0] = -1;
    for (int i = 1, k = -1; i <= L; i++) {
        while (k >= 0 && trigger[k] != trigger[i - 1])
            k = fail[k];
        fail[i] = ++k;
    }
    for (int i = 0; i < L; i++)
        q[i] = gb_rule(b);
    struct gseq s = {0};
    for (int i = 0; i < L && !b->failed; i++) {
        /* the next matched length for every byte c from state i, sets grouped by it */
        memset(by_target, 0, sizeof *by_target * (size_t)(L + 1));
        for (unsigned c = 0; c < 256; c++) {
            int k = i;
            while (k >= 0 && (unsigned char)trigger[k] != c)
                k = fail[k];
            gset_add(&by_target[k + 1], c);
        }
        for (int k = 0; k <= L; k++) {
            struct gset *st = &by_target[k];
            if (!(st->bits[0] | st->bits[1] | st->bits[2] | st->bits[3]))
                continue;
            gseq_clear(&s);
            gseq_setsym(&s, gb_set(b, st));
            gseq_rule(&s, k == L ? then : q[k]);
            gb_alt(b, q[i], &s);
        }
        if (optional) {
            gseq_clear(&s);
            gb_alt(b, q[i], &s);
        }
    }
    gseq_free(&s);
    free(fail);
    free(by_target);
    int start = b->failed ? -1 : q[0];
    free(q);
    return start;
}

/* ---- compiling ---- */

/* Fewest bytes of each rule, by iterating to the fixed point. */
static void rule_min_lengths(const struct gbuild *b, int *min)
{
    for (int r = 0; r < b->n_rules; r++)
        min[r] = INF_LEN;
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < b->n_rules; r++) {
            for (int a = 0; a < b->rules[r].n; a++) {
                const struct gseq *q = &b->rules[r].alts[a];
                long long len = 0;
                for (int i = 0; i < q->n && len < INF_LEN; i++)
                    len += q->s[i].kind == GSYM_SET ? 1 : min[q->s[i].arg];
                if (len < min[r]) {
                    min[r] = (int)len;
                    changed = true;
                }
            }
        }
    }
}

/* Depth-first search for a cycle in "rule r may start with rule q" (through empty-able rules):
 * color 0 unvisited, 1 on the path, 2 done. Returns a rule on a cycle, or -1. */
static int left_cycle(const struct gbuild *b, const int *min, int r, unsigned char *color)
{
    color[r] = 1;
    for (int a = 0; a < b->rules[r].n; a++) {
        const struct gseq *q = &b->rules[r].alts[a];
        for (int i = 0; i < q->n && q->s[i].kind == GSYM_RULE; i++) {
            int x = q->s[i].arg;
            if (color[x] == 1)
                return x;
            if (color[x] == 0) {
                int c = left_cycle(b, min, x, color);
                if (c >= 0)
                    return c;
            }
            if (min[x] != 0)
                break;
        }
    }
    color[r] = 2;
    return -1;
}

static void grammar_free(struct grammar *g)
{
    if (!g)
        return;
    free(g->rule_alt);
    free(g->alt_start);
    free(g->elem);
    free(g->sufmin);
    free(g->sets);
    free(g);
}

static uint64_t grammar_content_hash(const struct grammar *g)
{
    uint64_t h = ll_hash_bytes(g->elem, sizeof *g->elem * (size_t)g->n_elems);
    h = ll_mix64(h ^ ll_hash_bytes(g->alt_start, sizeof *g->alt_start * (size_t)g->n_alts));
    h = ll_mix64(h ^ ll_hash_bytes(g->rule_alt, sizeof *g->rule_alt * (size_t)(g->n_rules + 1)));
    h = ll_mix64(h ^ ll_hash_bytes(g->sets, sizeof *g->sets * (size_t)g->n_sets));
    return ll_mix64(h ^ (uint64_t)g->root);
}

enum ll_status gbuild_finish(struct gbuild *b, int root, struct grammar **out,
                             struct ll_err *err)
{
    *out = NULL;
    if (b->failed || root < 0)
        return ll_err_set(err, LL_ENOMEM, "grammar: out of memory");
    if (root >= b->n_rules)
        return ll_err_set(err, LL_EINVAL, "grammar: no rule %d", root);
    int *min = calloc((size_t)b->n_rules, sizeof *min);
    unsigned char *color = calloc((size_t)b->n_rules, 1);
    struct grammar *g = calloc(1, sizeof *g);
    enum ll_status s = LL_OK;
    if (!min || !color || !g) {
        s = ll_err_set(err, LL_ENOMEM, "grammar: out of memory");
        goto out;
    }
    rule_min_lengths(b, min);
    if (min[root] >= INF_LEN) {
        s = ll_err_set(err, LL_EINVAL, "grammar: it matches no finite text (a rule always "
                       "recurses)");
        goto out;
    }
    for (int r = 0; r < b->n_rules; r++) {
        int c = color[r] ? -1 : left_cycle(b, min, r, color);
        if (c >= 0) {
            s = ll_err_set(err, LL_EINVAL, "grammar: rule %d is left-recursive", c);
            goto out;
        }
    }
    int n_alts = 0, n_elems = 0;
    for (int r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n;
        for (int a = 0; a < b->rules[r].n; a++)
            n_elems += b->rules[r].alts[a].n + 1;
    }
    g->n_rules = b->n_rules;
    g->n_alts = n_alts;
    g->n_elems = n_elems;
    g->n_sets = b->n_sets;
    g->rule_alt = malloc(sizeof *g->rule_alt * (size_t)(b->n_rules + 1));
    g->alt_start = malloc(sizeof *g->alt_start * (size_t)(n_alts ? n_alts : 1));
    g->elem = malloc(sizeof *g->elem * (size_t)(n_elems ? n_elems : 1));
    g->sufmin = malloc(sizeof *g->sufmin * (size_t)(n_elems ? n_elems : 1));
    g->sets = malloc(sizeof *g->sets * (size_t)(b->n_sets ? b->n_sets : 1));
    if (!g->rule_alt || !g->alt_start || !g->elem || !g->sufmin || !g->sets) {
        s = ll_err_set(err, LL_ENOMEM, "grammar: out of memory");
        goto out;
    }
    if (b->n_sets) /* a grammar of the empty text alone has no set (and b->sets is NULL) */
        memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)b->n_sets);
    int ai = 0, ei = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = ai;
        for (int a = 0; a < b->rules[r].n; a++) {
            const struct gseq *q = &b->rules[r].alts[a];
            g->alt_start[ai++] = ei;
            for (int i = 0; i < q->n; i++)
                g->elem[ei + i] = q->s[i].kind == GSYM_SET ? q->s[i].arg : GEL_RULE(q->s[i].arg);
            g->elem[ei + q->n] = GEL_END;
            g->sufmin[ei + q->n] = 0;
            for (int i = q->n - 1; i >= 0; i--) {
                long long c = (long long)g->sufmin[ei + i + 1] +
                              (q->s[i].kind == GSYM_SET ? 1 : min[q->s[i].arg]);
                g->sufmin[ei + i] = c < INF_LEN ? (int)c : INF_LEN;
            }
            ei += q->n + 1;
        }
    }
    g->rule_alt[b->n_rules] = ai;
    g->root = root;
    g->min_len = min[root];
    g->hash = grammar_content_hash(g);
    atomic_init(&g->refs, 1);
    *out = g;
    g = NULL;
out:
    free(min);
    free(color);
    grammar_free(g);
    return s;
}

/* ---- grammars ---- */

struct grammar *grammar_ref(struct grammar *g)
{
    if (g)
        atomic_fetch_add(&g->refs, 1);
    return g;
}

void grammar_unref(struct grammar *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        grammar_free(g);
}

int grammar_min_len(const struct grammar *g)
{
    return g->min_len;
}

uint64_t grammar_hash(const struct grammar *g)
{
    return g->hash;
}

bool grammar_equal(const struct grammar *a, const struct grammar *b)
{
    if (a == b)
        return true;
    return a->hash == b->hash && a->root == b->root && a->n_rules == b->n_rules &&
           a->n_alts == b->n_alts && a->n_elems == b->n_elems && a->n_sets == b->n_sets &&
           !memcmp(a->rule_alt, b->rule_alt, sizeof *a->rule_alt * (size_t)(a->n_rules + 1)) &&
           !memcmp(a->alt_start, b->alt_start, sizeof *a->alt_start * (size_t)a->n_alts) &&
           !memcmp(a->elem, b->elem, sizeof *a->elem * (size_t)a->n_elems) &&
           !memcmp(a->sets, b->sets, sizeof *a->sets * (size_t)a->n_sets);
}

/* Copy g's rules into b (rule r of g becomes rule base + r); returns base, or -1. */
static int import_rules(struct gbuild *b, const struct grammar *g)
{
    int base = b->n_rules;
    int *setmap = malloc(sizeof *setmap * (size_t)(g->n_sets ? g->n_sets : 1));
    if (!setmap) {
        b->failed = true;
        return -1;
    }
    for (int i = 0; i < g->n_sets; i++)
        setmap[i] = gb_set(b, &g->sets[i]);
    for (int r = 0; r < g->n_rules; r++)
        gb_rule(b);
    struct gseq q = {0};
    for (int r = 0; r < g->n_rules && !b->failed; r++) {
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            gseq_clear(&q);
            for (int p = g->alt_start[a]; g->elem[p] != GEL_END; p++) {
                if (g->elem[p] >= 0)
                    gseq_setsym(&q, setmap[g->elem[p]]);
                else
                    gseq_rule(&q, base + GEL_RULE_ID(g->elem[p]));
            }
            gb_alt(b, base + r, &q);
        }
    }
    gseq_free(&q);
    free(setmap);
    return b->failed ? -1 : base;
}

struct grammar *grammar_after(const struct grammar *g, const char *trigger)
{
    struct gbuild *b = gbuild_new();
    if (!b)
        return NULL;
    int base = import_rules(b, g);
    int root = base < 0 ? -1 : gb_until(b, trigger, base + g->root, false);
    struct grammar *out = NULL;
    gbuild_finish(b, root, &out, NULL);
    gbuild_free(b);
    return out;
}

struct grammar *grammar_after_optional(const struct grammar *g, const char *open,
                                       const char *close)
{
    struct gbuild *b = gbuild_new();
    if (!b)
        return NULL;
    int base = import_rules(b, g), root = -1;
    if (base >= 0) {
        int think[2] = {gb_literal(b, open), gb_until(b, close, base + g->root, false)};
        int alts[2] = {base + g->root, gb_concat(b, think, 2)};
        root = gb_choice(b, alts, 2);
    }
    struct grammar *out = NULL;
    gbuild_finish(b, root, &out, NULL);
    gbuild_free(b);
    return out;
}
