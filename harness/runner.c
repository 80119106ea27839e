/*
 * runner.c — the per-experiment loop (see runner.h): validate everything
 * first, then the reference arm's runs first and each other arm's after,
 * leasing each run (another live process's run is waited for, a
 * FINISHED one skipped), executing it through the engine and recording it.
 *
 * The pieces it drives live beside it:
 *   model_cache.c    the model directory (synthetic models built once);
 *   engine.h         the engine seam (engine_builtin.c: model/vt.h);
 *   provenance.c     identity, hashes, provenance, knob resolution;
 *   run_forward.c    one forward pass: record, fill or compare;
 *   run_record.c     a pass turned into the rows of a run;
 *   store_runs.c     the one read of a run this file needs.
 *
 * Exit-status policy (lab.c maps it): bad input, including a backend this
 * machine does not have, -> 2 before the database is opened; a FAILED/KILLED
 * run, or an arm whose assertion outcome differs from its
 * `expect_assertions`, counts as a check failure -> 1.
 */
#include "runner.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "metrics.h"
#include "run_forward.h"
#include "run_record.h"
#include "store.h"
#include "store_annot.h"
#include "store_runs.h"
#include "util.h"

extern char **environ;

/* How long a run waits for runs held by another live process (seconds). */
#define LAB_WAIT_MAX_S 1800

typedef struct exp_ctx {
    const lab_experiment *e;
    const lab_run_opts   *o;
    const lab_run_more   *m;           /* never NULL (a zero one for plain runs) */
    lab_run_summary      *sum;
    lab_store            *st;
    lab_engine           *engs;        /* [n_arms] each arm's engine; builtin arms share one model */
    void                 *builtin;     /* the builtin engine's model, when an arm uses it */
    vt_knobset          **ks;          /* [n_arms] a builtin arm's resolved knobs; NULL for a command */
    lab_engine_req       *req;         /* [n_arms] what each arm asks of its engine */
    lab_engine_hello     *hello;       /* [n_arms] what each arm's engine said */
    lab_exp_ident         id;
    lab_ref_cache         ref;
    int                   ref_failed;  /* this process's reference run failed */
    uint8_t              *tried;       /* [n_arms * repeats] done (or given up) by this process */
    int64_t              *arm_run;     /* [n_arms] FINISHED run of repeat 0, for pair tests */
    int                   any_new, busy_noted;
    int                   partial;     /* --limit cut the dataset: runs are stored PARTIAL */
    /* --shard: the whole dataset, kept while e->ds is the shard's view */
    int64_t              *full_offsets, full_n_seq, full_n_tokens, full_n_scored;
    int32_t              *full_tokens;
    lab_shard_info        shard;
} exp_ctx;

/* Makes the reference cache ready: recomputes the FINISHED reference run
 * (repeat 0) when this process did not run it. Not ready afterwards (and
 * LAB_OK): there is none. */
static int ensure_reference(exp_ctx *x, lab_progress *pg, char *err, size_t errlen) {
    if (x->ref.ready) return LAB_OK;
    const lab_experiment *e = x->e;
    lab_identity id;
    lab_exp_identity(&x->id, e, e->ref_index, 0, &id);
    int64_t rid = 0;
    char stored[65];
    int rc = lab_store_find_finished(x->st, &id, &rid, stored, err, errlen);
    if (rc || !rid) return rc;
    lab_pass_acc acc = {0};
    int killed = 0;
    char label[160];
    snprintf(label, sizeof label, "%s/%s (reference, recomputed)", e->id, e->arms[e->ref_index].name);
    lab_progress_start(pg, label);
    rc = lab_forward_pass(e, &x->engs[e->ref_index], &x->req[e->ref_index], LAB_PASS_FILL_REF, &x->ref, &acc, pg, &killed, err,
                          errlen);
    lab_progress_end(pg);
    x->sum->forward_s += acc.forward_s;
    if (!rc) {
        x->ref.run_id = rid;
        x->ref.recomputed = 1;
        x->ref.hash_match = !strcmp(stored, acc.hash_hex);
        if (!x->ref.hash_match)
            fprintf(stderr, "vtlab: %s: warning: the recomputed reference logits (run %lld) differ from the stored "
                            "hash; comparisons record reference_hash_match = 0\n", e->path, (long long)rid);
    }
    lab_pass_acc_free(&acc);
    return rc;
}

