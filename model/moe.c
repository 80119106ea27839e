/*
 * moe.c — the dense SwiGLU MLP and the MoE block.
 *
 * The MoE data path is the one whose defect started vtlab, so it is written
 * as the explicit sequence the defect report talks about, with a probe at
 * every step:
 *
 *   route    sigmoid router in f32; the bias chooses (top-k of s + bias), the
 *            weights are s (transformers, vLLM) or s + bias (Moonshot's remote
 *            code, VT_KIMI_ROUTER_WEIGHTS=biased); renormalise (with top-k > 1,
 *            or always with VT_KIMI_ROUTER_RENORM=always); scale.
 *   gather   the N*K (token, slot) pairs sorted by expert; each pair's token
 *            row copied into xg [N*K, D] so every expert's rows are contiguous.
 *   experts  SwiGLU per expert over its rows -> y [N*K, D], f32, or the
 *            stream dtype with VT_KIMI_BF16_EXPERT_OUT (an explicit convert).
 *   scatter  y rows back to expert_out [N*K, D] at row t*K + k (same dtype as
 *            y: the row size comes from the buffers, never from the stream).
 *   combine  out[t] = sum_k w[t,k] * expert_out[t*K + k] (+ shared expert).
 *
 * Audit mode fills xg and expert_out with a sentinel first and counts the rows
 * a copy failed to write.
 *
 * Every step is per token or per (token, expert) pair, so a pack of whole
 * sequences (forward.c, vt_segs) runs as one block: each expert gets the rows
 * of all of them. Its probes are recorded per sequence (one call each, as one
 * forward per sequence records them), and the replayed defect's scatter runs
 * per sequence on buffers of one forward's extent (fault_scatter).
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* a <- silu(a) * b over n elements, with the activation rounding of each step */
static void swiglu_inplace(const vt_session *s, float *a, const float *b, int64_t n) {
    const int act = s->act_cur;
    if (!act) {   /* vt_silu_mul: each element as vt_silu(a) * b, 16 at a time */
        #pragma omp parallel if (n >= VT_PAR_MIN_ELEMS)
        {
            const int64_t nt = omp_get_num_threads(), me = omp_get_thread_num();
            const int64_t i0 = n * me / nt, i1 = n * (me + 1) / nt;
            vt_silu_mul(a + i0, b + i0, i1 - i0);
        }
        return;
    }
    #pragma omp parallel for schedule(static) if (n >= VT_PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) {
        float x = a[i], y = b[i];
        if (act) x = vt_lever_round(s, x), y = vt_lever_round(s, y);
        float z = vt_silu(x) * y;
        a[i] = act ? vt_lever_round(s, z) : z;
    }
}

int vt_mlp_forward(vt_session *s, int layer, const vt_swiglu_w *w, const float *x, int64_t T, float *out, vt_err *err) {
    (void)layer;
    int64_t D = w->gate.shape[1], I = w->gate.shape[0];
    const vt_ws_mark mk = vt_ws_mark_now(s);
    float *a = vt_ws_alloc(s, VT_F32, T * I, err), *b = vt_ws_alloc(s, VT_F32, T * I, err);
    if (!a || !b) { vt_ws_release(s, mk); return err->code; }
    const vt_gemm_job gu[2] = {{x, D, T, &w->gate, a, I}, {x, D, T, &w->up, b, I}};
    vt_gemm_jobs(s, gu, 2);
    swiglu_inplace(s, a, b, T * I);
    vt_gemm_xwT(s, a, T, I, &w->down, out);
    vt_act_round(s, out, T * D);
    vt_ws_release(s, mk);
    return VT_OK;
}

void vt_moe_trace_free(vt_moe_trace *t) {
    if (!t) return;
    vt_tensor_free(&t->expert_out);
    free(t->pair_token);
    free(t->pair_expert);
    memset(t, 0, sizeof *t);
}

/* Top-k of sc[0..E) into idx[0..K), highest first; ties go to the lower index. */
static void topk(const float *sc, int64_t E, int64_t K, int64_t *idx) {
    for (int64_t k = 0; k < K; k++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t j = 0; j < k; j++) taken |= idx[j] == e;
            if (!taken && (best < 0 || sc[e] > sc[best])) best = e;
        }
        idx[k] = best;
    }
}

/* The experts' SwiGLUs as grouped products: every expert's gate and up (and
 * the shared expert's) in one parallel region, then every down projection in
 * another. Expert e's rows are xg rows [count[e], count[e+1]); its outputs go
 * to the same rows of yf. The shared expert's output goes to sh [N, D]. */
