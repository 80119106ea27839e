#!/usr/bin/python3
"""bad_nan.py - breaks "no NaN among the logits": the last row's first logit is NaN (a quiet
NaN, as an arithmetic bug would make)."""
import sys

import numpy as np

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()

    def forward(req):
        out = fake.response(req, scale)
        out["logits"][-1, 0] = np.nan
        return out
    return vtp.serve(fake.hello("bad_nan", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
