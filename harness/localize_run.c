/*
 * localize_run.c — one layer set of a localization: its derived experiment
 * (the original one with the arm's levers scoped to the set), its run (made
 * by the runner, or found recorded with the same identity), its class and
 * its stored step. See localize.h and docs/localize.md.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "localize_internal.h"
#include "metrics.h"
#include "model/vt.h"
#include "runner.h"
#include "util.h"

void lab_loc_set_text(const lctx *c, const uint8_t *set, char *out, size_t outlen) {
    vtp_layer_set s;
    memset(&s, 0, sizeof s);
    int64_t k = 0;
    for (int64_t u = 0; u < c->n; u++) {
        if (!set[u]) continue;
        k++;
        if (c->L.by[0] == 's') s.site[u / 2] |= (unsigned char)(1 << (u % 2));
        else s.site[u] = 3;
    }
    if (k == c->n) snprintf(out, outlen, "all");
    else if (vtp_layer_set_format(&s, out, outlen)) snprintf(out, outlen, "none");
}

void lab_loc_arm_name(const lctx *c, const char *text, char *out, size_t outlen) {
    if (!strcmp(text, "all")) { snprintf(out, outlen, "%s", c->L.arm); return; }
    char t[VTP_LAYER_SET_TEXT + 8];
    snprintf(t, sizeof t, "L%s", text);
    for (char *p = t; *p; p++)
        if (*p == ',') *p = '_';
    if (strlen(c->L.arm) + 1 + strlen(t) <= LAB_NAME_MAX) {
        snprintf(out, outlen, "%s.%s", c->L.arm, t);
        return;
    }
    char h[65];   /* a long set: its hash keeps the name an arm name */
    vt_sha256_hex(text, strlen(text), h);
    snprintf(out, outlen, "%.*s.Lh%.10s", LAB_NAME_MAX - 13, c->L.arm, h);
}

void lab_loc_exp_id(const lctx *c, int64_t scale, char *out, size_t outlen) {
    char suffix[32];
    if (scale > 1) snprintf(suffix, sizeof suffix, ".loc.x%lld", (long long)scale);
    else snprintf(suffix, sizeof suffix, ".loc");
    snprintf(out, outlen, "%.*s%s", (int)(LAB_NAME_MAX - strlen(suffix)), c->e->id, suffix);
}

/* The arm as the experiment file has it (cJSON object), or NULL. */
static cJSON *arm_of(cJSON *root, const char *name) {
    cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(root, "arms")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return a;
    }
    return NULL;
}

/* The original experiment file, parsed (the caller's, cJSON_Delete). */
static cJSON *original(const lctx *c) {
    char *text = NULL, err[512];
    size_t len = 0;
    void *root = NULL;
    if (lab_read_json(c->exp_abs, &text, &len, err, sizeof err)) return NULL;
    if (lab_json_parse(c->exp_abs, text, len, &root, err, sizeof err)) root = NULL;
    free(text);
    return root;
}

void *lab_loc_arm_json(const lctx *c, const char *text) {
    cJSON *root = original(c), *a = root ? cJSON_Duplicate(arm_of(root, c->L.arm), 1) : NULL;
    cJSON_Delete(root);
    if (!a || !strcmp(text, "all")) return a;
    char name[LAB_NAME_BUF + 16], desc[VTP_LAYER_SET_TEXT + 200];
    lab_loc_arm_name(c, text, name, sizeof name);
    snprintf(desc, sizeof desc, "%s with %s on %s only (vtlab localize)", c->L.arm, c->L.levers, text);
    cJSON_ReplaceItemInObjectCaseSensitive(a, "name", cJSON_CreateString(name));
    cJSON_DeleteItemFromObjectCaseSensitive(a, "description");
    cJSON_AddStringToObject(a, "description", desc);
    /* a scope makes the levers' sites mixed, layer by layer: the arm's
     * expectations are the full lever's (its own run checks them) */
    cJSON_DeleteItemFromObjectCaseSensitive(a, "expect");
    cJSON *sc = cJSON_CreateObject();
    for (int i = 0; i < c->n_levers; i++) cJSON_AddStringToObject(sc, c->levers[i], text);
    cJSON_AddItemToObject(a, "scope", sc);
    return a;
}

/* The derived experiment of set text at scale, written once into the work
 * directory: its own id (ID.loc, ID.loc.xS: its runs are not the
 * experiment's), the reference, the full arm and the set's arm, the dataset
 * scale times as long (the same seed: the first sequences are the
 * original's), one repeat, KL and the per-layer divergence measured. */
