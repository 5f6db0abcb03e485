/*
 * parser.c: tokens -> AST, by recursive descent over jinja2's grammar.
 *
 * Precedence, loosest first: `x if c else y`, or, and, not, comparisons and (not) in,
 * + -, ~, * / // %, **, unary - +, then filters (|f) and tests (is [not] t) on a primary with
 * its postfix operators (.attr, [key], [a:b:c], (args)). Statements: if/elif/else, for (with
 * tuple targets, `if` filter and else), set (expression, namespace attribute and block forms),
 * macro, filter blocks, break/continue, generation blocks (rendered as plain content).
 *
 * Filter and test names are resolved to builtins here, so an unknown one is a compile error
 * with its position. Nesting is bounded (JP_MAX_DEPTH) so that no input can exhaust the stack.
 * Runs once per compile; all nodes live in the template's arena.
 */
#include "jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JP_MAX_DEPTH 256

struct parser {
    struct jarena *a;
    const struct jtoken *t;
    size_t n, i;
    struct ll_err *err;
    enum ll_status code;
    jmp_buf jb;
    int depth, loop_depth;
};

struct nvec {
    struct jnode **v;
    uint32_t n, cap;
};

__attribute__((format(printf, 3, 4))) _Noreturn static void fail(struct parser *p,
                                                                  const struct jtoken *at,
                                                                  const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ll_err_set(p->err, LL_ETEMPLATE, "line %u, column %u: %s", at->line, at->col, msg);
    p->code = LL_ETEMPLATE;
    longjmp(p->jb, 1);
}

_Noreturn static void fail_nomem(struct parser *p)
{
    ll_err_set(p->err, LL_ENOMEM, "out of memory while parsing the template");
    p->code = LL_ENOMEM;
    longjmp(p->jb, 1);
}

static void *alloc(struct parser *p, size_t bytes)
{
    void *m = jarena_alloc(p->a, bytes);
    if (!m)
        fail_nomem(p);
    return m;
}

static const struct jtoken *cur(const struct parser *p) { return &p->t[p->i]; }
static const struct jtoken *peek(const struct parser *p, size_t k)
{
    return p->i + k < p->n ? &p->t[p->i + k] : &p->t[p->n - 1];
}
static const struct jtoken *next(struct parser *p)
{
    const struct jtoken *t = &p->t[p->i];
    if (p->i + 1 < p->n)
        p->i++;
    return t;
}

static bool tok_is_name(const struct jtoken *t, const char *name)
{
    return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}
static bool is_name(const struct parser *p, const char *name) { return tok_is_name(cur(p), name); }
static bool is_op(const struct parser *p, uint8_t op)
{
    return cur(p)->kind == JT_OP && cur(p)->op == op;
}

static const char *tok_desc(const struct jtoken *t, char *buf, size_t cap)
{
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_TEXT: return "template text";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_STRING: return "a string literal";
    case JT_INT:
    case JT_FLOAT: return "a number";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
        return buf;
    }
}

_Noreturn static void fail_unexpected(struct parser *p, const char *expected)
{
    char buf[64];
    fail(p, cur(p), "expected %s, found %s", expected, tok_desc(cur(p), buf, sizeof buf));
}

static void expect_op(struct parser *p, uint8_t op, const char *what)
{
    if (!is_op(p, op))
        fail_unexpected(p, what);
    next(p);
}

