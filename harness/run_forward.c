/*
 * run_forward.c — one forward pass over a dataset (see run_forward.h).
 *
 * Memory: the reference cache holds [n_scored, vocab] f32 plus the captured
 * residuals of `divergence.sequences` sequences; for the tiny model and the
 * shipped datasets that is under 20 MB. A run's own top-k is [n_tokens,
 * top_k] ids and log-probs, written at the end in one transaction.
 */
#include "run_forward.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"
#include "metrics.h"
#include "util.h"

void lab_ref_cache_free(lab_ref_cache *r) {
    free(r->logits);
    free(r->top1);
    free(r->resid);
    free(r->resid_off);
    free(r->resid_T);
    memset(r, 0, sizeof *r);
}

void lab_pass_acc_free(lab_pass_acc *a) {
    free(a->topk_ids);
    free(a->topk_lp);
    free(a->full);
    free(a->kl);
    free(a->dp);
    free(a->dnll);
    free(a->div_num);
    free(a->div_den);
    free(a->probes);
    free(a->seq);
    free(a->seq_div);
    memset(a, 0, sizeof *a);
}

int lab_progress_mode(void) { return isatty(2) ? LAB_PROGRESS_TTY : LAB_PROGRESS_LINES; }

void lab_progress_start(lab_progress *p, const char *label) {
    if (!p) return;
    p->label = label;
    p->t0 = p->last_line = lab_mono();
    p->tokens_done = 0;
    const char *iv = getenv("VTLAB_PROGRESS_INTERVAL");
    char *end = NULL;
    p->interval = iv && *iv ? strtod(iv, &end) : LAB_PROGRESS_LINE_S;
    if (!(p->interval >= 0) || (end && *end)) p->interval = LAB_PROGRESS_LINE_S;
}

static void progress_show(lab_progress *p, int64_t q, int64_t nq) {
    if (!p || !p->on) return;
    double now = lab_mono(), dt = now - p->t0;
    if (p->on == LAB_PROGRESS_LINES && now - p->last_line < p->interval) return;
    double tps = dt > 0 ? (double)p->tokens_done / dt : 0.0;
    double eta = tps > 0 ? (double)(p->tokens_total - p->tokens_done) / tps : 0.0;
    if (p->on == LAB_PROGRESS_LINES) {
        fprintf(stderr, "  %s  sequence %lld/%lld  %.0f tok/s  ETA %.0fs\n", p->label, (long long)q, (long long)nq,
                tps, eta);
        p->last_line = now;
    } else {
        fprintf(stderr, "\r\033[K  %s  sequence %lld/%lld  %.0f tok/s  ETA %.0fs", p->label, (long long)q,
                (long long)nq, tps, eta);
    }
    fflush(stderr);
}

void lab_progress_end(lab_progress *p) {
    if (p && p->on == LAB_PROGRESS_TTY) fprintf(stderr, "\r\033[K");
}

/* What one position contributes to a pass's sums; filled in parallel, one
 * slot per position, and summed in position order (fold_sequence). */
typedef struct pos_stat {
    double nll;                  /* -log p(next token), when has_nll */
    double f16_kl, f16_dlogit;   /* the f16 store's noise, when has_f16 */
    double maxd, dp2;            /* |dlogit| max and delta-p squared, when compared */
    int8_t has_nll, has_f16, compared, agree;
} pos_stat;

/* The state of one pass. */
typedef struct pass {
    const lab_experiment *e;
    const lab_engine     *eng;
    int                   flags;
    lab_ref_cache        *ref;
    lab_pass_acc         *acc;
    int64_t               V, H, L, n_tok, n_sc, n_div;
    float                *logits;    /* f32 [rows, V]: a group's sequences' (one, without batches) */
    const float          *cur;       /* the logits of the sequence being scored: rows of logits */
    int64_t               max_seqs;  /* the most sequences of a group (the engine's batch_limits) */
    int64_t               max_rows;  /* the most tokens of a group; 0: one sequence per call, no batches */
    int64_t              *goff;      /* int64 [n_seq + 1]: a group's sequence offsets, from 0 */
    int64_t               g0;        /* the group being scored: its first sequence */
    int64_t               ahead;     /* the group submitted ahead ends before this sequence; 0: none */
    double               *scratch;   /* f64 [threads, 4, V]: log-probs, reference log-probs, KL scratch */
    pos_stat             *ps;        /* [max_len] */
    void                 *inst;      /* the engine instance */
    int                   threads;   /* scratch is sized for this many threads */
} pass;

