/*
 * bisect.c — `vtlab bisect` (see bisect.h and docs/bisect.md): the search,
 * the classification of a commit, and its printing. Git, builds and the
 * candidates' runs are in bisect_exec.c; the rows in store_bisect.c.
 */
#include "bisect.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bisect_exec.h"
#include "experiment.h"
#include "metrics.h"
#include "model/vt.h"
#include "runner.h"
#include "store.h"

void lab_bisect_defaults(lab_bisect_opts *o) {
    memset(o, 0, sizeof *o);
    o->repo = ".";
    o->db_path = LAB_DEFAULT_DB;
    o->max_scale = LAB_BISECT_DEFAULT_SCALE;
    o->alpha = 0.05;
}

typedef struct bctx {
    const lab_bisect_opts *o;
    FILE          *out;
    lab_store     *st;
    lab_bisection  b;
    lab_experiment *e;
    int            generated;           /* the dataset is "generate": it can grow */
    char         (*shas)[41];           /* [n + 1]: 0 the good end .. n the bad end */
    char         **subj;                /* [n + 1] */
    char         (*shortid)[48];        /* [n + 1] git rev-parse --short=12, "" until asked */
    int64_t        n;
    char           exp_abs[PATH_MAX], repo[PATH_MAX], base[PATH_MAX], work[PATH_MAX], wt[PATH_MAX], db_abs[PATH_MAX];
    char           self[PATH_MAX];      /* this vtlab: the runner when --build builds an engine */
    char           code_suffix[512];    /* this build's "compiler|flags" (what follows "|dirty=N|") */
    char           pgid_file[PATH_MAX + 16], log_git[PATH_MAX + 16];
    int            default_build;
    lab_bisect_step *steps;
    int64_t        nsteps;
    int            lock_fd;
} bctx;

/* ------------------------------------------------------------ helpers */

static const char *short_of(bctx *c, int64_t pos) {
    if (!c->shortid[pos][0]) {
        char e[256];
        if (lab_bx_git_short(c->repo, c->shas[pos], c->shortid[pos], sizeof c->shortid[pos], e, sizeof e))
            snprintf(c->shortid[pos], sizeof c->shortid[pos], "%.12s", c->shas[pos]);
    }
    return c->shortid[pos];
}

static const lab_bisect_step *step_at(const bctx *c, int64_t pos, int64_t scale) {
    for (int64_t i = 0; i < c->nsteps; i++)
        if (c->steps[i].position == pos && c->steps[i].scale == scale) return &c->steps[i];
    return NULL;
}

static void exp_id_at(const bctx *c, int64_t scale, char *out, size_t len) {
    if (scale <= 1) { snprintf(out, len, "%s", c->e->id); return; }
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".x%lld", (long long)scale);
    int keep = (int)(LAB_NAME_MAX - strlen(suffix));
    snprintf(out, len, "%.*s%s", keep, c->e->id, suffix);
}

static void exp_file_at(const bctx *c, int64_t scale, char *out, size_t len) {
    if (scale <= 1) snprintf(out, len, "%s", c->exp_abs);
    else snprintf(out, len, "%s/experiment-x%lld.json", c->work, (long long)scale);
}

/* The experiment with its generated dataset `scale` times as many sequences
 * (the same seed: the first sequences are the original ones) and its id
 * suffixed ".xSCALE", written once into the work directory. */
static int write_scaled(bctx *c, int64_t scale, char *err, size_t errlen) {
    char path[PATH_MAX + 64], tmp[PATH_MAX + 80], id[LAB_NAME_BUF + 16];
    exp_file_at(c, scale, path, sizeof path);
    if (scale <= 1 || lab_path_exists(path)) return LAB_OK;
    char *text = NULL;
    size_t len = 0;
    void *root = NULL;
    int rc = lab_read_json(c->exp_abs, &text, &len, err, errlen);
    if (!rc) rc = lab_json_parse(c->exp_abs, text, len, &root, err, errlen);
    free(text);
    if (rc) return rc;
    cJSON *j = root;
    cJSON *gen = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "dataset"), "generate");
    cJSON *ns = cJSON_GetObjectItemCaseSensitive(gen, "n_sequences");
    exp_id_at(c, scale, id, sizeof id);
    if (!cJSON_IsNumber(ns)) {
        cJSON_Delete(j);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: dataset.generate.n_sequences: a generated dataset is needed to grow it",
                        c->exp_abs);
    }
    cJSON_SetNumberValue(ns, ns->valuedouble * (double)scale);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "id", cJSON_CreateString(id));
    char *printed = cJSON_Print(j);
    cJSON_Delete(j);
    if (!printed) return lab_oom(err, errlen);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(printed, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) ok = 0;
    free(printed);
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return lab_errf(err, errlen, LAB_EIO, "%s: cannot write the scaled experiment: %s", path, strerror(errno));
    }
    return LAB_OK;
}

static void paired(const uint8_t *x, const uint8_t *y, int64_t n, int64_t *lost, int64_t *gained) {
    *lost = *gained = 0;
    for (int64_t i = 0; i < n; i++) {
        *lost += x[i] && !y[i];
        *gained += !x[i] && y[i];
    }
}

static lab_verdict verdict_of(const char *v) {
    if (!strcmp(v, "SUPPORTED")) return LAB_SUPPORTED;
    if (!strcmp(v, "REFUTED")) return LAB_REFUTED;
    return LAB_INCONCLUSIVE;
}

