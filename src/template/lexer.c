/*
 * lexer.c: template source -> tokens.
 *
 * Splits the source into text and tags, applying the whitespace rules Hugging Face renders
 * chat templates with: one trailing newline of the template is dropped, `{%-`/`-%}` (and the
 * `{{-`, `-}}`, `{#-`, `-#}` forms) strip all whitespace on that side, trim_blocks drops the
 * first newline after a block or comment tag, lstrip_blocks drops spaces and tabs between the
 * start of a line and a block or comment tag (`{%+` / `+%}` turn those two off for one tag).
 * `{% raw %}...{% endraw %}` becomes one text token. Inside tags it produces names, numbers,
 * decoded string literals (Python escapes) and operators; brackets are balanced so that `}}`
 * inside a dict literal does not close the tag.
 *
 * Runs once per compile, single-threaded. Every token carries the 1-based line and column
 * (in code points) of its first character; errors name the construct and that position.
 */
#include "jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lexer {
    struct jarena *a;
    const char *src;
    size_t len, pos;
    struct jtoken *toks;
    size_t n, cap;
    struct ll_err *err;
    enum ll_status code;
    jmp_buf jb;
    /* line/column cache: offset scan_off is at line scan_line, column scan_col */
    size_t scan_off;
    uint32_t scan_line, scan_col;
};

static void position(struct lexer *lx, size_t off, uint32_t *line, uint32_t *col)
{
    if (off < lx->scan_off) { /* only errors look backwards: rescan from the start */
        lx->scan_off = 0;
        lx->scan_line = 1;
        lx->scan_col = 1;
    }
    for (size_t i = lx->scan_off; i < off; i++) {
        unsigned char c = (unsigned char)lx->src[i];
        if (c == '\n') {
            lx->scan_line++;
            lx->scan_col = 1;
        } else if ((c & 0xC0) != 0x80) { /* count code points, not continuation bytes */
            lx->scan_col++;
        }
    }
    lx->scan_off = off;
    *line = lx->scan_line;
    *col = lx->scan_col;
}

static uint32_t col_of(struct lexer *lx, size_t off)
{
    uint32_t line, col;
    position(lx, off, &line, &col);
    return col;
}

__attribute__((format(printf, 3, 4))) _Noreturn static void fail(struct lexer *lx, size_t off,
                                                                  const char *fmt, ...)
{
    uint32_t line, col;
    position(lx, off, &line, &col);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ll_err_set(lx->err, LL_ETEMPLATE, "line %u, column %u: %s", line, col, msg);
    lx->code = LL_ETEMPLATE;
    longjmp(lx->jb, 1);
}

_Noreturn static void fail_nomem(struct lexer *lx)
{
    ll_err_set(lx->err, LL_ENOMEM, "out of memory while reading the template");
    lx->code = LL_ENOMEM;
    longjmp(lx->jb, 1);
}

static struct jtoken *push(struct lexer *lx, uint8_t kind, size_t off)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct jtoken *t = realloc(lx->toks, cap * sizeof *t);
        if (!t)
            fail_nomem(lx);
        lx->toks = t;
        lx->cap = cap;
    }
    struct jtoken *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    position(lx, off, &t->line, &t->col);
    return t;
}

static bool starts(const struct lexer *lx, size_t off, const char *s)
{
    size_t n = strlen(s);
    return off + n <= lx->len && memcmp(lx->src + off, s, n) == 0;
}

/* End of s[start..end) with trailing Unicode whitespace removed. */
static size_t rstrip_ws(const char *s, size_t start, size_t end)
{
    size_t keep = start;
    for (size_t i = start; i < end;) {
        int32_t cp = jutf8_next(s, end, &i);
        if (!jutf8_is_space(cp))
            keep = i;
    }
    return keep;
}

static size_t skip_ws(const struct lexer *lx, size_t off)
{
    while (off < lx->len) {
        size_t j = off;
        int32_t cp = jutf8_next(lx->src, lx->len, &j);
        if (!jutf8_is_space(cp))
            break;
        off = j;
    }
    return off;
}

