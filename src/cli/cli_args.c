/* cli_args.c: see cli_args.h. */
#include "cli_args.h"

#include <string.h>

#include "engine_args.h"
#include "run_common.h"

int cli_args_fail(const struct cli_cmd *c, const char *msg)
{
    fprintf(stderr, "llaisys-cli %s: %s\n", c->name, msg);
    c->usage(stderr);
    return 2;
}

static const struct cli_arg *find(const struct cli_arg *t, const char *a, size_t len)
{
    for (; t && t->flag; t++)
        if (strlen(t->flag) == len && !strncmp(t->flag, a, len))
            return t;
    return NULL;
}

/* Store val (NULL for a flag without one) as d says. 0, or -1 after a message. */
static int store(const struct cli_cmd *c, const struct cli_arg *d, const char *val)
{
    bool takes = d->kind != CLI_ARG_SET && d->kind != CLI_ARG_CLEAR;
    char msg[160];
    if (takes && !val) {
        snprintf(msg, sizeof msg, "%s needs a value", d->flag);
        cli_args_fail(c, msg);
        return -1;
    }
    if (!takes && val) {
        snprintf(msg, sizeof msg, "%s takes no value", d->flag);
        cli_args_fail(c, msg);
        return -1;
    }
    switch (d->kind) {
    case CLI_ARG_STR:
        *(const char **)d->out = val;
        break;
    case CLI_ARG_INT:
        if (run_parse_int(c->name, d->flag, val, d->imin, d->imax, (long long *)d->out))
            return -1;
        break;
    case CLI_ARG_NUM: {
        double v;
        if (run_parse_float(c->name, d->flag, val, &v))
            return -1;
        if (v > d->max || (d->min_open ? v <= d->min : v < d->min)) {
            fprintf(stderr, "llaisys-cli %s: %s must be in %c%g, %g], got %s\n", c->name, d->flag,
                    d->min_open ? '(' : '[', d->min, d->max, val);
            return -1;
        }
        *(double *)d->out = v;
        break;
    }
    case CLI_ARG_SET:
    case CLI_ARG_CLEAR:
        *(bool *)d->out = d->kind == CLI_ARG_SET;
        break;
    }
    if (d->given)
        *d->given = true;
    return 0;
}

int cli_args_parse(const struct cli_cmd *c, int argc, char **argv)
{
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            c->usage(stdout);
            return 1;
        }
        if (c->engine_mask) {
            int r = engine_args_parse(c->name, c->engine_mask, argc, argv, &i, c->engine);
            if (r < 0)
                return -1;
            if (r > 0)
                continue;
        }
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
        const struct cli_arg *d = find(c->args, a, eq ? (size_t)(eq - a) : strlen(a));
        char msg[160];
        if (d) {
            bool takes = d->kind != CLI_ARG_SET && d->kind != CLI_ARG_CLEAR;
            const char *val = eq ? eq + 1 : takes && i + 1 < argc ? argv[++i] : NULL;
            if (store(c, d, val))
                return -1;
        } else if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
            snprintf(msg, sizeof msg, "unknown option '%s'", a);
            cli_args_fail(c, msg);
            return -1;
        } else if (n_pos < c->max_pos) {
            c->pos[n_pos++] = a;
        } else {
            snprintf(msg, sizeof msg, "unexpected argument '%s'", a);
            cli_args_fail(c, msg);
            return -1;
        }
    }
    if (c->n_pos)
        *c->n_pos = n_pos;
    return 0;
}
