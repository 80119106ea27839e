/*
 * warden.c — see warden.h.
 *
 * The warden is forked from a process that may run OpenMP threads, so it
 * calls only async-signal-safe functions (sigaction, open, dup2, close,
 * read, kill, nanosleep, _exit) and never returns into vtlab's code.
 */
#include "warden.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARDEN_FD 3
#define WARDEN_POLL_MS 20

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* Keeps only the pipe (as fd 3) and /dev/null on 0-2: a copy of vtlab's
 * other descriptors would hold an engine's stdin open (it would never see
 * its end) or a caller's pipe on vtlab's stdout. */
static void keep_only_pipe(int rfd) {
    if (rfd != WARDEN_FD && dup2(rfd, WARDEN_FD) < 0) _exit(1);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        for (int fd = 0; fd < 3; fd++) dup2(nul, fd);
        if (nul > WARDEN_FD) close(nul);
    }
    if (close_range(WARDEN_FD + 1, ~0U, 0) < 0)
        for (int fd = WARDEN_FD + 1; fd < 65536; fd++) close(fd);
}

static void __attribute__((noreturn)) warden_main(int rfd, pid_t group) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    /* vtlab answers these itself (and ends the group); a terminal's Ctrl-C
     * must not take the warden away first. */
    sigaction(SIGINT, &ign, NULL);
    sigaction(SIGTERM, &ign, NULL);
    sigaction(SIGHUP, &ign, NULL);
    sigaction(SIGPIPE, &ign, NULL);
    setpgid(0, 0);
    keep_only_pipe(rfd);
    char b;
    ssize_t n;
    while ((n = read(WARDEN_FD, &b, 1)) < 0 && errno == EINTR) {}
    if (n == 1) _exit(0);   /* released: vtlab ended the group */
    if (kill(-group, SIGTERM) < 0) _exit(0);
    for (long waited = 0; waited < WARDEN_GRACE_MS; waited += WARDEN_POLL_MS) {
        nap_ms(WARDEN_POLL_MS);
        if (kill(-group, 0) < 0) _exit(0);
    }
    kill(-group, SIGKILL);
    _exit(0);
}

int lab_warden_start(lab_warden *w, pid_t group) {
    int p[2];
    w->pid = 0;
    w->fd = -1;
    if (pipe2(p, O_CLOEXEC)) return errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return e;
    }
    if (pid == 0) {
        close(p[1]);
        warden_main(p[0], group);
    }
    close(p[0]);
    w->pid = pid;
    w->fd = p[1];
    return 0;
}

void lab_warden_release(lab_warden *w) {
    if (w->fd >= 0) {
        char b = 1;
        while (write(w->fd, &b, 1) < 0 && errno == EINTR) {}
        close(w->fd);
        w->fd = -1;
    }
    if (w->pid > 0) {
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {}
        w->pid = 0;
    }
}
