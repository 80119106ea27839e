/*
 * store.h — results.db: the SQLite store of runs, their provenance, knobs,
 * probes, logits, metrics, comparisons, per-layer divergence and verdicts.
 *
 * The workload: a sweep claims a run (one small write), spends seconds to
 * minutes in the forward pass touching nothing, then writes everything the
 * run produced in one transaction. Readers (runs, show, compare, export, and
 * later audit/report/nightly) read finished runs. Several processes may share
 * one file, so:
 *   - WAL journal (readers never block the writer), busy_timeout of 30 s;
 *   - every write transaction is BEGIN IMMEDIATE, so two writers serialise
 *     at BEGIN instead of failing on a read-to-write upgrade;
 *   - a run is claimed by inserting its RUNNING row first; a partial unique
 *     index allows one RUNNING row per run identity, so two sweeps can never
 *     both run it, and a RUNNING row whose process is dead (same host, pid
 *     gone or reused) is marked KILLED and the run redone;
 *   - a run's result rows and its FINISHED status commit together, so a
 *     killed process leaves only a RUNNING row, never a half-written FINISHED;
 *     and the finishing transaction checks that the run is complete (its
 *     comparison with the reference, per-layer divergence, top-k rows)
 *     before it commits, so FINISHED means complete by construction.
 *
 * Schema: versioned with PRAGMA user_version; migrations[] in
 * store_schema.c take version v to v + 1 and run in one transaction each.
 * The tables and columns are documented in docs/schema.md. Every statement
 * is prepared with bound parameters; no SQL text is ever built from data.
 */
#ifndef LAB_STORE_H
#define LAB_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "model/vt.h"

/* v5: nightly_acks, nightly_remeasure_runs, nightlies.pid_start (store_schema.c has the history). */
/* v8: bisections, bisect_steps (`vtlab bisect`); runs.shard, run_sequences, run_shards, merged_shards. */
/* v9: run_tags, run_notes, runs.rerun_of, the PARTIAL status (`vtlab run --limit`). */
/* v10: nightly_confounds, the CONFOUNDED status of nightlies. */
/* v11: localizations, localize_steps (`vtlab localize`). */
#define LAB_SCHEMA_VERSION 11

typedef struct lab_store lab_store;

/* Opens (creating if needed) the database at path and migrates it to
 * LAB_SCHEMA_VERSION, for writing. A database newer than this build, or a
 * directory at path, is LAB_EINPUT. Readers use lab_store_open_readonly. */
int  lab_store_open(lab_store **out, const char *path, char *err, size_t errlen);
/* Test hook: like lab_store_open but migrates only up to version
 * (0 < version <= LAB_SCHEMA_VERSION). Used to build "older" databases. */
int  lab_store_open_version(lab_store **out, const char *path, int version, char *err, size_t errlen);
void lab_store_close(lab_store *st);
int  lab_store_version(lab_store *st);
const char *lab_store_path(lab_store *st);

/* Opens an existing database for reading only (SQLITE_OPEN_READONLY): what
 * every reader (runs, show, compare, export, report, audit's reads, nightly's
 * reads) should use. It never creates a file, and on a current schema it
 * never writes one.
 *   - path missing, a directory, not a regular file or not readable:
 *     LAB_EINPUT naming the path (nothing created);
 *   - WAL on a read-only directory or mount: SQLite reads a WAL database
 *     through its -shm; when this process cannot create the -shm and no -wal
 *     exists (so no connection has the file open), the file is opened with
 *     immutable=1 instead. With a -wal present (a writer is active, or died)
 *     SQLite reads it through a read-only -shm; immutable is never used then;
 *   - an older schema is migrated first when this process may write the file
 *     and its directory (what every command did before: a database is
 *     upgraded once, by whoever opens it first), else read as it is (version
 *     2 or later; lab_store_has_table tells what it lacks); version 1 or an
 *     empty file without write access, or a newer schema: LAB_EINPUT;
 *   - integrity: lab_store_check runs before it returns, so a corrupt file is
 *     LAB_EINPUT naming it, not a partial answer with exit 0.
 * A disk that is full or a corrupt page met later by a query is reported by
 * lab_store_error in those words. */
int  lab_store_open_readonly(lab_store **out, const char *path, char *err, size_t errlen);

/* Databases up to this size (pages x page size) get PRAGMA quick_check when
 * opened read-only. It reads every page once (memory-mapped). Measured on a
 * 2-core host at load 10, `vtlab runs` median (process start included): the
 * default sweep's 4 MB database 40 ms without the check, 48 ms with it; a
 * 122 MiB one 38 ms without, 205 ms with. Larger files skip it; a corrupt page
 * a query then meets is still an error (SQLITE_CORRUPT through
 * lab_store_error), never a silent partial answer. */
