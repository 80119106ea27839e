/*
 * store_nightly.c — the nightly's SQL (see store_nightly.h for the contract,
 * docs/schema.md for the tables). Every statement is static text with bound
 * parameters; reads collect their rows and check how the last step ended, so
 * that an I/O error or a corrupt page is an error, not a shorter list.
 */
#include "store_nightly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

static void bind_num(sqlite3_stmt *s, int i, double v) {
    if (isnan(v) || isinf(v)) sqlite3_bind_null(s, i);
    else sqlite3_bind_double(s, i, v);
}

static void bind_id(sqlite3_stmt *s, int i, int64_t v) {
    if (v) sqlite3_bind_int64(s, i, v);
    else sqlite3_bind_null(s, i);
}


/* The next row of s: 1 a row, 0 done, <0 an error (err filled, status
 * negated so that it is never mistaken for a row). */
static int next_row(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen, const char *what) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) return 1;
    if (rc == SQLITE_DONE) return 0;
    return -lab_sq_error(st, err, errlen, what);
}

/* One write statement, already bound, inside its own transaction (or the
 * caller's batch). Finalizes s. */
static int write_one(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen, const char *what) {
    return lab_sq_write1(st, s, what, err, errlen);
}


static char *dup_col(sqlite3_stmt *s, int i, int *oom) {
    char *p = lab_strdup(lab_col_text(s, i));
    if (!p) *oom = 1;
    return p;
}

/* ------------------------------------------------------------ a nightly's row */

/* The ids of the RUNNING nightlies of host whose process is dead: (*ids)[*n], owned. */
static int dead_nightlies(lab_store *st, const char *host, int64_t **ids, int64_t *n, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *ids = NULL;
    *n = 0;
    int rc = lab_sq_prep(st, "SELECT id, pid, pid_start FROM nightlies WHERE status = 'RUNNING' AND host = ?1", &s,
                         err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, host);
    int row;
    int64_t cap = 0;
    while ((row = next_row(st, s, err, errlen, "running nightlies")) > 0) {
        if (lab_pid_alive(sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2))) continue;
        int64_t *slot = lab_sq_append((void **)ids, n, &cap, sizeof *slot);
        if (!slot) { row = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        *slot = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    if (row < 0) { free(*ids); *ids = NULL; *n = 0; }
    return row < 0 ? -row : LAB_OK;
}

int lab_store_nightly_reap(lab_store *st, const char *host, int64_t *n, char *err, size_t errlen) {
    if (n) *n = 0;
    int64_t *dead = NULL, nd = 0;
    sqlite3_stmt *u = NULL;
    int rc = lab_sq_begin(st, err, errlen);
    if (!rc) rc = dead_nightlies(st, host, &dead, &nd, err, errlen);
    if (!rc && nd)
        rc = lab_sq_prep(st, "UPDATE nightlies SET status = 'FAILED', error = 'the process died (found by a later"
                             " nightly)' WHERE id = ?1", &u, err, errlen);
    for (int64_t i = 0; !rc && i < nd; i++) {
        sqlite3_reset(u);
        sqlite3_bind_int64(u, 1, dead[i]);
        rc = lab_sq_step(st, u, err, errlen, "mark a dead nightly FAILED");
    }
    sqlite3_finalize(u);
    free(dead);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    else if (n) *n = nd;
    return rc;
}

static int read_max_run_id(lab_store *st, int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *id = 0;
    int rc = lab_sq_prep(st, "SELECT coalesce(max(id), 0) FROM runs", &s, err, errlen);
    if (rc) return rc;
    int row = next_row(st, s, err, errlen, "largest run id");
    if (row > 0) *id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return row < 0 ? -row : LAB_OK;
}

int lab_store_max_run_id(lab_store *st, int64_t *id, char *err, size_t errlen) {
    return read_max_run_id(st, id, err, errlen);
}

int lab_store_nightly_create(lab_store *st, const lab_nightly_start *ns, int64_t *id, int64_t *max_run_id, char *err,
                             size_t errlen) {
    *id = *max_run_id = 0;
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    rc = lab_sq_prep(st, "INSERT INTO nightlies (started_at, status, git_commit, code_version, host, pid, pid_start,"
                         " experiments_dir, previous_id) VALUES (?1, 'RUNNING', ?2, ?3, ?4, ?5, ?6, ?7,"
                         " (SELECT max(id) FROM nightlies WHERE status IN ('PASSED','CONFOUNDED','REGRESSED')))", &s, err, errlen);
    if (!rc) {
        lab_sq_bind_text(s, 1, ns->started_at);
        lab_sq_bind_text(s, 2, ns->git_commit);
        lab_sq_bind_text(s, 3, ns->code_version);
        lab_sq_bind_text(s, 4, ns->host);
        sqlite3_bind_int64(s, 5, ns->pid);
        bind_id(s, 6, ns->pid_start);
        lab_sq_bind_text(s, 7, ns->experiments_dir);
        rc = lab_sq_step(st, s, err, errlen, "record the nightly");
        sqlite3_finalize(s);
    }
    if (!rc) *id = sqlite3_last_insert_rowid(st->db);
    if (!rc) rc = read_max_run_id(st, max_run_id, err, errlen);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) { lab_sq_rollback(st); *id = *max_run_id = 0; }
    return rc;
}

