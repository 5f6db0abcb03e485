/*
 * sessions.c: the session table (sessions.h). A linear table: --max-sessions bounds it and each
 * lookup is a string compare per session, small beside a generation.
 */
#include "sessions.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "engine.h"
#include "request_id.h"
#include "util.h"

void sessions_init(struct sessions *ss, double ttl, int max)
{
    memset(ss, 0, sizeof *ss);
    pthread_mutex_init(&ss->lock, NULL);
    ss->ttl = ttl;
    ss->max = max;
}

void sessions_set_engine(struct sessions *ss, struct engine *engine)
{
    pthread_mutex_lock(&ss->lock);
    ss->engine = engine;
    pthread_mutex_unlock(&ss->lock);
}

void sessions_free(struct sessions *ss)
{
    for (int i = 0; i < ss->n; i++)
        free(ss->s[i].hist);
    free(ss->s);
    pthread_mutex_destroy(&ss->lock);
    memset(ss, 0, sizeof *ss);
}

bool session_id_valid(const char *id, struct oai_error *e)
{
    size_t n = strlen(id);
    if (n < 1 || n > SESSION_ID_MAX) {
        oai_error_set(e, LL_EINVAL, "session_id", "invalid_value",
                      "session_id must be 1 to %d characters, got %zu", SESSION_ID_MAX, n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == ':' || ch == '-')) {
            oai_error_set(e, LL_EINVAL, "session_id", "invalid_value",
                          "session_id may hold only letters, digits and . _ : - (byte %zu is "
                          "not one)",
                          i);
            return false;
        }
    }
    return true;
}

/* Remove session i (lock held); its pin is released by the engine at its next step. */
static void drop(struct sessions *ss, int i)
{
    if (ss->engine)
        engine_unpin(ss->engine, ss->s[i].key);
    free(ss->s[i].hist);
    ss->s[i] = ss->s[--ss->n];
}

static void expire(struct sessions *ss, double now)
{
    if (ss->ttl <= 0)
        return;
    for (int i = ss->n - 1; i >= 0; i--)
        if (!ss->s[i].busy && now - ss->s[i].last_use > ss->ttl) {
            drop(ss, i);
            ss->expired++;
        }
}

static int find(const struct sessions *ss, const char *id)
{
    for (int i = 0; i < ss->n; i++)
        if (!strcmp(ss->s[i].id, id))
            return i;
    return -1;
}

/* A new session (lock held): room made by dropping the least recently used idle one. */
static enum ll_status add(struct sessions *ss, const char *id, uint64_t owner, double now, int *out,
                          struct oai_error *e)
{
    if (ss->n >= ss->max) {
        int lru = -1;
        for (int i = 0; i < ss->n; i++)
            if (!ss->s[i].busy && (lru < 0 || ss->s[i].last_use < ss->s[lru].last_use))
                lru = i;
        if (lru < 0)
            return oai_error_set(e, LL_EOVERLOADED, "session_id", "too_many_sessions",
                                 "all %d sessions (--max-sessions) are in use", ss->max);
        drop(ss, lru);
        ss->evicted++;
    }
    if (ss->n == ss->cap) {
        int cap = ss->cap ? 2 * ss->cap : 16;
        struct session *ns = realloc(ss->s, (size_t)cap * sizeof *ns);
        if (!ns)
            return oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
        ss->s = ns;
        ss->cap = cap;
    }
    struct session *s = &ss->s[ss->n];
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    s->owner = owner;
    s->key = ++ss->next_key;
    s->last_use = now;
    s->created_unix = s->last_unix = (long long)time(NULL);
    ss->created_total++;
    *out = ss->n++;
    return LL_OK;
}

enum ll_status sessions_begin(struct sessions *ss, const char *id, uint64_t owner, bool create,
                              const int32_t *prompt, int n_prompt, uint64_t *key,
                              struct oai_error *e)
{
    double now = ll_now();
    enum ll_status st = LL_OK;
    pthread_mutex_lock(&ss->lock);
    expire(ss, now);
    int i = find(ss, id);
    if (i >= 0 && ss->s[i].owner != owner)
        st = oai_error_set(e, LL_ENOTFOUND, "session_id", "session_not_found", "no session '%s'",
                           id);
    else if (i < 0 && !create)
        st = oai_error_set(e, LL_ENOTFOUND, "session_id", "session_not_found", "no session '%s'",
                           id);
    else if (i < 0)
        st = add(ss, id, owner, now, &i, e);
    if (st == LL_OK) {
        struct session *se = &ss->s[i];
        int k = 0;
        while (k < se->n_hist && k < n_prompt && se->hist[k] == prompt[k])
            k++;
        se->last_common = k;
        se->busy++;
        ss->s[i].last_use = now;
        ss->s[i].last_unix = (long long)time(NULL);
        *key = ss->s[i].key;
    }
    pthread_mutex_unlock(&ss->lock);
    return st;
}

