/*
 * report.c — `vtlab report` (see report.h for what it writes).
 *
 * The page is built in memory, then written with .tmp + rename, so a reader
 * never sees half a page. Its data come from the view model that the store
 * reads (store_report.h: the page-wide view first, then one experiment at a
 * time); this file holds no SQL. A read that fails fails the report; a table
 * an older schema lacks leaves its section out. The charts are in
 * report_charts.c; what the two files share (the page being written) is
 * report_page.h.
 *
 * Which runs the page shows: for each experiment and arm, the latest
 * FINISHED run of repeat 0 (the latest of any status when none finished), so
 * after a nightly the page shows that night. Older runs stay in the database
 * and appear in the nightly history charts.
 */
#include "report.h"
#include "report_page.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "confound_key.h"
#include "model/vt.h"
#include "plot.h"
#include "store_annot.h"

static void fmt_g(char *out, size_t n, double v) {
    if (isnan(v)) snprintf(out, n, "–");
    else snprintf(out, n, "%.3g", v);
}

/* ------------------------------------------------------------ the model of the page */
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

/* The description, hypothesis, reference, decision rule and arms (in spec
 * order) of the experiment from its spec j. */
static int exp_from_spec(exp_view *e, const cJSON *j, char *err, size_t errlen) {
    e->description = json_str(j, "description");
    e->hypothesis = json_str(j, "hypothesis");
    e->synthetic = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "model"));
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
        if (!a) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        arm_from_spec(a, it);
        a->is_reference = !strcmp(a->name, e->reference);
    }
    return LAB_OK;
}

/* The experiment's spec (that of its latest run) and its arms in spec order. */
static int load_spec(lab_store *st, exp_view *e, char *err, size_t errlen) {
    int found, rc = lab_rp_read_latest_spec(st, e->id, e->spec_sha, &e->spec_json, &e->file, &found, err, errlen);
    if (rc || !found) return rc;
    cJSON *j = e->spec_json ? cJSON_Parse(e->spec_json) : NULL;
    if (!j) return LAB_OK;
    rc = exp_from_spec(e, j, err, errlen);
    cJSON_Delete(j);
    return rc;
}

/* When the run an arm shows ran another spec than the experiment's latest (an
 * older version of the file), the arm is described by that spec: a run is
 * judged against what it was asked to do. */
