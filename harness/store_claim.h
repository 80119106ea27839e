/*
 * store_claim.h — what `vtlab claim RUN` reads from results.db (a store*.c
 * file: the SQL lives in store_claim.c; see store_internal.h).
 *
 * Returns LAB_OK or a status with "PATH: WHAT: ..." naming the database and
 * what was being read. A read that fails is never answered as "no such run".
 */
#ifndef LAB_STORE_CLAIM_H
#define LAB_STORE_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* One run as a claim records it: its identity and status, the code it ran
 * on, the experiment file it ran (experiment_specs) and its verdict. */
typedef struct lab_claim_run {
    int     found;               /* 0: no such run; the rest is empty */
    char    status[16];
    int     is_reference;
    char    experiment[128], arm[128];
    char    started[32];         /* started_at, UTC ISO 8601 */
    char    commit[128];         /* git_commit: vtlab's code ("" when NULL) */
    char    shard[32];           /* "" for a whole run, "I/N" for a shard */
    char    engine[64], engine_commit[64];   /* a command engine's name and commit (its hello); "" builtin */
    char   *spec_file;           /* experiment_specs.file: the path the run was given; NULL when unknown */
    char   *spec_json;           /* experiment_specs.json: the experiment as run (canonical); NULL likewise */
    /* the latest verdict of the run (against the reference run it was compared with) */
    int     has_verdict;
    int64_t reference_run, k, n;
    double  threshold;
    char    metric[32], direction[4], verdict[16];
} lab_claim_run;

/* Reads run `id` into *out (found = 0 when there is none). lab_claim_run_free. */
int  lab_claim_read_run(lab_store *st, int64_t id, lab_claim_run *out, char *err, size_t errlen);
void lab_claim_run_free(lab_claim_run *r);

#endif
