/*
 * reopen.h — `vtlab reopen CLAIM_ID`: re-measure a confounded claim.
 *
 *   (a) replay: run the claim's arm with the defect's replay fault on, and ask
 *       whether that reproduces the recorded evidence (explained / not);
 *   (b) rerun: the claim's arm on the current code, no fault;
 *   (c) record the rerun's verdict and interval as a new claim in specs/ that
 *       supersedes the old one (both files kept: the history is diffable).
 *       Both files change in one atomic step (the claims directory is staged
 *       and swapped in, see reopen.c), so a kill leaves either the old ledger
 *       or the new one, never a half-linked pair;
 *   (d) print before and after side by side.
 */
#ifndef LAB_REOPEN_H
#define LAB_REOPEN_H

#include <stdio.h>

typedef struct lab_reopen_opts {
    const char *claim_id;
    const char *db_path;
    const char *specs_dir;
    const char *defect_id;   /* NULL: the defect the audit's R1 finds for the claim */
    const char *work_dir;    /* where the derived experiment file goes (build/reopen) */
} lab_reopen_opts;

/* Returns LAB_OK, LAB_EINPUT (unknown claim, no defect applies, bad ledger or
 * experiment), or another status. *new_claim receives the new claim's id. */
int lab_reopen(const lab_reopen_opts *o, FILE *out, char new_claim[128], char *err, size_t errlen);

/* Finishes or discards what a killed reopen left next to SPECS/claims (a
 * staging directory .claims.reopen.*): an interrupted commit of the fallback
 * for filesystems without an atomic directory swap is rolled forward, any
 * other leftover is removed. lab_reopen calls it first; a ledger command may
 * call it before loading the ledger. LAB_OK when there was nothing to do or
 * it was done (also when SPECS/claims does not exist), LAB_EIO otherwise.
 *
 * Test-only environment (tests/cli/test_crash_safety.sh; never set otherwise):
 *   VTLAB_TEST_KILL_AT=reopen-between-writes | reopen-before-commit |
 *     reopen-after-commit | reopen-between-renames   SIGKILL at that point
 *   VTLAB_TEST_NO_RENAME_EXCHANGE=1   behave as on a filesystem without
 *     RENAME_EXCHANGE (the fallback)                                        */
int lab_reopen_recover(const char *specs_dir, char *err, size_t errlen);

/* The id of the claim that supersedes `claim`: the claim's id followed by
 * suffix ("-reopened-YYYYMMDD" or "-reopened-YYYYMMDD-N"), into out
 * (outlen > LAB_NAME_MAX). The whole must stay a valid id (at most
 * LAB_NAME_MAX characters; a longer one would make the ledger it is written
 * to fail to load), so a long claim id loses whole '-'-separated words —
 * words without digits first, from the end — and never a part of a number;
 * the suffix is kept whole (see reopen.c). LAB_OK; LAB_EINTERNAL when the
 * suffix alone leaves no room or out is too small; LAB_ENOMEM. */
int lab_reopen_claim_id(const char *claim, const char *suffix, char *out, size_t outlen);

#endif
