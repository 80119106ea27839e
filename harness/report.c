/*
 * report.c — `vtlab report` (see report.h for what it writes).
 *
 * The page is built in memory from read-only queries, one experiment at a
 * time, then written with .tmp + rename, so a reader never sees half a page.
 * Charts are gnuplot scripts over small text data files (plot.h); a chart
 * that cannot be drawn is named on the page and on stderr, and the rest of
 * the report is still written.
 *
 * Which runs the page shows: for each experiment and arm, the latest
 * FINISHED run of repeat 0 (the latest of any status when none finished), so
 * after a nightly the page shows that night. Older runs stay in the database
 * and appear in the nightly history charts.
 *
 * Layer kinds for the divergence chart come from the run's own probe
 * records (kda.state marks a KDA layer, the moe.* sites a MoE layer, every
 * other layer of residual.stream is MLA); when a run has no probes (VT_PROBE
 * off) the model named by the stored experiment spec is opened and asked.
 */
#include "report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "experiment.h"
#include "metrics.h"
#include "model/vt.h"
#include "plot.h"
#include "runner.h"

/* ------------------------------------------------------------ escaping */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static int utf8_len(const unsigned char *s) {
    unsigned char c = s[0];
    int n;
    unsigned cp;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF)
        return 0;
    return n;
}

void lab_esc_html(lab_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        int n = utf8_len(p);
        if (n == 0) { lab_buf_append(b, "\xEF\xBF\xBD", 3); p++; continue; }
        if (n > 1) { lab_buf_append(b, p, (size_t)n); p += n; continue; }
        switch (*p) {
        case '&': lab_buf_append(b, "&amp;", 5); break;
        case '<': lab_buf_append(b, "&lt;", 4); break;
        case '>': lab_buf_append(b, "&gt;", 4); break;
        case '"': lab_buf_append(b, "&quot;", 6); break;
        case '\'': lab_buf_append(b, "&#39;", 5); break;
        default:
            /* XML 1.0 allows no control characters but tab, LF and CR. */
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') lab_buf_append(b, "\xEF\xBF\xBD", 3);
            else lab_buf_append(b, p, 1);
        }
        p++;
    }
}

void lab_esc_md_code(lab_buf *b, const char *s) {
    for (const char *p = s ? s : ""; *p; p++) {
        char c = *p == '`' ? '\'' : (*p == '\n' || *p == '\r') ? ' ' : *p;
        lab_buf_append(b, &c, 1);
    }
}

void lab_esc_md(lab_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        int n = utf8_len(p);
        if (n == 0) { lab_buf_append(b, "\xEF\xBF\xBD", 3); p++; continue; }
        if (n > 1) { lab_buf_append(b, p, (size_t)n); p += n; continue; }
        if (*p == '&') lab_buf_append(b, "&amp;", 5);
        else if (*p == '<') lab_buf_append(b, "&lt;", 4);
        else if (*p == '>') lab_buf_append(b, "&gt;", 4);
        else if (*p == '\n' || *p == '\r') lab_buf_append(b, " ", 1);
        else if (*p < 0x20) lab_buf_append(b, "\xEF\xBF\xBD", 3);
        else {
            if (strchr("\\`*_[]#+|~", *p)) lab_buf_append(b, "\\", 1);
            lab_buf_append(b, p, 1);
        }
        p++;
    }
}

/* ------------------------------------------------------------ small db helpers */


static int prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, s, NULL) != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "report query: %s", sqlite3_errmsg(lab_store_db(st)));
    return LAB_OK;
}

static double col_num(sqlite3_stmt *s, int i) {
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static void fmt_g(char *out, size_t n, double v) {
    if (isnan(v)) snprintf(out, n, "–");
    else snprintf(out, n, "%.3g", v);
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

static int load_topk(lab_store *st, int64_t run, topk_rows *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    sqlite3_stmt *s;
    int rc = prep(st, "SELECT t.n_pos, t.k, t.ids, t.logprobs, r.score FROM logits_topk t JOIN runs r ON r.id = t.run_id"
                      " WHERE t.run_id = ?1 ORDER BY t.seq", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int64_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 0), k = sqlite3_column_int64(s, 1);
        const void *ib = sqlite3_column_blob(s, 2);
        int64_t ibytes = sqlite3_column_bytes(s, 2);
        const void *lb = sqlite3_column_blob(s, 3);
        int64_t lbytes = sqlite3_column_bytes(s, 3);
        int last = !strcmp(lab_col_text(s, 4), "last");
        if (k <= 0 || np <= 0 || (t->k && k != t->k) || ibytes != np * k * 4 || lbytes != np * k * 4) {
            rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: malformed logits_topk row", (long long)run);
            goto out;
        }
        t->k = k;
        for (int64_t p = last ? np - 1 : 0; p < np; p++) {
            if (t->n == cap) {
                cap = cap ? cap * 2 : 256;
                int32_t *ni = realloc(t->ids, (size_t)(cap * k) * sizeof *ni);
                if (ni) t->ids = ni;
                float *nl = realloc(t->lp, (size_t)(cap * k) * sizeof *nl);
                if (nl) t->lp = nl;
                if (!ni || !nl) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto out; }
            }
            memcpy(t->ids + t->n * k, (const char *)ib + (size_t)(p * k) * 4, (size_t)k * 4);
            memcpy(t->lp + t->n * k, (const char *)lb + (size_t)(p * k) * 4, (size_t)k * 4);
            t->n++;
        }
    }
    rc = rc == SQLITE_DONE ? LAB_OK : lab_errf(err, errlen, LAB_EIO, "read logits_topk: %s", sqlite3_errmsg(lab_store_db(st)));
out:
    sqlite3_finalize(s);
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
    int rc = prep(st, sql, &a, err, errlen);
    if (rc) return -rc;
    if ((rc = prep(st, sql, &b, err, errlen))) { sqlite3_finalize(a); return -rc; }
    sqlite3_bind_int64(a, 1, rp);
    sqlite3_bind_int64(b, 1, rq);
    double *out = NULL, *lp = NULL, *lq = NULL;
    float *fp = NULL, *fq = NULL;
    int64_t cnt = 0, cap = 0, vocab = 0;
    int any = 0, result = 0;
    for (;;) {
        int ra = sqlite3_step(a), rb = sqlite3_step(b);
        if (ra == SQLITE_DONE && rb == SQLITE_DONE) break;
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

/* ------------------------------------------------------------ the model of the page */

typedef struct arm_view {
    char    name[128];
    char   *description;       /* from the spec; may be NULL */
    char   *spec_knobs;        /* "VT_A=1, VT_B=x" as the spec writes them */
    char   *spec_expect;       /* "residual.stream=bf16, ..." */
    int     expect_fail;
    int     is_reference;
    int64_t run_id;            /* 0: never run */
    char    status[16];
    char   *error;
    int     assertions_ok;     /* -1 unknown */
    char   *assertion_reason;
    char   *resolved_knobs;    /* non-default resolved knobs of the run */
    char    backend[16], started[32], code_version[160];
    /* comparison with the reference (has_cmp) */
    int     has_cmp;
    int64_t ref_run, k, n;
    double  lo, hi, kl_mean, kl_p99, kl_max, max_dl, rms_dp, mc_p;
    int64_t first_layer;       /* -1: none above tolerance */
    int     first_site;
    double  first_value, div_tol;
    int     has_verdict;
    char    verdict[16], direction[4], metric[32];
    double  threshold;
    double  tps, ppl;
    double  peak_frac;         /* benchmark runs: achieved FLOP/s over the peak (NAN: none) */
} arm_view;

typedef struct exp_view {
    char     id[128];
    char    *description, *hypothesis, *file;
    char     reference[128];
    int      has_decision, decision_ge;
    double   threshold;
    arm_view *arms;
    int      n_arms;
    char     spec_sha[65];
    char    *spec_json;
} exp_view;

static void exp_view_free(exp_view *e) {
    for (int i = 0; i < e->n_arms; i++) {
        arm_view *a = &e->arms[i];
        free(a->description); free(a->spec_knobs); free(a->spec_expect); free(a->error);
        free(a->assertion_reason); free(a->resolved_knobs);
    }
    free(e->arms);
    free(e->description); free(e->hypothesis); free(e->file); free(e->spec_json);
    memset(e, 0, sizeof *e);
}

static char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? lab_strdup(v->valuestring) : NULL;
}

/* "K=V, K=V" of a JSON object whose values are strings, numbers or bools. */
static char *json_pairs(const cJSON *o) {
    lab_buf b = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        if (b.len) lab_buf_append(&b, ", ", 2);
        if (cJSON_IsString(it)) lab_buf_printf(&b, "%s=%s", it->string, it->valuestring);
        else if (cJSON_IsBool(it)) lab_buf_printf(&b, "%s=%d", it->string, cJSON_IsTrue(it) ? 1 : 0);
        else if (cJSON_IsNumber(it)) lab_buf_printf(&b, "%s=%g", it->string, it->valuedouble);
        else lab_buf_printf(&b, "%s=?", it->string);
    }
    if (!b.data) lab_buf_append(&b, "", 0);
    return b.data;
}

