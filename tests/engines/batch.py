#!/usr/bin/python3
"""batch.py - good.py's fake engine (fake.py: vocab 64, hidden 8, 2 layers) declaring `max_batch`
in its hello: a forward request may carry several sequences (docs/engine-protocol.md, "Several
sequences in one request"), which it runs in one call as a GPU engine would: each sequence's
state from an empty start, then one logits product over all rows of the request. fake.py computes
every logit row by row in a fixed order, so the bits of a row do not depend on the rows packed
with it: a run through this engine records the same numbers with batches as without.

Environment:
  BATCH_MAX   the max_batch it declares (default 4; 1: the member is still sent, saying 1)
  BATCH_LOG   a file to which it appends one line per request: "SEQUENCES TOKENS"
  BATCH_MAX_RAW  a JSON value to declare as max_batch instead (a test of vtlab's hello checks)
Knobs as good.py (FAKE_SCALE, FAKE_UNUSED). Capture supported; one `logits` buffer record per
sequence (what one request per sequence would give, summed)."""
import json
import os
import sys

import numpy as np

import fake
import vtp


def log_request(req):
    path = os.environ.get("BATCH_LOG")
    if path:
        with open(path, "a") as f:
            f.write("%d %d\n" % (len(req.sequences), int(req.tokens.size)))


def main():
    knobs, scale = fake.make_knobs()
    max_batch = int(os.environ.get("BATCH_MAX", "4"))
    hello = fake.hello("batch", knobs)
    hello["max_batch"] = max_batch
    if os.environ.get("BATCH_MAX_RAW"):
        hello["max_batch"] = json.loads(os.environ["BATCH_MAX_RAW"])

    def forward(req):
        log_request(req)
        return fake.response(req, scale)

    def forward_batch(req):
        log_request(req)
        subs = req.split()
        states = [fake.state(s.tokens) for s in subs]
        lg = fake.logits(np.concatenate(states, axis=0), scale).astype(np.float32)
        probes = vtp.merge_records([], [vtp.buffer_record("logits", -1, "f32", s.tokens.size, 4 * fake.VOCAB)
                                        for s in subs])
        out = {"logits": lg, "probes": probes}
        if req.capture:
            out["residuals"] = [fake.residuals(s).astype(np.float32) for s in states]
        return out
    return vtp.serve(hello, forward, batch_fn=forward_batch)


if __name__ == "__main__":
    sys.exit(main())
