/*
 * audit.c — the audit rules and the durable flags (see audit.h).
 *
 * Shape of the work: collect findings (subject, rule, key, reason, evidence)
 * from the ledger and the database into memory, then in one write
 * transaction upsert them into audit_flags, resolve the open flags no longer
 * found, and record the audit. Findings carry the numbers behind them as JSON
 * evidence so that a report can show why without re-deriving it.
 */
#include "audit.h"

#include <ctype.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "ledger.h"
#include "metrics.h"
#include "model/vt.h"
#include "store.h"
#include "util.h"

typedef struct finding {
    int      claim;          /* 1: subject is a claim id; 0: a run id */
    char     subject[128];
    char     rule[4];
    char     key[128];
    char    *reason;         /* owned */
    char    *evidence;       /* owned JSON */
    int      expected;
    char     resolved_by[192];   /* non-empty: store as resolved now (superseded claims) */
} finding;

typedef struct findings { finding *v; int64_t n, cap; int oom; } findings;

static finding *add(findings *f, int claim, const char *subject, const char *rule, const char *key,
                    const char *reason, cJSON *evidence, int expected) {
    if (f->n == f->cap) {
        int64_t cap = f->cap ? f->cap * 2 : 32;
        finding *nv = realloc(f->v, (size_t)cap * sizeof *nv);
        if (!nv) { f->oom = 1; cJSON_Delete(evidence); return NULL; }
        f->v = nv;
        f->cap = cap;
    }
    finding *x = &f->v[f->n++];
    memset(x, 0, sizeof *x);
    x->claim = claim;
    snprintf(x->subject, sizeof x->subject, "%s", subject);
    snprintf(x->rule, sizeof x->rule, "%s", rule);
    snprintf(x->key, sizeof x->key, "%s", key ? key : "");
    x->reason = lab_strdup(reason);
    x->evidence = evidence ? cJSON_PrintUnformatted(evidence) : lab_strdup("{}");
    cJSON_Delete(evidence);
    x->expected = expected;
    if (!x->reason || !x->evidence) f->oom = 1;
    return x;
}

static void findings_free(findings *f) {
    for (int64_t i = 0; i < f->n; i++) { free(f->v[i].reason); free(f->v[i].evidence); }
    free(f->v);
}

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

/* Where a measurement lies against a defect's code range [introduced, fixed). */
typedef enum { PLACE_OUTSIDE = 0, PLACE_INSIDE = 1, PLACE_UNKNOWN = 2 } placement;