static int arm_from_run_spec(lab_store *st, arm_view *a, const char *sha, char *err, size_t errlen) {
    char *json;
    int rc = lab_rp_read_spec_json(st, sha, &json, err, errlen);
    if (rc) return rc;
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    free(json);
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

/* The run an arm shows (latest FINISHED repeat 0, else the latest of any),
 * described by the spec it ran, with its results and probe table. */
/* The run's tags ("k=v, ...") and notes ("; "-joined) into a->tags, a->notes. */
static int load_arm_annot(lab_store *st, arm_view *a, char *err, size_t errlen) {
    lab_run_annot an;
    int rc = lab_store_run_annot(st, a->run_id, &an, err, errlen);
    if (rc) return rc;
    lab_buf t = {0}, n = {0};
    for (int64_t i = 0; i < an.n_tags; i++) lab_buf_printf(&t, "%s%s=%s", i ? ", " : "", an.keys[i], an.values[i]);
    for (int64_t i = 0; i < an.n_notes; i++) lab_buf_printf(&n, "%s%s", i ? "; " : "", an.notes[i]);
    lab_run_annot_free(&an);
    if (t.oom || n.oom) rc = lab_oom(err, errlen);
    a->tags = rc ? NULL : t.data;
    a->notes = rc ? NULL : n.data;
    if (rc) { lab_buf_free(&t); lab_buf_free(&n); }
    return rc;
}

static int load_arm_run(lab_store *st, exp_view *e, arm_view *a, char *err, size_t errlen) {
    char run_sha[72];
    int rc = lab_rp_read_arm_run(st, e->id, a, run_sha, err, errlen);
    if (rc || !a->run_id) return rc;
    if (run_sha[0] && strcmp(run_sha, e->spec_sha) && (rc = arm_from_run_spec(st, a, run_sha, err, errlen))) return rc;
    if ((rc = lab_rp_read_arm_results(st, a, err, errlen))) return rc;
    if ((rc = load_arm_annot(st, a, err, errlen))) return rc;
    return lab_rp_read_arm_probes(st, a, err, errlen);
}

/* lab_rp_read_ran_arms: arms that ran but are not in the latest spec are
 * shown after it; with no reference in the spec, the arm that ran as one. */
static int add_ran_arm(void *ctx, const char *name, int is_ref) {
    exp_view *e = ctx;
    arm_view *a = add_arm(e, name);
    if (!a) return LAB_ENOMEM;
    if (!e->reference[0] && is_ref) snprintf(e->reference, sizeof e->reference, "%s", a->name);
    return LAB_OK;
}

/* Everything the experiment's sections show; the chart data only when
 * charts are drawn. */
static int load_experiment(lab_store *st, const char *id, int charts, exp_view *e, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    int rc = load_spec(st, e, err, errlen);
    if (rc) return rc;
    if ((rc = lab_rp_read_ran_arms(st, id, add_ran_arm, e, err, errlen)))
        return rc == LAB_ENOMEM ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : rc;
    for (int i = 0; i < e->n_arms; i++) {
        arm_view *a = &e->arms[i];
        if ((rc = load_arm_run(st, e, a, err, errlen))) return rc;
        if (!strcmp(a->name, e->reference)) a->is_reference = 1;
        if (charts && a->has_cmp && !a->is_reference && (rc = lab_rp_read_arm_charts(st, a, err, errlen))) return rc;
    }
    if ((rc = lab_rp_read_flags(st, e, err, errlen))) return rc;
    return charts ? lab_rp_read_history(st, e, err, errlen) : LAB_OK;
}

/* ------------------------------------------------------------ page sections */

static void h(page *pg, const char *s) { lab_esc_html(&pg->html, s); }

/* n escaped cells joined by "</td><td>"; the caller opens the first cell and
 * closes the last. */
static void h_cells(page *pg, const char *const *cells, int n) {
    for (int i = 0; i < n; i++) {
        if (i) lab_buf_printf(&pg->html, "</td><td>");
        h(pg, cells[i]);
    }
}

/* s with line breaks allowed only after the characters of `after` (and at
 * spaces): each piece is kept whole (class nb: nowrap) with a <wbr> after
 * it. A browser otherwise breaks where it likes ("VT_KIMI_BF / 16_ACT=1"
 * with overflow-wrap:anywhere, or at every '-' of a defect id). */
static void h_breaks(page *pg, const char *s, const char *after) {
    lab_buf *o = &pg->html;
    char stop[16];
    snprintf(stop, sizeof stop, "%s ", after);
    while (*s) {
        size_t n = strcspn(s, stop);
        if (s[n] && s[n] != ' ') n++;   /* the break character ends its piece */
        if (n) {
            char *piece = strndup(s, n);
            lab_buf_printf(o, "<span class=\"nb\">");
            h(pg, piece ? piece : "");
            lab_buf_printf(o, "</span>");
            free(piece);
        }
        s += n;
        if (*s == ' ') { lab_buf_printf(o, " "); s++; }
        else if (*s) lab_buf_printf(o, "<wbr>");
    }
}

/* A code cell's text (knobs, confound keys, paths): breaks only after '_',
 * '=', ',' and '/'. */
static void h_code(page *pg, const char *s) { h_breaks(pg, s, "_=,/"); }

static const char *verdict_class(const char *v) {
    if (!strcmp(v, "SUPPORTED")) return "good";
    if (!strcmp(v, "REFUTED")) return "bad";
    return "warn";
}

/* The arm's name, description and knobs: the first four cells of its row. */
static void arm_head_html(page *pg, const arm_view *a) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<tr><td><b>");
    h(pg, a->name);
    lab_buf_printf(o, "</b>%s", a->is_reference ? " <span class=\"tag\">reference</span>" : "");
    if (a->description) { lab_buf_printf(o, "<br><small>"); h(pg, a->description); lab_buf_printf(o, "</small>"); }
    lab_buf_printf(o, "</td><td><code>");
    h_code(pg, a->spec_knobs ? a->spec_knobs : "");
    lab_buf_printf(o, "</code></td><td><code>");
    h_code(pg, a->resolved_knobs ? a->resolved_knobs : "");
    lab_buf_printf(o, "</code></td><td><code>");
    h_code(pg, a->spec_expect ? a->spec_expect : "");
    lab_buf_printf(o, "</code>%s</td>", a->expect_fail ? "<br><span class=\"tag\">assertions expected to FAIL (replay)</span>" : "");
}

/* The engine's cell: name and version, then its commit (vtlab's for the
 * builtin) and model hash, short (engine_name.h). All of it comes from the
 * engine's hello: escaped like any text. */
static void arm_engine_html(page *pg, const arm_view *a) {
    lab_buf *o = &pg->html;
    char label[160];
    lab_buf_printf(o, "<td>");
    h(pg, lab_engine_label(&a->engine, label, sizeof label));
    lab_buf_printf(o, "<br><small>");
    if (*a->engine.commit) { lab_buf_printf(o, "commit "); h(pg, a->engine.commit); lab_buf_printf(o, "<br>"); }
    char model[13];
    snprintf(model, sizeof model, "%.12s", a->engine.model_sha256);
    lab_buf_printf(o, "model ");
    h(pg, model);
    lab_buf_printf(o, "</small></td>");
}

/* The run's cell, its engine's and its assertions' cell. */
static void arm_run_html(page *pg, const arm_view *a) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<td>%lld<br><small>", (long long)a->run_id);
    h(pg, a->status);
    lab_buf_printf(o, " ");
    h(pg, a->backend);
    lab_buf_printf(o, "<br>");
    h(pg, a->started);
    if (a->tags) { lab_buf_printf(o, "<br>tags: "); h(pg, a->tags); }
    if (a->notes) { lab_buf_printf(o, "<br>notes: "); h(pg, a->notes); }
    lab_buf_printf(o, "</small></td>");
    arm_engine_html(pg, a);
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
}