#define LAB_STORE_CHECK_MAX_BYTES ((int64_t)128 << 20)

/* PRAGMA quick_check when the file is at most LAB_STORE_CHECK_MAX_BYTES:
 * LAB_EINPUT "PATH: the database file is corrupt (...)" when it fails. */
int  lab_store_check(lab_store *st, char *err, size_t errlen);

/* The error of the last SQLite call on st as "PATH: WHAT: ...", with a full
 * disk (SQLITE_FULL or ENOSPC: "the disk is full", LAB_EIO) and a corrupt
 * file (SQLITE_CORRUPT / SQLITE_NOTADB: "the database file is corrupt",
 * LAB_EINPUT) said in words. Returns the status. */
int  lab_store_error(lab_store *st, const char *what, char *err, size_t errlen);

/* The identity of a run: a FINISHED run with the same identity is not redone
 * (unless forced). repeat distinguishes the repeats of one identity. */
typedef struct lab_identity {
    const char *experiment, *arm;
    int64_t     repeat;
    const char *knob_hash, *model_sha256, *dataset_sha256, *code_version;
    const char *shard;      /* "I/N" for a sequence shard of the run (docs/slurm.md); NULL or "" for the run */
} lab_identity;

/* Everything recorded about a run when it is claimed. */
typedef struct lab_provenance {
    const char *experiment_sha256;   /* key of experiment_specs */
    const char *git_commit;
    int         git_dirty;
    const char *build_flags, *compiler, *backend, *device, *host;
    int64_t     pid, pid_start;      /* pid_start: /proc start time, guards pid reuse */
    int         is_reference;
    const char *score;               /* "all" | "last" */
    int64_t     top_k;
    const char *expected_assertions; /* "pass" | "fail" */
    const char *layer_kinds;         /* "KKKM/DEEE" (lab_engine_info), NULL when unknown */
    const char *engine_hello;        /* a command engine's hello (JSON), NULL for the builtin */
} lab_provenance;

/* A run's lease: the RUNNING row a process holds (pid, pid start time, host)
 * while it computes the run. (A "claim" is a record of the ledger, never this.) */
enum { LAB_LEASED = 1, LAB_LEASE_DONE, LAB_LEASE_BUSY };

/* Leases the run: in one BEGIN IMMEDIATE transaction, looks for the run's
 * identity; a FINISHED row (and !force) gives LAB_LEASE_DONE with its id; a
 * RUNNING row of a live process gives LAB_LEASE_BUSY with its id; a RUNNING
 * row of a dead process on this host is marked KILLED (*stale_id) and the run
 * leased. LAB_LEASED: a new RUNNING row was inserted, *run_id is its id. */
int lab_store_lease(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                    int *kind, int64_t *run_id, int64_t *stale_id, char *err, size_t errlen);
/* lab_store_lease, and: a FINISHED row that is not complete (see
 * lab_store_run_missing; an older vtlab could leave one) does not make the
 * run LAB_LEASE_DONE: it is marked FAILED, its error saying what it lacks, and the
 * run leased again (or an older complete FINISHED row found). *redone_id
 * (may be NULL) receives the last run so marked, 0 when none. */
int lab_store_lease_ex(lab_store *st, const lab_identity *id, const lab_provenance *pv, int force,
                       int *kind, int64_t *run_id, int64_t *stale_id, int64_t *redone_id, char *err, size_t errlen);

/* What a FINISHED run must have, checked on the rows of run_id as they are
 * (also inside lab_store_finish's transaction): a run with logits has one
 * logits_topk row per sequence; every such run except the reference arm's
 * repeat 0 has a comparison with the FINISHED repeat 0 of its experiment's
 * reference arm, and, when that comparison measured per-layer divergence,
 * its layer_divergence rows (layers 0..max, both sites). Benchmark runs (no
 * logits) need nothing more. what[0] = 0 when complete; otherwise what names
 * the missing rows ("its comparison with the reference run ..."). */
int lab_store_run_missing(lab_store *st, int64_t run_id, char *what, size_t whatlen, char *err, size_t errlen);

/* A batch makes every write between begin and commit one transaction: the
 * claims, finishes and specs of several runs land together or not at all.
 * A write that fails inside the batch rolls all of it back and every later
 * write is refused; commit then reports the failure. So does a claim that
 * finds its run LAB_LEASE_DONE or LAB_LEASE_BUSY (it ends its own transaction). Batches
 * do not nest. */
