/*
 * report_charts.c — the report's gnuplot charts (see report.c for the page):
 * top-1 agreement with Wilson bars, per-layer divergence with the layer kinds
 * shaded, the per-position KL CDF, and the nightly history of each arm's
 * metrics and throughput. Each chart is a gnuplot script over a small text
 * data file (plot.h); one that cannot be drawn is named on the page and on
 * stderr, and the rest of the report is still written.
 *
 * Each chart is a pure function of the experiment's view (exp_view, read by
 * store_report.c): this file reads no database. Layer kinds for the
 * divergence chart are those of the reference run (lab_rp_read_layer_kinds:
 * recorded with the run, else from its probe records); unknown ones leave the
 * chart unshaded. No report opens a model.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vt.h"
#include "plot.h"
#include "report_page.h"

/* ------------------------------------------------------------ layout */

/* The right margin, in characters, of a chart whose key sits outside on the
 * right and whose longest key title is maxlen characters: the title, its
 * sample and the gaps. gnuplot sizes the margin from its own estimate of a
 * character's width, which the PNG terminal's font exceeds: left to itself
 * it drew a long arm name over the plot frame. */
static int key_rmargin(int maxlen) { return maxlen + 8; }

/* The longest of a chart's own key titles (a NULL-terminated list). */
static int longest_own(const char *const *own) {
    int n = 0;
    for (; own && *own; own++)
        if ((int)strlen(*own) > n) n = (int)strlen(*own);
    return n;
}

/* The longest of the arms' key titles (name, and " (replay)" for a replay)
 * and of the chart's own. */
static int longest_title(const exp_view *e, const char *const *own) {
    int n = longest_own(own);
    for (int i = 0; i < e->n_arms; i++) {
        int l = (int)strlen(e->arms[i].name) + (e->arms[i].expect_fail ? 9 : 0);
        if (l > n) n = l;
    }
    return n;
}

/* A y (or x) range for values in [lo, hi] that gnuplot cannot autoscale:
 * one value (a single nightly, arms that all agree) is an "empty range",
 * which gnuplot widens with a warning. The range is set around it instead
 * (log: a factor 2 either side). Nothing when the values vary or there are
 * none. axis: 'x' or 'y'. */
static void flat_range(lab_buf *b, char axis, double lo, double hi, int logscale) {
    if (!isfinite(lo) || !isfinite(hi) || hi > lo * (1 + 1e-9) + 1e-300) return;
    if (logscale && lo > 0) lab_buf_printf(b, "set %crange [%.6g:%.6g]\n", axis, lo / 2, hi * 2);
    else {
        double pad = fabs(lo) > 1e-12 ? fabs(lo) * 0.05 : 0.05;
        lab_buf_printf(b, "set %crange [%.6g:%.6g]\n", axis, lo - pad, hi + pad);
    }
}

/* ------------------------------------------------------------ charts */


/* Draws one chart and puts it on the page (or names why it is missing). */
static void chart(page *pg, const char *name, const char *data, const char *body, int w, int h, const char *caption) {
    if (!pg->plots_on) return;
    char err[1024] = "";
    int rc = lab_plot_render(pg->plot_dir, name, data, body, w, h, err, sizeof err);
    if (rc) {
        pg->res->plot_failures++;
        fprintf(stderr, "vtlab report: chart %s not drawn: %s\n", name, err);
        lab_buf_printf(&pg->html, "<p class=\"bad\">chart %s not drawn: ", name);
        lab_esc_html(&pg->html, err);
        lab_buf_printf(&pg->html, "</p>\n");
        return;
    }
    pg->res->n_plots++;
    lab_buf_printf(&pg->html,
                   "<figure><a href=\"plots/%s.png\"><img src=\"plots/%s.svg\" alt=\"%s\" width=\"%d\"></a>"
                   "<figcaption>", name, name, name, w);
    lab_esc_html(&pg->html, caption);
    lab_buf_printf(&pg->html, " (<a href=\"plots/%s.png\">PNG</a>, <a href=\"plots/%s.svg\">SVG</a>, "
                              "<a href=\"plots/src/%s.gp\">script</a>)</figcaption></figure>\n", name, name, name);
    lab_buf_printf(&pg->md, "![%s](plots/%s.png)\n\n", name, name);
}

