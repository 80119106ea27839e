/*
 * confound.c — the audit's rules R1..R6 (confound.h).
 *
 * A finding carries the numbers behind it as JSON evidence, so that a report
 * can show why without re-deriving it. Reasons and keys are stored: their
 * wording is part of the flags' identity and of what reports quote.
 */
#include "confound.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "metrics.h"
#include "util.h"

/* ------------------------------------------------------------ findings */

static void add(lab_findings *f, int claim, const char *subject, const char *rule, const char *key,
                const char *reason, cJSON *evidence, int expected) {
    if (f->n == f->cap) {
        int64_t cap = f->cap ? f->cap * 2 : 32;
        lab_audit_flag *nv = realloc(f->v, (size_t)cap * sizeof *nv);
        if (!nv) { f->oom = 1; cJSON_Delete(evidence); return; }
        f->v = nv;
        f->cap = cap;
    }
    lab_audit_flag *x = &f->v[f->n++];
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
}

void lab_findings_free(lab_findings *f) {
    for (int64_t i = 0; i < f->n; i++) { free(f->v[i].reason); free(f->v[i].evidence); }
    for (int64_t i = 0; i < f->n_cleared; i++) { free(f->cleared[i].reason); free(f->cleared[i].evidence); }
    free(f->v);
    free(f->cleared);
    memset(f, 0, sizeof *f);
}

/* rc, with the rule that failed put before the message. */
static int rule_failed(lab_confound *cx, const char *rule, int rc) {
    if (!rc || !cx->err || !cx->errlen) return rc;
    char *msg = lab_strdup(cx->err);
    if (msg) snprintf(cx->err, cx->errlen, "%s: %s", rule, msg);
    free(msg);
    return rc;
}

static void run_subject(const lab_audit_finished_run *r, char *out, size_t n) {
    snprintf(out, n, "%lld", (long long)r->id);
}

static const lab_audit_finished_run *find_run(const lab_confound *cx, int64_t id) {
    int64_t lo = 0, hi = cx->n_runs - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cx->runs[mid].id == id) return &cx->runs[mid];
        if (cx->runs[mid].id < id) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}

/* ------------------------------------------------------------ wording */

static const char *placement_name(lab_placement p) {
    return p == LAB_PLACE_INSIDE ? "inside" : p == LAB_PLACE_OUTSIDE ? "outside" : "cannot tell";
}