static int experts_forward(vt_session *s, const vt_ffn_w *w, const vt_tensor *xg, const int64_t *count,
                           const float *x, int64_t N, vt_tensor *yf, float *sh, vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t D = cfg->hidden_size, E = cfg->num_experts, Im = cfg->moe_intermediate_size;
    const int64_t NK = vt_tensor_nrows(xg), Is = w->has_shared ? w->shared.gate.shape[0] : 0;
    const vt_ws_mark mk = vt_ws_mark_now(s);
    float *a = vt_ws_alloc(s, VT_F32, NK * Im + N * Is, err), *b = vt_ws_alloc(s, VT_F32, NK * Im + N * Is, err);
    vt_gemm_job *jobs = vt_ws_alloc(s, VT_U8, (int64_t)((2 * E + 2) * sizeof *jobs), err);
    if (!a || !b || !jobs) { vt_ws_release(s, mk); return err->code; }
    float *as = a + NK * Im, *bs = b + NK * Im;   /* the shared expert's part */
    /* The shared expert's products (all N rows) first, the routed experts'
     * (a few rows each) after: a batch's tiles are dealt out front to back
     * and a thread that runs out takes tiles from the back of another's
     * range, so the small tiles at the back even out the finish. With the
     * shared expert's big tiles last, one thread ran the last of them
     * alone: 288M f32 prefill, 2 threads, ~1.8 ms per pass idle on one
     * thread at the gate/up batch. The order of the jobs never changes a
     * result. */
    int64_t nj = 0;
    if (w->has_shared) {
        jobs[nj++] = (vt_gemm_job){x, D, N, &w->shared.gate, as, Is};
        jobs[nj++] = (vt_gemm_job){x, D, N, &w->shared.up, bs, Is};
    }
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = count[e], n = count[e + 1] - count[e];
        const float *xe = n ? vt_tensor_row(xg, r0) : NULL;
        jobs[nj++] = (vt_gemm_job){xe, D, n, &w->experts[e].gate, a + r0 * Im, Im};
        jobs[nj++] = (vt_gemm_job){xe, D, n, &w->experts[e].up, b + r0 * Im, Im};
    }
    vt_gemm_jobs(s, jobs, nj);
    swiglu_inplace(s, a, b, NK * Im + N * Is);
    nj = 0;
    if (w->has_shared) jobs[nj++] = (vt_gemm_job){as, Is, N, &w->shared.down, sh, D};
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = count[e], n = count[e + 1] - count[e];
        jobs[nj++] = (vt_gemm_job){a + r0 * Im, Im, n, &w->experts[e].down, n ? vt_tensor_row(yf, r0) : NULL, D};
    }
    vt_gemm_jobs(s, jobs, nj);
    vt_act_round(s, yf->data, NK * D);
    if (w->has_shared) vt_act_round(s, sh, N * D);
    vt_ws_release(s, mk);
    return VT_OK;
}

/* Audit mode: the rows of t (NK pairs, pair p = token p / K) left with the
 * sentinel, per sequence of the pass (s->seg): row r's pair is pair[r] (NULL:
 * r itself), its sequence the one holding token pair[r] / K. into[nseq]. */
static void unwritten_per_seq(const vt_session *s, const vt_tensor *t, const int64_t *pair, int64_t N, int64_t K,
                              int64_t *into) {
    const int64_t nseq = vt_seg_count(s), NK = N * K;
    for (int64_t i = 0; i < nseq; i++) into[i] = 0;
    if (nseq == 1) {   /* a lone pass: the whole buffer at once, as before packs */
        into[0] = vt_tensor_rows_unwritten(t, NULL);
        return;
    }
    for (int64_t r = 0; r < NK; r++) {
        vt_tensor row = {0};
        const int64_t shp[2] = {1, vt_tensor_ncols(t)};
        if (vt_tensor_view(&row, t->dtype, 2, shp, vt_tensor_row(t, r), vt_tensor_row_bytes(t), NULL) ||
            !vt_tensor_rows_unwritten(&row, NULL))
            continue;
        const int64_t tok = (pair ? pair[r] : r) / K;
        int64_t i = 0, r0, r1;
        for (;; i++) {   /* a pack holds a few sequences: a scan is enough */
            vt_seg_rows(s, N, i, &r0, &r1);
            if (tok < r1 || i == nseq - 1) break;
        }
        into[i]++;
    }
}

