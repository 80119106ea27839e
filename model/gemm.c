/*
 * gemm.c — the matrix products of gemm.h: the reference implementation of the
 * per-element FMA chain. Fast kernels replace the loops below but must give
 * the same bits (tests/unit/test_gemm.c compares them with vt_gemm_ref_dot).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "gemm.h"

static inline float widen(const void *w, vt_dtype dt, int64_t i) {
    switch (dt) {
    case VT_BF16: return vt_bf16_to_f32(((const vt_bf16 *)w)[i]);
    case VT_F16: return vt_f16_to_f32(((const vt_f16 *)w)[i]);
    default: {
        float v;
        memcpy(&v, (const char *)w + (size_t)i * sizeof v, sizeof v);   /* mmapped f32 may be unaligned */
        return v;
    }
    }
}

__attribute__((target("fma"))) float vt_gemm_ref_dot(const float *x, const void *w, vt_dtype wdtype, int64_t K) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) acc = fmaf(x[k], widen(w, wdtype, k), acc);
    return acc;
}

const char *vt_gemm_isa(void) { return "scalar"; }

enum { COLS = 64 };   /* columns per work item */

void vt_gemm_batch(const vt_gemm_job *jobs, int64_t njobs) {
    int64_t ntiles = 0;
    for (int64_t j = 0; j < njobs; j++)
        if (jobs[j].M > 0) ntiles += (jobs[j].W->shape[0] + COLS - 1) / COLS;
    #pragma omp parallel for schedule(dynamic) if (ntiles > 1)
    for (int64_t t = 0; t < ntiles; t++) {
        int64_t j = 0, rem = t;
        for (;; j++) {
            if (jobs[j].M <= 0) continue;
            int64_t nt = (jobs[j].W->shape[0] + COLS - 1) / COLS;
            if (rem < nt) break;
            rem -= nt;
        }
        const vt_gemm_job *g = &jobs[j];
        const int64_t N = g->W->shape[0], K = g->W->shape[1], c0 = rem * COLS;
        const int64_t c1 = c0 + COLS < N ? c0 + COLS : N;
        const size_t wrow = vt_row_size(g->W->dtype, K);
        for (int64_t i = 0; i < g->M; i++)
            for (int64_t c = c0; c < c1; c++)
                g->y[i * g->ldy + c] =
                    vt_gemm_ref_dot(g->x + i * g->ldx, (const char *)g->W->data + (size_t)c * wrow, g->W->dtype, K);
    }
}

__attribute__((target("fma"))) void vt_sgemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                                const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(A[i * lda + k], B[j * ldb + k], acc);
            C[i * ldc + j] = acc;
        }
}

__attribute__((target("fma"))) void vt_sgemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                                const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(A[i * lda + k], B[k * ldb + j], acc);
            C[i * ldc + j] = acc;
        }
}
