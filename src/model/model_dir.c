/*
 * model_dir.c: the atomic model-directory writer (see model_dir.h). Called from the CLI thread
 * (mkmodel, quantize).
 */
#include "model_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* Remove the known files from dir, then dir itself (best effort). */
static void dir_remove(const struct model_dir_writer *w, const char *dir)
{
    for (size_t i = 0; i < w->n_known; i++) {
        char *p = ll_path_join(dir, w->known[i]);
        if (p)
            unlink(p);
        free(p);
    }
    rmdir(dir);
}

/* True when dir holds nothing but known files. */
static bool dir_is_replaceable(const struct model_dir_writer *w, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        bool known = false;
        for (size_t i = 0; i < w->n_known && !known; i++)
            known = !strcmp(e->d_name, w->known[i]);
        ok = known;
    }
    closedir(d);
    return ok;
}

static enum ll_status out_check(const struct model_dir_writer *w, struct ll_err *err)
{
    struct stat sb;
    if (lstat(w->out, &sb) != 0)
        return errno == ENOENT ? LL_OK : ll_err_set(err, LL_EIO, "%s: %s", w->out, strerror(errno));
    if (!w->force)
        return ll_err_set(err, LL_EINVAL, "%s already exists (use --force to replace it)", w->out);
    if (!S_ISDIR(sb.st_mode) || !dir_is_replaceable(w, w->out))
        return ll_err_set(err, LL_EINVAL,
                          "%s exists and is not a model directory this command writes; not "
                          "replacing it",
                          w->out);
    return LL_OK;
}

enum ll_status model_dir_begin(struct model_dir_writer *w, const char *out_dir,
                               const char *const *known, size_t n_known, bool force,
                               struct ll_err *err)
{
    *w = (struct model_dir_writer){.known = known, .n_known = n_known, .force = force};
    size_t ol = strlen(out_dir);
    while (ol > 1 && out_dir[ol - 1] == '/')
        ol--;
    if (ol == 0)
        return ll_err_set(err, LL_EINVAL, "empty output directory name");
    w->out = strndup(out_dir, ol);
    w->tmp = malloc(ol + 32);
    w->old = malloc(ol + 32);
    if (!w->out || !w->tmp || !w->old)
        return ll_err_set(err, LL_ENOMEM, "out of memory");
    snprintf(w->tmp, ol + 32, "%s.tmp-%ld", w->out, (long)getpid());
    snprintf(w->old, ol + 32, "%s.old-%ld", w->out, (long)getpid());
    enum ll_status st = out_check(w, err);
    if (st != LL_OK)
        return st;
    if (mkdir(w->tmp, 0755) != 0)
        return ll_err_set(err, LL_EIO, "%s: %s", w->tmp, strerror(errno));
    w->made_tmp = true;
    return LL_OK;
}

char *model_dir_file(const struct model_dir_writer *w, const char *name)
{
    return ll_path_join(w->tmp, name);
}

enum ll_status model_dir_commit(struct model_dir_writer *w, struct ll_err *err)
{
    enum ll_status st = out_check(w, err);
    if (st != LL_OK)
        return st;
    bool replacing = false;
    if (access(w->out, F_OK) == 0) {
        if (rename(w->out, w->old) != 0)
            return ll_err_set(err, LL_EIO, "%s: cannot move aside: %s", w->out, strerror(errno));
        replacing = true;
    }
    if (rename(w->tmp, w->out) != 0) {
        st =
            ll_err_set(err, LL_EIO, "%s: cannot rename to %s: %s", w->tmp, w->out, strerror(errno));
        if (replacing)
            rename(w->old, w->out);
        return st;
    }
    w->made_tmp = false;
    if (replacing)
        dir_remove(w, w->old);
    return LL_OK;
}

void model_dir_end(struct model_dir_writer *w)
{
    if (w->made_tmp)
        dir_remove(w, w->tmp);
    free(w->out);
    free(w->tmp);
    free(w->old);
    *w = (struct model_dir_writer){0};
}
