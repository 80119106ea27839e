/*
 * test_kda_chunk.c — the chunked (WY / UT-transform) KDA core against the
 * token-by-token recurrence (model/kda_chunk.h), and both against an
 * independent f64 recurrence written here with plain loops.
 *
 * Errors are max |a - b| over all elements divided by max |ref| (outputs and
 * final state separately), ref being the f64 result.
 */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <omp.h>

#include "model/gemm.h"
#include "model/kda_chunk.h"
#include "model/vmath.h"

/* Measured (gcc 12 -O2, chunk 32 / sub-chunk 16, the 84 cases of the sweep
 * below): chunked vs recurrent at most 7.5e-7 relative to max |o| on the
 * outputs, 5.1e-7 relative to max |S| on the final state (chunk 64: 7.5e-7,
 * 5.6e-7); each of them vs f64 at most ~5e-7. The
 * tolerances leave a 4x margin (another compiler or -march may contract
 * differently). A chunked form that loses the intra-chunk decay is off by
 * 1e-2..1e-1 (VT_MUTATE_KDA_CHUNK_NO_DECAY). */
#define TOL_O 3e-6
#define TOL_S 3e-6
/* vs the f64 reference, per case; and the chunked form's mean error over the
 * sweep at most this many times the recurrence's (it is not systematically
 * worse: measured 2.3e-7 vs 2.7e-7) */
#define TOL_F64 3e-6
#define MEAN_RATIO 1.5

/* ---------------------------------------------------------------- inputs */

typedef enum { DECAY_WEAK, DECAY_MODEL, DECAY_STRONG, DECAY_EXTREME } decay_kind;

typedef struct {
    int64_t T, H, d;
    float *q, *k, *v, *g, *beta, *S0;
} kda_case;

static uint64_t rng_state;
static double urand(void) {   /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) {
    double u1 = urand(), u2 = urand();
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

static float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static void make_case(kda_case *c, int64_t T, int64_t H, int64_t d, decay_kind kind, uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 12345;
    const int64_t P = H * d;
    c->T = T; c->H = H; c->d = d;
    c->q = falloc((size_t)(T * P)); c->k = falloc((size_t)(T * P)); c->v = falloc((size_t)(T * P));
    c->g = falloc((size_t)(T * P)); c->beta = falloc((size_t)(T * H)); c->S0 = falloc((size_t)(H * d * d));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float *q = c->q + t * P + h * d, *k = c->k + t * P + h * d;
            double sq = 0, sk = 0;
            for (int64_t i = 0; i < d; i++) {
                q[i] = (float)nrand(); k[i] = (float)nrand();
                sq += (double)q[i] * q[i]; sk += (double)k[i] * k[i];
            }
            const float iq = (float)(1.0 / sqrt(sq)) / sqrtf((float)d), ik = (float)(1.0 / sqrt(sk));
            for (int64_t i = 0; i < d; i++) { q[i] *= iq; k[i] *= ik; }
            c->beta[t * H + h] = (float)(0.02 + 0.96 * urand());
            for (int64_t i = 0; i < d; i++) {
                float *gi = c->g + t * P + h * d + i;
                c->v[t * P + h * d + i] = (float)nrand();
                switch (kind) {
                case DECAY_WEAK: *gi = (float)(-0.05 * urand()); break;
                case DECAY_MODEL: *gi = (float)(-exp(-2.0 + 2.0 * urand()) * log1p(exp(nrand()))); break;
                case DECAY_STRONG:   /* a mix: most channels mild, some very strong, per token */
                    *gi = (float)(urand() < 0.2 ? -50.0 * urand() : -0.5 * urand()); break;
                case DECAY_EXTREME:
                    *gi = (float)(urand() < 0.5 ? -50.0 - 950.0 * urand() : -3.0 * urand()); break;
                }
            }
        }
    for (int64_t i = 0; i < H * d * d; i++) c->S0[i] = (float)(0.5 * nrand());
}

static void free_case(kda_case *c) {
    free(c->q); free(c->k); free(c->v); free(c->g); free(c->beta); free(c->S0);
}

/* ------------------------------------------------------------ references */