/* The wording shared by claims and runs for an R1 placement. */
static const char *place_words(lab_placement p) {
    return p == LAB_PLACE_INSIDE ? "falls in its code range" : "may fall in its code range (placement cannot be decided)";
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

/* ------------------------------------------------------------ R1 */

/* What a run's own probe records say about a defect's site: nothing (no
 * record there), clean (every record passed and the defect's replay was off)
 * or violated. docs/specs.md, "R1: the order of evidence". */
typedef enum { R1_SILENT = 0, R1_CLEAN = 1, R1_VIOLATED = 2 } r1_evidence;

/* The defect's replay knob as the run set it: 1 when it selects the replay. */
static int replay_on(const lab_defect *x, const lab_knobs_kv *knobs, const char **value) {
    *value = x->replay_fault ? lab_knobs_get(knobs, x->replay_knob) : NULL;
    return *value && !strcmp(*value, x->replay_fault);
}

/* Reads run `run`'s records at x's site into *v and judges them. */
static int r1_evidence_of(lab_confound *cx, int64_t run, const lab_defect *x, const lab_knobs_kv *knobs,
                          lab_audit_violations *v, r1_evidence *ev) {
    const char *value;
    int rc = lab_audit_read_violations(cx->st, run, x->site, v, cx->err, cx->errlen);
    *ev = rc ? R1_SILENT : v->n ? R1_VIOLATED : v->records && !replay_on(x, knobs, &value) ? R1_CLEAN : R1_SILENT;
    return rc;
}

/* The basis of a clean verdict, in words and as evidence. */
static void clean_basis(const lab_defect *x, int64_t run, const lab_knobs_kv *knobs, const lab_audit_violations *v,
                        char *out, size_t n, cJSON *ev) {
    const char *value;
    char knob[192];
    if (!x->replay_fault) snprintf(knob, sizeof knob, "no replay recorded for it");
    else if (replay_on(x, knobs, &value), value) snprintf(knob, sizeof knob, "replay knob off (%s=%s)", x->replay_knob, value);
    else snprintf(knob, sizeof knob, "replay knob off (%s not set)", x->replay_knob);
    snprintf(out, n, "run %lld's own probes at %s passed on %lld layer(s) (%lld record(s)); %s", (long long)run, x->site,
             (long long)v->layers, (long long)v->records, knob);
    cJSON_AddNumberToObject(ev, "evidence_run", (double)run);
    cJSON_AddStringToObject(ev, "site", x->site);
    cJSON_AddNumberToObject(ev, "layers_passed", (double)v->layers);
    cJSON_AddNumberToObject(ev, "records_passed", (double)v->records);
}

/* A subject the code range alone would have flagged, cleared by its runtime
 * evidence; kept once per (subject, key). */
static void add_cleared(lab_findings *f, int claim, const char *subject, const char *key, const char *reason,
                        cJSON *evidence) {
    for (int64_t i = 0; i < f->n_cleared; i++)
        if (f->cleared[i].claim == claim && !strcmp(f->cleared[i].subject, subject) && !strcmp(f->cleared[i].key, key)) {
            cJSON_Delete(evidence);
            return;
        }
    /* add() appends to v: swap the two lists around it */
    lab_audit_flag *v = f->v;
    int64_t n = f->n, cap = f->cap;
    f->v = f->cleared, f->n = f->n_cleared, f->cap = f->cap_cleared;
    add(f, claim, subject, "R1", key, reason, evidence, 0);
    f->cleared = f->v, f->n_cleared = f->n, f->cap_cleared = f->cap;
    f->v = v, f->n = n, f->cap = cap;
}

/* The probe findings of a violated site, as evidence. */
static cJSON *violation_json(const lab_defect *x, int64_t run, const char *side, const lab_audit_violations *v) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "first_layer", (double)v->first_layer);
    cJSON_AddNumberToObject(ev, "bytes_per_row", (double)v->bytes_per_row);
    cJSON_AddNumberToObject(ev, "src_row_bytes", (double)v->src_row_bytes);
    cJSON_AddNumberToObject(ev, "dst_row_bytes", (double)v->dst_row_bytes);
    cJSON_AddNumberToObject(ev, "rows_unwritten", (double)v->rows_unwritten);
    cJSON_AddStringToObject(ev, "defect", x->id);
    cJSON_AddStringToObject(ev, "side", side);
    cJSON_AddNumberToObject(ev, "measured_run", (double)run);
    cJSON_AddNumberToObject(ev, "violated_layers", (double)v->n);
    return ev;
}

/* The evidence of the run a claim names for one side: *ev stays R1_SILENT
 * when it names none, or one this results.db has not finished. */
static int claim_side_evidence(lab_confound *cx, int64_t run, const lab_defect *x, lab_audit_violations *v,
                               r1_evidence *ev) {
    *ev = R1_SILENT;
    memset(v, 0, sizeof *v);
    if (!run || !find_run(cx, run)) return LAB_OK;
    lab_knobs_kv knobs;
    int rc = lab_audit_read_knobs(cx->st, run, &knobs, cx->err, cx->errlen);
    if (rc) return rc;
    rc = r1_evidence_of(cx, run, x, &knobs, v, ev);
    lab_audit_knobs_free(&knobs);
    return rc;
}

/* R1 on one side of a claim (the arm's knobs, or the reference's: a
 * comparison is confounded whichever side went through the defect). */
