#!/usr/bin/python3
"""slow.py - breaks the response timeout: before answering its first forward it sleeps
SLOW_SECONDS (default 3600), far longer than any timeout_s a test gives; then it behaves like
good.py, sleeping SLOW_EACH seconds (default 0) before each later answer (a long run that a
test can kill from outside). (A hello arrives at once: only the forwards are slow.)"""
import os
import sys
import time

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    seconds = float(os.environ.get("SLOW_SECONDS", "3600"))
    each = float(os.environ.get("SLOW_EACH", "0"))
    state = {"slept": False}

    def forward(req):
        if not state["slept"]:
            state["slept"] = True
            time.sleep(seconds)
        elif each > 0:
            time.sleep(each)
        return fake.response(req, scale)
    return vtp.serve(fake.hello("slow", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