/* The recurrence in double, plain loops, written from the formula. */
static void ref_f64(const kda_case *c, double *S, double *o) {
    const int64_t T = c->T, H = c->H, d = c->d, P = H * d;
    for (int64_t i = 0; i < H * d * d; i++) S[i] = c->S0[i];
    double *u = malloc((size_t)d * sizeof *u);
    assert_non_null(u);
    for (int64_t h = 0; h < H; h++) {
        double *Sh = S + h * d * d;
        for (int64_t t = 0; t < T; t++) {
            const float *q = c->q + t * P + h * d, *k = c->k + t * P + h * d, *v = c->v + t * P + h * d;
            const float *g = c->g + t * P + h * d;
            const double b = c->beta[t * H + h];
            for (int64_t i = 0; i < d; i++) {
                const double e = exp((double)g[i]);
                for (int64_t j = 0; j < d; j++) Sh[i * d + j] *= e;
            }
            for (int64_t j = 0; j < d; j++) {
                double s = 0;
                for (int64_t i = 0; i < d; i++) s += (double)k[i] * Sh[i * d + j];
                u[j] = b * ((double)v[j] - s);
            }
            for (int64_t i = 0; i < d; i++)
                for (int64_t j = 0; j < d; j++) Sh[i * d + j] += (double)k[i] * u[j];
            for (int64_t j = 0; j < d; j++) {
                double s = 0;
                for (int64_t i = 0; i < d; i++) s += (double)q[i] * Sh[i * d + j];
                o[t * P + h * d + j] = s;
            }
        }
    }
    free(u);
}

static int run_chunked(const kda_case *c, float *S, float *o) {
    const size_t wb = vt_kda_chunked_work_bytes(c->T, c->H, c->d, omp_get_max_threads());
    assert_true(wb > 0);
    float *w = malloc(wb);
    assert_non_null(w);
    int rc = vt_kda_chunked(c->T, c->H, c->d, c->q, c->k, c->v, c->g, c->beta, S, o, w, wb);
    free(w);
    return rc;
}

typedef struct { double o, S; } errs;

