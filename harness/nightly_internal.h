/*
 * nightly_internal.h — for the nightly's own files (harness/nightly*.c)
 * only: what one of them defines and another calls. The public contract
 * (`vtlab nightly`, `vtlab ack`, the comparison and the three outputs) is
 * nightly.h; nothing outside nightly*.c includes this header.
 *
 * Who uses what, so that the files stay a ladder with no circle:
 *   nightly.c          the night's flow: calls the comparison, the outputs,
 *                      the confounds and, to re-measure, the throughput
 *                      judgement;
 *   nightly_compare.c  the comparison: calls the throughput judgement;
 *   nightly_perf.c     the throughput judgement: calls the store only;
 *   nightly_outputs.c  junit.xml, nightly.md, regressions.atom: calls the
 *                      confounds' sections;
 *   nightly_ack.c      `vtlab ack`: calls the store only.
 */
#ifndef LAB_NIGHTLY_INTERNAL_H
#define LAB_NIGHTLY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nightly.h"
#include "store_nightly.h"

/* ------------------------------------------------------------ the throughput judgement (nightly_perf.c) */

/* The throughput judgement of one arm of a nightly, all in log tokens/s
 * (nightly_perf.c says how the baseline and the noise are chosen). */
typedef struct lab_nightly_perf {
    int     nc, np, nb;      /* repeats tonight, in the previous nightly; nights in the baseline */
    int64_t cid, pid;        /* a run of tonight's and of the previous nightly's */
    double  cur, base;       /* tonight's mean, the baseline */
    double  d;               /* cur - base: the log of the ratio */
    double  sw, sb, se;      /* within-night SD, night-to-night SD, standard error of d (NaN: none) */
    double  thr;             /* a drop beyond -thr is suspected (NaN when se is) */
    int     norm;            /* 1: judged on tokens/s per host GFLOP/s (both nights have it) */
    int     prior;           /* 1: se is the assumed night-to-night prior (too few earlier nights) */
    int     have;            /* 1: a finished run with throughput in both nights (the rest is set) */
} lab_nightly_perf;

/* Judges arm of experiment eid in nightly `nightly` (its runs cs) against
 * the previous nightly's runs ps and the earlier good nightlies.
 * pe->have = 1 when there is something to compare (a finished run with
 * throughput in both nights), 0 when not. */
int lab_nightly_perf_evaluate(lab_store *st, int64_t nightly, const char *eid, const char *arm,
                              const lab_nightly_runs *cs, const lab_nightly_runs *ps, const lab_nightly_opts *o,
                              lab_nightly_perf *pe, char *err, size_t errlen);

/* 1 when tonight's throughput of the arm is a suspected drop (to re-measure). */
int lab_nightly_perf_suspect(const lab_nightly_perf *pe);

/* Mean of log(tokens/s) (per host GFLOP/s when norm) over the FINISHED runs
 * of arm in s; *n runs, *first (may be NULL) the first run's id. NaN when
 * there is none. */
double lab_nightly_perf_arm_mean(const lab_nightly_runs *s, const char *arm, int norm, int *n, int64_t *first);

/* ------------------------------------------------------------ the outputs (nightly_outputs.c) */

/* Replaces junit.xml and nightly.md in out_dir by ones that say nightly id
 * has not finished (status "RUNNING" or "FAILED", why: what happened); on a
 * failure to write, the stale file is removed. */
int lab_nightly_write_unfinished(const char *out_dir, int64_t id, const char *status, const char *why, char *err,
                                 size_t errlen);

#endif
