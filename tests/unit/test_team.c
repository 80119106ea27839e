/*
 * test_team.c — the thread governor (model/team.h) on made-up rates: a
 * faster team is kept and probed within a budget, a slower one is dropped
 * and probed again, prefills are governed apart from decode steps, a change
 * of load is noticed at once, what is learnt is the process's, the switch
 * that turns it off; what vt_gemm_batch reports; and the default thread
 * count under a cgroup CPU quota, read from made-up cgroup trees.
 */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gemm.h"
#include "model/team.h"

/* One pass of T tokens at `rate[mode]` units of work per second, T * 1e7
 * units (rate 0: a pass without a product big enough to run in parallel).
 * Returns the thread count the governor chose for the pass. */
static int pass(vt_team *t, int64_t T, const double rate[2]) {
    const int n = vt_team_begin(t, T);
    const double r = rate[n > 1], work = 1e7 * (double)T;
    if (r > 0) vt_team_add(t, (int64_t)work);   /* it had a product to run in parallel */
    vt_team_end(t, r > 0 ? work / r : 1e-4);
    return n;
}

/* Passes until `n` have run; returns how many of them ran on one thread. */
static int run(vt_team *t, int64_t T, const double rate[2], int n) {
    int single = 0;
    for (int i = 0; i < n; i++) single += pass(t, T, rate) == 1;
    return single;
}

/* A fresh process's governor for a team of max (what it learnt is the process's). */
static void fresh(vt_team *t, int max) {
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team_forget();
    vt_team_init(t, max);
}

static void test_faster_team_is_kept(void **state) {
    (void)state;
    vt_team t;
    fresh(&t, 2);
    const double quiet[2] = {1.0e9, 1.6e9};
    assert_int_equal(pass(&t, 1, quiet), 2);   /* the team first, */
    assert_int_equal(pass(&t, 1, quiet), 1);   /* one thread right after it */
    /* then one-thread probes, as far apart as keeps their cost (each 0.6 of a
     * step more than the team's) at VT_TEAM_PROBE_BUDGET percent */
    const int single = run(&t, 1, quiet, 1000);
    assert_true(single >= 1);
    if (single * 0.6 > 1000 * (VT_TEAM_PROBE_BUDGET + 1) / 100.0)
        fail_msg("%d one-thread probes in 1000 steps cost more than the budget", single);
    const vt_gov g = vt_team_gov(VT_TEAM_DECODE, 2);
    assert_int_equal(g.choice, 1);
    assert_int_equal(g.interval, (int)(0.6 * 100 / VT_TEAM_PROBE_BUDGET));
}

static void test_slower_team_is_dropped_and_probed(void **state) {
    (void)state;
    vt_team t;
    fresh(&t, 2);
    const double busy[2] = {1.0e9, 0.8e9}, quiet[2] = {1.0e9, 1.6e9};
    run(&t, 1, busy, 3);   /* the team, then one-thread probes that win twice */
    assert_int_equal(vt_team_gov(VT_TEAM_DECODE, 2).choice, 0);
    const int single = run(&t, 1, busy, 1000);   /* the team only as probes, within the budget */
    if ((1000 - single) * 0.25 > 1000 * (VT_TEAM_PROBE_BUDGET + 1) / 100.0)
        fail_msg("%d team probes in 1000 steps cost more than the budget", 1000 - single);
    assert_true(single < 1000);
    /* the host gets quiet: the next team probes win it back */
    int n = 0;
    while (vt_team_gov(VT_TEAM_DECODE, 2).choice == 0 && n++ <= VT_TEAM_MAX_INTERVAL) pass(&t, 1, quiet);
    assert_int_equal(vt_team_gov(VT_TEAM_DECODE, 2).choice, 1);
    assert_int_equal(vt_team_gov(VT_TEAM_DECODE, 2).interval, VT_TEAM_FIRST_INTERVAL);
}

/* A busy host's team steps are mostly fast and now and then very slow (its
 * other thread descheduled): 0.4 s and 4 s in turn, 2.2 s on average, against
 * one thread's steady 1 s. The governor must see the team as the slower (a
 * mean of rates, (2.5 + 0.25) / 2 steps per second, would see it faster). */