static double max_abs_f(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}
static double max_abs_d(const double *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}
static double max_diff_ff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= m)) m = e;   /* NaN propagates */
    }
    return m;
}
static double max_diff_fd(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}
static int all_finite(const float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

/* All three results of one case, and their errors. */
typedef struct {
    errs chunk_vs_rec, chunk_vs_f64, rec_vs_f64;
    int finite;
} case_result;

static case_result run_case(const kda_case *c) {
    const int64_t no = c->T * c->H * c->d, ns = c->H * c->d * c->d;
    float *Sr = falloc((size_t)ns), *Sc = falloc((size_t)ns), *orr = falloc((size_t)no), *oc = falloc((size_t)no);
    double *Sd = malloc((size_t)ns * sizeof *Sd), *od = malloc((size_t)(no ? no : 1) * sizeof *od);
    assert_non_null(Sd); assert_non_null(od);
    memcpy(Sr, c->S0, (size_t)ns * sizeof *Sr);
    memcpy(Sc, c->S0, (size_t)ns * sizeof *Sc);
    vt_kda_recurrent(c->T, c->H, c->d, c->q, c->k, c->v, c->g, c->beta, Sr, orr, NULL);
    assert_int_equal(run_chunked(c, Sc, oc), 0);
    ref_f64(c, Sd, od);
    const double mo = fmax(max_abs_d(od, no), 1e-30), ms = fmax(max_abs_d(Sd, ns), 1e-30);
    case_result r;
    r.chunk_vs_rec.o = max_diff_ff(oc, orr, no) / mo;
    r.chunk_vs_rec.S = max_diff_ff(Sc, Sr, ns) / ms;
    r.chunk_vs_f64.o = max_diff_fd(oc, od, no) / mo;
    r.chunk_vs_f64.S = max_diff_fd(Sc, Sd, ns) / ms;
    r.rec_vs_f64.o = max_diff_fd(orr, od, no) / mo;
    r.rec_vs_f64.S = max_diff_fd(Sr, Sd, ns) / ms;
    r.finite = all_finite(oc, no) && all_finite(Sc, ns) && all_finite(orr, no) && all_finite(Sr, ns);
    free(Sr); free(Sc); free(orr); free(oc); free(Sd); free(od);
    return r;
}

/* ----------------------------------------------------------------- tests */

static const char *kind_name[] = {"weak", "model", "strong", "extreme"};

/* Every T of the brief with every d, H cycling over 2..8, all decay kinds:
 * chunked within TOL of the recurrence, outputs and final state. */
static void test_chunked_matches_recurrent(void **state) {
    (void)state;
    static const int64_t Ts[] = {1, 5, 63, 64, 65, 200, 1000};
    static const int64_t ds[] = {16, 64, 128};
    double worst_o = 0, worst_s = 0, sum_c = 0, sum_r = 0;
    int n = 0, closer = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
            for (int kind = 0; kind < 4; kind++) {
                const int64_t T = Ts[ti], d = ds[di];
                int64_t H = 2 + (int64_t)((ti * 3 + di + (size_t)kind) % 7);
                if (T * H * d * d > 1000LL * 2 * 128 * 128) H = 2;   /* keep the f64 reference quick */
                kda_case c;
                make_case(&c, T, H, d, (decay_kind)kind, 100 + ti * 10 + di * 3 + (size_t)kind);
                case_result r = run_case(&c);
                if (getenv("VT_TEST_VERBOSE"))
                    printf("T=%4lld H=%lld d=%3lld %-7s chunk-rec o %.2e S %.2e | vs f64: chunk o %.2e S %.2e, "
                           "rec o %.2e S %.2e\n", (long long)T, (long long)H, (long long)d, kind_name[kind],
                           r.chunk_vs_rec.o, r.chunk_vs_rec.S, r.chunk_vs_f64.o, r.chunk_vs_f64.S, r.rec_vs_f64.o,
                           r.rec_vs_f64.S);
                if (!r.finite) fail_msg("T=%lld d=%lld %s: non-finite output", (long long)T, (long long)d,
                                        kind_name[kind]);
                if (!(r.chunk_vs_rec.o <= TOL_O) || !(r.chunk_vs_rec.S <= TOL_S))
                    fail_msg("T=%lld H=%lld d=%lld %s: chunked vs recurrent o %.3e S %.3e (tol %.1e, %.1e)",
                             (long long)T, (long long)H, (long long)d, kind_name[kind], r.chunk_vs_rec.o,
                             r.chunk_vs_rec.S, TOL_O, TOL_S);
                if (!(r.chunk_vs_f64.o <= TOL_F64) || !(r.chunk_vs_f64.S <= TOL_F64) ||
                    !(r.rec_vs_f64.o <= TOL_F64) || !(r.rec_vs_f64.S <= TOL_F64))
                    fail_msg("T=%lld d=%lld %s: vs f64: chunked o %.3e S %.3e, recurrent o %.3e S %.3e (tol %.1e)",
                             (long long)T, (long long)d, kind_name[kind], r.chunk_vs_f64.o, r.chunk_vs_f64.S,
                             r.rec_vs_f64.o, r.rec_vs_f64.S, TOL_F64);
                worst_o = fmax(worst_o, r.chunk_vs_rec.o);
                worst_s = fmax(worst_s, r.chunk_vs_rec.S);
                sum_c += r.chunk_vs_f64.o; sum_r += r.rec_vs_f64.o;
                closer += r.chunk_vs_f64.o <= r.rec_vs_f64.o;
                n++;
                free_case(&c);
            }
    printf("chunked vs recurrent over %d cases: worst o %.2e, worst S %.2e (relative to max |ref|); "
           "vs f64 mean o error chunked %.2e, recurrent %.2e; chunked closer in %d of %d\n",
           n, worst_o, worst_s, sum_c / n, sum_r / n, closer, n);
    if (!(sum_c <= MEAN_RATIO * sum_r))
        fail_msg("chunked mean error vs f64 %.3e is more than %.1fx the recurrence's %.3e", sum_c / n, MEAN_RATIO,
                 sum_r / n);
}

/* A chunked prefill continued with recurrent (decode) steps: the same outputs
 * and final state as the recurrence all the way, within TOL. */
static void test_chunked_prefill_then_recurrent_steps(void **state) {
    (void)state;
    static const struct { int64_t T1, T2, H, d; decay_kind kind; } cs[] = {
        {64, 5, 2, 128, DECAY_MODEL}, {200, 37, 3, 64, DECAY_STRONG}, {65, 70, 4, 16, DECAY_WEAK},
        {1, 3, 2, 64, DECAY_EXTREME}, {130, 1, 8, 128, DECAY_MODEL},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
        const int64_t T1 = cs[ci].T1, T2 = cs[ci].T2, T = T1 + T2, H = cs[ci].H, d = cs[ci].d, P = H * d;
        kda_case c;
        make_case(&c, T, H, d, cs[ci].kind, 700 + ci);
        const int64_t ns = H * d * d;
        float *Sr = falloc((size_t)ns), *Sm = falloc((size_t)ns), *orr = falloc((size_t)(T * P));
        float *om = falloc((size_t)(T * P));
        memcpy(Sr, c.S0, (size_t)ns * sizeof *Sr);
        memcpy(Sm, c.S0, (size_t)ns * sizeof *Sm);
        vt_kda_recurrent(T, H, d, c.q, c.k, c.v, c.g, c.beta, Sr, orr, NULL);
        /* the first T1 tokens chunked, then T2 single recurrent steps */
        kda_case head = c;
        head.T = T1;
        assert_int_equal(run_chunked(&head, Sm, om), 0);
        for (int64_t t = T1; t < T; t++)
            vt_kda_recurrent(1, H, d, c.q + t * P, c.k + t * P, c.v + t * P, c.g + t * P, c.beta + t * H, Sm,
                             om + t * P, NULL);
        const double mo = fmax(max_abs_f(orr, T * P), 1e-30), ms = fmax(max_abs_f(Sr, ns), 1e-30);
        const double eo_pre = max_diff_ff(om, orr, T1 * P) / mo;
        const double eo_dec = max_diff_ff(om + T1 * P, orr + T1 * P, T2 * P) / mo;
        const double es = max_diff_ff(Sm, Sr, ns) / ms;
        if (getenv("VT_TEST_VERBOSE"))
            printf("T1=%lld T2=%lld: prefill o %.2e, steps o %.2e, final S %.2e\n", (long long)T1, (long long)T2,
                   eo_pre, eo_dec, es);
        if (!(eo_pre <= TOL_O) || !(eo_dec <= TOL_O) || !(es <= TOL_S))
            fail_msg("T1=%lld T2=%lld H=%lld d=%lld: prefill o %.3e, steps o %.3e, final S %.3e", (long long)T1,
                     (long long)T2, (long long)H, (long long)d, eo_pre, eo_dec, es);
        free(Sr); free(Sm); free(orr); free(om);
        free_case(&c);
    }
}

/* 1 and 2 threads (and a workspace sized for one thread, which caps the team)
 * give the same bits; so do two runs, and a run with the scalar kernels
 * forced (VTLAB_GEMM_ISA=scalar: the diagonal blocks as M = 1 products
 * instead of the AVX-512 transposed form, the other products' scalar loops). */
static void test_thread_count_same_bits(void **state) {
    (void)state;
    static const struct { int64_t T, H, d; } cs[] = {{200, 3, 64}, {129, 8, 128}, {5, 2, 16}};
    const int saved = omp_get_max_threads();
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
        kda_case c;
        make_case(&c, cs[ci].T, cs[ci].H, cs[ci].d, DECAY_STRONG, 900 + ci);
        const int64_t ns = c.H * c.d * c.d, no = c.T * c.H * c.d;
        float *S[5], *o[5];
        for (int r = 0; r < 5; r++) {
            S[r] = falloc((size_t)ns); o[r] = falloc((size_t)no);
            memcpy(S[r], c.S0, (size_t)ns * sizeof **S);
            const int nthreads = r == 0 || r == 3 ? 1 : 2;
            if (r == 4) assert_int_equal(vt_gemm_force_isa("scalar"), 0);
            omp_set_num_threads(nthreads);
            /* r == 2: 2 threads available but the workspace fits one */
            const size_t wb = vt_kda_chunked_work_bytes(c.T, c.H, c.d, r == 2 ? 1 : nthreads);
            float *w = malloc(wb);
            assert_non_null(w);
            assert_int_equal(vt_kda_chunked(c.T, c.H, c.d, c.q, c.k, c.v, c.g, c.beta, S[r], o[r], w, wb), 0);
            free(w);
        }
        vt_gemm_force_isa("avx512");
        omp_set_num_threads(saved);
        for (int r = 1; r < 5; r++) {
            if (memcmp(S[0], S[r], (size_t)ns * sizeof **S) || memcmp(o[0], o[r], (size_t)no * sizeof **o))
                fail_msg("T=%lld H=%lld d=%lld: run %d differs from the 1-thread run", (long long)c.T,
                         (long long)c.H, (long long)c.d, r);
        }
        for (int r = 0; r < 5; r++) { free(S[r]); free(o[r]); }
        free_case(&c);
    }
}

