/*
 * mla.cu — MLA attention without rotary embeddings (NoPE) on the device; the
 * mirror of mla.c.
 *
 * As on the CPU the cache keeps the expanded keys [Nh, nope+rope] and values
 * [Nh, dv] of every position (device-resident, per sequence, grown by
 * doubling), so T new tokens attend over the cached positions plus their own,
 * causally. Attention runs as two cuBLAS strided-batched GEMMs per sequence,
 * batched over heads — scores = q·kᵀ (scaled) and o = p·v — around a causal
 * softmax kernel in f32 with the normaliser summed in double, as mla.c does.
 * These GEMMs are always f32 (pedantic): the probabilities are not
 * bf16-exact, and the CPU multiplies them in f32.
 */
#include <climits>
#include <cmath>

#include "model/cuda/vtcuda.h"

/* ================================================================ kernels */

/* kc[b, p0+t] = per head (k_nope[h], k_rot), vc[b, p0+t] = per head v[h]. */
__global__ void mla_append_kernel(const float *kv, const float *lat, float *kc, float *vc, int64_t B, int64_t T,
                                  int64_t p0, int64_t cap, int64_t Nh, int64_t nope, int64_t rope, int64_t dv,
                                  int64_t r) {
    const int64_t qk = nope + rope, kw = Nh * qk, vw = Nh * dv, kvw = Nh * (nope + dv), R = B * T;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t idx = i0; idx < R * kw; idx += stride) {
        int64_t row = idx / kw, rem = idx % kw, h = rem / qk, i = rem % qk, b = row / T, t = row % T;
        float val = i < nope ? kv[row * kvw + h * (nope + dv) + i] : lat[row * (r + rope) + r + (i - nope)];
        kc[(b * cap + p0 + t) * kw + rem] = val;
    }
    for (int64_t idx = i0; idx < R * vw; idx += stride) {
        int64_t row = idx / vw, rem = idx % vw, h = rem / dv, i = rem % dv, b = row / T, t = row % T;
        vc[(b * cap + p0 + t) * vw + rem] = kv[row * kvw + h * (nope + dv) + nope + i];
    }
}

/* One block per (h, t) row of scores [Nh, T, Tall]: row t sees positions
 * j < p0 + t + 1; the rest get probability 0. */
__global__ void softmax_causal_kernel(float *sc, int64_t rows, int64_t T, int64_t Tall, int64_t p0) {
    for (int64_t rw = blockIdx.x; rw < rows; rw += gridDim.x) {
        const int64_t t = rw % T, n = p0 + t + 1;
        float *row = sc + rw * Tall;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j]);
        mx = cu_block_max(mx);
        double sum = 0.0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            float e = expf(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        sum = cu_block_sum(sum);
        for (int64_t j = threadIdx.x; j < Tall; j += blockDim.x) row[j] = j < n ? (float)(row[j] / sum) : 0.0f;
        __syncthreads();
    }
}

/* ================================================================ launchers */

/* Grows layer `layer`'s caches to hold `need` positions per sequence, keeping
 * the c->pos positions already there. */
