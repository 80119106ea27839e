/*
 * gemm_bench.c — `make bench` (and build/gemm_bench alone): the speed of
 * model/gemm.c against the machine's own references, measured in this
 * process, rounds interleaved so drift on a shared machine hits all alike.
 *
 * For 1 and 2 threads it prints
 *   - OpenBLAS cblas_sgemm on 1024^3 (x·Wᵀ layout): the peak to compare with;
 *   - vt_gemm_batch GFLOP/s on the prefill shapes of kimi-linear-small
 *     (M = 256 tokens) with f32 and bf16 weights, as rows and in panels
 *     (tensor.h; the model's default), and the ratio to that peak;
 *   - the decode GEMV (M = 1) in GB/s of weights read, from memory (enough
 *     copies of W to exceed 1 GiB, cycled), against a STREAM triad on
 *     3 x 512 MiB arrays, and the ratio; W 64-byte aligned and at +8 bytes
 *     (the safetensors layout), and once with W in L2;
 *   - the M threshold between the GEMV and the packed kernel (time per row).
 * Each figure: best and median over ROUNDS rounds; "ratio best" divides the
 * bests, "ratio med" the medians (a shared machine slows single rounds of
 * either side, so per-round ratios would mostly measure the noise).
 *
 *   build/gemm_bench [--rounds N] [--quick] [--only prefill|decode|threshold]
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_core.h"
#include "model/gemm.h"
#include "model/gemm_kernels.h"
#include "model/vt.h"

enum { MAXR = 15 };
static int ROUNDS = 5;
static double MIN_SEC = 0.08;   /* each timing repeats its call for at least this long */

static double now(void) { return omp_get_wtime(); }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(const double *v, int n) {
    double s[MAXR];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}
static double best(const double *v, int n) {
    double b = v[0];
    for (int i = 1; i < n; i++) b = v[i] > b ? v[i] : b;
    return b;
}

/* Seconds per call of fn(arg): one warm call, then repeats for MIN_SEC. */
static double time_call(void (*fn)(void *), void *arg) {
    fn(arg);
    int n = 0;
    double t0 = now(), t;
    do { fn(arg); n++; } while ((t = now() - t0) < MIN_SEC);
    return t / n;
}

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "gemm_bench: out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}
static void fill(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * (float)((int)(i % 17) - 8) / 8.0f;
}

/* ----------------------------------------------------------- references */

typedef struct { float *a, *b, *c; int n; } sg_arg;
static void run_sgemm(void *p) {
    sg_arg *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->n, s->n, s->n, 1, s->a, s->n, s->b, s->n, 0, s->c, s->n);
}

typedef struct { double *a, *b, *c; size_t n; } triad_arg;
static void run_triad(void *p) {
    triad_arg *t = p;
    double *restrict a = t->a, *restrict b = t->b, *restrict c = t->c;
    const size_t n = t->n;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
}

/* ------------------------------------------------------------- products */

typedef struct { vt_gemm_job *jobs; int64_t njobs; } batch_arg;
static void run_batch(void *p) { batch_arg *b = p; vt_gemm_batch(b->jobs, b->njobs); }

typedef struct shape {
    const char *name;
    int64_t njobs, K, N;         /* njobs products [M,K]x[K,N] sharing x */
    int moe;                     /* 1: 32 experts, M per expert from a fixed routing of 256 tokens x 4 */
} shape;

static const shape SHAPES[] = {
    {"sgemm-like 1024^3", 1, 1024, 1024, 0},
    {"q/k/v 3 x 1024x1024", 3, 1024, 1024, 0},
    {"o_proj 1024x1024", 1, 1024, 1024, 0},
    {"mlp gate/up 2 x 1024x2816", 2, 1024, 2816, 0},
    {"mlp down 2816x1024", 1, 2816, 1024, 0},
    {"lm_head 1024x32000", 1, 1024, 32000, 0},
    {"moe gate+up 32 x 2 x 1024x256", 64, 1024, 256, 1},
    {"moe down 32 x 256x1024", 32, 256, 1024, 1},
};
enum { NSHAPES = sizeof SHAPES / sizeof *SHAPES, TOKENS = 256 };

/* The rows each expert gets: 256 tokens x top-4 of 32, a fixed skewed routing. */
static int64_t moe_rows(int e) {
    static const int64_t r[32] = {70, 8, 31, 45, 12, 33, 27, 9,  52, 40, 18, 36, 22, 61, 14, 30,
                                  25, 48, 11, 29, 38, 16, 57, 24, 20, 43, 10, 35, 28, 19, 42, 44};
    return r[e];   /* sums to 1056 ~ 1024 rows */
}

