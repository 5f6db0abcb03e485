/*
 * tokenizer_load.c: builds a struct tokenizer from DIR/tokenizer.json (the Hugging Face
 * `tokenizers` serialisation) and, through tok_load_config(), DIR/tokenizer_config.json.
 *
 * Two schemes of BPE are read, as options of one pipeline:
 *   byte-level (GPT-2 style: Qwen2, Llama 3, Mistral-Nemo, o200k, GPT-2, SmolLM): pre_tokenizer
 *     a Sequence of [Split with the Qwen2, Llama 3, Mistral-Nemo or o200k regex, ByteLevel
 *     without its own regex], or ByteLevel with its own (GPT-2's) regex alone or after Digits,
 *     decoder ByteLevel;
 *   SentencePiece-style (Llama 2, Mistral-7B, TinyLlama, Gemma 2/3): BPE over characters,
 *     pre_tokenizer null, Split with a String pattern and behavior MergedWithPrevious, or
 *     Metaspace (replacement, prepend_scheme always / first / never or the older
 *     add_prefix_space, split); decoder Metaspace, or a Sequence of Replace (String pattern) or
 *     Metaspace, ByteFallback, Fuse, Strip (after Fuse), in that order.
 * Also read: model (BPE: vocab, merges in "a b" or ["a","b"] form, ignore_merges,
 * byte_fallback, fuse_unk, unk_token; dropout, continuing_subword_prefix and
 * end_of_word_suffix only when unset), added_tokens (id, content, single_word, lstrip, rstrip,
 * normalized, special), normalizer (none, NFC, Prepend, Replace with a String pattern, or a
 * Sequence of these), post_processor (TemplateProcessing, ByteLevel, Sequence of these, or
 * none). Anything else (a Regex pattern in Replace, another prepend_scheme, another Split
 * behavior, WordPiece, ...) is refused naming the field. Every problem is reported as
 * "FILE: FIELD: what is wrong" and everything built so far is freed. Runs once on the loading
 * thread; the result is read-only afterwards.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "util.h"

struct loader {
    struct tokenizer *tok;
    const char *file; /* path shown in messages */
    struct ll_err *err;
    const char *unk_token;         /* model.unk_token, or NULL */
    bool dec_byte_level;           /* decoder ByteLevel */
    bool dec_byte_fallback;        /* decoder ByteFallback: "<0xNN>" tokens are bytes */
    const char *dec_pattern, *dec_content; /* decoder Replace (or Metaspace: replacement → " ") */
};

