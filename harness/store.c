/*
 * store.c — results.db: schema, migrations, claims and the one-transaction
 * write of a finished run. See store.h for the workload and docs/schema.md
 * for every table and column.
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
 *   v11 localizations, localize_steps (`vtlab localize`; the migration is
 *       store_localize.c's lab_store_localize_migrate).
 * A schema change appends a migration to migrations[]; old ones never change.
 *
 * Durability: WAL with synchronous=NORMAL. A committed transaction survives
 * the process being killed (kill -9); only an OS crash or power loss can lose
 * the last commits, and never leaves the file inconsistent.
 */
#include "store.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_internal.h"
#include "store_localize.h"
#include "store_merge.h"
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

/* v6: views for the questions people ask of results.db from elsewhere (SQL,
 * pandas; docs/schema.md): one row per run with its comparison, verdict,
 * common metrics and knobs pivoted into columns (run_summary), the latest
 * verdict of each experiment and arm (latest_verdicts), and the confounds an
 * audit left open (open_confounds). A knob added to the registry later gets
 * its column in a later migration (DROP VIEW, CREATE VIEW); until then it is
 * in the `knobs` JSON column. */
static const char *const migration_v6 =
    "CREATE VIEW run_summary AS SELECT"
    "  r.id AS run_id, r.experiment, r.arm, r.repeat_idx, r.is_reference, r.status, r.error,"
    "  r.started_at, r.finished_at, r.code_version, r.git_commit, r.backend, r.device, r.host,"
    "  r.knob_hash, r.model_sha256, r.dataset_sha256, r.logits_sha256, r.score,"
    "  r.n_sequences, r.n_tokens, r.n_scored, r.wall_s, r.forward_s,"
    "  r.assertions_ok, r.expected_assertions, r.assertion_reason,"
    "  c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi,"
    "  CAST(c.top1_k AS REAL) / c.top1_n AS top1_agreement,"
    "  c.kl_mean, c.kl_p99, c.kl_max, c.max_abs_dlogit, c.rms_dp, c.mcnemar_p,"
    "  c.first_div_layer, c.first_div_value,"
    "  v.verdict, v.metric AS decision_metric, v.threshold AS decision_threshold, v.direction AS decision_direction,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s') AS tokens_per_s,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'perplexity') AS perplexity,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'nll_mean') AS nll_mean,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_STREAM') AS VT_KIMI_BF16_STREAM,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_EXPERT_OUT') AS VT_KIMI_BF16_EXPERT_OUT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_ACT') AS VT_KIMI_BF16_ACT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_WEIGHTS') AS VT_KIMI_ROUTER_WEIGHTS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_RENORM') AS VT_KIMI_ROUTER_RENORM,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_MLA_KV_NORM_EPS') AS VT_KIMI_MLA_KV_NORM_EPS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_BACKEND') AS VT_BACKEND,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_FAULT') AS VT_FAULT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_THREADS') AS VT_THREADS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_PROBE') AS VT_PROBE,"
    "  (SELECT json_group_object(name, value) FROM run_knobs k WHERE k.run_id = r.id) AS knobs"
    "  FROM runs r LEFT JOIN comparisons c ON c.run_id = r.id"
    "  LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id;"
    "CREATE VIEW latest_verdicts AS SELECT"
    "  s.experiment, s.arm, s.run_id, s.verdict, s.top1_k, s.top1_n, s.top1_lo, s.top1_hi,"
    "  s.decision_metric, s.decision_threshold, s.decision_direction, s.code_version, s.started_at"
    "  FROM run_summary s WHERE s.verdict IS NOT NULL AND s.run_id = (SELECT max(r2.id) FROM runs r2"
    "  JOIN verdicts v2 ON v2.run_id = r2.id WHERE r2.experiment = s.experiment AND r2.arm = s.arm"
    "  AND r2.status = 'FINISHED');"
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
    "CREATE VIEW run_summary AS SELECT"
    "  r.id AS run_id, r.experiment, r.arm, r.repeat_idx, r.is_reference, r.status, r.error,"
    "  r.started_at, r.finished_at, r.code_version, r.git_commit, r.backend, r.device, r.host,"
    "  r.knob_hash, r.model_sha256, r.dataset_sha256, r.logits_sha256, r.score,"
    "  r.n_sequences, r.n_tokens, r.n_scored, r.wall_s, r.forward_s,"
    "  r.assertions_ok, r.expected_assertions, r.assertion_reason,"
    "  c.reference_run_id, c.top1_k, c.top1_n, c.top1_lo, c.top1_hi,"
    "  CAST(c.top1_k AS REAL) / c.top1_n AS top1_agreement,"
    "  c.kl_mean, c.kl_p99, c.kl_max, c.max_abs_dlogit, c.rms_dp, c.mcnemar_p,"
    "  c.first_div_layer, c.first_div_value,"
    "  v.verdict, v.metric AS decision_metric, v.threshold AS decision_threshold, v.direction AS decision_direction,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'tokens_per_s') AS tokens_per_s,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'perplexity') AS perplexity,"
    "  (SELECT value FROM metrics m WHERE m.run_id = r.id AND m.name = 'nll_mean') AS nll_mean,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_STREAM') AS VT_KIMI_BF16_STREAM,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_EXPERT_OUT') AS VT_KIMI_BF16_EXPERT_OUT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_BF16_ACT') AS VT_KIMI_BF16_ACT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_WEIGHTS') AS VT_KIMI_ROUTER_WEIGHTS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_ROUTER_RENORM') AS VT_KIMI_ROUTER_RENORM,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_KIMI_MLA_KV_NORM_EPS') AS VT_KIMI_MLA_KV_NORM_EPS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_BACKEND') AS VT_BACKEND,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_FAULT') AS VT_FAULT,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_THREADS') AS VT_THREADS,"
    "  (SELECT value FROM run_knobs k WHERE k.run_id = r.id AND k.name = 'VT_PROBE') AS VT_PROBE,"
    "  (SELECT json_group_object(name, value) FROM run_knobs k WHERE k.run_id = r.id) AS knobs,"
    "  r.rerun_of,"
    "  (SELECT CASE WHEN count(*) THEN json_group_object(t.key, t.value) END FROM (SELECT key, value FROM run_tags"
    "   WHERE run_id = r.id ORDER BY key) t) AS tags,"
    "  (SELECT CASE WHEN count(*) THEN json_group_array(n.text) END FROM (SELECT text FROM run_notes"
    "   WHERE run_id = r.id ORDER BY id) n) AS notes"
    "  FROM runs r LEFT JOIN comparisons c ON c.run_id = r.id"
    "  LEFT JOIN verdicts v ON v.run_id = r.id AND v.reference_run_id = c.reference_run_id;"
    "CREATE VIEW latest_verdicts AS SELECT"
    "  s.experiment, s.arm, s.run_id, s.verdict, s.top1_k, s.top1_n, s.top1_lo, s.top1_hi,"
    "  s.decision_metric, s.decision_threshold, s.decision_direction, s.code_version, s.started_at,"
    "  s.tags, s.notes"
    "  FROM run_summary s WHERE s.verdict IS NOT NULL AND s.run_id = (SELECT max(r2.id) FROM runs r2"
    "  JOIN verdicts v2 ON v2.run_id = r2.id WHERE r2.experiment = s.experiment AND r2.arm = s.arm"
    "  AND r2.status = 'FINISHED');";

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

/* A version's migration: its script, then its second part where it has one
 * (v8 was written as two, the bisection's and the shards', applied in this
 * order in one transaction). */
