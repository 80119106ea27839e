#!/usr/bin/env bash
# test_validate_memory.sh — `vtlab validate` reads the config and the
# safetensors headers only (issue 14, item 3): on the 288M benchmark config
# in bf16 (a 550 MB checkpoint) its peak RSS stays under a quarter of the
# checkpoint's size (it loaded and widened every weight before: 1.7 GB RSS,
# 3.7 s; measured after: 6 MB, 0.01 s), and it still refuses a checkpoint
# with a tensor missing.
#
# Usage (from the repository root): bash tests/cli/test_validate_memory.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-validate.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

expect_exit "synth the 288M benchmark config in bf16" 0 \
    "$VTLAB" synth --config model/configs/kimi-linear-small.json --seed 1 --dtype bf16 --out "$W/small"
# peak RSS of one command, in KB, and its exit status (python's getrusage: no /usr/bin/time needed)
peak() { /usr/bin/python3 -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)' "$@"; }
read -r rss rc <<<"$(peak "$VTLAB" validate --model "$W/small")"
bytes=$(du -sk "$W/small" | cut -f1)
if [ "$rc" = 0 ] && [ "$rss" -lt $((bytes / 4)) ]; then
    ok "validate: exit 0 with a peak RSS of $rss KB for a $bytes KB checkpoint (headers only)"
else not_ok "validate memory" "exit $rc, peak RSS $rss KB, checkpoint $bytes KB"; fi
expect_exit "... and it prints the model's summary" 0 "$VTLAB" validate --model "$W/small"
if grep -q "ok — 8 layers (KKKMKKKM attention, DEEEEEEE FFN" "$OUT_FILE" && grep -q "weights bf16" "$OUT_FILE"; then
    ok "... the same summary as before (layers, kinds, weights bf16)"
else not_ok "summary" "$(cat "$OUT_FILE")"; fi

# A tensor missing from the header is still found without loading anything.
/usr/bin/python3 - "$W/small/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    name = "model.layers.1.block_sparse_moe.gate.weight"
    assert name in h, sorted(k for k in h if "layers.1." in k)[:5]
    h[name.replace("gate", "gatf")] = h.pop(name)
    t = json.dumps(h, separators=(",", ":")).encode()
    t += b" " * (n - len(t))
    assert len(t) == n
    f.seek(8); f.write(t)
PY
expect_exit "a checkpoint with a tensor missing is refused (exit 2)" 2 "$VTLAB" validate --model "$W/small"
stderr_has "... naming the tensor" "model.layers.1.block_sparse_moe.gate.weight"
finish
