/*
 * omp_wait.c — OpenMP threads that wait for work sleep instead of spinning.
 *
 * libgomp spins by default; on a shared or oversubscribed host the spinning
 * threads take the cores from the ones with work, and the default thread
 * count ran slower than one thread (measured with `vtlab logits` of the tiny
 * model at load 9-10 on 2 cores: spinning 1.74-1.91 s, one thread 1.09-1.32 s,
 * passive 0.90-1.13 s). libgomp reads OMP_WAIT_POLICY once, when it is loaded,
 * before main: so a program sets it and execs itself once. A user's own
 * OMP_WAIT_POLICY is kept; VTLAB_NO_REEXEC=1 turns the exec off.
 */
#include <stdlib.h>
#include <unistd.h>

#include "vt.h"

void vt_openmp_wait_passively(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("VTLAB_NO_REEXEC")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);   /* returns only on failure: run as we are */
}
