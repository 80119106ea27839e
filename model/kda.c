/*
 * kda.c — Kimi Delta Attention (the linear-attention layer), prefill and decode
 * in one code path.
 *
 * A call processes T new tokens starting from the layer's cached state: the
 * last K-1 pre-conv inputs of q, k and v, and the f32 delta-rule state of each
 * head. Prefill starts from a zeroed cache; decode is the same call with T=1.
 * A pack of whole sequences (forward.c, vt_segs) is one call too: the
 * projections, gates and norms run over all its rows, the short convs and
 * the delta rule per sequence, each from a zeroed cache.
 * The delta rule itself (kda_chunk.c) runs in chunks built on matrix products
 * when T covers a chunk, token by token otherwise: the same function to
 * rounding, not to the bit.
 *
 * The recurrence (per head, per token; i: key channel, j: value column):
 *     S[i][j] *= exp(g[i]);  u[j] = sum_i k[i] S[i][j];  d[j] = beta (v[j] - u[j])
 *     S[i][j] += k[i] d[j];  o[j] = sum_i q[i] S[i][j]
 * (kda_chunk.h has both forms and how each is parallelised). Around it, this
 * file does the projections (one batched product), the short convs, the gates,
 * and the gated output norm.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kda_chunk.h"
#include "model.h"
#include "vmath.h"

/* Channels [0, 16 * (P / 16)) of conv_rows' row t with AVX-512, each
 * vector's sums in a register over the K taps: the same products and adds
 * in the same order (0, then + w[j] * x[t + j] for j = 0..K-1; a multiply
 * and an add, never fused) as the loops there, which pass over y once per
 * tap, a load and a store per product. Returns the first channel left. */
__attribute__((target("avx512f"))) static int64_t conv_row512(const float *x0, int64_t t, int64_t P, int64_t K,
                                                              const float *wt, const float *cache, float *yt) {
    int64_t c0 = 0;
    for (; c0 + 16 <= P; c0 += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < K; j++) {
            const int64_t u = t + j - (K - 1);
            const float *bj = u < 0 ? cache + (t + j) * P : x0 + u * P;
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(wt + j * P + c0), _mm512_loadu_ps(bj + c0)));
        }
        _mm512_storeu_ps(yt + c0, acc);
    }
    return c0;
}

/* Rows t < T of the convolution (short_conv), wt the kernel transposed. */
static void conv_rows(const float *x0, int64_t T, int64_t P, int64_t K, const float *wt, const float *cache,
                      float *y) {
    const int avx = strcmp(vt_gemm_isa(), "avx512") == 0;   /* VTLAB_GEMM_ISA=scalar: the loops below alone */
    #pragma omp parallel for schedule(static) if (T * P >= VT_PAR_MIN_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        float *yt = y + t * P;
        const int64_t c0 = avx ? conv_row512(x0, t, P, K, wt, cache, yt) : 0;
        #pragma omp simd
        for (int64_t c = c0; c < P; c++) yt[c] = 0.0f;
        for (int64_t j = 0; j < K && c0 < P; j++) {
            const int64_t u = t + j - (K - 1);   /* the input row, in x0's numbering */
            const float *wj = wt + j * P, *bj = u < 0 ? cache + (t + j) * P : x0 + u * P;
            #pragma omp simd
            for (int64_t c = c0; c < P; c++) {
                const float prod = wj[c] * bj[c];
                yt[c] = yt[c] + prod;
            }
        }
        vt_silu_mul(yt, NULL, P);   /* the row's SiLU, 16 at a time */
    }
}

/* Causal depthwise conv + SiLU of x0[T, P] with weights w[P, K], using and
 * updating cache[K-1][P] (the last K-1 inputs before this call). */
