/*
 * test_metrics.c — the harness statistics against values computed by hand.
 *
 * Each expected number below is derived in the comment next to it, so that
 * a reader can check the test without trusting the code under test.
 */
#include "tests/unit/vt_test.h"

#include <math.h>

#include "harness/metrics.h"
#include "model/vt.h"

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static void test_wilson_edges(void **state) {
    (void)state;
    double lo, hi;
    /* k = 0: lo = 0 exactly; hi = z^2 / (n + z^2) = 3.841459 / 13.841459. */
    lab_wilson(0, 10, LAB_Z95, &lo, &hi);
    assert_true(lo == 0.0);
    NEAR(hi, 0.2775327998628892, 1e-12);
    /* k = n: hi = 1 exactly; lo = n / (n + z^2) = 10 / 13.841459. */
    lab_wilson(10, 10, LAB_Z95, &lo, &hi);
    assert_true(hi == 1.0);
    NEAR(lo, 0.7224672001371107, 1e-12);
    /* n = 0: nothing is known. */
    lab_wilson(0, 0, LAB_Z95, &lo, &hi);
    assert_true(lo == 0.0 && hi == 1.0);
}

static void test_wilson_mid(void **state) {
    (void)state;
    double lo, hi;
    /* 4/128 (the recorded claim): p = 0.03125, centre = (p + z^2/256)/(1 + z^2/128)
     * = 0.046131/1.030011 = 0.044908, half-width 0.032690. */
    lab_wilson(4, 128, LAB_Z95, &lo, &hi);
    NEAR(lo, 0.01221826524505338, 1e-12);
    NEAR(hi, 0.07759763126136077, 1e-12);
    /* 121/128 straddles 0.9: the INCONCLUSIVE case of the shipped experiment. */
    lab_wilson(121, 128, LAB_Z95, &lo, &hi);
    NEAR(lo, 0.8914150997002529, 1e-12);
    NEAR(hi, 0.9732597986186536, 1e-12);
}

static void test_mcnemar_exact(void **state) {
    (void)state;
    /* b=1, c=5: n=6, P[X<=1] = (C(6,0)+C(6,1))/2^6 = 7/64; p = 14/64. */
    NEAR(lab_mcnemar_exact(1, 5), 14.0 / 64.0, 1e-12);
    NEAR(lab_mcnemar_exact(5, 1), 14.0 / 64.0, 1e-12);
    /* b=0, c=3: p = 2 * 1/8. */
    NEAR(lab_mcnemar_exact(0, 3), 0.25, 1e-12);
    /* b=2, c=2: 2 * 11/16 > 1, clamped. */
    NEAR(lab_mcnemar_exact(2, 2), 1.0, 1e-12);
    /* no discordant pairs: no evidence. */
    NEAR(lab_mcnemar_exact(0, 0), 1.0, 0);
    /* b=0, c=20: 2 / 2^20. */
    NEAR(lab_mcnemar_exact(0, 20), 2.0 / 1048576.0, 1e-18);
    /* large counts stay finite and in [0, 1]. */
    double p = lab_mcnemar_exact(5000, 5200);
    assert_true(p > 0.0 && p < 1.0);
}

static void test_kl(void **state) {
    (void)state;
    float a[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    /* identical logits: exactly 0 (clamped at 0 against rounding). */
    assert_true(lab_kl_logits(a, a, 4, NULL) == 0.0);
    /* a constant shift does not change the distribution. */
    float b[4] = {11.0f, 8.0f, 10.5f, 13.0f};
    NEAR(lab_kl_logits(a, b, 4, NULL), 0.0, 1e-12);
    /* P = (1/2, 1/2), Q = softmax(ln 3, 0) = (3/4, 1/4):
     * KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3). */
    float p[2] = {0.0f, 0.0f}, q[2] = {(float)log(3.0), 0.0f};
    NEAR(lab_kl_logits(p, q, 2, NULL), 0.5 * log(4.0 / 3.0), 1e-7);
    double lp[2];
    double lse = lab_log_softmax(p, 2, lp);
    NEAR(lse, log(2.0), 1e-12);
    NEAR(lp[0], -log(2.0), 1e-12);
}

static void test_argmax_topk(void **state) {
    (void)state;
    float x[6] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.0f};
    /* ties go to the lower id; NaN is skipped */
    assert_int_equal(lab_argmax(x, 6), 1);
    int32_t ids[3];
    float vals[3];
    assert_int_equal(lab_topk(x, 6, 3, ids, vals), 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 5);
    assert_true(vals[2] == 1.0f);
    /* k larger than n is clamped */
    int32_t ids2[8];
    float v2[8];
    assert_int_equal(lab_topk(x, 3, 8, ids2, v2), 3);
    assert_int_equal(ids2[0], 1);
    assert_int_equal(ids2[2], 2);
}

