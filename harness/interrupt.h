/*
 * interrupt.h — the one flag a SIGINT or SIGTERM sets, read by everything
 * that runs long (the runner between sequences, an engine command's waits,
 * bisect, localize, nightly, plot). It lives in a file of its own, below all
 * of them, so that reading it ties no file to the runner.
 */
#ifndef LAB_INTERRUPT_H
#define LAB_INTERRUPT_H

#include <signal.h>

/* Set by the SIGINT/SIGTERM handler that lab_install_signals installs (lab.c
 * and the long commands call it); the runner checks it between sequences
 * and records the run as KILLED. */
extern volatile sig_atomic_t lab_interrupted;
/* Installs the SIGINT/SIGTERM handler that sets lab_interrupted. */
void lab_install_signals(void);

#endif