static arm_view *add_arm(exp_view *e, const char *name) {
    for (int i = 0; i < e->n_arms; i++)
        if (!strcmp(e->arms[i].name, name)) return &e->arms[i];
    arm_view *na = realloc(e->arms, (size_t)(e->n_arms + 1) * sizeof *na);
    if (!na) return NULL;
    e->arms = na;
    arm_view *a = &e->arms[e->n_arms++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->assertions_ok = -1;
    a->first_layer = -1;
    a->tps = a->ppl = a->peak_frac = NAN;
    return a;
}

/* The experiment's spec (that of its latest run) and its arms in spec order. */
static int load_spec(lab_store *st, exp_view *e, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prep(st, "SELECT s.sha256, s.json, s.file FROM runs r JOIN experiment_specs s ON s.sha256 = r.experiment_sha256"
                      " WHERE r.experiment = ?1 ORDER BY r.id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(e->spec_sha, sizeof e->spec_sha, "%s", lab_col_text(s, 0));
        e->spec_json = lab_strdup(lab_col_text(s, 1));
        e->file = lab_strdup(lab_col_text(s, 2));
    }
    sqlite3_finalize(s);
    cJSON *j = e->spec_json ? cJSON_Parse(e->spec_json) : NULL;
    if (!j) return LAB_OK;
    e->description = json_str(j, "description");
    e->hypothesis = json_str(j, "hypothesis");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "reference");
    if (cJSON_IsString(ref)) snprintf(e->reference, sizeof e->reference, "%s", ref->valuestring);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "decision");
    if (cJSON_IsObject(d)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "threshold");
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(d, "direction");
        if (cJSON_IsNumber(t)) {
            e->has_decision = 1;
            e->threshold = t->valuedouble;
            e->decision_ge = !(cJSON_IsString(dir) && !strcmp(dir->valuestring, "<="));
        }
    }
    const cJSON *arms = cJSON_GetObjectItemCaseSensitive(j, "arms"), *it;
    cJSON_ArrayForEach(it, arms) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(nm)) continue;
        arm_view *a = add_arm(e, nm->valuestring);
        if (!a) { cJSON_Delete(j); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        a->description = json_str(it, "description");
        a->spec_knobs = json_pairs(cJSON_GetObjectItemCaseSensitive(it, "knobs"));
        a->spec_expect = json_pairs(cJSON_GetObjectItemCaseSensitive(it, "expect"));
        const cJSON *ea = cJSON_GetObjectItemCaseSensitive(it, "expect_assertions");
        a->expect_fail = cJSON_IsString(ea) && !strcmp(ea->valuestring, "fail");
        a->is_reference = !strcmp(a->name, e->reference);
    }
    cJSON_Delete(j);
    return LAB_OK;
}

