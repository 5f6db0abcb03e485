/*
 * tokenizer_impl.h: the inside of struct tokenizer, shared by the files of src/tokenizer/ only.
 *
 * Everything here is built once by tokenizer_load() and read-only afterwards, except the BPE
 * cache, which has its own locks (bpe_cache.c). Strings live in one arena and are referred to
 * by offset; every arena string is NUL-terminated.
 */
#ifndef LLAISYS_TOKENIZER_IMPL_H
#define LLAISYS_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "tokenizer.h"
#include "hash.h"
#include "json.h"
#include "utf8.h"

#define TOK_MAX_ID ((1 << 21) - 1) /* ids from a file are below this (fits the merge map) */
#define TOK_MAX_SPECIAL 8     /* special tokens the post-processor may add on each side */

/* ---- growable byte arena (load time only) ---- */
struct tok_arena {
    char *data;
    size_t len, cap;
};
/* Append n bytes plus a NUL; *off receives their offset. LL_OK or LL_ENOMEM. */
enum ll_status tok_arena_add(struct tok_arena *a, const void *s, size_t n, uint32_t *off);

/* ---- growable id vector ---- */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
enum ll_status tok_ids_reserve(struct tok_ids *ids, size_t extra);
static inline enum ll_status tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap && tok_ids_reserve(ids, 1) != LL_OK)
        return LL_ENOMEM;
    ids->v[ids->n++] = id;
    return LL_OK;
}

/* ---- string → id map (vocab.c); keys are arena strings ---- */
struct tok_strmap_slot {
    uint32_t off, len; /* key in the arena; len == UINT32_MAX marks an empty slot */
    int32_t id;
    uint32_t hash;
};
struct tok_strmap {
    struct tok_strmap_slot *slots;
    size_t mask, count;
};
enum ll_status tok_strmap_init(struct tok_strmap *m, size_t expected);
void tok_strmap_free(struct tok_strmap *m);
/* Insert or replace key (already in arena at off) → id. Never grows: sized by init. */
void tok_strmap_put(struct tok_strmap *m, const char *arena, uint32_t off, uint32_t len,
                    int32_t id);
/* Id for the key, or -1. */
int32_t tok_strmap_get(const struct tok_strmap *m, const char *arena, const char *key,
                       size_t len);

/* ---- merge pair → rank map (vocab.c) ----
 * One 64-bit word per slot: left id (21 bits) | right id (21 bits) | rank (22 bits), so the
 * 151k merges of Qwen2 take 2 MiB and most lookups touch one cache line; the merged id of a
 * rank is in a separate array. */
#define TOK_PAIR_ID_BITS 21
#define TOK_PAIR_RANK_BITS 22
#define TOK_MAX_RANK ((1u << TOK_PAIR_RANK_BITS) - 1) /* merges must number at most this */
struct tok_pairmap {
    uint64_t *slots; /* UINT64_MAX = empty */
    size_t mask, count;
    int32_t *merged; /* (n_ranks) merged id of each rank, -1 for a rank overridden later */
    uint32_t n_ranks;
};
enum ll_status tok_pairmap_init(struct tok_pairmap *m, size_t n_merges);
void tok_pairmap_free(struct tok_pairmap *m);
/* Record merge number `rank` (ranks are given in increasing order); a pair merged twice keeps
 * the later rank, as a hash map filled in file order does. */
void tok_pairmap_put(struct tok_pairmap *m, int32_t left, int32_t right, uint32_t rank,
                     int32_t merged);
static inline uint64_t tok_pair_key(int32_t left, int32_t right)
{
    return (uint64_t)(uint32_t)left << TOK_PAIR_ID_BITS | (uint32_t)right;
}
static inline size_t tok_pair_slot(const struct tok_pairmap *m, uint64_t key)
{
    return (size_t)((key * LL_GOLDEN64) >> 32) & m->mask;
}
/* Rank of the merge of (left, right), or UINT32_MAX when there is none. */
static inline uint32_t tok_pairmap_rank(const struct tok_pairmap *m, int32_t left, int32_t right)
{
    uint64_t key = tok_pair_key(left, right);
    for (size_t i = tok_pair_slot(m, key);; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (s >> TOK_PAIR_RANK_BITS == key)
            return (uint32_t)(s & TOK_MAX_RANK);
        if (s == UINT64_MAX)
            return UINT32_MAX;
    }
}