/* The five cells of the comparison with the reference. */
static void arm_cmp_html(page *pg, const arm_view *a) {
    lab_buf *o = &pg->html;
    char v1[32], v2[32], v3[32];
    if (!a->has_cmp) {
        lab_buf_printf(o, "<td colspan=\"5\">%s</td>", a->is_reference ? "(the reference)" : "no comparison recorded");
        return;
    }
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
}

/* The arm's row of the markdown table; tps: its tokens/s cell. */
static void arm_md(page *pg, const arm_view *a, const char *tps) {
    lab_buf *md = &pg->md;
    char v1[32], engine[320];
    lab_buf_printf(md, "| ");
    lab_esc_md(md, a->name);
    lab_buf_printf(md, "%s | ", a->is_reference ? " (reference)" : "");
    lab_esc_md(md, a->resolved_knobs ? a->resolved_knobs : "");
    lab_buf_printf(md, " | %lld ", (long long)a->run_id);
    lab_esc_md(md, a->status);
    if (a->tags) { lab_buf_printf(md, " (tags: "); lab_esc_md(md, a->tags); lab_buf_printf(md, ")"); }
    if (a->notes) { lab_buf_printf(md, " (notes: "); lab_esc_md(md, a->notes); lab_buf_printf(md, ")"); }
    lab_buf_printf(md, " | ");
    lab_esc_md(md, lab_engine_describe(&a->engine, engine, sizeof engine));
    lab_buf_printf(md, " | %s | ", a->assertions_ok < 0 ? "-" : a->assertions_ok ? "pass" : "FAIL");
    if (a->has_cmp) {
        fmt_g(v1, sizeof v1, a->kl_mean);
        lab_buf_printf(md, "%lld/%lld [%.3f, %.3f] | ", (long long)a->k, (long long)a->n, a->lo, a->hi);
        lab_esc_md(md, a->has_verdict ? a->verdict : "-");
        lab_buf_printf(md, " | %s | ", v1);
    } else lab_buf_printf(md, "- | - | - | ");
    lab_buf_printf(md, "%s |\n", tps);
}

static void section_arms(page *pg, const exp_view *e) {
    lab_buf *o = &pg->html;
    /* 13 columns: on a narrow screen the table scrolls in its own box rather
     * than running past the page's edge */
    lab_buf_printf(o, "<div class=\"wide\"><table class=\"arms\"><tr><th>arm</th><th>knobs (spec)</th><th>knobs (resolved, non-default)</th>"
                      "<th>expects</th><th>run</th><th>engine</th><th>assertions</th><th>top-1 k/n [Wilson 95%%]</th>"
                      "<th>verdict</th><th>KL mean / p99 / max</th><th>max |&Delta;logit|</th><th>first divergence</th>"
                      "<th>tokens/s</th></tr>\n");
    lab_buf_printf(&pg->md, "| arm | knobs | run | engine | assertions | top-1 k/n [95%% CI] | verdict | KL mean | "
                            "tokens/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        arm_head_html(pg, a);
        if (!a->run_id) {
            lab_buf_printf(o, "<td colspan=\"9\">never run</td></tr>\n");
            lab_buf_printf(&pg->md, "| ");
            lab_esc_md(&pg->md, a->name);
            lab_buf_printf(&pg->md, " | | never run | | | | | | |\n");
            continue;
        }
        arm_run_html(pg, a);
        arm_cmp_html(pg, a);
        char tps[96], v1[32], v2[32];
        fmt_g(v1, sizeof v1, a->tps);
        /* benchmark runs (vtlab record-bench) also carry the fraction of the peak they reached */
        if (!isnan(a->peak_frac)) snprintf(v2, sizeof v2, " (%.1f%% of peak FLOP/s)", 100 * a->peak_frac);
        else v2[0] = 0;
        snprintf(tps, sizeof tps, "%s%s", v1, v2);
        lab_buf_printf(o, "<td>%s</td></tr>\n", tps);
        arm_md(pg, a, tps);
    }
    lab_buf_printf(o, "</table></div>\n");
    lab_buf_printf(&pg->md, "\n");
}

/* Confound flags on the runs shown, and a count of the others of the experiment. */
static void section_flags(page *pg, const exp_view *e) {
    if (!e->has_flags) return;
    lab_buf *o = &pg->html;
    int shown = 0, older_open = 0, resolved = 0;
    for (int64_t i = 0; i < e->n_flags; i++) {
        const lab_rp_flag *f = &e->flags[i];
        if (!f->open) { resolved++; continue; }
        if (!f->on_shown_run) { older_open++; continue; }
        if (!shown++)
            lab_buf_printf(o, "<h4>Confound flags (from <code>vtlab audit</code>)</h4>\n<table><tr><th>run</th><th>arm</th>"
                              "<th>rule</th><th>reason</th><th>first seen</th></tr>\n");
        lab_buf_printf(o, "<tr class=\"%s\"><td>", f->expected ? "muted" : "bad");
        h_cells(pg, (const char *const[]){f->subject, f->arm, f->rule, f->reason}, 4);
        if (f->expected) lab_buf_printf(o, " <span class=\"tag\">expected: the arm replays the defect</span>");
        lab_buf_printf(o, "</td><td>");
        h(pg, f->first_seen);
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- %s flag %s on run ", f->expected ? "expected" : "**confound**", f->rule);
        lab_esc_md(&pg->md, f->subject);
        lab_buf_printf(&pg->md, " (");
        lab_esc_md(&pg->md, f->arm);
        lab_buf_printf(&pg->md, "): ");
        lab_esc_md(&pg->md, f->reason);
        lab_buf_printf(&pg->md, "\n");
    }
    if (shown) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>No open confound flags on these runs%s.</p>\n",
                        older_open || resolved ? "" : " (run <code>vtlab audit</code> to check)");
    if (older_open || resolved)
        lab_buf_printf(o, "<p><small>%d open flag(s) on older runs of this experiment, %d resolved.</small></p>\n",
                       older_open, resolved);
    if (shown) lab_buf_printf(&pg->md, "\n");
}

