/*
 * test_forward.c — the forward pass's own consistency: decode == prefill,
 * probes that tell the truth about the residual stream, audit mode that does
 * not change the numbers, thread count that does not change them either.
 * Agreement with an independent implementation is tests/reference/.
 */
#include "tests/unit/vt_test_model.h"

#include <math.h>
#include <string.h>

#include "model/vt.h"

/* prefill(T) vs prefill(T-1) + decode(1): the products are the same chain at
 * any M (gemm.h), but a prefill of at least a chunk runs the KDA delta rule in
 * its chunked form and a decode token by token (the same function, ~1e-7
 * relative apart), so with f32 everywhere the tolerance is 1e-4 absolute on
 * logits of magnitude ~10 (observed: printed by the test).
 *
 * With bf16 rounding in the stream or the activations that 1e-7 occasionally
 * moves a value across a bf16 rounding boundary (a 2^-8 change), and when it
 * happens upstream of a router it can flip an expert choice: a few positions
 * then differ by whole logits. Measured on the tiny model: median per-position
 * max |diff| ~0.2, ~10% of positions above 1. So bf16 arms are held to
 * distributional bounds instead: top-1 agreement >= 90% of positions and a
 * median max |diff| <= 0.5. The same spread appears between prefill(3) and
 * prefill(40) rows, so it is not a decode defect. */
#define DECODE_ATOL 1e-4
#define DECODE_BF16_MEDIAN 0.5
#define DECODE_BF16_TOP1 0.9

static char g_dir[256], g_dir16[256];
static vt_model *g_model, *g_model16;
static int64_t V, D;

static int setup(void **state) {
    (void)state;
    if (vt_test_tiny_model(g_dir, sizeof g_dir, "/tmp/vt-test-forward-XXXXXX", 5, "f32", &g_model) ||
        vt_test_tiny_model(g_dir16, sizeof g_dir16, "/tmp/vt-test-forward16-XXXXXX", 5, "bf16", &g_model16))
        return -1;
    vt_model_info info;
    vt_model_get_info(g_model, &info);
    V = info.vocab_size;
    D = info.hidden_size;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    vt_model_free(g_model);
    vt_model_free(g_model16);
    return vt_test_rmdir(g_dir) || vt_test_rmdir(g_dir16) ? -1 : 0;
}

static void tokens(int32_t *t, int64_t n, uint32_t seed) { vt_test_tokens(t, n, seed, V); }
static float *logits_of(vt_session *s, const int32_t *t, int64_t T) { return vt_test_logits(s, t, T, V); }

static void check_decode_matches_prefill(const char *const *kv, int exact) {
    enum { T = 40 };
    int32_t t[T];
    tokens(t, T, 7);
    vt_session *s = vt_test_session(g_model, kv);
    float *full = logits_of(s, t, T);
    /* prefill(1), then decode the rest one token at a time */
    float *step = malloc(sizeof(float) * (size_t)V);
    char err[512];
    double worst = 0, per_pos[T];
    int agree = 0;
    assert_int_equal(vt_session_prefill(s, t, 1, step, err, sizeof err), 0);
    for (int64_t p = 1; p < T; p++) {
        assert_int_equal(vt_session_decode(s, t[p], step, err, sizeof err), 0);
        per_pos[p - 1] = 0;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs(step[v] - full[p * V + v]);
            if (d > per_pos[p - 1]) per_pos[p - 1] = d;
        }
        if (per_pos[p - 1] > worst) worst = per_pos[p - 1];
        agree += vt_test_argmax(step, V) == vt_test_argmax(full + p * V, V);
    }
    if (exact) {
        print_message("decode vs prefill (f32, T=%d): max |diff| %.3g (bound %.1g)\n", T, worst, DECODE_ATOL);
        if (worst > DECODE_ATOL) fail_msg("decode vs prefill: max |diff| %.3g > %.1g", worst, DECODE_ATOL);
    } else {
        qsort(per_pos, T - 1, sizeof per_pos[0], vt_test_cmp_double);
        double median = per_pos[(T - 1) / 2];
        if (median > DECODE_BF16_MEDIAN || agree < DECODE_BF16_TOP1 * (T - 1))
            fail_msg("bf16 decode vs prefill: median max|diff| %.3g (bound %.2g), top-1 agreement %d/%d", median,
                     DECODE_BF16_MEDIAN, agree, T - 1);
    }
    free(full); free(step);
    vt_session_free(s);
}

static void test_decode_matches_prefill_f32(void **state) { (void)state; check_decode_matches_prefill(NULL, 1); }

