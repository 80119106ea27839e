/*
 * report.h — `vtlab report`: results.db as a static page a person reads.
 *
 * What it writes into the output directory (report/ by default):
 *   index.html   one self-contained page (inline CSS, no script, no network);
 *                per experiment: the arms and their knobs, the latest run of
 *                each arm with its verdict and interval, the confound flags
 *                with their reasons, a probe summary and the charts; then the
 *                ledger's flags on claims and the nightly history
 *   summary.md   the same in brief, as markdown
 *   plots/       the charts as NAME.png and NAME.svg, with their gnuplot
 *                scripts and data under plots/src/
 * The report reads the database only (it never writes it) and is safe to run
 * while a sweep writes: it sees the last committed state.
 *
 * Escaping: every string that comes from a spec or the database goes through
 * lab_esc_html (HTML, and the XML/Atom that nightly writes) or lab_esc_md
 * (markdown); invalid UTF-8 and control characters are replaced, so the
 * output is well-formed whatever the database holds.
 */
#ifndef LAB_REPORT_H
#define LAB_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "util.h"

typedef struct lab_report_opts {
    const char *out_dir;     /* report/ by default */
    const char *db_label;    /* how the page names the database (its path) */
    int         plots;       /* 0: no gnuplot (the page says so) */
} lab_report_opts;

typedef struct lab_report_result {
    int64_t n_experiments;
    int64_t n_plots;         /* charts drawn (each as PNG and SVG) */
    int64_t plot_failures;   /* charts gnuplot could not draw (named on stderr and in the page) */
    char    plots_skipped[256]; /* why no chart was drawn at all ("" when they were) */
} lab_report_result;

/* Writes the report. Returns LAB_OK (plot failures are counted, not fatal),
 * or a status with err filled when the database cannot be read or a file
 * cannot be written. Files appear whole (written to .tmp, then renamed). */
int lab_report_write(lab_store *st, const lab_report_opts *o, lab_report_result *res, char *err, size_t errlen);

/* `vtlab report` with its options parsed (lab.c): the report of database db
 * into out (plots: draw the charts). Returns the exit status: 0, 1 when a
 * chart could not be drawn (the rest is written), 2 for a missing database. */
int lab_report_cmd(const char *db, const char *out, int plots);


#endif
