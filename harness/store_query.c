/*
 * store_query.c — the reads of `vtlab runs`, `show`, `compare` and `export`
 * (store_query.h).
 *
 * Each reader prepares its statements with bound parameters, steps each to
 * SQLITE_DONE and copies the rows into plain structs (or cJSON objects for
 * the JSON outputs); any other end of the steps is an error naming the
 * database and what was read, and the output is released, never returned
 * short. A failed prepare is named "query", a failed step by what it read
 * ("show knobs", "compare", "export top-k", ...), as the commands have always
 * said it.
 */
#include "store_query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_name.h"
#include "store_internal.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

/* The strings of an output: a list of copies, newest first. */
struct lab_query_text {
    lab_query_text *next;
    char            s[];
};

static void text_free(lab_query_text *t) {
    while (t) {
        lab_query_text *next = t->next;
        free(t);
        t = next;
    }
}

/* A reader's place while it copies rows: where copied text goes, and
 * whether a copy ran out of memory. */
typedef struct reading {
    lab_query_text **text;
    int              oom;
} reading;

/* A copy of v in the output's strings; "" (and r->oom set) when out of memory. */
static const char *keep(reading *r, const char *v) {
    size_t n = strlen(v) + 1;
    lab_query_text *t = malloc(sizeof *t + n);
    if (!t) { r->oom = 1; return ""; }
    memcpy(t->s, v, n);
    t->next = *r->text;
    *r->text = t;
    return t->s;
}

/* Column i of the current row as kept text; "" for NULL. */
static const char *keep_col(reading *r, sqlite3_stmt *s, int i) { return keep(r, lab_col_text(s, i)); }

static int is_null(sqlite3_stmt *s, int i) { return sqlite3_column_type(s, i) == SQLITE_NULL; }


/* lab_sq_prep, its error named "query". */
static int prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (lab_sq_prep(st, sql, s, err, errlen)) return lab_sq_error(st, err, errlen, "query");
    return LAB_OK;
}

