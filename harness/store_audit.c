/*
 * store_audit.c — the audit's reads and writes of results.db (store_audit.h).
 *
 * Each reader prepares one statement, steps it to SQLITE_DONE and copies the
 * rows into plain structs; any other end of the steps is an error naming the
 * database and what was read, never a short answer.
 */
#include "store_audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* Test-only hook (store_audit.h): VTLAB_TEST_AUDIT_FAIL=RULE[:READER] makes
 * the reader `reader`, which serves the space-separated `rules`, fail when
 * RULE is one of them (and READER, when given, is this reader). */
static int injected(lab_store *st, const char *rules, const char *reader, const char *what, char *err,
                    size_t errlen) {
    const char *v = getenv("VTLAB_TEST_AUDIT_FAIL");
    if (!v || !*v) return LAB_OK;
    size_t rl = strcspn(v, ":");
    if (v[rl] == ':' && strcmp(v + rl + 1, reader) != 0) return LAB_OK;
    for (const char *p = rules; *p;) {
        size_t n = strcspn(p, " ");
        if (n == rl && strncmp(p, v, rl) == 0)
            return lab_errf(err, errlen, LAB_EIO, "%s: %s: injected failure (VTLAB_TEST_AUDIT_FAIL=%s)", st->path,
                            what, v);
        p += n;
        p += strspn(p, " ");
    }
    return LAB_OK;
}






void lab_audit_free(void *rows) { free(rows); }

/* ------------------------------------------------------------ runs */

static void run_from_row(sqlite3_stmt *s, void *row) {
    lab_audit_finished_run *r = row;
    r->id = sqlite3_column_int64(s, 0);
    lab_sq_col_copy(s, 1, r->experiment, sizeof r->experiment); lab_sq_col_copy(s, 2, r->arm, sizeof r->arm);
    lab_sq_col_copy(s, 3, r->commit, sizeof r->commit); lab_sq_col_copy(s, 4, r->started, sizeof r->started);
    lab_sq_col_copy(s, 5, r->knob_hash, sizeof r->knob_hash); lab_sq_col_copy(s, 6, r->model, sizeof r->model);
    lab_sq_col_copy(s, 7, r->dataset, sizeof r->dataset); lab_sq_col_copy(s, 8, r->code, sizeof r->code);
    lab_sq_col_copy(s, 9, r->logits, sizeof r->logits); lab_sq_col_copy(s, 10, r->backend, sizeof r->backend);
    r->expected_fail = sqlite3_column_int(s, 11);
    r->assertions_ok = sqlite3_column_int(s, 12);
    lab_sq_col_copy(s, 13, r->assertion_reason, sizeof r->assertion_reason);
    r->is_reference = sqlite3_column_int(s, 14);
}

int lab_audit_read_runs(lab_store *st, lab_audit_finished_run **runs, int64_t *n, char *err, size_t errlen) {
    const char *what = "reading the finished runs";
    *runs = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = injected(st, "R2 R5", "runs", what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "SELECT id, experiment, arm, COALESCE(git_commit,''), started_at, knob_hash, model_sha256,"
                       " dataset_sha256, code_version, COALESCE(logits_sha256,''), COALESCE(backend,'cpu'),"
                       " expected_assertions = 'fail', COALESCE(assertions_ok, 1), COALESCE(assertion_reason,''),"
                       " is_reference FROM runs WHERE status = 'FINISHED' ORDER BY id", &s, what, err, errlen);
    if (rc) return rc;
    /* a read that stopped early would make findings vanish and be "resolved" */
    return lab_sq_collect(st, s, what, run_from_row, sizeof **runs, (void **)runs, n, err, errlen);
}

/* ------------------------------------------------------------ knobs */

void lab_audit_knobs_free(lab_knobs_kv *kv) {
    for (int64_t i = 0; i < kv->n; i++) { free(kv->names[i]); free(kv->values[i]); }
    free(kv->names);
    free(kv->values);
    memset(kv, 0, sizeof *kv);
}