static int r1_claim_side(lab_confound *cx, const lab_claim *c, const lab_defect *x, int ref_side) {
    const lab_knobs_kv *knobs = ref_side ? &c->ref_knobs : &c->arm_knobs;
    const char *sname = ref_side ? "reference" : "arm";
    int64_t run = ref_side ? c->run_ref : c->run_arm;
    if (strcmp(c->codebase, x->codebase)) return LAB_OK;
    char trig[256], reason[3072], replay[160], key[160], how[1100];
    /* the arm side keeps the plain defect id as its key: flags stored by
     * earlier audits stay the same flag */
    snprintf(key, sizeof key, "%s%s", ref_side ? "reference:" : "", x->id);
    lab_audit_violations v;
    r1_evidence evd;
    int rc = claim_side_evidence(cx, run, x, &v, &evd);
    if (rc) return rc;
    if (evd == R1_VIOLATED) {
        snprintf(reason, sizeof reason, "measured through defect %s (%s) on the %s side: its %s run %lld's own probes "
                 "show %s violated on %lld layer(s), first layer %lld: %s", x->id, x->site, sname, sname, (long long)run,
                 x->site, (long long)v.n, (long long)v.first_layer, v.detail);
        add(cx->f, 1, c->id, "R1", key, reason, violation_json(x, run, sname, &v), 0);
        return LAB_OK;
    }
    if (!lab_knobs_trigger(&x->trigger, knobs)) return LAB_OK;
    char commit[64] = "";   /* "abc123+dirty.<hash>" (a dirty build) is placed by its base commit */
    if (c->code.commit) snprintf(commit, sizeof commit, "%s", c->code.commit);
    commit[strcspn(commit, "+")] = '\0';
    const char *date = c->code.date ? c->code.date : c->measured_at;
    lab_placement pl = cx->place(cx->place_env, c->code.commit ? commit : NULL, date, &x->introduced, &x->fixed, how,
                                 sizeof how);
    if (pl == LAB_PLACE_OUTSIDE) return LAB_OK;
    trigger_text(&x->trigger, trig, sizeof trig);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "defect", x->id);
    cJSON_AddStringToObject(ev, "site", x->site);
    cJSON_AddStringToObject(ev, "side", sname);
    cJSON_AddItemToObject(ev, "trigger", kv_json(&x->trigger));
    cJSON_AddItemToObject(ev, ref_side ? "reference_knobs" : "arm_knobs", kv_json(knobs));
    cJSON_AddItemToObject(ev, "introduced", point_json(&x->introduced));
    cJSON_AddItemToObject(ev, "fixed", point_json(&x->fixed));
    cJSON_AddStringToObject(ev, "placement", placement_name(pl));
    cJSON_AddStringToObject(ev, "placed_by", how);
    if (x->replay_fault) cJSON_AddStringToObject(ev, "replay_fault", x->replay_fault);
    if (evd == R1_CLEAN) {
        char basis[512];
        cJSON_DeleteItemFromObjectCaseSensitive(ev, "site");
        clean_basis(x, run, knobs, &v, basis, sizeof basis, ev);
        snprintf(reason, sizeof reason, "not measured through defect %s on the %s side: %s; its knobs include the "
                 "trigger %s and the code range alone would have flagged it (%s [%s])", x->id, sname, basis, trig,
                 place_words(pl), how);
        add_cleared(cx->f, 1, c->id, key, reason, ev);
        return LAB_OK;
    }
    if (x->replay_fault) snprintf(replay, sizeof replay, "replay with %s=%s", x->replay_knob, x->replay_fault);
    else snprintf(replay, sizeof replay, "no replay recorded for it");
    snprintf(reason, sizeof reason,
             "measured through defect %s (%s) on the %s side: the %s's knobs include its trigger %s and the "
             "measurement (%s, %s) %s [%s]; %s",
             x->id, x->site, sname, sname, trig, c->codebase, c->code.commit ? c->code.commit : c->measured_at,
             place_words(pl), how, replay);
    add(cx->f, 1, c->id, "R1", key, reason, ev, 0);
    return LAB_OK;
}

/* R1 by trigger for the run m measured on one side of subject run r's
 * comparison: a finding when the defect's trigger is in m's knobs and m's
 * code is (or may be) in its range — or, when m's own probes at the site
 * passed (clean: non-NULL), the clearance that overrules it. */
