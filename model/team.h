/*
 * team.h — how many OpenMP threads a forward pass uses: the session's count,
 * or one thread while one thread has been measured to be faster (a busy
 * host). No result depends on it: every parallel piece of the forward pass
 * gives the same bits for any thread count (gemm.h).
 *
 * Why. A parallel region ends when its slowest thread arrives. When other
 * processes hold the cores, a team thread can be descheduled in the middle of
 * its tile and the others wait for it at the region's end; decode, with ~40
 * short regions per token, ran 4-9% slower on 2 threads than on 1 with one
 * core busy (issue 14, `build/bench --busy`), and far slower under heavier
 * load.
 *
 * How: measure both and use the faster. Every product big enough to run in
 * parallel reports its wall time and multiply-adds (vt_gemm_batch_timed), on
 * any thread count; a pass's rate is the sum of one over the sum of the other.
 * The governor keeps a running rate for each choice (the session's count,
 * one thread), runs the faster, and every `interval` passes runs the other
 * for one pass to refresh its rate. A probe that confirms the choice doubles
 * the interval (up to VT_TEAM_MAX_INTERVAL); a change of choice resets it.
 * Decode passes (one token) and prefill passes keep separate rates: their
 * products differ (GEMV against GEMM). A pass with no such product (the tiny
 * model) changes nothing. VTLAB_TEAM_GOVERNOR=0 in the environment keeps the
 * session's count always.
 */
#ifndef VT_TEAM_H
#define VT_TEAM_H

#include <stdint.h>

enum { VT_TEAM_FIRST_INTERVAL = 16, VT_TEAM_MAX_INTERVAL = 64 };

typedef struct vt_team_kind {
    double rate[2];      /* multiply-adds per second: [0] one thread, [1] the full team; 0 = not yet measured */
    int    choice;       /* 0 or 1: which one runs */
    int    since;        /* passes since the last probe */
    int    interval;     /* passes between probes */
} vt_team_kind;

typedef struct vt_team {
    int          max;        /* the session's thread count */
    int          off;        /* VTLAB_TEAM_GOVERNOR=0, or max == 1 */
    int          kind;       /* the pass in flight: 0 decode, 1 prefill */
    int          mode;       /* ... and what it runs: 0 one thread, 1 the team */
    double       wall, work; /* ... and its measured products */
    vt_team_kind k[2];
    long         passes, single_passes;   /* for the bench */
} vt_team;

void vt_team_init(vt_team *t, int max);
/* The thread count for a pass of T tokens; clears the pass's sums. */
int vt_team_begin(vt_team *t, int64_t T);
/* One product of the pass: its wall time (s) and multiply-adds. */
void vt_team_add(vt_team *t, double wall, double work);
/* The pass is over: update the rates, choose the next pass's count. */
void vt_team_end(vt_team *t);

#endif
