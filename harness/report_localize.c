/*
 * report_localize.c — the report's localization section (see report_page.h
 * and docs/localize.md): each localization's result, a chart of its units
 * alone (one bar per layer or site: its top-1 agreement, coloured by its
 * class, with the decision threshold), and its steps as a table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "report_page.h"
#include "store_localize.h"

static unsigned class_rgb(const char *c) {
    return !strcmp(c, "pass") ? 0x2e7d32 : !strcmp(c, "fail") ? 0xc62828 : !strcmp(c, "undecided") ? 0xe6a100 : 0x777777;
}

/* Unit u's name: "3" (by layer) or "3.attn" / "3.ffn" (by site): also the
 * set text of the unit alone, how its step is found. */
static void unit_name(const lab_localization *l, int64_t u, char *out, size_t n) {
    if (l->by[0] == 's') snprintf(out, n, "%lld.%s", (long long)(u / 2), u % 2 ? "ffn" : "attn");
    else snprintf(out, n, "%lld", (long long)u);
}

/* The step of the unit alone: the deciding one (largest scale), else any. */
static const lab_localize_step *alone(const lab_localize_step *s, int64_t n, const char *name) {
    const lab_localize_step *best = NULL;
    for (int64_t i = 0; i < n; i++) {
        if (strcmp(s[i].set, name) || s[i].arm_run_id <= 0) continue;
        int decided = !strcmp(s[i].cls, "pass") || !strcmp(s[i].cls, "fail");
        int best_decided = best && (!strcmp(best->cls, "pass") || !strcmp(best->cls, "fail"));
        if (!best || (decided && !best_decided) || (decided == best_decided && s[i].scale > best->scale)) best = &s[i];
    }
    return best;
}

/* The chart: each unit alone, a bar of its top-1 agreement coloured by its
 * class; the threshold as a dashed line; nothing when no unit ran alone. */
static void chart_units(page *pg, const lab_localization *l, const lab_localize_step *s, int64_t n, double thr) {
    lab_buf d = {0}, g = {0};
    int pts = 0;
    double ymin = isfinite(thr) ? thr : 1.0;
    for (int64_t u = 0; u < l->n_units; u++) {
        char name[32];
        unit_name(l, u, name, sizeof name);
        const lab_localize_step *t = alone(s, n, name);
        if (!t || t->n <= 0) continue;
        double v = (double)t->k / (double)t->n;
        if (t->lo < ymin) ymin = t->lo;
        lab_buf_printf(&d, "%lld \"%s\" %.6f %.6f %.6f %u\n", (long long)u, name, v, t->lo, t->hi, class_rgb(t->cls));
        pts++;
    }
    if (pts) {
        char fname[64], a[160], e[160];
        snprintf(fname, sizeof fname, "localize-%lld", (long long)l->id);
        ymin = ymin > 0.1 ? ymin - 0.05 : 0;
        lab_buf_printf(&g, "set title \"localization %lld: %s/%s, each %s alone\"\n", (long long)l->id,
                       lab_gp_label(l->experiment, e, sizeof e), lab_gp_label(l->arm, a, sizeof a), l->by);
        lab_buf_printf(&g, "set xlabel '%s'\nset ylabel 'top-1 agreement k/n'\nset yrange [%.3f:1.02]\n"
                           "set xrange [-0.6:%lld.6]\nset grid ytics\nset boxwidth 0.7\nset style fill solid 0.8\n"
                           "set key outside right top vertical box opaque\n",
                       l->by, ymin, (long long)(l->n_units - 1));
        if (isfinite(thr)) lab_buf_printf(&g, "set arrow from graph 0, first %.6f to graph 1, first %.6f nohead dt 2 lw 2 "
                                              "lc rgb '#333333'\n", thr, thr);
        lab_buf_printf(&g, "plot 'src/%s.dat' using 1:3:6:xtic(2) with boxes lc rgb variable notitle,"
                           " '' using 1:3:4:5 with yerrorbars pt 0 lw 1 lc rgb '#333333' notitle,"
                           " NaN with boxes lc rgb '#2e7d32' title 'pass', NaN with boxes lc rgb '#c62828' title 'fail',"
                           " NaN with boxes lc rgb '#e6a100' title 'undecided'\n", fname);
        lab_rp_chart(pg, fname, d.data, g.data, 900, 420,
                     "Each unit alone with the arm's levers on it: top-1 agreement with the reference, its Wilson 95% "
                     "interval, coloured by the decision rule (green pass, red fail, amber undecided); the dashed line "
                     "is the decision threshold.");
    }
    lab_buf_free(&d);
    lab_buf_free(&g);
}

