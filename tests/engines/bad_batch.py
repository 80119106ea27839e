#!/usr/bin/python3
"""bad_batch.py - declares max_batch 4 but answers a request of several sequences wrongly
(BAD_BATCH selects how; a request of one sequence is answered right, as batch.py would):
  fewer   (default) leaves out the last sequence: its header says the sequences and tokens it
          did answer, and the payload agrees with them, not with the request
  joined  ignores `sequences`: runs the request's tokens as one sequence and answers as if
          there were one (no `sequences` in the response; tokens and payload the request's) -
          the likeliest bug of an engine that declares max_batch without handling it
vtlab must fail the run (FAILED, with the reason), never score these logits."""
import os
import sys

import numpy as np

import fake
import vtp


def main():
    knobs, scale = fake.make_knobs()
    mode = os.environ.get("BAD_BATCH", "fewer")
    hello = fake.hello("bad_batch", knobs)
    hello["max_batch"] = 4

    def forward_batch(req):
        if mode == "joined":
            out = fake.response(vtp.Request(req.id, req.tokens, req.capture, req.header), scale)
            out["header"] = {"sequences": vtp.OMIT}
            return out
        subs = req.split()[:-1]
        out = vtp.forward_each(vtp.Request(req.id, np.concatenate([s.tokens for s in subs]), req.capture,
                                           req.header, [s.tokens.size for s in subs]),
                               lambda r: fake.response(r, scale))
        out["header"] = {"sequences": [int(s.tokens.size) for s in subs]}
        return out
    return vtp.serve(hello, lambda req: fake.response(req, scale), batch_fn=forward_batch)


if __name__ == "__main__":
    sys.exit(main())