static struct jnode *node(struct parser *p, uint8_t kind, const struct jtoken *at)
{
    struct jnode *n = alloc(p, sizeof *n);
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static void vpush(struct parser *p, struct nvec *v, struct jnode *n)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        struct jnode **m = alloc(p, cap * sizeof *m);
        if (v->n)
            memcpy(m, v->v, v->n * sizeof *m);
        v->v = m;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static void set_items(struct jnode *n, const struct nvec *v)
{
    n->items = v->v;
    n->n = v->n;
}

static const char *name_dup(struct parser *p, const struct jtoken *t)
{
    char *s = jarena_strndup(p->a, t->s, t->len);
    if (!s)
        fail_nomem(p);
    return s;
}

/* A static (immortal) string value in the arena. */
static struct jv lit_str(struct parser *p, const char *s, size_t len)
{
    struct jstr *o = alloc(p, sizeof(struct jstr) + len + 1);
    o->h.rc = -1;
    o->h.kind = JV_STR;
    o->len = len;
    memcpy(o->s, s, len);
    o->s[len] = 0;
    struct jv v = {.kind = JV_STR};
    v.u.s = o;
    return v;
}

static void enter(struct parser *p)
{
    if (++p->depth > JP_MAX_DEPTH)
        fail(p, cur(p), "template nested too deeply (more than %d levels)", JP_MAX_DEPTH);
}
static void leave(struct parser *p) { p->depth--; }

/* Operator chains build left-deep trees that the evaluator walks recursively: each link
 * counts against the nesting budget (released when the chain ends). */
#define CHAIN_LINK(p, links) (enter(p), (links)++)
#define CHAIN_END(p, links) ((p)->depth -= (links))

/* ------------------------------------------------------------------ expressions */

static struct jnode *parse_expr(struct parser *p, bool cond);
static struct jnode *parse_tuple(struct parser *p, bool cond);
static struct jnode *parse_unary(struct parser *p, bool with_filter);

static bool is_reserved_end(const struct jtoken *t)
{
    static const char *const words[] = {"else", "or", "and", "not", "in", "if", "is", "recursive"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (tok_is_name(t, words[k]))
            return true;
    return false;
}

static void parse_args(struct parser *p, struct nvec *args)
{
    expect_op(p, JOP_LPAREN, "'('");
    bool kw = false;
    uint32_t npos = 0, nkw = 0;
    while (!is_op(p, JOP_RPAREN)) {
        if (is_op(p, JOP_MUL) || is_op(p, JOP_POW))
            fail(p, cur(p), "argument unpacking (*args, **kwargs) is not supported");
        const struct jtoken *t = cur(p);
        if (t->kind == JT_NAME && peek(p, 1)->kind == JT_OP && peek(p, 1)->op == JOP_ASSIGN) {
            next(p);
            next(p);
            struct jnode *k = node(p, JN_KWARG, t);
            k->name = name_dup(p, t);
            for (uint32_t j = 0; j < args->n; j++)
                if (args->v[j]->kind == JN_KWARG && !strcmp(args->v[j]->name, k->name))
                    fail(p, t, "keyword argument '%s' given twice", k->name);
            k->a = parse_expr(p, true);
            vpush(p, args, k);
            kw = true;
            if (++nkw > JMAX_ARGS)
                fail(p, t, "too many keyword arguments (at most %d)", JMAX_ARGS);
        } else {
            if (kw)
                fail(p, t, "positional argument follows keyword argument");
            vpush(p, args, parse_expr(p, true));
            if (++npos > JMAX_ARGS)
                fail(p, t, "too many arguments (at most %d)", JMAX_ARGS);
        }
        if (is_op(p, JOP_COMMA))
            next(p);
        else if (!is_op(p, JOP_RPAREN))
            fail_unexpected(p, "',' or ')' in the argument list");
    }
    next(p);
}

static struct jnode *parse_primary(struct parser *p)
{
    const struct jtoken *t = cur(p);
    struct jnode *n;
    char buf[64];
    switch (t->kind) {
    case JT_NAME:
        next(p);
        n = node(p, JN_LIT, t);
        if (tok_is_name(t, "true") || tok_is_name(t, "True")) {
            n->lit = jv_bool(true);
        } else if (tok_is_name(t, "false") || tok_is_name(t, "False")) {
            n->lit = jv_bool(false);
        } else if (tok_is_name(t, "none") || tok_is_name(t, "None")) {
            n->lit = jv_none();
        } else {
            n->kind = JN_NAME;
            n->name = name_dup(p, t);
        }
        return n;
    case JT_STRING: {
        /* adjacent literals concatenate: 'a' "b" == 'ab' */
        size_t total = 0, j = p->i;
        while (p->t[j].kind == JT_STRING)
            total += p->t[j++].len;
        char *s = alloc(p, total + 1);
        size_t off = 0;
        while (cur(p)->kind == JT_STRING) {
            memcpy(s + off, cur(p)->s, cur(p)->len);
            off += cur(p)->len;
            next(p);
        }
        n = node(p, JN_LIT, t);
        n->lit = lit_str(p, s, total);
        return n;
    }
    case JT_INT:
        next(p);
        n = node(p, JN_LIT, t);
        n->lit = jv_int(t->i);
        return n;
    case JT_FLOAT:
        next(p);
        n = node(p, JN_LIT, t);
        n->lit = jv_float(t->f);
        return n;
    case JT_OP:
        if (t->op == JOP_LPAREN) {
            next(p);
            if (is_op(p, JOP_RPAREN)) {
                next(p);
                return node(p, JN_TUPLE, t);
            }
            n = parse_tuple(p, true);
            expect_op(p, JOP_RPAREN, "')'");
            return n;
        }
        if (t->op == JOP_LBRACKET) {
            next(p);
            struct nvec items = {0};
            while (!is_op(p, JOP_RBRACKET)) {
                vpush(p, &items, parse_expr(p, true));
                if (is_op(p, JOP_COMMA))
                    next(p);
                else if (!is_op(p, JOP_RBRACKET))
                    fail_unexpected(p, "',' or ']' in the list");
            }
            next(p);
            n = node(p, JN_LIST, t);
            set_items(n, &items);
            return n;
        }
        if (t->op == JOP_LBRACE) {
            next(p);
            struct nvec items = {0};
            while (!is_op(p, JOP_RBRACE)) {
                vpush(p, &items, parse_expr(p, true));
                expect_op(p, JOP_COLON, "':' after the dict key");
                vpush(p, &items, parse_expr(p, true));
                if (is_op(p, JOP_COMMA))
                    next(p);
                else if (!is_op(p, JOP_RBRACE))
                    fail_unexpected(p, "',' or '}' in the dict");
            }
            next(p);
            n = node(p, JN_DICT, t);
            set_items(n, &items);
            return n;
        }
        break;
    default:
        break;
    }
    fail(p, t, "expected an expression, found %s", tok_desc(t, buf, sizeof buf));
}

static struct jnode *parse_postfix(struct parser *p, struct jnode *n)
{
    int links = 0;
    for (;; CHAIN_LINK(p, links)) {
        const struct jtoken *t = cur(p);
        if (is_op(p, JOP_DOT)) {
            next(p);
            const struct jtoken *a = cur(p);
            if (a->kind == JT_NAME) {
                next(p);
                struct jnode *m = node(p, JN_ATTR, t);
                m->a = n;
                m->name = name_dup(p, a);
                n = m;
            } else if (a->kind == JT_INT) {
                next(p);
                struct jnode *k = node(p, JN_LIT, a);
                k->lit = jv_int(a->i);
                struct jnode *m = node(p, JN_ITEM, t);
                m->a = n;
                m->b = k;
                n = m;
            } else {
                fail_unexpected(p, "an attribute name after '.'");
            }
        } else if (is_op(p, JOP_LBRACKET)) {
            next(p);
            struct jnode *start = NULL, *stop = NULL, *step = NULL;
            if (!is_op(p, JOP_COLON))
                start = parse_expr(p, true);
            if (start && is_op(p, JOP_RBRACKET)) {
                next(p);
                struct jnode *m = node(p, JN_ITEM, t);
                m->a = n;
                m->b = start;
                n = m;
                continue;
            }
            expect_op(p, JOP_COLON, "':' or ']' in the subscript");
            if (!is_op(p, JOP_COLON) && !is_op(p, JOP_RBRACKET))
                stop = parse_expr(p, true);
            if (is_op(p, JOP_COLON)) {
                next(p);
                if (!is_op(p, JOP_RBRACKET))
                    step = parse_expr(p, true);
            }
            expect_op(p, JOP_RBRACKET, "']' closing the slice");
            struct jnode *m = node(p, JN_SLICE, t);
            m->a = n;
            m->b = start;
            m->c = stop;
            m->d = step;
            n = m;
        } else if (is_op(p, JOP_LPAREN)) {
            struct nvec args = {0};
            parse_args(p, &args);
            struct jnode *m = node(p, JN_CALL, t);
            m->a = n;
            set_items(m, &args);
            n = m;
        } else {
            CHAIN_END(p, links);
            return n;
        }
    }
}

static struct jnode *parse_filter(struct parser *p, struct jnode *operand)
{
    const struct jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        fail_unexpected(p, "a filter name after '|'");
    next(p);
    struct jnode *n = node(p, JN_FILTER, t);
    n->name = name_dup(p, t);
    n->fn = jfilter_find(n->name);
    if (!n->fn)
        fail(p, t, "unknown filter '%s'", n->name);
    n->a = operand;
    if (is_op(p, JOP_LPAREN)) {
        struct nvec args = {0};
        parse_args(p, &args);
        set_items(n, &args);
    }
    return n;
}

static struct jnode *parse_test(struct parser *p, struct jnode *operand)
{
    const struct jtoken *is = next(p); /* 'is' */
    bool neg = false;
    if (is_name(p, "not")) {
        next(p);
        neg = true;
    }
    const struct jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        fail_unexpected(p, "a test name after 'is'");
    next(p);
    struct jnode *n = node(p, JN_TEST, is);
    n->name = name_dup(p, t);
    n->fn = jtest_find(n->name);
    if (!n->fn)
        fail(p, t, "unknown test '%s'", n->name);
    n->a = operand;
    n->op = neg;
    const struct jtoken *c = cur(p);
    if (is_op(p, JOP_LPAREN)) {
        struct nvec args = {0};
        parse_args(p, &args);
        set_items(n, &args);
    } else if ((c->kind == JT_NAME && !is_reserved_end(c)) || c->kind == JT_STRING ||
               c->kind == JT_INT || c->kind == JT_FLOAT ||
               (c->kind == JT_OP && (c->op == JOP_LBRACKET || c->op == JOP_LBRACE))) {
        struct nvec args = {0};
        vpush(p, &args, parse_postfix(p, parse_primary(p)));
        set_items(n, &args);
    }
    return n;
}

static struct jnode *parse_filter_expr(struct parser *p, struct jnode *n)
{
    int links = 0;
    for (;; CHAIN_LINK(p, links)) {
        if (is_op(p, JOP_PIPE)) {
            next(p);
            n = parse_filter(p, n);
        } else if (is_name(p, "is")) {
            n = parse_test(p, n);
        } else if (is_op(p, JOP_LPAREN)) {
            const struct jtoken *t = cur(p);
            struct nvec args = {0};
            parse_args(p, &args);
            struct jnode *m = node(p, JN_CALL, t);
            m->a = n;
            set_items(m, &args);
            n = m;
        } else {
            CHAIN_END(p, links);
            return n;
        }
    }
}

static struct jnode *parse_unary(struct parser *p, bool with_filter)
{
    enter(p);
    const struct jtoken *t = cur(p);
    struct jnode *n;
    if (is_op(p, JOP_SUB) || is_op(p, JOP_ADD)) {
        bool neg = is_op(p, JOP_SUB);
        next(p);
        struct jnode *a = parse_unary(p, false);
        if (neg && a->kind == JN_LIT && a->lit.kind == JV_INT && a->lit.u.i != INT64_MIN) {
            a->lit.u.i = -a->lit.u.i; /* fold -1 into a literal */
            a->line = t->line;
            a->col = t->col;
            n = a;
        } else if (neg && a->kind == JN_LIT && a->lit.kind == JV_FLOAT) {
            a->lit.u.f = -a->lit.u.f;
            a->line = t->line;
            a->col = t->col;
            n = a;
        } else {
            n = node(p, neg ? JN_NEG : JN_POS, t);
            n->a = a;
        }
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter)
        n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static struct jnode *binop(struct parser *p, const struct jtoken *t, uint8_t op, struct jnode *a,
                           struct jnode *b)
{
    struct jnode *n = node(p, JN_BINOP, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *p)
{
    struct jnode *l = parse_unary(p, true);
    int links = 0;
    while (is_op(p, JOP_POW)) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        l = binop(p, t, JOP_POW, l, parse_unary(p, true));
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_math2(struct parser *p)
{
    struct jnode *l = parse_pow(p);
    int links = 0;
    while (is_op(p, JOP_MUL) || is_op(p, JOP_DIV) || is_op(p, JOP_FLOORDIV) || is_op(p, JOP_MOD)) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        l = binop(p, t, t->op, l, parse_pow(p));
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_concat(struct parser *p)
{
    struct jnode *l = parse_math2(p);
    int links = 0;
    while (is_op(p, JOP_TILDE)) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        l = binop(p, t, JOP_TILDE, l, parse_math2(p));
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_math1(struct parser *p)
{
    struct jnode *l = parse_concat(p);
    int links = 0;
    while (is_op(p, JOP_ADD) || is_op(p, JOP_SUB)) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        l = binop(p, t, t->op, l, parse_concat(p));
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_compare(struct parser *p)
{
    struct jnode *l = parse_math1(p);
    int links = 0;
    for (;; CHAIN_LINK(p, links)) {
        const struct jtoken *t = cur(p);
        uint8_t op;
        if (t->kind == JT_OP && t->op >= JOP_EQ && t->op <= JOP_GE) {
            op = t->op;
            next(p);
        } else if (tok_is_name(t, "in")) {
            op = JOP_IN;
            next(p);
        } else if (tok_is_name(t, "not") && tok_is_name(peek(p, 1), "in")) {
            op = JOP_NOTIN;
            next(p);
            next(p);
        } else {
            CHAIN_END(p, links);
            return l;
        }
        l = binop(p, t, op, l, parse_math1(p));
    }
}

static struct jnode *parse_not(struct parser *p)
{
    if (is_name(p, "not")) {
        enter(p);
        const struct jtoken *t = next(p);
        struct jnode *n = node(p, JN_NOT, t);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static struct jnode *parse_and(struct parser *p)
{
    struct jnode *l = parse_not(p);
    int links = 0;
    while (is_name(p, "and")) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        struct jnode *n = node(p, JN_AND, t);
        n->a = l;
        n->b = parse_not(p);
        l = n;
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_or(struct parser *p)
{
    struct jnode *l = parse_and(p);
    int links = 0;
    while (is_name(p, "or")) {
        CHAIN_LINK(p, links);
        const struct jtoken *t = next(p);
        struct jnode *n = node(p, JN_OR, t);
        n->a = l;
        n->b = parse_and(p);
        l = n;
    }
    CHAIN_END(p, links);
    return l;
}

static struct jnode *parse_expr(struct parser *p, bool cond)
{
    enter(p);
    struct jnode *e = parse_or(p);
    while (cond && is_name(p, "if")) {
        const struct jtoken *t = next(p);
        struct jnode *n = node(p, JN_COND, t);
        n->b = e;
        n->a = parse_or(p);
        if (is_name(p, "else")) {
            next(p);
            n->c = parse_expr(p, true);
        }
        e = n;
    }
    leave(p);
    return e;
}

static bool ends_tuple(const struct parser *p)
{
    const struct jtoken *t = cur(p);
    return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF ||
           (t->kind == JT_OP && (t->op == JOP_RPAREN || t->op == JOP_ASSIGN)) ||
           tok_is_name(t, "if") || tok_is_name(t, "recursive");
}

static struct jnode *parse_tuple(struct parser *p, bool cond)
{
    const struct jtoken *t = cur(p);
    struct jnode *e = parse_expr(p, cond);
    if (!is_op(p, JOP_COMMA))
        return e;
    struct nvec items = {0};
    vpush(p, &items, e);
    while (is_op(p, JOP_COMMA)) {
        next(p);
        if (ends_tuple(p))
            break;
        vpush(p, &items, parse_expr(p, cond));
    }
    struct jnode *n = node(p, JN_TUPLE, t);
    set_items(n, &items);
    return n;
}

/* ------------------------------------------------------------------ statements */

static struct jnode *target_name(struct parser *p)
{
    const struct jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        fail_unexpected(p, "a variable name");
    static const char *const bad[] = {"true", "false", "none", "True", "False", "None",
                                      "in", "not", "and", "or", "is", "if", "else"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (tok_is_name(t, bad[k]))
            fail(p, t, "cannot assign to '%s'", bad[k]);
    next(p);
    struct jnode *n = node(p, JN_NAME, t);
    n->name = name_dup(p, t);
    return n;
}

/* name | name.attr (with_attr) | name, name, ... | (name, name) */
static struct jnode *parse_target(struct parser *p, bool with_attr)
{
    const struct jtoken *t = cur(p);
    bool paren = false;
    if (is_op(p, JOP_LPAREN)) {
        next(p);
        paren = true;
    }
    struct jnode *first = target_name(p);
    if (!paren && with_attr && is_op(p, JOP_DOT)) {
        next(p);
        const struct jtoken *a = cur(p);
        if (a->kind != JT_NAME)
            fail_unexpected(p, "an attribute name after '.'");
        next(p);
        struct jnode *n = node(p, JN_ATTR, t);
        n->a = first;
        n->name = name_dup(p, a);
        return n;
    }
    if (!is_op(p, JOP_COMMA)) {
        if (paren)
            expect_op(p, JOP_RPAREN, "')'");
        return first;
    }
    struct nvec items = {0};
    vpush(p, &items, first);
    while (is_op(p, JOP_COMMA)) {
        next(p);
        if (cur(p)->kind != JT_NAME)
            break;
        vpush(p, &items, target_name(p));
    }
    if (paren)
        expect_op(p, JOP_RPAREN, "')'");
    struct jnode *n = node(p, JN_TUPLE, t);
    set_items(n, &items);
    return n;
}

struct opener {
    const struct jtoken *tok; /* the tag name token */
    const char *tag;          /* "for" */
    const char *end;          /* "endfor" */
};

static struct jnode *parse_body(struct parser *p, const char *const *ends, size_t nends,
                                const struct opener *op);

static void block_end(struct parser *p, const char *after)
{
    if (cur(p)->kind != JT_BLOCK_END) {
        char buf[64], what[80];
        snprintf(what, sizeof what, "'%%}' after '%s'", after);
        fail(p, cur(p), "expected %s, found %s", what, tok_desc(cur(p), buf, sizeof buf));
    }
    next(p);
}

/* At `{% name`: consume the two tokens and return the name token. */
static const struct jtoken *tag_begin(struct parser *p)
{
    next(p);
    return next(p);
}

static void tag_end(struct parser *p, const char *name)
{
    tag_begin(p);
    block_end(p, name);
}

static struct jnode *parse_if_chain(struct parser *p, const struct jtoken *t,
                                    const struct opener *op)
{
    struct jnode *n = node(p, JN_IF, t);
    n->a = parse_tuple(p, true);
    block_end(p, "if");
    static const char *const ends[] = {"elif", "else", "endif"};
    n->b = parse_body(p, ends, 3, op);
    const struct jtoken *name = peek(p, 1);
    if (tok_is_name(name, "elif")) {
        tag_begin(p);
        enter(p);
        n->c = parse_if_chain(p, name, op);
        leave(p);
    } else if (tok_is_name(name, "else")) {
        tag_begin(p);
        block_end(p, "else");
        static const char *const endif[] = {"endif"};
        n->c = parse_body(p, endif, 1, op);
        tag_end(p, "endif");
    } else {
        tag_end(p, "endif");
    }
    return n;
}

static struct jnode *parse_for(struct parser *p, const struct jtoken *t, const struct opener *op)
{
    struct jnode *n = node(p, JN_FOR, t);
    n->a = parse_target(p, false);
    if (!is_name(p, "in"))
        fail_unexpected(p, "'in' after the loop variable");
    next(p);
    n->b = parse_tuple(p, false);
    if (is_name(p, "recursive"))
        fail(p, cur(p), "recursive loops are not supported");
    if (is_name(p, "if")) {
        next(p);
        n->c = parse_expr(p, true);
    }
    block_end(p, "for");
    static const char *const ends[] = {"endfor", "else"};
    p->loop_depth++;
    n->d = parse_body(p, ends, 2, op);
    p->loop_depth--;
    if (tok_is_name(peek(p, 1), "else")) {
        tag_begin(p);
        block_end(p, "else");
        n->e = parse_body(p, ends, 1, op);
    }
    tag_end(p, "endfor");
    return n;
}

static struct jnode *parse_filter_chain(struct parser *p, struct jnode *base)
{
    struct jnode *n = parse_filter(p, base);
    while (is_op(p, JOP_PIPE)) {
        next(p);
        n = parse_filter(p, n);
    }
    return n;
}

static struct jnode *parse_set(struct parser *p, const struct jtoken *t, const struct opener *op)
{
    struct jnode *target = parse_target(p, true);
    if (is_op(p, JOP_ASSIGN)) {
        next(p);
        struct jnode *n = node(p, JN_SET, t);
        n->a = target;
        n->b = parse_tuple(p, true);
        block_end(p, "set");
        return n;
    }
    struct jnode *n = node(p, JN_SETBLOCK, t);
    n->a = target;
    if (target->kind == JN_TUPLE)
        fail(p, t, "a block 'set' assigns to a single name");
    if (is_op(p, JOP_PIPE)) {
        next(p);
        n->c = parse_filter_chain(p, node(p, JN_CAPTURED, t));
    }
    if (cur(p)->kind != JT_BLOCK_END)
        fail_unexpected(p, "'=' or '%}' in 'set'");
    next(p);
    static const char *const ends[] = {"endset"};
    n->b = parse_body(p, ends, 1, op);
    tag_end(p, "endset");
    return n;
}

static struct jnode *parse_macro(struct parser *p, const struct jtoken *t, const struct opener *op)
{
    struct jnode *n = node(p, JN_MACRO, t);
    const struct jtoken *nt = cur(p);
    if (nt->kind != JT_NAME)
        fail_unexpected(p, "a macro name");
    n->name = name_dup(p, nt);
    next(p);
    expect_op(p, JOP_LPAREN, "'(' after the macro name");
    struct nvec params = {0};
    bool dflt = false;
    while (!is_op(p, JOP_RPAREN)) {
        const struct jtoken *pt = cur(p);
        struct jnode *param = target_name(p);
        for (uint32_t j = 0; j < params.n; j++)
            if (!strcmp(params.v[j]->name, param->name))
                fail(p, pt, "duplicate parameter '%s'", param->name);
        if (is_op(p, JOP_ASSIGN)) {
            next(p);
            param->kind = JN_KWARG;
            param->a = parse_expr(p, true);
            dflt = true;
        } else if (dflt) {
            fail(p, pt, "parameter '%s' without a default follows one with a default", param->name);
        }
        vpush(p, &params, param);
        if (params.n > JMAX_ARGS)
            fail(p, pt, "too many macro parameters (at most %d)", JMAX_ARGS);
        if (is_op(p, JOP_COMMA))
            next(p);
        else if (!is_op(p, JOP_RPAREN))
            fail_unexpected(p, "',' or ')' in the parameter list");
    }
    next(p);
    set_items(n, &params);
    block_end(p, "macro");
    int saved = p->loop_depth;
    p->loop_depth = 0;
    static const char *const ends[] = {"endmacro"};
    n->b = parse_body(p, ends, 1, op);
    p->loop_depth = saved;
    tag_end(p, "endmacro");
    return n;
}

static struct jnode *parse_statement(struct parser *p)
{
    const struct jtoken *t = tag_begin(p);
    struct opener op = {.tok = t};
    enter(p);
    struct jnode *n;
    if (tok_is_name(t, "if")) {
        op.tag = "if", op.end = "endif";
        n = parse_if_chain(p, t, &op);
    } else if (tok_is_name(t, "for")) {
        op.tag = "for", op.end = "endfor";
        n = parse_for(p, t, &op);
    } else if (tok_is_name(t, "set")) {
        op.tag = "set", op.end = "endset";
        n = parse_set(p, t, &op);
    } else if (tok_is_name(t, "macro")) {
        op.tag = "macro", op.end = "endmacro";
        n = parse_macro(p, t, &op);
    } else if (tok_is_name(t, "filter")) {
        op.tag = "filter", op.end = "endfilter";
        n = node(p, JN_FILTERBLOCK, t);
        n->b = parse_filter_chain(p, node(p, JN_CAPTURED, t));
        block_end(p, "filter");
        static const char *const ends[] = {"endfilter"};
        n->a = parse_body(p, ends, 1, &op);
        tag_end(p, "endfilter");
    } else if (tok_is_name(t, "generation")) {
        op.tag = "generation", op.end = "endgeneration";
        block_end(p, "generation");
        static const char *const ends[] = {"endgeneration"};
        n = parse_body(p, ends, 1, &op);
        tag_end(p, "endgeneration");
    } else if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        bool brk = tok_is_name(t, "break");
        if (!p->loop_depth)
            fail(p, t, "'%s' outside of a for loop", brk ? "break" : "continue");
        n = node(p, brk ? JN_BREAK : JN_CONTINUE, t);
        block_end(p, brk ? "break" : "continue");
    } else {
        static const char *const unsupported[] = {"call", "block", "extends", "include", "import",
                                                  "from", "with", "autoescape", "do", "trans"};
        for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++)
            if (tok_is_name(t, unsupported[k]))
                fail(p, t, "unsupported tag '%s'", unsupported[k]);
        char buf[64];
        if (t->kind != JT_NAME)
            fail(p, t, "expected a tag name after '{%%', found %s", tok_desc(t, buf, sizeof buf));
        fail(p, t, "unknown tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
    }
    leave(p);
    return n;
}

static bool is_closing_tag(const struct jtoken *t)
{
    static const char *const words[] = {"else", "elif", "endif", "endfor", "endset", "endmacro",
                                        "endfilter", "endgeneration", "endraw", "endcall",
                                        "endblock", "endwith", "endautoescape"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (tok_is_name(t, words[k]))
            return true;
    return false;
}

static struct jnode *parse_body(struct parser *p, const char *const *ends, size_t nends,
                                const struct opener *op)
{
    struct jnode *block = node(p, JN_BLOCK, cur(p));
    struct nvec items = {0};
    char buf[64];
    for (;;) {
        const struct jtoken *t = cur(p);
        switch (t->kind) {
        case JT_EOF:
            if (op)
                fail(p, op->tok, "'{%% %s %%}' is never closed (expected '{%% %s %%}')", op->tag,
                     op->end);
            set_items(block, &items);
            return block;
        case JT_TEXT: {
            next(p);
            struct jnode *n = node(p, JN_TEXT, t);
            n->lit = lit_str(p, t->s, t->len);
            vpush(p, &items, n);
            break;
        }
        case JT_VAR_BEGIN: {
            next(p);
            if (cur(p)->kind == JT_VAR_END)
                fail(p, t, "empty expression '{{ }}'");
            struct jnode *n = node(p, JN_OUTPUT, t);
            n->a = parse_tuple(p, true);
            if (cur(p)->kind != JT_VAR_END)
                fail(p, cur(p), "expected '}}', found %s", tok_desc(cur(p), buf, sizeof buf));
            next(p);
            vpush(p, &items, n);
            break;
        }
        case JT_BLOCK_BEGIN: {
            const struct jtoken *name = peek(p, 1);
            for (size_t k = 0; k < nends; k++)
                if (tok_is_name(name, ends[k])) {
                    set_items(block, &items);
                    return block;
                }
            if (is_closing_tag(name)) {
                if (op)
                    fail(p, name,
                         "unexpected '{%% %.*s %%}': expected '{%% %s %%}' to close the '{%% %s %%}' "
                         "at line %u, column %u",
                         (int)name->len, name->s, op->end, op->tag, op->tok->line, op->tok->col);
                fail(p, name, "unexpected '{%% %.*s %%}' with no open block", (int)name->len,
                     name->s);
            }
            vpush(p, &items, parse_statement(p));
            break;
        }
        default:
            fail(p, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
        }
    }
}

enum ll_status jparse(struct jarena *a, const struct jtoken *toks, size_t ntoks,
                      struct jnode **root, struct ll_err *err)
{
    struct parser p = {.a = a, .t = toks, .n = ntoks, .err = err};
    if (setjmp(p.jb))
        return p.code;
    *root = parse_body(&p, NULL, 0, NULL);
    return LL_OK;
}
