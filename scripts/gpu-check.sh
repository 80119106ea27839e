#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend's checks on a machine with an NVIDIA GPU
# (issue 7). One command, under 5 minutes on an H200:
#
#   scripts/gpu-check.sh [OUT_DIR]        (default build/gpu-check)
#
#   1. build: vtlab, the CUDA unit test, the benchmark program
#   2. build/tests/test_cuda: CPU vs CUDA on the tiny model (must PASS, not SKIP)
#   3. `vtlab logits` with VT_BACKEND=cpu vs cuda on the tiny config, per arm:
#      f32 arms within 1e-3 absolute, bf16 arms within the distributional
#      bounds (top-1 >= 90%, median per-position max|diff| <= 0.5); probe
#      records (VT_PROBE=audit) equal field by field
#   4. the replayed scatter defect on the GPU: same probe records as the CPU,
#      the moe.scatter invariant violated on every MoE layer
#   5. an experiment run with VT_BACKEND=cuda into OUT_DIR/results.db
#      (GPU_CHECK_DB=path to use another database, e.g. the lab's results.db)
#   6. the benchmark on a synthetic full-size Kimi-Linear-48B-A3B with bf16
#      weights generated on the device: prefill T=2048, decode batch 1 and 32,
#      TFLOP/s and HBM GB/s vs the device's peak -> OUT_DIR/bench.json, then
#      `vtlab record-bench` stores it as runs (backend cuda, the device's name)
#
# Everything it writes goes under OUT_DIR (log: OUT_DIR/gpu-check.log). It
# exits non-zero when any check fails. Tolerances: docs/cuda.md.
#
# Step time limits (test_cuda 120 s, the experiment 90 s, the benchmark 150 s)
# keep the whole script under the 10 minutes a device command may run, so a
# hang still ends with the summary line.
#
# GPU_CHECK_BACKEND=cpu runs the same script with the CPU standing in for the
# GPU (a self-test of the script's own plumbing on a machine without one:
# tests/cli/test_gpu_check.sh): test_cuda is not run, the "device" side of
# every comparison is the CPU, and the benchmark is `build/bench` on the tiny
# model. It proves nothing about the CUDA backend, and says so.
# GPU_CHECK_DEV_KNOBS="NAME=VALUE ..." adds knobs to the backend-under-test
# side of the logits comparison only (the self-test uses it to prove that a
# real difference fails the script).
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-build/gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || { echo "gpu-check: cannot create $OUT" >&2; exit 2; }
cd "$ROOT" || exit 2
exec > >(tee "$OUT/gpu-check.log") 2>&1
PY=/usr/bin/python3
DB=${GPU_CHECK_DB:-$OUT/results.db}
B=${BUILD:-build}   # the Makefile's BUILD (its build directory)
DEV=${GPU_CHECK_BACKEND:-cuda}
DEV_KNOBS=${GPU_CHECK_DEV_KNOBS:-}
case "$DEV" in cuda|cpu) ;; *) echo "gpu-check: GPU_CHECK_BACKEND must be cuda or cpu, got \"$DEV\"" >&2; exit 2 ;; esac
FAILS=0
T0=$(date +%s)

