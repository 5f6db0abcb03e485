/*
 * engine_args.h: the engine options of the commands that run the model, parsed, documented and
 * printed through the one engine-option table (engine_opts.h): batch and bench-engine take
 * them all; generate takes --threads, --ctx, --exact and --quant; score, bench and kl
 * --threads, --exact and --quant (kl: --threads only).
 * A command passes the set it takes as a mask of ENGINE_OPT_BIT(id).
 * Messages go to stderr prefixed with "llaisys-cli CMD: ".
 */
#ifndef LLAISYS_CLI_ENGINE_ARGS_H
#define LLAISYS_CLI_ENGINE_ARGS_H

#include <stdio.h>

#include "engine.h"

/* If argv[*i] is an engine option in mask ("--flag VALUE", "--flag=VALUE", or a bool's bare
 * "--flag"), parse it (and its value, advancing *i) into o and return 1; return 0 when it is
 * not one, -1 after printing what was wrong with its value. */
int engine_args_parse(const char *cmd, unsigned mask, int argc, char **argv, int *i,
                      struct engine_opts *o);

/* Print "engine options:" and the help line of each option in mask (defaults of the default
 * profile). */
void engine_args_usage(FILE *f, unsigned mask);

/* Print the resolved options of a created engine to f: "engine: threads: 2, ctx: 4096, ...". */
void engine_args_print(FILE *f, const struct engine *e);

#endif
