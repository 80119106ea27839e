/*
 * nightly_confounds.c — the confounds of a nightly: judged by key, stored,
 * and said in nightly.md and junit.xml (nightly_confounds.h has the rules;
 * the rows go through store_nightly.h). Their entries in the Atom feed are
 * written by nightly_outputs.c, in the same shape as the regressions'.
 */
#include "nightly_confounds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "confound_key.h"
#include "store_nightly.h"

typedef lab_nightly_confound confound;

/* ------------------------------------------------------------ judging */

/* A key's group while tonight's flags are read: its row and its runs. */
#define GROUP_RUNS 24
typedef struct group {
    confound c;
    int64_t  runs[GROUP_RUNS];
    int      nruns;
    int64_t  more;              /* runs beyond GROUP_RUNS */
} group;

static group *group_of(group **g, int64_t *n, int64_t *cap, const char *key) {
    for (int64_t i = 0; i < *n; i++)
        if (!strcmp((*g)[i].c.key, key)) return &(*g)[i];
    if (*n == *cap) {
        int64_t c = *cap ? *cap * 2 : 8;
        group *ng = realloc(*g, (size_t)c * sizeof *ng);
        if (!ng) return NULL;
        *g = ng;
        *cap = c;
    }
    group *x = &(*g)[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->c.key, sizeof x->c.key, "%s", key);
    return x;
}