/* Appends name=value to kv (capacity *cap); LAB_ENOMEM on failure. */
static int kv_push(lab_knobs_kv *kv, int64_t *cap, const char *name, const char *value, char *err, size_t errlen) {
    if (kv->n == *cap) {
        int64_t c = *cap ? *cap * 2 : 16;
        char **na = realloc(kv->names, (size_t)c * sizeof *na);
        if (na) kv->names = na;
        char **nb = na ? realloc(kv->values, (size_t)c * sizeof *nb) : NULL;
        if (nb) kv->values = nb;
        if (!na || !nb) return lab_oom(err, errlen);
        *cap = c;
    }
    kv->names[kv->n] = lab_strdup(name);
    kv->values[kv->n] = lab_strdup(value);
    kv->n++;
    return kv->names[kv->n - 1] && kv->values[kv->n - 1] ? LAB_OK : lab_oom(err, errlen);
}

int lab_audit_read_knobs(lab_store *st, int64_t run_id, lab_knobs_kv *kv, char *err, size_t errlen) {
    char what[96];
    snprintf(what, sizeof what, "reading the knobs of run %lld", (long long)run_id);
    memset(kv, 0, sizeof *kv);
    sqlite3_stmt *s = NULL;
    int rc = injected(st, "R1", "knobs", what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "SELECT name, value FROM run_knobs WHERE run_id = ?", &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int64_t cap = 0;
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW)
        if ((rc = kv_push(kv, &cap, lab_col_text(s, 0), lab_col_text(s, 1), err, errlen))) break;
    if (rc) sqlite3_finalize(s);
    else rc = lab_sq_done(st, s, last, what, err, errlen);
    if (rc) lab_audit_knobs_free(kv);
    return rc;
}

/* ------------------------------------------------------------ probes */