/* prep, with run ids a (?1) and, when the statement has it, b (?2) bound. */
static int prep_ids(lab_store *st, const char *sql, int64_t a, int64_t b, sqlite3_stmt **s, char *err, size_t errlen) {
    int rc = prep(st, sql, s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(*s, 1, a);
    if (sqlite3_bind_parameter_count(*s) >= 2) sqlite3_bind_int64(*s, 2, b);
    return LAB_OK;
}


/* 1 when the runs table has engine_hello (schema v7): the read commands
 * also read older files opened read-only, which are never migrated; their
 * queries name the engine with LAB_ENGINE_SQL_V6 instead. */
static int has_hello(lab_store *st) { return lab_store_version(st) >= 7; }

/* Copies the current row of s into the zeroed struct row. */
typedef void (*copy_fn)(sqlite3_stmt *s, void *row, reading *r);


/* Steps the prepared s to its end, each row copied by `copy` into
 * (*v)[*n] (`size`-byte structs, text kept in *text); finalizes s. On failure
 * *v is freed and *n = 0 (the kept text stays with *text). */
static int collect(lab_store *st, sqlite3_stmt *s, const char *what, copy_fn copy, size_t size, void **v,
                   int64_t *n, lab_query_text **text, char *err, size_t errlen) {
    reading r = {text, 0};
    int64_t cap = 0;
    int last = SQLITE_ERROR;
    while (!r.oom && (last = sqlite3_step(s)) == SQLITE_ROW) {
        char *row = lab_sq_append(v, n, &cap, size);
        if (!row) { r.oom = 1; break; }
        copy(s, row, &r);
    }
    int rc;
    if (r.oom) {
        sqlite3_finalize(s);
        rc = lab_oom(err, errlen);
    } else {
        rc = lab_sq_done(st, s, last, what, err, errlen);
    }
    if (rc) { free(*v); *v = NULL; *n = 0; }
    return rc;
}

/* The rows of `sql` with run ids a (?1) and b (?2, when it has one). */
static int read_rows(lab_store *st, const char *sql, int64_t a, int64_t b, const char *what, copy_fn copy,
                     size_t size, void **v, int64_t *n, lab_query_text **text, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int rc = prep_ids(st, sql, a, b, &s, err, errlen);
    if (rc) return rc;
    return collect(st, s, what, copy, size, v, n, text, err, errlen);
}

int lab_query_run_exists(lab_store *st, int64_t id, int *found, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    *found = 0;
    int rc = prep_ids(st, "SELECT 1 FROM runs WHERE id = ?1", id, 0, &s, err, errlen);
    if (rc) return rc;
    int step = sqlite3_step(s);
    *found = step == SQLITE_ROW;
    return lab_sq_done(st, s, *found ? SQLITE_DONE : step, "find run", err, errlen);
}

/* ------------------------------------------------------------ runs */

/* The filters of `vtlab runs` (lab_query_filter): each parameter NULL is no
 * filter. --engine NAME is the hello's engine.name, or "builtin" for vtlab's
 * own model; --knob and --tag (each as often as wanted) need the run to have
 * every name with its value: ?5 and ?6 are JSON arrays of [name, value]
 * pairs, none of which may be missing; --since (?7) compares with started_at
 * (ISO 8601 UTC, so a date is a prefix). */
#define RUNS_PAIRS_ALL(PARAM, TABLE, KEY)                                                                 \
    "(" PARAM " IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(" PARAM ") j WHERE NOT EXISTS (SELECT 1 FROM " \
    TABLE " x WHERE x.run_id = r.id AND x." KEY " = json_extract(j.value, '$[0]')"                          \
    " AND x.value = json_extract(j.value, '$[1]'))))"
#define RUNS_SQL(ENGINE, TAGS, ENGINE_WHERE, TAG_WHERE)                                                  \
    "SELECT r.id, r.experiment, r.arm, r.repeat_idx, r.status, r.assertions_ok, r.expected_assertions,"   \
    " c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean, v.verdict, r.started_at, r.wall_s,"            \
    " c.first_div_layer, c.first_div_site, r.backend, r.code_version, r.error, " TAGS " AS tags," ENGINE   \
    " FROM runs r LEFT JOIN comparisons c ON c.run_id = r.id"                                             \
    " LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id"                \
    " WHERE (?1 IS NULL OR r.experiment = ?1) AND (?2 IS NULL OR r.arm = ?2) AND (?3 IS NULL OR r.status = ?3)" \
    " AND " ENGINE_WHERE " AND " RUNS_PAIRS_ALL("?5", "run_knobs", "name") " AND " TAG_WHERE               \
    " AND (?7 IS NULL OR r.started_at >= ?7)"                                                              \
    " ORDER BY r.id"
#define RUNS_ENGINE_WHERE                                                                                 \
    "(?4 IS NULL OR (?4 = 'builtin' AND r.engine_hello IS NULL) OR (json_valid(r.engine_hello)"           \
    " AND json_extract(r.engine_hello, '$.engine.name') = ?4))"
/* in key order, as the run_summary view has them (the text listing prints them so) */
#define RUNS_TAGS                                                                                         \
    "(SELECT json_group_object(t.key, t.value) FROM (SELECT key, value FROM run_tags WHERE run_id = r.id"  \
    " ORDER BY key) t)"
#define RUNS_TAG_WHERE RUNS_PAIRS_ALL("?6", "run_tags", "key")

/* By the file's schema, read as it is: [0] older than v7 (no engine_hello:
 * every run builtin), [1] v7-v8 (no tags), [2] v9 on. */
static const char *const runs_sql[3] = {
    RUNS_SQL(LAB_ENGINE_SQL_V6("r"), "NULL", "(?4 IS NULL OR ?4 = 'builtin')", "(?6 IS NULL)"),
    RUNS_SQL(LAB_ENGINE_SQL("r"), "NULL", RUNS_ENGINE_WHERE, "(?6 IS NULL)"),
    RUNS_SQL(LAB_ENGINE_SQL("r"), RUNS_TAGS, RUNS_ENGINE_WHERE, RUNS_TAG_WHERE)};

static int prep_runs(lab_store *st, const lab_query_filter *f, sqlite3_stmt **s, char *err, size_t errlen) {
    int v = lab_store_version(st);
    int rc = prep(st, runs_sql[v >= 9 ? 2 : has_hello(st)], s, err, errlen);
    if (rc || !f) return rc;
    const char *p[7] = {f->experiment, f->arm, f->status, f->engine, f->knobs, f->tags, f->since};
    for (int i = 0; i < 7; i++) lab_sq_bind_text(*s, i + 1, p[i]);
    return LAB_OK;
}

static void run_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_run_row *x = row;
    x->id = sqlite3_column_int64(s, 0);
    x->experiment = keep_col(r, s, 1);
    x->arm = keep_col(r, s, 2);
    x->repeat = sqlite3_column_int64(s, 3);
    x->status = keep_col(r, s, 4);
    x->has_assertions = !is_null(s, 5);
    x->assertions_ok = sqlite3_column_int(s, 5);
    x->replay = !strcmp(lab_col_text(s, 6), "fail");
    x->has_top1 = !is_null(s, 7);
    x->top1_k = sqlite3_column_int64(s, 7);
    x->top1_n = sqlite3_column_int64(s, 8);
    x->top1_lo = sqlite3_column_double(s, 9);
    x->top1_hi = sqlite3_column_double(s, 10);
    x->has_kl = !is_null(s, 11);
    x->kl_mean = sqlite3_column_double(s, 11);
    x->verdict = is_null(s, 12) ? NULL : keep_col(r, s, 12);
    x->started = keep_col(r, s, 13);
    x->has_div = !is_null(s, 15);
    x->div_layer = sqlite3_column_int64(s, 15);
    x->div_ffn = sqlite3_column_int(s, 16);
    x->tags = is_null(s, 20) ? NULL : keep_col(r, s, 20);
    lab_engine_name_read(s, 21, &x->engine);
}

