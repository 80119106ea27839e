/*
 * store_audit.h — what `vtlab audit` reads from and writes to results.db.
 *
 * The audit's rules (confound.c) and its orchestration (audit.c) see the
 * database only through these typed functions. Every reader either fills its
 * output completely and returns LAB_OK, or returns a status with a message
 * "PATH: WHAT: ..." naming the database and what was being read (see
 * lab_sq_error: a full disk and a corrupt file said in words). A reader never
 * answers "no rows" for a read that failed: an audit that cannot read must
 * not report a clean result.
 *
 * Text fields of the row structs are fixed-size arrays, truncated to their
 * size as the audit has always read them (the reasons and evidence it stores
 * quote them). Arrays of rows are allocated by the reader and released with
 * lab_audit_free; knob lists with lab_audit_knobs_free.
 *
 * Test-only hook: VTLAB_TEST_AUDIT_FAIL=RULE or RULE:READER (e.g. R4, or
 * R1:probes) makes every reader a rule uses (or only the named one) fail with
 * an injected error, LAB_EIO "PATH: WHAT: injected failure
 * (VTLAB_TEST_AUDIT_FAIL=...)", so that tests can show each rule fails closed.
 * The readers and the rules they serve:
 *   runs (R2, R5: they read nothing else), knobs (R1), probes (R1),
 *   expectations (R3), references (R1, R3, R4: a run's comparisons),
 *   claim-runs (R4: the runs a claim names), verdicts (R6).
 */
#ifndef LAB_STORE_AUDIT_H
#define LAB_STORE_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "ledger.h"
#include "store.h"

/* A FINISHED run, with the fields the rules use. */
typedef struct lab_audit_finished_run {
    int64_t id;
    char    experiment[128], arm[128];
    char    commit[64];          /* git_commit, "" when NULL */
    char    started[32];         /* started_at */
    char    knob_hash[65], model[65], dataset[65], code[256];
    char    logits[65];          /* logits_sha256, "" when NULL */
    char    backend[16];         /* "cpu" when NULL */
    int     expected_fail;       /* expected_assertions = 'fail' (a replay) */
    int     assertions_ok;       /* 1 when NULL */
    int     is_reference;
    char    assertion_reason[512];
} lab_audit_finished_run;

/* Every FINISHED run, ascending id, in *runs[*n] (lab_audit_free). */
int lab_audit_read_runs(lab_store *st, lab_audit_finished_run **runs, int64_t *n, char *err, size_t errlen);

/* The knobs of a run (names and values owned by kv; lab_audit_knobs_free). */
int  lab_audit_read_knobs(lab_store *st, int64_t run_id, lab_knobs_kv *kv, char *err, size_t errlen);
void lab_audit_knobs_free(lab_knobs_kv *kv);

/* The probe records of a run at `site`: how many show it violated (ok = 0)
 * and the first of those by layer (n = 0 when none); and how many records
 * there are at the site at all, over how many layers (the runtime evidence
 * R1 weighs against a defect's code range: records = 0 means the run says
 * nothing about the site). */
typedef struct lab_audit_violations {
    int64_t n;
    int64_t records, layers;
    int64_t first_layer;
    char    detail[256];
    int64_t bytes_per_row, src_row_bytes, dst_row_bytes, rows_unwritten;
} lab_audit_violations;

int lab_audit_read_violations(lab_store *st, int64_t run_id, const char *site, lab_audit_violations *out,
                              char *err, size_t errlen);

/* A failed expectation of a run (an `expect` the probes contradicted). */
typedef struct lab_audit_expectation {
    char site[64], expected[16], seen[64], reason[512];
} lab_audit_expectation;

/* The failed expectations of a run in *v[*n] (lab_audit_free). */
int lab_audit_read_expectations(lab_store *st, int64_t run_id, lab_audit_expectation **v, int64_t *n,
                                char *err, size_t errlen);

