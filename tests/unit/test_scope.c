/* test_scope.c — scoped levers (docs/localize.md): the layer-set syntax of
 * vtprobe.h, the VT_KIMI_BF16_*_LAYERS knobs, what a scope does to the tiny
 * model (every site of every layer is exactly the unscoped lever, "none" is
 * the lever off, a store outside the scope is f32 in the probes) and the
 * planted per-site fault (VT_TEST_LOSSY_LAYERS). */
#include "tests/unit/vt_test.h"
#include "tests/unit/vt_test_model.h"

#include "model/model.h"
#include "model/vtprobe.h"

enum { T = 24 };
static char g_dir[256];
static vt_model *g_m;
static int64_t g_vocab;
static int32_t g_tok[T];

static int setup(void **state) {
    (void)state;
    if (vt_test_tiny_model(g_dir, sizeof g_dir, "/tmp/vt-test-scope-XXXXXX", 1, "f32", &g_m)) return -1;
    vt_model_info mi;
    vt_model_get_info(g_m, &mi);
    g_vocab = mi.vocab_size;
    vt_test_tokens(g_tok, T, 7, g_vocab);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    vt_model_free(g_m);
    return vt_test_rmdir(g_dir);
}

/* canonical text of a layer set, or "ERR: why" */
static const char *canon(const char *text, int n_layers, int sites) {
    static char out[VTP_LAYER_SET_TEXT + 8];
    vtp_layer_set s;
    char err[400];
    if (vtp_layer_set_parse(text, n_layers, sites, &s, err, sizeof err)) {
        snprintf(out, sizeof out, "ERR: %s", err);
        return out;
    }
    assert_int_equal(vtp_layer_set_format(&s, out, sizeof out), 0);
    return out;
}

static void test_layer_set_syntax(void **state) {
    (void)state;
    assert_string_equal(canon("0-3,7", 8, 1), "0-3,7");
    assert_string_equal(canon("7,0-3", 8, 1), "0-3,7");
    assert_string_equal(canon("3,2,1,01", 8, 1), "1-3");
    assert_string_equal(canon("0.attn,0.ffn", 8, 1), "0");
    assert_string_equal(canon("2-4.ffn,3.attn", 8, 1), "2.ffn,3,4.ffn");
    assert_string_equal(canon("all", 8, 1), "all");
    assert_string_equal(canon("none", 8, 1), "none");
    assert_string_equal(canon("255", 0, 1), "255");
    const char *bad[] = {"", "3-1", "a", "1,", ",1", "1 ,2", "256", "1.mlp", "-1", "1-", "0-3;7", "1..2", NULL};
    for (int i = 0; bad[i]; i++) {
        const char *r = canon(bad[i], 0, 1);
        if (strncmp(r, "ERR: ", 5)) fail_msg("\"%s\" parsed as \"%s\"", bad[i], r);
    }
    VT_ASSERT_CONTAINS(canon("3-1", 0, 1), "ends before it starts");
    VT_ASSERT_CONTAINS(canon("x", 0, 1), "expected \"all\", \"none\" or layers like \"0-3,7\"");
    VT_ASSERT_CONTAINS(canon("0-8", 8, 1), "layer 8 is beyond the model's 8 layers (0-7)");
    VT_ASSERT_CONTAINS(canon("2.ffn", 8, 0), "scoped by whole layers");
    /* the longest canonical text fits */
    vtp_layer_set s;
    memset(&s, 0, sizeof s);
    for (int l = 0; l < VTP_MAX_LAYERS; l++) s.site[l] = (unsigned char)(1 + l % 2);
    char out[VTP_LAYER_SET_TEXT];
    assert_int_equal(vtp_layer_set_format(&s, out, sizeof out), 0);
    assert_string_equal(canon(out, 0, 1), out);
    assert_true(vtp_layer_set_has(&s, 0, 0) && !vtp_layer_set_has(&s, 0, 1) && vtp_layer_set_has(&s, 1, 1));
}

