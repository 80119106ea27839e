/*
 * ledger.c — reading, checking and writing the specs/ ledger (see ledger.h).
 */
#include "ledger.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "model/vt.h"
#include "harness/cli.h"
#include "paths.h"
#include "util.h"

typedef struct pctx { const char *file; char *err; size_t errlen; } pctx;

static int bad(pctx *c, const char *field, const char *fmt, const char *arg) {
    char what[512];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    return lab_errf(c->err, c->errlen, LAB_EINPUT, "%s: %s: %s", c->file, field, what);
}

static int check_keys(pctx *c, const cJSON *o, const char *where, const char *const *allowed) {
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, it->string);
        if (!ok) {
            char f[256];
            snprintf(f, sizeof f, "%s%s%s", where, *where ? "." : "", it->string);
            return bad(c, f, "unknown field%s (see docs/specs.md)", "");
        }
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (!strcmp(jt->string, it->string)) return bad(c, it->string, "field given twice%s", "");
    }
    return 0;
}

/* String field: required -> error when absent; nullable -> JSON null allowed (NULL). */
static int get_str(pctx *c, const cJSON *o, const char *key, const char *field, int required, char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) {
        if (required) return bad(c, field, v ? "null, expected a string" : "missing (expected a string)%s", "");
        return 0;
    }
    if (!cJSON_IsString(v)) return bad(c, field, "expected a string%s", "");
    if (required && !*v->valuestring) return bad(c, field, "empty, expected a non-empty string%s", "");
    *out = lab_strdup(v->valuestring);
    return *out ? 0 : lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
}

static int get_i64(pctx *c, const cJSON *o, const char *key, const char *field, int required, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return bad(c, field, "missing (expected an integer)%s", "");
        *out = 0;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < 0 ||
        v->valuedouble > 9e15)
        return bad(c, field, "expected a non-negative integer%s", "");
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int valid_id(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return 0;
    return 1;
}

int lab_commit_id_ok(const char *s, int allow_dirty) {
    size_t n = 0;
    while (s[n] && isxdigit((unsigned char)s[n])) n++;
    if (n < 7 || n > 40) return 0;
    if (!s[n]) return 1;
    /* a dirty build's code version: COMMIT+dirty.<hash of the diff> (Makefile) */
    if (!allow_dirty || strncmp(s + n, "+dirty.", 7)) return 0;
    const char *h = s + n + 7;
    size_t m = 0;
    while (h[m] && isxdigit((unsigned char)h[m])) m++;
    return m >= 1 && m <= 64 && !h[m];
}

void lab_claim_code_of_run(const char *engine, const char *engine_commit, const char *engine_codebase,
                           const char *vtlab_commit, const char **codebase, const char **commit) {
    int foreign = engine && engine[0];
    *codebase = foreign ? engine_codebase : "vtlab";
    *commit = foreign ? engine_commit : vtlab_commit;
    /* the ledger accepts commit ids only (they reach git in the audit): an
     * engine's "v0.3.1" or an unknown build's "unknown" is left out, and the
     * claim's date places it */
    if (*commit && (!**commit || !lab_commit_id_ok(*commit, 1))) *commit = NULL;
}

/* A probe site an engine may declare: what fits a probe record's site
 * (vtp_record.site, 31 characters) in the characters of an id. */
static int valid_site(const char *s) {
    return valid_id(s) && strlen(s) <= 31;
}

static int valid_date(const char *s) {
    /* YYYY-MM-DD, optionally followed by T... */
    if (!s || strlen(s) < 10) return 0;
    for (int i = 0; i < 10; i++) {
        if (i == 4 || i == 7) { if (s[i] != '-') return 0; }
        else if (!isdigit((unsigned char)s[i])) return 0;
    }
    int mo = (s[5] - '0') * 10 + (s[6] - '0'), d = (s[8] - '0') * 10 + (s[9] - '0');
    return mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && (s[10] == '\0' || s[10] == 'T' || s[10] == ' ');
}

static void kv_free(lab_knobs_kv *kv) {
    for (int64_t i = 0; i < kv->n; i++) { free(kv->names[i]); free(kv->values[i]); }
    free(kv->names);
    free(kv->values);
    memset(kv, 0, sizeof *kv);
}