/* ------------------------------------------------------------ one commit */

/* how: where the step's evidence came from, shown after its class: "stored"
 * (a step of an earlier invocation), "built" (the commit built now and its
 * runs made), "cached build" (its runs made now by the binary an earlier
 * build left in the cache) or "runs reused" (its runs already in results.db:
 * nothing built or run). */
static void print_step(bctx *c, const lab_bisect_step *s, const char *how) {
    char subj[61];
    snprintf(subj, sizeof subj, "%.60s", s->subject);
    fprintf(c->out, "  %-12.12s %-3s x%-2lld %-60s ", s->commit, s->position == 0 ? "G" : s->position == c->n ? "B" : "",
            (long long)s->scale, subj);
    if (s->arm_run_id > 0) {
        fprintf(c->out, "top1 %lld/%lld [%.3f, %.3f]", (long long)s->k, (long long)s->n, s->lo, s->hi);
        if (s->verdict[0]) fprintf(c->out, " %s", s->verdict);
        if (!strcmp(c->b.mode, "exact")) fprintf(c->out, "  logits %.12s", s->logits_sha256);
        if (isfinite(s->p))
            fprintf(c->out, "  vs good: -%lld +%lld p=%.3g", (long long)s->lost, (long long)s->gained, s->p);
        if (isfinite(s->p_bad))
            fprintf(c->out, "  vs bad: +%lld -%lld p=%.3g", (long long)s->lost_bad, (long long)s->gained_bad, s->p_bad);
    }
    fprintf(c->out, "  -> %s (%s)%s%s\n", s->cls, how, s->reason[0] ? ": " : "", s->reason);
    fflush(c->out);
}

/* Fills the evidence and class of step s (arm and reference runs found). */
static int classify(bctx *c, lab_bisect_step *s, char *err, size_t errlen) {
    uint8_t *a = NULL;
    int64_t n = 0;
    int rc = lab_store_agreement(c->st, s->arm_run_id, s->ref_run_id, &a, &n, err, errlen);
    if (rc) return rc;
    s->n = n;
    s->k = 0;
    for (int64_t i = 0; i < n; i++) s->k += a[i];
    lab_wilson(s->k, s->n, LAB_Z95, &s->lo, &s->hi);
    int decide = c->e->has_decision && !strcmp(c->e->decision_metric, "top1_agreement");
    if (decide)
        snprintf(s->verdict, sizeof s->verdict, "%s",
                 lab_verdict_name(lab_decide(s->lo, s->hi, c->e->decision_threshold, c->e->decision_ge)));
    s->p = s->p_bad = NAN;
    snprintf(s->cls, sizeof s->cls, "good");
    const lab_bisect_step *g = step_at(c, 0, s->scale), *bd = step_at(c, c->n, s->scale);
    if (s->position == 0 || !g || strcmp(g->cls, "good")) { free(a); return LAB_OK; }
    if (!strcmp(c->b.mode, "exact")) {
        int changed = strcmp(s->logits_sha256, g->logits_sha256) != 0;
        snprintf(s->cls, sizeof s->cls, "%s", changed ? "bad" : "good");
        snprintf(s->reason, sizeof s->reason, "logits %s the good end's (%.12s)", changed ? "differ from" : "equal",
                 g->logits_sha256);
        free(a);
        return LAB_OK;
    }
    uint8_t *ga = NULL, *ba = NULL;
    int64_t gn = 0, bn = 0;
    rc = lab_store_agreement(c->st, g->arm_run_id, g->ref_run_id, &ga, &gn, err, errlen);
    if (!rc && gn != n)
        rc = lab_errf(err, errlen, LAB_EINPUT, "commit %.12s scores %lld positions, the good end %lld: not the same dataset",
                      s->commit, (long long)n, (long long)gn);
    if (!rc) {
        paired(ga, a, n, &s->lost, &s->gained);
        s->p = lab_mcnemar_exact(s->lost, s->gained);
    }
    int has_bad = !rc && bd && bd != s && bd->arm_run_id > 0 && s->position != c->n;
    if (has_bad) rc = lab_store_agreement(c->st, bd->arm_run_id, bd->ref_run_id, &ba, &bn, err, errlen);
    if (has_bad && !rc && bn == n) {
        paired(a, ba, n, &s->lost_bad, &s->gained_bad);   /* what the bad end loses / gains from here */
        s->p_bad = lab_mcnemar_exact(s->lost_bad, s->gained_bad);
    }
    free(ga);
    free(ba);
    free(a);
    if (rc) return rc;
    int worse = s->lost > s->gained && s->p < c->b.alpha;
    int flip_bad = decide && verdict_of(g->verdict) == LAB_SUPPORTED && verdict_of(s->verdict) == LAB_REFUTED;
    int better = isfinite(s->p_bad) && s->lost_bad > s->gained_bad && s->p_bad < c->b.alpha;
    int flip_good = decide && bd && verdict_of(bd->verdict) == LAB_REFUTED && verdict_of(s->verdict) == LAB_SUPPORTED;
    int improved = s->gained > s->lost && s->p < c->b.alpha;
    if (worse || flip_bad) {
        snprintf(s->cls, sizeof s->cls, "bad");
        snprintf(s->reason, sizeof s->reason, "%s",
                 worse ? "significantly worse than the good end" : "verdict REFUTED where the good end is SUPPORTED");
    } else if (better || flip_good) {
        snprintf(s->cls, sizeof s->cls, "good");
        snprintf(s->reason, sizeof s->reason, "%s",
                 better ? "significantly better than the bad end" : "verdict SUPPORTED where the bad end is REFUTED");
    } else if (s->position == c->n && (improved || s->lost <= s->gained)) {
        /* the bad end loses no more positions than it gains: there is no
         * drop to look for (more data would only sharpen "no drop") */
        snprintf(s->cls, sizeof s->cls, "good");
        snprintf(s->reason, sizeof s->reason, "%s", improved ? "significantly better than the good end: no regression"
                                                             : "no more positions lost than gained: no regression");
    } else {
        snprintf(s->cls, sizeof s->cls, "undecided");
        snprintf(s->reason, sizeof s->reason, "the difference is inside the noise at alpha %.3g", c->b.alpha);
    }
    return LAB_OK;
}

