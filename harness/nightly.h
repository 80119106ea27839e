/*
 * nightly.h — `vtlab nightly`: the CI job. Run every experiment afresh,
 * compare with the previous nightly on the same experiments, and say what
 * regressed, in forms CI systems read (JUnit XML, markdown, an Atom feed).
 *
 * A nightly is a row of the `nightlies` table (schema v4): id, start and end,
 * git commit and code version, host, status (RUNNING, PASSED, CONFOUNDED,
 * REGRESSED, FAILED). Its runs are listed in `nightly_runs`: every run this process
 * claimed during the sweep. The sweep reruns FINISHED identities (--force):
 * the run identity stays what it is (so `vtlab run` still skips them), and
 * each night gets fresh logits, timings and repeats of its own.
 *
 * What counts as a regression of an experiment's arm against the previous
 * nightly that ran the same experiment (docs/nightly.md has the reasoning):
 *   check       a run FAILED or KILLED, or its runtime assertions did not
 *               come out as the arm declares (expect_assertions);
 *   accuracy    a significant drop of top-1 agreement with the reference:
 *               exact McNemar on the same positions (same dataset) with
 *               p < alpha and more lost than gained positions; on different
 *               datasets, Wilson intervals that no longer overlap;
 *   numerics    a changed logits hash on a deterministic arm (cpu backend,
 *               same model, dataset and knob hashes), reported with
 *               KL(previous || current) per position; or repeats of one
 *               identity in the same night with different logits;
 *   performance tokens/s dropped below the median of the last <= 5 nightlies
 *               by more than the noise: the larger of a floor (5%) and 3
 *               standard errors, the noise measured from the spread of
 *               repeats within nights and (robustly) of the arm's throughput
 *               over recent nights; with neither, it is noted, not judged;
 *               and a re-measurement made right away must confirm the drop;
 * Anything else worth knowing (a changed arm definition, a speedup, a first
 * nightly) is a note. Findings are stored in `nightly_findings`. A regression
 * the previous nightly also had is marked persistent (not new); one that was
 * acknowledged (`vtlab ack`, table nightly_acks) is a note until it changes.
 *
 * Confounds are not regressions: an open one that no one acknowledged makes
 * the night CONFOUNDED (exit 1), each cause once (nightly_confounds.h).
 * Status: REGRESSED when anything regressed, else CONFOUNDED, else PASSED;
 * FAILED when the night did not finish (a failed sweep, audit or output).
 */
#ifndef LAB_NIGHTLY_H
#define LAB_NIGHTLY_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct lab_nightly_opts {
    const char *db_path;        /* results.db */
    const char *exp_dir;        /* experiments/ */
    const char *out_dir;        /* report/ */
    const char *specs_dir;      /* specs/ (the audit's ledger) */
    double      alpha;          /* accuracy: McNemar significance level (0.05) */
    double      perf_min_drop;  /* performance: smallest relative drop ever flagged (0.05) */
    double      perf_sigmas;    /* performance: standard errors of noise a drop must exceed (3) */
    int         audit;          /* 1: run the audit after the sweep */
    int         plots;          /* 1: charts in the report */
    int         bisect;         /* 1: bisect each accuracy/numerics regression between the previous
                                 * nightly's commit and tonight's (--bisect, or VTLAB_NIGHTLY_BISECT=1) */
} lab_nightly_opts;

/* Sensible defaults for every field. */
void lab_nightly_defaults(lab_nightly_opts *o);

/* Compares nightly `cur` with the previous nightlies and stores its findings
 * (replacing any it had). *n_regressions: findings that fail the night. */
int lab_nightly_compare(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_regressions, char *err,
                        size_t errlen);

/* The nightly's outputs: JUnit XML (one test case per experiment x arm of the
 * nightly, one for the audit, one per open or acknowledged confound), a
 * markdown summary for a CI job page, and an Atom feed of the new
 * regressions and confounds of the last nightlies. Each file is written whole (.tmp + rename). */
int lab_nightly_write_junit(lab_store *st, int64_t nightly, const char *path, char *err, size_t errlen);
int lab_nightly_write_md(lab_store *st, int64_t nightly, const char *path, char *err, size_t errlen);
int lab_nightly_write_atom(lab_store *st, const char *path, char *err, size_t errlen);

/* `vtlab nightly` with its options parsed (lab.c): checks the ledger (when
 * the audit is on and specs_given or the default specs/ exists) and the
 * test hook before anything runs, runs the nightly and prints where its
 * outputs are. Exit status: 0 nothing regressed and no confound open, 1 a
 * regression, an open confound no one acknowledged (or a failed run), 2 bad
 * input. */
int lab_nightly_cmd(const lab_nightly_opts *o, int specs_given);

/* `vtlab ack KEY --reason TEXT [--db PATH]` (parsed and checked in lab.c: a
 * key, a reason and an existing database): acknowledge an open confound
 * (KEY: its confound key, as nightly.md shows it) so that later nightlies
 * list it as acknowledged instead of failing, until a nightly no longer has
 * it; or a known regression (KEY: EXPERIMENT/ARM/KIND, or a nightly_findings
 * id) so that later nightlies record it as a note, not a regression, until
 * it changes (a performance one: drops further; any: goes away). Exit 0, or
 * 2 on bad input (no such confound or finding, no reason, no database:
 * nothing written). */
int lab_cmd_ack(const char *db, const char *key, const char *reason);
/* `vtlab ack --list`: every active acknowledgement (exit 0). */
int lab_cmd_ack_list(const char *db);
/* `vtlab ack --remove KEY`: ends an active acknowledgement now (exit 0; 2 when
 * there is none of that key). */
int lab_cmd_ack_remove(const char *db, const char *key);

#endif