/* ---- per-id data ---- */
enum {
    TOK_ID_PRESENT = 1, /* the id has a token string */
    TOK_ID_ADDED = 2,   /* it is an added token (matched before BPE) */
    TOK_ID_SPECIAL = 4, /* added token with "special": true */
    TOK_ID_BYTE = 8,    /* a byte-fallback token "<0xNN>" that the decoder turns into its byte */
};
struct tok_entry {
    uint32_t str_off, str_len;     /* token string as in tokenizer.json */
    uint32_t bytes_off, bytes_len; /* what it decodes to */
    uint8_t flags;
};

/* ---- added tokens and the tries that find them (added_tokens.c) ---- */
struct tok_added {
    int32_t id;
    uint32_t off, len; /* text to match: content, NFC-normalised when `normalized` */
    bool lstrip, rstrip, single_word, normalized, special;
};
struct tok_trie_node {
    uint32_t child, sibling; /* 0 = none (node 0 is the root, never a child) */
    int32_t added;           /* index into tok->added ending here, or -1 */
    uint8_t byte;
};
struct tok_trie {
    struct tok_trie_node *nodes;
    size_t n, cap;
    bool first_byte[256]; /* bytes a match can start with */
};
enum ll_status tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t added);
void tok_trie_free(struct tok_trie *t);

/* Callback for each part of a split: text (id -1) or one token id. */
typedef enum ll_status (*tok_part_fn)(void *ctx, const char *s, size_t n, int32_t id);
/* Split s at the added tokens of trie (leftmost-longest, then lstrip/rstrip/single_word as
 * Hugging Face applies them), calling fn for each text gap and each token in order. */
enum ll_status tok_added_split(const struct tokenizer *tok, const struct tok_trie *trie,
                               const char *s, size_t n, tok_part_fn fn, void *ctx);

/* ---- code point classes (pretokenize.c) ---- */
enum {
    TOK_CP_L = 1,             /* \p{L} */
    TOK_CP_N = 2,             /* \p{N} */
    TOK_CP_WS = 4,            /* \s (White_Space) */
    TOK_CP_CRLF = 8,          /* \r or \n */
    TOK_CP_WORD = 16,         /* \w (letters, marks, digits, connector punctuation, joiners) */
    TOK_CP_NFC_OK = 32,       /* NFC leaves it alone whatever its neighbours (normalize.c) */
    TOK_CP_UPPERISH = 64,     /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (tekken's word head) */
    TOK_CP_NFC_SCRATCH = 128, /* used by tok_nfc_table_init() while it builds, then clear */
    TOK_CP_LOWERISH = 256,    /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] (tekken's word tail) */
};
/* Fill the class table of the Basic Multilingual Plane (65536 entries). */
void tok_cp_class_init(uint16_t *table);
/* Class of any code point. */
uint16_t tok_cp_class(const struct tokenizer *tok, uint32_t cp);

/* The pre-tokenizer split patterns implemented (pretokenize.c). */
enum tok_split {
    TOK_SPLIT_QWEN2,  /* Qwen2's: digits one by one, contractions */
    TOK_SPLIT_LLAMA3, /* Llama 3's: Qwen2's with digits in runs of up to three */
    TOK_SPLIT_TEKKEN, /* Mistral-Nemo's: words split where the case changes, no contractions */
    TOK_SPLIT_O200K,  /* o200k's (GPT-4o, Phi-4-mini): tekken's words, each with an optional
                         contraction after it; digits in runs of up to three */
    TOK_SPLIT_GPT2,   /* GPT-2's (ByteLevel's own regex, use_regex true: GPT-2, GPT-NeoX,
                         StarCoder, SmolLM): case-sensitive contractions, a space joins the
                         letters, digits or symbols after it, no line-break rule */
};
/* A Digits pre-tokenizer before the split (SmolLM, StarCoder): numeric characters (Unicode
 * Nd, Nl, No, as Rust's char::is_numeric) cut the text into pieces of their own first. */
enum tok_digits {
    TOK_DIGITS_NONE,
    TOK_DIGITS_INDIVIDUAL, /* individual_digits true: each numeric character alone */
    TOK_DIGITS_RUNS,       /* false: each run of them */
};
/* The kind whose regex is exactly `regex` as tokenizer.json writes it: true and *out set, or
 * false when it is none of them. */
bool tok_split_find(const char *regex, enum tok_split *out);
/* A kind's name, for messages ("Qwen2", "Llama 3", "Mistral-Nemo (tekken)"). */
const char *tok_split_name(enum tok_split kind);
/* Split s by the tokenizer's pre-tokenizer regex (tok->split), after its Digits pre-tokenizer
 * (tok->digits) when it has one, calling fn(ctx, piece, len, -1) per piece. */
enum ll_status tok_pretokenize(const struct tokenizer *tok, const char *s, size_t n,
                               tok_part_fn fn, void *ctx);

/* ---- UTF-8 (utf8.h) ---- */
/* Decode one character of valid UTF-8 (n ≥ 1); returns its length. */
static inline size_t tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    enum ll_utf8_status st;
    size_t k = ll_utf8_scan(s, n, &st, cp);
    if (st != LL_UTF8_OK) /* only valid text reaches here; treat defensively as one byte */
        *cp = 0xFFFD;
    return k ? k : 1;
}

