"""standin_modeling.py - a STAND-IN for the official Kimi-Linear modeling file, for testing
`make bench PEER_MODELING=...` (tests/bench/peer.py) where transformers cannot be installed.

THIS IS NOT THE OFFICIAL PEER. Its timings say nothing about transformers' implementation;
it exists only so that the peer mode's whole path (import of a user-supplied modeling file,
config class, state-dict name mapping and loading, interleaved timing, logits check) runs
end to end in tests/bench/test_peer_mode.sh. For a real comparison pass the official file:
    make bench PEER_MODELING=/path/to/transformers/models/kimi_linear/modeling_kimi_linear.py

Plain torch ops, f32, batch 1, no cache. It follows the project's independent numpy
reference (tests/reference/kimi_ref.py) and the public transformers port:
  * RMSNorm x * rsqrt(mean(x^2) + eps) * w; MLA's kv_a_layernorm eps 1e-6 (transformers);
  * KDA: q/k/v projections, depthwise causal conv (+SiLU), L2 norm of q and k per head
    (eps 1e-6 inside the sqrt), q *= d^-0.5, g = -exp(A_log) * softplus(f + dt_bias),
    beta = sigmoid(b), the delta rule with per-key-channel decay token by token, output
    read from the updated state, gated RMSNorm (norm * o_norm * sigmoid(gate)), o_proj;
  * MLA without rotary (NoPE), causal softmax attention over the expanded latents;
  * MoE: sigmoid router, top-k on scores + e_score_correction_bias (group-limited when
    n_group > 1), weights = the unbiased scores, renormalised when moe_renormalize and
    top-k > 1, times routed_scaling_factor; shared experts always on.

Parameter names: the experts are fused as in transformers v5 (mlp.experts.gate_up_proj
[E, 2*Im, D], mlp.experts.down_proj [E, D, Im], mlp.gate, mlp.shared_experts), so that
peer.py's name mapping from the checkpoint (block_sparse_moe.experts.N.w1/w2/w3) is
exercised; STANDIN_NAMING=checkpoint uses the checkpoint's own names instead (identity).
"""
import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn


class KimiLinearConfig:
    """The config.json fields this stand-in reads (transformers-style aliases accepted)."""

    model_type = "kimi_linear"

    def __init__(self, **cfg):
        def get(*names, default=None):
            for n in names:
                if cfg.get(n) is not None:
                    return cfg[n]
            return default

        self.vocab_size = int(cfg["vocab_size"])
        self.hidden_size = int(cfg["hidden_size"])
        self.num_hidden_layers = int(cfg["num_hidden_layers"])
        self.intermediate_size = int(cfg["intermediate_size"])
        self.rms_norm_eps = float(cfg["rms_norm_eps"])
        la = cfg["linear_attn_config"]
        self.kda_heads, self.kda_head_dim = int(la["num_heads"]), int(la["head_dim"])
        self.conv_kernel = int(la.get("short_conv_kernel_size", 4))
        kda = set(la.get("kda_layers", []))
        self.layer_types = ["kda" if (i + 1) in kda else "mla" for i in range(self.num_hidden_layers)]
        self.num_attention_heads = int(cfg["num_attention_heads"])
        self.kv_lora_rank = int(cfg["kv_lora_rank"])
        self.qk_nope_head_dim = int(cfg["qk_nope_head_dim"])
        self.qk_rope_head_dim = int(cfg["qk_rope_head_dim"])
        self.v_head_dim = int(cfg["v_head_dim"])
        self.num_experts = int(get("num_experts", "n_routed_experts", "num_local_experts"))
        self.top_k = int(get("num_experts_per_token", "num_experts_per_tok"))
        self.moe_intermediate_size = int(cfg["moe_intermediate_size"])
        self.n_shared = int(get("num_shared_experts", "n_shared_experts", default=0))
        self.first_k_dense_replace = int(get("first_k_dense_replace", default=0))
        self.moe_layer_freq = int(get("moe_layer_freq", default=1))
        self.routed_scaling_factor = float(get("routed_scaling_factor", default=1.0))
        self.renorm = bool(get("moe_renormalize", "norm_topk_prob", default=True))
        self.n_group = int(get("num_expert_group", "n_group", default=1))
        self.topk_group = int(get("topk_group", default=1))

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def is_moe(self, i):
        return i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0


