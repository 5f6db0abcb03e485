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
 *
 * The cores this process may use (the default compute thread count, pool.h): the CPUs of its
 * affinity mask counted once per physical core (SMT siblings share a core's units and its
 * bandwidth, and a matmul thread gains nothing from the second one), at most its cgroup's CPU
 * quota rounded up (`docker --cpus 1.5` gives 2; cgroup v2 cpu.max or v1 cpu.cfs_quota_us /
 * cpu.cfs_period_us, the tightest on the path from its cgroup to the root).
 */
#ifndef LLAISYS_CPU_AVAIL_H
#define LLAISYS_CPU_AVAIL_H

#include <sched.h>
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

/* The cores this process may use (see above), at least 1. Reads /sys and /proc each call. */
int ll_cpu_cores_usable(void);
/* This process's cgroup CPU quota in cores (0: none), and the threads it gives work to (rounded
 * up; 0 for none). */
double ll_cpu_quota(void);
int ll_cpu_quota_threads(double quota);
/* The parts, readable from other roots (tests): the physical cores among the CPUs of mask, from
 * sys_cpu/cpuN/topology/{physical_package_id,core_id} (a CPU whose topology cannot be read counts
 * as a core of its own); and the tightest CPU quota in cores (0: none) of the cgroups named by
 * the text of /proc/self/cgroup, under cgroup_root (v1 hierarchies as cgroup_root/CONTROLLERS). */
int ll_cpu_physical_cores(const cpu_set_t *mask, const char *sys_cpu);
double ll_cgroup_cpu_quota(const char *proc_cgroup, const char *cgroup_root);

#endif
