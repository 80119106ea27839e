/*
 * nightly_outputs.c — what a nightly says, in the forms CI systems read:
 * junit.xml (a test case per experiment x arm, the audit, the confounds),
 * nightly.md (the summary for a CI job page), regressions.atom (the new
 * regressions and confounds of the last nightlies), and the "not finished"
 * junit.xml and nightly.md that stand in for them while a night runs or
 * after it failed. Apart from the night's flow (nightly.c) and the
 * comparison (nightly_compare.c) because it only reads what they stored
 * (through store_nightly.h): each output can be written again from the
 * database alone. The confounds' sections of nightly.md and junit.xml are
 * nightly_confounds.c's; their feed entries are here, beside the
 * regressions' entries, so that both kinds share one entry shape.
 */
#include "nightly_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nightly_confounds.h"
#include "util.h"

/* Rows as the outputs read them (store_nightly.h). */
typedef lab_nightly_row nightly_row;
typedef lab_nightly_case tcase;

/* Findings of (experiment, arm) of a nightly appended to b as lines
 * "kind: message"; regression selects regressions (1) or notes (0). *n
 * (may be NULL): how many. */
static int case_findings(lab_store *st, int64_t id, const char *eid, const char *arm, int regression, lab_buf *b,
                         int *n, char *err, size_t errlen) {
    lab_nightly_shown_list l;
    int rc = lab_store_nightly_case_findings(st, id, eid, arm, regression, &l, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < l.n; i++)
        lab_buf_printf(b, "%s%s: %s", b->len ? "\n" : "", l.r[i].kind, l.r[i].message);
    if (n) *n = (int)l.n;
    lab_nightly_shown_free(&l);
    return LAB_OK;
}

/* Text escaped for XML: junit.xml and the feed. */
static void x(lab_buf *b, const char *s) { lab_esc_html(b, s); }

/* ------------------------------------------------------------ junit.xml */

/* What junit.xml shows of a nightly: its row, its test cases with their
 * regressions and notes, and the suite of its confounds. */
typedef struct junit_data {
    nightly_row nr;
    tcase      *cs;
    int64_t     nc;
    int        *fail;
    lab_buf    *reg, *notes, confounds;
    int         failures, n_confounds, confound_failures;
    double      time;
} junit_data;

static void junit_free(junit_data *d) {
    for (int64_t i = 0; d->reg && i < d->nc; i++) lab_buf_free(&d->reg[i]);
    for (int64_t i = 0; d->notes && i < d->nc; i++) lab_buf_free(&d->notes[i]);
    free(d->reg);
    free(d->notes);
    free(d->fail);
    free(d->cs);
    lab_buf_free(&d->confounds);
}

static int junit_load(lab_store *st, int64_t id, junit_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int rc = lab_store_nightly_get(st, id, &d->nr, err, errlen);
    if (!rc) rc = lab_store_nightly_cases(st, id, &d->cs, &d->nc, err, errlen);
    if (rc) return rc;
    /* one test case per confound key, a failure per open one */
    if ((rc = lab_nightly_junit_confounds(st, id, &d->confounds, &d->n_confounds, &d->confound_failures, err, errlen)))
        return rc;
    size_t m = (size_t)(d->nc ? d->nc : 1);
    d->fail = calloc(m, sizeof *d->fail);
    d->reg = calloc(m, sizeof *d->reg);
    d->notes = calloc(m, sizeof *d->notes);
    if (!d->fail || !d->reg || !d->notes) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    d->failures = d->confound_failures;
    for (int64_t i = 0; i < d->nc && !rc; i++) {
        int n = 0;
        rc = case_findings(st, id, d->cs[i].eid, d->cs[i].arm, 1, &d->reg[i], &n, err, errlen);
        if (!rc) rc = case_findings(st, id, d->cs[i].eid, d->cs[i].arm, 0, &d->notes[i], NULL, err, errlen);
        d->fail[i] = n > 0;
        d->failures += d->fail[i];
        d->time += d->cs[i].time;
    }
    return rc;
}

/* <property name="NAME" value="VALUE"/>, the value escaped (it may come
 * from an engine's hello). */
static void junit_property(lab_buf *b, const char *name, const char *value) {
    lab_buf_printf(b, "<property name=\"%s\" value=\"", name);
    x(b, value);
    lab_buf_printf(b, "\"/>");
}

