#!/usr/bin/python3
"""bad_shape.py - breaks "logits are [tokens][vocab]": it drops the last column, answering
vocab-1 (63) columns per row; header (vocab 63) and payload agree with each other, not with
the hello's vocab 64."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()

    def forward(req):
        out = fake.response(req, scale)
        out["logits"] = out["logits"][:, :-1]
        return out
    return vtp.serve(fake.hello("bad_shape", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
