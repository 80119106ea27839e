/*
 * store_merge.h — the rows of sequence shards and of their merge (a
 * store*.c file: the SQL lives in store_merge.c; see store_internal.h and
 * docs/slurm.md).
 *
 * Written with every run: run_sequences (per-sequence sums and logits
 * hashes), and for a shard run its run_shards row (both by lab_store_finish,
 * store_finish.c, inside its transaction). Read by `vtlab merge` from
 * each shard database (lab_store_shard_runs, lab_store_shard_load), which
 * writes merged runs through lab_store_lease/lab_store_finish inside one
 * batch, plus their merged_shards provenance (lab_store_put_merged_shard).
 */
#ifndef LAB_STORE_MERGE_H
#define LAB_STORE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* A FINISHED shard run of a shard database: identity, shard, provenance. */
typedef struct lab_shard_run {
    int64_t  run_id, repeat;
    char    *experiment, *arm, *knob_hash, *model_sha256, *dataset_sha256, *code_version, *shard;
    int      is_reference;
    lab_shard_info info;                 /* its strings owned (decision_metric, task, node, slurm ids) */
    /* provenance of the runs row, for the merged run */
    char    *experiment_sha256, *git_commit, *build_flags, *compiler, *backend, *device, *host, *score,
            *expected_assertions, *layer_kinds, *engine_hello, *started_at, *finished_at, *logits_sha256;
    int      git_dirty;
    int64_t  top_k, n_sequences, n_tokens, n_scored;
    double   wall_s, forward_s;
    int      ref_recomputed, ref_hash_match;   /* its comparison's (-1: none / NULL) */
} lab_shard_run;

/* Every FINISHED run of st that has a run_shards row (*out, *n; free with
 * lab_shard_runs_free). A database of an older schema (no run_shards) has none. */
int  lab_store_shard_runs(lab_store *st, lab_shard_run **out, int64_t *n, char *err, size_t errlen);
void lab_shard_runs_free(lab_shard_run *v, int64_t n);

/* ------------------------------------------------------------ checks of a shard before it is read */

/* The tables and columns ("table.column", sorted) of each schema version,
 * as the store's own migrations create them; filled on first use of a
 * version. Zero-initialise; free with lab_schema_cache_free. */
typedef struct lab_schema_cache {
    char  **cols[LAB_SCHEMA_VERSION + 1];
    int64_t n[LAB_SCHEMA_VERSION + 1];
} lab_schema_cache;
void lab_schema_cache_free(lab_schema_cache *c);

/* LAB_EINPUT when st lacks a table or a column that its claimed schema
 * version (PRAGMA user_version, lab_store_version) has: a file edited by
 * hand (`alter table runs drop column ...`) or damaged would otherwise fail
 * half-way with SQLite's "no such column". The message names st's path, its
 * version and every missing table and column. Extra tables and columns are
 * allowed. The expected schema is that of a fresh database migrated to the
 * same version (in a temporary directory under $TMPDIR, removed at once):
 * the one schema definition, store_schema.c's, never a copy of it. */
int lab_store_check_schema(lab_store *st, lab_schema_cache *cache, char *err, size_t errlen);

/* One text of a shard run's rows that a merge copies: table, row (rowid or
 * sequence / probe index), field and value (NULL for SQL NULL). */
typedef struct lab_shard_text {
    const char *table, *field, *value;
    int64_t     row;
} lab_shard_text;

/* Calls fn(ctx, t) for every text that a merge of run r copies from the
 * rows under it (run_knobs names and values, probes sites and dtypes,
 * expectations, run_sequences logits hashes, its experiment_specs row's id
 * and file), before any of it is loaded; stops at fn's first nonzero
 * return, which it returns. Merge checks them all before it writes. */
int lab_store_shard_texts(lab_store *st, const lab_shard_run *r, int (*fn)(void *ctx, const lab_shard_text *t),
                          void *ctx, char *err, size_t errlen);

/* The rows of one shard run needed to rebuild the whole run. */
typedef struct lab_shard_data {
    int64_t       n_seq;
    lab_seq_stat *seq;            /* [n_seq], seq[i].div into div_buf */
    double       *div_buf;
    int64_t       n_scored;
    double       *kl, *dp, *dnll; /* [n_scored], concatenated in sequence order (compared runs) */
    int64_t      *n_pos;          /* [n_seq] */
    int64_t       n_tok, top_k, vocab;
    int32_t      *topk_ids;       /* [n_tok, top_k] */
    float        *topk_lp;
    uint16_t     *full;           /* [n_tok, vocab] or NULL */
    vt_probe     *probes;
    int64_t       n_probes;
    lab_expect_result *ex;
    int64_t       n_ex;
    char        **kn, **kv;
    int          *knum;
    int64_t       n_kn;
    char         *spec_sha, *spec_id, *spec_file, *spec_json;
} lab_shard_data;

int  lab_store_shard_load(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen);
void lab_shard_data_free(lab_shard_data *d);

/* The stored experiment file of sha256 (*json, caller frees; LAB_EINPUT when absent). */
int lab_store_spec_json(lab_store *st, const char *sha256, char **json, char *err, size_t errlen);

/* The provenance row of shard r (read from source_db) in merged run run_id. */
int lab_store_put_merged_shard(lab_store *st, int64_t run_id, const lab_shard_run *r, const char *source_db,
                               char *err, size_t errlen);

/* Status of shard `shard` ("I/N") of experiment/arm (repeat 0) in st, for
 * `vtlab status` and `submit --resume`: *state 'F' a FINISHED run with code
 * version code_version, 'X' only FAILED/KILLED ones (or another code
 * version's), 'R' a RUNNING one, 0 none. */
int lab_store_shard_state(lab_store *st, const char *experiment, const char *arm, const char *shard,
                          const char *code_version, int *state, char *err, size_t errlen);

/* *composed = 1 when run_id's logits hash is the composed one (schema v8:
 * sha256 of its per-sequence hashes; the run has run_sequences rows), 0
 * when it is the older single stream over every logit row. Two runs whose
 * definitions differ cannot be compared by hash (nightly.c). */
int lab_store_logits_composed(lab_store *st, int64_t run_id, int *composed, char *err, size_t errlen);
/* *same = 1 when runs a and b have the same logits_topk rows (ids and log-probs, bit for bit). */
int lab_store_topk_same(lab_store *st, int64_t a, int64_t b, int *same, char *err, size_t errlen);

#endif
