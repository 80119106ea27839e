/*
 * run_record.c — the rows of a run, built from its pass (see run_record.h).
 */
#include "run_record.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* Checks the arm's expectations against its probes. */
static void check_expect(const lab_arm *a, const lab_pass_acc *acc, lab_expect_result *out) {
    for (int64_t i = 0; i < a->n_expect; i++) {
        lab_expect_result *x = &out[i];
        memset(x, 0, sizeof *x);
        snprintf(x->site, sizeof x->site, "%s", a->expect_sites[i]);
        snprintf(x->expected, sizeof x->expected, "%s", a->expect_dtypes[i]);
        x->ok = 1;
        for (int64_t p = 0; p < acc->n_probes; p++) {
            const vt_probe *pr = &acc->probes[p];
            if (strcmp(pr->site, x->site)) continue;
            x->records++;
            char tok[16];   /* ",bf16," style match: "f16" must not be found inside "bf16" */
            snprintf(tok, sizeof tok, ",%s,", pr->dtype);
            char seen[sizeof x->seen + 2];
            snprintf(seen, sizeof seen, ",%s,", x->seen);
            if (!strstr(seen, tok) && strlen(x->seen) + strlen(pr->dtype) + 2 < sizeof x->seen) {
                if (*x->seen) strcat(x->seen, ",");
                strcat(x->seen, pr->dtype);
            }
            if (x->ok && strcmp(pr->dtype, x->expected)) {
                x->ok = 0;
                if (pr->layer >= 0)
                    snprintf(x->reason, sizeof x->reason,
                             "knob did not take effect: arm expects %s %s, probe saw %s (layer %d)", x->site,
                             x->expected, pr->dtype, pr->layer);
                else
                    snprintf(x->reason, sizeof x->reason, "knob did not take effect: arm expects %s %s, probe saw %s",
                             x->site, x->expected, pr->dtype);
            }
        }
        if (x->records == 0) {
            x->ok = 0;
            snprintf(x->reason, sizeof x->reason,
                     "knob did not take effect: arm expects %s %s, but no probe record exists at that site", x->site,
                     x->expected);
        }
    }
}

static double kl_quantile(const double *kl, int64_t n, double q) {
    double *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return NAN;
    memcpy(tmp, kl, (size_t)n * sizeof *tmp);
    double v = lab_quantile(tmp, n, q);
    free(tmp);
    return v;
}

void lab_run_record_free(lab_run_record *r) {
    free(r->probe_ok);
    free(r->ex);
    free(r->kn);
    free(r->kv);
    free(r->knum);
    free(r->cmp.div_layer);
    free(r->cmp.div_site);
    free(r->cmp.div_value);
    lab_buf_free(&r->reason);
}

/* Probe invariants and the arm's expectations: r->ok and r->reason. */
static void record_assertions(const lab_arm *a, const lab_pass_acc *acc, lab_run_record *r) {
    r->ok = 1;
    for (int64_t i = 0; i < acc->n_probes; i++) {
        const vt_probe *p = &acc->probes[i];
        /* rows_unwritten is -1 when not audited: only a positive count fails. */
        r->probe_ok[i] = p->violations == 0 && p->rows_unwritten <= 0;
        if (!r->probe_ok[i]) {
            if (r->ok) lab_buf_printf(&r->reason, "probe %s layer %d: %s", p->site, p->layer,
                                      *p->detail ? p->detail : "invariant violated");
            r->ok = 0;
        }
    }
    if (acc->probes_lost) {
        lab_buf_printf(&r->reason, "%s%lld probe record(s) lost (out of memory): the probes cannot vouch for this run",
                       r->reason.len ? "; " : "", (long long)acc->probes_lost);
        r->ok = 0;
    }
    check_expect(a, acc, r->ex);
    for (int64_t i = 0; i < r->n_ex; i++)
        if (!r->ex[i].ok) {
            lab_buf_printf(&r->reason, "%s%s", r->reason.len ? "; " : "", r->ex[i].reason);
            r->ok = 0;
        }
}

