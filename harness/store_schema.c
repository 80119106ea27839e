/*
 * store_schema.c — the schema of results.db: every migration, from the
 * first prototype's tables (v1) to LAB_SCHEMA_VERSION, and the code that
 * applies them (lab_store_migrate, which store.c calls when it opens a
 * database for writing). docs/schema.md documents every table and column.
 *
 * A file of its own because the migrations are frozen text, changed only by
 * appending one, while opening, leasing and finishing change with the code;
 * here every version of the schema reads in order in one place, and the
 * file needs nothing of the store but the statement helpers (store_sql.c).
 *
 * Schema history (PRAGMA user_version):
 *   v1  the first prototype: runs (identity, lowercase status, times),
 *       run_knobs, metrics. Kept as a migration so that an old results.db
 *       opens, and so that the migration path is tested from a real older
 *       schema (tests/unit/test_store.c builds a v1 file and migrates it).
 *   v2  provenance and status discipline on runs (RUNNING / FINISHED /
 *       FAILED / KILLED, claims by pid+host), experiment specs, probes,
 *       expectations, top-k and full logits, comparisons, per-layer
 *       divergence, pair tests and verdicts.
 *   v3  the audit: audit_flags (durable confound flags), audits, reopens.
 *   v4  nightly runs: nightlies, nightly_runs, nightly_findings.
 *   v5  the nightly's acknowledgements and re-measurements (nightly_acks,
 *       nightly_remeasure_runs: created at run time by nightly.c before, so
 *       v5 creates them IF NOT EXISTS) and nightlies.pid_start (pid reuse).
 *   v6  views: run_summary, latest_verdicts, open_confounds (docs/schema.md);
 *       meta (key, value): the database's feed_id; runs.layer_kinds.
 *   v7  runs.engine_hello: the hello of the command engine a run went
 *       through (docs/engine-protocol.md); NULL for the builtin model.
 *   v8  bisections, bisect_steps; runs.shard, run_sequences, run_shards,
 *       merged_shards (sequence shards, docs/slurm.md).
 *   v9  run_tags, run_notes (`vtlab tag`, `vtlab note`), runs.rerun_of
 *       (`vtlab rerun`), the PARTIAL status (`vtlab run --limit N`); the
 *       views run_summary and latest_verdicts again, with tags, notes and
 *       rerun_of.
 *   v10 nightly_confounds (a nightly's confounds, one row per cause) and the
 *       CONFOUNDED status of nightlies (migrate_v10_status).
 *   v11 localizations, localize_steps (`vtlab localize`).
 * A schema change appends a migration to migrations[]; old ones never change.
 */
#include <stdio.h>

#include "store_internal.h"
#include "util.h"

/* ------------------------------------------------------------ migrations */

static const char *const migration_v1 =
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY,"
    "  experiment TEXT NOT NULL,"
    "  arm TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  knob_hash TEXT NOT NULL,"
    "  model_sha256 TEXT NOT NULL,"
    "  dataset_sha256 TEXT NOT NULL,"
    "  code_version TEXT NOT NULL,"
    "  started_at TEXT NOT NULL,"
    "  finished_at TEXT);"
    "CREATE TABLE run_knobs ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  name TEXT NOT NULL,"
    "  value TEXT NOT NULL,"
    "  PRIMARY KEY (run_id, name));"
    "CREATE TABLE metrics ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  name TEXT NOT NULL,"
    "  value REAL,"
    "  PRIMARY KEY (run_id, name));";

