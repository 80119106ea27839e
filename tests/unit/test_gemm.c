/* test_gemm.c — every GEMM path gives the bits of the reference chain of
 * gemm.h (vt_gemm_ref_dot): the AVX-512 micro-kernel and GEMV, the scalar
 * fallback, any thread count, any split, every remainder of M, N and K,
 * unaligned W and x, padded ldx/ldy, bf16 and f16 weights, accumulate = 1.
 * The data mixes magnitudes over 2^-12..2^12, so a reassociated sum differs
 * (test_data_detects_reassociation proves it; make mutation builds a kernel
 * that splits K in two partial sums and this test must go red). */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <omp.h>

#include "model/gemm.h"
#include "model/gemm_kernels.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
/* +-(1 + u) * 2^e, e in [-12, 12]: representable in f16 and bf16 after rounding. */
static float mixed(void) {
    float u = (float)(rng() & 0xFFFFFF) / 16777216.0f;
    int e = (int)(rng() % 25) - 12;
    return ldexpf((rng() & 1) ? -(1.0f + u) : (1.0f + u), e);
}

static const vt_dtype DTYPES[3] = {VT_F32, VT_BF16, VT_F16};

/* Under AddressSanitizer (make sanitize) the scalar reference runs ~30x
 * slower: the grids keep every remainder class of M, N and K but drop the
 * products above a smaller size (125 s -> a few seconds). The full grids run
 * in the plain build (make test). */
#if defined(__SANITIZE_ADDRESS__)
#define VT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VT_TEST_SANITIZED 1
#endif
#endif
#ifdef VT_TEST_SANITIZED
enum { BATCH_CAP = 200000, SGEMM_CAP = 100000, SANITIZED = 1 };
#else
enum { BATCH_CAP = 4000000, SGEMM_CAP = 2000000, SANITIZED = 0 };
#endif

/* A weight matrix [N][K] in dt, one element past a malloc'd (aligned) start. */
typedef struct wmat { char *base; vt_tensor t; } wmat;
static wmat make_w(vt_dtype dt, int64_t N, int64_t K) {
    wmat m;
    size_t es = vt_dtype_size(dt), n = (size_t)(N * K);
    m.base = malloc((n + 1) * es + 64);
    assert_non_null(m.base);
    memset(&m.t, 0, sizeof m.t);
    m.t.dtype = dt; m.t.ndim = 2; m.t.shape[0] = N; m.t.shape[1] = K;
    m.t.stride[1] = es; m.t.stride[0] = es * (size_t)K; m.t.nbytes = es * n;
    m.t.data = m.base + es;                    /* unaligned by one element */
    for (size_t i = 0; i < n; i++) {
        float v = mixed();
        char *p = (char *)m.t.data + i * es;
        if (dt == VT_F32) memcpy(p, &v, 4);
        else if (dt == VT_BF16) { vt_bf16 h = vt_f32_to_bf16(v); memcpy(p, &h, 2); }
        else { vt_f16 h = vt_f32_to_f16(v); memcpy(p, &h, 2); }
    }
    return m;
}
static float wval(const vt_tensor *W, int64_t j, int64_t k) {
    const char *p = (const char *)W->data + (size_t)(j * W->shape[1] + k) * vt_dtype_size(W->dtype);
    if (W->dtype == VT_F32) { float v; memcpy(&v, p, 4); return v; }
    uint16_t b; memcpy(&b, p, 2);
    return W->dtype == VT_BF16 ? vt_bf16_to_f32((vt_bf16){b}) : vt_f16_to_f32((vt_f16){b});
}

/* x [M][ldx] one float past an aligned start, filled (padding too). */
static float *make_x(int64_t M, int64_t ldx, float **base) {
    *base = malloc((size_t)(M * ldx + 1) * sizeof(float) + 64);
    assert_non_null(*base);
    for (int64_t i = 0; i < M * ldx + 1; i++) (*base)[i] = mixed();
    return *base + 1;
}

static void expect_equal(const float *got, const float *want, int64_t M, int64_t N, int64_t ld, const char *what) {
    for (int64_t i = 0; i < M; i++)
        if (memcmp(got + i * ld, want + i * ld, (size_t)N * sizeof(float)) != 0)
            for (int64_t j = 0; j < N; j++)
                if (memcmp(&got[i * ld + j], &want[i * ld + j], 4) != 0)
                    fail_msg("%s: y[%lld][%lld] = %a, reference %a", what, (long long)i, (long long)j,
                             got[i * ld + j], want[i * ld + j]);
}

/* The reference of one job, through vt_gemm_ref_dot. */
static void ref_job(const vt_gemm_job *g, float *y) {
    const int64_t N = g->W->shape[0], K = g->W->shape[1];
    const size_t row = vt_row_size(g->W->dtype, K);
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < N; j++)
            y[i * g->ldy + j] = vt_gemm_ref_dot(g->x + i * g->ldx, (const char *)g->W->data + (size_t)j * row,
                                                g->W->dtype, K);
}

/* One job of shape M x N x K in dt: the batch with 1 and 2 threads, and the
 * forced scalar fallback, all equal to the reference, padding untouched. */
