/*
 * store_nightly.h — the nightly's rows in results.db (tables nightlies,
 * nightly_runs, nightly_findings, nightly_confounds, nightly_acks,
 * nightly_remeasure_runs; see
 * docs/schema.md), behind typed functions: nightly.c decides what is a
 * regression, this file's store_nightly.c reads and writes the rows.
 *
 * Conventions, as in store.h:
 *   - every function returns LAB_OK or an error status with err filled in
 *     ("PATH: WHAT: ..."); a read that fails is an error, never a shorter
 *     answer (fail closed);
 *   - every write is its own BEGIN IMMEDIATE transaction, or part of the
 *     caller's batch (lab_store_batch_begin .. _commit) when one is open;
 *   - outputs are caller-owned: arrays and strings are freed with the
 *     matching *_free function; on error nothing is left allocated and the
 *     output is empty;
 *   - a non-finite double (NaN, inf) is stored as NULL; NULL reads back as NaN.
 */
#ifndef LAB_STORE_NIGHTLY_H
#define LAB_STORE_NIGHTLY_H

#include <stddef.h>
#include <stdint.h>

#include "engine_name.h"
#include "store.h"

/* ------------------------------------------------------------ a nightly's row */

/* What a nightly records when it starts (status RUNNING). */
typedef struct lab_nightly_start {
    const char *started_at, *git_commit, *code_version, *host, *experiments_dir;
    int64_t     pid, pid_start;    /* pid_start: lab_pid_start(pid), guards pid reuse */
} lab_nightly_start;

/* Marks FAILED ("the process died (found by a later nightly)") every RUNNING
 * nightly of host whose process is dead (lab_pid_alive on its pid and
 * pid_start; a row without pid_start, from an older vtlab, is judged by its
 * pid alone). *n (may be NULL) receives how many were marked. */
int lab_store_nightly_reap(lab_store *st, const char *host, int64_t *n, char *err, size_t errlen);

/* Inserts the RUNNING row of a new nightly (previous_id: the latest PASSED,
 * CONFOUNDED or REGRESSED one) and reads the largest run id so far, in one transaction:
 * *id is the new nightly's, *max_run_id the runs before it (0 when none). */
int lab_store_nightly_create(lab_store *st, const lab_nightly_start *ns, int64_t *id, int64_t *max_run_id, char *err,
                             size_t errlen);

/* Largest run id so far (0 when none). */
int lab_store_max_run_id(lab_store *st, int64_t *id, char *err, size_t errlen);

/* The runs of this process (host, pid) with id > after: remeasure 0 attaches
 * them to the nightly (nightly_runs), 1 as its re-measurements of suspected
 * throughput drops (nightly_remeasure_runs). Runs already attached stay. */
int lab_store_nightly_attach_runs(lab_store *st, int64_t nightly, int64_t after, const char *host, int64_t pid,
                                  int remeasure, char *err, size_t errlen);

/* Sets the metric host_sgemm_gflops of the runs of (host, pid) with id >
 * after to gflops (replacing any). */
int lab_store_nightly_record_host(lab_store *st, int64_t after, const char *host, int64_t pid, double gflops,
                                  char *err, size_t errlen);

/* Test hook (VTLAB_TEST_PLANT_SLOWDOWN): multiplies the tokens_per_s metric of
 * the runs of (host, pid) with id > after by factor. */
int lab_store_nightly_scale_throughput(lab_store *st, int64_t after, const char *host, int64_t pid, double factor,
                                       char *err, size_t errlen);

/* How a nightly ended. */
typedef struct lab_nightly_end {
    int64_t     id;
    const char *finished_at, *status;   /* PASSED, CONFOUNDED, REGRESSED or FAILED */
    int64_t     n_regressions;
    const char *audit, *error;          /* error: NULL when none */
} lab_nightly_end;

/* Records the end of a nightly (n_runs: its nightly_runs). Meant to run
 * inside the caller's batch, so that the status commits with the outputs
 * written from it. */