/* The engine of a test case's runs as properties of the case (engine_name.h:
 * "engine" is its label; for the builtin, engine.commit is vtlab's). */
static void junit_engine(lab_buf *b, const lab_engine_name *e) {
    char label[160];
    lab_buf_printf(b, "      <properties>");
    junit_property(b, "engine", lab_engine_label(e, label, sizeof label));
    junit_property(b, "engine.name", e->name);
    junit_property(b, "engine.version", e->version);
    junit_property(b, "engine.commit", e->commit);
    junit_property(b, "engine.model_sha256", e->model_sha256);
    lab_buf_printf(b, "</properties>\n");
}

/* One <testcase> of junit.xml. */
static void junit_case(lab_buf *b, const junit_data *d, int64_t k) {
    lab_buf_printf(b, "    <testcase classname=\"");
    x(b, d->cs[k].eid);
    lab_buf_printf(b, "\" name=\"");
    x(b, d->cs[k].arm);
    lab_buf_printf(b, "\" time=\"%.3f\">\n", d->cs[k].time);
    junit_engine(b, &d->cs[k].engine);
    if (d->fail[k]) {
        char first[300];
        snprintf(first, sizeof first, "%s", d->reg[k].data);
        first[strcspn(first, "\n")] = 0;
        lab_buf_printf(b, "      <failure type=\"regression\" message=\"");
        x(b, first);
        lab_buf_printf(b, "\">");
        x(b, d->reg[k].data);
        lab_buf_printf(b, "</failure>\n");
    }
    lab_buf_printf(b, "      <system-out>%d run(s) in this nightly", d->cs[k].runs);
    if (d->notes[k].len) { lab_buf_printf(b, "\n"); x(b, d->notes[k].data); }
    lab_buf_printf(b, "</system-out>\n    </testcase>\n");
}

/* The distinct engine labels of cases i .. j-1, in case order, ", "-joined:
 * the suite's "engines" property, for CI systems that show only a suite's
 * properties. */
static void junit_suite_engines(lab_buf *b, const junit_data *d, int64_t i, int64_t j) {
    lab_buf all = {0};
    for (int64_t k = i; k < j; k++) {
        char label[160], seen[160];
        lab_engine_label(&d->cs[k].engine, label, sizeof label);
        int dup = 0;
        for (int64_t m = i; m < k && !dup; m++)
            dup = !strcmp(lab_engine_label(&d->cs[m].engine, seen, sizeof seen), label);
        if (!dup) lab_buf_printf(&all, "%s%s", all.len ? ", " : "", label);
    }
    if (all.oom) b->oom = 1;
    junit_property(b, "engines", all.data ? all.data : "");
    lab_buf_free(&all);
}

/* The <testsuite> of the experiment of case i: cases i .. the returned index - 1. */
static int64_t junit_suite(lab_buf *b, const junit_data *d, int64_t id, int64_t i) {
    int64_t j = i;
    int tf = 0;
    double t = 0;
    while (j < d->nc && !strcmp(d->cs[j].eid, d->cs[i].eid)) { tf += d->fail[j]; t += d->cs[j].time; j++; }
    lab_buf_printf(b, "  <testsuite name=\"");
    x(b, d->cs[i].eid);
    lab_buf_printf(b, "\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" time=\"%.3f\" timestamp=\"",
                   (int)(j - i), tf, t);
    x(b, d->nr.started);
    lab_buf_printf(b, "\" hostname=\"");
    x(b, d->nr.host);
    lab_buf_printf(b, "\">\n    <properties><property name=\"nightly\" value=\"%lld\"/><property name=\"commit\" value=\"",
                   (long long)id);
    x(b, d->nr.commit);
    lab_buf_printf(b, "\"/><property name=\"code_version\" value=\"");
    x(b, d->nr.code_version);
    lab_buf_printf(b, "\"/>");
    junit_suite_engines(b, d, i, j);
    lab_buf_printf(b, "</properties>\n");
    for (int64_t k = i; k < j; k++) junit_case(b, d, k);
    lab_buf_printf(b, "  </testsuite>\n");
    return j;
}

/* The last <testsuite>s: that the audit ran to the end (an error when it
 * did not), and the confounds (nightly_confounds.c). */