static int grow(vt_cuda *c, int layer, int64_t need, int64_t kw, int64_t vw, vt_err *err) {
    if (need <= c->cap[layer]) return VT_OK;
    int64_t cap = c->cap[layer] ? c->cap[layer] : 64;
    while (cap < need) cap *= 2;
    float *kc = NULL, *vc = NULL;
    cudaError_t e1 = cudaMalloc((void **)&kc, vt_row_size(VT_F32, c->B * cap * kw));
    cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc((void **)&vc, vt_row_size(VT_F32, c->B * cap * vw)) : e1;
    if (e2 != cudaSuccess) {
        cudaFree(kc);
        cudaGetLastError();   /* clear the (non-sticky) allocation error */
        return vt_errf(err, VT_ENOMEM, "cuda mla cache: cannot allocate %lld positions for %lld sequences",
                       (long long)cap, (long long)c->B);
    }
    for (int64_t b = 0; b < c->B && c->pos > 0; b++) {
        cudaError_t e = cudaMemcpy(kc + b * cap * kw, c->kc[layer] + b * c->cap[layer] * kw,
                                   vt_row_size(VT_F32, c->pos * kw), cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(vc + b * cap * vw, c->vc[layer] + b * c->cap[layer] * vw, vt_row_size(VT_F32, c->pos * vw),
                           cudaMemcpyDeviceToDevice);
        if (e != cudaSuccess) {
            cudaFree(kc);
            cudaFree(vc);
            return vt_errf(err, VT_EINTERNAL, "cuda mla cache: copy: %s", cudaGetErrorString(e));
        }
    }
    CUDA_CHECK(cudaFree(c->kc[layer]));
    CUDA_CHECK(cudaFree(c->vc[layer]));
    c->kc[layer] = kc;
    c->vc[layer] = vc;
    c->cap[layer] = cap;
    return VT_OK;
}

int cu_mla_forward(vt_cuda *c, int layer, const float *x, int64_t T, float *out, vt_err *err) {
    const vt_config *cfg = c->cfg;
    const cu_layer *w = &c->w->layers[layer];
    const int64_t D = cfg->hidden_size, Nh = cfg->num_attention_heads, nope = cfg->qk_nope_head_dim;
    const int64_t rope = cfg->qk_rope_head_dim, dv = cfg->v_head_dim, r = cfg->kv_lora_rank;
    const int64_t qk = nope + rope, kw = Nh * qk, vw = Nh * dv, p0 = c->pos, Tall = p0 + T;
    const int64_t B = c->B, R = B * T;
    const double eps = c->k.kv_norm_eps_config ? cfg->rms_norm_eps : 1e-6;
    if (Tall > INT_MAX || T * Tall > INT_MAX)
        return vt_errf(err, VT_EUNSUPPORTED, "cuda mla: %lld x %lld scores exceed cuBLAS's int strides", (long long)T,
                       (long long)Tall);
    TRY(grow(c, layer, Tall, kw, vw, err));
    SCRATCH(float, q, S_MLA_Q, vt_row_size(VT_F32, R * kw));
    SCRATCH(float, lat, S_MLA_LAT, vt_row_size(VT_F32, R * (r + rope)));
    SCRATCH(float, cn, S_MLA_CN, vt_row_size(VT_F32, R * r));
    SCRATCH(float, kv, S_MLA_KV, vt_row_size(VT_F32, R * Nh * (nope + dv)));
    SCRATCH(float, o, S_MLA_O, vt_row_size(VT_F32, R * vw));
    SCRATCH(float, sc, S_MLA_SCORES, vt_row_size(VT_F32, Nh * T * Tall));

    TRY(cu_gemm_xwT(c, x, R, D, &w->mq, q, err));
    TRY(cu_act_round(c, q, R * kw, err));
    TRY(cu_gemm_xwT(c, x, R, D, &w->kva, lat, err));
    TRY(cu_act_round(c, lat, R * (r + rope), err));
    TRY(cu_rmsnorm(c, lat, r + rope, R, r, w->kvnorm, eps, cn, r, err));   /* c_kv: the first r of each latent row */
    TRY(cu_gemm_xwT(c, cn, R, r, &w->kvb, kv, err));
    TRY(cu_act_round(c, kv, R * Nh * (nope + dv), err));

    /* append expanded keys and values to the cache */
    const int64_t cap = c->cap[layer];
    mla_append_kernel<<<cu_blocks(R * kw), CU_THREADS>>>(kv, lat, c->kc[layer], c->vc[layer], B, T, p0, cap, Nh, nope,
                                                         rope, dv, r);
    LAUNCH_CHECK();

    /* causal softmax attention per sequence, batched over heads */
    const float scale = 1.0f / sqrtf((float)qk), one = 1.0f, zero = 0.0f;
    for (int64_t b = 0; b < B; b++) {
        const float *kcb = c->kc[layer] + b * cap * kw, *vcb = c->vc[layer] + b * cap * vw;
        const float *qb = q + b * T * kw;
        float *ob = o + b * T * vw;
        /* sc[h][t][j] = scale * sum_i q[t, h, i] kc[j, h, i]  (col-major: Tall x T per head) */
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Tall, (int)T, (int)qk, &scale,
                                                kcb, CUDA_R_32F, (int)kw, (long long)qk, qb, CUDA_R_32F, (int)kw,
                                                (long long)qk, &zero, sc, CUDA_R_32F, (int)Tall, (long long)(T * Tall),
                                                (int)Nh, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
        /* at least one block: Nh * T = 0 would be an invalid (zero-sized) launch */
        softmax_causal_kernel<<<(unsigned)(Nh * T < 1 ? 1 : Nh * T < 65535 * 16 ? Nh * T : 65535 * 16), 128>>>(
            sc, Nh * T, T, Tall, p0);
        LAUNCH_CHECK();
        /* o[t, h, i] = sum_j p[h][t][j] vc[j, h, i]  (col-major: dv x T per head, ldc = vw) */
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)dv, (int)T, (int)Tall, &one,
                                                vcb, CUDA_R_32F, (int)vw, (long long)dv, sc, CUDA_R_32F, (int)Tall,
                                                (long long)(T * Tall), &zero, ob, CUDA_R_32F, (int)vw, (long long)dv,
                                                (int)Nh, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    }
    c->flops += 2.0 * (double)B * (double)Nh * (double)T * (double)Tall * (double)(qk + dv);
    c->bytes += (double)B * (double)vt_row_size(VT_F32, Tall * (kw + vw));
    TRY(cu_act_round(c, o, R * vw, err));
    TRY(cu_gemm_xwT(c, o, R, vw, &w->mo, out, err));
    TRY(cu_act_round(c, out, R * D, err));
    return VT_OK;
}
