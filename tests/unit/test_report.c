/*
 * test_report.c — reports and nightly comparisons on fixture histories built
 * row by row in a temporary results.db (no model is run):
 *   - escaping for HTML/XML and markdown (a `<script>` in a spec);
 *   - a planted accuracy drop is flagged (paired McNemar; and by Wilson
 *     intervals on a different dataset); a change within noise is not;
 *   - a changed logits hash on a deterministic arm is flagged with its KL; a
 *     changed knob set is only noted;
 *   - a throughput drop beyond the noise measured over repeats and nights is
 *     flagged; a wobble within it is not;
 *   - a new confound flag fails the night; an expected one (replay) does not;
 *   - JUnit counts match the findings; the report and its charts are written.
 */
#include "tests/unit/vt_test.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/metrics.h"
#include "harness/nightly_confounds.h"
#include "harness/nightly.h"
#include "harness/plot.h"
#include "harness/report.h"
#include "harness/store.h"
#include "harness/store_internal.h"   /* raw SQL: old schemas, broken rows, fixtures no API writes */
#include "harness/store_nightly.h"
#include "harness/util.h"

static char dbpath[256], outdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dbpath, sizeof dbpath, "/tmp/vtlab-test-report-%d.db", (int)getpid());
    snprintf(outdir, sizeof outdir, "/tmp/vtlab-test-report-%d.out", (int)getpid());
    char p[600];
    unlink(dbpath);
    snprintf(p, sizeof p, "%s-wal", dbpath);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", dbpath);
    unlink(p);
    snprintf(p, sizeof p, "rm -rf '%s'", outdir);
    if (system(p) != 0) return -1;
    return 0;
}
static int teardown(void **state) { return setup(state); }

static lab_store *open_db(void) {
    lab_store *st = NULL;
    char err[512] = "";
    if (lab_store_open(&st, dbpath, err, sizeof err)) fail_msg("open: %s", err);
    return st;
}

static void sql(lab_store *st, const char *q) {
    char *msg = NULL;
    if (sqlite3_exec(lab_store_db(st), q, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", q, msg);
}

static int64_t q_int(lab_store *st, const char *q) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st), q, -1, &s, NULL) != SQLITE_OK) fail_msg("prepare %s", q);
    int64_t v = -999;
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Raw SQL on purpose: a past history of finished nightlies, a minute apart,
 * which the store's API (lab_store_nightly_create: RUNNING, started now)
 * cannot date. */
static int64_t new_nightly(lab_store *st, const char *status) {
    char q[512];
    snprintf(q, sizeof q,
             "INSERT INTO nightlies (started_at, finished_at, status, git_commit, code_version, host, pid, experiments_dir)"
             " VALUES (strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-1 day', '+' || (SELECT count(*) FROM nightlies) || ' minutes'),"
             " strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-1 day', '+' || (SELECT count(*) FROM nightlies) || ' minutes', '+30 seconds'),"
             " '%s', 'abc123', 'abc123|dirty=0', 'testhost', 1, 'experiments')", status);
    sql(st, q);
    return sqlite3_last_insert_rowid(lab_store_db(st));
}

/* One fixture run: NSEQ sequences of NPOS positions, top-2 per position;
 * its top-1 is token 5 at the first `agree` positions and 6 elsewhere (the
 * reference's is 5 everywhere); `shift` moves the log-probabilities (a
 * numerics change that keeps the top-1). A run other than the reference's
 * repeat 0 is compared with ref_run, per-layer divergence included (layers
 * 0..NLAYER-1, both sites); `probes` adds a probe per layer and a violated
 * moe.scatter. Runs are written as the runner writes them (lab_store_lease,
 * lab_store_finish), so a schema change reaches the fixtures too. */
enum { NSEQ = 10, NPOS = 20, NTOT = NSEQ * NPOS, NLAYER = 4 };

typedef struct fx_run {
    const char *exp, *arm, *dataset, *knob_hash, *logits, *backend;
    int         rep, is_ref, agree, expect_fail, assertions_ok;
    double      tps, shift;
    int64_t     ref_run;
    int         probes;
} fx_run;

/* The run's top-2 ids and log-probabilities, [NTOT, 2], and its offsets. */
static void fx_topk(const fx_run *r, int32_t *ids, float *lp, int64_t *off) {
    for (int g = 0; g < NTOT; g++) {
        int agree = r->is_ref || g < r->agree;
        ids[2 * g] = agree ? 5 : 6;
        ids[2 * g + 1] = agree ? 6 : 5;
        lp[2 * g] = (float)(log(0.6) + r->shift);
        lp[2 * g + 1] = (float)log(0.3);
    }
    for (int q = 0; q <= NSEQ; q++) off[q] = (int64_t)q * NPOS;
}

