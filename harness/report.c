/*
 * report.c — `vtlab report` (see report.h for what it writes).
 *
 * The page is built in memory from read-only queries, one experiment at a
 * time, then written with .tmp + rename, so a reader never sees half a page.
 * The charts are in report_charts.c; what the two files share (the page's
 * model, the query helpers) is report_page.h.
 *
 * Which runs the page shows: for each experiment and arm, the latest
 * FINISHED run of repeat 0 (the latest of any status when none finished), so
 * after a nightly the page shows that night. Older runs stay in the database
 * and appear in the nightly history charts.
 */
#include "report.h"
#include "report_page.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"
#include "model/vt.h"
#include "plot.h"

static void fmt_g(char *out, size_t n, double v) {
    if (isnan(v)) snprintf(out, n, "–");
    else snprintf(out, n, "%.3g", v);
}

/* ------------------------------------------------------------ the model of the page */
static void exp_view_free(exp_view *e) {
    for (int i = 0; i < e->n_arms; i++) {
        arm_view *a = &e->arms[i];
        free(a->description); free(a->spec_knobs); free(a->spec_expect); free(a->error);
        free(a->assertion_reason); free(a->resolved_knobs);
    }
    free(e->arms);
    free(e->description); free(e->hypothesis); free(e->file); free(e->spec_json);
    memset(e, 0, sizeof *e);
}

static char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? lab_strdup(v->valuestring) : NULL;
}

/* "K=V, K=V" of a JSON object whose values are strings, numbers or bools. */
static char *json_pairs(const cJSON *o) {
    lab_buf b = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        if (b.len) lab_buf_append(&b, ", ", 2);
        if (cJSON_IsString(it)) lab_buf_printf(&b, "%s=%s", it->string, it->valuestring);
        else if (cJSON_IsBool(it)) lab_buf_printf(&b, "%s=%d", it->string, cJSON_IsTrue(it) ? 1 : 0);
        else if (cJSON_IsNumber(it)) lab_buf_printf(&b, "%s=%g", it->string, it->valuedouble);
        else lab_buf_printf(&b, "%s=?", it->string);
    }
    if (!b.data) lab_buf_append(&b, "", 0);
    return b.data;
}

static arm_view *add_arm(exp_view *e, const char *name) {
    for (int i = 0; i < e->n_arms; i++)
        if (!strcmp(e->arms[i].name, name)) return &e->arms[i];
    arm_view *na = realloc(e->arms, (size_t)(e->n_arms + 1) * sizeof *na);
    if (!na) return NULL;
    e->arms = na;
    arm_view *a = &e->arms[e->n_arms++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->assertions_ok = -1;
    a->first_layer = -1;
    a->tps = a->ppl = a->peak_frac = NAN;
    return a;
}

/* An arm's description, knobs, expectations and declared assertion outcome
 * from its entry in a spec's "arms". */
static void arm_from_spec(arm_view *a, const cJSON *it) {
    a->description = json_str(it, "description");
    a->spec_knobs = json_pairs(cJSON_GetObjectItemCaseSensitive(it, "knobs"));
    a->spec_expect = json_pairs(cJSON_GetObjectItemCaseSensitive(it, "expect"));
    const cJSON *ea = cJSON_GetObjectItemCaseSensitive(it, "expect_assertions");
    a->expect_fail = cJSON_IsString(ea) && !strcmp(ea->valuestring, "fail");
}

/* The experiment's spec (that of its latest run) and its arms in spec order. */
static int load_spec(lab_store *st, exp_view *e, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_rp_prep(st, "SELECT s.sha256, s.json, s.file FROM runs r JOIN experiment_specs s ON s.sha256 = r.experiment_sha256"
                      " WHERE r.experiment = ?1 ORDER BY r.id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(e->spec_sha, sizeof e->spec_sha, "%s", lab_col_text(s, 0));
        e->spec_json = lab_strdup(lab_col_text(s, 1));
        e->file = lab_strdup(lab_col_text(s, 2));
    }
    sqlite3_finalize(s);
    cJSON *j = e->spec_json ? cJSON_Parse(e->spec_json) : NULL;
    if (!j) return LAB_OK;
    e->description = json_str(j, "description");
    e->hypothesis = json_str(j, "hypothesis");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "reference");
    if (cJSON_IsString(ref)) snprintf(e->reference, sizeof e->reference, "%s", ref->valuestring);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "decision");
    if (cJSON_IsObject(d)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "threshold");
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(d, "direction");
        if (cJSON_IsNumber(t)) {
            e->has_decision = 1;
            e->threshold = t->valuedouble;
            e->decision_ge = !(cJSON_IsString(dir) && !strcmp(dir->valuestring, "<="));
        }
    }
    const cJSON *arms = cJSON_GetObjectItemCaseSensitive(j, "arms"), *it;
    cJSON_ArrayForEach(it, arms) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(nm)) continue;
        arm_view *a = add_arm(e, nm->valuestring);
        if (!a) { cJSON_Delete(j); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        arm_from_spec(a, it);
        a->is_reference = !strcmp(a->name, e->reference);
    }
    cJSON_Delete(j);
    return LAB_OK;
}

/* When the run an arm shows ran another spec than the experiment's latest (an
 * older version of the file), the arm is described by that spec: a run is
 * judged against what it was asked to do. */
static int arm_from_run_spec(lab_store *st, arm_view *a, const char *sha, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_rp_prep(st, "SELECT json FROM experiment_specs WHERE sha256 = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, sha, -1, SQLITE_TRANSIENT);
    cJSON *j = sqlite3_step(s) == SQLITE_ROW ? cJSON_Parse(lab_col_text(s, 0)) : NULL;
    sqlite3_finalize(s);
    const cJSON *it, *arms = j ? cJSON_GetObjectItemCaseSensitive(j, "arms") : NULL;
    cJSON_ArrayForEach(it, arms) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, a->name)) continue;
        free(a->description); free(a->spec_knobs); free(a->spec_expect);
        arm_from_spec(a, it);
        break;
    }
    cJSON_Delete(j);
    return LAB_OK;
}