static void short_conv(const float *x0, int64_t T, int64_t P, int64_t K, const float *w, float *cache, float *y,
                       float *wt) {
    /* wt[K][P]: the kernel transposed, so that a token's row is K vector
     * passes over contiguous channels (the per-channel order of the sum is
     * unchanged: acc = 0, acc += w[j] * x[t + j] for j = 0..K-1, a product
     * then a sum; 1.5-2% of a 1-thread prefill ran here as scalar code). Input
     * row t + j - (K - 1) is read where it is: in the cache before x0's first
     * row, in x0 from there (a copy of x0 after the cache was 1 MB per call on
     * one thread: the conv took 4.1 ms at 2 threads against 5.9 at 1). */
    if (T == 1) {   /* a decode step: the same sums per channel, straight from w (the transpose cost as much) */
        for (int64_t c = 0; c < P; c++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                const float prod = w[c * K + j] * (j < K - 1 ? cache[j * P + c] : x0[c]);
                acc = acc + prod;
            }
            y[c] = acc;
        }
        vt_silu_mul(y, NULL, P);
    } else {
        for (int64_t c = 0; c < P; c++)
            for (int64_t j = 0; j < K; j++) wt[j * P + c] = w[c * K + j];
        conv_rows(x0, T, P, K, wt, cache, y);
    }
    /* the last K-1 inputs: rows T .. T+K-2 of [cache; x0], in ascending order
     * (a cache row moves down, never onto one still to be read) */
    for (int64_t i = 0; i < K - 1; i++) {
        const int64_t b = T + i;   /* row of [cache; x0] */
        if (b < K - 1) memmove(cache + i * P, cache + b * P, vt_row_size(VT_F32, P));
        else memcpy(cache + i * P, x0 + (b - (K - 1)) * P, vt_row_size(VT_F32, P));
    }
}

/* Per token, in parallel: the forget gate's log decay g (f32, stored back
 * into f), beta, and the L2 norm of q and k per head (q scaled by d^-1/2). */
static void gates_and_norms(const vt_kda_w *w, int64_t T, int64_t H, int64_t d, float *f, float *beta, float *q,
                            float *k) {
    const int64_t P = H * d;
    const float *A_log = w->A_log.data, *dt_bias = w->dt_bias.data;
    const float qscale = 1.0f / sqrtf((float)d);
    #pragma omp parallel for schedule(static) if (T * P >= VT_PAR_MIN_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        float *ft = f + t * P;   /* -exp(A_log) * softplus(f + dt_bias), a token's row at once */
        #pragma omp simd   /* the element-wise loops in vectors: the same operation per element */
        for (int64_t ch = 0; ch < P; ch++) ft[ch] = ft[ch] + dt_bias[ch];
        vt_softplus_array(ft, ft, P);
        for (int64_t h = 0; h < H; h++) {   /* -exp(A_log) once per head, not per element */
            const float neg_a = -vt_expf(A_log[h]);
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) ft[h * d + i] = neg_a * ft[h * d + i];
        }
        for (int64_t h = 0; h < H; h++) {
            beta[t * H + h] = vt_sigmoid(beta[t * H + h]);
            float *qh = q + t * P + h * d, *kh = k + t * P + h * d;
            const double sq = vt_sum_squares(qh, d), sk = vt_sum_squares(kh, d);
            float iq = (float)(1.0 / sqrt(sq + 1e-6)) * qscale, ik = (float)(1.0 / sqrt(sk + 1e-6));
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) { qh[i] *= iq; kh[i] *= ik; }
        }
    }
}

/* The gated output norm per (token, head): RMSNorm over d first (weight
 * onw), then the sigmoid output gate gg. */
static void gated_norm(float *o, const float *gg, const float *onw, int64_t T, int64_t H, int64_t d, double eps) {
    const int64_t P = H * d;
    #pragma omp parallel for collapse(2) schedule(static) if (T * P >= VT_PAR_MIN_ELEMS)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float *oh = o + t * P + h * d;
            const float *gh = gg + t * P + h * d;
            const double ss = vt_sum_squares(oh, d);
            const float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
            for (int64_t i0 = 0; i0 < d; i0 += 64) {   /* the gate's sigmoid 64 at a time (no VLA of d) */
                const int64_t n = d - i0 < 64 ? d - i0 : 64;
                float sg[64];
                vt_sigmoid_array(gh + i0, sg, n);
                #pragma omp simd
                for (int64_t i = 0; i < n; i++) oh[i0 + i] = oh[i0 + i] * inv * onw[i0 + i] * sg[i];
            }
        }
}