/* The run's own metrics: perplexity, speed, the f16 store's noise. */
static void record_metrics(const lab_experiment *e, const lab_pass_acc *acc, lab_run_record *r) {
    if (e->metrics & LAB_M_PPL) {
        double nll = acc->nll_n ? acc->nll_sum / (double)acc->nll_n : NAN;
        r->mn[r->nm] = "perplexity"; r->mv[r->nm++] = exp(nll);
        r->mn[r->nm] = "nll_mean"; r->mv[r->nm++] = nll;
    }
    r->mn[r->nm] = "tokens_per_s";
    r->mv[r->nm++] = acc->forward_s > 0 ? (double)e->ds.offsets[e->ds.n_seq] / acc->forward_s : NAN;
    if (acc->full) {
        r->mn[r->nm] = "f16_store_kl_mean"; r->mv[r->nm++] = acc->f16_n ? acc->f16_kl_sum / (double)acc->f16_n : NAN;
        r->mn[r->nm] = "f16_store_kl_max"; r->mv[r->nm++] = acc->f16_kl_max;
        r->mn[r->nm] = "f16_store_max_abs_dlogit"; r->mv[r->nm++] = acc->f16_dlogit_max;
    }
}

/* Mean and standard error of the mean of v[0..n) (NaNs skipped); *m the count. */
static void mean_se(const double *v, int64_t n, double *mean, double *se, int64_t *m) {
    double s = 0, s2 = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] == v[i]) { s += v[i]; k++; }
    *mean = k ? s / (double)k : NAN;
    for (int64_t i = 0; i < n; i++)
        if (v[i] == v[i]) s2 += (v[i] - *mean) * (v[i] - *mean);
    *se = k > 1 ? sqrt(s2 / (double)(k - 1) / (double)k) : NAN;
    *m = k;
}

static void put_metric(lab_run_record *r, const char *name, double v) {
    if (r->nm < LAB_RUN_MAX_METRICS) { r->mn[r->nm] = name; r->mv[r->nm++] = v; }
}

/* The distributions of a compared run, as llama-perplexity's --kl-divergence
 * reports them: KL mean with its standard error and quantiles, top-1
 * agreement with its standard error, delta-p (p of the reference's top-1)
 * mean +- se and quantiles, and the perplexity ratio exp(mean dNLL) with its
 * standard error (delta method), over the positions with a next token.
 * LAB_ENOMEM when a quantile's scratch cannot be had. */
static int record_distribution(const lab_pass_acc *acc, lab_run_record *r) {
    int64_t n = acc->n_scored, m;
    if (n <= 0) return LAB_OK;
    double mean, se;
    mean_se(acc->kl, n, &mean, &se, &m);
    put_metric(r, "kl_mean_se", se);
    double *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return LAB_ENOMEM;
    static const struct { const char *name; double q; } klq[] = {
        {"kl_median", 0.5}, {"kl_p90", 0.9}, {"kl_p999", 0.999}};
    memcpy(tmp, acc->kl, (size_t)n * sizeof *tmp);   /* sorted by the first quantile, reused by the rest */
    for (size_t i = 0; i < sizeof klq / sizeof klq[0]; i++) put_metric(r, klq[i].name, lab_quantile(tmp, n, klq[i].q));
    double p1 = (double)acc->agree / (double)n;
    put_metric(r, "top1_agree_se", sqrt(p1 * (1 - p1) / (double)n));
    mean_se(acc->dp, n, &mean, &se, &m);
    put_metric(r, "dp_mean", mean);
    put_metric(r, "dp_mean_se", se);
    static const struct { const char *name; double q; } dpq[] = {
        {"dp_p01", 0.01}, {"dp_p05", 0.05}, {"dp_median", 0.5}, {"dp_p95", 0.95}, {"dp_p99", 0.99}};
    memcpy(tmp, acc->dp, (size_t)n * sizeof *tmp);
    for (size_t i = 0; i < sizeof dpq / sizeof dpq[0]; i++) put_metric(r, dpq[i].name, lab_quantile(tmp, n, dpq[i].q));
    free(tmp);
    mean_se(acc->dnll, n, &mean, &se, &m);
    if (m > 0) {
        put_metric(r, "ppl_ratio", exp(mean));
        put_metric(r, "ppl_ratio_se", exp(mean) * se);
    }
    return LAB_OK;
}

