/*
 * store_report.c — the report's part of the store (see store_report.h).
 */
#include "store_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "model/vt.h"
#include "store_internal.h"
#include "store_query.h"
#include "util.h"

/* ------------------------------------------------------------ statement helpers */

/* Prepares sql; on failure the store's error ("PATH: prepare: ...") prefixed
 * "report query". */
static int rp_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    int rc = lab_sq_prep(st, sql, s, err, errlen);
    return rc ? lab_err_prefix(err, errlen, rc, "report query") : LAB_OK;
}

/* Column i as a double; NAN for NULL ("not measurable"). */

/* Column i copied to the heap into *out; 1 when out of memory. */
static int dup(sqlite3_stmt *s, int i, char **out) {
    *out = lab_strdup(lab_col_text(s, i));
    return *out == NULL;
}




/* Steps s (prepared and bound) to its end, copying each row with `copy` into
 * a zeroed `size`-byte row appended to *v[*n] (copy returns non-zero when out
 * of memory; that row is kept, for the view's free function to release).
 * Finalizes s. On failure what was read stays in *v for the caller to free. */
static int collect(lab_store *st, sqlite3_stmt *s, const char *what, int (*copy)(sqlite3_stmt *, void *), size_t size,
                   void **v, int64_t *n, char *err, size_t errlen) {
    int64_t cap = *n;
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        char *row = lab_sq_append(v, n, &cap, size);
        if (!row || copy(s, row)) { sqlite3_finalize(s); return lab_oom(err, errlen); }
    }
    return lab_sq_done(st, s, last, what, err, errlen);
}


/* ------------------------------------------------------------ per-position KL */

typedef struct topk_rows {
    int64_t  n, k;        /* scored positions, top-k width */
    int32_t *ids;         /* [n, k] */
    float   *lp;          /* [n, k] log-probabilities, descending */
} topk_rows;

static void topk_free(topk_rows *t) {
    free(t->ids);
    free(t->lp);
    memset(t, 0, sizeof *t);
}