/* Emit the text src[start..end) before a tag, applying the tag's left whitespace rule:
 * mod is the character after the tag opener ('-', '+' or other), lstrip whether
 * lstrip_blocks applies to this kind of tag. */
static void emit_text(struct lexer *lx, size_t start, size_t end, char mod, bool lstrip)
{
    if (mod == '-') {
        end = rstrip_ws(lx->src, start, end);
    } else if (lstrip && mod != '+') {
        size_t k = end;
        while (k > start && (lx->src[k - 1] == ' ' || lx->src[k - 1] == '\t'))
            k--;
        bool line_start = k > start ? lx->src[k - 1] == '\n' : (start == 0 || lx->src[start - 1] == '\n');
        if (line_start)
            end = k;
    }
    if (end > start) {
        struct jtoken *t = push(lx, JT_TEXT, start);
        t->s = lx->src + start;
        t->len = end - start;
    }
}

/* After a tag closer at off (just past it): apply `-` (strip all) or trim_blocks. */
static size_t after_close(struct lexer *lx, size_t off, char mod, bool trim)
{
    if (mod == '-')
        return skip_ws(lx, off);
    if (trim && mod != '+' && off < lx->len && lx->src[off] == '\n')
        return off + 1;
    return off;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The value of `digits` hex digits at off; past 0x10FFFF (no code point) it stops growing, so
 * eight digits cannot overflow and the caller's range check still refuses it. */
static int32_t read_hex(struct lexer *lx, size_t off, int digits, size_t esc_off)
{
    int32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = off + (size_t)k < lx->len ? hexval(lx->src[off + k]) : -1;
        if (h < 0)
            fail(lx, esc_off, "invalid escape sequence in string literal (expected %d hex digits)",
                 digits);
        if (v <= 0x10FFFF)
            v = v * 16 + h;
    }
    return v;
}

/* String literal starting at the quote; Python escapes (unknown ones are kept verbatim). */
static size_t lex_string(struct lexer *lx, size_t off)
{
    char q = lx->src[off];
    size_t i = off + 1, end = i;
    while (end < lx->len && lx->src[end] != q)
        end += lx->src[end] == '\\' ? 2 : 1;
    if (end >= lx->len)
        fail(lx, off, "unterminated string literal");
    /* escapes only shrink the text, so the raw length is enough room */
    char *buf = jarena_alloc(lx->a, end - off + 1);
    if (!buf)
        fail_nomem(lx);
    size_t n = 0;
    for (;;) {
        if (i >= lx->len)
            fail(lx, off, "unterminated string literal");
        char c = lx->src[i];
        if (c == q)
            break;
        if (c != '\\') {
            buf[n++] = c;
            i++;
            continue;
        }
        size_t esc = i++;
        if (i >= lx->len)
            fail(lx, off, "unterminated string literal");
        char e = lx->src[i++];
        int32_t cp = -1;
        switch (e) {
        case 'n': buf[n++] = '\n'; break;
        case 't': buf[n++] = '\t'; break;
        case 'r': buf[n++] = '\r'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'v': buf[n++] = '\v'; break;
        case 'a': buf[n++] = '\a'; break;
        case '\\': buf[n++] = '\\'; break;
        case '\'': buf[n++] = '\''; break;
        case '"': buf[n++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x':
            cp = read_hex(lx, i, 2, esc);
            i += 2;
            break;
        case 'u':
            cp = read_hex(lx, i, 4, esc);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && starts(lx, i, "\\u")) {
                int32_t lo = read_hex(lx, i + 2, 4, i);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                fail(lx, esc, "unpaired surrogate \\u%04x in string literal", (unsigned)cp);
            break;
        case 'U':
            cp = read_hex(lx, i, 8, esc);
            i += 8;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                fail(lx, esc, "invalid code point in \\U escape");
            break;
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int k = 0; k < 2 && i < lx->len && lx->src[i] >= '0' && lx->src[i] <= '7'; k++)
                    cp = cp * 8 + (lx->src[i++] - '0');
            } else {
                buf[n++] = '\\';
                buf[n++] = e;
            }
        }
        if (cp >= 0)
            n += (size_t)jutf8_put(buf + n, cp);
    }
    struct jtoken *t = push(lx, JT_STRING, off);
    buf[n] = 0;
    t->s = buf;
    t->len = n;
    return i + 1;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

