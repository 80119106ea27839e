/*
 * store_annot.c — tags, notes, and the reads of `vtlab rerun` (see
 * store_annot.h).
 */
#include "store_annot.h"

#include <stdlib.h>
#include <string.h>

#include "engine_name.h"
#include "store_internal.h"
#include "util.h"

int lab_annot_parse_tag(const char *arg, char **key, char **value, char *err, size_t errlen) {
    *key = *value = NULL;
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return lab_errf(err, errlen, LAB_EINPUT, "tag \"%.64s\": expected KEY=VALUE (e.g. reviewed=yes)", arg);
    char *k = lab_strdup(arg);
    if (!k) return lab_oom(err, errlen);
    k[eq - arg] = 0;
    int rc = lab_check_name("tag", k, "a tag key", k, err, errlen);
    if (!rc) rc = lab_check_line("tag", k, "a tag value", k + (eq - arg) + 1, LAB_TAG_VALUE_MAX, err, errlen);
    if (rc) { free(k); return rc; }
    *key = k;
    *value = k + (eq - arg) + 1;
    return LAB_OK;
}

int lab_annot_check_note(const char *text, char *err, size_t errlen) {
    if (!text[0]) return lab_errf(err, errlen, LAB_EINPUT, "note: the text is empty");
    return lab_check_line("note", "TEXT", "a note", text, LAB_NOTE_MAX, err, errlen);
}

/* LAB_EINPUT when run has no row (inside the caller's transaction). */
static int run_exists(lab_store *st, int64_t run, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT 1 FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int step = sqlite3_step(s);
    sqlite3_finalize(s);
    if (step == SQLITE_ROW) return LAB_OK;
    if (step != SQLITE_DONE) return lab_sq_error(st, err, errlen, "reading the run");
    return lab_errf(err, errlen, LAB_EINPUT, "%s: no run %lld (see `vtlab runs`)", st->path, (long long)run);
}

int lab_store_tag(lab_store *st, int64_t run, int64_t n, char *const *keys, char *const *values, char *err,
                  size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    if ((rc = run_exists(st, run, err, errlen))) goto fail;
    if ((rc = lab_sq_prep(st, "INSERT INTO run_tags (run_id, key, value, set_at) VALUES (?1, ?2, ?3, ?4)"
                              " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
                          &s, err, errlen))) goto fail;
    for (int64_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, keys[i]);
        lab_sq_bind_text(s, 3, values[i]);
        lab_sq_bind_text(s, 4, now);
        rc = lab_sq_step(st, s, err, errlen, "tag run");
    }
    sqlite3_finalize(s);
    s = NULL;
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (!rc) return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_sq_rollback(st);
    return rc;
}

int lab_store_note(lab_store *st, int64_t run, const char *text, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    if ((rc = run_exists(st, run, err, errlen))) goto fail;
    if ((rc = lab_sq_prep(st, "INSERT INTO run_notes (run_id, text, at) VALUES (?1, ?2, ?3)", &s, err, errlen)))
        goto fail;
    sqlite3_bind_int64(s, 1, run);
    lab_sq_bind_text(s, 2, text);
    lab_sq_bind_text(s, 3, now);
    if ((rc = lab_sq_step(st, s, err, errlen, "note run"))) goto fail;
    sqlite3_finalize(s);
    if (!(rc = lab_sq_commit(st, err, errlen))) return LAB_OK;
    s = NULL;
fail:
    sqlite3_finalize(s);
    lab_sq_rollback(st);
    return rc;
}

/* Appends column 0 (and 1) of every row of s to the string arrays. */
static int collect_pairs(lab_store *st, sqlite3_stmt *s, char ***a, char ***b, int64_t *n, char *err, size_t errlen) {
    int step, rc = LAB_OK;
    int64_t cap = 0;
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **na = realloc(*a, (size_t)cap * sizeof *na);
            if (na) *a = na;
            char **nb = na ? realloc(*b, (size_t)cap * sizeof *nb) : NULL;
            if (nb) *b = nb;
            if (!na || !nb) { rc = lab_oom(err, errlen); break; }
        }
        (*a)[*n] = lab_strdup(lab_col_text(s, 0));
        (*b)[*n] = lab_strdup(lab_col_text(s, 1));
        (*n)++;   /* counted even when a copy failed: the free walks what there is */
        if (!(*a)[*n - 1] || !(*b)[*n - 1]) rc = lab_oom(err, errlen);
    }
    if (rc) { sqlite3_finalize(s); return rc; }
    return lab_sq_done(st, s, step, "reading tags and notes", err, errlen);
}

