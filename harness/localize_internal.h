/*
 * localize_internal.h — what localize.c (the command, the searches, the
 * output) and localize_run.c (a set's run and step) share.
 */
#ifndef LAB_LOCALIZE_INTERNAL_H
#define LAB_LOCALIZE_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "experiment.h"
#include "localize.h"
#include "localize_search.h"
#include "store_localize.h"

#define LAB_LOC_MAX_LEVERS 8
/* a search stopped because its run budget (--max-runs) is spent */
#define LAB_LOC_BUDGET 100

typedef struct lctx {
    const lab_localize_opts *o;
    FILE             *out;
    lab_store        *st;
    lab_localization  L;
    lab_experiment   *e;
    int64_t           arm;              /* the arm's index */
    int               generated;        /* a generated dataset: it can grow */
    int               command;          /* the arm runs through a command engine */
    int64_t           n_layers, n;      /* the model's layers; units (layers or 2 x layers) */
    int               n_levers;
    char              levers[LAB_LOC_MAX_LEVERS][128];
    int               empty_is_reference;   /* the arm with no lever on is the reference arm */
    const char       *phase;            /* the phase steps are recorded under now */
    char              exp_abs[PATH_MAX], db_abs[PATH_MAX], work[PATH_MAX], runlog[PATH_MAX + 16];
    char              code[700];        /* the code version of the runs this vtlab records */
    char              arm_hash[65];     /* the arm's knob hash (the environment's VT_* included): in the key */
    lab_localize_step *steps;
    int64_t           nsteps;
    int               lock_fd;
    char              fail_reason[640]; /* why the search cannot go on (a set's run failed) */
} lctx;

/* The canonical layer set of units set[c->n] ("all" for every unit, "none" for none). */
void lab_loc_set_text(const lctx *c, const uint8_t *set, char *out, size_t outlen);
/* The candidate arm's name for set text (also the arm to paste). */
void lab_loc_arm_name(const lctx *c, const char *text, char *out, size_t outlen);
/* The derived experiment's id at scale. */
void lab_loc_exp_id(const lctx *c, int64_t scale, char *out, size_t outlen);
/* The arm object (cJSON *, the caller's) of the arm with its levers on text. */
void *lab_loc_arm_json(const lctx *c, const char *text);

/* The step of set text at scale, or NULL. */
const lab_localize_step *lab_loc_step_at(const lctx *c, const char *text, int64_t scale);
/* The step that decides set text (pass or fail; the largest scale), or NULL. */
const lab_localize_step *lab_loc_decided(const lctx *c, const char *text);
/* Evaluates set text (size units) at the localization's scale: its run
 * (made, or found recorded), classified and stored as a step, and printed. */
int lab_loc_evaluate(lctx *c, const char *text, int64_t size, char *err, size_t errlen);
/* Prints step s ("how": stored, made, reused). */
void lab_loc_print_step(const lctx *c, const lab_localize_step *s, const char *how);

#endif