/* The FINISHED line of a run on stdout. */
static void print_finished(int64_t run_id, const char *label, const lab_run_record *rec, int compare) {
    const lab_comparison *c = &rec->cmp;
    printf("run %-4lld %-34s FINISHED  %s", (long long)run_id, label, rec->ok ? "assertions ok" : "ASSERTIONS FAILED");
    if (compare)
        printf("  top1 %lld/%lld [%.3f, %.3f]  KL %.3g%s%s", (long long)c->top1_k, (long long)c->top1_n, c->top1_lo,
               c->top1_hi, c->kl_mean, *rec->vr.verdict ? "  " : "", rec->vr.verdict);
    if (compare && c->first_div_layer >= 0)
        printf("  diverges at layer %lld %s", (long long)c->first_div_layer, c->first_div_site ? "ffn" : "attn");
    printf("\n");
    if (!rec->ok) printf("          %s\n", rec->reason.data);
    fflush(stdout);
}

/* Records that run_id ended as status (FAILED, KILLED) and prints its line.
 * When even that cannot be written (a full disk), the line and stderr say
 * so: the screen must not claim what results.db does not hold (the run stays
 * RUNNING there, and the next command that leases it marks it KILLED and
 * redoes it). Returns the store's status; err then holds why. */
static int record_unfinished(exp_ctx *x, int64_t run_id, const char *label, const char *status, const char *why,
                             char *err, size_t errlen) {
    /* test hook (tests/cli/test_reliability_store.sh): the store refuses this
     * write as a full disk would, which a real tmpfs does only by chance */
    int rc = getenv("VTLAB_TEST_UNRECORDED")
                 ? lab_errf(err, errlen, LAB_EIO, "%s: the disk is full (VTLAB_TEST_UNRECORDED)", x->o->db_path)
                 : lab_store_abort(x->st, run_id, status, why, err, errlen);
    if (!rc) {
        printf("run %-4lld %-34s %s  %s\n", (long long)run_id, label, status, why);
        return LAB_OK;
    }
    printf("run %-4lld %-34s %s (not recorded)  %s\n", (long long)run_id, label, status, why);
    char cause[512];
    snprintf(cause, sizeof cause, "%s", err);
    lab_errf(err, errlen, rc, "run %lld (%s): could not record %s: %s; the run stays RUNNING in %s and the next "
             "command will mark it KILLED", (long long)run_id, label, status, cause, x->o->db_path);
    return rc;
}

/* Writes the rows of a finished pass. Returns LAB_OK, or the store's
 * status when the database failed (the run is then marked FAILED, best
 * effort: the database may be what failed). */
static int record_run(exp_ctx *x, int64_t arm, int64_t run_id, const char *label, const lab_pass_acc *acc,
                      lab_run_record *rec, int compare, double t0, int *assert_ok, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    lab_run_result res;
    /* a reference repeat is compared with repeat 0 (repeatability) but gets no verdict */
    int with_verdict = compare && arm != e->ref_index && e->has_decision;
    lab_run_result_fill(&res, e, arm, x->engs[arm].info.vocab, acc, rec, compare, with_verdict);
    res.wall_s = lab_mono() - t0;
    res.partial = x->partial;
    lab_shard_info sh = x->shard;
    if (x->full_offsets) {
        sh.n_layers = x->engs[arm].info.n_layers;
        sh.probes_lost = acc->probes_lost;
        res.shard = &sh;
    }
    int rc = lab_store_finish(x->st, run_id, &res, err, errlen);
    if (rc) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        x->sum->runs_failed++;
        int arc = record_unfinished(x, run_id, label, "FAILED", why, err, errlen);
        if (!arc) snprintf(err, errlen, "%s", why);
        return rc;
    }
    *assert_ok = rec->ok;
    x->sum->runs_done++;
    print_finished(run_id, label, rec, compare);
    return LAB_OK;
}

/* Executes one leased run and records it as FINISHED, FAILED or KILLED.
 * Returns LAB_OK when the outcome was recorded; another status only when
 * the database itself failed (err filled). */
