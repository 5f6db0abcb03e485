/*
 * request_id.c: random hex ids from getrandom (a clock-seeded LCG if it fails) and the check
 * of a client's X-Request-Id. Any thread.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "request_id.h"
#include "util.h"

void request_id_random(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        static atomic_ullong counter;
        uint64_t x = (uint64_t)(ll_now() * 1e9) ^ (atomic_fetch_add(&counter, 1) << 40);
        for (int i = 0; i < 16; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            b[i] = (unsigned char)(x >> 56);
    }
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = 0;
}

bool request_id_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("-_.:/+=@", ch)))
            return false;
    }
    return true;
}
