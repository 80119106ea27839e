/*
 * claim.c — `vtlab claim RUN --id ID` (see claim.h).
 *
 * Everything the claim says comes from results.db: the run's row, its verdict
 * and the experiment as it was run (experiment_specs.json, not the file as it
 * is now, which may have been edited since). The record is then written the
 * way the ledger reads it: lab_claim_write to a hidden file next to the
 * target, read back through lab_claim_parse (the ledger's own checks), and
 * linked into place — link() fails on an existing name, so a claim is never
 * overwritten, not even by a concurrent `vtlab claim` of the same id.
 */
#include "claim.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger.h"
#include "model/vt.h"
#include "reopen.h"
#include "store.h"
#include "store_claim.h"
#include "paths.h"
#include "util.h"

/* The ledger's rules for an id (ledger.c: letters, digits, '.', '_', '-', at
 * most LAB_NAME_MAX), and no leading '.': the ledger skips hidden files, so
 * such a claim would be written and never read. */
static int check_id(const char *id, char *err, size_t errlen) {
    int rc = lab_check_name("claim", "--id", "a claim id", id, err, errlen);
    if (!rc && id[0] == '.')
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: --id: \"%s\" starts with '.': the ledger skips hidden files, so "
                      "it would never read this claim; start it with a letter, digit, '_' or '-'", id);
    return rc;
}

/* The run, if a claim can be made of it. */
static int read_run(const lab_claim_opts *o, lab_claim_run *r, char *err, size_t errlen) {
    if (!lab_path_exists(o->db_path))
        return lab_errf(err, errlen, LAB_EINPUT, "claim: %s: no such database (pass --db PATH)", o->db_path);
    lab_store *st = NULL;
    int rc = lab_store_open_readonly(&st, o->db_path, err, errlen);
    if (!rc) rc = lab_claim_read_run(st, o->run_id, r, err, errlen);
    lab_store_close(st);
    if (rc) return rc;
    long long id = (long long)o->run_id;
    if (!r->found) return lab_errf(err, errlen, LAB_EINPUT, "claim: no run %lld in %s (see `vtlab runs`)", id, o->db_path);
    if (strcmp(r->status, "FINISHED"))
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld (%s/%s) is %s, not FINISHED: only a finished run's "
                        "numbers are a result", id, r->experiment, r->arm, r->status);
    if (r->is_reference)
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld is a run of the reference arm %s of %s: a claim is "
                        "about an arm measured against its reference; claim one of the arms' runs", id, r->arm,
                        r->experiment);
    if (r->shard[0])
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld is shard %s of a run of %s/%s: claim the merged run "
                        "(docs/slurm.md)", id, r->shard, r->experiment, r->arm);
    if (!r->has_verdict)
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld (%s/%s) has no verdict: its experiment has no "
                        "\"decision\" rule, so there is nothing to claim", id, r->experiment, r->arm);
    if (!r->spec_file || !r->spec_json)
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld: results.db records no experiment file for it",
                        id);
    return LAB_OK;
}

/* An arm's knobs from the experiment as run, in the ledger's form: text
 * values (true -> "1"), vtlab's VT_* knobs canonical as the ledger stores
 * them (ledger.c get_knobs). */
static int arm_knobs(const cJSON *spec, const char *file, const char *arm, lab_knobs_kv *kv, char *err,
                     size_t errlen) {
    memset(kv, 0, sizeof *kv);
    const cJSON *a = NULL, *arms = cJSON_GetObjectItemCaseSensitive(spec, "arms");
    for (const cJSON *it = arms ? arms->child : NULL; it && !a; it = it->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, arm)) a = it;
    }
    if (!a) return lab_errf(err, errlen, LAB_EINPUT, "claim: %s (as run): no arm \"%s\"", file, arm);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(a, "knobs");
    int64_t n = k ? cJSON_GetArraySize(k) : 0;
    kv->names = calloc((size_t)n + 1, sizeof *kv->names);
    kv->values = calloc((size_t)n + 1, sizeof *kv->values);
    vt_knobset *ks = NULL;
    if (!kv->names || !kv->values || vt_knobset_new(&ks)) return lab_oom(err, errlen);
    int rc = LAB_OK;
    for (const cJSON *it = k ? k->child : NULL; it && !rc; it = it->next) {
        char val[64], kerr[512];
        if (cJSON_IsString(it)) snprintf(val, sizeof val, "%s", it->valuestring);
        else if (cJSON_IsBool(it)) snprintf(val, sizeof val, "%d", cJSON_IsTrue(it));
        else snprintf(val, sizeof val, "%lld", (long long)it->valuedouble);
        const char *v = val;
        if (!strncmp(it->string, "VT_", 3)) {
            if (vt_knobset_set(ks, it->string, val, kerr, sizeof kerr))
                rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s (as run): arm %s: %s", file, arm, kerr);
            v = vt_knobset_get(ks, it->string);
        }
        if (rc) break;
        kv->names[kv->n] = lab_strdup(it->string);
        kv->values[kv->n] = lab_strdup(v);
        if (!kv->names[kv->n] || !kv->values[kv->n]) rc = lab_oom(err, errlen);
        kv->n++;   /* counted even when a copy failed: lab_claim_clear frees what there is */
    }
    vt_knobset_free(ks);
    return rc;
}

