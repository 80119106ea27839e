/*
 * report_bisect.c — the report's bisection section (see report_page.h):
 * each bisection's result, its steps as a table, and a chart of the arm's
 * top-1 agreement (Wilson 95%) over the commit range, coloured by class.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bisect.h"
#include "plot.h"
#include "report_page.h"
#include "store_bisect.h"

static unsigned class_rgb(const char *c) {
    return !strcmp(c, "good") ? 0x2e7d32 : !strcmp(c, "bad") ? 0xc62828 : !strcmp(c, "undecided") ? 0xe6a100 : 0x777777;
}

static void chart_bisection(page *pg, const lab_bisection *b, const lab_bisect_step *s, int64_t n) {
    lab_buf d = {0}, g = {0};
    int pts = 0;
    for (int64_t i = 0; i < n; i++) {
        if (s[i].arm_run_id <= 0 || s[i].n <= 0) continue;
        lab_buf_printf(&d, "%lld %.6f %.6f %.6f %u %lld\n", (long long)s[i].position, (double)s[i].k / (double)s[i].n,
                       s[i].lo, s[i].hi, class_rgb(s[i].cls), (long long)s[i].scale);
        pts++;
    }
    if (pts) {
        char name[64], lab[160], title[300];
        snprintf(name, sizeof name, "bisect-%lld", (long long)b->id);
        lab_buf_printf(&g, "set title \"bisection %lld: %s/%s, top-1 agreement over %.12s..%.12s\"\n", (long long)b->id,
                       lab_gp_label(b->experiment, title, sizeof title), lab_gp_label(b->arm, lab, sizeof lab),
                       b->good_commit, b->bad_commit);
        lab_buf_printf(&g, "set xlabel 'commit (0 = the good end, %lld = the bad end)'\nset ylabel 'top-1 agreement k/n'\n"
                           "set xrange [-0.5:%lld.5]\nset grid\nset key outside right top vertical box opaque\n",
                       (long long)b->n_commits, (long long)b->n_commits);
        if (b->first_bad[0])
            for (int64_t i = 0; i < n; i++)
                if (!strcmp(s[i].commit, b->first_bad)) {
                    lab_buf_printf(&g, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 2 lw 2 lc rgb '#c62828'\n",
                                   (long long)s[i].position, (long long)s[i].position);
                    break;
                }
        lab_buf_printf(&g, "plot 'src/%s.dat' using 1:2:3:4:5 with yerrorbars pt 7 ps 1.3 lw 2 lc rgb variable notitle,"
                           " NaN with points pt 7 lc rgb '#2e7d32' title 'good',"
                           " NaN with points pt 7 lc rgb '#c62828' title 'bad',"
                           " NaN with points pt 7 lc rgb '#e6a100' title 'undecided'", name);
        lab_buf_printf(&g, "\n");
        lab_rp_chart(pg, name, d.data, g.data, 900, 420,
                     "Top-1 agreement of the arm with its reference at each commit the bisection evaluated, with "
                     "its Wilson 95% interval, coloured by the commit's class; the dashed line marks the culprit.");
    }
    lab_buf_free(&d);
    lab_buf_free(&g);
}

int lab_rp_has_bisections(lab_store *st, int *has, char *err, size_t errlen) {
    lab_bisection *v = NULL;
    int64_t nb = 0;
    int have = 0, rc = lab_store_has_table(st, "bisections", &have, err, errlen);
    if (!rc && have) rc = lab_store_bisect_list(st, 0, &v, &nb, err, errlen);
    free(v);
    *has = !rc && nb > 0;
    return rc;
}

int lab_rp_section_bisections(lab_store *st, page *pg, char *err, size_t errlen) {
    int have = 0;
    int rc = lab_store_has_table(st, "bisections", &have, err, errlen);
    if (rc || !have) return rc;
    lab_bisection *v = NULL;
    int64_t nb = 0;
    if ((rc = lab_store_bisect_list(st, 0, &v, &nb, err, errlen)) || !nb) { free(v); return rc; }
    lab_buf *o = &pg->html, *m = &pg->md;
    lab_buf_printf(o, "<h2 id=\"bisect\">Bisections</h2>\n");
    lab_buf_printf(m, "## Bisections\n\n");
    for (int64_t i = 0; i < nb && !rc; i++) {
        const lab_bisection *b = &v[i];
        lab_bisect_step *s = NULL;
        int64_t n = 0;
        if ((rc = lab_store_bisect_steps(st, b->id, &s, &n, err, errlen))) break;
        char line[1400];
        lab_bisect_result_line(b, line, sizeof line);
        lab_buf_printf(o, "<h3>bisection %lld: ", (long long)b->id);
        lab_esc_html(o, b->experiment);
        lab_buf_printf(o, "/");
        lab_esc_html(o, b->arm);
        lab_buf_printf(o, " (%s, %lld commits, %lld builds%s)</h3>\n<p class=\"%s\"><b>%s</b>: ", b->mode,
                       (long long)b->n_commits, (long long)b->builds, b->nightly_id ? ", from a nightly" : "",
                       !strcmp(b->status, "FOUND") ? "bad" : "", b->status);
        lab_esc_html(o, line);
        lab_buf_printf(o, "</p>\n<table><tr><th>#</th><th>commit</th><th>subject</th><th>scale</th><th>top-1 k/n [95%%]</th>"
                          "<th>verdict</th><th>vs good end (lost/gained, p)</th><th>class</th><th>runs</th><th>note</th></tr>\n");
        lab_buf_printf(m, "### bisection %lld: ", (long long)b->id);
        lab_esc_md(m, b->experiment);
        lab_buf_printf(m, "/");
        lab_esc_md(m, b->arm);
        lab_buf_printf(m, "\n\n");
        lab_esc_md(m, line);
        lab_buf_printf(m, "\n\n| commit | subject | scale | top-1 | p vs good | class |\n|---|---|---|---|---|---|\n");
        for (int64_t j = 0; j < n; j++) {
            const lab_bisect_step *t = &s[j];
            char top[96] = "", pv[64] = "", runs[64] = "";
            if (t->arm_run_id > 0) {
                snprintf(top, sizeof top, "%lld/%lld [%.3f, %.3f]", (long long)t->k, (long long)t->n, t->lo, t->hi);
                snprintf(runs, sizeof runs, "%lld, %lld", (long long)t->arm_run_id, (long long)t->ref_run_id);
            }
            if (isfinite(t->p)) snprintf(pv, sizeof pv, "-%lld +%lld, p = %.3g", (long long)t->lost, (long long)t->gained, t->p);
            lab_buf_printf(o, "<tr class=\"%s\"><td>%lld</td><td><code>%.12s</code></td><td>", !strcmp(t->cls, "bad") ? "bad" : "",
                           (long long)t->position, t->commit);
            lab_esc_html(o, t->subject);
            lab_buf_printf(o, "</td><td>x%lld</td><td>%s</td><td>", (long long)t->scale, top);
            lab_esc_html(o, t->verdict);
            lab_buf_printf(o, "</td><td>%s</td><td>%s%s</td><td>%s</td><td>", pv, t->cls, t->built ? " (built)" : "", runs);
            lab_esc_html(o, t->reason);
            lab_buf_printf(o, "</td></tr>\n");
            lab_buf_printf(m, "| `%.12s` | ", t->commit);
            lab_esc_md(m, t->subject);
            lab_buf_printf(m, " | x%lld | %s | %s | %s |\n", (long long)t->scale, top, pv, t->cls);
        }
        lab_buf_printf(o, "</table>\n");
        lab_buf_printf(m, "\n");
        chart_bisection(pg, b, s, n);
        free(s);
    }
    free(v);
    return rc;
}
