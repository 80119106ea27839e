"""check_common.py - the one copy site shared by the check_*.py test engines of `vtlab engine-check`'s
audit and fault checks (docs/engine-protocol.md, "Conformance").

good.py's model (fake.py) with one more step, written the way an engine's copy looks: the state
rows s [T, HIDDEN] are copied into a buffer of T + 1 rows (the last one padding, weighed by 0 in
the logits), probed as the copy site `state.copy`. In audit mode (VTP_PROBE=audit) the whole
buffer is filled with the f32 sentinel 0x7FA5A5A5 before the copy and the rows of the
destination still holding it are counted; a correct engine then clears what the copy left (to
0, what the buffer holds under VTP_PROBE=on), so that the sentinel never reaches a number: its
logits under audit are bit-identical to those under on.

copy_state's switches are the defects of the test engines:
    half_rows      a fault's: each row copied at half length (its second half left unwritten)
    keep_sentinel  the sentinel is not cleared after counting: it leaks (NaN logits)
    clear_to       the value the sentinel is cleared to (0: the buffer's value under on)
"""
import os

import numpy as np

import fake
import vtp

SITE = "state.copy"
SENTINEL = np.uint32(0x7FA5A5A5)


def audit_mode():
    return os.environ.get("VTP_PROBE") == "audit"


def hello(name, knobs, faults=()):
    h = fake.hello(name, knobs)
    h["probe_sites"] = list(h["probe_sites"]) + [SITE]
    h["faults"] = list(faults)
    return h


def copy_state(s, half_rows=False, keep_sentinel=False, clear_to=0.0):
    """s [T, H] f64 -> (buffer [T + 1, H] f64 as the logits read it, the state.copy record)."""
    T, H = s.shape
    buf = np.zeros((T + 1, H), dtype=np.float32)
    audit = audit_mode()
    if audit:
        buf.view(np.uint32)[:] = SENTINEL
    n = H // 2 if half_rows else H
    buf[:T, :n] = s[:, :n]
    bits = buf[:T].view(np.uint32) == SENTINEL
    unwritten = int(np.any(bits, axis=1).sum()) if audit else -1
    if audit and not keep_sentinel:
        buf[buf.view(np.uint32) == SENTINEL] = clear_to      # the logits read zeros, not NaNs
    row = 4 * H
    rec = {"site": SITE, "layer": -1, "dtype": "f32", "src_dtype": "f32", "calls": 1, "rows": T,
           "bytes_per_row": 4 * n, "src_row_bytes": row, "dst_row_bytes": row, "converting": 0,
           "violations": 0, "rows_unwritten": unwritten, "detail": ""}
    if n != H or unwritten > 0:
        rec["violations"] = 1
        rec["detail"] = "copied %d bytes per row; rows are %d bytes%s" % (
            4 * n, row, "; %d destination rows left unwritten" % unwritten if unwritten > 0 else "")
    with np.errstate(invalid="ignore"):                     # a kept sentinel is a NaN: cast it quietly
        return buf.astype(np.float64), rec


def response(req, scale, pad_weight=0.0, state_fn=None, **kw):
    """good.py's response, its state (state_fn(s) when given) read through the copy; the padding
    row weighed by pad_weight (0 * a leaked NaN is still NaN: the sentinel must be cleared)."""
    s = fake.state(req.tokens)
    if state_fn is not None:
        s = state_fn(s)
    buf, rec = copy_state(s, **kw)
    T = s.shape[0]
    x = buf[:T] + pad_weight * buf[T]
    lg = fake.logits(x, scale).astype(np.float32)
    out = {"logits": lg, "probes": [vtp.buffer_record("logits", -1, "f32", T, 4 * lg.shape[1]), rec]}
    if req.capture:
        out["residuals"] = fake.residuals(s).astype(np.float32)
    return out