static const char *placement_name(placement p) {
    return p == PLACE_INSIDE ? "inside" : p == PLACE_OUTSIDE ? "outside" : "cannot tell";
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
static placement place_in_range(git_info *g, const char *commit, const char *date, const lab_code_point *in,
                                const lab_code_point *fx, char *how, size_t n) {
    char hi[512], hf[512];
    int a = bound_side(g, commit, date, in, 0, hi, sizeof hi);
    int b = bound_side(g, commit, date, fx, 1, hf, sizeof hf);
    snprintf(how, n, "%s; %s", hi, hf);
    if (a == 0 || b == 0) return PLACE_OUTSIDE;
    if (a < 0 || b < 0) return PLACE_UNKNOWN;
    return PLACE_INSIDE;
}

static cJSON *kv_json(const lab_knobs_kv *kv) {
    cJSON *o = cJSON_CreateObject();
    for (int64_t i = 0; i < kv->n; i++) cJSON_AddStringToObject(o, kv->names[i], kv->values[i]);
    return o;
}

static cJSON *point_json(const lab_code_point *p) {
    cJSON *o = cJSON_CreateObject();
    if (p->commit) cJSON_AddStringToObject(o, "commit", p->commit); else cJSON_AddNullToObject(o, "commit");
    if (p->date) cJSON_AddStringToObject(o, "date", p->date); else cJSON_AddNullToObject(o, "date");
    return o;
}

static void trigger_text(const lab_knobs_kv *t, char *out, size_t n) {
    size_t o = 0;
    out[0] = '\0';
    for (int64_t i = 0; i < t->n && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%s=%s", i ? " " : "", t->names[i], t->values[i]);
    if (t->n == 0) snprintf(out, n, "(any knobs)");
}

/* ------------------------------------------------------------ claims */

/* The wording shared by claims and runs for an R1 placement. */
static const char *place_words(placement p) {
    return p == PLACE_INSIDE ? "falls in its code range" : "may fall in its code range (placement cannot be decided)";
}

/* R1 on one side of a claim (the arm's knobs, or the reference's: a
 * comparison is confounded whichever side went through the defect). */
static void r1_claim_side(git_info *g, const lab_claim *c, const lab_defect *x, int ref_side, findings *f) {
    const lab_knobs_kv *knobs = ref_side ? &c->ref_knobs : &c->arm_knobs;
    if (strcmp(c->codebase, x->codebase) || !lab_knobs_trigger(&x->trigger, knobs)) return;
    char commit[64] = "";   /* "abc123+dirty.<hash>" (a dirty build) is placed by its base commit */
    if (c->code.commit) snprintf(commit, sizeof commit, "%s", c->code.commit);
    commit[strcspn(commit, "+")] = '\0';
    char how[1100];
    placement pl = place_in_range(g, c->code.commit ? commit : NULL, c->code.date ? c->code.date : c->measured_at,
                                  &x->introduced, &x->fixed, how, sizeof how);
    if (pl == PLACE_OUTSIDE) return;
    char trig[256], reason[2048], replay[160], key[160];
    trigger_text(&x->trigger, trig, sizeof trig);
    if (x->replay_fault) snprintf(replay, sizeof replay, "replay with VT_FAULT=%s", x->replay_fault);
    else snprintf(replay, sizeof replay, "no replay recorded for it");
    snprintf(reason, sizeof reason,
             "measured through defect %s (%s) on the %s side: the %s's knobs include its trigger %s and the "
             "measurement (%s, %s) %s [%s]; %s",
             x->id, x->site, ref_side ? "reference" : "arm", ref_side ? "reference" : "arm", trig, c->codebase,
             c->code.commit ? c->code.commit : c->measured_at, place_words(pl), how, replay);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "defect", x->id);
    cJSON_AddStringToObject(ev, "site", x->site);
    cJSON_AddStringToObject(ev, "side", ref_side ? "reference" : "arm");
    cJSON_AddItemToObject(ev, "trigger", kv_json(&x->trigger));
    cJSON_AddItemToObject(ev, ref_side ? "reference_knobs" : "arm_knobs", kv_json(knobs));
    cJSON_AddItemToObject(ev, "introduced", point_json(&x->introduced));
    cJSON_AddItemToObject(ev, "fixed", point_json(&x->fixed));
    cJSON_AddStringToObject(ev, "placement", placement_name(pl));
    cJSON_AddStringToObject(ev, "placed_by", how);
    if (x->replay_fault) cJSON_AddStringToObject(ev, "replay_fault", x->replay_fault);
    /* the arm side keeps the plain defect id as its key: flags stored by
     * earlier audits stay the same flag */
    snprintf(key, sizeof key, "%s%s", ref_side ? "reference:" : "", x->id);
    add(f, 1, c->id, "R1", key, reason, ev, 0);
}

static void audit_claims(git_info *g, const lab_ledger *l, findings *f) {
    for (int64_t i = 0; i < l->n_claims; i++) {
        const lab_claim *c = &l->claims[i];
        for (int64_t d = 0; d < l->n_defects; d++) {
            r1_claim_side(g, c, &l->defects[d], 0, f);
            r1_claim_side(g, c, &l->defects[d], 1, f);
        }
        double lo, hi;
        lab_wilson(c->k, c->n, 1.959963984540054, &lo, &hi);
        const char *needs = lab_verdict_name(lab_decide(lo, hi, c->threshold, !strcmp(c->direction, ">=")));
        if (strcmp(c->verdict, "INCONCLUSIVE") && strcmp(c->verdict, needs)) {
            char reason[512];
            snprintf(reason, sizeof reason,
                     "underpowered: %s on %lld/%lld, but the Wilson 95%% interval [%.3f, %.3f] against the threshold "
                     "%s %.3f gives %s", c->verdict, (long long)c->k, (long long)c->n, lo, hi, c->direction,
                     c->threshold, needs);
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "k", (double)c->k);
            cJSON_AddNumberToObject(ev, "n", (double)c->n);
            cJSON_AddNumberToObject(ev, "lo", lo);
            cJSON_AddNumberToObject(ev, "hi", hi);
            cJSON_AddNumberToObject(ev, "threshold", c->threshold);
            cJSON_AddStringToObject(ev, "interval_supports", needs);
            add(f, 1, c->id, "R6", "", reason, ev, 0);
        }
    }
}

/* ------------------------------------------------------------ runs */

typedef struct run_row {
    int64_t id;
    char    experiment[128], arm[128], commit[64], started[32], knob_hash[65], model[65], dataset[65],
            code[256], logits[65], backend[16];
    int     expected_fail, assertions_ok, is_reference;
    char    assertion_reason[512];
} run_row;

static void col_text(sqlite3_stmt *s, int i, char *out, size_t n) { snprintf(out, n, "%s", lab_col_text(s, i)); }

/* What every rule of one audit works with. A rule returns LAB_OK or an error
 * (a statement that cannot be prepared or stepped is an error, never "no
 * findings": an audit that cannot read must not report a clean result). */
typedef struct audit_ctx {
    sqlite3          *db;
    const lab_ledger *l;
    git_info          git;
    findings         *f;
    const run_row    *runs;   /* the finished runs, ascending id */
    int64_t           n_runs;
    char             *err;
    size_t            errlen;
} audit_ctx;

static int sql_error(audit_ctx *a, const char *what) {
    return lab_errf(a->err, a->errlen, LAB_EIO, "audit: %s: %s", what, sqlite3_errmsg(a->db));
}

static int prepare(audit_ctx *a, const char *what, const char *sql, sqlite3_stmt **s) {
    if (sqlite3_prepare_v2(a->db, sql, -1, s, NULL) != SQLITE_OK) {
        *s = NULL;
        return sql_error(a, what);
    }
    return LAB_OK;
}

/* Finishes a stepping loop: the last step must have been SQLITE_DONE. */
static int finish_steps(audit_ctx *a, sqlite3_stmt *s, int last, const char *what) {
    int rc = last == SQLITE_DONE ? LAB_OK : sql_error(a, what);
    sqlite3_finalize(s);
    return rc;
}

static const run_row *find_run(const audit_ctx *a, int64_t id) {
    int64_t lo = 0, hi = a->n_runs - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a->runs[mid].id == id) return &a->runs[mid];
        if (a->runs[mid].id < id) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}

static void kv_release(lab_knobs_kv *kv) {
    for (int64_t i = 0; i < kv->n; i++) { free(kv->names[i]); free(kv->values[i]); }
    free(kv->names);
    free(kv->values);
    memset(kv, 0, sizeof *kv);
}