/* Decays far beyond what exp(-G) could survive: whole chunks of g = -1000,
 * -1e30 and -inf in some channels, g = 0 (no decay) in others, beta close to 0
 * and to 1, a large initial state. No NaN or Inf, and still the recurrence's
 * result within TOL. */
static void test_extreme_decays_finite(void **state) {
    (void)state;
    const int64_t T = 200, H = 2, d = 64, P = H * d;
    kda_case c;
    make_case(&c, T, H, d, DECAY_EXTREME, 1234);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            c.beta[t * H + h] = t % 3 == 0 ? 1e-6f : t % 3 == 1 ? 0.999999f : c.beta[t * H + h];
            for (int64_t i = 0; i < d; i++) {
                float *gi = c.g + t * P + h * d + i;
                if (i % 8 == 0) *gi = 0.0f;
                else if (i % 8 == 1) *gi = -INFINITY;
                else if (i % 8 == 2) *gi = -1e30f;
                else if (i % 8 == 3) *gi = (t / 64) % 2 ? -1000.0f : -0.01f;   /* chunk-long runs */
                else if (i % 8 == 4) *gi = -87.0f - (float)(t % 5);              /* results in the subnormals */
            }
        }
    for (int64_t i = 0; i < H * d * d; i++) c.S0[i] *= 1e3f;
    case_result r = run_case(&c);
    if (getenv("VT_TEST_VERBOSE"))
        printf("extreme: chunk-rec o %.2e S %.2e, vs f64 chunk o %.2e rec o %.2e\n", r.chunk_vs_rec.o,
               r.chunk_vs_rec.S, r.chunk_vs_f64.o, r.rec_vs_f64.o);
    assert_true(r.finite);
    if (!(r.chunk_vs_rec.o <= TOL_O) || !(r.chunk_vs_rec.S <= TOL_S))
        fail_msg("extreme decays: chunked vs recurrent o %.3e S %.3e", r.chunk_vs_rec.o, r.chunk_vs_rec.S);
    free_case(&c);
}