static void r1_run_trigger(lab_confound *cx, const lab_audit_finished_run *r, const lab_audit_finished_run *m,
                           const lab_defect *x, const lab_knobs_kv *knobs, const char *side, const char *key,
                           const lab_audit_violations *clean) {
    if (strcmp(x->codebase, "vtlab") || !lab_knobs_trigger(&x->trigger, knobs)) return;
    char commit[64], how[1100];
    snprintf(commit, sizeof commit, "%s", m->commit);
    commit[strcspn(commit, "+")] = '\0';
    lab_placement pl = cx->place(cx->place_env, commit[0] ? commit : NULL, m->started, &x->introduced, &x->fixed, how,
                                 sizeof how);
    if (pl == LAB_PLACE_OUTSIDE) return;
    int ref_side = m != r;
    char subj[32], trig[256], reason[3072];
    run_subject(r, subj, sizeof subj);
    trigger_text(&x->trigger, trig, sizeof trig);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "defect", x->id);
    cJSON_AddStringToObject(ev, "side", ref_side ? "reference" : "arm");
    cJSON_AddNumberToObject(ev, "measured_run", (double)m->id);
    cJSON_AddStringToObject(ev, "commit", m->commit);
    cJSON_AddStringToObject(ev, "placement", placement_name(pl));
    cJSON_AddStringToObject(ev, "placed_by", how);
    if (clean) {
        char basis[512];
        clean_basis(x, m->id, knobs, clean, basis, sizeof basis, ev);
        snprintf(reason, sizeof reason, "%snot measured through defect %s%s: %s; its knobs include %s and vtlab %s "
                 "%s, which alone would have flagged it [%s]", side, x->id, ref_side ? " (reference side)" : "", basis,
                 trig, m->commit, place_words(pl), how);
        add_cleared(cx->f, 0, subj, key, reason, ev);
        return;
    }
    snprintf(reason, sizeof reason, "%smeasured through defect %s (%s)%s: knobs include %s and vtlab %s %s [%s]",
             side, x->id, x->site, ref_side ? " (reference side)" : "", trig, m->commit, place_words(pl), how);
    add(cx->f, 0, subj, "R1", key, reason, ev, r->expected_fail);
}

/* R1 by probes: m's own probes show the defect's site violated. */
static void r1_run_probes(lab_confound *cx, const lab_audit_finished_run *r, const lab_audit_finished_run *m,
                          const lab_defect *x, const lab_audit_violations *v, const char *side, const char *key) {
    int ref_side = m != r;
    char subj[32], reason[2048];
    run_subject(r, subj, sizeof subj);
    snprintf(reason, sizeof reason, "%smeasured through defect %s: %s probes show %s violated on %lld layer(s), "
             "first layer %lld: %s", side, x->id, ref_side ? "its" : "its own", x->site, (long long)v->n,
             (long long)v->first_layer, v->detail);
    add(cx->f, 0, subj, "R1", key, reason, violation_json(x, m->id, ref_side ? "reference" : "arm", v), r->expected_fail);
}

/* R1 for the run `m` measured on one side of subject run r's comparison
 * (m == r: the arm side; m = r's reference run: the reference side), every
 * defect of the ledger in turn, runtime evidence first. */
static int r1_run_side(lab_confound *cx, const lab_audit_finished_run *r, const lab_audit_finished_run *m) {
    lab_knobs_kv knobs;
    int rc = lab_audit_read_knobs(cx->st, m->id, &knobs, cx->err, cx->errlen);
    if (rc) return rc;
    int ref_side = m != r;
    char key[192], side[64];
    if (ref_side) snprintf(side, sizeof side, "its reference run %lld was ", (long long)m->id);
    else side[0] = '\0';
    for (int64_t d = 0; !rc && d < cx->l->n_defects; d++) {
        const lab_defect *x = &cx->l->defects[d];
        snprintf(key, sizeof key, "%s%s", ref_side ? "reference:" : "", x->id);
        lab_audit_violations v;
        r1_evidence ev;
        if ((rc = r1_evidence_of(cx, m->id, x, &knobs, &v, &ev))) break;
        if (ev == R1_VIOLATED) r1_run_probes(cx, r, m, x, &v, side, key);
        else r1_run_trigger(cx, r, m, x, &knobs, side, key, ev == R1_CLEAN ? &v : NULL);
    }
    lab_audit_knobs_free(&knobs);
    return rc;
}

int lab_rule_r1(lab_confound *cx, const lab_subject *s) {
    if (s->claim) {
        int rc = LAB_OK;
        for (int64_t d = 0; !rc && d < cx->l->n_defects; d++) {
            rc = r1_claim_side(cx, s->claim, &cx->l->defects[d], 0);
            if (!rc) rc = r1_claim_side(cx, s->claim, &cx->l->defects[d], 1);
        }
        return rule_failed(cx, "R1", rc);
    }
    if (!s->ref) return rule_failed(cx, "R1", r1_run_side(cx, s->run, s->run));
    const lab_audit_finished_run *m = find_run(cx, s->ref->run_id);
    if (!m || m == s->run) return LAB_OK;
    return rule_failed(cx, "R1", r1_run_side(cx, s->run, m));
}

/* ------------------------------------------------------------ R2 */

