/* test_confound_key.c — a confound's key is its cause (harness/confound_key.h):
 * the same for every run and every night it is on, distinct across causes. */
#include "tests/unit/vt_test.h"

#include "harness/confound_key.h"

static const char *key(int claim, const char *subject, const char *exp, const char *arm, const char *rule,
                       const char *k) {
    static char out[400];
    return lab_confound_key(claim, subject, exp, arm, rule, k, out, sizeof out);
}

static void test_claim_keys(void **state) {
    (void)state;
    assert_string_equal(key(1, "c1", "", "", "R1", "moe-scatter"), "c1/R1/moe-scatter");
    assert_string_equal(key(1, "c1", "", "", "R1", "reference:moe-scatter"), "c1/R1/reference:moe-scatter");
    assert_string_equal(key(1, "c1", "", "", "R6", ""), "c1/R6");
    assert_string_equal(key(1, "c1", "", "", "R4", "runs.arm"), "c1/R4/runs.arm");
    /* a claim's copy of its run's flag: the run's id is left out */
    assert_string_equal(key(1, "c1", "", "", "R3", "run12:ref11"), "c1/R3");
    assert_string_equal(key(1, "c1", "", "", "R3", "run12:moe.scatter"), "c1/R3/moe.scatter");
}

static void test_run_keys_drop_run_ids(void **state) {
    (void)state;
    /* two runs of one arm, two nights: one key */
    assert_string_equal(key(0, "33", "e", "a", "R2", ""), "e/a/R2");
    assert_string_equal(key(0, "37", "e", "a", "R2", ""), "e/a/R2");
    assert_string_equal(key(0, "33", "e", "a", "R1", "moe-scatter"), "e/a/R1/moe-scatter");
    assert_string_equal(key(0, "33", "e", "a", "R4", "ref32"), "e/a/R4");
    assert_string_equal(key(0, "33", "e", "a", "R5", "run40"), "e/a/R5");
    assert_string_equal(key(0, "33", "e", "a", "R3", "residual.stream"), "e/a/R3/residual.stream");
    /* "runner" is not a run id */
    assert_string_equal(key(0, "33", "e", "a", "R3", "runner"), "e/a/R3/runner");
    /* a run no longer in the database */
    assert_string_equal(key(0, "9", "", "", "R2", ""), "run 9/R2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_keys),
        cmocka_unit_test(test_run_keys_drop_run_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