/* The recurrence is kda.c's loop: a copy of that loop (exp(g) computed before
 * it with vmath.h's vt_expf, as kda.c does) gives the same bits. */
static void recurrent_is_kda_loop(int64_t T, int64_t H, int64_t d, int with_decay, uint64_t seed) {
    const int64_t P = H * d;
    kda_case c;
    make_case(&c, T, H, d, DECAY_MODEL, seed);
    float *S1 = falloc((size_t)(H * d * d)), *S2 = falloc((size_t)(H * d * d));
    float *o1 = falloc((size_t)(T * P)), *o2 = falloc((size_t)(T * P)), *f = falloc((size_t)(T * P));
    float *dbuf = falloc((size_t)(T * P));
    memcpy(S1, c.S0, (size_t)(H * d * d) * sizeof *S1);
    memcpy(S2, c.S0, (size_t)(H * d * d) * sizeof *S2);
    vt_kda_recurrent(T, H, d, c.q, c.k, c.v, c.g, c.beta, S1, o1, with_decay ? dbuf : NULL);
    for (int64_t i = 0; i < T * P; i++) f[i] = vt_expf(c.g[i]);
    const float *q = c.q, *k = c.k, *v = c.v, *beta = c.beta;
    float *o = o2;
    enum { JB = 32 };
    const int64_t nb = (d + JB - 1) / JB;
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t j0 = b * JB, nj = d - j0 < JB ? d - j0 : JB;
            float u[JB], dl[JB], acc[JB];
            for (int64_t t = 0; t < T; t++) {
                const float *qh = q + t * P + h * d, *kh = k + t * P + h * d, *decay = f + t * P + h * d;
                const float *vh = v + t * P + h * d + j0;
                const float bt = beta[t * H + h];
                for (int64_t jj = 0; jj < nj; jj++) u[jj] = 0.0f;
                for (int64_t i = 0; i < d; i++) {
                    float *row = S2 + (h * d + i) * d + j0;
                    const float di = decay[i], ki = kh[i];
                    for (int64_t jj = 0; jj < nj; jj++) { row[jj] *= di; u[jj] += ki * row[jj]; }
                }
                for (int64_t jj = 0; jj < nj; jj++) { dl[jj] = bt * (vh[jj] - u[jj]); acc[jj] = 0.0f; }
                for (int64_t i = 0; i < d; i++) {
                    float *row = S2 + (h * d + i) * d + j0;
                    const float ki = kh[i], qi = qh[i];
                    for (int64_t jj = 0; jj < nj; jj++) { row[jj] += ki * dl[jj]; acc[jj] += qi * row[jj]; }
                }
                for (int64_t jj = 0; jj < nj; jj++) o[t * P + h * d + j0 + jj] = acc[jj];
            }
        }
    if (memcmp(S1, S2, (size_t)(H * d * d) * sizeof *S1) || memcmp(o1, o2, (size_t)(T * P) * sizeof *o1))
        fail_msg("T=%lld H=%lld d=%lld decay buffer %d: not the loop's bits", (long long)T, (long long)H, (long long)d,
                 with_decay);
    free(S1); free(S2); free(o1); free(o2); free(f); free(dbuf);
    free_case(&c);
}