/* Per-layer relative L2 of the residuals, and the first beyond tolerance. */
static int record_divergence(const lab_experiment *e, const lab_pass_acc *acc, int64_t L, lab_comparison *c,
                             char *err, size_t errlen) {
    c->div_tolerance = e->div_tolerance;
    c->n_div = L * 2;
    c->div_layer = calloc((size_t)(L * 2), sizeof *c->div_layer);
    c->div_site = calloc((size_t)(L * 2), sizeof *c->div_site);
    c->div_value = calloc((size_t)(L * 2), sizeof *c->div_value);
    if (!c->div_layer || !c->div_site || !c->div_value) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int64_t i = 0; i < L * 2; i++) {
        c->div_layer[i] = i / 2;
        c->div_site[i] = (int)(i % 2);
        double den = acc->div_den[i], num = acc->div_num[i];
        c->div_value[i] = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
        if (c->first_div_layer < 0 && c->div_value[i] > e->div_tolerance) {
            c->first_div_layer = i / 2;
            c->first_div_site = (int)(i % 2);
            c->first_div_value = c->div_value[i];
        }
    }
    return LAB_OK;
}

/* The comparison with the reference: top-1 agreement, KL, |dlogit|, delta-p,
 * McNemar against the reference itself, per-layer divergence. */
static int record_comparison(const lab_experiment *e, const lab_pass_acc *acc, const lab_ref_cache *ref,
                             int64_t n_layers, lab_comparison *c, char *err, size_t errlen) {
    c->reference_run_id = ref->run_id;
    c->reference_recomputed = ref->recomputed;
    c->reference_hash_match = ref->recomputed ? ref->hash_match : -1;
    c->n_scored = acc->n_scored;
    c->top1_k = acc->agree;
    c->top1_n = acc->n_scored;
    lab_wilson(c->top1_k, c->top1_n, LAB_Z95, &c->top1_lo, &c->top1_hi);
    c->kl_mean = c->kl_p99 = c->kl_max = c->max_abs_dlogit = c->rms_dp = c->mcnemar_p = NAN;
    if (e->metrics & LAB_M_KL) {
        double sum = 0, mx = 0;
        for (int64_t i = 0; i < acc->n_scored; i++) {
            sum += acc->kl[i];
            if (acc->kl[i] > mx) mx = acc->kl[i];
        }
        c->kl_mean = acc->n_scored ? sum / (double)acc->n_scored : NAN;
        c->kl_max = mx;
        c->kl_p99 = kl_quantile(acc->kl, acc->n_scored, 0.99);
    }
    if (e->metrics & LAB_M_MAXDIFF) c->max_abs_dlogit = acc->maxdiff;
    if (e->metrics & LAB_M_RMSDP) c->rms_dp = acc->n_scored ? sqrt(acc->dp2_sum / (double)acc->n_scored) : NAN;
    /* Outcome "agrees with the reference's top-1": the reference agrees with
     * itself, so b = disagreements and c = 0. Pairs of arms get their own
     * test (the runner's pair_tests). */
    c->mcnemar_b = c->top1_n - c->top1_k;
    c->mcnemar_c = 0;
    if (e->metrics & LAB_M_MCNEMAR) c->mcnemar_p = lab_mcnemar_exact(c->mcnemar_b, 0);
    c->first_div_layer = -1;
    if (!acc->div_num) return LAB_OK;
    c->div_sequences = ref->n_div_seq;
    return record_divergence(e, acc, n_layers, c, err, errlen);
}

