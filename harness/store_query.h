/*
 * store_query.h — what the read-only commands (`vtlab runs`, `show`,
 * `compare`, `export`; cmd_query.c) read from results.db.
 *
 * cmd_query.c formats and prints; the SQL lives in store_query.c (see
 * store_internal.h). Every reader reads its statements to their end and
 * either fills its output completely and returns LAB_OK, or returns a status
 * with err "PATH: WHAT: ..." (lab_store_error: a corrupt page and a full disk
 * said in words), its output left empty: a read that failed half-way is never
 * a short answer. A row the store cannot have written (a top-k blob of the
 * wrong size) is an error too, never skipped.
 *
 * Ownership: a reader's output is released with its free function (NULL or
 * an output left empty by a failed read is fine). Text fields point into the
 * output's own string list and live as long as it; "" stands for NULL unless
 * the field says otherwise.
 */
#ifndef LAB_STORE_QUERY_H
#define LAB_STORE_QUERY_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_name.h"
#include "store.h"

/* The strings an output owns (store_query.c). */
typedef struct lab_query_text lab_query_text;

/* *found = 1 when run id has a row in runs, else 0. */
int lab_query_run_exists(lab_store *st, int64_t id, int *found, char *err, size_t errlen);

/* ------------------------------------------------------------ runs */

/* A line of `vtlab runs`: a run with its comparison and verdict (one line per
 * comparison of the run; a run without one has a line with has_top1 = 0). */
typedef struct lab_query_run_row {
    int64_t     id, repeat;
    const char *experiment, *arm, *status, *started;
    const char *verdict;          /* NULL: no verdict */
    int         has_assertions;   /* 0: assertions_ok is NULL (nothing asserted) */
    int         assertions_ok;
    int         replay;           /* expected_assertions = 'fail': the arm replays a defect */
    int         has_top1;         /* 0: no comparison */
    int64_t     top1_k, top1_n;
    double      top1_lo, top1_hi;
    int         has_kl;
    double      kl_mean;
    int         has_div;          /* 0: no layer diverged (or not measured) */
    int64_t     div_layer;
    int         div_ffn;          /* 1: after the FFN, 0: after attention */
    lab_engine_name engine;       /* the engine the run went through */
    const char *tags;             /* its tags as a JSON object's text; NULL: none (or a file older than v9) */
} lab_query_run_row;

/* Which runs `vtlab runs` lists: every field NULL is no filter. */
typedef struct lab_query_filter {
    const char *experiment, *arm, *status;
    const char *engine;                  /* the hello's engine.name, or "builtin" */
    const char *knobs;                   /* a JSON array of [name, value] pairs: the run has each
                                            resolved knob with that value (run_knobs) */
    const char *tags;                    /* the same for tags [key, value] (run_tags) */
    const char *since;                   /* started_at >= since (ISO 8601 UTC; a date is its prefix) */
} lab_query_filter;

typedef struct lab_query_runs {
    lab_query_run_row *rows;
    int64_t            n;
    lab_query_text    *text;
} lab_query_runs;

/* The lines of `vtlab runs`, ascending run id, of the runs f lets through (f
 * NULL: every run). lab_query_runs_free. */
int  lab_query_runs_read(lab_store *st, const lab_query_filter *f, lab_query_runs *out, char *err, size_t errlen);
void lab_query_runs_free(lab_query_runs *r);

/* The same rows as a JSON array of objects (`vtlab runs --json`): the
 * columns by name, NULL as null, and "engine" (lab_engine_json; the hello
 * itself is left to `show --json`). *out is the caller's (cJSON_Delete). */
int lab_query_runs_json(lab_store *st, const lab_query_filter *f, cJSON **out, char *err, size_t errlen);

/* ------------------------------------------------------------ show */

/* A column of the run's row in runs that is not NULL, as SQLite's text. */
typedef struct lab_query_field { const char *name, *value; } lab_query_field;

typedef struct lab_query_knob { const char *name, *value; int numeric; } lab_query_knob;

/* A named value of a run (a metric), or of two runs side by side (compare:
 * b, and measured = 0 when either stored value is NULL, which reads as 0). */
typedef struct lab_query_value {
    const char *name;
    double      a, b;
    int         measured;
} lab_query_value;

/* A comparison of the run with a reference run. */
typedef struct lab_query_comparison {
    int64_t reference_run_id, top1_k, top1_n, mcnemar_b, mcnemar_c;
    double  top1_lo, top1_hi, kl_mean, kl_p99, kl_max, max_abs_dlogit, rms_dp, mcnemar_p;
    int     recomputed, hash_match;   /* reference_recomputed, reference_hash_match (NULL reads 0) */
    int     has_first_div;            /* 0: first_div_* NULL (none above tolerance, or not measured) */
    int64_t first_div_layer;
    int     first_div_ffn;
    double  first_div_value;
    int     has_tolerance;            /* 0: div_tolerance NULL (per-layer divergence not measured) */
    double  div_tolerance;
} lab_query_comparison;

typedef struct lab_query_divergence { int64_t layer; int ffn; double rel_l2; } lab_query_divergence;