int lab_rule_r2(lab_confound *cx, const lab_subject *s) {
    const lab_audit_finished_run *r = s->run;
    if (!r || s->ref || r->assertions_ok) return LAB_OK;
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    snprintf(reason, sizeof reason, "failed runtime assertion: %s", r->assertion_reason);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "assertion_reason", r->assertion_reason);
    add(cx->f, 0, subj, "R2", "", reason, ev, r->expected_fail);
    return LAB_OK;
}

/* ------------------------------------------------------------ R3 */

/* R3a: expectations the probes contradict (a replay's may fail: expected). */
static int r3_expectations(lab_confound *cx, const lab_audit_finished_run *r) {
    lab_audit_expectation *e = NULL;
    int64_t n = 0;
    int rc = lab_audit_read_expectations(cx->st, r->id, &e, &n, cx->err, cx->errlen);
    if (rc) return rc;
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    for (int64_t i = 0; i < n; i++) {
        snprintf(reason, sizeof reason, "%s", e[i].reason[0] ? e[i].reason : "knob did not take effect");
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "site", e[i].site);
        cJSON_AddStringToObject(ev, "expected", e[i].expected);
        cJSON_AddStringToObject(ev, "seen", e[i].seen);
        add(cx->f, 0, subj, "R3", e[i].site, reason, ev, r->expected_fail);
    }
    lab_audit_free(e);
    return LAB_OK;
}

/* What a reference run differs in from run r (model, dataset, code version),
 * or NULL; *theirs / *ours receive the two values. */
static const char *ref_differs(const lab_audit_finished_run *r, const lab_audit_reference *ref, const char **theirs,
                               const char **ours) {
    if (strcmp(ref->model, r->model)) { *theirs = ref->model; *ours = r->model; return "model"; }
    if (strcmp(ref->dataset, r->dataset)) { *theirs = ref->dataset; *ours = r->dataset; return "dataset"; }
    if (strcmp(ref->code, r->code)) { *theirs = ref->code; *ours = r->code; return "code version"; }
    return NULL;
}

/* R3b: numeric knobs that differ from the reference with bit-identical logits. */
static void r3_identical_logits(lab_confound *cx, const lab_audit_finished_run *r, const lab_audit_reference *ref) {
    const char *theirs, *ours;
    if (!strcmp(ref->knob_hash, r->knob_hash) || strcmp(ref->logits, r->logits) || !ref->logits[0] ||
        ref_differs(r, ref, &theirs, &ours))
        return;
    char subj[32], key[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    snprintf(key, sizeof key, "ref%lld", (long long)ref->run_id);
    snprintf(reason, sizeof reason, "knob did not take effect: the arm's numeric knobs differ from reference "
             "run %lld but its logits are bit-identical (sha256 %.16s)", (long long)ref->run_id, ref->logits);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "reference_run", (double)ref->run_id);
    cJSON_AddStringToObject(ev, "logits_sha256", ref->logits);
    add(cx->f, 0, subj, "R3", key, reason, ev, 0);
}

int lab_rule_r3(lab_confound *cx, const lab_subject *s) {
    if (!s->run) return LAB_OK;
    if (s->ref) { r3_identical_logits(cx, s->run, s->ref); return LAB_OK; }
    return rule_failed(cx, "R3", r3_expectations(cx, s->run));
}

/* ------------------------------------------------------------ R4 */

/* R4 on a run's reference: another model, dataset or code version, or
 * logits it did not reproduce when recomputed. */
static void r4_reference(lab_confound *cx, const lab_audit_finished_run *r, const lab_audit_reference *ref) {
    const char *theirs = NULL, *ours = NULL;
    const char *what = ref_differs(r, ref, &theirs, &ours);
    if (!what && ref->hash_match != 0) return;
    char subj[32], key[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    snprintf(key, sizeof key, "ref%lld", (long long)ref->run_id);
    if (what)
        snprintf(reason, sizeof reason, "mismatched reference: reference run %lld has another %s (%.16s vs %.16s)",
                 (long long)ref->run_id, what, theirs, ours);
    else
        snprintf(reason, sizeof reason, "mismatched reference: reference run %lld did not reproduce its "
                 "own logits when recomputed", (long long)ref->run_id);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "reference_run", (double)ref->run_id);
    cJSON_AddStringToObject(ev, "differs_in", what ? what : "recomputed logits");
    add(cx->f, 0, subj, "R4", key, reason, ev, 0);
}

