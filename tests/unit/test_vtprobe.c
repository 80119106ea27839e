/* test_vtprobe.c — model/vtprobe.h, the engine side of the protocol: the
 * copy invariant and its detail text, aggregation and merge, the sentinel,
 * sha256 against vtlab's, and the serve loop on scripted input (a good
 * request answered with its logits and probes; every malformed request
 * answered with an error, serving going on; EOF inside a frame reported).
 * The implementation is compiled into the model library (probes.c). */
#include "tests/unit/vt_test.h"

#include "model/vt.h"

static void test_copy_invariant(void **state) {
    (void)state;
    vtp_probes p;
    memset(&p, 0, sizeof p);
    vtp_probe_copy(&p, "moe.scatter", 1, "f32", "f32", 10, 256, 256, 256, 0, -1);   /* whole rows: fine */
    vtp_probe_copy(&p, "moe.scatter", 1, "f32", "f32", 10, 256, 256, 256, 0, -1);
    assert_int_equal(p.n, 0);   /* mode off: nothing recorded */
    p.mode = VTP_ON;
    vtp_probe_copy(&p, "moe.scatter", 1, "f32", "f32", 10, 256, 256, 256, 0, -1);
    vtp_probe_copy(&p, "moe.scatter", 1, "f32", "f32", 6, 256, 256, 256, 0, -1);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.recs[0].calls, 2);
    assert_int_equal(p.recs[0].rows, 16);
    assert_int_equal(p.recs[0].violations, 0);
    assert_int_equal(p.recs[0].rows_unwritten, -1);
    /* the defect: half-length rows */
    vtp_probe_copy(&p, "moe.scatter", 2, "f32", "f32", 10, 128, 256, 256, 0, 3);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.recs[1].violations, 1);
    assert_int_equal(p.recs[1].rows_unwritten, 3);
    assert_string_equal(p.recs[1].detail, "copied 128 bytes per row; source row is 256 bytes (f32), destination row "
                                          "256 bytes (f32); destination rows left unwritten");
    /* a converting copy may change the dtype; its bytes must match the destination */
    vtp_probe_copy(&p, "moe.gather", 0, "bf16", "f32", 4, 256, 128, 256, 1, 0);
    assert_int_equal(p.recs[2].violations, 0);
    vtp_probe_copy(&p, "moe.gather", 0, "bf16", "f32", 4, 128, 128, 256, 1, 0);
    assert_int_equal(p.recs[3].violations, 1);
    /* merge: counts add, the first detail stays */
    vtp_probes q;
    memset(&q, 0, sizeof q);
    for (int64_t i = 0; i < p.n; i++) assert_int_equal(vtp_probes_merge(&q, &p.recs[i]), 0);
    for (int64_t i = 0; i < p.n; i++) assert_int_equal(vtp_probes_merge(&q, &p.recs[i]), 0);
    assert_int_equal(q.n, p.n);
    assert_int_equal(q.recs[1].calls, 2);
    assert_int_equal(q.recs[1].violations, 2);
    assert_int_equal(q.recs[1].rows_unwritten, 6);
    assert_string_equal(q.recs[1].detail, p.recs[1].detail);
    vtp_probes_free(&p);
    vtp_probes_free(&q);
}

static void test_sentinel(void **state) {
    (void)state;
    float f[4 * 8];
    uint16_t h[4 * 8];
    vtp_sentinel_fill(f, "f32", 4, 32);
    vtp_sentinel_fill(h, "bf16", 4, 16);
    assert_int_equal(vtp_rows_unwritten(f, "f32", 4, 32), 4);
    assert_int_equal(vtp_rows_unwritten(h, "bf16", 4, 16), 4);
    for (int i = 0; i < 16; i++) f[i] = (float)i;      /* rows 0 and 1 written */
    for (int i = 0; i < 8 * 3 + 7; i++) h[i] = 0x3f80; /* rows 0-2 written, row 3 all but its last element */
    assert_int_equal(vtp_rows_unwritten(f, "f32", 4, 32), 2);
    assert_int_equal(vtp_rows_unwritten(h, "bf16", 4, 16), 1);
    uint32_t bits;
    vtp_sentinel_fill(&bits, "f32", 1, 4);
    assert_int_equal(bits, 0x7FA5A5A5u);   /* the builtin model's sentinel (tensor.c) */
}

