/*
 * store_internal.h — for the store's own files (harness/store*.c) only.
 *
 * The store owns results.db: every SQL statement of the harness lives in a
 * store*.c file, behind typed functions declared in store.h (or a
 * store_<area>.h next to it). This header gives those files the handle's
 * fields and the statement helpers they share (store_sql.c), and the
 * schema's entry points (store_schema.c), so that each reads like the
 * others: prepare, bind, step, and one error message that names the database
 * and what was being done (a full disk and a corrupt file said in words).
 * Nothing outside store*.c includes it.
 *
 * The store's files in layers (each uses only those below it):
 *   store_sql.c      the helpers declared here; uses no other store file;
 *   store_schema.c   the migrations (lab_store_migrate, below);
 *   store.c          open, read-only open, liveness, completeness, leases;
 *   store_finish.c   a finished run's rows in one transaction (uses store.c's
 *                    lab_store_run_missing);
 *   store_<area>.c   each command family's reads and writes, on
 *                    store_sql.c; a few also on store.c (store_merge.c opens
 *                    reference databases, store_annot.c reads top-1 ids,
 *                    store_nightly.c asks lab_pid_alive) or on another area
 *                    (store_report.c reads top-k through store_query.c).
 */
#ifndef LAB_STORE_INTERNAL_H
#define LAB_STORE_INTERNAL_H

#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct lab_store {
    sqlite3 *db;
    char    *path;
    int      version;
    int      batch;           /* inside lab_store_batch_begin .. _commit: one transaction for all writes */
    int      batch_failed;    /* a write of the batch failed: it was rolled back whole */
};

/* The connection's last error as "PATH: WHAT: ..." with its status
 * (LAB_EIO; LAB_EINPUT for a corrupt file; LAB_ENOMEM). */
int  lab_sq_error(lab_store *st, char *err, size_t errlen, const char *what);
/* sqlite3_prepare_v2; on failure *s = NULL and the error. */
int  lab_sq_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen);
/* One step that must end in SQLITE_DONE or SQLITE_ROW. */
int  lab_sq_step(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen, const char *what);
/* One statement without parameters (BEGIN, COMMIT, a pragma). */
int  lab_sq_exec(lab_store *st, const char *sql, char *err, size_t errlen);
/* A write's transaction: BEGIN IMMEDIATE .. COMMIT, or nothing inside a
 * batch (lab_store_batch_begin), where a failed write's rollback marks the
 * whole batch failed. */
int  lab_sq_begin(lab_store *st, char *err, size_t errlen);
int  lab_sq_commit(lab_store *st, char *err, size_t errlen);
void lab_sq_rollback(lab_store *st);
/* One prepared, bound write statement as its own write transaction: begin,
 * step, finalize, commit (or roll back on any failure). */
int  lab_sq_write1(lab_store *st, sqlite3_stmt *s, const char *what, char *err, size_t errlen);
/* Ends a stepping loop whose last step returned `last`: SQLITE_DONE is the
 * only good end (else the connection's error about `what`). Finalizes s. */
int  lab_sq_done(lab_store *st, sqlite3_stmt *s, int last, const char *what, char *err, size_t errlen);
/* Text or NULL. */
void lab_sq_bind_text(sqlite3_stmt *s, int i, const char *v);
/* lab_sq_prep, its error naming what the statement reads ("PATH: what: ..."). */
int  lab_sq_prep_as(lab_store *st, const char *sql, sqlite3_stmt **s, const char *what, char *err, size_t errlen);
/* Column i as a double; NAN for NULL ("not measured"). */
double lab_sq_col_num(sqlite3_stmt *s, int i);
/* Column i's text into dst (n bytes, cut to fit); "" for NULL. */
void lab_sq_col_copy(sqlite3_stmt *s, int i, char *dst, size_t n);
/* Appends a zeroed `size`-byte row to the array *v of *n rows (capacity *cap,
 * doubled when full) and returns it, *n counting it; NULL when out of memory
 * (the array and *n are left as they were). The readers' one way to grow
 * their results. */
void *lab_sq_append(void **v, int64_t *n, int64_t *cap, size_t size);
/* Steps the prepared, bound statement s to its end, copying each row with
 * `copy` into a zeroed `size`-byte row appended to *v[*n] (which start empty);
 * finalizes s. On any failure *v is freed and *v, *n are NULL, 0. */
