/*
 * reopen.c — re-measuring a confounded claim (see reopen.h).
 *
 * The claim's experiment file is the recipe. A derived experiment with the
 * same id (so the reference run's identity, and its finished run, are shared)
 * and three arms — the reference, the claim's arm, and the claim's arm with
 * the defect's replay fault — is written to the work dir and run through the
 * ordinary runner, so the replay and the rerun are runs like any other, with
 * probes, comparisons and verdicts in results.db.
 *
 * "Explained" means both: through the fault the recorded verdict comes back
 * (under the claim's own decision rule), and the fault makes a significant
 * difference (McNemar's exact test, replay vs rerun on the same positions,
 * p < 0.05). Whether the recorded k/n itself falls in the replay's interval
 * is reported too: a claim measured on another model need not reproduce its
 * number here, only its direction.
 */
#include "reopen.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "experiment.h"
#include "harness/cli.h"
#include "ledger.h"
#include "metrics.h"
#include "model/vt.h"
#include "runner.h"
#include "store.h"
#include "util.h"

typedef struct arm_result {
    int64_t run, k, n;
    double  lo, hi;
    char    verdict[16];     /* under the claim's rule */
} arm_result;

/* The defect to replay: the one named, or the first whose trigger the claim's
 * knobs include in the claim's codebase. */
static const lab_defect *pick_defect(const lab_ledger *l, const lab_claim *c, const char *id, char *err, size_t errlen) {
    if (id) {
        const lab_defect *d = lab_ledger_defect(l, id);
        if (!d) lab_errf(err, errlen, LAB_EINPUT, "reopen: --defect %s: no such defect in %s/defects", id, l->dir);
        return d;
    }
    for (int64_t i = 0; i < l->n_defects; i++)
        if (!strcmp(l->defects[i].codebase, c->codebase) && lab_knobs_trigger(&l->defects[i].trigger, &c->arm_knobs))
            return &l->defects[i];
    lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s: no registered defect applies to it (its knobs include no "
             "defect's trigger in codebase %s); nothing to replay", c->id, c->codebase);
    return NULL;
}

static cJSON *knobs_obj(const lab_knobs_kv *kv, const char *fault) {
    cJSON *o = cJSON_CreateObject();
    for (int64_t i = 0; i < kv->n; i++) cJSON_AddStringToObject(o, kv->names[i], kv->values[i]);
    if (fault) cJSON_AddStringToObject(o, "VT_FAULT", fault);
    return o;
}

/* Writes the derived experiment; *rerun_arm and *replay_arm get the arm names. */
static int write_derived(const lab_claim *c, const lab_defect *d, const char *work, char *path, size_t pathlen,
                         char *replay_arm, size_t ralen, char *err, size_t errlen) {
    char *text = NULL;
    int rc = lab_read_file(c->experiment, &text, NULL, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "reopen: claim %s: experiment", c->id);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return lab_errf(err, errlen, LAB_EINPUT, "reopen: %s: not valid JSON", c->experiment);
    cJSON *arms = cJSON_GetObjectItemCaseSensitive(j, "arms");
    const cJSON *refname = cJSON_GetObjectItemCaseSensitive(j, "reference");
    cJSON *ref = NULL, *same = NULL;
    for (cJSON *a = arms ? arms->child : NULL; a; a = a->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "name");
        if (!cJSON_IsString(n)) continue;
        if (cJSON_IsString(refname) && !strcmp(n->valuestring, refname->valuestring)) ref = a;
        if (!strcmp(n->valuestring, c->arm_name)) same = a;
    }
    if (!ref) { cJSON_Delete(j); return lab_errf(err, errlen, LAB_EINPUT, "reopen: %s: no reference arm", c->experiment); }
    cJSON *new_arms = cJSON_CreateArray();
    cJSON_AddItemToArray(new_arms, cJSON_Duplicate(ref, 1));
    cJSON *rerun = cJSON_CreateObject();
    cJSON_AddStringToObject(rerun, "name", c->arm_name);
    cJSON_AddStringToObject(rerun, "description", "reopen: the claim's arm on the current code, no fault");
    cJSON_AddItemToObject(rerun, "knobs", knobs_obj(&c->arm_knobs, NULL));
    const cJSON *expect = same ? cJSON_GetObjectItemCaseSensitive(same, "expect") : NULL;
    if (expect) cJSON_AddItemToObject(rerun, "expect", cJSON_Duplicate(expect, 1));
    cJSON_AddItemToArray(new_arms, rerun);
    snprintf(replay_arm, ralen, "%s.replay", c->arm_name);   /* short: it labels plots; the knobs say which fault */
    cJSON *replay = cJSON_CreateObject();
    cJSON_AddStringToObject(replay, "name", replay_arm);
    cJSON_AddStringToObject(replay, "description", "reopen: the claim's arm through the defect's replay fault");
    cJSON_AddItemToObject(replay, "knobs", knobs_obj(&c->arm_knobs, d->replay_fault));
    cJSON_AddStringToObject(replay, "expect_assertions", "fail");
    cJSON_AddItemToArray(new_arms, replay);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "arms", new_arms);
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    if (!out) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if ((rc = lab_mkdirs(work, err, errlen))) { free(out); return rc; }
    snprintf(path, pathlen, "%s/%s.json", work, c->id);
    rc = vt_cli_write_file_atomic(path, out, strlen(out), err, errlen);
    free(out);
    return rc;
}

