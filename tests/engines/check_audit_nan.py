#!/usr/bin/python3
"""check_audit_nan.py - conforms to every rule `vtlab engine-check` tried before its audit-mode check
(it passed), but breaks the audit sentinel contract (docs/engine-protocol.md, "logits") under
VTP_PROBE=audit only. Its copy site is check_common.py's `state.copy`; CHECK_AUDIT_BUG (from its
environment, not a knob) picks the breach:

    nan      (default) the sentinel is never cleared: the padding row, weighed by 0, makes every
             logit NaN under audit (an engine whose sentinel handling puts NaNs in its state)
    count    the padding row is counted as an unwritten row, without a violation
             (rows_unwritten 1, violations 0: counted inconsistently)
    over     the whole buffer, padding row included, is counted: rows_unwritten T + 1 of T rows
    numbers  the sentinel is cleared to 1.0 where the buffer holds 0 under on, and the padding row
             is weighed by 1e-6: finite logits, but not bit-identical to those under on
Under VTP_PROBE=on it is good.py with one more (clean) probe record."""
import os
import sys

import check_common
import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    bug = os.environ.get("CHECK_AUDIT_BUG", "nan")
    if bug not in ("nan", "count", "over", "numbers"):
        vtp.die("CHECK_AUDIT_BUG=%s: not one of nan|count|over|numbers" % bug)

    def forward(req):
        if bug == "nan":
            return check_common.response(req, scale, keep_sentinel=True)
        if bug == "numbers":
            return check_common.response(req, scale, pad_weight=1e-6, clear_to=1.0)
        out = check_common.response(req, scale)
        rec = out["probes"][-1]
        if check_common.audit_mode() and bug == "count":
            rec["rows_unwritten"] = 1                        # the one broken rule: no violation counted
        elif check_common.audit_mode():
            rec.update(rows_unwritten=rec["rows"] + 1, violations=1, detail="%d destination rows left unwritten"
                       % (rec["rows"] + 1))                  # more unwritten rows than rows
        return out
    return vtp.serve(check_common.hello("check_audit_nan", knobs), forward)


if __name__ == "__main__":
    sys.exit(main())
