#!/usr/bin/python3
"""bad_crash_on_bad_request.py - breaks "a bad request never crashes a conforming engine": on
the first malformed request (bad header, wrong payload size, token out of range, ...) it
writes a message on stderr and exits with status 3 instead of answering `error`."""
import sys

import fake
import vtp


def crash(rid, message):
    sys.stderr.write("bad_crash_on_bad_request: giving up on request %s: %s\n" % (rid, message))
    sys.stderr.flush()
    sys.exit(3)


def main():
    knobs, scale = fake.make_knobs()
    return vtp.serve(fake.hello("bad_crash_on_bad_request", knobs), lambda req: fake.response(req, scale),
                     on_bad=crash)


if __name__ == "__main__":
    sys.exit(main())