static size_t lex_number(struct lexer *lx, size_t off)
{
    char buf[128];
    size_t n = 0, i = off;
    bool is_float = false;
    bool after_dot = lx->n > 0 && lx->toks[lx->n - 1].kind == JT_OP &&
                     lx->toks[lx->n - 1].op == JOP_DOT;
    while (i < lx->len && (is_digit(lx->src[i]) || (lx->src[i] == '_' && i + 1 < lx->len && is_digit(lx->src[i + 1])))) {
        if (lx->src[i] != '_' && n < sizeof buf - 8)
            buf[n++] = lx->src[i];
        i++;
    }
    if (!after_dot && i + 1 < lx->len && lx->src[i] == '.' && is_digit(lx->src[i + 1])) {
        is_float = true;
        buf[n++] = '.';
        i++;
        while (i < lx->len && (is_digit(lx->src[i]) || lx->src[i] == '_')) {
            if (lx->src[i] != '_' && n < sizeof buf - 8)
                buf[n++] = lx->src[i];
            i++;
        }
    }
    if (!after_dot && i < lx->len && (lx->src[i] == 'e' || lx->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->len && (lx->src[j] == '+' || lx->src[j] == '-'))
            j++;
        if (j < lx->len && is_digit(lx->src[j])) {
            is_float = true;
            buf[n++] = 'e';
            for (size_t k = i + 1; k < j; k++)
                buf[n++] = lx->src[k];
            i = j;
            while (i < lx->len && is_digit(lx->src[i])) {
                if (n < sizeof buf - 1)
                    buf[n++] = lx->src[i];
                i++;
            }
        }
    }
    buf[n] = 0;
    struct jtoken *t = push(lx, is_float ? JT_FLOAT : JT_INT, off);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (n > 19 || v > (unsigned long long)INT64_MAX)
            fail(lx, off, "integer literal %s is too large", buf);
        t->i = (int64_t)v;
    }
    return i;
}

struct opdef {
    const char *s;
    uint8_t op;
};
static const struct opdef ops[] = {
    {"//", JOP_FLOORDIV}, {"**", JOP_POW}, {"==", JOP_EQ}, {"!=", JOP_NE}, {"<=", JOP_LE},
    {">=", JOP_GE},       {"+", JOP_ADD},  {"-", JOP_SUB}, {"*", JOP_MUL}, {"/", JOP_DIV},
    {"%", JOP_MOD},       {"~", JOP_TILDE}, {"<", JOP_LT}, {">", JOP_GT},  {"=", JOP_ASSIGN},
    {"(", JOP_LPAREN},    {")", JOP_RPAREN}, {"[", JOP_LBRACKET}, {"]", JOP_RBRACKET},
    {"{", JOP_LBRACE},    {"}", JOP_RBRACE}, {",", JOP_COMMA}, {".", JOP_DOT}, {":", JOP_COLON},
    {"|", JOP_PIPE},
};