int lab_store_nightly_finish(lab_store *st, const lab_nightly_end *e, char *err, size_t errlen);

/* A nightly still RUNNING becomes FAILED with error (a no-op otherwise). */
int lab_store_nightly_fail(lab_store *st, int64_t id, const char *error, char *err, size_t errlen);

/* ------------------------------------------------------------ the comparison */

/* One run of a nightly as the comparison needs it. */
typedef struct lab_nightly_run {
    int64_t id, rep;
    char    arm[128];
    char    status[16];
    char    error[256];
    int     is_ref, expect_fail, assertions_ok;   /* assertions_ok -1: unknown */
    char    backend[16], model[65], dataset[65], knob_hash[65], logits[65], code_version[160];
    double  tps;         /* metric tokens_per_s (NaN: none) */
    double  host;        /* host_sgemm_gflops measured around the run (NaN: none) */
    int     has_cmp;     /* 1: a comparison with the reference (the next four) */
    int64_t ref_run, k, n;
    double  lo, hi;
} lab_nightly_run;

typedef struct lab_nightly_runs {
    lab_nightly_run *r;   /* [n], owned */
    int64_t          n;
} lab_nightly_runs;

void lab_nightly_runs_free(lab_nightly_runs *s);

/* The runs of experiment eid in a nightly, by arm, repeat, id: its runs
 * (remeasure 0), or its re-measurements (remeasure 1, which carry no
 * comparison). */
int lab_store_nightly_runs(lab_store *st, int64_t nightly, const char *eid, int remeasure, lab_nightly_runs *out,
                           char *err, size_t errlen);

/* The experiments of a nightly's runs, sorted: (*ids)[*n], owned, freed
 * with lab_nightly_strings_free. */
int lab_store_nightly_experiments(lab_store *st, int64_t nightly, char ***ids, int64_t *n, char *err, size_t errlen);
void lab_nightly_strings_free(char **v, int64_t n);

/* The latest finished nightly (PASSED, CONFOUNDED or REGRESSED) before cur: with eid, one that has
 * a FINISHED run of that experiment; with eid NULL, any. *prev = 0: none. */
int lab_store_nightly_previous(lab_store *st, int64_t cur, const char *eid, int64_t *prev, char *err, size_t errlen);

/* Per-night mean of log(tokens/s) of one arm (norm 1: of log(tokens/s) -
 * log(host_sgemm_gflops)) over the latest finished nightlies
 * before cur, newest first, only the nights' own runs (not their
 * re-measurements): v[*n], *n <= max. */
int lab_store_nightly_night_means(lab_store *st, int64_t cur, const char *eid, const char *arm, int norm, double *v,
                                  int64_t max, int64_t *n, char *err, size_t errlen);

/* In nightly prev, a finding of experiment/arm/kind that was a regression or
 * an acknowledged one: *since (0 when none) is its persistent_since, or prev
 * itself when it was new then. */
int lab_store_nightly_persistent_since(lab_store *st, int64_t prev, const char *eid, const char *arm, const char *kind,
                                       int64_t *since, char *err, size_t errlen);

/* A finding to store. */
typedef struct lab_nightly_finding {
    const char *experiment, *arm, *kind;
    int         regression;
    int64_t     run_id, prev_run_id;   /* 0: none (NULL) */
    double      value, prev_value, p;  /* NaN: none (NULL) */
    const char *message, *evidence;    /* evidence: a JSON object */
} lab_nightly_finding;

/* Deletes the findings of a nightly (before it is compared again). */
int lab_store_nightly_clear_findings(lab_store *st, int64_t nightly, char *err, size_t errlen);
int lab_store_nightly_put_finding(lab_store *st, int64_t nightly, const lab_nightly_finding *f, char *err,
                                  size_t errlen);

/* ------------------------------------------------------------ confounds (store_nightly_confounds.c) */

/* An open, unexpected audit flag a nightly judges: one on a claim of the
 * ledger, or on one of the nightly's own runs (flags on older runs were
 * judged by the night they belong to). */
