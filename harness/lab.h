/*
 * lab.h — the harness's lab commands (run, sweep, runs, show, compare, export,
 * and later audit, reopen, report, nightly), dispatched from main.c.
 */
#ifndef VT_LAB_H
#define VT_LAB_H

#include <stdio.h>

/* If cmd is a lab command, runs it and sets *handled = 1; returns the exit
 * status (0 ok, 1 a check failed, 2 bad input or usage). argv[0] is cmd. */
int vt_lab_main(const char *cmd, int argc, char **argv, int *handled);
/* Appends the lab commands' usage lines to out. */
void vt_lab_usage(FILE *out);

#endif
