/*
 * grammar.h: constrained decoding. A context-free grammar over BYTES (built with the builder
 * below, or compiled from a JSON Schema by grammar_json.c), and the matcher that turns "the
 * bytes generated so far" into a token mask, so that the generated text stays a prefix of a
 * sentence of the grammar and ends only where the grammar may end.
 *
 * Grammar: rules, each a list of alternatives, each a sequence of byte sets and rule
 * references. No left recursion (grammar_build refuses it); every rule must derive some finite
 * string. A compiled struct grammar is immutable and reference-counted (any thread).
 *
 * Matcher (struct grammar_rt, one per distinct grammar in an engine, owned by the scheduler
 * thread): a state is the set of parse stacks compatible with the bytes so far; stacks are
 * interned persistent lists (shared tails), states interned sets of them, so a state is an int
 * and equal histories give equal ids. Transitions (state, byte) are memoised, so walking the
 * tokenizer's byte trie (struct token_trie: every token's bytes, in preorder, with subtree
 * skips) against a state costs one table lookup per trie node and prunes every subtree whose
 * prefix is already impossible. The mask of a state (which tokens may come next) is computed
 * once by such a walk and cached with the state; later visits of the same state, by the same
 * request or any other with an equal grammar, reuse it.
 *
 * Budget: each state knows the fewest bytes that complete a sentence (its cost). When the
 * tokens left to a request get close to that, only tokens whose next state can still complete
 * in the tokens that remain are allowed (every single byte is a token in byte-level BPE
 * vocabularies, so cost bytes need at most cost tokens): a constrained output that reaches
 * max_tokens is complete, not cut.
 *
 * Special tokens (added tokens marked special, and ids without bytes) are never allowed by a
 * mask, except the end ids the caller names, which are allowed exactly when the state accepts.
 */
#ifndef LLAISYS_GRAMMAR_H
#define LLAISYS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

struct cJSON;
struct tokenizer;
struct grammar;

/* ---- building ---- */

struct gbuild;

/* A byte set: bit b of bits[b / 64] set when byte b belongs. */
struct gset {
    uint64_t bits[4];
};

/* One symbol of a sequence: a byte set or a rule. */
struct gsym {
    int kind; /* GSYM_SET or GSYM_RULE */
    int arg;  /* set id (gb_set) or rule id (gb_rule) */
};
enum { GSYM_SET = 1, GSYM_RULE = 2 };

/* A growable sequence of symbols, the body of one alternative (free with gseq_free). */
struct gseq {
    struct gsym *s;
    int n, cap;
    bool failed; /* an append ran out of memory */
};

/* A new builder (NULL: out of memory). gbuild_free releases it (NULL is fine). */
struct gbuild *gbuild_new(void);
void gbuild_free(struct gbuild *b);
/* Whether an allocation failed in the builder (every call below then does nothing). */
bool gbuild_failed(const struct gbuild *b);

/* A new rule with no alternative yet; returns its id (-1 when out of memory). */
int gb_rule(struct gbuild *b);
/* The id of a byte set (equal sets share one id; -1 when out of memory). */
int gb_set(struct gbuild *b, const struct gset *set);
/* Add an alternative (a copy of seq; an empty seq is the empty string) to rule. */
void gb_alt(struct gbuild *b, int rule, const struct gseq *seq);

/* Sequence helpers: append the bytes of a literal, one byte, a byte range lo..hi, a set, a
 * rule. */
void gseq_lit(struct gbuild *b, struct gseq *q, const char *s, size_t len);
void gseq_byte(struct gbuild *b, struct gseq *q, unsigned char c);
void gseq_range(struct gbuild *b, struct gseq *q, unsigned char lo, unsigned char hi);
void gseq_setsym(struct gseq *q, int set);
void gseq_rule(struct gseq *q, int rule);
void gseq_clear(struct gseq *q);
void gseq_free(struct gseq *q);

/* Rules made of other rules (each returns the new rule's id, -1 when out of memory):
 * a literal; a concatenation of n rules; an alternation of n rules; x repeated min..max times
 * (max < 0: unbounded); x optional. */
