/*
 * nightly.c — `vtlab nightly`: the night's flow (see nightly.h for what
 * counts as a regression, and docs/nightly.md for how CI runs it).
 *
 * The order of work, chosen so that a crash at any point leaves something a
 * person can read: parse every experiment file (bad input: exit 2, nothing
 * written); record the nightly as RUNNING; run the sweep through the same
 * runner as `vtlab sweep`, with --force; list the runs this process made;
 * re-measure suspected throughput drops; run the audit; compare; judge the
 * confounds; store the findings and the nightly's status in one
 * transaction; then write the report, JUnit XML, markdown and Atom files.
 * A nightly whose process died stays RUNNING (or is marked FAILED by the
 * next nightly on the same host) and is never used as a baseline.
 *
 * This file runs the night and decides its status; what the night found is
 * decided elsewhere, each apart so that it can be read and tested alone:
 * the comparison with the previous nightly in nightly_compare.c (throughput
 * noise in nightly_perf.c, which the re-measurement here asks too), the
 * confounds in nightly_confounds.c, the outputs in nightly_outputs.c, and
 * `vtlab ack` in nightly_ack.c (nightly_internal.h says who calls whom).
 * The rows they read and write go through store_nightly.h, which owns
 * their SQL.
 */
#include "nightly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "bisect.h"
#include "cli.h"
#include "experiment.h"
#include "ledger.h"
#include "model/vt.h"
#include "nightly_confounds.h"
#include "nightly_internal.h"
#include "plot.h"
#include "report.h"
#include "runner.h"
#include "store_nightly.h"
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

/* ------------------------------------------------------------ the night */

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
 * drop (lab_nightly_perf_evaluate, the same judgement as the comparison):
 * *n_sus of them; only: the arm when there is exactly one, else "". */
static int suspects(lab_store *st, int64_t id, int64_t prev, const char *eid, const lab_nightly_opts *o, int *n_sus,
                    char *only, size_t onlylen, char *err, size_t errlen) {
    lab_nightly_runs cs = {0}, ps = {0};
    *n_sus = 0;
    only[0] = 0;
    int rc = lab_store_nightly_runs(st, id, eid, 0, &cs, err, errlen);
    if (!rc) rc = lab_store_nightly_runs(st, prev, eid, 0, &ps, err, errlen);
    for (int64_t k = 0; !rc && k < cs.n; k++) {
        if (k > 0 && !strcmp(cs.r[k - 1].arm, cs.r[k].arm)) continue;
        lab_nightly_perf pe;
        if ((rc = lab_nightly_perf_evaluate(st, id, eid, cs.r[k].arm, &cs, &ps, o, &pe, err, errlen)) ||
            !lab_nightly_perf_suspect(&pe))
            continue;
        if (!(*n_sus)++) snprintf(only, onlylen, "%s", cs.r[k].arm);
    }
    if (*n_sus != 1) only[0] = 0;
    lab_nightly_runs_free(&cs);
    lab_nightly_runs_free(&ps);
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
        (rc = lab_nightly_write_unfinished(n->o->out_dir, n->id, "RUNNING",
                                           "the nightly is running, or died before it finished", err, errlen)))
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
    /* A signal while the outputs were written (the charts take seconds) may
     * have cut a chart short without failing the report: the status decided
     * before is not the night's any more. */
    if (lab_interrupted) {
        rc = lab_errf(err, errlen, LAB_EIO, "interrupted by a signal while the outputs were written");
        goto rollback;
    }
    if ((rc = lab_store_batch_commit(n->st, err, errlen))) { lab_err_prefix(err, errlen, rc, "outputs"); goto failed; }
    return LAB_OK;
rollback:
    lab_store_batch_rollback(n->st);
failed:;
    char e2[256];
    lab_nightly_write_unfinished(n->o->out_dir, n->id, "FAILED", err, e2, sizeof e2);
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