int  lab_store_batch_begin(lab_store *st, char *err, size_t errlen);
int  lab_store_batch_commit(lab_store *st, char *err, size_t errlen);
void lab_store_batch_rollback(lab_store *st);

/* Latest FINISHED run of an identity: *run_id = 0 when none. logits_sha256
 * (may be NULL) receives its full-logits content hash. */
int lab_store_find_finished(lab_store *st, const lab_identity *id, int64_t *run_id,
                            char logits_sha256[65], char *err, size_t errlen);

/* Marks every RUNNING row of this host whose process is dead as KILLED.
 * Returns the number marked in *n. */
int lab_store_reap(lab_store *st, const char *host, int64_t *n, char *err, size_t errlen);

/* 1 when process pid with start time pid_start is alive on this host. */
int lab_pid_alive(int64_t pid, int64_t pid_start);
/* Start time of a process from /proc/PID/stat (clock ticks since boot), or 0. */
int64_t lab_pid_start(int64_t pid);

/* Stores the experiment file's canonical JSON under its sha256 (idempotent). */
int lab_store_put_spec(lab_store *st, const char *sha256, const char *id, const char *file,
                       const char *json, char *err, size_t errlen);

/* ---------------------------------------------------------------- results */

typedef struct lab_expect_result {
    char    site[32];
    char    expected[8];
    char    seen[64];        /* distinct dtypes the probes showed, ','-joined; "" when none */
    int64_t records;         /* probe records at the site */
    int     ok;
    char    reason[256];     /* "" when ok */
} lab_expect_result;

typedef struct lab_comparison {
    int64_t reference_run_id;
    int     reference_recomputed;   /* 1: reference logits recomputed in this process */
    int     reference_hash_match;   /* -1 not recomputed; 1/0 recomputed hash == stored */
    int64_t n_scored;
    int64_t top1_k, top1_n;
    double  top1_lo, top1_hi;
    double  kl_mean, kl_p99, kl_max, max_abs_dlogit, rms_dp;
    int64_t mcnemar_b, mcnemar_c;
    double  mcnemar_p;
    int64_t div_sequences;          /* 0: per-layer divergence not measured */
    double  div_tolerance;
    int64_t first_div_layer;        /* -1: no layer/site exceeded the tolerance */
    int     first_div_site;
    double  first_div_value;
    int64_t n_div;
    int64_t *div_layer;             /* [n_div] */
    int     *div_site;              /* [n_div] 0 after attention, 1 after FFN */
    double  *div_value;             /* [n_div] relative L2 from the reference */
} lab_comparison;

typedef struct lab_verdict_row {
    char    metric[32];
    double  threshold;
    int     direction_ge;
    int64_t k, n;
    double  value, lo, hi;
    char    verdict[16];
} lab_verdict_row;

/* What one sequence of a run contributes to its results (table
 * run_sequences): the sums, counts and per-position values from which a
 * run's metrics are computed, so that the run of a merge of sequence shards
 * is computed from them exactly as the unsharded run is (docs/slurm.md). */
typedef struct lab_seq_stat {
    int64_t n_pos, n_scored;           /* positions; scored positions */
    char    logits_sha256[65];         /* sha256 of the sequence's logits, f32 LE [n_pos, vocab] */
    double  nll_sum;                   /* sum of -log p(next token) over its positions with one */
    int64_t nll_n;
    double  f16_kl_sum, f16_kl_max, f16_dlogit_max;
    int64_t f16_n;
    int     compared;                  /* 1: the fields below are measured */
    int64_t agree;                     /* scored positions whose top-1 is the reference's */
    double  dp2_sum;                   /* sum of delta-p squared */
    double  maxd;                      /* max |dlogit|; NaN when a NaN was met */
    int64_t sc0;                       /* first scored position (index into the run's kl/dp/dnll) */
    const double *div;                 /* [n_layers * 2 * 2] (num, den) per (layer, site); NULL when not captured */
} lab_seq_stat;

/* A run computed over a sequence shard of its dataset (vtlab run --shard):
 * what the merge needs to check and to recompute the whole run (run_shards). */
typedef struct lab_shard_info {
    int64_t     index, count;          /* shard I of N */
    int64_t     seq_lo, seq_hi;        /* global sequences [lo, hi) */
    int64_t     n_seq_total, n_tokens_total, n_scored_total;
    unsigned    metrics;               /* LAB_M_* of the experiment */
    int64_t     div_sequences;         /* min(divergence.sequences, n_seq_total) */
    double      div_tolerance;
    int         has_decision, decision_ge;
    const char *decision_metric;
    double      decision_threshold;
    int64_t     n_layers, probes_lost;
    const char *task, *node, *slurm_job_id, *slurm_array_job_id, *slurm_array_task_id;
} lab_shard_info;