/* The knobs of a run as a kv (for trigger matching). */
static int run_knobs(audit_ctx *a, int64_t run, lab_knobs_kv *kv) {
    sqlite3_stmt *s = NULL;
    memset(kv, 0, sizeof *kv);
    int rc = prepare(a, "knobs", "SELECT name, value FROM run_knobs WHERE run_id = ?", &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int64_t cap = 0;
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        if (kv->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **na = realloc(kv->names, (size_t)cap * sizeof *na);
            if (na) kv->names = na;
            char **nb = na ? realloc(kv->values, (size_t)cap * sizeof *nb) : NULL;
            if (nb) kv->values = nb;
            if (!na || !nb) { sqlite3_finalize(s); kv_release(kv); return lab_errf(a->err, a->errlen, LAB_ENOMEM, "out of memory"); }
        }
        kv->names[kv->n] = lab_strdup((const char *)sqlite3_column_text(s, 0));
        kv->values[kv->n] = lab_strdup((const char *)sqlite3_column_text(s, 1));
        if (!kv->names[kv->n] || !kv->values[kv->n]) a->f->oom = 1;
        kv->n++;
    }
    rc = finish_steps(a, s, st, "knobs");
    if (rc) kv_release(kv);
    return rc;
}

static void run_subject(const run_row *r, char *out, size_t n) { snprintf(out, n, "%lld", (long long)r->id); }

/* R1 for the run `m` measured on one side of subject run r's comparison
 * (m == r: the arm side; m = r's reference run: the reference side). A
 * defect applies when its trigger is in m's knobs and m's code is (or may
 * be) in its range, or when m's own probes show the defect's site violated. */
static int r1_run_side(audit_ctx *a, const run_row *r, const run_row *m, const lab_knobs_kv *knobs) {
    int ref_side = m != r;
    char subj[32], reason[2048], key[192], side[64];
    run_subject(r, subj, sizeof subj);
    if (ref_side) snprintf(side, sizeof side, "its reference run %lld was ", (long long)m->id);
    else side[0] = '\0';
    for (int64_t d = 0; d < a->l->n_defects; d++) {
        const lab_defect *x = &a->l->defects[d];
        snprintf(key, sizeof key, "%s%s", ref_side ? "reference:" : "", x->id);
        char commit[64], how[1100];
        snprintf(commit, sizeof commit, "%s", m->commit);
        commit[strcspn(commit, "+")] = '\0';
        if (!strcmp(x->codebase, "vtlab") && lab_knobs_trigger(&x->trigger, knobs)) {
            placement pl = place_in_range(&a->git, commit[0] ? commit : NULL, m->started, &x->introduced, &x->fixed,
                                          how, sizeof how);
            if (pl != PLACE_OUTSIDE) {
                char trig[256];
                trigger_text(&x->trigger, trig, sizeof trig);
                snprintf(reason, sizeof reason, "%smeasured through defect %s (%s)%s: knobs include %s and vtlab %s %s [%s]",
                         side, x->id, x->site, ref_side ? " (reference side)" : "", trig, m->commit, place_words(pl), how);
                cJSON *ev = cJSON_CreateObject();
                cJSON_AddStringToObject(ev, "defect", x->id);
                cJSON_AddStringToObject(ev, "side", ref_side ? "reference" : "arm");
                cJSON_AddNumberToObject(ev, "measured_run", (double)m->id);
                cJSON_AddStringToObject(ev, "commit", m->commit);
                cJSON_AddStringToObject(ev, "placement", placement_name(pl));
                cJSON_AddStringToObject(ev, "placed_by", how);
                add(a->f, 0, subj, "R1", key, reason, ev, r->expected_fail);
                continue;
            }
        }
        sqlite3_stmt *s = NULL;
        int rc = prepare(a, "R1 probes", "SELECT layer, detail, bytes_per_row, src_row_bytes, dst_row_bytes, rows_unwritten"
                         " FROM probes WHERE run_id = ? AND site = ? AND ok = 0 ORDER BY layer", &s);
        if (rc) return rc;
        sqlite3_bind_int64(s, 1, m->id);
        sqlite3_bind_text(s, 2, x->site, -1, SQLITE_TRANSIENT);
        int64_t nbad = 0, first_layer = 0;
        char detail[256] = "";
        cJSON *ev = cJSON_CreateObject();
        int st;
        while ((st = sqlite3_step(s)) == SQLITE_ROW) {
            if (nbad++ == 0) {
                first_layer = sqlite3_column_int64(s, 0);
                col_text(s, 1, detail, sizeof detail);
                cJSON_AddNumberToObject(ev, "first_layer", (double)first_layer);
                cJSON_AddNumberToObject(ev, "bytes_per_row", (double)sqlite3_column_int64(s, 2));
                cJSON_AddNumberToObject(ev, "src_row_bytes", (double)sqlite3_column_int64(s, 3));
                cJSON_AddNumberToObject(ev, "dst_row_bytes", (double)sqlite3_column_int64(s, 4));
                cJSON_AddNumberToObject(ev, "rows_unwritten", (double)sqlite3_column_int64(s, 5));
            }
        }
        if ((rc = finish_steps(a, s, st, "R1 probes"))) { cJSON_Delete(ev); return rc; }
        if (!nbad) { cJSON_Delete(ev); continue; }
        cJSON_AddStringToObject(ev, "defect", x->id);
        cJSON_AddStringToObject(ev, "side", ref_side ? "reference" : "arm");
        cJSON_AddNumberToObject(ev, "measured_run", (double)m->id);
        cJSON_AddNumberToObject(ev, "violated_layers", (double)nbad);
        snprintf(reason, sizeof reason, "%smeasured through defect %s: %s probes show %s violated on %lld layer(s), "
                 "first layer %lld: %s", side, x->id, ref_side ? "its" : "its own", x->site, (long long)nbad,
                 (long long)first_layer, detail);
        add(a->f, 0, subj, "R1", key, reason, ev, r->expected_fail);
    }
    return LAB_OK;
}