/* The replayed defect's scatter (faults.c) of y into eo, once per sequence of
 * the pass, as a forward of that sequence alone runs it: the defect's
 * scrambled copy depends on the extent of its buffers and on where each row
 * sits in them, so each sequence gets buffers of its own extent: its rows of
 * eo (contiguous: pair p = t*K + k) and its rows of y in the order the
 * expert sort gives them alone (the pack's sort is stable in the pair index,
 * so a sequence's pairs keep their own order in it). A lone pass: the
 * defect's call as it always was. */
static int fault_scatter(vt_session *s, vt_tensor *eo, const int64_t *order, const vt_tensor *y, int64_t N,
                         int64_t K, vt_dtype stream_dt, vt_copy_stats *st, vt_err *err) {
    const int64_t NK = N * K, D = vt_tensor_ncols(y);
    if (s->seg.n == 0) {
        vt_fault_scatter_rows(eo, order, y, NK, stream_dt, st);
        return VT_OK;
    }
    const vt_ws_mark mk = vt_ws_mark_now(s);
    void *yb = vt_ws_alloc(s, y->dtype, NK * D, err);
    int64_t *lord = vt_ws_alloc(s, VT_I64, NK, err);
    int rc = yb && lord ? VT_OK : err->code;
    for (int64_t i = 0; !rc && i < s->seg.n; i++) {
        int64_t r0, r1, n = 0;
        vt_seg_rows(s, N, i, &r0, &r1);
        const int64_t p0 = r0 * K, p1 = r1 * K, shp[2] = {p1 - p0, D};
        vt_tensor ys = {0}, es = {0};
        if ((rc = vt_tensor_view(&ys, y->dtype, 2, shp, yb, vt_row_size(y->dtype, shp[0] * D), err)) ||
            (rc = vt_tensor_view(&es, eo->dtype, 2, shp, vt_tensor_row(eo, p0), vt_row_size(eo->dtype, shp[0] * D),
                                 err)))
            break;
        for (int64_t r = 0; !rc && r < NK; r++)
            if (order[r] >= p0 && order[r] < p1) {
                lord[n] = order[r] - p0;
                rc = vt_rows_copy(&ys, n++, y, r, 1, NULL, err);
            }
        if (!rc) vt_fault_scatter_rows(&es, lord, &ys, n, stream_dt, st);
    }
    vt_ws_release(s, mk);
    return rc;
}

/* One MoE pass's buffers, carved from the workspace (the caller's mark
 * releases them). xgb, yfb, eob, ybb back the xg, yf, eo and y views. */
typedef struct moe_bufs {
    float   *logits;    /* [N, E] router logits */
    float   *wts;       /* [NK] routing weights, pair p = t*K + k */
    int64_t *sel;       /* [NK] the expert of each pair */
    int64_t *count;     /* [E+1] first sorted row of each expert */
    int64_t *fill;      /* [E] the counting sort's cursors */
    int64_t *order;     /* [NK] order[i]: pair index p = t*K+k of sorted row i */
    int64_t *src_tok;   /* [NK] the token of sorted row i */
    float   *row;       /* [threads, D] one f32 row per thread for the combine */
    float   *sh;        /* [N, D] the shared expert's output, or NULL */
    int64_t *unw;       /* [sequences] audit: rows unwritten per sequence */
    void    *xgb, *yfb, *eob, *ybb;
} moe_bufs;

static int moe_bufs_alloc(vt_session *s, const vt_ffn_w *w, int64_t N, vt_dtype edt, moe_bufs *b, vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t D = cfg->hidden_size, E = cfg->num_experts, NK = N * cfg->num_experts_per_token;
    b->logits = vt_ws_alloc(s, VT_F32, N * E, err);
    b->wts = vt_ws_alloc(s, VT_F32, NK, err);
    b->sel = vt_ws_alloc(s, VT_I64, NK, err);
    b->count = vt_ws_alloc(s, VT_I64, E + 1, err);
    b->fill = vt_ws_alloc(s, VT_I64, E, err);
    b->order = vt_ws_alloc(s, VT_I64, NK, err);
    b->src_tok = vt_ws_alloc(s, VT_I64, NK, err);
    b->row = vt_ws_alloc(s, VT_F32, (int64_t)omp_get_max_threads() * D, err);
    b->sh = w->has_shared ? vt_ws_alloc(s, VT_F32, N * D, err) : NULL;
    b->unw = vt_ws_alloc(s, VT_I64, vt_seg_count(s), err);
    b->xgb = vt_ws_alloc(s, VT_F32, NK * D, err);
    b->yfb = vt_ws_alloc(s, VT_F32, NK * D, err);
    b->eob = vt_ws_alloc(s, edt, NK * D, err);
    b->ybb = edt != VT_F32 ? vt_ws_alloc(s, edt, NK * D, err) : b->yfb;
    if (!b->logits || !b->wts || !b->sel || !b->count || !b->fill || !b->order || !b->src_tok || !b->row ||
        (w->has_shared && !b->sh) || !b->xgb || !b->yfb || !b->eob || !b->ybb || !b->unw)
        return err->code;
    return VT_OK;
}

