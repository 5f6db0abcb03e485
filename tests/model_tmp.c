/*
 * model_tmp.c: the model tests' temporary model directories (see model_tmp.h).
 */
#include "model_tmp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int model_tmp_make(char *dir, size_t size, const char *tag, const struct mkmodel_spec *s)
{
    return model_tmp_make_tok(dir, size, tag, s, NULL);
}

int model_tmp_make_tok(char *dir, size_t size, const char *tag, const struct mkmodel_spec *s,
                       const char *tokenizer_dir)
{
    if (snprintf(dir, size, "/tmp/llaisys-test-%s-XXXXXX", tag) >= (int)size || !mkdtemp(dir)) {
        fprintf(stderr, "model_tmp: cannot make a directory for %s\n", tag);
        return -1;
    }
    char out[128];
    snprintf(out, sizeof out, "%s/m", dir);
    if (!s)
        return mkdir(out, 0700);
    struct ll_err err = {0};
    if (mkmodel_write(s, tokenizer_dir, out, 2, false, &err) != LL_OK) {
        fprintf(stderr, "mkmodel: %s\n", err.msg);
        return -1;
    }
    return 0;
}

struct model *model_tmp_open(const char *dir, const struct model_open_opts *o)
{
    char path[128];
    snprintf(path, sizeof path, "%s/m", dir);
    struct model *m = NULL;
    struct ll_err err = {0};
    enum ll_status s = model_open(&m, path, o, &err);
    if (s)
        print_error("model_open: %s\n", err.msg);
    assert_int_equal(s, LL_OK);
    return m;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int model_tmp_remove(const char *dir)
{
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