typedef struct lab_query_verdict {
    const char *metric, *direction, *verdict;
    double      threshold, lo, hi;
    int64_t     k, n;
} lab_query_verdict;

typedef struct lab_query_expectation {
    const char *site, *expected, *seen, *reason;
    int64_t     records;
    int         ok;
} lab_query_expectation;

/* The probe records of one (site, dtype, src_dtype), in order of first
 * record: counts summed, byte sizes and rows_unwritten their maximum. */
typedef struct lab_query_probe_group {
    const char *site, *dtype, *src_dtype;
    int64_t     records, rows, bytes_per_row, src_row_bytes, dst_row_bytes, violations, rows_unwritten;
    int         n_violated;           /* records with ok = 0 */
    int64_t     layer_min, layer_max;
    const char *first_detail;         /* detail of the first violated record at the site */
} lab_query_probe_group;

/* Everything `vtlab show` prints about a run. */
typedef struct lab_query_run_detail {
    lab_query_field       *fields;       int64_t n_fields;       /* runs columns, in schema order */
    lab_query_knob        *knobs;        int64_t n_knobs;        /* by name */
    lab_query_value       *metrics;      int64_t n_metrics;      /* by name; value in a */
    lab_query_comparison  *comparisons;  int64_t n_comparisons;  /* stored order */
    lab_query_divergence  *divergence;   int64_t n_divergence;   /* by layer, then site */
    lab_query_verdict     *verdicts;     int64_t n_verdicts;
    lab_query_expectation *expectations; int64_t n_expectations;
    lab_query_probe_group *probes;       int64_t n_probes;
    lab_engine_name        engine;       /* the engine the run went through */
    lab_query_text        *text;
} lab_query_run_detail;

/* The run's records (empty arrays for a run id with no rows).
 * lab_query_run_detail_free. */
int  lab_query_run_detail_read(lab_store *st, int64_t id, lab_query_run_detail *out, char *err, size_t errlen);
void lab_query_run_detail_free(lab_query_run_detail *d);

/* ------------------------------------------------------------ compare */

/* A run's identity, as `vtlab compare` has always read it: text truncated to
 * these sizes, "" for NULL. */
typedef struct lab_query_brief {
    char    arm[64], experiment[64], status[16], knob_hash[65], model[65], dataset[65], code[256], logits[65];
    int64_t reference_run;        /* its comparisons' largest reference run id; itself for a reference run; 0 */
    int64_t n_scored;
    lab_engine_name engine;       /* the engine the run went through */
} lab_query_brief;

/* *found = 0 (and *b zeroed) when run id does not exist. */
int lab_query_brief_read(lab_store *st, int64_t id, lab_query_brief *b, int *found, char *err, size_t errlen);

/* A knob both runs have, with different values. */
typedef struct lab_query_knob_diff { const char *name, *a, *b; } lab_query_knob_diff;

/* Two runs side by side. */
typedef struct lab_query_compare {
    lab_query_knob_diff *knobs;   int64_t n_knobs;     /* by name */
    lab_query_value     *metrics; int64_t n_metrics;   /* the metrics both have, by name */
    /* Each run against its own (first stored) reference: "top1 vs ref",
     * "kl_mean", "kl_p99", "kl_max", "max |dlogit|", "rms dp"; none when
     * either run has no comparison. */
    lab_query_value     *refs;    int64_t n_refs;
    lab_query_text      *text;
} lab_query_compare;

int  lab_query_compare_read(lab_store *st, int64_t a, int64_t b, lab_query_compare *out, char *err, size_t errlen);
void lab_query_compare_free(lab_query_compare *c);

/* ------------------------------------------------------------ export */

/* One sequence's stored top-k: ids and logprobs [n_pos][k]. */
typedef struct lab_query_topk {
    int64_t  seq, n_pos, k;
    int32_t *ids;
    float   *logprobs;
} lab_query_topk;

/* Every sequence's top-k of run id, by sequence, in *v[*n]
 * (lab_query_topk_free). A row whose blobs do not hold n_pos x k entries is
 * LAB_EINPUT "PATH: run ID: logits_topk of sequence SEQ has the wrong size". */
int  lab_query_topk_read(lab_store *st, int64_t id, lab_query_topk **v, int64_t *n, char *err, size_t errlen);
void lab_query_topk_free(lab_query_topk *v, int64_t n);

/* The reference run of run id's first comparison (*ref = 0 when it has
 * none) and whether the run scores only the last position of a sequence. */
int lab_query_reference(lab_store *st, int64_t id, int64_t *ref, int *last_only, char *err, size_t errlen);

/* Adds run id's records to root, the columns by name (NULL as null, blobs
 * left out): "run" (an object, absent when there is no such run, with its
 * engine named as "engine": lab_engine_json), then the
 * arrays "knobs", "metrics", "probes", "expectations", "comparisons",
 * "layer_divergence", "verdicts" and "pair_tests" (the pair tests naming the
 * run). On failure root may hold some of them. */
int lab_query_run_json(lab_store *st, int64_t id, cJSON *root, char *err, size_t errlen);

#endif