/* The run an arm shows: latest FINISHED repeat 0, else the latest of any. */
static int load_arm_run(lab_store *st, exp_view *e, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    char run_sha[72] = "";
    int rc = lab_rp_prep(st,
                  "SELECT id, status, error, assertions_ok, assertion_reason, backend, started_at, code_version, is_reference,"
                  " experiment_sha256 FROM runs WHERE experiment = ?1 AND arm = ?2"
                  " ORDER BY (status = 'FINISHED' AND repeat_idx = 0) DESC, id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, a->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
        a->run_id = sqlite3_column_int64(s, 0);
        snprintf(a->status, sizeof a->status, "%s", lab_col_text(s, 1));
        if (sqlite3_column_type(s, 2) != SQLITE_NULL) a->error = lab_strdup(lab_col_text(s, 2));
        a->assertions_ok = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 3);
        if (sqlite3_column_type(s, 4) != SQLITE_NULL) a->assertion_reason = lab_strdup(lab_col_text(s, 4));
        snprintf(a->backend, sizeof a->backend, "%s", lab_col_text(s, 5));
        snprintf(a->started, sizeof a->started, "%s", lab_col_text(s, 6));
        snprintf(a->code_version, sizeof a->code_version, "%s", lab_col_text(s, 7));
        if (sqlite3_column_int(s, 8)) a->is_reference = 1;
        snprintf(run_sha, sizeof run_sha, "%s", lab_col_text(s, 9));
    }
    sqlite3_finalize(s);
    if (!a->run_id) return LAB_OK;
    if (run_sha[0] && strcmp(run_sha, e->spec_sha) && (rc = arm_from_run_spec(st, a, run_sha, err, errlen))) return rc;

    if ((rc = lab_rp_prep(st,
                   "SELECT c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean, c.kl_p99, c.kl_max,"
                   " c.max_abs_dlogit, c.rms_dp, c.mcnemar_p, c.first_div_layer, c.first_div_site, c.first_div_value,"
                   " c.div_tolerance, v.verdict, v.threshold, v.direction, v.metric"
                   " FROM comparisons c LEFT JOIN verdicts v ON v.run_id = c.run_id AND v.reference_run_id = c.reference_run_id"
                   " WHERE c.run_id = ?1 LIMIT 1", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    if (sqlite3_step(s) == SQLITE_ROW) {
        a->has_cmp = 1;
        a->ref_run = sqlite3_column_int64(s, 0);
        a->k = sqlite3_column_int64(s, 1);
        a->n = sqlite3_column_int64(s, 2);
        a->lo = lab_rp_col_num(s, 3);
        a->hi = lab_rp_col_num(s, 4);
        a->kl_mean = lab_rp_col_num(s, 5);
        a->kl_p99 = lab_rp_col_num(s, 6);
        a->kl_max = lab_rp_col_num(s, 7);
        a->max_dl = lab_rp_col_num(s, 8);
        a->rms_dp = lab_rp_col_num(s, 9);
        a->mc_p = lab_rp_col_num(s, 10);
        a->first_layer = sqlite3_column_type(s, 11) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 11);
        a->first_site = sqlite3_column_int(s, 12);
        a->first_value = lab_rp_col_num(s, 13);
        a->div_tol = lab_rp_col_num(s, 14);
        if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
            a->has_verdict = 1;
            snprintf(a->verdict, sizeof a->verdict, "%s", lab_col_text(s, 15));
            a->threshold = lab_rp_col_num(s, 16);
            snprintf(a->direction, sizeof a->direction, "%s", lab_col_text(s, 17));
            snprintf(a->metric, sizeof a->metric, "%s", lab_col_text(s, 18));
        }
    }
    sqlite3_finalize(s);

    if ((rc = lab_rp_prep(st,
                   "SELECT name, value FROM metrics WHERE run_id = ?1"
                   " AND name IN ('tokens_per_s', 'perplexity', 'flops_frac_of_peak')",
                   &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *m = lab_col_text(s, 0);
        if (!strcmp(m, "tokens_per_s")) a->tps = lab_rp_col_num(s, 1);
        else if (!strcmp(m, "perplexity")) a->ppl = lab_rp_col_num(s, 1);
        else a->peak_frac = lab_rp_col_num(s, 1);
    }
    sqlite3_finalize(s);

    /* Resolved knobs that differ from their declared default: what really ran. */
    if ((rc = lab_rp_prep(st, "SELECT name, value FROM run_knobs WHERE run_id = ?1 ORDER BY name", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    lab_buf b = {0};
    while (sqlite3_step(s) == SQLITE_ROW) {
        const vt_knob_info *ki = vt_knob_find(lab_col_text(s, 0));
        if (ki && ki->def && !strcmp(ki->def, lab_col_text(s, 1))) continue;
        lab_buf_printf(&b, "%s%s=%s", b.len ? ", " : "", lab_col_text(s, 0), lab_col_text(s, 1));
    }
    sqlite3_finalize(s);
    if (!b.data) lab_buf_append(&b, "", 0);
    a->resolved_knobs = b.data;
    return LAB_OK;
}

static int load_experiment(lab_store *st, const char *id, exp_view *e, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    int rc = load_spec(st, e, err, errlen);
    if (rc) return rc;
    /* Arms that ran but are not in the latest spec are shown after it. */
    sqlite3_stmt *s;
    if ((rc = lab_rp_prep(st, "SELECT arm, max(is_reference) FROM runs WHERE experiment = ?1 GROUP BY arm ORDER BY min(id)", &s,
                   err, errlen))) return rc;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(s) == SQLITE_ROW) {
        arm_view *a = add_arm(e, lab_col_text(s, 0));
        if (!a) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        if (!e->reference[0] && sqlite3_column_int(s, 1)) snprintf(e->reference, sizeof e->reference, "%s", a->name);
    }
    sqlite3_finalize(s);
    for (int i = 0; i < e->n_arms; i++) {
        if ((rc = load_arm_run(st, e, &e->arms[i], err, errlen))) return rc;
        if (!strcmp(e->arms[i].name, e->reference)) e->arms[i].is_reference = 1;
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ page sections */

static void h(page *pg, const char *s) { lab_esc_html(&pg->html, s); }

/* Columns first..last of the current row as escaped cells joined by
 * "</td><td>"; the caller opens the first cell and closes the last. */
static void h_cols(page *pg, sqlite3_stmt *s, int first, int last) {
    for (int i = first; i <= last; i++) {
        if (i > first) lab_buf_printf(&pg->html, "</td><td>");
        h(pg, lab_col_text(s, i));
    }
}

static const char *verdict_class(const char *v) {
    if (!strcmp(v, "SUPPORTED")) return "good";
    if (!strcmp(v, "REFUTED")) return "bad";
    return "warn";
}

static void section_arms(page *pg, const exp_view *e) {
    lab_buf *o = &pg->html;
    char v1[32], v2[32], v3[32];
    lab_buf_printf(o, "<table><tr><th>arm</th><th>knobs (spec)</th><th>knobs (resolved, non-default)</th>"
                      "<th>expects</th><th>run</th><th>assertions</th><th>top-1 k/n [Wilson 95%%]</th><th>verdict</th>"
                      "<th>KL mean / p99 / max</th><th>max |&Delta;logit|</th><th>first divergence</th>"
                      "<th>tokens/s</th></tr>\n");
    lab_buf_printf(&pg->md, "| arm | knobs | run | assertions | top-1 k/n [95%% CI] | verdict | KL mean | tokens/s |\n"
                            "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        lab_buf_printf(o, "<tr><td><b>");
        h(pg, a->name);
        lab_buf_printf(o, "</b>%s", a->is_reference ? " <span class=\"tag\">reference</span>" : "");
        if (a->description) { lab_buf_printf(o, "<br><small>"); h(pg, a->description); lab_buf_printf(o, "</small>"); }
        lab_buf_printf(o, "</td><td><code>");
        h(pg, a->spec_knobs ? a->spec_knobs : "");
        lab_buf_printf(o, "</code></td><td><code>");
        h(pg, a->resolved_knobs ? a->resolved_knobs : "");
        lab_buf_printf(o, "</code></td><td><code>");
        h(pg, a->spec_expect ? a->spec_expect : "");
        lab_buf_printf(o, "</code>%s</td>", a->expect_fail ? "<br><span class=\"tag\">assertions expected to FAIL (replay)</span>" : "");
        if (!a->run_id) {
            lab_buf_printf(o, "<td colspan=\"8\">never run</td></tr>\n");
            lab_buf_printf(&pg->md, "| ");
            lab_esc_md(&pg->md, a->name);
            lab_buf_printf(&pg->md, " | | never run | | | | | |\n");
            continue;
        }
        lab_buf_printf(o, "<td>%lld<br><small>", (long long)a->run_id);
        h(pg, a->status);
        lab_buf_printf(o, " ");
        h(pg, a->backend);
        lab_buf_printf(o, "<br>");
        h(pg, a->started);
        lab_buf_printf(o, "</small></td>");
        if (a->error) { lab_buf_printf(o, "<td class=\"bad\">"); h(pg, a->error); lab_buf_printf(o, "</td>"); }
        else if (a->assertions_ok < 0) lab_buf_printf(o, "<td>–</td>");
        else {
            int as_declared = a->assertions_ok != a->expect_fail;
            lab_buf_printf(o, "<td class=\"%s\">%s%s", as_declared ? "good" : "bad", a->assertions_ok ? "pass" : "FAIL",
                           as_declared ? (a->expect_fail ? " (as expected)" : "") : " (not as declared)");
            if (a->assertion_reason) {
                lab_buf_printf(o, "<br><small>");
                h(pg, a->assertion_reason);
                lab_buf_printf(o, "</small>");
            }
            lab_buf_printf(o, "</td>");
        }
        if (a->has_cmp) {
            fmt_g(v1, sizeof v1, a->kl_mean);
            fmt_g(v2, sizeof v2, a->kl_p99);
            fmt_g(v3, sizeof v3, a->kl_max);
            lab_buf_printf(o, "<td>%lld/%lld = %.3f<br>[%.3f, %.3f]<br><small>McNemar p %.3g</small></td>", (long long)a->k,
                           (long long)a->n, a->n ? (double)a->k / (double)a->n : 0.0, a->lo, a->hi, a->mc_p);
            if (a->has_verdict) {
                lab_buf_printf(o, "<td class=\"%s\"><b>", verdict_class(a->verdict));
                h(pg, a->verdict);
                lab_buf_printf(o, "</b><br><small>");
                h(pg, a->metric);
                lab_buf_printf(o, " ");
                h(pg, a->direction);
                lab_buf_printf(o, " %.3g; interval [%.3f, %.3f]</small></td>", a->threshold, a->lo, a->hi);
            } else lab_buf_printf(o, "<td>– <small>(no decision rule)</small></td>");
            lab_buf_printf(o, "<td>%s / %s / %s</td>", v1, v2, v3);
            fmt_g(v1, sizeof v1, a->max_dl);
            lab_buf_printf(o, "<td>%s</td>", v1);
            if (a->first_layer >= 0)
                lab_buf_printf(o, "<td>layer %lld after %s<br><small>rel L2 %.3g &gt; %.3g</small></td>",
                               (long long)a->first_layer, a->first_site ? "FFN" : "attention", a->first_value, a->div_tol);
            else if (!isnan(a->div_tol)) lab_buf_printf(o, "<td>none above %.3g</td>", a->div_tol);
            else lab_buf_printf(o, "<td>–</td>");
        } else {
            lab_buf_printf(o, "<td colspan=\"5\">%s</td>", a->is_reference ? "(the reference)" : "no comparison recorded");
        }
        fmt_g(v1, sizeof v1, a->tps);
        /* benchmark runs (vtlab record-bench) also carry the fraction of the peak they reached */
        if (!isnan(a->peak_frac)) snprintf(v2, sizeof v2, " (%.1f%% of peak FLOP/s)", 100 * a->peak_frac);
        else v2[0] = 0;
        lab_buf_printf(o, "<td>%s%s</td></tr>\n", v1, v2);

        lab_buf_printf(&pg->md, "| ");
        lab_esc_md(&pg->md, a->name);
        lab_buf_printf(&pg->md, "%s | ", a->is_reference ? " (reference)" : "");
        lab_esc_md(&pg->md, a->resolved_knobs ? a->resolved_knobs : "");
        lab_buf_printf(&pg->md, " | %lld ", (long long)a->run_id);
        lab_esc_md(&pg->md, a->status);
        lab_buf_printf(&pg->md, " | %s | ", a->assertions_ok < 0 ? "-" : a->assertions_ok ? "pass" : "FAIL");
        if (a->has_cmp) {
            fmt_g(v1, sizeof v1, a->kl_mean);
            lab_buf_printf(&pg->md, "%lld/%lld [%.3f, %.3f] | ", (long long)a->k, (long long)a->n, a->lo, a->hi);
            lab_esc_md(&pg->md, a->has_verdict ? a->verdict : "-");
            lab_buf_printf(&pg->md, " | %s | ", v1);
        } else lab_buf_printf(&pg->md, "- | - | - | ");
        fmt_g(v1, sizeof v1, a->tps);
        lab_buf_printf(&pg->md, "%s%s |\n", v1, v2);
    }
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(&pg->md, "\n");
}

/* Confound flags on the runs shown, and a count of the others of the experiment. */
static void section_flags(page *pg, const exp_view *e) {
    if (!lab_rp_has_table(pg->st, "audit_flags")) return;
    lab_buf *o = &pg->html;
    lab_buf ids = {0};
    for (int i = 0; i < e->n_arms; i++)
        if (e->arms[i].run_id) lab_buf_printf(&ids, "%s%lld", ids.len ? "," : "", (long long)e->arms[i].run_id);
    sqlite3_stmt *s;
    if (lab_rp_prep(pg->st,
             "SELECT f.subject, r.arm, f.rule, f.reason, f.expected, f.first_seen, f.resolved_at, f.resolved_by, f.evidence,"
             " (',' || ?2 || ',') LIKE ('%,' || f.subject || ',%')"
             " FROM audit_flags f JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
             " WHERE r.experiment = ?1 ORDER BY f.resolved_at IS NOT NULL, f.expected, r.id DESC, f.rule",
             &s, pg->err, sizeof pg->err)) { lab_buf_free(&ids); return; }
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, ids.data ? ids.data : "", -1, SQLITE_TRANSIENT);
    int shown = 0, older_open = 0, resolved = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int open = sqlite3_column_type(s, 6) == SQLITE_NULL, latest = sqlite3_column_int(s, 9);
        if (!open) { resolved++; continue; }
        if (!latest) { older_open++; continue; }
        if (!shown++)
            lab_buf_printf(o, "<h4>Confound flags (from <code>vtlab audit</code>)</h4>\n<table><tr><th>run</th><th>arm</th>"
                              "<th>rule</th><th>reason</th><th>first seen</th></tr>\n");
        int expected = sqlite3_column_int(s, 4);
        lab_buf_printf(o, "<tr class=\"%s\"><td>", expected ? "muted" : "bad");
        h_cols(pg, s, 0, 3);
        if (expected) lab_buf_printf(o, " <span class=\"tag\">expected: the arm replays the defect</span>");
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 5));
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- %s flag %s on run ", expected ? "expected" : "**confound**", lab_col_text(s, 2));
        lab_esc_md(&pg->md, lab_col_text(s, 0));
        lab_buf_printf(&pg->md, " (");
        lab_esc_md(&pg->md, lab_col_text(s, 1));
        lab_buf_printf(&pg->md, "): ");
        lab_esc_md(&pg->md, lab_col_text(s, 3));
        lab_buf_printf(&pg->md, "\n");
    }
    sqlite3_finalize(s);
    lab_buf_free(&ids);
    if (shown) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>No open confound flags on these runs%s.</p>\n",
                        older_open || resolved ? "" : " (run <code>vtlab audit</code> to check)");
    if (older_open || resolved)
        lab_buf_printf(o, "<p><small>%d open flag(s) on older runs of this experiment, %d resolved.</small></p>\n",
                       older_open, resolved);
    if (shown) lab_buf_printf(&pg->md, "\n");
}

/* The probe table is written into its own buffer and shown collapsed
 * (<details>) when every record and expectation is healthy, open when not. */
static void section_probes_table(page *pg, const exp_view *e, int64_t *n_rows, int64_t *n_bad);
static void section_probes(page *pg, const exp_view *e) {
    lab_buf saved = pg->html;
    memset(&pg->html, 0, sizeof pg->html);
    int64_t rows = 0, bad = 0;
    section_probes_table(pg, e, &rows, &bad);
    lab_buf table = pg->html;
    pg->html = saved;
    lab_buf_printf(&pg->html, "<details%s><summary><b>Runtime dtype probes</b>: %lld row(s), %s</summary>\n",
                   bad ? " open" : "", (long long)rows, bad ? "<span class=\"bad\">some failed</span>" : "all healthy");
    if (table.oom) pg->html.oom = 1;
    else lab_buf_append(&pg->html, table.data ? table.data : "", table.len);
    lab_buf_printf(&pg->html, "</details>\n");
    lab_buf_free(&table);
}

static void section_probes_table(page *pg, const exp_view *e, int64_t *n_rows, int64_t *n_bad) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<table><tr><th>arm</th><th>site</th><th>dtypes seen (src&rarr;dst)</th>"
                      "<th>layers</th><th>bytes/row copied (src/dst row)</th><th>violations</th><th>rows unwritten</th>"
                      "<th>first violation</th></tr>\n");
    int any = 0;
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->run_id) continue;
        sqlite3_stmt *s;
        if (lab_rp_prep(pg->st,
                 "SELECT site, group_concat(DISTINCT CASE WHEN src_dtype = '' THEN dtype ELSE src_dtype || '>' || dtype END),"
                 " count(DISTINCT layer), min(layer), max(layer), min(bytes_per_row), max(bytes_per_row), max(src_row_bytes),"
                 " max(dst_row_bytes), sum(violations), sum(max(rows_unwritten, 0)), max(rows_unwritten),"
                 " (SELECT detail FROM probes p2 WHERE p2.run_id = p.run_id AND p2.site = p.site AND p2.ok = 0"
                 "  ORDER BY idx LIMIT 1)"
                 " FROM probes p WHERE run_id = ?1 GROUP BY site ORDER BY min(idx)", &s, pg->err, sizeof pg->err))
            continue;
        sqlite3_bind_int64(s, 1, a->run_id);
        int first = 1;
        while (sqlite3_step(s) == SQLITE_ROW) {
            any = 1;
            int64_t viol = sqlite3_column_int64(s, 9), unw = sqlite3_column_int64(s, 10);
            int audited = sqlite3_column_int64(s, 11) >= 0;
            (*n_rows)++;
            *n_bad += viol || unw;
            lab_buf_printf(o, "<tr class=\"%s\"><td>", viol || unw ? "bad" : "");
            if (first) h(pg, a->name);
            first = 0;
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 0));
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 1));
            int64_t lmin = sqlite3_column_int64(s, 3), lmax = sqlite3_column_int64(s, 4);
            if (lmin < 0) lab_buf_printf(o, "</td><td>model");
            else lab_buf_printf(o, "</td><td>%lld (%lld..%lld)", sqlite3_column_int64(s, 2), (long long)lmin, (long long)lmax);
            int64_t b0 = sqlite3_column_int64(s, 5), b1 = sqlite3_column_int64(s, 6);
            if (b0 == b1) lab_buf_printf(o, "</td><td>%lld", (long long)b0);
            else lab_buf_printf(o, "</td><td>%lld..%lld", (long long)b0, (long long)b1);
            lab_buf_printf(o, " (%lld/%lld)</td><td>%lld</td><td>%s", sqlite3_column_int64(s, 7), sqlite3_column_int64(s, 8),
                           (long long)viol, audited ? "" : "not audited");
            if (audited) lab_buf_printf(o, "%lld", (long long)unw);
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 12));
            lab_buf_printf(o, "</td></tr>\n");
        }
        sqlite3_finalize(s);
        /* Expectations: the arm's declared dtypes, as checked. */
        if (!lab_rp_prep(pg->st, "SELECT site, expected_dtype, seen_dtypes, ok, reason FROM expectations WHERE run_id = ?1", &s,
                  pg->err, sizeof pg->err)) {
            sqlite3_bind_int64(s, 1, a->run_id);
            while (sqlite3_step(s) == SQLITE_ROW) {
                any = 1;
                (*n_rows)++;
                *n_bad += !sqlite3_column_int(s, 3);
                lab_buf_printf(o, "<tr class=\"%s\"><td>", sqlite3_column_int(s, 3) ? "" : "bad");
                if (first) h(pg, a->name);
                first = 0;
                lab_buf_printf(o, "</td><td>expect ");
                h(pg, lab_col_text(s, 0));
                lab_buf_printf(o, "</td><td>expected ");
                h(pg, lab_col_text(s, 1));
                lab_buf_printf(o, ", saw ");
                h(pg, lab_col_text(s, 2));
                lab_buf_printf(o, "</td><td colspan=\"4\">%s ", sqlite3_column_int(s, 3) ? "ok" : "FAIL");
                h(pg, lab_col_text(s, 4));
                lab_buf_printf(o, "</td></tr>\n");
            }
            sqlite3_finalize(s);
        }
    }
    lab_buf_printf(o, "</table>\n");
    if (!any) lab_buf_printf(o, "<p>No probe records (the runs had <code>VT_PROBE=off</code>).</p>\n");
}

