#!/usr/bin/python3
"""kimi_ref.py - independent float64 numpy reference of the Kimi-Linear forward pass.

Written from the project's Kimi-Linear forward-pass spec and the public sources it names
(transformers models/kimi_linear, flash-linear-attention fla/ops/kda/naive.py, vLLM
models/kimi_linear.py + layers/kda.py). Nothing here is derived from vtlab's C code.

Library:
    model = load_model(DIR)                      # config.json + model.safetensors (or sharded)
    logits = forward(model, ids, opts)           # prefill, f64 [T, vocab]
    logits = forward_decode(model, ids, opts)    # token by token with explicit caches
CLI:
    kimi_ref.py --model DIR --tokens 5,17,3 --out FILE        # raw LE float32 [T, vocab]
                [--out-f64 FILE] [--router-weights unbiased|biased]
                [--kv-norm-eps transformers|config] [--dump FILE.npz] [--self-test]

Semantics (see README.md for the sources behind each choice):
  * everything in float64; weights of any stored dtype (F32/BF16/F16/F64) are widened to f64;
  * RMSNorm  x * 1/sqrt(mean(x^2) + eps) * w;
  * KDA: separate depthwise causal convs (w[c,0,K-1] multiplies the current token) + SiLU,
    g = -exp(A_log[h]) * softplus(f + dt_bias) (softplus threshold 20), beta = sigmoid(x.Wb^T),
    L2 norm x / sqrt(sum x^2 + 1e-6) on q and k per head, q *= d^-0.5, delta rule with
    per-key-channel decay, output read from the updated state, gated RMSNorm (norm, * o_norm,
    * sigmoid(gate)) with eps = rms_norm_eps;
  * MLA without rotary, kv_a_layernorm eps 1e-6 ("transformers") or rms_norm_eps ("config");
  * MoE: sigmoid router, top-k on s + e_score_correction_bias (exact ties -> lower expert index),
    weights s[idx] ("unbiased", default) or (s + bias)[idx] ("biased"), renormalise
    w / (sum w + 1e-20) when moe_renormalize and top-k > 1, times routed_scaling_factor; shared experts always on.
  * layer i has a MoE block when i >= first_k_dense_replace and i % moe_layer_freq == 0.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------- checkpoint I/O

_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
}


def read_safetensors(path):
    """Parse one .safetensors file by hand; returns {name: float64 ndarray}."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short for a safetensors header" % path)
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ValueError("%s: header length %d past end of file" % (path, hlen))
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        npdt, size = _DTYPES[dt]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if e - b != n * size or base + e > len(raw):
            raise ValueError("%s: tensor %s: bad data_offsets" % (path, name))
        a = np.frombuffer(raw, dtype=npdt, count=n, offset=base + b)
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.astype(np.float64).reshape(shape)
    return out


def load_weights(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            wmap = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(wmap.values())):
            out.update(read_safetensors(os.path.join(model_dir, shard)))
        missing = [n for n in wmap if n not in out]
        if missing:
            raise ValueError("index names tensors missing from the shards: %s" % missing[:5])
        return out
    raise FileNotFoundError("%s: neither model.safetensors nor model.safetensors.index.json" % model_dir)


# ----------------------------------------------------------------------------- config


