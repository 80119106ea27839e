/*
 * provenance.h — what a run is (its identity: the key under which a
 * FINISHED run is found and skipped) and where it came from (provenance:
 * commit, build, host, device), and each arm's resolved knob set, an input
 * of both that takes work. The other, the model's content hash, is
 * model_cache.h's (lab_model_sha256), beside the cache it is kept in.
 */
#ifndef LAB_PROVENANCE_H
#define LAB_PROVENANCE_H

#include <stddef.h>
#include <stdint.h>

#include "experiment.h"
#include "model/vt.h"
#include "store.h"

/* Resolves the knob set of arm i: the process environment's VT_* variables
 * (envp, may be NULL), then the arm's knobs, then VT_PROBE (the experiment's
 * probe mode) unless the arm sets it. Errors name the file and field
 * (LAB_EINPUT for a bad name or value). Caller frees *out (vt_knobset_free). */
int lab_resolve_knobs(const lab_experiment *e, int64_t i, char *const *envp, vt_knobset **out,
                      char *err, size_t errlen);

/* The identity and provenance shared by every run of one experiment. The
 * strings are owned here; lab_identity / lab_provenance filled from it
 * point into it and live as long as it does. */
typedef struct lab_exp_ident {
    char      (*knob_hash)[65];     /* [n_arms] vt_knobset_hash of each arm (a command engine's arm:
                                       lab_engine_knob_hash of its hello, set by the runner) */
    char      (*arm_model)[65];     /* [n_arms] the model each arm's engine reports (default model_sha) */
    char        model_sha[65], dataset_sha[65], spec_sha[65];
    const char *code_version;       /* vt_build_info() (static), or code_buf under VTLAB_TREE_REVISION */
    char        code_buf[640];
    char        host[256], device[128], commit[64];
    char        shard[48];          /* "I/N" under vtlab run --shard; "" for whole runs */
} lab_exp_ident;

/* Fills x for experiment e whose arms resolved to ks[0..n_arms): knob
 * hashes, the dataset's canonical hash, the spec's hash, build, host, and
 * the given model hash and device (both from the engine's hello).
 * LAB_ENOMEM on failure; lab_exp_ident_free in every case. */
int  lab_exp_ident_init(lab_exp_ident *x, const lab_experiment *e, vt_knobset *const *ks, const char *model_sha256,
                        const char *device, char *err, size_t errlen);
void lab_exp_ident_free(lab_exp_ident *x);

/* The identity of run (arm, repeat). */
void lab_exp_identity(const lab_exp_ident *x, const lab_experiment *e, int64_t arm, int64_t rep, lab_identity *id);

/* The provenance fields common to every run of e (this process, build,
 * host, device, scoring). The per-run ones (is_reference, backend,
 * expected_assertions) are the caller's. */
void lab_exp_provenance(const lab_exp_ident *x, const lab_experiment *e, lab_provenance *pv);

#endif