static enum ll_status fail(struct loader *L, enum ll_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum ll_status fail(struct loader *L, enum ll_status code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ll_err_set(L->err, code, "%s: %s", L->file, msg);
}

static enum ll_status no_memory(struct loader *L)
{
    return fail(L, LL_ENOMEM, "out of memory");
}

/* Optional boolean member `name` of obj (shown as `where`.name). */
static enum ll_status opt_bool(struct loader *L, const cJSON *obj, const char *where,
                               const char *name, bool dflt, bool *out)
{
    const cJSON *v = ll_json_member(obj, name);
    *out = dflt;
    if (!v)
        return LL_OK;
    if (!cJSON_IsBool(v))
        return fail(L, LL_EFORMAT, "%s.%s: expected true or false", where, name);
    *out = cJSON_IsTrue(v);
    return LL_OK;
}

/* The "type" string of a component object, or NULL. */
static const char *type_of(const cJSON *obj)
{
    const cJSON *t = ll_json_member(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- model ---- */

static enum ll_status check_model_options(struct loader *L, const cJSON *model)
{
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE"))
        return fail(L, LL_EUNSUPPORTED, "model.type: \"%s\" is not supported (only BPE)", type);
    const cJSON *v = ll_json_member(model, "dropout");
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return fail(L, LL_EUNSUPPORTED, "model.dropout: BPE dropout is not supported");
    const char *strs[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < LL_ARRAY_LEN(strs); i++) {
        v = ll_json_member(model, strs[i]);
        if (!v)
            continue;
        if (!cJSON_IsString(v))
            return fail(L, LL_EFORMAT, "model.%s: expected a string or null", strs[i]);
        if (v->valuestring[0])
            return fail(L, LL_EUNSUPPORTED, "model.%s: \"%s\" is not supported (only empty)",
                        strs[i], v->valuestring);
    }
    enum ll_status st;
    struct tokenizer *tok = L->tok;
    if ((st = opt_bool(L, model, "model", "byte_fallback", false, &tok->byte_fallback)) != LL_OK ||
        (st = opt_bool(L, model, "model", "fuse_unk", false, &tok->fuse_unk)) != LL_OK)
        return st;
    v = ll_json_member(model, "unk_token");
    if (v && !cJSON_IsString(v) && !cJSON_IsNull(v))
        return fail(L, LL_EFORMAT, "model.unk_token: expected a string or null");
    L->unk_token = cJSON_IsString(v) ? v->valuestring : NULL;
    return opt_bool(L, model, "model", "ignore_merges", false, &tok->ignore_merges);
}

/* Give id the token string s (replacing a previous one). */
static enum ll_status set_token(struct loader *L, int32_t id, const char *s, size_t n,
                                uint8_t flags, uint32_t *off)
{
    struct tokenizer *tok = L->tok;
    if (tok_arena_add(&tok->arena, s, n, off) != LL_OK)
        return no_memory(L);
    tok->ids[id].str_off = *off;
    tok->ids[id].str_len = (uint32_t)n;
    tok->ids[id].flags = flags;
    return LL_OK;
}

static enum ll_status load_vocab(struct loader *L, const cJSON *vocab)
{
    struct tokenizer *tok = L->tok;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        long long id;
        if (!ll_json_is_int(e, 0, TOK_MAX_ID - 1, &id))
            return fail(L, LL_EFORMAT, "model.vocab[\"%.80s\"]: expected an integer id in 0..%d",
                        e->string, TOK_MAX_ID - 1);
        if (tok->ids[id].flags & TOK_ID_PRESENT)
            return fail(L, LL_EFORMAT,
                        "model.vocab[\"%.80s\"]: id %lld is already the id of \"%.*s\" "
                        "(each id must appear once)",
                        e->string, id, (int)(tok->ids[id].str_len < 80 ? tok->ids[id].str_len : 80),
                        tok->arena.data + tok->ids[id].str_off);
        if (tok_strmap_get(&tok->vocab, tok->arena.data, e->string, strlen(e->string)) >= 0)
            return fail(L, LL_EFORMAT, "model.vocab: the token \"%.80s\" appears twice",
                        e->string);
        uint32_t off;
        enum ll_status st = set_token(L, (int32_t)id, e->string, strlen(e->string), TOK_ID_PRESENT,
                                      &off);
        if (st != LL_OK)
            return st;
        tok_strmap_put(&tok->vocab, tok->arena.data, off, tok->ids[id].str_len, (int32_t)id);
    }
    return LL_OK;
}

static enum ll_status load_merges(struct loader *L, const cJSON *merges)
{
    struct tokenizer *tok = L->tok;
    size_t cap = 256;
    char *buf = malloc(cap);
    if (!buf)
        return no_memory(L);
    enum ll_status st = LL_OK;
    uint32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        if (rank >= TOK_MAX_RANK) {
            st = fail(L, LL_EUNSUPPORTED, "model.merges: more than %u merges", TOK_MAX_RANK);
            break;
        }
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) {
                st = fail(L, LL_EFORMAT, "model.merges[%u]: \"%.80s\" is not \"left right\"", rank,
                          m->valuestring);
                break;
            }
            a = m->valuestring;
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            na = strlen(a);
            b = m->child->next->valuestring;
            nb = strlen(b);
        } else {
            st = fail(L, LL_EFORMAT, "model.merges[%u]: expected \"left right\" or [\"left\", "
                      "\"right\"]", rank);
            break;
        }
        if (na + nb + 1 > cap) {
            cap = 2 * (na + nb + 1);
            char *nbuf = realloc(buf, cap);
            if (!nbuf) {
                st = no_memory(L);
                break;
            }
            buf = nbuf;
        }
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        int32_t left = tok_strmap_get(&tok->vocab, tok->arena.data, a, na);
        int32_t right = tok_strmap_get(&tok->vocab, tok->arena.data, b, nb);
        int32_t merged = tok_strmap_get(&tok->vocab, tok->arena.data, buf, na + nb);
        if (left < 0 || right < 0 || merged < 0) {
            const char *missing = left < 0 ? a : right < 0 ? b : buf;
            int n_missing = (int)(left < 0 ? na : right < 0 ? nb : na + nb);
            st = fail(L, LL_EFORMAT, "model.merges[%u]: token \"%.*s\" is not in model.vocab",
                      rank, n_missing > 80 ? 80 : n_missing, missing);
            break;
        }
        tok_pairmap_put(&tok->merges, left, right, rank, merged);
    }
    free(buf);
    return st;
}

/* ---- added tokens ---- */

static enum ll_status load_added(struct loader *L, const cJSON *added)
{
    struct tokenizer *tok = L->tok;
    size_t i = 0;
    for (const cJSON *a = added->child; a; a = a->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(a))
            return fail(L, LL_EFORMAT, "%s: expected an object", where);
        long long id;
        if (!ll_json_is_int(ll_json_member(a, "id"), 0, TOK_MAX_ID - 1, &id))
            return fail(L, LL_EFORMAT, "%s.id: expected an integer id in 0..%d", where,
                        TOK_MAX_ID - 1);
        const cJSON *content = ll_json_member(a, "content");
        if (!cJSON_IsString(content) || !content->valuestring[0])
            return fail(L, LL_EFORMAT, "%s.content: expected a non-empty string", where);
        const char *text = content->valuestring;
        size_t len = strlen(text);
        if (ll_utf8_valid_prefix(text, len) != len)
            return fail(L, LL_EFORMAT, "%s.content: not valid UTF-8", where);
        struct tok_added *t = &tok->added[tok->n_added];
        enum ll_status st;
        if ((st = opt_bool(L, a, where, "special", false, &t->special)) != LL_OK ||
            (st = opt_bool(L, a, where, "single_word", false, &t->single_word)) != LL_OK ||
            (st = opt_bool(L, a, where, "lstrip", false, &t->lstrip)) != LL_OK ||
            (st = opt_bool(L, a, where, "rstrip", false, &t->rstrip)) != LL_OK ||
            (st = opt_bool(L, a, where, "normalized", !t->special, &t->normalized)) != LL_OK)
            return st;
        t->id = (int32_t)id;
        uint32_t off;
        uint8_t flags = TOK_ID_PRESENT | TOK_ID_ADDED | (t->special ? TOK_ID_SPECIAL : 0);
        if ((st = set_token(L, t->id, text, len, flags, &off)) != LL_OK)
            return st;
        tok_strmap_put(&tok->vocab, tok->arena.data, off, (uint32_t)len, t->id);

