/*
 * test_scatter.c — the defect report's RED-first test, and the replay.
 *
 * The report: with VT_KIMI_BF16_STREAM=1 the MoE scatter copied rows sized
 * from the stream dtype between f32 buffers. The test it asked for: with the
 * stream in bf16, the scattered expert output must be byte-identical to the
 * f32-stream arm's for the same expert rows, and every destination row must
 * be fully written. A third check recomputes every expert row independently
 * (a naive f64 SwiGLU per (token, expert) pair), so that a defect that breaks
 * both arms alike — halving the row bytes in the scatter primitive itself —
 * is caught too. `make mutation` builds both defects in and requires this
 * test to fail.
 */
#include "tests/unit/vt_test_model.h"

#include <math.h>
#include <unistd.h>

#include "tests/unit/vt_test_moe.h"

static char g_dir[256];
static vt_model *g_model;

static int setup(void **state) {
    (void)state;
    return vt_test_tiny_model(g_dir, sizeof g_dir, "/tmp/vt-test-scatter-XXXXXX", 11, "f32", &g_model);
}

static int teardown(void **state) {
    (void)state;
    vt_model_free(g_model);
    return vt_test_rmdir(g_dir);
}

static vt_session *session_with(const char *const *kv) { return vt_test_session(g_model, kv); }

static const int LAYER = 1;   /* the first MoE layer of the tiny config */
enum { N_TOK = 37 };

static void run_moe(vt_session *s, const float *x, vt_moe_trace *tr) {
    const vt_config *cfg = &g_model->cfg;
    float *out = malloc(sizeof(float) * (size_t)(N_TOK * cfg->hidden_size));
    vt_err err = {0};
    VT_ASSERT_OK(vt_moe_forward(s, LAYER, &g_model->layers[LAYER].ffn, x, N_TOK, out, tr, &err), err);
    free(out);
}

/* Naive f64 SwiGLU of expert e (of LAYER) on row x. */
static void expert_ref(int64_t e, const float *x, double *y) {
    vt_test_expert_ref(&g_model->layers[LAYER].ffn.experts[e], g_model->cfg.hidden_size,
                       g_model->cfg.moe_intermediate_size, x, y);
}

/* The RED-first test of the report. */
static void test_bf16_stream_scatter_matches_f32(void **state) {
    (void)state;
    const int64_t D = g_model->cfg.hidden_size, K = g_model->cfg.num_experts_per_token;
    float *x = vt_test_moe_input(N_TOK, D);
    const char *f32_knobs[] = {"VT_PROBE", "audit", NULL};
    const char *bf16_knobs[] = {"VT_PROBE", "audit", "VT_KIMI_BF16_STREAM", "1", NULL};
    vt_session *s32 = session_with(f32_knobs), *s16 = session_with(bf16_knobs);
    assert_int_equal(s16->stream_dtype, VT_BF16);   /* the knob took effect */
    vt_moe_trace t32, t16;
    run_moe(s32, x, &t32);
    run_moe(s16, x, &t16);

    /* expert buffers stay f32 with a bf16 stream */
    assert_int_equal(t16.expert_out.dtype, VT_F32);
    assert_int_equal(t32.expert_out.nbytes, t16.expert_out.nbytes);
    /* every destination row fully written, in both arms */
    assert_int_equal(t32.rows_unwritten, 0);
    assert_int_equal(t16.rows_unwritten, 0);
    /* byte-identical, row by row (report the first differing row) */
    for (int64_t p = 0; p < N_TOK * K; p++)
        if (memcmp(vt_tensor_row(&t32.expert_out, p), vt_tensor_row(&t16.expert_out, p),
                   vt_tensor_row_bytes(&t32.expert_out)) != 0)
            fail_msg("expert_out row %lld (token %lld, expert %lld) differs between the f32 and bf16-stream arms",
                     (long long)p, (long long)t16.pair_token[p], (long long)t16.pair_expert[p]);

    /* independent recomputation: every row is its expert applied to its token */
    double *ref = malloc(sizeof(double) * (size_t)D);
    double worst = 0;
    for (int64_t p = 0; p < N_TOK * K; p++) {
        expert_ref(t16.pair_expert[p], x + t16.pair_token[p] * D, ref);
        const float *got = vt_tensor_row(&t16.expert_out, p);
        for (int64_t j = 0; j < D; j++) {
            double e = fabs(got[j] - ref[j]) / (1e-3 + fabs(ref[j]));
            if (e > worst) worst = e;
            if (e > 1e-3)
                fail_msg("expert_out row %lld col %lld = %g, independent recomputation %g", (long long)p,
                         (long long)j, got[j], ref[j]);
        }
    }
    free(ref);

    /* the probes agree: the scatter's bytes per row are the buffers' row bytes */
    int seen = 0;
    for (int64_t i = 0; i < vt_session_probe_count(s16); i++) {
        const vt_probe *pr = vt_session_probe_at(s16, i);
        if (strcmp(pr->site, "moe.scatter")) continue;
        seen = 1;
        assert_int_equal(pr->violations, 0);
        assert_int_equal(pr->bytes_per_row, pr->src_row_bytes);
        assert_int_equal(pr->bytes_per_row, (int64_t)vt_row_size(VT_F32, D));
    }
    assert_true(seen);
    vt_moe_trace_free(&t32); vt_moe_trace_free(&t16);
    vt_session_free(s32); vt_session_free(s16);
    free(x);
}