/* {"VT_X": "1", ...}: every name a declared knob, every value valid; values
 * stored canonically ("true" -> "1"). */
static int get_knobs(pctx *c, const cJSON *o, const char *key, const char *field, lab_knobs_kv *kv) {
    memset(kv, 0, sizeof *kv);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return bad(c, field, "missing (expected an object of knob values, {} for none)%s", "");
    if (!cJSON_IsObject(v)) return bad(c, field, "expected an object of knob values%s", "");
    int64_t n = cJSON_GetArraySize(v);
    kv->names = calloc((size_t)n + 1, sizeof *kv->names);
    kv->values = calloc((size_t)n + 1, sizeof *kv->values);
    if (!kv->names || !kv->values) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    vt_knobset *ks = NULL;
    if (vt_knobset_new(&ks)) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    int rc = 0;
    for (const cJSON *it = v->child; it && !rc; it = it->next) {
        char f[256], val[64], kerr[512];
        snprintf(f, sizeof f, "%s.%s", field, it->string);
        if (cJSON_IsString(it) && strlen(it->valuestring) >= sizeof val) {
            rc = bad(c, f, "knob value is longer than %s characters", "63");
            break;
        }
        if (cJSON_IsString(it)) snprintf(val, sizeof val, "%s", it->valuestring);
        else if (cJSON_IsBool(it)) snprintf(val, sizeof val, "%d", cJSON_IsTrue(it));
        else if (cJSON_IsNumber(it) && it->valuedouble == (double)(long long)it->valuedouble)
            snprintf(val, sizeof val, "%lld", (long long)it->valuedouble);
        else { rc = bad(c, f, "expected a string, boolean or integer knob value%s", ""); break; }
        /* VT_* knobs are vtlab's (checked against its registry here); any
         * other name is an engine's own, checked against that engine's hello
         * by `vtlab specs check` (ledger_engines.c). */
        int foreign = strncmp(it->string, "VT_", 3) != 0;
        if (foreign && !lab_env_name_ok(it->string)) {
            rc = bad(c, f, "expected a knob name: VT_* for vtlab's model, or an engine's environment variable%s", "");
            break;
        }
        if (!foreign && vt_knobset_set(ks, it->string, val, kerr, sizeof kerr)) { rc = bad(c, f, "%s", kerr); break; }
        kv->names[kv->n] = lab_strdup(it->string);
        kv->values[kv->n] = lab_strdup(foreign ? val : vt_knobset_get(ks, it->string));
        if (!kv->names[kv->n] || !kv->values[kv->n]) rc = lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
        kv->n++;
    }
    vt_knobset_free(ks);
    return rc;
}

static int get_code_point(pctx *c, const cJSON *o, const char *key, const char *field, lab_code_point *p) {
    memset(p, 0, sizeof *p);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return bad(c, field, "expected an object {\"commit\": ..., \"date\": ...} or null%s", "");
    static const char *const keys[] = {"commit", "date", NULL};
    char f[256];
    int rc = check_keys(c, v, field, keys);
    snprintf(f, sizeof f, "%s.commit", field);
    if (!rc) rc = get_str(c, v, "commit", f, 0, &p->commit);
    /* it reaches `git merge-base` and `git cat-file`: hex or refused here */
    if (!rc && p->commit && !lab_commit_id_ok(p->commit, 0))
        rc = bad(c, f, "\"%s\": expected a commit id, 7 to 40 hex digits", p->commit);
    snprintf(f, sizeof f, "%s.date", field);
    if (!rc) rc = get_str(c, v, "date", f, 0, &p->date);
    if (!rc && p->date && !valid_date(p->date)) rc = bad(c, f, "\"%s\" is not a date (expected YYYY-MM-DD)", p->date);
    return rc;
}

static void claim_free(lab_claim *x) {
    char *s[] = {x->file, x->id, x->hypothesis, x->verdict, x->metric, x->direction, x->arm_name, x->ref_name,
                 x->codebase, x->code.commit, x->code.date, x->measured_at, x->experiment, x->experiment_path,
                 x->supersedes, x->superseded_by, x->notes};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) free(s[i]);
    kv_free(&x->arm_knobs);
    kv_free(&x->ref_knobs);
}