        /* a normalized token is looked for in normalised text, so normalise it too (with
         * Prepend and Replace as well: Hugging Face runs the whole normalizer over it) */
        const char *match = text;
        size_t match_len = len;
        bool owned = false;
        if (t->normalized && tok_normalize(tok, text, len, &match, &match_len, &owned) != LL_OK)
            return no_memory(L);
        st = tok_arena_add(&tok->arena, match, match_len, &t->off);
        t->len = (uint32_t)match_len;
        if (st == LL_OK)
            st = tok_trie_add(t->normalized ? &tok->trie_norm : &tok->trie_raw, match, match_len,
                              (int32_t)tok->n_added);
        if (owned)
            free((char *)match);
        if (st != LL_OK)
            return no_memory(L);
        tok->n_added++;
    }
    return LL_OK;
}

/* ---- pipeline components ---- */

/* A {"String": ...} pattern of component `where`: *out, or a refusal naming a Regex. */
static enum ll_status string_pattern(struct loader *L, const cJSON *obj, const char *where,
                                     const char **out)
{
    const cJSON *pat = ll_json_member(obj, "pattern");
    const cJSON *str = ll_json_member(pat, "String");
    if (ll_json_member(pat, "Regex"))
        return fail(L, LL_EUNSUPPORTED, "%s.pattern.Regex: a Regex pattern is not supported here "
                    "(only {\"String\": ...})", where);
    if (!cJSON_IsString(str) || !str->valuestring[0])
        return fail(L, LL_EFORMAT, "%s.pattern: expected {\"String\": a non-empty string}", where);
    *out = str->valuestring;
    return LL_OK;
}

/* A string member of a component (shown as where.name), non-empty when nonempty is set. */
static enum ll_status req_string(struct loader *L, const cJSON *obj, const char *where,
                                 const char *name, bool nonempty, const char **out)
{
    const cJSON *v = ll_json_member(obj, name);
    if (!cJSON_IsString(v) || (nonempty && !v->valuestring[0]))
        return fail(L, LL_EFORMAT, "%s.%s: expected a%s string", where, name,
                    nonempty ? " non-empty" : "");
    *out = v->valuestring;
    return LL_OK;
}

static enum ll_status add_norm_step(struct loader *L, const char *where, enum tok_norm_kind kind,
                                    const char *a, const char *b)
{
    struct tokenizer *tok = L->tok;
    if (tok->n_norm == TOK_MAX_NORM)
        return fail(L, LL_EUNSUPPORTED, "%s: more than %d normalizer steps", where, TOK_MAX_NORM);
    struct tok_norm_step *st = &tok->norm[tok->n_norm++];
    st->kind = kind;
    if (a && tok_arena_add(&tok->arena, a, strlen(a), &st->a_off) != LL_OK)
        return no_memory(L);
    if (b && tok_arena_add(&tok->arena, b, strlen(b), &st->b_off) != LL_OK)
        return no_memory(L);
    st->a_len = a ? (uint32_t)strlen(a) : 0;
    st->b_len = b ? (uint32_t)strlen(b) : 0;
    return LL_OK;
}

/* One normalizer (where: "normalizer" or "normalizer.normalizers[i]..."): NFC, Prepend,
 * Replace with a String pattern, or a Sequence of these. */
static enum ll_status load_normalizer(struct loader *L, const cJSON *n, const char *where)
{
    if (!n || cJSON_IsNull(n))
        return LL_OK;
    const char *type = type_of(n);
    enum ll_status st;
    if (!type)
        return fail(L, LL_EFORMAT, "%s.type: expected a string", where);
    if (!strcmp(type, "NFC"))
        return add_norm_step(L, where, TOK_NORM_NFC, NULL, NULL);
    if (!strcmp(type, "Prepend")) {
        const char *text;
        if ((st = req_string(L, n, where, "prepend", false, &text)) != LL_OK)
            return st;
        return add_norm_step(L, where, TOK_NORM_PREPEND, text, NULL);
    }
    if (!strcmp(type, "Replace")) {
        const char *pattern, *content;
        if ((st = string_pattern(L, n, where, &pattern)) != LL_OK ||
            (st = req_string(L, n, where, "content", false, &content)) != LL_OK)
            return st;
        return add_norm_step(L, where, TOK_NORM_REPLACE, pattern, content);
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = ll_json_member(n, "normalizers");
        if (!cJSON_IsArray(list))
            return fail(L, LL_EFORMAT, "%s.normalizers: expected an array", where);
        size_t i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%.60s.normalizers[%zu]", where, i);
            if ((st = load_normalizer(L, e, sub)) != LL_OK)
                return st;
        }
        return LL_OK;
    }
    return fail(L, LL_EUNSUPPORTED, "%s: \"%s\" is not supported (only NFC, Prepend, Replace and "
                "a Sequence of these)", where, type);
}

