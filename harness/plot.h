/*
 * plot.h — charts for `vtlab report` and `vtlab nightly`, drawn by gnuplot.
 *
 * gnuplot runs as a subprocess on a script and data files this module
 * writes; nothing is linked. A chart is one script body (everything but the
 * terminal and output lines) rendered twice: PNG (pngcairo, or libgd's png
 * when cairo is missing) for quick viewing and SVG for the page, which
 * scales. Scripts and data stay in DIR/src/ so a chart can be redrawn or
 * inspected by hand; gnuplot's output and errors go to DIR/src/NAME.log.
 *
 * Images appear whole or not at all: gnuplot writes NAME.png.PID.tmp and
 * NAME.svg.PID.tmp, renamed only when it exits 0 and both are non-empty.
 * gnuplot does not outlive vtlab: it runs in a process group of its own,
 * which vtlab signals (SIGTERM, then SIGKILL after 1 s) and reaps when it is
 * interrupted (SIGINT, SIGTERM, SIGHUP) while a chart is drawn, removing the
 * chart's temporary files before it dies of the signal (or, under a handler
 * of the command's own such as nightly's, returns "interrupted"; no further
 * chart starts); on Linux it is also killed when vtlab dies by SIGKILL
 * (PR_SET_PDEATHSIG). Temporary files a SIGKILLed vtlab left are removed
 * by the next chart drawn into the folder (lab_sweep_stale_tmp_tree).
 *
 * Every string that reaches a script (titles, arm names, commits) passes
 * through lab_gp_label, which keeps a safe character set: text from the
 * database never becomes gnuplot syntax. Terminals run with `noenhanced`, so
 * '_' and '^' in names print as themselves.
 */
#ifndef LAB_PLOT_H
#define LAB_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* 1 when a usable gnuplot is on PATH (checked once per process); else 0
 * and why says what is missing. */
int lab_plot_available(char *why, size_t whylen);

/* Writes DIR/src/NAME.dat (may be NULL: no data file), DIR/src/NAME.gp and
 * renders DIR/NAME.png and DIR/NAME.svg at width x height pixels. The body
 * refers to its data as 'src/NAME.dat' (gnuplot runs with DIR as its current
 * directory). NAME must be [A-Za-z0-9._-]+. Returns LAB_OK, or LAB_EIO with
 * err naming the script and the first line of gnuplot's complaint. */
int lab_plot_render(const char *dir, const char *name, const char *data, const char *body, int width,
                    int height, char *err, size_t errlen);

/* Removes the files of dir named "*.PID.tmp" (the temporary files of
 * lab_cli_write_file_atomic and of the charts) whose process PID no longer
 * exists: what a killed writer left. Files of live processes, this one
 * included, are kept. Not recursive. Returns how many were removed (a folder
 * that cannot be read: 0). */
int64_t lab_sweep_stale_tmp(const char *dir);

/* lab_sweep_stale_tmp on dir and on its sub-folders down to depth levels
 * (symbolic links not followed): what a command that writes the tree (a
 * report's folder: depth 2 reaches plots/src) calls when it starts. */
int64_t lab_sweep_stale_tmp_tree(const char *dir, int depth);

/* Copies s into out (size n) keeping [A-Za-z0-9 ._:/+#=,()-], every other
 * byte becomes '_'; truncated to fit. Returns out. */
char *lab_gp_label(const char *s, char *out, size_t n);

/* A file-name part from s: [A-Za-z0-9._-] kept, others '_', at most 40. */
char *lab_file_part(const char *s, char *out, size_t n);

#endif