int lab_store_nightly_attach_runs(lab_store *st, int64_t nightly, int64_t after, const char *host, int64_t pid,
                                  int remeasure, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, remeasure ? "INSERT OR IGNORE INTO nightly_remeasure_runs (nightly_id, run_id) SELECT ?1, id"
                                         " FROM runs WHERE id > ?2 AND host = ?3 AND pid = ?4"
                                       : "INSERT OR IGNORE INTO nightly_runs (nightly_id, run_id) SELECT ?1, id FROM runs"
                                         " WHERE id > ?2 AND host = ?3 AND pid = ?4", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    sqlite3_bind_int64(s, 2, after);
    lab_sq_bind_text(s, 3, host);
    sqlite3_bind_int64(s, 4, pid);
    return write_one(st, s, err, errlen, remeasure ? "attach the re-measurements" : "attach the nightly's runs");
}

int lab_store_nightly_record_host(lab_store *st, int64_t after, const char *host, int64_t pid, double gflops,
                                  char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT OR REPLACE INTO metrics (run_id, name, value) SELECT id, 'host_sgemm_gflops', ?4"
                             " FROM runs WHERE id > ?1 AND host = ?2 AND pid = ?3", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, after);
    lab_sq_bind_text(s, 2, host);
    sqlite3_bind_int64(s, 3, pid);
    bind_num(s, 4, gflops);
    return write_one(st, s, err, errlen, "record the host speed");
}

int lab_store_nightly_scale_throughput(lab_store *st, int64_t after, const char *host, int64_t pid, double factor,
                                       char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE metrics SET value = value * ?4 WHERE name = 'tokens_per_s' AND run_id IN"
                             " (SELECT id FROM runs WHERE id > ?1 AND host = ?2 AND pid = ?3)", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, after);
    lab_sq_bind_text(s, 2, host);
    sqlite3_bind_int64(s, 3, pid);
    sqlite3_bind_double(s, 4, factor);
    return write_one(st, s, err, errlen, "scale the throughput");
}

int lab_store_nightly_finish(lab_store *st, const lab_nightly_end *e, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE nightlies SET finished_at = ?2, status = ?3, n_regressions = ?4, audit = ?5,"
                             " error = ?6, n_runs = (SELECT count(*) FROM nightly_runs WHERE nightly_id = ?1)"
                             " WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, e->id);
    lab_sq_bind_text(s, 2, e->finished_at);
    lab_sq_bind_text(s, 3, e->status);
    sqlite3_bind_int64(s, 4, e->n_regressions);
    lab_sq_bind_text(s, 5, e->audit);
    lab_sq_bind_text(s, 6, e->error);
    return write_one(st, s, err, errlen, "record the nightly's end");
}

