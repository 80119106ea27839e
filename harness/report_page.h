/*
 * report_page.h — what report.c (the page: queries, sections, the command)
 * and report_charts.c (the gnuplot charts) share: the in-memory model of one
 * experiment's page, the page being written, and the small query helpers.
 * Private to the report; nothing else includes it.
 */
#ifndef LAB_REPORT_PAGE_H
#define LAB_REPORT_PAGE_H

#include <sqlite3.h>
#include <stdint.h>

#include "report.h"
#include "store.h"
#include "store_report.h"
#include "util.h"

typedef struct arm_view {
    char    name[128];
    char   *description;       /* from the spec; may be NULL */
    char   *spec_knobs;        /* "VT_A=1, VT_B=x" as the spec writes them */
    char   *spec_expect;       /* "residual.stream=bf16, ..." */
    int     expect_fail;
    int     is_reference;
    int64_t run_id;            /* 0: never run */
    char    status[16];
    char   *error;
    int     assertions_ok;     /* -1 unknown */
    char   *assertion_reason;
    char   *resolved_knobs;    /* non-default resolved knobs of the run */
    char    backend[16], started[32], code_version[160];
    /* comparison with the reference (has_cmp) */
    int     has_cmp;
    int64_t ref_run, k, n;
    double  lo, hi, kl_mean, kl_p99, kl_max, max_dl, rms_dp, mc_p;
    int64_t first_layer;       /* -1: none above tolerance */
    int     first_site;
    double  first_value, div_tol;
    int     has_verdict;
    char    verdict[16], direction[4], metric[32];
    double  threshold;
    double  tps, ppl;
    double  peak_frac;         /* benchmark runs: achieved FLOP/s over the peak (NAN: none) */
} arm_view;

typedef struct exp_view {
    char     id[128];
    char    *description, *hypothesis, *file;
    char     reference[128];
    int      has_decision, decision_ge;
    double   threshold;
    arm_view *arms;
    int      n_arms;
    char     spec_sha[65];
    char    *spec_json;
} exp_view;

typedef struct page {
    lab_store *st;
    const lab_report_opts *o;
    lab_report_result *res;
    char plot_dir[4096];
    int  plots_on;
    lab_buf html, md;
    char err[1024];
} page;


/* report_charts.c: each draws its chart(s) and puts them on the page, or
 * names on the page why a chart is missing. */
void lab_rp_chart_top1(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_divergence(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_kl_cdf(page *pg, const exp_view *e, const char *stem);
void lab_rp_chart_history(page *pg, const exp_view *e, const char *stem_hist, const char *stem_tps);

#endif