/* The short convs (+ SiLU) of q, k and v, each sequence of the pass from its
 * own conv cache: a lone pass continues the layer's cache, a pack's sequence
 * starts from zeros (an empty state) and leaves its last inputs there for
 * nothing to read. Per sequence as short_conv decides it alone (T = 1: the
 * direct sums), so the same bits. buf: K*P floats of scratch. */
static void kda_convs(vt_session *s, const vt_kda_w *w, float *conv, int64_t T, int64_t P, int64_t K, const float *q0,
                      const float *k0, const float *v0, float *q, float *k, float *v, float *buf) {
    for (int64_t i = 0; i < vt_seg_count(s); i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        if (s->seg.n > 0) memset(conv, 0, vt_row_size(VT_F32, 3 * (K - 1) * P));
        const int64_t n = r1 - r0, at = r0 * P;
        short_conv(q0 + at, n, P, K, w->qc.data, conv + 0 * (K - 1) * P, q + at, buf);
        short_conv(k0 + at, n, P, K, w->kc.data, conv + 1 * (K - 1) * P, k + at, buf);
        short_conv(v0 + at, n, P, K, w->vc.data, conv + 2 * (K - 1) * P, v + at, buf);
    }
}

/* The delta rule (kda_chunk.c) of each sequence of the pass from its own
 * state: a sequence of at least one chunk in the chunked (WY) form built on
 * products, a shorter one (and a decode) token by token; the two agree to
 * rounding (tests/unit/test_kda_chunk.c), so the form is chosen per sequence,
 * as a forward of that sequence alone chooses it. A pack's sequence starts
 * from a zero state; one sequence's state must never reach the next
 * (tests/unit/test_batch.c; VT_MUTATE_BATCH_STATE_LEAK). */
static int kda_delta(vt_session *s, int layer, float *state, int64_t T, int64_t H, int64_t d, const float *q,
                     const float *k, const float *v, const float *f, const float *beta, float *o, vt_err *err) {
    const int64_t P = H * d, nseg = vt_seg_count(s);
    size_t wb = 0;
    int64_t dec = 0;   /* floats of exp(g) for the longest token-loop sequence */
    for (int64_t i = 0; i < nseg; i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        const int64_t n = r1 - r0;
        const size_t b = n >= VT_KDA_CHUNK ? vt_kda_chunked_work_bytes(n, H, d, omp_get_max_threads()) : 0;
        if (n >= VT_KDA_CHUNK && b == 0) return vt_errf(err, VT_EINTERNAL, "kda layer %d: workspace size", layer);
        if (b > wb) wb = b;
        if (n < VT_KDA_CHUNK && n > 1 && n * P > dec) dec = n * P;
    }
    float *work = wb ? vt_ws_alloc(s, VT_U8, (int64_t)wb, err) : NULL;
    float *decay = dec ? vt_ws_alloc(s, VT_F32, dec, err) : NULL;   /* exp(g), once per element */
    if ((wb && !work) || (dec && !decay)) return err->code;
    for (int64_t i = 0; i < nseg; i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
#ifndef VT_MUTATE_BATCH_STATE_LEAK   /* make mutation: a pack's sequence starts from the last one's state */
        if (s->seg.n > 0) memset(state, 0, vt_row_size(VT_F32, H * d * d));
#else
        if (s->seg.n > 0 && i == 0) memset(state, 0, vt_row_size(VT_F32, H * d * d));
#endif
        const int64_t n = r1 - r0, at = r0 * P;
        if (n >= VT_KDA_CHUNK) {
            if (vt_kda_chunked(n, H, d, q + at, k + at, v + at, f + at, beta + r0 * H, state, o + at, work, wb) != 0)
                return vt_errf(err, VT_EINTERNAL, "kda layer %d: the chunked delta rule refused its arguments", layer);
        } else {
            vt_kda_recurrent(n, H, d, q + at, k + at, v + at, f + at, beta + r0 * H, state, o + at,
                             n > 1 ? decay : NULL);
        }
        vt_probe_buffer(s, "kda.state", layer, VT_F32, H * d, d);
    }
    return VT_OK;
}