/* The knob hash arm `arm` of the derived experiment resolves to, as the
 * runner computes it (environment, then the arm's knobs). */
static int arm_knob_hash(const lab_experiment *e, const char *arm, char out[65], char *err, size_t errlen) {
    extern char **environ;
    int64_t i = lab_experiment_arm(e, arm);
    if (i < 0) return lab_errf(err, errlen, LAB_EINTERNAL, "reopen: derived experiment has no arm %s", arm);
    vt_knobset *ks = NULL;
    int rc = lab_resolve_knobs(e, i, environ, &ks, err, errlen);
    if (rc) return rc;
    vt_knobset_hash(ks, out);
    vt_knobset_free(ks);
    return LAB_OK;
}

/* The latest finished run of this arm's identity — same experiment, arm, knob
 * hash and code version as the runs just executed (or reused) — with its
 * top-1 comparison. Not merely the latest run of the arm's name: another
 * environment or build may have added runs of that name. */
static int arm_outcome(sqlite3 *db, const lab_experiment *e, const char *arm, const lab_claim *c, arm_result *r,
                       char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    memset(r, 0, sizeof *r);
    char kh[65];
    int rc = arm_knob_hash(e, arm, kh, err, errlen);
    if (rc) return rc;
    if (sqlite3_prepare_v2(db, "SELECT r.id, c.top1_k, c.top1_n FROM runs r JOIN comparisons c ON c.run_id = r.id"
                           " WHERE r.experiment = ? AND r.arm = ? AND r.knob_hash = ? AND r.code_version = ?"
                           " AND r.status = 'FINISHED' ORDER BY r.id DESC LIMIT 1", -1, &s, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "reopen: %s", sqlite3_errmsg(db));
    const char *exp_id = e->id;
    sqlite3_bind_text(s, 1, exp_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, arm, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, kh, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, vt_build_info(), -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        r->run = sqlite3_column_int64(s, 0);
        r->k = sqlite3_column_int64(s, 1);
        r->n = sqlite3_column_int64(s, 2);
        lab_wilson(r->k, r->n, 1.959963984540054, &r->lo, &r->hi);
        snprintf(r->verdict, sizeof r->verdict, "%s",
                 lab_verdict_name(lab_decide(r->lo, r->hi, c->threshold, !strcmp(c->direction, ">="))));
    } else {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "reopen: no finished run of %s/%s with a comparison", exp_id, arm);
    }
    sqlite3_finalize(s);
    return rc;
}

