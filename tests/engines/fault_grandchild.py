#!/usr/bin/python3
"""fault_grandchild.py - an engine that leaves a process of its own behind: before its hello it
forks a helper (a grandchild of vtlab) that inherits its stdin, stdout and stderr and sleeps
FAULT_HELPER_SECONDS (default 3600). Then it behaves like good.py, sleeping FAULT_SLEEP_EACH
seconds (default 0) before each answer, until it has answered FAULT_CRASH_AFTER forwards
(default 1; -1 never): on the next one it writes a message on stderr and exits 70 without
answering. Its stdout stays open in the helper, so no end of file tells vtlab it is gone.

FAULT_PID_FILE (required): the engine writes "ENGINE_PID ENGINE_PGID HELPER_PID" there once the
helper runs, so a test can check that the engine led a process group of its own and that
nothing of that group outlived vtlab."""
import os
import sys
import time

import fake
import vtp


def start_helper(seconds):
    pid = os.fork()
    if pid == 0:                          # the helper: stays in the engine's process group
        try:
            time.sleep(seconds)
        finally:
            os._exit(0)
    return pid


def main():
    knobs, scale = fake.make_knobs()
    limit = int(os.environ.get("FAULT_CRASH_AFTER", "1"))
    each = float(os.environ.get("FAULT_SLEEP_EACH", "0"))
    helper = start_helper(float(os.environ.get("FAULT_HELPER_SECONDS", "3600")))
    tmp = os.environ["FAULT_PID_FILE"] + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d %d\n" % (os.getpid(), os.getpgid(0), helper))
    os.rename(tmp, os.environ["FAULT_PID_FILE"])
    state = {"answered": 0}

    def forward(req):
        if limit >= 0 and state["answered"] >= limit:
            sys.stderr.write("fault_grandchild: crash on request %d; helper %d keeps stdout open\n"
                             % (req.id, helper))
            sys.stderr.flush()
            os._exit(70)
        if each > 0:
            time.sleep(each)
        state["answered"] += 1
        return fake.response(req, scale)
    return vtp.serve(fake.hello("fault_grandchild", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
