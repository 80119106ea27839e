/*
 * slurm.h — `vtlab submit` and `vtlab status`: a sweep as Slurm job arrays
 * of sequence shards, one shard database per task (docs/slurm.md).
 *
 * Layout of a results directory DIR (--results, default shards/):
 *   DIR/EXP/tasks.tsv    one line per task: index, experiment file, arm,
 *                        shard I/N, shard database, kind (ref|arm);
 *                        reference tasks first (indices 0..R-1)
 *   DIR/EXP/task.sbatch  the batch script: task i runs line i+1
 *   DIR/EXP/ARM.IofN.db  the shard databases (written by the tasks only)
 *   DIR/merge.sbatch     the merge job (with --merge-into)
 *   DIR/jobs.tsv         every submitted job: id, experiment, kind, indices
 *   DIR/logs/            the tasks' output
 * Each experiment is two job arrays: its reference shards, then the other
 * arms' shards with --dependency=afterok on the first (and
 * --kill-on-invalid-dep=yes, so that a failed reference shard cancels them
 * rather than leaving them pending for ever).
 */
#ifndef LAB_SLURM_H
#define LAB_SLURM_H

#include <stddef.h>
#include <stdint.h>

typedef struct lab_submit_opts {
    const char *const *files;      /* experiment files */
    int         n_files;
    const char *results;           /* results directory */
    int64_t     shards_per_arm;
    const char *partition, *time, *gpus_per_task, *account;   /* override the experiment's "slurm" */
    const char *extra;             /* more sbatch options, blank-separated (--slurm) */
    const char *merge_into;        /* NULL: no merge job */
    const char *vtlab;             /* the binary the tasks run (default: this one) */
    int         dry_run, resume, use_slurm;
} lab_submit_opts;

/* Parses "I/N" (0 <= I < N <= 1e6): 0, or -1 when malformed. */
int lab_parse_shard(const char *s, int64_t *index, int64_t *count);

/* Writes the tasks, scripts and submits them (sbatch); --dry-run prints the
 * scripts and the sbatch commands and writes nothing; --resume submits only
 * the tasks whose shard database has no FINISHED shard run of this build
 * and that squeue does not list as pending or running. */
int lab_submit(const lab_submit_opts *o, char *err, size_t errlen);

/* Prints each task's state (done, running, pending, failed, missing) and
 * what to resubmit. *complete = 1 when every task is done. */
int lab_status(const lab_submit_opts *o, int *complete, char *err, size_t errlen);

#endif
