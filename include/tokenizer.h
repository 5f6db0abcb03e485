/*
 * tokenizer.h: BPE tokenizer read from a Hugging Face model directory (tokenizer.json +
 * tokenizer_config.json), encoding and decoding exactly as Hugging Face `tokenizers` does:
 * byte-level BPE (Qwen2 / DeepSeek-R1-Distill-Qwen, Qwen3, Llama 3, Mistral-Nemo) and
 * SentencePiece-style BPE with byte fallback (Llama 2, Mistral-7B, TinyLlama, Gemma 2/3).
 *
 * Pipeline of tokenizer_encode: invalid UTF-8 → U+FFFD (one per maximal invalid subpart, as
 * Python's errors="replace") → added tokens (longest match, lstrip/rstrip/single_word honoured)
 * → normalizer (NFC, Prepend, Replace) → pre-tokenizer (a split regex, a literal-string Split,
 * Metaspace, or none) → BPE by merge rank (over bytes in the byte-level alphabet, or over
 * characters with byte fallback) → optional special tokens of the post-processor (e.g. BOS).
 *
 * Threads: a loaded tokenizer is read-only except for an internal, locked BPE cache, so every
 * function below may be called from several threads at once on one tokenizer. A
 * struct tokenizer_stream belongs to one thread at a time.
 *
 * Ids: 0 .. tokenizer_vocab_size()-1; an id without text (e.g. padding rows of a model's
 * embedding, 151665..151935 for DeepSeek-R1-Distill-Qwen) decodes to "" and is never produced.
 */
#ifndef LLAISYS_TOKENIZER_H
#define LLAISYS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

struct tokenizer;
struct tokenizer_stream;

/* Load DIR/tokenizer.json (required) and DIR/tokenizer_config.json (optional: bos/eos token,
 * add_bos_token/add_eos_token). On success *out owns the tokenizer (free with tokenizer_free).
 * Returns LL_OK; LL_EIO (file unreadable), LL_EJSON (not JSON: names file, line, column),
 * LL_EFORMAT (missing field or wrong type: names file and field), LL_EUNSUPPORTED (a
 * normalizer, pre-tokenizer, model or decoder this implementation does not do), LL_ENOMEM. */
enum ll_status tokenizer_load(struct tokenizer **out, const char *model_dir, struct ll_err *err);

/* Free a tokenizer (NULL is fine). No stream of it may be used afterwards. */
void tokenizer_free(struct tokenizer *tok);

/* Encode len bytes of text (need not be NUL-terminated nor valid UTF-8) to ids. add_special
 * adds the post-processor's special tokens, like Hugging Face add_special_tokens=True (for
 * DeepSeek-R1-Distill-Qwen: BOS in front). *ids is malloc'd (caller frees; non-NULL even when
 * *n_ids is 0). Returns LL_OK or LL_ENOMEM (then *ids is NULL, *n_ids 0). */
enum ll_status tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                                bool add_special, int32_t **ids, size_t *n_ids,
                                struct ll_err *err);

/* Decode ids to UTF-8 text (as Hugging Face decode with clean_up_tokenization_spaces=False):
 * ids without text are skipped, special tokens are skipped when skip_special, invalid byte
 * sequences become U+FFFD (byte-level: per maximal invalid subpart; a run of byte-fallback
 * tokens that is not valid UTF-8: one per byte), and the decoder's Strip / Metaspace rules
 * apply to the start (and end) of the whole text. *text is malloc'd and NUL-terminated (caller frees); *len excludes
 * the NUL (len may be NULL). Returns LL_OK or LL_ENOMEM. */
enum ll_status tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids,
                                bool skip_special, char **text, size_t *len, struct ll_err *err);

/* Number of ids: highest id of the vocabulary or added tokens, plus one (151665). */
int32_t tokenizer_vocab_size(const struct tokenizer *tok);

/* The token string of an id as tokenizer.json writes it (byte-level form for vocabulary
 * entries, e.g. "Ġhello"; content for added tokens, e.g. "<think>"); NULL for an id without
 * one. Owned by the tokenizer. */
const char *tokenizer_id_to_token(const struct tokenizer *tok, int32_t id);

/* Id of a token string in the same form (added tokens first, then the vocabulary), or -1. */
int32_t tokenizer_token_to_id(const struct tokenizer *tok, const char *token);

/* The raw bytes an id decodes to (possibly part of a UTF-8 character); NULL with *len = 0 for an
 * id without text. Owned by the tokenizer. */
const char *tokenizer_id_bytes(const struct tokenizer *tok, int32_t id, size_t *len);