/* A run a claim names that is missing or not FINISHED. */
static void r4_claim_run_status(lab_confound *cx, const lab_claim *c, int ref_side, const lab_audit_named_run *run) {
    int64_t id = ref_side ? c->run_ref : c->run_arm;
    const char *name = ref_side ? "reference" : "arm";
    char reason[1024], key[64];
    snprintf(key, sizeof key, "runs.%s", name);
    if (!run->found)
        snprintf(reason, sizeof reason, "mismatched reference: the claim names %s run %lld, which is not in "
                 "this results.db", name, (long long)id);
    else
        snprintf(reason, sizeof reason, "mismatched reference: the claim names %s run %lld, which is %s, not "
                 "FINISHED", name, (long long)id, run->status);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "side", name);
    cJSON_AddNumberToObject(ev, "run", (double)id);
    cJSON_AddStringToObject(ev, "status", run->found ? run->status : "missing");
    add(cx->f, 1, c->id, "R4", key, reason, ev, 0);
}

/* The claim's arm and reference runs differ in model, dataset, code version
 * or engine. */
static void r4_claim_pairing(lab_confound *cx, const lab_claim *c, const lab_audit_named_run side[2]) {
    const char *what = strcmp(side[0].model, side[1].model) ? "model"
                     : strcmp(side[0].dataset, side[1].dataset) ? "dataset"
                     : strcmp(side[0].code, side[1].code) ? "code version"
                     : strcmp(side[0].engine, side[1].engine) ? "engine" : NULL;
    if (!what) return;
    const char *va = !strcmp(what, "model") ? side[0].model : !strcmp(what, "dataset") ? side[0].dataset
                   : !strcmp(what, "code version") ? side[0].code : side[0].engine;
    const char *vb = !strcmp(what, "model") ? side[1].model : !strcmp(what, "dataset") ? side[1].dataset
                   : !strcmp(what, "code version") ? side[1].code : side[1].engine;
    char reason[1024];
    snprintf(reason, sizeof reason, "mismatched reference: the claim pairs arm run %lld with reference run %lld, which "
             "differ in %s (%.16s vs %.16s)", (long long)c->run_arm, (long long)c->run_ref, what, va, vb);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "arm_run", (double)c->run_arm);
    cJSON_AddNumberToObject(ev, "reference_run", (double)c->run_ref);
    cJSON_AddStringToObject(ev, "differs_in", what);
    cJSON_AddStringToObject(ev, "arm", va);
    cJSON_AddStringToObject(ev, "reference", vb);
    add(cx->f, 1, c->id, "R4", "runs.pairing", reason, ev, 0);
}

/* A claim that names its runs: both must be in results.db and finished, and
 * must belong together (R4 on the claim's own pairing). */
static int r4_claim(lab_confound *cx, const lab_claim *c) {
    if (!c->run_arm && !c->run_ref) return LAB_OK;
    lab_audit_named_run side[2];
    memset(side, 0, sizeof side);
    for (int w = 0; w < 2; w++) {
        int64_t id = w ? c->run_ref : c->run_arm;
        if (!id) continue;
        int rc = lab_audit_read_named_run(cx->st, id, &side[w], cx->err, cx->errlen);
        if (rc) return rc;
        if (!side[w].found || strcmp(side[w].status, "FINISHED")) {
            r4_claim_run_status(cx, c, w, &side[w]);
            side[w].found = 0;
        }
    }
    if (side[0].found && side[1].found) r4_claim_pairing(cx, c, side);
    return LAB_OK;
}

int lab_confound_references(lab_confound *cx, const lab_audit_finished_run *r, lab_audit_reference **refs,
                            int64_t *n) {
    return rule_failed(cx, "R4", lab_audit_read_references(cx->st, r->id, refs, n, cx->err, cx->errlen));
}

int lab_rule_r4(lab_confound *cx, const lab_subject *s) {
    if (s->claim) return rule_failed(cx, "R4", r4_claim(cx, s->claim));
    if (s->run && s->ref) r4_reference(cx, s->run, s->ref);
    return LAB_OK;
}

/* ------------------------------------------------------------ R5 */

/* Same identity (experiment, arm, knobs, model, data, code). */
static int same_identity(const lab_audit_finished_run *a, const lab_audit_finished_run *b) {
    return !strcmp(a->experiment, b->experiment) && !strcmp(a->arm, b->arm) && !strcmp(a->knob_hash, b->knob_hash) &&
           !strcmp(a->model, b->model) && !strcmp(a->dataset, b->dataset) && !strcmp(a->code, b->code);
}