/* A ByteLevel pre-tokenizer b: add_prefix_space false, and use_regex as `regex` says (true:
 * GPT-2's regex splits; false: a Split before it did). */
static enum ll_status byte_level_ok(struct loader *L, const cJSON *b, const char *where,
                                    bool regex)
{
    bool prefix, use_regex;
    enum ll_status st;
    if ((st = opt_bool(L, b, where, "add_prefix_space", false, &prefix)) != LL_OK ||
        (st = opt_bool(L, b, where, "use_regex", true, &use_regex)) != LL_OK)
        return st;
    if (prefix)
        return fail(L, LL_EUNSUPPORTED, "%s.add_prefix_space: true is not supported", where);
    if (use_regex != regex)
        return fail(L, LL_EUNSUPPORTED, "%s.use_regex: %s is not supported here (a ByteLevel "
                    "after a Split has use_regex false; alone or after Digits, true)", where,
                    use_regex ? "true" : "false");
    L->tok->pre = TOK_PRE_REGEX;
    L->tok->byte_level = true;
    return LL_OK;
}

/* The byte-level pre-tokenizer with GPT-2's regex: ByteLevel (use_regex true) alone, or after
 * Digits (individual_digits true or false). */
static enum ll_status load_gpt2_pre_tokenizer(struct loader *L, const cJSON *digits,
                                              const cJSON *bl, const char *where)
{
    L->tok->split = TOK_SPLIT_GPT2;
    L->tok->digits = TOK_DIGITS_NONE;
    if (digits) {
        bool individual;
        enum ll_status st = opt_bool(L, digits, "pre_tokenizer.pretokenizers[0]",
                                     "individual_digits", false, &individual);
        if (st != LL_OK)
            return st;
        L->tok->digits = individual ? TOK_DIGITS_INDIVIDUAL : TOK_DIGITS_RUNS;
    }
    return byte_level_ok(L, bl, where, true);
}

/* The byte-level pre-tokenizer: Sequence [Split with a known regex, ByteLevel], or GPT-2's. */
static enum ll_status load_regex_pre_tokenizer(struct loader *L, const cJSON *p)
{
    const char *type = type_of(p);
    if (type && !strcmp(type, "ByteLevel"))
        return load_gpt2_pre_tokenizer(L, NULL, p, "pre_tokenizer");
    const cJSON *list = ll_json_member(p, "pretokenizers");
    if (!type || strcmp(type, "Sequence") || !cJSON_IsArray(list) || cJSON_GetArraySize(list) != 2)
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer: only null, Metaspace, Split with a String "
                    "pattern, ByteLevel with GPT-2's regex, or a Sequence of [Split with the "
                    "Qwen2, Llama 3, Mistral-Nemo or o200k pattern, ByteLevel] or [Digits, "
                    "ByteLevel] is supported (found %s)",
                    type ? type : "none");
    const cJSON *split = list->child, *bl = split->next;
    const char *t0 = type_of(split), *t1 = type_of(bl);
    if (t0 && !strcmp(t0, "Digits") && t1 && !strcmp(t1, "ByteLevel"))
        return load_gpt2_pre_tokenizer(L, split, bl, "pre_tokenizer.pretokenizers[1]");
    if (!t0 || strcmp(t0, "Split") || !t1 || strcmp(t1, "ByteLevel"))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers: expected [Split, ByteLevel] "
                    "or [Digits, ByteLevel], found [%s, %s]", t0 ? t0 : "?", t1 ? t1 : "?");
    const cJSON *regex = ll_json_member(ll_json_member(split, "pattern"), "Regex");
    if (!cJSON_IsString(regex))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern: expected "
                    "{\"Regex\": ...}");
    if (!tok_split_find(regex->valuestring, &L->tok->split))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex: only the "
                    "split patterns of %s, %s, %s and %s are implemented, found %.160s",
                    tok_split_name(TOK_SPLIT_QWEN2), tok_split_name(TOK_SPLIT_LLAMA3),
                    tok_split_name(TOK_SPLIT_TEKKEN), tok_split_name(TOK_SPLIT_O200K),
                    regex->valuestring);
    /* Each implemented pattern matches every character of any text, so keeping the matches
     * (Isolated) and removing what lies between them (Removed with invert, the form of the
     * files converted from tiktoken) give the same pieces. */
    const cJSON *behavior = ll_json_member(split, "behavior");
    bool invert;
    enum ll_status st = opt_bool(L, split, "pre_tokenizer.pretokenizers[0]", "invert", false,
                                 &invert);
    if (st != LL_OK)
        return st;
    const bool isolated = cJSON_IsString(behavior) && !strcmp(behavior->valuestring, "Isolated");
    const bool removed = cJSON_IsString(behavior) && !strcmp(behavior->valuestring, "Removed");
    if (!(isolated && !invert) && !(removed && invert))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0]: only behavior "
                    "\"Isolated\" (invert false) or \"Removed\" with invert true is supported, "
                    "found %s%.40s%s with invert %s",
                    cJSON_IsString(behavior) ? "\"" : "",
                    cJSON_IsString(behavior) ? behavior->valuestring : "no string",
                    cJSON_IsString(behavior) ? "\"" : "", invert ? "true" : "false");
    return byte_level_ok(L, bl, "pre_tokenizer.pretokenizers[1]", false);
}