static void defect_free(lab_defect *x) {
    char *s[] = {x->file, x->id, x->title, x->site, x->effect, x->codebase, x->introduced.commit,
                 x->introduced.date, x->fixed.commit, x->fixed.date, x->replay_fault, x->replay_knob, x->guard_test, x->source};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) free(s[i]);
    kv_free(&x->trigger);
}

/* The file must be named ID.json: one record per file, findable by id. */
static int check_file_name(pctx *c, const char *id) {
    const char *base = strrchr(c->file, '/');
    base = base ? base + 1 : c->file;
    size_t l = strlen(id);
    if (strncmp(base, id, l) || strcmp(base + l, ".json")) return bad(c, "id", "\"%s\" must match the file name (ID.json)", id);
    return 0;
}

/* A claim's "evidence": top-1 agreement k of n against a threshold, in a
 * direction. */
static int parse_evidence(pctx *c, const cJSON *j, lab_claim *x) {
    static const char *const ev_keys[] = {"metric", "k", "n", "threshold", "direction", NULL};
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "evidence");
    int rc = LAB_OK;
    if (!cJSON_IsObject(ev)) rc = bad(c, "evidence", "missing or not an object (metric, k, n, threshold, direction)%s", "");
    if (!rc) rc = check_keys(c, ev, "evidence", ev_keys);
    if (!rc) rc = get_str(c, ev, "metric", "evidence.metric", 1, &x->metric);
    if (!rc && strcmp(x->metric, "top1_agreement"))
        rc = bad(c, "evidence.metric", "\"%s\", expected top1_agreement", x->metric);
    if (!rc) rc = get_i64(c, ev, "k", "evidence.k", 1, &x->k);
    if (!rc) rc = get_i64(c, ev, "n", "evidence.n", 1, &x->n);
    if (!rc && (x->n <= 0 || x->k > x->n)) rc = bad(c, "evidence", "expected 0 <= k <= n and n > 0%s", "");
    if (!rc) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "threshold");
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble > 1)
            rc = bad(c, "evidence.threshold", "expected a number in [0, 1]%s", "");
        else x->threshold = t->valuedouble;
    }
    if (!rc) rc = get_str(c, ev, "direction", "evidence.direction", 1, &x->direction);
    if (!rc && strcmp(x->direction, ">=") && strcmp(x->direction, "<="))
        rc = bad(c, "evidence.direction", "\"%s\", expected \">=\" or \"<=\"", x->direction);
    return rc;
}

/* A claim's "arm" and "reference": each a name and its knobs. */
static int parse_claim_arms(pctx *c, const cJSON *j, lab_claim *x) {
    static const char *const arm_keys[] = {"name", "knobs", NULL};
    const char *which[2] = {"arm", "reference"};
    int rc = LAB_OK;
    for (int w = 0; w < 2 && !rc; w++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, which[w]);
        char f[64];
        if (!cJSON_IsObject(a)) { rc = bad(c, which[w], "missing or not an object {\"name\", \"knobs\"}%s", ""); break; }
        rc = check_keys(c, a, which[w], arm_keys);
        snprintf(f, sizeof f, "%s.name", which[w]);
        if (!rc) rc = get_str(c, a, "name", f, 1, w ? &x->ref_name : &x->arm_name);
        if (!rc) rc = lab_check_name(c->file, f, "an arm name", w ? x->ref_name : x->arm_name, c->err, c->errlen);
        snprintf(f, sizeof f, "%s.knobs", which[w]);
        if (!rc) rc = get_knobs(c, a, "knobs", f, w ? &x->ref_knobs : &x->arm_knobs);
    }
    return rc;
}

/* A claim's "code": the codebase measured, at a commit and/or a date (one
 * of them at least, or the audit cannot place the measurement). */