static void check_one(vt_dtype dt, int64_t M, int64_t N, int64_t K) {
    const int64_t ldx = K + 3, ldy = N + 5;
    float *xb, *x = make_x(M, ldx, &xb);
    wmat w = make_w(dt, N, K);
    size_t ny = (size_t)(M * ldy + 1);
    float *want = malloc(ny * 4), *got = malloc(ny * 4);
    for (size_t i = 0; i < ny; i++) want[i] = got[i] = -7.0f;   /* padding sentinel */
    vt_gemm_job g = {x, ldx, M, &w.t, want, ldy};
    ref_job(&g, want);
    /* the same W in panels (tensor.h), still one element off alignment */
    wmat wp = w;
    wp.base = malloc(w.t.nbytes + 64);
    assert_non_null(wp.base);
    wp.t.data = wp.base + vt_dtype_size(dt);
    memcpy(wp.t.data, w.t.data, w.t.nbytes);
    vt_err err = {0};
    VT_ASSERT_OK(vt_tensor_panelize(&wp.t, &err), err);
    assert_int_equal(wp.t.panel, VT_PANEL);
    const char *isas[3] = {"avx512", "avx2", "scalar"}, *was = vt_gemm_isa();
    for (int lay = 0; lay < 2; lay++)
        for (int s = 0; s < 3; s++) {
            if (vt_gemm_force_isa(isas[s]) != 0) continue;
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                for (size_t i = 0; i < ny; i++) got[i] = -7.0f;
                g.y = got;
                g.W = lay ? &wp.t : &w.t;
                vt_gemm_batch(&g, 1);
                char what[128];
                snprintf(what, sizeof what, "%s %s%s M=%lld N=%lld K=%lld threads=%d", isas[s], vt_dtype_name(dt),
                         lay ? " panels" : "", (long long)M, (long long)N, (long long)K, th);
                expect_equal(got, want, M, ldy, ldy, what);   /* the whole row: padding must stay -7 */
            }
        }
    vt_gemm_force_isa(was);
    free(xb); free(w.base); free(wp.base); free(want); free(got);
}

static void test_batch_every_remainder(void **state) {
    (void)state;
    /* every kernel: the GEMV (1..4 rows), the broadcast kernel for f32 (5..64:
     * 1, 2, 3 and 4 vectors of rows) and the packed one (bf16, f16, 65 on) */
    const int64_t Ms[] = {1, 2, 3, 5, 8, 13, 31, 47, 64, 65, 257};
    const int64_t Ns[] = {1, 15, 16, 17, 33, 64, 100, 1024};   /* panels: none, 1 + a tail, 2 exact, ... */
    const int64_t Ks[] = {1, 7, 16, 100, 1029};
    for (int d = 0; d < 3; d++)
        for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
            for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
                    int64_t M = Ms[a], N = Ns[b], K = Ks[c];
                    if (M * N * K > BATCH_CAP && (SANITIZED || !(M == 257 && N == 100 && K == 1029))) continue;   /* keep it quick */
                    check_one(DTYPES[d], M, N, K);
                }
}

/* The big shapes once each: several K blocks, many panels, row splits. */
static void test_batch_large(void **state) {
    (void)state;
#ifndef VT_TEST_SANITIZED
    check_one(VT_F32, 257, 1024, 1029);
    check_one(VT_F16, 13, 1024, 1029);
    check_one(VT_BF16, 64, 1024, 1029);
#else
    check_one(VT_F32, 31, 300, 1029);   /* several K blocks and panels, row blocks, at a size ASan can afford */
#endif
    check_one(VT_BF16, 3, 1024, 1029);
}

/* A MoE-like batch: many jobs sharing x, M from 0 to 70, mixed dtypes, one
 * parallel region; any thread count gives the reference bits. */
static void test_batch_many_jobs(void **state) {
    (void)state;
    enum { NJ = 20, K = 300, LDX = 310 };
    const int64_t Ms[NJ] = {0, 1, 2, 4, 5, 8, 12, 13, 24, 0, 31, 3, 64, 70, 9, 1, 0, 17, 40, 6};
    float *xb, *x = make_x(70, LDX, &xb);
    wmat w[NJ];
    vt_gemm_job jobs[NJ];
    float *want[NJ], *got[NJ];
    for (int j = 0; j < NJ; j++) {
        const int64_t N = j % 3 == 0 ? 256 : j % 3 == 1 ? 100 : 33;
        w[j] = make_w(DTYPES[j % 3], N, K);
        want[j] = calloc((size_t)(Ms[j] * N + 1), 4);
        got[j] = calloc((size_t)(Ms[j] * N + 1), 4);
        jobs[j] = (vt_gemm_job){x + (j % 4), LDX, Ms[j], &w[j].t, want[j], N};   /* shared, shifted x */
        ref_job(&jobs[j], want[j]);
        if (j % 2) {   /* every other W in panels (tensor.h) */
            vt_err err = {0};
            VT_ASSERT_OK(vt_tensor_panelize(&w[j].t, &err), err);
        }
        jobs[j].y = got[j];
    }
    /* 1 to 3 threads; then 4 asked for inside a region of 2 threads, where
     * each call gets a team of one (nested regions are inactive): its thread
     * runs its own range of tiles and takes the other three from their backs
     * (gemm.c's run_ranges), while the other outer thread does the same on a
     * copy. NaN-filled outputs: a tile run by nobody stays NaN. */
    float *got2[NJ];
    for (int j = 0; j < NJ; j++) got2[j] = calloc((size_t)(Ms[j] * jobs[j].W->shape[0] + 1), 4);
    for (int th = 1; th <= 4; th++) {
        for (int j = 0; j < NJ; j++)
            for (int64_t i = 0; i < Ms[j] * jobs[j].W->shape[0]; i++) got[j][i] = got2[j][i] = NAN;
        omp_set_num_threads(th);
        if (th < 4) vt_gemm_batch(jobs, NJ);
        else {
            vt_gemm_job jobs2[NJ];
            memcpy(jobs2, jobs, sizeof jobs2);
            for (int j = 0; j < NJ; j++) jobs2[j].y = got2[j];
            #pragma omp parallel num_threads(2)
            {
                assert_int_equal(omp_get_max_threads(), 4);
                vt_gemm_batch(omp_get_thread_num() ? jobs2 : jobs, NJ);
            }
            for (int j = 0; j < NJ; j++)
                expect_equal(got2[j], want[j], Ms[j], w[j].t.shape[0], w[j].t.shape[0], "many jobs, stolen tiles");
        }
        for (int j = 0; j < NJ; j++) expect_equal(got[j], want[j], Ms[j], w[j].t.shape[0], w[j].t.shape[0], "many jobs");
    }
    for (int j = 0; j < NJ; j++) free(got2[j]);
    vt_gemm_batch(jobs, 0);   /* no jobs: nothing to do */
    for (int j = 0; j < NJ; j++) { free(w[j].base); free(want[j]); free(got[j]); }
    free(xb);
}

