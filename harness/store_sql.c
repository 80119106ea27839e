/*
 * store_sql.c — the statement helpers every store*.c file shares (lab_sq_*,
 * lab_col_text; declared in store_internal.h), and the handle's plain parts
 * of store.h: its path, version and error text, lab_store_has_table, the
 * batch transaction and lab_store_exec.
 *
 * A file of its own at the bottom of the store: every other store*.c file
 * uses it and it uses none of them, so the store's files depend on each
 * other in layers, never in a circle (see store_internal.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* The error of the connection's last call, named by the database path and
 * what was being done. Two causes a person must act on are said in words, as
 * SQLite's own text ("database or disk is full", "disk I/O error") does not:
 * a full disk (SQLITE_FULL, or an I/O error whose errno is ENOSPC) and a
 * corrupt file (SQLITE_CORRUPT, SQLITE_NOTADB). */
int lab_sq_error(lab_store *st, char *err, size_t errlen, const char *what) {
    int code = sqlite3_extended_errcode(st->db), primary = code & 0xff;
    if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC))
        return lab_errf(err, errlen, LAB_EIO,
                        "%s: %s: the disk is full (no space left on the device holding the database or its -wal "
                        "file); free space and rerun (%s)", st->path, what, sqlite3_errmsg(st->db));
    if (primary == SQLITE_IOERR && sqlite3_system_errno(st->db) == EFBIG)
        return lab_errf(err, errlen, LAB_EIO, "%s: %s: file too large: the process's file size limit (ulimit -f) "
                        "was reached (%s)", st->path, what, sqlite3_errmsg(st->db));
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: the database file is corrupt or not a vtlab database (%s)",
                        st->path, what, sqlite3_errmsg(st->db));
    int status = (primary == SQLITE_NOMEM) ? LAB_ENOMEM : LAB_EIO;
    return lab_errf(err, errlen, status, "%s: %s: %s", st->path, what, sqlite3_errmsg(st->db));
}

int lab_store_error(lab_store *st, const char *what, char *err, size_t errlen) {
    return lab_sq_error(st, err, errlen, what);
}

const char *lab_store_path(lab_store *st) { return st->path; }

int lab_sq_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(st->db, sql, -1, s, NULL) != SQLITE_OK) {
        *s = NULL;
        return lab_sq_error(st, err, errlen, "prepare");
    }
    return LAB_OK;
}

int lab_sq_step(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen, const char *what) {
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return lab_sq_error(st, err, errlen, what);
    return LAB_OK;
}

int lab_sq_prep_as(lab_store *st, const char *sql, sqlite3_stmt **s, const char *what, char *err, size_t errlen) {
    if (lab_sq_prep(st, sql, s, err, errlen)) return lab_sq_error(st, err, errlen, what);
    return LAB_OK;
}