static int execute_run(exp_ctx *x, int64_t arm, int64_t rep, int64_t run_id, int *finished, int *assert_ok,
                       char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const lab_arm *a = &e->arms[arm];
    int fill = arm == e->ref_index && rep == 0, compare = !fill, killed = 0, rc;
    double t0 = lab_mono();
    char rerr[1024] = "", label[160];
    const char *status = "FAILED";
    lab_pass_acc acc = {0};
    lab_run_record rec = {0};
    *finished = 0;
    *assert_ok = 1;
    if (e->repeats > 1) snprintf(label, sizeof label, "%s/%s #%lld", e->id, a->name, (long long)rep);
    else snprintf(label, sizeof label, "%s/%s", e->id, a->name);
    if (*x->id.shard) snprintf(label + strlen(label), sizeof label - strlen(label), " [%s]", x->id.shard);
    lab_progress pgs = {x->o->progress, label, lab_mono(), e->ds.offsets[e->ds.n_seq], 0, 0, 0};
    lab_progress *pg = x->o->progress ? &pgs : NULL;
    if (!fill && (rc = ensure_reference(x, pg, rerr, sizeof rerr))) {
        if (lab_interrupted) status = "KILLED";   /* Ctrl-C while the reference was recomputed */
        goto failed;
    }
    /* Every run but the reference's repeat 0 is compared with it: without
     * the reference there is nothing to finish (run_pass waits for it). */
    if (!fill && !x->ref.ready) {
        snprintf(rerr, sizeof rerr, "no FINISHED reference run (%s, repeat 0) to compare with",
                 e->arms[e->ref_index].name);
        goto failed;
    }
    lab_progress_start(pg, label);
    int flags = LAB_PASS_RECORD | (fill ? LAB_PASS_FILL_REF : 0) | (compare ? LAB_PASS_COMPARE : 0);
    rc = lab_forward_pass(e, &x->engs[arm], &x->req[arm], flags, &x->ref, &acc, pg, &killed, rerr, sizeof rerr);
    lab_progress_end(&pgs);
    x->sum->forward_s += acc.forward_s;
    if (rc) {
        if (killed) status = "KILLED";
        goto failed;
    }
    if (fill) {
        x->ref.run_id = run_id;
        x->ref.recomputed = 0;
        x->ref.hash_match = -1;
    }
    if (lab_run_record_build(e, arm, &x->req[arm], &x->hello[arm], &acc, compare ? &x->ref : NULL,
                             x->engs[arm].info.n_layers, &rec, rerr, sizeof rerr))
        goto failed;
    rc = record_run(x, arm, run_id, label, &acc, &rec, compare, t0, assert_ok, err, errlen);
    *finished = rc == LAB_OK;
    lab_run_record_free(&rec);
    lab_pass_acc_free(&acc);
    return rc;
failed:
    lab_run_record_free(&rec);
    lab_pass_acc_free(&acc);
    x->sum->runs_failed++;
    fprintf(stderr, "vtlab: %s: arm %s: run %lld %s: %s\n", e->path, a->name, (long long)run_id, status, rerr);
    return record_unfinished(x, run_id, label, status, rerr, err, errlen);
}

/* McNemar between each pair of non-reference arms (repeat 0), on agreement
 * with the reference's top-1 at the same positions. */
static int pair_tests(exp_ctx *x, char *err, size_t errlen) {
    const int64_t *arm_run = x->arm_run;
    const lab_experiment *e = x->e;
    if (!(e->metrics & LAB_M_MCNEMAR) || !x->ref.run_id) return LAB_OK;
    int32_t *ref = NULL;
    int64_t nr = 0;
    int rc = lab_store_top1(x->st, x->ref.run_id, &ref, &nr, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < e->n_arms && !rc; i++) {
        if (i == e->ref_index || !arm_run[i]) continue;
        int32_t *ai = NULL;
        int64_t na = 0;
        if ((rc = lab_store_top1(x->st, arm_run[i], &ai, &na, err, errlen))) break;
        for (int64_t j = i + 1; j < e->n_arms && !rc; j++) {
            if (j == e->ref_index || !arm_run[j]) continue;
            int32_t *aj = NULL;
            int64_t nj = 0;
            if ((rc = lab_store_top1(x->st, arm_run[j], &aj, &nj, err, errlen))) break;
            if (na == nr && nj == nr) {
                int64_t b = 0, c = 0;
                for (int64_t p = 0; p < nr; p++) {
                    int ri = ai[p] == ref[p], rj = aj[p] == ref[p];
                    b += ri && !rj;
                    c += !ri && rj;
                }
                rc = lab_store_put_pair_test(x->st, arm_run[i], arm_run[j], x->ref.run_id, nr, b, c,
                                             lab_mcnemar_exact(b, c), err, errlen);
            }
            free(aj);
        }
        free(ai);
    }
    free(ref);
    return rc;
}

/* Whether run (arm, rep), which is compared with the reference's repeat 0,
 * can start: 1 yes; 0 no and it was given up (the reference failed here);
 * -1 no, another process holds the reference (counted in *busy); or an
 * error status in *rc. */
static int reference_available(exp_ctx *x, int64_t arm, int64_t rep, int *busy, int *rc, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    if (x->ref.ready || x->ref.run_id) return 1;
    if (x->ref_failed) {
        x->tried[arm * e->repeats + rep] = 1;
        x->sum->runs_failed++;
        fprintf(stderr, "vtlab: %s: arm %s repeat %lld not run: the reference arm %s failed\n", e->path,
                e->arms[arm].name, (long long)rep, e->arms[e->ref_index].name);
        return 0;
    }
    lab_identity rid;
    int64_t rrun = 0;
    lab_exp_identity(&x->id, e, e->ref_index, 0, &rid);
    if ((*rc = lab_store_find_finished(x->st, &rid, &rrun, NULL, err, errlen))) return 0;
    if (!rrun) { (*busy)++; return -1; }
    return 1;
}

