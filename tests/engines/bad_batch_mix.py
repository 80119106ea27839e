#!/usr/bin/python3
"""bad_batch_mix.py - declares max_batch (BAD_MIX_MAX, default 4) and answers a request of several
sequences with the right shape, the right `sequences` and finite logits, but not what each sequence
gives alone (docs/engine-protocol.md: "a sequence's logits do not depend on the others in the
request"). vtlab's run checks cannot see this; `vtlab engine-check`'s batch check must.
BAD_MIX selects how (a request of one sequence is always answered right, as good.py would):
  ulp     (default) the sequences leak into each other by one ulp: sequence i's first logit row
          moves by one ulp at the vocab index of the next sequence's first token (what a GPU
          kernel reading a neighbour's row, or a reduction over the whole batch, leaves)
  swap    the replies of the request's last two sequences change places (rows of the last one
          first); the header still echoes the request's sequences
  probes  one `logits` record for the whole request (calls 1) instead of one per sequence: a run
          would record other probes batched than one sequence per request
  limit   serves requests of more sequences than its max_batch instead of refusing them
  capture logits and records right, but with capture on each sequence's first residual row
          (every layer and site) is the previous sequence's last: a state carried over from
          one sequence of the request to the next, which a run would read as per-layer
          divergence
Knobs as good.py (FAKE_SCALE, FAKE_UNUSED); deterministic; capture supported."""
import os
import sys

import numpy as np

import fake
import vtp


def mixed(req, scale, mode):
    subs = req.split()
    outs = [fake.response(s, scale) for s in subs]
    blocks = [o["logits"].copy() for o in outs]
    probes = vtp.merge_records([], [r for o in outs for r in o["probes"]])
    if mode == "ulp":
        for i, b in enumerate(blocks):
            v = int(subs[(i + 1) % len(subs)].tokens[0]) % b.shape[1]
            b[0, v] = np.nextafter(b[0, v], np.float32(np.inf))
    elif mode == "swap":
        blocks[-2], blocks[-1] = blocks[-1], blocks[-2]
    elif mode == "probes":
        probes = [vtp.buffer_record("logits", -1, "f32", int(req.tokens.size), 4 * fake.VOCAB)]
    out = {"logits": np.concatenate(blocks, axis=0), "probes": probes}
    if req.capture:
        out["residuals"] = [o["residuals"].copy() for o in outs]
        if mode == "capture":
            for i in range(len(outs) - 1, 0, -1):
                out["residuals"][i][:, :, 0, :] = outs[i - 1]["residuals"][:, :, -1, :]
    return out


def main():
    knobs, scale = fake.make_knobs()
    mode = os.environ.get("BAD_MIX", "ulp")
    if mode not in ("ulp", "swap", "probes", "limit", "capture"):
        vtp.die("BAD_MIX=%s: not one of ulp, swap, probes, limit, capture" % mode)
    hello = fake.hello("bad_batch_mix", knobs)
    hello["max_batch"] = int(os.environ.get("BAD_MIX_MAX", "4"))
    if mode == "limit":
        # the engine's own check of max_batch left out: any number of sequences is served
        check = vtp.check_request
        vtp.check_request = lambda h, p, vocab, cap, max_batch=1: check(h, p, vocab, cap, vtp.MAX_BATCH)
    return vtp.serve(hello, lambda req: fake.response(req, scale), batch_fn=lambda req: mixed(req, scale, mode))


if __name__ == "__main__":
    sys.exit(main())
