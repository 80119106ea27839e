/*
 * localize.c — `vtlab localize` (see localize.h and docs/localize.md): the
 * command, the set-up, the two searches, the per-unit table and the result.
 * A set's run and step are localize_run.c's; ddmin is localize_search.c's.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine.h"
#include "help.h"
#include "localize_internal.h"
#include "model/vt.h"
#include "runner.h"
#include "util.h"

void lab_localize_defaults(lab_localize_opts *o) {
    memset(o, 0, sizeof *o);
    o->db_path = LAB_DEFAULT_DB;
    o->workdir = LAB_LOCALIZE_DEFAULT_WORKDIR;
    o->alpha = 0.05;
    o->max_scale = LAB_LOCALIZE_DEFAULT_SCALE;
    o->sensitivity = 1;
}

/* ------------------------------------------------------------ the test */

static int can_grow(const lctx *c) { return c->generated && c->L.scale * 2 <= c->L.max_scale; }

static int grow_scale(lctx *c, const char *text, char *err, size_t errlen) {
    fprintf(c->out, "  %s is inside the noise at x%lld: the dataset grows to x%lld\n", text, (long long)c->L.scale,
            (long long)(c->L.scale * 2));
    c->L.scale *= 2;
    return lab_store_localize_update(c->st, &c->L, err, errlen);
}

/* What the arm does with its levers on set text only (size units), from
 * the steps, evaluating (and growing the dataset, when grow) as needed. */
static int test_text(lctx *c, const char *text, int64_t size, int grow, int *outcome, char *err, size_t errlen) {
    if (!strcmp(text, "none") && c->empty_is_reference) { *outcome = LAB_LOC_PASS; return LAB_OK; }
    for (;;) {
        if (lab_interrupted) return lab_errf(err, errlen, LAB_EIO, "interrupted by a signal");
        const lab_localize_step *d = lab_loc_decided(c, text), *s = lab_loc_step_at(c, text, c->L.scale);
        if (d) { *outcome = !strcmp(d->cls, "fail") ? LAB_LOC_FAIL : LAB_LOC_PASS; return LAB_OK; }
        int rc;
        if (s) {   /* undecided at this scale */
            if (!grow || !can_grow(c)) { *outcome = LAB_LOC_UNDECIDED; return LAB_OK; }
            if ((rc = grow_scale(c, text, err, errlen))) return rc;
            continue;
        }
        if (c->o->max_runs > 0 && c->L.runs_made >= c->o->max_runs) return LAB_LOC_BUDGET;
        /* the full lever at this scale first: every set is paired with it */
        if (strcmp(text, "all") && !lab_loc_step_at(c, "all", c->L.scale) &&
            (rc = lab_loc_evaluate(c, "all", c->n, err, errlen)))
            return rc;
        if ((rc = lab_loc_evaluate(c, text, size, err, errlen))) return rc;
    }
}

typedef struct oracle_ctx { lctx *c; char *err; size_t errlen; } oracle_ctx;

static int oracle(void *ctx, const uint8_t *set, int64_t n, int *outcome) {
    oracle_ctx *o = ctx;
    char text[VTP_LAYER_SET_TEXT];
    lab_loc_set_text(o->c, set, text, sizeof text);
    return test_text(o->c, text, lab_loc_count(set, n), 1, outcome, o->err, o->errlen);
}

static int test_set(lctx *c, const uint8_t *set, int *outcome, char *err, size_t errlen) {
    oracle_ctx o = {c, err, errlen};
    return oracle(&o, set, c->n, outcome);
}

/* ------------------------------------------------------------ results */

static void finish(lctx *c, const char *status, const char *msg) {
    snprintf(c->L.status, sizeof c->L.status, "%s", status);
    snprintf(c->L.message, sizeof c->L.message, "%s", msg);
    lab_now_iso(c->L.finished_at);
}

/* "top1 k/n [lo, hi] VERDICT (run R)" of set text's deciding step. */
static void evidence(const lctx *c, const char *text, char *out, size_t len, int64_t *run) {
    const lab_localize_step *s = lab_loc_decided(c, text);
    if (!s) {
        for (int64_t i = 0; i < c->nsteps; i++)
            if (!strcmp(c->steps[i].set, text)) s = &c->steps[i];
    }
    if (run) *run = s ? s->arm_run_id : 0;
    if (!s || s->arm_run_id <= 0) { snprintf(out, len, "%s", !strcmp(text, "none") ? "the reference arm" : "no run"); return; }
    int n = snprintf(out, len, "top1 %lld/%lld [%.3f, %.3f] %s at x%lld (run %lld)", (long long)s->k, (long long)s->n,
                     s->lo, s->hi, s->verdict, (long long)s->scale, (long long)s->arm_run_id);
    if (isfinite(s->p) && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "; against the full lever -%lld +%lld, McNemar p = %.3g (%s)",
                 (long long)s->lost, (long long)s->gained, s->p,
                 s->p < c->L.alpha ? "significantly apart" : "not told apart: it carries the lever's failure");
}

