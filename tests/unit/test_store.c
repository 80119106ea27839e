/*
 * test_store.c — results.db: schema creation, migration from the v1 schema,
 * pragmas, claims (new / done / busy / stale), the one-transaction finish,
 * and two processes claiming the same runs at once.
 */
#include "tests/unit/vt_test.h"
#include "tests/unit/vt_test_db.h"   /* dbpath, q_int; raw SQL: old schemas, broken rows, fixtures no API writes */

#include <sys/wait.h>
#include <unistd.h>

#include "harness/util.h"

static int setup(void **state) {
    (void)state;
    vt_test_db_reset("store");
    return 0;
}
static int teardown(void **state) { return setup(state); }

static const char *q_text(lab_store *st, const char *sql, char *buf, size_t n) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(lab_store_db(st), sql, -1, &s, NULL) != SQLITE_OK) fail_msg("prepare %s", sql);
    buf[0] = 0;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(buf, n, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return buf;
}

static void test_fresh_schema(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    assert_int_equal(q_int(st, "PRAGMA user_version"), LAB_SCHEMA_VERSION);
    assert_string_equal(q_text(st, "PRAGMA journal_mode", buf, sizeof buf), "wal");
    assert_int_equal(q_int(st, "PRAGMA foreign_keys"), 1);
    for (const char *const *t = (const char *const[]){"runs", "run_knobs", "metrics", "probes", "expectations",
                                                       "logits_topk", "logits_full", "comparisons", "layer_divergence",
                                                       "pair_tests", "verdicts", "experiment_specs", "nightlies",
                                                       "nightly_runs", "nightly_findings", "nightly_acks",
                                                       "nightly_remeasure_runs", "run_tags", "run_notes", NULL};
         *t; t++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'", *t);
        if (q_int(st, sql) != 1) fail_msg("table %s missing", *t);
    }
    /* The status trigger rejects anything but the five statuses (raw SQL on
     * purpose: a row the store's API would never write); PARTIAL (v9) is one. */
    const char *bad[] = {"x"};
    assert_int_not_equal(lab_store_exec(st, "INSERT INTO runs (experiment, arm, status, knob_hash, model_sha256,"
                                            " dataset_sha256, code_version, started_at) VALUES (?1,'a','done','k','m','d','c','t')",
                                        1, bad, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "RUNNING, FINISHED, FAILED, KILLED or PARTIAL");
    assert_int_equal(lab_store_exec(st, "INSERT INTO runs (experiment, arm, status, knob_hash, model_sha256,"
                                        " dataset_sha256, code_version, started_at) VALUES ('e','a','PARTIAL','k','m','d','c','t')",
                                    0, NULL, err, sizeof err), 0);
    lab_store_close(st);
    /* Reopening an up-to-date database changes nothing. */
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    lab_store_close(st);
}

static void test_migrate_from_v1(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open_version(&st, dbpath, 1, err, sizeof err), 0);
    assert_int_equal(q_int(st, "PRAGMA user_version"), 1);
    /* v1 rows as the prototype wrote them: lowercase statuses (raw SQL on
     * purpose: an old schema, which the store's API no longer writes). */
    assert_int_equal(lab_store_exec(st, "INSERT INTO runs (id, experiment, arm, status, knob_hash, model_sha256,"
                                        " dataset_sha256, code_version, started_at, finished_at) VALUES"
                                        " (1,'e','f32','done','k','m','d','c','t0','t1'),"
                                        " (2,'e','bf16','running','k2','m','d','c','t0',NULL),"
                                        " (3,'e','bf16','failed','k2','m','d','c','t0','t1')",
                                    0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "INSERT INTO metrics (run_id, name, value) VALUES (1, 'perplexity', 12.5)", 0,
                                    NULL, err, sizeof err), 0);
    lab_store_close(st);

    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    assert_string_equal(q_text(st, "SELECT status FROM runs WHERE id = 1", buf, sizeof buf), "FINISHED");
    assert_string_equal(q_text(st, "SELECT status FROM runs WHERE id = 2", buf, sizeof buf), "KILLED");
    assert_string_equal(q_text(st, "SELECT status FROM runs WHERE id = 3", buf, sizeof buf), "FAILED");
    assert_int_equal(q_int(st, "SELECT repeat_idx FROM runs WHERE id = 1"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM metrics"), 1);
    assert_int_equal(q_int(st, "SELECT count(*) FROM probes"), 0);
    lab_store_close(st);
}

/* A v4 database as the nightly left it before v5: its run-time tables
 * (nightly_acks, nightly_remeasure_runs) created by the old code's own
 * CREATE TABLE IF NOT EXISTS, with rows. Opening it migrates to the current
 * version: the tables and rows are kept, nightlies gains pid_start (NULL for
 * the old row), and the migrated file has what a fresh one has. */
static void test_migrate_v4_nightly_tables(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open_version(&st, dbpath, 4, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st,
                                    "CREATE TABLE IF NOT EXISTS nightly_acks ("
                                    "  finding TEXT PRIMARY KEY,"
                                    "  experiment TEXT NOT NULL, arm TEXT NOT NULL, kind TEXT NOT NULL,"
                                    "  reason TEXT NOT NULL,"
                                    "  acked_at TEXT NOT NULL,"
                                    "  nightly_id INTEGER,"
                                    "  value REAL,"
                                    "  cleared_at TEXT,"
                                    "  cleared_by INTEGER)", 0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st,
                                    "CREATE TABLE IF NOT EXISTS nightly_remeasure_runs ("
                                    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
                                    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
                                    "  PRIMARY KEY (nightly_id, run_id))", 0, NULL, err, sizeof err), 0);
    /* rows of the v4 schema, in raw SQL on purpose (the store's API writes
     * the current one) */
    assert_int_equal(lab_store_exec(st, "INSERT INTO runs (id, experiment, arm, status, knob_hash, model_sha256,"
                                        " dataset_sha256, code_version, started_at) VALUES"
                                        " (1, 'e', 'a', 'FINISHED', 'k', 'm', 'd', 'c', 't0')", 0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "INSERT INTO nightlies (id, started_at, status, git_commit, code_version, host,"
                                        " pid, experiments_dir) VALUES (1, 't0', 'RUNNING', 'g', 'c', 'h', 4242, 'x')",
                                    0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "INSERT INTO nightly_remeasure_runs VALUES (1, 1)", 0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "INSERT INTO nightly_acks (finding, experiment, arm, kind, reason, acked_at,"
                                        " nightly_id, value) VALUES ('e/a/performance', 'e', 'a', 'performance',"
                                        " 'known', 't1', 1, 12.5)", 0, NULL, err, sizeof err), 0);
    lab_store_close(st);

    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    assert_int_equal(q_int(st, "PRAGMA user_version"), LAB_SCHEMA_VERSION);
    assert_int_equal(q_int(st, "SELECT count(*) FROM nightly_remeasure_runs WHERE nightly_id = 1 AND run_id = 1"), 1);
    assert_string_equal(q_text(st, "SELECT reason FROM nightly_acks WHERE finding = 'e/a/performance'", buf, sizeof buf),
                        "known");
    assert_int_equal(q_int(st, "SELECT count(*) FROM pragma_table_info('nightlies') WHERE name = 'pid_start'"), 1);
    assert_int_equal(q_int(st, "SELECT pid_start IS NULL FROM nightlies WHERE id = 1"), 1);
    assert_int_equal(lab_store_exec(st, "UPDATE nightlies SET pid_start = 7 WHERE id = 1", 0, NULL, err, sizeof err), 0);
    lab_store_close(st);

    /* The same tables and columns as a fresh database. */
    char fresh[300];
    snprintf(fresh, sizeof fresh, "%s-fresh", dbpath);
    unlink(fresh);
    assert_int_equal(lab_store_open(&st, fresh, err, sizeof err), 0);
    int64_t want = q_int(st, "SELECT count(*) FROM sqlite_master m, pragma_table_info(m.name) WHERE m.type = 'table'");
    lab_store_close(st);
    for (int i = 0; i < 3; i++) {
        char p[320];
        snprintf(p, sizeof p, "%s%s", fresh, (const char *const[]){"", "-wal", "-shm"}[i]);
        unlink(p);
    }
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM sqlite_master m, pragma_table_info(m.name) WHERE m.type = 'table'"),
                     want);
    lab_store_close(st);
}