/* Builds commit pos in the worktree with the bisection's build command and
 * keeps what it made in the cache (bindir: the binary bin, or the marker of
 * an engine build; failed: that the build failed, with its error line). A
 * failed build fills s->reason and returns LAB_OK: the commit is skipped. */
static int build_candidate(bctx *c, int64_t pos, lab_bisect_step *s, const char *bindir, const char *bin,
                           const char *marker, const char *failed, char *err, size_t errlen) {
    const char *sh = short_of(c, pos);
    char log[PATH_MAX + 80];
    int rc;
    snprintf(log, sizeof log, "%s/logs/%s.build.log", c->work, sh);
    unlink(log);
    fprintf(c->out, "  %-12.12s building (%s) ...\n", c->shas[pos], c->b.build_cmd);
    fflush(c->out);
    const char *argv[] = {"/bin/sh", "-c", c->b.build_cmd, NULL};
    int status = 0;
    double t0 = lab_mono();
    rc = lab_bx_run(argv, c->wt, NULL, log, c->pgid_file, &status, err, errlen);
    if (rc) return rc;
    if (lab_interrupted) return lab_errf(err, errlen, LAB_EIO, "interrupted during the build of %.12s", c->shas[pos]);
    c->b.builds++;
    s->built = 1;
    fprintf(c->out, "  %-12.12s build %s in %.1f s\n", c->shas[pos], status ? "FAILED" : "ok", lab_mono() - t0);
    if (status) {
        char tail[300];
        lab_bx_log_tail(log, tail, sizeof tail);
        snprintf(s->reason, sizeof s->reason, "build failed (exit %d): %s", status, tail);
        if (!(rc = lab_mkdirs(bindir, err, errlen))) {
            FILE *f = fopen(failed, "w");
            if (f) { fprintf(f, "%s\n", s->reason); fclose(f); }
        }
        return rc;
    }
    if ((rc = lab_mkdirs(bindir, err, errlen))) return rc;
    if (c->default_build) {
        char built[PATH_MAX + 32];
        snprintf(built, sizeof built, "%s/build/vtlab", c->wt);
        if (!lab_path_exists(built)) {
            snprintf(s->reason, sizeof s->reason, "the build made no build/vtlab");
            return LAB_OK;
        }
        if ((rc = lab_bx_copy_exe(built, bin, err, errlen))) return rc;
    } else {
        FILE *f = fopen(marker, "w");
        if (f) fclose(f);
    }
    return LAB_OK;
}

/* Runs commit pos's arm (and its reference) at scale by the commit's own
 * vtlab, building it when needed; fills s with its runs (0 when none) and a
 * reason when skipped. */