static const char *const migration_v2 =
    /* v1 wrote lowercase statuses; v2 has four uppercase ones. A v1 'running'
     * row cannot be checked for liveness (no pid): it is KILLED. */
    "UPDATE runs SET status = CASE lower(status)"
    "  WHEN 'done' THEN 'FINISHED' WHEN 'finished' THEN 'FINISHED'"
    "  WHEN 'failed' THEN 'FAILED' ELSE 'KILLED' END;"
    "ALTER TABLE runs ADD COLUMN repeat_idx INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE runs ADD COLUMN is_reference INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE runs ADD COLUMN error TEXT;"
    "ALTER TABLE runs ADD COLUMN experiment_sha256 TEXT;"
    "ALTER TABLE runs ADD COLUMN git_commit TEXT;"
    "ALTER TABLE runs ADD COLUMN git_dirty INTEGER;"
    "ALTER TABLE runs ADD COLUMN build_flags TEXT;"
    "ALTER TABLE runs ADD COLUMN compiler TEXT;"
    "ALTER TABLE runs ADD COLUMN backend TEXT;"
    "ALTER TABLE runs ADD COLUMN device TEXT;"
    "ALTER TABLE runs ADD COLUMN host TEXT;"
    "ALTER TABLE runs ADD COLUMN pid INTEGER;"
    "ALTER TABLE runs ADD COLUMN pid_start INTEGER;"
    "ALTER TABLE runs ADD COLUMN score TEXT;"
    "ALTER TABLE runs ADD COLUMN top_k INTEGER;"
    "ALTER TABLE runs ADD COLUMN expected_assertions TEXT NOT NULL DEFAULT 'pass';"
    "ALTER TABLE runs ADD COLUMN n_sequences INTEGER;"
    "ALTER TABLE runs ADD COLUMN n_tokens INTEGER;"
    "ALTER TABLE runs ADD COLUMN n_scored INTEGER;"
    "ALTER TABLE runs ADD COLUMN wall_s REAL;"
    "ALTER TABLE runs ADD COLUMN forward_s REAL;"
    "ALTER TABLE runs ADD COLUMN logits_sha256 TEXT;"
    "ALTER TABLE runs ADD COLUMN assertions_ok INTEGER;"
    "ALTER TABLE runs ADD COLUMN assertion_reason TEXT;"
    "ALTER TABLE run_knobs ADD COLUMN numeric INTEGER NOT NULL DEFAULT 1;"
    "CREATE TRIGGER runs_status_insert BEFORE INSERT ON runs"
    "  WHEN NEW.status NOT IN ('RUNNING','FINISHED','FAILED','KILLED')"
    "  BEGIN SELECT RAISE(ABORT, 'runs.status must be RUNNING, FINISHED, FAILED or KILLED'); END;"
    "CREATE TRIGGER runs_status_update BEFORE UPDATE OF status ON runs"
    "  WHEN NEW.status NOT IN ('RUNNING','FINISHED','FAILED','KILLED')"
    "  BEGIN SELECT RAISE(ABORT, 'runs.status must be RUNNING, FINISHED, FAILED or KILLED'); END;"
    "CREATE INDEX runs_identity ON runs(experiment, arm, knob_hash, model_sha256,"
    "  dataset_sha256, code_version, repeat_idx, status);"
    "CREATE UNIQUE INDEX runs_one_running ON runs(experiment, arm, knob_hash, model_sha256,"
    "  dataset_sha256, code_version, repeat_idx) WHERE status = 'RUNNING';"
    "CREATE TABLE experiment_specs ("
    "  sha256 TEXT PRIMARY KEY,"
    "  id TEXT NOT NULL,"
    "  file TEXT,"
    "  json TEXT NOT NULL,"
    "  first_seen TEXT NOT NULL);"
    "CREATE TABLE probes ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL,"
    "  site TEXT NOT NULL,"
    "  layer INTEGER NOT NULL,"
    "  dtype TEXT NOT NULL,"
    "  src_dtype TEXT NOT NULL,"
    "  calls INTEGER NOT NULL,"
    "  rows INTEGER NOT NULL,"
    "  bytes_per_row INTEGER NOT NULL,"
    "  src_row_bytes INTEGER NOT NULL,"
    "  dst_row_bytes INTEGER NOT NULL,"
    "  converting INTEGER NOT NULL,"
    "  violations INTEGER NOT NULL,"
    "  rows_unwritten INTEGER NOT NULL,"
    "  detail TEXT NOT NULL,"
    "  ok INTEGER NOT NULL,"
    "  PRIMARY KEY (run_id, idx));"
    "CREATE INDEX probes_site ON probes(site, ok);"
    "CREATE TABLE expectations ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  site TEXT NOT NULL,"
    "  expected_dtype TEXT NOT NULL,"
    "  seen_dtypes TEXT NOT NULL,"
    "  records INTEGER NOT NULL,"
    "  ok INTEGER NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  PRIMARY KEY (run_id, site));"
    "CREATE TABLE logits_topk ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  n_pos INTEGER NOT NULL,"
    "  k INTEGER NOT NULL,"
    "  ids BLOB NOT NULL,"
    "  logprobs BLOB NOT NULL,"
    "  PRIMARY KEY (run_id, seq));"
    "CREATE TABLE logits_full ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  n_pos INTEGER NOT NULL,"
    "  vocab INTEGER NOT NULL,"
    "  dtype TEXT NOT NULL,"
    "  data BLOB NOT NULL,"
    "  PRIMARY KEY (run_id, seq));"
    "CREATE TABLE comparisons ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  reference_run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  reference_recomputed INTEGER NOT NULL,"
    "  reference_hash_match INTEGER,"
    "  n_scored INTEGER NOT NULL,"
    "  top1_k INTEGER NOT NULL,"
    "  top1_n INTEGER NOT NULL,"
    "  top1_lo REAL NOT NULL,"
    "  top1_hi REAL NOT NULL,"
    "  kl_mean REAL, kl_p99 REAL, kl_max REAL,"
    "  max_abs_dlogit REAL, rms_dp REAL,"
    "  mcnemar_b INTEGER, mcnemar_c INTEGER, mcnemar_p REAL,"
    "  div_sequences INTEGER NOT NULL,"
    "  div_tolerance REAL,"
    "  first_div_layer INTEGER,"
    "  first_div_site INTEGER,"
    "  first_div_value REAL,"
    "  PRIMARY KEY (run_id, reference_run_id));"
    "CREATE TABLE layer_divergence ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  reference_run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  layer INTEGER NOT NULL,"
    "  site INTEGER NOT NULL,"
    "  rel_l2 REAL NOT NULL,"
    "  PRIMARY KEY (run_id, reference_run_id, layer, site));"
    "CREATE TABLE pair_tests ("
    "  run_a INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  run_b INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  reference_run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  n INTEGER NOT NULL,"
    "  b INTEGER NOT NULL,"
    "  c INTEGER NOT NULL,"
    "  p REAL NOT NULL,"
    "  computed_at TEXT NOT NULL,"
    "  PRIMARY KEY (run_a, run_b, reference_run_id));"
    "CREATE TABLE verdicts ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  reference_run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  metric TEXT NOT NULL,"
    "  threshold REAL NOT NULL,"
    "  direction TEXT NOT NULL,"
    "  k INTEGER NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  value REAL NOT NULL,"
    "  lo REAL NOT NULL,"
    "  hi REAL NOT NULL,"
    "  interval TEXT NOT NULL,"
    "  verdict TEXT NOT NULL CHECK (verdict IN ('SUPPORTED','REFUTED','INCONCLUSIVE')),"
    "  decided_at TEXT NOT NULL,"
    "  PRIMARY KEY (run_id, reference_run_id));";