static void section_claims(page *pg) {
    if (!lab_rp_has_table(pg->st, "audit_flags")) return;
    sqlite3_stmt *s;
    if (lab_rp_prep(pg->st,
             "SELECT subject, rule, reason, first_seen, resolved_at, resolved_by, expected FROM audit_flags"
             " WHERE subject_kind = 'claim' ORDER BY resolved_at IS NOT NULL, subject, rule", &s, pg->err, sizeof pg->err))
        return;
    lab_buf *o = &pg->html;
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++) {
            lab_buf_printf(o, "<h2 id=\"ledger\">Ledger: confounded claims</h2>\n<table><tr><th>claim</th><th>rule</th>"
                              "<th>reason</th><th>first seen</th><th>status</th></tr>\n");
            lab_buf_printf(&pg->md, "## Ledger: confounded claims\n\n");
        }
        int open = sqlite3_column_type(s, 4) == SQLITE_NULL;
        lab_buf_printf(o, "<tr class=\"%s\"><td>", open ? "bad" : "muted");
        h_cols(pg, s, 0, 3);
        lab_buf_printf(o, "</td><td>");
        if (open) lab_buf_printf(o, "open");
        else {
            lab_buf_printf(o, "resolved ");
            h(pg, lab_col_text(s, 4));
            lab_buf_printf(o, ": ");
            h(pg, lab_col_text(s, 5));
        }
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- claim ");
        lab_esc_md(&pg->md, lab_col_text(s, 0));
        lab_buf_printf(&pg->md, " %s (%s): ", lab_col_text(s, 1), open ? "open" : "resolved");
        lab_esc_md(&pg->md, lab_col_text(s, 2));
        lab_buf_printf(&pg->md, "\n");
    }
    sqlite3_finalize(s);
    if (n) {
        lab_buf_printf(o, "</table>\n");
        lab_buf_printf(&pg->md, "\n");
    }
}