/* The same loop written here (kda.c's, JB = 32 column blocks): bit for bit,
 * through the whole-row AVX-512 path (d a multiple of 16 up to 128) and the
 * blocked loop (other d), on 1 and 2 threads, with and without the decay
 * buffer, and with the scalar kernels forced (VTLAB_GEMM_ISA=scalar). */
static void test_recurrent_is_kda_loop(void **state) {
    (void)state;
    static const struct { int64_t T, H, d; } cs[] = {{70, 3, 128}, {1, 8, 128}, {3, 2, 16}, {2, 3, 48},
                                                     {1, 2, 112}, {4, 2, 40}, {1, 1, 144}, {2, 2, 1}};
    const int saved = omp_get_max_threads();
    for (int isa = 0; isa < 2; isa++) {
        if (isa == 1) assert_int_equal(vt_gemm_force_isa("scalar"), 0);
        for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++)
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                recurrent_is_kda_loop(cs[ci].T, cs[ci].H, cs[ci].d, (int)((ci + (size_t)th) % 2), 55 + ci);
            }
    }
    vt_gemm_force_isa("avx512");
    omp_set_num_threads(saved);
}

/* The workspace contract: too small is refused with S and o untouched; T = 0
 * is a no-op; invalid sizes give 0 bytes; any alignment of work is fine. */
static void test_workspace_contract(void **state) {
    (void)state;
    assert_int_equal(vt_kda_chunked_work_bytes(10, 0, 64, 1), 0);
    assert_int_equal(vt_kda_chunked_work_bytes(10, 2, 64, 0), 0);
    assert_int_equal(vt_kda_chunked_work_bytes(-1, 2, 64, 1), 0);
    assert_true(vt_kda_chunked_work_bytes(0, 2, 64, 1) > 0);
    kda_case c;
    make_case(&c, 65, 2, 64, DECAY_MODEL, 77);
    const int64_t ns = 2 * 64 * 64, no = 65 * 2 * 64;
    const size_t wb = vt_kda_chunked_work_bytes(65, 2, 64, 1);
    char *w = malloc(wb + 3);
    float *S = falloc((size_t)ns), *o = falloc((size_t)no), *S2 = falloc((size_t)ns), *o2 = falloc((size_t)no);
    memcpy(S, c.S0, (size_t)ns * sizeof *S);
    assert_int_equal(vt_kda_chunked(65, 2, 64, c.q, c.k, c.v, c.g, c.beta, S, o, (float *)w, wb - 1), -1);
    assert_memory_equal(S, c.S0, (size_t)ns * sizeof *S);
    for (int64_t i = 0; i < no; i++) assert_true(o[i] == 0.0f);
    assert_int_equal(vt_kda_chunked(0, 2, 64, c.q, c.k, c.v, c.g, c.beta, S, o, (float *)w, wb), 0);
    assert_memory_equal(S, c.S0, (size_t)ns * sizeof *S);
    /* misaligned by 3 bytes: same bits as aligned */
    memcpy(S2, c.S0, (size_t)ns * sizeof *S2);
    assert_int_equal(vt_kda_chunked(65, 2, 64, c.q, c.k, c.v, c.g, c.beta, S, o, (float *)w, wb), 0);
    assert_int_equal(vt_kda_chunked(65, 2, 64, c.q, c.k, c.v, c.g, c.beta, S2, o2, (float *)(w + 3), wb), 0);
    assert_memory_equal(S, S2, (size_t)ns * sizeof *S);
    assert_memory_equal(o, o2, (size_t)no * sizeof *o);
    free(w); free(S); free(o); free(S2); free(o2);
    free_case(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_matches_recurrent),
        cmocka_unit_test(test_chunked_prefill_then_recurrent_steps),
        cmocka_unit_test(test_thread_count_same_bits),
        cmocka_unit_test(test_extreme_decays_finite),
        cmocka_unit_test(test_recurrent_is_kda_loop),
        cmocka_unit_test(test_workspace_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