double lab_sq_col_num(sqlite3_stmt *s, int i) {
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

void lab_sq_col_copy(sqlite3_stmt *s, int i, char *dst, size_t n) { snprintf(dst, n, "%s", lab_col_text(s, i)); }

void *lab_sq_append(void **v, int64_t *n, int64_t *cap, size_t size) {
    if (*n >= *cap) {
        int64_t c = *cap ? *cap * 2 : 16;
        if (c <= *n) c = *n + 16;
        void *nv = realloc(*v, (size_t)c * size);
        if (!nv) return NULL;
        *v = nv;
        *cap = c;
    }
    char *row = (char *)*v + (size_t)(*n)++ * size;
    memset(row, 0, size);
    return row;
}

int lab_sq_done(lab_store *st, sqlite3_stmt *s, int last, const char *what, char *err, size_t errlen) {
    int rc = last == SQLITE_DONE ? LAB_OK : lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_sq_collect(lab_store *st, sqlite3_stmt *s, const char *what, void (*copy)(sqlite3_stmt *, void *), size_t size,
                   void **v, int64_t *n, char *err, size_t errlen) {
    int64_t cap = 0;
    int last, rc = LAB_OK;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        void *row = lab_sq_append(v, n, &cap, size);
        if (!row) { rc = lab_oom(err, errlen); break; }
        copy(s, row);
    }
    if (rc) sqlite3_finalize(s);
    else rc = lab_sq_done(st, s, last, what, err, errlen);
    if (rc) { free(*v); *v = NULL; *n = 0; }
    return rc;
}

int lab_sq_exec(lab_store *st, const char *sql, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    rc = lab_sq_step(st, s, err, errlen, sql);
    sqlite3_finalize(s);
    return rc;
}

/* Each write is its own BEGIN IMMEDIATE .. COMMIT, except inside a batch,
 * where they are all part of the batch's one transaction: there a failing
 * write's rollback undoes the whole batch, and every later write is refused. */
int lab_sq_begin(lab_store *st, char *err, size_t errlen) {
    if (st->batch)
        return st->batch_failed ? lab_errf(err, errlen, LAB_EIO, "%s: an earlier write of this batch failed", st->path)
                                : LAB_OK;
    return lab_sq_exec(st, "BEGIN IMMEDIATE", err, errlen);
}
int lab_sq_commit(lab_store *st, char *err, size_t errlen) {
    return st->batch ? LAB_OK : lab_sq_exec(st, "COMMIT", err, errlen);
}
void lab_sq_rollback(lab_store *st) {
    if (st->batch) st->batch_failed = 1;
    if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
}
int lab_sq_write1(lab_store *st, sqlite3_stmt *s, const char *what, char *err, size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (!rc) rc = lab_sq_step(st, s, err, errlen, what);
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

int lab_store_has_table(lab_store *st, const char *name, int *have, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *have = 0;
    int rc = lab_sq_prep(st, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    *have = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return LAB_OK;
}

int lab_store_batch_begin(lab_store *st, char *err, size_t errlen) {
    if (st->batch) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: batches do not nest", st->path);
    int rc = lab_sq_exec(st, "BEGIN IMMEDIATE", err, errlen);
    if (!rc) st->batch = 1, st->batch_failed = 0;
    return rc;
}

int lab_store_batch_commit(lab_store *st, char *err, size_t errlen) {
    if (!st->batch) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: no batch to commit", st->path);
    st->batch = 0;
    if (st->batch_failed) {
        if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
        return lab_errf(err, errlen, LAB_EIO, "%s: a write of the batch failed; nothing of it was written", st->path);
    }
    int rc = lab_sq_exec(st, "COMMIT", err, errlen);
    if (rc && !sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
    return rc;
}

void lab_store_batch_rollback(lab_store *st) {
    st->batch = 0;
    if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
}

void lab_sq_bind_text(sqlite3_stmt *s, int i, const char *v) {
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(s, i);
}

void lab_sq_bind_opt_text(sqlite3_stmt *s, int i, const char *v) { lab_sq_bind_text(s, i, v && v[0] ? v : NULL); }

void lab_sq_bind_num(sqlite3_stmt *s, int i, double v) {
    if (isfinite(v)) sqlite3_bind_double(s, i, v);
    else sqlite3_bind_null(s, i);
}

void lab_sq_bind_id(sqlite3_stmt *s, int i, int64_t v) {
    if (v > 0) sqlite3_bind_int64(s, i, v);
    else sqlite3_bind_null(s, i);
}

int lab_sq_write_rowid(lab_store *st, sqlite3_stmt *s, sqlite3_stmt *u, int64_t *id, const char *what, char *err,
                       size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (!rc) rc = lab_sq_step(st, s, err, errlen, what);
    if (!rc) *id = sqlite3_last_insert_rowid(st->db);
    if (!rc && u) rc = lab_sq_step(st, u, err, errlen, what);
    sqlite3_finalize(s);
    sqlite3_finalize(u);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

const char *lab_col_text(sqlite3_stmt *s, int i) {
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

sqlite3 *lab_store_db(lab_store *st) { return st->db; }
int lab_store_version(lab_store *st) { return st->version; }

int lab_store_exec(lab_store *st, const char *sql, int nparams, const char *const *params, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < nparams; i++) lab_sq_bind_text(s, i + 1, params[i]);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {}
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LAB_OK : lab_sq_error(st, err, errlen, "exec");
}
