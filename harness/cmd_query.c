/*
 * cmd_query.c — the read side of results.db: `vtlab runs`, `show`, `compare`
 * and `export`.
 *
 * These commands never write the database (they are meant for a store opened
 * with lab_store_open_readonly), so they are safe to run while a sweep is
 * writing: WAL readers see the last committed state. Every query is read to
 * its end and checked: a corrupt page or an I/O error met half-way is an
 * error naming the file (lab_store_error), never a partial answer with exit
 * 0. Output for people goes to stdout as aligned text; `export` writes JSON
 * (built with cJSON, so every string is escaped) or CSV for other tools, to
 * a stream or, atomically, to a file (lab_cmd_export_file).
 */
#include "cmd_query.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "store.h"
#include "store_report.h"
#include "util.h"


static int query_err(lab_store *st, const char *what, char *err, size_t errlen) {
    return lab_store_error(st, what, err, errlen);
}

static int prepare(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, s, NULL) != SQLITE_OK) {
        *s = NULL;
        return query_err(st, "query", err, errlen);
    }
    return LAB_OK;
}

/* Ends a loop over sqlite3_step whose last answer was step: SQLITE_DONE is
 * the only good end; anything else (a corrupt page, an I/O error) is an
 * error. Finalizes s either way. */
static int rows_done(lab_store *st, sqlite3_stmt *s, int step, const char *what, char *err, size_t errlen) {
    int rc = step == SQLITE_DONE ? LAB_OK : query_err(st, what, err, errlen);
    sqlite3_finalize(s);
    return rc;
}

/* ------------------------------------------------------------ runs */

static cJSON *row_object(sqlite3_stmt *s);

/* `vtlab runs --json`: the listing's rows as a JSON array of objects (the
 * columns by name, NULL as null), for scripts. */
static int runs_json(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen) {
    cJSON *arr = cJSON_CreateArray();
    int step;
    while (arr && (step = sqlite3_step(s)) == SQLITE_ROW) cJSON_AddItemToArray(arr, row_object(s));
    if (!arr) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    int rc = rows_done(st, s, step, "runs", err, errlen);
    char *text = rc ? NULL : cJSON_Print(arr);
    cJSON_Delete(arr);
    if (rc) return rc;
    if (!text) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    printf("%s\n", text);
    free(text);
    return ferror(stdout) ? lab_errf(err, errlen, LAB_EIO, "runs: write failed") : LAB_OK;
}

int lab_cmd_runs(lab_store *st, const char *experiment, int json, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prepare(st,
                     "SELECT r.id, r.experiment, r.arm, r.repeat_idx, r.status, r.assertions_ok, r.expected_assertions,"
                     " c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean, v.verdict, r.started_at, r.wall_s,"
                     " c.first_div_layer, c.first_div_site, r.backend, r.code_version, r.error"
                     " FROM runs r LEFT JOIN comparisons c ON c.run_id = r.id"
                     " LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id"
                     " WHERE (?1 IS NULL OR r.experiment = ?1) ORDER BY r.id",
                     &s, err, errlen);
    if (rc) return rc;
    if (experiment) sqlite3_bind_text(s, 1, experiment, -1, SQLITE_TRANSIENT);
    if (json) return runs_json(st, s, err, errlen);
    printf("%-5s %-18s %-28s %-9s %-7s %-22s %-10s %-13s %-9s %s\n", "id", "experiment", "arm", "status", "asserts",
           "top1 k/n [95% CI]", "KL mean", "verdict", "diverges", "started");
    int n = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        char arm[64], top1[48] = "-", kl[24] = "-", asrt[16] = "-", div[16] = "-";
        if (sqlite3_column_int64(s, 3) > 0) snprintf(arm, sizeof arm, "%s#%lld", lab_col_text(s, 2), sqlite3_column_int64(s, 3));
        else snprintf(arm, sizeof arm, "%s", lab_col_text(s, 2));
        if (sqlite3_column_type(s, 5) != SQLITE_NULL)
            snprintf(asrt, sizeof asrt, "%s%s", sqlite3_column_int(s, 5) ? "ok" : "FAIL",
                     !strcmp(lab_col_text(s, 6), "fail") ? "*" : "");
        if (sqlite3_column_type(s, 7) != SQLITE_NULL)
            snprintf(top1, sizeof top1, "%lld/%lld [%.2f,%.2f]", sqlite3_column_int64(s, 7), sqlite3_column_int64(s, 8),
                     sqlite3_column_double(s, 9), sqlite3_column_double(s, 10));
        if (sqlite3_column_type(s, 11) != SQLITE_NULL) snprintf(kl, sizeof kl, "%.3g", sqlite3_column_double(s, 11));
        if (sqlite3_column_type(s, 15) != SQLITE_NULL)
            snprintf(div, sizeof div, "L%lld %s", sqlite3_column_int64(s, 15), sqlite3_column_int(s, 16) ? "ffn" : "attn");
        printf("%-5lld %-18s %-28s %-9s %-7s %-22s %-10s %-13s %-9s %s\n", sqlite3_column_int64(s, 0), lab_col_text(s, 1), arm,
               lab_col_text(s, 4), asrt, top1, kl, sqlite3_column_type(s, 12) == SQLITE_NULL ? "-" : lab_col_text(s, 12), div,
               lab_col_text(s, 13));
        n++;
    }
    if ((rc = rows_done(st, s, rc, "runs", err, errlen))) return rc;
    if (!n) printf("(no runs)\n");
    else printf("asserts: ok / FAIL (runtime dtype assertions); * = the arm replays a defect and expects FAIL\n");
    return LAB_OK;
}