/* vt_gemm_step: a step of batches, each checked against the reference, with
 * serial work between them (one stretch long enough that the waiting
 * threads yield), a parallel region opened by the step (runs on its thread),
 * a step inside the step (runs as a plain call), and the step's value. */
typedef struct step_case {
    vt_gemm_job jobs[3];
    float *want[3];
    int fails, inner_threads, nested_ran;
} step_case;

static int nested_step(void *p) { ((step_case *)p)->nested_ran = 1; return 5; }

static int step_fn(void *p) {
    step_case *c = p;
    for (int round = 0; round < 3; round++) {
        for (int j = 0; j < 3; j++)
            for (int64_t i = 0; i < c->jobs[j].M * c->jobs[j].W->shape[0]; i++) c->jobs[j].y[i] = NAN;
        vt_gemm_batch(c->jobs, 3);
        for (int j = 0; j < 3; j++)
            if (memcmp(c->jobs[j].y, c->want[j], (size_t)(c->jobs[j].M * c->jobs[j].W->shape[0]) * sizeof(float)))
                c->fails++;
        if (round == 1) {   /* a serial stretch past the spinning budget: the others yield, then resume */
            const double t0 = omp_get_wtime();
            while (omp_get_wtime() - t0 < 0.003) {}
        }
    }
    #pragma omp parallel
    {
        #pragma omp single
        c->inner_threads = omp_get_num_threads();
    }
    if (vt_gemm_step(2, nested_step, c) != 5) c->fails++;
    return 42;
}

static void test_gemm_step(void **state) {
    (void)state;
    enum { K = 1024 };
    const int64_t Ns[3] = {1024, 700, 33}, Ms[3] = {1, 2, 1};   /* two products big enough to run in parallel */
    float *xb, *x = make_x(2, K, &xb);
    wmat w[3];
    step_case c = {0};
    for (int j = 0; j < 3; j++) {
        w[j] = make_w(DTYPES[j], Ns[j], K);
        c.want[j] = calloc((size_t)(Ms[j] * Ns[j]), sizeof(float));
        float *y = calloc((size_t)(Ms[j] * Ns[j]), sizeof(float));
        c.jobs[j] = (vt_gemm_job){x, K, Ms[j], &w[j].t, c.want[j], Ns[j]};
        ref_job(&c.jobs[j], c.want[j]);
        c.jobs[j].y = y;
    }
    const int saved = omp_get_max_threads();
    for (int th = 1; th <= 4; th++) {
        c.fails = 0, c.inner_threads = 0, c.nested_ran = 0;
        assert_int_equal(vt_gemm_step(th, step_fn, &c), 42);
        if (c.fails) fail_msg("vt_gemm_step with %d threads: %d products not the reference's bits", th, c.fails);
        if (th > 1) assert_int_equal(c.inner_threads, 1);   /* nested in the step's team */
        assert_int_equal(c.nested_ran, 1);
    }
    omp_set_num_threads(saved);
    for (int j = 0; j < 3; j++) { free(w[j].base); free(c.want[j]); free(c.jobs[j].y); }
    free(xb);
}

/* vt_par_for (gemm.h): every index runs exactly once; the thread number it
 * gets is below max_threads and held by no other index running at the same
 * time (a slot taken twice at once is counted); on a step's team the loop
 * runs on more than one thread (index 0 waits, under a generous hang guard,
 * until another thread has run an index); below VT_STEP_MIN_WORK, with
 * max_threads under the team, or from inside a task, it runs on the calling
 * thread as thread 0; a task's own product (vt_gemm_batch) gives the
 * reference's bits. */
enum { PF_N = 64, PF_SLOTS = 8 };
typedef struct par_case {
    int runs[PF_N];
    int busy[PF_SLOTS];           /* 1 while a task holds the slot */
    int clash, bad_thread, max_threads, nested_bad, product_bad, wait;
    int64_t other_thread_ran;     /* an index ran on a thread other than the caller's */
    const vt_gemm_job *job;
    const float *want;
    float *y;
} par_case;

static void par_nested(void *p, int64_t i, int thread) {
    par_case *c = p;
    if (thread != 0) c->nested_bad++;
    (void)i;
}

static void par_task(void *p, int64_t i, int thread) {
    par_case *c = p;
    __atomic_add_fetch(&c->runs[i], 1, __ATOMIC_RELAXED);
    if (thread < 0 || thread >= c->max_threads || thread >= PF_SLOTS) { __atomic_add_fetch(&c->bad_thread, 1, __ATOMIC_RELAXED); return; }
    if (__atomic_exchange_n(&c->busy[thread], 1, __ATOMIC_ACQ_REL)) __atomic_add_fetch(&c->clash, 1, __ATOMIC_RELAXED);
    if (omp_get_thread_num() != 0) __atomic_store_n(&c->other_thread_ran, 1, __ATOMIC_RELEASE);
    if (i == 0 && c->wait) {   /* until another thread has run an index: the loop is on the team */
        const double t0 = omp_get_wtime();
        while (!__atomic_load_n(&c->other_thread_ran, __ATOMIC_ACQUIRE) && omp_get_wtime() - t0 < 30.0) {}
    }
    if (i == 1) {   /* a loop and a product inside a task run on this thread */
        int nested[PF_N] = {0};
        (void)nested;
        vt_par_for(PF_N, INT64_MAX, 64, par_nested, c);
        if (c->job && thread == 0 && omp_get_thread_num() == 0) {
            vt_gemm_batch(c->job, 1);
            if (memcmp(c->y, c->want, sizeof(float) * (size_t)c->job->W->shape[0])) c->product_bad++;
        }
    }
    for (volatile int spin = 0; spin < 2000; spin++) {}   /* long enough for tasks to overlap */
    __atomic_store_n(&c->busy[thread], 0, __ATOMIC_RELEASE);
}

