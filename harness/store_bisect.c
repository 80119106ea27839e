/*
 * store_bisect.c — `vtlab bisect`'s reads and writes of results.db (see
 * store_bisect.h).
 */
#include "store_bisect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

#define BISECTION_COLS                                                                                             \
    "id, key, experiment, experiment_file, experiment_sha256, arm, reference_arm, repo, good_rev, bad_rev,"        \
    " good_commit, bad_commit, n_commits, mode, alpha, max_scale, scale, builds, build_cmd, nightly_id, status,"   \
    " first_bad, range_good, range_bad, message, started_at, finished_at"

static void read_bisection(sqlite3_stmt *s, lab_bisection *b) {
    memset(b, 0, sizeof *b);
    b->id = sqlite3_column_int64(s, 0);
    lab_sq_col_copy(s, 1, b->key, sizeof b->key);
    lab_sq_col_copy(s, 2, b->experiment, sizeof b->experiment);
    lab_sq_col_copy(s, 3, b->experiment_file, sizeof b->experiment_file);
    lab_sq_col_copy(s, 4, b->experiment_sha256, sizeof b->experiment_sha256);
    lab_sq_col_copy(s, 5, b->arm, sizeof b->arm);
    lab_sq_col_copy(s, 6, b->reference, sizeof b->reference);
    lab_sq_col_copy(s, 7, b->repo, sizeof b->repo);
    lab_sq_col_copy(s, 8, b->good_rev, sizeof b->good_rev);
    lab_sq_col_copy(s, 9, b->bad_rev, sizeof b->bad_rev);
    lab_sq_col_copy(s, 10, b->good_commit, sizeof b->good_commit);
    lab_sq_col_copy(s, 11, b->bad_commit, sizeof b->bad_commit);
    b->n_commits = sqlite3_column_int64(s, 12);
    lab_sq_col_copy(s, 13, b->mode, sizeof b->mode);
    b->alpha = sqlite3_column_double(s, 14);
    b->max_scale = sqlite3_column_int64(s, 15);
    b->scale = sqlite3_column_int64(s, 16);
    b->builds = sqlite3_column_int64(s, 17);
    lab_sq_col_copy(s, 18, b->build_cmd, sizeof b->build_cmd);
    b->nightly_id = sqlite3_column_int64(s, 19);
    lab_sq_col_copy(s, 20, b->status, sizeof b->status);
    lab_sq_col_copy(s, 21, b->first_bad, sizeof b->first_bad);
    lab_sq_col_copy(s, 22, b->range_good, sizeof b->range_good);
    lab_sq_col_copy(s, 23, b->range_bad, sizeof b->range_bad);
    lab_sq_col_copy(s, 24, b->message, sizeof b->message);
    lab_sq_col_copy(s, 25, b->started_at, sizeof b->started_at);
    lab_sq_col_copy(s, 26, b->finished_at, sizeof b->finished_at);
}

static void bisection_row(sqlite3_stmt *s, void *row) { read_bisection(s, row); }

static void step_row(sqlite3_stmt *s, void *row) {
    lab_bisect_step *r = row;
    r->id = sqlite3_column_int64(s, 0);
    r->bisection_id = sqlite3_column_int64(s, 1);
    r->seq = sqlite3_column_int64(s, 2);
    lab_sq_col_copy(s, 3, r->commit, sizeof r->commit);
    lab_sq_col_copy(s, 4, r->subject, sizeof r->subject);
    r->position = sqlite3_column_int64(s, 5);
    r->scale = sqlite3_column_int64(s, 6);
    lab_sq_col_copy(s, 7, r->cls, sizeof r->cls);
    r->built = (int)sqlite3_column_int64(s, 8);
    LAB_SQ_COL_STEP_EVIDENCE(s, 9, r);   /* columns 9 .. 18 */
    r->lost_bad = sqlite3_column_int64(s, 19);
    r->gained_bad = sqlite3_column_int64(s, 20);
    r->p_bad = lab_sq_col_num(s, 21);
    lab_sq_col_copy(s, 22, r->logits_sha256, sizeof r->logits_sha256);
    lab_sq_col_copy(s, 23, r->reason, sizeof r->reason);
    lab_sq_col_copy(s, 24, r->at, sizeof r->at);
}

static void target_row(sqlite3_stmt *s, void *row) {
    lab_bisect_target *t = row;
    lab_sq_col_copy(s, 0, t->experiment, sizeof t->experiment);
    lab_sq_col_copy(s, 1, t->arm, sizeof t->arm);
    lab_sq_col_copy(s, 2, t->kind, sizeof t->kind);
}

int lab_store_bisect_find(lab_store *st, const char *key, lab_bisection *out, int *found, char *err, size_t errlen) {
    *found = 0;
    memset(out, 0, sizeof *out);
    const char *what = "reading the bisection";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT " BISECTION_COLS " FROM bisections WHERE key = ?1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, key);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) {
        read_bisection(s, out);
        *found = 1;
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}

