#!/usr/bin/python3
"""engine.py - the independent float64 numpy reference (kimi_ref.py) served over the vtlab
engine protocol (docs/engine-protocol.md), for `"engine": ["tests/reference/engine.py"]`.

    tests/reference/engine.py [--model DIR]        (else the model dir is $VTP_MODEL)

Knobs (environment, declared in the hello, both numeric):
    REF_ROUTER_WEIGHTS  unbiased|biased          kimi_ref Opts.router_weights (default unbiased)
    REF_KV_NORM_EPS     transformers|config      kimi_ref Opts.kv_norm_eps    (default transformers)
model.sha256 is the vtlab model hash of DIR; the logits are kimi_ref.forward's float64 values
sent as float32 (bit-identical to `kimi_ref.py --out`). Residual captures (capture true): per
layer the stream after the attention add and after the FFN add, from kimi_ref's dump. One
`logits` buffer probe record per forward."""
import argparse
import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "engines"))
import kimi_ref  # noqa: E402
import vtp  # noqa: E402


def layer_kinds(cfg):
    att = "".join("K" if k == "kda" else "M" for k in cfg.kinds)
    ffn = "".join("E" if cfg.is_moe(i) else "D" for i in range(cfg.L))
    return att + "/" + ffn


def residuals(cfg, dump):
    """[L][2][T][D]: h after the attention add, h after the FFN add (kimi_ref.run_tokens'
    h = h + a, h = h + f, recomputed from the dumped operands: the same f64 additions)."""
    out = []
    for i in range(cfg.L):
        prev = dump["embed"] if i == 0 else dump["L%d.resid" % (i - 1)]
        out.append([prev + dump["L%d.mixer_out" % i], dump["L%d.resid" % i]])
    return np.array(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="kimi_ref.py over the vtlab engine protocol")
    ap.add_argument("--model", help="model dir (config.json + *.safetensors); default $VTP_MODEL")
    a = ap.parse_args(argv)
    model_dir = a.model or os.environ.get("VTP_MODEL")
    if not model_dir:
        vtp.die("no model: give --model DIR or set VTP_MODEL")
    knobs = vtp.Knobs()
    router = knobs.enum("REF_ROUTER_WEIGHTS", ["unbiased", "biased"], "unbiased", numeric=True)
    kv_eps = knobs.enum("REF_KV_NORM_EPS", ["transformers", "config"], "transformers", numeric=True)
    try:
        m = kimi_ref.load_model(model_dir)
        sha = vtp.model_sha256(model_dir)
    except (OSError, ValueError, KeyError) as e:
        vtp.die("%s: %s" % (model_dir, e))
    opts = kimi_ref.Opts(router_weights=router, kv_norm_eps=kv_eps)
    with open(os.path.join(HERE, "kimi_ref.py"), "rb") as f:
        version = "1.0+kimi_ref." + hashlib.sha256(f.read()).hexdigest()[:12]
    c = m.cfg
    hello = vtp.make_hello("kimi_ref", version, "", sha, c.vocab, c.D, c.L, layer_kinds(c), knobs.records,
                           ["logits"], [], deterministic=True, capture=True)

    def forward(req):
        dump = {} if req.capture else None
        lg = kimi_ref.forward(m, [int(t) for t in req.tokens], opts, dump).astype("<f4")
        out = {"logits": lg, "probes": [vtp.buffer_record("logits", -1, "f32", lg.shape[0], 4 * c.vocab)]}
        if req.capture:
            out["residuals"] = residuals(c, dump).astype("<f4")
        return out
    return vtp.serve(hello, forward)


if __name__ == "__main__":
    sys.exit(main())
