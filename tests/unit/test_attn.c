/*
 * test_attn.c — the blocked causal attention (model/attn.c) against the loop
 * mla.c used (vt_attn_causal_ref) and against an independent f64 reference.
 *
 * Error measure: max |o - o_f64| over all outputs, divided by max |o_f64|.
 * The tolerance is TOL * max(1, mag), mag = max over (t, h, j) of
 * scale * sum_i |q_i k_i| (from the f64 reference): a score's f32 rounding
 * error is about 2^-24 * mag and it enters p = exp(s - m) as a relative
 * error of the same size, so saturating scores (mag ~ 200) get a
 * proportionally wider bound; for ordinary scores mag ~ 1-4.
 * Measured on this suite (gcc 12, x86-64), error / max(1, mag), worst case:
 * blocked vs f64 9.9e-7, the reference loop vs f64 1.3e-6 (it rounds
 * p = e/sum to f32 and sums p·v in plain f32, non-FMA), blocked vs reference
 * 1.4e-6; TOL = 4e-6 is about 3x the worst. ATTN_VERBOSE=1 prints every case.
 * Without the causal mask the error is 0.07 to 2 (see VT_MUTATE_ATTN_NO_CAUSAL_MASK).
 *
 * Also: bits identical for 1, 2 and 3 threads, for a workspace that only
 * fits one thread and for the scalar and AVX-512 softmax passes; T=1 decode after a prefill equals the prefill's row; the
 * argument and workspace checks.
 */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <omp.h>

#include "model/attn.h"

#define TOL 4e-6

typedef struct {
    int64_t T, p0, Nh, dqk, dv, ldq, ldk, ldv, ldo;
    float scale;
    float *q, *kc, *vc;   /* q: T rows; kc, vc: p0+T rows */
} attn_case;

static uint64_t rng_state;
static float urand(void) {   /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* Random q, keys and values, uniform in [-1, 1), q times `amp` (a score's
 * std is then amp/3 after the 1/sqrt(dqk) scale). pad > 0 gives every matrix
 * a row stride longer than its row. */
static attn_case make_case(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float amp, int pad,
                           uint64_t seed) {
    attn_case c = {T, p0, Nh, dqk, dv, Nh * dqk + pad, Nh * dqk + 2 * pad, Nh * dv + 3 * pad, Nh * dv + pad,
                   1.0f / sqrtf((float)dqk), NULL, NULL, NULL};
    rng_state = seed;
    const int64_t n = p0 + T;
    c.q = malloc(sizeof(float) * (size_t)(T * c.ldq));
    c.kc = malloc(sizeof(float) * (size_t)(n * c.ldk));
    c.vc = malloc(sizeof(float) * (size_t)(n * c.ldv));
    for (int64_t i = 0; i < T * c.ldq; i++) c.q[i] = amp * urand();
    for (int64_t i = 0; i < n * c.ldk; i++) c.kc[i] = urand();
    for (int64_t i = 0; i < n * c.ldv; i++) c.vc[i] = urand();
    return c;
}

static void free_case(attn_case *c) { free(c->q); free(c->kc); free(c->vc); }

static float *run_blocked(const attn_case *c) {
    size_t wb = vt_attn_causal_work_bytes(c->T, c->p0, c->Nh, c->dqk, c->dv);
    assert_true(wb > 0);
    float *work = malloc(wb), *o = malloc(sizeof(float) * (size_t)(c->T * c->ldo));
    for (int64_t i = 0; i < c->T * c->ldo; i++) o[i] = NAN;   /* every output must be written */
    assert_int_equal(vt_attn_causal(c->T, c->p0, c->Nh, c->dqk, c->dv, c->scale, c->q, c->ldq, c->kc, c->ldk, c->vc,
                                    c->ldv, o, c->ldo, work, wb),
                     0);
    free(work);
    return o;
}

static float *run_ref(const attn_case *c) {
    float *sc = malloc(vt_attn_causal_ref_work_bytes(c->T, c->p0));
    float *o = malloc(sizeof(float) * (size_t)(c->T * c->ldo));
    vt_attn_causal_ref(c->T, c->p0, c->Nh, c->dqk, c->dv, c->scale, c->q, c->ldq, c->kc, c->ldk, c->vc, c->ldv, o,
                       c->ldo, sc);
    free(sc);
    return o;
}

/* Independent reference: everything in f64, the textbook formula. */
static double *run_f64(const attn_case *c, double *mag) {
    double *o = calloc((size_t)(c->T * c->Nh * c->dv), sizeof(double));
    double *s = malloc(sizeof(double) * (size_t)(c->p0 + c->T));
    *mag = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->Nh; h++) {
            const int64_t n = c->p0 + t + 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, aacc = 0;
                for (int64_t i = 0; i < c->dqk; i++) {
                    double x = (double)c->q[t * c->ldq + h * c->dqk + i] * c->kc[j * c->ldk + h * c->dqk + i];
                    acc += x;
                    aacc += fabs(x);
                }
                s[j] = acc * (double)c->scale;
                if (aacc * c->scale > *mag) *mag = aacc * c->scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
            double *oh = o + (t * c->Nh + h) * c->dv;
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = 0; i < c->dv; i++) oh[i] += s[j] / sum * c->vc[j * c->ldv + h * c->dv + i];
        }
    free(s);
    return o;
}

