/*
 * config_edit.c: editing a test model directory's config.json (config_edit.h).
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
