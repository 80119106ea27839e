/*
 * warden.h — a process that ends a child's process group should vtlab die
 * without ending it itself (SIGKILL, the OOM killer, a crash).
 *
 * vtlab ends an engine's group at close, at a failure and after SIGINT or
 * SIGTERM (engine_command.c). None of that runs when vtlab is killed: the
 * engine sees the end of its stdin only between requests, and whatever it
 * started (a helper, a GPU worker) sees nothing. A warden is a small forked
 * copy of vtlab, in a process group of its own, that waits on a pipe whose
 * only writer is vtlab: a byte means vtlab ended the group itself (the
 * warden leaves); the end of the pipe means vtlab is gone, and the warden
 * sends the group SIGTERM, then SIGKILL after WARDEN_GRACE_MS to what is
 * left.
 */
#ifndef LAB_WARDEN_H
#define LAB_WARDEN_H

#include <sys/types.h>

#define WARDEN_GRACE_MS 2000

typedef struct lab_warden {
    pid_t pid;   /* 0: none */
    int   fd;    /* vtlab's end of the pipe; -1: none */
} lab_warden;

/* Starts a warden over process group `group`. Returns 0, or an errno value
 * (pipe or fork failed; *w is then empty). */
int lab_warden_start(lab_warden *w, pid_t group);

/* The group has been ended by vtlab: the warden leaves without a signal and
 * is reaped. Safe on an empty warden, and twice. */
void lab_warden_release(lab_warden *w);

#endif