static void group_add_run(group *x, int64_t run) {
    for (int i = 0; i < x->nruns; i++)
        if (x->runs[i] == run) return;
    if (x->nruns < GROUP_RUNS) x->runs[x->nruns++] = run;
    else x->more++;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* "33, 37" (and "and N more"). */
static void group_runs_text(group *x) {
    qsort(x->runs, (size_t)x->nruns, sizeof x->runs[0], cmp_i64);
    size_t len = 0;
    x->c.runs[0] = 0;
    for (int i = 0; i < x->nruns && len < sizeof x->c.runs; i++)
        len += (size_t)snprintf(x->c.runs + len, sizeof x->c.runs - len, "%s%lld", i ? ", " : "", (long long)x->runs[i]);
    if (x->more && len < sizeof x->c.runs)
        snprintf(x->c.runs + len, sizeof x->c.runs - len, " and %lld more", (long long)x->more);
}

/* Tonight's flags grouped by key, in the order of their first flag. */
static int group_flags(const lab_nightly_cflag *fl, int64_t nfl, group **g, int64_t *n, char *err, size_t errlen) {
    int64_t cap = 0;
    for (int64_t i = 0; i < nfl; i++) {
        const lab_nightly_cflag *f = &fl[i];
        char key[400];
        lab_confound_key(f->claim, f->subject, f->experiment, f->arm, f->rule, f->key, key, sizeof key);
        group *x = group_of(g, n, &cap, key);
        if (!x) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        if (!x->c.reason[0]) {
            snprintf(x->c.rule, sizeof x->c.rule, "%s", f->rule);
            snprintf(x->c.reason, sizeof x->c.reason, "%s", f->reason);
            if (f->claim) snprintf(x->c.subject, sizeof x->c.subject, "claim %s", f->subject);
            else if (f->experiment[0]) snprintf(x->c.subject, sizeof x->c.subject, "%s/%s", f->experiment, f->arm);
            else snprintf(x->c.subject, sizeof x->c.subject, "run %s", f->subject);
        }
        if (!f->claim) group_add_run(x, f->run_id);
    }
    for (int64_t i = 0; i < *n; i++) group_runs_text(&(*g)[i]);
    return LAB_OK;
}

/* The previous nightly's row of key while it was open or acknowledged. */
static const confound *had(const lab_nightly_confounds *prev, const char *key) {
    for (int64_t i = 0; i < prev->n; i++)
        if (!strcmp(prev->r[i].key, key) && strcmp(prev->r[i].state, "resolved")) return &prev->r[i];
    return NULL;
}

/* Tonight's row of each group: new or since when, acknowledged or open. */
static int put_groups(lab_store *st, int64_t cur, group *g, int64_t n, const lab_nightly_confounds *prev,
                      lab_confound_counts *c, char *err, size_t errlen) {
    int rc = LAB_OK;
    for (int64_t i = 0; !rc && i < n; i++) {
        confound *x = &g[i].c;
        const confound *p = had(prev, x->key);
        int acked = 0;
        x->nightly = cur;
        x->since = p ? p->since : cur;
        x->is_new = !p;
        if ((rc = lab_store_nightly_find_confound_ack(st, x->key, &acked, x->ack_reason, sizeof x->ack_reason, err,
                                                      errlen)))
            break;
        snprintf(x->state, sizeof x->state, "%s", acked ? "acknowledged" : "open");
        c->acknowledged += acked;
        c->open += !acked;
        c->fresh += !acked && x->is_new;
        rc = lab_store_nightly_put_confound(st, x, err, errlen);
    }
    return rc;
}

/* The previous nightly's confounds tonight no longer has: resolved. */
static int put_resolved(lab_store *st, int64_t cur, const group *g, int64_t n, const lab_nightly_confounds *prev,
                        lab_confound_counts *c, char *err, size_t errlen) {
    int rc = LAB_OK;
    for (int64_t i = 0; !rc && i < prev->n; i++) {
        const confound *p = &prev->r[i];
        int still = 0;
        for (int64_t j = 0; j < n && !still; j++) still = !strcmp(g[j].c.key, p->key);
        if (still || !strcmp(p->state, "resolved")) continue;
        confound x = *p;
        x.nightly = cur;
        x.is_new = 0;
        x.runs[0] = 0;
        x.ack_reason[0] = 0;
        snprintf(x.state, sizeof x.state, "resolved");
        c->resolved++;
        rc = lab_store_nightly_put_confound(st, &x, err, errlen);
    }
    return rc;
}

static int judge(lab_store *st, int64_t cur, lab_confound_counts *c, char *err, size_t errlen) {
    lab_nightly_cflag *fl = NULL;
    int64_t nfl = 0, ng = 0, prev_id = 0;
    group *g = NULL;
    lab_nightly_confounds prev = {0};
    char now[32];
    int rc = lab_store_nightly_clear_confounds(st, cur, err, errlen);
    if (!rc) rc = lab_store_nightly_confound_flags(st, cur, &fl, &nfl, err, errlen);
    if (!rc) rc = group_flags(fl, nfl, &g, &ng, err, errlen);
    if (!rc) rc = lab_store_nightly_previous(st, cur, NULL, &prev_id, err, errlen);
    if (!rc && prev_id) rc = lab_store_nightly_get_confounds(st, prev_id, &prev, err, errlen);
    if (!rc) rc = put_groups(st, cur, g, ng, &prev, c, err, errlen);
    if (!rc) rc = put_resolved(st, cur, g, ng, &prev, c, err, errlen);
    lab_now_iso(now);
    if (!rc) rc = lab_store_nightly_clear_confound_acks(st, cur, now, err, errlen);
    free(fl);
    free(g);
    free(prev.r);
    return rc;
}

int lab_nightly_judge_confounds(lab_store *st, int64_t cur, lab_confound_counts *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int rc = lab_store_batch_begin(st, err, errlen);
    if (rc) return rc;
    if ((rc = judge(st, cur, c, err, errlen))) {
        lab_store_batch_rollback(st);
        memset(c, 0, sizeof *c);
        return rc;
    }
    return lab_store_batch_commit(st, err, errlen);
}

int lab_nightly_confound_counts(lab_store *st, int64_t nightly, lab_confound_counts *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    lab_nightly_confounds l;
    int rc = lab_store_nightly_get_confounds(st, nightly, &l, err, errlen);
    for (int64_t i = 0; !rc && i < l.n; i++) {
        const confound *x = &l.r[i];
        int open = !strcmp(x->state, "open");
        c->open += open;
        c->fresh += open && x->is_new;
        c->acknowledged += !strcmp(x->state, "acknowledged");
        c->resolved += !strcmp(x->state, "resolved");
    }
    free(l.r);
    return rc;
}

/* ------------------------------------------------------------ the outputs */

/* "new", "persistent since nightly K: runs 33, 37", ... : where a confound
 * stands, in words (no markup). */
static void standing(const confound *x, char *out, size_t n) {
    char since[64];
    if (x->is_new) snprintf(since, sizeof since, "new in nightly %lld", (long long)x->nightly);
    else snprintf(since, sizeof since, "%s since nightly %lld", strcmp(x->state, "resolved") ? "persistent" : "open",
                  (long long)x->since);
    if (!strcmp(x->state, "resolved"))
        snprintf(out, n, "%s, resolved in nightly %lld (the audit no longer finds it)", since, (long long)x->nightly);
    else if (x->runs[0]) snprintf(out, n, "%s: run%s %s", since, strchr(x->runs, ',') ? "s" : "", x->runs);
    else snprintf(out, n, "%s: %s", since, x->subject);
}

/* How to end an open confound: reopen its claim, or acknowledge it. */
static void remedy(const confound *x, char *out, size_t n) {
    if (!strncmp(x->subject, "claim ", 6))
        snprintf(out, n, "reopen the claim (vtlab reopen %s) or acknowledge it (vtlab ack %s --reason TEXT)",
                 x->subject + 6, x->key);
    else snprintf(out, n, "fix its cause, or acknowledge it (vtlab ack %s --reason TEXT)", x->key);
}

static void md_line(lab_buf *b, const confound *x) {
    char how[600], fix[1200];
    standing(x, how, sizeof how);
    int open = !strcmp(x->state, "open");
    lab_buf_printf(b, "- %s `", open ? "**open**" : x->state);
    lab_esc_md_code(b, x->key);
    lab_buf_printf(b, "` (%s): ", x->rule);
    lab_esc_md(b, how);
    lab_buf_printf(b, ". ");
    lab_esc_md(b, x->reason);
    if (!strcmp(x->state, "acknowledged")) {
        lab_buf_printf(b, ". Acknowledged: ");
        lab_esc_md(b, x->ack_reason);
    }
    if (open) {
        remedy(x, fix, sizeof fix);
        lab_buf_printf(b, ". To end it: ");
        lab_esc_md(b, fix);
    }
    lab_buf_printf(b, "\n");
}

int lab_nightly_md_confounds(lab_store *st, int64_t nightly, lab_buf *b, char *err, size_t errlen) {
    lab_nightly_confounds l;
    int rc = lab_store_nightly_get_confounds(st, nightly, &l, err, errlen);
    if (rc || !l.n) { free(l.r); return rc; }
    int64_t open = 0, ack = 0;
    for (int64_t i = 0; i < l.n; i++) {
        open += !strcmp(l.r[i].state, "open");
        ack += !strcmp(l.r[i].state, "acknowledged");
    }
    lab_buf_printf(b, "## Confounds: %lld open, %lld acknowledged, %lld resolved\n\n", (long long)open, (long long)ack,
                   (long long)(l.n - open - ack));
    if (open) lab_buf_printf(b, "An open confound fails the night (CONFOUNDED) until its cause is fixed, its claim "
                                "reopened, or it is acknowledged.\n\n");
    for (int64_t i = 0; i < l.n; i++) md_line(b, &l.r[i]);
    lab_buf_printf(b, "\n");
    free(l.r);
    return LAB_OK;
}

static void x_(lab_buf *b, const char *s) { lab_esc_html(b, s); }

/* One <testcase> of the confounds suite. */
static void junit_case(lab_buf *b, const confound *x) {
    char how[600], fix[1200];
    standing(x, how, sizeof how);
    lab_buf_printf(b, "    <testcase classname=\"confound\" name=\"");
    x_(b, x->key);
    lab_buf_printf(b, "\" time=\"0\">\n");
    if (!strcmp(x->state, "open")) {
        remedy(x, fix, sizeof fix);
        lab_buf_printf(b, "      <failure type=\"confound\" message=\"open confound ");
        x_(b, x->key);
        lab_buf_printf(b, " (");
        x_(b, how);
        lab_buf_printf(b, ")\">");
        x_(b, x->subject);
        lab_buf_printf(b, " %s: ", x->rule);
        x_(b, x->reason);
        lab_buf_printf(b, "\nTo end it: ");
        x_(b, fix);
        lab_buf_printf(b, "</failure>\n");
    } else {
        lab_buf_printf(b, "      <system-out>acknowledged (");
        x_(b, how);
        lab_buf_printf(b, "): ");
        x_(b, x->ack_reason);
        lab_buf_printf(b, "\n");
        x_(b, x->reason);
        lab_buf_printf(b, "</system-out>\n");
    }
    lab_buf_printf(b, "    </testcase>\n");
}

int lab_nightly_junit_confounds(lab_store *st, int64_t nightly, lab_buf *b, int *tests, int *failures, char *err,
                                size_t errlen) {
    *tests = *failures = 0;
    lab_nightly_confounds l;
    int rc = lab_store_nightly_get_confounds(st, nightly, &l, err, errlen);
    for (int64_t i = 0; !rc && i < l.n; i++) {
        *tests += strcmp(l.r[i].state, "resolved") != 0;
        *failures += !strcmp(l.r[i].state, "open");
    }
    if (!rc && *tests) {
        lab_buf_printf(b, "  <testsuite name=\"confounds\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" "
                          "time=\"0\">\n", *tests, *failures);
        for (int64_t i = 0; i < l.n; i++)
            if (strcmp(l.r[i].state, "resolved")) junit_case(b, &l.r[i]);
        lab_buf_printf(b, "  </testsuite>\n");
    }
    free(l.r);
    return rc;
}

int lab_nightly_confound_advice(lab_store *st, int64_t nightly, FILE *out, char *err, size_t errlen) {
    lab_nightly_confounds l;
    int rc = lab_store_nightly_get_confounds(st, nightly, &l, err, errlen);
    for (int64_t i = 0; !rc && i < l.n; i++) {
        const confound *x = &l.r[i];
        if (strcmp(x->state, "open")) continue;
        char how[600], fix[1200];
        standing(x, how, sizeof how);
        remedy(x, fix, sizeof fix);
        fprintf(out, "vtlab nightly: open confound %s (%s; %s): %s\n", x->key, x->rule, how, fix);
    }
    free(l.r);
    return rc;
}
