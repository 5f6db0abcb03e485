/*
 * auth.c: API keys: "Authorization: Bearer KEY" checked against every configured key in time
 * that does not depend on where (or whether) the strings differ, and key files.
 * auth_equal / auth_check: any thread (read-only options); auth_load_file: start-up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "hash.h"
#include "parse.h"
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

enum ll_status auth_add_key(struct server_opts *o, const char *key, const struct key_budget *b)
{
    char **k = realloc(o->api_keys, (size_t)(o->n_api_keys + 1) * sizeof *k);
    if (!k)
        return LL_ENOMEM;
    o->api_keys = k;
    struct key_budget *kb = realloc(o->key_budgets, (size_t)(o->n_api_keys + 1) * sizeof *kb);
    if (!kb)
        return LL_ENOMEM;
    o->key_budgets = kb;
    if (!(k[o->n_api_keys] = strdup(key)))
        return LL_ENOMEM;
    struct key_budget *nb = &kb[o->n_api_keys];
    *nb = b ? *b : (struct key_budget){0};
    if (!nb->name[0])
        snprintf(nb->name, sizeof nb->name, "key-%08x",
                 (unsigned)(ll_hash_bytes(key, strlen(key)) >> 32));
    o->n_api_keys++;
    return LL_OK;
}

/* One "name=value" budget of a key line into b; false with msg when it is not one. */
static bool parse_budget(const char *tok, struct key_budget *b, char *msg, size_t cap)
{
    const char *eq = strchr(tok, '=');
    if (!eq) {
        snprintf(msg, cap, "'%.60s' is not name=value (after the key: name=, rpm=, tpm=, "
                 "concurrency=)", tok);
        return false;
    }
    size_t nl = (size_t)(eq - tok);
    const char *v = eq + 1;
    if (nl == 4 && !strncmp(tok, "name", 4)) {
        size_t l = strlen(v);
        if (!l || l >= sizeof b->name || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                                                   "TUVWXYZ0123456789._-") != l) {
            snprintf(msg, cap, "name '%.60s' must be 1 to %zu letters, digits, '.', '_' or '-'",
                     v, sizeof b->name - 1);
            return false;
        }
        memcpy(b->name, v, l + 1);
        return true;
    }
    int *dst = NULL;
    bool *set = NULL;
    if (nl == 3 && !strncmp(tok, "rpm", 3))
        dst = &b->rpm, set = &b->rpm_set;
    else if (nl == 3 && !strncmp(tok, "tpm", 3))
        dst = &b->tpm, set = &b->tpm_set;
    else if (nl == 11 && !strncmp(tok, "concurrency", 11))
        dst = &b->concurrency, set = &b->concurrency_set;
    if (!dst) {
        snprintf(msg, cap, "unknown budget '%.*s' (name, rpm, tpm or concurrency)", (int)nl,
                 tok);
        return false;
    }
    long long n;
    struct ll_err e;
    char what[32];
    snprintf(what, sizeof what, "%.*s", (int)nl, tok);
    if (ll_parse_int(what, v, 0, 1000000000, &n, &e) != LL_OK) {
        snprintf(msg, cap, "%.150s", e.msg);
        return false;
    }
    *dst = (int)n;
    *set = true;
    return true;
}

enum ll_status auth_load_file(const char *path, struct server_opts *o, struct ll_err *err)
{
    char *data;
    size_t len;
    enum ll_status s = ll_read_file(path, &data, &len, err);
    if (s != LL_OK)
        return s;
    int found = 0, lineno = 0;
    for (char *line = data, *next; line && *line; line = next) {
        lineno++;
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
        struct key_budget b = {0};
        char *save = NULL, *key = strtok_r(line, " \t", &save), msg[160];
        for (char *tok; (tok = strtok_r(NULL, " \t", &save));) {
            if (!parse_budget(tok, &b, msg, sizeof msg)) {
                free(data);
                return ll_err_set(err, LL_EINVAL, "%s:%d: %s", path, lineno, msg);
            }
        }
        if (auth_add_key(o, key, &b) != LL_OK) {
            free(data);
            return ll_err_set(err, LL_ENOMEM, "%s: out of memory", path);
        }
        found++;
    }
    free(data);
    if (!found)
        return ll_err_set(err, LL_EINVAL, "%s: no API key in the file", path);
    return LL_OK;
}