static int reference_run(sqlite3 *db, int64_t run, int64_t *ref) {
    sqlite3_stmt *s = NULL;
    *ref = 0;
    if (sqlite3_prepare_v2(db, "SELECT reference_run_id FROM comparisons WHERE run_id = ?", -1, &s, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_int64(s, 1, run);
    if (sqlite3_step(s) == SQLITE_ROW) *ref = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return 0;
}

/* McNemar, replay vs rerun, on agreement with the reference's top-1. */
static int mcnemar(lab_store *st, int64_t ref, int64_t a, int64_t b, double *p, int64_t *nb, int64_t *nc,
                   char *err, size_t errlen) {
    int32_t *r = NULL, *x = NULL, *y = NULL;
    int64_t nr = 0, nx = 0, ny = 0;
    int rc = lab_store_top1(st, ref, &r, &nr, err, errlen);
    if (!rc) rc = lab_store_top1(st, a, &x, &nx, err, errlen);
    if (!rc) rc = lab_store_top1(st, b, &y, &ny, err, errlen);
    *nb = *nc = 0;
    if (!rc && (nx != nr || ny != nr)) rc = lab_errf(err, errlen, LAB_EINTERNAL, "reopen: runs scored different positions");
    for (int64_t i = 0; !rc && i < nr; i++) {
        int ax = x[i] == r[i], ay = y[i] == r[i];
        *nb += ax && !ay;
        *nc += !ax && ay;
    }
    if (!rc) *p = lab_mcnemar_exact(*nb, *nc);
    free(r); free(x); free(y);
    return rc;
}

int lab_reopen(const lab_reopen_opts *o, FILE *out, char new_claim[128], char *err, size_t errlen) {
    lab_ledger l;
    int rc = lab_ledger_load(o->specs_dir, &l, err, errlen);
    if (rc) return rc;
    lab_store *st = NULL;
    lab_experiment *dx = NULL;
    lab_claim *c = (lab_claim *)lab_ledger_claim(&l, o->claim_id);
    if (!c) { rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: no claim \"%s\" in %s/claims", o->claim_id, o->specs_dir); goto done; }
    if (c->superseded_by) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "reopen: claim %s is already superseded by %s; reopen that one",
                      c->id, c->superseded_by);
        goto done;
    }
    const lab_defect *d = pick_defect(&l, c, o->defect_id, err, errlen);
    if (!d) { rc = LAB_EINPUT; goto done; }
    char path[4200], replay_arm[256];
    if ((rc = write_derived(c, d, o->work_dir, path, sizeof path, replay_arm, sizeof replay_arm, err, errlen))) goto done;
    if ((rc = lab_experiment_load(&dx, path, err, errlen))) goto done;
    if (out) fprintf(out, "reopening claim %s (%s %lld/%lld) through defect %s: replay (VT_FAULT=%s) and rerun, "
                     "experiment %s\n", c->id, c->verdict, (long long)c->k, (long long)c->n, d->id, d->replay_fault, path);
    lab_run_opts ro = {o->db_path, NULL, 0, 0};
    lab_run_summary sum = {0};
    if ((rc = lab_run_experiment(path, &ro, &sum, err, errlen))) goto done;
    if (sum.runs_failed || sum.check_failures || sum.runs_busy) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "reopen: claim %s: %lld run(s) failed, %lld arm(s) with unexpected "
                      "assertion outcomes (a replay whose fault did not show), %lld held by another process; nothing "
                      "recorded", c->id, (long long)sum.runs_failed, (long long)sum.check_failures,
                      (long long)sum.runs_busy);
        goto done;
    }
    if ((rc = lab_store_open(&st, o->db_path, err, errlen))) goto done;
    sqlite3 *db = lab_store_db(st);
    arm_result replay, rerun;
    if ((rc = arm_outcome(db, dx, replay_arm, c, &replay, err, errlen))) goto done;
    if ((rc = arm_outcome(db, dx, c->arm_name, c, &rerun, err, errlen))) goto done;
    int64_t ref = 0, nb = 0, nc = 0;
    double p = 1.0;
    reference_run(db, rerun.run, &ref);
    if ((rc = mcnemar(st, ref, rerun.run, replay.run, &p, &nb, &nc, err, errlen))) goto done;
    double rlo, rhi;
    lab_wilson(c->k, c->n, 1.959963984540054, &rlo, &rhi);
    double rec = (double)c->k / (double)c->n;
    int same_verdict = !strcmp(replay.verdict, c->verdict);
    int significant = p < 0.05 && replay.k * rerun.n < rerun.k * replay.n;
    int number_inside = rec >= replay.lo && rec <= replay.hi;
    int explained = same_verdict && significant;
    char explanation[1024];
    snprintf(explanation, sizeof explanation,
             "%s: through VT_FAULT=%s the arm scores %lld/%lld [%.3f, %.3f], %s (recorded: %s %lld/%lld); without it "
             "%lld/%lld [%.3f, %.3f]; McNemar replay vs rerun p = %.2g. The recorded %lld/%lld %s the replay's interval%s.",
             explained ? "explained" : "not explained", d->replay_fault, (long long)replay.k, (long long)replay.n,
             replay.lo, replay.hi, replay.verdict, c->verdict, (long long)c->k, (long long)c->n, (long long)rerun.k,
             (long long)rerun.n, rerun.lo, rerun.hi, p, (long long)c->k, (long long)c->n,
             number_inside ? "is inside" : "is outside",
             number_inside ? "" : " (the direction is reproduced, not the number: the claim was measured on another "
                                  "model and code)");

    /* (c) the new claim */
    char today[32], id[128], file[4300];
    lab_now_iso(today);
    today[10] = '\0';
    for (int i = 1;; i++) {   /* <old>-reopened-YYYYMMDD, then -2, -3 ... if taken */
        int len = snprintf(id, sizeof id, "%s-reopened-%.4s%.2s%.2s", c->id, today, today + 5, today + 8);
        if (i > 1 && len > 0 && (size_t)len < sizeof id) snprintf(id + len, sizeof id - (size_t)len, "-%d", i);
        if (!lab_ledger_claim(&l, id)) break;
    }
    lab_claim nw = *c;   /* shallow: only the fields set below differ, the rest are borrowed */
    char notes[1400], commit[64];
    snprintf(commit, sizeof commit, "%s", vt_build_commit());
    snprintf(notes, sizeof notes, "Reopened from %s (measured through defect %s). %s", c->id, d->id, explanation);
    nw.id = id;
    nw.verdict = rerun.verdict;
    nw.k = rerun.k;
    nw.n = rerun.n;
    nw.codebase = "vtlab";
    nw.code.commit = commit;
    nw.code.date = today;
    nw.measured_at = today;
    nw.supersedes = c->id;
    nw.superseded_by = NULL;
    nw.run_arm = rerun.run;
    nw.run_ref = ref;
    nw.notes = notes;
    snprintf(file, sizeof file, "%s/claims/%s.json", o->specs_dir, id);
    if ((rc = lab_claim_write(&nw, file, err, errlen))) goto done;
    char *old_sb = c->superseded_by;
    c->superseded_by = id;
    rc = lab_claim_write(c, c->file, err, errlen);
    c->superseded_by = old_sb;
    if (rc) { remove(file); goto done; }
    snprintf(new_claim, 128, "%s", id);

    sqlite3_stmt *s = NULL;
    char now[32];
    lab_now_iso(now);
    if (sqlite3_prepare_v2(db, "INSERT INTO reopens (claim_id, defect_id, replay_run_id, rerun_run_id, explained,"
                           " explanation, new_claim_id, new_verdict, at) VALUES (?,?,?,?,?,?,?,?,?)", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, c->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, d->id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, replay.run);
        sqlite3_bind_int64(s, 4, rerun.run);
        sqlite3_bind_int(s, 5, explained);
        sqlite3_bind_text(s, 6, explanation, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 7, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 8, rerun.verdict, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 9, now, -1, SQLITE_STATIC);
        if (sqlite3_step(s) != SQLITE_DONE) rc = lab_errf(err, errlen, LAB_EIO, "reopen: %s", sqlite3_errmsg(db));
        sqlite3_finalize(s);
    }

    if (out && !rc) {
        fprintf(out, "\n%-14s %-34s %-34s\n", "", "BEFORE (recorded)", "AFTER (reopened)");
        fprintf(out, "%-14s %-34s %-34s\n", "claim", c->id, id);
        char a[96], b[96];
        snprintf(a, sizeof a, "%s", c->verdict);
        snprintf(b, sizeof b, "%s", rerun.verdict);
        fprintf(out, "%-14s %-34s %-34s\n", "verdict", a, b);
        snprintf(a, sizeof a, "%lld/%lld [%.3f, %.3f]", (long long)c->k, (long long)c->n, rlo, rhi);
        snprintf(b, sizeof b, "%lld/%lld [%.3f, %.3f]", (long long)rerun.k, (long long)rerun.n, rerun.lo, rerun.hi);
        fprintf(out, "%-14s %-34s %-34s\n", "top-1", a, b);
        snprintf(a, sizeof a, "%s", c->codebase);
        snprintf(b, sizeof b, "vtlab %s", commit);
        fprintf(out, "%-14s %-34.34s %-34.34s\n", "code", a, b);
        snprintf(a, sizeof a, "through %s", d->id);
        snprintf(b, sizeof b, "run %lld (ref run %lld)", (long long)rerun.run, (long long)ref);
        fprintf(out, "%-14s %-34.34s %-34.34s\n", "measured", a, b);
        fprintf(out, "\nreplay (run %lld): %s\n", (long long)replay.run, explanation);
        fprintf(out, "written: %s (new), %s (superseded_by set)\n", file, c->file);
    }
done:
    lab_experiment_free(dx);
    lab_store_close(st);
    lab_ledger_free(&l);
    return rc;
}