/* Tokens inside a tag opened at `open` (pointing at '{'); returns the offset after the closer. */
static size_t lex_tag(struct lexer *lx, size_t open, bool block)
{
    size_t i = open + 2;
    if (i < lx->len && (lx->src[i] == '-' || lx->src[i] == '+'))
        i++;
    /* open brackets, so that `}}` inside `{...}` does not close the tag (as in jinja2) */
    int depth = 0;
    size_t bracket_off[64];
    char bracket[64];
    for (;;) {
        while (i < lx->len && (lx->src[i] == ' ' || lx->src[i] == '\t' || lx->src[i] == '\n' ||
                               lx->src[i] == '\r' || lx->src[i] == '\v' || lx->src[i] == '\f'))
            i++;
        if (i >= lx->len) {
            if (depth > 0)
                fail(lx, bracket_off[depth - 1], "unclosed '%c' in %s", bracket[depth - 1],
                     block ? "'{%' tag" : "'{{' expression");
            fail(lx, open, block ? "unterminated '{%%' tag (missing '%%}')"
                                 : "unterminated '{{' expression (missing '}}')");
        }
        if (depth == 0) {
            char mod = 0;
            size_t c = i;
            if (lx->src[c] == '-' || lx->src[c] == '+') {
                mod = lx->src[c];
                c++;
            }
            if (block ? starts(lx, c, "%}") : (mod != '+' && starts(lx, c, "}}"))) {
                push(lx, block ? JT_BLOCK_END : JT_VAR_END, i);
                return after_close(lx, c + 2, mod, block);
            }
            if (!block && starts(lx, i, "%}"))
                fail(lx, i, "unexpected '%%}' inside a '{{' expression (missing '}}')");
            if (block && starts(lx, i, "}}"))
                fail(lx, i, "unexpected '}}' inside a '{%%' tag (missing '%%}')");
        }
        char c = lx->src[i];
        if (c == '\'' || c == '"') {
            i = lex_string(lx, i);
        } else if (is_digit(c)) {
            i = lex_number(lx, i);
        } else if (is_name_start(c)) {
            size_t j = i;
            while (j < lx->len && is_name_char(lx->src[j]))
                j++;
            struct jtoken *t = push(lx, JT_NAME, i);
            t->s = lx->src + i;
            t->len = j - i;
            i = j;
        } else {
            const struct opdef *od = NULL;
            for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
                if (starts(lx, i, ops[k].s)) {
                    od = &ops[k];
                    break;
                }
            if (!od) {
                size_t j = i;
                int32_t cp = jutf8_next(lx->src, lx->len, &j);
                if (cp > 0x20 && cp != 0x7F)
                    fail(lx, i, "unexpected character '%.*s' in %s", (int)(j - i), lx->src + i,
                         block ? "'{%' tag" : "'{{' expression");
                fail(lx, i, "unexpected character U+%04X in %s", (unsigned)(cp < 0 ? -cp : cp),
                     block ? "'{%' tag" : "'{{' expression");
            }
            if (od->op == JOP_LPAREN || od->op == JOP_LBRACKET || od->op == JOP_LBRACE) {
                if (depth == 64)
                    fail(lx, i, "brackets nested too deeply (more than 64 levels)");
                bracket_off[depth] = i;
                bracket[depth++] = od->s[0];
            } else if (od->op == JOP_RPAREN || od->op == JOP_RBRACKET || od->op == JOP_RBRACE) {
                char want = od->op == JOP_RPAREN ? '(' : od->op == JOP_RBRACKET ? '[' : '{';
                if (depth == 0)
                    fail(lx, i, "unexpected '%c'", od->s[0]);
                if (bracket[depth - 1] != want)
                    fail(lx, i, "unexpected '%c', expected '%c' to close the '%c' at column %u",
                         od->s[0], bracket[depth - 1] == '(' ? ')' : bracket[depth - 1] == '[' ? ']' : '}',
                         bracket[depth - 1], col_of(lx, bracket_off[depth - 1]));
                depth--;
            }
            struct jtoken *t = push(lx, JT_OP, i);
            t->op = od->op;
            t->s = lx->src + i;
            t->len = strlen(od->s);
            i += t->len;
        }
    }
}

/* If the block tag at `open` is `{% raw %}`, emit its body as text and return the offset after
 * `{% endraw %}`; return 0 when it is not a raw tag. */
