/*
 * cpu_quota.c — the CPUs a cgroup CPU quota allows this process
 * (vt_team_default_threads, vt.h; its parts for tests in team.h).
 *
 * A container started with `--cpus=1`, a Kubernetes pod with a CPU limit,
 * a systemd unit with CPUQuota= all see every core of the host in their
 * affinity mask, yet may use only quota/period CPUs per period; a team of
 * more threads than that runs in bursts and then waits out the rest of the
 * period (throttled), every thread of it at once. So the default thread
 * count is the affinity's count, lowered to the quota rounded up.
 *
 * Read: /proc/self/cgroup names the process's cgroup. cgroup v2 (a line
 * "0::PATH"): ROOT/PATH/cpu.max, "QUOTA PERIOD" or "max PERIOD". cgroup v1
 * (a line "N:...,cpu,...:PATH"): cpu.cfs_quota_us (-1: none) and
 * cpu.cfs_period_us under the cpu controller's mount (ROOT/cpu,
 * ROOT/cpu,cpuacct or ROOT/cpuacct,cpu). Each cgroup from the process's up
 * to the root is read and the lowest limit kept (a parent's limit binds its
 * children). Inside a container whose cgroup namespace hides the host's
 * path, ROOT itself is the container's cgroup: when ROOT/PATH does not exist,
 * ROOT alone is read. Anything unreadable is taken as no limit.
 */
#include "team.h"
#include "vt.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The first line of dir/name, or "" (cap > 0). */
static void read_line(const char *dir, const char *name, char *out, size_t cap) {
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(out, (int)cap, f)) out[0] = 0;
    fclose(f);
}

/* The limit one cgroup directory sets, in CPUs; 0: none. */
static double dir_limit(const char *dir, int v2) {
    char a[128], b[128];
    double q = 0, p = 0;
    if (v2) {
        read_line(dir, "cpu.max", a, sizeof a);
        if (sscanf(a, "%lf %lf", &q, &p) != 2) return 0;   /* "max 100000", or no file */
    } else {
        read_line(dir, "cpu.cfs_quota_us", a, sizeof a);
        read_line(dir, "cpu.cfs_period_us", b, sizeof b);
        if (sscanf(a, "%lf", &q) != 1 || sscanf(b, "%lf", &p) != 1) return 0;
    }
    return q > 0 && p > 0 ? q / p : 0;
}

/* The lowest limit from mount/path up to mount (or mount alone when
 * mount/path is not there); 0: none. */
static double walk_up(const char *mount, const char *path, int v2) {
    char dir[4096];
    double best = 0;
    int n = snprintf(dir, sizeof dir, "%s%s", mount, path);
    if (n < 0 || (size_t)n >= sizeof dir || !is_dir(dir)) snprintf(dir, sizeof dir, "%s", mount);
    const size_t top = strlen(mount);
    for (;;) {
        double l = dir_limit(dir, v2);
        if (l > 0 && (best == 0 || l < best)) best = l;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top) break;
        *slash = 0;
    }
    return best;
}

/* Whether the comma-separated controllers list names "cpu". */
static int names_cpu(const char *list, size_t n) {
    for (const char *p = list; p < list + n;) {
        const char *c = memchr(p, ',', (size_t)(list + n - p));
        size_t l = c ? (size_t)(c - p) : (size_t)(list + n - p);
        if (l == 3 && !memcmp(p, "cpu", 3)) return 1;
        p += l + 1;
    }
    return 0;
}

double vt_cgroup_cpu_limit(const char *proc_cgroup, const char *root) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0;
    char line[4096];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        double l = 0;
        const char *path = strcmp(c2 + 1, "/") ? c2 + 1 : "";   /* "/": the mount itself */
        if (c2 == c1 + 1 && !strncmp(line, "0:", 2)) {   /* v2: "0::PATH" */
            l = walk_up(root, path, 1);
        } else if (names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) {   /* v1 */
            static const char *const names[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
            char mount[4096];
            for (int i = 0; i < 3 && l == 0; i++) {
                snprintf(mount, sizeof mount, "%s/%s", root, names[i]);
                if (is_dir(mount)) l = walk_up(mount, path, 0);
            }
        }
        if (l > 0 && (best == 0 || l < best)) best = l;
    }
    fclose(f);
    return best;
}

int vt_threads_for_limit(int procs, double limit) {
    if (limit <= 0) return procs;
    int q = (int)ceil(limit - 1e-6);
    if (q < 1) q = 1;
    return q < procs ? q : procs;
}

int vt_team_default_threads(void) {
    static int cached;   /* the quota is read once a process */
    int n = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (n > 0) return n;
    const char *off = getenv("VTLAB_CPU_QUOTA");
    double limit = off && !strcmp(off, "0") ? 0 : vt_cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    n = vt_threads_for_limit(omp_get_num_procs(), limit);
    __atomic_store_n(&cached, n, __ATOMIC_RELEASE);
    return n;
}