/* The run an arm shows: latest FINISHED repeat 0, else the latest of any. */
static int load_arm_run(lab_store *st, exp_view *e, arm_view *a, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = prep(st,
                  "SELECT id, status, error, assertions_ok, assertion_reason, backend, started_at, code_version, is_reference"
                  " FROM runs WHERE experiment = ?1 AND arm = ?2"
                  " ORDER BY (status = 'FINISHED' AND repeat_idx = 0) DESC, id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, a->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
        a->run_id = sqlite3_column_int64(s, 0);
        snprintf(a->status, sizeof a->status, "%s", lab_col_text(s, 1));
        if (sqlite3_column_type(s, 2) != SQLITE_NULL) a->error = lab_strdup(lab_col_text(s, 2));
        a->assertions_ok = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 3);
        if (sqlite3_column_type(s, 4) != SQLITE_NULL) a->assertion_reason = lab_strdup(lab_col_text(s, 4));
        snprintf(a->backend, sizeof a->backend, "%s", lab_col_text(s, 5));
        snprintf(a->started, sizeof a->started, "%s", lab_col_text(s, 6));
        snprintf(a->code_version, sizeof a->code_version, "%s", lab_col_text(s, 7));
        if (sqlite3_column_int(s, 8)) a->is_reference = 1;
    }
    sqlite3_finalize(s);
    if (!a->run_id) return LAB_OK;

    if ((rc = prep(st,
                   "SELECT c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean, c.kl_p99, c.kl_max,"
                   " c.max_abs_dlogit, c.rms_dp, c.mcnemar_p, c.first_div_layer, c.first_div_site, c.first_div_value,"
                   " c.div_tolerance, v.verdict, v.threshold, v.direction, v.metric"
                   " FROM comparisons c LEFT JOIN verdicts v ON v.run_id = c.run_id AND v.reference_run_id = c.reference_run_id"
                   " WHERE c.run_id = ?1 LIMIT 1", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    if (sqlite3_step(s) == SQLITE_ROW) {
        a->has_cmp = 1;
        a->ref_run = sqlite3_column_int64(s, 0);
        a->k = sqlite3_column_int64(s, 1);
        a->n = sqlite3_column_int64(s, 2);
        a->lo = col_num(s, 3);
        a->hi = col_num(s, 4);
        a->kl_mean = col_num(s, 5);
        a->kl_p99 = col_num(s, 6);
        a->kl_max = col_num(s, 7);
        a->max_dl = col_num(s, 8);
        a->rms_dp = col_num(s, 9);
        a->mc_p = col_num(s, 10);
        a->first_layer = sqlite3_column_type(s, 11) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 11);
        a->first_site = sqlite3_column_int(s, 12);
        a->first_value = col_num(s, 13);
        a->div_tol = col_num(s, 14);
        if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
            a->has_verdict = 1;
            snprintf(a->verdict, sizeof a->verdict, "%s", lab_col_text(s, 15));
            a->threshold = col_num(s, 16);
            snprintf(a->direction, sizeof a->direction, "%s", lab_col_text(s, 17));
            snprintf(a->metric, sizeof a->metric, "%s", lab_col_text(s, 18));
        }
    }
    sqlite3_finalize(s);

    if ((rc = prep(st,
                   "SELECT name, value FROM metrics WHERE run_id = ?1"
                   " AND name IN ('tokens_per_s', 'perplexity', 'flops_frac_of_peak')",
                   &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *m = lab_col_text(s, 0);
        if (!strcmp(m, "tokens_per_s")) a->tps = col_num(s, 1);
        else if (!strcmp(m, "perplexity")) a->ppl = col_num(s, 1);
        else a->peak_frac = col_num(s, 1);
    }
    sqlite3_finalize(s);

    /* Resolved knobs that differ from their declared default: what really ran. */
    if ((rc = prep(st, "SELECT name, value FROM run_knobs WHERE run_id = ?1 ORDER BY name", &s, err, errlen))) return rc;
    sqlite3_bind_int64(s, 1, a->run_id);
    lab_buf b = {0};
    while (sqlite3_step(s) == SQLITE_ROW) {
        const vt_knob_info *ki = vt_knob_find(lab_col_text(s, 0));
        if (ki && ki->def && !strcmp(ki->def, lab_col_text(s, 1))) continue;
        lab_buf_printf(&b, "%s%s=%s", b.len ? ", " : "", lab_col_text(s, 0), lab_col_text(s, 1));
    }
    sqlite3_finalize(s);
    if (!b.data) lab_buf_append(&b, "", 0);
    a->resolved_knobs = b.data;
    return LAB_OK;
}

static int load_experiment(lab_store *st, const char *id, exp_view *e, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    int rc = load_spec(st, e, err, errlen);
    if (rc) return rc;
    /* Arms that ran but are not in the latest spec are shown after it. */
    sqlite3_stmt *s;
    if ((rc = prep(st, "SELECT arm, max(is_reference) FROM runs WHERE experiment = ?1 GROUP BY arm ORDER BY min(id)", &s,
                   err, errlen))) return rc;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(s) == SQLITE_ROW) {
        arm_view *a = add_arm(e, lab_col_text(s, 0));
        if (!a) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        if (!e->reference[0] && sqlite3_column_int(s, 1)) snprintf(e->reference, sizeof e->reference, "%s", a->name);
    }
    sqlite3_finalize(s);
    for (int i = 0; i < e->n_arms; i++) {
        if ((rc = load_arm_run(st, e, &e->arms[i], err, errlen))) return rc;
        if (!strcmp(e->arms[i].name, e->reference)) e->arms[i].is_reference = 1;
    }
    return LAB_OK;
}

/* ------------------------------------------------------------ layer kinds */

typedef struct layer_kinds {
    int  n;                    /* layers; 0 when unknown */
    char attn[256];            /* 'K' KDA, 'M' MLA */
    char ffn[256];             /* 'E' MoE, 'D' dense */
    char source[96];
} layer_kinds;

static void kinds_from_model(const exp_view *e, layer_kinds *lk) {
    if (!e->spec_json) return;
    lab_experiment *x = NULL;
    char err[1024];
    if (lab_experiment_parse(&x, e->file ? e->file : "spec", e->spec_json, err, sizeof err)) return;
    char *dir = NULL;
    if (!x->model_synth && (!x->model_dir || !lab_path_exists(x->model_dir))) { lab_experiment_free(x); return; }
    if (lab_model_dir(x, &dir, err, sizeof err) == 0) {
        vt_model *m = NULL;
        if (vt_model_open(&m, dir, err, sizeof err) == 0) {
            vt_model_info mi;
            vt_model_get_info(m, &mi);
            lk->n = (int)(mi.n_layers < 255 ? mi.n_layers : 255);
            for (int l = 0; l < lk->n; l++) {
                lk->attn[l] = mi.layer_kind[l] == 'M' ? 'M' : 'K';
                lk->ffn[l] = mi.layer_ffn[l] == 'E' ? 'E' : 'D';
            }
            snprintf(lk->source, sizeof lk->source, "the model of the experiment spec");
            vt_model_free(m);
        }
    }
    free(dir);
    lab_experiment_free(x);
}

static int layer_kinds_of(lab_store *st, const exp_view *e, int64_t run, layer_kinds *lk, char *err, size_t errlen) {
    memset(lk, 0, sizeof *lk);
    sqlite3_stmt *s;
    int rc = prep(st, "SELECT DISTINCT site, layer FROM probes WHERE run_id = ?1 AND layer >= 0 AND layer < 255", &s, err,
                  errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    int any_kda = 0, n = 0;
    memset(lk->attn, 'M', sizeof lk->attn);
    memset(lk->ffn, 'D', sizeof lk->ffn);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *site = lab_col_text(s, 0);
        int l = sqlite3_column_int(s, 1);
        if (l + 1 > n) n = l + 1;
        if (!strcmp(site, "kda.state")) { lk->attn[l] = 'K'; any_kda = 1; }
        if (!strncmp(site, "moe.", 4)) lk->ffn[l] = 'E';
    }
    sqlite3_finalize(s);
    lk->attn[255] = lk->ffn[255] = 0;
    if (n > 0 && any_kda) {
        lk->n = n;
        lk->attn[n] = lk->ffn[n] = 0;
        snprintf(lk->source, sizeof lk->source, "the run's probe records");
        return LAB_OK;
    }
    memset(lk, 0, sizeof *lk);
    kinds_from_model(e, lk);
    return LAB_OK;
}

/* ------------------------------------------------------------ charts */

typedef struct page {
    lab_store *st;
    const lab_report_opts *o;
    lab_report_result *res;
    char plot_dir[4096];
    int  plots_on;
    lab_buf html, md;
    char err[1024];
} page;

/* Draws one chart and puts it on the page (or names why it is missing). */
static void chart(page *pg, const char *name, const char *data, const char *body, int w, int h, const char *caption) {
    if (!pg->plots_on) return;
    char err[1024] = "";
    int rc = lab_plot_render(pg->plot_dir, name, data, body, w, h, err, sizeof err);
    if (rc) {
        pg->res->plot_failures++;
        fprintf(stderr, "vtlab report: chart %s not drawn: %s\n", name, err);
        lab_buf_printf(&pg->html, "<p class=\"bad\">chart %s not drawn: ", name);
        lab_esc_html(&pg->html, err);
        lab_buf_printf(&pg->html, "</p>\n");
        return;
    }
    pg->res->n_plots++;
    lab_buf_printf(&pg->html,
                   "<figure><a href=\"plots/%s.png\"><img src=\"plots/%s.svg\" alt=\"%s\" width=\"%d\"></a>"
                   "<figcaption>", name, name, name, w);
    lab_esc_html(&pg->html, caption);
    lab_buf_printf(&pg->html, " (<a href=\"plots/%s.png\">PNG</a>, <a href=\"plots/%s.svg\">SVG</a>, "
                              "<a href=\"plots/src/%s.gp\">script</a>)</figcaption></figure>\n", name, name, name);
    lab_buf_printf(&pg->md, "![%s](plots/%s.png)\n\n", name, name);
}

static void chart_top1(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0};
    int n = 0;
    double ymin = 1;
    char lab[160], title[300];
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference || a->n <= 0) continue;
        double v = (double)a->k / (double)a->n;
        lab_buf_printf(&d, "\"%s\" %.6f %.6f %.6f %lld %lld\n", lab_gp_label(a->name, lab, sizeof lab), v, a->lo, a->hi,
                       (long long)a->k, (long long)a->n);
        if (a->lo < ymin) ymin = a->lo;
        n++;
    }
    if (!n) { lab_buf_free(&d); return; }
    if (e->has_decision && e->threshold < ymin) ymin = e->threshold;
    ymin = floor((ymin - 0.05) * 10) / 10;
    if (ymin < 0) ymin = 0;
    lab_buf_printf(&b, "set title \"%s: top-1 agreement with reference %s (Wilson 95%% interval)\"\n",
                   lab_gp_label(e->id, title, sizeof title), lab_gp_label(e->reference, lab, sizeof lab));
    lab_buf_printf(&b, "set ylabel 'top-1 agreement k/n (fraction of scored positions)'\nset xlabel 'arm'\n"
                       "set xrange [-0.5:%d.5]\nset yrange [%.2f:1.02]\nset grid ytics\nset key bottom left box opaque\n"
                       "set offsets 0,0,0,0\nset xtics noenhanced rotate by -15\nset bmargin 6\n", n - 1, ymin);
    lab_buf_printf(&b, "plot 'src/%s.dat' using 0:2:3:4:xticlabels(1) with yerrorbars pt 7 ps 1.5 lw 2 lc rgb '#1f5fa8'"
                       " title 'k/n with Wilson 95%% interval', '' using 0:2:(sprintf('%%d/%%d', $5, $6)) with labels"
                       " offset 4,0 notitle", stem);
    if (e->has_decision)
        lab_buf_printf(&b, ", %.6g with lines dt 2 lw 2 lc rgb '#c0392b' title 'decision threshold %.3g (%s)'", e->threshold,
                       e->threshold, e->decision_ge ? "SUPPORTED when lo >= it" : "SUPPORTED when hi <= it");
    lab_buf_printf(&b, "\n");
    chart(pg, stem, d.data, b.data, 900, 480, "Top-1 agreement of each arm with the reference arm, with its Wilson 95% "
                                              "interval and the experiment's decision threshold.");
    lab_buf_free(&d);
    lab_buf_free(&b);
}