/* v3: the audit (issue 5). A flag is durable: an audit that no longer finds
 * it marks it resolved (and says by what) instead of deleting it, so the
 * history of what was once confounded is kept. `key` tells apart flags of one
 * rule on one subject (e.g. which defect). `expected` marks flags on runs that
 * meant to go through the defect (a replay arm): shown, not counted. */
static const char *const migration_v3 =
    "CREATE TABLE audit_flags ("
    "  id INTEGER PRIMARY KEY,"
    "  subject_kind TEXT NOT NULL CHECK (subject_kind IN ('claim','run')),"
    "  subject TEXT NOT NULL,"
    "  rule TEXT NOT NULL CHECK (rule IN ('R1','R2','R3','R4','R5','R6')),"
    "  key TEXT NOT NULL DEFAULT '',"
    "  reason TEXT NOT NULL,"
    "  evidence TEXT NOT NULL,"
    "  expected INTEGER NOT NULL DEFAULT 0,"
    "  first_seen TEXT NOT NULL,"
    "  last_seen TEXT NOT NULL,"
    "  resolved_at TEXT,"
    "  resolved_by TEXT,"
    "  UNIQUE (subject_kind, subject, rule, key));"
    "CREATE INDEX audit_flags_open ON audit_flags(resolved_at);"
    "CREATE TABLE audits ("
    "  id INTEGER PRIMARY KEY,"
    "  at TEXT NOT NULL,"
    "  specs_dir TEXT NOT NULL,"
    "  n_claims INTEGER NOT NULL,"
    "  n_defects INTEGER NOT NULL,"
    "  n_runs INTEGER NOT NULL,"
    "  n_open INTEGER NOT NULL,"
    "  n_new INTEGER NOT NULL,"
    "  n_resolved INTEGER NOT NULL);"
    "CREATE TABLE reopens ("
    "  id INTEGER PRIMARY KEY,"
    "  claim_id TEXT NOT NULL,"
    "  defect_id TEXT NOT NULL,"
    "  replay_run_id INTEGER REFERENCES runs(id),"
    "  rerun_run_id INTEGER REFERENCES runs(id),"
    "  explained INTEGER NOT NULL,"
    "  explanation TEXT NOT NULL,"
    "  new_claim_id TEXT NOT NULL,"
    "  new_verdict TEXT NOT NULL,"
    "  at TEXT NOT NULL);";

/* v4: nightly CI sweeps (issue 6). A nightly is a row of its own so that
 * nights are told apart even when their runs share an identity (a nightly
 * reruns everything, --force); nightly_runs says which runs it made, and
 * nightly_findings keeps what the comparison with the previous nightly found
 * (regressions fail the night; notes do not), so history plots can mark them. */
static const char *const migration_v4 =
    "CREATE TABLE nightlies ("
    "  id INTEGER PRIMARY KEY,"
    "  started_at TEXT NOT NULL,"
    "  finished_at TEXT,"
    "  status TEXT NOT NULL CHECK (status IN ('RUNNING','PASSED','REGRESSED','FAILED')),"
    "  git_commit TEXT NOT NULL,"
    "  code_version TEXT NOT NULL,"
    "  host TEXT NOT NULL,"
    "  pid INTEGER NOT NULL,"
    "  experiments_dir TEXT NOT NULL,"
    "  previous_id INTEGER REFERENCES nightlies(id),"
    "  n_runs INTEGER NOT NULL DEFAULT 0,"
    "  n_regressions INTEGER NOT NULL DEFAULT 0,"
    "  audit TEXT NOT NULL DEFAULT '',"
    "  error TEXT);"
    "CREATE TABLE nightly_runs ("
    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  PRIMARY KEY (nightly_id, run_id));"
    "CREATE INDEX nightly_runs_run ON nightly_runs(run_id);"
    "CREATE TABLE nightly_findings ("
    "  id INTEGER PRIMARY KEY,"
    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
    "  experiment TEXT NOT NULL,"
    "  arm TEXT NOT NULL,"
    "  kind TEXT NOT NULL CHECK (kind IN ('accuracy','numerics','performance','audit','check')),"
    "  regression INTEGER NOT NULL,"
    "  message TEXT NOT NULL,"
    "  run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,"
    "  previous_run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,"
    "  value REAL,"
    "  previous_value REAL,"
    "  p REAL,"
    "  evidence TEXT NOT NULL DEFAULT '{}');"
    "CREATE INDEX nightly_findings_nightly ON nightly_findings(nightly_id);";