static int64_t count_scored(const lab_experiment *e) {
    return e->score_last ? e->ds.n_seq : e->ds.offsets[e->ds.n_seq];
}

/* The pass's own buffers and acc's. 0 or -1 (out of memory). */
static int pass_alloc(pass *p) {
    const lab_experiment *e = p->e;
    lab_pass_acc *acc = p->acc;
    vt_sha256_init(&acc->hash);
    acc->top_k = e->top_k < p->V ? e->top_k : p->V;
    p->logits = malloc((size_t)(e->ds.max_len * p->V) * sizeof *p->logits);
    /* The scratch is per thread: the scoring regions run with exactly this
     * many threads, whatever the session sets afterwards (the builtin
     * session calls omp_set_num_threads with its own count when it opens,
     * which once overran a scratch sized under OMP_NUM_THREADS=1). */
    p->threads = omp_get_max_threads();
    p->scratch = malloc((size_t)p->threads * 4 * (size_t)p->V * sizeof *p->scratch);
    p->ps = malloc((size_t)(e->ds.max_len > 0 ? e->ds.max_len : 1) * sizeof *p->ps);
    if (!p->logits || !p->scratch || !p->ps) return -1;
    acc->n_seq = e->ds.n_seq;
    acc->n_layers = p->L;
    if (!(acc->seq = calloc((size_t)(e->ds.n_seq > 0 ? e->ds.n_seq : 1), sizeof *acc->seq))) return -1;
    if (p->n_div && (p->flags & LAB_PASS_COMPARE) &&
        !(acc->seq_div = calloc((size_t)(p->n_div * p->L * 4), sizeof *acc->seq_div)))
        return -1;
    if (p->flags & LAB_PASS_RECORD) {
        acc->topk_ids = malloc((size_t)(p->n_tok * acc->top_k) * sizeof *acc->topk_ids);
        acc->topk_lp = malloc((size_t)(p->n_tok * acc->top_k) * sizeof *acc->topk_lp);
        if (!acc->topk_ids || !acc->topk_lp) return -1;
        if (e->store_full_logits && !(acc->full = malloc((size_t)(p->n_tok * p->V) * sizeof *acc->full))) return -1;
    }
    if (p->flags & LAB_PASS_COMPARE) {
        size_t ns = (size_t)(p->n_sc > 0 ? p->n_sc : 1);
        if (!(acc->kl = malloc(ns * sizeof *acc->kl)) || !(acc->dp = malloc(ns * sizeof *acc->dp)) ||
            !(acc->dnll = malloc(ns * sizeof *acc->dnll)))
            return -1;
        if (p->n_div && (!(acc->div_num = calloc((size_t)(p->L * 2), sizeof *acc->div_num)) ||
                         !(acc->div_den = calloc((size_t)(p->L * 2), sizeof *acc->div_den))))
            return -1;
    }
    return 0;
}

/* The reference cache's buffers (FILL_REF). 0 or -1 (out of memory). */
static int ref_alloc(pass *p) {
    lab_ref_cache *ref = p->ref;
    const lab_dataset *ds = &p->e->ds;
    lab_ref_cache_free(ref);
    ref->n_scored = p->n_sc;
    ref->vocab = p->V;
    ref->n_layers = p->L;
    ref->hidden = p->H;
    ref->n_div_seq = p->n_div;
    ref->hash_match = -1;
    ref->logits = malloc((size_t)(p->n_sc * p->V) * sizeof *ref->logits);
    ref->top1 = malloc((size_t)p->n_sc * sizeof *ref->top1);
    if (!ref->logits || !ref->top1) return -1;
    if (!p->n_div) return 0;
    ref->resid_off = calloc((size_t)p->n_div, sizeof *ref->resid_off);
    ref->resid_T = calloc((size_t)p->n_div, sizeof *ref->resid_T);
    size_t tot = 0;
    for (int64_t q = 0; q < p->n_div; q++) {
        if (ref->resid_off) ref->resid_off[q] = tot;
        tot += (size_t)(p->L * 2 * (ds->offsets[q + 1] - ds->offsets[q]) * p->H);
    }
    ref->resid = malloc(tot * sizeof *ref->resid);
    return ref->resid_off && ref->resid_T && ref->resid ? 0 : -1;
}

