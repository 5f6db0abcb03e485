/*
 * config_edit.c: editing a test model directory's config.json, and the refusals of edited ones
 * (config_edit.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_edit.h"
#include "model.h"
#include "util.h"

void config_edit(const char *model_dir, const char *from, const char *to)
{
    char path[256], *text;
    size_t len;
    struct ll_err err = {0};
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    assert_int_equal(ll_read_file(path, &text, &len, &err), LL_OK);
    char *p = strstr(text, from);
    if (!p)
        fail_msg("%s has no '%s'", path, from);
    char *out = malloc(len + strlen(to) + 1);
    assert_non_null(out);
    size_t k = (size_t)(p - text);
    memcpy(out, text, k);
    strcpy(out + k, to);
    strcat(out, p + strlen(from));
    assert_int_equal(ll_write_file(path, out, strlen(out), &err), LL_OK);
    free(out);
    free(text);
}

void config_expect_refusals(const char *model_dir, const struct config_refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        config_edit(model_dir, cases[i].from, cases[i].to);
        struct model *b = NULL;
        struct ll_err err = {0};
        enum ll_status s = model_open(&b, model_dir, NULL, &err);
        config_edit(model_dir, cases[i].to, cases[i].from);
        if (s == LL_OK) {
            model_close(b);
            fail_msg("case %zu (%s): the model loaded", i, cases[i].to);
        }
        assert_null(b);
        if (!strstr(err.msg, cases[i].names))
            fail_msg("case %zu: message '%s' does not name '%s'", i, err.msg, cases[i].names);
    }
    struct model *m = NULL;
    struct ll_err err = {0};
    if (model_open(&m, model_dir, NULL, &err) != LL_OK)
        fail_msg("%s, restored, does not load: %s", model_dir, err.msg);
    model_close(m);
}