static void test_sha256_agrees(void **state) {
    (void)state;
    char a[65], b[65];
    unsigned char buf[3000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 31 + 7);
    for (size_t n = 0; n < sizeof buf; n += 97) {
        vtp_sha256 c;
        vtp_sha256_init(&c);
        vtp_sha256_update(&c, buf, n / 2);
        vtp_sha256_update(&c, buf + n / 2, n - n / 2);
        vtp_sha256_hex(&c, a);
        vt_sha256_hex(buf, n, b);
        assert_string_equal(a, b);
    }
}

/* A forward that writes logits[t][v] = tokens[t] + v and one buffer probe. */
static int fake_forward(void *user, const int32_t *tok, int64_t T, float *logits, float *resid, vtp_probes *pr,
                        char *err, size_t errlen) {
    (void)user; (void)resid; (void)err; (void)errlen;
    for (int64_t t = 0; t < T; t++)
        for (int v = 0; v < 4; v++) logits[t * 4 + v] = (float)(tok[t] + v);
    vtp_probe_buffer(pr, "logits", -1, "f32", T, 16);
    return 0;
}

/* Serves the scripted input; the output text (headers and payloads). */
static size_t g_outlen;   /* the length of serve()'s output (it holds binary payloads) */

static char *serve_with(const char *in, size_t inlen, int *rc, int max_batch, vtp_forward_fn fn,
                        vtp_forward_batch_fn bfn);

static char *serve(const char *in, size_t inlen, int *rc) { return serve_with(in, inlen, rc, 0, fake_forward, NULL); }

/* serve with a hello declaring max_batch, through vtp_serve_batch (fn, bfn);
 * max_batch 0 and no bfn: vtp_serve itself, the API engines were written against. */
static char *serve_with(const char *in, size_t inlen, int *rc, int max_batch, vtp_forward_fn fn,
                        vtp_forward_batch_fn bfn) {
    static const char *const sites[] = {"logits"};
    vtp_hello h;
    memset(&h, 0, sizeof h);
    h.engine = "fake"; h.version = "1"; h.commit = "";
    h.model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    h.vocab = 4; h.hidden = 2; h.n_layers = 1; h.layer_kinds = "K/D";
    h.probe_sites = sites; h.n_probe_sites = 1; h.deterministic = 1;
    h.max_batch = max_batch;
    setenv("VTP_PROBE", "on", 1);
    FILE *fi = fmemopen((void *)in, inlen, "r");
    char *out = NULL;
    size_t outlen = 0;
    FILE *fo = open_memstream(&out, &outlen);
    *rc = max_batch || bfn ? vtp_serve_batch(fi, fo, &h, fn, bfn, NULL) : vtp_serve(fi, fo, &h, fn, NULL);
    fclose(fi);
    fclose(fo);
    g_outlen = outlen;
    return out;
}

/* Where text occurs in the output (binary-safe), or NULL. */
static const char *find(const char *out, const char *text) { return memmem(out, g_outlen, text, strlen(text)); }

