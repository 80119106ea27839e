/*
 * kda.cu — Kimi Delta Attention on the device; the mirror of kda.c.
 *
 * A call processes T new tokens of each of B sequences from the layer's
 * cached state (the last K-1 pre-conv inputs of q, k, v and the f32
 * delta-rule state per head), so prefill and decode are one code path, as on
 * the CPU. The recurrence (per head, per token; i: key channel, j: value
 * column):
 *     S[i][j] *= exp(g[i]);  u[j] = sum_i k[i] S[i][j];  d[j] = beta (v[j] - u[j])
 *     S[i][j] += k[i] d[j];  o[j] = sum_i q[i] S[i][j]
 * Value columns are independent, so one warp owns one column j of one head:
 * the 32 lanes split the key channels i (lane + 32 r), keep their part of the
 * column in registers for the whole call, and reduce u and o with shuffles.
 * The state is stored transposed from the CPU's [H][d_k][d_v]: [B][H][d_v][d_k], one
 * contiguous column per warp. It never moves between the host and the device.
 */
#include <cmath>

#include "model/cuda/vtcuda.h"

/* Key channels per lane: head_dim <= 32 * KDA_PER_LANE (checked at session open). */
#define KDA_PER_LANE 8

/* ================================================================ kernels */

/* y[b,t,c] = silu(sum_j w[c,j] * in(b, t+j, c)): in(b, u, c) is the cache for
 * u < K-1 and the new input x0[b, u-(K-1), c] after it (kda.c's buf). */
__global__ void conv_silu_kernel(const float *x0, const float *cache, int64_t cache_bstride, const float *w, float *y,
                                 int64_t B, int64_t T, int64_t P, int K) {
    int64_t n = B * T * P;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = idx % P, t = (idx / P) % T, b = idx / (P * T);
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            int64_t u = t + j;
            float in = u < K - 1 ? cache[b * cache_bstride + u * P + c] : x0[(b * T + u - (K - 1)) * P + c];
            acc += w[c * K + j] * in;
        }
        y[idx] = cu_silu(acc);
    }
}

/* cache rows rr <- buf row T + rr (kda.c's final memcpy). One thread per
 * (b, c) walks rr upwards: it reads row T+rr > rr before anything overwrites it. */
__global__ void conv_cache_update_kernel(const float *x0, float *cache, int64_t cache_bstride, int64_t B, int64_t T,
                                         int64_t P, int K) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < B * P; idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = idx % P, b = idx / P;
        float *cb = cache + b * cache_bstride;
        for (int64_t rr = 0; rr < K - 1; rr++) {
            int64_t u = T + rr;
            cb[rr * P + c] = u < K - 1 ? cb[u * P + c] : x0[(b * T + u - (K - 1)) * P + c];
        }
    }
}

/* g = -exp(A_log[h]) * softplus(f + dt_bias), in place over f [R, P]. */
__global__ void kda_gate_kernel(float *f, const float *A_log, const float *dt_bias, int64_t R, int64_t P, int64_t d) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < R * P; idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = idx % P;
        f[idx] = -expf(A_log[ch / d]) * cu_softplus(f[idx] + dt_bias[ch]);
    }
}

__global__ void sigmoid_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cu_sigmoid(x[i]);
}

/* One block per row of d: x /= sqrt(sum x^2 + 1e-6), times scale. */
__global__ void l2norm_kernel(float *x, int64_t rows, int64_t d, float scale) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float *xr = x + r * d;
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (double)xr[i] * xr[i];
        ss = cu_block_sum(ss);
        float inv = (float)(1.0 / sqrt(ss + 1e-6)) * scale;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) xr[i] *= inv;
        __syncthreads();
    }
}

/* One warp per (b, h, j); see the banner. q, k, g, v, o: [B*T, H*d]; beta [B*T, H]. */
__global__ void kda_recurrence_kernel(const float *q, const float *k, const float *v, const float *g,
                                      const float *beta, float *state, float *o, int64_t B, int64_t T, int64_t H,
                                      int64_t d) {
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= B * H * d) return;   /* uniform across the warp */
    const int64_t j = warp % d, h = (warp / d) % H, b = warp / (d * H), P = H * d;
    float *col = state + ((b * H + h) * d + j) * d;
    float s[KDA_PER_LANE];
