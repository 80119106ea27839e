#!/usr/bin/env bash
# test_validate_48b.sh — `vtlab validate` on the real 48B-A3B config's layout:
# 20 bf16 shards and a model.safetensors.index.json as Hugging Face publishes
# them (98 GB of weights), generated as sparse files by sparse_checkpoint.py
# (headers real, weights holes: no disk used). Validation reads headers and the
# index only, so it must finish with a flat, small peak RSS (measured: 0.07 s,
# 17 MB; before issue 14 it loaded every weight as f32 and was killed for
# memory), and a tensor missing from every shard is still an exit-2 error that
# names it.
#
# Usage (from the repository root): bash tests/cli/test_validate_48b.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-validate48.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
CFG=model/configs/kimi-linear-48b-a3b.json
peak() { /usr/bin/python3 -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)' "$@"; }

expect_exit "write the 48B-A3B layout as 20 sparse bf16 shards" 0 \
    /usr/bin/python3 tests/cli/sparse_checkpoint.py "$CFG" "$W/k48" --shards 20
n=$(ls "$W/k48"/model-*-of-00020.safetensors 2>/dev/null | wc -l)
[ "$n" = 20 ] && ok "... 20 shards and an index" || not_ok "shards" "$n shards"
read -r rss rc <<<"$(peak "$VTLAB" validate --model "$W/k48")"
if [ "$rc" = 0 ] && [ "$rss" -lt 200000 ]; then ok "validate: exit 0, peak RSS $rss KB for 98 GB of weights"
else not_ok "validate 48B" "exit $rc, peak RSS $rss KB"; fi
expect_exit "... and it prints the model's summary" 0 "$VTLAB" validate --model "$W/k48"
if grep -q "27 layers (KKKMKKKMKKKMKKKMKKKMKKKMKKM attention, DEEEEEEEEEEEEEEEEEEEEEEEEEE FFN" "$OUT_FILE" &&
   grep -q "26 MoE layers, hidden 2304, vocab 163840, weights bf16" "$OUT_FILE"; then
    ok "... 27 layers in the config's KDA/MLA pattern, 26 MoE layers, bf16"
else not_ok "summary" "$(cat "$OUT_FILE")"; fi

missing=model.layers.17.block_sparse_moe.experts.201.w3.weight
/usr/bin/python3 tests/cli/sparse_checkpoint.py "$CFG" "$W/k48" --shards 20 --drop "$missing" >/dev/null
expect_exit "one expert weight missing from every shard and the index: exit 2" 2 "$VTLAB" validate --model "$W/k48"
grep -q "experts.201.w3" "$ERR" && ok "... the error names the tensor" || not_ok "names tensor" "$(cat "$ERR")"
finish