/* Whether id is an added token marked "special" (skipped by skip_special decoding). */
bool tokenizer_is_special(const struct tokenizer *tok, int32_t id);

/* BOS / EOS ids: from tokenizer_config.json bos_token / eos_token when given, else BOS is the
 * first special token the post-processor puts in front; -1 when there is none. */
int32_t tokenizer_bos_id(const struct tokenizer *tok);
int32_t tokenizer_eos_id(const struct tokenizer *tok);

/* BOS / EOS token strings from tokenizer_config.json (bos_token / eos_token, written there either
 * as a string or as an AddedToken object whose "content" is used), e.g.
 * "<｜begin▁of▁sentence｜>"; NULL when absent or null. Owned by the tokenizer. These are what
 * a chat template sees as bos_token / eos_token. */
const char *tokenizer_bos_token(const struct tokenizer *tok);
const char *tokenizer_eos_token(const struct tokenizer *tok);

/* DIR/tokenizer_config.json (transformers' file; optional), the fields llaisys uses. This is the
 * one reader of that file: the tokenizer (bos/eos, add_bos/eos_token), the chat template loader
 * (chat_template, bos_token/eos_token as the template sees them) and mkmodel take it from here. */
struct tokenizer_config {
    char *path;                  /* DIR/tokenizer_config.json, for messages */
    bool found;                  /* the file exists (when not, every field below is empty) */
    char *bos_token, *eos_token; /* bos_token / eos_token: a string, or an AddedToken object's
                                    "content"; NULL when absent or null */
    bool has_add_bos, add_bos;   /* add_bos_token, when the file gives it */
    bool has_add_eos, add_eos;   /* add_eos_token, when the file gives it */
    char *chat_template;         /* chat_template: the string, or of a list of {name, template}
                                    the "default" entry (else the only one); NULL when absent,
                                    null, or unusable */
    const char *chat_template_error; /* why a chat_template that is present is unusable (static
                                        text, e.g. a list without "default"); NULL otherwise */
};

/* Read DIR/tokenizer_config.json into *cfg (every field set; free with tokenizer_config_free,
 * also after an error). A missing file is LL_OK with found false. Returns LL_OK, LL_EIO
 * (unreadable), LL_EJSON (not JSON: line and column), LL_EFORMAT (not an object, or bos_token /
 * eos_token / add_bos_token / add_eos_token of the wrong type: names the file and the field) or
 * LL_ENOMEM. A malformed chat_template is not an error here (only templates need it): it is
 * reported in chat_template_error. */
enum ll_status tokenizer_config_read(struct tokenizer_config *cfg, const char *model_dir,
                                     struct ll_err *err);
/* Free what tokenizer_config_read allocated (safe on a zeroed struct). */
void tokenizer_config_free(struct tokenizer_config *cfg);

/* Incremental decoder for streaming: feed ids one at a time, get back only complete UTF-8.
 * Bytes of a character split across tokens are held until it is complete; byte sequences that
 * can never become valid come out as U+FFFD at once. A run of byte-fallback tokens is held
 * until the run ends (whether it becomes U+FFFD depends on all of it), and Strip's characters
 * at the end until other text follows. The concatenation of every feed and the final flush
 * equals tokenizer_decode of the same ids. Allocates in init, and later only to hold a run of
 * byte-fallback tokens longer than 64 bytes.
 * Returns LL_OK or LL_ENOMEM; *out owns the stream (free with tokenizer_stream_free). */
enum ll_status tokenizer_stream_init(struct tokenizer_stream **out, const struct tokenizer *tok,
                                     bool skip_special, struct ll_err *err);

/* Feed one id; returns the newly complete text (*len bytes, NUL-terminated, possibly empty),
 * valid until the next call on this stream. Never fails; ids without text give "". */
const char *tokenizer_stream_feed(struct tokenizer_stream *s, int32_t id, size_t *len);

/* Write special token id into the text all the same (when the stream skips special tokens),
 * up to TOKENIZER_STREAM_MAX_KEEP ids; false when that many are kept already. */
#define TOKENIZER_STREAM_MAX_KEEP 8
bool tokenizer_stream_keep(struct tokenizer_stream *s, int32_t id);

/* End of the stream: returns the held bytes of an incomplete character as one U+FFFD (or "")
 * and resets the stream for reuse. Valid until the next call on this stream. */
const char *tokenizer_stream_flush(struct tokenizer_stream *s, size_t *len);

/* Drop held bytes without output, so the stream can start a new text. */
void tokenizer_stream_reset(struct tokenizer_stream *s);

/* Free a stream (NULL is fine). */
void tokenizer_stream_free(struct tokenizer_stream *s);

#endif