#pragma unroll
    for (int r = 0; r < KDA_PER_LANE; r++) {
        int64_t i = lane + 32 * r;
        s[r] = i < d ? col[i] : 0.0f;
    }
    for (int64_t t = 0; t < T; t++) {
        const int64_t row = b * T + t;
        const float *qh = q + row * P + h * d, *kh = k + row * P + h * d, *gh = g + row * P + h * d;
        float u = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_PER_LANE; r++) {
            int64_t i = lane + 32 * r;
            if (i < d) { s[r] *= expf(gh[i]); u += kh[i] * s[r]; }
        }
        u = cu_warp_sum(u);
        float delta = beta[row * H + h] * (v[row * P + h * d + j] - u);
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_PER_LANE; r++) {
            int64_t i = lane + 32 * r;
            if (i < d) { s[r] += kh[i] * delta; acc += qh[i] * s[r]; }
        }
        acc = cu_warp_sum(acc);
        if (lane == 0) o[row * P + h * d + j] = acc;
    }
#pragma unroll
    for (int r = 0; r < KDA_PER_LANE; r++) {
        int64_t i = lane + 32 * r;
        if (i < d) col[i] = s[r];
    }
}

/* One block per (row, head): o = o * rsqrt(mean(o^2) + eps) * onorm * sigmoid(gg). */
__global__ void gated_norm_kernel(float *o, const float *gg, const float *onw, int64_t rows, int64_t d, double eps) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float *oh = o + r * d;
        const float *gh = gg + r * d;
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (double)oh[i] * oh[i];
        ss = cu_block_sum(ss);
        float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) oh[i] = oh[i] * inv * onw[i] * cu_sigmoid(gh[i]);
        __syncthreads();
    }
}

/* ================================================================ launchers */

/* At least one block: a zero-sized grid is an invalid launch (R = 0 rows); the
 * kernels' row loops then do nothing. */
static unsigned row_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows < 65535 * 16 ? rows : 65535 * 16); }

static int short_conv(const float *x0, int64_t B, int64_t T, int64_t P, int K, const float *w, float *cache,
                      int64_t cache_bstride, float *y, vt_err *err) {
    conv_silu_kernel<<<cu_blocks(B * T * P), CU_THREADS>>>(x0, cache, cache_bstride, w, y, B, T, P, K);
    LAUNCH_CHECK();
    if (K > 1) {
        conv_cache_update_kernel<<<cu_blocks(B * P), CU_THREADS>>>(x0, cache, cache_bstride, B, T, P, K);
        LAUNCH_CHECK();
    }
    return VT_OK;
}

