/*
 * nightly_compare.c — the comparison of a nightly with the previous one on
 * the same experiments (nightly.h says what counts as a regression): per
 * experiment and arm, the checks, the repeats, accuracy, numerics and
 * throughput (judged in nightly_perf.c), each finding said with its
 * evidence, marked persistent when the previous nightly had it and turned
 * into a note when someone acknowledged it (`vtlab ack`, nightly_ack.c
 * records that), then stored in one transaction through store_nightly.h.
 * Apart from the night's flow (nightly.c) because it is the lab's judgement
 * of a night, called on its own by tests and by nothing that runs models;
 * confounds are judged by cause in nightly_confounds.c, not here.
 */
#include "nightly_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "store_merge.h"
#include "store_report.h"
#include "util.h"

/* Runs as the comparison needs them (store_nightly.h). */
typedef lab_nightly_run nrun;
typedef lab_nightly_runs nset;

static void nset_free(nset *s) { lab_nightly_runs_free(s); }

/* The night's runs of an experiment (nightly_runs), by arm then repeat. */
static int load_runs(lab_store *st, int64_t nightly, const char *eid, nset *out, char *err, size_t errlen) {
    return lab_store_nightly_runs(st, nightly, eid, 0, out, err, errlen);
}

/* First FINISHED run of arm with repeat rep (or NULL). */
static const nrun *find_run(const nset *s, const char *arm, int64_t rep) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->r[i].arm, arm) && s->r[i].rep == rep && !strcmp(s->r[i].status, "FINISHED")) return &s->r[i];
    return NULL;
}

/* ------------------------------------------------------------ findings, and what is known of them */

typedef struct finding {
    const char *experiment, *arm, *kind;
    int         regression;
    int64_t     run_id, prev_run_id;   /* 0: none */
    double      value, prev_value, p;  /* NaN: none */
    char        message[1024];
    char        evidence[1024];
} finding;

static void finding_init(finding *f, const char *eid, const char *arm, const char *kind, int regression) {
    memset(f, 0, sizeof *f);
    f->experiment = eid;
    f->arm = arm;
    f->kind = kind;
    f->regression = regression;
    f->value = f->prev_value = f->p = NAN;
    snprintf(f->evidence, sizeof f->evidence, "{}");
}

/* The active acknowledgement of experiment/arm/kind, if any (a->found). */
static int find_ack(lab_store *st, const char *eid, const char *arm, const char *kind, lab_nightly_ack *a, char *err,
                    size_t errlen) {
    return lab_store_nightly_find_ack(st, eid, arm, kind, a, err, errlen);
}

/* Appends ,"key":value to a JSON object held in evidence (replacing its '}'). */
static void evidence_add(char *ev, size_t len, const char *fmt, ...) {
    size_t n = strlen(ev);
    if (!n || ev[n - 1] != '}') return;
    ev[--n] = 0;
    if (n > 1) ev[n++] = ',', ev[n] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev + n, len - n, fmt, ap);
    va_end(ap);
    n = strlen(ev);
    if (n + 1 < len) { ev[n] = '}'; ev[n + 1] = 0; }
    else snprintf(ev, len, "{}");
}

/* Prefixes f's message with what (at most 200 + 700 bytes of each kept, as
 * "PREFIX; MESSAGE" or "PREFIX: MESSAGE"). */
static void message_prefix(finding *f, const char *prefix) {
    char m[sizeof f->message];
    snprintf(m, sizeof m, "%s%.900s", prefix, f->message);
    snprintf(f->message, sizeof f->message, "%s", m);
}

/* Turns f into an acknowledged note. */
static void mark_acknowledged(finding *f, const lab_nightly_ack *a) {
    char m[sizeof f->message];
    f->regression = 0;
    evidence_add(f->evidence, sizeof f->evidence, "\"acknowledged\":1");
    snprintf(m, sizeof m, "acknowledged (nightly %lld: %.200s); %.700s", (long long)a->nightly, a->reason, f->message);
    snprintf(f->message, sizeof f->message, "%s", m);
}

/* A regression that is already known: persistent when the previous nightly
 * of the experiment had the same experiment/arm/kind as a regression (or an
 * acknowledged one): the message says since when, and the evidence carries
 * "persistent_since" (the Atom feed announces only new ones); acknowledged
 * (`vtlab ack`) it becomes a note. Performance findings check their
 * acknowledgement themselves (it holds only down to the acknowledged level). */