/* Whether run scores only each sequence's last position (runs.score). */
static int run_scores_last(lab_store *st, int64_t run, int *last, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = rp_prep(st, "SELECT score FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int step = sqlite3_step(s);
    *last = step == SQLITE_ROW && !strcmp(lab_col_text(s, 0), "last");
    return lab_sq_done(st, s, step == SQLITE_ROW ? SQLITE_DONE : step, "read runs.score", err, errlen);
}

/* The scored positions' top-k of run, flattened in position order: the
 * stored rows as lab_query_topk_read reads (and checks) them, each
 * sequence's last row only when the run scores the last position. */
static int load_topk(lab_store *st, int64_t run, topk_rows *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    lab_query_topk *v = NULL;
    int64_t n = 0, total = 0;
    int last = 0;
    int rc = lab_query_topk_read(st, run, &v, &n, err, errlen);
    if (!rc) rc = run_scores_last(st, run, &last, err, errlen);
    for (int64_t i = 0; !rc && i < n; i++) {
        if (v[i].k != v[0].k) rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: logits_topk rows of different k", (long long)run);
        total += last ? 1 : v[i].n_pos;
    }
    if (!rc && n) {
        t->k = v[0].k;
        t->ids = malloc((size_t)(total * t->k) * sizeof *t->ids + 1);
        t->lp = malloc((size_t)(total * t->k) * sizeof *t->lp + 1);
        if (!t->ids || !t->lp) rc = lab_oom(err, errlen);
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        int64_t from = last ? v[i].n_pos - 1 : 0, np = v[i].n_pos - from, k = t->k;
        memcpy(t->ids + t->n * k, v[i].ids + from * k, (size_t)(np * k) * sizeof *t->ids);
        memcpy(t->lp + t->n * k, v[i].logprobs + from * k, (size_t)(np * k) * sizeof *t->lp);
        t->n += np;
    }
    lab_query_topk_free(v, n);
    if (rc) topk_free(t);
    return rc;
}

/* The top-k estimate for one position (see report.h). */
static double topk_kl_one(const int32_t *pi, const float *pl, const int32_t *qi, const float *ql, int64_t k) {
    double kl = 0, pin = 0, qin = 0, qfloor = exp((double)ql[k - 1]);
    for (int64_t a = 0; a < k; a++) {
        double p = exp((double)pl[a]), q = qfloor;
        for (int64_t b = 0; b < k; b++)
            if (qi[b] == pi[a]) { q = exp((double)ql[b]); break; }
        pin += p;
        qin += q;
        if (p > 0) kl += p * (log(p) - log(q > 1e-300 ? q : 1e-300));
    }
    double pt = 1 - pin, qt = 1 - qin;
    if (pt > 1e-12) kl += pt * (log(pt) - log(qt > 1e-12 ? qt : 1e-12));
    return kl > 0 ? kl : 0;
}

/* Exact KL from the stored f16 logits, sequence by sequence. Returns 1 when
 * both runs have full logits (and fills kl), 0 when not, <0 on error. */
static int full_kl(lab_store *st, int64_t rp, int64_t rq, double **kl, int64_t *n, char *err, size_t errlen) {
    sqlite3_stmt *a = NULL, *b = NULL;
    const char *sql = "SELECT f.n_pos, f.vocab, f.data, r.score FROM logits_full f JOIN runs r ON r.id = f.run_id"
                      " WHERE f.run_id = ?1 AND f.dtype = 'f16' ORDER BY f.seq";
    int rc = rp_prep(st, sql, &a, err, errlen);
    if (rc) return -rc;
    if ((rc = rp_prep(st, sql, &b, err, errlen))) { sqlite3_finalize(a); return -rc; }
    sqlite3_bind_int64(a, 1, rp);
    sqlite3_bind_int64(b, 1, rq);
    double *out = NULL, *lp = NULL, *lq = NULL;
    float *fp = NULL, *fq = NULL;
    int64_t cnt = 0, cap = 0, vocab = 0;
    int any = 0, result = 0;
    for (;;) {
        int ra = sqlite3_step(a), rb = sqlite3_step(b);
        if (ra == SQLITE_DONE && rb == SQLITE_DONE) break;
        if ((ra != SQLITE_ROW && ra != SQLITE_DONE) || (rb != SQLITE_ROW && rb != SQLITE_DONE)) {
            result = -lab_sq_error(st, err, errlen, "read logits_full");   /* a failed read, not a mismatch */
            goto out;
        }
        if (ra != SQLITE_ROW || rb != SQLITE_ROW) { result = any ? -LAB_EINPUT : 0; goto out; }
        int64_t np = sqlite3_column_int64(a, 0), v = sqlite3_column_int64(a, 1);
        if (np != sqlite3_column_int64(b, 0) || v != sqlite3_column_int64(b, 1) || v <= 0 || np <= 0 ||
            sqlite3_column_bytes(a, 2) != np * v * 2 || sqlite3_column_bytes(b, 2) != np * v * 2) {
            result = -lab_errf(err, errlen, LAB_EINPUT, "runs %lld and %lld: full logits differ in shape", (long long)rp,
                               (long long)rq);
            goto out;
        }
        if (v != vocab) {
            vocab = v;
            free(lp); free(lq); free(fp); free(fq);
            lp = malloc((size_t)v * sizeof *lp);
            lq = malloc((size_t)v * sizeof *lq);
            fp = malloc((size_t)v * sizeof *fp);
            fq = malloc((size_t)v * sizeof *fq);
            if (!lp || !lq || !fp || !fq) { result = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto out; }
        }
        any = 1;
        const unsigned char *da = sqlite3_column_blob(a, 2), *db = sqlite3_column_blob(b, 2);
        int last = !strcmp(lab_col_text(a, 3), "last");
        for (int64_t p = last ? np - 1 : 0; p < np; p++) {
            for (int64_t i = 0; i < v; i++) {
                uint16_t ha, hb;
                memcpy(&ha, da + (size_t)(p * v + i) * 2, 2);
                memcpy(&hb, db + (size_t)(p * v + i) * 2, 2);
                fp[i] = vt_f32_from_f16_bits(ha);
                fq[i] = vt_f32_from_f16_bits(hb);
            }
            lab_log_softmax(fp, v, lp);
            lab_log_softmax(fq, v, lq);
            if (cnt == cap) {
                cap = cap ? cap * 2 : 256;
                double *no = realloc(out, (size_t)cap * sizeof *no);
                if (!no) { result = -lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto out; }
                out = no;
            }
            out[cnt++] = lab_kl_logp(lp, lq, v);
        }
    }
    if (any) { *kl = out; *n = cnt; out = NULL; result = 1; }
out:
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    free(out); free(lp); free(lq); free(fp); free(fq);
    return result;
}

int lab_position_kl(lab_store *st, int64_t run_p, int64_t run_q, double **kl, int64_t *n, int *exact, char *err,
                    size_t errlen) {
    *kl = NULL;
    *n = 0;
    *exact = 0;
    int f = full_kl(st, run_p, run_q, kl, n, err, errlen);
    if (f < 0) return -f;
    if (f == 1) { *exact = 1; return LAB_OK; }
    topk_rows p, q;
    int rc = load_topk(st, run_p, &p, err, errlen);
    if (rc) return rc;
    if ((rc = load_topk(st, run_q, &q, err, errlen))) { topk_free(&p); return rc; }
    if (p.n != q.n || p.k != q.k || p.n == 0) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "runs %lld and %lld: %lld vs %lld scored positions (top-%lld vs %lld)",
                      (long long)run_p, (long long)run_q, (long long)p.n, (long long)q.n, (long long)p.k,
                      (long long)q.k);
    } else if (!(*kl = malloc((size_t)p.n * sizeof **kl))) {
        rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    } else {
        for (int64_t i = 0; i < p.n; i++)
            (*kl)[i] = topk_kl_one(p.ids + i * p.k, p.lp + i * p.k, q.ids + i * q.k, q.lp + i * q.k, p.k);
        *n = p.n;
    }
    topk_free(&p);
    topk_free(&q);
    return rc;
}

/* ------------------------------------------------------------ one experiment: spec and runs */

