/*
 * cpu_avail.c: idle cores and cores used by other processes, from /proc/stat; the cores this
 * process may use, from its affinity mask, the CPU topology and its cgroup (see cpu_avail.h).
 */
#include "cpu_avail.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
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

/* The leading numbers of a small text file, up to `max` of them ("max", say, ends them): how many
 * were read (0 when the file cannot be read). */
static int read_numbers(const char *path, double *v, int max)
{
    char *text;
    if (ll_read_file(path, &text, NULL, NULL) != LL_OK)
        return 0;
    int n = 0;
    for (char *p = text, *end; n < max; p = end, n++) {
        v[n] = strtod(p, &end);
        if (end == p)
            break;
    }
    free(text);
    return n;
}

int ll_cpu_physical_cores(const cpu_set_t *mask, const char *sys_cpu)
{
    int n = 0, cores = 0, cap = CPU_COUNT(mask);
    long(*seen)[2] = calloc(cap > 0 ? (size_t)cap : 1, sizeof *seen);
    if (!seen)
        return cap;
    for (int cpu = 0; cpu < CPU_SETSIZE && n < cap; cpu++) {
        if (!CPU_ISSET(cpu, mask))
            continue;
        n++;
        long id[2] = {-1, -1}; /* package, core */
        const char *name[2] = {"physical_package_id", "core_id"};
        for (int f = 0; f < 2; f++) {
            char path[256];
            double v;
            snprintf(path, sizeof path, "%s/cpu%d/topology/%s", sys_cpu, cpu, name[f]);
            if (read_numbers(path, &v, 1) == 1)
                id[f] = (long)v;
        }
        bool dup = false;
        for (int i = 0; i < cores && id[1] >= 0; i++)
            dup |= seen[i][0] == id[0] && seen[i][1] == id[1];
        if (!dup) { /* an unreadable topology counts the CPU as its own core */
            seen[cores][0] = id[0];
            seen[cores][1] = id[1];
            cores++;
        }
    }
    free(seen);
    return cores;
}

/* The tightest quota along dir and its ancestors up to root (cores; 0 when none). v2 reads
 * "cpu.max" ("max 100000" or "QUOTA PERIOD"), v1 "cpu.cfs_quota_us" (-1: none) and
 * "cpu.cfs_period_us". */
static double quota_along(const char *root, const char *dir, bool v2)
{
    char path[1024];
    double best = 0;
    size_t len = strlen(dir);
    for (;;) {
        double qp[2] = {0, 0}; /* quota, period */
        snprintf(path, sizeof path, "%s%.*s/%s", root, (int)len, dir,
                 v2 ? "cpu.max" : "cpu.cfs_quota_us");
        if (read_numbers(path, qp, v2 ? 2 : 1) > 0 && !v2) {
            snprintf(path, sizeof path, "%s%.*s/cpu.cfs_period_us", root, (int)len, dir);
            read_numbers(path, qp + 1, 1);
        }
        if (qp[0] > 0 && qp[1] > 0 && (best == 0 || qp[0] / qp[1] < best))
            best = qp[0] / qp[1];
        if (len == 0)
            return best;
        while (len > 0 && dir[len - 1] != '/') /* the parent directory */
            len--;
        while (len > 0 && dir[len - 1] == '/')
            len--;
    }
}

double ll_cgroup_cpu_quota(const char *proc_cgroup, const char *cgroup_root)
{
    double best = 0;
    for (const char *line = proc_cgroup; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
        const char *c1 = memchr(line, ':', n);
        const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 && c2[1] == '/') {
            char dir[768], root[512];
            size_t dn = n - (size_t)(c2 + 1 - line);
            snprintf(dir, sizeof dir, "%.*s", (int)dn, c2 + 1);
            if (dn > 1 && dir[strlen(dir) - 1] == '/')
                dir[strlen(dir) - 1] = '\0';
            if (!strcmp(dir, "/"))
                dir[0] = '\0';
            double q = 0;
            if (c2 == c1 + 1) { /* v2 */
                q = quota_along(cgroup_root, dir, true);
            } else {
                /* v1: the hierarchy whose controllers include cpu ("cpu", "cpu,cpuacct") */
                char ctl[128];
                snprintf(ctl, sizeof ctl, "%.*s", (int)(c2 - c1 - 1), c1 + 1);
                bool has_cpu = false;
                for (char *sv, *t = strtok_r(ctl, ",", &sv); t; t = strtok_r(NULL, ",", &sv))
                    has_cpu |= !strcmp(t, "cpu");
                if (has_cpu) {
                    snprintf(ctl, sizeof ctl, "%.*s", (int)(c2 - c1 - 1), c1 + 1);
                    snprintf(root, sizeof root, "%s/%s", cgroup_root, ctl);
                    q = quota_along(root, dir, false);
                    if (q == 0) { /* mounted as "cpu" beside a "cpu,cpuacct" link */
                        snprintf(root, sizeof root, "%s/cpu", cgroup_root);
                        q = quota_along(root, dir, false);
                    }
                }
            }
            if (q > 0 && (best == 0 || q < best))
                best = q;
        }
        line = eol ? eol + 1 : NULL;
    }
    return best;
}

double ll_cpu_quota(void)
{
    char *cg;
    if (ll_read_file("/proc/self/cgroup", &cg, NULL, NULL) != LL_OK)
        return 0;
    double q = ll_cgroup_cpu_quota(cg, "/sys/fs/cgroup");
    free(cg);
    return q;
}

int ll_cpu_quota_threads(double quota)
{
    return quota > 0 ? (int)ceil(quota - 1e-9) : 0;
}

int ll_cpu_cores_usable(void)
{
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0)
        return 1;
    int cores = ll_cpu_physical_cores(&mask, "/sys/devices/system/cpu");
    int q = ll_cpu_quota_threads(ll_cpu_quota());
    if (q > 0 && q < cores)
        cores = q;
    return cores > 0 ? cores : 1;
}
