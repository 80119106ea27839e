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
    t->off = t->max == 1 || (g && !strcmp(g, "0"));
    for (int i = 0; i < 2; i++) t->k[i].choice = 1, t->k[i].interval = VT_TEAM_FIRST_INTERVAL;
}

int vt_team_begin(vt_team *t, int64_t T) {
    t->wall = t->work = 0;
    t->kind = T > 1;
    t->passes++;
    if (t->off) return t->max;
    vt_team_kind *k = &t->k[t->kind];
    /* the other choice runs when its probe is due */
    t->mode = k->since + 1 >= k->interval ? !k->choice : k->choice;
    if (!t->mode) t->single_passes++;
    return t->mode ? t->max : 1;
}

void vt_team_add(vt_team *t, double wall, double work) {
    if (wall > 0 && work > 0) t->wall += wall, t->work += work;
}

void vt_team_end(vt_team *t) {
    if (t->off || t->wall <= 0) return;   /* nothing measured: no news (and no probe counted) */
    vt_team_kind *k = &t->k[t->kind];
    const double r = t->work / t->wall;
    k->rate[t->mode] = k->rate[t->mode] > 0 ? 0.5 * (k->rate[t->mode] + r) : r;
    if (t->mode == k->choice) { k->since++; return; }
    k->since = 0;   /* a probe */
    if (k->rate[t->mode] > k->rate[k->choice]) {
        k->choice = t->mode;
        k->interval = VT_TEAM_FIRST_INTERVAL;
    } else {
        k->interval = k->interval * 2 < VT_TEAM_MAX_INTERVAL ? k->interval * 2 : VT_TEAM_MAX_INTERVAL;
    }
}