def _fused_names():
    return os.environ.get("STANDIN_NAMING", "fused") != "checkpoint"


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MLP(nn.Module):
    def __init__(self, D, I):
        super().__init__()
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# The delta rule's two forms. transformers' Kimi-Linear runs a forward without a cache (a
# prefill) in its chunked form, on a CPU its plain-torch fallback (fla's kernels need a
# GPU); the token-by-token form only for a cached decode step. The chunked form here is
# organised as that fallback is - pairwise decays materialised per chunk, the triangular
# inverse built row by row in Python, a Python loop over the chunks - so that the peer
# mode's timings of this stand-in approximate what that structure costs in torch (still
# not the official peer's). STANDIN_KDA=recurrent runs the token-by-token form instead.
CHUNK = 64


def _kda_form():
    return os.environ.get("STANDIN_KDA", "chunk")


def delta_rule_recurrent(q, k, v, g, beta):   # [T, H, d] each, beta [T, H]: o [T, H, d]
    T, H, d = q.shape
    decay = g.exp()
    S = q.new_zeros(H, d, d)                                   # S[h, key channel, value channel]
    o = q.new_empty(T, H, d)
    for t in range(T):
        S = S * decay[t].unsqueeze(-1)
        u = torch.einsum("hi,hij->hj", k[t], S)
        S = S + k[t].unsqueeze(-1) * (beta[t].unsqueeze(-1) * (v[t] - u)).unsqueeze(1)
        o[t] = torch.einsum("hi,hij->hj", q[t], S)
    return o