typedef struct bench_case {
    vt_gemm_job jobs[64];
    vt_tensor   W[64];
    batch_arg   arg;
    double      flops;
} bench_case;

static void setup_case(bench_case *c, const shape *s, vt_dtype dt, int panel, float *x, float *y, void *wbuf) {
    c->flops = 0;
    for (int64_t j = 0; j < s->njobs; j++) {
        vt_tensor *W = &c->W[j];
        memset(W, 0, sizeof *W);
        W->dtype = dt; W->ndim = 2; W->shape[0] = s->N; W->shape[1] = s->K;
        W->panel = panel ? VT_PANEL : 0;   /* the same bytes read as panels (tensor.h; the model's default) */
        W->data = (char *)wbuf + (size_t)j * vt_row_size(dt, s->N * s->K);   /* every job its own W, as in the model */
        int64_t M = s->moe ? moe_rows((int)(j % 32)) : TOKENS;
        c->jobs[j] = (vt_gemm_job){x, s->K, M, W, y + (size_t)j * 70 * s->N * (s->moe ? 1 : 4), s->N};
        c->flops += 2.0 * (double)M * s->N * s->K;
    }
    c->arg = (batch_arg){c->jobs, s->njobs};
}

/* Widened copies of the same values: bf16 of f32 data (the bench needs speed, not values). */
static void to_bf16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) { uint32_t u; memcpy(&u, &src[i], 4); dst[i] = (uint16_t)(u >> 16); }
}

static void bench_prefill(int threads) {
    const size_t wmax = (size_t)32 * 1024 * 2816 > (size_t)32000 * 1024 ? (size_t)32 * 1024 * 2816 : (size_t)32000 * 1024;
    float *x = xalloc(sizeof(float) * 2816 * 256), *y = xalloc(sizeof(float) * 70 * 1024 * 64 * 4);
    float *w32 = xalloc(sizeof(float) * wmax);
    uint16_t *w16 = xalloc(2 * wmax);
    fill(x, 2816 * 256, 1.0f); fill(w32, wmax, 0.05f); to_bf16(w32, w16, wmax);
    sg_arg sg = {xalloc(4 << 22), xalloc(4 << 22), xalloc(4 << 22), 1024};
    fill(sg.a, 1 << 20, 1); fill(sg.b, 1 << 20, 1);
    /* W: f32 rows, bf16 rows, f32 panels, bf16 panels */
    enum { NW = 4 };
    static const char *wname[NW] = {"f32", "bf16", "f32 pan", "bf16 pan"};
    static bench_case cs[NSHAPES][NW];
    for (int s = 0; s < NSHAPES; s++)
        for (int d = 0; d < NW; d++)
            setup_case(&cs[s][d], &SHAPES[s], d % 2 ? VT_BF16 : VT_F32, d / 2, x, y, d % 2 ? (void *)w16 : (void *)w32);
    double peak[MAXR], gf[NSHAPES][NW][MAXR];
    for (int r = 0; r < ROUNDS; r++) {
        peak[r] = 2e-9 * 1024.0 * 1024 * 1024 / time_call(run_sgemm, &sg);
        for (int s = 0; s < NSHAPES; s++)
            for (int d = 0; d < NW; d++) {
                gf[s][d][r] = 1e-9 * cs[s][d].flops / time_call(run_batch, &cs[s][d].arg);
            }
    }
    printf("\n== prefill, %d thread%s: OpenBLAS sgemm 1024^3 peak %.1f GFLOP/s (best), %.1f (median)\n", threads,
           threads > 1 ? "s" : "", best(peak, ROUNDS), median(peak, ROUNDS));
    printf("   %-32s %8s %8s %8s %10s %9s\n", "shape (M=256 tokens)", "W", "GF best", "GF med", "ratio best", "ratio med");
    for (int s = 0; s < NSHAPES; s++)
        for (int d = 0; d < NW; d++)
            printf("   %-32s %8s %8.1f %8.1f %10.3f %9.3f\n", SHAPES[s].name, wname[d], best(gf[s][d], ROUNDS),
                   median(gf[s][d], ROUNDS), best(gf[s][d], ROUNDS) / best(peak, ROUNDS),
                   median(gf[s][d], ROUNDS) / median(peak, ROUNDS));
    free(x); free(y); free(w32); free(w16); free(sg.a); free(sg.b); free(sg.c);
}