void lab_rp_chart(page *pg, const char *name, const char *data, const char *body, int w, int h, const char *caption) {
    chart(pg, name, data, body, w, h, caption);
}

/* A point's colour: its verdict (green SUPPORTED, red REFUTED, amber
 * INCONCLUSIVE, grey none), so a glance at the chart says what was decided. */
static unsigned verdict_rgb(const arm_view *a) {
    if (!a->has_verdict) return 0x777777;
    return !strcmp(a->verdict, "SUPPORTED") ? 0x2e7d32 : !strcmp(a->verdict, "REFUTED") ? 0xc62828 : 0xe6a100;
}

/* An arm's colour, the same in every line chart of the page: by its place
 * in the experiment's spec (the reference dark grey). Green, amber and red
 * are left to verdicts. */
static const char *arm_rgb(const exp_view *e, const arm_view *a) {
    static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#9467bd", "#8c564b",
                                          "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
    if (a->is_reference) return "#333333";
    int k = 0;
    for (const arm_view *b = e->arms; b < a; b++) k += !b->is_reference;
    return palette[k % (int)(sizeof palette / sizeof palette[0])];
}

void lab_rp_chart_top1(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0};
    int n = 0;
    double ymin = 1;
    char lab[160], title[300], name[200];
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference || a->n <= 0) continue;
        double v = (double)a->k / (double)a->n;
        /* a replay arm (expect_assertions: fail) says so under its point and is drawn hollow */
        snprintf(name, sizeof name, "%s%s", a->name, a->expect_fail ? " (replay)" : "");
        lab_buf_printf(&d, "\"%s\" %.6f %.6f %.6f %lld %lld %u %d\n", lab_gp_label(name, lab, sizeof lab), v, a->lo, a->hi,
                       (long long)a->k, (long long)a->n, verdict_rgb(a), a->expect_fail ? 6 : 7);
        if (a->lo < ymin) ymin = a->lo;
        n++;
    }
    if (!n) { lab_buf_free(&d); return; }
    if (e->has_decision && e->threshold < ymin) ymin = e->threshold;
    ymin = floor((ymin - 0.05) * 10) / 10;
    if (ymin < 0) ymin = 0;
    lab_buf_printf(&b, "set title \"%s: top-1 agreement with reference %s (Wilson 95%% interval)\"\n",
                   lab_gp_label(e->id, title, sizeof title), lab_gp_label(e->reference, lab, sizeof lab));
    /* the key sits below the plot, never on the data (it once hid a replay's interval) */
    static const char *const own[] = {"threshold 0.999 (lo >= it: SUPPORTED)", "replay of a defect (hollow)", NULL};
    lab_buf_printf(&b, "set ylabel 'top-1 agreement k/n (fraction of scored positions)'\nset xlabel 'arm'\n"
                       "set xrange [-0.5:%d.5]\nset yrange [%.2f:1.02]\nset grid ytics\n"
                       "set key outside right top vertical\nset rmargin %d\n"
                       "set offsets 0,0,0,0\nset xtics noenhanced rotate by -15\nset bmargin 8\n", n - 1, ymin,
                   key_rmargin(longest_own(own)));
    lab_buf_printf(&b, "plot 'src/%s.dat' using 0:2:3:4:8:7:xticlabels(1) with yerrorbars pt variable ps 1.5 lw 2"
                       " lc rgb variable notitle,"
                       " '' using 0:2:(sprintf('%%d/%%d', $5, $6)) with labels offset 4,0 notitle,"
                       " NaN with points pt 7 ps 1.5 lc rgb '#2e7d32' title 'SUPPORTED',"
                       " NaN with points pt 7 ps 1.5 lc rgb '#e6a100' title 'INCONCLUSIVE',"
                       " NaN with points pt 7 ps 1.5 lc rgb '#c62828' title 'REFUTED',"
                       " NaN with points pt 6 ps 1.5 lc rgb '#555555' title 'replay of a defect (hollow)'", stem);
    if (e->has_decision)
        lab_buf_printf(&b, ", %.6g with lines dt 2 lw 2 lc rgb '#1f5fa8' title 'threshold %.3g (%s)'", e->threshold,
                       e->threshold, e->decision_ge ? "lo >= it: SUPPORTED" : "hi <= it: SUPPORTED");
    lab_buf_printf(&b, "\n");
    chart(pg, stem, d.data, b.data, 1000, 480, "Top-1 agreement of each arm with the reference arm, with its Wilson 95% "
                                              "interval, coloured by verdict (replays of a defect hollow), and the "
                                              "experiment's decision threshold.");
    lab_buf_free(&d);
    lab_buf_free(&b);
}

