/*
 * cmd_tokenize.c: `llaisys-cli tokenize` (stdin text → ids) and `llaisys-cli detokenize`
 * (ids → text), thin wrappers over tokenizer.h for scripts and tests. Only the tokenizer files
 * of --model DIR are read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
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
    const struct cli_arg args[] = {
        CLI_STR("--model", &model),
        CLI_CLEAR("--no-bos", &add_special),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "tokenize", .usage = tokenize_usage, .args = args};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!model)
        return cli_args_fail(&cmd, "--model DIR is required");
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
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int32_t *ids = calloc((size_t)argc + 1, sizeof *ids);
    int n = 0;
    const struct cli_arg args[] = {
        CLI_STR("--model", &model),
        CLI_SET("--skip-special", &skip_special),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "detokenize", .usage = detokenize_usage, .args = args,
                                .pos = pos, .max_pos = argc, .n_pos = &n};
    if (!pos || !ids) {
        fprintf(stderr, "llaisys-cli detokenize: out of memory\n");
        free(pos);
        free(ids);
        return 1;
    }
    int pr = cli_args_parse(&cmd, argc, argv);
    for (int i = 0; pr == 0 && i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(pos[i], &end, 10);
        if (errno || end == pos[i] || *end || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "llaisys-cli detokenize: '%s' is not a token id\n", pos[i]);
            detokenize_usage(stderr);
            pr = -1;
        }
        ids[i] = (int32_t)v;
    }
    if (pr == 0 && !model) {
        cli_args_fail(&cmd, "--model DIR is required");
        pr = -1;
    }
    free(pos);
    if (pr) {
        free(ids);
        return pr > 0 ? 0 : 2;
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
