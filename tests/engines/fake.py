"""fake.py - the tiny fake model behind tests/engines/good.py and the deliberately broken test
engines (no checkpoint: vocab 64, hidden 8, 2 layers).

The "model": s_i = mean(E[tokens[0..i]]) (a running mean, so position i depends only on
tokens[0..i]); residual (layer l, site k) = s * (2l + k + 1); logits = scale * s . W^T.
Every value is computed row by row in a fixed order, so a row's bits do not depend on the
length of the request (a prefix request gives bit-identical rows)."""
import hashlib

import numpy as np

import vtp

VOCAB, HIDDEN, N_LAYERS = 64, 8, 2
_rng = np.random.default_rng(20261201)
E = _rng.standard_normal((VOCAB, HIDDEN))
W = _rng.standard_normal((VOCAB, HIDDEN))
SHA256 = hashlib.sha256(b"vtlab tests/engines/fake.py: vocab 64, hidden 8, 2 layers, v1").hexdigest()
LAYER_KINDS = "K?/DE"
PROBE_SITES = ["logits"]


def make_knobs(scale_read=True):
    """FAKE_SCALE (int 1..4, numeric) and FAKE_UNUSED (bool, read, honestly not numeric)."""
    knobs = vtp.Knobs()
    scale = knobs.int("FAKE_SCALE", 1, 4, default=1, numeric=True, read=scale_read)
    knobs.bool("FAKE_UNUSED", default=False, numeric=False)
    return knobs, scale


def hello(name, knobs, deterministic=True, capture=True):
    return vtp.make_hello(name, "1.0", "", SHA256, VOCAB, HIDDEN, N_LAYERS, LAYER_KINDS, knobs.records,
                          PROBE_SITES, [], deterministic, capture)


def state(tokens, causal=True):
    x = E[np.asarray(tokens, dtype=np.int64)]
    T = x.shape[0]
    if causal:
        return np.cumsum(x, axis=0) / np.arange(1, T + 1, dtype=np.float64)[:, None]
    return np.broadcast_to(x.mean(axis=0), x.shape) + 0.25 * x       # every row sees every token


def logits(s, scale):
    acc = s[:, None, 0] * W[None, :, 0]
    for k in range(1, HIDDEN):
        acc = acc + s[:, None, k] * W[None, :, k]
    return scale * acc


def residuals(s):
    return np.stack([np.stack([s * (2 * l + k + 1) for k in range(2)]) for l in range(N_LAYERS)])


def response(req, scale, causal=True):
    s = state(req.tokens, causal)
    lg = logits(s, scale).astype(np.float32)
    out = {"logits": lg, "probes": [vtp.buffer_record("logits", -1, "f32", lg.shape[0], 4 * lg.shape[1])]}
    if req.capture:
        out["residuals"] = residuals(s).astype(np.float32)
    return out