static void test_decode_matches_prefill_bf16(void **state) {
    (void)state;
    const char *kv[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_ACT", "1", NULL};
    check_decode_matches_prefill(kv, 0);
}

static const vt_probe *find_probe(const vt_session *s, const char *site, int layer) {
    for (int64_t i = 0; i < vt_session_probe_count(s); i++) {
        const vt_probe *p = vt_session_probe_at(s, i);
        if (!strcmp(p->site, site) && p->layer == layer) return p;
    }
    return NULL;
}

/* The live-run confirmation the defect report asks for. */
static void test_stream_probe_shows_knob(void **state) {
    (void)state;
    int32_t t[9];
    tokens(t, 9, 3);
    const char *on[] = {"VT_PROBE", "on", "VT_KIMI_BF16_STREAM", "1", NULL};
    const char *off[] = {"VT_PROBE", "on", NULL};
    vt_session *s16 = vt_test_session(g_model, on), *s32 = vt_test_session(g_model, off);
    free(logits_of(s16, t, 9));
    free(logits_of(s32, t, 9));
    vt_model_info info;
    vt_model_get_info(g_model, &info);
    for (int l = 0; l < info.n_layers; l++) {
        const vt_probe *a = find_probe(s16, "residual.stream", l), *b = find_probe(s32, "residual.stream", l);
        assert_non_null(a);
        assert_non_null(b);
        assert_string_equal(a->dtype, "bf16");
        assert_string_equal(b->dtype, "f32");
        assert_int_equal(a->rows, 9);
        /* expert buffers stay f32 with only the stream knob */
        if (info.layer_ffn[l] == 'E') assert_string_equal(find_probe(s16, "moe.scatter", l)->dtype, "f32");
        if (info.layer_kind[l] == 'K') assert_string_equal(find_probe(s16, "kda.state", l)->dtype, "f32");
    }
    assert_non_null(find_probe(s16, "logits", -1));
    vt_session_free(s16);
    vt_session_free(s32);
}

static void test_probes_off_records_nothing(void **state) {
    (void)state;
    int32_t t[4];
    tokens(t, 4, 1);
    vt_session *s = vt_test_session(g_model, NULL);
    free(logits_of(s, t, 4));
    assert_int_equal(vt_session_probe_count(s), 0);
    vt_session_free(s);
}

/* Audit mode and thread count must not change a single bit of the logits. */
static void test_audit_and_threads_do_not_change_numbers(void **state) {
    (void)state;
    enum { T = 33 };
    int32_t t[T];
    tokens(t, T, 9);
    const char *a[] = {"VT_THREADS", "1", NULL};
    const char *b[] = {"VT_THREADS", "2", "VT_PROBE", "audit", NULL};
    const char *c[] = {"VT_THREADS", "2", "VT_PROBE", "audit", "VT_KIMI_BF16_STREAM", "1", NULL};
    const char *d[] = {"VT_THREADS", "1", "VT_KIMI_BF16_STREAM", "1", NULL};
    vt_session *sa = vt_test_session(g_model, a), *sb = vt_test_session(g_model, b);
    float *la = logits_of(sa, t, T), *lb = logits_of(sb, t, T);
    assert_memory_equal(la, lb, sizeof(float) * (size_t)(T * V));
    vt_session *sc = vt_test_session(g_model, c), *sd = vt_test_session(g_model, d);
    float *lc = logits_of(sc, t, T), *ld = logits_of(sd, t, T);
    assert_memory_equal(lc, ld, sizeof(float) * (size_t)(T * V));
    /* and the bf16 stream does change them (otherwise this test proves nothing) */
    assert_memory_not_equal(la, lc, sizeof(float) * (size_t)(T * V));
    free(la); free(lb); free(lc); free(ld);
    vt_session_free(sa); vt_session_free(sb); vt_session_free(sc); vt_session_free(sd);
}

/* A session made with VTLAB_PREFILL_PIECE=v (unset when v is NULL). */
static vt_session *piece_session(vt_model *m, const char *v, const char *const *kv) {
    if (v) setenv("VTLAB_PREFILL_PIECE", v, 1);
    else unsetenv("VTLAB_PREFILL_PIECE");
    vt_session *s = vt_test_session(m, kv);
    unsetenv("VTLAB_PREFILL_PIECE");
    return s;
}

/* The rows a site's records saw, summed over its records. */
static int64_t probe_rows(const vt_session *s, const char *site) {
    int64_t rows = 0;
    for (int64_t i = 0; i < vt_session_probe_count(s); i++)
        if (!strcmp(vt_session_probe_at(s, i)->site, site)) rows += vt_session_probe_at(s, i)->rows;
    return rows;
}

/* A long prefill runs as pieces (forward.c, VTLAB_PREFILL_PIECE): the same
 * bits as one pass, in the logits, in the captured residual stream and in the
 * caches the decode steps that follow read. 1600 tokens of the tiny model
 * (4 heads: a piece is at least 512 tokens, attn.h) with pieces asked at 100
 * tokens: 512, 512 and the last 576 (fewer than two pieces left). With the
 * length not rounded to the chunk and the attention's quantum (a mutation),
 * 100-token pieces start the delta rule's chunks and the attention's query
 * blocks elsewhere, and the bits differ. Also with the bf16 stream and on 2
 * threads, and the probes see the same rows. */
static void test_prefill_pieces_same_bits(void **state) {
    (void)state;
    enum { T = 1600, NDEC = 3 };
    int32_t *t = malloc(sizeof(int32_t) * (T + NDEC));
    tokens(t, T + NDEC, 21);
    const char *arms[2][7] = {{"VT_THREADS", "2", "VT_PROBE", "on", NULL},
                              {"VT_THREADS", "1", "VT_PROBE", "on", "VT_KIMI_BF16_STREAM", "1", NULL}};
    for (int a = 0; a < 2; a++) {
        vt_session *one = piece_session(g_model, "0", arms[a]), *pcs = piece_session(g_model, "100", arms[a]);
        vt_session_capture(one, 1);
        vt_session_capture(pcs, 1);
        float *l1 = logits_of(one, t, T), *l2 = logits_of(pcs, t, T);
        assert_memory_equal(l1, l2, sizeof(float) * (size_t)(T * V));
        vt_model_info info;
        vt_model_get_info(g_model, &info);
        for (int64_t layer = 0; layer < info.n_layers; layer++)
            for (int site = 0; site < 2; site++) {
                const float *r1, *r2;
                vt_test_residual_pair(one, pcs, layer, site, T, &r1, &r2);
                assert_memory_equal(r1, r2, sizeof(float) * (size_t)(T * D));
            }
        assert_int_equal(probe_rows(one, "residual.stream"), probe_rows(pcs, "residual.stream"));
        assert_int_equal(probe_rows(one, "logits"), probe_rows(pcs, "logits"));
        for (int k = 0; k < NDEC; k++) {
            char err[256];
            assert_int_equal(vt_session_decode(one, t[T + k], l1, err, sizeof err), 0);
            assert_int_equal(vt_session_decode(pcs, t[T + k], l2, err, sizeof err), 0);
            assert_memory_equal(l1, l2, sizeof(float) * (size_t)V);
        }
        free(l1); free(l2);
        vt_session_free(one); vt_session_free(pcs);
    }
    free(t);
}

/* VTLAB_PREFILL_PIECE that is not a token count: the session is refused as
 * bad input, naming the variable. */
static void test_prefill_piece_bad_value(void **state) {
    (void)state;
    const char *bad[] = {"x", "-512", "12k", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vt_knobset *ks;
        char err[512] = "";
        vt_session *s = NULL;
        assert_int_equal(vt_knobset_new(&ks), 0);
        setenv("VTLAB_PREFILL_PIECE", bad[i], 1);
        assert_int_equal(vt_session_new(&s, g_model, ks, err, sizeof err), VT_STATUS_INPUT);
        unsetenv("VTLAB_PREFILL_PIECE");
        assert_null(s);
        assert_non_null(strstr(err, "VTLAB_PREFILL_PIECE"));
        vt_knobset_free(ks);
    }
}

/* Decode steps on a team run as one vt_gemm_step (gemm.h): the same bits as
 * on one thread, and as on a team without the step pool (VTLAB_STEP_POOL=0).
 * The tiny config's products are too small for a parallel region of their own
 * at decode (VT_PAR_MIN_WORK; the step's team runs its lm_head and dense MLP),
 * so this model has its vocabulary raised to 12000: the lm_head GEMV (12000 x
 * 192) runs in parallel in every step, with the pool and without. The governor is held off so that
 * every step runs on the team. */
static void test_decode_step_pool_same_bits(void **state) {
    (void)state;
    char dir[256] = "/tmp/vt-test-forward-pool-XXXXXX", cfg[300], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(cfg, sizeof cfg, "%s/big-vocab.json", dir);
    FILE *in = fopen("model/configs/kimi-linear-tiny.json", "r"), *out = fopen(cfg, "w");
    assert_non_null(in);
    assert_non_null(out);
    char line[512];
    int replaced = 0;
    while (fgets(line, sizeof line, in)) {
        if (strstr(line, "\"vocab_size\": 1024,")) { fputs("  \"vocab_size\": 12000,\n", out); replaced++; }
        else fputs(line, out);
    }
    fclose(in);
    assert_int_equal(fclose(out), 0);
    assert_int_equal(replaced, 1);
    char mdir[320];
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    vt_model *m = NULL;
    if (vt_synth(cfg, 11, "f32", mdir, err, sizeof err) || vt_model_open(&m, mdir, err, sizeof err)) fail_msg("%s", err);
    enum { P = 3, STEPS = 6, VB = 12000 };
    int32_t t[P + STEPS];
    vt_test_tokens(t, P + STEPS, 13, VB);
    float *lg[3];
    const char *one[] = {"VT_THREADS", "1", NULL}, *two[] = {"VT_THREADS", "2", NULL};
    setenv("VTLAB_TEAM_GOVERNOR", "0", 1);
    for (int run = 0; run < 3; run++) {
        if (run == 2) setenv("VTLAB_STEP_POOL", "0", 1);   /* read when the session starts */
        vt_session *s = vt_test_session(m, run == 0 ? one : two);
        lg[run] = malloc(sizeof(float) * VB * STEPS);
        assert_non_null(lg[run]);
        assert_int_equal(vt_session_prefill(s, t, P, lg[run], err, sizeof err), 0);
        for (int i = 0; i < STEPS; i++)
            assert_int_equal(vt_session_decode(s, t[P + i], lg[run] + (size_t)i * VB, err, sizeof err), 0);
        vt_session_free(s);
    }
    unsetenv("VTLAB_STEP_POOL");
    unsetenv("VTLAB_TEAM_GOVERNOR");
    assert_memory_equal(lg[0], lg[1], sizeof(float) * VB * STEPS);
    assert_memory_equal(lg[0], lg[2], sizeof(float) * VB * STEPS);
    for (int run = 0; run < 3; run++) free(lg[run]);
    vt_model_free(m);
    assert_int_equal(vt_test_rmdir(dir), 0);
}

static void test_bad_token_is_input_error(void **state) {
    (void)state;
    vt_session *s = vt_test_session(g_model, NULL);
    int32_t t[3] = {1, (int32_t)V, 2};
    char err[512];
    assert_int_equal(vt_session_prefill(s, t, 3, NULL, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "position 1 is outside the vocabulary");
    vt_session_free(s);
}

/* A bf16 checkpoint of the same seed holds the f32 weights rounded to bf16:
 * it loads, runs, and stays close to the f32 model. */
static void test_bf16_checkpoint_runs(void **state) {
    (void)state;
    enum { T = 16 };
    int32_t t[T];
    tokens(t, T, 4);
    vt_model_info info;
    vt_model_get_info(g_model16, &info);
    assert_string_equal(info.weight_dtype, "bf16");
    vt_session *a = vt_test_session(g_model, NULL), *b = vt_test_session(g_model16, NULL);
    float *la = logits_of(a, t, T), *lb = logits_of(b, t, T);
    int agree = 0;
    for (int p = 0; p < T; p++) {
        int64_t ba = 0, bb = 0;
        for (int64_t v = 1; v < V; v++) {
            if (la[p * V + v] > la[p * V + ba]) ba = v;
            if (lb[p * V + v] > lb[p * V + bb]) bb = v;
        }
        agree += ba == bb;
    }
    assert_true(agree >= T * 3 / 4);
    assert_memory_not_equal(la, lb, sizeof(float) * (size_t)(T * V));
    free(la); free(lb);
    vt_session_free(a); vt_session_free(b);
}

static void test_cuda_backend_without_device(void **state) {
    (void)state;
    vt_knobset *ks;
    char err[512];
    assert_int_equal(vt_knobset_new(&ks), 0);
    assert_int_equal(vt_knobset_set(ks, "VT_BACKEND", "cuda", err, sizeof err), 0);
    vt_session *s = NULL;
    int rc = vt_session_new(&s, g_model, ks, err, sizeof err);
    vt_knobset_free(ks);
    if (rc == 0) { vt_session_free(s); skip(); }   /* a machine with a GPU and a CUDA forward */
    assert_int_equal(rc, VT_STATUS_UNSUPPORTED);
    if (!strstr(err, "no CUDA device") && !strstr(err, "not implemented")) fail_msg("unexpected: %s", err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_matches_prefill_f32),
        cmocka_unit_test(test_decode_matches_prefill_bf16),
        cmocka_unit_test(test_stream_probe_shows_knob),
        cmocka_unit_test(test_probes_off_records_nothing),
        cmocka_unit_test(test_audit_and_threads_do_not_change_numbers),
        cmocka_unit_test(test_decode_step_pool_same_bits),
        cmocka_unit_test(test_prefill_pieces_same_bits),
        cmocka_unit_test(test_prefill_piece_bad_value),
        cmocka_unit_test(test_bad_token_is_input_error),
        cmocka_unit_test(test_bf16_checkpoint_runs),
        cmocka_unit_test(test_cuda_backend_without_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