int vt_kda_forward(vt_session *s, int layer, const float *x, int64_t T, float *out, vt_err *err) {
    const vt_config *cfg = &s->m->cfg;
    const vt_kda_w *w = &s->m->layers[layer].kda;
    vt_layer_cache *c = &s->cache[layer];
    const int64_t D = cfg->hidden_size, H = cfg->kda_num_heads, d = cfg->kda_head_dim, P = H * d;
    const int64_t K = cfg->short_conv_kernel_size;
    int rc = VT_OK;
    const vt_ws_mark mk = vt_ws_mark_now(s);
    float *q0 = vt_ws_alloc(s, VT_F32, T * P, err), *k0 = vt_ws_alloc(s, VT_F32, T * P, err);
    float *v0 = vt_ws_alloc(s, VT_F32, T * P, err), *q = vt_ws_alloc(s, VT_F32, T * P, err);
    float *k = vt_ws_alloc(s, VT_F32, T * P, err), *v = vt_ws_alloc(s, VT_F32, T * P, err);
    float *f = vt_ws_alloc(s, VT_F32, T * P, err), *gg = vt_ws_alloc(s, VT_F32, T * P, err);
    float *o = vt_ws_alloc(s, VT_F32, T * P, err);
    float *lowf = vt_ws_alloc(s, VT_F32, T * d, err), *lowg = vt_ws_alloc(s, VT_F32, T * d, err);
    float *beta = vt_ws_alloc(s, VT_F32, T * H, err);
    float *buf = vt_ws_alloc(s, VT_F32, K * P, err);   /* short_conv's kernel, transposed */
    if (!q0 || !k0 || !v0 || !q || !k || !v || !f || !gg || !o || !lowf || !lowg || !beta || !buf) {
        rc = err->code;
        goto done;
    }

    /* every projection of x in one parallel region: q, k, v, the forget and
     * output gates' low-rank inputs, and beta */
    const vt_gemm_job proj[6] = {{x, D, T, &w->q, q0, P},     {x, D, T, &w->k, k0, P},
                                 {x, D, T, &w->v, v0, P},     {x, D, T, &w->fa, lowf, d},
                                 {x, D, T, &w->ga, lowg, d},  {x, D, T, &w->b, beta, H}};
    vt_gemm_jobs(s, proj, 6);
    vt_act_round(s, q0, T * P); vt_act_round(s, k0, T * P); vt_act_round(s, v0, T * P);
    vt_act_round(s, lowf, T * d); vt_act_round(s, lowg, T * d); vt_act_round(s, beta, T * H);
    const vt_gemm_job up[2] = {{lowf, d, T, &w->fb, f, P}, {lowg, d, T, &w->gb, gg, P}};
    vt_gemm_jobs(s, up, 2);
    vt_act_round(s, f, T * P); vt_act_round(s, gg, T * P);

    kda_convs(s, w, c->conv, T, P, K, q0, k0, v0, q, k, v, buf);
    vt_act_round(s, q, T * P); vt_act_round(s, k, T * P); vt_act_round(s, v, T * P);

    gates_and_norms(w, T, H, d, f, beta, q, k);

    if ((rc = kda_delta(s, layer, c->state, T, H, d, q, k, v, f, beta, o, err))) goto done;
    vt_act_round(s, o, T * P);

    gated_norm(o, gg, w->onorm.data, T, H, d, cfg->rms_norm_eps);
    vt_act_round(s, o, T * P);
    vt_gemm_xwT(s, o, T, P, &w->o, out);
    vt_act_round(s, out, T * D);
done:
    vt_ws_release(s, mk);
    return rc;
}
