/*
 * rerun.c — running recorded runs again (see rerun.h).
 */
#include "rerun.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "experiment.h"
#include "metrics.h"
#include "model_cache.h"
#include "provenance.h"
#include "runner.h"
#include "store.h"
#include "store_annot.h"
#include "util.h"

/* Reads and checks the runs to rerun: each exists, is not RUNNING or a
 * shard, has its spec stored, and all are of one experiment and one spec
 * (one runner pass reruns them together). */
static int load_sources(lab_store *st, const lab_rerun_opts *o, lab_rerun_src **out, int64_t *n, char *err,
                        size_t errlen) {
    int64_t *ids = NULL, nids = o->n_runs;
    int rc = LAB_OK;
    if (o->experiment) {
        if ((rc = lab_store_latest_runs(st, o->experiment, &ids, &nids, err, errlen))) return rc;
        if (!nids) rc = lab_errf(err, errlen, LAB_EINPUT, "%s: experiment %s has no FINISHED run to rerun (see `vtlab "
                                 "runs --experiment %s`)", lab_store_path(st), o->experiment, o->experiment);
    }
    lab_rerun_src *v = rc ? NULL : calloc((size_t)nids, sizeof *v);
    if (!rc && !v) rc = lab_oom(err, errlen);
    for (int64_t i = 0; !rc && i < nids; i++) {
        int64_t id = ids ? ids[i] : o->runs[i];
        lab_rerun_src *r = &v[i];
        *n = i + 1;
        if ((rc = lab_store_rerun_src(st, id, r, err, errlen))) break;
        if (!r->found) rc = lab_errf(err, errlen, LAB_EINPUT, "%s: no run %lld (see `vtlab runs`)", lab_store_path(st),
                                     (long long)id);
        else if (!strcmp(r->status, "RUNNING"))
            rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld is RUNNING: rerun it once it has ended", (long long)id);
        else if (r->shard[0])
            rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld is shard %s of a run: rerun the merged run (docs/slurm.md)",
                          (long long)id, r->shard);
        else if (!r->spec_json)
            rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: its experiment spec is not stored in %s (experiment_specs, "
                          "sha256 %.12s): it cannot be rerun from the database", (long long)id, lab_store_path(st),
                          r->spec_sha256);
        else if (i > 0 && strcmp(r->spec_sha256, v[0].spec_sha256))
            rc = lab_errf(err, errlen, LAB_EINPUT, "runs %lld and %lld ran different experiment specs (%s, %s): rerun "
                          "them one at a time", (long long)v[0].id, (long long)id, v[0].experiment, r->experiment);
        for (int64_t k = 0; !rc && k < i; k++)
            if (!strcmp(v[k].arm, r->arm) && v[k].repeat == r->repeat)
                rc = lab_errf(err, errlen, LAB_EINPUT, "runs %lld and %lld are the same arm %s (repeat %lld): rerun "
                              "one of them", (long long)v[k].id, (long long)id, r->arm, (long long)r->repeat);
    }
    free(ids);
    *out = v;
    return rc;
}

/* The engine value of --engine: "builtin", a JSON array, or a command line
 * split at blanks. NULL when out of memory or not understood (*why says). */
static cJSON *engine_value(const char *s, const char **why) {
    *why = NULL;
    if (!strcmp(s, "builtin")) return cJSON_CreateString("builtin");
    if (s[0] == '[') {
        cJSON *j = cJSON_Parse(s);
        if (!cJSON_IsArray(j) || !cJSON_GetArraySize(j)) { cJSON_Delete(j); *why = "a JSON array of strings"; return NULL; }
        return j;
    }
    cJSON *a = cJSON_CreateArray();
    for (const char *p = s; a && *p;) {
        while (isspace((unsigned char)*p)) p++;
        const char *q = p;
        while (*q && !isspace((unsigned char)*q)) q++;
        if (q > p) {
            char *w = strndup(p, (size_t)(q - p));
            cJSON *it = w ? cJSON_CreateString(w) : NULL;
            free(w);
            if (!it) { cJSON_Delete(a); return NULL; }
            cJSON_AddItemToArray(a, it);
        }
        p = q;
    }
    if (a && !cJSON_GetArraySize(a)) { cJSON_Delete(a); *why = "a command"; return NULL; }
    return a;
}

