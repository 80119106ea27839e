/*
 * store_runs.h — typed reads of single runs for the runner (a store*.c file:
 * the SQL lives in store_runs.c; see store_internal.h).
 */
#ifndef LAB_STORE_RUNS_H
#define LAB_STORE_RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The recorded assertion outcome of run run_id, for a run found FINISHED
 * and skipped: *ok = 1 (passed) or 0 (failed); a run that asserted nothing
 * (assertions_ok NULL) leaves *ok unchanged. A read that fails, or a run id
 * with no row, is an error (LAB_EIO naming the database, or LAB_EINTERNAL)
 * and leaves *ok unchanged: a failed read must never count as "passed". */
int lab_store_run_assertions(lab_store *st, int64_t run_id, int *ok, char *err, size_t errlen);

#endif
