#!/usr/bin/python3
"""bad_hello.py - breaks the hello rule: its hello lacks the required member model.sha256.
Otherwise it is good.py (vtlab must refuse it at start-up: exit 2, nothing written)."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    hello = fake.hello("bad_hello", knobs)
    del hello["model"]["sha256"]                         # the one broken rule
    return vtp.serve(hello, lambda req: fake.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