static void chart_divergence(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0};
    char lab[160], title[300];
    int blocks = 0;
    double tol = NAN;
    int64_t kinds_run = 0;
    lab_buf plots = {0};
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference) continue;
        sqlite3_stmt *s;
        if (prep(pg->st, "SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ?1 AND reference_run_id = ?2"
                         " ORDER BY layer, site", &s, pg->err, sizeof pg->err)) continue;
        sqlite3_bind_int64(s, 1, a->run_id);
        sqlite3_bind_int64(s, 2, a->ref_run);
        int rows = 0;
        while (sqlite3_step(s) == SQLITE_ROW) {
            double v = sqlite3_column_double(s, 2);
            if (!(v > 1e-10)) v = 1e-10;       /* log scale: exact zero is drawn at the floor */
            if (v > 1e3) v = 1e3;              /* 1e308 stands for +inf */
            lab_buf_printf(&d, "%.3f %.6g\n", (double)sqlite3_column_int64(s, 0) + (sqlite3_column_int(s, 1) ? 0.75 : 0.25), v);
            rows++;
        }
        sqlite3_finalize(s);
        if (!rows) continue;
        lab_buf_printf(&d, "\n\n");
        if (isnan(tol) && !isnan(a->div_tol)) tol = a->div_tol;
        kinds_run = a->ref_run;
        lab_buf_printf(&plots, "%s'src/%s.dat' index %d using 1:2 with linespoints lw 2 pt 7 ps 0.8 title \"%s\"",
                       blocks ? ", " : "", stem, blocks, lab_gp_label(a->name, lab, sizeof lab));
        blocks++;
    }
    if (!blocks) { lab_buf_free(&d); lab_buf_free(&plots); return; }
    layer_kinds lk;
    layer_kinds_of(pg->st, e, kinds_run, &lk, pg->err, sizeof pg->err);
    int nl = lk.n;
    lab_buf_printf(&b, "set title \"%s: relative L2 distance of the residual stream from reference %s, per layer\"\n",
                   lab_gp_label(e->id, title, sizeof title), lab_gp_label(e->reference, lab, sizeof lab));
    lab_buf_printf(&b, "set logscale y\nset format y '%%.0e'\n"
                       "set ylabel 'rel. L2 ||h_arm - h_ref|| / ||h_ref|| (log)'\n"
                       "set xlabel 'layer (left half: after attention, right half: after FFN)'\n"
                       "set grid ytics\nset key outside right top\n");
    if (nl > 0) {
        lab_buf_printf(&b, "set xrange [0:%d]\nset xtics (", nl);
        for (int l = 0; l < nl; l++)
            lab_buf_printf(&b, "%s\"%d\\n%s\\n%s\" %d.5", l ? ", " : "", l, lk.attn[l] == 'K' ? "KDA" : "MLA",
                           lk.ffn[l] == 'E' ? "MoE" : "dense", l);
        lab_buf_printf(&b, ")\nset bmargin 7\nset xlabel offset 0,-1.5\n");
        for (int l = 0; l < nl; l++) {
            if (lk.ffn[l] == 'E')
                lab_buf_printf(&b, "set object rect from %d.5, graph 0 to %d, graph 1 fc rgb '#f6d7a7' fs solid 0.45"
                                   " noborder behind\n", l, l + 1);
            if (lk.attn[l] == 'M')
                lab_buf_printf(&b, "set object rect from %d, graph 0 to %d.5, graph 1 fc rgb '#bcd4f0' fs solid 0.45"
                                   " noborder behind\n", l, l);
            lab_buf_printf(&b, "set arrow from %d, graph 0 to %d, graph 1 nohead lc rgb '#999999' dt 3\n", l, l);
        }
    }
    lab_buf_printf(&b, "plot %s", plots.data);
    if (!isnan(tol))
        lab_buf_printf(&b, ", %.6g with lines dt 2 lw 1.5 lc rgb '#c0392b' title 'tolerance %.3g'", tol, tol);
    if (nl > 0)
        lab_buf_printf(&b, ", keyentry with boxes fc rgb '#f6d7a7' fs solid 0.45 title 'MoE FFN (shaded)'"
                           ", keyentry with boxes fc rgb '#bcd4f0' fs solid 0.45 title 'MLA attention (shaded)'");
    lab_buf_printf(&b, "\n");
    char cap[512];
    snprintf(cap, sizeof cap, "Per-layer divergence of each arm from the reference (log scale); exact zeros are drawn at "
                              "1e-10. Layer kinds from %s.%s", nl ? lk.source : "nowhere",
             nl ? " A defect in the MoE path shows as a jump at the first MoE layer." : " (unknown: no probes, model not found)");
    chart(pg, stem, d.data, b.data, 1000, 520, cap);
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&plots);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void chart_kl_cdf(page *pg, const exp_view *e, const char *stem) {
    lab_buf d = {0}, b = {0}, plots = {0};
    char lab[160], title[300];
    int blocks = 0, all_exact = 1;
    lab_buf notes = {0};
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->has_cmp || a->is_reference) continue;
        double *kl = NULL;
        int64_t n = 0;
        int exact = 0;
        char err[512];
        if (lab_position_kl(pg->st, a->ref_run, a->run_id, &kl, &n, &exact, err, sizeof err) || n == 0) {
            free(kl);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < n; j++) sum += kl[j];
        qsort(kl, (size_t)n, sizeof *kl, cmp_double);
        for (int64_t j = 0; j < n; j++)
            lab_buf_printf(&d, "%.6g %.6f\n", kl[j] > 1e-9 ? kl[j] : 1e-9, (double)(j + 1) / (double)n);
        lab_buf_printf(&d, "\n\n");
        free(kl);
        if (!exact) all_exact = 0;
        lab_buf_printf(&notes, "%s%s: mean %.3g (stored exact mean %.3g)", notes.len ? "; " : "", a->name, sum / (double)n,
                       a->kl_mean);
        lab_buf_printf(&plots, "%s'src/%s.dat' index %d using 1:2 with steps lw 2 title \"%s\"", blocks ? ", " : "", stem,
                       blocks, lab_gp_label(a->name, lab, sizeof lab));
        blocks++;
    }
    if (!blocks) { lab_buf_free(&d); lab_buf_free(&plots); lab_buf_free(&notes); return; }
    lab_buf_printf(&b, "set title \"%s: distribution of KL(ref || arm) over scored positions\"\n",
                   lab_gp_label(e->id, title, sizeof title));
    lab_buf_printf(&b, "set logscale x\nset format x '%%.0e'\nset xlabel 'KL(P_ref || P_arm) per position, nats (log; "
                       "zeros drawn at 1e-9)'\nset ylabel 'fraction of positions <= x (CDF)'\nset yrange [0:1.02]\n"
                       "set grid\nset key bottom right box opaque\nplot %s\n", plots.data);
    char cap[1024];
    snprintf(cap, sizeof cap, "Cumulative distribution of the per-position KL divergence of each arm from the reference%s. %s.",
             all_exact ? " (exact, from the stored f16 full logits)"
                       : " (estimated from the stored top-k log-probabilities: the mass outside the reference's top-k "
                         "is lumped into one bucket, so small KLs are under-estimated)",
             notes.data);
    chart(pg, stem, d.data, b.data, 900, 480, cap);
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&plots);
    lab_buf_free(&notes);
}

/* ------------------------------------------------------------ nightly history charts */

typedef struct hist_pt {
    int64_t nightly;
    int     x;                 /* 1-based ordinal of the nightly on the chart */
    char    arm[128];
    int     is_ref;
    int     rep;
    double  top1, lo, hi, kl, ppl, tps;
} hist_pt;

static int has_table(lab_store *st, const char *name) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st), "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &s,
                           NULL) != SQLITE_OK) return 0;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return r;
}

/* 1 when the nightly found a regression of one of kinds ("accuracy,check")
 * on this experiment and arm. */
static int regressed(lab_store *st, int64_t nightly, const char *exp, const char *arm, const char *kinds) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st),
                           "SELECT kind FROM nightly_findings WHERE nightly_id = ?1 AND experiment = ?2 AND arm = ?3"
                           " AND regression = 1", -1, &s, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_int64(s, 1, nightly);
    sqlite3_bind_text(s, 2, exp, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, arm, -1, SQLITE_TRANSIENT);
    int r = 0;
    while (!r && sqlite3_step(s) == SQLITE_ROW) r = strstr(kinds, lab_col_text(s, 0)) != NULL;
    sqlite3_finalize(s);
    return r;
}