static void probe_site_html(page *pg, const lab_rp_probe_site *p) {
    lab_buf *o = &pg->html;
    int audited = p->rows_unwritten_max >= 0;
    lab_buf_printf(o, "</td><td>");
    h(pg, p->site);
    lab_buf_printf(o, "</td><td>");
    h(pg, p->dtypes);
    if (p->layer_min < 0) lab_buf_printf(o, "</td><td>model");
    else lab_buf_printf(o, "</td><td>%lld (%lld..%lld)", (long long)p->n_layers, (long long)p->layer_min,
                        (long long)p->layer_max);
    if (p->bytes_min == p->bytes_max) lab_buf_printf(o, "</td><td>%lld", (long long)p->bytes_min);
    else lab_buf_printf(o, "</td><td>%lld..%lld", (long long)p->bytes_min, (long long)p->bytes_max);
    lab_buf_printf(o, " (%lld/%lld)</td><td>%lld</td><td>%s", (long long)p->src_row_bytes, (long long)p->dst_row_bytes,
                   (long long)p->violations, audited ? "" : "not audited");
    if (audited) lab_buf_printf(o, "%lld", (long long)p->rows_unwritten);
    lab_buf_printf(o, "</td><td>");
    h(pg, p->first_violation);
    lab_buf_printf(o, "</td></tr>\n");
}

static void expectation_html(page *pg, const lab_rp_expectation *x) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "</td><td>expect ");
    h(pg, x->site);
    lab_buf_printf(o, "</td><td>expected ");
    h(pg, x->expected);
    lab_buf_printf(o, ", saw ");
    h(pg, x->seen);
    lab_buf_printf(o, "</td><td colspan=\"4\">%s ", x->ok ? "ok" : "FAIL");
    h(pg, x->reason);
    lab_buf_printf(o, "</td></tr>\n");
}

/* Each arm's probe sites, then its expectations (the arm's declared dtypes,
 * as checked). */
static void section_probes_table(page *pg, const exp_view *e, int64_t *n_rows, int64_t *n_bad) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<div class=\"wide\"><table><tr><th>arm</th><th>site</th><th>dtypes seen (src&rarr;dst)</th>"
                      "<th>layers</th><th>bytes/row copied (src/dst row)</th><th>violations</th><th>rows unwritten</th>"
                      "<th>first violation</th></tr>\n");
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        int first = 1;
        for (int64_t j = 0; j < a->n_probes; j++) {
            const lab_rp_probe_site *p = &a->probes[j];
            int bad = p->violations || p->rows_unwritten;
            (*n_rows)++;
            *n_bad += bad;
            lab_buf_printf(o, "<tr class=\"%s\"><td>", bad ? "bad" : "");
            if (first) h(pg, a->name);
            first = 0;
            probe_site_html(pg, p);
        }
        for (int64_t j = 0; j < a->n_expects; j++) {
            const lab_rp_expectation *x = &a->expects[j];
            (*n_rows)++;
            *n_bad += !x->ok;
            lab_buf_printf(o, "<tr class=\"%s\"><td>", x->ok ? "" : "bad");
            if (first) h(pg, a->name);
            first = 0;
            expectation_html(pg, x);
        }
    }
    lab_buf_printf(o, "</table></div>\n");
    if (!*n_rows) lab_buf_printf(o, "<p>No probe records (the runs had <code>VT_PROBE=off</code>).</p>\n");
}

/* The probe table is written into its own buffer and shown collapsed
 * (<details>) when every record and expectation is healthy, open when not. */
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

