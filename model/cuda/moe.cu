/*
 * moe.cu — the dense SwiGLU MLP and the MoE block on the device; the mirror
 * of moe.c, step for step, with the same probes:
 *
 *   route    router GEMM, then one warp per token: sigmoid, + bias to choose,
 *            top-k with ties to the lower index, weights unbiased (or biased),
 *            renormalised in double, scaled — moe.c's arithmetic.
 *   sort     the chosen experts come back to the host (N*K ints), which sorts
 *            the (token, slot) pairs by expert with moe.c's stable counting
 *            sort and needs the per-expert row counts anyway: one cuBLAS GEMM
 *            chain per expert over its contiguous rows.
 *   gather   xg [N*K, D] f32 <- x rows (checked copy, row bytes from the buffers)
 *   experts  SwiGLU per expert -> yf [N*K, D] f32; an explicit convert to the
 *            expert dtype when VT_KIMI_BF16_EXPERT_OUT says so
 *   scatter  y -> expert_out at row t*K + k (checked copy), or the replayed
 *            defect (VT_FAULT=moe_scatter_row_bytes_from_stream)
 *   combine  out[t] = sum_k w[t,k] * expert_out[t*K+k] (+ shared expert)
 *
 * Audit mode sentinel-fills xg and expert_out on the device and counts the
 * rows left unwritten on the device, as moe.c does on the host.
 */
#include <climits>
#include <cmath>

#include "model/cuda/vtcuda.h"

#define CU_MAX_TOPK 64   /* num_experts_per_token bound (checked at session open) */

/* ================================================================ kernels */

/* One warp per token; see the banner. logits [N, E]; sel, wts [N, K]. */
__global__ void router_kernel(const float *logits, const float *bias, int64_t N, int E, int K, int biased, int renorm,
                              float scale, int *sel, float *wts) {
    const int64_t t = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (t >= N) return;   /* uniform across the warp */
    const float *lg = logits + t * E;
    int chosen[CU_MAX_TOPK];
    for (int k = 0; k < K; k++) {
        float bv = 0.0f;
        int be = -1;
        for (int e = lane; e < E; e += 32) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= chosen[j] == e;
            if (taken) continue;
            float v = cu_sigmoid(lg[e]) + bias[e];
            if (be < 0 || v > bv) { bv = v; be = e; }   /* ascending e: ties keep the lower index */
        }
        /* the warp's best: higher score, or equal score and lower index (a total order,
           so every lane ends with the same answer) */
        for (int off = 16; off > 0; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            int oe = __shfl_xor_sync(0xffffffffu, be, off);
            if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) { bv = ov; be = oe; }
        }
        chosen[k] = be;
    }
    if (lane == 0) {
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            int e = chosen[k];
            float sg = cu_sigmoid(lg[e]);
            float wk = biased ? sg + bias[e] : sg;
            wts[t * K + k] = wk;
            sum += wk;
        }
        for (int k = 0; k < K; k++) {
            float v = wts[t * K + k];
            if (renorm) v = (float)(v / (sum + 1e-20));
            wts[t * K + k] = v * scale;
            sel[t * K + k] = chosen[k];
        }
    }
}

/* out[t, i] = sum_k wts[t, k] * eo[t*K + k, i], eo f32 or bf16. */
__global__ void combine_kernel(float *out, const void *eo, int eo_bf16, const float *wts, int64_t N, int64_t K,
                               int64_t D) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * D; idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = idx / D, i = idx % D;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) acc += wts[t * K + k] * cu_load(eo, eo_bf16, (size_t)((t * K + k) * D + i));
        out[idx] = acc;
    }
}

/* ================================================================ launchers */

int cu_mlp_forward(vt_cuda *c, const cu_swiglu *w, const float *x, int64_t N, float *out, vt_err *err) {
    const int64_t D = w->gate.cols, I = w->gate.rows;
    SCRATCH(float, a, S_MLP_A, vt_row_size(VT_F32, N * I));
    SCRATCH(float, b, S_MLP_B, vt_row_size(VT_F32, N * I));
    TRY(cu_gemm_xwT(c, x, N, D, &w->gate, a, err));
    TRY(cu_gemm_xwT(c, x, N, D, &w->up, b, err));
    TRY(cu_swiglu_act(c, a, b, N * I, err));   /* rounds a and b first, then the product, as moe.c */
    TRY(cu_gemm_xwT(c, a, N, I, &w->down, out, err));
    TRY(cu_act_round(c, out, N * D, err));
    return VT_OK;
}

