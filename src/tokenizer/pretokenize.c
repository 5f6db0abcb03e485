/*
 * pretokenize.c: the Qwen2 and Llama 3 pre-tokenizers, a hand-written matcher for exactly the
 * split regex
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 *
 * (Qwen2's; Llama 3's is the same with \p{N}{1,3} for \p{N}: digits go in runs of up to three)
 * with the leftmost-first alternation and greedy backtracking of the regex engines Hugging Face
 * uses, over Unicode general categories from utf8proc (\p{L}, \p{N}) and the White_Space
 * property (\s). Every character of the input belongs to exactly one match, so the pieces cover
 * the text. Linear time: each alternative decides by looking at most two characters ahead, plus
 * one scan of a run that the match then consumes.
 *
 * Also owns the code point class table (built per tokenizer at load; read-only afterwards).
 * Any thread.
 */
#include <utf8proc.h>

#include "tokenizer_impl.h"

const char tok_qwen2_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char tok_llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint8_t classify(uint32_t c)
{
    uint8_t k = 0;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        k = TOK_CP_L | TOK_CP_WORD;
        break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
        k = TOK_CP_N | TOK_CP_WORD;
        break;
    case UTF8PROC_CATEGORY_NO:
        k = TOK_CP_N;
        break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_PC:
        k = TOK_CP_WORD;
        break;
    default:
        break;
    }
    if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9)) /* joiners, Ⓐ..ⓩ */
        k |= TOK_CP_WORD;
    if (is_white_space(c))
        k |= TOK_CP_WS;
    if (c == '\r' || c == '\n')
        k |= TOK_CP_CRLF;
    return k;
}

void tok_cp_class_init(uint8_t *table)
{
    for (uint32_t c = 0; c < 0x10000; c++)
        table[c] = classify(c);
}

uint8_t tok_cp_class(const struct tokenizer *tok, uint32_t cp)
{
    return cp < 0x10000 ? tok->cp_class[cp] : classify(cp);
}

/* The text being split; all positions are byte offsets at character starts. */
struct text {
    const struct tokenizer *tok;
    const unsigned char *s;
    size_t n;
};

/* Length, code point and class of the character at i (< n). */
static inline size_t char_at(const struct text *t, size_t i, uint32_t *cp, uint8_t *cls)
{
    size_t len = tok_utf8_decode(t->s + i, t->n - i, cp);
    *cls = tok_cp_class(t->tok, *cp);
    return len;
}

static inline uint8_t class_at(const struct text *t, size_t i)
{
    uint32_t cp;
    uint8_t k;
    char_at(t, i, &cp, &k);
    return k;
}

/* End of the run of characters from i whose class has any of `want` and none of `avoid`. */
static size_t scan_run(const struct text *t, size_t i, uint8_t want, uint8_t avoid)
{
    while (i < t->n) {
        uint32_t cp;
        uint8_t k;
        size_t len = char_at(t, i, &cp, &k);
        if (!(k & want) || (k & avoid))
            break;
        i += len;
    }
    return i;
}

/* `[^\s\p{L}\p{N}]+[\r\n]*` from i, where the character at i is known to be in the class. */
static size_t scan_symbols(const struct text *t, size_t i)
{
    while (i < t->n) {
        uint32_t cp;
        uint8_t k;
        size_t len = char_at(t, i, &cp, &k);
        if (k & (TOK_CP_WS | TOK_CP_L | TOK_CP_N))
            break;
        i += len;
    }
    while (i < t->n && (t->s[i] == '\r' || t->s[i] == '\n'))
        i++;
    return i;
}

/* `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after the apostrophe at i1 - 1: end of the match, or 0. */
static size_t contraction(const struct text *t, size_t i1)
{
    if (i1 >= t->n)
        return 0;
    uint32_t c;
    uint8_t k;
    size_t len = char_at(t, i1, &c, &k);
    /* case-insensitive: U+017F (long s) folds to s */
    if (c == 's' || c == 'S' || c == 0x17F || c == 't' || c == 'T' || c == 'm' || c == 'M' ||
        c == 'd' || c == 'D')
        return i1 + len;
    size_t i2 = i1 + len;
    if (i2 >= t->n)
        return 0;
    unsigned c2 = t->s[i2];
    if ((c == 'r' || c == 'R' || c == 'v' || c == 'V') && (c2 == 'e' || c2 == 'E'))
        return i2 + 1;
    if ((c == 'l' || c == 'L') && (c2 == 'l' || c2 == 'L'))
        return i2 + 1;
    return 0;
}

/* End of the match that starts at i (< n). */
static size_t match_at(const struct text *t, size_t i)
{
    uint32_t c0;
    uint8_t k0;
    size_t i1 = i + char_at(t, i, &c0, &k0);
    size_t end;

    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c0 == '\'' && (end = contraction(t, i1)) != 0)
        return end;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k0 & TOK_CP_L)
        return scan_run(t, i1, TOK_CP_L, 0);
    if (!(k0 & (TOK_CP_CRLF | TOK_CP_L | TOK_CP_N)) && i1 < t->n && (class_at(t, i1) & TOK_CP_L))
        return scan_run(t, i1, TOK_CP_L, 0);
    /* \p{N}{1,max_digits} */
    if (k0 & TOK_CP_N) {
        size_t end = i1;
        for (int d = 1; d < t->tok->max_digits && end < t->n; d++) {
            uint32_t cp;
            uint8_t k;
            size_t len = char_at(t, end, &cp, &k);
            if (!(k & TOK_CP_N))
                break;
            end += len;
        }
        return end;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (!(k0 & TOK_CP_WS))
        return scan_symbols(t, i1);
    if (c0 == ' ' && i1 < t->n && !(class_at(t, i1) & (TOK_CP_WS | TOK_CP_L | TOK_CP_N)))
        return scan_symbols(t, i1);

    /* c0 is white space: look at the whole run once */
    size_t j = i, last = i, crlf_end = 0;
    while (j < t->n) {
        uint32_t cp;
        uint8_t k;
        size_t len = char_at(t, j, &cp, &k);
        if (!(k & TOK_CP_WS))
            break;
        if (k & TOK_CP_CRLF)
            crlf_end = j + len;
        last = j;
        j += len;
    }
    /* \s*[\r\n]+ : backtracking from the right stops at the last line break of the run */
    if (crlf_end)
        return crlf_end;
    /* \s+(?!\S) : the whole run at the end of text, else all but its last character */
    if (j == t->n)
        return j;
    if (last > i)
        return last;
    /* \s+ */
    return j;
}

enum ll_status tok_pretokenize(const struct tokenizer *tok, const char *s, size_t n,
                               tok_part_fn fn, void *ctx)
{
    struct text t = {tok, (const unsigned char *)s, n};
    size_t i = 0;
    while (i < n) {
        size_t end = match_at(&t, i);
        enum ll_status st = fn(ctx, s + i, end - i, -1);
        if (st != LL_OK)
            return st;
        i = end;
    }
    return LL_OK;
}
