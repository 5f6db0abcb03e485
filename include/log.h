/*
 * log.h: the levelled log every layer writes to: one line per event on stderr,
 * "TIME LEVEL message" (UTC, milliseconds), written with one call so lines of concurrent threads
 * never interleave. Any thread. The level is process-wide (default info).
 */
#ifndef LLAISYS_LOG_H
#define LLAISYS_LOG_H

#include <stdbool.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Lines above level l are dropped from now on. */
void log_set_level(enum log_level l);
/* Whether a line at level l would be written (to skip costly formatting). */
bool log_enabled(enum log_level l);
/* Write one line at level l (messages longer than 2 KiB are cut). */
void log_msg(enum log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
