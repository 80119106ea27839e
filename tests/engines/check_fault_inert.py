#!/usr/bin/python3
"""check_fault_inert.py - declares a replayable fault that does nothing: `half_rows`, selected by
CHECK_FAULT=half_rows, said to act at `state.copy`, but the copy is the same with it as without
(no violation, no unwritten row, alone or with any other knob). Everything else is check_common.py's
conforming engine, so `vtlab engine-check` fails exactly the fault's replay."""
import sys

import check_common
import fake
import vtp

FAULTS = [{"name": "half_rows", "knob": "CHECK_FAULT", "site": check_common.SITE,
           "description": "said to copy half of each state row; does nothing"}]


def main():
    knobs, scale = fake.make_knobs()
    knobs.enum("CHECK_FAULT", ["none", "half_rows"], "none")             # read, never applied
    return vtp.serve(check_common.hello("check_fault_inert", knobs, FAULTS),
                     lambda req: check_common.response(req, scale))


if __name__ == "__main__":
    sys.exit(main())
