/*
 * localize.h — `vtlab localize EXPERIMENT --arm NAME`: when an arm's lever
 * is REFUTED, where in the model it breaks (docs/localize.md).
 *
 * The arm's scoped levers (VT_KIMI_BF16_STREAM and the like, or a command
 * engine's knobs declared "scope") are applied to sets of layers (or of
 * sites: a layer's attention and FFN blocks), each set one stored run of a
 * derived experiment (ID.loc), judged by the experiment's decision rule
 * against the reference and paired with the full-lever arm (McNemar). Delta
 * debugging finds a 1-minimal failing set (and, on what is left, the next
 * one) or the largest set the lever can stay on; a step inside the noise
 * grows the dataset, and one still undecided at the largest is said so.
 * Resumable: the runs and the localization's steps (results.db) are the
 * state, and the search replays from them.
 */
#ifndef LAB_LOCALIZE_H
#define LAB_LOCALIZE_H

#include <stdint.h>
#include <stdio.h>

#include "store_localize.h"

#define LAB_LOCALIZE_DEFAULT_WORKDIR "build/localize"
#define LAB_LOCALIZE_DEFAULT_SCALE 4

typedef struct lab_localize_opts {
    const char *experiment, *arm, *db_path, *workdir;
    int         by_site;          /* --by site: units are sites (L.attn, L.ffn); else layers */
    int         largest_passing;  /* --goal largest-passing; else minimal-failing */
    double      alpha;            /* for the paired test against the full lever (0.05) */
    int64_t     max_scale;        /* the dataset grows up to this (generated datasets; 4) */
    int64_t     max_runs;         /* candidate runs this localization may make, all invocations; 0: no cap */
    int         sensitivity;      /* 1: each unit alone after the search (the table; default) */
} lab_localize_opts;

void lab_localize_defaults(lab_localize_opts *o);

/* Runs (or resumes) the localization o defines, printing to out; *res its
 * row at the end. LAB_OK when it ran to a result or to its run budget
 * (res->status), LAB_EINPUT on bad input (nothing written), another status
 * when it failed or was interrupted. */
int lab_localize_run(const lab_localize_opts *o, FILE *out, lab_localization *res, char *err, size_t errlen);

/* `vtlab localize ARGS` (argv[0] is "localize"): the exit status. */
int lab_localize_main(int argc, char **argv);

#endif
