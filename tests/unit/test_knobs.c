/* test_knobs.c — the knob registry: validation, did-you-mean, hashing. */
#include "tests/unit/vt_test.h"

#include "model/vt.h"

static void test_defaults_and_set(void **state) {
    (void)state;
    vt_knobset *ks;
    char err[512];
    assert_int_equal(vt_knobset_new(&ks), 0);
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_BF16_STREAM"), "0");
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_ROUTER_WEIGHTS"), "unbiased");
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM", "1", err, sizeof err), 0);
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_BF16_STREAM"), "1");
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM", "2", err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "expected 0 or 1");
    /* a bool is 0 or 1, as documented (issue 33): other spellings are
     * refused, the value they mean named; the knob keeps its value */
    const char *const yes[] = {"true", "yes", "on", "Yes", "TRUE"}, *const no[] = {"false", "no", "off", "Off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM", yes[i], err, sizeof err), VT_STATUS_INPUT);
        VT_ASSERT_CONTAINS(err, "expected 0 or 1 (did you mean 1?)");
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM", no[i], err, sizeof err), VT_STATUS_INPUT);
        VT_ASSERT_CONTAINS(err, "expected 0 or 1 (did you mean 0?)");
    }
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM", "", err, sizeof err), VT_STATUS_INPUT);
    assert_null(strstr(err, "did you mean"));
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_BF16_STREAM"), "1");
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_ROUTER_WEIGHTS", "bias", err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "unbiased|biased");
    assert_int_equal(vt_knobset_set(ks, "VT_THREADS", "-1", err, sizeof err), VT_STATUS_INPUT);
    assert_null(vt_knobset_get(ks, "VT_NOPE"));
    vt_knobset_free(ks);
}