static const char *const migrations[LAB_SCHEMA_VERSION] = {migration_v1, migration_v2, migration_v3, migration_v4,
                                                           migration_v5, migration_v6, migration_v7,
                                                           migration_v8_bisect, migration_v9, migration_v10};
static const char *const migrations_part2[LAB_SCHEMA_VERSION] = {[7] = migration_v8_shards};

/* ------------------------------------------------------------ helpers */

/* The error of the connection's last call, named by the database path and
 * what was being done. Two causes a person must act on are said in words, as
 * SQLite's own text ("database or disk is full", "disk I/O error") does not:
 * a full disk (SQLITE_FULL, or an I/O error whose errno is ENOSPC) and a
 * corrupt file (SQLITE_CORRUPT, SQLITE_NOTADB). */
int lab_sq_error(lab_store *st, char *err, size_t errlen, const char *what) {
    int code = sqlite3_extended_errcode(st->db), primary = code & 0xff;
    if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC))
        return lab_errf(err, errlen, LAB_EIO,
                        "%s: %s: the disk is full (no space left on the device holding the database or its -wal "
                        "file); free space and rerun (%s)", st->path, what, sqlite3_errmsg(st->db));
    if (primary == SQLITE_IOERR && sqlite3_system_errno(st->db) == EFBIG)
        return lab_errf(err, errlen, LAB_EIO, "%s: %s: file too large: the process's file size limit (ulimit -f) "
                        "was reached (%s)", st->path, what, sqlite3_errmsg(st->db));
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: the database file is corrupt or not a vtlab database (%s)",
                        st->path, what, sqlite3_errmsg(st->db));
    int status = (primary == SQLITE_NOMEM) ? LAB_ENOMEM : LAB_EIO;
    return lab_errf(err, errlen, status, "%s: %s: %s", st->path, what, sqlite3_errmsg(st->db));
}

int lab_store_error(lab_store *st, const char *what, char *err, size_t errlen) {
    return lab_sq_error(st, err, errlen, what);
}

const char *lab_store_path(lab_store *st) { return st->path; }

/* Runs a static multi-statement script (schema text, never data) statement by
 * statement through prepare/step. */
static int exec_script(lab_store *st, const char *sql, char *err, size_t errlen) {
    const char *tail = sql;
    while (tail && *tail) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(st->db, tail, -1, &s, &tail) != SQLITE_OK) return lab_sq_error(st, err, errlen, "schema");
        if (!s) break; /* only whitespace left */
        int rc;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {}
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE) return lab_sq_error(st, err, errlen, "schema");
    }
    return LAB_OK;
}

int lab_sq_prep(lab_store *st, const char *sql, sqlite3_stmt **s, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(st->db, sql, -1, s, NULL) != SQLITE_OK) {
        *s = NULL;
        return lab_sq_error(st, err, errlen, "prepare");
    }
    return LAB_OK;
}

int lab_sq_step(lab_store *st, sqlite3_stmt *s, char *err, size_t errlen, const char *what) {
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return lab_sq_error(st, err, errlen, what);
    return LAB_OK;
}

int lab_sq_prep_as(lab_store *st, const char *sql, sqlite3_stmt **s, const char *what, char *err, size_t errlen) {
    if (lab_sq_prep(st, sql, s, err, errlen)) return lab_sq_error(st, err, errlen, what);
    return LAB_OK;
}