static void section_claims(page *pg, const lab_rp_page_view *v) {
    lab_buf *o = &pg->html;
    for (int64_t i = 0; i < v->n_claims; i++) {
        const lab_rp_claim *c = &v->claims[i];
        if (!i) {
            lab_buf_printf(o, "<h2 id=\"ledger\">Ledger: confounded claims</h2>\n<table><tr><th>claim</th><th>rule</th>"
                              "<th>reason</th><th>first seen</th><th>status</th></tr>\n");
            lab_buf_printf(&pg->md, "## Ledger: confounded claims\n\n");
        }
        lab_buf_printf(o, "<tr class=\"%s\"><td>", c->open ? "bad" : "muted");
        h_cells(pg, (const char *const[]){c->subject, c->rule, c->reason, c->first_seen}, 4);
        lab_buf_printf(o, "</td><td>");
        if (c->open) lab_buf_printf(o, "open");
        else {
            lab_buf_printf(o, "resolved ");
            h(pg, c->resolved_at);
            lab_buf_printf(o, ": ");
            h(pg, c->resolved_by);
        }
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- claim ");
        lab_esc_md(&pg->md, c->subject);
        lab_buf_printf(&pg->md, " %s (%s): ", c->rule, c->open ? "open" : "resolved");
        lab_esc_md(&pg->md, c->reason);
        lab_buf_printf(&pg->md, "\n");
    }
    if (v->n_claims) {
        lab_buf_printf(o, "</table>\n");
        lab_buf_printf(&pg->md, "\n");
    }
}

static void nightly_row(page *pg, const lab_rp_nightly *n) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<tr><td>%lld</td><td>", (long long)n->id);
    h(pg, n->started);
    lab_buf_printf(o, "</td><td><code>");
    h_code(pg, n->commit);
    lab_buf_printf(o, "</code></td><td>");
    h(pg, n->host);
    lab_buf_printf(o, "</td><td class=\"%s\">", !strcmp(n->status, "PASSED") ? "good" : "bad");
    h(pg, n->status);
    lab_buf_printf(o, "</td><td>%lld</td><td>%lld</td><td><small>", (long long)n->n_runs, (long long)n->n_regressions);
    h(pg, n->audit);
    lab_buf_printf(o, "</small></td></tr>\n");
    lab_buf_printf(&pg->md, "| %lld | ", (long long)n->id);
    lab_esc_md(&pg->md, n->started);
    lab_buf_printf(&pg->md, " | ");
    lab_esc_md(&pg->md, n->commit);
    lab_buf_printf(&pg->md, " | ");
    lab_esc_md(&pg->md, n->status);
    lab_buf_printf(&pg->md, " | %lld | %lld |\n", (long long)n->n_runs, (long long)n->n_regressions);
}

static void section_nightlies(page *pg, const lab_rp_page_view *v) {
    if (!v->n_nightlies) return;
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<h2 id=\"nightly\">Nightly runs</h2>\n<table><tr><th>nightly</th><th>started (UTC)</th>"
                      "<th>commit</th><th>host</th><th>status</th><th>runs</th><th>regressions</th><th>audit</th></tr>\n");
    lab_buf_printf(&pg->md, "## Nightly runs\n\n| nightly | started | commit | status | runs | regressions |\n"
                            "|---|---|---|---|---|---|\n");
    for (int64_t i = 0; i < v->n_nightlies; i++) nightly_row(pg, &v->nightlies[i]);
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(&pg->md, "\n");
    long long latest = (long long)v->nightlies[0].id;
    for (int64_t i = 0; i < v->n_findings; i++) {
        const lab_rp_finding *f = &v->findings[i];
        if (!i)
            lab_buf_printf(o, "<h3>Findings of nightly %lld (against the previous nightly)</h3>\n<table><tr><th>experiment</th>"
                              "<th>arm</th><th>kind</th><th></th><th>finding</th></tr>\n", latest);
        lab_buf_printf(o, "<tr class=\"%s\"><td>", f->regression ? "bad" : "");
        h_cells(pg, (const char *const[]){f->experiment, f->arm, f->kind}, 3);
        lab_buf_printf(o, "</td><td>%s</td><td>", f->regression ? "<b>REGRESSION</b>" : "note");
        h(pg, f->message);
        lab_buf_printf(o, "</td></tr>\n");
    }
    if (v->n_findings) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>Nightly %lld found nothing to note against the previous nightly.</p>\n", latest);
}

/* The runs (ids) of the open flags whose cause is keys[i]'s, from i on,
 * ", "-joined into b; 0 when the cause is on a claim. */
static int cause_runs(const lab_rp_page_view *v, char (*keys)[400], int64_t i, lab_buf *b) {
    int n = 0;
    for (int64_t j = i; j < v->n_confounds; j++)
        if (!strcmp(keys[j], keys[i]) && !strcmp(v->confounds[j].kind, "run"))
            lab_buf_printf(b, "%s%s", n++ ? ", " : "", v->confounds[j].subject);
    return n;
}

/* One open confound (a cause: confound_key.h) and the runs it is on. */
static void summary_confound(page *pg, const lab_rp_page_view *v, char (*keys)[400], int64_t i) {
    const lab_rp_confound *c = &v->confounds[i];
    lab_buf *o = &pg->html, runs = {0};
    int nr = cause_runs(v, keys, i, &runs);
    lab_buf_printf(o, "<tr><td><code>");
    h_code(pg, keys[i]);
    lab_buf_printf(o, "</code></td><td>");
    if (!nr) { lab_buf_printf(o, "claim "); h(pg, c->subject); }
    else {
        lab_buf_printf(o, "run%s ", nr > 1 ? "s" : "");
        h(pg, runs.data);
    }
    lab_buf_printf(o, "</td><td>%s</td><td>", c->rule);
    h(pg, c->reason);   /* whole: it says what to replay */
    lab_buf_printf(o, "</td></tr>\n");
    lab_buf_printf(&pg->md, "- **confound** `");
    lab_esc_md_code(&pg->md, keys[i]);
    lab_buf_printf(&pg->md, "` (%s%s", c->rule, nr ? "; runs " : "");
    lab_esc_md(&pg->md, nr ? runs.data : "");
    lab_buf_printf(&pg->md, "): ");
    lab_esc_md(&pg->md, c->reason);
    lab_buf_printf(&pg->md, "\n");
    lab_buf_free(&runs);
}

