#!/usr/bin/python3
"""localize_engine.py - a fake engine with a scoped lever (issue 35: vtlab localize on an engine that
is not vtlab's model; tests/cli/test_localize.sh).

The model: vocab 64, hidden 16, 8 layers. Each position starts as the running mean of its token
embeddings; layer l adds 0.5 * tanh(s A_l) to it; logits = 4 * s W^T. Deterministic, causal,
with residual captures (layer l's residual after both of its sites is the state after layer l).

Knobs:
  LOC_BF16           bool, numeric, "scope": "layers": the lever - the state each layer leaves is
                     rounded to bf16 (round to nearest even). Its scope is read from LOC_BF16_LAYERS
                     ("all" when unset; "none"; layers and ranges "0-3,7"), and the hello reports it
                     back canonical in "scope_value" (docs/engine-protocol.md, "Scoped knobs").
  LOC_LOSSY_LAYERS   string, numeric: the planted fault - at these layers the lever's rounding keeps
                     no mantissa bit (powers of two) instead of bf16's 7 (nothing where the lever does not act).
The residual.stream probe of layer l says bf16 where the lever acted on l, else f32.
LOC_IGNORE_SCOPE=1 in the environment (not a knob: a broken build, for engine-check's scope check)
makes the engine apply the lever on every layer while it reports the scope it was given.
LOC_HELLO_STYLE=declared (not a knob either): another way to write the hello, as an engine written
from the issue's words might - "scope": "layer", no scope_value, and LOC_BF16_LAYERS declared as a
string knob of its own (vtlab takes it as the scope)."""
import re
import sys

import numpy as np

import vtp

VOCAB, HIDDEN, N_LAYERS = 64, 16, 8
_rng = np.random.default_rng(20261205)
E = _rng.standard_normal((VOCAB, HIDDEN))
A = _rng.standard_normal((N_LAYERS, HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)
W = _rng.standard_normal((VOCAB, HIDDEN))
SHA256 = "5" * 64
KINDS = "K" * N_LAYERS + "/" + "E" * N_LAYERS


def parse_layers(name, text):
    """A layer set of this model's layers (whole layers only): (set, canonical text); exit 2 if bad."""
    if text in ("", "all"):
        return set(range(N_LAYERS)), "all"
    if text == "none":
        return set(), "none"
    out = set()
    for item in text.split(","):
        m = re.fullmatch(r"(\d{1,3})(?:-(\d{1,3}))?", item)
        a = int(m.group(1)) if m else -1
        b = int(m.group(2) or a) if m else -1
        if not m or b < a or b >= N_LAYERS:
            vtp.die("%s=%s: expected all, none or layers 0-%d like 0-3,7" % (name, text, N_LAYERS - 1))
        out.update(range(a, b + 1))
    return out, canonical(out)


def canonical(layers):
    items, l = [], 0
    while l < N_LAYERS:
        if l not in layers:
            l += 1
            continue
        e = l
        while e + 1 in layers:
            e += 1
        items.append(str(l) if e == l else "%d-%d" % (l, e))
        l = e + 1
    return ",".join(items) or "none"


def round_bits(x, bits):
    """f64 -> f32 with `bits` mantissa bits (round to nearest even) -> f64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    u = (u + ((1 << (drop - 1)) - 1) + ((u >> drop) & 1)) & ~np.uint64((1 << drop) - 1) & 0xFFFFFFFF
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def main():
    knobs = vtp.Knobs()
    lever = knobs.bool("LOC_BF16", default=False, numeric=True)
    if knobs.env.get("LOC_HELLO_STYLE") == "declared":
        knobs.records[-1]["scope"] = "layer"
        scope, _ = parse_layers("LOC_BF16_LAYERS", knobs.string("LOC_BF16_LAYERS", default="all", numeric=True))
    else:
        scope, scope_text = parse_layers("LOC_BF16_LAYERS", knobs.env.get("LOC_BF16_LAYERS", "all"))
        knobs.records[-1]["scope"] = "layers"
        knobs.records[-1]["scope_value"] = scope_text
    lossy_text = knobs.string("LOC_LOSSY_LAYERS", default="none", numeric=True)
    lossy, _ = parse_layers("LOC_LOSSY_LAYERS", lossy_text)
    if knobs.env.get("LOC_IGNORE_SCOPE") == "1":
        scope = set(range(N_LAYERS))
    hello = vtp.make_hello("localize-engine", "0.1", "", SHA256, VOCAB, HIDDEN, N_LAYERS, KINDS, knobs.records,
                           ["residual.stream", "logits"], [], True, True)

    def forward(req):
        x = E[np.asarray(req.tokens, dtype=np.int64)]
        T = x.shape[0]
        s = np.cumsum(x, axis=0) / np.arange(1, T + 1, dtype=np.float64)[:, None]
        resid, probes = [], []
        for l in range(N_LAYERS):
            s = s + 0.5 * np.tanh(s @ A[l])
            acts = lever and l in scope
            if acts:
                s = round_bits(s, 0 if l in lossy else 7)
            resid.append(np.stack([s, s]))
            dt = "bf16" if acts else "f32"
            probes.append(vtp.buffer_record("residual.stream", l, dt, T, HIDDEN * (2 if acts else 4)))
        lg = (4.0 * (s @ W.T)).astype(np.float32)
        probes.append(vtp.buffer_record("logits", -1, "f32", T, 4 * VOCAB))
        out = {"logits": lg, "probes": probes}
        if req.capture:
            out["residuals"] = np.stack(resid).astype(np.float32)
        return out

    return vtp.serve(hello, forward)


if __name__ == "__main__":
    sys.exit(main())