/* The stored spec with --engine for every arm (cJSON *; NULL with err). */
static cJSON *spec_with_engine(const lab_rerun_src *r, const char *engine, char *err, size_t errlen) {
    cJSON *j = cJSON_Parse(r->spec_json);
    if (!j) { lab_errf(err, errlen, LAB_EINPUT, "run %lld: its stored spec is not JSON", (long long)r->id); return NULL; }
    if (!engine) return j;
    const char *why = NULL;
    cJSON *v = engine_value(engine, &why), *a;
    if (!v) {
        cJSON_Delete(j);
        if (why) lab_errf(err, errlen, LAB_EINPUT, "--engine %s: expected \"builtin\", %s", engine, why);
        else lab_oom(err, errlen);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(j, "engine");
    cJSON_AddItemToObject(j, "engine", v);
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, "arms")) cJSON_DeleteItemFromObjectCaseSensitive(a, "engine");
    return j;
}

/* The experiment as the run ran it (its stored spec), with --engine for
 * every arm. path (for messages and the paths in it) is the file the run was
 * given, as recorded. Its paths are read as it names them, else as a vtlab
 * before paths.h read them (from the directory it ran in, most often this
 * one); what is stored with the new runs is the spec itself, not the paths
 * found, so a rerun records the spec of the run it repeats. */
static int build_experiment(const lab_rerun_src *r, const char *engine, lab_experiment **e, char *err, size_t errlen) {
    const char *path = r->spec_file ? r->spec_file : "(stored spec)";
    cJSON *j = spec_with_engine(r, engine, err, errlen);
    if (!j) return LAB_EINPUT;
    char *spec = cJSON_PrintUnformatted(j), *text = NULL;
    int rc = spec ? lab_experiment_rebase(j, path, 1, err, errlen) : lab_oom(err, errlen);
    if (!rc && !(text = cJSON_PrintUnformatted(j))) rc = lab_oom(err, errlen);
    cJSON_Delete(j);
    if (!rc) rc = lab_experiment_parse(e, path, text, err, errlen);
    free(text);
    if (rc) {
        free(spec);
        return lab_err_prefix(err, errlen, rc, "run %lld (its stored spec)", (long long)r->id);
    }
    free((*e)->spec_json);
    (*e)->spec_json = spec;
    return LAB_OK;
}

/* The model the rerun uses: the cache entry with the run's model hash, else
 * the spec's model (a synthetic one rebuilt), which must have that hash
 * unless force. A run through a command engine reports its own model hash:
 * the spec's model is passed to it, and the comparison shows a change. */
static int find_model(const lab_experiment *e, const lab_rerun_src *r, int command, int force, char **dir, char *err,
                      size_t errlen) {
    int rc = lab_model_cache_find(r->model_sha256, dir, err, errlen);
    if (rc || *dir) return rc;
    char got[65];
    if ((rc = lab_model_dir(e, dir, err, errlen)))
        return lab_err_prefix(err, errlen, rc, "run %lld's model (sha256 %s) is not in the cache, and its spec's", (long long)r->id,
                              r->model_sha256);
    if (command || force) return LAB_OK;
    if ((rc = lab_model_sha256(*dir, got, err, errlen))) return rc;
    if (!strcmp(got, r->model_sha256)) return LAB_OK;
    rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld was measured on model sha256 %s; the spec's model %s (%s) is now "
                  "sha256 %s, and no model with the run's hash is in the cache: restore the model it was (its checkpoint, or "
                  "the synth config), or --force to rerun on this one", (long long)r->id, r->model_sha256, e->model_synth ? e->synth_name : e->model_dir,
                  *dir, got);
    free(*dir);
    *dir = NULL;
    return rc;
}