static void par_check(par_case *c, const char *what) {
    for (int i = 0; i < PF_N; i++)
        if (c->runs[i] != 1) fail_msg("%s: index %d ran %d times", what, i, c->runs[i]);
    if (c->clash || c->bad_thread || c->nested_bad || c->product_bad)
        fail_msg("%s: %d slot clashes, %d thread numbers out of range, %d nested calls off the calling thread, "
                 "%d products not the reference's bits", what, c->clash, c->bad_thread, c->nested_bad, c->product_bad);
}

typedef struct par_step { par_case *c; int64_t work; int max_threads; } par_step;

static int par_step_fn(void *p) {
    par_step *st = p;
    vt_par_for(PF_N, st->work, st->max_threads, par_task, st->c);
    return 7;
}

static void par_reset(par_case *c, int max_threads, int wait) {
    memset(c->runs, 0, sizeof c->runs);
    c->clash = c->bad_thread = c->nested_bad = c->product_bad = 0;
    c->other_thread_ran = 0, c->max_threads = max_threads, c->wait = wait;
}

static void test_par_for(void **state) {
    (void)state;
    enum { K = 256, N = 96 };
    float *xb, *x = make_x(1, K, &xb);
    wmat w = make_w(VT_BF16, N, K);
    float *want = calloc(N, sizeof(float)), *y = calloc(N, sizeof(float));
    vt_gemm_job job = {x, K, 1, &w.t, want, N};
    ref_job(&job, want);
    job.y = y;
    par_case c = {0};
    c.job = &job, c.want = want, c.y = y;
    const int saved = omp_get_max_threads();
    for (int th = 2; th <= 4; th++) {
        char what[96];
        omp_set_num_threads(th);
        /* outside a step: an OpenMP loop, or the calling thread when small */
        par_reset(&c, th, 0);
        vt_par_for(PF_N, VT_PAR_MIN_WORK, th, par_task, &c);
        snprintf(what, sizeof what, "%d threads, no step", th);
        par_check(&c, what);
        par_reset(&c, th, 0);
        vt_par_for(PF_N, VT_PAR_MIN_WORK - 1, th, par_task, &c);
        snprintf(what, sizeof what, "%d threads, no step, small", th);
        par_check(&c, what);
        if (c.other_thread_ran) fail_msg("%s: ran off the calling thread", what);
        /* in a step: on the team */
        par_step st = {&c, VT_STEP_MIN_WORK, th};
        par_reset(&c, th, 1);
        assert_int_equal(vt_gemm_step(th, par_step_fn, &st), 7);
        snprintf(what, sizeof what, "%d threads, step", th);
        par_check(&c, what);
        if (!c.other_thread_ran) fail_msg("%s: every index ran on the calling thread", what);
        /* in a step, but small, or more threads than the caller has slots for: the calling thread */
        const int64_t works[2] = {VT_STEP_MIN_WORK - 1, VT_STEP_MIN_WORK};
        const int maxes[2] = {th, th - 1};
        for (int v = 0; v < 2; v++) {
            st.work = works[v], st.max_threads = maxes[v];
            par_reset(&c, maxes[v], 0);
            assert_int_equal(vt_gemm_step(th, par_step_fn, &st), 7);
            snprintf(what, sizeof what, "%d threads, step, %s", th, v ? "fewer slots" : "small");
            par_check(&c, what);
            if (c.other_thread_ran) fail_msg("%s: ran off the calling thread", what);
        }
    }
    omp_set_num_threads(saved);
    free(w.base), free(want), free(y), free(xb);
}

/* The reference loops of vt_sgemm_nt / vt_sgemm_nn (gemm.h). */

static void ref_sgemm(int nn, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float *C, int64_t ldc, int accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(A[i * lda + k], nn ? B[k * ldb + j] : B[j * ldb + k], acc);
            C[i * ldc + j] = acc;
        }
}

/* A weight matrix [N][K] in dt whose data starts off elements past a 64-byte
 * boundary (the GEMV reads W in aligned chunks when every row has the same
 * shift within one: see gemv_chunk in gemm_avx512.c), rows wstride bytes apart.
 * Returns the data; *base is what to free. */
static char *make_w_at(vt_dtype dt, int64_t N, int64_t K, size_t wstride, int off, char **base) {
    const size_t es = vt_dtype_size(dt), bytes = ((size_t)N * wstride + 64 * 2 + 63) / 64 * 64;   /* aligned_alloc: a multiple of 64 */
    *base = aligned_alloc(64, bytes);
    assert_non_null(*base);
    char *w = *base + (size_t)off * es;
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) {
            char *p = w + (size_t)j * wstride + (size_t)k * es;
            float v = mixed();
            if (dt == VT_F32) memcpy(p, &v, 4);
            else if (dt == VT_BF16) { vt_bf16 h = vt_f32_to_bf16(v); memcpy(p, &h, 2); }
            else { vt_f16 h = vt_f32_to_f16(v); memcpy(p, &h, 2); }
        }
    return w;
}

/* The decode GEMV kernel itself, for every shift of W within a cache line
 * (0..15 f32 elements, 0..31 bf16/f16: the 64-byte line; the chunk is 16
 * elements), K a multiple of 16 or not, rows packed (wstride = K elements:
 * one shift for all rows only when K is a multiple of 16, else every row its
 * own shift and the plain unaligned steps) or padded to 64 bytes (one shift,
 * a partial first and last step through masked aligned loads), K shorter than
 * one chunk, 1..4 rows, one or two 16-column
 * halves, chains from 0 and from y: the reference bits, padding untouched. */
