/*
 * test_paths.c — paths named inside files (harness/paths.c): an experiment's
 * relative to the experiment file, a ledger's relative to the ledger
 * directory's parent, absolute as written; and where the synthetic-model
 * cache is (VTLAB_CACHE, XDG_CACHE_HOME, HOME, in that order; never the
 * current directory).
 */
#include "vt_test.h"

#include <stdlib.h>

#include "harness/paths.h"
#include "harness/util.h"

static void check_beside(const char *from, const char *p, const char *want) {
    char *got = lab_path_beside(from, p);
    assert_non_null(got);
    if (strcmp(got, want)) fail_msg("lab_path_beside(%s, %s) = %s, expected %s", from, p, got, want);
    free(got);
}

static void check_ledger(const char *dir, const char *p, const char *want) {
    char *got = lab_path_in_ledger(dir, p);
    assert_non_null(got);
    if (strcmp(got, want)) fail_msg("lab_path_in_ledger(%s, %s) = %s, expected %s", dir, p, got, want);
    free(got);
}

static void test_beside_the_experiment(void **state) {
    (void)state;
    check_beside("experiments/a.json", "ids.txt", "experiments/ids.txt");
    check_beside("experiments/a.json", "../data/ids.txt", "experiments/../data/ids.txt");
    check_beside("/p/experiments/a.json", "configs/c.json", "/p/experiments/configs/c.json");
    check_beside("a.json", "ids.txt", "ids.txt");          /* a file in the current directory: as written */
    check_beside("experiments/a.json", "/abs/ids.txt", "/abs/ids.txt");
}

static void test_in_the_ledger(void **state) {
    (void)state;
    check_ledger("specs", "experiments/x.json", "experiments/x.json");
    check_ledger("specs/", "experiments/x.json", "experiments/x.json");
    check_ledger("proj/specs", "experiments/x.json", "proj/experiments/x.json");
    check_ledger("/r/specs/", "experiments/x.json", "/r/experiments/x.json");
    check_ledger("/specs", "e.json", "/e.json");
    check_ledger(".", "e.json", "./../e.json");           /* the parent of "." is ".." */
    check_ledger("a/..", "e.json", "a/../../e.json");
    check_ledger("specs", "/abs/e.json", "/abs/e.json");
}

static void test_cache_dir(void **state) {
    (void)state;
    char dir[4096], err[256];
    setenv("VTLAB_CACHE", "/c", 1);
    setenv("XDG_CACHE_HOME", "/x", 1);
    setenv("HOME", "/h", 1);
    assert_int_equal(lab_cache_dir(dir, sizeof dir, err, sizeof err), 0);
    assert_string_equal(dir, "/c");
    unsetenv("VTLAB_CACHE");
    assert_int_equal(lab_cache_dir(dir, sizeof dir, err, sizeof err), 0);
    assert_string_equal(dir, "/x/vtlab");
    setenv("XDG_CACHE_HOME", "relative", 1);   /* the XDG spec: a relative value is ignored */
    assert_int_equal(lab_cache_dir(dir, sizeof dir, err, sizeof err), 0);
    assert_string_equal(dir, "/h/.cache/vtlab");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    assert_int_equal(lab_cache_dir(dir, sizeof dir, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "VTLAB_CACHE");
}

static void test_shipped_config_names(void **state) {
    (void)state;
    char out[4200];
    /* only a shipped config's own names; never a path that leaves the configs directory */
    assert_int_equal(lab_shipped_config("model/configs/../configs/kimi-linear-tiny.json", out, sizeof out), 0);
    assert_int_equal(lab_shipped_config("other/kimi-linear-tiny.json", out, sizeof out), 0);
    assert_int_equal(lab_shipped_config("model/configs/", out, sizeof out), 0);
    assert_int_equal(lab_shipped_config("..", out, sizeof out), 0);
    assert_int_equal(lab_shipped_config("model/configs/no-such-config.json", out, sizeof out), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beside_the_experiment),
        cmocka_unit_test(test_in_the_ledger),
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_shipped_config_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
