#!/usr/bin/env python3
"""sparse_checkpoint.py — a checkpoint in the Hugging Face layout whose weights
are holes: every safetensors header is real (names, shapes, dtype, offsets),
every shard has its full size, but the data is never written (a sparse file
takes no disk). `vtlab validate` reads only headers and the index, so it can
be run on the real 48B-A3B config's layout here (issue 14, item 3).

The tensor list is written from the forward-pass spec's checkpoint table (not
from vtlab's loader): embed, norm, lm_head; per layer the norms, the KDA or
MLA projections, the dense MLP (layers < first_k_dense_replace) or the MoE
router, bias, experts and shared experts.

    sparse_checkpoint.py CONFIG.json OUT_DIR --shards 20 [--dtype BF16] [--drop NAME]
"""
import argparse, json, os, shutil, struct

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--shards", type=int, default=20)
ap.add_argument("--dtype", default="BF16", choices=["BF16", "F16", "F32"])
ap.add_argument("--drop", default=None, help="leave this tensor out of the headers and the index")
a = ap.parse_args()
c = json.load(open(a.config))
la = c["linear_attn_config"]
D, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
H, d, K = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
P = H * d
kda = set(i - 1 for i in la["kda_layers"])          # 1-based in the config
Nh, nope, rope, dv, r = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                         c["v_head_dim"], c["kv_lora_rank"])
E, Im, S = c["num_experts"], c["moe_intermediate_size"], c["num_shared_experts"]

t = [("model.embed_tokens.weight", [V, D]), ("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
for i in range(L):
    p = f"model.layers.{i}"
    t += [(f"{p}.input_layernorm.weight", [D]), (f"{p}.post_attention_layernorm.weight", [D])]
    a_ = f"{p}.self_attn"
    if i in kda:
        t += [(f"{a_}.{n}_proj.weight", [P, D]) for n in "qkv"]
        t += [(f"{a_}.{n}_conv1d.weight", [P, 1, K]) for n in "qkv"]
        t += [(f"{a_}.A_log", [1, 1, H, 1]), (f"{a_}.dt_bias", [P]),
              (f"{a_}.f_a_proj.weight", [d, D]), (f"{a_}.f_b_proj.weight", [P, d]), (f"{a_}.b_proj.weight", [H, D]),
              (f"{a_}.g_a_proj.weight", [d, D]), (f"{a_}.g_b_proj.weight", [P, d]),
              (f"{a_}.o_norm.weight", [d]), (f"{a_}.o_proj.weight", [D, P])]
    else:
        t += [(f"{a_}.q_proj.weight", [Nh * (nope + rope), D]), (f"{a_}.kv_a_proj_with_mqa.weight", [r + rope, D]),
              (f"{a_}.kv_a_layernorm.weight", [r]), (f"{a_}.kv_b_proj.weight", [Nh * (nope + dv), r]),
              (f"{a_}.o_proj.weight", [D, Nh * dv])]
    if i < c["first_k_dense_replace"]:
        I = c["intermediate_size"]
        t += [(f"{p}.mlp.gate_proj.weight", [I, D]), (f"{p}.mlp.up_proj.weight", [I, D]),
              (f"{p}.mlp.down_proj.weight", [D, I])]
    else:
        m = f"{p}.block_sparse_moe"
        t += [(f"{m}.gate.weight", [E, D]), (f"{m}.gate.e_score_correction_bias", [E])]
        for e in range(E):
            t += [(f"{m}.experts.{e}.w1.weight", [Im, D]), (f"{m}.experts.{e}.w3.weight", [Im, D]),
                  (f"{m}.experts.{e}.w2.weight", [D, Im])]
        t += [(f"{m}.shared_experts.gate_proj.weight", [Im * S, D]), (f"{m}.shared_experts.up_proj.weight", [Im * S, D]),
              (f"{m}.shared_experts.down_proj.weight", [D, Im * S])]
if a.drop:
    t = [x for x in t if x[0] != a.drop]

esize = {"BF16": 2, "F16": 2, "F32": 4}[a.dtype]
def nbytes(shape):
    n = esize
    for s in shape: n *= s
    return n
total = sum(nbytes(s) for _, s in t)
shutil.rmtree(a.out, ignore_errors=True)
os.makedirs(a.out)
shutil.copy(a.config, os.path.join(a.out, "config.json"))
per = total // a.shards + 1
weight_map, shard, cur, used = {}, [], [], 0
groups = []
for name, shape in t:                               # consecutive tensors, ~equal bytes per shard
    if cur and used + nbytes(shape) > per and len(groups) < a.shards - 1:
        groups.append(cur); cur, used = [], 0
    cur.append((name, shape)); used += nbytes(shape)
groups.append(cur)
for k, g in enumerate(groups):
    fn = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in g:
        hdr[name] = {"dtype": a.dtype, "shape": shape, "data_offsets": [off, off + nbytes(shape)]}
        off += nbytes(shape)
        weight_map[name] = fn
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(a.out, fn), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)                # the weights: a hole
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
          open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
print(f"{len(t)} tensors, {total / 1e9:.1f} GB in {len(groups)} shards (sparse)")