static int write_derived(const lctx *c, const char *text, int64_t scale, char *path, size_t plen, char *err,
                         size_t errlen) {
    char id[LAB_NAME_BUF + 16], name[LAB_NAME_BUF + 16], dir[PATH_MAX + 32];
    lab_loc_exp_id(c, scale, id, sizeof id);
    lab_loc_arm_name(c, text, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/x%lld", c->work, (long long)scale);
    snprintf(path, plen, "%s/%s.json", dir, name);
    if (lab_path_exists(path)) return LAB_OK;
    cJSON *j = original(c);
    if (!j) return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot read the experiment again", c->exp_abs);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "id", cJSON_CreateString(id));
    cJSON *ns = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "dataset"), "generate"), "n_sequences");
    if (cJSON_IsNumber(ns)) cJSON_SetNumberValue(ns, ns->valuedouble * (double)scale);
    cJSON *arms = cJSON_CreateArray();
    cJSON_AddItemToArray(arms, cJSON_Duplicate(arm_of(j, c->L.reference), 1));
    cJSON_AddItemToArray(arms, cJSON_Duplicate(arm_of(j, c->L.arm), 1));
    if (strcmp(text, "all")) cJSON_AddItemToArray(arms, lab_loc_arm_json(c, text));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "arms", arms);
    if (!cJSON_GetObjectItemCaseSensitive(j, "hypothesis")) {   /* what a claim of one of its runs says */
        char hyp[600];
        snprintf(hyp, sizeof hyp, "arm %.48s passes the decision rule with its levers (%.200s) on a part of the model "
                 "only (vtlab localize: the arm's scope says which)", c->L.arm, c->L.levers);
        cJSON_AddStringToObject(j, "hypothesis", hyp);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(j, "repeats");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "metrics");   /* all of them: KL and divergence for the table */
    int rc = lab_experiment_rebase(j, c->exp_abs, 0, err, errlen);
    char *printed = rc ? NULL : cJSON_Print(j);
    cJSON_Delete(j);
    if (!rc && !printed) rc = lab_oom(err, errlen);
    if (!rc) rc = lab_mkdirs(dir, err, errlen);
    if (!rc) rc = lab_cli_write_file_atomic(path, printed, strlen(printed), err, errlen);
    free(printed);
    return rc;
}

/* Runs arm `name` of the derived experiment path (the reference first when
 * it has no run yet). The runner's own lines, stdout and stderr (a scoped
 * replay arm whose assertions come out otherwise than the arm declares, an
 * engine's failure), go to the work directory's runs.log: the localization
 * prints its steps, and a run that does not finish is said by its error. */
static int run_arm(const lctx *c, const char *path, const char *name, char *err, size_t errlen) {
    lab_run_opts ro = {c->db_abs, name, 0, 0, 0, 0};
    lab_run_summary sum;
    memset(&sum, 0, sizeof sum);
    fflush(stdout);
    fflush(stderr);
    int out = dup(1), errfd = dup(2), log = open(c->runlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out >= 0 && errfd >= 0 && log >= 0) {
        dup2(log, 1);
        dup2(log, 2);
    }
    int rc = lab_run_experiment(path, &ro, &sum, err, errlen);
    fflush(stdout);
    fflush(stderr);
    if (out >= 0) { dup2(out, 1); close(out); }
    if (errfd >= 0) { dup2(errfd, 2); close(errfd); }
    if (log >= 0) close(log);
    return rc;
}

/* The paired test of step s against the full lever's run at its scale. */
static int against_full(lctx *c, lab_localize_step *s, char *err, size_t errlen) {
    const lab_localize_step *f = lab_loc_step_at(c, "all", s->scale);
    s->p = NAN;
    if (!strcmp(s->set, "all") || !f || f->arm_run_id <= 0) return LAB_OK;
    uint8_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    int rc = lab_store_agreement(c->st, s->arm_run_id, s->ref_run_id, &a, &na, err, errlen);
    if (!rc) rc = lab_store_agreement(c->st, f->arm_run_id, f->ref_run_id, &b, &nb, err, errlen);
    if (!rc && na == nb) {
        s->lost = s->gained = 0;
        for (int64_t i = 0; i < na; i++) {
            s->lost += b[i] && !a[i];
            s->gained += !b[i] && a[i];
        }
        s->p = lab_mcnemar_exact(s->lost, s->gained);
    }
    free(a);
    free(b);
    return rc;
}

/* The class of a step with a run: the decision rule's verdict decides. */
static void classify(lab_localize_step *s) {
    if (!strcmp(s->verdict, "REFUTED")) snprintf(s->cls, sizeof s->cls, "fail");
    else if (!strcmp(s->verdict, "SUPPORTED")) snprintf(s->cls, sizeof s->cls, "pass");
    else {
        snprintf(s->cls, sizeof s->cls, "undecided");
        snprintf(s->reason, sizeof s->reason, "the interval [%.3f, %.3f] holds the threshold", s->lo, s->hi);
    }
}

/* The knob hash of arm name of the derived experiment (builtin arms; NULL
 * into *kh for a command engine, whose hash the runner asks it for). */
