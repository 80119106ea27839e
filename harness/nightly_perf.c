/*
 * nightly_perf.c — the throughput judgement of a nightly: what is a drop and
 * what is noise. The baseline (the median of the last good nightlies), the
 * noise (the spread of repeats within a night, the night-to-night spread, or
 * an assumed prior while too few nights are recorded) and the threshold a
 * drop must pass. Apart from the comparison (nightly_compare.c, which turns
 * the judgement into a finding) because the sweep (nightly.c) asks the same
 * question before the comparison runs, to re-measure a suspected drop at
 * once: both ask it here, so the two cannot disagree. Reads its rows through
 * store_nightly.h; says nothing and writes nothing.
 */
#include "nightly_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Runs as the judgement needs them (store_nightly.h). */
typedef lab_nightly_run nrun;
typedef lab_nightly_runs nset;

/* log(tokens/s) of a run (per host GFLOP/s when norm), and whether it has one. */
static double perf_log(const nrun *r, int norm) { return norm ? log(r->tps) - log(r->host) : log(r->tps); }
static int perf_ok(const nrun *r, int norm) {
    return !strcmp(r->status, "FINISHED") && r->tps > 0 && (!norm || r->host > 0);
}

/* Pooled within-night SD of log(tokens/s) over the (nightly, arm) groups of
 * an experiment with two or more repeats; NaN when there is no such group. */
static double within_sd(const nset *a, const nset *b, int norm) {
    double ss = 0;
    int64_t dof = 0;
    const nset *sets[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const nset *s = sets[k];
        for (int i = 0; i < s->n;) {
            int j = i;
            double sum = 0;
            int m = 0;
            while (j < s->n && !strcmp(s->r[j].arm, s->r[i].arm)) {
                if (perf_ok(&s->r[j], norm)) { sum += perf_log(&s->r[j], norm); m++; }
                j++;
            }
            if (m >= 2) {
                double mean = sum / m;
                for (int t = i; t < j; t++)
                    if (perf_ok(&s->r[t], norm))
                        ss += (perf_log(&s->r[t], norm) - mean) * (perf_log(&s->r[t], norm) - mean);
                dof += m - 1;
            }
            i = j;
        }
    }
    return dof ? sqrt(ss / (double)dof) : NAN;
}

/* Per-night mean of log(tokens/s) of one arm over the latest good nightlies
 * (PASSED or REGRESSED) before cur, newest first: v[*n], *n <= max. Only the
 * first measurement of a night counts (the re-measurements of a suspected
 * drop are in nightly_remeasure_runs). */
static int night_means(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm, double *v, int max,
                       int *n, char *err, size_t errlen) {
    int64_t n64 = 0;
    int rc = lab_store_nightly_night_means(st, cur, eid, arm, norm, v, max, &n64, err, errlen);
    *n = (int)n64;
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* SD over the nightlies before cur (at most 8) of the nightly mean of
 * log(tokens/s) of one arm: the night-to-night noise. *sd NaN below 3 nights. */
/* The night-to-night noise model (see lab_nightly_perf_evaluate below). */
#define NIGHT_SD_PRIOR 0.2
#define NIGHT_SD_MIN_NIGHTS 5

static int between_sd(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm, double *sd, char *err,
                      size_t errlen) {
    double v[8];
    int n = 0, rc = night_means(st, cur, eid, arm, norm, v, 8, &n, err, errlen);
    *sd = NAN;
    if (rc || n < NIGHT_SD_MIN_NIGHTS) return rc;   /* a MAD of fewer nights is itself noise */
    /* Robust: 1.4826 x the median absolute deviation, so that one regressed
     * night in the window does not inflate the noise (and hide the nights
     * after it, which stay flagged as persistent until acknowledged). */
    double med, dev[8];
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    for (int i = 0; i < n; i++) dev[i] = fabs(v[i] - med);
    qsort(dev, (size_t)n, sizeof dev[0], cmp_double);
    *sd = 1.4826 * (n % 2 ? dev[n / 2] : 0.5 * (dev[n / 2 - 1] + dev[n / 2]));
    return LAB_OK;
}

/* Mean of log(tokens/s) over the FINISHED runs of arm in s; *n runs, *first
 * the first run's id. NaN when there is none. */
double lab_nightly_perf_arm_mean(const nset *s, const char *arm, int norm, int *n, int64_t *first) {
    double sum = 0;
    *n = 0;
    if (first) *first = 0;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->r[i].arm, arm) && perf_ok(&s->r[i], norm)) {
            sum += perf_log(&s->r[i], norm);
            if (first && !*first) *first = s->r[i].id;
            (*n)++;
        }
    return *n ? sum / *n : NAN;
}

