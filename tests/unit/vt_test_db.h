/* vt_test_db.h — a results.db of the test's own, for the unit tests that
 * build or read the store's rows with raw SQL (test_store.c,
 * test_nightly_schema.c): its path under /tmp, made empty before each test
 * and removed after it, and q_int, the one integer a query returns.
 * Include it after vt_test.h. */
#ifndef VT_TEST_DB_H
#define VT_TEST_DB_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "harness/store.h"
#include "harness/store_internal.h"   /* raw SQL: old schemas, broken rows, fixtures no API writes */

/* The test's database: /tmp/vtlab-test-NAME-PID.db (vt_test_db_reset). */
static char dbpath[256];

/* Sets dbpath for the test NAME and removes any database there with the
 * -wal and -shm files SQLite keeps beside it: a cmocka setup and teardown,
 * so that each test starts with none and leaves none. */
static inline void vt_test_db_reset(const char *name) {
    snprintf(dbpath, sizeof dbpath, "/tmp/vtlab-test-%s-%d.db", name, (int)getpid());
    char p[300];
    unlink(dbpath);
    snprintf(p, sizeof p, "%s-wal", dbpath);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", dbpath);
    unlink(p);
}

/* The first column of the first row of sql as an integer (-999: no row);
 * fails the test when sql does not prepare. */
static inline int64_t q_int(lab_store *st, const char *sql) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, &s, NULL) != SQLITE_OK) fail_msg("prepare %s", sql);
    int64_t v = -999;
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

#endif
