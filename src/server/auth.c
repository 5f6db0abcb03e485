/*
 * auth.c: API keys: "Authorization: Bearer KEY" checked against every configured key in time
 * that does not depend on where (or whether) the strings differ, and key files.
 * auth_equal / auth_check: any thread (read-only options); auth_load_file: start-up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "util.h"

bool auth_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Walk all of a whatever b is; b is indexed modulo its length so the access pattern does
     * not depend on its content. Differences accumulate without branches. */
    volatile unsigned char diff = (unsigned char)(alen != blen);
    if (blen == 0)
        return alen == 0;
    for (size_t i = 0; i < alen; i++)
        diff |= (unsigned char)(a[i] ^ b[i % blen]);
    return diff == 0;
}

bool auth_check(const struct server_opts *o, const char *authorization)
{
    return auth_key_index(o, authorization) >= 0;
}

int auth_key_index(const struct server_opts *o, const char *authorization)
{
    if (o->n_api_keys == 0)
        return 0;
    if (!authorization)
        return -1;
    /* the scheme is case-insensitive (RFC 7235); one or more spaces before the token */
    if (strncasecmp(authorization, "Bearer ", 7))
        return -1;
    const char *key = authorization + 7;
    while (*key == ' ')
        key++;
    size_t len = strlen(key);
    while (len && (key[len - 1] == ' ' || key[len - 1] == '\t'))
        len--;
    int found = -1;
    for (int i = 0; i < o->n_api_keys; i++) {
        bool eq = auth_equal(key, len, o->api_keys[i], strlen(o->api_keys[i]));
        found = eq && found < 0 ? i : found;
    }
    return found;
}

enum ll_status auth_load_file(const char *path, char ***keys, int *n, struct ll_err *err)
{
    char *data;
    size_t len;
    enum ll_status s = ll_read_file(path, &data, &len, err);
    if (s != LL_OK)
        return s;
    int found = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\r' || line[l - 1] == ' ' || line[l - 1] == '\t'))
            line[--l] = 0;
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        char **k = realloc(*keys, (size_t)(*n + 1) * sizeof *k);
        if (!k || !(k[*n] = strdup(line))) {
            if (k)
                *keys = k;
            free(data);
            return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
        }
        *keys = k;
        (*n)++;
        found++;
    }
    free(data);
    if (!found)
        return ll_err_set(err, LL_EINVAL, "%s: no API key in the file", path);
    return LL_OK;
}