/* route: the router's logits, then per token the sigmoid scores, the top-k
 * by score + bias, and the weights (renormalised, scaled). */
static void moe_route(vt_session *s, const vt_ffn_w *w, const float *x, int64_t N, const moe_bufs *b) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t D = cfg->hidden_size, E = cfg->num_experts, K = cfg->num_experts_per_token;
    float *logits = b->logits, *wts = b->wts;
    int64_t *sel = b->sel;
    vt_gemm_xwT(s, x, N, D, &w->router, logits);
    const float *bias = w->router_bias.data;
    #pragma omp parallel for schedule(static) if (N * E >= VT_PAR_MIN_ELEMS / 16)   /* sigmoid + top-k: ~40 ns/element */
    for (int64_t t = 0; t < N; t++) {
        float sc[4096], sg[4096];   /* E <= 4096 is enforced by the config parser */
        for (int64_t e = 0; e < E; e++) {
            sg[e] = vt_sigmoid(logits[t * E + e]);
            sc[e] = sg[e] + bias[e];
        }
        topk(sc, E, K, sel + t * K);
        double sum = 0.0;
        for (int64_t k = 0; k < K; k++) {
            int64_t e = sel[t * K + k];
            wts[t * K + k] = s->k.router_biased ? sc[e] : sg[e];
            sum += wts[t * K + k];
        }
        for (int64_t k = 0; k < K; k++) {
            float v = wts[t * K + k];
            /* Two conventions (VT_KIMI_ROUTER_RENORM): Moonshot's original gate
             * renormalises only with top-k > 1 (the default); the transformers
             * port renormalises for every top-k, so a top-1 weight becomes 1. */
            if (cfg->moe_renormalize && (K > 1 || s->k.router_renorm_always)) v = (float)(v / (sum + 1e-20));
            wts[t * K + k] = v * (float)cfg->routed_scaling_factor;
        }
    }
}

/* The NK pairs sorted by expert (counting sort, stable in p): count[e] is
 * expert e's first sorted row, order[i] the pair of sorted row i and
 * src_tok[i] its token. count must be zero on entry. */
static void sort_by_expert(const moe_bufs *b, int64_t NK, int64_t E, int64_t K) {
    const int64_t *sel = b->sel;
    int64_t *count = b->count, *fill = b->fill, *order = b->order;
    for (int64_t p = 0; p < NK; p++) count[sel[p] + 1]++;
    for (int64_t e = 0; e < E; e++) count[e + 1] += count[e];
    memcpy(fill, count, vt_row_size(VT_I64, E));
    for (int64_t p = 0; p < NK; p++) order[fill[sel[p]]++] = p;
    for (int64_t i = 0; i < NK; i++) b->src_tok[i] = order[i] / K;
}

/* gather: each sorted row's token row of x into xg, probed. */
static int moe_gather(vt_session *s, int layer, const float *x, int64_t N, int64_t K, const moe_bufs *b,
                      vt_tensor *xg, vt_copy_stats *st, vt_err *err) {
    const int64_t D = s->m->cfg.hidden_size, NK = N * K, shp_x[2] = {N, D};
    const int audit = s->k.probe == VT_PROBE_AUDIT;
    vt_tensor xt = {0};
    int rc;
    if ((rc = vt_tensor_view(&xt, VT_F32, 2, shp_x, (void *)x, vt_row_size(VT_F32, N * D), err))) return rc;
    if (audit) vt_tensor_fill_sentinel(xg);
    if ((rc = vt_rows_gather(xg, &xt, b->src_tok, NK, st, err))) return rc;
    if (audit) unwritten_per_seq(s, xg, b->order, N, K, b->unw);
    vt_probe_copy_seqs(s, "moe.gather", layer, *st, 0, N, K, audit ? b->unw : NULL);
    return VT_OK;
}

