/*
 * store_nightly_confounds.c — the nightly's confounds in results.db (table
 * nightly_confounds, and nightly_acks rows of kind 'confound'); the
 * contract is in store_nightly.h, the decisions in nightly_confounds.c.
 *
 * Every read collects its rows into fixed-size structs and checks how the
 * last step ended (an I/O error is an error, not a shorter list).
 */
#include "store_nightly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* ------------------------------------------------------------ the flags judged */

static void copy_cflag(sqlite3_stmt *s, void *row) {
    lab_nightly_cflag *f = row;
    f->claim = sqlite3_column_int(s, 0);
    lab_sq_col_copy(s, 1, f->subject, sizeof f->subject);
    lab_sq_col_copy(s, 2, f->rule, sizeof f->rule);
    lab_sq_col_copy(s, 3, f->key, sizeof f->key);
    lab_sq_col_copy(s, 4, f->reason, sizeof f->reason);
    lab_sq_col_copy(s, 5, f->experiment, sizeof f->experiment);
    lab_sq_col_copy(s, 6, f->arm, sizeof f->arm);
    f->run_id = sqlite3_column_int64(s, 7);
}

int lab_store_nightly_confound_flags(lab_store *st, int64_t nightly, lab_nightly_cflag **out, int64_t *n, char *err,
                                     size_t errlen) {
    *out = NULL;
    *n = 0;
    int have = 0, rc = lab_store_has_table(st, "audit_flags", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    const char *what = "the confounds to judge";
    if ((rc = lab_sq_prep_as(st,
                   "SELECT f.subject_kind = 'claim', f.subject, f.rule, f.key, f.reason, coalesce(r.experiment, ''),"
                   " coalesce(r.arm, ''), CASE WHEN f.subject_kind = 'run' THEN CAST(f.subject AS INTEGER) ELSE 0 END"
                   " FROM audit_flags f LEFT JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
                   " WHERE f.resolved_at IS NULL AND f.expected = 0 AND (f.subject_kind = 'claim' OR EXISTS"
                   " (SELECT 1 FROM nightly_runs nr WHERE nr.nightly_id = ?1 AND nr.run_id = CAST(f.subject AS INTEGER)))"
                   " ORDER BY f.id", &s, what, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, nightly);
    return lab_sq_collect(st, s, what, copy_cflag, sizeof **out, (void **)out, n, err, errlen);
}

/* ------------------------------------------------------------ nightly_confounds */

#define CONFOUND_COLUMNS "SELECT c.rowid, c.nightly_id, c.since_nightly, c.is_new, c.key, c.state, c.subject, c.rule," \
                         " c.runs, c.reason, coalesce(c.ack_reason, '')"

static void copy_confound(sqlite3_stmt *s, void *row) {
    lab_nightly_confound *c = row;
    c->id = sqlite3_column_int64(s, 0);
    c->nightly = sqlite3_column_int64(s, 1);
    c->since = sqlite3_column_int64(s, 2);
    c->is_new = sqlite3_column_int(s, 3);
    lab_sq_col_copy(s, 4, c->key, sizeof c->key);
    lab_sq_col_copy(s, 5, c->state, sizeof c->state);
    lab_sq_col_copy(s, 6, c->subject, sizeof c->subject);
    lab_sq_col_copy(s, 7, c->rule, sizeof c->rule);
    lab_sq_col_copy(s, 8, c->runs, sizeof c->runs);
    lab_sq_col_copy(s, 9, c->reason, sizeof c->reason);
    lab_sq_col_copy(s, 10, c->ack_reason, sizeof c->ack_reason);
    if (sqlite3_column_count(s) > 13) {   /* the feed's three columns */
        lab_sq_col_copy(s, 11, c->at, sizeof c->at);
        lab_sq_col_copy(s, 12, c->commit, sizeof c->commit);
        lab_sq_col_copy(s, 13, c->status, sizeof c->status);
    }
}

int lab_store_nightly_get_confounds(lab_store *st, int64_t nightly, lab_nightly_confounds *out, char *err,
                                    size_t errlen) {
    memset(out, 0, sizeof *out);
    int have = 0, rc = lab_store_has_table(st, "nightly_confounds", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    const char *what = "the nightly's confounds";
    if ((rc = lab_sq_prep_as(st, CONFOUND_COLUMNS " FROM nightly_confounds c WHERE c.nightly_id = ?1 ORDER BY"
                                 " CASE c.state WHEN 'open' THEN 0 WHEN 'acknowledged' THEN 1 ELSE 2 END, c.key",
                             &s, what, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, nightly);
    return lab_sq_collect(st, s, what, copy_confound, sizeof *out->r, (void **)&out->r, &out->n, err, errlen);
}

int lab_store_nightly_clear_confounds(lab_store *st, int64_t nightly, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "DELETE FROM nightly_confounds WHERE nightly_id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    return lab_sq_write1(st, s, "clear the nightly's confounds", err, errlen);
}

int lab_store_nightly_put_confound(lab_store *st, const lab_nightly_confound *c, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO nightly_confounds (nightly_id, key, state, is_new, since_nightly, subject, rule,"
                             " runs, reason, ack_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, c->nightly);
    lab_sq_bind_text(s, 2, c->key);
    lab_sq_bind_text(s, 3, c->state);
    sqlite3_bind_int(s, 4, c->is_new);
    sqlite3_bind_int64(s, 5, c->since);
    lab_sq_bind_text(s, 6, c->subject);
    lab_sq_bind_text(s, 7, c->rule);
    lab_sq_bind_text(s, 8, c->runs);
    lab_sq_bind_text(s, 9, c->reason);
    lab_sq_bind_text(s, 10, c->ack_reason[0] ? c->ack_reason : NULL);
    return lab_sq_write1(st, s, "store a confound", err, errlen);
}

int lab_store_nightly_confound_feed(lab_store *st, int64_t nights, lab_nightly_confounds *out, char *err,
                                    size_t errlen) {
    memset(out, 0, sizeof *out);
    int have = 0, rc = lab_store_has_table(st, "nightly_confounds", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    const char *what = "the confounds feed";
    if ((rc = lab_sq_prep_as(st, CONFOUND_COLUMNS ", coalesce(n.finished_at, n.started_at), n.git_commit, n.status"
                                 " FROM nightly_confounds c JOIN nightlies n ON n.id = c.nightly_id"
                                 " WHERE c.state = 'open' AND c.is_new = 1"
                                 " AND c.nightly_id IN (SELECT id FROM nightlies ORDER BY id DESC LIMIT ?1)"
                                 " ORDER BY c.nightly_id DESC, c.key", &s, what, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, nights);
    return lab_sq_collect(st, s, what, copy_confound, sizeof *out->r, (void **)&out->r, &out->n, err, errlen);
}

int lab_store_nightly_find_confound(lab_store *st, const char *key, int64_t *nightly, char *err, size_t errlen) {
    *nightly = 0;
    int have = 0, rc = lab_store_has_table(st, "nightly_confounds", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "SELECT coalesce(max(nightly_id), 0) FROM nightly_confounds WHERE key = ?1"
                              " AND state IN ('open', 'acknowledged')", &s, err, errlen)))
        return rc;
    lab_sq_bind_text(s, 1, key);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) { *nightly = sqlite3_column_int64(s, 0); last = SQLITE_DONE; }
    return lab_sq_done(st, s, last, "the confound", err, errlen);
}

/* ------------------------------------------------------------ acknowledgements */

int lab_store_nightly_find_confound_ack(lab_store *st, const char *key, int *found, char *reason, size_t reasonlen,
                                        char *err, size_t errlen) {
    *found = 0;
    reason[0] = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT reason FROM nightly_acks WHERE finding = ?1 AND kind = 'confound'"
                             " AND cleared_at IS NULL", &s, err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, key);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        *found = 1;
        lab_sq_col_copy(s, 0, reason, reasonlen);
        last = SQLITE_DONE;   /* finding is the key: one row at most */
    }
    return lab_sq_done(st, s, last, "acknowledgements", err, errlen);
}

int lab_store_nightly_clear_confound_acks(lab_store *st, int64_t nightly, const char *now, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE nightly_acks SET cleared_at = ?2, cleared_by = ?1 WHERE cleared_at IS NULL"
                             " AND kind = 'confound' AND NOT EXISTS (SELECT 1 FROM nightly_confounds c WHERE"
                             " c.nightly_id = ?1 AND c.key = nightly_acks.finding AND c.state IN ('open', 'acknowledged'))",
                         &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, nightly);
    lab_sq_bind_text(s, 2, now);
    return lab_sq_write1(st, s, "end acknowledgements of resolved confounds", err, errlen);
}

static void copy_ack(sqlite3_stmt *s, void *row) {
    lab_nightly_ack_listed *a = row;
    lab_sq_col_copy(s, 0, a->key, sizeof a->key);
    lab_sq_col_copy(s, 1, a->kind, sizeof a->kind);
    lab_sq_col_copy(s, 2, a->reason, sizeof a->reason);
    lab_sq_col_copy(s, 3, a->acked_at, sizeof a->acked_at);
    a->nightly = sqlite3_column_int64(s, 4);
    a->value = lab_sq_col_num(s, 5);
}

int lab_store_nightly_list_acks(lab_store *st, lab_nightly_ack_listed **out, int64_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s;
    const char *what = "the acknowledgements";
    int rc = lab_sq_prep_as(st, "SELECT finding, kind, reason, acked_at, coalesce(nightly_id, 0), value FROM nightly_acks"
                                " WHERE cleared_at IS NULL ORDER BY acked_at, finding", &s, what, err, errlen);
    if (rc) return rc;
    return lab_sq_collect(st, s, what, copy_ack, sizeof **out, (void **)out, n, err, errlen);
}

int lab_store_nightly_remove_ack(lab_store *st, const char *key, const char *now, int *removed, char *err,
                                 size_t errlen) {
    *removed = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    /* cleared_by stays NULL: ended by hand, not by a nightly */
    rc = lab_sq_prep(st, "UPDATE nightly_acks SET cleared_at = ?2 WHERE finding = ?1 AND cleared_at IS NULL", &s, err,
                     errlen);
    if (!rc) {
        lab_sq_bind_text(s, 1, key);
        lab_sq_bind_text(s, 2, now);
        rc = lab_sq_step(st, s, err, errlen, "remove an acknowledgement");
        sqlite3_finalize(s);
    }
    if (!rc) *removed = sqlite3_changes(st->db) > 0;
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}