/* max |a - b| / max |b| over the T x Nh x dv outputs (a with stride lda; b f32 or f64, dense) */
static double rel_err_f64(const attn_case *c, const float *a, const double *b) {
    double num = 0, den = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t k = 0; k < c->Nh * c->dv; k++) {
            double x = a[t * c->ldo + k], y = b[t * c->Nh * c->dv + k];
            if (!(fabs(x - y) <= num)) num = fabs(x - y);   /* NaN propagates */
            if (fabs(y) > den) den = fabs(y);
        }
    return num / den;
}

static double rel_err(const attn_case *c, const float *a, const float *b) {
    double num = 0, den = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t k = 0; k < c->Nh * c->dv; k++) {
            double x = a[t * c->ldo + k], y = b[t * c->ldo + k];
            if (!(fabs(x - y) <= num)) num = fabs(x - y);
            if (fabs(y) > den) den = fabs(y);
        }
    return num / den;
}

static double worst_blk = 0, worst_ref = 0, worst_pair = 0;

/* Blocked and reference against f64 and each other, within TOL. */
static void check_case(int64_t T, int64_t p0, int64_t Nh, int64_t dqk, int64_t dv, float amp, int pad) {
    attn_case c = make_case(T, p0, Nh, dqk, dv, amp, pad, 1000003u * (uint64_t)(T + 7 * p0 + 131 * Nh) + (uint64_t)pad);
    float *ob = run_blocked(&c), *or_ = run_ref(&c);
    double mag, *o64 = run_f64(&c, &mag);
    const double tol = TOL * (mag > 1 ? mag : 1);
    double eb = rel_err_f64(&c, ob, o64), er = rel_err_f64(&c, or_, o64), ebr = rel_err(&c, ob, or_);
    if (eb * TOL / tol > worst_blk) worst_blk = eb * TOL / tol;
    if (er * TOL / tol > worst_ref) worst_ref = er * TOL / tol;
    if (ebr * TOL / tol > worst_pair) worst_pair = ebr * TOL / tol;
    if (getenv("ATTN_VERBOSE"))
        printf("T=%4lld p0=%4lld Nh=%lld dqk=%3lld amp=%6g mag=%8.3g  blk %.3g ref %.3g pair %.3g | /mag %.3g %.3g %.3g\n",
               (long long)T, (long long)p0, (long long)Nh, (long long)dqk, amp, mag, eb, er, ebr, eb / mag, er / mag,
               ebr / mag);
    if (!(eb <= tol && er <= tol && ebr <= tol))
        fail_msg("T=%lld p0=%lld Nh=%lld dqk=%lld dv=%lld amp=%g: blocked vs f64 %.3g, reference vs f64 %.3g, "
                 "blocked vs reference %.3g (tolerance %.2g)",
                 (long long)T, (long long)p0, (long long)Nh, (long long)dqk, (long long)dv, amp, eb, er, ebr, tol);
    free(ob); free(or_); free(o64);
    free_case(&c);
}

