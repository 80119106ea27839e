/*
 * ops.c — the small numeric building blocks of the CPU forward pass: the one
 * GEMM entry point (OpenBLAS, timed so the benchmark can report the GEMM
 * share), RMSNorm, bf16 activation rounding and scalar activations.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "model.h"

/* One thread pool: OpenBLAS runs single-threaded (set in vt_session_new) and
 * a large GEMM is split over OpenMP threads by blocks of output columns (rows
 * of W). OpenBLAS's results depend on the shape it is given (its kernels
 * treat edges and small sizes differently: measured, a 33x1024x192 sgemm
 * split in two column halves differs from the whole in 10% of its outputs),
 * so the blocks are a fixed size, never "N / threads": the same GEMM is cut
 * the same way at any VT_THREADS, and the numbers do not depend on it. */
#define VT_GEMM_COL_BLOCK 128

void vt_gemm_xwT(vt_session *s, const float *x, int64_t M, int64_t K, const vt_tensor *W, float *y) {
    int64_t N = W->shape[0];
    double t0 = omp_get_wtime();
    if (N < 2 * VT_GEMM_COL_BLOCK || M * N * K < (int64_t)1 << 18) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K,
                    1.0f, x, (int)K, (const float *)W->data, (int)K, 0.0f, y, (int)N);
    } else {
        const int64_t nblk = (N + VT_GEMM_COL_BLOCK - 1) / VT_GEMM_COL_BLOCK;
        #pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t j0 = b * VT_GEMM_COL_BLOCK, nb = N - j0 < VT_GEMM_COL_BLOCK ? N - j0 : VT_GEMM_COL_BLOCK;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)nb, (int)K, 1.0f, x, (int)K,
                        (const float *)W->data + j0 * K, (int)K, 0.0f, y + j0, (int)N);
        }
    }
    s->gemm_sec += omp_get_wtime() - t0;
}

void vt_act_round(const vt_session *s, float *x, int64_t n) {
    if (!s->k.bf16_act) return;
    for (int64_t i = 0; i < n; i++) x[i] = vt_round_bf16(x[i]);
}

void vt_rmsnorm(vt_session *s, const float *x, int64_t M, int64_t n, const float *w, double eps, float *y) {
    int act = s->k.bf16_act;
    #pragma omp parallel for schedule(static) if (M > 16)
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (int64_t i = 0; i < n; i++) {
            float v = xr[i] * inv;
            if (act) v = vt_round_bf16(vt_round_bf16(v) * w[i]);
            else v = v * w[i];
            yr[i] = v;
        }
    }
}

float vt_silu(float x) { return x / (1.0f + expf(-x)); }
float vt_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float vt_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