int lab_store_nightly_fail(lab_store *st, int64_t id, const char *error, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE nightlies SET status = 'FAILED', error = ?2 WHERE id = ?1 AND status = 'RUNNING'",
                         &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    lab_sq_bind_text(s, 2, error);
    return write_one(st, s, err, errlen, "mark the nightly FAILED");
}

/* ------------------------------------------------------------ the comparison */

void lab_nightly_runs_free(lab_nightly_runs *s) {
    free(s->r);
    s->r = NULL;
    s->n = 0;
}

/* Columns 0..20 of the runs query into r. */
static void read_run(sqlite3_stmt *s, lab_nightly_run *r) {
    r->id = sqlite3_column_int64(s, 0);
    r->rep = sqlite3_column_int64(s, 1);
    lab_sq_col_copy(s, 2, r->arm, sizeof r->arm);
    lab_sq_col_copy(s, 3, r->status, sizeof r->status);
    lab_sq_col_copy(s, 4, r->error, sizeof r->error);
    r->is_ref = sqlite3_column_int(s, 5);
    r->expect_fail = sqlite3_column_int(s, 6);
    r->assertions_ok = sqlite3_column_type(s, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 7);
    lab_sq_col_copy(s, 8, r->backend, sizeof r->backend);
    lab_sq_col_copy(s, 9, r->model, sizeof r->model);
    lab_sq_col_copy(s, 10, r->dataset, sizeof r->dataset);
    lab_sq_col_copy(s, 11, r->knob_hash, sizeof r->knob_hash);
    lab_sq_col_copy(s, 12, r->logits, sizeof r->logits);
    lab_sq_col_copy(s, 13, r->code_version, sizeof r->code_version);
    r->tps = lab_sq_col_num(s, 14);
    r->host = lab_sq_col_num(s, 20);
    if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
        r->has_cmp = 1;
        r->ref_run = sqlite3_column_int64(s, 15);
        r->k = sqlite3_column_int64(s, 16);
        r->n = sqlite3_column_int64(s, 17);
        r->lo = sqlite3_column_double(s, 18);
        r->hi = sqlite3_column_double(s, 19);
    }
}

#define RUN_COLUMNS                                                                                                  \
    "SELECT r.id, r.repeat_idx, r.arm, r.status, coalesce(r.error, ''), r.is_reference,"                            \
    " r.expected_assertions = 'fail', r.assertions_ok, coalesce(r.backend, ''), r.model_sha256,"                   \
    " r.dataset_sha256, r.knob_hash, coalesce(r.logits_sha256, ''), r.code_version,"                                \
    " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s'),"
#define RUN_HOST " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'host_sgemm_gflops')"