static int parse_claim_code(pctx *c, const cJSON *j, lab_claim *x) {
    static const char *const code_keys[] = {"codebase", "commit", "date", NULL};
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
    int rc = LAB_OK;
    if (!cJSON_IsObject(code)) rc = bad(c, "code", "missing or not an object {\"codebase\", \"commit\", \"date\"}%s", "");
    if (!rc) rc = check_keys(c, code, "code", code_keys);
    if (!rc) rc = get_str(c, code, "codebase", "code.codebase", 1, &x->codebase);
    if (!rc) rc = get_str(c, code, "commit", "code.commit", 0, &x->code.commit);
    if (!rc && x->code.commit && !lab_commit_id_ok(x->code.commit, 1))
        rc = bad(c, "code.commit", "\"%s\": expected a commit id, 7 to 40 hex digits (a dirty build's: COMMIT+dirty.HASH)",
                 x->code.commit);
    if (!rc) rc = get_str(c, code, "date", "code.date", 0, &x->code.date);
    if (!rc && x->code.date && !valid_date(x->code.date))
        rc = bad(c, "code.date", "\"%s\" is not a date (expected YYYY-MM-DD)", x->code.date);
    if (!rc && !x->code.commit && !x->code.date)
        rc = bad(c, "code", "needs a commit or a date, or the audit cannot place the measurement%s", "");
    return rc;
}

/* A claim's optional links: "history" (the claims it supersedes and is
 * superseded by) and "runs" (the run ids of its arm and reference). */
static int parse_claim_links(pctx *c, const cJSON *j, lab_claim *x) {
    static const char *const hist_keys[] = {"supersedes", "superseded_by", NULL};
    static const char *const run_keys[] = {"arm", "reference", NULL};
    int rc = LAB_OK;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "history");
    if (h) {
        if (!cJSON_IsObject(h)) rc = bad(c, "history", "expected an object {\"supersedes\", \"superseded_by\"}%s", "");
        if (!rc) rc = check_keys(c, h, "history", hist_keys);
        if (!rc) rc = get_str(c, h, "supersedes", "history.supersedes", 0, &x->supersedes);
        if (!rc) rc = get_str(c, h, "superseded_by", "history.superseded_by", 0, &x->superseded_by);
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "runs");
    if (!rc && r) {
        if (!cJSON_IsObject(r)) rc = bad(c, "runs", "expected an object {\"arm\": RUN_ID, \"reference\": RUN_ID}%s", "");
        if (!rc) rc = check_keys(c, r, "runs", run_keys);
        if (!rc) rc = get_i64(c, r, "arm", "runs.arm", 0, &x->run_arm);
        if (!rc) rc = get_i64(c, r, "reference", "runs.reference", 0, &x->run_ref);
    }
    return rc;
}

/* A claim record, field by field in a fixed order (the first error found
 * is the one reported). */
static int parse_claim(pctx *c, const cJSON *j, lab_claim *x) {
    static const char *const top[] = {"id", "hypothesis", "verdict", "evidence", "arm", "reference", "code",
                                      "measured_at", "experiment", "history", "runs", "notes", NULL};
    if (!cJSON_IsObject(j)) return bad(c, "(top level)", "expected a JSON object%s", "");
    int rc = check_keys(c, j, "", top);
    if (!rc) rc = get_str(c, j, "id", "id", 1, &x->id);
    if (!rc && !valid_id(x->id)) rc = bad(c, "id", "\"%s\": expected letters, digits, '.', '_' or '-'", x->id);
    if (!rc) rc = lab_check_name(c->file, "id", "a claim id", x->id, c->err, c->errlen);
    if (!rc) rc = check_file_name(c, x->id);
    if (!rc) rc = get_str(c, j, "hypothesis", "hypothesis", 1, &x->hypothesis);
    if (!rc) rc = get_str(c, j, "verdict", "verdict", 1, &x->verdict);
    if (!rc && strcmp(x->verdict, "SUPPORTED") && strcmp(x->verdict, "REFUTED") && strcmp(x->verdict, "INCONCLUSIVE"))
        rc = bad(c, "verdict", "\"%s\", expected SUPPORTED, REFUTED or INCONCLUSIVE", x->verdict);
    if (!rc) rc = parse_evidence(c, j, x);
    if (!rc) rc = parse_claim_arms(c, j, x);
    if (!rc) rc = parse_claim_code(c, j, x);
    if (!rc) rc = get_str(c, j, "measured_at", "measured_at", 1, &x->measured_at);
    if (!rc && !valid_date(x->measured_at))
        rc = bad(c, "measured_at", "\"%s\" is not a date (expected YYYY-MM-DD)", x->measured_at);
    if (!rc) rc = get_str(c, j, "experiment", "experiment", 1, &x->experiment);
    if (!rc) rc = parse_claim_links(c, j, x);
    if (!rc) rc = get_str(c, j, "notes", "notes", 0, &x->notes);
    return rc;
}