/* R2: a failed runtime assertion in the run. */
static int r2_assertions(audit_ctx *a, const run_row *r) {
    if (r->assertions_ok) return LAB_OK;
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    snprintf(reason, sizeof reason, "failed runtime assertion: %s", r->assertion_reason);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "assertion_reason", r->assertion_reason);
    add(a->f, 0, subj, "R2", "", reason, ev, r->expected_fail);
    return LAB_OK;
}

/* R3a: expectations the probes contradict (a replay's may fail: expected). */
static int r3_expectations(audit_ctx *a, const run_row *r) {
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    sqlite3_stmt *s = NULL;
    int rc = prepare(a, "R3 expectations", "SELECT site, expected_dtype, seen_dtypes, reason FROM expectations"
                     " WHERE run_id = ? AND ok = 0", &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->id);
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        char site[64], exp[16], seen[64], why[512];
        col_text(s, 0, site, sizeof site); col_text(s, 1, exp, sizeof exp);
        col_text(s, 2, seen, sizeof seen); col_text(s, 3, why, sizeof why);
        snprintf(reason, sizeof reason, "%s", why[0] ? why : "knob did not take effect");
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "site", site);
        cJSON_AddStringToObject(ev, "expected", exp);
        cJSON_AddStringToObject(ev, "seen", seen);
        add(a->f, 0, subj, "R3", site, reason, ev, r->expected_fail);
    }
    return finish_steps(a, s, st, "R3 expectations");
}

/* R4 (and R3b) against each reference run of the run's comparisons, and R1 on
 * the reference side: a comparison is confounded whichever side went through
 * a defect. */
static int r4_references(audit_ctx *a, const run_row *r) {
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    sqlite3_stmt *s = NULL;
    int rc = prepare(a, "R4 references", "SELECT c.reference_run_id, c.reference_hash_match, r.model_sha256,"
                     " r.dataset_sha256, r.code_version, r.logits_sha256, r.knob_hash FROM comparisons c JOIN runs r"
                     " ON r.id = c.reference_run_id WHERE c.run_id = ?", &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->id);
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t ref = sqlite3_column_int64(s, 0);
        int hm_null = sqlite3_column_type(s, 1) == SQLITE_NULL, hm = sqlite3_column_int(s, 1);
        char model[65], ds[65], code[256], logits[65], kh[65], key[32];
        col_text(s, 2, model, sizeof model); col_text(s, 3, ds, sizeof ds); col_text(s, 4, code, sizeof code);
        col_text(s, 5, logits, sizeof logits); col_text(s, 6, kh, sizeof kh);
        snprintf(key, sizeof key, "ref%lld", (long long)ref);
        const char *what = strcmp(model, r->model) ? "model" : strcmp(ds, r->dataset) ? "dataset"
                         : strcmp(code, r->code) ? "code version" : NULL;
        if (what || (!hm_null && !hm)) {
            if (what)
                snprintf(reason, sizeof reason, "mismatched reference: reference run %lld has another %s (%.16s vs %.16s)",
                         (long long)ref, what, !strcmp(what, "model") ? model : !strcmp(what, "dataset") ? ds : code,
                         !strcmp(what, "model") ? r->model : !strcmp(what, "dataset") ? r->dataset : r->code);
            else
                snprintf(reason, sizeof reason, "mismatched reference: reference run %lld did not reproduce its "
                         "own logits when recomputed", (long long)ref);
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "reference_run", (double)ref);
            cJSON_AddStringToObject(ev, "differs_in", what ? what : "recomputed logits");
            add(a->f, 0, subj, "R4", key, reason, ev, 0);
        }
        if (strcmp(kh, r->knob_hash) && !strcmp(logits, r->logits) && logits[0] && !what) {
            snprintf(reason, sizeof reason, "knob did not take effect: the arm's numeric knobs differ from reference "
                     "run %lld but its logits are bit-identical (sha256 %.16s)", (long long)ref, logits);
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "reference_run", (double)ref);
            cJSON_AddStringToObject(ev, "logits_sha256", logits);
            add(a->f, 0, subj, "R3", key, reason, ev, 0);
        }
        const run_row *m = find_run(a, ref);
        if (m && m != r) {
            lab_knobs_kv knobs;
            if ((rc = run_knobs(a, m->id, &knobs)) || (rc = r1_run_side(a, r, m, &knobs))) {
                kv_release(&knobs);
                sqlite3_finalize(s);
                return rc;
            }
            kv_release(&knobs);
        }
    }
    return finish_steps(a, s, st, "R4 references");
}

