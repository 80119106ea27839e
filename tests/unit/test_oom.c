/*
 * test_oom.c — every allocation failure in a forward pass is either an error
 * the caller sees or a probe record counted as lost; never silent, never a
 * crash, and a session whose forward failed midway refuses to decode until it
 * is prefilled again (its caches may be half-updated).
 *
 * The binary is linked with -Wl,--wrap=malloc,calloc,realloc (Makefile), so
 * every allocation made by the model library's own code goes through the
 * wrappers below; OpenBLAS and the OpenMP runtime are shared libraries and are
 * not affected. A run arms the wrappers to fail exactly the k-th allocation
 * from then on, for k = 0, 1, 2, ... until a forward pass makes fewer than k
 * allocations: every allocation point of a prefill and of a decode is failed
 * once. Threads are 1, so the order of allocations is deterministic.
 */
#include "tests/unit/vt_test_model.h"

#include "model/model.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);

static long g_countdown = -1;   /* allocations left before the one that fails; -1: disarmed */
static long g_injected;         /* failures injected since the last arm() */

static int fail_now(void) {
    if (g_countdown < 0) return 0;
    if (g_countdown-- == 0) {
        g_injected++;
        return 1;
    }
    return 0;
}
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }

static void arm(long k) { g_countdown = k, g_injected = 0; }
static void disarm(void) { g_countdown = -1; }

/* T = 64 fills the MLA cache's first capacity (64 positions), so the decode
 * after the prefill must grow it: with the session's workspace reused across
 * forwards, that growth is a decode's only allocation. */
enum { T = 64, MAX_K = 20000 };
static char g_dir[256];
static vt_model *g_model;
static int64_t V;
static int32_t g_tok[T + 1];
static float *g_ref, *g_ref_dec;   /* clean prefill logits [T, V] and the next decode's [V] */

static const char *const KNOBS[] = {"VT_THREADS", "1", "VT_PROBE", "on", NULL};

static int setup(void **state) {
    (void)state;
    if (vt_test_tiny_model(g_dir, sizeof g_dir, "/tmp/vt-test-oom-XXXXXX", 2, "f32", &g_model)) return -1;
    vt_model_info info;
    vt_model_get_info(g_model, &info);
    V = info.vocab_size;
    vt_test_tokens(g_tok, T + 1, 11, V);
    vt_session *s = vt_test_session(g_model, KNOBS);
    g_ref = vt_test_logits(s, g_tok, T, V);
    g_ref_dec = malloc(sizeof(float) * (size_t)V);
    char err[512];
    int rc = vt_session_decode(s, g_tok[T], g_ref_dec, err, sizeof err);
    vt_session_free(s);
    return rc ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_ref);
    free(g_ref_dec);
    vt_model_free(g_model);
    return vt_test_rmdir(g_dir);
}

/* After a failed forward: decode is refused; a new prefill recovers exactly. */
static void check_stale_then_recovers(vt_session *s, long k, const char *what) {
    char err[512];
    float *l = malloc(sizeof(float) * (size_t)(T * V));
    int rc = vt_session_decode(s, g_tok[T], l, err, sizeof err);
    if (rc != VT_STATUS_INPUT || !strstr(err, "prefill again first"))
        fail_msg("%s failed at allocation %ld, then decode gave %d (%s): a half-updated session was used", what, k, rc,
                 err);
    if (vt_session_prefill(s, g_tok, T, l, err, sizeof err)) fail_msg("prefill after recovery: %s", err);
    assert_memory_equal(l, g_ref, sizeof(float) * (size_t)(T * V));
    if (vt_session_decode(s, g_tok[T], l, err, sizeof err)) fail_msg("decode after recovery: %s", err);
    assert_memory_equal(l, g_ref_dec, sizeof(float) * (size_t)V);
    free(l);
}

/* Classifies one armed forward: an error must be NOMEM with a message; a
 * success with an injected failure must have counted a lost probe record. */
static int classify(int rc, const char *err, const vt_session *s, long k, const char *what, int *errors, int *lost) {
    if (rc != VT_OK) {
        if (rc != VT_STATUS_NOMEM) fail_msg("%s, allocation %ld failed: status %d (%s), expected NOMEM", what, k, rc, err);
        if (!strstr(err, "out of memory") && !strstr(err, "memory"))
            fail_msg("%s, allocation %ld failed: message does not say out of memory: %s", what, k, err);
        (*errors)++;
        return 1;
    }
    if (g_injected) {
        if (vt_session_probes_lost(s) < 1)
            fail_msg("%s, allocation %ld failed but the forward succeeded with no lost probe counted: swallowed", what,
                     k);
        (*lost)++;
    }
    return 0;
}

static void test_every_prefill_allocation_fails_cleanly(void **state) {
    (void)state;
    int errors = 0, lost = 0;
    long k;
    for (k = 0; k < MAX_K; k++) {
        vt_session *s = vt_test_session(g_model, KNOBS);
        float *l = malloc(sizeof(float) * (size_t)(T * V));
        char err[512] = "";
        arm(k);
        int rc = vt_session_prefill(s, g_tok, T, l, err, sizeof err);
        disarm();
        int done = rc == VT_OK && !g_injected;
        if (classify(rc, err, s, k, "prefill", &errors, &lost)) check_stale_then_recovers(s, k, "prefill");
        free(l);
        vt_session_free(s);
        if (done) break;
    }
    fprintf(stderr, "test_oom: prefill: %ld allocation points; %d failed the forward (then decode refused and a "
                    "prefill recovered bit-exactly), %d lost a probe record (counted)\n",
            k, errors, lost);
    assert_true(k < MAX_K);
    assert_true(errors > 0);   /* the stale path was exercised */
    assert_true(lost > 0);     /* and the lost-probe path */
}

static void test_every_decode_allocation_fails_cleanly(void **state) {
    (void)state;
    int errors = 0, lost = 0;
    long k;
    for (k = 0; k < MAX_K; k++) {
        vt_session *s = vt_test_session(g_model, KNOBS);
        float *l = malloc(sizeof(float) * (size_t)(T * V));
        char err[512] = "";
        if (vt_session_prefill(s, g_tok, T, l, err, sizeof err)) fail_msg("prefill: %s", err);
        vt_session_probes_clear(s);
        arm(k);
        int rc = vt_session_decode(s, g_tok[T], l, err, sizeof err);
        disarm();
        int done = rc == VT_OK && !g_injected;
        if (done) assert_memory_equal(l, g_ref_dec, sizeof(float) * (size_t)V);
        if (classify(rc, err, s, k, "decode", &errors, &lost)) check_stale_then_recovers(s, k, "decode");
        free(l);
        vt_session_free(s);
        if (done) break;
    }
    fprintf(stderr, "test_oom: decode: %ld allocation points; %d failed the forward, %d lost a probe record\n", k,
            errors, lost);
    assert_true(k < MAX_K);
    assert_true(errors > 0);   /* a decode that allocates nothing would test nothing */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_prefill_allocation_fails_cleanly),
        cmocka_unit_test(test_every_decode_allocation_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
