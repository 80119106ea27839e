/*
 * nightly_confounds.h — the confounds of a nightly (issue 33): what it
 * judges, and how its outputs say it.
 *
 * A confound is the lab's most important finding: a result measured through
 * something other than what it claims. A nightly whose audit leaves a
 * confound open that no one acknowledged is CONFOUNDED (exit 1), not PASSED.
 *
 * What a nightly judges: the open, unexpected audit flags on the claims of
 * the ledger and on its own runs (flags on older runs were judged by their
 * own night). They are grouped by cause, the confound key (confound_key.h),
 * so that one cause is one line however many runs it is on; each key is
 * stored once per nightly (nightly_confounds) as
 *   open          it fails the night;
 *   acknowledged  `vtlab ack KEY --reason TEXT` accepted it: listed, the night
 *                 not failed; the acknowledgement ends when a nightly no
 *                 longer has the confound (a recurrence alerts again) or by
 *                 `vtlab ack --remove KEY`;
 *   resolved      the previous nightly had it, tonight's audit does not;
 * with the nightly it has been open since (the previous nightly's "since"
 * when that nightly had it, else tonight: new) and tonight's runs it is on.
 * Only a nightly whose audit ran judges confounds (--no-audit, or no ledger:
 * nothing is judged and no acknowledgement ends).
 */
#ifndef LAB_NIGHTLY_CONFOUNDS_H
#define LAB_NIGHTLY_CONFOUNDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"
#include "util.h"

typedef struct lab_confound_counts {
    int64_t open, fresh, acknowledged, resolved;   /* fresh: open and new tonight */
} lab_confound_counts;

/* Judges and stores the confounds of nightly `cur` (replacing any), in one
 * transaction, and ends the acknowledgements of the resolved ones. */
int lab_nightly_judge_confounds(lab_store *st, int64_t cur, lab_confound_counts *c, char *err, size_t errlen);

/* Counts of the stored confounds of a nightly. */
int lab_nightly_confound_counts(lab_store *st, int64_t nightly, lab_confound_counts *c, char *err, size_t errlen);

/* The outputs: nightly.md's section, junit.xml's suite "confounds" (a test
 * case per open or acknowledged key, a failure per open one). Each appends
 * to b; the suite sets *tests and *failures. (The feed's entries, the new
 * confounds of the last nightlies, are nightly_outputs.c's.) */
int lab_nightly_md_confounds(lab_store *st, int64_t nightly, lab_buf *b, char *err, size_t errlen);
int lab_nightly_junit_confounds(lab_store *st, int64_t nightly, lab_buf *b, int *tests, int *failures, char *err,
                                size_t errlen);

/* What to do about the open confounds of a nightly, for stderr: one line per
 * key with the command that reopens its claim or acknowledges it. */
int lab_nightly_confound_advice(lab_store *st, int64_t nightly, FILE *out, char *err, size_t errlen);

#endif