int lab_rp_read_latest_spec(lab_store *st, const char *exp, char sha[65], char **json, char **file, int *found,
                            char *err, size_t errlen) {
    sqlite3_stmt *s;
    *found = 0;
    int rc = lab_sq_prep_as(st, "SELECT s.sha256, s.json, s.file FROM runs r JOIN experiment_specs s ON s.sha256 = r.experiment_sha256"
                      " WHERE r.experiment = ?1 ORDER BY r.id DESC LIMIT 1", &s, "report: the experiment's spec", err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, exp, -1, SQLITE_TRANSIENT);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        *found = 1;
        lab_sq_col_copy(s, 0, sha, 65);
        if (dup(s, 1, json) | dup(s, 2, file)) { sqlite3_finalize(s); return lab_oom(err, errlen); }
        last = sqlite3_step(s);
    }
    return lab_sq_done(st, s, last, "report: the experiment's spec", err, errlen);
}

int lab_rp_read_spec_json(lab_store *st, const char *sha, char **json, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *json = NULL;
    int rc = lab_sq_prep_as(st, "SELECT json FROM experiment_specs WHERE sha256 = ?1", &s, "report: a run's spec", err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, sha, -1, SQLITE_TRANSIENT);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        if (dup(s, 0, json)) { sqlite3_finalize(s); return lab_oom(err, errlen); }
        last = sqlite3_step(s);
    }
    return lab_sq_done(st, s, last, "report: a run's spec", err, errlen);
}

int lab_rp_read_ran_arms(lab_store *st, const char *exp, int (*each)(void *ctx, const char *arm, int is_ref),
                         void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT arm, max(is_reference) FROM runs WHERE experiment = ?1 GROUP BY arm ORDER BY min(id)", &s,
                  "report: the experiment's arms", err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, exp, -1, SQLITE_TRANSIENT);
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW)
        if ((rc = each(ctx, lab_col_text(s, 0), sqlite3_column_int(s, 1)))) { sqlite3_finalize(s); return rc; }
    return lab_sq_done(st, s, last, "report: the experiment's arms", err, errlen);
}

/* Heap copy of column i, or NULL for NULL; 1 when out of memory. */
static int dup_or_null(sqlite3_stmt *s, int i, char **out) {
    if (sqlite3_column_type(s, i) == SQLITE_NULL) { *out = NULL; return 0; }
    return dup(s, i, out);
}

int lab_rp_read_arm_run(lab_store *st, const char *exp, arm_view *a, char run_sha[72], char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: an arm's latest run";
    run_sha[0] = 0;
    int rc = lab_sq_prep_as(st, "SELECT id, status, error, assertions_ok, assertion_reason, backend, started_at, code_version,"
                      " is_reference, experiment_sha256," LAB_ENGINE_SQL("runs")
                      " FROM runs WHERE experiment = ?1 AND arm = ?2"
                      " ORDER BY (status = 'FINISHED' AND repeat_idx = 0) DESC, id DESC LIMIT 1", &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, exp, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, a->name, -1, SQLITE_TRANSIENT);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        a->run_id = sqlite3_column_int64(s, 0);
        lab_sq_col_copy(s, 1, a->status, sizeof a->status);
        a->assertions_ok = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 3);
        lab_sq_col_copy(s, 5, a->backend, sizeof a->backend);
        lab_sq_col_copy(s, 6, a->started, sizeof a->started);
        lab_sq_col_copy(s, 7, a->code_version, sizeof a->code_version);
        if (sqlite3_column_int(s, 8)) a->is_reference = 1;
        lab_sq_col_copy(s, 9, run_sha, 72);
        lab_engine_name_read(s, 10, &a->engine);
        if (dup_or_null(s, 2, &a->error) | dup_or_null(s, 4, &a->assertion_reason)) {
            sqlite3_finalize(s);
            return lab_oom(err, errlen);
        }
        last = sqlite3_step(s);
    }
    return lab_sq_done(st, s, last, what, err, errlen);
}

static void cmp_from_row(sqlite3_stmt *s, arm_view *a) {
    a->has_cmp = 1;
    a->ref_run = sqlite3_column_int64(s, 0);
    a->k = sqlite3_column_int64(s, 1);
    a->n = sqlite3_column_int64(s, 2);
    a->lo = lab_sq_col_num(s, 3);
    a->hi = lab_sq_col_num(s, 4);
    a->kl_mean = lab_sq_col_num(s, 5);
    a->kl_p99 = lab_sq_col_num(s, 6);
    a->kl_max = lab_sq_col_num(s, 7);
    a->max_dl = lab_sq_col_num(s, 8);
    a->rms_dp = lab_sq_col_num(s, 9);
    a->mc_p = lab_sq_col_num(s, 10);
    a->first_layer = sqlite3_column_type(s, 11) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 11);
    a->first_site = sqlite3_column_int(s, 12);
    a->first_value = lab_sq_col_num(s, 13);
    a->div_tol = lab_sq_col_num(s, 14);
    if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
        a->has_verdict = 1;
        lab_sq_col_copy(s, 15, a->verdict, sizeof a->verdict);
        a->threshold = lab_sq_col_num(s, 16);
        lab_sq_col_copy(s, 17, a->direction, sizeof a->direction);
        lab_sq_col_copy(s, 18, a->metric, sizeof a->metric);
    }
}

