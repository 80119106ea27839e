/*
 * attn_cblas_preview.c — linked into build/attn_bench_cblas only: vt_sgemm_nt
 * and vt_sgemm_nn as single-threaded OpenBLAS calls, in place of model/gemm.c's
 * reference loops, to preview how fast the blocked attention gets with fast
 * matrix kernels. Not the numeric contract of gemm.h (OpenBLAS sums in its own
 * order); timing only. attn_bench pulls nothing else from gemm.o, so these
 * definitions are the ones linked.
 */
#include <cblas.h>
#include <stdint.h>

const char *attn_bench_sgemm(void) { return "OpenBLAS cblas_sgemm, 1 thread per call (preview; not gemm.h's bits)"; }

/* OpenBLAS single-threaded before any parallel region calls it */
__attribute__((constructor)) static void one_thread(void) { openblas_set_num_threads(1); }

void vt_sgemm_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                 int64_t ldc, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb,
                accumulate ? 1.0f : 0.0f, C, (int)ldc);
}

void vt_sgemm_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                 int64_t ldc, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb,
                accumulate ? 1.0f : 0.0f, C, (int)ldc);
}
