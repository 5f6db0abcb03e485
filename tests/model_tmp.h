/*
 * model_tmp.h: a model directory under a fresh temporary directory, for the model tests: DIR/m,
 * written by mkmodel (or by the test itself), opened, and removed with everything under DIR.
 */
#ifndef LLAISYS_TEST_MODEL_TMP_H
#define LLAISYS_TEST_MODEL_TMP_H

#include <stddef.h>

#include "mkmodel.h"
#include "model.h"

/* Make the directory /tmp/llaisys-test-TAG-XXXXXX into dir (size bytes; 64 hold any TAG of up
 * to 24 bytes), then dir/m: the model of spec s (mkmodel, 2 threads, no tokenizer files), or an
 * empty directory when s is NULL. Returns 0, or -1 with a message on stderr (for a group
 * setup). */
int model_tmp_make(char *dir, size_t size, const char *tag, const struct mkmodel_spec *s);
/* The same with the tokenizer files of tokenizer_dir copied into dir/m (NULL: none), for a
 * model the engine runs (the engine harness's prompts need the R1 tokenizer's vocabulary). */
int model_tmp_make_tok(char *dir, size_t size, const char *tag, const struct mkmodel_spec *s,
                       const char *tokenizer_dir);

/* model_open of dir/m with o (NULL: the weights as stored); fails the test, printing the
 * message, when it cannot. */
struct model *model_tmp_open(const char *dir, const struct model_open_opts *o);

/* Remove dir and everything under it. Returns 0, or -1 when something could not be removed. */
int model_tmp_remove(const char *dir);

#endif