static const int64_t Ts[] = {1, 2, 63, 64, 65, 300};
static const int64_t P0s[] = {0, 1, 100, 1000};

static void test_small_config(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
        for (size_t j = 0; j < sizeof P0s / sizeof *P0s; j++) check_case(Ts[i], P0s[j], 8, 96, 64, 1.0f, 0);
    check_case(1, 2000, 8, 96, 64, 1.0f, 0);   /* decode with split keys */
    check_case(2, 1100, 8, 96, 64, 1.0f, 0);
}

static void test_tiny_shape_strided(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
        for (size_t j = 0; j < sizeof P0s / sizeof *P0s; j++) check_case(Ts[i], P0s[j], 2, 12, 8, 1.0f, 3);
    check_case(130, 1100, 2, 12, 8, 1.0f, 1);   /* split keys with several query blocks */
}

/* Scores of std ~20 (softmax saturates: one key takes nearly all the weight,
 * most exps underflow to 0) and of std ~3e-5 (nearly uniform weights). */
static void test_large_and_tiny_scores(void **state) {
    (void)state;
    const float amps[] = {60.0f, 1e-4f};
    for (int a = 0; a < 2; a++) {
        check_case(1, 0, 8, 96, 64, amps[a], 0);
        check_case(65, 0, 8, 96, 64, amps[a], 0);
        check_case(300, 100, 8, 96, 64, amps[a], 0);
        check_case(1, 2000, 8, 96, 64, amps[a], 0);
        check_case(65, 1000, 2, 12, 8, amps[a], 2);
    }
}

/* Same bits for 1, 2 and 3 threads, with a workspace that fits one thread
 * only, and with the scalar softmax row pass instead of the AVX-512 one. */
static void test_thread_count_invariance(void **state) {
    (void)state;
    const int64_t shapes[][5] = {{300, 0, 8, 96, 64}, {65, 100, 8, 96, 64}, {1, 2000, 8, 96, 64},
                                 {2, 1100, 8, 96, 64}, {130, 1100, 2, 12, 8}, {1, 4095, 2, 12, 8}};
    const int saved = omp_get_max_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t *x = shapes[s];
        attn_case c = make_case(x[0], x[1], x[2], x[3], x[4], 1.0f, 1, 77 + s);
        const size_t n = sizeof(float) * (size_t)(c.T * c.ldo);
        omp_set_num_threads(1);
        float *o1 = run_blocked(&c);
        for (int th = 2; th <= 3; th++) {
            omp_set_num_threads(th);
            float *ot = run_blocked(&c);
            if (memcmp(o1, ot, n)) fail_msg("shape %zu: %d threads differ from 1 thread", s, th);
            free(ot);
        }
        /* 3 threads asked for, room for one: still the same bits */
        omp_set_num_threads(1);
        size_t wb1 = vt_attn_causal_work_bytes(c.T, c.p0, c.Nh, c.dqk, c.dv);
        omp_set_num_threads(3);
        float *w = malloc(wb1), *o = malloc(n);
        for (int64_t i = 0; i < c.T * c.ldo; i++) o[i] = NAN;   /* the same padding as run_blocked's */
        assert_int_equal(vt_attn_causal(c.T, c.p0, c.Nh, c.dqk, c.dv, c.scale, c.q, c.ldq, c.kc, c.ldk, c.vc, c.ldv, o,
                                        c.ldo, w, wb1),
                         0);
        if (memcmp(o1, o, n)) fail_msg("shape %zu: a one-thread workspace changed the result", s);
        /* the scalar row pass gives the AVX-512 one's bits */
        int saved_isa = vt_attn_use_avx512(0);
        float *os = run_blocked(&c);
        vt_attn_use_avx512(saved_isa);
        if (memcmp(o1, os, n)) fail_msg("shape %zu: the scalar softmax pass differs from the %s one", s,
                                        saved_isa ? "AVX-512" : "scalar");
        free(os); free(w); free(o); free(o1);
        free_case(&c);
    }
    omp_set_num_threads(saved);
}