/* R6: a stored verdict its own interval does not support. */
static int r6_verdicts(audit_ctx *a, const run_row *r) {
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    sqlite3_stmt *s = NULL;
    int rc = prepare(a, "R6 verdicts", "SELECT verdict, lo, hi, threshold, direction, k, n FROM verdicts WHERE run_id = ?", &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->id);
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        char verdict[16], dir[4];
        col_text(s, 0, verdict, sizeof verdict); col_text(s, 4, dir, sizeof dir);
        double lo = sqlite3_column_double(s, 1), hi = sqlite3_column_double(s, 2), th = sqlite3_column_double(s, 3);
        const char *needs = lab_verdict_name(lab_decide(lo, hi, th, !strcmp(dir, ">=")));
        if (!strcmp(verdict, "INCONCLUSIVE") || !strcmp(verdict, needs)) continue;
        snprintf(reason, sizeof reason, "underpowered: verdict %s but the interval [%.3f, %.3f] against %s %.3f gives %s",
                 verdict, lo, hi, dir, th, needs);
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddNumberToObject(ev, "lo", lo);
        cJSON_AddNumberToObject(ev, "hi", hi);
        cJSON_AddNumberToObject(ev, "k", (double)sqlite3_column_int64(s, 5));
        cJSON_AddNumberToObject(ev, "n", (double)sqlite3_column_int64(s, 6));
        add(a->f, 0, subj, "R6", "", reason, ev, 0);
    }
    return finish_steps(a, s, st, "R6 verdicts");
}

/* Every rule on one finished run; the first error stops the audit. */
static int audit_one_run(audit_ctx *a, const run_row *r) {
    lab_knobs_kv knobs;
    int rc = run_knobs(a, r->id, &knobs);
    if (rc) return rc;
    rc = r1_run_side(a, r, r, &knobs);
    kv_release(&knobs);
    if (!rc) rc = r2_assertions(a, r);
    if (!rc) rc = r3_expectations(a, r);
    if (!rc) rc = r4_references(a, r);
    if (!rc) rc = r6_verdicts(a, r);
    return rc;
}

static int load_runs(sqlite3 *db, run_row **out, int64_t *n, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    *out = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db, "SELECT id, experiment, arm, COALESCE(git_commit,''), started_at, knob_hash, model_sha256,"
                           " dataset_sha256, code_version, COALESCE(logits_sha256,''), COALESCE(backend,'cpu'),"
                           " expected_assertions = 'fail', COALESCE(assertions_ok, 1), COALESCE(assertion_reason,''),"
                           " is_reference FROM runs WHERE status = 'FINISHED' ORDER BY id", -1, &s, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
    int64_t cap = 0;
    int st_step;
    while ((st_step = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            run_row *nv = realloc(*out, (size_t)cap * sizeof *nv);
            if (!nv) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
            *out = nv;
        }
        run_row *r = &(*out)[(*n)++];
        memset(r, 0, sizeof *r);
        r->id = sqlite3_column_int64(s, 0);
        col_text(s, 1, r->experiment, sizeof r->experiment); col_text(s, 2, r->arm, sizeof r->arm);
        col_text(s, 3, r->commit, sizeof r->commit); col_text(s, 4, r->started, sizeof r->started);
        col_text(s, 5, r->knob_hash, sizeof r->knob_hash); col_text(s, 6, r->model, sizeof r->model);
        col_text(s, 7, r->dataset, sizeof r->dataset); col_text(s, 8, r->code, sizeof r->code);
        col_text(s, 9, r->logits, sizeof r->logits); col_text(s, 10, r->backend, sizeof r->backend);
        r->expected_fail = sqlite3_column_int(s, 11);
        r->assertions_ok = sqlite3_column_int(s, 12);
        col_text(s, 13, r->assertion_reason, sizeof r->assertion_reason);
        r->is_reference = sqlite3_column_int(s, 14);
    }
    sqlite3_finalize(s);
    /* a read that stopped early would make findings vanish and be "resolved" */
    if (st_step != SQLITE_DONE) return lab_errf(err, errlen, LAB_EIO, "audit: reading runs: %s", sqlite3_errmsg(db));
    return 0;
}

/* R5: runs of one identity on a deterministic backend (cpu) with different logits. */
static void audit_repeats(const run_row *runs, int64_t n, findings *f) {
    for (int64_t i = 0; i < n; i++) {
        const run_row *a = &runs[i];
        if (strcmp(a->backend, "cpu") || !a->logits[0]) continue;
        for (int64_t j = 0; j < n; j++) {
            const run_row *b = &runs[j];
            if (i == j || strcmp(b->backend, "cpu") || !b->logits[0]) continue;
            if (strcmp(a->experiment, b->experiment) || strcmp(a->arm, b->arm) || strcmp(a->knob_hash, b->knob_hash) ||
                strcmp(a->model, b->model) || strcmp(a->dataset, b->dataset) || strcmp(a->code, b->code) ||
                !strcmp(a->logits, b->logits))
                continue;
            char subj[32], key[32], reason[512];
            run_subject(a, subj, sizeof subj);
            snprintf(key, sizeof key, "run%lld", (long long)b->id);
            snprintf(reason, sizeof reason, "not reproducible: run %lld has the same identity (experiment, arm, knobs, "
                     "model, data, code) on a deterministic backend but different logits (%.12s vs %.12s)",
                     (long long)b->id, a->logits, b->logits);
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "other_run", (double)b->id);
            cJSON_AddStringToObject(ev, "logits_sha256", a->logits);
            cJSON_AddStringToObject(ev, "other_logits_sha256", b->logits);
            add(f, 0, subj, "R5", key, reason, ev, 0);
        }
    }
}

