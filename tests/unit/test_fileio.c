/*
 * test_fileio.c — vt_file_write_atomic (model/fileio.c) and the benchmark
 * report writer on top of it (model/bench_report.c): a file appears whole or
 * not at all, a failure leaves the old file and no temp file behind, and a
 * bad report is refused before anything is written.
 */
#include "tests/unit/vt_test.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/bench_report.h"
#include "model/fileio.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/vt-test-fileio-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", g_dir, g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1 << 16, 1);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* Files in g_dir whose name contains ".tmp". */
static int temp_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}

static void test_write_and_replace(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/a.txt", g_dir);
    vt_err e = {0};
    VT_ASSERT_OK(vt_file_write_atomic(path, "first\n", 6, &e), e);
    VT_ASSERT_OK(vt_file_write_atomic(path, "second\n", 7, &e), e);
    char *t = slurp(path);
    assert_string_equal(t, "second\n");
    free(t);
    VT_ASSERT_OK(vt_file_write_atomic(path, "", 0, &e), e);   /* an empty file is a file */
    t = slurp(path);
    assert_string_equal(t, "");
    free(t);
    assert_int_equal(temp_files(), 0);
}

static void test_failure_leaves_old_file(void **state) {
    (void)state;
    char path[128], missing[160];
    snprintf(path, sizeof path, "%s/keep.txt", g_dir);
    snprintf(missing, sizeof missing, "%s/no-such-dir/x.txt", g_dir);
    vt_err e = {0};
    assert_int_equal(vt_file_write_atomic(missing, "x", 1, &e), VT_EIO);
    VT_ASSERT_CONTAINS(e.msg, "no-such-dir/x.txt");
    VT_ASSERT_CONTAINS(e.msg, "No such file or directory");

    VT_ASSERT_OK(vt_file_write_atomic(path, "old\n", 4, &e), e);
    if (geteuid() != 0) {   /* root ignores directory permissions */
        assert_int_equal(chmod(g_dir, 0555), 0);
        assert_int_equal(vt_file_write_atomic(path, "new\n", 4, &e), VT_EIO);
        assert_int_equal(chmod(g_dir, 0755), 0);
    }
    /* a path that is a directory cannot be replaced by rename: the temp file goes away */
    char sub[160];
    snprintf(sub, sizeof sub, "%s/adir", g_dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(vt_file_write_atomic(sub, "x", 1, &e), VT_EIO);
    VT_ASSERT_CONTAINS(e.msg, "cannot rename into place");
    char *t = slurp(path);
    assert_string_equal(t, "old\n");
    free(t);
    assert_int_equal(temp_files(), 0);
}

static void test_bench_report_refuses_before_writing(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/r.json", g_dir);
    const char *kn[] = {"VT_BACKEND"}, *kv[] = {"cpu"};
    char sha[65];
    memset(sha, 'a', 64);
    sha[64] = 0;
    vt_bench_phase ph[2] = {{"prefill", 1, 0, 1, 16, 0.5, 1e9, 0, 1e11, 0, -1},
                            {"decode", 1, 16, 1, 8, 0.25, 1e8, 0, 1e11, 0, 0.1}};
    vt_bench_report r = {"cpu", "cpu: test", "m", sha, sha, "w", "p", "f", "b", 1, kn, kv, 2, ph, 0, 0, 0};
    vt_err e = {0};
    VT_ASSERT_OK(vt_bench_write(path, &r, &e), e);
    char *t = slurp(path);
    assert_non_null(t);
    VT_ASSERT_CONTAINS(t, "\"format\":\t\"vtlab-bench\"");
    VT_ASSERT_CONTAINS(t, "\"tokens_per_s\":\t32");      /* 16 tokens in 0.5 s */
    VT_ASSERT_CONTAINS(t, "\"gemm_share\":\tnull");      /* not measured: null, not 0 */
    free(t);

    /* each bad report: refused with the reason, and the earlier file stays as it was */
    ph[1].seconds = 0;
    assert_int_equal(vt_bench_write(path, &r, &e), VT_EINPUT);
    VT_ASSERT_CONTAINS(e.msg, "phase \"decode\"");
    ph[1].seconds = 0.25;
    ph[1].name = "prefill";
    assert_int_equal(vt_bench_write(path, &r, &e), VT_EINPUT);
    VT_ASSERT_CONTAINS(e.msg, "appears twice");
    ph[1].name = "Decode!";
    assert_int_equal(vt_bench_write(path, &r, &e), VT_EINPUT);
    ph[1].name = "decode";
    r.model_sha256 = "xyz";
    assert_int_equal(vt_bench_write(path, &r, &e), VT_EINPUT);
    r.model_sha256 = sha;
    r.backend = "tpu";
    assert_int_equal(vt_bench_write(path, &r, &e), VT_EINPUT);
    t = slurp(path);
    VT_ASSERT_CONTAINS(t, "\"tokens_per_s\":\t32");
    free(t);
    assert_int_equal(temp_files(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_replace),
        cmocka_unit_test(test_failure_leaves_old_file),
        cmocka_unit_test(test_bench_report_refuses_before_writing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
