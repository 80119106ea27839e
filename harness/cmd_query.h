/*
 * cmd_query.h — read-only commands over results.db: runs, show, compare,
 * export. Each returns 0 or a status with err filled (LAB_EINPUT for a run
 * id that does not exist).
 */
#ifndef LAB_CMD_QUERY_H
#define LAB_CMD_QUERY_H

#include <stdint.h>
#include <stdio.h>

#include "store.h"

/* One line per run (optionally of one experiment): status, assertions,
 * top-1 agreement with its interval, KL, verdict, first divergent layer. */
int lab_cmd_runs(lab_store *st, const char *experiment, char *err, size_t errlen);
/* Everything recorded about one run, for a person. */
int lab_cmd_show(lab_store *st, int64_t id, char *err, size_t errlen);
/* Two runs side by side: identity, differing knobs, metrics, top-1
 * agreement between them and McNemar on agreement with their reference. */
int lab_cmd_compare(lab_store *st, int64_t a, int64_t b, char *err, size_t errlen);
/* format "json" (everything, top-k included) or "csv" (per-position top-k). */
int lab_cmd_export(lab_store *st, int64_t id, const char *format, FILE *out, char *err, size_t errlen);

#endif
