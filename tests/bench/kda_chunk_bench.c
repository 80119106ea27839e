/*
 * kda_chunk_bench.c — the KDA delta-rule core, token loop vs chunked form
 * (model/kda_chunk.h). Built by `make build/kda_chunk_bench`; not part of
 * `make test`.
 *
 *   build/kda_chunk_bench [ROUNDS]     (default 5)
 *
 * For T = 256 and 4096, H = 8, d = 128 (the small config's KDA shape) at 1 and
 * 2 threads it prints the median over ROUNDS interleaved rounds of:
 *   rec    vt_kda_recurrent (kda.c's loop)
 *   chunk  vt_kda_chunked with the gemm.h products (whatever gemm.c has now)
 *   cblas  the same chunked code with its vt_sgemm_nn / vt_sgemm_nt calls
 *          replaced by single-threaded OpenBLAS cblas_sgemm (a preview of the
 *          chunked form on a fast GEMM; not the same bits as gemm.h)
 * and each one's time relative to rec. One process, the variants interleaved
 * within each round (in a rotating order), so drift on a shared machine hits
 * them alike.
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kda_chunk.h"

/* The chunked code a second time, with its products on OpenBLAS. */
#define vt_sgemm_nn bench_cblas_nn
#define vt_sgemm_nt bench_cblas_nt
#define vt_kda_recurrent bench_cblas_recurrent_unused
#define vt_kda_chunked bench_cblas_chunked
#define vt_kda_chunked_work_bytes bench_cblas_work_bytes
#include "model/kda_chunk.c"
#undef vt_sgemm_nn
#undef vt_sgemm_nt
#undef vt_kda_recurrent
#undef vt_kda_chunked
#undef vt_kda_chunked_work_bytes

void bench_cblas_nt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bm, int64_t ldb,
                    float *Cm, int64_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, Bm, (int)ldb,
                accumulate ? 1.0f : 0.0f, Cm, (int)ldc);
}
void bench_cblas_nn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bm, int64_t ldb,
                    float *Cm, int64_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, Bm, (int)ldb,
                accumulate ? 1.0f : 0.0f, Cm, (int)ldc);
}

static uint64_t rng = 88172645463325252ULL;
static float frand(void) {   /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) { fprintf(stderr, "usage: %s [ROUNDS >= 1]\n", argv[0]); return 2; }
    openblas_set_num_threads(1);
    const int64_t H = 8, d = 128, P = H * d;
    static const int64_t Ts[] = {256, 4096};
    printf("kda_chunk_bench: H=%lld d=%lld, chunk %d, sub-chunk %d, median of %d interleaved rounds (ms)\n",
           (long long)H, (long long)d, VT_KDA_CHUNK, VT_KDA_SUBCHUNK, rounds);
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        const int64_t T = Ts[ti];
        float *q = malloc(sizeof(float) * (size_t)(T * P)), *k = malloc(sizeof(float) * (size_t)(T * P));
        float *v = malloc(sizeof(float) * (size_t)(T * P)), *g = malloc(sizeof(float) * (size_t)(T * P));
        float *o = malloc(sizeof(float) * (size_t)(T * P)), *beta = malloc(sizeof(float) * (size_t)(T * H));
        float *S0 = malloc(sizeof(float) * (size_t)(H * d * d)), *S = malloc(sizeof(float) * (size_t)(H * d * d));
        if (!q || !k || !v || !g || !o || !beta || !S0 || !S) return 1;
        for (int64_t t = 0; t < T * H; t++) {
            float *qh = q + t * d, *kh = k + t * d, sq = 0, sk = 0;
            for (int64_t i = 0; i < d; i++) {
                qh[i] = frand(); kh[i] = frand(); sq += qh[i] * qh[i]; sk += kh[i] * kh[i];
                v[t * d + i] = frand(); g[t * d + i] = -0.5f * (frand() + 1.0f);
            }
            for (int64_t i = 0; i < d; i++) { qh[i] /= sqrtf(sq * (float)d); kh[i] /= sqrtf(sk); }
            beta[t] = 0.5f + 0.4f * frand();
        }
        for (int64_t i = 0; i < H * d * d; i++) S0[i] = 0.1f * frand();
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            const size_t wb = vt_kda_chunked_work_bytes(T, H, d, threads);
            float *w = malloc(wb);
            if (!w) return 1;
            double *ms[3];
            for (int m = 0; m < 3; m++) ms[m] = malloc(sizeof(double) * (size_t)rounds);
            for (int r = 0; r < rounds; r++)
                for (int step = 0; step < 3; step++) {
                    const int m = (r + step) % 3;
                    memcpy(S, S0, sizeof(float) * (size_t)(H * d * d));
                    const double t0 = omp_get_wtime();
                    if (m == 0) vt_kda_recurrent(T, H, d, q, k, v, g, beta, S, o, NULL);
                    else if (m == 1) { if (vt_kda_chunked(T, H, d, q, k, v, g, beta, S, o, w, wb)) return 1; }
                    else if (bench_cblas_chunked(T, H, d, q, k, v, g, beta, S, o, w, wb)) return 1;
                    ms[m][r] = 1e3 * (omp_get_wtime() - t0);
                }
            double med[3];
            for (int m = 0; m < 3; m++) {
                qsort(ms[m], (size_t)rounds, sizeof(double), cmp_double);
                med[m] = ms[m][rounds / 2];
                free(ms[m]);
            }
            printf("T=%5lld threads=%d  rec %9.2f   chunk(gemm.h %s) %9.2f (x%.2f)   chunk(cblas) %9.2f (x%.2f)\n",
                   (long long)T, threads, med[0], vt_gemm_isa(), med[1], med[1] / med[0], med[2], med[2] / med[0]);
            fflush(stdout);
            free(w);
        }
        free(q); free(k); free(v); free(g); free(o); free(beta); free(S0); free(S);
    }
    return 0;
}
