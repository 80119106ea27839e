/*
 * bisect.h — `vtlab bisect`: from "the nightly regressed" to the commit that
 * did it, with the noise handled honestly (docs/bisect.md).
 *
 * Each candidate commit is checked out in a worktree of its own (never the
 * user's tree), built, and its arm and reference are run by the candidate's
 * own vtlab into the user's results.db (runs of a commit already there, same
 * identity, are reused). A commit is classified against the ends:
 *   bad        top-1 agreement with the reference dropped against the good
 *              end: exact McNemar on the same positions, more lost than
 *              gained and p < alpha; or the decision rule's verdict went from
 *              SUPPORTED (good end) to REFUTED;
 *   good       not bad, and significantly better than the bad end (the same
 *              test the other way), or SUPPORTED where the bad end is REFUTED;
 *   undecided  neither: the difference is inside the noise. The dataset is
 *              doubled (generated datasets; up to max_scale) and the ends and
 *              the commit rerun; at the limit the commit stays undecided and
 *              the bisection goes on around it, reporting the range;
 *   skip       it does not build, or its run fails.
 * With exact, a commit is bad iff its arm's logits hash differs from the good
 * end's. Every step is stored (store_bisect.h) and a bisection is found again
 * by its arguments, so a killed one resumes without redoing finished commits.
 */
#ifndef LAB_BISECT_H
#define LAB_BISECT_H

#include <stdint.h>
#include <stdio.h>

#include "store_bisect.h"

#define LAB_BISECT_DEFAULT_BUILD   "make -j2 vtlab"
#define LAB_BISECT_DEFAULT_WORKDIR "build/bisect"
#define LAB_BISECT_DEFAULT_SCALE   4

typedef struct lab_bisect_opts {
    const char *experiment;     /* EXPERIMENT.json */
    const char *arm;            /* the arm that regressed (not the reference) */
    const char *good, *bad;     /* revisions */
    const char *repo;           /* the git repository (default ".") */
    const char *build_cmd;      /* NULL: LAB_BISECT_DEFAULT_BUILD (then the runner is WT/build/vtlab) */
    const char *workdir;        /* NULL: LAB_BISECT_DEFAULT_WORKDIR */
    const char *db_path;        /* results.db */
    int         exact;          /* 1: bad iff the arm's logits hash changed */
    int64_t     max_scale;      /* largest dataset scale (1: never grow the dataset) */
    double      alpha;          /* McNemar significance level */
    int         allow_dirty;    /* 1: a repository with uncommitted changes is fine */
    int         keep_worktree;  /* 1: leave the worktree when done */
    int64_t     nightly_id;     /* > 0: started by that nightly */
} lab_bisect_opts;

void lab_bisect_defaults(lab_bisect_opts *o);

/* Checks the options (a bad revision, repository, experiment or arm is
 * LAB_EINPUT and nothing is written), then runs or resumes the bisection,
 * printing each step to out. *res receives the bisection row as it ended
 * (status RUNNING when interrupted). */
int lab_bisect_run(const lab_bisect_opts *o, FILE *out, lab_bisection *res, char *err, size_t errlen);

/* `vtlab bisect` with its options parsed: exit 0 when the bisection ended
 * with a result (FOUND, RANGE, UNDECIDED, NONE), 1 when it FAILED or was
 * interrupted, 2 on bad input. */
int lab_bisect_cmd(const lab_bisect_opts *o);

/* One line naming the result of b ("first bad commit abc123 ...", "between
 * ... and ...", ...) into out. */
void lab_bisect_result_line(const lab_bisection *b, char *out, size_t len);

#endif