static void section_nightlies(page *pg) {
    if (!lab_rp_has_table(pg->st, "nightlies")) return;
    sqlite3_stmt *s;
    if (lab_rp_prep(pg->st, "SELECT id, started_at, git_commit, status, n_runs, n_regressions, audit, host FROM nightlies"
                     " ORDER BY id DESC LIMIT 30", &s, pg->err, sizeof pg->err)) return;
    lab_buf *o = &pg->html;
    int n = 0;
    int64_t latest = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++) {
            latest = sqlite3_column_int64(s, 0);
            lab_buf_printf(o, "<h2 id=\"nightly\">Nightly runs</h2>\n<table><tr><th>nightly</th><th>started (UTC)</th>"
                              "<th>commit</th><th>host</th><th>status</th><th>runs</th><th>regressions</th><th>audit</th></tr>\n");
            lab_buf_printf(&pg->md, "## Nightly runs\n\n| nightly | started | commit | status | runs | regressions |\n"
                                    "|---|---|---|---|---|---|\n");
        }
        const char *stt = lab_col_text(s, 3);
        lab_buf_printf(o, "<tr><td>%lld</td><td>", sqlite3_column_int64(s, 0));
        h(pg, lab_col_text(s, 1));
        lab_buf_printf(o, "</td><td><code>");
        h(pg, lab_col_text(s, 2));
        lab_buf_printf(o, "</code></td><td>");
        h(pg, lab_col_text(s, 7));
        lab_buf_printf(o, "</td><td class=\"%s\">", !strcmp(stt, "PASSED") ? "good" : "bad");
        h(pg, stt);
        lab_buf_printf(o, "</td><td>%lld</td><td>%lld</td><td><small>", sqlite3_column_int64(s, 4),
                       sqlite3_column_int64(s, 5));
        h(pg, lab_col_text(s, 6));
        lab_buf_printf(o, "</small></td></tr>\n");
        lab_buf_printf(&pg->md, "| %lld | ", sqlite3_column_int64(s, 0));
        lab_esc_md(&pg->md, lab_col_text(s, 1));
        lab_buf_printf(&pg->md, " | ");
        lab_esc_md(&pg->md, lab_col_text(s, 2));
        lab_buf_printf(&pg->md, " | ");
        lab_esc_md(&pg->md, stt);
        lab_buf_printf(&pg->md, " | %lld | %lld |\n", sqlite3_column_int64(s, 4), sqlite3_column_int64(s, 5));
    }
    sqlite3_finalize(s);
    if (!n) return;
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(&pg->md, "\n");
    if (lab_rp_prep(pg->st, "SELECT experiment, arm, kind, regression, message FROM nightly_findings WHERE nightly_id = ?1"
                     " ORDER BY regression DESC, experiment, arm, kind", &s, pg->err, sizeof pg->err)) return;
    sqlite3_bind_int64(s, 1, latest);
    n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++)
            lab_buf_printf(o, "<h3>Findings of nightly %lld (against the previous nightly)</h3>\n<table><tr><th>experiment</th>"
                              "<th>arm</th><th>kind</th><th></th><th>finding</th></tr>\n", (long long)latest);
        int reg = sqlite3_column_int(s, 3);
        lab_buf_printf(o, "<tr class=\"%s\"><td>", reg ? "bad" : "");
        h_cols(pg, s, 0, 2);
        lab_buf_printf(o, "</td><td>%s</td><td>", reg ? "<b>REGRESSION</b>" : "note");
        h(pg, lab_col_text(s, 4));
        lab_buf_printf(o, "</td></tr>\n");
    }
    sqlite3_finalize(s);
    if (n) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>Nightly %lld found nothing to note against the previous nightly.</p>\n", (long long)latest);
}