static void test_serve(void **state) {
    (void)state;
    char in[1024];
    size_t n = 0;
    int32_t tok[2] = {3, 1};
    n += (size_t)sprintf(in + n, "this is not json\n");
    n += (size_t)sprintf(in + n, "{\"type\":\"forward\",\"tokens\":2,\"payload_bytes\":8}\n");            /* no id */
    memcpy(in + n, tok, 8); n += 8;
    n += (size_t)sprintf(in + n, "{\"type\":\"forward\",\"id\":1,\"tokens\":2,\"payload_bytes\":4}\n");   /* size */
    memcpy(in + n, tok, 4); n += 4;
    n += (size_t)sprintf(in + n, "{\"type\":\"forward\",\"id\":2,\"tokens\":2,\"payload_bytes\":8}\n");   /* good */
    memcpy(in + n, tok, 8); n += 8;
    int32_t big[1] = {4};
    n += (size_t)sprintf(in + n, "{\"type\":\"forward\",\"id\":3,\"tokens\":1,\"payload_bytes\":4}\n");   /* id >= vocab */
    memcpy(in + n, big, 4); n += 4;
    n += (size_t)sprintf(in + n, "{\"type\":\"bye\",\"id\":4}\n");
    int rc = 1;
    char *out = serve(in, n, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(find(out, "{\"type\":\"hello\",\"protocol\":1,"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":null,\"message\":\"header is not a JSON object\"}"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":null,\"message\":\"id: expected an integer\"}"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":1,\"message\":\"payload_bytes: expected 4 * tokens\"}"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":3,\"message\":\"tokens[0]: id 4 not in [0, 4)\"}"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":4,\"message\":\"type: expected \\\"forward\\\"\"}"));
    const char *lg = find(out, "{\"type\":\"logits\",\"id\":2,\"tokens\":2,\"vocab\":4,\"residuals\":false,"
                                 "\"payload_bytes\":32,\"probes\":[{\"site\":\"logits\",\"layer\":-1,");
    assert_non_null(lg);
    const float *f = (const float *)(strchr(lg, '\n') + 1);
    float want[8] = {3, 4, 5, 6, 1, 2, 3, 4};
    assert_memory_equal(f, want, sizeof want);
    free(out);
    /* an empty line first (found by fuzz_vtp_serve: the line buffer was
     * still NULL when its terminator was written) is a malformed request */
    out = serve("\n", 1, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":null,\"message\":\"header is not a JSON object\"}"));
    free(out);
    /* EOF inside a frame's payload is an error, not a clean end */
    n = (size_t)sprintf(in, "{\"type\":\"forward\",\"id\":0,\"tokens\":2,\"payload_bytes\":8}\nabc");
    out = serve(in, n, &rc);
    assert_int_equal(rc, 1);
    free(out);
}

/* The batch callback: fake_forward's numbers over all rows at once, one
 * buffer record per sequence, and what it was given (n, offsets). */
static int64_t g_bn, g_boff[8];

static int fake_forward_batch(void *user, int64_t n, const int32_t *tok, const int64_t *off, float *logits,
                              float *resid, vtp_probes *pr, char *err, size_t errlen) {
    (void)user; (void)resid; (void)err; (void)errlen;
    g_bn = n;
    for (int64_t i = 0; i <= n && i < 8; i++) g_boff[i] = off[i];
    for (int64_t t = 0; t < off[n]; t++)
        for (int v = 0; v < 4; v++) logits[t * 4 + v] = (float)(tok[t] + v);
    for (int64_t i = 0; i < n; i++) vtp_probe_buffer(pr, "logits", -1, "f32", off[i + 1] - off[i], 16);
    return 0;
}

/* Appends a forward request for tokens tok[0..T) with header member extra
 * (e.g. ",\"sequences\":[2,1]") to in at *n. */
static void request(char *in, size_t *n, int id, const int32_t *tok, int T, const char *extra) {
    *n += (size_t)sprintf(in + *n, "{\"type\":\"forward\",\"id\":%d,\"tokens\":%d%s,\"payload_bytes\":%d}\n", id, T,
                          extra, 4 * T);
    memcpy(in + *n, tok, (size_t)T * 4);
    *n += (size_t)T * 4;
}

/* Several sequences in one request (docs/engine-protocol.md): a hello that
 * declares max_batch says so; a batch is answered with the bytes of one
 * request per sequence (logits one after another, probe records summed) and
 * echoes its sequences, through the one-sequence callback or a batch one;
 * a batch that does not add up, has more sequences than max_batch, or goes
 * to an engine that declared none, gets an error and serving goes on. */
