/*
 * rerun.h — `vtlab rerun RUN...` and `vtlab rerun --experiment ID`: run a
 * recorded run again from what results.db holds, and say whether it came
 * out the same.
 *
 * The experiment is the spec stored with the run (experiment_specs): no
 * experiment file is needed, and an edited one does not matter. The model is
 * found by the run's model hash in the synthetic-model cache, or made again
 * from the spec (a synthetic model is rebuilt; a checkpoint dir is read) and
 * must then have that hash — else it is bad input naming the hash and the
 * path, unless --force (the comparison then says the model changed). The new
 * run is an ordinary run of the same arm and repeat (the reference arm is
 * reused when FINISHED with the same identity, else run first), recorded with
 * rerun_of = RUN; a PARTIAL run is rerun over the same first sequences.
 *
 * The comparison: "identical (logits sha256 ...)" when the new run's logits
 * hash is the original's; else the two hashes, which parts of the identity
 * changed (code, engine, model, knobs, dataset), top-1 agreement with the
 * reference before and after, and McNemar's exact test on the positions
 * where one agrees and the other does not.
 */
#ifndef LAB_RERUN_H
#define LAB_RERUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct lab_rerun_opts {
    const char   *db_path;
    const int64_t *runs;         /* [n_runs] run ids; or */
    int64_t       n_runs;
    const char   *experiment;    /* every arm's latest run of this experiment */
    const char   *engine;        /* NULL: as recorded; "builtin", a JSON argv array, or a command line
                                    (split at blanks): every arm's engine for the rerun */
    int           force;         /* rerun on the model the spec resolves to even when its hash is not the run's */
} lab_rerun_opts;

/* Reruns and prints the comparison of each to out. *failed counts reruns
 * that did not finish. LAB_EINPUT (nothing run) for a run that does not
 * exist, is RUNNING, a shard, has no stored spec, runs of several
 * experiments or specs in one call, or a model that is not found. */
int lab_rerun(const lab_rerun_opts *o, FILE *out, int64_t *failed, char *err, size_t errlen);

#endif