int lab_query_runs_read(lab_store *st, const lab_query_filter *f, lab_query_runs *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = NULL;
    int rc = prep_runs(st, f, &s, err, errlen);
    if (!rc) rc = collect(st, s, "runs", run_row, sizeof *out->rows, (void **)&out->rows, &out->n, &out->text,
                          err, errlen);
    if (rc) lab_query_runs_free(out);
    return rc;
}

void lab_query_runs_free(lab_query_runs *r) {
    if (!r) return;
    free(r->rows);
    text_free(r->text);
    memset(r, 0, sizeof *r);
}

/* The current row of s as a JSON object: the columns by name, NULL as null,
 * blobs left out; with `engine`, the last LAB_ENGINE_NCOLS columns are
 * LAB_ENGINE_SQL's, shown as one object "engine" (lab_engine_json). NULL when
 * out of memory. */
static cJSON *row_object(sqlite3_stmt *s, int engine) {
    cJSON *o = cJSON_CreateObject();
    int n = sqlite3_column_count(s) - (engine ? LAB_ENGINE_NCOLS : 0);
    for (int i = 0; o && i < n; i++) {
        const char *name = sqlite3_column_name(s, i);
        cJSON *v = NULL;
        switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER: v = cJSON_AddNumberToObject(o, name, (double)sqlite3_column_int64(s, i)); break;
        case SQLITE_FLOAT: v = cJSON_AddNumberToObject(o, name, sqlite3_column_double(s, i)); break;
        case SQLITE_NULL: v = cJSON_AddNullToObject(o, name); break;
        case SQLITE_BLOB: continue; /* the top-k blobs are exported by lab_query_topk_read */
        default: v = cJSON_AddStringToObject(o, name, lab_col_text(s, i));
        }
        if (!v) { cJSON_Delete(o); o = NULL; }
    }
    if (o && engine) {
        lab_engine_name en;
        lab_engine_name_read(s, n, &en);
        cJSON *e = lab_engine_json(&en);
        if (!e || !cJSON_AddItemToObject(o, "engine", e)) { cJSON_Delete(e); cJSON_Delete(o); o = NULL; }
    }
    return o;
}

/* Steps the prepared s to its end, each row an object (row_object) added to
 * arr (when `single`: the first row only, as arr's item `key`); finalizes s. */
static int json_rows(lab_store *st, sqlite3_stmt *s, cJSON *arr, const char *key, int single, int engine, char *err,
                     size_t errlen) {
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        cJSON *o = row_object(s, engine);
        int added = o && (single ? cJSON_AddItemToObject(arr, key, o) : cJSON_AddItemToArray(arr, o));
        if (!added) {
            cJSON_Delete(o);
            sqlite3_finalize(s);
            return lab_oom(err, errlen);
        }
        if (single) { last = SQLITE_DONE; break; }
    }
    return lab_sq_done(st, s, last, key, err, errlen);
}