class Config:
    """The config.json fields the forward pass reads (HF kimi_linear names, with the
    transformers-internal aliases accepted as fallbacks)."""

    def __init__(self, cfg):
        def get(*names, default=None):
            for n in names:
                if n in cfg and cfg[n] is not None:
                    return cfg[n]
            return default

        self.raw = cfg
        self.vocab = int(cfg["vocab_size"])
        self.D = int(cfg["hidden_size"])
        self.L = int(cfg["num_hidden_layers"])
        self.I = int(cfg["intermediate_size"])
        self.eps = float(cfg["rms_norm_eps"])
        la = cfg["linear_attn_config"]
        self.kda_H = int(la["num_heads"])
        self.kda_d = int(la["head_dim"])
        self.conv_K = int(la.get("short_conv_kernel_size", 4))
        kda = set(int(i) for i in la.get("kda_layers", []))
        full = set(int(i) for i in la.get("full_attn_layers", []))
        self.kinds = []
        for i in range(self.L):
            if (i + 1) in kda and (i + 1) not in full:
                self.kinds.append("kda")
            elif (i + 1) in full and (i + 1) not in kda:
                self.kinds.append("mla")
            else:
                raise ValueError("layer %d (1-based %d) is not exactly one of kda/full_attn" % (i, i + 1))
        self.mla_H = int(cfg["num_attention_heads"])
        if get("q_lora_rank") is not None:
            raise ValueError("q_lora_rank must be null")
        if not get("mla_use_nope", default=True):
            raise ValueError("only mla_use_nope=true (no rotary) is implemented")
        self.r_kv = int(cfg["kv_lora_rank"])
        self.nope = int(cfg["qk_nope_head_dim"])
        self.rope = int(cfg["qk_rope_head_dim"])
        self.dv = int(cfg["v_head_dim"])
        self.E = int(get("num_experts", "n_routed_experts"))
        self.topk = int(get("num_experts_per_token", "num_experts_per_tok"))
        self.Im = int(cfg["moe_intermediate_size"])
        self.n_shared = int(get("num_shared_experts", "n_shared_experts", default=0))
        self.first_dense = int(get("first_k_dense_replace", default=0))
        self.moe_freq = int(get("moe_layer_freq", default=1))
        self.scale = float(get("routed_scaling_factor", default=1.0))
        self.renorm = bool(get("moe_renormalize", "norm_topk_prob", default=True))
        act = get("moe_router_activation_func", default="sigmoid")
        if act != "sigmoid":
            raise ValueError("only the sigmoid router is implemented (got %r)" % act)
        self.grouped = bool(get("use_grouped_topk", default=False))
        self.n_group = int(get("num_expert_group", "n_group", default=1))
        self.topk_group = int(get("topk_group", default=1))

    def is_moe(self, i):
        return i >= self.first_dense and i % self.moe_freq == 0


class Model:
    def __init__(self, cfg, w):
        self.cfg = cfg
        self.w = w

    def t(self, name):
        if name not in self.w:
            raise KeyError("checkpoint lacks tensor %s" % name)
        return self.w[name]


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Config(json.load(f))
    return Model(cfg, load_weights(model_dir))


class Opts:
    def __init__(self, router_weights="unbiased", kv_norm_eps="transformers", router_renorm="moonshot"):
        if router_weights not in ("unbiased", "biased"):
            raise ValueError("router_weights: unbiased|biased")
        if router_renorm not in ("moonshot", "always"):
            raise ValueError("router_renorm: moonshot|always")
        self.router_renorm = router_renorm
        if kv_norm_eps not in ("transformers", "config"):
            raise ValueError("kv_norm_eps: transformers|config")
        self.router_weights = router_weights
        self.kv_norm_eps = kv_norm_eps


# ----------------------------------------------------------------------------- elementwise ops


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def silu(z):
    return z * sigmoid(z)


def softplus(z):
    # torch.nn.functional.softplus(beta=1, threshold=20)
    return np.where(z > 20.0, z, np.log1p(np.exp(np.minimum(z, 20.0))))


def l2norm(x, eps=1e-6):
    # FLA l2norm / transformers l2norm: x * rsqrt(sum(x^2) + eps); eps inside the sqrt
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def linear(x, W):
    return x @ W.T


def swiglu(x, Wgate, Wup, Wdown):
    return linear(silu(linear(x, Wgate)) * linear(x, Wup), Wdown)


# ----------------------------------------------------------------------------- KDA


