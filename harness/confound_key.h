/*
 * confound_key.h — a confound's key: its cause, the same every night it is
 * open (issue 33: "one cause must read as one line").
 *
 * The audit stores one flag per subject, rule and key (audit_flags): every
 * run of a confounded arm gets its own flag, and R3/R4/R5 keys name other
 * runs ("ref12", "run40"). A nightly reruns every arm, so one cause (an arm
 * measured through a defect) would count once per night's run. The key
 * drops what changes from run to run:
 *
 *   CLAIM_ID/RULE[/CAUSE]          a flag on a claim of the ledger
 *   EXPERIMENT/ARM/RULE[/CAUSE]    a flag on a run (its experiment and arm)
 *   run N/RULE[/CAUSE]             a flag on a run no longer in the database
 *
 * CAUSE is the flag's key without run ids: a defect id ("moe-scatter-row-
 * bytes-from-stream", "reference:DEFECT"), a probe site (R3), "runs.arm"
 * (R4 on a claim); "ref12", "run40" and the "run12:" that a claim's copy of
 * its run's flag carries are left out. `vtlab ack` takes this key.
 */
#ifndef LAB_CONFOUND_KEY_H
#define LAB_CONFOUND_KEY_H

#include <stddef.h>

/* The key of a flag: claim 1 (subject: the claim id) or 0 (a run: its
 * experiment and arm, "" when the run is gone, subject its id). Returns out. */
char *lab_confound_key(int claim, const char *subject, const char *experiment, const char *arm, const char *rule,
                       const char *key, char *out, size_t outlen);

#endif