static void test_newer_version_refused(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "";
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "PRAGMA user_version = 99", 0, NULL, err, sizeof err), 0);
    lab_store_close(st);
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "schema version 99 is newer");
}

static lab_identity ident(const char *arm) {
    lab_identity id = {"exp", arm, 0, "kh", "mh", "dh", "cv", NULL};
    return id;
}

/* Each identity of these tests is its own experiment's reference repeat 0:
 * the one run a FINISHED run need not be compared with (see
 * test_finish_requires_completeness for the others). */
static lab_provenance prov(int64_t pid) {
    lab_provenance p = {0};
    p.is_reference = 1;
    p.host = "testhost";
    p.pid = pid;
    p.pid_start = lab_pid_start(pid);
    p.score = "all";
    p.top_k = 2;
    return p;
}

/* A minimal result: two knobs, one probe, two metrics, one sequence of top-k. */
static void small_result(lab_run_result *r, const char **mnames) {
    static const char *kn[] = {"VT_A", "VT_B"}, *kv[] = {"0", "1"};
    static const int knum[] = {1, 0};
    static vt_probe pr;
    static const int pok[] = {1};
    static const double mv[] = {1.5, 2.5};
    static const int64_t off[] = {0, 3};
    static const int32_t ids[] = {5, 6, 7, 8, 9, 10};
    static const float lp[] = {-0.1f, -2.f, -0.2f, -3.f, -0.3f, -4.f};
    memset(&pr, 0, sizeof pr);
    snprintf(pr.site, sizeof pr.site, "moe.scatter");
    snprintf(pr.dtype, sizeof pr.dtype, "f32");
    pr.layer = 1;
    pr.rows_unwritten = -1;
    memset(r, 0, sizeof *r);
    r->n_sequences = 1;
    r->n_tokens = 3;
    r->n_scored = 3;
    snprintf(r->logits_sha256, sizeof r->logits_sha256, "abc");
    r->assertions_ok = 1;
    r->n_knobs = 2;
    r->knob_names = kn;
    r->knob_values = kv;
    r->knob_numeric = knum;
    r->n_probes = 1;
    r->probes = &pr;
    r->probe_ok = pok;
    r->n_metrics = 2;
    r->metric_names = mnames;
    r->metric_values = mv;
    r->top_k = 2;
    r->offsets = off;
    r->topk_ids = ids;
    r->topk_logprobs = lp;
}

