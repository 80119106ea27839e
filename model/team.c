/*
 * team.c — the thread governor of team.h.
 */
#include <stdlib.h>
#include <string.h>

#include "team.h"

void vt_team_init(vt_team *t, int max) {
    const char *g = getenv("VTLAB_TEAM_GOVERNOR");
    memset(t, 0, sizeof *t);
    t->max = max > 0 ? max : 1;
    const char *sp = getenv("VTLAB_STEP_POOL");
    t->off = t->max == 1 || (g && !strcmp(g, "0"));
    t->pool = !(sp && !strcmp(sp, "0"));
    t->choice = 1;
    t->interval = VT_TEAM_FIRST_INTERVAL;
}

int vt_team_begin(vt_team *t, int64_t T) {
    t->work = 0;
    t->governed = T == 1 && !t->off;
    if (!t->governed) return t->max;
    t->steps++;
    /* the other choice runs when its probe is due */
    t->mode = t->since + 1 >= t->interval ? !t->choice : t->choice;
    if (!t->mode) t->single_steps++;
    return t->mode ? t->max : 1;
}

void vt_team_add(vt_team *t, int64_t madds) {
    if (madds > 0) t->work += madds;
}

void vt_team_end(vt_team *t, double seconds) {
    /* a step without a product big enough to run in parallel: no news (and no probe counted) */
    if (!t->governed || t->work <= 0 || seconds <= 0) return;
    /* a running mean of the step's seconds, not of its rate: a team whose
     * steps are mostly fast and now and then stalled (a thread descheduled)
     * is as slow as its mean time says, where a mean of rates counts the
     * fast steps and hides the stalls (test_team, test_jittery_team_is_slower) */
    t->sec[t->mode] = t->sec[t->mode] > 0 ? 0.5 * (t->sec[t->mode] + seconds) : seconds;
    if (t->mode == t->choice) { t->since++; return; }
    t->since = 0;   /* a probe */
    if (t->sec[t->mode] < t->sec[t->choice]) {
        t->choice = t->mode;
        t->interval = VT_TEAM_FIRST_INTERVAL;
    } else {
        t->interval = t->interval * VT_TEAM_GROWTH < VT_TEAM_MAX_INTERVAL ? t->interval * VT_TEAM_GROWTH
                                                                          : VT_TEAM_MAX_INTERVAL;
    }
}