/* The ends: the full lever, then (unless it is the reference) the lever
 * nowhere. *done when they already end the localization. */
static int ends(lctx *c, int *done, char *err, size_t errlen) {
    uint8_t *u = malloc((size_t)c->n), *z = calloc((size_t)c->n, 1);
    int full = 0, empty = LAB_LOC_PASS, rc = u && z ? LAB_OK : lab_oom(err, errlen);
    char ev[900], msg[1400];
    if (!rc) memset(u, 1, (size_t)c->n);
    if (!rc) rc = test_set(c, u, &full, err, errlen);
    *done = 1;
    evidence(c, "all", ev, sizeof ev, NULL);
    if (!rc && full == LAB_LOC_PASS) {
        snprintf(msg, sizeof msg, "nothing to localize: the arm passes with its levers everywhere (%s)", ev);
        snprintf(c->L.plan, sizeof c->L.plan, "all");
        evidence(c, "all", ev, sizeof ev, &c->L.plan_run_id);
        finish(c, "NONE", msg);
    } else if (!rc && full == LAB_LOC_UNDECIDED) {
        snprintf(msg, sizeof msg, "undecided: with its levers everywhere the arm's verdict is inside the noise at the "
                 "largest dataset (%s); there is no failure to localize", ev);
        finish(c, "UNDECIDED", msg);
    } else if (!rc && (rc = test_set(c, z, &empty, err, errlen)) == LAB_OK && empty != LAB_LOC_PASS) {
        evidence(c, "none", ev, sizeof ev, NULL);
        snprintf(msg, sizeof msg, "%s: with its levers on no layer the arm %s (%s): what it differs in from the "
                 "reference is not only its scoped levers", empty == LAB_LOC_FAIL ? "nothing to localize" : "undecided",
                 empty == LAB_LOC_FAIL ? "fails already" : "is inside the noise", ev);
        finish(c, empty == LAB_LOC_FAIL ? "NONE" : "UNDECIDED", msg);
    } else {
        *done = 0;
    }
    free(u);
    free(z);
    return rc;
}

static void append_set(char *dst, size_t n, const char *text) {
    size_t l = strlen(dst);
    snprintf(dst + l, n - l, "%s%s", l ? ";" : "", text);
}

/* The culprits: a 1-minimal failing set (ddmin), then, on the units left,
 * the next one, until what is left passes (or nothing is left). rest[n]:
 * the units left; *rest_o: what they do; *und: a set not shown 1-minimal;
 * msg: what was found, in words. */
static int culprits(lctx *c, uint8_t *rest, int *rest_o, int *und, char *msg, size_t msglen, char *err,
                    size_t errlen) {
    uint8_t *m = malloc((size_t)c->n);
    int rc = m ? LAB_OK : lab_oom(err, errlen);
    char text[VTP_LAYER_SET_TEXT], ev[900];
    oracle_ctx oc = {c, err, errlen};
    memset(rest, 1, (size_t)c->n);
    *rest_o = LAB_LOC_FAIL;   /* every unit: the full lever, known to fail */
    *und = 0;
    c->L.result[0] = msg[0] = 0;
    for (int first = 1; !rc; first = 0) {
        if (!first && (rc = test_set(c, rest, rest_o, err, errlen))) break;
        if (*rest_o != LAB_LOC_FAIL) break;
        lab_loc_result r;
        if ((rc = lab_loc_ddmin(oracle, &oc, c->n, rest, 0, m, &r))) break;
        *und |= r.undecided;
        lab_loc_set_text(c, m, text, sizeof text);
        append_set(c->L.result, sizeof c->L.result, text);
        evidence(c, text, ev, sizeof ev, first ? &c->L.result_run_id : NULL);
        size_t l = strlen(msg);
        snprintf(msg + l, msglen - l, "%s{%.300s}%s: %s", first ? "the levers fail on " : "; and on ", text,
                 r.undecided ? " (whether a smaller set fails too is inside the noise)" : "", ev);
        for (int64_t u = 0; u < c->n; u++) rest[u] = rest[u] && !m[u];
        if (!lab_loc_count(rest, c->n)) *rest_o = LAB_LOC_PASS;   /* none left: the lever nowhere passes (ends) */
        if (!lab_loc_count(rest, c->n)) break;
    }
    free(m);
    return rc;
}