int lab_audit_read_violations(lab_store *st, int64_t run_id, const char *site, lab_audit_violations *out,
                              char *err, size_t errlen) {
    char what[192];
    snprintf(what, sizeof what, "reading the probes of run %lld at %s", (long long)run_id, site);
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = NULL;
    int rc = injected(st, "R1", "probes", what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "SELECT layer, detail, bytes_per_row, src_row_bytes, dst_row_bytes, rows_unwritten, ok"
                       " FROM probes WHERE run_id = ? AND site = ? ORDER BY layer", &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    lab_sq_bind_text(s, 2, site);
    int last;
    int64_t prev_layer = 0;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t layer = sqlite3_column_int64(s, 0);
        if (!out->records++ || layer != prev_layer) out->layers++;
        prev_layer = layer;
        if (sqlite3_column_int64(s, 6) || out->n++) continue;
        out->first_layer = layer;
        lab_sq_col_copy(s, 1, out->detail, sizeof out->detail);
        out->bytes_per_row = sqlite3_column_int64(s, 2);
        out->src_row_bytes = sqlite3_column_int64(s, 3);
        out->dst_row_bytes = sqlite3_column_int64(s, 4);
        out->rows_unwritten = sqlite3_column_int64(s, 5);
    }
    rc = lab_sq_done(st, s, last, what, err, errlen);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

/* ------------------------------------------------------------ one run's rows */

/* The rows of one run: `sql` has the run id as its only parameter. */
static int read_rows(lab_store *st, int64_t run_id, const char *rules, const char *reader, const char *what,
                     const char *sql, void (*copy)(sqlite3_stmt *, void *), size_t size, void **v, int64_t *n,
                     char *err, size_t errlen) {
    *v = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = injected(st, rules, reader, what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, sql, &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    return lab_sq_collect(st, s, what, copy, size, v, n, err, errlen);
}

static void copy_expectation(sqlite3_stmt *s, void *row) {
    lab_audit_expectation *e = row;
    lab_sq_col_copy(s, 0, e->site, sizeof e->site); lab_sq_col_copy(s, 1, e->expected, sizeof e->expected);
    lab_sq_col_copy(s, 2, e->seen, sizeof e->seen); lab_sq_col_copy(s, 3, e->reason, sizeof e->reason);
}

int lab_audit_read_expectations(lab_store *st, int64_t run_id, lab_audit_expectation **v, int64_t *n,
                                char *err, size_t errlen) {
    char what[96];
    snprintf(what, sizeof what, "reading the expectations of run %lld", (long long)run_id);
    return read_rows(st, run_id, "R3", "expectations", what,
                     "SELECT site, expected_dtype, seen_dtypes, reason FROM expectations WHERE run_id = ? AND ok = 0",
                     copy_expectation, sizeof **v, (void **)v, n, err, errlen);
}

static void copy_reference(sqlite3_stmt *s, void *row) {
    lab_audit_reference *r = row;
    r->run_id = sqlite3_column_int64(s, 0);
    r->hash_match = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 1) != 0;
    lab_sq_col_copy(s, 2, r->model, sizeof r->model); lab_sq_col_copy(s, 3, r->dataset, sizeof r->dataset); lab_sq_col_copy(s, 4, r->code, sizeof r->code);
    lab_sq_col_copy(s, 5, r->logits, sizeof r->logits); lab_sq_col_copy(s, 6, r->knob_hash, sizeof r->knob_hash);
}

int lab_audit_read_references(lab_store *st, int64_t run_id, lab_audit_reference **v, int64_t *n,
                              char *err, size_t errlen) {
    char what[96];
    snprintf(what, sizeof what, "reading the comparisons of run %lld", (long long)run_id);
    return read_rows(st, run_id, "R1 R3 R4", "references", what,
                     "SELECT c.reference_run_id, c.reference_hash_match, r.model_sha256, r.dataset_sha256,"
                     " r.code_version, r.logits_sha256, r.knob_hash FROM comparisons c JOIN runs r"
                     " ON r.id = c.reference_run_id WHERE c.run_id = ?",
                     copy_reference, sizeof **v, (void **)v, n, err, errlen);
}

static void copy_verdict(sqlite3_stmt *s, void *row) {
    lab_audit_verdict *x = row;
    lab_sq_col_copy(s, 0, x->verdict, sizeof x->verdict);
    x->lo = sqlite3_column_double(s, 1);
    x->hi = sqlite3_column_double(s, 2);
    x->threshold = sqlite3_column_double(s, 3);
    lab_sq_col_copy(s, 4, x->direction, sizeof x->direction);
    x->k = sqlite3_column_int64(s, 5);
    x->n = sqlite3_column_int64(s, 6);
}

int lab_audit_read_verdicts(lab_store *st, int64_t run_id, lab_audit_verdict **v, int64_t *n,
                            char *err, size_t errlen) {
    char what[96];
    snprintf(what, sizeof what, "reading the verdicts of run %lld", (long long)run_id);
    return read_rows(st, run_id, "R6", "verdicts", what,
                     "SELECT verdict, lo, hi, threshold, direction, k, n FROM verdicts WHERE run_id = ?",
                     copy_verdict, sizeof **v, (void **)v, n, err, errlen);
}

int lab_audit_read_named_run(lab_store *st, int64_t run_id, lab_audit_named_run *out, char *err, size_t errlen) {
    char what[96];
    snprintf(what, sizeof what, "reading run %lld (named by a claim)", (long long)run_id);
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = NULL;
    int rc = injected(st, "R4", "claim-runs", what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "SELECT status, model_sha256, dataset_sha256, code_version, COALESCE(backend, 'cpu')"
                       " FROM runs WHERE id = ?", &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        out->found = 1;
        lab_sq_col_copy(s, 0, out->status, sizeof out->status); lab_sq_col_copy(s, 1, out->model, sizeof out->model);
        lab_sq_col_copy(s, 2, out->dataset, sizeof out->dataset); lab_sq_col_copy(s, 3, out->code, sizeof out->code);
        lab_sq_col_copy(s, 4, out->engine, sizeof out->engine);
        last = SQLITE_DONE;   /* id is the key: one row at most */
    }
    rc = lab_sq_done(st, s, last, what, err, errlen);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

/* ------------------------------------------------------------ storing */

/* The statements of one lab_audit_store_flags. */
typedef struct flag_stmts {
    sqlite3_stmt *sel, *ins, *upd, *seen;
    char          now[32];
} flag_stmts;

static int flag_stmts_prepare(lab_store *st, flag_stmts *q, char *err, size_t errlen) {
    const char *what = "storing the audit's flags";
    int rc = lab_sq_prep_as(st, "SELECT id, resolved_at FROM audit_flags WHERE subject_kind = ? AND subject = ? AND rule = ?"
                  " AND key = ?", &q->sel, what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "INSERT INTO audit_flags (subject_kind, subject, rule, key, reason, evidence, expected,"
                       " first_seen, last_seen, resolved_at, resolved_by) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       &q->ins, what, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "UPDATE audit_flags SET reason = ?, evidence = ?, expected = ?, last_seen = ?,"
                       " resolved_at = ?, resolved_by = ? WHERE id = ?", &q->upd, what, err, errlen);
    /* every flag this audit finds is marked; afterwards, open flags not marked are resolved */
    if (!rc) rc = lab_sq_exec(st, "CREATE TEMP TABLE IF NOT EXISTS seen (id INTEGER PRIMARY KEY)", err, errlen);
    if (!rc) rc = lab_sq_exec(st, "DELETE FROM seen", err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, "INSERT OR IGNORE INTO seen VALUES (?)", &q->seen, what, err, errlen);
    return rc;
}

static void flag_stmts_finalize(flag_stmts *q) {
    sqlite3_finalize(q->sel);
    sqlite3_finalize(q->ins);
    sqlite3_finalize(q->upd);
    sqlite3_finalize(q->seen);
}

/* Looks a flag up by its identity: *id = 0 when new; *resolved_at "" when open. */
static int flag_find(lab_store *st, flag_stmts *q, const lab_audit_flag *x, int64_t *id, char *resolved_at,
                     size_t n, char *err, size_t errlen) {
    sqlite3_stmt *s = q->sel;
    sqlite3_reset(s);
    lab_sq_bind_text(s, 1, x->claim ? "claim" : "run");
    lab_sq_bind_text(s, 2, x->subject);
    lab_sq_bind_text(s, 3, x->rule);
    lab_sq_bind_text(s, 4, x->key);
    *id = 0;
    resolved_at[0] = '\0';
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        *id = sqlite3_column_int64(s, 0);
        if (sqlite3_column_type(s, 1) != SQLITE_NULL) lab_sq_col_copy(s, 1, resolved_at, n);
    } else if (last != SQLITE_DONE) {
        return lab_sq_error(st, err, errlen, "storing the audit's flags");
    }
    return LAB_OK;
}

/* Inserts or updates one flag and marks it seen; counts it in out. */
static int flag_put(lab_store *st, flag_stmts *q, const lab_audit_flag *x, lab_audit_counts *out, char *err,
                    size_t errlen) {
    int64_t id;
    char resolved_at[32];
    int rc = flag_find(st, q, x, &id, resolved_at, sizeof resolved_at, err, errlen);
    if (rc) return rc;
    int was_resolved = resolved_at[0] != '\0';
    sqlite3_stmt *w = id ? q->upd : q->ins;
    sqlite3_reset(w);
    int p = 1;
    if (!id) {
        lab_sq_bind_text(w, p++, x->claim ? "claim" : "run");
        lab_sq_bind_text(w, p++, x->subject);
        lab_sq_bind_text(w, p++, x->rule);
        lab_sq_bind_text(w, p++, x->key);
    }
    lab_sq_bind_text(w, p++, x->reason);
    lab_sq_bind_text(w, p++, x->evidence);
    sqlite3_bind_int(w, p++, x->expected);
    if (!id) lab_sq_bind_text(w, p++, q->now);
    lab_sq_bind_text(w, p++, q->now);
    /* a flag resolved again keeps its first resolution's time */
    lab_sq_bind_text(w, p++, x->resolved_by[0] ? (was_resolved ? resolved_at : q->now) : NULL);
    lab_sq_bind_text(w, p++, x->resolved_by[0] ? x->resolved_by : NULL);
    if (id) sqlite3_bind_int64(w, p++, id);
    if (sqlite3_step(w) != SQLITE_DONE) return lab_sq_error(st, err, errlen, "storing the audit's flags");
    if (!id) id = sqlite3_last_insert_rowid(st->db);
    if (!x->resolved_by[0] && (w == q->ins || was_resolved)) out->n_new++;
    if (x->resolved_by[0] && !was_resolved) out->n_resolved++;
    sqlite3_reset(q->seen);
    sqlite3_bind_int64(q->seen, 1, id);
    if (sqlite3_step(q->seen) != SQLITE_DONE) return lab_sq_error(st, err, errlen, "storing the audit's flags");
    return LAB_OK;
}

/* Resolves the open flags this audit did not find. */
static int resolve_unseen(lab_store *st, const char *now, lab_audit_counts *out, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep_as(st, "UPDATE audit_flags SET resolved_at = ?, resolved_by = 'no longer found by the audit'"
                  " WHERE resolved_at IS NULL AND id NOT IN (SELECT id FROM seen)", &s, "resolving flags", err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, now);
    if (sqlite3_step(s) != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, "resolving flags");
    else out->n_resolved += sqlite3_changes(st->db);
    sqlite3_finalize(s);
    return rc;
}

/* Counts the open flags and records the audit in table audits. */
static int record_audit(lab_store *st, const char *now, const lab_audit_record *rec, lab_audit_counts *out,
                        char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep_as(st, "SELECT COALESCE(SUM(expected = 0), 0), COALESCE(SUM(expected = 1), 0) FROM audit_flags"
                  " WHERE resolved_at IS NULL", &s, "counting open flags", err, errlen);
    if (rc) return rc;
    if (sqlite3_step(s) == SQLITE_ROW) {
        out->n_open = sqlite3_column_int64(s, 0);
        out->n_expected = sqlite3_column_int64(s, 1);
    } else rc = lab_sq_error(st, err, errlen, "counting open flags");
    sqlite3_finalize(s);
    if (rc) return rc;
    if ((rc = lab_sq_prep_as(st, "INSERT INTO audits (at, specs_dir, n_claims, n_defects, n_runs, n_open, n_new, n_resolved)"
                   " VALUES (?,?,?,?,?,?,?,?)", &s, "recording the audit", err, errlen)))
        return rc;
    lab_sq_bind_text(s, 1, now);
    lab_sq_bind_text(s, 2, rec->specs_dir);
    sqlite3_bind_int64(s, 3, rec->n_claims);
    sqlite3_bind_int64(s, 4, rec->n_defects);
    sqlite3_bind_int64(s, 5, rec->n_runs);
    sqlite3_bind_int64(s, 6, out->n_open);
    sqlite3_bind_int64(s, 7, out->n_new);
    sqlite3_bind_int64(s, 8, out->n_resolved);
    if (sqlite3_step(s) != SQLITE_DONE) rc = lab_sq_error(st, err, errlen, "recording the audit");
    sqlite3_finalize(s);
    return rc;
}

int lab_audit_store_flags(lab_store *st, const lab_audit_flag *flags, int64_t n, const lab_audit_record *rec,
                          lab_audit_counts *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    flag_stmts q = {0};
    lab_now_iso(q.now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    rc = flag_stmts_prepare(st, &q, err, errlen);
    for (int64_t i = 0; !rc && i < n; i++) rc = flag_put(st, &q, &flags[i], out, err, errlen);
    flag_stmts_finalize(&q);
    if (!rc) rc = resolve_unseen(st, q.now, out, err, errlen);
    if (!rc) rc = record_audit(st, q.now, rec, out, err, errlen);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

/* ------------------------------------------------------------ the table */

static void copy_table_row(sqlite3_stmt *s, void *row) {
    lab_audit_table_row *t = row;
    lab_sq_col_copy(s, 0, t->kind, sizeof t->kind); lab_sq_col_copy(s, 1, t->subject, sizeof t->subject); lab_sq_col_copy(s, 2, t->rule, sizeof t->rule);
    lab_sq_col_copy(s, 5, t->resolved_by, sizeof t->resolved_by); lab_sq_col_copy(s, 6, t->reason, sizeof t->reason);
    lab_sq_col_copy(s, 7, t->what, sizeof t->what);
    t->expected = sqlite3_column_int(s, 3);
    t->resolved = sqlite3_column_type(s, 4) != SQLITE_NULL;
}

int lab_audit_read_table(lab_store *st, const char *since, lab_audit_table_row **v, int64_t *n,
                         char *err, size_t errlen) {
    const char *what = "reading the audit's flags";
    *v = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep_as(st, "SELECT f.subject_kind, f.subject, f.rule, f.expected, f.resolved_at, f.resolved_by,"
                  " f.reason, COALESCE(r.experiment || '/' || r.arm, '') FROM audit_flags f LEFT JOIN runs r"
                  " ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
                  " WHERE f.resolved_at IS NULL OR f.resolved_at >= ?"
                  " ORDER BY f.resolved_at IS NOT NULL, f.expected, f.subject_kind, f.subject, f.rule",
                  &s, what, err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, since);
    return lab_sq_collect(st, s, what, copy_table_row, sizeof **v, (void **)v, n, err, errlen);
}
