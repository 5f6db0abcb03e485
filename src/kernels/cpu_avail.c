/*
 * cpu_avail.c: idle cores and cores used by other processes, from /proc/stat (see cpu_avail.h).
 */
#include "cpu_avail.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "util.h"

bool ll_cpu_sample(struct ll_cpu_sample *s)
{
    cpu_set_t mask;
    char *text;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 ||
        ll_read_file("/proc/stat", &text, NULL, NULL) != LL_OK)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    *s = (struct ll_cpu_sample){.wall = ll_now(), .own = (double)ts.tv_sec + ts.tv_nsec * 1e-9};
    /* lines "cpuN user nice system idle iowait irq softirq steal ..." (the total line "cpu " is
     * skipped: it has no number) */
    for (char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
            continue;
        char *p;
        long cpu = strtol(line + 3, &p, 10);
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, &mask))
            continue;
        unsigned long long v[8];
        for (int i = 0; i < 8; i++)
            v[i] = strtoull(p, &p, 10);
        s->idle += (double)(v[3] + v[4]);
        s->busy += (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
        s->n_cpus++;
    }
    free(text);
    return s->n_cpus > 0;
}

bool ll_cpu_between(const struct ll_cpu_sample *a, const struct ll_cpu_sample *b, double *idle,
                    double *others)
{
    double dt = b->wall - a->wall, di = b->idle - a->idle, db = b->busy - a->busy;
    if (!(dt > 0) || a->n_cpus != b->n_cpus || !(di + db > 0))
        return false;
    /* shares of the ticks accounted in the window, not of the wall time: in a VM the ticks of a
     * second can add up to more or less than n_cpus seconds (275 for 200 seen), which would
     * read as someone else's work */
    double busy = db / (di + db) * a->n_cpus, o = busy - (b->own - a->own) / dt;
    *idle = di / (di + db) * a->n_cpus;
    *others = o > 0 ? o : 0;
    return true;
}