/* ---- the string pre-tokenizers (pretokenize_string.c) ---- */
/* Split s by the tokenizer's literal-string pre-tokenizer (tok->pre: TOK_PRE_SPLIT_STRING or
 * TOK_PRE_METASPACE), calling fn(ctx, piece, len, -1) per piece; at_start tells whether s
 * begins the original text (Metaspace's prepend_scheme "first"). LL_OK, LL_ENOMEM or fn's. */
enum ll_status tok_pretokenize_string(const struct tokenizer *tok, const char *s, size_t n,
                                      bool at_start, tok_part_fn fn, void *ctx);

/* ---- byte-level mapping (byte_level.c) ---- */
/* The GPT-2 table: byte → code point. */
void tok_byte_level_init(uint32_t byte_to_cp[256]);
/* Bytes a token string decodes to: each character through the table, or, when one is not in
 * it, the string's own UTF-8. out must hold len bytes; returns the count written. */
size_t tok_byte_level_decode(const char *s, size_t len, char *out);

/* ---- normalizer (normalize.c) ---- */
/* One step of the normalizer; the strings are in the arena. */
enum tok_norm_kind {
    TOK_NORM_NFC,     /* NFC */
    TOK_NORM_PREPEND, /* Prepend: a in front of a non-empty text */
    TOK_NORM_REPLACE, /* Replace with a String pattern: every a (left to right) becomes b */
};
struct tok_norm_step {
    enum tok_norm_kind kind;
    uint32_t a_off, a_len, b_off, b_len;
};
#define TOK_MAX_NORM 8 /* steps of a normalizer Sequence */
/* Set TOK_CP_NFC_OK in the class table of the Basic Multilingual Plane. */
void tok_nfc_table_init(uint16_t *table);
/* s with every occurrence of pat (np > 0; leftmost first, without overlaps) replaced by with,
 * written to out (room for n + (n / np) * nw bytes). Returns the count. */
size_t tok_replace(const char *s, size_t n, const char *pat, size_t np, const char *with,
                   size_t nw, char *out);
/* The tokenizer's normalizer (every step of tok->norm in order) over valid UTF-8 s: *out is s
 * itself (*owned = false) or a malloc'd string (*owned = true). tok->cp_class may still be NULL
 * (at load: no NFC quick check). LL_OK or LL_ENOMEM. */
enum ll_status tok_normalize(const struct tokenizer *tok, const char *s, size_t n,
                             const char **out, size_t *out_len, bool *owned);
/* NFC of valid UTF-8 s: *out is either s itself (already NFC, *owned = false) or a malloc'd copy
 * (*owned = true). tok may be NULL (no quick check). LL_OK or LL_ENOMEM. */
enum ll_status tok_nfc(const struct tokenizer *tok, const char *s, size_t n, const char **out,
                       size_t *out_len, bool *owned);

/* ---- BPE (bpe.c) and its cache (bpe_cache.c) ---- */
/* Append the BPE ids of one pre-token (raw bytes) to out. LL_OK or LL_ENOMEM. */
enum ll_status tok_bpe_encode(const struct tokenizer *tok, const char *s, size_t n,
                              struct tok_ids *out);