/* Whether run (arm, rep) is one `vtlab rerun` asked for. */
static int is_rerun(const exp_ctx *x, int64_t arm, int64_t rep) {
    const lab_run_more *m = x->m;
    return m->rerun_of && m->rerun_of[arm] > 0 && m->rerun_rep[arm] == rep;
}

/* Whether run_pass does run (arm, rep): every run of the arm --arm names (or
 * of every arm), and the reference's; under `vtlab rerun` the runs asked for
 * and the reference's repeat 0 (found FINISHED, or run). */
static int wanted(const exp_ctx *x, int64_t arm, int64_t rep) {
    const lab_experiment *e = x->e;
    const lab_run_opts *o = x->o;
    if (x->m->rerun_of) return is_rerun(x, arm, rep) || (arm == e->ref_index && rep == 0);
    return !o->only_arm || arm == e->ref_index || !strcmp(e->arms[arm].name, o->only_arm);
}

/* Claims run (arm, rep): *kind LAB_LEASED, LAB_LEASE_DONE or LAB_LEASE_BUSY (see
 * lab_store_lease_ex), saying on stderr what it found left behind. */
static int lease_run(exp_ctx *x, int64_t arm, int64_t rep, lab_provenance *pv, int *kind, int64_t *run_id,
                     char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const lab_arm *a = &e->arms[arm];
    lab_identity id;
    lab_exp_identity(&x->id, e, arm, rep, &id);
    pv->is_reference = arm == e->ref_index;
    pv->backend = x->ks[arm] ? vt_knobset_value(x->ks[arm], VT_K_BACKEND) : x->hello[arm].backend;
    pv->device = x->ks[arm] ? x->id.device : x->hello[arm].device;
    pv->engine_hello = x->hello[arm].json;
    pv->expected_assertions = a->expect_fail ? "fail" : "pass";
    pv->layer_kinds = x->engs[arm].info.layer_kinds;
    /* a rerun is run even when its identity has a FINISHED run: that run is
     * usually the very one it repeats */
    int rerun = is_rerun(x, arm, rep);
    int64_t stale = 0, redone = 0;
    int rc = lab_store_lease_ex(x->st, &id, pv, x->o->force || rerun, kind, run_id, &stale, &redone, err, errlen);
    if (!rc && rerun && *kind == LAB_LEASED) rc = lab_store_set_rerun_of(x->st, *run_id, x->m->rerun_of[arm], err, errlen);
    if (rc) return rc;
    if (redone) {
        x->sum->stale_redone++;
        fprintf(stderr, "vtlab: run %lld (%s/%s #%lld) was FINISHED but incomplete: marked FAILED, redoing\n",
                (long long)redone, e->id, a->name, (long long)rep);
    }
    if (stale) {
        x->sum->stale_redone++;
        fprintf(stderr, "vtlab: run %lld (%s/%s) was left RUNNING by a dead process: marked KILLED, redoing\n",
                (long long)stale, e->id, a->name);
    }
    if (*kind == LAB_LEASE_BUSY && !x->busy_noted) {
        x->busy_noted = 1;
        fprintf(stderr, "vtlab: %s/%s: run %lld is being run by another process; waiting for it\n", e->id, a->name,
                (long long)*run_id);
    }
    return LAB_OK;
}

/* A run found FINISHED with this identity: skipped, but its recorded
 * assertion outcome still counts toward the exit status. A failed read
 * must not count as "assertions passed": for a replay arm that would be
 * reported as an unexpected outcome (and the sweep exit 1). */
static int skip_finished(exp_ctx *x, int64_t arm, int64_t run_id, int *assert_ok, char *err, size_t errlen) {
    x->sum->runs_skipped++;
    int rc = lab_store_run_assertions(x->st, run_id, assert_ok, err, errlen);
    if (rc) return rc;
    printf("run %-4lld %s/%s: already FINISHED with this identity, skipped (--force reruns it)\n", (long long)run_id,
           x->e->id, x->e->arms[arm].name);
    return LAB_OK;
}