/* v5: the nightly's own tables move into the schema (until v5, nightly.c
 * created them at run time with CREATE TABLE IF NOT EXISTS, so a v4 database
 * may already have them, exactly as below: hence IF NOT EXISTS here too):
 * nightly_acks, the regressions a person acknowledged (`vtlab ack`), and
 * nightly_remeasure_runs, the runs a nightly made to re-measure a suspected
 * throughput drop (kept out of nightly_runs: neither test cases nor the
 * night's repeats). And nightlies.pid_start, the process start time, so that
 * a RUNNING nightly whose pid was reused is found dead (lab_pid_alive); rows
 * of older nightlies have NULL and are judged by their pid alone. */
static const char *const migration_v5 =
    "CREATE TABLE IF NOT EXISTS nightly_acks ("
    "  finding TEXT PRIMARY KEY,"
    "  experiment TEXT NOT NULL, arm TEXT NOT NULL, kind TEXT NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  acked_at TEXT NOT NULL,"
    "  nightly_id INTEGER,"
    "  value REAL,"
    "  cleared_at TEXT,"
    "  cleared_by INTEGER);"
    "CREATE TABLE IF NOT EXISTS nightly_remeasure_runs ("
    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  PRIMARY KEY (nightly_id, run_id));"
    "ALTER TABLE nightlies ADD COLUMN pid_start INTEGER;";

/* The views of v6, made again by v9 with columns appended ("their old
 * columns as in v6"): the text the two migrations share. Frozen with them:
 * a later change to a view is a new migration with text of its own. */
#define RUN_SUMMARY_V6_COLUMNS                                                                                                   \
    "CREATE VIEW run_summary AS SELECT"                                                                                          \
    "  r.id AS run_id, r.experiment, r.arm, r.repeat_idx, r.is_reference, r.status, r.error,"                                    \
    "  r.started_at, r.finished_at, r.code_version, r.git_commit, r.backend, r.device, r.host,"                                  \
    "  r.knob_hash, r.model_sha256, r.dataset_sha256, r.logits_sha256, r.score,"                                                 \
    "  r.n_sequences, r.n_tokens, r.n_scored, r.wall_s, r.forward_s,"                                                            \
    "  r.assertions_ok, r.expected_assertions, r.assertion_reason,"                                                              \
    "  c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi,"                                                            \
    "  CAST(c.top1_k AS REAL) / c.top1_n AS top1_agreement,"                                                                     \
    "  c.kl_mean, c.kl_p99, c.kl_max, c.max_abs_dlogit, c.rms_dp, c.mcnemar_p,"                                                  \
    "  c.first_div_layer, c.first_div_value,"                                                                                    \
    "  v.verdict, v.metric AS decision_metric, v.threshold AS decision_threshold, v.direction AS decision_direction,"            \
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s') AS tokens_per_s,"                         \
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'perplexity') AS perplexity,"                             \
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'nll_mean') AS nll_mean,"                                 \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_STREAM') AS VT_KIMI_BF16_STREAM,"         \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_EXPERT_OUT') AS VT_KIMI_BF16_EXPERT_OUT," \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_ACT') AS VT_KIMI_BF16_ACT,"               \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_WEIGHTS') AS VT_KIMI_ROUTER_WEIGHTS,"   \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_RENORM') AS VT_KIMI_ROUTER_RENORM,"     \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_MLA_KV_NORM_EPS') AS VT_KIMI_MLA_KV_NORM_EPS," \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_BACKEND') AS VT_BACKEND,"                           \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_FAULT') AS VT_FAULT,"                               \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_THREADS') AS VT_THREADS,"                           \
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_PROBE') AS VT_PROBE,"                               \
    "  (SELECT json_group_object(name, value) FROM run_knobs k WHERE k.run_id = r.id) AS knobs"
#define RUN_SUMMARY_FROM                                                                     \
    "  FROM runs r LEFT JOIN comparisons c ON c.run_id = r.id"                               \
    "  LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id;"
#define LATEST_VERDICTS_V6_COLUMNS                                                                  \
    "CREATE VIEW latest_verdicts AS SELECT"                                                         \
    "  s.experiment, s.arm, s.run_id, s.verdict, s.top1_k, s.top1_n, s.top1_lo, s.top1_hi,"         \
    "  s.decision_metric, s.decision_threshold, s.decision_direction, s.code_version, s.started_at"