int lab_query_runs_json(lab_store *st, const lab_query_filter *f, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    sqlite3_stmt *s = NULL;
    int rc = prep_runs(st, f, &s, err, errlen);
    if (rc) return rc;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) { sqlite3_finalize(s); return lab_oom(err, errlen); }
    if ((rc = json_rows(st, s, arr, "runs", 0, 1, err, errlen))) { cJSON_Delete(arr); return rc; }
    /* tags as an object ({} when none), not the JSON text SQLite made */
    cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tags");
        cJSON *v = cJSON_IsString(t) ? cJSON_Parse(t->valuestring) : cJSON_CreateObject();
        if (!v || !cJSON_ReplaceItemInObjectCaseSensitive(o, "tags", v)) {
            cJSON_Delete(v);
            cJSON_Delete(arr);
            return lab_oom(err, errlen);
        }
    }
    *out = arr;
    return LAB_OK;
}

/* ------------------------------------------------------------ show */

/* The columns of the run's row that are not NULL, in order; finalizes s. */
static int read_fields(lab_store *st, sqlite3_stmt *s, lab_query_run_detail *d, char *err, size_t errlen) {
    reading r = {&d->text, 0};
    int64_t cap = 0;
    int last = SQLITE_ERROR;
    while (!r.oom && (last = sqlite3_step(s)) == SQLITE_ROW)
        for (int i = 0; !r.oom && i < sqlite3_column_count(s); i++) {
            if (is_null(s, i)) continue;
            lab_query_field *f = lab_sq_append((void **)&d->fields, &d->n_fields, &cap, sizeof *d->fields);
            if (!f) { r.oom = 1; break; }
            f->name = keep(&r, sqlite3_column_name(s, i));
            f->value = keep_col(&r, s, i);
        }
    if (r.oom) { sqlite3_finalize(s); return lab_oom(err, errlen); }
    return lab_sq_done(st, s, last, "show run", err, errlen);
}

/* The fields `show` prints: the run's row, the experiment file the spec was
 * first stored from (the spec itself is in `show --json` and `export`), and,
 * from v9 on, the run it reruns. */
#define SHOW_FIELDS_SQL(RERUN)                                                                                \
    "SELECT experiment, arm, repeat_idx, status, error, is_reference, started_at, finished_at,"             \
    " knob_hash, model_sha256, dataset_sha256, code_version, git_commit, git_dirty, build_flags,"           \
    " compiler, backend, device, host, pid, score, top_k, n_sequences, n_tokens, n_scored,"                 \
    " wall_s, forward_s, logits_sha256, assertions_ok, expected_assertions, assertion_reason,"              \
    " experiment_sha256, (SELECT e.file FROM experiment_specs e WHERE e.sha256 = runs.experiment_sha256)"    \
    " AS experiment_file" RERUN " FROM runs WHERE id = ?1"

static int show_fields(lab_store *st, int64_t id, lab_query_run_detail *d, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    static const char *const sql[2] = {SHOW_FIELDS_SQL(""), SHOW_FIELDS_SQL(", rerun_of")};
    int rc = prep_ids(st, sql[lab_store_version(st) >= 9], id, 0, &s, err, errlen);
    return rc ? rc : read_fields(st, s, d, err, errlen);
}

/* The engine the run went through (lab_engine_name; zeroed for no such run). */
static int show_engine(lab_store *st, int64_t id, lab_engine_name *n, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    memset(n, 0, sizeof *n);
    static const char *const sql[2] = {"SELECT" LAB_ENGINE_SQL_V6("r") " FROM runs r WHERE r.id = ?1",
                                       "SELECT" LAB_ENGINE_SQL("r") " FROM runs r WHERE r.id = ?1"};
    int rc = prep_ids(st, sql[has_hello(st)], id, 0, &s, err, errlen);
    if (rc) return rc;
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        lab_engine_name_read(s, 0, n);
        step = SQLITE_DONE;
    }
    return lab_sq_done(st, s, step, "show engine", err, errlen);
}

static void knob_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_knob *k = row;
    k->name = keep_col(r, s, 0);
    k->value = keep_col(r, s, 1);
    k->numeric = sqlite3_column_int(s, 2);
}

/* name, a[, b]: a named value, or two side by side. */
static void value_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_value *v = row;
    int two = sqlite3_column_count(s) > 2;
    v->name = keep_col(r, s, 0);
    v->a = sqlite3_column_double(s, 1);
    v->b = two ? sqlite3_column_double(s, 2) : 0;
    v->measured = !is_null(s, 1) && !(two && is_null(s, 2));
}