int  lab_sq_collect(lab_store *st, sqlite3_stmt *s, const char *what, void (*copy)(sqlite3_stmt *, void *), size_t size,
                    void **v, int64_t *n, char *err, size_t errlen);
/* Column i of the current row as text; "" for NULL (never a NULL pointer). */
const char *lab_col_text(sqlite3_stmt *s, int i);
/* Optional values of the step tables: text, NULL for NULL or ""; a finite
 * number, NULL for NaN or infinity ("not measured"); a row id, NULL for 0
 * or less ("none"). */
void lab_sq_bind_opt_text(sqlite3_stmt *s, int i, const char *v);
void lab_sq_bind_num(sqlite3_stmt *s, int i, double v);
void lab_sq_bind_id(sqlite3_stmt *s, int i, int64_t v);
/* An insert s, then u when not NULL (the update of the row the new one
 * belongs to), as one write transaction: begin, step s, *id = its new row
 * id, step u, finalize both, commit (or roll back on any failure). */
int  lab_sq_write_rowid(lab_store *st, sqlite3_stmt *s, sqlite3_stmt *u, int64_t *id, const char *what, char *err,
                        size_t errlen);
/* A step's evidence, for the two step tables (bisect_steps, localize_steps:
 * arm_run_id, ref_run_id, top1_k, top1_n, top1_lo, top1_hi, verdict, lost,
 * gained, p, in this order in both) and a step struct r of either
 * (lab_bisect_step, lab_localize_step: the same field names; macros because
 * the two structs are different types). Reads columns i .. i + 9 into r: */
#define LAB_SQ_COL_STEP_EVIDENCE(s, i, r)                                    \
    do {                                                                     \
        (r)->arm_run_id = sqlite3_column_int64((s), (i));                    \
        (r)->ref_run_id = sqlite3_column_int64((s), (i) + 1);                \
        (r)->k = sqlite3_column_int64((s), (i) + 2);                         \
        (r)->n = sqlite3_column_int64((s), (i) + 3);                         \
        (r)->lo = lab_sq_col_num((s), (i) + 4);                              \
        (r)->hi = lab_sq_col_num((s), (i) + 5);                              \
        lab_sq_col_copy((s), (i) + 6, (r)->verdict, sizeof (r)->verdict);    \
        (r)->lost = sqlite3_column_int64((s), (i) + 7);                      \
        (r)->gained = sqlite3_column_int64((s), (i) + 8);                    \
        (r)->p = lab_sq_col_num((s), (i) + 9);                               \
    } while (0)
/* Binds r's evidence as ?i .. ?i + 9, NULL where the step did not measure
 * it: the agreement of a step without a run (arm_run_id 0), the counts of a
 * step without a paired test (p NaN). */
#define LAB_SQ_BIND_STEP_EVIDENCE(s, i, r)                                   \
    do {                                                                     \
        lab_sq_bind_id((s), (i), (r)->arm_run_id);                           \
        lab_sq_bind_id((s), (i) + 1, (r)->ref_run_id);                       \
        if ((r)->arm_run_id > 0) {                                           \
            sqlite3_bind_int64((s), (i) + 2, (r)->k);                        \
            sqlite3_bind_int64((s), (i) + 3, (r)->n);                        \
        }                                                                    \
        lab_sq_bind_num((s), (i) + 4, (r)->arm_run_id > 0 ? (r)->lo : NAN);  \
        lab_sq_bind_num((s), (i) + 5, (r)->arm_run_id > 0 ? (r)->hi : NAN);  \
        lab_sq_bind_opt_text((s), (i) + 6, (r)->verdict);                    \
        if (isfinite((r)->p)) {                                              \
            sqlite3_bind_int64((s), (i) + 7, (r)->lost);                     \
            sqlite3_bind_int64((s), (i) + 8, (r)->gained);                   \
        }                                                                    \
        lab_sq_bind_num((s), (i) + 9, (r)->p);                               \
    } while (0)
/* The connection (tests that build old or broken databases; store files use st->db). */
sqlite3 *lab_store_db(lab_store *st);

/* store_schema.c: migrates st to version target (one transaction per
 * version; st->version set), and reads PRAGMA user_version into *v. */
int  lab_store_migrate(lab_store *st, int target, char *err, size_t errlen);
int  lab_store_read_version(lab_store *st, int *v, char *err, size_t errlen);

#endif
