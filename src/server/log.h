/*
 * log.h: the server's log: one line per event on stderr, with the time and level. Any thread.
 */
#ifndef LLAISYS_SERVER_LOG_H
#define LLAISYS_SERVER_LOG_H

#include <stdbool.h>

#include "server.h"

/* Messages above l are dropped from now on. */
void log_set_level(enum log_level l);
/* Whether a message at l would be written. */
bool log_enabled(enum log_level l);
/* Write "TIME LEVEL message" (printf format) as one line, if l is enabled. */
void log_msg(enum log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
