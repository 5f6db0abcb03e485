/*
 * grammar_impl.h: the inside of grammars, shared by grammar.c (building, compiling),
 * grammar_json.c (JSON Schema → rules) and grammar_rt.c (the matcher and the token trie).
 */
#ifndef LLAISYS_GRAMMAR_IMPL_H
#define LLAISYS_GRAMMAR_IMPL_H

#include <stdatomic.h>

#include "grammar.h"

/* A rule being built: its alternatives. */
struct brule {
    struct gseq *alts;
    int n, cap;
};

/* Rules the JSON compiler shares within one builder (-1: not made yet). */
enum { GB_WS, GB_STRING, GB_NUMBER, GB_INTEGER, GB_VALUE, GB_OBJECT, GB_ARRAY, GB_LEAD,
       GB_N_SHARED };

struct gbuild {
    struct brule *rules;
    int n_rules, cap_rules;
    struct gset *sets;
    int n_sets, cap_sets;
    bool failed;
    int shared[GB_N_SHARED];
};

/* Elements of a compiled grammar: >= 0 a byte set, GEL_END the end of an alternative, <= -2 a
 * rule reference (GEL_RULE(r) / GEL_RULE_ID(e)). */
#define GEL_END (-1)
#define GEL_RULE(r) (-(r) - 2)
#define GEL_RULE_ID(e) (-(e) - 2)

struct grammar {
    atomic_int refs;
    int n_rules, n_alts, n_elems, n_sets;
    int32_t *rule_alt;  /* (n_rules + 1) alternatives of rule r: alt_start[rule_alt[r] ..
                           rule_alt[r + 1]) */
    int32_t *alt_start; /* (n_alts) position of each alternative's first element */
    int32_t *elem;      /* (n_elems) */
    int32_t *sufmin;    /* (n_elems) fewest bytes from a position to its alternative's end */
    struct gset *sets;  /* (n_sets) */
    int root;
    int min_len;
    uint64_t hash;
};

/* ---- numbers (grammar_num.c) ---- */

struct cJSON;
/* Any JSON number (integer: no fraction or exponent); one shared rule each per builder. */
int grammar_num_any(struct gbuild *b, bool integer);
/* A number or integer as schema s bounds it (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, numbers or draft 4's booleans; none: grammar_num_any). LL_EINVAL names
 * a malformed bound or bounds no number meets. */
enum ll_status grammar_num_schema(struct gbuild *b, const struct cJSON *s, bool integer,
                                  const char *path, int *rule, struct ll_err *err);
/* The first bound keyword s has, or NULL. */
const char *grammar_num_bound_kw(const struct cJSON *s);

/* ---- regular strings (grammar_regex.c) ---- */

/* The JSON string (quotes included) whose value matches pattern (ECMA-262 subset; NULL: any),
 * format (date, time, date-time, duration, uuid, ipv4, ipv6, email, hostname, uri; a name outside
 * JSON Schema's list only beside a pattern, which says what it means; NULL: none) and encoding
 * (contentEncoding: base64, base64url; NULL: none), of min..max code points (max < 0:
 * unbounded). LL_EUNSUPPORTED names what is not supported, LL_EINVAL a malformed pattern or
 * constraints no string meets; messages name path. */
enum ll_status grammar_string_regular(struct gbuild *b, const char *pattern, const char *format,
                                      const char *encoding, int min, int max, const char *path,
                                      int *rule, struct ll_err *err);

static inline bool gset_has(const struct gset *s, unsigned c)
{
    return (s->bits[c >> 6] >> (c & 63)) & 1;
}

static inline void gset_add(struct gset *s, unsigned c)
{
    s->bits[c >> 6] |= (uint64_t)1 << (c & 63);
}

#endif
