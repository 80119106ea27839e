/*
 * store_localize.c — `vtlab localize`'s reads and writes of results.db (see
 * store_localize.h).
 */
#include "store_localize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

#define LOC_COLS                                                                                                   \
    "id, key, experiment, experiment_file, experiment_sha256, arm, reference_arm, by_unit, goal, levers, n_units," \
    " alpha, max_scale, scale, runs_made, runs_reused, status, result, plan, result_run_id, plan_run_id, message," \
    " started_at, finished_at"

static void loc_row(sqlite3_stmt *s, void *row) {
    lab_localization *l = row;
    memset(l, 0, sizeof *l);
    l->id = sqlite3_column_int64(s, 0);
    lab_sq_col_copy(s, 1, l->key, sizeof l->key);
    lab_sq_col_copy(s, 2, l->experiment, sizeof l->experiment);
    lab_sq_col_copy(s, 3, l->experiment_file, sizeof l->experiment_file);
    lab_sq_col_copy(s, 4, l->experiment_sha256, sizeof l->experiment_sha256);
    lab_sq_col_copy(s, 5, l->arm, sizeof l->arm);
    lab_sq_col_copy(s, 6, l->reference, sizeof l->reference);
    lab_sq_col_copy(s, 7, l->by, sizeof l->by);
    lab_sq_col_copy(s, 8, l->goal, sizeof l->goal);
    lab_sq_col_copy(s, 9, l->levers, sizeof l->levers);
    l->n_units = sqlite3_column_int64(s, 10);
    l->alpha = sqlite3_column_double(s, 11);
    l->max_scale = sqlite3_column_int64(s, 12);
    l->scale = sqlite3_column_int64(s, 13);
    l->runs_made = sqlite3_column_int64(s, 14);
    l->runs_reused = sqlite3_column_int64(s, 15);
    lab_sq_col_copy(s, 16, l->status, sizeof l->status);
    lab_sq_col_copy(s, 17, l->result, sizeof l->result);
    lab_sq_col_copy(s, 18, l->plan, sizeof l->plan);
    l->result_run_id = sqlite3_column_int64(s, 19);
    l->plan_run_id = sqlite3_column_int64(s, 20);
    lab_sq_col_copy(s, 21, l->message, sizeof l->message);
    lab_sq_col_copy(s, 22, l->started_at, sizeof l->started_at);
    lab_sq_col_copy(s, 23, l->finished_at, sizeof l->finished_at);
}

#define STEP_COLS                                                                                                   \
    "id, localization_id, seq, phase, layer_set, size, scale, class, made, arm_run_id, ref_run_id, top1_k, top1_n," \
    " top1_lo, top1_hi, verdict, lost, gained, p, kl_mean, first_div_layer, first_div_site, first_div_value,"      \
    " reason, at"

static void step_row(sqlite3_stmt *s, void *row) {
    lab_localize_step *r = row;
    r->id = sqlite3_column_int64(s, 0);
    r->localization_id = sqlite3_column_int64(s, 1);
    r->seq = sqlite3_column_int64(s, 2);
    lab_sq_col_copy(s, 3, r->phase, sizeof r->phase);
    lab_sq_col_copy(s, 4, r->set, sizeof r->set);
    r->size = sqlite3_column_int64(s, 5);
    r->scale = sqlite3_column_int64(s, 6);
    lab_sq_col_copy(s, 7, r->cls, sizeof r->cls);
    r->made = (int)sqlite3_column_int64(s, 8);
    LAB_SQ_COL_STEP_EVIDENCE(s, 9, r);   /* columns 9 .. 18 */
    r->kl_mean = lab_sq_col_num(s, 19);
    r->first_div_layer = sqlite3_column_type(s, 20) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 20);
    r->first_div_site = (int)sqlite3_column_int64(s, 21);
    r->first_div_value = lab_sq_col_num(s, 22);
    lab_sq_col_copy(s, 23, r->reason, sizeof r->reason);
    lab_sq_col_copy(s, 24, r->at, sizeof r->at);
}

int lab_store_localize_find(lab_store *st, const char *key, lab_localization *out, int *found, char *err,
                            size_t errlen) {
    lab_localization *v = NULL;
    int64_t n = 0;
    *found = 0;
    memset(out, 0, sizeof *out);
    const char *what = "reading the localization";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT " LOC_COLS " FROM localizations WHERE key = ?1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, key);
    int rc = lab_sq_collect(st, s, what, loc_row, sizeof *v, (void **)&v, &n, err, errlen);
    if (!rc && n > 0) {
        *out = v[0];
        *found = 1;
    }
    free(v);
    return rc;
}

