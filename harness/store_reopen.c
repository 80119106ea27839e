/*
 * store_reopen.c — the reopen's reads and writes of results.db (see
 * store_reopen.h).
 */
#include "store_reopen.h"

#include <stdio.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

int lab_reopen_read_arm(lab_store *st, const lab_reopen_arm_key *key, lab_reopen_arm_run *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    char what[300];
    snprintf(what, sizeof what, "reading the finished runs of %s/%s", key->experiment, key->arm);
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT r.id, c.top1_k, c.top1_n, json_extract(r.engine_hello, '$.engine.name'),"
                        " json_extract(r.engine_hello, '$.engine.commit') FROM runs r JOIN comparisons c ON c.run_id = r.id"
                        " WHERE r.experiment = ?1 AND r.arm = ?2 AND r.knob_hash = ?3 AND r.code_version = ?4"
                        " AND r.status = 'FINISHED' ORDER BY r.id DESC LIMIT 1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, key->experiment);
    lab_sq_bind_text(s, 2, key->arm);
    lab_sq_bind_text(s, 3, key->knob_hash);
    lab_sq_bind_text(s, 4, key->code_version);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) {
        out->found = 1;
        out->run = sqlite3_column_int64(s, 0);
        out->k = sqlite3_column_int64(s, 1);
        out->n = sqlite3_column_int64(s, 2);
        lab_sq_col_copy(s, 3, out->engine, sizeof out->engine);
        lab_sq_col_copy(s, 4, out->commit, sizeof out->commit);
    } else if (step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}

int lab_reopen_read_reference(lab_store *st, int64_t run_id, int64_t *ref, char *err, size_t errlen) {
    *ref = 0;
    char what[96];
    snprintf(what, sizeof what, "reading the reference run of run %lld", (long long)run_id);
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "SELECT reference_run_id FROM comparisons WHERE run_id = ?1", &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s), rc = LAB_OK;
    if (step == SQLITE_ROW) *ref = sqlite3_column_int64(s, 0);
    else if (step != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_reopen_put(lab_store *st, const lab_reopen_row *row, char *err, size_t errlen) {
    char what[200];
    snprintf(what, sizeof what, "recording the reopen of claim %s", row->claim_id);
    sqlite3_stmt *s = NULL;
    if (lab_sq_prep(st, "INSERT INTO reopens (claim_id, defect_id, replay_run_id, rerun_run_id, explained,"
                        " explanation, new_claim_id, new_verdict, at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                    &s, err, errlen))
        return lab_sq_error(st, err, errlen, what);
    lab_sq_bind_text(s, 1, row->claim_id);
    lab_sq_bind_text(s, 2, row->defect_id);
    if (row->replay_run) sqlite3_bind_int64(s, 3, row->replay_run);
    else sqlite3_bind_null(s, 3);
    sqlite3_bind_int64(s, 4, row->rerun_run);
    sqlite3_bind_int(s, 5, row->explained);
    lab_sq_bind_text(s, 6, row->explanation);
    lab_sq_bind_text(s, 7, row->new_claim_id);
    lab_sq_bind_text(s, 8, row->new_verdict);
    lab_sq_bind_text(s, 9, row->at);
    return lab_sq_write1(st, s, what, err, errlen);
}