/* RECORD at position t of sequence q (global position gi): top-k log-probs,
 * the next token's NLL, the f16 store and its noise. lp holds the row's
 * log-probs (lse their normaliser); back and kls are scratch of V doubles. */
static void record_position(const pass *p, const int32_t *tok, int64_t T, int64_t t, int64_t gi, const float *row,
                            const double *lp, double lse, double *back_d, double *kls, pos_stat *s) {
    lab_pass_acc *acc = p->acc;
    int64_t V = p->V;
    int32_t *ids = acc->topk_ids + gi * acc->top_k;
    float *vals = acc->topk_lp + gi * acc->top_k;
    lab_topk(row, V, acc->top_k, ids, vals);
    for (int64_t j = 0; j < acc->top_k; j++) vals[j] = (float)((double)vals[j] - lse);
    if (t + 1 < T) {
        s->nll = -lp[tok[t + 1]];
        s->has_nll = 1;
    }
    if (!acc->full) return;
    uint16_t *h = acc->full + gi * V;
    float *back = (float *)back_d;   /* V floats fit in V doubles */
    for (int64_t v = 0; v < V; v++) {
        h[v] = vt_f16_bits_from_f32(row[v]);
        back[v] = vt_f32_from_f16_bits(h[v]);
    }
    /* The noise floor of the f16 store: KL(f32 || f16-rounded). */
    s->f16_dlogit = lab_max_abs_diff(row, back, V);
    s->f16_kl = lab_kl_logits(row, back, V, kls);
    s->has_f16 = 1;
}

/* COMPARE at scored position si: KL, top-1 agreement, |dlogit|, delta-p
 * against the reference row, and the difference of the next token's NLL
 * (next < 0: none). lp: this row's log-probs; lq: scratch for the
 * reference's. */
static void compare_position(const pass *p, int64_t si, const float *row, const double *lp, double *lq,
                             int32_t next, pos_stat *s) {
    const float *rrow = p->ref->logits + si * p->V;
    lab_log_softmax(rrow, p->V, lq);
    p->acc->kl[si] = lab_kl_logp(lq, lp, p->V);
    int32_t rt = p->ref->top1[si];
    s->agree = (int32_t)lab_argmax(row, p->V) == rt;
    s->maxd = lab_max_abs_diff(row, rrow, p->V);
    double dp = exp(lp[rt]) - exp(lq[rt]);
    s->dp2 = dp * dp;
    p->acc->dp[si] = dp;
    p->acc->dnll[si] = next >= 0 ? lq[next] - lp[next] : NAN;   /* -lp - (-lq) */
    s->compared = 1;
}

/* Every statistic of position t of sequence q (thread-local scratch sc). */
static void score_position(const pass *p, int64_t q, int64_t T, int64_t t, int64_t sc0, double *sc) {
    const lab_experiment *e = p->e;
    const float *row = p->cur + t * p->V;
    pos_stat *s = &p->ps[t];
    double *lp = sc, *lq = sc + p->V, *kls = lq + p->V;
    int scored = !e->score_last || t == T - 1;
    int64_t si = e->score_last ? sc0 : sc0 + t;
    int need_lp = (p->flags & LAB_PASS_RECORD) || ((p->flags & LAB_PASS_COMPARE) && scored);
    double lse = need_lp ? lab_log_softmax(row, p->V, lp) : 0.0;
    memset(s, 0, sizeof *s);
    if (p->flags & LAB_PASS_RECORD)
        record_position(p, e->ds.tokens + e->ds.offsets[q], T, t, e->ds.offsets[q] + t, row, lp, lse, lq, kls, s);
    if (scored && (p->flags & LAB_PASS_FILL_REF)) {
        memcpy(p->ref->logits + si * p->V, row, (size_t)p->V * sizeof *row);
        p->ref->top1[si] = (int32_t)lab_argmax(row, p->V);
    }
    if (scored && (p->flags & LAB_PASS_COMPARE))
        compare_position(p, si, row, lp, lq, t + 1 < T ? e->ds.tokens[e->ds.offsets[q] + t + 1] : -1, s);
}

