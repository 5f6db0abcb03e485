/*
 * log.c: the levelled log (see log.h): one line per event on stderr, "TIME LEVEL message",
 * written with a single fprintf so lines of concurrent threads do not interleave. Any thread.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int level = LOG_INFO;

void log_set_level(enum log_level l)
{
    atomic_store(&level, (int)l);
}

bool log_enabled(enum log_level l)
{
    return (int)l <= atomic_load(&level);
}

void log_msg(enum log_level l, const char *fmt, ...)
{
    static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if (!log_enabled(l))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            names[l], msg);
}
