#!/usr/bin/python3
"""check_fault_ok.py - a conforming engine whose declared fault works, but only together with another
knob, as devengine's scatter_row_bytes needs DEV_BF16_STREAM=1 (the hello cannot say so).

Knobs: good.py's, CHECK_F16_STATE (bool, numeric: the state rounded to f16, as a narrow stream)
and CHECK_FAULT (none|row_bytes_from_state). The fault `row_bytes_from_state` sizes the rows of
check_common.py's `state.copy` from the state's dtype while it copies f32 rows: with the f16 state
each row is copied at half length (a violation; under audit rows_unwritten = T, the rest cleared
to 0); with the f32 state the same code copies whole rows, right by coincidence."""
import sys

import numpy as np

import check_common
import fake
import vtp

FAULTS = [{"name": "row_bytes_from_state", "knob": "CHECK_FAULT", "site": check_common.SITE,
           "description": "state.copy sizes rows from the state dtype while copying f32 rows"}]


def main():
    knobs, scale = fake.make_knobs()
    f16 = knobs.bool("CHECK_F16_STATE", default=False, numeric=True)
    fault = knobs.enum("CHECK_FAULT", ["none", "row_bytes_from_state"], "none") != "none"

    def state(s):
        return s.astype(np.float16).astype(np.float64) if f16 else s
    return vtp.serve(check_common.hello("check_fault_ok", knobs, FAULTS),
                     lambda req: check_common.response(req, scale, state_fn=state, half_rows=fault and f16))


if __name__ == "__main__":
    sys.exit(main())
