/*
 * store_report.h — the report's part of the store: the statement helpers the
 * page (report.c) and the charts (report_charts.c) share. Both depend on
 * this file, not on each other's objects, so the report has no link cycle.
 * The report's queries themselves are still written in report.c and
 * report_charts.c (issue 10: they are the next to move here).
 */
#ifndef LAB_STORE_REPORT_H
#define LAB_STORE_REPORT_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Prepares sql; on failure the store's error ("PATH: prepare: ..."; a
 * corrupt file or a full disk said in words) prefixed "report query". */
int    lab_rp_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen);
/* Column i as a double; NAN for NULL ("not measurable"). */
double lab_rp_col_num(sqlite3_stmt *s, int i);
/* 1 when the database has the table (older schemas lack the audit and nightly
 * ones); a failed lookup reads as absent (that section is left out). */
int    lab_rp_has_table(lab_store *st, const char *name);

/* KL(P || Q) per scored position of run_p against run_q (same dataset),
 * nats, in dataset order: exact from the stored f16 full logits when both
 * runs have them (*exact = 1), otherwise estimated from the top-k
 * log-probabilities (*exact = 0): P's top-k tokens, with the probability
 * mass outside them lumped into one bucket, and Q's probability of a token
 * outside its own top-k taken as its k-th largest. Caller frees *kl. A
 * mismatch of the runs' positions is LAB_EINPUT. */
int lab_position_kl(lab_store *st, int64_t run_p, int64_t run_q, double **kl, int64_t *n, int *exact, char *err,
                    size_t errlen);

#endif
