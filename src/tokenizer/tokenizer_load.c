/*
 * tokenizer_load.c: builds a struct tokenizer from DIR/tokenizer.json (the Hugging Face
 * `tokenizers` serialisation) and, through tok_load_config(), DIR/tokenizer_config.json.
 *
 * Read from tokenizer.json: model (BPE: vocab, merges in "a b" or ["a","b"] form,
 * ignore_merges), added_tokens (id, content, single_word, lstrip, rstrip, normalized, special),
 * normalizer (none or NFC), pre_tokenizer (the Qwen2, Llama 3 or Mistral-Nemo split regex followed
 * by ByteLevel without its own regex; anything else is refused by name), post_processor
 * (TemplateProcessing, ByteLevel, Sequence of these, or none) and decoder (ByteLevel).
 * Every problem is reported as "FILE: FIELD: what is wrong" and everything built so far is
 * freed. Runs once on the loading thread; the result is read-only afterwards.
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
    bool b;
    enum ll_status st;
    if ((st = opt_bool(L, model, "model", "byte_fallback", false, &b)) != LL_OK)
        return st;
    if (b)
        return fail(L, LL_EUNSUPPORTED, "model.byte_fallback: not supported");
    if ((st = opt_bool(L, model, "model", "fuse_unk", false, &b)) != LL_OK)
        return st;
    return opt_bool(L, model, "model", "ignore_merges", false, &L->tok->ignore_merges);
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

        /* a normalized token is looked for in normalised text, so normalise it too */
        const char *match = text;
        size_t match_len = len;
        bool owned = false;
        if (t->normalized && tok->nfc && tok_nfc(NULL, text, len, &match, &match_len, &owned) != LL_OK)
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

static enum ll_status load_normalizer(struct loader *L, const cJSON *n)
{
    if (!n)
        return LL_OK;
    const char *type = type_of(n);
    if (!type)
        return fail(L, LL_EFORMAT, "normalizer.type: expected a string");
    if (!strcmp(type, "NFC")) {
        L->tok->nfc = true;
        return LL_OK;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = ll_json_member(n, "normalizers");
        if (!cJSON_IsArray(list))
            return fail(L, LL_EFORMAT, "normalizer.normalizers: expected an array");
        for (const cJSON *e = list->child; e; e = e->next) {
            const char *t = type_of(e);
            if (!t || strcmp(t, "NFC"))
                return fail(L, LL_EUNSUPPORTED, "normalizer: \"%s\" is not supported (only NFC)",
                            t ? t : "?");
        }
        L->tok->nfc = list->child != NULL;
        return LL_OK;
    }
    return fail(L, LL_EUNSUPPORTED, "normalizer: \"%s\" is not supported (only NFC)", type);
}

static enum ll_status byte_level_ok(struct loader *L, const cJSON *b, const char *where)
{
    bool prefix, regex;
    enum ll_status st;
    if ((st = opt_bool(L, b, where, "add_prefix_space", false, &prefix)) != LL_OK ||
        (st = opt_bool(L, b, where, "use_regex", true, &regex)) != LL_OK)
        return st;
    if (prefix)
        return fail(L, LL_EUNSUPPORTED, "%s.add_prefix_space: true is not supported", where);
    if (regex)
        return fail(L, LL_EUNSUPPORTED, "%s.use_regex: the GPT-2 regex is not supported (only "
                    "a Split pattern before a ByteLevel with use_regex false)", where);
    return LL_OK;
}

static enum ll_status load_pre_tokenizer(struct loader *L, const cJSON *p)
{
    const char *type = type_of(p);
    const cJSON *list = ll_json_member(p, "pretokenizers");
    if (!type || strcmp(type, "Sequence") || !cJSON_IsArray(list) || cJSON_GetArraySize(list) != 2)
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer: only a Sequence of [Split with the Qwen2, "
                    "Llama 3 or Mistral-Nemo pattern, ByteLevel] is supported (found %s)",
                    type ? type : "none");
    const cJSON *split = list->child, *bl = split->next;
    const char *t0 = type_of(split), *t1 = type_of(bl);
    if (!t0 || strcmp(t0, "Split") || !t1 || strcmp(t1, "ByteLevel"))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers: expected [Split, ByteLevel], "
                    "found [%s, %s]", t0 ? t0 : "?", t1 ? t1 : "?");
    const cJSON *regex = ll_json_member(ll_json_member(split, "pattern"), "Regex");
    if (!cJSON_IsString(regex))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern: expected "
                    "{\"Regex\": ...}");
    if (!tok_split_find(regex->valuestring, &L->tok->split))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex: only the "
                    "split patterns of %s, %s and %s are implemented, found %.160s",
                    tok_split_name(TOK_SPLIT_QWEN2), tok_split_name(TOK_SPLIT_LLAMA3),
                    tok_split_name(TOK_SPLIT_TEKKEN), regex->valuestring);
    const cJSON *behavior = ll_json_member(split, "behavior");
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated"))
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].behavior: only "
                    "\"Isolated\" is supported");
    bool invert;
    enum ll_status st = opt_bool(L, split, "pre_tokenizer.pretokenizers[0]", "invert", false,
                                 &invert);
    if (st != LL_OK)
        return st;
    if (invert)
        return fail(L, LL_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].invert: true is not "
                    "supported");
    return byte_level_ok(L, bl, "pre_tokenizer.pretokenizers[1]");
}

static enum ll_status load_decoder(struct loader *L, const cJSON *d)
{
    const char *type = type_of(d);
    if (type && !strcmp(type, "ByteLevel"))
        return LL_OK;
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = ll_json_member(d, "decoders");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1 && type_of(list->child) &&
            !strcmp(type_of(list->child), "ByteLevel"))
            return LL_OK;
    }
    return fail(L, LL_EUNSUPPORTED, "decoder: only ByteLevel is supported (found %s)",
                type ? type : "none");
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

/* What each id decodes to, and the single-byte tokens BPE starts from. */
static enum ll_status finish_ids(struct loader *L)
{
    struct tokenizer *tok = L->tok;
    size_t longest = 0;
    for (int32_t id = 0; id < tok->n_ids; id++)
        if (tok->ids[id].flags & TOK_ID_PRESENT && tok->ids[id].str_len > longest)
            longest = tok->ids[id].str_len;
    char *buf = malloc(longest + 1);
    if (!buf)
        return no_memory(L);
    for (int32_t id = 0; id < tok->n_ids; id++) {
        struct tok_entry *e = &tok->ids[id];
        if (!(e->flags & TOK_ID_PRESENT))
            continue;
        size_t n = tok_byte_level_decode(tok->arena.data + e->str_off, e->str_len, buf);
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
        uint32_t cp = tok->byte_to_cp[b];
        char s[2];
        size_t n = 1;
        if (cp < 0x80) {
            s[0] = (char)cp;
        } else {
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
    if ((st = load_normalizer(L, ll_json_member(root, "normalizer"))) != LL_OK ||
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

    struct loader L = {tok, path, err};
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
