/*
 * store_localize.h — `vtlab localize`'s part of results.db (tables
 * localizations and localize_steps, schema v11; docs/schema.md,
 * docs/localize.md).
 *
 * A localization is one row, found again by its key (the sha256 of the
 * arguments that define it), so `vtlab localize` with the same arguments
 * continues it. Each layer set evaluated at a dataset scale is one step, with
 * the run it used and its evidence, unique per (localization, set, scale),
 * written in one transaction once its run is finished: a killed localization
 * leaves finished steps and runs, and nothing half-written. The search is a
 * pure function of the steps, so the same command replays it from them.
 *
 * Every reader fills its output completely and returns LAB_OK, or returns a
 * status with err naming the database and what was read.
 */
#ifndef LAB_STORE_LOCALIZE_H
#define LAB_STORE_LOCALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "model/vt.h"
#include "store.h"
#include "util.h"

typedef struct lab_localization {
    int64_t id;
    char    key[65];
    char    experiment[LAB_NAME_BUF], arm[LAB_NAME_BUF], reference[LAB_NAME_BUF];
    char    experiment_file[1024], experiment_sha256[65];
    char    by[8];                /* "layer" | "site" */
    char    goal[24];             /* "minimal-failing" | "largest-passing" */
    char    levers[512];          /* the scoped knobs, ','-separated */
    int64_t n_units;              /* layers (by layer) or 2 x layers (by site) */
    double  alpha;
    int64_t max_scale, scale;     /* dataset scale: 1, 2, 4 .. max_scale (generated datasets) */
    int64_t runs_made, runs_reused;   /* candidate runs this localization made / found recorded */
    char    status[16];           /* RUNNING FOUND NONE UNDECIDED BUDGET FAILED */
    char    result[VTP_LAYER_SET_TEXT];   /* the failing set(s), ';'-separated; "" none */
    char    plan[VTP_LAYER_SET_TEXT];     /* the largest passing set found; "" none */
    int64_t result_run_id, plan_run_id;   /* the runs with those sets applied; 0 none */
    char    message[2048];
    char    started_at[32], finished_at[32];
} lab_localization;

typedef struct lab_localize_step {
    int64_t id, localization_id, seq;
    char    phase[16];            /* "full" "empty" "search" "sensitivity" */
    char    set[VTP_LAYER_SET_TEXT];   /* the scope, canonical ("all": the full lever) */
    int64_t size;                 /* units in the set */
    int64_t scale;
    char    cls[12];              /* fail pass undecided error */
    int     made;                 /* 1: this step's run was made now; 0: found recorded */
    int64_t arm_run_id, ref_run_id;   /* 0: none */
    int64_t k, n;                 /* top-1 agreement with the reference */
    double  lo, hi;               /* Wilson 95% (NAN when no run) */
    char    verdict[16];          /* the decision rule's */
    int64_t lost, gained;         /* against the full lever, paired: positions lost / gained */
    double  p;                    /* exact McNemar p against the full lever; NAN when not tested */
    double  kl_mean;              /* NAN when not measured */
    int64_t first_div_layer;      /* -1: none */
    int     first_div_site;       /* 0 attn, 1 ffn */
    double  first_div_value;
    char    reason[512];
    char    at[32];
} lab_localize_step;

/* The localization with this key: *found = 0 when none. */
int lab_store_localize_find(lab_store *st, const char *key, lab_localization *out, int *found, char *err,
                            size_t errlen);
/* Inserts l (status RUNNING); l->id receives its id. */
int lab_store_localize_insert(lab_store *st, lab_localization *l, char *err, size_t errlen);
/* Writes l's mutable fields: scale, run counts, status, result, plan, runs, message, finished_at. */
int lab_store_localize_update(lab_store *st, const lab_localization *l, char *err, size_t errlen);
/* Every localization, by id; *v the caller's (free). */
int lab_store_localize_list(lab_store *st, lab_localization **v, int64_t *n, char *err, size_t errlen);
/* The steps of localization lid in the order they were made; *v the caller's (free). */
int lab_store_localize_steps(lab_store *st, int64_t lid, lab_localize_step **v, int64_t *n, char *err,
                             size_t errlen);
/* Records a step and the localization's run counts in one transaction (s->id,
 * s->seq receive theirs). A step of the same (set, scale) already there is
 * LAB_EINTERNAL. */
int lab_store_localize_put_step(lab_store *st, lab_localize_step *s, const lab_localization *l, char *err,
                                size_t errlen);

/* The latest FINISHED run of experiment/arm with code_version (knob_hash too
 * when not NULL), with its comparison and verdict, into the run fields of
 * *s (arm_run_id 0 when none); when none, *why gets the latest run's error
 * ("" when there is no run at all). */
int lab_store_localize_find_run(lab_store *st, const char *experiment, const char *arm, const char *code_version,
                                const char *knob_hash, lab_localize_step *s, char *why, size_t whylen, char *err,
                                size_t errlen);

/* The decision threshold run_id was judged by (its verdicts row); NAN when none. */
int lab_store_localize_threshold(lab_store *st, int64_t run_id, double *thr, char *err, size_t errlen);

/* The largest run id in results.db (0: none). */
int lab_store_last_run_id(lab_store *st, int64_t *id, char *err, size_t errlen);

#endif