def delta_rule_chunked(q, k, v, g, beta):
    """Within a chunk, with G_t = exp(cumulative g up to t) per key channel and S the state
    at the chunk's start: the update written at s is w_s = beta_s (v_s - u_s), and
    (I + L) W = beta V - beta (K * G) S, L[t, s] = beta_t sum_c k_t k_s G_t / G_s (s < t);
    o_t = (q_t * G_t) S + sum_{s <= t} (sum_c q_t k_s G_t / G_s) w_s; the next state is
    G_end S + (K * G_end / G)^T W."""
    T, H, d = q.shape
    n = (T + CHUNK - 1) // CHUNK
    pad = n * CHUNK - T

    def chunks(x):   # [T, H, ...] -> [H, n, CHUNK, ...], zero-padded at the end
        x = x.transpose(0, 1)
        if pad:
            x = torch.cat([x, x.new_zeros((x.shape[0], pad) + tuple(x.shape[2:]))], 1)
        return x.reshape((H, n, CHUNK) + tuple(x.shape[2:]))

    q, k, v, g, b = chunks(q), chunks(k), chunks(v), chunks(g), chunks(beta)
    gl = g.cumsum(2)                                           # log G within each chunk
    G = gl.exp()
    kb, vb = k * b.unsqueeze(-1), v * b.unsqueeze(-1)
    lower = torch.ones(CHUNK, CHUNK, dtype=torch.bool).tril()  # s <= t
    L = q.new_empty(H, n, CHUNK, CHUNK)
    QK = q.new_empty(H, n, CHUNK, CHUNK)
    group = max(1, min(n, (1 << 26) // (H * CHUNK * CHUNK * d)))   # pairwise decays of a few chunks at once
    for c0 in range(0, n, group):
        sl = slice(c0, c0 + group)
        rel = gl[:, sl].unsqueeze(3) - gl[:, sl].unsqueeze(2)  # [H, g, t, s, d]: log G_t / G_s
        rel = rel.masked_fill(~lower.view(1, 1, CHUNK, CHUNK, 1), float("-inf"))
        ks = k[:, sl].unsqueeze(2) * rel.exp()                 # k_s G_t / G_s, zero above the diagonal
        L[:, sl] = (ks @ kb[:, sl].unsqueeze(-1)).squeeze(-1)
        QK[:, sl] = (ks @ q[:, sl].unsqueeze(-1)).squeeze(-1)
    L = L.masked_fill(~lower.tril(-1), 0.0)                    # strictly lower
    Tinv = -L                                                  # (I + L)^-1, row by row
    for i in range(1, CHUNK):
        Tinv[..., i, :i] = Tinv[..., i, :i] + (Tinv[..., i, :i].unsqueeze(-1) * Tinv[..., :i, :i]).sum(-2)
    Tinv = Tinv + torch.eye(CHUNK, dtype=q.dtype)
    U, Kc = Tinv @ vb, Tinv @ (kb * G)
    S = q.new_zeros(H, d, d)
    o = q.new_empty(H, n, CHUNK, d)
    for c in range(n):
        W = U[:, c] - Kc[:, c] @ S
        o[:, c] = (q[:, c] * G[:, c]) @ S + QK[:, c] @ W
        g_end = gl[:, c, -1:]                                  # [H, 1, d]
        S = g_end.exp().transpose(1, 2) * S + (k[:, c] * (g_end - gl[:, c]).exp()).transpose(1, 2) @ W
    return o.reshape(H, n * CHUNK, d)[:, :T].transpose(0, 1)


class KDA(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, H, d, K = c.hidden_size, c.kda_heads, c.kda_head_dim, c.conv_kernel
        P = H * d
        self.H, self.d, self.K, self.eps = H, d, K, c.rms_norm_eps
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(D, P, bias=False) for _ in range(3))
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (nn.Conv1d(P, P, K, groups=P, bias=False) for _ in range(3))
        self.A_log = nn.Parameter(torch.zeros(1, 1, H, 1))
        self.dt_bias = nn.Parameter(torch.zeros(P))
        self.f_a_proj, self.f_b_proj = nn.Linear(D, d, bias=False), nn.Linear(d, P, bias=False)
        self.b_proj = nn.Linear(D, H, bias=False)
        self.g_a_proj, self.g_b_proj = nn.Linear(D, d, bias=False), nn.Linear(d, P, bias=False)
        self.o_norm = RMSNorm(d, c.rms_norm_eps)
        self.o_proj = nn.Linear(P, D, bias=False)

    def conv(self, x, conv):   # x [T, P]: causal depthwise conv, weight[:, 0, K-1] on the current token
        y = F.conv1d(F.pad(x.t().unsqueeze(0), (self.K - 1, 0)), conv.weight, groups=x.shape[1])
        return F.silu(y[0].t())

    def forward(self, x):      # x [T, D]
        T, H, d = x.shape[0], self.H, self.d
        q = self.conv(self.q_proj(x), self.q_conv1d).view(T, H, d)
        k = self.conv(self.k_proj(x), self.k_conv1d).view(T, H, d)
        v = self.conv(self.v_proj(x), self.v_conv1d).view(T, H, d)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * d ** -0.5
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        g = -self.A_log.view(H, 1).exp() * F.softplus(self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).view(T, H, d)
        beta = torch.sigmoid(self.b_proj(x))                       # [T, H]
        rule = delta_rule_recurrent if _kda_form() == "recurrent" else delta_rule_chunked
        o = rule(q, k, v, g, beta)
        gate = self.g_b_proj(self.g_a_proj(x)).view(T, H, d)
        return self.o_proj((self.o_norm(o) * torch.sigmoid(gate)).reshape(T, H * d))


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, Nh = c.hidden_size, c.num_attention_heads
        self.Nh, self.nope, self.rope, self.dv, self.r = Nh, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        self.q_proj = nn.Linear(D, Nh * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(D, self.r + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.r, 1e-6)
        self.kv_b_proj = nn.Linear(self.r, Nh * (self.nope + self.dv), bias=False)
        self.o_proj = nn.Linear(Nh * self.dv, D, bias=False)

    def forward(self, x):
        T, Nh = x.shape[0], self.Nh
        q = self.q_proj(x).view(T, Nh, -1).transpose(0, 1)                     # [Nh, T, qk]
        ca = self.kv_a_proj_with_mqa(x)
        kv = self.kv_b_proj(self.kv_a_layernorm(ca[:, :self.r])).view(T, Nh, -1)
        k = torch.cat([kv[:, :, :self.nope], ca[:, None, self.r:].expand(T, Nh, self.rope)], -1).transpose(0, 1)
        v = kv[:, :, self.nope:].transpose(0, 1)
        s = (q @ k.transpose(1, 2)) * (self.nope + self.rope) ** -0.5
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return self.o_proj((torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, -1))


class FusedExperts(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, D, Im = c.num_experts, c.hidden_size, c.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * Im, D))
        self.down_proj = nn.Parameter(torch.zeros(E, D, Im))

    def expert(self, e, x):
        gate, up = F.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down_proj[e])


class Expert(nn.Module):       # the checkpoint's naming: experts.N.w1/w2/w3
    def __init__(self, D, Im):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(D, Im, bias=False), nn.Linear(Im, D, bias=False), nn.Linear(D, Im, bias=False)


class ListExperts(nn.ModuleList):
    def expert(self, e, x):
        w = self[e]
        return w.w2(F.silu(w.w1(x)) * w.w3(x))


class Router(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c.num_experts, c.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(c.num_experts))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = Router(c)
        self.experts = FusedExperts(c) if _fused_names() else \
            ListExperts(Expert(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts))
        self.shared_experts = MLP(c.hidden_size, c.moe_intermediate_size * c.n_shared) if c.n_shared else None

    def forward(self, x):
        c = self.c
        s = torch.sigmoid(F.linear(x, self.gate.weight))                     # [T, E]
        sc = s + self.gate.e_score_correction_bias
        if c.n_group > 1:
            gs = sc.view(x.shape[0], c.n_group, -1).topk(2, dim=-1)[0].sum(-1)
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(c.topk_group, dim=-1)[1], 1)
            sc = sc.masked_fill(~keep.bool().repeat_interleave(c.num_experts // c.n_group, 1), float("-inf"))
        idx = sc.topk(c.top_k, dim=-1)[1]
        w = s.gather(1, idx)
        if c.renorm and c.top_k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        y = torch.zeros_like(x)
        for e in idx.unique().tolist():
            tok, slot = (idx == e).nonzero(as_tuple=True)
            y.index_add_(0, tok, self.experts.expert(e, x[tok]) * w[tok, slot, None])
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y


class Layer(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = KDA(c) if c.layer_types[i] == "kda" else MLA(c)
        if not c.is_moe(i):
            self.mlp = MLP(c.hidden_size, c.intermediate_size)
        elif _fused_names():
            self.mlp = MoE(c)
        else:
            self.block_sparse_moe = MoE(c)

    def forward(self, h):
        h = h + self.self_attn(self.input_layernorm(h))
        ffn = self.mlp if hasattr(self, "mlp") else self.block_sparse_moe
        return h + ffn(self.post_attention_layernorm(h))


class KimiLinearModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class KimiLinearForCausalLM(nn.Module):
    """NOT the official model: a stand-in with the official class name and call signature
    (model(input_ids=[1, T]).logits [1, T, vocab])."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = KimiLinearModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, use_cache=False, **kwargs):
        if input_ids.shape[0] != 1:
            raise ValueError("the stand-in runs batch 1 only")
        h = self.model.embed_tokens(input_ids[0])
        for layer in self.model.layers:
            h = layer(h)
        return SimpleNamespace(logits=self.lm_head(self.model.norm(h)).unsqueeze(0))
