/*
 * cpu_avail.h: how much of the CPUs this process may run on is idle, and how much other
 * processes are using, measured between two samples. The compute pool (pool.h) reads it to run
 * fewer threads while another process holds a core.
 *
 * A sample reads the per-CPU lines of /proc/stat for the CPUs in this thread's affinity mask
 * (ticks: idle = idle + iowait; busy = user + nice + system + irq + softirq + steal,
 * steal counting as a core taken by someone else) and this process's CPU time
 * (CLOCK_PROCESS_CPUTIME_ID). Between two samples, idle and busy are their shares of the ticks
 * accounted (times the number of CPUs: cores), and others = busy - our CPU time per second of
 * wall time. Tick accounting makes a window of a quarter second good to about a tenth of a
 * core.
 */
#ifndef LLAISYS_CPU_AVAIL_H
#define LLAISYS_CPU_AVAIL_H

#include <stdbool.h>

struct ll_cpu_sample {
    double wall;   /* ll_now() */
    double own;    /* this process's CPU time, seconds */
    double idle;   /* idle ticks summed over the CPUs sampled */
    double busy;   /* busy ticks summed over the same CPUs */
    int n_cpus;    /* CPUs sampled */
};

/* Take a sample. False (s unusable) when /proc/stat cannot be read or parsed. */
bool ll_cpu_sample(struct ll_cpu_sample *s);

/* Between samples a and b (b later): *idle cores idle on average, *others cores busy with other
 * processes (never negative). False when the window is empty (no wall time or no ticks) or the
 * CPU sets differ. */
bool ll_cpu_between(const struct ll_cpu_sample *a, const struct ll_cpu_sample *b, double *idle,
                    double *others);

#endif