void lab_rp_chart_divergence(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0};
    char lab[160], title[300];
    int blocks = 0;
    double tol = NAN, ylo = INFINITY, yhi = -INFINITY;
    const lab_rp_layer_kinds *lk = NULL;   /* of the reference of the last arm drawn */
    lab_buf plots = {0};
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference) continue;
        if (!a->n_div) continue;
        for (int64_t j = 0; j < a->n_div; j++) {
            double v = a->div[j].rel_l2;
            if (!(v > 1e-10)) v = 1e-10;       /* log scale: exact zero is drawn at the floor */
            if (v > 1e3) v = 1e3;              /* 1e308 stands for +inf */
            if (v < ylo) ylo = v;
            if (v > yhi) yhi = v;
            lab_buf_printf(&d, "%.3f %.6g\n", (double)a->div[j].layer + (a->div[j].site ? 0.75 : 0.25), v);
        }
        lab_buf_printf(&d, "\n\n");
        if (isnan(tol) && !isnan(a->div_tol)) tol = a->div_tol;
        lk = &a->ref_kinds;
        /* a replay of a defect is drawn dashed with hollow points and says so */
        char nm[200];
        snprintf(nm, sizeof nm, "%s%s", a->name, a->expect_fail ? " (replay)" : "");
        lab_buf_printf(&plots, "%s'src/%s.dat' index %d using 1:2 with linespoints lw 2 %s ps 0.8 lc rgb '%s' title \"%s\"",
                       blocks ? ", " : "", stem, blocks, a->expect_fail ? "dt 2 pt 6" : "pt 7", arm_rgb(e, a),
                       lab_gp_label(nm, lab, sizeof lab));
        blocks++;
    }
    if (!blocks) { lab_buf_free(&d); lab_buf_free(&plots); return; }
    if (!isnan(tol) && tol > 0) { if (tol < ylo) ylo = tol; if (tol > yhi) yhi = tol; }
    int nl = lk->n;
    lab_buf_printf(&b, "set title \"%s: relative L2 distance of the residual stream from reference %s, per layer\"\n",
                   lab_gp_label(e->id, title, sizeof title), lab_gp_label(e->reference, lab, sizeof lab));
    static const char *const own[] = {"MLA attention (shaded)", "tolerance 0.0001", NULL};
    lab_buf_printf(&b, "set logscale y\nset format y '%%.0e'\n"
                       "set ylabel 'rel. L2 ||h_arm - h_ref|| / ||h_ref|| (log)'\n"
                       "set xlabel 'layer (left half: after attention, right half: after FFN)'\n"
                       "set grid ytics\nset key outside right top\nset rmargin %d\n",
                   key_rmargin(longest_title(e, own)));
    flat_range(&b, 'y', ylo, yhi, 1);
    if (nl > 0) {
        lab_buf_printf(&b, "set xrange [0:%d]\nset xtics (", nl);
        for (int l = 0; l < nl; l++)
            lab_buf_printf(&b, "%s\"%d\\n%s\\n%s\" %d.5", l ? ", " : "", l, lk->attn[l] == 'K' ? "KDA" : "MLA",
                           lk->ffn[l] == 'E' ? "MoE" : "dense", l);
        lab_buf_printf(&b, ")\nset bmargin 7\nset xlabel offset 0,-1.5\n");
        for (int l = 0; l < nl; l++) {
            if (lk->ffn[l] == 'E')
                lab_buf_printf(&b, "set object rect from %d.5, graph 0 to %d, graph 1 fc rgb '#f6d7a7' fs solid 0.45"
                                   " noborder behind\n", l, l + 1);
            if (lk->attn[l] == 'M')
                lab_buf_printf(&b, "set object rect from %d, graph 0 to %d.5, graph 1 fc rgb '#bcd4f0' fs solid 0.45"
                                   " noborder behind\n", l, l);
            lab_buf_printf(&b, "set arrow from %d, graph 0 to %d, graph 1 nohead lc rgb '#999999' dt 3\n", l, l);
        }
    }
    lab_buf_printf(&b, "plot %s", plots.data);
    if (!isnan(tol))
        lab_buf_printf(&b, ", %.6g with lines dt 2 lw 1.5 lc rgb '#c0392b' title 'tolerance %.3g'", tol, tol);
    if (nl > 0)
        lab_buf_printf(&b, ", keyentry with boxes fc rgb '#f6d7a7' fs solid 0.45 title 'MoE FFN (shaded)'"
                           ", keyentry with boxes fc rgb '#bcd4f0' fs solid 0.45 title 'MLA attention (shaded)'");
    lab_buf_printf(&b, "\n");
    char cap[512];
    snprintf(cap, sizeof cap, "Per-layer divergence of each arm from the reference (log scale); exact zeros are drawn at "
                              "1e-10. Layer kinds from %s.%s", nl ? lk->source : "nowhere",
             nl ? " A defect in the MoE path shows as a jump at the first MoE layer." : " (unknown: no probes, model not found)");
    chart(pg, stem, d.data, b.data, 1000, 520, cap);
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&plots);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