int lab_store_bisect_insert(lab_store *st, lab_bisection *b, char *err, size_t errlen) {
    const char *what = "recording a new bisection";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "INSERT INTO bisections (key, experiment, experiment_file, experiment_sha256, arm,"
                        " reference_arm, repo, good_rev, bad_rev, good_commit, bad_commit, n_commits, mode, alpha,"
                        " max_scale, scale, builds, build_cmd, nightly_id, status, started_at)"
                        " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,'RUNNING',?20)",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, b->key);
    lab_sq_bind_text(s, 2, b->experiment);
    lab_sq_bind_text(s, 3, b->experiment_file);
    lab_sq_bind_text(s, 4, b->experiment_sha256);
    lab_sq_bind_text(s, 5, b->arm);
    lab_sq_bind_text(s, 6, b->reference);
    lab_sq_bind_text(s, 7, b->repo);
    lab_sq_bind_text(s, 8, b->good_rev);
    lab_sq_bind_text(s, 9, b->bad_rev);
    lab_sq_bind_text(s, 10, b->good_commit);
    lab_sq_bind_text(s, 11, b->bad_commit);
    sqlite3_bind_int64(s, 12, b->n_commits);
    lab_sq_bind_text(s, 13, b->mode);
    sqlite3_bind_double(s, 14, b->alpha);
    sqlite3_bind_int64(s, 15, b->max_scale);
    sqlite3_bind_int64(s, 16, b->scale);
    sqlite3_bind_int64(s, 17, b->builds);
    lab_sq_bind_text(s, 18, b->build_cmd);
    lab_sq_bind_id(s, 19, b->nightly_id);
    lab_sq_bind_text(s, 20, b->started_at);
    int rc = lab_sq_write_rowid(st, s, NULL, &b->id, what, err, errlen);
    if (!rc) snprintf(b->status, sizeof b->status, "RUNNING");
    return rc;
}

int lab_store_bisect_update(lab_store *st, const lab_bisection *b, char *err, size_t errlen) {
    const char *what = "updating the bisection";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "UPDATE bisections SET scale = ?2, builds = ?3, nightly_id = ?4, status = ?5, first_bad = ?6,"
                        " range_good = ?7, range_bad = ?8, message = ?9, finished_at = ?10 WHERE id = ?1",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, b->id);
    sqlite3_bind_int64(s, 2, b->scale);
    sqlite3_bind_int64(s, 3, b->builds);
    lab_sq_bind_id(s, 4, b->nightly_id);
    lab_sq_bind_text(s, 5, b->status);
    lab_sq_bind_opt_text(s, 6, b->first_bad);
    lab_sq_bind_opt_text(s, 7, b->range_good);
    lab_sq_bind_opt_text(s, 8, b->range_bad);
    lab_sq_bind_opt_text(s, 9, b->message);
    lab_sq_bind_opt_text(s, 10, b->finished_at);
    return lab_sq_write1(st, s, what, err, errlen);
}

int lab_store_bisect_list(lab_store *st, int64_t nightly, lab_bisection **v, int64_t *n, char *err, size_t errlen) {
    *v = NULL;
    *n = 0;
    const char *what = "reading the bisections";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT " BISECTION_COLS " FROM bisections WHERE ?1 = 0 OR nightly_id = ?1 ORDER BY id", &s,
                    err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, nightly);
    return lab_sq_collect(st, s, what, bisection_row, sizeof **v, (void **)v, n, err, errlen);
}

int lab_store_bisect_steps(lab_store *st, int64_t bid, lab_bisect_step **v, int64_t *n, char *err, size_t errlen) {
    *v = NULL;
    *n = 0;
    const char *what = "reading the bisection's steps";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT id, bisection_id, seq, commit_sha, subject, position, scale, class, built,"
                        " arm_run_id, ref_run_id, top1_k, top1_n, top1_lo, top1_hi, verdict, lost, gained, p,"
                        " lost_vs_bad, gained_vs_bad, p_vs_bad, logits_sha256, reason, at"
                        " FROM bisect_steps WHERE bisection_id = ?1 ORDER BY seq, id",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, bid);
    return lab_sq_collect(st, s, what, step_row, sizeof **v, (void **)v, n, err, errlen);
}