#define LATEST_VERDICTS_WHERE                                                                         \
    "  FROM run_summary s WHERE s.verdict IS NOT NULL AND s.run_id = (SELECT max(r2.id) FROM runs r2" \
    "  JOIN verdicts v2 ON v2.run_id = r2.id WHERE r2.experiment = s.experiment AND r2.arm = s.arm"   \
    "  AND r2.status = 'FINISHED');"

/* v6: views for the questions people ask of results.db from elsewhere (SQL,
 * pandas; docs/schema.md): one row per run with its comparison, verdict,
 * common metrics and knobs pivoted into columns (run_summary), the latest
 * verdict of each experiment and arm (latest_verdicts), and the confounds an
 * audit left open (open_confounds). A knob added to the registry later gets
 * its column in a later migration (DROP VIEW, CREATE VIEW); until then it is
 * in the `knobs` JSON column. */
static const char *const migration_v6 =
    RUN_SUMMARY_V6_COLUMNS
    RUN_SUMMARY_FROM
    LATEST_VERDICTS_V6_COLUMNS
    LATEST_VERDICTS_WHERE
    "CREATE VIEW open_confounds AS SELECT"
    "  f.id, f.subject_kind, f.subject, f.rule, f.key, f.reason, f.first_seen, f.last_seen,"
    "  r.experiment, r.arm"
    "  FROM audit_flags f LEFT JOIN runs r ON f.subject_kind = 'run' AND r.id = CAST(f.subject AS INTEGER)"
    "  WHERE f.resolved_at IS NULL AND f.expected = 0;"
    /* facts about the database itself: feed_id names its Atom feed, made once
     * at random so that the feed's and its entries' ids do not change with
     * the host a nightly runs on (a reader would see every entry as new) */
    /* the model's layer kinds with each run ("KKKM/DEEE"), so that no report
     * opens a model to shade them */
    "ALTER TABLE runs ADD COLUMN layer_kinds TEXT;"
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "INSERT INTO meta (key, value) VALUES ('feed_id', lower(hex(randomblob(16))));";

/* v7: what an engine that is not vtlab's model said about itself (its
 * name, version, model, knob registry with the values it read, probe sites,
 * faults): a run through it is understood from this row alone. */
static const char *const migration_v7 = "ALTER TABLE runs ADD COLUMN engine_hello TEXT;";

/* v8 (bisect part): `vtlab bisect` (docs/bisect.md). A bisection is found
 * again by its key (the sha256 of the arguments that define it), so the same
 * command resumes it; a step is one commit evaluated at one dataset scale,
 * with the runs it used and its evidence. Another v8 part may join this
 * migration; this string is the bisection's tables alone. */
static const char *const migration_v8_bisect =
    "CREATE TABLE bisections ("
    "  id INTEGER PRIMARY KEY,"
    "  key TEXT NOT NULL UNIQUE,"
    "  experiment TEXT NOT NULL,"
    "  experiment_file TEXT NOT NULL,"
    "  experiment_sha256 TEXT NOT NULL,"
    "  arm TEXT NOT NULL,"
    "  reference_arm TEXT NOT NULL,"
    "  repo TEXT NOT NULL,"
    "  good_rev TEXT NOT NULL,"
    "  bad_rev TEXT NOT NULL,"
    "  good_commit TEXT NOT NULL,"
    "  bad_commit TEXT NOT NULL,"
    "  n_commits INTEGER NOT NULL,"
    "  mode TEXT NOT NULL CHECK (mode IN ('stats','exact')),"
    "  alpha REAL NOT NULL,"
    "  max_scale INTEGER NOT NULL,"
    "  scale INTEGER NOT NULL DEFAULT 1,"
    "  builds INTEGER NOT NULL DEFAULT 0,"
    "  build_cmd TEXT NOT NULL,"
    "  nightly_id INTEGER REFERENCES nightlies(id),"
    "  status TEXT NOT NULL CHECK (status IN ('RUNNING','FOUND','RANGE','UNDECIDED','NONE','FAILED')),"
    "  first_bad TEXT,"
    "  range_good TEXT,"
    "  range_bad TEXT,"
    "  message TEXT,"
    "  started_at TEXT NOT NULL,"
    "  finished_at TEXT);"
    "CREATE TABLE bisect_steps ("
    "  id INTEGER PRIMARY KEY,"
    "  bisection_id INTEGER NOT NULL REFERENCES bisections(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  commit_sha TEXT NOT NULL,"
    "  subject TEXT NOT NULL,"
    "  position INTEGER NOT NULL,"
    "  scale INTEGER NOT NULL,"
    "  class TEXT NOT NULL CHECK (class IN ('good','bad','skip','undecided')),"
    "  built INTEGER NOT NULL,"
    "  arm_run_id INTEGER REFERENCES runs(id),"
    "  ref_run_id INTEGER REFERENCES runs(id),"
    "  top1_k INTEGER, top1_n INTEGER, top1_lo REAL, top1_hi REAL,"
    "  verdict TEXT,"
    "  lost INTEGER, gained INTEGER, p REAL,"
    "  lost_vs_bad INTEGER, gained_vs_bad INTEGER, p_vs_bad REAL,"
    "  logits_sha256 TEXT,"
    "  reason TEXT,"
    "  at TEXT NOT NULL,"
    "  UNIQUE (bisection_id, commit_sha, scale));"
    "CREATE INDEX bisections_nightly ON bisections(nightly_id);";