/* With VT_KIMI_BF16_EXPERT_OUT, expert_out is bf16 and equals the f32 arm's
 * rounded to bf16 (the "dequantized equivalent"). */
static void test_bf16_expert_out_is_rounded_f32(void **state) {
    (void)state;
    const int64_t D = g_model->cfg.hidden_size, K = g_model->cfg.num_experts_per_token;
    float *x = vt_test_moe_input(N_TOK, D);
    const char *a[] = {"VT_PROBE", "audit", NULL};
    const char *b[] = {"VT_PROBE", "audit", "VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_EXPERT_OUT", "1", NULL};
    vt_session *s32 = session_with(a), *s16 = session_with(b);
    vt_moe_trace t32, t16;
    run_moe(s32, x, &t32);
    run_moe(s16, x, &t16);
    assert_int_equal(t16.expert_out.dtype, VT_BF16);
    assert_int_equal(t16.rows_unwritten, 0);
    for (int64_t p = 0; p < N_TOK * K; p++) {
        const float *f = vt_tensor_row(&t32.expert_out, p);
        const vt_bf16 *h = vt_tensor_row(&t16.expert_out, p);
        for (int64_t j = 0; j < D; j++)
            if (h[j].bits != vt_f32_to_bf16(f[j]).bits)
                fail_msg("row %lld col %lld: bf16 0x%04x, expected 0x%04x", (long long)p, (long long)j, h[j].bits,
                         vt_f32_to_bf16(f[j]).bits);
    }
    vt_moe_trace_free(&t32); vt_moe_trace_free(&t16);
    vt_session_free(s32); vt_session_free(s16);
    free(x);
}

/* The replay reproduces the defect and the probes see it, without crashing. */
static void test_replay_fault_is_seen_by_probes(void **state) {
    (void)state;
    const int64_t D = g_model->cfg.hidden_size, K = g_model->cfg.num_experts_per_token;
    float *x = vt_test_moe_input(N_TOK, D);
    const char *kn[] = {"VT_PROBE", "audit", "VT_KIMI_BF16_STREAM", "1", "VT_FAULT",
                        "moe_scatter_row_bytes_from_stream", NULL};
    vt_session *s = session_with(kn);
    vt_moe_trace t;
    run_moe(s, x, &t);
    /* half length, half stride: the second half of expert_out is never written */
    assert_true(t.rows_unwritten >= N_TOK * K / 2);
    const vt_probe *sc = NULL;
    for (int64_t i = 0; i < vt_session_probe_count(s); i++)
        if (!strcmp(vt_session_probe_at(s, i)->site, "moe.scatter")) sc = vt_session_probe_at(s, i);
    assert_non_null(sc);
    assert_int_equal(sc->violations, 1);
    assert_int_equal(sc->bytes_per_row, (int64_t)vt_row_size(VT_BF16, D));
    assert_int_equal(sc->src_row_bytes, (int64_t)vt_row_size(VT_F32, D));
    assert_int_equal(sc->dst_row_bytes, (int64_t)vt_row_size(VT_F32, D));
    assert_true(sc->rows_unwritten > 0);
    VT_ASSERT_CONTAINS(sc->detail, "copied 384 bytes per row");
    vt_moe_trace_free(&t);
    vt_session_free(s);
    free(x);
}

/* With an f32 stream the same fault is harmless: the coincidence the report
 * describes (sizeof f32 == the buffers' element size). */
static void test_replay_fault_is_latent_with_f32_stream(void **state) {
    (void)state;
    const int64_t D = g_model->cfg.hidden_size;
    float *x = vt_test_moe_input(N_TOK, D);
    const char *a[] = {"VT_PROBE", "audit", NULL};
    const char *b[] = {"VT_PROBE", "audit", "VT_FAULT", "moe_scatter_row_bytes_from_stream", NULL};
    vt_session *s0 = session_with(a), *s1 = session_with(b);
    vt_moe_trace t0, t1;
    run_moe(s0, x, &t0);
    run_moe(s1, x, &t1);
    assert_int_equal(t1.rows_unwritten, 0);
    assert_memory_equal(t0.expert_out.data, t1.expert_out.data, t0.expert_out.nbytes);
    vt_moe_trace_free(&t0); vt_moe_trace_free(&t1);
    vt_session_free(s0); vt_session_free(s1);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_stream_scatter_matches_f32),
        cmocka_unit_test(test_bf16_expert_out_is_rounded_f32),
        cmocka_unit_test(test_replay_fault_is_seen_by_probes),
        cmocka_unit_test(test_replay_fault_is_latent_with_f32_stream),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
