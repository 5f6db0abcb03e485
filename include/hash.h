/*
 * hash.h: the 64-bit mixer used for seeds, random streams and hash tables (splitmix64's
 * finalizer and generator). Header-only; pure; any thread. Values are part of llaisys's
 * determinism (seeded sampling, mkmodel's byte-identical output): never change them.
 */
#ifndef LLAISYS_HASH_H
#define LLAISYS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LL_GOLDEN64 0x9e3779b97f4a7c15ull /* 2^64 / golden ratio: the splitmix64 increment */

/* splitmix64's finalizer: a bijective mix of all 64 bits. */
static inline uint64_t ll_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next value of the splitmix64 stream whose state is *state (advanced). */
static inline uint64_t ll_splitmix64(uint64_t *state)
{
    *state += LL_GOLDEN64;
    return ll_mix64(*state);
}

/* 64-bit hash of a byte string, 8 bytes (little-endian) per round, for hash tables (not
 * cryptographic). */
static inline uint64_t ll_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = LL_GOLDEN64 ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w = (uint64_t)s[0] | (uint64_t)s[1] << 8 | (uint64_t)s[2] << 16 |
                     (uint64_t)s[3] << 24 | (uint64_t)s[4] << 32 | (uint64_t)s[5] << 40 |
                     (uint64_t)s[6] << 48 | (uint64_t)s[7] << 56;
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)s[i] << (8 * i);
    return ll_mix64(h ^ w);
}

#endif
