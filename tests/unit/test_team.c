/*
 * test_team.c — the thread governor (model/team.h) on made-up rates: a
 * faster team is kept and probed ever more rarely, a slower one is dropped
 * and probed again, prefills are left alone, the switch that turns it off;
 * and what vt_gemm_batch reports.
 */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <omp.h>

#include "model/gemm.h"
#include "model/team.h"

/* One pass of T tokens at `rate[mode]` passes per second (rate 0: a pass
 * without a product big enough to run in parallel). Returns the thread count
 * the governor chose for the pass. */
static int pass(vt_team *t, int64_t T, const double rate[2]) {
    const int n = vt_team_begin(t, T);
    const double r = rate[n > 1];
    if (r > 0) vt_team_add(t, 1e9);   /* it had a product to run in parallel */
    vt_team_end(t, r > 0 ? 1.0 / r : 1e-4);
    return n;
}

/* Passes until `n` have run; returns how many of them ran on one thread. */
static int run(vt_team *t, int64_t T, const double rate[2], int n) {
    int single = 0;
    for (int i = 0; i < n; i++) single += pass(t, T, rate) == 1;
    return single;
}

static void test_faster_team_is_kept(void **state) {
    (void)state;
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team t;
    vt_team_init(&t, 2);
    const double quiet[2] = {1.0e9, 1.6e9};
    assert_int_equal(pass(&t, 1, quiet), 2);   /* the team first */
    /* one-thread probes only: the first after VT_TEAM_FIRST_INTERVAL passes, then
     * at doubling intervals up to VT_TEAM_MAX_INTERVAL */
    const int single = run(&t, 1, quiet, 1000);
    assert_true(single >= 1);
    assert_true(single <= 1000 / VT_TEAM_MAX_INTERVAL + 4);
    assert_int_equal(t.choice, 1);
    assert_int_equal(t.interval, VT_TEAM_MAX_INTERVAL);
}

static void test_slower_team_is_dropped_and_probed(void **state) {
    (void)state;
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team t;
    vt_team_init(&t, 2);
    const double busy[2] = {1.0e9, 0.9e9}, quiet[2] = {1.0e9, 1.6e9};
    run(&t, 1, busy, VT_TEAM_FIRST_INTERVAL);   /* the team, then a one-thread probe that wins */
    assert_int_equal(t.choice, 0);
    const int single = run(&t, 1, busy, 1000);
    assert_true(single >= 1000 - (1000 / VT_TEAM_MAX_INTERVAL + 4));   /* the team only as probes */
    assert_true(single < 1000);
    /* the host gets quiet: the next team probe wins it back */
    int n = 0;
    while (t.choice == 0 && n++ <= VT_TEAM_MAX_INTERVAL) pass(&t, 1, quiet);
    assert_int_equal(t.choice, 1);
    assert_int_equal(t.interval, VT_TEAM_FIRST_INTERVAL);
}

/* A busy host's team steps are mostly fast and now and then very slow (its
 * other thread descheduled): 0.4 s and 4 s in turn, 2.2 s on average, against
 * one thread's steady 1 s. The governor must see the team as the slower (a
 * mean of rates, (2.5 + 0.25) / 2 steps per second, would see it faster). */
static void test_jittery_team_is_slower(void **state) {
    (void)state;
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team t;
    vt_team_init(&t, 2);
    int single = 0, team_steps = 0;
    for (int i = 0; i < 1000; i++) {
        const int n = vt_team_begin(&t, 1);
        vt_team_add(&t, 1e9);
        vt_team_end(&t, n > 1 ? (team_steps++ % 2 ? 4.0 : 0.4) : 1.0);
        single += n == 1;
    }
    if (single < 1000 - (1000 / VT_TEAM_MAX_INTERVAL + 8))
        fail_msg("one thread in %d of 1000 steps: the jittery team ran %d", single, 1000 - single);
    assert_int_equal(t.choice, 0);
}

/* prefills are not governed: always the session's count, and they leave the
 * decode steps' rates alone */
static void test_prefill_is_not_governed(void **state) {
    (void)state;
    unsetenv("VTLAB_TEAM_GOVERNOR");
    vt_team t;
    vt_team_init(&t, 2);
    const double busy[2] = {1.0e9, 0.9e9}, prefill[2] = {50e9, 10e9};
    for (int i = 0; i < 200; i++) {
        pass(&t, 1, busy);
        assert_int_equal(pass(&t, 256, prefill), 2);
    }
    assert_int_equal(t.choice, 0);
    assert_true(fabs(t.sec[0] * 1.0e9 - 1) < 1e-12 && fabs(t.sec[1] * 0.9e9 - 1) < 1e-12);
    /* steps that measured nothing (the tiny model) change nothing */
    const double none[2] = {0, 0};
    vt_team before = t;
    for (int i = 0; i < 300; i++) pass(&t, 1, none);
    assert_int_equal(t.choice, before.choice);
    assert_int_equal(t.since, before.since);
    assert_int_equal(t.interval, before.interval);
}

static void test_off_and_one_thread(void **state) {
    (void)state;
    vt_team t;
    const double busy[2] = {1.0e9, 0.5e9};
    setenv("VTLAB_TEAM_GOVERNOR", "0", 1);
    vt_team_init(&t, 2);
    assert_int_equal(run(&t, 1, busy, 200), 0);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faster_team_is_kept),
        cmocka_unit_test(test_slower_team_is_dropped_and_probed),
        cmocka_unit_test(test_jittery_team_is_slower),
        cmocka_unit_test(test_prefill_is_not_governed),
        cmocka_unit_test(test_off_and_one_thread),
        cmocka_unit_test(test_batch_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