/* minimal-failing: the culprits, and whether the rest passes. */
static int minimal_failing(lctx *c, char *err, size_t errlen) {
    uint8_t *rest = malloc((size_t)c->n);
    int rest_o = 0, und = 0, rc = rest ? culprits(c, rest, &rest_o, &und, c->L.message, 1500, err, errlen)
                                       : lab_oom(err, errlen);
    if (!rc) {
        char text[VTP_LAYER_SET_TEXT], ev[900], msg[2048];
        snprintf(msg, sizeof msg, "%s", c->L.message);
        size_t l = strlen(msg);
        lab_loc_set_text(c, rest, text, sizeof text);
        if (rest_o == LAB_LOC_PASS && strcmp(text, "none")) {
            snprintf(c->L.plan, sizeof c->L.plan, "%s", text);
            evidence(c, text, ev, sizeof ev, &c->L.plan_run_id);
            snprintf(msg + l, sizeof msg - l, "; the levers on the rest (%.300s) pass: %s", text, ev);
        } else if (rest_o == LAB_LOC_UNDECIDED) {
            und = 1;
            snprintf(msg + l, sizeof msg - l, "; whether the rest (%.300s) passes is inside the noise", text);
        }
        finish(c, und ? "UNDECIDED" : "FOUND", msg);
    }
    free(rest);
    return rc;
}

/* largest-passing: the culprits switched off, then each unit of theirs put
 * back, one at a time, where the arm still passes with it (greedy): every
 * unit left off is shown to fail when added (a 1-maximal plan). One culprit
 * costs what minimal-failing does; k of them k times that, where ddmin over
 * the complement took three times as many runs on the shipped example. */
static int largest_passing(lctx *c, char *err, size_t errlen) {
    uint8_t *plan = malloc((size_t)c->n), *off = calloc((size_t)c->n, 1);
    int rest_o = 0, und = 0, rc = plan && off ? culprits(c, plan, &rest_o, &und, c->L.message, 1500, err, errlen)
                                              : lab_oom(err, errlen);
    if (!rc && rest_o == LAB_LOC_UNDECIDED) und = 1;
    for (int64_t u = 0; !rc && rest_o == LAB_LOC_PASS && u < c->n; u++) {
        if (plan[u]) continue;
        int o = 0;
        plan[u] = 1;
        if ((rc = test_set(c, plan, &o, err, errlen))) break;
        plan[u] = o == LAB_LOC_PASS;
        off[u] = !plan[u];
        und |= o == LAB_LOC_UNDECIDED;
    }
    if (!rc) {
        char ev[900], msg[2048];
        lab_loc_set_text(c, off, c->L.result, sizeof c->L.result);
        lab_loc_set_text(c, plan, c->L.plan, sizeof c->L.plan);
        evidence(c, c->L.plan, ev, sizeof ev, &c->L.plan_run_id);
        if (rest_o != LAB_LOC_PASS)
            snprintf(msg, sizeof msg, "%.1500s; whether the levers pass on what is left is inside the noise: no plan",
                     c->L.message);
        else
            snprintf(msg, sizeof msg, "the levers can stay on %.300s (%lld of %lld %ss), off on %.300s: %s%s", c->L.plan,
                     (long long)lab_loc_count(plan, c->n), (long long)c->n, c->L.by, c->L.result, ev,
                     und ? "; whether one more unit could stay on is inside the noise" : "");
        if (rest_o != LAB_LOC_PASS) c->L.plan[0] = 0, c->L.plan_run_id = 0;
        finish(c, und ? "UNDECIDED" : "FOUND", msg);
    }
    free(plan);
    free(off);
    return rc;
}

/* Each unit alone at the current scale (no dataset growth): the table. */
static int sensitivity(lctx *c, char *err, size_t errlen) {
    uint8_t *one = calloc((size_t)c->n, 1);
    int rc = one ? LAB_OK : lab_oom(err, errlen);
    c->phase = "sensitivity";
    for (int64_t u = 0; !rc && u < c->n; u++) {
        char text[VTP_LAYER_SET_TEXT];
        int o = 0;
        one[u] = 1;
        lab_loc_set_text(c, one, text, sizeof text);
        one[u] = 0;
        rc = test_text(c, text, 1, 0, &o, err, errlen);
    }
    free(one);
    return rc;
}

