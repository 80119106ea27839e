/*
 * store_runs.c — typed reads of single runs (see store_runs.h).
 */
#include "store_runs.h"

#include <stdio.h>

#include "store_internal.h"
#include "util.h"

int lab_store_run_assertions(lab_store *st, int64_t run_id, int *ok, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep(st, "SELECT assertions_ok FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    char what[64];
    snprintf(what, sizeof what, "reading finished run %lld", (long long)run_id);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        if (sqlite3_column_type(s, 0) != SQLITE_NULL) *ok = sqlite3_column_int(s, 0);
        rc = LAB_OK;
    } else if (step == SQLITE_DONE) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "%s: %s: no such run", st->path, what);
    } else {
        rc = lab_sq_error(st, err, errlen, what);
    }
    sqlite3_finalize(s);
    return rc;
}
