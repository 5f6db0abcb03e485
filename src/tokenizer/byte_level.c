/*
 * byte_level.c: the GPT-2 byte-level alphabet that byte-level BPE vocabularies are written in.
 *
 * Every byte stands for one printable code point: the bytes 0x21..0x7E, 0xA1..0xAC and
 * 0xAE..0xFF for themselves, the 68 others (controls, space, 0x7F..0xA0, 0xAD) for U+0100,
 * U+0101, ... in increasing byte order. So " hello" is written "Ġhello" (0x20 → U+0120).
 * Pure functions; any thread.
 */
#include <string.h>

#include "tokenizer_impl.h"

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

void tok_byte_level_init(uint32_t byte_to_cp[256])
{
    uint32_t next = 0x100;
    for (unsigned b = 0; b < 256; b++)
        byte_to_cp[b] = byte_is_printable(b) ? b : next++;
}

/* The byte a code point of the alphabet stands for, or -1. The 68 stand-ins are, in order,
 * 0x00..0x20 (33), 0x7F..0xA0 (34) and 0xAD. */
static int cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t w = cp - 0x100;
    if (w < 33)
        return (int)w;
    if (w < 67)
        return (int)(0x7F + (w - 33));
    if (w == 67)
        return 0xAD;
    return -1;
}

size_t tok_byte_level_decode(const char *s, size_t len, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        size_t step = tok_utf8_decode(u + i, len - i, &cp);
        int b = cp_to_byte(cp);
        if (b < 0) {
            /* not the alphabet: the decoder keeps the token's own text */
            memcpy(out, s, len);
            return len;
        }
        out[k++] = (char)b;
        i += step;
    }
    return k;
}