static void test_serve_batch(void **state) {
    (void)state;
    char in[2048];
    size_t n = 0;
    int32_t tok[3] = {3, 1, 2};
    request(in, &n, 1, tok, 2, "");
    request(in, &n, 2, tok + 2, 1, "");
    request(in, &n, 3, tok, 3, ",\"sequences\":[2,1]");
    request(in, &n, 4, tok, 3, ",\"sequences\":[1,1,1]");
    request(in, &n, 5, tok, 3, ",\"sequences\":[1,1]");               /* sums to 2, not 3 */
    request(in, &n, 6, tok, 3, ",\"sequences\":[3,0]");
    request(in, &n, 7, tok, 3, ",\"sequences\":[1,1,1,0,0]");         /* 5 > max_batch 3 */
    request(in, &n, 8, tok, 3, ",\"sequences\":[1,\"x\",1]");
    for (int with_bfn = 0; with_bfn < 2; with_bfn++) {
        int rc = 1;
        g_bn = 0;
        char *out = serve_with(in, n, &rc, 3, fake_forward, with_bfn ? fake_forward_batch : NULL);
        assert_int_equal(rc, 0);
        assert_non_null(find(out, "\"capture\":false,\"max_batch\":3}\n"));
        const char *one = find(out, "{\"type\":\"logits\",\"id\":1,");
        const char *two = find(out, "{\"type\":\"logits\",\"id\":2,");
        const char *bat = find(out, "{\"type\":\"logits\",\"id\":3,\"tokens\":3,\"sequences\":[2,1],\"vocab\":4,"
                                    "\"residuals\":false,\"payload_bytes\":48,\"probes\":[{\"site\":\"logits\",\"layer\":-1,"
                                    "\"dtype\":\"f32\",\"src_dtype\":\"\",\"calls\":2,\"rows\":3,");
        assert_non_null(one);
        assert_non_null(two);
        assert_non_null(bat);
        /* the batch's logits are sequence 0's rows then sequence 1's, as requests 1 and 2 gave them */
        float want[12];
        memcpy(want, strchr(one, '\n') + 1, 8 * sizeof(float));
        memcpy(want + 8, strchr(two, '\n') + 1, 4 * sizeof(float));
        assert_memory_equal(strchr(bat, '\n') + 1, want, sizeof want);
        assert_non_null(find(out, "{\"type\":\"logits\",\"id\":4,\"tokens\":3,\"sequences\":[1,1,1],"));
        assert_non_null(find(out, "{\"type\":\"error\",\"id\":5,\"message\":\"sequences: lengths sum to 2, expected tokens 3\"}"));
        assert_non_null(find(out, "{\"type\":\"error\",\"id\":6,\"message\":\"sequences: expected an array of positive lengths\"}"));
        assert_non_null(find(out, "{\"type\":\"error\",\"id\":7,\"message\":\"sequences: 5 sequences, more than max_batch 3\"}"));
        assert_non_null(find(out, "{\"type\":\"error\",\"id\":8,\"message\":\"sequences: expected an array of positive lengths\"}"));
        if (with_bfn) {   /* the last batch served: [1,1,1] as offsets 0 1 2 3 */
            assert_int_equal(g_bn, 3);
            assert_int_equal(g_boff[0], 0);
            assert_int_equal(g_boff[3], 3);
        } else {
            assert_int_equal(g_bn, 0);
        }
        free(out);
    }
    /* vtp_serve (no max_batch): the hello says nothing of batches; a request
     * of one sequence that names it is served and echoed, two are refused */
    n = 0;
    request(in, &n, 1, tok, 3, ",\"sequences\":[3]");
    request(in, &n, 2, tok, 3, ",\"sequences\":[2,1]");
    int rc = 1;
    char *out = serve(in, n, &rc);
    assert_int_equal(rc, 0);
    assert_null(find(out, "\"max_batch\":"));
    assert_non_null(find(out, "{\"type\":\"logits\",\"id\":1,\"tokens\":3,\"sequences\":[3],"));
    assert_non_null(find(out, "{\"type\":\"error\",\"id\":2,\"message\":\"sequences: 2 sequences, more than max_batch 1\"}"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_invariant),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_sha256_agrees),
        cmocka_unit_test(test_serve),
        cmocka_unit_test(test_serve_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
