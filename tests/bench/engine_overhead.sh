#!/usr/bin/env bash
# The engine protocol's cost (issue 11, item 7), printed as ratios measured in
# one run: the tiny bf16-stream sweep (experiments/bf16-stream.json, 4 arms)
# run by the builtin model in process and by the same model served by
# `vtlab engine` (one child per arm, logits as binary frames) with batches
# (its hello declares max_batch: several sequences per request) and with one
# sequence per request (VTLAB_ENGINE_BATCH=0), in interleaved rounds, each
# into a fresh results.db; and an engine's start-up (spawn to hello) for
# `vtlab engine` and, when built, examples/engines/devengine.
# Usage: bash tests/bench/engine_overhead.sh ./vtlab [ROUNDS]
set -eu
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
ROUNDS=${2:-3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 - "$W" "$VTLAB" <<'PY'
import json, sys
w, vtlab = sys.argv[1], sys.argv[2]
e = json.load(open("experiments/bf16-stream.json"))
json.dump(e, open(w + "/builtin.json", "w"))
e["engine"] = [vtlab, "engine"]
json.dump(e, open(w + "/served.json", "w"))
PY
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/m" >/dev/null
: > "$W/times"
for r in $(seq 1 "$ROUNDS"); do
  for kind in builtin served served1; do
    rm -f "$W/$kind.db"*
    t0=$(date +%s.%N)
    if [ $kind = served1 ]; then VTLAB_ENGINE_BATCH=0 "$VTLAB" run "$W/served.json" --db "$W/$kind.db" > "$W/$kind.out" 2>&1
    else "$VTLAB" run "$W/$kind.json" --db "$W/$kind.db" > "$W/$kind.out" 2>&1; fi
    t1=$(date +%s.%N)
    fwd=$(sed -n 's/^time: .* wall, \([0-9.]*\) s in the forward pass.*/\1/p' "$W/$kind.out")
    echo "$kind $(echo "$t1 - $t0" | bc) $fwd" >> "$W/times"
  done
done
/usr/bin/python3 - "$W/times" "$VTLAB" "$W/m" <<'PY'
import os, statistics, subprocess, sys, time
rows = [l.split() for l in open(sys.argv[1])]
med = lambda kind, i: statistics.median(float(r[i]) for r in rows if r[0] == kind)
wb, ws, w1 = med("builtin", 1), med("served", 1), med("served1", 1)
fb, fs, f1 = med("builtin", 2), med("served", 2), med("served1", 2)
print("engine protocol overhead (tiny bf16-stream sweep, 4 arms x 128 sequences, %d interleaved rounds, medians):" % (len(rows) // 3))
print("  wall    builtin %.2f s, through `vtlab engine` %.2f s: ratio %.3f; one sequence per request %.2f s: %.3f"
      % (wb, ws, ws / wb, w1, w1 / wb))
print("  forward builtin %.2f s, through `vtlab engine` %.2f s: ratio %.3f (target < 1.05); one sequence per request "
      "%.2f s: %.3f" % (fb, fs, fs / fb, f1, f1 / fb))
def startup(argv, env):
    t = []
    for _ in range(5):
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        p.stdout.readline()
        t.append(time.monotonic() - t0)
        p.stdin.close(); p.wait()
    return statistics.median(t)
env = dict(os.environ, VTP_PROTOCOL="1", VTP_MODEL=sys.argv[3], VTP_PROBE="on")
print("  start-up (spawn to hello, median of 5): vtlab engine %.3f s" % startup([sys.argv[2], "engine"], env), end="")
dev = "examples/engines/devengine/devengine"
if os.access(dev, os.X_OK):
    print(", devengine %.3f s" % startup([dev], env), end="")
print()
PY