/* Metaspace's replacement (one character) and prepend_scheme ("always", "first", "never"; an
 * older file gives add_prefix_space instead: true is "always", false "never"). */
static enum ll_status metaspace_options(struct loader *L, const cJSON *m, const char *where,
                                        const char **replacement, enum tok_prepend *scheme)
{
    enum ll_status st = req_string(L, m, where, "replacement", true, replacement);
    if (st != LL_OK)
        return st;
    size_t n = strlen(*replacement);
    if (ll_utf8_valid_prefix(*replacement, n) != n || tok_utf8_decode(
            (const unsigned char *)*replacement, n, &(uint32_t){0}) != n)
        return fail(L, LL_EFORMAT, "%s.replacement: expected one character", where);
    const cJSON *v = ll_json_member(m, "prepend_scheme");
    if (!v) {
        bool prefix;
        if ((st = opt_bool(L, m, where, "add_prefix_space", true, &prefix)) != LL_OK)
            return st;
        *scheme = prefix ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        return LL_OK;
    }
    static const char *const names[] = {[TOK_PREPEND_ALWAYS] = "always",
                                        [TOK_PREPEND_FIRST] = "first",
                                        [TOK_PREPEND_NEVER] = "never"};
    for (size_t i = 0; cJSON_IsString(v) && i < LL_ARRAY_LEN(names); i++)
        if (!strcmp(v->valuestring, names[i])) {
            *scheme = (enum tok_prepend)i;
            return LL_OK;
        }
    return fail(L, LL_EUNSUPPORTED, "%s.prepend_scheme: %s%.40s%s is not supported (only "
                "\"always\", \"first\", \"never\")", where, cJSON_IsString(v) ? "\"" : "",
                cJSON_IsString(v) ? v->valuestring : "a non-string", cJSON_IsString(v) ? "\"" : "");
}

/* Keep string s in the arena as the pre-tokenizer's pattern or replacement. */
static enum ll_status keep_pre_string(struct loader *L, const char *s)
{
    L->tok->pre_len = (uint32_t)strlen(s);
    if (tok_arena_add(&L->tok->arena, s, strlen(s), &L->tok->pre_off) != LL_OK)
        return no_memory(L);
    return LL_OK;
}

/* null, Split on a literal string (MergedWithPrevious), Metaspace, or the byte-level Sequence. */
static enum ll_status load_pre_tokenizer(struct loader *L, const cJSON *p)
{
    struct tokenizer *tok = L->tok;
    const char *type = type_of(p), *where = "pre_tokenizer";
    enum ll_status st;
    if (!p || cJSON_IsNull(p)) {
        tok->pre = TOK_PRE_NONE;
        return LL_OK;
    }
    const cJSON *list = ll_json_member(p, "pretokenizers");
    if (type && !strcmp(type, "Sequence") && cJSON_GetArraySize(list) == 1) {
        p = list->child; /* a Sequence of one is that one */
        type = type_of(p);
        where = "pre_tokenizer.pretokenizers[0]";
    }
    if (type && !strcmp(type, "Split") && !ll_json_member(ll_json_member(p, "pattern"), "Regex")) {
        const char *pattern;
        bool invert;
        if ((st = string_pattern(L, p, where, &pattern)) != LL_OK ||
            (st = opt_bool(L, p, where, "invert", false, &invert)) != LL_OK)
            return st;
        const cJSON *behavior = ll_json_member(p, "behavior");
        if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "MergedWithPrevious"))
            return fail(L, LL_EUNSUPPORTED, "%s.behavior: only \"MergedWithPrevious\" is supported "
                        "with a String pattern", where);
        if (invert)
            return fail(L, LL_EUNSUPPORTED, "%s.invert: true is not supported", where);
        tok->pre = TOK_PRE_SPLIT_STRING;
        return keep_pre_string(L, pattern);
    }
    if (type && !strcmp(type, "Metaspace")) {
        const char *replacement;
        if ((st = metaspace_options(L, p, where, &replacement, &tok->pre_prepend)) != LL_OK ||
            (st = opt_bool(L, p, where, "split", true, &tok->pre_split)) != LL_OK)
            return st;
        tok->pre = TOK_PRE_METASPACE;
        return keep_pre_string(L, replacement);
    }
    return load_regex_pre_tokenizer(L, p);
}



/* A non-negative integer member (where.name). */
static enum ll_status req_count(struct loader *L, const cJSON *obj, const char *where,
                                const char *name, int *out)
{
    long long v;
    if (!ll_json_is_int(ll_json_member(obj, name), 0, 1 << 20, &v))
        return fail(L, LL_EFORMAT, "%s.%s: expected a non-negative integer", where, name);
    *out = (int)v;
    return LL_OK;
}

/* One step of the SentencePiece-style decoder; *stage orders them: Replace or Metaspace (1),
 * ByteFallback (2), Fuse (3), Strip (4), each at most once. */