/* The comparison with r->ref_run: top-1 agreement, and a divergence that
 * grows by 0.01 a layer (none at layer 0) after attention and after FFN. */
static void fx_comparison(const fx_run *r, lab_comparison *c, int64_t *layer, int *site, double *value) {
    memset(c, 0, sizeof *c);
    c->reference_run_id = r->ref_run;
    c->reference_hash_match = -1;
    c->n_scored = NTOT;
    c->top1_k = r->is_ref ? NTOT : r->agree;
    c->top1_n = NTOT;
    lab_wilson(c->top1_k, NTOT, LAB_Z95, &c->top1_lo, &c->top1_hi);
    c->kl_mean = 0.01;
    c->kl_p99 = c->kl_max = c->max_abs_dlogit = c->rms_dp = c->mcnemar_p = NAN;
    c->div_sequences = 2;
    c->div_tolerance = 0.02;
    c->first_div_layer = -1;
    for (int i = 0; i < 2 * NLAYER; i++) {
        layer[i] = i / 2;
        site[i] = i % 2;
        value[i] = 0.01 * (double)(i / 2);
    }
    c->n_div = 2 * NLAYER;
    c->div_layer = layer;
    c->div_site = site;
    c->div_value = value;
}

/* A probe per layer (residual.stream and kda.state, alternately, invariant
 * held) and one moe.scatter that copied half a row; ok[] says which held. */
static void fx_probes(vt_probe *p, int *ok) {
    memset(p, 0, (NLAYER + 1) * sizeof *p);
    for (int l = 0; l <= NLAYER; l++) {
        int scatter = l == NLAYER;
        snprintf(p[l].site, sizeof p[l].site, "%s", scatter ? "moe.scatter" : l % 2 ? "kda.state" : "residual.stream");
        p[l].layer = scatter ? 2 : l;
        snprintf(p[l].dtype, sizeof p[l].dtype, "f32");
        snprintf(p[l].src_dtype, sizeof p[l].src_dtype, "%s", scatter ? "f32" : "");
        p[l].calls = p[l].rows = 1;
        p[l].bytes_per_row = scatter ? 4 : 8;
        p[l].src_row_bytes = p[l].dst_row_bytes = 8;
        p[l].violations = scatter;
        p[l].rows_unwritten = scatter ? 3 : -1;
        if (scatter) snprintf(p[l].detail, sizeof p[l].detail, "copied 4 bytes <of 8>");
        ok[l] = !scatter;
    }
}

/* Leases and finishes the run (a new row even when its identity has a
 * finished one: each nightly measures again), and attaches it to `nightly`. */
static int64_t add_run(lab_store *st, int64_t nightly, const fx_run *r) {
    lab_identity id = {r->exp, r->arm, r->rep, r->knob_hash ? r->knob_hash : "knobs", "model",
                       r->dataset ? r->dataset : "data", "abc123|dirty=0", NULL};
    lab_provenance pv = {.experiment_sha256 = "spec1", .git_commit = "abc123",
                         .backend = r->backend ? r->backend : "cpu", .host = "testhost", .pid = 1,
                         .is_reference = r->is_ref, .score = "all", .top_k = 2,
                         .expected_assertions = r->expect_fail ? "fail" : "pass"};
    char err[1024] = "";
    int kind = 0;
    int64_t run = 0, stale = 0;
    if (lab_store_lease(st, &id, &pv, 1, &kind, &run, &stale, err, sizeof err) || kind != LAB_LEASED)
        fail_msg("lease %s/%s: %s", r->exp, r->arm, err);
    static int32_t ids[NTOT * 2];
    static float lp[NTOT * 2];
    int64_t off[NSEQ + 1], layer[2 * NLAYER];
    int site[2 * NLAYER], pok[NLAYER + 1];
    double value[2 * NLAYER];
    vt_probe probes[NLAYER + 1];
    lab_comparison cmp;
    fx_topk(r, ids, lp, off);
    const char *mnames[] = {"tokens_per_s", "perplexity"};
    double mvalues[] = {r->tps, 900};
    lab_run_result res = {.n_sequences = NSEQ, .n_tokens = NTOT, .n_scored = NTOT, .wall_s = 1.0, .forward_s = 0.9,
                          .assertions_ok = r->assertions_ok, .n_metrics = 2, .metric_names = mnames,
                          .metric_values = mvalues, .top_k = 2, .offsets = off, .topk_ids = ids, .topk_logprobs = lp};
    snprintf(res.logits_sha256, sizeof res.logits_sha256, "%s", r->logits ? r->logits : "logits");
    if (!r->is_ref || r->rep > 0) {
        fx_comparison(r, &cmp, layer, site, value);
        res.cmp = &cmp;
    }
    if (r->probes) {
        fx_probes(probes, pok);
        res.n_probes = NLAYER + 1;
        res.probes = probes;
        res.probe_ok = pok;
    }
    if (lab_store_finish(st, run, &res, err, sizeof err)) fail_msg("finish %s/%s: %s", r->exp, r->arm, err);
    if (lab_store_nightly_attach_runs(st, nightly, run - 1, "testhost", 1, 0, err, sizeof err))
        fail_msg("attach run %lld: %s", (long long)run, err);
    return run;
}