static void test_gemv_every_shift(void **state) {
    (void)state;
    if (vt_gemm_force_isa("avx512") != 0) skip();
    const int64_t Ks[] = {1, 13, 64, 96, 100};
    const int64_t Ns[] = {7, 45};
    for (int d = 0; d < 3; d++) {
        const vt_dtype dt = DTYPES[d];
        const size_t es = vt_dtype_size(dt);
        for (int off = 0; off < (int)(64 / es); off++)
            for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                for (int pad = 0; pad < 2; pad++) {
                    const int64_t K = Ks[c], N = Ns[(off + c) % 2], ldx = K + 1, ldy = N + 3;
                    const size_t wstride = pad ? ((size_t)K * es + 63) / 64 * 64 : (size_t)K * es;
                    char *wb, *w = make_w_at(dt, N, K, wstride, off, &wb);
                    float *xb, *x = make_x(VT_GEMV_MAX_ROWS, ldx, &xb);
                    for (int64_t M = 1; M <= VT_GEMV_MAX_ROWS; M++) {
                        const int acc = (int)((off + M) % 2);
                        float want[VT_GEMV_MAX_ROWS * 48], got[VT_GEMV_MAX_ROWS * 48];
                        for (int64_t i = 0; i < M * ldy; i++) want[i] = got[i] = -7.0f + (float)(i % 5);
                        for (int64_t i = 0; i < M; i++)
                            for (int64_t j = 0; j < N; j++) {
                                float r = acc ? want[i * ldy + j] : 0.0f;
                                for (int64_t k = 0; k < K; k++) {
                                    const char *p = w + (size_t)j * wstride + (size_t)k * es;
                                    float wv;
                                    uint16_t h;
                                    if (dt == VT_F32) memcpy(&wv, p, 4);
                                    else { memcpy(&h, p, 2); wv = dt == VT_BF16 ? vt_bf16_to_f32((vt_bf16){h}) : vt_f16_to_f32((vt_f16){h}); }
                                    r = fmaf(x[i * ldx + k], wv, r);
                                }
                                want[i * ldy + j] = r;
                            }
                        for (int solo = 0; solo < 2; solo++) {   /* bf16: the 16-k step and the pair step */
                            for (int64_t i = 0; i < M * ldy; i++) got[i] = -7.0f + (float)(i % 5);
                            const vt_gemm_args a = {x, ldx, w, wstride, dt, K, got, ldy, acc, solo, 0, NULL, 0, NULL, 0, 0};
                            vt_gemm512_gemv(&a, 0, M, 0, N, NULL);
                            char what[160];
                            snprintf(what, sizeof what, "gemv %s shift %d K=%lld wstride=%zu M=%lld N=%lld acc=%d solo=%d",
                                     vt_dtype_name(dt), off, (long long)K, wstride, (long long)M, (long long)N, acc, solo);
                            expect_equal(got, want, M, ldy, ldy, what);
                        }
                    }
                    free(wb); free(xb);
                }
    }
}

/* The same shifts through vt_gemm_batch (the GEMV over column tiles, 1 and 2
 * threads) and vt_sgemm_nt (W = B with a padded ldb: one shift, partial last
 * step), against the reference. */
static void test_gemv_shifts_batch(void **state) {
    (void)state;
    for (int d = 0; d < 3; d++) {
        const vt_dtype dt = DTYPES[d];
        const size_t es = vt_dtype_size(dt);
        for (int off = 0; off < (int)(64 / es); off++) {
            const int64_t M = 1 + off % VT_GEMV_MAX_ROWS, N = 100, K = off % 3 == 2 ? 200 : 256, ldx = K + 3, ldy = N;
            char *wb, *w = make_w_at(dt, N, K, (size_t)K * es, off, &wb);
            vt_tensor W;
            memset(&W, 0, sizeof W);
            W.dtype = dt; W.ndim = 2; W.shape[0] = N; W.shape[1] = K;
            W.stride[1] = es; W.stride[0] = es * (size_t)K; W.nbytes = es * (size_t)(N * K); W.data = w;
            float *xb, *x = make_x(M, ldx, &xb);
            float *want = malloc((size_t)(M * ldy) * 4), *got = malloc((size_t)(M * ldy) * 4);
            vt_gemm_job g = {x, ldx, M, &W, want, ldy};
            ref_job(&g, want);
            g.y = got;
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                memset(got, 0, (size_t)(M * ldy) * 4);
                vt_gemm_batch(&g, 1);
                char what[128];
                snprintf(what, sizeof what, "batch %s shift %d M=%lld K=%lld threads=%d", vt_dtype_name(dt), off,
                         (long long)M, (long long)K, th);
                expect_equal(got, want, M, N, ldy, what);
            }
            free(wb); free(xb); free(want); free(got);
        }
    }
    for (int off = 0; off < 16; off++) {   /* sgemm_nt: ldb = 112 floats (448 bytes, 7 lines), K = 100 */
        const int64_t M = 1 + off % 4, N = 40, K = 100, ldb = 112;
        char *bb, *B = make_w_at(VT_F32, N, K, (size_t)ldb * 4, off, &bb);
        float *ab, *A = make_x(M, K, &ab);
        float want[4 * 40], got[4 * 40];
        for (int i = 0; i < M * N; i++) want[i] = got[i] = (float)i;
        ref_sgemm(0, M, N, K, A, K, (const float *)B, ldb, want, N, off % 2);
        vt_sgemm_nt(M, N, K, A, K, (const float *)B, ldb, got, N, off % 2);
        expect_equal(got, want, M, N, N, "sgemm_nt shifted B");
        free(bb); free(ab);
    }
}