static int read_comparison(lab_store *st, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: an arm's comparison";
    int rc = lab_sq_prep_as(st, "SELECT c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean, c.kl_p99, c.kl_max,"
                      " c.max_abs_dlogit, c.rms_dp, c.mcnemar_p, c.first_div_layer, c.first_div_site, c.first_div_value,"
                      " c.div_tolerance, v.verdict, v.threshold, v.direction, v.metric FROM comparisons c"
                      " LEFT JOIN verdicts v ON v.run_id = c.run_id AND v.reference_run_id = c.reference_run_id"
                      " WHERE c.run_id = ?1 LIMIT 1", &s, what, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        cmp_from_row(s, a);
        last = sqlite3_step(s);
    }
    return lab_sq_done(st, s, last, what, err, errlen);
}

static int read_metrics(lab_store *st, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT name, value FROM metrics WHERE run_id = ?1"
                      " AND name IN ('tokens_per_s', 'perplexity', 'flops_frac_of_peak')", &s, "report: an arm's metrics",
                  err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        const char *m = lab_col_text(s, 0);
        if (!strcmp(m, "tokens_per_s")) a->tps = lab_sq_col_num(s, 1);
        else if (!strcmp(m, "perplexity")) a->ppl = lab_sq_col_num(s, 1);
        else a->peak_frac = lab_sq_col_num(s, 1);
    }
    return lab_sq_done(st, s, last, "report: an arm's metrics", err, errlen);
}

/* Resolved knobs that differ from their declared default: what really ran. */
static int read_knobs(lab_store *st, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT name, value FROM run_knobs WHERE run_id = ?1 ORDER BY name", &s, "report: an arm's knobs",
                  err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    lab_buf b = {0};
    int last;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        const vt_knob_info *ki = vt_knob_find(lab_col_text(s, 0));
        if (ki && ki->def && !strcmp(ki->def, lab_col_text(s, 1))) continue;
        lab_buf_printf(&b, "%s%s=%s", b.len ? ", " : "", lab_col_text(s, 0), lab_col_text(s, 1));
    }
    if (!b.data) lab_buf_append(&b, "", 0);
    if (b.oom) { sqlite3_finalize(s); lab_buf_free(&b); return lab_oom(err, errlen); }
    a->resolved_knobs = b.data;
    return lab_sq_done(st, s, last, "report: an arm's knobs", err, errlen);
}

int lab_rp_read_arm_results(lab_store *st, arm_view *a, char *err, size_t errlen) {
    int rc = read_comparison(st, a, err, errlen);
    if (!rc) rc = read_metrics(st, a, err, errlen);
    if (!rc) rc = read_knobs(st, a, err, errlen);
    return rc;
}

/* ------------------------------------------------------------ one experiment: probes */

static int probe_site_row(sqlite3_stmt *s, void *row) {
    lab_rp_probe_site *p = row;
    p->n_layers = sqlite3_column_int64(s, 2);
    p->layer_min = sqlite3_column_int64(s, 3);
    p->layer_max = sqlite3_column_int64(s, 4);
    p->bytes_min = sqlite3_column_int64(s, 5);
    p->bytes_max = sqlite3_column_int64(s, 6);
    p->src_row_bytes = sqlite3_column_int64(s, 7);
    p->dst_row_bytes = sqlite3_column_int64(s, 8);
    p->violations = sqlite3_column_int64(s, 9);
    p->rows_unwritten = sqlite3_column_int64(s, 10);
    p->rows_unwritten_max = sqlite3_column_int64(s, 11);
    return dup(s, 0, &p->site) | dup(s, 1, &p->dtypes) | dup(s, 12, &p->first_violation);
}

static int expectation_row(sqlite3_stmt *s, void *row) {
    lab_rp_expectation *x = row;
    x->ok = sqlite3_column_int(s, 3);
    return dup(s, 0, &x->site) | dup(s, 1, &x->expected) | dup(s, 2, &x->seen) | dup(s, 4, &x->reason);
}

