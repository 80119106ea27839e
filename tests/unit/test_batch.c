/*
 * test_batch.c — sequences packed into one forward (vt_session_prefill_batch,
 * VTLAB_BATCH_ROWS) give exactly what one forward per sequence gives: the
 * logits bit for bit, each sequence's captured residual stream, and the probe
 * records (calls and rows included, audit mode's unwritten rows too), with
 * the replayed scatter defect as well. The lengths are odd and mixed in one
 * pack: 1 and 2 tokens (a decode-like pass, a short conv over the cache),
 * under and over a KDA chunk (31, 32, 33: the token loop and the chunked form,
 * chosen per sequence), 67 (two chunks and an odd tail), and budgets that
 * make packs, lone sequences (longer than the budget) and a sequence in
 * pieces (VTLAB_PREFILL_PIECE). VT_MUTATE_BATCH_STATE_LEAK (make mutation:
 * a pack's sequence starts from the previous one's delta-rule state) turns
 * it red.
 */
#include "tests/unit/vt_test_model.h"

#include <string.h>

#include "model/vt.h"

static char g_dir[256];
static vt_model *g_model;
static int64_t V, D, L;

static int setup(void **state) {
    (void)state;
    if (vt_test_tiny_model(g_dir, sizeof g_dir, "/tmp/vt-test-batch-XXXXXX", 5, "f32", &g_model)) return -1;
    vt_model_info info;
    vt_model_get_info(g_model, &info);
    V = info.vocab_size;
    D = info.hidden_size;
    L = info.n_layers;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    vt_model_free(g_model);
    return vt_test_rmdir(g_dir);
}

/* A session with VTLAB_BATCH_ROWS=rows (NULL: unset) and the knob pairs kv. */
static vt_session *batch_session(const char *rows, const char *const *kv) {
    if (rows) setenv("VTLAB_BATCH_ROWS", rows, 1);
    else unsetenv("VTLAB_BATCH_ROWS");
    vt_session *s = vt_test_session(g_model, kv);
    unsetenv("VTLAB_BATCH_ROWS");
    return s;
}

/* The probe records of a and b are the same, field by field, in order. */
static void same_probes(const vt_session *a, const vt_session *b) {
    assert_int_equal(vt_session_probe_count(a), vt_session_probe_count(b));
    for (int64_t i = 0; i < vt_session_probe_count(a); i++) {
        const vt_probe *x = vt_session_probe_at(a, i), *y = vt_session_probe_at(b, i);
        assert_string_equal(x->site, y->site);
        assert_int_equal(x->layer, y->layer);
        assert_string_equal(x->dtype, y->dtype);
        assert_string_equal(x->src_dtype, y->src_dtype);
        if (x->calls != y->calls || x->rows != y->rows)
            fail_msg("probe %s layer %d: calls/rows %lld/%lld one per forward, %lld/%lld packed", x->site, x->layer,
                     (long long)x->calls, (long long)x->rows, (long long)y->calls, (long long)y->rows);
        assert_int_equal(x->bytes_per_row, y->bytes_per_row);
        assert_int_equal(x->src_row_bytes, y->src_row_bytes);
        assert_int_equal(x->dst_row_bytes, y->dst_row_bytes);
        assert_int_equal(x->converting, y->converting);
        assert_int_equal(x->violations, y->violations);
        assert_int_equal(x->rows_unwritten, y->rows_unwritten);
        assert_string_equal(x->detail, y->detail);
    }
}

/* n sequences of lengths len[] (offsets into off[n + 1]) of pseudo-random tokens. */
static int32_t *sequences(const int64_t *len, int64_t n, int64_t *off, uint32_t seed) {
    off[0] = 0;
    for (int64_t i = 0; i < n; i++) off[i + 1] = off[i] + len[i];
    int32_t *t = malloc(sizeof(int32_t) * (size_t)off[n]);
    assert_non_null(t);
    vt_test_tokens(t, off[n], seed, V);
    return t;
}

