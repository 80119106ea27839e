/*
 * cmd_query.c — the read side of results.db: `vtlab runs`, `show`, `compare`
 * and `export`.
 *
 * These commands never write the database (they are meant for a store opened
 * with lab_store_open_readonly), so they are safe to run while a sweep is
 * writing: WAL readers see the last committed state. What they print is read
 * first, through the typed readers of store_query.h, each of which reads its
 * queries to their end: a corrupt page, an I/O error or a corrupt row met
 * half-way is an error naming the file, never a partial answer with exit 0.
 * This file only formats. Output for people goes to stdout as aligned text;
 * `export` writes JSON (built with cJSON, so every string is escaped) or CSV
 * for other tools, to a stream or, atomically, to a file
 * (lab_cmd_export_file).
 */
#include "cmd_query.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "store.h"
#include "store_annot.h"
#include "store_query.h"
#include "store_report.h"
#include "util.h"


/* ------------------------------------------------------------ text out */

/* The text of runs, show and compare is built in one buffer and written
 * with every control character but newline and tab shown as '?'
 * (lab_write_shown, util.c): names, tags, notes and reasons come from a database
 * that anyone may have written with sqlite3, and an escape sequence in an
 * arm's name must not move the reader's cursor or recolour the terminal. */
static FILE *g_text;

__attribute__((format(printf, 1, 2))) static void tprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(g_text ? g_text : stdout, fmt, ap);
    va_end(ap);
}

/* Starts the buffer (text goes straight to stdout when there is no memory
 * for one: shown unsanitised rather than not at all). */
static void text_begin(char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    g_text = open_memstream(buf, len);
}

/* Writes the buffer shown, and ends it; rc passes through. */
static int text_end(char **buf, size_t *len, int rc) {
    if (g_text) {
        fclose(g_text);
        g_text = NULL;
        lab_write_shown(stdout, *buf, *len);
    }
    free(*buf);
    *buf = NULL;
    return rc;
}

/* LAB_EINPUT "run ID: no such run in the database" unless run id exists. */
static int need_run(lab_store *st, int64_t id, char *err, size_t errlen) {
    int found = 0;
    int rc = lab_query_run_exists(st, id, &found, err, errlen);
    if (rc) return rc;
    if (!found) return lab_errf(err, errlen, LAB_EINPUT, "run %lld: no such run in the database", (long long)id);
    return LAB_OK;
}

/* Prints json (indented) and a newline to out; `what` names a failed write. */
static int print_json(cJSON *json, FILE *out, const char *what, char *err, size_t errlen) {
    char *text = cJSON_Print(json);
    if (!text) return lab_oom(err, errlen);
    fprintf(out, "%s\n", text);
    free(text);
    return ferror(out) ? lab_errf(err, errlen, LAB_EIO, "%s: write failed", what) : LAB_OK;
}

/* ------------------------------------------------------------ runs */

/* `vtlab runs --json`: the listing's rows as a JSON array of objects (the
 * columns by name, NULL as null), for scripts. */
static int runs_json(lab_store *st, const lab_query_filter *f, char *err, size_t errlen) {
    cJSON *arr = NULL;
    int rc = lab_query_runs_json(st, f, &arr, err, errlen);
    if (rc) return rc;
    rc = print_json(arr, stdout, "runs", err, errlen);
    cJSON_Delete(arr);
    return rc;
}

/* The arm column's text: "ARM" or "ARM#REPEAT". */
static void arm_text(const lab_query_run_row *r, char *arm, size_t n) {
    if (r->repeat > 0) snprintf(arm, n, "%s#%lld", r->arm, (long long)r->repeat);
    else snprintf(arm, n, "%s", r->arm);
}

/* One row; we, wa: the experiment and arm columns' widths (the longest name
 * in the listing, at least the default), so names are whole and columns
 * aligned. The engine (lab_engine_label) is the last column: its width
 * varies, and scripts that read the columns before it keep their places. */
static void run_line(const lab_query_run_row *r, int we, int wa) {
    char arm[80], top1[48] = "-", kl[24] = "-", asrt[16] = "-", div[16] = "-", engine[160];
    arm_text(r, arm, sizeof arm);
    if (r->has_assertions) snprintf(asrt, sizeof asrt, "%s%s", r->assertions_ok ? "ok" : "FAIL", r->replay ? "*" : "");
    if (r->has_top1)
        snprintf(top1, sizeof top1, "%lld/%lld [%.2f,%.2f]", (long long)r->top1_k, (long long)r->top1_n, r->top1_lo,
                 r->top1_hi);
    if (r->has_kl) snprintf(kl, sizeof kl, "%.3g", r->kl_mean);
    if (r->has_div) snprintf(div, sizeof div, "L%lld %s", (long long)r->div_layer, r->div_ffn ? "ffn" : "attn");
    tprintf("%-5lld %-*s %-*s %-9s %-7s %-22s %-10s %-13s %-9s %-20s %s\n", (long long)r->id, we, r->experiment, wa, arm,
           r->status, asrt, top1, kl, r->verdict ? r->verdict : "-", div, r->started,
           lab_engine_label(&r->engine, engine, sizeof engine));
}

