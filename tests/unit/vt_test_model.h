/* vt_test_model.h — helpers for the unit tests that run the model: a
 * synthetic tiny model in a temporary directory, sessions from knob pairs,
 * token streams, logits. Each test binary includes it once. */
#ifndef VT_TEST_MODEL_H
#define VT_TEST_MODEL_H

#include "tests/unit/vt_test.h"

#include "model/vt.h"

/* Synthesises the tiny config (seed, dtype) into a new directory made from
 * tmpl ("/tmp/vt-test-NAME-XXXXXX", copied into dir) and opens it. */
static inline int vt_test_tiny_model(char *dir, size_t dirlen, const char *tmpl, uint64_t seed, const char *dtype,
                                     vt_model **m) {
    char err[1024];
    snprintf(dir, dirlen, "%s", tmpl);
    if (!mkdtemp(dir)) return -1;
    if (vt_synth("model/configs/kimi-linear-tiny.json", seed, dtype, dir, err, sizeof err) ||
        vt_model_open(m, dir, err, sizeof err)) {
        fprintf(stderr, "setup (%s): %s\n", dir, err);
        return -1;
    }
    return 0;
}

static inline int vt_test_rmdir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A session on m with the knob pairs kv ("NAME", "VALUE", ..., NULL). */
static inline vt_session *vt_test_session(vt_model *m, const char *const *kv) {
    vt_knobset *ks;
    char err[512];
    assert_int_equal(vt_knobset_new(&ks), 0);
    for (; kv && kv[0]; kv += 2)
        if (vt_knobset_set(ks, kv[0], kv[1], err, sizeof err)) fail_msg("knob: %s", err);
    vt_session *s = NULL;
    if (vt_session_new(&s, m, ks, err, sizeof err)) fail_msg("session: %s", err);
    vt_knobset_free(ks);
    return s;
}

/* The captured residual stream of (layer, site) in sessions a and b
 * (vt_session_residual), each required to be there with T rows. */
static inline void vt_test_residual_pair(const vt_session *a, const vt_session *b, int64_t layer, int site, int64_t T,
                                         const float **ra, const float **rb) {
    int64_t Ta = 0, Tb = 0;
    *ra = vt_session_residual(a, layer, site, &Ta);
    *rb = vt_session_residual(b, layer, site, &Tb);
    assert_non_null(*ra);
    assert_non_null(*rb);
    assert_int_equal(Ta, T);
    assert_int_equal(Tb, T);
}

/* n pseudo-random token ids in [3, vocab). */
static inline void vt_test_tokens(int32_t *t, int64_t n, uint32_t seed, int64_t vocab) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)(3 + (seed >> 8) % (uint32_t)(vocab - 3));
    }
}

/* Prefill logits [T, vocab], malloc'd. */
static inline float *vt_test_logits(vt_session *s, const int32_t *t, int64_t T, int64_t vocab) {
    float *l = malloc(sizeof(float) * (size_t)(T * vocab));
    char err[512];
    if (vt_session_prefill(s, t, T, l, err, sizeof err)) fail_msg("prefill: %s", err);
    return l;
}

static inline int vt_test_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline int64_t vt_test_argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

#endif
