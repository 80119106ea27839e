/*
 * store_report.c — the report's part of the store (see store_report.h).
 */
#include "store_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "model/vt.h"
#include "store_internal.h"
#include "util.h"

int lab_rp_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    int rc = lab_sq_prep(st, sql, s, err, errlen);
    return rc ? lab_err_prefix(err, errlen, rc, "report query") : LAB_OK;
}

double lab_rp_col_num(sqlite3_stmt *s, int i) {
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

int lab_rp_has_table(lab_store *st, const char *name) {
    int have = 0;
    lab_store_has_table(st, name, &have, NULL, 0);   /* a failed lookup reads as "absent": the section is left out */
    return have;
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
    int rc = lab_rp_prep(st, "SELECT t.n_pos, t.k, t.ids, t.logprobs, r.score FROM logits_topk t JOIN runs r ON r.id = t.run_id"
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
    int rc = lab_rp_prep(st, sql, &a, err, errlen);
    if (rc) return -rc;
    if ((rc = lab_rp_prep(st, sql, &b, err, errlen))) { sqlite3_finalize(a); return -rc; }
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