static void comparison_row(sqlite3_stmt *s, void *row, reading *r) {
    (void)r;
    lab_query_comparison *c = row;
    c->reference_run_id = sqlite3_column_int64(s, 0);
    c->top1_k = sqlite3_column_int64(s, 1);
    c->top1_n = sqlite3_column_int64(s, 2);
    c->top1_lo = sqlite3_column_double(s, 3);
    c->top1_hi = sqlite3_column_double(s, 4);
    c->kl_mean = sqlite3_column_double(s, 5);
    c->kl_p99 = sqlite3_column_double(s, 6);
    c->kl_max = sqlite3_column_double(s, 7);
    c->max_abs_dlogit = sqlite3_column_double(s, 8);
    c->rms_dp = sqlite3_column_double(s, 9);
    c->mcnemar_b = sqlite3_column_int64(s, 10);
    c->mcnemar_c = sqlite3_column_int64(s, 11);
    c->mcnemar_p = sqlite3_column_double(s, 12);
    c->has_first_div = !is_null(s, 13);
    c->first_div_layer = sqlite3_column_int64(s, 13);
    c->first_div_ffn = sqlite3_column_int(s, 14);
    c->first_div_value = sqlite3_column_double(s, 15);
    c->has_tolerance = !is_null(s, 16);
    c->div_tolerance = sqlite3_column_double(s, 16);
    c->recomputed = sqlite3_column_int(s, 17);
    c->hash_match = sqlite3_column_int(s, 18);
}

static void divergence_row(sqlite3_stmt *s, void *row, reading *r) {
    (void)r;
    lab_query_divergence *v = row;
    v->layer = sqlite3_column_int64(s, 0);
    v->ffn = sqlite3_column_int(s, 1);
    v->rel_l2 = sqlite3_column_double(s, 2);
}

static void verdict_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_verdict *v = row;
    v->metric = keep_col(r, s, 0);
    v->threshold = sqlite3_column_double(s, 1);
    v->direction = keep_col(r, s, 2);
    v->k = sqlite3_column_int64(s, 3);
    v->n = sqlite3_column_int64(s, 4);
    v->lo = sqlite3_column_double(s, 5);
    v->hi = sqlite3_column_double(s, 6);
    v->verdict = keep_col(r, s, 7);
}

static void expectation_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_expectation *e = row;
    e->site = keep_col(r, s, 0);
    e->expected = keep_col(r, s, 1);
    e->seen = keep_col(r, s, 2);
    e->records = sqlite3_column_int64(s, 3);
    e->ok = sqlite3_column_int(s, 4);
    e->reason = keep_col(r, s, 5);
}

static void probe_group_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_probe_group *p = row;
    p->site = keep_col(r, s, 0);
    p->dtype = keep_col(r, s, 1);
    p->src_dtype = keep_col(r, s, 2);
    p->records = sqlite3_column_int64(s, 3);
    p->rows = sqlite3_column_int64(s, 4);
    p->bytes_per_row = sqlite3_column_int64(s, 5);
    p->src_row_bytes = sqlite3_column_int64(s, 6);
    p->dst_row_bytes = sqlite3_column_int64(s, 7);
    p->violations = sqlite3_column_int64(s, 8);
    p->rows_unwritten = sqlite3_column_int64(s, 9);
    p->n_violated = sqlite3_column_int(s, 10);
    p->layer_min = sqlite3_column_int64(s, 11);
    p->layer_max = sqlite3_column_int64(s, 12);
    p->first_detail = keep_col(r, s, 13);
}

/* One of show's row sets: where it goes in lab_query_run_detail. */
typedef struct show_part {
    const char *what, *sql;
    copy_fn     copy;
    size_t      size, rows, n;    /* offsetof the array and its count */
} show_part;