/* v8 (shards; docs/slurm.md): a run's sequence shard is part of its
 * identity ('' for a whole run), so that a shard is never taken for the run
 * (the one-RUNNING index gets the column); every run's per-sequence sums and
 * logits hashes (run_sequences: the run's logits hash is composed from them,
 * and a merge of shards recomputes the run from them); what a shard run was
 * computed over and by which task (run_shards); and, in the merged database,
 * which shards made each merged run (merged_shards). */
static const char *const migration_v8_shards =
    "ALTER TABLE runs ADD COLUMN shard TEXT NOT NULL DEFAULT '';"
    "DROP INDEX runs_one_running;"
    "CREATE UNIQUE INDEX runs_one_running ON runs(experiment, arm, knob_hash, model_sha256,"
    "  dataset_sha256, code_version, repeat_idx, shard) WHERE status = 'RUNNING';"
    "CREATE TABLE run_sequences ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  n_pos INTEGER NOT NULL,"
    "  n_scored INTEGER NOT NULL,"
    "  logits_sha256 TEXT NOT NULL,"
    "  nll_sum REAL, nll_n INTEGER NOT NULL,"
    "  f16_kl_sum REAL, f16_kl_max REAL, f16_dlogit_max REAL, f16_n INTEGER NOT NULL,"
    "  compared INTEGER NOT NULL,"
    "  agree INTEGER, dp2_sum REAL, maxd REAL,"
    "  kl BLOB, dp BLOB, dnll BLOB,"
    "  div BLOB,"
    "  PRIMARY KEY (run_id, seq));"
    "CREATE TABLE run_shards ("
    "  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,"
    "  shard_index INTEGER NOT NULL, shard_count INTEGER NOT NULL,"
    "  seq_lo INTEGER NOT NULL, seq_hi INTEGER NOT NULL,"
    "  n_seq_total INTEGER NOT NULL, n_tokens_total INTEGER NOT NULL, n_scored_total INTEGER NOT NULL,"
    "  metrics INTEGER NOT NULL, div_sequences INTEGER NOT NULL, div_tolerance REAL NOT NULL,"
    "  decision_metric TEXT, decision_threshold REAL, decision_ge INTEGER,"
    "  n_layers INTEGER NOT NULL, probes_lost INTEGER NOT NULL,"
    "  task TEXT, node TEXT, slurm_job_id TEXT, slurm_array_job_id TEXT, slurm_array_task_id TEXT);"
    "CREATE TABLE merged_shards ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  shard_index INTEGER NOT NULL, shard_count INTEGER NOT NULL,"
    "  seq_lo INTEGER NOT NULL, seq_hi INTEGER NOT NULL,"
    "  source_db TEXT NOT NULL, source_run_id INTEGER NOT NULL,"
    "  host TEXT, task TEXT, slurm_job_id TEXT, slurm_array_job_id TEXT, slurm_array_task_id TEXT,"
    "  logits_sha256 TEXT NOT NULL, started_at TEXT, finished_at TEXT, merged_at TEXT NOT NULL,"
    "  PRIMARY KEY (run_id, shard_index));";

/* v9: what people add to runs (tags: one value per key, set again by a
 * later `vtlab tag`; notes: free text, kept in order), the run a rerun
 * repeats (`vtlab rerun`), and PARTIAL: a run of the first N sequences
 * (`vtlab run --limit N`), written like a FINISHED run but never one — every
 * query for "the arm's finished run" asks for status 'FINISHED'. The views
 * are made again with the new columns appended (their old columns as in v6). */
