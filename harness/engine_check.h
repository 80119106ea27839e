/*
 * engine_check.h — `vtlab engine-check`: conformance checks of an engine
 * command against docs/engine-protocol.md (see engine_check.c).
 */
#ifndef LAB_ENGINE_CHECK_H
#define LAB_ENGINE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct lab_engine_check_opts {
    int64_t     argc;
    char      **argv;          /* the engine's command, NULL-terminated */
    const char *model_dir;     /* VTP_MODEL for the engine, or NULL */
    double      timeout_s;     /* per response */
    double      prefix_tol;    /* the prefix check's tolerance, relative to max |logit| */
    int64_t     n_allow_noop;  /* numeric knobs allowed to change nothing on this model */
    char      **allow_noop;
} lab_engine_check_opts;

/* Runs every check, one line each to out, then a summary line. *failed:
 * the checks that failed. LAB_OK when the checks ran (whatever they found);
 * another status (err filled) when they could not. */
int lab_engine_check(const lab_engine_check_opts *o, FILE *out, int *failed, char *err, size_t errlen);

#endif