/* Where the ledger finds a claim's experiment (ledger.c find_experiment):
 * relative to the ledger directory's parent, or absolute. 1 with the file's
 * real path in real, 0 when it is not there. */
static int ledger_finds(const char *specs, const char *exp, char real[PATH_MAX]) {
    struct stat sb;
    char *p = lab_path_in_ledger(specs, exp);
    int ok = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && realpath(p, real) != NULL;
    free(p);
    return ok;
}

/* The run's experiment file as results.db records it (the path the run was
 * given, from the directory it ran in): from here, else as the ledger would
 * read it. 1 with its real path in real. */
static int run_file(const char *specs, const char *recorded, char real[PATH_MAX]) {
    struct stat sb;
    if (stat(recorded, &sb) == 0 && S_ISREG(sb.st_mode)) return realpath(recorded, real) != NULL;
    return ledger_finds(specs, recorded, real);
}

/* real's path below the directory dir (made real first), or NULL. */
static const char *below(const char *real, const char *dir, char buf[PATH_MAX]) {
    if (!realpath(dir, buf)) return NULL;
    size_t l = strlen(buf);
    if (!strcmp(buf, "/")) return real + 1;
    return strncmp(real, buf, l) || real[l] != '/' ? NULL : real + l + 1;
}

/* claim.experiment: the run's experiment file written so that the ledger at
 * specs finds that same file — relative to the ledger's parent when it lies
 * below it (what a ledger moved with its repository keeps finding), else
 * absolute. */
static int experiment_path(const char *specs, const char *recorded, int64_t run, char **out, char *err,
                           size_t errlen) {
    char want[PATH_MAX], got[PATH_MAX], b1[PATH_MAX], parent[PATH_MAX + 8];
    if (!run_file(specs, recorded, want))
        return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld: its experiment file %s (as results.db records it) "
                        "is not found from here nor next to the ledger %s; run `vtlab claim` where the run was made, "
                        "or restore the file", (long long)run, recorded, specs);
    char *dot = lab_path_in_ledger(specs, ".");   /* the ledger's parent, as the ledger names it */
    if (!dot) return lab_oom(err, errlen);
    snprintf(parent, sizeof parent, "%s", dot);
    free(dot);
    const char *cand[2] = {below(want, parent, b1), want};
    for (int i = 0; i < 2; i++)
        if (cand[i] && cand[i][0] && ledger_finds(specs, cand[i], got) && !strcmp(got, want))
            return (*out = lab_strdup(cand[i])) ? LAB_OK : lab_oom(err, errlen);
    return lab_errf(err, errlen, LAB_EINTERNAL, "claim: %s: the ledger %s would not find it", want, specs);
}

/* warning: the file differs from the experiment the run executed (compared
 * as the runner stores it: cJSON's canonical print). */
static void check_unchanged(const char *file, const char *shown, const char *spec_json, int64_t run, char *warning,
                            size_t warnlen) {
    char *text = NULL, e[512];
    size_t len = 0;
    void *root = NULL;
    char *now = NULL;
    if (!lab_read_json(file, &text, &len, e, sizeof e) && !lab_json_parse(file, text, len, &root, e, sizeof e))
        now = cJSON_PrintUnformatted(root);
    if (!now || strcmp(now, spec_json))
        snprintf(warning, warnlen, "%s is not the experiment run %lld executed (it was edited since%s): the claim "
                 "names it as the recipe that reproduces the run; check that it still does", shown, (long long)run,
                 now ? "" : ", or cannot be read now");
    cJSON_free(now);
    cJSON_Delete(root);
    free(text);
}