static int annotate_known(lab_store *st, int64_t nightly, finding *f, char *err, size_t errlen) {
    int64_t prev = 0, since = 0;
    int rc = f->experiment[0] ? lab_store_nightly_previous(st, nightly, f->experiment, &prev, err, errlen) : LAB_OK;
    if (!rc && prev) rc = lab_store_nightly_persistent_since(st, prev, f->experiment, f->arm, f->kind, &since, err, errlen);
    if (rc) return rc;
    if (since) {
        char p[64];
        evidence_add(f->evidence, sizeof f->evidence, "\"persistent_since\":%lld", (long long)since);
        snprintf(p, sizeof p, "persistent since nightly %lld (not new): ", (long long)since);
        message_prefix(f, p);
    }
    lab_nightly_ack a;
    if (!strcmp(f->kind, "performance")) return LAB_OK;
    if ((rc = find_ack(st, f->experiment, f->arm, f->kind, &a, err, errlen))) return rc;
    if (a.found) mark_acknowledged(f, &a);
    return LAB_OK;
}

static int put_finding(lab_store *st, int64_t nightly, const finding *f0, int64_t *n_reg, char *err, size_t errlen) {
    finding fk = *f0, *f = &fk;
    int rc = f->regression ? annotate_known(st, nightly, f, err, errlen) : LAB_OK;
    if (rc) return rc;
    lab_nightly_finding row = {f->experiment, f->arm, f->kind, f->regression, f->run_id, f->prev_run_id,
                               f->value, f->prev_value, f->p, f->message, f->evidence};
    rc = lab_store_nightly_put_finding(st, nightly, &row, err, errlen);
    if (!rc && f->regression) (*n_reg)++;
    return rc;
}

/* ------------------------------------------------------------ accuracy and numerics */

/* Agreement of a run's top-1 with its reference's, per scored position. */
static int agreement(lab_store *st, const nrun *r, uint8_t **agree, int64_t *n, char *err, size_t errlen) {
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    int rc = lab_store_top1(st, r->id, &a, &na, err, errlen);
    if (!rc) rc = lab_store_top1(st, r->ref_run, &b, &nb, err, errlen);
    if (!rc && na != nb) rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: %lld positions, its reference %lld",
                                       (long long)r->id, (long long)na, (long long)nb);
    if (!rc && !(*agree = malloc((size_t)(na ? na : 1)))) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (!rc) {
        for (int64_t i = 0; i < na; i++) (*agree)[i] = a[i] == b[i];
        *n = na;
    }
    free(a);
    free(b);
    return rc;
}