/* A nightly of experiment "e": reference "ref" and arm "cand" with two
 * repeats each. Returns the cand repeat-0 run id. */
typedef struct fx_night {
    int         agree;
    double      tps0, tps1, shift;
    const char *dataset, *logits, *knob_hash, *backend;
    int         probes;      /* the cand arm's repeat 0 has probes (fx_probes) */
} fx_night;

static int64_t add_night(lab_store *st, int64_t nid, const fx_night *f) {
    fx_run ref = {"e", "ref", f->dataset, NULL, "reflogits", "cpu", 0, 1, 0, 0, 1, f->tps0, 0, 0, 0};
    int64_t rid = add_run(st, nid, &ref);
    ref.rep = 1;
    ref.ref_run = rid;
    ref.tps = f->tps1;
    add_run(st, nid, &ref);
    fx_run c = {"e", "cand", f->dataset, f->knob_hash, f->logits ? f->logits : "candlogits", f->backend, 0, 0, f->agree, 0,
                1, f->tps0, f->shift, rid, f->probes};
    int64_t cid = add_run(st, nid, &c);
    c.rep = 1;
    c.probes = 0;
    c.tps = f->tps1;
    add_run(st, nid, &c);
    return cid;
}

static int64_t count_findings(lab_store *st, int64_t nid, const char *kind, int regression) {
    char q[300];
    snprintf(q, sizeof q, "SELECT count(*) FROM nightly_findings WHERE nightly_id = %lld AND kind = '%s' AND regression = %d",
             (long long)nid, kind, regression);
    return q_int(st, q);
}

static int64_t compare(lab_store *st, int64_t nid) {
    lab_nightly_opts o;
    lab_nightly_defaults(&o);
    int64_t nreg = -1;
    char err[1024] = "";
    if (lab_nightly_compare(st, nid, &o, &nreg, err, sizeof err)) fail_msg("compare: %s", err);
    return nreg;
}

/* ------------------------------------------------------------ escaping */

