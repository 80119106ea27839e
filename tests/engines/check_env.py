#!/usr/bin/python3
"""check_env.py - good.py, but it will not start (exit 2 before its hello) unless its environment
holds CHECK_ENV_TOKEN=42: the engine `vtlab engine-check --env CHECK_ENV_TOKEN=42` must reach on
every start (the hello, each knob's start, audit mode). Its stderr says which start lacked it."""
import os
import sys

import fake
import vtp


def main():
    if os.environ.get("CHECK_ENV_TOKEN") != "42":
        vtp.die("CHECK_ENV_TOKEN=%r in the environment, expected '42' (VTP_PROBE=%s)"
                % (os.environ.get("CHECK_ENV_TOKEN"), os.environ.get("VTP_PROBE")))
    knobs, scale = fake.make_knobs()
    return vtp.serve(fake.hello("check_env", knobs), lambda req: fake.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