int lab_store_run_annot(lab_store *st, int64_t run, lab_run_annot *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    int have = 0;
    int rc = lab_store_has_table(st, "run_tags", &have, err, errlen);
    if (rc || !have) return rc;   /* a read-only file older than v9: nothing added to its runs */
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep_as(st, "SELECT key, value FROM run_tags WHERE run_id = ?1 ORDER BY key", &s, "reading tags",
                             err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, run);
    if ((rc = collect_pairs(st, s, &a->keys, &a->values, &a->n_tags, err, errlen))) goto fail;
    if ((rc = lab_sq_prep_as(st, "SELECT text, at FROM run_notes WHERE run_id = ?1 ORDER BY id", &s, "reading notes",
                             err, errlen))) goto fail;
    sqlite3_bind_int64(s, 1, run);
    if ((rc = collect_pairs(st, s, &a->notes, &a->note_at, &a->n_notes, err, errlen))) goto fail;
    return LAB_OK;
fail:
    lab_run_annot_free(a);
    return rc;
}

void lab_run_annot_free(lab_run_annot *a) {
    for (int64_t i = 0; i < a->n_tags; i++) { free(a->keys[i]); free(a->values[i]); }
    for (int64_t i = 0; i < a->n_notes; i++) { free(a->notes[i]); free(a->note_at[i]); }
    free(a->keys);
    free(a->values);
    free(a->notes);
    free(a->note_at);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------ rerun */

int lab_store_set_rerun_of(lab_store *st, int64_t run_id, int64_t of, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE runs SET rerun_of = ?2 WHERE id = ?1 AND status = 'RUNNING'", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int64(s, 2, of);
    rc = lab_sq_step(st, s, err, errlen, "record rerun_of");
    sqlite3_finalize(s);
    return rc;
}

static void copy_src(sqlite3_stmt *s, lab_rerun_src *r) {
    r->found = 1;
    r->id = sqlite3_column_int64(s, 0);
    lab_sq_col_copy(s, 1, r->experiment, sizeof r->experiment);
    lab_sq_col_copy(s, 2, r->arm, sizeof r->arm);
    r->repeat = sqlite3_column_int64(s, 3);
    lab_sq_col_copy(s, 4, r->status, sizeof r->status);
    r->is_reference = sqlite3_column_int(s, 5);
    lab_sq_col_copy(s, 6, r->knob_hash, sizeof r->knob_hash);
    lab_sq_col_copy(s, 7, r->model_sha256, sizeof r->model_sha256);
    lab_sq_col_copy(s, 8, r->dataset_sha256, sizeof r->dataset_sha256);
    lab_sq_col_copy(s, 9, r->logits_sha256, sizeof r->logits_sha256);
    lab_sq_col_copy(s, 10, r->code_version, sizeof r->code_version);
    lab_sq_col_copy(s, 11, r->spec_sha256, sizeof r->spec_sha256);
    lab_sq_col_copy(s, 12, r->shard, sizeof r->shard);
    r->n_sequences = sqlite3_column_int64(s, 13);
    lab_sq_col_copy(s, 14, r->backend, sizeof r->backend);
    r->rerun_of = sqlite3_column_int64(s, 15);
    if (sqlite3_column_type(s, 16) != SQLITE_NULL) r->spec_file = lab_strdup(lab_col_text(s, 16));
    if (sqlite3_column_type(s, 17) != SQLITE_NULL) r->spec_json = lab_strdup(lab_col_text(s, 17));
    lab_engine_name en;
    char label[160];
    lab_engine_name_read(s, 18, &en);
    snprintf(r->engine, sizeof r->engine, "%s", lab_engine_label(&en, label, sizeof label));
}

int lab_store_rerun_src(lab_store *st, int64_t id, lab_rerun_src *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT r.id, r.experiment, r.arm, r.repeat_idx, r.status, r.is_reference, r.knob_hash,"
                                " r.model_sha256, r.dataset_sha256, r.logits_sha256, r.code_version, r.experiment_sha256,"
                                " r.shard, coalesce(r.n_sequences, 0), r.backend, coalesce(r.rerun_of, 0), e.file, e.json,"
                                LAB_ENGINE_SQL("r")
                                " FROM runs r LEFT JOIN experiment_specs e ON e.sha256 = r.experiment_sha256"
                                " WHERE r.id = ?1", &s, "reading the run", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s);
    int oom = 0;
    if (step == SQLITE_ROW) {
        copy_src(s, r);
        oom = (sqlite3_column_type(s, 16) != SQLITE_NULL && !r->spec_file) ||
              (sqlite3_column_type(s, 17) != SQLITE_NULL && !r->spec_json);
    }
    rc = lab_sq_done(st, s, step == SQLITE_ROW ? SQLITE_DONE : step, "reading the run", err, errlen);
    if (!rc && oom) rc = lab_oom(err, errlen);
    if (rc) lab_rerun_src_free(r);
    return rc;
}

