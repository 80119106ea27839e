/*
 * audit.h — `vtlab audit`: which recorded results can be trusted.
 *
 * The audit reads the ledger (specs/: claims and defects) and every finished
 * run in results.db, applies six rules, and stores what it finds as durable
 * flags (table audit_flags):
 *
 *   R1 measured through a registered defect: the knobs include the defect's
 *      trigger and the measurement falls in the defect's code range, or the
 *      run's own probes show the defect's site violated;
 *   R2 a failed runtime assertion in the run;
 *   R3 a knob that did not take effect: an `expect` the probes contradict, or
 *      numeric knobs that differ from the reference with bit-identical logits;
 *   R4 a mismatched reference: the reference run differs in model, dataset or
 *      code version, or did not reproduce its own logits;
 *   R5 not reproducible: runs of one identity with different logits on a
 *      deterministic backend;
 *   R6 underpowered: the Wilson interval does not support the verdict.
 *
 * The rules read the registry only: a new defect record, with no code change,
 * flags every claim and run it affects. A flag the audit no longer finds is
 * kept and marked resolved (by what); a claim that has been reopened and
 * superseded has its flags resolved "superseded by <new claim>".
 */
#ifndef LAB_AUDIT_H
#define LAB_AUDIT_H

#include <stdint.h>
#include <stdio.h>

typedef struct lab_audit_opts {
    const char *db_path;     /* results.db; created if missing (flags are stored) */
    const char *specs_dir;   /* specs/ */
    int         json;        /* out gets one JSON object (counts and flags) instead of the table */
} lab_audit_opts;

typedef struct lab_audit_result {
    int64_t n_claims, n_defects, n_runs;
    int64_t n_open;          /* open flags that are not expected: confounds */
    int64_t n_expected;      /* open flags on subjects meant to go through a defect (replays) */
    int64_t n_new, n_resolved;
} lab_audit_result;

/* Runs the audit, stores the flags, prints the table to out (may be NULL).
 * Returns LAB_OK (even when confounds are found: see res->n_open), LAB_EINPUT
 * for a bad ledger, or another status. */
int lab_audit_run(const lab_audit_opts *o, lab_audit_result *res, FILE *out, char *err, size_t errlen);

#endif