static void junit_audit(lab_buf *b, const junit_data *d, int audit_failed) {
    lab_buf_printf(b, "  <testsuite name=\"audit\" tests=\"1\" failures=\"0\" errors=\"%d\" skipped=\"0\" time=\"0\">\n"
                      "    <testcase classname=\"audit\" name=\"the audit ran to the end\" time=\"0\">\n", audit_failed);
    if (audit_failed) {
        lab_buf_printf(b, "      <error type=\"audit\" message=\"the audit did not run to the end\">");
        x(b, d->nr.audit);
        lab_buf_printf(b, "</error>\n");
    }
    lab_buf_printf(b, "      <system-out>nightly %lld: ", (long long)d->nr.id);
    x(b, d->nr.status);
    lab_buf_printf(b, "\naudit: ");
    x(b, d->nr.audit);
    lab_buf_printf(b, "</system-out>\n    </testcase>\n  </testsuite>\n");
    if (d->confounds.len) lab_buf_append(b, d->confounds.data, d->confounds.len);
    if (d->confounds.oom) b->oom = 1;
}

int lab_nightly_write_junit(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    junit_data d;
    int rc = junit_load(st, id, &d, err, errlen);
    if (rc) { junit_free(&d); return rc; }
    int audit_failed = !strncmp(d.nr.audit, "failed:", 7);
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vtlab nightly %lld\" tests=\"%d\" "
                       "failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n", (long long)id, (int)d.nc + 1 + d.n_confounds,
                   d.failures, audit_failed, d.time);
    for (int64_t i = 0; i < d.nc;) i = junit_suite(&b, &d, id, i);
    junit_audit(&b, &d, audit_failed);
    lab_buf_printf(&b, "</testsuites>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    junit_free(&d);
    return rc;
}

/* ------------------------------------------------------------ nightly.md */

/* The table of nightly.md: one row per test case. */
static int md_cases(lab_store *st, int64_t id, const tcase *cs, int64_t nc, lab_buf *b, char *err, size_t errlen) {
    int rc = LAB_OK;
    lab_buf_printf(b, "| experiment | arm | engine | result | findings |\n|---|---|---|---|---|\n");
    for (int64_t i = 0; i < nc && !rc; i++) {
        lab_buf r = {0}, n = {0};
        char engine[320];
        int bad = 0;
        rc = case_findings(st, id, cs[i].eid, cs[i].arm, 1, &r, &bad, err, errlen);
        if (!rc) rc = case_findings(st, id, cs[i].eid, cs[i].arm, 0, &n, NULL, err, errlen);
        lab_buf_printf(b, "| ");
        lab_esc_md(b, cs[i].eid);
        lab_buf_printf(b, " | ");
        lab_esc_md(b, cs[i].arm);
        lab_buf_printf(b, " | ");
        lab_esc_md(b, lab_engine_describe(&cs[i].engine, engine, sizeof engine));
        lab_buf_printf(b, " | %s | ", bad ? "**REGRESSION**" : "ok");
        if (r.len) lab_esc_md(b, r.data);
        if (r.len && n.len) lab_buf_printf(b, "<br>");
        if (n.len) lab_esc_md(b, n.data);
        lab_buf_printf(b, " |\n");
        lab_buf_free(&r);
        lab_buf_free(&n);
    }
    return rc;
}