void lab_rp_chart_kl_cdf(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0}, plots = {0};
    char lab[160], title[300];
    int blocks = 0, all_exact = 1;
    double xlo = INFINITY, xhi = -INFINITY;
    lab_buf notes = {0};
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference) continue;
        int64_t n = a->n_kl;
        if (n == 0) continue;
        double *kl = malloc((size_t)n * sizeof *kl);
        if (!kl) continue;                 /* out of memory: the arm is left out, as before */
        memcpy(kl, a->kl, (size_t)n * sizeof *kl);
        double sum = 0;
        for (int64_t j = 0; j < n; j++) sum += kl[j];
        qsort(kl, (size_t)n, sizeof *kl, cmp_double);
        for (int64_t j = 0; j < n; j++)
            lab_buf_printf(&d, "%.6g %.6f\n", kl[j] > 1e-9 ? kl[j] : 1e-9, (double)(j + 1) / (double)n);
        if ((kl[0] > 1e-9 ? kl[0] : 1e-9) < xlo) xlo = kl[0] > 1e-9 ? kl[0] : 1e-9;
        if ((kl[n - 1] > 1e-9 ? kl[n - 1] : 1e-9) > xhi) xhi = kl[n - 1] > 1e-9 ? kl[n - 1] : 1e-9;
        lab_buf_printf(&d, "\n\n");
        free(kl);
        if (!a->kl_exact) all_exact = 0;
        lab_buf_printf(&notes, "%s%s: mean %.3g (stored exact mean %.3g)", notes.len ? "; " : "", a->name, sum / (double)n,
                       a->kl_mean);
        lab_buf_printf(&plots, "%s'src/%s.dat' index %d using 1:2 with steps lw 2 %slc rgb '%s' title \"%s\"",
                       blocks ? ", " : "", stem, blocks, a->expect_fail ? "dt 2 " : "", arm_rgb(e, a),
                       lab_gp_label(a->name, lab, sizeof lab));
        blocks++;
    }
    if (!blocks) { lab_buf_free(&d); lab_buf_free(&plots); lab_buf_free(&notes); return; }
    lab_buf_printf(&b, "set title \"%s: distribution of KL(ref || arm) over scored positions\"\n",
                   lab_gp_label(e->id, title, sizeof title));
    lab_buf_printf(&b, "set logscale x\nset format x '%%.0e'\nset xlabel 'KL(P_ref || P_arm) per position, nats (log; "
                       "zeros drawn at 1e-9)'\nset ylabel 'fraction of positions <= x (CDF)'\nset yrange [0:1.02]\n"
                       "set grid\nset key top left box opaque\n");
    flat_range(&b, 'x', xlo, xhi, 1);
    lab_buf_printf(&b, "plot %s\n", plots.data);
    char cap[1024];
    snprintf(cap, sizeof cap, "Cumulative distribution of the per-position KL divergence of each arm from the reference%s. %s.",
             all_exact ? " (exact, from the stored f16 full logits)"
                       : " (estimated from the stored top-k log-probabilities: the mass outside the reference's top-k "
                         "is lumped into one bucket, so small KLs are under-estimated)",
             notes.data);
    chart(pg, stem, d.data, b.data, 900, 480, cap);
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&plots);
    lab_buf_free(&notes);
}

