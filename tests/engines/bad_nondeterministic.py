#!/usr/bin/python3
"""bad_nondeterministic.py - breaks "deterministic": its hello says deterministic true, but
every response moves a random half of the logits by one ulp (fresh randomness each time, like
an unordered atomic reduction), so the same request twice gives different bits, while every
tolerance-based comparison (prefix, reference) still passes."""
import sys

import numpy as np

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    rng = np.random.default_rng()                        # unseeded: another stream every run

    def forward(req):
        out = fake.response(req, scale)
        lg = out["logits"]
        flip = rng.random(lg.shape) < 0.5
        out["logits"] = np.where(flip, np.nextafter(lg, np.float32(np.inf)), lg).astype(np.float32)
        return out
    return vtp.serve(fake.hello("bad_nondeterministic", knobs, deterministic=True), forward)


if __name__ == "__main__":
    sys.exit(main())
