/*
 * test_vmath.c — vmath.h's exp and log1p and the activations built on them (ops.c):
 * accurate against double-precision libm, and the same bits whichever form
 * computes an element (scalar, 16 AVX-512 lanes, a masked tail; forced
 * scalar with VTLAB_GEMM_ISA's switch), so a result never depends on the
 * instruction set or on where an array is cut.
 */
#include "tests/unit/vt_test.h"

#include <math.h>

#include "model/gemm.h"
#include "model/model.h"
#include "model/vmath.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {   /* [0, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* |got - want| in units of the last place of the f32 nearest want. */
static double ulps(float got, double want) {
    const float w = (float)want;
    const double ulp = w == 0.0f ? ldexp(1.0, -149) : fabs((double)nextafterf(w, INFINITY) - (double)w);
    return fabs((double)got - want) / ulp;
}

/* The same bits, or both NaN: a NaN's sign and payload are not kept alike
 * (the compiler may turn the scalar -x of a NaN into either sign: the -O1
 * and -O2 builds differ). */
static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

/* vt_expf against exp in double over its whole range: at most 2 ulp (Cephes
 * documents ~1), 0 below -87, +inf above 88, NaN kept. */
static void test_expf_accuracy(void **state) {
    (void)state;
    double worst = 0, at = 0;
    for (int i = 0; i < 400000; i++) {
        const float x = (float)(-87.0 + 175.0 * urand());
        const double e = ulps(vt_expf(x), exp((double)x));
        if (e > worst) worst = e, at = x;
    }
    print_message("vt_expf: worst %.2f ulp at x = %.7g over [-87, 88]\n", worst, at);
    if (worst > 2.0) fail_msg("vt_expf: %.2f ulp at x = %.9g", worst, at);
    assert_true(vt_expf(0.0f) == 1.0f);
    assert_true(vt_expf(-87.5f) == 0.0f && vt_expf(-INFINITY) == 0.0f);
    assert_true(isinf(vt_expf(88.5f)) && isinf(vt_expf(INFINITY)));
    assert_true(isnan(vt_expf(NAN)));
}

/* The activations against double precision: a few ulp. */
static void test_activations_accuracy(void **state) {
    (void)state;
    double ws = 0, wg = 0, wp = 0;
    for (int i = 0; i < 200000; i++) {
        const float x = (float)(-30.0 + 60.0 * urand());
        const double xd = x;
        ws = fmax(ws, ulps(vt_silu(x), xd / (1.0 + exp(-xd))));
        wg = fmax(wg, ulps(vt_sigmoid(x), 1.0 / (1.0 + exp(-xd))));
        wp = fmax(wp, ulps(vt_softplus(x), xd > 20.0 ? xd : log1p(exp(xd))));
    }
    print_message("worst ulp over [-30, 30]: silu %.2f, sigmoid %.2f, softplus %.2f\n", ws, wg, wp);
    if (ws > 4 || wg > 4 || wp > 4) fail_msg("silu %.2f sigmoid %.2f softplus %.2f ulp", ws, wg, wp);
    /* log1p of what a softplus passes it, u = exp(x) in (0, e^20], and tiny u where 1 + u rounds to 1 */
    double wl = 0, at = 0;
    for (int i = 0; i < 200000; i++) {
        const float u = i < 1000 ? (float)ldexp(urand(), -24 - i % 40) : (float)exp(-100.0 + 120.0 * urand());
        const double e = ulps(vt_log1pf_pos(u), log1p((double)u));
        if (e > wl) wl = e, at = u;
    }
    print_message("vt_log1pf_pos: worst %.2f ulp at u = %.7g\n", wl, at);
    if (wl > 2.0) fail_msg("vt_log1pf_pos: %.2f ulp at u = %.9g", wl, at);
}