/* ------------------------------------------------------------ show */

static int run_exists(lab_store *st, int64_t id, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prepare(st, "SELECT 1 FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        sqlite3_finalize(s);
        return LAB_OK;
    }
    if ((rc = rows_done(st, s, step, "find run", err, errlen))) return rc;
    return lab_errf(err, errlen, LAB_EINPUT, "run %lld: no such run in the database", (long long)id);
}

int lab_cmd_show(lab_store *st, int64_t id, char *err, size_t errlen) {
    int rc = run_exists(st, id, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    static const char *const fields[] = {
        "experiment", "arm", "repeat_idx", "status", "error", "is_reference", "started_at", "finished_at",
        "knob_hash", "model_sha256", "dataset_sha256", "code_version", "git_commit", "git_dirty", "build_flags",
        "compiler", "backend", "device", "host", "pid", "score", "top_k", "n_sequences", "n_tokens", "n_scored",
        "wall_s", "forward_s", "logits_sha256", "assertions_ok", "expected_assertions", "assertion_reason",
        "experiment_sha256"};
    if ((rc = prepare(st,
                      "SELECT experiment, arm, repeat_idx, status, error, is_reference, started_at, finished_at,"
                      " knob_hash, model_sha256, dataset_sha256, code_version, git_commit, git_dirty, build_flags,"
                      " compiler, backend, device, host, pid, score, top_k, n_sequences, n_tokens, n_scored,"
                      " wall_s, forward_s, logits_sha256, assertions_ok, expected_assertions, assertion_reason,"
                      " experiment_sha256 FROM runs WHERE id = ?1", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    printf("run %lld\n", (long long)id);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        for (int i = 0; i < (int)(sizeof fields / sizeof fields[0]); i++)
            if (sqlite3_column_type(s, i) != SQLITE_NULL) printf("  %-20s %s\n", fields[i], lab_col_text(s, i));
    if ((rc = rows_done(st, s, step, "show run", err, errlen))) return rc;

    printf("knobs (resolved; * = changes numerics)\n");
    if ((rc = prepare(st, "SELECT name, value, numeric FROM run_knobs WHERE run_id = ?1 ORDER BY name", &s, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        printf("  %s%-28s %s\n", sqlite3_column_int(s, 2) ? "*" : " ", lab_col_text(s, 0), lab_col_text(s, 1));
    if ((rc = rows_done(st, s, step, "show knobs", err, errlen))) return rc;

    printf("metrics\n");
    if ((rc = prepare(st, "SELECT name, value FROM metrics WHERE run_id = ?1 ORDER BY name", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        printf("  %-28s %.6g\n", lab_col_text(s, 0), sqlite3_column_double(s, 1));
    if ((rc = rows_done(st, s, step, "show metrics", err, errlen))) return rc;

    if ((rc = prepare(st,
                      "SELECT reference_run_id, top1_k, top1_n, top1_lo, top1_hi, kl_mean, kl_p99, kl_max,"
                      " max_abs_dlogit, rms_dp, mcnemar_b, mcnemar_c, mcnemar_p, first_div_layer, first_div_site,"
                      " first_div_value, div_tolerance, reference_recomputed, reference_hash_match"
                      " FROM comparisons WHERE run_id = ?1", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        printf("comparison with reference run %lld%s\n", sqlite3_column_int64(s, 0),
               sqlite3_column_int(s, 17) ? (sqlite3_column_int(s, 18) ? " (recomputed, hash matches)"
                                                                       : " (recomputed, HASH DIFFERS)") : "");
        printf("  top-1 agreement        %lld/%lld = %.4f  Wilson 95%% [%.4f, %.4f]\n", sqlite3_column_int64(s, 1),
               sqlite3_column_int64(s, 2),
               sqlite3_column_int64(s, 2) ? (double)sqlite3_column_int64(s, 1) / (double)sqlite3_column_int64(s, 2) : 0.0,
               sqlite3_column_double(s, 3), sqlite3_column_double(s, 4));
        printf("  KL(ref||arm) nats      mean %.4g  p99 %.4g  max %.4g\n", sqlite3_column_double(s, 5),
               sqlite3_column_double(s, 6), sqlite3_column_double(s, 7));
        printf("  max |dlogit|           %.4g\n", sqlite3_column_double(s, 8));
        printf("  RMS dp (ref top-1)     %.4g\n", sqlite3_column_double(s, 9));
        printf("  McNemar vs reference   b=%lld c=%lld p=%.4g\n", sqlite3_column_int64(s, 10), sqlite3_column_int64(s, 11),
               sqlite3_column_double(s, 12));
        if (sqlite3_column_type(s, 13) != SQLITE_NULL)
            printf("  first divergence       layer %lld %s (rel L2 %.3g > tolerance %.3g)\n", sqlite3_column_int64(s, 13),
                   sqlite3_column_int(s, 14) ? "after FFN" : "after attention", sqlite3_column_double(s, 15),
                   sqlite3_column_double(s, 16));
        else if (sqlite3_column_type(s, 16) != SQLITE_NULL)
            printf("  first divergence       none above tolerance %.3g\n", sqlite3_column_double(s, 16));
    }
    if ((rc = rows_done(st, s, step, "show comparisons", err, errlen))) return rc;

    if ((rc = prepare(st, "SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ?1 ORDER BY layer, site",
                      &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    int first = 1;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (first) printf("per-layer divergence (relative L2 of the residual stream)\n  layer  after-attn  after-ffn\n");
        if (sqlite3_column_int(s, 1) == 0) printf("  %5lld  %10.3g", sqlite3_column_int64(s, 0), sqlite3_column_double(s, 2));
        else printf("  %10.3g\n", sqlite3_column_double(s, 2));
        first = 0;
    }
    if ((rc = rows_done(st, s, step, "show layer divergence", err, errlen))) return rc;

    if ((rc = prepare(st, "SELECT metric, threshold, direction, k, n, lo, hi, verdict FROM verdicts WHERE run_id = ?1",
                      &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        printf("verdict: %s  (%s %s %.3g; evidence %lld/%lld, Wilson 95%% [%.4f, %.4f])\n", lab_col_text(s, 7), lab_col_text(s, 0),
               lab_col_text(s, 2), sqlite3_column_double(s, 1), sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4),
               sqlite3_column_double(s, 5), sqlite3_column_double(s, 6));
    if ((rc = rows_done(st, s, step, "show verdicts", err, errlen))) return rc;

    if ((rc = prepare(st, "SELECT site, expected_dtype, seen_dtypes, records, ok, reason FROM expectations WHERE run_id = ?1",
                      &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    first = 1;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (first) printf("expectations\n");
        printf("  %-18s expects %-5s saw %-10s %s %s\n", lab_col_text(s, 0), lab_col_text(s, 1), lab_col_text(s, 2),
               sqlite3_column_int(s, 4) ? "ok" : "FAIL", lab_col_text(s, 5));
        first = 0;
    }
    if ((rc = rows_done(st, s, step, "show expectations", err, errlen))) return rc;

    /* Probes: one line per site and dtype pair, with violations summed. */
    if ((rc = prepare(st,
                      "SELECT site, dtype, src_dtype, count(*), sum(rows), max(bytes_per_row), max(src_row_bytes),"
                      " max(dst_row_bytes), sum(violations), max(rows_unwritten), sum(1 - ok), min(layer), max(layer),"
                      " (SELECT detail FROM probes p2 WHERE p2.run_id = p.run_id AND p2.site = p.site AND p2.ok = 0"
                      "  ORDER BY idx LIMIT 1)"
                      " FROM probes p WHERE run_id = ?1 GROUP BY site, dtype, src_dtype ORDER BY min(idx)",
                      &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, id);
    first = 1;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (first)
            printf("probes (records per site; bytes/row copied vs src/dst row bytes)\n"
                   "  %-16s %-5s %-5s %7s %10s %7s %7s %7s %10s %9s %s\n", "site", "dtype", "src", "records", "rows",
                   "B/row", "srcB", "dstB", "violations", "unwritten", "layers");
        printf("  %-16s %-5s %-5s %7lld %10lld %7lld %7lld %7lld %10lld %9lld %lld..%lld %s\n", lab_col_text(s, 0),
               lab_col_text(s, 1), *lab_col_text(s, 2) ? lab_col_text(s, 2) : "-", sqlite3_column_int64(s, 3),
               sqlite3_column_int64(s, 4), sqlite3_column_int64(s, 5), sqlite3_column_int64(s, 6),
               sqlite3_column_int64(s, 7), sqlite3_column_int64(s, 8), sqlite3_column_int64(s, 9),
               sqlite3_column_int64(s, 11), sqlite3_column_int64(s, 12), sqlite3_column_int(s, 10) ? "VIOLATED" : "");
        if (sqlite3_column_int(s, 10) && *lab_col_text(s, 13)) printf("      first: %s\n", lab_col_text(s, 13));
        first = 0;
    }
    return rows_done(st, s, step, "show probes", err, errlen);
}

/* ------------------------------------------------------------ compare */

typedef struct run_brief {
    char    arm[64], experiment[64], status[16], knob_hash[65], model[65], dataset[65], code[256], logits[65];
    int64_t reference_run, n_scored;
} run_brief;

static int load_brief(lab_store *st, int64_t id, run_brief *b, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    sqlite3_stmt *s;
    int rc = prepare(st,
                     "SELECT r.arm, r.experiment, r.status, r.knob_hash, r.model_sha256, r.dataset_sha256,"
                     " r.code_version, r.logits_sha256, (SELECT reference_run_id FROM comparisons c WHERE c.run_id = r.id"
                     " ORDER BY reference_run_id DESC LIMIT 1), r.n_scored, r.is_reference FROM runs r WHERE r.id = ?1",
                     &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        if ((rc = rows_done(st, s, step, "compare", err, errlen))) return rc;
        return lab_errf(err, errlen, LAB_EINPUT, "run %lld: no such run in the database", (long long)id);
    }
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
    sqlite3_finalize(s);
    return LAB_OK;
}

/* A metric of both runs with the difference and the ratio (B - A, B / A). */
static void metric_row(const char *name, double va, double vb) {
    printf("%-16s %-40.6g %-16.6g B-A %+.4g", name, va, vb, vb - va);
    if (va != 0 && isfinite(va) && isfinite(vb)) printf(", B/A %.4f", vb / va);
    printf("\n");
}

/* "*" p < 0.05, "**" p < 0.01, "***" p < 0.001, else "(not significant)". */
static const char *signif(double p) {
    return p < 0.001 ? "***" : p < 0.01 ? "**" : p < 0.05 ? "*" : "(not significant at 0.05)";
}

int lab_cmd_compare(lab_store *st, int64_t a, int64_t b, char *err, size_t errlen) {
    run_brief A, B;
    int rc;
    if ((rc = load_brief(st, a, &A, err, errlen)) || (rc = load_brief(st, b, &B, err, errlen))) return rc;
    printf("%-16s %-40s %-40s\n", "", "run A", "run B");
    printf("%-16s %-40lld %-40lld\n", "id", (long long)a, (long long)b);
#define ROW(name, fa, fb) printf("%-16s %-40.40s %-40.40s%s\n", name, fa, fb, strcmp(fa, fb) ? "  (differs)" : "")
    ROW("experiment", A.experiment, B.experiment);
    ROW("arm", A.arm, B.arm);
    ROW("status", A.status, B.status);
    ROW("knob hash", A.knob_hash, B.knob_hash);
    ROW("model sha256", A.model, B.model);
    ROW("dataset sha256", A.dataset, B.dataset);
    ROW("code version", A.code, B.code);
    ROW("logits sha256", A.logits, B.logits);
#undef ROW
    /* Knobs that differ. */
    sqlite3_stmt *s;
    if ((rc = prepare(st,
                      "SELECT ka.name, ka.value, kb.value FROM run_knobs ka JOIN run_knobs kb ON kb.name = ka.name"
                      " AND kb.run_id = ?2 WHERE ka.run_id = ?1 AND ka.value <> kb.value ORDER BY ka.name",
                      &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        printf("knob %-11s %-40s %-40s\n", lab_col_text(s, 0), lab_col_text(s, 1), lab_col_text(s, 2));
    if ((rc = rows_done(st, s, step, "compare knobs", err, errlen))) return rc;
    /* Metrics side by side. */
    if ((rc = prepare(st,
                      "SELECT ma.name, ma.value, mb.value FROM metrics ma JOIN metrics mb ON mb.name = ma.name"
                      " AND mb.run_id = ?2 WHERE ma.run_id = ?1 ORDER BY ma.name", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        metric_row(lab_col_text(s, 0), sqlite3_column_double(s, 1), sqlite3_column_double(s, 2));
    if ((rc = rows_done(st, s, step, "compare metrics", err, errlen))) return rc;
    /* Each run against its own reference, side by side. */
    if ((rc = prepare(st,
                      "WITH ca AS (SELECT * FROM comparisons WHERE run_id = ?1 LIMIT 1),"
                      " cb AS (SELECT * FROM comparisons WHERE run_id = ?2 LIMIT 1)"
                      " SELECT 'top1 vs ref', 1.0 * ca.top1_k / ca.top1_n, 1.0 * cb.top1_k / cb.top1_n FROM ca, cb"
                      " UNION ALL SELECT 'kl_mean', ca.kl_mean, cb.kl_mean FROM ca, cb"
                      " UNION ALL SELECT 'kl_p99', ca.kl_p99, cb.kl_p99 FROM ca, cb"
                      " UNION ALL SELECT 'kl_max', ca.kl_max, cb.kl_max FROM ca, cb"
                      " UNION ALL SELECT 'max |dlogit|', ca.max_abs_dlogit, cb.max_abs_dlogit FROM ca, cb"
                      " UNION ALL SELECT 'rms dp', ca.rms_dp, cb.rms_dp FROM ca, cb", &s, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        if (sqlite3_column_type(s, 1) != SQLITE_NULL && sqlite3_column_type(s, 2) != SQLITE_NULL)
            metric_row(lab_col_text(s, 0), sqlite3_column_double(s, 1), sqlite3_column_double(s, 2));
    if ((rc = rows_done(st, s, step, "compare comparisons", err, errlen))) return rc;

    /* Top-1 agreement between A and B on the same positions, and McNemar on
     * agreement with their common reference. */
    int32_t *ta = NULL, *tb = NULL, *tr = NULL;
    int64_t na = 0, nb = 0, nr = 0;
    if ((rc = lab_store_top1(st, a, &ta, &na, err, errlen)) || (rc = lab_store_top1(st, b, &tb, &nb, err, errlen))) goto out;
    if (na == 0 || na != nb || strcmp(A.dataset, B.dataset)) {
        printf("top-1 A vs B: not comparable (different datasets or scored positions: %lld vs %lld)\n", (long long)na,
               (long long)nb);
        goto out;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < na; i++) k += ta[i] == tb[i];
    double lo, hi;
    lab_wilson(k, na, LAB_Z95, &lo, &hi);
    printf("top-1 A vs B     %lld/%lld agree, Wilson 95%% [%.4f, %.4f]\n", (long long)k, (long long)na, lo, hi);
    if (A.reference_run && A.reference_run == B.reference_run) {
        if ((rc = lab_store_top1(st, A.reference_run, &tr, &nr, err, errlen))) goto out;
        if (nr == na) {
            int64_t bb = 0, cc = 0;
            for (int64_t i = 0; i < na; i++) {
                int ra = ta[i] == tr[i], rb = tb[i] == tr[i];
                bb += ra && !rb;
                cc += !ra && rb;
            }
            double p = lab_mcnemar_exact(bb, cc);
            printf("McNemar exact    vs reference run %lld: A-only agree %lld, B-only agree %lld, p = %.4g %s\n",
                   (long long)A.reference_run, (long long)bb, (long long)cc, p, signif(p));
        }
    } else {
        printf("McNemar exact    not computed: the runs have no common reference run\n");
    }
out:
    free(ta);
    free(tb);
    free(tr);
    return rc;
}

/* ------------------------------------------------------------ export */

static cJSON *row_object(sqlite3_stmt *s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    for (int i = 0; i < sqlite3_column_count(s); i++) {
        const char *name = sqlite3_column_name(s, i);
        switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER: cJSON_AddNumberToObject(o, name, (double)sqlite3_column_int64(s, i)); break;
        case SQLITE_FLOAT: cJSON_AddNumberToObject(o, name, sqlite3_column_double(s, i)); break;
        case SQLITE_NULL: cJSON_AddNullToObject(o, name); break;
        case SQLITE_BLOB: break; /* blobs are exported by the logits section */
        default: cJSON_AddStringToObject(o, name, lab_col_text(s, i));
        }
    }
    return o;
}

/* Appends every row of "SELECT ... WHERE run_id = ?1" as an array. */
static int add_rows(lab_store *st, cJSON *root, const char *key, const char *sql, int64_t id, int single,
                    char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prepare(st, sql, &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    cJSON *arr = single ? NULL : cJSON_AddArrayToObject(root, key);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        cJSON *o = row_object(s);
        if (!o) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        if (single) { cJSON_AddItemToObject(root, key, o); step = SQLITE_DONE; break; }
        cJSON_AddItemToArray(arr, o);
    }
    return rows_done(st, s, step, key, err, errlen);
}

/* One sequence's top-k of a run: ids and logprobs [n_pos][k] (owned). */
typedef struct seq_topk { int64_t seq, n_pos, k; int32_t *ids; float *lp; } seq_topk;

static void seq_topk_free(seq_topk *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) { free(t[i].ids); free(t[i].lp); }
    free(t);
}

/* Every sequence's top-k of run id, in sequence order. A row whose blobs do
 * not have n_pos x k entries is an error (a corrupt row), not skipped. */
static int load_topk(lab_store *st, int64_t id, seq_topk **out, int64_t *n, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *out = NULL;
    *n = 0;
    int rc = prepare(st, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ?1 ORDER BY seq", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int step;
    seq_topk *t = NULL;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 1), k = sqlite3_column_int64(s, 2);
        if (np < 0 || k <= 0 || sqlite3_column_bytes(s, 3) != np * k * 4 || sqlite3_column_bytes(s, 4) != np * k * 4) {
            rc = lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: logits_topk of sequence %lld has the wrong size",
                          lab_store_path(st), (long long)id, (long long)sqlite3_column_int64(s, 0));
            break;
        }
        seq_topk *nt = realloc(t, (size_t)(*n + 1) * sizeof *t);
        if (!nt) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        t = nt;
        seq_topk *q = &t[(*n)++];
        q->seq = sqlite3_column_int64(s, 0), q->n_pos = np, q->k = k;
        q->ids = malloc((size_t)(np * k) * sizeof *q->ids + 1);
        q->lp = malloc((size_t)(np * k) * sizeof *q->lp + 1);
        if (!q->ids || !q->lp) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); break; }
        memcpy(q->ids, sqlite3_column_blob(s, 3), (size_t)(np * k) * 4);
        memcpy(q->lp, sqlite3_column_blob(s, 4), (size_t)(np * k) * 4);
    }
    if (!rc) rc = rows_done(st, s, step, "export top-k", err, errlen);
    else sqlite3_finalize(s);
    if (rc) { seq_topk_free(t, *n); *n = 0; return rc; }
    *out = t;
    return LAB_OK;
}

/* `--format positions` (JSON lines) and `positions-csv`: one record per
 * position of the run against its reference, what lm-evaluation-harness's
 * --log_samples gives per sample: whether the position is scored, the
 * reference's top-1 and its probability, the run's top-1, agreement, and the
 * run's probability of the reference's top-1 with the difference (dp; empty
 * when that token is not in the run's stored top-k), and, at a scored
 * position, KL(reference || run) from lab_position_kl: exact when both runs
 * stored full logits (kl_exact), else estimated from the stored top-k. A run
 * without a comparison (a reference) is LAB_EINPUT. */
static int export_positions(lab_store *st, int64_t id, int csv, FILE *out, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prepare(st, "SELECT c.reference_run_id, r.score FROM runs r JOIN comparisons c ON c.run_id = r.id"
                         " WHERE r.id = ?1 LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, id);
    int step = sqlite3_step(s);
    int64_t ref = step == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    int last_only = step == SQLITE_ROW && !strcmp(lab_col_text(s, 1), "last");
    if ((rc = rows_done(st, s, step == SQLITE_ROW ? SQLITE_DONE : step, "export positions", err, errlen))) return rc;
    if (!ref)
        return lab_errf(err, errlen, LAB_EINPUT, "run %lld has no comparison with a reference (it is one, or it did not "
                        "finish): nothing to export per position", (long long)id);
    seq_topk *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0, nkl = 0, ikl = 0;
    double *kl = NULL;
    int exact = 0;
    if ((rc = lab_position_kl(st, ref, id, &kl, &nkl, &exact, err, errlen))) return rc;
    if ((rc = load_topk(st, id, &a, &na, err, errlen)) || (rc = load_topk(st, ref, &b, &nb, err, errlen))) {
        seq_topk_free(a, na);
        free(kl);
        return rc;
    }
    if (csv) fprintf(out, "run_id,reference_run_id,seq,pos,scored,ref_top1,ref_p,top1,agree,p_of_ref_top1,dp,kl,kl_exact\n");
    for (int64_t i = 0; i < na && i < nb; i++) {
        const seq_topk *x = &a[i], *r = &b[i];
        for (int64_t p = 0; x->seq == r->seq && p < x->n_pos && p < r->n_pos; p++) {
            int32_t rt = r->ids[p * r->k], t = x->ids[p * x->k];
            double rp = exp(r->lp[p * r->k]), xp = NAN;
            for (int64_t j = 0; j < x->k; j++)
                if (x->ids[p * x->k + j] == rt) { xp = exp(x->lp[p * x->k + j]); break; }
            int scored = !last_only || p == x->n_pos - 1;
            char pv[32] = "", dv[32] = "", kv[32] = "";
            if (!isnan(xp)) snprintf(pv, sizeof pv, "%.9g", xp), snprintf(dv, sizeof dv, "%.9g", xp - rp);
            if (scored && ikl < nkl) snprintf(kv, sizeof kv, "%.9g", kl[ikl++]);
            if (csv)
                fprintf(out, "%lld,%lld,%lld,%lld,%d,%d,%.9g,%d,%d,%s,%s,%s,%d\n", (long long)id, (long long)ref,
                        (long long)x->seq, (long long)p, scored, rt, rp, t, t == rt, pv, dv, kv, exact);
            else
                fprintf(out, "{\"run_id\": %lld, \"reference_run_id\": %lld, \"seq\": %lld, \"pos\": %lld, \"scored\": %s, "
                        "\"ref_top1\": %d, \"ref_p\": %.9g, \"top1\": %d, \"agree\": %s, \"p_of_ref_top1\": %s, \"dp\": %s, "
                        "\"kl\": %s, \"kl_exact\": %s}\n",
                        (long long)id, (long long)ref, (long long)x->seq, (long long)p, scored ? "true" : "false", rt, rp,
                        t, t == rt ? "true" : "false", pv[0] ? pv : "null", dv[0] ? dv : "null", kv[0] ? kv : "null",
                        exact ? "true" : "false");
        }
    }
    seq_topk_free(a, na);
    seq_topk_free(b, nb);
    free(kl);
    return ferror(out) ? lab_errf(err, errlen, LAB_EIO, "export: write failed") : LAB_OK;
}

int lab_cmd_export(lab_store *st, int64_t id, const char *format, FILE *out, char *err, size_t errlen) {
    int rc = run_exists(st, id, err, errlen);
    if (rc) return rc;
    if (!strcmp(format, "positions") || !strcmp(format, "positions-csv"))
        return export_positions(st, id, !strcmp(format, "positions-csv"), out, err, errlen);
    if (!strcmp(format, "csv")) {
        /* Long form, one row per (sequence, position, rank): the per-position
         * top-k of the run, what a spreadsheet or pandas wants. */
        sqlite3_stmt *s;
        if ((rc = prepare(st, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ?1 ORDER BY seq",
                          &s, err, errlen))) return rc;
        sqlite3_bind_int64(s, 1, id);
        fprintf(out, "run_id,seq,pos,rank,token_id,logprob\n");
        int step;
        while ((step = sqlite3_step(s)) == SQLITE_ROW) {
            int64_t q = sqlite3_column_int64(s, 0), np = sqlite3_column_int64(s, 1), k = sqlite3_column_int64(s, 2);
            const char *ids = sqlite3_column_blob(s, 3), *lp = sqlite3_column_blob(s, 4);
            if (sqlite3_column_bytes(s, 3) != np * k * 4 || sqlite3_column_bytes(s, 4) != np * k * 4) continue;
            for (int64_t p = 0; p < np; p++)
                for (int64_t r = 0; r < k; r++) {
                    int32_t t;
                    float v;
                    memcpy(&t, ids + (p * k + r) * 4, 4);
                    memcpy(&v, lp + (p * k + r) * 4, 4);
                    fprintf(out, "%lld,%lld,%lld,%lld,%d,%.9g\n", (long long)id, (long long)q, (long long)p,
                            (long long)r, t, v);
                }
        }
        if ((rc = rows_done(st, s, step, "export top-k", err, errlen))) return rc;
        return ferror(out) ? lab_errf(err, errlen, LAB_EIO, "export: write failed") : LAB_OK;
    }
    cJSON *root = cJSON_CreateObject();
    if (!root) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (!rc) rc = add_rows(st, root, "run", "SELECT * FROM runs WHERE id = ?1", id, 1, err, errlen);
    if (!rc) rc = add_rows(st, root, "knobs", "SELECT name, value, numeric FROM run_knobs WHERE run_id = ?1 ORDER BY name", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "metrics", "SELECT name, value FROM metrics WHERE run_id = ?1 ORDER BY name", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "probes", "SELECT * FROM probes WHERE run_id = ?1 ORDER BY idx", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "expectations", "SELECT * FROM expectations WHERE run_id = ?1", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "comparisons", "SELECT * FROM comparisons WHERE run_id = ?1", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "layer_divergence", "SELECT * FROM layer_divergence WHERE run_id = ?1 ORDER BY layer, site", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "verdicts", "SELECT * FROM verdicts WHERE run_id = ?1", id, 0, err, errlen);
    if (!rc) rc = add_rows(st, root, "pair_tests", "SELECT * FROM pair_tests WHERE run_a = ?1 OR run_b = ?1", id, 0, err, errlen);
    /* Per-position top-k, as arrays [[ids...], ...] and [[logprobs...], ...] per sequence. */
    sqlite3_stmt *s = NULL;
    if (!rc && !(rc = prepare(st, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ?1 ORDER BY seq",
                              &s, err, errlen))) {
        sqlite3_bind_int64(s, 1, id);
        cJSON *arr = cJSON_AddArrayToObject(root, "topk");
        int step;
        while ((step = sqlite3_step(s)) == SQLITE_ROW) {
            int64_t np = sqlite3_column_int64(s, 1), k = sqlite3_column_int64(s, 2);
            const char *ids = sqlite3_column_blob(s, 3), *lp = sqlite3_column_blob(s, 4);
            if (sqlite3_column_bytes(s, 3) != np * k * 4 || sqlite3_column_bytes(s, 4) != np * k * 4) continue;
            cJSON *o = cJSON_CreateObject(), *ji = cJSON_AddArrayToObject(o, "ids"), *jl = cJSON_AddArrayToObject(o, "logprobs");
            cJSON_AddNumberToObject(o, "seq", (double)sqlite3_column_int64(s, 0));
            for (int64_t p = 0; p < np; p++) {
                cJSON *ri = cJSON_CreateArray(), *rl = cJSON_CreateArray();
                for (int64_t r = 0; r < k; r++) {
                    int32_t t;
                    float v;
                    memcpy(&t, ids + (p * k + r) * 4, 4);
                    memcpy(&v, lp + (p * k + r) * 4, 4);
                    cJSON_AddItemToArray(ri, cJSON_CreateNumber(t));
                    cJSON_AddItemToArray(rl, cJSON_CreateNumber(v));
                }
                cJSON_AddItemToArray(ji, ri);
                cJSON_AddItemToArray(jl, rl);
            }
            cJSON_AddItemToArray(arr, o);
        }
        rc = rows_done(st, s, step, "export top-k", err, errlen);
    }
    if (!rc) {
        char *text = cJSON_Print(root);
        if (!text) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        else {
            fprintf(out, "%s\n", text);
            free(text);
            if (ferror(out)) rc = lab_errf(err, errlen, LAB_EIO, "export: write failed");
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------ export to a file */

/* The message for a failed write of path with errno e: a full disk and the
 * file size limit said in words. */
static int write_err(const char *path, int e, const char *what, char *err, size_t errlen) {
    if (e == ENOSPC || e == EDQUOT)
        return lab_errf(err, errlen, LAB_EIO, "--out %s: %s: the disk is full (%s); the previous file is unchanged",
                        path, what, strerror(e));
    if (e == EFBIG)
        return lab_errf(err, errlen, LAB_EIO,
                        "--out %s: %s: file too large (%s; see `ulimit -f`); the previous file is unchanged", path,
                        what, strerror(e));
    return lab_errf(err, errlen, LAB_EIO, "--out %s: %s: %s; the previous file is unchanged", path, what,
                    strerror(e ? e : EIO));
}

/* fsync of the directory holding path, so that the rename survives a crash
 * (best effort: some file systems refuse to fsync a directory). */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* --out naming something that is not a regular file (a terminal, a pipe,
 * /dev/stdout): there is nothing to replace, so it is written directly. */
static int export_stream(lab_store *st, int64_t id, const char *format, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) return lab_errf(err, errlen, LAB_EINPUT, "--out %s: cannot open: %s", path, strerror(errno));
    errno = 0;
    int rc = lab_cmd_export(st, id, format, f, err, errlen);
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (e) rc = write_err(path, e, "write failed", err, errlen);
    return rc;
}

int lab_cmd_export_file(lab_store *st, int64_t id, const char *format, const char *path, char *err, size_t errlen) {
    int rc = run_exists(st, id, err, errlen);   /* before any file is touched */
    if (rc) return rc;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "--out %s: is a directory", path);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return export_stream(st, id, format, path, err, errlen);
    /* A symlink stays a symlink: the file it points to is what is replaced. */
    char *target = realpath(path, NULL);
    if (!target) target = strdup(path);
    size_t pl = target ? strlen(target) : 0;
    const char *slash = target ? strrchr(target, '/') : NULL;
    char *dir = !target ? NULL : slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : strdup(".");
    char *tmp = malloc(pl + 48), fdpath[64];
    if (!target || !dir || !tmp) {
        free(target);
        free(dir);
        free(tmp);
        return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    snprintf(tmp, pl + 48, "%s.%ld.tmp", target, (long)getpid());
    /* An unnamed file in the target directory (O_TMPFILE): a process killed
     * while writing leaves nothing behind. File systems without it get a
     * named temp file, removed on every failure this process sees. */
    int named = 0;
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) {
        named = 1;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        int e = errno;
        rc = e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS
                 ? lab_errf(err, errlen, LAB_EINPUT, "--out %s: cannot create: %s", path, strerror(e))
                 : write_err(path, e, "cannot create", err, errlen);
        free(target);
        free(dir);
        free(tmp);
        return rc;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        rc = write_err(path, errno, "cannot create", err, errlen);
        close(fd);
        goto cleanup;
    }
    errno = 0;
    rc = lab_cmd_export(st, id, format, f, err, errlen);
    int e = 0;   /* errno of the first write that failed: said in words below */
    if (ferror(f)) {
        e = errno ? errno : EIO;
        rc = LAB_OK;
    }
    if (!rc && !e && fflush(f) != 0) e = errno ? errno : EIO;
    if (!rc && !e && fsync(fd) != 0) e = errno ? errno : EIO;
    if (!rc && !e && !named) {
        /* Give the finished unnamed file a name beside its target, then
         * rename that over the target: both steps are atomic. */
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) e = errno ? errno : EIO;
        else named = 1;
    }
    if (fclose(f) != 0 && !rc && !e) e = errno ? errno : EIO;
    if (!rc && e) rc = write_err(path, e, "write failed", err, errlen);
    if (!rc && rename(tmp, target) != 0) rc = write_err(path, errno, "cannot rename into place", err, errlen);
    if (!rc) {
        sync_dir(dir);
        free(target);
        free(dir);
        free(tmp);
        return LAB_OK;
    }
cleanup:
    if (named) unlink(tmp);
    free(target);
    free(dir);
    free(tmp);
    return rc;
}