static const char *const migration_v9 =
    "ALTER TABLE runs ADD COLUMN rerun_of INTEGER;"
    "CREATE TABLE run_tags ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  key TEXT NOT NULL,"
    "  value TEXT NOT NULL,"
    "  set_at TEXT NOT NULL,"
    "  PRIMARY KEY (run_id, key));"
    "CREATE INDEX run_tags_kv ON run_tags(key, value);"
    "CREATE TABLE run_notes ("
    "  id INTEGER PRIMARY KEY,"
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  text TEXT NOT NULL,"
    "  at TEXT NOT NULL);"
    "CREATE INDEX run_notes_run ON run_notes(run_id);"
    "DROP TRIGGER runs_status_insert;"
    "DROP TRIGGER runs_status_update;"
    "CREATE TRIGGER runs_status_insert BEFORE INSERT ON runs"
    "  WHEN NEW.status NOT IN ('RUNNING','FINISHED','FAILED','KILLED','PARTIAL')"
    "  BEGIN SELECT RAISE(ABORT, 'runs.status must be RUNNING, FINISHED, FAILED, KILLED or PARTIAL'); END;"
    "CREATE TRIGGER runs_status_update BEFORE UPDATE OF status ON runs"
    "  WHEN NEW.status NOT IN ('RUNNING','FINISHED','FAILED','KILLED','PARTIAL')"
    "  BEGIN SELECT RAISE(ABORT, 'runs.status must be RUNNING, FINISHED, FAILED, KILLED or PARTIAL'); END;"
    "DROP VIEW latest_verdicts;"
    "DROP VIEW run_summary;"
    RUN_SUMMARY_V6_COLUMNS ","
    "  r.rerun_of,"
    "  (SELECT CASE WHEN count(*) THEN json_group_object(t.key, t.value) END FROM (SELECT key, value FROM run_tags"
    "   WHERE run_id = r.id ORDER BY key) t) AS tags,"
    "  (SELECT CASE WHEN count(*) THEN json_group_array(n.text) END FROM (SELECT text FROM run_notes"
    "   WHERE run_id = r.id ORDER BY id) n) AS notes"
    RUN_SUMMARY_FROM
    LATEST_VERDICTS_V6_COLUMNS ","
    "  s.tags, s.notes"
    LATEST_VERDICTS_WHERE;

/* v10: the nightly's confounds (issue 33). A nightly with an open confound
 * that no one acknowledged is CONFOUNDED, not PASSED; each confound is one
 * row per cause (its key, confound_key.h) with the nightly it has been open
 * since, the night's runs it is on, and whether it is new, acknowledged or
 * resolved that night. The status's CHECK is widened by migrate_v10_status. */
static const char *const migration_v10 =
    "CREATE TABLE nightly_confounds ("
    "  nightly_id INTEGER NOT NULL REFERENCES nightlies(id) ON DELETE CASCADE,"
    "  key TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('open','acknowledged','resolved')),"
    "  is_new INTEGER NOT NULL,"
    "  since_nightly INTEGER NOT NULL,"
    "  subject TEXT NOT NULL,"
    "  rule TEXT NOT NULL,"
    "  runs TEXT NOT NULL DEFAULT '',"
    "  reason TEXT NOT NULL,"
    "  ack_reason TEXT,"
    "  PRIMARY KEY (nightly_id, key));";

/* v11: `vtlab localize` (docs/localize.md). A localization is found again
 * by its key (the sha256 of the arguments that define it), so the same
 * command resumes it; a step is one layer set evaluated at one dataset scale,
 * with the run it used and its evidence. */
static const char *const migration_v11 =
    "CREATE TABLE localizations ("
    "  id INTEGER PRIMARY KEY,"
    "  key TEXT NOT NULL UNIQUE,"
    "  experiment TEXT NOT NULL,"
    "  experiment_file TEXT NOT NULL,"
    "  experiment_sha256 TEXT NOT NULL,"
    "  arm TEXT NOT NULL,"
    "  reference_arm TEXT NOT NULL,"
    "  by_unit TEXT NOT NULL CHECK (by_unit IN ('layer','site')),"
    "  goal TEXT NOT NULL CHECK (goal IN ('minimal-failing','largest-passing')),"
    "  levers TEXT NOT NULL,"
    "  n_units INTEGER NOT NULL,"
    "  alpha REAL NOT NULL,"
    "  max_scale INTEGER NOT NULL,"
    "  scale INTEGER NOT NULL DEFAULT 1,"
    "  runs_made INTEGER NOT NULL DEFAULT 0,"
    "  runs_reused INTEGER NOT NULL DEFAULT 0,"
    "  status TEXT NOT NULL CHECK (status IN ('RUNNING','FOUND','NONE','UNDECIDED','BUDGET','FAILED')),"
    "  result TEXT,"
    "  plan TEXT,"
    "  result_run_id INTEGER REFERENCES runs(id),"
    "  plan_run_id INTEGER REFERENCES runs(id),"
    "  message TEXT,"
    "  started_at TEXT NOT NULL,"
    "  finished_at TEXT);"
    "CREATE TABLE localize_steps ("
    "  id INTEGER PRIMARY KEY,"
    "  localization_id INTEGER NOT NULL REFERENCES localizations(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  phase TEXT NOT NULL CHECK (phase IN ('full','empty','search','sensitivity')),"
    "  layer_set TEXT NOT NULL,"
    "  size INTEGER NOT NULL,"
    "  scale INTEGER NOT NULL,"
    "  class TEXT NOT NULL CHECK (class IN ('fail','pass','undecided','error')),"
    "  made INTEGER NOT NULL,"
    "  arm_run_id INTEGER REFERENCES runs(id),"
    "  ref_run_id INTEGER REFERENCES runs(id),"
    "  top1_k INTEGER, top1_n INTEGER, top1_lo REAL, top1_hi REAL,"
    "  verdict TEXT,"
    "  lost INTEGER, gained INTEGER, p REAL,"
    "  kl_mean REAL,"
    "  first_div_layer INTEGER, first_div_site INTEGER, first_div_value REAL,"
    "  reason TEXT,"
    "  at TEXT NOT NULL,"
    "  UNIQUE (localization_id, layer_set, scale));";