static void test_scope_knobs(void **state) {
    (void)state;
    vt_knobset *ks;
    char err[1024], h0[65], h1[65];
    assert_int_equal(vt_knobset_new(&ks), 0);
    vt_knobset_hash(ks, h0);
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_BF16_STREAM_LAYERS"), "all");
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM_LAYERS", "all", err, sizeof err), 0);
    vt_knobset_hash(ks, h1);
    assert_string_equal(h0, h1);   /* "all" is the unscoped lever: recorded identities keep their hash */
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM_LAYERS", "7,0-3", err, sizeof err), 0);
    assert_string_equal(vt_knobset_get(ks, "VT_KIMI_BF16_STREAM_LAYERS"), "0-3,7");
    vt_knobset_hash(ks, h1);
    assert_string_not_equal(h0, h1);   /* a scope changes the numbers: part of the identity */
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_ACT_LAYERS", "3-1", err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "VT_KIMI_BF16_ACT_LAYERS");
    VT_ASSERT_CONTAINS(err, "expected \"all\", \"none\" or layers like \"0-3,7\"");
    assert_string_equal(vt_knob_scope_of("VT_KIMI_BF16_EXPERT_OUT_LAYERS")->name, "VT_KIMI_BF16_EXPERT_OUT");
    assert_null(vt_knob_scope_of("VT_KIMI_BF16_STREAM"));
    vt_knobset_free(ks);
}

/* logits of the tiny model under knob pairs kv */
static float *logits_of(const char *const *kv) {
    vt_session *s = vt_test_session(g_m, kv);
    float *l = vt_test_logits(s, g_tok, T, g_vocab);
    vt_session_free(s);
    return l;
}

static int same(const float *a, const float *b) { return !memcmp(a, b, sizeof(float) * (size_t)(T * g_vocab)); }