static void check_sgemm(int nn, int64_t M, int64_t N, int64_t K, int accumulate) {
    const int64_t lda = K + 1, ldb = (nn ? N : K) + 2, ldc = N + 3;
    float *ab, *A = make_x(M, lda, &ab), *bb, *B = make_x(nn ? K : N, ldb, &bb);
    float *C0b, *C0 = make_x(M, ldc, &C0b);   /* the starting C (accumulate) and padding */
    float *want = malloc((size_t)(M * ldc) * 4), *got = malloc((size_t)(M * ldc) * 4);
    memcpy(want, C0, (size_t)(M * ldc) * 4);
    ref_sgemm(nn, M, N, K, A, lda, B, ldb, want, ldc, accumulate);
    const char *isas[3] = {"avx512", "avx2", "scalar"}, *was = vt_gemm_isa();
    for (int s = 0; s < 3; s++) {
        if (vt_gemm_force_isa(isas[s]) != 0) continue;
        memcpy(got, C0, (size_t)(M * ldc) * 4);
        (nn ? vt_sgemm_nn : vt_sgemm_nt)(M, N, K, A, lda, B, ldb, got, ldc, accumulate);
        char what[128];
        snprintf(what, sizeof what, "%s sgemm_%s M=%lld N=%lld K=%lld acc=%d", isas[s], nn ? "nn" : "nt",
                 (long long)M, (long long)N, (long long)K, accumulate);
        expect_equal(got, want, M, ldc, ldc, what);
    }
    vt_gemm_force_isa(was);
    free(ab); free(bb); free(C0b); free(want); free(got);
}

static void test_sgemm_nt_nn(void **state) {
    (void)state;
    const int64_t Ms[] = {1, 2, 3, 5, 8, 13, 31, 64, 257};
    const int64_t Ns[] = {1, 15, 16, 17, 33, 64, 100, 128};
    const int64_t Ks[] = {0, 1, 7, 16, 64, 100, 128, 1029};
    for (int nn = 0; nn < 2; nn++)
        for (int acc = 0; acc < 2; acc++)
            for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
                for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                        if (Ms[a] * Ns[b] * Ks[c] <= SGEMM_CAP) check_sgemm(nn, Ms[a], Ns[b], Ks[c], acc);
}

/* Inside a parallel region (how chunked attention calls them): each thread's
 * product is the reference. */
static void test_sgemm_in_parallel_region(void **state) {
    (void)state;
    enum { M = 64, N = 64, K = 128 };
    float *ab, *A = make_x(M, K, &ab), *bb, *B = make_x(N, K, &bb);
    float want[M * N], got[2][M * N];
    ref_sgemm(0, M, N, K, A, K, B, K, want, N, 0);
    omp_set_num_threads(2);
    #pragma omp parallel for
    for (int t = 0; t < 2; t++) vt_sgemm_nt(M, N, K, A, K, B, K, got[t], N, 0);
    expect_equal(got[0], want, M, N, N, "parallel thread 0");
    expect_equal(got[1], want, M, N, N, "parallel thread 1");
    free(ab); free(bb);
}

/* Independent of the chain: the result is within the rounding bound of an
 * f64 dot product, |y - exact| <= (K+1) u sum|x w|, u = 2^-24. */
static void test_against_f64(void **state) {
    (void)state;
    enum { M = 37, N = 70, K = 1029 };
    for (int d = 0; d < 3; d++) {
        float *xb, *x = make_x(M, K, &xb);
        wmat w = make_w(DTYPES[d], N, K);
        float *y = malloc(M * N * 4);
        vt_gemm_job g = {x, K, M, &w.t, y, N};
        vt_gemm_batch(&g, 1);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, a = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)x[i * K + k] * wval(&w.t, j, k);
                    s += p; a += fabs(p);
                }
                double bound = (K + 1) * ldexp(1.0, -24) * a;
                if (fabs(y[i * N + j] - s) > bound)
                    fail_msg("%s y[%lld][%lld] = %.9g, f64 %.9g, bound %.3g", vt_dtype_name(DTYPES[d]), (long long)i,
                             (long long)j, y[i * N + j], s, bound);
            }
        free(xb); free(w.base); free(y);
    }
}

/* The data is sensitive to the order of the sum: two partial sums split at
 * k = 256 (a K block) differ from the chain in many elements. */
static void test_data_detects_reassociation(void **state) {
    (void)state;
    enum { K = 1029, N = 64 };
    float *xb, *x = make_x(1, K, &xb), *wb, *w = make_x(N, K, &wb);
    int differ = 0;
    for (int j = 0; j < N; j++) {
        float chain = vt_gemm_ref_dot(x, w + j * K, VT_F32, K);
        float lo = vt_gemm_ref_dot(x, w + j * K, VT_F32, 256);
        float hi = vt_gemm_ref_dot(x + 256, w + j * K + 256, VT_F32, K - 256);
        differ += memcmp(&chain, &(float){lo + hi}, 4) != 0;
    }
    if (differ < N / 4) fail_msg("only %d of %d split sums differ from the chain", differ, N);
    free(xb); free(wb);
}

/* The AVX2 kernel on blocks whose columns start and end anywhere (the
 * batch's tiles start on panels): inside one panel, across panels, past the
 * panels into the rows, 1 to 8 rows, from 0 and from y, every dtype; each
 * element the reference's chain, the rest of y untouched. */