static int parse_defect(pctx *c, const cJSON *j, lab_defect *x) {
    static const char *const top[] = {"id", "title", "site", "trigger", "effect", "code_range", "replay_fault",
                                      "replay_knob", "guard_test", "source", NULL};
    static const char *const range_keys[] = {"codebase", "introduced", "fixed", NULL};
    if (!cJSON_IsObject(j)) return bad(c, "(top level)", "expected a JSON object%s", "");
    int rc = check_keys(c, j, "", top);
    if (!rc) rc = get_str(c, j, "id", "id", 1, &x->id);
    if (!rc && !valid_id(x->id)) rc = bad(c, "id", "\"%s\": expected letters, digits, '.', '_' or '-'", x->id);
    if (!rc) rc = lab_check_name(c->file, "id", "a defect id", x->id, c->err, c->errlen);
    if (!rc) rc = check_file_name(c, x->id);
    if (!rc) rc = get_str(c, j, "title", "title", 1, &x->title);
    if (!rc) rc = get_str(c, j, "site", "site", 1, &x->site);
    if (!rc) rc = get_knobs(c, j, "trigger", "trigger", &x->trigger);
    if (!rc) rc = get_str(c, j, "effect", "effect", 1, &x->effect);
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(j, "code_range");
    if (!rc && !cJSON_IsObject(cr)) rc = bad(c, "code_range", "missing or not an object {\"codebase\", \"introduced\", \"fixed\"}%s", "");
    if (!rc) rc = check_keys(c, cr, "code_range", range_keys);
    if (!rc) rc = get_str(c, cr, "codebase", "code_range.codebase", 1, &x->codebase);
    if (!rc) rc = get_code_point(c, cr, "introduced", "code_range.introduced", &x->introduced);
    if (!rc) rc = get_code_point(c, cr, "fixed", "code_range.fixed", &x->fixed);
    /* vtlab's own defects sit at vtlab's probe sites; another codebase's may
     * sit at a site only its engine declares (its hello's probe_sites), which
     * `vtlab specs check` checks against that engine (ledger_engines.c). */
    if (!rc && !strcmp(x->codebase, "vtlab") && !vt_probe_site_known(x->site))
        rc = bad(c, "site", "\"%s\" is not a probe site of vtlab's model (residual.stream, kda.state, moe.gather, "
                            "moe.expert.y, moe.scatter, moe.combine, logits)", x->site);
    if (!rc && !vt_probe_site_known(x->site) && !valid_site(x->site))
        rc = bad(c, "site", "\"%s\": expected a probe site name (letters, digits, '.', '_' or '-', at most 31 "
                            "characters, as an engine's hello declares it)", x->site);
    /* Optional: a defect found elsewhere (another engine, no replay yet) is
     * recorded without one. One that is given must act where the defect is. */
    if (!rc) rc = get_str(c, j, "replay_fault", "replay_fault", 0, &x->replay_fault);
    /* replay_knob: the knob that selects replay_fault. VT_FAULT (the default)
     * is vtlab's registry, checked here; an engine's own knob names one of
     * the faults its hello declares, checked by `vtlab specs check`. */
    if (!rc) rc = get_str(c, j, "replay_knob", "replay_knob", 0, &x->replay_knob);
    if (!rc && x->replay_knob && !lab_env_name_ok(x->replay_knob))
        rc = bad(c, "replay_knob", "\"%s\": expected an environment variable name", x->replay_knob);
    if (!rc && x->replay_knob && !x->replay_fault)
        rc = bad(c, "replay_knob", "given without a replay_fault%s", "");
    if (!rc && !x->replay_knob && !(x->replay_knob = lab_strdup("VT_FAULT")))
        rc = lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    if (!rc && x->replay_fault && !strcmp(x->replay_knob, "VT_FAULT")) {
        const vt_fault_info *f = NULL;
        for (int i = 0; i < vt_fault_count(); i++)
            if (!strcmp(vt_fault_at(i)->name, x->replay_fault)) f = vt_fault_at(i);
        if (!f) rc = bad(c, "replay_fault", "\"%s\" is not a registered fault (see `vtlab faults`; leave it out, or "
                                            "null, when vtlab has no replay of this defect)", x->replay_fault);
        else if (strcmp(f->site, x->site)) {
            char what[512];
            snprintf(what, sizeof what, "\"%s\" acts at %s, but the defect's site is %s: it does not replay this defect",
                     f->name, f->site, x->site);
            rc = bad(c, "replay_fault", "%s", what);
        }
    }
    if (!rc) rc = get_str(c, j, "guard_test", "guard_test", 1, &x->guard_test);
    if (!rc) rc = get_str(c, j, "source", "source", 0, &x->source);
    return rc;
}