/* Sums the positions of sequence q into acc, in position order, and keeps
 * the sequence's own sums (acc->seq[q]): the run's sums are sums of
 * per-sequence sums in sequence order, so a merge of shards adds the same
 * numbers in the same order (docs/slurm.md). */
static void fold_sequence(const pass *p, int64_t q, int64_t T, int64_t sc0) {
    lab_pass_acc *acc = p->acc;
    double nll = 0, f16kl = 0, f16klmax = 0, f16dmax = 0, dp2 = 0, maxd = 0;
    int64_t nlln = 0, f16n = 0, agree = 0, nan_seen = 0;
    for (int64_t t = 0; t < T; t++) {
        const pos_stat *s = &p->ps[t];
        if (s->has_nll) { nll += s->nll; nlln++; }
        if (s->has_f16) {
            f16kl += s->f16_kl;
            f16n++;
            if (s->f16_kl > f16klmax) f16klmax = s->f16_kl;
            if (s->f16_dlogit > f16dmax) f16dmax = s->f16_dlogit;
        }
        if (!s->compared) continue;
        agree += s->agree;
        dp2 += s->dp2;
        if (s->maxd != s->maxd) nan_seen++;
        else if (s->maxd > maxd) maxd = s->maxd;
    }
    lab_seq_stat *x = &acc->seq[q];
    x->n_pos = T;
    x->n_scored = p->e->score_last ? 1 : T;
    x->sc0 = sc0;
    x->nll_sum = nll;
    x->nll_n = nlln;
    x->f16_kl_sum = f16kl;
    x->f16_n = f16n;
    x->f16_kl_max = f16klmax;
    x->f16_dlogit_max = f16dmax;
    x->compared = (p->flags & LAB_PASS_COMPARE) != 0;
    x->agree = agree;
    x->dp2_sum = dp2;
    x->maxd = nan_seen ? NAN : maxd;
    acc->nll_sum += nll;
    acc->nll_n += nlln;
    acc->f16_kl_sum += f16kl;
    acc->f16_n += f16n;
    if (f16klmax > acc->f16_kl_max) acc->f16_kl_max = f16klmax;
    if (f16dmax > acc->f16_dlogit_max) acc->f16_dlogit_max = f16dmax;
    acc->agree += agree;
    acc->dp2_sum += dp2;
    if (nan_seen) acc->maxdiff = NAN;
    else if (maxd > acc->maxdiff) acc->maxdiff = maxd;
}

/* Per-position statistics of sequence q, spread over the OpenMP threads
 * while one of them hashes the sequence's logits (a task): the hash is the
 * largest single cost outside the forward pass (16 MB per run of the tiny
 * model at ~175 MB/s). Scored position t is sc0 + t ("all") or sc0 ("last"). */
static void score_sequence(const pass *p, int64_t q, int64_t T, int64_t sc0) {
    vt_sha256_ctx h;
    vt_sha256_init(&h);
    #pragma omp parallel num_threads(p->threads)
    {
        #pragma omp single nowait
        {
            #pragma omp task shared(h)
            vt_sha256_update(&h, p->cur, (size_t)(T * p->V) * sizeof *p->cur);
        }
        double *sc = p->scratch + (size_t)omp_get_thread_num() * 4 * (size_t)p->V;
        #pragma omp for schedule(dynamic, 4)
        for (int64_t t = 0; t < T; t++) score_position(p, q, T, t, sc0, sc);
    }
    lab_seq_stat *x = &p->acc->seq[q];
    vt_sha256_final_hex(&h, x->logits_sha256);
    vt_sha256_update(&p->acc->hash, x->logits_sha256, 64);
    vt_sha256_update(&p->acc->hash, "\n", 1);
    fold_sequence(p, q, T, sc0);
}

/* The residual captures of sequence q (q < n_div): kept (FILL_REF) and/or
 * compared with the reference's as per-layer sums of squares (COMPARE). */
