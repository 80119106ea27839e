#!/usr/bin/python3
"""bad_prefix.py - breaks causality: the logits at position i depend on every token of the
request (the state mixes in the mean over the whole sequence), so the rows of a prefix request
disagree with the first rows of the longer request."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    return vtp.serve(fake.hello("bad_prefix", knobs), lambda req: fake.response(req, scale, causal=False))


if __name__ == "__main__":
    sys.exit(main())