def _kda_params(m, i):
    c, p = m.cfg, "model.layers.%d.self_attn." % i
    H, d = c.kda_H, c.kda_d
    return dict(
        Wq=m.t(p + "q_proj.weight"), Wk=m.t(p + "k_proj.weight"), Wv=m.t(p + "v_proj.weight"),
        cq=m.t(p + "q_conv1d.weight").reshape(H * d, -1),
        ck=m.t(p + "k_conv1d.weight").reshape(H * d, -1),
        cv=m.t(p + "v_conv1d.weight").reshape(H * d, -1),
        A=np.exp(m.t(p + "A_log").reshape(H)),
        dt_bias=m.t(p + "dt_bias").reshape(H * d),
        Wfa=m.t(p + "f_a_proj.weight"), Wfb=m.t(p + "f_b_proj.weight"),
        Wb=m.t(p + "b_proj.weight"),
        Wga=m.t(p + "g_a_proj.weight"), Wgb=m.t(p + "g_b_proj.weight"),
        onorm=m.t(p + "o_norm.weight"), Wo=m.t(p + "o_proj.weight"),
    )


def causal_conv(x0, w, hist=None):
    """Depthwise causal conv. x0 [T, P] pre-conv inputs, w [P, K] with w[:, K-1] on the
    current token; hist [K-1, P] the previous inputs (zeros at sequence start)."""
    T, P = x0.shape
    K = w.shape[1]
    if hist is None:
        hist = np.zeros((K - 1, P))
    xp = np.concatenate([hist, x0], axis=0)          # row K-1+t is token t
    y = np.zeros((T, P))
    for j in range(K):                                # tap j sees token t-(K-1)+j
        y += w[:, j] * xp[j:j + T]
    return y


def kda_gates(x, p, c):
    """x [T, D] normed input -> (g [T,H,d], beta [T,H], gate [T,H,d])."""
    T = x.shape[0]
    H, d = c.kda_H, c.kda_d
    f = linear(linear(x, p["Wfa"]), p["Wfb"])                              # [T, P]
    g = -p["A"][None, :, None] * softplus(f + p["dt_bias"]).reshape(T, H, d)
    beta = sigmoid(linear(x, p["Wb"]))                                     # [T, H]
    gg = linear(linear(x, p["Wga"]), p["Wgb"]).reshape(T, H, d)
    return g, beta, gg