typedef struct lab_run_result {
    int64_t  n_sequences, n_tokens, n_scored;
    double   wall_s, forward_s;
    char     logits_sha256[65];      /* sha256 of every logit row, f32 LE, in dataset order */
    int      assertions_ok;          /* 1 / 0; -1: nothing asserted (benchmark runs), stored as NULL */
    char    *assertion_reason;       /* NULL when ok; owned by the caller */
    int64_t  n_knobs;
    const char **knob_names, **knob_values;   /* [n_knobs] */
    const int   *knob_numeric;                /* [n_knobs] */
    int64_t  n_probes;
    const vt_probe *probes;          /* [n_probes] */
    const int      *probe_ok;        /* [n_probes] invariant held */
    int64_t  n_expect;
    const lab_expect_result *expect; /* [n_expect] */
    int64_t  n_metrics;
    const char  **metric_names;      /* [n_metrics] */
    const double *metric_values;     /* [n_metrics] */
    /* top-k per position: sequence s has positions offsets[s]..offsets[s+1] */
    int64_t        top_k;
    const int64_t *offsets;          /* [n_sequences + 1] */
    const int32_t *topk_ids;         /* [n_tokens, top_k] */
    const float   *topk_logprobs;    /* [n_tokens, top_k] */
    int64_t        vocab;
    const uint16_t *full_f16;        /* [n_tokens, vocab] f16 or NULL */
    const lab_comparison  *cmp;      /* NULL for the reference arm */
    const lab_verdict_row *verdict;  /* NULL when the experiment has no decision */
    int64_t  seq_base;               /* global index of sequence 0 (a shard's first sequence; else 0) */
    const lab_seq_stat *seq;         /* [n_sequences] or NULL: rows of run_sequences */
    const double *seq_kl, *seq_dp, *seq_dnll;   /* [n_scored] per scored position when compared */
    int64_t  n_layers;               /* sizes lab_seq_stat.div */
    const lab_shard_info *shard;     /* NULL: not a shard */
    int      partial;                /* 1: the first sequences only (`vtlab run --limit N`): the run is
                                        stored as PARTIAL, never FINISHED, so it never counts as the
                                        arm's finished run */
} lab_run_result;

/* Writes every row of the result and sets status FINISHED (PARTIAL for a
 * partial result), in one transaction. On failure nothing of it is visible. A run the rows would
 * leave incomplete (lab_store_run_missing: e.g. no cmp for a run that must
 * be compared with its reference) is refused: LAB_EINTERNAL, still RUNNING. */
int lab_store_finish(lab_store *st, int64_t run_id, const lab_run_result *r, char *err, size_t errlen);

/* Sets a RUNNING run to FAILED or KILLED with an error text. */
int lab_store_abort(lab_store *st, int64_t run_id, const char *status, const char *error,
                    char *err, size_t errlen);

/* McNemar between two arms' runs on the same positions (see cmd_run.c). */
int lab_store_put_pair_test(lab_store *st, int64_t run_a, int64_t run_b, int64_t ref_run,
                            int64_t n, int64_t b, int64_t c, double p, char *err, size_t errlen);

/* Reads a run's per-position top-1 ids ([n] int32, caller frees). */
int lab_store_top1(lab_store *st, int64_t run_id, int32_t **ids, int64_t *n, char *err, size_t errlen);

/* Per scored position, whether run's top-1 equals its reference run's:
 * agree[n] (the caller's, free). Bisect and localize judge their steps by it. */
int lab_store_agreement(lab_store *st, int64_t run, int64_t ref, uint8_t **agree, int64_t *n, char *err,
                        size_t errlen);

/* *have = 1 when the database has table `name` (a read-only database of an
 * older schema may lack the audit and nightly tables). */
int lab_store_has_table(lab_store *st, const char *name, int *have, char *err, size_t errlen);


/* Runs one prepared statement to completion with text parameters bound in
 * order (NULL binds NULL). For small maintenance writes and tests. */
int lab_store_exec(lab_store *st, const char *sql, int nparams, const char *const *params,
                   char *err, size_t errlen);

/* The value of key in the database's meta table (v6): "feed_id", the id of
 * its Atom feed. LAB_EINTERNAL when the key is missing. */
int lab_store_meta(lab_store *st, const char *key, char *out, size_t outlen, char *err, size_t errlen);

#endif
