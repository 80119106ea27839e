/*
 * ledger.h — the ledger in specs/: recorded claims and known defects.
 *
 * A claim is a result someone recorded (hypothesis, verdict, evidence k/n,
 * the arm's knobs, the reference, the code it was measured on, the experiment
 * that reproduces it, and its history). A defect is a known bug: the probe
 * site where it acts, the knob values that trigger it, the code range it
 * lived in, the replay fault that reproduces it and the test that guards it.
 * The formats are documented in docs/specs.md; parsing is strict (unknown
 * fields, wrong types, unknown knobs, sites or faults are errors naming the
 * file and the field) because the audit's rules read these records, and a
 * typo in a trigger would silently exempt every affected result.
 *
 * A code point names a version of some codebase: a commit (resolved with git
 * when it is a commit of this repository) and/or a date. The audit places a
 * measurement inside a defect's range by commit ancestry when it can and by
 * date otherwise (code.c).
 */
#ifndef LAB_LEDGER_H
#define LAB_LEDGER_H

#include <stddef.h>
#include <stdint.h>

typedef struct lab_code_point {
    char *commit;            /* may be NULL */
    char *date;              /* "YYYY-MM-DD" or ISO date-time; may be NULL */
} lab_code_point;

typedef struct lab_knobs_kv {
    int64_t n;
    char  **names, **values; /* canonical values (checked against the registry) */
} lab_knobs_kv;

typedef struct lab_claim {
    char         *file;                  /* path it was read from */
    char         *id, *hypothesis, *verdict;
    char         *metric, *direction;    /* evidence: "top1_agreement", ">=" | "<=" */
    int64_t       k, n;
    double        threshold;
    char         *arm_name;
    lab_knobs_kv  arm_knobs;
    char         *ref_name;
    lab_knobs_kv  ref_knobs;
    char         *codebase;              /* where it was measured: "vtlab" or another tree */
    lab_code_point code;                 /* the code version it was measured on */
    char         *measured_at;           /* date */
    char         *experiment;            /* the experiment file that reproduces it, as written */
    char         *experiment_path;       /* where it was found (lab_ledger_load): relative to the
                                          * ledger directory's parent (specs/../experiments/...), or
                                          * absolute as written (paths.h) */
    char         *supersedes, *superseded_by;   /* claim ids or NULL */
    int64_t       run_arm, run_ref;      /* results.db run ids, 0 when not recorded there */
    char         *notes;                 /* may be NULL */
} lab_claim;

typedef struct lab_defect {
    char          *file;
    char          *id, *title, *site, *effect;
    lab_knobs_kv   trigger;
    char          *codebase;
    lab_code_point introduced, fixed;    /* fixed.commit and fixed.date NULL: still open */
    char          *replay_fault;         /* a fault name: a VT_FAULT value, or one an engine declares */
    char          *replay_knob;          /* the knob that selects it: "VT_FAULT" (default) or the engine's */
    char          *guard_test;
    char          *source;               /* may be NULL */
} lab_defect;

typedef struct lab_ledger {
    char       *dir;
    int64_t     n_claims, n_defects;
    lab_claim  *claims;
    lab_defect *defects;
} lab_ledger;

/* Reads every .json file of DIR/claims and DIR/defects (either directory may be
 * missing), validates each record and the cross-references (unique ids,
 * supersedes / superseded_by pointing at existing claims and agreeing with
 * each other). LAB_EINPUT with "FILE: FIELD: ..." on the first problem. */
int  lab_ledger_load(const char *dir, lab_ledger *out, char *err, size_t errlen);
void lab_ledger_free(lab_ledger *l);

/* One claim or defect record from len bytes of text (text[len] must be 0),
 * as lab_ledger_load checks each file (no cross-references); file names it in
 * messages and must be ".../ID.json". *out is filled even on error: free it
 * with lab_claim_clear / lab_defect_clear. Fuzz targets. */
int  lab_claim_parse(const char *file, const char *text, size_t len, lab_claim *out, char *err, size_t errlen);
int  lab_defect_parse(const char *file, const char *text, size_t len, lab_defect *out, char *err, size_t errlen);
void lab_claim_clear(lab_claim *c);
void lab_defect_clear(lab_defect *d);

const lab_claim  *lab_ledger_claim(const lab_ledger *l, const char *id);
const lab_defect *lab_ledger_defect(const lab_ledger *l, const char *id);

/* Value of knob `name` in kv, or NULL when kv does not set it. */
const char *lab_knobs_get(const lab_knobs_kv *kv, const char *name);

/* 1 when every trigger knob has the same value in `knobs` (a knob the arm does
 * not set has its registry default). */
int lab_knobs_trigger(const lab_knobs_kv *trigger, const lab_knobs_kv *knobs);

/* 1 when s is a commit id the ledger accepts: 7 to 40 hex digits; with
 * allow_dirty also a dirty build's code version, COMMIT+dirty.HASH (a
 * claim's code.commit, as vtlab records its own build). Commits reach git's
 * command line in the audit: nothing else passes. */
int lab_commit_id_ok(const char *s, int allow_dirty);

/* The code a run measured, as a claim records it (`vtlab claim`, and the
 * claim `vtlab reopen` writes): a run through a command engine (engine is its
 * name, "" for vtlab's own model) measured that engine's code —
 * engine_codebase, at the commit its hello gave — and any other run measured
 * vtlab ("vtlab", at vtlab_commit). *commit is NULL when the commit is
 * unknown ("" or NULL). */
void lab_claim_code_of_run(const char *engine, const char *engine_commit, const char *engine_codebase,
                           const char *vtlab_commit, const char **codebase, const char **commit);

/* Writes a claim as JSON to path (atomically, pretty, keys in the documented
 * order). Used by `vtlab reopen`. */
int lab_claim_write(const lab_claim *c, const char *path, char *err, size_t errlen);

#endif