/* The decision's verdict on top-1 agreement. */
static void record_verdict(const lab_experiment *e, const lab_comparison *c, lab_verdict_row *v) {
    snprintf(v->metric, sizeof v->metric, "%s", e->decision_metric);
    v->threshold = e->decision_threshold;
    v->direction_ge = e->decision_ge;
    v->k = c->top1_k;
    v->n = c->top1_n;
    v->value = v->n ? (double)v->k / (double)v->n : NAN;
    v->lo = c->top1_lo;
    v->hi = c->top1_hi;
    snprintf(v->verdict, sizeof v->verdict, "%s",
             lab_verdict_name(lab_decide(v->lo, v->hi, v->threshold, v->direction_ge)));
}

/* Knobs the arm set that a command engine did not apply: failed
 * expectations at "knob:NAME" (rule R3, a knob that never took effect). */
static int64_t unapplied_knobs(const lab_arm *a, const lab_engine_hello *h, lab_expect_result *out) {
    int64_t n = 0;
    for (int64_t i = 0; i < a->n_knobs; i++) {
        const lab_engine_knob *kn = lab_engine_hello_knob(h, a->knob_names[i]);
        if (!kn || (kn->read && !strcmp(kn->value, a->knob_values[i]))) continue;
        lab_expect_result *x = &out[n++];
        memset(x, 0, sizeof *x);
        snprintf(x->site, sizeof x->site, "knob:%s", kn->name);
        snprintf(x->expected, sizeof x->expected, "applied");
        snprintf(x->seen, sizeof x->seen, "%s", kn->read ? "another value" : "not read");
        if (kn->read)
            snprintf(x->reason, sizeof x->reason, "knob did not take effect: the arm sets %s=%s, the engine "
                     "reports %s", kn->name, a->knob_values[i], kn->value);
        else
            snprintf(x->reason, sizeof x->reason, "knob did not take effect: the arm sets %s=%s, the engine "
                     "says it did not read it", kn->name, a->knob_values[i]);
    }
    return n;
}

int lab_run_record_build(const lab_experiment *e, int64_t arm, const lab_engine_req *req,
                         const lab_engine_hello *hello, const lab_pass_acc *acc, const lab_ref_cache *ref,
                         int64_t n_layers, lab_run_record *r, char *err, size_t errlen) {
    const lab_arm *a = &e->arms[arm];
    int command = hello && hello->json;
    int64_t nk = command ? hello->n_knobs : vt_knob_count();
    r->probe_ok = calloc((size_t)(acc->n_probes > 0 ? acc->n_probes : 1), sizeof *r->probe_ok);
    r->ex = calloc((size_t)(a->n_expect + a->n_knobs + 1), sizeof *r->ex);
    r->kn = calloc((size_t)nk + 1, sizeof *r->kn);
    r->kv = calloc((size_t)nk + 1, sizeof *r->kv);
    r->knum = calloc((size_t)nk + 1, sizeof *r->knum);
    if (!r->probe_ok || !r->ex || !r->kn || !r->kv || !r->knum) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    r->n_ex = a->n_expect + (command ? unapplied_knobs(a, hello, r->ex + a->n_expect) : 0);
    record_assertions(a, acc, r);
    if (r->reason.oom) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    r->n_kn = nk;
    for (int64_t i = 0; i < nk; i++) {
        if (command) {
            r->kn[i] = hello->knobs[i].name;
            r->kv[i] = hello->knobs[i].value;
            r->knum[i] = hello->knobs[i].numeric;
            continue;
        }
        const vt_knob_info *ki = vt_knob_at((int)i);
        r->kn[i] = ki->name;
        r->kv[i] = vt_knobset_get(req->ks, ki->name);
        r->knum[i] = ki->numeric;
    }
    record_metrics(e, acc, r);
    if (!ref) return LAB_OK;
    int rc0 = record_distribution(acc, r);
    if (rc0) return lab_errf(err, errlen, rc0, "out of memory");
    int rc = record_comparison(e, acc, ref, n_layers, &r->cmp, err, errlen);
    if (!rc && e->has_decision) record_verdict(e, &r->cmp, &r->vr);
    return rc;
}

