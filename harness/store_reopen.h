/*
 * store_reopen.h — what `vtlab reopen` reads from and writes to results.db
 * (a store*.c file: the SQL lives in store_reopen.c; see store_internal.h).
 *
 * Every function returns LAB_OK or a status with a message "PATH: WHAT: ..."
 * naming the database and what was being read or written (lab_sq_error: a
 * full disk and a corrupt file said in words). A read that fails is never
 * answered as "no such run": a reopen that cannot read must not record a
 * verdict, and one that cannot write its row must say so.
 */
#ifndef LAB_STORE_REOPEN_H
#define LAB_STORE_REOPEN_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The identity of an arm's runs (see lab_identity): not merely the arm's
 * name, which runs of another environment or build may share. */
typedef struct lab_reopen_arm_key {
    const char *experiment, *arm, *knob_hash, *code_version;
} lab_reopen_arm_key;

/* The latest FINISHED run of an arm's identity that has a comparison, with
 * that comparison's top-1 agreement k of n. */
typedef struct lab_reopen_arm_run {
    int     found;               /* 0: no such run; the rest is 0 */
    int64_t run, k, n;
    char    engine[64], commit[64];   /* a command engine's name and commit (its hello); "" builtin */
} lab_reopen_arm_run;

int lab_reopen_read_arm(lab_store *st, const lab_reopen_arm_key *key, lab_reopen_arm_run *out, char *err,
                        size_t errlen);

/* The reference run of run_id's comparison in *ref; 0 when the run has no
 * comparison (a reference arm's run). */
int lab_reopen_read_reference(lab_store *st, int64_t run_id, int64_t *ref, char *err, size_t errlen);

/* A row of table reopens: one per `vtlab reopen` (docs/schema.md). */
typedef struct lab_reopen_row {
    const char *claim_id, *defect_id;
    int64_t     replay_run;      /* 0: no replay (stored as NULL) */
    int64_t     rerun_run;
    int         explained;
    const char *explanation;
    const char *new_claim_id, *new_verdict;
    const char *at;              /* UTC, ISO 8601 */
} lab_reopen_row;

/* Inserts the row in its own write transaction (or the current batch's). */
int lab_reopen_put(lab_store *st, const lab_reopen_row *row, char *err, size_t errlen);

#endif