static enum ll_status load_decoder_step(struct loader *L, const cJSON *d, const char *where,
                                        int *stage)
{
    struct tokenizer *tok = L->tok;
    static const char *const names[] = {"Replace", "Metaspace", "ByteFallback", "Fuse", "Strip"};
    static const int stages[] = {1, 1, 2, 3, 4};
    const char *type = type_of(d);
    size_t k = 0;
    while (type && k < LL_ARRAY_LEN(names) && strcmp(type, names[k]))
        k++;
    if (!type || k == LL_ARRAY_LEN(names))
        return fail(L, LL_EUNSUPPORTED, "%s: \"%s\" is not supported (only ByteLevel, or "
                    "Replace or Metaspace, ByteFallback, Fuse, Strip in this order)", where,
                    type ? type : "?");
    if (stages[k] <= *stage)
        return fail(L, LL_EUNSUPPORTED, "%s: \"%s\" at this place is not supported (only "
                    "Replace or Metaspace, ByteFallback, Fuse, Strip in this order, each once)",
                    where, type);
    if (stages[k] == 4 && *stage < 3)
        return fail(L, LL_EUNSUPPORTED, "%s: Strip without a Fuse before it (a strip of every "
                    "token) is not supported", where);
    *stage = stages[k];
    enum ll_status st;
    if (k == 0) { /* Replace */
        if ((st = string_pattern(L, d, where, &L->dec_pattern)) != LL_OK ||
            (st = req_string(L, d, where, "content", false, &L->dec_content)) != LL_OK)
            return st;
    } else if (k == 1) { /* Metaspace */
        const char *rep;
        enum tok_prepend scheme;
        if ((st = metaspace_options(L, d, where, &rep, &scheme)) != LL_OK)
            return st;
        L->dec_pattern = rep;
        L->dec_content = " ";
        tok->dec_first_drop = scheme != TOK_PREPEND_NEVER;
        tok->dec_meta_len = (uint32_t)strlen(rep);
        if (tok_arena_add(&tok->arena, rep, strlen(rep), &tok->dec_meta_off) != LL_OK)
            return no_memory(L);
    } else if (k == 2) {
        L->dec_byte_fallback = true;
    } else if (k == 4) { /* Strip */
        const char *content;
        uint32_t cp;
        if ((st = req_string(L, d, where, "content", true, &content)) != LL_OK ||
            (st = req_count(L, d, where, "start", &tok->strip_start)) != LL_OK ||
            (st = req_count(L, d, where, "stop", &tok->strip_stop)) != LL_OK)
            return st;
        size_t n = strlen(content);
        if (ll_utf8_valid_prefix(content, n) != n ||
            tok_utf8_decode((const unsigned char *)content, n, &cp) != n)
            return fail(L, LL_EFORMAT, "%s.content: expected one character", where);
        tok->strip_len = (uint32_t)n;
        if (tok_arena_add(&tok->arena, content, n, &tok->strip_off) != LL_OK)
            return no_memory(L);
    }
    return LL_OK;
}

/* ByteLevel (with the byte-level pre-tokenizer), or the SentencePiece-style steps, alone or in
 * a Sequence. */
static enum ll_status load_decoder(struct loader *L, const cJSON *d)
{
    const char *type = type_of(d);
    const cJSON *list = ll_json_member(d, "decoders");
    bool seq = type && !strcmp(type, "Sequence");
    if (seq && !cJSON_IsArray(list))
        return fail(L, LL_EFORMAT, "decoder.decoders: expected an array");
    const cJSON *first = seq ? list->child : d;
    const char *t0 = first ? type_of(first) : NULL;
    if (t0 && !strcmp(t0, "ByteLevel") && (!seq || cJSON_GetArraySize(list) == 1)) {
        if (!L->tok->byte_level)
            return fail(L, LL_EUNSUPPORTED, "decoder: ByteLevel is supported only with the "
                        "byte-level pre-tokenizer");
        L->dec_byte_level = true;
        return LL_OK;
    }
    if (!type || (seq && !list->child))
        return fail(L, LL_EUNSUPPORTED, "decoder: only ByteLevel, or Replace or Metaspace, "
                    "ByteFallback, Fuse, Strip is supported (found %s)", type ? type : "none");
    if (L->tok->byte_level)
        return fail(L, LL_EUNSUPPORTED, "decoder: the byte-level pre-tokenizer needs the "
                    "ByteLevel decoder (found %s)", seq && t0 ? t0 : type);
    int stage = 0;
    if (!seq)
        return load_decoder_step(L, d, "decoder", &stage);
    size_t i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "decoder.decoders[%zu]", i);
        enum ll_status st = load_decoder_step(L, e, where, &stage);
        if (st != LL_OK)
            return st;
    }
    return LL_OK;
}