int lab_nightly_write_md(lab_store *st, int64_t id, const char *path, char *err, size_t errlen) {
    nightly_row nr;
    int rc = lab_store_nightly_get(st, id, &nr, err, errlen);
    if (rc) return rc;
    tcase *cs = NULL;
    int64_t nc = 0;
    if ((rc = lab_store_nightly_cases(st, id, &cs, &nc, err, errlen))) return rc;
    lab_buf b = {0};
    lab_confound_counts cc;
    if ((rc = lab_nightly_confound_counts(st, id, &cc, err, errlen))) { free(cs); return rc; }
    lab_buf_printf(&b, "# vtlab nightly %lld: %s\n\n", (long long)id,
                   !strcmp(nr.status, "PASSED") ? "passed" : !strcmp(nr.status, "REGRESSED") ? "**REGRESSED**"
                   : !strcmp(nr.status, "CONFOUNDED") ? "**CONFOUNDED**" : nr.status);
    lab_buf_printf(&b, "- started ");
    lab_esc_md(&b, nr.started);
    lab_buf_printf(&b, ", finished ");
    lab_esc_md(&b, nr.finished);
    lab_buf_printf(&b, " on ");
    lab_esc_md(&b, nr.host);
    lab_buf_printf(&b, "\n- code `");
    lab_esc_md_code(&b, nr.code_version);
    lab_buf_printf(&b, "`\n- %lld run(s), %lld regression(s), %lld open confound(s) (%lld new), %lld acknowledged, "
                       "%lld resolved\n- audit: ", (long long)nr.n_runs, (long long)nr.n_reg, (long long)cc.open,
                   (long long)cc.fresh, (long long)cc.acknowledged, (long long)cc.resolved);
    lab_esc_md(&b, nr.audit);
    lab_buf_printf(&b, "\n- full report: `index.html`; JUnit: `junit.xml`; feed: `regressions.atom`\n\n");
    rc = lab_nightly_md_confounds(st, id, &b, err, errlen);
    if (!rc) rc = md_cases(st, id, cs, nc, &b, err, errlen);
    if (!rc) rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory")
                        : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    free(cs);
    return rc;
}

/* ------------------------------------------------------------ regressions.atom */

/* One <entry> of the feed. Its two kinds, a new regression and a new
 * confound, compose their own title and content (escaped) and share the
 * rest: the id (urn:vtlab:feed:FEED:KIND:ID), the time, the link into the
 * report, and the commit that opens the content. */
typedef struct feed_entry {
    lab_buf     title, content;         /* escaped */
    const char *kind;                   /* "finding" or "confound": the id's namespace */
    int64_t     id;
    const char *at, *anchor, *commit;   /* anchor: the section of index.html */
} feed_entry;

/* Appends part (escaped) to b and frees it. */
static void feed_part(lab_buf *b, lab_buf *part) {
    if (part->len) lab_buf_append(b, part->data, part->len);
    if (part->oom) b->oom = 1;
    lab_buf_free(part);
}

/* Appends e to b (and frees its title and content). */
static void feed_entry_put(lab_buf *b, const char *feed, feed_entry *e) {
    lab_buf_printf(b, "  <entry>\n    <title>");
    feed_part(b, &e->title);
    lab_buf_printf(b, "</title>\n    <id>urn:vtlab:feed:");
    x(b, feed);
    lab_buf_printf(b, ":%s:%lld</id>\n    <updated>", e->kind, (long long)e->id);
    x(b, e->at);
    lab_buf_printf(b, "</updated>\n    <link rel=\"alternate\" href=\"index.html#%s\"/>\n"
                      "    <content type=\"text\">commit ", e->anchor);
    x(b, e->commit);
    lab_buf_printf(b, ": ");
    feed_part(b, &e->content);
    lab_buf_printf(b, "</content>\n  </entry>\n");
}

/* The entry of a new regression. */
static void atom_finding(lab_buf *b, const char *feed, const lab_nightly_shown *f) {
    feed_entry e = {{0}, {0}, "finding", f->id, f->at, "nightly", f->commit};
    lab_buf_printf(&e.title, "nightly %lld: ", (long long)f->nightly);
    x(&e.title, f->experiment);
    lab_buf_printf(&e.title, "%s", f->experiment[0] && f->arm[0] ? "/" : "");
    x(&e.title, f->arm);
    lab_buf_printf(&e.title, ": ");
    x(&e.title, f->kind);
    lab_buf_printf(&e.title, " regression");
    x(&e.content, f->message);
    feed_entry_put(b, feed, &e);
}

/* The entry of a new confound (one per cause, nightly_confounds.h). */
static void atom_confound(lab_buf *b, const char *feed, const lab_nightly_confound *c) {
    feed_entry e = {{0}, {0}, "confound", c->id, c->at, "summary", c->commit};
    lab_buf_printf(&e.title, "nightly %lld ", (long long)c->nightly);
    x(&e.title, c->status);
    lab_buf_printf(&e.title, ": new confound ");
    x(&e.title, c->key);
    x(&e.content, c->subject);
    lab_buf_printf(&e.content, " %s%s", c->rule, c->runs[0] ? " (runs " : "");
    x(&e.content, c->runs);
    lab_buf_printf(&e.content, "%s: ", c->runs[0] ? ")" : "");
    x(&e.content, c->reason);
    feed_entry_put(b, feed, &e);
}

