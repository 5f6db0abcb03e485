/*
 * config_edit.h: editing a test model directory's config.json in place (the model tests'
 * "this config over those weights" cases).
 */
#ifndef LLAISYS_TEST_CONFIG_EDIT_H
#define LLAISYS_TEST_CONFIG_EDIT_H

/* Replace the first `from` in model_dir/config.json by `to`; fails the test when `from` is not
 * there. */
void config_edit(const char *model_dir, const char *from, const char *to);

#endif