double lab_sq_col_num(sqlite3_stmt *s, int i) {
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

void lab_sq_col_copy(sqlite3_stmt *s, int i, char *dst, size_t n) { snprintf(dst, n, "%s", lab_col_text(s, i)); }

void *lab_sq_append(void **v, int64_t *n, int64_t *cap, size_t size) {
    if (*n >= *cap) {
        int64_t c = *cap ? *cap * 2 : 16;
        if (c <= *n) c = *n + 16;
        void *nv = realloc(*v, (size_t)c * size);
        if (!nv) return NULL;
        *v = nv;
        *cap = c;
    }
    char *row = (char *)*v + (size_t)(*n)++ * size;
    memset(row, 0, size);
    return row;
}

int lab_sq_done(lab_store *st, sqlite3_stmt *s, int last, const char *what, char *err, size_t errlen) {
    int rc = last == SQLITE_DONE ? LAB_OK : lab_sq_error(st, err, errlen, what);
    sqlite3_finalize(s);
    return rc;
}

int lab_sq_collect(lab_store *st, sqlite3_stmt *s, const char *what, void (*copy)(sqlite3_stmt *, void *), size_t size,
                   void **v, int64_t *n, char *err, size_t errlen) {
    int64_t cap = 0;
    int last, rc = LAB_OK;
    while ((last = sqlite3_step(s)) == SQLITE_ROW) {
        void *row = lab_sq_append(v, n, &cap, size);
        if (!row) { rc = lab_oom(err, errlen); break; }
        copy(s, row);
    }
    if (rc) sqlite3_finalize(s);
    else rc = lab_sq_done(st, s, last, what, err, errlen);
    if (rc) { free(*v); *v = NULL; *n = 0; }
    return rc;
}

int lab_sq_exec(lab_store *st, const char *sql, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    rc = lab_sq_step(st, s, err, errlen, sql);
    sqlite3_finalize(s);
    return rc;
}

/* Each write is its own BEGIN IMMEDIATE .. COMMIT, except inside a batch,
 * where they are all part of the batch's one transaction: there a failing
 * write's rollback undoes the whole batch, and every later write is refused. */
int lab_sq_begin(lab_store *st, char *err, size_t errlen) {
    if (st->batch)
        return st->batch_failed ? lab_errf(err, errlen, LAB_EIO, "%s: an earlier write of this batch failed", st->path)
                                : LAB_OK;
    return lab_sq_exec(st, "BEGIN IMMEDIATE", err, errlen);
}
int lab_sq_commit(lab_store *st, char *err, size_t errlen) {
    return st->batch ? LAB_OK : lab_sq_exec(st, "COMMIT", err, errlen);
}
void lab_sq_rollback(lab_store *st) {
    if (st->batch) st->batch_failed = 1;
    if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
}
int lab_sq_write1(lab_store *st, sqlite3_stmt *s, const char *what, char *err, size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (!rc) rc = lab_sq_step(st, s, err, errlen, what);
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

int lab_store_has_table(lab_store *st, const char *name, int *have, char *err, size_t errlen) {
    sqlite3_stmt *s;
    *have = 0;
    int rc = lab_sq_prep(st, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    *have = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return LAB_OK;
}

int lab_store_batch_begin(lab_store *st, char *err, size_t errlen) {
    if (st->batch) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: batches do not nest", st->path);
    int rc = lab_sq_exec(st, "BEGIN IMMEDIATE", err, errlen);
    if (!rc) st->batch = 1, st->batch_failed = 0;
    return rc;
}

int lab_store_batch_commit(lab_store *st, char *err, size_t errlen) {
    if (!st->batch) return lab_errf(err, errlen, LAB_EINTERNAL, "%s: no batch to commit", st->path);
    st->batch = 0;
    if (st->batch_failed) {
        if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
        return lab_errf(err, errlen, LAB_EIO, "%s: a write of the batch failed; nothing of it was written", st->path);
    }
    int rc = lab_sq_exec(st, "COMMIT", err, errlen);
    if (rc && !sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
    return rc;
}

void lab_store_batch_rollback(lab_store *st) {
    st->batch = 0;
    if (!sqlite3_get_autocommit(st->db)) lab_sq_exec(st, "ROLLBACK", NULL, 0);
}

void lab_sq_bind_text(sqlite3_stmt *s, int i, const char *v) {
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(s, i);
}

static int read_version(lab_store *st, int *v, char *err, size_t errlen) {
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
 * not both create the schema. */
static int migrate(lab_store *st, int target, char *err, size_t errlen) {
    for (;;) {
        int v = 0, rc;
        if ((rc = lab_sq_begin(st, err, errlen))) return rc;
        if ((rc = read_version(st, &v, err, errlen))) { lab_sq_rollback(st); return rc; }
        if (v > LAB_SCHEMA_VERSION) {
            lab_sq_rollback(st);
            return lab_errf(err, errlen, LAB_EINPUT,
                            "%s: schema version %d is newer than this vtlab (%d); use a newer build",
                            st->path, v, LAB_SCHEMA_VERSION);
        }
        if (v >= target) { lab_sq_rollback(st); st->version = v; return LAB_OK; }
        rc = exec_script(st, migrations[v], err, errlen);
        if (!rc && migrations_part2[v]) rc = exec_script(st, migrations_part2[v], err, errlen);
        if (!rc && v + 1 == 10) rc = migrate_v10_status(st, err, errlen);
        if (!rc && v + 1 == 11) rc = lab_store_localize_migrate(st, err, errlen);   /* v11: store_localize.c */
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

/* Puts the database in WAL mode (a no-op when it already is). The switch
 * needs an exclusive lock, and when several processes open a NEW file at once
 * each holds a shared lock while asking for it: SQLite then answers
 * SQLITE_BUSY at once, without calling the busy handler (waiting could
 * deadlock). So the switch is retried here, with a growing sleep, for as long
 * as the busy timeout would have waited; whoever loses finds WAL already set.
 * The answer must be "wal": the concurrency promises above depend on it. */
static int switch_to_wal(lab_store *st, char *err, size_t errlen) {
#ifndef VT_MUTATE_NO_WAL_RETRY
    const int64_t budget_us = 30 * 1000000LL;
#else
    const int64_t budget_us = 0; /* mutation: give up on the first BUSY, as before the fix */
#endif
    int64_t waited_us = 0, nap_us = 1000;
    for (;;) {
        sqlite3_stmt *s = NULL;
        int rc = lab_sq_prep(st, "PRAGMA journal_mode = WAL", &s, err, errlen);
        if (rc) return rc;
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(s, 0);
            int wal = mode && strcmp(mode, "wal") == 0;
            char got[32];
            snprintf(got, sizeof got, "%s", mode ? mode : "(none)");
            sqlite3_finalize(s);
            if (wal) return LAB_OK;
            return lab_errf(err, errlen, LAB_EIO,
                            "%s: cannot switch the database to WAL journal mode (it stays \"%s\"); "
                            "is the file on a file system without shared memory support?", st->path, got);
        }
        int primary = step & 0xff;
        if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || waited_us >= budget_us) {
            rc = lab_sq_error(st, err, errlen, "journal_mode");
            sqlite3_finalize(s);
            return rc;
        }
        sqlite3_finalize(s);
        usleep((useconds_t)nap_us);
        waited_us += nap_us;
        if (nap_us < 100000) nap_us *= 2;
    }
}

/* A database that does not exist yet is created in its directory. A
 * directory that is missing, not a directory or not writable is bad input
 * (exit 2), said with the directory and the system's reason: SQLite's own
 * "unable to open database file" names neither. */
static int check_db_dir(const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 || (errno != ENOENT && errno != ENOTDIR)) return LAB_OK;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    const char *why = NULL;
    if (stat(dir, &sb) != 0) why = strerror(errno);
    else if (!S_ISDIR(sb.st_mode)) why = strerror(ENOTDIR);
    else if (access(dir, W_OK | X_OK) != 0) why = strerror(errno);
    if (!why) return LAB_OK;
    return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot create the database in directory %s: %s", path, dir, why);
}

int lab_store_open_version(lab_store **out, const char *path, int version, char *err, size_t errlen) {
    *out = NULL;
    if (version < 1 || version > LAB_SCHEMA_VERSION)
        return lab_errf(err, errlen, LAB_EINTERNAL, "schema version %d out of range", version);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: is a directory, not a database file", path);
    int drc = check_db_dir(path, err, errlen);
    if (drc) return drc;
    lab_store *st = calloc(1, sizeof *st);
    if (!st) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    st->path = lab_strdup(path);
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK || !st->path) {
        rc = lab_errf(err, errlen, LAB_EIO, "%s: cannot open database: %s", path,
                      st->db ? sqlite3_errmsg(st->db) : "out of memory");
        lab_store_close(st);
        return rc;
    }
    /* 30 s: longer than any one transaction of ours (a finished run's rows
     * are a few MB), so a waiting writer never gives up while another works. */
    sqlite3_busy_timeout(st->db, 30000);
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_stmt *s = NULL;
    if ((rc = switch_to_wal(st, err, errlen))) goto fail;
    if ((rc = lab_sq_exec(st, "PRAGMA synchronous = NORMAL", err, errlen))) goto fail;
    if ((rc = lab_sq_exec(st, "PRAGMA foreign_keys = ON", err, errlen))) goto fail;
    if ((rc = migrate(st, version, err, errlen))) goto fail;
    *out = st;
    return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_store_close(st);
    return rc;
}

int lab_store_open(lab_store **out, const char *path, char *err, size_t errlen) {
    return lab_store_open_version(out, path, LAB_SCHEMA_VERSION, err, errlen);
}

/* ------------------------------------------------------------ read-only */

/* "file:" URI of path with immutable=1 (RFC 3986: everything but unreserved
 * characters and '/' percent-encoded; an absolute path gets the empty
 * authority, "file:///...", so that "//x" is never read as a host). Caller
 * frees. */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(3 * n + 32);
    if (!u) return NULL;
    char *o = u + sprintf(u, path[0] == '/' ? "file://" : "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    strcpy(o, "?immutable=1");
    return u;
}

static int open_ro_connection(lab_store *st, const char *name, int uri, char *err, size_t errlen) {
    if (st->db) sqlite3_close(st->db);
    st->db = NULL;
    int rc = sqlite3_open_v2(name, &st->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | (uri ? SQLITE_OPEN_URI : 0),
                             NULL);
    if (rc != SQLITE_OK)
        return lab_errf(err, errlen, LAB_EIO, "%s: cannot open database: %s", st->path,
                        st->db ? sqlite3_errmsg(st->db) : "out of memory");
    sqlite3_busy_timeout(st->db, 30000);
    sqlite3_extended_result_codes(st->db, 1);
    return LAB_OK;
}

/* 1 when path-SUFFIX exists. */
static int sidecar_exists(const char *path, const char *suffix) {
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (!p) return 1;   /* unknown: assume it does (the safe answer below) */
    snprintf(p, n, "%s%s", path, suffix);
    int yes = access(p, F_OK) == 0;
    free(p);
    return yes;
}

/* 1 when this process may write both the file and its directory (a
 * read-only mount answers no: access() reports EROFS). */
static int writable_here(const char *path) {
    if (access(path, W_OK) != 0) return 0;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return 0;
    int w = access(dir, W_OK) == 0;
    free(dir);
    return w;
}

int lab_store_open_readonly(lab_store **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        if (e == ENOENT)
            return lab_errf(err, errlen, LAB_EINPUT, "%s: no such database (run an experiment first, or pass --db PATH)",
                            path);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot open database: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: is a directory, not a database file", path);
    if (!S_ISREG(sb.st_mode)) return lab_errf(err, errlen, LAB_EINPUT, "%s: not a regular file", path);
    if (access(path, R_OK) != 0)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: cannot read the database: %s", path, strerror(errno));

    /* An older schema is migrated first when this process may write the
     * file (as every vtlab command always has: a database is upgraded once,
     * by whoever opens it first); a read-only one is read as it is. */
    int rc;
    lab_store *st = NULL;
    if (writable_here(path)) {
        sqlite3 *peek = NULL;
        int v = -1;
        if (sqlite3_open_v2(path, &peek, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
            sqlite3_stmt *s = NULL;
            sqlite3_busy_timeout(peek, 30000);
            if (sqlite3_prepare_v2(peek, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
                v = sqlite3_column_int(s, 0);
            sqlite3_finalize(s);
        }
        sqlite3_close(peek);
        if (v >= 1 && v < LAB_SCHEMA_VERSION) {
            if ((rc = lab_store_open(&st, path, err, errlen))) return rc;
            lab_store_close(st);
            st = NULL;
        }
    }

    st = calloc(1, sizeof *st);
    if (!st || !(st->path = lab_strdup(path))) {
        lab_store_close(st);
        return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    }
    int v = 0;
    if ((rc = open_ro_connection(st, path, 0, err, errlen))) goto fail;
    if ((rc = read_version(st, &v, err, errlen))) {
        /* A WAL database needs its -shm (and -wal) files. With neither there
         * and a directory this process cannot write, SQLite cannot create
         * them (SQLITE_READONLY_DIRECTORY / SQLITE_CANTOPEN): then no
         * connection has the file open (a connection keeps its -wal while
         * open), and it is read as immutable. With a -wal there (a writer is
         * active, or died), SQLite reads it through a read-only -shm itself;
         * immutable would ignore the -wal, so it is never used then. */
        int code = sqlite3_extended_errcode(st->db);
        if ((code == SQLITE_READONLY_DIRECTORY || (code & 0xff) == SQLITE_CANTOPEN) && !sidecar_exists(path, "-wal")) {
            char *uri = immutable_uri(path);
            if (!uri) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto fail; }
            rc = open_ro_connection(st, uri, 1, err, errlen);
            free(uri);
            if (!rc) rc = read_version(st, &v, err, errlen);
        }
        if (rc) goto fail;
    }
    if (v > LAB_SCHEMA_VERSION) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: schema version %d is newer than this vtlab (%d); use a newer build",
                      path, v, LAB_SCHEMA_VERSION);
        goto fail;
    }
    if (v < 2) {
        rc = v == 0 ? lab_errf(err, errlen, LAB_EINPUT, "%s: not a vtlab results database (no schema)", path)
                    : lab_errf(err, errlen, LAB_EINPUT,
                               "%s: schema version %d is too old to read, and this process cannot write the file to "
                               "migrate it: copy it somewhere writable and open it there", path, v);
        goto fail;
    }
    st->version = v;
    if ((rc = lab_store_check(st, err, errlen))) goto fail;
    *out = st;
    return LAB_OK;
fail:
    lab_store_close(st);
    return rc;
}

int lab_store_check(lab_store *st, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int64_t pages = 0, page_size = 0;
    int rc = lab_sq_prep(st, "SELECT (SELECT page_count FROM pragma_page_count), (SELECT page_size FROM pragma_page_size)",
                  &s, err, errlen);
    if (rc) return rc;
    if (sqlite3_step(s) == SQLITE_ROW) {
        pages = sqlite3_column_int64(s, 0);
        page_size = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    if (pages * page_size > LAB_STORE_CHECK_MAX_BYTES) return LAB_OK;
    /* The check reads every page: through a memory map it costs about half
     * of what a pread per page does. Only for the check: a file another
     * process shrank under a map would be SIGBUS, not an error. */
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA mmap_size = %lld", (long long)LAB_STORE_CHECK_MAX_BYTES);
    sqlite3_exec(st->db, pragma, NULL, NULL, NULL);   /* best effort: only speed depends on it */
    if ((rc = lab_sq_prep(st, "PRAGMA quick_check", &s, err, errlen))) return rc;
    int step = sqlite3_step(s);
    char first[256] = "";
    if (step == SQLITE_ROW) snprintf(first, sizeof first, "%s", lab_col_text(s, 0));
    else rc = lab_sq_error(st, err, errlen, "integrity check");
    sqlite3_finalize(s);
    sqlite3_exec(st->db, "PRAGMA mmap_size = 0", NULL, NULL, NULL);
    if (rc || !strcmp(first, "ok")) return rc;
    return lab_errf(err, errlen, LAB_EINPUT,
                    "%s: the database file is corrupt (PRAGMA quick_check: %s); restore it from a copy, or recover "
                    "what is readable with `sqlite3 %s .recover`", st->path, first, st->path);
}

void lab_store_close(lab_store *st) {
    if (!st) return;
    if (st->db) sqlite3_close(st->db);
    free(st->path);
    free(st);
}

sqlite3 *lab_store_db(lab_store *st) { return st->db; }
int lab_store_version(lab_store *st) { return st->version; }

/* ------------------------------------------------------------ liveness */

int64_t lab_pid_start(int64_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and ')': skip to the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* fields from 3 on; starttime is field 22 */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) return 0;
    }
    return strtoll(p + 1, NULL, 10);
}

int lab_pid_alive(int64_t pid, int64_t pid_start) {
    if (pid <= 0) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    /* The pid exists; if it was reused by another process its start differs. */
    int64_t now = lab_pid_start(pid);
    if (pid_start > 0 && now > 0 && now != pid_start) return 0;
    /* A zombie has exited: it holds no database work any more. */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        if (p && p[1] == ' ' && p[2] == 'Z') return 0;
    }
    return 1;
}

static int mark_killed(lab_store *st, int64_t run_id, int64_t pid, const char *host, char *err, size_t errlen) {
    char now[32], msg[256];
    lab_now_iso(now);
    snprintf(msg, sizeof msg, "process %lld on %s died while running (found by pid %lld at %s)",
             (long long)pid, host ? host : "?", (long long)getpid(), now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE runs SET status = 'KILLED', error = ?1, finished_at = ?2 "
                      "WHERE id = ?3 AND status = 'RUNNING'", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, msg, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, run_id);
    rc = lab_sq_step(st, s, err, errlen, "mark killed");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_reap(lab_store *st, const char *host, int64_t *n, char *err, size_t errlen) {
    *n = 0;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "SELECT id, pid, pid_start FROM runs WHERE status = 'RUNNING' AND host = ?1", &s, err, errlen))) {
        lab_sq_rollback(st);
        return rc;
    }
    lab_sq_bind_text(s, 1, host);
    int64_t ids[256], pids[256], cnt = 0;
    while (sqlite3_step(s) == SQLITE_ROW && cnt < 256) {
        int64_t id = sqlite3_column_int64(s, 0), pid = sqlite3_column_int64(s, 1), ps = sqlite3_column_int64(s, 2);
        if (lab_pid_alive(pid, ps)) continue;
        ids[cnt] = id;
        pids[cnt++] = pid;
    }
    sqlite3_finalize(s);
    for (int64_t i = 0; i < cnt; i++)
        if ((rc = mark_killed(st, ids[i], pids[i], host, err, errlen))) { lab_sq_rollback(st); return rc; }
    if ((rc = lab_sq_commit(st, err, errlen))) { lab_sq_rollback(st); return rc; }
    *n = cnt;
    return LAB_OK;
}

