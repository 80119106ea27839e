/*
 * nightly.c — `vtlab nightly` (see nightly.h for what counts as a
 * regression, and docs/nightly.md for how CI runs it).
 *
 * The order of work, chosen so that a crash at any point leaves something a
 * person can read: parse every experiment file (bad input: exit 2, nothing
 * written); record the nightly as RUNNING; run the sweep through the same
 * runner as `vtlab sweep`, with --force; list the runs this process made;
 * run the audit; compare; store the findings and the nightly's status in one
 * transaction; then write the report, JUnit XML, markdown and Atom files.
 * A nightly whose process died stays RUNNING (or is marked FAILED by the
 * next nightly on the same host) and is never used as a baseline.
 *
 * This file decides (what is a regression, what is noise, what the outputs
 * say); the rows it reads and writes go through store_nightly.h, which owns
 * their SQL.
 */
#include "nightly.h"

#include "bisect.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "audit.h"
#include "ledger.h"
#include "cli.h"
#include "experiment.h"
#include "metrics.h"
#include "nightly_confounds.h"
#include "model/vt.h"
#include "plot.h"
#include "report.h"
#include "runner.h"
#include "store_nightly.h"
#include "store_merge.h"
#include "store_report.h"
#include "util.h"

void lab_nightly_defaults(lab_nightly_opts *o) {
    memset(o, 0, sizeof *o);
    o->db_path = LAB_DEFAULT_DB;
    o->exp_dir = LAB_DEFAULT_EXPERIMENTS;
    o->out_dir = LAB_DEFAULT_REPORT;
    o->specs_dir = LAB_DEFAULT_SPECS;
    o->alpha = 0.05;
    o->perf_min_drop = 0.05;
    o->perf_sigmas = 3.0;
    o->audit = 1;
    o->plots = 1;
}

/* ------------------------------------------------------------ the comparison */

/* Runs as the comparison needs them (store_nightly.h). */
typedef lab_nightly_run nrun;
typedef lab_nightly_runs nset;

static void nset_free(nset *s) { lab_nightly_runs_free(s); }

/* The night's runs of an experiment (nightly_runs), by arm then repeat. */
static int load_runs(lab_store *st, int64_t nightly, const char *eid, nset *out, char *err, size_t errlen) {
    return lab_store_nightly_runs(st, nightly, eid, 0, out, err, errlen);
}

/* First FINISHED run of arm with repeat rep (or NULL). */
static const nrun *find_run(const nset *s, const char *arm, int64_t rep) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->r[i].arm, arm) && s->r[i].rep == rep && !strcmp(s->r[i].status, "FINISHED")) return &s->r[i];
    return NULL;
}

typedef struct finding {
    const char *experiment, *arm, *kind;
    int         regression;
    int64_t     run_id, prev_run_id;   /* 0: none */
    double      value, prev_value, p;  /* NaN: none */
    char        message[1024];
    char        evidence[1024];
} finding;

static void finding_init(finding *f, const char *eid, const char *arm, const char *kind, int regression) {
    memset(f, 0, sizeof *f);
    f->experiment = eid;
    f->arm = arm;
    f->kind = kind;
    f->regression = regression;
    f->value = f->prev_value = f->p = NAN;
    snprintf(f->evidence, sizeof f->evidence, "{}");
}

static int find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, lab_nightly_ack *a, char *err,
                    size_t errlen);
static void evidence_add(char *ev, size_t len, const char *fmt, ...);

/* Prefixes f's message with what (at most 200 + 700 bytes of each kept, as
 * "PREFIX; MESSAGE" or "PREFIX: MESSAGE"). */
static void message_prefix(finding *f, const char *prefix) {
    char m[sizeof f->message];
    snprintf(m, sizeof m, "%s%.900s", prefix, f->message);
    snprintf(f->message, sizeof f->message, "%s", m);
}

/* Turns f into an acknowledged note. */
static void mark_acknowledged(finding *f, const lab_nightly_ack *a) {
    char m[sizeof f->message];
    f->regression = 0;
    evidence_add(f->evidence, sizeof f->evidence, "\"acknowledged\":1");
    snprintf(m, sizeof m, "acknowledged (nightly %lld: %.200s); %.700s", (long long)a->nightly, a->reason, f->message);
    snprintf(f->message, sizeof f->message, "%s", m);
}

/* A regression that is already known: persistent when the previous nightly
 * of the experiment had the same experiment/arm/kind as a regression (or an
 * acknowledged one): the message says since when, and the evidence carries
 * "persistent_since" (the Atom feed announces only new ones); acknowledged
 * (`vtlab ack`) it becomes a note. Performance findings check their
 * acknowledgement themselves (it holds only down to the acknowledged level). */
static int annotate_known(lab_store *st, int64_t nightly, finding *f, char *err, size_t errlen) {
    int64_t prev = 0, since = 0;
    int rc = f->experiment[0] ? lab_store_nightly_previous(st, nightly, f->experiment, &prev, err, errlen) : LAB_OK;
    if (!rc && prev) rc = lab_store_nightly_persistent_since(st, prev, f->experiment, f->arm, f->kind, &since, err, errlen);
    if (rc) return rc;
    if (since) {
        char p[64];
        evidence_add(f->evidence, sizeof f->evidence, "\"persistent_since\":%lld", (long long)since);
        snprintf(p, sizeof p, "persistent since nightly %lld (not new): ", (long long)since);
        message_prefix(f, p);
    }
    lab_nightly_ack a;
    if (!strcmp(f->kind, "performance")) return LAB_OK;
    if ((rc = find_ack(st, f->experiment, f->arm, f->kind, &a, err, errlen))) return rc;
    if (a.found) mark_acknowledged(f, &a);
    return LAB_OK;
}

static int put_finding(lab_store *st, int64_t nightly, const finding *f0, int64_t *n_reg, char *err, size_t errlen) {
    finding fk = *f0, *f = &fk;
    int rc = f->regression ? annotate_known(st, nightly, f, err, errlen) : LAB_OK;
    if (rc) return rc;
    lab_nightly_finding row = {f->experiment, f->arm, f->kind, f->regression, f->run_id, f->prev_run_id,
                               f->value, f->prev_value, f->p, f->message, f->evidence};
    rc = lab_store_nightly_put_finding(st, nightly, &row, err, errlen);
    if (!rc && f->regression) (*n_reg)++;
    return rc;
}

/* Agreement of a run's top-1 with its reference's, per scored position. */
static int agreement(lab_store *st, const nrun *r, uint8_t **agree, int64_t *n, char *err, size_t errlen) {
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    int rc = lab_store_top1(st, r->id, &a, &na, err, errlen);
    if (!rc) rc = lab_store_top1(st, r->ref_run, &b, &nb, err, errlen);
    if (!rc && na != nb) rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: %lld positions, its reference %lld",
                                       (long long)r->id, (long long)na, (long long)nb);
    if (!rc && !(*agree = malloc((size_t)(na ? na : 1)))) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (!rc) {
        for (int64_t i = 0; i < na; i++) (*agree)[i] = a[i] == b[i];
        *n = na;
    }
    free(a);
    free(b);
    return rc;
}

