/*
 * config_edit.h: editing a test model directory's config.json in place (the model tests'
 * "this config over those weights" cases).
 */
#ifndef LLAISYS_TEST_CONFIG_EDIT_H
#define LLAISYS_TEST_CONFIG_EDIT_H

#include <stddef.h>

/* Replace the first `from` in model_dir/config.json by `to`; fails the test when `from` is not
 * there. */
void config_edit(const char *model_dir, const char *from, const char *to);

/* One edit of config.json that model_open must refuse, with a message containing `names`. */
struct config_refusal {
    const char *from, *to, *names;
};

/* Each of the n edits in turn: made, the model refused as it says, and undone; then the
 * directory, as it was, loads. Fails the test naming the case that did not. */
void config_expect_refusals(const char *model_dir, const struct config_refusal *cases, size_t n);

#endif
