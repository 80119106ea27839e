/*
 * audit.c — `vtlab audit` (see audit.h): loads the ledger and the finished
 * runs, places measurements in defects' code ranges (asking git), applies the
 * rules (confound.c) to every claim and run in a fixed order, stores the
 * findings as durable flags and prints the table (store_audit.c).
 *
 * The order of the findings is the order in which new flags are stored (and
 * numbered): per claim R1 then R6; every claim's R4; per run R1, R2, R3, then
 * for each reference of its comparisons R4, R3 and R1 on the reference side,
 * then R6; every run's R5; last, what claims inherit from their runs.
 */
#include "audit.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "confound.h"
#include "ledger.h"
#include "store.h"
#include "store_audit.h"
#include "util.h"

/* ------------------------------------------------------------ code ranges */

static int is_hex_commit(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) if (!isxdigit((unsigned char)s[n])) return 0;
    return n >= 4 && n <= 40;
}

/* What git can say about this working directory, asked once per audit. */
typedef struct git_info {
    int asked;
    int repo;      /* 1: cwd is inside a git work tree */
    int shallow;   /* 1: a shallow clone (history cut: "not an ancestor" proves nothing) */
} git_info;

static int run_quiet(const char *cmd) {
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static void git_ask(git_info *g) {
    if (g->asked) return;
    g->asked = 1;
    g->repo = run_quiet("git rev-parse --is-inside-work-tree >/dev/null 2>&1") == 0;
    if (!g->repo) return;
    FILE *p = popen("git rev-parse --is-shallow-repository 2>/dev/null", "r");
    char buf[16] = "";
    if (p) {
        if (!fgets(buf, sizeof buf, p)) buf[0] = '\0';
        pclose(p);
    }
    g->shallow = strncmp(buf, "true", 4) == 0;
}

/* Is commit a an ancestor of (or equal to) commit b? 1 yes, 0 no, -1 git
 * cannot tell, with the reason in why: not a repository, a commit unknown to
 * git (in a shallow clone: outside its cut history), or a shallow clone's
 * "no" (the path between them may be below the cut). */
static int git_is_ancestor(git_info *g, const char *a, const char *b, char *why, size_t n) {
    if (!is_hex_commit(a) || !is_hex_commit(b)) {
        snprintf(why, n, "%s is not a commit id", is_hex_commit(a) ? b : a);
        return -1;
    }
    git_ask(g);
    if (!g->repo) { snprintf(why, n, "the working directory is not a git repository"); return -1; }
    char cmd[256];
    for (int i = 0; i < 2; i++) {
        const char *c = i ? b : a;
        snprintf(cmd, sizeof cmd, "git cat-file -e %s^{commit} >/dev/null 2>&1", c);
        if (run_quiet(cmd) != 0) {
            snprintf(why, n, g->shallow ? "shallow clone: commit %s is not in its history" : "commit %s is unknown to git", c);
            return -1;
        }
    }
    snprintf(cmd, sizeof cmd, "git merge-base --is-ancestor %s %s >/dev/null 2>&1", a, b);
    int st = run_quiet(cmd);
    if (st == 0) return 1;
    if (st == 1 && !g->shallow) return 0;
    snprintf(why, n, st == 1 ? "shallow clone: %s looks unrelated to %s, but history is cut" : "git merge-base failed on %s, %s",
             a, b);
    return -1;
}

/* One bound of the range. Returns 1 when the measurement is on the defect's
 * side of it (at or after `introduced`; before `fixed`), 0 when it is on the
 * other side, -1 when this cannot be decided; how receives the basis.
 * Ancestry decides when it can. Otherwise dates decide, only when the days
 * differ (a measurement dated on the bound's own day may be from before or
 * after the commit), and, when both sides name commits that git could not
 * relate, only towards the defect: giving a record more information (a date)
 * never makes the audit less safe than the commit alone would. */
static int bound_side(git_info *g, const char *commit, const char *date, const lab_code_point *p, int is_fix,
                      char *how, size_t n) {
    const char *which = is_fix ? "fixed" : "introduced";
    if (!p->commit && !p->date) { snprintf(how, n, "%s: open", which); return 1; }
    char why[256] = "";
    if (p->commit && commit) {
        int a = git_is_ancestor(g, p->commit, commit, why, sizeof why);
        if (a >= 0) {
            snprintf(how, n, "%s: commit ancestry (%s %s an ancestor of %s)", which, p->commit, a ? "is" : "is not",
                     commit);
            return is_fix ? !a : a;
        }
    } else if (p->commit) {
        snprintf(why, sizeof why, "the measurement names no commit");
    } else if (commit) {
        snprintf(why, sizeof why, "the bound names no commit");
    }
    if (p->date && date) {
        int c = strncmp(date, p->date, 10);   /* the measurement's day against the bound's */
        if (c != 0) {
            int side = is_fix ? c < 0 : c > 0;
            if (!side && p->commit && commit) {
                /* both name commits and git could not relate them: a date
                 * alone must not rule the defect out (the measured commit may
                 * be an old one, measured later) */
                snprintf(how, n, "%s: cannot tell: ancestry undecided: %s; the dates (%.10s %s %.10s) alone do not "
                         "rule it out", which, why, date, c < 0 ? "<" : ">", p->date);
                return -1;
            }
            snprintf(how, n, "%s: dates (%.10s %s %.10s)%s%s", which, date, c < 0 ? "<" : ">", p->date,
                     why[0] ? "; ancestry undecided: " : "", why);
            return side;
        }
        snprintf(how, n, "%s: cannot tell: measured on the bound's own day %.10s%s%s", which, date,
                 why[0] ? "; ancestry undecided: " : "", why);
        return -1;
    }
    snprintf(how, n, "%s: cannot tell: %s", which, why[0] ? why : "no commit or date to compare");
    return -1;
}

/* Three-valued placement of (commit, date) in [introduced, fixed): outside as
 * soon as one bound decides it; inside when both do; otherwise cannot tell —
 * which the rules flag (a defect that may apply is flagged, not ignored).
 * how receives the basis of both bounds. */
static lab_placement place_in_range(void *env, const char *commit, const char *date, const lab_code_point *in,
                                    const lab_code_point *fx, char *how, size_t n) {
    git_info *g = env;
    char hi[512], hf[512];
    int a = bound_side(g, commit, date, in, 0, hi, sizeof hi);
    int b = bound_side(g, commit, date, fx, 1, hf, sizeof hf);
    snprintf(how, n, "%s; %s", hi, hf);
    if (a == 0 || b == 0) return LAB_PLACE_OUTSIDE;
    if (a < 0 || b < 0) return LAB_PLACE_UNKNOWN;
    return LAB_PLACE_INSIDE;
}

/* ------------------------------------------------------------ the rules in order */

/* Every rule on one finished run; the first error stops the audit. */
static int audit_one_run(lab_confound *cx, const lab_audit_finished_run *r) {
    lab_subject s = {.run = r};
    int rc = lab_rule_r1(cx, &s);
    if (!rc) rc = lab_rule_r2(cx, &s);
    if (!rc) rc = lab_rule_r3(cx, &s);
    lab_audit_reference *refs = NULL;
    int64_t n = 0;
    if (!rc) rc = lab_confound_references(cx, r, &refs, &n);
    for (int64_t i = 0; !rc && i < n; i++) {
        /* a comparison is confounded whichever side went through a defect */
        lab_subject with_ref = {.run = r, .ref = &refs[i]};
        rc = lab_rule_r4(cx, &with_ref);
        if (!rc) rc = lab_rule_r3(cx, &with_ref);
        if (!rc) rc = lab_rule_r1(cx, &with_ref);
    }
    lab_audit_free(refs);
    if (!rc) rc = lab_rule_r6(cx, &s);
    return rc;
}

/* Every rule on every claim and run, in the order of the findings (see the
 * top of this file). */
static int apply_rules(lab_confound *cx) {
    const lab_ledger *l = cx->l;
    int rc = LAB_OK;
    for (int64_t i = 0; !rc && i < l->n_claims; i++) {
        lab_subject s = {.claim = &l->claims[i]};
        rc = lab_rule_r1(cx, &s);
        if (!rc) rc = lab_rule_r6(cx, &s);
    }
    for (int64_t i = 0; !rc && i < l->n_claims; i++) {
        lab_subject s = {.claim = &l->claims[i]};
        rc = lab_rule_r4(cx, &s);
    }
    for (int64_t i = 0; !rc && i < cx->n_runs; i++) rc = audit_one_run(cx, &cx->runs[i]);
    for (int64_t i = 0; !rc && i < cx->n_runs; i++) {
        lab_subject s = {.run = &cx->runs[i]};
        rc = lab_rule_r5(cx, &s);
    }
    if (!rc) lab_confound_inherit(cx);
    if (!rc && cx->f->oom) rc = lab_errf(cx->err, cx->errlen, LAB_ENOMEM, "audit: out of memory");
    return rc;
}

/* A claim superseded by a reopened one: its flags are history, resolved. */
static void mark_superseded(const lab_ledger *l, lab_findings *f) {
    for (int64_t i = 0; i < f->n; i++) {
        lab_audit_flag *x = &f->v[i];
        if (!x->claim) continue;
        const lab_claim *c = lab_ledger_claim(l, x->subject);
        if (c && c->superseded_by)
            snprintf(x->resolved_by, sizeof x->resolved_by, "reopened: superseded by claim %s", c->superseded_by);
    }
}

/* ------------------------------------------------------------ the table */

static int print_table(lab_store *st, const char *since, FILE *out, char *err, size_t errlen) {
    lab_audit_table_row *t = NULL;
    int64_t n = 0;
    int rc = lab_audit_read_table(st, since, &t, &n, err, errlen);
    if (rc) return rc;
    fprintf(out, "%-9s %-44s %-4s %s\n", "STATUS", "SUBJECT", "RULE", "REASON");
    for (int64_t i = 0; i < n; i++) {
        char label[400];
        const char *status = t[i].resolved ? "resolved" : t[i].expected ? "expected" : "CONFOUND";
        if (!strcmp(t[i].kind, "claim")) snprintf(label, sizeof label, "claim %s", t[i].subject);
        else snprintf(label, sizeof label, "run %s %s", t[i].subject, t[i].what);
        fprintf(out, "%-9s %-44.44s %-4s %s\n", status, label, t[i].rule, t[i].reason);
        if (t[i].resolved) fprintf(out, "%-9s %-44s %-4s   resolved: %s\n", "", "", "", t[i].resolved_by);
    }
    if (!n) fprintf(out, "(no flags)\n");
    lab_audit_free(t);
    return LAB_OK;
}

/* The R1 findings the runtime evidence overruled, with their basis: a clean
 * result says why it is clean where the code range alone would have flagged
 * it (docs/specs.md, "R1: the order of evidence"). */
static void print_cleared(const lab_findings *f, FILE *out) {
    if (!f->n_cleared) return;
    fprintf(out, "\ncleared by runtime evidence (R1: the subject\'s own probes at the defect\'s site):\n");
    for (int64_t i = 0; i < f->n_cleared; i++) {
        const lab_audit_flag *x = &f->cleared[i];
        char label[400];
        snprintf(label, sizeof label, "%s %s", x->claim ? "claim" : "run", x->subject);
        fprintf(out, "%-9s %-44.44s %-4s %s\n", "clean", label, x->rule, x->reason);
    }
}

static void json_cleared(const lab_findings *f, cJSON *o) {
    cJSON *arr = cJSON_AddArrayToObject(o, "cleared");
    for (int64_t i = 0; arr && i < f->n_cleared; i++) {
        const lab_audit_flag *x = &f->cleared[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "kind", x->claim ? "claim" : "run");
        cJSON_AddStringToObject(c, "subject", x->subject);
        cJSON_AddStringToObject(c, "rule", x->rule);
        cJSON_AddStringToObject(c, "key", x->key);
        cJSON_AddStringToObject(c, "reason", x->reason);
        cJSON *ev = cJSON_Parse(x->evidence);
        if (ev) cJSON_AddItemToObject(c, "evidence", ev);
        cJSON_AddItemToArray(arr, c);
    }
}

/* `vtlab audit --json`: the counts and the table's rows as one JSON object. */
static int print_json(lab_store *st, const char *since, const lab_audit_result *res, const lab_findings *fd,
                      FILE *out, char *err, size_t errlen) {
    lab_audit_table_row *t = NULL;
    int64_t n = 0;
    int rc = lab_audit_read_table(st, since, &t, &n, err, errlen);
    if (rc) return rc;
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "flags");
    cJSON_AddNumberToObject(o, "claims", (double)res->n_claims);
    cJSON_AddNumberToObject(o, "defects", (double)res->n_defects);
    cJSON_AddNumberToObject(o, "finished_runs", (double)res->n_runs);
    cJSON_AddNumberToObject(o, "open", (double)res->n_open);
    cJSON_AddNumberToObject(o, "expected", (double)res->n_expected);
    cJSON_AddNumberToObject(o, "new", (double)res->n_new);
    cJSON_AddNumberToObject(o, "resolved", (double)res->n_resolved);
    for (int64_t i = 0; arr && i < n; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "status", t[i].resolved ? "resolved" : t[i].expected ? "expected" : "confound");
        cJSON_AddStringToObject(f, "kind", t[i].kind);
        cJSON_AddStringToObject(f, "subject", t[i].subject);
        if (t[i].what[0]) cJSON_AddStringToObject(f, "run", t[i].what);
        cJSON_AddStringToObject(f, "rule", t[i].rule);
        cJSON_AddStringToObject(f, "reason", t[i].reason);
        if (t[i].resolved) cJSON_AddStringToObject(f, "resolved_by", t[i].resolved_by);
        cJSON_AddItemToArray(arr, f);
    }
    json_cleared(fd, o);
    lab_audit_free(t);
    char *text = o && arr ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    fprintf(out, "%s\n", text);
    free(text);
    return LAB_OK;
}