/* The unit's name: "3" (by layer) or "3.attn" (by site). */
static void unit_name(const lctx *c, int64_t u, char *out, size_t n) {
    if (c->L.by[0] == 's') snprintf(out, n, "%lld.%s", (long long)(u / 2), u % 2 ? "ffn" : "attn");
    else snprintf(out, n, "%lld", (long long)u);
}

static void print_table(const lctx *c) {
    fprintf(c->out, "each %s alone (sensitivity):\n  %-8s %-24s %-12s %-9s %-18s %s\n", c->L.by, c->L.by,
            "top1 k/n [95% CI]", "verdict", "KL", "first divergence", "class");
    for (int64_t u = 0; u < c->n; u++) {
        char name[32];
        unit_name(c, u, name, sizeof name);
        const lab_localize_step *s = lab_loc_decided(c, name);
        for (int64_t i = 0; !s && i < c->nsteps; i++)
            if (!strcmp(c->steps[i].set, name)) s = &c->steps[i];
        if (!s || s->arm_run_id <= 0) { fprintf(c->out, "  %-8s (not run)\n", name); continue; }
        char top[64], div[40] = "-";
        snprintf(top, sizeof top, "%lld/%lld [%.3f, %.3f]", (long long)s->k, (long long)s->n, s->lo, s->hi);
        if (s->first_div_layer >= 0)
            snprintf(div, sizeof div, "L%lld %s (%.3g)", (long long)s->first_div_layer, s->first_div_site ? "ffn" : "attn",
                     s->first_div_value);
        fprintf(c->out, "  %-8s %-24s %-12s %-9.3g %-18s %s x%lld\n", name, top, s->verdict, s->kl_mean, div, s->cls,
                (long long)s->scale);
    }
}

static void print_arm(const lctx *c, const char *what, const char *text) {
    cJSON *a = lab_loc_arm_json(c, text);
    char *p = a ? cJSON_PrintUnformatted(a) : NULL;
    if (p) fprintf(c->out, "arm to paste (%s):\n  %s\n", what, p);
    free(p);
    cJSON_Delete(a);
}

static void print_result(const lctx *c) {
    int64_t search = 0, sens = 0, ends_n = 0;
    for (int64_t i = 0; i < c->nsteps; i++) {
        const lab_localize_step *s = &c->steps[i];
        if (s->arm_run_id <= 0) continue;
        if (!strcmp(s->phase, "search")) search++;
        else if (!strcmp(s->phase, "sensitivity")) sens++;
        else ends_n++;
    }
    const int bound = 2 * (int)ceil(log2((double)(c->n > 1 ? c->n : 2)));
    fprintf(c->out, "result: %s: %s\n", c->L.status, c->L.message);
    fprintf(c->out, "runs: %lld for the search (one culprit among %lld %ss takes ddmin at most 2*ceil(log2 %lld) = %d, "
            "+1 to see the rest pass; k culprits about k times that), %lld for the ends (the full lever, the lever "
            "nowhere), %lld for the table; %lld made, %lld found recorded\n", (long long)search, (long long)c->n,
            c->L.by, (long long)c->n, bound, (long long)ends_n, (long long)sens, (long long)c->L.runs_made,
            (long long)c->L.runs_reused);
    if (c->L.result[0] && !strcmp(c->L.goal, "minimal-failing")) {
        char first[VTP_LAYER_SET_TEXT];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(c->L.result, ";"), c->L.result);
        print_arm(c, strchr(c->L.result, ';') ? "the failure, on the first set found" : "the failure, on the fewest layers",
                  first);
    }
    if (c->L.plan[0] && strcmp(c->L.plan, "all") && strcmp(c->L.plan, "none")) print_arm(c, "a plan that passes", c->L.plan);
    /* the run a claim records: the failure found, or the plan */
    const int64_t claim = !strcmp(c->L.goal, "largest-passing") || c->L.result_run_id <= 0 ? c->L.plan_run_id
                                                                                           : c->L.result_run_id;
    if (claim > 0) fprintf(c->out, "record it: vtlab claim %lld --id ID --db %s\n", (long long)claim, c->o->db_path);
}

/* ------------------------------------------------------------ set-up */

