/*
 * pretokenize.c: the pre-tokenizers, hand-written matchers for exactly five split regexes:
 *
 *   Qwen2's:   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Llama 3's: the same with \p{N}{1,3} for \p{N} (digits go in runs of up to three)
 *   tekken's (Mistral-Nemo): no contractions; words split where the case changes,
 *              [^\r\n\p{L}\p{N}]?[U]*[W]+|[^\r\n\p{L}\p{N}]?[U]+[W]*, with
 *              U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]; then
 *              \p{N}, ?[^\s\p{L}\p{N}]+[\r\n/]* and the same three white-space alternatives
 *   o200k's (GPT-4o, Phi-4-mini): tekken's with (?i:'s|'t|'re|'ve|'m|'ll|'d)? after each of
 *              the two word alternatives (greedy, so a contraction right after a word joins
 *              it; an apostrophe elsewhere is a symbol) and \p{N}{1,3}
 *   GPT-2's (the ByteLevel pre-tokenizer's own, use_regex true; its own matcher):
 *              's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *              (case-sensitive contractions, no line-break alternative), optionally after a
 *              Digits pre-tokenizer that cuts the text at numeric characters first
 *
 * with the leftmost-first alternation and greedy backtracking of the regex engines Hugging Face
 * uses, over Unicode general categories from utf8proc (\p{L}, \p{N}, \p{M}, letter cases) and
 * the White_Space property (\s). The differences between the first four are the data of struct
 * split_rules. Every character of the input belongs to exactly one match, so the pieces cover
 * the text. Linear time: each alternative decides by looking at most two characters ahead, plus
 * scans of a run that either the match consumes or the next match, which starts inside it,
 * consumes whole (see cased_word_lower()).
 *
 * Also owns the code point class table (built per tokenizer at load; read-only afterwards).
 * Any thread.
 */
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_impl.h"
#include "util.h"