static void test_avx2_any_block(void **state) {
    (void)state;
    const char *was = vt_gemm_isa();
    if (vt_gemm_force_isa("avx2") != 0) skip();
    enum { N = 100, K = 37, M = 8 };
    const int64_t c0s[] = {0, 5, 17, 31, 32, 40, 95}, widths[] = {1, 9, 16, 17, 27, 40, 100};
    float *xb, *x = make_x(M, K, &xb);
    for (int d = 0; d < 3; d++) {
        wmat w = make_w(DTYPES[d], N, K), wp = make_w(DTYPES[d], N, K);
        memcpy(wp.t.data, w.t.data, w.t.nbytes);   /* the same W, to go into panels */
        float want[M * N], y0[M * N], got[M * N];
        for (int i = 0; i < M * N; i++) y0[i] = (float)(i % 7) - 3.0f;
        vt_err err = {0};
        VT_ASSERT_OK(vt_tensor_panelize(&wp.t, &err), err);
        for (int lay = 0; lay < 2; lay++) {
            const vt_tensor *W = lay ? &wp.t : &w.t;
            for (int acc = 0; acc < 2; acc++)
                for (int64_t m = 1; m <= M; m += 3)
                    for (size_t a = 0; a < sizeof c0s / sizeof *c0s; a++)
                        for (size_t b = 0; b < sizeof widths / sizeof *widths; b++) {
                            const int64_t c0 = c0s[a], c1 = c0 + widths[b] < N ? c0 + widths[b] : N;
                            memcpy(want, y0, sizeof want), memcpy(got, y0, sizeof got);
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = c0; j < c1; j++) {
                                    float r = acc ? want[i * N + j] : 0.0f;
                                    for (int64_t k = 0; k < K; k++) r = fmaf(x[i * K + k], wval(&w.t, j, k), r);
                                    want[i * N + j] = r;
                                }
                            const vt_gemm_args ga = {x, K, W->data, vt_row_size(W->dtype, K), W->dtype, K, got, N,
                                                     acc, 1, vt_tensor_panel_rows(W), NULL, 0, NULL, 0, 0};
                            vt_gemm256_block(&ga, 0, m, c0, c1);
                            if (memcmp(want, got, sizeof want))
                                fail_msg("avx2 %s%s acc=%d rows %lld columns [%lld, %lld): not the reference's bits",
                                         vt_dtype_name(DTYPES[d]), lay ? " panels" : "", acc, (long long)m,
                                         (long long)c0, (long long)c1);
                        }
        }
        free(w.base), free(wp.base);
    }
    free(xb);
    vt_gemm_force_isa(was);
}

static void test_isa_name(void **state) {
    (void)state;
    const char *s = vt_gemm_isa();
    assert_true(strcmp(s, "avx512") == 0 || strcmp(s, "avx2") == 0 || strcmp(s, "scalar") == 0);
    if (vt_gemm_force_isa("avx2") == 0) assert_string_equal(vt_gemm_isa(), "avx2");
    assert_int_equal(vt_gemm_force_isa("scalar"), 0);
    assert_string_equal(vt_gemm_isa(), "scalar");
    assert_int_equal(vt_gemm_force_isa("no-such-isa"), -1);
    assert_string_equal(vt_gemm_isa(), "scalar");
    vt_gemm_force_isa(s);
    assert_string_equal(vt_gemm_isa(), s);
}

/* Jobs that share x (KDA's six projections, MLA's two) get x packed once
 * per batch (gemm.c's pack_shared): rows in panels or not, any dtype, and a
 * job on the same x with a shorter K (the same pointer, another packing)
 * must not be given the others' packing; 1 and 2 threads. */
static void test_batch_shared_x(void **state) {
    (void)state;
    enum { NJ = 5, M = 100, LDX = 310 };
    const int64_t Ks[NJ] = {300, 300, 300, 200, 300}, Ns[NJ] = {512, 512, 300, 512, 1024};
    float *xb, *x = make_x(M, LDX, &xb);
    wmat w[NJ];
    vt_gemm_job jobs[NJ];
    float *want[NJ], *got[NJ];
    for (int j = 0; j < NJ; j++) {
        w[j] = make_w(DTYPES[j % 3], Ns[j], Ks[j]);
        want[j] = calloc((size_t)(M * Ns[j]), 4);
        got[j] = calloc((size_t)(M * Ns[j]), 4);
        jobs[j] = (vt_gemm_job){x, LDX, M, &w[j].t, want[j], Ns[j]};
        ref_job(&jobs[j], want[j]);
        jobs[j].y = got[j];
        if (j % 2) {
            vt_err err = {0};
            VT_ASSERT_OK(vt_tensor_panelize(&w[j].t, &err), err);
        }
    }
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        for (int j = 0; j < NJ; j++)
            for (int64_t i = 0; i < M * Ns[j]; i++) got[j][i] = NAN;
        vt_gemm_batch(jobs, NJ);
        for (int j = 0; j < NJ; j++) {
            char what[96];
            snprintf(what, sizeof what, "shared x, job %d (K=%lld), threads=%d", j, (long long)Ks[j], th);
            expect_equal(got[j], want[j], M, Ns[j], Ns[j], what);
        }
    }
    for (int j = 0; j < NJ; j++) { free(w[j].base); free(want[j]); free(got[j]); }
    free(xb);
}

/* Tiles of one batch over the same x rows share its packing (gemm_avx512.c's
 * x memo: an expert's up reuses what its gate packed), but never across a
 * change of K, ldx or batch: jobs with the same x pointer and K = 300, 1024,
 * 1024 (the first leaves a packed partial K block that a later K must not
 * take), then the same pointer refilled and run again in a new batch, each
 * against the reference, at 1 and 2 threads. The packed kernel only: W in
 * panels or 16-bit (f32 rows of 5-64 rows go to the broadcast kernel). */