/* A tagged run's second line, "      tags: k=v, k2=v2" (the row's tags are
 * a JSON object's text, in key order: RUNS_TAGS); nothing for a run without
 * tags. The columns of the row above keep their places for scripts. */
static void run_tags_line(const lab_query_run_row *r) {
    cJSON *o = r->tags ? cJSON_Parse(r->tags) : NULL;
    if (cJSON_IsObject(o) && o->child) {
        tprintf("      tags:");
        for (const cJSON *t = o->child; t; t = t->next)
            tprintf("%s %s=%s", t == o->child ? "" : ",", t->string, cJSON_IsString(t) ? t->valuestring : "?");
        tprintf("\n");
    }
    cJSON_Delete(o);
}

int lab_cmd_runs(lab_store *st, const char *experiment, int json, char *err, size_t errlen) {
    lab_query_filter f = {0};
    f.experiment = experiment;
    return lab_cmd_runs_filtered(st, &f, json, err, errlen);
}

static int runs_text(lab_store *st, const lab_query_filter *f, char *err, size_t errlen);

int lab_cmd_runs_filtered(lab_store *st, const lab_query_filter *f, int json, char *err, size_t errlen) {
    if (json) return runs_json(st, f, err, errlen);
    char *buf;
    size_t len;
    text_begin(&buf, &len);
    return text_end(&buf, &len, runs_text(st, f, err, errlen));
}

static int runs_text(lab_store *st, const lab_query_filter *f, char *err, size_t errlen) {
    lab_query_runs runs;
    int rc = lab_query_runs_read(st, f, &runs, err, errlen);
    if (rc) return rc;
    int we = 18, wa = 28;
    for (int64_t i = 0; i < runs.n; i++) {
        char arm[80];
        arm_text(&runs.rows[i], arm, sizeof arm);
        if ((int)strlen(runs.rows[i].experiment) > we) we = (int)strlen(runs.rows[i].experiment);
        if ((int)strlen(arm) > wa) wa = (int)strlen(arm);
    }
    tprintf("%-5s %-*s %-*s %-9s %-7s %-22s %-10s %-13s %-9s %-20s %s\n", "id", we, "experiment", wa, "arm", "status",
           "asserts", "top1 k/n [95% CI]", "KL mean", "verdict", "diverges", "started", "engine");
    for (int64_t i = 0; i < runs.n; i++) {
        run_line(&runs.rows[i], we, wa);
        run_tags_line(&runs.rows[i]);
    }
    if (!runs.n) tprintf("(no runs)\n");
    else tprintf("asserts: ok / FAIL (runtime dtype assertions); * = the arm replays a defect and expects FAIL\n");
    lab_query_runs_free(&runs);
    return LAB_OK;
}

/* ------------------------------------------------------------ show */

static void show_comparison(const lab_query_comparison *c) {
    tprintf("comparison with reference run %lld%s\n", (long long)c->reference_run_id,
           c->recomputed ? (c->hash_match ? " (recomputed, hash matches)" : " (recomputed, HASH DIFFERS)") : "");
    tprintf("  top-1 agreement        %lld/%lld = %.4f  Wilson 95%% [%.4f, %.4f]\n", (long long)c->top1_k,
           (long long)c->top1_n, c->top1_n ? (double)c->top1_k / (double)c->top1_n : 0.0, c->top1_lo, c->top1_hi);
    tprintf("  KL(ref||arm) nats      mean %.4g  p99 %.4g  max %.4g\n", c->kl_mean, c->kl_p99, c->kl_max);
    tprintf("  max |dlogit|           %.4g\n", c->max_abs_dlogit);
    tprintf("  RMS dp (ref top-1)     %.4g\n", c->rms_dp);
    tprintf("  McNemar vs reference   b=%lld c=%lld p=%.4g\n", (long long)c->mcnemar_b, (long long)c->mcnemar_c,
           c->mcnemar_p);
    if (c->has_first_div)
        tprintf("  first divergence       layer %lld %s (rel L2 %.3g > tolerance %.3g)\n", (long long)c->first_div_layer,
               c->first_div_ffn ? "after FFN" : "after attention", c->first_div_value, c->div_tolerance);
    else if (c->has_tolerance)
        tprintf("  first divergence       none above tolerance %.3g\n", c->div_tolerance);
}

/* The run's row, the engine it went through (lab_engine_describe), its
 * knobs and metrics. */
static void show_head(int64_t id, const lab_query_run_detail *d) {
    char engine[320];
    tprintf("run %lld\n", (long long)id);
    for (int64_t i = 0; i < d->n_fields; i++) tprintf("  %-20s %s\n", d->fields[i].name, d->fields[i].value);
    tprintf("  %-20s %s\n", "engine", lab_engine_describe(&d->engine, engine, sizeof engine));
    tprintf("knobs (resolved; * = changes numerics)\n");
    for (int64_t i = 0; i < d->n_knobs; i++)
        tprintf("  %s%-28s %s\n", d->knobs[i].numeric ? "*" : " ", d->knobs[i].name, d->knobs[i].value);
    tprintf("metrics\n");
    for (int64_t i = 0; i < d->n_metrics; i++) tprintf("  %-28s %.6g\n", d->metrics[i].name, d->metrics[i].a);
}

