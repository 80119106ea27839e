/*
 * report_page.h — what report.c (the page: its sections, the command) and
 * report_charts.c (the gnuplot charts) share: the page being written. The
 * view model both write from (exp_view, arm_view, lab_rp_page_view) and the
 * readers that fill it are store_report.h. Private to the report; nothing
 * else includes it.
 */
#ifndef LAB_REPORT_PAGE_H
#define LAB_REPORT_PAGE_H

#include <stdint.h>

#include "report.h"
#include "store.h"
#include "store_report.h"
#include "util.h"

/* The page being written: its HTML and markdown, and where its charts go. */
typedef struct page {
    const lab_report_opts *o;
    lab_report_result *res;
    char plot_dir[4096];
    int  plots_on;
    int  has_bisect;        /* the page has a bisections section (the navigation links only what exists) */
    int  has_localize;      /* ... and a localizations section */
    lab_buf html, md;
} page;


/* report_charts.c: each draws its chart(s) from the experiment's view (the
 * chart data are read only when charts are on) and puts them on the page, or
 * names on the page why a chart is missing. They read nothing else. */
void lab_rp_chart_top1(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_divergence(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_kl_cdf(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_history(page *pg, const exp_view *e, const char *stem_hist, const char *stem_tps);

/* One chart on the page (report_charts.c), for the sections outside it. */
void lab_rp_chart(page *pg, const char *name, const char *data, const char *body, int w, int h, const char *caption);

/* report_bisect.c: *has = 1 when the database has a bisection to show. */
int lab_rp_has_bisections(lab_store *st, int *has, char *err, size_t errlen);

/* report_bisect.c: the bisections of `vtlab bisect`, each as a table of its
 * steps and a chart of top-1 agreement over the commit range. Nothing when
 * the database has none (or no bisections table: an older read-only file). */
int lab_rp_section_bisections(lab_store *st, page *pg, char *err, size_t errlen);

/* report_localize.c: *has = 1 when the database has a localization to show;
 * the localizations of `vtlab localize`, each with a chart of its units alone
 * and a table of its steps (nothing without any, or without the table). */
int lab_rp_has_localizations(lab_store *st, int *has, char *err, size_t errlen);
int lab_rp_section_localizations(lab_store *st, page *pg, char *err, size_t errlen);

#endif