def kda_recurrence(q, k, v, g, beta, S):
    """Delta rule with per-key-channel decay. q,k,v,g [T,H,d]; beta [T,H]; S [H,dk,dv]
    (modified in place). q, k already L2-normalised, q already scaled."""
    T = q.shape[0]
    o = np.zeros_like(v)
    for t in range(T):
        S *= np.exp(g[t])[:, :, None]                        # decay row i (key channel)
        u = np.einsum("hi,hij->hj", k[t], S)                 # prediction with decayed state
        delta = beta[t][:, None] * (v[t] - u)
        S += k[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hi,hij->hj", q[t], S)              # read with updated state
    return o


def kda_layer(m, i, x, state=None, trace=None):
    """x [T, D] normed. state None (prefill from zero) or a dict with 'conv' {q,k,v: [K-1,P]}
    and 'S' [H,d,d], updated in place (decode / continuation)."""
    c = m.cfg
    p = _kda_params(m, i)
    T = x.shape[0]
    H, d = c.kda_H, c.kda_d
    P = H * d
    if state is None:
        state = new_kda_state(c)
    x0 = {"q": linear(x, p["Wq"]), "k": linear(x, p["Wk"]), "v": linear(x, p["Wv"])}
    y = {}
    for n, wn in (("q", "cq"), ("k", "ck"), ("v", "cv")):
        y[n] = silu(causal_conv(x0[n], p[wn], state["conv"][n]))
        allx = np.concatenate([state["conv"][n], x0[n]], axis=0)
        state["conv"][n] = allx[allx.shape[0] - (c.conv_K - 1):].copy()
    q = l2norm(y["q"].reshape(T, H, d)) * d ** -0.5
    k = l2norm(y["k"].reshape(T, H, d))
    v = y["v"].reshape(T, H, d)
    g, beta, gg = kda_gates(x, p, c)
    o = kda_recurrence(q, k, v, g, beta, state["S"])
    yo = rmsnorm(o, p["onorm"], c.eps) * sigmoid(gg)
    out = linear(yo.reshape(T, P), p["Wo"])
    if trace is not None:
        trace.update(q=q, k=k, v=v, g=g, beta=beta, core=o, gated=yo)
    return out


def new_kda_state(c):
    P = c.kda_H * c.kda_d
    return {"conv": {n: np.zeros((c.conv_K - 1, P)) for n in "qkv"},
            "S": np.zeros((c.kda_H, c.kda_d, c.kda_d))}


# ----------------------------------------------------------------------------- MLA


def mla_layer(m, i, x, opts, cache=None, trace=None):
    """x [T, D] normed. cache None (prefill) or a dict with 'cn' [N, r_kv] and 'krot'
    [N, rope] of earlier tokens, extended in place."""
    c, p = m.cfg, "model.layers.%d.self_attn." % i
    T = x.shape[0]
    Nh, nope, rope, dv, r = c.mla_H, c.nope, c.rope, c.dv, c.r_kv
    q = linear(x, m.t(p + "q_proj.weight")).reshape(T, Nh, nope + rope)
    ca = linear(x, m.t(p + "kv_a_proj_with_mqa.weight"))
    ckv, krot = ca[:, :r], ca[:, r:]
    kv_eps = 1e-6 if opts.kv_norm_eps == "transformers" else c.eps
    cn = rmsnorm(ckv, m.t(p + "kv_a_layernorm.weight"), kv_eps)
    if cache is None:
        cache = {"cn": np.zeros((0, r)), "krot": np.zeros((0, rope))}
    past = cache["cn"].shape[0]
    cache["cn"] = np.concatenate([cache["cn"], cn], axis=0)
    cache["krot"] = np.concatenate([cache["krot"], krot], axis=0)
    N = cache["cn"].shape[0]
    kv = linear(cache["cn"], m.t(p + "kv_b_proj.weight")).reshape(N, Nh, nope + dv)
    k = np.concatenate([kv[:, :, :nope], np.broadcast_to(cache["krot"][:, None, :], (N, Nh, rope))], axis=2)
    v = kv[:, :, nope:]
    scale = (nope + rope) ** -0.5
    s = np.einsum("thd,nhd->htn", q, k) * scale                   # [Nh, T, N]
    qpos = past + np.arange(T)
    mask = np.arange(N)[None, :] > qpos[:, None]                   # causal
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(axis=-1, keepdims=True)
    o = np.einsum("htn,nhd->thd", a, v).reshape(T, Nh * dv)
    if trace is not None:
        trace.update(q=q, cn=cn, krot=krot, attn_out=o)
    return linear(o, m.t(p + "o_proj.weight"))


# ----------------------------------------------------------------------------- FFN


def topk_lower_index(scores, k):
    """Indices of the k largest entries; exact ties go to the lower index."""
    order = np.argsort(-scores, kind="stable")
    return order[:k]


def route(c, s, bias, opts):
    """s [E] sigmoid scores, bias [E]. Returns (idx [k], w [k])."""
    sc = s + bias
    if c.grouped and c.n_group > 1:
        # group-limited choice as in transformers KimiLinearTopkRouter: a group's score is the
        # sum of its top-2 biased scores; keep topk_group groups, mask the rest
        gs = sc.reshape(c.n_group, -1)
        gscore = np.array([np.sort(r)[::-1][:2].sum() for r in gs])
        keep = topk_lower_index(gscore, c.topk_group)
        m = np.full(c.n_group, False)
        m[keep] = True
        sc = np.where(np.repeat(m, c.E // c.n_group), sc, -np.inf)
    idx = topk_lower_index(sc, c.topk)
    w = (s + bias)[idx] if opts.router_weights == "biased" else s[idx]
    # Moonshot's original gate renormalises only with top_k > 1; the transformers port
    # renormalises for every top_k (a top-1 weight becomes 1)
    if c.renorm and (c.topk > 1 or opts.router_renorm == "always"):
        w = w / (w.sum() + 1e-20)
    return idx, w * c.scale


def moe_block(m, i, x, opts, trace=None):
    c, p = m.cfg, "model.layers.%d.block_sparse_moe." % i
    T = x.shape[0]
    s = sigmoid(linear(x, m.t(p + "gate.weight")))                 # [T, E]
    bias = m.t(p + "gate.e_score_correction_bias").reshape(c.E)
    y = np.zeros_like(x)
    routes = [route(c, s[t], bias, opts) for t in range(T)]
    for e in range(c.E):
        rows, wts = [], []
        for t, (idx, w) in enumerate(routes):
            hit = np.nonzero(idx == e)[0]
            if hit.size:
                rows.append(t)
                wts.append(w[hit[0]])
        if not rows:
            continue
        pe = p + "experts.%d." % e
        ye = swiglu(x[rows], m.t(pe + "w1.weight"), m.t(pe + "w3.weight"), m.t(pe + "w2.weight"))
        y[rows] += np.array(wts)[:, None] * ye
    if c.n_shared > 0:
        ps = p + "shared_experts."
        y += swiglu(x, m.t(ps + "gate_proj.weight"), m.t(ps + "up_proj.weight"), m.t(ps + "down_proj.weight"))
    if trace is not None:
        trace.update(router_scores=s, topk_idx=np.array([r[0] for r in routes]),
                     topk_w=np.array([r[1] for r in routes]))
    return y


def ffn(m, i, x, opts, trace=None):
    if m.cfg.is_moe(i):
        return moe_block(m, i, x, opts, trace)
    p = "model.layers.%d.mlp." % i
    return swiglu(x, m.t(p + "gate_proj.weight"), m.t(p + "up_proj.weight"), m.t(p + "down_proj.weight"))


# ----------------------------------------------------------------------------- model


def new_cache(m):
    return [new_kda_state(m.cfg) if k == "kda" else None for k in m.cfg.kinds]


def run_tokens(m, ids, opts, cache, dump=None):
    """Runs ids (a chunk of the sequence) through the model, continuing from cache (a list,
    one entry per layer, updated in place). Returns logits [T, vocab]."""
    c = m.cfg
    ids = np.asarray(ids, dtype=np.int64)
    if ids.min() < 0 or ids.max() >= c.vocab:
        raise ValueError("token id out of range [0, %d)" % c.vocab)
    h = m.t("model.embed_tokens.weight")[ids].copy()
    if dump is not None:
        dump["embed"] = h.copy()
    for i in range(c.L):
        tr = {} if dump is not None else None
        xn = rmsnorm(h, m.t("model.layers.%d.input_layernorm.weight" % i), c.eps)
        if c.kinds[i] == "kda":
            a = kda_layer(m, i, xn, cache[i], tr)
        else:
            if cache[i] is None:
                cache[i] = {"cn": np.zeros((0, c.r_kv)), "krot": np.zeros((0, c.rope))}
            a = mla_layer(m, i, xn, opts, cache[i], tr)
        h = h + a
        xn2 = rmsnorm(h, m.t("model.layers.%d.post_attention_layernorm.weight" % i), c.eps)
        f = ffn(m, i, xn2, opts, tr)
        h = h + f
        if dump is not None:
            dump["L%d.mixer_in" % i] = xn
            dump["L%d.mixer_out" % i] = a
            dump["L%d.ffn_in" % i] = xn2
            dump["L%d.ffn_out" % i] = f
            dump["L%d.resid" % i] = h.copy()
            for kk, vv in tr.items():
                dump["L%d.%s" % (i, kk)] = vv
    hn = rmsnorm(h, m.t("model.norm.weight"), c.eps)
    logits = linear(hn, m.t("lm_head.weight"))
    if dump is not None:
        dump["final_norm"] = hn
        dump["logits"] = logits
    return logits


def forward(m, ids, opts=None, dump=None):
    """Prefill of the whole sequence from empty state. Returns f64 logits [T, vocab]."""
    return run_tokens(m, ids, opts or Opts(), new_cache(m), dump)


def forward_decode(m, ids, opts=None):
    """Token-by-token decode with explicit caches (conv history, KDA state, MLA latent cache)."""
    opts = opts or Opts()
    cache = new_cache(m)
    return np.concatenate([run_tokens(m, [t], opts, cache) for t in ids], axis=0)


def kda_matrix_form(q, k, v, g, beta):
    """The same recurrence written as S_t = (I - beta k k^T) diag(exp g) S_{t-1} + beta k v^T,
    o_t = S_t^T q, one head at a time with explicit matrices: an independent check of
    kda_recurrence's indexing (which axis decays, which state is read)."""
    T, H, d = q.shape
    o = np.zeros((T, H, v.shape[2]))
    for h in range(H):
        S = np.zeros((d, v.shape[2]))
        for t in range(T):
            kk = k[t, h][:, None]
            A = (np.eye(d) - beta[t, h] * kk @ kk.T) @ np.diag(np.exp(g[t, h]))
            S = A @ S + beta[t, h] * kk @ v[t, h][None, :]
            o[t, h] = S.T @ q[t, h]
    return o


def self_test(m, ids, opts, tol=1e-10):
    rng = np.random.default_rng(1)
    T, H, d = 9, 2, 5
    q, k = l2norm(rng.normal(size=(T, H, d))) * d ** -0.5, l2norm(rng.normal(size=(T, H, d)))
    v, g = rng.normal(size=(T, H, d)), -rng.uniform(0, 2, (T, H, d))
    beta = rng.uniform(0, 1, (T, H))
    dk = float(np.abs(kda_recurrence(q, k, v, g, beta, np.zeros((H, d, d))) - kda_matrix_form(q, k, v, g, beta)).max())
    if dk > 1e-12:
        print("not ok - kda_recurrence disagrees with the matrix form by %.3e" % dk)
        return False, dk, dk, 1.0
    a = forward(m, ids, opts)
    b = forward_decode(m, ids, opts)
    # also a split prefill: first half then the rest (exercises multi-token continuation)
    h = max(1, len(ids) // 2)
    cache = new_cache(m)
    c2 = np.concatenate([run_tokens(m, ids[:h], opts, cache), run_tokens(m, ids[h:], opts, cache)], axis=0) \
        if len(ids) > 1 else a
    scale = max(1.0, float(np.abs(a).max()))
    d1 = float(np.abs(a - b).max())
    d2 = float(np.abs(a - c2).max())
    ok = d1 <= tol * scale and d2 <= tol * scale
    return ok, d1, d2, scale


# ----------------------------------------------------------------------------- CLI


def parse_tokens(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 numpy reference of the Kimi-Linear forward pass")
    ap.add_argument("--model", required=True, help="dir with config.json and model.safetensors")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--out", help="write logits as raw little-endian float32 [T, vocab]")
    ap.add_argument("--out-f64", help="write logits as raw little-endian float64 [T, vocab]")
    ap.add_argument("--router-weights", default="unbiased", choices=["unbiased", "biased"])
    ap.add_argument("--kv-norm-eps", default="transformers", choices=["transformers", "config"])
    ap.add_argument("--dump", help="write every intermediate value to this .npz")
    ap.add_argument("--self-test", action="store_true",
                    help="check the KDA recurrence against its matrix form, and prefill == token-by-token "
                         "decode == split prefill (f64, 1e-10 relative to max|logit|)")
    a = ap.parse_args(argv)
    m = load_model(a.model)
    opts = Opts(a.router_weights, a.kv_norm_eps)
    if a.tokens:
        ids = parse_tokens(a.tokens)
    else:
        ids = list(np.random.default_rng(0).integers(0, m.cfg.vocab, 24))
    if not ids:
        ap.error("no tokens")
    rc = 0
    if a.self_test:
        ok, d1, d2, scale = self_test(m, ids, opts)
        print("%s - reference self-test T=%d: |prefill-decode| %.3e, |prefill-split| %.3e (max|logit| %.3g)"
              % ("ok" if ok else "not ok", len(ids), d1, d2, scale))
        rc = 0 if ok else 1
    if a.out or a.out_f64 or a.dump or not a.self_test:
        dump = {} if a.dump else None
        logits = forward(m, ids, opts, dump)
        if a.out:
            logits.astype("<f4").tofile(a.out)
        if a.out_f64:
            logits.astype("<f8").tofile(a.out_f64)
        if a.dump:
            np.savez(a.dump, **dump)
        if not (a.out or a.out_f64 or a.dump):
            np.set_printoptions(precision=5, suppress=True, linewidth=120)
            print("logits shape", logits.shape, "argmax", logits.argmax(axis=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
