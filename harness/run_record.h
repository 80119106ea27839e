/*
 * run_record.h — what a run writes to results.db, built from a finished
 * forward pass: probe invariants, expectations, resolved knobs, metrics,
 * the comparison with the reference and the verdict.
 */
#ifndef LAB_RUN_RECORD_H
#define LAB_RUN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "experiment.h"
#include "run_forward.h"
#include "store.h"
#include "util.h"

/* The most metrics one run records (record_metrics, record_distribution). */
#define LAB_RUN_MAX_METRICS 32

/* Everything of one run that goes to the database; zero-initialise, free
 * with lab_run_record_free. */
typedef struct lab_run_record {
    int               *probe_ok;     /* [n_probes] invariant held */
    lab_expect_result *ex;           /* [n_ex]: the arm's expectations, then one per knob the
                                        engine did not apply (rule R3) */
    int64_t            n_ex;
    const char       **kn, **kv;     /* [n_kn] names and values (borrowed from the knob set or hello) */
    int               *knum;         /* [n_kn] */
    int64_t            n_kn;
    lab_comparison     cmp;          /* filled when compared */
    lab_verdict_row    vr;           /* filled when the experiment has a decision */
    lab_buf            reason;       /* why the assertions failed */
    const char        *mn[LAB_RUN_MAX_METRICS];   /* metric names (static) */
    double             mv[LAB_RUN_MAX_METRICS];
    int64_t            nm;
    int                ok;           /* assertions held */
} lab_run_record;

void lab_run_record_free(lab_run_record *r);

/* Builds r for arm `arm` of e from pass acc, run for req (builtin: under
 * req->ks) through an engine that said hello (a command: its knob registry
 * is what is stored, and a knob the arm sets that the engine did not read,
 * or reports with another value, is a failed expectation). With ref
 * (non-NULL: the run was compared) also the comparison and verdict;
 * n_layers sizes the per-layer divergence. LAB_ENOMEM on failure. */
int lab_run_record_build(const lab_experiment *e, int64_t arm, const lab_engine_req *req,
                         const lab_engine_hello *hello, const lab_pass_acc *acc, const lab_ref_cache *ref,
                         int64_t n_layers, lab_run_record *r, char *err, size_t errlen);

/* Fills res (every pointer borrowed from e, acc and r) for lab_store_finish.
 * with_verdict: the run gets r's verdict row. */
void lab_run_result_fill(lab_run_result *res, const lab_experiment *e, int64_t arm, int64_t vocab,
                         const lab_pass_acc *acc, lab_run_record *r, int compared, int with_verdict);

/* What lab_run_record_rebuild needs in place of the experiment, the arm and
 * the engine: the run of a merge of sequence shards (merge.c) is rebuilt
 * from the shards' per-sequence rows by the same functions as any run. */
typedef struct lab_rebuild_spec {
    unsigned       metrics;
    double         div_tolerance;
    int            has_decision, decision_ge;
    const char    *decision_metric;
    double         decision_threshold;
    int64_t        n_seq;
    const int64_t *offsets;            /* [n_seq + 1] token offsets of the whole dataset */
    int64_t        n_layers;
    int64_t        n_expect;           /* the arm's expectations (sites and dtypes) */
    char         **expect_sites, **expect_dtypes;
    const lab_expect_result *knob_ex;  /* "knob:" expectations of a command engine, as stored */
    int64_t        n_knob_ex;
    int64_t        n_kn;               /* the resolved knobs, as stored */
    const char   **kn, **kv;
    const int     *knum;
} lab_rebuild_spec;

/* lab_run_record_build for a merged run: assertions from acc's probes and
 * sp's expectations, metrics, and with ref the comparison and verdict. */
int lab_run_record_rebuild(const lab_rebuild_spec *sp, const lab_pass_acc *acc, const lab_ref_cache *ref,
                           lab_run_record *r, char *err, size_t errlen);

#endif