/* The open confounds, one row per cause however many runs it is on, with
 * the full reason (wrapped, never cut), and the ledger the audit read: the
 * same database audited against another ledger shows other confounds. */
static void summary_confounds(page *pg, const lab_rp_page_view *v) {
    lab_buf *o = &pg->html;
    int64_t n = v->n_confounds, causes = 0;
    char (*keys)[400] = n ? calloc((size_t)n, sizeof *keys) : NULL;
    if (n && !keys) { pg->html.oom = 1; return; }
    for (int64_t i = 0; i < n; i++) {
        const lab_rp_confound *c = &v->confounds[i];
        lab_confound_key(!strcmp(c->kind, "claim"), c->subject, c->experiment, c->arm, c->rule, c->key, keys[i],
                         sizeof keys[i]);
    }
    for (int64_t i = 0; i < n; i++) {
        int seen = 0;
        for (int64_t j = 0; j < i && !seen; j++) seen = !strcmp(keys[j], keys[i]);
        if (seen) continue;
        if (!causes++)
            lab_buf_printf(o, "<table class=\"bad\"><tr><th>open confound</th><th>on</th><th>rule</th><th>reason</th></tr>\n");
        summary_confound(pg, v, keys, i);
    }
    if (causes) lab_buf_printf(o, "</table>\n");
    free(keys);
    lab_buf_printf(o, "<p><b>%lld open confound(s)</b>%s (one per cause; rules R1&ndash;R6: docs/specs.md; details under "
                      "each experiment%s).", (long long)causes, causes ? "" : ": none",
                   v->n_claims ? " and in <a href=\"#ledger\">the ledger</a>" : "");
    if (v->audit_at[0]) {
        lab_buf_printf(o, " As of the audit of ");
        h(pg, v->audit_at);
        lab_buf_printf(o, " against the ledger <code>");
        h_code(pg, v->audit_specs);
        lab_buf_printf(o, "</code>.");
    }
    lab_buf_printf(o, "</p>\n");
    lab_buf_printf(&pg->md, "**%lld open confound(s)**", (long long)causes);
    if (v->audit_at[0]) {
        lab_buf_printf(&pg->md, " (as of the audit of %s against the ledger `", v->audit_at);
        lab_esc_md_code(&pg->md, v->audit_specs);
        lab_buf_printf(&pg->md, "`)");
    }
    lab_buf_printf(&pg->md, "\n\n");
}

/* Each arm's latest verdict, with the engine of the run it is about. */
static void summary_verdicts(page *pg, const lab_rp_page_view *v) {
    lab_buf *o = &pg->html;
    for (int64_t j = 0; j < v->n_verdicts; j++) {
        const lab_rp_verdict *r = &v->verdicts[j];
        char engine[160];
        lab_engine_label(&r->engine, engine, sizeof engine);
        int k = 0;
        for (int i = 0; i < v->n_experiments; i++) if (!strcmp(v->experiments[i], r->experiment)) k = i;
        if (!j) lab_buf_printf(o, "<table><tr><th>experiment</th><th>arm</th><th>engine</th><th>verdict</th>"
                                  "<th>top-1 k/n [95%% CI]</th><th>assertions</th></tr>\n");
        lab_buf_printf(o, "<tr><td><a href=\"#exp-%d\">", k);
        h(pg, r->experiment);
        lab_buf_printf(o, "</a></td><td>");
        h_cells(pg, (const char *const[]){r->arm, engine}, 2);
        lab_buf_printf(o, "</td><td class=\"%s\">%s</td><td>%lld/%lld [%.3f, %.3f]</td><td>%s%s</td></tr>\n",
                       verdict_class(r->verdict), r->verdict, (long long)r->k, (long long)r->n, r->lo, r->hi,
                       r->assertions_ok ? "ok" : "FAIL", r->expect_fail ? " (a replay: expected to fail)" : "");
        lab_buf_printf(&pg->md, "- ");
        lab_esc_md(&pg->md, r->experiment);
        lab_buf_printf(&pg->md, "/");
        lab_esc_md(&pg->md, r->arm);
        lab_buf_printf(&pg->md, ": %s %lld/%lld (engine ", r->verdict, (long long)r->k, (long long)r->n);
        lab_esc_md(&pg->md, engine);
        lab_buf_printf(&pg->md, ")\n");
    }
    if (v->n_verdicts) { lab_buf_printf(o, "</table>\n"); lab_buf_printf(&pg->md, "\n"); }
}

