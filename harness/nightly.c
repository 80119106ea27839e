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
 */
#include "nightly.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "audit.h"
#include "ledger.h"
#include "cli.h"
#include "experiment.h"
#include "metrics.h"
#include "model/vt.h"
#include "report.h"
#include "runner.h"
#include "util.h"

void lab_nightly_defaults(lab_nightly_opts *o) {
    memset(o, 0, sizeof *o);
    o->db_path = "results.db";
    o->exp_dir = "experiments";
    o->out_dir = "report";
    o->specs_dir = "specs";
    o->alpha = 0.05;
    o->perf_min_drop = 0.05;
    o->perf_sigmas = 3.0;
    o->audit = 1;
    o->plots = 1;
}


static int prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, s, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "nightly query: %s", sqlite3_errmsg(lab_store_db(st)));
    return LAB_OK;
}

static int exec_sql(lab_store *st, const char *sql, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(lab_store_db(st), sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = lab_errf(err, errlen, LAB_EIO, "%s: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return rc;
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ the comparison */

/* One run as the comparison needs it. */
typedef struct nrun {
    int64_t id, rep;
    char    arm[128];
    char    status[16];
    char    error[256];
    int     is_ref, expect_fail, assertions_ok;   /* assertions_ok -1: unknown */
    char    backend[16], model[65], dataset[65], knob_hash[65], logits[65], code_version[160];
    double  tps;
    double  host;        /* host_sgemm_gflops measured around the run (NaN: none) */
    int     has_cmp;
    int64_t ref_run, k, n;
    double  lo, hi;
} nrun;

typedef struct nset {
    nrun *r;
    int   n;
} nset;

static void nset_free(nset *s) {
    free(s->r);
    s->r = NULL;
    s->n = 0;
}

/* Runs of an experiment in a nightly, by arm then repeat: the night's runs
 * (nightly_runs), or with remeasure its re-measurements of suspected
 * throughput drops (nightly_remeasure_runs). */
static int load_runs_of(lab_store *st, int64_t nightly, const char *eid, int remeasure, nset *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s;
    int rc = prep(st, remeasure ?
                  "SELECT r.id, r.repeat_idx, r.arm, r.status, coalesce(r.error, ''), r.is_reference,"
                  " r.expected_assertions = 'fail', r.assertions_ok, coalesce(r.backend, ''), r.model_sha256,"
                  " r.dataset_sha256, r.knob_hash, coalesce(r.logits_sha256, ''), r.code_version,"
                  " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s'),"
                  " NULL, NULL, NULL, NULL, NULL,"
                  " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'host_sgemm_gflops')"
                  " FROM nightly_remeasure_runs nr JOIN runs r ON r.id = nr.run_id"
                  " WHERE nr.nightly_id = ?1 AND r.experiment = ?2 ORDER BY r.arm, r.repeat_idx, r.id" :
                  "SELECT r.id, r.repeat_idx, r.arm, r.status, coalesce(r.error, ''), r.is_reference,"
                  " r.expected_assertions = 'fail', r.assertions_ok, coalesce(r.backend, ''), r.model_sha256,"
                  " r.dataset_sha256, r.knob_hash, coalesce(r.logits_sha256, ''), r.code_version,"
                  " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s'),"
                  " c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi,"
                  " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'host_sgemm_gflops')"
                  " FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                  " LEFT JOIN comparisons c ON c.run_id = r.id"
                  " WHERE nr.nightly_id = ?1 AND r.experiment = ?2 ORDER BY r.arm, r.repeat_idx, r.id", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    sqlite3_bind_text(s, 2, eid, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(s) == SQLITE_ROW) {
        nrun *q = realloc(out->r, (size_t)(out->n + 1) * sizeof *q);
        if (!q) { sqlite3_finalize(s); nset_free(out); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        out->r = q;
        nrun *r = &out->r[out->n++];
        memset(r, 0, sizeof *r);
        r->id = sqlite3_column_int64(s, 0);
        r->rep = sqlite3_column_int64(s, 1);
        snprintf(r->arm, sizeof r->arm, "%s", lab_col_text(s, 2));
        snprintf(r->status, sizeof r->status, "%s", lab_col_text(s, 3));
        snprintf(r->error, sizeof r->error, "%s", lab_col_text(s, 4));
        r->is_ref = sqlite3_column_int(s, 5);
        r->expect_fail = sqlite3_column_int(s, 6);
        r->assertions_ok = sqlite3_column_type(s, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 7);
        snprintf(r->backend, sizeof r->backend, "%s", lab_col_text(s, 8));
        snprintf(r->model, sizeof r->model, "%s", lab_col_text(s, 9));
        snprintf(r->dataset, sizeof r->dataset, "%s", lab_col_text(s, 10));
        snprintf(r->knob_hash, sizeof r->knob_hash, "%s", lab_col_text(s, 11));
        snprintf(r->logits, sizeof r->logits, "%s", lab_col_text(s, 12));
        snprintf(r->code_version, sizeof r->code_version, "%s", lab_col_text(s, 13));
        r->tps = sqlite3_column_type(s, 14) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 14);
        r->host = sqlite3_column_type(s, 20) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 20);
        if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
            r->has_cmp = 1;
            r->ref_run = sqlite3_column_int64(s, 15);
            r->k = sqlite3_column_int64(s, 16);
            r->n = sqlite3_column_int64(s, 17);
            r->lo = sqlite3_column_double(s, 18);
            r->hi = sqlite3_column_double(s, 19);
        }
    }
    sqlite3_finalize(s);
    return LAB_OK;
}

static int load_runs(lab_store *st, int64_t nightly, const char *eid, nset *out, char *err, size_t errlen) {
    return load_runs_of(st, nightly, eid, 0, out, err, errlen);
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

static void bind_num(sqlite3_stmt *s, int i, double v) {
    if (isnan(v) || isinf(v)) sqlite3_bind_null(s, i);
    else sqlite3_bind_double(s, i, v);
}

static int64_t previous_nightly(lab_store *st, int64_t cur, const char *eid);
static int find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, char *reason, size_t rlen,
                    int64_t *nightly, double *value);
static void evidence_add(char *ev, size_t len, const char *fmt, ...);

/* A regression that is already known: persistent when the previous nightly
 * of the experiment had the same experiment/arm/kind as a regression (or an
 * acknowledged one): the message says since when, and the evidence carries
 * "persistent_since" (the Atom feed announces only new ones); acknowledged
 * (`vtlab ack`) it becomes a note. Performance findings check their
 * acknowledgement themselves (it holds only down to the acknowledged level). */
static void annotate_known(lab_store *st, int64_t nightly, finding *f) {
    char m[sizeof f->message];
    int64_t prev = f->experiment[0] ? previous_nightly(st, nightly, f->experiment) : 0;
    sqlite3_stmt *s;
    if (prev && sqlite3_prepare_v2(lab_store_db(st),
                                   "SELECT coalesce(json_extract(evidence, '$.persistent_since'), nightly_id)"
                                   " FROM nightly_findings WHERE nightly_id = ?1 AND experiment = ?2 AND arm = ?3"
                                   " AND kind = ?4 AND (regression = 1 OR json_extract(evidence, '$.acknowledged') = 1)"
                                   " LIMIT 1", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, prev);
        sqlite3_bind_text(s, 2, f->experiment, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 3, f->arm, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 4, f->kind, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(s) == SQLITE_ROW) {
            int64_t since = sqlite3_column_int64(s, 0);
            evidence_add(f->evidence, sizeof f->evidence, "\"persistent_since\":%lld", (long long)since);
            snprintf(m, sizeof m, "persistent since nightly %lld (not new): %.900s", (long long)since, f->message);
            snprintf(f->message, sizeof f->message, "%s", m);
        }
        sqlite3_finalize(s);
    }
    char reason[512];
    int64_t an = 0;
    double av;
    if (strcmp(f->kind, "performance") && find_ack(st, f->experiment, f->arm, f->kind, reason, sizeof reason, &an, &av)) {
        f->regression = 0;
        evidence_add(f->evidence, sizeof f->evidence, "\"acknowledged\":1");
        snprintf(m, sizeof m, "acknowledged (nightly %lld: %.200s); %.700s", (long long)an, reason, f->message);
        snprintf(f->message, sizeof f->message, "%s", m);
    }
}

static int put_finding(lab_store *st, int64_t nightly, const finding *f0, int64_t *n_reg, char *err, size_t errlen) {
    finding fk = *f0, *f = &fk;
    if (f->regression) annotate_known(st, nightly, f);
    sqlite3_stmt *s;
    int rc = prep(st,
                  "INSERT INTO nightly_findings (nightly_id, experiment, arm, kind, regression, message, run_id,"
                  " previous_run_id, value, previous_value, p, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                  &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    sqlite3_bind_text(s, 2, f->experiment, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, f->arm, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, f->kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 5, f->regression);
    sqlite3_bind_text(s, 6, f->message, -1, SQLITE_TRANSIENT);
    if (f->run_id) sqlite3_bind_int64(s, 7, f->run_id);
    if (f->prev_run_id) sqlite3_bind_int64(s, 8, f->prev_run_id);
    bind_num(s, 9, f->value);
    bind_num(s, 10, f->prev_value);
    bind_num(s, 11, f->p);
    sqlite3_bind_text(s, 12, f->evidence, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(s) == SQLITE_DONE ? LAB_OK
                                        : lab_errf(err, errlen, LAB_EIO, "store finding: %s", sqlite3_errmsg(lab_store_db(st)));
    sqlite3_finalize(s);
    if (!rc && f->regression) (*n_reg)++;
    return rc;
}

/* The latest finished nightly before cur that ran experiment eid; 0 if none. */
static int64_t previous_nightly(lab_store *st, int64_t cur, const char *eid) {
    sqlite3_stmt *s;
    int64_t id = 0;
    if (sqlite3_prepare_v2(lab_store_db(st),
                           "SELECT n.id FROM nightlies n WHERE n.id < ?1 AND n.status IN ('PASSED', 'REGRESSED') AND EXISTS"
                           " (SELECT 1 FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id WHERE nr.nightly_id = n.id"
                           "  AND r.experiment = ?2 AND r.status = 'FINISHED') ORDER BY n.id DESC LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_int64(s, 1, cur);
    sqlite3_bind_text(s, 2, eid, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return id;
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
 * (PASSED or REGRESSED) before cur, newest first; returns how many were
 * found (at most max). Only the first measurement of a night counts (the
 * re-measurements of a suspected drop are in nightly_remeasure_runs). */
static int night_means(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm, double *v, int max) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st), norm ?
                           "SELECT n.id, avg(ln(m.value) - ln(h.value)) FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id"
                           " JOIN runs r ON r.id = nr.run_id JOIN metrics m ON m.run_id = r.id AND m.name = 'tokens_per_s'"
                           " JOIN metrics h ON h.run_id = r.id AND h.name = 'host_sgemm_gflops' AND h.value > 0"
                           " WHERE n.id < ?1 AND n.status IN ('PASSED','REGRESSED') AND r.experiment = ?2 AND r.arm = ?3"
                           " AND r.status = 'FINISHED' AND m.value > 0 GROUP BY n.id ORDER BY n.id DESC LIMIT ?4" :
                           "SELECT n.id, avg(ln(m.value)) FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id"
                           " JOIN runs r ON r.id = nr.run_id JOIN metrics m ON m.run_id = r.id AND m.name = 'tokens_per_s'"
                           " WHERE n.id < ?1 AND n.status IN ('PASSED','REGRESSED') AND r.experiment = ?2 AND r.arm = ?3"
                           " AND r.status = 'FINISHED' AND m.value > 0 GROUP BY n.id ORDER BY n.id DESC LIMIT ?4",
                           -1, &s, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(s, 1, cur);
    sqlite3_bind_text(s, 2, eid, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, arm, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 4, max);
    int n = 0;
    while (n < max && sqlite3_step(s) == SQLITE_ROW) v[n++] = sqlite3_column_double(s, 1);
    sqlite3_finalize(s);
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* SD over the nightlies before cur (at most 8) of the nightly mean of
 * log(tokens/s) of one arm: the night-to-night noise. NaN below 3 nights. */
static double between_sd(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm) {
    double v[8];
    int n = night_means(st, cur, eid, arm, norm, v, 8);
    if (n < 3) return NAN;
    /* Robust: 1.4826 x the median absolute deviation, so that one regressed
     * night in the window does not inflate the noise (and hide the nights
     * after it, which stay flagged as persistent until acknowledged). */
    double med, dev[8];
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    for (int i = 0; i < n; i++) dev[i] = fabs(v[i] - med);
    qsort(dev, (size_t)n, sizeof dev[0], cmp_double);
    return 1.4826 * (n % 2 ? dev[n / 2] : 0.5 * (dev[n / 2 - 1] + dev[n / 2]));
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
 * previous night, and the night-to-night spread (>= 3 nights); a drop is
 * suspected when it exceeds max(--perf-min-drop, perf_sigmas standard
 * errors). */
typedef struct perf_eval {
    int     nc, np, nb;      /* repeats tonight, in the previous nightly; nights in the baseline */
    int64_t cid, pid;        /* a run of tonight's and of the previous nightly's */
    double  cur, base;       /* tonight's mean, the baseline */
    double  d;               /* cur - base: the log of the ratio */
    double  sw, sb, se;      /* within-night SD, night-to-night SD, standard error of d (NaN: none) */
    double  thr;             /* a drop beyond -thr is suspected (NaN when se is) */
    int     norm;            /* 1: judged on tokens/s per host GFLOP/s (both nights have it) */
} perf_eval;

/* 1 when there is something to compare (a finished run with throughput in
 * both nights), 0 when not. */
static int perf_evaluate(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs, const nset *ps,
                         const lab_nightly_opts *o, perf_eval *pe) {
    memset(pe, 0, sizeof *pe);
    /* Judged on raw tokens/s. The host speed measured around the sweep
     * (host_sgemm_gflops) is recorded, but dividing by it made the spread
     * worse on the tiny CI model under load (its time is not in sgemm), so
     * the per-host-speed path (norm = 1) is off until a model where it
     * helps is measured (docs/nightly.md). */
    pe->norm = 0;
    pe->cur = arm_log_mean(cs, arm, pe->norm, &pe->nc, &pe->cid);
    double prev = arm_log_mean(ps, arm, pe->norm, &pe->np, &pe->pid);
    if (!pe->nc || !pe->np) return 0;
    double v[5];
    pe->nb = night_means(st, nightly, eid, arm, pe->norm, v, 5);
    if (pe->nb) {
        qsort(v, (size_t)pe->nb, sizeof v[0], cmp_double);
        pe->base = pe->nb % 2 ? v[pe->nb / 2] : 0.5 * (v[pe->nb / 2 - 1] + v[pe->nb / 2]);
    } else {
        pe->base = prev;
        pe->nb = 1;
    }
    pe->d = pe->cur - pe->base;
    pe->sw = within_sd(cs, ps, pe->norm);
    pe->sb = between_sd(st, nightly, eid, arm, pe->norm);
    pe->se = NAN;
    if (!isnan(pe->sw)) pe->se = pe->sw * sqrt(1.0 / pe->nc + 1.0 / pe->np);
    if (!isnan(pe->sb) && (isnan(pe->se) || pe->sb * sqrt(2.0) > pe->se)) pe->se = pe->sb * sqrt(2.0);
    pe->thr = NAN;
    if (!isnan(pe->se)) {
        pe->thr = o->perf_sigmas * pe->se;
        double floor_log = -log(1.0 - o->perf_min_drop);
        if (pe->thr < floor_log) pe->thr = floor_log;
    }
    return 1;
}

/* 1 when tonight's throughput of the arm is a suspected drop (to re-measure). */
static int perf_suspect(const perf_eval *pe) { return !isnan(pe->thr) && pe->d < -pe->thr; }

/* ------------------------------------------------------------ acknowledgements */

/* Tables of this file, created here until the store's migrations have them
 * (see docs/nightly.md): acknowledged findings (`vtlab ack`), and the runs a
 * nightly made to re-measure a suspected throughput drop (kept out of
 * nightly_runs, so they are neither test cases nor the night's repeats). */
static int nightly_tables(lab_store *st, char *err, size_t errlen) {
    return exec_sql(st,
                    "CREATE TABLE IF NOT EXISTS nightly_acks ("
                    "  finding TEXT PRIMARY KEY,"           /* experiment/arm/kind */
                    "  experiment TEXT NOT NULL, arm TEXT NOT NULL, kind TEXT NOT NULL,"
                    "  reason TEXT NOT NULL,"
                    "  acked_at TEXT NOT NULL,"
                    "  nightly_id INTEGER,"                 /* the latest nightly with the regression */
                    "  value REAL,"                         /* performance: the tokens/s acknowledged */
                    "  cleared_at TEXT,"                    /* set when a nightly no longer has it */
                    "  cleared_by INTEGER);"
                    "CREATE TABLE IF NOT EXISTS nightly_remeasure_runs ("
                    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
                    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
                    "  PRIMARY KEY (nightly_id, run_id));",
                    err, errlen);
}

/* The active acknowledgement of experiment/arm/kind, if any: 1 and its
 * reason, nightly and value (NaN: none); 0 when there is none. */
static int find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, char *reason, size_t rlen,
                    int64_t *nightly, double *value) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st),
                           "SELECT reason, coalesce(nightly_id, 0), value FROM nightly_acks WHERE experiment = ?1"
                           " AND arm = ?2 AND kind = ?3 AND cleared_at IS NULL", -1, &s, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(s, 1, eid, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, arm, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, kind, -1, SQLITE_TRANSIENT);
    int found = sqlite3_step(s) == SQLITE_ROW;
    if (found) {
        snprintf(reason, rlen, "%s", lab_col_text(s, 0));
        *nightly = sqlite3_column_int64(s, 1);
        *value = sqlite3_column_type(s, 2) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 2);
    }
    sqlite3_finalize(s);
    return found;
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

static int compare_perf(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs, const nset *ps,
                        const nset *rs, const lab_nightly_opts *o, int64_t *n_reg, char *err, size_t errlen) {
    perf_eval pe;
    if (!perf_evaluate(st, nightly, eid, arm, cs, ps, o, &pe)) return LAB_OK;
    finding f;
    finding_init(&f, eid, arm, "performance", 0);
    f.run_id = pe.cid;
    f.prev_run_id = pe.pid;
    f.value = exp(pe.cur);
    f.prev_value = exp(pe.base);
    double ratio = exp(pe.d);
    const char *unit = pe.norm ? "tokens/s per host sgemm GFLOP/s" : "tokens/s";
    if (isnan(pe.thr)) {
        snprintf(f.message, sizeof f.message,
                 "throughput %.4g -> %.4g %s (x%.3f); not judged: no noise estimate (one repeat per night and fewer "
                 "than 3 earlier nightlies; set \"repeats\" >= 2 in the experiment)", f.prev_value, f.value, unit, ratio);
        snprintf(f.evidence, sizeof f.evidence, "{\"ratio\":%.6g,\"n\":%d,\"prev_n\":%d}", ratio, pe.nc, pe.np);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    /* The re-measurement of a suspected drop (runs of the arm made after the
     * comparison first saw it): a drop is flagged only if it is confirmed. */
    int nr = 0;
    double rlog = rs ? arm_log_mean(rs, arm, pe.norm, &nr, NULL) : NAN;
    int suspect = perf_suspect(&pe), confirmed = suspect && (!nr || rlog - pe.base < -pe.thr);
    f.regression = confirmed;
    snprintf(f.evidence, sizeof f.evidence,
             "{\"ratio\":%.6g,\"threshold_ratio\":%.6g,\"se_log\":%.6g,\"within_sd_log\":%.6g,\"between_sd_log\":%.6g,"
             "\"n\":%d,\"prev_n\":%d,\"baseline_nights\":%d,\"per_host_speed\":%d}", ratio, exp(-pe.thr), pe.se, isnan(pe.sw) ? -1.0 : pe.sw,
             isnan(pe.sb) ? -1.0 : pe.sb, pe.nc, pe.np, pe.nb, pe.norm);
    if (nr) evidence_add(f.evidence, sizeof f.evidence, "\"remeasured_ratio\":%.6g,\"remeasured_n\":%d", exp(rlog - pe.base), nr);
    if (!suspect && fabs(pe.d) < pe.thr) return LAB_OK;    /* within noise: nothing to say */
    const char *noise = !isnan(pe.sb) && pe.sb * sqrt(2.0) >= pe.se ? "night-to-night spread" : "spread of repeats";
    char conf[200] = "";
    if (suspect && nr)
        snprintf(conf, sizeof conf, "; re-measured: x%.3f over %d repeat(s), %s", exp(rlog - pe.base), nr,
                 confirmed ? "confirmed" : "not confirmed: noise, noted");
    else if (suspect)
        snprintf(conf, sizeof conf, "; not re-measured");
    snprintf(f.message, sizeof f.message,
             "throughput %.4g -> %.4g %s (x%.3f over %d repeats vs the median of %d nightlies); noise: standard "
             "error %.1f%% (%s), so a drop below x%.3f is flagged%s%s", f.prev_value, f.value, unit, ratio, pe.nc, pe.nb,
             100 * (exp(pe.se) - 1), noise, exp(-pe.thr), suspect ? "" : "; a speedup, noted", conf);
    /* An acknowledged throughput drop stays silent while tonight is not
     * significantly below the level that was acknowledged. */
    char reason[512];
    int64_t an = 0;
    double av = NAN;
    if (f.regression && find_ack(st, eid, arm, "performance", reason, sizeof reason, &an, &av) &&
        (isnan(av) || av <= 0 || log(f.value / av) >= -pe.thr)) {
        f.regression = 0;
        evidence_add(f.evidence, sizeof f.evidence, "\"acknowledged\":1");
        char m[sizeof f.message];
        snprintf(m, sizeof m, "acknowledged (nightly %lld: %.200s); %.700s", (long long)an, reason, f.message);
        snprintf(f.message, sizeof f.message, "%s", m);
    } else if (f.regression && !isnan(av)) {
        evidence_add(f.evidence, sizeof f.evidence, "\"ack_exceeded\":1");
    }
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

/* New confounds: open, unexpected audit flags that the previous nightly did
 * not have. A flag on a run of this nightly is new unless a run of the same
 * experiment and arm in the previous nightly had the same rule and key; any
 * other flag (claims, older runs) is new when first seen after the previous
 * nightly finished. With no previous nightly, only flags on tonight's runs
 * count (everything else is the baseline). */
static int compare_audit(lab_store *st, int64_t nightly, int64_t prev_overall, int64_t *n_reg, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int have = 0, rc = lab_store_has_table(st, "audit_flags", &have, err, errlen);
    if (rc || !have) return rc;
    if ((rc = prep(st,
                   "SELECT f.id, f.subject_kind, f.subject, f.rule, f.key, f.reason, f.first_seen, r.experiment, r.arm,"
                   " nr.run_id IS NOT NULL,"
                   " EXISTS (SELECT 1 FROM audit_flags g JOIN runs pr ON g.subject_kind = 'run'"
                   "   AND pr.id = CAST(g.subject AS INTEGER) JOIN nightly_runs pn ON pn.run_id = pr.id"
                   "   WHERE pn.nightly_id = (SELECT max(n2.id) FROM nightlies n2 JOIN nightly_runs x ON x.nightly_id = n2.id"
                   "     JOIN runs xr ON xr.id = x.run_id WHERE n2.id < ?1 AND n2.status IN ('PASSED','REGRESSED')"
                   "     AND xr.experiment = r.experiment)"
                   "   AND pr.experiment = r.experiment AND pr.arm = r.arm AND g.rule = f.rule AND g.key = f.key),"
                   " (SELECT finished_at FROM nightlies WHERE id = ?2)"
                   " FROM audit_flags f LEFT JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
                   " LEFT JOIN nightly_runs nr ON nr.nightly_id = ?1 AND nr.run_id = r.id"
                   " WHERE f.resolved_at IS NULL AND f.expected = 0 ORDER BY f.id", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    sqlite3_bind_int64(s, 2, prev_overall);
    while (!rc && sqlite3_step(s) == SQLITE_ROW) {
        int tonight = sqlite3_column_int(s, 9), had_before = sqlite3_column_int(s, 10);
        const char *prev_end = lab_col_text(s, 11), *first_seen = lab_col_text(s, 6);
        int is_new;
        if (tonight) is_new = !had_before;
        else is_new = prev_overall && prev_end[0] && strcmp(first_seen, prev_end) > 0;
        if (!is_new) continue;
        char eid[128], arm[128];
        if (!strcmp(lab_col_text(s, 1), "run") && sqlite3_column_type(s, 7) != SQLITE_NULL) {
            snprintf(eid, sizeof eid, "%s", lab_col_text(s, 7));
            snprintf(arm, sizeof arm, "%s", lab_col_text(s, 8));
        } else {
            snprintf(eid, sizeof eid, "%s", "");
            snprintf(arm, sizeof arm, "%s %s", lab_col_text(s, 1), lab_col_text(s, 2));
        }
        finding f;
        finding_init(&f, eid, arm, "audit", 1);
        if (tonight) f.run_id = atoll(lab_col_text(s, 2));
        snprintf(f.message, sizeof f.message, "new confound %s on %s %s: %s", lab_col_text(s, 3), lab_col_text(s, 1), lab_col_text(s, 2),
                 lab_col_text(s, 5));
        snprintf(f.evidence, sizeof f.evidence, "{\"audit_flag\":%lld}", sqlite3_column_int64(s, 0));
        rc = put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    sqlite3_finalize(s);
    return rc;
}

int lab_nightly_compare(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_regressions, char *err,
                        size_t errlen) {
    *n_regressions = 0;
    int rc = nightly_tables(st, err, errlen);
    if (!rc) rc = exec_sql(st, "BEGIN IMMEDIATE", err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    char **exps = NULL;
    int ne = 0;
    nset cs = {0}, ps = {0}, rs = {0};
    if ((rc = prep(st, "DELETE FROM nightly_findings WHERE nightly_id = ?1", &s, err, errlen))) goto out;
    sqlite3_bind_int64(s, 1, cur);
    sqlite3_step(s);
    sqlite3_finalize(s);
    if ((rc = prep(st, "SELECT DISTINCT r.experiment FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                       " WHERE nr.nightly_id = ?1 ORDER BY 1", &s, err, errlen))) goto out;
    sqlite3_bind_int64(s, 1, cur);
    while (sqlite3_step(s) == SQLITE_ROW) {
        char **q = realloc(exps, (size_t)(ne + 1) * sizeof *q);
        if (!q) break;
        exps = q;
        exps[ne++] = lab_strdup(lab_col_text(s, 0));
    }
    sqlite3_finalize(s);
    for (int e = 0; e < ne && !rc; e++) {
        const char *eid = exps[e];
        int64_t prev = previous_nightly(st, cur, eid);
        if ((rc = load_runs(st, cur, eid, &cs, err, errlen))) break;
        if (prev && (rc = load_runs(st, prev, eid, &ps, err, errlen))) break;
        if ((rc = load_runs_of(st, cur, eid, 1, &rs, err, errlen))) break;
        if (!prev) {
            finding f;
            finding_init(&f, eid, "", "check", 0);
            snprintf(f.message, sizeof f.message, "first nightly of this experiment: a baseline, nothing to compare with");
            rc = put_finding(st, cur, &f, n_regressions, err, errlen);
        }
        for (int i = 0; i < cs.n && !rc; i++) {
            const nrun *r = &cs.r[i];
            rc = compare_checks(st, cur, eid, r, n_regressions, err, errlen);
            if (rc || (i > 0 && !strcmp(cs.r[i - 1].arm, r->arm))) continue;
            /* Once per arm: */
            if ((rc = compare_repeats(st, cur, eid, &cs, r->arm, n_regressions, err, errlen))) break;
            if (!prev) continue;
            const nrun *c0 = find_run(&cs, r->arm, 0), *p0 = find_run(&ps, r->arm, 0);
            if (!p0) {
                finding f;
                finding_init(&f, eid, r->arm, "check", 0);
                snprintf(f.message, sizeof f.message, "no finished run of this arm in nightly %lld: nothing to compare with",
                         (long long)prev);
                rc = put_finding(st, cur, &f, n_regressions, err, errlen);
                continue;
            }
            if (c0 && !c0->is_ref && (rc = compare_accuracy(st, cur, eid, c0, p0, o, n_regressions, err, errlen))) break;
            if (c0 && (rc = compare_numerics(st, cur, eid, c0, p0, n_regressions, err, errlen))) break;
            if ((rc = compare_perf(st, cur, eid, r->arm, &cs, &ps, &rs, o, n_regressions, err, errlen))) break;
        }
        nset_free(&cs);
        nset_free(&ps);
        nset_free(&rs);
    }
    if (!rc) {
        int64_t prev_overall = 0;
        if (!prep(st, "SELECT max(id) FROM nightlies WHERE id < ?1 AND status IN ('PASSED','REGRESSED')", &s, err, errlen)) {
            sqlite3_bind_int64(s, 1, cur);
            if (sqlite3_step(s) == SQLITE_ROW) prev_overall = sqlite3_column_int64(s, 0);
            sqlite3_finalize(s);
        }
        rc = compare_audit(st, cur, prev_overall, n_regressions, err, errlen);
    }
    /* An acknowledgement ends when a nightly of its experiment no longer has
     * the finding (fixed, or the baseline moved): a recurrence alerts again. */
    if (!rc) {
        char idt[32], now[32];
        snprintf(idt, sizeof idt, "%lld", (long long)cur);
        lab_now_iso(now);
        const char *p2[2] = {idt, now};
        rc = lab_store_exec(st,
                            "UPDATE nightly_acks SET cleared_at = ?2, cleared_by = ?1 WHERE cleared_at IS NULL AND experiment IN"
                            " (SELECT DISTINCT r.experiment FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                            "  WHERE nr.nightly_id = ?1) AND NOT EXISTS (SELECT 1 FROM nightly_findings f WHERE"
                            "  f.nightly_id = ?1 AND f.experiment = nightly_acks.experiment AND f.arm = nightly_acks.arm"
                            "  AND f.kind = nightly_acks.kind AND (f.regression = 1 OR"
                            "  json_extract(f.evidence, '$.acknowledged') = 1))", 2, p2, err, errlen);
    }
out:
    nset_free(&cs);
    nset_free(&ps);
    nset_free(&rs);
    for (int e = 0; e < ne; e++) free(exps[e]);
    free(exps);
    if (rc) {
        sqlite3_exec(lab_store_db(st), "ROLLBACK", NULL, NULL, NULL);
        *n_regressions = 0;
        return rc;
    }
    return exec_sql(st, "COMMIT", err, errlen);
}

/* ------------------------------------------------------------ outputs */

typedef struct nightly_row {
    int64_t id;
    char    started[32], finished[32], commit[64], code_version[200], status[16], host[128], audit[256];
    int64_t n_runs, n_reg;
} nightly_row;

static int load_nightly(lab_store *st, int64_t id, nightly_row *n, char *err, size_t errlen) {
    memset(n, 0, sizeof *n);
    sqlite3_stmt *s;
    int rc = prep(st, "SELECT id, started_at, coalesce(finished_at, ''), git_commit, code_version, status, host, audit,"
                      " n_runs, n_regressions FROM nightlies WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    if (sqlite3_step(s) != SQLITE_ROW) {
        sqlite3_finalize(s);
        return lab_errf(err, errlen, LAB_EINPUT, "nightly %lld: no such nightly", (long long)id);
    }
    n->id = sqlite3_column_int64(s, 0);
    snprintf(n->started, sizeof n->started, "%s", lab_col_text(s, 1));
    snprintf(n->finished, sizeof n->finished, "%s", lab_col_text(s, 2));
    snprintf(n->commit, sizeof n->commit, "%s", lab_col_text(s, 3));
    snprintf(n->code_version, sizeof n->code_version, "%s", lab_col_text(s, 4));
    snprintf(n->status, sizeof n->status, "%s", lab_col_text(s, 5));
    snprintf(n->host, sizeof n->host, "%s", lab_col_text(s, 6));
    snprintf(n->audit, sizeof n->audit, "%s", lab_col_text(s, 7));
    n->n_runs = sqlite3_column_int64(s, 8);
    n->n_reg = sqlite3_column_int64(s, 9);
    sqlite3_finalize(s);
    return LAB_OK;
}

/* The test cases of a nightly: (experiment, arm) pairs of its runs, with the
 * summed wall time. */
typedef struct tcase {
    char    eid[128], arm[128];
    double  time;
    int     runs;
} tcase;

static int load_cases(lab_store *st, int64_t id, tcase **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s;
    int rc = prep(st, "SELECT r.experiment, r.arm, coalesce(sum(r.wall_s), 0), count(*) FROM nightly_runs nr"
                      " JOIN runs r ON r.id = nr.run_id WHERE nr.nightly_id = ?1 GROUP BY r.experiment, r.arm"
                      " ORDER BY r.experiment, min(r.id)", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        tcase *q = realloc(*out, (size_t)(*n + 1) * sizeof *q);
        if (!q) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        *out = q;
        tcase *c = &q[(*n)++];
        snprintf(c->eid, sizeof c->eid, "%s", lab_col_text(s, 0));
        snprintf(c->arm, sizeof c->arm, "%s", lab_col_text(s, 1));
        c->time = sqlite3_column_double(s, 2);
        c->runs = sqlite3_column_int(s, 3);
    }
    sqlite3_finalize(s);
    return LAB_OK;
}

/* Findings of (experiment, arm) of a nightly appended to b as lines
 * "kind: message"; regression selects regressions (1) or notes (0). */
static int case_findings(lab_store *st, int64_t id, const char *eid, const char *arm, int regression, lab_buf *b) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st),
                           "SELECT kind, message FROM nightly_findings WHERE nightly_id = ?1 AND experiment = ?2"
                           " AND (arm = ?3 OR (?4 AND arm = '')) AND regression = ?5 ORDER BY id", -1, &s, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_text(s, 2, eid, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, arm, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 4, arm[0] != 0 && !regression);
    sqlite3_bind_int(s, 5, regression);
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        lab_buf_printf(b, "%s%s: %s", b->len ? "\n" : "", lab_col_text(s, 0), lab_col_text(s, 1));
        n++;
    }
    sqlite3_finalize(s);
    return n;
}

static void x(lab_buf *b, const char *s) { lab_esc_html(b, s); }

int lab_nightly_write_junit(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    nightly_row nr;
    int rc = load_nightly(st, id, &nr, err, errlen);
    if (rc) return rc;
    tcase *cs = NULL;
    int nc = 0;
    if ((rc = load_cases(st, id, &cs, &nc, err, errlen))) return rc;
    /* Audit findings that belong to no arm of the nightly get a test case of their own. */
    lab_buf ledger = {0};
    sqlite3_stmt *s;
    if ((rc = prep(st, "SELECT message FROM nightly_findings f WHERE nightly_id = ?1 AND regression = 1 AND kind = 'audit'"
                       " AND NOT EXISTS (SELECT 1 FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id WHERE nr.nightly_id = ?1"
                       " AND r.experiment = f.experiment AND r.arm = f.arm)", &s, err, errlen))) {
        free(cs);
        return rc;
    }
    sqlite3_bind_int64(s, 1, id);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) lab_buf_printf(&ledger, "%s%s", ledger.len ? "\n" : "", lab_col_text(s, 0));
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) {
        lab_buf_free(&ledger);
        free(cs);
        return lab_store_error(st, "junit.xml: the audit's findings", err, errlen);
    }
    int audit_failed = !strncmp(nr.audit, "failed:", 7);
    int total = nc + 1, failures = ledger.len ? 1 : 0;
    int *fail = calloc((size_t)(nc ? nc : 1), sizeof *fail);
    lab_buf *reg = calloc((size_t)(nc ? nc : 1), sizeof *reg), *notes = calloc((size_t)(nc ? nc : 1), sizeof *notes);
    if (!fail || !reg || !notes) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto out; }
    double ttime = 0;
    for (int i = 0; i < nc; i++) {
        fail[i] = case_findings(st, id, cs[i].eid, cs[i].arm, 1, &reg[i]) > 0;
        case_findings(st, id, cs[i].eid, cs[i].arm, 0, &notes[i]);
        failures += fail[i];
        ttime += cs[i].time;
    }
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vtlab nightly %lld\" tests=\"%d\" "
                       "failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n", (long long)id, total, failures, audit_failed, ttime);
    for (int i = 0; i < nc;) {
        int j = i, tf = 0;
        double t = 0;
        while (j < nc && !strcmp(cs[j].eid, cs[i].eid)) { tf += fail[j]; t += cs[j].time; j++; }
        lab_buf_printf(&b, "  <testsuite name=\"");
        x(&b, cs[i].eid);
        lab_buf_printf(&b, "\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" time=\"%.3f\" timestamp=\"", j - i, tf, t);
        x(&b, nr.started);
        lab_buf_printf(&b, "\" hostname=\"");
        x(&b, nr.host);
        lab_buf_printf(&b, "\">\n    <properties><property name=\"nightly\" value=\"%lld\"/><property name=\"commit\" value=\"",
                       (long long)id);
        x(&b, nr.commit);
        lab_buf_printf(&b, "\"/><property name=\"code_version\" value=\"");
        x(&b, nr.code_version);
        lab_buf_printf(&b, "\"/></properties>\n");
        for (int k = i; k < j; k++) {
            lab_buf_printf(&b, "    <testcase classname=\"");
            x(&b, cs[k].eid);
            lab_buf_printf(&b, "\" name=\"");
            x(&b, cs[k].arm);
            lab_buf_printf(&b, "\" time=\"%.3f\">\n", cs[k].time);
            if (fail[k]) {
                char first[300];
                snprintf(first, sizeof first, "%s", reg[k].data);
                first[strcspn(first, "\n")] = 0;
                lab_buf_printf(&b, "      <failure type=\"regression\" message=\"");
                x(&b, first);
                lab_buf_printf(&b, "\">");
                x(&b, reg[k].data);
                lab_buf_printf(&b, "</failure>\n");
            }
            lab_buf_printf(&b, "      <system-out>%d run(s) in this nightly", cs[k].runs);
            if (notes[k].len) { lab_buf_printf(&b, "\n"); x(&b, notes[k].data); }
            lab_buf_printf(&b, "</system-out>\n    </testcase>\n");
        }
        lab_buf_printf(&b, "  </testsuite>\n");
        i = j;
    }
    lab_buf_printf(&b, "  <testsuite name=\"audit\" tests=\"1\" failures=\"%d\" errors=\"%d\" skipped=\"0\" time=\"0\">\n"
                       "    <testcase classname=\"audit\" name=\"no new confounds outside the nightly's arms\" time=\"0\">\n",
                   failures && ledger.len ? 1 : 0, audit_failed);
    if (audit_failed) {
        lab_buf_printf(&b, "      <error type=\"audit\" message=\"the audit did not run to the end\">");
        x(&b, nr.audit);
        lab_buf_printf(&b, "</error>\n");
    }
    if (ledger.len) {
        lab_buf_printf(&b, "      <failure type=\"audit\" message=\"new confound flags\">");
        x(&b, ledger.data);
        lab_buf_printf(&b, "</failure>\n");
    }
    lab_buf_printf(&b, "      <system-out>audit: ");
    x(&b, nr.audit);
    lab_buf_printf(&b, "</system-out>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : vt_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
out:
    for (int i = 0; reg && i < nc; i++) lab_buf_free(&reg[i]);
    for (int i = 0; notes && i < nc; i++) lab_buf_free(&notes[i]);
    free(reg);
    free(notes);
    free(fail);
    free(cs);
    lab_buf_free(&ledger);
    return rc;
}

int lab_nightly_write_md(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    nightly_row nr;
    int rc = load_nightly(st, id, &nr, err, errlen);
    if (rc) return rc;
    tcase *cs = NULL;
    int nc = 0;
    if ((rc = load_cases(st, id, &cs, &nc, err, errlen))) return rc;
    lab_buf b = {0};
    lab_buf_printf(&b, "# vtlab nightly %lld: %s\n\n", (long long)id,
                   !strcmp(nr.status, "PASSED") ? "passed" : !strcmp(nr.status, "REGRESSED") ? "**REGRESSED**" : nr.status);
    lab_buf_printf(&b, "- started ");
    lab_esc_md(&b, nr.started);
    lab_buf_printf(&b, ", finished ");
    lab_esc_md(&b, nr.finished);
    lab_buf_printf(&b, " on ");
    lab_esc_md(&b, nr.host);
    lab_buf_printf(&b, "\n- code `");
    lab_esc_md_code(&b, nr.code_version);
    lab_buf_printf(&b, "`\n- %lld run(s), %lld regression(s)\n- audit: ", (long long)nr.n_runs, (long long)nr.n_reg);
    lab_esc_md(&b, nr.audit);
    lab_buf_printf(&b, "\n- full report: `index.html`; JUnit: `junit.xml`; feed: `regressions.atom`\n\n");
    lab_buf_printf(&b, "| experiment | arm | result | findings |\n|---|---|---|---|\n");
    for (int i = 0; i < nc; i++) {
        lab_buf r = {0}, n = {0};
        int bad = case_findings(st, id, cs[i].eid, cs[i].arm, 1, &r);
        case_findings(st, id, cs[i].eid, cs[i].arm, 0, &n);
        lab_buf_printf(&b, "| ");
        lab_esc_md(&b, cs[i].eid);
        lab_buf_printf(&b, " | ");
        lab_esc_md(&b, cs[i].arm);
        lab_buf_printf(&b, " | %s | ", bad ? "**REGRESSION**" : "ok");
        if (r.len) lab_esc_md(&b, r.data);
        if (r.len && n.len) lab_buf_printf(&b, "<br>");
        if (n.len) lab_esc_md(&b, n.data);
        lab_buf_printf(&b, " |\n");
        lab_buf_free(&r);
        lab_buf_free(&n);
    }
    sqlite3_stmt *s;
    int head = 0;
    if (!prep(st, "SELECT arm, message FROM nightly_findings WHERE nightly_id = ?1 AND kind = 'audit' AND experiment = ''",
              &s, err, errlen)) {
        sqlite3_bind_int64(s, 1, id);
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (!head++) lab_buf_printf(&b, "\n## New confounds in the ledger\n\n");
            lab_buf_printf(&b, "- ");
            lab_esc_md(&b, lab_col_text(s, 1));
            lab_buf_printf(&b, "\n");
        }
        sqlite3_finalize(s);
    }
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : vt_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    free(cs);
    return rc;
}

int lab_nightly_write_atom(lab_store *st, const char *path, char *err, size_t errlen) {
    char now[32], host[128] = "localhost";
    lab_now_iso(now);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\">\n"
                       "  <title>vtlab nightly regressions</title>\n  <id>urn:vtlab:nightly-regressions:");
    x(&b, host);
    lab_buf_printf(&b, "</id>\n  <updated>%s</updated>\n  <author><name>vtlab nightly</name></author>\n"
                       "  <link rel=\"alternate\" href=\"index.html\"/>\n", now);
    sqlite3_stmt *s;
    int rc = prep(st,
                  "SELECT f.id, f.nightly_id, f.experiment, f.arm, f.kind, f.message, coalesce(n.finished_at, n.started_at),"
                  " n.git_commit FROM nightly_findings f JOIN nightlies n ON n.id = f.nightly_id WHERE f.regression = 1"
                  " AND json_extract(f.evidence, '$.persistent_since') IS NULL"
                  " AND f.nightly_id IN (SELECT id FROM nightlies ORDER BY id DESC LIMIT 20) ORDER BY f.nightly_id DESC, f.id",
                  &s, err, errlen);
    if (rc) { lab_buf_free(&b); return rc; }
    while (sqlite3_step(s) == SQLITE_ROW) {
        lab_buf_printf(&b, "  <entry>\n    <title>nightly %lld: ", sqlite3_column_int64(s, 1));
        x(&b, lab_col_text(s, 2));
        lab_buf_printf(&b, "%s", lab_col_text(s, 2)[0] && lab_col_text(s, 3)[0] ? "/" : "");
        x(&b, lab_col_text(s, 3));
        lab_buf_printf(&b, ": ");
        x(&b, lab_col_text(s, 4));
        lab_buf_printf(&b, " regression</title>\n    <id>urn:vtlab:nightly-regressions:");
        x(&b, host);
        lab_buf_printf(&b, ":finding:%lld</id>\n    <updated>", sqlite3_column_int64(s, 0));
        x(&b, lab_col_text(s, 6));
        lab_buf_printf(&b, "</updated>\n    <link rel=\"alternate\" href=\"index.html#nightly\"/>\n"
                           "    <content type=\"text\">commit ");
        x(&b, lab_col_text(s, 7));
        lab_buf_printf(&b, ": ");
        x(&b, lab_col_text(s, 5));
        lab_buf_printf(&b, "</content>\n  </entry>\n");
    }
    sqlite3_finalize(s);
    lab_buf_printf(&b, "</feed>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : vt_cli_write_file_atomic(path, b.data, b.len, err, errlen);
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
    if (!rc) rc = vt_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    if (rc) unlink(path);
    snprintf(path, sizeof path, "%s/nightly.md", out_dir);
    if (!rc) rc = vt_cli_write_file_atomic(path, md.data, md.len, err, errlen);
    if (rc) unlink(path);
    lab_buf_free(&b);
    lab_buf_free(&md);
    return rc;
}

/* Test-only hook (docs/nightly.md): VTLAB_TEST_PLANT_SLOWDOWN=F, 0 < F < 1,
 * scales the tokens/s this process measured (runs after run id `after`) by
 * 1 - F, as a code change that made the forward pass that much slower
 * would. It exists to measure the detection rate of the throughput check
 * (tests/soak/nightly_noise.sh); a nightly run with it says so on stderr.
 * The model has no knob that slows the forward pass; one (a sleep
 * proportional to the forward time) would plant it where it happens. */
static int plant_slowdown(lab_store *st, int64_t after, const char *host, int64_t pid, char *err, size_t errlen) {
    const char *v = getenv("VTLAB_TEST_PLANT_SLOWDOWN");
    if (!v || !*v) return LAB_OK;
    char *end;
    double f = strtod(v, &end);
    if (*end || !(f > 0 && f < 1))
        return lab_errf(err, errlen, LAB_EINPUT, "VTLAB_TEST_PLANT_SLOWDOWN must be a fraction in (0, 1), got \"%s\"", v);
    fprintf(stderr, "vtlab nightly: TEST HOOK VTLAB_TEST_PLANT_SLOWDOWN=%g: throughput of this night's runs scaled by %g\n",
            f, 1 - f);
    char a[32], ps[32], k[32];
    snprintf(a, sizeof a, "%lld", (long long)after);
    snprintf(ps, sizeof ps, "%lld", (long long)pid);
    snprintf(k, sizeof k, "%.17g", 1 - f);
    const char *p[4] = {a, host, ps, k};
    return lab_store_exec(st, "UPDATE metrics SET value = value * CAST(?4 AS REAL) WHERE name = 'tokens_per_s' AND run_id IN"
                              " (SELECT id FROM runs WHERE id > ?1 AND host = ?2 AND pid = ?3)", 4, p, err, errlen);
}

/* The host's speed now, measured in the same run as the forward passes it
 * calibrates: the best of 5 timings of 4 sgemm 256x256x256 (the BLAS the
 * forward pass uses, with its threads), in GFLOP/s; NaN if out of memory.
 * Throughput per host GFLOP/s cancels a machine that is slower tonight for
 * every program (load, frequency), not a slower forward pass. */
static double host_sgemm_gflops(void) {
    enum { N = 256, ITER = 4, REPS = 5 };
    float *a = malloc(sizeof(float) * N * N * 3);
    if (!a) return NAN;
    float *b = a + N * N, *c = b + N * N;
    for (int i = 0; i < N * N; i++) a[i] = (float)(i % 17) / 17.0f, b[i] = (float)(i % 13) / 13.0f;
    double best = INFINITY;
    for (int r = 0; r < REPS; r++) {
        double t0 = lab_mono();
        for (int k = 0; k < ITER; k++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        double dt = lab_mono() - t0;
        if (dt > 0 && dt < best) best = dt;
    }
    free(a);
    return isinf(best) ? NAN : 2.0 * N * N * N * ITER / best / 1e9;
}

/* Records the host speed (geometric mean of the measurements before and
 * after) as the metric host_sgemm_gflops of the runs this process made
 * after run id `after`. */
static int record_host(lab_store *st, int64_t after, const char *host, int64_t pid, double g0, double g1, char *err,
                       size_t errlen) {
    if (!(g0 > 0) || !(g1 > 0)) return LAB_OK;
    char a[32], ps[32], g[64];
    snprintf(a, sizeof a, "%lld", (long long)after);
    snprintf(ps, sizeof ps, "%lld", (long long)pid);
    snprintf(g, sizeof g, "%.17g", sqrt(g0 * g1));
    const char *p[4] = {a, host, ps, g};
    return lab_store_exec(st, "INSERT OR REPLACE INTO metrics (run_id, name, value) SELECT id, 'host_sgemm_gflops',"
                              " CAST(?4 AS REAL) FROM runs WHERE id > ?1 AND host = ?2 AND pid = ?3", 4, p, err, errlen);
}

/* Largest run id so far (0 when none). */
static int64_t max_run_id(lab_store *st) {
    sqlite3_stmt *s;
    int64_t v = 0;
    if (sqlite3_prepare_v2(lab_store_db(st), "SELECT coalesce(max(id), 0) FROM runs", -1, &s, NULL) != SQLITE_OK) return 0;
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Confirmation of throughput drops: every arm whose throughput tonight is a
 * suspected drop (perf_evaluate, the same judgement as the comparison) is
 * measured once more, right away (its experiment rerun with --force, only
 * that arm when it is the only suspect: the reference arm comes along). The
 * new runs go to nightly_remeasure_runs; the comparison flags a drop only
 * when the re-measurement shows it too. Failures here are reported and
 * leave the drops unconfirmed-but-flagged (as without this step). */
static void remeasure_suspects(lab_store *st, int64_t id, char **files, char **ids, int nf, const char *db_path,
                               const lab_nightly_opts *o, const char *host, int64_t pid) {
    for (int i = 0; i < nf && !lab_interrupted; i++) {
        int64_t prev = previous_nightly(st, id, ids[i]);
        if (!prev) continue;
        nset cs = {0}, ps = {0};
        char err[1024] = "";
        if (load_runs(st, id, ids[i], &cs, err, sizeof err) || load_runs(st, prev, ids[i], &ps, err, sizeof err)) {
            nset_free(&cs);
            nset_free(&ps);
            continue;
        }
        int n_sus = 0;
        const char *arm = NULL;
        for (int k = 0; k < cs.n; k++) {
            if (k > 0 && !strcmp(cs.r[k - 1].arm, cs.r[k].arm)) continue;
            perf_eval pe;
            if (perf_evaluate(st, id, ids[i], cs.r[k].arm, &cs, &ps, o, &pe) && perf_suspect(&pe)) {
                n_sus++;
                arm = cs.r[k].arm;
            }
        }
        char only[128] = "";
        if (n_sus == 1) snprintf(only, sizeof only, "%s", arm);
        nset_free(&cs);
        nset_free(&ps);
        if (!n_sus) continue;
        printf("== %s: a throughput drop on %s: measuring it again\n", files[i], only[0] ? only : "several arms");
        fflush(stdout);
        int64_t before = max_run_id(st);
        lab_run_opts ro = {db_path, only[0] ? only : NULL, 1, isatty(2)};
        lab_run_summary sum = {0};
        double g0 = host_sgemm_gflops();
        int r = lab_run_experiment(files[i], &ro, &sum, err, sizeof err);
        double g1 = host_sgemm_gflops();
        if (r) fprintf(stderr, "vtlab nightly: re-measuring %s: %s\n", files[i], err);
        if (record_host(st, before, host, pid, g0, g1, err, sizeof err))
            fprintf(stderr, "vtlab nightly: re-measuring %s: %s\n", files[i], err);
        char b[32], ps2[32], idt[32];
        snprintf(b, sizeof b, "%lld", (long long)before);
        snprintf(ps2, sizeof ps2, "%lld", (long long)pid);
        snprintf(idt, sizeof idt, "%lld", (long long)id);
        const char *p4[4] = {idt, b, host, ps2};
        if (plant_slowdown(st, before, host, pid, err, sizeof err) ||
            lab_store_exec(st, "INSERT OR IGNORE INTO nightly_remeasure_runs (nightly_id, run_id) SELECT ?1, id FROM runs"
                               " WHERE id > ?2 AND host = ?3 AND pid = ?4", 4, p4, err, sizeof err))
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

static int run_nightly(const lab_nightly_opts *o, int64_t *id_out, int64_t *n_reg, char *err, size_t errlen) {
    char **files = NULL, **ids = NULL;
    int nf = 0;
    int rc = list_experiments(o->exp_dir, &files, &ids, &nf, err, errlen);
    lab_store *st = NULL;
    int64_t id = 0, before = 0, pid = getpid();
    char host[256] = "unknown", now[32];
    if (rc) goto out;
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    if ((rc = lab_store_open(&st, o->db_path, err, errlen))) goto out;
    if ((rc = nightly_tables(st, err, errlen))) goto out;

    /* A nightly left RUNNING by a dead process on this host failed. */
    sqlite3_stmt *s;
    if ((rc = prep(st, "SELECT id, pid FROM nightlies WHERE status = 'RUNNING' AND host = ?1", &s, err, errlen))) goto out;
    sqlite3_bind_text(s, 1, host, -1, SQLITE_TRANSIENT);
    int64_t dead[64];
    int nd = 0;
    while (nd < 64 && sqlite3_step(s) == SQLITE_ROW)
        if (kill((pid_t)sqlite3_column_int64(s, 1), 0) != 0 && errno == ESRCH) dead[nd++] = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    for (int i = 0; i < nd; i++) {
        char idt[32];
        snprintf(idt, sizeof idt, "%lld", (long long)dead[i]);
        const char *p[1] = {idt};
        lab_store_exec(st, "UPDATE nightlies SET status = 'FAILED', error = 'the process died (found by a later nightly)'"
                           " WHERE id = ?1", 1, p, err, errlen);
    }

    lab_now_iso(now);
    if ((rc = exec_sql(st, "BEGIN IMMEDIATE", err, errlen))) goto out;
    if ((rc = prep(st, "INSERT INTO nightlies (started_at, status, git_commit, code_version, host, pid, experiments_dir,"
                       " previous_id) VALUES (?1, 'RUNNING', ?2, ?3, ?4, ?5, ?6,"
                       " (SELECT max(id) FROM nightlies WHERE status IN ('PASSED','REGRESSED')))", &s, err, errlen))) {
        sqlite3_exec(lab_store_db(st), "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    sqlite3_bind_text(s, 1, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, vt_build_commit(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, vt_build_info(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 5, pid);
    sqlite3_bind_text(s, 6, o->exp_dir, -1, SQLITE_TRANSIENT);
    int ok = sqlite3_step(s) == SQLITE_DONE;
    sqlite3_finalize(s);
    id = sqlite3_last_insert_rowid(lab_store_db(st));
    if (ok && !prep(st, "SELECT coalesce(max(id), 0) FROM runs", &s, err, errlen)) {
        if (sqlite3_step(s) == SQLITE_ROW) before = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    if (!ok || (rc = exec_sql(st, "COMMIT", err, errlen))) {
        if (!rc) rc = lab_errf(err, errlen, LAB_EIO, "record the nightly: %s", sqlite3_errmsg(lab_store_db(st)));
        sqlite3_exec(lab_store_db(st), "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    *id_out = id;
    printf("nightly %lld: %d experiment file(s) in %s, code %s\n", (long long)id, nf, o->exp_dir, vt_build_info());
    fflush(stdout);
    /* --out must be writable before the sweep, and last night's files must
     * not look like tonight's while it runs (or if it dies). */
    if ((rc = lab_mkdirs(o->out_dir, err, errlen)) ||
        (rc = write_unfinished(o->out_dir, id, "RUNNING", "the nightly is running, or died before it finished", err,
                               errlen))) {
        lab_err_prefix(err, errlen, rc, "outputs");
        goto out;
    }

    /* The sweep: the same runner as `vtlab sweep`, every run redone. */
    lab_install_signals();
    lab_run_summary sum = {0};
    char sweep_err[2048] = "";
    int sweep_rc = 0;
    for (int i = 0; i < nf && !lab_interrupted; i++) {
        lab_run_opts ro = {o->db_path, NULL, 1, isatty(2)};
        printf("== %s\n", files[i]);
        fflush(stdout);
        int64_t before_exp = max_run_id(st);
        double g0 = host_sgemm_gflops();
        int r = lab_run_experiment(files[i], &ro, &sum, sweep_err, sizeof sweep_err);
        double g1 = host_sgemm_gflops();
        char herr[512];
        if (record_host(st, before_exp, host, pid, g0, g1, herr, sizeof herr))
            fprintf(stderr, "vtlab nightly: host speed of %s not recorded: %s\n", files[i], herr);
        if (r) {
            fprintf(stderr, "vtlab nightly: %s\n", sweep_err);
            if (!sweep_rc) sweep_rc = r;
        }
    }
    /* The runs this process made belong to this nightly. */
    char b[32], ps[32], idt[32];
    snprintf(b, sizeof b, "%lld", (long long)before);
    snprintf(ps, sizeof ps, "%lld", (long long)pid);
    snprintf(idt, sizeof idt, "%lld", (long long)id);
    const char *p4[4] = {idt, b, host, ps};
    if ((rc = lab_store_exec(st, "INSERT OR IGNORE INTO nightly_runs (nightly_id, run_id) SELECT ?1, id FROM runs"
                                 " WHERE id > ?2 AND host = ?3 AND pid = ?4", 4, p4, err, errlen))) goto out;
    if ((rc = plant_slowdown(st, before, host, pid, err, errlen))) goto out;
    /* A throughput drop is confirmed by a second measurement before it is flagged. */
    if (!lab_interrupted) remeasure_suspects(st, id, files, ids, nf, o->db_path, o, host, pid);

    /* The audit: flags for every run, ours included. */
    char audit[256] = "not run (--no-audit)", audit_err[1100] = "";
    int audit_rc = 0;
    if (o->audit && !lab_interrupted) {
        if (!lab_path_exists(o->specs_dir)) {
            snprintf(audit, sizeof audit, "skipped: %s does not exist", o->specs_dir);
        } else {
            lab_audit_opts ao = {o->db_path, o->specs_dir};
            lab_audit_result ar;
            memset(&ar, 0, sizeof ar);
            char aerr[1024] = "";
            int arc = lab_audit_run(&ao, &ar, NULL, aerr, sizeof aerr);
            if (arc) {
                /* a nightly whose audit failed is not green: FAILED, with the reason */
                snprintf(audit, sizeof audit, "failed: %.200s", aerr);
                snprintf(audit_err, sizeof audit_err, "audit failed: %.1024s", aerr);
                audit_rc = arc;
            } else
                snprintf(audit, sizeof audit, "%lld open confound(s), %lld expected (replays), %lld new, %lld resolved",
                         (long long)ar.n_open, (long long)ar.n_expected, (long long)ar.n_new, (long long)ar.n_resolved);
        }
        printf("audit: %s\n", audit);
    }

    int64_t nreg = 0;
    if ((rc = lab_nightly_compare(st, id, o, &nreg, err, errlen))) goto out;
    *n_reg = nreg;
    lab_now_iso(now);
    char nr_s[32];
    snprintf(nr_s, sizeof nr_s, "%lld", (long long)nreg);
    /* A sweep error that produced no failed run (e.g. a model that cannot be
     * built) fails the night, and it is then never used as a baseline. */
    const char *status = lab_interrupted || audit_rc || (sweep_rc && !nreg) ? "FAILED" : nreg ? "REGRESSED" : "PASSED";
    char error[2100] = "";
    if (sweep_rc) snprintf(error, sizeof error, "%s", sweep_err);
    else if (audit_rc) snprintf(error, sizeof error, "%s", audit_err);
    if (lab_interrupted) snprintf(error, sizeof error, "interrupted by a signal");
    const char *p6[6] = {idt, now, status, nr_s, audit, error[0] ? error : NULL};
    /* The status and the outputs are one unit: the status is committed only
     * once every output is written (the outputs read it inside the same
     * transaction), junit.xml last, so that until then CI finds the
     * "not finished" junit.xml. A failure rolls the status back to RUNNING,
     * and the code below records FAILED with the error. */
    if ((rc = exec_sql(st, "BEGIN IMMEDIATE", err, errlen))) goto out;
    char path[4200];
    lab_report_opts ro = {o->out_dir, o->db_path, o->plots};
    lab_report_result rr;
    int in_outputs = 0;
    if ((rc = lab_store_exec(st, "UPDATE nightlies SET finished_at = ?2, status = ?3, n_regressions = ?4, audit = ?5,"
                                 " error = ?6, n_runs = (SELECT count(*) FROM nightly_runs WHERE nightly_id = ?1)"
                                 " WHERE id = ?1", 6, p6, err, errlen))) goto rollback;
    in_outputs = 1;
    if ((rc = lab_report_write(st, &ro, &rr, err, errlen))) goto rollback;
    snprintf(path, sizeof path, "%s/nightly.md", o->out_dir);
    if ((rc = lab_nightly_write_md(st, id, path, err, errlen))) goto rollback;
    snprintf(path, sizeof path, "%s/regressions.atom", o->out_dir);
    if ((rc = lab_nightly_write_atom(st, path, err, errlen))) goto rollback;
    snprintf(path, sizeof path, "%s/junit.xml", o->out_dir);
    if ((rc = lab_nightly_write_junit(st, id, path, err, errlen))) goto rollback;
    if ((rc = exec_sql(st, "COMMIT", err, errlen))) goto rollback;
    if (sweep_rc && !nreg) { rc = sweep_rc; snprintf(err, errlen, "%s", sweep_err); }
    else if (audit_rc) { rc = audit_rc; snprintf(err, errlen, "%s", audit_err); }
    goto out;
rollback:
    sqlite3_exec(lab_store_db(st), "ROLLBACK", NULL, NULL, NULL);
    if (in_outputs) lab_err_prefix(err, errlen, rc, "outputs");
    {   /* what CI finds: this nightly's failure, or nothing (never last night's) */
        char e2[256];
        write_unfinished(o->out_dir, id, "FAILED", err, e2, sizeof e2);
    }
out:
    if (rc && st && id) {
        char idt2[32];
        snprintf(idt2, sizeof idt2, "%lld", (long long)id);
        char e2[256];
        const char *p2[2] = {idt2, err};
        lab_store_exec(st, "UPDATE nightlies SET status = 'FAILED', error = ?2 WHERE id = ?1 AND status = 'RUNNING'", 2, p2,
                       e2, sizeof e2);
    }
    lab_store_close(st);
    for (int i = 0; i < nf; i++) free(files[i]);
    for (int i = 0; ids && i < nf; i++) free(ids[i]);
    free(files);
    free(ids);
    return rc;
}

static int parse_fraction(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > lo && v < hi)) {
        fprintf(stderr, "vtlab nightly: %s must be a number in (%g, %g), got \"%s\"\n", opt, lo, hi, s);
        return 2;
    }
    *out = v;
    return 0;
}

int lab_nightly_main(int argc, char **argv) {
    lab_nightly_opts o;
    lab_nightly_defaults(&o);
    int have_dir = 0, specs_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes = !strcmp(a, "--db") || !strcmp(a, "--out") || !strcmp(a, "--specs") || !strcmp(a, "--alpha") ||
                    !strcmp(a, "--perf-min-drop");
        if (takes) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "vtlab nightly: %s needs a value (see `vtlab --help`)\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--db")) o.db_path = v;
            else if (!strcmp(a, "--out")) o.out_dir = v;
            else if (!strcmp(a, "--specs")) { o.specs_dir = v; specs_given = 1; }
            else if (!strcmp(a, "--alpha")) { if (parse_fraction(a, v, 0, 1, &o.alpha)) return 2; }
            else if (parse_fraction(a, v, 0, 1, &o.perf_min_drop)) return 2;
        } else if (!strcmp(a, "--no-audit")) o.audit = 0;
        else if (!strcmp(a, "--no-plots")) o.plots = 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "vtlab nightly: unknown option %s (see `vtlab --help`)\n", a);
            return 2;
        } else if (!have_dir) { o.exp_dir = a; have_dir = 1; }
        else {
            fprintf(stderr, "vtlab nightly: unexpected argument %s (one experiments DIR at most)\n", a);
            return 2;
        }
    }
    const char *plant = getenv("VTLAB_TEST_PLANT_SLOWDOWN");   /* test-only: checked before anything is written */
    if (plant && *plant) {
        char *end;
        double f = strtod(plant, &end);
        if (*end || !(f > 0 && f < 1)) {
            fprintf(stderr, "vtlab nightly: VTLAB_TEST_PLANT_SLOWDOWN must be a fraction in (0, 1), got \"%s\"\n", plant);
            return 2;
        }
    }
    int64_t id = 0, nreg = 0;
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
    int rc = run_nightly(&o, &id, &nreg, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab nightly: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("nightly %lld: %s; %s/junit.xml, %s/nightly.md, %s/regressions.atom, %s/index.html\n", (long long)id,
           nreg ? "REGRESSED" : "passed", o.out_dir, o.out_dir, o.out_dir, o.out_dir);
    if (nreg) {
        fprintf(stderr, "vtlab nightly: %lld regression(s) against the previous nightly (see %s/nightly.md)\n",
                (long long)nreg, o.out_dir);
        return 1;
    }
    return 0;
}

/* `vtlab ack FINDING --reason TEXT [--db PATH]`, argv[0] = "ack". FINDING is
 * EXPERIMENT/ARM/KIND (kind: check, accuracy, numerics, performance, audit),
 * or the id of a row of nightly_findings; it must name a regression some
 * nightly found. The acknowledgement (nightly_acks) turns later regressions
 * of that key into notes until a nightly of the experiment no longer has it;
 * a performance one holds only down to the throughput acknowledged (a
 * further drop beyond the noise alerts again). Exit 0, or 2 on bad input
 * (nothing written). */
int lab_cmd_ack(int argc, char **argv) {
    const char *db = "results.db", *reason = NULL, *key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--db") || !strcmp(a, "--reason")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vtlab ack: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--db")) db = argv[++i];
            else reason = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "vtlab ack: unknown option %s (usage: vtlab ack EXPERIMENT/ARM/KIND --reason TEXT [--db PATH])\n", a);
            return 2;
        } else if (!key) key = a;
        else {
            fprintf(stderr, "vtlab ack: unexpected argument %s (one finding at most)\n", a);
            return 2;
        }
    }
    if (!key || !*key) {
        fprintf(stderr, "vtlab ack: which finding? (usage: vtlab ack EXPERIMENT/ARM/KIND --reason TEXT [--db PATH])\n");
        return 2;
    }
    if (!reason || !*reason) {
        fprintf(stderr, "vtlab ack: --reason TEXT is required (why this regression is known and accepted)\n");
        return 2;
    }
    if (!*db || !lab_path_exists(db)) {
        fprintf(stderr, "vtlab ack: %s: no such database\n", *db ? db : "(empty --db)");
        return 2;
    }
    lab_store *st = NULL;
    char err[1024] = "";
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (!rc) rc = nightly_tables(st, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        lab_store_close(st);
        return lab_exit_code(rc);
    }
    /* The latest regression with that key (or that id). */
    sqlite3_stmt *s = NULL;
    const char *sel = "SELECT experiment, arm, kind, nightly_id, value FROM nightly_findings WHERE ";
    char sql[512];
    int by_id = key[strspn(key, "0123456789")] == 0;
    snprintf(sql, sizeof sql, "%s%s", sel,
             by_id ? "id = CAST(?1 AS INTEGER) AND regression = 1"
                   : "experiment || '/' || arm || '/' || kind = ?1 AND"
                     " (regression = 1 OR json_extract(evidence, '$.acknowledged') = 1) ORDER BY id DESC LIMIT 1");
    char eid[128] = "", arm[128] = "", kind[32] = "";
    int64_t nightly = 0;
    double value = NAN;
    int found = 0;
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(s) == SQLITE_ROW) {
            found = 1;
            snprintf(eid, sizeof eid, "%s", lab_col_text(s, 0));
            snprintf(arm, sizeof arm, "%s", lab_col_text(s, 1));
            snprintf(kind, sizeof kind, "%s", lab_col_text(s, 2));
            nightly = sqlite3_column_int64(s, 3);
            if (sqlite3_column_type(s, 4) != SQLITE_NULL) value = sqlite3_column_double(s, 4);
        }
        sqlite3_finalize(s);
    } else {
        fprintf(stderr, "vtlab ack: %s: %s\n", db, sqlite3_errmsg(lab_store_db(st)));
        lab_store_close(st);
        return 1;
    }
    if (!found) {
        fprintf(stderr, "vtlab ack: %s: no regression found by a nightly in %s (name it EXPERIMENT/ARM/KIND, as in "
                        "nightly.md, or by the id of its nightly_findings row)\n", key, db);
        lab_store_close(st);
        return 2;
    }
    char fkey[300], now[32], nt[32], vt[64];
    snprintf(fkey, sizeof fkey, "%s/%s/%s", eid, arm, kind);
    lab_now_iso(now);
    snprintf(nt, sizeof nt, "%lld", (long long)nightly);
    snprintf(vt, sizeof vt, "%.17g", value);
    int perf = !strcmp(kind, "performance") && !isnan(value);
    const char *p[8] = {fkey, eid, arm, kind, reason, now, nt, perf ? vt : NULL};
    rc = lab_store_exec(st, "INSERT OR REPLACE INTO nightly_acks (finding, experiment, arm, kind, reason, acked_at, nightly_id,"
                            " value) VALUES (?1, ?2, ?3, ?4, ?5, ?6, CAST(?7 AS INTEGER), CAST(?8 AS REAL))", 8, p, err,
                        sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    if (perf)
        printf("acknowledged %s (nightly %lld, %.4g tokens/s; a further drop alerts again): %s\n", fkey, (long long)nightly,
               value, reason);
    else
        printf("acknowledged %s (nightly %lld; until a nightly no longer has it): %s\n", fkey, (long long)nightly, reason);
    return 0;
}