int lab_store_nightly_runs(lab_store *st, int64_t nightly, const char *eid, int remeasure, lab_nightly_runs *out,
                           char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, remeasure ?
                         RUN_COLUMNS " NULL, NULL, NULL, NULL, NULL," RUN_HOST
                         " FROM nightly_remeasure_runs nr JOIN runs r ON r.id = nr.run_id"
                         " WHERE nr.nightly_id = ?1 AND r.experiment = ?2 ORDER BY r.arm, r.repeat_idx, r.id" :
                         RUN_COLUMNS " c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi," RUN_HOST
                         " FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                         " LEFT JOIN comparisons c ON c.run_id = r.id"
                         " WHERE nr.nightly_id = ?1 AND r.experiment = ?2 ORDER BY r.arm, r.repeat_idx, r.id",
                         &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    lab_sq_bind_text(s, 2, eid);
    int row;
    int64_t cap = 0;
    while ((row = next_row(st, s, err, errlen, "a nightly's runs")) > 0) {
        lab_nightly_run *r = lab_sq_append((void **)&out->r, &out->n, &cap, sizeof *r);
        if (!r) { row = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        read_run(s, r);
    }
    sqlite3_finalize(s);
    if (row < 0) lab_nightly_runs_free(out);
    return row < 0 ? -row : LAB_OK;
}

void lab_nightly_strings_free(char **v, int64_t n) {
    for (int64_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

int lab_store_nightly_experiments(lab_store *st, int64_t nightly, char ***ids, int64_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT DISTINCT r.experiment FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                             " WHERE nr.nightly_id = ?1 ORDER BY 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    int row, oom = 0;
    int64_t cap = 0;
    while ((row = next_row(st, s, err, errlen, "a nightly's experiments")) > 0) {
        char **slot = lab_sq_append((void **)ids, n, &cap, sizeof *slot);
        if (!slot || !(*slot = dup_col(s, 0, &oom))) {
            row = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
            break;
        }
    }
    sqlite3_finalize(s);
    if (row < 0) { lab_nightly_strings_free(*ids, *n); *ids = NULL; *n = 0; }
    return row < 0 ? -row : LAB_OK;
}

/* Runs s (bound) for at most one row; its column 0 as an integer into *v (0 when none). */
static int one_int(lab_store *st, sqlite3_stmt *s, int64_t *v, char *err, size_t errlen, const char *what) {
    *v = 0;
    int row = next_row(st, s, err, errlen, what);
    if (row > 0) *v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return row < 0 ? -row : LAB_OK;
}

int lab_store_nightly_previous(lab_store *st, int64_t cur, const char *eid, int64_t *prev, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *prev = 0;
    int rc = lab_sq_prep(st, eid ?
                         "SELECT n.id FROM nightlies n WHERE n.id < ?1 AND n.status IN ('PASSED','CONFOUNDED','REGRESSED') AND EXISTS"
                         " (SELECT 1 FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id WHERE nr.nightly_id = n.id"
                         "  AND r.experiment = ?2 AND r.status = 'FINISHED') ORDER BY n.id DESC LIMIT 1" :
                         "SELECT coalesce(max(id), 0) FROM nightlies WHERE id < ?1 AND status IN ('PASSED','CONFOUNDED','REGRESSED')",
                         &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, cur);
    if (eid) lab_sq_bind_text(s, 2, eid);
    return one_int(st, s, prev, err, errlen, "the previous nightly");
}

int lab_store_nightly_night_means(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm, double *v,
                                  int64_t max, int64_t *n, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *n = 0;
    int rc = lab_sq_prep(st, norm ?
        "SELECT n.id, avg(ln(m.value) - ln(h.value)) FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id"
        " JOIN runs r ON r.id = nr.run_id JOIN metrics m ON m.run_id = r.id AND m.name = 'tokens_per_s'"
        " JOIN metrics h ON h.run_id = r.id AND h.name = 'host_sgemm_gflops' AND h.value > 0"
        " WHERE n.id < ?1 AND n.status IN ('PASSED','CONFOUNDED','REGRESSED') AND r.experiment = ?2 AND r.arm = ?3"
        " AND r.status = 'FINISHED' AND m.value > 0 GROUP BY n.id ORDER BY n.id DESC LIMIT ?4" :
        "SELECT n.id, avg(ln(m.value)) FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id"
        " JOIN runs r ON r.id = nr.run_id JOIN metrics m ON m.run_id = r.id AND m.name = 'tokens_per_s'"
        " WHERE n.id < ?1 AND n.status IN ('PASSED','CONFOUNDED','REGRESSED') AND r.experiment = ?2 AND r.arm = ?3"
        " AND r.status = 'FINISHED' AND m.value > 0 GROUP BY n.id ORDER BY n.id DESC LIMIT ?4", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, cur);
    lab_sq_bind_text(s, 2, eid);
    lab_sq_bind_text(s, 3, arm);
    sqlite3_bind_int64(s, 4, max);
    int row = 0;
    while (*n < max && (row = next_row(st, s, err, errlen, "throughput of earlier nightlies")) > 0)
        v[(*n)++] = sqlite3_column_double(s, 1);
    sqlite3_finalize(s);
    if (row < 0) *n = 0;
    return row < 0 ? -row : LAB_OK;
}

int lab_store_nightly_persistent_since(lab_store *st, int64_t prev, const char *eid, const char *arm, const char *kind,
                                       int64_t *since, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *since = 0;
    int rc = lab_sq_prep(st, "SELECT coalesce(json_extract(evidence, '$.persistent_since'), nightly_id)"
                             " FROM nightly_findings WHERE nightly_id = ?1 AND experiment = ?2 AND arm = ?3"
                             " AND kind = ?4 AND (regression = 1 OR json_extract(evidence, '$.acknowledged') = 1)"
                             " LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, prev);
    lab_sq_bind_text(s, 2, eid);
    lab_sq_bind_text(s, 3, arm);
    lab_sq_bind_text(s, 4, kind);
    return one_int(st, s, since, err, errlen, "the previous nightly's findings");
}

int lab_store_nightly_clear_findings(lab_store *st, int64_t nightly, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "DELETE FROM nightly_findings WHERE nightly_id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    return write_one(st, s, err, errlen, "clear the nightly's findings");
}

int lab_store_nightly_put_finding(lab_store *st, int64_t nightly, const lab_nightly_finding *f, char *err,
                                  size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO nightly_findings (nightly_id, experiment, arm, kind, regression, message, run_id,"
                             " previous_run_id, value, previous_value, p, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                             " ?8, ?9, ?10, ?11, ?12)", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    lab_sq_bind_text(s, 2, f->experiment);
    lab_sq_bind_text(s, 3, f->arm);
    lab_sq_bind_text(s, 4, f->kind);
    sqlite3_bind_int(s, 5, f->regression);
    lab_sq_bind_text(s, 6, f->message);
    bind_id(s, 7, f->run_id);
    bind_id(s, 8, f->prev_run_id);
    bind_num(s, 9, f->value);
    bind_num(s, 10, f->prev_value);
    bind_num(s, 11, f->p);
    lab_sq_bind_text(s, 12, f->evidence);
    return write_one(st, s, err, errlen, "store finding");
}

/* ------------------------------------------------------------ acknowledgements */

int lab_store_nightly_find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, lab_nightly_ack *a,
                               char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->value = NAN;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT reason, coalesce(nightly_id, 0), value FROM nightly_acks WHERE experiment = ?1"
                             " AND arm = ?2 AND kind = ?3 AND cleared_at IS NULL", &s, err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, eid);
    lab_sq_bind_text(s, 2, arm);
    lab_sq_bind_text(s, 3, kind);
    int row = next_row(st, s, err, errlen, "acknowledgements");
    if (row > 0) {
        a->found = 1;
        lab_sq_col_copy(s, 0, a->reason, sizeof a->reason);
        a->nightly = sqlite3_column_int64(s, 1);
        a->value = lab_sq_col_num(s, 2);
    }
    sqlite3_finalize(s);
    return row < 0 ? -row : LAB_OK;
}

int lab_store_nightly_clear_acks(lab_store *st, int64_t nightly, const char *now, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st,
                         "UPDATE nightly_acks SET cleared_at = ?2, cleared_by = ?1 WHERE cleared_at IS NULL"
                         " AND kind != 'confound' AND experiment IN"
                         " (SELECT DISTINCT r.experiment FROM nightly_runs nr JOIN runs r ON r.id = nr.run_id"
                         "  WHERE nr.nightly_id = ?1) AND NOT EXISTS (SELECT 1 FROM nightly_findings f WHERE"
                         "  f.nightly_id = ?1 AND f.experiment = nightly_acks.experiment AND f.arm = nightly_acks.arm"
                         "  AND f.kind = nightly_acks.kind AND (f.regression = 1 OR"
                         "  json_extract(f.evidence, '$.acknowledged') = 1))", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    lab_sq_bind_text(s, 2, now);
    return write_one(st, s, err, errlen, "end acknowledgements");
}

int lab_store_nightly_find_regression(lab_store *st, const char *key, int by_id, lab_nightly_target *t, char *err,
                                      size_t errlen) {
    memset(t, 0, sizeof *t);
    t->value = NAN;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, by_id ?
                         "SELECT experiment, arm, kind, nightly_id, value FROM nightly_findings WHERE"
                         " id = CAST(?1 AS INTEGER) AND regression = 1" :
                         "SELECT experiment, arm, kind, nightly_id, value FROM nightly_findings WHERE"
                         " experiment || '/' || arm || '/' || kind = ?1 AND"
                         " (regression = 1 OR json_extract(evidence, '$.acknowledged') = 1) ORDER BY id DESC LIMIT 1",
                         &s, err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, key);
    int row = next_row(st, s, err, errlen, "the finding");
    if (row > 0) {
        t->found = 1;
        lab_sq_col_copy(s, 0, t->experiment, sizeof t->experiment);
        lab_sq_col_copy(s, 1, t->arm, sizeof t->arm);
        lab_sq_col_copy(s, 2, t->kind, sizeof t->kind);
        t->nightly = sqlite3_column_int64(s, 3);
        t->value = lab_sq_col_num(s, 4);
    }
    sqlite3_finalize(s);
    return row < 0 ? -row : LAB_OK;
}

int lab_store_nightly_put_ack(lab_store *st, const lab_nightly_ack_row *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT OR REPLACE INTO nightly_acks (finding, experiment, arm, kind, reason, acked_at,"
                             " nightly_id, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", &s, err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, a->finding);
    lab_sq_bind_text(s, 2, a->experiment);
    lab_sq_bind_text(s, 3, a->arm);
    lab_sq_bind_text(s, 4, a->kind);
    lab_sq_bind_text(s, 5, a->reason);
    lab_sq_bind_text(s, 6, a->acked_at);
    sqlite3_bind_int64(s, 7, a->nightly);
    bind_num(s, 8, a->value);
    return write_one(st, s, err, errlen, "acknowledge");
}

/* ------------------------------------------------------------ outputs */

int lab_store_nightly_get(lab_store *st, int64_t id, lab_nightly_row *n, char *err, size_t errlen) {
    memset(n, 0, sizeof *n);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT id, started_at, coalesce(finished_at, ''), git_commit, code_version, status, host,"
                             " audit, n_runs, n_regressions FROM nightlies WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int row = next_row(st, s, err, errlen, "the nightly");
    if (row > 0) {
        n->id = sqlite3_column_int64(s, 0);
        lab_sq_col_copy(s, 1, n->started, sizeof n->started);
        lab_sq_col_copy(s, 2, n->finished, sizeof n->finished);
        lab_sq_col_copy(s, 3, n->commit, sizeof n->commit);
        lab_sq_col_copy(s, 4, n->code_version, sizeof n->code_version);
        lab_sq_col_copy(s, 5, n->status, sizeof n->status);
        lab_sq_col_copy(s, 6, n->host, sizeof n->host);
        lab_sq_col_copy(s, 7, n->audit, sizeof n->audit);
        n->n_runs = sqlite3_column_int64(s, 8);
        n->n_reg = sqlite3_column_int64(s, 9);
    }
    sqlite3_finalize(s);
    if (row < 0) return -row;
    if (!row) return lab_errf(err, errlen, LAB_EINPUT, "nightly %lld: no such nightly", (long long)id);
    return LAB_OK;
}

int lab_store_nightly_cases(lab_store *st, int64_t id, lab_nightly_case **out, int64_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s;
    /* the engine is read from the case's latest run (its repeats all ran the same arm) */
    int rc = lab_sq_prep(st, "SELECT c.experiment, c.arm, c.t, c.n," LAB_ENGINE_SQL("l") " FROM"
                             " (SELECT r.experiment, r.arm, coalesce(sum(r.wall_s), 0) AS t, count(*) AS n,"
                             " min(r.id) AS first, max(r.id) AS last FROM nightly_runs nr"
                             " JOIN runs r ON r.id = nr.run_id WHERE nr.nightly_id = ?1 GROUP BY r.experiment, r.arm) c"
                             " JOIN runs l ON l.id = c.last"
                             " ORDER BY c.experiment, c.first", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int row;
    int64_t cap = 0;
    while ((row = next_row(st, s, err, errlen, "the nightly's test cases")) > 0) {
        lab_nightly_case *c = lab_sq_append((void **)out, n, &cap, sizeof *c);
        if (!c) { row = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        lab_sq_col_copy(s, 0, c->eid, sizeof c->eid);
        lab_sq_col_copy(s, 1, c->arm, sizeof c->arm);
        c->time = sqlite3_column_double(s, 2);
        c->runs = sqlite3_column_int(s, 3);
        lab_engine_name_read(s, 4, &c->engine);
    }
    sqlite3_finalize(s);
    if (row < 0) { free(*out); *out = NULL; *n = 0; }
    return row < 0 ? -row : LAB_OK;
}

void lab_nightly_shown_free(lab_nightly_shown_list *l) {
    for (int64_t i = 0; l->r && i < l->n; i++) {
        lab_nightly_shown *r = &l->r[i];
        free(r->experiment);
        free(r->arm);
        free(r->kind);
        free(r->message);
        free(r->at);
        free(r->commit);
    }
    free(l->r);
    l->r = NULL;
    l->n = 0;
}

/* Collects the rows of s (bound), whose columns are id, nightly_id,
 * experiment, arm, kind, message, at, commit (NULL where a query has none).
 * Finalizes s. */
static int read_shown(lab_store *st, sqlite3_stmt *s, lab_nightly_shown_list *out, char *err, size_t errlen,
                      const char *what) {
    int row;
    int64_t cap = 0;
    while ((row = next_row(st, s, err, errlen, what)) > 0) {
        int oom = 0;
        lab_nightly_shown *r = lab_sq_append((void **)&out->r, &out->n, &cap, sizeof *r);
        if (r) {
            r->id = sqlite3_column_int64(s, 0);
            r->nightly = sqlite3_column_int64(s, 1);
            r->experiment = dup_col(s, 2, &oom);
            r->arm = dup_col(s, 3, &oom);
            r->kind = dup_col(s, 4, &oom);
            r->message = dup_col(s, 5, &oom);
            r->at = dup_col(s, 6, &oom);
            r->commit = dup_col(s, 7, &oom);
        }
        if (!r || oom) { row = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
    }
    sqlite3_finalize(s);
    if (row < 0) lab_nightly_shown_free(out);
    return row < 0 ? -row : LAB_OK;
}

#define SHOWN_COLUMNS "SELECT f.id, f.nightly_id, f.experiment, f.arm, f.kind, f.message"

int lab_store_nightly_case_findings(lab_store *st, int64_t id, const char *eid, const char *arm, int regression,
                                    lab_nightly_shown_list *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, SHOWN_COLUMNS ", NULL, NULL FROM nightly_findings f WHERE f.nightly_id = ?1"
                             " AND f.experiment = ?2 AND (f.arm = ?3 OR (?4 AND f.arm = '')) AND f.regression = ?5"
                             " ORDER BY f.id", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    lab_sq_bind_text(s, 2, eid);
    lab_sq_bind_text(s, 3, arm);
    sqlite3_bind_int(s, 4, arm[0] != 0 && !regression);
    sqlite3_bind_int(s, 5, regression);
    return read_shown(st, s, out, err, errlen, "a test case's findings");
}

int lab_store_nightly_feed(lab_store *st, int64_t nights, lab_nightly_shown_list *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, SHOWN_COLUMNS ", coalesce(n.finished_at, n.started_at), n.git_commit"
                             " FROM nightly_findings f JOIN nightlies n ON n.id = f.nightly_id WHERE f.regression = 1"
                             " AND json_extract(f.evidence, '$.persistent_since') IS NULL"
                             " AND f.nightly_id IN (SELECT id FROM nightlies ORDER BY id DESC LIMIT ?1)"
                             " ORDER BY f.nightly_id DESC, f.id", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nights);
    return read_shown(st, s, out, err, errlen, "the regressions feed");
}
