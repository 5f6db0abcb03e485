/*
 * model_dir.h: writing a model directory so that a half-written one never appears under its
 * name. Files go into a temporary sibling directory (OUT.tmp-PID), which takes OUT's name in one
 * rename at the end; an OUT that existed (replaced only with force, and only when it holds
 * nothing but files this writer may write) is moved aside first and removed after. Used by
 * mkmodel and `llaisys-cli quantize`. One thread per writer.
 */
#ifndef LLAISYS_MODEL_DIR_H
#define LLAISYS_MODEL_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "errors.h"

struct model_dir_writer {
    char *out, *tmp, *old;    /* OUT (trailing slashes dropped), the temporary, the set-aside */
    const char *const *known; /* (n_known) the only file names written (borrowed) */
    size_t n_known;
    bool force;
    bool made_tmp; /* the temporary directory exists (removed by model_dir_end) */
};

/* Check out_dir (absent, or with force an existing directory holding only `known` files) and
 * create the temporary directory. Returns LL_OK, LL_EINVAL (empty name; out_dir exists without
 * force, or holds other files), LL_EIO (names the path) or LL_ENOMEM. Call model_dir_end in
 * every case. */
enum ll_status model_dir_begin(struct model_dir_writer *w, const char *out_dir,
                               const char *const *known, size_t n_known, bool force,
                               struct ll_err *err);

/* The path of file `name` (one of the known names) in the temporary directory, malloc'd (caller
 * frees); NULL on no memory. */
char *model_dir_file(const struct model_dir_writer *w, const char *name);

/* Publish: the temporary directory becomes out_dir (replacing the old one with force). Returns
 * LL_OK, LL_EINVAL (out_dir appeared meanwhile) or LL_EIO (names the path). */
enum ll_status model_dir_commit(struct model_dir_writer *w, struct ll_err *err);

/* Remove the temporary directory unless committed, and free w's strings. */
void model_dir_end(struct model_dir_writer *w);

#endif