static void test_batch_x_memo(void **state) {
    (void)state;
    enum { NJ = 4, M = 40, LDX = 1030 };
    const int64_t Ks[NJ] = {300, 1024, 1024, 1024}, Ns[NJ] = {256, 256, 200, 256};
    const vt_dtype dts[NJ] = {VT_BF16, VT_F32, VT_F16, VT_F32};
    const int64_t ldxs[NJ] = {LDX, LDX, LDX, LDX - 2};
    float *xb, *x = make_x(M, LDX, &xb);
    wmat w[NJ], rows[NJ];   /* rows: W as made, for the reference (w goes into panels) */
    vt_gemm_job jobs[NJ];
    float *want[NJ], *got[NJ];
    for (int j = 0; j < NJ; j++) {
        w[j] = make_w(dts[j], Ns[j], Ks[j]);
        rows[j] = w[j];
        rows[j].base = malloc(w[j].t.nbytes);
        assert_non_null(rows[j].base);
        rows[j].t.data = memcpy(rows[j].base, w[j].t.data, w[j].t.nbytes);
        want[j] = calloc((size_t)(M * Ns[j]), 4);
        got[j] = calloc((size_t)(M * Ns[j]), 4);
        jobs[j] = (vt_gemm_job){x, ldxs[j], M, &w[j].t, got[j], Ns[j]};
        if (dts[j] == VT_F32) {
            vt_err err = {0};
            VT_ASSERT_OK(vt_tensor_panelize(&w[j].t, &err), err);
        }
    }
    for (int round = 0; round < 3; round++) {
        if (round) for (int64_t i = 0; i < M * LDX; i++) x[i] = mixed();   /* same pointer, new values */
        if (round == 2) {   /* job 1 alone after job 1 alone: the memo of the batch before is stale */
            omp_set_num_threads(1);
            vt_gemm_batch(&jobs[1], 1);
            for (int64_t i = 0; i < M * LDX; i++) x[i] = mixed();
        }
        for (int j = 0; j < NJ; j++) {
            vt_gemm_job r = jobs[j];
            r.y = want[j], r.W = &rows[j].t;
            ref_job(&r, want[j]);
        }
        for (int th = 1; th <= 2; th++) {
            omp_set_num_threads(th);
            for (int j = 0; j < NJ; j++)
                for (int64_t i = 0; i < M * Ns[j]; i++) got[j][i] = NAN;
            if (round == 2) vt_gemm_batch(&jobs[1], 1);
            else vt_gemm_batch(jobs, NJ);
            for (int j = 0; j < NJ; j++) {
                if (round == 2 && j != 1) continue;
                char what[96];
                snprintf(what, sizeof what, "x memo, round %d, job %d (K=%lld), threads=%d", round, j,
                         (long long)Ks[j], th);
                expect_equal(got[j], want[j], M, Ns[j], Ns[j], what);
            }
        }
    }
    for (int j = 0; j < NJ; j++) { free(w[j].base); free(rows[j].base); free(want[j]); free(got[j]); }
    free(xb);
}

/* The panel GEMV itself (W in panels, tensor.h), chains from 0 and from y
 * (accumulate: bf16's even/odd lanes taken apart and put back), 1..4 rows,
 * three panels (two side by side, then one), every dtype. */
static void test_panel_gemv_accumulate(void **state) {
    (void)state;
    if (vt_gemm_force_isa("avx512") != 0) skip();
    enum { N = 96, K = 37, LDX = 40, LDY = 100 };
    for (int d = 0; d < 3; d++) {
        wmat w = make_w(DTYPES[d], N, K);
        float *xb, *x = make_x(VT_GEMV_MAX_ROWS, LDX, &xb);
        float want[VT_GEMV_MAX_ROWS * LDY], got[VT_GEMV_MAX_ROWS * LDY];
        for (int acc = 0; acc < 2; acc++)
            for (int64_t M = 1; M <= VT_GEMV_MAX_ROWS; M++) {
                for (int64_t i = 0; i < M * LDY; i++) want[i] = got[i] = (float)(i % 7) - 3.0f;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float r = acc ? want[i * LDY + j] : 0.0f;
                        for (int64_t k = 0; k < K; k++) r = fmaf(x[i * LDX + k], wval(&w.t, j, k), r);
                        want[i * LDY + j] = r;
                    }
                wmat wp = w;   /* a panel copy (wval reads rows: the reference above) */
                wp.base = malloc(w.t.nbytes + 64);
                wp.t.data = wp.base;
                memcpy(wp.t.data, w.t.data, w.t.nbytes);
                vt_err err = {0};
                VT_ASSERT_OK(vt_tensor_panelize(&wp.t, &err), err);
                const vt_gemm_args a = {x, LDX, wp.t.data, vt_row_size(DTYPES[d], K), DTYPES[d], K, got, LDY, acc, 1, N,
                                        NULL, 0, NULL, 0, 0};
                vt_gemm512_panel_gemv(&a, 0, M, 0, N);
                char what[96];
                snprintf(what, sizeof what, "panel gemv %s M=%lld acc=%d", vt_dtype_name(DTYPES[d]), (long long)M, acc);
                expect_equal(got, want, M, LDY, LDY, what);
                free(wp.base);
            }
        free(w.base); free(xb);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_name),
        cmocka_unit_test(test_data_detects_reassociation),
        cmocka_unit_test(test_batch_every_remainder),
        cmocka_unit_test(test_batch_large),
        cmocka_unit_test(test_batch_many_jobs),
        cmocka_unit_test(test_batch_shared_x),
        cmocka_unit_test(test_batch_x_memo),
        cmocka_unit_test(test_panel_gemv_accumulate),
        cmocka_unit_test(test_gemm_step),
        cmocka_unit_test(test_gemv_every_shift),
        cmocka_unit_test(test_gemv_shifts_batch),
        cmocka_unit_test(test_par_for),
        cmocka_unit_test(test_avx2_any_block),
        cmocka_unit_test(test_sgemm_nt_nn),
        cmocka_unit_test(test_sgemm_in_parallel_region),
        cmocka_unit_test(test_against_f64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