/* What tells the patterns apart. */
static const struct split_rules {
    const char *name;    /* for messages */
    const char *pattern; /* as tokenizer.json writes it */
    bool contractions;   /* (?i:'s|'t|'re|'ve|'m|'ll|'d) comes first */
    bool cased_words;    /* tekken's two word alternatives instead of [^\r\n\p{L}\p{N}]?\p{L}+ */
    int max_digits;      /* \p{N}{1,max_digits} */
    bool symbol_slash;   /* a symbol run ends in [\r\n/]*, not [\r\n]* */
    bool suffix_contractions; /* a cased word may end in (?i:'s|'t|'re|'ve|'m|'ll|'d)? */
} split_rules[] = {
    [TOK_SPLIT_QWEN2] = {"Qwen2",
                         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
                         " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                         true, false, 1, false, false},
    [TOK_SPLIT_LLAMA3] = {"Llama 3",
                          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                          " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                          true, false, 3, false, false},
    [TOK_SPLIT_TEKKEN] = {"Mistral-Nemo (tekken)",
                          "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*"
                          "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
                          "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
                          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                          false, true, 1, true, false},
    [TOK_SPLIT_O200K] = {"o200k (GPT-4o, Phi-4-mini)",
                         "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*"
                         "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                         "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
                         "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                         "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
                         "\\s+(?!\\S)|\\s+",
                         false, true, 3, true, true},
    /* ByteLevel's built-in regex; no tokenizer.json writes it out, so no pattern to find */
    [TOK_SPLIT_GPT2] = {"GPT-2 (ByteLevel use_regex)",
                        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                        "\\s+(?!\\S)|\\s+",
                        true, false, 0, false, false},
};

bool tok_split_find(const char *regex, enum tok_split *out)
{
    for (size_t i = 0; i < TOK_SPLIT_GPT2; i++)
        if (!strcmp(regex, split_rules[i].pattern)) {
            *out = (enum tok_split)i;
            return true;
        }
    return false;
}

const char *tok_split_name(enum tok_split kind)
{
    return split_rules[kind].name;
}

static bool is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint16_t classify(uint32_t c)
{
    uint16_t k = 0;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LT:
        k = TOK_CP_L | TOK_CP_WORD | TOK_CP_UPPERISH;
        break;
    case UTF8PROC_CATEGORY_LL:
        k = TOK_CP_L | TOK_CP_WORD | TOK_CP_LOWERISH;
        break;
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        k = TOK_CP_L | TOK_CP_WORD | TOK_CP_UPPERISH | TOK_CP_LOWERISH;
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
        k = TOK_CP_WORD | TOK_CP_UPPERISH | TOK_CP_LOWERISH;
        break;
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

void tok_cp_class_init(uint16_t *table)
{
    for (uint32_t c = 0; c < 0x10000; c++)
        table[c] = classify(c);
}

uint16_t tok_cp_class(const struct tokenizer *tok, uint32_t cp)
{
    return cp < 0x10000 ? tok->cp_class[cp] : classify(cp);
}

/* The text being split; all positions are byte offsets at character starts. */
struct text {
    const struct tokenizer *tok;
    const struct split_rules *rules;
    const unsigned char *s;
    size_t n;
};

/* Length, code point and class of the character at i (< n). */
static inline size_t char_at(const struct text *t, size_t i, uint32_t *cp, uint16_t *cls)
{
    size_t len = tok_utf8_decode(t->s + i, t->n - i, cp);
    *cls = tok_cp_class(t->tok, *cp);
    return len;
}

/* Class of the character at i, 0 at the end of the text. */
static inline uint16_t class_at(const struct text *t, size_t i)
{
    if (i >= t->n)
        return 0;
    uint32_t cp;
    uint16_t k;
    char_at(t, i, &cp, &k);
    return k;
}

/* End of the run of characters from i whose class has any of `want`. */
static size_t scan_run(const struct text *t, size_t i, uint16_t want)
{
    while (i < t->n) {
        uint32_t cp;
        uint16_t k;
        size_t len = char_at(t, i, &cp, &k);
        if (!(k & want))
            break;
        i += len;
    }
    return i;
}

/* `[^\s\p{L}\p{N}]+[\r\n]*` (or `[\r\n/]*`) from i, where the character at i is known to be
 * in the class. */
static size_t scan_symbols(const struct text *t, size_t i)
{
    while (i < t->n) {
        uint32_t cp;
        uint16_t k;
        size_t len = char_at(t, i, &cp, &k);
        if (k & (TOK_CP_WS | TOK_CP_L | TOK_CP_N))
            break;
        i += len;
    }
    bool slash = t->rules->symbol_slash;
    while (i < t->n && (t->s[i] == '\r' || t->s[i] == '\n' || (slash && t->s[i] == '/')))
        i++;
    return i;
}

/* `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after the apostrophe at i1 - 1: end of the match, or 0. */
static size_t contraction(const struct text *t, size_t i1)
{
    if (i1 >= t->n)
        return 0;
    uint32_t c;
    uint16_t k;
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

/*
 * tekken's `[U]*[W]+` from p: end of the match, or 0. The greedy U* takes the whole run of U
 * to u; if W+ can start at u (a character in W but not U: Ll), it takes the run of W from
 * there. Otherwise U* gives characters back one at a time until the last one it gave back is
 * in W (Lm, Lo, a mark: in both sets); W+ takes that one and stops at the next, which is not
 * in W. So the match ends after the run's last character in W, and fails when there is none.
 * What it leaves of the run are capitals (Lu, Lt), which the next match, `[U]+[W]*`, takes
 * whole.
 */
static size_t cased_word_lower(const struct text *t, size_t p)
{
    size_t i = p, after_last_w = 0;
    while (i < t->n) {
        uint32_t cp;
        uint16_t k;
        size_t len = char_at(t, i, &cp, &k);
        if (!(k & TOK_CP_UPPERISH))
            break;
        i += len;
        if (k & TOK_CP_LOWERISH)
            after_last_w = i;
    }
    if (class_at(t, i) & TOK_CP_LOWERISH)
        return scan_run(t, i, TOK_CP_LOWERISH);
    return after_last_w;
}

/* tekken's `[U]+[W]*` from p: end of the match, or 0. Nothing to give back: W* may be empty.
 * (Reached only when `[U]*[W]+` failed from the same place, so W* takes nothing there; it is
 * kept to follow the pattern.) */
static size_t cased_word_upper(const struct text *t, size_t p)
{
    size_t u = scan_run(t, p, TOK_CP_UPPERISH);
    return u == p ? 0 : scan_run(t, u, TOK_CP_LOWERISH);
}

/* The end of a white-space run's match from i (c0, the character at i, is white space), the
 * trailing alternatives of every pattern: `\s*[\r\n]+` (when crlf_rule), then `\s+(?!\S)`,
 * then `\s+`. */
static size_t match_space(const struct text *t, size_t i, bool crlf_rule)
{
    size_t j = i, last = i, crlf_end = 0;
    while (j < t->n) {
        uint32_t cp;
        uint16_t k;
        size_t len = char_at(t, j, &cp, &k);
        if (!(k & TOK_CP_WS))
            break;
        if (k & TOK_CP_CRLF)
            crlf_end = j + len;
        last = j;
        j += len;
    }
    /* \s*[\r\n]+ : backtracking from the right stops at the last line break of the run */
    if (crlf_rule && crlf_end)
        return crlf_end;
    /* \s+(?!\S) : the whole run at the end of text, else all but its last character */
    if (j == t->n)
        return j;
    if (last > i)
        return last;
    /* \s+ */
    return j;
}

/* GPT-2's regex from i (< n): 's|'t|'re|'ve|'m|'ll|'d (case-sensitive), then ` ?\p{L}+`,
 * ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` (the optional prefix is U+0020 alone), then white space. */
static size_t match_gpt2(const struct text *t, size_t i)
{
    uint32_t c0;
    uint16_t k0;
    size_t i1 = i + char_at(t, i, &c0, &k0);
    if (c0 == '\'' && i1 < t->n) {
        unsigned c = t->s[i1], c2 = i1 + 1 < t->n ? t->s[i1 + 1] : 0;
        if (c == 's' || c == 't' || c == 'm' || c == 'd')
            return i1 + 1;
        if (((c == 'r' || c == 'v') && c2 == 'e') || (c == 'l' && c2 == 'l'))
            return i1 + 2;
    }
    size_t from = i; /* where the run starts: after the space, when one leads */
    uint16_t k = k0;
    if (c0 == ' ' && i1 < t->n) {
        uint16_t k1 = class_at(t, i1);
        if (!(k1 & TOK_CP_WS))
            from = i1, k = k1;
    }
    if (k & TOK_CP_L)
        return scan_run(t, from, TOK_CP_L);
    if (k & TOK_CP_N)
        return scan_run(t, from, TOK_CP_N);
    if (!(k & TOK_CP_WS)) { /* a symbol run: not white space, letter or number */
        size_t j = from;
        while (j < t->n) {
            uint32_t cp;
            uint16_t kj;
            size_t len = char_at(t, j, &cp, &kj);
            if (kj & (TOK_CP_WS | TOK_CP_L | TOK_CP_N))
                break;
            j += len;
        }
        return j;
    }
    return match_space(t, i, false);
}

/* End of the match that starts at i (< n). */
static size_t match_at(const struct text *t, size_t i)
{
    if (t->rules == &split_rules[TOK_SPLIT_GPT2])
        return match_gpt2(t, i);
    const struct split_rules *r = t->rules;
    uint32_t c0;
    uint16_t k0;
    size_t i1 = i + char_at(t, i, &c0, &k0);
    size_t end;
    /* [^\r\n\p{L}\p{N}]? before a word: tried taken first, then not */
    bool prefix = !(k0 & (TOK_CP_CRLF | TOK_CP_L | TOK_CP_N));

    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (r->contractions && c0 == '\'' && (end = contraction(t, i1)) != 0)
        return end;
    if (r->cased_words) {
        /* [^\r\n\p{L}\p{N}]?[U]*[W]+|[^\r\n\p{L}\p{N}]?[U]+[W]* */
        if ((prefix && (end = cased_word_lower(t, i1))) || (end = cased_word_lower(t, i)) ||
            (prefix && (end = cased_word_upper(t, i1))) || (end = cased_word_upper(t, i))) {
            size_t c; /* o200k: the optional contraction after the word, taken when there */
            if (r->suffix_contractions && end < t->n && t->s[end] == '\'' &&
                (c = contraction(t, end + 1)) != 0)
                end = c;
            return end;
        }
    } else {
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (k0 & TOK_CP_L)
            return scan_run(t, i1, TOK_CP_L);
        if (prefix && (class_at(t, i1) & TOK_CP_L))
            return scan_run(t, i1, TOK_CP_L);
    }
    /* \p{N}{1,max_digits} */
    if (k0 & TOK_CP_N) {
        size_t end = i1;
        for (int d = 1; d < r->max_digits && end < t->n; d++) {
            uint32_t cp;
            uint16_t k;
            size_t len = char_at(t, end, &cp, &k);
            if (!(k & TOK_CP_N))
                break;
            end += len;
        }
        return end;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' ([\r\n/]* for tekken) */
    if (!(k0 & TOK_CP_WS))
        return scan_symbols(t, i1);
    if (c0 == ' ' && i1 < t->n && !(class_at(t, i1) & (TOK_CP_WS | TOK_CP_L | TOK_CP_N)))
        return scan_symbols(t, i1);

    /* c0 is white space: look at the whole run once */
    return match_space(t, i, true);
}

/* The split of s[0..n) by the pattern alone (the text ends at n for its lookahead). */
static enum ll_status split_part(const struct tokenizer *tok, const char *s, size_t n,
                                 tok_part_fn fn, void *ctx)
{
    struct text t = {tok, &split_rules[tok->split], (const unsigned char *)s, n};
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

enum ll_status tok_pretokenize(const struct tokenizer *tok, const char *s, size_t n,
                               tok_part_fn fn, void *ctx)
{
    if (tok->digits == TOK_DIGITS_NONE)
        return split_part(tok, s, n, fn, ctx);
    /* Digits first: each numeric character (or run of them) is a part of its own, and the
     * split runs within each part, which ends the text for its lookahead */
    struct text t = {tok, &split_rules[tok->split], (const unsigned char *)s, n};
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        uint16_t k;
        size_t len = char_at(&t, i, &cp, &k), end = i + len;
        bool numeric = k & TOK_CP_N;
        if (!numeric || tok->digits == TOK_DIGITS_RUNS)
            while (end < n) {
                size_t l2 = char_at(&t, end, &cp, &k);
                if (!(k & TOK_CP_N) != !numeric)
                    break;
                end += l2;
            }
        enum ll_status st = split_part(tok, s + i, end - i, fn, ctx);
        if (st != LL_OK)
            return st;
        i = end;
    }
    return LL_OK;
}