/* ------------------------------------------------------------ completeness */

/* Reads one integer of a one-row query with run_id bound as ?1. */
static int q_count(lab_store *st, const char *sql, int64_t run_id, int64_t *v, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s);
    *v = step == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    rc = (step == SQLITE_ROW || step == SQLITE_DONE) ? LAB_OK : lab_sq_error(st, err, errlen, "completeness check");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_run_missing(lab_store *st, int64_t run_id, char *what, size_t whatlen, char *err, size_t errlen) {
    what[0] = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT is_reference, repeat_idx, logits_sha256 IS NOT NULL, coalesce(n_sequences, 0)"
                      " FROM runs WHERE id = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        sqlite3_finalize(s);
        if (step != SQLITE_DONE) return lab_sq_error(st, err, errlen, "completeness check");
        snprintf(what, whatlen, "no such run");
        return LAB_OK;
    }
    int is_ref = sqlite3_column_int(s, 0), has_logits = sqlite3_column_int(s, 2);
    int64_t rep = sqlite3_column_int64(s, 1), n_seq = sqlite3_column_int64(s, 3);
    sqlite3_finalize(s);
    /* A benchmark run (record-bench) keeps no logits and compares with nothing. */
    if (!has_logits) return LAB_OK;
    int64_t n = 0;
    if ((rc = q_count(st, "SELECT count(*) FROM logits_topk WHERE run_id = ?1", run_id, &n, err, errlen))) return rc;
    if (n != n_seq) {
        snprintf(what, whatlen, "%lld of its %lld logits_topk rows", (long long)n, (long long)n_seq);
        return LAB_OK;
    }
    if (is_ref && rep == 0) return LAB_OK;   /* the reference's repeat 0 is what the others compare with */
    /* Every other run is compared with the FINISHED repeat 0 of its
     * experiment's reference arm (a PARTIAL run with the PARTIAL one over
     * the same sequences: the reference ran with the same --limit). */
    int64_t ref = 0;
    if ((rc = q_count(st, "SELECT c.reference_run_id FROM comparisons c JOIN runs f ON f.id = c.reference_run_id"
                          " JOIN runs r ON r.id = c.run_id WHERE c.run_id = ?1 AND (f.status = 'FINISHED'"
                          " OR (f.status = 'PARTIAL' AND f.dataset_sha256 = r.dataset_sha256))"
                          " AND f.is_reference = 1 AND f.repeat_idx = 0 AND f.experiment = r.experiment"
                          " ORDER BY c.reference_run_id DESC LIMIT 1", run_id, &ref, err, errlen))) return rc;
    if (!ref) {
        snprintf(what, whatlen, "its comparison with the reference run (repeat 0 of the reference arm, FINISHED)");
        return LAB_OK;
    }
    /* Per-layer divergence, when measured: one row per (layer, site) for
     * layers 0..max, i.e. 2 * (max + 1) rows. */
    int64_t div = 0, rows = 0, span = 0;
    sqlite3_stmt *d;
    if ((rc = lab_sq_prep(st, "SELECT c.div_sequences, (SELECT count(*) FROM layer_divergence l WHERE l.run_id = c.run_id"
                       " AND l.reference_run_id = c.reference_run_id), (SELECT 2 * (max(layer) + 1) FROM"
                       " layer_divergence l WHERE l.run_id = c.run_id AND l.reference_run_id = c.reference_run_id)"
                       " FROM comparisons c WHERE c.run_id = ?1 AND c.reference_run_id = ?2", &d, err, errlen)))
        return rc;
    sqlite3_bind_int64(d, 1, run_id);
    sqlite3_bind_int64(d, 2, ref);
    if ((step = sqlite3_step(d)) == SQLITE_ROW) {
        div = sqlite3_column_int64(d, 0);
        rows = sqlite3_column_int64(d, 1);
        span = sqlite3_column_int64(d, 2);
    }
    sqlite3_finalize(d);
    if (step != SQLITE_ROW) return lab_sq_error(st, err, errlen, "completeness check");
    if (div > 0 && (rows == 0 || rows != span))
        snprintf(what, whatlen, "its layer_divergence rows (%lld present; the comparison measured %lld sequence(s))",
                 (long long)rows, (long long)div);
    return LAB_OK;
}