static size_t lex_raw(struct lexer *lx, size_t open)
{
    size_t i = open + 2;
    if (i < lx->len && (lx->src[i] == '-' || lx->src[i] == '+'))
        i++;
    while (i < lx->len && (lx->src[i] == ' ' || lx->src[i] == '\t' || lx->src[i] == '\n'))
        i++;
    if (!starts(lx, i, "raw") || (i + 3 < lx->len && is_name_char(lx->src[i + 3])))
        return 0;
    i += 3;
    while (i < lx->len && (lx->src[i] == ' ' || lx->src[i] == '\t' || lx->src[i] == '\n'))
        i++;
    char mod = 0;
    if (i < lx->len && (lx->src[i] == '-' || lx->src[i] == '+'))
        mod = lx->src[i++];
    if (!starts(lx, i, "%}"))
        fail(lx, open, "malformed '{%% raw %%}' tag");
    size_t body = after_close(lx, i + 2, mod, true);
    /* find {% endraw %} */
    for (size_t p = body; p + 1 < lx->len; p++) {
        if (lx->src[p] != '{' || lx->src[p + 1] != '%')
            continue;
        size_t j = p + 2;
        char emod = 0;
        if (j < lx->len && (lx->src[j] == '-' || lx->src[j] == '+'))
            emod = lx->src[j++];
        while (j < lx->len && (lx->src[j] == ' ' || lx->src[j] == '\t' || lx->src[j] == '\n'))
            j++;
        if (!starts(lx, j, "endraw"))
            continue;
        j += 6;
        while (j < lx->len && (lx->src[j] == ' ' || lx->src[j] == '\t' || lx->src[j] == '\n'))
            j++;
        char cmod = 0;
        if (j < lx->len && (lx->src[j] == '-' || lx->src[j] == '+'))
            cmod = lx->src[j++];
        if (!starts(lx, j, "%}"))
            continue;
        emit_text(lx, body, p, emod, true);
        return after_close(lx, j + 2, cmod, true);
    }
    fail(lx, open, "unterminated '{%% raw %%}' block (missing '{%% endraw %%}')");
}

enum ll_status jlex(struct jarena *a, const char *src, size_t len, struct jtoken **toks,
                    size_t *ntoks, struct ll_err *err)
{
    struct lexer lx = {.a = a, .src = src, .len = len, .err = err, .scan_line = 1, .scan_col = 1};
    if (setjmp(lx.jb)) {
        free(lx.toks);
        return lx.code;
    }
    if (lx.len > 0 && src[lx.len - 1] == '\n')
        lx.len--; /* keep_trailing_newline=False */
    size_t text = 0, i = 0;
    while (i + 1 < lx.len) {
        if (src[i] != '{' || (src[i + 1] != '{' && src[i + 1] != '%' && src[i + 1] != '#')) {
            i++;
            continue;
        }
        char kind = src[i + 1];
        char mod = i + 2 < lx.len ? src[i + 2] : 0;
        if (kind == '#') {
            emit_text(&lx, text, i, mod, true);
            size_t j = i + 2;
            for (;; j++) {
                if (j + 1 >= lx.len)
                    fail(&lx, i, "unterminated comment (missing '#}')");
                if (src[j] == '#' && src[j + 1] == '}')
                    break;
            }
            char cmod = j > i + 2 && (src[j - 1] == '-' || src[j - 1] == '+') ? src[j - 1] : 0;
            if (j - 1 == i + 2 && (mod == '-' || mod == '+'))
                cmod = 0; /* "{#-#}": the one dash belongs to the opener */
            text = i = after_close(&lx, j + 2, cmod, true);
            continue;
        }
        if (kind == '%') {
            /* the text before the tag gets the block rules, raw or not */
            emit_text(&lx, text, i, mod, true);
            size_t end = lex_raw(&lx, i);
            if (end) {
                text = i = end;
                continue;
            }
            push(&lx, JT_BLOCK_BEGIN, i);
        } else {
            emit_text(&lx, text, i, mod, false);
            push(&lx, JT_VAR_BEGIN, i);
        }
        text = i = lex_tag(&lx, i, kind == '%');
    }
    emit_text(&lx, text, lx.len, 0, false);
    push(&lx, JT_EOF, lx.len);
    *toks = jarena_alloc(a, lx.n * sizeof **toks);
    if (!*toks) {
        free(lx.toks);
        return ll_err_set(err, LL_ENOMEM, "out of memory while reading the template");
    }
    memcpy(*toks, lx.toks, lx.n * sizeof **toks);
    *ntoks = lx.n;
    free(lx.toks);
    return LL_OK;
}