step() { echo; echo "== [$(( $(date +%s) - T0 ))s] $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }

# ------------------------------------------------------------------ 0. device
step "device"
[ "$DEV" = cpu ] && echo "PLUMBING SELF-TEST (GPU_CHECK_BACKEND=cpu): the CPU stands in for the GPU; nothing here tests CUDA"
if command -v nvidia-smi >/dev/null; then
  # the build links CUDA 13's runtime: the driver must support it (else every CUDA step fails
  # with "CUDA driver version is insufficient", which test_cuda's log shows)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail "nvidia-smi"
else
  echo "nvidia-smi not found (continuing: the CUDA runtime decides)"
fi
{ command -v nvcc >/dev/null && nvcc --version | tail -2; } || { [ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -2; }
HAVE_NUMPY=1
$PY -c "import numpy" 2>/dev/null || { HAVE_NUMPY=0; echo "warning: $PY has no numpy: the logits comparison (step 3-4) will fail; the other steps still run"; }

# ------------------------------------------------------------------ 1. build
step "build"
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  fail "nvcc not found: the CUDA backend cannot be built"; exit 1
fi
# only what this script needs (a GPU machine may have no network: apt-get is tried only for
# what is missing, with a time limit)
timeout 120 make deps DEB_PACKAGES="libsqlite3-dev libcjson-dev libopenblas-dev python3-numpy libcmocka-dev" \
  || echo "warning: make deps failed (continuing: the build says what is missing)"
if [ "$DEV" = cuda ]; then
  # CUDA=1: the CUDA objects are built without waiting for the GPU detection to find this one
  make -j"$(nproc)" CUDA=1 vtlab "$B/tests/test_cuda" "$B/libvtmodel.a" || { fail "make"; exit 1; }
  ./vtlab version | grep -q cuda || { fail "vtlab was built without the CUDA backend"; exit 1; }
  make CUDA=1 "$B/bench_cuda" >/dev/null && cp "$B/bench_cuda" "$OUT/bench_cuda" || { fail "bench_cuda build"; exit 1; }
  ok "built (vtlab, $B/tests/test_cuda, $OUT/bench_cuda)"
else
  make -j"$(nproc)" vtlab "$B/bench" || { fail "make"; exit 1; }
  ok "built (vtlab, $B/bench)"
fi

# ------------------------------------------------------------------ 2. unit test
step "build/tests/test_cuda"
if [ "$DEV" = cuda ]; then
  timeout 120 "$B/tests/test_cuda" >"$OUT/test_cuda.log" 2>&1; rc=$?
  cat "$OUT/test_cuda.log"
  if [ $rc -ne 0 ]; then fail "test_cuda exited $rc"
  elif grep -q "SKIPPED" "$OUT/test_cuda.log"; then fail "test_cuda skipped tests on a GPU machine (no device visible?)"
  else ok "test_cuda passed"; fi
else
  echo "not run (GPU_CHECK_BACKEND=cpu)"
fi

# ------------------------------------------------------------------ 3-4. CPU vs CUDA through vtlab
step "vtlab logits: CPU vs $DEV on the tiny config"
TINY=model/configs/kimi-linear-tiny.json
./vtlab synth --config $TINY --seed 3 --dtype f32 --out "$OUT/tiny-f32" >/dev/null || fail "synth f32"
./vtlab synth --config $TINY --seed 3 --dtype bf16 --out "$OUT/tiny-bf16" >/dev/null || fail "synth bf16"
VOCAB=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" $TINY)
TOKENS=$($PY -c "
import sys
s, V, t = 12345, int(sys.argv[1]), []
for i in range(64):
    s = (s * 1103515245 + 12345) % 2**32; t.append(str(3 + (s >> 8) % (V - 3)))
print(','.join(t))" "$VOCAB")
mkdir -p "$OUT/logits"
# name | checkpoint | exact (1: f32 tolerance) | knobs
ARMS=(
  "f32|tiny-f32|1|"
  "f32-bf16ckpt|tiny-bf16|1|"
  "router-biased|tiny-f32|1|VT_KIMI_ROUTER_WEIGHTS=biased"
  "mla-eps-config|tiny-f32|1|VT_KIMI_MLA_KV_NORM_EPS=config"
  "bf16-stream|tiny-f32|0|VT_KIMI_BF16_STREAM=1"
  "bf16-stream-expert-out|tiny-f32|0|VT_KIMI_BF16_STREAM=1 VT_KIMI_BF16_EXPERT_OUT=1"
  "bf16-act|tiny-bf16|0|VT_KIMI_BF16_ACT=1"
  "bf16-all|tiny-bf16|0|VT_KIMI_BF16_STREAM=1 VT_KIMI_BF16_ACT=1 VT_KIMI_BF16_EXPERT_OUT=1"
  "replay|tiny-f32|replay|VT_KIMI_BF16_STREAM=1 VT_FAULT=moe_scatter_row_bytes_from_stream"
)
ARMLIST=()
for a in "${ARMS[@]}"; do
  IFS='|' read -r name ck exact knobs <<<"$a"
  for side in cpu dev; do   # dev: the backend under test ($DEV)
    be=cpu; extra=""; [ $side = dev ] && be=$DEV && extra=$DEV_KNOBS
    env VT_BACKEND=$be VT_PROBE=audit $knobs $extra ./vtlab logits --model "$OUT/$ck" --tokens "$TOKENS" \
        --out "$OUT/logits/$name.$side.bin" --probes "$OUT/logits/$name.$side.json" \
      || fail "vtlab logits, arm $name, backend $be"
  done
  ARMLIST+=("$name:$exact")
done
if [ "$HAVE_NUMPY" = 1 ]; then
$PY - "$OUT/logits" "$VOCAB" "${ARMLIST[@]}" <<'EOF' || fail "CPU vs $DEV comparison (see above)"
import json, sys
import numpy as np
d, V, arms = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
F32_ATOL, BF16_MEDIAN, BF16_TOP1 = 1e-3, 0.5, 0.9
FIELDS = ["site", "layer", "dtype", "src_dtype", "calls", "rows", "bytes_per_row", "src_row_bytes",
          "dst_row_bytes", "converting", "violations", "rows_unwritten", "detail"]
bad = 0
for spec in arms:
    name, exact = spec.split(":")
    try:
        a = np.fromfile(f"{d}/{name}.cpu.bin", dtype=np.float32).reshape(-1, V)
        b = np.fromfile(f"{d}/{name}.dev.bin", dtype=np.float32).reshape(-1, V)
        pa = json.load(open(f"{d}/{name}.cpu.json")); pb = json.load(open(f"{d}/{name}.dev.json"))
    except Exception as e:
        print(f"FAIL {name}: {e}"); bad += 1; continue
    diff = np.abs(a.astype(np.float64) - b)
    per = np.nan_to_num(diff, nan=np.inf).max(axis=1)
    # top-1 agreement at positions that are not near-ties (the CPU's lead > 0.1): a near-tie
    # flips under any reduction order (test_cuda.c, TOP1_MIN_GAP)
    srt = np.sort(a, axis=1)
    clear = (srt[:, -1] - srt[:, -2]) > 0.1
    top1 = float((a.argmax(1) == b.argmax(1))[clear].mean()) if clear.any() else 1.0
    if exact == "1":
        good = bool(np.isfinite(b).all()) and per.max() <= F32_ATOL
        rule = f"max|diff| <= {F32_ATOL}"
    elif exact == "replay":
        # not gated: the defect scrambles rows by their sorted position, so one routing flip
        # (a bf16-stream rounding-boundary crossing) moves many rows; the probes are the check
        good, rule = True, "informational"
    else:
        # at least half the positions must be clear, or the agreement would be measured on too few
        good = (bool(np.isfinite(b).all()) and np.median(per) <= BF16_MEDIAN and top1 >= BF16_TOP1
                and clear.sum() >= len(a) // 2)
        rule = f"median <= {BF16_MEDIAN}, top-1 >= {BF16_TOP1} of {int(clear.sum())} clear positions"
    print(f"{'ok  ' if good else 'FAIL'} logits {name:24s} max|diff| {per.max():.3g}  median {np.median(per):.3g}  "
          f"top-1 {top1:.3f}  ({rule})")
    bad += not good
    # probes: every field equal; the replay's unwritten-row count follows the routing (sign compared)
    fields = [f for f in FIELDS if not (exact == "replay" and f == "rows_unwritten")]
    perr = None
    if len(pa) != len(pb):
        perr = f"{len(pb)} CUDA records vs {len(pa)} CPU"
    for i, (p, q) in enumerate(zip(pa, pb)):
        diffs = [f for f in fields if p[f] != q[f]]
        if exact == "replay" and (p["rows_unwritten"] > 0) != (q["rows_unwritten"] > 0):
            diffs.append("rows_unwritten>0")
        if diffs and not perr:
            perr = f"record {i} ({p['site']} layer {p['layer']}): {', '.join(f'{f} cpu={p[f]!r} cuda={q[f]!r}' for f in diffs)}"
    if exact == "replay":
        sc = [q for q in pb if q["site"] == "moe.scatter"]
        if not sc or any(q["violations"] < 1 or q["rows_unwritten"] <= 0 for q in sc):
            perr = perr or "replay: the GPU's moe.scatter records do not all show the violation"
        else:
            print(f"ok   replay: moe.scatter violated on {len(sc)} MoE layers on the backend under test: {sc[0]['detail']}")
    print(f"{'ok  ' if not perr else 'FAIL'} probes {name:24s} {len(pb)} records" + (f": {perr}" if perr else " equal"))
    bad += perr is not None
sys.exit(1 if bad else 0)
EOF
else
  fail "CPU vs $DEV comparison not run: no numpy (apt-get install python3-numpy)"
fi

# ------------------------------------------------------------------ 5. an experiment into results.db
step "vtlab run experiments/bf16-stream.json with VT_BACKEND=$DEV -> $DB"
# counted before and after: the database may hold earlier invocations' runs
count_runs() { $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from runs where backend=? and status='FINISHED' and experiment='bf16-stream'\", (sys.argv[2],)).fetchone()[0])" "$DB" "$DEV" 2>/dev/null || echo 0; }
n0=$(count_runs)
# a hang guard sized to the device budget (the real run takes seconds on a GPU); the CPU
# self-test on a loaded machine takes longer, so there it only guards against a hang
RUN_LIMIT=$([ "$DEV" = cuda ] && echo 90 || echo 1800)
if VT_BACKEND=$DEV timeout $RUN_LIMIT ./vtlab run experiments/bf16-stream.json --db "$DB" --force; then
  ./vtlab runs --db "$DB" | tail -6
  n=$(( $(count_runs) - n0 ))
  if [ "$n" -eq 4 ]; then ok "experiment recorded in $DB (4 new FINISHED runs with backend $DEV)"
  else fail "$n new FINISHED runs with backend $DEV in $DB, expected 4 (one per arm)"; fi
else
  fail "vtlab run with VT_BACKEND=$DEV"
fi

# ------------------------------------------------------------------ 6. the full-size benchmark
if [ "$DEV" = cuda ]; then
  step "benchmark: model/configs/kimi-linear-48b-a3b.json, bf16 weights generated on the device"
  BENCH_EXP=bench-kimi-linear-48b-a3b
  timeout 150 "$OUT/bench_cuda" model/configs/kimi-linear-48b-a3b.json "$OUT/bench.json" 2048 32; rc=$?
else
  step "benchmark (GPU_CHECK_BACKEND=cpu): build/bench on the tiny model"
  BENCH_EXP=bench-tiny-f32
  # the four throughput phases only (no T-scaling, triad, contention or weights-loaded phases: a plumbing check)
  BENCH_TMAX=0 BENCH_TRIAD_MIB=0 BENCH_BUSY=0 BENCH_WEIGHTS=0 "$B/bench" "$OUT/tiny-f32" 32 --json "$OUT/bench.json"; rc=$?
fi
if [ $rc -eq 0 ]; then
  # the report becomes runs like any other (experiment bench-<model>, the backend, the device's name)
  if ./vtlab record-bench "$OUT/bench.json" --db "$DB"; then
    ./vtlab runs --db "$DB" --experiment "$BENCH_EXP"
    ok "bench: $OUT/bench.json, recorded in $DB"
  else
    fail "vtlab record-bench $OUT/bench.json"
  fi
else
  fail "benchmark exited $rc"
fi

step "done: $FAILS failed check(s); everything is under $OUT"
[ "$DEV" = cpu ] && echo "(GPU_CHECK_BACKEND=cpu: a self-test of this script; the CUDA backend was not exercised)"
[ "$FAILS" -eq 0 ]