static int capture_residuals(pass *p, int64_t q, int64_t T, char *err, size_t errlen) {
    lab_ref_cache *ref = p->ref;
    int64_t H = p->H;
    for (int64_t l = 0; l < p->L; l++)
        for (int site = 0; site < 2; site++) {
            int64_t Tr = 0;
            const float *h = p->eng->ops->batch_residual ? p->eng->ops->batch_residual(p->inst, q - p->g0, l, site, &Tr)
                                                         : p->eng->ops->residual(p->inst, l, site, &Tr);
            if (!h || Tr != T)
                return lab_errf(err, errlen, LAB_EINTERNAL, "sequence %lld: no residual capture at layer %lld site %d",
                                (long long)q, (long long)l, site);
            float *hr = ref->resid + ref->resid_off[q] + (size_t)((l * 2 + site) * T * H);
            if (p->flags & LAB_PASS_FILL_REF) {
                memcpy(hr, h, (size_t)(T * H) * sizeof *h);
                ref->resid_T[q] = T;
            }
            if (!(p->flags & LAB_PASS_COMPARE)) continue;
            /* the sequence's own sums first, then added to the run's (composable over shards) */
            double num = 0, den = 0;
            for (int64_t i = 0; i < T * H; i++) {
                double dd = (double)h[i] - (double)hr[i];
                num += dd * dd;
                den += (double)hr[i] * (double)hr[i];
            }
            double *sq = p->acc->seq_div + (size_t)(q * p->L * 4 + (l * 2 + site) * 2);
            sq[0] = num;
            sq[1] = den;
            p->acc->div_num[l * 2 + site] += num;
            p->acc->div_den[l * 2 + site] += den;
        }
    return LAB_OK;
}

/* Groups of consecutive sequences (engine.h, batch_limits): up to the
 * engine's sequences and rows, and this many bytes of logits ([rows, vocab]
 * f32, scored after the call; at 256 rows the 288M model's 32000-word
 * vocabulary takes 33 MB) and, in a group whose residuals are captured, of
 * residuals ([rows, 2 * n_layers * hidden] f32, which a command engine sends
 * over its pipe). A sequence longer than either is a group of its own. */
#define LAB_GROUP_LOGITS_MAX ((int64_t)256 << 20)

/* The rows of the logits buffer: the longest sequence, or a whole group. */
static int64_t logits_rows(const pass *p) {
    const int64_t max_len = p->e->ds.max_len > 0 ? p->e->ds.max_len : 1;
    const int64_t fit = LAB_GROUP_LOGITS_MAX / ((int64_t)sizeof(float) * p->V);
    int64_t rows = p->max_rows < p->n_tok ? p->max_rows : p->n_tok;
    if (rows > fit) rows = fit;
    return rows > max_len ? rows : max_len;
}

/* The end of the group starting at sequence q (at least q + 1). A group
 * never mixes sequences whose residuals are captured (q < n_div) with others:
 * only the first kind asks the engine for residuals. */
static int64_t group_end(const pass *p, int64_t q) {
    const int64_t *o = p->e->ds.offsets, n = p->e->ds.n_seq;
    int64_t rows = logits_rows(p);
    if (q < p->n_div) {
        const int64_t fit = LAB_GROUP_LOGITS_MAX / ((int64_t)sizeof(float) * 2 * p->L * (p->H > 0 ? p->H : 1));
        if (rows > fit) rows = fit;
    }
    int64_t r = q + 1;
    while (r < n && r - q < p->max_seqs && o[r + 1] - o[q] <= p->max_rows && o[r + 1] - o[q] <= rows &&
           (r < p->n_div) == (q < p->n_div))
        r++;
    return r;
}

/* The offsets from 0 of the sequences [q, end) into p->goff. */
static void group_offsets(pass *p, int64_t q, int64_t end) {
    const int64_t *o = p->e->ds.offsets;
    for (int64_t i = q; i <= end; i++) p->goff[i - q] = o[i] - o[q];
}

/* Submits the group [q, end) (an engine with submit/collect). */
static int submit_group(pass *p, int64_t q, int64_t end, char *verr, size_t vlen) {
    const lab_dataset *ds = &p->e->ds;
    group_offsets(p, q, end);
    return p->eng->ops->submit(p->inst, end - q, ds->tokens + ds->offsets[q], p->goff, q < p->n_div, verr, vlen);
}

