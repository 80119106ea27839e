/*
 * runner.h — executing an experiment's arms against the model and recording
 * each run in results.db (`vtlab run`, `vtlab sweep`).
 *
 * Order of work, chosen so that bad input never touches the database:
 *   1. parse the experiment file, build or find the model, open it, prepare
 *      the dataset against its vocabulary, resolve every arm's knob set
 *      (errors here are bad input: exit 2, nothing written);
 *   2. open results.db, then for the reference arm first and each other arm:
 *      claim the run, execute it, write its rows in one transaction.
 * The reference arm's logits (scored positions) and residual captures are
 * kept in memory for the comparisons; when the reference run is already
 * FINISHED they are recomputed (the CPU forward is deterministic) and the
 * recomputed logits hash is checked against the stored one.
 */
#ifndef LAB_RUNNER_H
#define LAB_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "experiment.h"
#include "interrupt.h"    /* lab_interrupted, lab_install_signals: for the runner's callers */
#include "model/vt.h"
#include "model_cache.h"  /* lab_model_dir, lab_model_sha256 */
#include "provenance.h"   /* lab_resolve_knobs */

typedef struct lab_run_opts {
    const char *db_path;     /* results.db by default */
    const char *only_arm;    /* NULL: every arm (the reference always runs first) */
    int         force;       /* 1: rerun FINISHED runs */
    int         progress;    /* progress on stderr: 0 off, 1 a line redrawn (a terminal), 2 a plain
                              * line every 10 s of a long pass (a log): lab_progress_mode() */
    int64_t     shard_index, shard_count;   /* --shard I/N: sequences [I*n/N, (I+1)*n/N); count 0: the whole run */
} lab_run_opts;

/* What `vtlab run --limit` and `vtlab rerun` add to lab_run_opts (a struct of
 * its own: the many plain callers' initialisers stay as they are). */
typedef struct lab_run_more {
    int64_t     limit;       /* --limit N: the first N sequences only, recorded as PARTIAL runs (never
                              * FINISHED: never the arm's finished run); 0, or N >= the dataset: all */
    /* `vtlab rerun`: [n_arms] the run each arm's new run repeats (0: the arm is
     * not rerun) and its repeat index. Only those arms run (the reference too,
     * where it has no FINISHED run to compare with), each even when a FINISHED
     * run of its identity exists, and its new run records rerun_of. NULL: a
     * plain run. */
    const int64_t *rerun_of, *rerun_rep;
    const char  *model_dir;  /* NULL: the experiment's model; else this directory (a rerun's model,
                              * found in the cache by the run's model hash) */
} lab_run_more;

typedef struct lab_run_summary {
    int64_t runs_done;       /* executed and FINISHED by this process */
    int64_t runs_skipped;    /* FINISHED already (same identity) */
    int64_t runs_failed;     /* FAILED or KILLED by this process */
    int64_t runs_busy;       /* left to another live process */
    int64_t stale_redone;    /* RUNNING rows of dead processes found and redone */
    int64_t check_failures;  /* arms whose assertion outcome differs from expect_assertions */
    double  wall_s;          /* whole invocation */
    double  forward_s;       /* inside the model's forward pass, all sessions */
} lab_run_summary;

/* The knob hash of arm i's runs, as lab_run_experiment computes it: the
 * builtin's resolved knobs (environment, then the arm's), or, for an arm
 * on a command engine, the hello of an engine started for it. */
int lab_arm_knob_hash(const lab_experiment *e, int64_t i, char out[65], char *err, size_t errlen);

/* Runs one experiment file. Returns LAB_OK, LAB_EINPUT (bad input, nothing
 * written) or another status with err filled. The summary is accumulated
 * into *sum (not cleared), so a sweep can sum over files. */
int lab_run_experiment(const char *path, const lab_run_opts *o, lab_run_summary *sum,
                       char *err, size_t errlen);
/* The same with more options (m may be NULL). */
int lab_run_experiment_more(const char *path, const lab_run_opts *o, const lab_run_more *m, lab_run_summary *sum,
                            char *err, size_t errlen);
/* The same for an experiment already parsed (`vtlab rerun` parses the spec
 * stored with a run); e stays the caller's, and is changed (its dataset
 * prepared, or cut to --limit). path is what results.db records as its file. */
int lab_run_parsed(lab_experiment *e, const char *path, const lab_run_opts *o, const lab_run_more *m,
                   lab_run_summary *sum, char *err, size_t errlen);

/* The progress mode for stderr: 1 (redrawn line) on a terminal, 2 (plain
 * lines, rate-limited, for CI logs) otherwise. */
int lab_progress_mode(void);

#endif