/* ------------------------------------------------------------ claims */

static void bind_identity(sqlite3_stmt *s, const lab_identity *id) {
    lab_sq_bind_text(s, 1, id->experiment);
    lab_sq_bind_text(s, 2, id->arm);
    lab_sq_bind_text(s, 3, id->knob_hash);
    lab_sq_bind_text(s, 4, id->model_sha256);
    lab_sq_bind_text(s, 5, id->dataset_sha256);
    lab_sq_bind_text(s, 6, id->code_version);
    sqlite3_bind_int64(s, 7, id->repeat);
    lab_sq_bind_text(s, 25, id->shard ? id->shard : "");
}

#define IDENTITY_WHERE \
    "experiment = ?1 AND arm = ?2 AND knob_hash = ?3 AND model_sha256 = ?4 AND " \
    "dataset_sha256 = ?5 AND code_version = ?6 AND repeat_idx = ?7 AND shard = ?25"

/* Marks a FINISHED run that lacks rows a FINISHED run must have as FAILED,
 * saying what it lacks (inside the caller's transaction). */
static int mark_incomplete(lab_store *st, int64_t run_id, const char *what, char *err, size_t errlen) {
    char now[32], msg[512];
    lab_now_iso(now);
    snprintf(msg, sizeof msg, "incomplete: FINISHED without %s; marked FAILED and redone (pid %lld at %s)", what,
             (long long)getpid(), now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "UPDATE runs SET status = 'FAILED', error = ?1 WHERE id = ?2 AND status = 'FINISHED'", &s, err,
                  errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, msg, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, run_id);
    rc = lab_sq_step(st, s, err, errlen, "mark incomplete run");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_lease(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                    int *kind, int64_t *run_id, int64_t *stale_id, char *err, size_t errlen) {
    return lab_store_lease_ex(st, id, pv, force, kind, run_id, stale_id, NULL, err, errlen);
}

/* Inserts the RUNNING row of a new lease (inside the caller's transaction). */
static int insert_running(lab_store *st, const lab_identity *id, const lab_provenance *pv, int64_t *run_id,
                          char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s = NULL;
    int rc = lab_sq_prep(st,
                   "INSERT INTO runs (experiment, arm, knob_hash, model_sha256, dataset_sha256, code_version,"
                   " repeat_idx, status, started_at, experiment_sha256, git_commit, git_dirty, build_flags,"
                   " compiler, backend, device, host, pid, pid_start, is_reference, score, top_k,"
                   " expected_assertions, layer_kinds, engine_hello, shard)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'RUNNING', ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                   " ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)", &s, err, errlen);
    if (rc) return rc;
    bind_identity(s, id);
    lab_sq_bind_text(s, 8, now);
    lab_sq_bind_text(s, 9, pv->experiment_sha256);
    lab_sq_bind_text(s, 10, pv->git_commit);
    sqlite3_bind_int(s, 11, pv->git_dirty);
    lab_sq_bind_text(s, 12, pv->build_flags);
    lab_sq_bind_text(s, 13, pv->compiler);
    lab_sq_bind_text(s, 14, pv->backend);
    lab_sq_bind_text(s, 15, pv->device);
    lab_sq_bind_text(s, 16, pv->host);
    sqlite3_bind_int64(s, 17, pv->pid);
    sqlite3_bind_int64(s, 18, pv->pid_start);
    sqlite3_bind_int(s, 19, pv->is_reference);
    lab_sq_bind_text(s, 20, pv->score);
    sqlite3_bind_int64(s, 21, pv->top_k);
    lab_sq_bind_text(s, 22, pv->expected_assertions ? pv->expected_assertions : "pass");
    lab_sq_bind_text(s, 23, pv->layer_kinds && *pv->layer_kinds ? pv->layer_kinds : NULL);
    lab_sq_bind_text(s, 24, pv->engine_hello);
    rc = lab_sq_step(st, s, err, errlen, "lease run");
    sqlite3_finalize(s);
    if (!rc) *run_id = sqlite3_last_insert_rowid(st->db);
    return rc;
}

int lab_store_lease_ex(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                       int *kind, int64_t *run_id, int64_t *stale_id, int64_t *redone_id, char *err, size_t errlen) {
    *kind = 0;
    *run_id = 0;
    *stale_id = 0;
    if (redone_id) *redone_id = 0;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    int64_t redone = 0;
    /* The newest FINISHED run of the identity makes the run done, if it is
     * complete; one that is not (left by an older vtlab) is marked FAILED
     * and the next older one looked at, so an incomplete run is redone
     * instead of skipped for ever. */
    while (!force) {
        int64_t done_id = 0;
        if ((rc = lab_sq_prep(st, "SELECT id FROM runs WHERE " IDENTITY_WHERE " AND status = 'FINISHED' "
                           "ORDER BY id DESC LIMIT 1", &s, err, errlen))) goto fail;
        bind_identity(s, id);
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) done_id = sqlite3_column_int64(s, 0);
        else if (step != SQLITE_DONE) {   /* an I/O error must not read as "not finished yet" */
            rc = lab_sq_error(st, err, errlen, "lease run");
            goto fail;
        }
        sqlite3_finalize(s);
        s = NULL;
        if (!done_id) break;
        char what[256];
        if ((rc = lab_store_run_missing(st, done_id, what, sizeof what, err, errlen))) goto fail;
        if (what[0]) {
            if ((rc = mark_incomplete(st, done_id, what, err, errlen))) goto fail;
            redone = done_id;
            continue;
        }
        *kind = LAB_LEASE_DONE;
        *run_id = done_id;
        /* Nothing to keep, unless an incomplete run was marked on the way
         * (in a batch, a DONE lease fails the batch either way, as documented). */
        if (redone && !st->batch) {
            if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
            if (redone_id) *redone_id = redone;
        } else {
            lab_sq_rollback(st);
        }
        return LAB_OK;
    }
    if ((rc = lab_sq_prep(st, "SELECT id, pid, pid_start, host FROM runs WHERE " IDENTITY_WHERE
                       " AND status = 'RUNNING'", &s, err, errlen))) goto fail;
    bind_identity(s, id);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW && step != SQLITE_DONE) {
        rc = lab_sq_error(st, err, errlen, "lease run");
        goto fail;
    }
    if (step == SQLITE_ROW) {
        int64_t rid = sqlite3_column_int64(s, 0), pid = sqlite3_column_int64(s, 1);
        int64_t ps = sqlite3_column_int64(s, 2);
        const char *host = (const char *)sqlite3_column_text(s, 3);
        int same_host = host && pv->host && !strcmp(host, pv->host);
        /* Another host's process cannot be checked from here: treat it as alive. */
        if (!same_host || lab_pid_alive(pid, ps)) {
            sqlite3_finalize(s);
            lab_sq_rollback(st);
            *kind = LAB_LEASE_BUSY;
            *run_id = rid;
            return LAB_OK;
        }
        char hostc[256];
        snprintf(hostc, sizeof hostc, "%s", host);
        sqlite3_finalize(s);
        s = NULL;
        if ((rc = mark_killed(st, rid, pid, hostc, err, errlen))) goto fail;
        *stale_id = rid;
    } else {
        sqlite3_finalize(s);
        s = NULL;
    }
    if ((rc = insert_running(st, id, pv, run_id, err, errlen))) goto fail;
    if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
    *kind = LAB_LEASED;
    if (redone_id) *redone_id = redone;
    return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_sq_rollback(st);
    *kind = 0;
    return rc;
}