/* The logits of the group [q, end) into p->logits: one forward, one batched
 * call, or, for an engine that can (submit/collect), the group collected
 * after the next one was submitted, so that the engine computes the next
 * while this one is scored (p->ahead: where the group submitted ahead ends). */
static int group_logits(pass *p, int64_t q, int64_t end, char *verr, size_t vlen) {
    const lab_dataset *ds = &p->e->ds;
    const lab_engine_ops *ops = p->eng->ops;
    const int32_t *tok = ds->tokens + ds->offsets[q];
    if (!ops->submit && p->max_rows <= 0)
        return ops->forward(p->inst, tok, ds->offsets[q + 1] - ds->offsets[q], q < p->n_div, p->logits, verr, vlen);
    if (!ops->submit) {
        group_offsets(p, q, end);
        return ops->batch_forward(p->inst, end - q, tok, p->goff, q < p->n_div, p->logits, verr, vlen);
    }
    int rc = p->ahead == end ? LAB_OK : submit_group(p, q, end, verr, vlen);
    p->ahead = 0;
    const int64_t e1 = end < ds->n_seq ? group_end(p, end) : end;
    if (!rc && e1 > end && ds->offsets[e1] - ds->offsets[end] <= LAB_ENGINE_AHEAD_MAX &&
        !lab_env_off("VTLAB_ENGINE_AHEAD")) {
        rc = submit_group(p, end, e1, verr, vlen);
        if (!rc) p->ahead = e1;
    }
    return rc ? rc : ops->collect(p->inst, p->logits, verr, vlen);
}

/* Scores sequence q of the group at p->g0 (its logits in p->logits), keeps
 * or compares its residual captures, and shows the progress. */
static int take_sequence(pass *p, int64_t q, int64_t *sc, lab_progress *pg, char *err, size_t errlen) {
    const lab_dataset *ds = &p->e->ds;
    const int64_t T = ds->offsets[q + 1] - ds->offsets[q];
    p->cur = p->logits + (ds->offsets[q] - ds->offsets[p->g0]) * p->V;
    score_sequence(p, q, T, *sc);
    *sc += p->e->score_last ? 1 : T;
    int rc = q < p->n_div ? capture_residuals(p, q, T, err, errlen) : LAB_OK;
    if (rc) return rc;
    if (q < p->n_div && p->acc->seq_div) p->acc->seq[q].div = p->acc->seq_div + (size_t)(q * p->L * 4);
    if (pg) {
        pg->tokens_done += T;
        progress_show(pg, q + 1, ds->n_seq);
    }
    return LAB_OK;
}

/* Every sequence of the dataset through the open instance: one per call, or,
 * through an engine that takes batches, in groups (group_end) with the same
 * logits. */
static int run_sequences(pass *p, lab_progress *pg, int *killed, char *err, size_t errlen) {
    const lab_dataset *ds = &p->e->ds;
    int64_t sc = 0;
    for (int64_t q = 0, end; q < ds->n_seq; q = end) {
        if (lab_interrupted) {
            *killed = 1;
            return lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal");
        }
        char verr[1024] = "";
        p->g0 = q;
        end = group_end(p, q);
        int rc = group_logits(p, q, end, verr, sizeof verr);
        if (rc && end > q + 1)
            return lab_errf(err, errlen, LAB_EINTERNAL, "sequences %lld-%lld: %s", (long long)q, (long long)end - 1,
                            verr);
        if (rc) return lab_errf(err, errlen, LAB_EINTERNAL, "sequence %lld: %s", (long long)q, verr);
        for (int64_t r = q; r < end; r++)
            if ((rc = take_sequence(p, r, &sc, pg, err, errlen))) return rc;
    }
    p->acc->n_scored = sc;
    return LAB_OK;
}

/* After the instance is open: an engine that takes batches (engine.h) gets
 * groups (and the logits buffer a group's rows). 0 or -1 (out of memory). */