static void show_divergence(const lab_query_run_detail *d) {
    if (d->n_divergence)
        tprintf("per-layer divergence (relative L2 of the residual stream)\n  layer  after-attn  after-ffn\n");
    for (int64_t i = 0; i < d->n_divergence; i++) {
        const lab_query_divergence *v = &d->divergence[i];
        if (!v->ffn) tprintf("  %5lld  %10.3g", (long long)v->layer, v->rel_l2);
        else tprintf("  %10.3g\n", v->rel_l2);
    }
}

static void show_verdicts(const lab_query_run_detail *d) {
    for (int64_t i = 0; i < d->n_verdicts; i++) {
        const lab_query_verdict *v = &d->verdicts[i];
        tprintf("verdict: %s  (%s %s %.3g; evidence %lld/%lld, Wilson 95%% [%.4f, %.4f])\n", v->verdict, v->metric,
               v->direction, v->threshold, (long long)v->k, (long long)v->n, v->lo, v->hi);
    }
    if (d->n_expectations) tprintf("expectations\n");
    for (int64_t i = 0; i < d->n_expectations; i++) {
        const lab_query_expectation *e = &d->expectations[i];
        tprintf("  %-18s expects %-5s saw %-10s %s %s\n", e->site, e->expected, e->seen, e->ok ? "ok" : "FAIL",
               e->reason);
    }
}

/* Probes: one line per site and dtype pair, with violations summed. */
static void show_probes(const lab_query_run_detail *d) {
    if (d->n_probes)
        tprintf("probes (records per site; bytes/row copied vs src/dst row bytes)\n"
               "  %-16s %-5s %-5s %7s %10s %7s %7s %7s %10s %9s %s\n", "site", "dtype", "src", "records", "rows",
               "B/row", "srcB", "dstB", "violations", "unwritten", "layers");
    for (int64_t i = 0; i < d->n_probes; i++) {
        const lab_query_probe_group *p = &d->probes[i];
        tprintf("  %-16s %-5s %-5s %7lld %10lld %7lld %7lld %7lld %10lld %9lld %lld..%lld %s\n", p->site, p->dtype,
               *p->src_dtype ? p->src_dtype : "-", (long long)p->records, (long long)p->rows,
               (long long)p->bytes_per_row, (long long)p->src_row_bytes, (long long)p->dst_row_bytes,
               (long long)p->violations, (long long)p->rows_unwritten, (long long)p->layer_min,
               (long long)p->layer_max, p->n_violated ? "VIOLATED" : "");
        if (p->n_violated && *p->first_detail) tprintf("      first: %s\n", p->first_detail);
    }
}

/* The run's tags and notes (`vtlab tag`, `vtlab note`), when it has any. */
static int show_annot(lab_store *st, int64_t id, char *err, size_t errlen) {
    lab_run_annot a;
    int rc = lab_store_run_annot(st, id, &a, err, errlen);
    if (rc) return rc;
    if (a.n_tags) tprintf("tags\n");
    for (int64_t i = 0; i < a.n_tags; i++) tprintf("  %-28s %s\n", a.keys[i], a.values[i]);
    if (a.n_notes) tprintf("notes\n");
    for (int64_t i = 0; i < a.n_notes; i++) tprintf("  %s  %s\n", a.note_at[i], a.notes[i]);
    lab_run_annot_free(&a);
    return LAB_OK;
}

static int show_text(lab_store *st, int64_t id, char *err, size_t errlen);

int lab_cmd_show(lab_store *st, int64_t id, char *err, size_t errlen) {
    char *buf;
    size_t len;
    text_begin(&buf, &len);
    return text_end(&buf, &len, show_text(st, id, err, errlen));
}

static int show_text(lab_store *st, int64_t id, char *err, size_t errlen) {
    int rc = need_run(st, id, err, errlen);
    if (rc) return rc;
    lab_query_run_detail d;
    if ((rc = lab_query_run_detail_read(st, id, &d, err, errlen))) return rc;
    show_head(id, &d);
    if ((rc = show_annot(st, id, err, errlen))) { lab_query_run_detail_free(&d); return rc; }
    for (int64_t i = 0; i < d.n_comparisons; i++) show_comparison(&d.comparisons[i]);
    show_divergence(&d);
    show_verdicts(&d);
    show_probes(&d);
    lab_query_run_detail_free(&d);
    return LAB_OK;
}

/* ------------------------------------------------------------ compare */

static int load_brief(lab_store *st, int64_t id, lab_query_brief *b, char *err, size_t errlen) {
    int found = 0;
    int rc = lab_query_brief_read(st, id, b, &found, err, errlen);
    if (rc) return rc;
    if (!found) return lab_errf(err, errlen, LAB_EINPUT, "run %lld: no such run in the database", (long long)id);
    return LAB_OK;
}