static void chart_history(page *pg, const exp_view *e, const char *stem_hist, const char *stem_tps) {
    if (!has_table(pg->st, "nightlies")) return;
    sqlite3_stmt *s;
    if (prep(pg->st,
             "SELECT n.id, substr(n.started_at, 1, 16), n.git_commit, r.arm, r.is_reference, r.repeat_idx, c.top1_k,"
             " c.top1_n, c.top1_lo, c.top1_hi, c.kl_mean,"
             " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'perplexity'),"
             " (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s')"
             " FROM nightlies n JOIN nightly_runs nr ON nr.nightly_id = n.id JOIN runs r ON r.id = nr.run_id"
             " LEFT JOIN comparisons c ON c.run_id = r.id"
             " WHERE r.experiment = ?1 AND r.status = 'FINISHED' AND n.status != 'RUNNING'"
             " ORDER BY n.id, r.repeat_idx, r.id", &s, pg->err, sizeof pg->err)) return;
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    hist_pt *pts = NULL;
    int np = 0, cap = 0, nx = 0;
    int64_t last_n = -1;
    lab_buf xt = {0};
    char lab[160];
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (np == cap) {
            cap = cap ? cap * 2 : 64;
            hist_pt *q = realloc(pts, (size_t)cap * sizeof *q);
            if (!q) break;
            pts = q;
        }
        hist_pt *p = &pts[np++];
        memset(p, 0, sizeof *p);
        p->nightly = sqlite3_column_int64(s, 0);
        if (p->nightly != last_n) {
            last_n = p->nightly;
            nx++;
            char commit[16];
            snprintf(commit, sizeof commit, "%.9s", lab_col_text(s, 2));
            const char *when = lab_col_text(s, 1);
            lab_buf_printf(&xt, "%s\"#%lld %.5s\\n%s\" %d", xt.len ? ", " : "", (long long)p->nightly,
                           strlen(when) >= 10 ? when + 5 : when, lab_gp_label(commit, lab, sizeof lab), nx);
        }
        p->x = nx;
        snprintf(p->arm, sizeof p->arm, "%s", lab_col_text(s, 3));
        p->is_ref = sqlite3_column_int(s, 4);
        p->rep = sqlite3_column_int(s, 5);
        int64_t k = sqlite3_column_int64(s, 6), n = sqlite3_column_int64(s, 7);
        p->top1 = sqlite3_column_type(s, 7) != SQLITE_NULL && n > 0 ? (double)k / (double)n : NAN;
        p->lo = col_num(s, 8);
        p->hi = col_num(s, 9);
        p->kl = col_num(s, 10);
        p->ppl = col_num(s, 11);
        p->tps = col_num(s, 12);
    }
    sqlite3_finalize(s);
    if (!nx) { free(pts); lab_buf_free(&xt); return; }

    /* History of the accuracy and numerics metrics: repeat 0 of each arm. */
    lab_buf d = {0}, b = {0}, p1 = {0}, p2 = {0}, p3 = {0}, mk = {0};
    int blk = 0;
    char title[300];
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        int rows = 0;
        for (int j = 0; j < np; j++) {
            hist_pt *p = &pts[j];
            if (strcmp(p->arm, a->name) || p->rep != 0) continue;
            lab_buf_printf(&d, "%d %.6g %.6g %.6g %.6g %.6g\n", p->x, p->top1, p->lo, p->hi, p->kl > 1e-12 ? p->kl : 1e-12,
                           p->ppl);
            rows++;
            if (regressed(pg->st, p->nightly, e->id, a->name, "accuracy,check,audit") && !isnan(p->top1))
                lab_buf_printf(&mk, "%d %.6g top1\n", p->x, p->top1);
            if (regressed(pg->st, p->nightly, e->id, a->name, "numerics") && !isnan(p->kl))
                lab_buf_printf(&mk, "%d %.6g kl\n", p->x, p->kl > 1e-12 ? p->kl : 1e-12);
        }
        if (!rows) continue;
        lab_buf_printf(&d, "\n\n");
        lab_gp_label(a->name, lab, sizeof lab);
        if (!a->is_reference) {
            lab_buf_printf(&p1, "%s'src/%s.dat' index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 title \"%s\"",
                           p1.len ? ", " : "", stem_hist, blk, lab);
            lab_buf_printf(&p2, "%s'src/%s.dat' index %d using 1:5 with linespoints lw 2 pt 7 title \"%s\"",
                           p2.len ? ", " : "", stem_hist, blk, lab);
        }
        lab_buf_printf(&p3, "%s'src/%s.dat' index %d using 1:6 with linespoints lw 2 pt 7 title \"%s\"", p3.len ? ", " : "",
                       stem_hist, blk, lab);
        blk++;
    }
    if (blk) {
        /* The regression marks are their own data file block at the end. */
        int mblk = blk;
        lab_buf_printf(&d, "%s\n\n", mk.len ? mk.data : "-1 NaN none");
        const char *mark = "with points pt 6 ps 3 lw 3 lc rgb '#d62728' title 'regression flagged'";
        lab_buf_printf(&b, "set multiplot layout 3,1 title \"%s: nightly history (repeat 0 of each arm)\"\n"
                           "set xrange [0.5:%d.5]\nset xtics (%s)\nset grid\nset key outside right top\n"
                           "set lmargin 12\nset rmargin 28\n",
                       lab_gp_label(e->id, title, sizeof title), nx, xt.data);
        if (p1.len)
            lab_buf_printf(&b, "set ylabel 'top-1 agreement k/n'\nplot %s, 'src/%s.dat' index %d using 1:(stringcolumn(3) eq 'top1' ? $2 : NaN) %s\n",
                           p1.data, stem_hist, mblk, mark);
        else lab_buf_printf(&b, "set ylabel 'top-1 agreement'\nplot NaN notitle\n");
        if (p2.len)
            lab_buf_printf(&b, "set logscale y\nset format y '%%.0e'\nset ylabel 'KL mean vs ref, nats (log)'\n"
                               "plot %s, 'src/%s.dat' index %d using 1:(stringcolumn(3) eq 'kl' ? $2 : NaN) %s\n"
                               "unset logscale y\nset format y '%%g'\n", p2.data, stem_hist, mblk, mark);
        else lab_buf_printf(&b, "set ylabel 'KL mean'\nplot NaN notitle\n");
        lab_buf_printf(&b, "set ylabel 'perplexity'\nplot %s\nunset multiplot\n",
                       p3.data);
        chart(pg, stem_hist, d.data, b.data, 1000, 820,
              "Nightly history (x: nightly id, UTC date, commit): top-1 agreement with its interval, mean KL from the reference, and "
              "perplexity; red rings mark nightlies that flagged a regression on that arm.");
    }
    lab_buf_free(&d);
    lab_buf_free(&b);
    lab_buf_free(&p1);
    lab_buf_free(&p2);
    lab_buf_free(&p3);
    lab_buf_free(&mk);

    /* Throughput: median over repeats, with the range of the repeats. */
    lab_buf td = {0}, tb = {0}, tp = {0}, tm = {0};
    blk = 0;
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        int rows = 0;
        for (int x = 1; x <= nx; x++) {
            double v[128];
            int nv = 0;
            int64_t nid = 0;
            for (int j = 0; j < np && nv < 128; j++)
                if (pts[j].x == x && !strcmp(pts[j].arm, a->name) && !isnan(pts[j].tps)) {
                    v[nv++] = pts[j].tps;
                    nid = pts[j].nightly;
                }
            if (!nv) continue;
            qsort(v, (size_t)nv, sizeof *v, cmp_double);
            double med = nv % 2 ? v[nv / 2] : 0.5 * (v[nv / 2 - 1] + v[nv / 2]);
            lab_buf_printf(&td, "%d %.6g %.6g %.6g\n", x, med, v[0], v[nv - 1]);
            if (regressed(pg->st, nid, e->id, a->name, "performance")) lab_buf_printf(&tm, "%d %.6g\n", x, med);
            rows++;
        }
        if (!rows) continue;
        lab_buf_printf(&td, "\n\n");
        lab_buf_printf(&tp, "%s'src/%s.dat' index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 title \"%s\"",
                       tp.len ? ", " : "", stem_tps, blk, lab_gp_label(a->name, lab, sizeof lab));
        blk++;
    }
    if (blk) {
        lab_buf_printf(&td, "%s\n\n", tm.len ? tm.data : "-1 NaN");
        lab_buf_printf(&tb, "set title \"%s: throughput per nightly (median of repeats, bars: min..max)\"\n"
                            "set xrange [0.5:%d.5]\nset xtics (%s)\nset grid\nset key outside right top\n"
                            "set ylabel 'tokens per second (forward pass)'\n"
                            "set yrange [0:*]\n"
                            "plot %s, 'src/%s.dat' index %d using 1:2 with points pt 6 ps 3 lw 3 lc rgb '#d62728'"
                            " title 'performance regression flagged'\n",
                       lab_gp_label(e->id, title, sizeof title), nx, xt.data, tp.data, stem_tps, blk);
        chart(pg, stem_tps, td.data, tb.data, 1000, 460,
              "Throughput history (x: nightly id, UTC date, commit): dataset tokens per second of forward pass, median over the repeats of each nightly "
              "with their range; red rings mark a flagged performance regression.");
    }
    lab_buf_free(&td);
    lab_buf_free(&tb);
    lab_buf_free(&tp);
    lab_buf_free(&tm);
    lab_buf_free(&xt);
    free(pts);
}

/* ------------------------------------------------------------ page sections */

static void h(page *pg, const char *s) { lab_esc_html(&pg->html, s); }

static const char *verdict_class(const char *v) {
    if (!strcmp(v, "SUPPORTED")) return "good";
    if (!strcmp(v, "REFUTED")) return "bad";
    return "warn";
}