static void step_row(page *pg, const lab_localize_step *t) {
    lab_buf *o = &pg->html, *m = &pg->md;
    char top[96] = "", pv[80] = "", kl[32] = "", dv[48] = "", run[32] = "";
    if (t->arm_run_id > 0) {
        snprintf(top, sizeof top, "%lld/%lld [%.3f, %.3f]", (long long)t->k, (long long)t->n, t->lo, t->hi);
        snprintf(run, sizeof run, "%lld", (long long)t->arm_run_id);
    }
    if (isfinite(t->p)) snprintf(pv, sizeof pv, "-%lld +%lld, p = %.3g", (long long)t->lost, (long long)t->gained, t->p);
    if (isfinite(t->kl_mean)) snprintf(kl, sizeof kl, "%.3g", t->kl_mean);
    if (t->first_div_layer >= 0)
        snprintf(dv, sizeof dv, "L%lld %s", (long long)t->first_div_layer, t->first_div_site ? "ffn" : "attn");
    lab_buf_printf(o, "<tr class=\"%s\"><td>%lld</td><td>%s</td><td><code>", !strcmp(t->cls, "fail") ? "bad" : "",
                   (long long)t->seq, t->phase);
    lab_esc_html(o, t->set);
    lab_buf_printf(o, "</code></td><td>x%lld</td><td>%s</td><td>", (long long)t->scale, top);
    lab_esc_html(o, t->verdict);
    lab_buf_printf(o, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s%s</td><td>%s</td></tr>\n", kl, dv, pv, t->cls,
                   t->made ? "" : " (reused)", run);
    lab_buf_printf(m, "| %lld | %s | `", (long long)t->seq, t->phase);
    lab_esc_md(m, t->set);
    lab_buf_printf(m, "` | x%lld | %s | %s | %s | %s | %s |\n", (long long)t->scale, top, t->verdict, kl, pv, t->cls);
}

static void localization(page *pg, const lab_localization *l, const lab_localize_step *s, int64_t n, double thr) {
    lab_buf *o = &pg->html, *m = &pg->md;
    lab_buf_printf(o, "<h3>localization %lld: ", (long long)l->id);
    lab_esc_html(o, l->experiment);
    lab_buf_printf(o, "/");
    lab_esc_html(o, l->arm);
    lab_buf_printf(o, " (");
    lab_esc_html(o, l->levers);
    lab_buf_printf(o, " by %s over %lld, %s; %lld runs made, %lld reused)</h3>\n<p class=\"%s\"><b>%s</b>: ", l->by,
                   (long long)l->n_units, l->goal, (long long)l->runs_made, (long long)l->runs_reused,
                   !strcmp(l->status, "FOUND") ? "bad" : "", l->status);
    lab_esc_html(o, l->message[0] ? l->message : "(in progress)");
    lab_buf_printf(o, "</p>\n");
    lab_buf_printf(m, "### localization %lld: ", (long long)l->id);
    lab_esc_md(m, l->experiment);
    lab_buf_printf(m, "/");
    lab_esc_md(m, l->arm);
    lab_buf_printf(m, " (by %s, %s)\n\n**%s**: ", l->by, l->goal, l->status);
    lab_esc_md(m, l->message[0] ? l->message : "(in progress)");
    lab_buf_printf(m, "\n\n");
    chart_units(pg, l, s, n, thr);
    lab_buf_printf(o, "<table><tr><th>#</th><th>phase</th><th>set</th><th>scale</th><th>top-1 k/n [95%%]</th>"
                      "<th>verdict</th><th>KL</th><th>first divergence</th><th>vs full lever (lost/gained, p)</th>"
                      "<th>class</th><th>run</th></tr>\n");
    lab_buf_printf(m, "| # | phase | set | scale | top-1 | verdict | KL | vs full | class |\n"
                      "|---|---|---|---|---|---|---|---|---|\n");
    for (int64_t j = 0; j < n; j++) step_row(pg, &s[j]);
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(m, "\n");
}

int lab_rp_has_localizations(lab_store *st, int *has, char *err, size_t errlen) {
    lab_localization *v = NULL;
    int64_t n = 0;
    int have = 0, rc = lab_store_has_table(st, "localizations", &have, err, errlen);
    if (!rc && have) rc = lab_store_localize_list(st, &v, &n, err, errlen);
    free(v);
    *has = !rc && n > 0;
    return rc;
}

int lab_rp_section_localizations(lab_store *st, page *pg, char *err, size_t errlen) {
    int have = 0;
    int rc = lab_store_has_table(st, "localizations", &have, err, errlen);
    if (rc || !have) return rc;
    lab_localization *v = NULL;
    int64_t nl = 0;
    if ((rc = lab_store_localize_list(st, &v, &nl, err, errlen)) || !nl) { free(v); return rc; }
    lab_buf_printf(&pg->html, "<h2 id=\"localize\">Localizations</h2>\n<p class=\"meta\">Where a REFUTED arm's scoped "
                              "lever breaks (<code>vtlab localize</code>, docs/localize.md).</p>\n");
    lab_buf_printf(&pg->md, "## Localizations\n\n");
    for (int64_t i = 0; i < nl && !rc; i++) {
        lab_localize_step *s = NULL;
        int64_t n = 0;
        double thr = NAN;
        if ((rc = lab_store_localize_steps(st, v[i].id, &s, &n, err, errlen))) break;
        for (int64_t j = 0; j < n && !isfinite(thr) && !rc; j++)
            if (s[j].arm_run_id > 0) rc = lab_store_localize_threshold(st, s[j].arm_run_id, &thr, err, errlen);
        if (!rc) localization(pg, &v[i], s, n, thr);
        free(s);
    }
    free(v);
    return rc;
}