static int build_and_run(bctx *c, int64_t pos, int64_t scale, lab_bisect_step *s, char *err, size_t errlen) {
    const char *sh = short_of(c, pos);
    /* the build cache, shared by the bisections of one work directory: a
     * commit's binary (or that its build failed), per build command */
    char bindir[PATH_MAX + 64], bin[PATH_MAX + 80], log[PATH_MAX + 80], marker[PATH_MAX + 80], failed[PATH_MAX + 80];
    char bh[65];
    vt_sha256_hex(c->b.build_cmd, strlen(c->b.build_cmd), bh);
    snprintf(bindir, sizeof bindir, "%s/cache/%s-%.8s", c->base, sh, bh);
    snprintf(bin, sizeof bin, "%s/vtlab", bindir);
    snprintf(marker, sizeof marker, "%s/engine-built", bindir);
    snprintf(failed, sizeof failed, "%s/build-failed", bindir);
    if (lab_path_exists(failed)) {
        char why[300];
        lab_bx_log_tail(failed, why, sizeof why);
        snprintf(s->reason, sizeof s->reason, "%.500s", why);
        return LAB_OK;
    }
    int have_bin = c->default_build ? lab_path_exists(bin) : lab_path_exists(marker);
    int rc = lab_bx_worktree(c->repo, c->wt, c->shas[pos], c->default_build, c->log_git, c->pgid_file, err, errlen);
    if (rc) return rc;
    if (!have_bin) {
        if ((rc = build_candidate(c, pos, s, bindir, bin, marker, failed, err, errlen)) || s->reason[0]) return rc;
    }
    char exp_file[PATH_MAX + 64], exp_id[LAB_NAME_BUF + 16];
    exp_file_at(c, scale, exp_file, sizeof exp_file);
    exp_id_at(c, scale, exp_id, sizeof exp_id);
    snprintf(log, sizeof log, "%s/logs/%s.x%lld.run.log", c->work, sh, (long long)scale);
    const char *runner = c->default_build ? bin : c->self;
    const char *argv[] = {runner, "run", exp_file, "--arm", c->b.arm, "--db", c->db_abs, NULL};
    int status = 0;
    /* With --build the runner is this vtlab for every candidate: the tree's
     * commit goes into the runs' code version (VTLAB_TREE_REVISION,
     * provenance.c), or an engine that reports no commit of its own would
     * give every candidate the first one's identity, and its runs. */
    if (!c->default_build && setenv("VTLAB_TREE_REVISION", sh, 1)) return lab_oom(err, errlen);
    /* A candidate's vtlab runs from the build cache, outside its tree: its
     * shipped configs (an experiment's model.synth "model/configs/...") are
     * those of the commit's tree, the worktree (paths.h). */
    if (c->default_build && setenv("VTLAB_DATA_DIR", c->wt, 1)) return lab_oom(err, errlen);
    rc = lab_bx_run(argv, c->wt, NULL, log, c->pgid_file, &status, err, errlen);
    if (!c->default_build) unsetenv("VTLAB_TREE_REVISION");
    else unsetenv("VTLAB_DATA_DIR");
    if (rc) return rc;
    if (lab_interrupted) return lab_errf(err, errlen, LAB_EIO, "interrupted during the runs of %.12s", c->shas[pos]);
    /* what the run made (or found) */
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s|dirty=0|", sh);
    const lab_bisect_step *g = step_at(c, 0, scale);
    lab_bisect_found ga = {0}, arm = {0}, ref = {0};
    if (pos != 0 && g && g->arm_run_id > 0) {
        char gp[128];
        snprintf(gp, sizeof gp, "%s|dirty=0|", short_of(c, 0));
        if ((rc = lab_store_bisect_find_run(c->st, exp_id, c->b.arm, gp, NULL, NULL, &ga, err,
                                            errlen)))
            return rc;
    }
    const char *ds = ga.run_id ? ga.dataset_sha256 : NULL;
    rc = lab_store_bisect_find_run(c->st, exp_id, c->b.arm, prefix, NULL, ds, &arm, err, errlen);
    if (!rc && arm.run_id)
        rc = lab_store_bisect_find_run(c->st, exp_id, c->b.reference, prefix, NULL,
                                       arm.dataset_sha256, &ref, err, errlen);
    if (rc) return rc;
    if (!arm.run_id || !ref.run_id) {
        char tail[300];
        lab_bx_log_tail(log, tail, sizeof tail);
        snprintf(s->reason, sizeof s->reason, "run failed (vtlab run exit %d): %s", status, tail);
        return LAB_OK;
    }
    s->arm_run_id = arm.run_id;
    s->ref_run_id = ref.run_id;
    snprintf(s->logits_sha256, sizeof s->logits_sha256, "%s", arm.logits_sha256);
    return LAB_OK;
}

/* Evaluates commit pos at scale (nothing when a step is stored) and stores the step. */
static int evaluate(bctx *c, int64_t pos, int64_t scale, char *err, size_t errlen) {
    if (step_at(c, pos, scale)) return LAB_OK;
    int rc = write_scaled(c, scale, err, errlen);
    if (rc) return rc;
    lab_bisect_step s;
    memset(&s, 0, sizeof s);
    s.bisection_id = c->b.id;
    snprintf(s.commit, sizeof s.commit, "%s", c->shas[pos]);
    snprintf(s.subject, sizeof s.subject, "%s", c->subj[pos] ? c->subj[pos] : "");
    s.position = pos;
    s.scale = scale;
    s.p = s.p_bad = NAN;
    s.lo = s.hi = NAN;
    /* runs of this commit already in results.db, same identity: no build */
    char exp_id[LAB_NAME_BUF + 16], prefix[128], exact[700];
    exp_id_at(c, scale, exp_id, sizeof exp_id);
    snprintf(prefix, sizeof prefix, "%s|dirty=0|", short_of(c, pos));
    snprintf(exact, sizeof exact, "%s%s", prefix, c->code_suffix);
    lab_bisect_found arm = {0}, ref = {0}, ga = {0};
    const lab_bisect_step *g = step_at(c, 0, scale);
    if (c->default_build && pos != 0 && g && g->arm_run_id > 0) {
        char gp[128];
        snprintf(gp, sizeof gp, "%s|dirty=0|", short_of(c, 0));
        if ((rc = lab_store_bisect_find_run(c->st, exp_id, c->b.arm, gp, NULL, NULL, &ga, err, errlen))) return rc;
    }
    if (c->default_build) {
        rc = lab_store_bisect_find_run(c->st, exp_id, c->b.arm, prefix, exact, ga.run_id ? ga.dataset_sha256 : NULL,
                                       &arm, err, errlen);
        if (!rc && arm.run_id)
            rc = lab_store_bisect_find_run(c->st, exp_id, c->b.reference, prefix, exact, arm.dataset_sha256, &ref, err,
                                           errlen);
        if (rc) return rc;
    }
    const char *how = "runs reused";
    if (arm.run_id && ref.run_id) {
        s.arm_run_id = arm.run_id;
        s.ref_run_id = ref.run_id;
        snprintf(s.logits_sha256, sizeof s.logits_sha256, "%s", arm.logits_sha256);
    } else {
        if ((rc = build_and_run(c, pos, scale, &s, err, errlen))) return rc;
        how = s.built ? "built" : "cached build";
    }
    if (s.arm_run_id > 0) {
        if ((rc = classify(c, &s, err, errlen))) return rc;
    } else {
        snprintf(s.cls, sizeof s.cls, "skip");
    }
    lab_now_iso(s.at);
    if ((rc = lab_store_bisect_put_step(c->st, &s, c->b.builds, err, errlen))) return rc;
    lab_bisect_step *v = realloc(c->steps, (size_t)(c->nsteps + 1) * sizeof *v);
    if (!v) return lab_oom(err, errlen);
    c->steps = v;
    c->steps[c->nsteps++] = s;
    print_step(c, &s, how);
    return LAB_OK;
}