/* Run (arm, rep) in one pass: wait, skip or execute, then account. */
static int one_run(exp_ctx *x, int64_t arm, int64_t rep, lab_provenance *pv, int *busy, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const lab_arm *a = &e->arms[arm];
    int is_ref = arm == e->ref_index, rc = LAB_OK, kind = 0, assert_ok = 1, finished = 0;
    int64_t run_id = 0;
    /* Every run but the reference's repeat 0 (a non-reference arm, or a
     * repeat of the reference) is compared with the FINISHED reference
     * repeat 0: while another process holds that run, wait for it. */
    if (!(is_ref && rep == 0) && reference_available(x, arm, rep, busy, &rc, err, errlen) != 1) return rc;
    if ((rc = lease_run(x, arm, rep, pv, &kind, &run_id, err, errlen))) return rc;
    if (kind == LAB_LEASE_BUSY) {
        (*busy)++;
        return LAB_OK;
    }
    x->tried[arm * e->repeats + rep] = 1;
    if (kind == LAB_LEASE_DONE) {
        if ((rc = skip_finished(x, arm, run_id, &assert_ok, err, errlen))) return rc;
        finished = 1;
    } else {
        x->any_new = 1;
        if ((rc = execute_run(x, arm, rep, run_id, &finished, &assert_ok, err, errlen))) return rc;
        if (!finished && is_ref && rep == 0) x->ref_failed = 1;
    }
    if (finished && (assert_ok == a->expect_fail)) {
        x->sum->check_failures++;
        fprintf(stderr, "vtlab: %s: arm %s: runtime assertions %s, but the arm expects them to %s\n", e->path, a->name,
                assert_ok ? "passed" : "failed", a->expect_fail ? "fail" : "pass");
    }
    if (finished && rep == 0) x->arm_run[arm] = run_id;
    if (finished && is_ref && rep == 0 && !x->ref.ready) x->ref.run_id = run_id;
    return LAB_OK;
}

/* One pass over the runs of the experiment. *busy counts runs this pass
 * could not do because another live process holds them (or holds the
 * reference they need); the caller waits and passes again. x->tried marks
 * what this process already did, so a retry pass (and --force) never redoes
 * its own work. */
static int run_pass(exp_ctx *x, int *busy, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    lab_provenance pv;
    lab_exp_provenance(&x->id, e, &pv);
    *busy = 0;
    int rc = LAB_OK;
    /* The reference arm first, then the others in file order. */
    for (int64_t k = 0; k < e->n_arms && !rc; k++) {
        int64_t arm = k == 0 ? e->ref_index : (k <= e->ref_index ? k - 1 : k);
        for (int64_t rep = 0; rep < e->repeats && !rc; rep++) {
            if (x->tried[arm * e->repeats + rep] || !wanted(x, arm, rep)) continue;
            if (lab_interrupted) return lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal");
            rc = one_run(x, arm, rep, &pv, busy, err, errlen);
        }
    }
    return rc;
}

/* Opens an engine instance for every arm, so that a backend this machine
 * does not have, an engine that does not start or says a bad hello, or a
 * knob the engine does not declare is bad input found before the database
 * is touched. A builtin instance is closed again (each pass opens its own);
 * a command's is kept for the arm's runs (it loads its model once). The
 * arms' engines must agree on the vocabulary. *device: the reference's. */
static int check_arms(exp_ctx *x, char *device, size_t devlen, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    for (int64_t i = 0; i < e->n_arms; i++) {
        lab_engine *en = &x->engs[i];
        void *inst = NULL;
        char verr[1024] = "";
        int rc = en->ops->open(en->model, &x->req[i], &inst, &x->hello[i], verr, sizeof verr);
        if (!rc && x->hello[i].json) rc = lab_engine_check_arm(&x->hello[i], e, i, verr, sizeof verr);
        /* a builtin instance is opened per pass; a command's is kept unless
         * its spec says one engine at a time */
        if (rc || !x->hello[i].json || !lab_arm_engine(e, i)->keep_running) en->ops->close(inst);
        else en->inst = inst;
        if (rc) return lab_errf(err, errlen, rc, "%s: arm %s: %s", e->path, e->arms[i].name, verr);
        en->info = x->hello[i].info;
        if (i == e->ref_index) snprintf(device, devlen, "%s", x->hello[i].device);
    }
    int64_t V = x->engs[e->ref_index].info.vocab;
    for (int64_t i = 0; i < e->n_arms; i++)
        if (x->engs[i].info.vocab != V)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arm %s: its engine's vocabulary is %lld, the reference "
                            "arm's %lld: logits cannot be compared", e->path, e->arms[i].name,
                            (long long)x->engs[i].info.vocab, (long long)V);
    return LAB_OK;
}

/* The arms' engines must have loaded the reference arm's model: logits of
 * another model compared with it would give a verdict about nothing the
 * experiment varies (audit R4 flags such runs only afterwards). Unless the
 * experiment says allow_model_mismatch, another model is bad input. */
