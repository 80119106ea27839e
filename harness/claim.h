/*
 * claim.h — `vtlab claim RUN --id ID`: a claim record (docs/specs.md) written
 * from a recorded run, so that a result enters the ledger with the numbers
 * results.db holds rather than numbers copied by hand.
 *
 * The run must be FINISHED, an arm's (not the reference's) and have a
 * verdict. The claim gets the run's experiment file (as the ledger will find
 * it), the arm's and the reference's names and knobs (from the experiment as
 * it was run), the verdict's decision rule and k/n, the code the run measured
 * (lab_claim_code_of_run, ledger.h), the run's date, and the run ids of the
 * arm and of its reference. An existing claim file is never overwritten.
 */
#ifndef LAB_CLAIM_H
#define LAB_CLAIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct lab_claim_opts {
    int64_t     run_id;
    const char *id;              /* the new claim's id: the file SPECS/claims/ID.json */
    const char *specs_dir;       /* the ledger directory; must exist (claims/ is made when missing) */
    const char *db_path;         /* results.db; must exist (it is opened read-only) */
    const char *hypothesis;      /* NULL: the experiment's "hypothesis" */
} lab_claim_opts;

/* Writes the claim atomically to SPECS/claims/ID.json (path receives it) and
 * prints what it recorded to out (may be NULL). LAB_EINPUT, naming what is
 * wrong, for an invalid id, an existing file, a missing ledger directory or
 * database, a run that is missing, not FINISHED, a shard, a reference run or
 * without a verdict, or an experiment file that cannot be found; nothing is
 * written then. warning (may be "" on return) says when the experiment file
 * has changed since the run. */
int lab_claim_record(const lab_claim_opts *o, FILE *out, char *path, size_t pathlen, char *warning,
                     size_t warnlen, char *err, size_t errlen);

#endif