/* ------------------------------------------------------------ the search */

enum { K_UNKNOWN = 0, K_GOOD, K_BAD, K_SKIP, K_UNDECIDED_FINAL, K_UNDECIDED };

/* What the evidence says about pos: bad at any scale wins, then good. */
static int known(const bctx *c, int64_t pos) {
    int good = 0, bad = 0, skip = 0, und_max = 0, und = 0;
    for (int64_t i = 0; i < c->nsteps; i++) {
        const lab_bisect_step *s = &c->steps[i];
        if (s->position != pos) continue;
        bad |= !strcmp(s->cls, "bad");
        good |= !strcmp(s->cls, "good");
        skip |= !strcmp(s->cls, "skip");
        und |= !strcmp(s->cls, "undecided");
        und_max |= !strcmp(s->cls, "undecided") && s->scale >= c->b.max_scale;
    }
    if (bad) return K_BAD;
    if (good) return K_GOOD;
    if (skip) return K_SKIP;
    if (und_max) return K_UNDECIDED_FINAL;
    if (und) return K_UNDECIDED;
    return K_UNKNOWN;
}

static int64_t next_scale(const bctx *c) {
    int64_t s = c->b.scale * 2;
    return s <= c->b.max_scale && c->generated ? s : 0;
}

static void finish(bctx *c, const char *status, const char *msg) {
    snprintf(c->b.status, sizeof c->b.status, "%s", status);
    snprintf(c->b.message, sizeof c->b.message, "%s", msg);
    lab_now_iso(c->b.finished_at);
}

/* The evidence line of the step that made pos bad (the largest scale). */
static void evidence(const bctx *c, int64_t pos, const char *want, char *out, size_t len) {
    const lab_bisect_step *best = NULL;
    for (int64_t i = 0; i < c->nsteps; i++)
        if (c->steps[i].position == pos && !strcmp(c->steps[i].cls, want) && (!best || c->steps[i].scale > best->scale))
            best = &c->steps[i];
    if (!best) { out[0] = 0; return; }
    if (!strcmp(c->b.mode, "exact"))
        snprintf(out, len, "logits %.12s, the good end's differ", best->logits_sha256);
    else
        snprintf(out, len, "top1 %lld/%lld [%.3f, %.3f]%s%s; against the good end on the same %lld positions: %lld lost, "
                 "%lld gained, exact McNemar p = %.3g",
                 (long long)best->k, (long long)best->n, best->lo, best->hi, best->verdict[0] ? " " : "", best->verdict,
                 (long long)best->n, (long long)best->lost, (long long)best->gained, best->p);
}

/* One decision of the search: evaluates a commit, raises the scale, or
 * ends the bisection (*done). */
/* The bad end is not known bad at this scale: no regression (it is good),
 * a larger dataset (inside the noise), or, at the largest scale, undecided.
 * *done: the bisection ended. */
static int ends_not_apart(bctx *c, int64_t scale, const lab_bisect_step *be, int *done, char *err, size_t errlen) {
    char msg[1024];
    if (!strcmp(be->cls, "good")) {
        if (!strcmp(c->b.mode, "exact"))
            snprintf(msg, sizeof msg, "the arm's logits are the same at both ends (%.12s): nothing changed",
                     be->logits_sha256);
        else
            snprintf(msg, sizeof msg, "the bad end is not worse than the good end (top1 %lld/%lld -> %lld/%lld; "
                     "%lld lost, %lld gained, p = %.3g): no regression",
                     (long long)step_at(c, 0, scale)->k, (long long)step_at(c, 0, scale)->n, (long long)be->k,
                     (long long)be->n, (long long)be->lost, (long long)be->gained, be->p);
        finish(c, "NONE", msg);
        *done = 1;
        return LAB_OK;
    }
    int64_t ns = next_scale(c);
    if (ns) {
        fprintf(c->out, "  the ends differ inside the noise at x%lld: the dataset grows to x%lld\n", (long long)scale,
                (long long)ns);
        c->b.scale = ns;
        return lab_store_bisect_update(c->st, &c->b, err, errlen);
    }
    snprintf(msg, sizeof msg, "the bad end's difference from the good end is inside the noise (%lld lost, %lld gained, "
             "p = %.3g at x%lld, alpha %.3g): no culprit can be named; the range is the whole of %.12s..%.12s",
             (long long)be->lost, (long long)be->gained, be->p, (long long)scale, c->b.alpha, c->shas[0],
             c->shas[c->n]);
    snprintf(c->b.range_good, sizeof c->b.range_good, "%s", c->shas[0]);
    snprintf(c->b.range_bad, sizeof c->b.range_bad, "%s", c->shas[c->n]);
    finish(c, "UNDECIDED", msg);
    *done = 1;
    return LAB_OK;
}

