/*
 * cmd_tokenize.c: `llaisys-cli tokenize` (stdin text → ids) and `llaisys-cli detokenize`
 * (ids → text), thin wrappers over tokenizer.h for scripts and tests. Only the tokenizer files
 * of --model DIR are read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "tokenizer.h"
#include "util.h"

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli tokenize --model DIR [--no-bos]\n\n"
               "Reads UTF-8 text from standard input and prints its token ids on one line,\n"
               "separated by spaces. Invalid UTF-8 is replaced by U+FFFD first.\n\n"
               "  --model DIR  directory with tokenizer.json (and tokenizer_config.json)\n"
               "  --no-bos     do not add the special tokens of the post-processor (BOS);\n"
               "               by default they are added, like add_special_tokens=True\n");
}

static void detokenize_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli detokenize --model DIR [--skip-special] ID...\n\n"
               "Prints the text of the token ids, exactly (no newline is added). Ids without\n"
               "text decode to nothing; invalid UTF-8 becomes U+FFFD.\n\n"
               "  --model DIR     directory with tokenizer.json (and tokenizer_config.json)\n"
               "  --skip-special  leave out special tokens (BOS, EOS, ...)\n");
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool add_special = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(argv[i], "--no-bos")) {
            add_special = false;
        } else {
            fprintf(stderr, "llaisys-cli tokenize: unexpected argument '%s'\n", argv[i]);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "llaisys-cli tokenize: --model DIR is required\n");
        tokenize_usage(stderr);
        return 2;
    }
    struct ll_err err = {0};
    struct tokenizer *tok;
    if (tokenizer_load(&tok, model, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli tokenize: %s\n", err.msg);
        return 1;
    }
    size_t len;
    char *text = NULL;
    if (ll_read_stream(stdin, "standard input", &text, &len, &err) != LL_OK)
        fprintf(stderr, "llaisys-cli tokenize: %s\n", err.msg);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    if (text && tokenizer_encode(tok, text, len, add_special, &ids, &n, &err) != LL_OK)
        fprintf(stderr, "llaisys-cli tokenize: %s\n", err.msg);
    else if (text) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        rc = fflush(stdout) == 0 ? 0 : 1;
    }
    free(ids);
    free(text);
    tokenizer_free(tok);
    return rc;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool skip_special = false;
    int32_t *ids = calloc((size_t)argc + 1, sizeof *ids);
    size_t n = 0;
    if (!ids) {
        fprintf(stderr, "llaisys-cli detokenize: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            detokenize_usage(stdout);
            free(ids);
            return 0;
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(argv[i], "--skip-special")) {
            skip_special = true;
        } else {
            char *end;
            errno = 0;
            long v = strtol(argv[i], &end, 10);
            if (errno || end == argv[i] || *end || v < INT32_MIN || v > INT32_MAX) {
                fprintf(stderr, "llaisys-cli detokenize: '%s' is not a token id\n", argv[i]);
                detokenize_usage(stderr);
                free(ids);
                return 2;
            }
            ids[n++] = (int32_t)v;
        }
    }
    if (!model) {
        fprintf(stderr, "llaisys-cli detokenize: --model DIR is required\n");
        detokenize_usage(stderr);
        free(ids);
        return 2;
    }
    struct ll_err err = {0};
    struct tokenizer *tok;
    if (tokenizer_load(&tok, model, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli detokenize: %s\n", err.msg);
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = 1;
    if (tokenizer_decode(tok, ids, n, skip_special, &text, &len, &err) != LL_OK)
        fprintf(stderr, "llaisys-cli detokenize: %s\n", err.msg);
    else
        rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
    free(text);
    free(ids);
    tokenizer_free(tok);
    return rc;
}