/* The throughput judgement of one arm of a nightly (all in log tokens/s).
 * The baseline is the median of the per-night means of the last <= 5 good
 * nightlies (one lucky night does not make the next one look slow); the
 * noise is the larger of the pooled spread of repeats within tonight and the
 * previous night, and the night-to-night spread (>= NIGHT_SD_MIN_NIGHTS); a drop is
 * suspected when it exceeds max(--perf-min-drop, perf_sigmas standard
 * errors). With fewer than NIGHT_SD_MIN_NIGHTS earlier nights the
 * night-to-night spread is taken to be NIGHT_SD_PRIOR (0.2 in log tokens/s):
 * no-change nights of the tiny CI experiment at load 8-10 on 2 cores moved by
 * x0.53-x2.2 from one night to the next, and a MAD of 3 nights said 14%.
 * pe->have = 1 when there is something to compare (a finished run with
 * throughput in both nights), 0 when not. */
int lab_nightly_perf_evaluate(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs,
                              const nset *ps, const lab_nightly_opts *o, lab_nightly_perf *pe, char *err, size_t errlen) {
    memset(pe, 0, sizeof *pe);
    /* Judged on raw tokens/s. The host speed measured around the sweep
     * (host_sgemm_gflops) is recorded, but dividing by it made the spread
     * worse on the tiny CI model under load (its time is not in sgemm), so
     * the per-host-speed path (norm = 1) is off until a model where it
     * helps is measured (docs/nightly.md). */
    pe->norm = 0;
    pe->cur = lab_nightly_perf_arm_mean(cs, arm, pe->norm, &pe->nc, &pe->cid);
    double prev = lab_nightly_perf_arm_mean(ps, arm, pe->norm, &pe->np, &pe->pid);
    if (!pe->nc || !pe->np) return LAB_OK;
    double v[5];
    int rc = night_means(st, nightly, eid, arm, pe->norm, v, 5, &pe->nb, err, errlen);
    if (rc) return rc;
    if (pe->nb) {
        qsort(v, (size_t)pe->nb, sizeof v[0], cmp_double);
        pe->base = pe->nb % 2 ? v[pe->nb / 2] : 0.5 * (v[pe->nb / 2 - 1] + v[pe->nb / 2]);
    } else {
        pe->base = prev;
        pe->nb = 1;
    }
    pe->d = pe->cur - pe->base;
    pe->sw = within_sd(cs, ps, pe->norm);
    if ((rc = between_sd(st, nightly, eid, arm, pe->norm, &pe->sb, err, errlen))) return rc;
    pe->se = NAN;
    if (!isnan(pe->sw)) pe->se = pe->sw * sqrt(1.0 / pe->nc + 1.0 / pe->np);
    if (!isnan(pe->sb) && (isnan(pe->se) || pe->sb * sqrt(2.0) > pe->se)) pe->se = pe->sb * sqrt(2.0);
    /* Too few earlier nights: the night-to-night spread is not known,
     * and the spread of repeats within one night underestimates it on a
     * shared host (load that lasts the whole night moves every repeat and
     * the re-measurement alike: x0.56 confirmed at load 8 on 2 cores with no
     * change). Until it is measured, a spread of NIGHT_SD_PRIOR is assumed. */
    if (isnan(pe->sb) && !isnan(pe->se) && pe->se < NIGHT_SD_PRIOR * sqrt(2.0)) {
        pe->se = NIGHT_SD_PRIOR * sqrt(2.0);
        pe->prior = 1;
    }
    pe->thr = NAN;
    if (!isnan(pe->se)) {
        pe->thr = o->perf_sigmas * pe->se;
        double floor_log = -log(1.0 - o->perf_min_drop);
        if (pe->thr < floor_log) pe->thr = floor_log;
    }
    pe->have = 1;
    return LAB_OK;
}

/* 1 when tonight's throughput of the arm is a suspected drop (to re-measure). */
int lab_nightly_perf_suspect(const lab_nightly_perf *pe) { return pe->have && !isnan(pe->thr) && pe->d < -pe->thr; }