/* A prefill of T tokens, then the last rows recomputed one at a time as
 * decode steps (T=1, p0=t) over the same cache: each equals the prefill's row. */
static void check_decode_after_prefill(int64_t T, int64_t Nh, int64_t dqk, int64_t dv, int64_t ndec) {
    attn_case c = make_case(T, 0, Nh, dqk, dv, 1.0f, 0, 4242 + T);
    float *op = run_blocked(&c);
    for (int64_t t = T - ndec; t < T; t++) {
        attn_case d = c;
        d.T = 1;
        d.p0 = t;
        d.q = c.q + t * c.ldq;
        float *od = run_blocked(&d);
        double num = 0, den = 0;
        for (int64_t k = 0; k < Nh * dv; k++) {
            double a = od[k], b = op[t * c.ldo + k];
            if (!(fabs(a - b) <= num)) num = fabs(a - b);
            if (fabs(b) > den) den = fabs(b);
        }
        if (!(num / den <= TOL)) fail_msg("T=%lld: decode of row %lld differs from the prefill by %.3g", (long long)T,
                                          (long long)t, num / den);
        free(od);
    }
    free(op);
    free_case(&c);
}

static void test_decode_after_prefill(void **state) {
    (void)state;
    check_decode_after_prefill(300, 8, 96, 64, 3);    /* decode without key splits */
    check_decode_after_prefill(1100, 8, 96, 64, 3);   /* decode with 2 key splits */
    check_decode_after_prefill(2100, 2, 12, 8, 3);    /* 4 splits */
}

static void test_bad_arguments(void **state) {
    (void)state;
    attn_case c = make_case(5, 3, 2, 12, 8, 1.0f, 0, 9);
    size_t wb = vt_attn_causal_work_bytes(5, 3, 2, 12, 8);
    float *w = malloc(wb), o[5 * 16];
    assert_int_equal(vt_attn_causal(5, 3, 2, 12, 8, c.scale, c.q, 24, c.kc, 24, c.vc, 16, o, 16, w, wb), 0);
    assert_int_equal(vt_attn_causal(5, 3, 2, 12, 8, c.scale, c.q, 24, c.kc, 24, c.vc, 16, o, 16, w, 100), -1);
    assert_int_equal(vt_attn_causal(0, 3, 2, 12, 8, c.scale, c.q, 24, c.kc, 24, c.vc, 16, o, 16, w, wb), -1);
    assert_int_equal(vt_attn_causal(5, -1, 2, 12, 8, c.scale, c.q, 24, c.kc, 24, c.vc, 16, o, 16, w, wb), -1);
    assert_int_equal(vt_attn_causal(5, 3, 2, 12, 8, c.scale, c.q, 23, c.kc, 24, c.vc, 16, o, 16, w, wb), -1);
    assert_int_equal(vt_attn_causal(5, 3, 2, 12, 8, c.scale, c.q, 24, c.kc, 24, c.vc, 16, o, 15, w, wb), -1);
    assert_int_equal(vt_attn_causal_work_bytes(0, 3, 2, 12, 8), 0);
    free(w);
    free_case(&c);
}

static int report(void **state) {
    (void)state;
    printf("test_attn: worst relative error: blocked vs f64 %.3g, reference vs f64 %.3g, blocked vs reference %.3g "
           "(tolerance %.1g)\n",
           worst_blk, worst_ref, worst_pair, TOL);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_config),
        cmocka_unit_test(test_tiny_shape_strided),
        cmocka_unit_test(test_large_and_tiny_scores),
        cmocka_unit_test(test_thread_count_invariance),
        cmocka_unit_test(test_decode_after_prefill),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