/* Claims that name their runs inherit those runs' R2-R5 findings. */
static void claims_from_runs(const lab_ledger *l, findings *f) {
    int64_t n0 = f->n;
    for (int64_t i = 0; i < l->n_claims; i++) {
        const lab_claim *c = &l->claims[i];
        for (int w = 0; w < 2; w++) {
            int64_t run = w ? c->run_ref : c->run_arm;
            if (!run) continue;
            char subj[32];
            snprintf(subj, sizeof subj, "%lld", (long long)run);
            for (int64_t k = 0; k < n0; k++) {
                const finding *x = &f->v[k];
                if (x->claim || strcmp(x->subject, subj) || !strcmp(x->rule, "R1") || !strcmp(x->rule, "R6")) continue;
                char reason[1024], key[160];
                snprintf(reason, sizeof reason, "its %s run %lld: %s", w ? "reference" : "arm", (long long)run, x->reason);
                snprintf(key, sizeof key, "run%lld:%s", (long long)run, x->key);
                add(f, 1, c->id, x->rule, key, reason, cJSON_Parse(x->evidence), 0);
            }
        }
    }
}

/* A claim that names its runs (runs.arm, runs.reference): both must be in
 * results.db and finished, and must belong together — R4 on the claim's own
 * pairing: same model, dataset, code version and engine (backend). */
static int claim_runs(audit_ctx *a, const lab_claim *c) {
    if (!c->run_arm && !c->run_ref) return LAB_OK;
    typedef struct { char status[16], model[65], dataset[65], code[256], engine[32]; int found; } side_row;
    side_row side[2];
    memset(side, 0, sizeof side);
    char reason[1024], key[64];
    for (int w = 0; w < 2; w++) {
        int64_t id = w ? c->run_ref : c->run_arm;
        const char *name = w ? "reference" : "arm";
        if (!id) continue;
        sqlite3_stmt *s = NULL;
        int rc = prepare(a, "claim runs", "SELECT status, model_sha256, dataset_sha256, code_version,"
                         " COALESCE(backend, 'cpu') FROM runs WHERE id = ?", &s);
        if (rc) return rc;
        sqlite3_bind_int64(s, 1, id);
        int st = sqlite3_step(s);
        if (st == SQLITE_ROW) {
            side[w].found = 1;
            col_text(s, 0, side[w].status, sizeof side[w].status); col_text(s, 1, side[w].model, sizeof side[w].model);
            col_text(s, 2, side[w].dataset, sizeof side[w].dataset); col_text(s, 3, side[w].code, sizeof side[w].code);
            col_text(s, 4, side[w].engine, sizeof side[w].engine);
            st = SQLITE_DONE;
        }
        if ((rc = finish_steps(a, s, st, "claim runs"))) return rc;
        snprintf(key, sizeof key, "runs.%s", name);
        if (!side[w].found || strcmp(side[w].status, "FINISHED")) {
            if (!side[w].found)
                snprintf(reason, sizeof reason, "mismatched reference: the claim names %s run %lld, which is not in "
                         "this results.db", name, (long long)id);
            else
                snprintf(reason, sizeof reason, "mismatched reference: the claim names %s run %lld, which is %s, not "
                         "FINISHED", name, (long long)id, side[w].status);
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "side", name);
            cJSON_AddNumberToObject(ev, "run", (double)id);
            cJSON_AddStringToObject(ev, "status", side[w].found ? side[w].status : "missing");
            add(a->f, 1, c->id, "R4", key, reason, ev, 0);
            side[w].found = 0;
        }
    }
    if (!side[0].found || !side[1].found) return LAB_OK;
    const char *what = strcmp(side[0].model, side[1].model) ? "model"
                     : strcmp(side[0].dataset, side[1].dataset) ? "dataset"
                     : strcmp(side[0].code, side[1].code) ? "code version"
                     : strcmp(side[0].engine, side[1].engine) ? "engine" : NULL;
    if (!what) return LAB_OK;
    const char *va = !strcmp(what, "model") ? side[0].model : !strcmp(what, "dataset") ? side[0].dataset
                   : !strcmp(what, "code version") ? side[0].code : side[0].engine;
    const char *vb = !strcmp(what, "model") ? side[1].model : !strcmp(what, "dataset") ? side[1].dataset
                   : !strcmp(what, "code version") ? side[1].code : side[1].engine;
    snprintf(reason, sizeof reason, "mismatched reference: the claim pairs arm run %lld with reference run %lld, which "
             "differ in %s (%.16s vs %.16s)", (long long)c->run_arm, (long long)c->run_ref, what, va, vb);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "arm_run", (double)c->run_arm);
    cJSON_AddNumberToObject(ev, "reference_run", (double)c->run_ref);
    cJSON_AddStringToObject(ev, "differs_in", what);
    cJSON_AddStringToObject(ev, "arm", va);
    cJSON_AddStringToObject(ev, "reference", vb);
    add(a->f, 1, c->id, "R4", "runs.pairing", reason, ev, 0);
    return LAB_OK;
}

/* ------------------------------------------------------------ storing */