/* TemplateProcessing "single": special tokens before $A go in front, those after at the end. */
static enum ll_status load_template(struct loader *L, const cJSON *p)
{
    struct tokenizer *tok = L->tok;
    const cJSON *single = ll_json_member(p, "single"), *specials = ll_json_member(p, "special_tokens");
    if (!cJSON_IsArray(single))
        return fail(L, LL_EFORMAT, "post_processor.single: expected an array");
    bool after = false;
    size_t i = 0;
    for (const cJSON *e = single->child; e; e = e->next, i++) {
        if (ll_json_member(e, "Sequence")) {
            after = true;
            continue;
        }
        const cJSON *name = ll_json_member(ll_json_member(e, "SpecialToken"), "id");
        if (!cJSON_IsString(name))
            return fail(L, LL_EFORMAT, "post_processor.single[%zu]: expected {\"SpecialToken\": "
                        "{\"id\": ...}} or {\"Sequence\": ...}", i);
        const cJSON *ids = ll_json_member(ll_json_member(specials, name->valuestring), "ids");
        if (!cJSON_IsArray(ids))
            return fail(L, LL_EFORMAT, "post_processor.special_tokens[\"%.80s\"].ids: expected an "
                        "array", name->valuestring);
        for (const cJSON *x = ids->child; x; x = x->next) {
            long long id;
            if (!ll_json_is_int(x, 0, tok->n_ids - 1, &id) || !(tok->ids[id].flags & TOK_ID_PRESENT))
                return fail(L, LL_EFORMAT, "post_processor.special_tokens[\"%.80s\"].ids: not an id "
                            "of the vocabulary", name->valuestring);
            int *n = after ? &tok->n_suffix : &tok->n_prefix;
            if (*n == TOK_MAX_SPECIAL)
                return fail(L, LL_EUNSUPPORTED, "post_processor.single: more than %d special "
                            "tokens on one side", TOK_MAX_SPECIAL);
            (after ? tok->suffix : tok->prefix)[(*n)++] = (int32_t)id;
        }
    }
    return LL_OK;
}

static enum ll_status load_post_processor(struct loader *L, const cJSON *p)
{
    if (!p)
        return LL_OK;
    const char *type = type_of(p);
    if (type && !strcmp(type, "ByteLevel"))
        return LL_OK; /* changes offsets only */
    if (type && !strcmp(type, "TemplateProcessing"))
        return load_template(L, p);
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = ll_json_member(p, "processors");
        if (!cJSON_IsArray(list))
            return fail(L, LL_EFORMAT, "post_processor.processors: expected an array");
        for (const cJSON *e = list->child; e; e = e->next) {
            enum ll_status st = load_post_processor(L, e);
            if (st != LL_OK)
                return st;
        }
        return LL_OK;
    }
    return fail(L, LL_EUNSUPPORTED, "post_processor: \"%s\" is not supported (only "
                "TemplateProcessing, ByteLevel, Sequence)", type ? type : "?");
}

/* ---- assembly ---- */

