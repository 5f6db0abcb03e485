/*
 * fuzz_tokenizer.c: tokenizer_encode / tokenizer_decode / the streaming decoder with seven real
 * tokenizers, loaded once: DeepSeek-R1-Distill-Qwen's (models/deepseek-r1-distill-qwen-tokenizer,
 * or the directory in $LLAISYS_FUZZ_TOKENIZER; the Qwen2 split), Llama 3.2's
 * (models/llama3-tokenizer; the Llama 3 split, ignore_merges), Mistral-Nemo's
 * (models/mistral-nemo-tokenizer; the tekken split, control tokens at ids 0..999), and two
 * SentencePiece-style ones with byte fallback: models/llama2-tokenizer (Prepend + Replace, no
 * pre-tokenizer, Strip in the decoder) and models/gemma3-tokenizer (Replace, Split " ", 6,415
 * added tokens); o200k's (models/o200k-tokenizer; cased words with contractions after them) and
 * GPT-2's (models/gpt2-tokenizer; the ByteLevel pre-tokenizer's own regex).
 *
 * Input: one mode byte, then the payload. Mode bits 3-5 pick the tokenizer (0: R1's,
 * 1: Llama 3.2's, 2: Mistral-Nemo's, 3: Llama 2's, 4: Gemma 3's, 5: o200k's, 6: GPT-2's; 7 as 0).
 * Bit 0 clear: the payload is text; it is encoded
 * (bit 1: add_special) and the ids decoded back. Bit 0 set: the payload is ids, 3 bytes each
 * (little-endian, minus 16, so a few are negative and some past the vocabulary), decoded.
 * Checked either way: the decoded text is valid UTF-8 (invalid bytes become U+FFFD) and the
 * streaming decoder, fed one id at a time, gives exactly tokenizer_decode's text (bit 2:
 * skip_special); encoding gives only ids inside the vocabulary.
 */
#include <stdbool.h>

#include "fuzz.h"
#include "tokenizer.h"
#include "utf8.h"

#define N_TOKS 7
static struct tokenizer *toks[N_TOKS];
static struct tokenizer_stream *streams[N_TOKS][2]; /* [tokenizer][skip_special] */
static struct tokenizer *tok;                 /* the input's */
static struct tokenizer_stream **stream;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dirs[N_TOKS] = {getenv("LLAISYS_FUZZ_TOKENIZER"), "models/llama3-tokenizer",
                                "models/mistral-nemo-tokenizer", "models/llama2-tokenizer",
                                "models/gemma3-tokenizer", "models/o200k-tokenizer",
                                "models/gpt2-tokenizer"};
    if (!dirs[0] || !*dirs[0])
        dirs[0] = "models/deepseek-r1-distill-qwen-tokenizer";
    for (int k = 0; k < N_TOKS; k++) {
        struct ll_err err = {0};
        if (tokenizer_load(&toks[k], dirs[k], &err) != LL_OK ||
            tokenizer_stream_init(&streams[k][0], toks[k], false, &err) != LL_OK ||
            tokenizer_stream_init(&streams[k][1], toks[k], true, &err) != LL_OK) {
            fprintf(stderr,
                    "fuzz_tokenizer: %s (run from the repository root, or set "
                    "LLAISYS_FUZZ_TOKENIZER)\n",
                    err.msg);
            exit(1);
        }
    }
    return 0;
}

static void check_decode(const int32_t *ids, size_t n, bool skip_special)
{
    struct ll_err err = {0};
    char *text = NULL;
    size_t len = 0, bad = 0;
    if (tokenizer_decode(tok, ids, n, skip_special, &text, &len, &err) != LL_OK)
        fuzz_fail("decode: %s", err.msg);
    if (strlen(text) > len || text[len] != 0)
        fuzz_fail("decode: length %zu does not match the text", len);
    if (!ll_utf8_valid(text, len, &bad))
        fuzz_fail("decode: not valid UTF-8 at byte %zu", bad);
    struct tokenizer_stream *s = stream[skip_special];
    size_t at = 0, piece = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p = i < n ? tokenizer_stream_feed(s, ids[i], &piece)
                              : tokenizer_stream_flush(s, &piece);
        if (at + piece > len || memcmp(text + at, p, piece) != 0)
            fuzz_fail("stream: id %zu of %zu: its text differs from tokenizer_decode's", i, n);
        at += piece;
    }
    if (at != len)
        fuzz_fail("stream: %zu bytes, tokenizer_decode %zu", at, len);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    int k = ((mode >> 3) & 7) % N_TOKS;
    tok = toks[k];
    stream = streams[k];
    bool skip_special = mode & 4;
    struct ll_err err = {0};
    if (!(mode & 1)) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenizer_encode(tok, (const char *)data, size, mode & 2, &ids, &n, &err) != LL_OK)
            fuzz_fail("encode: %s", err.msg);
        if (!ids)
            fuzz_fail("encode: NULL ids");
        int32_t vocab = tokenizer_vocab_size(tok);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab)
                fuzz_fail("encode: id %d outside the vocabulary", ids[i]);
        check_decode(ids, n, skip_special);
        free(ids);
    } else {
        size_t n = size / 3;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids)
            abort();
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)(data[3 * i] | data[3 * i + 1] << 8 | data[3 * i + 2] << 16) - 16;
        check_decode(ids, n, skip_special);
        free(ids);
    }
    return 0;
}
