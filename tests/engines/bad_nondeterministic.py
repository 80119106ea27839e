#!/usr/bin/python3
"""bad_nondeterministic.py - breaks "deterministic": its hello says deterministic true, but
every response adds fresh random noise (uniform, up to 1e-3) to the logits, so the same
request twice gives different bits."""
import sys

import numpy as np

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    rng = np.random.default_rng()                        # unseeded: another stream every run

    def forward(req):
        out = fake.response(req, scale)
        out["logits"] = out["logits"] + rng.uniform(-1e-3, 1e-3, out["logits"].shape).astype(np.float32)
        return out
    return vtp.serve(fake.hello("bad_nondeterministic", knobs, deterministic=True), forward)


if __name__ == "__main__":
    sys.exit(main())
