#!/usr/bin/python3
"""crash_mid.py - breaks "the engine stays up": it answers CRASH_AFTER forwards (default 2)
like good.py, then on the next one writes a message on stderr and exits with status 70 without
answering."""
import os
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    limit = int(os.environ.get("CRASH_AFTER", "2"))
    state = {"answered": 0}

    def forward(req):
        if state["answered"] >= limit:
            sys.stderr.write("crash_mid: simulated crash on request %d after %d answered forwards\n"
                             % (req.id, state["answered"]))
            sys.stderr.flush()
            os._exit(70)
        state["answered"] += 1
        return fake.response(req, scale)
    return vtp.serve(fake.hello("crash_mid", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
