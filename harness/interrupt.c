/*
 * interrupt.c — the SIGINT/SIGTERM flag (see interrupt.h).
 */
#include "interrupt.h"

#include <string.h>

volatile sig_atomic_t lab_interrupted = 0;

static void on_signal(int sig) {
    (void)sig;
    lab_interrupted = 1;
}

void lab_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