static void test_every_site_is_unscoped(void **state) {
    (void)state;
    const char *un[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_ACT", "1", "VT_KIMI_BF16_EXPERT_OUT", "1", NULL};
    const char *all[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_ACT", "1", "VT_KIMI_BF16_EXPERT_OUT", "1",
                         "VT_KIMI_BF16_STREAM_LAYERS", "0-7", "VT_KIMI_BF16_ACT_LAYERS", "0-3,4.attn,4.ffn,5-7",
                         "VT_KIMI_BF16_EXPERT_OUT_LAYERS", "0-7", NULL};
    const char *none[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_ACT", "1", "VT_KIMI_BF16_EXPERT_OUT", "1",
                          "VT_KIMI_BF16_STREAM_LAYERS", "none", "VT_KIMI_BF16_ACT_LAYERS", "none",
                          "VT_KIMI_BF16_EXPERT_OUT_LAYERS", "none", NULL};
    float *a = logits_of(un), *b = logits_of(all), *c = logits_of(none), *f = logits_of(NULL);
    assert_true(same(a, b));    /* every site of every layer: the lever unscoped, bit for bit */
    assert_true(same(c, f));    /* no site: the lever off */
    assert_false(same(a, f));
    free(a); free(b); free(c); free(f);
}

static void test_sites_compose(void **state) {
    (void)state;
    const char *l3[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "3", NULL};
    const char *both[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "3.ffn,3.attn", NULL};
    const char *attn[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "3.attn", NULL};
    const char *l5[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "5", NULL};
    float *a = logits_of(l3), *b = logits_of(both), *c = logits_of(attn), *d = logits_of(l5), *f = logits_of(NULL);
    assert_true(same(a, b));
    assert_false(same(a, c));
    assert_false(same(c, f));
    assert_false(same(a, d));
    assert_false(same(a, f));
    free(a); free(b); free(c); free(d); free(f);
}

/* A store outside the scope is f32 in the probes: residual.stream of layer
 * L shows the dtype of its FFN store. */
static void test_probes_follow_scope(void **state) {
    (void)state;
    const char *kv[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "2,5,6.attn", "VT_PROBE", "on", NULL};
    vt_session *s = vt_test_session(g_m, kv);
    free(vt_test_logits(s, g_tok, T, g_vocab));
    int seen = 0;
    for (int64_t i = 0; i < vt_session_probe_count(s); i++) {
        const vt_probe *p = vt_session_probe_at(s, i);
        if (strcmp(p->site, "residual.stream")) continue;
        const char *want = p->layer == 2 || p->layer == 5 ? "bf16" : "f32";
        if (strcmp(p->dtype, want)) fail_msg("layer %d: residual.stream %s, expected %s", p->layer, p->dtype, want);
        seen |= 1 << p->layer;
    }
    assert_int_equal(seen, 0xff);
    vt_session_free(s);
}

static void test_scope_beyond_model(void **state) {
    (void)state;
    vt_knobset *ks;
    vt_session *s = NULL;
    char err[1024];
    assert_int_equal(vt_knobset_new(&ks), 0);
    assert_int_equal(vt_knobset_set(ks, "VT_KIMI_BF16_STREAM_LAYERS", "0-3,8", err, sizeof err), 0);
    assert_int_equal(vt_session_new(&s, g_m, ks, err, sizeof err), VT_STATUS_INPUT);
    VT_ASSERT_CONTAINS(err, "VT_KIMI_BF16_STREAM_LAYERS");
    VT_ASSERT_CONTAINS(err, "layer 8 is beyond the model's 8 layers (0-7)");
    assert_null(s);
    vt_knobset_free(ks);
}

/* The planted fault damages where a lever acts and nowhere else. */
static void test_lossy_only_where_the_lever_acts(void **state) {
    (void)state;
    const char *lever[] = {"VT_KIMI_BF16_STREAM", "1", NULL};
    const char *lossy[] = {"VT_KIMI_BF16_STREAM", "1", "VT_TEST_LOSSY_LAYERS", "3", NULL};
    const char *off[] = {"VT_TEST_LOSSY_LAYERS", "3", NULL};
    const char *out_un[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "0-2,4-7", NULL};
    const char *out_lossy[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "0-2,4-7",
                               "VT_TEST_LOSSY_LAYERS", "3", NULL};
    const char *act[] = {"VT_KIMI_BF16_ACT", "1", NULL};
    const char *act_lossy[] = {"VT_KIMI_BF16_ACT", "1", "VT_TEST_LOSSY_LAYERS", "3", NULL};
    float *a = logits_of(lever), *b = logits_of(lossy), *c = logits_of(off), *f = logits_of(NULL);
    float *d = logits_of(out_un), *e = logits_of(out_lossy), *g = logits_of(act), *h = logits_of(act_lossy);
    assert_false(same(a, b));
    assert_true(same(c, f));
    assert_true(same(d, e));
    assert_false(same(g, h));
    free(a); free(b); free(c); free(d); free(e); free(f); free(g); free(h);
    assert_true(vt_round_mantissa(1.4f, 1) == 1.5f && vt_round_mantissa(1.2f, 1) == 1.0f);
}

/* Packed sequences (vt_session_prefill_batch) enter each site as one does. */
static void test_scope_packed(void **state) {
    (void)state;
    const char *kv[] = {"VT_KIMI_BF16_STREAM", "1", "VT_KIMI_BF16_STREAM_LAYERS", "1-2,6.ffn",
                        "VT_KIMI_BF16_ACT", "1", "VT_KIMI_BF16_ACT_LAYERS", "4", NULL};
    vt_session *s = vt_test_session(g_m, kv);
    const int64_t off[3] = {0, 10, T};
    float *packed = malloc(sizeof(float) * (size_t)(T * g_vocab));
    char err[512];
    assert_int_equal(vt_session_prefill_batch(s, 2, g_tok, off, packed, err, sizeof err), 0);
    float *one = vt_test_logits(s, g_tok, 10, g_vocab), *two = vt_test_logits(s, g_tok + 10, T - 10, g_vocab);
    assert_memory_equal(packed, one, sizeof(float) * (size_t)(10 * g_vocab));
    assert_memory_equal(packed + 10 * g_vocab, two, sizeof(float) * (size_t)((T - 10) * g_vocab));
    free(packed); free(one); free(two);
    vt_session_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_set_syntax),
        cmocka_unit_test(test_scope_knobs),
        cmocka_unit_test(test_every_site_is_unscoped),
        cmocka_unit_test(test_sites_compose),
        cmocka_unit_test(test_probes_follow_scope),
        cmocka_unit_test(test_scope_beyond_model),
        cmocka_unit_test(test_lossy_only_where_the_lever_acts),
        cmocka_unit_test(test_scope_packed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
