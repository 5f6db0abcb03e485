/*
 * spec.c: the n-gram drafter and the drafting policy (see spec.h).
 *
 * The lookup is a backwards scan over the sequence for each n-gram length: O(n · g) compares
 * per decoding sequence and step, tens of microseconds at a 4096-token context, against a
 * forward pass of tens of milliseconds or more. The counts decay by SPEC_DECAY per
 * verification, so q follows the last few dozen tested tokens.
 */
#include "spec.h"

#include <string.h>

#define SPEC_DECAY 0.85
#define SPEC_PRIOR_HITS 1.0
#define SPEC_PRIOR_TESTS 2.0

int spec_ngram_draft(const int32_t *tok, int n, int k, int32_t *out)
{
    for (int g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (n < g + 1)
            continue;
        const int32_t *suf = tok + n - g;
        for (int i = n - g - 1; i >= 0; i--) {
            if (tok[i] != suf[0] || memcmp(tok + i, suf, sizeof *tok * (size_t)g))
                continue;
            int from = i + g, avail = n - from; /* >= 1 */
            for (int j = 0; j < k; j++)
                out[j] = j < avail ? tok[from + j] : out[j - avail];
            return k;
        }
    }
    return 0;
}

double spec_acceptance(const struct spec_state *s)
{
    return (s->hits + SPEC_PRIOR_HITS) / (s->tests + SPEC_PRIOR_TESTS);
}

int spec_plan(struct spec_state *s, double theta, int max_k)
{
    double q = spec_acceptance(s), pr = 1;
    int k = 0;
    while (k < max_k && (pr *= q) >= theta)
        k++;
    if (k > 0 || max_k < 1)
        return k;
    if (s->skip > 0) {
        s->skip--;
        return 0;
    }
    return 1;
}

void spec_update(struct spec_state *s, int drafted, int accepted)
{
    if (drafted <= 0)
        return;
    int tested = accepted + (accepted < drafted);
    s->hits = SPEC_DECAY * s->hits + accepted;
    s->tests = SPEC_DECAY * s->tests + tested;
    if (accepted > 0) {
        s->backoff = 0;
    } else {
        s->backoff = s->backoff ? 2 * s->backoff : 1;
        if (s->backoff > SPEC_BACKOFF_MAX)
            s->backoff = SPEC_BACKOFF_MAX;
        s->skip = s->backoff;
    }
}
