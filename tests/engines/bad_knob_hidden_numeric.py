#!/usr/bin/python3
"""bad_knob_hidden_numeric.py - breaks "a non-numeric knob leaves the numbers alone": it declares
FAKE_UNUSED (bool) as not numeric, but FAKE_UNUSED=1 doubles the logits. Runs under either value
would share a run identity (only numeric knobs enter it) while their numbers differ."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    unused = knobs.records[-1]["value"] == "1"          # FAKE_UNUSED, declared numeric: false
    factor = scale * (2 if unused else 1)               # the bug: it changes the numbers
    return vtp.serve(fake.hello("bad_knob_hidden_numeric", knobs), lambda req: fake.response(req, factor))


if __name__ == "__main__":
    sys.exit(main())
