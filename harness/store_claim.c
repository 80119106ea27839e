/*
 * store_claim.c — the reads of `vtlab claim` (see store_claim.h).
 */
#include "store_claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* Column i as a new string; NULL for NULL. *oom set when the copy failed. */
static char *col_dup(sqlite3_stmt *s, int i, int *oom) {
    if (sqlite3_column_type(s, i) == SQLITE_NULL) return NULL;
    char *v = lab_strdup(lab_col_text(s, i));
    if (!v) *oom = 1;
    return v;
}

static int read_identity(lab_store *st, int64_t id, lab_claim_run *out, const char *what, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT r.status, r.is_reference, r.experiment, r.arm, r.started_at, r.git_commit, r.shard,"
                        " json_extract(r.engine_hello, '$.engine.name'), json_extract(r.engine_hello, '$.engine.commit'),"
                        " p.file, p.json FROM runs r LEFT JOIN experiment_specs p ON p.sha256 = r.experiment_sha256"
                        " WHERE r.id = ?1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s), rc = LAB_OK, oom = 0;
    if (step == SQLITE_ROW) {
        out->found = 1;
        lab_sq_col_copy(s, 0, out->status, sizeof out->status);
        out->is_reference = sqlite3_column_int(s, 1);
        lab_sq_col_copy(s, 2, out->experiment, sizeof out->experiment);
        lab_sq_col_copy(s, 3, out->arm, sizeof out->arm);
        lab_sq_col_copy(s, 4, out->started, sizeof out->started);
        lab_sq_col_copy(s, 5, out->commit, sizeof out->commit);
        lab_sq_col_copy(s, 6, out->shard, sizeof out->shard);
        lab_sq_col_copy(s, 7, out->engine, sizeof out->engine);
        lab_sq_col_copy(s, 8, out->engine_commit, sizeof out->engine_commit);
        out->spec_file = col_dup(s, 9, &oom);
        out->spec_json = col_dup(s, 10, &oom);
        if (oom) rc = lab_oom(err, errlen);
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}

/* The latest verdict: a run compared again (a recomputed reference) has one
 * per reference run. */
static int read_verdict(lab_store *st, int64_t id, lab_claim_run *out, const char *what, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT reference_run_id, metric, threshold, direction, k, n, verdict FROM verdicts"
                        " WHERE run_id = ?1 ORDER BY decided_at DESC, reference_run_id DESC LIMIT 1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) {
        out->has_verdict = 1;
        out->reference_run = sqlite3_column_int64(s, 0);
        lab_sq_col_copy(s, 1, out->metric, sizeof out->metric);
        out->threshold = sqlite3_column_double(s, 2);
        lab_sq_col_copy(s, 3, out->direction, sizeof out->direction);
        out->k = sqlite3_column_int64(s, 4);
        out->n = sqlite3_column_int64(s, 5);
        lab_sq_col_copy(s, 6, out->verdict, sizeof out->verdict);
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}

int lab_claim_read_run(lab_store *st, int64_t id, lab_claim_run *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char what[96];
    snprintf(what, sizeof what, "reading run %lld", (long long)id);
    int rc = read_identity(st, id, out, what, err, errlen);
    if (!rc && out->found) {
        snprintf(what, sizeof what, "reading the verdict of run %lld", (long long)id);
        rc = read_verdict(st, id, out, what, err, errlen);
    }
    if (rc) lab_claim_run_free(out);
    return rc;
}

void lab_claim_run_free(lab_claim_run *r) {
    free(r->spec_file);
    free(r->spec_json);
    memset(r, 0, sizeof *r);
}