static int compare_accuracy(lab_store *st, int64_t nightly, const char *eid, const nrun *c, const nrun *p,
                            const lab_nightly_opts *o, int64_t *n_reg, char *err, size_t errlen) {
    if (!c->has_cmp || !p->has_cmp || c->n <= 0 || p->n <= 0) return LAB_OK;
    finding f;
    finding_init(&f, eid, c->arm, "accuracy", 0);
    f.run_id = c->id;
    f.prev_run_id = p->id;
    f.value = (double)c->k / (double)c->n;
    f.prev_value = (double)p->k / (double)p->n;
    int same_positions = !strcmp(c->dataset, p->dataset) && c->n == p->n;
    int64_t b = 0, cc = 0;
    if (same_positions) {
        uint8_t *ac = NULL, *ap = NULL;
        int64_t nc = 0, np = 0;
        int rc = agreement(st, c, &ac, &nc, err, errlen);
        if (!rc) rc = agreement(st, p, &ap, &np, err, errlen);
        if (!rc && nc != np) same_positions = 0;
        for (int64_t i = 0; !rc && same_positions && i < nc; i++) {
            b += ap[i] && !ac[i];
            cc += !ap[i] && ac[i];
        }
        free(ac);
        free(ap);
        if (rc) return rc;
    }
    if (same_positions) {
        f.p = lab_mcnemar_exact(b, cc);
        f.regression = b > cc && f.p < o->alpha;
        snprintf(f.evidence, sizeof f.evidence,
                 "{\"test\":\"mcnemar_exact\",\"lost\":%lld,\"gained\":%lld,\"p\":%.6g,\"alpha\":%.3g,\"k\":%lld,\"n\":%lld,"
                 "\"prev_k\":%lld,\"prev_n\":%lld}",
                 (long long)b, (long long)cc, f.p, o->alpha, (long long)c->k, (long long)c->n, (long long)p->k,
                 (long long)p->n);
        if (!b && !cc && c->k == p->k) return LAB_OK;   /* the same positions agree: nothing to say */
        snprintf(f.message, sizeof f.message,
                 "top-1 agreement with the reference %lld/%lld [%.3f, %.3f] -> %lld/%lld [%.3f, %.3f]; paired on the "
                 "same %lld positions: %lld lost, %lld gained, exact McNemar p = %.3g (%s alpha %.3g)",
                 (long long)p->k, (long long)p->n, p->lo, p->hi, (long long)c->k, (long long)c->n, c->lo, c->hi,
                 (long long)c->n, (long long)b, (long long)cc, f.p,
                 f.regression ? "a significant drop at" : b > cc ? "not significant at" : "no drop;", o->alpha);
    } else {
        f.regression = c->hi < p->lo;
        snprintf(f.evidence, sizeof f.evidence,
                 "{\"test\":\"wilson_overlap\",\"lo\":%.6g,\"hi\":%.6g,\"prev_lo\":%.6g,\"prev_hi\":%.6g}", c->lo, c->hi,
                 p->lo, p->hi);
        if (c->k * p->n == p->k * c->n) return LAB_OK;
        snprintf(f.message, sizeof f.message,
                 "top-1 agreement %lld/%lld [%.3f, %.3f] -> %lld/%lld [%.3f, %.3f] on a different dataset; Wilson 95%% "
                 "intervals %s", (long long)p->k, (long long)p->n, p->lo, p->hi, (long long)c->k, (long long)c->n, c->lo,
                 c->hi, f.regression ? "no longer overlap: a significant drop" : "overlap: within noise");
    }
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

static int compare_numerics(lab_store *st, int64_t nightly, const char *eid, const nrun *c, const nrun *p, int64_t *n_reg,
                            char *err, size_t errlen) {
    int deterministic = !strcmp(c->backend, "cpu") && !strcmp(p->backend, "cpu") && !strcmp(c->model, p->model) &&
                        !strcmp(c->dataset, p->dataset);
    if (!deterministic || !c->logits[0] || !p->logits[0]) return LAB_OK;
    finding f;
    finding_init(&f, eid, c->arm, "numerics", 0);
    f.run_id = c->id;
    f.prev_run_id = p->id;
    if (strcmp(c->knob_hash, p->knob_hash)) {
        if (!strcmp(c->logits, p->logits)) return LAB_OK;
        snprintf(f.message, sizeof f.message,
                 "the arm's resolved knobs changed (knob hash %.12s -> %.12s), so its logits changed as well; not compared",
                 p->knob_hash, c->knob_hash);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    if (!strcmp(c->logits, p->logits)) return LAB_OK;
    /* A run of schema v8 or later has a composed logits hash (sha256 of its
     * per-sequence hashes, docs/slurm.md); one before has the older stream
     * hash. Across the change hashes cannot agree: the stored top-k decides. */
    int cc = 0, pc = 0, same = 0, rc0 = lab_store_logits_composed(st, c->id, &cc, err, errlen);
    if (!rc0) rc0 = lab_store_logits_composed(st, p->id, &pc, err, errlen);
    if (rc0) return rc0;
    if (cc != pc) {
        if ((rc0 = lab_store_topk_same(st, p->id, c->id, &same, err, errlen))) return rc0;
        if (same) {
            snprintf(f.message, sizeof f.message,
                     "logits hash definition changed (the previous run's is the single-stream hash, this one's is "
                     "composed from per-sequence hashes); the stored top-k ids and log-probs are bit-identical at "
                     "every position: unchanged");
            return put_finding(st, nightly, &f, n_reg, err, errlen);
        }
    }
    double *kl = NULL;
    int64_t n = 0;
    int exact = 0;
    char kerr[512] = "";
    double mean = NAN, mx = NAN;
    if (lab_position_kl(st, p->id, c->id, &kl, &n, &exact, kerr, sizeof kerr) == 0 && n > 0) {
        mean = 0;
        mx = 0;
        for (int64_t i = 0; i < n; i++) {
            mean += kl[i];
            if (kl[i] > mx) mx = kl[i];
        }
        mean /= (double)n;
    }
    free(kl);
    f.regression = 1;
    f.value = mean;
    snprintf(f.evidence, sizeof f.evidence,
             "{\"logits_sha256\":\"%s\",\"prev_logits_sha256\":\"%s\",\"kl_mean\":%.6g,\"kl_max\":%.6g,\"kl_exact\":%d,"
             "\"positions\":%lld}", c->logits, p->logits, isnan(mean) ? -1.0 : mean, isnan(mx) ? -1.0 : mx, exact,
             (long long)n);
    if (isnan(mean))
        snprintf(f.message, sizeof f.message,
                 "logits changed on a deterministic arm (cpu, same model, dataset and knobs): hash %.12s -> %.12s; KL not "
                 "measurable: %s", p->logits, c->logits, kerr);
    else
        snprintf(f.message, sizeof f.message,
                 "logits changed on a deterministic arm (cpu, same model, dataset and knobs): hash %.12s -> %.12s; "
                 "KL(previous || current) per position mean %.3g, max %.3g nats over %lld positions (%s); code %s -> %s",
                 p->logits, c->logits, mean, mx, (long long)n, exact ? "exact, f16 full logits" : "top-k estimate",
                 p->code_version, c->code_version);
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

/* ------------------------------------------------------------ throughput (judged in nightly_perf.c) */

/* An acknowledged throughput drop stays silent while tonight is not
 * significantly below the level that was acknowledged. Passing that level
 * is a new drop, and like any drop it must be confirmed: when the arm was
 * re-measured (rs), the re-measurement must be below the level too (one
 * slow stretch of a shared host moves a night, rarely both). */
static int perf_acknowledged(lab_store *st, const lab_nightly_perf *pe, const nset *rs, finding *f, char *err,
                             size_t errlen) {
    lab_nightly_ack a;
    if (!f->regression) return LAB_OK;
    int rc = find_ack(st, f->experiment, f->arm, "performance", &a, err, errlen);
    if (rc) return rc;
    if (!a.found) return LAB_OK;
    int nr = 0;
    double rlog = rs ? lab_nightly_perf_arm_mean(rs, f->arm, pe->norm, &nr, NULL) : NAN;
    int below = !isnan(a.value) && a.value > 0 && log(f->value / a.value) < -pe->thr;
#ifdef VT_MUTATE_ACK_UNCONFIRMED
    nr = 0;   /* mutation: the re-measurement ignored */
#endif
    if (below && nr && rlog - log(a.value) >= -pe->thr) below = 0;
    if (!below) mark_acknowledged(f, &a);
    else evidence_add(f->evidence, sizeof f->evidence, "\"ack_exceeded\":1");
    return LAB_OK;
}

/* The message and evidence of a throughput finding that was judged (pe->thr
 * known); rs: the re-measurements. Returns 0 when it is within noise and
 * there is nothing to say. */
static int perf_judged(const lab_nightly_perf *pe, const nset *rs, finding *f) {
    double ratio = exp(pe->d);
    const char *unit = pe->norm ? "tokens/s per host sgemm GFLOP/s" : "tokens/s";
    /* The re-measurement of a suspected drop (runs of the arm made after the
     * comparison first saw it): a drop is flagged only if it is confirmed. */
    int nr = 0;
    double rlog = rs ? lab_nightly_perf_arm_mean(rs, f->arm, pe->norm, &nr, NULL) : NAN;
    int suspect = lab_nightly_perf_suspect(pe), confirmed = suspect && (!nr || rlog - pe->base < -pe->thr);
    f->regression = confirmed;
    snprintf(f->evidence, sizeof f->evidence,
             "{\"ratio\":%.6g,\"threshold_ratio\":%.6g,\"se_log\":%.6g,\"within_sd_log\":%.6g,\"between_sd_log\":%.6g,"
             "\"n\":%d,\"prev_n\":%d,\"baseline_nights\":%d,\"per_host_speed\":%d}", ratio, exp(-pe->thr), pe->se,
             isnan(pe->sw) ? -1.0 : pe->sw, isnan(pe->sb) ? -1.0 : pe->sb, pe->nc, pe->np, pe->nb, pe->norm);
    if (nr) evidence_add(f->evidence, sizeof f->evidence, "\"remeasured_ratio\":%.6g,\"remeasured_n\":%d",
                         exp(rlog - pe->base), nr);
    if (!suspect && fabs(pe->d) < pe->thr) return 0;    /* within noise: nothing to say */
    const char *noise = pe->prior ? "night-to-night spread assumed until 5 nights are recorded"
                        : !isnan(pe->sb) && pe->sb * sqrt(2.0) >= pe->se ? "night-to-night spread" : "spread of repeats";
    char conf[200] = "";
    if (suspect && nr)
        snprintf(conf, sizeof conf, "; re-measured: x%.3f over %d repeat(s), %s", exp(rlog - pe->base), nr,
                 confirmed ? "confirmed" : "not confirmed: noise, noted");
    else if (suspect)
        snprintf(conf, sizeof conf, "; not re-measured");
    snprintf(f->message, sizeof f->message,
             "throughput %.4g -> %.4g %s (x%.3f over %d repeats vs the median of %d nightlies); noise: standard "
             "error %.1f%% (%s), so a drop below x%.3f is flagged%s%s", f->prev_value, f->value, unit, ratio, pe->nc,
             pe->nb, 100 * (exp(pe->se) - 1), noise, exp(-pe->thr), suspect ? "" : "; a speedup, noted", conf);
    return 1;
}

static int compare_perf(lab_store *st, int64_t nightly, const char *eid, const char *arm, const nset *cs, const nset *ps,
                        const nset *rs, const lab_nightly_opts *o, int64_t *n_reg, char *err, size_t errlen) {
    lab_nightly_perf pe;
    int rc = lab_nightly_perf_evaluate(st, nightly, eid, arm, cs, ps, o, &pe, err, errlen);
    if (rc || !pe.have) return rc;
    finding f;
    finding_init(&f, eid, arm, "performance", 0);
    f.run_id = pe.cid;
    f.prev_run_id = pe.pid;
    f.value = exp(pe.cur);
    f.prev_value = exp(pe.base);
    if (isnan(pe.thr)) {
        double ratio = exp(pe.d);
        snprintf(f.message, sizeof f.message,
                 "throughput %.4g -> %.4g %s (x%.3f); not judged: no noise estimate (one repeat per night and fewer "
                 "than 3 earlier nightlies; set \"repeats\" >= 2 in the experiment)", f.prev_value, f.value,
                 pe.norm ? "tokens/s per host sgemm GFLOP/s" : "tokens/s", ratio);
        snprintf(f.evidence, sizeof f.evidence, "{\"ratio\":%.6g,\"n\":%d,\"prev_n\":%d}", ratio, pe.nc, pe.np);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    if (!perf_judged(&pe, rs, &f)) return LAB_OK;
    if ((rc = perf_acknowledged(st, &pe, rs, &f, err, errlen))) return rc;
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

/* ------------------------------------------------------------ per run, per arm, per experiment, per nightly */

static int compare_checks(lab_store *st, int64_t nightly, const char *eid, const nrun *r, int64_t *n_reg, char *err,
                          size_t errlen) {
    finding f;
    finding_init(&f, eid, r->arm, "check", 1);
    f.run_id = r->id;
    if (strcmp(r->status, "FINISHED")) {
        snprintf(f.message, sizeof f.message, "run %lld (repeat %lld) %s: %s", (long long)r->id, (long long)r->rep, r->status,
                 r->error[0] ? r->error : "no error recorded");
    } else if (r->assertions_ok >= 0 && r->assertions_ok == r->expect_fail) {
        snprintf(f.message, sizeof f.message, "run %lld (repeat %lld): runtime assertions %s, but the arm declares they %s",
                 (long long)r->id, (long long)r->rep, r->assertions_ok ? "passed" : "failed",
                 r->expect_fail ? "fail (a replay that no longer reproduces its defect)" : "pass");
    } else return LAB_OK;
    return put_finding(st, nightly, &f, n_reg, err, errlen);
}

/* Repeats of one identity in the same night must agree bit for bit on cpu. */
static int compare_repeats(lab_store *st, int64_t nightly, const char *eid, const nset *cs, const char *arm,
                           int64_t *n_reg, char *err, size_t errlen) {
    const nrun *first = NULL;
    for (int i = 0; i < cs->n; i++) {
        const nrun *r = &cs->r[i];
        if (strcmp(r->arm, arm) || strcmp(r->status, "FINISHED") || strcmp(r->backend, "cpu") || !r->logits[0]) continue;
        if (!first) { first = r; continue; }
        if (!strcmp(first->logits, r->logits) || strcmp(first->knob_hash, r->knob_hash)) continue;
        finding f;
        finding_init(&f, eid, arm, "numerics", 1);
        f.run_id = r->id;
        f.prev_run_id = first->id;
        snprintf(f.message, sizeof f.message,
                 "not reproducible: repeats %lld and %lld of the same identity (cpu) have different logits (%.12s vs %.12s)",
                 (long long)first->rep, (long long)r->rep, first->logits, r->logits);
        return put_finding(st, nightly, &f, n_reg, err, errlen);
    }
    return LAB_OK;
}

/* Once per arm of tonight's runs cs (r: its first run): the repeats agree,
 * and against the previous nightly's ps: accuracy, numerics, throughput. */
static int compare_arm(lab_store *st, int64_t cur, int64_t prev, const char *eid, const nrun *r, const nset *cs,
                       const nset *ps, const nset *rs, const lab_nightly_opts *o, int64_t *n_reg, char *err,
                       size_t errlen) {
    int rc = compare_repeats(st, cur, eid, cs, r->arm, n_reg, err, errlen);
    if (rc || !prev) return rc;
    const nrun *c0 = find_run(cs, r->arm, 0), *p0 = find_run(ps, r->arm, 0);
    if (!p0) {
        finding f;
        finding_init(&f, eid, r->arm, "check", 0);
        snprintf(f.message, sizeof f.message, "no finished run of this arm in nightly %lld: nothing to compare with",
                 (long long)prev);
        return put_finding(st, cur, &f, n_reg, err, errlen);
    }
    if (c0 && !c0->is_ref && (rc = compare_accuracy(st, cur, eid, c0, p0, o, n_reg, err, errlen))) return rc;
    if (c0 && (rc = compare_numerics(st, cur, eid, c0, p0, n_reg, err, errlen))) return rc;
    return compare_perf(st, cur, eid, r->arm, cs, ps, rs, o, n_reg, err, errlen);
}

/* Every finding of experiment eid in nightly cur. */
static int compare_experiment(lab_store *st, int64_t cur, const char *eid, const lab_nightly_opts *o, int64_t *n_reg,
                              char *err, size_t errlen) {
    nset cs = {0}, ps = {0}, rs = {0};
    int64_t prev = 0;
    int rc = lab_store_nightly_previous(st, cur, eid, &prev, err, errlen);
    if (!rc) rc = load_runs(st, cur, eid, &cs, err, errlen);
    if (!rc && prev) rc = load_runs(st, prev, eid, &ps, err, errlen);
    if (!rc) rc = lab_store_nightly_runs(st, cur, eid, 1, &rs, err, errlen);
    if (!rc && !prev) {
        finding f;
        finding_init(&f, eid, "", "check", 0);
        snprintf(f.message, sizeof f.message, "first nightly of this experiment: a baseline, nothing to compare with");
        rc = put_finding(st, cur, &f, n_reg, err, errlen);
    }
    for (int64_t i = 0; i < cs.n && !rc; i++) {
        const nrun *r = &cs.r[i];
        rc = compare_checks(st, cur, eid, r, n_reg, err, errlen);
        if (!rc && (i == 0 || strcmp(cs.r[i - 1].arm, r->arm)))
            rc = compare_arm(st, cur, prev, eid, r, &cs, &ps, &rs, o, n_reg, err, errlen);
    }
    nset_free(&cs);
    nset_free(&ps);
    nset_free(&rs);
    return rc;
}

/* The comparison inside the caller's batch. (Confounds are not findings:
 * nightly_confounds.c judges them by cause.) */
static int compare_all(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_reg, char *err,
                       size_t errlen) {
    char **exps = NULL, now[32];
    int64_t ne = 0;
    int rc = lab_store_nightly_clear_findings(st, cur, err, errlen);
    if (!rc) rc = lab_store_nightly_experiments(st, cur, &exps, &ne, err, errlen);
    for (int64_t e = 0; e < ne && !rc; e++) rc = compare_experiment(st, cur, exps[e], o, n_reg, err, errlen);
    lab_nightly_strings_free(exps, ne);
    /* An acknowledgement ends when a nightly of its experiment no longer has
     * the finding (fixed, or the baseline moved): a recurrence alerts again. */
    lab_now_iso(now);
    if (!rc) rc = lab_store_nightly_clear_acks(st, cur, now, err, errlen);
    return rc;
}

int lab_nightly_compare(lab_store *st, int64_t cur, const lab_nightly_opts *o, int64_t *n_regressions, char *err,
                        size_t errlen) {
    *n_regressions = 0;
    int rc = lab_store_batch_begin(st, err, errlen);
    if (rc) return rc;
    if ((rc = compare_all(st, cur, o, n_regressions, err, errlen))) {
        lab_store_batch_rollback(st);
        *n_regressions = 0;
        return rc;
    }
    return lab_store_batch_commit(st, err, errlen);
}