#define PART(what, sql, copy, type, field) \
    {what, sql, copy, sizeof(type), offsetof(lab_query_run_detail, field), offsetof(lab_query_run_detail, n_##field)}

static const show_part show_parts[] = {
    PART("show knobs", "SELECT name, value, numeric FROM run_knobs WHERE run_id = ?1 ORDER BY name", knob_row,
         lab_query_knob, knobs),
    PART("show metrics", "SELECT name, value FROM metrics WHERE run_id = ?1 ORDER BY name", value_row,
         lab_query_value, metrics),
    PART("show comparisons",
         "SELECT reference_run_id, top1_k, top1_n, top1_lo, top1_hi, kl_mean, kl_p99, kl_max,"
         " max_abs_dlogit, rms_dp, mcnemar_b, mcnemar_c, mcnemar_p, first_div_layer, first_div_site,"
         " first_div_value, div_tolerance, reference_recomputed, reference_hash_match"
         " FROM comparisons WHERE run_id = ?1", comparison_row, lab_query_comparison, comparisons),
    PART("show layer divergence",
         "SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ?1 ORDER BY layer, site", divergence_row,
         lab_query_divergence, divergence),
    PART("show verdicts", "SELECT metric, threshold, direction, k, n, lo, hi, verdict FROM verdicts WHERE run_id = ?1",
         verdict_row, lab_query_verdict, verdicts),
    PART("show expectations",
         "SELECT site, expected_dtype, seen_dtypes, records, ok, reason FROM expectations WHERE run_id = ?1",
         expectation_row, lab_query_expectation, expectations),
    /* one row per site and dtype pair, with violations summed */
    PART("show probes",
         "SELECT site, dtype, src_dtype, count(*), sum(rows), max(bytes_per_row), max(src_row_bytes),"
         " max(dst_row_bytes), sum(violations), max(rows_unwritten), sum(1 - ok), min(layer), max(layer),"
         " (SELECT detail FROM probes p2 WHERE p2.run_id = p.run_id AND p2.site = p.site AND p2.ok = 0"
         "  ORDER BY idx LIMIT 1)"
         " FROM probes p WHERE run_id = ?1 GROUP BY site, dtype, src_dtype ORDER BY min(idx)",
         probe_group_row, lab_query_probe_group, probes),
};

#undef PART

int lab_query_run_detail_read(lab_store *st, int64_t id, lab_query_run_detail *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int rc = show_fields(st, id, out, err, errlen);
    if (!rc) rc = show_engine(st, id, &out->engine, err, errlen);
    for (size_t i = 0; !rc && i < sizeof show_parts / sizeof show_parts[0]; i++) {
        const show_part *p = &show_parts[i];
        rc = read_rows(st, p->sql, id, 0, p->what, p->copy, p->size, (void **)((char *)out + p->rows),
                       (int64_t *)((char *)out + p->n), &out->text, err, errlen);
    }
    if (rc) lab_query_run_detail_free(out);
    return rc;
}

void lab_query_run_detail_free(lab_query_run_detail *d) {
    if (!d) return;
    free(d->fields);
    free(d->knobs);
    free(d->metrics);
    free(d->comparisons);
    free(d->divergence);
    free(d->verdicts);
    free(d->expectations);
    free(d->probes);
    text_free(d->text);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ compare */

static void brief_from_row(sqlite3_stmt *s, int64_t id, lab_query_brief *b) {
    snprintf(b->arm, sizeof b->arm, "%s", lab_col_text(s, 0));
    snprintf(b->experiment, sizeof b->experiment, "%s", lab_col_text(s, 1));
    snprintf(b->status, sizeof b->status, "%s", lab_col_text(s, 2));
    snprintf(b->knob_hash, sizeof b->knob_hash, "%s", lab_col_text(s, 3));
    snprintf(b->model, sizeof b->model, "%s", lab_col_text(s, 4));
    snprintf(b->dataset, sizeof b->dataset, "%s", lab_col_text(s, 5));
    snprintf(b->code, sizeof b->code, "%s", lab_col_text(s, 6));
    snprintf(b->logits, sizeof b->logits, "%s", lab_col_text(s, 7));
    b->reference_run = sqlite3_column_int64(s, 8);
    if (!b->reference_run && sqlite3_column_int(s, 10)) b->reference_run = id;
    b->n_scored = sqlite3_column_int64(s, 9);
    lab_engine_name_read(s, 11, &b->engine);
}

int lab_query_brief_read(lab_store *st, int64_t id, lab_query_brief *b, int *found, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    *found = 0;
    sqlite3_stmt *s = NULL;
#define BRIEF_SQL(ENGINE)                                                                                    \
    "SELECT r.arm, r.experiment, r.status, r.knob_hash, r.model_sha256, r.dataset_sha256, r.code_version,"    \
    " r.logits_sha256, (SELECT reference_run_id FROM comparisons c WHERE c.run_id = r.id"                     \
    " ORDER BY reference_run_id DESC LIMIT 1), r.n_scored, r.is_reference," ENGINE " FROM runs r WHERE r.id = ?1"
    static const char *const sql[2] = {BRIEF_SQL(LAB_ENGINE_SQL_V6("r")), BRIEF_SQL(LAB_ENGINE_SQL("r"))};
#undef BRIEF_SQL
    int rc = prep_ids(st, sql[has_hello(st)], id, 0, &s, err, errlen);
    if (rc) return rc;
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        brief_from_row(s, id, b);
        *found = 1;
        step = SQLITE_DONE;
    }
    return lab_sq_done(st, s, step, "compare", err, errlen);
}

static void knob_diff_row(sqlite3_stmt *s, void *row, reading *r) {
    lab_query_knob_diff *k = row;
    k->name = keep_col(r, s, 0);
    k->a = keep_col(r, s, 1);
    k->b = keep_col(r, s, 2);
}

int lab_query_compare_read(lab_store *st, int64_t a, int64_t b, lab_query_compare *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int rc = read_rows(st,
                       "SELECT ka.name, ka.value, kb.value FROM run_knobs ka JOIN run_knobs kb ON kb.name = ka.name"
                       " AND kb.run_id = ?2 WHERE ka.run_id = ?1 AND ka.value <> kb.value ORDER BY ka.name",
                       a, b, "compare knobs", knob_diff_row, sizeof *out->knobs, (void **)&out->knobs,
                       &out->n_knobs, &out->text, err, errlen);
    if (!rc)
        rc = read_rows(st,
                       "SELECT ma.name, ma.value, mb.value FROM metrics ma JOIN metrics mb ON mb.name = ma.name"
                       " AND mb.run_id = ?2 WHERE ma.run_id = ?1 ORDER BY ma.name",
                       a, b, "compare metrics", value_row, sizeof *out->metrics, (void **)&out->metrics,
                       &out->n_metrics, &out->text, err, errlen);
    if (!rc)
        rc = read_rows(st,
                       "WITH ca AS (SELECT * FROM comparisons WHERE run_id = ?1 LIMIT 1),"
                       " cb AS (SELECT * FROM comparisons WHERE run_id = ?2 LIMIT 1)"
                       " SELECT 'top1 vs ref', 1.0 * ca.top1_k / ca.top1_n, 1.0 * cb.top1_k / cb.top1_n FROM ca, cb"
                       " UNION ALL SELECT 'kl_mean', ca.kl_mean, cb.kl_mean FROM ca, cb"
                       " UNION ALL SELECT 'kl_p99', ca.kl_p99, cb.kl_p99 FROM ca, cb"
                       " UNION ALL SELECT 'kl_max', ca.kl_max, cb.kl_max FROM ca, cb"
                       " UNION ALL SELECT 'max |dlogit|', ca.max_abs_dlogit, cb.max_abs_dlogit FROM ca, cb"
                       " UNION ALL SELECT 'rms dp', ca.rms_dp, cb.rms_dp FROM ca, cb",
                       a, b, "compare comparisons", value_row, sizeof *out->refs, (void **)&out->refs,
                       &out->n_refs, &out->text, err, errlen);
    if (rc) lab_query_compare_free(out);
    return rc;
}

void lab_query_compare_free(lab_query_compare *c) {
    if (!c) return;
    free(c->knobs);
    free(c->metrics);
    free(c->refs);
    text_free(c->text);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------ export */

void lab_query_topk_free(lab_query_topk *v, int64_t n) {
    for (int64_t i = 0; v && i < n; i++) {
        free(v[i].ids);
        free(v[i].logprobs);
    }
    free(v);
}

/* Copies the current row of s (seq, n_pos, k, ids, logprobs) of run id into
 * *t: LAB_EINPUT when its blobs do not hold n_pos x k entries. */
static int topk_from_row(lab_store *st, sqlite3_stmt *s, int64_t id, lab_query_topk *t, char *err, size_t errlen) {
    int64_t np = sqlite3_column_int64(s, 1), k = sqlite3_column_int64(s, 2);
    t->seq = sqlite3_column_int64(s, 0);
    if (np < 0 || k <= 0 || sqlite3_column_bytes(s, 3) != np * k * 4 || sqlite3_column_bytes(s, 4) != np * k * 4)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: logits_topk of sequence %lld has the wrong size",
                        st->path, (long long)id, (long long)t->seq);
    t->n_pos = np;
    t->k = k;
    t->ids = malloc((size_t)(np * k) * sizeof *t->ids + 1);
    t->logprobs = malloc((size_t)(np * k) * sizeof *t->logprobs + 1);
    if (!t->ids || !t->logprobs) return lab_oom(err, errlen);
    memcpy(t->ids, sqlite3_column_blob(s, 3), (size_t)(np * k) * 4);
    memcpy(t->logprobs, sqlite3_column_blob(s, 4), (size_t)(np * k) * 4);
    return LAB_OK;
}

int lab_query_topk_read(lab_store *st, int64_t id, lab_query_topk **v, int64_t *n, char *err, size_t errlen) {
    *v = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep_ids(st, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ?1 ORDER BY seq", id,
                      0, &s, err, errlen);
    if (rc) return rc;
    int64_t cap = 0;
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        lab_query_topk *t = lab_sq_append((void **)v, n, &cap, sizeof **v);
        if (!t) { rc = lab_oom(err, errlen); break; }
        if ((rc = topk_from_row(st, s, id, t, err, errlen))) break;
    }
    if (rc) sqlite3_finalize(s);
    else rc = lab_sq_done(st, s, last, "export top-k", err, errlen);
    if (rc) { lab_query_topk_free(*v, *n); *v = NULL; *n = 0; }
    return rc;
}

int lab_query_reference(lab_store *st, int64_t id, int64_t *ref, int *last_only, char *err, size_t errlen) {
    *ref = 0;
    *last_only = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep_ids(st, "SELECT c.reference_run_id, r.score FROM runs r JOIN comparisons c ON c.run_id = r.id"
                      " WHERE r.id = ?1 LIMIT 1", id, 0, &s, err, errlen);
    if (rc) return rc;
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        *ref = sqlite3_column_int64(s, 0);
        *last_only = !strcmp(lab_col_text(s, 1), "last");
        step = SQLITE_DONE;
    }
    if ((rc = lab_sq_done(st, s, step, "export positions", err, errlen))) {
        *ref = 0;
        *last_only = 0;
    }
    return rc;
}