/* The hello of arm i's command engine (started once, then stopped). */
static int arm_hello(const lab_experiment *e, int64_t i, lab_engine_hello *h, char *err, size_t errlen) {
    char *dir = NULL;
    void *model = NULL, *inst = NULL;
    lab_engine_info info;
    const lab_arm *a = &e->arms[i];
    lab_engine_req r = {NULL, a->n_knobs, a->knob_names, a->knob_values, e->probe, NULL};
    memset(h, 0, sizeof *h);
    int rc = lab_model_dir(e, &dir, err, errlen);
    if (!rc) rc = lab_engine_command.load(lab_arm_engine(e, i), dir, &model, &info, err, errlen);
    if (!rc) rc = lab_engine_command.open(model, &r, &inst, h, err, errlen);
    if (!rc) rc = lab_engine_check_arm(h, e, i, err, errlen);
    lab_engine_command.close(inst);
    lab_engine_command.unload(model);
    free(dir);
    return rc;
}

/* The arm's scoped levers (set away from their default) and the model's
 * layers: the builtin registry's, or the engine's hello. */
static int find_levers(lctx *c, char *err, size_t errlen) {
    const lab_arm *a = &c->e->arms[c->arm];
    lab_engine_hello h;
    memset(&h, 0, sizeof h);
    int rc = LAB_OK;
    if (c->command) rc = arm_hello(c->e, c->arm, &h, err, errlen);
    for (int64_t i = 0; !rc && i < a->n_knobs; i++) {
        const char *nm = a->knob_names[i], *v = a->knob_values[i];
        const lab_engine_knob *hk = c->command ? lab_engine_hello_knob(&h, nm) : NULL;
        const vt_knob_info *bk = c->command ? NULL : vt_knob_find(nm);
        int scope = hk ? hk->scope : bk && bk->scope ? 2 : 0, is_scope = hk ? hk->scope_of >= 0 : bk && vt_knob_scope_of(nm);
        if (is_scope)
            rc = lab_errf(err, errlen, LAB_EINPUT, "%s: arm %s already scopes its lever (%s); localize scopes it itself: "
                          "give it the arm without a scope", c->o->experiment, a->name, nm);
        else if (scope && strcmp(v, hk ? hk->def : bk->def) && c->n_levers < LAB_LOC_MAX_LEVERS) {
            if (c->L.by[0] == 's' && scope != 2)
                rc = lab_errf(err, errlen, LAB_EINPUT, "%s: --by site: engine %s scopes %s by whole layers only "
                              "(\"scope\": \"layers\"); use --by layer", c->o->experiment, h.info.engine, nm);
            snprintf(c->levers[c->n_levers++], sizeof c->levers[0], "%s", nm);
        }
    }
    if (!rc && c->command) c->n_layers = h.info.n_layers;
    if (!rc && c->command && lab_engine_knob_hash(&h, c->arm_hash)) rc = lab_oom(err, errlen);
    if (!rc && !c->command) rc = lab_arm_knob_hash(c->e, c->arm, c->arm_hash, err, errlen);
    lab_engine_hello_free(&h);
    if (!rc && !c->n_levers)
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: arm %s sets no scoped lever to localize (scoped: %s)",
                      c->o->experiment, a->name, c->command ? "the engine's knobs whose hello says \"scope\""
                      : "VT_KIMI_BF16_STREAM, VT_KIMI_BF16_EXPERT_OUT, VT_KIMI_BF16_ACT");
    return rc;
}

static int builtin_layers(lctx *c, char *err, size_t errlen) {
    char *dir = NULL, verr[1024];
    vt_model_info mi;
    int rc = lab_model_dir(c->e, &dir, err, errlen);
    if (!rc && vt_model_validate(dir, &mi, verr, sizeof verr))
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: model %s: %s", c->o->experiment, dir, verr);
    if (!rc) c->n_layers = mi.n_layers;
    free(dir);
    return rc;
}

/* Whether the arm with its levers nowhere is the reference arm: the same
 * knobs but the levers, and the same engine. Otherwise that set is run. */
static int empty_is_reference(const lctx *c) {
    const lab_arm *a = &c->e->arms[c->arm], *r = &c->e->arms[c->e->ref_index];
    if (a->engine || r->engine) return 0;
    int64_t na = 0;
    for (int64_t i = 0; i < a->n_knobs; i++) {
        int lever = 0, same = 0;
        for (int l = 0; l < c->n_levers; l++) lever |= !strcmp(a->knob_names[i], c->levers[l]);
        if (lever) continue;
        na++;
        for (int64_t j = 0; j < r->n_knobs; j++)
            same |= !strcmp(a->knob_names[i], r->knob_names[j]) && !strcmp(a->knob_values[i], r->knob_values[j]);
        if (!same) return 0;
    }
    return na == r->n_knobs;
}