typedef struct lab_nightly_cflag {
    int     claim;                 /* 1: subject is a claim id; 0: a run id */
    int64_t run_id;                /* the run (0 for a claim) */
    char    subject[128], rule[4], key[128], experiment[128], arm[128];   /* experiment, arm: "" when none */
    char    reason[1024];          /* cut to fit */
} lab_nightly_cflag;

/* The flags nightly `nightly` judges, by id: (*out)[*n], owned (free()); none
 * when the database has no audit_flags table. */
int lab_store_nightly_confound_flags(lab_store *st, int64_t nightly, lab_nightly_cflag **out, int64_t *n, char *err,
                                     size_t errlen);

/* A row of nightly_confounds: one confound key (confound_key.h) as a nightly
 * saw it. */
typedef struct lab_nightly_confound {
    int64_t id;                    /* rowid (the feed's entry id) */
    int64_t nightly, since;        /* since: the first nightly of the unbroken stretch it has been open */
    int     is_new;                /* 1: the previous nightly did not have it open or acknowledged */
    char    key[400], state[16];   /* state: open, acknowledged or resolved */
    char    subject[300], rule[4];
    char    runs[256];             /* the nightly's runs it is on ("33, 37"); "" for a claim */
    char    reason[1024];          /* one flag's reason (cut to fit) */
    char    ack_reason[512];       /* acknowledged: why ("" otherwise) */
    char    at[32], commit[64], status[16];   /* the feed only (else ""): the nightly's finished_at (or
                                                 started_at), commit and status */
} lab_nightly_confound;

typedef struct lab_nightly_confounds {
    lab_nightly_confound *r;       /* [n], owned (free(r)) */
    int64_t               n;
} lab_nightly_confounds;

/* The confounds of nightly `nightly`: open, then acknowledged, then resolved,
 * each by key. */
int lab_store_nightly_get_confounds(lab_store *st, int64_t nightly, lab_nightly_confounds *out, char *err,
                                    size_t errlen);
/* Deletes the confounds of a nightly (before they are judged again). */
int lab_store_nightly_clear_confounds(lab_store *st, int64_t nightly, char *err, size_t errlen);
int lab_store_nightly_put_confound(lab_store *st, const lab_nightly_confound *c, char *err, size_t errlen);
/* The new open confounds of the last `nights` nightlies, newest first (with at and commit). */
int lab_store_nightly_confound_feed(lab_store *st, int64_t nights, lab_nightly_confounds *out, char *err,
                                    size_t errlen);

/* The active acknowledgement of a confound key: *found, and its reason. */
int lab_store_nightly_find_confound_ack(lab_store *st, const char *key, int *found, char *reason, size_t reasonlen,
                                        char *err, size_t errlen);
/* Ends the acknowledgements of confounds that nightly `nightly` judged and no
 * longer has (resolved): a recurrence alerts again. */
int lab_store_nightly_clear_confound_acks(lab_store *st, int64_t nightly, const char *now, char *err, size_t errlen);
/* The latest nightly that had confound `key` open or acknowledged (0: none). */
int lab_store_nightly_find_confound(lab_store *st, const char *key, int64_t *nightly, char *err, size_t errlen);

/* An active acknowledgement, as `vtlab ack --list` shows it. */
typedef struct lab_nightly_ack_listed {
    char    key[400], kind[32], reason[512], acked_at[32];
    int64_t nightly;
    double  value;                 /* performance: tokens/s acknowledged (NaN: none) */
} lab_nightly_ack_listed;

/* Every active acknowledgement, oldest first: (*out)[*n], owned (free()). */
int lab_store_nightly_list_acks(lab_store *st, lab_nightly_ack_listed **out, int64_t *n, char *err, size_t errlen);
/* Ends the active acknowledgement of key (a confound key, EXPERIMENT/ARM/KIND,
 * as --list shows it) by hand: *removed 1, or 0 when there is none. */
int lab_store_nightly_remove_ack(lab_store *st, const char *key, const char *now, int *removed, char *err,
                                 size_t errlen);