int lab_rp_read_arm_probes(lab_store *st, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st,
                  "SELECT site, group_concat(DISTINCT CASE WHEN src_dtype = '' THEN dtype ELSE src_dtype || '>' || dtype END),"
                  " count(DISTINCT layer), min(layer), max(layer), min(bytes_per_row), max(bytes_per_row), max(src_row_bytes),"
                  " max(dst_row_bytes), sum(violations), sum(max(rows_unwritten, 0)), max(rows_unwritten),"
                  " (SELECT detail FROM probes p2 WHERE p2.run_id = p.run_id AND p2.site = p.site AND p2.ok = 0"
                  "  ORDER BY idx LIMIT 1)"
                  " FROM probes p WHERE run_id = ?1 GROUP BY site ORDER BY min(idx)", &s, "report: an arm's probes", err,
                  errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    if ((rc = collect(st, s, "report: an arm's probes", probe_site_row, sizeof *a->probes, (void **)&a->probes,
                      &a->n_probes, err, errlen))) return rc;
    if ((rc = lab_sq_prep_as(st, "SELECT site, expected_dtype, seen_dtypes, ok, reason FROM expectations WHERE run_id = ?1", &s,
                   "report: an arm's expectations", err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    return collect(st, s, "report: an arm's expectations", expectation_row, sizeof *a->expects, (void **)&a->expects,
                   &a->n_expects, err, errlen);
}

/* ------------------------------------------------------------ one experiment: chart data */

/* "KKKM/DEEE" (runs.layer_kinds) into lk; 0 when the text is not that. */
static int kinds_from_text(const char *t, lab_rp_layer_kinds *lk) {
    const char *slash = strchr(t, '/');
    size_t n = slash ? (size_t)(slash - t) : 0;
    if (!n || n > VT_MODEL_MAX_LAYERS || strlen(slash + 1) != n) return 0;
    for (size_t l = 0; l < n; l++) {
        lk->attn[l] = t[l] == 'K' ? 'K' : 'M';
        lk->ffn[l] = slash[1 + l] == 'E' ? 'E' : 'D';
    }
    lk->attn[n] = lk->ffn[n] = 0;
    lk->n = (int)n;
    snprintf(lk->source, sizeof lk->source, "the model's layer kinds recorded with the run");
    return 1;
}

/* Recorded with the run (schema v6; the report's store is migrated). */
static int kinds_recorded(lab_store *st, int64_t run, lab_rp_layer_kinds *lk, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT layer_kinds FROM runs WHERE id = ?1", &s, "report: a run's layer kinds", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        if (sqlite3_column_type(s, 0) == SQLITE_TEXT && !kinds_from_text(lab_col_text(s, 0), lk)) memset(lk, 0, sizeof *lk);
        last = sqlite3_step(s);
    }
    return lab_sq_done(st, s, last, "report: a run's layer kinds", err, errlen);
}

/* A run recorded before v6: from its probe records. */
static int kinds_from_probes(lab_store *st, int64_t run, lab_rp_layer_kinds *lk, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: a run's probe sites";
    int rc = lab_sq_prep_as(st, "SELECT DISTINCT site, layer FROM probes WHERE run_id = ?1 AND layer >= 0 AND layer < ?2", &s, what,
                  err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_int(s, 2, VT_MODEL_MAX_LAYERS);
    int any_kda = 0, n = 0, last;
    memset(lk->attn, 'M', sizeof lk->attn);
    memset(lk->ffn, 'D', sizeof lk->ffn);
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        const char *site = lab_col_text(s, 0);
        int l = sqlite3_column_int(s, 1);
        if (l + 1 > n) n = l + 1;
        if (!strcmp(site, "kda.state")) { lk->attn[l] = 'K'; any_kda = 1; }
        if (!strncmp(site, "moe.", 4)) lk->ffn[l] = 'E';
    }
    if ((rc = lab_sq_done(st, s, last, what, err, errlen))) return rc;
    lk->attn[VT_MODEL_MAX_LAYERS] = lk->ffn[VT_MODEL_MAX_LAYERS] = 0;
    if (n > 0 && any_kda) {
        lk->n = n;
        lk->attn[n] = lk->ffn[n] = 0;
        snprintf(lk->source, sizeof lk->source, "the run's probe records");
    } else {
        memset(lk, 0, sizeof *lk);   /* unknown: the chart is drawn without shading, no model is opened */
    }
    return LAB_OK;
}

int lab_rp_read_layer_kinds(lab_store *st, int64_t run, lab_rp_layer_kinds *lk, char *err, size_t errlen) {
    memset(lk, 0, sizeof *lk);
    int rc = kinds_recorded(st, run, lk, err, errlen);
    if (rc || lk->n) return rc;
    return kinds_from_probes(st, run, lk, err, errlen);
}

static int div_row(sqlite3_stmt *s, void *row) {
    lab_rp_div_point *p = row;
    p->layer = sqlite3_column_int64(s, 0);
    p->site = sqlite3_column_int(s, 1);
    p->rel_l2 = sqlite3_column_double(s, 2);
    return 0;
}

int lab_rp_read_arm_charts(lab_store *st, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ?1 AND reference_run_id = ?2"
                      " ORDER BY layer, site", &s, "report: an arm's layer divergence", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    sqlite3_bind_int64(s, 2, a->ref_run);
    if ((rc = collect(st, s, "report: an arm's layer divergence", div_row, sizeof *a->div, (void **)&a->div, &a->n_div,
                      err, errlen))) return rc;
    if (a->n_div && (rc = lab_rp_read_layer_kinds(st, a->ref_run, &a->ref_kinds, err, errlen))) return rc;
    rc = lab_position_kl(st, a->ref_run, a->run_id, &a->kl, &a->n_kl, &a->kl_exact, err, errlen);
    if (rc == LAB_EINPUT) rc = LAB_OK;   /* positions that do not match: no KL curve for this arm */
    return rc;
}

/* ------------------------------------------------------------ one experiment: flags and history */

static int flag_row(sqlite3_stmt *s, void *row) {
    lab_rp_flag *f = row;
    f->expected = sqlite3_column_int(s, 4);
    f->open = sqlite3_column_type(s, 6) == SQLITE_NULL;
    f->on_shown_run = sqlite3_column_int(s, 7);
    return dup(s, 0, &f->subject) | dup(s, 1, &f->arm) | dup(s, 2, &f->rule) | dup(s, 3, &f->reason) |
           dup(s, 5, &f->first_seen);
}

int lab_rp_read_flags(lab_store *st, exp_view *e, char *err, size_t errlen) {
    int rc = lab_store_has_table(st, "audit_flags", &e->has_flags, err, errlen);
    if (rc || !e->has_flags) return rc;
    lab_buf ids = {0};
    for (int i = 0; i < e->n_arms; i++)
        if (e->arms[i].run_id) lab_buf_printf(&ids, "%s%lld", ids.len ? "," : "", (long long)e->arms[i].run_id);
    if (ids.oom) { lab_buf_free(&ids); return lab_oom(err, errlen); }
    sqlite3_stmt *s;
    rc = lab_sq_prep_as(st, "SELECT f.subject, r.arm, f.rule, f.reason, f.expected, f.first_seen, f.resolved_at,"
                  " (',' || ?2 || ',') LIKE ('%,' || f.subject || ',%')"
                  " FROM audit_flags f JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
                  " WHERE r.experiment = ?1 ORDER BY f.resolved_at IS NOT NULL, f.expected, r.id DESC, f.rule", &s,
              "report: the experiment's confound flags", err, errlen);
    if (!rc) {
        sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, ids.data ? ids.data : "", -1, SQLITE_TRANSIENT);
        rc = collect(st, s, "report: the experiment's confound flags", flag_row, sizeof *e->flags, (void **)&e->flags,
                     &e->n_flags, err, errlen);
    }
    lab_buf_free(&ids);
    return rc;
}

static int hist_row(sqlite3_stmt *s, void *row) {
    lab_rp_hist_point *p = row;
    p->nightly = sqlite3_column_int64(s, 0);
    lab_sq_col_copy(s, 1, p->when, sizeof p->when);
    snprintf(p->commit, sizeof p->commit, "%.9s", lab_col_text(s, 2));
    lab_sq_col_copy(s, 3, p->arm, sizeof p->arm);
    p->is_ref = sqlite3_column_int(s, 4);
    p->rep = sqlite3_column_int(s, 5);
    int64_t k = sqlite3_column_int64(s, 6), n = sqlite3_column_int64(s, 7);
    p->top1 = sqlite3_column_type(s, 7) != SQLITE_NULL && n > 0 ? (double)k / (double)n : NAN;
    p->lo = lab_sq_col_num(s, 8);
    p->hi = lab_sq_col_num(s, 9);
    p->kl = lab_sq_col_num(s, 10);
    p->ppl = lab_sq_col_num(s, 11);
    p->tps = lab_sq_col_num(s, 12);
    return 0;
}

static int regression_row(sqlite3_stmt *s, void *row) {
    lab_rp_regression *r = row;
    r->nightly = sqlite3_column_int64(s, 0);
    return dup(s, 1, &r->arm) | dup(s, 2, &r->kind);
}

int lab_rp_read_history(lab_store *st, exp_view *e, char *err, size_t errlen) {
    int rc = lab_store_has_table(st, "nightlies", &e->has_history, err, errlen);
    if (rc || !e->has_history) return rc;
    sqlite3_stmt *s;
    const char *what = "report: the experiment's nightly history";
    if ((rc = lab_sq_prep_as(st, "SELECT n.id, substr(n.started_at, 1, 16), n.git_commit, r.arm, r.is_reference, r.repeat_idx,"
                       " c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean,"
                       " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'perplexity'),"
                       " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s')"
                       " FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id JOIN runs r ON r.id = nr.run_id"
                       " LEFT JOIN comparisons c ON c.run_id = r.id"
                       " WHERE r.experiment = ?1 AND r.status = 'FINISHED' AND n.status != 'RUNNING'"
                       " ORDER BY n.id, r.repeat_idx, r.id", &s, what, err, errlen))) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    if ((rc = collect(st, s, what, hist_row, sizeof *e->hist, (void **)&e->hist, &e->n_hist, err, errlen))) return rc;
    what = "report: the experiment's nightly regressions";
    if ((rc = lab_sq_prep_as(st, "SELECT nightly_id, arm, kind FROM nightly_findings WHERE experiment = ?1 AND regression = 1"
                       " ORDER BY nightly_id, id", &s, what, err, errlen))) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    return collect(st, s, what, regression_row, sizeof *e->regs, (void **)&e->regs, &e->n_regs, err, errlen);
}

/* ------------------------------------------------------------ the whole page */

/* The experiments with runs, but those a localization derived (ID.loc: its
 * sets' arms are the localization section's, not an experiment's). */
static int experiments(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: the experiments";
    int loc = 0, last, rc = lab_store_has_table(st, "localize_steps", &loc, err, errlen);
    if (!rc) rc = lab_sq_prep_as(st, loc ? "SELECT DISTINCT experiment FROM runs WHERE experiment NOT IN (SELECT"
                                           " r.experiment FROM localize_steps l JOIN runs r ON r.id = l.arm_run_id)"
                                           " ORDER BY experiment"
                                         : "SELECT DISTINCT experiment FROM runs ORDER BY experiment",
                                 &s, what, err, errlen);
    if (rc) return rc;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        char **q = realloc(v->experiments, (size_t)(v->n_experiments + 1) * sizeof *q);
        if (!q) { sqlite3_finalize(s); return lab_oom(err, errlen); }
        v->experiments = q;
        if (dup(s, 0, &v->experiments[v->n_experiments++])) { sqlite3_finalize(s); return lab_oom(err, errlen); }
    }
    return lab_sq_done(st, s, last, what, err, errlen);
}

