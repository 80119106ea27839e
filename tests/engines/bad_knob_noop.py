#!/usr/bin/python3
"""bad_knob_noop.py - breaks "a numeric knob changes the numbers": it declares FAKE_SCALE
(int 1..4) numeric, reads it and reports its value honestly, but never applies it: the
logits are those of good.py at FAKE_SCALE=1 whatever the value."""
import sys

import fake
import vtp


def main():
    knobs, _scale = fake.make_knobs()
    return vtp.serve(fake.hello("bad_knob_noop", knobs), lambda req: fake.response(req, 1))   # the bug


if __name__ == "__main__":
    sys.exit(main())