static void section_arms(page *pg, const exp_view *e) {
    lab_buf *o = &pg->html;
    char v1[32], v2[32], v3[32];
    lab_buf_printf(o, "<table><tr><th>arm</th><th>knobs (spec)</th><th>knobs (resolved, non-default)</th>"
                      "<th>expects</th><th>run</th><th>assertions</th><th>top-1 k/n [Wilson 95%%]</th><th>verdict</th>"
                      "<th>KL mean / p99 / max</th><th>max |&Delta;logit|</th><th>first divergence</th>"
                      "<th>tokens/s</th></tr>\n");
    lab_buf_printf(&pg->md, "| arm | knobs | run | assertions | top-1 k/n [95%% CI] | verdict | KL mean | tokens/s |\n"
                            "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        lab_buf_printf(o, "<tr><td><b>");
        h(pg, a->name);
        lab_buf_printf(o, "</b>%s", a->is_reference ? " <span class=\"tag\">reference</span>" : "");
        if (a->description) { lab_buf_printf(o, "<br><small>"); h(pg, a->description); lab_buf_printf(o, "</small>"); }
        lab_buf_printf(o, "</td><td><code>");
        h(pg, a->spec_knobs ? a->spec_knobs : "");
        lab_buf_printf(o, "</code></td><td><code>");
        h(pg, a->resolved_knobs ? a->resolved_knobs : "");
        lab_buf_printf(o, "</code></td><td><code>");
        h(pg, a->spec_expect ? a->spec_expect : "");
        lab_buf_printf(o, "</code>%s</td>", a->expect_fail ? "<br><span class=\"tag\">assertions expected to FAIL (replay)</span>" : "");
        if (!a->run_id) {
            lab_buf_printf(o, "<td colspan=\"8\">never run</td></tr>\n");
            lab_buf_printf(&pg->md, "| ");
            lab_esc_md(&pg->md, a->name);
            lab_buf_printf(&pg->md, " | | never run | | | | | |\n");
            continue;
        }
        lab_buf_printf(o, "<td>%lld<br><small>", (long long)a->run_id);
        h(pg, a->status);
        lab_buf_printf(o, " ");
        h(pg, a->backend);
        lab_buf_printf(o, "<br>");
        h(pg, a->started);
        lab_buf_printf(o, "</small></td>");
        if (a->error) { lab_buf_printf(o, "<td class=\"bad\">"); h(pg, a->error); lab_buf_printf(o, "</td>"); }
        else if (a->assertions_ok < 0) lab_buf_printf(o, "<td>–</td>");
        else {
            int as_declared = a->assertions_ok != a->expect_fail;
            lab_buf_printf(o, "<td class=\"%s\">%s%s", as_declared ? "good" : "bad", a->assertions_ok ? "pass" : "FAIL",
                           as_declared ? (a->expect_fail ? " (as expected)" : "") : " (not as declared)");
            if (a->assertion_reason) {
                lab_buf_printf(o, "<br><small>");
                h(pg, a->assertion_reason);
                lab_buf_printf(o, "</small>");
            }
            lab_buf_printf(o, "</td>");
        }
        if (a->has_cmp) {
            fmt_g(v1, sizeof v1, a->kl_mean);
            fmt_g(v2, sizeof v2, a->kl_p99);
            fmt_g(v3, sizeof v3, a->kl_max);
            lab_buf_printf(o, "<td>%lld/%lld = %.3f<br>[%.3f, %.3f]<br><small>McNemar p %.3g</small></td>", (long long)a->k,
                           (long long)a->n, a->n ? (double)a->k / (double)a->n : 0.0, a->lo, a->hi, a->mc_p);
            if (a->has_verdict) {
                lab_buf_printf(o, "<td class=\"%s\"><b>", verdict_class(a->verdict));
                h(pg, a->verdict);
                lab_buf_printf(o, "</b><br><small>");
                h(pg, a->metric);
                lab_buf_printf(o, " ");
                h(pg, a->direction);
                lab_buf_printf(o, " %.3g; interval [%.3f, %.3f]</small></td>", a->threshold, a->lo, a->hi);
            } else lab_buf_printf(o, "<td>– <small>(no decision rule)</small></td>");
            lab_buf_printf(o, "<td>%s / %s / %s</td>", v1, v2, v3);
            fmt_g(v1, sizeof v1, a->max_dl);
            lab_buf_printf(o, "<td>%s</td>", v1);
            if (a->first_layer >= 0)
                lab_buf_printf(o, "<td>layer %lld after %s<br><small>rel L2 %.3g &gt; %.3g</small></td>",
                               (long long)a->first_layer, a->first_site ? "FFN" : "attention", a->first_value, a->div_tol);
            else if (!isnan(a->div_tol)) lab_buf_printf(o, "<td>none above %.3g</td>", a->div_tol);
            else lab_buf_printf(o, "<td>–</td>");
        } else {
            lab_buf_printf(o, "<td colspan=\"5\">%s</td>", a->is_reference ? "(the reference)" : "no comparison recorded");
        }
        fmt_g(v1, sizeof v1, a->tps);
        /* benchmark runs (vtlab record-bench) also carry the fraction of the peak they reached */
        if (!isnan(a->peak_frac)) snprintf(v2, sizeof v2, " (%.1f%% of peak FLOP/s)", 100 * a->peak_frac);
        else v2[0] = 0;
        lab_buf_printf(o, "<td>%s%s</td></tr>\n", v1, v2);

        lab_buf_printf(&pg->md, "| ");
        lab_esc_md(&pg->md, a->name);
        lab_buf_printf(&pg->md, "%s | ", a->is_reference ? " (reference)" : "");
        lab_esc_md(&pg->md, a->resolved_knobs ? a->resolved_knobs : "");
        lab_buf_printf(&pg->md, " | %lld ", (long long)a->run_id);
        lab_esc_md(&pg->md, a->status);
        lab_buf_printf(&pg->md, " | %s | ", a->assertions_ok < 0 ? "-" : a->assertions_ok ? "pass" : "FAIL");
        if (a->has_cmp) {
            fmt_g(v1, sizeof v1, a->kl_mean);
            lab_buf_printf(&pg->md, "%lld/%lld [%.3f, %.3f] | ", (long long)a->k, (long long)a->n, a->lo, a->hi);
            lab_esc_md(&pg->md, a->has_verdict ? a->verdict : "-");
            lab_buf_printf(&pg->md, " | %s | ", v1);
        } else lab_buf_printf(&pg->md, "- | - | - | ");
        fmt_g(v1, sizeof v1, a->tps);
        lab_buf_printf(&pg->md, "%s%s |\n", v1, v2);
    }
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(&pg->md, "\n");
}

/* Confound flags on the runs shown, and a count of the others of the experiment. */
static void section_flags(page *pg, const exp_view *e) {
    if (!has_table(pg->st, "audit_flags")) return;
    lab_buf *o = &pg->html;
    lab_buf ids = {0};
    for (int i = 0; i < e->n_arms; i++)
        if (e->arms[i].run_id) lab_buf_printf(&ids, "%s%lld", ids.len ? "," : "", (long long)e->arms[i].run_id);
    sqlite3_stmt *s;
    if (prep(pg->st,
             "SELECT f.subject, r.arm, f.rule, f.reason, f.expected, f.first_seen, f.resolved_at, f.resolved_by, f.evidence,"
             " (',' || ?2 || ',') LIKE ('%,' || f.subject || ',%')"
             " FROM audit_flags f JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
             " WHERE r.experiment = ?1 ORDER BY f.resolved_at IS NOT NULL, f.expected, r.id DESC, f.rule",
             &s, pg->err, sizeof pg->err)) { lab_buf_free(&ids); return; }
    sqlite3_bind_text(s, 1, e->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, ids.data ? ids.data : "", -1, SQLITE_TRANSIENT);
    int shown = 0, older_open = 0, resolved = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int open = sqlite3_column_type(s, 6) == SQLITE_NULL, latest = sqlite3_column_int(s, 9);
        if (!open) { resolved++; continue; }
        if (!latest) { older_open++; continue; }
        if (!shown++)
            lab_buf_printf(o, "<h4>Confound flags (from <code>vtlab audit</code>)</h4>\n<table><tr><th>run</th><th>arm</th>"
                              "<th>rule</th><th>reason</th><th>first seen</th></tr>\n");
        int expected = sqlite3_column_int(s, 4);
        lab_buf_printf(o, "<tr class=\"%s\"><td>", expected ? "muted" : "bad");
        h(pg, lab_col_text(s, 0));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 1));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 2));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 3));
        if (expected) lab_buf_printf(o, " <span class=\"tag\">expected: the arm replays the defect</span>");
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 5));
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- %s flag %s on run ", expected ? "expected" : "**confound**", lab_col_text(s, 2));
        lab_esc_md(&pg->md, lab_col_text(s, 0));
        lab_buf_printf(&pg->md, " (");
        lab_esc_md(&pg->md, lab_col_text(s, 1));
        lab_buf_printf(&pg->md, "): ");
        lab_esc_md(&pg->md, lab_col_text(s, 3));
        lab_buf_printf(&pg->md, "\n");
    }
    sqlite3_finalize(s);
    lab_buf_free(&ids);
    if (shown) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>No open confound flags on these runs%s.</p>\n",
                        older_open || resolved ? "" : " (run <code>vtlab audit</code> to check)");
    if (older_open || resolved)
        lab_buf_printf(o, "<p><small>%d open flag(s) on older runs of this experiment, %d resolved.</small></p>\n",
                       older_open, resolved);
    if (shown) lab_buf_printf(&pg->md, "\n");
}