/* The experts' output y: yf itself (f32), or yf converted into ybuf (on
 * ybb) in the expert dtype edt by an explicit conversion. */
static int expert_y(vt_session *s, vt_dtype edt, vt_tensor *yf, vt_tensor *ybuf, void *ybb, const vt_tensor **y,
                    vt_copy_stats *st, vt_err *err) {
    const int64_t NK = vt_tensor_nrows(yf), D = vt_tensor_ncols(yf), shp_nk[2] = {NK, D};
    if (edt == VT_F32) {
        *y = yf;
        return VT_OK;
    }
    int rc;
    if ((rc = vt_tensor_view(ybuf, edt, 2, shp_nk, ybb, vt_row_size(edt, NK * D), err))) return rc;
    float *yv = yf->data;
    if (s->lossy_cur)   /* the planted fault: the conversion keeps fewer bits */
        for (int64_t i = 0; i < NK * D; i++) yv[i] = vt_round_mantissa(yv[i], s->k.lossy_bits);
    if ((rc = vt_rows_convert(ybuf, yf, st, err))) return rc;
    *y = ybuf;
    return VT_OK;
}

/* scatter: y rows back to eo at row t*K + k, by the sound copy or the
 * replayed defect's; probed, with the rows left unwritten under audit
 * (*unwritten: their count, -1 without audit). */
static int moe_scatter(vt_session *s, int layer, int defective, vt_tensor *eo, const vt_tensor *y, int64_t N,
                       int64_t K, vt_dtype sdt, const moe_bufs *b, int64_t *unwritten, vt_copy_stats *st,
                       vt_err *err) {
    const int audit = s->k.probe == VT_PROBE_AUDIT;
    int rc;
    if (audit) vt_tensor_fill_sentinel(eo);
    if (defective) {   /* sizes rows from the stream dtype */
        if ((rc = fault_scatter(s, eo, b->order, y, N, K, sdt, st, err))) return rc;
    } else if ((rc = vt_rows_scatter(eo, b->order, y, N * K, st, err)))
        return rc;
    *unwritten = -1;
    if (audit) {
        unwritten_per_seq(s, eo, NULL, N, K, b->unw);
        int64_t u = 0;
        for (int64_t i = 0; i < vt_seg_count(s); i++) u += b->unw[i];
        *unwritten = u;
        vt_tensor_clear_sentinel(eo);
    }
    vt_probe_copy_seqs(s, "moe.scatter", layer, *st, 0, N, K, audit ? b->unw : NULL);
    return VT_OK;
}

/* combine: out[t] = sum_k w[t,k] * eo[t*K + k] (+ the shared expert), eo
 * read through an explicit conversion to f32; probed. */
static void moe_combine(vt_session *s, int layer, const vt_tensor *eo, const moe_bufs *b, int64_t N, int64_t K,
                        float *out) {
    const int64_t D = s->m->cfg.hidden_size;
    const float *wts = b->wts, *sh = b->sh;
    float *row = b->row;
    #pragma omp parallel for schedule(static) if (N * K * D >= VT_PAR_MIN_ELEMS)
    for (int64_t t = 0; t < N; t++) {
        float *o = out + t * D, *r = row + (int64_t)omp_get_thread_num() * D;
        memset(o, 0, vt_row_size(VT_F32, D));
        for (int64_t k = 0; k < K; k++) {
            const float *e = vt_tensor_row(eo, t * K + k);   /* f32 rows are read where they are */
            if (eo->dtype != VT_F32) vt_convert(r, VT_F32, e, eo->dtype, (size_t)D), e = r;
            float wk = wts[t * K + k];
            #pragma omp simd   /* o, e and sh never overlap: each element's multiply then add, as scalar code */
            for (int64_t i = 0; i < D; i++) o[i] += wk * e[i];
        }
        if (sh) {
            #pragma omp simd
            for (int64_t i = 0; i < D; i++) o[i] += sh[t * D + i];
        }
    }
    const int64_t NK = N * K;
    const vt_copy_stats st = {.rows = NK, .bytes_per_row = vt_row_size(VT_F32, D),
                              .src_row_bytes = vt_tensor_row_bytes(eo), .dst_row_bytes = vt_row_size(VT_F32, D),
                              .src_dtype = eo->dtype, .dst_dtype = VT_F32};
    vt_probe_copy_seqs(s, "moe.combine", layer, st, 1, N, K, NULL);
}

/* The caller's trace: each pair's token and expert, the rows the scatter
 * left unwritten, and a copy of expert_out. */