/* Which parts of the identity differ between the original and its rerun. */
static void changed_parts(const lab_rerun_src *a, const lab_rerun_src *b, char *out, size_t n) {
    const char *names[5] = {"code", "engine", "model", "knobs", "dataset"};
    const char *x[5] = {a->code_version, a->engine, a->model_sha256, a->knob_hash, a->dataset_sha256};
    const char *y[5] = {b->code_version, b->engine, b->model_sha256, b->knob_hash, b->dataset_sha256};
    out[0] = 0;
    for (int i = 0; i < 5; i++)
        if (strcmp(x[i], y[i]))
            snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "", names[i]);
}

static void print_cmp(FILE *out, const char *label, const lab_rerun_cmp *c) {
    if (!c->have) { fprintf(out, "  %-9s (not compared with a reference)\n", label); return; }
    fprintf(out, "  %-9s top1 %lld/%lld [%.3f, %.3f]  KL %.3g  (reference run %lld)\n", label, (long long)c->k,
            (long long)c->n, c->lo, c->hi, c->kl_mean, (long long)c->reference_run);
}

/* Prints what changed between run a and its rerun b (which differ). */
static int print_deltas(lab_store *st, FILE *out, const lab_rerun_src *a, const lab_rerun_src *b, char *err,
                        size_t errlen) {
    char parts[128];
    lab_rerun_cmp ca, cb;
    changed_parts(a, b, parts, sizeof parts);
    fprintf(out, "  differs: logits sha256 %s -> %s\n", a->logits_sha256[0] ? a->logits_sha256 : "(none)",
            b->logits_sha256[0] ? b->logits_sha256 : "(none)");
    fprintf(out, "  identity: %s\n", parts[0] ? parts : "nothing changed (the same code, engine, model, knobs and "
                                                        "dataset computed other logits: not deterministic?)");
    if (strcmp(a->code_version, b->code_version)) fprintf(out, "  code      %s -> %s\n", a->code_version, b->code_version);
    if (strcmp(a->engine, b->engine)) fprintf(out, "  engine    %s -> %s\n", a->engine, b->engine);
    if (strcmp(a->model_sha256, b->model_sha256)) fprintf(out, "  model     %s -> %s\n", a->model_sha256, b->model_sha256);
    int rc = lab_store_rerun_cmp(st, a->id, &ca, err, errlen);
    if (!rc) rc = lab_store_rerun_cmp(st, b->id, &cb, err, errlen);
    if (rc) return rc;
    print_cmp(out, "before", &ca);
    print_cmp(out, "after", &cb);
    /* McNemar on agreement with the original's reference (a reference arm's
     * rerun: with the original itself), at the same positions */
    int64_t ref = ca.have ? ca.reference_run : a->id, n = 0, lost = 0, gained = 0;
    char perr[512];
    if (lab_store_agreement_pair(st, a->id, b->id, ref, &n, &lost, &gained, perr, sizeof perr)) {
        fprintf(out, "  McNemar: not computed (%s)\n", perr);
        return LAB_OK;
    }
    if (ca.have)
        fprintf(out, "  McNemar  against reference run %lld over %lld positions: %lld agreed before only, %lld after "
                "only, p = %.3g\n", (long long)ref, (long long)n, (long long)lost, (long long)gained,
                lab_mcnemar_exact(lost, gained));
    else
        fprintf(out, "  top-1    differs from the original's at %lld of %lld positions (McNemar p = %.3g)\n",
                (long long)lost, (long long)n, lab_mcnemar_exact(lost, gained));
    return LAB_OK;
}

/* The comparison of run src with its newest rerun; *failed counted when the
 * rerun did not finish. */