/* A version's migration: its script, then its second part where it has one
 * (v8 was written as two, the bisection's and the shards', applied in this
 * order in one transaction). */
static const char *const migrations[LAB_SCHEMA_VERSION] = {migration_v1, migration_v2, migration_v3, migration_v4,
                                                           migration_v5, migration_v6, migration_v7,
                                                           migration_v8_bisect, migration_v9, migration_v10,
                                                           migration_v11};
static const char *const migrations_part2[LAB_SCHEMA_VERSION] = {[7] = migration_v8_shards};

/* ------------------------------------------------------------ applying them */

/* Runs a static multi-statement script (schema text, never data) statement by
 * statement through prepare/step; an error names `what`. */
static int exec_script(lab_store *st, const char *sql, const char *what, char *err, size_t errlen) {
    const char *tail = sql;
    while (tail && *tail) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(st->db, tail, -1, &s, &tail) != SQLITE_OK) return lab_sq_error(st, err, errlen, what);
        if (!s) break; /* only whitespace left */
        int rc;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {}
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE) return lab_sq_error(st, err, errlen, what);
    }
    return LAB_OK;
}

int lab_store_read_version(lab_store *st, int *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "PRAGMA user_version", &s, err, errlen);
    if (rc) return rc;
    if (sqlite3_step(s) != SQLITE_ROW) { sqlite3_finalize(s); return lab_sq_error(st, err, errlen, "user_version"); }
    *v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return LAB_OK;
}

/* v10's second step: 'CONFOUNDED' joins the CHECK of nightlies.status. A
 * CHECK cannot be altered, and rebuilding the table would need foreign keys
 * off (DROP TABLE cascades into nightly_runs and findings), which a
 * migration's transaction cannot turn off; so the table's SQL text is edited
 * as SQLite documents for loosening a constraint (lang_altertable.html,
 * "Making Other Kinds Of Table Schema Changes"): writable_schema, the
 * schema_version bumped so that every connection reloads it. Every existing
 * row satisfies the wider CHECK. */
static int migrate_v10_status(lab_store *st, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "PRAGMA schema_version", &s, err, errlen);
    if (rc) return rc;
    int v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int(s, 0) : -1;
    sqlite3_finalize(s);
    if (v < 0) return lab_sq_error(st, err, errlen, "schema_version");
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA schema_version = %d", v + 1);
    rc = lab_sq_exec(st, "PRAGMA writable_schema = ON", err, errlen);
    if (!rc) rc = lab_sq_exec(st, "UPDATE sqlite_master SET sql = replace(sql, '''FAILED''))',"
                                  " '''FAILED'',''CONFOUNDED''))') WHERE type = 'table' AND name = 'nightlies'", err, errlen);
    if (!rc) rc = lab_sq_exec(st, bump, err, errlen);
    int off = lab_sq_exec(st, "PRAGMA writable_schema = OFF", err, rc ? 0 : errlen);
    return rc ? rc : off;
}

/* Migrates to target, one transaction per step. The version is re-read
 * inside BEGIN IMMEDIATE, so two processes opening a fresh file at once do
 * not both create the schema. A failed statement of a script is said as
 * "schema" ("schema v11" for v11's, the words its errors have always had). */
int lab_store_migrate(lab_store *st, int target, char *err, size_t errlen) {
    for (;;) {
        int v = 0, rc;
        if ((rc = lab_sq_begin(st, err, errlen))) return rc;
        if ((rc = lab_store_read_version(st, &v, err, errlen))) { lab_sq_rollback(st); return rc; }
        if (v > LAB_SCHEMA_VERSION) {
            lab_sq_rollback(st);
            return lab_errf(err, errlen, LAB_EINPUT,
                            "%s: schema version %d is newer than this vtlab (%d); use a newer build",
                            st->path, v, LAB_SCHEMA_VERSION);
        }
        if (v >= target) { lab_sq_rollback(st); st->version = v; return LAB_OK; }
        rc = exec_script(st, migrations[v], v + 1 == 11 ? "schema v11" : "schema", err, errlen);
        if (!rc && migrations_part2[v]) rc = exec_script(st, migrations_part2[v], "schema", err, errlen);
        if (!rc && v + 1 == 10) rc = migrate_v10_status(st, err, errlen);
        if (rc) {
            lab_sq_rollback(st);
            return lab_err_prefix(err, errlen, rc, "migration to version %d", v + 1);
        }
        /* PRAGMA takes no bound parameters; the value is our own integer. */
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", v + 1);
        if ((rc = lab_sq_exec(st, pragma, err, errlen)) || (rc = lab_sq_commit(st, err, errlen))) {
            lab_sq_rollback(st);
            return rc;
        }
    }
}