int lab_store_localize_insert(lab_store *st, lab_localization *l, char *err, size_t errlen) {
    const char *what = "recording a new localization";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "INSERT INTO localizations (key, experiment, experiment_file, experiment_sha256, arm,"
                        " reference_arm, by_unit, goal, levers, n_units, alpha, max_scale, scale, status, started_at)"
                        " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,'RUNNING',?14)",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    const char *t[] = {l->key, l->experiment, l->experiment_file, l->experiment_sha256, l->arm, l->reference,
                       l->by, l->goal, l->levers};
    for (int i = 0; i < 9; i++) lab_sq_bind_text(s, i + 1, t[i]);
    sqlite3_bind_int64(s, 10, l->n_units);
    sqlite3_bind_double(s, 11, l->alpha);
    sqlite3_bind_int64(s, 12, l->max_scale);
    sqlite3_bind_int64(s, 13, l->scale);
    lab_sq_bind_text(s, 14, l->started_at);
    int rc = lab_sq_write_rowid(st, s, NULL, &l->id, what, err, errlen);
    if (!rc) snprintf(l->status, sizeof l->status, "RUNNING");
    return rc;
}

/* The mutable fields of l bound to s from ?2 on (?1 its id). */
static void bind_mutable(sqlite3_stmt *s, const lab_localization *l) {
    sqlite3_bind_int64(s, 1, l->id);
    sqlite3_bind_int64(s, 2, l->scale);
    sqlite3_bind_int64(s, 3, l->runs_made);
    sqlite3_bind_int64(s, 4, l->runs_reused);
    lab_sq_bind_text(s, 5, l->status);
    lab_sq_bind_opt_text(s, 6, l->result);
    lab_sq_bind_opt_text(s, 7, l->plan);
    lab_sq_bind_id(s, 8, l->result_run_id);
    lab_sq_bind_id(s, 9, l->plan_run_id);
    lab_sq_bind_opt_text(s, 10, l->message);
    lab_sq_bind_opt_text(s, 11, l->finished_at);
}

#define LOC_UPDATE                                                                                             \
    "UPDATE localizations SET scale = ?2, runs_made = ?3, runs_reused = ?4, status = ?5, result = ?6, plan = ?7," \
    " result_run_id = ?8, plan_run_id = ?9, message = ?10, finished_at = ?11 WHERE id = ?1"

int lab_store_localize_update(lab_store *st, const lab_localization *l, char *err, size_t errlen) {
    const char *what = "updating the localization";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, LOC_UPDATE, &s, err, errlen)) return lab_sq_error(st, err, errlen, what);
    bind_mutable(s, l);
    return lab_sq_write1(st, s, what, err, errlen);
}

int lab_store_localize_list(lab_store *st, lab_localization **v, int64_t *n, char *err, size_t errlen) {
    *v = NULL;
    *n = 0;
    const char *what = "reading the localizations";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT " LOC_COLS " FROM localizations ORDER BY id", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    return lab_sq_collect(st, s, what, loc_row, sizeof **v, (void **)v, n, err, errlen);
}

int lab_store_localize_steps(lab_store *st, int64_t lid, lab_localize_step **v, int64_t *n, char *err,
                             size_t errlen) {
    *v = NULL;
    *n = 0;
    const char *what = "reading the localization's steps";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT " STEP_COLS " FROM localize_steps WHERE localization_id = ?1 ORDER BY seq, id", &s,
                    err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, lid);
    return lab_sq_collect(st, s, what, step_row, sizeof **v, (void **)v, n, err, errlen);
}

/* The step's columns bound to s (?1 its localization, then in STEP_COLS
 * order from phase on, seq computed by the statement). */
static void bind_step(sqlite3_stmt *s, const lab_localize_step *r) {
    const int has_run = r->arm_run_id > 0;
    sqlite3_bind_int64(s, 1, r->localization_id);
    lab_sq_bind_text(s, 2, r->phase);
    lab_sq_bind_text(s, 3, r->set);
    sqlite3_bind_int64(s, 4, r->size);
    sqlite3_bind_int64(s, 5, r->scale);
    lab_sq_bind_text(s, 6, r->cls);
    sqlite3_bind_int(s, 7, r->made);
    LAB_SQ_BIND_STEP_EVIDENCE(s, 8, r);   /* ?8 .. ?17 */
    lab_sq_bind_num(s, 18, r->kl_mean);
    if (has_run && r->first_div_layer >= 0) {
        sqlite3_bind_int64(s, 19, r->first_div_layer);
        sqlite3_bind_int(s, 20, r->first_div_site);
    }
    lab_sq_bind_num(s, 21, r->first_div_layer >= 0 ? r->first_div_value : NAN);
    lab_sq_bind_opt_text(s, 22, r->reason);
    lab_sq_bind_text(s, 23, r->at);
}