int cu_moe_forward(vt_cuda *c, int layer, const float *x, int64_t N, float *out, vt_moe_trace *trace, vt_err *err) {
    const vt_config *cfg = c->cfg;
    const cu_layer *w = &c->w->layers[layer];
    const int64_t D = cfg->hidden_size, E = cfg->num_experts, K = cfg->num_experts_per_token;
    const int64_t NK = N * K, Im = cfg->moe_intermediate_size;
    const int audit = c->k.probe == VT_PROBE_AUDIT;
    if (K > CU_MAX_TOPK || NK > INT_MAX)
        return vt_errf(err, VT_EUNSUPPORTED, "cuda moe: %lld tokens x top-%lld exceeds the device path's limits",
                       (long long)N, (long long)K);
    SCRATCH(float, logits, S_MOE_LOGITS, vt_row_size(VT_F32, N * E));
    SCRATCH(int, sel_d, S_MOE_SEL, vt_row_size(VT_I32, NK));
    SCRATCH(float, wts, S_MOE_WTS, vt_row_size(VT_F32, NK));
    SCRATCH(int, order_d, S_MOE_ORDER, vt_row_size(VT_I32, NK));
    SCRATCH(int, src_d, S_MOE_SRC, vt_row_size(VT_I32, NK));
    SCRATCH(float, xg, S_MOE_XG, vt_row_size(VT_F32, NK * D));
    SCRATCH(float, yf, S_MOE_YF, vt_row_size(VT_F32, NK * D));
    SCRATCH(void, eo, S_MOE_EO, vt_row_size(c->expert_dtype, NK * D));
    SCRATCH(float, a, S_MOE_A, vt_row_size(VT_F32, NK * Im));
    SCRATCH(float, b, S_MOE_B, vt_row_size(VT_F32, NK * Im));

    /* route */
    TRY(cu_gemm_xwT(c, x, N, D, &w->router, logits, err));
    if (N > 0) {   /* a grid of 0 blocks is an invalid launch configuration */
        /* as moe.c: renormalise with top-k > 1 (Moonshot's gate), or for every
         * top-k with VT_KIMI_ROUTER_RENORM=always (the transformers port) */
        router_kernel<<<(unsigned)((N + 3) / 4), 128>>>(logits, w->router_bias, N, (int)E, (int)K, c->k.router_biased,
                                                        cfg->moe_renormalize && (K > 1 || c->k.router_renorm_always),
                                                        (float)cfg->routed_scaling_factor, sel_d, wts);
        LAUNCH_CHECK();
    }

    /* sort pairs by expert on the host (counting sort, stable in p, as moe.c) */
    std::vector<int> sel((size_t)NK), order((size_t)NK), src((size_t)NK);
    std::vector<int64_t> count((size_t)E + 1, 0), fill((size_t)E);
    CUDA_CHECK(cudaMemcpy(sel.data(), sel_d, vt_row_size(VT_I32, NK), cudaMemcpyDeviceToHost));
    for (int64_t p = 0; p < NK; p++) {
        if (sel[p] < 0 || sel[p] >= E)
            return vt_errf(err, VT_EINTERNAL, "cuda moe layer %d: router chose expert %d of %lld (NaN scores?)", layer,
                           sel[p], (long long)E);
        count[sel[p] + 1]++;
    }
    for (int64_t e = 0; e < E; e++) count[e + 1] += count[e];
    for (int64_t e = 0; e < E; e++) fill[e] = count[e];
    for (int64_t p = 0; p < NK; p++) order[fill[sel[p]]++] = (int)p;
    for (int64_t i = 0; i < NK; i++) src[i] = (int)(order[i] / K);
    CUDA_CHECK(cudaMemcpy(order_d, order.data(), vt_row_size(VT_I32, NK), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(src_d, src.data(), vt_row_size(VT_I32, NK), cudaMemcpyHostToDevice));

    /* gather */
    vt_copy_stats st;
    cu_mat xt = {(void *)x, VT_F32, N, D}, xgm = {xg, VT_F32, NK, D}, yfm = {yf, VT_F32, NK, D};
    if (audit) TRY(cu_fill_sentinel(&xgm, err));
    TRY(cu_rows_gather(&xgm, &xt, src_d, src.data(), NK, &st, err));
    int64_t unwritten = -1;
    if (audit) TRY(cu_rows_unwritten(c, &xgm, &unwritten, err));
    cu_probe_copy(c, "moe.gather", layer, &st, 0, unwritten);

    /* experts: rows of expert e are [count[e], count[e+1]) */
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = count[e], n = count[e + 1] - count[e];
        if (n == 0) continue;
        cu_mat gate = cu_rows(&w->w1, e * Im, Im), up = cu_rows(&w->w3, e * Im, Im);
        TRY(cu_gemm_xwT(c, xg + r0 * D, n, D, &gate, a + r0 * Im, err));
        TRY(cu_gemm_xwT(c, xg + r0 * D, n, D, &up, b + r0 * Im, err));
    }
    TRY(cu_swiglu_act(c, a, b, NK * Im, err));
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = count[e], n = count[e + 1] - count[e];
        if (n == 0) continue;
        cu_mat down = cu_rows(&w->w2, e * D, D);
        TRY(cu_gemm_xwT(c, a + r0 * Im, n, Im, &down, yf + r0 * D, err));
    }
    TRY(cu_act_round(c, yf, NK * D, err));
    const cu_mat *y = &yfm;
    cu_mat ybm = {NULL, c->expert_dtype, NK, D};
    if (c->expert_dtype != VT_F32) {
        SCRATCH(void, yb, S_MOE_YB, vt_row_size(c->expert_dtype, NK * D));
        ybm.p = yb;
        TRY(cu_rows_convert(&ybm, &yfm, &st, err));
        y = &ybm;
    }
    cu_probe_buffer(c, "moe.expert.y", layer, y->dtype, NK, D);

    /* scatter */
    cu_mat eom = {eo, c->expert_dtype, NK, D};
    if (audit) TRY(cu_fill_sentinel(&eom, err));
    else if (c->k.fault == VT_FAULT_MOE_SCATTER_ROW_BYTES_FROM_STREAM)
        /* the defect leaves rows unwritten: on the CPU they hold vt_tensor_alloc's zeros, here the
           scratch slot would hold an earlier layer's (or uninitialised) data that combine reads */
        CUDA_CHECK(cudaMemset(eo, 0, cu_nbytes(&eom)));
    if (c->k.fault == VT_FAULT_MOE_SCATTER_ROW_BYTES_FROM_STREAM)
        TRY(cu_fault_scatter_rows(&eom, order_d, y, NK, c->stream_dtype, &st, err));
    else
        TRY(cu_rows_scatter(&eom, order_d, order.data(), y, NK, &st, err));
    unwritten = -1;
    if (audit) {
        TRY(cu_rows_unwritten(c, &eom, &unwritten, err));
        TRY(cu_clear_sentinel(&eom, err));
    }
    cu_probe_copy(c, "moe.scatter", layer, &st, 0, unwritten);

    /* combine: expert_out is read through an explicit conversion to f32 */
    combine_kernel<<<cu_blocks(N * D), CU_THREADS>>>(out, eo, eom.dtype == VT_BF16, wts, N, K, D);
    LAUNCH_CHECK();
    st.rows = NK;
    st.bytes_per_row = vt_row_size(VT_F32, D);
    st.src_row_bytes = cu_row_bytes(&eom);
    st.dst_row_bytes = vt_row_size(VT_F32, D);
    st.src_dtype = eom.dtype;
    st.dst_dtype = VT_F32;
    cu_probe_copy(c, "moe.combine", layer, &st, 1, -1);

    if (w->has_shared) {
        SCRATCH(float, sh, S_MOE_SH, vt_row_size(VT_F32, N * D));
        TRY(cu_mlp_forward(c, &w->shared, x, N, sh, err));
        TRY(cu_add_round(c, out, sh, N * D, err));
    } else {
        TRY(cu_add_round(c, out, NULL, N * D, err));
    }

    if (trace) {
        memset(trace, 0, sizeof *trace);
        trace->pair_token = (int64_t *)malloc((size_t)NK * sizeof(int64_t));
        trace->pair_expert = (int64_t *)malloc((size_t)NK * sizeof(int64_t));
        if (!trace->pair_token || !trace->pair_expert) return vt_errf(err, VT_ENOMEM, "moe trace");
        for (int64_t p = 0; p < NK; p++) { trace->pair_token[p] = p / K; trace->pair_expert[p] = sel[p]; }
        trace->rows_unwritten = unwritten;
        int64_t shp[2] = {NK, D};
        TRY(vt_tensor_alloc(&trace->expert_out, eom.dtype, 2, shp, err));
        CUDA_CHECK(cudaMemcpy(trace->expert_out.data, eo, trace->expert_out.nbytes, cudaMemcpyDeviceToHost));
    }
    return VT_OK;
}