int lab_store_find_finished(lab_store *st, const lab_identity *id, int64_t *run_id,
                            char logits_sha256[65], char *err, size_t errlen) {
    *run_id = 0;
    if (logits_sha256) logits_sha256[0] = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT id, logits_sha256 FROM runs WHERE " IDENTITY_WHERE
                      " AND status = 'FINISHED' ORDER BY id DESC LIMIT 1", &s, err, errlen);
    if (rc) return rc;
    bind_identity(s, id);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(s, 0);
        const char *h = (const char *)sqlite3_column_text(s, 1);
        if (logits_sha256 && h) snprintf(logits_sha256, 65, "%s", h);
        rc = LAB_OK;
    } else if (rc == SQLITE_DONE) rc = LAB_OK;
    else rc = lab_sq_error(st, err, errlen, "find run");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_put_spec(lab_store *st, const char *sha256, const char *id, const char *file,
                       const char *json, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s;
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    if ((rc = lab_sq_prep(st, "INSERT OR IGNORE INTO experiment_specs (sha256, id, file, json, first_seen)"
                       " VALUES (?1, ?2, ?3, ?4, ?5)", &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    lab_sq_bind_text(s, 1, sha256);
    lab_sq_bind_text(s, 2, id);
    lab_sq_bind_text(s, 3, file);
    lab_sq_bind_text(s, 4, json);
    lab_sq_bind_text(s, 5, now);
    rc = lab_sq_step(st, s, err, errlen, "store experiment spec");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

/* ------------------------------------------------------------ finishing */

/* Each writer below runs inside lab_store_finish's transaction. */

static int put_knobs(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO run_knobs (run_id, name, value, numeric) VALUES (?1, ?2, ?3, ?4)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_knobs; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, r->knob_names[i]);
        lab_sq_bind_text(s, 3, r->knob_values[i]);
        sqlite3_bind_int(s, 4, r->knob_numeric ? r->knob_numeric[i] : 1);
        rc = lab_sq_step(st, s, err, errlen, "store knobs");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_probes(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO probes (run_id, idx, site, layer, dtype, src_dtype, calls, rows,"
                      " bytes_per_row, src_row_bytes, dst_row_bytes, converting, violations, rows_unwritten,"
                      " detail, ok) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_probes; i++) {
        const vt_probe *p = &r->probes[i];
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, i);
        sqlite3_bind_text(s, 3, p->site, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 4, p->layer);
        sqlite3_bind_text(s, 5, p->dtype, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 6, p->src_dtype, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 7, p->calls);
        sqlite3_bind_int64(s, 8, p->rows);
        sqlite3_bind_int64(s, 9, p->bytes_per_row);
        sqlite3_bind_int64(s, 10, p->src_row_bytes);
        sqlite3_bind_int64(s, 11, p->dst_row_bytes);
        sqlite3_bind_int(s, 12, p->converting);
        sqlite3_bind_int64(s, 13, p->violations);
        sqlite3_bind_int64(s, 14, p->rows_unwritten);
        sqlite3_bind_text(s, 15, p->detail, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 16, r->probe_ok[i]);
        rc = lab_sq_step(st, s, err, errlen, "store probes");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_expect(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO expectations (run_id, site, expected_dtype, seen_dtypes, records, ok, reason)"
                      " VALUES (?1,?2,?3,?4,?5,?6,?7)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_expect; i++) {
        const lab_expect_result *x = &r->expect[i];
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, x->site);
        lab_sq_bind_text(s, 3, x->expected);
        lab_sq_bind_text(s, 4, x->seen);
        sqlite3_bind_int64(s, 5, x->records);
        sqlite3_bind_int(s, 6, x->ok);
        lab_sq_bind_text(s, 7, x->reason);
        rc = lab_sq_step(st, s, err, errlen, "store expectations");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_metrics(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO metrics (run_id, name, value) VALUES (?1, ?2, ?3)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_metrics; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, r->metric_names[i]);
        /* NaN/inf are not SQL values: stored as NULL ("not measurable"). */
        double v = r->metric_values[i];
        if (v != v || v > 1e308 || v < -1e308) sqlite3_bind_null(s, 3);
        else sqlite3_bind_double(s, 3, v);
        rc = lab_sq_step(st, s, err, errlen, "store metrics");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_logits(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO logits_topk (run_id, seq, n_pos, k, ids, logprobs) VALUES (?1,?2,?3,?4,?5,?6)",
                  &s, err, errlen);
    /* Blobs are little-endian int32 / f32, the byte order of every machine
     * vtlab builds on (x86-64, aarch64); docs/schema.md states it. */
    for (int64_t q = 0; !rc && r->topk_ids && q < r->n_sequences; q++) {
        int64_t p0 = r->offsets[q], np = r->offsets[q + 1] - p0;
        size_t nb = (size_t)(np * r->top_k) * sizeof(int32_t);
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, r->seq_base + q);
        sqlite3_bind_int64(s, 3, np);
        sqlite3_bind_int64(s, 4, r->top_k);
        sqlite3_bind_blob64(s, 5, r->topk_ids + p0 * r->top_k, nb, SQLITE_STATIC);
        sqlite3_bind_blob64(s, 6, r->topk_logprobs + p0 * r->top_k, nb, SQLITE_STATIC);
        rc = lab_sq_step(st, s, err, errlen, "store top-k logits");
    }
    sqlite3_finalize(s);
    if (rc || !r->full_f16) return rc;
    if ((rc = lab_sq_prep(st, "INSERT INTO logits_full (run_id, seq, n_pos, vocab, dtype, data) VALUES (?1,?2,?3,?4,'f16',?5)",
                   &s, err, errlen))) return rc;
    for (int64_t q = 0; !rc && q < r->n_sequences; q++) {
        int64_t p0 = r->offsets[q], np = r->offsets[q + 1] - p0;
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, r->seq_base + q);
        sqlite3_bind_int64(s, 3, np);
        sqlite3_bind_int64(s, 4, r->vocab);
        sqlite3_bind_blob64(s, 5, r->full_f16 + p0 * r->vocab, (size_t)(np * r->vocab) * sizeof(uint16_t), SQLITE_STATIC);
        rc = lab_sq_step(st, s, err, errlen, "store full logits");
    }
    sqlite3_finalize(s);
    return rc;
}

static void bind_real(sqlite3_stmt *s, int i, double v) {
    if (v != v || v > 1e308 || v < -1e308) sqlite3_bind_null(s, i);
    else sqlite3_bind_double(s, i, v);
}

static int put_comparison(lab_store *st, int64_t run, const lab_comparison *c, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO comparisons (run_id, reference_run_id, reference_recomputed, reference_hash_match,"
                      " n_scored, top1_k, top1_n, top1_lo, top1_hi, kl_mean, kl_p99, kl_max, max_abs_dlogit, rms_dp,"
                      " mcnemar_b, mcnemar_c, mcnemar_p, div_sequences, div_tolerance, first_div_layer,"
                      " first_div_site, first_div_value)"
                      " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)",
                  &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_int64(s, 2, c->reference_run_id);
    sqlite3_bind_int(s, 3, c->reference_recomputed);
    if (c->reference_hash_match < 0) sqlite3_bind_null(s, 4);
    else sqlite3_bind_int(s, 4, c->reference_hash_match);
    sqlite3_bind_int64(s, 5, c->n_scored);
    sqlite3_bind_int64(s, 6, c->top1_k);
    sqlite3_bind_int64(s, 7, c->top1_n);
    bind_real(s, 8, c->top1_lo);
    bind_real(s, 9, c->top1_hi);
    bind_real(s, 10, c->kl_mean);
    bind_real(s, 11, c->kl_p99);
    bind_real(s, 12, c->kl_max);
    bind_real(s, 13, c->max_abs_dlogit);
    bind_real(s, 14, c->rms_dp);
    sqlite3_bind_int64(s, 15, c->mcnemar_b);
    sqlite3_bind_int64(s, 16, c->mcnemar_c);
    bind_real(s, 17, c->mcnemar_p);
    sqlite3_bind_int64(s, 18, c->div_sequences);
    if (c->div_sequences > 0) {
        bind_real(s, 19, c->div_tolerance);
        if (c->first_div_layer >= 0) {
            sqlite3_bind_int64(s, 20, c->first_div_layer);
            sqlite3_bind_int(s, 21, c->first_div_site);
            bind_real(s, 22, c->first_div_value);
        }
    }
    rc = lab_sq_step(st, s, err, errlen, "store comparison");
    sqlite3_finalize(s);
    if (rc || c->n_div == 0) return rc;
    if ((rc = lab_sq_prep(st, "INSERT INTO layer_divergence (run_id, reference_run_id, layer, site, rel_l2)"
                       " VALUES (?1,?2,?3,?4,?5)", &s, err, errlen))) return rc;
    for (int64_t i = 0; !rc && i < c->n_div; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, c->reference_run_id);
        sqlite3_bind_int64(s, 3, c->div_layer[i]);
        sqlite3_bind_int(s, 4, c->div_site[i]);
        /* +inf (reference all zero, arm not) is stored as a huge finite value. */
        double v = c->div_value[i];
        sqlite3_bind_double(s, 5, v != v ? 1e308 : v > 1e308 ? 1e308 : v);
        rc = lab_sq_step(st, s, err, errlen, "store layer divergence");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_verdict(lab_store *st, int64_t run, int64_t ref, const lab_verdict_row *v, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO verdicts (run_id, reference_run_id, metric, threshold, direction, k, n, value,"
                      " lo, hi, interval, verdict, decided_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'wilson95',?11,?12)",
                  &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_int64(s, 2, ref);
    lab_sq_bind_text(s, 3, v->metric);
    sqlite3_bind_double(s, 4, v->threshold);
    lab_sq_bind_text(s, 5, v->direction_ge ? ">=" : "<=");
    sqlite3_bind_int64(s, 6, v->k);
    sqlite3_bind_int64(s, 7, v->n);
    sqlite3_bind_double(s, 8, v->value);
    sqlite3_bind_double(s, 9, v->lo);
    sqlite3_bind_double(s, 10, v->hi);
    lab_sq_bind_text(s, 11, v->verdict);
    lab_sq_bind_text(s, 12, now);
    rc = lab_sq_step(st, s, err, errlen, "store verdict");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_finish(lab_store *st, int64_t run_id, const lab_run_result *r, char *err, size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    /* The lease must still be ours: a RUNNING row. If another process judged
     * us dead and marked it KILLED, our results are not written under it. */
    if ((rc = lab_sq_prep(st, "SELECT status FROM runs WHERE id = ?1", &s, err, errlen))) goto fail;
    sqlite3_bind_int64(s, 1, run_id);
    if (sqlite3_step(s) != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(s, 0), "RUNNING")) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld is no longer RUNNING (leased by another process?)",
                      st->path, (long long)run_id);
        goto fail;
    }
    sqlite3_finalize(s);
    s = NULL;
    if ((rc = put_knobs(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_probes(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_expect(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_metrics(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_logits(st, run_id, r, err, errlen))) goto fail;
    if (r->seq && (rc = lab_store_put_sequences(st, run_id, r, err, errlen))) goto fail;
    if (r->shard && (rc = lab_store_put_shard(st, run_id, r->shard, err, errlen))) goto fail;
    if (r->cmp && (rc = put_comparison(st, run_id, r->cmp, err, errlen))) goto fail;
    if (r->cmp && r->verdict && (rc = put_verdict(st, run_id, r->cmp->reference_run_id, r->verdict, err, errlen)))
        goto fail;
    char now[32];
    lab_now_iso(now);
    if ((rc = lab_sq_prep(st, "UPDATE runs SET status = ?11, finished_at = ?2, n_sequences = ?3, n_tokens = ?4,"
                       " n_scored = ?5, wall_s = ?6, forward_s = ?7, logits_sha256 = ?8, assertions_ok = ?9,"
                       " assertion_reason = ?10 WHERE id = ?1", &s, err, errlen))) goto fail;
    lab_sq_bind_text(s, 11, r->partial ? "PARTIAL" : "FINISHED");
    sqlite3_bind_int64(s, 1, run_id);
    lab_sq_bind_text(s, 2, now);
    sqlite3_bind_int64(s, 3, r->n_sequences);
    sqlite3_bind_int64(s, 4, r->n_tokens);
    sqlite3_bind_int64(s, 5, r->n_scored);
    sqlite3_bind_double(s, 6, r->wall_s);
    sqlite3_bind_double(s, 7, r->forward_s);
    lab_sq_bind_text(s, 8, r->logits_sha256[0] ? r->logits_sha256 : NULL);   /* NULL: no logits (a benchmark run) */
    if (r->assertions_ok < 0) sqlite3_bind_null(s, 9);   /* nothing was asserted (a benchmark run) */
    else sqlite3_bind_int(s, 9, r->assertions_ok);
    lab_sq_bind_text(s, 10, r->assertion_reason);
    if ((rc = lab_sq_step(st, s, err, errlen, "finish run"))) goto fail;
    sqlite3_finalize(s);
    s = NULL;
    /* FINISHED means complete: checked here, on the rows now in the
     * transaction, so no caller can mark a run FINISHED without them (a
     * reference repeat finished before the reference it compares with was). */
#ifndef VT_MUTATE_NO_FINISH_CHECK
    char what[256];
    if ((rc = lab_store_run_missing(st, run_id, what, sizeof what, err, errlen))) goto fail;
    if (what[0]) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld lacks %s: not marked FINISHED", st->path,
                      (long long)run_id, what);
        goto fail;
    }
#endif
    if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
    return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_sq_rollback(st);
    return rc;
}

int lab_store_abort(lab_store *st, int64_t run_id, const char *status, const char *error, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "UPDATE runs SET status = ?2, error = ?3, finished_at = ?4 WHERE id = ?1 AND status = 'RUNNING'",
                   &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    sqlite3_bind_int64(s, 1, run_id);
    lab_sq_bind_text(s, 2, status);
    lab_sq_bind_text(s, 3, error);
    lab_sq_bind_text(s, 4, now);
    rc = lab_sq_step(st, s, err, errlen, "abort run");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

int lab_store_put_pair_test(lab_store *st, int64_t run_a, int64_t run_b, int64_t ref_run,
                            int64_t n, int64_t b, int64_t c, double p, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "INSERT OR REPLACE INTO pair_tests (run_a, run_b, reference_run_id, n, b, c, p, computed_at)"
                       " VALUES (?1,?2,?3,?4,?5,?6,?7,?8)", &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    sqlite3_bind_int64(s, 1, run_a);
    sqlite3_bind_int64(s, 2, run_b);
    sqlite3_bind_int64(s, 3, ref_run);
    sqlite3_bind_int64(s, 4, n);
    sqlite3_bind_int64(s, 5, b);
    sqlite3_bind_int64(s, 6, c);
    sqlite3_bind_double(s, 7, p);
    lab_sq_bind_text(s, 8, now);
    rc = lab_sq_step(st, s, err, errlen, "store pair test");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

int lab_store_top1(lab_store *st, int64_t run_id, int32_t **ids, int64_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "SELECT t.n_pos, t.k, t.ids, r.score FROM logits_topk t JOIN runs r ON r.id = t.run_id"
                      " WHERE t.run_id = ?1 ORDER BY t.seq", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int64_t cap = 0;
    int32_t *out = NULL;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 0), k = sqlite3_column_int64(s, 1);
        const int32_t *blob = sqlite3_column_blob(s, 2);
        int64_t bytes = sqlite3_column_bytes(s, 2);
        const char *score = (const char *)sqlite3_column_text(s, 3);
        int last = score && !strcmp(score, "last");
        if (k <= 0 || np <= 0 || bytes != np * k * (int64_t)sizeof(int32_t)) {
            sqlite3_finalize(s);
            free(out);
            return lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld: malformed logits_topk row", st->path,
                            (long long)run_id);
        }
        for (int64_t p = last ? np - 1 : 0; p < np; p++) {
            if (*n >= cap) {
                cap = cap ? cap * 2 : 1024;
                int32_t *o = realloc(out, (size_t)cap * sizeof *o);
                if (!o) { sqlite3_finalize(s); free(out); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
                out = o;
            }
            int32_t v;
            memcpy(&v, (const char *)blob + (size_t)(p * k) * sizeof(int32_t), sizeof v);
            out[(*n)++] = v;
        }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) { free(out); *n = 0; return lab_sq_error(st, err, errlen, "read top-1"); }
    *ids = out;
    return LAB_OK;
}

int lab_store_agreement(lab_store *st, int64_t run, int64_t ref, uint8_t **agree, int64_t *n, char *err,
                        size_t errlen) {
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    *agree = NULL;
    *n = 0;
    int rc = lab_store_top1(st, run, &a, &na, err, errlen);
    if (!rc) rc = lab_store_top1(st, ref, &b, &nb, err, errlen);
    if (!rc && na != nb)
        rc = lab_errf(err, errlen, LAB_EINPUT, "run %lld: %lld positions, its reference run %lld has %lld",
                      (long long)run, (long long)na, (long long)ref, (long long)nb);
    if (!rc && !(*agree = malloc((size_t)(na ? na : 1)))) rc = lab_oom(err, errlen);
    if (!rc) {
        for (int64_t i = 0; i < na; i++) (*agree)[i] = a[i] == b[i];
        *n = na;
    }
    free(a);
    free(b);
    return rc;
}

int lab_store_exec(lab_store *st, const char *sql, int nparams, const char *const *params, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, sql, &s, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < nparams; i++) lab_sq_bind_text(s, i + 1, params[i]);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {}
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LAB_OK : lab_sq_error(st, err, errlen, "exec");
}

const char *lab_col_text(sqlite3_stmt *s, int i) {
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

int lab_store_meta(lab_store *st, const char *key, char *out, size_t outlen, char *err, size_t errlen) {
    sqlite3_stmt *s;
    out[0] = '\0';
    int rc = lab_sq_prep(st, "SELECT value FROM meta WHERE key = ?1", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    if (step != SQLITE_ROW && step != SQLITE_DONE) return lab_sq_error(st, err, errlen, "meta");
    return step == SQLITE_ROW ? LAB_OK : lab_errf(err, errlen, LAB_EINTERNAL, "%s: meta has no %s", st->path, key);
}
