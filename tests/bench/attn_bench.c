/*
 * attn_bench.c — `make build/attn_bench`: causal attention, the reference loop
 * (vt_attn_causal_ref, what mla.c runs) against the blocked form
 * (vt_attn_causal), on the small config's attention shape (8 heads, dqk 96,
 * dv 64; the 288M model): prefill T = 256, 1024, 4096 with p0 = 0, and one
 * decode step over a 4096-position cache, at 1 and 2 threads.
 *
 * Each row: median time of the reference and of the blocked call (repeats
 * interleaved, so machine noise hits both alike), their ratio, the time per
 * query token, and GFLOP/s (2 x (dqk+dv) x Nh multiply-adds per visible key).
 * Attention's work per token grows linearly with the context, so the time per
 * token must too; what must not happen is that the rate (GFLOP/s) falls as T
 * grows — that is the super-linear part.
 *
 *   build/attn_bench [REPS]    (REPS: timed repeats for T <= 1024, default 3;
 *                               T = 4096 gets max(1, REPS/3))
 *
 * The matrix products are model/gemm.c's vt_sgemm_nt / vt_sgemm_nn. A preview
 * with OpenBLAS in their place (what the fast kernels should roughly give):
 * `make build/attn_bench_cblas` (tests/bench/attn_cblas_preview.c).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attn.h"

/* the products' implementation, for the header line (attn_cblas_preview.c overrides it) */
__attribute__((weak)) const char *attn_bench_sgemm(void) { return "model/gemm.c vt_sgemm_nt/nn"; }

enum { NH = 8, DQK = 96, DV = 64 };

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1) { fprintf(stderr, "usage: attn_bench [REPS >= 1]\n"); return 2; }
    const int64_t cases[][2] = {{256, 0}, {1024, 0}, {4096, 0}, {1, 4096}};   /* {T, p0} */
    const int ncases = 4;
    const int64_t maxpos = 4097, ld_qk = NH * DQK, ld_v = NH * DV;
    float *q = malloc(sizeof(float) * (size_t)(4096 * ld_qk)), *kc = malloc(sizeof(float) * (size_t)(maxpos * ld_qk));
    float *vc = malloc(sizeof(float) * (size_t)(maxpos * ld_v));
    float *o1 = malloc(sizeof(float) * (size_t)(4096 * ld_v)), *o2 = malloc(sizeof(float) * (size_t)(4096 * ld_v));
    uint64_t st = 1;
    for (int64_t i = 0; i < 4096 * ld_qk; i++) { st = st * 6364136223846793005ULL + 1; q[i] = (float)((st >> 40) / 8388608.0 - 1.0); }
    for (int64_t i = 0; i < maxpos * ld_qk; i++) { st = st * 6364136223846793005ULL + 1; kc[i] = (float)((st >> 40) / 8388608.0 - 1.0); }
    for (int64_t i = 0; i < maxpos * ld_v; i++) { st = st * 6364136223846793005ULL + 1; vc[i] = (float)((st >> 40) / 8388608.0 - 1.0); }
    const float scale = 1.0f / sqrtf((float)DQK);

    printf("causal attention, Nh=%d dqk=%d dv=%d; products: %s; median of interleaved repeats\n", NH, DQK, DV,
           attn_bench_sgemm());
    printf("%-7s %-14s %11s %11s %7s %11s %11s %8s %8s %9s\n", "threads", "case", "ref ms", "blocked ms", "speedup",
           "ref ms/tok", "blk ms/tok", "ref GF/s", "blk GF/s", "max diff");
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int ci = 0; ci < ncases; ci++) {
            const int64_t T = cases[ci][0], p0 = cases[ci][1];
            const float *qq = T == 1 ? q + 4095 * ld_qk : q;   /* decode: some query row */
            /* decode is ~1000x cheaper than a prefill: time batches of calls */
            const int inner = T == 1 ? 20 : 1, nrep = T >= 4096 ? (reps / 3 > 1 ? reps / 3 : 1) : reps;
            size_t wb = vt_attn_causal_work_bytes(T, p0, NH, DQK, DV), rb = vt_attn_causal_ref_work_bytes(T, p0);
            float *work = malloc(wb), *scores = malloc(rb);
            double tr[64], tb[64];
            for (int r = 0; r < nrep && r < 64; r++) {
                double t0 = omp_get_wtime();
                for (int k = 0; k < inner; k++)
                    vt_attn_causal_ref(T, p0, NH, DQK, DV, scale, qq, ld_qk, kc, ld_qk, vc, ld_v, o1, ld_v, scores);
                double t1 = omp_get_wtime();
                for (int k = 0; k < inner; k++)
                    if (vt_attn_causal(T, p0, NH, DQK, DV, scale, qq, ld_qk, kc, ld_qk, vc, ld_v, o2, ld_v, work, wb)) {
                        fprintf(stderr, "attn_bench: vt_attn_causal failed\n");
                        return 1;
                    }
                double t2 = omp_get_wtime();
                tr[r] = (t1 - t0) / inner;
                tb[r] = (t2 - t1) / inner;
            }
            double mr = median(tr, nrep < 64 ? nrep : 64), mb = median(tb, nrep < 64 ? nrep : 64);
            double diff = 0, big = 0;
            for (int64_t i = 0; i < T * ld_v; i++) {
                if (fabs((double)o1[i] - o2[i]) > diff) diff = fabs((double)o1[i] - o2[i]);
                if (fabs((double)o1[i]) > big) big = fabs((double)o1[i]);
            }
            double keys = (double)T * (double)p0 + (double)T * (double)(T + 1) / 2;   /* visible (query, key) pairs */
            double flop = 2.0 * keys * NH * (DQK + DV);
            char name[32];
            if (T == 1) snprintf(name, sizeof name, "decode p0=%lld", (long long)p0);
            else snprintf(name, sizeof name, "prefill T=%lld", (long long)T);
            printf("%-7d %-14s %11.3f %11.3f %6.2fx %11.4f %11.4f %8.2f %8.2f %9.2g\n", threads, name, 1e3 * mr,
                   1e3 * mb, mr / mb, 1e3 * mr / T, 1e3 * mb / T, flop / mr / 1e9, flop / mb / 1e9, diff / big);
            fflush(stdout);
            free(work);
            free(scores);
        }
    }
    free(q); free(kc); free(vc); free(o1); free(o2);
    return 0;
}