int lab_store_bisect_put_step(lab_store *st, lab_bisect_step *r, int64_t builds, char *err, size_t errlen) {
    char what[128];
    snprintf(what, sizeof what, "recording bisection %lld's step at %.12s", (long long)r->bisection_id, r->commit);
    sqlite3_stmt *s = NULL, *u = NULL;
    if (lab_sq_prep(st, "INSERT INTO bisect_steps (bisection_id, seq, commit_sha, subject, position, scale, class,"
                        " built, arm_run_id, ref_run_id, top1_k, top1_n, top1_lo, top1_hi, verdict, lost, gained, p,"
                        " lost_vs_bad, gained_vs_bad, p_vs_bad, logits_sha256, reason, at) VALUES"
                        " (?1, (SELECT coalesce(max(seq), 0) + 1 FROM bisect_steps WHERE bisection_id = ?1),"
                        " ?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)",
                    &s, err, errlen) ||
        lab_sq_prep(st, "UPDATE bisections SET builds = ?2 WHERE id = ?1", &u, err, errlen)) {
        sqlite3_finalize(s);
        return lab_sq_error(st, err, errlen, what);
    }
    sqlite3_bind_int64(s, 1, r->bisection_id);
    lab_sq_bind_text(s, 2, r->commit);
    lab_sq_bind_text(s, 3, r->subject);
    sqlite3_bind_int64(s, 4, r->position);
    sqlite3_bind_int64(s, 5, r->scale);
    lab_sq_bind_text(s, 6, r->cls);
    sqlite3_bind_int(s, 7, r->built);
    LAB_SQ_BIND_STEP_EVIDENCE(s, 8, r);   /* ?8 .. ?17 */
    if (isfinite(r->p_bad)) {
        sqlite3_bind_int64(s, 18, r->lost_bad);
        sqlite3_bind_int64(s, 19, r->gained_bad);
    }
    lab_sq_bind_num(s, 20, r->p_bad);
    lab_sq_bind_opt_text(s, 21, r->logits_sha256);
    lab_sq_bind_opt_text(s, 22, r->reason);
    lab_sq_bind_text(s, 23, r->at);
    sqlite3_bind_int64(u, 1, r->bisection_id);
    sqlite3_bind_int64(u, 2, builds);
    return lab_sq_write_rowid(st, s, u, &r->id, what, err, errlen);
}

int lab_store_bisect_find_run(lab_store *st, const char *experiment, const char *arm, const char *code_prefix,
                              const char *code_exact, const char *dataset, lab_bisect_found *out, char *err,
                              size_t errlen) {
    memset(out, 0, sizeof *out);
    char what[200];
    snprintf(what, sizeof what, "looking for a finished run of %s/%s", experiment, arm);
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT id, dataset_sha256, logits_sha256 FROM runs WHERE experiment = ?1 AND arm = ?2"
                        " AND repeat_idx = 0 AND status = 'FINISHED' AND substr(code_version, 1, length(?3)) = ?3"
                        " AND (?4 IS NULL OR code_version = ?4) AND (?5 IS NULL OR dataset_sha256 = ?5)"
                        " ORDER BY id DESC LIMIT 1",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, experiment);
    lab_sq_bind_text(s, 2, arm);
    lab_sq_bind_text(s, 3, code_prefix);
    lab_sq_bind_text(s, 4, code_exact);
    lab_sq_bind_text(s, 5, dataset);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) {
        out->run_id = sqlite3_column_int64(s, 0);
        lab_sq_col_copy(s, 1, out->dataset_sha256, sizeof out->dataset_sha256);
        lab_sq_col_copy(s, 2, out->logits_sha256, sizeof out->logits_sha256);
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}

int lab_store_bisect_nightly_commit(lab_store *st, int64_t nightly, char *out, size_t outlen, char *err,
                                    size_t errlen) {
    out[0] = 0;
    char what[96];
    snprintf(what, sizeof what, "reading the commit of nightly %lld", (long long)nightly);
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT git_commit FROM nightlies WHERE id = ?1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, nightly);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) lab_sq_col_copy(s, 0, out, outlen);
    else if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_store_bisect_nightly_targets(lab_store *st, int64_t nightly, lab_bisect_target **v, int64_t *n, char *err,
                                     size_t errlen) {
    *v = NULL;
    *n = 0;
    const char *what = "reading the nightly's regressions to bisect";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT experiment, arm, min(kind) FROM nightly_findings WHERE nightly_id = ?1 AND regression = 1"
                        " AND kind IN ('accuracy', 'numerics') AND arm != '' GROUP BY experiment, arm"
                        " ORDER BY experiment, arm",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, nightly);
    return lab_sq_collect(st, s, what, target_row, sizeof **v, (void **)v, n, err, errlen);
}

int lab_store_bisect_note_finding(lab_store *st, int64_t nightly, const char *experiment, const char *arm,
                                  const char *kind, const char *text, char *err, size_t errlen) {
    const char *what = "adding the bisection's result to the nightly's finding";
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "UPDATE nightly_findings SET message = message || ?5 WHERE nightly_id = ?1 AND experiment = ?2"
                        " AND arm = ?3 AND kind = ?4 AND regression = 1",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, nightly);
    lab_sq_bind_text(s, 2, experiment);
    lab_sq_bind_text(s, 3, arm);
    lab_sq_bind_text(s, 4, kind);
    lab_sq_bind_text(s, 5, text);
    return lab_sq_write1(st, s, what, err, errlen);
}