static int confound_row(sqlite3_stmt *s, void *row) {
    lab_rp_confound *c = row;
    return dup(s, 0, &c->kind) | dup(s, 1, &c->subject) | dup(s, 2, &c->rule) | dup(s, 3, &c->reason) |
           dup(s, 4, &c->experiment) | dup(s, 5, &c->arm) | dup(s, 6, &c->key);
}

static int claim_row(sqlite3_stmt *s, void *row) {
    lab_rp_claim *c = row;
    c->open = sqlite3_column_type(s, 4) == SQLITE_NULL;
    return dup(s, 0, &c->subject) | dup(s, 1, &c->rule) | dup(s, 2, &c->reason) | dup(s, 3, &c->first_seen) |
           dup(s, 4, &c->resolved_at) | dup(s, 5, &c->resolved_by);
}

/* The audit's flags: the open confounds and the flags on ledger claims. */
static int audit_flags(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: open confounds";
    int rc = lab_sq_prep_as(st, "SELECT f.subject_kind, f.subject, f.rule, f.reason, coalesce(r.experiment, ''),"
                      " coalesce(r.arm, ''), f.key FROM audit_flags f LEFT JOIN runs r ON f.subject_kind = 'run'"
                      " AND r.id = CAST(f.subject AS INTEGER) WHERE f.resolved_at IS NULL AND f.expected = 0"
                      " ORDER BY f.id", &s, what, err, errlen);
    if (rc) return rc;
    if ((rc = collect(st, s, what, confound_row, sizeof *v->confounds, (void **)&v->confounds, &v->n_confounds, err,
                      errlen))) return rc;
    what = "report: the ledger's claims";
    if ((rc = lab_sq_prep_as(st, "SELECT subject, rule, reason, first_seen, resolved_at, resolved_by FROM audit_flags"
                       " WHERE subject_kind = 'claim' ORDER BY resolved_at IS NOT NULL, subject, rule", &s, what, err,
                   errlen))) return rc;
    return collect(st, s, what, claim_row, sizeof *v->claims, (void **)&v->claims, &v->n_claims, err, errlen);
}