int gb_literal(struct gbuild *b, const char *s);
int gb_concat(struct gbuild *b, const int *rules, int n);
int gb_choice(struct gbuild *b, const int *rules, int n);
int gb_repeat(struct gbuild *b, int x, int min, int max);
int gb_optional(struct gbuild *b, int x);

/* Free text up to a trigger: any bytes not containing `trigger`; on the trigger's last byte the
 * grammar goes on with `then`. optional: the text may also end without the trigger (then the
 * rule matches text alone); else the trigger (and then) must come. */
int gb_until(struct gbuild *b, const char *trigger, int then, bool optional);

/* Finish: check (no left recursion, every rule derives a finite string) and compile with root as
 * the start rule. On LL_OK *out is the caller's reference. Returns LL_OK, LL_EINVAL (the message
 * names the problem) or LL_ENOMEM. The builder may be freed afterwards. */
enum ll_status gbuild_finish(struct gbuild *b, int root, struct grammar **out,
                             struct ll_err *err);

/* ---- JSON (grammar_json.c) ---- */

/* The rule for JSON values matching schema (a JSON Schema; `where` names it in messages, e.g.
 * "response_format.json_schema.schema"). Supported: type (a name or a list of names) string,
 * number, integer, boolean, null, object, array; properties (generated in their order),
 * required (a name outside properties takes additionalProperties' schema), additionalProperties
 * (false, true, or a schema: without properties, a map of such values; beside properties, no
 * extra property is generated), propertyNames (a map's key schema; an enum or const of names
 * becomes optional properties), items, prefixItems (and draft 7's items array with
 * additionalItems), uniqueItems (items of an enum, a const, booleans or null: each value at
 * most once, in order), minItems, maxItems, minLength, maxLength (minimums up to
 * GRAMMAR_MAX_REPEAT; a larger maximum is held to it, or lower beside a pattern),
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (numbers and integers,
 * written without an exponent when bounded or stepped), pattern, format (date, time, date-time,
 * duration, uuid, ipv4, ipv6, email, hostname, uri; a name outside JSON Schema's list beside a
 * pattern) and contentEncoding (base64, base64url) on strings (grammar_regex.c), enum and const
 * (beside a type, only their values of it), anyOf, allOf (its schemas merged into one; so is
 * $ref with keywords beside it), oneOf of schemas that exclude each other (types, consts, or a
 * required property with a different const in each object), $ref to "#" or "#/..." ($defs,
 * definitions; recursion allowed); annotations (title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly, strict, discriminator) are ignored.
 * Any other keyword is LL_EUNSUPPORTED, naming it and its path; a malformed schema is
 * LL_EINVAL. Whitespace between tokens is limited to one space or a newline and up to 20 spaces
 * or tabs, so generated JSON cannot run on in whitespace; numbers to 15 digits before and after
 * the point and 2 exponent digits (what a double holds: no infinities, integers exact). */
#define GRAMMAR_MAX_REPEAT 256
enum ll_status grammar_json_schema(struct gbuild *b, const struct cJSON *schema,
                                   const char *where, int *rule, struct ll_err *err);
/* Text that a regular expression (the ECMA-262 subset of JSON Schema's pattern, README)
 * matches whole, as it is (vLLM's guided_regex); `path` names it in messages. LL_EUNSUPPORTED
 * names what is not supported, LL_EINVAL a malformed pattern or one that matches nothing. */
enum ll_status grammar_regex_text(struct gbuild *b, const char *pattern, const char *path,
                                  int *rule, struct ll_err *err);
/* Any JSON object (json_object mode); any JSON value. */
int grammar_json_any_object(struct gbuild *b);
int grammar_json_any_value(struct gbuild *b);
/* JSON whitespace between tokens as above, and up to 4 spaces or newlines before a value (one
 * rule each per builder). grammar_json_schema's rule starts with the latter. */
int grammar_json_ws(struct gbuild *b);
int grammar_json_lead_ws(struct gbuild *b);

