#!/usr/bin/python3
"""unread_knob.py - good.py except that it never reads FAKE_SCALE: its hello reports it with
read false and value "1" (the default, which it uses), whatever the environment says. An arm
that sets FAKE_SCALE=3 gets a knob that never took effect (audit rule R3)."""
import sys

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs(scale_read=False)     # scale is the default, 1
    return vtp.serve(fake.hello("unread_knob", knobs), lambda req: fake.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
