/* test_localize_search.c — ddmin over layer sets (harness/localize_search.c)
 * on planted answers: a single culprit in at most 2 ceil(log2 n) tests, two
 * culprits needed together, the complement search (largest passing set),
 * and an undecided removal reported, never taken for a pass. */
#include "tests/unit/vt_test.h"

#include <math.h>

#include "harness/localize_search.h"
#include "harness/util.h"

/* A planted model: the set fails when it holds every unit of `need` (AND),
 * or any unit of `any` (OR); `undecided` units make a set that holds them
 * and would pass undecided instead. */
typedef struct planted {
    int64_t n, calls;
    uint8_t need[128], any[128], undecided[128];
} planted;

static int oracle(void *ctx, const uint8_t *set, int64_t n, int *outcome) {
    planted *p = ctx;
    p->calls++;
    int has_need = 0, all_need = 1, any = 0, und = 0;
    for (int64_t i = 0; i < n; i++) {
        if (p->need[i]) { has_need = 1; all_need &= set[i] != 0; }
        any |= p->any[i] && set[i];
        und |= p->undecided[i] && set[i];
    }
    int fail = any || (has_need && all_need);
    *outcome = fail ? LAB_LOC_FAIL : und ? LAB_LOC_UNDECIDED : LAB_LOC_PASS;
    return LAB_OK;
}

static void full(uint8_t *u, int64_t n) { memset(u, 1, (size_t)n); }

static void test_single_culprit_bound(void **state) {
    (void)state;
    const int64_t sizes[] = {2, 3, 8, 16, 27, 48, 96, 128};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        const int64_t bound = 2 * (int64_t)ceil(log2((double)n));
        for (int64_t k = 0; k < n; k++) {
            planted p = {.n = n};
            p.any[k] = 1;
            uint8_t u[128], out[128];
            full(u, n);
            lab_loc_result r;
            assert_int_equal(lab_loc_ddmin(oracle, &p, n, u, 0, out, &r), LAB_OK);
            assert_int_equal(lab_loc_count(out, n), 1);
            assert_true(out[k]);
            assert_false(r.undecided);
            if (r.tests > bound) fail_msg("n %lld, culprit %lld: %lld tests, bound %lld", (long long)n, (long long)k,
                                          (long long)r.tests, (long long)bound);
        }
    }
}

static void test_two_needed_together(void **state) {
    (void)state;
    planted p = {.n = 8};
    p.need[2] = p.need[6] = 1;
    uint8_t u[8], out[8];
    full(u, 8);
    lab_loc_result r;
    assert_int_equal(lab_loc_ddmin(oracle, &p, 8, u, 0, out, &r), LAB_OK);
    assert_int_equal(lab_loc_count(out, 8), 2);
    assert_true(out[2] && out[6]);
}

static void test_two_independent(void **state) {
    (void)state;
    planted p = {.n = 8};
    p.any[2] = p.any[6] = 1;
    uint8_t u[8], out[8];
    full(u, 8);
    lab_loc_result r;
    assert_int_equal(lab_loc_ddmin(oracle, &p, 8, u, 0, out, &r), LAB_OK);
    assert_int_equal(lab_loc_count(out, 8), 1);   /* each alone fails: one of them is 1-minimal */
    assert_true(out[2] || out[6]);
}

/* largest passing: the units to switch off, from all of them */
static void test_complement(void **state) {
    (void)state;
    planted p = {.n = 16};
    p.any[3] = p.any[11] = 1;
    uint8_t u[16], out[16];
    full(u, 16);
    lab_loc_result r;
    assert_int_equal(lab_loc_ddmin(oracle, &p, 16, u, 1, out, &r), LAB_OK);
    assert_int_equal(lab_loc_count(out, 16), 2);   /* off exactly where it fails: the rest passes */
    assert_true(out[3] && out[11]);
    planted q = {.n = 16};
    q.need[4] = q.need[5] = 1;                     /* only together: switching off either is enough */
    assert_int_equal(lab_loc_ddmin(oracle, &q, 16, u, 1, out, &r), LAB_OK);
    assert_int_equal(lab_loc_count(out, 16), 1);
    assert_true(out[4] || out[5]);
}

/* {2, 5} fails (both needed); {2} alone is undecided: the result fails, but
 * whether 5 can go is not known, and the search says so. */
static void test_undecided_removal(void **state) {
    (void)state;
    planted p = {.n = 8};
    p.need[2] = p.need[5] = 1;
    p.undecided[2] = 1;
    uint8_t u[8], out[8];
    full(u, 8);
    lab_loc_result r;
    assert_int_equal(lab_loc_ddmin(oracle, &p, 8, u, 0, out, &r), LAB_OK);
    assert_true(out[2] && out[5]);
    assert_int_equal(lab_loc_count(out, 8), 2);
    assert_true(r.undecided);
}

static int stop_after(void *ctx, const uint8_t *set, int64_t n, int *outcome) {
    planted *p = ctx;
    if (p->calls >= 3) return LAB_EIO;   /* e.g. out of runs, interrupted */
    return oracle(ctx, set, n, outcome);
}

static void test_stop(void **state) {
    (void)state;
    planted p = {.n = 64};
    p.any[40] = 1;
    uint8_t u[64], out[64];
    full(u, 64);
    lab_loc_result r;
    assert_int_equal(lab_loc_ddmin(stop_after, &p, 64, u, 0, out, &r), LAB_EIO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_culprit_bound), cmocka_unit_test(test_two_needed_together),
        cmocka_unit_test(test_two_independent),      cmocka_unit_test(test_complement),
        cmocka_unit_test(test_undecided_removal),    cmocka_unit_test(test_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