static void test_quantile_rel_l2(void **state) {
    (void)state;
    double v[4] = {4, 1, 3, 2};
    /* numpy: quantile([1,2,3,4], 0.5) = 2.5, 0.99 -> 1 + 0.99*3 = 3.97th -> 3.97 */
    NEAR(lab_quantile(v, 4, 0.5), 2.5, 1e-12);
    NEAR(lab_quantile(v, 4, 0.99), 3.97, 1e-12);
    NEAR(lab_quantile(v, 4, 0.0), 1.0, 0);
    assert_true(isnan(lab_quantile(v, 0, 0.5)));
    float a[2] = {3.0f, 4.0f}, b[2] = {3.0f, 0.0f};
    /* ||a-b|| = 4, ||b|| = 3 */
    NEAR(lab_rel_l2(a, b, 2), 4.0 / 3.0, 1e-12);
    NEAR(lab_rel_l2(a, a, 2), 0.0, 0);
    float z[2] = {0, 0};
    assert_true(isinf(lab_rel_l2(a, z, 2)));
    NEAR(lab_rel_l2(z, z, 2), 0.0, 0);
    NEAR(lab_max_abs_diff(a, b, 2), 4.0, 0);
}

static void test_decide(void **state) {
    (void)state;
    assert_int_equal(lab_decide(0.92, 0.99, 0.9, 1), LAB_SUPPORTED);
    assert_int_equal(lab_decide(0.01, 0.08, 0.9, 1), LAB_REFUTED);
    assert_int_equal(lab_decide(0.89, 0.97, 0.9, 1), LAB_INCONCLUSIVE);
    /* the boundary counts as the good side for >= */
    assert_int_equal(lab_decide(0.9, 0.95, 0.9, 1), LAB_SUPPORTED);
    assert_int_equal(lab_decide(0.01, 0.04, 0.05, 0), LAB_SUPPORTED);
    assert_int_equal(lab_decide(0.06, 0.2, 0.05, 0), LAB_REFUTED);
    assert_string_equal(lab_verdict_name(LAB_INCONCLUSIVE), "INCONCLUSIVE");
}

/* The f16 store of full logits uses the model's conversion (vt.h). */
static void test_f16(void **state) {
    (void)state;
    assert_int_equal(vt_f16_bits_from_f32(1.0f), 0x3c00);
    assert_int_equal(vt_f16_bits_from_f32(-2.0f), 0xc000);
    assert_int_equal(vt_f16_bits_from_f32(65504.0f), 0x7bff);
    assert_int_equal(vt_f16_bits_from_f32(70000.0f), 0x7c00);      /* overflow -> inf */
    assert_int_equal(vt_f16_bits_from_f32(0.1f), 0x2e66);          /* 0.0999755859375 */
    assert_int_equal(vt_f16_bits_from_f32(ldexpf(1.0f, -24)), 0x0001); /* smallest subnormal */
    assert_int_equal(vt_f16_bits_from_f32(ldexpf(1.0f, -26)), 0x0000); /* below half of it */
    /* round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    assert_int_equal(vt_f16_bits_from_f32(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(vt_f16_bits_from_f32(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    assert_true(isnan(vt_f32_from_f16_bits(vt_f16_bits_from_f32(NAN))));
    /* every finite half round-trips exactly through f32 */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        assert_int_equal(vt_f16_bits_from_f32(vt_f32_from_f16_bits((uint16_t)h)), h);
    }
}

static void test_splitmix(void **state) {
    (void)state;
    /* Reference value of splitmix64 from state 0 (Vigna's published code). */
    uint64_t s = 0;
    assert_true(lab_splitmix64(&s) == 0xe220a8397b1dcdafull);
    assert_true(lab_splitmix64(&s) == 0x6e789e6aa1b965f4ull);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wilson_edges), cmocka_unit_test(test_wilson_mid),
        cmocka_unit_test(test_mcnemar_exact), cmocka_unit_test(test_kl),
        cmocka_unit_test(test_argmax_topk), cmocka_unit_test(test_quantile_rel_l2),
        cmocka_unit_test(test_decide), cmocka_unit_test(test_f16), cmocka_unit_test(test_splitmix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