static int store_findings(sqlite3 *db, const lab_ledger *l, findings *f, int64_t n_runs, lab_audit_result *res,
                          char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
    sqlite3_stmt *sel = NULL, *ins = NULL, *upd = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(db, "SELECT id, resolved_at FROM audit_flags WHERE subject_kind = ? AND subject = ? AND rule = ?"
                           " AND key = ?", -1, &sel, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO audit_flags (subject_kind, subject, rule, key, reason, evidence, expected,"
                           " first_seen, last_seen, resolved_at, resolved_by) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "UPDATE audit_flags SET reason = ?, evidence = ?, expected = ?, last_seen = ?,"
                           " resolved_at = ?, resolved_by = ? WHERE id = ?", -1, &upd, NULL) != SQLITE_OK) {
        rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
        goto out;
    }
    /* mark everything we see in this audit; afterwards, open flags not seen are resolved */
    if (sqlite3_exec(db, "CREATE TEMP TABLE IF NOT EXISTS seen (id INTEGER PRIMARY KEY); DELETE FROM seen;", NULL, NULL,
                     NULL) != SQLITE_OK) {
        rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
        goto out;
    }
    for (int64_t i = 0; i < f->n && !rc; i++) {
        finding *x = &f->v[i];
        const char *kind = x->claim ? "claim" : "run";
        /* a claim superseded by a reopened one: its flags are history, resolved */
        if (x->claim) {
            const lab_claim *c = lab_ledger_claim(l, x->subject);
            if (c && c->superseded_by) snprintf(x->resolved_by, sizeof x->resolved_by, "reopened: superseded by claim %s",
                                                c->superseded_by);
        }
        sqlite3_reset(sel);
        sqlite3_bind_text(sel, 1, kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(sel, 2, x->subject, -1, SQLITE_STATIC);
        sqlite3_bind_text(sel, 3, x->rule, -1, SQLITE_STATIC);
        sqlite3_bind_text(sel, 4, x->key, -1, SQLITE_STATIC);
        int64_t id = 0;
        int was_resolved = 0;
        char resolved_at[32] = "";
        int st_sel = sqlite3_step(sel);
        if (st_sel == SQLITE_ROW) {
            id = sqlite3_column_int64(sel, 0);
            was_resolved = sqlite3_column_type(sel, 1) != SQLITE_NULL;
            if (was_resolved) snprintf(resolved_at, sizeof resolved_at, "%s", (const char *)sqlite3_column_text(sel, 1));
        } else if (st_sel != SQLITE_DONE) {
            rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
            break;
        }
        sqlite3_stmt *w = id ? upd : ins;
        sqlite3_reset(w);
        int p = 1;
        if (!id) {
            sqlite3_bind_text(w, p++, kind, -1, SQLITE_STATIC);
            sqlite3_bind_text(w, p++, x->subject, -1, SQLITE_STATIC);
            sqlite3_bind_text(w, p++, x->rule, -1, SQLITE_STATIC);
            sqlite3_bind_text(w, p++, x->key, -1, SQLITE_STATIC);
        }
        sqlite3_bind_text(w, p++, x->reason, -1, SQLITE_STATIC);
        sqlite3_bind_text(w, p++, x->evidence, -1, SQLITE_STATIC);
        sqlite3_bind_int(w, p++, x->expected);
        if (!id) sqlite3_bind_text(w, p++, now, -1, SQLITE_STATIC);
        sqlite3_bind_text(w, p++, now, -1, SQLITE_STATIC);
        if (x->resolved_by[0]) {   /* keep the first resolution's time */
            sqlite3_bind_text(w, p++, was_resolved ? resolved_at : now, -1, SQLITE_STATIC);
            sqlite3_bind_text(w, p++, x->resolved_by, -1, SQLITE_STATIC);
        } else {
            sqlite3_bind_null(w, p++);
            sqlite3_bind_null(w, p++);
        }
        if (id) sqlite3_bind_int64(w, p++, id);
        if (sqlite3_step(w) != SQLITE_DONE) { rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db)); break; }
        if (!id) id = sqlite3_last_insert_rowid(db);
        if (!x->resolved_by[0] && (w == ins || was_resolved)) res->n_new++;
        if (x->resolved_by[0] && !was_resolved) res->n_resolved++;
        char q[96];
        snprintf(q, sizeof q, "INSERT OR IGNORE INTO seen VALUES (%lld)", (long long)id);
        if (sqlite3_exec(db, q, NULL, NULL, NULL) != SQLITE_OK) {
            rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
            break;
        }
    }
    if (!rc) {
        sqlite3_stmt *r = NULL;
        if (sqlite3_prepare_v2(db, "UPDATE audit_flags SET resolved_at = ?, resolved_by = 'no longer found by the audit'"
                               " WHERE resolved_at IS NULL AND id NOT IN (SELECT id FROM seen)", -1, &r, NULL) == SQLITE_OK) {
            sqlite3_bind_text(r, 1, now, -1, SQLITE_STATIC);
            if (sqlite3_step(r) != SQLITE_DONE) rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
            res->n_resolved += sqlite3_changes(db);
            sqlite3_finalize(r);
        } else rc = lab_errf(err, errlen, LAB_EIO, "audit: resolving flags: %s", sqlite3_errmsg(db));
    }
    if (!rc) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db, "SELECT COALESCE(SUM(expected = 0), 0), COALESCE(SUM(expected = 1), 0) FROM audit_flags"
                               " WHERE resolved_at IS NULL", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
            res->n_open = sqlite3_column_int64(q, 0);
            res->n_expected = sqlite3_column_int64(q, 1);
        } else rc = lab_errf(err, errlen, LAB_EIO, "audit: counting open flags: %s", sqlite3_errmsg(db));
        sqlite3_finalize(q);
        sqlite3_stmt *a = NULL;
        if (rc) goto out;
        if (sqlite3_prepare_v2(db, "INSERT INTO audits (at, specs_dir, n_claims, n_defects, n_runs, n_open, n_new, n_resolved)"
                               " VALUES (?,?,?,?,?,?,?,?)", -1, &a, NULL) != SQLITE_OK) {
            rc = lab_errf(err, errlen, LAB_EIO, "audit: recording the audit: %s", sqlite3_errmsg(db));
        } else {
            sqlite3_bind_text(a, 1, now, -1, SQLITE_STATIC);
            sqlite3_bind_text(a, 2, l->dir, -1, SQLITE_STATIC);
            sqlite3_bind_int64(a, 3, l->n_claims);
            sqlite3_bind_int64(a, 4, l->n_defects);
            sqlite3_bind_int64(a, 5, n_runs);
            sqlite3_bind_int64(a, 6, res->n_open);
            sqlite3_bind_int64(a, 7, res->n_new);
            sqlite3_bind_int64(a, 8, res->n_resolved);
            if (sqlite3_step(a) != SQLITE_DONE) rc = lab_errf(err, errlen, LAB_EIO, "audit: %s", sqlite3_errmsg(db));
            sqlite3_finalize(a);
        }
    }
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    sqlite3_finalize(upd);
    if (rc) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    else if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        rc = lab_errf(err, errlen, LAB_EIO, "audit: commit: %s", sqlite3_errmsg(db));
    return rc;
}