/* One record from len bytes of text (text[len] == 0). NUL bytes and \u0000
 * escapes are refused first: either would shorten an id, a name or a knob
 * value without a word. */
static int parse_text(const char *file, const char *text, size_t len, int is_claim, void *rec, char *err,
                      size_t errlen) {
    if (is_claim) ((lab_claim *)rec)->file = lab_strdup(file);
    else ((lab_defect *)rec)->file = lab_strdup(file);
    void *root = NULL;
    int rc = lab_json_parse(file, text, len, &root, err, errlen);
    if (rc) return rc;
    pctx c = {file, err, errlen};
    rc = is_claim ? parse_claim(&c, root, rec) : parse_defect(&c, root, rec);
    cJSON_Delete(root);
    return rc;
}

static int parse_file(const char *file, int is_claim, void *rec, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = lab_read_json(file, &text, &len, err, errlen);
    if (rc) return rc;
    rc = parse_text(file, text, len, is_claim, rec, err, errlen);
    free(text);
    return rc;
}

int lab_claim_parse(const char *file, const char *text, size_t len, lab_claim *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (text[len] != 0) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: lab_claim_parse: text not NUL-terminated", file);
    return parse_text(file, text, len, 1, out, err, errlen);
}

int lab_defect_parse(const char *file, const char *text, size_t len, lab_defect *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (text[len] != 0) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: lab_defect_parse: text not NUL-terminated", file);
    return parse_text(file, text, len, 0, out, err, errlen);
}

void lab_claim_clear(lab_claim *c) { claim_free(c); memset(c, 0, sizeof *c); }
void lab_defect_clear(lab_defect *d) { defect_free(d); memset(d, 0, sizeof *d); }

/* The recipe reopen runs must exist, where the ledger names it: relative to
 * the ledger directory's parent (a ledger at /x/specs naming
 * experiments/a.json finds /x/experiments/a.json), or absolute. Never from
 * the directory vtlab runs in: a ledger means the same wherever it is read
 * from (paths.h). */