/* A metric of both runs with the difference and the ratio (B - A, B / A). */
static void metric_row(const char *name, double va, double vb) {
    tprintf("%-16s %-40.6g %-16.6g B-A %+.4g", name, va, vb, vb - va);
    if (va != 0 && isfinite(va) && isfinite(vb)) tprintf(", B/A %.4f", vb / va);
    tprintf("\n");
}

/* A field of both runs, marked when it differs. */
static void brief_row(const char *name, const char *fa, const char *fb) {
    tprintf("%-16s %-40.40s %-40.40s%s\n", name, fa, fb, strcmp(fa, fb) ? "  (differs)" : "");
}

/* A hash of both runs, whole (a hash cut to a column could hide where two
 * differ): one line when they are the same, A's and B's when not. */
static void hash_row(const char *name, const char *fa, const char *fb) {
    if (!strcmp(fa, fb)) tprintf("%-16s %s  (both)\n", name, fa[0] ? fa : "-");
    else tprintf("%-16s A %s\n%-16s B %s  (differs)\n", name, fa[0] ? fa : "-", "", fb[0] ? fb : "-");
}

/* "*" p < 0.05, "**" p < 0.01, "***" p < 0.001, else "(not significant)". */
static const char *signif(double p) {
    return p < 0.001 ? "***" : p < 0.01 ? "**" : p < 0.05 ? "*" : "(not significant at 0.05)";
}

/* Identity, differing knobs, metrics and each run against its reference. */
static void compare_table(int64_t a, int64_t b, const lab_query_brief *A, const lab_query_brief *B,
                          const lab_query_compare *c) {
    tprintf("%-16s %-40s %-40s\n", "", "run A", "run B");
    tprintf("%-16s %-40lld %-40lld\n", "id", (long long)a, (long long)b);
    brief_row("experiment", A->experiment, B->experiment);
    brief_row("arm", A->arm, B->arm);
    brief_row("status", A->status, B->status);
    hash_row("knob hash", A->knob_hash, B->knob_hash);
    hash_row("model sha256", A->model, B->model);
    hash_row("dataset sha256", A->dataset, B->dataset);
    brief_row("code version", A->code, B->code);
    char ea[160], eb[160];
    brief_row("engine", lab_engine_label(&A->engine, ea, sizeof ea), lab_engine_label(&B->engine, eb, sizeof eb));
    brief_row("engine commit", A->engine.commit, B->engine.commit);
    hash_row("logits sha256", A->logits, B->logits);
    for (int64_t i = 0; i < c->n_knobs; i++)
        tprintf("knob %-11s %-40s %-40s\n", c->knobs[i].name, c->knobs[i].a, c->knobs[i].b);
    for (int64_t i = 0; i < c->n_metrics; i++) metric_row(c->metrics[i].name, c->metrics[i].a, c->metrics[i].b);
    for (int64_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].measured) metric_row(c->refs[i].name, c->refs[i].a, c->refs[i].b);
}

/* Top-1 of A against B, and of both against their common reference. */
typedef struct top1_cmp {
    int     comparable;        /* same dataset and scored positions */
    int64_t na, nb, k;         /* positions of A and B; positions where they agree */
    double  lo, hi;            /* Wilson 95% of k/na */
    int     mcnemar;           /* computed: a common reference with the same positions */
    int64_t ref, a_only, b_only;
    double  p;
} top1_cmp;

static int top1_compute(lab_store *st, int64_t a, int64_t b, const lab_query_brief *A, const lab_query_brief *B,
                        top1_cmp *t, char *err, size_t errlen) {
    int32_t *ta = NULL, *tb = NULL, *tr = NULL;
    int64_t nr = 0;
    memset(t, 0, sizeof *t);
    int rc = lab_store_top1(st, a, &ta, &t->na, err, errlen);
    if (!rc) rc = lab_store_top1(st, b, &tb, &t->nb, err, errlen);
    t->comparable = !rc && t->na > 0 && t->na == t->nb && !strcmp(A->dataset, B->dataset);
    if (t->comparable) {
        for (int64_t i = 0; i < t->na; i++) t->k += ta[i] == tb[i];
        lab_wilson(t->k, t->na, LAB_Z95, &t->lo, &t->hi);
        t->ref = A->reference_run && A->reference_run == B->reference_run ? A->reference_run : 0;
    }
    if (t->comparable && t->ref && !(rc = lab_store_top1(st, t->ref, &tr, &nr, err, errlen)) && nr == t->na) {
        for (int64_t i = 0; i < t->na; i++) {
            int ra = ta[i] == tr[i], rb = tb[i] == tr[i];
            t->a_only += ra && !rb;
            t->b_only += !ra && rb;
        }
        t->p = lab_mcnemar_exact(t->a_only, t->b_only);
        t->mcnemar = 1;
    }
    free(ta);
    free(tb);
    free(tr);
    return rc;
}