/* The batch through a session with budget `rows`, against one prefill per
 * sequence on another session with the same knobs: logits, every
 * sequence's residuals after every sublayer, and the probe records. */
static void check_batch(const int64_t *len, int64_t n, const char *rows, const char *const *kv, uint32_t seed) {
    int64_t off[64];
    char err[512];
    assert_true(n < 64);
    int32_t *t = sequences(len, n, off, seed);
    vt_session *bs = batch_session(rows, kv), *ls = batch_session(rows, kv);
    float *lb = malloc(sizeof(float) * (size_t)(off[n] * V)), *ll = malloc(sizeof(float) * (size_t)(off[n] * V));
    assert_non_null(lb);
    assert_non_null(ll);
    vt_session_capture(bs, 1);
    vt_session_capture(ls, 1);
    if (vt_session_prefill_batch(bs, n, t, off, lb, err, sizeof err)) fail_msg("batch: %s", err);
    for (int64_t i = 0; i < n; i++) {
        if (vt_session_prefill(ls, t + off[i], len[i], ll + off[i] * V, err, sizeof err)) fail_msg("prefill: %s", err);
        if (memcmp(lb + off[i] * V, ll + off[i] * V, sizeof(float) * (size_t)(len[i] * V)))
            fail_msg("budget %s: sequence %lld (%lld tokens): logits packed != one forward", rows ? rows : "default",
                     (long long)i, (long long)len[i]);
        for (int64_t l = 0; l < L; l++)
            for (int site = 0; site < 2; site++) {
                int64_t Tb = 0, Tl = 0;
                const float *rb = vt_session_residual_seq(bs, i, l, site, &Tb);
                const float *rl = vt_session_residual(ls, l, site, &Tl);
                assert_non_null(rb);
                assert_non_null(rl);
                assert_int_equal(Tb, len[i]);
                assert_int_equal(Tl, len[i]);
                if (memcmp(rb, rl, sizeof(float) * (size_t)(len[i] * D)))
                    fail_msg("sequence %lld: residual layer %lld site %d packed != one forward", (long long)i,
                             (long long)l, site);
            }
    }
    same_probes(ls, bs);
    free(t); free(lb); free(ll);
    vt_session_free(bs);
    vt_session_free(ls);
}

static const int64_t MIXED[] = {1, 2, 7, 31, 32, 33, 67, 5, 1, 40, 3};
enum { NMIXED = sizeof MIXED / sizeof MIXED[0] };

/* f32 on one thread, audit probes: packs [1 2 7 31 32] [33 67] [5 1 40 3]. */
static void test_mixed_f32(void **state) {
    (void)state;
    const char *kv[] = {"VT_THREADS", "1", "VT_PROBE", "audit", NULL};
    check_batch(MIXED, NMIXED, "100", kv, 3);
}

/* Every bf16 rounding knob, 2 threads, one pack of all 222 tokens (the
 * default budget) and the biased router. */
static void test_mixed_bf16_one_pack(void **state) {
    (void)state;
    const char *kv[] = {"VT_THREADS", "2", "VT_PROBE", "on", "VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_EXPERT_OUT", "1",
                        "VT_KIMI_BF16_ACT", "1", "VT_KIMI_ROUTER_WEIGHTS", "biased", NULL};
    check_batch(MIXED, NMIXED, NULL, kv, 5);
}

/* The replayed scatter defect (a bf16 stream sizes the f32 rows at half):
 * its scrambled copy depends on the extent of its buffers, so a pack runs it
 * per sequence; the logits and the violations it records (audit: the rows
 * it leaves unwritten) are those of one forward each. Budget 64: packs of
 * several, lone ones (67 > 64) and a pack of one. */
static void test_replayed_fault(void **state) {
    (void)state;
    const char *kv[] = {"VT_THREADS", "2", "VT_PROBE", "audit", "VT_KIMI_BF16_STREAM", "1", "VT_FAULT",
                        "moe_scatter_row_bytes_from_stream", NULL};
    check_batch(MIXED, NMIXED, "64", kv, 7);
    const char *kv2[] = {"VT_THREADS", "1", "VT_PROBE", "on", "VT_KIMI_BF16_STREAM", "1",
                         "VT_KIMI_BF16_EXPERT_OUT", "1", "VT_FAULT", "moe_scatter_row_bytes_from_stream", NULL};
    check_batch(MIXED, NMIXED, "1000", kv2, 8);
}

