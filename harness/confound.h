/*
 * confound.h — the audit's rules R1..R6 (see audit.h for what each means).
 *
 * One function per rule. Each is applied to one subject (a claim of the
 * ledger, a finished run, or a run together with one reference run of its
 * comparisons), appends what it finds to the findings, and returns LAB_OK or
 * the status of a read that failed, its message prefixed with the rule
 * ("R4: PATH: reading ...: ..."). A rule that does not apply to a kind of
 * subject returns LAB_OK and finds nothing. A rule never turns a failed read
 * into "no findings": an audit that cannot read must not report a clean
 * result.
 *
 * The rules read the ledger, the database through store_audit.h, and the
 * placement of a measurement in a defect's code range through the placer the
 * caller provides (audit.c asks git). The order in which the caller applies
 * them is the order of the findings, which is the order new flags are stored.
 */
#ifndef LAB_CONFOUND_H
#define LAB_CONFOUND_H

#include <stddef.h>
#include <stdint.h>

#include "ledger.h"
#include "store_audit.h"

/* Where a measurement lies against a defect's code range [introduced, fixed). */
typedef enum { LAB_PLACE_OUTSIDE = 0, LAB_PLACE_INSIDE = 1, LAB_PLACE_UNKNOWN = 2 } lab_placement;

/* Places the measurement (commit, may be NULL; date, may be NULL) in
 * [in, fx); how receives the basis of the answer, in words. */
typedef lab_placement (*lab_place_fn)(void *env, const char *commit, const char *date, const lab_code_point *in,
                                      const lab_code_point *fx, char *how, size_t n);

/* What the rules found, in order. The flags' reason and evidence are owned
 * by the list (lab_findings_free). oom: an allocation failed and a finding
 * may be missing; the caller must not store the list then. */
typedef struct lab_findings {
    lab_audit_flag *v;
    int64_t         n, cap;
    int             oom;
    /* R1 findings the runtime evidence overruled: a subject whose measurement
     * the code range alone would have flagged, cleared by its own probes at
     * the defect's site (docs/specs.md, "R1: the order of evidence"). Not
     * flags: printed by the audit as the basis of a clean result. */
    lab_audit_flag *cleared;
    int64_t         n_cleared, cap_cleared;
} lab_findings;

void lab_findings_free(lab_findings *f);

/* What the rules of one audit work with. */
typedef struct lab_confound {
    lab_store                    *st;
    const lab_ledger             *l;
    const lab_audit_finished_run *runs;     /* the finished runs, ascending id */
    int64_t                       n_runs;
    lab_place_fn                  place;
    void                         *place_env;
    lab_findings                 *f;
    char                         *err;
    size_t                        errlen;
} lab_confound;

/* What a rule is applied to: exactly one of claim and run; ref only with run. */
typedef struct lab_subject {
    const lab_claim              *claim;
    const lab_audit_finished_run *run;
    const lab_audit_reference    *ref;
} lab_subject;

/* R1 measured through a registered defect. Runtime evidence first: a run
 * whose probe records at the defect's site show it violated was measured
 * through it, whatever the code range says; one whose records there all
 * passed, with the defect's replay knob off, was not (cleared, with that
 * basis). Only where a run has no records at the site does the code range
 * decide: the side's knobs include the defect's trigger and the measurement
 * is (or may be) in its range. A claim: each side (arm, reference), its
 * evidence the run it names for that side (runs.arm, runs.reference), if
 * any. A run: its own stored knobs, commit and probes. A run with a
 * reference: the same for the reference run (the reference side). */
int lab_rule_r1(lab_confound *cx, const lab_subject *s);
/* R2 a failed runtime assertion (a run). */
int lab_rule_r2(lab_confound *cx, const lab_subject *s);
/* R3 a knob that did not take effect. A run: an expectation the probes
 * contradict. A run with a reference: numeric knobs that differ from it while
 * the logits are bit-identical. */
int lab_rule_r3(lab_confound *cx, const lab_subject *s);
/* R4 a mismatched reference. A claim that names runs: both exist, are
 * FINISHED, and agree in model, dataset, code version and engine. A run with
 * a reference: same model, dataset and code version, and the reference
 * reproduced its own logits when recomputed. */
int lab_rule_r4(lab_confound *cx, const lab_subject *s);
/* R5 not reproducible (a run): a run of the same identity on a deterministic
 * backend (cpu) with different logits. */
int lab_rule_r5(lab_confound *cx, const lab_subject *s);
/* R6 underpowered: a claim's verdict, or a run's stored verdicts, that the
 * Wilson interval does not support. */
int lab_rule_r6(lab_confound *cx, const lab_subject *s);

/* The references of run r's comparisons (the subjects R4, R3 and R1 take
 * with r), in *refs[*n] (lab_audit_free); a failed read is prefixed "R4: ". */
int lab_confound_references(lab_confound *cx, const lab_audit_finished_run *r, lab_audit_reference **refs,
                            int64_t *n);

/* Claims that name their runs (runs.arm, runs.reference) inherit the R2-R5
 * findings of those runs found so far, keyed "runID:KEY". */
void lab_confound_inherit(lab_confound *cx);

#endif