static void top1_print(const top1_cmp *t) {
    if (!t->comparable) {
        tprintf("top-1 A vs B: not comparable (different datasets or scored positions: %lld vs %lld)\n", (long long)t->na,
               (long long)t->nb);
        return;
    }
    tprintf("top-1 A vs B     %lld/%lld agree, Wilson 95%% [%.4f, %.4f]\n", (long long)t->k, (long long)t->na, t->lo, t->hi);
    if (t->mcnemar)
        tprintf("McNemar exact    vs reference run %lld: A-only agree %lld, B-only agree %lld, p = %.4g %s\n",
               (long long)t->ref, (long long)t->a_only, (long long)t->b_only, t->p, signif(t->p));
    else if (!t->ref)
        tprintf("McNemar exact    not computed: the runs have no common reference run\n");
}

static cJSON *brief_json(int64_t id, const lab_query_brief *b) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddStringToObject(o, "experiment", b->experiment);
    cJSON_AddStringToObject(o, "arm", b->arm);
    cJSON_AddStringToObject(o, "status", b->status);
    cJSON_AddStringToObject(o, "knob_hash", b->knob_hash);
    cJSON_AddStringToObject(o, "model_sha256", b->model);
    cJSON_AddStringToObject(o, "dataset_sha256", b->dataset);
    cJSON_AddStringToObject(o, "code_version", b->code);
    cJSON_AddStringToObject(o, "logits_sha256", b->logits);
    cJSON_AddItemToObject(o, "engine", lab_engine_json(&b->engine));
    return o;
}

static void values_json(cJSON *arr, const lab_query_value *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", v[i].name);
        cJSON_AddNumberToObject(o, "a", v[i].a);
        cJSON_AddNumberToObject(o, "b", v[i].b);
        cJSON_AddNumberToObject(o, "b_minus_a", v[i].b - v[i].a);
        if (v[i].a != 0 && isfinite(v[i].a) && isfinite(v[i].b)) cJSON_AddNumberToObject(o, "b_over_a", v[i].b / v[i].a);
        cJSON_AddItemToArray(arr, o);
    }
}

/* `vtlab compare --json`: what the table says, as one object. */
static int compare_json(int64_t a, int64_t b, const lab_query_brief *A, const lab_query_brief *B,
                        const lab_query_compare *c, const top1_cmp *t, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "a", brief_json(a, A));
    cJSON_AddItemToObject(o, "b", brief_json(b, B));
    cJSON *k = cJSON_AddArrayToObject(o, "knobs_differ");
    for (int64_t i = 0; i < c->n_knobs; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", c->knobs[i].name);
        cJSON_AddStringToObject(x, "a", c->knobs[i].a);
        cJSON_AddStringToObject(x, "b", c->knobs[i].b);
        cJSON_AddItemToArray(k, x);
    }
    values_json(cJSON_AddArrayToObject(o, "metrics"), c->metrics, c->n_metrics);
    cJSON *vr = cJSON_AddArrayToObject(o, "vs_reference");
    for (int64_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].measured) values_json(vr, &c->refs[i], 1);
    if (t->comparable) {
        cJSON *x = cJSON_AddObjectToObject(o, "top1_a_vs_b");
        cJSON_AddNumberToObject(x, "k", (double)t->k);
        cJSON_AddNumberToObject(x, "n", (double)t->na);
        cJSON_AddNumberToObject(x, "lo", t->lo);
        cJSON_AddNumberToObject(x, "hi", t->hi);
    } else cJSON_AddNullToObject(o, "top1_a_vs_b");
    if (t->mcnemar) {
        cJSON *x = cJSON_AddObjectToObject(o, "mcnemar");
        cJSON_AddNumberToObject(x, "reference_run", (double)t->ref);
        cJSON_AddNumberToObject(x, "a_only_agree", (double)t->a_only);
        cJSON_AddNumberToObject(x, "b_only_agree", (double)t->b_only);
        cJSON_AddNumberToObject(x, "p", t->p);
    } else cJSON_AddNullToObject(o, "mcnemar");
    int rc = print_json(o, stdout, "compare", err, errlen);
    cJSON_Delete(o);
    return rc;
}

int lab_cmd_compare(lab_store *st, int64_t a, int64_t b, int json, char *err, size_t errlen) {
    lab_query_brief A, B;
    lab_query_compare c;
    top1_cmp t;
    int rc;
    if ((rc = load_brief(st, a, &A, err, errlen)) || (rc = load_brief(st, b, &B, err, errlen))) return rc;
    if ((rc = lab_query_compare_read(st, a, b, &c, err, errlen))) return rc;
    if ((rc = top1_compute(st, a, b, &A, &B, &t, err, errlen))) { lab_query_compare_free(&c); return rc; }
    if (json) rc = compare_json(a, b, &A, &B, &c, &t, err, errlen);
    else {
        char *buf;
        size_t len;
        text_begin(&buf, &len);
        compare_table(a, b, &A, &B, &c);
        top1_print(&t);
        /* the answer to "did it come out the same": the logits, bit for bit */
        if (A.logits[0] && !strcmp(A.logits, B.logits)) tprintf("identical (logits sha256 %s)\n", A.logits);
        else if (A.logits[0] && B.logits[0]) tprintf("not identical: the logits differ (sha256 above)\n");
        text_end(&buf, &len, 0);
    }
    lab_query_compare_free(&c);
    return rc;
}

