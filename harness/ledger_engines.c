/*
 * ledger_engines.c — the part of `vtlab specs check` that needs an engine:
 * records whose knobs and faults belong to an engine that is not vtlab's
 * model are checked against that engine's own hello (docs/specs.md).
 *
 * The engine is the one the claim's experiment names for the claim's arm.
 * For each such claim: its arm's and reference's knobs must be declared by
 * the engine with allowed values; each defect of the claim's codebase whose
 * replay is an engine fault must name a fault the hello declares, selected
 * by replay_knob, acting at the defect's site — and, replayed (the trigger,
 * the fault, VTP_PROBE=audit, the experiment's first sequence), it must
 * show a probe violation at that site.
 */
#include "ledger_engines.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "model_cache.h"
#include "util.h"

typedef struct lcheck {
    FILE *out;
    int   problems;
    char *site_checked;   /* per defect of the ledger: its site was checked against an engine */
} lcheck;

static void say(lcheck *k, int problem, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(lcheck *k, int problem, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(k->out, "  %s ", problem ? "PROBLEM" : "engine ");
    vfprintf(k->out, fmt, ap);
    fputc('\n', k->out);
    va_end(ap);
    k->problems += problem;
}

/* Every knob of kv declared by the engine (its value is not checked here). */
static void check_knobs(lcheck *k, const lab_engine_hello *h, const char *claim, const char *what,
                        const lab_knobs_kv *kv) {
    for (int64_t i = 0; i < kv->n; i++)
        if (!lab_engine_hello_knob(h, kv->names[i]))
            say(k, 1, "claim %s: %s.knobs.%s: engine %s declares no such knob", claim, what, kv->names[i],
                h->info.engine);
}

static const char *fault_site(const lab_engine_hello *h, const char *name, const char **knob) {
    for (int64_t f = 0; f < h->n_faults; f++)
        if (!strcmp(h->fault_name[f], name)) {
            *knob = h->fault_knob[f];
            return h->fault_site[f];
        }
    return NULL;
}

/* Replays defect d through the engine: violations at d->site in *viol. */
static int replay(void *model, const lab_experiment *e, const lab_defect *d, int64_t *viol, char *err, size_t errlen) {
    int64_t n = d->trigger.n + 1;
    char **names = calloc((size_t)n, sizeof *names), **values = calloc((size_t)n, sizeof *values);
    if (!names || !values) { free(names); free(values); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
    for (int64_t i = 0; i < d->trigger.n; i++) {
        names[i] = d->trigger.names[i];
        values[i] = d->trigger.values[i];
    }
    names[n - 1] = d->replay_knob;
    values[n - 1] = d->replay_fault;
    lab_engine_req r = {NULL, n, names, values, "audit", NULL};
    void *inst = NULL;
    lab_engine_hello h;
    int rc = lab_engine_command.open(model, &r, &inst, &h, err, errlen);
    const lab_dataset *ds = &e->ds;
    int64_t T = ds->offsets[1] - ds->offsets[0];
    float *lg = rc ? NULL : malloc((size_t)(T * h.info.vocab) * sizeof *lg);
    if (!rc && !lg) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (!rc) rc = lab_engine_command.forward(inst, ds->tokens, T, 0, lg, err, errlen);
    vt_probe *recs = NULL;
    int64_t nr = 0, lost = 0;
    if (!rc) rc = lab_engine_command.probes(inst, &recs, &nr, &lost, err, errlen);
    *viol = 0;
    for (int64_t i = 0; i < nr; i++)
        if (!strcmp(recs[i].site, d->site)) *viol += recs[i].violations + (recs[i].rows_unwritten > 0);
    free(recs);
    free(lg);
    lab_engine_command.close(inst);
    lab_engine_hello_free(&h);
    free(names);
    free(values);
    return rc;
}

static void check_defect(lcheck *k, void *model, const lab_experiment *e, const lab_engine_hello *h,
                         const lab_defect *d) {
    const char *knob = NULL, *site = fault_site(h, d->replay_fault, &knob);
    char err[1024];
    if (!site) { say(k, 1, "defect %s: replay_fault %s: engine %s declares no such fault", d->id, d->replay_fault, h->info.engine); return; }
    if (strcmp(knob, d->replay_knob)) { say(k, 1, "defect %s: replay_fault %s is selected by %s, not replay_knob %s", d->id, d->replay_fault, knob, d->replay_knob); return; }
    if (strcmp(site, d->site)) { say(k, 1, "defect %s: replay_fault %s acts at %s (the engine says), the defect's site is %s", d->id, d->replay_fault, site, d->site); return; }
    for (int64_t i = 0; i < d->trigger.n; i++) {
        if (!lab_engine_hello_knob(h, d->trigger.names[i])) { say(k, 1, "defect %s: trigger.%s: engine %s declares no such knob", d->id, d->trigger.names[i], h->info.engine); return; }
    }
    int64_t viol = 0;
    if (replay(model, e, d, &viol, err, sizeof err)) say(k, 1, "defect %s: the replay did not run: %s", d->id, err);
    else if (!viol) say(k, 1, "defect %s: replayed (%s=%s with its trigger, audit probes), but no violation at %s: the fault does not act at the defect's site", d->id, d->replay_knob, d->replay_fault, d->site);
    else say(k, 0, "%s: defect %s: %s=%s acts at %s (%lld violation(s) in one sequence)", h->info.engine, d->id, d->replay_knob, d->replay_fault, d->site, (long long)viol);
}

/* A defect of the engine's codebase must sit at a site the engine declares
 * (its hello's probe_sites), or its runs can never show it: R1 would rest on
 * the code range alone. An engine that declares no sites may still carry
 * defects at vtlab's own site names (it records nothing; the range decides). */
static void check_site(lcheck *k, const lab_engine_hello *h, const lab_defect *d) {
    if (!h->n_sites && vt_probe_site_known(d->site)) return;
    for (int64_t i = 0; i < h->n_sites; i++)
        if (!strcmp(h->sites[i], d->site)) {
            say(k, 0, "%s: defect %s: site %s is one of the engine's probe sites", h->info.engine, d->id, d->site);
            return;
        }
    char list[512] = "";
    size_t o = 0;
    for (int64_t i = 0; i < h->n_sites && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", h->sites[i]);
    say(k, 1, "defect %s: site %s: engine %s declares no such probe site (its probe_sites: %s)", d->id, d->site,
        h->info.engine, h->n_sites ? list : "none");
}

/* One claim whose arm runs on a command engine. */
static void check_claim(lcheck *k, const lab_ledger *l, const lab_claim *c, lab_experiment *e, int64_t arm) {
    char err[1024], *dir = NULL;
    void *model = NULL, *inst = NULL;
    lab_engine_info info;
    lab_engine_hello h;
    memset(&h, 0, sizeof h);
    lab_engine_req r = {NULL, 0, NULL, NULL, "on", NULL};
    int rc = lab_model_dir(e, &dir, err, sizeof err);
    if (!rc) rc = lab_engine_command.load(lab_arm_engine(e, arm), dir, &model, &info, err, sizeof err);
    if (!rc) rc = lab_engine_command.open(model, &r, &inst, &h, err, sizeof err);
    lab_engine_command.close(inst);
    if (!rc) rc = lab_dataset_prepare(e, h.info.vocab, err, sizeof err);
    if (rc) say(k, 1, "claim %s: its experiment's engine: %s", c->id, err);
    else {
        say(k, 0, "%s: claim %s: checked against engine %s (%lld knobs, %lld faults)", h.info.engine, c->id, h.engine_id,
            (long long)h.n_knobs, (long long)h.n_faults);
        check_knobs(k, &h, c->id, "arm", &c->arm_knobs);
        check_knobs(k, &h, c->id, "reference", &c->ref_knobs);
        for (int64_t i = 0; i < l->n_defects; i++) {
            const lab_defect *d = &l->defects[i];
            if (strcmp(d->codebase, c->codebase)) continue;
            if (!k->site_checked[i]) check_site(k, &h, d);
            k->site_checked[i] = 1;
            if (d->replay_fault && strcmp(d->replay_knob, "VT_FAULT")) check_defect(k, model, e, &h, d);
        }
    }
    lab_engine_hello_free(&h);
    lab_engine_command.unload(model);
    free(dir);
}

int lab_ledger_check_engines(const lab_ledger *l, FILE *out, int *problems, char *err, size_t errlen) {
    lcheck k = {out, 0, calloc((size_t)l->n_defects + 1, 1)};
    if (!k.site_checked) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int64_t i = 0; i < l->n_claims; i++) {
        const lab_claim *c = &l->claims[i];
        lab_experiment *e = NULL;
        char eerr[1024];
        if (!c->experiment_path || lab_experiment_load(&e, c->experiment_path, eerr, sizeof eerr)) {
            if (c->experiment_path) say(&k, 1, "claim %s: experiment: %s", c->id, eerr);
            continue;
        }
        int64_t arm = lab_experiment_arm(e, c->arm_name);
        if (arm >= 0 && lab_arm_engine(e, arm)->command) check_claim(&k, l, c, e, arm);
        lab_experiment_free(e);
    }
    /* an engine's fault that no claim's experiment reaches is said, not checked */
    for (int64_t i = 0; i < l->n_defects; i++) {
        const lab_defect *d = &l->defects[i];
        int reached = 0;
        if (!d->replay_fault || !strcmp(d->replay_knob, "VT_FAULT")) continue;
        for (int64_t j = 0; j < l->n_claims; j++) reached |= !strcmp(l->claims[j].codebase, d->codebase);
        if (!reached)
            say(&k, 0, "defect %s: %s=%s not checked: no claim of codebase %s names an experiment that runs its engine",
                d->id, d->replay_knob, d->replay_fault, d->codebase);
    }
    /* a site only an engine can declare, and no engine of its codebase was
     * started: said, never passed in silence */
    for (int64_t i = 0; i < l->n_defects; i++) {
        const lab_defect *d = &l->defects[i];
        if (!k.site_checked[i] && !vt_probe_site_known(d->site))
            say(&k, 0, "defect %s: site %s not checked: no engine could be started (no claim of codebase %s names an "
                "experiment that runs its engine)", d->id, d->site, d->codebase);
    }
    free(k.site_checked);
    *problems = k.problems;
    return LAB_OK;
}