static int verdict_row(sqlite3_stmt *s, void *row) {
    lab_rp_verdict *r = row;
    r->k = sqlite3_column_int64(s, 3);
    r->n = sqlite3_column_int64(s, 4);
    r->lo = sqlite3_column_double(s, 5);
    r->hi = sqlite3_column_double(s, 6);
    r->assertions_ok = sqlite3_column_int(s, 7);
    r->expect_fail = !strcmp(lab_col_text(s, 8), "fail");
    lab_engine_name_read(s, 9, &r->engine);
    return dup(s, 0, &r->experiment) | dup(s, 1, &r->arm) | dup(s, 2, &r->verdict);
}

/* Each experiment's arms: the latest verdict. */
static int verdicts(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: verdicts";
    int rc = lab_sq_prep_as(st, "SELECT r.experiment, r.arm, v.verdict, v.k, v.n, v.lo, v.hi, r.assertions_ok,"
                      " r.expected_assertions," LAB_ENGINE_SQL("r")
                      " FROM runs r JOIN verdicts v ON v.run_id = r.id WHERE r.status = 'FINISHED'"
                      " AND r.id = (SELECT max(r2.id) FROM runs r2 JOIN verdicts v2 ON v2.run_id = r2.id"
                      " WHERE r2.experiment = r.experiment AND r2.arm = r.arm AND r2.status = 'FINISHED')"
                      " ORDER BY r.experiment, r.id", &s, what, err, errlen);
    if (rc) return rc;
    return collect(st, s, what, verdict_row, sizeof *v->verdicts, (void **)&v->verdicts, &v->n_verdicts, err, errlen);
}

static int nightly_row(sqlite3_stmt *s, void *row) {
    lab_rp_nightly *n = row;
    n->id = sqlite3_column_int64(s, 0);
    n->n_runs = sqlite3_column_int64(s, 4);
    n->n_regressions = sqlite3_column_int64(s, 5);
    return dup(s, 1, &n->started) | dup(s, 2, &n->commit) | dup(s, 3, &n->status) | dup(s, 6, &n->audit) |
           dup(s, 7, &n->host);
}

static int finding_row(sqlite3_stmt *s, void *row) {
    lab_rp_finding *f = row;
    f->regression = sqlite3_column_int(s, 3);
    return dup(s, 0, &f->experiment) | dup(s, 1, &f->arm) | dup(s, 2, &f->kind) | dup(s, 4, &f->message);
}