/* ------------------------------------------------------------ the table */

static int print_table(sqlite3 *db, const char *since, FILE *out, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT f.subject_kind, f.subject, f.rule, f.expected, f.resolved_at, f.resolved_by,"
                           " f.reason, COALESCE(r.experiment || '/' || r.arm, '') FROM audit_flags f LEFT JOIN runs r"
                           " ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
                           " WHERE f.resolved_at IS NULL OR f.resolved_at >= ?"
                           " ORDER BY f.resolved_at IS NOT NULL, f.expected, f.subject_kind, f.subject, f.rule",
                           -1, &s, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "audit: reading flags: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(s, 1, since, -1, SQLITE_STATIC);
    fprintf(out, "%-9s %-44s %-4s %s\n", "STATUS", "SUBJECT", "RULE", "REASON");
    int any = 0, st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        any = 1;
        char kind[8], subj[128], rule[4], by[192], reason[1024], what[200], label[400];
        col_text(s, 0, kind, sizeof kind); col_text(s, 1, subj, sizeof subj); col_text(s, 2, rule, sizeof rule);
        col_text(s, 5, by, sizeof by); col_text(s, 6, reason, sizeof reason); col_text(s, 7, what, sizeof what);
        int expected = sqlite3_column_int(s, 3), resolved = sqlite3_column_type(s, 4) != SQLITE_NULL;
        const char *status = resolved ? "resolved" : expected ? "expected" : "CONFOUND";
        if (!strcmp(kind, "claim")) snprintf(label, sizeof label, "claim %s", subj);
        else snprintf(label, sizeof label, "run %s %s", subj, what);
        fprintf(out, "%-9s %-44.44s %-4s %s\n", status, label, rule, reason);
        if (resolved) fprintf(out, "%-9s %-44s %-4s   resolved: %s\n", "", "", "", by);
    }
    sqlite3_finalize(s);
    if (st != SQLITE_DONE) return lab_errf(err, errlen, LAB_EIO, "audit: reading flags: %s", sqlite3_errmsg(db));
    if (!any) fprintf(out, "(no flags)\n");
    return LAB_OK;
}

int lab_audit_run(const lab_audit_opts *o, lab_audit_result *res, FILE *out, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    lab_ledger l;
    int rc = lab_ledger_load(o->specs_dir, &l, err, errlen);
    if (rc) return rc;
    lab_store *st = NULL;
    rc = lab_store_open(&st, o->db_path, err, errlen);
    if (rc) { lab_ledger_free(&l); return rc; }
    sqlite3 *db = lab_store_db(st);
    findings f = {0};
    run_row *runs = NULL;
    int64_t n_runs = 0;
    char started[32];
    lab_now_iso(started);
    rc = load_runs(db, &runs, &n_runs, err, errlen);
    if (!rc) {
        audit_ctx a = {.db = db, .l = &l, .f = &f, .runs = runs, .n_runs = n_runs, .err = err, .errlen = errlen};
        audit_claims(&a.git, &l, &f);
        for (int64_t i = 0; !rc && i < l.n_claims; i++) rc = claim_runs(&a, &l.claims[i]);
        for (int64_t i = 0; !rc && i < n_runs; i++) rc = audit_one_run(&a, &runs[i]);
        if (!rc) {
            audit_repeats(runs, n_runs, &f);
            claims_from_runs(&l, &f);
        }
        if (!rc && f.oom) rc = lab_errf(err, errlen, LAB_ENOMEM, "audit: out of memory");
    }
    res->n_claims = l.n_claims;
    res->n_defects = l.n_defects;
    res->n_runs = n_runs;
    if (!rc) rc = store_findings(db, &l, &f, n_runs, res, err, errlen);
    if (!rc && out) {
        fprintf(out, "audit of %lld claim(s) and %lld defect(s) in %s, %lld finished run(s) in %s\n\n",
                (long long)l.n_claims, (long long)l.n_defects, o->specs_dir, (long long)n_runs, o->db_path);
        rc = print_table(db, started, out, err, errlen);
    }
    if (!rc && out) {
        fprintf(out, "\n%lld confound(s) open, %lld expected (replays of a defect), %lld new, %lld resolved by this audit\n",
                (long long)res->n_open, (long long)res->n_expected, (long long)res->n_new, (long long)res->n_resolved);
    }
    free(runs);
    findings_free(&f);
    lab_store_close(st);
    lab_ledger_free(&l);
    return rc;
}