/* Nothing left to evaluate between the last good lo and the first bad hi:
 * the first bad commit (adjacent) or the range the evidence supports. */
static void conclude(bctx *c, int64_t lo, int64_t hi) {
    char msg[1024];
    snprintf(c->b.range_good, sizeof c->b.range_good, "%s", c->shas[lo]);
    snprintf(c->b.range_bad, sizeof c->b.range_bad, "%s", c->shas[hi]);
    char ev[512];
    evidence(c, hi, "bad", ev, sizeof ev);
    if (hi - lo == 1) {
        snprintf(c->b.first_bad, sizeof c->b.first_bad, "%s", c->shas[hi]);
        snprintf(msg, sizeof msg, "first bad commit %.12s \"%.80s\": %s; its parent %.12s is good", c->shas[hi],
                 c->subj[hi] ? c->subj[hi] : "", ev, c->shas[lo]);
        finish(c, "FOUND", msg);
    } else {
        int64_t nskip = 0, nund = 0;
        for (int64_t p = lo + 1; p < hi; p++) {
            nskip += known(c, p) == K_SKIP;
            nund += known(c, p) == K_UNDECIDED_FINAL;
        }
        snprintf(msg, sizeof msg, "the first bad commit is one of the %lld after %.12s up to %.12s (%lld skipped: "
                 "no build or run; %lld undecided: inside the noise at x%lld); %.12s: %s",
                 (long long)(hi - lo), c->shas[lo], c->shas[hi], (long long)nskip, (long long)nund,
                 (long long)c->b.max_scale, c->shas[hi], ev);
        finish(c, "RANGE", msg);
    }
}

static int search_step(bctx *c, int *done, char *err, size_t errlen) {
    *done = 0;
    int64_t scale = c->b.scale;
    char msg[1024];
    /* the ends, at the current scale */
    if (!step_at(c, 0, scale)) return evaluate(c, 0, scale, err, errlen);
    if (strcmp(step_at(c, 0, scale)->cls, "good")) {
        snprintf(msg, sizeof msg, "the good end %.12s cannot be evaluated (%s)", c->shas[0], step_at(c, 0, scale)->reason);
        finish(c, "FAILED", msg);
        *done = 1;
        return LAB_OK;
    }
    if (!step_at(c, c->n, scale)) return evaluate(c, c->n, scale, err, errlen);
    const lab_bisect_step *be = step_at(c, c->n, scale);
    if (!strcmp(be->cls, "skip")) {
        snprintf(msg, sizeof msg, "the bad end %.12s cannot be evaluated (%s)", c->shas[c->n], be->reason);
        finish(c, "FAILED", msg);
        *done = 1;
        return LAB_OK;
    }
    if (known(c, c->n) != K_BAD) return ends_not_apart(c, scale, be, done, err, errlen);
    /* the boundaries: the first bad, the last good before it */
    int64_t hi = c->n, lo = 0;
    for (int64_t p = 1; p <= c->n; p++)
        if (known(c, p) == K_BAD) { hi = p; break; }
    for (int64_t p = hi - 1; p > 0; p--)
        if (known(c, p) == K_GOOD) { lo = p; break; }
    int64_t pick = -1;
    double mid = (double)(lo + hi) / 2.0, best = 1e300;
    for (int64_t p = lo + 1; p < hi; p++) {
        int k = known(c, p);
        if (k == K_SKIP || k == K_UNDECIDED_FINAL) continue;
        double d = fabs((double)p - mid);
        if (d < best) { best = d; pick = p; }
    }
    if (pick < 0) {
        conclude(c, lo, hi);
        *done = 1;
        return LAB_OK;
    }
    const lab_bisect_step *cur = step_at(c, pick, scale);
    if (cur && !strcmp(cur->cls, "undecided")) {
        int64_t ns = next_scale(c);
        if (ns) {
            fprintf(c->out, "  %.12s is inside the noise at x%lld: the dataset grows to x%lld\n", c->shas[pick],
                    (long long)scale, (long long)ns);
            c->b.scale = ns;
            return lab_store_bisect_update(c->st, &c->b, err, errlen);
        }
        /* unreachable: at the largest scale an undecided commit is final (known) and never picked */
        return lab_errf(err, errlen, LAB_EINTERNAL, "bisection %lld: undecided %.12s picked again at x%lld",
                        (long long)c->b.id, c->shas[pick], (long long)scale);
    }
    return evaluate(c, pick, scale, err, errlen);
}

/* ------------------------------------------------------------ set-up */

static int abs_path(const char *p, char *out, size_t len, char *err, size_t errlen) {
    if (p[0] == '/') { snprintf(out, len, "%s", p); return LAB_OK; }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return lab_errf(err, errlen, LAB_EIO, "getcwd: %s", strerror(errno));
    snprintf(out, len, "%.2000s/%.2000s", cwd, p);
    return LAB_OK;
}

static int file_sha256(const char *path, char out[65], char *err, size_t errlen) {
    return vt_sha256_file(path, out, err, errlen) ? lab_errf(err, errlen, LAB_EINPUT, "%s: cannot read", path) : LAB_OK;
}