/* A cell's text, cut at max characters (UTF-8 safe) with an ellipsis. */
static void h_cut(page *pg, const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) { h(pg, s); return; }
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) max--;   /* not inside a character */
    char *c = strndup(s, max);
    h(pg, c ? c : "");
    free(c);
    lab_buf_printf(&pg->html, "&hellip;");
}

/* What matters first: the open confounds, each experiment's verdicts, the
 * latest nightly; the details follow. Returns an error only for a failed
 * read (a page that says "no confounds" because a query failed would lie). */
static int section_summary(page *pg, char **ids, int nid, char *err, size_t errlen) {
    lab_buf *o = &pg->html;
    sqlite3_stmt *s;
    int rc, step, n = 0;
    lab_buf_printf(o, "<h2 id=\"summary\">Summary</h2>\n");
    if (lab_rp_has_table(pg->st, "audit_flags")) {
        if ((rc = lab_rp_prep(pg->st, "SELECT f.subject_kind, f.subject, f.rule, f.reason, coalesce(r.experiment, ''),"
                              " coalesce(r.arm, '') FROM audit_flags f LEFT JOIN runs r ON f.subject_kind = 'run'"
                              " AND r.id = CAST(f.subject AS INTEGER) WHERE f.resolved_at IS NULL AND f.expected = 0"
                              " ORDER BY f.id", &s, err, errlen))) return rc;
        while ((step = sqlite3_step(s)) == SQLITE_ROW) {
            if (!n++) lab_buf_printf(o, "<table class=\"bad\"><tr><th>open confound</th><th>rule</th><th>reason</th></tr>\n");
            lab_buf_printf(o, "<tr><td>%s ", lab_col_text(s, 0));
            h(pg, lab_col_text(s, 1));
            if (*lab_col_text(s, 4)) { lab_buf_printf(o, " ("); h(pg, lab_col_text(s, 4)); lab_buf_printf(o, "/"); h(pg, lab_col_text(s, 5)); lab_buf_printf(o, ")"); }
            lab_buf_printf(o, "</td><td>%s</td><td>", lab_col_text(s, 2));
            h_cut(pg, lab_col_text(s, 3), 240);
            lab_buf_printf(o, "</td></tr>\n");
        }
        sqlite3_finalize(s);
        if (step != SQLITE_DONE) return lab_store_error(pg->st, "report: open confounds", err, errlen);
        if (n) lab_buf_printf(o, "</table>\n");
        lab_buf_printf(o, "<p><b>%d open confound(s)</b>%s (rules R1&ndash;R6: docs/specs.md; details under each "
                          "experiment and in <a href=\"#ledger\">the ledger</a>).</p>\n", n, n ? "" : ": none");
        lab_buf_printf(&pg->md, "**%d open confound(s)**\n\n", n);
    } else {
        lab_buf_printf(o, "<p>No audit has run on this database (<code>vtlab audit</code>).</p>\n");
    }
    /* each experiment's arms: the latest verdict */
    if ((rc = lab_rp_prep(pg->st, "SELECT r.experiment, r.arm, v.verdict, v.k, v.n, v.lo, v.hi, r.assertions_ok,"
                          " r.expected_assertions FROM runs r JOIN verdicts v ON v.run_id = r.id WHERE r.status = 'FINISHED'"
                          " AND r.id = (SELECT max(r2.id) FROM runs r2 JOIN verdicts v2 ON v2.run_id = r2.id"
                          " WHERE r2.experiment = r.experiment AND r2.arm = r.arm AND r2.status = 'FINISHED')"
                          " ORDER BY r.experiment, r.id", &s, err, errlen))) return rc;
    n = 0;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        const char *eid = lab_col_text(s, 0), *v = lab_col_text(s, 2);
        int k = 0;
        for (int i = 0; i < nid; i++) if (!strcmp(ids[i], eid)) k = i;
        if (!n++) lab_buf_printf(o, "<table><tr><th>experiment</th><th>arm</th><th>verdict</th><th>top-1 k/n [95%% CI]</th>"
                                    "<th>assertions</th></tr>\n");
        lab_buf_printf(o, "<tr><td><a href=\"#exp-%d\">", k);
        h(pg, eid);
        lab_buf_printf(o, "</a></td><td>");
        h(pg, lab_col_text(s, 1));
        int expect_fail = !strcmp(lab_col_text(s, 8), "fail"), aok = sqlite3_column_int(s, 7);
        lab_buf_printf(o, "</td><td class=\"%s\">%s</td><td>%lld/%lld [%.3f, %.3f]</td><td>%s%s</td></tr>\n",
                       !strcmp(v, "SUPPORTED") ? "good" : !strcmp(v, "REFUTED") ? "bad" : "warn", v,
                       sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4), sqlite3_column_double(s, 5),
                       sqlite3_column_double(s, 6), aok ? "ok" : "FAIL", expect_fail ? " (a replay: expected to fail)" : "");
        lab_buf_printf(&pg->md, "- ");
        lab_esc_md(&pg->md, eid);
        lab_buf_printf(&pg->md, "/");
        lab_esc_md(&pg->md, lab_col_text(s, 1));
        lab_buf_printf(&pg->md, ": %s %lld/%lld\n", v, sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4));
    }
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) return lab_store_error(pg->st, "report: verdicts", err, errlen);
    if (n) { lab_buf_printf(o, "</table>\n"); lab_buf_printf(&pg->md, "\n"); }
    if (lab_rp_has_table(pg->st, "nightlies")) {
        if ((rc = lab_rp_prep(pg->st, "SELECT id, status, n_regressions, started_at FROM nightlies ORDER BY id DESC LIMIT 1",
                              &s, err, errlen))) return rc;
        if ((step = sqlite3_step(s)) == SQLITE_ROW)
            lab_buf_printf(o, "<p>Latest <a href=\"#nightly\">nightly</a>: #%lld <b class=\"%s\">%s</b>, %lld regression(s), "
                              "started %s.</p>\n", sqlite3_column_int64(s, 0),
                           strcmp(lab_col_text(s, 1), "PASSED") ? "bad" : "good", lab_col_text(s, 1),
                           sqlite3_column_int64(s, 2), lab_col_text(s, 3));
        sqlite3_finalize(s);
        if (step != SQLITE_ROW && step != SQLITE_DONE) return lab_store_error(pg->st, "report: nightlies", err, errlen);
    }
    return LAB_OK;
}

