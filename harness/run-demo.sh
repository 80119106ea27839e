#!/usr/bin/env bash
# make run — the main job on the embedded default (a synthetic tiny model):
# synthesise and validate the model, then run the three arms of the defect
# report side by side with runtime probes, and, when the lab commands are
# built, the shipped bf16-stream experiment into results.db.
set -eu
VTLAB=${1:-./vtlab}
MODEL=build/models/kimi-linear-tiny-seed1
PY=/usr/bin/python3
W=build/demo
mkdir -p "$W"

echo "== 1. the model: synthetic Kimi-Linear (tiny config: 8 layers, KDA + MLA, dense + 7 MoE layers)"
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$MODEL"
fi
"$VTLAB" validate --model "$MODEL"

TOK=$($PY -c "import random; r=random.Random(1); print(','.join(str(r.randrange(3,1024)) for _ in range(128)))")
echo
echo "== 2. three arms on the same 128 tokens, probes in audit mode"
run_arm() {  # name, then VAR=VALUE knobs
  local name=$1; shift
  env VT_PROBE=audit "$@" "$VTLAB" logits --model "$MODEL" --tokens "$TOK" --out "$W/$name.bin" --probes "$W/$name.json"
}
run_arm f32
run_arm bf16-stream VT_KIMI_BF16_STREAM=1
run_arm bf16-stream-scatter-defect VT_KIMI_BF16_STREAM=1 VT_FAULT=moe_scatter_row_bytes_from_stream
$PY - "$W" <<'PY'
import json, sys
import numpy as np
w = sys.argv[1]
ref = np.fromfile(f"{w}/f32.bin", "<f4").reshape(-1, 1024)
print(f"{'arm':30} {'stream':7} {'scatter bytes/row (src/dst)':28} {'probe violations':17} {'top-1 vs f32':12}")
for arm in ["f32", "bf16-stream", "bf16-stream-scatter-defect"]:
    p = json.load(open(f"{w}/{arm}.json"))
    l = np.fromfile(f"{w}/{arm}.bin", "<f4").reshape(-1, 1024)
    stream = sorted({r["dtype"] for r in p if r["site"] == "residual.stream"})
    sc = [r for r in p if r["site"] == "moe.scatter"][0]
    bad = sum(1 for r in p if not r["ok"])
    agree = int((l.argmax(1) == ref.argmax(1)).sum())
    print(f"{arm:30} {','.join(stream):7} {sc['bytes_per_row']:>6} ({sc['src_row_bytes']}/{sc['dst_row_bytes']}){'':14} "
          f"{bad:>3} site-layers{'':3} {agree}/{len(ref)}")
bad = [r for r in json.load(open(f"{w}/bf16-stream-scatter-defect.json")) if not r["ok"]]
print(f"\nthe replayed defect, as the probe saw it (layer {bad[0]['layer']}): {bad[0]['detail']}")
PY
if "$VTLAB" help 2>&1 | grep -q "^  run "; then
  echo
  echo "== 3. the shipped experiment, recorded in results.db"
  "$VTLAB" run experiments/bf16-stream.json --db results.db
  "$VTLAB" runs --db results.db
fi
echo
echo "files left behind: $MODEL/ (the model), $W/ (logits and probe records)$( [ -f results.db ] && echo ', results.db')"