/* ------------------------------------------------------------ export */

/* One position p of sequence x of run id against the same sequence r of its
 * reference run ref: a CSV line or a JSON line. kl: "" when not measured. */
static void position_line(FILE *out, int csv, int64_t id, int64_t ref, const lab_query_topk *x,
                          const lab_query_topk *r, int64_t p, int scored, const char *kv, int exact) {
    int32_t rt = r->ids[p * r->k], t = x->ids[p * x->k];
    double rp = exp(r->logprobs[p * r->k]), xp = NAN;
    for (int64_t j = 0; j < x->k; j++)
        if (x->ids[p * x->k + j] == rt) { xp = exp(x->logprobs[p * x->k + j]); break; }
    char pv[32] = "", dv[32] = "";
    if (!isnan(xp)) snprintf(pv, sizeof pv, "%.9g", xp), snprintf(dv, sizeof dv, "%.9g", xp - rp);
    if (csv)
        fprintf(out, "%lld,%lld,%lld,%lld,%d,%d,%.9g,%d,%d,%s,%s,%s,%d\n", (long long)id, (long long)ref,
                (long long)x->seq, (long long)p, scored, rt, rp, t, t == rt, pv, dv, kv, exact);
    else
        fprintf(out, "{\"run_id\": %lld, \"reference_run_id\": %lld, \"seq\": %lld, \"pos\": %lld, \"scored\": %s, "
                "\"ref_top1\": %d, \"ref_p\": %.9g, \"top1\": %d, \"agree\": %s, \"p_of_ref_top1\": %s, \"dp\": %s, "
                "\"kl\": %s, \"kl_exact\": %s}\n",
                (long long)id, (long long)ref, (long long)x->seq, (long long)p, scored ? "true" : "false", rt, rp,
                t, t == rt ? "true" : "false", pv[0] ? pv : "null", dv[0] ? dv : "null", kv[0] ? kv : "null",
                exact ? "true" : "false");
}

/* The per-position records of run id (top-k a[na]) against its reference
 * ref (b[nb]); kl[nkl]: KL at the scored positions, in order. */
static void position_lines(FILE *out, int csv, int64_t id, int64_t ref, const lab_query_topk *a, int64_t na,
                           const lab_query_topk *b, int64_t nb, int last_only, const double *kl, int64_t nkl,
                           int exact) {
    int64_t ikl = 0;
    if (csv) fprintf(out, "run_id,reference_run_id,seq,pos,scored,ref_top1,ref_p,top1,agree,p_of_ref_top1,dp,kl,kl_exact\n");
    for (int64_t i = 0; i < na && i < nb; i++) {
        const lab_query_topk *x = &a[i], *r = &b[i];
        for (int64_t p = 0; x->seq == r->seq && p < x->n_pos && p < r->n_pos; p++) {
            int scored = !last_only || p == x->n_pos - 1;
            char kv[32] = "";
            if (scored && ikl < nkl) snprintf(kv, sizeof kv, "%.9g", kl[ikl++]);
            position_line(out, csv, id, ref, x, r, p, scored, kv, exact);
        }
    }
}

/* `--format positions` (JSON lines) and `positions-csv`: one record per
 * position of the run against its reference, what lm-evaluation-harness's
 * --log_samples gives per sample: whether the position is scored, the
 * reference's top-1 and its probability, the run's top-1, agreement, and the
 * run's probability of the reference's top-1 with the difference (dp; empty
 * when that token is not in the run's stored top-k), and, at a scored
 * position, KL(reference || run) from lab_position_kl: exact when both runs
 * stored full logits (kl_exact), else estimated from the stored top-k. A run
 * without a comparison (a reference) is LAB_EINPUT. */
static int export_positions(lab_store *st, int64_t id, int csv, FILE *out, char *err, size_t errlen) {
    int64_t ref = 0;
    int last_only = 0;
    int rc = lab_query_reference(st, id, &ref, &last_only, err, errlen);
    if (rc) return rc;
    if (!ref)
        return lab_errf(err, errlen, LAB_EINPUT, "run %lld has no comparison with a reference (it is one, or it did not "
                        "finish): nothing to export per position", (long long)id);
    lab_query_topk *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0, nkl = 0;
    double *kl = NULL;
    int exact = 0;
    if ((rc = lab_position_kl(st, ref, id, &kl, &nkl, &exact, err, errlen))) return rc;
    if (!(rc = lab_query_topk_read(st, id, &a, &na, err, errlen)) &&
        !(rc = lab_query_topk_read(st, ref, &b, &nb, err, errlen)))
        position_lines(out, csv, id, ref, a, na, b, nb, last_only, kl, nkl, exact);
    lab_query_topk_free(a, na);
    lab_query_topk_free(b, nb);
    free(kl);
    if (rc) return rc;
    return ferror(out) ? lab_errf(err, errlen, LAB_EIO, "export: write failed") : LAB_OK;
}