int lab_store_localize_put_step(lab_store *st, lab_localize_step *r, const lab_localization *l, char *err,
                                size_t errlen) {
    char what[160];
    snprintf(what, sizeof what, "recording localization %lld's step %.60s x%lld", (long long)r->localization_id,
             r->set, (long long)r->scale);
    sqlite3_stmt *s = NULL, *u = NULL;
    if (lab_sq_prep(st, "INSERT INTO localize_steps (localization_id, seq, phase, layer_set, size, scale, class, made,"
                        " arm_run_id, ref_run_id, top1_k, top1_n, top1_lo, top1_hi, verdict, lost, gained, p, kl_mean,"
                        " first_div_layer, first_div_site, first_div_value, reason, at) VALUES"
                        " (?1, (SELECT coalesce(max(seq), 0) + 1 FROM localize_steps WHERE localization_id = ?1),"
                        " ?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)",
                    &s, err, errlen) ||
        lab_sq_prep(st, LOC_UPDATE, &u, err, errlen)) {
        sqlite3_finalize(s);
        return lab_sq_error(st, err, errlen, what);
    }
    bind_step(s, r);
    bind_mutable(u, l);
    return lab_sq_write_rowid(st, s, u, &r->id, what, err, errlen);
}

/* The latest run's error of experiment/arm into why ("" none). */
static int last_error(lab_store *st, const char *experiment, const char *arm, char *why, size_t whylen, char *err,
                      size_t errlen) {
    why[0] = 0;
    sqlite3_stmt *s = NULL;
    const char *what = "reading a candidate run's error";
    if (lab_sq_prep(st, "SELECT status, error FROM runs WHERE experiment = ?1 AND arm = ?2 ORDER BY id DESC LIMIT 1",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, experiment);
    lab_sq_bind_text(s, 2, arm);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) snprintf(why, whylen, "%s: %s", lab_col_text(s, 0), lab_col_text(s, 1));
    else if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_store_localize_find_run(lab_store *st, const char *experiment, const char *arm, const char *code_version,
                                const char *knob_hash, lab_localize_step *r, char *why, size_t whylen, char *err,
                                size_t errlen) {
    char what[200];
    snprintf(what, sizeof what, "looking for a finished run of %s/%s", experiment, arm);
    r->arm_run_id = 0;
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT r.id, c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, v.verdict,"
                        " c.kl_mean, c.first_div_layer, c.first_div_site, c.first_div_value"
                        " FROM runs r JOIN comparisons c ON c.run_id = r.id"
                        " LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id"
                        " WHERE r.experiment = ?1 AND r.arm = ?2 AND r.code_version = ?3 AND r.status = 'FINISHED'"
                        " AND r.repeat_idx = 0 AND (?4 IS NULL OR r.knob_hash = ?4) ORDER BY r.id DESC LIMIT 1",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, experiment);
    lab_sq_bind_text(s, 2, arm);
    lab_sq_bind_text(s, 3, code_version);
    lab_sq_bind_text(s, 4, knob_hash);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) {
        r->arm_run_id = sqlite3_column_int64(s, 0);
        r->ref_run_id = sqlite3_column_int64(s, 1);
        r->k = sqlite3_column_int64(s, 2);
        r->n = sqlite3_column_int64(s, 3);
        r->lo = lab_sq_col_num(s, 4);
        r->hi = lab_sq_col_num(s, 5);
        lab_sq_col_copy(s, 6, r->verdict, sizeof r->verdict);
        r->kl_mean = lab_sq_col_num(s, 7);
        r->first_div_layer = sqlite3_column_type(s, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 8);
        r->first_div_site = (int)sqlite3_column_int64(s, 9);
        r->first_div_value = lab_sq_col_num(s, 10);
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    if (!rc && !r->arm_run_id) rc = last_error(st, experiment, arm, why, whylen, err, errlen);
    return rc;
}

int lab_store_last_run_id(lab_store *st, int64_t *id, char *err, size_t errlen) {
    *id = 0;
    sqlite3_stmt *s = NULL;
    const char *what = "reading the last run id";
    if (lab_sq_prep(st, "SELECT coalesce(max(id), 0) FROM runs", &s, err, errlen)) return lab_sq_error(st, err, errlen, what);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) *id = sqlite3_column_int64(s, 0);
    else rc = lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_store_localize_threshold(lab_store *st, int64_t run_id, double *thr, char *err, size_t errlen) {
    *thr = NAN;
    sqlite3_stmt *s = NULL;
    const char *what = "reading a localization run's threshold";
    if (lab_sq_prep(st, "SELECT threshold FROM verdicts WHERE run_id = ?1 LIMIT 1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) *thr = lab_sq_col_num(s, 0);
    else if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}