/* claim->notes: where it came from, and a dirty tree said in words. */
static char *notes_of(const lab_claim_opts *o, const lab_claim_run *r) {
    lab_buf b = {0};
    lab_buf_printf(&b, "Recorded by `vtlab claim` from run %lld (arm %s of experiment %s) against reference run %lld",
                   (long long)o->run_id, r->arm, r->experiment, (long long)r->reference_run);
    if (r->engine[0]) lab_buf_printf(&b, ", through engine %s", r->engine);
    lab_buf_printf(&b, ".");
    if (!r->engine[0] && strstr(r->commit, "+dirty"))
        lab_buf_printf(&b, " vtlab was built from a tree with uncommitted changes (%s): the commit alone does not "
                       "reproduce it.", r->commit);
    if (b.oom) { lab_buf_free(&b); return NULL; }
    return b.data;
}

/* The claim's fields from the run (all owned by c: lab_claim_clear). */
static int fill_claim(const lab_claim_opts *o, const lab_claim_run *r, lab_claim *c, char *err, size_t errlen) {
    cJSON *spec = cJSON_Parse(r->spec_json);
    const char *f = r->spec_file;
    if (!spec) return lab_errf(err, errlen, LAB_EINPUT, "claim: run %lld: the stored experiment %s is not JSON",
                               (long long)o->run_id, f);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(spec, "reference");
    const cJSON *hyp = cJSON_GetObjectItemCaseSensitive(spec, "hypothesis");
    const char *hypothesis = o->hypothesis ? o->hypothesis : cJSON_IsString(hyp) ? hyp->valuestring : NULL;
    int rc = LAB_OK;
    if (!hypothesis || !hypothesis[0])
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s has no \"hypothesis\": say what was tested with "
                      "--hypothesis TEXT", f);
    else if (!cJSON_IsString(ref))
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s (as run): no \"reference\" arm", f);
    if (!rc) rc = arm_knobs(spec, f, r->arm, &c->arm_knobs, err, errlen);
    if (!rc) rc = arm_knobs(spec, f, ref->valuestring, &c->ref_knobs, err, errlen);
    const char *codebase, *commit;
    lab_claim_code_of_run(r->engine, r->engine_commit, r->engine, r->commit, &codebase, &commit);
    char date[16];
    snprintf(date, sizeof date, "%.10s", r->started);
    if (!rc) {
        c->id = lab_strdup(o->id);
        c->hypothesis = lab_strdup(hypothesis);
        c->verdict = lab_strdup(r->verdict);
        c->metric = lab_strdup(r->metric);
        c->direction = lab_strdup(r->direction);
        c->arm_name = lab_strdup(r->arm);
        c->ref_name = lab_strdup(ref->valuestring);
        c->codebase = lab_strdup(codebase);
        c->code.commit = lab_strdup(commit);
        c->code.date = lab_strdup(date);
        c->measured_at = lab_strdup(date);
        c->notes = notes_of(o, r);
        if (!c->id || !c->hypothesis || !c->verdict || !c->metric || !c->direction || !c->arm_name || !c->ref_name ||
            !c->codebase || (commit && !c->code.commit) || !c->code.date || !c->measured_at || !c->notes)
            rc = lab_oom(err, errlen);
    }
    c->k = r->k;
    c->n = r->n;
    c->threshold = r->threshold;
    c->run_arm = o->run_id;
    c->run_ref = r->reference_run;
    cJSON_Delete(spec);
    return rc;
}

/* The written file, read back as the ledger reads it (named as its final
 * path: the id must match the file name). */
static int check_written(const char *tmp, const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = lab_read_json(tmp, &text, &len, err, errlen);
    lab_claim back;
    memset(&back, 0, sizeof back);
    if (!rc) rc = lab_claim_parse(path, text, len, &back, err, errlen);
    if (rc) lab_err_prefix(err, errlen, rc, "claim: the record would not load");
    lab_claim_clear(&back);
    free(text);
    return rc;
}

