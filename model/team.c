/*
 * team.c — the thread governor of team.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"

/* The process's measurements: a slot per (kind, team size), taken as sessions
 * of new sizes appear. Guarded by one mutex: sessions may run on several
 * threads at once, and a pass takes it twice, at its start and its end. */
enum { GOV_SLOTS = 16 };
static vt_gov g_gov[GOV_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Weight of the older measurements in a choice's sums at each new pass: the
 * cost follows the last few passes (a changing load), not the whole history. */
#define DECAY 0.5
#define PROBE_KEEP 0.25
/* A pass whose cost is this far (either way) from what its choice cost when
 * it was last chosen or confirmed is odd (team.h: VT_TEAM_ODD_*). */
#define ODD_FACTOR 1.5
/* A probe wins when it cost less than this fraction of the choice: two
 * choices within noise of each other do not swap at every probe. The team
 * must be clearly faster to take over from one thread; one thread takes over
 * when it is a little faster: the goal is never to be slower than one thread
 * (a team kept at 0.95 of one thread's speed is a loss that the probes,
 * noisy on a shared host, would not undo), and it leaves a core to others. */
#define TEAM_TAKES_OVER 0.9
#define ONE_TAKES_OVER 0.97

static vt_gov *gov_slot(int kind, int max) {
    vt_gov *free_slot = NULL;
    for (int i = 0; i < GOV_SLOTS; i++) {
        if (g_gov[i].max == max && g_gov[i].kind == kind) return &g_gov[i];
        if (!g_gov[i].max && !free_slot) free_slot = &g_gov[i];
    }
    if (!free_slot) return NULL;   /* 8 team sizes in one process: the rest are not governed */
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->max = max;
    free_slot->kind = kind;
    free_slot->choice = 1;     /* the team first, */
    free_slot->interval = 2;   /* and one thread right after its first measured pass */
    return free_slot;
}

void vt_team_init(vt_team *t, int max) {
    const char *g = getenv("VTLAB_TEAM_GOVERNOR");
    memset(t, 0, sizeof *t);
    t->max = max > 0 ? max : 1;
    const char *sp = getenv("VTLAB_STEP_POOL");
    t->off = t->max == 1 || (g && !strcmp(g, "0"));
    t->pool = !(sp && !strcmp(sp, "0"));
    if (t->off) return;
    pthread_mutex_lock(&g_lock);
    t->gov[VT_TEAM_DECODE] = gov_slot(VT_TEAM_DECODE, t->max);
    t->gov[VT_TEAM_PREFILL] = gov_slot(VT_TEAM_PREFILL, t->max);
    pthread_mutex_unlock(&g_lock);
}

int vt_team_begin(vt_team *t, int64_t T) {
    t->work = 0;
    t->kind = T == 1 ? VT_TEAM_DECODE : VT_TEAM_PREFILL;
    vt_gov *g = t->gov[t->kind];
    t->governed = !t->off && g;
    t->mode = 1;
    if (t->governed) {
        pthread_mutex_lock(&g_lock);
        t->mode = g->since + 1 >= g->interval ? !g->choice : g->choice;   /* the other runs when its probe is due */
        pthread_mutex_unlock(&g_lock);
    }
    if (t->kind == VT_TEAM_DECODE) t->steps++, t->single_steps += !t->mode;
    else t->passes++, t->single_passes += !t->mode;
    return t->mode ? t->max : 1;
}

void vt_team_add(vt_team *t, int64_t madds) {
    if (madds > 0) t->work += madds;
}

/* The interval after a probe: the first one of the kind when the choice
 * changed; when it confirmed the choice, GROWTH times wider, and from the
 * second confirmation in a row on, what keeps the probes at
 * VT_TEAM_PROBE_BUDGET of the time: a probe of a choice r times as costly
 * costs r - 1 passes, so (r - 1) / BUDGET passes apart (the tiny model's
 * team decode step, a thread descheduled, took ~10 one-thread steps: a probe
 * every 64 steps cost it 15%; a quiet host's 288M decode, one thread 1.6x the
 * team's cost: a probe every 30 steps). r: the probed cost over the choice's. */
static void after_probe(vt_gov *g, int changed, double r) {
    const int first = g->kind == VT_TEAM_DECODE ? VT_TEAM_FIRST_INTERVAL : VT_TEAM_PREFILL_FIRST;
    const int growth = g->kind == VT_TEAM_DECODE ? VT_TEAM_GROWTH : VT_TEAM_PREFILL_GROWTH;
    const int most = g->kind == VT_TEAM_DECODE ? VT_TEAM_MAX_INTERVAL : VT_TEAM_PREFILL_MAX;
    g->confirmed = changed ? 0 : g->confirmed + 1;
    double next = changed ? first : (double)g->interval * growth;
    if (g->confirmed >= 2) next = (r - 1) * 100.0 / VT_TEAM_PROBE_BUDGET;   /* not on one lucky pass of each */
    if (!(next >= first)) next = first;
    g->interval = next < most ? (int)next : most;
}

/* A pass of the chosen mode, its cost folded into the choice's sums: counts
 * towards the next probe, which comes at once after VT_TEAM_ODD_* odd passes
 * in a row. Odd: the choice's cost now (its decayed sums: one burst elsewhere
 * moves it for a pass or two, a new co-tenant for good) is 1.5x from ref_cost
 * in the direction in which the other might now win: a team that got slower
 * (a co-tenant came), one thread that got faster (one left). One thread
 * getting slower, or the team faster, only confirms the choice. */
static void chosen_pass(vt_gov *g) {
    const double ref = g->ref_cost, cost = g->sec[g->choice] / g->work[g->choice];
    g->since++;
    if (!(ref > 0)) g->ref_cost = cost;   /* the choice's first measured pass */
    const int odd = g->choice ? cost > ODD_FACTOR * ref : cost * ODD_FACTOR < ref;
    g->odd = ref > 0 && odd ? g->odd + 1 : 0;
    if (g->odd >= (g->kind == VT_TEAM_DECODE ? VT_TEAM_ODD_DECODE : VT_TEAM_ODD_PREFILL)) {
        g->odd_probes++;
        g->since = g->interval;   /* the next pass probes, */
        g->odd = 0;
        g->fresh = 1;             /* against this load only */
    }
}

/* After a probe of m (not the choice): a probe that wins is probed once more
 * at once (the two blended), and only two wins in a row change the choice:
 * under a build beside it, single team probes that fell between two compiler
 * runs took decode steps back to a team 2x slower, 4 steps at a time. */
static void probed(vt_gov *g, int m) {
    const double margin = m ? TEAM_TAKES_OVER : ONE_TAKES_OVER;
    const int wins = !(g->work[!m] > 0) || g->sec[m] / g->work[m] < margin * g->sec[!m] / g->work[!m];
    g->since = 0;
    g->odd = 0;
    g->fresh = 0;
    g->probes++;
    if (wins && !g->pending) {
        g->pending = 1;
        g->since = g->interval;   /* the next pass probes again */
        return;
    }
    g->pending = 0;
    if (wins) g->choice = m;
    g->changes += wins;
    g->ref_cost = g->sec[g->choice] / g->work[g->choice];
    after_probe(g, wins, g->sec[!g->choice] / g->work[!g->choice] / g->ref_cost);
}

void vt_team_end(vt_team *t, double seconds) {
    /* a pass without a product big enough to run in parallel: no news (and no probe counted) */
    if (!t->governed || t->work <= 0 || !(seconds > 0)) return;
    vt_gov *g = t->gov[t->kind];
    const int m = t->mode;
    pthread_mutex_lock(&g_lock);
    /* decayed sums: the cost is the ratio of the last passes' seconds to their
     * work. A probe keeps a quarter of the probes before it (a jittery team's
     * lucky probe after a stalled one does not win; one after a load has
     * gone, against a probe of that load, does); one called by a change of
     * load is its own pass alone: the probes before it measured another load. */
    const double keep = m == g->choice || g->pending ? DECAY : g->fresh ? 0.0 : PROBE_KEEP;
    g->sec[m] = keep * g->sec[m] + seconds;
    g->work[m] = keep * g->work[m] + (double)t->work;
    if (m != g->choice) probed(g, m);
    else chosen_pass(g);
    pthread_mutex_unlock(&g_lock);
}

vt_gov vt_team_gov(int kind, int max) {
    vt_gov out;
    memset(&out, 0, sizeof out);
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < GOV_SLOTS; i++)
        if (g_gov[i].max == max && g_gov[i].kind == kind) out = g_gov[i];
    pthread_mutex_unlock(&g_lock);
    return out;
}

/* Only between sessions: a session keeps pointers to its slots. */
void vt_team_forget(void) {
    pthread_mutex_lock(&g_lock);
    memset(g_gov, 0, sizeof g_gov);
    pthread_mutex_unlock(&g_lock);
}
