/*
 * cmd_template.c: `llaisys-cli template`: render a chat template for a JSON context read from
 * stdin and print the prompt exactly (no newline added).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "cli_args.h"
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
    const struct cli_arg args[] = {
        CLI_STR("--model", &model),
        CLI_STR("--template", &tpl_file),
        CLI_STR("--bos", &bos_arg),
        CLI_STR("--eos", &eos_arg),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "template", .usage = usage, .args = args};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    if (!model && !tpl_file)
        return cli_args_fail(&cmd, "give --model DIR or --template FILE");

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
