/*
 * store_report.h — what `vtlab report` reads from results.db: the report's
 * view model and the typed readers that fill it.
 *
 * The page (report.c) loads the model through these readers, then writes its
 * sections from it; the charts (report_charts.c) draw from it. Neither holds
 * SQL. Every reader either fills its output and returns LAB_OK, or returns a
 * status with a message "PATH: WHAT: ..." naming the database and what was
 * being read (lab_sq_error: a full disk and a corrupt file said in words). A
 * read that failed is never answered as "no rows": a page that leaves out a
 * section because a query failed would lie. A table an older schema lacks
 * (the audit's, the nightly's) is the one legitimate reason for a section to
 * be absent (the view says whether each table exists).
 *
 * Text is copied whole (heap strings, or fixed arrays where the page has
 * always cut them: arm names, statuses); a NULL text column reads as "".
 * Everything a reader allocates is released with the view's free function.
 */
#ifndef LAB_STORE_REPORT_H
#define LAB_STORE_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "engine_name.h"
#include "model/vt.h"
#include "store.h"

/* ------------------------------------------------------------ one experiment */

/* One site of a run's probe records, summed over its layers. */
typedef struct lab_rp_probe_site {
    char   *site, *dtypes;      /* dtypes: "src>dst" or "dst", distinct, comma-joined */
    int64_t n_layers, layer_min, layer_max;   /* layer_min < 0: a model-wide site */
    int64_t bytes_min, bytes_max, src_row_bytes, dst_row_bytes;
    int64_t violations, rows_unwritten, rows_unwritten_max;   /* max < 0: not audited */
    char   *first_violation;    /* detail of the first failed record; "" when none */
} lab_rp_probe_site;

/* One of the arm's declared dtypes, as checked. */
typedef struct lab_rp_expectation {
    char *site, *expected, *seen, *reason;
    int   ok;
} lab_rp_expectation;

/* A point of the per-layer divergence from the reference. */
typedef struct lab_rp_div_point {
    int64_t layer;
    int     site;               /* 0: after attention, 1: after FFN */
    double  rel_l2;             /* NULL reads as 0 */
} lab_rp_div_point;

/* The kinds of a model's layers. */
typedef struct lab_rp_layer_kinds {
    int  n;                                 /* layers; 0 when unknown */
    char attn[VT_MODEL_MAX_LAYERS + 1];     /* 'K' KDA, 'M' MLA */
    char ffn[VT_MODEL_MAX_LAYERS + 1];      /* 'E' MoE, 'D' dense */
    char source[96];                        /* where they were read from, in words */
} lab_rp_layer_kinds;

typedef struct arm_view {
    char    name[128];
    char   *description;       /* from the spec; may be NULL */
    char   *spec_knobs;        /* "VT_A=1, VT_B=x" as the spec writes them */
    char   *spec_expect;       /* "residual.stream=bf16, ..." */
    int     expect_fail;
    int     is_reference;
    int64_t run_id;            /* 0: never run */
    char    status[16];
    char   *error;
    int     assertions_ok;     /* -1 unknown */
    char   *assertion_reason;
    char   *resolved_knobs;    /* non-default resolved knobs of the run */
    char   *tags;              /* the run's tags, "k=v, k2=v2" (`vtlab tag`); NULL: none */
    char   *notes;             /* its notes, "; "-joined (`vtlab note`); NULL: none */
    char    backend[16], started[32], code_version[160];
    lab_engine_name engine;    /* the engine the run went through */
    /* comparison with the reference (has_cmp) */
    int     has_cmp;
    int64_t ref_run, k, n;
    double  lo, hi, kl_mean, kl_p99, kl_max, max_dl, rms_dp, mc_p;
    int64_t first_layer;       /* -1: none above tolerance */
    int     first_site;
    double  first_value, div_tol;
    int     has_verdict;
    char    verdict[16], direction[4], metric[32];
    double  threshold;
    double  tps, ppl;
    double  peak_frac;         /* benchmark runs: achieved FLOP/s over the peak (NAN: none) */
    /* the probe table (lab_rp_read_arm_probes) */
    lab_rp_probe_site  *probes;
    int64_t             n_probes;
    lab_rp_expectation *expects;
    int64_t             n_expects;
    /* chart data (lab_rp_read_arm_charts; compared arms only) */
    lab_rp_div_point   *div;            /* ordered by layer, site */
    int64_t             n_div;
    lab_rp_layer_kinds  ref_kinds;      /* of the reference run; read when n_div > 0 */
    double             *kl;             /* KL(ref || arm) per scored position, dataset order */
    int64_t             n_kl;           /* 0: not comparable position by position */
    int                 kl_exact;       /* from full logits (else the top-k estimate) */
} arm_view;