/* Everything that is bad input, checked before the database is opened. */
static int prepare(bctx *c, char *err, size_t errlen) {
    const lab_bisect_opts *o = c->o;
    if (!o->experiment) return lab_errf(err, errlen, LAB_EINPUT, "expected one EXPERIMENT.json");
    if (!o->arm) return lab_errf(err, errlen, LAB_EINPUT, "--arm NAME is required (the arm that regressed)");
    if (!o->good || !o->bad) return lab_errf(err, errlen, LAB_EINPUT, "--good REV and --bad REV are required");
    int rc = lab_experiment_load(&c->e, o->experiment, err, errlen);
    if (rc) return rc;
    int64_t ai = lab_experiment_arm(c->e, o->arm);
    if (ai < 0) return lab_errf(err, errlen, LAB_EINPUT, "%s: no arm named \"%s\"", o->experiment, o->arm);
    if (ai == c->e->ref_index)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"%s\" is the reference arm; bisect an arm compared with it",
                        o->experiment, o->arm);
    c->generated = c->e->ds.kind == LAB_DS_GENERATE;
    if ((rc = abs_path(o->experiment, c->exp_abs, sizeof c->exp_abs, err, errlen))) return rc;
    int dirty = 0;
    if ((rc = lab_bx_git_repo(o->repo, c->repo, sizeof c->repo, &dirty, err, errlen))) return rc;
    if (dirty && !o->allow_dirty)
        return lab_errf(err, errlen, LAB_EINPUT,
                        "%s: the repository has uncommitted changes; bisect looks at commits only (commit or stash "
                        "them, or pass --allow-dirty)",
                        c->repo);
    char good[41], bad[41];
    if ((rc = lab_bx_git_commit(c->repo, o->good, good, err, errlen))) return rc;
    if ((rc = lab_bx_git_commit(c->repo, o->bad, bad, err, errlen))) return rc;
    if ((rc = lab_bx_git_range(c->repo, good, bad, &c->shas, &c->subj, &c->n, err, errlen))) return rc;
    if (!(c->shortid = calloc((size_t)c->n + 1, sizeof *c->shortid))) return lab_oom(err, errlen);
    if (o->max_scale < 1 || o->max_scale > 1024)
        return lab_errf(err, errlen, LAB_EINPUT, "--max-scale must be 1..1024");
    if (!(o->alpha > 0 && o->alpha < 1)) return lab_errf(err, errlen, LAB_EINPUT, "--alpha must be in (0, 1)");
    if ((rc = abs_path(o->db_path, c->db_abs, sizeof c->db_abs, err, errlen))) return rc;
    ssize_t l = readlink("/proc/self/exe", c->self, sizeof c->self - 1);
    c->self[l > 0 ? l : 0] = 0;
    const char *bi = vt_build_info(), *d = strstr(bi, "|dirty=");
    const char *suf = d ? strchr(d + 1, '|') : NULL;
    snprintf(c->code_suffix, sizeof c->code_suffix, "%s", suf ? suf + 1 : "");
    c->default_build = o->build_cmd == NULL;
    /* the bisection's defining fields */
    lab_bisection *b = &c->b;
    memset(b, 0, sizeof *b);
    snprintf(b->experiment, sizeof b->experiment, "%s", c->e->id);
    snprintf(b->arm, sizeof b->arm, "%s", o->arm);
    snprintf(b->reference, sizeof b->reference, "%s", c->e->arms[c->e->ref_index].name);
    snprintf(b->experiment_file, sizeof b->experiment_file, "%.1000s", c->exp_abs);
    if ((rc = file_sha256(c->exp_abs, b->experiment_sha256, err, errlen))) return rc;
    snprintf(b->repo, sizeof b->repo, "%.1000s", c->repo);
    snprintf(b->good_rev, sizeof b->good_rev, "%s", o->good);
    snprintf(b->bad_rev, sizeof b->bad_rev, "%s", o->bad);
    memcpy(b->good_commit, good, 41);
    memcpy(b->bad_commit, bad, 41);
    b->n_commits = c->n;
    snprintf(b->mode, sizeof b->mode, "%s", o->exact ? "exact" : "stats");
    b->alpha = o->alpha;
    b->max_scale = c->generated ? o->max_scale : 1;
    b->scale = 1;
    snprintf(b->build_cmd, sizeof b->build_cmd, "%s", o->build_cmd ? o->build_cmd : LAB_BISECT_DEFAULT_BUILD);
    b->nightly_id = o->nightly_id;
    char keytext[8192];
    snprintf(keytext, sizeof keytext, "%s\n%s\n%s\n%s\n%s\n%s\n%.6g\n%lld\n%s\n%s", b->experiment_sha256, b->arm,
             b->repo, good, bad, b->mode, b->alpha, (long long)b->max_scale, b->build_cmd, c->db_abs);
    vt_sha256_hex(keytext, strlen(keytext), b->key);
    lab_now_iso(b->started_at);
    return LAB_OK;
}

