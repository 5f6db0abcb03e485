/* engine_args.c: see engine_args.h. */
#include "engine_args.h"

#include <string.h>

void engine_args_usage(FILE *f, unsigned mask)
{
    fprintf(f, "engine options:\n");
    for (int i = 0; i < ENGINE_OPT_COUNT; i++) {
        if (!(mask & ENGINE_OPT_BIT(i)))
            continue;
        const struct engine_opt_def *d = &engine_opt_defs[i];
        char left[48], help[ENGINE_OPT_HELP_MAX];
        snprintf(left, sizeof left, "%s%s%s", d->flag, d->arg ? " " : "", d->arg ? d->arg : "");
        engine_opts_help(d, ENGINE_PROFILE_DEFAULT, help, sizeof help);
        fprintf(f, "  %-22s %s\n", left, help);
    }
}

int engine_args_parse(const char *cmd, unsigned mask, int argc, char **argv, int *i,
                      struct engine_opts *o)
{
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    const struct engine_opt_def *d = engine_opts_find(a, eq ? (size_t)(eq - a) : strlen(a));
    if (!d || !(mask & ENGINE_OPT_BIT(d - engine_opt_defs)))
        return 0;
    const char *val = eq ? eq + 1 : NULL;
    if (!eq && d->type != ENGINE_OPT_BOOL && *i + 1 < argc)
        val = argv[++*i];
    struct ll_err err = {0};
    if (engine_opts_set(o, d, val, d->flag, &err) != LL_OK) {
        fprintf(stderr, "llaisys-cli %s: %s\n", cmd, err.msg);
        return -1;
    }
    return 1;
}

void engine_args_print(FILE *f, const struct engine *e)
{
    fprintf(f, "engine: ");
    engine_opts_print(f, engine_get_opts(e), ", ");
    fputc('\n', f);
}
