/*
 * cmd_template.c: `llaisys-cli template`: render a chat template for a JSON context read from
 * stdin and print the prompt exactly (no newline added).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "commands.h"
#include "json.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llaisys-cli template [--model DIR] [--template FILE] [--bos S] [--eos S]\n"
            "\n"
            "Reads a JSON object from stdin, e.g.\n"
            "  {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [...],\n"
            "   \"add_generation_prompt\": true}\n"
            "(every key becomes a template variable) and prints the rendered prompt exactly,\n"
            "without an added newline.\n"
            "\n"
            "  --model DIR      model directory: chat template and bos/eos tokens from its\n"
            "                   tokenizer_config.json\n"
            "  --template FILE  render this Jinja template instead (--model becomes optional)\n"
            "  --bos S          bos_token (overrides the model's)\n"
            "  --eos S          eos_token (overrides the model's)\n"
            "  --help           this text\n");
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tpl_file = NULL, *bos_arg = NULL, *eos_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--model")      ? &model
                           : !strcmp(a, "--template") ? &tpl_file
                           : !strcmp(a, "--bos")      ? &bos_arg
                           : !strcmp(a, "--eos")      ? &eos_arg
                                                      : NULL;
        if (!dst) {
            fprintf(stderr, "llaisys-cli template: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llaisys-cli template: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!model && !tpl_file) {
        fprintf(stderr, "llaisys-cli template: give --model DIR or --template FILE\n");
        usage(stderr);
        return 2;
    }

    int rc = 1;
    struct ll_err err = {0};
    struct chat_template *t = NULL;
    char *bos = NULL, *eos = NULL, *src = NULL, *input = NULL, *out = NULL;
    cJSON *ctx = NULL;
    if (model && chat_template_load_model(&t, &bos, &eos, model, &err) != LL_OK)
        goto fail;
    if (tpl_file) {
        chat_template_free(t);
        t = NULL;
        size_t len;
        if (ll_read_file(tpl_file, &src, &len, &err) != LL_OK)
            goto fail;
        if (chat_template_compile(&t, src, &err) != LL_OK) {
            ll_err_prefix(&err, "%s: ", tpl_file);
            goto fail;
        }
    }
    size_t in_len;
    if (ll_read_stream(stdin, "stdin", &input, &in_len, &err) != LL_OK ||
        ll_json_parse(&ctx, input, in_len, "stdin", &err) != LL_OK)
        goto fail;
    if (!cJSON_IsObject(ctx)) {
        fprintf(stderr, "llaisys-cli template: stdin is not a JSON object\n");
        goto done;
    }
    size_t out_len;
    if (chat_template_render_ex(t, ctx, bos_arg ? bos_arg : bos, eos_arg ? eos_arg : eos, NULL,
                                &out, &out_len, &err) != LL_OK)
        goto fail;
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
        fprintf(stderr, "llaisys-cli template: write error\n");
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli template: %s\n", err.msg);
done:
    free(out);
    cJSON_Delete(ctx);
    free(input);
    free(src);
    free(bos);
    free(eos);
    chat_template_free(t);
    return rc;
}