static int open_work(bctx *c, char *err, size_t errlen) {
    char *base = c->base;
    int rc = abs_path(c->o->workdir ? c->o->workdir : LAB_BISECT_DEFAULT_WORKDIR, base, sizeof c->base, err, errlen);
    if (rc) return rc;
    /* named by the key: two databases' bisections never share a directory */
    snprintf(c->work, sizeof c->work, "%.*s/%.16s", PATH_MAX - 40, base, c->b.key);
    char logs[PATH_MAX + 16];
    snprintf(logs, sizeof logs, "%s/logs", c->work);
    if ((rc = lab_mkdirs(logs, err, errlen))) return rc;
    snprintf(c->wt, sizeof c->wt, "%.*s/wt", PATH_MAX - 8, c->work);
    snprintf(c->pgid_file, sizeof c->pgid_file, "%s/child.pgid", c->work);
    snprintf(c->log_git, sizeof c->log_git, "%s/logs/git.log", c->work);
    char lock[PATH_MAX + 16];
    snprintf(lock, sizeof lock, "%s/lock", c->work);
    c->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lock_fd < 0) return lab_errf(err, errlen, LAB_EIO, "%s: %s", lock, strerror(errno));
    if (flock(c->lock_fd, LOCK_EX | LOCK_NB))
        return lab_errf(err, errlen, LAB_EIO, "bisection %lld is being worked on by another vtlab bisect (%s is locked)",
                        (long long)c->b.id, lock);
    lab_bx_reap_orphans(c->pgid_file);   /* a killed bisection's build or run */
    return LAB_OK;
}

void lab_bisect_result_line(const lab_bisection *b, char *out, size_t len) {
    if (!strcmp(b->status, "FOUND"))
        snprintf(out, len, "culprit %.12s: %s", b->first_bad, b->message);
    else
        snprintf(out, len, "%s: %s", b->status, b->message[0] ? b->message : "(in progress)");
}

static void bctx_free(bctx *c) {
    lab_experiment_free(c->e);
    for (int64_t i = 0; c->subj && i <= c->n; i++) free(c->subj[i]);
    free(c->subj);
    free(c->shas);
    free(c->shortid);
    free(c->steps);
    if (c->st) lab_store_close(c->st);
    if (c->lock_fd > 0) close(c->lock_fd);
}

int lab_bisect_run(const lab_bisect_opts *o, FILE *out, lab_bisection *res, char *err, size_t errlen) {
    bctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.out = out;
    c.lock_fd = -1;
    int rc = prepare(&c, err, errlen);
    if (!rc) rc = lab_store_open(&c.st, c.db_abs, err, errlen);
    int found = 0;
    lab_bisection prev;
    if (!rc) rc = lab_store_bisect_find(c.st, c.b.key, &prev, &found, err, errlen);
    if (!rc && found) {
        int64_t nightly = c.b.nightly_id;
        c.b = prev;
        if (nightly > 0 && !c.b.nightly_id) c.b.nightly_id = nightly;
    } else if (!rc) {
        rc = lab_store_bisect_insert(c.st, &c.b, err, errlen);
    }
    if (!rc) rc = lab_store_bisect_steps(c.st, c.b.id, &c.steps, &c.nsteps, err, errlen);
    if (!rc) {
        fprintf(out, "bisection %lld: %s/%s, %lld commit(s) after %.12s up to %.12s (%s mode, alpha %.3g, dataset up to x%lld)%s\n",
                (long long)c.b.id, c.b.experiment, c.b.arm, (long long)c.n, c.shas[0], c.shas[c.n], c.b.mode, c.b.alpha,
                (long long)c.b.max_scale, found ? (strcmp(c.b.status, "RUNNING") ? ", finished earlier" : ", resumed") : "");
        for (int64_t i = 0; i < c.nsteps; i++) print_step(&c, &c.steps[i], "stored");
    }
    if (!rc && !strcmp(c.b.status, "RUNNING")) {
        rc = open_work(&c, err, errlen);
        lab_install_signals();
        for (int done = 0; !rc && !done && !lab_interrupted;) rc = search_step(&c, &done, err, errlen);
        if (!rc && !lab_interrupted) {
            rc = lab_store_bisect_update(c.st, &c.b, err, errlen);
            if (!o->keep_worktree) lab_bx_worktree_remove(c.repo, c.wt, c.log_git);
        } else if (c.st) {
            char e2[256];
            lab_store_bisect_update(c.st, &c.b, e2, sizeof e2);   /* the build count so far */
        }
    }
    if (!rc && strcmp(c.b.status, "RUNNING")) {
        char line[1400];
        lab_bisect_result_line(&c.b, line, sizeof line);
        fprintf(out, "result: %s\nbuilds: %lld (bound for %lld commits: ceil(log2 %lld) + 2 = %d)\n", line,
                (long long)c.b.builds, (long long)c.n, (long long)c.n, (int)ceil(log2((double)(c.n > 1 ? c.n : 1))) + 2);
    }
    if (res) *res = c.b;
    bctx_free(&c);
    return rc;
}

int lab_bisect_cmd(const lab_bisect_opts *o) {
    char err[2048] = "";
    lab_bisection b;
    memset(&b, 0, sizeof b);
    int rc = lab_bisect_run(o, stdout, &b, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab bisect: %s\n", err);
        return lab_exit_code(rc);
    }
    if (lab_interrupted || !strcmp(b.status, "RUNNING")) {
        fprintf(stderr, "vtlab bisect: interrupted; the same command resumes bisection %lld\n", (long long)b.id);
        return 1;
    }
    return strcmp(b.status, "FAILED") ? 0 : 1;
}