/* Writes c to SPECS/claims/ID.json (path), never over an existing file.
 * Under the lock a reopen's commit holds (reopen.c lock_dir: the claims
 * directory's parent), so the claims directory it swaps in cannot drop the
 * new file. */
static int write_claim(const lab_claim *c, const char *specs, char *path, size_t pathlen, char *err, size_t errlen) {
    int rc = lab_reopen_recover(specs, err, errlen);
    if (rc) return rc;
    int lk = open(specs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lk < 0 || flock(lk, LOCK_EX) != 0) {
        rc = lab_errf(err, errlen, LAB_EIO, "claim: %s: cannot lock: %s", specs, strerror(errno));
        if (lk >= 0) close(lk);
        return rc;
    }
    char dir[PATH_MAX], tmp[PATH_MAX + 64];
    int dl = snprintf(dir, sizeof dir, "%s/claims", specs);
    int pl = snprintf(path, pathlen, "%s/%s.json", dir, c->id);
    snprintf(tmp, sizeof tmp, "%s/.%s.json.claim.%ld", dir, c->id, (long)getpid());   /* hidden: never loaded */
    if (dl < 0 || (size_t)dl >= sizeof dir || pl < 0 || (size_t)pl >= pathlen)
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s: path too long", specs);
    else if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = lab_errf(err, errlen, LAB_EIO, "claim: %s: cannot create: %s", dir, strerror(errno));
    else if (lab_path_exists(path))
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s exists: a recorded claim is never overwritten (choose "
                      "another --id; `vtlab reopen` supersedes a claim)", path);
    if (!rc) rc = lab_claim_write(c, tmp, err, errlen);
    if (!rc) rc = check_written(tmp, path, err, errlen);
    if (!rc && link(tmp, path) != 0)
        rc = errno == EEXIST ? lab_errf(err, errlen, LAB_EINPUT, "claim: %s exists: a recorded claim is never "
                                        "overwritten (choose another --id)", path)
                             : lab_errf(err, errlen, LAB_EIO, "claim: %s: %s", path, strerror(errno));
    unlink(tmp);
    if (!rc) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* the new name, durable (best effort) */
        if (fd >= 0) { fsync(fd); close(fd); }
    }
    close(lk);
    return rc;
}

int lab_claim_record(const lab_claim_opts *o, FILE *out, char *path, size_t pathlen, char *warning,
                     size_t warnlen, char *err, size_t errlen) {
    warning[0] = '\0';
    path[0] = '\0';
    struct stat sb;
    int rc = check_id(o->id, err, errlen);
    if (!rc && (stat(o->specs_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        rc = lab_errf(err, errlen, LAB_EINPUT, "claim: %s: no such ledger directory (pass --specs DIR; the claim goes "
                      "to DIR/claims/ID.json)", o->specs_dir);
    if (rc) return rc;
    lab_claim_run r;
    lab_claim c;
    memset(&r, 0, sizeof r);
    memset(&c, 0, sizeof c);
    char real[PATH_MAX];
    rc = read_run(o, &r, err, errlen);
    if (!rc) rc = fill_claim(o, &r, &c, err, errlen);
    if (!rc) rc = experiment_path(o->specs_dir, r.spec_file, o->run_id, &c.experiment, err, errlen);
    if (!rc && ledger_finds(o->specs_dir, c.experiment, real))
        check_unchanged(real, c.experiment, r.spec_json, o->run_id, warning, warnlen);
    if (!rc) rc = write_claim(&c, o->specs_dir, path, pathlen, err, errlen);
    if (!rc && out) {
        fprintf(out, "claim %s: %s, %s %lld/%lld (decision %s %g), arm %s vs reference %s, runs %lld and %lld, %s%s%s, "
                "%s\n", c.id, c.verdict, c.metric, (long long)c.k, (long long)c.n, c.direction, c.threshold, c.arm_name,
                c.ref_name, (long long)c.run_arm, (long long)c.run_ref, c.codebase, c.code.commit ? " " : "",
                c.code.commit ? c.code.commit : "", c.measured_at);
        fprintf(out, "wrote %s: a new ledger record, to be committed (git add %s)\n", path, path);
    }
    lab_claim_clear(&c);
    lab_claim_run_free(&r);
    return rc;
}
