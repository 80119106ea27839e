#!/usr/bin/python3
"""good.py - a tiny fake engine that conforms to every rule of docs/engine-protocol.md (the
control for `vtlab engine-check` and tests/cli/test_engine_schema.sh).

Knobs: FAKE_SCALE (int 1..4, numeric: multiplies the logits), FAKE_UNUSED (bool, read from the
environment, honestly declared not numeric). Deterministic, causal, capture supported, one
`logits` buffer probe record per forward."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    return vtp.serve(fake.hello("good", knobs), lambda req: fake.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