static int fill_trace(vt_moe_trace *trace, const int64_t *sel, const vt_tensor *eo, int64_t N, int64_t K,
                      int64_t unwritten, vt_err *err) {
    const int64_t NK = N * K, shp_nk[2] = {NK, vt_tensor_ncols(eo)};
    memset(trace, 0, sizeof *trace);
    trace->pair_token = malloc((size_t)NK * sizeof(int64_t));
    trace->pair_expert = malloc((size_t)NK * sizeof(int64_t));
    if (!trace->pair_token || !trace->pair_expert) return vt_errf(err, VT_ENOMEM, "moe trace");
    for (int64_t p = 0; p < NK; p++) { trace->pair_token[p] = p / K; trace->pair_expert[p] = sel[p]; }
    trace->rows_unwritten = unwritten;
    int rc = vt_tensor_alloc(&trace->expert_out, eo->dtype, 2, shp_nk, err);
    if (rc) return rc;
    return vt_rows_copy(&trace->expert_out, 0, eo, 0, NK, NULL, err);
}

/* The steps of the banner (route, sort, gather, experts, scatter, combine),
 * each a function of its own above; this one holds the buffers and the order. */
int vt_moe_forward(vt_session *s, int layer, const vt_ffn_w *w, const float *x, int64_t N, float *out,
                   vt_moe_trace *trace, vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const int64_t D = cfg->hidden_size, E = cfg->num_experts, K = cfg->num_experts_per_token;
    const int64_t NK = N * K, shp_nk[2] = {NK, D};
    /* this layer's dtypes: the levers may be scoped to other layers */
    const vt_dtype edt = vt_expert_dtype_at(s, layer), sdt = vt_stream_dtype_at(s, layer, 1);
    vt_tensor xg = {0}, yf = {0}, ybuf = {0}, eo = {0};
    const vt_tensor *y = NULL;
    const vt_ws_mark mk = vt_ws_mark_now(s);
    moe_bufs b;
    int rc = moe_bufs_alloc(s, w, N, edt, &b, err);
    if (rc) goto done;
    memset(b.count, 0, vt_row_size(VT_I64, E + 1));
    if ((rc = vt_tensor_view(&xg, VT_F32, 2, shp_nk, b.xgb, vt_row_size(VT_F32, NK * D), err)) ||
        (rc = vt_tensor_view(&yf, VT_F32, 2, shp_nk, b.yfb, vt_row_size(VT_F32, NK * D), err)) ||
        (rc = vt_tensor_view(&eo, edt, 2, shp_nk, b.eob, vt_row_size(edt, NK * D), err)))
        goto done;
    /* The scatter below is the replayed defect's, or the sound one. The
     * defective one leaves zeros in the rows it misses, never old data; the
     * sound one writes every row (its destinations are a permutation). */
#ifdef VT_MUTATE_SCATTER_STREAM_DTYPE
    const int defective = 1;   /* mutation (a) of `make mutation`: the defect at its original call site */
#else
    const int defective = s->k.fault == VT_FAULT_MOE_SCATTER_ROW_BYTES_FROM_STREAM;
#endif
    if (defective) {
        #pragma omp parallel for schedule(static) if (NK * D >= VT_PAR_MIN_ELEMS)
        for (int64_t r = 0; r < NK; r++) memset(vt_tensor_row(&eo, r), 0, vt_tensor_row_bytes(&eo));
    }

    moe_route(s, w, x, N, &b);
    sort_by_expert(&b, NK, E, K);
    vt_copy_stats st;
    if ((rc = moe_gather(s, layer, x, N, K, &b, &xg, &st, err))) goto done;
    /* experts (and the shared expert) */
    if ((rc = experts_forward(s, w, &xg, b.count, x, N, &yf, b.sh, err))) goto done;
    if ((rc = expert_y(s, edt, &yf, &ybuf, b.ybb, &y, &st, err))) goto done;
    vt_probe_buffer_seqs(s, "moe.expert.y", layer, y->dtype, N, K, D);
    int64_t unwritten;
    if ((rc = moe_scatter(s, layer, defective, &eo, y, N, K, sdt, &b, &unwritten, &st, err))) goto done;
    moe_combine(s, layer, &eo, &b, N, K, out);
    vt_act_round(s, out, N * D);
    if (trace) rc = fill_trace(trace, b.sel, &eo, N, K, unwritten, err);
done:
    vt_ws_release(s, mk);
    return rc;
}