struct tok_cache;
enum ll_status tok_cache_init(struct tok_cache **out);
void tok_cache_free(struct tok_cache *c);
#define TOK_CACHE_MAX_KEY 64 /* pre-tokens longer than this are not cached */
/* Append the cached ids of key to out and return true, or return false (out unchanged). */
bool tok_cache_get(struct tok_cache *c, const char *key, size_t n, struct tok_ids *out);
/* Remember key → ids (silently skipped when it does not fit). */
void tok_cache_put(struct tok_cache *c, const char *key, size_t n, const int32_t *ids,
                   size_t n_ids);

/* ---- loading (tokenizer_load.c, tokenizer_config.c) ---- */
struct cJSON;
/* Read DIR/tokenizer_config.json if present: bos/eos tokens and add_bos/eos_token. */
enum ll_status tok_load_config(struct tokenizer *tok, const char *model_dir, struct ll_err *err);

/* ---- the tokenizer ---- */
/* The pre-tokenizer. */
enum tok_pre {
    TOK_PRE_REGEX,        /* Sequence [Split with one of the tok_split regexes, ByteLevel], or
                             ByteLevel with GPT-2's regex (after a Digits pre-tokenizer) */
    TOK_PRE_NONE,         /* null: each normalized part is one piece */
    TOK_PRE_SPLIT_STRING, /* Split on a literal string, MergedWithPrevious */
    TOK_PRE_METASPACE,    /* Metaspace: spaces → replacement, prepend, split MergedWithNext */
};
/* Metaspace's prepend_scheme (pre-tokenizer and decoder). */
enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

struct tokenizer {
    struct tok_arena arena;
    struct tok_entry *ids; /* (n_ids) */
    int32_t n_ids;         /* highest id + 1 */
    size_t max_token_bytes;

    struct tok_strmap vocab;   /* token string → id: model vocabulary, then added tokens */
    struct tok_pairmap merges; /* (left, right) → rank → merged */
    int32_t byte_id[256];      /* id of each single byte's token, -1 if none */
    uint32_t byte_to_cp[256];
    bool ignore_merges;        /* BPE option: a pre-token that is a token is taken whole */
    bool byte_level;           /* GPT-2 byte-level scheme; else BPE starts from characters */
    bool byte_fallback;        /* a character without a token becomes its <0xNN> tokens */
    bool fuse_unk;             /* consecutive unknown characters give one unk_id */
    int32_t unk_id;            /* model.unk_token's id, -1 if none */

    struct tok_norm_step norm[TOK_MAX_NORM]; /* the normalizer's steps, in order */
    int n_norm;
    enum tok_pre pre;              /* the pre-tokenizer */
    enum tok_split split;          /* TOK_PRE_REGEX: the pattern */
    enum tok_digits digits;        /* TOK_PRE_REGEX: a Digits pre-tokenizer first, or none */
    uint32_t pre_off, pre_len;     /* TOK_PRE_SPLIT_STRING: the pattern; TOK_PRE_METASPACE:
                                      the replacement (arena) */
    enum tok_prepend pre_prepend;  /* TOK_PRE_METASPACE */
    bool pre_split;                /* TOK_PRE_METASPACE: split at the replacement */

    /* decoder (ByteLevel, or a Sequence of Replace / Metaspace, ByteFallback, Fuse, Strip) */
    bool dec_first_drop;           /* Metaspace with prepend: the first token loses every
                                      dec_meta (its other tokens have them as spaces) */
    uint32_t dec_meta_off, dec_meta_len; /* Metaspace's replacement (arena) */
    uint32_t strip_off, strip_len; /* Strip's content character (arena) */
    int strip_start, strip_stop;   /* Strip: how many to drop at the start / the end */

    struct tok_added *added; /* (n_added) */
    size_t n_added;
    struct tok_trie trie_raw;  /* added tokens with normalized = false */
    struct tok_trie trie_norm; /* added tokens with normalized = true (normalized content) */

    int32_t prefix[TOK_MAX_SPECIAL], suffix[TOK_MAX_SPECIAL]; /* add_special ids */
    int n_prefix, n_suffix;
    int32_t bos_id, eos_id;
    char *bos_token, *eos_token; /* malloc'd, may be NULL */

    uint16_t *cp_class; /* (65536) classes of the BMP: TOK_CP_* bits */
    struct tok_cache *cache;
};

#endif