static void test_escaping(void **state) {
    (void)state;
    lab_buf b = {0};
    lab_esc_html(&b, "<script>alert(\"x\" & 'y')</script>");
    assert_string_equal(b.data, "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;");
    lab_buf_free(&b);
    /* invalid UTF-8 and a control character become U+FFFD; valid UTF-8 stays */
    lab_esc_html(&b, "a\xff" "b\x01" "c\xc3\xa9");
    assert_string_equal(b.data, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xc3\xa9");
    lab_buf_free(&b);
    lab_esc_md(&b, "<img src=x> | *bold* [l](u)");
    assert_string_equal(b.data, "&lt;img src=x&gt; \\| \\*bold\\* \\[l\\](u)");
    lab_buf_free(&b);
    char g[64];
    assert_string_equal(lab_gp_label("a\"b'c\\d`e$f\ng", g, sizeof g), "a_b_c_d_e_f_g");
    assert_string_equal(lab_file_part("../x y", g, sizeof g), ".._x_y");
}

/* ------------------------------------------------------------ accuracy */

static void test_accuracy_drop_flagged(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    add_night(st, n1, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    int64_t n2 = new_nightly(st, "RUNNING");
    add_night(st, n2, &(fx_night){.agree = 150, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    assert_int_equal(compare(st, n2), 1);
    assert_int_equal(count_findings(st, n2, "accuracy", 1), 1);
    /* 40 positions lost, none gained: p is tiny */
    char q[200];
    snprintf(q, sizeof q, "SELECT p < 1e-9 FROM nightly_findings WHERE nightly_id = %lld AND kind = 'accuracy'", (long long)n2);
    assert_int_equal(q_int(st, q), 1);
    lab_store_close(st);
}

static void test_accuracy_within_noise(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    add_night(st, n1, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    int64_t n2 = new_nightly(st, "RUNNING");
    /* 3 positions lost, 0 gained: exact McNemar p = 0.25, not significant */
    add_night(st, n2, &(fx_night){.agree = 187, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    assert_int_equal(compare(st, n2), 0);
    assert_int_equal(count_findings(st, n2, "accuracy", 1), 0);
    assert_int_equal(count_findings(st, n2, "accuracy", 0), 1);   /* noted */
    lab_store_close(st);
}

static void test_accuracy_unpaired_wilson(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    add_night(st, n1, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .dataset = "d1", .backend = "cuda"});
    int64_t n2 = new_nightly(st, "PASSED");
    /* a different dataset: 190/200 [0.91, 0.97] vs 185/200 [0.88, 0.95] overlap */
    add_night(st, n2, &(fx_night){.agree = 185, .tps0 = 100, .tps1 = 100, .dataset = "d2", .backend = "cuda"});
    assert_int_equal(compare(st, n2), 0);
    int64_t n3 = new_nightly(st, "RUNNING");
    add_night(st, n3, &(fx_night){.agree = 150, .tps0 = 100, .tps1 = 100, .dataset = "d3", .backend = "cuda"});
    assert_int_equal(compare(st, n3), 1);
    assert_int_equal(count_findings(st, n3, "accuracy", 1), 1);
    lab_store_close(st);
}

/* ------------------------------------------------------------ numerics */

static void test_numerics_hash_change(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    add_night(st, n1, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100});
    int64_t n2 = new_nightly(st, "PASSED");
    /* the same logits: nothing */
    add_night(st, n2, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100});
    assert_int_equal(compare(st, n2), 0);
    int64_t n3 = new_nightly(st, "PASSED");
    /* other logits, same knobs, cpu: flagged, with a KL > 0 */
    add_night(st, n3, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .logits = "changed", .shift = -0.2});
    assert_int_equal(compare(st, n3), 1);   /* repeat 0 vs previous; repeat 1 agrees with repeat 0 */
    assert_int_equal(count_findings(st, n3, "numerics", 1), 1);
    char q[200];
    snprintf(q, sizeof q, "SELECT value > 0 FROM nightly_findings WHERE nightly_id = %lld AND kind = 'numerics'", (long long)n3);
    assert_int_equal(q_int(st, q), 1);
    assert_int_equal(count_findings(st, n3, "accuracy", 1), 0);
    /* other logits because the arm's knobs changed: a note only */
    int64_t n4 = new_nightly(st, "RUNNING");
    add_night(st, n4, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .logits = "again", .knob_hash = "other"});
    compare(st, n4);
    assert_int_equal(count_findings(st, n4, "numerics", 1), 0);
    assert_int_equal(count_findings(st, n4, "numerics", 0), 1);
    lab_store_close(st);
}

/* ------------------------------------------------------------ performance */

static void test_perf_noise(void **state) {
    (void)state;
    lab_store *st = open_db();
    /* four nights at ~100 tokens/s with a 2-3% spread between repeats */
    double base[4][2] = {{100, 103}, {98, 101}, {102, 99}, {97, 100}};
    for (int i = 0; i < 4; i++) {
        int64_t n = new_nightly(st, "PASSED");
        add_night(st, n, &(fx_night){.agree = 190, .tps0 = base[i][0], .tps1 = base[i][1], .backend = "cuda"});
    }
    /* a wobble within the noise: not flagged */
    int64_t n5 = new_nightly(st, "PASSED");
    add_night(st, n5, &(fx_night){.agree = 190, .tps0 = 96, .tps1 = 99, .backend = "cuda"});
    assert_int_equal(compare(st, n5), 0);
    assert_int_equal(count_findings(st, n5, "performance", 1), 0);
    /* a 40% drop: flagged, on both arms */
    int64_t n6 = new_nightly(st, "RUNNING");
    add_night(st, n6, &(fx_night){.agree = 190, .tps0 = 60, .tps1 = 61, .backend = "cuda"});
    assert_int_equal(compare(st, n6), 2);
    assert_int_equal(count_findings(st, n6, "performance", 1), 2);
    lab_store_close(st);
}

static void test_perf_no_noise_estimate(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    fx_run ref = {"e", "ref", NULL, NULL, "r", "cuda", 0, 1, 0, 0, 1, 100, 0, 0, 0};
    add_run(st, n1, &ref);
    int64_t n2 = new_nightly(st, "RUNNING");
    ref.tps = 50;
    add_run(st, n2, &ref);
    /* one repeat, no history: the halving is noted, not judged */
    assert_int_equal(compare(st, n2), 0);
    assert_int_equal(count_findings(st, n2, "performance", 0), 1);
    lab_store_close(st);
}

/* ------------------------------------------------------------ checks and audit */

static void test_checks_and_audit(void **state) {
    (void)state;
    lab_store *st = open_db();
    int64_t n1 = new_nightly(st, "PASSED");
    add_night(st, n1, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    /* a replay arm whose assertions fail, as declared, with an expected flag */
    fx_run rp = {"e", "replay", NULL, NULL, "x", "cuda", 0, 0, 40, 1, 0, 100, 0, 1, 0};
    int64_t r1 = add_run(st, n1, &rp);
    /* Raw SQL on purpose: both nights' flags open at once, dated 'a' and 'b';
     * lab_audit_store_flags would resolve the first night's flag when it
     * stores the second's, as a real audit does. */
    char q[600];
    snprintf(q, sizeof q, "INSERT INTO audit_flags (subject_kind, subject, rule, key, reason, evidence, expected, first_seen,"
                          " last_seen) VALUES ('run', '%lld', 'R2', '', 'failed runtime assertion', '{}', 1, 'a', 'a')",
             (long long)r1);
    sql(st, q);
    int64_t n2 = new_nightly(st, "RUNNING");
    int64_t cand = add_night(st, n2, &(fx_night){.agree = 190, .tps0 = 100, .tps1 = 100, .backend = "cuda"});
    int64_t r2 = add_run(st, n2, &rp);
    snprintf(q, sizeof q, "INSERT INTO audit_flags (subject_kind, subject, rule, key, reason, evidence, expected, first_seen,"
                          " last_seen) VALUES ('run', '%lld', 'R2', '', 'failed runtime assertion', '{}', 1, 'b', 'b'),"
                          " ('run', '%lld', 'R3', 'VT_X', 'knob did not take effect: <b>VT_X</b>', '{}', 0, 'b', 'b')",
             (long long)r2, (long long)cand);
    sql(st, q);
    /* a cand run whose assertions failed although it declares pass (raw SQL
     * on purpose: a finished run edited afterwards, which no store API does) */
    snprintf(q, sizeof q, "UPDATE runs SET assertions_ok = 0 WHERE id = %lld", (long long)cand);
    sql(st, q);
    /* the check is a regression; the unexpected flag is a confound, not a
     * finding (issue 33): judged by cause, the replay's expected flags not */
    assert_int_equal(compare(st, n2), 1);
    assert_int_equal(count_findings(st, n2, "audit", 1), 0);
    assert_int_equal(count_findings(st, n2, "check", 1), 1);
    char err[512] = "";
    lab_confound_counts cc;
    if (lab_nightly_judge_confounds(st, n2, &cc, err, sizeof err)) fail_msg("confounds: %s", err);
    assert_int_equal(cc.open, 1);
    assert_int_equal(cc.fresh, 1);

    /* JUnit: one test case per experiment x arm (3), the audit case, one per confound key */
    char path[400];
    snprintf(path, sizeof path, "%s.junit.xml", dbpath);
    if (lab_nightly_write_junit(st, n2, path, err, sizeof err)) fail_msg("junit: %s", err);
    char *text = NULL;
    if (lab_read_file(path, &text, NULL, err, sizeof err)) fail_msg("%s", err);
    VT_ASSERT_CONTAINS(text, "<testsuites name=\"vtlab nightly 2\" tests=\"5\" failures=\"2\"");
    VT_ASSERT_CONTAINS(text, "<testcase classname=\"confound\" name=\"e/cand/R3/VT_X\"");
    VT_ASSERT_CONTAINS(text, "&lt;b&gt;VT_X&lt;/b&gt;");
    assert_null(strstr(text, "<b>VT_X"));
    free(text);
    unlink(path);
    snprintf(path, sizeof path, "%s.atom", dbpath);
    if (lab_nightly_write_atom(st, path, err, sizeof err)) fail_msg("atom: %s", err);
    if (lab_read_file(path, &text, NULL, err, sizeof err)) fail_msg("%s", err);
    VT_ASSERT_CONTAINS(text, "<feed xmlns=\"http://www.w3.org/2005/Atom\">");
    VT_ASSERT_CONTAINS(text, "e/cand: check regression");
    VT_ASSERT_CONTAINS(text, ": new confound e/cand/R3/VT_X");
    free(text);
    unlink(path);
    lab_store_close(st);
}

/* ------------------------------------------------------------ the report */

static long fsize(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat s;
    return stat(p, &s) == 0 ? (long)s.st_size : -1;
}

static void test_report_from_fixture(void **state) {
    (void)state;
    lab_store *st = open_db();
    char err[1024] = "";
    if (lab_store_put_spec(st, "spec1", "e", "experiments/e.json",
                           "{\"id\":\"e\",\"description\":\"<script>alert(1)</script> & \\\"quoted\\\"\",\"reference\":\"ref\","
                           "\"arms\":[{\"name\":\"ref\"},{\"name\":\"cand\",\"description\":\"<i>x</i>\",\"knobs\":{\"VT_KIMI_BF16_STREAM\":\"1\"}}],"
                           "\"decision\":{\"metric\":\"top1_agreement\",\"threshold\":0.9,\"direction\":\">=\"}}",
                           err, sizeof err))
        fail_msg("put spec: %s", err);
    for (int i = 0; i < 3; i++) {
        int64_t n = new_nightly(st, i == 2 ? "RUNNING" : "PASSED");
        add_night(st, n, &(fx_night){.agree = i == 2 ? 150 : 190, .tps0 = 100, .tps1 = 101, .backend = "cuda",
                                     .probes = 1});
        if (i == 2) compare(st, n);
    }
    sql(st, "UPDATE nightlies SET status = 'REGRESSED' WHERE status = 'RUNNING'");
    /* an arm name and a claim that carry markup (raw SQL on purpose, as in
     * test_checks_and_audit) */
    sql(st, "INSERT INTO audit_flags (subject_kind, subject, rule, key, reason, evidence, first_seen, last_seen) VALUES"
            " ('claim', 'c<1>', 'R1', 'd', 'measured through <defect> & \"more\"', '{}', 'a', 'a')");
    lab_report_opts o = {outdir, "fixture.db", 1};
    lab_report_result res;
    if (lab_report_write(st, &o, &res, err, sizeof err)) fail_msg("report: %s", err);
    lab_store_close(st);
    assert_int_equal(res.n_experiments, 1);
    char *html = NULL, path[600];
    snprintf(path, sizeof path, "%s/index.html", outdir);
    if (lab_read_file(path, &html, NULL, err, sizeof err)) fail_msg("%s", err);
    assert_null(strstr(html, "<script>"));
    assert_null(strstr(html, "<i>x"));
    assert_null(strstr(html, "<defect>"));
    VT_ASSERT_CONTAINS(html, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;");
    VT_ASSERT_CONTAINS(html, "c&lt;1&gt;");
    VT_ASSERT_CONTAINS(html, "copied 4 bytes &lt;of 8&gt;");
    VT_ASSERT_CONTAINS(html, "REGRESSION");
    free(html);
    assert_true(fsize(outdir, "summary.md") > 0);
    char why[256];
    if (!lab_plot_available(why, sizeof why)) {
        print_message("gnuplot not available (%s): charts not checked\n", why);
        return;
    }
    assert_int_equal(res.plot_failures, 0);
    assert_int_equal(res.n_plots, 5);
    static const char *const charts[] = {"e0-e-top1", "e0-e-divergence", "e0-e-kl-cdf", "e0-e-history", "e0-e-throughput"};
    char plots[400], name[200];
    snprintf(plots, sizeof plots, "%s/plots", outdir);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "%s.png", charts[i]);
        assert_true(fsize(plots, name) > 1000);
        snprintf(name, sizeof name, "%s.svg", charts[i]);
        assert_true(fsize(plots, name) > 1000);
        snprintf(name, sizeof name, "%s.png.tmp", charts[i]);
        assert_int_equal(fsize(plots, name), -1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaping),
        cmocka_unit_test_setup_teardown(test_accuracy_drop_flagged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_accuracy_within_noise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_accuracy_unpaired_wilson, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numerics_hash_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_perf_noise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_perf_no_noise_estimate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checks_and_audit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_from_fixture, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
