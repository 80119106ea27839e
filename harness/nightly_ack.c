/*
 * nightly_ack.c — `vtlab ack`: a person's word that an open confound or a
 * known regression is accepted (nightly.h has the command's contract):
 * record it, list the active ones, end one. What an acknowledgement does to
 * later nights is decided where they are judged (nightly_compare.c for
 * regressions, nightly_confounds.c for confounds); this file only finds what
 * the key names and writes the row, through store_nightly.h. Apart from the
 * nightly because it is a command of its own that runs no model and reads
 * no experiment.
 */
#include "nightly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_nightly.h"
#include "util.h"

/* Records the acknowledgement of t and says so on stdout. */
static int ack_record(lab_store *st, const lab_nightly_target *t, const char *reason, char *err, size_t errlen) {
    char fkey[300], now[32];
    snprintf(fkey, sizeof fkey, "%s/%s/%s", t->experiment, t->arm, t->kind);
    lab_now_iso(now);
    int perf = !strcmp(t->kind, "performance") && !isnan(t->value);
    lab_nightly_ack_row a = {fkey, t->experiment, t->arm, t->kind, reason, now, t->nightly, perf ? t->value : NAN};
    int rc = lab_store_nightly_put_ack(st, &a, err, errlen);
    if (rc) return rc;
    if (perf)
        printf("acknowledged %s (nightly %lld, %.4g tokens/s; a further drop alerts again): %s\n", fkey,
               (long long)t->nightly, t->value, reason);
    else
        printf("acknowledged %s (nightly %lld; until a nightly no longer has it): %s\n", fkey, (long long)t->nightly,
               reason);
    return LAB_OK;
}

/* Records the acknowledgement of confound `key`, open or acknowledged last in
 * nightly `nightly`, and says so on stdout. */
static int ack_confound(lab_store *st, const char *key, int64_t nightly, const char *reason, char *err,
                        size_t errlen) {
    char now[32];
    lab_now_iso(now);
    lab_nightly_ack_row a = {key, "", "", "confound", reason, now, nightly, NAN};
    int rc = lab_store_nightly_put_ack(st, &a, err, errlen);
    if (rc) return rc;
    printf("acknowledged confound %s (nightly %lld): later nightlies list it as acknowledged and do not fail on it, "
           "until a nightly no longer has it (`vtlab ack --remove %s` ends it sooner): %s\n", key, (long long)nightly,
           key, reason);
    return LAB_OK;
}

/* `vtlab ack KEY --reason TEXT [--db PATH]` (lab.c checks the arguments and
 * that the database exists). KEY is a confound key as nightly.md shows it
 * (nightly_confounds.h: the acknowledged confound is listed and no longer
 * fails a night, until a nightly no longer has it), or a regression:
 * EXPERIMENT/ARM/KIND (kind: check, accuracy, numerics, performance) or the
 * id of a nightly_findings row; it must name one some nightly found. The
 * acknowledgement of a regression (nightly_acks) turns later regressions of
 * that key into notes until a nightly of the experiment no longer has it; a
 * performance one holds only down to the throughput acknowledged (a further
 * drop beyond the noise alerts again). Exit 0, or 2 on bad input (nothing
 * written). */
int lab_cmd_ack(const char *db, const char *key, const char *reason) {
    lab_store *st = NULL;
    char err[1024] = "";
    lab_nightly_target t = {0};
    int64_t confound_night = 0;
    /* A confound key, else the latest regression with that key (or that id). */
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_find_confound(st, key, &confound_night, err, sizeof err);
    if (!rc && confound_night) {
        rc = ack_confound(st, key, confound_night, reason, err, sizeof err);
        goto done;
    }
    if (!rc) rc = lab_store_nightly_find_regression(st, key, key[strspn(key, "0123456789")] == 0, &t, err, sizeof err);
    if (!rc && !t.found) {
        fprintf(stderr, "vtlab ack: %s: no confound or regression found by a nightly in %s (name a confound by its key "
                        "and a regression EXPERIMENT/ARM/KIND, as nightly.md shows them, or a regression by the id of its "
                        "nightly_findings row)\n", key, db);
        lab_store_close(st);
        return 2;
    }
    if (!rc) rc = ack_record(st, &t, reason, err, sizeof err);
done:
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    return 0;
}

int lab_cmd_ack_list(const char *db) {
    lab_store *st = NULL;
    lab_nightly_ack_listed *a = NULL;
    int64_t n = 0;
    char err[1024] = "";
    int rc = lab_store_open_readonly(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_list_acks(st, &a, &n, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    if (!n) printf("no active acknowledgement in %s\n", db);
    for (int64_t i = 0; i < n; i++) {
        printf("%s  %s, acknowledged %s (nightly %lld)", a[i].key,
               strcmp(a[i].kind, "confound") ? "regression" : "confound", a[i].acked_at, (long long)a[i].nightly);
        if (!isnan(a[i].value)) printf(" at %.4g tokens/s", a[i].value);
        printf(": %s\n", a[i].reason);
    }
    free(a);
    return 0;
}

int lab_cmd_ack_remove(const char *db, const char *key) {
    lab_store *st = NULL;
    char err[1024] = "", now[32];
    int removed = 0;
    lab_now_iso(now);
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (!rc) rc = lab_store_nightly_remove_ack(st, key, now, &removed, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab ack: %s\n", err);
        return lab_exit_code(rc);
    }
    if (!removed) {
        fprintf(stderr, "vtlab ack --remove: %s: no active acknowledgement of that key in %s (`vtlab ack --list` "
                        "shows them)\n", key, db);
        return 2;
    }
    printf("acknowledgement of %s removed: the next nightly that has it fails on it again\n", key);
    return 0;
}