static void test_jittery_team_is_slower(void **state) {
    (void)state;
    vt_team t;
    fresh(&t, 2);
    int single = 0, team_steps = 0;
    for (int i = 0; i < 1000; i++) {
        const int n = vt_team_begin(&t, 1);
        vt_team_add(&t, 1000000000);
        vt_team_end(&t, n > 1 ? (team_steps++ % 2 ? 4.0 : 0.4) : 1.0);
        single += n == 1;
    }
    if ((1000 - single) * 1.2 > 1000 * (VT_TEAM_PROBE_BUDGET + 2) / 100.0)
        fail_msg("one thread in %d of 1000 steps: the jittery team ran %d", single, 1000 - single);
    assert_int_equal(vt_team_gov(VT_TEAM_DECODE, 2).choice, 0);
}

/* Prefills are governed too (issue 32: a 2-thread prefill ran up to 3x
 * slower than one thread beside a build), apart from the decode steps: here
 * the team loses prefills and wins decode steps, and each kind gets its own
 * choice. Passes of different lengths compare per unit of work. */
static void test_prefill_is_governed_apart(void **state) {
    (void)state;
    vt_team t;
    fresh(&t, 2);
    const double step[2] = {1.0e9, 1.6e9}, prefill[2] = {50e9, 20e9};
    int prefill_single = 0, step_single = 0;
    for (int i = 0; i < 200; i++) {
        step_single += pass(&t, 1, step) == 1;
        prefill_single += pass(&t, i % 2 ? 32 : 512, prefill) == 1;
    }
    if (prefill_single < 200 - 12)
        fail_msg("prefill on one thread in %d of 200 passes (the team is 2.5x slower there)", prefill_single);
    if (step_single > 200 * 0.06)
        fail_msg("decode steps on one thread in %d of 200 (the team is faster there)", step_single);
    assert_int_equal(vt_team_gov(VT_TEAM_PREFILL, 2).choice, 0);
    assert_int_equal(vt_team_gov(VT_TEAM_DECODE, 2).choice, 1);
    /* a faster team for prefills is kept: the cost is per unit of work, so
     * short and long passes in turn do not look like a change of speed */
    fresh(&t, 2);
    const double quiet[2] = {50e9, 90e9};
    prefill_single = 0;
    for (int i = 0; i < 200; i++) prefill_single += pass(&t, i % 2 ? 32 : 512, quiet) == 1;
    if (prefill_single > 200 * 0.05)
        fail_msg("prefill on one thread in %d of 200 passes (the team is 1.8x faster)", prefill_single);
    /* passes that measured nothing (no product big enough) change nothing */
    const double none[2] = {0, 0};
    const vt_gov before = vt_team_gov(VT_TEAM_PREFILL, 2);
    for (int i = 0; i < 300; i++) pass(&t, 64, none);
    const vt_gov after = vt_team_gov(VT_TEAM_PREFILL, 2);
    assert_int_equal(after.choice, before.choice);
    assert_int_equal(after.since, before.since);
    assert_int_equal(after.interval, before.interval);
}

/* The load changes under a long-settled choice: the team won for hundreds of
 * passes (probes 40 passes apart), then a co-tenant makes it 2.5x
 * slower than one thread. The governor notices the team's own cost jump and
 * probes at once: within a few passes, not at the next scheduled probe. */
static void test_load_change_is_noticed(void **state) {
    (void)state;
    vt_team t;
    fresh(&t, 2);
    const double quiet[2] = {1.0e9, 1.8e9}, busy[2] = {1.0e9, 0.4e9};
    run(&t, 1, quiet, 500);
    assert_true(vt_team_gov(VT_TEAM_DECODE, 2).interval >= 32);
    int n = 0;
    while (vt_team_gov(VT_TEAM_DECODE, 2).choice == 1 && n < 100) pass(&t, 1, busy), n++;
    if (n > VT_TEAM_ODD_DECODE + 3) fail_msg("the team kept for %d steps after the load came", n);
    /* and back: one thread's cost falls when the co-tenant leaves (it shared a core too) */
    const double gone[2] = {2.0e9, 3.6e9};
    run(&t, 1, busy, 300);
    n = 0;
    while (vt_team_gov(VT_TEAM_DECODE, 2).choice == 0 && n < 100) pass(&t, 1, gone), n++;
    if (n > VT_TEAM_ODD_DECODE + 3) fail_msg("one thread kept for %d steps after the load left", n);
    /* prefill passes: two odd ones call the probe */
    run(&t, 256, quiet, 200);
    assert_true(vt_team_gov(VT_TEAM_PREFILL, 2).interval >= 32);
    n = 0;
    while (vt_team_gov(VT_TEAM_PREFILL, 2).choice == 1 && n < 100) pass(&t, 256, busy), n++;
    if (n > VT_TEAM_ODD_PREFILL + 3) fail_msg("the team kept for %d prefill passes after the load came", n);
}