/* `--format csv`: long form, one row per (sequence, position, rank): the
 * per-position top-k of the run, what a spreadsheet or pandas wants. */
static int export_csv(lab_store *st, int64_t id, FILE *out, char *err, size_t errlen) {
    lab_query_topk *t = NULL;
    int64_t n = 0;
    int rc = lab_query_topk_read(st, id, &t, &n, err, errlen);
    if (rc) return rc;
    fprintf(out, "run_id,seq,pos,rank,token_id,logprob\n");
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < t[i].n_pos; p++)
            for (int64_t r = 0; r < t[i].k; r++)
                fprintf(out, "%lld,%lld,%lld,%lld,%d,%.9g\n", (long long)id, (long long)t[i].seq, (long long)p,
                        (long long)r, t[i].ids[p * t[i].k + r], t[i].logprobs[p * t[i].k + r]);
    lab_query_topk_free(t, n);
    return ferror(out) ? lab_errf(err, errlen, LAB_EIO, "export: write failed") : LAB_OK;
}

/* Appends position rows [ids...] to ji and [logprobs...] to jl (k each);
 * -1 when out of memory. */
static int add_position(cJSON *ji, cJSON *jl, const int32_t *ids, const float *lp, int64_t k) {
    cJSON *ri = cJSON_CreateArray();
    if (!cJSON_AddItemToArray(ji, ri)) { cJSON_Delete(ri); return -1; }
    cJSON *rl = cJSON_CreateArray();
    if (!cJSON_AddItemToArray(jl, rl)) { cJSON_Delete(rl); return -1; }
    for (int64_t r = 0; r < k; r++)
        if (!cJSON_AddItemToArray(ri, cJSON_CreateNumber(ids[r])) || !cJSON_AddItemToArray(rl, cJSON_CreateNumber(lp[r])))
            return -1;
    return 0;
}

/* One sequence's top-k as {"ids": [[...], ...], "logprobs": [[...], ...],
 * "seq": S}; NULL when out of memory. */
static cJSON *topk_object(const lab_query_topk *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON *ji = cJSON_AddArrayToObject(o, "ids"), *jl = cJSON_AddArrayToObject(o, "logprobs");
    int ok = ji && jl && cJSON_AddNumberToObject(o, "seq", (double)t->seq);
    for (int64_t p = 0; ok && p < t->n_pos; p++)
        ok = !add_position(ji, jl, t->ids + p * t->k, t->logprobs + p * t->k, t->k);
    if (!ok) { cJSON_Delete(o); return NULL; }
    return o;
}

/* Per-position top-k, as arrays [[ids...], ...] and [[logprobs...], ...] per
 * sequence, in root's array "topk". */
static int add_topk(lab_store *st, int64_t id, cJSON *root, char *err, size_t errlen) {
    lab_query_topk *t = NULL;
    int64_t n = 0;
    int rc = lab_query_topk_read(st, id, &t, &n, err, errlen);
    if (rc) return rc;
    cJSON *arr = cJSON_AddArrayToObject(root, "topk");
    for (int64_t i = 0; !rc && i < n; i++) {
        cJSON *o = arr ? topk_object(&t[i]) : NULL;
        if (!o || !cJSON_AddItemToArray(arr, o)) rc = lab_oom(err, errlen);
    }
    if (!arr) rc = lab_oom(err, errlen);
    lab_query_topk_free(t, n);
    return rc;
}

/* `--format json` (and `show --json`): every record of the run, top-k
 * included. */
static int export_json(lab_store *st, int64_t id, FILE *out, char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return lab_oom(err, errlen);
    int rc = lab_query_run_json(st, id, root, err, errlen);
    if (!rc) rc = add_topk(st, id, root, err, errlen);
    if (!rc) rc = print_json(root, out, "export", err, errlen);
    cJSON_Delete(root);
    return rc;
}

int lab_cmd_export(lab_store *st, int64_t id, const char *format, FILE *out, char *err, size_t errlen) {
    int rc = need_run(st, id, err, errlen);
    if (rc) return rc;
    if (!strcmp(format, "positions") || !strcmp(format, "positions-csv"))
        return export_positions(st, id, !strcmp(format, "positions-csv"), out, err, errlen);
    if (!strcmp(format, "csv")) return export_csv(st, id, out, err, errlen);
    return export_json(st, id, out, err, errlen);
}

/* ------------------------------------------------------------ export to a file */

/* The message for a failed write of path with errno e: a full disk and the
 * file size limit said in words. */
static int write_err(const char *path, int e, const char *what, char *err, size_t errlen) {
    if (e == ENOSPC || e == EDQUOT)
        return lab_errf(err, errlen, LAB_EIO, "--out %s: %s: the disk is full (%s); the previous file is unchanged",
                        path, what, strerror(e));
    if (e == EFBIG)
        return lab_errf(err, errlen, LAB_EIO,
                        "--out %s: %s: file too large (%s; see `ulimit -f`); the previous file is unchanged", path,
                        what, strerror(e));
    return lab_errf(err, errlen, LAB_EIO, "--out %s: %s: %s; the previous file is unchanged", path, what,
                    strerror(e ? e : EIO));
}