static void section_probes(page *pg, const exp_view *e) {
    lab_buf *o = &pg->html;
    lab_buf_printf(o, "<h4>Runtime dtype probes</h4>\n<table><tr><th>arm</th><th>site</th><th>dtypes seen (src&rarr;dst)</th>"
                      "<th>layers</th><th>bytes/row copied (src/dst row)</th><th>violations</th><th>rows unwritten</th>"
                      "<th>first violation</th></tr>\n");
    int any = 0;
    for (int i = 0; i < e->n_arms; i++) {
        const arm_view *a = &e->arms[i];
        if (!a->run_id) continue;
        sqlite3_stmt *s;
        if (prep(pg->st,
                 "SELECT site, group_concat(DISTINCT CASE WHEN src_dtype = '' THEN dtype ELSE src_dtype || '>' || dtype END),"
                 " count(DISTINCT layer), min(layer), max(layer), min(bytes_per_row), max(bytes_per_row), max(src_row_bytes),"
                 " max(dst_row_bytes), sum(violations), sum(max(rows_unwritten, 0)), max(rows_unwritten),"
                 " (SELECT detail FROM probes p2 WHERE p2.run_id = p.run_id AND p2.site = p.site AND p2.ok = 0"
                 "  ORDER BY idx LIMIT 1)"
                 " FROM probes p WHERE run_id = ?1 GROUP BY site ORDER BY min(idx)", &s, pg->err, sizeof pg->err))
            continue;
        sqlite3_bind_int64(s, 1, a->run_id);
        int first = 1;
        while (sqlite3_step(s) == SQLITE_ROW) {
            any = 1;
            int64_t viol = sqlite3_column_int64(s, 9), unw = sqlite3_column_int64(s, 10);
            int audited = sqlite3_column_int64(s, 11) >= 0;
            lab_buf_printf(o, "<tr class=\"%s\"><td>", viol || unw ? "bad" : "");
            if (first) h(pg, a->name);
            first = 0;
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 0));
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 1));
            int64_t lmin = sqlite3_column_int64(s, 3), lmax = sqlite3_column_int64(s, 4);
            if (lmin < 0) lab_buf_printf(o, "</td><td>model");
            else lab_buf_printf(o, "</td><td>%lld (%lld..%lld)", sqlite3_column_int64(s, 2), (long long)lmin, (long long)lmax);
            int64_t b0 = sqlite3_column_int64(s, 5), b1 = sqlite3_column_int64(s, 6);
            if (b0 == b1) lab_buf_printf(o, "</td><td>%lld", (long long)b0);
            else lab_buf_printf(o, "</td><td>%lld..%lld", (long long)b0, (long long)b1);
            lab_buf_printf(o, " (%lld/%lld)</td><td>%lld</td><td>%s", sqlite3_column_int64(s, 7), sqlite3_column_int64(s, 8),
                           (long long)viol, audited ? "" : "not audited");
            if (audited) lab_buf_printf(o, "%lld", (long long)unw);
            lab_buf_printf(o, "</td><td>");
            h(pg, lab_col_text(s, 12));
            lab_buf_printf(o, "</td></tr>\n");
        }
        sqlite3_finalize(s);
        /* Expectations: the arm's declared dtypes, as checked. */
        if (!prep(pg->st, "SELECT site, expected_dtype, seen_dtypes, ok, reason FROM expectations WHERE run_id = ?1", &s,
                  pg->err, sizeof pg->err)) {
            sqlite3_bind_int64(s, 1, a->run_id);
            while (sqlite3_step(s) == SQLITE_ROW) {
                any = 1;
                lab_buf_printf(o, "<tr class=\"%s\"><td>", sqlite3_column_int(s, 3) ? "" : "bad");
                if (first) h(pg, a->name);
                first = 0;
                lab_buf_printf(o, "</td><td>expect ");
                h(pg, lab_col_text(s, 0));
                lab_buf_printf(o, "</td><td>expected ");
                h(pg, lab_col_text(s, 1));
                lab_buf_printf(o, ", saw ");
                h(pg, lab_col_text(s, 2));
                lab_buf_printf(o, "</td><td colspan=\"4\">%s ", sqlite3_column_int(s, 3) ? "ok" : "FAIL");
                h(pg, lab_col_text(s, 4));
                lab_buf_printf(o, "</td></tr>\n");
            }
            sqlite3_finalize(s);
        }
    }
    lab_buf_printf(o, "</table>\n");
    if (!any) lab_buf_printf(o, "<p>No probe records (the runs had <code>VT_PROBE=off</code>).</p>\n");
}

static void section_claims(page *pg) {
    if (!has_table(pg->st, "audit_flags")) return;
    sqlite3_stmt *s;
    if (prep(pg->st,
             "SELECT subject, rule, reason, first_seen, resolved_at, resolved_by, expected FROM audit_flags"
             " WHERE subject_kind = 'claim' ORDER BY resolved_at IS NOT NULL, subject, rule", &s, pg->err, sizeof pg->err))
        return;
    lab_buf *o = &pg->html;
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++) {
            lab_buf_printf(o, "<h2 id=\"ledger\">Ledger: confounded claims</h2>\n<table><tr><th>claim</th><th>rule</th>"
                              "<th>reason</th><th>first seen</th><th>status</th></tr>\n");
            lab_buf_printf(&pg->md, "## Ledger: confounded claims\n\n");
        }
        int open = sqlite3_column_type(s, 4) == SQLITE_NULL;
        lab_buf_printf(o, "<tr class=\"%s\"><td>", open ? "bad" : "muted");
        h(pg, lab_col_text(s, 0));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 1));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 2));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 3));
        lab_buf_printf(o, "</td><td>");
        if (open) lab_buf_printf(o, "open");
        else {
            lab_buf_printf(o, "resolved ");
            h(pg, lab_col_text(s, 4));
            lab_buf_printf(o, ": ");
            h(pg, lab_col_text(s, 5));
        }
        lab_buf_printf(o, "</td></tr>\n");
        lab_buf_printf(&pg->md, "- claim ");
        lab_esc_md(&pg->md, lab_col_text(s, 0));
        lab_buf_printf(&pg->md, " %s (%s): ", lab_col_text(s, 1), open ? "open" : "resolved");
        lab_esc_md(&pg->md, lab_col_text(s, 2));
        lab_buf_printf(&pg->md, "\n");
    }
    sqlite3_finalize(s);
    if (n) {
        lab_buf_printf(o, "</table>\n");
        lab_buf_printf(&pg->md, "\n");
    }
}

static void section_nightlies(page *pg) {
    if (!has_table(pg->st, "nightlies")) return;
    sqlite3_stmt *s;
    if (prep(pg->st, "SELECT id, started_at, git_commit, status, n_runs, n_regressions, audit, host FROM nightlies"
                     " ORDER BY id DESC LIMIT 30", &s, pg->err, sizeof pg->err)) return;
    lab_buf *o = &pg->html;
    int n = 0;
    int64_t latest = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++) {
            latest = sqlite3_column_int64(s, 0);
            lab_buf_printf(o, "<h2 id=\"nightly\">Nightly runs</h2>\n<table><tr><th>nightly</th><th>started (UTC)</th>"
                              "<th>commit</th><th>host</th><th>status</th><th>runs</th><th>regressions</th><th>audit</th></tr>\n");
            lab_buf_printf(&pg->md, "## Nightly runs\n\n| nightly | started | commit | status | runs | regressions |\n"
                                    "|---|---|---|---|---|---|\n");
        }
        const char *stt = lab_col_text(s, 3);
        lab_buf_printf(o, "<tr><td>%lld</td><td>", sqlite3_column_int64(s, 0));
        h(pg, lab_col_text(s, 1));
        lab_buf_printf(o, "</td><td><code>");
        h(pg, lab_col_text(s, 2));
        lab_buf_printf(o, "</code></td><td>");
        h(pg, lab_col_text(s, 7));
        lab_buf_printf(o, "</td><td class=\"%s\">", !strcmp(stt, "PASSED") ? "good" : "bad");
        h(pg, stt);
        lab_buf_printf(o, "</td><td>%lld</td><td>%lld</td><td><small>", sqlite3_column_int64(s, 4),
                       sqlite3_column_int64(s, 5));
        h(pg, lab_col_text(s, 6));
        lab_buf_printf(o, "</small></td></tr>\n");
        lab_buf_printf(&pg->md, "| %lld | ", sqlite3_column_int64(s, 0));
        lab_esc_md(&pg->md, lab_col_text(s, 1));
        lab_buf_printf(&pg->md, " | ");
        lab_esc_md(&pg->md, lab_col_text(s, 2));
        lab_buf_printf(&pg->md, " | ");
        lab_esc_md(&pg->md, stt);
        lab_buf_printf(&pg->md, " | %lld | %lld |\n", sqlite3_column_int64(s, 4), sqlite3_column_int64(s, 5));
    }
    sqlite3_finalize(s);
    if (!n) return;
    lab_buf_printf(o, "</table>\n");
    lab_buf_printf(&pg->md, "\n");
    if (prep(pg->st, "SELECT experiment, arm, kind, regression, message FROM nightly_findings WHERE nightly_id = ?1"
                     " ORDER BY regression DESC, experiment, arm, kind", &s, pg->err, sizeof pg->err)) return;
    sqlite3_bind_int64(s, 1, latest);
    n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!n++)
            lab_buf_printf(o, "<h3>Findings of nightly %lld (against the previous nightly)</h3>\n<table><tr><th>experiment</th>"
                              "<th>arm</th><th>kind</th><th></th><th>finding</th></tr>\n", (long long)latest);
        int reg = sqlite3_column_int(s, 3);
        lab_buf_printf(o, "<tr class=\"%s\"><td>", reg ? "bad" : "");
        h(pg, lab_col_text(s, 0));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 1));
        lab_buf_printf(o, "</td><td>");
        h(pg, lab_col_text(s, 2));
        lab_buf_printf(o, "</td><td>%s</td><td>", reg ? "<b>REGRESSION</b>" : "note");
        h(pg, lab_col_text(s, 4));
        lab_buf_printf(o, "</td></tr>\n");
    }
    sqlite3_finalize(s);
    if (n) lab_buf_printf(o, "</table>\n");
    else lab_buf_printf(o, "<p>Nightly %lld found nothing to note against the previous nightly.</p>\n", (long long)latest);
}