/* The byte of a byte-fallback token "<0xNN>", or -1. Like Hugging Face's ByteFallback decoder:
 * six bytes, "<0x", two characters that Rust's u8::from_str_radix(_, 16) reads (so "+F" too),
 * ">". */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = s[3] == '+' ? 4 : 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The decoder's text of one token string into out (room for len * (1 + content) bytes): the
 * Replace (or Metaspace's replacement → space) applied. Returns the count. */
static size_t replace_decode(const struct loader *L, const char *s, size_t len, char *out)
{
    if (!L->dec_pattern) {
        memcpy(out, s, len);
        return len;
    }
    return tok_replace(s, len, L->dec_pattern, strlen(L->dec_pattern), L->dec_content,
                       strlen(L->dec_content), out);
}

/* What each id decodes to, and the single-byte tokens BPE starts from. */
static enum ll_status finish_ids(struct loader *L)
{
    struct tokenizer *tok = L->tok;
    size_t longest = 0, grow = L->dec_content ? strlen(L->dec_content) : 0;
    for (int32_t id = 0; id < tok->n_ids; id++)
        if (tok->ids[id].flags & TOK_ID_PRESENT && tok->ids[id].str_len > longest)
            longest = tok->ids[id].str_len;
    char *buf = malloc(longest * (1 + grow) + 1);
    if (!buf)
        return no_memory(L);
    for (int32_t id = 0; id < tok->n_ids; id++) {
        struct tok_entry *e = &tok->ids[id];
        if (!(e->flags & TOK_ID_PRESENT))
            continue;
        const char *str = tok->arena.data + e->str_off;
        int byte = L->dec_byte_fallback ? fallback_byte(str, e->str_len) : -1;
        size_t n;
        if (L->dec_byte_level) {
            n = tok_byte_level_decode(str, e->str_len, buf);
        } else if (byte >= 0) {
            buf[0] = (char)byte;
            n = 1;
            e->flags |= TOK_ID_BYTE;
        } else if (ll_utf8_valid_prefix(str, e->str_len) != e->str_len) {
            free(buf); /* the decoder below writes each token's text as it is */
            return fail(L, LL_EFORMAT, "the token of id %d is not valid UTF-8", id);
        } else {
            n = replace_decode(L, str, e->str_len, buf);
        }
        if (tok_arena_add(&tok->arena, buf, n, &e->bytes_off) != LL_OK) {
            free(buf);
            return no_memory(L);
        }
        e->bytes_len = (uint32_t)n;
        if (n > tok->max_token_bytes)
            tok->max_token_bytes = n;
    }
    free(buf);
    return LL_OK;
}

static void find_byte_ids(struct tokenizer *tok)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n = 1;
        if (!tok->byte_level) { /* the byte-fallback tokens, as Hugging Face writes them */
            n = (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
        } else if (tok->byte_to_cp[b] < 0x80) {
            s[0] = (char)tok->byte_to_cp[b];
        } else {
            uint32_t cp = tok->byte_to_cp[b];
            s[0] = (char)(0xC0 | cp >> 6);
            s[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        tok->byte_id[b] = tok_strmap_get(&tok->vocab, tok->arena.data, s, n);
    }
}

static enum ll_status load_tokenizer_json(struct loader *L, const cJSON *root)
{
    struct tokenizer *tok = L->tok;
    enum ll_status st;
    if (!cJSON_IsObject(root))
        return fail(L, LL_EFORMAT, "expected a JSON object at the top level");
    const cJSON *model = ll_json_member(root, "model");
    if (!cJSON_IsObject(model))
        return fail(L, LL_EFORMAT, "model: missing or not an object");
    const cJSON *vocab = ll_json_member(model, "vocab"), *merges = ll_json_member(model, "merges");
    if (!cJSON_IsObject(vocab))
        return fail(L, LL_EFORMAT, "model.vocab: missing or not an object");
    if (!cJSON_IsArray(merges))
        return fail(L, LL_EFORMAT, "model.merges: missing or not an array");
    const cJSON *added = ll_json_member(root, "added_tokens");
    if (added && !cJSON_IsArray(added))
        return fail(L, LL_EFORMAT, "added_tokens: not an array");
    if ((st = check_model_options(L, model)) != LL_OK)
        return st;
    /* the normalizer first: normalized added tokens are matched in their normalised form */
    if ((st = load_normalizer(L, ll_json_member(root, "normalizer"), "normalizer")) != LL_OK ||
        (st = load_pre_tokenizer(L, ll_json_member(root, "pre_tokenizer"))) != LL_OK ||
        (st = load_decoder(L, ll_json_member(root, "decoder"))) != LL_OK)
        return st;

    /* size the tables: ids up to the highest one in the file */
    size_t n_vocab = 0, n_added = 0;
    long long max_id = -1, id;
    for (const cJSON *e = vocab->child; e; e = e->next, n_vocab++)
        if (ll_json_is_int(e, 0, TOK_MAX_ID - 1, &id) && id > max_id)
            max_id = id;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, n_added++)
        if (ll_json_is_int(ll_json_member(e, "id"), 0, TOK_MAX_ID - 1, &id) && id > max_id)
            max_id = id;
    tok->n_ids = (int32_t)(max_id + 1);
    tok->ids = calloc((size_t)tok->n_ids + 1, sizeof *tok->ids);
    tok->added = calloc(n_added + 1, sizeof *tok->added);
    if (!tok->ids || !tok->added || tok_strmap_init(&tok->vocab, n_vocab + n_added) != LL_OK ||
        tok_pairmap_init(&tok->merges, (size_t)cJSON_GetArraySize(merges)) != LL_OK ||
        tok_trie_add(&tok->trie_raw, "", 0, -1) != LL_OK ||
        tok_trie_add(&tok->trie_norm, "", 0, -1) != LL_OK)
        return no_memory(L);

    /* the model's own lookups (bytes, merges) see only model.vocab, so they come first */
    if ((st = load_vocab(L, vocab)) != LL_OK || (st = load_merges(L, merges)) != LL_OK)
        return st;
    find_byte_ids(tok);
    tok->unk_id = L->unk_token ? tok_strmap_get(&tok->vocab, tok->arena.data, L->unk_token,
                                                strlen(L->unk_token))
                               : -1;
    if (added && (st = load_added(L, added)) != LL_OK)
        return st;
    if ((st = load_post_processor(L, ll_json_member(root, "post_processor"))) != LL_OK)
        return st;
    return finish_ids(L);
}

void tokenizer_free(struct tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->arena.data);
    free(tok->ids);
    tok_strmap_free(&tok->vocab);
    tok_pairmap_free(&tok->merges);
    free(tok->added);
    tok_trie_free(&tok->trie_raw);
    tok_trie_free(&tok->trie_norm);
    free(tok->bos_token);
    free(tok->eos_token);
    free(tok->cp_class);
    tok_cache_free(tok->cache);
    free(tok);
}

enum ll_status tokenizer_load(struct tokenizer **out, const char *model_dir, struct ll_err *err)
{
    *out = NULL;
    struct tokenizer *tok = calloc(1, sizeof *tok);
    char *path = ll_path_join(model_dir, "tokenizer.json");
    if (!tok || !path) {
        free(tok);
        free(path);
        return ll_err_set(err, LL_ENOMEM, "tokenizer: out of memory");
    }
    tok->bos_id = tok->eos_id = -1;
    tok_byte_level_init(tok->byte_to_cp);

    struct loader L = {tok, path, err, NULL, false, false, NULL, NULL};
    char *data = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    enum ll_status st = ll_read_file(path, &data, &len, err);
    if (st == LL_OK)
        st = ll_json_parse(&root, data, len, path, err);
    free(data);
    if (st == LL_OK)
        st = load_tokenizer_json(&L, root);
    cJSON_Delete(root);
    if (st == LL_OK && !(tok->cp_class = malloc(0x10000 * sizeof *tok->cp_class)))
        st = no_memory(&L);
    if (st == LL_OK) {
        tok_cp_class_init(tok->cp_class);
        tok_nfc_table_init(tok->cp_class);
        st = tok_cache_init(&tok->cache);
        if (st != LL_OK)
            no_memory(&L);
    }
    if (st == LL_OK)
        st = tok_load_config(tok, model_dir, err);
    free(path);
    if (st != LL_OK) {
        tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LL_OK;
}