static int abs_path(const char *p, char *out, size_t len, char *err, size_t errlen) {
    if (p[0] == '/') { snprintf(out, len, "%s", p); return LAB_OK; }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return lab_errf(err, errlen, LAB_EIO, "getcwd: %s", strerror(errno));
    snprintf(out, len, "%.2000s/%.2000s", cwd, p);
    return LAB_OK;
}

/* The experiment and the arm: everything that is bad input. */
static int check_input(lctx *c, char *err, size_t errlen) {
    const lab_localize_opts *o = c->o;
    if (!o->experiment) return lab_errf(err, errlen, LAB_EINPUT, "expected one EXPERIMENT.json");
    if (!o->arm) return lab_errf(err, errlen, LAB_EINPUT, "--arm NAME is required (the arm whose lever fails)");
    if (o->max_scale < 1 || o->max_scale > 1024) return lab_errf(err, errlen, LAB_EINPUT, "--max-scale must be 1..1024");
    if (!(o->alpha > 0 && o->alpha < 1)) return lab_errf(err, errlen, LAB_EINPUT, "--alpha must be in (0, 1)");
    int rc = lab_experiment_load(&c->e, o->experiment, err, errlen);
    if (rc) return rc;
    c->arm = lab_experiment_arm(c->e, o->arm);
    if (c->arm < 0) return lab_errf(err, errlen, LAB_EINPUT, "%s: no arm named \"%s\"", o->experiment, o->arm);
    if (c->arm == c->e->ref_index)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: \"%s\" is the reference arm; localize an arm compared with it",
                        o->experiment, o->arm);
    if (!c->e->has_decision)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: no decision rule: localize needs one to tell a failing set "
                        "from a passing one (docs/experiments.md, \"Decision rule\")", o->experiment);
    c->generated = c->e->ds.kind == LAB_DS_GENERATE;
    c->command = lab_arm_engine(c->e, c->arm)->command;
    return LAB_OK;
}

/* The code version the runner records (provenance.c's rule). */
static void code_version(lctx *c) {
    const char *tree = getenv("VTLAB_TREE_REVISION");
    int hex = tree && *tree && strlen(tree) <= 40 && strspn(tree, "0123456789abcdef") == strlen(tree);
    if (hex) snprintf(c->code, sizeof c->code, "%s|dirty=0|tree run by vtlab %s", tree, vt_build_info());
    else snprintf(c->code, sizeof c->code, "%s", vt_build_info());
}

static int prepare(lctx *c, char *err, size_t errlen) {
    lab_localization *L = &c->L;
    memset(L, 0, sizeof *L);
    snprintf(L->by, sizeof L->by, "%s", c->o->by_site ? "site" : "layer");
    int rc = check_input(c, err, errlen);
    if (!rc) rc = c->command ? LAB_OK : builtin_layers(c, err, errlen);
    if (!rc) rc = find_levers(c, err, errlen);
    if (!rc) rc = abs_path(c->o->experiment, c->exp_abs, sizeof c->exp_abs, err, errlen);
    if (!rc) rc = abs_path(c->o->db_path, c->db_abs, sizeof c->db_abs, err, errlen);
    if (!rc && vt_sha256_file(c->exp_abs, L->experiment_sha256, err, errlen))
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: cannot read", c->exp_abs);
    if (rc) return rc;
    c->n = c->o->by_site ? 2 * c->n_layers : c->n_layers;
    c->empty_is_reference = empty_is_reference(c);
    code_version(c);
    snprintf(L->experiment, sizeof L->experiment, "%s", c->e->id);
    snprintf(L->arm, sizeof L->arm, "%s", c->o->arm);
    snprintf(L->reference, sizeof L->reference, "%s", c->e->arms[c->e->ref_index].name);
    snprintf(L->experiment_file, sizeof L->experiment_file, "%.1000s", c->exp_abs);
    snprintf(L->goal, sizeof L->goal, "%s", c->o->largest_passing ? "largest-passing" : "minimal-failing");
    for (int i = 0; i < c->n_levers; i++)
        snprintf(L->levers + strlen(L->levers), sizeof L->levers - strlen(L->levers), "%s%s", i ? "," : "", c->levers[i]);
    L->n_units = c->n;
    L->alpha = c->o->alpha;
    L->max_scale = c->generated ? c->o->max_scale : 1;
    L->scale = 1;
    char keytext[4096];
    /* the arm's knob hash: the environment's VT_* knobs (a base for every
     * arm) make another localization of the same file */
    snprintf(keytext, sizeof keytext, "%s\n%s\n%s\n%s\n%.6g\n%lld\n%.3000s\n%s", L->experiment_sha256, L->arm, L->by,
             L->goal, L->alpha, (long long)L->max_scale, c->db_abs, c->arm_hash);
    vt_sha256_hex(keytext, strlen(keytext), L->key);
    lab_now_iso(L->started_at);
    return LAB_OK;
}

