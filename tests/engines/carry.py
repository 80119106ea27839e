#!/usr/bin/python3
"""carry.py - a fake engine with a probe site only it declares, and a defect there (issue 30:
the user's own engine, end to end; tests/cli/test_engine_loop.sh).

The model is fake.py's (vocab 64, hidden 8, 2 layers). The engine carries its running state from
one position to the next through a copy it probes at its own site "kda.state_carry" (one record
per layer), a site vtlab's model does not have.

Knobs:
  CARRY_BF16   bool, numeric: the lever under test - the carried state is rounded to bf16
               (round to nearest even), a small perturbation of the logits.
  CARRY_FAULT  enum none|carry_half, numeric: the replayable defect "carry_half" - with
               CARRY_BF16=1 the carry copies its rows at half length (row bytes from the bf16
               dtype while the buffers are f32): the second half of the state is lost, the
               kda.state_carry record shows bytes_per_row = src_row_bytes / 2 and a violation.
               Without CARRY_BF16 the same code copies whole rows (right by coincidence).
Its commit is "release-0.3.1", a tag, not a commit id: a claim recorded from its runs keeps no
commit (the ledger takes commit ids only) and is placed by its date.
Deterministic, causal; no captures."""
import sys

import numpy as np

import fake
import vtp

SITE = "kda.state_carry"


def to_bf16(x):
    """f64 -> f32 -> bf16 (round to nearest even) -> back to f64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def carry_record(layer, rows, half):
    row = 4 * fake.HIDDEN
    copied = row // 2 if half else row
    rec = {"site": SITE, "layer": layer, "dtype": "f32", "src_dtype": "f32", "calls": 1, "rows": int(rows),
           "bytes_per_row": copied, "src_row_bytes": row, "dst_row_bytes": row, "converting": 0,
           "violations": 1 if half else 0, "rows_unwritten": -1, "detail": ""}
    if half:
        rec["detail"] = "copied %d bytes per row; source row is %d bytes (f32), destination row %d bytes (f32)" % (
            copied, row, row)
    return rec


def main():
    knobs = vtp.Knobs()
    bf16 = knobs.bool("CARRY_BF16", default=False, numeric=True)
    fault = knobs.enum("CARRY_FAULT", ["none", "carry_half"], "none", numeric=True)
    faults = [{"name": "carry_half", "knob": "CARRY_FAULT", "site": SITE,
               "description": "the state carry sizes its rows from the bf16 dtype while copying f32 rows"}]
    hello = vtp.make_hello("carry", "0.3.1", "release-0.3.1", fake.SHA256, fake.VOCAB, fake.HIDDEN, fake.N_LAYERS,
                           fake.LAYER_KINDS, knobs.records, ["logits", SITE], faults, True, False)
    half = bf16 and fault == "carry_half"

    def forward(req):
        s = fake.state(req.tokens)
        if bf16:
            s = to_bf16(s)
        if half:
            s = s.copy()
            s[:, fake.HIDDEN // 2:] = 0.0
        lg = fake.logits(s, 1).astype(np.float32)
        T = lg.shape[0]
        probes = [carry_record(layer, T, half) for layer in range(fake.N_LAYERS)]
        probes.append(vtp.buffer_record("logits", -1, "f32", T, 4 * lg.shape[1]))
        return {"logits": lg, "probes": probes}

    return vtp.serve(hello, forward)


if __name__ == "__main__":
    sys.exit(main())