void sessions_end(struct sessions *ss, uint64_t key, bool ok, const int32_t *prompt, int n_prompt,
                  const int32_t *gen, int n_gen, int cached)
{
    pthread_mutex_lock(&ss->lock);
    int i = 0;
    while (i < ss->n && ss->s[i].key != key)
        i++;
    if (i < ss->n) {
        struct session *s = &ss->s[i];
        s->busy--;
        s->last_use = ll_now();
        s->last_unix = (long long)time(NULL);
        if (ok) {
            int n = n_prompt + n_gen;
            if (n > s->cap_hist) {
                int32_t *h = realloc(s->hist, (size_t)n * sizeof *h);
                if (h) {
                    s->hist = h;
                    s->cap_hist = n;
                }
            }
            if (n <= s->cap_hist) {
                memcpy(s->hist, prompt, (size_t)n_prompt * sizeof *prompt);
                if (n_gen)
                    memcpy(s->hist + n_prompt, gen, (size_t)n_gen * sizeof *gen);
                s->n_hist = n;
            }
            s->turns++;
            s->cached_tokens += (uint64_t)cached;
            s->last_cached = cached;
            if (cached > 0) {
                ss->hits++;
                ss->tokens_saved += (uint64_t)cached;
            }
        }
    }
    pthread_mutex_unlock(&ss->lock);
}

enum ll_status sessions_create(struct sessions *ss, const char *id, uint64_t owner, char *out,
                               struct oai_error *e)
{
    char made[SESSION_ID_MAX + 1];
    if (!id) {
        char hex[33];
        request_id_random(hex);
        snprintf(made, sizeof made, "sess-%s", hex);
        id = made;
    }
    double now = ll_now();
    enum ll_status st;
    int i;
    pthread_mutex_lock(&ss->lock);
    expire(ss, now);
    if (find(ss, id) >= 0)
        st = oai_error_set(e, LL_EINVAL, "id", "session_exists", "session '%s' already exists", id);
    else
        st = add(ss, id, owner, now, &i, e);
    pthread_mutex_unlock(&ss->lock);
    if (st == LL_OK)
        snprintf(out, SESSION_ID_MAX + 1, "%s", id);
    return st;
}

char *sessions_describe(struct sessions *ss, const char *id, uint64_t owner, struct oai_error *e)
{
    double now = ll_now();
    struct ll_buf b = {0};
    pthread_mutex_lock(&ss->lock);
    expire(ss, now);
    int i = find(ss, id);
    if (i < 0 || ss->s[i].owner != owner) {
        pthread_mutex_unlock(&ss->lock);
        oai_error_set(e, LL_ENOTFOUND, "session_id", "session_not_found", "no session '%s'", id);
        return NULL;
    }
    struct session s = ss->s[i];
    struct engine *engine = ss->engine;
    pthread_mutex_unlock(&ss->lock);
    int pinned = engine ? engine_pinned_blocks(engine, s.key) : 0;
    ll_buf_printf(&b,
                  "{\"id\":\"%s\",\"object\":\"session\",\"tokens\":%d,\"pinned_blocks\":%d,"
                  "\"turns\":%llu,\"cached_tokens\":%llu,\"in_flight\":%d,"
                  "\"last_turn\":{\"common_prefix\":%d,\"cached_tokens\":%d},"
                  "\"created\":%lld,\"last_use\":%lld,\"idle_s\":%.3f,\"ttl_s\":%g}",
                  s.id, s.n_hist, pinned, (unsigned long long)s.turns,
                  (unsigned long long)s.cached_tokens, s.busy, s.last_common, s.last_cached,
                  s.created_unix, s.last_unix, now - s.last_use, ss->ttl);
    char *out = ll_buf_take(&b);
    if (!out)
        oai_error_set(e, LL_ENOMEM, NULL, NULL, "out of memory");
    return out;
}

enum ll_status sessions_delete(struct sessions *ss, const char *id, uint64_t owner,
                               struct oai_error *e)
{
    enum ll_status st = LL_OK;
    pthread_mutex_lock(&ss->lock);
    int i = find(ss, id);
    if (i < 0 || ss->s[i].owner != owner)
        st = oai_error_set(e, LL_ENOTFOUND, "session_id", "session_not_found", "no session '%s'",
                           id);
    else
        drop(ss, i);
    pthread_mutex_unlock(&ss->lock);
    return st;
}

void sessions_get_stats(struct sessions *ss, struct sessions_stats *st)
{
    pthread_mutex_lock(&ss->lock);
    expire(ss, ll_now());
    *st = (struct sessions_stats){.active = ss->n,
                                  .hits = ss->hits,
                                  .tokens_saved = ss->tokens_saved,
                                  .created = ss->created_total,
                                  .expired = ss->expired,
                                  .evicted = ss->evicted};
    pthread_mutex_unlock(&ss->lock);
}