/* The work directory of this localization (its derived experiments, the
 * runner's log), locked while it works: a second `vtlab localize` of the
 * same localization exits 1. */
static int open_work(lctx *c, char *err, size_t errlen) {
    char base[PATH_MAX], lock[PATH_MAX + 64];
    int rc = abs_path(c->o->workdir, base, sizeof base, err, errlen);
    if (rc) return rc;
    snprintf(c->work, sizeof c->work, "%.*s/%.16s", PATH_MAX - 40, base, c->L.key);
    snprintf(c->runlog, sizeof c->runlog, "%s/runs.log", c->work);
    snprintf(lock, sizeof lock, "%s/lock", c->work);
    if ((rc = lab_mkdirs(c->work, err, errlen))) return rc;
    c->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lock_fd < 0) return lab_errf(err, errlen, LAB_EIO, "%s: %s", lock, strerror(errno));
    if (flock(c->lock_fd, LOCK_EX | LOCK_NB))
        return lab_errf(err, errlen, LAB_EIO, "localization %lld is being worked on by another vtlab localize (%s is "
                        "locked)", (long long)c->L.id, lock);
    return LAB_OK;
}

/* ------------------------------------------------------------ the run */

static int search(lctx *c, char *err, size_t errlen) {
    int done = 0;
    c->phase = "search";
    int rc = ends(c, &done, err, errlen);
    if (!rc && !done) rc = c->o->largest_passing ? largest_passing(c, err, errlen) : minimal_failing(c, err, errlen);
    if (!rc && c->o->sensitivity && strcmp(c->L.status, "NONE")) rc = sensitivity(c, err, errlen);
    if (rc == LAB_LOC_BUDGET) {
        char msg[256];
        snprintf(msg, sizeof msg, "the run budget is spent (--max-runs %lld: %lld runs made); the same command with a "
                 "larger --max-runs continues", (long long)c->o->max_runs, (long long)c->L.runs_made);
        if (!strcmp(c->L.status, "RUNNING")) finish(c, "BUDGET", msg);
        c->L.finished_at[0] = 0;
        rc = LAB_OK;
    }
    return rc;
}

static void header(const lctx *c, int found) {
    fprintf(c->out, "localization %lld: %s/%s, %s by %s over %lld %ss, %s (alpha %.3g, dataset up to x%lld)%s\n",
            (long long)c->L.id, c->L.experiment, c->L.arm, c->L.levers, c->L.by, (long long)c->n, c->L.by, c->L.goal,
            c->L.alpha, (long long)c->L.max_scale,
            found ? (strcmp(c->L.status, "RUNNING") && strcmp(c->L.status, "BUDGET") ? ", finished earlier" : ", resumed")
                  : "");
    for (int64_t i = 0; i < c->nsteps; i++) lab_loc_print_step(c, &c->steps[i], "stored");
}

/* Finds or starts the localization of c->L's key; reads its steps. */
static int find_or_start(lctx *c, int *found, char *err, size_t errlen) {
    lab_localization prev;
    int rc = lab_store_localize_find(c->st, c->L.key, &prev, found, err, errlen);
    if (!rc && *found) c->L = prev;
    else if (!rc) rc = lab_store_localize_insert(c->st, &c->L, err, errlen);
    if (!rc) rc = lab_store_localize_steps(c->st, c->L.id, &c->steps, &c->nsteps, err, errlen);
    /* a budget spent earlier: this invocation may have a larger one */
    if (!rc && !strcmp(c->L.status, "BUDGET")) snprintf(c->L.status, sizeof c->L.status, "RUNNING");
    return rc;
}