static int find_experiment(pctx *c, const char *dir, lab_claim *x) {
    struct stat sb;
    char *found = lab_path_in_ledger(dir, x->experiment);
    if (!found) return lab_errf(c->err, c->errlen, LAB_ENOMEM, "out of memory");
    if (stat(found, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int rc = lab_errf(c->err, c->errlen, LAB_EINPUT,
                          "%s: experiment: %s: no such experiment file (looked at %s: a relative path is relative to "
                          "the ledger directory's parent)", c->file, x->experiment, found);
        free(found);
        return rc;
    }
    x->experiment_path = found;
    return 0;
}

int lab_ledger_load(const char *dir, lab_ledger *l, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    char **cf = NULL, **df = NULL;
    int64_t nc = 0, nd = 0;
    char sub[4096], sub2[4096];
    /* A ledger that is not there is an error, not an empty ledger: a typo in
     * --specs would otherwise audit nothing and pass. An existing directory
     * without claims/ or defects/ is an empty ledger (runs are still
     * audited). */
    struct stat sb;
    snprintf(sub, sizeof sub, "%s/claims", dir);
    snprintf(sub2, sizeof sub2, "%s/defects", dir);
    if (stat(dir, &sb) != 0)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: no such ledger directory (%s; pass --specs DIR, or `vtlab init` "
                        "makes specs/ in a project)", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return lab_errf(err, errlen, LAB_EINPUT, "%s: not a directory (expected a ledger: claims/, defects/)", dir);
    if (!(l->dir = lab_strdup(dir))) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    int rc = lab_list_json(sub, 1, &cf, &nc, err, errlen);
    if (!rc) rc = lab_list_json(sub2, 1, &df, &nd, err, errlen);
    if (!rc) {
        l->claims = calloc((size_t)nc + 1, sizeof *l->claims);
        l->defects = calloc((size_t)nd + 1, sizeof *l->defects);
        if (!l->claims || !l->defects) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; !rc && i < nc; i++) { rc = parse_file(cf[i], 1, &l->claims[i], err, errlen); l->n_claims = i + 1; }
    for (int64_t i = 0; !rc && i < nd; i++) { rc = parse_file(df[i], 0, &l->defects[i], err, errlen); l->n_defects = i + 1; }
    /* cross-references */
    for (int64_t i = 0; !rc && i < l->n_claims; i++) {
        const lab_claim *x = &l->claims[i];
        pctx c = {x->file, err, errlen};
        if ((rc = find_experiment(&c, dir, &l->claims[i]))) break;
        const lab_claim *s = x->supersedes ? lab_ledger_claim(l, x->supersedes) : NULL;
        const lab_claim *b = x->superseded_by ? lab_ledger_claim(l, x->superseded_by) : NULL;
        if (x->supersedes && !s) rc = bad(&c, "history.supersedes", "no claim \"%s\" in the ledger", x->supersedes);
        else if (x->superseded_by && !b) rc = bad(&c, "history.superseded_by", "no claim \"%s\" in the ledger", x->superseded_by);
        else if (s && (!s->superseded_by || strcmp(s->superseded_by, x->id)))
            rc = bad(&c, "history.supersedes", "claim \"%s\" does not say it is superseded by this one", x->supersedes);
        else if (b && (!b->supersedes || strcmp(b->supersedes, x->id)))
            rc = bad(&c, "history.superseded_by", "claim \"%s\" does not say it supersedes this one", x->superseded_by);
    }
    lab_free_list(cf, nc);
    lab_free_list(df, nd);
    if (rc) lab_ledger_free(l);
    return rc;
}

void lab_ledger_free(lab_ledger *l) {
    for (int64_t i = 0; i < l->n_claims; i++) claim_free(&l->claims[i]);
    for (int64_t i = 0; i < l->n_defects; i++) defect_free(&l->defects[i]);
    free(l->claims);
    free(l->defects);
    free(l->dir);
    memset(l, 0, sizeof *l);
}

const lab_claim *lab_ledger_claim(const lab_ledger *l, const char *id) {
    for (int64_t i = 0; i < l->n_claims; i++) if (!strcmp(l->claims[i].id, id)) return &l->claims[i];
    return NULL;
}

const lab_defect *lab_ledger_defect(const lab_ledger *l, const char *id) {
    for (int64_t i = 0; i < l->n_defects; i++) if (!strcmp(l->defects[i].id, id)) return &l->defects[i];
    return NULL;
}

const char *lab_knobs_get(const lab_knobs_kv *kv, const char *name) {
    for (int64_t i = 0; i < kv->n; i++) if (!strcmp(kv->names[i], name)) return kv->values[i];
    return NULL;
}

int lab_knobs_trigger(const lab_knobs_kv *trigger, const lab_knobs_kv *knobs) {
    for (int64_t i = 0; i < trigger->n; i++) {
        const char *v = lab_knobs_get(knobs, trigger->names[i]);
        const vt_knob_info *ki = v ? NULL : vt_knob_find(trigger->names[i]);
        if (!v) v = ki ? ki->def : "";   /* an engine's knob left unset: its default is the engine's */
        if (strcmp(v, trigger->values[i])) return 0;
    }
    return 1;
}

static cJSON *knobs_json(const lab_knobs_kv *kv) {
    cJSON *o = cJSON_CreateObject();
    for (int64_t i = 0; i < kv->n; i++) cJSON_AddStringToObject(o, kv->names[i], kv->values[i]);
    return o;
}

static void add_str_or_null(cJSON *o, const char *k, const char *v) {
    if (v) cJSON_AddStringToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

/* cJSON's own pretty printer indents with tabs and puts a tab after ':'; a
 * ledger file is read and diffed by people, so print it with two-space
 * indentation instead. Walks the compact text, tracking strings. */
static char *pretty(const cJSON *j) {
    char *c = cJSON_PrintUnformatted(j);
    if (!c) return NULL;
    lab_buf b = {0};
    int depth = 0, in_str = 0, esc = 0;
    for (const char *p = c; *p; p++) {
        char ch = *p;
        if (in_str) {
            lab_buf_append(&b, p, 1);
            if (esc) esc = 0;
            else if (ch == '\\') esc = 1;
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == '"') { in_str = 1; lab_buf_append(&b, p, 1); continue; }
        if ((ch == '{' || ch == '[') && (p[1] == '}' || p[1] == ']')) { lab_buf_append(&b, p, 2); p++; continue; }
        if (ch == '{' || ch == '[') { lab_buf_printf(&b, "%c\n%*s", ch, 2 * ++depth, ""); continue; }
        if (ch == '}' || ch == ']') { lab_buf_printf(&b, "\n%*s%c", 2 * --depth, "", ch); continue; }
        if (ch == ',') { lab_buf_printf(&b, ",\n%*s", 2 * depth, ""); continue; }
        if (ch == ':') { lab_buf_append(&b, ": ", 2); continue; }
        lab_buf_append(&b, p, 1);
    }
    free(c);
    if (b.oom) { lab_buf_free(&b); return NULL; }
    return b.data;
}

int lab_claim_write(const lab_claim *x, const char *path, char *err, size_t errlen) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", x->id);
    cJSON_AddStringToObject(j, "hypothesis", x->hypothesis);
    cJSON_AddStringToObject(j, "verdict", x->verdict);
    cJSON *ev = cJSON_AddObjectToObject(j, "evidence");
    cJSON_AddStringToObject(ev, "metric", x->metric);
    cJSON_AddNumberToObject(ev, "k", (double)x->k);
    cJSON_AddNumberToObject(ev, "n", (double)x->n);
    cJSON_AddNumberToObject(ev, "threshold", x->threshold);
    cJSON_AddStringToObject(ev, "direction", x->direction);
    cJSON *arm = cJSON_AddObjectToObject(j, "arm");
    cJSON_AddStringToObject(arm, "name", x->arm_name);
    cJSON_AddItemToObject(arm, "knobs", knobs_json(&x->arm_knobs));
    cJSON *ref = cJSON_AddObjectToObject(j, "reference");
    cJSON_AddStringToObject(ref, "name", x->ref_name);
    cJSON_AddItemToObject(ref, "knobs", knobs_json(&x->ref_knobs));
    cJSON *code = cJSON_AddObjectToObject(j, "code");
    cJSON_AddStringToObject(code, "codebase", x->codebase);
    add_str_or_null(code, "commit", x->code.commit);
    add_str_or_null(code, "date", x->code.date);
    cJSON_AddStringToObject(j, "measured_at", x->measured_at);
    cJSON_AddStringToObject(j, "experiment", x->experiment);
    cJSON *h = cJSON_AddObjectToObject(j, "history");
    add_str_or_null(h, "supersedes", x->supersedes);
    add_str_or_null(h, "superseded_by", x->superseded_by);
    if (x->run_arm || x->run_ref) {
        cJSON *r = cJSON_AddObjectToObject(j, "runs");
        cJSON_AddNumberToObject(r, "arm", (double)x->run_arm);
        cJSON_AddNumberToObject(r, "reference", (double)x->run_ref);
    }
    if (x->notes) cJSON_AddStringToObject(j, "notes", x->notes);
    char *text = pretty(j);
    cJSON_Delete(j);
    if (!text) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    lab_buf b = {0};
    lab_buf_printf(&b, "%s\n", text);
    free(text);
    int rc = b.oom ? lab_errf(err, errlen, LAB_ENOMEM, "out of memory")
                   : lab_cli_write_file_atomic(path, b.data, b.len, err, errlen);
    lab_buf_free(&b);
    return rc;
}
