/*
 * parse.h: option values as people type them: integers, sizes in bytes with binary units, and
 * booleans. Used by the engine-option table (engine_opts.h), the server's options and the CLI.
 * Every error is LL_EINVAL with the message "WHAT: must be ... (got 'TEXT')", WHAT being the
 * flag or environment variable the caller names.
 */
#ifndef LLAISYS_PARSE_H
#define LLAISYS_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* A decimal integer in [lo, hi] (optional sign, nothing else around it) into *out. Returns LL_OK
 * or LL_EINVAL ("WHAT: must be an integer from LO to HI (got 'S')"); *out is untouched then. */
enum ll_status ll_parse_int(const char *what, const char *s, long long lo, long long hi,
                            long long *out, struct ll_err *err);

/* A size in bytes in [lo, hi]: digits, an optional fraction (".5"), an optional unit K, M, G or
 * T (either case; powers of 1024), then an optional "i" after a unit and an optional "B":
 * 65536, 512K, 1.5G, 64MiB, 2GB. Fractions of a byte are dropped. Returns LL_OK or LL_EINVAL
 * ("WHAT: must be a size in bytes from LO to HI, such as 65536, 512K, 64M or 2G (got
 * 'S')", LO and HI in the largest unit that divides them). */
enum ll_status ll_parse_size(const char *what, const char *s, uint64_t lo, uint64_t hi,
                             size_t *out, struct ll_err *err);

/* A boolean: NULL (a flag given without a value), 1, true, yes, on → true; 0, false, no, off
 * or "" → false (either case). Returns LL_OK or LL_EINVAL ("WHAT: must be 1/true/yes/on or
 * 0/false/no/off (got 'S')"). */
enum ll_status ll_parse_bool(const char *what, const char *s, bool *out, struct ll_err *err);

#endif
