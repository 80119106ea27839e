/*
 * team.h — how many OpenMP threads a decode step uses: the session's count,
 * or one thread while one thread has been measured to be faster (a busy
 * host). No result depends on it: every parallel piece of the forward pass
 * gives the same bits for any thread count (gemm.h).
 *
 * Why. A parallel region ends when its slowest thread arrives. When another
 * process holds a core, a team thread can be descheduled in the middle of its
 * tile and the others wait for it at the region's end. A decode step is ~40
 * short regions (one per product), and with one core busy it ran 4-9% slower
 * on 2 threads than on 1 (issue 14, `build/bench --busy`); a prefill's
 * regions are long and lost nothing (t2/t1 1.00-1.02), so prefills always
 * run on the session's count.
 *
 * How: measure both and use the faster. The governor times each decode step
 * (the steps of a session are the same work, up to attention's slowly
 * growing context), keeps a running mean step time for each choice (the session's
 * count, one thread), runs the faster, and after `interval` steps runs the
 * other for one step to refresh its time. The whole step is timed, not only
 * its products: with one core busy the team's products alone still looked
 * faster while its steps were slower (the small regions between them). A
 * probe that confirms the choice widens the interval (below); a change of
 * choice resets it. A step with no product big enough to run in parallel
 * on the step's team (vt_gemm_batch's return, VT_STEP_MIN_WORK) is not
 * judged: it has nothing to run in parallel. VTLAB_TEAM_GOVERNOR=0 in the environment keeps the
 * session's count always.
 */
#ifndef VT_TEAM_H
#define VT_TEAM_H

#include <stdint.h>

/* The first probe comes after VT_TEAM_FIRST_INTERVAL steps (a busy host is
 * found within a few tokens); each probe that confirms the choice multiplies
 * the interval by VT_TEAM_GROWTH up to VT_TEAM_MAX_INTERVAL (on a quiet host:
 * probes at steps 4, 20, 84, 148, ..., 1/64 of the steps in the long run). */
enum { VT_TEAM_FIRST_INTERVAL = 4, VT_TEAM_GROWTH = 4, VT_TEAM_MAX_INTERVAL = 64 };

typedef struct vt_team {
    int    max;        /* the session's thread count */
    int    off;        /* VTLAB_TEAM_GOVERNOR=0, or max == 1 */
    int    pool;       /* a decode step on the team runs as one vt_gemm_step (VTLAB_STEP_POOL=0: not) */
    int    governed;   /* the pass in flight is a decode step */
    int    mode;       /* ... and what it runs: 0 one thread, 1 the team */
    int64_t work;      /* ... and the multiply-adds of its products big enough to run in parallel */
    double sec[2];     /* a step's mean seconds: [0] one thread, [1] the team; 0 = not yet measured */
    int    choice;     /* 0 or 1: which one runs */
    int    since;      /* steps since the last probe */
    int    interval;   /* steps between probes */
    long   steps, single_steps;   /* for the bench: decode steps, and how many ran on one thread */
} vt_team;

void vt_team_init(vt_team *t, int max);
/* The thread count for a pass of T tokens (governed when T == 1); clears the pass's sums. */
int vt_team_begin(vt_team *t, int64_t T);
/* One product of the pass big enough to run in parallel (vt_gemm_batch's
 * return): its multiply-adds. A step without one is not judged. */
void vt_team_add(vt_team *t, int64_t madds);
/* The pass is over after `seconds` (its wall time): update the mean times, choose
 * the next step's count. */
void vt_team_end(vt_team *t, double seconds);

#endif