static int compare_accuracy(lab_store *st, int64_t nightly, const char *eid, const nrun *c, const nrun *p,
                            const lab_nightly_opts *o, int64_t *n_reg, char *err, size_t errlen) {
    if (!c->has_cmp || !p->has_cmp || c->n <= 0 || p->n <= 0) return LAB_OK;
    finding f;
    finding_init(&f, eid, c->arm, "accuracy", 0);
    f.run_id = c->id;
    f.prev_run_id = p->id;
    f.value = (double)c->k / (double)c->n;
    f.prev_value = (double)p->k / (double)p->n;
    int same_positions = !strcmp(c->dataset, p->dataset) && c->n == p->n;
    int64_t b = 0, cc = 0;
    if (same_positions) {
        uint8_t *ac = NULL, *ap = NULL;
        int64_t nc = 0, np = 0;
        int rc = agreement(st, c, &ac, &nc, err, errlen);
        if (!rc) rc = agreement(st, p, &ap, &np, err, errlen);
        if (!rc && nc != np) same_positions = 0;
        for (int64_t i = 0; !rc && same_positions && i < nc; i++) {
            b += ap[i] && !ac[i];
            cc += !ap[i] && ac[i];
        }
        free(ac);
        free(ap);
        if (rc) return rc;
    }
    if (same_positions) {
        f.p = lab_mcnemar_exact(b, cc);
        f.regression = b > cc && f.p < o->alpha;
        snprintf(f.evidence, sizeof f.evidence,
                 "{\"test\":\"mcnemar_exact\",\"lost\":%lld,\"gained\":%lld,\"p\":%.6g,\"alpha\":%.3g,\"k\":%lld,\"n\":%lld,"
                 "\"prev_k\":%lld,\"prev_n\":%lld}",
                 (long long)b, (long long)cc, f.p, o->alpha, (long long)c->k, (long long)c->n, (long long)p->k,
                 (long long)p->n);
        if (!b && !cc && c->k == p->k) return LAB_OK;   /* the same positions agree: nothing to say */
        snprintf(f.message, sizeof f.message,
                 "top-1 agreement with the reference %lld/%lld [%.3f, %.3f] -> %lld/%lld [%.3f, %.3f]; paired on the "
                 "same %lld positions: %lld lost, %lld gained, exact McNemar p = %.3g (%s alpha %.3g)",
                 (long long)p->k, (long long)p->n, p->lo, p->hi, (long long)c->k, (long long)c->n, c->lo, c->hi,
                 (long long)c->n, (long long)b, (long long)cc, f.p,
                 f.regression ? "a significant drop at" : b > cc ? "not significant at" : "no drop;", o->alpha);
    } else {
        f.regression = c->hi < p->lo;
        snprintf(f.evidence, sizeof f.evidence,
                 "{\"test\":\"wilson_overlap\",\"lo\":%.6g,\"hi\":%.6g,\"prev_lo\":%.6g,\"prev_hi\":%.6g}", c->lo, c->hi,
                 p->lo, p->hi);
        if (c->k * p->n == p->k * c->n) return LAB_OK;
        snprintf(f.message, sizeof f.message,
                 "top-1 agreement %lld/%lld [%.3f, %.3f] -> %lld/%lld [%.3f, %.3f] on a different dataset; Wilson 95%% "
                 "intervals %s", (long long)p->k, (long long)p->n, p->lo, p->hi, (long long)c->k, (long long)c->n, c->lo,
                 c->hi, f.regression ? "no longer overlap: a significant drop" : "overlap: within noise");
    }
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

static int compare_numerics(lab_store *st, int64_t nightly, const char *eid, const nrun *c, const nrun *p, int64_t *n_reg,
                            char *err, size_t errlen) {
    int deterministic = !strcmp(c->backend, "cpu") && !strcmp(p->backend, "cpu") && !strcmp(c->model, p->model) &&
                        !strcmp(c->dataset, p->dataset);
    if (!deterministic || !c->logits[0] || !p->logits[0]) return LAB_OK;
    finding f;
    finding_init(&f, eid, c->arm, "numerics", 0);
    f.run_id = c->id;
    f.prev_run_id = p->id;
    if (strcmp(c->knob_hash, p->knob_hash)) {
        if (!strcmp(c->logits, p->logits)) return LAB_OK;
        snprintf(f.message, sizeof f.message,
                 "the arm's resolved knobs changed (knob hash %.12s -> %.12s), so its logits changed as well; not compared",
                 p->knob_hash, c->knob_hash);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    if (!strcmp(c->logits, p->logits)) return LAB_OK;
    /* A run of schema v8 or later has a composed logits hash (sha256 of its
     * per-sequence hashes, docs/slurm.md); one before has the older stream
     * hash. Across the change hashes cannot agree: the stored top-k decides. */
    int cc = 0, pc = 0, same = 0, rc0 = lab_store_logits_composed(st, c->id, &cc, err, errlen);
    if (!rc0) rc0 = lab_store_logits_composed(st, p->id, &pc, err, errlen);
    if (rc0) return rc0;
    if (cc != pc) {
        if ((rc0 = lab_store_topk_same(st, p->id, c->id, &same, err, errlen))) return rc0;
        if (same) {
            snprintf(f.message, sizeof f.message,
                     "logits hash definition changed (the previous run's is the single-stream hash, this one's is "
                     "composed from per-sequence hashes); the stored top-k ids and log-probs are bit-identical at "
                     "every position: unchanged");
            return put_finding(st, nightly, &f, n_reg, err, errlen);
        }
    }
    double *kl = NULL;
    int64_t n = 0;
    int exact = 0;
    char kerr[512] = "";
    double mean = NAN, mx = NAN;
    if (lab_position_kl(st, p->id, c->id, &kl, &n, &exact, kerr, sizeof kerr) == 0 && n > 0) {
        mean = 0;
        mx = 0;
        for (int64_t i = 0; i < n; i++) {
            mean += kl[i];
            if (kl[i] > mx) mx = kl[i];
        }
        mean /= (double)n;
    }
    free(kl);
    f.regression = 1;
    f.value = mean;
    snprintf(f.evidence, sizeof f.evidence,
             "{\"logits_sha256\":\"%s\",\"prev_logits_sha256\":\"%s\",\"kl_mean\":%.6g,\"kl_max\":%.6g,\"kl_exact\":%d,"
             "\"positions\":%lld}", c->logits, p->logits, isnan(mean) ? -1.0 : mean, isnan(mx) ? -1.0 : mx, exact,
             (long long)n);
    if (isnan(mean))
        snprintf(f.message, sizeof f.message,
                 "logits changed on a deterministic arm (cpu, same model, dataset and knobs): hash %.12s -> %.12s; KL not "
                 "measurable: %s", p->logits, c->logits, kerr);
    else
        snprintf(f.message, sizeof f.message,
                 "logits changed on a deterministic arm (cpu, same model, dataset and knobs): hash %.12s -> %.12s; "
                 "KL(previous || current) per position mean %.3g, max %.3g nats over %lld positions (%s); code %s -> %s",
                 p->logits, c->logits, mean, mx, (long long)n, exact ? "exact, f16 full logits" : "top-k estimate",
                 p->code_version, c->code_version);
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

/* Pooled within-night SD of log(tokens/s) over the (nightly, arm) groups of
 * an experiment with two or more repeats; NaN when there is no such group. */
static double perf_log(const nrun *r, int norm) { return norm ? log(r->tps) - log(r->host) : log(r->tps); }
static int perf_ok(const nrun *r, int norm) {
    return !strcmp(r->status, "FINISHED") && r->tps > 0 && (!norm || r->host > 0);
}

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
/* The night-to-night noise model (see perf_eval below). */
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
static double arm_log_mean(const nset *s, const char *arm, int norm, int *n, int64_t *first) {
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
 * x0.53-x2.2 from one night to the next, and a MAD of 3 nights said 14%. */
typedef struct perf_eval {
    int     nc, np, nb;      /* repeats tonight, in the previous nightly; nights in the baseline */
    int64_t cid, pid;        /* a run of tonight's and of the previous nightly's */
    double  cur, base;       /* tonight's mean, the baseline */
    double  d;               /* cur - base: the log of the ratio */
    double  sw, sb, se;      /* within-night SD, night-to-night SD, standard error of d (NaN: none) */
    double  thr;             /* a drop beyond -thr is suspected (NaN when se is) */
    int     norm;            /* 1: judged on tokens/s per host GFLOP/s (both nights have it) */
    int     prior;           /* 1: se is the assumed NIGHT_SD_PRIOR (too few earlier nights) */
    int     have;            /* 1: a finished run with throughput in both nights (the rest is set) */
} perf_eval;

/* pe->have = 1 when there is something to compare (a finished run with
 * throughput in both nights), 0 when not. */
static int perf_evaluate(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs, const nset *ps,
                         const lab_nightly_opts *o, perf_eval *pe, char *err, size_t errlen) {
    memset(pe, 0, sizeof *pe);
    /* Judged on raw tokens/s. The host speed measured around the sweep
     * (host_sgemm_gflops) is recorded, but dividing by it made the spread
     * worse on the tiny CI model under load (its time is not in sgemm), so
     * the per-host-speed path (norm = 1) is off until a model where it
     * helps is measured (docs/nightly.md). */
    pe->norm = 0;
    pe->cur = arm_log_mean(cs, arm, pe->norm, &pe->nc, &pe->cid);
    double prev = arm_log_mean(ps, arm, pe->norm, &pe->np, &pe->pid);
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
static int perf_suspect(const perf_eval *pe) { return pe->have && !isnan(pe->thr) && pe->d < -pe->thr; }

/* ------------------------------------------------------------ acknowledgements */

/* The active acknowledgement of experiment/arm/kind, if any (a->found). */
static int find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, lab_nightly_ack *a, char *err,
                    size_t errlen) {
    return lab_store_nightly_find_ack(st, eid, arm, kind, a, err, errlen);
}

/* Appends ,"key":value to a JSON object held in evidence (replacing its '}'). */
static void evidence_add(char *ev, size_t len, const char *fmt, ...) {
    size_t n = strlen(ev);
    if (!n || ev[n - 1] != '}') return;
    ev[--n] = 0;
    if (n > 1) ev[n++] = ',', ev[n] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev + n, len - n, fmt, ap);
    va_end(ap);
    n = strlen(ev);
    if (n + 1 < len) { ev[n] = '}'; ev[n + 1] = 0; }
    else snprintf(ev, len, "{}");
}


/* An acknowledged throughput drop stays silent while tonight is not
 * significantly below the level that was acknowledged. Passing that level
 * is a new drop, and like any drop it must be confirmed: when the arm was
 * re-measured (rs), the re-measurement must be below the level too (one
 * slow stretch of a shared host moves a night, rarely both). */
static int perf_acknowledged(lab_store *st, const perf_eval *pe, const nset *rs, finding *f, char *err, size_t errlen) {
    lab_nightly_ack a;
    if (!f->regression) return LAB_OK;
    int rc = find_ack(st, f->experiment, f->arm, "performance", &a, err, errlen);
    if (rc) return rc;
    if (!a.found) return LAB_OK;
    int nr = 0;
    double rlog = rs ? arm_log_mean(rs, f->arm, pe->norm, &nr, NULL) : NAN;
    int below = !isnan(a.value) && a.value > 0 && log(f->value / a.value) < -pe->thr;
#ifdef VT_MUTATE_ACK_UNCONFIRMED
    nr = 0;   /* mutation: the re-measurement ignored */
#endif
    if (below && nr && rlog - log(a.value) >= -pe->thr) below = 0;
    if (!below) mark_acknowledged(f, &a);
    else evidence_add(f->evidence, sizeof f->evidence, "\"ack_exceeded\":1");
    return LAB_OK;
}

/* The message and evidence of a throughput finding that was judged (pe->thr
 * known); rs: the re-measurements. Returns 0 when it is within noise and
 * there is nothing to say. */
static int perf_judged(const perf_eval *pe, const nset *rs, finding *f) {
    double ratio = exp(pe->d);
    const char *unit = pe->norm ? "tokens/s per host sgemm GFLOP/s" : "tokens/s";
    /* The re-measurement of a suspected drop (runs of the arm made after the
     * comparison first saw it): a drop is flagged only if it is confirmed. */
    int nr = 0;
    double rlog = rs ? arm_log_mean(rs, f->arm, pe->norm, &nr, NULL) : NAN;
    int suspect = perf_suspect(pe), confirmed = suspect && (!nr || rlog - pe->base < -pe->thr);
    f->regression = confirmed;
    snprintf(f->evidence, sizeof f->evidence,
             "{\"ratio\":%.6g,\"threshold_ratio\":%.6g,\"se_log\":%.6g,\"within_sd_log\":%.6g,\"between_sd_log\":%.6g,"
             "\"n\":%d,\"prev_n\":%d,\"baseline_nights\":%d,\"per_host_speed\":%d}", ratio, exp(-pe->thr), pe->se,
             isnan(pe->sw) ? -1.0 : pe->sw, isnan(pe->sb) ? -1.0 : pe->sb, pe->nc, pe->np, pe->nb, pe->norm);
    if (nr) evidence_add(f->evidence, sizeof f->evidence, "\"remeasured_ratio\":%.6g,\"remeasured_n\":%d",
                         exp(rlog - pe->base), nr);
    if (!suspect && fabs(pe->d) < pe->thr) return 0;    /* within noise: nothing to say */
    const char *noise = pe->prior ? "night-to-night spread assumed until 5 nights are recorded"
                        : !isnan(pe->sb) && pe->sb * sqrt(2.0) >= pe->se ? "night-to-night spread" : "spread of repeats";
    char conf[200] = "";
    if (suspect && nr)
        snprintf(conf, sizeof conf, "; re-measured: x%.3f over %d repeat(s), %s", exp(rlog - pe->base), nr,
                 confirmed ? "confirmed" : "not confirmed: noise, noted");
    else if (suspect)
        snprintf(conf, sizeof conf, "; not re-measured");
    snprintf(f->message, sizeof f->message,
             "throughput %.4g -> %.4g %s (x%.3f over %d repeats vs the median of %d nightlies); noise: standard "
             "error %.1f%% (%s), so a drop below x%.3f is flagged%s%s", f->prev_value, f->value, unit, ratio, pe->nc,
             pe->nb, 100 * (exp(pe->se) - 1), noise, exp(-pe->thr), suspect ? "" : "; a speedup, noted", conf);
    return 1;
}

static int compare_perf(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs, const nset *ps,
                        const nset *rs, const lab_nightly_opts *o, int64_t *n_reg, char *err, size_t errlen) {
    perf_eval pe;
    int rc = perf_evaluate(st, nightly, eid, arm, cs, ps, o, &pe, err, errlen);
    if (rc || !pe.have) return rc;
    finding f;
    finding_init(&f, eid, arm, "performance", 0);
    f.run_id = pe.cid;
    f.prev_run_id = pe.pid;
    f.value = exp(pe.cur);
    f.prev_value = exp(pe.base);
    if (isnan(pe.thr)) {
        double ratio = exp(pe.d);
        snprintf(f.message, sizeof f.message,
                 "throughput %.4g -> %.4g %s (x%.3f); not judged: no noise estimate (one repeat per night and fewer "
                 "than 3 earlier nightlies; set \"repeats\" >= 2 in the experiment)", f.prev_value, f.value,
                 pe.norm ? "tokens/s per host sgemm GFLOP/s" : "tokens/s", ratio);
        snprintf(f.evidence, sizeof f.evidence, "{\"ratio\":%.6g,\"n\":%d,\"prev_n\":%d}", ratio, pe.nc, pe.np);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    if (!perf_judged(&pe, rs, &f)) return LAB_OK;
    if ((rc = perf_acknowledged(st, &pe, rs, &f, err, errlen))) return rc;
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

static int compare_checks(lab_store *st, int64_t nightly, const char *eid, const nrun *r, int64_t *n_reg, char *err,
                          size_t errlen) {
    finding f;
    finding_init(&f, eid, r->arm, "check", 1);
    f.run_id = r->id;
    if (strcmp(r->status, "FINISHED")) {
        snprintf(f.message, sizeof f.message, "run %lld (repeat %lld) %s: %s", (long long)r->id, (long long)r->rep, r->status,
                 r->error[0] ? r->error : "no error recorded");
    } else if (r->assertions_ok >= 0 && r->assertions_ok == r->expect_fail) {
        snprintf(f.message, sizeof f.message, "run %lld (repeat %lld): runtime assertions %s, but the arm declares they %s",
                 (long long)r->id, (long long)r->rep, r->assertions_ok ? "passed" : "failed",
                 r->expect_fail ? "fail (a replay that no longer reproduces its defect)" : "pass");
    } else return LAB_OK;
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

/* Repeats of one identity in the same night must agree bit for bit on cpu. */
static int compare_repeats(lab_store *st, int64_t nightly, const char *eid, const nset *cs, const char *arm,
                           int64_t *n_reg, char *err, size_t errlen) {
    const nrun *first = NULL;
    for (int i = 0; i < cs->n; i++) {
        const nrun *r = &cs->r[i];
        if (strcmp(r->arm, arm) || strcmp(r->status, "FINISHED") || strcmp(r->backend, "cpu") || !r->logits[0]) continue;
        if (!first) { first = r; continue; }
        if (!strcmp(first->logits, r->logits) || strcmp(first->knob_hash, r->knob_hash)) continue;
        finding f;
        finding_init(&f, eid, arm, "numerics", 1);
        f.run_id = r->id;
        f.prev_run_id = first->id;
        snprintf(f.message, sizeof f.message,
                 "not reproducible: repeats %lld and %lld of the same identity (cpu) have different logits (%.12s vs %.12s)",
                 (long long)first->rep, (long long)r->rep, first->logits, r->logits);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    return LAB_OK;
}

/* Once per arm of tonight's runs cs (r: its first run): the repeats agree,
 * and against the previous nightly's ps: accuracy, numerics, throughput. */
static int compare_arm(lab_store *st, int64_t cur, int64_t prev, const char *eid, const nrun *r, const nset *cs,
                       const nset *ps, const nset *rs, const lab_nightly_opts *o, int64_t *n_reg, char *err,
                       size_t errlen) {
    int rc = compare_repeats(st, cur, eid, cs, r->arm, n_reg, err, errlen);
    if (rc || !prev) return rc;
    const nrun *c0 = find_run(cs, r->arm, 0), *p0 = find_run(ps, r->arm, 0);
    if (!p0) {
        finding f;
        finding_init(&f, eid, r->arm, "check", 0);
        snprintf(f.message, sizeof f.message, "no finished run of this arm in nightly %lld: nothing to compare with",
                 (long long)prev);
        return put_finding(st, cur, &f, n_reg, err, errlen);
    }
    if (c0 && !c0->is_ref && (rc = compare_accuracy(st, cur, eid, c0, p0, o, n_reg, err, errlen))) return rc;
    if (c0 && (rc = compare_numerics(st, cur, eid, c0, p0, n_reg, err, errlen))) return rc;
    return compare_perf(st, cur, eid, r->arm, cs, ps, rs, o, n_reg, err, errlen);
}

/* Every finding of experiment eid in nightly cur. */
static int compare_experiment(lab_store *st, int64_t cur, const char *eid, const lab_nightly_opts *o, int64_t *n_reg,
                              char *err, size_t errlen) {
    nset cs = {0}, ps = {0}, rs = {0};
    int64_t prev = 0;
    int rc = lab_store_nightly_previous(st, cur, eid, &prev, err, errlen);
    if (!rc) rc = load_runs(st, cur, eid, &cs, err, errlen);
    if (!rc && prev) rc = load_runs(st, prev, eid, &ps, err, errlen);
    if (!rc) rc = lab_store_nightly_runs(st, cur, eid, 1, &rs, err, errlen);
    if (!rc && !prev) {
        finding f;
        finding_init(&f, eid, "", "check", 0);
        snprintf(f.message, sizeof f.message, "first nightly of this experiment: a baseline, nothing to compare with");
        rc = put_finding(st, cur, &f, n_reg, err, errlen);
    }
    for (int64_t i = 0; i < cs.n && !rc; i++) {
        const nrun *r = &cs.r[i];
        rc = compare_checks(st, cur, eid, r, n_reg, err, errlen);
        if (!rc && (i == 0 || strcmp(cs.r[i - 1].arm, r->arm)))
            rc = compare_arm(st, cur, prev, eid, r, &cs, &ps, &rs, o, n_reg, err, errlen);
    }
    nset_free(&cs);
    nset_free(&ps);
    nset_free(&rs);
    return rc;
}

/* The comparison inside the caller's batch. (Confounds are not findings:
 * nightly_confounds.c judges them by cause.) */
static int compare_all(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_reg, char *err,
                       size_t errlen) {
    char **exps = NULL, now[32];
    int64_t ne = 0;
    int rc = lab_store_nightly_clear_findings(st, cur, err, errlen);
    if (!rc) rc = lab_store_nightly_experiments(st, cur, &exps, &ne, err, errlen);
    for (int64_t e = 0; e < ne && !rc; e++) rc = compare_experiment(st, cur, exps[e], o, n_reg, err, errlen);
    lab_nightly_strings_free(exps, ne);
    /* An acknowledgement ends when a nightly of its experiment no longer has
     * the finding (fixed, or the baseline moved): a recurrence alerts again. */
    lab_now_iso(now);
    if (!rc) rc = lab_store_nightly_clear_acks(st, cur, now, err, errlen);
    return rc;
}

int lab_nightly_compare(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_regressions, char *err,
                        size_t errlen) {
    *n_regressions = 0;
    int rc = lab_store_batch_begin(st, err, errlen);
    if (rc) return rc;
    if ((rc = compare_all(st, cur, o, n_regressions, err, errlen))) {
        lab_store_batch_rollback(st);
        *n_regressions = 0;
        return rc;
    }
    return lab_store_batch_commit(st, err, errlen);
}

/* ------------------------------------------------------------ outputs */

typedef lab_nightly_row nightly_row;
typedef lab_nightly_case tcase;

/* Findings of (experiment, arm) of a nightly appended to b as lines
 * "kind: message"; regression selects regressions (1) or notes (0). *n
 * (may be NULL): how many. */
static int case_findings(lab_store *st, int64_t id, const char *eid, const char *arm, int regression, lab_buf *b,
                         int *n, char *err, size_t errlen) {
    lab_nightly_shown_list l;
    int rc = lab_store_nightly_case_findings(st, id, eid, arm, regression, &l, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < l.n; i++)
        lab_buf_printf(b, "%s%s: %s", b->len ? "\n" : "", l.r[i].kind, l.r[i].message);
    if (n) *n = (int)l.n;
    lab_nightly_shown_free(&l);
    return LAB_OK;
}

static void x(lab_buf *b, const char *s) { lab_esc_html(b, s); }

/* What junit.xml shows of a nightly: its row, its test cases with their
 * regressions and notes, and the suite of its confounds. */
typedef struct junit_data {
    nightly_row nr;
    tcase      *cs;
    int64_t     nc;
    int        *fail;
    lab_buf    *reg, *notes, confounds;
    int         failures, n_confounds, confound_failures;
    double      time;
} junit_data;

static void junit_free(junit_data *d) {
    for (int64_t i = 0; d->reg && i < d->nc; i++) lab_buf_free(&d->reg[i]);
    for (int64_t i = 0; d->notes && i < d->nc; i++) lab_buf_free(&d->notes[i]);
    free(d->reg);
    free(d->notes);
    free(d->fail);
    free(d->cs);
    lab_buf_free(&d->confounds);
}

static int junit_load(lab_store *st, int64_t id, junit_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int rc = lab_store_nightly_get(st, id, &d->nr, err, errlen);
    if (!rc) rc = lab_store_nightly_cases(st, id, &d->cs, &d->nc, err, errlen);
    if (rc) return rc;
    /* one test case per confound key, a failure per open one */
    if ((rc = lab_nightly_junit_confounds(st, id, &d->confounds, &d->n_confounds, &d->confound_failures, err, errlen)))
        return rc;
    size_t m = (size_t)(d->nc ? d->nc : 1);
    d->fail = calloc(m, sizeof *d->fail);
    d->reg = calloc(m, sizeof *d->reg);
    d->notes = calloc(m, sizeof *d->notes);
    if (!d->fail || !d->reg || !d->notes) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    d->failures = d->confound_failures;
    for (int64_t i = 0; i < d->nc && !rc; i++) {
        int n = 0;
        rc = case_findings(st, id, d->cs[i].eid, d->cs[i].arm, 1, &d->reg[i], &n, err, errlen);
        if (!rc) rc = case_findings(st, id, d->cs[i].eid, d->cs[i].arm, 0, &d->notes[i], NULL, err, errlen);
        d->fail[i] = n > 0;
        d->failures += d->fail[i];
        d->time += d->cs[i].time;
    }
    return rc;
}

/* <property name="NAME" value="VALUE"/>, the value escaped (it may come
 * from an engine's hello). */
static void junit_property(lab_buf *b, const char *name, const char *value) {
    lab_buf_printf(b, "<property name=\"%s\" value=\"", name);
    x(b, value);
    lab_buf_printf(b, "\"/>");
}

/* The engine of a test case's runs as properties of the case (engine_name.h:
 * "engine" is its label; for the builtin, engine.commit is vtlab's). */
static void junit_engine(lab_buf *b, const lab_engine_name *e) {
    char label[160];
    lab_buf_printf(b, "      <properties>");
    junit_property(b, "engine", lab_engine_label(e, label, sizeof label));
    junit_property(b, "engine.name", e->name);
    junit_property(b, "engine.version", e->version);
    junit_property(b, "engine.commit", e->commit);
    junit_property(b, "engine.model_sha256", e->model_sha256);
    lab_buf_printf(b, "</properties>\n");
}

/* One <testcase> of junit.xml. */
static void junit_case(lab_buf *b, const junit_data *d, int64_t k) {
    lab_buf_printf(b, "    <testcase classname=\"");
    x(b, d->cs[k].eid);
    lab_buf_printf(b, "\" name=\"");
    x(b, d->cs[k].arm);
    lab_buf_printf(b, "\" time=\"%.3f\">\n", d->cs[k].time);
    junit_engine(b, &d->cs[k].engine);
    if (d->fail[k]) {
        char first[300];
        snprintf(first, sizeof first, "%s", d->reg[k].data);
        first[strcspn(first, "\n")] = 0;
        lab_buf_printf(b, "      <failure type=\"regression\" message=\"");
        x(b, first);
        lab_buf_printf(b, "\">");
        x(b, d->reg[k].data);
        lab_buf_printf(b, "</failure>\n");
    }
    lab_buf_printf(b, "      <system-out>%d run(s) in this nightly", d->cs[k].runs);
    if (d->notes[k].len) { lab_buf_printf(b, "\n"); x(b, d->notes[k].data); }
    lab_buf_printf(b, "</system-out>\n    </testcase>\n");
}

/* The distinct engine labels of cases i .. j-1, in case order, ", "-joined:
 * the suite's "engines" property, for CI systems that show only a suite's
 * properties. */
static void junit_suite_engines(lab_buf *b, const junit_data *d, int64_t i, int64_t j) {
    lab_buf all = {0};
    for (int64_t k = i; k < j; k++) {
        char label[160], seen[160];
        lab_engine_label(&d->cs[k].engine, label, sizeof label);
        int dup = 0;
        for (int64_t m = i; m < k && !dup; m++)
            dup = !strcmp(lab_engine_label(&d->cs[m].engine, seen, sizeof seen), label);
        if (!dup) lab_buf_printf(&all, "%s%s", all.len ? ", " : "", label);
    }
    if (all.oom) b->oom = 1;
    junit_property(b, "engines", all.data ? all.data : "");
    lab_buf_free(&all);
}

/* The <testsuite> of the experiment of case i: cases i .. the returned index - 1. */
static int64_t junit_suite(lab_buf *b, const junit_data *d, int64_t id, int64_t i) {
    int64_t j = i;
    int tf = 0;
    double t = 0;
    while (j < d->nc && !strcmp(d->cs[j].eid, d->cs[i].eid)) { tf += d->fail[j]; t += d->cs[j].time; j++; }
    lab_buf_printf(b, "  <testsuite name=\"");
    x(b, d->cs[i].eid);
    lab_buf_printf(b, "\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" time=\"%.3f\" timestamp=\"",
                   (int)(j - i), tf, t);
    x(b, d->nr.started);
    lab_buf_printf(b, "\" hostname=\"");
    x(b, d->nr.host);
    lab_buf_printf(b, "\">\n    <properties><property name=\"nightly\" value=\"%lld\"/><property name=\"commit\" value=\"",
                   (long long)id);
    x(b, d->nr.commit);
    lab_buf_printf(b, "\"/><property name=\"code_version\" value=\"");
    x(b, d->nr.code_version);
    lab_buf_printf(b, "\"/>");
    junit_suite_engines(b, d, i, j);
    lab_buf_printf(b, "</properties>\n");
    for (int64_t k = i; k < j; k++) junit_case(b, d, k);
    lab_buf_printf(b, "  </testsuite>\n");
    return j;
}

/* The last <testsuite>s: that the audit ran to the end (an error when it
 * did not), and the confounds (nightly_confounds.c). */
static void junit_audit(lab_buf *b, const junit_data *d, int audit_failed) {
    lab_buf_printf(b, "  <testsuite name=\"audit\" tests=\"1\" failures=\"0\" errors=\"%d\" skipped=\"0\" time=\"0\">\n"
                      "    <testcase classname=\"audit\" name=\"the audit ran to the end\" time=\"0\">\n", audit_failed);
    if (audit_failed) {
        lab_buf_printf(b, "      <error type=\"audit\" message=\"the audit did not run to the end\">");
        x(b, d->nr.audit);
        lab_buf_printf(b, "</error>\n");
    }
    lab_buf_printf(b, "      <system-out>nightly %lld: ", (long long)d->nr.id);
    x(b, d->nr.status);
    lab_buf_printf(b, "\naudit: ");
    x(b, d->nr.audit);
    lab_buf_printf(b, "</system-out>\n    </testcase>\n  </testsuite>\n");
    if (d->confounds.len) lab_buf_append(b, d->confounds.data, d->confounds.len);
    if (d->confounds.oom) b->oom = 1;
}

int lab_nightly_write_junit(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    junit_data d;
    int rc = junit_load(st, id, &d, err, errlen);
    if (rc) { junit_free(&d); return rc; }
    int audit_failed = !strncmp(d.nr.audit, "failed:", 7);
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vtlab nightly %lld\" tests=\"%d\" "
                       "failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n", (long long)id, (int)d.nc + 1 + d.n_confounds,
                   d.failures, audit_failed, d.time);
    for (int64_t i = 0; i < d.nc;) i = junit_suite(&b, &d, id, i);
    junit_audit(&b, &d, audit_failed);
    lab_buf_printf(&b, "</testsuites>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    junit_free(&d);
    return rc;
}

/* The table of nightly.md: one row per test case. */
static int md_cases(lab_store *st, int64_t id, const tcase *cs, int64_t nc, lab_buf *b, char *err, size_t errlen) {
    int rc = LAB_OK;
    lab_buf_printf(b, "| experiment | arm | engine | result | findings |\n|---|---|---|---|---|\n");
    for (int64_t i = 0; i < nc && !rc; i++) {
        lab_buf r = {0}, n = {0};
        char engine[320];
        int bad = 0;
        rc = case_findings(st, id, cs[i].eid, cs[i].arm, 1, &r, &bad, err, errlen);
        if (!rc) rc = case_findings(st, id, cs[i].eid, cs[i].arm, 0, &n, NULL, err, errlen);
        lab_buf_printf(b, "| ");
        lab_esc_md(b, cs[i].eid);
        lab_buf_printf(b, " | ");
        lab_esc_md(b, cs[i].arm);
        lab_buf_printf(b, " | ");
        lab_esc_md(b, lab_engine_describe(&cs[i].engine, engine, sizeof engine));
        lab_buf_printf(b, " | %s | ", bad ? "**REGRESSION**" : "ok");
        if (r.len) lab_esc_md(b, r.data);
        if (r.len && n.len) lab_buf_printf(b, "<br>");
        if (n.len) lab_esc_md(b, n.data);
        lab_buf_printf(b, " |\n");
        lab_buf_free(&r);
        lab_buf_free(&n);
    }
    return rc;
}

int lab_nightly_write_md(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    nightly_row nr;
    int rc = lab_store_nightly_get(st, id, &nr, err, errlen);
    if (rc) return rc;
    tcase *cs = NULL;
    int64_t nc = 0;
    if ((rc = lab_store_nightly_cases(st, id, &cs, &nc, err, errlen))) return rc;
    lab_buf b = {0};
    lab_confound_counts cc;
    if ((rc = lab_nightly_confound_counts(st, id, &cc, err, errlen))) { free(cs); return rc; }
    lab_buf_printf(&b, "# vtlab nightly %lld: %s\n\n", (long long)id,
                   !strcmp(nr.status, "PASSED") ? "passed" : !strcmp(nr.status, "REGRESSED") ? "**REGRESSED**"
                   : !strcmp(nr.status, "CONFOUNDED") ? "**CONFOUNDED**" : nr.status);
    lab_buf_printf(&b, "- started ");
    lab_esc_md(&b, nr.started);
    lab_buf_printf(&b, ", finished ");
    lab_esc_md(&b, nr.finished);
    lab_buf_printf(&b, " on ");
    lab_esc_md(&b, nr.host);
    lab_buf_printf(&b, "\n- code `");
    lab_esc_md_code(&b, nr.code_version);
    lab_buf_printf(&b, "`\n- %lld run(s), %lld regression(s), %lld open confound(s) (%lld new), %lld acknowledged, "
                       "%lld resolved\n- audit: ", (long long)nr.n_runs, (long long)nr.n_reg, (long long)cc.open,
                   (long long)cc.fresh, (long long)cc.acknowledged, (long long)cc.resolved);
    lab_esc_md(&b, nr.audit);
    lab_buf_printf(&b, "\n- full report: `index.html`; JUnit: `junit.xml`; feed: `regressions.atom`\n\n");
    rc = lab_nightly_md_confounds(st, id, &b, err, errlen);
    if (!rc) rc = md_cases(st, id, cs, nc, &b, err, errlen);
    if (!rc) rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory")
                        : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    free(cs);
    return rc;
}

/* One <entry> of the feed. */
static void atom_entry(lab_buf *b, const char *feed, const lab_nightly_shown *f) {
    lab_buf_printf(b, "  <entry>\n    <title>nightly %lld: ", (long long)f->nightly);
    x(b, f->experiment);
    lab_buf_printf(b, "%s", f->experiment[0] && f->arm[0] ? "/" : "");
    x(b, f->arm);
    lab_buf_printf(b, ": ");
    x(b, f->kind);
    lab_buf_printf(b, " regression</title>\n    <id>urn:vtlab:feed:");
    x(b, feed);
    lab_buf_printf(b, ":finding:%lld</id>\n    <updated>", (long long)f->id);
    x(b, f->at);
    lab_buf_printf(b, "</updated>\n    <link rel=\"alternate\" href=\"index.html#nightly\"/>\n"
                      "    <content type=\"text\">commit ");
    x(b, f->commit);
    lab_buf_printf(b, ": ");
    x(b, f->message);
    lab_buf_printf(b, "</content>\n  </entry>\n");
}

int lab_nightly_write_atom(lab_store *st, const char *path, char *err, size_t errlen) {
    /* ids from the database's feed_id: the same feed and entries whatever
     * host writes it (a host-named id made every entry look new) */
    char now[32], feed[72];
    lab_now_iso(now);
    int rc = lab_store_meta(st, "feed_id", feed, sizeof feed, err, errlen);
    if (rc) return rc;
    lab_nightly_shown_list l;
    if ((rc = lab_store_nightly_feed(st, 20, &l, err, errlen))) return rc;
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\">\n"
                       "  <title>vtlab nightly regressions and confounds</title>\n  <id>urn:vtlab:feed:");
    x(&b, feed);
    lab_buf_printf(&b, "</id>\n  <updated>%s</updated>\n  <author><name>vtlab nightly</name></author>\n"
                       "  <link rel=\"self\" href=\"regressions.atom\"/>\n"
                       "  <link rel=\"alternate\" href=\"index.html\"/>\n", now);
    for (int64_t i = 0; i < l.n; i++) atom_entry(&b, feed, &l.r[i]);
    lab_nightly_shown_free(&l);
    rc = lab_nightly_atom_confounds(st, feed, 20, &b, err, errlen);   /* the new confounds: they fail a night too */
    if (rc) { lab_buf_free(&b); return rc; }
    lab_buf_printf(&b, "</feed>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------ the nightly */

/* The outputs CI publishes, replaced at the start of a nightly by ones that
 * say it has not finished (junit.xml: one test case in error), so that a
 * nightly that dies, or cannot write its real outputs, never leaves the
 * previous night's files looking current. Writing them also proves that
 * --out is writable before hours of sweep. status is "RUNNING" or "FAILED",
 * why says what happened. On a failure to write, the stale files are
 * removed (unlinking needs no space on a full disk). */
static int write_unfinished(const char *out_dir, int64_t id, const char *status, const char *why, char *err,
                            size_t errlen) {
    char path[4200], now[32];
    lab_now_iso(now);
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vtlab nightly %lld\" tests=\"1\" "
                       "failures=\"0\" errors=\"1\" time=\"0\">\n  <testsuite name=\"nightly\" tests=\"1\" failures=\"0\" "
                       "errors=\"1\" skipped=\"0\" time=\"0\" timestamp=\"%s\">\n    <testcase classname=\"nightly\" "
                       "name=\"the nightly finished and wrote its outputs\" time=\"0\">\n      <error type=\"%s\" message=\"",
                   (long long)id, now, status);
    x(&b, why);
    lab_buf_printf(&b, "\">nightly %lld: %s: ", (long long)id, status);
    x(&b, why);
    lab_buf_printf(&b, "</error>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
    lab_buf md = {0};
    lab_buf_printf(&md, "# vtlab nightly %lld: %s\n\n", (long long)id, !strcmp(status, "FAILED") ? "**FAILED**" : status);
    lab_esc_md(&md, why);
    lab_buf_printf(&md, "\n");
    int rc = b.oom || md.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : LAB_OK;
    snprintf(path, sizeof path, "%s/junit.xml", out_dir);
    if (!rc) rc = lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    if (rc) unlink(path);
    snprintf(path, sizeof path, "%s/nightly.md", out_dir);
    if (!rc) rc = lab_cli_write_file_atomic(path, md.data, md.len, err, errlen);
    if (rc) unlink(path);
    lab_buf_free(&b);
    lab_buf_free(&md);
    return rc;
}

/* Test-only hooks (docs/nightly.md): VTLAB_TEST_PLANT_SLOWDOWN=F, 0 < F < 1,
 * scales the tokens/s this process measured (runs after run id `after`) by
 * 1 - F, as a code change that made the forward pass that much slower
 * would; VTLAB_TEST_PLANT_REMEASURE=R, when set, scales the re-measurements
 * by 1 - R instead (remeasure = 1), so that a night whose re-measurement
 * disagrees with its sweep can be planted. They exist to measure the
 * detection rate of the throughput check (tests/soak/nightly_noise.sh) and
 * to test the confirmation; a nightly run with one says so on stderr.
 * The model has no knob that slows the forward pass; one (a sleep
 * proportional to the forward time) would plant it where it happens. */
static const char *plant_var(int remeasure) {
    const char *r = getenv("VTLAB_TEST_PLANT_REMEASURE");
    return remeasure && r && *r ? "VTLAB_TEST_PLANT_REMEASURE" : "VTLAB_TEST_PLANT_SLOWDOWN";
}

/* Parses the hook's value into *f (0 when unset); LAB_EINPUT when it is not a fraction in (0, 1). */
static int plant_fraction(const char *var, double *f, char *err, size_t errlen) {
    const char *v = getenv(var);
    *f = 0;
    if (!v || !*v) return LAB_OK;
    char *end;
    *f = strtod(v, &end);
    if (*end || !(*f > 0 && *f < 1))
        return lab_errf(err, errlen, LAB_EINPUT, "%s must be a fraction in (0, 1), got \"%s\"", var, v);
    return LAB_OK;
}

static int plant_slowdown(lab_store *st, int64_t after, const char *host, int64_t pid, int remeasure, char *err,
                          size_t errlen) {
    const char *var = plant_var(remeasure);
    double f;
    int rc = plant_fraction(var, &f, err, errlen);
    if (rc || f == 0) return rc;
    fprintf(stderr, "vtlab nightly: TEST HOOK %s=%g: throughput of this night's %s scaled by %g\n", var, f,
            remeasure ? "re-measurements" : "runs", 1 - f);
    return lab_store_nightly_scale_throughput(st, after, host, pid, 1 - f, err, errlen);
}

/* The host's speed now, measured in the same run as the forward passes it
 * calibrates (vt_host_gemm_gflops: the forward pass's own product kernels and
 * threads). Throughput per host GFLOP/s cancels a machine that is slower
 * tonight for every program (load, frequency), not a slower forward pass. */
static double host_sgemm_gflops(void) { return vt_host_gemm_gflops(); }

/* Records the host speed (geometric mean of the measurements before and
 * after) as the metric host_sgemm_gflops of the runs this process made
 * after run id `after`. */
static int record_host(lab_store *st, int64_t after, const char *host, int64_t pid, double g0, double g1, char *err,
                       size_t errlen) {
    if (!(g0 > 0) || !(g1 > 0)) return LAB_OK;
    return lab_store_nightly_record_host(st, after, host, pid, sqrt(g0 * g1), err, errlen);
}

/* Runs one experiment file through the runner (every run redone; only arm
 * `only` when not NULL), with the host speed measured around it and
 * recorded on the runs made after run id `before`. Returns the runner's
 * status (err); herr: why the host speed was not recorded ("" when it was). */
static int run_one(lab_store *st, const char *file, const char *db_path, const char *only, const char *host, int64_t pid,
                   int64_t before, lab_run_summary *sum, char *err, size_t errlen, char *herr, size_t herrlen) {
    lab_run_opts ro = {db_path, only, 1, lab_progress_mode(), 0, 0};
    double g0 = host_sgemm_gflops();
    int rc = lab_run_experiment(file, &ro, sum, err, errlen);
    double g1 = host_sgemm_gflops();
    herr[0] = 0;
    if (record_host(st, before, host, pid, g0, g1, herr, herrlen) && !herr[0]) snprintf(herr, herrlen, "?");
    return rc;
}

/* The arms of experiment eid whose throughput in nightly id is a suspected
 * drop (perf_evaluate, the same judgement as the comparison): *n_sus of
 * them; only: the arm when there is exactly one, else "". */
static int suspects(lab_store *st, int64_t id, int64_t prev, const char *eid, const lab_nightly_opts *o, int *n_sus,
                    char *only, size_t onlylen, char *err, size_t errlen) {
    nset cs = {0}, ps = {0};
    *n_sus = 0;
    only[0] = 0;
    int rc = load_runs(st, id, eid, &cs, err, errlen);
    if (!rc) rc = load_runs(st, prev, eid, &ps, err, errlen);
    for (int64_t k = 0; !rc && k < cs.n; k++) {
        if (k > 0 && !strcmp(cs.r[k - 1].arm, cs.r[k].arm)) continue;
        perf_eval pe;
        if ((rc = perf_evaluate(st, id, eid, cs.r[k].arm, &cs, &ps, o, &pe, err, errlen)) || !perf_suspect(&pe)) continue;
        if (!(*n_sus)++) snprintf(only, onlylen, "%s", cs.r[k].arm);
    }
    if (*n_sus != 1) only[0] = 0;
    nset_free(&cs);
    nset_free(&ps);
    return rc;
}

/* Re-measures the suspects of file (experiment eid) of nightly id, if any. */
static int remeasure_one(lab_store *st, int64_t id, const char *file, const char *eid, const lab_nightly_opts *o,
                         const char *host, int64_t pid, char *err, size_t errlen) {
    int64_t prev = 0, before = 0;
    int n_sus = 0;
    char only[128];
    int rc = lab_store_nightly_previous(st, id, eid, &prev, err, errlen);
    if (rc || !prev) return rc;
    if ((rc = suspects(st, id, prev, eid, o, &n_sus, only, sizeof only, err, errlen)) || !n_sus) return rc;
    printf("== %s: a throughput drop on %s: measuring it again\n", file, only[0] ? only : "several arms");
    fflush(stdout);
    if ((rc = lab_store_max_run_id(st, &before, err, errlen))) return rc;
    lab_run_summary sum = {0};
    char rerr[1024] = "", herr[1024];
    if (run_one(st, file, o->db_path, only[0] ? only : NULL, host, pid, before, &sum, rerr, sizeof rerr, herr,
                sizeof herr))
        fprintf(stderr, "vtlab nightly: re-measuring %s: %s\n", file, rerr);
    if (herr[0]) fprintf(stderr, "vtlab nightly: re-measuring %s: %s\n", file, herr);
    if ((rc = plant_slowdown(st, before, host, pid, 1, err, errlen))) return rc;
    return lab_store_nightly_attach_runs(st, id, before, host, pid, 1, err, errlen);
}

/* Confirmation of throughput drops: every arm whose throughput tonight is a
 * suspected drop is measured once more, right away (its experiment rerun
 * with --force, only that arm when it is the only suspect: the reference arm
 * comes along). The new runs go to nightly_remeasure_runs; the comparison
 * flags a drop only when the re-measurement shows it too. Failures here are
 * reported and leave the drops unconfirmed-but-flagged (as without this step). */
static void remeasure_suspects(lab_store *st, int64_t id, char **files, char **ids, int nf, const lab_nightly_opts *o,
                               const char *host, int64_t pid) {
    for (int i = 0; i < nf && !lab_interrupted; i++) {
        char err[1024] = "";
        if (remeasure_one(st, id, files[i], ids[i], o, host, pid, err, sizeof err))
            fprintf(stderr, "vtlab nightly: re-measuring %s: %s\n", files[i], err);
    }
}

/* The experiment files of dir, sorted, each parsed (bad input stops here). */
static int list_experiments(const char *dir, char ***files, char ***ids, int *n, char *err, size_t errlen) {
    int64_t n64 = 0;
    int rc = lab_list_json(dir, 0, files, &n64, err, errlen);
    *n = (int)n64;
    if (rc) return rc;
    if (!*n) return lab_errf(err, errlen, LAB_EINPUT, "%s: no *.json experiment files", dir);
    if (!(*ids = calloc((size_t)*n, sizeof **ids))) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int i = 0; i < *n; i++) {
        lab_experiment *e = NULL;
        rc = lab_experiment_load(&e, (*files)[i], err, errlen);
        if (!rc && !((*ids)[i] = lab_strdup(e->id))) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        lab_experiment_free(e);
        if (rc) return rc;
    }
    return LAB_OK;
}

/* A nightly in progress. */
typedef struct night {
    const lab_nightly_opts *o;
    lab_store *st;
    char     **files, **ids;
    int        nf;
    int64_t    id, before, pid;       /* before: the largest run id when it started */
    char       host[256];
} night;

/* Marks dead nightlies of this host FAILED, records this one RUNNING, and
 * replaces the outputs with "not finished" ones. */
static int start_nightly(night *n, char *err, size_t errlen) {
    char now[32];
    lab_nightly_start ns = {now, vt_build_commit(), vt_build_info(), n->host, n->o->exp_dir, n->pid,
                            lab_pid_start(n->pid)};
    /* A nightly left RUNNING by a dead process on this host failed. */
    int rc = lab_store_nightly_reap(n->st, n->host, NULL, err, errlen);
    lab_now_iso(now);
    if (!rc) rc = lab_store_nightly_create(n->st, &ns, &n->id, &n->before, err, errlen);
    if (rc) return rc;
    printf("nightly %lld: %d experiment file(s) in %s, code %s\n", (long long)n->id, n->nf, n->o->exp_dir,
           vt_build_info());
    fflush(stdout);
    /* --out must be writable before the sweep, and last night's files must
     * not look like tonight's while it runs (or if it dies). */
    rc = lab_mkdirs(n->o->out_dir, err, errlen);
    /* temporary files a killed nightly or report left in --out: removed now */
    if (!rc) lab_sweep_stale_tmp_tree(n->o->out_dir, 2);
    if (rc ||
        (rc = write_unfinished(n->o->out_dir, n->id, "RUNNING", "the nightly is running, or died before it finished",
                               err, errlen)))
        lab_err_prefix(err, errlen, rc, "outputs");
    return rc;
}

/* The sweep: the same runner as `vtlab sweep`, every run redone. The first
 * failure's status is returned, its message in sweep_err; a read of the
 * database that fails stops it (*rc). */
static int sweep(night *n, char *sweep_err, size_t selen, int *rc, char *err, size_t errlen) {
    lab_run_summary sum = {0};
    int sweep_rc = 0;
    for (int i = 0; i < n->nf && !lab_interrupted && !*rc; i++) {
        int64_t before_exp = 0;
        char herr[512];
        printf("== %s\n", n->files[i]);
        fflush(stdout);
        if ((*rc = lab_store_max_run_id(n->st, &before_exp, err, errlen))) break;
        int r = run_one(n->st, n->files[i], n->o->db_path, NULL, n->host, n->pid, before_exp, &sum, sweep_err, selen,
                        herr, sizeof herr);
        if (herr[0]) fprintf(stderr, "vtlab nightly: host speed of %s not recorded: %s\n", n->files[i], herr);
        if (r) {
            fprintf(stderr, "vtlab nightly: %s\n", sweep_err);
            if (!sweep_rc) sweep_rc = r;
        }
    }
    return sweep_rc;
}

/* The audit: flags for every run, ours included. audit: the one line the
 * nightly records; *ran: 1 when it ran to the end (then the night judges its
 * confounds); a failure (the night is then FAILED) is returned with its
 * message in audit_err. */
static int run_audit(const lab_nightly_opts *o, char *audit, size_t alen, char *audit_err, size_t aelen, int *ran) {
    *ran = 0;
    snprintf(audit, alen, "not run (--no-audit)");
    if (!o->audit || lab_interrupted) return 0;
    int arc = 0;
    if (!lab_path_exists(o->specs_dir)) {
        snprintf(audit, alen, "skipped: %s does not exist", o->specs_dir);
    } else {
        lab_audit_opts ao = {o->db_path, o->specs_dir, 0};
        lab_audit_result ar;
        memset(&ar, 0, sizeof ar);
        char aerr[1024] = "";
        arc = lab_audit_run(&ao, &ar, NULL, aerr, sizeof aerr);
        if (arc) {
            /* a nightly whose audit failed is not green: FAILED, with the reason */
            snprintf(audit, alen, "failed: %.200s", aerr);
            snprintf(audit_err, aelen, "audit failed: %.1024s", aerr);
        } else {
            /* flags, not confounds: one cause is one flag per run it is on (the
             * nightly's confounds, by cause, are counted on their own line) */
            snprintf(audit, alen, "%lld open flag(s) on all runs and claims, %lld expected (replays), %lld new, "
                     "%lld resolved", (long long)ar.n_open, (long long)ar.n_expected, (long long)ar.n_new,
                     (long long)ar.n_resolved);
            *ran = 1;
        }
    }
    printf("audit: %s\n", audit);
    return arc;
}

/* The report, nightly.md, regressions.atom and junit.xml (last). */
static int write_outputs(night *n, char *err, size_t errlen) {
    char path[4200];
    lab_report_opts ro = {n->o->out_dir, n->o->db_path, n->o->plots};
    lab_report_result rr;
    int rc = lab_report_write(n->st, &ro, &rr, err, errlen);
    snprintf(path, sizeof path, "%s/nightly.md", n->o->out_dir);
    if (!rc) rc = lab_nightly_write_md(n->st, n->id, path, err, errlen);
    snprintf(path, sizeof path, "%s/regressions.atom", n->o->out_dir);
    if (!rc) rc = lab_nightly_write_atom(n->st, path, err, errlen);
    snprintf(path, sizeof path, "%s/junit.xml", n->o->out_dir);
    if (!rc) rc = lab_nightly_write_junit(n->st, n->id, path, err, errlen);
    return rc;
}

/* The status and the outputs are one unit: the status is committed only
 * once every output is written (the outputs read it inside the same
 * transaction, a batch), junit.xml last, so that until then CI finds the
 * "not finished" junit.xml. A failure rolls the status back to RUNNING (the
 * caller then records FAILED with the error) and leaves this nightly's
 * failure in the outputs, never last night's. */
static int finish_nightly(night *n, const lab_nightly_end *e, char *err, size_t errlen) {
    int rc = lab_store_batch_begin(n->st, err, errlen);
    if (rc) return rc;
    if ((rc = lab_store_nightly_finish(n->st, e, err, errlen))) goto rollback;
    if ((rc = write_outputs(n, err, errlen))) { lab_err_prefix(err, errlen, rc, "outputs"); goto rollback; }
    if ((rc = lab_store_batch_commit(n->st, err, errlen))) { lab_err_prefix(err, errlen, rc, "outputs"); goto failed; }
    return LAB_OK;
rollback:
    lab_store_batch_rollback(n->st);
failed:;
    char e2[256];
    write_unfinished(n->o->out_dir, n->id, "FAILED", err, e2, sizeof e2);
    return rc;
}

/* `--bisect`: for each accuracy or numerics regression of tonight, a
 * bisection between the commit of the previous nightly of the experiment and
 * tonight's (numerics: --exact), in this repository with the default build.
 * Its result is appended to the finding's message, so nightly.md, junit.xml
 * and regressions.atom name the culprit. A bisection that cannot run is
 * said in the message; it never fails the night by itself. */
static int bisect_regressions(night *n, char *err, size_t errlen) {
    lab_bisect_target *t = NULL;
    int64_t nt = 0;
    int rc = lab_store_bisect_nightly_targets(n->st, n->id, &t, &nt, err, errlen);
    for (int64_t i = 0; !rc && i < nt && !lab_interrupted; i++) {
        const char *file = NULL;
        for (int j = 0; j < n->nf; j++)
            if (!strcmp(n->ids[j], t[i].experiment)) file = n->files[j];
        int64_t prev = 0;
        char good[64] = "", bad[64], note[1600], berr[1024] = "";
        if ((rc = lab_store_nightly_previous(n->st, n->id, t[i].experiment, &prev, err, errlen))) break;
        if (prev && (rc = lab_store_bisect_nightly_commit(n->st, prev, good, sizeof good, err, errlen))) break;
        good[strcspn(good, "+")] = 0;   /* a dirty build: its commit */
        snprintf(bad, sizeof bad, "%s", vt_build_commit());
        bad[strcspn(bad, "+")] = 0;
        lab_bisection b;
        memset(&b, 0, sizeof b);
        int brc = LAB_EINPUT;
        if (!file || !prev || !good[0] || !strcmp(good, "unknown") || !strcmp(bad, "unknown")) {
            snprintf(berr, sizeof berr, "no previous nightly commit to start from");
        } else if (!strncmp(good, bad, strlen(good) < strlen(bad) ? strlen(good) : strlen(bad))) {
            snprintf(berr, sizeof berr, "the previous nightly ran the same commit %s: nothing to bisect", bad);
        } else {
            lab_bisect_opts bo;
            lab_bisect_defaults(&bo);
            bo.experiment = file;
            bo.arm = t[i].arm;
            bo.good = good;
            bo.bad = bad;
            bo.db_path = n->o->db_path;
            bo.exact = !strcmp(t[i].kind, "numerics");
            bo.allow_dirty = 1;
            bo.nightly_id = n->id;
            printf("== bisect %s/%s (%s) between nightly %lld's commit %s and tonight's %s\n", t[i].experiment,
                   t[i].arm, t[i].kind, (long long)prev, good, bad);
            fflush(stdout);
            brc = lab_bisect_run(&bo, stdout, &b, berr, sizeof berr);
        }
        if (brc) snprintf(note, sizeof note, " | bisect: not done: %.1000s", berr);
        else if (!strcmp(b.status, "FOUND"))
            snprintf(note, sizeof note, " | bisect (bisection %lld): culprit %.12s: %.1400s", (long long)b.id, b.first_bad,
                     b.message);
        else snprintf(note, sizeof note, " | bisect (bisection %lld): %s: %.1400s", (long long)b.id, b.status, b.message);
        rc = lab_store_bisect_note_finding(n->st, n->id, t[i].experiment, t[i].arm, t[i].kind, note, err, errlen);
    }
    free(t);
    return rc;
}

/* After the sweep: the runs this process made belong to this nightly; drops
 * re-measured; the audit; the comparison; the status and the outputs. */
static int judge_nightly(night *n, int sweep_rc, const char *sweep_err, int64_t *n_reg, int64_t *n_conf, char *err,
                         size_t errlen) {
    int rc = lab_store_nightly_attach_runs(n->st, n->id, n->before, n->host, n->pid, 0, err, errlen);
    if (!rc) rc = plant_slowdown(n->st, n->before, n->host, n->pid, 0, err, errlen);
    if (rc) return rc;
    /* A throughput drop is confirmed by a second measurement before it is flagged. */
    if (!lab_interrupted) remeasure_suspects(n->st, n->id, n->files, n->ids, n->nf, n->o, n->host, n->pid);
    char audit[256], audit_err[1100] = "", now[32];
    int audited = 0, audit_rc = run_audit(n->o, audit, sizeof audit, audit_err, sizeof audit_err, &audited);
    int64_t nreg = 0;
    if ((rc = lab_nightly_compare(n->st, n->id, n->o, &nreg, err, errlen))) return rc;
    *n_reg = nreg;
    lab_confound_counts cc = {0};
    if (audited && (rc = lab_nightly_judge_confounds(n->st, n->id, &cc, err, errlen))) return rc;
    if (audited) printf("confounds: %lld open (%lld new), %lld acknowledged, %lld resolved\n", (long long)cc.open,
                        (long long)cc.fresh, (long long)cc.acknowledged, (long long)cc.resolved);
    if (nreg && n->o->bisect && !lab_interrupted && (rc = bisect_regressions(n, err, errlen))) return rc;
    lab_now_iso(now);
    /* A sweep error that produced no failed run (e.g. a model that cannot be
     * built) fails the night, and it is then never used as a baseline. An
     * open confound no one acknowledged fails it too, as CONFOUNDED (a
     * baseline: its runs are complete). */
    const char *status = lab_interrupted || audit_rc || (sweep_rc && !nreg) ? "FAILED" : nreg ? "REGRESSED"
                       : cc.open ? "CONFOUNDED" : "PASSED";
    char error[2100] = "";
    if (sweep_rc) snprintf(error, sizeof error, "%s", sweep_err);
    else if (audit_rc) snprintf(error, sizeof error, "%s", audit_err);
    if (lab_interrupted) snprintf(error, sizeof error, "interrupted by a signal");
    lab_nightly_end e = {n->id, now, status, nreg, audit, error[0] ? error : NULL};
    if ((rc = finish_nightly(n, &e, err, errlen))) return rc;
    *n_conf = cc.open;
    char aerr[256];
    if (cc.open && lab_nightly_confound_advice(n->st, n->id, stderr, aerr, sizeof aerr))
        fprintf(stderr, "vtlab nightly: %s\n", aerr);
    if (sweep_rc && !nreg) { snprintf(err, errlen, "%s", sweep_err); return sweep_rc; }
    if (audit_rc) { snprintf(err, errlen, "%s", audit_err); return audit_rc; }
    return LAB_OK;
}

static int run_nightly(const lab_nightly_opts *o, int64_t *id_out, int64_t *n_reg, int64_t *n_conf, char *err,
                       size_t errlen) {
    night n;
    memset(&n, 0, sizeof n);
    n.o = o;
    n.pid = getpid();
    int rc = list_experiments(o->exp_dir, &n.files, &n.ids, &n.nf, err, errlen);
    if (gethostname(n.host, sizeof n.host) != 0) snprintf(n.host, sizeof n.host, "unknown");
    n.host[sizeof n.host - 1] = 0;
    if (!rc) rc = lab_store_open(&n.st, o->db_path, err, errlen);
    if (!rc) rc = start_nightly(&n, err, errlen);
    if (!rc) {
        *id_out = n.id;
        lab_install_signals();
        char sweep_err[2048] = "";
        int sweep_rc = sweep(&n, sweep_err, sizeof sweep_err, &rc, err, errlen);
        if (!rc) rc = judge_nightly(&n, sweep_rc, sweep_err, n_reg, n_conf, err, errlen);
    }
    if (rc && n.st && n.id) {
        char e2[256];
        lab_store_nightly_fail(n.st, n.id, err, e2, sizeof e2);
    }
    lab_store_close(n.st);
    for (int i = 0; i < n.nf; i++) free(n.files[i]);
    for (int i = 0; n.ids && i < n.nf; i++) free(n.ids[i]);
    free(n.files);
    free(n.ids);
    return rc;
}

int lab_nightly_cmd(const lab_nightly_opts *opts, int specs_given) {
    lab_nightly_opts o = *opts;
    /* The test-only hooks are checked before anything is written. */
    for (int i = 0; i < 2; i++) {
        double f;
        char perr[256];
        if (plant_fraction(i ? "VTLAB_TEST_PLANT_REMEASURE" : "VTLAB_TEST_PLANT_SLOWDOWN", &f, perr, sizeof perr)) {
            fprintf(stderr, "vtlab nightly: %s\n", perr);
            return 2;
        }
    }
    int64_t id = 0, nreg = 0, nconf = 0;
    char err[2048] = "";
    /* The ledger is checked before anything runs: a malformed one (or a
     * --specs that names nothing) is bad input, and the audit at the end of
     * the night would fail on it. Without --specs, a missing specs/ means
     * no ledger (the audit is skipped and says so). */
    if (o.audit && (specs_given || lab_path_exists(o.specs_dir))) {
        lab_ledger l;
        int lrc = lab_ledger_load(o.specs_dir, &l, err, sizeof err);
        if (lrc) {
            fprintf(stderr, "vtlab nightly: the audit's ledger: %s\n", err);
            return lab_exit_code(lrc);
        }
        lab_ledger_free(&l);
    }
    int rc = run_nightly(&o, &id, &nreg, &nconf, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab nightly: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("nightly %lld: %s; %s/junit.xml, %s/nightly.md, %s/regressions.atom, %s/index.html\n", (long long)id,
           nreg ? "REGRESSED" : nconf ? "CONFOUNDED" : "passed", o.out_dir, o.out_dir, o.out_dir, o.out_dir);
    if (nreg)
        fprintf(stderr, "vtlab nightly: %lld regression(s) against the previous nightly (see %s/nightly.md)\n",
                (long long)nreg, o.out_dir);
    if (nconf)
        fprintf(stderr, "vtlab nightly: %lld open confound(s) no one acknowledged: the night is not green until each "
                        "is fixed, its claim reopened, or acknowledged (see %s/nightly.md)\n", (long long)nconf, o.out_dir);
    return nreg || nconf ? 1 : 0;
}

/* Records the acknowledgement of t and says so on stdout. */
static int ack_record(lab_store *st, const lab_nightly_target *t, const char *reason, char *err, size_t errlen) {
    char fkey[300], now[32];
    snprintf(fkey, sizeof fkey, "%s/%s/%s", t->experiment, t->arm, t->kind);
    lab_now_iso(now);
    int perf = !strcmp(t->kind, "performance") && !isnan(t->value);
    lab_nightly_ack_row a = {fkey, t->experiment, t->arm, t->kind, reason, now, t->nightly, perf ? t->value : NAN};
    int rc = lab_store_nightly_put_ack(st, &a, err, errlen);
    if (rc) return rc;
    if (perf)
        printf("acknowledged %s (nightly %lld, %.4g tokens/s; a further drop alerts again): %s\n", fkey,
               (long long)t->nightly, t->value, reason);
    else
        printf("acknowledged %s (nightly %lld; until a nightly no longer has it): %s\n", fkey, (long long)t->nightly,
               reason);
    return LAB_OK;
}

/* Records the acknowledgement of confound `key`, open or acknowledged last in
 * nightly `nightly`, and says so on stdout. */
static int ack_confound(lab_store *st, const char *key, int64_t nightly, const char *reason, char *err,
                        size_t errlen) {
    char now[32];
    lab_now_iso(now);
    lab_nightly_ack_row a = {key, "", "", "confound", reason, now, nightly, NAN};
    int rc = lab_store_nightly_put_ack(st, &a, err, errlen);
    if (rc) return rc;
    printf("acknowledged confound %s (nightly %lld): later nightlies list it as acknowledged and do not fail on it, "
           "until a nightly no longer has it (`vtlab ack --remove %s` ends it sooner): %s\n", key, (long long)nightly,
           key, reason);
    return LAB_OK;
}

/* `vtlab ack KEY --reason TEXT [--db PATH]` (lab.c checks the arguments and
 * that the database exists). KEY is a confound key as nightly.md shows it
 * (nightly_confounds.h: the acknowledged confound is listed and no longer
 * fails a night, until a nightly no longer has it), or a regression:
 * EXPERIMENT/ARM/KIND (kind: check, accuracy, numerics, performance) or the
 * id of a nightly_findings row; it must name one some nightly found. The
 * acknowledgement of a regression (nightly_acks) turns later regressions of
 * that key into notes until a nightly of the experiment no longer has it; a
 * performance one holds only down to the throughput acknowledged (a further
 * drop beyond the noise alerts again). Exit 0, or 2 on bad input (nothing
 * written). */
int lab_cmd_ack(const char *db, const char *key, const char *reason) {
    lab_store *st = NULL;
    char err[1024] = "";
    lab_nightly_target t = {0};
    int64_t confound_night = 0;
    /* A confound key, else the latest regression with that key (or that id). */
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_find_confound(st, key, &confound_night, err, sizeof err);
    if (!rc && confound_night) {
        rc = ack_confound(st, key, confound_night, reason, err, sizeof err);
        goto done;
    }
    if (!rc) rc = lab_store_nightly_find_regression(st, key, key[strspn(key, "0123456789")] == 0, &t, err, sizeof err);
    if (!rc && !t.found) {
        fprintf(stderr, "vtlab ack: %s: no confound or regression found by a nightly in %s (name a confound by its key "
                        "and a regression EXPERIMENT/ARM/KIND, as nightly.md shows them, or a regression by the id of its "
                        "nightly_findings row)\n", key, db);
        lab_store_close(st);
        return 2;
    }
    if (!rc) rc = ack_record(st, &t, reason, err, sizeof err);
done:
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    return 0;
}

int lab_cmd_ack_list(const char *db) {
    lab_store *st = NULL;
    lab_nightly_ack_listed *a = NULL;
    int64_t n = 0;
    char err[1024] = "";
    int rc = lab_store_open_readonly(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_list_acks(st, &a, &n, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    if (!n) printf("no active acknowledgement in %s\n", db);
    for (int64_t i = 0; i < n; i++) {
        printf("%s  %s, acknowledged %s (nightly %lld)", a[i].key,
               strcmp(a[i].kind, "confound") ? "regression" : "confound", a[i].acked_at, (long long)a[i].nightly);
        if (!isnan(a[i].value)) printf(" at %.4g tokens/s", a[i].value);
        printf(": %s\n", a[i].reason);
    }
    free(a);
    return 0;
}

int lab_cmd_ack_remove(const char *db, const char *key) {
    lab_store *st = NULL;
    char err[1024] = "", now[32];
    int removed = 0;
    lab_now_iso(now);
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_remove_ack(st, key, now, &removed, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    if (!removed) {
        fprintf(stderr, "vtlab ack --remove: %s: no active acknowledgement of that key in %s (`vtlab ack --list` "
                        "shows them)\n", key, db);
        return 2;
    }
    printf("acknowledgement of %s removed: the next nightly that has it fails on it again\n", key);
    return 0;
}