/* The reference run of one of a run's comparisons, with its identity. */
typedef struct lab_audit_reference {
    int64_t run_id;
    int     hash_match;          /* -1: not recomputed (NULL); 1 / 0 recomputed logits == stored */
    char    model[65], dataset[65], code[256];
    char    logits[65];          /* "" when NULL */
    char    knob_hash[65];
} lab_audit_reference;

/* The references of a run's comparisons, in stored order, in *v[*n]
 * (lab_audit_free). A comparison whose reference run is gone is not listed. */
int lab_audit_read_references(lab_store *st, int64_t run_id, lab_audit_reference **v, int64_t *n,
                              char *err, size_t errlen);

/* A verdict stored for a run. */
typedef struct lab_audit_verdict {
    char    verdict[16], direction[4];
    double  lo, hi, threshold;
    int64_t k, n;
} lab_audit_verdict;

/* The verdicts of a run in *v[*n] (lab_audit_free). */
int lab_audit_read_verdicts(lab_store *st, int64_t run_id, lab_audit_verdict **v, int64_t *n,
                            char *err, size_t errlen);

/* A run a claim names (runs.arm, runs.reference), whatever its status. */
typedef struct lab_audit_named_run {
    int  found;                  /* 0: no run with that id; the rest is "" */
    char status[16], model[65], dataset[65], code[256];
    char engine[32];             /* backend, "cpu" when NULL */
} lab_audit_named_run;

int lab_audit_read_named_run(lab_store *st, int64_t run_id, lab_audit_named_run *out, char *err, size_t errlen);

/* A finding of the audit, stored as a durable flag: (subject kind, subject,
 * rule, key) is its identity across audits. */
typedef struct lab_audit_flag {
    int   claim;                 /* 1: subject is a claim id; 0: a run id */
    char  subject[128];
    char  rule[4];
    char  key[128];
    char *reason;                /* owned by whoever built the flag */
    char *evidence;              /* JSON, owned likewise */
    int   expected;              /* the subject was meant to go through a defect (a replay) */
    char  resolved_by[192];      /* non-empty: stored as resolved now (a superseded claim's flags) */
} lab_audit_flag;

/* The audit being recorded (a row of table audits). */
typedef struct lab_audit_record {
    const char *specs_dir;
    int64_t     n_claims, n_defects, n_runs;
} lab_audit_record;

/* What storing the flags did, and the open flags after it. */
typedef struct lab_audit_counts {
    int64_t n_new;               /* flags first found, or found again after being resolved */
    int64_t n_resolved;          /* flags resolved by this audit */
    int64_t n_open;              /* open flags that are not expected */
    int64_t n_expected;          /* open expected flags */
} lab_audit_counts;

/* In one write transaction: upserts every flag into audit_flags (a flag seen
 * before keeps its first_seen, and the time of its first resolution when it
 * is resolved again), resolves every open flag not among them ("no longer
 * found by the audit"), counts the open flags and inserts the audits row.
 * On failure nothing of it is written. */
int lab_audit_store_flags(lab_store *st, const lab_audit_flag *flags, int64_t n, const lab_audit_record *rec,
                          lab_audit_counts *out, char *err, size_t errlen);

/* A row of the printed table: a flag, with its run's experiment/arm. */
typedef struct lab_audit_table_row {
    char kind[8], subject[128], rule[4];
    char resolved_by[192], reason[1024];
    char what[200];              /* "EXPERIMENT/ARM" for a run's flag, "" otherwise */
    int  expected, resolved;
} lab_audit_table_row;

/* The open flags and those resolved at or after `since`, in the table's
 * order (open first, confounds before expected, then kind, subject, rule),
 * in *v[*n] (lab_audit_free). */
int lab_audit_read_table(lab_store *st, const char *since, lab_audit_table_row **v, int64_t *n,
                         char *err, size_t errlen);

/* Releases an array of rows returned by a lab_audit_read_* function (NULL is
 * fine). */
void lab_audit_free(void *rows);

#endif