/* The new confounds of the last `nights` nightlies: they fail a night too. */
static int atom_confounds(lab_store *st, const char *feed, int64_t nights, lab_buf *b, char *err, size_t errlen) {
    lab_nightly_confounds l;
    int rc = lab_store_nightly_confound_feed(st, nights, &l, err, errlen);
    for (int64_t i = 0; !rc && i < l.n; i++) atom_confound(b, feed, &l.r[i]);
    free(l.r);
    return rc;
}

int lab_nightly_write_atom(lab_store *st, const char *path, char *err, size_t errlen) {
    /* ids from the database's feed_id: the same feed and entries whatever
     * host writes it (a host-named id made every entry look new) */
    char now[32], feed[72];
    lab_now_iso(now);
    int rc = lab_store_meta(st, "feed_id", feed, sizeof feed, err, errlen);
    if (rc) return rc;
    lab_nightly_shown_list l;
    if ((rc = lab_store_nightly_feed(st, 20, &l, err, errlen))) return rc;
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\">\n"
                       "  <title>vtlab nightly regressions and confounds</title>\n  <id>urn:vtlab:feed:");
    x(&b, feed);
    lab_buf_printf(&b, "</id>\n  <updated>%s</updated>\n  <author><name>vtlab nightly</name></author>\n"
                       "  <link rel=\"self\" href=\"regressions.atom\"/>\n"
                       "  <link rel=\"alternate\" href=\"index.html\"/>\n", now);
    for (int64_t i = 0; i < l.n; i++) atom_finding(&b, feed, &l.r[i]);
    lab_nightly_shown_free(&l);
    rc = atom_confounds(st, feed, 20, &b, err, errlen);
    if (rc) { lab_buf_free(&b); return rc; }
    lab_buf_printf(&b, "</feed>\n");
    rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------ while a night runs, and after it failed */

/* The outputs CI publishes, replaced at the start of a nightly by ones that
 * say it has not finished (junit.xml: one test case in error), so that a
 * nightly that dies, or cannot write its real outputs, never leaves the
 * previous night's files looking current. Writing them also proves that
 * --out is writable before hours of sweep. status is "RUNNING" or "FAILED",
 * why says what happened. On a failure to write, the stale files are
 * removed (unlinking needs no space on a full disk). */
int lab_nightly_write_unfinished(const char *out_dir, int64_t id, const char *status, const char *why, char *err,
                                 size_t errlen) {
    char path[4200], now[32];
    lab_now_iso(now);
    lab_buf b = {0};
    lab_buf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"vtlab nightly %lld\" tests=\"1\" "
                       "failures=\"0\" errors=\"1\" time=\"0\">\n  <testsuite name=\"nightly\" tests=\"1\" failures=\"0\" "
                       "errors=\"1\" skipped=\"0\" time=\"0\" timestamp=\"%s\">\n    <testcase classname=\"nightly\" "
                       "name=\"the nightly finished and wrote its outputs\" time=\"0\">\n      <error type=\"%s\" message=\"",
                   (long long)id, now, status);
    x(&b, why);
    lab_buf_printf(&b, "\">nightly %lld: %s: ", (long long)id, status);
    x(&b, why);
    lab_buf_printf(&b, "</error>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
    lab_buf md = {0};
    lab_buf_printf(&md, "# vtlab nightly %lld: %s\n\n", (long long)id, !strcmp(status, "FAILED") ? "**FAILED**" : status);
    lab_esc_md(&md, why);
    lab_buf_printf(&md, "\n");
    int rc = b.oom || md.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory") : LAB_OK;
    snprintf(path, sizeof path, "%s/junit.xml", out_dir);
    if (!rc) rc = lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    if (rc) unlink(path);
    snprintf(path, sizeof path, "%s/nightly.md", out_dir);
    if (!rc) rc = lab_cli_write_file_atomic(path, md.data, md.len, err, errlen);
    if (rc) unlink(path);
    lab_buf_free(&b);
    lab_buf_free(&md);
    return rc;
}