/* What matters first: the open confounds, each experiment's verdicts, the
 * latest nightly; the details follow. */
static void section_summary(page *pg, const lab_rp_page_view *v) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<h2 id=\"summary\">Summary</h2>\n");
    if (v->has_audit) summary_confounds(pg, v);
    else lab_buf_printf(o, "<p>No audit has run on this database (<code>vtlab audit</code>).</p>\n");
    summary_verdicts(pg, v);
    if (v->n_nightlies) {
        const lab_rp_nightly *n = &v->nightlies[0];
        lab_buf_printf(o, "<p>Latest <a href=\"#nightly\">nightly</a>: #%lld <b class=\"%s\">%s</b>, %lld regression(s), "
                          "started %s.</p>\n", (long long)n->id, strcmp(n->status, "PASSED") ? "bad" : "good", n->status,
                       (long long)n->n_regressions, n->started);
    }
}

static const char *const CSS =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222;"
    "padding:0 1em}h1{margin-bottom:0}h2{border-bottom:2px solid #ddd;margin-top:2em}table{border-collapse:collapse;"
    "margin:0.6em 0;font-size:0.9em;max-width:100%}td,th{border:1px solid #ccc;padding:4px 7px;vertical-align:top;"
    "text-align:left}.nb{white-space:nowrap}.wide{overflow-x:auto;max-width:100%}table.arms{font-size:0.8em}"
    "th{background:#f3f3f3}.good{background:#e6f4ea}.bad{background:#fdecea}.warn{background:#fff6db}"
    ".muted{color:#777}.tag{font-size:0.8em;background:#eef;border-radius:3px;padding:0 4px}code{font-size:0.9em}"
    "figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:0.85em;"
    "color:#555;max-width:1000px}nav a{margin-right:1em}.meta{color:#666;font-size:0.9em}";

/* The page's head: the database, when and by what it was generated, and the
 * links to each experiment and section. */
static void page_head(page *pg, const lab_rp_page_view *v) {
    lab_buf *ht = &pg->html;
    const char *db = pg->o->db_label ? pg->o->db_label : LAB_DEFAULT_DB;
    char now[32];
    lab_now_iso(now);
    lab_buf_printf(ht, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>vtlab report</title>\n"
                       "<style>%s</style></head><body>\n<h1>vtlab report</h1>\n<p class=\"meta\">database <code>", CSS);
    h(pg, db);
    lab_buf_printf(ht, "</code> &middot; generated %s by <code>", now);
    h(pg, vt_build_info());
    lab_buf_printf(ht, "</code> &middot; %d experiment(s)</p>\n<nav>", v->n_experiments);
    lab_buf_printf(&pg->md, "# vtlab report\n\nDatabase `");
    lab_esc_md_code(&pg->md, db);
    lab_buf_printf(&pg->md, "`, generated %s. Full page: index.html.\n\n", now);
    for (int i = 0; i < v->n_experiments; i++) {
        lab_buf_printf(ht, "<a href=\"#exp-%d\">", i);
        h(pg, v->experiments[i]);
        lab_buf_printf(ht, "</a>");
    }
    /* links only to the sections this page has */
    lab_buf_printf(ht, "<a href=\"#summary\">summary</a>%s%s%s%s</nav>\n",
                   v->n_claims ? "<a href=\"#ledger\">ledger</a>" : "", v->n_nightlies ? "<a href=\"#nightly\">nightly</a>" : "",
                   pg->has_bisect ? "<a href=\"#bisect\">bisections</a>" : "",
                   pg->has_localize ? "<a href=\"#localize\">localizations</a>" : "");
}

/* The experiment's heading: its spec, reference, decision rule, description
 * and hypothesis. */
static void section_experiment_head(page *pg, const exp_view *e, int i) {
    lab_buf *ht = &pg->html;
    lab_buf_printf(ht, "<h2 id=\"exp-%d\">", i);
    h(pg, e->id);
    lab_buf_printf(ht, "</h2>\n<p class=\"meta\">spec <code>");
    h(pg, e->file ? e->file : "(not stored)");
    lab_buf_printf(ht, "</code> (sha256 %.12s) &middot; reference arm <b>", e->spec_sha);
    h(pg, e->reference);
    lab_buf_printf(ht, "</b>");
    if (e->has_decision) lab_buf_printf(ht, " &middot; decision: top-1 agreement %s %.3g on the Wilson 95%% interval",
                                        e->decision_ge ? "&ge;" : "&le;", e->threshold);
    lab_buf_printf(ht, "</p>\n");
    lab_buf_printf(&pg->md, "## ");
    lab_esc_md(&pg->md, e->id);
    lab_buf_printf(&pg->md, "\n\n");
    if (e->description) {
        lab_buf_printf(ht, "<p>");
        h(pg, e->description);
        lab_buf_printf(ht, "</p>\n");
        lab_esc_md(&pg->md, e->description);
        lab_buf_printf(&pg->md, "\n\n");
    }
    if (e->hypothesis) {
        lab_buf_printf(ht, "<p><b>Hypothesis:</b> ");
        h(pg, e->hypothesis);
        lab_buf_printf(ht, "</p>\n");
        lab_buf_printf(&pg->md, "Hypothesis: ");
        lab_esc_md(&pg->md, e->hypothesis);
        lab_buf_printf(&pg->md, "\n\n");
    }
}

