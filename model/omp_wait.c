/*
 * omp_wait.c — OpenMP threads that wait for work spin briefly, then sleep.
 *
 * libgomp spins by default (up to ~300000 pause loops, milliseconds); on a
 * shared or oversubscribed host the spinning threads take the cores from the
 * ones with work, and the default thread count ran slower than one thread
 * (measured with `vtlab logits` of the tiny model at load 9-10 on 2 cores:
 * spinning 1.74-1.91 s, one thread 1.09-1.32 s, passive 0.90-1.13 s). So
 * threads wait passively (OMP_WAIT_POLICY=PASSIVE), after a short spin
 * (GOMP_SPINCOUNT=3000: ~35 us at the 11.8 ns a `pause` takes on the 2-core
 * VM): long enough to bridge the end-of-region barrier and the short serial
 * gaps between a decode step's products without a futex wake-up (2-thread
 * decode of the 288M model +5%: 35.9 -> 37.7 tok/s, medians of 4 interleaved
 * bench rounds; prefill unchanged), short enough not to hold a busy host's
 * cores (with one core busy: prefill 1.00-1.04 of one thread; decode is
 * governed, team.h). 100000 (~1.2 ms) gave +12% quiet but a fixed team's
 * busy decode 0.52 and prefill 0.80-0.87 of one thread.
 *
 * libgomp reads these once, when it is loaded, before main: so a program sets
 * them and execs itself once. A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is
 * kept (then neither is set here); VTLAB_NO_REEXEC=1 turns the exec off.
 */
#include <stdlib.h>
#include <unistd.h>

#include "vt.h"

void vt_openmp_wait_passively(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("VTLAB_NO_REEXEC")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", "3000", 1);
    execv("/proc/self/exe", argv);   /* returns only on failure: run as we are */
}