void lab_run_result_fill(lab_run_result *res, const lab_experiment *e, int64_t arm, int64_t vocab,
                         const lab_pass_acc *acc, lab_run_record *r, int compared, int with_verdict) {
    memset(res, 0, sizeof *res);
    res->n_sequences = e->ds.n_seq;
    res->n_tokens = e->ds.offsets[e->ds.n_seq];
    res->n_scored = acc->n_scored;
    res->forward_s = acc->forward_s;
    memcpy(res->logits_sha256, acc->hash_hex, 65);
    res->assertions_ok = r->ok;
    res->assertion_reason = r->ok ? NULL : r->reason.data;
    res->n_knobs = r->n_kn;
    res->knob_names = r->kn;
    res->knob_values = r->kv;
    res->knob_numeric = r->knum;
    res->n_probes = acc->n_probes;
    res->probes = acc->probes;
    res->probe_ok = r->probe_ok;
    res->n_expect = r->n_ex;
    res->expect = r->ex;
    res->n_metrics = r->nm;
    res->metric_names = r->mn;
    res->metric_values = r->mv;
    res->top_k = acc->top_k;
    res->offsets = e->ds.offsets;
    res->topk_ids = acc->topk_ids;
    res->topk_logprobs = acc->topk_lp;
    res->vocab = vocab;
    res->full_f16 = acc->full;
    res->cmp = compared ? &r->cmp : NULL;
    res->verdict = with_verdict ? &r->vr : NULL;
    res->seq_base = e->ds.seq_base;
    res->seq = acc->seq;
    res->seq_kl = acc->kl;
    res->seq_dp = acc->dp;
    res->seq_dnll = acc->dnll;
    res->n_layers = acc->n_layers;
}

int lab_run_record_rebuild(const lab_rebuild_spec *sp, const lab_pass_acc *acc, const lab_ref_cache *ref,
                           lab_run_record *r, char *err, size_t errlen) {
    /* the experiment as far as the record's functions read it */
    lab_experiment e;
    memset(&e, 0, sizeof e);
    e.metrics = sp->metrics;
    e.div_tolerance = sp->div_tolerance;
    e.has_decision = sp->has_decision;
    snprintf(e.decision_metric, sizeof e.decision_metric, "%s", sp->decision_metric ? sp->decision_metric : "");
    e.decision_threshold = sp->decision_threshold;
    e.decision_ge = sp->decision_ge;
    e.ds.n_seq = sp->n_seq;
    e.ds.offsets = (int64_t *)sp->offsets;
    lab_arm a;
    memset(&a, 0, sizeof a);
    a.n_expect = sp->n_expect;
    a.expect_sites = sp->expect_sites;
    a.expect_dtypes = sp->expect_dtypes;
    r->probe_ok = calloc((size_t)(acc->n_probes > 0 ? acc->n_probes : 1), sizeof *r->probe_ok);
    r->ex = calloc((size_t)(sp->n_expect + sp->n_knob_ex + 1), sizeof *r->ex);
    r->kn = calloc((size_t)sp->n_kn + 1, sizeof *r->kn);
    r->kv = calloc((size_t)sp->n_kn + 1, sizeof *r->kv);
    r->knum = calloc((size_t)sp->n_kn + 1, sizeof *r->knum);
    if (!r->probe_ok || !r->ex || !r->kn || !r->kv || !r->knum) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    memcpy(r->ex + sp->n_expect, sp->knob_ex, (size_t)sp->n_knob_ex * sizeof *r->ex);
    r->n_ex = sp->n_expect + sp->n_knob_ex;
    record_assertions(&a, acc, r);
    if (r->reason.oom) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    r->n_kn = sp->n_kn;
    for (int64_t i = 0; i < sp->n_kn; i++) {
        r->kn[i] = sp->kn[i];
        r->kv[i] = sp->kv[i];
        r->knum[i] = sp->knum[i];
    }
    record_metrics(&e, acc, r);
    if (!ref) return LAB_OK;
    int rc0 = record_distribution(acc, r);
    if (rc0) return lab_errf(err, errlen, rc0, "out of memory");
    int rc = record_comparison(&e, acc, ref, sp->n_layers, &r->cmp, err, errlen);
    if (!rc && e.has_decision) record_verdict(&e, &r->cmp, &r->vr);
    return rc;
}