static int check_models(const exp_ctx *x, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const char *ref = x->engs[e->ref_index].info.model_sha256;
    if (e->allow_model_mismatch) return LAB_OK;
    for (int64_t i = 0; i < e->n_arms; i++)
        if (strcmp(x->engs[i].info.model_sha256, ref))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: arm %s: its engine reports model %.12s (hello "
                            "model.sha256), while the reference arm %s's reports %.12s: logits of another model "
                            "are not compared (set \"allow_model_mismatch\": true to run it anyway; audit R4 "
                            "flags its runs)", e->path, e->arms[i].name, x->engs[i].info.model_sha256,
                            e->arms[e->ref_index].name, ref);
    return LAB_OK;
}

/* Each arm's engine: the builtin model (loaded once, shared) or a command;
 * each arm's request: its knobs (a builtin arm's resolved against the
 * registry), the probe mode, the model. */
static int load_engines(exp_ctx *x, const char *dir, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    size_t n = (size_t)e->n_arms;
    x->engs = calloc(n, sizeof *x->engs);
    x->ks = calloc(n, sizeof *x->ks);
    x->req = calloc(n, sizeof *x->req);
    x->hello = calloc(n, sizeof *x->hello);
    if (!x->engs || !x->ks || !x->req || !x->hello) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    lab_engine_info binfo;
    for (int64_t i = 0; i < e->n_arms; i++) {
        const lab_engine_spec *sp = lab_arm_engine(e, i);
        lab_engine *en = &x->engs[i];
        lab_engine_req *r = &x->req[i];
        const lab_arm *a = &e->arms[i];
        int rc = LAB_OK;
        en->ops = sp->command ? &lab_engine_command : &lab_engine_builtin;
        if (sp->command) rc = en->ops->load(sp, dir, &en->model, &en->info, err, errlen);
        else if (!x->builtin) rc = en->ops->load(sp, dir, &x->builtin, &binfo, err, errlen);
        if (rc) return lab_err_prefix(err, errlen, rc, "%s", e->path);
        if (!sp->command) {
            en->model = x->builtin;
            en->info = binfo;
            if ((rc = lab_resolve_knobs(e, i, environ, &x->ks[i], err, errlen))) return rc;
        }
        r->ks = x->ks[i];
        r->n_knobs = a->n_knobs;
        r->knob_names = a->knob_names;
        r->knob_values = a->knob_values;
        r->probe = e->probe;
        for (int64_t k = 0; k < a->n_knobs; k++)
            if (!strcmp(a->knob_names[k], "VT_PROBE")) r->probe = a->knob_values[k];
        r->model_dir = dir;
    }
    return LAB_OK;
}

/* --limit N: the dataset becomes its first N sequences, before the identity
 * is made (its dataset hash is then the hash of what was run), and the runs
 * are PARTIAL. N at or beyond the dataset changes nothing. */
static void apply_limit(exp_ctx *x, lab_experiment *e) {
    lab_dataset *ds = &e->ds;
    if (x->m->limit <= 0 || x->m->limit >= ds->n_seq) return;
    ds->n_seq = x->m->limit;
    ds->max_len = 0;
    for (int64_t q = 0; q < ds->n_seq; q++)
        if (ds->offsets[q + 1] - ds->offsets[q] > ds->max_len) ds->max_len = ds->offsets[q + 1] - ds->offsets[q];
    x->partial = 1;
}

/* Everything that can be bad input, before the database: the arm name,
 * the model, every arm's engine, knobs and backend, the dataset against the
 * vocabulary, and the identity shared by the runs. */