/* The rules over the ledger and the finished runs; the findings stored
 * (f: the caller's, freed by it, so that what was cleared can be printed). */
static int audit_store(lab_store *st, const lab_ledger *l, lab_audit_result *res, lab_findings *fp, char *err,
                       size_t errlen) {
    lab_audit_finished_run *runs = NULL;
    int64_t n_runs = 0;
    lab_findings f = {0};
    git_info git = {0};
    int rc = lab_audit_read_runs(st, &runs, &n_runs, err, errlen);
    if (!rc) {
        lab_confound cx = {.st = st, .l = l, .runs = runs, .n_runs = n_runs, .place = place_in_range,
                           .place_env = &git, .f = &f, .err = err, .errlen = errlen};
        rc = apply_rules(&cx);
    }
    res->n_claims = l->n_claims;
    res->n_defects = l->n_defects;
    res->n_runs = n_runs;
    if (!rc) {
        mark_superseded(l, &f);
        lab_audit_record rec = {l->dir, l->n_claims, l->n_defects, n_runs};
        lab_audit_counts k;
        rc = lab_audit_store_flags(st, f.v, f.n, &rec, &k, err, errlen);
        if (!rc) {
            res->n_open = k.n_open;
            res->n_expected = k.n_expected;
            res->n_new = k.n_new;
            res->n_resolved = k.n_resolved;
        }
    }
    *fp = f;
    lab_audit_free(runs);
    return rc;
}