static void test_claims(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    lab_identity id = ident("f32");
    lab_provenance pv = prov(getpid());
    int kind;
    int64_t run, stale, run2;
    assert_int_equal(lab_store_lease(st, &id, &pv, 0, &kind, &run, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASED);
    /* The same identity while we (alive) hold it: busy. */
    assert_int_equal(lab_store_lease(st, &id, &pv, 0, &kind, &run2, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASE_BUSY);
    assert_int_equal(run2, run);

    /* A finish that fails half-way (duplicate metric name) leaves nothing. */
    lab_run_result r;
    const char *dup[] = {"m", "m"}, *good[] = {"perplexity", "tokens_per_s"};
    small_result(&r, dup);
    assert_int_not_equal(lab_store_finish(st, run, &r, err, sizeof err), 0);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", (long long)run);
    assert_string_equal(q_text(st, sql, buf, sizeof buf), "RUNNING");
    assert_int_equal(q_int(st, "SELECT count(*) FROM run_knobs"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM probes"), 0);

    small_result(&r, good);
    assert_int_equal(lab_store_finish(st, run, &r, err, sizeof err), 0);
    assert_string_equal(q_text(st, sql, buf, sizeof buf), "FINISHED");
    assert_int_equal(q_int(st, "SELECT count(*) FROM run_knobs"), 2);
    assert_int_equal(q_int(st, "SELECT count(*) FROM logits_topk"), 1);
    assert_int_equal(q_int(st, "SELECT length(ids) FROM logits_topk"), 3 * 2 * 4);

    /* Finished: skipped unless forced. */
    assert_int_equal(lab_store_lease(st, &id, &pv, 0, &kind, &run2, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASE_DONE);
    assert_int_equal(run2, run);
    int64_t found;
    char h[65];
    assert_int_equal(lab_store_find_finished(st, &id, &found, h, err, sizeof err), 0);
    assert_int_equal(found, run);
    assert_string_equal(h, "abc");
    int32_t *top1;
    int64_t n;
    assert_int_equal(lab_store_top1(st, run, &top1, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(top1[0], 5);
    assert_int_equal(top1[2], 9);
    free(top1);
    assert_int_equal(lab_store_lease(st, &id, &pv, 1, &kind, &run2, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASED);
    assert_true(run2 != run);
    assert_int_equal(lab_store_abort(st, run2, "FAILED", "boom", err, sizeof err), 0);
    lab_store_close(st);
}

/* A batch: several claims and finishes in one transaction. A failure
 * anywhere in it leaves none of it (vtlab record-bench stores a report's
 * phases this way); a batch that succeeds commits all of it. */
static void test_batch_all_or_nothing(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "";
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    lab_provenance pv = prov(getpid());
    const char *good[] = {"perplexity", "tokens_per_s"}, *dup[] = {"m", "m"};
    lab_run_result r;
    int kind;
    int64_t run, stale;

    /* run a finishes, run b's finish fails: the batch leaves nothing at all */
    assert_int_equal(lab_store_batch_begin(st, err, sizeof err), 0);
    lab_identity a = ident("a"), b = ident("b");
    assert_int_equal(lab_store_lease(st, &a, &pv, 1, &kind, &run, &stale, err, sizeof err), 0);
    small_result(&r, good);
    assert_int_equal(lab_store_finish(st, run, &r, err, sizeof err), 0);
    assert_int_equal(lab_store_lease(st, &b, &pv, 1, &kind, &run, &stale, err, sizeof err), 0);
    small_result(&r, dup);
    assert_int_not_equal(lab_store_finish(st, run, &r, err, sizeof err), 0);
    /* everything after the failure is refused, and the commit says the batch failed */
    assert_int_not_equal(lab_store_lease(st, &b, &pv, 1, &kind, &run, &stale, err, sizeof err), 0);
    assert_int_not_equal(lab_store_batch_commit(st, err, sizeof err), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM metrics"), 0);

    /* the same without the failure: both runs, FINISHED */
    assert_int_equal(lab_store_batch_begin(st, err, sizeof err), 0);
    for (int i = 0; i < 2; i++) {
        lab_identity id = ident(i ? "b" : "a");
        assert_int_equal(lab_store_lease(st, &id, &pv, 1, &kind, &run, &stale, err, sizeof err), 0);
        assert_int_equal(kind, LAB_LEASED);
        small_result(&r, good);
        assert_int_equal(lab_store_finish(st, run, &r, err, sizeof err), 0);
    }
    assert_int_equal(lab_store_batch_commit(st, err, sizeof err), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs WHERE status = 'FINISHED'"), 2);

    /* a batch given up leaves nothing */
    assert_int_equal(lab_store_batch_begin(st, err, sizeof err), 0);
    lab_identity c = ident("c");
    assert_int_equal(lab_store_lease(st, &c, &pv, 1, &kind, &run, &stale, err, sizeof err), 0);
    lab_store_batch_rollback(st);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs"), 2);
    lab_store_close(st);
}

static void test_stale_running_redone(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    /* A child claims a run and dies without finishing it (like kill -9). */
    pid_t child = fork();
    if (child == 0) {
        lab_store *cs;
        char e2[1024];
        if (lab_store_open(&cs, dbpath, e2, sizeof e2)) _exit(3);
        lab_identity id = ident("bf16");
        lab_provenance pv = prov(getpid());
        int kind;
        int64_t run, stale;
        if (lab_store_lease(cs, &id, &pv, 0, &kind, &run, &stale, e2, sizeof e2) || kind != LAB_LEASED) _exit(4);
        _exit(0); /* no close, no finish */
    }
    int status;
    waitpid(child, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs WHERE arm = 'bf16' AND status = 'RUNNING'"), 1);
    lab_identity id = ident("bf16");
    lab_provenance pv = prov(getpid());
    int kind;
    int64_t run, stale;
    assert_int_equal(lab_store_lease(st, &id, &pv, 0, &kind, &run, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASED);
    assert_true(stale > 0);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", (long long)stale);
    assert_string_equal(q_text(st, sql, buf, sizeof buf), "KILLED");
    snprintf(sql, sizeof sql, "SELECT error FROM runs WHERE id = %lld", (long long)stale);
    VT_ASSERT_CONTAINS(q_text(st, sql, buf, sizeof buf), "died while running");
    /* A RUNNING row from another host is never judged dead from here. */
    lab_identity id2 = ident("other");
    lab_provenance pv2 = prov(999999);
    pv2.host = "elsewhere";
    assert_int_equal(lab_store_lease(st, &id2, &pv2, 0, &kind, &run, &stale, err, sizeof err), 0);
    assert_int_equal(lab_store_lease(st, &id2, &pv, 0, &kind, &run, &stale, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASE_BUSY);
    /* reap: marks dead same-host rows only */
    int64_t nreap;
    assert_int_equal(lab_store_reap(st, "testhost", &nreap, err, sizeof err), 0);
    assert_int_equal(nreap, 0); /* our own claim is alive */
    lab_store_close(st);
}

/* Two processes claim and finish the same 30 identities concurrently:
 * every identity ends with exactly one FINISHED row, none is lost. */
static void test_two_writers(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "";
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    lab_store_close(st);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            lab_store *cs;
            char e2[1024];
            if (lab_store_open(&cs, dbpath, e2, sizeof e2)) _exit(3);
            for (int i = 0; i < 30; i++) {
                char arm[16];
                snprintf(arm, sizeof arm, "arm%02d", i);
                lab_identity id = ident(arm);
                lab_provenance pv = prov(getpid());
                int kind;
                int64_t run, stale;
                if (lab_store_lease(cs, &id, &pv, 0, &kind, &run, &stale, e2, sizeof e2)) _exit(4);
                if (kind != LAB_LEASED) continue;
                lab_run_result r;
                const char *mn[] = {"a", "b"};
                small_result(&r, mn);
                if (lab_store_finish(cs, run, &r, e2, sizeof e2)) _exit(5);
            }
            lab_store_close(cs);
            _exit(0);
        }
    }
    for (int k = 0; k < 2; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(q_int(st, "SELECT count(DISTINCT arm) FROM runs WHERE status = 'FINISHED'"), 30);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs WHERE status = 'FINISHED'"), 30);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs WHERE status = 'RUNNING'"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM run_knobs"), 60);
    char buf[32];
    assert_string_equal(q_text(st, "PRAGMA integrity_check", buf, sizeof buf), "ok");
    lab_store_close(st);
}

/* Reliability item 10: several processes open the same NEW database at the
 * same instant (a barrier releases them together), round after round. The
 * switch to WAL needs an exclusive lock; SQLite answers a deadlock-avoiding
 * SQLITE_BUSY there without calling the busy handler, so without a retry one
 * opener failed with "journal_mode: database is locked". Every opener must
 * succeed and the file must end in WAL mode with the schema created once. */
static void test_concurrent_fresh_open(void **state) {
    enum { ROUNDS = 150, KIDS = 8 };
    int failures = 0;
    char firsterr[1024] = "";
    for (int round = 0; round < ROUNDS; round++) {
        setup(state);
        int go[2], rep[2];
        assert_int_equal(pipe(go), 0);
        assert_int_equal(pipe(rep), 0);
        pid_t kids[KIDS];
        for (int k = 0; k < KIDS; k++) {
            kids[k] = fork();
            assert_true(kids[k] >= 0);
            if (kids[k] == 0) {
                close(go[1]);
                close(rep[0]);
                char b;
                if (read(go[0], &b, 1) < 0) _exit(9); /* EOF when the parent closes: all start together */
                lab_store *cs;
                char e2[1024] = "";
                int rc = lab_store_open(&cs, dbpath, e2, sizeof e2);
                if (rc) {
                    ssize_t w = write(rep[1], e2, strlen(e2) + 1);
                    (void)w;
                    _exit(3);
                }
                lab_store_close(cs);
                _exit(0);
            }
        }
        close(go[0]);
        close(rep[1]);
        close(go[1]); /* releases every child at once */
        for (int k = 0; k < KIDS; k++) {
            int status;
            waitpid(kids[k], &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
        }
        if (failures && !firsterr[0]) {
            ssize_t n = read(rep[0], firsterr, sizeof firsterr - 1);
            if (n > 0) firsterr[n] = 0;
        }
        close(rep[0]);
        if (failures) break;
        lab_store *st;
        char err[1024] = "";
        assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
        char buf[32];
        assert_string_equal(q_text(st, "PRAGMA journal_mode", buf, sizeof buf), "wal");
        assert_int_equal(q_int(st, "PRAGMA user_version"), LAB_SCHEMA_VERSION);
        lab_store_close(st);
    }
    if (failures) fail_msg("%d opener(s) of a fresh database failed: %s", failures, firsterr);
}

static int64_t claim_new(lab_store *st, const char *arm, int64_t repeat, int is_reference) {
    lab_identity id = ident(arm);
    id.repeat = repeat;
    lab_provenance pv = prov(getpid());
    pv.is_reference = is_reference;
    int kind;
    int64_t run, stale;
    char err[1024] = "";
    if (lab_store_lease(st, &id, &pv, 0, &kind, &run, &stale, err, sizeof err) || kind != LAB_LEASED)
        fail_msg("claim %s #%lld: %s", arm, (long long)repeat, err);
    return run;
}

static const char *run_status(lab_store *st, int64_t run, char *buf, size_t n) {
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", (long long)run);
    return q_text(st, sql, buf, n);
}

/* Reliability item 3: concurrent sweeps finished reference repeats before the
 * reference's repeat 0 existed, with no comparison, and FINISHED said nothing
 * about it. The finishing transaction itself must refuse a run that lacks
 * what a FINISHED run must have, leaving it RUNNING with nothing written;
 * a run with those rows finishes. Guards VT_MUTATE_NO_FINISH_CHECK. */
static void test_finish_requires_completeness(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[64];
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    const char *mn[] = {"perplexity", "tokens_per_s"};
    lab_run_result r;
    int64_t layers[4] = {0, 0, 1, 1};
    int sites[4] = {0, 1, 0, 1};
    double vals[4] = {0, 0.01, 0.02, 0.5};
    lab_comparison c = {0};
    c.top1_k = c.top1_n = c.n_scored = 3;
    c.reference_hash_match = -1;
    c.first_div_layer = -1;
    c.div_sequences = 1;
    c.div_tolerance = 0.02;
    c.n_div = 4;
    c.div_layer = layers;
    c.div_site = sites;
    c.div_value = vals;

    /* A reference repeat finished while no reference repeat 0 is FINISHED:
     * no comparison, refused. */
    int64_t ref = claim_new(st, "f32", 0, 1);
    int64_t rep1 = claim_new(st, "f32", 1, 1);
    small_result(&r, mn);
    assert_int_equal(lab_store_finish(st, rep1, &r, err, sizeof err), LAB_EINTERNAL);
    VT_ASSERT_CONTAINS(err, "comparison with the reference run");
    VT_ASSERT_CONTAINS(err, "not marked FINISHED");
    assert_string_equal(run_status(st, rep1, buf, sizeof buf), "RUNNING");
    assert_int_equal(q_int(st, "SELECT count(*) FROM run_knobs"), 0);
    assert_int_equal(q_int(st, "SELECT count(*) FROM logits_topk"), 0);

    /* The reference's repeat 0 needs no comparison. */
    small_result(&r, mn);
    assert_int_equal(lab_store_finish(st, ref, &r, err, sizeof err), 0);
    /* A comparison with a run that is not the FINISHED reference repeat 0
     * (here: the unfinished repeat itself) is not one. */
    c.reference_run_id = rep1;
    r.cmp = &c;
    assert_int_not_equal(lab_store_finish(st, rep1, &r, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "comparison with the reference run");
    /* Divergence measured but its rows missing: refused. */
    c.reference_run_id = ref;
    c.n_div = 0;
    assert_int_not_equal(lab_store_finish(st, rep1, &r, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "layer_divergence");
    /* Only some of them (layer 1's rows without layer 0's): refused. */
    c.n_div = 2;
    c.div_layer = layers + 2;
    c.div_site = sites + 2;
    c.div_value = vals + 2;
    assert_int_not_equal(lab_store_finish(st, rep1, &r, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "layer_divergence");
    assert_string_equal(run_status(st, rep1, buf, sizeof buf), "RUNNING");
    /* Every row: FINISHED. */
    c.n_div = 4;
    c.div_layer = layers;
    c.div_site = sites;
    c.div_value = vals;
    assert_int_equal(lab_store_finish(st, rep1, &r, err, sizeof err), 0);
    assert_string_equal(run_status(st, rep1, buf, sizeof buf), "FINISHED");
    char what[256];
    assert_int_equal(lab_store_run_missing(st, rep1, what, sizeof what, err, sizeof err), 0);
    assert_string_equal(what, "");

    /* A non-reference arm without its comparison: refused. */
    int64_t arm = claim_new(st, "bf16", 0, 0);
    small_result(&r, mn);
    assert_int_not_equal(lab_store_finish(st, arm, &r, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "comparison with the reference run");
    /* Top-k rows missing (one sequence, none stored): refused even for the reference. */
    int64_t ref2 = claim_new(st, "f32b", 0, 1);
    small_result(&r, mn);
    r.topk_ids = NULL;
    assert_int_not_equal(lab_store_finish(st, ref2, &r, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "logits_topk");
    /* A benchmark run (no logits at all) needs no comparison. */
    int64_t bench = claim_new(st, "bench", 0, 0);
    memset(&r, 0, sizeof r);
    r.assertions_ok = -1;
    assert_int_equal(lab_store_finish(st, bench, &r, err, sizeof err), 0);
    lab_store_close(st);
}

/* A FINISHED run that is incomplete (as the defect left them in existing
 * databases) is not "done": the next claim marks it FAILED, saying what it
 * lacks, and claims the run again; a complete one is still skipped. */
static void test_claim_redoes_incomplete(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "", buf[256];
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    const char *mn[] = {"perplexity", "tokens_per_s"};
    lab_run_result r;
    int64_t ref = claim_new(st, "f32", 0, 1);
    small_result(&r, mn);
    assert_int_equal(lab_store_finish(st, ref, &r, err, sizeof err), 0);
    int64_t arm = claim_new(st, "bf16", 0, 0);
    lab_comparison c = {0};
    c.reference_run_id = ref;
    c.reference_hash_match = -1;
    c.first_div_layer = -1;
    small_result(&r, mn);
    r.cmp = &c;
    assert_int_equal(lab_store_finish(st, arm, &r, err, sizeof err), 0);

    lab_identity id = ident("bf16");
    lab_provenance pv = prov(getpid());
    pv.is_reference = 0;
    int kind;
    int64_t run, stale, redone;
    assert_int_equal(lab_store_lease_ex(st, &id, &pv, 0, &kind, &run, &stale, &redone, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASE_DONE);
    assert_int_equal(run, arm);
    assert_int_equal(redone, 0);

    char sql[128];
    snprintf(sql, sizeof sql, "DELETE FROM comparisons WHERE run_id = %lld", (long long)arm);
    assert_int_equal(lab_store_exec(st, sql, 0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_lease_ex(st, &id, &pv, 0, &kind, &run, &stale, &redone, err, sizeof err), 0);
    assert_int_equal(kind, LAB_LEASED);
    assert_int_equal(redone, arm);
    assert_true(run != arm);
    assert_string_equal(run_status(st, arm, buf, sizeof buf), "FAILED");
    snprintf(sql, sizeof sql, "SELECT error FROM runs WHERE id = %lld", (long long)arm);
    VT_ASSERT_CONTAINS(q_text(st, sql, buf, sizeof buf), "incomplete: FINISHED without its comparison");
    lab_store_close(st);
}

/* Reliability item 9: readers open the database read-only. A missing path
 * is not created, a directory is named as one, writes are refused, an older
 * writable schema is migrated first, and a corrupt file is refused at open. */
static void test_open_readonly(void **state) {
    (void)state;
    lab_store *st;
    char err[1024] = "";
    assert_int_equal(lab_store_open_readonly(&st, dbpath, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, dbpath);
    VT_ASSERT_CONTAINS(err, "no such database");
    assert_int_not_equal(access(dbpath, F_OK), 0);   /* nothing created */
    assert_int_equal(lab_store_open_readonly(&st, "/tmp", err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, "/tmp: is a directory");

    /* An older schema, writable: migrated, then read. */
    assert_int_equal(lab_store_open_version(&st, dbpath, 2, err, sizeof err), 0);
    /* v2 rows in raw SQL on purpose: the store's API writes the current
     * schema (since v6 its lease names runs.layer_kinds, which v2 lacks) */
    assert_int_equal(lab_store_exec(st, "INSERT INTO runs (id, experiment, arm, status, knob_hash, model_sha256,"
                                        " dataset_sha256, code_version, started_at, finished_at) VALUES"
                                        " (1, 'exp', 'f32', 'FINISHED', 'kh', 'mh', 'dh', 'cv', 't0', 't1')",
                                    0, NULL, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "INSERT INTO logits_topk (run_id, seq, n_pos, k, ids, logprobs) VALUES"
                                        " (1, 0, 1, 2, x'0500000006000000', x'cdcccc3d00000040')",
                                    0, NULL, err, sizeof err), 0);
    lab_store_close(st);
    assert_int_equal(lab_store_open_readonly(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_version(st), LAB_SCHEMA_VERSION);
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs WHERE status = 'FINISHED'"), 1);
    /* read-only: a write is refused */
    assert_int_not_equal(lab_store_exec(st, "DELETE FROM runs", 0, NULL, err, sizeof err), 0);
    VT_ASSERT_CONTAINS(err, "readonly");
    assert_int_equal(q_int(st, "SELECT count(*) FROM runs"), 1);
    int64_t pages = q_int(st, "PRAGMA page_count"), psize = q_int(st, "PRAGMA page_size");
    int64_t root = q_int(st, "SELECT rootpage FROM sqlite_master WHERE name = 'logits_topk'");
    lab_store_close(st);

    /* Checkpoint so that the file holds every page, then scribble over the
     * logits_topk b-tree's root page: refused at open, naming the file. */
    assert_int_equal(lab_store_open(&st, dbpath, err, sizeof err), 0);
    assert_int_equal(lab_store_exec(st, "PRAGMA wal_checkpoint(TRUNCATE)", 0, NULL, err, sizeof err), 0);
    lab_store_close(st);
    assert_true(root > 1 && root <= pages);
    FILE *f = fopen(dbpath, "r+b");
    assert_non_null(f);
    char junk[4096];
    memset(junk, 0xab, sizeof junk);
    assert_int_equal(fseek(f, (long)((root - 1) * psize + 8), SEEK_SET), 0);
    assert_int_equal(fwrite(junk, 1, (size_t)(psize - 16) < sizeof junk ? (size_t)(psize - 16) : sizeof junk, f) > 0, 1);
    fclose(f);
    assert_int_equal(lab_store_open_readonly(&st, dbpath, err, sizeof err), LAB_EINPUT);
    VT_ASSERT_CONTAINS(err, dbpath);
    VT_ASSERT_CONTAINS(err, "corrupt");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fresh_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_from_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_v4_nightly_tables, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_version_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_all_or_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_running_redone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_fresh_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_requires_completeness, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_redoes_incomplete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_readonly, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
