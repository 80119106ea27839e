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
    int64_t     n_env;         /* "NAME=VALUE" for every engine start (--env), before the */
    char      **env;           /* knobs a check sets, which override them; not copied */
} lab_engine_check_opts;

/* Checks one --env argument: NAME=VALUE, NAME a variable name ([A-Za-z_]
 * [A-Za-z0-9_]*) that is not one engine-check sets itself (VTP_PROTOCOL,
 * VTP_PROBE, VTP_MODEL: they would be overridden without a word). 0, or -1
 * with the reason in err. */
int lab_engine_check_env_arg(const char *arg, char *err, size_t errlen);

/* Runs every check, one line each to out, then a summary line. *failed:
 * the checks that failed. LAB_OK when the checks ran (whatever they found);
 * another status (err filled) when they could not. */
int lab_engine_check(const lab_engine_check_opts *o, FILE *out, int *failed, char *err, size_t errlen);

#endif