/* ------------------------------------------------------------ acknowledgements */

/* The active acknowledgement of experiment/arm/kind. */
typedef struct lab_nightly_ack {
    int     found;          /* 0: none (the rest is empty) */
    char    reason[512];    /* truncated to fit */
    int64_t nightly;        /* 0 when not recorded */
    double  value;          /* performance: tokens/s acknowledged (NaN: none) */
} lab_nightly_ack;

int lab_store_nightly_find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, lab_nightly_ack *a,
                               char *err, size_t errlen);

/* Ends the acknowledgements of the experiments of nightly `nightly` whose
 * finding it no longer has (neither a regression nor an acknowledged one). */
int lab_store_nightly_clear_acks(lab_store *st, int64_t nightly, const char *now, char *err, size_t errlen);

/* The regression a `vtlab ack` names: by_id 1, key is the id of a
 * nightly_findings row that is a regression; 0, key is EXPERIMENT/ARM/KIND
 * and the latest such regression (or acknowledged one) is taken. */
typedef struct lab_nightly_target {
    int     found;
    char    experiment[128], arm[128], kind[32];
    int64_t nightly;
    double  value;          /* NaN: none */
} lab_nightly_target;

int lab_store_nightly_find_regression(lab_store *st, const char *key, int by_id, lab_nightly_target *t, char *err,
                                      size_t errlen);

/* Inserts or replaces the acknowledgement of finding (EXPERIMENT/ARM/KIND). */
typedef struct lab_nightly_ack_row {
    const char *finding, *experiment, *arm, *kind, *reason, *acked_at;
    int64_t     nightly;
    double      value;      /* NaN: none (NULL) */
} lab_nightly_ack_row;

int lab_store_nightly_put_ack(lab_store *st, const lab_nightly_ack_row *a, char *err, size_t errlen);

/* ------------------------------------------------------------ outputs */

typedef struct lab_nightly_row {
    int64_t id;
    char    started[32], finished[32], commit[64], code_version[200], status[16], host[128], audit[256];
    int64_t n_runs, n_reg;
} lab_nightly_row;

/* The nightly `id`; LAB_EINPUT "nightly ID: no such nightly" when none. */
int lab_store_nightly_get(lab_store *st, int64_t id, lab_nightly_row *n, char *err, size_t errlen);

/* A test case: an (experiment, arm) pair of a nightly's runs. */
typedef struct lab_nightly_case {
    char   eid[128], arm[128];
    double time;            /* summed wall_s */
    int    runs;
    lab_engine_name engine; /* the engine of its latest run */
} lab_nightly_case;

/* The cases of a nightly by experiment, then first run: (*out)[*n], owned (free()). */
int lab_store_nightly_cases(lab_store *st, int64_t id, lab_nightly_case **out, int64_t *n, char *err, size_t errlen);

/* A stored finding as the writers show it. */
typedef struct lab_nightly_shown {
    int64_t id, nightly;
    char   *experiment, *arm, *kind, *message;   /* owned */
    char   *at, *commit;     /* feed only (else ""): the nightly's finished_at (or started_at), git_commit */
} lab_nightly_shown;

typedef struct lab_nightly_shown_list {
    lab_nightly_shown *r;   /* [n], owned */
    int64_t            n;
} lab_nightly_shown_list;

void lab_nightly_shown_free(lab_nightly_shown_list *l);

/* Findings of (experiment eid, arm) of a nightly, by id: regression 1 its
 * regressions; 0 its notes, including (for an arm) the experiment's notes
 * that belong to no arm. */
int lab_store_nightly_case_findings(lab_store *st, int64_t id, const char *eid, const char *arm, int regression,
                                    lab_nightly_shown_list *out, char *err, size_t errlen);
/* New regressions (no persistent_since) of the last `nights` nightlies,
 * newest nightly first, then by id. */
int lab_store_nightly_feed(lab_store *st, int64_t nights, lab_nightly_shown_list *out, char *err, size_t errlen);

#endif