static void test_unknown_env_did_you_mean(void **state) {
    (void)state;
    vt_knobset *ks;
    char err[512];
    assert_int_equal(vt_knobset_new(&ks), 0);
    char *env[] = {"HOME=/root", "VT_KIMI_BF16_STRAEM=1", NULL};
    assert_int_equal(vt_knobset_from_env(ks, env, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "unknown knob VT_KIMI_BF16_STRAEM");
    VT_ASSERT_CONTAINS(err, "did you mean VT_KIMI_BF16_STREAM?");
    char *env2[] = {"VT_COMPLETELY_DIFFERENT_THING=1", NULL};
    assert_int_equal(vt_knobset_from_env(ks, env2, err, sizeof err), VT_STATUS_INPUT);
    assert_null(strstr(err, "did you mean"));
    /* a name longer than any knob is unknown too, never skipped */
    char *env4[] = {"VT_KIMI_BF16_STREAM_WITH_A_VERY_LONG_SUFFIX_THAT_NO_KNOB_HAS_AT_ALL_X=1", NULL};
    assert_int_equal(vt_knobset_from_env(ks, env4, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "unknown knob");
    char *env3[] = {"PATH=/bin", "VT_PROBE=audit", "XVT_FOO=1", NULL};
    assert_int_equal(vt_knobset_from_env(ks, env3, err, sizeof err), 0);
    assert_string_equal(vt_knobset_get(ks, "VT_PROBE"), "audit");
    vt_knobset_free(ks);
}

static void test_hash_covers_numeric_knobs_only(void **state) {
    (void)state;
    vt_knobset *a, *b;
    char err[512], ha[65], hb[65];
    assert_int_equal(vt_knobset_new(&a), 0);
    assert_int_equal(vt_knobset_new(&b), 0);
    vt_knobset_hash(a, ha);
    vt_knobset_hash(b, hb);
    assert_string_equal(ha, hb);
    assert_int_equal(strlen(ha), 64);
    assert_int_equal(vt_knobset_set(b, "VT_THREADS", "2", err, sizeof err), 0);   /* not numeric */
    assert_int_equal(vt_knobset_set(b, "VT_PROBE", "audit", err, sizeof err), 0); /* not numeric */
    vt_knobset_hash(b, hb);
    assert_string_equal(ha, hb);
    assert_int_equal(vt_knobset_set(b, "VT_KIMI_BF16_STREAM", "1", err, sizeof err), 0);
    vt_knobset_hash(b, hb);
    assert_string_not_equal(ha, hb);
    /* Every recorded run's identity depends on this: the default set hashes as
     * it did before VT_KIMI_ROUTER_RENORM existed (sha256 of the eight sorted
     * "NAME=default\n" lines of the numeric knobs of that time, computed with
     * Python's hashlib), and the new knob counts only when set. */
    assert_string_equal(ha, "b07a111f31e8ffb9c7244bad1c144881d26e882a9a092ce5996d6c8513f64a63");
    assert_int_equal(vt_knobset_set(a, "VT_KIMI_ROUTER_RENORM", "always", err, sizeof err), 0);
    vt_knobset_hash(a, hb);
    assert_string_not_equal(ha, hb);
    vt_knobset_free(a);
    vt_knobset_free(b);
}

/* Each vt_knob_id indexes the registry entry of its knob, and a set's value
 * by id is the value set by name (the ids are what the C code reads). */
static void test_ids_index_the_registry(void **state) {
    (void)state;
    static const struct { vt_knob_id id; const char *name; } want[] = {
        {VT_K_BF16_STREAM, "VT_KIMI_BF16_STREAM"}, {VT_K_BF16_EXPERT_OUT, "VT_KIMI_BF16_EXPERT_OUT"},
        {VT_K_BF16_ACT, "VT_KIMI_BF16_ACT"}, {VT_K_ROUTER_WEIGHTS, "VT_KIMI_ROUTER_WEIGHTS"},
        {VT_K_ROUTER_RENORM, "VT_KIMI_ROUTER_RENORM"}, {VT_K_MLA_KV_NORM_EPS, "VT_KIMI_MLA_KV_NORM_EPS"},
        {VT_K_BACKEND, "VT_BACKEND"}, {VT_K_FAULT, "VT_FAULT"}, {VT_K_THREADS, "VT_THREADS"},
        {VT_K_PROBE, "VT_PROBE"}, {VT_K_TEST_IGNORED, "VT_TEST_IGNORED_KNOB"},
        {VT_K_BF16_STREAM_LAYERS, "VT_KIMI_BF16_STREAM_LAYERS"},
        {VT_K_BF16_EXPERT_OUT_LAYERS, "VT_KIMI_BF16_EXPERT_OUT_LAYERS"},
        {VT_K_BF16_ACT_LAYERS, "VT_KIMI_BF16_ACT_LAYERS"}, {VT_K_TEST_LOSSY_LAYERS, "VT_TEST_LOSSY_LAYERS"},
    };
    assert_int_equal(vt_knob_count(), VT_K_COUNT);
    assert_int_equal(sizeof want / sizeof want[0], VT_K_COUNT);
    vt_knobset *ks = NULL;
    assert_int_equal(vt_knobset_new(&ks), 0);
    char err[256];
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_ROUTER_WEIGHTS", "biased", err, sizeof err), 0);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(vt_knob_at((int)want[i].id)->name, want[i].name);
        assert_string_equal(vt_knobset_value(ks, want[i].id), vt_knobset_get(ks, want[i].name));
    }
    assert_string_equal(vt_knobset_value(ks, VT_K_ROUTER_WEIGHTS), "biased");
    vt_knobset_free(ks);
}

static void test_registry_is_documented(void **state) {
    (void)state;
    const char *must[] = {"VT_KIMI_BF16_STREAM", "VT_KIMI_BF16_EXPERT_OUT", "VT_KIMI_BF16_ACT",
                          "VT_KIMI_ROUTER_WEIGHTS", "VT_KIMI_MLA_KV_NORM_EPS", "VT_THREADS", "VT_BACKEND",
                          "VT_PROBE", "VT_FAULT"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        const vt_knob_info *k = vt_knob_find(must[i]);
        if (!k) fail_msg("knob %s is not declared", must[i]);
        assert_true(strlen(k->doc) > 10);
    }
    /* every fault is an allowed VT_FAULT value */
    vt_knobset *ks;
    char err[512];
    assert_int_equal(vt_knobset_new(&ks), 0);
    for (int i = 0; i < vt_fault_count(); i++)
        assert_int_equal(vt_knobset_set(ks, "VT_FAULT", vt_fault_at(i)->name, err, sizeof err), 0);
    vt_knobset_free(ks);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_set),
        cmocka_unit_test(test_unknown_env_did_you_mean),
        cmocka_unit_test(test_hash_covers_numeric_knobs_only),
        cmocka_unit_test(test_registry_is_documented),
        cmocka_unit_test(test_ids_index_the_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