/* ------------------------------------------------------------ nightly history charts */

/* 1 when the nightly flagged a regression of one of kinds ("accuracy,check")
 * on this arm of the experiment. */
static int regressed(const exp_view *e, int64_t nightly, const char *arm, const char *kinds) {
    for (int64_t i = 0; i < e->n_regs; i++) {
        const lab_rp_regression *r = &e->regs[i];
        if (r->nightly == nightly && !strcmp(r->arm, arm) && strstr(kinds, r->kind)) return 1;
    }
    return 0;
}

/* The x axis of the history charts: nightly i (in order) at x[i] = 1, 2, ...
 * of the points, labelled "#ID MM-DD\nCOMMIT" into xt. Returns the number of
 * nightlies; xs[j] is point j's x. */
static int history_axis(const exp_view *e, int *xs, lab_buf *xt) {
    int nx = 0;
    int64_t last_n = -1;
    char lab[160];
    for (int64_t j = 0; j < e->n_hist; j++) {
        const lab_rp_hist_point *p = &e->hist[j];
        if (p->nightly != last_n) {
            last_n = p->nightly;
            nx++;
            lab_buf_printf(xt, "%s\"#%lld %.5s\\n%s\" %d", xt->len ? ", " : "", (long long)p->nightly,
                           strlen(p->when) >= 10 ? p->when + 5 : p->when, lab_gp_label(p->commit, lab, sizeof lab), nx);
        }
        xs[j] = nx;
    }
    return nx;
}

/* The plot lines of the history chart: one data block per arm with points
 * (repeat 0), its regression marks into mk. Returns the number of blocks. */
static int history_data(const exp_view *e, const int *xs, const char *stem, lab_buf *d, lab_buf *mk, lab_buf *p1,
                        lab_buf *p2, lab_buf *p3) {
    int blk = 0;
    char lab[160];
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        int rows = 0;
        for (int64_t j = 0; j < e->n_hist; j++) {
            const lab_rp_hist_point *p = &e->hist[j];
            if (strcmp(p->arm, a->name) || p->rep != 0) continue;
            lab_buf_printf(d, "%d %.6g %.6g %.6g %.6g %.6g\n", xs[j], p->top1, p->lo, p->hi, p->kl > 1e-12 ? p->kl : 1e-12,
                           p->ppl);
            rows++;
            if (regressed(e, p->nightly, a->name, "accuracy,check,audit") && !isnan(p->top1))
                lab_buf_printf(mk, "%d %.6g top1\n", xs[j], p->top1);
            if (regressed(e, p->nightly, a->name, "numerics") && !isnan(p->kl))
                lab_buf_printf(mk, "%d %.6g kl\n", xs[j], p->kl > 1e-12 ? p->kl : 1e-12);
        }
        if (!rows) continue;
        lab_buf_printf(d, "\n\n");
        lab_gp_label(a->name, lab, sizeof lab);
        if (!a->is_reference) {
            lab_buf_printf(p1, "%s'src/%s.dat' index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 lc rgb '%s' title \"%s\"",
                           p1->len ? ", " : "", stem, blk, arm_rgb(e, a), lab);
            lab_buf_printf(p2, "%s'src/%s.dat' index %d using 1:5 with linespoints lw 2 pt 7 lc rgb '%s' title \"%s\"",
                           p2->len ? ", " : "", stem, blk, arm_rgb(e, a), lab);
        }
        lab_buf_printf(p3, "%s'src/%s.dat' index %d using 1:6 with linespoints lw 2 pt 7 lc rgb '%s' title \"%s\"",
                       p3->len ? ", " : "", stem, blk, arm_rgb(e, a), lab);
        blk++;
    }
    return blk;
}

/* The range of one history panel's values over repeat 0: which 0 the
 * top-1 intervals, 1 the mean KL (floored as drawn), of the arms other than
 * the reference; 2 the perplexity of every arm. */
