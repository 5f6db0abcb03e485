/*
 * run_common.h: helpers shared by the commands that run the model (generate, score, bench):
 * option values, id lists, and prompt processing in max_batch chunks.
 * Messages go to stderr prefixed with "llaisys-cli CMD: ".
 */
#ifndef LLAISYS_CLI_RUN_COMMON_H
#define LLAISYS_CLI_RUN_COMMON_H

#include <stdint.h>

#include "errors.h"
#include "runtime.h"

/* Parse an integer in [min, max] / a finite number for `flag`. 0 on success; -1 after
 * printing what was wrong. */
int run_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max,
                  long long *out);
int run_parse_float(const char *cmd, const char *flag, const char *s, double *out);

/* Parse "1 2 3" (spaces, commas or tabs between non-negative integers) given with `flag` into a
 * malloc'd array (caller frees). 0 on success (at least one value); -1 after printing the bad
 * item. */
int run_parse_ids(const char *cmd, const char *flag, const char *s, int32_t **ids, int *n);

/* Run ids[0..n) at positions start.. through the runtime in chunks of max_batch tokens,
 * logits of the last token into last (vocab). Returns runtime_forward's status. */
enum ll_status run_prompt(struct model_runtime *rt, const int32_t *ids, int n, int start,
                          float *last, struct ll_err *err);

/* The lines of a text file (`-`: standard input), for the commands that take one text a line
 * (embed, rerank): run_lines_read reads it whole into *data and counts its lines (an upper
 * bound on the texts); run_lines_next hands out the next non-blank line (its '\r' before the
 * '\n' taken off, NUL-terminated in place), its 1-based line number in *line_no, or NULL at
 * the end. */
enum ll_status run_lines_read(const char *input, char **data, int *n_lines, struct ll_err *err);
char *run_lines_next(char **cursor, int *line_no, size_t *len);

/* VmRSS and VmHWM of this process in MiB (from /proc/self/status; -1 when unknown). */
void run_memory_mib(double *rss, double *hwm);

#endif