static int batch_setup(pass *p) {
    const lab_engine_ops *ops = p->eng->ops;
    p->max_seqs = 1;
    p->max_rows = 0;
    if (ops->batch_limits && ops->batch_forward) ops->batch_limits(p->inst, &p->max_seqs, &p->max_rows);
    if (p->max_seqs < 1) p->max_seqs = 1;
    p->goff = malloc((size_t)(p->e->ds.n_seq + 1) * sizeof *p->goff);
    if (!p->goff) return -1;
    if (p->max_rows <= 0) return 0;
    const int64_t rows = logits_rows(p);
    float *l = realloc(p->logits, (size_t)(rows * p->V) * sizeof *l);
    if (!l) return -1;
    p->logits = l;
    return 0;
}

/* Sets up p for a pass of e through eng. */
static void pass_init(pass *p, const lab_experiment *e, const lab_engine *eng, int flags, lab_ref_cache *ref,
                      lab_pass_acc *acc) {
    memset(p, 0, sizeof *p);
    p->e = e;
    p->eng = eng;
    p->flags = flags;
    p->ref = ref;
    p->acc = acc;
    p->V = eng->info.vocab;
    p->H = eng->info.hidden;
    p->L = eng->info.n_layers;
    p->n_tok = e->ds.offsets[e->ds.n_seq];
    p->n_sc = count_scored(e);
    int want_div = (e->metrics & LAB_M_LAYERDIV) && (flags & (LAB_PASS_FILL_REF | LAB_PASS_COMPARE));
    /* the first divergence.sequences sequences of the whole dataset: a shard
     * (ds.seq_base > 0) captures those of them it holds */
    int64_t nd = e->div_sequences - e->ds.seq_base;
    if (nd < 0) nd = 0;
    p->n_div = want_div ? (nd < e->ds.n_seq ? nd : e->ds.n_seq) : 0;
}

int lab_forward_pass(const lab_experiment *e, lab_engine *eng, const lab_engine_req *req, int flags,
                     lab_ref_cache *ref, lab_pass_acc *acc, lab_progress *pg, int *killed, char *err, size_t errlen) {
    pass p;
    pass_init(&p, e, eng, flags, ref, acc);
    lab_engine_hello hello;
    char verr[1024] = "";
    int rc = LAB_OK;
    double fwd0 = 0;
    *killed = 0;
    if (pass_alloc(&p) || ((flags & LAB_PASS_FILL_REF) && ref_alloc(&p))) {
        rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory (dataset %lld tokens x vocab %lld)",
                      (long long)p.n_tok, (long long)p.V);
        goto done;
    }
    /* An instance kept open (a command engine, started once per arm) is
     * used as is; else one is opened for this pass. */
    if (eng->inst) {
        p.inst = eng->inst;
        fwd0 = eng->ops->forward_seconds(p.inst);
    } else if ((rc = eng->ops->open(eng->model, req, &p.inst, &hello, verr, sizeof verr))) {
        rc = lab_errf(err, errlen, rc, "session: %s", verr);
        goto done;
    } else {
        lab_engine_hello_free(&hello);
    }
    if (batch_setup(&p)) {
        rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory (a group of %lld tokens x vocab %lld)",
                      (long long)logits_rows(&p), (long long)p.V);
        goto done;
    }
    if ((rc = run_sequences(&p, pg, killed, err, errlen))) goto done;
    vt_sha256_final_hex(&acc->hash, acc->hash_hex);
    if (flags & LAB_PASS_FILL_REF) {
        memcpy(ref->hash, acc->hash_hex, 65);
        ref->ready = 1;
    }
    rc = eng->ops->probes(p.inst, &acc->probes, &acc->n_probes, &acc->probes_lost, err, errlen);
done:
    if (p.inst) {
        acc->forward_s += eng->ops->forward_seconds(p.inst) - fwd0;
        /* A kept instance stays open unless this pass failed (it may be dead). */
        if (p.inst != eng->inst || rc) {
            eng->ops->close(p.inst);
            if (p.inst == eng->inst) eng->inst = NULL;
        }
    }
    free(p.logits);
    free(p.goff);
    free(p.scratch);
    free(p.ps);
    if (rc && (flags & LAB_PASS_FILL_REF)) lab_ref_cache_free(ref);
    return rc;
}