int lab_audit_run(const lab_audit_opts *o, lab_audit_result *res, FILE *out, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    lab_ledger l;
    int rc = lab_ledger_load(o->specs_dir, &l, err, errlen);
    if (rc) return rc;
    lab_store *st = NULL;
    rc = lab_store_open(&st, o->db_path, err, errlen);
    if (rc) { lab_ledger_free(&l); return rc; }
    char started[32];
    lab_now_iso(started);
    lab_findings f = {0};
    rc = audit_store(st, &l, res, &f, err, errlen);
    if (!rc && out && o->json) {
        rc = print_json(st, started, res, &f, out, err, errlen);
        out = NULL;
    }
    if (!rc && out) {
        fprintf(out, "audit of %lld claim(s) and %lld defect(s) in %s, %lld finished run(s) in %s\n\n",
                (long long)l.n_claims, (long long)l.n_defects, o->specs_dir, (long long)res->n_runs, o->db_path);
        rc = print_table(st, started, out, err, errlen);
        if (!rc) print_cleared(&f, out);
    }
    if (!rc && out) {
        fprintf(out, "\nrules: R1 measured through a known defect, R2 a runtime assertion failed, R3 a knob did not take\n"
                     "effect, R4 mismatched reference, R5 not reproducible, R6 underpowered (docs/specs.md)\n");
        fprintf(out, "\n%lld confound(s) open, %lld expected (replays of a defect), %lld new, %lld resolved by this audit\n",
                (long long)res->n_open, (long long)res->n_expected, (long long)res->n_new, (long long)res->n_resolved);
    }
    lab_findings_free(&f);
    lab_store_close(st);
    lab_ledger_free(&l);
    return rc;
}