static void hist_range(const exp_view *e, int which, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int64_t j = 0; j < e->n_hist; j++) {
        const lab_rp_hist_point *p = &e->hist[j];
        if (p->rep != 0 || (which < 2 && p->is_ref)) continue;
        double a = which == 0 ? p->lo : which == 1 ? (p->kl > 1e-12 ? p->kl : 1e-12) : p->ppl;
        double b = which == 0 ? p->hi : a;
        if (isfinite(a) && a < *lo) *lo = a;
        if (isfinite(b) && b > *hi) *hi = b;
    }
}

/* History of the accuracy and numerics metrics: repeat 0 of each arm. */
static void chart_metrics_history(page *pg, const exp_view *e, const int *xs, int nx, const char *xt, const char *stem) {
    lab_buf d = {0}, b = {0}, p1 = {0}, p2 = {0}, p3 = {0}, mk = {0};
    char title[300];
    int blk = history_data(e, xs, stem, &d, &mk, &p1, &p2, &p3);
    if (blk) {
        /* The regression marks are their own data file block at the end. */
        int mblk = blk;
        lab_buf_printf(&d, "%s\n\n", mk.len ? mk.data : "-1 NaN none");
        const char *mark = "with points pt 6 ps 3 lw 3 lc rgb '#d62728' title 'regression flagged'";
        static const char *const own[] = {"regression flagged", NULL};
        double lo, hi;
        /* the x labels are two lines (nightly and date, commit): gnuplot's
         * own bottom margin has room for one, and cut the commit off */
        lab_buf_printf(&b, "set multiplot layout %d,1 title \"%s: nightly history (repeat 0 of each arm)\"\n"
                           "set xrange [0.5:%d.5]\nset xtics (%s)\nset grid\nset key outside right top\n"
                           "set lmargin 12\nset rmargin %d\nset bmargin 3.5\n",
                       e->synthetic ? 2 : 3, lab_gp_label(e->id, title, sizeof title), nx, xt,
                       key_rmargin(longest_title(e, own)));
        hist_range(e, 0, &lo, &hi);
        flat_range(&b, 'y', lo, hi, 0);
        if (p1.len)
            lab_buf_printf(&b, "set ylabel 'top-1 agreement k/n'\nplot %s, 'src/%s.dat' index %d using 1:(stringcolumn(3) eq 'top1' ? $2 : NaN) %s\n",
                           p1.data, stem, mblk, mark);
        else lab_buf_printf(&b, "set ylabel 'top-1 agreement'\nset yrange [0:1]\nplot NaN notitle\n");
        lab_buf_printf(&b, "set autoscale y\n");
        hist_range(e, 1, &lo, &hi);
        flat_range(&b, 'y', lo, hi, 1);
        if (p2.len)
            lab_buf_printf(&b, "set logscale y\nset format y '%%.0e'\nset ylabel 'KL mean vs ref, nats (log)'\n"
                               "plot %s, 'src/%s.dat' index %d using 1:(stringcolumn(3) eq 'kl' ? $2 : NaN) %s\n"
                               "unset logscale y\nset format y '%%g'\n", p2.data, stem, mblk, mark);
        else lab_buf_printf(&b, "set ylabel 'KL mean'\nset yrange [0:1]\nplot NaN notitle\n");
        lab_buf_printf(&b, "set autoscale y\n");
        /* A synthetic model's weights are random: its perplexity is about the
         * vocabulary size whatever the arm, so it is not drawn (the caption
         * says so) rather than drawn as if it meant something. */
        hist_range(e, 2, &lo, &hi);
        if (!e->synthetic) flat_range(&b, 'y', lo, hi, 0);
        if (!e->synthetic) lab_buf_printf(&b, "set ylabel 'perplexity'\nplot %s\n", p3.data);
        lab_buf_printf(&b, "unset multiplot\n");
        chart(pg, stem, d.data, b.data, 1000, e->synthetic ? 600 : 820,
              e->synthetic
                  ? "Nightly history (x: nightly id, UTC date, commit): top-1 agreement with its interval and mean KL from "
                    "the reference; red rings mark nightlies that flagged a regression on that arm. Perplexity is not "
                    "shown: the model is synthetic (random weights), so its perplexity is about the vocabulary size for "
                    "every arm and says nothing about quality."
                  : "Nightly history (x: nightly id, UTC date, commit): top-1 agreement with its interval, mean KL from the "
                    "reference, and perplexity; red rings mark nightlies that flagged a regression on that arm.");
    }
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&p1);
    lab_buf_free(&p2);
    lab_buf_free(&p3);
    lab_buf_free(&mk);
}

