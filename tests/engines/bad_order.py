#!/usr/bin/python3
"""bad_order.py - breaks "the request's id is echoed": every response carries id + 1."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()

    def forward(req):
        out = fake.response(req, scale)
        out["header"] = {"id": req.id + 1}
        return out
    return vtp.serve(fake.hello("bad_order", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
