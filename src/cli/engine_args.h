/*
 * engine_args.h: the engine options shared by the commands that run an engine (batch,
 * bench-engine): --threads, --ctx, --block-size, --kv-blocks, --kv-memory, --max-seqs,
 * --max-batch-tokens, --max-queue, --exact, --no-prefix-cache.
 * Messages go to stderr prefixed with "llaisys-cli CMD: ".
 */
#ifndef LLAISYS_CLI_ENGINE_ARGS_H
#define LLAISYS_CLI_ENGINE_ARGS_H

#include <stdio.h>

#include "engine.h"

/* If argv[*i] is an engine option, parse it (and its value, advancing *i) into o and return 1;
 * return 0 when it is not one, -1 after printing what was wrong with its value. */
int engine_args_parse(const char *cmd, int argc, char **argv, int *i, struct engine_opts *o);

/* Print the engine options' help lines. */
void engine_args_usage(FILE *f);

/* Print the resolved options of a created engine to f (one line). */
void engine_args_print(FILE *f, const struct engine *e);

#endif
