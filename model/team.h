/*
 * team.h — how many OpenMP threads a pass of the forward uses: the session's
 * count, or one thread while one thread has been measured to be faster (a
 * busy host). No result depends on it: every parallel piece of the forward
 * pass gives the same bits for any thread count (gemm.h).
 *
 * Why. A parallel region ends when its slowest thread arrives. When another
 * process holds a core, a team thread can be descheduled in the middle of its
 * tile and the others wait for it at the region's end. A decode step is ~40
 * short regions (one per product); a prefill has fewer, longer ones, but
 * under a co-tenant that keeps both cores busy (another multi-threaded
 * process, a build beside it) a 2-thread prefill of the 288M model ran 1.3 to
 * 3.2 times slower than one thread (issue 32), and a decode 0.75-0.87 of one
 * thread (`make bench-contention`, docs/architecture.md).
 *
 * How: measure both and use the faster, for decode steps and for prefill
 * passes apart (a team helps them differently). The governor times each pass
 * and divides by its work (the multiply-adds of its products big enough to
 * run in parallel, vt_team_add): passes of different lengths compare per unit
 * of work. For each choice (the session's count, one thread) it keeps decayed
 * sums of seconds and of work, whose ratio is the choice's cost (a ratio of
 * sums, not a mean of rates: a team whose passes are mostly fast and now and
 * then stalled, a thread descheduled, is as slow as its total time says). It
 * runs the cheaper and, after `interval` passes, the other once, to refresh
 * its cost (a probe). A probe that confirms the choice widens the interval; a
 * change of choice narrows it again. A probe of the team wins when it costs
 * under 0.9 of one thread, one of one thread under 0.97 of the team (two
 * within noise of each other do not swap at every probe, and near a tie one
 * thread is kept: the goal is never to run slower than one thread), and the
 * choice changes only after two wins in a row (the second probe
 * right after the first: one lucky pass between a co-tenant's bursts does
 * not take the next passes back to a slower team). The first probe comes right after the first measured pass,
 * and when passes in a row of the choice (VT_TEAM_ODD_*) move by 1.5x from
 * what it cost when last chosen or confirmed, in the direction that may make
 * the other win (a team slower: a co-tenant came; one thread faster: one
 * left), the other is probed at once, its cost that probe's alone.
 *
 * What is learnt belongs to the host, not to a session: the measurements are
 * kept per kind of pass and team size for the whole process (a sweep opens a
 * session per arm; each would otherwise pay its own probes). A pass with no
 * product big enough to run in parallel (VT_STEP_MIN_WORK for a decode step,
 * vt_gemm_batch's return) is not judged. VTLAB_TEAM_GOVERNOR=0 in the
 * environment keeps the session's count always.
 */
#ifndef VT_TEAM_H
#define VT_TEAM_H

#include <stdint.h>

/* Probe intervals, in passes of the kind: the first after the first measured
 * pass; a confirmation multiplies the interval by GROWTH, and from the second
 * in a row on it is what keeps the probes' cost at BUDGET percent of the
 * passes (a probed choice r times the chosen one's cost costs r - 1 passes:
 * (r - 1) / BUDGET passes apart), at least FIRST, at most MAX; a change of
 * choice sets it to FIRST.
 * Decode steps are short and many; prefill passes are long and few (a sweep
 * of 48 x 32 tokens is 6 passes), so their intervals are shorter. A change of
 * load does not wait for the interval (VT_TEAM_ODD_*). */
enum { VT_TEAM_FIRST_INTERVAL = 4, VT_TEAM_GROWTH = 4, VT_TEAM_MAX_INTERVAL = 1024 };
enum { VT_TEAM_PREFILL_FIRST = 2, VT_TEAM_PREFILL_GROWTH = 2, VT_TEAM_PREFILL_MAX = 64 };
enum { VT_TEAM_PROBE_BUDGET = 2 };
/* A change of load: this many passes in a row whose cost is 1.5x from the
 * choice's. One odd pass is noise (a burst elsewhere); a decode step is short
 * (10-30 ms), so one compiler run beside it makes several in a row odd, and
 * its scheduled probes come every 64 steps (1-2 s) anyway. */
enum { VT_TEAM_ODD_PREFILL = 2, VT_TEAM_ODD_DECODE = 6 };

enum { VT_TEAM_DECODE = 0, VT_TEAM_PREFILL = 1 };

/* What the process has measured for one kind of pass at one team size. */
typedef struct vt_gov {
    int    max;         /* the team size (0: a free slot) */
    int    kind;        /* VT_TEAM_DECODE or VT_TEAM_PREFILL */
    double sec[2];      /* decayed sums of seconds: [0] one thread, [1] the team */
    double work[2];     /* ... and of work; cost = sec / work (0 work: not measured yet) */
    int    choice;      /* 0 or 1: which one runs */
    int    since;       /* passes since the last probe */
    int    interval;    /* passes between probes */
    double ref_cost;    /* the choice's cost when it was last chosen or confirmed by a probe */
    int    odd;         /* passes in a row 1.5x from ref_cost: above it (the team), below (one thread) */
    int    fresh;       /* the next probe was called by a change of load: it alone is the other's cost */
    int    pending;     /* the last probe won: the next pass probes again, and two wins change the choice */
    int    confirmed;   /* probes in a row that confirmed the choice */
    long   probes, changes, odd_probes;   /* for the bench: probes, changes of choice, probes called by a change of load */
} vt_gov;

typedef struct vt_team {
    int     max;        /* the session's thread count */
    int     off;        /* VTLAB_TEAM_GOVERNOR=0, or max == 1 */
    int     pool;       /* a decode step on the team runs as one vt_gemm_step (VTLAB_STEP_POOL=0: not) */
    vt_gov *gov[2];     /* the process's measurements for this team size: [kind] (NULL when off) */
    int     kind;       /* the pass in flight: VT_TEAM_DECODE (T == 1) or VT_TEAM_PREFILL */
    int     governed;   /* ... is judged (not off) */
    int     mode;       /* ... and what it runs: 0 one thread, 1 the team */
    int64_t work;       /* ... and the multiply-adds of its products big enough to run in parallel */
    long    steps, single_steps;     /* this session's decode steps, and how many ran on one thread */
    long    passes, single_passes;   /* this session's prefill passes, and how many ran on one thread */
} vt_team;

void vt_team_init(vt_team *t, int max);
/* The thread count for a pass of T tokens (a decode step when T == 1); clears the pass's sums. */
int vt_team_begin(vt_team *t, int64_t T);
/* One product of the pass big enough to run in parallel (vt_gemm_batch's
 * return): its multiply-adds. A pass without one is not judged. */
void vt_team_add(vt_team *t, int64_t madds);
/* The pass is over after `seconds` (its wall time): update the costs, choose
 * the next pass's count. */
void vt_team_end(vt_team *t, double seconds);

/* The parts of vt_team_default_threads (vt.h), for tests: the lowest cgroup CPU limit in CPUs (quota over
 * period) that proc_cgroup (a /proc/self/cgroup) and the cgroup tree under
 * root (/sys/fs/cgroup) set, 0 when none; and the thread count for procs
 * CPUs under that limit (the limit rounded up, at least 1, at most procs). */
double vt_cgroup_cpu_limit(const char *proc_cgroup, const char *root);
int    vt_threads_for_limit(int procs, double limit);

/* Tests: a copy of what the process has measured for kind at team size max
 * (all zero when nothing yet), and forgetting all of it. */
vt_gov vt_team_gov(int kind, int max);
void   vt_team_forget(void);

#endif