/* Inputs every form must agree on: the clamps' edges, the specials, random. */
static float *inputs(int64_t n) {
    static const float edge[] = {0.0f,    -0.0f,  1.0f,     -1.0f,  -87.0f, -86.99999f, -87.00001f, 88.0f,
                                 87.9999f, 88.0001f, 1e-30f, -1e-30f, 1e-45f, INFINITY,   -INFINITY,  NAN,
                                 20.0f,   -20.0f, 0.6931472f};
    float *x = malloc(sizeof *x * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = i < (int64_t)(sizeof edge / sizeof *edge) ? edge[i] : (float)(-100.0 + 200.0 * urand());
    return x;
}

/* Every array form, every length to 40 (tails of each size) and a long one,
 * at every offset into the array, equals the scalar form bit for bit, with
 * AVX-512, forced AVX2 and forced scalar. */
static void test_arrays_are_the_scalar_form(void **state) {
    (void)state;
    enum { N = 1000 };
    float *x = inputs(N), *b = inputs(N), *y = malloc(sizeof *y * N), *a = malloc(sizeof *a * N);
    const char *isas[3] = {"avx512", "avx2", "scalar"}, *was = vt_gemm_isa();
    int ran = 0;
    for (int s = 0; s < 3; s++) {
        if (vt_gemm_force_isa(isas[s]) != 0) continue;
        ran++;
        for (int64_t n = 0; n <= N; n = n < 40 ? n + 1 : N + 1)
            for (int64_t off = 0; off < 3 && off + n <= N; off++) {
                vt_exp_array(x + off, y, n);
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(y[i], vt_expf(x[off + i])))
                        fail_msg("%s exp n=%lld [%lld]: %a, scalar %a", isas[s], (long long)n, (long long)i, y[i],
                                 vt_expf(x[off + i]));
                vt_sigmoid_array(x + off, y, n);
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(y[i], vt_sigmoid(x[off + i])))
                        fail_msg("%s sigmoid n=%lld [%lld]: %a, scalar %a", isas[s], (long long)n, (long long)i,
                                 y[i], vt_sigmoid(x[off + i]));
                vt_softplus_array(x + off, y, n);
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(y[i], vt_softplus(x[off + i])))
                        fail_msg("%s softplus n=%lld [%lld]: %a, scalar %a", isas[s], (long long)n, (long long)i,
                                 y[i], vt_softplus(x[off + i]));
                memcpy(a, x + off, sizeof *a * (size_t)n);
                vt_silu_mul(a, b + off, n);
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(a[i], vt_silu(x[off + i]) * b[off + i]))
                        fail_msg("%s silu*b n=%lld [%lld]: %a, scalar %a", isas[s], (long long)n, (long long)i, a[i],
                                 vt_silu(x[off + i]) * b[off + i]);
                memcpy(a, x + off, sizeof *a * (size_t)n);
                vt_silu_mul(a, NULL, n);
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(a[i], vt_silu(x[off + i])))
                        fail_msg("%s silu n=%lld [%lld]: %a, scalar %a", isas[s], (long long)n, (long long)i, a[i],
                                 vt_silu(x[off + i]));
            }
    }
    vt_gemm_force_isa(was);
    if (ran < 3) print_message("%d of the 3 forms here (no AVX-512 or no AVX2)\n", ran);
    free(x), free(b), free(y), free(a);
}

/* In place (y == x) is allowed. */
static void test_in_place(void **state) {
    (void)state;
    float *x = inputs(100), *y = malloc(sizeof *y * 100);
    memcpy(y, x, sizeof *y * 100);
    vt_exp_array(y, y, 100);
    for (int i = 0; i < 100; i++) assert_true(same_bits(y[i], vt_expf(x[i])));
    free(x), free(y);
}

/* vt_sum_squares (rmsnorm, the KDA norms) against a long double sum, at every
 * length 0..40 and 128, 1024, 1029 (the tails of its 8 partial sums): within
 * 4 ulp of double (measured: 2.5), and every element counted (a dropped
 * or doubled element is off by far more). Its order is fixed: the same call
 * twice, and on a copy at another alignment, gives the same bits. */
static void test_sum_squares(void **state) {
    (void)state;
    static const int64_t big[] = {128, 1024, 1029};
    float *x = malloc(sizeof *x * 1030);
    double worst = 0;
    for (int c = 0; c < 41 + 3; c++) {
        const int64_t n = c <= 40 ? c : big[c - 41];
        for (int64_t i = 0; i < n; i++) x[i] = (float)((urand() - 0.5) * 40.0);
        long double want = 0;
        for (int64_t i = 0; i < n; i++) want += (long double)x[i] * x[i];
        const double got = vt_sum_squares(x, n);
        const double err = want == 0 ? fabs(got) : fabs((double)((got - want) / want)) / 0x1p-52;
        if (err > worst) worst = err;
        if (err > 4.0) fail_msg("vt_sum_squares, n = %lld: %.17g against %.17Lg (%.2f ulp)", (long long)n, got, want, err);
        assert_true(memcmp(&got, &(double){vt_sum_squares(x, n)}, sizeof got) == 0);
        memmove(x + 1, x, sizeof *x * (size_t)n);
        const double moved = vt_sum_squares(x + 1, n);
        assert_true(memcmp(&got, &moved, sizeof got) == 0);
    }
    print_message("vt_sum_squares: worst %.2f ulp of double against long double\n", worst);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_expf_accuracy),
        cmocka_unit_test(test_activations_accuracy),
        cmocka_unit_test(test_arrays_are_the_scalar_form),
        cmocka_unit_test(test_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
