#!/usr/bin/python3
"""fault_model_hash.py - an engine of another model: its hello reports model.sha256
sha256("FAULT_MODEL") (default "another model") instead of fake.py's hash; its logits are
fake.py's. Beside a good.py reference arm, vtlab must refuse the experiment (exit 2, nothing
written) unless it says "allow_model_mismatch": true."""
import hashlib
import os
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    hello = fake.hello("fault_model_hash", knobs)
    name = os.environ.get("FAULT_MODEL", "another model")
    hello["model"]["sha256"] = hashlib.sha256(name.encode("utf-8")).hexdigest()   # the one change
    return vtp.serve(hello, lambda req: fake.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