/* ---------------------------------------------------------------- decode */

typedef struct gemv_case {
    vt_tensor  *W;       /* ncopy copies of one weight matrix, > 1 GiB together */
    int64_t     ncopy;
    const float *x;
    float       *y;
    double      bytes;   /* per pass over all copies */
} gemv_case;

static void run_gemv(void *p) {
    gemv_case *g = p;
    for (int64_t c = 0; c < g->ncopy; c++) {
        vt_gemm_job j = {g->x, g->W[c].shape[1], 1, &g->W[c], g->y, g->W[c].shape[0]};
        vt_gemm_batch(&j, 1);
    }
}

/* The decode shapes, each with f32 and bf16 W at two offsets: 64-byte
 * aligned, and +8 bytes, where a safetensors file puts its data (the header
 * length word plus a header padded to 8; vtlab synth writes the same), so that
 * every row starts 8 bytes into a cache line. The last shape again with one
 * copy of W read over and over (f32 1 MiB, bf16 512 KiB): W in L2, where the
 * GEMV is bound by its shuffles, not by memory. */
enum { NDEC = 4, NOFF = 3 };
static const size_t DEC_OFF[NOFF] = {0, 8, 8};
static const int DEC_PANEL[NOFF] = {0, 0, 1};   /* W in panels (tensor.h; the model's default) */

static void bench_decode(int threads, char *pool, size_t pool_bytes, triad_arg *tr) {
    static const int64_t NK[NDEC][2] = {{32000, 1024}, {1024, 1024}, {256, 1024}, {256, 1024}};
    float *x = xalloc(sizeof(float) * 1024), *y = xalloc(sizeof(float) * 32000);
    fill(x, 1024, 1.0f);
    gemv_case gc[NDEC][2][NOFF];
    for (int s = 0; s < NDEC; s++)
        for (int d = 0; d < 2; d++)
            for (int o = 0; o < NOFF; o++) {
                const vt_dtype dt = d ? VT_BF16 : VT_F32;
                const size_t one = vt_row_size(dt, NK[s][0] * NK[s][1]);
                gemv_case *g = &gc[s][d][o];
                g->ncopy = s == NDEC - 1 ? 1 : (int64_t)((pool_bytes - DEC_OFF[o]) / one);
                g->W = calloc((size_t)g->ncopy, sizeof(vt_tensor));
                for (int64_t c = 0; c < g->ncopy; c++) {
                    g->W[c].dtype = dt; g->W[c].ndim = 2; g->W[c].shape[0] = NK[s][0]; g->W[c].shape[1] = NK[s][1];
                    g->W[c].data = pool + DEC_OFF[o] + (size_t)c * one;
                    g->W[c].panel = DEC_PANEL[o] ? VT_PANEL : 0;   /* the same bytes read as panels */
                }
                g->x = x; g->y = y; g->bytes = (double)one * g->ncopy;
            }
    double triad[MAXR], gbs[NDEC][2][NOFF][MAXR];
    for (int r = 0; r < ROUNDS; r++) {
        triad[r] = 1e-9 * 3.0 * sizeof(double) * (double)tr->n / time_call(run_triad, tr);
        for (int s = 0; s < NDEC; s++)
            for (int d = 0; d < 2; d++)
                for (int o = 0; o < NOFF; o++) gbs[s][d][o][r] = 1e-9 * gc[s][d][o].bytes / time_call(run_gemv, &gc[s][d][o]);
    }
    printf("\n== decode GEMV (M=1, W from memory), %d thread%s: STREAM triad %.1f GB/s (best), %.1f (median)\n",
           threads, threads > 1 ? "s" : "", best(triad, ROUNDS), median(triad, ROUNDS));
    printf("   %-20s %6s %9s %8s %8s %10s %9s\n", "N x K", "W", "W off", "GB/s max", "GB/s med", "ratio best", "ratio med");
    for (int s = 0; s < NDEC; s++)
        for (int d = 0; d < 2; d++)
            for (int o = 0; o < NOFF; o++) {
                char nm[32];
                snprintf(nm, sizeof nm, "%lld x %lld%s", (long long)NK[s][0], (long long)NK[s][1],
                         s == NDEC - 1 ? " in L2" : "");
                char off[16];
                snprintf(off, sizeof off, "%zu%s", DEC_OFF[o], DEC_PANEL[o] ? " panel" : "");
                printf("   %-20s %6s %9s %8.1f %8.1f %10.3f %9.3f\n", nm, d ? "bf16" : "f32", off,
                       best(gbs[s][d][o], ROUNDS), median(gbs[s][d][o], ROUNDS),
                       best(gbs[s][d][o], ROUNDS) / best(triad, ROUNDS), median(gbs[s][d][o], ROUNDS) / median(triad, ROUNDS));
                free(gc[s][d][o].W);
            }
    free(x); free(y);
}