/* Experiment i's section and its charts. */
static void section_experiment(page *pg, const exp_view *e, int i) {
    char part[48], stem[96], stem2[96];
    lab_file_part(e->id, part, sizeof part);
    section_experiment_head(pg, e, i);
    section_arms(pg, e);
    section_flags(pg, e);
    section_probes(pg, e);
    lab_buf_printf(&pg->html, "<h4>Charts</h4>\n");
    snprintf(stem, sizeof stem, "e%d-%s-top1", i, part);
    lab_rp_chart_top1(pg, e, stem);
    snprintf(stem, sizeof stem, "e%d-%s-divergence", i, part);
    lab_rp_chart_divergence(pg, e, stem);
    snprintf(stem, sizeof stem, "e%d-%s-kl-cdf", i, part);
    lab_rp_chart_kl_cdf(pg, e, stem);
    snprintf(stem, sizeof stem, "e%d-%s-history", i, part);
    snprintf(stem2, sizeof stem2, "e%d-%s-throughput", i, part);
    lab_rp_chart_history(pg, e, stem, stem2);
}

/* The whole page into pg: each experiment is loaded, written and released
 * in turn. */
static int build_page(lab_store *st, page *pg, const lab_rp_page_view *v, char *err, size_t errlen) {
    lab_buf *ht = &pg->html;
    int rc0 = lab_rp_has_bisections(st, &pg->has_bisect, err, errlen);
    if (!rc0) rc0 = lab_rp_has_localizations(st, &pg->has_localize, err, errlen);
    if (rc0) return rc0;
    page_head(pg, v);
    section_summary(pg, v);
    if (!pg->plots_on) {
        lab_buf_printf(ht, "<p class=\"warn\">No charts: ");
        h(pg, pg->res->plots_skipped);
        lab_buf_printf(ht, ".</p>\n");
    }
    if (!v->n_experiments) lab_buf_printf(ht, "<p>No runs in this database yet (<code>vtlab run EXPERIMENT.json</code>).</p>\n");
    for (int i = 0; i < v->n_experiments; i++) {
        exp_view e;
        int rc = load_experiment(st, v->experiments[i], pg->plots_on, &e, err, errlen);
        if (!rc) {
            pg->res->n_experiments++;
            section_experiment(pg, &e, i);
        }
        lab_rp_exp_free(&e);
        if (rc) return rc;
    }
    section_claims(pg, v);
    section_nightlies(pg, v);
    int brc = lab_rp_section_bisections(st, pg, err, errlen);
    if (!brc) brc = lab_rp_section_localizations(st, pg, err, errlen);
    if (brc) return brc;
    lab_buf_printf(ht, "<hr><p class=\"meta\">Every number here is a row of the database; <code>vtlab show RUN</code> "
                       "prints everything recorded about a run. Schema: docs/schema.md.</p>\n</body></html>\n");
    return pg->html.oom || pg->md.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : LAB_OK;
}

/* summary.md, then index.html, each written whole. */
static int write_page(const page *pg, const char *out, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.md", out);
    int rc = lab_cli_write_file_atomic(path, pg->md.data, pg->md.len, err, errlen);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/index.html", out);
    return lab_cli_write_file_atomic(path, pg->html.data, pg->html.len, err, errlen);
}

int lab_report_write(lab_store *st, const lab_report_opts *o, lab_report_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    page pg;
    memset(&pg, 0, sizeof pg);
    pg.o = o;
    pg.res = res;
    const char *out = o->out_dir ? o->out_dir : LAB_DEFAULT_REPORT;
    int rc = lab_mkdirs(out, err, errlen);
    if (rc) return rc;
    /* the page's own temporary files (index.html.PID.tmp, ...) that a killed
     * report left: removed at the next start (docs/reliability.md) */
    lab_sweep_stale_tmp_tree(out, 2);
    snprintf(pg.plot_dir, sizeof pg.plot_dir, "%s/plots", out);
    pg.plots_on = o->plots;
    if (pg.plots_on && !lab_plot_available(res->plots_skipped, sizeof res->plots_skipped)) pg.plots_on = 0;
    if (!o->plots && !res->plots_skipped[0]) snprintf(res->plots_skipped, sizeof res->plots_skipped, "charts turned off");
    if (pg.plots_on && (rc = lab_mkdirs(pg.plot_dir, err, errlen))) return rc;

    lab_rp_page_view v;
    rc = lab_rp_read_page(st, &v, err, errlen);
    if (!rc) rc = build_page(st, &pg, &v, err, errlen);
    if (!rc) rc = write_page(&pg, out, err, errlen);
    lab_rp_page_free(&v);
    lab_buf_free(&pg.html);
    lab_buf_free(&pg.md);
    return rc;
}

/* ------------------------------------------------------------ the command */

int lab_report_cmd(const char *db, const char *out, int plots) {
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