/* fsync of the directory holding path, so that the rename survives a crash
 * (best effort: some file systems refuse to fsync a directory). */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* --out naming something that is not a regular file (a terminal, a pipe,
 * /dev/stdout): there is nothing to replace, so it is written directly. */
static int export_stream(lab_store *st, int64_t id, const char *format, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) return lab_errf(err, errlen, LAB_EINPUT, "--out %s: cannot open: %s", path, strerror(errno));
    errno = 0;
    int rc = lab_cmd_export(st, id, format, f, err, errlen);
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (e) rc = write_err(path, e, "write failed", err, errlen);
    return rc;
}

/* The files of an atomic --out: the target (a symlink resolved: it stays a
 * symlink, the file it points to is what is replaced), its directory, the
 * name of a temp file beside it, and the temp file's descriptor; named: the
 * temp file has that name (and is removed on failure). */
typedef struct out_file {
    char *target, *dir, *tmp;
    int   fd, named;
} out_file;

static void out_free(out_file *o) {
    free(o->target);
    free(o->dir);
    free(o->tmp);
}

static int out_paths(const char *path, out_file *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->target = realpath(path, NULL);
    if (!o->target) o->target = strdup(path);
    size_t pl = o->target ? strlen(o->target) : 0;
    const char *slash = o->target ? strrchr(o->target, '/') : NULL;
    o->dir = !o->target ? NULL
             : slash    ? strndup(o->target, slash == o->target ? 1 : (size_t)(slash - o->target))
                        : strdup(".");
    o->tmp = malloc(pl + 48);
    if (!o->target || !o->dir || !o->tmp) {
        out_free(o);
        return lab_oom(err, errlen);
    }
    snprintf(o->tmp, pl + 48, "%s.%ld.tmp", o->target, (long)getpid());
    return LAB_OK;
}

/* Opens the temp file: an unnamed file in the target directory (O_TMPFILE),
 * so that a process killed while writing leaves nothing behind. File systems
 * without it get a named temp file, removed on every failure this process
 * sees. */
static int out_create(out_file *o, const char *path, char *err, size_t errlen) {
    o->fd = open(o->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (o->fd < 0) {
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        o->named = o->fd >= 0;
    }
    if (o->fd >= 0) return LAB_OK;
    int e = errno;
    if (e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS)
        return lab_errf(err, errlen, LAB_EINPUT, "--out %s: cannot create: %s", path, strerror(e));
    return write_err(path, e, "cannot create", err, errlen);
}

/* Gives the finished unnamed temp file its name beside the target (then
 * renamed over it: both steps are atomic). 0 or the errno. */
static int out_link(out_file *o) {
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", o->fd);
    if (linkat(AT_FDCWD, fdpath, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW) != 0) return errno ? errno : EIO;
    o->named = 1;
    return 0;
}

/* Writes the export into the temp file, flushes, fsyncs and names it;
 * closes it. */
static int out_write(lab_store *st, int64_t id, const char *format, const char *path, out_file *o, char *err,
                     size_t errlen) {
    FILE *f = fdopen(o->fd, "w");
    if (!f) {
        int rc = write_err(path, errno, "cannot create", err, errlen);
        close(o->fd);
        return rc;
    }
    errno = 0;
    int rc = lab_cmd_export(st, id, format, f, err, errlen);
    int e = 0;   /* errno of the first write that failed: said in words below */
    if (ferror(f)) {
        e = errno ? errno : EIO;
        rc = LAB_OK;
    }
    if (!rc && !e && fflush(f) != 0) e = errno ? errno : EIO;
    if (!rc && !e && fsync(o->fd) != 0) e = errno ? errno : EIO;
    if (!rc && !e && !o->named) e = out_link(o);
    if (fclose(f) != 0 && !rc && !e) e = errno ? errno : EIO;
    if (!rc && e) rc = write_err(path, e, "write failed", err, errlen);
    return rc;
}

int lab_cmd_export_file(lab_store *st, int64_t id, const char *format, const char *path, char *err, size_t errlen) {
    int rc = need_run(st, id, err, errlen);   /* before any file is touched */
    if (rc) return rc;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "--out %s: is a directory", path);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return export_stream(st, id, format, path, err, errlen);
    out_file o;
    if ((rc = out_paths(path, &o, err, errlen))) return rc;
    if (!(rc = out_create(&o, path, err, errlen))) {
        rc = out_write(st, id, format, path, &o, err, errlen);
        if (!rc && rename(o.tmp, o.target) != 0) rc = write_err(path, errno, "cannot rename into place", err, errlen);
        if (!rc) sync_dir(o.dir);
        else if (o.named) unlink(o.tmp);
    }
    out_free(&o);
    return rc;
}