static int knob_hash_of(const lctx *c, const char *path, const char *name, char kh[65], const char **use, char *err,
                        size_t errlen) {
    *use = NULL;
    if (c->command) return LAB_OK;
    lab_experiment *d = NULL;
    int rc = lab_experiment_load(&d, path, err, errlen);
    int64_t i = rc ? -1 : lab_experiment_arm(d, name);
    if (!rc && i >= 0 && !(rc = lab_arm_knob_hash(d, i, kh, err, errlen))) *use = kh;
    lab_experiment_free(d);
    return rc;
}

static int64_t last_run_id(lab_store *st) {
    int64_t id = 0;
    char err[256];
    lab_store_last_run_id(st, &id, err, sizeof err);
    return id;
}

int lab_loc_evaluate(lctx *c, const char *text, int64_t size, char *err, size_t errlen) {
    lab_localize_step s;
    memset(&s, 0, sizeof s);
    s.localization_id = c->L.id;
    s.scale = c->L.scale;
    s.size = size;
    s.p = s.lo = s.hi = s.kl_mean = NAN;
    s.first_div_layer = -1;
    snprintf(s.set, sizeof s.set, "%s", text);
    snprintf(s.phase, sizeof s.phase, "%s", !strcmp(text, "all") ? "full" : !strcmp(text, "none") ? "empty" : c->phase);
    char path[PATH_MAX + 128], name[LAB_NAME_BUF + 16], id[LAB_NAME_BUF + 16], kh[65], why[512] = "";
    const char *khp = NULL;
    lab_loc_arm_name(c, text, name, sizeof name);
    lab_loc_exp_id(c, s.scale, id, sizeof id);
    int rc = write_derived(c, text, s.scale, path, sizeof path, err, errlen);
    const int64_t before = last_run_id(c->st);
    if (!rc) rc = run_arm(c, path, name, err, errlen);
    if (!rc) rc = knob_hash_of(c, path, name, kh, &khp, err, errlen);
    if (!rc) rc = lab_store_localize_find_run(c->st, id, name, c->code, khp, &s, why, sizeof why, err, errlen);
    if (rc) return rc;
    /* no run: the localization cannot go on; nothing is stored, so the same
     * command tries that run again (an engine that crashed, a kill) */
    if (s.arm_run_id <= 0)
        return lab_errf(err, errlen, LAB_EIO, "the run of %s/%s (levers on %.200s) did not finish: %.400s (the "
                        "runner's lines: %s)", id, name, text, why[0] ? why : "none made", c->runlog);
    s.made = s.arm_run_id > before;
    classify(&s);
    if ((rc = against_full(c, &s, err, errlen))) return rc;
    if (s.made) c->L.runs_made++;
    else c->L.runs_reused++;
    lab_now_iso(s.at);
    if ((rc = lab_store_localize_put_step(c->st, &s, &c->L, err, errlen))) return rc;
    lab_localize_step *v = realloc(c->steps, (size_t)(c->nsteps + 1) * sizeof *v);
    if (!v) return lab_oom(err, errlen);
    c->steps = v;
    c->steps[c->nsteps++] = s;
    lab_loc_print_step(c, &s, s.made ? "made" : "reused");
    return LAB_OK;
}

const lab_localize_step *lab_loc_step_at(const lctx *c, const char *text, int64_t scale) {
    for (int64_t i = 0; i < c->nsteps; i++)
        if (c->steps[i].scale == scale && !strcmp(c->steps[i].set, text)) return &c->steps[i];
    return NULL;
}

const lab_localize_step *lab_loc_decided(const lctx *c, const char *text) {
    const lab_localize_step *best = NULL;
    for (int64_t i = 0; i < c->nsteps; i++) {
        const lab_localize_step *s = &c->steps[i];
        if (strcmp(s->set, text) || (strcmp(s->cls, "pass") && strcmp(s->cls, "fail"))) continue;
        if (!best || s->scale > best->scale) best = s;
    }
    return best;
}

void lab_loc_print_step(const lctx *c, const lab_localize_step *s, const char *how) {
    char set[48];
    snprintf(set, sizeof set, "%s%.40s", strlen(s->set) > 40 ? "~" : "", s->set);
    fprintf(c->out, "  %-11s x%-2lld %-16s ", s->phase, (long long)s->scale, set);
    if (s->arm_run_id > 0) {
        fprintf(c->out, "top1 %lld/%lld [%.3f, %.3f] %-12s", (long long)s->k, (long long)s->n, s->lo, s->hi,
                s->verdict);
        if (isfinite(s->kl_mean)) fprintf(c->out, " KL %-8.3g", s->kl_mean);
        if (isfinite(s->p))
            fprintf(c->out, " vs full -%lld +%lld p=%.3g", (long long)s->lost, (long long)s->gained, s->p);
    }
    fprintf(c->out, "  -> %s (%s", s->cls, how);
    if (s->arm_run_id > 0) fprintf(c->out, ", run %lld", (long long)s->arm_run_id);
    fprintf(c->out, ")%s%s\n", s->reason[0] && strcmp(s->cls, "undecided") ? ": " : "",
            strcmp(s->cls, "undecided") ? s->reason : "");
    fflush(c->out);
}
