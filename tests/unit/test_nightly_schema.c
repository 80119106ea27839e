/* test_nightly_schema.c — schema v10 (issue 33): a database from before it
 * (v9) opens with its nightlies kept, nightly_confounds added and
 * CONFOUNDED a status the nightlies table takes (its CHECK widened in place,
 * harness/store_schema.c migrate_v10_status). Built from the store's own v9, so a
 * later migration applies on top of it as it would in the field. */
#include "tests/unit/vt_test.h"
#include "tests/unit/vt_test_db.h"   /* dbpath, q_int; raw SQL: an older schema's rows, the CHECK's text */

static int setup(void **state) {
    (void)state;
    vt_test_db_reset("nightly-schema");
    return 0;
}
static int teardown(void **state) { return setup(state); }

static int exec(lab_store *st, const char *sql) {
    char err[512];
    return lab_store_exec(st, sql, 0, NULL, err, sizeof err);
}

#define NIGHTLY(id, status) "INSERT INTO nightlies (id, started_at, status, git_commit, code_version, host, pid," \
                            " experiments_dir) VALUES (" #id ", 't', '" status "', 'g', 'c', 'h', 1, 'x')"

static void test_migrate_v9_to_confounded(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "";
    assert_int_equal(lab_store_open_version(&st, dbpath, 9, err, sizeof err), 0);
    assert_int_equal(exec(st, NIGHTLY(1, "PASSED")), 0);
    assert_int_not_equal(exec(st, NIGHTLY(2, "CONFOUNDED")), 0);    /* v9's CHECK */
    assert_int_equal(q_int(st, "SELECT count(*) FROM sqlite_master WHERE name = 'nightly_confounds'"), 0);
    lab_store_close(st);

    if (lab_store_open(&st, dbpath, err, sizeof err)) fail_msg("migrate: %s", err);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    assert_int_equal(q_int(st, "SELECT count(*) FROM nightlies WHERE id = 1 AND status = 'PASSED'"), 1);
    assert_int_equal(exec(st, NIGHTLY(2, "CONFOUNDED")), 0);
    assert_int_not_equal(exec(st, NIGHTLY(3, "GREEN")), 0);          /* still a CHECK */
    assert_int_equal(exec(st, "INSERT INTO nightly_confounds (nightly_id, key, state, is_new, since_nightly, subject,"
                              " rule, reason) VALUES (2, 'c/R1/d', 'open', 1, 2, 'claim c', 'R1', 'why')"), 0);
    assert_int_not_equal(exec(st, "INSERT INTO nightly_confounds (nightly_id, key, state, is_new, since_nightly,"
                                  " subject, rule, reason) VALUES (2, 'c/R2', 'shut', 1, 2, 'claim c', 'R2', 'why')"), 0);
    /* a nightly's confounds go with it (ON DELETE CASCADE), and the file is sound */
    assert_int_equal(exec(st, "DELETE FROM nightlies WHERE id = 2"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM nightly_confounds"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1);
    lab_store_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrate_v9_to_confounded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