/* The sections of the JSON export: each the rows of run ?1 in a table. */
static const struct json_section {
    const char *key, *sql;
    int         single;       /* the first row as an object, not an array */
    int         engine;       /* the row ends with LAB_ENGINE_SQL's columns: shown as "engine" */
    int         since;        /* the schema version that has the table (an older file, read as it is, lacks it) */
} json_sections[] = {
    {"run", "SELECT *," LAB_ENGINE_SQL("runs") " FROM runs WHERE id = ?1", 1, 1, 0},
    {"knobs", "SELECT name, value, numeric FROM run_knobs WHERE run_id = ?1 ORDER BY name", 0, 0, 0},
    {"metrics", "SELECT name, value FROM metrics WHERE run_id = ?1 ORDER BY name", 0, 0, 0},
    {"probes", "SELECT * FROM probes WHERE run_id = ?1 ORDER BY idx", 0, 0, 0},
    {"expectations", "SELECT * FROM expectations WHERE run_id = ?1", 0, 0, 0},
    {"comparisons", "SELECT * FROM comparisons WHERE run_id = ?1", 0, 0, 0},
    {"layer_divergence", "SELECT * FROM layer_divergence WHERE run_id = ?1 ORDER BY layer, site", 0, 0, 0},
    {"verdicts", "SELECT * FROM verdicts WHERE run_id = ?1", 0, 0, 0},
    {"pair_tests", "SELECT * FROM pair_tests WHERE run_a = ?1 OR run_b = ?1", 0, 0, 0},
    {"tags", "SELECT key, value, set_at FROM run_tags WHERE run_id = ?1 ORDER BY key", 0, 0, 9},
    {"notes", "SELECT text, at FROM run_notes WHERE run_id = ?1 ORDER BY id", 0, 0, 9},
};

/* The "run" section of a file older than v7 (has_hello). */
static const char *const json_run_v6 = "SELECT *," LAB_ENGINE_SQL_V6("runs") " FROM runs WHERE id = ?1";

int lab_query_run_json(lab_store *st, int64_t id, cJSON *root, char *err, size_t errlen) {
    int rc = LAB_OK;
    for (size_t i = 0; !rc && i < sizeof json_sections / sizeof json_sections[0]; i++) {
        const struct json_section *j = &json_sections[i];
        sqlite3_stmt *s = NULL;
        if (lab_store_version(st) < j->since) continue;
        const char *sql = j->engine && !has_hello(st) ? json_run_v6 : j->sql;
        if ((rc = prep_ids(st, sql, id, 0, &s, err, errlen))) break;
        cJSON *arr = j->single ? root : cJSON_AddArrayToObject(root, j->key);
        if (!arr) { sqlite3_finalize(s); return lab_oom(err, errlen); }
        rc = json_rows(st, s, arr, j->key, j->single, j->engine, err, errlen);
    }
    return rc;
}