/* The grammar "free text without `trigger`, the trigger, then g" (a request that starts inside
 * reasoning: the constraint applies after "</think>"). Returns a new reference or NULL (out of
 * memory). */
struct grammar *grammar_after(const struct grammar *g, const char *trigger);

/* The grammar "g, or `open`, free text without `close`, `close`, then g" (a request that may
 * open its reasoning itself, as Qwen3 does: the constraint applies from the start, or after the
 * reasoning it opens there). Returns a new reference or NULL (out of memory). */
struct grammar *grammar_after_optional(const struct grammar *g, const char *open,
                                       const char *close);

/* References (any thread). */
struct grammar *grammar_ref(struct grammar *g);
void grammar_unref(struct grammar *g);
/* Fewest bytes of a sentence; content hash (equal grammars, equal hash). */
int grammar_min_len(const struct grammar *g);
uint64_t grammar_hash(const struct grammar *g);
bool grammar_equal(const struct grammar *a, const struct grammar *b);

/* Whether the bytes s[0..len) are a complete sentence (a test and debugging aid; builds a
 * throwaway matcher). *prefix (may be NULL) tells whether they are at least a prefix of one. */
bool grammar_accepts(const struct grammar *g, const char *s, size_t len, bool *prefix);

/* ---- tokens ---- */

/* Every token's bytes in a trie (preorder). Built from a tokenizer for a model vocabulary of
 * `vocab` ids (ids beyond the tokenizer's, special tokens and ids without bytes are left out
 * and never allowed). Returns LL_OK or LL_ENOMEM; token_trie_free releases it. */
struct token_trie;
enum ll_status token_trie_build(struct token_trie **out, const struct tokenizer *tok, int vocab,
                                struct ll_err *err);
void token_trie_free(struct token_trie *t);

/* ---- the matcher (one thread: the engine's scheduler) ---- */

struct grammar_rt;

/* A matcher for g (it takes a reference) over trie t (borrowed; must outlive it). */
enum ll_status grammar_rt_new(struct grammar_rt **out, struct grammar *g,
                              const struct token_trie *t, struct ll_err *err);
void grammar_rt_free(struct grammar_rt *rt);
const struct grammar *grammar_rt_grammar(const struct grammar_rt *rt);
/* Bytes of cache the matcher holds (states, transitions, masks). */
size_t grammar_rt_bytes(const struct grammar_rt *rt);

/* The start state (>= 0), or a negative value when out of room (see grammar_rt_error). */
int grammar_rt_start(struct grammar_rt *rt);
/* The state after byte string s from state st; -1 when s is impossible there; -2 out of
 * room (too many states: GRAMMAR_MAX_STATES, or memory). */
int grammar_rt_advance(struct grammar_rt *rt, int st, const char *s, size_t len);
/* Whether st accepts (the text so far is a sentence), and whether it is complete (it accepts
 * and nothing may follow). */
bool grammar_rt_accepts(const struct grammar_rt *rt, int st);
bool grammar_rt_complete(const struct grammar_rt *rt, int st);
/* The fewest bytes that complete a sentence from st. */
int grammar_rt_cost(const struct grammar_rt *rt, int st);

#define GRAMMAR_MAX_STATES (1 << 18)
#define GRAMMAR_MAX_END_IDS 64

/* Mask a logits row (vocab floats) for state st: every token that cannot come next gets
 * -INFINITY. end_ids (n_end <= GRAMMAR_MAX_END_IDS ids, e.g. eos and stop ids) stay as they
 * are when st accepts and are masked otherwise. budget: tokens the request may still generate including this one
 * (<= 0: no limit); with a budget only tokens after which a sentence can still be completed in
 * budget - 1 tokens are kept. Returns the number of ids left allowed (0: none; the caller
 * decides), or -2 when out of room. */
int grammar_rt_mask(struct grammar_rt *rt, int st, float *row, const int32_t *end_ids,
                    int n_end, int budget);

/* The message of the last failure of rt ("" when none). */
const char *grammar_rt_error(const struct grammar_rt *rt);

#endif