static const char *const CSS =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222;"
    "padding:0 1em}h1{margin-bottom:0}h2{border-bottom:2px solid #ddd;margin-top:2em}table{border-collapse:collapse;"
    "margin:0.6em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:4px 7px;vertical-align:top;text-align:left}"
    "th{background:#f3f3f3}.good{background:#e6f4ea}.bad{background:#fdecea}.warn{background:#fff6db}"
    ".muted{color:#777}.tag{font-size:0.8em;background:#eef;border-radius:3px;padding:0 4px}code{font-size:0.9em}"
    "figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:0.85em;"
    "color:#555;max-width:1000px}nav a{margin-right:1em}.meta{color:#666;font-size:0.9em}";

int lab_report_write(lab_store *st, const lab_report_opts *o, lab_report_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    page pg;
    memset(&pg, 0, sizeof pg);
    pg.st = st;
    pg.o = o;
    pg.res = res;
    const char *out = o->out_dir ? o->out_dir : "report";
    int rc = lab_mkdirs(out, err, errlen);
    if (rc) return rc;
    snprintf(pg.plot_dir, sizeof pg.plot_dir, "%s/plots", out);
    pg.plots_on = o->plots;
    if (pg.plots_on && !lab_plot_available(res->plots_skipped, sizeof res->plots_skipped)) pg.plots_on = 0;
    if (!o->plots && !res->plots_skipped[0]) snprintf(res->plots_skipped, sizeof res->plots_skipped, "charts turned off");
    if (pg.plots_on && (rc = lab_mkdirs(pg.plot_dir, err, errlen))) return rc;

    char now[32];
    lab_now_iso(now);
    /* The experiments, by name. */
    sqlite3_stmt *s;
    if ((rc = lab_rp_prep(st, "SELECT DISTINCT experiment FROM runs ORDER BY experiment", &s, err, errlen))) return rc;
    char **ids = NULL;
    int nid = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        char **q = realloc(ids, (size_t)(nid + 1) * sizeof *q);
        if (!q) break;
        ids = q;
        ids[nid++] = lab_strdup(lab_col_text(s, 0));
    }
    sqlite3_finalize(s);

    lab_buf *ht = &pg.html;
    lab_buf_printf(ht, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>vtlab report</title>\n"
                       "<style>%s</style></head><body>\n<h1>vtlab report</h1>\n<p class=\"meta\">database <code>", CSS);
    h(&pg, o->db_label ? o->db_label : "results.db");
    lab_buf_printf(ht, "</code> &middot; generated %s by <code>", now);
    h(&pg, vt_build_info());
    lab_buf_printf(ht, "</code> &middot; %d experiment(s)</p>\n<nav>", nid);
    lab_buf_printf(&pg.md, "# vtlab report\n\nDatabase `");
    lab_esc_md_code(&pg.md, o->db_label ? o->db_label : "results.db");
    lab_buf_printf(&pg.md, "`, generated %s. Full page: index.html.\n\n", now);
    for (int i = 0; i < nid; i++) {
        lab_buf_printf(ht, "<a href=\"#exp-%d\">", i);
        h(&pg, ids[i]);
        lab_buf_printf(ht, "</a>");
    }
    lab_buf_printf(ht, "<a href=\"#summary\">summary</a><a href=\"#ledger\">ledger</a><a href=\"#nightly\">nightly</a></nav>\n");
    if ((rc = section_summary(&pg, ids, nid, err, errlen))) {
        for (int i = 0; i < nid; i++) free(ids[i]);
        free(ids);
        lab_buf_free(&pg.html);
        lab_buf_free(&pg.md);
        return rc;
    }
    if (!pg.plots_on) {
        lab_buf_printf(ht, "<p class=\"warn\">No charts: ");
        h(&pg, res->plots_skipped);
        lab_buf_printf(ht, ".</p>\n");
    }
    if (!nid) lab_buf_printf(ht, "<p>No runs in this database yet (<code>vtlab run EXPERIMENT.json</code>).</p>\n");

    for (int i = 0; i < nid && !rc; i++) {
        exp_view e;
        if ((rc = load_experiment(st, ids[i], &e, err, errlen))) { exp_view_free(&e); break; }
        res->n_experiments++;
        char part[48], stem[96], stem2[96];
        lab_file_part(e.id, part, sizeof part);
        lab_buf_printf(ht, "<h2 id=\"exp-%d\">", i);
        h(&pg, e.id);
        lab_buf_printf(ht, "</h2>\n<p class=\"meta\">spec <code>");
        h(&pg, e.file ? e.file : "(not stored)");
        lab_buf_printf(ht, "</code> (sha256 %.12s) &middot; reference arm <b>", e.spec_sha);
        h(&pg, e.reference);
        lab_buf_printf(ht, "</b>");
        if (e.has_decision) lab_buf_printf(ht, " &middot; decision: top-1 agreement %s %.3g on the Wilson 95%% interval",
                                           e.decision_ge ? "&ge;" : "&le;", e.threshold);
        lab_buf_printf(ht, "</p>\n");
        lab_buf_printf(&pg.md, "## ");
        lab_esc_md(&pg.md, e.id);
        lab_buf_printf(&pg.md, "\n\n");
        if (e.description) {
            lab_buf_printf(ht, "<p>");
            h(&pg, e.description);
            lab_buf_printf(ht, "</p>\n");
            lab_esc_md(&pg.md, e.description);
            lab_buf_printf(&pg.md, "\n\n");
        }
        if (e.hypothesis) {
            lab_buf_printf(ht, "<p><b>Hypothesis:</b> ");
            h(&pg, e.hypothesis);
            lab_buf_printf(ht, "</p>\n");
            lab_buf_printf(&pg.md, "Hypothesis: ");
            lab_esc_md(&pg.md, e.hypothesis);
            lab_buf_printf(&pg.md, "\n\n");
        }
        section_arms(&pg, &e);
        section_flags(&pg, &e);
        section_probes(&pg, &e);
        lab_buf_printf(ht, "<h4>Charts</h4>\n");
        snprintf(stem, sizeof stem, "e%d-%s-top1", i, part);
        lab_rp_chart_top1(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-divergence", i, part);
        lab_rp_chart_divergence(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-kl-cdf", i, part);
        lab_rp_chart_kl_cdf(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-history", i, part);
        snprintf(stem2, sizeof stem2, "e%d-%s-throughput", i, part);
        lab_rp_chart_history(&pg, &e, stem, stem2);
        exp_view_free(&e);
    }
    for (int i = 0; i < nid; i++) free(ids[i]);
    free(ids);
    if (rc) { lab_buf_free(&pg.html); lab_buf_free(&pg.md); return rc; }
    section_claims(&pg);
    section_nightlies(&pg);
    lab_buf_printf(ht, "<hr><p class=\"meta\">Every number here is a row of the database; <code>vtlab show RUN</code> "
                       "prints everything recorded about a run. Schema: docs/schema.md.</p>\n</body></html>\n");
    if (pg.html.oom || pg.md.oom) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    char path[4200];
    if (!rc) {
        snprintf(path, sizeof path, "%s/summary.md", out);
        rc = vt_cli_write_file_atomic(path, pg.md.data, pg.md.len, err, errlen);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/index.html", out);
        rc = vt_cli_write_file_atomic(path, pg.html.data, pg.html.len, err, errlen);
    }
    lab_buf_free(&pg.html);
    lab_buf_free(&pg.md);
    return rc;
}

/* ------------------------------------------------------------ the command */

int lab_report_main(int argc, char **argv) {
    const char *db = "results.db", *out = "report";
    int plots = 1;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--db") || !strcmp(argv[i], "--out"))) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "vtlab report: %s needs a value (see `vtlab --help`)\n", argv[i]);
                return 2;
            }
            if (!strcmp(argv[i], "--db")) db = argv[++i];
            else out = argv[++i];
        } else if (!strcmp(argv[i], "--no-plots")) plots = 0;
        else {
            fprintf(stderr, "vtlab report: unexpected argument %s (see `vtlab --help`)\n", argv[i]);
            return 2;
        }
    }
    if (!lab_path_exists(db)) {
        fprintf(stderr, "vtlab report: %s: no such database (run an experiment first, or pass --db PATH)\n", db);
        return 2;
    }
    lab_store *st = NULL;
    char err[2048] = "";
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab report: %s\n", err);
        return lab_exit_code(rc);
    }
    lab_report_opts o = {out, db, plots};
    lab_report_result res;
    rc = lab_report_write(st, &o, &res, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab report: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("report: %s/index.html and %s/summary.md: %lld experiment(s), %lld chart(s) (PNG + SVG) in %s/plots",
           out, out, (long long)res.n_experiments, (long long)res.n_plots, out);
    if (res.plots_skipped[0]) printf("; no charts: %s", res.plots_skipped);
    printf("\n");
    if (res.plot_failures) {
        fprintf(stderr, "vtlab report: %lld chart(s) could not be drawn (see above)\n", (long long)res.plot_failures);
        return 1;
    }
    return 0;
}
