/*
 * cmd_quantize.c: `llaisys-cli quantize --model DIR --type T OUT_DIR`: loads DIR with its linear
 * weights quantized to T (in parallel, as --quant does) and writes a model directory that loads
 * with no quantizing at start-up (model_quant.h; its files are described in model_bind.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_args.h"
#include "commands.h"
#include "engine_args.h"
#include "model.h"
#include "model_quant.h"
#include "util.h"

#define QUANTIZE_ENGINE_OPTS ENGINE_OPT_BIT(ENGINE_OPT_THREADS)

static void quantize_usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli quantize --model DIR --type q8_0|q4_0|q4_k|q4_k_m [options] "
               "OUT_DIR\n"
               "Writes a copy of the model in DIR whose linear weights (every projection and\n"
               "lm_head) are stored quantized: config.json with a quantization_config,\n"
               "model.safetensors, and generation_config.json and the tokenizer files copied.\n"
               "The embedding stays as stored. OUT_DIR then loads with no work at start-up.\n\n"
               "  --type T       q8_0 (8-bit, 8.5 bits a weight), q4_0 (4-bit, 4.5 bits),\n"
               "                 q4_k (4-bit with sub-block scales and minimums, 4.5 bits) or\n"
               "                 q4_k_m (q4_k, with the value projections and some down\n"
               "                 projections at q8_0: about 5 bits)\n"
               "  --force        replace OUT_DIR if it is a directory quantize wrote\n\n");
    engine_args_usage(f, QUANTIZE_ENGINE_OPTS);
}

int cmd_quantize(int argc, char **argv)
{
    const char *dir = NULL, *type = NULL, *out = NULL;
    bool force = false;
    struct engine_opts eo = {0};
    const struct cli_arg args[] = {
        CLI_STR("--model", &dir),
        CLI_STR("--type", &type),
        CLI_SET("--force", &force),
        CLI_END,
    };
    const struct cli_cmd cmd = {.name = "quantize", .usage = quantize_usage, .args = args,
                                .engine_mask = QUANTIZE_ENGINE_OPTS, .engine = &eo,
                                .pos = &out, .max_pos = 1};
    int pr = cli_args_parse(&cmd, argc, argv);
    if (pr)
        return pr > 0 ? 0 : 2;
    struct model_open_opts mo = {.quantize = true, .n_threads = eo.n_threads};
    if (!dir || !type || !out)
        return cli_args_fail(&cmd, !dir    ? "--model is required"
                                   : !type ? "--type is required"
                                           : "OUT_DIR is required");
    if (!model_qscheme_parse(type, &mo.qscheme)) {
        fprintf(stderr,
                "llaisys-cli quantize: --type: must be q8_0, q4_0, q4_k or q4_k_m (got '%s')\n",
                type);
        return 2;
    }
    struct ll_err err = {0};
    struct model *m = NULL;
    int rc = 1;
    double t0 = ll_now();
    if (model_open(&m, dir, &mo, &err) != LL_OK)
        goto fail;
    double t1 = ll_now();
    if (model_quant_write(m, out, force, &err) != LL_OK)
        goto fail;
    double t2 = ll_now();
    char *path = ll_path_join(out, "model.safetensors");
    struct stat sb;
    double mb = path && stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
    free(path);
    fprintf(stderr,
            "quantize: %s -> %s: %d linear weights as %s (quantized in %.2f s, load %.2f "
            "s); wrote model.safetensors %.1f MB in %.2f s\n",
            dir, out, m->n_linears, model_qscheme_name(m->qscheme), m->quant_seconds, t1 - t0, mb,
            t2 - t1);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "llaisys-cli quantize: %s\n", err.msg);
done:
    model_close(m);
    return rc;
}