/* What was learnt belongs to the process: a new session (a sweep's next arm)
 * of the same size starts on one thread where the last one found the team
 * slower; a session of another size learns on its own. */
static void test_learnt_for_the_process(void **state) {
    (void)state;
    vt_team a, b, c;
    fresh(&a, 2);
    const double busy[2] = {50e9, 20e9};
    run(&a, 256, busy, 6);
    vt_team_init(&b, 2);
    assert_int_equal(pass(&b, 256, busy), 1);
    assert_true(run(&b, 256, busy, 5) >= 4);   /* a team probe at most */
    vt_team_init(&c, 4);
    assert_int_equal(pass(&c, 256, busy), 4);
}

static void test_off_and_one_thread(void **state) {
    (void)state;
    vt_team t;
    const double busy[2] = {1.0e9, 0.5e9};
    vt_team_forget();
    setenv("VTLAB_TEAM_GOVERNOR", "0", 1);
    vt_team_init(&t, 2);
    assert_int_equal(run(&t, 1, busy, 200), 0);
    assert_int_equal(run(&t, 256, busy, 200), 0);
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team_init(&t, 1);
    assert_int_equal(run(&t, 1, busy, 200), 200);
    vt_team_init(&t, 0);   /* a count < 1 means one thread */
    assert_int_equal(pass(&t, 1, busy), 1);
}

/* What a real batch reports: its multiply-adds on 2 threads and on 1 (the
 * same batches are judged whatever the count), also for a batch only a
 * decode step's team runs in parallel (VT_STEP_MIN_WORK up to
 * VT_PAR_MIN_WORK: the tiny model's lm_head); 0 for a small batch. */
static void test_batch_report(void **state) {
    (void)state;
    enum { M = 64, N = 512, K = 256 };
    float *x = calloc((size_t)M * K, sizeof *x), *w = calloc((size_t)N * K, sizeof *w), *y = calloc((size_t)M * N, sizeof *y);
    assert_non_null(x); assert_non_null(w); assert_non_null(y);
    for (int i = 0; i < M * K; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N * K; i++) w[i] = (float)(i % 5) - 2.0f;
    vt_tensor W = {0};
    const int64_t shp[2] = {N, K};
    assert_int_equal(vt_tensor_view(&W, VT_F32, 2, shp, w, sizeof(float) * N * K, NULL), 0);
    vt_tensor W64 = {0};
    const int64_t shp64[2] = {64, K};
    assert_int_equal(vt_tensor_view(&W64, VT_F32, 2, shp64, w, sizeof(float) * 64 * K, NULL), 0);
    const int saved = omp_get_max_threads();
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        const vt_gemm_job job = {x, K, M, &W, y, N};
        assert_int_equal(vt_gemm_batch(&job, 1), (int64_t)M * N * K);
        const vt_gemm_job step = {x, K, 1, &W, y, N};   /* 2 * 512 * 256: under VT_PAR_MIN_WORK, not VT_STEP_MIN_WORK */
        assert_int_equal(vt_gemm_batch(&step, 1), (int64_t)N * K);
        const vt_gemm_job small = {x, K, 1, &W64, y, 64};   /* 2 * 64 * 256 < VT_STEP_MIN_WORK */
        assert_int_equal(vt_gemm_batch(&small, 1), 0);
    }
    omp_set_num_threads(saved);
    free(x), free(w), free(y);
}

/* ---- the cgroup CPU quota (cpu_quota.c) */

static char g_root[256];

/* Writes text into g_root/rel, making its directories. */
static void put(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(path, 0755); *p = '/'; }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static double limit_of(void) {
    char pc[512], root[512];
    snprintf(pc, sizeof pc, "%s/proc-cgroup", g_root);
    snprintf(root, sizeof root, "%s/fs", g_root);
    return vt_cgroup_cpu_limit(pc, root);
}

