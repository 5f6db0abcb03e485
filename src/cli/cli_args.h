/*
 * cli_args.h: one argument loop for every llaisys-cli command. A command describes its options
 * in a table (flag, kind, where the value goes, range), names the engine options it takes (a
 * mask for engine_args.h) and how many positional arguments it accepts; cli_args_parse walks
 * argv once, checks every value against its range, and reports the first problem as
 * "llaisys-cli CMD: ..." on stderr followed by the usage text.
 * Values: "--flag VALUE" or "--flag=VALUE"; a CLI_ARG_SET / CLI_ARG_CLEAR flag takes none.
 * Anything else not starting with '-' (or a negative number) is a positional argument.
 */
#ifndef LLAISYS_CLI_CLI_ARGS_H
#define LLAISYS_CLI_CLI_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "engine.h"

enum cli_arg_kind {
    CLI_ARG_STR,   /* const char ** */
    CLI_ARG_INT,   /* long long *, in [imin, imax] */
    CLI_ARG_NUM,   /* double *, finite, in [min, max] ((min, max] with min_open) */
    CLI_ARG_SET,   /* bool *, set true; no value */
    CLI_ARG_CLEAR, /* bool *, set false; no value */
};

struct cli_arg {
    const char *flag; /* "--model"; NULL ends a table */
    enum cli_arg_kind kind;
    void *out;
    long long imin, imax; /* CLI_ARG_INT */
    double min, max;      /* CLI_ARG_NUM */
    bool min_open;        /* CLI_ARG_NUM: min itself is refused */
    bool *given;          /* optional: set true when the flag appears */
};

/* Table rows. */
#define CLI_STR(f, p)                                                                              \
    {                                                                                              \
        .flag = (f), .kind = CLI_ARG_STR, .out = (p)                                               \
    }
#define CLI_INT(f, p, lo, hi)                                                                      \
    {                                                                                              \
        .flag = (f), .kind = CLI_ARG_INT, .out = (p), .imin = (lo), .imax = (hi)                   \
    }
#define CLI_NUM(f, p, lo, hi)                                                                      \
    {                                                                                              \
        .flag = (f), .kind = CLI_ARG_NUM, .out = (p), .min = (lo), .max = (hi)                     \
    }
#define CLI_SET(f, p)                                                                              \
    {                                                                                              \
        .flag = (f), .kind = CLI_ARG_SET, .out = (p)                                               \
    }
#define CLI_CLEAR(f, p)                                                                            \
    {                                                                                              \
        .flag = (f), .kind = CLI_ARG_CLEAR, .out = (p)                                             \
    }
#define CLI_END                                                                                    \
    {                                                                                              \
        .flag = NULL                                                                               \
    }

struct cli_cmd {
    const char *name; /* "bench", as in the messages */
    void (*usage)(FILE *f);
    const struct cli_arg *args; /* terminated by a NULL flag */
    unsigned engine_mask;       /* engine options taken (ENGINE_OPT_BIT); 0: none */
    struct engine_opts *engine; /* where they go (with a mask) */
    const char **pos;           /* positional arguments, in order */
    int max_pos;                /* how many are accepted (0: none) */
    int *n_pos;                 /* how many were given (optional) */
};

/* Parse argv[1..argc) for c. 0: parsed; 1: --help/-h printed the usage to stdout (exit 0);
 * -1: a problem was printed with the usage to stderr (exit 2). */
int cli_args_parse(const struct cli_cmd *c, int argc, char **argv);

/* Print "llaisys-cli CMD: MSG" and the usage to stderr and return 2, the exit code of a
 * usage error (for checks after the loop, such as a required option). */
int cli_args_fail(const struct cli_cmd *c, const char *msg);

#endif