static const char *const CSS =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222;"
    "padding:0 1em}h1{margin-bottom:0}h2{border-bottom:2px solid #ddd;margin-top:2em}table{border-collapse:collapse;"
    "margin:0.6em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:4px 7px;vertical-align:top;text-align:left}"
    "th{background:#f3f3f3}.good{background:#e6f4ea}.bad{background:#fdecea}.warn{background:#fff6db}"
    ".muted{color:#777}.tag{font-size:0.8em;background:#eef;border-radius:3px;padding:0 4px}code{font-size:0.9em}"
    "figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:0.85em;"
    "color:#555;max-width:1000px}nav a{margin-right:1em}.meta{color:#666;font-size:0.9em}";

int lab_report_write(lab_store *st, const lab_report_opts *o, lab_report_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    page pg;
    memset(&pg, 0, sizeof pg);
    pg.st = st;
    pg.o = o;
    pg.res = res;
    const char *out = o->out_dir ? o->out_dir : "report";
    int rc = lab_mkdirs(out, err, errlen);
    if (rc) return rc;
    snprintf(pg.plot_dir, sizeof pg.plot_dir, "%s/plots", out);
    pg.plots_on = o->plots;
    if (pg.plots_on && !lab_plot_available(res->plots_skipped, sizeof res->plots_skipped)) pg.plots_on = 0;
    if (!o->plots && !res->plots_skipped[0]) snprintf(res->plots_skipped, sizeof res->plots_skipped, "charts turned off");
    if (pg.plots_on && (rc = lab_mkdirs(pg.plot_dir, err, errlen))) return rc;

    char now[32];
    lab_now_iso(now);
    /* The experiments, by name. */
    sqlite3_stmt *s;
    if ((rc = prep(st, "SELECT DISTINCT experiment FROM runs ORDER BY experiment", &s, err, errlen))) return rc;
    char **ids = NULL;
    int nid = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        char **q = realloc(ids, (size_t)(nid + 1) * sizeof *q);
        if (!q) break;
        ids = q;
        ids[nid++] = lab_strdup(lab_col_text(s, 0));
    }
    sqlite3_finalize(s);

    lab_buf *ht = &pg.html;
    lab_buf_printf(ht, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>vtlab report</title>\n"
                       "<style>%s</style></head><body>\n<h1>vtlab report</h1>\n<p class=\"meta\">database <code>", CSS);
    h(&pg, o->db_label ? o->db_label : "results.db");
    lab_buf_printf(ht, "</code> &middot; generated %s by <code>", now);
    h(&pg, vt_build_info());
    lab_buf_printf(ht, "</code> &middot; %d experiment(s)</p>\n<nav>", nid);
    lab_buf_printf(&pg.md, "# vtlab report\n\nDatabase `");
    lab_esc_md_code(&pg.md, o->db_label ? o->db_label : "results.db");
    lab_buf_printf(&pg.md, "`, generated %s. Full page: index.html.\n\n", now);
    for (int i = 0; i < nid; i++) {
        lab_buf_printf(ht, "<a href=\"#exp-%d\">", i);
        h(&pg, ids[i]);
        lab_buf_printf(ht, "</a>");
    }
    lab_buf_printf(ht, "<a href=\"#ledger\">ledger</a><a href=\"#nightly\">nightly</a></nav>\n");
    if (!pg.plots_on) {
        lab_buf_printf(ht, "<p class=\"warn\">No charts: ");
        h(&pg, res->plots_skipped);
        lab_buf_printf(ht, ".</p>\n");
    }
    if (!nid) lab_buf_printf(ht, "<p>No runs in this database yet (<code>vtlab run EXPERIMENT.json</code>).</p>\n");

    for (int i = 0; i < nid && !rc; i++) {
        exp_view e;
        if ((rc = load_experiment(st, ids[i], &e, err, errlen))) { exp_view_free(&e); break; }
        res->n_experiments++;
        char part[48], stem[96], stem2[96];
        lab_file_part(e.id, part, sizeof part);
        lab_buf_printf(ht, "<h2 id=\"exp-%d\">", i);
        h(&pg, e.id);
        lab_buf_printf(ht, "</h2>\n<p class=\"meta\">spec <code>");
        h(&pg, e.file ? e.file : "(not stored)");
        lab_buf_printf(ht, "</code> (sha256 %.12s) &middot; reference arm <b>", e.spec_sha);
        h(&pg, e.reference);
        lab_buf_printf(ht, "</b>");
        if (e.has_decision) lab_buf_printf(ht, " &middot; decision: top-1 agreement %s %.3g on the Wilson 95%% interval",
                                           e.decision_ge ? "&ge;" : "&le;", e.threshold);
        lab_buf_printf(ht, "</p>\n");
        lab_buf_printf(&pg.md, "## ");
        lab_esc_md(&pg.md, e.id);
        lab_buf_printf(&pg.md, "\n\n");
        if (e.description) {
            lab_buf_printf(ht, "<p>");
            h(&pg, e.description);
            lab_buf_printf(ht, "</p>\n");
            lab_esc_md(&pg.md, e.description);
            lab_buf_printf(&pg.md, "\n\n");
        }
        if (e.hypothesis) {
            lab_buf_printf(ht, "<p><b>Hypothesis:</b> ");
            h(&pg, e.hypothesis);
            lab_buf_printf(ht, "</p>\n");
            lab_buf_printf(&pg.md, "Hypothesis: ");
            lab_esc_md(&pg.md, e.hypothesis);
            lab_buf_printf(&pg.md, "\n\n");
        }
        section_arms(&pg, &e);
        section_flags(&pg, &e);
        section_probes(&pg, &e);
        lab_buf_printf(ht, "<h4>Charts</h4>\n");
        snprintf(stem, sizeof stem, "e%d-%s-top1", i, part);
        chart_top1(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-divergence", i, part);
        chart_divergence(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-kl-cdf", i, part);
        chart_kl_cdf(&pg, &e, stem);
        snprintf(stem, sizeof stem, "e%d-%s-history", i, part);
        snprintf(stem2, sizeof stem2, "e%d-%s-throughput", i, part);
        chart_history(&pg, &e, stem, stem2);
        exp_view_free(&e);
    }
    for (int i = 0; i < nid; i++) free(ids[i]);
    free(ids);
    if (rc) { lab_buf_free(&pg.html); lab_buf_free(&pg.md); return rc; }
    section_claims(&pg);
    section_nightlies(&pg);
    lab_buf_printf(ht, "<hr><p class=\"meta\">Every number here is a row of the database; <code>vtlab show RUN</code> "
                       "prints everything recorded about a run. Schema: docs/schema.md.</p>\n</body></html>\n");
    if (pg.html.oom || pg.md.oom) rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    char path[4200];
    if (!rc) {
        snprintf(path, sizeof path, "%s/summary.md", out);
        rc = vt_cli_write_file_atomic(path, pg.md.data, pg.md.len, err, errlen);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/index.html", out);
        rc = vt_cli_write_file_atomic(path, pg.html.data, pg.html.len, err, errlen);
    }
    lab_buf_free(&pg.html);
    lab_buf_free(&pg.md);
    return rc;
}

/* ------------------------------------------------------------ the command */

int lab_report_main(int argc, char **argv) {
    const char *db = "results.db", *out = "report";
    int plots = 1;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--db") || !strcmp(argv[i], "--out"))) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "vtlab report: %s needs a value (see `vtlab --help`)\n", argv[i]);
                return 2;
            }
            if (!strcmp(argv[i], "--db")) db = argv[++i];
            else out = argv[++i];
        } else if (!strcmp(argv[i], "--no-plots")) plots = 0;
        else {
            fprintf(stderr, "vtlab report: unexpected argument %s (see `vtlab --help`)\n", argv[i]);
            return 2;
        }
    }
    if (!lab_path_exists(db)) {
        fprintf(stderr, "vtlab report: %s: no such database (run an experiment first, or pass --db PATH)\n", db);
        return 2;
    }
    lab_store *st = NULL;
    char err[2048] = "";
    int rc = lab_store_open(&st, db, err, sizeof err);
    if (rc) {
        fprintf(stderr, "vtlab report: %s\n", err);
        return lab_exit_code(rc);
    }
    lab_report_opts o = {out, db, plots};
    lab_report_result res;
    rc = lab_report_write(st, &o, &res, err, sizeof err);
    lab_store_close(st);
    if (rc) {
        fprintf(stderr, "vtlab report: %s\n", err);
        return lab_exit_code(rc);
    }
    printf("report: %s/index.html and %s/summary.md: %lld experiment(s), %lld chart(s) (PNG + SVG) in %s/plots",
           out, out, (long long)res.n_experiments, (long long)res.n_plots, out);
    if (res.plots_skipped[0]) printf("; no charts: %s", res.plots_skipped);
    printf("\n");
    if (res.plot_failures) {
        fprintf(stderr, "vtlab report: %lld chart(s) could not be drawn (see above)\n", (long long)res.plot_failures);
        return 1;
    }
    return 0;
}