static void fresh_root(void) {
    snprintf(g_root, sizeof g_root, "/tmp/vt-cgroup.XXXXXX");
    assert_non_null(mkdtemp(g_root));
}

static void drop_root(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    assert_int_equal(system(cmd), 0);
}

/* cgroup v2: the process's cpu.max and its parents'; the lowest binds;
 * "max" is no limit; a path the namespace hides reads the root alone. */
static void test_cgroup_v2_quota(void **state) {
    (void)state;
    fresh_root();
    put("proc-cgroup", "0::/kubepods/pod1/c1\n");
    put("fs/kubepods/pod1/c1/cpu.max", "max 100000\n");
    assert_true(limit_of() == 0);                         /* no limit anywhere */
    put("fs/kubepods/pod1/c1/cpu.max", "150000 100000\n");
    assert_true(fabs(limit_of() - 1.5) < 1e-12);
    put("fs/kubepods/pod1/cpu.max", "50000 100000\n");   /* the pod's half a CPU binds the container */
    assert_true(fabs(limit_of() - 0.5) < 1e-12);
    put("fs/kubepods/cpu.max", "400000 100000\n");
    assert_true(fabs(limit_of() - 0.5) < 1e-12);
    drop_root();
    fresh_root();   /* a cgroup namespace: the path is the host's, the mount the container's own */
    put("proc-cgroup", "0::/system.slice/docker-abc.scope\n");
    put("fs/cpu.max", "100000 100000\n");
    assert_true(fabs(limit_of() - 1.0) < 1e-12);
    put("fs/cpu.max", "garbage\n");
    assert_true(limit_of() == 0);
    drop_root();
}

/* cgroup v1: the cpu controller's line (cpu,cpuacct mounted together),
 * quota -1 is none; other controllers' lines are not read. */
static void test_cgroup_v1_quota(void **state) {
    (void)state;
    fresh_root();
    put("proc-cgroup", "8:memory:/docker/abc\n4:cpuacct,cpu:/docker/abc\n1:name=systemd:/docker/abc\n");
    put("fs/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    put("fs/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    put("fs/memory/docker/abc/cpu.cfs_quota_us", "10000\n");   /* not the cpu controller's: ignored */
    put("fs/memory/docker/abc/cpu.cfs_period_us", "100000\n");
    assert_true(limit_of() == 0);
    put("fs/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
    assert_true(fabs(limit_of() - 2.0) < 1e-12);
    put("fs/cpu,cpuacct/docker/cpu.cfs_quota_us", "25000\n");
    put("fs/cpu,cpuacct/docker/cpu.cfs_period_us", "50000\n");
    assert_true(fabs(limit_of() - 0.5) < 1e-12);
    drop_root();
    fresh_root();   /* no /proc/self/cgroup at all: no limit */
    assert_true(limit_of() == 0);
    drop_root();
}

/* The thread count: the limit rounded up, at least 1, at most the CPUs. */
static void test_threads_for_limit(void **state) {
    (void)state;
    assert_int_equal(vt_threads_for_limit(2, 0), 2);
    assert_int_equal(vt_threads_for_limit(2, 1.0), 1);
    assert_int_equal(vt_threads_for_limit(2, 1.5), 2);
    assert_int_equal(vt_threads_for_limit(16, 0.25), 1);
    assert_int_equal(vt_threads_for_limit(16, 3.2), 4);
    assert_int_equal(vt_threads_for_limit(4, 64), 4);
    assert_true(vt_team_default_threads() >= 1 && vt_team_default_threads() <= omp_get_num_procs());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faster_team_is_kept),
        cmocka_unit_test(test_slower_team_is_dropped_and_probed),
        cmocka_unit_test(test_jittery_team_is_slower),
        cmocka_unit_test(test_prefill_is_governed_apart),
        cmocka_unit_test(test_load_change_is_noticed),
        cmocka_unit_test(test_learnt_for_the_process),
        cmocka_unit_test(test_off_and_one_thread),
        cmocka_unit_test(test_batch_report),
        cmocka_unit_test(test_cgroup_v2_quota),
        cmocka_unit_test(test_cgroup_v1_quota),
        cmocka_unit_test(test_threads_for_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