int lab_localize_run(const lab_localize_opts *o, FILE *out, lab_localization *res, char *err, size_t errlen) {
    lctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.out = out;
    c.lock_fd = -1;
    int found = 0;
    int rc = prepare(&c, err, errlen);
    if (!rc) rc = lab_store_open(&c.st, c.db_abs, err, errlen);
    if (!rc) rc = find_or_start(&c, &found, err, errlen);
    if (!rc) header(&c, found);
    if (!rc && !strcmp(c.L.status, "RUNNING")) {
        if (!(rc = open_work(&c, err, errlen))) {
            lab_install_signals();
            rc = search(&c, err, errlen);
        }
        char e2[256];
        int urc = lab_store_localize_update(c.st, &c.L, rc ? e2 : err, rc ? sizeof e2 : errlen);
        if (!rc) rc = urc;
    }
    if (!rc && strcmp(c.L.status, "RUNNING")) {
        if (c.o->sensitivity && strcmp(c.L.status, "NONE")) print_table(&c);
        print_result(&c);
    }
    if (res) *res = c.L;
    lab_experiment_free(c.e);
    free(c.steps);
    if (c.st) lab_store_close(c.st);
    if (c.lock_fd >= 0) close(c.lock_fd);
    return rc;
}

/* ------------------------------------------------------------ the command */

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "vtlab localize: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see `vtlab localize --help`)\n");
    return 2;
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* One option with a value (argv[*i] is its name): 0, or the exit status. */
static int option(lab_localize_opts *o, int argc, char **argv, int *i) {
    const char *s = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!lab_help_option(lab_help_find("localize"), s)) return lab_help_bad_argument("localize", s);
    if (!v || !*v) return usage("%s needs a value", s);
    ++*i;
    if (!strcmp(s, "--arm")) o->arm = v;
    else if (!strcmp(s, "--db")) o->db_path = v;
    else if (!strcmp(s, "--workdir")) o->workdir = v;
    else if (!strcmp(s, "--cache")) { if (setenv("VTLAB_CACHE", v, 1)) return usage("--cache %s: cannot set VTLAB_CACHE", v); }
    else if (!strcmp(s, "--by")) {   /* its values, and --goal's: help.c's table */
        if (lab_help_check_value("localize", s, v)) return 2;
        o->by_site = !strcmp(v, "site");
    } else if (!strcmp(s, "--goal")) {
        if (lab_help_check_value("localize", s, v)) return 2;
        o->largest_passing = !strcmp(v, "largest-passing");
    } else if (!strcmp(s, "--max-runs")) {
        if (parse_int(v, 1, 1000000, &o->max_runs)) return usage("--max-runs: expected an integer 1..1000000, got \"%s\"", v);
    } else if (!strcmp(s, "--max-scale")) {
        if (parse_int(v, 1, 1024, &o->max_scale)) return usage("--max-scale: expected an integer 1..1024, got \"%s\"", v);
    } else if (!strcmp(s, "--alpha")) {
        char *end = NULL;
        o->alpha = strtod(v, &end);
        if (*end || !(o->alpha > 0 && o->alpha < 1)) return usage("--alpha: expected a number in (0, 1), got \"%s\"", v);
    } else return lab_help_bad_argument("localize", s);
    return 0;
}

int lab_localize_main(int argc, char **argv) {
    lab_localize_opts o;
    lab_localize_defaults(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-sensitivity")) { o.sensitivity = 0; continue; }
        if (argv[i][0] == '-' && argv[i][1]) {
            int u = option(&o, argc, argv, &i);
            if (u) return u;
            continue;
        }
        if (o.experiment) return usage("unexpected argument %s (one EXPERIMENT.json)", argv[i]);
        o.experiment = argv[i];
    }
    if (!o.experiment) return usage("expected one EXPERIMENT.json%s", "");
    if (!o.arm) return usage("--arm NAME is required (the arm whose lever fails)%s", "");
    char err[2048] = "";
    lab_localization L;
    memset(&L, 0, sizeof L);
    int rc = lab_localize_run(&o, stdout, &L, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab localize: %s\n", err);
        if (L.id > 0 && rc != LAB_EINPUT)
            fprintf(stderr, "vtlab localize: the same command resumes localization %lld\n", (long long)L.id);
        return lab_exit_code(rc);
    }
    if (!strcmp(L.status, "RUNNING") || lab_interrupted) {
        fprintf(stderr, "vtlab localize: interrupted; the same command resumes localization %lld\n", (long long)L.id);
        return 1;
    }
    return strcmp(L.status, "BUDGET") && strcmp(L.status, "FAILED") ? 0 : 1;
}
