/*
 * merge.h — `vtlab merge SHARD.db... --into results.db`: the sequence
 * shards of runs (vtlab run --shard I/N, one database per task) made into
 * whole runs (docs/slurm.md).
 *
 * Each merged run has the identity of the unsharded run (experiment, arm,
 * knob hash, model, dataset, code version, repeat) and is rebuilt from the
 * shards' per-sequence rows (run_sequences) by the functions that build
 * every run (run_record.c), summing in the same order: its metrics,
 * intervals, verdict, per-layer divergence and logits hash are those of the
 * unsharded run. Guarantees:
 *   - identity: the shards of one arm must agree on knob hash, model,
 *     dataset and code version, and on the shard count; else LAB_EINPUT,
 *     nothing written. Two copies of one shard (the reference shard is
 *     computed by every task of its sequence range) must have the same
 *     logits hash;
 *   - completeness: an arm whose shards do not cover every sequence is
 *     refused (LAB_EINPUT) unless partial, which leaves it (and arms whose
 *     reference is incomplete) out;
 *   - idempotence: a run already FINISHED in `into` is not merged again;
 *   - atomicity: every row of every merged run, their provenance
 *     (merged_shards) and the pair tests are one transaction.
 */
#ifndef LAB_MERGE_H
#define LAB_MERGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct lab_merge_summary {
    int64_t merged, already, left_out, shards;   /* runs merged, already in `into`, incomplete left out; shards read */
    double  wall_s;
} lab_merge_summary;

int lab_merge(const char *const *dbs, int n_db, const char *into, int partial, lab_merge_summary *sum, char *err,
              size_t errlen);

#endif
