/*
 * jinja.h: internal contract between the parts of the chat-template engine (a Jinja subset).
 *
 *   lexer.c   source text -> tokens (whitespace control, trim_blocks, lstrip_blocks, raw)
 *   parser.c  tokens -> AST (struct jnode), filters and tests resolved to builtins
 *   value.c   dynamic values (struct jv), refcounted heap objects, to-string and JSON writers
 *   eval.c    AST interpreter: scopes, statements, operators, limits, errors with positions
 *   filters.c builtin filters and tests
 *   methods.c methods of strings/dicts/lists/loop and the global functions
 *
 * Ownership: the AST and everything it points to live in a struct jarena owned by the compiled
 * template and are never written after compilation, so one template may be rendered by many
 * threads at once. Each render owns a struct jrender: every heap value it creates is linked into
 * the render's object list, so an error (longjmp out of the evaluator) or a reference cycle
 * through a namespace leaks nothing: the list is freed when the render ends.
 *
 * Value convention: functions returning a struct jv return a new reference (the caller releases
 * it); struct jv arguments are borrowed unless a comment says otherwise.
 */
#ifndef LLAISYS_TEMPLATE_JINJA_H
#define LLAISYS_TEMPLATE_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "errors.h"

/* ------------------------------------------------------------------ arena (compile time) */

struct jarena;
struct jarena *jarena_new(void);
void jarena_free(struct jarena *a);
/* Zeroed, 16-byte aligned memory that lives as long as the arena; NULL on no memory. */
void *jarena_alloc(struct jarena *a, size_t bytes);
/* NUL-terminated copy of s[0..len) in the arena; NULL on no memory. */
char *jarena_strndup(struct jarena *a, const char *s, size_t len);

/* ------------------------------------------------------------------ values */

enum jv_kind {
    JV_MISSING, /* an absent optional argument; never a template-visible value */
    JV_UNDEF,   /* jinja2 Undefined; u.name is the name that was looked up (may be NULL) */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* list or tuple */
    JV_DICT,
    JV_NS, /* namespace(): a dict whose attributes can be assigned */
    JV_LOOP,
    JV_FUNC, /* builtin global, bound method or macro */
};

/* Every heap object starts with this header. rc < 0 marks a static (immortal) object, whose
 * count is never touched (AST literals, builtin globals): that is what keeps templates
 * shareable across threads. */
struct jobj {
    int32_t rc;
    uint8_t kind;
    size_t bytes; /* accounted size, for the memory limit */
    struct jobj *prev, *next;
};

struct jv {
    uint8_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        const char *name; /* JV_UNDEF: the name looked up, for messages; NULL or memory that
                             outlives the render (the AST, string literals) */
        struct jstr *s;
        struct jlist *l;
        struct jdict *d; /* JV_DICT and JV_NS */
        struct jloop *lp;
        struct jfunc *fn;
        struct jobj *obj;
    } u;
};

struct jstr {
    struct jobj h;
    size_t len;
    char s[]; /* UTF-8, NUL-terminated (may also contain NULs) */
};

struct jlist {
    struct jobj h;
    size_t n, cap;
    struct jv *v;
    bool tuple;
};

struct jdict { /* insertion-ordered, string keys */
    struct jobj h;
    size_t n, cap;
    struct jstr **k;
    struct jv *v;
};

struct jloop { /* the `loop` variable of one for statement */
    struct jobj h;
    int64_t index0, length;
    struct jlist *items; /* the (filtered) items, for previtem/nextitem */
};

struct jrender;
struct jnode;
struct jbuiltin;

#define JMAX_ARGS 16

/* Evaluated call arguments (borrowed references owned by the caller of the builtin). */
struct jargs {
    size_t n;
    struct jv pos[JMAX_ARGS];
    size_t nkw;
    const char *kwname[JMAX_ARGS];
    struct jv kw[JMAX_ARGS];
};

/* A builtin: `self` is the filter/test operand or the method's object (JV_MISSING for
 * globals); argv holds the parameters bound by name from `params` (JV_MISSING when absent),
 * or is NULL when params is "*" and the builtin reads `raw` itself. Returns a new reference. */
typedef struct jv (*jbuiltin_fn)(struct jrender *r, const struct jnode *at, struct jv self,
                                 const struct jv *argv, const struct jargs *raw);
struct jbuiltin {
    const char *name;
    const char *params; /* "a,b,c" bound positionally or by keyword; "*" = unbound */
    jbuiltin_fn fn;
};