int cu_kda_forward(vt_cuda *c, int layer, const float *x, int64_t T, float *out, vt_err *err) {
    const vt_config *cfg = c->cfg;
    const cu_layer *w = &c->w->layers[layer];
    const int64_t D = cfg->hidden_size, H = cfg->kda_num_heads, d = cfg->kda_head_dim, P = H * d;
    const int K = (int)cfg->short_conv_kernel_size;
    const int64_t B = c->B, R = B * T;
    if (d > 32 * KDA_PER_LANE)
        return vt_errf(err, VT_EUNSUPPORTED, "cuda kda: head_dim %lld > %d", (long long)d, 32 * KDA_PER_LANE);
    const size_t rp = vt_row_size(VT_F32, R * P);
    SCRATCH(float, q0, S_KDA_Q0, rp);
    SCRATCH(float, k0, S_KDA_K0, rp);
    SCRATCH(float, v0, S_KDA_V0, rp);
    SCRATCH(float, q, S_KDA_Q, rp);
    SCRATCH(float, k, S_KDA_K, rp);
    SCRATCH(float, v, S_KDA_V, rp);
    SCRATCH(float, f, S_KDA_F, rp);
    SCRATCH(float, gg, S_KDA_GG, rp);
    SCRATCH(float, o, S_KDA_O, rp);
    SCRATCH(float, low, S_KDA_LOW, vt_row_size(VT_F32, R * d));
    SCRATCH(float, beta, S_KDA_BETA, vt_row_size(VT_F32, R * H));

    /* projections, conv + SiLU; cache layout [B][3][K-1][P] */
    TRY(cu_gemm_xwT(c, x, R, D, &w->q, q0, err));
    TRY(cu_gemm_xwT(c, x, R, D, &w->k, k0, err));
    TRY(cu_gemm_xwT(c, x, R, D, &w->v, v0, err));
    TRY(cu_act_round(c, q0, R * P, err));
    TRY(cu_act_round(c, k0, R * P, err));
    TRY(cu_act_round(c, v0, R * P, err));
    float *cache = c->conv[layer];
    const int64_t cs = (int64_t)(K - 1) * P, cbs = 3 * cs;
    TRY(short_conv(q0, B, T, P, K, w->qc, cache + 0 * cs, cbs, q, err));
    TRY(short_conv(k0, B, T, P, K, w->kc, cache + 1 * cs, cbs, k, err));
    TRY(short_conv(v0, B, T, P, K, w->vc, cache + 2 * cs, cbs, v, err));
    TRY(cu_act_round(c, q, R * P, err));
    TRY(cu_act_round(c, k, R * P, err));
    TRY(cu_act_round(c, v, R * P, err));

    /* forget gate (low rank), then g in f32, stored back into f */
    TRY(cu_gemm_xwT(c, x, R, D, &w->fa, low, err));
    TRY(cu_act_round(c, low, R * d, err));
    TRY(cu_gemm_xwT(c, low, R, d, &w->fb, f, err));
    TRY(cu_act_round(c, f, R * P, err));
    kda_gate_kernel<<<cu_blocks(R * P), CU_THREADS>>>(f, w->A_log, w->dt_bias, R, P, d);
    LAUNCH_CHECK();

    /* beta */
    TRY(cu_gemm_xwT(c, x, R, D, &w->b, beta, err));
    TRY(cu_act_round(c, beta, R * H, err));
    sigmoid_kernel<<<cu_blocks(R * H), CU_THREADS>>>(beta, R * H);
    LAUNCH_CHECK();

    /* L2 norm of q and k per head; q scaled by d^-1/2 */
    const float qscale = 1.0f / sqrtf((float)d);
    l2norm_kernel<<<row_grid(R * H), 128>>>(q, R * H, d, qscale);
    LAUNCH_CHECK();
    l2norm_kernel<<<row_grid(R * H), 128>>>(k, R * H, d, 1.0f);
    LAUNCH_CHECK();

    /* recurrence: 4 warps per block, one warp per (b, h, j) */
    const int64_t warps = B * H * d;
    kda_recurrence_kernel<<<(unsigned)((warps + 3) / 4), 128>>>(q, k, v, f, beta, c->state[layer], o, B, T, H, d);
    LAUNCH_CHECK();
    c->flops += 7.0 * (double)R * (double)H * (double)d * (double)d;
    c->bytes += 2.0 * (double)vt_row_size(VT_F32, B * H * d * d);
    cu_probe_buffer(c, "kda.state", layer, VT_F32, H * d, d);
    TRY(cu_act_round(c, o, R * P, err));

    /* output gate (low rank) and the gated norm: norm first, then the gate */
    TRY(cu_gemm_xwT(c, x, R, D, &w->ga, low, err));
    TRY(cu_act_round(c, low, R * d, err));
    TRY(cu_gemm_xwT(c, low, R, d, &w->gb, gg, err));
    TRY(cu_act_round(c, gg, R * P, err));
    gated_norm_kernel<<<row_grid(R * H), 128>>>(o, gg, w->onorm, R * H, d, cfg->rms_norm_eps);
    LAUNCH_CHECK();
    TRY(cu_act_round(c, o, R * P, err));
    TRY(cu_gemm_xwT(c, o, R, P, &w->o, out, err));
    TRY(cu_act_round(c, out, R * D, err));
    return VT_OK;
}