/* A sequence too long for the budget runs alone, and one of two pieces or
 * more (VTLAB_PREFILL_PIECE, forward.c) in its pieces, between packs. */
static void test_long_sequence_in_pieces(void **state) {
    (void)state;
    const int64_t len[] = {3, 1030, 9, 4};
    const char *kv[] = {"VT_THREADS", "2", "VT_PROBE", "on", NULL};
    setenv("VTLAB_PREFILL_PIECE", "100", 1);   /* rounded up to 512: 1030 tokens run as 512 + 518 */
    check_batch(len, 4, "256", kv, 11);
    unsetenv("VTLAB_PREFILL_PIECE");
}

/* Budget 0: one pass per sequence, through the same call. */
static void test_budget_zero(void **state) {
    (void)state;
    const char *kv[] = {"VT_PROBE", "on", NULL};
    check_batch(MIXED, 6, "0", kv, 13);
    vt_session *s = batch_session("0", NULL);
    assert_int_equal(vt_session_batch_rows(s), 0);
    vt_session_free(s);
    s = batch_session("384", NULL);
    assert_int_equal(vt_session_batch_rows(s), 384);
    vt_session_free(s);
}

/* After a batch the caches hold no one sequence: decode is refused until a
 * prefill, which then decodes as ever. Bad batches and budgets are bad input. */
static void test_decode_and_bad_input(void **state) {
    (void)state;
    int64_t off[4];
    const int64_t len[] = {5, 8, 3};
    char err[512];
    int32_t *t = sequences(len, 3, off, 17);
    vt_session *s = batch_session(NULL, NULL);
    float *lg = malloc(sizeof(float) * (size_t)(off[3] * V));
    assert_non_null(lg);
    assert_int_equal(vt_session_prefill_batch(s, 3, t, off, lg, err, sizeof err), 0);
    assert_int_equal(vt_session_decode(s, t[0], lg, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "batch");
    assert_int_equal(vt_session_prefill(s, t, 5, lg, err, sizeof err), 0);
    assert_int_equal(vt_session_decode(s, t[1], lg, err, sizeof err), 0);
    assert_int_equal(vt_session_prefill_batch(s, 0, t, off, lg, err, sizeof err), VT_STATUS_INPUT);
    const int64_t empty[3] = {0, 5, 5}, from1[2] = {1, 5};
    assert_int_equal(vt_session_prefill_batch(s, 2, t, empty, lg, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "sequence 1 has no tokens");
    assert_int_equal(vt_session_prefill_batch(s, 1, t, from1, lg, err, sizeof err), VT_STATUS_INPUT);
    t[7] = (int32_t)V;   /* sequence 1's third token */
    assert_int_equal(vt_session_prefill_batch(s, 3, t, off, lg, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "outside the vocabulary");
    vt_session_free(s);
    const char *bad[] = {"x", "-1", "99999999999", "256k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vt_knobset *ks;
        vt_session *b = NULL;
        assert_int_equal(vt_knobset_new(&ks), 0);
        setenv("VTLAB_BATCH_ROWS", bad[i], 1);
        assert_int_equal(vt_session_new(&b, g_model, ks, err, sizeof err), VT_STATUS_INPUT);
        unsetenv("VTLAB_BATCH_ROWS");
        assert_null(b);
        VT_ASSERT_CONTAINS(err, "VTLAB_BATCH_ROWS");
        vt_knobset_free(ks);
    }
    free(t);
    free(lg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_f32),
        cmocka_unit_test(test_mixed_bf16_one_pack),
        cmocka_unit_test(test_replayed_fault),
        cmocka_unit_test(test_long_sequence_in_pieces),
        cmocka_unit_test(test_budget_zero),
        cmocka_unit_test(test_decode_and_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