int lab_rule_r5(lab_confound *cx, const lab_subject *s) {
    const lab_audit_finished_run *a = s->run;
    if (!a || s->ref || strcmp(a->backend, "cpu") || !a->logits[0]) return LAB_OK;
    for (int64_t j = 0; j < cx->n_runs; j++) {
        const lab_audit_finished_run *b = &cx->runs[j];
        if (b == a || strcmp(b->backend, "cpu") || !b->logits[0]) continue;
        if (!same_identity(a, b) || !strcmp(a->logits, b->logits)) continue;
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
        add(cx->f, 0, subj, "R5", key, reason, ev, 0);
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ R6 */

static void r6_claim(lab_confound *cx, const lab_claim *c) {
    double lo, hi;
    lab_wilson(c->k, c->n, 1.959963984540054, &lo, &hi);
    const char *needs = lab_verdict_name(lab_decide(lo, hi, c->threshold, !strcmp(c->direction, ">=")));
    if (!strcmp(c->verdict, "INCONCLUSIVE") || !strcmp(c->verdict, needs)) return;
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
    add(cx->f, 1, c->id, "R6", "", reason, ev, 0);
}

/* A run's stored verdicts its own interval does not support. */
static int r6_run(lab_confound *cx, const lab_audit_finished_run *r) {
    lab_audit_verdict *v = NULL;
    int64_t n = 0;
    int rc = lab_audit_read_verdicts(cx->st, r->id, &v, &n, cx->err, cx->errlen);
    if (rc) return rc;
    char subj[32], reason[1024];
    run_subject(r, subj, sizeof subj);
    for (int64_t i = 0; i < n; i++) {
        const lab_audit_verdict *x = &v[i];
        const char *needs = lab_verdict_name(lab_decide(x->lo, x->hi, x->threshold, !strcmp(x->direction, ">=")));
        if (!strcmp(x->verdict, "INCONCLUSIVE") || !strcmp(x->verdict, needs)) continue;
        snprintf(reason, sizeof reason, "underpowered: verdict %s but the interval [%.3f, %.3f] against %s %.3f gives %s",
                 x->verdict, x->lo, x->hi, x->direction, x->threshold, needs);
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddNumberToObject(ev, "lo", x->lo);
        cJSON_AddNumberToObject(ev, "hi", x->hi);
        cJSON_AddNumberToObject(ev, "k", (double)x->k);
        cJSON_AddNumberToObject(ev, "n", (double)x->n);
        add(cx->f, 0, subj, "R6", "", reason, ev, 0);
    }
    lab_audit_free(v);
    return LAB_OK;
}

int lab_rule_r6(lab_confound *cx, const lab_subject *s) {
    if (s->claim) { r6_claim(cx, s->claim); return LAB_OK; }
    if (!s->run || s->ref) return LAB_OK;
    return rule_failed(cx, "R6", r6_run(cx, s->run));
}

/* ------------------------------------------------------------ claims from runs */

void lab_confound_inherit(lab_confound *cx) {
    lab_findings *f = cx->f;
    int64_t n0 = f->n;
    for (int64_t i = 0; i < cx->l->n_claims; i++) {
        const lab_claim *c = &cx->l->claims[i];
        for (int w = 0; w < 2; w++) {
            int64_t run = w ? c->run_ref : c->run_arm;
            if (!run) continue;
            char subj[32];
            snprintf(subj, sizeof subj, "%lld", (long long)run);
            for (int64_t k = 0; k < n0; k++) {
                const lab_audit_flag *x = &f->v[k];
                if (x->claim || strcmp(x->subject, subj) || !strcmp(x->rule, "R1") || !strcmp(x->rule, "R6")) continue;
                /* copies: add() may move f->v */
                char reason[1024], key[160], rule[4];
                snprintf(reason, sizeof reason, "its %s run %lld: %s", w ? "reference" : "arm", (long long)run, x->reason);
                snprintf(key, sizeof key, "run%lld:%s", (long long)run, x->key);
                snprintf(rule, sizeof rule, "%s", x->rule);
                add(f, 1, c->id, rule, key, reason, cJSON_Parse(x->evidence), 0);
            }
        }
    }
}