struct jfunc {
    struct jobj h;
    const struct jbuiltin *b;    /* builtin, or NULL for a macro */
    const struct jnode *macro;   /* JN_MACRO node when b == NULL */
    struct jv self;              /* bound object of a method (JV_MISSING otherwise) */
};

static inline struct jv jv_undef(const char *name)
{
    struct jv v = {.kind = JV_UNDEF};
    v.u.name = name;
    return v;
}
static inline struct jv jv_none(void) { return (struct jv){.kind = JV_NONE}; }
static inline struct jv jv_missing(void) { return (struct jv){.kind = JV_MISSING}; }
static inline struct jv jv_bool(bool b)
{
    struct jv v = {.kind = JV_BOOL};
    v.u.b = b;
    return v;
}
static inline struct jv jv_int(int64_t i)
{
    struct jv v = {.kind = JV_INT};
    v.u.i = i;
    return v;
}
static inline struct jv jv_float(double f)
{
    struct jv v = {.kind = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline bool jv_is_heap(struct jv v) { return v.kind >= JV_STR; }

/* Reference counting (no-ops for scalars and static objects). */
struct jv jv_retain(struct jv v);
void jv_release(struct jrender *r, struct jv v);

/* New heap values (fail the render on no memory or over the memory limit). */
struct jv jv_str(struct jrender *r, const char *s, size_t len);
struct jv jv_cstr(struct jrender *r, const char *s);
struct jv jv_list(struct jrender *r, size_t cap);
/* Append, taking ownership of item. */
void jv_list_push(struct jrender *r, struct jv list, struct jv item);
struct jv jv_dict(struct jrender *r, bool ns);
/* Set key (borrowed string value) to val (owned); replaces an existing key in place. */
void jv_dict_set(struct jrender *r, struct jv dict, struct jv key, struct jv val);
/* Borrowed value for key, or NULL. */
struct jv *jv_dict_get(struct jv dict, const char *key, size_t len);
struct jv jv_func(struct jrender *r, const struct jbuiltin *b, const struct jnode *macro,
                  struct jv self);
/* A loop object over items (a list value, retained). */
struct jv jv_loop(struct jrender *r, struct jv items);

/* Python-style truthiness (undefined and none are false, empty containers are false). */
bool jv_truthy(struct jv v);
/* Deep equality following Python (1 == 1.0 == true; lists elementwise; dicts by keys). */
bool jv_equal(struct jv a, struct jv b);
/* Name of a kind for messages ("string", "list", ...). */
const char *jv_kind_name(struct jv v);
/* Number of Unicode code points in a UTF-8 byte string. */
size_t jutf8_count(const char *s, size_t len);
/* Decode one code point at s[*i] (advancing *i); invalid bytes decode as themselves. */
int32_t jutf8_next(const char *s, size_t len, size_t *i);
/* Encode cp into out (4 bytes room); returns the byte count. */
int jutf8_put(char *out, int32_t cp);
/* Unicode whitespace as Python's str.strip() and JavaScript's trim() see it. */
bool jutf8_is_space(int32_t cp);

/* Writers append to the render's output buffer (which is also the scratch space for building
 * strings: see jr_mark/jr_take). */
enum jv_write_mode {
    JW_PRINT, /* {{ value }}: none and undefined print nothing, containers as JSON-like text */
    JW_STR,   /* str(value) for ~, |string, join: none is "None", undefined is "" */
};
void jv_write(struct jrender *r, const struct jnode *at, struct jv v, enum jv_write_mode mode);
struct jjson_opts {
    int indent; /* 0: single line */
    bool ensure_ascii, sort_keys;
    const char *item_sep, *key_sep; /* NULL: ", " / ": " (or "," / ": " with indent) */
};
/* Write v as JSON the way the tojson filter renders it. */
void jv_write_json(struct jrender *r, const struct jnode *at, struct jv v,
                   const struct jjson_opts *o);
/* str(v) as a new string value. */
struct jv jv_to_str(struct jrender *r, const struct jnode *at, struct jv v);

/* ------------------------------------------------------------------ tokens */

enum jt_kind {
    JT_EOF,
    JT_TEXT,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
};

enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_TILDE,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
    JOP_ASSIGN, JOP_LPAREN, JOP_RPAREN, JOP_LBRACKET, JOP_RBRACKET, JOP_LBRACE, JOP_RBRACE,
    JOP_COMMA, JOP_DOT, JOP_COLON, JOP_PIPE,
};

struct jtoken {
    uint8_t kind, op;
    uint32_t line, col;
    const char *s; /* JT_TEXT, JT_NAME: into the source; JT_STRING: decoded, in the arena */
    size_t len;
    int64_t i;
    double f;
};

/* Tokenize src[0..len) (the template keeps src alive). Returns LL_OK, LL_ETEMPLATE (message
 * names the construct and line:column) or LL_ENOMEM. *toks is arena memory, ending in JT_EOF. */
enum ll_status jlex(struct jarena *a, const char *src, size_t len, struct jtoken **toks,
                    size_t *ntoks, struct ll_err *err);

/* ------------------------------------------------------------------ AST */

enum jn_kind {
    /* expressions */
    JN_LIT,      /* lit */
    JN_NAME,     /* name */
    JN_LIST,     /* items */
    JN_TUPLE,    /* items */
    JN_DICT,     /* items: key, value, key, value ... */
    JN_ATTR,     /* a.name */
    JN_ITEM,     /* a[b] */
    JN_SLICE,    /* a[b:c:d], each of b, c, d may be NULL */
    JN_CALL,     /* a(items), JN_KWARG items are keyword arguments */
    JN_KWARG,    /* name = a */
    JN_FILTER,   /* a | fn(items) */
    JN_TEST,     /* a is [not] fn(items); op = 1 when negated */
    JN_NOT,      /* not a */
    JN_NEG,      /* -a */
    JN_POS,      /* +a */
    JN_BINOP,    /* a op b (arithmetic, ~, comparisons, in) */
    JN_AND,      /* a and b */
    JN_OR,       /* a or b */
    JN_COND,     /* b if a else c (c may be NULL: undefined) */
    JN_CAPTURED, /* the body text of a filter block */
    /* statements */
    JN_BLOCK,    /* items */
    JN_TEXT,     /* lit */
    JN_OUTPUT,   /* {{ a }} */
    JN_IF,       /* if a: b else c (c may be NULL or another JN_IF) */
    JN_FOR,      /* for a in b if c: d else e */
    JN_SET,      /* set a = b */
    JN_SETBLOCK, /* set a | c: body b */
    JN_MACRO,    /* macro name(items: JN_NAME or JN_KWARG with default) body b */
    JN_FILTERBLOCK, /* filter b (a JN_FILTER chain over JN_CAPTURED): body a */
    JN_BREAK,
    JN_CONTINUE,
};

struct jnode {
    uint8_t kind, op;
    uint32_t line, col;
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **items;
    uint32_t n;
    const char *name;
    const struct jbuiltin *fn;
    struct jv lit;
};

/* Parse tokens into an AST rooted at a JN_BLOCK. Returns LL_OK, LL_ETEMPLATE (unknown tag,
 * unknown filter or test, unterminated or mismatched block, bad expression: with line:column)
 * or LL_ENOMEM. */
enum ll_status jparse(struct jarena *a, const struct jtoken *toks, size_t ntoks,
                      struct jnode **root, struct ll_err *err);

/* Builtin tables (filters.c, methods.c): NULL when the name is unknown. */
const struct jbuiltin *jfilter_find(const char *name);
const struct jbuiltin *jtest_find(const char *name);
const struct jbuiltin *jglobal_find(const char *name);
/* Method `name` of a value of the given kind (string, dict, list, loop), or NULL. */
const struct jbuiltin *jmethod_find(uint8_t kind, const char *name);

/* String helpers shared by methods.c and filters.c (results are new string values). */
enum jcase { JC_UPPER, JC_LOWER, JC_CAPITALIZE, JC_TITLE_FILTER, JC_TITLE_METHOD };
struct jv jstr_case(struct jrender *r, const struct jnode *at, struct jv s, enum jcase mode);
/* Strip chars (a string of code points; missing/none: whitespace) from either side. */
struct jv jstr_strip(struct jrender *r, const struct jnode *at, struct jv s, struct jv chars,
                     bool left, bool right);
/* Python str.replace (count < 0: all). */
struct jv jstr_replace(struct jrender *r, const struct jnode *at, struct jv s, struct jv old,
                       struct jv new, int64_t count);
/* dict.items() as a list of (key, value) tuples. */
struct jv jdict_items(struct jrender *r, struct jv d);

/* ------------------------------------------------------------------ render */

struct jlimits {
    size_t max_output;    /* bytes of rendered text (and of any string built) */
    size_t max_memory;    /* bytes of live values */
    uint64_t max_steps;   /* loop iterations + macro calls + range() items */
    int max_call_depth;   /* nested macro calls */
};

/* One top-level variable: a JSON value (json != NULL) or a string (str != NULL). */
struct jinput {
    const char *name;
    const void *json; /* const cJSON * */
    const char *str;
};

struct jvar {
    const char *name;
    struct jv v;
};
struct jframe {
    size_t base;   /* first variable of this frame in jrender.vars */
    size_t parent; /* frame searched after this one */
};

struct jrender {
    jmp_buf jb;
    struct ll_err *err;
    const struct jlimits *lim;
    struct jobj head; /* circular list of every live heap object */
    size_t live_bytes;
    struct ll_buf out; /* the rendered text so far */
    struct jvar *vars;
    size_t nvars, vars_cap;
    struct jframe *frames;
    size_t nframes, frames_cap;
    uint64_t steps;
    int call_depth;
    int depth; /* eval/exec recursion */
    struct jv captured; /* JN_CAPTURED value inside a filter block */
    const struct jnode *cur; /* node being evaluated, for errors raised without one */
    enum ll_status status;   /* carried through the longjmp of jr_fail */
};

/* Render root with the given top-level variables. On LL_OK *out is a malloc'd NUL-terminated
 * string (caller frees) of *out_len bytes. Errors: LL_ETEMPLATE (runtime error or
 * raise_exception, with line:column), LL_ETOOLONG (a limit was hit), LL_ENOMEM. */
enum ll_status jrender_run(const struct jnode *root, const struct jlimits *lim,
                           const struct jinput *in, size_t nin, char **out, size_t *out_len,
                           struct ll_err *err);

/* Fail the render: format the message with the node's line:column and unwind. */
_Noreturn void jr_fail(struct jrender *r, const struct jnode *at, enum ll_status code,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Account for bytes of new live memory (fails over the limit); and release the accounting. */
void jr_account(struct jrender *r, const struct jnode *at, size_t bytes);
/* malloc/realloc that fail the render instead of returning NULL. */
void *jr_malloc(struct jrender *r, size_t bytes);
void *jr_realloc(struct jrender *r, void *p, size_t bytes);
/* Count one unit of work against max_steps. */
void jr_step(struct jrender *r, const struct jnode *at, uint64_t n);
/* Output buffer: append bytes; mark the current end; take [mark, end) as a string value and
 * truncate the buffer back to mark. */
void jr_emit(struct jrender *r, const struct jnode *at, const char *s, size_t len);
static inline size_t jr_mark(const struct jrender *r) { return r->out.len; }
struct jv jr_take(struct jrender *r, size_t mark);
/* Call a function value with evaluated arguments. */
struct jv jr_call(struct jrender *r, const struct jnode *at, struct jv fn, const struct jargs *args);
/* Apply a builtin with argument binding by its params. */
struct jv jr_apply(struct jrender *r, const struct jnode *at, const struct jbuiltin *b,
                   struct jv self, const struct jargs *args);
/* Attribute lookup obj.name as templates see it (dict key, then method; loop fields...).
 * An undefined result carries uname (NULL, or a name that outlives the render). */
struct jv jr_getattr(struct jrender *r, const struct jnode *at, struct jv obj, const char *name,
                     const char *uname);
/* Subscript obj[key]. */
struct jv jr_getitem(struct jrender *r, const struct jnode *at, struct jv obj, struct jv key);
/* Iterate: returns a list value (new reference) of the items `for` would visit. */
struct jv jr_iter_list(struct jrender *r, const struct jnode *at, struct jv v);
/* Run a test builtin (by name, e.g. from select/selectattr) and return its truth. */
bool jr_run_test(struct jrender *r, const struct jnode *at, const char *name, struct jv v,
                 const struct jv *extra, size_t nextra);
/* Python's printf-style `fmt % args` (%s %r %d %i %f %x %%), also the `format` filter. */
struct jv jr_percent_format(struct jrender *r, const struct jnode *at, struct jv fmt,
                            const struct jv *args, size_t nargs);
/* `needle in hay` (strings: substring; lists: equal item; dicts: key). */
bool jr_contains(struct jrender *r, const struct jnode *at, struct jv hay, struct jv needle);
/* Three-way comparison for sort/min/max (fails on incomparable values). */
int jr_compare(struct jrender *r, const struct jnode *at, struct jv a, struct jv b,
               bool case_sensitive);

#endif
