#!/usr/bin/env bash
# scripts/gpu-check.sh's own plumbing, on a machine without a GPU: with
# GPU_CHECK_BACKEND=cpu the CPU stands in for the device, so every step of the
# script (build, nine-arm logits and probe comparison, the replay, an
# experiment into results.db, a benchmark report recorded as runs) runs and
# must pass; with a knob that changes the numbers added to the device side
# only, the comparison must fail. This tests the script, not CUDA.
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err

GPU_CHECK_BACKEND=cpu bash scripts/gpu-check.sh "$W/gc" >"$W/good.log" 2>&1; rc=$?
[ $rc -eq 0 ] && ok "gpu-check with the CPU as the device: exit 0" || not_ok "gpu-check self-test" "exit $rc: $(grep -E '^FAIL' "$W/good.log" | head -3)"
grep -q "PLUMBING SELF-TEST" "$W/good.log" && ok "says it is a self-test that tests no CUDA" || not_ok "self-test banner" "missing"
n=$(grep -cE '^ok +(logits|probes) ' "$W/good.log")
[ "$n" = 18 ] && ok "nine arms compared, logits and probes (18 ok lines)" || not_ok "arms compared" "$n ok lines"
grep -q "^ok   replay: moe.scatter violated on 7 MoE layers" "$W/good.log" && ok "the replay's violation seen on every MoE layer" \
  || not_ok "replay" "$(grep replay "$W/good.log" | head -2)"
/usr/bin/python3 - "$W/gc/results.db" >"$W/py" 2>&1 <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
exp = db.execute("select count(*) from runs where experiment='bf16-stream' and status='FINISHED'").fetchone()[0]
bench = db.execute("select count(*) from runs where experiment='bench-tiny-f32' and status='FINISHED' and backend='cpu'").fetchone()[0]
assert exp == 4 and bench == 4, (exp, bench)
PYEOF
[ $? -eq 0 ] && ok "results.db holds the experiment's 4 runs and the benchmark's 4 phase runs" || not_ok "results.db" "$(tail -1 "$W/py")"

GPU_CHECK_BACKEND=cpu GPU_CHECK_DEV_KNOBS="VT_KIMI_ROUTER_WEIGHTS=biased" bash scripts/gpu-check.sh "$W/gc2" >"$W/bad.log" 2>&1; rc=$?
[ $rc -ne 0 ] && ok "a real difference on the device side fails the script (exit $rc)" || not_ok "difference detected" "exit 0"
grep -q "^FAIL logits f32 " "$W/bad.log" && ok "and names the f32 arm's logits" || not_ok "names the arm" "$(grep -E '^(FAIL|ok) +logits f32 ' "$W/bad.log")"
finish