static int prepare(exp_ctx *x, lab_experiment *e, const char *path, char *err, size_t errlen) {
    char *dir = NULL, device[128] = "";
    if (x->o->only_arm && lab_experiment_arm(e, x->o->only_arm) < 0)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: --arm %s: no arm of that name", path, x->o->only_arm);
    int rc = x->m->model_dir ? ((dir = lab_strdup(x->m->model_dir)) ? LAB_OK : lab_oom(err, errlen))
                             : lab_model_dir(e, &dir, err, errlen);
    if (rc) return rc;
    rc = load_engines(x, dir, err, errlen);
    free(dir);
    if (rc || (rc = check_arms(x, device, sizeof device, err, errlen)) || (rc = check_models(x, err, errlen)))
        return rc;
    const lab_engine_info *ri = &x->engs[e->ref_index].info;
    if ((rc = lab_dataset_prepare(e, ri->vocab, err, errlen))) return rc;
    apply_limit(x, e);
    if ((rc = lab_exp_ident_init(&x->id, e, x->ks, ri->model_sha256, device, err, errlen))) return rc;
    for (int64_t i = 0; i < e->n_arms; i++) {
        if (!x->hello[i].json) continue;
        memcpy(x->id.arm_model[i], x->hello[i].info.model_sha256, 65);
        if (lab_engine_knob_hash(&x->hello[i], x->id.knob_hash[i])) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    return LAB_OK;
}

static const char *env_or_null(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* --shard I/N: e->ds becomes the view of sequences [I*n/N, (I+1)*n/N) of
 * the dataset (whose hash, in the identity, stays the whole dataset's),
 * and what the merge needs of the whole run is kept in x->shard. */
static int apply_shard(exp_ctx *x, lab_experiment *e, char *err, size_t errlen) {
    const lab_run_opts *o = x->o;
    lab_dataset *ds = &e->ds;
    int64_t n = ds->n_seq, I = o->shard_index, N = o->shard_count;
    if (N > n)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: --shard %lld/%lld: the dataset has %lld sequence(s), fewer than "
                        "%lld shards", e->path, (long long)I, (long long)N, (long long)n, (long long)N);
    int64_t lo = I * n / N, hi = (I + 1) * n / N;
    int64_t *off = malloc((size_t)(hi - lo + 1) * sizeof *off);
    if (!off) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int64_t q = lo; q <= hi; q++) off[q - lo] = ds->offsets[q] - ds->offsets[lo];
    x->full_offsets = ds->offsets;
    x->full_tokens = ds->tokens;
    x->full_n_seq = n;
    x->full_n_tokens = ds->offsets[n];
    x->full_n_scored = e->score_last ? n : ds->offsets[n];
    ds->tokens = ds->tokens + ds->offsets[lo];
    ds->offsets = off;
    ds->n_seq = hi - lo;
    ds->seq_base = lo;
    snprintf(x->id.shard, sizeof x->id.shard, "%lld/%lld", (long long)I, (long long)N);
    lab_shard_info *h = &x->shard;
    h->index = I;
    h->count = N;
    h->seq_lo = lo;
    h->seq_hi = hi;
    h->n_seq_total = n;
    h->n_tokens_total = x->full_n_tokens;
    h->n_scored_total = x->full_n_scored;
    h->metrics = e->metrics;
    h->div_sequences = (e->metrics & LAB_M_LAYERDIV) ? (e->div_sequences < n ? e->div_sequences : n) : 0;
    h->div_tolerance = e->div_tolerance;
    h->has_decision = e->has_decision;
    h->decision_ge = e->decision_ge;
    h->decision_metric = e->decision_metric;
    h->decision_threshold = e->decision_threshold;
    h->task = env_or_null("VTLAB_TASK");
    h->node = env_or_null("SLURMD_NODENAME") ? env_or_null("SLURMD_NODENAME") : x->id.host;
    h->slurm_job_id = env_or_null("SLURM_JOB_ID");
    h->slurm_array_job_id = env_or_null("SLURM_ARRAY_JOB_ID");
    h->slurm_array_task_id = env_or_null("SLURM_ARRAY_TASK_ID");
    return LAB_OK;
}

/* Puts the whole dataset back (lab_experiment_free frees it). */
static void unapply_shard(exp_ctx *x, lab_experiment *e) {
    if (!x->full_offsets) return;
    free(e->ds.offsets);
    e->ds.offsets = x->full_offsets;
    e->ds.tokens = x->full_tokens;
    e->ds.n_seq = x->full_n_seq;
    e->ds.seq_base = 0;
    x->full_offsets = NULL;
}

int lab_arm_knob_hash(const lab_experiment *e, int64_t i, char out[65], char *err, size_t errlen) {
    const lab_engine_spec *sp = lab_arm_engine(e, i);
    vt_knobset *ks = NULL;
    if (!sp->command) {
        int rc = lab_resolve_knobs(e, i, environ, &ks, err, errlen);
        if (rc) return rc;
        vt_knobset_hash(ks, out);
        vt_knobset_free(ks);
        return LAB_OK;
    }
    char *dir = NULL;
    void *model = NULL, *inst = NULL;
    lab_engine_info info;
    lab_engine_hello h;
    memset(&h, 0, sizeof h);
    const lab_arm *a = &e->arms[i];
    lab_engine_req r = {NULL, a->n_knobs, a->knob_names, a->knob_values, e->probe, NULL};
    int rc = lab_model_dir(e, &dir, err, errlen);
    if (!rc) rc = lab_engine_command.load(sp, dir, &model, &info, err, errlen);
    if (!rc) rc = lab_engine_command.open(model, &r, &inst, &h, err, errlen);
    if (!rc && lab_engine_knob_hash(&h, out)) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    lab_engine_command.close(inst);
    lab_engine_hello_free(&h);
    lab_engine_command.unload(model);
    free(dir);
    return rc;
}

/* Opens results.db, records the spec, marks runs of dead processes KILLED.
 * The spec's file is recorded as an absolute path: the paths inside it are
 * relative to it (paths.h), so `vtlab rerun` finds them from anywhere. */
static int open_store(exp_ctx *x, const char *path, char *err, size_t errlen) {
    char real[PATH_MAX];
    int rc = lab_store_open(&x->st, x->o->db_path, err, errlen);
    if (!rc) rc = lab_store_put_spec(x->st, x->id.spec_sha, x->e->id, realpath(path, real) ? real : path,
                                     x->e->spec_json, err, errlen);
    int64_t reaped = 0;
    if (!rc) rc = lab_store_reap(x->st, x->id.host, &reaped, err, errlen);
    if (!rc && reaped) {
        x->sum->stale_redone += reaped;
        fprintf(stderr, "vtlab: %lld run(s) left RUNNING by dead processes marked KILLED\n", (long long)reaped);
    }
    return rc;
}

/* Passes over the runs until none is held by another live process. Such a
 * holder on another host cannot be checked for liveness, so waiting is
 * bounded; what it finishes meanwhile is skipped. */
static int run_all(exp_ctx *x, const char *path, char *err, size_t errlen) {
    double wait_start = 0;
    for (;;) {
        int busy = 0;
        int rc = run_pass(x, &busy, err, errlen);
        if (rc || !busy) return rc;
        if (wait_start == 0) wait_start = lab_mono();
        if (lab_mono() - wait_start > LAB_WAIT_MAX_S) {
            x->sum->runs_busy += busy;
            fprintf(stderr, "vtlab: %s: %d run(s) still held by another process after %d s; left to it\n", path,
                    busy, LAB_WAIT_MAX_S);
            return LAB_OK;
        }
        usleep(300 * 1000);
        if (lab_interrupted) return lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal");
    }
}

int lab_run_experiment(const char *path, const lab_run_opts *o, lab_run_summary *sum, char *err, size_t errlen) {
    return lab_run_experiment_more(path, o, NULL, sum, err, errlen);
}

int lab_run_experiment_more(const char *path, const lab_run_opts *o, const lab_run_more *m, lab_run_summary *sum,
                            char *err, size_t errlen) {
    lab_experiment *e = NULL;
    double t0 = lab_mono();
    int rc = lab_experiment_load(&e, path, err, errlen);
    if (rc) {
        sum->wall_s += lab_mono() - t0;
        return rc;
    }
    rc = lab_run_parsed(e, path, o, m, sum, err, errlen);
    lab_experiment_free(e);
    return rc;
}

int lab_run_parsed(lab_experiment *e, const char *path, const lab_run_opts *o, const lab_run_more *m,
                   lab_run_summary *sum, char *err, size_t errlen) {
    static const lab_run_more none;
    double t0 = lab_mono();
    exp_ctx x = {0};
    int rc;
    x.m = m ? m : &none;
    x.e = e;
    x.o = o;
    x.sum = sum;
    /* Everything in prepare is validation: only after it is the database touched. */
    if ((rc = prepare(&x, e, path, err, errlen))) goto done;
    if (o->shard_count > 0 && (rc = apply_shard(&x, e, err, errlen))) goto done;
    if ((rc = open_store(&x, path, err, errlen))) goto done;
    x.tried = calloc((size_t)(e->n_arms * e->repeats), 1);
    x.arm_run = calloc((size_t)e->n_arms, sizeof *x.arm_run);
    if (!x.tried || !x.arm_run) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    if ((rc = run_all(&x, path, err, errlen))) goto done;
    if (x.any_new) rc = pair_tests(&x, err, errlen);
done:
    if (e) unapply_shard(&x, e);
    free(x.tried);
    free(x.arm_run);
    lab_ref_cache_free(&x.ref);
    for (int64_t i = 0; x.engs && i < e->n_arms; i++) {
        lab_engine *en = &x.engs[i];
        if (en->inst) en->ops->close(en->inst);
        if (en->model && en->model != x.builtin) en->ops->unload(en->model);
        if (x.ks) vt_knobset_free(x.ks[i]);
        if (x.hello) lab_engine_hello_free(&x.hello[i]);
    }
    if (x.builtin) lab_engine_builtin.unload(x.builtin);
    free(x.engs);
    free(x.ks);
    free(x.req);
    free(x.hello);
    lab_exp_ident_free(&x.id);
    lab_store_close(x.st);
    sum->wall_s += lab_mono() - t0;
    return rc;
}