/* A confound flag on one of the experiment's runs. */
typedef struct lab_rp_flag {
    char *subject, *arm, *rule, *reason, *first_seen;
    int   expected;            /* the arm replays the defect on purpose */
    int   open;                /* not resolved */
    int   on_shown_run;        /* on one of the runs the page shows */
} lab_rp_flag;

/* One FINISHED run of the experiment in a finished nightly. */
typedef struct lab_rp_hist_point {
    int64_t nightly;
    char    when[17];          /* started_at to the minute */
    char    commit[16];        /* first 9 characters of the git commit */
    char    arm[128];
    int     is_ref, rep;
    double  top1, lo, hi, kl, ppl, tps;   /* NAN: not recorded */
} lab_rp_hist_point;

/* A regression a nightly flagged on one of the experiment's arms. */
typedef struct lab_rp_regression {
    int64_t nightly;
    char   *arm, *kind;
} lab_rp_regression;

typedef struct exp_view {
    char     id[128];
    char    *description, *hypothesis, *file;
    char     reference[128];
    int      has_decision, decision_ge;
    double   threshold;
    arm_view *arms;
    int      n_arms;
    char     spec_sha[65];
    char    *spec_json;
    int      synthetic;        /* the spec's model is {"synth": ...}: random weights, no perplexity to speak of */
    /* confound flags (lab_rp_read_flags; has_flags: the audit's table exists) */
    int          has_flags;
    lab_rp_flag *flags;
    int64_t      n_flags;
    /* nightly history (lab_rp_read_history; has_history: the nightly's tables exist) */
    int                has_history;
    lab_rp_hist_point *hist;       /* by nightly, repeat, run */
    int64_t            n_hist;
    lab_rp_regression *regs;
    int64_t            n_regs;
} exp_view;

/* Frees what the readers (and the page) allocated in e; e is zeroed. */
void lab_rp_exp_free(exp_view *e);

/* The spec of the experiment's latest run: sha256, JSON text and file.
 * *found = 0 (and nothing filled) when no run names a stored spec. */
int lab_rp_read_latest_spec(lab_store *st, const char *exp, char sha[65], char **json, char **file, int *found,
                            char *err, size_t errlen);
/* The JSON text of the spec with this sha256; *json = NULL when not stored. */
int lab_rp_read_spec_json(lab_store *st, const char *sha, char **json, char *err, size_t errlen);

/* The arms that ran, in order of their first run, with whether any run of
 * each was the reference; calls each(ctx, arm, is_ref) per arm (a non-zero
 * return stops the read and is returned). */
int lab_rp_read_ran_arms(lab_store *st, const char *exp, int (*each)(void *ctx, const char *arm, int is_ref),
                         void *ctx, char *err, size_t errlen);

/* The run the arm shows: the latest FINISHED run of repeat 0, else the
 * latest of any status. Fills run_id (0: never run), status, error,
 * assertions, backend, started, code_version, engine, is_reference (set,
 * never cleared), and run_sha with the sha256 of the spec it ran. */
int lab_rp_read_arm_run(lab_store *st, const char *exp, arm_view *a, char run_sha[72], char *err, size_t errlen);
/* For a run (a->run_id): its comparison with the reference and the verdict
 * (has_cmp, has_verdict), its throughput, perplexity and fraction of peak,
 * and resolved_knobs: the knobs that differ from their declared default. */
int lab_rp_read_arm_results(lab_store *st, arm_view *a, char *err, size_t errlen);
/* The run's probe table: its sites in order of first record, then its
 * expectations. */
