/*
 * store_bisect.h — `vtlab bisect`'s part of results.db (tables bisections
 * and bisect_steps, schema v8; docs/schema.md, docs/bisect.md).
 *
 * A bisection is one row, found again by its key (the sha256 of the
 * arguments that define it), so `vtlab bisect` with the same arguments
 * continues the same bisection. Each commit evaluated at a dataset scale is
 * one step, unique per (bisection, commit, scale), with the runs it used and
 * its evidence; a step is written in one transaction once it is complete, so
 * a killed bisection leaves finished steps and nothing half-written.
 *
 * Every reader fills its output completely and returns LAB_OK, or returns a
 * status with err naming the database and what was read.
 */
#ifndef LAB_STORE_BISECT_H
#define LAB_STORE_BISECT_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "util.h"

typedef struct lab_bisection {
    int64_t id;
    char    key[65];
    char    experiment[LAB_NAME_BUF], arm[LAB_NAME_BUF], reference[LAB_NAME_BUF];
    char    experiment_file[1024], experiment_sha256[65];
    char    repo[1024], good_rev[256], bad_rev[256], good_commit[41], bad_commit[41];
    int64_t n_commits;            /* commits in (good, bad] along the first-parent path */
    char    mode[8];              /* "stats" | "exact" */
    double  alpha;
    int64_t max_scale, scale;     /* dataset scale: 1, 2, 4 .. max_scale (generated datasets) */
    int64_t builds;               /* builds this bisection ran (all processes) */
    char    build_cmd[1024];
    int64_t nightly_id;           /* 0: not started by a nightly */
    char    status[16];           /* RUNNING FOUND RANGE UNDECIDED NONE FAILED */
    char    first_bad[41];        /* FOUND: the culprit; "" otherwise */
    char    range_good[41], range_bad[41];   /* the smallest range the evidence supports */
    char    message[1024];
    char    started_at[32], finished_at[32];
} lab_bisection;

typedef struct lab_bisect_step {
    int64_t id, bisection_id, seq;
    char    commit[41], subject[256];
    int64_t position;             /* 0 the good end .. n_commits the bad end */
    int64_t scale;
    char    cls[12];              /* good bad skip undecided */
    int     built;                /* 1: this step built the commit */
    int64_t arm_run_id, ref_run_id;   /* 0: none */
    int64_t k, n;                 /* top-1 agreement of the arm with its reference */
    double  lo, hi;               /* Wilson 95% (NAN when no run) */
    char    verdict[16];          /* the decision rule's, "" when none */
    int64_t lost, gained;         /* against the good end, paired: positions lost / gained */
    double  p;                    /* exact McNemar p against the good end; NAN when not tested */
    int64_t lost_bad, gained_bad; /* against the bad end: positions the bad end loses / gains */
    double  p_bad;                /* exact McNemar p against the bad end; NAN when not tested */
    char    logits_sha256[65];    /* the arm run's logits hash */
    char    reason[512];
    char    at[32];
} lab_bisect_step;

/* The bisection with this key: *found = 0 when none. */
int lab_store_bisect_find(lab_store *st, const char *key, lab_bisection *out, int *found, char *err, size_t errlen);
/* Inserts b (status RUNNING); b->id receives its id. */
int lab_store_bisect_insert(lab_store *st, lab_bisection *b, char *err, size_t errlen);
/* Writes b's mutable fields: scale, builds, nightly_id, status, result, message, finished_at. */
int lab_store_bisect_update(lab_store *st, const lab_bisection *b, char *err, size_t errlen);
/* The bisections, by id: nightly > 0 only those that nightly started, 0 all.
 * *v is the caller's (free). */
int lab_store_bisect_list(lab_store *st, int64_t nightly, lab_bisection **v, int64_t *n, char *err, size_t errlen);

/* The steps of bisection bid in the order they were made; *v the caller's (free). */
int lab_store_bisect_steps(lab_store *st, int64_t bid, lab_bisect_step **v, int64_t *n, char *err, size_t errlen);
/* Records a step and the bisection's build count in one transaction
 * (s->id receives the step's id). A step of the same (commit, scale) already
 * there is LAB_EINTERNAL. */
int lab_store_bisect_put_step(lab_store *st, lab_bisect_step *s, int64_t builds, char *err, size_t errlen);

/* A FINISHED run of experiment/arm, repeat 0, whose code version starts with
 * code_prefix ("COMMIT|dirty=0|") and, when code_exact is not NULL, equals it;
 * when dataset is not NULL its dataset hash must equal it. The latest such
 * (largest id): *run_id (0 when none), its dataset and logits hashes. */
typedef struct lab_bisect_found {
    int64_t run_id;
    char    dataset_sha256[65], logits_sha256[65];
} lab_bisect_found;
int lab_store_bisect_find_run(lab_store *st, const char *experiment, const char *arm, const char *code_prefix,
                              const char *code_exact, const char *dataset, lab_bisect_found *out, char *err,
                              size_t errlen);

/* The nightly's commit (nightlies.git_commit or commit column) of nightly id. */
int lab_store_bisect_nightly_commit(lab_store *st, int64_t nightly, char *out, size_t outlen, char *err,
                                    size_t errlen);

/* The regressions of nightly `nightly` a bisection can look for: accuracy
 * and numerics findings (regression = 1), by experiment and arm. *v the
 * caller's (free). */
typedef struct lab_bisect_target {
    char experiment[LAB_NAME_BUF], arm[LAB_NAME_BUF], kind[16];
} lab_bisect_target;
int lab_store_bisect_nightly_targets(lab_store *st, int64_t nightly, lab_bisect_target **v, int64_t *n, char *err,
                                     size_t errlen);

/* Appends text to the message of nightly's regression finding
 * experiment/arm/kind, so that nightly.md, junit.xml and regressions.atom,
 * which show the findings, name what the bisection found. */
int lab_store_bisect_note_finding(lab_store *st, int64_t nightly, const char *experiment, const char *arm,
                                  const char *kind, const char *text, char *err, size_t errlen);

#endif