void lab_rerun_src_free(lab_rerun_src *r) {
    free(r->spec_file);
    free(r->spec_json);
    memset(r, 0, sizeof *r);
}

int lab_store_latest_runs(lab_store *st, const char *experiment, int64_t **ids, int64_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *s;
    /* the spec of the experiment's newest run decides which runs are "its latest" */
    int rc = lab_sq_prep_as(st, "SELECT max(r.id) FROM runs r WHERE r.experiment = ?1 AND r.repeat_idx = 0"
                                " AND r.shard = '' AND r.experiment_sha256 = (SELECT experiment_sha256 FROM runs"
                                " WHERE experiment = ?1 AND status IN ('FINISHED', 'PARTIAL') ORDER BY id DESC LIMIT 1)"
                                " AND r.status = CASE WHEN EXISTS (SELECT 1 FROM runs f WHERE f.experiment = r.experiment"
                                " AND f.arm = r.arm AND f.status = 'FINISHED' AND f.experiment_sha256 = r.experiment_sha256)"
                                " THEN 'FINISHED' ELSE 'PARTIAL' END"
                                " GROUP BY r.arm ORDER BY min(r.id)", &s, "reading the experiment's runs", err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, experiment);
    int64_t cap = 0;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t *slot = lab_sq_append((void **)ids, n, &cap, sizeof **ids);
        if (!slot) { sqlite3_finalize(s); free(*ids); *ids = NULL; *n = 0; return lab_oom(err, errlen); }
        *slot = sqlite3_column_int64(s, 0);
    }
    rc = lab_sq_done(st, s, step, "reading the experiment's runs", err, errlen);
    if (rc) { free(*ids); *ids = NULL; *n = 0; }
    return rc;
}

int lab_store_rerun_of(lab_store *st, int64_t of, int64_t *id, char *err, size_t errlen) {
    *id = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT max(id) FROM runs WHERE rerun_of = ?1", &s, "reading reruns", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, of);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) *id = sqlite3_column_int64(s, 0);
    return lab_sq_done(st, s, step == SQLITE_ROW ? SQLITE_DONE : step, "reading reruns", err, errlen);
}

int lab_store_rerun_cmp(lab_store *st, int64_t run, lab_rerun_cmp *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT reference_run_id, top1_k, top1_n, top1_lo, top1_hi, kl_mean FROM comparisons"
                                " WHERE run_id = ?1 ORDER BY reference_run_id DESC LIMIT 1", &s, "reading the comparison",
                            err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        c->have = 1;
        c->reference_run = sqlite3_column_int64(s, 0);
        c->k = sqlite3_column_int64(s, 1);
        c->n = sqlite3_column_int64(s, 2);
        c->lo = lab_sq_col_num(s, 3);
        c->hi = lab_sq_col_num(s, 4);
        c->kl_mean = lab_sq_col_num(s, 5);
    }
    return lab_sq_done(st, s, step == SQLITE_ROW ? SQLITE_DONE : step, "reading the comparison", err, errlen);
}

int lab_store_agreement_pair(lab_store *st, int64_t a, int64_t b, int64_t ref, int64_t *n, int64_t *b_only,
                             int64_t *c_only, char *err, size_t errlen) {
    int32_t *ta = NULL, *tb = NULL, *tr = NULL;
    int64_t na = 0, nb = 0, nr = 0;
    *n = *b_only = *c_only = 0;
    int rc = lab_store_top1(st, a, &ta, &na, err, errlen);
    if (!rc) rc = lab_store_top1(st, b, &tb, &nb, err, errlen);
    if (!rc) rc = lab_store_top1(st, ref, &tr, &nr, err, errlen);
    if (!rc && (na != nb || na != nr))
        rc = lab_errf(err, errlen, LAB_EINPUT, "runs %lld, %lld and %lld scored %lld, %lld and %lld positions: not the "
                      "same positions", (long long)a, (long long)b, (long long)ref, (long long)na, (long long)nb,
                      (long long)nr);
    for (int64_t p = 0; !rc && p < na; p++) {
        int ra = ta[p] == tr[p], rb = tb[p] == tr[p];
        *b_only += ra && !rb;
        *c_only += !ra && rb;
    }
    if (!rc) *n = na;
    free(ta);
    free(tb);
    free(tr);
    return rc;
}