/* ------------------------------------------------------ GEMV vs packed by M */

typedef struct { vt_gemm_args a; int64_t M, N; int gemv; } kern_arg;
static void run_kernel(void *p) {
    kern_arg *k = p;
    if (k->gemv) vt_gemm512_gemv(&k->a, 0, k->M, 0, k->N, NULL);
    else vt_gemm512_block(&k->a, 0, k->M, 0, k->N);
}

/* One thread, N=1024 K=1024 f32 and bf16 (W in L3): microseconds per call of
 * each kernel for M = 1..8 (the GEMV handles M <= VT_GEMV_MAX_ROWS only). */
static void bench_threshold(char *pool) {
    float *x = xalloc(sizeof(float) * 8 * 1024), *y = xalloc(sizeof(float) * 8 * 1024);
    fill(x, 8 * 1024, 1);
    printf("\n== GEMV vs packed micro-kernel, 1 thread, N=K=1024 (us per call, best of %d)\n", ROUNDS);
    printf("   %-4s %10s %10s %10s %10s\n", "M", "gemv f32", "block f32", "gemv bf16", "block bf16");
    for (int64_t M = 1; M <= 8; M++) {
        double t[2][2];
        for (int d = 0; d < 2; d++)
            for (int gv = 0; gv < 2; gv++) {
                kern_arg k = {{x, 1024, pool, vt_row_size(d ? VT_BF16 : VT_F32, 1024), d ? VT_BF16 : VT_F32, 1024, y,
                               1024, 0, 1, 0, NULL, 0, NULL, 0, 0}, M, 1024, gv};
                double b = 1e30;
                for (int r = 0; r < ROUNDS; r++) {
                    double s = (gv && M > VT_GEMV_MAX_ROWS) ? 0 : time_call(run_kernel, &k);
                    b = s < b ? s : b;
                }
                t[d][gv ? 0 : 1] = b * 1e6;
            }
        printf("   %-4lld %10.1f %10.1f %10.1f %10.1f\n", (long long)M, t[0][0], t[0][1], t[1][0], t[1][1]);
    }
    free(x); free(y);
}

int main(int argc, char **argv) {
    vt_openmp_wait_passively(argv);   /* as vtlab does: idle threads sleep */
    bench_blas_best_core(argv);       /* the peak with OpenBLAS's AVX-512 kernels where the CPU has them */
    int quick = 0;
    const char *only = "";   /* --only prefill|decode|threshold: one part (while tuning) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) ROUNDS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
    }
    if (ROUNDS < 1) ROUNDS = 1;
    if (ROUNDS > MAXR) ROUNDS = MAXR;
    if (quick) MIN_SEC = 0.03;
    char blas[256];
    bench_blas_describe(blas, sizeof blas);
    printf("gemm_bench: kernels %s, %d rounds interleaved; the peak: %s\n", vt_gemm_isa(), ROUNDS, blas);
    const size_t arr = (size_t)512 << 20, pool_bytes = (size_t)1 << 30;
    triad_arg tr = {xalloc(arr), xalloc(arr), xalloc(arr), arr / sizeof(double)};
    char *pool = xalloc(pool_bytes);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < tr.n; i++) { tr.a[i] = 0; tr.b[i] = 1; tr.c[i] = 2; }   /* first touch */
    fill((float *)pool, pool_bytes / 4, 0.05f);   /* as bf16 pairs these are small normal numbers too */
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
        if (!*only || !strcmp(only, "prefill")) bench_prefill(threads);
        if (!*only || !strcmp(only, "decode")) bench_decode(threads, pool, pool_bytes, &tr);
    }
    omp_set_num_threads(1);
    if (!strcmp(vt_gemm_isa(), "avx512") && (!*only || !strcmp(only, "threshold"))) bench_threshold(pool);
    free(tr.a); free(tr.b); free(tr.c); free(pool);
    return 0;
}
