#!/usr/bin/python3
"""bad_probes.py - breaks the probe record definition: its one record per forward lacks the
required member `site` (everything else is good.py's)."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()

    def forward(req):
        out = fake.response(req, scale)
        for rec in out["probes"]:
            del rec["site"]                              # the one broken rule
        return out
    return vtp.serve(fake.hello("bad_probes", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
