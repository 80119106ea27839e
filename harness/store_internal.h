/*
 * store_internal.h — for the store's own files (harness/store*.c) only.
 *
 * The store owns results.db: every SQL statement of the harness lives in a
 * store*.c file, behind typed functions declared in store.h (or a
 * store_<area>.h next to it). This header gives those files the handle's
 * fields and the statement helpers they share, so that each reads like the
 * others: prepare, bind, step, and one error message that names the database
 * and what was being done (a full disk and a corrupt file said in words).
 * Nothing outside store*.c includes it.
 */
#ifndef LAB_STORE_INTERNAL_H
#define LAB_STORE_INTERNAL_H

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
/* The connection (tests that build old or broken databases; store files use st->db). */
sqlite3 *lab_store_db(lab_store *st);

#endif