/* Throughput data: per arm, per nightly x, the median over the repeats with
 * their range; performance regression marks into tm. Returns the blocks. */
static int throughput_data(const exp_view *e, const int *xs, int nx, const char *stem, lab_buf *td, lab_buf *tm,
                           lab_buf *tp) {
    int blk = 0;
    char lab[160];
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        int rows = 0;
        for (int x = 1; x <= nx; x++) {
            double v[128];
            int nv = 0;
            int64_t nid = 0;
            for (int64_t j = 0; j < e->n_hist && nv < 128; j++)
                if (xs[j] == x && !strcmp(e->hist[j].arm, a->name) && !isnan(e->hist[j].tps)) {
                    v[nv++] = e->hist[j].tps;
                    nid = e->hist[j].nightly;
                }
            if (!nv) continue;
            qsort(v, (size_t)nv, sizeof *v, cmp_double);
            double med = nv % 2 ? v[nv / 2] : 0.5 * (v[nv / 2 - 1] + v[nv / 2]);
            lab_buf_printf(td, "%d %.6g %.6g %.6g\n", x, med, v[0], v[nv - 1]);
            if (regressed(e, nid, a->name, "performance")) lab_buf_printf(tm, "%d %.6g\n", x, med);
            rows++;
        }
        if (!rows) continue;
        lab_buf_printf(td, "\n\n");
        lab_buf_printf(tp, "%s'src/%s.dat' index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 lc rgb '%s' title \"%s\"",
                       tp->len ? ", " : "", stem, blk, arm_rgb(e, a), lab_gp_label(a->name, lab, sizeof lab));
        blk++;
    }
    return blk;
}

/* Throughput: median over repeats, with the range of the repeats. */
static void chart_throughput(page *pg, const exp_view *e, const int *xs, int nx, const char *xt, const char *stem) {
    lab_buf td = {0}, tb = {0}, tp = {0}, tm = {0};
    char title[300];
    int blk = throughput_data(e, xs, nx, stem, &td, &tm, &tp);
    if (blk) {
        lab_buf_printf(&td, "%s\n\n", tm.len ? tm.data : "-1 NaN");
        static const char *const own[] = {"performance regression flagged", NULL};
        /* two-line x labels: the bottom margin is set (history chart) */
        lab_buf_printf(&tb, "set title \"%s: throughput per nightly (median of repeats, bars: min..max)\"\n"
                            "set xrange [0.5:%d.5]\nset xtics (%s)\nset grid\nset key outside right top\n"
                            "set rmargin %d\nset bmargin 3.5\nset ylabel 'tokens per second (forward pass)'\n"
                            "set yrange [0:*]\n"
                            "plot %s, 'src/%s.dat' index %d using 1:2 with points pt 6 ps 3 lw 3 lc rgb '#d62728'"
                            " title 'performance regression flagged'\n",
                       lab_gp_label(e->id, title, sizeof title), nx, xt, key_rmargin(longest_title(e, own)), tp.data,
                       stem, blk);
        chart(pg, stem, td.data, tb.data, 1000, 460,
              "Throughput history (x: nightly id, UTC date, commit): dataset tokens per second of forward pass, median over the repeats of each nightly "
              "with their range; red rings mark a flagged performance regression.");
    }
    lab_buf_free(&td);
    lab_buf_free(&tb);
    lab_buf_free(&tp);
    lab_buf_free(&tm);
}

void lab_rp_chart_history(page *pg, const exp_view *e, const char *stem_hist, const char *stem_tps) {
    if (!e->has_history || !e->n_hist) return;
    int *xs = malloc((size_t)e->n_hist * sizeof *xs);
    lab_buf xt = {0};
    int nx = xs ? history_axis(e, xs, &xt) : 0;
    if (nx) {
        chart_metrics_history(pg, e, xs, nx, xt.data, stem_hist);
        chart_throughput(pg, e, xs, nx, xt.data, stem_tps);
    }
    lab_buf_free(&xt);
    free(xs);
}
