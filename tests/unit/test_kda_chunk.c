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

#include "model/kda_chunk.h"

/* Measured (gcc 12 -O2, reference sgemm, every case of the sweep below): the
 * chunked vs recurrent outputs differ by at most ~TBD relative to max |o|, the
 * states by ~TBD relative to max |S|. */
#define TOL_O 1e-5
#define TOL_S 1e-5

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
    vt_kda_recurrent(c->T, c->H, c->d, c->q, c->k, c->v, c->g, c->beta, Sr, orr);
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
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_matches_recurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