static int report_one(lab_store *st, FILE *out, const lab_rerun_src *src, int64_t *failed, char *err, size_t errlen) {
    int64_t nid = 0;
    lab_rerun_src b;
    int rc = lab_store_rerun_of(st, src->id, &nid, err, errlen);
    if (rc) return rc;
    if (!nid) {
        (*failed)++;
        fprintf(out, "rerun of run %lld (%s/%s): not run\n", (long long)src->id, src->experiment, src->arm);
        return LAB_OK;
    }
    if ((rc = lab_store_rerun_src(st, nid, &b, err, errlen))) return rc;
    fprintf(out, "rerun of run %lld (%s/%s%s): run %lld %s\n", (long long)src->id, src->experiment, src->arm,
            src->is_reference ? ", reference" : "", (long long)nid, b.status);
    if (strcmp(b.status, "FINISHED") && strcmp(b.status, "PARTIAL")) (*failed)++;
    else if (b.logits_sha256[0] && !strcmp(b.logits_sha256, src->logits_sha256))
        fprintf(out, "  identical (logits sha256 %s)\n", b.logits_sha256);
    else rc = print_deltas(st, out, src, &b, err, errlen);
    lab_rerun_src_free(&b);
    return rc;
}

/* Runs the sources' arms again in one pass of the runner. */
static int run_again(const lab_rerun_opts *o, lab_experiment *e, const lab_rerun_src *v, int64_t n, const char *dir,
                     char *err, size_t errlen) {
    int64_t *of = calloc((size_t)e->n_arms, sizeof *of), *rep = calloc((size_t)e->n_arms, sizeof *rep);
    int rc = of && rep ? LAB_OK : lab_oom(err, errlen);
    lab_run_more m = {0, of, rep, dir};
    for (int64_t i = 0; !rc && i < n; i++) {
        int64_t arm = lab_experiment_arm(e, v[i].arm);
        if (arm < 0 || v[i].repeat >= e->repeats)
            rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: arm %s (repeat %lld) is not in its stored spec",
                          (long long)v[i].id, v[i].arm, (long long)v[i].repeat);
        else {
            of[arm] = v[i].id;
            rep[arm] = v[i].repeat;
            if (!strcmp(v[i].status, "PARTIAL")) m.limit = v[i].n_sequences;   /* the same first sequences */
        }
    }
    lab_run_opts ro = {o->db_path, NULL, 0, lab_progress_mode(), 0, 0};
    lab_run_summary sum = {0};
    if (!rc) rc = lab_run_parsed(e, v[0].spec_file ? v[0].spec_file : e->id, &ro, &m, &sum, err, errlen);
    free(of);
    free(rep);
    return rc;
}

int lab_rerun(const lab_rerun_opts *o, FILE *out, int64_t *failed, char *err, size_t errlen) {
    lab_store *st = NULL;
    lab_rerun_src *v = NULL;
    lab_experiment *e = NULL;
    char *dir = NULL;
    int64_t n = 0;
    *failed = 0;
    if (!lab_path_exists(o->db_path))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: no such database (pass --db PATH)", o->db_path);
    int rc = lab_store_open(&st, o->db_path, err, errlen);
    if (!rc) rc = load_sources(st, o, &v, &n, err, errlen);
    lab_store_close(st);
    st = NULL;
    if (!rc) rc = build_experiment(&v[0], o->engine, &e, err, errlen);
    int command = 0;
    for (int64_t i = 0; !rc && i < e->n_arms; i++) command |= lab_arm_engine(e, i)->command;
    if (!rc) rc = find_model(e, &v[0], command, o->force, &dir, err, errlen);
    for (int64_t i = 0; !rc && i < n; i++)
        fprintf(out, "rerun of run %lld (%s/%s, %s): from the spec stored with it, model %s\n", (long long)v[i].id,
                v[i].experiment, v[i].arm, v[i].status, dir);
    fflush(out);
    if (!rc) rc = run_again(o, e, v, n, dir, err, errlen);
    if (!rc) rc = lab_store_open_readonly(&st, o->db_path, err, errlen);
    for (int64_t i = 0; !rc && i < n; i++) rc = report_one(st, out, &v[i], failed, err, errlen);
    lab_store_close(st);
    for (int64_t i = 0; i < n; i++) lab_rerun_src_free(&v[i]);
    free(v);
    free(dir);
    lab_experiment_free(e);
    return rc;
}