int lab_rp_read_arm_probes(lab_store *st, arm_view *a, char *err, size_t errlen);
/* For a compared arm: the per-layer divergence (and, when there is any, the
 * layer kinds of the reference run) and the per-position KL. Runs whose
 * positions cannot be matched (lab_position_kl: LAB_EINPUT) leave n_kl 0. */
int lab_rp_read_arm_charts(lab_store *st, arm_view *a, char *err, size_t errlen);

/* The audit's flags on the experiment's runs (needs the audit_flags table):
 * open ones first, then expected, newest run first, by rule. */
int lab_rp_read_flags(lab_store *st, exp_view *e, char *err, size_t errlen);
/* The experiment's FINISHED runs in finished nightlies and the regressions
 * the nightlies flagged on its arms (needs the nightly's tables). */
int lab_rp_read_history(lab_store *st, exp_view *e, char *err, size_t errlen);

/* The kinds of the run's layers: those recorded with the run (schema v6),
 * else inferred from its probe records (kda.state marks a KDA layer, the
 * moe.* sites a MoE layer), else unknown (n = 0). */
int lab_rp_read_layer_kinds(lab_store *st, int64_t run, lab_rp_layer_kinds *lk, char *err, size_t errlen);

/* ------------------------------------------------------------ the whole page */

typedef struct lab_rp_confound {      /* an open, unexpected flag */
    char *kind, *subject, *rule, *reason, *experiment, *arm;   /* experiment, arm: "" unless on a run */
    char *key;                         /* the flag's own key (confound_key.h makes the cause's) */
} lab_rp_confound;

typedef struct lab_rp_verdict {       /* an arm's latest verdict */
    char   *experiment, *arm, *verdict;
    int64_t k, n;
    double  lo, hi;
    int     assertions_ok, expect_fail;
    lab_engine_name engine;            /* of the run with the verdict */
} lab_rp_verdict;

typedef struct lab_rp_claim {         /* a flag on a ledger claim */
    char *subject, *rule, *reason, *first_seen, *resolved_at, *resolved_by;
    int   open;
} lab_rp_claim;

typedef struct lab_rp_nightly {
    int64_t id, n_runs, n_regressions;
    char   *started, *commit, *status, *audit, *host;
} lab_rp_nightly;

typedef struct lab_rp_finding {
    char *experiment, *arm, *kind, *message;
    int   regression;
} lab_rp_finding;

typedef struct lab_rp_page_view {
    char          **experiments;       /* every experiment with a run, by name */
    int             n_experiments;
    int             has_audit;         /* the audit_flags table exists */
    char            audit_at[32];      /* the latest audit: when, and the ledger it read ("" when none) */
    char            audit_specs[512];
    lab_rp_confound *confounds;
    int64_t          n_confounds;
    lab_rp_claim    *claims;           /* open first */
    int64_t          n_claims;
    lab_rp_verdict  *verdicts;         /* by experiment, run */
    int64_t          n_verdicts;
    int             has_nightlies;     /* the nightlies table exists */
    lab_rp_nightly  *nightlies;        /* the latest 30, newest first */
    int64_t          n_nightlies;
    lab_rp_finding  *findings;         /* of nightlies[0]: regressions first */
    int64_t          n_findings;
} lab_rp_page_view;

/* Everything the page shows outside the experiments' own sections. */
int  lab_rp_read_page(lab_store *st, lab_rp_page_view *v, char *err, size_t errlen);
void lab_rp_page_free(lab_rp_page_view *v);

/* ------------------------------------------------------------ per-position KL */

/* KL(P || Q) per scored position of run_p against run_q (same dataset),
 * nats, in dataset order: exact from the stored f16 full logits when both
 * runs have them (*exact = 1), otherwise estimated from the top-k
 * log-probabilities (*exact = 0): P's top-k tokens, with the probability
 * mass outside them lumped into one bucket, and Q's probability of a token
 * outside its own top-k taken as its k-th largest. Caller frees *kl. A
 * mismatch of the runs' positions is LAB_EINPUT. */
int lab_position_kl(lab_store *st, int64_t run_p, int64_t run_q, double **kl, int64_t *n, int *exact, char *err,
                    size_t errlen);

#endif
