/*
 * lab.h — the harness's lab commands (run, sweep, runs, show, compare, export,
 * and later audit, reopen, report, nightly), dispatched from main.c.
 */
#ifndef LAB_LAB_H
#define LAB_LAB_H

#include <stdio.h>

/* If cmd is a lab command, runs it and sets *handled = 1; returns the exit
 * status (0 ok, 1 a check failed, 2 bad input or usage). argv[0] is cmd. */
int lab_main(const char *cmd, int argc, char **argv, int *handled);

#endif