/* The latest nightlies and the findings of the latest. */
static int nightlies(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    const char *what = "report: nightlies";
    int rc = lab_sq_prep_as(st, "SELECT id, started_at, git_commit, status, n_runs, n_regressions, audit, host FROM nightlies"
                      " ORDER BY id DESC LIMIT 30", &s, what, err, errlen);
    if (rc) return rc;
    if ((rc = collect(st, s, what, nightly_row, sizeof *v->nightlies, (void **)&v->nightlies, &v->n_nightlies, err,
                      errlen)) || !v->n_nightlies) return rc;
    what = "report: the latest nightly's findings";
    if ((rc = lab_sq_prep_as(st, "SELECT experiment, arm, kind, regression, message FROM nightly_findings WHERE nightly_id = ?1"
                       " ORDER BY regression DESC, experiment, arm, kind", &s, what, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, v->nightlies[0].id);
    return collect(st, s, what, finding_row, sizeof *v->findings, (void **)&v->findings, &v->n_findings, err, errlen);
}

/* When the flags were last stored and from which ledger: the page names it,
 * since the same database audited against another ledger (a copy, after a
 * reopen) shows other confounds. */
static int latest_audit(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    int have = 0, rc = lab_store_has_table(st, "audits", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    const char *what = "report: the latest audit";
    if ((rc = lab_sq_prep_as(st, "SELECT at, specs_dir FROM audits ORDER BY id DESC LIMIT 1", &s, what, err, errlen)))
        return rc;
    int last = sqlite3_step(s);
    if (last == SQLITE_ROW) {
        lab_sq_col_copy(s, 0, v->audit_at, sizeof v->audit_at);
        lab_sq_col_copy(s, 1, v->audit_specs, sizeof v->audit_specs);
        last = SQLITE_DONE;
    }
    return lab_sq_done(st, s, last, what, err, errlen);
}

int lab_rp_read_page(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    int rc = experiments(st, v, err, errlen);
    if (!rc) rc = lab_store_has_table(st, "audit_flags", &v->has_audit, err, errlen);
    if (!rc && v->has_audit) rc = audit_flags(st, v, err, errlen);
    if (!rc && v->has_audit) rc = latest_audit(st, v, err, errlen);
    if (!rc) rc = verdicts(st, v, err, errlen);
    if (!rc) rc = lab_store_has_table(st, "nightlies", &v->has_nightlies, err, errlen);
    if (!rc && v->has_nightlies) rc = nightlies(st, v, err, errlen);
    return rc;
}

/* ------------------------------------------------------------ freeing the views */

/* Frees n rows of `size` bytes at v, each through free_row. */
static void free_rows(void *v, int64_t n, size_t size, void (*free_row)(void *)) {
    for (int64_t i = 0; i < n; i++) free_row((char *)v + (size_t)i * size);
    free(v);
}

static void free_confound(void *row) {
    lab_rp_confound *c = row;
    free(c->kind); free(c->subject); free(c->rule); free(c->reason); free(c->experiment); free(c->arm); free(c->key);
}

static void free_claim(void *row) {
    lab_rp_claim *c = row;
    free(c->subject); free(c->rule); free(c->reason); free(c->first_seen); free(c->resolved_at); free(c->resolved_by);
}

static void free_verdict(void *row) {
    lab_rp_verdict *r = row;
    free(r->experiment); free(r->arm); free(r->verdict);
}

static void free_nightly(void *row) {
    lab_rp_nightly *n = row;
    free(n->started); free(n->commit); free(n->status); free(n->audit); free(n->host);
}

static void free_finding(void *row) {
    lab_rp_finding *f = row;
    free(f->experiment); free(f->arm); free(f->kind); free(f->message);
}

void lab_rp_page_free(lab_rp_page_view *v) {
    for (int i = 0; i < v->n_experiments; i++) free(v->experiments[i]);
    free(v->experiments);
    free_rows(v->confounds, v->n_confounds, sizeof *v->confounds, free_confound);
    free_rows(v->claims, v->n_claims, sizeof *v->claims, free_claim);
    free_rows(v->verdicts, v->n_verdicts, sizeof *v->verdicts, free_verdict);
    free_rows(v->nightlies, v->n_nightlies, sizeof *v->nightlies, free_nightly);
    free_rows(v->findings, v->n_findings, sizeof *v->findings, free_finding);
    memset(v, 0, sizeof *v);
}

static void free_probe_site(void *row) {
    lab_rp_probe_site *p = row;
    free(p->site); free(p->dtypes); free(p->first_violation);
}

static void free_expectation(void *row) {
    lab_rp_expectation *x = row;
    free(x->site); free(x->expected); free(x->seen); free(x->reason);
}

static void free_flag(void *row) {
    lab_rp_flag *f = row;
    free(f->subject); free(f->arm); free(f->rule); free(f->reason); free(f->first_seen);
}

static void free_regression(void *row) {
    lab_rp_regression *r = row;
    free(r->arm); free(r->kind);
}

static void free_arm(void *row) {
    arm_view *a = row;
    free(a->description); free(a->spec_knobs); free(a->spec_expect); free(a->error);
    free(a->assertion_reason); free(a->resolved_knobs); free(a->tags); free(a->notes);
    free_rows(a->probes, a->n_probes, sizeof *a->probes, free_probe_site);
    free_rows(a->expects, a->n_expects, sizeof *a->expects, free_expectation);
    free(a->div);
    free(a->kl);
}

void lab_rp_exp_free(exp_view *e) {
    free_rows(e->arms, e->n_arms, sizeof *e->arms, free_arm);
    free(e->description); free(e->hypothesis); free(e->file); free(e->spec_json);
    free_rows(e->flags, e->n_flags, sizeof *e->flags, free_flag);
    free(e->hist);
    free_rows(e->regs, e->n_regs, sizeof *e->regs, free_regression);
    memset(e, 0, sizeof *e);
}
